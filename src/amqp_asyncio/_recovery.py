"""Connection recovery for amqp_asyncio, both protocol families: the asyncio side of the client
layer's :class:`~amqp_sansio.client.RecoverySupervisor`, which decides everything (when to try,
where, what to restore, when to give up). Here is only what carries its actions out: the task
that waits and attempts, the wait of a call made while recovering, and the events."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING, Generic, TypeVar, final

from amqp_sansio.client import (
    AMQPError,
    Connect,
    GiveUp,
    RecoveryEvent,
    RecoveryState,
    RecoverySupervisor,
    Wait,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["RecoveryEvents", "RecoveryObservable", "carry_out", "wait_for_recovery"]

N = TypeVar("N")
B = TypeVar("B")


@final
class RecoveryEvents:
    """The recovery events of a :class:`Connection010`, as an async iterator; it ends when the
    connection is closed for good. At most 1,000 wait: older ones are dropped."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._events: deque[RecoveryEvent] = deque(maxlen=1000)
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False

    def __aiter__(self) -> RecoveryEvents:
        return self

    async def __anext__(self) -> RecoveryEvent:
        while not self._events:
            if self._closed:
                raise StopAsyncIteration
            waiter = self._waiter = self._loop.create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        return self._events.popleft()

    def _push(self, event: RecoveryEvent) -> None:
        self._events.append(event)
        self._wake()

    def _close(self) -> None:
        self._closed = True
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class RecoveryObservable(Generic[N, B]):
    """What a recovering connection of either protocol family shows: its state, its epoch and
    its events (the supervisor emits them through :meth:`_emit`)."""

    _supervisor: RecoverySupervisor[N, B]
    _subscribers: set[RecoveryEvents]
    _loop: asyncio.AbstractEventLoop

    @property
    def recovery_state(self) -> RecoveryState:
        """``OPEN``, ``RECOVERING`` (lost, reconnecting) or ``CLOSED`` (for good)."""
        return self._supervisor.state

    @property
    def epoch(self) -> int:
        """0 for the first connection, +1 each time one was lost (deliveries carry theirs)."""
        return self._supervisor.epoch.current

    def recovery_events(self) -> RecoveryEvents:
        """An async iterator over the recovery events from now on (lost, attempt,
        recovered, gave up); it ends when the connection is closed for good."""
        events = RecoveryEvents(self._loop)
        if self._supervisor.state is RecoveryState.CLOSED:
            events._close()
        else:
            self._subscribers.add(events)
        return events

    def _emit(self, event: RecoveryEvent) -> None:
        for subscriber in self._subscribers:
            subscriber._push(event)

    def _set_closed(self) -> None:
        if self._supervisor.state is not RecoveryState.CLOSED:
            self._supervisor.closed()
        subscribers, self._subscribers = self._subscribers, set()
        for subscriber in subscribers:
            subscriber._close()


async def carry_out(
    supervisor: RecoverySupervisor[N, B],
    loop: asyncio.AbstractEventLoop,
    attempt: Callable[[Connect], Awaitable[None]],
    end_attempt: Callable[[], None],
    give_up: Callable[[AMQPError], None],
) -> None:
    """Carry out *supervisor*'s actions, for either protocol family, until an *attempt*
    resumed (it returned) or recovery gave up; a failed attempt (it raised) is ended with
    *end_attempt* and reported."""
    while True:
        action = supervisor.next_action(loop.time())
        if isinstance(action, Wait):
            await asyncio.sleep(action.until - loop.time())
            continue
        if isinstance(action, GiveUp):
            give_up(action.cause)
            return
        assert isinstance(action, Connect)
        try:
            await attempt(action)
        except (OSError, AMQPError) as exc:
            timed_out = isinstance(exc, TimeoutError) and loop.time() >= action.deadline
            end_attempt()
            supervisor.attempt_failed(supervisor.timeout_error() if timed_out else exc, loop.time())
            continue
        return


async def wait_for_recovery(
    supervisor: RecoverySupervisor[N, B],
    publish_wait: float,
    recovered: asyncio.Future[None],
    octets: int = 0,
) -> None:
    """While recovering (*recovered* resolves when it ends): wait for the connection to come
    back, up to the policy's *publish_wait* (0: fail at once), with at most ``publish_buffer``
    octets waiting."""
    supervisor.admit(octets)
    try:
        async with asyncio.timeout(publish_wait):
            await asyncio.shield(recovered)
    except TimeoutError:
        raise supervisor.wait_expired() from None
    finally:
        supervisor.release(octets)
