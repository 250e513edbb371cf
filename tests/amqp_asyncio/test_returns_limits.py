"""amqp_asyncio: returns outside confirm mode reach the channel's on_return handler; the URL's
max_message_size caps what the client accepts."""

from __future__ import annotations

import asyncio
import logging

import pytest

import amqp_asyncio
from amqp_sansio import BasicProperties
from amqp_sansio.client import MessageReturnedError, ResourceError

UNROUTABLE = "amqp-sansio-test-no-such-queue"


def with_query(url: str, query: str) -> str:
    return url + ("&" if "?" in url else "?") + query


def test_return_without_confirms_reaches_the_handler(amqp_url: str) -> None:
    async def main() -> None:
        async with amqp_asyncio.connect(amqp_url) as conn, conn.channel() as ch:
            returns: asyncio.Queue[MessageReturnedError] = asyncio.Queue()
            ch.on_return(returns.put_nowait)
            await ch.basic_publish(
                b"lost",
                routing_key=UNROUTABLE,
                mandatory=True,
                properties=BasicProperties(message_id="m1"),
            )
            returned = await asyncio.wait_for(returns.get(), 10)
            assert (returned.reply_code, returned.reply_text) == (312, "NO_ROUTE")
            assert returned.publish_number is None
            assert returned.message.body == b"lost"
            assert returned.message.routing_key == UNROUTABLE
            assert returned.message.properties.message_id == "m1"
            # in confirm mode the return is the publish's outcome, not the handler's
            await ch.confirm_select()
            with pytest.raises(MessageReturnedError):
                await ch.basic_publish(b"x", routing_key=UNROUTABLE, mandatory=True)
            assert returns.empty()

    asyncio.run(main())


def test_failing_handler_is_logged_and_the_channel_stays_usable(
    amqp_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    def handler(error: MessageReturnedError) -> None:
        raise RuntimeError("handler bug")

    async def main() -> None:
        async with amqp_asyncio.connect(amqp_url) as conn, conn.channel() as ch:
            queue = (await ch.queue_declare(exclusive=True)).queue
            ch.on_return(handler)
            await ch.basic_publish(b"lost", routing_key=UNROUTABLE, mandatory=True)
            await ch.basic_publish(b"kept", routing_key=queue)
            async with ch.basic_consume(queue) as consumer:  # ordered after the return
                message = await consumer.get(timeout=10)
                assert message is not None
                assert message.body == b"kept"
                await message.ack()

    with caplog.at_level(logging.ERROR, logger="amqp_sansio.client"):
        asyncio.run(main())
    assert any("on_return handler" in r.getMessage() for r in caplog.records)


def test_max_message_size_in_the_url_caps_inbound_messages(amqp_url: str) -> None:
    async def main() -> None:
        url = with_query(amqp_url, "max_message_size=10")
        async with amqp_asyncio.connect(url) as conn, conn.channel() as ch:
            queue = (await ch.queue_declare(exclusive=True)).queue
            await ch.basic_publish(b"x" * 10, routing_key=queue)
            async with ch.basic_consume(queue) as consumer:
                message = await consumer.get(timeout=10)
                assert message is not None
                assert message.body == b"x" * 10  # at the cap: accepted
                await message.ack()
                await ch.basic_publish(b"x" * 11, routing_key=queue)
                await consumer.get(timeout=10)

    with pytest.raises(ResourceError, match="over max_message_size 10") as info:
        asyncio.run(main())
    assert info.value.reply_code == 506
