"""The AMQP 0-10 values that have no built-in Python type, and the base classes of the generated
structs, controls and commands.

Value types of the 0-10 type system as Python sees them (the generated codec in
:mod:`._generated.spec_0_10` reads and writes them):

* :class:`Typed`: a value with the type code it travels with. Entries of a decoded ``map`` and
  items of a decoded ``list`` are always :class:`Typed`, so encoding them again writes the same
  octets. Plain Python values that an application puts into a map, list or array get a code by
  the rules of :func:`code_of`, which are qpid-python's.
* :class:`Array`: an ``array``: one element type code and the elements as plain Python values.
* :class:`SequenceSet`: a ``sequence-set`` of command ids, kept normalised as qpid-python keeps
  its ``RangedSet`` (sorted by RFC 1982 serial order, touching and overlapping ranges merged).
* :class:`ByteRanges`: ``byte-ranges`` (octet offsets of command fragments), kept as given.
* :class:`UnknownStruct`: a coded struct whose code this package does not know, kept as its
  octets so it can be forwarded unchanged (a header segment may carry such entries).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, ClassVar, Final, NamedTuple, Self, TypeAlias, Union, final

import attrs

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from .._method import Role

__all__ = [
    "MAX_SEQUENCE_SET_RANGES",
    "SERIAL_MODULUS",
    "Array",
    "ByteRanges",
    "Command",
    "Compound",
    "Control",
    "FieldSpec",
    "Map",
    "SequenceSet",
    "Struct",
    "Typed",
    "UnknownStruct",
    "Value",
    "code_of",
    "serial_add",
    "serial_le",
    "serial_lt",
    "uuid_from_bytes",
]

#: Command ids are 32-bit serial numbers (RFC 1982).
SERIAL_MODULUS: Final = 1 << 32
_MASK: Final = SERIAL_MODULUS - 1
_HALF: Final = 1 << 31

#: Anything the generated decoders read from once a memoryview was turned into bytes.
ByteString: TypeAlias = bytes | bytearray

#: A value in a map, list or array. Decoded maps and lists hold :class:`Typed` values only.
Value: TypeAlias = Union[
    "Typed",
    bool,
    int,
    float,
    str,
    bytes,
    uuid.UUID,
    datetime,
    "Array",
    "Struct",
    list["Value"],
    tuple["Value", ...],
    dict[str, "Value"],
    None,
]
#: A ``map``: str8 keys to values.
Map: TypeAlias = dict[str, Value]

#: ``(python_name, type_name)`` for each field in wire order. Type names are the spec's
#: primitive names (``uint16``, ``str8``, ``map``, ``sequence-set``, ``bit``, ...) or the spec
#: name of a struct (``reply-to``, ``xid``); enum domains are given as their primitive type.
FieldSpec: TypeAlias = tuple[str, str]


# --- serial numbers ---------------------------------------------------------------------------


def serial_lt(a: int, b: int) -> bool:
    """``a < b`` in RFC 1982 serial arithmetic on 32 bits (false for ids 2**31 apart)."""
    return a != b and ((b - a) & _MASK) < _HALF


def serial_le(a: int, b: int) -> bool:
    """``a <= b`` in RFC 1982 serial arithmetic on 32 bits."""
    return a == b or ((b - a) & _MASK) < _HALF


def serial_add(a: int, n: int) -> int:
    """``a + n`` modulo 2**32."""
    return (a + n) & _MASK


def _check_id(value: object) -> int:
    if type(value) is not int or not 0 <= value <= _MASK:
        raise ValueError(f"a command id is an int in 0..{_MASK}, not {value!r}")
    return value


def _normalise(ranges: Iterable[tuple[int, int] | int]) -> list[tuple[int, int]]:
    """Check, sort and merge *ranges* into serial order: O(n log n) for n ranges.

    Serial order is not a total order, but a set spanning less than 2**31 ids (the only kind
    with an order) lies within 2**31 of any of its ids: offsets from the first low end, taken
    as signed 32-bit numbers, order its ranges as plain integers. One sort of those offsets
    and one merging pass replace qpid-python's insertion of each range into every earlier
    one, which was quadratic (8,000 ranges, the most one sequence-set holds on the wire, took
    about 100 s).
    """
    pairs: list[tuple[int, int]] = []
    base = -1
    for item in ranges:
        if isinstance(item, tuple):
            low, high = _check_id(item[0]), _check_id(item[1])
        else:
            low = high = _check_id(item)
        if serial_lt(high, low):
            raise ValueError(f"range ({low}, {high}) ends before it starts")
        if base < 0:
            base = low
        start = ((low - base + _HALF) & _MASK) - _HALF
        pairs.append((start, start + ((high - low) & _MASK)))
    if not pairs:
        return []
    pairs.sort()
    merged: list[tuple[int, int]] = []
    lo, hi = pairs[0]
    for start, stop in pairs:
        if start <= hi + 1:  # overlaps or touches the range being built
            if stop > hi:
                hi = stop
        else:
            merged.append((lo, hi))
            lo, hi = start, stop
    merged.append((lo, hi))
    # RFC 1982 orders two ids only when they are less than 2**31 apart: a set spanning more
    # has no serial order, and normalising it again (after a decode) could reorder it.
    first, last = merged[0][0], merged[-1][1]
    if last - first >= _HALF:
        raise ValueError(
            f"a sequence set spans {(first + base) & _MASK}..{(last + base) & _MASK}, more "
            "than half the serial number space: RFC 1982 leaves its order undefined"
        )
    return [((lo + base) & _MASK, (hi + base) & _MASK) for lo, hi in merged]


#: The most ranges one ``sequence-set`` holds on the wire: its octet count is a ``uint16`` and
#: each range takes 8 octets (65,528 octets, a little more than one frame at the largest
#: ``max-frame-size``). Decoding can't meet a longer one; encoding one is a ``ValueError``.
MAX_SEQUENCE_SET_RANGES: Final = 0xFFFF // 8


# --- sets of ids and offsets ------------------------------------------------------------------


@final
class SequenceSet:
    """A set of command ids (``sequence-set``): inclusive ``(low, high)`` ranges.

    Ranges are normalised on construction as qpid-python normalises them: each is merged with
    every range it overlaps or touches and the result is kept in serial order, so
    ``SequenceSet([(5, 6), (0, 1), (2, 3)])`` holds ``((0, 3), (5, 6))``. A range whose high end
    comes before its low end in serial order is a ``ValueError``, and so is a set whose ids span
    2**31 or more (their serial order is undefined). Immutable and hashable.
    """

    __slots__ = ("_ranges",)

    _ranges: tuple[tuple[int, int], ...]

    def __init__(self, ranges: Iterable[tuple[int, int] | int] = ()) -> None:
        self._ranges = tuple(_normalise(ranges))

    @classmethod
    def of(cls, *ids: int) -> SequenceSet:
        """The set of the given ids."""
        return cls(ids)

    @property
    def ranges(self) -> tuple[tuple[int, int], ...]:
        """The normalised inclusive ranges."""
        return self._ranges

    def __contains__(self, item: object) -> bool:
        if type(item) is not int:
            return False
        return any(serial_le(low, item) and serial_le(item, high) for low, high in self._ranges)

    def __iter__(self) -> Iterator[int]:
        """Every id, range by range (a range may hold up to 2**31 ids)."""
        for low, high in self._ranges:
            n = low
            while True:
                yield n
                if n == high:
                    break
                n = (n + 1) & _MASK

    def __len__(self) -> int:
        return sum(((high - low) & _MASK) + 1 for low, high in self._ranges)

    def __bool__(self) -> bool:
        return bool(self._ranges)

    def __eq__(self, other: object) -> bool:
        if type(other) is not SequenceSet:
            return NotImplemented
        return self._ranges == other._ranges

    def __hash__(self) -> int:
        return hash(self._ranges)

    def __repr__(self) -> str:
        return f"SequenceSet({list(self._ranges)!r})"

    def union(self, other: SequenceSet | Iterable[tuple[int, int] | int]) -> SequenceSet:
        """The ids in either set."""
        extra = other.ranges if isinstance(other, SequenceSet) else tuple(other)
        return SequenceSet((*self._ranges, *extra))


@final
@attrs.frozen(slots=True)
class ByteRanges:
    """``byte-ranges``: inclusive ``(low, high)`` octet offsets, 64-bit, kept as given."""

    ranges: tuple[tuple[int, int], ...] = ()


# --- typed values -----------------------------------------------------------------------------


@final
class Typed(NamedTuple):
    """A value with its 0-10 type code (``TypeCode``), as decoded maps and lists hold them.

    A named tuple ``(code, value)``: decoders build millions of them, and a tuple is the
    cheapest immutable pair Python has.

    Python value by code: the integer types, ``sequence-no`` and ``datetime`` (seconds since
    the epoch) are ``int``; ``boolean`` is ``bool``; ``float`` and ``double`` are ``float``;
    ``str8``/``str16`` and their Latin-1 and UTF-16 variants are ``str``; ``vbin8/16/32``,
    ``char``, ``char-utf32``, ``dec32``, ``dec64`` and every ``binN`` are ``bytes``; ``uuid`` is
    :class:`uuid.UUID`; ``map`` is a dict of :class:`Typed`; ``list`` is a list of
    :class:`Typed`; ``array`` is an :class:`Array`; ``struct32`` is a :class:`Struct`;
    ``void`` is ``None`` and ``bit`` is ``True``. A code the spec reserves but does not name is
    read by its width class as ``bytes``.
    """

    code: int
    value: Value


@final
@attrs.frozen(slots=True)
class Array:
    """An ``array``: one element type code and the elements as plain values of that type."""

    code: int
    values: tuple[Value, ...] = ()

    @classmethod
    def of(cls, values: Iterable[Value]) -> Array:
        """An array typed as qpid-python types one: by its first element (:func:`code_of`),
        ``void`` when empty."""
        items = tuple(values)
        return cls(code_of(items[0]) if items else _VOID, items)


#: The type codes of :func:`code_of` (the generated ``TypeCode`` names them all).
_BOOLEAN: Final = 0x08
_INT64: Final = 0x31
_DOUBLE: Final = 0x33
_DATETIME: Final = 0x38
_UUID: Final = 0x48
_VBIN16: Final = 0x90
_STR16: Final = 0x95
_VBIN32: Final = 0xA0
_MAP: Final = 0xA8
_LIST: Final = 0xA9
_ARRAY: Final = 0xAA
_STRUCT32: Final = 0xAB
_VOID: Final = 0xF0


def code_of(value: Value) -> int:
    """The type code a plain value is encoded with in a map, list or array.

    These are qpid-python 1.36's rules (``qpid.codec010.Codec.ENCODINGS``), with Python 3's
    ``bytes`` in the place of its non-ASCII ``str``:

    ============================  ===========================================================
    value                         type code
    ============================  ===========================================================
    :class:`Typed`                its own code
    ``bool``                      ``boolean`` (0x08)
    ``int``                       ``int64`` (0x31); outside int64 it can't be encoded
    ``float``                     ``double`` (0x33)
    ``str``                       ``str16`` (0x95), UTF-8
    ``bytes`` up to 65535 octets  ``vbin16`` (0x90); longer: ``vbin32`` (0xa0)
    ``None``                      ``void`` (0xf0)
    ``list``, ``tuple``           ``list`` (0xa9)
    ``dict``                      ``map`` (0xa8)
    ``datetime``                  ``datetime`` (0x38): whole seconds since the epoch, a naive
                                  datetime counting as UTC
    :class:`uuid.UUID`            ``uuid`` (0x48)
    :class:`Array`                ``array`` (0xaa)
    :class:`Struct`               ``struct32`` (0xab); it must be a coded struct
    ============================  ===========================================================

    qpid-python gives an ASCII-only ``str`` (its bytes type) ``str16``, and a naive datetime
    its local time; wrap a value in :class:`Typed` to choose any code.

    :raises ValueError: the value has no encoding.
    """
    kind = type(value)
    if kind is Typed:
        assert isinstance(value, Typed)
        return value.code
    if kind is bool:
        return _BOOLEAN
    if kind is int:
        return _INT64
    if kind is str:
        return _STR16
    if kind is float:
        return _DOUBLE
    if value is None:
        return _VOID
    if isinstance(value, bytes):
        return _VBIN16 if len(value) <= 0xFFFF else _VBIN32
    if isinstance(value, dict):
        return _MAP
    if isinstance(value, list | tuple):
        return _LIST
    if isinstance(value, datetime):
        return _DATETIME
    if isinstance(value, uuid.UUID):
        return _UUID
    if isinstance(value, Array):
        return _ARRAY
    if isinstance(value, Struct):
        return _STRUCT32
    if isinstance(value, bool):
        return _BOOLEAN
    if isinstance(value, int):
        return _INT64
    if isinstance(value, float):
        return _DOUBLE
    if isinstance(value, str):
        return _STR16
    raise ValueError(f"no 0-10 type for {type(value).__name__} values; wrap it in Typed")


_new: Final = object.__new__
_set: Final = object.__setattr__
_SAFE_UNKNOWN: Final = uuid.SafeUUID.unknown


def uuid_from_bytes(raw: bytes) -> uuid.UUID:
    """``uuid.UUID(bytes=raw)``, a third of its cost: the decoders make one per message id.

    A UUID holds its value in the ``int`` and ``is_safe`` slots and nothing else (CPython
    3.11-3.14); this fills them without ``__init__``'s argument checks.
    """
    if len(raw) != 16:
        raise ValueError(f"a uuid is 16 octets, not {len(raw)}")
    value = _new(uuid.UUID)
    _set(value, "int", int.from_bytes(raw))
    _set(value, "is_safe", _SAFE_UNKNOWN)
    return value


def datetime_seconds(value: datetime) -> int:
    """Whole seconds since the epoch; a naive datetime counts as UTC."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return int(value.timestamp())


