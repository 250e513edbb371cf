"""The rows the source produces: Spark's schema, the identical Arrow schema, and the Arrow
record batches built from received messages.

Spark 4.3 checks that a reader's ``pyarrow.RecordBatch`` has *exactly* the Arrow schema it
derives from the Spark schema (types and nullability), so both are written out here side by
side, and a unit test compares them with Spark's own conversion.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Final

import pyarrow as pa
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from amqp_sansio import (
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
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from amqp_sansio import FieldValue
    from amqp_sansio.client import Message

__all__ = [
    "PROPERTY_FIELDS",
    "SOURCE_COLUMNS",
    "OutputColumn",
    "RecordBatchBuilder",
    "build_record_batch",
    "header_text",
    "headers_json",
    "output_columns",
    "source_schema",
]

STREAM_OFFSET_HEADER: Final = "x-stream-offset"

#: The fields of the ``properties`` struct (basic properties except headers and timestamp,
#: which have their own columns, and the reserved cluster-id). Integers are Spark INT.
PROPERTY_FIELDS: Final = (
    ("content_type", "string"),
    ("content_encoding", "string"),
    ("delivery_mode", "int"),
    ("priority", "int"),
    ("correlation_id", "string"),
    ("reply_to", "string"),
    ("expiration", "string"),
    ("message_id", "string"),
    ("type", "string"),
    ("user_id", "string"),
    ("app_id", "string"),
)


def _spark_property_struct() -> StructType:
    return StructType(
        [
            StructField(name, IntegerType() if kind == "int" else StringType(), True)
            for name, kind in PROPERTY_FIELDS
        ]
    )


def _arrow_property_struct() -> pa.DataType:
    return pa.struct(
        [
            pa.field(name, pa.int32() if kind == "int" else pa.string(), nullable=True)
            for name, kind in PROPERTY_FIELDS
        ]
    )


def _spark_types() -> dict[str, tuple[DataType, bool]]:
    """Column name -> (Spark type, nullable), in output order."""
    return {
        "body": (BinaryType(), False),
        "routing_key": (StringType(), True),
        "exchange": (StringType(), True),
        "queue": (StringType(), True),
        "stream_offset": (LongType(), True),
        "delivery_tag": (LongType(), True),
        "redelivered": (BooleanType(), True),
        "timestamp": (TimestampType(), True),
        "headers": (MapType(StringType(), StringType(), True), True),
        "properties": (_spark_property_struct(), True),
        "headers_json": (StringType(), True),
    }


def _arrow_type(name: str) -> pa.DataType:
    if name == "body":
        return pa.binary()
    if name in ("routing_key", "exchange", "queue", "headers_json"):
        return pa.string()
    if name in ("stream_offset", "delivery_tag"):
        return pa.int64()
    if name == "redelivered":
        return pa.bool_()
    if name == "timestamp":
        return pa.timestamp("us", tz="UTC")
    if name == "headers":
        return pa.map_(pa.string(), pa.string())
    if name == "properties":
        return _arrow_property_struct()
    raise KeyError(name)


#: The default columns, in order; ``headers_json`` is added by ``includeHeadersJson=true``.
SOURCE_COLUMNS: Final = (
    "body",
    "routing_key",
    "exchange",
    "queue",
    "stream_offset",
    "delivery_tag",
    "redelivered",
    "timestamp",
    "headers",
    "properties",
)


def source_schema(include_headers_json: bool) -> StructType:
    """The schema ``spark.read(Stream).format("amqp")`` produces when none is given."""
    types = _spark_types()
    names = SOURCE_COLUMNS + (("headers_json",) if include_headers_json else ())
    return StructType([StructField(name, *types[name]) for name in names])


@dataclass(frozen=True)
class OutputColumn:
    """One column the reader fills: a name from the catalogue and its nullability."""

    name: str
    nullable: bool


def output_columns(schema: StructType) -> tuple[OutputColumn, ...]:
    """Check a (possibly user-given) schema against the catalogue; the columns to fill.

    A user schema may pick any subset of the columns, in any order, with the documented
    types; the reader then fills only those.
    """
    types = _spark_types()
    columns: list[OutputColumn] = []
    for spark_field in schema.fields:
        name = spark_field.name
        if name not in types:
            raise ValueError(
                f"column {name!r} is not produced by the amqp source (it produces: "
                f"{', '.join(types)})"
            )
        expected, nullable = types[name]
        if spark_field.dataType != expected:
            raise ValueError(
                f"column {name!r} must have type {expected.simpleString()}, not "
                f"{spark_field.dataType.simpleString()}"
            )
        if nullable and not spark_field.nullable:
            raise ValueError(f"column {name!r} can be null; declare it nullable")
        columns.append(OutputColumn(name, spark_field.nullable))
    if not columns:
        raise ValueError("the schema selects no column")
    return tuple(columns)


def arrow_schema(columns: Sequence[OutputColumn]) -> pa.Schema:
    """The Arrow schema Spark derives from the same columns (``to_arrow_schema``, UTC)."""
    return pa.schema([pa.field(c.name, _arrow_type(c.name), nullable=c.nullable) for c in columns])


# --- header values ---------------------------------------------------------------------


def _jsonable(value: FieldValue) -> object:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else str(value)
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_jsonable(item) for item in value]
    if isinstance(value, Int8 | UInt8 | Int16 | UInt16 | Int32 | UInt32 | Int64 | Timestamp):
        return value.value
    if isinstance(value, Float32 | Float64):
        return _jsonable(value.value)
    if isinstance(value, LongString):
        return _jsonable(value.value)
    raise TypeError(f"not a field-table value: {type(value).__name__}")


def header_text(value: FieldValue) -> str | None:
    """A header value as the ``headers`` map shows it (lossy on purpose: one string type).

    Strings stay as they are; numbers and booleans are written as in JSON (``true``);
    timestamps in ISO 8601; byte strings as UTF-8 text when they are, else base64; nested
    tables and arrays as JSON. ``None`` (void) stays null.
    """
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return base64.b64encode(value).decode("ascii")
    plain = _jsonable(value)
    if isinstance(plain, str):
        return plain
    return json.dumps(plain, separators=(",", ":"), ensure_ascii=False)


def headers_json(headers: Mapping[str, FieldValue] | None) -> str | None:
    """All headers as one JSON object, keeping numbers, booleans, nesting and null; bytes
    that are not UTF-8 become ``{"base64": "..."}``. None when the message has no headers."""
    if headers is None:
        return None
    return json.dumps(
        {key: _jsonable(value) for key, value in headers.items()},
        separators=(",", ":"),
        ensure_ascii=False,
    )


# --- record batches --------------------------------------------------------------------

_MAX_MICROS: Final = 2**63 - 1


def _micros(seconds: int | None) -> int | None:
    if seconds is None:
        return None
    micros = seconds * 1_000_000
    return micros if -_MAX_MICROS <= micros <= _MAX_MICROS else None


def _header_pairs(headers: Mapping[str, FieldValue] | None) -> list[tuple[str, str | None]] | None:
    return None if headers is None else [(k, header_text(v)) for k, v in headers.items()]


#: How each plain column's value is taken from a (queue, message) row.
_EXTRACTORS: Final[Mapping[str, Callable[[str, Message], object]]] = {
    "body": lambda queue, message: message.body,
    "routing_key": lambda queue, message: message.routing_key,
    "exchange": lambda queue, message: message.exchange,
    "queue": lambda queue, message: queue,
    "delivery_tag": lambda queue, message: message.delivery_tag,
    "redelivered": lambda queue, message: message.redelivered,
    "timestamp": lambda queue, message: _micros(message.properties.timestamp),
    "headers": lambda queue, message: _header_pairs(message.properties.headers),
    "headers_json": lambda queue, message: headers_json(message.properties.headers),
}


class RecordBatchBuilder:
    """Rows of one record batch, kept as column values while messages arrive.

    A message is taken apart on :meth:`append`: only the selected columns' values are kept
    (bytes, strings and ints, which the garbage collector does not track). Holding ten
    thousand messages instead made every young collection walk them all, a third of a
    stream read's CPU time.
    """

    def __init__(self, columns: Sequence[OutputColumn]) -> None:
        self._schema = arrow_schema(columns)
        self._names = tuple(column.name for column in columns)
        for name in self._names:
            if name not in _EXTRACTORS and name not in ("stream_offset", "properties"):
                raise KeyError(name)
        self._values: dict[str, list[object]] = {}
        self._fill: list[tuple[Callable[[object], None], Callable[[str, Message], object]]] = []
        self._offsets: list[object] | None = None
        self._properties: list[tuple[Callable[[object], None], str]] = []
        self._rows = 0
        self._reset()

    def __len__(self) -> int:
        return self._rows

    def _reset(self) -> None:
        self._values = {name: [] for name in self._names}
        self._fill = [
            (self._values[name].append, _EXTRACTORS[name])
            for name in self._names
            if name in _EXTRACTORS
        ]
        self._offsets = self._values.get("stream_offset")
        self._properties = []
        if "properties" in self._values:
            for field, _ in PROPERTY_FIELDS:
                values: list[object] = []
                self._values[f"properties.{field}"] = values
                self._properties.append((values.append, field))
        self._rows = 0

    def append(self, queue: str, message: Message, stream_offset: int | None = None) -> None:
        """Add one row; ``stream_offset`` saves reading it from the headers again."""
        for put, extract in self._fill:
            put(extract(queue, message))
        if self._offsets is not None:
            self._offsets.append(message.stream_offset if stream_offset is None else stream_offset)
        if self._properties:
            properties = message.properties
            for put, field in self._properties:
                put(getattr(properties, field))
        self._rows += 1

    def build(self) -> pa.RecordBatch:
        """The rows appended since the last build, with exactly :func:`arrow_schema`."""
        arrays: list[pa.Array] = []
        for field in self._schema:
            if field.name == "properties":
                children = [
                    pa.array(
                        self._values[f"properties.{name}"],
                        type=pa.int32() if kind == "int" else pa.string(),
                    )
                    for name, kind in PROPERTY_FIELDS
                ]
                arrays.append(pa.StructArray.from_arrays(children, fields=list(field.type)))
            else:
                arrays.append(pa.array(self._values[field.name], type=field.type))
        self._reset()
        return pa.RecordBatch.from_arrays(arrays, schema=self._schema)


def build_record_batch(
    columns: Sequence[OutputColumn], rows: Sequence[tuple[str, Message]]
) -> pa.RecordBatch:
    """One record batch of ``(queue, message)`` rows with exactly :func:`arrow_schema`."""
    builder = RecordBatchBuilder(columns)
    for queue, message in rows:
        builder.append(queue, message)
    return builder.build()
