"""The server role over Trio: :func:`serve` accepts TCP connections and hands each one, as a
:class:`ServerConnection`, to an application handler (the in-memory broker is one)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Final, NoReturn, TypeAlias, final

import trio

import amqp_sansio
from amqp_sansio import (
    NEED_DATA,
    ConnectionClosed,
    ConnectionLost,
    HeartbeatTimeout,
    RemoteProtocolError,
    Role,
)
from amqp_sansio.client import ConnectionLostError

from ._wire import Wire

if TYPE_CHECKING:
    from amqp_sansio import ConnectionConfig, Event

__all__ = ["ConnectionHandler", "ServerConnection", "serve", "serve_stream"]

logger: Final = logging.getLogger("amqp_trio")


@final
class ServerConnection:
    """One accepted connection in the server role.

    The application drives :attr:`core` (an :class:`amqp_sansio.Connection` with
    ``Role.SERVER``): it takes events from :meth:`next_event`, answers through the core's
    methods (``accept_authentication()``, ``send_method()``, ``send_content()``, ...) and then
    calls :meth:`flush` (or :meth:`schedule_flush`, which does not wait). A writer task
    flushes whenever it is woken and sends heartbeats at the core's deadlines.

    Methods of one connection must be called from one task at a time, except
    :meth:`schedule_flush`, which any task may call: a broker that puts a delivery into
    *another* connection's core calls that connection's ``schedule_flush()``.
    """

    def __init__(self, stream: trio.abc.Stream, config: ConnectionConfig | None = None) -> None:
        #: The sans-IO core in the server role.
        self.core: Final = amqp_sansio.Connection(Role.SERVER, config)
        #: The client's address as ``host:port`` (``"stream"`` for a non-socket stream).
        self.peer: Final = _peer_name(stream)
        self._wire = Wire(self.core, stream)
        self._ended = False
        # The core raised RemoteProtocolError: it takes no more bytes, its close is queued.
        self._failed = False

    def __repr__(self) -> str:
        return f"<amqp_trio.ServerConnection {self.peer} {self.core.state.value}>"

    async def next_event(self) -> Event:
        """The next event, reading the socket as needed.

        Answers the core queued by itself (``connection.start``, ``close-ok``, ``flow-ok``)
        are flushed before waiting for more bytes. At the end of the stream (or after two
        heartbeat intervals without a byte from the client, or a transport error) it returns
        :class:`~amqp_sansio.ConnectionLost`; after that, or after
        :class:`~amqp_sansio.ConnectionClosed`, calling it again raises ``RuntimeError``.

        :raises RemoteProtocolError: the client broke the protocol; the core already queued
            the ``connection.close``: call :meth:`aclose`, which writes it and gives the
            client the time to read it.
        """
        wire = self._wire
        while True:
            if self._ended:
                raise RuntimeError("the connection ended: no more events")
            try:
                event = wire.next_event()
            except RemoteProtocolError:
                self._failed = True
                raise
            if event is NEED_DATA:
                wire.schedule_flush()
                await wire.receive()
                continue
            kind = type(event)
            if kind is HeartbeatTimeout:
                logger.info("client %s missed two heartbeats: dropping it", self.peer)
                await wire.close_transport()
                wire.end_of_stream()
                continue
            if kind is ConnectionLost or kind is ConnectionClosed:
                self._ended = True
            return event

    def schedule_flush(self) -> None:
        """Wake this connection's writer task to write what its core has queued. Synchronous
        and non-blocking: safe to call from any task (e.g. another connection's handler)."""
        self._wire.schedule_flush()

    async def flush(self) -> None:
        """Write everything the core has queued.

        :raises ConnectionLostError: the transport failed.
        """
        await self._wire.flush()

    async def aclose(self) -> None:
        """Write what is queued (e.g. a close), then close the transport. Shielded from
        cancellation; calling it again does nothing.

        After :meth:`next_event` raised ``RemoteProtocolError``, the close answering it is
        written, then the client's input is read and discarded until its ``close-ok``, the
        end of the stream, or one second: closing a socket with unread input resets it, and
        the reset could destroy the close before the client read it.
        """
        with trio.CancelScope(shield=True):
            if not self._wire.broken:
                with suppress(ConnectionLostError):
                    await self._wire.flush()
                if self._failed:
                    await self._wire.linger()
            await self._wire.close_transport()


#: What :func:`serve` calls for each accepted connection.
ConnectionHandler: TypeAlias = Callable[[ServerConnection], Awaitable[None]]


def _peer_name(stream: trio.abc.Stream) -> str:
    if isinstance(stream, trio.SocketStream):
        try:
            address = stream.socket.getpeername()
        except OSError:
            return "unknown"
        if isinstance(address, tuple) and len(address) >= 2:
            host, port = str(address[0]), int(address[1])
            return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return str(address)
    return "stream"


async def serve_stream(
    handler: ConnectionHandler,
    stream: trio.abc.Stream,
    *,
    config: ConnectionConfig | None = None,
) -> None:
    """Run *handler* on one connection over *stream* (a socket, or a ``trio.testing``
    memory stream for tests), with its writer task; close it when the handler returns.

    An exception from the handler is logged and ends only this connection; cancellation
    propagates.
    """
    conn = ServerConnection(stream, config)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn._wire.run_writer)
        try:
            await handler(conn)
        except Exception:
            logger.exception("the handler for %s failed", conn.peer)
        finally:
            await conn.aclose()
            nursery.cancel_scope.cancel()


async def serve(
    handler: ConnectionHandler,
    host: str | None = "127.0.0.1",
    port: int = 5672,
    *,
    config: ConnectionConfig | None = None,
    task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Accept AMQP connections on *host*:*port* forever, like ``trio.serve_tcp``: each one
    runs ``await handler(ServerConnection)`` in its own task (see :func:`serve_stream`).

    ``port=0`` picks a free port; with ``await nursery.start(serve, handler, ...)`` the
    listeners come back from ``task_status.started(listeners)``, so
    ``listeners[0].socket.getsockname()[1]`` is the port.
    """
    listeners = await trio.open_tcp_listeners(port, host=host)
    await trio.serve_listeners(
        functools.partial(serve_stream, handler, config=config),
        listeners,
        task_status=task_status,
    )
    raise AssertionError("serve_listeners returned")
