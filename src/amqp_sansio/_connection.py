"""The sans-IO connection: bytes in, events out; method calls in, bytes out.

:class:`Connection` plays the client or the server role. It never reads a clock, never does
I/O and never calls back into user code: ``receive_data`` only buffers, ``next_event`` parses
lazily (one event per call, h11's pull model, so an error surfaces after every earlier event),
and everything to be written (including answers nobody asked for: close-ok, flow-ok, and the
``connection.close`` of a protocol error) accumulates in an outbound buffer read with
``data_to_send()`` or ``buffers_to_send()``.

This module is the shell, as h2's ``H2Connection`` is over its streams: input, output, timers,
channel 0 and dispatch. Each channel is a :class:`~._channel.ChannelMachine`; the handshake's
decisions are the pure functions of :mod:`._handshake`; whether a method is legal, where it
leads and what it does are the tables of :mod:`._state`, applied to our sends
(``LocalProtocolError``, nothing written) and to the peer's frames (``RemoteProtocolError`` with
the matching ``connection.close`` already queued).
"""

from __future__ import annotations

import struct
from collections import deque
from typing import TYPE_CHECKING, Final, Protocol, TypeAlias, cast, final

from . import _handshake as handshake
from ._channel import ChannelLink, ChannelMachine, new_assembly
from ._config import CHANNEL_MAX_LIMIT, ConnectionConfig
from ._errors import (
    LocalProtocolError,
    ProtocolError,
    ProtocolHeaderRefused,
    RemoteProtocolError,
)
from ._events import (
    NEED_DATA,
    AuthenticationRequested,
    BlockedByPeer,
    ConnectionClosed,
    ConnectionLost,
    ConnectionOpened,
    ConnectionRedirected,
    Event,
    HeartbeatTimeout,
    PublishReturned,
    SecureRequested,
    Sentinel,
    UnblockedByPeer,
    VirtualHostRequested,
)
from ._frames import (
    HEARTBEAT_FRAME,
    ContentBodyFrame,
    ContentHeaderFrame,
    FrameReader,
    MethodFrame,
    encode_publish,
    parse_protocol_header,
)
from ._generated.reply_codes import ReplyCode
from ._generated.spec_0_9_1 import (
    BasicAck,
    BasicNack,
    BasicProperties,
    BasicPublish,
    BasicReject,
)
from ._heartbeat import Heartbeat, Tick
from ._method import Role
from ._outbox import PASSTHROUGH, Outbox
from ._state import (
    ChannelState,
    ChannelTransition,
    ConnectionState,
    Effect,
    Input,
    closing_state,
    compile_tables,
    discards,
)
from ._topology import Topology, TopologyRecorder

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._generated.spec_0_9_1 import (
        ConnectionBlocked,
        ConnectionClose,
        ConnectionSecure,
        ConnectionSecureOk,
        ConnectionStart,
        ConnectionStartOk,
        ConnectionTune,
        ConnectionTuneOk,
    )
    from ._method import Buffer, ContentProperties, Method
    from ._protocol import ProtocolSpec
    from ._table import FieldTable

__all__ = ["Connection", "ConnectionConfig"]

_C = ConnectionState
_H = ChannelState
_C_OPEN: Final = ConnectionState.OPEN
_H_OPEN: Final = ChannelState.OPEN
_new: Final = object.__new__

_EMPTY_TOPOLOGY: Final = TopologyRecorder().snapshot()

#: A whole basic.ack/nack/reject frame: header (type 1, channel, size 13), class and method id,
#: delivery tag, bits, frame end.
_pack_settle_frame: Final = struct.Struct(">BHIIQBB").pack
_ACK_ID: Final = BasicAck.CLASS_ID << 16 | BasicAck.METHOD_ID
_NACK_ID: Final = BasicNack.CLASS_ID << 16 | BasicNack.METHOD_ID
_REJECT_ID: Final = BasicReject.CLASS_ID << 16 | BasicReject.METHOD_ID


def _settle_frame(channel: int, method: Method) -> bytes | None:
    """The frame of a basic.ack, nack or reject, or None if a field can't be encoded."""
    try:
        if isinstance(method, BasicAck):
            bits = 1 if method.multiple else 0
            return _pack_settle_frame(1, channel, 13, _ACK_ID, method.delivery_tag, bits, 0xCE)
        if isinstance(method, BasicNack):
            bits = (1 if method.multiple else 0) | (2 if method.requeue else 0)
            return _pack_settle_frame(1, channel, 13, _NACK_ID, method.delivery_tag, bits, 0xCE)
        if isinstance(method, BasicReject):
            bits = 1 if method.requeue else 0
            return _pack_settle_frame(1, channel, 13, _REJECT_ID, method.delivery_tag, bits, 0xCE)
    except Exception:
        return None
    return None


_Handler0: TypeAlias = "Callable[[Connection, Method], Event | None]"


class _Open(Protocol):
    """connection.open in every version (0-8's and 0-9's are answered by redirect too)."""

    virtual_host: str
    insist: bool


class _Redirect(Protocol):
    """connection.redirect (0-8, 0-9)."""

    host: str
    known_hosts: str


