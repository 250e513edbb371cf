"""Queues, the messages waiting in them, and their consumers.

A :class:`Queue` holds its ready messages, its limits and dead-letter settings as parsed from
its arguments, its consumers and the bindings that lead to it. Ready messages are kept in
arrival order (:class:`FifoMessages`), or per priority with ``x-max-priority``
(:class:`PriorityMessages`); a message given back (reject, nack, recover, a closed channel)
returns to its original place. A stream queue keeps a :class:`~._streams.StreamLog` instead.

Moving messages between queues (routing, dispatch, expiry, dead-lettering) is the virtual
host's work (:mod:`._vhost`); the channel a consumer belongs to is seen here only through
:class:`ConsumerChannel`, so this module does not import the channel's.
"""

from __future__ import annotations

import bisect
from collections import deque
from typing import TYPE_CHECKING, Final, Protocol, final

import attrs

from ._errors import BrokerError
from ._fields import typed, wire_type
from ._policies import RESOLUTION
from ._queue_classic import CLASSIC
from ._queue_quorum import DEAD_LETTER_STRATEGIES, QUORUM
from ._queue_stream import STREAM
from ._streams import DEFAULT_SEGMENT_SIZE, MAX_SEGMENT_SIZE, StreamLog, parse_max_age

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping

    from amqp_sansio import FieldTable, FieldValue

    from ._memory import MemoryMonitor
    from ._message import Message
    from ._queue_type import QueueType
    from ._routing import BindingKey, Exchange

__all__ = [
    "EQUIVALENT_ARGS",
    "MAX_PRIORITY",
    "QUEUE_TYPES",
    "Consumer",
    "ConsumerChannel",
    "Entry",
    "FifoMessages",
    "PriorityMessages",
    "Queue",
    "QueueInfo",
    "QueueOwner",
]

_OVERFLOW_MODES: Final = frozenset(("drop-head", "reject-publish", "reject-publish-dlx"))
#: Every queue type by its ``x-queue-type`` (one module each).
QUEUE_TYPES: Final[dict[str, QueueType]] = {t.name: t for t in (CLASSIC, QUORUM, STREAM)}
#: The highest ``x-max-priority`` RabbitMQ accepts.
MAX_PRIORITY: Final = 255
#: Queue arguments compared on redeclare, like RabbitMQ's equivalence check.
EQUIVALENT_ARGS: Final = (
    "x-message-ttl",
    "x-expires",
    "x-max-length",
    "x-max-length-bytes",
    "x-overflow",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-priority",
    "x-queue-type",
    "x-single-active-consumer",
    "x-max-age",
    "x-stream-max-segment-size-bytes",
    "x-delivery-limit",
    "x-dead-letter-strategy",
)


@final
class Entry:
    """A message waiting in one queue (or delivered from it and not yet acknowledged)."""

    __slots__ = ("delivery_count", "expires_at", "message", "redelivered", "seq", "stored")

    def __init__(self, message: Message, seq: int, expires_at: float | None) -> None:
        self.message = message
        self.seq = seq
        self.expires_at = expires_at
        self.redelivered = False
        #: How often it came back (quorum queues' ``x-delivery-count``).
        self.delivery_count = 0
        #: Whether the durable store holds it (a persistent message in a durable queue).
        self.stored = False


def _by_seq(entry: Entry) -> int:
    return entry.seq


def _put_back(messages: deque[Entry], entries: list[Entry]) -> None:
    """Insert *entries* (sorted by arrival) into *messages* (sorted too) where they were."""
    if not messages or entries[-1].seq < messages[0].seq:
        messages.extendleft(reversed(entries))
        return
    for entry in entries:
        messages.insert(bisect.bisect_left(messages, entry.seq, key=_by_seq), entry)


def _drop_expired(messages: deque[Entry], now: float, dropped: list[Entry]) -> None:
    while messages:
        expires_at = messages[0].expires_at
        if expires_at is None or expires_at > now:
            return
        dropped.append(messages.popleft())


