"""The adapter-independent part of the 0-10 clients: no I/O, no clock, no threads.

:class:`ClientCore` owns the core :class:`~amqp_sansio.v0_10.Connection` in the client role and
routes its events: a :class:`Pending` per command waited for (the command is sent with the sync
bit; its result, if any, arrives first and is kept; its completion resolves it), a
:class:`SubscriptionCore` per subscription (received transfers queue there; credit is granted
back as the application takes them), and errors (an ``execution.exception`` fails every
pending command of its session with a typed :class:`ExecutionError`; a closed or lost
connection fails everything).

An adapter supplies how to wake a waiter (each :class:`Pending` and subscription calls its
``notify`` once something changed) and ``wake``: called when something queued output outside
an adapter's own call (a message settled, credit granted back), so the adapter writes it. The
caller serialises access (Trio and asyncio run on one thread; the blocking adapter holds its
connection lock).
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from typing import TYPE_CHECKING, Final, Literal, final

from ..._errors import ProtocolError
from ..._events import NEED_DATA, Sentinel
from ..._method import Role
from ...client._errors import (
    AMQPError,
    ConnectionClosedError,
    ConnectionLostError,
    HeartbeatTimeoutError,
    PublishOutcomeUnknownError,
    error_for_close,
)
from ...client._recovery import Epoch, StaleDeliveryError
from .._connection import Connection, ConnectionConfig
from .._events import (
    CommandReceived,
    CommandsCompleted,
    ConnectionClosed,
    ConnectionLost,
    ConnectionOpened,
    ConnectionRedirected,
    ExceptionRaised,
    HeartbeatTimeout,
    MessageReceived,
    ResultReceived,
    SessionEnded,
    SessionOpened,
)
from .._generated.spec_0_10 import (
    AcceptMode,
    AcquireMode,
    CreditUnit,
    DetachCode,
    ExchangeBind,
    ExchangeDeclare,
    ExchangeDelete,
    ExchangeUnbind,
    FlowMode,
    MessageCancel,
    QueueDeclare,
    QueueDelete,
)
from .._session import UNLIMITED
from .._types import SequenceSet
from ._errors import SessionBusy, SessionEndedError, execution_error
from ._message import Message
from ._topology import Topology010

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager

    from ..._util import Buffer
    from ...client._params import ConnectionParameters
    from .._events import Event
    from .._session import Session
    from .._types import Command, Map, Struct

#: The commands whose completion is recorded in :attr:`ClientCore.topology`.
_RECORDED: Final = frozenset(
    {ExchangeDeclare, QueueDeclare, ExchangeBind, ExchangeUnbind, ExchangeDelete, QueueDelete}
)

__all__ = [
    "DEFAULT_PREFETCH",
    "ClientCore",
    "ClientSession",
    "FlowModeName",
    "Pending",
    "SubscriptionCore",
    "config_from",
]

logger: Final = logging.getLogger("amqp_sansio.v0_10.client")

#: Messages a subscription asks for before the application took any (its credit).
DEFAULT_PREFETCH: Final = 100

FlowModeName = Literal["credit", "window"]


def config_from(params: ConnectionParameters) -> ConnectionConfig:
    """The core's config for :class:`~amqp_sansio.client.ConnectionParameters`."""
    properties: Map = {}
    for key, value in params.client_properties.items():
        if isinstance(value, (str, int, bool, bytes, float)) or value is None:
            properties[key] = value
    if params.connection_name is not None:
        properties["connection_name"] = params.connection_name
    return ConnectionConfig(
        username=params.username,
        password=params.password,
        virtual_host=params.virtual_host,
        client_properties=properties,
        locale=params.locale,
        heartbeat=params.heartbeat,
        channel_max=min(params.channel_max or 0xFFFF, 0xFFFF) or 0xFFFF,
        max_frame_size=min(params.frame_max or 0xFFFF, 0xFFFF),
        max_message_size=params.max_message_size,
    )


