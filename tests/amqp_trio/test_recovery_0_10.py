"""AMQP 0-10 connections recover through the same supervisor as 0-9-1's, in each adapter
(amqp_trio, amqp_asyncio, amqp_blocking): the embedded broker is killed and started again on
the same port; the session's queue is declared again, its subscription carries on with the same
object, and a message published after the restart arrives there with the new epoch."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Final, Protocol

import trio

import amqp_asyncio
import amqp_blocking
import amqp_trio
from amqp_sansio.client import Recovered, RecoveryAttempt, RecoveryLost, RecoveryPolicy

from ..support.restartable import restartable_broker
from ..support.scenarios import unique

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

    from ..support.restartable import RestartableBroker

POLICY: Final = RecoveryPolicy(initial_delay=0.1, multiplier=1, jitter=0, max_duration=60)
PROTOCOLS: Final = ("--protocols", "0-9-1,0-10")
WAIT: Final = 30.0


class _Message(Protocol):
    @property
    def body(self) -> bytes: ...

    @property
    def epoch(self) -> int: ...

    def accept(self) -> None: ...


class _Subscription(Protocol):
    async def get(self, timeout: float | None = None) -> _Message | None: ...


class _Session(Protocol):
    async def queue_declare(self, queue: str) -> object: ...

    async def queue_delete(self, queue: str) -> object: ...

    async def transfer(self, destination: str, body: bytes, *, routing_key: str) -> object: ...

    async def subscribe(self, queue: str) -> _Subscription: ...


async def _recovered(events: AsyncIterator[object]) -> Recovered:
    event = await anext(events)
    assert isinstance(event, RecoveryLost), event
    event = await anext(events)
    while isinstance(event, RecoveryAttempt):  # refused while it was down
        event = await anext(events)
    assert isinstance(event, Recovered), event
    return event


async def _carry_on(
    session: _Session,
    events: AsyncIterator[object],
    broker: RestartableBroker,
    in_thread: Callable[[Callable[[], None]], Awaitable[object]],
) -> None:
    queue = unique("recover-0-10")
    await session.queue_declare(queue)
    sub = await session.subscribe(queue)
    await session.transfer("", b"before", routing_key=queue)
    before = await sub.get(WAIT)
    assert before is not None
    assert (before.body, before.epoch) == (b"before", 0)
    before.accept()
    await in_thread(broker.kill)
    await in_thread(lambda: broker.start(*PROTOCOLS))
    recovered = await _recovered(events)
    assert recovered.epoch == 1
    # the restarted broker is empty: the queue exists again because the restore declared it
    await session.transfer("", b"after", routing_key=queue)
    after = await sub.get(WAIT)
    assert after is not None
    assert (after.body, after.epoch) == (b"after", 1)
    after.accept()
    await session.queue_delete(queue)


@contextlib.contextmanager
def _broker() -> Iterator[RestartableBroker]:
    with restartable_broker() as broker:
        broker.kill()
        broker.start(*PROTOCOLS)
        yield broker


def test_trio_0_10_recovers_after_a_broker_restart() -> None:
    with _broker() as broker:

        async def main() -> None:
            with trio.fail_after(120):
                async with amqp_trio.connect(broker.url, protocol="0-10", recovery=POLICY) as conn:
                    events = conn.recovery_events()
                    async with conn.session() as session:
                        await _carry_on(session, events, broker, trio.to_thread.run_sync)

        trio.run(main)


def test_asyncio_0_10_recovers_after_a_broker_restart() -> None:
    with _broker() as broker:

        async def main() -> None:
            async with (
                asyncio.timeout(120),
                amqp_asyncio.connect(broker.url, protocol="0-10", recovery=POLICY) as conn,
            ):
                events = conn.recovery_events()
                async with conn.session() as session:
                    await _carry_on(session, events, broker, asyncio.to_thread)

        asyncio.run(main())


def test_blocking_0_10_recovers_after_a_broker_restart() -> None:
    with (
        _broker() as broker,
        amqp_blocking.connect(broker.url, protocol="0-10", recovery=POLICY) as conn,
    ):
        events = conn.recovery_events()
        with conn.session() as session:
            queue = unique("recover-0-10")
            session.queue_declare(queue)
            sub = session.subscribe(queue)
            session.transfer("", b"before", routing_key=queue)
            before = sub.get(WAIT)
            assert before is not None
            assert (before.body, before.epoch) == (b"before", 0)
            before.accept()
            broker.kill()
            broker.start(*PROTOCOLS)
            event = next(events)
            assert isinstance(event, RecoveryLost), event
            event = next(events)
            while isinstance(event, RecoveryAttempt):
                event = next(events)
            assert isinstance(event, Recovered), event
            assert event.epoch == 1
            session.transfer("", b"after", routing_key=queue)
            after = sub.get(WAIT)
            assert after is not None
            assert (after.body, after.epoch) == (b"after", 1)
            after.accept()
            session.queue_delete(queue)
