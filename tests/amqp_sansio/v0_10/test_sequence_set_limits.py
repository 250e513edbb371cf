"""Sequence sets from a hostile peer (issue 27, items 11 and 15): decoding and building one is
linear in its ranges, counted in executed lines of the codec rather than timed; a set past
the wire's limit does not encode, and nothing is written."""

from __future__ import annotations

import random
import struct
import sys
from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amqp_sansio.v0_10 import (
    MAX_SEQUENCE_SET_RANGES,
    LocalProtocolError,
    MessageAccept,
    QueuePurge,
    SequenceSet,
    SessionCompleted,
    _session,
    _types,
    serial_le,
    serial_lt,
)
from amqp_sansio.v0_10._generated import spec_0_10
from amqp_sansio.v0_10.framing import decode_sequence_set, encode_sequence_set
from amqp_sansio.v0_10.testing import ConnectionPair, control_frames, feed

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType, ModuleType

    from _typeshed import TraceFunction

_MASK = (1 << 32) - 1


def lines_run(modules: tuple[ModuleType, ...], work: Callable[[], object]) -> int:
    """How many lines of *modules* run while *work* runs (the C sort inside counts as none:
    it is O(n log n) whatever the input)."""
    files = {module.__file__ for module in modules}
    count = 0

    def local(frame: FrameType, event: str, arg: object) -> TraceFunction:
        nonlocal count
        if event == "line":
            count += 1
        return local

    def calls(frame: FrameType, event: str, arg: object) -> TraceFunction | None:
        return local if frame.f_code.co_filename in files else None

    previous = sys.gettrace()
    sys.settrace(calls)
    try:
        work()
    finally:
        sys.settrace(previous)
    return count


def scattered(count: int, seed: int = 27) -> list[tuple[int, int]]:
    """*count* ranges no two of which touch, in a shuffled order, around the id wrap."""
    base = _MASK - 3 * count // 2
    ranges = [((base + 3 * n) & _MASK, (base + 3 * n + 1) & _MASK) for n in range(count)]
    random.Random(seed).shuffle(ranges)
    return ranges


def wire(ranges: list[tuple[int, int]]) -> bytes:
    return struct.pack(">H", 8 * len(ranges)) + b"".join(struct.pack(">II", *r) for r in ranges)


def test_decoding_the_largest_sets_is_linear() -> None:
    small, large = wire(scattered(1_000)), wire(scattered(8_000))  # 8,000 ranges: 64,000 octets
    modules = (_types, spec_0_10)
    small_lines = lines_run(modules, lambda: decode_sequence_set(small, 0))
    large_lines = lines_run(modules, lambda: decode_sequence_set(large, 0))
    # A quadratic merge runs about 64 times the lines for 8 times the ranges.
    assert large_lines <= 8.2 * small_lines
    decoded, end = decode_sequence_set(large, 0)
    assert end == len(large)
    assert len(decoded.ranges) == 8_000
    assert decoded == SequenceSet(scattered(8_000))


def test_building_a_set_of_64000_ranges_is_linear() -> None:
    """More than a wire set holds: a union or an application's set may be this large."""
    small, large = scattered(8_000), scattered(64_000)
    small_lines = lines_run((_types,), lambda: SequenceSet(small))
    large_lines = lines_run((_types,), lambda: SequenceSet(large))
    assert large_lines <= 8.2 * small_lines
    built = SequenceSet(large)
    assert len(built.ranges) == 64_000
    assert all(serial_lt(a[1], b[0]) for a, b in zip(built.ranges, built.ranges[1:], strict=False))
    assert built.union(small) == SequenceSet((*large, *small))


