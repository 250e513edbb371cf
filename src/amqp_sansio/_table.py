"""The AMQP field-table codec: RabbitMQ's dialect in, RabbitMQ's dialect out.

Field tables carry ``client-properties``, ``server-properties``, ``x-*`` arguments and message
headers. The AMQP 0-9-1 spec and RabbitMQ disagree on several type codes (``interop.md`` §5); we
decode everything either side sends and encode only what RabbitMQ's own generator emits:

========  ==========================  ==========================================================
code      decoded as                  encoded from
========  ==========================  ==========================================================
``t``     ``bool``                    ``bool``
``b``     ``int`` (int8)              ``int`` in -128..127, :class:`Int8`
``B``     ``int`` (uint8)             :class:`UInt8`
``s``     ``int`` (int16, not a       ``int`` in -32768..32767, :class:`Int16`
          short string)
``U``     ``int`` (int16, spec only)  never
``u``     ``int`` (uint16)            :class:`UInt16`
``I``     ``int`` (int32)             other ``int`` in int32 range, :class:`Int32`
``i``     ``int`` (uint32)            :class:`UInt32`
``l``     ``int`` (int64)             other ``int`` in int64 range, :class:`Int64`
``L``     ``int`` (int64)             never
``f``     ``float``                   :class:`Float32` (``float`` is never narrowed to 32 bits)
``d``     ``float``                   ``float``, :class:`Float64`
``D``     ``decimal.Decimal``         ``decimal.Decimal`` (signed 32-bit value, scale 0..255)
``S``     ``str``, or ``bytes`` when  ``str``, :class:`LongString`
          not valid UTF-8
``x``     ``bytes``                   ``bytes``, ``bytearray``, ``memoryview``
``T``     aware UTC ``datetime``, or  ``datetime`` (naive means UTC), :class:`Timestamp`
          :class:`Timestamp` past
          year 9999
``F``     ``dict``                    any ``Mapping``
``A``     ``list``                    ``list``, ``tuple``
``V``     ``None``                    ``None``
========  ==========================  ==========================================================

Malformed input raises :class:`RemoteProtocolError` (502); a value that can't be encoded raises
:class:`LocalProtocolError` (502) and leaves the output buffer as it was. Nesting depth and entry
counts are capped while decoding and encoding, so hostile input costs bounded time and memory.

Both directions have an optional C accelerator, ``amqp_sansio._speedups``, built when the
package is installed with a C compiler at hand. It decodes well-formed tables of the common
types and hands everything else (every malformed table, ``A``, ``T``, ``D``, keys that are not
UTF-8) to the Python decoder below; it encodes dicts of ASCII keys and values of the exact
built-in types (``str``, ``bool``, ``int``, ``float``, ``bytes``, ``bytearray``, ``None``,
``dict``, ``list``, ``tuple``) and hands everything else (subclasses, the typed wrappers,
``Decimal``, ``datetime``, anything that can't be encoded) to the Python encoder. So both give
the same octets, values and errors. Setting the environment
variable ``AMQP_SANSIO_NO_EXTENSIONS`` to a non-empty value keeps to pure Python.
"""

from __future__ import annotations

import itertools
import os
import re
import struct
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, Context, Decimal
from typing import TYPE_CHECKING, Final, TypeAlias, Union, cast, final

import attrs

from ._errors import LocalProtocolError, RemoteProtocolError
from ._generated.reply_codes import ReplyCode

if TYPE_CHECKING:
    from ._speedups import Builder, TableDecoder, TableEncoder
    from ._util import Buffer

__all__ = [
    "MAX_TABLE_DEPTH",
    "MAX_TABLE_ENTRIES",
    "TYPES_0_8",
    "TYPES_0_9",
    "FieldArray",
    "FieldTable",
    "FieldValue",
    "Float32",
    "Float64",
    "Int8",
    "Int16",
    "Int32",
    "Int64",
    "LongString",
    "Timestamp",
    "TypedValue",
    "UInt8",
    "UInt16",
    "UInt32",
    "decode_table",
    "decode_table_entries",
    "encode_table",
    "encode_table_entries",
    "narrow_table",
]

#: How deep tables and arrays may nest; the outermost table is depth 0.
MAX_TABLE_DEPTH: Final = 32
#: How many entries one table (or items one array) may hold.
MAX_TABLE_ENTRIES: Final = 65536


# --- Typed values: force a wire type (the broker compares x-* arguments by type) ----------


@final
@attrs.frozen(slots=True)
class Int8:
    """An ``int`` sent as ``b`` (signed 8-bit)."""

    value: int


