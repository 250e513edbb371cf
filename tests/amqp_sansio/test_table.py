"""The field-table codec: exact bytes per type code, RabbitMQ's dialect, limits, errors,
round trips, and agreement with two independent codecs (pamqp and pika)."""

from __future__ import annotations

import datetime
import enum
import json
import struct
import types
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING

import pamqp.decode
import pamqp.encode
import pika.data
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqp_sansio._errors import LocalProtocolError, RemoteProtocolError
from amqp_sansio._table import (
    MAX_TABLE_DEPTH,
    MAX_TABLE_ENTRIES,
    FieldValue,
    Float32,
    Float64,
    Int8,
    Int16,
    Int32,
    Int64,
    LongString,
    Timestamp,
    UInt8,
    UInt16,
    UInt32,
    decode_table,
    decode_table_entries,
    encode_table,
    encode_table_entries,
)
from tests.support import RABBITMQ_CAPTURES

if TYPE_CHECKING:
    from collections.abc import Callable

    from amqp_sansio._method import Buffer
    from amqp_sansio._table import FieldTable

UTC = datetime.UTC
FIXTURES = RABBITMQ_CAPTURES


# --- Helpers: wire bytes built by hand --------------------------------------------------------


def u32(n: int) -> bytes:
    return struct.pack(">I", n)


def entry(key: str, value: bytes) -> bytes:
    """One table entry: short-string key, then the type octet and value given by the test."""
    raw = key.encode()
    return bytes([len(raw)]) + raw + value


def table(*entries: bytes) -> bytes:
    payload = b"".join(entries)
    return u32(len(payload)) + payload


def encoded(value: object) -> bytes:
    """encode_table into a fresh buffer. The tests pass values wider than the static type
    (tuples, bytearray, memoryview, any Mapping) and values that are wrong on purpose."""
    out = bytearray()
    encode_table(out, value)  # type: ignore[arg-type]
    return bytes(out)


def decoded(buf: Buffer, offset: int = 0) -> FieldTable:
    result, end = decode_table(buf, offset)
    assert end == len(buf)
    return result


# --- Exact bytes, decode direction: every type code of RabbitMQ's dialect plus the spec's U ---

DECODE_VECTORS: list[tuple[str, bytes, FieldValue]] = [
    ("t true", b"t\x01", True),
    ("t false", b"t\x00", False),
    ("t nonzero", b"t\x02", True),
    ("b", b"b\xfe", -2),
    ("B", b"B\xfe", 254),
    ("s is int16", b"s\xff\xfe", -2),  # not the spec's short string
    ("U", b"U\xff\xfe", -2),
    ("u", b"u\xff\xfe", 65534),
    ("I", b"I\xff\xff\xff\xfe", -2),
    ("i", b"i\xff\xff\xff\xfe", 4294967294),
    ("l negative", b"l\xff\xff\xff\xff\xff\xff\xfc\x18", -1000),  # x-delay -1000
    ("L negative", b"L\xff\xff\xff\xff\xff\xff\xfc\x18", -1000),
    ("l min", b"l\x80\x00\x00\x00\x00\x00\x00\x00", -(2**63)),
    ("L max", b"L\x7f\xff\xff\xff\xff\xff\xff\xff", 2**63 - 1),
    ("f", b"f\x3f\xc0\x00\x00", 1.5),
    ("f lossy", b"f\x3f\x8c\xcc\xcd", 1.100000023841858),
    ("d", b"d\x3f\xf8\x00\x00\x00\x00\x00\x00", 1.5),
    ("D negative", b"D\x01\xff\xff\xff\xf1", Decimal("-1.5")),
    ("D scale 2", b"D\x02\x00\x00\x00\x96", Decimal("1.50")),
    ("D scale 0", b"D\x00\x7f\xff\xff\xff", Decimal(2**31 - 1)),
    ("S", b"S\x00\x00\x00\x06h\xc3\xa9llo", "héllo"),
    ("S empty", b"S\x00\x00\x00\x00", ""),
    ("S not UTF-8", b"S\x00\x00\x00\x02\xff\xfe", b"\xff\xfe"),
    ("x", b"x\x00\x00\x00\x03\x00\x01\xff", b"\x00\x01\xff"),
    (
        "T",
        b"T\x00\x00\x00\x00\x65\x53\xf1\x00",
        datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC),
    ),
    ("T epoch", b"T\x00\x00\x00\x00\x00\x00\x00\x00", datetime.datetime(1970, 1, 1, tzinfo=UTC)),
    ("T past 9999", b"T\xff\xff\xff\xff\xff\xff\xff\xff", Timestamp(2**64 - 1)),
    ("F", b"F\x00\x00\x00\x04\x01at\x01", {"a": True}),
    ("F empty", b"F\x00\x00\x00\x00", {}),
    ("A", b"A\x00\x00\x00\x0bb\x01VS\x00\x00\x00\x01zt\x00", [1, None, "z", False]),
    ("A empty", b"A\x00\x00\x00\x00", []),
    ("A of F", b"A\x00\x00\x00\x09F\x00\x00\x00\x04\x01kb\x07", [{"k": 7}]),
    ("V", b"V", None),
]


@pytest.mark.parametrize(
    ("wire", "expected"), [v[1:] for v in DECODE_VECTORS], ids=[v[0] for v in DECODE_VECTORS]
)
def test_decode_each_type_code(wire: bytes, expected: FieldValue) -> None:
    result = decoded(table(entry("k", wire)))
    assert result == {"k": expected}
    assert type(result["k"]) is type(expected)


@pytest.mark.parametrize(
    ("wire", "expected"), [v[1:] for v in DECODE_VECTORS], ids=[v[0] for v in DECODE_VECTORS]
)
def test_decode_each_type_code_as_array_item(wire: bytes, expected: FieldValue) -> None:
    items = wire + b"V"
    result = decoded(table(entry("k", b"A" + u32(len(items)) + items)))
    assert result == {"k": [expected, None]}


def test_decode_f_is_float32() -> None:
    result = decoded(table(entry("k", b"f\x3f\x8c\xcc\xcd")))
    assert result["k"] == struct.unpack(">f", struct.pack(">f", 1.1))[0]
    assert result["k"] != 1.1


