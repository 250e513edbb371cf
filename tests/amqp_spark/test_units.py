"""amqp_spark without Spark's JVM or a broker: options, offsets, schema, Arrow batches, the
writer's column mapping and the pickling of everything that crosses processes."""

from __future__ import annotations

import inspect
import json
import pickle
from datetime import UTC, datetime
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark import cloudpickle
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

import amqp_spark
import pyspark_amqp
from amqp_sansio import BasicProperties, Int64
from amqp_sansio.client import Message
from amqp_spark import AmqpDataSource, AmqpOptionError
from amqp_spark._compat import (
    ADMISSION_CONTROL,
    ARROW_STREAM_WRITER,
    ReadAllAvailable,
    ReadMaxRows,
    parse_version,
)
from amqp_spark._offsets import (
    OffsetKind,
    OffsetRange,
    OffsetSpec,
    allocate_rows,
    checkpoint_offsets,
    parse_offsets_option,
    plan_ranges,
)
from amqp_spark._options import parse_options
from amqp_spark._queue_reader import QueueStreamReader
from amqp_spark._schema import (
    SOURCE_COLUMNS,
    RecordBatchBuilder,
    arrow_schema,
    build_record_batch,
    header_text,
    headers_json,
    output_columns,
    source_schema,
)
from amqp_spark._stream_reader import StreamQueueBatchReader, StreamQueueStreamReader
from amqp_spark._writer import AmqpStreamWriter, PublishedMessages, _messages, plan_write
from tests.amqp_spark.versions import INSTALLED, NEEDS_PYSPARK_4_2

STREAM = {"queue": "events", "queuetype": "stream"}


def source(**options: str) -> AmqpDataSource:
    return AmqpDataSource({key.lower(): value for key, value in options.items()})


# --- options -----------------------------------------------------------------------------


def test_defaults() -> None:
    parsed = parse_options({})
    assert parsed.connection.host == "127.0.0.1"
    assert parsed.connection.connection_name == "amqp_spark"
    assert parsed.source.queues == ()
    assert parsed.source.prefetch == 2000
    assert parsed.source.fail_on_data_loss is True
    assert parsed.sink.exchange == ""
    assert parsed.sink.mandatory is True
    assert parsed.sink.delivery_mode == 2
    assert parsed.sink.message_id_mode == "none"


def test_every_option_parses() -> None:
    parsed = parse_options(
        {
            "url": "amqps://u:p@broker:5671/prod?heartbeat=5",
            "connectionTimeoutMs": "2500",
            "tls.caFile": "/etc/ca.pem",
            "tls.verify": "false",
            "queue": "a, b",
            "queueType": "stream",
            "declare": "true",
            "queueArgs": '{"x-max-age": "7D", "x-max-length-bytes": 1000000}',
            "startingOffsets": '{"a": "first", "b": "timestamp:1700000000"}',
            "endingOffsets": "latest",
            "maxMessagesPerTrigger": "300",
            "numPartitions": "4",
            "maxMessagesPerPartition": "1000",
            "prefetch": "250",
            "pollTimeoutMs": "500",
            "pollIdleMs": "20",
            "readTimeoutMs": "9000",
            "failOnDataLoss": "FALSE",
            "includeHeadersJson": "true",
            "exchange": "out",
            "routingKey": "rk",
            "mandatory": "false",
            "deliveryMode": "1",
            "contentType": "application/json",
            "confirm": "true",
            "maxInFlight": "64",
            "confirmTimeoutMs": "1000",
            "messageIdMode": "deterministic",
        }
    )
    conn, src, sink = parsed.connection, parsed.source, parsed.sink
    assert (conn.host, conn.port, conn.virtual_host, conn.tls) == ("broker", 5671, "prod", True)
    assert (conn.heartbeat, conn.connection_timeout, conn.cafile, conn.verify) == (
        5,
        2.5,
        "/etc/ca.pem",
        False,
    )
    assert src.queues == ("a", "b")
    assert src.starting_offsets == {
        "a": OffsetSpec("first"),
        "b": OffsetSpec("timestamp", 1700000000),
    }
    assert src.ending_offsets == {"a": OffsetSpec("next"), "b": OffsetSpec("next")}
    assert src.queue_arguments() == {
        "x-max-age": "7D",
        "x-max-length-bytes": 1000000,
        "x-queue-type": "stream",
    }
    assert (src.max_messages_per_trigger, src.num_partitions, src.max_messages_per_partition) == (
        300,
        4,
        1000,
    )
    assert (src.prefetch, src.poll_timeout, src.poll_idle, src.read_timeout) == (
        250,
        0.5,
        0.02,
        9.0,
    )
    assert src.fail_on_data_loss is False
    assert src.include_headers_json is True
    assert (sink.exchange, sink.routing_key, sink.mandatory, sink.delivery_mode) == (
        "out",
        "rk",
        False,
        1,
    )
    assert (sink.content_type, sink.max_in_flight, sink.confirm_timeout) == (
        "application/json",
        64,
        1.0,
    )
    assert sink.message_id_mode == "deterministic"