@final
@attrs.frozen(slots=True)
class UInt8:
    """An ``int`` sent as ``B`` (unsigned 8-bit)."""

    value: int


@final
@attrs.frozen(slots=True)
class Int16:
    """An ``int`` sent as ``s`` (signed 16-bit, RabbitMQ's meaning of ``s``)."""

    value: int


@final
@attrs.frozen(slots=True)
class UInt16:
    """An ``int`` sent as ``u`` (unsigned 16-bit)."""

    value: int


@final
@attrs.frozen(slots=True)
class Int32:
    """An ``int`` sent as ``I`` (signed 32-bit)."""

    value: int


@final
@attrs.frozen(slots=True)
class UInt32:
    """An ``int`` sent as ``i`` (unsigned 32-bit)."""

    value: int


@final
@attrs.frozen(slots=True)
class Int64:
    """An ``int`` sent as ``l`` (signed 64-bit), even when it would fit a smaller type."""

    value: int


@final
@attrs.frozen(slots=True)
class Float32:
    """A number sent as ``f`` (32-bit float; lossy for most values)."""

    value: float


@final
@attrs.frozen(slots=True)
class Float64:
    """A number sent as ``d`` (64-bit float), e.g. an ``int`` the peer expects as a double."""

    value: float


@final
@attrs.frozen(slots=True)
class LongString:
    """A payload sent as ``S`` (long string) even when it is binary; ``str`` is UTF-8 encoded."""

    value: bytes | str


@final
@attrs.frozen(slots=True)
class Timestamp:
    """Seconds since the epoch sent as ``T`` (unsigned 64-bit).

    Decoding returns this instead of a ``datetime`` when the value is past year 9999.
    """

    value: int


#: A value sent with a field type chosen by the caller rather than inferred from the Python type.
TypedValue: TypeAlias = (
    Int8
    | UInt8
    | Int16
    | UInt16
    | Int32
    | UInt32
    | Int64
    | Float32
    | Float64
    | LongString
    | Timestamp
)

# Union[] because "|" can't join the forward references at run time.
#: What a field table may hold: each Python type maps to one field type (RabbitMQ's dialect),
#: a :data:`TypedValue` chooses another.
FieldValue: TypeAlias = Union[
    bool, int, float, str, bytes, Decimal, datetime, "FieldTable", "FieldArray", TypedValue, None
]
#: A field table (``arguments``, ``headers``, client and server properties).
FieldTable: TypeAlias = dict[str, FieldValue]
#: A field array (``A``), a value inside a field table.
FieldArray: TypeAlias = list[FieldValue]


# --- Wire primitives ----------------------------------------------------------------------

_U32: Final = struct.Struct(">I")
_unpack_u32: Final = _U32.unpack_from
_pack_u32_into: Final = _U32.pack_into
_unpack_i8: Final = struct.Struct(">b").unpack_from
_unpack_i16: Final = struct.Struct(">h").unpack_from
_unpack_u16: Final = struct.Struct(">H").unpack_from
_unpack_i32: Final = struct.Struct(">i").unpack_from
_unpack_i64: Final = struct.Struct(">q").unpack_from
_unpack_u64: Final = struct.Struct(">Q").unpack_from
_unpack_f32: Final = struct.Struct(">f").unpack_from
_unpack_f64: Final = struct.Struct(">d").unpack_from
_unpack_decimal: Final = struct.Struct(">Bi").unpack_from

# Type octet and value in one pack call.
_pack_code_u32: Final = struct.Struct(">BI").pack  # S, x and the A/F size
_pack_b: Final = struct.Struct(">Bb").pack
_pack_s: Final = struct.Struct(">Bh").pack
_pack_I: Final = struct.Struct(">Bi").pack
_pack_l: Final = struct.Struct(">Bq").pack
_pack_d: Final = struct.Struct(">Bd").pack
_pack_f: Final = struct.Struct(">Bf").pack
_pack_D: Final = struct.Struct(">BBi").pack
_pack_T: Final = struct.Struct(">BQ").pack

_TRUE: Final = b"t\x01"
_FALSE: Final = b"t\x00"

