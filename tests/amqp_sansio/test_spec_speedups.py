"""The C decoders (``amqp_sansio._speedups.Builder``: the ``decode`` of every generated method
class with a string or table argument, and of every properties class), against the generated
Python ``decode`` they stand in for and fall back to: for every method and properties class,
well-formed, mutated and random arguments decode to the same values of the same types, or fail
with the same error."""

from __future__ import annotations

import contextlib
import gc
import struct
from typing import TYPE_CHECKING, TypeVar, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amqp_sansio import BasicDeliver, BasicProperties, _table
from amqp_sansio._generated import spec_0_9_1 as spec
from amqp_sansio._method import ContentProperties, Method
from tests.support.strategies import methods, properties

from .test_table import mutated
from .test_table_speedups import typed

if TYPE_CHECKING:
    from collections.abc import Iterator

    from amqp_sansio._speedups import Builder

METHOD_CLASSES = sorted(spec.METHODS.values(), key=lambda cls: cls.INDEX)
PROPERTY_CLASSES = sorted(spec.PROPERTIES.values(), key=lambda cls: cls.CLASS_ID)
#: The methods whose decoders try a C decoder: those with a string or table argument.
UNPACKED = [
    cls
    for cls in METHOD_CLASSES
    if any(kind in ("shortstr", "longstr", "table") for _, kind in cls.FIELDS)
]


#: The octets after the arguments in a received buffer: the frame-end, the next frame's header.
NEXT_FRAME = b"\xce\x01\x00\x01\x00\x00\x00\x0c"


T = TypeVar("T")

#: The C decoder of each class that has one (``cls.decode``), by class.
DECODERS: dict[type[Method | ContentProperties], Builder[object]] = {}
_CLASSES: list[type[Method | ContentProperties]] = [*METHOD_CLASSES, *PROPERTY_CLASSES]
for _cls in _CLASSES:
    _decode = vars(_cls)["decode"]
    if _table.speedups is not None and type(_decode) is _table.speedups.builder:
        DECODERS[_cls] = _decode


def builder_of(
    cls: type[T],
    codes: bytes,
    names: tuple[str, ...],
    nones: tuple[str, ...] = (),
    *,
    properties: bool = False,
) -> Builder[T]:
    """A C decoder without a fallback: None where the installed one would call Python."""
    assert _table.speedups is not None
    return cast("Builder[T]", _table.speedups.builder(cls, codes, names, nones, properties))


def twin(decoder: Builder[object]) -> Builder[object]:
    """*decoder* without its fallback."""
    return builder_of(
        decoder.cls, decoder.codes, decoder.names, decoder.nones, properties=decoder.properties
    )


@contextlib.contextmanager
def pure_python() -> Iterator[None]:
    """Run the generated Python decoders: each class's C decoder's fallback."""
    saved = {cls: vars(cls)["decode"] for cls in DECODERS}  # a spy stays a spy (nested use)
    try:
        for cls, decoder in DECODERS.items():
            setattr(cls, "decode", decoder.fallback)  # noqa: B010
        yield
    finally:
        for cls, decoder in saved.items():
            setattr(cls, "decode", decoder)  # noqa: B010


@contextlib.contextmanager
def counting(results: list[bool]) -> Iterator[None]:
    """Record, for each decode of a class with a C decoder, whether C decoded it (True) or
    handed it to the Python decoder (False)."""

    def spy(decoder: Builder[object]) -> object:
        c_only = twin(decoder)
        fallback = decoder.fallback
        assert fallback is not None

        def decode(buf: bytes, offset: int) -> object:
            built = c_only(buf, offset)
            results.append(built is not None)
            return fallback(buf, offset) if built is None else built

        return decode

    try:
        for cls, decoder in DECODERS.items():
            setattr(cls, "decode", spy(decoder))  # noqa: B010
        yield
    finally:
        for cls, decoder in DECODERS.items():
            setattr(cls, "decode", decoder)  # noqa: B010


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


def test_the_c_decoders_are_built_and_active() -> None:
    # make test builds the extension; a silent fallback would leave the C paths untested
    assert _table.speedups is not None
    assert set(DECODERS) == {*UNPACKED, *PROPERTY_CLASSES}
    for cls, decoder in DECODERS.items():
        assert decoder.cls is cls
        fallback = decoder.fallback
        assert fallback is not None
        assert getattr(fallback, "__self__", None) is cls  # the generated classmethod


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
    # Well-formed arguments: the C decoder decoded them each time it was asked, unless a
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