def test_decode_t_is_aware_utc() -> None:
    value = decoded(table(entry("k", b"T\x00\x00\x00\x00\x65\x53\xf1\x00")))["k"]
    assert isinstance(value, datetime.datetime)
    assert value.tzinfo is UTC


# --- Exact bytes, encode direction ------------------------------------------------------------

ENCODE_VECTORS: list[tuple[str, FieldValue, bytes]] = [
    ("True", True, b"t\x01"),
    ("False", False, b"t\x00"),
    ("0", 0, b"b\x00"),
    ("-128", -128, b"b\x80"),
    ("127", 127, b"b\x7f"),
    ("128", 128, b"s\x00\x80"),
    ("-129", -129, b"s\xff\x7f"),
    ("32767", 32767, b"s\x7f\xff"),
    ("-32768", -32768, b"s\x80\x00"),
    ("32768", 32768, b"I\x00\x00\x80\x00"),
    ("-32769", -32769, b"I\xff\xff\x7f\xff"),
    ("2**31-1", 2**31 - 1, b"I\x7f\xff\xff\xff"),
    ("-2**31", -(2**31), b"I\x80\x00\x00\x00"),
    ("2**31", 2**31, b"l\x00\x00\x00\x00\x80\x00\x00\x00"),
    # x-message-ttl of 4 weeks, which aioamqp once sent as a negative int32
    ("2419200000", 2419200000, b"l\x00\x00\x00\x00\x90\x32\x10\x00"),
    ("-2**31-1", -(2**31) - 1, b"l\xff\xff\xff\xff\x7f\xff\xff\xff"),
    ("2**63-1", 2**63 - 1, b"l\x7f\xff\xff\xff\xff\xff\xff\xff"),
    ("-2**63", -(2**63), b"l\x80\x00\x00\x00\x00\x00\x00\x00"),
    ("float", 1.5, b"d\x3f\xf8\x00\x00\x00\x00\x00\x00"),
    ("float 1.1 stays 64-bit", 1.1, b"d\x3f\xf1\x99\x99\x99\x99\x99\x9a"),
    ("str", "héllo", b"S\x00\x00\x00\x06h\xc3\xa9llo"),
    ("str empty", "", b"S\x00\x00\x00\x00"),
    ("bytes", b"\x00\xff", b"x\x00\x00\x00\x02\x00\xff"),
    ("Decimal -1.5", Decimal("-1.5"), b"D\x01\xff\xff\xff\xf1"),
    ("Decimal 1.50", Decimal("1.50"), b"D\x02\x00\x00\x00\x96"),
    ("Decimal 1E+3", Decimal("1E+3"), b"D\x00\x00\x00\x03\xe8"),
    ("Decimal -0", Decimal("-0"), b"D\x00\x00\x00\x00\x00"),
    ("Decimal trailing zeros", Decimal("1.5000000000000"), b"D\x01\x00\x00\x00\x0f"),
    ("Decimal scale 255", Decimal("1E-255"), b"D\xff\x00\x00\x00\x01"),
    ("Decimal int32 min", Decimal("-2147483.648"), b"D\x03\x80\x00\x00\x00"),
    (
        "datetime aware",
        datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC),
        b"T\x00\x00\x00\x00\x65\x53\xf1\x00",
    ),
    (
        "datetime naive is UTC",
        datetime.datetime(2023, 11, 14, 22, 13, 20),
        b"T\x00\x00\x00\x00\x65\x53\xf1\x00",
    ),
    (
        "datetime other zone",
        datetime.datetime(
            2023, 11, 15, 0, 13, 20, tzinfo=datetime.timezone(datetime.timedelta(hours=2))
        ),
        b"T\x00\x00\x00\x00\x65\x53\xf1\x00",
    ),
    (
        "datetime sub-second truncated",
        datetime.datetime(2023, 11, 14, 22, 13, 20, 999999, tzinfo=UTC),
        b"T\x00\x00\x00\x00\x65\x53\xf1\x00",
    ),
    ("dict", {"a": True}, b"F\x00\x00\x00\x04\x01at\x01"),
    ("dict empty", {}, b"F\x00\x00\x00\x00"),
    ("list", [1, None, "z", False], b"A\x00\x00\x00\x0bb\x01VS\x00\x00\x00\x01zt\x00"),
    ("list empty", [], b"A\x00\x00\x00\x00"),
    ("None", None, b"V"),
    ("Int8", Int8(-2), b"b\xfe"),
    ("UInt8", UInt8(254), b"B\xfe"),
    ("Int16", Int16(-2), b"s\xff\xfe"),
    ("Int16 small", Int16(1), b"s\x00\x01"),
    ("UInt16", UInt16(65534), b"u\xff\xfe"),
    ("Int32", Int32(1), b"I\x00\x00\x00\x01"),
    ("UInt32", UInt32(2**32 - 2), b"i\xff\xff\xff\xfe"),
    ("Int64", Int64(1), b"l\x00\x00\x00\x00\x00\x00\x00\x01"),
    ("Float32", Float32(1.5), b"f\x3f\xc0\x00\x00"),
    ("Float64", Float64(1.5), b"d\x3f\xf8\x00\x00\x00\x00\x00\x00"),
    ("Float64 of int", Float64(3), b"d\x40\x08\x00\x00\x00\x00\x00\x00"),
    ("LongString bytes", LongString(b"\xff\x00"), b"S\x00\x00\x00\x02\xff\x00"),
    ("LongString str", LongString("hé"), b"S\x00\x00\x00\x03h\xc3\xa9"),
    ("Timestamp", Timestamp(1700000000), b"T\x00\x00\x00\x00\x65\x53\xf1\x00"),
    ("Timestamp max", Timestamp(2**64 - 1), b"T\xff\xff\xff\xff\xff\xff\xff\xff"),
]


@pytest.mark.parametrize(
    ("value", "wire"), [v[1:] for v in ENCODE_VECTORS], ids=[v[0] for v in ENCODE_VECTORS]
)
def test_encode_each_type(value: FieldValue, wire: bytes) -> None:
    assert encoded({"k": value}) == table(entry("k", wire))


@pytest.mark.parametrize(
    ("value", "wire"), [v[1:] for v in ENCODE_VECTORS], ids=[v[0] for v in ENCODE_VECTORS]
)
def test_encode_each_type_as_array_item(value: FieldValue, wire: bytes) -> None:
    assert encoded({"k": [value]}) == table(entry("k", b"A" + u32(len(wire)) + wire))