#: Wrapper class -> (type octet, packer, lowest, highest).
_INT_WRAPPERS: Final[dict[type[object], tuple[int, struct.Struct, int, int]]] = {
    Int8: (0x62, struct.Struct(">Bb"), -0x80, 0x7F),
    UInt8: (0x42, struct.Struct(">BB"), 0, 0xFF),
    Int16: (0x73, struct.Struct(">Bh"), -0x8000, 0x7FFF),
    UInt16: (0x75, struct.Struct(">BH"), 0, 0xFFFF),
    Int32: (0x49, struct.Struct(">Bi"), -0x8000_0000, 0x7FFF_FFFF),
    UInt32: (0x69, struct.Struct(">BI"), 0, 0xFFFF_FFFF),
    Int64: (0x6C, struct.Struct(">Bq"), -0x8000_0000_0000_0000, 0x7FFF_FFFF_FFFF_FFFF),
    Timestamp: (0x54, struct.Struct(">BQ"), 0, 0xFFFF_FFFF_FFFF_FFFF),
}
_INT_WRAPPER_TYPES: Final = (Int8, UInt8, Int16, UInt16, Int32, UInt32, Int64, Timestamp)

# Exact whatever the caller's thread-local decimal context says.
_DECIMAL_CONTEXT: Final = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN)
_EPOCH_NAIVE: Final = datetime(1970, 1, 1)  # naive datetimes are taken as UTC
_EPOCH_UTC: Final = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_SECOND: Final = timedelta(seconds=1)
_OFFSET_IN_MESSAGE: Final = re.compile(r"(offset |ends at )(\d+)")
_FOREVER: Final = itertools.repeat(None)  # stateless, so one instance serves every loop
_UNCOUNTED_SIZE: Final = 2 * MAX_TABLE_ENTRIES + 1


# --- Decoding -----------------------------------------------------------------------------


def decode_table(buf: Buffer, offset: int, depth: int = 0) -> tuple[FieldTable, int]:
    """Decode the table whose u32 size is at *offset*; return it and the offset after it.

    *depth* is the nesting level of this table (0 for a method argument or a header).

    :raises RemoteProtocolError: (502) on malformed input or a table over the limits.
    """
    if type(buf) is memoryview:
        return _decode_copy(buf, offset, depth)
    # Straight-line over (buf, offset) in one function: a call per nesting level and none
    # per entry for the common types. Nested tables recurse after checking that they fit.
    try:
        (size,) = _unpack_u32(buf, offset)
    except struct.error:
        raise _error(
            f"truncated (no table size at offset {offset}, {max(len(buf) - offset, 0)} available)"
        ) from None
    pos = offset + 4
    end = pos + size
    if end > len(buf):
        raise _overrun(None, size, offset, len(buf) - pos)
    if depth > MAX_TABLE_DEPTH:
        raise _error(f"nested deeper than {MAX_TABLE_DEPTH} at offset {offset}")
    table: FieldTable = {}
    value: FieldValue
    key = ""
    try:
        # An entry takes at least 2 bytes, so only a table this large can hold too many;
        # the other tables loop over an endless iterator and pay nothing for the limit.
        for _ in _FOREVER if size <= _UNCOUNTED_SIZE else range(MAX_TABLE_ENTRIES):
            if pos >= end:
                break
            k = pos + 1
            pos = k + buf[pos]
            try:
                key = buf[k:pos].decode()
            except UnicodeDecodeError:
                # Keys are meant to be UTF-8; surrogateescape keeps a broken one intact as str
                # (the encoder reverses it).
                key = buf[k:pos].decode("utf-8", "surrogateescape")
            if pos >= end:
                raise _error(f"truncated entry for key {key!r} at offset {k - 1}")
            t = buf[pos]
            pos += 1
            # The codes peers send most, inline; the rest in _decode_value.
            if t == 0x53:  # S
                (n,) = _unpack_u32(buf, pos)
                pos += 4
                stop = pos + n
                if stop > end:
                    raise _overrun(key, n, pos - 4, end - pos)
                try:
                    value = buf[pos:stop].decode()
                except UnicodeDecodeError:
                    # Not UTF-8: hand over the bytes rather than lose them.
                    value = bytes(buf[pos:stop])
                pos = stop
            elif t == 0x62:  # b: what we and pamqp send for small ints
                (value,) = _unpack_i8(buf, pos)
                pos += 1
            elif t == 0x49:  # I: what pika sends for ints
                (value,) = _unpack_i32(buf, pos)
                pos += 4
            elif t == 0x74:  # t
                value = buf[pos] != 0
                pos += 1
            elif t == 0x6C:  # l: what RabbitMQ sends for ints
                (value,) = _unpack_i64(buf, pos)
                pos += 8
            elif t == 0x46:  # F
                (n,) = _unpack_u32(buf, pos)
                if pos + 4 + n > end:
                    raise _overrun(key, n, pos, end - pos - 4)
                value, pos = decode_table(buf, pos, depth + 1)
            else:
                value, pos = _decode_value(buf, pos, t, end, depth, key)
            table[key] = value
        else:
            if pos < end:
                raise _error(
                    f"more than {MAX_TABLE_ENTRIES} entries in the table at offset {offset}"
                )
    except (struct.error, IndexError):
        # unpack_from or buf[pos] ran off the buffer: pos still points at the value.
        raise _error(f"truncated value for key {key!r} at offset {pos}") from None
    if pos != end:
        raise _error(f"truncated value for key {key!r} (runs to offset {pos}, table ends at {end})")
    return table, end


