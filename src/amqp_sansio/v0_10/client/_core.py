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
    error_for_close,
)
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
    FlowMode,
    MessageCancel,
)
from .._session import UNLIMITED
from ._errors import SessionBusy, SessionEndedError, execution_error
from ._message import Message

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..._util import Buffer
    from ...client._params import ConnectionParameters
    from .._events import Event
    from .._session import Session
    from .._types import Command, Map, Struct

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
        "buffer",
        "cancelled",
        "destination",
        "error",
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
    ) -> None:
        self._session = session
        self.queue: Final = queue
        self.destination: Final = destination
        self.prefetch: Final = prefetch
        self.flow_mode: Final = flow_mode
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
        "_client",
        "_pending",
        "attached",
        "channel",
        "core",
        "detached",
        "error",
        "name",
        "subscriptions",
    )

    def __init__(self, client: ClientCore, core: Session) -> None:
        self._client = client
        self.core: Final = core
        self.channel: Final = core.channel
        self.name: Final = core.name
        self._pending: dict[int, Pending] = {}
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
        command_id = self._send(
            lambda s: s.transfer(
                destination, body, headers=headers, accept_mode=AcceptMode.NONE, sync=sync
            )
        )
        if pending is not None:
            self._pending[command_id] = pending
        return command_id

    def sync(self, pending: Pending) -> int:
        """``execution.sync``: *pending* resolves once every earlier command is complete."""
        self.check()
        command_id = self._send(lambda s: s.sync())
        self._pending[command_id] = pending
        return command_id

    def _send(self, action: Callable[[Session], int]) -> int:
        try:
            return action(self.core)
        except ProtocolError as exc:
            raise SessionEndedError(f"session {self.name!r}: {exc}") from exc

    def send_quietly(self, action: Callable[[Session], object]) -> None:
        """Queue a command nobody waits for (settlement, credit): nothing when the session
        can't send any more; the adapter is woken to write it."""
        if self.error is not None or self._client.error is not None:
            return
        try:
            action(self.core)
        except ProtocolError as exc:
            logger.debug("session %r: not sent: %s", self.name, exc)
            return
        self._client.wake()

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
        sub = SubscriptionCore(self, queue, destination, prefetch, flow_mode)

        def send(s: Session) -> int:
            s.subscribe(
                queue,
                destination,
                accept_mode=AcceptMode.EXPLICIT if accept else AcceptMode.NONE,
                acquire_mode=AcquireMode.PRE_ACQUIRED if acquire else AcquireMode.NOT_ACQUIRED,
                exclusive=exclusive,
                arguments=arguments,
            )
            mode = FlowMode.CREDIT if flow_mode == "credit" else FlowMode.WINDOW
            s.set_flow_mode(destination, mode)
            s.flow(destination, CreditUnit.BYTE, UNLIMITED)
            return s.flow(destination, CreditUnit.MESSAGE, prefetch, sync=True)

        command_id = self._send(send)
        self.subscriptions[destination] = sub
        self._pending[command_id] = pending
        return sub

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
        self.send_quietly(lambda s: s.accept(command_id))

    def release(self, command_id: int, redelivered: bool) -> None:
        self.send_quietly(lambda s: s.release(command_id, set_redelivered=redelivered))

    def reject(self, command_id: int, code: int, text: str | None) -> None:
        self.send_quietly(lambda s: s.reject(command_id, code, text))

    def acquire(self, command_id: int) -> None:
        self.send_quietly(lambda s: s.acquire(command_id))

    # --- events -------------------------------------------------------------------------------

    def on_completed(self, event: CommandsCompleted) -> None:
        for command_id in event.commands:
            pending = self._pending.pop(command_id, None)
            if pending is not None:
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

    def fail(self, error: AMQPError) -> None:
        """The session is over: every waiter and subscription learns *error*."""
        if self.error is None:
            self.error = error
        pending, self._pending = self._pending, {}
        for p in pending.values():
            p.finish(error)
        for sub in self.subscriptions.values():
            sub.end(error)
        self.attached.finish(error)


@final
class ClientCore:
    """One 0-10 client connection without I/O: the core connection and its sessions.

    Adapters feed :meth:`receive_data`, call :meth:`process` (routes every event), write
    ``conn.data_to_send()`` / ``conn.buffers_to_send()``, and drive the heartbeat timer with
    ``conn.next_deadline()`` / ``conn.handle_timer()``.
    """

    __slots__ = (
        "_next_channel",
        "closed",
        "conn",
        "error",
        "open_info",
        "opened",
        "sessions",
        "wake",
    )

    def __init__(self, params: ConnectionParameters, wake: Callable[[], None]) -> None:
        self.conn: Final = Connection(Role.CLIENT, config_from(params))
        self.wake = wake
        self.opened = Pending()
        self.closed = Pending()
        self.sessions: dict[int, ClientSession] = {}
        self.error: AMQPError | None = None
        self._next_channel = 1
        #: What the handshake negotiated, once ``opened`` resolved.
        self.open_info: ConnectionOpened | None = None

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

    def receive_data(self, data: Buffer) -> None:
        """Feed the core; a protocol error ends the connection (the core queued a close)."""
        try:
            self.conn.receive_data(data)
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
            self._fail(ConnectionLostError("missed heartbeats: the broker is presumed dead"))
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
        if self.error is None:
            self.error = error
        for session in list(self.sessions.values()):
            session.fail(error)
            session.detached.finish()
        self.opened.finish(error)
