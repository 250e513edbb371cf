"""The broker's state, with no I/O and no clock: virtual hosts, exchanges, queues, bindings,
consumers, unacknowledged deliveries, confirms and transactions.

Sessions (:mod:`._session`) translate wire methods into calls on :class:`ModelChannel`; the
model answers with return values, raises :class:`BrokerError` carrying RabbitMQ's reply code
and text, and pushes deliveries and server-sent cancels into the :class:`DeliverySink` of the
channel that consumes (often another connection's session).

Time comes in through the two callables given to :class:`Broker` (monotonic seconds for TTLs,
wall-clock seconds for ``x-death`` timestamps). Expiry is checked whenever a queue is read and
at :meth:`Broker.handle_timer`, which the transport calls at :meth:`Broker.next_deadline`.
"""

from __future__ import annotations

import base64
import functools
import itertools
import os
from collections import deque
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final, Protocol, TypeAlias, final

import attrs

from amqp_sansio import BasicProperties, FieldTable, FieldValue, Int64, ReplyCode, TypedValue

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    from amqp_sansio import FieldArray

__all__ = [
    "Broker",
    "BrokerError",
    "DeliverySink",
    "Exchange",
    "GetResult",
    "Message",
    "ModelChannel",
    "ModelConnection",
    "PublishOutcome",
    "Queue",
    "QueueInfo",
    "VirtualHost",
    "topic_matches",
]

#: Exchange types this broker routes with.
EXCHANGE_TYPES: Final = frozenset(("direct", "fanout", "topic", "headers"))

_PREDECLARED: Final = (
    ("amq.direct", "direct"),
    ("amq.fanout", "fanout"),
    ("amq.topic", "topic"),
    ("amq.headers", "headers"),
    ("amq.match", "headers"),
)

_OVERFLOW_MODES: Final = frozenset(("drop-head", "reject-publish", "reject-publish-dlx"))
_QUEUE_TYPES: Final = frozenset(("classic", "quorum"))
# Queue arguments compared on redeclare, like RabbitMQ's equivalence check.
_EQUIVALENT_ARGS: Final = (
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
)
_DIRECT_REPLY_TO: Final = "amq.rabbitmq.reply-to"


class BrokerError(Exception):
    """A refusal with RabbitMQ's reply code and text (``"NOT_FOUND - no queue 'q' ..."``).

    Soft codes (403, 404, 405, 406) close the channel; hard codes (503, 530, 540, ...) close
    the connection.
    """

    def __init__(self, reply_code: int, text: str) -> None:
        name = ReplyCode(reply_code).name
        super().__init__(f"{name} - {text}")
        self.reply_code = reply_code
        self.reply_text = f"{name} - {text}"

    @property
    def is_hard(self) -> bool:
        """Whether the whole connection must close."""
        return not ReplyCode(self.reply_code).is_soft


class DeliverySink(Protocol):
    """Where a channel's deliveries and server-side cancels go (the session of its connection).

    Called synchronously from inside model operations, possibly while another connection's
    request is being handled.
    """

    def deliver(
        self,
        channel: int,
        consumer_tag: str,
        delivery_tag: int,
        redelivered: bool,
        message: Message,
    ) -> None:
        """Send ``basic.deliver`` with *message*."""

    def consumer_cancelled(self, channel: int, consumer_tag: str) -> None:
        """The broker cancelled a consumer (its queue was deleted)."""


@final
@attrs.frozen(slots=True)
class Message:
    """A published message; shared, never changed, by every queue it was routed to."""

    exchange: str
    routing_key: str
    properties: BasicProperties = attrs.field(eq=False)
    body: bytes | bytearray = attrs.field(eq=False)

    @property
    def size(self) -> int:
        """Body size in octets."""
        return len(self.body)


@final
class _Entry:
    """A message waiting in one queue (or delivered from it and not yet acknowledged)."""

    __slots__ = ("expires_at", "message", "redelivered", "seq")

    def __init__(self, message: Message, seq: int, expires_at: float | None) -> None:
        self.message = message
        self.seq = seq
        self.expires_at = expires_at
        self.redelivered = False


@final
@attrs.frozen(slots=True)
class QueueInfo:
    """What ``queue.declare-ok`` reports."""

    name: str
    message_count: int
    consumer_count: int


@final
@attrs.frozen(slots=True)
class GetResult:
    """One message taken by ``basic.get``."""

    delivery_tag: int
    redelivered: bool
    message: Message
    message_count: int


@final
@attrs.frozen(slots=True)
class PublishOutcome:
    """What happened to one publish: ``routed`` is false when no queue took it (a mandatory
    publish is then returned); ``rejected`` when a full ``reject-publish`` queue refused it
    (a confirm-mode publisher gets a nack)."""

    routed: bool
    rejected: bool


@final
@attrs.frozen(slots=True)
class _Binding:
    destination: Queue | Exchange = attrs.field(eq=False)
    routing_key: str
    arguments: FieldTable = attrs.field(eq=False)
    key: tuple[object, ...]


def _freeze(value: object) -> object:
    """A hashable stand-in for a field value (tables and arrays nest)."""
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return (type(value).__name__, value)


def topic_matches(pattern: str, routing_key: str) -> bool:
    """Whether a topic binding key matches a routing key: words are separated by ``.``,
    ``*`` matches exactly one word and ``#`` zero or more."""
    return _topic_match(_words(pattern), _words(routing_key))


def _words(key: str) -> tuple[str, ...]:
    # RabbitMQ: the empty key has no words; "a." has two ("a" and "").
    return tuple(key.split(".")) if key else ()


@functools.lru_cache(maxsize=8192)
def _topic_match(pattern: tuple[str, ...], words: tuple[str, ...]) -> bool:
    # Dynamic programming over (pattern position, word position); no recursion blow-up on
    # patterns like "#.#.#".
    reachable = {0}
    for word_index in range(len(words) + 1):
        # close over '#' that may match zero words
        frontier = list(reachable)
        while frontier:
            p = frontier.pop()
            if p < len(pattern) and pattern[p] == "#" and p + 1 not in reachable:
                reachable.add(p + 1)
                frontier.append(p + 1)
        if word_index == len(words):
            return len(pattern) in reachable
        word = words[word_index]
        following: set[int] = set()
        for p in reachable:
            if p >= len(pattern):
                continue
            part = pattern[p]
            if part == "#":
                following.add(p)  # '#' eats this word and may eat more
            elif part == "*" or part == word:
                following.add(p + 1)
        if not following:
            return False
        reachable = following
    raise AssertionError("unreachable")


def _same_value(a: FieldValue, b: FieldValue) -> bool:
    if isinstance(a, bool) is not isinstance(b, bool):
        return False
    return a == b


def _headers_match(arguments: FieldTable, headers: FieldTable | None) -> bool:
    mode = arguments.get("x-match", "all")
    with_x = mode in ("all-with-x", "any-with-x")
    want_all = mode in ("all", "all-with-x")
    headers = headers or {}
    for key, expected in arguments.items():
        if key == "x-match" or (key.startswith("x-") and not with_x):
            continue
        matched = key in headers and (expected is None or _same_value(headers[key], expected))
        if want_all and not matched:
            return False
        if not want_all and matched:
            return True
    return want_all


