"""Queues, the messages waiting in them, and their consumers.

A :class:`Queue` holds its ready messages (FIFO), its limits and dead-letter settings as
parsed from its arguments, its consumers and the bindings that lead to it. Moving messages
between queues (routing, dispatch, expiry, dead-lettering) is the virtual host's work
(:mod:`._vhost`); the channel a consumer belongs to is seen here only through
:class:`ConsumerChannel`, so this module does not import the channel's.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Final, Protocol, final

import attrs

from ._errors import BrokerError
from ._fields import typed

if TYPE_CHECKING:
    from collections.abc import Iterable

    from amqp_sansio import FieldTable, FieldValue

    from ._message import Message
    from ._routing import BindingKey, Exchange

__all__ = [
    "EQUIVALENT_ARGS",
    "Consumer",
    "ConsumerChannel",
    "Entry",
    "Queue",
    "QueueInfo",
    "QueueOwner",
]

_OVERFLOW_MODES: Final = frozenset(("drop-head", "reject-publish", "reject-publish-dlx"))
_QUEUE_TYPES: Final = frozenset(("classic", "quorum"))
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
)


@final
class Entry:
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


class ConsumerChannel(Protocol):
    """What a queue needs from the channel a consumer belongs to (``ModelChannel``)."""

    @property
    def active(self) -> bool:
        """False while ``channel.flow`` paused deliveries."""

    @property
    def global_prefetch(self) -> int:
        """The channel-wide prefetch (0: none)."""

    @property
    def consumer_unacked(self) -> int:
        """Deliveries to the channel's consumers not yet acknowledged."""

    def send(self, consumer: Consumer, queue: Queue, entry: Entry) -> None:
        """Deliver *entry* from *queue* to *consumer*."""

    def drop_consumer(self, consumer: Consumer, *, notify: bool) -> None:
        """Remove *consumer*; with *notify* (its queue went away) tell the client."""


class QueueOwner(Protocol):
    """The connection an exclusive queue belongs to (``ModelConnection``)."""

    @property
    def exclusive_queues(self) -> dict[str, Queue]:
        """Its exclusive queues by name."""


@final
class Consumer:
    """One ``basic.consume`` on a queue."""

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

    def can_take(self) -> bool:
        """Whether the consumer has room for one more delivery now."""
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
    ) -> None:
        self.vhost_name = vhost_name
        self.name = name
        self.durable = durable
        self.exclusive_owner = exclusive_owner
        self.auto_delete = auto_delete
        self.arguments = arguments
        self.ready: deque[Entry] = deque()
        self.ready_bytes = 0
        self.consumers: deque[Consumer] = deque()
        #: (exchange, binding key) of every binding with this queue as destination.
        self.bindings_in: dict[BindingKey, Exchange[Queue]] = {}
        self.deleted = False
        self.ever_consumed = False
        self.dispatching = False
        self.redispatch = False
        where = vhost_name
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
        self.idle_since = now
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
        """Whether one more message would exceed ``x-max-length`` or ``x-max-length-bytes``."""
        return (self.max_length is not None and len(self.ready) >= self.max_length) or (
            self.max_length_bytes is not None and self.ready_bytes >= self.max_length_bytes
        )

    def over_limit(self) -> bool:
        """Whether the queue holds more than its limits allow."""
        return (self.max_length is not None and len(self.ready) > self.max_length) or (
            self.max_length_bytes is not None and self.ready_bytes > self.max_length_bytes
        )

    def push(self, entry: Entry) -> None:
        """Append *entry* at the tail."""
        self.ready.append(entry)
        self.ready_bytes += entry.message.size

    def pop(self) -> Entry:
        """Take the head."""
        entry = self.ready.popleft()
        self.ready_bytes -= entry.message.size
        return entry

    def requeue(self, entries: list[Entry]) -> None:
        """Put delivered messages back at the head, in their original order."""
        for entry in sorted(entries, key=lambda e: e.seq, reverse=True):
            entry.redelivered = True
            self.ready.appendleft(entry)
            self.ready_bytes += entry.message.size

    def active_consumers(self) -> Iterable[Consumer]:
        """The consumers that may receive now (only the first with single active consumer)."""
        if self.single_active:
            return list(self.consumers)[:1]
        return self.consumers
