"""Issue 28: a consumer paused for its buffer when the connection is lost is consumed again by
the restore, in every adapter. The application lags (takes nothing), the buffer goes over
``buffer_size``, the router pauses the consumer with ``basic.cancel``: it is then not in the
topology the core recorded, and the restore used to leave it out ("its consumer was not
restored"). Here the embedded broker closes the connection by name while the consumer is
paused; after ``Recovered`` every message comes, on the same iterator."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Final

import pytest
import trio

import amqp_asyncio
import amqp_blocking
import amqp_trio
from amqp_broker import BrokerThread
from amqp_sansio.client import Recovered, RecoveryPolicy

if TYPE_CHECKING:
    from collections.abc import Callable

POLICY: Final = RecoveryPolicy(initial_delay=0.05, multiplier=1, jitter=0, max_duration=60)
NAME: Final = "paused-consumer"
QUEUE: Final = "paused-consumer-jobs"
COUNT: Final = 20
BUFFER: Final = 2
#: Bounds a hang, not a speed.
WITHIN: Final = 30


def _on_trio(url: str, close: Callable[[], None]) -> set[int]:
    async def main() -> set[int]:
        async with amqp_trio.connect(url, recovery=POLICY, connection_name=NAME) as conn:
            events = conn.recovery_events()
            async with conn.channel() as ch:
                await ch.queue_declare(QUEUE)
                for n in range(COUNT):
                    await ch.basic_publish(b"%d" % n, routing_key=QUEUE)
                got: set[int] = set()
                with trio.fail_after(WITHIN):
                    async with ch.basic_consume(QUEUE, buffer_size=BUFFER) as consumer:
                        while consumer.buffered <= BUFFER:  # over its bound: paused
                            await trio.sleep(0.01)
                        await trio.to_thread.run_sync(close)
                        async for event in events:
                            if isinstance(event, Recovered):
                                break
                        async for message in consumer:
                            got.add(int(message.body))
                            await message.ack()
                            if len(got) == COUNT:
                                break
                await ch.queue_delete(QUEUE)
                return got

    return trio.run(main)


def _on_asyncio(url: str, close: Callable[[], None]) -> set[int]:
    async def main() -> set[int]:
        async with amqp_asyncio.connect(url, recovery=POLICY, connection_name=NAME) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            await ch.queue_declare(QUEUE)
            for n in range(COUNT):
                await ch.basic_publish(b"%d" % n, routing_key=QUEUE)
            got: set[int] = set()
            async with asyncio.timeout(WITHIN):
                async with ch.basic_consume(QUEUE, buffer_size=BUFFER) as consumer:
                    while consumer.buffered <= BUFFER:
                        await asyncio.sleep(0.01)
                    await asyncio.to_thread(close)
                    async for event in events:
                        if isinstance(event, Recovered):
                            break
                    async for message in consumer:
                        got.add(int(message.body))
                        await message.ack()
                        if len(got) == COUNT:
                            break
            await ch.queue_delete(QUEUE)
            return got

    return asyncio.run(main())


def _on_blocking(url: str, close: Callable[[], None]) -> set[int]:
    with amqp_blocking.connect(url, recovery=POLICY, connection_name=NAME) as conn:
        events = conn.recovery_events()
        with conn.channel() as ch:
            ch.queue_declare(QUEUE)
            for n in range(COUNT):
                ch.basic_publish(b"%d" % n, routing_key=QUEUE)
            got: set[int] = set()
            with ch.basic_consume(QUEUE, buffer_size=BUFFER) as consumer:
                for _ in range(WITHIN * 100):
                    if consumer.buffered > BUFFER:
                        break
                    events.get(0.01)  # nothing comes yet: a bounded wait
                close()
                event = events.get(WITHIN)
                while not isinstance(event, Recovered):
                    assert event is not None, "no Recovered"
                    event = events.get(WITHIN)
                while len(got) < COUNT:
                    message = consumer.get(WITHIN)
                    assert message is not None, f"stalled after {sorted(got)}"
                    got.add(int(message.body))
                    message.ack()
            ch.queue_delete(QUEUE)
            return got


RUNNERS: Final = {"trio": _on_trio, "asyncio": _on_asyncio, "blocking": _on_blocking}


@pytest.mark.parametrize("adapter", sorted(RUNNERS))
def test_a_consumer_paused_at_the_loss_consumes_again(adapter: str) -> None:
    with BrokerThread() as broker:
        got = RUNNERS[adapter](broker.url, lambda: _close(broker))
    assert got == set(range(COUNT))


def _close(broker: BrokerThread) -> None:
    assert broker.close_connection(NAME) == 1
