"""TcpReassembler alone: segments in, each direction's octets in sequence order out."""

from __future__ import annotations

import itertools
import random

from hypothesis import given
from hypothesis import strategies as st

from amqp_tools import Endpoint, Side, TcpReassembler, TcpSegment

CLIENT = Endpoint("10.0.0.1", 40000)
SERVER = Endpoint("10.0.0.2", 5672)


def segment(
    seq: int,
    payload: bytes = b"",
    *,
    packet: int = 1,
    source: Endpoint = CLIENT,
    syn: bool = False,
    ack: bool = False,
    fin: bool = False,
    rst: bool = False,
) -> TcpSegment:
    destination = SERVER if source == CLIENT else CLIENT
    return TcpSegment(
        packet, 0.0, source, destination, seq % 2**32, payload, syn=syn, ack=ack, fin=fin, rst=rst
    )


def stream(reassembler: TcpReassembler, segments: list[TcpSegment]) -> bytes:
    return b"".join(chunk.data for s in segments for chunk in reassembler.add(s))


@given(
    data=st.binary(min_size=1, max_size=300),
    isn=st.integers(0, 2**32 - 1),
    cuts=st.lists(st.integers(1, 299), max_size=20),
    seed=st.integers(0, 2**16),
)
def test_any_order_and_any_repeats_give_the_stream(
    data: bytes, isn: int, cuts: list[int], seed: int
) -> None:
    rng = random.Random(seed)
    bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    pieces = [
        segment(isn + 1 + start, data[start:end]) for start, end in itertools.pairwise(bounds)
    ]
    # Retransmissions, some of them repacketised over two neighbours.
    for _ in range(rng.randint(0, 4)):
        first = rng.randrange(len(data))
        last = rng.randint(first + 1, len(data))
        pieces.append(segment(isn + 1 + first, data[first:last]))
    rng.shuffle(pieces)
    reassembler = TcpReassembler()
    assert stream(reassembler, [segment(isn, syn=True), *pieces]) == data
    assert reassembler.finish() == []


def test_chunks_say_where_they_are_and_which_packet_completed_them() -> None:
    reassembler = TcpReassembler()
    reassembler.add(segment(99, syn=True))
    assert reassembler.add(segment(105, b"world", packet=2)) == []
    (chunk,) = reassembler.add(segment(100, b"hello", packet=3))
    assert (chunk.offset, chunk.data, chunk.packet, chunk.side) == (
        0,
        b"helloworld",
        3,
        Side.CLIENT,
    )
    assert chunk.connection.received(Side.CLIENT) == 10


def test_the_first_copy_wins_and_repeats_are_counted() -> None:
    reassembler = TcpReassembler()
    data = stream(
        reassembler,
        [segment(0, syn=True), segment(1, b"abcd"), segment(3, b"XXef"), segment(1, b"ab")],
    )
    assert data == b"abcdef"
    (conn,) = reassembler.connections
    assert conn.retransmitted(Side.CLIENT) == 4


def test_a_hole_the_capture_never_filled() -> None:
    reassembler = TcpReassembler()
    stream(reassembler, [segment(0, syn=True), segment(1, b"abc"), segment(10, b"later")])
    (gap,) = reassembler.finish()
    assert (gap.side, gap.offset, gap.missing, gap.stranded) == (Side.CLIENT, 3, 6, 5)


def test_both_directions_and_the_server_side() -> None:
    reassembler = TcpReassembler()
    reassembler.add(segment(0, syn=True))
    reassembler.add(segment(500, source=SERVER, syn=True, ack=True))
    (chunk,) = reassembler.add(segment(501, b"hi", source=SERVER))
    assert chunk.side is Side.SERVER
    assert chunk.connection.client == CLIENT
    assert repr(chunk.connection) == "<TcpConnection 1 10.0.0.1:40000 > 10.0.0.2:5672>"


def test_a_capture_that_misses_the_syn_or_starts_mid_stream() -> None:
    reassembler = TcpReassembler()
    # The SYN-ACK tells which end is the server even without the SYN.
    reassembler.add(segment(500, source=SERVER, syn=True, ack=True))
    (conn,) = reassembler.connections
    assert (conn.client, conn.server, conn.saw_syn) == (CLIENT, SERVER, True)
    # No SYN at all: the first segment's sender counts as the client, its seq as offset 0.
    other = TcpReassembler()
    (chunk,) = other.add(segment(7777, b"mid", source=SERVER))
    assert (chunk.offset, chunk.connection.client, chunk.connection.saw_syn) == (0, SERVER, False)


def test_data_on_a_syn() -> None:
    reassembler = TcpReassembler()
    (chunk,) = reassembler.add(segment(41, b"fast open", syn=True))
    assert chunk.data == b"fast open"
    assert stream(reassembler, [segment(51, b"!")]) == b"!"


def test_a_reused_four_tuple_is_a_new_connection() -> None:
    reassembler = TcpReassembler()
    stream(reassembler, [segment(0, syn=True), segment(1, b"one"), segment(4, fin=True)])
    (chunk,) = reassembler.add(segment(9000, b"two", syn=True))
    assert chunk.connection.number == 2
    # A repeated SYN (same initial sequence number) stays in its connection.
    assert reassembler.add(segment(9000, syn=True)) == []
    assert len(reassembler.connections) == 2
    # So does a RST, which only closes.
    reassembler.add(segment(9004, rst=True))
    assert reassembler.connections[1].closed
    assert str(Endpoint("::1", 5672)) == "[::1]:5672"
