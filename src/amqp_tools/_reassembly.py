"""TCP stream reassembly: segments in capture order in, each direction's octets in sequence
order out, with nothing but the standard library.

Each direction of a connection keeps the sequence number its stream starts at (from the SYN, or
from the first segment seen when the capture began mid-connection) and the offset of the next
octet it expects. A segment is placed by its sequence number relative to that start, unwrapped
around the next expected offset, so 32-bit wrap-around and streams past 4 GiB work:

* the octets the direction already delivered (a retransmission, or the overlapping part of a
  repacketised one) are dropped; where they differ from what was delivered first, the first
  copy wins, as in Wireshark's default;
* octets ahead of the next expected offset (out of order, or after a segment the capture
  missed) wait until the hole before them is filled;
* whatever still waits when the capture ends sits behind a hole the capture never filled, and
  :meth:`TcpReassembler.finish` reports it as a :class:`StreamGap`.

A SYN on a 4-tuple whose connection was closed (FIN or RST) or that carries a different initial
sequence number starts a new connection (port reuse).
"""

from __future__ import annotations

import enum
from typing import Final, final

import attrs

__all__ = [
    "Endpoint",
    "Side",
    "StreamChunk",
    "StreamGap",
    "TcpConnection",
    "TcpReassembler",
    "TcpSegment",
]

_SEQ_MOD: Final = 1 << 32
_HALF: Final = 1 << 31


@final
@attrs.frozen
class Endpoint:
    """One end of a TCP connection."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@final
@attrs.frozen
class TcpSegment:
    """One captured TCP segment, as the capture reader hands it over."""

    #: The packet's number in the capture, from 1 (as Wireshark counts).
    packet: int
    #: Seconds since the capture's first packet.
    time: float
    source: Endpoint
    destination: Endpoint
    seq: int
    payload: bytes = b""
    syn: bool = False
    ack: bool = False
    fin: bool = False
    rst: bool = False


@final
class Side(enum.Enum):
    """Which end sent a direction's octets. The client is the end that sent the first SYN
    (or, when the capture has no SYN, the end that sent the first segment)."""

    CLIENT = "client"
    SERVER = "server"

    @property
    def arrow(self) -> str:
        """``C>S`` or ``S>C``."""
        return "C>S" if self is Side.CLIENT else "S>C"


@final
class _Direction:
    """The reassembly state of one direction."""

    __slots__ = ("base", "closed", "delivered", "first_packet", "pending", "retransmitted")

    def __init__(self) -> None:
        self.base: int | None = None  # sequence number of stream offset 0
        self.delivered = 0  # stream offset of the next octet expected
        self.pending: dict[int, tuple[bytes, int, float]] = {}  # offset -> (octets, packet, time)
        self.closed = False  # FIN or RST seen
        self.retransmitted = 0  # octets received again (dropped)
        self.first_packet: int | None = None

    def offset_of(self, seq: int) -> int:
        assert self.base is not None
        expected = (self.base + self.delivered) % _SEQ_MOD
        delta = (seq - expected) % _SEQ_MOD
        if delta >= _HALF:
            delta -= _SEQ_MOD
        return self.delivered + delta


@final
class TcpConnection:
    """One TCP connection: its ends and the reassembly state of both directions."""

    def __init__(self, number: int, client: Endpoint, server: Endpoint, *, saw_syn: bool) -> None:
        #: Connections are numbered from 1 in the order their first segment was captured.
        self.number = number
        self.client = client
        self.server = server
        #: Whether the capture holds the connection's start (its first SYN).
        self.saw_syn = saw_syn
        self._directions = {Side.CLIENT: _Direction(), Side.SERVER: _Direction()}

    def __repr__(self) -> str:
        return f"<TcpConnection {self.number} {self.client} > {self.server}>"

    def side_of(self, source: Endpoint) -> Side:
        return Side.CLIENT if source == self.client else Side.SERVER

    def received(self, side: Side) -> int:
        """Octets of *side*'s stream delivered in order so far."""
        return self._directions[side].delivered

    def retransmitted(self, side: Side) -> int:
        """Octets of *side*'s stream captured more than once (dropped)."""
        return self._directions[side].retransmitted

    @property
    def closed(self) -> bool:
        d = self._directions
        return d[Side.CLIENT].closed or d[Side.SERVER].closed


@final
@attrs.frozen
class StreamChunk:
    """Octets of one direction, in sequence order, newly made contiguous by a segment."""

    connection: TcpConnection
    side: Side
    #: Stream offset of the first octet (0 is the octet after the SYN).
    offset: int
    data: bytes
    #: The packet whose arrival made these octets available, and its time.
    packet: int
    time: float


