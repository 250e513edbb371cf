"""The transport glue: :func:`serve` runs the broker over ``amqp_trio.serve`` (plain and TLS
listeners, the broker's timers, flow control, shutdown); :func:`running` and
:func:`run_in_thread` start one on a free port for tests and demos."""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
import weakref
from contextlib import asynccontextmanager, contextmanager, suppress
from typing import TYPE_CHECKING, Final, NoReturn, Protocol, Self, TypeAlias, TypeVar, final
from urllib.parse import quote

import attrs
import trio

import amqp_trio
from amqp_sansio import (
    ConnectionConfig,
    ProtocolVersion,
    RemoteProtocolError,
    choose_version,
    header_for,
)

from ._broker import Broker
from ._inspect import BrokerSnapshot, MessageSnapshot, peek, purge, take_snapshot
from ._management import ManagementApi, serve_management
from ._server_0_10 import handle_0_10
from ._session import Session
from ._store import DurableStore
from ._store._committer import run_commits, watch_disk
from ._versions import SERVED_VERSIONS

if TYPE_CHECKING:
    import ssl
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
    from pathlib import Path

    from ._options import BrokerOptions
    from ._permissions import User

__all__ = [
    "CLOSED_BY_REQUEST",
    "SERVED_VERSIONS",
    "BrokerThread",
    "close_connection",
    "inspect",
    "make_broker",
    "run_in_thread",
    "running",
    "serve",
    "serving_broker",
    "shutdown",
]

T = TypeVar("T")

logger: Final = logging.getLogger("amqp_broker")

#: How long the broker waits for ``close-ok`` after sending ``connection.close``, when the
#: broker's options do not say (:attr:`BrokerOptions.close_timeout`).
CLOSE_TIMEOUT: Final = 5.0


def make_broker(
    vhosts: Iterable[str] = ("/",),
    *,
    options: BrokerOptions | None = None,
    users: Mapping[str, str | User] | None = None,
    data_dir: str | Path | None = None,
) -> Broker:
    """A :class:`Broker` on Trio's clock (for TTLs) and the wall clock (for ``x-death``);
    with *data_dir*, durable definitions and persistent messages are kept in that directory
    and recovered from it now (:class:`DurableStore`; raises :class:`StoreError` when it
    cannot be used), otherwise everything is in memory."""
    return Broker(
        vhosts=vhosts,
        clock=trio.current_time,
        wall_clock=time.time,
        options=options,
        users=users,
        store=None if data_dir is None else DurableStore(data_dir),
    )


class _Closable(Protocol):
    """A connection's session as shutdown sees it (0-9 family or 0-10)."""

    def shutdown(self, reason: str = "shutdown") -> None: ...


class _Transport(Protocol):
    """A connection's transport as shutdown and the watermark see it."""

    @property
    def outbound_size(self) -> int: ...

    @property
    def unfinished_size(self) -> int: ...

    def resume_reading(self) -> None: ...


@final
class _Serving:
    """What :func:`serve` keeps about one broker: the open sessions, for shutdown."""

    def __init__(self) -> None:
        self.connections: dict[_Closable, _Transport] = {}
        self.stopping = False
        #: The management API's port, once it listens (None: not served).
        self.management_port: int | None = None
        #: The address it listens on (the broker's host).
        self.management_host = "127.0.0.1"
        self.idle = trio.Event()
        self.idle.set()

    def add(self, session: _Closable, conn: _Transport, /) -> None:
        self.connections[session] = conn
        self.idle = trio.Event() if self.idle.is_set() else self.idle

    def remove(self, session: _Closable, /) -> None:
        self.connections.pop(session, None)
        if not self.connections:
            self.idle.set()


_SERVING: Final[weakref.WeakKeyDictionary[Broker, _Serving]] = weakref.WeakKeyDictionary()


