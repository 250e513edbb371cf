"""The C table codec (``amqp_sansio._speedups``) against the pure-Python one: the same values,
of the same types, and the same errors, for well-formed, rare-typed, malformed and random
input; the same octets, or the same error, for tables to encode. The rest of the test suite
runs with whichever ``decode_table`` and ``encode_table`` are active (the C ones wherever the
package was installed with a compiler, as ``make test`` does)."""

from __future__ import annotations

import math
import os
import struct
import subprocess
import sys
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amqp_sansio import LocalProtocolError, RemoteProtocolError, _speedups, _table
from amqp_sansio._table import (
    MAX_TABLE_DEPTH,
    MAX_TABLE_ENTRIES,
    Float32,
    Int16,
    LongString,
    decode_table_py,
    encode_table,
    encode_table_py,
)

from .test_table import keys, mutated, nested_dict, nested_tables, tables

c_decode_table = _table.decode_table
c_encode_table = _table.encode_table


def typed(value: object) -> object:
    """*value* with every type spelled out (True == 1 and nan != nan would hide differences)."""
    if isinstance(value, dict):
        return ("dict", [(k, typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [typed(v) for v in value])
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan", struct.pack(">d", value))
    return (type(value).__name__, value)


def outcome(decode: object, buf: object, offset: int) -> tuple[object, ...]:
    assert callable(decode)
    try:
        table, end = decode(buf, offset)
    except RemoteProtocolError as exc:
        return ("error", exc.reply_code, exc.reply_text)
    return (typed(table), end)


def same(buf: bytes | bytearray | memoryview, offset: int = 0) -> tuple[object, ...]:
    expected = outcome(decode_table_py, buf, offset)
    assert outcome(c_decode_table, buf, offset) == expected
    return expected


def encoded(value: dict[str, object]) -> bytes:
    out = bytearray()
    encode_table(out, value)  # type: ignore[arg-type]
    return bytes(out)


def entry(key: bytes, code: bytes, payload: bytes) -> bytes:
    return bytes([len(key)]) + key + code + payload


def table_of(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack(">I", len(body)) + body


def test_the_accelerator_is_built_and_active() -> None:
    # make test installs the package with its C decoder; a silent fallback would hide a
    # broken build behind slower tests
    assert c_decode_table is not decode_table_py
    assert type(c_decode_table).__name__ == "builtin_function_or_method"
    assert c_encode_table is not encode_table_py
    assert type(c_encode_table).__name__ == "builtin_function_or_method"


def test_pure_python_on_request() -> None:
    script = (
        "from amqp_sansio import _table; "
        "print(_table.decode_table is _table.decode_table_py, "
        "_table.encode_table is _table.encode_table_py, _table.speedups)"
    )
    env = {**os.environ, "AMQP_SANSIO_NO_EXTENSIONS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "True True None"


def test_every_type_code() -> None:
    wire = table_of(
        entry(b"S", b"S", struct.pack(">I", 5) + b"h\xc3\xa9l!"),
        entry(b"S-not-utf8", b"S", struct.pack(">I", 2) + b"\xff\xfe"),
        entry(b"x", b"x", struct.pack(">I", 3) + b"\x00\x01\x02"),
        entry(b"b", b"b", b"\x80"),
        entry(b"B", b"B", b"\xff"),
        entry(b"t", b"t", b"\x02"),
        entry(b"f", b"t", b"\x00"),
        entry(b"s", b"s", b"\x80\x00"),
        entry(b"U", b"U", b"\xff\xff"),
        entry(b"u", b"u", b"\xff\xff"),
        entry(b"I", b"I", b"\x80\x00\x00\x00"),
        entry(b"i", b"i", b"\xff\xff\xff\xff"),
        entry(b"l", b"l", b"\x80" + bytes(7)),
        entry(b"L", b"L", b"\xff" * 8),
        entry(b"f32", b"f", struct.pack(">f", 1.5)),
        entry(b"nan32", b"f", b"\x7f\xc0\x00\x01"),
        entry(b"d", b"d", struct.pack(">d", -2.25)),
        entry(b"inf", b"d", struct.pack(">d", math.inf)),
        entry(b"V", b"V", b""),
        entry(b"F", b"F", table_of(entry(b"inner", b"I", b"\x00\x00\x00\x07"))),
        entry(b"", b"F", table_of()),
        entry(b"S", b"b", b"\x01"),  # a repeated key: the last value, the first position
    )
    table, end = c_decode_table(wire, 0)
    assert end == len(wire)
    assert table["b"] == -128
    assert table["L"] == -1
    assert table["S"] == 1
    assert next(iter(table)) == "S"
    assert same(wire) == outcome(c_decode_table, wire, 0)


def test_what_the_c_decoder_hands_to_python() -> None:
    rare = [
        entry(b"A", b"A", struct.pack(">I", 2) + b"t\x01"),
        entry(b"T", b"T", struct.pack(">Q", 1_700_000_000)),
        entry(b"D", b"D", b"\x02" + struct.pack(">i", -12345)),
        entry(b"\xff-key", b"t", b"\x01"),  # not UTF-8: surrogateescape, in Python only
    ]
    for item in rare:
        # alone, after a common entry, and nested under a common one
        for wire in (
            table_of(item),
            table_of(entry(b"n", b"I", bytes(4)), item),
            table_of(entry(b"F", b"F", table_of(item))),
        ):
            result = same(wire)
            assert result[0] != "error", (wire, result)


def test_inputs_that_are_not_bytes_go_to_python() -> None:
    wire = encoded({"a": 1, "b": {"c": "d"}})
    for buf in (bytearray(wire), memoryview(wire), memoryview(b"xx" + wire)[2:]):
        assert same(buf) == same(wire)
    assert c_decode_table(wire, 0, depth=1) == decode_table_py(wire, 0, depth=1)
    assert c_decode_table(b"??" + wire, 2) == (decode_table_py(wire, 0)[0], len(wire) + 2)


def test_malformed_tables_raise_the_python_errors() -> None:
    good = encoded({"key": "value", "n": 7})
    cases = [
        b"",
        b"\x00\x00",
        good[:-1],
        struct.pack(">I", 100) + good[4:],
        table_of(b"\x05ab"),  # a key running past the table
        table_of(entry(b"k", b"S", struct.pack(">I", 50) + b"short")),
        table_of(entry(b"k", b"l", b"\x00\x01")),
        table_of(entry(b"k", b"Z", b"")),
        table_of(entry(b"k", b"F", struct.pack(">I", 9))),
        nested_tables(MAX_TABLE_DEPTH + 1),
    ]
    for wire in cases:
        assert same(wire)[0] == "error", wire
    assert same(nested_tables(MAX_TABLE_DEPTH))[0] != "error"
    for offset in (-1, len(good), len(good) + 10):
        same(good, offset)


@settings(deadline=None)
@given(tables)
def test_round_trips_agree(value: dict[str, object]) -> None:
    same(encoded(value))


@settings(deadline=None)
@given(tables, st.data())
def test_mutated_tables_agree(value: dict[str, object], data: st.DataObject) -> None:
    same(mutated(encoded(value), data))


@settings(deadline=None)
@given(st.binary(max_size=200), st.integers(0, 8))
def test_random_bytes_agree(data: bytes, offset: int) -> None:
    same(data, offset)


# --- encoding --------------------------------------------------------------------------------


def encoding(encode: object, table: object, prefix: bytes = b"pre") -> tuple[object, ...]:
    """What *encode* appends to a bytearray holding *prefix*, or its error (and that it left the
    bytearray as it was)."""
    assert callable(encode)
    out = bytearray(prefix)
    try:
        encode(out, table)
    except Exception as exc:
        assert out == prefix
        return ("error", type(exc).__name__, str(exc))
    return ("ok", bytes(out))


def encodes_alike(table: object) -> tuple[object, ...]:
    expected = encoding(encode_table_py, table)
    assert encoding(c_encode_table, table) == expected
    return expected


class Spy:
    """Stands in for the Python encoder behind the C one: counts what the C one hands over."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, out: bytearray, table: object) -> None:
        self.calls += 1
        encode_table_py(out, table)  # type: ignore[arg-type]


def c_alone(table: object) -> bytes:
    """Encode *table* with the C encoder, failing if it hands the table to Python."""
    spy = Spy()
    _speedups.set_fallbacks(decode_table_py, spy)
    try:
        out = bytearray()
        c_encode_table(out, table)  # type: ignore[arg-type]
    finally:
        _speedups.set_fallbacks(decode_table_py, encode_table_py)
    assert spy.calls == 0, table
    return bytes(out)


ascii_keys = st.text(alphabet=st.characters(max_codepoint=127), max_size=20)
common_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from(
        [-(2**7) - 1, -(2**7), 2**7 - 1, 2**7, -(2**15) - 1, 2**15, 2**31, -(2**31) - 1]
    ),
    st.floats(),
    st.text(max_size=30),
    st.binary(max_size=30),
    st.binary(max_size=30).map(bytearray),
)
common_values = st.recursive(
    common_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(ascii_keys, children, max_size=4),
    ),
    max_leaves=16,
)
common_tables = st.dictionaries(ascii_keys, common_values, max_size=6)


@settings(deadline=None)
@given(common_tables)
def test_common_tables_encode_in_c_alike(value: dict[str, object]) -> None:
    assert encodes_alike(value) == ("ok", b"pre" + c_alone(value))


@settings(deadline=None)
@given(tables)
def test_any_table_encodes_alike(value: dict[str, object]) -> None:
    encodes_alike(value)


@settings(deadline=None)
@given(st.dictionaries(keys, st.integers() | st.text(), max_size=4))
def test_any_keys_and_any_ints_encode_alike(value: dict[str, object]) -> None:
    encodes_alike(value)


def test_what_the_c_encoder_hands_to_python() -> None:
    class Text(str):
        pass

    class Number(int):
        pass

    rare: list[object] = [
        Text("subclass"),
        Number(3),
        Int16(3),
        Float32(1.5),
        LongString(b"raw"),
        memoryview(b"view"),
        2**63,
        -(2**63) - 1,
        "lone \udc80 surrogate",
        {"nested": {"deeper": Number(1)}},
        [1, [2, Text("x")]],
        object(),
    ]
    for item in rare:
        for table in ({"k": item}, {"a": 1, "k": item}, {"F": {"k": item}}, {"A": [item]}):
            encodes_alike(table)
    others: list[object] = [
        {"é-key": 1},  # not ASCII: encoded by Python
        {"\udcff": 1},  # surrogateescape
        {"k" * 256: 1},
        {1: "not a str key"},
        nested_dict(MAX_TABLE_DEPTH),
        nested_dict(MAX_TABLE_DEPTH + 1),
        dict.fromkeys(map(str, range(MAX_TABLE_ENTRIES + 1)), 0),
    ]
    for other in others:
        encodes_alike(other)
    assert encodes_alike(nested_dict(MAX_TABLE_DEPTH + 1))[0] == "error"
    # non-ASCII values are the C encoder's; only keys that are not ASCII go to Python
    assert c_alone({"k": "é", "l": ["ü"]}) == encoded({"k": "é", "l": ["ü"]})


def test_the_c_encoder_takes_what_python_takes() -> None:
    for table in (None, {}, {"a": 1}):
        assert c_alone(table) == encoding(encode_table_py, table, b"")[1]
    # a Mapping that is not a dict, a table that is not a Mapping, keywords: Python's
    encodes_alike(types.MappingProxyType({"a": 1}))
    assert encodes_alike("not a table")[0] == "error"
    with pytest.raises(LocalProtocolError):
        c_encode_table(bytearray(), ["a"])  # type: ignore[arg-type]
    out = bytearray()
    c_encode_table(out=out, table={"a": 1})
    assert out == encoded({"a": 1})


def test_an_exported_bytearray_is_left_as_it_was() -> None:
    out = bytearray(b"held")
    view = memoryview(out)
    with pytest.raises(BufferError):
        c_encode_table(out, {"a": "b"})
    view.release()
    assert out == b"held"