@pytest.mark.parametrize(
    ("options", "option", "fragment"),
    [
        ({"queueType": "fifo"}, "queueType", "stream, classic, quorum"),
        ({"prefetch": "many"}, "prefetch", "'many'"),
        ({"prefetch": "0"}, "prefetch", "1 to 65535"),
        ({"prefetch": "70000"}, "prefetch", "1 to 65535"),
        ({"url": "http://broker/"}, "url", "scheme"),
        ({"url": "amqp://u:secret@host:notaport/"}, "url", "port"),
        ({"maxMessagesPerTrigger": "-5"}, "maxMessagesPerTrigger", "integer"),
        ({"maxMessagePerTrigger": "5"}, "maxmessagepertrigger", "maxMessagesPerTrigger"),
        ({"failOnDataLoss": "yes"}, "failOnDataLoss", "true or false"),
        ({"deliveryMode": "3"}, "deliveryMode", "1 to 2"),
        ({"messageIdMode": "random"}, "messageIdMode", "none, deterministic"),
        ({"tls.caFile": "/ca.pem"}, "tls.caFile", "amqps"),
        ({"queue": "a,,b"}, "queue", "empty queue name"),
        ({"queue": "a,a"}, "queue", "named twice"),
        ({"queue": "a", "path": "b"}, "queue", "load() path"),
        ({"queueArgs": "{}"}, "queueArgs", "declare=true"),
        (
            {"declare": "true", "queueType": "stream", "queueArgs": "[1]", "queue": "q"},
            "queueArgs",
            "object",
        ),
        ({"declare": "true", "queue": "q"}, "declare", "queueType"),
        (
            {"queue": "q", "queueType": "classic", "startingOffsets": "first"},
            "startingOffsets",
            "stream",
        ),
        ({"queue": "q", "startingOffsets": "yesterday"}, "startingOffsets", "'yesterday'"),
        ({"queue": "q", "startingOffsets": "timestamp:soon"}, "startingOffsets", "timestamp"),
        ({"queue": "q", "endingOffsets": "first"}, "endingOffsets", "'first'"),
        ({"queue": "a,b", "startingOffsets": '{"a": 1}'}, "startingOffsets", "b"),
        ({"queue": "a", "startingOffsets": '{"a": 1, "c": 2}'}, "startingOffsets", "c"),
        ({"queue": "a", "startingOffsets": '{"a": true}'}, "startingOffsets", "True"),
        (
            {"queue": "q", "queueType": "quorum", "maxMessagesPerTrigger": "70000"},
            "maxMessagesPerTrigger",
            "65535",
        ),
        ({"exchange": "x" * 256}, "exchange", "255"),
        (
            {"maxOffsetsPerTrigger": "5", "maxMessagesPerTrigger": "5"},
            "maxOffsetsPerTrigger",
            "only one",
        ),
        (
            {"queue": "q", "minMessagesPerTrigger": "9", "maxMessagesPerTrigger": "5"},
            "minMessagesPerTrigger",
            "more than",
        ),
        ({"queue": "q", "maxTriggerDelay": "5m"}, "maxTriggerDelay", "minMessagesPerTrigger"),
        (
            {"queue": "q", "minMessagesPerTrigger": "9", "maxTriggerDelay": "soon"},
            "maxTriggerDelay",
            "duration",
        ),
        (
            {"queue": "q", "minMessagesPerTrigger": "9", "maxTriggerDelay": "5w"},
            "maxTriggerDelay",
            "duration",
        ),
        (
            {"queue": "q", "queueType": "classic", "maxBytesPerTrigger": "10"},
            "maxBytesPerTrigger",
            "stream",
        ),
        (
            {"queue": "q", "startingTimestamp": "1", "startingOffsets": "first"},
            "startingTimestamp",
            "not both",
        ),
        ({"queue": "q", "endingTimestamp": "yesterday"}, "endingTimestamp", "integer"),
        ({"startingTimestamp": "1000"}, "startingTimestamp", "queue option"),
        ({"queue": "q", "superStream": "s"}, "superStream", "either"),
        ({"superStream": "s", "queueType": "classic"}, "queueType", "stream queues"),
        ({"superStream": "s", "startingOffsets": '{"s-0": 1}'}, "startingOffsets", "JSON"),
        ({"superStream": " "}, "superStream", "empty"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], option: str, fragment: str) -> None:
    with pytest.raises(AmqpOptionError) as caught:
        source(**options)
    assert caught.value.option == option
    assert option in str(caught.value)
    assert fragment in str(caught.value)


def test_kafka_level_source_options() -> None:
    parsed = parse_options(
        {
            "queue": "a,b",
            "queueType": "stream",
            "startingTimestamp": "1700000000999",  # Kafka's unit: ms; the stream's: seconds
            "endingOffsets": "timestamp:1700000100",
            "maxOffsetsPerTrigger": "500",
            "minOffsetsPerTrigger": "100",
            "maxTriggerDelay": "2m",
            "maxBytesPerTrigger": "1048576",
        }
    ).source
    assert parsed.starting_offsets == dict.fromkeys(("a", "b"), OffsetSpec("timestamp", 1700000000))
    assert parsed.ending_offsets == dict.fromkeys(("a", "b"), OffsetSpec("timestamp", 1700000100))
    assert (parsed.max_messages_per_trigger, parsed.min_messages_per_trigger) == (500, 100)
    assert parsed.max_trigger_delay == 120.0
    assert parsed.max_bytes_per_trigger == 1048576
    assert parse_options({"queue": "q"}).source.max_trigger_delay == 15 * 60.0  # Kafka's default
    for text, seconds in [("250", 0.25), ("250ms", 0.25), ("30s", 30.0), ("1h", 3600.0)]:
        options = {"queue": "q", "minMessagesPerTrigger": "1", "maxTriggerDelay": text}
        assert parse_options(options).source.max_trigger_delay == seconds, text
    # a super stream: stream queues found later, one offset spec for all partitions
    sup = parse_options({"superStream": "invoices", "startingOffsets": "first"}).source
    assert (sup.queues, sup.super_stream, sup.queue_type) == ((), "invoices", "stream")
    assert sup.offset_specs(
        sup.starting_offsets, ("invoices-0", "invoices-1"), OffsetSpec("next")
    ) == {
        "invoices-0": OffsetSpec("first"),
        "invoices-1": OffsetSpec("first"),
    }
    assert sup.offset_specs(None, ("invoices-0",), OffsetSpec("next")) == {
        "invoices-0": OffsetSpec("next")
    }


def test_read_options_are_checked_when_spark_asks_for_the_schema() -> None:
    # Spark calls schema() only for a read: load() fails there, writes never need a queue
    with pytest.raises(AmqpOptionError, match="'queueType'") as caught:
        source(queue="q").schema()
    assert '.option("queueType", "stream")' in str(caught.value)
    with pytest.raises(AmqpOptionError, match="'queue'"):
        source(queueType="stream").schema()
    assert source(superStream="s").schema() == source_schema(False)


def test_password_never_in_errors_or_repr() -> None:
    with pytest.raises(AmqpOptionError) as caught:
        source(url="amqp://user:hunter2@host:99999/")
    assert "hunter2" not in str(caught.value)
    parsed = source(url="amqp://user:hunter2@host/").amqp_options
    assert "hunter2" not in repr(parsed)


def test_spark_keys_are_accepted_and_path_is_the_queue() -> None:
    parsed = parse_options(
        {"path": "orders", "checkpointlocation": "/tmp/x", "queryname": "q", "queuetype": "stream"}
    )
    assert parsed.source.queues == ("orders",)


def test_option_names_are_documented_once() -> None:
    names = [name.lower() for name in amqp_spark.OPTION_NAMES]
    assert len(names) == len(set(names))


# --- offsets ------------------------------------------------------------------------------

ALL_KINDS: frozenset[OffsetKind] = frozenset({"first", "last", "next", "offset", "timestamp"})


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("first", OffsetSpec("first")),
        (" LAST ", OffsetSpec("last")),
        ("next", OffsetSpec("next")),
        ("latest", OffsetSpec("next")),
        ("42", OffsetSpec("offset", 42)),
        ("timestamp:1700000000", OffsetSpec("timestamp", 1700000000)),
    ],
)
def test_offset_specs(text: str, spec: OffsetSpec) -> None:
    assert parse_offsets_option("startingOffsets", text, ["a", "b"], ALL_KINDS) == {
        "a": spec,
        "b": spec,
    }
    assert spec.describe() in (text.strip().lower(), "next")