def test_encode_other_containers_and_buffers() -> None:
    # tuple -> A, any Mapping -> F, bytearray/memoryview -> x; the typing says list/dict/bytes.
    values: dict[str, object] = {
        "t": (1, 2),
        "m": OrderedDict([("a", True)]),
        "ba": bytearray(b"\x01"),
        "mv": memoryview(b"\x02\x03"),
        "proxy": types.MappingProxyType({"b": None}),
        "list of proxy": [types.MappingProxyType({})],
    }
    assert encoded(values) == table(
        entry("t", b"A\x00\x00\x00\x04b\x01b\x02"),
        entry("m", b"F\x00\x00\x00\x04\x01at\x01"),
        entry("ba", b"x\x00\x00\x00\x01\x01"),
        entry("mv", b"x\x00\x00\x00\x02\x02\x03"),
        entry("proxy", b"F\x00\x00\x00\x03\x01bV"),
        entry("list of proxy", b"A\x00\x00\x00\x05F\x00\x00\x00\x00"),
    )
    out = bytearray()
    encode_table(out, types.MappingProxyType({"a": 1}))
    encode_table_entries(out, types.MappingProxyType({"a": 1}))
    assert bytes(out) == table(entry("a", b"b\x01")) + entry("a", b"b\x01")


def test_encode_never_emits_l_u_or_unsigned_codes_for_plain_ints() -> None:
    for value in (0, 200, 255, 40000, 65535, 3_000_000_000, 2**32 - 1, -1, -(2**40)):
        code = encoded({"k": value})[6:7]
        assert code in (b"b", b"s", b"I", b"l"), (value, code)


def test_encode_int_subclasses_and_bool_order() -> None:
    class Color(enum.IntEnum):
        RED = 300

    assert encoded({"k": Color.RED}) == table(entry("k", b"s\x01\x2c"))
    assert encoded({"k": True}) == table(entry("k", b"t\x01"))  # not b"b\x01"


def test_encode_none_and_empty_table() -> None:
    assert encoded(None) == b"\x00\x00\x00\x00"
    assert encoded({}) == b"\x00\x00\x00\x00"


def test_encode_appends_and_keeps_order() -> None:
    out = bytearray(b"prefix")
    encode_table(out, {"z": 1, "a": 2})
    assert bytes(out) == b"prefix" + table(entry("z", b"b\x01"), entry("a", b"b\x02"))


def test_keys_empty_and_255_bytes() -> None:
    long_key = "é" * 127 + "a"  # 255 UTF-8 bytes
    wire = table(entry("", b"V"), entry(long_key, b"b\x01"))
    assert encoded({"": None, long_key: 1}) == wire
    assert decoded(wire) == {"": None, long_key: 1}


def test_key_not_utf8_survives_a_round_trip() -> None:
    wire = table(b"\x02\xff\xfe" + b"b\x01")
    result = decoded(wire)
    assert result == {"\udcff\udcfe": 1}
    assert encoded(result) == wire


def test_duplicate_keys_last_wins() -> None:
    assert decoded(table(entry("a", b"b\x01"), entry("a", b"b\x02"))) == {"a": 2}


# --- RabbitMQ: real tables from the broker ------------------------------------------------


def _fixture_chunk(name: str, index: int) -> bytes:
    data = json.loads((FIXTURES / name).read_text())
    return bytes.fromhex(data["chunks"][index]["hex"])


def test_rabbitmq_server_properties() -> None:
    # connection.start: frame header (7), class+method (4), version (2), then the table.
    chunk = _fixture_chunk("handshake.json", 1)
    props, end = decode_table(chunk, 13)
    assert props["product"] == "RabbitMQ"
    assert props["version"] == "3.10.8"
    capabilities = props["capabilities"]
    assert isinstance(capabilities, dict)
    assert capabilities["publisher_confirms"] is True
    assert capabilities["consumer_cancel_notify"] is True
    assert capabilities["basic.nack"] is True
    assert len(capabilities) == 9
    # mechanisms follow the table
    assert chunk[end : end + 4] == u32(len(b"AMQPLAIN PLAIN"))
    # RabbitMQ sends S and t only, so our encoding of what we read is byte-identical.
    assert encoded(props) == chunk[13:end]
    # and the peers read the same bytes the same way
    assert pika.data.decode_table(chunk, 13) == (props, end)
    assert pamqp.decode.field_table(chunk[13:]) == (end - 13, props)


def test_rabbitmq_style_server_properties_by_hand() -> None:
    capabilities = table(
        entry("publisher_confirms", b"t\x01"),
        entry("exchange_exchange_bindings", b"t\x01"),
        entry("basic.nack", b"t\x01"),
    )
    wire = table(
        entry("capabilities", b"F" + capabilities),
        entry("product", b"S" + u32(8) + b"RabbitMQ"),
        entry("version", b"S" + u32(6) + b"3.10.8"),
    )
    assert decoded(wire) == {
        "capabilities": {
            "publisher_confirms": True,
            "exchange_exchange_bindings": True,
            "basic.nack": True,
        },
        "product": "RabbitMQ",
        "version": "3.10.8",
    }


def test_x_death_header_shape() -> None:
    # What RabbitMQ puts on a dead-lettered message: an array of tables with l, S, A and T.
    death = table(
        entry("count", b"l" + struct.pack(">q", 1)),
        entry("reason", b"S" + u32(8) + b"rejected"),
        entry("queue", b"S" + u32(2) + b"q1"),
        entry("time", b"T" + struct.pack(">Q", 1700000000)),
        entry("routing-keys", b"A" + u32(7) + b"S" + u32(2) + b"rk"),
    )
    wire = table(entry("x-death", b"A" + u32(len(death) + 1) + b"F" + death))
    assert decoded(wire) == {
        "x-death": [
            {
                "count": 1,
                "reason": "rejected",
                "queue": "q1",
                "time": datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC),
                "routing-keys": ["rk"],
            }
        ]
    }


