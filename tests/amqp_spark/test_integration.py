"""amqp_spark end to end: a local[2] Spark session (shared by this module) against RabbitMQ,
and the stream queues' exactly-once tests against the embedded broker too.

``AMQP_SPARK_MASTER`` chooses another master, e.g. ``local-cluster[2,1,1024]``: two executor
JVMs of their own, so every task's Python worker runs outside the driver's process tree (about
a minute more to start; not the default in ``make test``).

The session never calls ``register``: ``format("amqp")`` is found through the top-level
``pyspark_amqp`` module, as users get it.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import uuid
from typing import TYPE_CHECKING

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

import amqp_blocking
import amqp_spark
from amqp_sansio import BasicProperties
from amqp_spark._compat import ADMISSION_CONTROL
from tests.amqp_spark.versions import NEEDS_PYSPARK_4_1, NEEDS_PYSPARK_4_2

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from pathlib import Path

    from pyspark.sql import DataFrame, DataFrameReader
    from pyspark.sql.streaming.query import StreamingQuery

# A generous upper bound so a broken query fails the test instead of hanging it.
QUERY_LIMIT_S = 180
#: The Spark master of the module's session (``local-cluster[2,1,1024]``: real executors).
MASTER = os.environ.get("AMQP_SPARK_MASTER", "local[2]")

#: Run a test against RabbitMQ and against the embedded broker (amqp_broker serves stream
#: queues as RabbitMQ 3.10 does over AMQP 0-9-1).
ON_BOTH_BROKERS = pytest.mark.parametrize(
    "url", [pytest.param("rabbitmq", marks=pytest.mark.rabbitmq), "embedded"], indirect=True
)


@pytest.fixture
def url(request: pytest.FixtureRequest) -> str:
    """The broker's URL: RabbitMQ's (``AMQP_URL``), or the one the test is parametrized with."""
    value = request.getfixturevalue(f"{getattr(request, 'param', 'rabbitmq')}_url")
    assert isinstance(value, str)
    return value


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    previous = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers need the venv's pyarrow
    session = (
        SparkSession.builder.master(MASTER)
        .appName("amqp_spark tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.streaming.pollingDelay", "50ms")
        .config("spark.driver.memory", "1g")
        # a loaded machine (two test workers, the brokers, the JVM on two cores) can take more
        # than the default 15 s for a Python worker to open its socket back to the JVM
        .config("spark.python.authenticate.socketTimeout", "120s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    if previous is None:
        os.environ.pop("PYSPARK_PYTHON", None)
    else:
        os.environ["PYSPARK_PYTHON"] = previous


@pytest.fixture
def broker(url: str) -> Iterator[amqp_blocking.Channel]:
    with amqp_blocking.connect(url) as connection, connection.channel() as channel:
        yield channel


def _queue(channel: amqp_blocking.Channel, kind: str) -> Iterator[str]:
    name = f"amqp-spark-{kind}-{uuid.uuid4().hex[:10]}"
    channel.queue_declare(name, durable=True, arguments={"x-queue-type": kind})
    yield name
    channel.queue_delete(name)


@pytest.fixture
def stream_queue(broker: amqp_blocking.Channel) -> Iterator[str]:
    yield from _queue(broker, "stream")


@pytest.fixture
def classic_queue(broker: amqp_blocking.Channel) -> Iterator[str]:
    yield from _queue(broker, "classic")


def publish(channel: amqp_blocking.Channel, queue: str, bodies: Sequence[str]) -> None:
    channel.confirm_select()
    with channel.publisher(window=500) as publisher:
        for body in bodies:
            publisher.publish(body.encode(), routing_key=queue, properties=BasicProperties())


def read_stream(spark: SparkSession, url: str, queue: str, kind: str, **options: str) -> DataFrame:
    reader = spark.readStream.format("amqp").option("url", url)
    reader = reader.option("queue", queue).option("queueType", kind)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def run_to_parquet(df: DataFrame, out: Path, checkpoint: Path) -> tuple[list[int], StreamingQuery]:
    """Run an AvailableNow query into a parquet sink; the sizes of its non-empty batches."""
    query = (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_LIMIT_S)
    sizes = [p.numInputRows for p in query.recentProgress if p.numInputRows > 0]
    return sizes, query


def wait_until_unconsumed(channel: amqp_blocking.Channel, queue: str) -> int:
    """Wait until no consumer holds the queue (a stopped query's connection is gone, so its
    unacked messages are back); the ready count then."""
    deadline = time.monotonic() + QUERY_LIMIT_S
    while True:
        ok = channel.queue_declare(queue, passive=True)
        if ok.consumer_count == 0 or time.monotonic() > deadline:
            assert ok.consumer_count == 0
            return ok.message_count
        time.sleep(0.1)


# --- stream queues: exactly once -------------------------------------------------------------


@ON_BOTH_BROKERS
def test_stream_queue_without_limits_reads_everything_once(
    spark: SparkSession,
    url: str,
    broker: amqp_blocking.Channel,
    stream_queue: str,
    tmp_path: Path,
) -> None:
    # what PySpark 4.0 and 4.1 offer (latestOffset() with no limit), on every version
    publish(broker, stream_queue, [f"m{i}" for i in range(200)])
    df = read_stream(spark, url, stream_queue, "stream", startingOffsets="first", numPartitions="2")
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    sizes, _ = run_to_parquet(df.select("stream_offset", "body"), out, checkpoint)
    assert sizes == [200]
    publish(broker, stream_queue, [f"m{i}" for i in range(200, 250)])
    sizes, _ = run_to_parquet(df.select("stream_offset", "body"), out, checkpoint)
    assert sizes == [50]
    rows = spark.read.parquet(str(out)).collect()
    assert sorted(row.stream_offset for row in rows) == list(range(250))
    assert {row.body.decode() for row in rows} == {f"m{i}" for i in range(250)}


@pytest.mark.rabbitmq
def test_per_trigger_limit_on_old_pyspark_fails_the_query_by_name(
    spark: SparkSession, url: str, stream_queue: str, tmp_path: Path
) -> None:
    df = read_stream(
        spark, url, stream_queue, "stream", startingOffsets="first", maxMessagesPerTrigger="5"
    )
    if ADMISSION_CONTROL:
        sizes, _ = run_to_parquet(df, tmp_path / "out", tmp_path / "checkpoint")
        assert sizes == []
        return
    with pytest.raises(PySparkException, match=r"maxMessagesPerTrigger.*needs PySpark >= 4\.2"):
        run_to_parquet(df, tmp_path / "out", tmp_path / "checkpoint")


@NEEDS_PYSPARK_4_2
@ON_BOTH_BROKERS
def test_stream_queue_exactly_once_across_restart(
    spark: SparkSession,
    url: str,
    broker: amqp_blocking.Channel,
    stream_queue: str,
    tmp_path: Path,
) -> None:
    publish(broker, stream_queue, [f"m{i}" for i in range(1000)])
    df = read_stream(
        spark,
        url,
        stream_queue,
        "stream",
        startingOffsets="first",
        maxMessagesPerTrigger="300",
        numPartitions="2",
    ).select("stream_offset", "body", "queue")
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    sizes, query = run_to_parquet(df, out, checkpoint)
    assert sizes == [300, 300, 300, 100]
    # the lag after each batch, Kafka's offsetsBehindLatest, reaches the query's progress
    reported = [
        json.loads(p.sources[0].latestOffset) for p in query.recentProgress if p.numInputRows
    ]
    assert [r["offsetsBehindLatest"]["max"] for r in reported] == [700, 400, 100, 0]
    assert reported[0] == {
        "latest": {stream_queue: 1000},
        "offsetsBehindLatest": {"min": 700, "avg": 700.0, "max": 700},
    }

    publish(broker, stream_queue, [f"m{i}" for i in range(1000, 1500)])
    sizes, _ = run_to_parquet(df, out, checkpoint)
    assert sizes == [300, 200]

    rows = spark.read.parquet(str(out)).collect()
    assert sorted(row.stream_offset for row in rows) == list(range(1500))
    assert {row.body.decode() for row in rows} == {f"m{i}" for i in range(1500)}
    assert {row.queue for row in rows} == {stream_queue}


@NEEDS_PYSPARK_4_2
@pytest.mark.rabbitmq
def test_byte_and_minimum_limits_pass_through_spark(
    spark: SparkSession,
    url: str,
    broker: amqp_blocking.Channel,
    stream_queue: str,
    tmp_path: Path,
) -> None:
    # the JVM hands ReadMaxBytes and ReadMinRows back to the source as it does ReadMaxRows
    broker.confirm_select()
    with broker.publisher(window=500) as publisher:
        for _ in range(500):
            publisher.publish(b"y" * 100, routing_key=stream_queue)
    capped = read_stream(
        spark, url, stream_queue, "stream", startingOffsets="first", maxBytesPerTrigger="10000"
    ).select("stream_offset")
    sizes, _ = run_to_parquet(capped, tmp_path / "bytes", tmp_path / "bytes-checkpoint")
    assert sizes == [100] * 5  # 10,000 bytes of 100-byte bodies
    waiting = read_stream(
        spark, url, stream_queue, "stream", startingOffsets="first", minOffsetsPerTrigger="200"
    ).select("stream_offset")
    sizes, _ = run_to_parquet(waiting, tmp_path / "min", tmp_path / "min-checkpoint")
    assert sizes == [500]


@NEEDS_PYSPARK_4_2
@ON_BOTH_BROKERS
def test_stream_queue_killed_mid_batch_is_still_exactly_once(
    spark: SparkSession,
    url: str,
    broker: amqp_blocking.Channel,
    stream_queue: str,
    tmp_path: Path,
) -> None:
    publish(broker, stream_queue, [f"m{i}" for i in range(400)])
    source = read_stream(
        spark,
        url,
        stream_queue,
        "stream",
        startingOffsets="first",
        maxMessagesPerTrigger="250",
        numPartitions="2",
    )
    # The first run dies inside batch 1 (offsets 250..399), in the task holding offset 350,
    # after the other task of the batch may have written its file.
    dying = source.select(
        "stream_offset",
        F.when(F.col("stream_offset") == 350, F.raise_error(F.lit("killed mid-batch")))
        .otherwise(F.lit("ok"))
        .alias("check"),
    )
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = (
        dying.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(PySparkException, match="killed mid-batch"):
        query.awaitTermination(QUERY_LIMIT_S)
    first_run = [p.numInputRows for p in query.recentProgress]
    assert first_run == [250]  # only batch 0 completed

    healthy = source.select("stream_offset", F.lit("ok").alias("check"))
    sizes, _ = run_to_parquet(healthy, out, checkpoint)
    assert sizes == [150]  # batch 1 replayed from the offset log, the same offsets
    offsets = [row.stream_offset for row in spark.read.parquet(str(out)).collect()]
    assert sorted(offsets) == list(range(400))


# --- classic queues: at least once, acked after Spark's commit -----------------------------------


@NEEDS_PYSPARK_4_2
@pytest.mark.rabbitmq
def test_classic_queue_batches_ack_after_commit(
    spark: SparkSession,
    url: str,
    broker: amqp_blocking.Channel,
    classic_queue: str,
    tmp_path: Path,
) -> None:
    publish(broker, classic_queue, [f"m{i}" for i in range(50)])
    df = read_stream(spark, url, classic_queue, "classic", maxMessagesPerTrigger="20").select(
        "body", "redelivered", "stream_offset"
    )
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    sizes, _ = run_to_parquet(df, out, checkpoint)
    assert sizes == [20, 20, 10]
    assert wait_until_unconsumed(broker, classic_queue) == 0  # every batch was acked

    publish(broker, classic_queue, [f"n{i}" for i in range(5)])
    sizes, _ = run_to_parquet(df, out, checkpoint)
    assert sizes == [5]  # the restart duplicated nothing
    rows = spark.read.parquet(str(out)).collect()
    bodies = sorted(row.body.decode() for row in rows)
    assert bodies == sorted([f"m{i}" for i in range(50)] + [f"n{i}" for i in range(5)])
    assert not any(row.redelivered for row in rows)
    assert all(row.stream_offset is None for row in rows)
    assert wait_until_unconsumed(broker, classic_queue) == 0


@NEEDS_PYSPARK_4_2
@pytest.mark.rabbitmq
def test_classic_queue_crash_redelivers_only_that_batch(
    spark: SparkSession,
    url: str,
    broker: amqp_blocking.Channel,
    classic_queue: str,
    tmp_path: Path,
) -> None:
    publish(broker, classic_queue, [f"m{i:02d}" for i in range(50)])
    source = read_stream(spark, url, classic_queue, "classic", maxMessagesPerTrigger="20")
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    dying = source.select(
        "body",
        "redelivered",
        F.when(F.col("body") == F.lit(b"m25"), F.raise_error(F.lit("crash in batch 1")))
        .otherwise(F.lit("ok"))
        .alias("check"),
    )
    query = (
        dying.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(PySparkException, match="crash in batch 1"):
        query.awaitTermination(QUERY_LIMIT_S)
    # the dead query's connection is gone: its unacked batch is back, nothing else
    assert wait_until_unconsumed(broker, classic_queue) == 30

    healthy = source.select("body", "redelivered", F.lit("ok").alias("check"))
    sizes, _ = run_to_parquet(healthy, out, checkpoint)
    assert sum(sizes) == 30
    rows = spark.read.parquet(str(out)).collect()
    bodies = [row.body.decode() for row in rows]
    assert sorted(bodies) == [f"m{i:02d}" for i in range(50)]
    redelivered = sorted(row.body.decode() for row in rows if row.redelivered)
    assert redelivered == [f"m{i:02d}" for i in range(20, 40)]
    assert wait_until_unconsumed(broker, classic_queue) == 0


# --- batch reads of a stream ----------------------------------------------------------------------


@pytest.mark.rabbitmq
def test_batch_read_of_an_offset_range(
    spark: SparkSession, url: str, broker: amqp_blocking.Channel, stream_queue: str
) -> None:
    publish(broker, stream_queue, [f"m{i}" for i in range(300)])

    def reader() -> DataFrameReader:
        # a DataFrameReader's option() changes it in place: a fresh one per read
        return (
            spark.read.format("amqp")
            .option("url", url)
            .option("queueType", "stream")
            .option("numPartitions", "3")
        )

    df = reader().option("startingOffsets", "100").option("endingOffsets", "250").load(stream_queue)
    assert df.rdd.getNumPartitions() == 3
    rows = df.select("stream_offset", "body", "timestamp", "headers").collect()
    assert sorted(row.stream_offset for row in rows) == list(range(100, 250))
    assert all(row.body == f"m{row.stream_offset}".encode() for row in rows)
    assert all(row.headers["x-stream-offset"] == str(row.stream_offset) for row in rows)

    everything = reader().option("queue", stream_queue).load()
    assert everything.count() == 300  # first .. the tail when planned
    assert everything.schema == amqp_spark.source_schema(False)
    picked = (
        reader()
        .schema("stream_offset bigint, body binary")
        .option("queue", stream_queue)
        .option("startingOffsets", "last")
        .load()
        .collect()
    )
    assert [(row.stream_offset, row.body) for row in picked] == [(299, b"m299")]


# --- the sink ----------------------------------------------------------------------------------


def drain(channel: amqp_blocking.Channel, queue: str) -> list[amqp_blocking.Message]:
    channel.basic_qos(1000)
    messages: list[amqp_blocking.Message] = []
    with channel.consume(queue, timeout=1.0) as consumer:
        for message in consumer:
            messages.append(message)
            message.ack()
    return messages


@pytest.mark.rabbitmq
def test_batch_write_publishes_every_row_once(
    spark: SparkSession, url: str, broker: amqp_blocking.Channel, classic_queue: str
) -> None:
    rows = spark.range(10_000, numPartitions=4).select(
        F.col("id").cast("string").alias("body"),
        F.lit("application/x-id").alias("content_type"),
    )
    (
        rows.write.format("amqp")
        .option("url", url)
        .option("routingKey", classic_queue)
        .option("messageIdMode", "deterministic")
        .option("maxInFlight", "500")
        .mode("append")
        .save()
    )
    messages = drain(broker, classic_queue)
    assert sorted(int(m.body) for m in messages) == list(range(10_000))
    assert all(m.properties.content_type == "application/x-id" for m in messages)
    assert all(m.properties.delivery_mode == 2 for m in messages)
    ids = [m.properties.message_id for m in messages]
    assert len(set(ids)) == 10_000
    assert all(re.fullmatch(r"[0-9a-f]{32}-0-[0-3]-\d+", i or "") for i in ids)


@pytest.mark.rabbitmq
def test_unroutable_mandatory_row_fails_the_job(spark: SparkSession, url: str) -> None:
    key = f"nowhere-{uuid.uuid4().hex[:8]}"
    rows = spark.createDataFrame(
        [(b"lost",)], StructType([StructField("body", BinaryType(), False)])
    )
    with pytest.raises(PySparkException) as caught:
        rows.write.format("amqp").option("url", url).option("exchange", "amq.direct").option(
            "routingKey", key
        ).mode("append").save()
    assert key in str(caught.value)
    assert "unroutable" in str(caught.value)


@NEEDS_PYSPARK_4_1
@pytest.mark.rabbitmq
def test_streaming_pipeline_stream_to_queue(
    spark: SparkSession,
    url: str,
    broker: amqp_blocking.Channel,
    stream_queue: str,
    classic_queue: str,
    tmp_path: Path,
) -> None:
    publish(broker, stream_queue, [f"m{i}" for i in range(30)])
    # PySpark 4.1 has writeStream but no per-trigger limits: one batch there
    limit = {"maxMessagesPerTrigger": "20"} if ADMISSION_CONTROL else {}
    forwarded = read_stream(
        spark, url, stream_queue, "stream", startingOffsets="first", **limit
    ).select(
        F.upper(F.col("body").cast("string")).alias("body"),
        F.lit(classic_queue).alias("routing_key"),
        F.col("stream_offset").cast("string").alias("correlation_id"),
    )
    query = (
        forwarded.writeStream.format("amqp")
        .option("url", url)
        .option("messageIdMode", "deterministic")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_LIMIT_S)
    batches = [20, 10] if ADMISSION_CONTROL else [30]
    assert [p.numInputRows for p in query.recentProgress if p.numInputRows] == batches
    messages = drain(broker, classic_queue)
    assert sorted(m.body for m in messages) == sorted(f"M{i}".encode() for i in range(30))
    for m in messages:
        assert m.properties.message_id is not None
        query_id, batch, _partition, _row = m.properties.message_id.rsplit("-", 3)
        assert query_id == query.id
        first = int(m.properties.correlation_id or "") < 20 or not ADMISSION_CONTROL
        assert batch == ("0" if first else "1")


# --- options through Spark ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value", "fragment"),
    [
        ("queueType", "fifo", "queueType"),
        ("prefetch", "lots", "prefetch"),
        ("url", "amqp://guest:guest@host:port/", "url"),
    ],
)
def test_bad_option_fails_at_load(
    spark: SparkSession, option: str, value: str, fragment: str
) -> None:
    reader = spark.readStream.format("amqp").option("queue", "q").option("queueType", "stream")
    with pytest.raises(PySparkException) as caught:
        reader.option(option, value).load()
    assert fragment in str(caught.value)
    assert "amqp data source option" in str(caught.value)


def test_missing_queue_type_fails_at_load(spark: SparkSession) -> None:
    reader = spark.readStream.format("amqp").option("queue", "q")
    with pytest.raises(PySparkException) as caught:
        reader.load()
    # the error's last line of our own names the option and says what to add
    lines = [line for line in str(caught.value).splitlines() if "AmqpOptionError" in line]
    assert lines
    assert "'queueType'" in lines[-1]
    assert '.option("queueType", "stream")' in lines[-1]


def test_missing_queue_type_with_a_schema_fails_when_the_query_starts(
    spark: SparkSession, tmp_path: Path
) -> None:
    # With .schema(...) Spark runs no source code at load(): the first is the query's start
    df = spark.readStream.format("amqp").schema("body binary").option("queue", "q").load()
    query = (
        df.writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    with pytest.raises(PySparkException, match=r"option 'queueType': is required"):
        query.awaitTermination(QUERY_LIMIT_S)


def test_register_is_explicit_too(spark: SparkSession) -> None:
    amqp_spark.register(spark)
    schema = (
        spark.read.format("amqp").option("queue", "q").option("queueType", "stream").load().schema
    )
    assert schema == amqp_spark.source_schema(False)
    assert schema["body"].dataType == BinaryType()
    assert schema["routing_key"].dataType == StringType()
