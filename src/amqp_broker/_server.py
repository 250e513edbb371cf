"""The transport glue: :func:`serve` runs the broker over ``amqp_trio.serve``; :func:`running`
and :func:`run_in_thread` start one on a free port for tests and demos."""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Final, NoReturn
from urllib.parse import quote

import trio

import amqp_trio
from amqp_sansio import RemoteProtocolError

from ._broker import Broker
from ._session import Session

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable, Iterator, Mapping

    from amqp_sansio import ConnectionConfig

__all__ = ["make_broker", "run_in_thread", "running", "serve"]

logger: Final = logging.getLogger("amqp_broker")

#: How long the broker waits for ``close-ok`` after sending ``connection.close``.
CLOSE_TIMEOUT: Final = 5.0

_DEFAULT_USERS: Final = {"guest": "guest"}


def make_broker(vhosts: Iterable[str] = ("/",)) -> Broker:
    """A :class:`Broker` on Trio's clock (for TTLs) and the wall clock (for ``x-death``)."""
    return Broker(vhosts=vhosts, clock=trio.current_time, wall_clock=time.time)


async def _handle(
    conn: amqp_trio.ServerConnection, broker: Broker, users: Mapping[str, str]
) -> None:
    session = Session(broker, conn.core, users=users, wake=conn.schedule_flush, peer=conn.peer)
    try:
        while not session.finished:
            try:
                if session.closing:
                    # no cancel scope per event on the hot path: only while awaiting close-ok
                    with trio.move_on_after(CLOSE_TIMEOUT) as scope:
                        event = await conn.next_event()
                    if scope.cancelled_caught:
                        logger.info("client %s did not answer connection.close", conn.peer)
                        return
                else:
                    event = await conn.next_event()
            except RemoteProtocolError as exc:
                session.protocol_error(exc)
                await _linger(conn)
                return
            session.handle(event)
    finally:
        session.end()


async def _linger(conn: amqp_trio.ServerConnection) -> None:
    """Write the close that answers a protocol error and close the socket once the client has
    read it: ``aclose()`` discards the client's input until its close-ok, the end of the
    stream or a second (closing with unread input resets the connection, and a reset can
    destroy the close before the client reads it)."""
    await conn.aclose()


async def _expire(broker: Broker) -> NoReturn:
    """Run the model's message-expiry timer."""
    changed = trio.Event()

    def wake() -> None:
        changed.set()

    broker.timer_changed = wake
    while True:
        deadline = broker.next_deadline()
        with trio.move_on_at(math.inf if deadline is None else deadline):
            await changed.wait()
        changed = trio.Event()
        broker.handle_timer()


async def serve(
    broker: Broker,
    host: str | None = "127.0.0.1",
    port: int = 5672,
    *,
    users: Mapping[str, str] | None = None,
    config: ConnectionConfig | None = None,
    task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Serve *broker* on *host*:*port* until cancelled.

    *users* maps usernames to passwords (default ``guest``/``guest``). ``port=0`` picks a free
    port; ``await nursery.start(serve, broker, host, 0)`` returns the listeners.
    """
    accounts = dict(_DEFAULT_USERS if users is None else users)

    async def handler(conn: amqp_trio.ServerConnection) -> None:
        await _handle(conn, broker, accounts)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_expire, broker)
        listeners = await nursery.start(
            functools.partial(amqp_trio.serve, handler, host, port, config=config)
        )
        task_status.started(listeners)
    raise AssertionError("the server stopped")


def _url(host: str, port: int, users: Mapping[str, str]) -> str:
    user, password = next(iter(users.items()))
    netloc = f"[{host}]" if ":" in host else host
    return f"amqp://{quote(user, safe='')}:{quote(password, safe='')}@{netloc}:{port}/"


@asynccontextmanager
async def running(
    *,
    users: Mapping[str, str] | None = None,
    vhosts: Iterable[str] = ("/",),
    host: str = "127.0.0.1",
) -> AsyncIterator[str]:
    """Run a broker on a free port for the duration of the block; yields its
    ``amqp://user:password@host:port/`` URL (the first user's credentials)."""
    accounts = dict(_DEFAULT_USERS if users is None else users)
    if not accounts:
        raise ValueError("running() needs at least one user")
    broker = make_broker(vhosts)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(serve, broker, host, 0, users=accounts))
        port = int(listeners[0].socket.getsockname()[1])
        try:
            yield _url(host, port, accounts)
        finally:
            nursery.cancel_scope.cancel()


@contextmanager
def run_in_thread(
    *,
    users: Mapping[str, str] | None = None,
    vhosts: Iterable[str] = ("/",),
    host: str = "127.0.0.1",
) -> Iterator[str]:
    """Like :func:`running`, for synchronous code: the broker runs in its own thread (with
    its own Trio loop) until the block ends; yields the URL."""
    ready: list[tuple[str, trio.lowlevel.TrioToken, trio.Event]] = []
    failure: list[BaseException] = []
    started = threading.Event()

    async def main() -> None:
        async with running(users=users, vhosts=vhosts, host=host) as url:
            stop = trio.Event()
            ready.append((url, trio.lowlevel.current_trio_token(), stop))
            started.set()
            await stop.wait()

    def thread_main() -> None:
        try:
            trio.run(main)
        except BaseException as exc:  # handed to the caller's thread
            failure.append(exc)
        finally:
            started.set()

    thread = threading.Thread(target=thread_main, name="amqp_broker", daemon=True)
    thread.start()
    started.wait()
    if not ready:
        raise RuntimeError("the broker failed to start") from (failure[0] if failure else None)
    url, trio_token, stop = ready[0]
    try:
        yield url
    finally:
        trio.from_thread.run_sync(stop.set, trio_token=trio_token)
        thread.join()