async def _handle(conn: amqp_trio.ServerConnection, broker: Broker, serving: _Serving) -> None:
    if serving.stopping:
        return  # accepted while shutting down: closed at once
    session = Session(
        broker,
        conn.core,
        wake=conn.schedule_flush,
        peer=conn.peer,
        transport=conn,
        coalesce_confirms=True,
    )
    conn.before_write = session.flush_confirms
    conn.after_write = session.drained
    # after close-ok the client's input is read until it closes its end, as RabbitMQ does:
    # unread input would reset the socket under the close-ok (amqplib writes publishes it
    # queued before its close)
    conn.linger = broker.options.close_timeout
    serving.add(session, conn)
    close_timeout = broker.options.close_timeout
    try:
        while not session.finished:
            try:
                if session.closing:
                    # no cancel scope per event on the hot path: only while awaiting close-ok
                    with trio.move_on_after(close_timeout) as scope:
                        event = await conn.next_event()
                    if scope.cancelled_caught:
                        logger.info("client %s did not answer connection.close", conn.peer)
                        return
                else:
                    event = await conn.next_event()
            except RemoteProtocolError as exc:
                session.protocol_error(exc)
                await conn.aclose()
                return
            try:
                session.handle(event)
            except Exception:
                # a bug, not the client's doing: it still gets a close, never a dropped socket
                session.internal_error(event)
    finally:
        session.end()
        serving.remove(session)


# --- the protocol-header dispatch ------------------------------------------------------------


@final
@attrs.frozen
class _Listening:
    """What a connection's runner needs, whatever version its client speaks."""

    broker: Broker
    serving: _Serving
    #: The 0-9 family's core config (the versions are set per connection).
    config: ConnectionConfig


#: Runs one connection whose header asked for a version: (stream, the octets read so far,
#: the version, seconds left of the handshake, the broker's listening state).
_Runner: TypeAlias = (
    "Callable[[trio.abc.Stream, bytes, ProtocolVersion, float | None, _Listening], Awaitable[None]]"
)


async def _run_0_9_family(
    stream: trio.abc.Stream,
    first: bytes,
    version: ProtocolVersion,
    handshake_timeout: float | None,
    listening: _Listening,
) -> None:
    """0-9-1, 0-9 and 0-8: one core, bound to the version chosen from the header."""

    async def handler(conn: amqp_trio.ServerConnection) -> None:
        await _handle(conn, listening.broker, listening.serving)

    config = attrs.evolve(listening.config, protocols=(version.value,))
    await amqp_trio.serve_stream(
        handler, stream, config=config, handshake_timeout=handshake_timeout, initial=first
    )


async def _run_0_10(
    stream: trio.abc.Stream,
    first: bytes,
    version: ProtocolVersion,
    handshake_timeout: float | None,
    listening: _Listening,
) -> None:
    """0-10: its own core and session (``_server_0_10``) over the same model."""
    await handle_0_10(
        stream,
        listening.broker,
        header_consumed=True,
        initial=first[8:],
        handshake_timeout=handshake_timeout,
        serving=listening.serving,
    )


#: Which server runs a connection, by the version its protocol header asks for: one entry per
#: version of SERVED_VERSIONS; BrokerOptions.protocols chooses among them.
_RUNNERS: Final[dict[ProtocolVersion, _Runner]] = {
    ProtocolVersion.AMQP_0_9_1: _run_0_9_family,
    ProtocolVersion.AMQP_0_9: _run_0_9_family,
    ProtocolVersion.AMQP_0_8: _run_0_9_family,
    ProtocolVersion.AMQP_0_10: _run_0_10,
}
if set(_RUNNERS) != set(SERVED_VERSIONS):  # pragma: no cover - a broken edit of the two
    raise ImportError("amqp_broker: a served version has no runner, or a runner no version")


async def _dispatch(stream: trio.abc.Stream, listening: _Listening) -> None:
    """Read the client's protocol header, then run the server of the version it asks for; a
    header asking for something not served gets the preferred version's header, then the
    connection is closed (the spec's protocol header rule)."""
    options = listening.broker.options
    if listening.serving.stopping:
        await trio.aclose_forcefully(stream)  # accepted while shutting down
        return
    timeout = options.handshake_timeout
    started = trio.current_time()
    first = await amqp_trio.read_protocol_header(stream, timeout)
    version = None
    if len(first) >= 8:
        version = choose_version(first[:8], options.protocols, header_0_9=options.header_0_9)
        if version is None:
            logger.info("refused protocol header %r", first[:8])
            with trio.move_on_after(1.0):
                with suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    await stream.send_all(header_for(options.protocols[0]))
    if version is None:
        await trio.aclose_forcefully(stream)
        return
    left = None if timeout is None else max(0.0, timeout - (trio.current_time() - started))
    await _RUNNERS[version](stream, first, version, left, listening)


