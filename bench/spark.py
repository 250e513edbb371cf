"""The amqp data source on local[2] beside a plain pika script doing the same work on one core.

    .venv/bin/python bench/spark.py                      # 200,000 reads, 50,000 writes, 64 B
    .venv/bin/python bench/spark.py --master "local-cluster[2,1,1024]"   # real executors
    .venv/bin/python bench/spark.py --master standalone  # a standalone cluster it starts
    AMQP_SPARK_MASTER="local-cluster[2,1,1024]" .venv/bin/python bench/spark.py
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

``--master`` (default: ``AMQP_SPARK_MASTER``, else ``local[2]``) chooses where the tasks run.
``local-cluster[E,C,M]`` starts E executor JVMs of C cores and M MiB each (separate processes,
as on a cluster; about 45-60 s to start here): the data source's rows then leave the Python
workers of other JVMs. The read uses one partition per executor core, and the report divides
the data source's rows/s by the executor cores (E x C; N for ``local[N]``) next to pika's rows/s
on its one core (goal, issue 20: at least 2x per core). On a machine whose cores the executors
share with the broker and the driver, wall-clock rows/s per core says as much about the broker
as about the readers, so the report also gives **rows per CPU second**: the rows over the CPU
time the read took in every process Spark started (the driver JVM, the executor JVMs and their
Python workers: the process tree under the driver JVM, from ``/proc``), next to the rows over
the CPU time of the pika read (this process, ``time.process_time``).

``--master standalone`` starts a Spark standalone cluster on loopback for the run (a master
and two workers of one core each, JVMs of their own from PySpark's ``spark-class``, as
``tests/amqp_spark/test_cluster.py`` does) and stops it at the end; the CPU figures then add
the workers' process trees (their executor JVMs and Python workers) to the driver's.

``--executor`` leaves Spark out and reads the whole stream in this process, the way one
executor reads its range, three ways: pika as above, a consumer of ``amqp_blocking.connect``
(its I/O thread) filling the same Arrow batches, and the data source's own
``read_stream_range`` (the core driven in the calling thread). It prints messages/s, the
client's CPU per message (``time.process_time``) and, when ``pgrep beam.smp`` finds the local
broker, the broker's CPU per message (``/proc/<pid>/stat``); the median of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pika
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, LongType, StructField, StructType

import amqp_blocking
from amqp_sansio import Int64
from amqp_spark._connections import read_stream_range
from amqp_spark._offsets import OffsetRange
from amqp_spark._options import parse_options
from amqp_spark._schema import RecordBatchBuilder, output_columns

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from tests.support.spark_cluster import StandaloneCluster

GOAL = 2.0
#: ``--master standalone``: workers of one core each.
STANDALONE_WORKERS = 2
#: What the read cases produce: the offset and the body of each message.
READ_SCHEMA = StructType(
    [StructField("stream_offset", LongType()), StructField("body", BinaryType())]
)


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


def executor_cores(master: str) -> int:
    """The cores tasks run on: ``local[N]``, ``local[*]`` or ``local-cluster[E,C,M]``."""
    inside = master[master.find("[") + 1 : master.rfind("]")] if "[" in master else "1"
    if master == "standalone":
        return STANDALONE_WORKERS
    if master.startswith("local-cluster"):
        executors, cores, _memory = (int(part) for part in inside.split(","))
        return executors * cores
    if master.startswith("local"):
        return (os.cpu_count() or 1) if inside == "*" else int(inside)
    raise SystemExit(
        f"--master: only local[N], local-cluster[E,C,M] and standalone are measured, not {master}"
    )


def spark_read(
    spark: SparkSession,
    url: str,
    queue: str,
    count: int,
    all_columns: bool = False,
    partitions: int = 2,
) -> float:
    started = time.perf_counter()
    reader = spark.read.format("amqp")
    if not all_columns:  # the same work as the pika script: offset and body
        reader = reader.schema(READ_SCHEMA)
    row = (
        reader.option("url", url)
        .option("queue", queue)
        .option("queueType", "stream")
        .option("startingOffsets", "0")
        .option("endingOffsets", str(count))
        .option("numPartitions", str(partitions))
        .load()
        .agg(F.count("*").alias("n"), F.min("stream_offset"), F.max("stream_offset"))
        .collect()[0]
    )
    elapsed = time.perf_counter() - started
    assert tuple(row) == (count, 0, count - 1), row
    return elapsed


def threaded_read(url: str, queue: str, count: int) -> float:
    """One executor's read through ``amqp_blocking.connect``'s consumer (its I/O thread)."""
    rows = RecordBatchBuilder(output_columns(READ_SCHEMA))
    started = time.perf_counter()
    with amqp_blocking.connect(url) as connection, connection.channel() as channel:
        channel.basic_qos(2000)
        consumer = channel.basic_consume(queue, arguments={"x-stream-offset": Int64(0)})
        for seen in range(1, count + 1):
            message = consumer.get(30.0)
            if message is None:
                raise RuntimeError("amqp_blocking: the stream stopped delivering")
            rows.append(queue, message)
            if len(rows) == 10_000:
                rows.build()
            if seen % 500 == 0:
                message.ack(multiple=True)
        rows.build()
        consumer.close()
    return time.perf_counter() - started


def range_read(url: str, queue: str, count: int) -> float:
    """One executor's read as the data source does it (``read_stream_range``)."""
    options = parse_options({"url": url, "queue": queue, "queueType": "stream"})
    columns = output_columns(READ_SCHEMA)
    started = time.perf_counter()
    batches = read_stream_range(
        options.connection, options.source, columns, OffsetRange(queue, 0, count)
    )
    rows = sum(batch.num_rows for batch in batches)
    assert rows == count, rows
    return time.perf_counter() - started