def reference(items: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """qpid-python's RangedSet.add_range, one range at a time (the quadratic original)."""

    def inside(n: int, r: tuple[int, int]) -> bool:
        return serial_le(r[0], n) and serial_le(n, r[1])

    def touches(a: tuple[int, int], b: tuple[int, int]) -> bool:
        ends = ((a[0] - 1) & _MASK, (a[1] + 1) & _MASK, a[0], a[1])
        return any(inside(n, b) for n in ends) or any(
            inside(n, a) for n in ((b[0] - 1) & _MASK, (b[1] + 1) & _MASK, b[0], b[1])
        )

    ranges: list[tuple[int, int]] = []
    for new in items:
        index = 0
        while index < len(ranges):
            current = ranges[index]
            if touches(new, current):
                del ranges[index]
                low = new[0] if serial_le(new[0], current[0]) else current[0]
                high = current[1] if serial_le(new[1], current[1]) else new[1]
                new = (low, high)
            elif serial_lt(new[1], current[0]):
                ranges.insert(index, new)
                break
            else:
                index += 1
        else:
            ranges.append(new)
    return ranges


@given(
    st.integers(0, _MASK),
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 12)), max_size=30),
)
def test_sorting_once_normalises_as_qpid_python_does(
    base: int, spans: list[tuple[int, int]]
) -> None:
    items = [((base + start) & _MASK, (base + start + length) & _MASK) for start, length in spans]
    assert list(SequenceSet(items).ranges) == reference(items)


def test_a_set_spanning_half_the_serial_space_is_refused() -> None:
    with pytest.raises(ValueError, match="half the serial number space"):
        SequenceSet([(5, 6), ((5 + (1 << 31)) & _MASK, (6 + (1 << 31)) & _MASK)])
    with pytest.raises(ValueError, match="half the serial number space"):
        SequenceSet([(0, 10), ((1 << 31) - 5, (1 << 31) + 5)])
    assert SequenceSet([(0, 10), ((1 << 31) - 5, (1 << 31) - 2)]).ranges[-1][1] == (1 << 31) - 2


def test_encoding_more_ranges_than_the_wire_holds_is_a_value_error() -> None:
    largest = SequenceSet(scattered(MAX_SEQUENCE_SET_RANGES))
    out = bytearray()
    encode_sequence_set(out, largest)
    assert len(out) == 2 + 8 * 8_191
    assert decode_sequence_set(out, 0) == (largest, len(out))
    too_many = SequenceSet(scattered(MAX_SEQUENCE_SET_RANGES + 1))
    out = bytearray(b"before")
    with pytest.raises(ValueError, match="8192 ranges can't be encoded"):
        encode_sequence_set(out, too_many)
    assert out == b"before"


def test_a_command_with_too_large_a_set_is_refused_and_nothing_is_sent() -> None:
    pair = ConnectionPair()
    pair.handshake()
    client, _server = pair.attach("s")
    pair.client.data_to_send()
    too_many = SequenceSet(scattered(MAX_SEQUENCE_SET_RANGES + 1))
    with pytest.raises(LocalProtocolError, match=r"message\.accept.*8192 ranges"):
        client.send(MessageAccept(transfers=too_many))
    assert pair.client.data_to_send() == b""
    assert client.send(QueuePurge(queue="q")) == 0  # no command id was used up


def test_a_completed_set_of_wide_ranges_is_matched_by_bisection() -> None:
    """The largest completed set against thousands of outstanding commands: each range is
    looked up, not each outstanding id scanned for each range."""
    pair = ConnectionPair()
    pair.handshake()
    client, _server = pair.attach("s")
    for n in range(4_000):
        client.send(QueuePurge(queue=str(n)))
    pair.client.data_to_send()
    # every other id from 0 to 2 * 8,191 * 100: 8,191 ranges of 100 ids, half of them sent
    ranges = [(n * 200, n * 200 + 99) for n in range(MAX_SEQUENCE_SET_RANGES)]
    hostile = control_frames(1, SessionCompleted(commands=SequenceSet(ranges)))
    events: list[object] = []
    lines = lines_run((_session,), lambda: events.extend(feed(pair.client, hostile)))
    assert lines <= 40 * (MAX_SEQUENCE_SET_RANGES + 4_000)  # scanning: ~8,191 x 4,000
    [completed] = events
    assert completed.commands == SequenceSet(  # type: ignore[attr-defined]
        (n * 200, n * 200 + 99) for n in range(20)
    )
