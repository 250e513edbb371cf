"""The amqp readers against RabbitMQ, driven the way Spark drives them but without the JVM:
offsets, admission control, AvailableNow, data loss, and the ack-after-commit protocol. The
stream reader's tests run against the embedded broker too."""

from __future__ import annotations

import logging
import pickle
import threading
import time
import uuid
from typing import TYPE_CHECKING, TypeVar

import pytest
from pyspark import cloudpickle
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
)

import amqp_blocking
from amqp_sansio import Int64
from amqp_sansio.client import ConnectionForced, ConnectionParameters, NotFound
from amqp_spark import AmqpDataLossError, AmqpDataSource
from amqp_spark._offsets import OffsetRange
from amqp_spark._queue_reader import QueueStreamReader
from amqp_spark._range_reader import RangeConsumer
from amqp_spark._stream_reader import StreamQueueBatchReader, StreamQueueStreamReader
from tests.support.rabbitmqctl import connection_pid, rabbitmqctl

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    import pyarrow as pa

_T = TypeVar("_T")

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


@pytest.fixture
def channel(url: str) -> Iterator[amqp_blocking.Channel]:
    with amqp_blocking.connect(url) as connection, connection.channel() as ch:
        yield ch


@pytest.fixture
def queues(channel: amqp_blocking.Channel) -> Iterator[list[str]]:
    declared: list[str] = []
    yield declared
    for name in declared:
        channel.queue_delete(name)


def declare(
    channel: amqp_blocking.Channel, queues: list[str], kind: str, **arguments: int | str
) -> str:
    name = f"amqp-spark-{kind}-{uuid.uuid4().hex[:10]}"
    channel.queue_declare(name, durable=True, arguments={"x-queue-type": kind, **arguments})
    queues.append(name)
    return name


def publish(channel: amqp_blocking.Channel, queue: str, bodies: Sequence[bytes]) -> None:
    channel.confirm_select()
    with channel.publisher(window=500) as publisher:
        for body in bodies:
            publisher.publish(body, routing_key=queue)


def options(url: str, **values: str) -> dict[str, str]:
    return {"url": url, **{key.lower(): value for key, value in values.items()}}


def ship(obj: _T) -> _T:
    """A copy made the way Spark sends readers to executors (cloudpickle)."""
    dumps: Callable[[object], bytes] = cloudpickle.dumps
    copy = pickle.loads(dumps(obj))
    assert type(copy) is type(obj)
    return copy


def offsets_of(batches: Iterator[pa.RecordBatch]) -> list[int]:
    return [offset for batch in batches for offset in batch.column("stream_offset").to_pylist()]


@ON_BOTH_BROKERS
def test_stream_reader_offsets_limits_and_available_now(
    url: str, channel: amqp_blocking.Channel, queues: list[str]
) -> None:
    big = declare(channel, queues, "stream")
    small = declare(channel, queues, "stream")
    publish(channel, big, [b"b%d" % i for i in range(150)])
    publish(channel, small, [b"s%d" % i for i in range(30)])
    source = AmqpDataSource(
        options(url, queue=f"{big},{small}", queueType="stream", startingOffsets="first")
    )
    reader = source.streamReader(source.schema())
    assert isinstance(reader, StreamQueueStreamReader)
    start = reader.initialOffset()
    assert start == {big: 0, small: 0}
    assert reader.initialOffset() == start  # Spark asks twice; the answer must not move

    # ReadMaxRows is shared fairly: the small queue gets all 30, the big one the rest
    end = reader.latestOffset(start, ReadMaxRows(100))
    assert end == {big: 70, small: 30}
    # the tails, and Kafka's lag metrics once this batch is read: big stays 80 behind
    assert reader.reportLatestOffset() == {
        "latest": {big: 150, small: 30},
        "offsetsBehindLatest": {"min": 0, "avg": 40.0, "max": 80},
    }
    partitions = reader.partitions(start, end)
    assert all(isinstance(p, OffsetRange) for p in partitions)
    # what runs on executors is a pickled copy, holding no connection
    remote = ship(reader)
    read = {p.queue: offsets_of(remote.read(p)) for p in partitions if isinstance(p, OffsetRange)}
    assert read == {big: list(range(70)), small: list(range(30))}

    reader.prepareForTriggerAvailableNow()
    publish(channel, big, [b"late"] * 10)
    assert reader.latestOffset(end, ReadAllAvailable()) == {big: 150, small: 30}
    assert reader.latestOffset({big: 150, small: 30}, ReadAllAvailable()) == {big: 150, small: 30}
    assert reader.partitions({big: 150, small: 30}, {big: 150, small: 30}) == []
    reader.stop()

    with pytest.raises(ValueError, match="new checkpoint location"):
        reader.latestOffset({big: 0}, ReadAllAvailable())