# --- Offsets inside a larger buffer -------------------------------------------------------


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
@pytest.mark.parametrize(
    ("wire", "expected"), [v[1:] for v in DECODE_VECTORS], ids=[v[0] for v in DECODE_VECTORS]
)
def test_decode_inside_a_larger_buffer(
    kind: Callable[[bytes], Buffer], wire: bytes, expected: FieldValue
) -> None:
    body = table(entry("k", wire), entry("after", b"t\x01"))
    junk = b"\xffJUNK\x00"
    buf = kind(junk + body + b"S\x00\x00\x00\x09trailing")
    result, end = decode_table(buf, len(junk))
    assert result == {"k": expected, "after": True}
    assert end == len(junk) + len(body)


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_decode_entries_inside_a_larger_buffer(kind: Callable[[bytes], Buffer]) -> None:
    entries = entry("LOGIN", b"S" + u32(5) + b"guest") + entry("PASSWORD", b"S" + u32(5) + b"guest")
    buf = kind(b"\x00\x01\x02" + entries + b"\xff\xff")
    assert decode_table_entries(buf, 3, 3 + len(entries)) == {"LOGIN": "guest", "PASSWORD": "guest"}
    assert decode_table_entries(buf, 3, 3) == {}


def test_encode_entries_has_no_size_prefix() -> None:
    out = bytearray(b"\x00")
    encode_table_entries(out, {"LOGIN": "guest", "PASSWORD": "secret"})
    assert bytes(out) == b"\x00" + entry("LOGIN", b"S" + u32(5) + b"guest") + entry(
        "PASSWORD", b"S" + u32(6) + b"secret"
    )


def test_decode_nested_returns_bytes_not_views() -> None:
    buf = bytearray(
        table(entry("x", b"x" + u32(2) + b"ab"), entry("s", b"S" + u32(2) + b"\xff\xfe"))
    )
    result = decoded(buf)
    assert type(result["x"]) is bytes
    assert type(result["s"]) is bytes
    buf[:] = b"\x00" * len(buf)  # the caller reuses its buffer; the values don't change
    assert result == {"x": b"ab", "s": b"\xff\xfe"}


# --- Limits -------------------------------------------------------------------------------


def nested_tables(levels: int) -> bytes:
    """A table holding *levels* tables inside each other."""
    wire = table()
    for _ in range(levels):
        wire = table(entry("a", b"F" + wire))
    return wire


def nested_arrays(levels: int) -> bytes:
    """A table whose key 'a' holds *levels* arrays inside each other."""
    inner = b"A" + u32(0)
    for _ in range(levels - 1):
        inner = b"A" + u32(len(inner)) + inner
    return table(entry("a", inner))


def nested_dict(levels: int) -> dict[str, FieldValue]:
    value: dict[str, FieldValue] = {}
    for _ in range(levels):
        value = {"a": value}
    return value


def test_depth_limit_decode_tables() -> None:
    assert decoded(nested_tables(MAX_TABLE_DEPTH))
    with pytest.raises(
        RemoteProtocolError, match=r"^field table: nested deeper than 32 at offset 231$"
    ) as info:
        decode_table(nested_tables(MAX_TABLE_DEPTH + 1), 0)
    assert info.value.reply_code == 502


def test_depth_limit_decode_arrays() -> None:
    assert decoded(nested_arrays(MAX_TABLE_DEPTH))
    with pytest.raises(
        RemoteProtocolError, match=r"^field table: nested deeper than 32 at offset \d+$"
    ):
        decode_table(nested_arrays(MAX_TABLE_DEPTH + 1), 0)


def test_depth_limit_decode_deep_input_fails_without_recursion_error() -> None:
    with pytest.raises(RemoteProtocolError, match="nested deeper than 32"):
        decode_table(nested_tables(5000), 0)


def test_depth_argument_counts_from_the_caller() -> None:
    assert decode_table(nested_tables(2), 0, depth=MAX_TABLE_DEPTH - 2)[0]
    with pytest.raises(RemoteProtocolError, match="nested deeper than 32"):
        decode_table(nested_tables(2), 0, depth=MAX_TABLE_DEPTH - 1)


def test_depth_limit_encode() -> None:
    assert encoded(nested_dict(MAX_TABLE_DEPTH)) == nested_tables(MAX_TABLE_DEPTH)
    out = bytearray(b"keep")
    with pytest.raises(
        LocalProtocolError, match=r"^field table: nested deeper than 32 for key 'a'(\['a'\]){32}$"
    ) as info:
        encode_table(out, nested_dict(MAX_TABLE_DEPTH + 1))
    assert info.value.reply_code == 502
    assert out == b"keep"


def test_depth_limit_encode_arrays_and_cycles() -> None:
    deep: list[FieldValue] = []
    for _ in range(MAX_TABLE_DEPTH):
        deep = [deep]
    with pytest.raises(LocalProtocolError, match=r"nested deeper than 32 for key 'a'(\[0\]){32}$"):
        encoded({"a": deep})
    cycle: dict[str, FieldValue] = {}
    cycle["self"] = cycle
    with pytest.raises(LocalProtocolError, match="nested deeper than 32"):
        encoded(cycle)


def test_entry_limit_decode_table() -> None:
    void = b"\x00V"  # the smallest entry: empty key, void
    assert decoded(u32(2 * MAX_TABLE_ENTRIES) + void * MAX_TABLE_ENTRIES) == {"": None}
    too_many = u32(2 * (MAX_TABLE_ENTRIES + 1)) + void * (MAX_TABLE_ENTRIES + 1)
    with pytest.raises(
        RemoteProtocolError,
        match=r"^field table: more than 65536 entries in the table at offset 0$",
    ):
        decode_table(too_many, 0)


def test_entry_limit_decode_large_table_with_few_entries() -> None:
    # Over 2 * MAX_TABLE_ENTRIES bytes, so entries are counted; few entries is fine.
    big = "x" * (2 * MAX_TABLE_ENTRIES)
    wire = table(entry("a", b"S" + u32(len(big)) + big.encode()), entry("b", b"t\x01"))
    assert decoded(wire) == {"a": big, "b": True}


def test_entry_limit_decode_large_table_with_exactly_the_limit() -> None:
    big = b"x" * 10
    wire = table(entry("a", b"S" + u32(len(big)) + big), *[b"\x00V"] * (MAX_TABLE_ENTRIES - 1))
    assert len(wire) > 4 + 2 * MAX_TABLE_ENTRIES  # counted
    assert decoded(wire) == {"a": "x" * 10, "": None}
    with pytest.raises(RemoteProtocolError, match="more than 65536 entries"):
        decode_table(table(wire[4:], b"\x00V"), 0)


