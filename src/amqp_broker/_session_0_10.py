"""AMQP 0-10 clients of the broker: :class:`Session010` turns one 0-10 server-role core's
events into calls on the same model the 0-9-1 sessions use.

Each 0-10 session is a :class:`ModelChannel` (its channel number); a subscription is a model
consumer whose room is the 0-10 credit the client granted (the core keeps the count); accepts,
releases and rejects settle the channel's deliveries by the delivery tag each transfer's command
id maps to. Properties are converted at the edge (:mod:`._convert`), so a message published
over one protocol is consumed over the other.

0-10 semantics kept here, not in the model: a queue's alternate exchange receives its rejected
messages and, when it is deleted, its messages: the ready ones and those 0-10 sessions acquired
and have not accepted (as qpidd; a later accept, release or reject of one of those names nothing
any more); an exchange used as an alternate cannot be deleted; a redeclare cannot change an
alternate. Browsing subscriptions (acquire mode not-acquired) read the ready messages without
taking them.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections import deque
from typing import TYPE_CHECKING, Final, Never, TypeAlias, cast, final

from amqp_sansio import parse_credentials
from amqp_sansio.v0_10 import (
    AcceptMode,
    Acquired,
    AcquireMode,
    AuthenticationRequested,
    CommandReceived,
    CommandsCompleted,
    ConnectionClosed,
    ConnectionLost,
    Credit,
    ErrorCode,
    ExchangeBind,
    ExchangeBound,
    ExchangeBoundResult,
    ExchangeDeclare,
    ExchangeDelete,
    ExchangeQuery,
    ExchangeQueryResult,
    ExchangeUnbind,
    HeartbeatTimeout,
    LocalProtocolError,
    MessageAccept,
    MessageAcquire,
    MessageCancel,
    MessageFlow,
    MessageFlush,
    MessageReceived,
    MessageReject,
    MessageRelease,
    MessageSetFlowMode,
    MessageStop,
    MessageSubscribe,
    QueueDeclare,
    QueueDelete,
    QueuePurge,
    QueueQuery,
    QueueQueryResult,
    SequenceSet,
    SessionEnded,
    SessionOpened,
    TxCommit,
    TxRollback,
    TxSelect,
    VirtualHostRequested,
)
from amqp_sansio.v0_10 import Session as CoreSession
from amqp_sansio.v0_10.framing import encode_header_segment

from ._channel import _Unacked
from ._convert import field_value, from_0_10, map_value, to_0_10
from ._errors import BrokerError
from ._fields import freeze
from ._permissions import FULL_ACCESS
from ._queues import Consumer, Entry
from ._routing import EXCHANGE_TYPES

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from amqp_sansio import FieldTable
    from amqp_sansio.v0_10 import Command, Connection, Event, Map, Struct

    from ._broker import Broker
    from ._channel import ModelChannel, ModelConnection
    from ._message import Message
    from ._queues import Queue

__all__ = ["Session010"]

logger: Final = logging.getLogger("amqp_broker")

_UNLIMITED: Final = 0xFFFFFFFF
_ALTERNATE: Final = "alternate-exchange"

#: Each broker's open 0-10 connections: deleting a queue finds the messages they acquired.
_OPEN: Final[weakref.WeakKeyDictionary[Broker, dict[Session010, None]]] = (
    weakref.WeakKeyDictionary()
)


def _header_size(exchange: str, message: Message) -> int:
    out = bytearray()
    encode_header_segment(out, to_0_10(exchange, message.routing_key, message.properties, False))
    return len(out)


class _Refused(Exception):
    """A refusal with a 0-10 error code the 0-9-1 model has no reply code for (531, 541,
    542)."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.reply_code = code
        self.reply_text = text


@final
class _Subscription(Consumer):
    """A 0-10 subscription: a model consumer limited by the client's credit."""

    __slots__ = ("accept_mode", "acquire_mode", "core", "destination", "last_seq", "size_cache")

    def __init__(
        self,
        channel: ModelChannel,
        queue: Queue,
        destination: str,
        core: CoreSession,
        *,
        accept_mode: int,
        acquire_mode: int,
        exclusive: bool,
    ) -> None:
        super().__init__(
            channel,
            queue,
            destination,
            no_ack=accept_mode == AcceptMode.NONE,
            exclusive=exclusive,
            prefetch=0,
            arguments={},
        )
        self.destination = destination
        self.core = core
        self.accept_mode = accept_mode
        self.acquire_mode = acquire_mode
        self.last_seq = -1  # browsing: the last entry sent
        self.size_cache: tuple[int, int] = (0, 0)

    def size_of(self, message: Message) -> int:
        key = id(message)
        if self.size_cache[0] != key:
            self.size_cache = (key, _header_size(message.exchange, message) + message.size)
        return self.size_cache[1]

    def covers(self, message: Message) -> bool:
        credit: Credit | None = self.core.credit(self.destination)
        if credit is None or credit.messages == 0:
            return False
        return credit.octets == _UNLIMITED or credit.octets >= self.size_of(message)

    def can_take(self) -> bool:
        if not self.channel.deliverable or self.acquire_mode == AcquireMode.NOT_ACQUIRED:
            return False
        ready = self.queue.ready
        if not ready:
            return True
        return self.covers(ready.head().message)