@ON_BOTH_BROKERS
def test_starting_offsets_resolve_to_numbers(
    url: str, channel: amqp_blocking.Channel, queues: list[str]
) -> None:
    queue = declare(channel, queues, "stream")
    # pollTimeoutMs: how long a probe waits for a first message before calling it empty
    empty = AmqpDataSource(
        options(url, queue=queue, queueType="stream", startingOffsets="next", pollTimeoutMs="300")
    )
    assert empty.streamReader(empty.schema()).initialOffset() == {queue: 0}
    publish(channel, queue, [b"m%d" % i for i in range(20)])
    for spec, expected in [("first", 0), ("last", 19), ("next", 20), ("7", 7)]:
        source = AmqpDataSource(options(url, queue=queue, queueType="stream", startingOffsets=spec))
        assert source.streamReader(source.schema()).initialOffset() == {queue: expected}, spec
    past = AmqpDataSource(
        options(url, queue=queue, queueType="stream", startingOffsets="timestamp:1000000000")
    )
    assert past.streamReader(past.schema()).initialOffset() == {queue: 0}
    future = AmqpDataSource(
        options(
            url,
            queue=queue,
            queueType="stream",
            startingOffsets="timestamp:4000000000",
            pollTimeoutMs="300",
        )
    )
    assert future.streamReader(future.schema()).initialOffset() == {queue: 20}
    # endingOffsets past the tail stops at the tail instead of waiting for new messages
    batch = AmqpDataSource(
        options(url, queue=queue, queueType="stream", startingOffsets="15", endingOffsets="99")
    )
    batch_reader = batch.reader(batch.schema())
    assert isinstance(batch_reader, StreamQueueBatchReader)
    planned = batch_reader.partitions()
    assert planned == [OffsetRange(queue, 15, 20)]
    # an end inside the stream, and one at exactly the tail, stay as they are
    for last in ("12", "20"):
        inside = AmqpDataSource(
            options(url, queue=queue, queueType="stream", startingOffsets="3", endingOffsets=last)
        )
        inside_reader = inside.reader(inside.schema())
        assert isinstance(inside_reader, StreamQueueBatchReader)
        assert inside_reader.partitions() == [OffsetRange(queue, 3, int(last))], last


def wait_for_next_second() -> int:
    """Sleep into a new wall-clock second, then one more: stream timestamps are per chunk and
    the x-stream-offset timestamp argument is in seconds. The new second's start, in ms."""
    time.sleep(1.0 - time.time() % 1.0 + 1.0)
    return int(time.time()) * 1000


