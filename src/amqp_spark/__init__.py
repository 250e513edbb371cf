"""amqp_spark: RabbitMQ as a PySpark data source named ``"amqp"``, built on ``amqp_blocking``.

::

    from amqp_spark import register

    register(spark)  # or put pyspark_amqp on the path: Spark then finds it by itself
    df = (spark.readStream.format("amqp")
          .option("url", "amqp://guest:guest@127.0.0.1:5672/")
          .option("queue", "events").option("queueType", "stream")
          .option("startingOffsets", "first").option("maxMessagesPerTrigger", 10000)
          .load())

Stream queues are read exactly once (the checkpoint holds the stream offsets), classic and
quorum queues at least once (a batch is acknowledged only after Spark committed it), and
writes publish with confirms (at least once). See ``docs/spark.md``.
"""

from __future__ import annotations

from ._datasource import AmqpDataSource, register
from ._errors import AmqpDataLossError, AmqpOptionError
from ._options import OPTION_NAMES
from ._schema import source_schema
from ._writer import PublishError

__all__ = [
    "OPTION_NAMES",
    "AmqpDataLossError",
    "AmqpDataSource",
    "AmqpOptionError",
    "PublishError",
    "register",
    "source_schema",
]

for _name in (
    "AmqpDataSource",
    "AmqpDataLossError",
    "AmqpOptionError",
    "PublishError",
    "register",
    "source_schema",
):
    globals()[_name].__module__ = __name__
del _name
