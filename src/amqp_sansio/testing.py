"""Helpers for protocol tests without sockets: a client/server :class:`ConnectionPair`, a
byte-at-a-time feeder and frame builders.

A typical test::

    pair = ConnectionPair(byte_at_a_time=True)
    pair.handshake()
    channel = pair.client.open_channel()
    server_events = pair.transfer(pair.client)   # [ChannelOpened(channel=1)]
    client_events = pair.transfer(pair.server)   # [ChannelOpened(channel=1)]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

from ._connection import Connection, ConnectionConfig
from ._events import NEED_DATA, AuthenticationRequested, Event, VirtualHostRequested
from ._frames import encode_content, encode_method_frame
from ._generated.spec_0_9_1 import FRAME_MIN_SIZE
from ._method import Role

if TYPE_CHECKING:
    from ._method import Buffer, ContentProperties, Method

__all__ = ["ConnectionPair", "content_frames", "feed", "get_all_events", "method_frame"]


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


def method_frame(channel: int, method: Method, *, frame_max: int = FRAME_MIN_SIZE) -> bytes:
    """The octets of one method frame."""
    out = bytearray()
    encode_method_frame(out, channel, method, frame_max=frame_max)
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

    def peer(self, conn: Connection) -> Connection:
        """The other end of *conn*."""
        return self.server if conn is self.client else self.client

    def transfer(self, sender: Connection) -> list[Event]:
        """Move everything *sender* queued to its peer; return the peer's events."""
        return feed(self.peer(sender), sender.data_to_send(), byte_at_a_time=self.byte_at_a_time)

    def handshake(self) -> tuple[list[Event], list[Event]]:
        """Run the handshake to open-ok, the server accepting any credentials and virtual host.

        Returns the client's and the server's events.
        """
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
            if self.client.state.value == "OPEN" and self.server.state.value == "OPEN":
                return client_events, server_events
        raise AssertionError(f"handshake did not finish: {client_events}, {server_events}")