def test_entry_limit_decode_array() -> None:
    ok = table(entry("a", b"A" + u32(MAX_TABLE_ENTRIES) + b"V" * MAX_TABLE_ENTRIES))
    assert decoded(ok) == {"a": [None] * MAX_TABLE_ENTRIES}
    too_many = table(entry("a", b"A" + u32(MAX_TABLE_ENTRIES + 1) + b"V" * (MAX_TABLE_ENTRIES + 1)))
    with pytest.raises(
        RemoteProtocolError, match=r"^field table: more than 65536 items in the array at offset 7$"
    ):
        decode_table(too_many, 0)
    # over MAX_TABLE_ENTRIES bytes (so counted) with exactly MAX_TABLE_ENTRIES items
    items = b"S" + u32(1) + b"z" + b"V" * (MAX_TABLE_ENTRIES - 1)
    assert decoded(table(entry("a", b"A" + u32(len(items)) + items))) == {
        "a": ["z"] + [None] * (MAX_TABLE_ENTRIES - 1)
    }


def test_entry_limit_encode() -> None:
    out = bytearray(b"keep")
    with pytest.raises(
        LocalProtocolError, match=r"^field table: more than 65536 entries \(65537\)$"
    ):
        encode_table(out, {str(i): None for i in range(MAX_TABLE_ENTRIES + 1)})
    with pytest.raises(
        LocalProtocolError, match=r"more than 65536 array items \(65537\) for key 'a'$"
    ):
        encode_table(out, {"a": [None] * (MAX_TABLE_ENTRIES + 1)})
    assert out == b"keep"
    encode_table(out, {"a": [None] * MAX_TABLE_ENTRIES})
    assert len(out) == 4 + 4 + 2 + 5 + MAX_TABLE_ENTRIES


# --- Malformed input: RemoteProtocolError(502) naming what and where ------------------------

BAD_INPUT: list[tuple[str, bytes, int, str]] = [
    (
        "truncated table",
        b"\x00\x01\x02" + u32(40) + b"\x00" * 12,
        3,
        r"^field table: truncated \(declares 40 bytes at offset 3, 12 available\)$",
    ),
    (
        "no size",
        b"\x00\x00\x00",
        0,
        r"^field table: truncated \(no table size at offset 0, 3 available\)$",
    ),
    ("offset past the end", b"\x00\x00\x00\x00", 9, r"no table size at offset 9, 0 available"),
    (
        "truncated value at the end of the buffer",
        table(entry("x-foo", b"I\x00\x00")),
        0,
        r"^field table: truncated value for key 'x-foo' at offset 11$",
    ),
    (
        "fixed-size value runs past the table",
        table(entry("x-foo", b"I\x00\x00")) + b"\x00\x00",
        0,
        r"^field table: truncated value for key 'x-foo' \(runs to offset 15, table ends at 13\)$",
    ),
    (
        "string runs past the table",
        table(entry("x-foo", b"S" + u32(100) + b"abc")),
        0,
        (
            r"^field table: truncated value for key 'x-foo' "
            r"\(declares 100 bytes at offset 11, 3 available\)$"
        ),
    ),
    (
        "nested table runs past the table",
        table(entry("k", b"F" + u32(9) + b"\x00")),
        0,
        r"^field table: truncated value for key 'k' \(declares 9 bytes at offset 7, 1 available\)$",
    ),
    (
        "array runs past the table",
        table(entry("k", b"A" + u32(9) + b"V")),
        0,
        r"^field table: truncated value for key 'k' \(declares 9 bytes at offset 7, 1 available\)$",
    ),
    (
        "array item runs past the array",
        table(entry("k", b"A" + u32(2) + b"I\x00\x00\x00\x00")),
        0,
        r"^field table: truncated array item for key 'k' \(runs to offset 16, array ends at 13\)$",
    ),
    (
        "array item truncated at the end of the buffer",
        table(entry("k", b"A" + u32(3) + b"I\x00\x00")),
        0,
        r"^field table: truncated array item for key 'k' at offset 11$",
    ),
    (
        "nested table runs past the array",
        table(entry("k", b"A" + u32(6) + b"F" + u32(7) + b"\x00")),
        0,
        r"^field table: truncated value for key 'k' \(declares 7 bytes at offset 12, 1 avail",
    ),
    (
        "key runs past the table",
        table(b"\x09abc"),
        0,
        r"^field table: truncated entry for key 'abc' at offset 4$",
    ),
    (
        "key without a type octet",
        table(b"\x03abc"),
        0,
        r"^field table: truncated entry for key 'abc' at offset 4$",
    ),
    (
        "unknown field type",
        b"\x00\x00\x00" + table(entry("x-foo", b"Z")),
        3,
        r"^field table: unknown field type 'Z' for key 'x-foo' at offset 13$",
    ),
    (
        "unknown field type in an array",
        table(entry("k", b"A" + u32(2) + b"V\x00")),
        0,
        r"^field table: unknown field type '\\x00' for key 'k' at offset 12$",
    ),
    (
        "nested unknown field type",
        table(entry("outer", b"F" + table(entry("inner", b"?")))),
        0,
        r"^field table: unknown field type '\?' for key 'inner' at offset 21$",
    ),
]


@pytest.mark.parametrize(
    ("wire", "offset", "message"), [v[1:] for v in BAD_INPUT], ids=[v[0] for v in BAD_INPUT]
)
def test_decode_bad_input(wire: bytes, offset: int, message: str) -> None:
    for buf in (wire, bytearray(wire)):
        with pytest.raises(RemoteProtocolError, match=message) as info:
            decode_table(buf, offset)
        assert info.value.reply_code == 502


@pytest.mark.parametrize(
    ("wire", "offset", "message"), [v[1:] for v in BAD_INPUT], ids=[v[0] for v in BAD_INPUT]
)
def test_decode_bad_input_from_a_memoryview(wire: bytes, offset: int, message: str) -> None:
    # A memoryview is decoded from a copy of just the table; the offsets still count from the
    # start of the caller's buffer. A value running past the table reads past the copy.
    message = message.replace(r"\(runs to offset 15, table ends at 13\)", "at offset 11")
    with pytest.raises(RemoteProtocolError, match=message):
        decode_table(memoryview(wire), offset)


