"""The broker as a server factory for ``amqp_sansio.testing``: each call gives the server side of
one more connection to the same in-memory model, with no sockets and no clock of its own; and
:func:`memory_pair`, a ``ConnectionPair`` whose server is that model.

``amqp_sansio.testing.fault_sweep`` and ``MemoryConnection`` take any such factory, so the core
never imports the broker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import attrs

from amqp_sansio import Connection, ConnectionConfig, Role
from amqp_sansio.testing import ConnectionPair
from amqp_sansio.v0_10 import Connection as Connection010

from ._broker import Broker
from ._server_0_10 import config_0_10
from ._session import Session
from ._session_0_10 import Session010

if TYPE_CHECKING:
    from collections.abc import Mapping

    from amqp_sansio import Event, RemoteProtocolError
    from amqp_sansio.v0_10 import Event as Event010

    from ._options import BrokerOptions
    from ._permissions import User

__all__ = [
    "MemoryServer",
    "MemoryServer010",
    "MemoryServerSide",
    "MemoryServerSide010",
    "memory_pair",
    "memory_server",
    "memory_server_0_10",
]


@final
class _ManualClock:
    """Time that moves only when a test moves it (TTLs, timeouts)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@final
class MemoryServerSide:
    """The broker's end of one in-memory connection (``amqp_sansio.testing.ServerSide``)."""

    __slots__ = ("core", "session")

    def __init__(self, broker: Broker, config: ConnectionConfig | None, peer: str) -> None:
        #: The server-role core the client's octets go to.
        self.core = Connection(Role.SERVER, config)
        self.session = Session(broker, self.core, peer=peer, coalesce_confirms=True)

    def __repr__(self) -> str:
        return f"<MemoryServerSide {self.session.peer}>"

    def handle(self, event: Event) -> None:
        """Act on one event of :attr:`core`."""
        self.session.handle(event)

    def protocol_error(self, error: RemoteProtocolError) -> None:
        """The client broke the protocol (the core already queued its close)."""
        self.session.protocol_error(error)

    def flush(self) -> None:
        """About to take :attr:`core`'s output: send the confirms kept until now, as RabbitMQ
        does when its channel is idle."""
        self.session.flush_confirms()

    def queue_counts(self, queue: str, vhost: str = "/") -> tuple[int, int]:
        """``amqp_sansio.testing.QueueProbe``: *queue*'s ready messages, and those this
        connection holds unacknowledged."""
        found = self.session.broker.vhosts[vhost].queues.get(queue)
        ready = 0 if found is None else found.message_count
        connection = self.session.connection
        unacked = 0
        if connection is not None and not self.session.finished:
            for channel in connection.channels.values():
                unacked += sum(1 for r in channel.unacked.values() if r.queue.name == queue)
        return ready, unacked

    def lost(self) -> None:
        """The link was cut: requeue what the connection held unacknowledged and delete its
        exclusive queues, as the broker does when a socket closes."""
        if not self.session.finished:
            self.session.end()


@final
class MemoryServer:
    """A factory of :class:`MemoryServerSide`\\ s sharing one :class:`Broker` (what survives a
    cut connection: queues, messages, exchanges).

    :ivar broker: the model, for assertions (``broker.vhosts["/"]``).
    :ivar clock: the broker's clock; set ``clock.now`` to move time.
    """

    __slots__ = ("_count", "broker", "clock", "config")

    def __init__(
        self,
        *,
        options: BrokerOptions | None = None,
        users: Mapping[str, str | User] | None = None,
        config: ConnectionConfig | None = None,
    ) -> None:
        self.clock = _ManualClock()
        self.broker = Broker(
            clock=self.clock, wall_clock=lambda: 1_700_000_000.0, options=options, users=users
        )
        # what connection.start says, as on a socket (the config's own properties win)
        base = ConnectionConfig() if config is None else config
        self.config = attrs.evolve(
            base,
            server_properties={
                **self.broker.options.server_properties,
                **(base.server_properties or {}),
            },
        )
        self._count = 0

    def __repr__(self) -> str:
        return f"<MemoryServer {self._count} connections>"

    def __call__(self) -> MemoryServerSide:
        """The server side of a new connection."""
        self._count += 1
        return MemoryServerSide(self.broker, self.config, f"memory-{self._count}")


