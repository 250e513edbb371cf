"""The broker's AMQP 0-10 connections over Trio: :func:`handle_0_10` serves one stream (the
dispatcher of the shared port calls it once the protocol header says 0-10), and
:func:`serve_0_10` listens for 0-10 alone.

The broker's limits apply as to 0-9-1 clients: the handshake timeout, the channel limit
(``channel_max``) and the memory watermark (a 0-10 connection that publishes while the alarm is
on is not read until it clears).
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Final, NoReturn, Protocol

import trio

import amqp_trio
from amqp_sansio import ProtocolError
from amqp_sansio.v0_10 import (
    ConnectionClosed,
    ConnectionConfig,
    ConnectionLost,
    ConnectionOpened,
    HeartbeatTimeout,
    MessageReceived,
)

from ._session_0_10 import Session010
from ._store._committer import run_commits

if TYPE_CHECKING:
    from ._broker import Broker

__all__ = ["Registry", "config_0_10", "handle_0_10", "serve_0_10"]

logger: Final = logging.getLogger("amqp_broker")


class Registry(Protocol):
    """Where the listener keeps its open connections, for shutdown (``_server._Serving``)."""

    def add(self, session: Session010, conn: amqp_trio.ServerConnection010, /) -> None: ...

    def remove(self, session: Session010, /) -> None: ...


def config_0_10(broker: Broker) -> ConnectionConfig:
    """What the broker proposes to 0-10 clients."""
    return ConnectionConfig(
        channel_max=min(broker.options.channel_max, 0xFFFF),
        server_properties={"product": "amqp_broker", "platform": "Python"},
        max_unfinished_size=broker.options.unfinished_limit,
        heartbeat_min=0,
        heartbeat_max=600,
    )


async def handle_0_10(
    stream: trio.abc.Stream,
    broker: Broker,
    *,
    header_consumed: bool,
    initial: bytes = b"",
    handshake_timeout: float | None = None,
    peer: str = "",
    serving: Registry | None = None,
) -> None:
    """Serve one 0-10 client over *stream* until it leaves. *header_consumed*: the shared
    port's dispatcher read the protocol header; *initial* is what it read after it.
    *handshake_timeout* (default the broker's) bounds the time to ``open-ok``. *serving*: the
    listener's registry, through which :func:`shutdown` closes the connection with 320."""

    async def run(conn: amqp_trio.ServerConnection010) -> None:
        session = Session010(broker, conn.core, wake=conn.schedule_flush, peer=peer)
        memory = broker.memory
        cleared = trio.Event()

        def on_clear() -> None:
            cleared.set()

        memory.on_clear(on_clear)
        if serving is not None:
            serving.add(session, conn)
        timeout = (
            broker.options.handshake_timeout if handshake_timeout is None else handshake_timeout
        )
        try:
            opened = False
            while not session.finished:
                try:
                    if not opened and timeout is not None:
                        with trio.move_on_after(timeout) as scope:
                            event = await conn.next_event()
                        if scope.cancelled_caught:
                            logger.info("0-10 client %s: handshake timeout", peer)
                            return
                    else:
                        event = await conn.next_event()
                except ProtocolError as exc:
                    logger.info("0-10 client %s: %s", peer, exc)
                    return
                if type(event) is ConnectionOpened:
                    opened = True
                try:
                    session.handle(event)
                except Exception:
                    # a bug of ours must not take the listener down: this client goes
                    logger.exception("0-10 client %s: internal error", peer)
                    with contextlib.suppress(ProtocolError):
                        conn.core.close(541, "internal error")
                    return
                if type(event) is MessageReceived and memory.alarmed:
                    cleared = trio.Event()
                    await cleared.wait()  # blocked: the socket is not read meanwhile
                if type(event) in (ConnectionClosed, ConnectionLost, HeartbeatTimeout):
                    return
        finally:
            memory.forget(on_clear)
            session.end()
            if serving is not None:
                serving.remove(session)

    await amqp_trio.serve_stream_0_10(
        stream,
        run,
        config=config_0_10(broker),
        header_consumed=header_consumed,
        initial=initial,
        peer=peer,
    )


async def serve_0_10(
    broker: Broker,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Serve *broker* to 0-10 clients only on *host*:*port* until cancelled
    (``await nursery.start(serve_0_10, broker)`` returns the listeners)."""

    async def handler(stream: trio.SocketStream) -> None:
        try:
            name = stream.socket.getpeername()
            peer = f"{name[0]}:{name[1]}"
        except OSError:
            peer = "?"
        await handle_0_10(stream, broker, header_consumed=False, peer=peer)

    store = broker.store
    if store is None:
        await trio.serve_tcp(handler, port, host=host, task_status=task_status)
    else:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run_commits, store)
                await trio.serve_tcp(handler, port, host=host, task_status=task_status)
        finally:
            if store.pending:
                store.flush()
    raise AssertionError("the server stopped")
