"""Connection recovery for amqp_trio: the half of :class:`~amqp_trio.Connection` that reconnects
under a :class:`~amqp_sansio.client.RecoveryPolicy` and restores the topology with the client
layer's plan, while channels, consumer iterators and publishers carry on."""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING, Final, final

import trio

import amqp_sansio
from amqp_sansio import ChannelOpened, Role
from amqp_sansio.client import (
    AMQPError,
    ChannelBook,
    ChannelReopened,
    ConnectionParameters,
    Epoch,
    Recovered,
    RecoveryEvent,
    RecoveryLost,
    RecoveryPlan,
    RecoveryPolicy,
    RecoveryState,
    Router,
    TopologyRestorer,
    connection_parameters,
    end_suspended,
)

from ._wire import Wire

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from amqp_sansio import Event, Topology
    from amqp_sansio.client import Telemetry

    from ._channel import Channel

__all__ = ["Recovering", "RecoveryEvents"]

logger: Final = logging.getLogger("amqp_trio")


@final
class RecoveryEvents:
    """The recovery events of a :class:`~amqp_trio.Connection` (from
    :meth:`~amqp_trio.Connection.recovery_events`), as an async iterator; it ends when the
    connection is closed for good. At most 1,000 wait: older ones are dropped."""

    def __init__(self) -> None:
        self._events: deque[RecoveryEvent] = deque(maxlen=1000)
        self._wake = trio.Event()
        self._closed = False

    def __aiter__(self) -> RecoveryEvents:
        return self

    async def __anext__(self) -> RecoveryEvent:
        while not self._events:
            if self._closed:
                raise StopAsyncIteration
            await self._wake.wait()
            self._wake = trio.Event()
        return self._events.popleft()

    def _push(self, event: RecoveryEvent) -> None:
        self._events.append(event)
        self._wake.set()

    def _close(self) -> None:
        self._closed = True
        self._wake.set()


@final
class _Attempt:
    """One recovery attempt on a freshly opened stream: wait for the handshake, run the plan,
    then put the channels back to work."""

    def __init__(
        self,
        conn: Recovering,
        params: ConnectionParameters,
        attempt: int,
        topology: Topology,
        channels: dict[int, Channel],
        books: dict[int, ChannelBook],
        unknown: int,
    ) -> None:
        self.conn = conn
        self.unknown = unknown
        self.params = params
        self.attempt = attempt
        self.channels = channels
        self.books = books
        policy = conn._policy
        assert policy is not None
        self.plan = RecoveryPlan(
            topology,
            channels=list(channels),
            confirm_channels=[n for n, b in books.items() if b.confirm_mode],
            policy=policy,
        )
        self.restorer = TopologyRestorer(conn._core, self.plan, policy)
        self.done = trio.Event()
        self.error: BaseException | None = None
        self.recovered: Recovered | None = None

    def handle(self, event: Event) -> bool:
        """The reader's events while restoring: the restorer's first."""
        restorer = self.restorer
        try:
            taken = restorer.handle(event)
        except AMQPError as exc:
            self.error = exc
            self.done.set()
            return False  # the router still sees connection-level ends
        if taken and type(event) is ChannelOpened:
            assert isinstance(event, ChannelOpened)
            old = next(o for o, n in restorer.channel_map.items() if n == event.channel)
            self.conn._router.channel_reopened(event.channel, self.books.get(old))
        if restorer.done:
            self.done.set()
        return taken

    async def run(self) -> None:
        conn = self.conn
        try:
            with trio.fail_after(self.params.connection_timeout):
                await conn._opened.wait()
                if conn._router.error is not None:
                    raise conn._router.error
                conn._restoring = self
                self.restorer.start()
                conn._wire.schedule_flush()
                if self.restorer.done:
                    self.done.set()
                await self.done.wait()
            if self.error is not None:
                raise self.error
        except (AMQPError, trio.TooSlowError) as exc:
            self.error = exc
            conn._restoring = None
            await conn._wire.close_transport()
            conn._wire.end_of_stream()
            return
        conn._restoring = None
        router = conn._router
        republished = 0
        for old, ch in self.channels.items():
            number = self.restorer.channel_map[old]
            book = router.channels[number]
            ch._rebind(book)
            conn._channels[number] = ch
            sent, ended = router.resume(self.books.get(old), book)
            republished += sent
            self.unknown += ended
        for lost in self.books.values():
            lost.consumers = {}
        self.recovered = Recovered(
            attempt=self.attempt,
            epoch=conn._epoch.current,
            renamed_queues=dict(self.plan.renamed),
            unknown_publishes=self.unknown,
            skipped=tuple(self.plan.skipped),
            republished=republished,
        )
        conn._recovering = False
        conn._lost_books = {}
        conn._state = RecoveryState.OPEN
        recovered, conn._recovered = conn._recovered, None
        if recovered is not None:
            recovered.set()
        conn._wire.schedule_flush()
        logger.info(
            "recovered the connection to %s (attempt %d, epoch %d)",
            self.params.address,
            self.attempt,
            self.recovered.epoch,
        )
        conn._emit(self.recovered)


