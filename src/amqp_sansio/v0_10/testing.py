"""Helpers for AMQP 0-10 protocol tests without sockets, shaped like :mod:`amqp_sansio.testing`:
a client/server :class:`ConnectionPair`, feeders (whole, one octet at a time, in random pieces),
frame builders and a parser for asserting on the wire.

A typical test::

    pair = ConnectionPair(byte_at_a_time=True)
    pair.handshake()
    client, server = pair.attach("s1")
    client.transfer("amq.direct", b"hi", headers=[DeliveryProperties(routing_key="q")])
    [message] = pair.transfer(pair.client)      # the server's MessageReceived
    server.complete(message.command_id)
    pair.transfer(pair.server)                   # the client's CommandsCompleted
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, final

from .._events import NEED_DATA
from .._method import Role
from ._connection import Connection, ConnectionConfig
from ._events import AuthenticationRequested, Event, SessionOpened, VirtualHostRequested
from ._framing import (
    PROTOCOL_HEADER_0_10,
    Assembly,
    AssemblyReader,
    FrameReader,
    encode_command,
    encode_control,
)
from ._generated.spec_0_10 import MIN_MAX_FRAME_SIZE
from ._state import ConnectionState

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from .._method import Buffer
    from ._session import Session
    from ._types import Command, Control, Struct

__all__ = [
    "ConnectionPair",
    "command_frames",
    "control_frames",
    "feed",
    "feed_in_pieces",
    "get_all_events",
    "parse_assemblies",
]


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

    *pieces* is the sizes of the pieces in order (below 1 counts as 1; the rest goes in one
    piece when they run out), or a seeded :class:`random.Random` drawing sizes of 1 to 64.
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


def parse_assemblies(data: Buffer) -> list[Assembly]:
    """The controls and commands in *data* (what a core wrote), decoded.

    A leading 0-10 protocol header is skipped.

    :raises ValueError: *data* ends inside a frame or an assembly.
    :raises RemoteProtocolError: *data* is not valid framing.
    """
    view = memoryview(data)
    if bytes(view[:8]) == PROTOCOL_HEADER_0_10:
        view = view[8:]
    frames = FrameReader()
    assemblies = AssemblyReader()
    frames.feed(view)
    out: list[Assembly] = []
    channels: set[int] = set()
    while (frame := frames.next_frame()) is not None:
        channels.add(frame.channel)
        assembly = assemblies.receive(frame)
        if assembly is not None:
            out.append(assembly)
    if frames.buffered:
        raise ValueError(f"{frames.buffered} octets after the last whole frame")
    if any(assemblies.in_progress(channel) for channel in channels):
        raise ValueError("the data ends inside an assembly")
    return out


def control_frames(
    channel: int, control: Control, *, max_frame_size: int = MIN_MAX_FRAME_SIZE
) -> bytes:
    """The octets of one control."""
    out = bytearray()
    encode_control(out, channel, control, max_frame_size)
    return bytes(out)


def command_frames(
    channel: int,
    command: Command,
    *,
    sync: bool = False,
    headers: Sequence[Struct] | None = None,
    body: Buffer | None = None,
    max_frame_size: int = MIN_MAX_FRAME_SIZE,
) -> bytes:
    """The octets of one command assembly (its command id is implicit: the receiving session
    gives it the next one)."""
    out = bytearray()
    encode_command(out, channel, command, max_frame_size, sync=sync, headers=headers, body=body)
    return bytes(out)


@final
class ConnectionPair:
    """A 0-10 client core and server core joined by a perfect in-memory link.

    Nothing moves by itself: :meth:`transfer` moves what one side queued to the other and
    returns the events the receiver produced, so a test sees every step. Everything moved is
    also kept in ``client_sent`` and ``server_sent``, for replaying a conversation into one
    role (fuzzing, regression tests).
    """

    def __init__(
        self,
        client_config: ConnectionConfig | None = None,
        server_config: ConnectionConfig | None = None,
        *,
        byte_at_a_time: bool = False,
    ) -> None:
        self.client = Connection(Role.CLIENT, client_config)
        self.server = Connection(Role.SERVER, server_config)
        self.byte_at_a_time = byte_at_a_time
        self.client_sent = bytearray()
        self.server_sent = bytearray()

    def peer(self, conn: Connection) -> Connection:
        """The other end of *conn*."""
        return self.server if conn is self.client else self.client

    def transfer(self, sender: Connection) -> list[Event]:
        """Move everything *sender* queued to its peer; return the peer's events (none when
        nothing was queued: an empty transfer is not an end of stream)."""
        data = self._take(sender)
        if not data:
            return []
        return feed(self.peer(sender), data, byte_at_a_time=self.byte_at_a_time)

    def _take(self, sender: Connection) -> bytes:
        data = sender.data_to_send()
        (self.client_sent if sender is self.client else self.server_sent).extend(data)
        return data

    def exchange(self, first: Connection | None = None, *, rounds: int = 50) -> list[Event]:
        """Move data both ways, starting with *first* (default the client), until neither side
        has anything to send; return every event in order."""
        sender = self.client if first is None else first
        events: list[Event] = []
        idle = 0
        for _ in range(rounds):
            data = self._take(sender)
            receiver = self.peer(sender)
            if data:
                events += feed(receiver, data, byte_at_a_time=self.byte_at_a_time)
                idle = 0
            else:
                idle += 1
                if idle == 2:
                    return events
            sender = receiver
        raise AssertionError(f"the peers still talk after {rounds} rounds: {events}")

    def handshake(self) -> tuple[list[Event], list[Event]]:
        """Run the handshake to ``open-ok``, the server accepting any credentials and virtual
        host. Returns the client's and the server's events."""
        client_events: list[Event] = []
        server_events: list[Event] = []
        for _ in range(10):
            moved = self.transfer(self.client)
            while moved:
                server_events += moved
                for event in moved:
                    if isinstance(event, AuthenticationRequested):
                        self.server.accept_authentication()
                    elif isinstance(event, VirtualHostRequested):
                        self.server.accept_virtual_host()
                moved = get_all_events(self.server)
            client_events += self.transfer(self.server)
            if (
                self.client.state is ConnectionState.OPEN
                and self.server.state is ConnectionState.OPEN
            ):
                return client_events, server_events
        raise AssertionError(f"handshake did not finish: {client_events}, {server_events}")

    def attach(self, name: bytes | str = b"session") -> tuple[Session, Session]:
        """Attach a session from the client and move the controls until both ends opened it.

        :raises AssertionError: either end did not report :class:`SessionOpened`.
        """
        session = self.client.attach(name)
        server_events = self.transfer(self.client)
        client_events = self.transfer(self.server)
        opened = [e for e in server_events if isinstance(e, SessionOpened)]
        if not opened or not any(isinstance(e, SessionOpened) for e in client_events):
            raise AssertionError(f"session {name!r} did not open: {server_events}, {client_events}")
        # The client's command-point is still queued: deliver it.
        leftover = self.transfer(self.client)
        if leftover:
            raise AssertionError(f"unexpected events after attaching: {leftover}")
        return session, self.server.session(opened[0].channel)