def test_checkpoint_offsets_refuse_other_queues_and_bad_values() -> None:
    assert checkpoint_offsets({"a": 5, "b": 0}, ["a", "b"]) == {"a": 5, "b": 0}
    with pytest.raises(ValueError, match="new checkpoint"):
        checkpoint_offsets({"a": 5}, ["a", "b"])
    with pytest.raises(ValueError, match="non-negative"):
        checkpoint_offsets({"a": -1}, ["a"])
    with pytest.raises(ValueError, match="non-negative"):
        checkpoint_offsets({"a": True}, ["a"])


@given(
    st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 1000), max_size=6),
    st.integers(0, 3000),
)
def test_allocate_rows_is_fair_and_exact(available: dict[str, int], budget: int) -> None:
    granted = allocate_rows(available, budget)
    assert set(granted) == set(available)
    assert sum(granted.values()) == min(budget, sum(available.values()))
    for queue, count in granted.items():
        assert 0 <= count <= available[queue]
    # a queue that did not get everything it had got at least as much as any other
    short = [q for q in available if granted[q] < available[q]]
    for queue in short:
        assert all(granted[queue] + 1 >= granted[other] for other in available)


def test_allocate_rows_examples() -> None:
    assert allocate_rows({"a": 1000, "b": 0}, 300) == {"a": 300, "b": 0}
    assert allocate_rows({"a": 1000, "b": 50}, 300) == {"a": 250, "b": 50}
    assert allocate_rows({"a": 1000, "b": 1000}, 301) == {"a": 151, "b": 150}


