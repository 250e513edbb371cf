"""The sans-IO AMQP 0-10 connection: bytes in, events out; calls in, bytes out.

:class:`Connection` plays the client or the server role. Like the 0-9-1 core it never reads a
clock, never does I/O and never calls back into user code: ``receive_data`` only buffers,
``next_event`` parses lazily (one event per call), and everything to be written, including what
nobody asked for (``close-ok``, ``attached``, ``session.completed``, ``known-completed``,
heartbeats, the ``connection.close`` of a protocol error), accumulates in an outbound buffer read
with ``data_to_send()`` or ``buffers_to_send()``. Sessions are :class:`Session` objects on the
connection's channels.

**The protocol header, and servers that speak several versions.** The client writes
``AMQP 1 1 0 10`` at construction; a server answering another header ends the connection with a
:class:`~amqp_sansio.RemoteProtocolError` saying which version it offered. The server role reads
the client's header and answers its own header and ``connection.start``; any other header gets
the 0-10 header and then the error (close the transport). A server that accepts several
protocol versions on one port reads the first 8 octets itself, asks
:func:`is_protocol_header_0_10`, and for 0-10 builds ``Connection(Role.SERVER, config,
header_consumed=True)``: that core answers the header at once and expects frames next (feed it
whatever followed the 8 octets).
"""

from __future__ import annotations

import platform
from collections import deque
from importlib import metadata
from typing import TYPE_CHECKING, Final, final

import attrs

from .._errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from .._events import NEED_DATA, Sentinel
from .._heartbeat import Heartbeat, Tick
from .._method import Role
from ._events import (
    AuthenticationRequested,
    ConnectionClosed,
    ConnectionLost,
    ConnectionOpened,
    ConnectionRedirected,
    Event,
    HeartbeatTimeout,
    SecureRequested,
    SessionEnded,
    SessionOpened,
    VirtualHostRequested,
)
from ._framing import (
    MAX_FRAME_SIZE,
    PROTOCOL_HEADER_0_10,
    Assembly,
    AssemblyReader,
    FrameReader,
    encode_control,
    take_command_assembly,
)
from ._generated.spec_0_10 import (
    MIN_MAX_FRAME_SIZE,
    ConnectionClose,
    ConnectionCloseOk,
    ConnectionHeartbeat,
    ConnectionOpen,
    ConnectionOpenOk,
    ConnectionRedirect,
    ConnectionSecure,
    ConnectionSecureOk,
    ConnectionStart,
    ConnectionStartOk,
    ConnectionTune,
    ConnectionTuneOk,
    DetachCode,
    SessionAttach,
    SessionAttached,
    SessionDetach,
    SessionDetached,
    TypeCode,
)
from ._session import Session
from ._state import HANDSHAKE, ConnectionState, SessionState
from ._types import Array, Command, Control, Typed

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .._method import Buffer
    from ._types import Map, Value

__all__ = ["Connection", "ConnectionConfig"]


def _version() -> str:
    try:
        return metadata.version("amqp-sansio")
    except metadata.PackageNotFoundError:  # running from a source tree
        return "0.0.0"


_VERSION: Final = _version()
_S = ConnectionState
_SESSION_CLASS: Final = 2
_CONNECTION_CLASS: Final = 1
_MAX_CHANNEL: Final = 0xFFFF


def _heartbeat_frame() -> bytes:
    out = bytearray()
    encode_control(out, 0, ConnectionHeartbeat(), MIN_MAX_FRAME_SIZE)
    return bytes(out)


_HEARTBEAT: Final = _heartbeat_frame()


def _check(name: str, value: int | None, low: int, high: int) -> None:
    if value is None:
        return
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"{name} must be in {low}..{high}, not {value!r}")