@final
class Pending:
    """The outcome of one command (or of the handshake, an attach, a close) an application
    waits for: ``result`` (a result struct, or None) or ``error``. ``notify`` (the adapter's)
    is called once, when it is done."""

    __slots__ = ("done", "error", "notify", "result")

    def __init__(self, notify: Callable[[], None] | None = None) -> None:
        self.done = False
        self.result: Struct | None = None
        self.error: AMQPError | None = None
        self.notify = notify

    def finish(self, error: AMQPError | None = None) -> None:
        if self.done:
            return
        self.done = True
        self.error = error
        if self.notify is not None:
            self.notify()

    def outcome(self) -> Struct | None:
        """The result, or raise the error (call once done)."""
        if self.error is not None:
            raise self.error
        return self.result


@final
class SubscriptionCore:
    """One subscription's received messages, and the credit it grants back.

    In credit mode the broker may send ``prefetch`` messages before the application took any;
    each message taken (:meth:`take`) is granted back, in batches of half the prefetch. In
    window mode the core's completion of each transfer gives the window back by itself.
    """

    __slots__ = (
        "_owed",
        "_session",
        "accept",
        "acquire",
        "arguments",
        "buffer",
        "cancelled",
        "destination",
        "error",
        "exclusive",
        "flow_mode",
        "notify",
        "prefetch",
        "queue",
    )

    def __init__(
        self,
        session: ClientSession,
        queue: str,
        destination: str,
        prefetch: int,
        flow_mode: FlowModeName,
        *,
        accept: bool = True,
        acquire: bool = True,
        exclusive: bool = False,
        arguments: Map | None = None,
    ) -> None:
        self._session = session
        self.queue: Final = queue
        self.destination: Final = destination
        self.prefetch: Final = prefetch
        self.flow_mode: Final = flow_mode
        # How it subscribed, to subscribe again the same way after a recovery.
        self.accept: Final = accept
        self.acquire: Final = acquire
        self.exclusive: Final = exclusive
        self.arguments: Final = arguments
        self.buffer: deque[Message] = deque()
        self.error: AMQPError | None = None
        self.cancelled = False
        self._owed = 0
        self.notify: Callable[[], None] | None = None

    @property
    def finished(self) -> bool:
        """No more messages will arrive (cancelled, or the session ended)."""
        return self.cancelled or self.error is not None

    def take(self) -> Message | None:
        """The next buffered message (None when there is none); grants its credit back."""
        if not self.buffer:
            return None
        message = self.buffer.popleft()
        if self.flow_mode == "credit" and not self.finished:
            self._owed += 1
            if self._owed * 2 >= self.prefetch:
                owed, self._owed = self._owed, 0
                self._session.send_quietly(
                    lambda s: s.flow(self.destination, CreditUnit.MESSAGE, owed)
                )
        return message

    def drop_unhanded(self) -> int:
        """The connection was lost: messages to be accepted that were not handed out are
        dropped (the broker released them: they come again); how many."""
        if not self.accept:
            return 0
        dropped = len(self.buffer)
        self.buffer.clear()
        return dropped

    def end(self, error: AMQPError | None) -> None:
        if error is None:
            self.cancelled = True
        elif self.error is None:
            self.error = error
        if self.notify is not None:
            self.notify()