@given(
    st.dictionaries(
        st.sampled_from("abc"),
        st.tuples(st.integers(0, 10**12), st.integers(0, 5000)),
        min_size=1,
    ),
    st.integers(1, 8),
    st.none() | st.integers(1, 2000),
)
def test_plan_ranges_cover_each_range_exactly(
    ranges: dict[str, tuple[int, int]], parts: int, max_size: int | None
) -> None:
    start = {q: s for q, (s, _) in ranges.items()}
    end = {q: s + n for q, (s, n) in ranges.items()}
    planned = plan_ranges(start, end, num_partitions=parts, max_messages_per_partition=max_size)
    for queue in ranges:
        mine = [r for r in planned if r.queue == queue]
        covered = [o for r in mine for o in range(r.start, r.end)]
        assert covered == list(range(start[queue], end[queue]))
        if mine:
            assert len(mine) >= min(parts, end[queue] - start[queue])
            sizes = [r.count for r in mine]
            assert max(sizes) - min(sizes) <= 1
            if max_size is not None:
                assert max(sizes) <= max_size


def test_plan_ranges_prototype_split() -> None:
    assert plan_ranges({"q": 0}, {"q": 300}, num_partitions=2, max_messages_per_partition=None) == [
        OffsetRange("q", 0, 150),
        OffsetRange("q", 150, 300),
    ]
    assert plan_ranges({"q": 7}, {"q": 7}, num_partitions=2, max_messages_per_partition=None) == []
    with pytest.raises(ValueError, match="before start"):
        plan_ranges({"q": 9}, {"q": 7}, num_partitions=1, max_messages_per_partition=None)
    with pytest.raises(ValueError, match="empty"):
        OffsetRange("q", 5, 5)