def test_decode_bad_input_offsets_from_a_copy() -> None:
    junk = b"\x00" * 100
    wire = junk + table(entry("offset 5", b"F" + table(entry("ends at 7", b"Z"))))
    message = r"^field table: unknown field type 'Z' for key 'ends at 7' at offset 128$"
    for buf in (wire, bytearray(wire), memoryview(wire)):
        with pytest.raises(RemoteProtocolError, match=message):
            decode_table(buf, 100)
    runs_on = junk + table(entry("k", b"A" + u32(2) + b"I\x00\x00\x00\x00")) + b"\x00\x00\x00"
    message = (
        r"^field table: truncated array item for key 'k' \(runs to offset 116, array ends at 113\)$"
    )
    for buf in (runs_on, bytearray(runs_on), memoryview(runs_on)):
        with pytest.raises(RemoteProtocolError, match=message):
            decode_table(buf, 100)


def test_decode_entries_bad_range() -> None:
    with pytest.raises(
        RemoteProtocolError,
        match=r"^field table: truncated \(entries from offset 2 to 9, buffer holds 4\)$",
    ):
        decode_table_entries(b"\x00" * 4, 2, 9)


@pytest.mark.parametrize("start", [0, 2, 10])
def test_decode_entries_bad_input_offsets(start: int) -> None:
    buf = b"\x00" * start + entry("k", b"I\x00") + b"\x00\x00\x00"
    for end in (start + 4, len(buf)):  # the trailing bytes are not part of the entries
        with pytest.raises(
            RemoteProtocolError,
            match=rf"^field table: truncated value for key 'k' at offset {start + 3}$",
        ):
            decode_table_entries(buf[:end], start, start + 4)


# --- Values that can't be encoded: LocalProtocolError(502), nothing written -----------------

# Wrappers holding the wrong type, as a caller without mypy could make them.
WRONG_INT8 = Int8("1")  # type: ignore[arg-type]
WRONG_FLOAT32 = Float32("1")  # type: ignore[arg-type]
WRONG_FLOAT64 = Float64("1")  # type: ignore[arg-type]
WRONG_LONGSTRING = LongString(5)  # type: ignore[arg-type]

BAD_VALUES: list[tuple[str, object, str]] = [
    (
        "key over 255 bytes",
        {"k" * 256: 1},
        r"^field table: key of 256 UTF-8 bytes \(a short string holds 255\) for key 'k+'$",
    ),
    ("key over 255 bytes after UTF-8", {"é" * 128: 1}, r"key of 256 UTF-8 bytes"),
    ("key not a str", {b"k": 1}, r"^field table: key of type bytes \(keys are str\) for key b'k'$"),
    (
        "key lone surrogate",
        {"\ud800": 1},
        r"^field table: key is not encodable as UTF-8 for key '\\ud800'$",
    ),
    (
        "int beyond int64",
        {"x-foo": 2**63},
        r"^field table: int of 64 bits does not fit int64 for key 'x-foo'$",
    ),
    (
        "int below int64",
        {"x-foo": -(2**63) - 1},
        r"^field table: int of 64 bits does not fit int64 for key 'x-foo'$",
    ),
    (
        "huge int",
        {"x-foo": 10**5000},
        r"^field table: int of 16610 bits does not fit int64 for key 'x-foo'$",
    ),
    ("set", {"x-foo": {1, 2}}, r"^field table: unsupported type set for key 'x-foo'$"),
    ("date", {"d": datetime.date(2020, 1, 1)}, r"^field table: unsupported type date for key 'd'$"),
    (
        "nested set",
        {"a": {"b": [1, {1}]}},
        r"^field table: unsupported type set for key 'a'\['b'\]\[1\]$",
    ),
    (
        "Int8 out of range",
        {"x-max-priority": Int8(200)},
        r"^field table: Int8 value 200 is outside -128\.\.127 for key 'x-max-priority'$",
    ),
    ("UInt8 negative", {"k": UInt8(-1)}, r"UInt8 value -1 is outside 0\.\.255 for key 'k'$"),
    ("Int16 out of range", {"k": Int16(2**15)}, r"Int16 value 32768 is outside -32768\.\.32767"),
    ("UInt16 out of range", {"k": UInt16(2**16)}, r"UInt16 value 65536 is outside 0\.\.65535"),
    ("Int32 out of range", {"k": Int32(2**31)}, r"Int32 value 2147483648 is outside"),
    ("UInt32 out of range", {"k": UInt32(2**32)}, r"UInt32 value 4294967296 is outside"),
    ("Int64 out of range", {"k": Int64(2**63)}, r"Int64 value 9223372036854775808 is outside"),
    ("Int64 huge", {"k": Int64(10**5000)}, r"Int64 value <int of 16610 bits> is outside"),
    ("Int8 not an int", {"k": WRONG_INT8}, r"Int8 value '1' is outside -128\.\.127"),
    (
        "Timestamp negative",
        {"k": Timestamp(-1)},
        r"Timestamp value -1 is outside 0\.\.18446744073709551615",
    ),
    (
        "Float32 out of range",
        {"k": Float32(1e39)},
        r"^field table: Float32 value 1e\+39 is outside the float32 range for key 'k'$",
    ),
    ("Float32 not a number", {"k": WRONG_FLOAT32}, r"Float32 value of type str for key 'k'$"),
    ("Float64 not a number", {"k": WRONG_FLOAT64}, r"Float64 value of type str for key 'k'$"),
    ("LongString not bytes", {"k": WRONG_LONGSTRING}, r"LongString value of type int for key 'k'$"),
    (
        "Decimal NaN",
        {"k": Decimal("NaN")},
        r"^field table: Decimal NaN has no AMQP encoding for key 'k'$",
    ),
    ("Decimal infinity", {"k": Decimal("-Infinity")}, r"Decimal -Infinity has no AMQP encoding"),
    ("Decimal sNaN", {"k": Decimal("sNaN")}, r"Decimal sNaN has no AMQP encoding"),
    (
        "Decimal too big",
        {"k": Decimal("2147483648")},
        (
            r"^field table: Decimal 2147483648 does not fit a signed 32-bit value "
            r"with a scale of 0\.\.255 for key 'k'$"
        ),
    ),
    ("Decimal too big exponent", {"k": Decimal("1E+10")}, r"Decimal 1E\+10 does not fit"),
    ("Decimal too precise", {"k": Decimal("1E-256")}, r"Decimal 1E-256 does not fit"),
    (
        "Decimal too many digits",
        {"k": Decimal("1.23456789012")},
        r"Decimal 1.23456789012 does not fit",
    ),
    (
        "datetime before 1970",
        {"k": datetime.datetime(1969, 12, 31, 23, 59, 59)},
        r"datetime 1969-12-31T23:59:59 is before 1970",
    ),
    (
        "str lone surrogate",
        {"k": "\ud800"},
        r"^field table: str value can't be encoded \(.*surrogate.*\) for key 'k'$",
    ),
    (
        "array str lone surrogate",
        {"k": ["ok", "\ud800"]},
        r"str value can't be encoded \(.*\) for key 'k'\[1\]$",
    ),
    ("not a mapping", [("a", 1)], r"^field table: expected a mapping, not list$"),
]


