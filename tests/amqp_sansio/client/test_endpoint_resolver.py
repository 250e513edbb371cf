"""Issue 30: ``connect()`` takes an endpoint resolver (a callable, as the Java client's
``AddressResolver``) in every adapter. The first connect walks what it gives; when the node in
use goes, recovery asks it again and reaches the node the registry names now, topology
restored there. Two embedded brokers; the "registry" is a list the test changes."""

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

POLICY: Final = RecoveryPolicy(initial_delay=0.1, multiplier=1, jitter=0, max_duration=60)
QUEUE: Final = "resolved-jobs"
#: Bounds a hang, not a speed.
WITHIN: Final = 60


def _address(url: str) -> str:
    return url.split("@", 1)[1].split("/", 1)[0]


#: What each runner saw: the address of the first connect, that of the recovery, and the
#: queue's message count after it (declared before the loss: restored on the new node).
Seen = tuple[str, str, int]


def _on_trio(resolve: Callable[[], list[str]], move: Callable[[], None]) -> Seen:
    async def main() -> Seen:
        async with amqp_trio.connect(resolve, recovery=POLICY) as conn, conn.channel() as ch:
            first = conn.address
            events = conn.recovery_events()
            await ch.queue_declare(QUEUE)
            await trio.to_thread.run_sync(move)
            with trio.fail_after(WITHIN):
                async for event in events:
                    if isinstance(event, Recovered):
                        break
            ok = await ch.queue_declare(QUEUE, passive=True)
            await ch.queue_delete(QUEUE)
            return first, conn.address, ok.message_count

    return trio.run(main)


def _on_asyncio(resolve: Callable[[], list[str]], move: Callable[[], None]) -> Seen:
    async def main() -> Seen:
        async with amqp_asyncio.connect(resolve, recovery=POLICY) as conn, conn.channel() as ch:
            first = conn.address
            events = conn.recovery_events()
            await ch.queue_declare(QUEUE)
            await asyncio.to_thread(move)
            async with asyncio.timeout(WITHIN):
                async for event in events:
                    if isinstance(event, Recovered):
                        break
            ok = await ch.queue_declare(QUEUE, passive=True)
            await ch.queue_delete(QUEUE)
            return first, conn.address, ok.message_count

    return asyncio.run(main())


def _on_blocking(resolve: Callable[[], list[str]], move: Callable[[], None]) -> Seen:
    with amqp_blocking.connect(resolve, recovery=POLICY) as conn, conn.channel() as ch:
        first = conn.address
        events = conn.recovery_events()
        ch.queue_declare(QUEUE)
        move()
        event = events.get(WITHIN)
        while not isinstance(event, Recovered):  # the loss, attempts that failed
            assert event is not None, "no Recovered"
            event = events.get(WITHIN)
        ok = ch.queue_declare(QUEUE, passive=True)
        ch.queue_delete(QUEUE)
        return first, conn.address, ok.message_count


RUNNERS: Final = {"trio": _on_trio, "asyncio": _on_asyncio, "blocking": _on_blocking}


@pytest.mark.parametrize("adapter", sorted(RUNNERS))
def test_recovery_asks_the_resolver_and_reaches_the_node_it_names_now(adapter: str) -> None:
    first, second = BrokerThread(), BrokerThread()
    first_url, second_url = first.start(), second.start()
    registry = [first_url]
    asked: list[list[str]] = []

    def resolve() -> list[str]:
        asked.append(list(registry))
        return list(registry)

    def move() -> None:
        registry[:] = [second_url]  # the service moved; then its old node goes
        first.stop()

    try:
        seen = RUNNERS[adapter](resolve, move)
    finally:
        first.stop()
        second.stop()
    assert seen == (_address(first_url), _address(second_url), 0)
    # once by connect(), then at the start of each round of recovery attempts
    assert asked[0] == [first_url]
    assert asked[1:]
    assert all(each == [second_url] for each in asked[1:])