@final
@attrs.frozen(kw_only=True)
class ConnectionConfig:
    """What a 0-10 :class:`Connection` proposes and accepts. Never shows a credential.

    Client role: ``username``/``password`` for SASL PLAIN (``username=None``: ANONYMOUS), or
    ``mechanism`` with a ready ``sasl_response``; by default the client takes PLAIN when it has
    a username and the server offers it, else ANONYMOUS. ``virtual_host``, extra
    ``client_properties`` (over product, version and platform), ``locale``. ``heartbeat``: the
    interval in seconds the client asks for (clamped into the server's range); None or 0: none.

    Both roles: ``channel_max`` and ``max_frame_size`` (the most we accept; the lower of both
    ends' values is used), ``max_message_size`` (a larger assembly is refused before it is
    buffered), ``max_unfinished_size`` (the most octets of unfinished segments, such as bodies
    whose last frame has not come, kept on all channels together; None: ``max_message_size``;
    past it the connection is closed with 320), ``auto_complete`` (None: the role's default,
    True for the client, False for
    the server: see :class:`Session`), ``eager_completion`` (None: the role's default, True for
    the client, False for the server: whether sessions report the commands they completed, and
    answer the peer's ``completed`` with ``known-completed``, each time the received octets run
    out; False reports only when asked or needed and answers only a timely-reply, as qpidd
    does: see :class:`Session`), ``sync_every`` (every this-many-th command we send without
    the sync bit gets it, asking the peer to report completion: a session keeps each command
    it sent until then; 0: never), ``first_command_id`` (where our command ids start).

    Server role: ``server_properties``, ``mechanisms``, ``locales``, ``heartbeat_min`` and
    ``heartbeat_max`` (the heartbeat range offered; None: no heartbeat), ``known_hosts``.
    """

    username: str | None = "guest"
    password: str = attrs.field(default="guest", repr=False)
    mechanism: str | None = None
    sasl_response: bytes | None = attrs.field(default=None, repr=False)
    virtual_host: str = ""
    client_properties: Map = attrs.field(factory=dict)
    locale: str = "en_US"
    heartbeat: int | None = None
    channel_max: int = _MAX_CHANNEL
    max_frame_size: int = MAX_FRAME_SIZE
    max_message_size: int = 128 * 1024 * 1024
    max_unfinished_size: int | None = None
    auto_complete: bool | None = None
    eager_completion: bool | None = None
    sync_every: int = 1000
    first_command_id: int = 0
    server_properties: Map | None = None
    mechanisms: tuple[str, ...] = ("PLAIN", "ANONYMOUS")
    locales: tuple[str, ...] = ("en_US",)
    heartbeat_min: int | None = None
    heartbeat_max: int | None = None
    known_hosts: tuple[str, ...] = ()

    def __attrs_post_init__(self) -> None:
        _check("channel_max", self.channel_max, 1, _MAX_CHANNEL)
        _check("max_frame_size", self.max_frame_size, MIN_MAX_FRAME_SIZE, MAX_FRAME_SIZE)
        _check("heartbeat", self.heartbeat, 0, 0xFFFF)
        _check("heartbeat_min", self.heartbeat_min, 0, 0xFFFF)
        _check("heartbeat_max", self.heartbeat_max, 0, 0xFFFF)
        _check("max_message_size", self.max_message_size, 0, 2**64 - 1)
        _check("max_unfinished_size", self.max_unfinished_size, 0, 2**64 - 1)
        _check("first_command_id", self.first_command_id, 0, 0xFFFF_FFFF)
        _check("sync_every", self.sync_every, 0, 0xFFFF_FFFF)


def _strings(value: Value | Array | None) -> tuple[str, ...]:
    """The strings of a str16-array field (or of a list), skipping anything else."""
    if isinstance(value, Array):
        items: Iterable[Value] = value.values
    elif isinstance(value, list | tuple):
        items = (v.value if isinstance(v, Typed) else v for v in value)
    else:
        return ()
    return tuple(v for v in items if isinstance(v, str))


def _str16_array(values: Iterable[str]) -> Array:
    return Array(TypeCode.STR16, tuple(values))


