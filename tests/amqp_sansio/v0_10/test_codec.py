"""The generated 0-10 codec: hypothesis round trips of every type code, struct, control and
command; the encoding rules for plain values; sequence sets; limits and malformed input."""

from __future__ import annotations

import struct
import uuid
from datetime import UTC, datetime
from typing import cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqp_sansio.v0_10 import (
    COMMANDS,
    CONTROLS,
    STRUCTS,
    Array,
    Command,
    Compound,
    Control,
    DeliveryProperties,
    ExecutionResult,
    MessageProperties,
    MessageTransfer,
    QueueQueryResult,
    ReplyTo,
    SequenceSet,
    SessionCommandPoint,
    SessionHeader,
    Struct,
    TypeCode,
    Typed,
    UnknownStruct,
    code_of,
    serial_add,
    serial_le,
    serial_lt,
)
from amqp_sansio.v0_10.framing import (
    AssemblyReader,
    FrameReader,
    decode_map,
    decode_struct32,
    decode_value,
    encode_command,
    encode_control,
    encode_map,
    encode_value,
)
from tests.amqp_sansio.v0_10 import strategies as s

ROUND_TRIP = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def read_one(data: bytes) -> object:
    frames = FrameReader()
    frames.feed(data)
    assemblies = AssemblyReader()
    found = []
    while (frame := frames.next_frame()) is not None:
        assembly = assemblies.receive(frame)
        if assembly is not None:
            found.append(assembly)
    assert len(found) == 1
    return found[0]


@pytest.mark.parametrize("cls", s.ALL_STRUCTS, ids=lambda c: c.NAME)
def test_every_struct_round_trips(cls: type[Struct]) -> None:
    @ROUND_TRIP
    @given(s.instances(cls))
    def check(value: Struct) -> None:
        out = bytearray()
        value.encode(out)
        decoded, end = type(value).decode(bytes(out), 0)
        assert end == len(out)
        assert decoded == value

    check()


@pytest.mark.parametrize("cls", s.ALL_CONTROLS, ids=lambda c: c.NAME)
def test_every_control_round_trips_through_frames(cls: type[Control]) -> None:
    @ROUND_TRIP
    @given(s.instances(cls), st.integers(0, 0xFFFF), st.sampled_from([24, 4096, 65535]))
    def check(control: Control, channel: int, max_frame_size: int) -> None:
        out = bytearray()
        encode_control(out, channel, control, max_frame_size)
        assembly = read_one(bytes(out))
        assert assembly.op == control  # type: ignore[attr-defined]
        assert assembly.channel == channel  # type: ignore[attr-defined]

    check()


@pytest.mark.parametrize("cls", s.ALL_COMMANDS, ids=lambda c: c.NAME)
def test_every_command_round_trips_through_frames(cls: type[Command]) -> None:
    segments: st.SearchStrategy[tuple[list[Struct] | None, bytes | None] | None] = st.none()
    if cls.SEGMENTS:
        segments = st.tuples(
            st.none() | st.lists(s.coded_structs(1).map(lambda v: cast("Struct", v)), max_size=3),
            st.none() | st.binary(max_size=300),
        )

    @ROUND_TRIP
    @given(s.instances(cls), st.booleans(), st.sampled_from([40, 4096, 65535]), segments)
    def check(
        command: Command,
        sync: bool,
        max_frame_size: int,
        extra: tuple[list[Struct] | None, bytes | None] | None,
    ) -> None:
        headers, body = extra if extra is not None else (None, None)
        out = bytearray()
        encode_command(out, 3, command, max_frame_size, sync=sync, headers=headers, body=body)
        assembly = read_one(bytes(out))
        assert assembly.op == command  # type: ignore[attr-defined]
        assert assembly.sync == sync  # type: ignore[attr-defined]
        assert assembly.headers == (None if headers is None else tuple(headers))  # type: ignore[attr-defined]
        assert assembly.body == body  # type: ignore[attr-defined]

    check()


def test_every_class_is_covered() -> None:
    assert len(s.ALL_CONTROLS) == len(CONTROLS) == 25
    assert len(s.ALL_COMMANDS) == len(COMMANDS) == 59
    assert {c for c in s.ALL_STRUCTS if c.CODE is not None} == set(STRUCTS.values())


