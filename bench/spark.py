"""The amqp data source on local[2] beside a plain pika script doing the same work on one core.

    .venv/bin/python bench/spark.py                      # 200,000 reads, 50,000 writes, 64 B
    .venv/bin/python bench/spark.py --read 20000 --write 5000 --size 1024
    .venv/bin/python bench/spark.py --json out.json

**read**: a stream queue holds N messages. pika (1.4.4, ``BlockingConnection``) consumes it
from offset 0 with prefetch 1000, acknowledging every 500 messages (a stream consumer's credit),
and keeps each message's ``x-stream-offset``; the clock stops at the Nth message. The data source
runs ``spark.read.format("amqp")`` over offsets ``[0, N)`` in 2 partitions with the schema
``stream_offset bigint, body binary`` (``--all-columns``: all ten columns) and aggregates the
offsets (count, min, max) so every row passes through Spark; the clock includes planning (the
driver resolves the offsets) and the job.

**write**: N rows become N messages (the body is the row number as text, transient, mandatory)
published to a classic queue with publisher confirms. pika's ``BlockingChannel`` confirms each
publish before the next (it has no pipelined confirms); the data source publishes from 2 tasks,
each with up to ``maxInFlight`` (1000) unconfirmed. The clock includes the Spark job.

Both Spark measurements run after a small warm-up query, so they exclude the JVM start and the
first spawn of Python workers. Each figure is the best of ``--repeat`` runs (default 2).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import uuid
from typing import TYPE_CHECKING

import pika
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import amqp_blocking

if TYPE_CHECKING:
    from collections.abc import Callable

GOAL = 2.0


def fill_stream(url: str, queue: str, count: int, size: int) -> None:
    body = b"x" * size
    with amqp_blocking.connect(url) as connection, connection.channel() as channel:
        channel.queue_declare(queue, durable=True, arguments={"x-queue-type": "stream"})
        channel.confirm_select()
        with channel.publisher(window=2000) as publisher:
            for _ in range(count):
                publisher.publish(body, routing_key=queue)


def pika_read(url: str, queue: str, count: int) -> float:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=1000)
    offsets: list[int] = []
    started = time.perf_counter()
    for method, properties, _body in channel.consume(
        queue, arguments={"x-stream-offset": 0}, inactivity_timeout=30
    ):
        if method is None:
            raise RuntimeError("pika: the stream stopped delivering")
        offsets.append(properties.headers["x-stream-offset"])
        if len(offsets) % 500 == 0:
            channel.basic_ack(method.delivery_tag, multiple=True)
        if len(offsets) == count:
            break
    elapsed = time.perf_counter() - started
    # pika rejects buffered deliveries on cancel, and a stream queue answers by closing the
    # connection: whatever pika raises on the way out does not matter here
    with contextlib.suppress(Exception):
        connection.close()
    assert offsets == list(range(count))
    return elapsed


def spark_read(
    spark: SparkSession, url: str, queue: str, count: int, all_columns: bool = False
) -> float:
    started = time.perf_counter()
    reader = spark.read.format("amqp")
    if not all_columns:  # the same work as the pika script: offset and body
        reader = reader.schema("stream_offset bigint, body binary")
    row = (
        reader.option("url", url)
        .option("queue", queue)
        .option("queueType", "stream")
        .option("startingOffsets", "0")
        .option("endingOffsets", str(count))
        .option("numPartitions", "2")
        .load()
        .agg(F.count("*").alias("n"), F.min("stream_offset"), F.max("stream_offset"))
        .collect()[0]
    )
    elapsed = time.perf_counter() - started
    assert tuple(row) == (count, 0, count - 1), row
    return elapsed


def pika_write(url: str, queue: str, count: int) -> float:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.confirm_delivery()
    started = time.perf_counter()
    for i in range(count):
        channel.basic_publish("", queue, str(i).encode(), mandatory=True)
    elapsed = time.perf_counter() - started
    connection.close()
    return elapsed


def spark_write(spark: SparkSession, url: str, queue: str, count: int) -> float:
    rows = spark.range(count, numPartitions=2).select(F.col("id").cast("string").alias("body"))
    started = time.perf_counter()
    (
        rows.write.format("amqp")
        .option("url", url)
        .option("routingKey", queue)
        .option("deliveryMode", "1")
        .option("maxInFlight", "1000")
        .mode("append")
        .save()
    )
    return time.perf_counter() - started


def queue_depth(url: str, queue: str) -> int:
    with amqp_blocking.connect(url) as connection, connection.channel() as channel:
        return channel.queue_declare(queue, passive=True).message_count


def purge(url: str, queue: str) -> None:
    with amqp_blocking.connect(url) as connection, connection.channel() as channel:
        channel.queue_purge(queue)


def wait_for_depth(url: str, queue: str, count: int) -> None:
    deadline = time.monotonic() + 60
    while queue_depth(url, queue) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    assert queue_depth(url, queue) == count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--url", default=os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
    )
    parser.add_argument("--read", type=int, default=200_000, help="messages read")
    parser.add_argument("--write", type=int, default=50_000, help="messages written")
    parser.add_argument("--size", type=int, default=64, help="body size of the read messages")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--all-columns", action="store_true", help="the data source fills all 10 columns"
    )
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    stream = f"bench-spark-stream-{uuid.uuid4().hex[:8]}"
    target = f"bench-spark-target-{uuid.uuid4().hex[:8]}"
    fill_stream(args.url, stream, args.read, args.size)
    with amqp_blocking.connect(args.url) as connection, connection.channel() as channel:
        channel.queue_declare(target)
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        spark_read(spark, args.url, stream, min(args.read, 1000))  # warm-up
        spark_write(spark, args.url, target, 100)
        purge(args.url, target)
        url: str = args.url
        reads: int = args.read
        writes: int = args.write
        all_columns: bool = args.all_columns
        read_cases: list[tuple[str, Callable[[], float]]] = [
            ("pika read", lambda: pika_read(url, stream, reads)),
            ("spark read", lambda: spark_read(spark, url, stream, reads, all_columns)),
        ]
        write_cases: list[tuple[str, Callable[[], float]]] = [
            ("pika write", lambda: pika_write(url, target, writes)),
            ("spark write", lambda: spark_write(spark, url, target, writes)),
        ]
        times: dict[str, float] = {}
        for _ in range(args.repeat):
            for name, run in read_cases:
                times[name] = min(times.get(name, float("inf")), run())
            for name, run in write_cases:
                times[name] = min(times.get(name, float("inf")), run())
                wait_for_depth(url, target, writes)
                purge(url, target)
    finally:
        spark.stop()
        with amqp_blocking.connect(args.url) as connection, connection.channel() as channel:
            channel.queue_delete(stream)
            channel.queue_delete(target)

    rates = {
        name: (args.read if "read" in name else args.write) / seconds
        for name, seconds in times.items()
    }
    print(f"{'case':12} {'rows/s':>10} {'seconds':>8}")
    for name, rate in rates.items():
        print(f"{name:12} {rate:10.0f} {times[name]:8.2f}")
    ratios = {kind: rates[f"spark {kind}"] / rates[f"pika {kind}"] for kind in ("read", "write")}
    for kind, ratio in ratios.items():
        verdict = "meets" if ratio >= GOAL else "misses"
        print(f"{kind}: data source / pika = {ratio:.2f}x ({verdict} the {GOAL:.0f}x goal)")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"rates": rates, "seconds": times, "ratios": ratios, "args": vars(args)}, out)


if __name__ == "__main__":
    main()
