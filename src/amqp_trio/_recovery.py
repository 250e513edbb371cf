"""Connection recovery for amqp_trio: the Trio side of the client layer's
:class:`~amqp_sansio.client.RecoverySupervisor`, which decides everything (when to try, where,
what to restore, when to give up). Here are only the tasks that carry its actions out, while
channels, consumer iterators and publishers carry on."""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING, Final, Generic, TypeVar, final

import attrs
import trio

import amqp_sansio
from amqp_sansio import Role
from amqp_sansio.client import (
    AMQPError,
    Connect,
    ConnectionLostError,
    ConnectionParameters,
    GiveUp,
    LostChannels,
    RecoveryEvent,
    RecoveryPolicy,
    RecoveryState,
    RecoverySupervisor,
    Resume,
    Router,
    Wait,
)

from ._message import Message
from ._wire import Wire

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from amqp_sansio import Event
    from amqp_sansio.client import (
        AsyncCredentialsProvider,
        ChannelBook,
        Credentials,
        Telemetry,
    )

    from ._channel import Channel

__all__ = [
    "Recovering",
    "RecoveryEvents",
    "RecoveryObservable",
    "carry_out",
    "wait_for_recovery",
]

logger: Final = logging.getLogger("amqp_trio")

#: What a failed attempt to open a transport raises.
_OPEN_ERRORS: Final = (OSError, AMQPError, trio.TooSlowError, trio.BrokenResourceError)


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


N = TypeVar("N")
B = TypeVar("B")


class RecoveryObservable(Generic[N, B]):
    """What a recovering connection of either protocol family shows: its state, its epoch and
    its events (the supervisor emits them through :meth:`_emit`)."""

    _supervisor: RecoverySupervisor[N, B]
    _subscribers: set[RecoveryEvents]

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
        events = RecoveryEvents()
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
    reopen: Callable[[ConnectionParameters], Awaitable[trio.abc.Stream]],
    attempt: Callable[[Connect, trio.abc.Stream], Awaitable[BaseException | None]],
    give_up: Callable[[AMQPError], None],
    prepare: Callable[[Connect], Awaitable[Connect]] | None = None,
) -> bool:
    """Carry out *supervisor*'s actions, for either protocol family: wait, open a transport,
    run *attempt* on it (None once it resumed and its connection was served until its end,
    else why it failed), give up. True when an attempt resumed, False when recovery gave up."""
    while True:
        action = supervisor.next_action(trio.current_time())
        if isinstance(action, Wait):
            await trio.sleep_until(action.until)
            continue
        if isinstance(action, GiveUp):
            give_up(action.cause)
            return False
        assert isinstance(action, Connect)
        try:
            with trio.fail_at(action.deadline):
                if prepare is not None:  # e.g. the credentials provider's current secret
                    action = await prepare(action)
                stream = await reopen(action.params)
        except _OPEN_ERRORS as exc:
            failed = supervisor.timeout_error() if isinstance(exc, trio.TooSlowError) else exc
            supervisor.attempt_failed(failed, trio.current_time())
            continue
        error = await attempt(action, stream)
        if error is None:
            return True
        await trio.aclose_forcefully(stream)
        supervisor.attempt_failed(error, trio.current_time())


async def wait_for_recovery(
    supervisor: RecoverySupervisor[N, B],
    publish_wait: float,
    recovered: trio.Event,
    octets: int = 0,
) -> None:
    """While recovering (*recovered* is set when it ends): wait for the connection to come
    back, up to the policy's *publish_wait* (0: fail at once), with at most ``publish_buffer``
    octets waiting."""
    supervisor.admit(octets)
    try:
        with trio.move_on_after(publish_wait):
            await recovered.wait()
            return
    finally:
        supervisor.release(octets)
    raise supervisor.wait_expired()


