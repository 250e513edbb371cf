"""amqp_asyncio's Consumer.get: the next message with a timeout, losing nothing to the timeout."""

from __future__ import annotations

import asyncio

import amqp_asyncio


def test_get_returns_messages_then_none_on_timeout_and_loses_nothing(amqp_url: str) -> None:
    async def main() -> None:
        async with amqp_asyncio.connect(amqp_url) as conn, conn.channel() as ch:
            queue = (await ch.queue_declare(exclusive=True)).queue
            await ch.confirm_select()
            await ch.basic_publish(b"one", routing_key=queue)
            async with ch.basic_consume(queue) as consumer:
                first = await consumer.get(timeout=10)
                assert first is not None
                assert first.body == b"one"
                await first.ack()
                assert await consumer.get(timeout=0.05) is None  # nothing there: no error
                await ch.basic_publish(b"two", routing_key=queue)
                second = await consumer.get(timeout=10)
                assert second is not None
                assert second.body == b"two"
                await second.ack()
                await ch.basic_cancel(consumer.consumer_tag)
                assert await consumer.get() is None  # ended: None at once, no wait

    asyncio.run(main())