@final
class Connection:
    """One AMQP 0-10 connection in the client or the server role, without I/O.

    The client queues its protocol header at construction (call :meth:`data_to_send` first)
    and answers ``start`` and ``tune`` by itself from its config. The server role answers the
    protocol header by itself and asks the application (:class:`AuthenticationRequested`,
    :class:`VirtualHostRequested`) for the rest; while such a decision is pending,
    ``next_event`` returns ``NEED_DATA`` and leaves later frames buffered.

    *header_consumed* (server role): the 0-10 protocol header was already read by a dispatcher
    (see the module docstring); the header and ``start`` are answered at once.
    """

    __slots__ = (
        "_assembler",
        "_auto_complete",
        "_channel_max",
        "_chunks",
        "_client_properties",
        "_close_sent",
        "_decision",
        "_dirty",
        "_eager_completion",
        "_eof",
        "_error",
        "_events",
        "_heartbeat",
        "_inbox",
        "_liveness",
        "_max_frame_size",
        "_not_attached",
        "_out",
        "_peer",
        "_reader",
        "_server_properties",
        "_sessions",
        "_state",
        "_virtual_host",
        "config",
        "role",
    )

    def __init__(
        self, role: Role, config: ConnectionConfig | None = None, *, header_consumed: bool = False
    ) -> None:
        self.role: Final = role
        self.config: Final = ConnectionConfig() if config is None else config
        self._peer: Final = role.peer
        auto = self.config.auto_complete
        self._auto_complete: Final = role is Role.CLIENT if auto is None else auto
        eager = self.config.eager_completion
        self._eager_completion: Final = role is Role.CLIENT if eager is None else eager
        self._state = _S.AWAIT_HEADER
        self._reader = FrameReader(self.config.max_frame_size)
        self._assembler = AssemblyReader(
            self.config.max_message_size, self.config.max_unfinished_size
        )
        self._inbox: bytearray | None = bytearray()  # octets before framing starts
        self._eof = False
        self._out = bytearray()
        self._chunks: list[Buffer] = []
        self._events: deque[Event] = deque()
        self._error: ProtocolError | None = None
        self._sessions: dict[int, Session] = {}
        self._dirty: set[Session] = set()  # sessions with completions to report
        self._not_attached: set[int] = set()  # channels told "not-attached" since last attach
        # Until tune: the spec's minimum for what we send, and every channel.
        self._max_frame_size = MIN_MAX_FRAME_SIZE
        self._channel_max = _MAX_CHANNEL
        self._heartbeat = 0
        self._server_properties: Map = {}
        self._client_properties: Map = {}
        self._virtual_host = ""
        # A decision the application must take before more is parsed: the event's type.
        self._decision: type[Event] | None = None
        self._close_sent: ConnectionClose | None = None
        # Heartbeats (see handle_timer): activity flags since the last timer tick.
        # Heartbeats and dead-peer detection: the machine the 0-9-1 core runs too.
        self._liveness = Heartbeat(len(_HEARTBEAT))
        if role is Role.CLIENT:
            self._out += PROTOCOL_HEADER_0_10
        elif header_consumed:
            self._answer_header()
            self._inbox = None

    def __repr__(self) -> str:
        return (
            f"<Connection 0-10 role={self.role.value} state={self._state.value} "
            f"sessions={len(self._sessions)}>"
        )

    # --- Introspection ------------------------------------------------------------------------

    @property
    def state(self) -> ConnectionState:
        """The connection's state."""
        return self._state

    @property
    def unfinished_size(self) -> int:
        """Octets of received segments still waiting for their last frame (a body under way),
        on all channels: what a server counts against its memory while they arrive."""
        return self._assembler.unfinished

    @property
    def channel_max(self) -> int:
        """The number of channels usable (ids below it): 65535 until tuned."""
        return self._channel_max

    @property
    def max_frame_size(self) -> int:
        """The largest frame we send: 4096 (MIN-MAX-FRAME-SIZE) until tuned, then the
        negotiated size."""
        return self._max_frame_size

    @property
    def heartbeat(self) -> int:
        """The negotiated heartbeat interval in seconds; 0 means off."""
        return self._heartbeat

    @property
    def sessions(self) -> dict[int, Session]:
        """The sessions by channel (a copy)."""
        return dict(self._sessions)

    def session(self, channel: int) -> Session:
        """The session attached (or attaching) on *channel*.

        :raises KeyError: no session there.
        """
        return self._sessions[channel]

    # --- Input --------------------------------------------------------------------------------

    def receive_data(self, data: Buffer, now: float | None = None) -> None:
        """Buffer octets from the peer; ``b""`` means the transport was closed.

        *now* is the adapter's clock (the one :meth:`handle_timer` gets) when the octets were
        read. With it, a silent peer is declared dead exactly two heartbeat intervals after
        its last octet, as in the 0-9-1 core (the same machine); without it, at the first timer
        tick that finds nothing new, which can be up to half an interval later.

        :raises RuntimeError: data after the end of the stream.
        :raises ProtocolError: the connection already failed (sticky).
        """
        if self._error is not None:
            raise self._error
        if self._eof:
            raise RuntimeError("received data after the end of the stream")
        if not data:
            self._eof = True
            return
        self._liveness.received(now)
        if self._inbox is not None:
            self._inbox += data
        else:
            self._reader.feed(data)

    def next_event(self) -> Event | Sentinel:
        """The next event, or ``NEED_DATA``.

        Before returning ``NEED_DATA`` for want of octets, the sessions report what they
        completed since their last report (``session.completed``) and answer ``completed``
        with ``known-completed`` (unless ``ConnectionConfig.eager_completion`` is off, the
        server role's default): flush ``data_to_send()`` after draining the events.

        :raises RemoteProtocolError: the peer broke the protocol; the ``connection.close``
            answering it is already in the outbound buffer. The error is sticky.
        """
        if self._error is not None:
            raise self._error
        events = self._events
        if events:
            return events.popleft()
        reader = self._reader
        assembler = self._assembler
        next_frame = reader.next_frame
        receive = assembler.receive
        try:
            while True:
                if self._decision is not None:
                    return self._end_of_input()
                if self._state is _S.CLOSED:
                    self._reader.discard()  # the conversation is over: later octets mean nothing
                    return self._end_of_input()
                if self._inbox is not None and not self._read_header():
                    return self._end_of_input()
                assembly = take_command_assembly(reader, assembler)
                if assembly is None:
                    frame = next_frame()
                    if frame is None:
                        if self._dirty:
                            self._flush_sessions()
                        return self._end_of_input()
                    assembly = receive(frame)
                    if assembly is None:
                        continue
                if type(assembly.op) is not ConnectionHeartbeat:  # liveness only
                    event = self._on_assembly(assembly)
                    if event is not None:
                        return event
                    if events:
                        return events.popleft()
        except RemoteProtocolError as exc:
            self._fail(exc)
            raise

    def _end_of_input(self) -> Event | Sentinel:
        if not self._eof or self._state is _S.CLOSED or self._state is _S.ERROR:
            return NEED_DATA
        self._state = _S.CLOSED
        return ConnectionLost(incomplete_commands=self._drop_sessions())

    def _drop_sessions(self) -> tuple[tuple[int, int], ...]:
        incomplete: list[tuple[int, int]] = []
        for channel, session in sorted(self._sessions.items()):
            incomplete += ((channel, n) for n in session.on_detached())
        self._sessions.clear()
        self._dirty.clear()
        return tuple(incomplete)

    def _flush_sessions(self) -> None:
        dirty = self._dirty
        self._dirty = set()
        if self._state is not _S.OPEN:
            return
        for session in sorted(dirty, key=lambda s: s.channel):
            session.flush_pending()

    def _mark_dirty(self, session: Session) -> None:
        self._dirty.add(session)

    # --- The protocol header --------------------------------------------------------------------

    def _read_header(self) -> bool:
        """Consume the peer's protocol header; True once frames may be parsed."""
        inbox = self._inbox
        assert inbox is not None
        expected = b"AMQP"
        seen = bytes(inbox[:4])
        if seen != expected[: len(seen)]:
            raise self._remote(
                f"{bytes(inbox[:8])!r} is not an AMQP protocol header"
                + (
                    ": the server did not answer our 0-10 header"
                    if self.role is Role.CLIENT
                    else ""
                )
            )
        if len(inbox) < 8:
            return False
        header = bytes(inbox[:8])
        if header != PROTOCOL_HEADER_0_10:
            if self.role is Role.CLIENT:
                raise self._remote(
                    f"the server answered with protocol header {header!r} ({_describe(header)})"
                    ": it does not speak AMQP 0-10"
                )
            raise self._remote(
                f"unsupported protocol header {header!r} ({_describe(header)}): this server "
                "speaks AMQP 0-10"
            )
        del inbox[:8]
        self._inbox = None
        if self.role is Role.SERVER:
            self._answer_header()
        else:
            self._state = _S.AWAIT_START
        self._reader.feed(inbox)
        return True

    def _answer_header(self) -> None:
        self._out += PROTOCOL_HEADER_0_10
        self._state = _S.AWAIT_START
        self._server_properties = self._make_server_properties()
        self._send0(
            ConnectionStart(
                server_properties=self._server_properties,
                mechanisms=_str16_array(self.config.mechanisms),
                locales=_str16_array(self.config.locales),
            )
        )

    def _make_server_properties(self) -> Map:
        props: Map = {
            "product": "amqp-sansio",
            "version": _VERSION,
            "platform": f"Python {platform.python_version()}",
        }
        if self.config.server_properties:
            props.update(self.config.server_properties)
        return props

    # --- Errors -------------------------------------------------------------------------------

    def _remote(self, text: str, cls: type[Control | Command] | None = None) -> RemoteProtocolError:
        return RemoteProtocolError(
            text,
            reply_code=501,
            class_id=0 if cls is None else cls.CLASS_CODE,
            method_id=0 if cls is None else cls.CODE,
        )

    def _local(self, text: str, cls: type[Control | Command] | None = None) -> LocalProtocolError:
        return LocalProtocolError(
            text,
            reply_code=501,
            class_id=0 if cls is None else cls.CLASS_CODE,
            method_id=0 if cls is None else cls.CODE,
        )

    def _fail(self, exc: ProtocolError) -> None:
        """Enter ERROR, answering the peer first: our header (server, bad header) or a close."""
        state = self._state
        if state is _S.AWAIT_HEADER:
            if self.role is Role.SERVER:
                self._out += PROTOCOL_HEADER_0_10
        elif state is not _S.CLOSED and state is not _S.ERROR:
            code = exc.reply_code if exc.reply_code in (320, 402, 501) else 501
            text = exc.reply_text.encode()[:255].decode(errors="ignore")
            encode_control(
                self._out,
                0,
                ConnectionClose(reply_code=code, reply_text=text),
                self._max_frame_size,
            )
        self._state = _S.ERROR
        self._error = exc

    def send_failed(self) -> None:
        """Tell the core that the bytes it produced could not be written: the connection is
        unusable from now on (every later call raises)."""
        self._state = _S.ERROR
        if self._error is None:
            self._error = LocalProtocolError(
                "a send failed; the connection is unusable", reply_code=320
            )

    def _check_usable(self) -> None:
        if self._error is not None:
            raise LocalProtocolError(
                f"the connection failed earlier: {self._error.reply_text}",
                reply_code=self._error.reply_code,
            )
        if self._state is _S.ERROR:
            raise LocalProtocolError(
                "the peer sent nothing for two heartbeat intervals: the connection is dead",
                reply_code=320,
            )

    # --- Output -------------------------------------------------------------------------------

    def _send0(self, control: Control) -> None:
        """Send a handshake control on channel 0 after checking the handshake table."""
        cls = type(control)
        nxt = HANDSHAKE[self.role].get(self._state, {}).get(cls)
        if nxt is None:
            raise self._local(
                f"cannot send {cls.NAME} as the {self.role.value} in state {self._state.value}",
                cls,
            )
        self._send_control(0, control)
        self._state = nxt

    def _send_control(self, channel: int, control: Control) -> None:
        encode_control(self._out, channel, control, self._max_frame_size)

    def _write_buffers(self, buffers: list[Buffer]) -> None:
        if self._out:
            self._chunks.append(self._out)
            self._out = bytearray()
        self._chunks.extend(buffers)

    @property
    def outbound_size(self) -> int:
        """How many octets :meth:`data_to_send` would hand out now: adapters bound what they
        let pile up with it (backpressure)."""
        chunks = self._chunks
        if not chunks:
            return len(self._out)  # per transfer: keep it cheap
        return len(self._out) + sum(memoryview(chunk).nbytes for chunk in chunks)

    def data_to_send(self) -> bytes:
        """Everything to write, in order, as one ``bytes``; empties the outbound buffer.

        Still works after a protocol error, so the close that answers it can be written.
        """
        if self._chunks:
            self._chunks.append(self._out)
            data = b"".join(self._chunks)
            self._chunks = []
        else:
            data = bytes(self._out)
        self._out = bytearray()
        self._liveness.handed_out(len(data))
        return data

    def buffers_to_send(self) -> list[Buffer]:
        """Everything to write, in order, as buffers for ``writelines``/``sendmsg``: bodies of
        64 KiB or more stay memoryview slices of the caller's body. Empties the buffer."""
        buffers = self._chunks
        if self._out:
            buffers.append(self._out)
        self._chunks = []
        self._out = bytearray()
        self._liveness.handed_out(sum(len(b) for b in buffers))
        return buffers

    # --- Assemblies ---------------------------------------------------------------------------

    def _on_assembly(self, assembly: Assembly) -> Event | None:
        op = assembly.op
        state = self._state
        if state is _S.CLOSED:
            return None  # the conversation is over; the peer's stragglers are dropped
        if isinstance(op, Control):
            if op.CLASS_CODE == _CONNECTION_CLASS:
                return self._on_connection_control(assembly.channel, op)
            if state is _S.CLOSING:
                return None
            if state is not _S.OPEN:
                raise self._remote(
                    f"{op.NAME} before the connection is open (state {state.value})", type(op)
                )
            return self._on_session_control(assembly.channel, op)
        if state is _S.CLOSING:
            return None
        if state is not _S.OPEN:
            raise self._remote(
                f"{op.NAME} before the connection is open (state {state.value})", type(op)
            )
        session = self._sessions.get(assembly.channel)
        if session is None:
            self._tell_not_attached(assembly.channel, b"")
            return None
        if session._state is SessionState.ATTACHING:
            return None  # the rest of the channel's previous session, as above
        return session.on_command(assembly)

    def _tell_not_attached(self, channel: int, name: bytes) -> None:
        """Answer the first command or control on a channel without a session."""
        if channel in self._not_attached:
            return
        self._not_attached.add(channel)
        self._send_control(channel, SessionDetached(name=name, code=DetachCode.NOT_ATTACHED))

    # --- Connection controls -------------------------------------------------------------------

    def _on_connection_control(self, channel: int, control: Control) -> Event | None:
        cls = type(control)
        if cls is ConnectionClose:
            assert isinstance(control, ConnectionClose)
            return self._on_close(control)
        if cls is ConnectionCloseOk:
            if self._close_sent is None:
                raise self._remote("connection.close-ok without a close", cls)
            close = self._close_sent
            self._state = _S.CLOSED
            return ConnectionClosed(
                reply_code=close.reply_code or 0,
                reply_text=close.reply_text or "",
                by_peer=False,
                incomplete_commands=self._drop_sessions(),
            )
        if self._state is _S.CLOSING:
            return None
        if channel != 0:
            raise self._remote(f"{cls.NAME} on channel {channel}: it belongs on channel 0", cls)
        nxt = HANDSHAKE[self._peer].get(self._state, {}).get(cls)
        if nxt is None:
            raise self._remote(
                f"{cls.NAME} from the {self._peer.value} in state {self._state.value}", cls
            )
        self._state = nxt
        if cls is ConnectionStart:
            assert isinstance(control, ConnectionStart)
            self._on_start(control)
            return None
        if cls is ConnectionStartOk:
            assert isinstance(control, ConnectionStartOk)
            self._client_properties = control.client_properties or {}
            self._decision = AuthenticationRequested
            mechanism = control.mechanism or ""
            response = control.response or b""
            return AuthenticationRequested(
                mechanism=mechanism,
                response=response,
                username=_username(mechanism, response),
                client_properties=self._client_properties,
                locale=control.locale or "",
            )
        if cls is ConnectionSecure:
            assert isinstance(control, ConnectionSecure)
            self._decision = SecureRequested
            return SecureRequested(challenge=control.challenge or b"")
        if cls is ConnectionSecureOk:
            assert isinstance(control, ConnectionSecureOk)
            self._decision = AuthenticationRequested
            response = control.response or b""
            return AuthenticationRequested(
                mechanism="",
                response=response,
                username=None,
                client_properties=self._client_properties,
                locale="",
            )
        if cls is ConnectionTune:
            assert isinstance(control, ConnectionTune)
            self._on_tune(control)
            return None
        if cls is ConnectionTuneOk:
            assert isinstance(control, ConnectionTuneOk)
            self._on_tune_ok(control)
            return None
        if cls is ConnectionOpen:
            assert isinstance(control, ConnectionOpen)
            self._virtual_host = control.virtual_host or ""
            self._decision = VirtualHostRequested
            return VirtualHostRequested(
                virtual_host=self._virtual_host,
                capabilities=_strings(control.capabilities),
                insist=control.insist,
            )
        if cls is ConnectionOpenOk:
            assert isinstance(control, ConnectionOpenOk)
            return self._opened(_strings(control.known_hosts))
        assert cls is ConnectionRedirect
        assert isinstance(control, ConnectionRedirect)
        self._drop_sessions()
        return ConnectionRedirected(
            host=control.host or "", known_hosts=_strings(control.known_hosts)
        )

    def _on_close(self, close: ConnectionClose) -> Event | None:
        self._send_control(0, ConnectionCloseOk())
        if self._state is _S.CLOSING:
            return None  # the closes crossed: ours still waits for its close-ok
        self._state = _S.CLOSED
        return ConnectionClosed(
            reply_code=close.reply_code or 0,
            reply_text=close.reply_text or "",
            by_peer=True,
            incomplete_commands=self._drop_sessions(),
        )

    def close(self, reply_code: int = 200, reply_text: str = "") -> None:
        """Send ``connection.close``; :class:`ConnectionClosed` follows the peer's
        ``close-ok``. Legal once the protocol headers were exchanged."""
        self._check_usable()
        if self._state in (_S.AWAIT_HEADER, _S.CLOSING, _S.CLOSED):
            raise self._local(f"cannot close in state {self._state.value}", ConnectionClose)
        close = ConnectionClose(reply_code=reply_code, reply_text=reply_text)
        try:
            out = bytearray()
            encode_control(out, 0, close, self._max_frame_size)
        except Exception as exc:
            raise self._local(f"cannot encode connection.close: {exc!r}", ConnectionClose) from None
        self._out += out
        self._close_sent = close
        self._decision = None
        self._state = _S.CLOSING

    # --- Handshake, client role ---------------------------------------------------------------

    def _on_start(self, start: ConnectionStart) -> None:
        self._server_properties = start.server_properties or {}
        offered = _strings(start.mechanisms)
        config = self.config
        mechanism = config.mechanism
        if mechanism is None:
            if config.username is not None and "PLAIN" in offered:
                mechanism = "PLAIN"
            elif "ANONYMOUS" in offered:
                mechanism = "ANONYMOUS"
            elif "PLAIN" in offered and config.username is not None:
                mechanism = "PLAIN"
        if mechanism is None or mechanism not in offered:
            raise RemoteProtocolError(
                f"the server offers SASL {', '.join(offered) or 'nothing'}; this client can "
                f"use {mechanism or 'PLAIN (with a username) or ANONYMOUS'}",
                reply_code=320,
                class_id=ConnectionStart.CLASS_CODE,
                method_id=ConnectionStart.CODE,
            )
        if mechanism == "PLAIN" and config.sasl_response is None:
            user = (config.username or "").encode()
            response: bytes | None = b"\0" + user + b"\0" + config.password.encode()
        elif mechanism == "ANONYMOUS" and config.sasl_response is None:
            response = None
        else:
            response = config.sasl_response
        self._client_properties = self._make_client_properties()
        self._send0(
            ConnectionStartOk(
                client_properties=self._client_properties,
                mechanism=mechanism,
                response=response,
                locale=config.locale,
            )
        )

    def _make_client_properties(self) -> Map:
        props: Map = {
            "product": "amqp-sansio",
            "version": _VERSION,
            "platform": f"Python {platform.python_version()}",
        }
        props.update(self.config.client_properties)
        return props

    def answer_secure(self, response: bytes) -> None:
        """Client role: answer :class:`SecureRequested` with ``secure-ok``."""
        self._check_usable()
        if self._decision is not SecureRequested:
            raise self._local("no connection.secure to answer", ConnectionSecureOk)
        self._decision = None
        self._send0(ConnectionSecureOk(response=response))

    def _on_tune(self, tune: ConnectionTune) -> None:
        config = self.config
        channel_max = min(config.channel_max, tune.channel_max or _MAX_CHANNEL)
        frame = min(config.max_frame_size, tune.max_frame_size or MAX_FRAME_SIZE)
        if frame < MIN_MAX_FRAME_SIZE:
            raise self._remote(
                f"the server proposes max-frame-size {frame}, below MIN-MAX-FRAME-SIZE "
                f"{MIN_MAX_FRAME_SIZE}",
                ConnectionTune,
            )
        heartbeat: int | None = None
        low, high = tune.heartbeat_min, tune.heartbeat_max
        if low is not None and config.heartbeat:
            heartbeat = max(config.heartbeat, low)
            if high is not None:
                heartbeat = min(heartbeat, high)
        self._send0(
            ConnectionTuneOk(channel_max=channel_max, max_frame_size=frame, heartbeat=heartbeat)
        )
        self._tuned(channel_max, frame, heartbeat or 0)
        self._virtual_host = config.virtual_host
        self._send0(ConnectionOpen(virtual_host=config.virtual_host))

    def _tuned(self, channel_max: int, max_frame_size: int, heartbeat: int) -> None:
        self._channel_max = channel_max
        self._max_frame_size = max_frame_size
        self._reader.max_frame_size = max(max_frame_size, self._reader.max_frame_size)
        self._heartbeat = heartbeat
        self._liveness.interval = heartbeat

    def _opened(self, known_hosts: tuple[str, ...]) -> ConnectionOpened:
        return ConnectionOpened(
            server_properties=self._server_properties,
            client_properties=self._client_properties,
            channel_max=self._channel_max,
            max_frame_size=self._max_frame_size,
            heartbeat=self._heartbeat,
            virtual_host=self._virtual_host,
            known_hosts=known_hosts,
        )

    # --- Handshake, server role ---------------------------------------------------------------

    def _decide(self, expected: type[Event], what: str, cls: type[Control]) -> None:
        self._check_usable()
        if self._decision is not expected:
            raise self._local(f"no {what} to answer", cls)
        self._decision = None

    def accept_authentication(self) -> None:
        """Server role: accept the client's credentials; ``tune`` follows."""
        self._decide(AuthenticationRequested, "authentication", ConnectionTune)
        config = self.config
        self._send0(
            ConnectionTune(
                channel_max=config.channel_max,
                max_frame_size=config.max_frame_size,
                heartbeat_min=config.heartbeat_min,
                heartbeat_max=config.heartbeat_max if config.heartbeat_min is not None else None,
            )
        )

    def refuse_authentication(self, text: str = "authentication failed") -> None:
        """Server role: refuse the credentials with ``connection.close`` (320)."""
        self._decide(AuthenticationRequested, "authentication", ConnectionClose)
        self.close(320, text)

    def send_secure(self, challenge: bytes) -> None:
        """Server role: answer the client's response with a SASL ``secure`` challenge."""
        self._decide(AuthenticationRequested, "authentication", ConnectionSecure)
        self._send0(ConnectionSecure(challenge=challenge))

    def _on_tune_ok(self, tune_ok: ConnectionTuneOk) -> None:
        config = self.config
        channel_max = tune_ok.channel_max or config.channel_max
        frame = tune_ok.max_frame_size or config.max_frame_size
        heartbeat = tune_ok.heartbeat or 0
        problem = None
        if channel_max > config.channel_max:
            problem = f"channel-max {channel_max} over the {config.channel_max} offered"
        elif not MIN_MAX_FRAME_SIZE <= frame <= config.max_frame_size:
            problem = (
                f"max-frame-size {frame} outside {MIN_MAX_FRAME_SIZE}..{config.max_frame_size}"
            )
        elif heartbeat and (
            config.heartbeat_min is None
            or heartbeat < config.heartbeat_min
            or (config.heartbeat_max is not None and heartbeat > config.heartbeat_max)
        ):
            problem = f"heartbeat {heartbeat} outside the range offered"
        if problem is not None:
            raise self._remote(f"the client's tune-ok asks for {problem}", ConnectionTuneOk)
        self._tuned(channel_max, frame, heartbeat)

    def accept_virtual_host(self, known_hosts: Iterable[str] | None = None) -> None:
        """Server role: accept ``open`` with ``open-ok``; :class:`ConnectionOpened` follows."""
        self._decide(VirtualHostRequested, "connection.open", ConnectionOpenOk)
        hosts = tuple(self.config.known_hosts if known_hosts is None else known_hosts)
        self._send0(ConnectionOpenOk(known_hosts=_str16_array(hosts)))
        self._events.append(self._opened(hosts))

    def redirect(self, host: str, known_hosts: Iterable[str] = ()) -> None:
        """Server role: answer ``open`` with ``redirect`` to *host*; the connection is over."""
        self._decide(VirtualHostRequested, "connection.open", ConnectionRedirect)
        self._send0(ConnectionRedirect(host=host, known_hosts=_str16_array(known_hosts)))

    def refuse_virtual_host(self, text: str = "") -> None:
        """Server role: refuse ``open`` with ``connection.close`` (402, invalid-path)."""
        self._decide(VirtualHostRequested, "connection.open", ConnectionClose)
        self.close(402, text or f"no access to virtual host {self._virtual_host!r}")

    # --- Sessions -----------------------------------------------------------------------------

    def attach(self, name: bytes | str, *, channel: int | None = None) -> Session:
        """Attach a session named *name* on *channel* (default: the lowest free one above 0).

        Sends ``session.attach``; SessionOpened follows the peer's ``attached``
        (or :class:`SessionEnded` its refusal). Commands may be sent once attached.
        """
        self._check_usable()
        if self._state is not _S.OPEN:
            raise self._local(
                f"cannot attach a session in state {self._state.value}", SessionAttach
            )
        raw = name.encode() if isinstance(name, str) else bytes(name)
        if len(raw) > 0xFFFF:
            raise self._local("a session name is at most 65535 octets", SessionAttach)
        if any(s.name == raw for s in self._sessions.values()):
            raise self._local(f"session {raw!r} is already attached", SessionAttach)
        if channel is None:
            channel = next(
                (c for c in range(1, self._channel_max) if c not in self._sessions), None
            )
            if channel is None:
                raise self._local(f"all {self._channel_max} channels are in use", SessionAttach)
        elif not 0 <= channel < self._channel_max or channel in self._sessions:
            raise self._local(f"channel {channel} is not free", SessionAttach)
        session = Session(self, channel, raw, SessionState.ATTACHING)
        self._sessions[channel] = session
        self._not_attached.discard(channel)
        self._send_control(channel, SessionAttach(name=raw))
        return session

    def _on_session_control(self, channel: int, control: Control) -> Event | None:
        cls = type(control)
        session = self._sessions.get(channel)
        if cls is SessionAttach:
            assert isinstance(control, SessionAttach)
            return self._on_attach(channel, control)
        if cls is SessionDetach:
            assert isinstance(control, SessionDetach)
            name = control.name or b""
            if session is None or session.name != name:
                self._send_control(
                    channel, SessionDetached(name=name, code=DetachCode.NOT_ATTACHED)
                )
                return None
            self._send_control(channel, SessionDetached(name=name, code=DetachCode.NORMAL))
            return self._gone(session, DetachCode.NORMAL, by_peer=True)
        if cls is SessionDetached:
            assert isinstance(control, SessionDetached)
            if session is None or session.name != (control.name or b""):
                return None  # an answer to a detach we no longer care about
            by_peer = session._state is not SessionState.DETACHING
            return self._gone(session, control.code or 0, by_peer=by_peer)
        if cls is SessionAttached:
            assert isinstance(control, SessionAttached)
            if session is None or session.name != (control.name or b""):
                raise self._remote(
                    f"session.attached for {control.name!r} on channel {channel}, which has no "
                    "such attach pending",
                    cls,
                )
            if session._state is not SessionState.ATTACHING:
                return None  # the idempotent answer to a repeated attach
            session.attached()
            return SessionOpened(channel=channel, name=session.name, by_peer=False)
        if session is None:
            self._tell_not_attached(channel, b"")
            return None
        if session._state is SessionState.ATTACHING:
            # Before attached, the peer can only be finishing the channel's previous session
            # (qpid-python sends session.completed after its own detach): nothing for this one.
            return None
        return session.on_control(control)

    def _on_attach(self, channel: int, attach: SessionAttach) -> Event | None:
        name = attach.name or b""
        current = self._sessions.get(channel)
        if channel >= self._channel_max:
            raise self._remote(
                f"session.attach on channel {channel}, beyond channel-max {self._channel_max}",
                SessionAttach,
            )
        if current is not None:
            if current.name == name and current._state is not SessionState.ATTACHING:
                self._send_control(channel, SessionAttached(name=name))  # idempotent
                return None
            self._send_control(channel, SessionDetached(name=name, code=DetachCode.TRANSPORT_BUSY))
            return None
        other = next((s for s in self._sessions.values() if s.name == name), None)
        if other is not None:
            if not attach.force:
                self._send_control(
                    channel, SessionDetached(name=name, code=DetachCode.SESSION_BUSY)
                )
                return None
            # Forced: the session leaves its other channel (its state is not kept).
            self._send_control(
                other.channel,
                SessionDetached(name=name, code=DetachCode.SESSION_BUSY),
            )
            self._events.append(self._gone(other, DetachCode.SESSION_BUSY, by_peer=True))
        session = Session(self, channel, name, SessionState.ATTACHING)
        self._sessions[channel] = session
        self._not_attached.discard(channel)
        self._send_control(channel, SessionAttached(name=name))
        session.attached()
        event = SessionOpened(channel=channel, name=name, by_peer=True)
        if self._events:
            self._events.append(event)
            return self._events.popleft()
        return event

    def _gone(self, session: Session, code: int, *, by_peer: bool) -> SessionEnded:
        del self._sessions[session.channel]
        self._dirty.discard(session)
        self._assembler.abort(session.channel)
        return SessionEnded(
            channel=session.channel,
            name=session.name,
            code=int(code),
            by_peer=by_peer,
            incomplete_commands=session.on_detached(),
        )

    def _detach_session(self, session: Session, code: int) -> SessionEnded:
        """End *session* on our side with ``detached`` (*code*): the spec's answer to
        command data before ``command-point``."""
        self._send_control(session.channel, SessionDetached(name=session.name, code=code))
        return self._gone(session, code, by_peer=False)

    def _abort_partial(self, channel: int) -> bool:
        """Forget a partly received command on *channel*; whether there was one."""
        partial = self._assembler.in_progress(channel)
        self._assembler.abort(channel)
        return partial

    # --- Heartbeats ---------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When :meth:`handle_timer` must be called next, on the adapter's clock; None when
        heartbeats are off (not negotiated, or 0) or the connection is over.

        Right after tuning this is ``0.0``, in the past on any clock: call ``handle_timer(now)``
        at once; it sets the baseline the later deadlines count from.
        """
        if not self._heartbeat or self._eof or self._state in (_S.CLOSED, _S.ERROR):
            return None
        return self._liveness.deadline()

    def handle_timer(self, now: float, *, reading: bool = True) -> None:
        """Let time pass: *now* is the adapter's clock in seconds (any origin, never going back).

        Every half interval with nothing written since the previous check, queues a
        ``connection.heartbeat`` control: flush ``data_to_send()`` after this call. When no
        octet arrived for two intervals (counted from the last octet's arrival, the *now* given
        to :meth:`receive_data`), the next :meth:`next_event` returns
        :class:`HeartbeatTimeout`, after which the connection refuses every send. Pass
        ``reading=False`` while the adapter deliberately leaves the transport unread.
        """
        if self.next_deadline() is None:
            return
        tick = self._liveness.tick(now, reading=reading)
        if tick is Tick.SEND_HEARTBEAT:
            self._out += _HEARTBEAT
        elif tick is Tick.PEER_DEAD:
            self._state = _S.ERROR
            self._decision = HeartbeatTimeout
            self._events.append(HeartbeatTimeout())


def _username(mechanism: str, response: bytes) -> str | None:
    """The user a PLAIN response names, or None."""
    if mechanism != "PLAIN":
        return None
    parts = response.split(b"\0")
    if len(parts) != 3:
        return None
    try:
        return parts[1].decode()
    except UnicodeDecodeError:
        return None


def _describe(header: bytes) -> str:
    """The AMQP version a protocol header names."""
    known = {
        b"AMQP\x00\x00\x09\x01": "AMQP 0-9-1",
        b"AMQP\x01\x01\x00\x09": "AMQP 0-9",
        b"AMQP\x01\x01\x08\x00": "AMQP 0-8",
        b"AMQP\x01\x01\x09\x01": "AMQP 0-8 (its PDF's header)",
        b"AMQP\x00\x01\x00\x00": "AMQP 1.0",
        b"AMQP\x03\x01\x00\x00": "AMQP 1.0 SASL",
    }
    return known.get(header, "an unknown version")