@final
class _Delivery:
    """A transfer the client has not settled yet."""

    __slots__ = ("acquired", "entry", "queue", "tag")

    def __init__(self, tag: int | None, queue: Queue, entry: Entry | None) -> None:
        self.tag = tag  # None: browsed, not acquired
        self.queue = queue
        self.entry = entry
        self.acquired = tag is not None


@final
class _Channel:
    """One attached 0-10 session's model channel and its transfers."""

    __slots__ = (
        "core",
        "deliveries",
        "model",
        "owner",
        "subscribed",
        "subscriptions",
        "tx",
        "tx_accepted",
    )

    def __init__(self, core: CoreSession, owner: ModelConnection, model: ModelChannel) -> None:
        self.core = core
        #: The session's own model connection: 0-10 exclusivity is per session.
        self.owner = owner
        self.model = model
        self.subscriptions: dict[str, _Subscription] = {}
        self.deliveries: dict[int, _Delivery] = {}
        self.tx = False
        #: Deliveries accepted in the open transaction (back to unsettled on rollback).
        self.tx_accepted: dict[int, _Delivery] = {}
        #: Auto-delete queues this session subscribed to (checked when it ends).
        self.subscribed: dict[str, Queue] = {}


@final
class Session010:
    """One 0-10 client connection of *broker*, over *core* (server role). ``wake`` is called
    whenever output was queued from outside :meth:`handle` (a delivery caused by another
    connection)."""

    def __init__(
        self, broker: Broker, core: Connection, *, wake: Callable[[], None], peer: str = ""
    ) -> None:
        self.broker = broker
        self.core = core
        self.wake = wake
        self.peer = peer
        self.username: str | None = None
        self.connection: ModelConnection | None = None
        self.channels: dict[int, _Channel] = {}
        self.finished = False
        # whether this connection ever declared or subscribed to a no-local queue, or browsed:
        # the publish path looks for them only then
        self._no_local = False
        self._browsing = False
        # Completions of transfers that wait for the store to commit their batch:
        # (batch number, channel, command id, report at once).
        self._durable_completions: deque[tuple[int, _Channel, int, bool]] = deque()

    # --- events -------------------------------------------------------------------------------

    def handle(self, event: Event) -> None:
        """Act on one event of the core."""
        cls = type(event)
        if cls is MessageReceived:
            assert isinstance(event, MessageReceived)
            self._guard(event.channel, event.command_id, lambda ch: self._publish(ch, event))
        elif cls is CommandReceived:
            assert isinstance(event, CommandReceived)
            self._guard(event.channel, event.command_id, lambda ch: self._command(ch, event))
        elif cls is CommandsCompleted:
            assert isinstance(event, CommandsCompleted)
            channel = self.channels.get(event.channel)
            if channel is not None:
                self._redispatch(channel)
        elif cls is SessionOpened:
            assert isinstance(event, SessionOpened)
            self._attached(event.channel)
        elif cls is SessionEnded:
            assert isinstance(event, SessionEnded)
            self._detached(event.channel)
        elif cls is AuthenticationRequested:
            assert isinstance(event, AuthenticationRequested)
            self._authenticate(event)
        elif cls is VirtualHostRequested:
            assert isinstance(event, VirtualHostRequested)
            self._open_vhost(event.virtual_host)
        elif cls in (ConnectionClosed, ConnectionLost, HeartbeatTimeout):
            self.end()

    def shutdown(self, reason: str = "shutdown") -> None:
        """The broker stops: ``connection.close`` 320 with RabbitMQ's text, as 0-9-1 clients
        get it."""
        with contextlib.suppress(LocalProtocolError):
            self.core.close(
                320, f"CONNECTION_FORCED - broker forced connection closure with reason '{reason}'"
            )
        self.wake()

    def end(self) -> None:
        """The connection is over: requeue what was delivered and not accepted."""
        if self.finished:
            return
        self.finished = True
        for number in list(self.channels):
            self._detached(number)
        if self.connection is not None:
            self.connection.close()
            _OPEN.get(self.broker, {}).pop(self, None)

    def _authenticate(self, event: AuthenticationRequested) -> None:
        users = self.broker.users
        if event.mechanism == "ANONYMOUS":
            credentials: tuple[str, str] | None = ("guest", users.password("guest") or "")
        else:
            credentials = parse_credentials(event.mechanism, event.response)
        if credentials is None or not users.authenticate(*credentials):
            self.core.refuse_authentication(f"login refused using {event.mechanism}")
            return
        self.username = credentials[0]
        self.core.accept_authentication()

    def _open_vhost(self, name: str) -> None:
        name = name or "/"
        user = self.username or ""
        refusal = self.broker.admit(name, user)
        if refusal is not None:
            self.core.refuse_virtual_host(refusal)
            return
        permission = self.broker.users.permission(user, name)
        self.connection = self.broker.connect(
            name,
            self,
            cancel_notify=False,
            user=user,
            permission=None if permission is FULL_ACCESS else permission,
        )
        _OPEN.setdefault(self.broker, {})[self] = None
        self.core.accept_virtual_host()

    def _attached(self, number: int) -> None:
        connection = self.connection
        if connection is None:
            return
        owner = self.broker.connect(
            connection.vhost.name,
            self,
            cancel_notify=False,
            user=connection.user,
            permission=connection.permission,
        )
        owner.vhost.connections -= 1  # a session, not a connection: not counted against limits
        model = owner.open_channel(number)
        self.channels[number] = _Channel(self.core.session(number), owner, model)

    def _detached(self, number: int) -> None:
        """The session ended: give back what it held (redelivered), then delete its exclusive
        queues and the auto-delete queues it left unused (their messages go to their alternate
        exchanges)."""
        channel = self.channels.pop(number, None)
        if channel is None:
            return
        for sub in list(channel.subscriptions.values()):
            self._drop(channel, sub, auto_delete=False)
        channel.subscriptions.clear()
        owner = channel.owner
        owner.close_channel(number)
        doomed = {id(q): q for q in owner.exclusive_queues.values()}
        for queue in channel.subscribed.values():
            if queue.auto_delete and not queue.consumers:
                doomed[id(queue)] = queue
        for queue in doomed.values():
            self._delete_queue(queue)
        owner.vhost.connections += 1
        owner.close()

    def _drop(self, channel: _Channel, sub: _Subscription, *, auto_delete: bool = True) -> None:
        """Remove a subscription; an auto-delete queue not exclusive to a session goes when
        its last subscriber does."""
        model = channel.model
        model.consumers.pop(sub.tag, None)
        queue = sub.queue
        if sub in queue.consumers:
            queue.consumers.remove(sub)
        for record in model.unacked.values():
            if record.consumer is sub:
                record.consumer = None
                model.consumer_unacked -= 1
        if (
            auto_delete
            and queue.auto_delete
            and queue.exclusive_owner is None
            and not queue.consumers
            and not queue.deleted
        ):
            self._delete_queue(queue)

    def _delete_queue(self, queue: Queue) -> None:
        """Delete *queue*; its messages go to its alternate exchange, in the queue's order:
        the ready ones and those any 0-10 session acquired and has not accepted (the spec's
        orphaned messages; qpidd reroutes them too)."""
        if queue.deleted or self.connection is None:
            return
        if isinstance(queue.arguments.get(_ALTERNATE), str):
            orphans: list[Entry] = []
            while queue.ready:
                orphans.append(queue.pop())
            for session in list(_OPEN.get(self.broker, {})):
                for channel in session.channels.values():
                    orphans += _orphans(channel, queue)
            orphans.sort(key=_by_seq)
            for entry in orphans:
                self._to_alternate(queue, entry.message)
        owner = queue.exclusive_owner
        if owner is not None:
            owner.exclusive_queues.pop(queue.name, None)
        self.connection.vhost.delete_queue(queue)

    def _guard(self, number: int, command_id: int, action: Callable[[_Channel], None]) -> None:
        """Run *action* for a command; a refusal becomes ``execution.exception``."""
        channel = self.channels.get(number)
        if channel is None:
            return
        try:
            action(channel)
        except (BrokerError, _Refused) as exc:
            code = exc.reply_code
            if code == 506:
                code = ErrorCode.RESOURCE_LIMIT_EXCEEDED
            with contextlib.suppress(LocalProtocolError):
                channel.core.raise_exception(code, exc.reply_text, command_id=command_id)
            self._detached(number)
        self.wake()

    # --- commands -----------------------------------------------------------------------------

    def _result(self, channel: _Channel, command_id: int, value: Struct) -> None:
        channel.core.send_result(command_id, value)

    def _command(self, channel: _Channel, event: CommandReceived) -> None:
        command: Command = event.command
        handler = _HANDLERS.get(type(command))
        if handler is None:
            raise BrokerError(540, f"{type(command).NAME} is not implemented")
        call = cast("Callable[[Session010, _Channel, Command], Struct | None]", handler)
        store = self.broker.store
        writes = 0 if store is None else store.writes
        result = call(self, channel, command)
        if store is not None and store.writes != writes and isinstance(command, TxCommit):
            # the commit stored persistent messages: complete once they are written, as a
            # durable transfer outside a transaction is
            self._durable_completions.append(
                (store.open_batch, channel, event.command_id, event.sync)
            )
            store.waiters[self._complete_durable] = None
        elif result is None:
            # reported at once for the sync bit, else when the client asks (the core's server
            # role reports only when asked, as qpidd)
            channel.core.complete(event.command_id, report=event.sync)
        else:
            self._result(channel, event.command_id, result)

    def _publish(self, channel: _Channel, event: MessageReceived) -> None:
        routing_key, properties = from_0_10(event.headers)
        exchange = event.transfer.destination or ""
        body = event.body
        model = channel.model
        store = self.broker.store
        writes = 0 if store is None else store.writes
        # qpidd's no-local queue argument: this connection's own messages skip the no-local
        # queues it owns (or subscribes to exclusively); every other check is the model's
        skip = () if channel.tx or not self._no_local else self._local_no_local_queues()
        model.publish(exchange, routing_key, properties, body, skip=skip)
        if store is not None and store.writes != writes:
            # a persistent message in a durable queue: complete once it is written (the
            # core holds execution.sync and later syncs until then)
            self._durable_completions.append(
                (store.open_batch, channel, event.command_id, event.sync)
            )
            store.waiters[self._complete_durable] = None
        else:
            # reported when the client asks (a sync bit, execution.sync, session.flush): one
            # control for a burst of transfers; one per read cost qpid-python's client time
            # in proportion to its outstanding commands, each
            channel.core.complete(event.command_id, report=event.sync)
        if self._browsing:
            self._pump_browsers()

    def _complete_durable(self) -> None:
        """The store committed a batch: complete the transfers that waited for it."""
        store = self.broker.store
        assert store is not None
        waiting = self._durable_completions
        while waiting and waiting[0][0] <= store.committed:
            _, channel, command_id, report = waiting.popleft()
            with contextlib.suppress(LocalProtocolError):  # closed meanwhile: nobody waits
                channel.core.complete(command_id, report=report)
        if waiting:
            store.waiters[self._complete_durable] = None
        self.wake()

    def _local_no_local_queues(self) -> set[int]:
        """Ids of the no-local queues this connection owns or subscribes to exclusively."""
        owners = {id(ch.owner) for ch in self.channels.values()}
        found: set[int] = set()
        for ch in self.channels.values():
            for queue in ch.owner.vhost.queues.values():
                if not _truthy(queue.arguments.get("no-local")):
                    continue
                owner = queue.exclusive_owner
                if (owner is not None and id(owner) in owners) or any(
                    c.exclusive and c.channel is other.model
                    for c in queue.consumers
                    for other in self.channels.values()
                ):
                    found.add(id(queue))
            break  # one vhost: every session's
        return found

    # --- exchanges ----------------------------------------------------------------------------

    def _exchange_declare(self, channel: _Channel, command: ExchangeDeclare) -> None:
        name = command.exchange or ""
        vhost = channel.model.vhost
        existing = vhost.exchanges.get(name)
        alternate = command.alternate_exchange
        if command.passive:
            if existing is None:
                raise BrokerError(404, f"no exchange '{name}'")
            return
        kind = command.type or ""
        if kind not in EXCHANGE_TYPES:
            raise BrokerError(404, f"unknown exchange type '{kind}'")
        if alternate and alternate not in vhost.exchanges:
            raise BrokerError(404, f"no alternate exchange '{alternate}'")
        if existing is not None:
            if existing.type != kind:
                raise BrokerError(
                    530, f"exchange '{name}' exists with type {existing.type}, not {kind}"
                )
            current = existing.arguments.get(_ALTERNATE)
            if alternate and current != alternate:
                raise BrokerError(530, f"exchange '{name}' has another alternate exchange")
            return
        arguments = dict(_table(command.arguments))
        if alternate:
            arguments[_ALTERNATE] = alternate
        if name.startswith(("amq.", "qpid.")):
            raise BrokerError(530, f"exchange name '{name}' is reserved")
        channel.model.exchange_declare(
            name,
            kind,
            durable=command.durable,
            auto_delete=command.auto_delete,
            arguments=arguments,
        )

    def _exchange_delete(self, channel: _Channel, command: ExchangeDelete) -> None:
        name = command.exchange or ""
        if not name:
            raise _Refused(542, "the default exchange cannot be deleted")
        vhost = channel.model.vhost
        exchange = vhost.exchanges.get(name)
        if exchange is None:
            raise BrokerError(404, f"no exchange '{name}'")
        for other in vhost.exchanges.values():
            if other.arguments.get(_ALTERNATE) == name:
                raise BrokerError(530, f"exchange '{name}' is in use as an alternate exchange")
        for queue in vhost.queues.values():
            if queue.arguments.get(_ALTERNATE) == name:
                raise BrokerError(530, f"exchange '{name}' is in use as an alternate exchange")
        if command.if_unused and exchange.bindings:
            raise BrokerError(406, f"exchange '{name}' in use")
        channel.model.exchange_delete(name)

    def _exchange_query(self, channel: _Channel, command: ExchangeQuery) -> ExchangeQueryResult:
        exchange = channel.model.vhost.exchanges.get(command.name or "")
        if exchange is None:
            return ExchangeQueryResult(not_found=True)
        return ExchangeQueryResult(
            type=exchange.type,
            durable=exchange.durable,
            arguments={k: v for k, v in _map(exchange.arguments).items() if k != _ALTERNATE},
        )

    def _exchange_bind(self, channel: _Channel, command: ExchangeBind) -> None:
        queue = command.queue or ""
        exchange = command.exchange or ""
        vhost = channel.model.vhost
        if not exchange:
            raise _Refused(542, "the default exchange cannot be bound to")
        if not queue:
            raise _Refused(531, "no queue named")
        if queue not in vhost.queues:
            raise BrokerError(404, f"no queue '{queue}'")
        if exchange not in vhost.exchanges:
            raise BrokerError(404, f"no exchange '{exchange}'")
        key = command.binding_key
        if key is None:
            key = queue if vhost.exchanges[exchange].type in ("direct", "topic") else ""
        arguments = _table(command.arguments)
        if vhost.exchanges[exchange].type == "headers" and arguments.get("x-match") not in (
            "all",
            "any",
        ):
            raise _Refused(541, "a headers binding needs x-match all or any")
        channel.model.queue_bind(queue, exchange, key, arguments)

    def _exchange_unbind(self, channel: _Channel, command: ExchangeUnbind) -> None:
        queue = command.queue or ""
        exchange = command.exchange or ""
        vhost = channel.model.vhost
        if not exchange:
            raise _Refused(542, "the default exchange cannot be unbound from")
        if queue not in vhost.queues:
            raise BrokerError(404, f"no queue '{queue}'")
        if exchange not in vhost.exchanges:
            raise BrokerError(404, f"no exchange '{exchange}'")
        key = command.binding_key or ""
        source = vhost.exchanges[exchange]
        for binding in list(source.bindings.values()):
            if binding.destination is vhost.queues[queue] and binding.routing_key == key:
                channel.model.queue_unbind(queue, exchange, key, binding.arguments)

    def _exchange_bound(self, channel: _Channel, command: ExchangeBound) -> ExchangeBoundResult:
        vhost = channel.model.vhost
        exchange = vhost.exchanges.get(command.exchange or "")
        queue = None if command.queue is None else vhost.queues.get(command.queue)
        result = ExchangeBoundResult(
            exchange_not_found=exchange is None,
            queue_not_found=command.queue is not None and queue is None,
        )
        if exchange is None:
            return result
        bindings = list(exchange.bindings.values())
        to_queue = [b for b in bindings if queue is None or b.destination is queue]
        if command.queue is not None and queue is not None:
            result.queue_not_matched = not to_queue
        # qpidd: a key (or arguments) is matched among the queue's bindings when the queue is
        # bound, else among all the exchange's bindings
        among = to_queue if to_queue else bindings
        if command.binding_key is not None:
            result.key_not_matched = not any(b.routing_key == command.binding_key for b in among)
        if command.arguments is not None:
            wanted = freeze(dict(_table(command.arguments)))
            result.args_not_matched = not any(freeze(dict(b.arguments)) == wanted for b in among)
        return result

    # --- queues -------------------------------------------------------------------------------

    def _queue_declare(self, channel: _Channel, command: QueueDeclare) -> None:
        name = command.queue or ""
        vhost = channel.model.vhost
        alternate = command.alternate_exchange
        existing = vhost.queues.get(name)
        if not name:
            raise _Refused(531, "no queue named")
        if existing is not None:
            owner = existing.exclusive_owner
            if command.exclusive and owner is not channel.owner:
                raise BrokerError(405, f"queue '{name}' is not exclusive to this session")
            if not command.passive and owner is not None and owner is not channel.owner:
                raise BrokerError(405, f"queue '{name}' is exclusive to another session")
        if command.passive:
            if existing is None:
                raise BrokerError(404, f"no queue '{name}'")
            return
        if alternate and alternate not in vhost.exchanges:
            raise BrokerError(404, f"no alternate exchange '{alternate}'")
        if existing is not None:
            current = existing.arguments.get(_ALTERNATE)
            if alternate and current != alternate:
                raise BrokerError(530, f"queue '{name}' has another alternate exchange")
            return
        arguments = {
            k: v for k, v in _table(command.arguments).items() if not k.startswith("qpid.")
        }
        if _truthy(arguments.get("no-local")):
            self._no_local = True
        channel.model.queue_declare(
            name,
            durable=command.durable,
            exclusive=command.exclusive,
            auto_delete=command.auto_delete,
            arguments=arguments,
        )
        if alternate:
            vhost.queues[name].arguments[_ALTERNATE] = alternate

    def _queue_delete(self, channel: _Channel, command: QueueDelete) -> None:
        name = command.queue or ""
        if not name:
            raise _Refused(531, "no queue named")
        vhost = channel.model.vhost
        queue = vhost.queues.get(name)
        if queue is None:
            raise BrokerError(404, f"no queue '{name}'")
        channel.model._check_owner(queue)
        if command.if_unused and queue.consumers:
            raise BrokerError(406, f"queue '{name}' in use")
        if command.if_empty and queue.message_count:
            raise BrokerError(406, f"queue '{name}' not empty")
        channel.owner.check("configure", "queue", name)
        self._delete_queue(queue)

    def _queue_purge(self, channel: _Channel, command: QueuePurge) -> None:
        name = command.queue or ""
        if not name:
            raise _Refused(531, "no queue named")
        if name not in channel.model.vhost.queues:
            raise BrokerError(404, f"no queue '{name}'")
        channel.model.queue_purge(name)

    def _queue_query(self, channel: _Channel, command: QueueQuery) -> QueueQueryResult:
        queue = channel.model.vhost.queues.get(command.queue or "")
        if queue is None:
            return QueueQueryResult()
        alternate = queue.arguments.get(_ALTERNATE)
        return QueueQueryResult(
            queue=queue.name,
            alternate_exchange=alternate if isinstance(alternate, str) else None,
            durable=queue.durable,
            exclusive=queue.exclusive_owner is not None,
            auto_delete=queue.auto_delete,
            arguments={k: v for k, v in _map(queue.arguments).items() if k != _ALTERNATE},
            message_count=queue.message_count,
            subscriber_count=len(queue.consumers),
        )

    def _to_alternate(self, queue: Queue, message: Message) -> None:
        if self.connection is None:
            return
        vhost = self.connection.vhost
        alternate = queue.arguments.get(_ALTERNATE)
        if not isinstance(alternate, str):
            return
        exchange = vhost.exchanges.get(alternate)
        if exchange is None:
            return
        for target in vhost.route(exchange, message.routing_key, message.properties.headers):
            if target is not queue:
                vhost.enqueue(target, message)

    # --- subscriptions ------------------------------------------------------------------------

    def _subscribe(self, channel: _Channel, command: MessageSubscribe) -> None:
        model = channel.model
        name = command.queue or ""
        destination = command.destination or ""
        if not name:
            raise _Refused(531, "no queue named")
        queue = model.vhost.queues.get(name)
        if queue is None:
            raise BrokerError(404, f"no queue '{name}'")
        model._check_owner(queue)
        if destination in channel.subscriptions:
            raise BrokerError(530, f"destination '{destination}' is in use")
        exclusive = bool(command.exclusive)
        if queue.consumers and (exclusive or any(c.exclusive for c in queue.consumers)):
            raise BrokerError(405, f"queue '{name}' has an exclusive subscriber")
        sub = _Subscription(
            model,
            queue,
            destination,
            channel.core,
            accept_mode=AcceptMode.EXPLICIT if command.accept_mode is None else command.accept_mode,
            acquire_mode=AcquireMode.PRE_ACQUIRED
            if command.acquire_mode is None
            else command.acquire_mode,
            exclusive=exclusive,
        )
        channel.subscriptions[destination] = sub
        if _truthy(queue.arguments.get("no-local")):
            self._no_local = True
        if sub.acquire_mode == AcquireMode.NOT_ACQUIRED:
            self._browsing = True
        if queue.auto_delete:
            channel.subscribed[queue.name] = queue
        if sub.acquire_mode == AcquireMode.PRE_ACQUIRED:
            model.consumers[destination] = sub
            queue.consumers.append(sub)
            queue.ever_consumed = True

    def _cancel(self, channel: _Channel, command: MessageCancel) -> None:
        destination = command.destination or ""
        sub = channel.subscriptions.pop(destination, None)
        if sub is None:
            raise BrokerError(404, f"no subscription '{destination}'")
        if sub.acquire_mode == AcquireMode.PRE_ACQUIRED:
            self._drop(channel, sub)

    def _credit_changed(self, channel: _Channel, command: Command) -> None:
        """The core applied the credit command: deliver what it allows now."""
        destination = getattr(command, "destination", None) or ""
        sub = channel.subscriptions.get(destination)
        if sub is None:
            return
        if sub.acquire_mode == AcquireMode.NOT_ACQUIRED:
            self._browse(channel, sub)
        else:
            channel.model.vhost.dispatch(sub.queue)

    def _redispatch(self, channel: _Channel) -> None:
        """Window mode: completions gave credit back; deliver what it allows."""
        for sub in list(channel.subscriptions.values()):
            if sub.acquire_mode == AcquireMode.NOT_ACQUIRED:
                self._browse(channel, sub)
            elif not sub.queue.deleted:
                channel.model.vhost.dispatch(sub.queue)
        self.wake()

    def _pump_browsers(self) -> None:
        for channel in self.channels.values():
            for sub in channel.subscriptions.values():
                if sub.acquire_mode == AcquireMode.NOT_ACQUIRED:
                    self._browse(channel, sub)

    def _browse(self, channel: _Channel, sub: _Subscription) -> None:
        for entry in list(sub.queue.ready):
            if entry.seq <= sub.last_seq:
                continue
            if not sub.covers(entry.message):
                return
            sub.last_seq = entry.seq
            command_id = self._transfer(channel, sub, entry.message, entry.redelivered)
            if command_id is not None:
                channel.deliveries[command_id] = _Delivery(None, sub.queue, entry)

    def _transfer(
        self, channel: _Channel, sub: _Subscription, message: Message, redelivered: bool
    ) -> int | None:
        headers = to_0_10(message.exchange, message.routing_key, message.properties, redelivered)
        try:
            return channel.core.transfer(
                sub.destination,
                message.body,
                headers=headers,
                accept_mode=sub.accept_mode,
                acquire_mode=sub.acquire_mode,
            )
        except LocalProtocolError as exc:
            logger.debug("0-10 transfer to %r not sent: %s", sub.destination, exc)
            return None

    # --- DeliverySink (the model's deliveries) ----------------------------------------------

    def deliver(
        self,
        channel: int,
        consumer_tag: str,
        delivery_tag: int,
        redelivered: bool,
        message: Message,
        stream_offset: int | None = None,
    ) -> None:
        ch = self.channels.get(channel)
        sub = None if ch is None else ch.subscriptions.get(consumer_tag)
        if ch is None or sub is None:
            return
        command_id = self._transfer(ch, sub, message, redelivered)
        if command_id is None:
            if sub.accept_mode == AcceptMode.EXPLICIT:
                ch.model.nack(delivery_tag, requeue=True)
            return
        if sub.accept_mode == AcceptMode.EXPLICIT:
            ch.deliveries[command_id] = _Delivery(delivery_tag, sub.queue, None)
        self.wake()

    def consumer_cancelled(self, channel: int, consumer_tag: str) -> None:
        ch = self.channels.get(channel)
        if ch is not None:
            ch.subscriptions.pop(consumer_tag, None)

    def channel_failed(self, channel: int, error: BrokerError) -> None:
        ch = self.channels.get(channel)
        if ch is None:
            return
        with contextlib.suppress(LocalProtocolError):
            ch.core.raise_exception(error.reply_code, error.reply_text)
        self._detached(channel)
        self.wake()

    # --- settling -----------------------------------------------------------------------------

    def _take(
        self, channel: _Channel, transfers: SequenceSet | None
    ) -> list[tuple[int, _Delivery]]:
        taken: list[tuple[int, _Delivery]] = []
        for command_id in transfers or ():
            delivery = channel.deliveries.pop(command_id, None)
            if delivery is not None:
                taken.append((command_id, delivery))
        return taken

    def _accept(self, channel: _Channel, command: MessageAccept) -> None:
        for command_id, delivery in self._take(channel, command.transfers):
            if delivery.tag is not None:
                channel.model.ack(delivery.tag)
                if channel.tx:
                    channel.tx_accepted[command_id] = delivery

    def _release(self, channel: _Channel, command: MessageRelease) -> None:
        with _outside_tx(channel.model):
            for _, delivery in self._take(channel, command.transfers):
                if delivery.tag is not None:
                    channel.model.nack(delivery.tag, requeue=True)

    def _reject(self, channel: _Channel, command: MessageReject) -> None:
        with _outside_tx(channel.model):
            for _, delivery in self._take(channel, command.transfers):
                if delivery.tag is None:
                    continue
                record = channel.model.unacked.get(delivery.tag)
                channel.model.ack(delivery.tag)
                if record is not None:
                    self._to_alternate(delivery.queue, record.entry.message)

    def _acquire(self, channel: _Channel, command: MessageAcquire) -> Acquired:
        acquired: list[int] = []
        for command_id in command.transfers or ():
            delivery = channel.deliveries.get(command_id)
            if delivery is None or delivery.acquired or delivery.entry is None:
                continue
            queue = delivery.queue
            entry = delivery.entry
            if entry not in queue.ready:
                continue
            queue.ready.remove(entry)  # type: ignore[union-attr]
            queue.ready_bytes -= entry.message.size
            delivery.acquired = True
            tag = channel.model.next_tag
            channel.model.next_tag += 1
            channel.model._outstanding(
                _Unacked(tag, queue, entry, None, channel.model.vhost.clock.now())
            )
            delivery.tag = tag
            acquired.append(command_id)
        return Acquired(transfers=SequenceSet(acquired))

    # --- transactions -------------------------------------------------------------------------

    def _tx_select(self, channel: _Channel, command: TxSelect) -> None:
        channel.model.tx_select()
        channel.tx = True

    def _tx_commit(self, channel: _Channel, command: TxCommit) -> None:
        if not channel.tx:
            raise BrokerError(503, "the session is not transactional")
        channel.model.tx_commit()
        channel.tx_accepted.clear()
        self._pump_browsers()

    def _tx_rollback(self, channel: _Channel, command: TxRollback) -> None:
        if not channel.tx:
            raise BrokerError(503, "the session is not transactional")
        channel.model.tx_rollback()
        channel.deliveries.update(channel.tx_accepted)
        deleted = {id(d.queue): d.queue for d in channel.tx_accepted.values() if d.queue.deleted}
        channel.tx_accepted.clear()
        for queue in deleted.values():
            # accepted in the transaction, then their queue went: unaccepted again, orphans
            if isinstance(queue.arguments.get(_ALTERNATE), str):
                for entry in sorted(_orphans(channel, queue), key=_by_seq):
                    self._to_alternate(queue, entry.message)


