"""Helpers for protocol tests without sockets: a client/server :class:`ConnectionPair`,
feeders (whole, one octet at a time, in random pieces), frame builders and a frame parser for
asserting on the wire; a client against a server factory in memory (:class:`MemoryConnection`)
and the fault sweep that cuts a workload at every frame or handshake octet, recovers it and
checks the recovery invariants (:func:`fault_sweep`).

A typical test::

    pair = ConnectionPair(byte_at_a_time=True)
    pair.handshake()
    channel = pair.client.open_channel()
    server_events = pair.transfer(pair.client)   # [ChannelOpened(channel=1)]
    client_events = pair.transfer(pair.server)   # [ChannelOpened(channel=1)]
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, final

from .._connection import Connection, ConnectionConfig
from .._errors import RemoteProtocolError
from .._events import (
    NEED_DATA,
    AuthenticationRequested,
    ChannelOpened,
    Event,
    VirtualHostRequested,
)
from .._frames import FrameReader, encode_content, encode_method_frame
from .._generated.spec_0_9_1 import FRAME_MIN_SIZE
from .._method import Role
from .._protocol import AMQP_0_9_1
from ._backlog import BacklogConsume
from ._sweep import (
    MemoryConnection,
    MemoryConsumer,
    MemoryMessage,
    QueueProbe,
    ServerFactory,
    ServerSide,
    SweepReport,
    Workload,
    fault_sweep,
    run_workload,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .._frames import Frame
    from .._method import Buffer, ContentProperties, Method
    from .._protocol import ProtocolSpec

__all__ = [
    "BacklogConsume",
    "ConnectionPair",
    "MemoryConnection",
    "MemoryConsumer",
    "MemoryMessage",
    "QueueProbe",
    "ServerFactory",
    "ServerSide",
    "SweepReport",
    "Workload",
    "content_frames",
    "fault_sweep",
    "feed",
    "feed_in_pieces",
    "get_all_events",
    "method_frame",
    "parse_frames",
    "run_workload",
]

#: The largest frame the parser in :func:`parse_frames` accepts by default ("no limit").
_NO_FRAME_LIMIT = 0xFFFF_FFFF


def get_all_events(conn: Connection) -> list[Event]:
    """Call ``next_event()`` until it returns ``NEED_DATA``."""
    events: list[Event] = []
    while True:
        event = conn.next_event()
        if event is NEED_DATA:
            return events
        events.append(event)


def feed(conn: Connection, data: bytes, *, byte_at_a_time: bool = False) -> list[Event]:
    """Give *data* to *conn* (whole, or one octet at a time draining events after each) and
    return every event it produced. ``b""`` feeds the end of the stream."""
    if not byte_at_a_time or not data:
        conn.receive_data(data)
        return get_all_events(conn)
    events: list[Event] = []
    for index in range(len(data)):
        conn.receive_data(data[index : index + 1])
        events += get_all_events(conn)
    return events


def feed_in_pieces(
    conn: Connection, data: bytes, pieces: random.Random | Iterable[int]
) -> list[Event]:
    """Give *data* to *conn* in pieces, draining events after each, and return every event.

    *pieces* is either the sizes of the pieces, in order (a size below 1 counts as 1; when the
    sizes run out the rest goes in one piece), or a seeded :class:`random.Random` that draws
    sizes from 1 to 64 octets. However *data* is cut, a correct core produces the same events.
    ``b""`` feeds the end of the stream.
    """
    if not data:
        return feed(conn, data)
    if isinstance(pieces, random.Random):
        rng = pieces
        sizes: Iterable[int] = iter(lambda: rng.randint(1, 64), 0)
    else:
        sizes = pieces
    events: list[Event] = []
    offset = 0
    for size in sizes:
        if offset >= len(data):
            break
        end = offset + max(size, 1)
        conn.receive_data(data[offset:end])
        events += get_all_events(conn)
        offset = end
    if offset < len(data):
        conn.receive_data(data[offset:])
        events += get_all_events(conn)
    return events


def parse_frames(
    data: Buffer, *, frame_max: int = _NO_FRAME_LIMIT, protocol: ProtocolSpec = AMQP_0_9_1
) -> list[Frame]:
    """The frames in *data*, for asserting on what a core wrote, read with *protocol*'s method
    table.

    A leading protocol header of that version (what a client core writes first) is skipped.

    :raises ValueError: *data* ends inside a frame.
    :raises RemoteProtocolError: *data* is not valid framing.
    """
    view = memoryview(data)
    if bytes(view[:8]) == protocol.header:
        view = view[8:]
    reader = FrameReader(
        frame_max=frame_max, methods=protocol.methods, properties=protocol.properties
    )
    reader.feed(view)
    frames: list[Frame] = []
    while (frame := reader.next_frame()) is not None:
        frames.append(frame)
    if reader.buffered:
        raise ValueError(f"{reader.buffered} octets after the last whole frame")
    return frames


def method_frame(
    channel: int,
    method: Method,
    *,
    frame_max: int = FRAME_MIN_SIZE,
    protocol: ProtocolSpec = AMQP_0_9_1,
) -> bytes:
    """The octets of one method frame, with the ids *protocol* gives the method (0-8 numbers
    connection.close (10, 60)); its tables are encoded as they are."""
    out = bytearray()
    encode_method_frame(out, channel, method, frame_max=frame_max)
    ids = protocol.wire_ids.get(type(method))
    if ids is not None:
        out[7:11] = ids
    return bytes(out)


def content_frames(
    channel: int,
    method: Method,
    properties: ContentProperties,
    body: Buffer,
    *,
    frame_max: int = FRAME_MIN_SIZE,
) -> bytes:
    """The octets of a content method, its header and its body frames."""
    out = bytearray()
    encode_content(out, channel, method, properties, body, frame_max)
    return bytes(out)


@final
class ConnectionPair:
    """A client core and a server core joined by a perfect in-memory link.

    Nothing moves by itself: :meth:`transfer` moves what one side has queued to the other
    and returns the events the receiver produced, so a test sees every step.

    With *server_side* an application answers for the server (the embedded broker, through
    ``amqp_broker.memory_pair()``): every event of the server core goes to
    ``server_side.handle()`` as it arrives, :meth:`handshake` leaves the credentials to it,
    and :attr:`server` is ``server_side.core``.
    """

    def __init__(
        self,
        client_config: ConnectionConfig | None = None,
        server_config: ConnectionConfig | None = None,
        *,
        byte_at_a_time: bool = False,
        server_side: ServerSide | None = None,
    ) -> None:
        if server_side is not None and server_config is not None:
            raise ValueError("server_config is for a bare server core: server_side brings its own")
        self.client = Connection(Role.CLIENT, client_config)
        self.server_side = server_side
        self.server = (
            Connection(Role.SERVER, server_config) if server_side is None else server_side.core
        )
        self.byte_at_a_time = byte_at_a_time

    def peer(self, conn: Connection) -> Connection:
        """The other end of *conn*."""
        return self.server if conn is self.client else self.client

    def transfer(self, sender: Connection) -> list[Event]:
        """Move everything *sender* queued to its peer; return the peer's events.

        With nothing queued this moves nothing and returns ``[]`` (the peer is not told the
        link closed: that is :meth:`end_of_stream`), so calling it "just in case" is safe.
        """
        side = self.server_side
        if side is not None and sender is self.server:
            side.flush()
        data = sender.data_to_send()
        if not data:
            return []
        if side is None or sender is self.server:
            return feed(self.peer(sender), data, byte_at_a_time=self.byte_at_a_time)
        return self._serve(data)

    def _serve(self, data: bytes) -> list[Event]:
        """Give the client's *data* to the server side, which acts on each event."""
        side = self.server_side
        assert side is not None
        core = side.core
        pieces = [data[i : i + 1] for i in range(len(data))] if self.byte_at_a_time else [data]
        events: list[Event] = []
        for piece in pieces:
            core.receive_data(piece)
            while True:
                try:
                    event = core.next_event()
                except RemoteProtocolError as exc:
                    side.protocol_error(exc)
                    return events
                if event is NEED_DATA:
                    break
                events.append(event)
                side.handle(event)
        return events

    def end_of_stream(self, sender: Connection) -> list[Event]:
        """Close *sender*'s side of the link: its peer receives the end of the stream (``b""``,
        as when a socket read returns nothing); return the peer's events.

        Whatever *sender* still had queued is moved first. A peer that did not expect the end
        reports :class:`~amqp_sansio.ConnectionLost`; after this, moving more data to it is a
        ``RuntimeError``, as for a closed socket.
        """
        events = self.transfer(sender)
        if self.server_side is not None and sender is self.client:
            return events + self._serve(b"")
        return events + feed(self.peer(sender), b"")

    def open_channel(self) -> int:
        """Open a channel from the client and move the open and the open-ok; return its id.

        :raises AssertionError: either end did not report :class:`ChannelOpened`.
        """
        channel = self.client.open_channel()
        opened = ChannelOpened(channel=channel)
        server_events = self.transfer(self.client)
        client_events = self.transfer(self.server)
        if opened not in server_events or opened not in client_events:
            raise AssertionError(
                f"channel {channel} did not open: {server_events}, {client_events}"
            )
        return channel

    def handshake(self) -> tuple[list[Event], list[Event]]:
        """Run the handshake to open-ok, the server accepting any credentials and virtual host
        (with a *server_side*, as it decides).

        Returns the client's and the server's events.

        :raises AssertionError: the handshake did not finish (a refused login: the events
            in the message say why).
        """
        client_events: list[Event] = []
        server_events: list[Event] = []
        for _ in range(10):
            moved = self.transfer(self.client)
            while moved:
                server_events += moved
                if self.server_side is not None:
                    break  # it answered each event already
                for event in moved:
                    if isinstance(event, AuthenticationRequested):
                        self.server.accept_authentication()
                    elif isinstance(event, VirtualHostRequested):
                        self.server.accept_virtual_host()
                moved = get_all_events(self.server)
            client_events += self.transfer(self.server)
            if self.client.state.value == "OPEN" and self.server.state.value == "OPEN":
                return client_events, server_events
        raise AssertionError(f"handshake did not finish: {client_events}, {server_events}")
