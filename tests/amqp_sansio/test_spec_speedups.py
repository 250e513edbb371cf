"""The C argument unpackers (``amqp_sansio._speedups.unpack_fields``/``unpack_properties``) that
the generated decoders try first, against the generated Python code they stand in for: for
every method and properties class, well-formed, mutated and random arguments decode to the
same values of the same types, or fail with the same error."""

from __future__ import annotations

import contextlib
import struct
from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amqp_sansio import _method
from amqp_sansio._generated import spec_0_9_1 as spec
from amqp_sansio._method import ContentProperties, Method
from tests.support.strategies import methods, properties

from .test_table import mutated
from .test_table_speedups import typed

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

METHOD_CLASSES = sorted(spec.METHODS.values(), key=lambda cls: cls.INDEX)
PROPERTY_CLASSES = sorted(spec.PROPERTIES.values(), key=lambda cls: cls.CLASS_ID)
#: The methods whose decoders try the C unpacker: those with a string or table argument.
UNPACKED = [
    cls
    for cls in METHOD_CLASSES
    if any(kind in ("shortstr", "longstr", "table") for _, kind in cls.FIELDS)
]


#: The octets after the arguments in a received buffer: the frame-end, the next frame's header.
NEXT_FRAME = b"\xce\x01\x00\x01\x00\x00\x00\x0c"


@contextlib.contextmanager
def pure_python() -> Iterator[None]:
    """Run the generated decoders without their C unpackers."""
    names = vars(spec)
    saved = names["unpack_fields"], names["unpack_properties"]
    names["unpack_fields"] = names["unpack_properties"] = None
    try:
        yield
    finally:
        names["unpack_fields"], names["unpack_properties"] = saved


@contextlib.contextmanager
def counting(results: list[bool]) -> Iterator[None]:
    """Record, for each call of a C unpacker, whether it decoded (True) or gave up (False)."""
    names = vars(spec)
    saved = names["unpack_fields"], names["unpack_properties"]

    def spy(unpack: Callable[[bytes, bytes, int], object]) -> Callable[[bytes, bytes, int], object]:
        def call(codes: bytes, buf: bytes, offset: int) -> object:
            values = unpack(codes, buf, offset)
            results.append(values is not None)
            return values

        return call

    names["unpack_fields"], names["unpack_properties"] = spy(saved[0]), spy(saved[1])
    try:
        yield
    finally:
        names["unpack_fields"], names["unpack_properties"] = saved


def fields_of(decoded: Method | ContentProperties) -> list[object]:
    if isinstance(decoded, ContentProperties):
        # a table property stays raw until read: compare the octets kept, not a decode of them
        names = [f"_{name}_raw" if kind == "table" else name for name, kind in type(decoded).FIELDS]
    else:
        names = [name for name, _ in type(decoded).FIELDS]
    return [(name, typed(getattr(decoded, name))) for name in names]


def outcome(cls: type[Method | ContentProperties], buf: bytes, offset: int) -> object:
    try:
        decoded, end = cls.decode(buf, offset)
    except Exception as exc:  # whatever the Python decoder raises, the C path must raise too
        return ("error", type(exc).__name__, str(exc))
    return (fields_of(decoded), end)


def same(cls: type[Method | ContentProperties], buf: bytes, offset: int = 0) -> object:
    with pure_python():
        expected = outcome(cls, buf, offset)
    assert outcome(cls, buf, offset) == expected
    return expected


def arguments(value: Method | ContentProperties) -> bytes:
    out = bytearray()
    value.encode(out)
    # a method's encoding starts with its class and method ids; the decoder reads what follows
    return bytes(out[4:] if isinstance(value, Method) else out)


def test_the_unpackers_are_built_and_active() -> None:
    # make test builds the extension; a silent fallback would leave the C paths untested
    assert _method.unpack_fields is not None
    assert _method.unpack_properties is not None
    assert vars(spec)["unpack_fields"] is _method.unpack_fields