# --- schema and Arrow ------------------------------------------------------------------------


def sparks_arrow_schema(schema: StructType) -> pa.Schema:
    # newer PySpark takes timezone="UTC" where 4.0 and 4.1 take timestamp_utc=True
    if "timezone" in inspect.signature(to_arrow_schema).parameters:
        return to_arrow_schema(schema, timezone="UTC")
    return to_arrow_schema(schema, timestamp_utc=True)  # type: ignore[call-arg]  # 4.0/4.1 only


@pytest.mark.parametrize("with_json", [False, True])
def test_arrow_schema_equals_sparks_conversion(with_json: bool) -> None:
    schema = source_schema(with_json)
    assert arrow_schema(output_columns(schema)).equals(sparks_arrow_schema(schema))
    assert schema.fieldNames()[: len(SOURCE_COLUMNS)] == list(SOURCE_COLUMNS)


def test_user_schema_may_pick_columns() -> None:
    picked = StructType(
        [StructField("stream_offset", LongType(), True), StructField("body", BinaryType(), True)]
    )
    columns = output_columns(picked)
    assert [c.name for c in columns] == ["stream_offset", "body"]
    assert arrow_schema(columns).equals(sparks_arrow_schema(picked))
    with pytest.raises(ValueError, match="'value' is not produced"):
        output_columns(StructType([StructField("value", StringType())]))
    with pytest.raises(ValueError, match="must have type binary"):
        output_columns(StructType([StructField("body", StringType())]))
    with pytest.raises(ValueError, match="declare it nullable"):
        output_columns(StructType([StructField("queue", StringType(), False)]))


def message(offset: int | None, **props: object) -> Message:
    headers = dict(props.pop("headers", {}))  # type: ignore[call-overload]
    if offset is not None:
        headers["x-stream-offset"] = offset
    return Message(
        body=f"m{offset}".encode(),
        properties=BasicProperties(headers=headers or None, **props),  # type: ignore[arg-type]
        exchange="ex",
        routing_key="rk",
        delivery_tag=7,
        redelivered=True,
    )