@final
class Exchange:
    """A named router: direct, fanout, topic or headers (or the nameless default)."""

    __slots__ = (
        "arguments",
        "auto_delete",
        "bindings",
        "by_key",
        "deleted",
        "durable",
        "incoming",
        "internal",
        "name",
        "type",
        "vhost",
    )

    def __init__(
        self,
        vhost: VirtualHost,
        name: str,
        type_: str,
        *,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: FieldTable | None = None,
    ) -> None:
        self.vhost = vhost
        self.name = name
        self.type = type_
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        self.arguments: FieldTable = dict(arguments or {})
        #: Bindings with this exchange as source, by identity key.
        self.bindings: dict[tuple[object, ...], _Binding] = {}
        #: Direct exchanges: routing key -> bindings.
        self.by_key: dict[str, list[_Binding]] = {}
        #: Bindings with this exchange as destination (exchange-to-exchange).
        self.incoming: dict[tuple[object, ...], Exchange] = {}
        self.deleted = False

    def __repr__(self) -> str:
        return f"<Exchange {self.name!r} {self.type}>"

    def add(self, binding: _Binding) -> bool:
        if binding.key in self.bindings:
            return False
        self.bindings[binding.key] = binding
        self.by_key.setdefault(binding.routing_key, []).append(binding)
        return True

    def remove(self, key: tuple[object, ...]) -> bool:
        binding = self.bindings.pop(key, None)
        if binding is None:
            return False
        same = self.by_key[binding.routing_key]
        same.remove(binding)
        if not same:
            del self.by_key[binding.routing_key]
        return True

    def matches(self, routing_key: str, headers: FieldTable | None) -> Iterator[_Binding]:
        kind = self.type
        if kind == "direct":
            yield from self.by_key.get(routing_key, ())
        elif kind == "fanout":
            yield from self.bindings.values()
        elif kind == "topic":
            words = _words(routing_key)
            for binding in self.bindings.values():
                if _topic_match(_words(binding.routing_key), words):
                    yield binding
        else:
            for binding in self.bindings.values():
                if _headers_match(binding.arguments, headers):
                    yield binding


