"""Client connections to the broker, on top of ``amqp_blocking``: everything that talks to it.

- :class:`StreamProbe` (driver): resolves ``startingOffsets`` to numbers and finds a stream's
  tail, over one lazily opened connection that is reopened after a failure.
- :func:`read_stream_range` (executor): the messages of one offset range, as Arrow batches,
  read by a :class:`RangeConsumer` (the core driven in the calling thread).
- :class:`QueueConsumer` (driver): the classic/quorum consumer of the simple stream reader,
  which acks a batch only once Spark is past it.

Nothing here is ever pickled: the readers create these objects lazily where they run.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from typing import TYPE_CHECKING, Final, TypeVar

import amqp_blocking
from amqp_sansio import Int64, Timestamp
from amqp_sansio.client import AMQPError, Message, NotFound

from ._errors import AmqpDataLossError
from ._options import MAX_SUPER_STREAM_PARTITIONS
from ._range_reader import RangeConsumer
from ._schema import RecordBatchBuilder

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    import pyarrow as pa

    from amqp_sansio import FieldTable
    from amqp_sansio.client import ConnectionParameters

    from ._offsets import OffsetRange, OffsetSpec
    from ._options import SourceOptions
    from ._schema import OutputColumn

__all__ = ["QueueConsumer", "StreamProbe", "declare_queues", "open_connection", "read_stream_range"]

logger = logging.getLogger("amqp_spark")

_T = TypeVar("_T")

#: Rows per Arrow batch yielded by an executor read (Spark's own default chunk size).
ROWS_PER_BATCH: Final = 10_000
# How long to wait for the oldest message of a stream that did deliver one just before.
_FLOOR_TIMEOUT_S: Final = 5.0
# A probe reads the last chunk of a stream; this many unacked deliveries at a time.
_PROBE_PREFETCH: Final = 1000


def open_connection(params: ConnectionParameters, role: str) -> amqp_blocking.Connection:
    """Connect, naming the connection after what it does (shown in the management UI)."""
    name = f"{params.connection_name or 'amqp_spark'} {role}"
    return amqp_blocking.connect(params, connection_name=name)


def declare_queues(channel: amqp_blocking.Channel, source: SourceOptions) -> None:
    """``declare=true``: declare every queue (durable; stream and quorum queues must be)."""
    if not source.declare:
        return
    arguments: FieldTable = {}
    for key, value in source.queue_arguments().items():
        arguments[key] = _field_value(value)
    for queue in source.queues:
        channel.queue_declare(queue, durable=True, arguments=dict(arguments))


def _field_value(value: object) -> FieldTable | str | int | float | bool | None:
    # queueArgs is JSON: only these shapes can occur.
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, dict):
        return {str(k): _field_value(v) for k, v in value.items()}
    raise TypeError(f"queueArgs: a {type(value).__name__} is not supported as an argument value")


def _offset_argument(spec: OffsetSpec) -> str | Int64 | Timestamp:
    if spec.kind == "offset":
        return Int64(spec.value)
    if spec.kind == "timestamp":
        return Timestamp(spec.value)
    return spec.kind


class StreamProbe:
    """Driver-side questions about stream queues: where they start, where they end."""

    def __init__(self, params: ConnectionParameters, source: SourceOptions) -> None:
        self._params = params
        self._source = source
        self._connection: amqp_blocking.Connection | None = None
        self._declared = False
        #: Per queue: body bytes and messages seen by the last tail probe (maxBytesPerTrigger).
        self.sampled_sizes: dict[str, tuple[int, int]] = {}

    def close(self) -> None:
        """Close the connection, if one is open."""
        connection, self._connection = self._connection, None
        if connection is not None:
            try:
                connection.close()
            except (AMQPError, OSError):
                logger.debug("closing the probe connection failed", exc_info=True)

    def _channel(self) -> amqp_blocking.Channel:
        if self._connection is not None and self._connection.is_closed:
            self.close()
        if self._connection is None:
            self._connection = open_connection(self._params, "stream probe")
        channel = self._connection.channel()
        if not self._declared:
            declare_queues(channel, self._source)
            self._declared = True
        return channel

    def _retry(self, what: str, action: Callable[[], _T]) -> _T:
        """Run ``action``; after a lost or closed connection, reconnect and run it once more."""
        try:
            return action()
        except NotFound:
            raise
        except (AMQPError, OSError) as exc:
            logger.warning("%s failed (%s); reconnecting once", what, exc)
            self.close()
            return action()

    def _attach(
        self, queue: str, argument: str | Int64 | Timestamp, *, until: float, first_wait: float
    ) -> tuple[int, int] | None:
        """Attach a consumer at ``argument``: (first offset, last offset seen), or None when
        nothing arrives within ``first_wait``. While the offsets seen are below ``until`` it
        reads on, until the stream is idle for ``pollIdleMs`` (``until=inf``: the tail;
        ``-inf``: only the first message)."""
        with self._channel() as channel:
            # one message answers "where does it start"; the tail needs the whole last chunk
            channel.basic_qos(1 if until == -math.inf else _PROBE_PREFETCH)
            consumer = channel.basic_consume(queue, arguments={"x-stream-offset": argument})
            message = consumer.get(first_wait)
            if message is None:
                consumer.close()
                return None
            first = last = _require_offset(queue, message)
            sampled_bytes, sampled = len(message.body), 1
            unacked = 1
            # A busy stream never goes idle: any offset seen is a valid (lower) tail, so the
            # probe also ends after pollTimeoutMs.
            give_up = time.monotonic() + self._source.poll_timeout
            while last < until and time.monotonic() < give_up:
                if unacked >= _PROBE_PREFETCH // 2:
                    message.ack(multiple=True)  # acks are a stream consumer's credit
                    unacked = 0
                following = consumer.get(self._source.poll_idle)
                if following is None:
                    break
                message = following
                last = max(last, _require_offset(queue, message))
                sampled_bytes += len(message.body)
                sampled += 1
                unacked += 1
            consumer.close()
            if until == math.inf:
                self.sampled_sizes[queue] = (sampled_bytes, sampled)
            return first, last

    def next_offset(self, queue: str) -> int:
        """The offset the next message published to ``queue`` will get (0 when empty)."""
        seen = self._retry(
            f"finding the tail of {queue!r}",
            lambda: self._attach(
                queue, "last", until=math.inf, first_wait=self._source.poll_timeout
            ),
        )
        return 0 if seen is None else seen[1] + 1

    def super_stream_partitions(self, name: str) -> tuple[str, ...]:
        """The partitions of super stream ``name`` in RabbitMQ's layout (``name-0``, ``name-1``,
        ...), by passive declares: AMQP 0-9-1 cannot list a vhost's queues or bindings."""
        found: list[str] = []
        for index in range(MAX_SUPER_STREAM_PARTITIONS):
            queue = f"{name}-{index}"
            try:
                with self._channel() as channel:
                    channel.queue_declare(queue, passive=True)
            except NotFound:
                break
            found.append(queue)
        if not found:
            raise ValueError(
                f"super stream {name!r}: no partition queue {name}-0 in this vhost (partitions "
                "named by routing key cannot be discovered over AMQP 0-9-1: list them with the "
                "queue option)"
            )
        return tuple(found)

    def cap_at_tail(self, queue: str, end: int) -> int:
        """``end``, or the stream's next offset when the stream does not reach ``end - 1``.

        Attaching at ``end - 1`` answers in one chunk when the stream holds it, much sooner
        than reading the last chunk until the stream is idle; only an ``end`` past the tail
        costs both.
        """
        if end <= 0:
            return end
        target = end - 1
        seen = self._retry(
            f"looking for offset {target} in {queue!r}",
            lambda: self._attach(
                queue, Int64(target), until=target, first_wait=self._source.poll_idle
            ),
        )
        if seen is not None and seen[1] >= target:
            return end
        return min(end, self.next_offset(queue))

    def resolve(self, queue: str, spec: OffsetSpec) -> int:
        """A number for ``spec``: the checkpoint must never store ``next`` or a timestamp."""
        if spec.kind == "offset":
            return spec.value
        if spec.kind == "next":
            return self.next_offset(queue)
        if spec.kind == "last":
            return max(self.next_offset(queue) - 1, 0)
        seen = self._retry(
            f"resolving {spec.describe()} on {queue!r}",
            lambda: self._attach(
                queue,
                _offset_argument(spec),
                until=-math.inf,
                first_wait=self._source.poll_timeout,
            ),
        )
        if seen is not None:
            return seen[0]
        # "first" on an empty stream, or a timestamp after the last message
        return 0 if spec.kind == "first" else self.next_offset(queue)