def _orphans(channel: _Channel, queue: Queue) -> list[Entry]:
    """Take the deliveries from *queue* that *channel* acquired and has not accepted: off its
    unacknowledged deliveries (their octets no longer held), their command ids forgotten (a
    later accept, release or reject of one is ignored, as of any id not outstanding)."""
    model = channel.model
    taken: list[Entry] = []
    for command_id, delivery in list(channel.deliveries.items()):
        tag = delivery.tag
        if delivery.queue is queue and tag is not None and tag in model.unacked:
            del channel.deliveries[command_id]
            taken += (record.entry for record in model._take(tag, False))
    return taken


def _by_seq(entry: Entry) -> int:
    return entry.seq


@contextlib.contextmanager
def _outside_tx(model: ModelChannel) -> Iterator[None]:
    """0-10 transactions cover accepts and transfers only: a release or reject inside one
    takes effect at once."""
    transactional = model.transactional
    model.transactional = False
    try:
        yield
    finally:
        model.transactional = transactional


def _truthy(value: object) -> bool:
    value = getattr(value, "value", value)
    if isinstance(value, str):
        return value.lower() in ("true", "1", "yes")
    return bool(value)


def _table(value: Map | None) -> FieldTable:
    if not value:
        return {}
    return {k: field_value(v) for k, v in value.items()}


