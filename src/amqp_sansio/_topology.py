"""The topology a client declared on a connection, recorded for replay after a reconnect.

The core records a declaration when the broker confirmed it (its ``-ok`` arrived) or, for a
``nowait`` method, when it was sent; it forgets it on delete, unbind, cancel (ours or the
server's) and, for a channel's consumers and QoS, when the channel closes. Passive declares are
checks, not declarations, and are not recorded. Exclusive and auto-delete queues are recorded
like any other: whether to replay them is the recovery policy's decision. What the broker
deletes by itself is forgotten too: an auto-delete queue when this connection's last consumer
of it goes, an auto-delete exchange when its last binding as a source goes.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, TypeAlias, TypeVar, final

import attrs

from ._generated.spec_0_9_1 import (
    BasicCancel,
    BasicConsume,
    BasicConsumeOk,
    BasicQos,
    ExchangeBind,
    ExchangeDeclare,
    ExchangeDelete,
    ExchangeUnbind,
    QueueBind,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueUnbind,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ._method import Method
    from ._table import FieldTable

__all__ = ["Topology", "TopologyRecorder"]

# A binding is identified by its ends and routing key; its arguments are compared with ``==``
# (field tables are dicts, so they cannot be part of a hashable key).
_BindingKey: TypeAlias = tuple[str, str, str]


@final
@attrs.frozen(kw_only=True)
class Topology:
    """A snapshot of what a client declared on a connection (:attr:`Connection.topology`).

    Every value is the method the application sent, unchanged, so replaying means sending it
    again (a server-named queue is recorded under the name its ``declare-ok`` gave, with the
    original ``queue=""`` declare).

    :ivar exchanges: exchange name -> its ``exchange.declare``.
    :ivar queues: queue name -> its ``queue.declare``.
    :ivar queue_bindings: ``queue.bind`` methods in force, oldest first.
    :ivar exchange_bindings: ``exchange.bind`` methods in force, oldest first.
    :ivar consumers: ``(channel, consumer_tag)`` -> its ``basic.consume`` (the tag is the one
        ``consume-ok`` returned, which may differ from the request's empty tag).
    :ivar qos: channel -> the ``basic.qos`` settings in force on it, at most one per value of
        ``global_`` (per-consumer first), the latest of each.
    """

    exchanges: Mapping[str, ExchangeDeclare]
    queues: Mapping[str, QueueDeclare]
    queue_bindings: tuple[QueueBind, ...]
    exchange_bindings: tuple[ExchangeBind, ...]
    consumers: Mapping[tuple[int, str], BasicConsume]
    qos: Mapping[int, tuple[BasicQos, ...]]


_Binding = TypeVar("_Binding", QueueBind, ExchangeBind)


def _bind(table: dict[_BindingKey, list[_Binding]], key: _BindingKey, request: _Binding) -> None:
    # Binding twice is idempotent on the broker: keep one record, the latest.
    bindings = [b for b in table.get(key, ()) if b.arguments != request.arguments]
    bindings.append(request)
    table[key] = bindings


def _unbind(
    table: dict[_BindingKey, list[_Binding]], key: _BindingKey, arguments: FieldTable
) -> None:
    kept = [b for b in table.get(key, ()) if b.arguments != arguments]
    if kept:
        table[key] = kept
    else:
        table.pop(key, None)


@final
class TopologyRecorder:
    """The mutable record behind :class:`Topology` (client role)."""

    __slots__ = ("consumers", "exchange_bindings", "exchanges", "qos", "queue_bindings", "queues")

    def __init__(self) -> None:
        self.exchanges: dict[str, ExchangeDeclare] = {}
        self.queues: dict[str, QueueDeclare] = {}
        #: (queue, exchange, routing_key) -> bindings differing only in their arguments
        self.queue_bindings: dict[_BindingKey, list[QueueBind]] = {}
        #: (destination, source, routing_key) -> bindings differing only in their arguments
        self.exchange_bindings: dict[_BindingKey, list[ExchangeBind]] = {}
        self.consumers: dict[tuple[int, str], BasicConsume] = {}
        self.qos: dict[int, dict[bool, BasicQos]] = {}

    def snapshot(self) -> Topology:
        """An immutable copy of the record."""
        return Topology(
            exchanges=MappingProxyType(dict(self.exchanges)),
            queues=MappingProxyType(dict(self.queues)),
            queue_bindings=tuple(b for bs in self.queue_bindings.values() for b in bs),
            exchange_bindings=tuple(b for bs in self.exchange_bindings.values() for b in bs),
            consumers=MappingProxyType(dict(self.consumers)),
            qos=MappingProxyType(
                {
                    channel: tuple(settings[flag] for flag in (False, True) if flag in settings)
                    for channel, settings in self.qos.items()
                }
            ),
        )

    def succeeded(self, channel: int, request: Method, reply: Method | None) -> None:
        """*request* took effect: its reply arrived, or it was sent with ``nowait``."""
        if isinstance(request, ExchangeDeclare):
            if not request.passive:
                self.exchanges[request.exchange] = request
        elif isinstance(request, QueueDeclare):
            if request.passive:
                return
            name = reply.queue if isinstance(reply, QueueDeclareOk) else request.queue
            if name:  # a server-named queue declared with nowait has no name we could know
                self.queues[name] = request
        elif isinstance(request, QueueBind):
            key = (request.queue, request.exchange, request.routing_key)
            _bind(self.queue_bindings, key, request)
        elif isinstance(request, QueueUnbind):
            key = (request.queue, request.exchange, request.routing_key)
            _unbind(self.queue_bindings, key, request.arguments)
        elif isinstance(request, ExchangeBind):
            key = (request.destination, request.source, request.routing_key)
            _bind(self.exchange_bindings, key, request)
        elif isinstance(request, ExchangeUnbind):
            key = (request.destination, request.source, request.routing_key)
            _unbind(self.exchange_bindings, key, request.arguments)
        elif isinstance(request, ExchangeDelete):
            self._exchange_deleted(request.exchange)
        elif isinstance(request, QueueDelete):
            self._queue_deleted(request.queue)
        elif isinstance(request, BasicConsume):
            tag = reply.consumer_tag if isinstance(reply, BasicConsumeOk) else request.consumer_tag
            if tag:  # nowait with an empty tag: the server's tag is never told
                self.consumers[channel, tag] = request
        elif isinstance(request, BasicCancel):
            self._consumer_gone(channel, request.consumer_tag)
        elif isinstance(request, BasicQos):
            self.qos.setdefault(channel, {})[request.global_] = request
        if isinstance(request, QueueUnbind | ExchangeUnbind):
            self._maybe_auto_delete_exchange(
                request.exchange if isinstance(request, QueueUnbind) else request.source
            )

    def _queue_deleted(self, name: str) -> None:
        self.queues.pop(name, None)
        sources = set()
        for key in [key for key in self.queue_bindings if key[0] == name]:
            sources.add(key[1])
            del self.queue_bindings[key]
        for source in sources:
            self._maybe_auto_delete_exchange(source)

    def _exchange_deleted(self, name: str) -> None:
        # The broker drops every binding of a deleted exchange, as source or destination.
        self.exchanges.pop(name, None)
        for key in [key for key in self.queue_bindings if key[1] == name]:
            del self.queue_bindings[key]
        sources = set()
        for key in [key for key in self.exchange_bindings if name in (key[0], key[1])]:
            if key[0] == name:
                sources.add(key[1])
            del self.exchange_bindings[key]
        for source in sources - {name}:
            self._maybe_auto_delete_exchange(source)

    def _consumer_gone(self, channel: int, consumer_tag: str) -> None:
        # An auto-delete queue goes with its last consumer (RabbitMQ deletes it when the
        # consumer count drops to zero; our record only knows this connection's consumers, as
        # the Java client's does).
        consume = self.consumers.pop((channel, consumer_tag), None)
        if consume is None:
            return
        declare = self.queues.get(consume.queue)
        if declare is None or not declare.auto_delete:
            return
        if not any(other.queue == consume.queue for other in self.consumers.values()):
            self._queue_deleted(consume.queue)

    def _maybe_auto_delete_exchange(self, name: str) -> None:
        # An auto-delete exchange goes when its last binding (as a source) goes.
        declare = self.exchanges.get(name)
        if declare is None or not declare.auto_delete:
            return
        if any(key[1] == name for key in self.queue_bindings) or any(
            key[1] == name for key in self.exchange_bindings
        ):
            return
        self._exchange_deleted(name)

    def consumer_cancelled(self, channel: int, consumer_tag: str) -> None:
        """The server cancelled a consumer."""
        self._consumer_gone(channel, consumer_tag)

    def channel_closed(self, channel: int) -> None:
        """A channel closed: its consumers and QoS are gone (exchanges, queues and bindings
        live on the broker, not on the channel); an auto-delete queue whose last consumer
        went with it is gone too."""
        for key in [key for key in self.consumers if key[0] == channel]:
            self._consumer_gone(*key)
        self.qos.pop(channel, None)