@final
class Connection:
    """One AMQP 0-9-1, 0-9 or 0-8 connection in the client or the server role, without I/O.

    The client role queues its protocol header at construction: call :meth:`data_to_send`
    first. The client answers ``start``, ``tune`` and ``open`` by itself from its config; the
    server role answers the protocol header and ``tune-ok`` by itself, and asks the application
    (:class:`AuthenticationRequested`, :class:`VirtualHostRequested`) for the rest. While such a
    decision is pending, ``next_event`` returns ``NEED_DATA`` and leaves later frames buffered.

    The version: the client speaks the config's ``protocol``; the server serves the one of the
    config's ``protocols`` that the client's header asks for, and binds itself to it when the
    header arrives (:attr:`protocol` says which). The state machines are keyed by what methods
    mean, so every version's method table plugs into the same transitions; build methods of the
    connection's version with ``conn.protocol.make("queue.declare", ...)``.
    """

    # Slots: attribute access stays specialized however many attributes the core grows
    # (CPython shares instance-dict keys only up to 30 names).
    __slots__ = (
        "_channel0",
        "_channel_max",
        "_channel_open",
        "_channels",
        "_client_properties",
        "_close_cls",
        "_close_sent",
        "_closing_chan",
        "_closing_conn",
        "_content_limit",
        "_decision",
        "_eof",
        "_error",
        "_events",
        "_fast_publish",
        "_fast_receipts",
        "_fast_sends",
        "_heartbeat",
        "_inbox",
        "_insist",
        "_link",
        "_mechanism",
        "_message_class",
        "_outbox",
        "_peer",
        "_reader",
        "_server_properties",
        "_spec",
        "_state",
        "_tables",
        "_topology",
        "_virtual_host",
        "config",
        "role",
    )

    def __init__(self, role: Role, config: ConnectionConfig | None = None) -> None:
        self.role: Final = role
        if config is None:
            config = ConnectionConfig()
        self.config: Final = config
        self._peer: Final = role.peer
        self._closing_conn, self._closing_chan = closing_state(role)
        self._state = _C.AWAIT_HEADER
        self._inbox: bytearray | None = bytearray()  # octets before framing starts
        self._eof = False
        self._events: deque[Event] = deque()
        self._error: ProtocolError | None = None
        self._topology: Final = TopologyRecorder() if role is Role.CLIENT else None
        self._channels: dict[int, ChannelMachine] = {}
        # The server serves its preferred version until a client's header asks for another.
        self._bind(config.protocol if role is Role.CLIENT else config.protocols[0])
        # Our properties are checked now, so a table the version can't carry fails here rather
        # than in the middle of the handshake (the server checks each version it serves).
        self._client_properties: FieldTable = {}
        if role is Role.CLIENT:
            props = self._client_properties = handshake.client_properties(config, self._spec)
            self._spec.narrow_table(props, "connection.start-ok client_properties")
        else:
            for spec in config.protocols:
                props = handshake.server_properties(config, spec)
                spec.narrow_table(props, "connection.start server_properties")
        self._channel_max = CHANNEL_MAX_LIMIT
        self._heartbeat: Final = Heartbeat()
        self._server_properties: FieldTable = {}
        self._virtual_host = ""
        self._insist = False
        self._mechanism = ""
        # Server role: start-ok/secure-ok ("connection.start-ok") or open ("connection.open")
        # waits for the application. "dead" (HeartbeatTimeout): the peer is presumed dead and
        # nothing more is parsed.
        self._decision: str | None = None
        self._close_sent: ConnectionClose | None = None
        if role is Role.CLIENT:
            self._move(role, Input.PROTOCOL_HEADER)
            self._outbox.data += self._spec.header

    def _bind(self, spec: ProtocolSpec) -> None:
        """Speak *spec*: its frame reader, tables, outbox and channel link. The server role binds
        again when the client's header names another version; no channel exists yet."""
        self._spec = spec
        # The server role tolerates frames 8 octets over frame_max, as RabbitMQ does.
        self._reader = FrameReader(
            slack=8 if self.role is Role.SERVER else 0,
            methods=spec.methods,
            properties=spec.properties,
            view_threshold=self.config.body_view_threshold,
        )
        self._outbox = Outbox(spec)
        tables = self._tables = compile_tables(spec, self.role)
        self._link = ChannelLink(
            spec=spec,
            tables=tables,
            role=self.role,
            outbox=self._outbox,
            events=self._events,
            topology=self._topology,
            max_message_size=self.config.max_message_size,
            chunk_threshold=self.config.chunk_threshold,
            message_class=self.config.message_class,
        )
        # Channel 0's request FIFO (update-secret); its state never changes.
        self._channel0 = ChannelMachine(0, self._link)
        self._channel0.state = _H.OPEN
        by_meaning = spec.by_meaning
        self._channel_open = by_meaning["channel.open"]
        self._close_cls = by_meaning["connection.close"]
        self._fast_sends = tables.fast_sends
        self._fast_publish = tables.fast_publish
        self._fast_receipts = tables.fast_receipts
        # The largest body a delivery's content may have to arrive whole in one step: within
        # max_message_size and not chunked.
        threshold = self.config.chunk_threshold
        limit = self.config.max_message_size
        self._content_limit = limit if threshold is None else min(limit, threshold)
        self._message_class = self.config.message_class

    def __repr__(self) -> str:
        return (
            f"<Connection role={self.role.value} state={self._state.value} "
            f"channels={len(self._channels)}>"
        )

    # --- Introspection ------------------------------------------------------------------------

    @property
    def protocol(self) -> ProtocolSpec:
        """The version this connection speaks: its method table, header and field types. The
        server role speaks its preferred version until a client's header names another."""
        return self._spec

    @property
    def state(self) -> ConnectionState:
        """The connection's state (see :class:`ConnectionState`)."""
        return self._state

    @property
    def channel_max(self) -> int:
        """The highest channel id usable (65535 before tune or when unlimited)."""
        return self._channel_max

    @property
    def frame_max(self) -> int:
        """The negotiated largest frame, in octets (4096 before tune)."""
        return self._outbox.frame_max

    @property
    def heartbeat(self) -> int:
        """The negotiated heartbeat interval in seconds; 0 means off."""
        return self._heartbeat.interval

    def channel_state(self, channel: int) -> ChannelState:
        """The state of *channel* (``CLOSED`` when not in use)."""
        ch = self._channels.get(channel)
        return _H.CLOSED if ch is None else ch.state

    def pending_requests(self, channel: int) -> tuple[Method, ...]:
        """Requests we sent on *channel* that the peer has not answered yet, oldest first."""
        ch = self._channel0 if channel == 0 else self._channels.get(channel)
        return () if ch is None else tuple(ch.requests_out)

    @property
    def topology(self) -> Topology:
        """Client role: a snapshot of the exchanges, queues, bindings, consumers and QoS
        declared on this connection, for replay on a new one (see :class:`Topology`). It
        survives the connection's end. Always empty in the server role."""
        if self._topology is None:
            return _EMPTY_TOPOLOGY
        return self._topology.snapshot()

    # --- Input --------------------------------------------------------------------------------

    def receive_data(self, data: Buffer, now: float | None = None) -> None:
        """Buffer octets from the peer; ``b""`` means the transport was closed.

        *now* is the adapter's clock (the one :meth:`handle_timer` gets) when the octets were
        read. With it, a silent peer is declared dead exactly two heartbeat intervals after
        its last octet; without it, at the first timer tick that finds nothing new, which can
        be up to half an interval later.

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
        self._heartbeat.received(now)
        if self._inbox is not None:
            self._inbox += data
        else:
            self._reader.feed(data)

    def next_event(self) -> Event | Sentinel:
        """The next event, or ``NEED_DATA``.

        :raises RemoteProtocolError: the peer broke the protocol; the ``connection.close``
            answering it is already in the outbound buffer. The error is sticky.
        """
        if self._error is not None:
            raise self._error
        events = self._events
        if events:
            return events.popleft()
        # The delivery hot path, inline (not a call per event): three frames per message, so
        # lookups are hoisted out of the loop.
        next_frame = self._reader.next_frame
        channels = self._channels
        on_channel_method = self._on_channel_method
        try:
            while True:
                if self._decision is not None:
                    return self._end_of_input()  # NEED_DATA until the transport closes
                if self._inbox is not None and not self._read_header():
                    return self._end_of_input()
                # Only a channel-0 method changes what the two checks above read: after one,
                # they run again; other frames loop here.
                while True:
                    frame = next_frame()
                    if frame is None:
                        return self._end_of_input()
                    if type(frame) is ContentBodyFrame:
                        ch = channels.get(frame.channel)
                        if ch is not None and ch.content is not None:
                            event = ch.on_body(frame)
                        elif self._content_discarded(frame.channel, "body"):
                            continue
                    elif type(frame) is MethodFrame:
                        channel = frame.channel
                        if not channel:
                            event = self._on_method(frame.method)
                            if event is None and not events:
                                break
                        else:
                            event = on_channel_method(channel, frame.method)
                    elif type(frame) is ContentHeaderFrame:
                        ch = channels.get(frame.channel)
                        if ch is not None and ch.content is not None:
                            event = ch.on_header(frame)
                        elif self._content_discarded(frame.channel, "header"):
                            continue
                    else:
                        continue  # a heartbeat: liveness only
                    if event is not None:
                        return event
                    if events:
                        return events.popleft()
        except RemoteProtocolError as exc:
            self._fail(exc)
            raise

    def _content_discarded(self, channel: int, what: str) -> bool:
        """A content frame on a channel with no content under way: the rest of a message whose
        method we discarded after sending close (True), else 505."""
        ch = self._channels.get(channel)
        if self._state is self._closing_conn or (ch is not None and ch.state is self._closing_chan):
            return True
        raise RemoteProtocolError(
            f"content {what} frame on channel {channel} without a content method",
            reply_code=ReplyCode.UNEXPECTED_FRAME,
        )

    def _end_of_input(self) -> Event | Sentinel:
        if not self._eof or self._state is _C.CLOSED:
            return NEED_DATA
        self._state = _C.CLOSED
        returns, pending, unconfirmed = self._drop_channels()
        lost = ConnectionLost(pending_requests=pending, unconfirmed_publishes=unconfirmed)
        return self._emit(returns, lost)

    def _drop_channels(
        self,
    ) -> tuple[list[PublishReturned], tuple[tuple[int, Method], ...], tuple[tuple[int, int], ...]]:
        """Forget every channel: the returns still held, the requests never answered and the
        publishes never confirmed, in channel order."""
        returns: list[PublishReturned] = []
        pending = [(0, request) for request in self._channel0.requests_out]
        unconfirmed: list[tuple[int, int]] = []
        for number, ch in sorted(self._channels.items()):
            pending += ((number, request) for request in ch.requests_out)
            confirms = ch.confirms
            if confirms is not None:
                unconfirmed += ((number, n) for n in confirms.unsettled())
                returns += confirms.release()
        self._channels.clear()
        self._channel0.requests_out.clear()
        return returns, tuple(pending), tuple(unconfirmed)

    def _emit(self, first: list[PublishReturned], last: Event) -> Event:
        """Hand out *first*, then *last*. Only called while no event is queued, so the queue
        keeps them in order."""
        if not first:
            return last
        self._events.extend(first[1:])
        self._events.append(last)
        return first[0]

    def _read_header(self) -> bool:
        """Consume what comes before frames; True once frames may be parsed."""
        inbox = self._inbox
        assert inbox is not None
        if self.role is Role.CLIENT:
            # A server refusing our header writes its own instead of connection.start: wait for
            # the first octet before framing starts (next_event() may come before any data).
            if not inbox:
                return False
            if inbox[0] != ord("A"):
                return self._start_framing(inbox)
            header = parse_protocol_header(inbox)
            if header is None:
                return False
            raise ProtocolHeaderRefused(
                f"the server refused our protocol header ({self._spec.version.value}) and "
                f"offers {header.version.value} {header.version_octets}",
                reply_code=ReplyCode.NOT_IMPLEMENTED,
                requested=self._spec.version,
                offered=header,
            )
        header = parse_protocol_header(inbox)  # raises 501 on octets that are not "AMQP"
        if header is None:
            return False
        spec = handshake.server_spec(self.config, header)  # 540 for a version we don't serve
        if spec is not self._spec:
            self._bind(spec)
        del inbox[:8]
        self._move(Role.CLIENT, Input.PROTOCOL_HEADER)
        self._server_properties = handshake.server_properties(self.config, spec)
        major, minor = spec.start_version
        self._send0(
            spec.make(
                "connection.start",
                version_major=major,
                version_minor=minor,
                server_properties=self._server_properties,
                mechanisms=" ".join(self.config.mechanisms).encode(),
                locales=" ".join(self.config.locales).encode(),
            )
        )
        return self._start_framing(inbox)

    def _start_framing(self, inbox: bytearray) -> bool:
        self._inbox = None
        self._reader.feed(inbox)
        return True

    # --- Errors -------------------------------------------------------------------------------

    def _fail(self, exc: ProtocolError) -> None:
        """Enter ERROR, answering the peer first: our header (server, bad header) or a close."""
        if self._state is _C.AWAIT_HEADER and self.role is Role.SERVER:
            self._outbox.data += self._spec.header  # the preferred version's
        elif self._tables.connection_send[self._state].get(self._close_cls) is not None:
            close = self._spec.make(
                "connection.close",
                reply_code=exc.reply_code,
                reply_text=handshake.shortstr(exc.reply_text),
                class_id=exc.class_id,
                method_id=exc.method_id,
            )
            self._outbox.method(0, close)
        self._state = _C.ERROR
        self._error = exc

    def send_failed(self) -> None:
        """Tell the core that the bytes it produced could not be written: the connection is
        unusable from now on (every later call raises)."""
        self._state = _C.ERROR
        if self._error is None:
            self._error = LocalProtocolError(
                "a send failed; the connection is unusable", reply_code=ReplyCode.INTERNAL_ERROR
            )

    def _check_usable(self) -> None:
        if self._error is not None:
            raise LocalProtocolError(
                f"the connection failed earlier: {self._error.reply_text}",
                reply_code=self._error.reply_code,
            )
        if self._state is _C.ERROR:
            raise LocalProtocolError(
                "the peer sent nothing for two heartbeat intervals: the connection is dead",
                reply_code=ReplyCode.INTERNAL_ERROR,
            )

    def _refused(
        self, error: type[ProtocolError], text: str, code: int, cls: type[Method]
    ) -> ProtocolError:
        class_id, method_id = self._spec.ids(cls)
        return error(text, reply_code=code, class_id=class_id, method_id=method_id)

    # --- Channel 0 ----------------------------------------------------------------------------

    def _move(self, sender: Role, key: type[Method] | Input) -> None:
        rows = (
            self._tables.connection_send if sender is self.role else self._tables.connection_receive
        )
        row = rows[self._state].get(key)
        if row is None:
            raise AssertionError(f"{key} not allowed from {sender} in {self._state}")
        self._state = row.next

    def _send0(self, method: Method) -> None:
        """Send a method on channel 0 after checking the connection table."""
        cls = type(method)
        row = self._tables.connection_send[self._state].get(cls)
        if row is None:
            raise self._refused(
                LocalProtocolError,
                f"cannot send {cls.NAME} as the {self.role.value} in state {self._state.value}",
                ReplyCode.COMMAND_INVALID,
                cls,
            )
        self._outbox.method(0, method)
        self._state = row.next
        if row.sent is Effect.CLOSE_SENT:
            self._close_sent = cast("ConnectionClose", method)

    def _on_method(self, method: Method) -> Event | None:
        cls = type(method)
        row = self._tables.connection_receive[self._state].get(cls)
        if row is None:
            if discards(self._state, self.role):
                return None
            raise self._refused(
                RemoteProtocolError,
                f"{cls.NAME} on channel 0 is not allowed from the {self._peer.value} in state "
                f"{self._state.value}",
                ReplyCode.COMMAND_INVALID,
                cls,
            )
        self._state = row.next
        return _RECEIVED0[row.received](self, method)

    def _passed0(self, method: Method) -> Event:
        # update-secret and its reply: through channel 0's request FIFO
        return self._channel0.pass_through(method)

    def _closed_by_peer(self, method: Method) -> Event | None:
        self._send0(self._spec.make("connection.close-ok"))
        if self._state is not _C.CLOSED:
            return None  # the closes crossed: ours is still waiting for its close-ok
        return self._closed(cast("ConnectionClose", method), by_peer=True)

    def _close_ok(self, method: Method) -> Event:
        close = self._close_sent
        assert close is not None
        return self._closed(close, by_peer=False)

    def _closed(self, close: ConnectionClose, *, by_peer: bool) -> Event:
        self._state = _C.CLOSED
        returns, pending, unconfirmed = self._drop_channels()
        closed = ConnectionClosed(
            reply_code=close.reply_code,
            reply_text=close.reply_text,
            class_id=close.class_id,
            method_id=close.method_id,
            by_peer=by_peer,
            pending_requests=pending,
            unconfirmed_publishes=unconfirmed,
        )
        return self._emit(returns, closed)

    def _blocked(self, method: Method) -> BlockedByPeer:
        return BlockedByPeer(reason=cast("ConnectionBlocked", method).reason)

    def _unblocked(self, method: Method) -> UnblockedByPeer:
        return UnblockedByPeer()

    # --- Handshake, client role ---------------------------------------------------------------

    def _on_start(self, method: Method) -> None:
        start = cast("ConnectionStart", method)
        self._server_properties = start.server_properties
        mechanism = handshake.check_start(self.config, start, self._spec)
        self._mechanism = mechanism
        self._send0(
            self._spec.make(
                "connection.start-ok",
                client_properties=self._client_properties,
                mechanism=mechanism,
                response=handshake.sasl_response(self.config, mechanism),
                locale=self.config.locale,
            )
        )

    def _on_secure(self, method: Method) -> SecureRequested:
        return SecureRequested(challenge=cast("ConnectionSecure", method).challenge)

    def _on_tune(self, method: Method) -> None:
        channel_max, frame_max, heartbeat = handshake.client_tune(
            self.config, cast("ConnectionTune", method)
        )
        spec = self._spec
        self._send0(
            spec.make(
                "connection.tune-ok",
                channel_max=channel_max,
                frame_max=frame_max,
                heartbeat=heartbeat,
            )
        )
        self._tuned(channel_max, frame_max, heartbeat)
        self._send0(spec.make("connection.open", virtual_host=self.config.virtual_host))
        self._virtual_host = self.config.virtual_host

    def _tuned(self, channel_max: int, frame_max: int, heartbeat: int) -> None:
        self._channel_max, frame_max, self._heartbeat.interval = handshake.limits(
            channel_max, frame_max, heartbeat
        )
        self._outbox.frame_max = self._reader.frame_max = frame_max

    def answer_secure(self, response: bytes) -> None:
        """Client role: answer a :class:`SecureRequested` challenge."""
        self._check_usable()
        self._send0(self._spec.make("connection.secure-ok", response=response))

    def update_secret(self, secret: bytes, reason: str) -> Method:
        """Client role, once open: send ``connection.update-secret`` (RabbitMQ: a fresh OAuth 2
        token), and return the method sent. The answer arrives as :class:`MethodReceived` on
        channel 0 with ``request`` set to it; a refusal is the server's ``connection.close``.
        The secret never appears in a repr.

        :raises LocalProtocolError: the server role, the connection is not open, or the version
            has no update-secret (0-8, 0-9).
        """
        update = self._spec.by_meaning.get("connection.update-secret")
        if update is None:
            raise LocalProtocolError(
                f"AMQP {self._spec.version.value} has no connection.update-secret",
                reply_code=ReplyCode.COMMAND_INVALID,
            )
        method = self._spec.make(update.NAME, new_secret=secret, reason=reason)
        self.send_method(0, method)
        return method

    def _redirected(self, method: Method) -> ConnectionRedirected:
        # 0-8/0-9: the server answered open with redirect; the connection is over (CLOSED).
        redirect = cast("_Redirect", method)
        return ConnectionRedirected(host=redirect.host, known_hosts=redirect.known_hosts)

    def _opened(self, method: Method | None = None) -> ConnectionOpened:
        return ConnectionOpened(
            server_properties=self._server_properties,
            client_properties=self._client_properties,
            channel_max=self._channel_max,
            frame_max=self._outbox.frame_max,
            heartbeat=self._heartbeat.interval,
            virtual_host=self._virtual_host,
        )

    # --- Handshake, server role ---------------------------------------------------------------

    def _on_start_ok(self, method: Method) -> AuthenticationRequested:
        if method.NAME == "connection.start-ok":
            start_ok = cast("ConnectionStartOk", method)
            self._client_properties = start_ok.client_properties
            self._mechanism = start_ok.mechanism
            handshake.check_start_ok(self.config, start_ok)
        response = cast("ConnectionStartOk | ConnectionSecureOk", method).response
        self._decision = "connection.start-ok"
        return AuthenticationRequested(
            mechanism=self._mechanism,
            response=response,
            username=handshake.username(self._mechanism, response),
            client_properties=self._client_properties,
        )

    def _decide(self, expected: str, what: str) -> None:
        self._check_usable()
        if self._decision is not expected:
            raise LocalProtocolError(
                f"no {what} is waiting for an answer", reply_code=ReplyCode.COMMAND_INVALID
            )
        self._decision = None

    def accept_authentication(self) -> None:
        """Server role: accept the credentials of :class:`AuthenticationRequested`; sends tune."""
        self._decide("connection.start-ok", "authentication")
        channel_max, frame_max, heartbeat = handshake.server_tune(self.config)
        self._send0(
            self._spec.make(
                "connection.tune", channel_max=channel_max, frame_max=frame_max, heartbeat=heartbeat
            )
        )

    def refuse_authentication(self, text: str) -> None:
        """Server role: refuse the credentials, as RabbitMQ does. A client that advertised the
        ``authentication_failure_close`` capability in start-ok is sent ``connection.close``
        403 ACCESS_REFUSED with *text* (then its close-ok is awaited). Any other client is told
        nothing (0-9-1: the server closes the socket; aioamqp, for one, fails on a close it
        did not ask for): the connection is over (``CLOSED``), close the transport.

        The close names no method (class and method 0), as RabbitMQ's does."""
        self._decide("connection.start-ok", "authentication")
        if not handshake.wants_refusal_close(self._client_properties):
            self._move(self.role, Input.SILENT_REFUSAL)
            return
        self._send_close(ReplyCode.ACCESS_REFUSED, f"ACCESS_REFUSED - {text}", None)

    def use_dialect(self, spec: ProtocolSpec) -> None:
        """Server role, answering :class:`AuthenticationRequested`: speak *spec*, another
        method table of the version the client's header chose, from now on: a dialect the
        client's properties name (:data:`AMQP_0_8_QPID` for qpid-python's 0-8 client). Call
        it before accepting or refusing the login.

        :raises LocalProtocolError: not the server role, no login waits for an answer, *spec*
            is another version, or octets are still waiting to be read or written (they were
            framed by the old table).
        """
        if self.role is not Role.SERVER or self._decision != "connection.start-ok":
            raise LocalProtocolError(
                "a dialect is chosen by the server while a login waits for an answer",
                reply_code=ReplyCode.COMMAND_INVALID,
            )
        if spec.version is not self._spec.version:
            raise LocalProtocolError(
                f"the client speaks AMQP {self._spec.version.value}, not {spec.version.value}",
                reply_code=ReplyCode.COMMAND_INVALID,
            )
        if self._reader.buffered or self.outbound_size:
            raise LocalProtocolError(
                "octets are still waiting to be read or written in the old dialect",
                reply_code=ReplyCode.COMMAND_INVALID,
            )
        frame_max = self._outbox.frame_max
        self._bind(spec)
        self._outbox.frame_max = self._reader.frame_max = frame_max

    def send_secure(self, challenge: bytes) -> None:
        """Server role: send a SASL challenge; the answer is another AuthenticationRequested."""
        self._decide("connection.start-ok", "authentication")
        self._send0(self._spec.make("connection.secure", challenge=challenge))

    def _on_tune_ok(self, method: Method) -> None:
        tune_ok = cast("ConnectionTuneOk", method)
        handshake.check_tune_ok(self.config, tune_ok)
        self._tuned(tune_ok.channel_max, tune_ok.frame_max, tune_ok.heartbeat)

    def _on_open(self, method: Method) -> VirtualHostRequested:
        open_ = cast("_Open", method)
        self._virtual_host = open_.virtual_host
        self._insist = open_.insist
        self._decision = "connection.open"
        return VirtualHostRequested(virtual_host=self._virtual_host)

    def accept_virtual_host(self) -> None:
        """Server role: accept :class:`VirtualHostRequested`; sends open-ok."""
        self._decide("connection.open", "virtual host")
        self._send0(self._spec.make("connection.open-ok"))
        self._events.append(self._opened())

    def redirect(self, host: str, known_hosts: str = "") -> None:
        """Server role, 0-8 and 0-9: answer :class:`VirtualHostRequested` with
        ``connection.redirect``: the client should connect to *host* instead. The connection is
        over (``CLOSED``): close the transport once the redirect is written.

        :raises LocalProtocolError: the version has no redirect (0-9-1), or the client's open
            set ``insist`` (the spec: the server MUST NOT redirect such a client).
        """
        self._decide("connection.open", "virtual host")
        if self._insist:
            self._decision = "connection.open"  # still owed an answer
            raise LocalProtocolError(
                "the client's connection.open insists on this server: it must not be redirected",
                reply_code=ReplyCode.COMMAND_INVALID,
            )
        if "connection.redirect" not in self._spec.by_meaning:
            self._decision = "connection.open"
            raise LocalProtocolError(
                f"AMQP {self._spec.version.value} has no connection.redirect",
                reply_code=ReplyCode.COMMAND_INVALID,
            )
        self._send0(
            self._spec.make(
                "connection.redirect",
                host=handshake.shortstr(host),
                known_hosts=handshake.shortstr(known_hosts),
            )
        )

    def refuse_virtual_host(self, text: str) -> None:
        """Server role: refuse the virtual host: 530 NOT_ALLOWED closes the connection."""
        self._decide("connection.open", "virtual host")
        self._send_close(ReplyCode.NOT_ALLOWED, f"NOT_ALLOWED - {text}", "connection.open")

    # --- Closing the connection ---------------------------------------------------------------

    def close(self, reply_code: int = 200, reply_text: str = "") -> None:
        """Start the close handshake; :class:`ConnectionClosed` follows the peer's close-ok."""
        self._check_usable()
        self._send_close(reply_code, reply_text, None)

    def _send_close(self, reply_code: int, reply_text: str, cause: str | None) -> None:
        """Send connection.close; *cause* is the meaning of the method that caused it."""
        spec = self._spec
        class_id, method_id = (0, 0) if cause is None else spec.ids(spec.by_meaning[cause])
        self._send0(
            spec.make(
                "connection.close",
                reply_code=int(reply_code),
                reply_text=handshake.shortstr(reply_text),
                class_id=class_id,
                method_id=method_id,
            )
        )

    # --- Channels -----------------------------------------------------------------------------

    def open_channel(self) -> int:
        """Client role: open the lowest free channel id; :class:`ChannelOpened` follows.

        :raises LocalProtocolError: every id up to ``channel_max`` is in use, or the
            connection is not open.
        """
        self._check_usable()
        open_method = self._channel_open()
        for number in range(1, self._channel_max + 1):
            if number not in self._channels:
                self.send_method(number, open_method)
                return number
        raise self._refused(
            LocalProtocolError,
            f"all {self._channel_max} channels are in use",
            ReplyCode.NOT_ALLOWED,
            self._channel_open,
        )

    def close_channel(self, channel: int, reply_code: int = 200, reply_text: str = "") -> None:
        """Start closing *channel*; :class:`ChannelClosed` follows the peer's close-ok."""
        self.send_method(
            channel,
            self._spec.make(
                "channel.close",
                reply_code=int(reply_code),
                reply_text=handshake.shortstr(reply_text),
                class_id=0,
                method_id=0,
            ),
        )

    def send_method(self, channel: int, method: Method) -> None:
        """Send a method without content.

        Requests that expect a reply are queued per channel; replies (the server role's
        ``queue.declare-ok``, ...) must answer the oldest request received on the channel.

        :raises LocalProtocolError: the method is illegal here (wrong role, state, channel,
            or order); nothing was written.
        """
        cls = type(method)
        if cls in self._fast_sends and self._state is _C_OPEN and self._error is None:
            # A consumer's ack on an open channel: everything the generic path would check
            # holds, so the frame is encoded in one pack. A field that can't be encoded (the
            # pack raises) takes the generic path, which raises the usual error.
            ch = self._channels.get(channel)
            if ch is not None and ch.state is _H_OPEN and type(channel) is int:
                if isinstance(method, BasicAck):  # the common one, inline
                    try:
                        frame: bytes | None = _pack_settle_frame(
                            1, channel, 13, _ACK_ID, method.delivery_tag,
                            1 if method.multiple else 0, 0xCE,
                        )  # fmt: skip
                    except Exception:
                        frame = None
                else:
                    frame = _settle_frame(channel, method)
                if frame is not None:
                    out = self._outbox.data
                    out += frame
                    return
        self._check_usable()
        if cls.HAS_CONTENT:
            raise self._refused(
                LocalProtocolError,
                f"{cls.NAME} carries content: use publish() or send_content()",
                ReplyCode.COMMAND_INVALID,
                cls,
            )
        if channel == 0:
            if cls is not self._close_cls:
                self._channel0.check_reply(method)
            self._send0(method)
            if cls is not self._close_cls:
                self._channel0.commit(method)
            return
        ch, row = self._check_channel_send(channel, method)
        self._outbox.method(channel, method)
        self._committed(channel, ch, method, row)

    def _check_channel_send(
        self, channel: int, method: Method
    ) -> tuple[ChannelMachine, ChannelTransition]:
        """The channel's machine (a new one for channel.open) and the row of *method*."""
        cls = type(method)
        if self._state is not _C.OPEN:
            raise self._refused(
                LocalProtocolError,
                f"cannot send {cls.NAME}: the connection is {self._state.value}, not OPEN",
                ReplyCode.COMMAND_INVALID,
                cls,
            )
        # The server role answers on whatever number the client opened (RabbitMQ 3.10 opens
        # channel 65535 under channel_max 2047); the client role stays within channel_max.
        highest = self._channel_max if self.role is Role.CLIENT else CHANNEL_MAX_LIMIT
        if type(channel) is not int or not 1 <= channel <= highest:
            raise self._refused(
                LocalProtocolError,
                f"channel {channel!r} is outside 1..{highest}",
                ReplyCode.CHANNEL_ERROR,
                cls,
            )
        ch = self._channels.get(channel)
        if ch is None:
            ch = ChannelMachine(channel, self._link)
        return ch, ch.check_send(method)

    def _committed(
        self, channel: int, ch: ChannelMachine, method: Method, row: ChannelTransition
    ) -> None:
        if ch.state is _H.CLOSED:  # opened by this send
            self._channels[channel] = ch
        ch.sent(method, row)

    def _on_channel_method(self, channel: int, method: Method) -> Event | None:
        cls = type(method)
        if cls in self._fast_receipts and self._state is _C_OPEN:
            # A delivery on an open channel with no content under way: the one legal case of
            # the checks the channel machine makes, taken without them.
            ch = self._channels.get(channel)
            if ch is not None and ch.state is _H_OPEN and ch.content is None:
                # The delivery in one step when its header and its one body frame are already
                # here (the usual case): no assembly, no per-frame dispatch. Anything unusual
                # goes frame by frame through the channel machine and its checks.
                content = self._reader.next_content(channel, cls.CLASS_ID, self._content_limit)
                if content is not None:
                    delivery = _new(self._message_class)
                    delivery.channel = channel
                    delivery.method = method
                    delivery.properties, delivery.body = content
                    delivery.request = None
                    return delivery
                ch.content = new_assembly(method)
                return None
        if self._state is not _C.OPEN:
            if discards(self._state, self.role):
                return None
            raise self._refused(
                RemoteProtocolError,
                f"{cls.NAME} on channel {channel} before the connection is open "
                f"({self._state.value})",
                ReplyCode.COMMAND_INVALID,
                cls,
            )
        ch = self._channels.get(channel)
        if ch is None:
            ch = ChannelMachine(channel, self._link)
            if cls is self._channel_open and len(self._channels) >= self._channel_max:
                # RabbitMQ 3.10 limits how many channels are open, not their numbers.
                raise RemoteProtocolError(
                    f"NOT_ALLOWED - number of channels opened ({len(self._channels)}) has "
                    f"reached the negotiated channel_max ({self._channel_max})",
                    reply_code=ReplyCode.NOT_ALLOWED,
                )
            event = ch.receive(method)
            if ch.state is not _H.CLOSED:
                self._channels[channel] = ch
            return event
        event = ch.receive(method)
        if ch.state is _H.CLOSED:
            del self._channels[channel]
        return event

    def publish(
        self, channel: int, method: Method, properties: ContentProperties, body: Buffer
    ) -> int | None:
        """Client role: send ``basic.publish`` with its content, split at ``frame_max - 8``.

        Returns the publish number (1, 2, ... counted from the ``confirm.select`` sent on the
        channel) that :class:`PublishConfirmed`, :class:`PublishNacked`, :class:`PublishReturned`
        and the lost-publish lists name; None when the channel is not in confirm mode.

        Bodies of 64 KiB or more are kept as memoryview slices for :meth:`buffers_to_send`;
        the caller must not change such a body until it was written.
        """
        if (
            self._fast_publish
            and self._state is _C_OPEN
            and self._error is None
            and type(method) is BasicPublish
            and type(properties) is BasicProperties
            and (type(body) is bytes or type(body) is bytearray)
            and len(body) < PASSTHROUGH
            and type(channel) is int
        ):
            # A publish on an open channel: everything the generic path checks holds but the
            # fields' encoding, which encode_publish tries (and leaves to the generic path, to
            # raise the usual error, when it can't).
            fast = self._channels.get(channel)
            outbox = self._outbox
            if (
                fast is not None
                and fast.state is _H_OPEN
                and encode_publish(outbox.data, channel, method, properties, body, outbox.frame_max)
            ):
                confirms = fast.confirms
                return None if confirms is None else confirms.number(method)
        ch = self._send_content(channel, method, properties, body)
        if not isinstance(method, BasicPublish):
            return None
        return ch.number_publish(method)

    def send_content(
        self,
        channel: int,
        method: Method,
        properties: ContentProperties,
        body: Buffer,
        *,
        relay: bool = False,
    ) -> None:
        """Server role: send ``basic.deliver``, ``basic.get-ok`` or ``basic.return`` with
        content (get-ok must answer the oldest ``basic.get`` received on the channel).

        *relay*: the properties are another client's, passed on as they arrived (a broker's
        delivery): in 0-8 and 0-9 their tables are sent as they are rather than narrowed to the
        version's field types, as RabbitMQ relays them. The method's own tables still are.
        """
        self._send_content(channel, method, properties, body, relay=relay)

    def _send_content(
        self,
        channel: int,
        method: Method,
        properties: ContentProperties,
        body: Buffer,
        *,
        relay: bool = False,
    ) -> ChannelMachine:
        if isinstance(body, str):  # memoryview's own error names neither the cause nor the fix
            raise TypeError(
                "a message body must be bytes (or bytearray, memoryview), not str: "
                "encode it first, e.g. text.encode()"
            )
        self._check_usable()
        cls = type(method)
        if not cls.HAS_CONTENT:
            raise self._refused(
                LocalProtocolError,
                f"{cls.NAME} carries no content: use send_method()",
                ReplyCode.COMMAND_INVALID,
                cls,
            )
        ch, row = self._check_channel_send(channel, method)
        self._outbox.content(channel, method, properties, body, relay=relay)
        self._committed(channel, ch, method, row)
        return ch

    # --- Output -------------------------------------------------------------------------------

    @property
    def unfinished_size(self) -> int:
        """Octets buffered for message bodies still arriving, on all channels (a server counts
        them against its memory; the content header bounds each by ``max_message_size``)."""
        total = 0
        for channel in self._channels.values():
            content = channel.content
            if content is not None and content.body is not None:
                total += len(content.body)
        return total

    @property
    def outbound_size(self) -> int:
        """How many octets :meth:`data_to_send` would hand out now: adapters bound what they
        let pile up with it (backpressure), without guessing what a call queued."""
        outbox = self._outbox
        return outbox.size if outbox.chunks else len(outbox.data)  # per publish: keep it cheap

    def data_to_send(self) -> bytes:
        """Everything to write, in order, as one ``bytes``; empties the outbound buffer.

        Still works after a protocol error, so the close that answers it can be written.
        """
        data = self._outbox.take()
        self._heartbeat.handed_out(len(data))
        return data

    def buffers_to_send(self) -> list[Buffer]:
        """Everything to write, in order, as buffers for ``writelines``/``sendmsg``: large bodies
        stay memoryview slices of the caller's body. Empties the outbound buffer."""
        buffers = self._outbox.take_buffers()
        if buffers:  # a first buffer is all heartbeats only when it is the only one
            self._heartbeat.handed_out(
                sum(map(len, buffers)) if len(buffers) > 1 else len(buffers[0])
            )
        return buffers

    # --- Heartbeats ---------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When :meth:`handle_timer` must be called next, on the adapter's clock; None when
        heartbeats are off (negotiated 0, not yet tuned) or the connection is over.

        Right after tuning this is ``0.0``, in the past on any clock: call ``handle_timer(now)``
        at once, it sets the baseline the later deadlines count from.
        """
        if self._eof or self._state is _C.CLOSED or self._state is _C.ERROR:
            return None
        return self._heartbeat.deadline()

    def handle_timer(self, now: float, *, reading: bool = True) -> None:
        """Let time pass: *now* is the adapter's clock in seconds (any origin, never going back).

        Every half interval with nothing written since the previous check (``data_to_send`` or
        ``buffers_to_send`` handed out only heartbeats or nothing), queues a heartbeat frame:
        flush ``data_to_send()`` after this call. When no octet arrived for two intervals,
        counted from the last octet's arrival (the *now* given to :meth:`receive_data`; without
        one, from the tick that first saw the octet), the next :meth:`next_event` returns
        :class:`HeartbeatTimeout`, after which the connection refuses every send.

        Pass ``reading=False`` while the adapter deliberately leaves the transport unread
        (backpressure from a full consumer buffer): silence then proves nothing, so the peer
        counts as alive, and heartbeats still go out.
        """
        if self.next_deadline() is None:
            return
        tick = self._heartbeat.tick(now, reading=reading)
        if tick is Tick.SEND_HEARTBEAT:
            self._outbox.data += HEARTBEAT_FRAME
        elif tick is Tick.PEER_DEAD:
            self._state = _C.ERROR
            self._decision = "dead"  # parse nothing more
            self._events.append(HeartbeatTimeout())


#: What the shell does with each method the peer sends on channel 0, by the table's effect.
_RECEIVED0: Final[dict[Effect, _Handler0]] = {
    Effect.NONE: Connection._passed0,
    Effect.START: Connection._on_start,
    Effect.START_OK: Connection._on_start_ok,
    Effect.SECURE: Connection._on_secure,
    Effect.TUNE: Connection._on_tune,
    Effect.TUNE_OK: Connection._on_tune_ok,
    Effect.OPEN: Connection._on_open,
    Effect.OPEN_OK: Connection._opened,
    Effect.REDIRECT: Connection._redirected,
    Effect.CLOSE: Connection._closed_by_peer,
    Effect.CLOSE_OK: Connection._close_ok,
    Effect.BLOCKED: Connection._blocked,
    Effect.UNBLOCKED: Connection._unblocked,
}
