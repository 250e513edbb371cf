"""Connection recovery for amqp_blocking, both protocol families: the I/O thread's side of the
client layer's :class:`~amqp_sansio.client.RecoverySupervisor`, which decides everything (when
to try, where, what to restore, when to give up). Here is only what carries its actions out on
the I/O thread, the wait of a call made while recovering, and the events."""

from __future__ import annotations

import threading
import time
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
    import logging
    from collections.abc import Callable, Iterator

__all__ = ["RecoveryEvents", "RecoveryObservable", "carry_out", "wait_for_recovery_locked"]

N = TypeVar("N")
B = TypeVar("B")


@final
class RecoveryEvents:
    """The recovery events of a :class:`Connection` (from
    :meth:`Connection.recovery_events`), as an iterator that blocks for the next one; it ends
    when the connection is closed for good. At most 1,000 wait: older ones are dropped."""

    def __init__(self) -> None:
        self._events: deque[RecoveryEvent] = deque(maxlen=1000)
        self._cond = threading.Condition(threading.Lock())
        self._closed = False

    def __iter__(self) -> Iterator[RecoveryEvent]:
        return self

    def __next__(self) -> RecoveryEvent:
        event = self.get()
        if event is None:
            raise StopIteration
        return event

    def get(self, timeout: float | None = None) -> RecoveryEvent | None:
        """The next event; None after *timeout* seconds without one, or once closed."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._events or self._closed, timeout):
                return None
            return self._events.popleft() if self._events else None

    def _push(self, event: RecoveryEvent) -> None:
        with self._cond:
            self._events.append(event)
            self._cond.notify_all()

    def _close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


class RecoveryObservable(Generic[N, B]):
    """What a recovering connection of either protocol family shows: its state, its epoch and
    its events, told to listeners on the I/O thread (the supervisor emits them through
    :meth:`_emit_locked`, the connection's lock held)."""

    _supervisor: RecoverySupervisor[N, B]
    _listeners: list[Callable[[RecoveryEvent], None]]
    # A condition over the connection's lock (taking it takes the lock).
    _events_guard: threading.Condition
    _logger: logging.Logger

    @property
    def recovery_state(self) -> RecoveryState:
        """``OPEN``, ``RECOVERING`` (lost, reconnecting) or ``CLOSED`` (for good)."""
        return self._supervisor.state

    @property
    def epoch(self) -> int:
        """0 for the first connection, +1 each time one was lost (deliveries carry theirs)."""
        return self._supervisor.epoch.current

    def on_recovery(self, callback: Callable[[RecoveryEvent], None]) -> None:
        """Call *callback* with each recovery event (lost, attempt, recovered, gave up), from
        the I/O thread: it must not block or call the connection."""
        with self._events_guard:
            self._listeners.append(callback)

    def recovery_events(self) -> RecoveryEvents:
        """An iterator over the recovery events from now on; it ends when the connection is
        closed for good."""
        events = RecoveryEvents()
        with self._events_guard:
            if self._supervisor.state is RecoveryState.CLOSED:
                events._close()
            else:
                self._listeners.append(events._push)
        return events

    def _emit_locked(self, event: RecoveryEvent) -> None:
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:
                self._logger.exception("a recovery event listener failed")

    def _set_closed_locked(self) -> None:
        if self._supervisor.state is not RecoveryState.CLOSED:
            self._supervisor.closed()
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            owner = getattr(listener, "__self__", None)
            if isinstance(owner, RecoveryEvents):
                owner._close()


def carry_out(
    supervisor: RecoverySupervisor[N, B],
    lock: threading.Condition,
    stop: threading.Event,
    attempt: Callable[[Connect], None],
    give_up_locked: Callable[[AMQPError], None],
    closed: Callable[[], bool],
) -> bool:
    """Carry out *supervisor*'s actions on the I/O thread, for either protocol family, until
    an *attempt* resumed (True: it returned) or recovery gave up or the application closed
    (False; *stop* is set by a close, *closed* says so under *lock*, a condition over the
    connection's lock). A failed attempt raised."""
    while True:
        with lock:
            if closed():
                return False
            action = supervisor.next_action(time.monotonic())
            if isinstance(action, GiveUp):
                give_up_locked(action.cause)
                return False
        if isinstance(action, Wait):
            if stop.wait(max(action.until - time.monotonic(), 0.0)):
                return False
            continue
        assert isinstance(action, Connect)
        try:
            attempt(action)
        except (OSError, AMQPError) as exc:
            with lock:
                timed_out = isinstance(exc, TimeoutError) and time.monotonic() >= action.deadline
                failed = supervisor.timeout_error() if timed_out else exc
                supervisor.attempt_failed(failed, time.monotonic())
            continue
        return True


def wait_for_recovery_locked(
    supervisor: RecoverySupervisor[N, B],
    publish_wait: float,
    condition: threading.Condition,
    recovering: Callable[[], bool],
    octets: int = 0,
) -> None:
    """While *recovering* (the caller holds *condition*'s lock; it is released while waiting):
    wait for the connection to come back, up to the policy's *publish_wait* (0: fail at once),
    with at most ``publish_buffer`` octets waiting."""
    supervisor.admit(octets)
    try:
        if not condition.wait_for(lambda: not recovering(), publish_wait):
            raise supervisor.wait_expired()
    finally:
        supervisor.release(octets)
