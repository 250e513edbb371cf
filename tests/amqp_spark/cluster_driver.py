"""A Spark driver for tests/amqp_spark/test_cluster.py, run as its own process so the test can
``kill -9`` it: an AvailableNow query from an ``amqp`` queue into a parquet sink with a
checkpoint, on the given master. It prints ``batch <id> <rows>`` as each micro-batch completes
and ``done`` when the query ends.

    python -m tests.amqp_spark.cluster_driver MASTER URL QUEUE QUEUE_TYPE OUT CHECKPOINT
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    master, url, queue, queue_type, out, checkpoint = argv
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName("amqp_spark cluster test")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "768m")
        .config("spark.executor.memory", "512m")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.pollingDelay", "50ms")
        .config("spark.python.authenticate.socketTimeout", "120s")
        # a lost executor's tasks run again elsewhere; give them room on a loaded machine
        .config("spark.task.maxFailures", "8")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    reader = (
        spark.readStream.format("amqp")
        .option("url", url)
        .option("queue", queue)
        .option("queueType", queue_type)
        .option("maxMessagesPerTrigger", "20000")
    )
    if queue_type == "stream":
        reader = reader.option("startingOffsets", "first").option("numPartitions", "2")
    query = (
        reader.load()
        .select("body", "stream_offset", "redelivered")
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    reported = 0
    while not query.awaitTermination(1):
        reported = _report(query.recentProgress, reported)
    _report(query.recentProgress, reported)
    print("done", flush=True)
    spark.stop()
    return 0


def _report(progress: object, reported: int) -> int:
    assert isinstance(progress, list)
    for entry in progress[reported:]:
        print(f"batch {entry.batchId} {entry.numInputRows}", flush=True)
    return len(progress)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