@final
class ClientSession:
    """One attached session of a :class:`ClientCore`: its pending commands and its
    subscriptions. Adapters' session objects hold one."""

    __slots__ = (
        "_accepts",
        "_client",
        "_outcomes",
        "_pending",
        "_recording",
        "attached",
        "channel",
        "core",
        "detached",
        "epoch",
        "error",
        "name",
        "subscriptions",
    )

    def __init__(self, client: ClientCore, core: Session) -> None:
        self._client = client
        self.core: Final = core
        self.channel: Final = core.channel
        self.name: Final = core.name
        #: The client's epoch when it was attached (a recovery attaches new sessions).
        self.epoch: Final = client.epoch
        self._pending: dict[int, Pending] = {}
        # Declarations waiting for their completion, recorded for recovery once complete.
        self._recording: dict[int, Command] = {}
        # Transfers and syncs waiting: a loss leaves their outcome unknown, not failed.
        self._outcomes: set[int] = set()
        self._accepts: list[int] = []
        self.subscriptions: dict[str, SubscriptionCore] = {}
        self.attached = Pending()
        self.detached = Pending()
        self.error: AMQPError | None = None

    def __repr__(self) -> str:
        return f"<ClientSession {self.name!r} channel={self.channel}>"

    def check(self) -> None:
        """Raise why this session can't be used any more."""
        if self.error is not None:
            raise self.error
        self._client.check()

    # --- sending ------------------------------------------------------------------------------

    def execute(
        self,
        command: Command,
        pending: Pending,
        *,
        headers: tuple[Struct, ...] | None = None,
        body: Buffer | None = None,
    ) -> int:
        """Send *command* with the sync bit; *pending* resolves on its completion (with its
        result, if the command has one)."""
        self.check()
        command_id = self._send(lambda s: s.send(command, sync=True, headers=headers, body=body))
        self._pending[command_id] = pending
        if type(command) in _RECORDED:
            self._recording[command_id] = command
        return command_id

    def send(
        self,
        command: Command,
        *,
        headers: tuple[Struct, ...] | None = None,
        body: Buffer | None = None,
    ) -> int:
        """Send *command* without waiting for it."""
        self.check()
        return self._send(lambda s: s.send(command, headers=headers, body=body))

    def transfer(
        self,
        destination: str,
        body: Buffer,
        headers: tuple[Struct, ...],
        pending: Pending | None,
    ) -> int:
        """``message.transfer`` (accept mode none); with *pending*, sent with the sync bit."""
        self.check()
        sync = pending is not None
        try:  # _send's steps, without a closure per transfer
            if self._accepts:
                self.flush_settlements()  # earlier accepts go first
            command_id = self.core.transfer(
                destination, body, headers=headers, accept_mode=AcceptMode.NONE, sync=sync
            )
        except ProtocolError as exc:
            raise SessionEndedError(f"session {self.name!r}: {exc}") from exc
        if pending is not None:
            self._pending[command_id] = pending
            self._outcomes.add(command_id)
        return command_id

    def sync(self, pending: Pending) -> int:
        """``execution.sync``: *pending* resolves once every earlier command is complete."""
        self.check()
        command_id = self._send(lambda s: s.sync())
        self._pending[command_id] = pending
        self._outcomes.add(command_id)
        return command_id

    def _send(self, action: Callable[[Session], int]) -> int:
        try:
            self.flush_settlements()  # earlier accepts go first
            return action(self.core)
        except ProtocolError as exc:
            raise SessionEndedError(f"session {self.name!r}: {exc}") from exc

    def send_quietly(self, action: Callable[[Session], object]) -> None:
        """Queue a command nobody waits for (settlement, credit): nothing when the session
        can't send any more; the adapter is woken to write it. Runs under the client's
        guard: the application calls it from its own thread in the blocking adapter."""
        with self._client.guard:
            if self.error is not None or self._client.error is not None:
                return
            try:
                self.flush_settlements()
                action(self.core)
            except ProtocolError as exc:
                logger.debug("session %r: not sent: %s", self.name, exc)
                return
            self._client.wake()

    def flush_settlements(self) -> None:
        """Send the accepts gathered since the last write, as one ``message.accept``."""
        accepts = self._accepts
        if not accepts:
            return
        self._accepts = []
        try:
            self.core.accept(SequenceSet(accepts))
        except ProtocolError as exc:
            logger.debug("session %r: accepts not sent: %s", self.name, exc)

    # --- subscriptions ------------------------------------------------------------------------

    def subscribe(
        self,
        queue: str,
        destination: str,
        pending: Pending,
        *,
        accept: bool = True,
        acquire: bool = True,
        exclusive: bool = False,
        arguments: Map | None = None,
        prefetch: int = DEFAULT_PREFETCH,
        flow_mode: FlowModeName = "credit",
    ) -> SubscriptionCore:
        """``message.subscribe``, the flow mode and the credit, the last synced (*pending*)."""
        self.check()
        if destination in self.subscriptions:
            raise ValueError(f"destination {destination!r} is in use on session {self.name!r}")
        if prefetch < 1:
            raise ValueError(f"prefetch must be at least 1, not {prefetch}")
        if flow_mode not in ("credit", "window"):
            raise ValueError(f"flow_mode must be 'credit' or 'window', not {flow_mode!r}")
        sub = SubscriptionCore(
            self,
            queue,
            destination,
            prefetch,
            flow_mode,
            accept=accept,
            acquire=acquire,
            exclusive=exclusive,
            arguments=arguments,
        )
        self._subscribe(sub, pending)
        return sub

    def resubscribe(self, sub: SubscriptionCore, pending: Pending) -> None:
        """Subscribe *sub* (of a lost connection's session) again on this session, as it
        subscribed then: the same destination, modes, flow mode and credit, into the same
        buffer (recovery)."""
        self.check()
        sub._session = self
        sub._owed = 0
        sub.error = None
        self._subscribe(sub, pending)

    def _subscribe(self, sub: SubscriptionCore, pending: Pending) -> None:
        def send(s: Session) -> int:
            s.subscribe(
                sub.queue,
                sub.destination,
                accept_mode=AcceptMode.EXPLICIT if sub.accept else AcceptMode.NONE,
                acquire_mode=(
                    AcquireMode.PRE_ACQUIRED if sub.acquire else AcquireMode.NOT_ACQUIRED
                ),
                exclusive=sub.exclusive,
                arguments=sub.arguments,
            )
            mode = FlowMode.CREDIT if sub.flow_mode == "credit" else FlowMode.WINDOW
            s.set_flow_mode(sub.destination, mode)
            s.flow(sub.destination, CreditUnit.BYTE, UNLIMITED)
            return s.flow(sub.destination, CreditUnit.MESSAGE, sub.prefetch, sync=True)

        command_id = self._send(send)
        self.subscriptions[sub.destination] = sub
        self._pending[command_id] = pending

    def cancel(self, sub: SubscriptionCore, pending: Pending) -> None:
        """``message.cancel``; the subscription ends at once (later transfers are released)."""
        self.check()
        command_id = self._send(lambda s: s.send(MessageCancel(destination=sub.destination)))
        self._pending[command_id] = pending
        sync_id = self._send(lambda s: s.sync())
        self._pending[sync_id] = pending
        self.subscriptions.pop(sub.destination, None)
        sub.end(None)

    # --- Settler ------------------------------------------------------------------------------

    def accept(self, command_id: int) -> None:
        # gathered, then sent as one message.accept before the next command or write
        with self._client.guard:
            self._check_stale(command_id)
            if self.error is None and self._client.error is None:
                self._accepts.append(command_id)
                self._client.wake()

    def release(self, command_id: int, redelivered: bool) -> None:
        self._check_stale(command_id)
        self.send_quietly(lambda s: s.release(command_id, set_redelivered=redelivered))

    def reject(self, command_id: int, code: int, text: str | None) -> None:
        self._check_stale(command_id)
        self.send_quietly(lambda s: s.reject(command_id, code, text))

    def acquire(self, command_id: int) -> None:
        self._check_stale(command_id)
        self.send_quietly(lambda s: s.acquire(command_id))

    def _check_stale(self, command_id: int) -> None:
        """A settle of a transfer this session received before the connection was lost: its
        command id names nothing on the new connection's sessions (and the broker released
        it). Never sent (the session is over); raised when the recovery policy says so."""
        epochs = self._client.epochs
        if self.epoch != epochs.current and epochs.stale == "raise":
            raise StaleDeliveryError(command_id, self.epoch, epochs.current)

    # --- events -------------------------------------------------------------------------------

    def on_completed(self, event: CommandsCompleted) -> None:
        recording = self._recording
        outcomes = self._outcomes
        for command_id in event.commands:
            pending = self._pending.pop(command_id, None)
            if pending is not None:
                outcomes.discard(command_id)
                if recording:
                    command = recording.pop(command_id, None)
                    if command is not None:
                        self._client.topology.record(command)
                pending.finish()

    def on_result(self, event: ResultReceived) -> None:
        pending = self._pending.get(event.command_id)
        if pending is not None:
            pending.result = event.value

    def on_message(self, event: MessageReceived) -> None:
        destination = event.transfer.destination or ""
        sub = self.subscriptions.get(destination)
        message = Message(event, self)
        if sub is None:
            # a transfer that crossed our cancel: give it back unless it needs no settling
            if event.transfer.accept_mode == AcceptMode.EXPLICIT:
                self.release(event.command_id, False)
            return
        sub.buffer.append(message)
        if sub.notify is not None:
            sub.notify()

    def fail(self, error: AMQPError, *, keep_subscriptions: bool = False) -> int:
        """The session is over: every waiter learns *error* (a transfer or sync waiting, that
        its outcome is unknown), and every subscription, unless kept for recovery. Returns
        how many outcomes became unknown."""
        if self.error is None:
            self.error = error
        pending, self._pending = self._pending, {}
        outcomes, self._outcomes = self._outcomes, set()
        self._recording = {}
        for command_id, p in pending.items():
            if command_id in outcomes and isinstance(
                error, ConnectionLostError | ConnectionClosedError
            ):
                p.finish(PublishOutcomeUnknownError(command_id, error))
            else:
                p.finish(error)
        if not keep_subscriptions:
            for sub in self.subscriptions.values():
                sub.end(error)
        self.attached.finish(error)
        return len(outcomes & set(pending))


