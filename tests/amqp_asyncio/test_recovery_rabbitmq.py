"""amqp_asyncio's recovery against RabbitMQ: the connection, found by its name, is closed with
``rabbitmqctl close_connection`` (320) again and again during pipelined confirmed publishing and
consuming. No confirmed message is lost, the consumer resumes on every new connection, and the
publishes whose outcome the closes made unknown are counted and published again."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Final

import pytest

import amqp_asyncio
from amqp_asyncio import (
    ConnectionForced,
    PublishOutcomeUnknownError,
    Recovered,
    RecoveryLost,
    RecoveryPolicy,
    StaleDeliveryError,
)

from ..support.rabbitmqctl import connection_pid, rabbitmqctl
from ..support.scenarios import unique

if TYPE_CHECKING:
    from amqp_asyncio import Message, PublishTicket

pytestmark = pytest.mark.rabbitmq

#: Forced closes: each costs two rabbitmqctl calls (find the connection, close it), about a
#: second of CPU each.
CLOSES: Final = 20
MESSAGES: Final = 2000
_TIMEOUT: Final = 300


async def _forced_closes(url: str) -> None:
    name = unique("recovery")
    queue = unique("recovery-q")
    policy = RecoveryPolicy(initial_delay=0.05, multiplier=1, jitter=0, max_duration=60)
    received: set[int] = set()
    stale = 0
    async with amqp_asyncio.connect(url, connection_name=name, recovery=policy) as conn:
        events = conn.recovery_events()
        pub_ch = await conn.open_channel()
        sub_ch = await conn.open_channel()
        await pub_ch.queue_declare(queue)
        await sub_ch.basic_qos(100)

        async def consume() -> None:
            nonlocal stale
            async with sub_ch.basic_consume(queue) as consumer:
                message: Message
                async for message in consumer:
                    received.add(int(message.body))
                    try:
                        await message.ack()
                    except StaleDeliveryError:
                        stale += 1  # handed out before a close: the broker redelivers it

        async def close_repeatedly(progress: list[int]) -> list[Recovered]:
            recoveries: list[Recovered] = []
            for _ in range(CLOSES):
                mark = progress[0]
                while progress[0] < mark + MESSAGES // (CLOSES * 2):
                    await asyncio.sleep(0.01)
                pid = await asyncio.to_thread(connection_pid, name)
                await asyncio.to_thread(rabbitmqctl, "close_connection", pid, "test")
                lost = await anext(events)
                assert isinstance(lost, RecoveryLost)
                assert isinstance(lost.cause, ConnectionForced)
                recovered = await anext(events)
                assert isinstance(recovered, Recovered), recovered
                recoveries.append(recovered)
            return recoveries

        consumer = asyncio.create_task(consume())
        progress = [0]
        closer = asyncio.create_task(close_repeatedly(progress))
        confirmed: set[int] = set()
        unknown = 0
        pending = list(range(MESSAGES))
        async with pub_ch.publisher(window=50) as publisher:
            while pending:
                tickets: list[tuple[int, PublishTicket]] = []
                for ident in pending:
                    # Each ticket carries its outcome: the publisher's kept copies are
                    # dropped, or a close with a full window of unknown outcomes in flight
                    # would pile up `window` of them and the next publish would raise them.
                    publisher.take_failures()
                    tickets.append(
                        (ident, await publisher.publish(b"%d" % ident, routing_key=queue))
                    )
                    progress[0] += 1
                await publisher.wait_for_confirms()
                pending = []
                for ident, ticket in tickets:
                    if ticket.error is None:
                        confirmed.add(ident)
                    else:
                        assert isinstance(ticket.error, PublishOutcomeUnknownError), ticket.error
                        unknown += 1
                        pending.append(ident)  # at least once: publish it again
                publisher.take_failures()
                if not pending and not closer.done():
                    pending = [MESSAGES + len(confirmed)]  # keep traffic until the closes end
            recoveries = await closer
        assert len(recoveries) == CLOSES
        assert publisher.unknown == unknown
        assert [r.epoch for r in recoveries] == list(range(1, CLOSES + 1))
        assert sum(r.unknown_publishes for r in recoveries) == unknown
        while not confirmed <= received:
            await asyncio.sleep(0.05)
        consumer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await consumer
        await pub_ch.queue_delete(queue)
    assert set(range(MESSAGES)) <= confirmed
    print(f"{CLOSES} forced closes: {unknown} unknown outcomes republished, {stale} stale acks")


def test_forced_closes_lose_no_confirmed_message(rabbitmq_url: str) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(_TIMEOUT):
            await _forced_closes(rabbitmq_url)

    asyncio.run(bounded())