async def _expire(broker: Broker) -> NoReturn:
    """Run the model's timer: message and queue expiry, consumer timeouts."""
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


async def _sample_outbound(broker: Broker, serving: _Serving) -> NoReturn:
    """Tell the memory monitor how much the connections' buffers hold: output waiting to be
    written, and bodies still arriving (a 0-10 body may never end)."""
    interval = broker.options.memory_check_interval
    while True:
        await trio.sleep(interval)
        broker.memory.sample_outbound(
            sum(c.outbound_size + c.unfinished_size for c in serving.connections.values())
        )


async def serve(
    broker: Broker,
    host: str | None = "127.0.0.1",
    port: int | None = 5672,
    *,
    users: Mapping[str, str | User] | None = None,
    config: ConnectionConfig | None = None,
    ssl_context: ssl.SSLContext | None = None,
    tls_port: int | None = None,
    management_port: int | None = None,
    task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Serve *broker* on *host*:*port* (plain AMQP) and, with *ssl_context*, on *tls_port*
    (AMQP over TLS, ``amqps``), until cancelled.

    *users* maps usernames to passwords (or :class:`User`) and is added to the broker's
    users. ``port=0`` picks a free port; ``port=None`` serves TLS only. With
    *management_port* (0: a free one) the management HTTP API and ``/metrics`` are served
    on *host* too (:func:`management_url` tells where).
    ``await nursery.start(serve, broker, host, 0)`` returns the listeners (plain ones first).
    Limits, timeouts and flow control come from ``broker.options``; call :func:`shutdown`
    before cancelling to close every connection as RabbitMQ does when it stops.
    """
    if users is not None:
        for name, user in users.items():
            broker.users.add(name, user)
    options = broker.options
    base = ConnectionConfig() if config is None else config
    config = attrs.evolve(
        base,
        channel_max=base.channel_max or options.channel_max,
        heartbeat=options.heartbeat if base.heartbeat is None else base.heartbeat,
        server_properties={**options.server_properties, **(base.server_properties or {})},
    )
    serving = _SERVING[broker] = _Serving()
    limiter = (
        None if options.max_connections is None else trio.CapacityLimiter(options.max_connections)
    )
    listening = _Listening(broker, serving, config)

    async def run(stream: trio.abc.Stream) -> None:
        await _dispatch(stream, listening)

    listen = functools.partial(amqp_trio.serve_streams, run, host, max_connections=limiter)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_expire, broker)
            nursery.start_soon(_sample_outbound, broker, serving)
            if broker.store is not None:
                nursery.start_soon(run_commits, broker.store)
                if options.disk_free_limit is not None:
                    nursery.start_soon(
                        watch_disk,
                        broker.store,
                        broker.memory,
                        options.disk_free_limit,
                        options.memory_check_interval,
                    )
            listeners: list[trio.SocketListener] = []
            if port is not None:
                listeners += await nursery.start(functools.partial(listen, port))
            if ssl_context is not None:
                listeners += await nursery.start(
                    functools.partial(listen, tls_port or 0, ssl_context=ssl_context)
                )
            if not listeners:
                raise ValueError("serve() needs a port, or an ssl_context for a TLS port")
            if management_port is not None:
                api = ManagementApi(
                    broker,
                    lambda: [s for s in serving.connections if isinstance(s, Session)],
                    functools.partial(_close_session, serving),
                )
                http = await nursery.start(
                    functools.partial(serve_management, api, host, management_port)
                )
                address = http[0].socket.getsockname()
                serving.management_host = str(address[0])
                serving.management_port = int(address[1])
                api.listening = (serving.management_host, serving.management_port)
            task_status.started(listeners)
    finally:
        if _SERVING.get(broker) is serving:
            del _SERVING[broker]
        if broker.store is not None and broker.store.pending:
            broker.store.flush()  # what the model changed last (acks, deletes) is kept too
    raise AssertionError("the server stopped")


async def shutdown(broker: Broker, reason: str = "shutdown") -> None:
    """Close every client connection of *broker* as RabbitMQ does when it stops:
    ``connection.close`` 320 CONNECTION_FORCED "broker forced connection closure with reason
    'shutdown'", then wait for their ``close-ok`` at most ``options.close_timeout`` seconds.
    Connections accepted afterwards are closed at once. Then cancel :func:`serve`."""
    serving = _SERVING.get(broker)
    if serving is None:
        return
    serving.stopping = True
    for session, conn in list(serving.connections.items()):
        session.shutdown(reason)
        conn.resume_reading()  # a blocked connection must read its close-ok
    with trio.move_on_after(broker.options.close_timeout):
        await serving.idle.wait()
    if serving.connections:
        logger.info(
            "%d client(s) did not answer connection.close in time", len(serving.connections)
        )


#: What :func:`close_connection` says by default (RabbitMQ's management plugin's text).
CLOSED_BY_REQUEST: Final = "CONNECTION_FORCED - Closed via management plugin"


def close_connection(
    broker: Broker, name: str, *, reply_code: int = 320, reply_text: str = CLOSED_BY_REQUEST
) -> int:
    """Close the client connections named *name* (the ``connection_name`` of their client
    properties), as ``rabbitmqctl close_connection`` does: ``connection.close`` with
    *reply_code* and *reply_text*, their unacknowledged messages requeued at once. Returns
    how many it closed (0-8, 0-9 and 0-9-1 connections). Call it on the broker's thread
    (:meth:`BrokerThread.close_connection`)."""
    serving = _SERVING.get(broker)
    if serving is None:
        return 0
    closed = 0
    for session, conn in list(serving.connections.items()):
        if isinstance(session, Session) and session.connection_name == name:
            session.close(reply_code, reply_text)
            conn.resume_reading()  # a blocked connection must read its close-ok
            closed += 1
    return closed


def _close_session(serving: _Serving, session: Session, reply_text: str) -> None:
    conn = serving.connections.get(session)
    session.close(320, reply_text)
    if conn is not None:
        conn.resume_reading()  # a blocked connection must read its close-ok


def management_url(broker: Broker) -> str | None:
    """``http://HOST:PORT/`` of *broker*'s management API (the address it listens on), or
    None when :func:`serve` serves none. Call it on the broker's thread."""
    serving = _SERVING.get(broker)
    if serving is None or serving.management_port is None:
        return None
    host = serving.management_host
    if host in ("0.0.0.0", "::"):  # every address: loopback among them
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{serving.management_port}/"


def _url(scheme: str, host: str, port: int, users: Iterable[tuple[str, str]]) -> str:
    user, password = next(iter(users))
    netloc = f"[{host}]" if ":" in host else host
    return f"{scheme}://{quote(user, safe='')}:{quote(password, safe='')}@{netloc}:{port}/"


def _accounts(users: Mapping[str, str | User] | None) -> dict[str, str | User]:
    accounts: dict[str, str | User] = dict({"guest": "guest"} if users is None else users)
    if not accounts:
        raise ValueError("running() needs at least one user")
    return accounts


@asynccontextmanager
async def running(
    *,
    users: Mapping[str, str | User] | None = None,
    vhosts: Iterable[str] = ("/",),
    host: str = "127.0.0.1",
    options: BrokerOptions | None = None,
    ssl_context: ssl.SSLContext | None = None,
    data_dir: str | Path | None = None,
) -> AsyncIterator[str]:
    """Run a broker on a free port for the duration of the block; yields its
    ``amqp://user:password@host:port/`` URL (the first user's credentials), or with
    *ssl_context* an ``amqps://`` URL of a TLS listener. Leaving the block closes every
    connection with 320 CONNECTION_FORCED (see :func:`shutdown`). With *data_dir* the broker
    keeps durable definitions and persistent messages there (:doc:`/durability`)."""
    async with serving_broker(
        users=users,
        vhosts=vhosts,
        host=host,
        options=options,
        ssl_context=ssl_context,
        data_dir=data_dir,
    ) as (_, url):
        yield url


@asynccontextmanager
async def serving_broker(
    *,
    users: Mapping[str, str | User] | None = None,
    vhosts: Iterable[str] = ("/",),
    host: str = "127.0.0.1",
    options: BrokerOptions | None = None,
    ssl_context: ssl.SSLContext | None = None,
    management: bool = False,
    data_dir: str | Path | None = None,
) -> AsyncIterator[tuple[Broker, str]]:
    """:func:`running`, yielding the :class:`Broker` with the URL (to inspect it with
    :func:`inspect`, or change it while it serves). *management* serves the management API
    on a free port too (:func:`management_url`)."""
    accounts = _accounts(users)
    broker = make_broker(vhosts, options=options, users=accounts, data_dir=data_dir)
    try:
        async with _serving(broker, host, ssl_context, management, accounts) as url:
            yield broker, url
    finally:
        if broker.store is not None:
            broker.store.close()


@asynccontextmanager
async def _serving(
    broker: Broker,
    host: str,
    ssl_context: ssl.SSLContext | None,
    management: bool,
    accounts: dict[str, str | User],
) -> AsyncIterator[str]:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(
                serve,
                broker,
                host,
                None if ssl_context is not None else 0,
                ssl_context=ssl_context,
                tls_port=0,
                management_port=0 if management else None,
            )
        )
        port = int(listeners[0].socket.getsockname()[1])
        first = next(iter(accounts.items()))
        password = first[1] if isinstance(first[1], str) else first[1].password
        scheme = "amqp" if ssl_context is None else "amqps"
        try:
            yield _url(scheme, host, port, [(first[0], password)])
        finally:
            with trio.CancelScope(shield=True):
                await shutdown(broker)
            nursery.cancel_scope.cancel()


