"""What a running broker holds, as plain frozen values: queues, exchanges with their bindings,
and the open connections; what ``rabbitmqctl list_queues``, ``list_exchanges``,
``list_bindings`` and ``list_connections`` show. Taken on the broker's own thread (see
:class:`amqp_broker.BrokerThread`), so a test reads a consistent picture."""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import attrs

from ._queues import Queue

if TYPE_CHECKING:
    from amqp_sansio import BasicProperties, FieldTable

    from ._broker import Broker
    from ._session import Session
    from ._vhost import VirtualHost

__all__ = [
    "BindingSnapshot",
    "BrokerSnapshot",
    "ConnectionSnapshot",
    "ExchangeSnapshot",
    "MessageSnapshot",
    "QueueSnapshot",
    "peek",
    "purge",
    "take_snapshot",
]


@final
@attrs.frozen
class QueueSnapshot:
    """One queue (``rabbitmqctl list_queues``)."""

    vhost: str
    name: str
    #: ``classic``, ``quorum`` or ``stream``.
    type: str
    durable: bool
    auto_delete: bool
    exclusive: bool
    #: Messages ready for delivery (a stream: retained).
    messages_ready: int
    #: Delivered and not yet acknowledged.
    messages_unacknowledged: int
    consumers: int


@final
@attrs.frozen
class BindingSnapshot:
    """One binding (``rabbitmqctl list_bindings``); *destination_kind* is ``queue`` or
    ``exchange``."""

    vhost: str
    source: str
    destination: str
    destination_kind: str
    routing_key: str


@final
@attrs.frozen
class ExchangeSnapshot:
    """One exchange (``rabbitmqctl list_exchanges``), with the bindings it is the source of."""

    vhost: str
    name: str
    type: str
    durable: bool
    auto_delete: bool
    internal: bool
    bindings: tuple[BindingSnapshot, ...]


@final
@attrs.frozen
class ConnectionSnapshot:
    """One client connection (``rabbitmqctl list_connections``): *vhost* and *user* are empty
    until the client opened it."""

    number: int
    peer: str
    user: str
    vhost: str
    channels: int
    #: The name the client gave (``connection_name`` in its client properties), or None.
    name: str | None = None
    #: The client properties of its ``connection.start-ok`` (product, version,
    #: capabilities, ...).
    client_properties: FieldTable = attrs.field(factory=dict)


@final
@attrs.frozen
class MessageSnapshot:
    """One message waiting in a queue, as :func:`peek` shows it without taking it."""

    body: bytes
    properties: BasicProperties
    exchange: str
    routing_key: str
    #: Delivered before and given back.
    redelivered: bool
    #: Quorum queues: how often it came back (``x-delivery-count``); 0 elsewhere.
    delivery_count: int


@final
@attrs.frozen
class BrokerSnapshot:
    """Everything :func:`take_snapshot` saw, with look-ups by name."""

    queues: tuple[QueueSnapshot, ...]
    exchanges: tuple[ExchangeSnapshot, ...]
    connections: tuple[ConnectionSnapshot, ...]

    def queue(self, name: str, vhost: str = "/") -> QueueSnapshot:
        """The queue *name* on *vhost*.

        :raises KeyError: there is no such queue.
        """
        for queue in self.queues:
            if queue.name == name and queue.vhost == vhost:
                return queue
        raise KeyError(f"no queue {name!r} on vhost {vhost!r}")

    def exchange(self, name: str, vhost: str = "/") -> ExchangeSnapshot:
        """The exchange *name* on *vhost* (``""`` is the default exchange).

        :raises KeyError: there is no such exchange.
        """
        for exchange in self.exchanges:
            if exchange.name == name and exchange.vhost == vhost:
                return exchange
        raise KeyError(f"no exchange {name!r} on vhost {vhost!r}")