#: The pure-Python decoder, whatever ``decode_table`` is bound to.
decode_table_py: Final = decode_table


def decode_table_entries(buf: Buffer, start: int, end: int) -> FieldTable:
    """Decode the entries in ``buf[start:end]``, a table without its size prefix (AMQPLAIN).

    :raises RemoteProtocolError: (502) on malformed input or a table over the limits.
    """
    if not 0 <= start <= end <= len(buf):
        raise _error(f"truncated (entries from offset {start} to {end}, buffer holds {len(buf)})")
    size = end - start
    # Rare (one SASL response per connection): give it a size prefix and decode that.
    table, _ = _decode_relocated(_U32.pack(size) + bytes(buf[start:end]), start - 4, 0)
    return table


def _decode_copy(buf: Buffer, offset: int, depth: int) -> tuple[FieldTable, int]:
    # memoryview slices have no .decode(); copying just this table is cheaper than decoding
    # every string with str(view, "utf-8").
    if len(buf) - offset < 4:
        raise _error(
            f"truncated (no table size at offset {offset}, {max(len(buf) - offset, 0)} available)"
        )
    (size,) = _unpack_u32(buf, offset)
    end = offset + 4 + size
    if end > len(buf):
        raise _overrun(None, size, offset, len(buf) - offset - 4)
    table, _ = _decode_relocated(bytes(buf[offset:end]), offset, depth)
    return table, end


def _decode_relocated(data: bytes, base: int, depth: int) -> tuple[FieldTable, int]:
    """Decode the table at the start of *data*, a copy of the caller's buffer from *base*."""
    try:
        return decode_table(data, 0, depth)
    except RemoteProtocolError as exc:
        if not base:
            raise
        # Report offsets in the caller's buffer. They all follow the key's repr, the last
        # quote in the message, so a key that looks like "offset 5" is left alone.
        text = exc.reply_text
        cut = max(text.rfind("'"), text.rfind('"')) + 1
        tail = _OFFSET_IN_MESSAGE.sub(lambda m: f"{m[1]}{int(m[2]) + base}", text[cut:])
        raise RemoteProtocolError(text[:cut] + tail, reply_code=ReplyCode.SYNTAX_ERROR) from None


def _decode_array(buf: bytes | bytearray, start: int, end: int, depth: int, key: str) -> FieldArray:
    if depth > MAX_TABLE_DEPTH:
        raise _error(f"nested deeper than {MAX_TABLE_DEPTH} at offset {start - 4}")
    items: FieldArray = []
    pos = start
    try:
        # An item takes at least 1 byte (see decode_table).
        for _ in _FOREVER if end - start <= MAX_TABLE_ENTRIES else range(MAX_TABLE_ENTRIES):
            if pos >= end:
                break
            t = buf[pos]
            value, pos = _decode_value(buf, pos + 1, t, end, depth, key)
            items.append(value)
        else:
            if pos < end:
                raise _error(
                    f"more than {MAX_TABLE_ENTRIES} items in the array at offset {start - 4}"
                )
    except (struct.error, IndexError):
        raise _error(f"truncated array item for key {key!r} at offset {pos}") from None
    if pos != end:
        raise _error(
            f"truncated array item for key {key!r} (runs to offset {pos}, array ends at {end})"
        )
    return items