def test_record_batch_holds_every_column() -> None:
    columns = output_columns(source_schema(True))
    rows = [
        (
            "events",
            message(
                3,
                timestamp=1_700_000_000,
                content_type="text/plain",
                delivery_mode=2,
                priority=5,
                message_id="id-3",
                headers={
                    "n": 1,
                    "flag": True,
                    "raw": b"\xff",
                    "when": datetime(2024, 1, 2, tzinfo=UTC),
                },
            ),
        ),
        ("events", message(None)),
    ]
    batch = build_record_batch(columns, rows)
    assert batch.schema.equals(sparks_arrow_schema(source_schema(True)))
    data = batch.to_pylist()
    first, second = data
    assert first["body"] == b"m3"
    assert (first["routing_key"], first["exchange"], first["queue"]) == ("rk", "ex", "events")
    assert (first["stream_offset"], first["delivery_tag"], first["redelivered"]) == (3, 7, True)
    assert first["timestamp"] == datetime.fromtimestamp(1_700_000_000, UTC)
    assert dict(first["headers"]) == {
        "n": "1",
        "flag": "true",
        "raw": "/w==",
        "when": "2024-01-02T00:00:00+00:00",
        "x-stream-offset": "3",
    }
    assert json.loads(first["headers_json"]) == {
        "n": 1,
        "flag": True,
        "raw": {"base64": "/w=="},
        "when": "2024-01-02T00:00:00+00:00",
        "x-stream-offset": 3,
    }
    assert first["properties"]["content_type"] == "text/plain"
    assert first["properties"]["delivery_mode"] == 2
    assert first["properties"]["priority"] == 5
    assert first["properties"]["message_id"] == "id-3"
    assert first["properties"]["app_id"] is None
    assert second["stream_offset"] is None
    assert second["headers"] is None
    assert second["timestamp"] is None


def test_record_batch_builder_starts_afresh_after_each_batch() -> None:
    picked = StructType(
        [
            StructField("properties", source_schema(False)["properties"].dataType),
            StructField("stream_offset", LongType()),
            StructField("queue", StringType()),
        ]
    )
    builder = RecordBatchBuilder(output_columns(picked))
    builder.append("a", message(1, priority=1))
    builder.append("b", message(2, priority=2), stream_offset=20)  # the reader's own offset
    assert len(builder) == 2
    first = builder.build()
    assert first.schema.equals(sparks_arrow_schema(picked))
    assert [(row["queue"], row["stream_offset"]) for row in first.to_pylist()] == [
        ("a", 1),
        ("b", 20),
    ]
    assert [row["properties"]["priority"] for row in first.to_pylist()] == [1, 2]
    assert len(builder) == 0
    builder.append("c", message(None))
    second = builder.build().to_pylist()
    assert second == [
        {
            "properties": dict.fromkeys(first.to_pylist()[0]["properties"]),
            "stream_offset": None,
            "queue": "c",
        }
    ]


def test_header_text_coercions() -> None:
    assert header_text("plain") == "plain"
    assert header_text(None) is None
    assert header_text(False) == "false"
    assert header_text(12) == "12"
    assert header_text(1.5) == "1.5"
    assert header_text(Decimal("1.20")) == "1.20"
    assert header_text(b"text") == "text"
    assert header_text({"a": [1, "x"]}) == '{"a":[1,"x"]}'
    assert header_text(Int64(5)) == "5"
    assert headers_json(None) is None


# --- writer column mapping -------------------------------------------------------------------


def test_write_plan_checks_columns() -> None:
    sink = parse_options({"routingKey": "rk"}).sink
    with pytest.raises(ValueError, match="needs a 'body' column"):
        plan_write(StructType([StructField("value", StringType())]), sink)
    with pytest.raises(ValueError, match="'body' must be binary or string"):
        plan_write(StructType([StructField("body", LongType())]), sink)
    with pytest.raises(ValueError, match=r"count.*have no place"):
        plan_write(
            StructType([StructField("body", StringType()), StructField("count", LongType())]), sink
        )
    with pytest.raises(ValueError, match="'priority' must be int or bigint"):
        plan_write(
            StructType([StructField("body", StringType()), StructField("priority", StringType())]),
            sink,
        )
    with pytest.raises(ValueError, match="destination"):
        plan_write(StructType([StructField("body", StringType())]), parse_options({}).sink)
    with pytest.raises(ValueError, match=r"properties\.colour"):
        plan_write(
            StructType(
                [
                    StructField("body", StringType()),
                    StructField("properties", StructType([StructField("colour", StringType())])),
                ]
            ),
            sink,
        )
    # the source's own columns may stay in a pipeline that forwards messages
    plan = plan_write(source_schema(True), sink)
    assert plan.struct_properties == tuple(name for name, _ in amqp_spark._schema.PROPERTY_FIELDS)


