"""``RecoveryPolicy(reopen_channels=True)`` against RabbitMQ: a passive declare of a missing queue
(404, a channel error) still raises, and the same channel object carries on under a new channel
with its QoS, confirm mode and consumer; a delivery that came before cannot be settled, and the
broker redelivers it to the same iterator. Without the option the channel stays closed."""

from __future__ import annotations

import asyncio

import pytest

import amqp_asyncio
from amqp_asyncio import (
    ChannelReopened,
    NotFound,
    RecoveryPolicy,
    StaleDeliveryError,
)

from ..support.scenarios import unique

pytestmark = pytest.mark.rabbitmq


async def _reopened(url: str) -> None:
    queue = unique("reopen")
    async with amqp_asyncio.connect(url, recovery=RecoveryPolicy(reopen_channels=True)) as conn:
        events = conn.recovery_events()
        ch = await conn.open_channel()
        try:
            await ch.queue_declare(queue)
            await ch.basic_qos(prefetch_count=1)
            await ch.confirm_select()
            async with ch.basic_consume(queue) as consumer:
                await ch.basic_publish(b"first", routing_key=queue)
                first = await anext(consumer)
                number = ch.number

                with pytest.raises(NotFound):
                    await ch.queue_declare(unique("missing"), passive=True)
                event = await anext(events)
                assert isinstance(event, ChannelReopened)
                assert event.channel == number
                assert event.new_channel == ch.number
                assert isinstance(event.cause, NotFound)
                assert not ch.is_closed

                # Its tag named a delivery of the closed channel: refused, never sent.
                with pytest.raises(StaleDeliveryError, match="channel the broker closed"):
                    await first.ack()
                again = await anext(consumer)  # requeued at the close, to the same iterator
                assert (again.body, again.redelivered) == (b"first", True)

                # Confirm mode is back (the publish returns on its ack), and so is the QoS:
                # with one delivery unacked, the next waits in the queue.
                await ch.basic_publish(b"second", routing_key=queue)
                ok = await ch.queue_declare(queue, passive=True)
                assert (ok.consumer_count, ok.message_count) == (1, 1)
                await again.ack()
                second = await anext(consumer)
                assert second.body == b"second"
                await second.ack()
        finally:
            async with conn.channel() as cleanup:
                await cleanup.queue_delete(queue)


async def _stays_closed(url: str) -> None:
    async with amqp_asyncio.connect(url, recovery=RecoveryPolicy()) as conn:
        ch = await conn.open_channel()
        with pytest.raises(NotFound):
            await ch.queue_declare(unique("missing"), passive=True)
        assert ch.is_closed
        with pytest.raises(NotFound):
            await ch.queue_declare(unique("missing"))


def test_a_channel_closed_by_a_channel_error_is_reopened(rabbitmq_url: str) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(60):
            await _reopened(rabbitmq_url)

    asyncio.run(bounded())


def test_without_reopen_channels_it_stays_closed(rabbitmq_url: str) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(60):
            await _stays_closed(rabbitmq_url)

    asyncio.run(bounded())