@final
@attrs.frozen
class StreamGap:
    """Octets that never became contiguous: the capture lacks the segment(s) before them."""

    connection: TcpConnection
    side: Side
    #: Stream offset of the first missing octet.
    offset: int
    #: How many octets are missing before the next captured ones.
    missing: int
    #: Captured octets stranded behind the hole (never delivered).
    stranded: int


@final
class TcpReassembler:
    """Turns captured segments into in-order stream chunks, connection by connection."""

    def __init__(self) -> None:
        self._by_flow: dict[tuple[Endpoint, Endpoint], TcpConnection] = {}
        self._connections: list[TcpConnection] = []

    @property
    def connections(self) -> list[TcpConnection]:
        """Every connection seen, in order of first appearance."""
        return list(self._connections)

    def add(self, segment: TcpSegment) -> list[StreamChunk]:
        """Take one segment; return the octets it made contiguous (one chunk, or none)."""
        conn = self._connection_for(segment)
        side = conn.side_of(segment.source)
        direction = conn._directions[side]
        if direction.first_packet is None:
            direction.first_packet = segment.packet
        seq = segment.seq
        if segment.syn:
            if direction.base is None:
                direction.base = (seq + 1) % _SEQ_MOD
            seq = (seq + 1) % _SEQ_MOD  # data on a SYN (TCP Fast Open) follows the SYN
        elif direction.base is None:
            direction.base = seq  # the capture started mid-connection
        if segment.fin or segment.rst:
            direction.closed = True
        if not segment.payload:
            return []
        return self._place(conn, side, direction, seq, segment)

    def finish(self) -> list[StreamGap]:
        """The holes the capture never filled, one per direction that has octets behind one."""
        gaps: list[StreamGap] = []
        for conn in self._connections:
            for side, direction in conn._directions.items():
                if not direction.pending:
                    continue
                first = min(direction.pending)
                stranded = sum(len(data) for data, _, _ in direction.pending.values())
                gaps.append(
                    StreamGap(
                        conn, side, direction.delivered, first - direction.delivered, stranded
                    )
                )
        return gaps

    def _connection_for(self, segment: TcpSegment) -> TcpConnection:
        flow = (segment.source, segment.destination)
        conn = self._by_flow.get(flow)
        if conn is not None and segment.syn and not segment.ack:
            client = conn._directions[Side.CLIENT]
            same_start = client.base == (segment.seq + 1) % _SEQ_MOD
            if conn.closed or not same_start or conn.client != segment.source:
                conn = None  # the 4-tuple is reused by a new connection
        if conn is None:
            number = len(self._connections) + 1
            if segment.syn and segment.ack:  # the capture missed the SYN: this is the server
                conn = TcpConnection(number, segment.destination, segment.source, saw_syn=True)
            else:
                conn = TcpConnection(
                    number, segment.source, segment.destination, saw_syn=segment.syn
                )
            self._connections.append(conn)
            self._by_flow[flow] = conn
            self._by_flow[(segment.destination, segment.source)] = conn
        return conn

    def _place(
        self, conn: TcpConnection, side: Side, direction: _Direction, seq: int, segment: TcpSegment
    ) -> list[StreamChunk]:
        data = segment.payload
        offset = direction.offset_of(seq)
        end = offset + len(data)
        if end <= direction.delivered:
            direction.retransmitted += len(data)
            return []
        if offset > direction.delivered:
            waiting = direction.pending.get(offset)
            if waiting is None or len(waiting[0]) < len(data):
                direction.pending[offset] = (data, segment.packet, segment.time)
            else:
                direction.retransmitted += len(data)
            return []
        if offset < direction.delivered:
            direction.retransmitted += direction.delivered - offset
            data = data[direction.delivered - offset :]
        start = direction.delivered
        pieces = [data]
        direction.delivered += len(data)
        while direction.pending:
            ready = [at for at in direction.pending if at <= direction.delivered]
            if not ready:
                break
            for at in sorted(ready):
                held, _, _ = direction.pending.pop(at)
                held_end = at + len(held)
                if held_end <= direction.delivered:
                    direction.retransmitted += len(held)
                    continue
                skip = direction.delivered - at
                direction.retransmitted += skip
                pieces.append(held[skip:])
                direction.delivered = held_end
        return [StreamChunk(conn, side, start, b"".join(pieces), segment.packet, segment.time)]
