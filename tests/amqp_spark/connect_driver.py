"""A Spark Connect client for tests/amqp_spark/test_connect.py, in a process of its own (a
Connect session and the suite's classic session do not share a process): it starts a local
Connect server (``SparkSession.builder.remote("local[2]")``), registers the source through
the session, and runs an AvailableNow query from a stream queue into a parquet sink. It
prints ``batch <rows>`` per non-empty micro-batch, then ``start error: <option>`` for a
readStream without ``queueType`` (a Connect ``load()`` is lazy: ``start()`` reports it).

    python -m tests.amqp_spark.connect_driver URL QUEUE OUT CHECKPOINT
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    url, queue, out, checkpoint = argv
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession

    import amqp_spark

    spark = (
        SparkSession.builder.remote("local[2]")
        # the server's Python workers import the sources under test, not the installed ones
        .config("spark.executorEnv.PYTHONPATH", os.environ.get("PYTHONPATH", ""))
        .getOrCreate()
    )
    amqp_spark.register(spark)
    query = (
        spark.readStream.format("amqp")
        .option("url", url)
        .option("queue", queue)
        .option("queueType", "stream")
        .option("startingOffsets", "first")
        .option("maxMessagesPerTrigger", "3000")
        .option("numPartitions", "2")
        .load()
        .select("stream_offset", "body")
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    for progress in query.recentProgress:
        if progress.numInputRows:
            print(f"batch {progress.numInputRows}", flush=True)
    try:
        spark.readStream.format("amqp").option("queue", queue).load().writeStream.format(
            "console"
        ).start().stop()
    except PySparkException as exc:
        lines = [line for line in str(exc).splitlines() if "AmqpOptionError" in line]
        print(f"start error: {lines[-1] if lines else exc}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