def test_what_the_c_decoders_hand_to_python() -> None:
    FIELDS = builder_of(BasicDeliver, b"sqb", ("consumer_tag", "delivery_tag", "redelivered"))
    PROPERTIES = builder_of(
        BasicProperties, b"ss", ("content_type", "content_encoding"), properties=True
    )
    wire = b"\x03abc" + struct.pack(">Q", 7) + b"\x01"
    built = FIELDS(wire, 0)
    assert built is not None
    method, end = built
    assert (method.consumer_tag, method.delivery_tag, method.redelivered, end) == (
        "abc",
        7,
        True,
        13,
    )
    assert type(method) is BasicDeliver
    assert gc.is_tracked(method)  # as object.__new__ makes it
    # not bytes, an offset out of range, truncated, not UTF-8: None, and Python takes over
    assert FIELDS(bytearray(wire), 0) is None
    assert FIELDS(memoryview(wire), 0) is None
    assert FIELDS(wire, -1) is None
    assert FIELDS(wire, len(wire) + 1) is None
    assert FIELDS(wire[:-1], 0) is None
    assert FIELDS(b"\x02\xff\xfe" + wire[4:], 0) is None
    # properties: continuation and unknown flags are Python's to report
    built_props = PROPERTIES(b"\x80\x00\x01x", 0)
    assert built_props is not None
    props, end = built_props
    assert (props.content_type, props.content_encoding, end) == ("x", None, 4)
    assert PROPERTIES(b"\x80\x01\x01x", 0) is None
    assert PROPERTIES(b"\x80\x20\x01x", 0) is None
    # misuse is a TypeError, as for any function
    with pytest.raises(TypeError):
        FIELDS(wire)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        FIELDS(wire, 0, 0)  # type: ignore[call-arg]
    # with a fallback, what C leaves goes there instead of returning None
    calls: list[tuple[object, int]] = []

    def fallback(buf: object, offset: int) -> tuple[BasicDeliver, int]:
        calls.append((buf, offset))
        return method, 99

    assert _table.speedups is not None
    names = ("consumer_tag", "delivery_tag", "redelivered")
    both = _table.speedups.builder(BasicDeliver, b"sqb", names, (), False, fallback)
    assert both(wire, 0) is not None
    assert calls == []
    assert both(bytearray(wire), 0) == (method, 99)
    assert both(wire[:-1], 3) == (method, 99)
    assert calls == [(bytearray(wire), 0), (wire[:-1], 3)]


def test_tables_and_bits_in_a_c_decoder() -> None:
    table = b"\x00\x00\x00\x0b\x01kS\x00\x00\x00\x01v\x01xV"
    declare = builder_of(spec.QueueDeclare, b"hsF", ("ticket", "queue", "arguments"))
    built = declare(b"\x00\x05\x01q" + table + b"\xce", 0)
    assert built is not None
    assert (built[0].ticket, built[0].queue, built[0].arguments, built[1]) == (
        5,
        "q",
        {"k": "v", "x": None},
        19,
    )
    assert declare(b"\x00\x05\x01q\x00\x00\x00\x02\x01kA", 0) is None  # an array: Python's
    # nine bits take two octets, eight to the first
    nine = builder_of(Bits, b"b" * 9, Bits.__slots__)
    built_bits = nine(b"\xff\x00", 0)
    assert built_bits is not None
    assert [getattr(built_bits[0], name) for name in Bits.__slots__] == [True] * 8 + [False]
    assert built_bits[1] == 2


class Bits:
    """Nine slots, for a decoder of nine bits."""

    __slots__ = ("a", "b", "c", "d", "e", "f", "g", "h", "i")


def test_a_c_decoder_is_refused_what_it_cannot_build_exactly() -> None:
    with pytest.raises(TypeError, match="no slot 'nope'"):
        builder_of(BasicDeliver, b"s", ("nope",))
    with pytest.raises(ValueError, match="named twice"):
        builder_of(BasicDeliver, b"ss", ("exchange", "exchange"))
    with pytest.raises(ValueError, match="one slot name per code"):
        builder_of(BasicDeliver, b"ss", ("exchange",))
    with pytest.raises(ValueError, match="unknown field code"):
        builder_of(BasicDeliver, b"x", ("exchange",))
    with pytest.raises(ValueError, match="unknown field code"):
        builder_of(BasicProperties, b"b", ("priority",), properties=True)  # no bits there

    class Plain:  # instances with a __dict__
        pass

    with pytest.raises(TypeError, match="not a plain slots class"):
        builder_of(Plain, b"s", ("x",))
