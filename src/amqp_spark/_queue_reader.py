"""Classic and quorum queues: at-least-once micro-batches consumed on the driver.

Consuming removes messages from such a queue, so nothing can be replayed: the reader keeps a
batch *unacknowledged* until Spark is past it. Spark plans batch N+1 only after batch N is in
its commit log, so the next ``read(start)`` (and ``commit``, as a fallback) acknowledges
everything up to ``start``. If the driver dies first, the broker requeues the batch and it
comes back (``redelivered=true``) in a later batch: duplicates are limited to the batch that
was in flight.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pyspark.sql.datasource import SimpleDataSourceStreamReader

from ._compat import SupportsTriggerAvailableNow
from ._connections import QueueConsumer
from ._schema import build_record_batch

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    import pyarrow as pa

    from ._options import AmqpOptions
    from ._schema import OutputColumn

__all__ = ["DEFAULT_QUEUE_BATCH", "QueueStreamReader"]

logger = logging.getLogger("amqp_spark")

#: Batch size cap (and prefetch) when ``maxMessagesPerTrigger`` is not set.
DEFAULT_QUEUE_BATCH = 1000

_KEY = "seq"


def _sequence(offset: Mapping[str, object]) -> int:
    value = offset.get(_KEY)
    if set(offset) != {_KEY} or isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(
            f"the checkpoint holds offset {dict(offset)!r}, not a classic/quorum queue offset "
            '{"seq": n}; start the query with a new checkpoint location'
        )
    return value


class QueueStreamReader(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream`` on classic or quorum queues (``queueType=classic|quorum``).

    Offsets are a count of messages handed to Spark, ``{"seq": n}``; they mean nothing to the
    broker. Every method runs in Spark's long-lived streaming worker on the driver, where the
    consumer and its delivery tags live.
    """

    def __init__(self, options: AmqpOptions, columns: tuple[OutputColumn, ...]) -> None:
        self._options = options
        self._columns = columns
        self._limit = options.source.max_messages_per_trigger or DEFAULT_QUEUE_BATCH
        self._consumer: QueueConsumer | None = None
        self._remaining: int | None = None  # AvailableNow: messages still to take

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state["_consumer"] = None
        return state

    def _queue_consumer(self) -> QueueConsumer:
        if self._consumer is None:
            # prefetch = batch cap: the batch stays unacked until Spark committed it
            self._consumer = QueueConsumer(
                self._options.connection, self._options.source, self._limit
            )
        return self._consumer

    def initialOffset(self) -> dict[str, int]:
        """A new query starts counting at 0; the queue decides what comes first."""
        return {_KEY: 0}

    def prepareForTriggerAvailableNow(self) -> None:
        """Take only the messages ready now (the queue depth), then report no more data."""
        self._remaining = self._queue_consumer().depth()
        logger.info("AvailableNow: %d message(s) ready", self._remaining)

    def read(self, start: Mapping[str, object]) -> tuple[Iterator[pa.RecordBatch], dict[str, int]]:
        """Acknowledge every batch before ``start`` (Spark committed them), then take the next
        batch of at most ``maxMessagesPerTrigger`` messages."""
        sequence = _sequence(start)
        consumer = self._queue_consumer()
        consumer.ack_through(sequence)
        limit = self._limit if self._remaining is None else min(self._limit, self._remaining)
        rows = consumer.take(limit, sequence)
        if self._remaining is not None:
            self._remaining -= len(rows)
        if not rows:
            return iter([]), {_KEY: sequence}
        # a list iterator: Spark copies cached iterators, which a generator cannot do
        batch = build_record_batch(self._columns, rows)
        return iter([batch]), {_KEY: sequence + len(rows)}

    def readBetweenOffsets(
        self, start: Mapping[str, object], end: Mapping[str, object]
    ) -> Iterator[pa.RecordBatch]:
        """Replaying an uncommitted batch after a restart: its messages are not here any more.
        The broker requeued them when the old driver went away; they arrive again, marked
        redelivered, in a later batch."""
        logger.warning(
            "batch %s..%s was not committed before the restart; its messages return as "
            "redeliveries in a later batch",
            _sequence(start),
            _sequence(end),
        )
        return iter([])

    def commit(self, end: Mapping[str, object]) -> None:
        """Fallback acknowledgement (Spark calls it late: after planning the next batch)."""
        if self._consumer is not None:
            self._consumer.ack_through(_sequence(end))