@pytest.mark.parametrize(
    ("value", "message"), [v[1:] for v in BAD_VALUES], ids=[v[0] for v in BAD_VALUES]
)
def test_encode_bad_value_writes_nothing(value: object, message: str) -> None:
    out = bytearray(b"already here")
    with pytest.raises(LocalProtocolError, match=message) as info:
        encode_table(out, value)  # type: ignore[arg-type]
    assert info.value.reply_code == 502
    assert out == b"already here"
    # the same after good entries were written, and without the size prefix
    if isinstance(value, dict):
        with pytest.raises(LocalProtocolError, match=message.removeprefix("^")):
            encode_table(out, {"good": "x" * 100, "nested": {"a": [1, 2]}, **value})
        assert out == b"already here"
        with pytest.raises(LocalProtocolError, match=message.removeprefix("^")):
            encode_table_entries(out, {"good": 1, **value})
        assert out == b"already here"


def test_encode_unexpected_exception_writes_nothing() -> None:
    class Exploding(Mapping[str, FieldValue]):
        def __getitem__(self, key: str) -> FieldValue:
            if key == "b":
                raise RuntimeError("boom")
            return 1

        def __iter__(self) -> Iterator[str]:
            return iter(["a", "b"])

        def __len__(self) -> int:
            return 2

    out = bytearray(b"keep")
    with pytest.raises(RuntimeError, match="boom"):
        encode_table(out, Exploding())
    with pytest.raises(RuntimeError, match="boom"):
        encode_table_entries(out, Exploding())
    assert out == b"keep"


def test_encode_entries_not_a_mapping() -> None:
    out = bytearray(b"keep")
    with pytest.raises(LocalProtocolError, match=r"^field table: expected a mapping, not list$"):
        encode_table_entries(out, [("a", 1)])  # type: ignore[arg-type]
    assert out == b"keep"


# --- Round trips (Hypothesis) ---------------------------------------------------------------

keys = st.one_of(
    st.text(max_size=12),
    st.just(""),
    st.text(alphabet="ab-é", min_size=128, max_size=255),
).filter(lambda k: len(k.encode()) <= 255)

datetimes = st.datetimes(
    min_value=datetime.datetime(1970, 1, 1, 0, 0, 0),
    max_value=datetime.datetime(9999, 12, 30),
    timezones=st.one_of(
        st.none(),
        st.just(UTC),
        st.builds(
            datetime.timezone,
            st.timedeltas(
                min_value=datetime.timedelta(hours=-23), max_value=datetime.timedelta(hours=23)
            ),
        ),
    ),
).filter(lambda d: d.replace(tzinfo=d.tzinfo or UTC) >= datetime.datetime(1970, 1, 1, tzinfo=UTC))

decimals = st.builds(
    lambda unscaled, scale: Decimal(unscaled).scaleb(-scale),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(0, 255),
)

scalars: st.SearchStrategy[object] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([0, -1, 127, 128, -128, -129, 2**15, 2**31, -(2**31) - 1, 2**63 - 1, -(2**63)]),
    st.floats(allow_nan=False),
    st.text(max_size=40),
    st.binary(max_size=40),
    decimals,
    datetimes,
    st.builds(Int8, st.integers(-(2**7), 2**7 - 1)),
    st.builds(UInt8, st.integers(0, 2**8 - 1)),
    st.builds(Int16, st.integers(-(2**15), 2**15 - 1)),
    st.builds(UInt16, st.integers(0, 2**16 - 1)),
    st.builds(Int32, st.integers(-(2**31), 2**31 - 1)),
    st.builds(UInt32, st.integers(0, 2**32 - 1)),
    st.builds(Int64, st.integers(-(2**63), 2**63 - 1)),
    st.builds(Float32, st.floats(width=32, allow_nan=False)),
    st.builds(Float64, st.floats(allow_nan=False)),
    st.builds(LongString, st.one_of(st.binary(max_size=20), st.text(max_size=20))),
    st.builds(Timestamp, st.integers(0, 2**64 - 1)),
)


def _containers(children: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    return st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(keys, children, max_size=4),
    )


values = st.recursive(scalars, _containers, max_leaves=16)
tables = st.dictionaries(keys, values, max_size=6)


def expected(value: object) -> object:
    """What decoding the encoding of *value* gives back."""
    if isinstance(value, datetime.datetime):
        aware = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return aware.replace(microsecond=0)
    if isinstance(value, (list, tuple)):
        return [expected(v) for v in value]
    if isinstance(value, dict):
        return {k: expected(v) for k, v in value.items()}
    if isinstance(value, (Int8, UInt8, Int16, UInt16, Int32, UInt32, Int64, Float64)):
        return value.value
    if isinstance(value, Float32):
        return struct.unpack(">f", struct.pack(">f", value.value))[0]
    if isinstance(value, LongString):
        if isinstance(value.value, str):
            return value.value
        try:
            return value.value.decode()
        except UnicodeDecodeError:
            return value.value
    if isinstance(value, Timestamp):
        if value.value <= 253402300799:  # 9999-12-31T23:59:59Z
            return datetime.datetime.fromtimestamp(value.value, UTC)
        return value
    return value


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables)
def test_round_trip(value: dict[str, object]) -> None:
    wire = encoded(value)
    result, end = decode_table(b"junk" + wire + b"more", 4)
    assert end == 4 + len(wire)
    assert result == expected(value)
    # a second pass is stable: wrappers and datetimes normalised on the first one
    again = encoded(result)
    assert decoded(again) == result


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables)
def test_round_trip_entries(value: dict[str, object]) -> None:
    out = bytearray()
    encode_table_entries(out, value)  # type: ignore[arg-type]
    assert decode_table_entries(out, 0, len(out)) == expected(value)