def inspect(broker: Broker) -> BrokerSnapshot:
    """What *broker* holds now: its queues, exchanges and bindings, and the connections
    :func:`serve` has open. Call it where the broker runs (its Trio run; from another thread
    use :meth:`BrokerThread.snapshot`)."""
    serving = _SERVING.get(broker)
    # the 0-9 family's connections (0-10 connections are not in snapshots yet)
    sessions = [] if serving is None else [s for s in serving.connections if isinstance(s, Session)]
    return take_snapshot(broker, sessions)


@contextmanager
def run_in_thread(
    *,
    users: Mapping[str, str | User] | None = None,
    vhosts: Iterable[str] = ("/",),
    host: str = "127.0.0.1",
    options: BrokerOptions | None = None,
    ssl_context: ssl.SSLContext | None = None,
    data_dir: str | Path | None = None,
) -> Iterator[str]:
    """Like :func:`running`, for synchronous code: the broker runs in its own thread (with
    its own Trio loop) until the block ends; yields the URL. :class:`BrokerThread` gives the
    broker too."""
    with BrokerThread(
        users=users,
        vhosts=vhosts,
        host=host,
        options=options,
        ssl_context=ssl_context,
        data_dir=data_dir,
    ) as thread:
        yield thread.url


@final
class BrokerThread:
    """A broker serving on a free port in a thread of its own (with its own Trio run), for
    synchronous code and for tests whatever their event loop: ``with BrokerThread() as b:``
    starts it (or :meth:`start`), leaving the block stops it as :func:`running` does.

    The model belongs to the broker's thread: read it with :meth:`snapshot`, change it with
    :meth:`call`. With *data_dir* it keeps durable definitions and persistent messages there,
    as ``--data-dir`` does; the store is closed when the thread stops.
    """

    def __init__(
        self,
        *,
        users: Mapping[str, str | User] | None = None,
        vhosts: Iterable[str] = ("/",),
        host: str = "127.0.0.1",
        options: BrokerOptions | None = None,
        ssl_context: ssl.SSLContext | None = None,
        management: bool = False,
        data_dir: str | Path | None = None,
    ) -> None:
        self._settings = (users, tuple(vhosts), host, options, ssl_context)
        self._management = management
        self._data_dir = data_dir
        self._ready: list[tuple[Broker, str, trio.lowlevel.TrioToken, trio.Event]] = []
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``amqp://user:password@127.0.0.1:PORT/`` (the first user's credentials)."""
        return self._started()[1]

    @property
    def management_url(self) -> str:
        """``http://127.0.0.1:PORT/`` of the management API (``management=True``).

        :raises RuntimeError: not started, or started without the management API.
        """
        url = self.call(management_url)
        if url is None:
            raise RuntimeError("the broker thread serves no management API: management=True")
        return url

    @property
    def broker(self) -> Broker:
        """The model; touch it only through :meth:`call`."""
        return self._started()[0]

    def _started(self) -> tuple[Broker, str, trio.lowlevel.TrioToken, trio.Event]:
        if not self._ready:
            raise RuntimeError("the broker thread is not running: call start() first")
        return self._ready[0]

    def start(self) -> str:
        """Start serving; returns the URL.

        :raises RuntimeError: already started, or the broker failed to start (the cause
            chained).
        """
        if self._thread is not None:
            raise RuntimeError("the broker thread was started already")
        users, vhosts, host, options, ssl_context = self._settings
        failure: list[BaseException] = []
        started = threading.Event()

        async def main() -> None:
            async with serving_broker(
                users=users,
                vhosts=vhosts,
                host=host,
                options=options,
                ssl_context=ssl_context,
                management=self._management,
                data_dir=self._data_dir,
            ) as (broker, url):
                stop = trio.Event()
                self._ready.append((broker, url, trio.lowlevel.current_trio_token(), stop))
                started.set()
                await stop.wait()

        def thread_main() -> None:
            try:
                trio.run(main)
            except BaseException as exc:  # handed to the caller's thread
                failure.append(exc)
            finally:
                started.set()

        self._thread = threading.Thread(target=thread_main, name="amqp_broker", daemon=True)
        self._thread.start()
        started.wait()
        if not self._ready:
            self._thread.join()
            raise RuntimeError("the broker failed to start") from (failure[0] if failure else None)
        return self._ready[0][1]

    def stop(self) -> None:
        """Close every connection (320 CONNECTION_FORCED) and end the thread; idempotent."""
        thread, self._thread = self._thread, None
        if thread is None or not self._ready:
            return
        _, _, token, stop = self._ready.pop()
        trio.from_thread.run_sync(stop.set, trio_token=token)
        thread.join()

    def call(self, function: Callable[[Broker], T]) -> T:
        """``function(broker)`` run on the broker's thread; its result or exception. Blocks the
        calling thread until then, whatever runs there (a Trio or asyncio test too)."""
        broker, _, token, _ = self._started()
        if threading.current_thread() is self._thread:
            return function(broker)
        done = threading.Event()
        outcome: list[tuple[bool, object]] = []

        def run() -> None:
            try:
                outcome.append((True, function(broker)))
            except BaseException as exc:  # handed to the calling thread
                outcome.append((False, exc))
            finally:
                done.set()

        # Not trio.from_thread.run_sync: it refuses callers inside a Trio run of their own.
        token.run_sync_soon(run)
        done.wait()
        ok, value = outcome[0]
        if not ok:
            assert isinstance(value, BaseException)
            raise value
        return value  # type: ignore[return-value]  # function's own result

    def close_connection(
        self, name: str, *, reply_code: int = 320, reply_text: str = CLOSED_BY_REQUEST
    ) -> int:
        """Close the connections named *name* with *reply_code* and *reply_text*
        (:func:`close_connection`); returns how many."""
        return self.call(
            lambda b: close_connection(b, name, reply_code=reply_code, reply_text=reply_text)
        )

    def peek(self, queue: str, vhost: str = "/") -> tuple[MessageSnapshot, ...]:
        """The messages ready in *queue*, none taken (:func:`peek`)."""
        return self.call(lambda b: peek(b, queue, vhost))

    def purge(self, queue: str, vhost: str = "/") -> int:
        """Drop the messages ready in *queue*; returns how many (:func:`purge`)."""
        return self.call(lambda b: purge(b, queue, vhost))

    def snapshot(self) -> BrokerSnapshot:
        """The broker's queues, exchanges, bindings and connections now (:func:`inspect`)."""
        return self.call(inspect)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