@pytest.mark.rabbitmq
def test_start_and_end_by_timestamp(
    url: str, channel: amqp_blocking.Channel, queues: list[str]
) -> None:
    queue = declare(channel, queues, "stream")
    publish(channel, queue, [b"old%d" % i for i in range(20)])
    cut_ms = wait_for_next_second()
    publish(channel, queue, [b"new%d" % i for i in range(10)])
    for spelling in (
        {"startingTimestamp": str(cut_ms + 999)},  # Kafka's name and unit; second grain
        {"startingOffsets": f"timestamp:{cut_ms // 1000}"},
    ):
        source = AmqpDataSource(options(url, queue=queue, queueType="stream", **spelling))
        assert source.streamReader(source.schema()).initialOffset() == {queue: 20}, spelling
    # a batch read ends (exclusively) at the first offset stored at or after the time
    for spelling in (
        {"endingTimestamp": str(cut_ms)},
        {"endingOffsets": f"timestamp:{cut_ms // 1000}"},
    ):
        source = AmqpDataSource(options(url, queue=queue, queueType="stream", **spelling))
        batch = source.reader(source.schema())
        assert isinstance(batch, StreamQueueBatchReader)
        planned = batch.partitions()
        assert planned == [OffsetRange(queue, 0, 20)], spelling
        assert [
            o
            for p in planned
            if isinstance(p, OffsetRange)
            for o in offsets_of(ship(batch).read(p))
        ] == list(range(20))
    # an end after the last message is the tail
    late = AmqpDataSource(
        options(
            url,
            queue=queue,
            queueType="stream",
            endingTimestamp="4000000000000",
            pollTimeoutMs="300",
        )
    )
    late_reader = late.reader(late.schema())
    assert isinstance(late_reader, StreamQueueBatchReader)
    assert late_reader.partitions() == [OffsetRange(queue, 0, 30)]


@ON_BOTH_BROKERS
def test_admission_control_minimum_with_delay_and_byte_cap(
    url: str, channel: amqp_blocking.Channel, queues: list[str]
) -> None:
    queue = declare(channel, queues, "stream")
    publish(channel, queue, [b"m%d" % i for i in range(30)])
    source = AmqpDataSource(
        options(
            url,
            queue=queue,
            queueType="stream",
            startingOffsets="first",
            minOffsetsPerTrigger="50",  # Kafka's name for minMessagesPerTrigger
            maxTriggerDelay="10s",
        )
    )
    reader = source.streamReader(source.schema())
    assert isinstance(reader, StreamQueueStreamReader)
    assert reader.getDefaultReadLimit() == ReadMinRows(50)
    clock = [1000.0]
    reader._clock = lambda: clock[0]
    start = reader.initialOffset()
    # 30 new < 50: no batch until maxTriggerDelay has passed since the last one
    assert reader.latestOffset(start, ReadMinRows(50)) == start
    clock[0] += 9
    assert reader.latestOffset(start, ReadMinRows(50)) == start
    clock[0] += 2
    assert reader.latestOffset(start, ReadMinRows(50)) == {queue: 30}
    publish(channel, queue, [b"n%d" % i for i in range(60)])
    clock[0] += 1
    assert reader.latestOffset({queue: 30}, ReadMinRows(50)) == {queue: 90}  # 60 >= 50
    publish(channel, queue, [b"x"] * 5)
    assert reader.latestOffset({queue: 90}, ReadMinRows(50)) == {queue: 90}
    # ReadAllAvailable (Trigger.Once) ignores the minimum, and so does AvailableNow
    assert reader.latestOffset({queue: 90}, ReadAllAvailable()) == {queue: 95}
    reader.prepareForTriggerAvailableNow()
    assert reader.latestOffset({queue: 90}, ReadMinRows(50)) == {queue: 95}
    reader.stop()

    # the byte cap becomes rows through the mean size of the last chunk's messages
    sized = declare(channel, queues, "stream")
    publish(channel, sized, [b"y" * 100] * 50)
    capped = AmqpDataSource(
        options(
            url,
            queue=sized,
            queueType="stream",
            startingOffsets="first",
            maxBytesPerTrigger="1000",
        )
    )
    capped_reader = capped.streamReader(capped.schema())
    assert isinstance(capped_reader, StreamQueueStreamReader)
    assert capped_reader.getDefaultReadLimit() == ReadMaxBytes(1000)
    begin = capped_reader.initialOffset()
    assert capped_reader.latestOffset(begin, ReadMaxBytes(1000)) == {sized: 10}
    assert capped_reader.latestOffset({sized: 10}, ReadMaxBytes(1000)) == {sized: 20}
    # with a row cap too, the smaller one wins
    both = AmqpDataSource(
        options(
            url,
            queue=sized,
            queueType="stream",
            startingOffsets="first",
            maxBytesPerTrigger="1000",
            maxOffsetsPerTrigger="4",
        )
    )
    both_reader = both.streamReader(both.schema())
    assert isinstance(both_reader, StreamQueueStreamReader)
    assert both_reader.getDefaultReadLimit() == ReadMaxRows(4)
    assert both_reader.latestOffset(both_reader.initialOffset(), ReadMaxRows(4)) == {sized: 4}
    capped_reader.stop()
    both_reader.stop()