def _decode_value(
    buf: bytes | bytearray, pos: int, t: int, end: int, depth: int, key: str
) -> tuple[FieldValue, int]:
    """Decode the value of type *t* at *pos*; *depth* is that of the enclosing container."""
    value: FieldValue
    if t == 0x46:  # F
        (n,) = _unpack_u32(buf, pos)
        if pos + 4 + n > end:
            raise _overrun(key, n, pos, end - pos - 4)
        return decode_table(buf, pos, depth + 1)
    if t == 0x53 or t == 0x41 or t == 0x78:  # S A x: u32 length first
        (n,) = _unpack_u32(buf, pos)
        pos += 4
        stop = pos + n
        if stop > end:
            raise _overrun(key, n, pos - 4, end - pos)
        if t == 0x53:
            try:
                value = buf[pos:stop].decode()
            except UnicodeDecodeError:
                value = bytes(buf[pos:stop])
        elif t == 0x41:
            value = _decode_array(buf, pos, stop, depth + 1, key)
        else:
            value = bytes(buf[pos:stop])
        return value, stop
    if t == 0x6C or t == 0x4C:  # l L: both signed 64-bit, as RabbitMQ reads them
        return _unpack_i64(buf, pos)[0], pos + 8
    if t == 0x62:  # b
        return _unpack_i8(buf, pos)[0], pos + 1
    if t == 0x49:  # I
        return _unpack_i32(buf, pos)[0], pos + 4
    if t == 0x74:  # t
        return buf[pos] != 0, pos + 1
    if t == 0x73 or t == 0x55:  # s U: int16 (s is RabbitMQ's, U the spec's)
        return _unpack_i16(buf, pos)[0], pos + 2
    if t == 0x54:  # T
        (seconds,) = _unpack_u64(buf, pos)
        try:
            value = datetime.fromtimestamp(seconds, UTC)
        except (OverflowError, ValueError, OSError):
            value = Timestamp(seconds)  # past year 9999: keep the number
        return value, pos + 8
    if t == 0x42:  # B
        return buf[pos], pos + 1
    if t == 0x75:  # u
        return _unpack_u16(buf, pos)[0], pos + 2
    if t == 0x69:  # i
        return _unpack_u32(buf, pos)[0], pos + 4
    if t == 0x64:  # d
        return _unpack_f64(buf, pos)[0], pos + 8
    if t == 0x66:  # f
        return _unpack_f32(buf, pos)[0], pos + 4
    if t == 0x44:  # D: u8 scale, then a signed value (RabbitMQ errata)
        scale, unscaled = _unpack_decimal(buf, pos)
        return Decimal(unscaled).scaleb(-scale, _DECIMAL_CONTEXT), pos + 5
    if t == 0x56:  # V
        return None, pos
    raise _error(f"unknown field type {chr(t)!r} for key {key!r} at offset {pos - 1}")


def _error(text: str) -> RemoteProtocolError:
    return RemoteProtocolError(f"field table: {text}", reply_code=ReplyCode.SYNTAX_ERROR)


def _overrun(key: str | None, size: int, offset: int, available: int) -> RemoteProtocolError:
    what = "truncated" if key is None else f"truncated value for key {key!r}"
    return _error(
        f"{what} (declares {size} bytes at offset {offset}, {max(available, 0)} available)"
    )


# --- Encoding -----------------------------------------------------------------------------


