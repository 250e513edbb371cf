"""amqp_asyncio's publisher(): an async context manager giving the publisher; used as the
publisher itself (amqp_blocking's shape) it is a TypeError that says what to write."""

from __future__ import annotations

import asyncio

import pytest

import amqp_asyncio


def test_publisher_used_as_the_publisher_says_what_to_write(amqp_url: str) -> None:
    async def main() -> None:
        async with amqp_asyncio.connect(amqp_url) as conn, conn.channel() as ch:
            queue = (await ch.queue_declare(exclusive=True)).queue
            block = ch.publisher(window=10)
            with pytest.raises(TypeError, match=r"async with channel\.publisher\(window=\.\.\.\)"):
                block.publish  # type: ignore[attr-defined]  # noqa: B018
            async with block as pub:  # the block itself is the context manager
                ticket = await pub.publish(b"one", routing_key=queue)
            assert ticket.done
            assert (pub.confirmed, pub.failed) == (1, 0)
            assert (await ch.queue_declare(queue, passive=True)).message_count == 1

    asyncio.run(main())
