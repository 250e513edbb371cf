"""A Structured Streaming job on RabbitMQ: read a stream queue, aggregate, publish the results.

    python examples/spark_pipeline.py [--url amqp://guest:guest@127.0.0.1:5672/] [--orders 2000]

1. Declares a stream queue ``spark-demo-orders`` and publishes JSON orders to it
   (``{"sku": "apple", "qty": 3}``), with ``amqp_blocking``.
2. Runs a Spark query: ``readStream.format("amqp")`` on the stream queue (exactly-once offsets
   in the checkpoint), parses the JSON, sums the quantity per SKU, and
   ``writeStream.format("amqp")`` publishes each updated total to the topic exchange
   ``spark-demo-totals`` with the SKU as routing key, with publisher confirms.
3. Prints the totals that arrive in a queue bound to that exchange, then deletes what it
   declared.

The query runs with ``trigger(availableNow=True)``: it processes what is in the queue in
micro-batches of at most ``maxMessagesPerTrigger`` and stops. Without that trigger (and with
``processingTime``) the same query keeps running as new orders arrive.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import amqp_blocking
from amqp_sansio import BasicProperties

ORDERS = "spark-demo-orders"
TOTALS = "spark-demo-totals"
TOTALS_QUEUE = "spark-demo-totals-all"
SKUS = ("apple", "banana", "cherry", "damson")


def prepare(url: str, count: int) -> None:
    with amqp_blocking.connect(url) as connection, connection.channel() as channel:
        channel.queue_declare(ORDERS, durable=True, arguments={"x-queue-type": "stream"})
        channel.exchange_declare(TOTALS, "topic")
        channel.queue_declare(TOTALS_QUEUE)
        channel.queue_bind(TOTALS_QUEUE, TOTALS, "#")
        channel.confirm_select()
        rng = random.Random(7)
        with channel.publisher(window=500) as publisher:
            for _ in range(count):
                order = {"sku": rng.choice(SKUS), "qty": rng.randint(1, 5)}
                publisher.publish(
                    json.dumps(order).encode(),
                    routing_key=ORDERS,
                    properties=BasicProperties(content_type="application/json"),
                )
    print(f"published {count} orders to stream queue {ORDERS!r}")


def run_query(spark: SparkSession, url: str, checkpoint: str) -> None:
    orders = (
        spark.readStream.format("amqp")
        .option("url", url)
        .option("queue", ORDERS)
        .option("queueType", "stream")
        .option("startingOffsets", "first")
        .option("maxMessagesPerTrigger", "500")
        .option("numPartitions", "2")
        .load()
    )
    order = F.from_json(F.col("body").cast("string"), "sku string, qty int")
    totals = (
        orders.select(order.alias("order"))
        .groupBy("order.sku")
        .agg(F.sum("order.qty").alias("quantity"), F.count("*").alias("orders"))
    )
    messages = totals.select(
        F.to_json(F.struct("sku", "quantity", "orders")).alias("body"),
        F.col("sku").alias("routing_key"),
        F.lit("application/json").alias("content_type"),
    )
    query = (
        messages.writeStream.format("amqp")
        .outputMode("complete")  # every micro-batch publishes all totals so far
        .option("url", url)
        .option("exchange", TOTALS)
        .option("messageIdMode", "deterministic")  # a replayed batch repeats its ids
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    batches = [p.numInputRows for p in query.recentProgress if p.numInputRows]
    print(f"query read {sum(batches)} orders in micro-batches of {batches}")


def show_totals(url: str) -> None:
    latest: dict[str, dict[str, int]] = {}
    with amqp_blocking.connect(url) as connection, connection.channel() as channel:
        channel.basic_qos(100)
        with channel.consume(TOTALS_QUEUE, timeout=1.0) as consumer:
            for message in consumer:
                total = json.loads(message.body)
                latest[total["sku"]] = total  # later updates replace earlier ones
                message.ack()
    for sku, total in sorted(latest.items()):
        print(f"{sku:8} {total['quantity']:6} items in {total['orders']:5} orders")


def clean_up(url: str) -> None:
    with amqp_blocking.connect(url) as connection, connection.channel() as channel:
        channel.queue_delete(ORDERS)
        channel.queue_delete(TOTALS_QUEUE)
        channel.exchange_delete(TOTALS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--orders", type=int, default=2000)
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need this venv
    prepare(args.url, args.orders)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("amqp pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        with tempfile.TemporaryDirectory() as checkpoint:
            # format("amqp") is found through the pyspark_amqp module; amqp_spark.register(spark)
            # does the same explicitly.
            run_query(spark, args.url, checkpoint)
        show_totals(args.url)
    finally:
        spark.stop()
        clean_up(args.url)


if __name__ == "__main__":
    main()