def broker_cpu() -> Callable[[], float] | None:
    """Seconds of CPU the local RabbitMQ has used so far, when its process can be found."""
    try:
        found = subprocess.run(["pgrep", "beam.smp"], capture_output=True, text=True, check=True)
        pid = found.stdout.split()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")

    def seconds() -> float:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / ticks

    return seconds


def tree_cpu(root: int) -> float:
    """CPU seconds used so far by process *root* and every process under it (the children
    that ended and were waited for included), from ``/proc``."""
    children: dict[int, list[int]] = {}
    times: dict[int, float] = {}
    ticks = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)
        # utime, stime, cutime, cstime
        times[pid] = sum(int(field) for field in fields[11:15]) / ticks
    total = 0.0
    todo = [root]
    while todo:
        pid = todo.pop()
        total += times.get(pid, 0.0)
        todo += children.get(pid, [])
    return total


def executor_main(url: str, count: int, size: int, repeat: int) -> None:
    queue = f"bench-spark-executor-{uuid.uuid4().hex[:8]}"
    fill_stream(url, queue, count, size)
    broker = broker_cpu()
    readers: list[tuple[str, Callable[[str, str, int], float]]] = [
        ("pika", pika_read),
        ("amqp_blocking consumer", threaded_read),
        ("read_stream_range", range_read),
    ]
    samples: dict[str, list[tuple[float, float, float | None]]] = {name: [] for name, _ in readers}
    try:
        for _ in range(repeat):
            for name, read in readers:
                cpu = time.process_time()
                before = broker() if broker is not None else None
                seconds = read(url, queue, count)
                used = time.process_time() - cpu
                spent = None if broker is None or before is None else broker() - before
                samples[name].append((seconds, used, spent))
    finally:
        with amqp_blocking.connect(url) as connection, connection.channel() as channel:
            channel.queue_delete(queue)
    print(f"{count:,} stream messages of {size} B read in this process, median of {repeat}")
    print(f"{'reader':24} {'msgs/s':>10} {'client us/msg':>14} {'broker us/msg':>14}")
    for name, runs in samples.items():
        seconds = statistics.median(run[0] for run in runs)
        client = statistics.median(run[1] for run in runs) / count * 1e6
        broker_spent = [run[2] for run in runs if run[2] is not None]
        broker_us = (
            f"{statistics.median(broker_spent) / count * 1e6:14.1f}"
            if broker_spent
            else f"{'-':>14}"
        )
        print(f"{name:24} {count / seconds:10,.0f} {client:14.1f} {broker_us}")


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
        "--master",
        default=os.environ.get("AMQP_SPARK_MASTER", "local[2]"),
        help="local[N], local-cluster[E,C,M] or standalone (default: AMQP_SPARK_MASTER, else "
        "local[2])",
    )
    parser.add_argument(
        "--all-columns", action="store_true", help="the data source fills all 10 columns"
    )
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument(
        "--executor", action="store_true", help="no Spark: one executor's read, three ways"
    )
    args = parser.parse_args()
    if args.executor:
        executor_main(args.url, args.read, args.size, args.repeat)
        return

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    stream = f"bench-spark-stream-{uuid.uuid4().hex[:8]}"
    target = f"bench-spark-target-{uuid.uuid4().hex[:8]}"
    fill_stream(args.url, stream, args.read, args.size)
    with amqp_blocking.connect(args.url) as connection, connection.channel() as channel:
        channel.queue_declare(target)
    cores = executor_cores(args.master)
    with contextlib.ExitStack() as stack:
        master, cluster_pids = args.master, []
        if args.master == "standalone":
            cluster = stack.enter_context(standalone(stack))
            master, cluster_pids = cluster.url, [worker.pid for worker in cluster.workers]
        bench_spark(args, stream, target, master, cores, cluster_pids)