@final
class FifoMessages(deque[Entry]):
    """Ready messages in arrival order (a classic queue)."""

    __slots__ = ()

    def head(self) -> Entry:
        """The next message to deliver."""
        return self[0]

    def put_back(self, entries: list[Entry]) -> None:
        """Return delivered *entries* (sorted by arrival) to their original places."""
        _put_back(self, entries)

    def drop_expired(self, now: float) -> list[Entry]:
        """Take the expired messages at the head."""
        dropped: list[Entry] = []
        _drop_expired(self, now, dropped)
        return dropped


@final
class PriorityMessages:
    """Ready messages of a priority queue: higher priority first, arrival order within a
    priority; a message's priority above the queue's maximum counts as the maximum, none as 0.
    """

    __slots__ = ("_count", "_levels", "_order", "max_priority")

    def __init__(self, max_priority: int) -> None:
        self.max_priority = max_priority
        # Non-empty priority levels, and their priorities in ascending order.
        self._levels: dict[int, deque[Entry]] = {}
        self._order: list[int] = []
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __iter__(self) -> Iterator[Entry]:
        for priority in reversed(self._order):
            yield from self._levels[priority]

    def _level(self, entry: Entry) -> deque[Entry]:
        priority = min(entry.message.properties.priority or 0, self.max_priority)
        level = self._levels.get(priority)
        if level is None:
            level = self._levels[priority] = deque()
            bisect.insort(self._order, priority)
        return level

    def _trim(self, priority: int) -> None:
        if not self._levels[priority]:
            del self._levels[priority]
            self._order.remove(priority)

    def append(self, entry: Entry) -> None:
        """Add a new message behind the others of its priority."""
        self._level(entry).append(entry)
        self._count += 1

    def head(self) -> Entry:
        """The next message to deliver."""
        return self._levels[self._order[-1]][0]

    def popleft(self) -> Entry:
        """Take the next message to deliver."""
        priority = self._order[-1]
        entry = self._levels[priority].popleft()
        self._trim(priority)
        self._count -= 1
        return entry

    def put_back(self, entries: list[Entry]) -> None:
        """Return delivered *entries* (sorted by arrival) to their original places."""
        for entry in entries:
            _put_back(self._level(entry), [entry])
        self._count += len(entries)

    def drop_expired(self, now: float) -> list[Entry]:
        """Take the expired messages at the head of every priority."""
        dropped: list[Entry] = []
        for priority in list(self._order):
            _drop_expired(self._levels[priority], now, dropped)
            self._trim(priority)
        self._count -= len(dropped)
        return dropped

    def clear(self) -> None:
        """Drop everything."""
        self._levels.clear()
        self._order.clear()
        self._count = 0


@final
@attrs.frozen(slots=True)
class QueueInfo:
    """What ``queue.declare-ok`` reports."""

    name: str
    message_count: int
    consumer_count: int


class ConsumerChannel(Protocol):
    """What a queue needs from the channel a consumer belongs to (``ModelChannel``)."""

    @property
    def deliverable(self) -> bool:
        """False while ``channel.flow`` paused deliveries or the connection's output buffer
        is full."""

    @property
    def global_prefetch(self) -> int:
        """The channel-wide prefetch (0: none)."""

    @property
    def consumer_unacked(self) -> int:
        """Deliveries to the channel's consumers not yet acknowledged."""

    def send(self, consumer: Consumer, queue: Queue, entry: Entry, now: float) -> None:
        """Deliver *entry* from *queue* to *consumer* at *now* (the broker's clock); for a
        consumer that acknowledges, the entry's octets stay held (see :meth:`Queue.pop`)."""

    def drop_consumer(self, consumer: Consumer, *, notify: bool) -> None:
        """Remove *consumer*; with *notify* (its queue went away) tell the client."""


class QueueOwner(Protocol):
    """The connection an exclusive queue belongs to (``ModelConnection``)."""

    @property
    def exclusive_queues(self) -> dict[str, Queue]:
        """Its exclusive queues by name."""