# --- structs, controls and commands -----------------------------------------------------------


class Compound:
    """Base of the generated structs, controls and commands: fields behind packing flags."""

    __slots__ = ()

    #: Dotted spec name: ``"message.transfer"``, ``"message.delivery-properties"``.
    NAME: ClassVar[str]
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    #: Octets of packing flags before the fields (0, 1, 2 or 4).
    PACK: ClassVar[int]

    def encode_fields(self, out: bytearray) -> None:
        """Append the packing flags and the present fields to *out*."""
        raise NotImplementedError

    @classmethod
    def decode_fields(cls, buf: ByteString, offset: int) -> tuple[Self, int]:
        """Read packing flags and fields at *offset*; return the instance and the new offset.

        Malformed input raises ``ValueError``, ``IndexError`` or ``struct.error`` (the framing
        layer turns them into :class:`~amqp_sansio.RemoteProtocolError`).
        """
        raise NotImplementedError


class Struct(Compound):
    """A struct: a field value (``reply-to``, ``xid``), a header segment entry
    (``delivery-properties``), an ``execution.result`` value, or ``session.header``."""

    __slots__ = ()

    #: Width of the size prefix in octets: 0 (none), 1, 2 or 4.
    SIZE: ClassVar[int]
    #: ``class_code << 8 | struct_code`` for coded structs, None for the others.
    CODE: ClassVar[int | None]

    def encode(self, out: bytearray) -> None:
        """Append the struct as a field value: size prefix, code (if coded), flags, fields."""
        raise NotImplementedError

    @classmethod
    def decode(cls, buf: ByteString, offset: int) -> tuple[Self, int]:
        """Read the struct written by :meth:`encode` (size prefix and code included)."""
        raise NotImplementedError