class Recovering:
    """What :class:`~amqp_trio.Connection` adds for recovery (a mixin: the connection's own
    attributes are declared here for the type checker)."""

    # The connection's, used here.
    if TYPE_CHECKING:

        @property
        def params(self) -> ConnectionParameters: ...

    _core: amqp_sansio.Connection
    _wire: Wire
    _router: Router
    _telemetry: Telemetry | None
    _channels: dict[int, Channel]
    _closing: bool
    _blocked: trio.Event | None
    _opened: trio.Event
    _handshaking: bool
    _heartbeat_timed_out: bool

    def _init_recovery(
        self,
        policy: RecoveryPolicy | None,
        reopen: Callable[[ConnectionParameters], Awaitable[trio.abc.Stream]] | None,
    ) -> None:
        self._policy = policy
        self._reopen = reopen
        self._epoch = Epoch("raise" if policy is None else policy.stale_settle)
        self._state = RecoveryState.OPEN
        self._recovering = False
        #: While recovering: set when the connection is back (or recovery ended).
        self._recovered: trio.Event | None = None
        self._recovery_scope: trio.CancelScope | None = None
        self._restoring: _Attempt | None = None
        self._subscribers: set[RecoveryEvents] = set()
        self._waiting_bytes = 0
        # The lost connection's books (their consumers), for as long as recovery runs.
        self._lost_books: dict[int, ChannelBook] = {}
        self._lost: tuple[AMQPError, Topology, dict[int, Channel], dict[int, ChannelBook]] | None
        self._lost = None
        if policy is not None:
            self._router.recover_with(policy, self._recover_on, self._channel_reopened)

    # --- public -------------------------------------------------------------------------------

    @property
    def recovery_state(self) -> RecoveryState:
        """``OPEN``, ``RECOVERING`` (lost, reconnecting) or ``CLOSED`` (for good)."""
        return self._state

    @property
    def epoch(self) -> int:
        """0 for the first connection, +1 each time one was lost (deliveries carry theirs)."""
        return self._epoch.current

    def recovery_events(self) -> RecoveryEvents:
        """An async iterator over the recovery events from now on (lost, attempt,
        recovered, gave up); it ends when the connection is closed for good."""
        events = RecoveryEvents()
        if self._state is RecoveryState.CLOSED:
            events._close()
        else:
            self._subscribers.add(events)
        return events

    # --- plumbing -----------------------------------------------------------------------------

    def _recover_on(self, error: AMQPError) -> bool:
        if self._closing or self._policy is None:
            return False
        if self._recovering:
            return True  # during an attempt: keep the consumers whatever went wrong
        return self._policy.triggers(error)

    def _channel_reopened(self, old: int, book: ChannelBook, cause: AMQPError) -> None:
        """The router opened channel *old* again as *book* after a channel error."""
        ch = self._channels.pop(old, None)
        if ch is not None:
            ch._rebind(book)
            self._channels[book.number] = ch
        self._needs_flush = True
        self._emit(ChannelReopened(channel=old, new_channel=book.number, cause=cause))

    def _emit(self, event: RecoveryEvent) -> None:
        for subscriber in self._subscribers:
            subscriber._push(event)

    def _set_closed(self) -> None:
        self._state = RecoveryState.CLOSED
        subscribers, self._subscribers = self._subscribers, set()
        for subscriber in subscribers:
            subscriber._close()

    def _on_suspended(self) -> None:
        """The router kept the consumers for recovery (the reader ends next)."""
        if self._recovering:
            return  # an attempt's connection failed: the attempt reports it
        router = self._router
        cause = router.error
        suspended = router.suspended
        assert cause is not None
        assert suspended is not None
        channels, self._channels = self._channels, {}
        for ch in channels.values():
            ch._flow_changed(True)
        for lost in suspended.values():
            for sink in lost.consumers.values():
                forget = getattr(sink, "_forget_unhanded", None)
                if forget is not None:
                    forget()
        if self._blocked is not None:  # blocked belongs to the lost connection
            self._blocked.set()
            self._blocked = None
        self._epoch.current += 1
        self._state = RecoveryState.RECOVERING
        self._recovering = True
        self._recovered = trio.Event()
        self._lost = (cause, self._core.topology, channels, suspended)
        self._lost_books = suspended
        logger.warning("lost the connection to %s (%s): recovering", self.params.address, cause)
        self._emit(RecoveryLost(cause=cause))

    async def _wait_recovered(self, octets: int = 0) -> None:
        """While recovering: wait for the connection to come back, up to the policy's
        ``publish_wait`` (0: fail at once), with at most ``publish_buffer`` octets waiting."""
        recovered = self._recovered
        if recovered is None:
            return
        policy = self._policy
        assert policy is not None
        error = self._router.error
        policy.admit_wait(self._waiting_bytes, octets, self.params.address, error)
        self._waiting_bytes += octets
        try:
            with trio.move_on_after(policy.publish_wait):
                await recovered.wait()
                return
        finally:
            self._waiting_bytes -= octets
        raise policy.wait_expired(self.params.address, error)

    if TYPE_CHECKING:

        async def _run_reader(self) -> None: ...  # the connection's reader task

    async def _serve(self, attempt: _Attempt | None) -> None:
        """Run the reader and the writer (and an attempt) until the reader ends."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._wire.run_writer)
            if attempt is not None:
                nursery.start_soon(attempt.run)
            await self._run_reader()
            nursery.cancel_scope.cancel()

    async def _supervise(self, finished: trio.Event) -> None:
        """The connection's tasks under a recovery policy: serve, and recover after a loss."""
        try:
            await self._serve(None)
            while self._lost is not None and not self._closing:
                with trio.CancelScope() as scope:
                    self._recovery_scope = scope
                    if not await self._recover():
                        return
                if scope.cancelled_caught:
                    return
        finally:
            self._recovery_scope = None
            self._set_closed()
            finished.set()

    async def _recover(self) -> bool:
        """Reconnect until the connection is back and served until its next end (True), or
        recovery gave up (False)."""
        lost = self._lost
        assert lost is not None
        self._lost = None
        cause, topology, channels, books = lost
        unknown = self._router.unknown
        policy = self._policy
        assert policy is not None
        assert self._reopen is not None
        started = trio.current_time()
        attempt = 0
        while True:
            attempt += 1
            await trio.sleep(policy.delay(attempt))
            url = policy.endpoint(attempt, "")
            params = (
                connection_parameters(url, self.params.connection_name) if url else (self.params)
            )
            error: BaseException | None = None
            try:
                with trio.fail_after(params.connection_timeout):
                    stream = await self._reopen(params)
            except (OSError, AMQPError, trio.TooSlowError, trio.BrokenResourceError) as exc:
                error = exc
            else:
                self._core = amqp_sansio.Connection(Role.CLIENT, params.to_config())
                self._wire = Wire(self._core, stream)
                self._router = Router(self._core, self._telemetry)
                self._router.recover_with(policy, self._recover_on, self._channel_reopened)
                self._opened = trio.Event()
                self._handshaking = True
                self._heartbeat_timed_out = False
                running = _Attempt(self, params, attempt, topology, channels, books, unknown)
                await self._serve(running)
                if running.recovered is not None:
                    return True  # served until its own end: the supervisor goes on
                error = running.error or self._router.error
                await self._wire.close_transport()
            assert error is not None
            failed, gave_up = policy.failed_attempt(
                attempt,
                trio.current_time() - started,
                params.address,
                error,
                address=self.params.address,
                logger=logger,
            )
            self._emit(failed)
            if gave_up is not None:
                self._emit(gave_up)
                self._give_up(cause, books)
                return False

    def _give_up(self, cause: AMQPError, books: dict[int, ChannelBook] | None = None) -> None:
        """Recovery ends for good: consumers end with *cause*, the connection is closed."""
        suspended = books if books is not None else self._lost_books
        self._lost = None
        self._lost_books = {}
        end_suspended(suspended, cause)
        lost = Router(self._core)
        lost.fail(cause)
        self._router = lost
        self._recovering = False
        recovered, self._recovered = self._recovered, None
        if recovered is not None:
            recovered.set()
        self._set_closed()