@pytest.mark.parametrize("cls", METHOD_CLASSES, ids=lambda cls: cls.NAME)
@settings(deadline=None, max_examples=25)
@given(data=st.data())
def test_methods_decode_alike(cls: type[Method], data: st.DataObject) -> None:
    wire = arguments(data.draw(methods(cls)))
    results: list[bool] = []
    with counting(results):
        decoded = same(cls, wire)
        same(cls, wire + NEXT_FRAME)
        same(cls, b"\x01\xce" + wire, 2)  # at an offset
    assert decoded[1] == len(wire)  # type: ignore[index]
    # Well-formed arguments: the C unpacker decoded them each time it was asked, unless a
    # table holds a type it leaves to Python (A, T, D: see _speedups.c).
    if cls not in UNPACKED:
        assert results == []
    elif any(kind == "table" for _, kind in cls.FIELDS):
        assert results in ([True] * 3, [False] * 3)
    else:
        assert results == [True] * 3


@pytest.mark.parametrize("cls", PROPERTY_CLASSES, ids=lambda cls: str(cls.CLASS_ID))
@settings(deadline=None, max_examples=200)
@given(data=st.data())
def test_properties_decode_alike(cls: type[ContentProperties], data: st.DataObject) -> None:
    wire = arguments(data.draw(properties(cls)))
    results: list[bool] = []
    with counting(results):
        decoded = same(cls, wire)
        same(cls, wire + NEXT_FRAME)
    assert decoded[1] == len(wire)  # type: ignore[index]
    assert results == [True, True]


@pytest.mark.parametrize("cls", [*UNPACKED, *PROPERTY_CLASSES], ids=lambda cls: repr(cls.__name__))
@settings(deadline=None, max_examples=50)
@given(data=st.data())
def test_mutated_arguments_decode_alike(
    cls: type[Method | ContentProperties], data: st.DataObject
) -> None:
    strategy = properties(cls) if issubclass(cls, ContentProperties) else methods(cls)
    same(cls, mutated(arguments(data.draw(strategy)), data))  # type: ignore[arg-type]


@pytest.mark.parametrize("cls", [*UNPACKED, *PROPERTY_CLASSES], ids=lambda cls: repr(cls.__name__))
@settings(deadline=None, max_examples=50)
@given(wire=st.binary(max_size=64))
def test_random_octets_decode_alike(cls: type[Method | ContentProperties], wire: bytes) -> None:
    same(cls, wire)


def test_what_the_unpackers_hand_to_python() -> None:
    unpack_fields, unpack_properties = _method.unpack_fields, _method.unpack_properties
    assert unpack_fields is not None
    assert unpack_properties is not None
    wire = b"\x03abc" + struct.pack(">Q", 7) + b"\x01"
    assert unpack_fields(b"sqb", wire, 0) == ("abc", 7, True, 13)
    # not bytes, an offset out of range, truncated, not UTF-8: None, and Python takes over
    assert unpack_fields(b"sqb", bytearray(wire), 0) is None
    assert unpack_fields(b"sqb", memoryview(wire), 0) is None
    assert unpack_fields(b"sqb", wire, -1) is None
    assert unpack_fields(b"sqb", wire, len(wire) + 1) is None
    assert unpack_fields(b"sqb", wire[:-1], 0) is None
    assert unpack_fields(b"s", b"\x02\xff\xfe", 0) is None
    table = b"\x00\x00\x00\x0b\x01kS\x00\x00\x00\x01v\x01xV"
    assert unpack_fields(b"Fo", table + b"\x05", 0) == ({"k": "v", "x": None}, 5, 16)
    assert unpack_fields(b"F", b"\x00\x00\x00\x02\x01kA", 0) is None  # an array: Python's
    # nine bits take two octets, eight to the first
    assert unpack_fields(b"bbbbbbbbb", b"\xff\x00", 0) == (*[True] * 8, False, 2)
    # properties: continuation and unknown flags are Python's to report
    assert unpack_properties(b"ss", b"\x80\x00\x01x", 0) == ("x", None, 4)
    assert unpack_properties(b"ss", b"\x80\x01\x01x", 0) is None
    assert unpack_properties(b"ss", b"\x80\x20\x01x", 0) is None
    # misuse is a TypeError, as for any function
    with pytest.raises(TypeError):
        unpack_fields(b"s", wire)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        unpack_fields("s", wire, 0)  # type: ignore[arg-type]
