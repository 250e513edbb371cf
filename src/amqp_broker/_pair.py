"""The broker behind an ``amqp_sansio.testing.ConnectionPair``: a client core talking to the
model in memory, with no sockets, no threads and no Trio."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, final

from amqp_sansio import Connection, Role
from amqp_sansio.testing import ConnectionPair

from ._broker import Broker
from ._session import Session

if TYPE_CHECKING:
    from amqp_sansio import ConnectionConfig, Event, RemoteProtocolError

__all__ = ["BrokerSide", "memory_pair"]


@final
class BrokerSide:
    """The broker's end of one in-memory connection (an ``amqp_sansio.testing.ServerSide``):
    a server-role core and the :class:`Session` that answers its events from the model."""

    __slots__ = ("core", "session")

    def __init__(self, broker: Broker, config: ConnectionConfig | None = None) -> None:
        #: The server-role core the client's octets go to.
        self.core = Connection(Role.SERVER, config)
        #: What turns the core's events into model calls.
        self.session = Session(broker, self.core, peer="memory")

    def __repr__(self) -> str:
        return f"<BrokerSide {self.session!r}>"

    def handle(self, event: Event, /) -> None:
        """Act on one event of :attr:`core`."""
        self.session.handle(event)

    def protocol_error(self, error: RemoteProtocolError, /) -> None:
        """The client broke the protocol (the core already queued its close)."""
        self.session.protocol_error(error)

    def flush(self) -> None:
        """Nothing is kept back: each publish is confirmed at once."""

    def lost(self) -> None:
        """The link was cut: requeue what the connection held and delete its exclusive
        queues, as the broker does when a socket closes."""
        if not self.session.finished:
            self.session.end()


def memory_pair(
    client_config: ConnectionConfig | None = None,
    *,
    broker: Broker | None = None,
    byte_at_a_time: bool = False,
) -> ConnectionPair:
    """A :class:`~amqp_sansio.testing.ConnectionPair` whose server is the embedded broker's
    model: the client core's octets reach a :class:`Session` on *broker*, which answers as the
    broker on a socket would (RabbitMQ's behaviours, users guest/guest by default), and nothing
    moves until :meth:`~amqp_sansio.testing.ConnectionPair.transfer` says so.

    Pairs made with the same *broker* share its queues and exchanges (a publisher and a
    consumer). By default a new ``Broker(clock=time.monotonic, wall_clock=time.time)``;
    pass one with a clock of your own to move time by hand (TTLs, timeouts). No Trio needed::

        pair = amqp_broker.memory_pair()
        pair.handshake()                 # the broker checks the credentials
        channel = pair.open_channel()
    """
    if broker is None:
        broker = Broker(clock=time.monotonic, wall_clock=time.time)
    side = BrokerSide(broker)
    return ConnectionPair(client_config, byte_at_a_time=byte_at_a_time, server_side=side)