class Consumer:
    """One ``basic.consume`` on a queue (a 0-10 subscription subclasses it: its room is the
    client's credit)."""

    __slots__ = (
        "arguments",
        "channel",
        "exclusive",
        "match_unfiltered",
        "no_ack",
        "offset",
        "prefetch",
        "priority",
        "queue",
        "stream_filter",
        "tag",
        "unacked",
    )

    def __init__(
        self,
        channel: ConsumerChannel,
        queue: Queue,
        tag: str,
        *,
        no_ack: bool,
        exclusive: bool,
        prefetch: int,
        arguments: FieldTable,
    ) -> None:
        self.channel = channel
        self.queue = queue
        self.tag = tag
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.prefetch = prefetch
        self.arguments = arguments
        self.unacked = 0
        #: Stream queues: the next offset this consumer reads.
        self.offset = 0
        #: ``x-priority``: consumers of a higher priority get messages while they have room.
        self.priority = 0
        #: Stream filtering (RabbitMQ 3.13): the ``x-stream-filter`` values (None: no
        #: filtering), and whether messages without ``x-stream-filter-value`` match.
        self.stream_filter: frozenset[str] | None = None
        self.match_unfiltered = False

    def wants(self, message: Message) -> bool:
        """Whether a stream consumer's filter lets *message* through (its
        ``x-stream-filter-value``, a string, is one of the filter's; or it has none and
        ``x-stream-match-unfiltered`` is set)."""
        wanted = self.stream_filter
        if wanted is None:
            return True
        value = (message.properties.headers or {}).get("x-stream-filter-value")
        if isinstance(value, str):
            return value in wanted
        return self.match_unfiltered

    def can_take(self) -> bool:
        """Whether the consumer has room for one more delivery now."""
        channel = self.channel
        if not channel.deliverable:
            return False
        if self.no_ack:
            return True
        if self.prefetch and self.unacked >= self.prefetch:
            return False
        return not channel.global_prefetch or channel.consumer_unacked < channel.global_prefetch


def _int_arg(queue: str, vhost: str, name: str, value: FieldValue) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BrokerError(
            406,
            f"invalid arg '{name}' for queue '{queue}' in vhost '{vhost}': "
            f'"expected integer, got {wire_type(value)}"',
        )
    if value < 0:
        raise BrokerError(
            406,
            f"invalid arg '{name}' for queue '{queue}' in vhost '{vhost}': "
            f"{{value_negative,{value}}}",
        )
    return value


def _str_arg(queue: str, vhost: str, name: str, value: FieldValue) -> str:
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if not isinstance(value, str):
        raise BrokerError(
            406,
            f"invalid arg '{name}' for queue '{queue}' in vhost '{vhost}': "
            f'"expected string, got {type(value).__name__}"',
        )
    return value


#: The queue attribute of each policy-controlled setting.
_ATTRIBUTES: Final = {key: key.replace("-", "_") for key in RESOLUTION}
#: Their values when neither an argument nor a policy gives one.
_DEFAULTS: Final[dict[str, object]] = {
    "overflow": "drop-head",
    "dead-letter-strategy": "at-most-once",
}


def _where(queue: str, vhost: str) -> str:
    return f"queue '{queue}' in vhost '{vhost}'"