class _EncodeError(Exception):
    """Internal: carries the reason up while each level adds its key to the path."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path: list[object] = []  # innermost first

    def to_local(self) -> LocalProtocolError:
        if not self.path:
            return LocalProtocolError(
                f"field table: {self.reason}", reply_code=ReplyCode.SYNTAX_ERROR
            )
        path = self.path[::-1]
        where = repr(path[0]) + "".join(
            f"[{p}]" if isinstance(p, int) else f"[{p!r}]" for p in path[1:]
        )
        return LocalProtocolError(
            f"field table: {self.reason} for key {where}", reply_code=ReplyCode.SYNTAX_ERROR
        )


def encode_table(out: bytearray, table: Mapping[str, FieldValue] | None) -> None:
    """Append *table* to *out* as a u32 size and its entries; ``None`` or ``{}`` is 4 zero bytes.

    :raises LocalProtocolError: (502) when a key or value can't be encoded; *out* is unchanged.
    """
    start = len(out)
    out += b"\x00\x00\x00\x00"
    if not table:
        return
    try:
        if not isinstance(table, dict) and not isinstance(table, Mapping):
            raise _EncodeError(f"expected a mapping, not {type(table).__name__}")
        _encode_entries(out, table, 0)
        _pack_u32_into(out, start, len(out) - start - 4)
    except _EncodeError as exc:
        del out[start:]
        raise exc.to_local() from None
    except BaseException:
        del out[start:]
        raise


def encode_table_entries(out: bytearray, table: Mapping[str, FieldValue]) -> None:
    """Append the entries of *table* without a size prefix (AMQPLAIN's SASL response).

    :raises LocalProtocolError: (502) when a key or value can't be encoded; *out* is unchanged.
    """
    start = len(out)
    try:
        if not isinstance(table, dict) and not isinstance(table, Mapping):
            raise _EncodeError(f"expected a mapping, not {type(table).__name__}")
        _encode_entries(out, table, 0)
    except _EncodeError as exc:
        del out[start:]
        raise exc.to_local() from None
    except BaseException:
        del out[start:]
        raise


def _encode_entries(out: bytearray, table: Mapping[str, object], depth: int) -> None:
    if depth > MAX_TABLE_DEPTH:
        raise _EncodeError(f"nested deeper than {MAX_TABLE_DEPTH}")
    if len(table) > MAX_TABLE_ENTRIES:
        raise _EncodeError(f"more than {MAX_TABLE_ENTRIES} entries ({len(table)})")
    key: object = None
    value: object = None
    try:
        for key, value in table.items():
            try:
                kb = key.encode()
                out.append(len(kb))  # ValueError past 255
            except (AttributeError, ValueError):  # incl. UnicodeEncodeError
                kb = _encode_key_slowly(out, key)
            out += kb
            # The common cases inline; bool before int, since bool is an int.
            if isinstance(value, str):
                vb = value.encode()
                out += _pack_code_u32(0x53, len(vb))
                out += vb
            elif isinstance(value, bool):
                out += _TRUE if value else _FALSE
            elif isinstance(value, int):
                # The smallest signed type RabbitMQ emits itself (never u i L U; interop.md §5).
                if -0x80 <= value <= 0x7F:
                    out += _pack_b(0x62, value)
                elif -0x8000 <= value <= 0x7FFF:
                    out += _pack_s(0x73, value)
                elif -0x8000_0000 <= value <= 0x7FFF_FFFF:
                    out += _pack_I(0x49, value)
                else:
                    _encode_long(out, value)
            else:
                _encode_value(out, value, depth)
    except _EncodeError as exc:
        exc.path.append(key)
        raise
    except (struct.error, OverflowError, ValueError) as exc:  # incl. UnicodeEncodeError
        err = _EncodeError(f"{type(value).__name__} value can't be encoded ({exc})")
        err.path.append(key)
        raise err from None


def _encode_key_slowly(out: bytearray, key: object) -> bytes:
    """Append the length of *key* and return its bytes, or say why it can't be a key."""
    if not isinstance(key, str):
        raise _EncodeError(f"key of type {type(key).__name__} (keys are str)")
    try:
        # A key the decoder read with surrogateescape goes back as the same bytes.
        kb = key.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raise _EncodeError("key is not encodable as UTF-8") from None
    if len(kb) > 255:
        raise _EncodeError(f"key of {len(kb)} UTF-8 bytes (a short string holds 255)")
    out.append(len(kb))
    return kb


def _encode_array(out: bytearray, items: list[object] | tuple[object, ...], depth: int) -> None:
    if depth > MAX_TABLE_DEPTH:
        raise _EncodeError(f"nested deeper than {MAX_TABLE_DEPTH}")
    if len(items) > MAX_TABLE_ENTRIES:
        raise _EncodeError(f"more than {MAX_TABLE_ENTRIES} array items ({len(items)})")
    index = 0
    value: object = None
    try:
        for index, value in enumerate(items):  # noqa: B007 - index is read by the handlers
            _encode_value(out, value, depth)
    except _EncodeError as exc:
        exc.path.append(index)
        raise
    except (struct.error, OverflowError, ValueError) as exc:
        err = _EncodeError(f"{type(value).__name__} value can't be encoded ({exc})")
        err.path.append(index)
        raise err from None


def _encode_long(out: bytearray, value: int) -> None:
    if -0x8000_0000_0000_0000 <= value <= 0x7FFF_FFFF_FFFF_FFFF:
        out += _pack_l(0x6C, value)
    else:
        raise _EncodeError(f"int of {value.bit_length()} bits does not fit int64")


def _encode_value(out: bytearray, value: object, depth: int) -> None:
    """Append type octet and value; *depth* is that of the enclosing container."""
    if isinstance(value, str):
        vb = value.encode()
        out += _pack_code_u32(0x53, len(vb))
        out += vb
    elif isinstance(value, bool):
        out += _TRUE if value else _FALSE
    elif isinstance(value, int):
        if -0x80 <= value <= 0x7F:
            out += _pack_b(0x62, value)
        elif -0x8000 <= value <= 0x7FFF:
            out += _pack_s(0x73, value)
        elif -0x8000_0000 <= value <= 0x7FFF_FFFF:
            out += _pack_I(0x49, value)
        else:
            _encode_long(out, value)
    elif isinstance(value, dict):
        _encode_nested_table(out, value, depth)
    elif isinstance(value, (list, tuple)):
        start = len(out)
        out += b"A\x00\x00\x00\x00"
        _encode_array(out, value, depth + 1)
        _pack_u32_into(out, start + 1, len(out) - start - 5)
    elif value is None:
        out.append(0x56)
    elif isinstance(value, float):
        out += _pack_d(0x64, value)
    elif isinstance(value, (bytes, bytearray)):
        out += _pack_code_u32(0x78, len(value))
        out += value
    elif isinstance(value, memoryview):
        vb = value.tobytes()
        out += _pack_code_u32(0x78, len(vb))
        out += vb
    elif isinstance(value, Decimal):
        _encode_decimal(out, value)
    elif isinstance(value, datetime):
        _encode_datetime(out, value)
    elif isinstance(value, _INT_WRAPPER_TYPES):
        code, packer, lo, hi = _INT_WRAPPERS[type(value)]
        v: object = value.value  # typed int, but callers may not run mypy
        if not isinstance(v, int) or not lo <= v <= hi:
            raise _EncodeError(f"{type(value).__name__} value {_describe(v)} is outside {lo}..{hi}")
        out += packer.pack(code, v)
    elif isinstance(value, LongString):
        raw: object = value.value
        if isinstance(raw, str):
            vb = raw.encode()
        elif isinstance(raw, (bytes, bytearray, memoryview)):
            vb = bytes(raw)
        else:
            raise _EncodeError(f"LongString value of type {type(raw).__name__}")
        out += _pack_code_u32(0x53, len(vb))
        out += vb
    elif isinstance(value, Float64):
        v64: object = value.value
        if not isinstance(v64, (int, float)):
            raise _EncodeError(f"Float64 value of type {type(v64).__name__}")
        out += _pack_d(0x64, v64)
    elif isinstance(value, Float32):
        v32: object = value.value
        if not isinstance(v32, (int, float)):
            raise _EncodeError(f"Float32 value of type {type(v32).__name__}")
        try:
            out += _pack_f(0x66, v32)
        except OverflowError:
            raise _EncodeError(f"Float32 value {v32!r} is outside the float32 range") from None
    elif isinstance(value, Mapping):
        _encode_nested_table(out, value, depth)
    else:
        raise _EncodeError(f"unsupported type {type(value).__name__}")


def _encode_nested_table(out: bytearray, table: Mapping[str, object], depth: int) -> None:
    start = len(out)
    out += b"F\x00\x00\x00\x00"
    _encode_entries(out, table, depth + 1)
    _pack_u32_into(out, start + 1, len(out) - start - 5)


def _encode_decimal(out: bytearray, value: Decimal) -> None:
    parts = _decimal_parts(value)
    if parts is None:
        if not value.is_finite():
            raise _EncodeError(f"Decimal {value} has no AMQP encoding")
        # Trailing zeros may be all that is in the way: 1.5000000000 is 15 at scale 1.
        parts = _decimal_parts(value.normalize(_DECIMAL_CONTEXT))
        if parts is None:
            raise _EncodeError(
                f"Decimal {value} does not fit a signed 32-bit value with a scale of 0..255"
            )
    out += _pack_D(0x44, *parts)


def _decimal_parts(value: Decimal) -> tuple[int, int] | None:
    """``(scale, unscaled)`` with ``value == unscaled * 10**-scale``, or None if out of range."""
    exponent = value.as_tuple().exponent
    if not isinstance(exponent, int):  # NaN, sNaN, Infinity
        return None
    if value and value.adjusted() > 9:  # at least 10**10: skip int() of a huge number
        return None
    scale = -exponent if exponent < 0 else 0
    if scale > 255:
        return None
    unscaled = int(value.scaleb(scale, _DECIMAL_CONTEXT))
    if not -0x8000_0000 <= unscaled <= 0x7FFF_FFFF:
        return None
    return scale, unscaled


def _encode_datetime(out: bytearray, value: datetime) -> None:
    if value.tzinfo is None or value.utcoffset() is None:
        seconds = (value - _EPOCH_NAIVE) // _ONE_SECOND
    else:
        seconds = (value - _EPOCH_UTC) // _ONE_SECOND
    if seconds < 0:
        raise _EncodeError(f"datetime {value.isoformat()} is before 1970 (timestamps are unsigned)")
    out += _pack_T(0x54, seconds)  # sub-second precision is truncated


def _describe(value: object) -> str:
    # repr() of a huge int raises ValueError past sys.get_int_max_str_digits().
    if isinstance(value, int) and value.bit_length() > 64:
        return f"<int of {value.bit_length()} bits>"
    return repr(value)


# --- Older versions' tables ---------------------------------------------------------------

#: The field-value types the AMQP 0-8 spec defines (``S`` long string, ``I`` signed 32-bit,
#: ``D`` decimal, ``T`` timestamp, ``F`` nested table), and 0-9's, which adds ``V`` (void).
TYPES_0_8: Final = frozenset("SIDTF")
TYPES_0_9: Final = frozenset("SIDTFV")


def narrow_table(
    table: Mapping[str, FieldValue], types: frozenset[str], version: str, what: str
) -> FieldTable:
    """*table* with its values made to encode as the field types *types* only.

    A version older than 0-9-1 defines fewer field types (:data:`TYPES_0_8`,
    :data:`TYPES_0_9`): an ``int`` becomes :class:`Int32` (``I``), and ``str``, ``Decimal``,
    ``datetime``, mappings and ``None`` (only where ``V`` is defined) keep their types; any other
    value (``bool``, ``float``, ``bytes``, lists, the other typed values) has no encoding there.

    :raises LocalProtocolError: (502) a value has no encoding in *version*, named with *what*
        (``"queue.declare arguments"``) and the key path.
    """
    try:
        return _narrow_entries(table, types, 0)
    except _EncodeError as exc:
        path = exc.path[::-1]
        where = "".join(f"[{p!r}]" for p in path)
        allowed = " ".join(sorted(types, key="SIDTFV".index))
        raise LocalProtocolError(
            f"{what}{where}: {exc.reason}; AMQP {version} field tables define only {allowed}",
            reply_code=ReplyCode.SYNTAX_ERROR,
        ) from None


def _narrow_entries(table: Mapping[str, object], types: frozenset[str], depth: int) -> FieldTable:
    if depth > MAX_TABLE_DEPTH:
        raise _EncodeError(f"nested deeper than {MAX_TABLE_DEPTH}")
    out: FieldTable = {}
    key: object = None
    try:
        for key, value in table.items():
            if not isinstance(key, str):
                raise _EncodeError(f"key of type {type(key).__name__} (keys are str)")
            out[key] = _narrow_value(value, types, depth)
    except _EncodeError as exc:
        exc.path.append(key)
        raise
    return out


def _narrow_value(value: object, types: frozenset[str], depth: int) -> FieldValue:
    code: str | None = None
    if isinstance(value, (str, LongString)):
        code = "S"
    elif isinstance(value, bool):
        code = "t"
    elif isinstance(value, int) and "I" in types:
        if -0x8000_0000 <= value <= 0x7FFF_FFFF:
            return Int32(value)
        raise _EncodeError(f"int {_describe(value)} does not fit I (signed 32-bit)")
    elif isinstance(value, Int32):
        code = "I"
    elif isinstance(value, Decimal):
        code = "D"
    elif isinstance(value, (datetime, Timestamp)):
        code = "T"
    elif value is None:
        code = "V"
    elif isinstance(value, Mapping):
        if "F" in types:
            return _narrow_entries(value, types, depth + 1)
        code = "F"
    if code is not None and code in types:
        return cast("FieldValue", value)  # one of the types tested above
    raise _EncodeError(f"a {type(value).__name__} value has no field type")


#: The pure-Python encoder, whatever ``encode_table`` is bound to.
encode_table_py: Final = encode_table


@final
@attrs.frozen
class Speedups:
    """The functions of the C accelerator, ``amqp_sansio._speedups``."""

    decode_table: TableDecoder
    encode_table: TableEncoder
    #: Decodes a generated class straight into a new instance: the ``decode`` of generated
    #: method and properties classes (see ``_method.install_c_decoder``).
    builder: type[Builder[object]]


#: What ``_speedups.c`` says its ``VERSION`` is: the interface these sources expect.
_SPEEDUPS_VERSION: Final = 5


def _load_speedups() -> Speedups | None:
    if os.environ.get("AMQP_SANSIO_NO_EXTENSIONS"):
        return None
    try:
        from . import _speedups
    except ImportError:
        return None
    if (_speedups.VERSION, _speedups.MAX_TABLE_DEPTH, _speedups.MAX_TABLE_ENTRIES) != (
        _SPEEDUPS_VERSION,
        MAX_TABLE_DEPTH,
        MAX_TABLE_ENTRIES,
    ):
        return None  # built from other sources than these: don't trust it
    _speedups.set_fallbacks(decode_table_py, encode_table_py)
    return Speedups(
        _speedups.decode_table,
        _speedups.encode_table,
        _speedups.Builder,
    )


#: The C accelerator, or None: not built, or turned off by ``AMQP_SANSIO_NO_EXTENSIONS``.
speedups: Final = _load_speedups()
if speedups is not None:
    decode_table = speedups.decode_table  # nested tables recurse through this name too
    encode_table = speedups.encode_table