@contextlib.contextmanager
def standalone(stack: contextlib.ExitStack) -> Iterator[StandaloneCluster]:
    """A standalone cluster for the run (the test suite's helper, from the repository)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.support.spark_cluster import standalone_cluster

    root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-spark-")))
    with standalone_cluster(root, STANDALONE_WORKERS) as cluster:
        os.environ.update({k: v for k, v in cluster.env.items() if k.startswith(("SPARK", "PY"))})
        yield cluster


def bench_spark(
    args: argparse.Namespace,
    stream: str,
    target: str,
    master: str,
    cores: int,
    cluster_pids: list[int],
) -> None:
    started = time.perf_counter()
    builder = SparkSession.builder.master(master)
    if cluster_pids:
        builder = (
            builder.config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.executor.memory", "768m")
        )
    spark = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session_seconds = time.perf_counter() - started
    spark.sparkContext.setLogLevel("ERROR")
    try:
        spark_read(spark, args.url, stream, min(args.read, 1000))  # warm-up
        spark_write(spark, args.url, target, 100)
        purge(args.url, target)
        url: str = args.url
        reads: int = args.read
        writes: int = args.write
        all_columns: bool = args.all_columns
        gateway = spark.sparkContext._gateway
        assert gateway is not None  # the JVM pyspark started (java_gateway.launch_gateway)
        driver_jvm: int = gateway.proc.pid
        # CPU seconds of each read, by case: pika's process time, Spark's whole process tree.
        cpu: dict[str, list[float]] = {"pika read": [], "spark read": []}

        def pika_case() -> float:
            used = time.process_time()
            seconds = pika_read(url, stream, reads)
            cpu["pika read"].append(time.process_time() - used)
            return seconds

        roots = [driver_jvm, *cluster_pids]

        def spark_case() -> float:
            used = sum(tree_cpu(root) for root in roots)
            seconds = spark_read(spark, url, stream, reads, all_columns, cores)
            cpu["spark read"].append(sum(tree_cpu(root) for root in roots) - used)
            return seconds

        read_cases: list[tuple[str, Callable[[], float]]] = [
            ("pika read", pika_case),
            ("spark read", spark_case),
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
    per_core = rates["spark read"] / cores / rates["pika read"]
    print(
        f"read per executor core: {rates['spark read'] / cores:,.0f} rows/s on each of {cores} "
        f"cores ({master}, session start {session_seconds:.0f} s) / pika's "
        f"{rates['pika read']:,.0f} on one = {per_core:.2f}x "
        f"({'meets' if per_core >= GOAL else 'misses'} the {GOAL:.0f}x goal)"
    )
    per_cpu = {name: args.read / statistics.median(used) for name, used in cpu.items()}
    cpu_ratio = per_cpu["spark read"] / per_cpu["pika read"]
    print(
        f"read per CPU second (median of {args.repeat}): Spark's processes "
        f"{per_cpu['spark read']:,.0f} rows (driver and executor JVMs, Python workers), pika "
        f"{per_cpu['pika read']:,.0f} = {cpu_ratio:.2f}x"
    )
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(
                {
                    "rates": rates,
                    "seconds": times,
                    "ratios": ratios,
                    "read_per_core_ratio": per_core,
                    "read_cpu_seconds": cpu,
                    "read_rows_per_cpu_second": per_cpu,
                    "read_per_cpu_ratio": cpu_ratio,
                    "cores": cores,
                    "session_seconds": session_seconds,
                    "load_average": load,
                    "args": vars(args),
                },
                out,
            )


if __name__ == "__main__":
    main()