def _require_offset(queue: str, message: Message) -> int:
    offset = message.stream_offset
    if offset is None:
        raise ValueError(
            f"queue {queue!r} delivered a message without an x-stream-offset header: it is "
            "not a stream queue (set queueType to classic or quorum)"
        )
    return offset


def read_stream_range(
    params: ConnectionParameters,
    source: SourceOptions,
    columns: Sequence[OutputColumn],
    partition: OffsetRange,
) -> Iterator[pa.RecordBatch]:
    """Read offsets ``[start, end)`` of a stream queue; yield them as Arrow batches.

    Acks are a stream consumer's credit, so they are held back whenever one more would let
    the broker send an offset at or past ``end``. Closing never rejects a delivery (a reject
    closes the whole connection on a stream queue).
    """
    queue, start, end = partition.queue, partition.start, partition.end
    prefetch = min(source.prefetch, end - start)
    rows = RecordBatchBuilder(columns)
    # The range's channel carries this one consumer, so its delivery tags run 1, 2, 3, ...:
    # tags 1..acked are acknowledged, the rest of those received are not.
    acked = 0
    ack_step = max(1, prefetch // 4)
    expected = start  # the next offset the range still needs
    with RangeConsumer(params, f"read {queue}[{start},{end})") as consumer:
        consumer.consume(queue, Int64(start), prefetch)
        while expected < end:
            message = consumer.get(source.read_timeout)
            if message is None:
                _stalled(source, queue, expected, end, first=expected == start)
                break
            offset = _require_offset(queue, message)
            unacked = message.delivery_tag - acked
            if offset >= start:
                if offset > start and expected == start:
                    # A gap (offsets taken by non-message chunks) or retention removed them.
                    floor = _first_offset(params, queue)
                    if floor is None or floor > start:
                        _lost(source, queue, start, floor)
                if offset >= end:
                    break
                rows.append(queue, message, offset)
                expected = offset + 1
                if len(rows) >= ROWS_PER_BATCH:
                    yield rows.build()
            # Credit left after acking k more: the broker may then send up to
            # offset + (prefetch - unacked) + k, which must stay below end.
            # Acks go out in groups of ack_step (each is a frame and a send), or one by one
            # when the window is full and only a little credit may be given.
            allowed = (end - 1) - offset - (prefetch - unacked)
            full = unacked >= prefetch
            if allowed > 0 and (full or (unacked >= ack_step and allowed >= ack_step)):
                acked += min(allowed, unacked)
                consumer.ack(acked)
    if rows:
        yield rows.build()


def _first_offset(params: ConnectionParameters, queue: str) -> int | None:
    """The oldest offset the stream still delivers (rarely needed: a connection of its own)."""
    with (
        open_connection(params, f"first offset of {queue}") as connection,
        connection.channel() as channel,
    ):
        channel.basic_qos(1)
        with channel.basic_consume(queue, arguments={"x-stream-offset": "first"}) as consumer:
            message = consumer.get(_FLOOR_TIMEOUT_S)
    return None if message is None else _require_offset(queue, message)


def _lost(source: SourceOptions, queue: str, expected: int, first_available: int | None) -> None:
    if source.fail_on_data_loss:
        raise AmqpDataLossError(queue, expected, first_available)
    logger.warning(
        "stream %r: offsets from %d are gone (retention); continuing at %s",
        queue,
        expected,
        first_available,
    )


def _stalled(source: SourceOptions, queue: str, expected: int, end: int, *, first: bool) -> None:
    if first:
        _lost(source, queue, expected, None)
        return
    raise TimeoutError(
        f"stream queue {queue!r}: no delivery for {source.read_timeout} s while offsets "
        f"{expected}..{end - 1} were still due (readTimeoutMs)"
    )


class QueueConsumer:
    """One channel consuming the classic or quorum queues of a simple stream reader.

    Batches are taken with :meth:`take` and acknowledged later with :meth:`ack_through`,
    once Spark has committed them. A lost connection is replaced on the next :meth:`take`;
    the broker has then requeued whatever was unacknowledged.
    """

    def __init__(self, params: ConnectionParameters, source: SourceOptions, window: int) -> None:
        self._params = params
        self._source = source
        self._window = window
        self._connection: amqp_blocking.Connection | None = None
        self._channel: amqp_blocking.Channel | None = None
        self._consumers: list[tuple[str, amqp_blocking.Consumer]] = []
        # (end sequence number, delivery tags) of batches handed to Spark, oldest first
        self._pending: deque[tuple[int, list[int]]] = deque()

    def close(self) -> None:
        """Close the connection; unacked messages go back to their queues."""
        connection, self._connection = self._connection, None
        self._channel = None
        self._consumers = []
        self._pending.clear()
        if connection is not None:
            try:
                connection.close()
            except (AMQPError, OSError):
                logger.debug("closing the consumer connection failed", exc_info=True)

    def _open(self) -> None:
        if self._connection is not None and not self._connection.is_closed:
            return
        if self._connection is not None:
            logger.warning(
                "the consumer connection was lost: %d batch(es) not yet acknowledged will be "
                "redelivered",
                len(self._pending),
            )
            self.close()
        self._connection = open_connection(self._params, "queue consumer")
        channel = self._channel = self._connection.channel()
        declare_queues(channel, self._source)
        channel.basic_qos(self._window)

    def _start_consumers(self) -> None:
        self._open()
        if not self._consumers:
            assert self._channel is not None
            self._consumers = [(q, self._channel.basic_consume(q)) for q in self._source.queues]

    def depth(self) -> int:
        """Messages ready in the queues now (``queue.declare`` passive), for AvailableNow.

        Asked before the consumers start, so no prefetched message is missing from it.
        """
        self._open()
        assert self._channel is not None
        return sum(
            self._channel.queue_declare(queue, passive=True).message_count
            for queue in self._source.queues
        )

    def ack_through(self, sequence: int) -> None:
        """Acknowledge every batch that ends at or before ``sequence``."""
        channel = self._channel
        tags: list[int] = []
        while self._pending and self._pending[0][0] <= sequence:
            tags.extend(self._pending.popleft()[1])
        if not tags or channel is None:
            return
        try:
            if len(self._consumers) == 1:
                # one consumer: its buffer is in tag order, so nothing later is acked by accident
                channel.basic_ack(max(tags), multiple=True)
            else:
                for tag in tags:
                    channel.basic_ack(tag)
        except (AMQPError, OSError) as exc:
            # the broker requeues them when the connection goes: duplicates, never a loss
            logger.warning(
                "acknowledging %d message(s) failed (%s); they will return", len(tags), exc
            )
            self.close()

    def take(self, limit: int, end_sequence_base: int) -> list[tuple[str, amqp_blocking.Message]]:
        """Up to ``limit`` messages: wait ``pollTimeoutMs`` for the first, then take more
        while they keep coming within ``pollIdleMs``. The batch is remembered under the end
        sequence number ``end_sequence_base + len(batch)`` for :meth:`ack_through`."""
        try:
            self._start_consumers()
            rows = self._collect(limit)
        except NotFound:
            raise
        except (AMQPError, OSError) as exc:
            logger.warning("consuming failed (%s); reconnecting", exc)
            self.close()
            self._start_consumers()
            rows = self._collect(limit)
        if rows:
            tags = [message.delivery_tag for _, message in rows]
            self._pending.append((end_sequence_base + len(rows), tags))
        return rows

    def _collect(self, limit: int) -> list[tuple[str, amqp_blocking.Message]]:
        rows: list[tuple[str, amqp_blocking.Message]] = []
        if limit <= 0:
            return rows
        deadline = time.monotonic() + self._source.poll_timeout
        while len(rows) < limit:
            got = self._next(deadline)
            if got is None:
                break
            rows.append(got)
            deadline = time.monotonic() + self._source.poll_idle
        return rows

    def _next(self, deadline: float) -> tuple[str, amqp_blocking.Message] | None:
        if len(self._consumers) == 1:
            queue, consumer = self._consumers[0]
            message = consumer.get(max(deadline - time.monotonic(), 0.0))
            return None if message is None else (queue, message)
        while True:
            # several queues: look at each without blocking, then sleep a short slice
            for queue, consumer in self._consumers:
                message = consumer.get(0.0)
                if message is not None:
                    return queue, message
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            time.sleep(min(remaining, 0.01))
