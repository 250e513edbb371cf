"""The sink: every Spark task publishes its rows with publisher confirms.

Per task: one connection, one channel in confirm mode, at most ``maxInFlight`` publishes
unconfirmed. A nack, or a ``basic.return`` of a mandatory publish, fails the task with a message
naming the exchange and routing key. The guarantee is at-least-once: Spark retries failed
tasks and replays uncommitted micro-batches, and nothing already confirmed can be withdrawn;
``messageIdMode=deterministic`` gives every row a ``message_id`` that is the same on every
retry, so consumers can drop the duplicates.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Final

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestampType,
)

from amqp_sansio import BasicProperties
from amqp_sansio.client import MessageReturnedError, PublishNackedError

from ._compat import DataSourceStreamArrowWriter
from ._connections import open_connection
from ._schema import PROPERTY_FIELDS

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    import pyarrow as pa

    from amqp_sansio import FieldTable
    from amqp_sansio.client import ConnectionParameters

    from ._options import AmqpOptions, SinkOptions

__all__ = [
    "AmqpBatchWriter",
    "AmqpStreamWriter",
    "PublishedMessages",
    "WritePlan",
    "plan_write",
]

logger = logging.getLogger("amqp_spark")

_INT_PROPERTIES: Final = frozenset(name for name, kind in PROPERTY_FIELDS if kind == "int")
_PROPERTY_NAMES: Final = tuple(name for name, _ in PROPERTY_FIELDS)
# Columns of the amqp source that say where a message came from: a pipeline reading from one
# queue and writing to an exchange may keep them, they are not published.
_IGNORED_SOURCE_COLUMNS: Final = frozenset(
    {"queue", "stream_offset", "delivery_tag", "redelivered", "headers_json"}
)
_HEADERS_TYPES: Final = (
    MapType(StringType(), StringType(), True),
    MapType(StringType(), StringType(), False),
)


@dataclass(frozen=True)
class WritePlan:
    """Which input columns feed which part of a message (checked on the driver)."""

    body_is_text: bool
    routing_key_column: bool
    exchange_column: bool
    headers_column: bool
    timestamp_column: bool
    #: basic properties taken from top-level columns of the same name
    flat_properties: tuple[str, ...]
    #: basic properties taken from fields of a ``properties`` struct column
    struct_properties: tuple[str, ...]


def _property_type_ok(name: str, data_type: DataType) -> bool:
    if name in _INT_PROPERTIES:
        return isinstance(data_type, IntegerType | LongType)
    return isinstance(data_type, StringType)


def _expected_property_type(name: str) -> str:
    return "int or bigint" if name in _INT_PROPERTIES else "string"


def plan_write(schema: StructType, sink: SinkOptions) -> WritePlan:
    """Check the DataFrame's columns for publishing; raise ``ValueError`` naming the column.

    ``body`` (binary or string) is required; ``routing_key``, ``exchange`` (string),
    ``headers`` (map<string,string>), ``timestamp`` (timestamp), a ``properties`` struct and
    top-level property columns (``message_id``, ``content_type``, ...) are optional.
    """
    fields = {f.name: f.dataType for f in schema.fields}
    if "body" not in fields:
        raise ValueError(
            "the amqp sink needs a 'body' column (binary or string); columns are: "
            + ", ".join(fields)
        )
    if not isinstance(fields["body"], BinaryType | StringType):
        raise ValueError(
            f"column 'body' must be binary or string, not {fields['body'].simpleString()}"
        )
    for name in ("routing_key", "exchange"):
        if name in fields and not isinstance(fields[name], StringType):
            raise ValueError(f"column {name!r} must be string, not {fields[name].simpleString()}")
    default_exchange = "exchange" not in fields and not sink.exchange
    if default_exchange and "routing_key" not in fields and sink.routing_key is None:
        # the default exchange routes by routing key (= queue name) only
        raise ValueError(
            "the amqp sink needs a destination: set the routingKey option (a queue name "
            "for the default exchange) or exchange, or add a 'routing_key' column"
        )
    if "headers" in fields and fields["headers"] not in _HEADERS_TYPES:
        raise ValueError(
            f"column 'headers' must be map<string,string>, not {fields['headers'].simpleString()}"
        )
    if "timestamp" in fields and not isinstance(fields["timestamp"], TimestampType):
        raise ValueError(
            f"column 'timestamp' must be timestamp, not {fields['timestamp'].simpleString()}"
        )
    flat: list[str] = []
    for name in _PROPERTY_NAMES:
        if name in fields:
            if not _property_type_ok(name, fields[name]):
                raise ValueError(
                    f"column {name!r} must be {_expected_property_type(name)}, not "
                    f"{fields[name].simpleString()}"
                )
            flat.append(name)
    nested: list[str] = []
    if "properties" in fields:
        struct = fields["properties"]
        if not isinstance(struct, StructType):
            raise ValueError(f"column 'properties' must be a struct, not {struct.simpleString()}")
        for sub in struct.fields:
            if sub.name not in _PROPERTY_NAMES:
                raise ValueError(
                    f"properties.{sub.name} is not a message property (known: "
                    f"{', '.join(_PROPERTY_NAMES)})"
                )
            if not _property_type_ok(sub.name, sub.dataType):
                raise ValueError(
                    f"properties.{sub.name} must be {_expected_property_type(sub.name)}, not "
                    f"{sub.dataType.simpleString()}"
                )
            if sub.name not in flat:  # a top-level column wins
                nested.append(sub.name)
    known = {"body", "routing_key", "exchange", "headers", "timestamp", "properties"}
    known.update(_PROPERTY_NAMES)
    known.update(_IGNORED_SOURCE_COLUMNS)
    unknown = [name for name in fields if name not in known]
    if unknown:
        raise ValueError(
            f"column(s) {', '.join(unknown)} have no place in a message; select body and "
            "optionally routing_key, exchange, headers, timestamp, properties or property "
            "columns (message_id, content_type, ...)"
        )
    return WritePlan(
        body_is_text=isinstance(fields["body"], StringType),
        routing_key_column="routing_key" in fields,
        exchange_column="exchange" in fields,
        headers_column="headers" in fields,
        timestamp_column="timestamp" in fields,
        flat_properties=tuple(flat),
        struct_properties=tuple(nested),
    )


@dataclass
class PublishedMessages(WriterCommitMessage):
    """What one task reports to the driver: how many messages the broker confirmed."""

    count: int
    partition_id: int
    attempt: int


def _describe_failure(exc: Exception, exchange: str, routing_key: str) -> str:
    if isinstance(exc, MessageReturnedError):
        returned = exc.message
        return (
            f"the broker returned a mandatory message as unroutable ({exc.reply_code} "
            f"{exc.reply_text}): exchange {returned.exchange!r}, routing key "
            f"{returned.routing_key!r}; "
            "bind a queue for it or set mandatory=false"
        )
    if isinstance(exc, PublishNackedError):
        return (
            f"the broker nacked publish {exc.publish_number} (exchange {exchange!r}, routing "
            f"key {routing_key!r}): it could not take the message"
        )
    if isinstance(exc, TimeoutError):
        return f"the broker did not confirm in time (confirmTimeoutMs): {exc}"
    return str(exc)


class PublishError(RuntimeError):
    """A message could not be published; the Spark task fails with this."""


def _task_identity() -> tuple[int, int, str | None, str | None]:
    """(partition id, attempt, streaming batch id, streaming query id) of the current task."""
    context = TaskContext.get()
    if context is None:
        return 0, 0, None, None
    return (
        context.partitionId(),
        context.attemptNumber(),
        context.getLocalProperty("streaming.sql.batchId"),
        context.getLocalProperty("sql.streaming.queryId"),
    )


def publish_batches(
    params: ConnectionParameters,
    sink: SinkOptions,
    plan: WritePlan,
    batches: Iterator[pa.RecordBatch],
    message_id_prefix: str | None,
    partition_id: int,
) -> int:
    """Publish every row; return the number of confirmed messages or raise PublishError."""
    published = 0
    exchange = sink.exchange
    routing_key = sink.routing_key or ""
    with (
        open_connection(params, f"writer p{partition_id}") as connection,
        connection.channel() as channel,
    ):
        publisher = channel.publisher(window=sink.max_in_flight) if sink.confirm else None
        row_index = 0
        try:
            for batch in batches:
                for body, exchange, routing_key, properties in _messages(
                    batch, plan, sink, message_id_prefix, row_index
                ):
                    if publisher is not None:
                        publisher.publish(
                            body,
                            exchange=exchange,
                            routing_key=routing_key,
                            properties=properties,
                            mandatory=sink.mandatory,
                            timeout=sink.confirm_timeout,
                        )
                        if publisher.failed:
                            raise publisher.take_failures()[0]
                    else:
                        channel.basic_publish(
                            body,
                            exchange=exchange,
                            routing_key=routing_key,
                            properties=properties,
                            mandatory=sink.mandatory,
                        )
                    published += 1
                row_index += batch.num_rows
            if publisher is not None:
                publisher.wait_for_confirms(sink.confirm_timeout)
                failures = publisher.take_failures()
                if failures:
                    raise failures[0]
        except (MessageReturnedError, PublishNackedError, TimeoutError) as exc:
            raise PublishError(_describe_failure(exc, exchange, routing_key)) from exc
    return published


def _messages(
    batch: pa.RecordBatch,
    plan: WritePlan,
    sink: SinkOptions,
    message_id_prefix: str | None,
    first_row: int,
) -> Iterator[tuple[bytes, str, str, BasicProperties]]:
    rows = batch.num_rows

    def column(name: str) -> list[object]:
        values: list[object] = batch.column(name).to_pylist()
        return values

    bodies = column("body")
    keys = column("routing_key") if plan.routing_key_column else None
    exchanges = column("exchange") if plan.exchange_column else None
    headers = column("headers") if plan.headers_column else None
    stamps = column("timestamp") if plan.timestamp_column else None
    flat = {name: column(name) for name in plan.flat_properties}
    nested = column("properties") if plan.struct_properties else None
    default_key = sink.routing_key or ""
    for i in range(rows):
        body = bodies[i]
        if isinstance(body, str):
            payload = body.encode()
        elif isinstance(body, bytes):
            payload = body
        else:
            raise PublishError(f"row {first_row + i}: body is {body!r}, not binary or string")
        key = keys[i] if keys is not None else None
        exchange = exchanges[i] if exchanges is not None else None
        values: dict[str, object] = {"delivery_mode": sink.delivery_mode}
        if sink.content_type is not None:
            values["content_type"] = sink.content_type
        if nested is not None:
            struct = nested[i]
            if isinstance(struct, dict):
                for name in plan.struct_properties:
                    if struct.get(name) is not None:
                        values[name] = struct[name]
        for name, data in flat.items():
            if data[i] is not None:
                values[name] = data[i]
        if headers is not None and headers[i] is not None:
            table: FieldTable = {}
            pairs = headers[i]
            assert isinstance(pairs, list)
            for pair in pairs:
                assert isinstance(pair, tuple)
                name, value = pair
                table[str(name)] = None if value is None else str(value)
            values["headers"] = table
        stamp = stamps[i] if stamps is not None else None
        if isinstance(stamp, datetime):
            values["timestamp"] = int(stamp.timestamp())
        if message_id_prefix is not None and values.get("message_id") is None:
            values["message_id"] = f"{message_id_prefix}-{first_row + i}"
        yield (
            payload,
            sink.exchange if exchange is None else str(exchange),
            default_key if key is None else str(key),
            _properties(values),
        )


def _properties(values: dict[str, object]) -> BasicProperties:
    def text(name: str) -> str | None:
        value = values.get(name)
        return None if value is None else str(value)

    def number(name: str) -> int | None:
        value = values.get(name)
        return value if isinstance(value, int) else None

    headers = values.get("headers")
    return BasicProperties(
        content_type=text("content_type"),
        content_encoding=text("content_encoding"),
        headers=headers if isinstance(headers, dict) else None,
        delivery_mode=number("delivery_mode"),
        priority=number("priority"),
        correlation_id=text("correlation_id"),
        reply_to=text("reply_to"),
        expiration=text("expiration"),
        message_id=text("message_id"),
        timestamp=number("timestamp"),
        type=text("type"),
        user_id=text("user_id"),
        app_id=text("app_id"),
    )


class _WriterBase:
    def __init__(self, options: AmqpOptions, plan: WritePlan, job_id: str) -> None:
        self._options = options
        self._plan = plan
        self._job_id = job_id

    def _write(self, iterator: Iterator[pa.RecordBatch]) -> PublishedMessages:
        partition_id, attempt, batch_id, query_id = _task_identity()
        prefix: str | None = None
        if self._options.sink.message_id_mode == "deterministic":
            # the same on every attempt of this task, and after a restart of the query
            origin = query_id if query_id is not None else self._job_id
            prefix = f"{origin}-{batch_id if batch_id is not None else 0}-{partition_id}"
        count = publish_batches(
            self._options.connection,
            self._options.sink,
            self._plan,
            iterator,
            prefix,
            partition_id,
        )
        return PublishedMessages(count=count, partition_id=partition_id, attempt=attempt)


def _total(messages: Sequence[WriterCommitMessage | None]) -> int:
    return sum(m.count for m in messages if isinstance(m, PublishedMessages))


class AmqpBatchWriter(_WriterBase, DataSourceArrowWriter):
    """``df.write.format("amqp")``: publish each partition with confirms."""

    def __init__(self, options: AmqpOptions, plan: WritePlan) -> None:
        super().__init__(options, plan, uuid.uuid4().hex)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PublishedMessages:
        """Executor: publish this partition's rows; every one is confirmed on return."""
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Driver: log how many messages the job published."""
        logger.info("write job %s published %d message(s)", self._job_id, _total(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Driver: published messages cannot be taken back; say how many went out."""
        logger.warning(
            "write job %s failed after %d confirmed message(s); they stay published",
            self._job_id,
            _total(messages),
        )


class AmqpStreamWriter(_WriterBase, DataSourceStreamArrowWriter):
    """``df.writeStream.format("amqp")``: publish each micro-batch with confirms."""

    def __init__(self, options: AmqpOptions, plan: WritePlan) -> None:
        super().__init__(options, plan, uuid.uuid4().hex)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PublishedMessages:
        """Executor: publish this partition of the micro-batch."""
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver: log the micro-batch's count."""
        logger.info("micro-batch %d published %d message(s)", batchId, _total(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver: the batch will be replayed; what was confirmed stays published."""
        logger.warning(
            "micro-batch %d failed after %d confirmed message(s); they stay published and "
            "the replay publishes them again",
            batchId,
            _total(messages),
        )