def test_round_trip_nan() -> None:
    result = decoded(encoded({"d": float("nan"), "f": Float32(float("nan"))}))
    assert all(isinstance(v, float) and v != v for v in result.values())


# --- Any input: a table or RemoteProtocolError, nothing else -------------------------------


def decode_or_error(buf: Buffer, offset: int) -> tuple[FieldTable, int] | RemoteProtocolError:
    try:
        return decode_table(buf, offset)
    except RemoteProtocolError as exc:
        return exc


@settings(deadline=None)
@given(st.binary(max_size=200), st.integers(0, 8))
def test_decode_random_bytes(data: bytes, offset: int) -> None:
    for buf in (data, bytearray(data), memoryview(data)):
        outcome = decode_or_error(buf, offset)
        if isinstance(outcome, RemoteProtocolError):
            assert outcome.reply_code == 502
            assert outcome.reply_text.startswith("field table: ")
        else:
            result, end = outcome
            assert isinstance(result, dict)
            assert offset + 4 <= end <= len(data)


def mutated(wire: bytes, data: st.DataObject) -> bytes:
    """*wire* with up to four octets changed, cut somewhere."""
    changed = bytearray(wire)
    flips = data.draw(
        st.lists(st.tuples(st.integers(0, len(changed) - 1), st.integers(0, 255)), max_size=4)
    )
    for index, byte in flips:
        changed[index] = byte
    return bytes(changed[: data.draw(st.integers(0, len(changed)))])


@settings(deadline=None)
@given(tables, st.data())
def test_decode_mutated_tables(value: dict[str, object], data: st.DataObject) -> None:
    outcome = decode_or_error(mutated(encoded(value), data), 0)
    if isinstance(outcome, RemoteProtocolError):
        assert outcome.reply_code == 502
    else:
        assert isinstance(outcome[0], dict)


# --- Independent codecs: pamqp 4.0.1 and pika 1.4.4 ----------------------------------------

# The types both peers read correctly (pika truncates floats, see interop.md §5.2), timestamps
# before 2106 (pamqp reads larger T values as milliseconds) and keys up to 128 bytes (pamqp
# truncates longer ones on encode).
peer_keys = st.text(max_size=20).filter(lambda k: len(k.encode()) <= 128)
peer_datetimes = st.datetimes(
    min_value=datetime.datetime(1970, 1, 1),
    max_value=datetime.datetime(2106, 1, 1),
    timezones=st.just(UTC),
).map(lambda d: d.replace(microsecond=0))
peer_scalars: st.SearchStrategy[object] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.text(max_size=30),
    decimals,
    peer_datetimes,
)


def _peer_containers(children: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    return st.one_of(
        st.lists(children, max_size=4), st.dictionaries(peer_keys, children, max_size=4)
    )


peer_tables = st.dictionaries(
    peer_keys, st.recursive(peer_scalars, _peer_containers, max_leaves=10), max_size=6
)


@settings(deadline=None)
@given(peer_tables, st.floats(allow_nan=False), st.binary(max_size=20))
def test_peers_decode_what_we_encode(value: dict[str, object], number: float, raw: bytes) -> None:
    wire = encoded(value)
    assert pika.data.decode_table(wire, 0) == (value, len(wire))
    assert pamqp.decode.field_table(wire) == (len(wire), value)
    # pamqp reads floats (we send d, never the lossy f) and byte arrays (as bytearray)
    extra = encoded({"float": number, "bytes": raw})
    assert pamqp.decode.field_table(extra) == (
        len(extra),
        {"float": number, "bytes": bytearray(raw)},
    )
    assert pika.data.decode_table(encoded({"bytes": raw}), 0)[0] == {"bytes": raw}


@settings(deadline=None)
@given(peer_tables)
def test_we_decode_what_pika_encodes(value: dict[str, object]) -> None:
    pieces: list[bytes] = []
    size = pika.data.encode_table(pieces, value)
    wire = b"".join(pieces)
    assert size == len(wire)
    assert decode_table(wire, 0) == (value, len(wire))


@settings(deadline=None)
@given(peer_tables, st.floats(width=32, allow_nan=False), st.binary(max_size=20))
def test_we_decode_what_pamqp_encodes(value: dict[str, object], number: float, raw: bytes) -> None:
    wire = pamqp.encode.field_table(value)  # type: ignore[arg-type]
    assert decode_table(wire, 0) == (value, len(wire))
    # pamqp sends floats as f and wants bytearray for x
    extra = pamqp.encode.field_table({"float": number, "bytes": bytearray(raw)})
    assert decode_table(extra, 0) == ({"float": number, "bytes": raw}, len(extra))


def test_peers_agree_on_rabbitmq_dialect_codes() -> None:
    # What each peer reads from the codes where the spec and RabbitMQ disagree.
    wire = table(
        entry("l", b"l\xff\xff\xff\xff\xff\xff\xfc\x18"),
        entry("L", b"L\xff\xff\xff\xff\xff\xff\xfc\x18"),
        entry("s", b"s\xff\xfe"),
        entry("D", b"D\x01\xff\xff\xff\xf1"),
        entry("x", b"x\x00\x00\x00\x01\xff"),
    )
    ours = decoded(wire)
    assert ours == {"l": -1000, "L": -1000, "s": -2, "D": Decimal("-1.5"), "x": b"\xff"}
    assert pika.data.decode_table(wire, 0)[0] == ours
    assert pamqp.decode.field_table(wire)[1] == ours
    # U: pika reads int16 like us; pamqp doesn't know it
    u = table(entry("U", b"U\xff\xfe"))
    assert decoded(u) == pika.data.decode_table(u, 0)[0] == {"U": -2}
    with pytest.raises(ValueError, match="Unknown type"):
        pamqp.decode.field_table(u)
