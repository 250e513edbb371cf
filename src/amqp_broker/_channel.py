"""Connections and channels as the model sees them: the operations a client asks for on a
channel, with RabbitMQ's checks and reply texts, and what the channel holds (consumers,
unacknowledged deliveries, confirm and transaction state).

Sessions (:mod:`._session`) translate wire methods into calls on :class:`ModelChannel`; the
model answers with return values, raises :class:`~._errors.BrokerError` carrying RabbitMQ's
reply code and text, and pushes deliveries and server-sent cancels into the
:class:`DeliverySink` of the channel that consumes (often another connection's session).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Final, Protocol, TypeAlias, final

import attrs

from amqp_sansio import BasicProperties, FieldTable

from ._errors import BrokerError
from ._fields import freeze, generated_name, same_value, show, show_arg, typed, wire_type
from ._message import Message, parse_expiration
from ._permissions import check
from ._queues import EQUIVALENT_ARGS, QUEUE_TYPES, Consumer, Entry, Queue, QueueInfo
from ._routing import EXCHANGE_TYPES, Binding, Exchange

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable

    from ._permissions import Permission
    from ._streams import StreamLog
    from ._vhost import VirtualHost

__all__ = [
    "DIRECT_REPLY_TO",
    "DeliverySink",
    "GetResult",
    "ModelChannel",
    "ModelConnection",
    "PublishOutcome",
    "ReplyConsumers",
    "TimeoutWatch",
    "TxReturn",
]

#: The arguments a stream consumer may give: RabbitMQ 3.10's, and 3.13's filtering.
_STREAM_CONSUMER_ARGS: Final = frozenset(
    ("x-stream-offset", "x-credit", "x-stream-filter", "x-stream-match-unfiltered")
)

#: The pseudo-queue of direct reply-to.
DIRECT_REPLY_TO: Final = "amq.rabbitmq.reply-to"


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
        stream_offset: int | None = None,
    ) -> None:
        """Send ``basic.deliver`` with *message* (from a stream: with the ``x-stream-offset``
        header)."""

    def consumer_cancelled(self, channel: int, consumer_tag: str) -> None:
        """The broker cancelled a consumer (its queue was deleted)."""

    def channel_failed(self, channel: int, error: BrokerError) -> None:
        """The broker closes *channel* with *error* on its own (a consumer timeout)."""


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
class _Unacked:
    """A delivery waiting for its acknowledgement."""

    __slots__ = ("consumer", "delivered_at", "entry", "queue", "tag")

    def __init__(
        self,
        tag: int,
        queue: Queue,
        entry: Entry,
        consumer: Consumer | None,
        delivered_at: float,
    ) -> None:
        self.tag = tag
        self.queue = queue
        self.entry = entry
        self.consumer = consumer
        #: When it was delivered, on the broker's monotonic clock (consumer timeout).
        self.delivered_at = delivered_at


@final
class _TxPublish:
    __slots__ = ("body", "exchange", "mandatory", "properties", "routing_key", "skip")

    def __init__(
        self,
        exchange: str,
        routing_key: str,
        mandatory: bool,
        properties: BasicProperties,
        body: bytes | bytearray,
        skip: Collection[int],
    ) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.mandatory = mandatory
        self.properties = properties
        self.body = body
        self.skip = skip


# A transactional acknowledgement: the deliveries, and None for an ack or the requeue flag
# of a nack/reject.
_TxAck: TypeAlias = tuple[list["_Unacked"], bool | None]
# A returned publish in a transaction: (exchange, routing key, properties, body).
TxReturn: TypeAlias = tuple[str, str, BasicProperties, "bytes | bytearray"]

#: Direct reply-to: token -> the consuming channel and its consumer tag.
ReplyConsumers: TypeAlias = dict[str, tuple["ModelChannel", str]]
#: Channels that may hold unacknowledged deliveries, watched for the consumer timeout.
TimeoutWatch: TypeAlias = dict["ModelChannel", None]


@final
class ModelConnection:
    """One client connection's view of the broker: its channels and exclusive queues, who
    it is and what it may do."""

    def __init__(
        self,
        vhost: VirtualHost,
        sink: DeliverySink,
        number: int,
        cancel_notify: bool,
        reply_to: ReplyConsumers,
        *,
        user: str = "",
        permission: Permission | None = None,
        timeouts: TimeoutWatch | None = None,
    ) -> None:
        self.vhost = vhost
        self.sink = sink
        self.number = number
        self.cancel_notify = cancel_notify
        self.channels: dict[int, ModelChannel] = {}
        self.exclusive_queues: dict[str, Queue] = {}
        #: Direct reply-to consumers of the whole broker, by token.
        self.reply_to = reply_to
        #: Who logged in, and what they may do in this vhost (None: everything).
        self.user = user
        self.permission = permission
        #: False while the connection's output buffer is full: its consumers get nothing.
        self.writable = True
        self._timeouts = timeouts
        self.closed = False
        vhost.connections += 1

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
        self.vhost.connections -= 1
        for number in list(self.channels):
            self.close_channel(number)
        for queue in list(self.exclusive_queues.values()):
            self.vhost.delete_queue(queue)
        self.exclusive_queues.clear()

    def set_writable(self, writable: bool) -> None:
        """The output buffer filled up (False) or drained (True); deliveries stop or resume."""
        if writable is self.writable:
            return
        self.writable = writable
        queues: dict[int, Queue] = {}
        for channel in self.channels.values():
            channel.deliverable = channel.active and writable
            for consumer in channel.consumers.values():
                queues[id(consumer.queue)] = consumer.queue
        if writable:
            for queue in queues.values():
                if not queue.deleted:
                    self.vhost.dispatch(queue)

    def watch_timeout(self, channel: ModelChannel) -> None:
        """*channel* got its first unacknowledged delivery: the consumer timeout applies."""
        timeouts = self._timeouts
        if timeouts is not None and channel not in timeouts:
            timeouts[channel] = None
            self.vhost.clock.timer_changed()

    def check(self, access: str, kind: str, name: str) -> None:
        """403 unless the user may *access* (configure, write, read) the *kind* *name*."""
        permission = self.permission
        if permission is not None:
            check(permission, access, kind, name, self.vhost.name, self.user)


def stores_binding(source: Exchange[Queue], target: Queue) -> bool:
    """Whether a binding survives a restart: both ends durable, the queue not exclusive."""
    return source.durable and target.durable and target.exclusive_owner is None


def _not_default(exchange: str) -> None:
    if exchange == "":
        raise BrokerError(403, "operation not permitted on the default exchange")


def _resource(queue: Queue) -> str:
    """A queue as RabbitMQ names it in texts (``rabbit_misc:rs``)."""
    return f"queue '{queue.name}' in vhost '{queue.vhost_name}'"


def _locked(queue: Queue) -> BrokerError:
    return BrokerError(
        405,
        f"cannot obtain exclusive access to locked queue '{queue.name}' in vhost "
        f"'{queue.vhost_name}'. It could be originally declared on another connection or the "
        "exclusive property value does not match that of the original declaration.",
    )


@final
class ModelChannel:
    """One open channel: the operations a client asks for, with RabbitMQ's checks."""

    def __init__(self, connection: ModelConnection, number: int) -> None:
        self.connection = connection
        self.vhost = connection.vhost
        self.number = number
        self.next_tag = 1
        self.unacked: dict[int, _Unacked] = {}
        self.consumers: dict[str, Consumer] = {}
        self.consumer_prefetch = 0
        self.global_prefetch = 0
        #: Unacked deliveries to consumers (for the channel-wide prefetch).
        self.consumer_unacked = 0
        self.active = True
        #: Whether consumers on this channel may be sent messages now (``channel.flow`` and
        #: the connection's output buffer).
        self.deliverable = connection.writable
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
        """``exchange.declare``, checked in RabbitMQ's order: type, default exchange,
        permission, then equivalence or the new exchange's name and alternate exchange."""
        vhost = self.vhost
        if passive:
            _not_default(name)
            vhost.exchange(name)
            return
        if type_ not in EXCHANGE_TYPES:
            raise BrokerError(503, f"unknown exchange type '{type_}'")
        _not_default(name)
        self.connection.check("configure", "exchange", name)
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
                        f"'{vhost.name}': received {show(received)} but current is "
                        f"{show(current)}",
                    )
            return
        if name.startswith("amq."):
            raise BrokerError(403, f"exchange name '{name}' contains reserved prefix 'amq.*'")
        alternate = (arguments or {}).get("alternate-exchange")
        if isinstance(alternate, str):
            self.connection.check("read", "exchange", name)
            self.connection.check("write", "exchange", alternate)
        exchange = vhost.exchanges[name] = Exchange(
            name,
            type_,
            durable=durable,
            auto_delete=auto_delete,
            internal=internal,
            arguments=arguments,
        )
        if vhost.policies:
            vhost.follow_exchange_policy(exchange)
        if durable and vhost.store is not None:
            vhost.store.exchange_declared(
                vhost.name,
                name,
                type_,
                auto_delete=auto_delete,
                internal=internal,
                arguments=exchange.arguments,
            )

    def exchange_delete(self, name: str, *, if_unused: bool = False) -> None:
        """``exchange.delete``: deleting a missing exchange succeeds, like RabbitMQ 3.10."""
        vhost = self.vhost
        _not_default(name)
        if name.startswith("amq."):
            raise BrokerError(
                403, f"deletion of system exchange '{name}' in vhost '{vhost.name}' not allowed"
            )
        self.connection.check("configure", "exchange", name)
        exchange = vhost.exchanges.get(name)
        if exchange is None:
            return
        if if_unused and exchange.bindings:
            raise BrokerError(406, f"exchange '{name}' in vhost '{vhost.name}' in use")
        vhost.delete_exchange(exchange)

    def _binding_checks(self, destination_kind: str, destination: str, source: str) -> None:
        # RabbitMQ's binding_action: write on the destination, neither end the default
        # exchange, read on the source.
        self.connection.check("write", destination_kind, destination)
        if destination_kind == "exchange":
            _not_default(destination)
        _not_default(source)
        self.connection.check("read", "exchange", source)

    def exchange_bind(
        self, destination: str, source: str, routing_key: str, arguments: FieldTable
    ) -> None:
        """``exchange.bind``: route from *source* into *destination* too."""
        vhost = self.vhost
        self._binding_checks("exchange", destination, source)
        # the source first: with both ends missing RabbitMQ's 404 names the source
        src = vhost.exchange(source)
        dest = vhost.exchange(destination)
        key = ("exchange", id(dest), routing_key, freeze(arguments))
        if src.add(Binding(dest, routing_key, dict(arguments), key)):
            dest.incoming[key] = src
            if src.durable and dest.durable and vhost.store is not None:
                vhost.store.binding_added(
                    vhost.name, source, "exchange", destination, routing_key, arguments
                )

    def exchange_unbind(
        self, destination: str, source: str, routing_key: str, arguments: FieldTable
    ) -> None:
        """``exchange.unbind``; a binding, or an exchange, that does not exist is not an error
        (RabbitMQ 3.10 answers unbind-ok)."""
        vhost = self.vhost
        self._binding_checks("exchange", destination, source)
        dest = vhost.exchanges.get(destination)
        src = vhost.exchanges.get(source)
        if dest is None or src is None:
            return
        key = ("exchange", id(dest), routing_key, freeze(arguments))
        if src.remove(key):
            dest.incoming.pop(key, None)
            if vhost.store is not None:
                vhost.store.binding_removed(
                    vhost.name, source, "exchange", destination, routing_key, arguments
                )
            vhost.maybe_auto_delete(src)

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
            self.vhost.touch(queue)
            self.vhost.expire_head(queue, self.vhost.clock.now())
            self.last_queue = queue.name
            return QueueInfo(queue.name, queue.message_count, len(queue.consumers))
        generated = name == ""
        if generated:
            kind = typed(arguments.get("x-queue-type"))
            queue_type = QUEUE_TYPES.get(kind) if isinstance(kind, str) else None
            if queue_type is not None and queue_type.replicated:
                raise BrokerError(
                    406,
                    f"Cannot declare a server-named queue for type {queue_type.implementation}",
                )
            name = generated_name("amq.gen-")
        elif name.startswith("amq."):
            raise BrokerError(403, f"queue name '{name}' contains reserved prefix 'amq.*'")
        self.connection.check("configure", "queue", name)
        existing = vhost.queues.get(name)
        if existing is not None:
            # RabbitMQ's strict exclusive check: the declared owner must be the queue's.
            if existing.exclusive_owner is not (self.connection if exclusive else None):
                raise _locked(existing)
            self._check_equivalent(existing, durable, auto_delete, arguments)
            self.vhost.touch(existing)
            self.vhost.expire_head(existing, self.vhost.clock.now())
            self.last_queue = name
            return QueueInfo(name, existing.message_count, len(existing.consumers))
        dead_letter_exchange = arguments.get("x-dead-letter-exchange")
        if isinstance(dead_letter_exchange, str):
            self.connection.check("read", "queue", name)
            self.connection.check("write", "exchange", dead_letter_exchange)
        owner = self.connection if exclusive else None
        queue = Queue(
            vhost.name,
            name,
            durable=durable,
            exclusive_owner=owner,
            auto_delete=auto_delete,
            arguments=arguments,
            now=vhost.clock.now(),
            memory=vhost.memory,
            default_delivery_limit=vhost.quorum_delivery_limit,
        )
        vhost.queues[name] = queue
        if vhost.policies or vhost.operator_policies:
            vhost.follow_policy(queue)
        if durable and owner is None and vhost.store is not None:
            vhost.store.queue_declared(
                vhost.name, name, auto_delete=auto_delete, arguments=arguments
            )
        if queue.expires is not None:
            vhost.track_expiring(queue)
        if owner is not None:
            owner.exclusive_queues[name] = queue
        self.last_queue = name
        return QueueInfo(name, 0, 0)

    def _check_equivalent(
        self, queue: Queue, durable: bool, auto_delete: bool, arguments: FieldTable
    ) -> None:
        where = f"for queue '{queue.name}' in vhost '{queue.vhost_name}'"
        for field, received, current in (
            ("durable", durable, queue.durable),
            ("auto_delete", auto_delete, queue.auto_delete),
        ):
            if received != current:
                raise BrokerError(
                    406,
                    f"inequivalent arg '{field}' {where}: received {show(received)} but "
                    f"current is {show(current)}",
                )
        for key in EQUIVALENT_ARGS:
            received_raw = arguments.get(key)
            current_raw = queue.arguments.get(key)
            received_value, current_value = typed(received_raw), typed(current_raw)
            if key == "x-queue-type":
                received_value = received_value or "classic"
                current_value = current_value or "classic"
            if same_value(received_value, current_value):
                continue
            if received_raw is not None and current_raw is not None:
                shown = f"received {show(received_value)} but current is {show(current_value)}"
            else:
                shown = f"received {show_arg(received_raw)} but current is {show_arg(current_raw)}"
            raise BrokerError(406, f"inequivalent arg '{key}' {where}: {shown}")

    def queue_bind(
        self, queue: str, exchange: str, routing_key: str, arguments: FieldTable
    ) -> None:
        """``queue.bind`` (an empty queue name means the channel's last declared queue)."""
        if queue == "" and routing_key == "":
            routing_key = self._queue_name("")
        queue = self._queue_name(queue)
        self._binding_checks("queue", queue, exchange)
        # the exchange first: with both missing RabbitMQ's 404 names it (then the queue's
        # existence, then its exclusive owner)
        source = self.vhost.exchange(exchange)
        target = self._accessible(queue)
        key = ("queue", id(target), routing_key, freeze(arguments))
        if source.add(Binding(target, routing_key, dict(arguments), key)):
            target.bindings_in[key] = source
            store = self.vhost.store
            if store is not None and stores_binding(source, target):
                store.binding_added(
                    self.vhost.name, exchange, "queue", queue, routing_key, arguments
                )

    def queue_unbind(
        self, queue: str, exchange: str, routing_key: str, arguments: FieldTable
    ) -> None:
        """``queue.unbind``; a binding, queue or exchange that does not exist is not an error
        (RabbitMQ 3.10 answers unbind-ok)."""
        queue = self._queue_name(queue)
        self._binding_checks("queue", queue, exchange)
        target = self.vhost.queues.get(queue)
        source = self.vhost.exchanges.get(exchange)
        if target is None or source is None:
            return
        self._check_owner(target)
        key = ("queue", id(target), routing_key, freeze(arguments))
        if source.remove(key):
            target.bindings_in.pop(key, None)
            store = self.vhost.store
            if store is not None and stores_binding(source, target):
                store.binding_removed(
                    self.vhost.name, exchange, "queue", queue, routing_key, arguments
                )
            self.vhost.maybe_auto_delete(source)

    def queue_purge(self, name: str) -> int:
        """``queue.purge``: drop ready messages; returns how many."""
        name = self._queue_name(name)
        self.connection.check("read", "queue", name)
        queue = self._accessible(name)
        if queue.log is not None:
            raise BrokerError(540, f"queue.purge not supported by stream queues {_resource(queue)}")
        self.vhost.stored_gone(queue, list(queue.ready))
        return queue.purge()

    def queue_delete(self, name: str, *, if_unused: bool = False, if_empty: bool = False) -> int:
        """``queue.delete``: deleting a missing queue succeeds with 0, like RabbitMQ 3.10."""
        name = self._queue_name(name)
        self.connection.check("configure", "queue", name)
        queue = self.vhost.queues.get(name)
        if queue is None:
            return 0
        self._check_owner(queue)
        where = f"queue '{name}' in vhost '{self.vhost.name}'"
        if if_unused and queue.consumers:
            raise BrokerError(406, f"{where} in use")
        if if_empty and queue.message_count:
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
            self.vhost.dispatch(queue)

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
        if queue_name == DIRECT_REPLY_TO:
            return self._consume_reply_to(consumer_tag, no_ack=no_ack)
        queue_name = self._queue_name(queue_name)
        self.connection.check("read", "queue", queue_name)
        queue = self._accessible(queue_name)
        if not consumer_tag:
            consumer_tag = generated_name("amq.ctag-")
        if consumer_tag in self.consumers:
            raise BrokerError(530, f"attempt to reuse consumer tag '{consumer_tag}'")
        log = queue.log
        priority = arguments.get("x-priority")
        if priority is not None and log is None:
            priority = typed(priority)
            if isinstance(priority, bool) or not isinstance(priority, int):
                raise BrokerError(
                    406,
                    f"invalid arg 'x-priority' for {_resource(queue)}: "
                    f'"expected integer, got {wire_type(arguments["x-priority"])}"',
                )
        if queue.consumers and (exclusive or any(c.exclusive for c in queue.consumers)):
            raise BrokerError(
                403, f"queue '{queue.name}' in vhost '{self.vhost.name}' in exclusive use"
            )
        offset = 0
        if log is not None:
            offset = self._stream_start(queue, log, no_ack=no_ack, arguments=arguments)
        elif self.global_prefetch and not queue.kind.global_qos:
            raise BrokerError(540, f"{_resource(queue)} does not support global qos")
        consumer = Consumer(
            self,
            queue,
            consumer_tag,
            no_ack=no_ack,
            exclusive=exclusive,
            prefetch=self.consumer_prefetch,
            arguments=dict(arguments),
        )
        consumer.offset = offset
        if log is not None:
            self._stream_filter(consumer, arguments)
        if isinstance(priority, int):
            consumer.priority = priority
        self.consumers[consumer_tag] = consumer
        queue.consumers.append(consumer)
        queue.ever_consumed = True
        return consumer_tag

    def _stream_start(
        self, queue: Queue, log: StreamLog, *, no_ack: bool, arguments: FieldTable
    ) -> int:
        """RabbitMQ 3.10's checks on a stream consumer, in its order; where it starts."""
        where = _resource(queue)
        for key in arguments:
            if key not in _STREAM_CONSUMER_ARGS:
                raise BrokerError(
                    406, f"invalid arg '{key}' for {where} of queue type rabbit_stream_queue"
                )
        start = log.resolve(
            arguments.get("x-stream-offset"), int(self.vhost.clock.wall() * 1000), where
        )
        if not self.consumer_prefetch:
            raise BrokerError(406, f"consumer prefetch count is not set for '{where}'")
        if no_ack:
            raise BrokerError(
                540, f"automatic acknowledgement not supported by stream queues {where}"
            )
        if self.global_prefetch:
            raise BrokerError(540, f"{where} does not support global qos")
        return start

    @staticmethod
    def _stream_filter(consumer: Consumer, arguments: FieldTable) -> None:
        """RabbitMQ 3.13's ``filter_spec``: ``x-stream-filter`` a string or an array (its
        strings count, other elements are ignored); any other value means no filtering;
        ``x-stream-match-unfiltered`` a bool, false unless given."""
        raw = arguments.get("x-stream-filter")
        if isinstance(raw, str):
            wanted: frozenset[str] | None = frozenset((raw,))
        elif isinstance(raw, list):
            wanted = frozenset(v for v in raw if isinstance(v, str))
        else:
            wanted = None
        if wanted is None:
            return
        consumer.stream_filter = wanted
        consumer.match_unfiltered = arguments.get("x-stream-match-unfiltered") is True

    def _consume_reply_to(self, consumer_tag: str, *, no_ack: bool) -> str:
        if not no_ack:
            raise BrokerError(406, "reply consumer cannot acknowledge")
        if self.reply_tag is not None:
            raise BrokerError(406, "reply consumer already set")
        if not consumer_tag:
            consumer_tag = generated_name("amq.ctag-")
        if consumer_tag in self.consumers:
            raise BrokerError(530, f"attempt to reuse consumer tag '{consumer_tag}'")
        self.reply_token = generated_name("")
        self.connection.reply_to[self.reply_token] = (self, consumer_tag)
        self.reply_tag = consumer_tag
        return consumer_tag

    def reply_to_address(self) -> str | None:
        """``amq.rabbitmq.reply-to.<token>`` when this channel consumes direct replies."""
        if self.reply_tag is None:
            return None
        return f"{DIRECT_REPLY_TO}.{self.reply_token}"

    def start_consumer(self, consumer_tag: str) -> None:
        """Begin deliveries to a consumer after its ``consume-ok`` went out."""
        consumer = self.consumers.get(consumer_tag)
        if consumer is not None:
            self.vhost.dispatch(consumer.queue)

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
            self.connection.reply_to.pop(self.reply_token, None)
            self.reply_tag = None

    def drop_consumer(self, consumer: Consumer, *, notify: bool) -> None:
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
            self.vhost.touch(queue)
        if queue.auto_delete and queue.ever_consumed and not queue.consumers and not queue.deleted:
            owner = queue.exclusive_owner
            if owner is not None:
                owner.exclusive_queues.pop(queue.name, None)
            self.vhost.delete_queue(queue)
        elif queue.single_active and not queue.deleted:
            self.vhost.dispatch(queue)

    def send(self, consumer: Consumer, queue: Queue, entry: Entry, now: float) -> None:
        """Deliver *entry* from *queue* to *consumer* at *now* (the model's dispatch calls
        this; an entry for a consumer that acknowledges is still counted as held)."""
        tag = self.next_tag
        self.next_tag = tag + 1
        stream = queue.log is not None
        counters = self.vhost.counters
        if consumer.no_ack:
            counters.delivered += 1
        else:
            counters.delivered_ack += 1
            self._outstanding(_Unacked(tag, queue, entry, consumer, now))
            consumer.unacked += 1
            self.consumer_unacked += 1
        if entry.redelivered:
            counters.redelivered += 1
        self.connection.sink.deliver(
            self.number,
            consumer.tag,
            tag,
            entry.redelivered,
            queue.delivered(entry) if queue.kind.counts_deliveries else entry.message,
            entry.seq if stream else None,
        )

    def _outstanding(self, record: _Unacked) -> None:
        """Keep *record* until it is acknowledged (its message's octets stay held)."""
        if not self.unacked:
            self.connection.watch_timeout(self)
        self.unacked[record.tag] = record

    def oldest_delivery(self) -> float | None:
        """When the oldest unacknowledged delivery went out (consumer timeout), or None."""
        for record in self.unacked.values():
            return record.delivered_at
        return None

    # --- publishing ---------------------------------------------------------------------------

    def publish(
        self,
        exchange: str,
        routing_key: str,
        properties: BasicProperties,
        body: bytes | bytearray,
        *,
        mandatory: bool = False,
        skip: Collection[int] = (),
    ) -> PublishOutcome | None:
        """A publish from any protocol (0-8, 0-9, 0-9-1's ``basic.publish``, 0-10's
        ``message.transfer``), checked in RabbitMQ 3.10's order (``rabbit_channel``): write
        permission, the exchange's existence, internal exchanges, the ``user-id`` property,
        the expiration; then routed (alternate exchanges, limits, ``reject-publish``) except
        to the queues whose ids are in *skip* (0-10's no-local queues). None inside a
        transaction (the outcome comes at commit)."""
        connection = self.connection
        if connection.permission is not None:
            connection.check("write", "exchange", exchange)
        source = self.vhost.exchange(exchange)
        if source.internal:
            raise BrokerError(
                403,
                f"cannot publish to internal exchange '{exchange}' in vhost '{self.vhost.name}'",
            )
        user_id = properties.user_id
        if user_id is not None and user_id != connection.user:
            raise BrokerError(
                406,
                f"user_id property set to '{user_id}' but authenticated user was "
                f"'{connection.user}'",
            )
        if properties.expiration is not None:
            parse_expiration(properties.expiration)
        counters = self.vhost.counters
        counters.published += 1
        if self.transactional:
            self.tx_publishes.append(
                _TxPublish(exchange, routing_key, mandatory, properties, body, skip)
            )
            return None
        outcome = self._route(source, routing_key, properties, body, skip)
        if not outcome.routed:
            if mandatory:
                counters.unroutable_returned += 1
            else:
                counters.unroutable_dropped += 1
        if self.confirm and not outcome.rejected:
            counters.confirmed += 1
        return outcome

    def _route(
        self,
        source: Exchange[Queue],
        routing_key: str,
        properties: BasicProperties,
        body: bytes | bytearray,
        skip: Collection[int] = (),
    ) -> PublishOutcome:
        if source.name == "" and routing_key.startswith(DIRECT_REPLY_TO + "."):
            return self._reply(routing_key, properties, body)
        message = Message(source.name, routing_key, properties, body)
        if properties.reply_to == DIRECT_REPLY_TO:
            address = self.reply_to_address()
            if address is None:
                raise BrokerError(406, "fast reply consumer does not exist")
            message = Message(
                source.name, routing_key, attrs.evolve(properties, reply_to=address), body
            )
        queues = self.vhost.route(source, routing_key, properties.headers)
        if skip:
            queues = [queue for queue in queues if id(queue) not in skip]
        rejected = False
        for queue in queues:
            if not self.vhost.enqueue(queue, message):
                rejected = True
        return PublishOutcome(routed=bool(queues), rejected=rejected)

    def _reply(
        self, routing_key: str, properties: BasicProperties, body: bytes | bytearray
    ) -> PublishOutcome:
        token = routing_key[len(DIRECT_REPLY_TO) + 1 :]
        target = self.connection.reply_to.get(token)
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
        queue_name = self._queue_name(queue_name)
        self.connection.check("read", "queue", queue_name)
        queue = self._accessible(queue_name)
        if queue.log is not None:
            raise BrokerError(540, f"basic.get not supported by stream queues {_resource(queue)}")
        self.vhost.touch(queue)
        self.vhost.expire_head(queue, self.vhost.clock.now())
        counters = self.vhost.counters
        if not queue.ready:
            counters.get_empty += 1
            return None
        entry = queue.pop(keep_held=not no_ack)
        if no_ack:
            counters.get += 1
        else:
            counters.get_ack += 1
        if entry.redelivered:
            counters.redelivered += 1
        self.vhost.stored_delivered(queue, entry, no_ack=no_ack)
        tag = self.next_tag
        self.next_tag = tag + 1
        if not no_ack:
            self._outstanding(_Unacked(tag, queue, entry, None, self.vhost.clock.now()))
        return GetResult(tag, entry.redelivered, queue.delivered(entry, get=True), len(queue.ready))

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
        memory = self.vhost.memory
        for record in records:
            consumer = record.consumer
            if consumer is not None:
                consumer.unacked -= 1
                self.consumer_unacked -= 1
            if record.queue.log is None:
                memory.release(record.entry.message.held)
        return records

    def ack(self, delivery_tag: int, *, multiple: bool = False) -> None:
        """``basic.ack``: 406 for a tag that is not outstanding on this channel."""
        records = self._take(delivery_tag, multiple)
        self.vhost.counters.acked += len(records)
        if self.transactional:
            self.tx_acks.append((records, None))
            return
        self._settled(records)

    def nack(self, delivery_tag: int, *, multiple: bool = False, requeue: bool = True) -> None:
        """``basic.nack`` (and ``basic.reject`` with ``multiple=False``); 540 for a stream's
        delivery, which closes the connection as in RabbitMQ."""
        records = self._take(delivery_tag, multiple)
        for record in records:
            if record.queue.log is not None:
                raise BrokerError(
                    540,
                    "basic.nack and basic.reject not supported by stream queues "
                    + _resource(record.queue),
                )
        if self.transactional:
            self.tx_acks.append((records, requeue))
            return
        self._give_back(records, requeue=requeue, reason="rejected")

    def _settled(self, records: list[_Unacked]) -> None:
        queues: dict[int, Queue] = {}
        for record in records:
            queues[id(record.queue)] = record.queue
            if record.entry.stored:
                self.vhost.stored_gone(record.queue, (record.entry,))
        self._redispatch(queues.values())

    def _redispatch(self, queues: Iterable[Queue]) -> None:
        targets = {id(q): q for q in queues}
        if self.global_prefetch:
            for consumer in self.consumers.values():
                targets[id(consumer.queue)] = consumer.queue
        for queue in targets.values():
            if not queue.deleted:
                self.vhost.dispatch(queue)

    def _give_back(self, records: list[_Unacked], *, requeue: bool, reason: str) -> None:
        by_queue: dict[int, tuple[Queue, list[Entry]]] = {}
        for record in records:
            by_queue.setdefault(id(record.queue), (record.queue, []))[1].append(record.entry)
        for queue, entries in by_queue.values():
            if queue.deleted or queue.log is not None:
                continue  # a stream keeps its messages: nothing goes back
            if requeue:
                for entry in queue.requeue(entries):  # over a quorum queue's delivery limit
                    self.vhost.dead_letter(queue, entry.message, "delivery_limit")
                if any(e.expires_at is not None for e in entries):
                    self.vhost.track_timed(queue)
            else:
                self.vhost.stored_gone(queue, entries)
                for entry in entries:
                    self.vhost.dead_letter(queue, entry.message, reason)
        self._redispatch(q for q, _ in by_queue.values())

    def recover(self) -> None:
        """``basic.recover`` with requeue: every unacked message goes back, redelivered
        (RabbitMQ 3.10 fails with 541 when a stream delivery is among them)."""
        if any(record.queue.log is not None for record in self.unacked.values()):
            raise BrokerError(541, "", caused_by_method=False)
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
            outcome = self._route(
                source, publish.routing_key, publish.properties, publish.body, publish.skip
            )
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
                if record.queue.log is None:
                    self.vhost.memory.hold(record.entry.message.held)
        if restored and not self.unacked:
            self.connection.watch_timeout(self)
        restored.update(self.unacked)
        self.unacked = dict(sorted(restored.items()))

    def flow(self, active: bool) -> None:
        """``channel.flow`` from the client: pause or resume deliveries."""
        self.active = active
        self.deliverable = active and self.connection.writable
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
        memory = self.vhost.memory
        for record in records:
            if record.queue.log is None:
                memory.release(record.entry.message.held)
        for pending, _ in self.tx_acks:  # acknowledged in a transaction never committed
            records += pending
        self.unacked.clear()
        self.tx_acks = []
        self.tx_publishes = []
        self.consumer_unacked = 0
        self._give_back(records, requeue=True, reason="rejected")