@final
class ClientCore:
    """One 0-10 client connection without I/O: the core connection and its sessions.

    Adapters feed :meth:`receive_data`, call :meth:`process` (routes every event), write
    ``conn.data_to_send()`` / ``conn.buffers_to_send()``, and drive the heartbeat timer with
    ``conn.next_deadline()`` / ``conn.handle_timer()``.
    """

    __slots__ = (
        "_next_channel",
        "address",
        "closed",
        "conn",
        "epochs",
        "error",
        "guard",
        "open_info",
        "opened",
        "recover_on",
        "sessions",
        "suspended",
        "topology",
        "unknown",
        "wake",
    )

    def __init__(
        self,
        params: ConnectionParameters,
        wake: Callable[[], None],
        guard: AbstractContextManager[object] | None = None,
    ) -> None:
        self.conn: Final = Connection(Role.CLIENT, config_from(params))
        #: The broker's ``host:port``, for errors.
        self.address: Final = params.address
        self.wake = wake
        #: Held while a message is settled (the blocking adapter's connection lock).
        self.guard: AbstractContextManager[object] = guard or contextlib.nullcontext()
        self.opened = Pending()
        self.closed = Pending()
        self.sessions: dict[int, ClientSession] = {}
        self.error: AMQPError | None = None
        self._next_channel = 1
        #: What the handshake negotiated, once ``opened`` resolved.
        self.open_info: ConnectionOpened | None = None
        #: What the client declared (exchanges, queues, bindings), for recovery.
        self.topology = Topology010()
        #: The connection's epoch, shared with the next connections (a recovering adapter's
        #: supervisor's): sessions keep the one they were attached in, a settle from an older
        #: one is stale, and ``epochs.stale`` says whether it raises.
        self.epochs = Epoch("ignore")
        #: Set by a recovering adapter (the supervisor's): whether a connection ending with an
        #: error keeps its subscriptions for the next connection (:attr:`suspended`).
        self.recover_on: Callable[[AMQPError], bool] | None = None
        #: True once the connection ended and was kept for recovery.
        self.suspended = False
        #: Transfers and syncs whose outcome the loss left unknown.
        self.unknown = 0

    @property
    def epoch(self) -> int:
        """The current epoch (0 without recovery)."""
        return self.epochs.current

    def check(self) -> None:
        if self.error is not None:
            raise self.error

    def attach(self, name: str | bytes) -> ClientSession:
        """Attach a session on a free channel; its ``attached`` resolves on ``attached``."""
        self.check()
        channel = self._next_channel
        while channel in self.sessions:
            channel += 1
        if channel >= self.conn.channel_max:
            raise ValueError(f"no free channel (channel-max {self.conn.channel_max})")
        self._next_channel = channel + 1
        try:
            core = self.conn.attach(name, channel=channel)
        except ProtocolError as exc:
            raise SessionEndedError(f"cannot attach {name!r}: {exc}") from exc
        session = ClientSession(self, core)
        self.sessions[channel] = session
        return session

    def detach(self, session: ClientSession) -> None:
        """Detach *session* (its ``detached`` resolves on ``detached``)."""
        if session.detached.done or session.error is not None or self.error is not None:
            session.detached.finish()
            return
        try:
            session.core.detach()
        except ProtocolError:
            session.detached.finish()

    def close(self) -> None:
        """Send ``connection.close``; ``closed`` resolves on ``close-ok``."""
        if self.error is not None:
            self.closed.finish()
            return
        try:
            self.conn.close()
        except ProtocolError as exc:
            self._fail(ConnectionLostError(f"connection lost: {exc}"))
            self.closed.finish()

    def flush_settlements(self) -> None:
        """Queue the gathered accepts of every session (adapters call this before they take
        the output)."""
        for session in self.sessions.values():
            session.flush_settlements()

    def receive_data(self, data: Buffer, now: float | None = None) -> None:
        """Feed the core, with the read's time on the adapter's clock (see
        :meth:`Connection.receive_data`); a protocol error ends the connection (the core
        queued a close)."""
        try:
            self.conn.receive_data(data, now)
        except ProtocolError as exc:
            self._fail(ConnectionLostError(f"protocol error: {exc}"))

    def process(self) -> None:
        """Route every event the core has."""
        conn = self.conn
        while True:
            try:
                event = conn.next_event()
            except ProtocolError as exc:
                self._fail(ConnectionLostError(f"protocol error: {exc}"))
                return
            if event is NEED_DATA:
                return
            assert not isinstance(event, Sentinel)
            self.handle(event)

    def handle(self, event: Event) -> None:
        cls = type(event)
        if cls is MessageReceived:
            assert isinstance(event, MessageReceived)
            session = self.sessions.get(event.channel)
            if session is not None:
                session.on_message(event)
        elif cls is CommandsCompleted:
            assert isinstance(event, CommandsCompleted)
            session = self.sessions.get(event.channel)
            if session is not None:
                session.on_completed(event)
        elif cls is ResultReceived:
            assert isinstance(event, ResultReceived)
            session = self.sessions.get(event.channel)
            if session is not None:
                session.on_result(event)
        elif cls is SessionOpened:
            assert isinstance(event, SessionOpened)
            session = self.sessions.get(event.channel)
            if session is not None:
                session.attached.finish()
        elif cls is ExceptionRaised:
            assert isinstance(event, ExceptionRaised)
            session = self.sessions.get(event.channel)
            if session is not None:
                session.fail(execution_error(event.exception))
        elif cls is SessionEnded:
            assert isinstance(event, SessionEnded)
            self._session_ended(event)
        elif cls is ConnectionOpened:
            assert isinstance(event, ConnectionOpened)
            self.open_info = event
            self.opened.finish()
        elif cls is ConnectionClosed:
            assert isinstance(event, ConnectionClosed)
            if event.by_peer:
                error: AMQPError = error_for_close(
                    event.reply_code, event.reply_text, connection=True
                )
            else:
                error = ConnectionClosedError(
                    event.reply_text or "closed by us", reply_code=event.reply_code
                )
            self._fail(error)
            self.closed.finish()
        elif cls is ConnectionLost:
            self._fail(ConnectionLostError("the connection was lost"))
            self.closed.finish()
        elif cls is HeartbeatTimeout:
            # The same error, with the same words, as a 0-9-1 connection's.
            self._fail(HeartbeatTimeoutError(self.address, self.conn.heartbeat))
            self.closed.finish()
        elif cls is ConnectionRedirected:
            assert isinstance(event, ConnectionRedirected)
            self._fail(ConnectionLostError(f"the broker redirects to {event.host}"))
            self.closed.finish()
        elif cls is CommandReceived:
            assert isinstance(event, CommandReceived)
            logger.debug("ignored %s from the broker", type(event.command).NAME)

    def _session_ended(self, event: SessionEnded) -> None:
        session = self.sessions.pop(event.channel, None)
        if session is None:
            return
        if event.code == DetachCode.SESSION_BUSY:
            error: AMQPError = SessionBusy(f"session {event.name!r} is attached elsewhere", 1)
        else:
            error = SessionEndedError(f"session {event.name!r} was detached", event.code)
        session.fail(error)
        session.detached.finish()

    def _fail(self, error: AMQPError) -> None:
        first = self.error is None
        if first:
            self.error = error
        keep = first and self.recover_on is not None and self.recover_on(error)
        if keep:
            self.suspended = True
        for session in list(self.sessions.values()):
            self.unknown += session.fail(error, keep_subscriptions=keep or self.suspended)
            session.detached.finish()
        self.opened.finish(error)