def memory_server(
    *,
    options: BrokerOptions | None = None,
    users: Mapping[str, str | User] | None = None,
    config: ConnectionConfig | None = None,
) -> MemoryServer:
    """A server factory for ``amqp_sansio.testing`` over a new in-memory broker (guest/guest
    by default)::

        from amqp_sansio.testing import MemoryConnection
        from amqp_broker import memory_server

        client = MemoryConnection(memory_server())
    """
    return MemoryServer(options=options, users=users, config=config)


def memory_pair(
    client_config: ConnectionConfig | None = None,
    *,
    server: MemoryServer | None = None,
    byte_at_a_time: bool = False,
) -> ConnectionPair:
    """A :class:`~amqp_sansio.testing.ConnectionPair` whose server is the embedded broker's
    model: the client core's octets reach a :class:`Session` on *server*'s broker (a new
    :func:`memory_server` by default), which answers each event as the broker on a socket would
    (RabbitMQ's behaviours; users guest/guest), and nothing moves until
    :meth:`~amqp_sansio.testing.ConnectionPair.transfer` says so. No sockets, no threads, no
    Trio::

        pair = amqp_broker.memory_pair()
        pair.handshake()                 # through the broker's login
        channel = pair.open_channel()

    Pairs on the same *server* are connections to one broker (a publisher and a consumer);
    ``server.clock.now`` moves its time, ``server.broker`` is the model.
    """
    side = (memory_server() if server is None else server)()
    return ConnectionPair(client_config, byte_at_a_time=byte_at_a_time, server_side=side)


@final
class MemoryServerSide010:
    """The broker's end of one in-memory 0-10 connection
    (``amqp_sansio.v0_10.testing.ServerSide010``)."""

    __slots__ = ("core", "session")

    def __init__(self, broker: Broker, peer: str) -> None:
        #: The server-role 0-10 core the client's octets go to.
        self.core = Connection010(Role.SERVER, config_0_10(broker))
        self.session = Session010(broker, self.core, wake=_nothing, peer=peer)

    def __repr__(self) -> str:
        return f"<MemoryServerSide010 {self.session.peer}>"

    def handle(self, event: Event010) -> None:
        """Act on one event of :attr:`core`."""
        self.session.handle(event)

    def lost(self) -> None:
        """The link was cut: release what the connection held unaccepted, as the broker does
        when a socket closes."""
        self.session.end()

    def queue_counts(self, queue: str, vhost: str = "/") -> tuple[int, int]:
        """*queue*'s ready messages, and those this connection acquired and not accepted."""
        found = self.session.broker.vhosts[vhost].queues.get(queue)
        ready = 0 if found is None else found.message_count
        held = 0
        if not self.session.finished:
            for channel in self.session.channels.values():
                held += sum(
                    1 for d in channel.deliveries.values() if d.acquired and d.queue.name == queue
                )
        return ready, held


@final
class MemoryServer010:
    """A factory of :class:`MemoryServerSide010`\\ s sharing one :class:`Broker`."""

    __slots__ = ("_count", "broker", "clock")

    def __init__(self, *, options: BrokerOptions | None = None) -> None:
        self.clock = _ManualClock()
        self.broker = Broker(clock=self.clock, wall_clock=lambda: 1_700_000_000.0, options=options)
        self._count = 0

    def __call__(self) -> MemoryServerSide010:
        self._count += 1
        return MemoryServerSide010(self.broker, f"memory-0-10-{self._count}")


def memory_server_0_10(*, options: BrokerOptions | None = None) -> MemoryServer010:
    """A 0-10 server factory for ``amqp_sansio.v0_10.testing`` (``MemoryConnection010``,
    ``fault_sweep_0_10``) over a new in-memory broker."""
    return MemoryServer010(options=options)


def _nothing() -> None:
    pass
