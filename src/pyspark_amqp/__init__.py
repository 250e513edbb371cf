"""Automatic registration of the ``amqp`` data source.

On its first Python data source lookup, Spark imports every top-level module named
``pyspark_*`` and registers its ``DefaultSource`` under ``DefaultSource.name()``. With this
package installed, ``spark.read.format("amqp")`` works without ``amqp_spark.register(spark)``.
"""

from __future__ import annotations

import logging

__all__ = ["DefaultSource"]

try:
    from amqp_spark import AmqpDataSource as DefaultSource
except ImportError as exc:
    # An exception here would break Spark's lookup of every Python data source, not just ours.
    logging.getLogger("amqp_spark").warning("the amqp data source is not available: %s", exc)