@pytest.mark.parametrize("code", s.CODES, ids=lambda c: f"{c:#04x}")
def test_every_type_code_round_trips_in_a_map(code: int) -> None:
    @settings(max_examples=8, deadline=None)
    @given(s.plain_value(code, 0))
    def check(value: object) -> None:
        table = {"k": Typed(code, value)}  # type: ignore[arg-type]
        out = bytearray()
        encode_map(out, table, 0)  # type: ignore[arg-type]
        assert decode_map(bytes(out), 0, 0) == (table, len(out))

    check()


def test_reserved_type_codes_have_no_width() -> None:
    for code in (0xB0, 0xBF, 0xE0, 0xEF):
        with pytest.raises(ValueError, match="reserved"):
            decode_value(b"\x00" * 8, 0, code, 0)
        with pytest.raises(ValueError, match="reserved"):
            encode_value(bytearray(), Typed(code, b""), 0)


def test_widths_of_unnamed_codes_follow_their_nibble() -> None:
    assert decode_value(b"\x01\x02\x03", 0, 0x13, 0) == (b"\x01\x02", 2)
    assert decode_value(b"\x02ab", 0, 0x81, 0) == (b"ab", 3)
    assert decode_value(b"xyz", 0, 0xF5, 0) == (b"", 0)


# --- encoding rules for plain values -----------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "code"),
    [
        (True, TypeCode.BOOLEAN),
        (7, TypeCode.INT64),
        (-(2**63), TypeCode.INT64),
        (1.5, TypeCode.DOUBLE),
        ("text", TypeCode.STR16),
        (b"\xff", TypeCode.VBIN16),
        (b"x" * 65536, TypeCode.VBIN32),
        (None, TypeCode.VOID),
        ([1], TypeCode.LIST),
        ((1, 2), TypeCode.LIST),
        ({"a": 1}, TypeCode.MAP),
        (datetime(2023, 11, 14, tzinfo=UTC), TypeCode.DATETIME),
        (uuid.UUID(int=1), TypeCode.UUID),
        (Array(TypeCode.STR16, ("a",)), TypeCode.ARRAY),
        (QueueQueryResult(queue="q"), TypeCode.STRUCT32),
        (Typed(TypeCode.UINT8, 3), TypeCode.UINT8),
    ],
)
def test_plain_values_get_qpid_pythons_codes(value: object, code: int) -> None:
    assert code_of(value) == code  # type: ignore[arg-type]


def test_plain_values_decode_as_typed_and_re_encode_identically() -> None:
    when = datetime(2023, 11, 14, 22, 13, 20)  # naive: UTC
    table = {
        "int": 7,
        "bool": False,
        "str": "café",
        "bin": b"\x00\xff",
        "none": None,
        "list": [1, "two", [3.5]],
        "map": {"nested": True},
        "when": when,
        "id": uuid.UUID(int=5),
        "array": Array.of(["PLAIN", "ANONYMOUS"]),
        "empty": Array.of([]),
    }
    out = bytearray()
    encode_map(out, table, 0)  # type: ignore[arg-type]
    decoded, _ = decode_map(bytes(out), 0, 0)
    assert decoded["int"] == Typed(TypeCode.INT64, 7)
    assert decoded["str"] == Typed(TypeCode.STR16, "café")
    assert decoded["when"] == Typed(TypeCode.DATETIME, 1700000000)
    assert decoded["list"] == Typed(
        TypeCode.LIST,
        [
            Typed(TypeCode.INT64, 1),
            Typed(TypeCode.STR16, "two"),
            Typed(TypeCode.LIST, [Typed(TypeCode.DOUBLE, 3.5)]),
        ],
    )
    assert decoded["empty"] == Typed(TypeCode.ARRAY, Array(TypeCode.VOID, ()))
    again = bytearray()
    encode_map(again, decoded, 0)
    assert again == out


@pytest.mark.parametrize(
    "value",
    [2**63, object(), Typed(TypeCode.UINT8, 256), Typed(TypeCode.BOOLEAN, 1), Typed(0xB1, b"")],
)
def test_values_without_an_encoding_are_value_errors(value: object) -> None:
    with pytest.raises((ValueError, struct.error)):
        encode_map(bytearray(), {"k": value}, 0)  # type: ignore[dict-item]