@final
class _Consumer:
    __slots__ = (
        "arguments",
        "channel",
        "exclusive",
        "no_ack",
        "prefetch",
        "queue",
        "tag",
        "unacked",
    )

    def __init__(
        self,
        channel: ModelChannel,
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

    def can_take(self) -> bool:
        channel = self.channel
        if not channel.active:
            return False
        if self.no_ack:
            return True
        if self.prefetch and self.unacked >= self.prefetch:
            return False
        return not channel.global_prefetch or channel.consumer_unacked < channel.global_prefetch


def _int_arg(queue: str, vhost: str, name: str, value: FieldValue) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        kind = "longstr" if isinstance(value, str | bytes) else type(value).__name__
        raise BrokerError(
            406,
            f"invalid arg '{name}' for queue '{queue}' in vhost '{vhost}': "
            f'"expected integer, got {kind}"',
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


def _typed(value: FieldValue) -> FieldValue:
    """Unwrap typed values (``Int64(5)`` -> 5) for comparisons."""
    if isinstance(value, TypedValue):
        return value.value
    return value


@final
class Queue:
    """A FIFO of messages with consumers, TTL, length limits and dead-lettering."""

    __slots__ = (
        "arguments",
        "auto_delete",
        "bindings_in",
        "consumers",
        "dead_letter_exchange",
        "dead_letter_routing_key",
        "deleted",
        "dispatching",
        "durable",
        "ever_consumed",
        "exclusive_owner",
        "expires",
        "idle_since",
        "max_length",
        "max_length_bytes",
        "message_ttl",
        "name",
        "overflow",
        "ready",
        "ready_bytes",
        "redispatch",
        "single_active",
        "vhost",
    )

    def __init__(
        self,
        vhost: VirtualHost,
        name: str,
        *,
        durable: bool,
        exclusive_owner: ModelConnection | None,
        auto_delete: bool,
        arguments: FieldTable,
    ) -> None:
        self.vhost = vhost
        self.name = name
        self.durable = durable
        self.exclusive_owner = exclusive_owner
        self.auto_delete = auto_delete
        self.arguments = arguments
        self.ready: deque[_Entry] = deque()
        self.ready_bytes = 0
        self.consumers: deque[_Consumer] = deque()
        #: (exchange, binding key) of every binding with this queue as destination.
        self.bindings_in: dict[tuple[object, ...], Exchange] = {}
        self.deleted = False
        self.ever_consumed = False
        self.dispatching = False
        self.redispatch = False
        where = vhost.name
        self.message_ttl: int | None = None
        self.max_length: int | None = None
        self.max_length_bytes: int | None = None
        self.overflow = "drop-head"
        self.dead_letter_exchange: str | None = None
        self.dead_letter_routing_key: str | None = None
        self.single_active = False
        #: x-expires in milliseconds: the queue is deleted after being unused that long.
        self.expires: int | None = None
        #: When the queue was last used (declared, read with basic.get, or left by its last
        #: consumer), on the broker's clock.
        self.idle_since = vhost.broker.clock()
        for key, raw in arguments.items():
            value = _typed(raw)
            if key == "x-message-ttl":
                self.message_ttl = _int_arg(name, where, key, value)
            elif key == "x-max-length":
                self.max_length = _int_arg(name, where, key, value)
            elif key == "x-max-length-bytes":
                self.max_length_bytes = _int_arg(name, where, key, value)
            elif key == "x-overflow":
                mode = _str_arg(name, where, key, value)
                if mode not in _OVERFLOW_MODES:
                    raise BrokerError(
                        406,
                        f"invalid arg '{key}' for queue '{name}' in vhost '{where}': "
                        "invalid_overflow",
                    )
                self.overflow = mode
            elif key == "x-dead-letter-exchange":
                self.dead_letter_exchange = _str_arg(name, where, key, value)
            elif key == "x-dead-letter-routing-key":
                self.dead_letter_routing_key = _str_arg(name, where, key, value)
            elif key == "x-single-active-consumer":
                if not isinstance(value, bool):
                    raise BrokerError(
                        406,
                        f"invalid arg '{key}' for queue '{name}' in vhost '{where}': "
                        f'"expected bool, got {type(value).__name__}"',
                    )
                self.single_active = value
            elif key == "x-queue-type":
                kind = _str_arg(name, where, key, value)
                if kind not in _QUEUE_TYPES:
                    raise BrokerError(
                        406,
                        f"invalid arg '{key}' for queue '{name}' in vhost '{where}': "
                        f"unsupported queue type '{kind}' (this broker has classic and "
                        "quorum-compatible queues only)",
                    )
                if kind == "quorum" and (not durable or exclusive_owner or auto_delete):
                    flag = (
                        "durable"
                        if not durable
                        else "exclusive"
                        if exclusive_owner
                        else "auto-delete"
                    )
                    raise BrokerError(
                        406,
                        f"invalid property '{flag}' for queue '{name}' in vhost '{where}'",
                    )
            elif key == "x-expires":
                self.expires = _int_arg(name, where, key, value)
                if self.expires == 0:
                    raise BrokerError(
                        406,
                        f"invalid arg '{key}' for queue '{name}' in vhost '{where}': "
                        "{value_zero,0}",
                    )
            elif key == "x-max-priority":
                _int_arg(name, where, key, value)
        if self.dead_letter_routing_key is not None and self.dead_letter_exchange is None:
            raise BrokerError(
                406,
                f"invalid arg 'x-dead-letter-routing-key' for queue '{name}' in vhost "
                f"'{where}': no_dead_letter_exchange",
            )

    def __repr__(self) -> str:
        return f"<Queue {self.name!r} ready={len(self.ready)}>"

    @property
    def message_count(self) -> int:
        """Messages ready for delivery (not counting unacknowledged ones)."""
        return len(self.ready)

    def full(self) -> bool:
        return (self.max_length is not None and len(self.ready) >= self.max_length) or (
            self.max_length_bytes is not None and self.ready_bytes >= self.max_length_bytes
        )

    def over_limit(self) -> bool:
        return (self.max_length is not None and len(self.ready) > self.max_length) or (
            self.max_length_bytes is not None and self.ready_bytes > self.max_length_bytes
        )

    def push(self, entry: _Entry) -> None:
        self.ready.append(entry)
        self.ready_bytes += entry.message.size

    def pop(self) -> _Entry:
        entry = self.ready.popleft()
        self.ready_bytes -= entry.message.size
        return entry

    def requeue(self, entries: list[_Entry]) -> None:
        """Put delivered messages back at the head, in their original order."""
        for entry in sorted(entries, key=lambda e: e.seq, reverse=True):
            entry.redelivered = True
            self.ready.appendleft(entry)
            self.ready_bytes += entry.message.size

    def active_consumers(self) -> Iterable[_Consumer]:
        if self.single_active:
            return list(self.consumers)[:1]
        return self.consumers


@final
class _Unacked:
    __slots__ = ("consumer", "entry", "queue", "tag")

    def __init__(self, tag: int, queue: Queue, entry: _Entry, consumer: _Consumer | None) -> None:
        self.tag = tag
        self.queue = queue
        self.entry = entry
        self.consumer = consumer


@final
class _TxPublish:
    __slots__ = ("body", "exchange", "mandatory", "properties", "routing_key")

    def __init__(
        self,
        exchange: str,
        routing_key: str,
        mandatory: bool,
        properties: BasicProperties,
        body: bytes | bytearray,
    ) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.mandatory = mandatory
        self.properties = properties
        self.body = body


# A transactional acknowledgement: the deliveries, and None for an ack or the requeue flag
# of a nack/reject.
_TxAck: TypeAlias = tuple[list["_Unacked"], bool | None]
# A returned publish in a transaction: (exchange, routing key, properties, body).
TxReturn: TypeAlias = tuple[str, str, BasicProperties, "bytes | bytearray"]


@final
class VirtualHost:
    """An isolated namespace of exchanges and queues."""

    def __init__(self, broker: Broker, name: str) -> None:
        self.broker = broker
        self.name = name
        self.exchanges: dict[str, Exchange] = {"": Exchange(self, "", "direct", durable=True)}
        for exchange_name, kind in _PREDECLARED:
            self.exchanges[exchange_name] = Exchange(self, exchange_name, kind, durable=True)
        self.queues: dict[str, Queue] = {}

    def __repr__(self) -> str:
        return f"<VirtualHost {self.name!r}>"

    def exchange(self, name: str) -> Exchange:
        exchange = self.exchanges.get(name)
        if exchange is None:
            raise BrokerError(404, f"no exchange '{name}' in vhost '{self.name}'")
        return exchange

    def queue(self, name: str) -> Queue:
        queue = self.queues.get(name)
        if queue is None:
            raise BrokerError(404, f"no queue '{name}' in vhost '{self.name}'")
        return queue

    # --- routing ------------------------------------------------------------------------------

    def route(
        self, exchange: Exchange, routing_key: str, headers: FieldTable | None
    ) -> list[Queue]:
        """Every queue a message reaches from *exchange*, each once, following
        exchange-to-exchange bindings and alternate exchanges without looping."""
        if exchange.name == "":
            queue = self.queues.get(routing_key)
            return [] if queue is None else [queue]
        found: dict[int, Queue] = {}
        seen: set[int] = set()
        stack = [exchange]
        while stack:
            current = stack.pop()
            if id(current) in seen:
                continue
            seen.add(id(current))
            matched = False
            for binding in current.matches(routing_key, headers):
                matched = True
                destination = binding.destination
                if isinstance(destination, Queue):
                    found.setdefault(id(destination), destination)
                else:
                    stack.append(destination)
            if not matched:
                alternate = current.arguments.get("alternate-exchange")
                if isinstance(alternate, str) and alternate in self.exchanges:
                    stack.append(self.exchanges[alternate])
        return list(found.values())

    # --- deletion -----------------------------------------------------------------------------

    def delete_queue(self, queue: Queue) -> int:
        """Remove *queue*, its bindings and consumers (cancelling them); returns how many
        ready messages were dropped."""
        if queue.deleted:
            return 0
        queue.deleted = True
        self.queues.pop(queue.name, None)
        for key, exchange in list(queue.bindings_in.items()):
            exchange.remove(key)
            self._maybe_auto_delete(exchange)
        queue.bindings_in.clear()
        for consumer in list(queue.consumers):
            consumer.channel.drop_consumer(consumer, notify=True)
        queue.consumers.clear()
        count = len(queue.ready)
        queue.ready.clear()
        queue.ready_bytes = 0
        self.broker.timed.discard(queue)
        self.broker.expiring.discard(queue)
        return count

    def delete_exchange(self, exchange: Exchange) -> None:
        exchange.deleted = True
        self.exchanges.pop(exchange.name, None)
        for key, binding in list(exchange.bindings.items()):
            exchange.remove(key)
            destination = binding.destination
            if isinstance(destination, Queue):
                destination.bindings_in.pop(key, None)
            else:
                destination.incoming.pop(key, None)
        for key, source in list(exchange.incoming.items()):
            source.remove(key)
            self._maybe_auto_delete(source)
        exchange.incoming.clear()

    def _maybe_auto_delete(self, exchange: Exchange) -> None:
        if exchange.auto_delete and not exchange.bindings and not exchange.deleted:
            self.delete_exchange(exchange)


@final
class Broker:
    """The root of the model: virtual hosts and the message clock.

    :param clock: monotonic seconds, for TTLs (``trio.current_time``, ``time.monotonic``,
        or a test's fake).
    :param wall_clock: seconds since the epoch, for ``x-death`` timestamps.
    """

    def __init__(
        self,
        *,
        vhosts: Iterable[str] = ("/",),
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
    ) -> None:
        self.clock = clock
        self.wall_clock = wall_clock
        self.vhosts: dict[str, VirtualHost] = {}
        for name in vhosts:
            self.add_vhost(name)
        self._seq = itertools.count(1)
        self._connection_ids = itertools.count(1)
        #: Queues that may hold messages with an expiry time.
        self.timed: set[Queue] = set()
        #: Queues with x-expires.
        self.expiring: set[Queue] = set()
        #: Called when a message with an expiry time was queued: the transport re-reads
        #: :meth:`next_deadline`.
        self.timer_changed: Callable[[], None] = _nothing
        #: Direct reply-to: token -> the consuming channel and its consumer tag.
        self.reply_to: dict[str, tuple[ModelChannel, str]] = {}

    def add_vhost(self, name: str) -> VirtualHost:
        """Create the virtual host *name* (with its predeclared exchanges) if it is new."""
        vhost = self.vhosts.get(name)
        if vhost is None:
            vhost = self.vhosts[name] = VirtualHost(self, name)
        return vhost

    def connect(
        self, vhost: str, sink: DeliverySink, *, cancel_notify: bool = True
    ) -> ModelConnection:
        """A client connection opened on *vhost* (which must exist)."""
        return ModelConnection(
            self, self.vhosts[vhost], sink, next(self._connection_ids), cancel_notify
        )

    def next_seq(self) -> int:
        return next(self._seq)

    # --- expiry -------------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When the earliest message at the head of a queue expires, or None."""
        deadline: float | None = None
        for queue in list(self.timed):
            head = next((e for e in queue.ready if e.expires_at is not None), None)
            if head is None:
                self.timed.discard(queue)
                continue
            expires_at = head.expires_at
            assert expires_at is not None
            if deadline is None or expires_at < deadline:
                deadline = expires_at
        for queue in self.expiring:
            unused = _unused_deadline(queue)
            if unused is not None and (deadline is None or unused < deadline):
                deadline = unused
        return deadline

    def handle_timer(self) -> None:
        """Expire (and dead-letter) every message whose time has come, at queue heads, and
        delete queues unused for their ``x-expires``."""
        now = self.clock()
        for queue in list(self.timed):
            self.expire_head(queue, now)
        for queue in list(self.expiring):
            deadline = _unused_deadline(queue)
            if queue.deleted:
                self.expiring.discard(queue)
            elif deadline is not None and deadline <= now:
                owner = queue.exclusive_owner
                if owner is not None:
                    owner.exclusive_queues.pop(queue.name, None)
                queue.vhost.delete_queue(queue)
                self.expiring.discard(queue)

    def touch(self, queue: Queue) -> None:
        """*queue* was used: its ``x-expires`` countdown starts again."""
        if queue.expires is not None:
            queue.idle_since = self.clock()
            self.timer_changed()

    def expire_head(self, queue: Queue, now: float) -> None:
        """Drop expired messages from the head of *queue* (RabbitMQ also expires at heads)."""
        ready = queue.ready
        while ready:
            head = ready[0]
            if head.expires_at is None or head.expires_at > now:
                return
            queue.pop()
            self.dead_letter(queue, head.message, "expired")

    # --- dead-lettering -----------------------------------------------------------------------

    def dead_letter(self, queue: Queue, message: Message, reason: str) -> None:
        """Republish *message* to the queue's dead-letter exchange, with an ``x-death``
        record; drop it when there is none, or when it would cycle without a rejection."""
        exchange_name = queue.dead_letter_exchange
        if exchange_name is None or queue.deleted:
            return
        vhost = queue.vhost
        exchange = vhost.exchanges.get(exchange_name)
        if exchange is None:
            return
        properties = message.properties
        headers: FieldTable = dict(properties.headers or {})
        deaths_value = headers.get("x-death")
        deaths: FieldArray = list(deaths_value) if isinstance(deaths_value, list) else []
        routing_keys: FieldArray = [message.routing_key]
        cc = headers.get("CC")
        if isinstance(cc, list):
            routing_keys += cc
        record: FieldTable | None = None
        for index, existing in enumerate(deaths):
            if (
                isinstance(existing, dict)
                and existing.get("queue") == queue.name
                and existing.get("reason") == reason
            ):
                record = existing
                del deaths[index]
                break
        stamp = datetime.fromtimestamp(int(self.wall_clock()), tz=UTC)
        if record is None:
            record = {
                "count": Int64(1),
                "reason": reason,
                "queue": queue.name,
                "time": stamp,
                "exchange": message.exchange,
                "routing-keys": routing_keys,
            }
            if reason == "expired" and properties.expiration is not None:
                record["original-expiration"] = properties.expiration
        else:
            count = _typed(record.get("count"))
            record = dict(record)
            record["count"] = Int64((count if isinstance(count, int) else 0) + 1)
            record["time"] = stamp
        deaths.insert(0, record)
        headers["x-death"] = deaths
        if "x-first-death-reason" not in headers:
            headers["x-first-death-reason"] = reason
            headers["x-first-death-queue"] = queue.name
            headers["x-first-death-exchange"] = message.exchange
        routing_key = queue.dead_letter_routing_key or message.routing_key
        new = Message(
            exchange=exchange_name,
            routing_key=routing_key,
            properties=attrs.evolve(
                properties,
                headers=headers,
                expiration=None if reason == "expired" else properties.expiration,
            ),
            body=message.body,
        )
        targets = vhost.route(exchange, routing_key, headers)
        rejected_before = any(isinstance(d, dict) and d.get("reason") == "rejected" for d in deaths)
        for target in targets:
            cycles = any(isinstance(d, dict) and d.get("queue") == target.name for d in deaths)
            if cycles and not rejected_before:
                continue  # RabbitMQ drops automatic dead-letter cycles
            self.enqueue(target, new)

    # --- enqueue and dispatch -----------------------------------------------------------------

    def enqueue(self, queue: Queue, message: Message) -> bool:
        """Put *message* into *queue*; False when a full ``reject-publish`` queue refused it."""
        if queue.deleted:
            return True
        now = self.clock()
        if queue.full() and queue.overflow != "drop-head":
            self.expire_head(queue, now)
        if queue.full() and queue.overflow != "drop-head":
            if queue.overflow == "reject-publish-dlx":
                self.dead_letter(queue, message, "maxlen")
            return False
        expires_at = _expiry(queue.message_ttl, message.properties.expiration, now)
        entry = _Entry(message, self.next_seq(), expires_at)
        if expires_at is not None and expires_at <= now:
            # TTL 0: delivered only to a consumer that can take it right now
            if not queue.ready and self._hand_over(queue, entry):
                return True
            self.dead_letter(queue, message, "expired")
            return True
        queue.push(entry)
        if expires_at is not None:
            self.timed.add(queue)
            self.timer_changed()
        while queue.over_limit():
            dropped = queue.pop()
            self.dead_letter(queue, dropped.message, "maxlen")
        self.dispatch(queue)
        return True

    def _hand_over(self, queue: Queue, entry: _Entry) -> bool:
        for consumer in queue.active_consumers():
            if consumer.can_take():
                queue.consumers.rotate(-1)
                consumer.channel.send(consumer, queue, entry)
                return True
        return False

    def dispatch(self, queue: Queue) -> None:
        """Hand ready messages to consumers with room, round robin."""
        if queue.dispatching:
            queue.redispatch = True  # a delivery led back here (dead-letter, ack)
            return
        queue.dispatching = True
        try:
            while True:
                queue.redispatch = False
                self._dispatch_once(queue)
                if not queue.redispatch:
                    return
        finally:
            queue.dispatching = False

    def _dispatch_once(self, queue: Queue) -> None:
        consumers = queue.consumers
        if not consumers or not queue.ready:
            return
        now = self.clock()
        idle = 0
        while queue.ready and consumers and not queue.deleted:
            if queue.single_active:
                consumer = consumers[0]
                if not consumer.can_take():
                    return
            else:
                consumer = consumers[0]
                consumers.rotate(-1)
                if not consumer.can_take():
                    idle += 1
                    if idle >= len(consumers):
                        return
                    continue
            idle = 0
            self.expire_head(queue, now)
            if not queue.ready:
                return
            consumer.channel.send(consumer, queue, queue.pop())


def _nothing() -> None:
    return None


def _unused_deadline(queue: Queue) -> float | None:
    if queue.expires is None or queue.consumers:
        return None
    return queue.idle_since + queue.expires / 1000


def _expiry(queue_ttl: int | None, expiration: str | None, now: float) -> float | None:
    ttl = queue_ttl
    if expiration is not None:
        per_message = _parse_expiration(expiration)
        ttl = per_message if ttl is None else min(ttl, per_message)
    return None if ttl is None else now + ttl / 1000


def _parse_expiration(expiration: str) -> int:
    if not expiration.isdigit():
        reason = (
            "{value_negative," + expiration + "}"
            if expiration[1:].isdigit() and expiration[0] == "-"
            else "no_integer"
        )
        raise BrokerError(406, f"invalid expiration '{expiration}': {reason}")
    return int(expiration)


def _generated_name(prefix: str) -> str:
    return prefix + base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")


@final
class ModelConnection:
    """One client connection's view of the broker: its channels and exclusive queues."""

    def __init__(
        self,
        broker: Broker,
        vhost: VirtualHost,
        sink: DeliverySink,
        number: int,
        cancel_notify: bool,
    ) -> None:
        self.broker = broker
        self.vhost = vhost
        self.sink = sink
        self.number = number
        self.cancel_notify = cancel_notify
        self.channels: dict[int, ModelChannel] = {}
        self.exclusive_queues: dict[str, Queue] = {}
        self.closed = False

    def __repr__(self) -> str:
        return f"<ModelConnection {self.number} on {self.vhost.name!r}>"

    def open_channel(self, number: int) -> ModelChannel:
        """The model side of a newly opened channel."""
        channel = self.channels[number] = ModelChannel(self, number)
        return channel

    def close_channel(self, number: int) -> None:
        """The channel closed (either side): requeue its unacked messages, drop its
        consumers."""
        channel = self.channels.pop(number, None)
        if channel is not None:
            channel.close()

    def close(self) -> None:
        """The connection is gone: close every channel, then delete exclusive queues."""
        if self.closed:
            return
        self.closed = True
        for number in list(self.channels):
            self.close_channel(number)
        for queue in list(self.exclusive_queues.values()):
            self.vhost.delete_queue(queue)
        self.exclusive_queues.clear()


def _locked(queue: Queue) -> BrokerError:
    return BrokerError(
        405,
        f"cannot obtain exclusive access to locked queue '{queue.name}' in vhost "
        f"'{queue.vhost.name}'. It could be originally declared on another connection or the "
        "exclusive property value does not match that of the original declaration.",
    )


@final
class ModelChannel:
    """One open channel: the operations a client asks for, with RabbitMQ's checks."""

    def __init__(self, connection: ModelConnection, number: int) -> None:
        self.connection = connection
        self.vhost = connection.vhost
        self.broker = connection.broker
        self.number = number
        self.next_tag = 1
        self.unacked: dict[int, _Unacked] = {}
        self.consumers: dict[str, _Consumer] = {}
        self.consumer_prefetch = 0
        self.global_prefetch = 0
        #: Unacked deliveries to consumers (for the channel-wide prefetch).
        self.consumer_unacked = 0
        self.active = True
        self.confirm = False
        self.publish_seq = 0
        self.transactional = False
        self.tx_publishes: list[_TxPublish] = []
        self.tx_acks: list[_TxAck] = []
        self.last_queue: str | None = None
        #: Direct reply-to: the consumer tag and token when this channel consumes replies.
        self.reply_tag: str | None = None
        self.reply_token = ""
        self.closed = False

    # --- helpers ------------------------------------------------------------------------------

    def _queue_name(self, name: str) -> str:
        if name:
            return name
        if self.last_queue is None:
            raise BrokerError(404, "no previously declared queue")
        return self.last_queue

    def _accessible(self, name: str) -> Queue:
        queue = self.vhost.queue(self._queue_name(name))
        self._check_owner(queue)
        return queue

    def _check_owner(self, queue: Queue) -> None:
        owner = queue.exclusive_owner
        if owner is not None and owner is not self.connection:
            raise _locked(queue)

    # --- exchanges ----------------------------------------------------------------------------

    def exchange_declare(
        self,
        name: str,
        type_: str,
        *,
        passive: bool = False,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: FieldTable | None = None,
    ) -> None:
        """``exchange.declare``."""
        vhost = self.vhost
        if passive:
            if name == "":
                return
            vhost.exchange(name)
            return
        if name == "":
            raise BrokerError(403, "operation not permitted on the default exchange")
        existing = vhost.exchanges.get(name)
        if existing is not None:
            for field, received, current in (
                ("type", type_, existing.type),
                ("durable", durable, existing.durable),
                ("auto_delete", auto_delete, existing.auto_delete),
                ("internal", internal, existing.internal),
            ):
                if received != current:
                    raise BrokerError(
                        406,
                        f"inequivalent arg '{field}' for exchange '{name}' in vhost "
                        f"'{vhost.name}': received {_show(received)} but current is "
                        f"{_show(current)}",
                    )
            return
        if name.startswith("amq."):
            raise BrokerError(403, f"exchange name '{name}' contains reserved prefix 'amq.*'")
        if type_ not in EXCHANGE_TYPES:
            raise BrokerError(503, f"unknown exchange type '{type_}'")
        vhost.exchanges[name] = Exchange(
            vhost,
            name,
            type_,
            durable=durable,
            auto_delete=auto_delete,
            internal=internal,
            arguments=arguments,
        )

    def exchange_delete(self, name: str, *, if_unused: bool = False) -> None:
        """``exchange.delete``: deleting a missing exchange succeeds, like RabbitMQ 3.10."""
        vhost = self.vhost
        if name == "":
            raise BrokerError(403, "operation not permitted on the default exchange")
        exchange = vhost.exchanges.get(name)
        if exchange is None:
            return
        if name.startswith("amq."):
            raise BrokerError(
                403, f"deletion of system exchange '{name}' in vhost '{vhost.name}' not allowed"
            )
        if if_unused and exchange.bindings:
            raise BrokerError(406, f"exchange '{name}' in vhost '{vhost.name}' in use")
        vhost.delete_exchange(exchange)

    def exchange_bind(
        self, destination: str, source: str, routing_key: str, arguments: FieldTable
    ) -> None:
        """``exchange.bind``: route from *source* into *destination* too."""
        vhost = self.vhost
        if destination == "" or source == "":
            raise BrokerError(403, "operation not permitted on the default exchange")
        dest = vhost.exchange(destination)
        src = vhost.exchange(source)
        key = ("exchange", id(dest), routing_key, _freeze(arguments))
        if src.add(_Binding(dest, routing_key, dict(arguments), key)):
            dest.incoming[key] = src

    def exchange_unbind(
        self, destination: str, source: str, routing_key: str, arguments: FieldTable
    ) -> None:
        """``exchange.unbind``; a binding that does not exist is not an error."""
        vhost = self.vhost
        if destination == "" or source == "":
            raise BrokerError(403, "operation not permitted on the default exchange")
        dest = vhost.exchange(destination)
        src = vhost.exchange(source)
        key = ("exchange", id(dest), routing_key, _freeze(arguments))
        if src.remove(key):
            dest.incoming.pop(key, None)
            vhost._maybe_auto_delete(src)

    # --- queues -------------------------------------------------------------------------------

    def queue_declare(
        self,
        name: str,
        *,
        passive: bool = False,
        durable: bool = False,
        exclusive: bool = False,
        auto_delete: bool = False,
        arguments: FieldTable | None = None,
    ) -> QueueInfo:
        """``queue.declare``; an empty name makes a server-named ``amq.gen-...`` queue."""
        vhost = self.vhost
        arguments = dict(arguments or {})
        if passive:
            queue = self._accessible(name)
            self.broker.touch(queue)
            self.broker.expire_head(queue, self.broker.clock())
            self.last_queue = queue.name
            return QueueInfo(queue.name, queue.message_count, len(queue.consumers))
        generated = name == ""
        if generated:
            name = _generated_name("amq.gen-")
        existing = vhost.queues.get(name)
        if existing is not None:
            self._check_owner(existing)
            if exclusive and existing.exclusive_owner is None:
                raise _locked(existing)
            self._check_equivalent(existing, durable, auto_delete, arguments)
            self.broker.touch(existing)
            self.broker.expire_head(existing, self.broker.clock())
            self.last_queue = name
            return QueueInfo(name, existing.message_count, len(existing.consumers))
        if name.startswith("amq.") and not generated:
            raise BrokerError(403, f"queue name '{name}' contains reserved prefix 'amq.*'")
        owner = self.connection if exclusive else None
        queue = Queue(
            vhost,
            name,
            durable=durable,
            exclusive_owner=owner,
            auto_delete=auto_delete,
            arguments=arguments,
        )
        vhost.queues[name] = queue
        if queue.expires is not None:
            self.broker.expiring.add(queue)
            self.broker.timer_changed()
        if owner is not None:
            owner.exclusive_queues[name] = queue
        self.last_queue = name
        return QueueInfo(name, 0, 0)

    def _check_equivalent(
        self, queue: Queue, durable: bool, auto_delete: bool, arguments: FieldTable
    ) -> None:
        where = f"for queue '{queue.name}' in vhost '{queue.vhost.name}'"
        for field, received, current in (
            ("durable", durable, queue.durable),
            ("auto_delete", auto_delete, queue.auto_delete),
        ):
            if received != current:
                raise BrokerError(
                    406,
                    f"inequivalent arg '{field}' {where}: received {_show(received)} but "
                    f"current is {_show(current)}",
                )
        for key in _EQUIVALENT_ARGS:
            received_value = _typed(arguments.get(key))
            current_value = _typed(queue.arguments.get(key))
            if key == "x-queue-type":
                received_value = received_value or "classic"
                current_value = current_value or "classic"
            if not _same_value(received_value, current_value):
                raise BrokerError(
                    406,
                    f"inequivalent arg '{key}' {where}: received {_show_arg(received_value)} "
                    f"but current is {_show_arg(current_value)}",
                )

    def queue_bind(
        self, queue: str, exchange: str, routing_key: str, arguments: FieldTable
    ) -> None:
        """``queue.bind`` (an empty queue name means the channel's last declared queue)."""
        if queue == "" and routing_key == "":
            routing_key = self._queue_name("")
        target = self._accessible(queue)
        if exchange == "":
            raise BrokerError(403, "operation not permitted on the default exchange")
        source = self.vhost.exchange(exchange)
        key = ("queue", id(target), routing_key, _freeze(arguments))
        if source.add(_Binding(target, routing_key, dict(arguments), key)):
            target.bindings_in[key] = source

    def queue_unbind(
        self, queue: str, exchange: str, routing_key: str, arguments: FieldTable
    ) -> None:
        """``queue.unbind``; a binding that does not exist is not an error."""
        target = self._accessible(queue)
        if exchange == "":
            raise BrokerError(403, "operation not permitted on the default exchange")
        source = self.vhost.exchange(exchange)
        key = ("queue", id(target), routing_key, _freeze(arguments))
        if source.remove(key):
            target.bindings_in.pop(key, None)
            self.vhost._maybe_auto_delete(source)

    def queue_purge(self, name: str) -> int:
        """``queue.purge``: drop ready messages; returns how many."""
        queue = self._accessible(name)
        count = len(queue.ready)
        queue.ready.clear()
        queue.ready_bytes = 0
        return count

    def queue_delete(self, name: str, *, if_unused: bool = False, if_empty: bool = False) -> int:
        """``queue.delete``: deleting a missing queue succeeds with 0, like RabbitMQ 3.10."""
        name = self._queue_name(name)
        queue = self.vhost.queues.get(name)
        if queue is None:
            return 0
        self._check_owner(queue)
        where = f"queue '{name}' in vhost '{self.vhost.name}'"
        if if_unused and queue.consumers:
            raise BrokerError(406, f"{where} in use")
        if if_empty and queue.ready:
            raise BrokerError(406, f"{where} not empty")
        owner = queue.exclusive_owner
        if owner is not None:
            owner.exclusive_queues.pop(name, None)
        return self.vhost.delete_queue(queue)

    # --- consumers ----------------------------------------------------------------------------

    def qos(self, prefetch_count: int, *, global_: bool) -> None:
        """``basic.qos``: per-consumer (for consumers created after it) or channel-wide."""
        if global_:
            self.global_prefetch = prefetch_count
        else:
            self.consumer_prefetch = prefetch_count
        for queue in {id(c.queue): c.queue for c in self.consumers.values()}.values():
            self.broker.dispatch(queue)

    def consume(
        self,
        queue_name: str,
        consumer_tag: str,
        *,
        no_ack: bool,
        exclusive: bool,
        arguments: FieldTable,
    ) -> str:
        """``basic.consume``; returns the consumer tag (generated when empty). Deliveries
        start only once the caller calls :meth:`start_consumer` (after ``consume-ok``)."""
        if queue_name == _DIRECT_REPLY_TO:
            return self._consume_reply_to(consumer_tag, no_ack=no_ack)
        queue = self._accessible(queue_name)
        if not consumer_tag:
            consumer_tag = _generated_name("amq.ctag-")
        if consumer_tag in self.consumers:
            raise BrokerError(530, f"attempt to reuse consumer tag '{consumer_tag}'")
        if queue.consumers and (exclusive or any(c.exclusive for c in queue.consumers)):
            raise BrokerError(
                403, f"queue '{queue.name}' in vhost '{self.vhost.name}' in exclusive use"
            )
        consumer = _Consumer(
            self,
            queue,
            consumer_tag,
            no_ack=no_ack,
            exclusive=exclusive,
            prefetch=self.consumer_prefetch,
            arguments=dict(arguments),
        )
        self.consumers[consumer_tag] = consumer
        queue.consumers.append(consumer)
        queue.ever_consumed = True
        return consumer_tag

    def _consume_reply_to(self, consumer_tag: str, *, no_ack: bool) -> str:
        if not no_ack:
            raise BrokerError(406, "reply consumer cannot acknowledge")
        if self.reply_tag is not None:
            raise BrokerError(406, "reply consumer already set")
        if not consumer_tag:
            consumer_tag = _generated_name("amq.ctag-")
        if consumer_tag in self.consumers:
            raise BrokerError(530, f"attempt to reuse consumer tag '{consumer_tag}'")
        self.reply_token = _generated_name("")
        self.broker.reply_to[self.reply_token] = (self, consumer_tag)
        self.reply_tag = consumer_tag
        return consumer_tag

    def reply_to_address(self) -> str | None:
        """``amq.rabbitmq.reply-to.<token>`` when this channel consumes direct replies."""
        if self.reply_tag is None:
            return None
        return f"{_DIRECT_REPLY_TO}.{self.reply_token}"

    def start_consumer(self, consumer_tag: str) -> None:
        """Begin deliveries to a consumer after its ``consume-ok`` went out."""
        consumer = self.consumers.get(consumer_tag)
        if consumer is not None:
            self.broker.dispatch(consumer.queue)

    def cancel(self, consumer_tag: str) -> None:
        """``basic.cancel``: an unknown tag is not an error."""
        if self.reply_tag is not None and self.reply_tag == consumer_tag:
            self._drop_reply_to()
            return
        consumer = self.consumers.get(consumer_tag)
        if consumer is not None:
            self.drop_consumer(consumer, notify=False)

    def _drop_reply_to(self) -> None:
        if self.reply_tag is not None:
            self.broker.reply_to.pop(self.reply_token, None)
            self.reply_tag = None

    def drop_consumer(self, consumer: _Consumer, *, notify: bool) -> None:
        """Remove *consumer*; with *notify* (its queue went away) tell the client."""
        self.consumers.pop(consumer.tag, None)
        queue = consumer.queue
        if consumer in queue.consumers:
            queue.consumers.remove(consumer)
        for record in self.unacked.values():
            if record.consumer is consumer:
                record.consumer = None
                self.consumer_unacked -= 1
        if notify and self.connection.cancel_notify and not self.closed:
            self.connection.sink.consumer_cancelled(self.number, consumer.tag)
        if not queue.consumers:
            self.broker.touch(queue)
        if queue.auto_delete and queue.ever_consumed and not queue.consumers and not queue.deleted:
            owner = queue.exclusive_owner
            if owner is not None:
                owner.exclusive_queues.pop(queue.name, None)
            self.vhost.delete_queue(queue)
        elif queue.single_active and not queue.deleted:
            self.broker.dispatch(queue)

    def send(self, consumer: _Consumer, queue: Queue, entry: _Entry) -> None:
        """Deliver *entry* from *queue* to *consumer* (the model's dispatch calls this)."""
        tag = self.next_tag
        self.next_tag = tag + 1
        if not consumer.no_ack:
            self.unacked[tag] = _Unacked(tag, queue, entry, consumer)
            consumer.unacked += 1
            self.consumer_unacked += 1
        self.connection.sink.deliver(
            self.number, consumer.tag, tag, entry.redelivered, entry.message
        )

    # --- publishing ---------------------------------------------------------------------------

    def publish(
        self,
        exchange: str,
        routing_key: str,
        properties: BasicProperties,
        body: bytes | bytearray,
        *,
        mandatory: bool = False,
    ) -> PublishOutcome | None:
        """``basic.publish``; None inside a transaction (the outcome comes at commit)."""
        source = self.vhost.exchange(exchange)
        if source.internal:
            raise BrokerError(
                403,
                f"cannot publish to internal exchange '{exchange}' in vhost '{self.vhost.name}'",
            )
        if properties.expiration is not None:
            _parse_expiration(properties.expiration)
        if self.transactional:
            self.tx_publishes.append(_TxPublish(exchange, routing_key, mandatory, properties, body))
            return None
        return self._route(source, routing_key, properties, body)

    def _route(
        self,
        source: Exchange,
        routing_key: str,
        properties: BasicProperties,
        body: bytes | bytearray,
    ) -> PublishOutcome:
        if source.name == "" and routing_key.startswith(_DIRECT_REPLY_TO + "."):
            return self._reply(routing_key, properties, body)
        message = Message(source.name, routing_key, properties, body)
        if properties.reply_to == _DIRECT_REPLY_TO:
            address = self.reply_to_address()
            if address is None:
                raise BrokerError(406, "fast reply consumer does not exist")
            message = Message(
                source.name, routing_key, attrs.evolve(properties, reply_to=address), body
            )
        queues = self.vhost.route(source, routing_key, properties.headers)
        rejected = False
        for queue in queues:
            if not self.broker.enqueue(queue, message):
                rejected = True
        return PublishOutcome(routed=bool(queues), rejected=rejected)

    def _reply(
        self, routing_key: str, properties: BasicProperties, body: bytes | bytearray
    ) -> PublishOutcome:
        token = routing_key[len(_DIRECT_REPLY_TO) + 1 :]
        target = self.broker.reply_to.get(token)
        if target is None:
            return PublishOutcome(routed=False, rejected=False)
        channel, tag = target
        tag_number = channel.next_tag
        channel.next_tag += 1
        channel.connection.sink.deliver(
            channel.number, tag, tag_number, False, Message("", routing_key, properties, body)
        )
        return PublishOutcome(routed=True, rejected=False)

    def next_publish_number(self) -> int:
        """Confirm mode: the sequence number of the publish being handled."""
        self.publish_seq += 1
        return self.publish_seq

    # --- basic.get ----------------------------------------------------------------------------

    def get(self, queue_name: str, *, no_ack: bool) -> GetResult | None:
        """``basic.get``: the head message, or None (get-empty)."""
        queue = self._accessible(queue_name)
        self.broker.touch(queue)
        self.broker.expire_head(queue, self.broker.clock())
        if not queue.ready:
            return None
        entry = queue.pop()
        tag = self.next_tag
        self.next_tag = tag + 1
        if not no_ack:
            self.unacked[tag] = _Unacked(tag, queue, entry, None)
        return GetResult(tag, entry.redelivered, entry.message, len(queue.ready))

    # --- acknowledgements ---------------------------------------------------------------------

    def _take(self, delivery_tag: int, multiple: bool) -> list[_Unacked]:
        """Remove and return the outstanding deliveries an ack names (RabbitMQ's
        collect_acks: the tag itself must be outstanding; 0 with *multiple* means all)."""
        unacked = self.unacked
        if multiple and delivery_tag == 0:
            tags = list(unacked)
        elif delivery_tag not in unacked:
            raise BrokerError(406, f"unknown delivery tag {delivery_tag}")
        elif multiple:
            tags = list(itertools.takewhile(lambda t: t <= delivery_tag, unacked))
        else:
            tags = [delivery_tag]
        records = [unacked.pop(tag) for tag in tags]
        for record in records:
            consumer = record.consumer
            if consumer is not None:
                consumer.unacked -= 1
                self.consumer_unacked -= 1
        return records

    def ack(self, delivery_tag: int, *, multiple: bool = False) -> None:
        """``basic.ack``: 406 for a tag that is not outstanding on this channel."""
        records = self._take(delivery_tag, multiple)
        if self.transactional:
            self.tx_acks.append((records, None))
            return
        self._settled(records)

    def nack(self, delivery_tag: int, *, multiple: bool = False, requeue: bool = True) -> None:
        """``basic.nack`` (and ``basic.reject`` with ``multiple=False``)."""
        records = self._take(delivery_tag, multiple)
        if self.transactional:
            self.tx_acks.append((records, requeue))
            return
        self._give_back(records, requeue=requeue, reason="rejected")

    def _settled(self, records: list[_Unacked]) -> None:
        queues: dict[int, Queue] = {}
        for record in records:
            queues[id(record.queue)] = record.queue
        self._redispatch(queues.values())

    def _redispatch(self, queues: Iterable[Queue]) -> None:
        targets = {id(q): q for q in queues}
        if self.global_prefetch:
            for consumer in self.consumers.values():
                targets[id(consumer.queue)] = consumer.queue
        for queue in targets.values():
            if not queue.deleted:
                self.broker.dispatch(queue)

    def _give_back(self, records: list[_Unacked], *, requeue: bool, reason: str) -> None:
        by_queue: dict[int, tuple[Queue, list[_Entry]]] = {}
        for record in records:
            by_queue.setdefault(id(record.queue), (record.queue, []))[1].append(record.entry)
        for queue, entries in by_queue.values():
            if queue.deleted:
                continue
            if requeue:
                queue.requeue(entries)
                if any(e.expires_at is not None for e in entries):
                    self.broker.timed.add(queue)
                    self.broker.timer_changed()
            else:
                for entry in entries:
                    self.broker.dead_letter(queue, entry.message, reason)
        self._redispatch(q for q, _ in by_queue.values())

    def recover(self) -> None:
        """``basic.recover`` with requeue: every unacked message goes back, redelivered."""
        records = self._take(0, True)
        self._give_back(records, requeue=True, reason="rejected")

    # --- modes --------------------------------------------------------------------------------

    def confirm_select(self) -> None:
        """``confirm.select``."""
        if self.transactional:
            raise BrokerError(406, "cannot switch from tx to confirm mode")
        self.confirm = True

    def tx_select(self) -> None:
        """``tx.select``."""
        if self.confirm:
            raise BrokerError(406, "cannot switch from confirm to tx mode")
        self.transactional = True

    def tx_commit(self) -> list[TxReturn]:
        """``tx.commit``: apply buffered publishes, then acks; returns the mandatory
        publishes no queue took, for ``basic.return``."""
        if not self.transactional:
            raise BrokerError(406, "channel is not transactional")
        publishes, acks = self.tx_publishes, self.tx_acks
        self.tx_publishes, self.tx_acks = [], []
        returned: list[TxReturn] = []
        for publish in publishes:
            source = self.vhost.exchanges.get(publish.exchange)
            if source is None:
                continue  # deleted since: RabbitMQ drops it as well
            outcome = self._route(source, publish.routing_key, publish.properties, publish.body)
            if publish.mandatory and not outcome.routed:
                returned.append(
                    (publish.exchange, publish.routing_key, publish.properties, publish.body)
                )
        for records, requeue in acks:
            if requeue is None:
                self._settled(records)
            else:
                self._give_back(records, requeue=requeue, reason="rejected")
        return returned

    def tx_rollback(self) -> None:
        """``tx.rollback``: forget buffered publishes; acknowledged deliveries become
        outstanding again under their delivery tags."""
        if not self.transactional:
            raise BrokerError(406, "channel is not transactional")
        acks = self.tx_acks
        self.tx_publishes, self.tx_acks = [], []
        restored: dict[int, _Unacked] = {}
        for records, _ in acks:
            for record in records:
                consumer = record.consumer
                if consumer is not None and consumer.tag in self.consumers:
                    consumer.unacked += 1
                    self.consumer_unacked += 1
                else:
                    record.consumer = None
                restored[record.tag] = record
        restored.update(self.unacked)
        self.unacked = dict(sorted(restored.items()))

    def flow(self, active: bool) -> None:
        """``channel.flow`` from the client: pause or resume deliveries."""
        self.active = active
        if active:
            self._redispatch(c.queue for c in self.consumers.values())

    # --- end ----------------------------------------------------------------------------------

    def close(self) -> None:
        """Requeue unacked messages (redelivered) and drop consumers."""
        if self.closed:
            return
        self.closed = True
        self._drop_reply_to()
        for consumer in list(self.consumers.values()):
            self.drop_consumer(consumer, notify=False)
        records = list(self.unacked.values())
        for pending, _ in self.tx_acks:  # acknowledged in a transaction never committed
            records += pending
        self.unacked.clear()
        self.tx_acks = []
        self.tx_publishes = []
        self.consumer_unacked = 0
        self._give_back(records, requeue=True, reason="rejected")


def _show(value: object) -> str:
    if isinstance(value, bool):
        return "'true'" if value else "'false'"
    return f"'{value}'"


def _show_arg(value: object) -> str:
    if value is None:
        return "none"
    kind = (
        "longstr"
        if isinstance(value, str)
        else "bool"
        if isinstance(value, bool)
        else ("long" if isinstance(value, int) else type(value).__name__)
    )
    return f"the value '{value}' of type '{kind}'"
