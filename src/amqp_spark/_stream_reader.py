"""Stream queues: exactly-once micro-batches, and batch reads over an offset range.

The Spark offset *is* the RabbitMQ stream offset: ``{"<queue>": <next offset to read>}``.
A batch ``[start, end)`` is split into :class:`OffsetRange` partitions which executors read
with ``x-stream-offset = start``. Replaying a batch after a failure reads the same offsets
again, so with an idempotent sink (Spark's file sinks, ``foreachBatch`` keyed by batch id)
every message lands exactly once, for as long as retention keeps the offsets.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from ._connections import StreamProbe, read_stream_range
from ._offsets import OffsetRange, OffsetSpec, allocate_rows, checkpoint_offsets, plan_ranges

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    import pyarrow as pa

    from ._options import AmqpOptions
    from ._schema import OutputColumn

__all__ = ["StreamQueueBatchReader", "StreamQueueStreamReader"]

logger = logging.getLogger("amqp_spark")


class _ProbeHolder:
    """A lazily created :class:`StreamProbe` that is never pickled (it holds a socket)."""

    _probe: StreamProbe | None

    def __init__(self, options: AmqpOptions) -> None:
        self._options = options
        self._probe = None

    def probe(self) -> StreamProbe:
        if self._probe is None:
            self._probe = StreamProbe(self._options.connection, self._options.source)
        return self._probe

    def close_probe(self) -> None:
        probe, self._probe = self._probe, None
        if probe is not None:
            probe.close()

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state["_probe"] = None
        return state

    def next_offsets(self) -> dict[str, int]:
        probe = self.probe()
        return {q: probe.next_offset(q) for q in self._options.source.queues}

    def resolve(self, specs: Mapping[str, OffsetSpec]) -> dict[str, int]:
        probe = self.probe()
        return {q: probe.resolve(q, specs[q]) for q in self._options.source.queues}


class StreamQueueStreamReader(_ProbeHolder, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream`` on stream queues (``queueType=stream``).

    Driver side (Spark's long-lived streaming worker): offsets, tails and planning, over one
    lazily opened connection. Executor side: :meth:`read` of one :class:`OffsetRange`.
    """

    def __init__(self, options: AmqpOptions, columns: tuple[OutputColumn, ...]) -> None:
        super().__init__(options)
        self._columns = columns
        self._initial: dict[str, int] | None = None
        self._target: dict[str, int] | None = None
        self._latest: dict[str, int] | None = None

    def initialOffset(self) -> dict[str, int]:
        """``startingOffsets`` (default ``next``) resolved to numbers, once per query run, so
        Spark's repeated calls agree."""
        if self._initial is None:
            source = self._options.source
            specs = source.starting_offsets or dict.fromkeys(source.queues, OffsetSpec("next"))
            self._initial = self.resolve(specs)
            logger.info("starting offsets %s", self._initial)
        return dict(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxMessagesPerTrigger`` as ``ReadMaxRows``; without it, all available."""
        limit = self._options.source.max_messages_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the tails now: an AvailableNow query stops there, whatever arrives later."""
        self._target = self.next_offsets()
        logger.info("AvailableNow target offsets %s", self._target)

    def latestOffset(self, start: Mapping[str, object], limit: ReadLimit) -> dict[str, int]:
        """The end of the next batch: the tails, capped by the AvailableNow target and by
        ``ReadMaxRows`` (shared fairly between queues)."""
        queues = self._options.source.queues
        begin = checkpoint_offsets(start, queues)
        tails = self.next_offsets()
        self._latest = dict(tails)
        if self._target is not None:
            tails = {q: min(tails[q], self._target[q]) for q in queues}
        available = {q: max(0, tails[q] - begin[q]) for q in queues}
        if isinstance(limit, ReadMaxRows):
            granted = allocate_rows(available, limit.max_rows)
        else:
            granted = available
        return {q: begin[q] + granted[q] for q in queues}

    def reportLatestOffset(self) -> dict[str, int] | None:
        """The tails seen by the last :meth:`latestOffset` (query progress only)."""
        return None if self._latest is None else dict(self._latest)

    def partitions(
        self, start: Mapping[str, object], end: Mapping[str, object]
    ) -> list[InputPartition]:
        """``[start, end)`` per queue, split by ``numPartitions``/``maxMessagesPerPartition``."""
        queues = self._options.source.queues
        source = self._options.source
        return list(
            plan_ranges(
                checkpoint_offsets(start, queues),
                checkpoint_offsets(end, queues),
                num_partitions=source.num_partitions,
                max_messages_per_partition=source.max_messages_per_partition,
            )
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Executor: the messages of one offset range as Arrow record batches."""
        if not isinstance(partition, OffsetRange):
            raise TypeError(f"expected an OffsetRange partition, got {type(partition).__name__}")
        return read_stream_range(
            self._options.connection, self._options.source, self._columns, partition
        )

    def commit(self, end: Mapping[str, object]) -> None:
        """Nothing to do: the checkpoint, not the broker, remembers how far the query got."""
        logger.debug("committed offsets %s", dict(end))

    def stop(self) -> None:
        """Close the probe connection (Spark 4.3 usually kills the worker instead)."""
        self.close_probe()


class StreamQueueBatchReader(_ProbeHolder, DataSourceReader):
    """``spark.read`` on stream queues: offsets ``startingOffsets`` (default ``first``) up to
    ``endingOffsets`` (default: the tail when the query is planned), read on executors."""

    def __init__(self, options: AmqpOptions, columns: tuple[OutputColumn, ...]) -> None:
        super().__init__(options)
        self._columns = columns

    def partitions(self) -> list[InputPartition]:
        """Resolve both ends on the driver and split the ranges."""
        source = self._options.source
        try:
            start = self.resolve(
                source.starting_offsets or dict.fromkeys(source.queues, OffsetSpec("first"))
            )
            end = self.resolve(
                source.ending_offsets or dict.fromkeys(source.queues, OffsetSpec("next"))
            )
            if source.ending_offsets is not None:
                # an end past the tail would wait for offsets nobody wrote yet
                probe = self.probe()
                end = {q: probe.cap_at_tail(q, end[q]) for q in source.queues}
        finally:
            self.close_probe()
        for queue in source.queues:
            if end[queue] < start[queue]:
                raise ValueError(
                    f"queue {queue!r}: endingOffsets resolves to {end[queue]}, before "
                    f"startingOffsets ({start[queue]})"
                )
        return list(
            plan_ranges(
                start,
                end,
                num_partitions=source.num_partitions,
                max_messages_per_partition=source.max_messages_per_partition,
            )
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Executor: one offset range (Spark sends a placeholder when nothing was planned)."""
        if not isinstance(partition, OffsetRange):
            return iter(())
        return read_stream_range(
            self._options.connection, self._options.source, self._columns, partition
        )