def _queue(broker: Broker, name: str, vhost: str) -> Queue:
    host = broker.vhosts.get(vhost)
    queue = None if host is None else host.queues.get(name)
    if queue is None:
        raise KeyError(f"no queue {name!r} on vhost {vhost!r}")
    return queue


def peek(broker: Broker, queue: str, vhost: str = "/") -> tuple[MessageSnapshot, ...]:
    """The messages ready in *queue*, in the order it would deliver them (a stream: every
    retained message), none taken; unacknowledged ones are not in it. Call it on the
    broker's thread (:meth:`amqp_broker.BrokerThread.peek`).

    :raises KeyError: there is no such queue.
    """
    found = _queue(broker, queue, vhost)
    log = found.log
    if log is not None:
        messages = [m for o in range(log.first_offset, log.next_offset) if (m := log.read(o))]
        return tuple(
            MessageSnapshot(bytes(m.body), m.properties, m.exchange, m.routing_key, False, 0)
            for m in messages
        )
    return tuple(
        MessageSnapshot(
            bytes(entry.message.body),
            entry.message.properties,
            entry.message.exchange,
            entry.message.routing_key,
            entry.redelivered,
            entry.delivery_count,
        )
        for entry in found.ready
    )


def purge(broker: Broker, queue: str, vhost: str = "/") -> int:
    """Drop the messages ready in *queue* (``rabbitmqctl purge_queue``); returns how many.

    :raises KeyError: there is no such queue.
    :raises ValueError: it is a stream (streams are not purged, as in RabbitMQ).
    """
    found = _queue(broker, queue, vhost)
    if found.log is not None:
        raise ValueError(f"{queue!r} is a stream: streams are not purged")
    return found.purge()


def _unacked(vhost: VirtualHost, sessions: list[Session]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for session in sessions:
        connection = session.connection
        if connection is None or connection.vhost is not vhost:
            continue
        for channel in connection.channels.values():
            for record in channel.unacked.values():
                name = record.queue.name
                counts[name] = counts.get(name, 0) + 1
    return counts


def take_snapshot(broker: Broker, sessions: list[Session]) -> BrokerSnapshot:
    """What *broker* holds now; *sessions* are its open client connections. Call it on the
    thread (or in the Trio run) the broker serves on."""
    queues: list[QueueSnapshot] = []
    exchanges: list[ExchangeSnapshot] = []
    for vhost in broker.vhosts.values():
        unacked = _unacked(vhost, sessions)
        queues.extend(
            QueueSnapshot(
                vhost=vhost.name,
                name=queue.name,
                type=queue.type,
                durable=queue.durable,
                auto_delete=queue.auto_delete,
                exclusive=queue.exclusive_owner is not None,
                messages_ready=queue.message_count,
                messages_unacknowledged=unacked.get(queue.name, 0),
                consumers=len(queue.consumers),
            )
            for queue in vhost.queues.values()
        )
        for exchange in vhost.exchanges.values():
            bindings = tuple(
                BindingSnapshot(
                    vhost=vhost.name,
                    source=exchange.name,
                    destination=binding.destination.name,
                    destination_kind="queue"
                    if isinstance(binding.destination, Queue)
                    else ("exchange"),
                    routing_key=binding.routing_key,
                )
                for binding in exchange.bindings.values()
            )
            exchanges.append(
                ExchangeSnapshot(
                    vhost=vhost.name,
                    name=exchange.name,
                    type=exchange.type,
                    durable=exchange.durable,
                    auto_delete=exchange.auto_delete,
                    internal=exchange.internal,
                    bindings=bindings,
                )
            )
    connections = tuple(
        ConnectionSnapshot(
            number=0 if session.connection is None else session.connection.number,
            peer=session.peer,
            user=session.username or "",
            vhost="" if session.connection is None else session.connection.vhost.name,
            channels=0 if session.connection is None else len(session.connection.channels),
            name=session.connection_name,
            client_properties=dict(session.client_properties),
        )
        for session in sessions
    )
    return BrokerSnapshot(tuple(queues), tuple(exchanges), connections)