@final
@attrs.frozen(slots=True)
class UnknownStruct(Struct):
    """A coded struct (as in a header segment or a ``struct32``) whose code is not in the
    spec: ``data`` holds its packing flags and fields, forwarded unchanged when encoded."""

    NAME: ClassVar[str] = "unknown"
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = ()
    PACK: ClassVar[int] = 0
    SIZE: ClassVar[int] = 4
    CODE: ClassVar[int | None] = None

    code: int
    data: bytes

    def encode(self, out: bytearray) -> None:
        out += (len(self.data) + 2).to_bytes(4, "big")
        out += self.code.to_bytes(2, "big")
        out += self.data

    def encode_fields(self, out: bytearray) -> None:
        out += self.data


class Control(Compound):
    """A control (``connection.*``, ``session.*``): one control segment on track 0."""

    __slots__ = ()

    CLASS_CODE: ClassVar[int]
    CODE: ClassVar[int]
    #: ``CLASS_CODE << 8 | CODE``, the key of the generated ``CONTROLS`` table.
    INDEX: ClassVar[int]
    #: The roles that may send it (from the spec's ``<implement>`` roles).
    SENT_BY: ClassVar[frozenset[Role]]

    def encode(self, out: bytearray) -> None:
        """Append the control segment's payload: class code, control code, flags, fields."""
        raise NotImplementedError


class Command(Compound):
    """A command: a command segment on track 1 (then header and body segments for the commands
    that define them). Its id is implicit: the session counts commands."""

    __slots__ = ()

    CLASS_CODE: ClassVar[int]
    CODE: ClassVar[int]
    #: ``CLASS_CODE << 8 | CODE``, the key of the generated ``COMMANDS`` table.
    INDEX: ClassVar[int]
    SENT_BY: ClassVar[frozenset[Role]]
    #: The struct an ``execution.result`` for this command carries, or None.
    RESULT: ClassVar[type[Struct] | None]
    #: Whether header and body segments may follow (``message.transfer`` and a few others).
    SEGMENTS: ClassVar[bool]
    #: The struct types the header segment may hold.
    HEADER_ENTRIES: ClassVar[tuple[type[Struct], ...]]

    def encode(self, out: bytearray, sync: bool = False) -> None:
        """Append the command segment's payload: class code, command code, ``session.header``
        (with the *sync* bit), flags, fields."""
        raise NotImplementedError