class Recovering(RecoveryObservable["Router", "ChannelBook"]):
    """What :class:`~amqp_trio.Connection` adds for recovery (a mixin: the connection's own
    attributes are declared here for the type checker)."""

    # The connection's, used here.
    if TYPE_CHECKING:

        @property
        def params(self) -> ConnectionParameters: ...

        async def _run_reader(self) -> None: ...

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
    _needs_flush: bool
    _credentials_provider: AsyncCredentialsProvider | None
    _credentials: Credentials | None

    def _init_recovery(
        self,
        policy: RecoveryPolicy | None,
        reopen: Callable[[ConnectionParameters], Awaitable[trio.abc.Stream]] | None,
    ) -> None:
        self._policy = policy
        self._reopen = reopen
        self._subscribers: set[RecoveryEvents] = set()
        self._supervisor: RecoverySupervisor[Router, ChannelBook] = RecoverySupervisor(
            self.params, policy, emit=self._emit, logger=logger
        )
        self._epoch = self._supervisor.epoch
        self._supervisor.telemetry = self._telemetry
        #: While recovering: set when the connection is back (or recovery ended).
        self._recovered: trio.Event | None = None
        self._recovery_scope: trio.CancelScope | None = None
        # The current attempt: set once its restore finished or failed, with why it failed,
        # and whether it resumed the channels.
        self._restored = trio.Event()
        self._attempt_error: BaseException | None = None
        self._resumed = False
        # The lost connection's channel objects, by their number there, until resumed.
        self._lost_channels: dict[int, Channel] = {}
        self._supervisor.attach(self._router, self._channel_reopened)

    # --- plumbing -----------------------------------------------------------------------------

    def _channel_reopened(self, old: int, book: ChannelBook) -> None:
        """The router opened channel *old* again as *book* after a channel error."""
        ch = self._channels.pop(old, None)
        if ch is not None:
            ch._rebind(book)
            self._channels[book.number] = ch
        self._needs_flush = True

    def _on_suspended(self) -> None:
        """The router kept the consumers for recovery (the reader ends next)."""
        supervisor = self._supervisor
        if supervisor.attempting:
            return  # an attempt's connection failed: the supervising task reports it
        cause = self._router.error
        assert cause is not None
        channels, self._channels = self._channels, {}
        for ch in channels.values():
            ch._flow_changed(True)
        if self._blocked is not None:  # blocked belongs to the lost connection
            self._blocked.set()
            self._blocked = None
        self._lost_channels = channels
        self._recovered = trio.Event()
        supervisor.lost(LostChannels(self._router), cause, trio.current_time())

    async def _wait_recovered(self, octets: int = 0) -> None:
        """While recovering: wait for the connection to come back (see
        :func:`wait_for_recovery`)."""
        if self._recovered is not None:
            assert self._policy is not None
            await wait_for_recovery(
                self._supervisor, self._policy.publish_wait, self._recovered, octets
            )

    def _restore_event(self, event: Event) -> bool:
        """The reader, while the topology is restored: the supervisor takes the event first
        (True); a refused step fails the attempt, but the router still sees the event."""
        supervisor = self._supervisor
        try:
            taken = supervisor.handle(event)
        except AMQPError as exc:
            self._attempt_error = exc
            self._restored.set()
            return False
        if not supervisor.restoring:
            self._restored.set()
        return taken

    # --- the supervising task -----------------------------------------------------------------

    async def _serve(self, attempt: Connect | None) -> None:
        """Run the reader and the writer (and an attempt) until the reader ends."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._wire.run_writer)
            if attempt is not None:
                nursery.start_soon(self._run_attempt, attempt)
            await self._run_reader()
            nursery.cancel_scope.cancel()

    async def _supervise(self, finished: trio.Event) -> None:
        """The connection's tasks under a recovery policy: serve, and recover after a loss."""
        try:
            await self._serve(None)
            while self._supervisor.recovering and not self._closing:
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
        """Carry out the supervisor's actions until the connection is back and served until
        its next end (True), or recovery gave up (False)."""
        assert self._reopen is not None
        return await carry_out(
            self._supervisor, self._reopen, self._attempt, self._give_up, self._prepare_attempt
        )

    async def _prepare_attempt(self, action: Connect) -> Connect:
        """Before each attempt: ask the credentials provider, if any, for the secret to log
        in with."""
        provider = self._credentials_provider
        if provider is None:
            return action
        try:
            credentials = await provider()
        except Exception as exc:  # an attempt that failed: the policy says what comes next
            raise ConnectionLostError(f"the credentials provider failed: {exc!r}") from exc
        self._credentials = credentials
        self._supervisor.secret = credentials.password
        params = attrs.evolve(action.params, password=credentials.password)
        return attrs.evolve(action, params=params)

    async def _attempt(self, action: Connect, stream: trio.abc.Stream) -> BaseException | None:
        """One attempt on its new stream: serve it (the attempt's task restores and resumes);
        None once it resumed and was served until its end, else why it failed."""
        self._core = amqp_sansio.Connection(Role.CLIENT, action.params.to_config(Message))
        self._wire = Wire(self._core, stream)
        self._router = Router(self._core, self._telemetry)
        self._supervisor.attach(self._router, self._channel_reopened)
        self._opened = trio.Event()
        self._handshaking = True
        self._heartbeat_timed_out = False
        self._restored = trio.Event()
        self._attempt_error = None
        self._resumed = False
        await self._serve(action)
        return None if self._resumed else self._attempt_failure()

    def _attempt_failure(self) -> BaseException:
        """Why the attempt that just ended did not resume: its own error (a refused step, its
        deadline), else why its connection ended."""
        error = self._attempt_error or self._router.error
        return error or ConnectionLostError("the connection was lost during recovery")

    async def _run_attempt(self, action: Connect) -> None:
        """The attempt's own task: once the handshake is done, restore, then resume the
        channels; any failure ends the reader (the supervising task reports it)."""
        supervisor = self._supervisor
        try:
            with trio.fail_at(action.deadline):
                await self._opened.wait()
                if self._router.error is not None:
                    return  # the handshake failed
                supervisor.connected(self._router)
                self._wire.schedule_flush()
                if supervisor.restoring:
                    await self._restored.wait()
        except trio.TooSlowError:
            self._attempt_error = supervisor.timeout_error()
        if self._attempt_error is not None:
            await self._wire.close_transport()
            self._wire.end_of_stream()
            return
        resume = supervisor.next_action(trio.current_time())
        assert isinstance(resume, Resume)
        lost, self._lost_channels = self._lost_channels, {}
        for old, book in resume.channels.items():
            ch = lost.get(old)
            if ch is not None:
                ch._rebind(book)
                self._channels[book.number] = ch
        supervisor.resume()
        self._resumed = True
        recovered, self._recovered = self._recovered, None
        if recovered is not None:
            recovered.set()
        self._wire.schedule_flush()

    def _give_up(self, cause: AMQPError) -> None:
        """Recovery ended for good (the consumers ended with *cause*): what still waits gets
        it, and the connection is closed."""
        self._lost_channels = {}
        lost = Router(self._core)
        lost.fail(cause)
        self._router = lost
        recovered, self._recovered = self._recovered, None
        if recovered is not None:
            recovered.set()
        self._set_closed()