def test_nesting_and_entry_counts_are_bounded() -> None:
    deep: object = 1
    for _ in range(40):
        deep = [deep]
    with pytest.raises(ValueError, match="nest"):
        encode_map(bytearray(), {"k": deep}, 0)  # type: ignore[dict-item]
    # A map claiming 2**32 - 1 entries in 8 octets is refused before any is read.
    data = struct.pack(">II", 8, 0xFFFF_FFFF) + b"\x00" * 4
    with pytest.raises(ValueError, match="entries"):
        decode_map(data, 0, 0)
    # An array of 100000 voids takes no octets per element: its count is capped.
    data = struct.pack(">IBI", 5, TypeCode.VOID, 100_000)
    with pytest.raises(ValueError, match="entries"):
        decode_value(data, 0, TypeCode.ARRAY, 0)


def test_struct32_of_unknown_code_is_kept_as_octets() -> None:
    data = struct.pack(">IH", 5, 0x0777) + b"\x01\x00\x2a"
    value, end = decode_struct32(data, 0, 0)
    assert value == UnknownStruct(0x0777, b"\x01\x00\x2a")
    out = bytearray()
    value.encode(out)
    assert bytes(out) == data
    assert end == len(data)


def test_structs_nest_with_their_own_sizes() -> None:
    props = MessageProperties(reply_to=ReplyTo(exchange="x", routing_key="r"), content_length=5)
    out = bytearray()
    props.encode(out)
    assert MessageProperties.decode(bytes(out), 0) == (props, len(out))
    # session.header: size 1, one flag octet
    header = bytearray()
    SessionHeader(sync=True).encode(header)
    assert header == b"\x01\x01"


def test_result_carries_any_coded_struct() -> None:
    result = ExecutionResult(command_id=4, value=DeliveryProperties(routing_key="k"))
    out = bytearray()
    result.encode(out)
    decoded, _ = ExecutionResult.decode_fields(bytes(out), 4)
    assert decoded == result


def test_unknown_packing_flags_are_refused() -> None:
    # message.transfer defines three fields: flag 0x08 names none of them.
    with pytest.raises(ValueError, match="packing flags"):
        MessageTransfer.decode_fields(b"\x08\x00", 0)


def test_required_fields_may_be_absent_as_qpid_sends_them() -> None:
    point = SessionCommandPoint.decode_fields(b"\x00\x00", 0)[0]
    assert point == SessionCommandPoint()


# --- sequence sets and serial numbers ------------------------------------------------------------


def test_serial_arithmetic_wraps() -> None:
    top = 0xFFFF_FFFF
    assert serial_lt(top, 0)
    assert not serial_lt(0, top)
    assert serial_le(5, 5)
    assert serial_add(top, 2) == 1
    assert not serial_lt(0, 2**31)
    assert not serial_lt(2**31, 0)


def test_sequence_sets_normalise_and_contain() -> None:
    ids = SequenceSet([(5, 6), 1, (2, 3), (0xFFFF_FFFF, 0)])
    assert ids.ranges == ((0xFFFF_FFFF, 3), (5, 6))
    assert 0 in ids
    assert 4 not in ids
    assert 0xFFFF_FFFF in ids
    assert list(ids) == [0xFFFF_FFFF, 0, 1, 2, 3, 5, 6]
    assert len(ids) == 7
    assert ids.union([4]).ranges == ((0xFFFF_FFFF, 6),)
    assert SequenceSet.of() == SequenceSet()
    assert not SequenceSet()
    with pytest.raises(ValueError, match="ends before"):
        SequenceSet([(5, 4)])
    with pytest.raises(ValueError, match="command id"):
        SequenceSet([2**32])


@given(st.lists(st.integers(0, 200), max_size=30))
def test_sequence_sets_hold_exactly_their_ids(ids: list[int]) -> None:
    assert sorted(SequenceSet(ids)) == sorted(set(ids))


def test_compound_base_is_abstract() -> None:
    with pytest.raises(NotImplementedError):
        Compound().encode_fields(bytearray())


def test_a_sequence_set_wider_than_half_the_serial_space_is_refused() -> None:
    with pytest.raises(ValueError, match="half the serial number space"):
        SequenceSet([(0, 0), (2**31, 2**31 + 5)])
    assert SequenceSet([(2**32 - 5, 3)]).ranges == ((2**32 - 5, 3),)  # wrapping is fine