@pytest.fixture
def super_stream(channel: amqp_blocking.Channel) -> Iterator[tuple[str, list[str]]]:
    """A super stream in RabbitMQ's layout: a direct exchange, partitions ``<name>-<n>`` bound
    with routing key ``<n>`` and their order as ``x-stream-partition-order``."""
    name = f"amqp-spark-super-{uuid.uuid4().hex[:10]}"
    channel.exchange_declare(name, "direct", durable=True, arguments={"x-super-stream": True})
    partitions = [f"{name}-{index}" for index in range(3)]
    for index, queue in enumerate(partitions):
        channel.queue_declare(queue, durable=True, arguments={"x-queue-type": "stream"})
        channel.queue_bind(queue, name, str(index), arguments={"x-stream-partition-order": index})
    yield name, partitions
    for queue in partitions:
        channel.queue_delete(queue)
    channel.exchange_delete(name)


@ON_BOTH_BROKERS
def test_super_stream_partitions_read_as_one_source(
    url: str, channel: amqp_blocking.Channel, super_stream: tuple[str, list[str]]
) -> None:
    name, partitions = super_stream
    channel.confirm_select()
    with channel.publisher(window=500) as publisher:
        for index in range(90):
            # 50, 30 and 10 messages: partitions fill unevenly
            key = "0" if index < 50 else "1" if index < 80 else "2"
            publisher.publish(b"%d" % index, exchange=name, routing_key=key)
    source = AmqpDataSource(
        options(url, superStream=name, startingOffsets="first", maxMessagesPerTrigger="60")
    )
    reader = source.streamReader(source.schema())
    assert isinstance(reader, StreamQueueStreamReader)
    start = reader.initialOffset()
    assert start == dict.fromkeys(partitions, 0)
    # each partition's offsets are its own; the row cap is shared fairly
    end = reader.latestOffset(start, ReadMaxRows(60))
    assert end == {partitions[0]: 25, partitions[1]: 25, partitions[2]: 10}
    report = reader.reportLatestOffset()
    assert report is not None
    assert report["offsetsBehindLatest"] == {"min": 0, "avg": 10.0, "max": 25}
    remote = ship(reader)
    bodies = {
        p.queue: [row for batch in remote.read(p) for row in batch.column("body").to_pylist()]
        for p in reader.partitions(start, end)
        if isinstance(p, OffsetRange)
    }
    assert bodies[partitions[2]] == [b"%d" % i for i in range(80, 90)]
    assert bodies[partitions[0]] == [b"%d" % i for i in range(25)]
    final = reader.latestOffset(end, ReadAllAvailable())
    assert final == {partitions[0]: 50, partitions[1]: 30, partitions[2]: 10}
    # a checkpoint of other partitions is refused
    with pytest.raises(ValueError, match="new checkpoint location"):
        reader.latestOffset({partitions[0]: 0}, ReadAllAvailable())
    reader.stop()