def test_rows_become_messages() -> None:
    schema = StructType(
        [
            StructField("body", StringType()),
            StructField("routing_key", StringType()),
            StructField("headers", MapType(StringType(), StringType())),
            StructField("priority", IntegerType()),
            StructField("timestamp", TimestampType()),
            StructField("properties", StructType([StructField("message_id", StringType())])),
        ]
    )
    options = parse_options(
        {"exchange": "out", "routingKey": "default", "contentType": "text/plain"}
    )
    plan = plan_write(schema, options.sink)
    batch = pa.RecordBatch.from_pylist(
        [
            {
                "body": "hello",
                "routing_key": "k1",
                "headers": [("a", "1")],
                "priority": 3,
                "timestamp": datetime(2024, 1, 1, tzinfo=UTC),
                "properties": {"message_id": "given"},
            },
            {
                "body": "world",
                "routing_key": None,
                "headers": None,
                "priority": None,
                "timestamp": None,
                "properties": None,
            },
        ],
        schema=sparks_arrow_schema(schema),
    )
    out = list(_messages(batch, plan, options.sink, "job-0-4", 10))
    (body1, ex1, key1, props1), (body2, ex2, key2, props2) = out
    assert (body1, ex1, key1) == (b"hello", "out", "k1")
    assert props1 == BasicProperties(
        content_type="text/plain",
        headers={"a": "1"},
        delivery_mode=2,
        priority=3,
        message_id="given",
        timestamp=1_704_067_200,
    )
    assert (body2, ex2, key2) == (b"world", "out", "default")
    assert props2 == BasicProperties(
        content_type="text/plain", delivery_mode=2, message_id="job-0-4-11"
    )


# --- what crosses processes --------------------------------------------------------------------


def test_data_source_readers_and_partitions_pickle() -> None:
    ds = source(
        queue="events",
        queueType="stream",
        url="amqp://u:pw@h/",
        routingKey="out",
    )
    schema = ds.schema()
    columns = output_columns(schema)
    objects: list[object] = [
        ds,
        ds.streamReader(schema),
        ds.reader(schema),
        StreamQueueBatchReader(ds.amqp_options, columns),
        source(queue="jobs", queueType="classic").simpleStreamReader(schema),
        ds.writer(StructType([StructField("body", BinaryType())]), False),
        OffsetRange("events", 0, 10),
        PublishedMessages(count=3, partition_id=1, attempt=0),
    ]
    if ARROW_STREAM_WRITER:
        objects.append(ds.streamWriter(StructType([StructField("body", BinaryType())]), False))
    for obj in objects:
        for dumps in (pickle.dumps, cloudpickle.dumps):
            copy = pickle.loads(dumps(obj))
            assert type(copy) is type(obj)


@NEEDS_PYSPARK_4_2
def test_default_read_limit_follows_the_options() -> None:
    schema = source_schema(False)
    reader = source(**STREAM, maxMessagesPerTrigger="5").streamReader(schema)
    assert isinstance(reader, StreamQueueStreamReader)
    assert reader.getDefaultReadLimit() == ReadMaxRows(5)
    assert source(**STREAM).streamReader(schema).getDefaultReadLimit() == ReadAllAvailable()