@final
class Queue:
    """A queue of messages with consumers, TTL, length limits, priorities and dead-lettering;
    or, with ``x-queue-type: stream``, a stream (:attr:`log`)."""

    __slots__ = (
        "_by_argument",
        "_default_delivery_limit",
        "arguments",
        "auto_delete",
        "bindings_in",
        "consumers",
        "dead_letter_exchange",
        "dead_letter_routing_key",
        "dead_letter_strategy",
        "deleted",
        "delivery_limit",
        "dispatching",
        "durable",
        "ever_consumed",
        "exclusive_owner",
        "expires",
        "idle_since",
        "kind",
        "log",
        "max_length",
        "max_length_bytes",
        "max_priority",
        "memory",
        "message_ttl",
        "name",
        "overflow",
        "policy",
        "ready",
        "ready_bytes",
        "redispatch",
        "single_active",
        "type",
        "vhost_name",
    )

    def __init__(
        self,
        vhost_name: str,
        name: str,
        *,
        durable: bool,
        exclusive_owner: QueueOwner | None,
        auto_delete: bool,
        arguments: FieldTable,
        now: float,
        memory: MemoryMonitor,
        default_delivery_limit: int | None = None,
    ) -> None:
        self.vhost_name = vhost_name
        self.name = name
        self.durable = durable
        self.exclusive_owner = exclusive_owner
        self.auto_delete = auto_delete
        self.arguments = arguments
        self.memory = memory
        self.ready_bytes = 0
        self.consumers: deque[Consumer] = deque()
        #: (exchange, binding key) of every binding with this queue as destination.
        self.bindings_in: dict[BindingKey, Exchange[Queue]] = {}
        self.deleted = False
        self.ever_consumed = False
        self.dispatching = False
        self.redispatch = False
        self.message_ttl: int | None = None
        self.max_length: int | None = None
        self.max_length_bytes: int | None = None
        self.max_priority: int | None = None
        self.overflow = "drop-head"
        self.dead_letter_exchange: str | None = None
        self.dead_letter_routing_key: str | None = None
        self.single_active = False
        #: Quorum queues: returns after which a message is dead-lettered (None: no limit),
        #: from ``x-delivery-limit`` or else the broker's default.
        self.delivery_limit = default_delivery_limit
        self.dead_letter_strategy = "at-most-once"
        #: x-expires in milliseconds: the queue is deleted after being unused that long.
        self.expires: int | None = None
        #: When the queue was last used (declared, read with basic.get, or left by its last
        #: consumer), on the broker's clock.
        self.idle_since = now
        #: The queue type and its rules; :attr:`type` is its name.
        self.kind = CLASSIC
        self.type = "classic"
        #: A stream queue's messages; None for the other types.
        self.log: StreamLog | None = None
        self._default_delivery_limit = default_delivery_limit
        self.ready: FifoMessages | PriorityMessages = self._parse_arguments()
        #: The name of the policy that applies (None: none); see :meth:`apply_policy`.
        self.policy: str | None = None
        #: The policy-controlled settings as the arguments alone give them (None: not given).
        self._by_argument: dict[str, object] = {
            key: getattr(self, _ATTRIBUTES[key]) if f"x-{key}" in arguments else None
            for key in RESOLUTION
        }
        if not self._valid_delivery_limit():  # RabbitMQ 3.10 ignores another value
            self._by_argument["delivery-limit"] = None

    def _valid_delivery_limit(self) -> bool:
        value = typed(self.arguments.get("x-delivery-limit"))
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    def apply_policy(
        self,
        name: str | None,
        definition: Mapping[str, object],
        operator: Mapping[str, object] | None = None,
    ) -> None:
        """Follow the policy *name* (None: no policy) with *definition*: each setting is
        the argument's or the policy's by RabbitMQ 3.10's rule (the lower of both for TTLs,
        lengths, ``expires`` and the delivery limit; the argument for dead-lettering and
        ``overflow``, except that a quorum queue's policy ``overflow`` wins); then an
        *operator* policy's values cap the result (the lower wins). Streams keep their
        arguments."""
        if self.log is not None:
            return
        self.policy = name
        quorum = self.kind.counts_deliveries
        for key, resolution in RESOLUTION.items():
            attribute = _ATTRIBUTES[key]
            if key in ("delivery-limit", "dead-letter-strategy") and not quorum:
                continue
            argument = self._by_argument[key]
            value = definition.get(key)
            if argument is None:
                chosen = value
            elif value is None:
                chosen = argument
            elif resolution == "min":
                assert isinstance(argument, int)
                assert isinstance(value, int)
                chosen = min(argument, value)
            elif key == "overflow" and quorum:
                chosen = value
            else:
                chosen = argument
            if chosen is None:
                chosen = _DEFAULTS.get(key)
                if key == "delivery-limit":
                    chosen = self._default_delivery_limit
            cap = None if operator is None else operator.get(key)
            if isinstance(cap, int):
                chosen = cap if not isinstance(chosen, int) else min(chosen, cap)
            setattr(self, attribute, chosen)

    def _parse_arguments(self) -> FifoMessages | PriorityMessages:
        """Read and check the arguments; returns the store for ready messages."""
        name, where, arguments = self.name, self.vhost_name, self.arguments

        def invalid(key: str, reason: str) -> BrokerError:
            return BrokerError(406, f"invalid arg '{key}' for {_where(name, where)}: {reason}")

        kind_value = typed(arguments.get("x-queue-type"))
        if kind_value is not None:
            kind = _str_arg(name, where, "x-queue-type", kind_value)
            queue_type = QUEUE_TYPES.get(kind)
            if queue_type is None:
                raise invalid("x-queue-type", f"\"unsupported queue type '{kind}'\"")
            self.kind, self.type = queue_type, kind
        self.kind.check_arguments(arguments, _where(name, where))
        segment_size = DEFAULT_SEGMENT_SIZE
        max_age: int | None = None
        for key, raw in arguments.items():
            value = typed(raw)
            if key == "x-message-ttl":
                self.message_ttl = _int_arg(name, where, key, value)
            elif key == "x-max-length":
                self.max_length = _int_arg(name, where, key, value)
            elif key == "x-max-length-bytes":
                self.max_length_bytes = _int_arg(name, where, key, value)
            elif key == "x-overflow":
                mode = _str_arg(name, where, key, value)
                if mode not in _OVERFLOW_MODES:
                    raise invalid(key, "invalid_overflow")
                self.overflow = mode
            elif key == "x-dead-letter-exchange":
                self.dead_letter_exchange = _str_arg(name, where, key, value)
            elif key == "x-dead-letter-routing-key":
                self.dead_letter_routing_key = _str_arg(name, where, key, value)
            elif key == "x-single-active-consumer":
                if not isinstance(value, bool):
                    raise invalid(key, f'"expected bool, got {wire_type(value)}"')
                self.single_active = value
            elif key == "x-expires":
                self.expires = _int_arg(name, where, key, value)
                if self.expires == 0:
                    raise invalid(key, "{value_zero,0}")
            elif key == "x-max-priority":
                priority = _int_arg(name, where, key, value)
                if priority > MAX_PRIORITY:
                    raise invalid(key, f"{{max_value_exceeded,{priority}}}")
                self.max_priority = priority
            elif key == "x-max-age":
                if isinstance(value, bytes):
                    value = value.decode(errors="replace")
                if not isinstance(value, str):
                    raise invalid(key, f"{{unacceptable_type,{wire_type(raw)}}}")
                try:
                    max_age = parse_max_age(value)
                except ValueError:
                    raise BrokerError(541, "", caused_by_method=False) from None
                if max_age is None:
                    raise invalid(key, "invalid_max_age")
            elif key == "x-stream-max-segment-size-bytes":
                segment_size = _int_arg(name, where, key, value)
            elif key == "x-stream-filter-size-bytes" and self.type == "stream":
                # RabbitMQ 3.13's check_filter_size (its text has the two spaces)
                if isinstance(value, int) and not 16 <= value <= 255:
                    raise BrokerError(406, "Invalid value for  x-stream-filter-size-bytes")
            elif key == "x-delivery-limit":
                # RabbitMQ 3.10 ignores a value that is not a non-negative integer
                if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                    self.delivery_limit = value
            elif key == "x-dead-letter-strategy":
                strategy = _str_arg(name, where, key, value)
                if strategy not in DEAD_LETTER_STRATEGIES:
                    raise invalid(key, "invalid_dlx_strategy")
                self.dead_letter_strategy = strategy
        if self.dead_letter_routing_key is not None and self.dead_letter_exchange is None:
            raise invalid("x-dead-letter-routing-key", "no_dead_letter_exchange")
        if not self.kind.counts_deliveries:
            self.delivery_limit = None
        if self.kind.replicated:
            flag = (
                "auto-delete"
                if self.auto_delete
                else "exclusive-owner"
                if self.exclusive_owner is not None
                else "non-durable"
                if not self.durable
                else None
            )
            if flag is not None:
                raise BrokerError(406, f"invalid property '{flag}' for {_where(name, where)}")
        if self.type == "stream":
            if segment_size > MAX_SEGMENT_SIZE:
                raise BrokerError(406, "Exceeded max value for x-stream-max-segment-size-bytes")
            self.log = StreamLog(
                max_bytes=self.max_length_bytes,
                max_age_ms=max_age,
                segment_size=segment_size or DEFAULT_SEGMENT_SIZE,
            )
            self.max_length_bytes = None  # retention, not a length limit
        if self.max_priority is None:
            return FifoMessages()
        return PriorityMessages(self.max_priority)

    def __repr__(self) -> str:
        return f"<Queue {self.name!r} ready={self.message_count}>"

    @property
    def message_count(self) -> int:
        """Messages ready for delivery (not counting unacknowledged ones); a stream's
        retained messages."""
        log = self.log
        return len(self.ready) if log is None else len(log)

    def full(self) -> bool:
        """Whether a ``reject-publish`` queue refuses the next message: one more would exceed
        ``x-max-length`` or ``x-max-length-bytes``; a quorum queue refuses only once it is
        over them (RabbitMQ 3.10's quorum queues take one message more)."""
        if self.kind.counts_deliveries:
            return self.over_limit()
        return (self.max_length is not None and len(self.ready) >= self.max_length) or (
            self.max_length_bytes is not None and self.ready_bytes >= self.max_length_bytes
        )

    def over_limit(self) -> bool:
        """Whether the queue holds more than its limits allow."""
        return (self.max_length is not None and len(self.ready) > self.max_length) or (
            self.max_length_bytes is not None and self.ready_bytes > self.max_length_bytes
        )

    def push(self, entry: Entry) -> None:
        """Add a new message."""
        self.ready.append(entry)
        message = entry.message
        self.ready_bytes += message.size
        self.memory.hold(message.held)

    def pop(self, *, keep_held: bool = False) -> Entry:
        """Take the next message to deliver; with *keep_held* its octets stay counted (it
        goes on to a channel's unacknowledged deliveries, which hold it)."""
        entry = self.ready.popleft()
        message = entry.message
        self.ready_bytes -= message.size
        if not keep_held:
            self.memory.release(message.held)
        return entry

    def requeue(self, entries: list[Entry]) -> list[Entry]:
        """Put delivered messages back where they were, marked redelivered; returns those
        a quorum queue's delivery limit refuses (returned once more than it allows), which
        are the caller's to dead-letter."""
        entries = sorted(entries, key=_by_seq)
        over: list[Entry] = []
        if self.kind.counts_deliveries:
            limit = self.delivery_limit
            for entry in entries:
                entry.delivery_count += 1
            if limit is not None:
                over = [e for e in entries if e.delivery_count > limit]
                entries = [e for e in entries if e.delivery_count <= limit]
        for entry in entries:
            entry.redelivered = True
            message = entry.message
            self.ready_bytes += message.size
            self.memory.hold(message.held)
        if entries:
            self.ready.put_back(entries)
        return over

    def delivered(self, entry: Entry, *, get: bool = False) -> Message:
        """The message as a delivery of *entry* shows it: from a quorum queue with the
        ``x-delivery-count`` header, as RabbitMQ 3.10 sets it: on every ``basic.get``
        (0 at first), on a consumer's delivery once the message came back at least once."""
        message = entry.message
        if not self.kind.counts_deliveries or not (get or entry.delivery_count):
            return message
        properties = message.properties
        headers = dict(properties.headers or {})
        headers["x-delivery-count"] = entry.delivery_count
        return attrs.evolve(message, properties=attrs.evolve(properties, headers=headers))

    def drop_expired(self, now: float) -> list[Entry]:
        """Take the messages whose time is up at the head (of every priority)."""
        dropped = self.ready.drop_expired(now)
        for entry in dropped:
            message = entry.message
            self.ready_bytes -= message.size
            self.memory.release(message.held)
        return dropped

    def purge(self) -> int:
        """Drop every ready message; returns how many."""
        count = len(self.ready)
        self.memory.release(sum(e.message.held for e in self.ready))
        self.ready.clear()
        self.ready_bytes = 0
        return count

    def active_consumers(self) -> Iterable[Consumer]:
        """The consumers that may receive now (only the first with single active consumer)."""
        if self.single_active:
            return list(self.consumers)[:1]
        return self.consumers
