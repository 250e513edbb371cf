"""Stream queues: exactly-once micro-batches, and batch reads over an offset range.

The Spark offset *is* the RabbitMQ stream offset: ``{"<queue>": <next offset to read>}``.
A batch ``[start, end)`` is split into :class:`OffsetRange` partitions which executors read
with ``x-stream-offset = start``. Replaying a batch after a failure reads the same offsets
again, so with an idempotent sink (Spark's file sinks, ``foreachBatch`` keyed by batch id)
every message lands exactly once, for as long as retention keeps the offsets.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from ._compat import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from ._connections import StreamProbe, read_stream_range
from ._offsets import OffsetRange, OffsetSpec, allocate_rows, checkpoint_offsets, plan_ranges

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    import pyarrow as pa

    from ._options import AmqpOptions
    from ._schema import OutputColumn

__all__ = ["StreamQueueBatchReader", "StreamQueueStreamReader"]

logger = logging.getLogger("amqp_spark")


class _ProbeHolder:
    """A lazily created :class:`StreamProbe` that is never pickled (it holds a socket), and
    the queues read (a super stream's partitions are found on first use, on the driver)."""

    _probe: StreamProbe | None

    def __init__(self, options: AmqpOptions) -> None:
        self._options = options
        self._probe = None
        self._queues: tuple[str, ...] | None = options.source.queues or None

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

    def queues(self) -> tuple[str, ...]:
        """The queues read: the ``queue`` option, or the super stream's partitions."""
        if self._queues is None:
            super_stream = self._options.source.super_stream
            assert super_stream is not None  # the options check one of them is given
            self._queues = self.probe().super_stream_partitions(super_stream)
            logger.info("super stream %r: partitions %s", super_stream, self._queues)
        return self._queues

    def next_offsets(self) -> dict[str, int]:
        probe = self.probe()
        return {q: probe.next_offset(q) for q in self.queues()}

    def resolve(self, specs: dict[str, OffsetSpec] | None, default: OffsetSpec) -> dict[str, int]:
        queues = self.queues()
        probe = self.probe()
        per_queue = self._options.source.offset_specs(specs, queues, default)
        return {q: probe.resolve(q, per_queue[q]) for q in queues}


def offsets_behind_latest(tails: Mapping[str, int], end: Mapping[str, int]) -> dict[str, float]:
    """Kafka's lag metrics over the queues: how many offsets each stays behind its tail once
    the planned batch is read (min, avg, max)."""
    behind = [max(0, tails[q] - end[q]) for q in end]
    if not behind:
        return {"min": 0, "avg": 0.0, "max": 0}
    return {"min": min(behind), "avg": sum(behind) / len(behind), "max": max(behind)}


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
        self._behind: dict[str, float] | None = None
        #: When the last non-empty batch was planned (``minMessagesPerTrigger``'s delay).
        self._last_batch_at: float | None = None
        self._clock: Callable[[], float] = time.monotonic

    def initialOffset(self) -> dict[str, int]:
        """``startingOffsets`` (default ``next``) resolved to numbers, once per query run, so
        Spark's repeated calls agree."""
        if self._initial is None:
            self._initial = self.resolve(self._options.source.starting_offsets, OffsetSpec("next"))
            logger.info("starting offsets %s", self._initial)
        return dict(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        """The limit Spark passes back to :meth:`latestOffset` for ordinary triggers.

        PySpark has no composite limit, so this is the first configured of
        ``maxMessagesPerTrigger``, ``maxBytesPerTrigger`` and ``minMessagesPerTrigger``;
        :meth:`latestOffset` applies all of them whenever the limit is not
        ``ReadAllAvailable``."""
        source = self._options.source
        if source.max_messages_per_trigger is not None:
            return ReadMaxRows(source.max_messages_per_trigger)
        if source.max_bytes_per_trigger is not None:
            return ReadMaxBytes(source.max_bytes_per_trigger)
        if source.min_messages_per_trigger is not None:
            return ReadMinRows(source.min_messages_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the tails now: an AvailableNow query stops there, whatever arrives later."""
        self._target = self.next_offsets()
        logger.info("AvailableNow target offsets %s", self._target)

    def _row_budget(self, limit: ReadLimit) -> int | None:
        """Rows this batch may take under ``maxMessagesPerTrigger`` and ``maxBytesPerTrigger``
        (``None``: no cap). Bytes become rows through the mean message size of the streams'
        last chunks, as sampled by the tail probes: an estimate."""
        source = self._options.source
        caps: list[int] = []
        if isinstance(limit, ReadMaxRows):
            caps.append(limit.max_rows)
        elif source.max_messages_per_trigger is not None:
            caps.append(source.max_messages_per_trigger)
        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else None
        max_bytes = max_bytes if max_bytes is not None else source.max_bytes_per_trigger
        if max_bytes is not None:
            sizes = self.probe().sampled_sizes
            total = sum(sizes[q][0] for q in self.queues() if q in sizes)
            count = sum(sizes[q][1] for q in self.queues() if q in sizes)
            mean = max(1.0, total / count) if count else 1.0
            caps.append(max(1, int(max_bytes // mean)))
        return min(caps) if caps else None

    def latestOffset(
        self, start: Mapping[str, object] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, int]:
        """The end of the next batch: the tails, capped by the AvailableNow target, by
        ``maxMessagesPerTrigger`` and ``maxBytesPerTrigger`` (shared fairly between queues),
        and held back while fewer than ``minMessagesPerTrigger`` are new, until
        ``maxTriggerDelay`` has passed since the last batch.

        PySpark < 4.2 calls it with no arguments: the tails, all of them (the data source
        refuses the per-trigger options there)."""
        if start is None or limit is None:
            self._latest = self.next_offsets()
            return dict(self._latest)
        queues = self.queues()
        begin = checkpoint_offsets(start, queues)
        tails = self.next_offsets()
        self._latest = dict(tails)
        now = self._clock()
        if self._last_batch_at is None:
            self._last_batch_at = now
        if self._target is not None:
            tails = {q: min(tails[q], self._target[q]) for q in queues}
        available = {q: max(0, tails[q] - begin[q]) for q in queues}
        granted = available
        if not isinstance(limit, ReadAllAvailable):
            budget = self._row_budget(limit)
            if budget is not None:
                granted = allocate_rows(available, budget)
            minimum = self._options.source.min_messages_per_trigger
            if isinstance(limit, ReadMinRows):
                minimum = limit.min_rows
            # AvailableNow must end: it never waits for a minimum that may never arrive
            if (
                self._target is None
                and minimum is not None
                and 0 < sum(available.values()) < minimum
                and now - self._last_batch_at < self._options.source.max_trigger_delay
            ):
                granted = dict.fromkeys(queues, 0)
        end = {q: begin[q] + granted[q] for q in queues}
        if end != begin:
            self._last_batch_at = now
        self._behind = offsets_behind_latest(self._latest, end)
        return end

    def reportLatestOffset(self) -> dict[str, object] | None:
        """Query progress only (``sources[].latestOffset``): the tails seen by the last
        :meth:`latestOffset`, and Kafka's lag metrics for the batch it planned. PySpark's
        Python sources have no ``metrics`` hook, so the lag travels here."""
        if self._latest is None or self._behind is None:
            return None
        return {"latest": dict(self._latest), "offsetsBehindLatest": dict(self._behind)}

    def partitions(
        self, start: Mapping[str, object], end: Mapping[str, object]
    ) -> list[InputPartition]:
        """``[start, end)`` per queue, split by ``numPartitions``/``maxMessagesPerPartition``."""
        queues = self.queues()
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
            queues = self.queues()
            start = self.resolve(source.starting_offsets, OffsetSpec("first"))
            end = self.resolve(source.ending_offsets, OffsetSpec("next"))
            if source.ending_offsets is not None:
                # an end past the tail would wait for offsets nobody wrote yet
                probe = self.probe()
                end = {q: probe.cap_at_tail(q, end[q]) for q in queues}
        finally:
            self.close_probe()
        for queue in queues:
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