@ON_BOTH_BROKERS
def test_retention_gap_is_data_loss(
    url: str, channel: amqp_blocking.Channel, queues: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    # tiny segments and a tiny size limit: the oldest segments are deleted while publishing
    queue = declare(
        channel,
        queues,
        "stream",
        **{"x-max-length-bytes": 2000, "x-stream-max-segment-size-bytes": 500},
    )
    channel.confirm_select()
    for _ in range(200):  # one chunk each (confirmed one by one), so many segments roll
        channel.basic_publish(b"x" * 100, routing_key=queue)
    strict = AmqpDataSource(options(url, queue=queue, queueType="stream", startingOffsets="first"))
    deadline = time.monotonic() + 30
    floors: list[int] = []
    # retention runs in the background: wait until it removed something and stopped moving
    while time.monotonic() < deadline:
        reader = strict.streamReader(strict.schema())
        floors.append(reader.initialOffset()[queue])
        reader.stop()
        if len(floors) >= 5 and floors[-1] > 0 and len(set(floors[-5:])) == 1:
            break
        time.sleep(0.1)
    floor = floors[-1]
    assert floor > 0
    tail = reader.latestOffset({queue: floor}, ReadAllAvailable())[queue]
    with pytest.raises(AmqpDataLossError, match="failOnDataLoss") as caught:
        list(reader.read(OffsetRange(queue, 0, tail)))
    assert caught.value.expected == 0
    # a loaded broker may still have deleted a segment since: the floor only moves up
    first_available = caught.value.first_available
    assert first_available is not None
    assert first_available >= floor
    floor = first_available
    # offsets inside the stream may be gaps (non-message chunks): never reported as loss
    kept = offsets_of(reader.read(OffsetRange(queue, floor, tail)))
    assert kept[0] == floor
    assert kept[-1] == tail - 1
    gaps = sorted(set(range(floor, tail)) - set(kept))
    assert gaps  # segment starts take offsets of their own
    from_gap = offsets_of(reader.read(OffsetRange(queue, gaps[0], tail)))
    assert from_gap == [offset for offset in kept if offset > gaps[0]]

    lenient = AmqpDataSource(
        options(url, queue=queue, queueType="stream", startingOffsets="0", failOnDataLoss="false")
    )
    with caplog.at_level(logging.WARNING, logger="amqp_spark"):
        assert (
            offsets_of(lenient.streamReader(lenient.schema()).read(OffsetRange(queue, 0, tail)))
            == kept
        )
    assert "retention" in caplog.text


@pytest.mark.rabbitmq
@pytest.mark.parametrize("kind", ["classic", "quorum"])
def test_queue_reader_acks_only_after_the_next_read(
    url: str, channel: amqp_blocking.Channel, queues: list[str], kind: str
) -> None:
    queue = declare(channel, queues, kind)
    publish(channel, queue, [b"m%02d" % i for i in range(50)])
    source = AmqpDataSource(options(url, queue=queue, queueType=kind, maxMessagesPerTrigger="20"))
    reader = source.simpleStreamReader(source.schema())
    assert isinstance(reader, QueueStreamReader)
    reader.prepareForTriggerAvailableNow()
    start = reader.initialOffset()
    rows, end = reader.read(start)
    assert end == {"seq": 20}
    assert [b.num_rows for b in rows] == [20]
    # batch 0 is unacked until Spark is past it: 30 ready, 20 held
    assert channel.queue_declare(queue, passive=True).message_count == 30
    rows, end = reader.read(end)  # Spark committed batch 0: it is acked now
    assert end == {"seq": 40}
    batches = list(rows)
    assert [b.column("body").to_pylist()[0] for b in batches] == [b"m20"]
    assert channel.queue_declare(queue, passive=True).message_count == 10

    # the driver dies before batch 1 is committed: exactly that batch comes back
    remote = ship(reader)
    assert list(remote.readBetweenOffsets({"seq": 20}, {"seq": 40})) == []
    consumer = reader._consumer
    assert consumer is not None
    consumer.close()
    again = AmqpDataSource(
        options(url, queue=queue, queueType=kind, maxMessagesPerTrigger="50", pollTimeoutMs="200")
    )
    replay = again.simpleStreamReader(again.schema())
    assert isinstance(replay, QueueStreamReader)
    rows, end = replay.read({"seq": 40})
    (batch,) = list(rows)
    assert end == {"seq": 70}
    data = batch.to_pylist()
    assert sorted(row["body"] for row in data) == [b"m%02d" % i for i in range(20, 50)]
    assert sorted(row["body"] for row in data if row["redelivered"]) == [
        b"m%02d" % i for i in range(20, 40)
    ]
    replay.commit(end)
    rows, end = replay.read(end)
    assert (list(rows), end) == ([], {"seq": 70})
    assert channel.queue_declare(queue, passive=True).message_count == 0


@ON_BOTH_BROKERS
def test_tail_probe_ends_on_a_busy_stream(
    url: str, channel: amqp_blocking.Channel, queues: list[str]
) -> None:
    queue = declare(channel, queues, "stream")
    publish(channel, queue, [b"first"])
    stop = threading.Event()
    published: list[int] = []

    def keep_publishing() -> None:  # never idle for pollIdleMs
        with amqp_blocking.connect(url) as connection, connection.channel() as ch:
            while not stop.is_set():
                ch.basic_publish(b"more", routing_key=queue)
                published.append(1)
                time.sleep(0.002)

    publisher = threading.Thread(target=keep_publishing)
    publisher.start()
    try:
        while len(published) < 50:
            time.sleep(0.01)
        source = AmqpDataSource(options(url, queue=queue, queueType="stream", pollTimeoutMs="300"))
        reader = source.streamReader(source.schema())
        tail = reader.latestOffset({queue: 0}, ReadAllAvailable())[queue]
        reader.stop()
    finally:
        stop.set()
        publisher.join()
    assert 1 <= tail <= len(published) + 1


# --- the executor's consumer, driven on the core in the calling thread -------------------------


@ON_BOTH_BROKERS
def test_range_consumer_outlasts_a_suspended_reader(
    url: str, channel: amqp_blocking.Channel, queues: list[str]
) -> None:
    # heartbeats are off on range connections: Spark suspends the reader between batches,
    # and with the URL's heartbeat of 1 s the broker would drop a silent connection in 2-3 s
    queue = declare(channel, queues, "stream")
    publish(channel, queue, [b"m%d" % i for i in range(10)])
    params = ConnectionParameters.from_url(url + "?heartbeat=1")
    with RangeConsumer(params, "test") as consumer:
        consumer.consume(queue, Int64(0), 5)
        first = [consumer.get(5.0) for _ in range(5)]
        time.sleep(3.5)
        assert all(message is not None for message in first)
        last = first[-1]
        assert last is not None
        consumer.ack(last.delivery_tag)  # credit for the other five
        rest = [consumer.get(5.0) for _ in range(5)]
        assert [m.stream_offset for m in first + rest if m is not None] == list(range(10))
        assert consumer.get(0.2) is None  # the tail: nothing more within the timeout


@pytest.mark.rabbitmq
def test_range_consumer_raises_the_brokers_errors(
    url: str, channel: amqp_blocking.Channel, queues: list[str]
) -> None:
    params = ConnectionParameters.from_url(url)
    with RangeConsumer(params, "test") as consumer:
        consumer.consume(f"amqp-spark-missing-{uuid.uuid4().hex[:10]}", Int64(0), 10)
        with pytest.raises(NotFound, match="no queue"):
            consumer.get(5.0)

    queue = declare(channel, queues, "stream")
    publish(channel, queue, [b"m"])
    name = f"amqp-spark-forced-{uuid.uuid4().hex[:10]}"
    forced = ConnectionParameters.from_url(url + f"?name={name}")
    with RangeConsumer(forced, "test") as consumer:
        consumer.consume(queue, Int64(0), 10)
        assert consumer.get(5.0) is not None
        rabbitmqctl("close_connection", connection_pid(f"{name} test"), "range test")
        with pytest.raises(ConnectionForced, match="range test"):
            consumer.get(5.0)