def _map(value: FieldTable) -> Map:
    return {k: map_value(v) for k, v in value.items()}


_Handler: TypeAlias = "Callable[[Session010, _Channel, Never], Struct | None]"

_HANDLERS: Final[dict[type[Command], _Handler]] = {
    ExchangeDeclare: Session010._exchange_declare,
    ExchangeDelete: Session010._exchange_delete,
    ExchangeQuery: Session010._exchange_query,
    ExchangeBind: Session010._exchange_bind,
    ExchangeUnbind: Session010._exchange_unbind,
    ExchangeBound: Session010._exchange_bound,
    QueueDeclare: Session010._queue_declare,
    QueueDelete: Session010._queue_delete,
    QueuePurge: Session010._queue_purge,
    QueueQuery: Session010._queue_query,
    MessageSubscribe: Session010._subscribe,
    MessageCancel: Session010._cancel,
    MessageSetFlowMode: Session010._credit_changed,
    MessageFlow: Session010._credit_changed,
    MessageFlush: Session010._credit_changed,
    MessageStop: Session010._credit_changed,
    MessageAccept: Session010._accept,
    MessageRelease: Session010._release,
    MessageReject: Session010._reject,
    MessageAcquire: Session010._acquire,
    TxSelect: Session010._tx_select,
    TxCommit: Session010._tx_commit,
    TxRollback: Session010._tx_rollback,
}