@pytest.mark.parametrize(
    "option", ["maxMessagesPerTrigger", "maxOffsetsPerTrigger", "maxBytesPerTrigger"]
)
def test_per_trigger_limits_on_a_stream_queue_follow_the_pyspark_version(option: str) -> None:
    # runs on every PySpark: accepted from 4.2, refused by name on 4.0 and 4.1
    schema = source_schema(False)
    ds = source(**STREAM, **{option: "5"})
    if ADMISSION_CONTROL:
        assert isinstance(ds.streamReader(schema), StreamQueueStreamReader)
        return
    with pytest.raises(AmqpOptionError, match=rf"needs PySpark >= 4\.2.*{INSTALLED}") as info:
        ds.streamReader(schema)
    assert info.value.option in {"maxMessagesPerTrigger", "maxBytesPerTrigger"}


def test_minimum_per_trigger_follows_the_pyspark_version() -> None:
    schema = source_schema(False)
    ds = source(**STREAM, minMessagesPerTrigger="5")
    if ADMISSION_CONTROL:
        assert isinstance(ds.streamReader(schema), StreamQueueStreamReader)
        return
    with pytest.raises(AmqpOptionError, match=r"'minMessagesPerTrigger': needs PySpark >= 4\.2"):
        ds.streamReader(schema)


def test_stream_writer_follows_the_pyspark_version() -> None:
    ds = source(exchange="out")
    schema = StructType([StructField("body", BinaryType())])
    if ARROW_STREAM_WRITER:
        assert isinstance(ds.streamWriter(schema, False), AmqpStreamWriter)
        return
    with pytest.raises(
        NotImplementedError, match=rf"writeStream .*needs PySpark >= 4\.1.*{INSTALLED}"
    ):
        ds.streamWriter(schema, False)


def test_classic_queue_batch_cap_works_on_every_pyspark() -> None:
    # the classic/quorum reader caps read(start) itself: no read limit involved
    ds = source(queue="jobs", queueType="classic", maxMessagesPerTrigger="5")
    assert isinstance(ds.simpleStreamReader(source_schema(False)), QueueStreamReader)


@pytest.mark.parametrize(
    ("text", "version"), [("4.1.4", (4, 1)), ("4.2.0.dev1", (4, 2)), ("10.0", (10, 0))]
)
def test_pyspark_version_parsing(text: str, version: tuple[int, int]) -> None:
    assert parse_version(text) == version


def test_unreadable_pyspark_version_is_an_error() -> None:
    with pytest.raises(ValueError, match="cannot read a PySpark version"):
        parse_version("unknown")


def test_reader_choice_follows_queue_type() -> None:
    schema = source_schema(False)
    from pyspark.errors import PySparkNotImplementedError

    classic = source(queue="jobs", queueType="classic")
    with pytest.raises(PySparkNotImplementedError):
        classic.streamReader(schema)
    assert isinstance(classic.simpleStreamReader(schema), QueueStreamReader)
    with pytest.raises(AmqpOptionError, match=r"spark\.readStream"):
        classic.reader(schema)
    with pytest.raises(AmqpOptionError, match="'queue'"):
        source(queueType="stream").reader(schema)
    with pytest.raises(AmqpOptionError, match="'queueType'"):
        source(queue="q").streamReader(schema)
    with pytest.raises(AmqpOptionError, match="endingOffsets"):
        source(queue="q", queueType="stream", endingOffsets="5").streamReader(schema)
    with pytest.raises(AmqpOptionError, match="append"):
        source(routingKey="k").writer(StructType([StructField("body", BinaryType())]), True)
    with pytest.raises(AmqpOptionError, match="schema"):
        source(routingKey="k").writer(StructType([StructField("x", BinaryType())]), False)


def test_public_surface() -> None:
    assert AmqpDataSource.name() == "amqp"
    assert pyspark_amqp.DefaultSource is AmqpDataSource
    for name in amqp_spark.__all__:
        assert hasattr(amqp_spark, name)
    assert AmqpDataSource.__module__ == "amqp_spark"
    assert getattr(AmqpDataSource, "__final__", False)
