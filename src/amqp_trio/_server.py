"""The server role over Trio: :func:`serve` accepts TCP (or TLS) connections and hands each
one, as a :class:`ServerConnection`, to an application handler (the in-memory broker is one).

The server side has I/O of its own, apart from the client's ``Wire``: a server must bound
what slow or hostile clients cost it. A connection that has not finished the AMQP handshake
within ``handshake_timeout`` is dropped without a word (as RabbitMQ does); the application can
stop reading a connection (flow control) while its writer goes on; the octets waiting to be
written, in the core and in flight, are known (:attr:`ServerConnection.outbound_size`), so an
application can stop producing for a client that does not read; and the listener can stop
accepting while ``max_connections`` are open.
"""

from __future__ import annotations

import errno
import functools
import logging
import math
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Final, NoReturn, TypeAlias, final

import trio

import amqp_sansio
from amqp_sansio import (
    NEED_DATA,
    ConnectionClosed,
    ConnectionCloseOk,
    ConnectionLost,
    ConnectionState,
    HeartbeatTimeout,
    LocalProtocolError,
    RemoteProtocolError,
    ReplyCode,
    Role,
)
from amqp_sansio.client import ConnectionLostError
from amqp_sansio.framing import encode_method_frame

from ._wire import plain_socket, send_buffers

if TYPE_CHECKING:
    import ssl

    from amqp_sansio import ConnectionConfig, Event, Sentinel

__all__ = [
    "ConnectionHandler",
    "ServerConnection",
    "read_protocol_header",
    "serve",
    "serve_stream",
    "serve_streams",
]

logger: Final = logging.getLogger("amqp_trio")

#: Octets asked of the transport per read.
RECEIVE_SIZE: Final = 256 * 1024

#: Seconds a connection keeps reading (and discarding) the client's input after its last
#: words, by default (:attr:`ServerConnection.linger`).
CLOSE_LINGER: Final = 1.0

#: Seconds :meth:`ServerConnection.aclose` tries to write what is queued before it closes the
#: transport anyway (a client that does not read would hold it forever).
CLOSE_FLUSH_TIMEOUT: Final = 1.0


_TRANSPORT_ERRORS: Final = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)

# accept() failures that mean "out of resources, try again soon" (as trio.serve_listeners).
_ACCEPT_CAPACITY_ERRNOS: Final = frozenset(
    (errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS)
)
_ACCEPT_RETRY: Final = 0.1


def _close_ok_frame() -> bytes:
    frame = bytearray()
    encode_method_frame(frame, 0, ConnectionCloseOk())
    return bytes(frame)


_CLOSE_OK_FRAME: Final = _close_ok_frame()


def _nothing() -> None:
    return None


@final
class ServerConnection:
    """One accepted connection in the server role.

    The application drives :attr:`core` (an :class:`amqp_sansio.Connection` with
    ``Role.SERVER``): it takes events from :meth:`next_event`, answers through the core's
    methods (``accept_authentication()``, ``send_method()``, ``send_content()``, ...) and then
    calls :meth:`flush` (or :meth:`schedule_flush`, which does not wait). A writer task
    flushes whenever it is woken and sends heartbeats at the core's deadlines.

    Methods of one connection must be called from one task at a time, except
    :meth:`schedule_flush`, :meth:`pause_reading` and :meth:`resume_reading`, which any task
    may call: a broker that puts a delivery into *another* connection's core calls that
    connection's ``schedule_flush()``.

    :param handshake_timeout: seconds from now until ``connection.open-ok`` must have been
        sent; a client that is slower is disconnected without a word. None: no limit.
    :param initial: octets already read from *stream* (the protocol header a dispatcher read to
        choose this server), given to the core first.
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        config: ConnectionConfig | None = None,
        *,
        handshake_timeout: float | None = None,
        initial: bytes = b"",
    ) -> None:
        #: The sans-IO core in the server role.
        self.core: Final = amqp_sansio.Connection(Role.SERVER, config)
        if initial:
            self.core.receive_data(initial)
        #: The client's address as ``host:port`` (``"stream"`` for a non-socket stream).
        self.peer: Final = _peer_name(stream)
        #: Called by the writer just before it takes the core's output (the application adds
        #: what it keeps for "when the socket is writable", such as coalesced confirms).
        self.before_write: Callable[[], None] = _nothing
        #: Called by the writer after each write (the application may produce again).
        self.after_write: Callable[[], None] = _nothing
        #: Seconds :meth:`aclose` keeps reading (and discarding) the client's input after the
        #: last words: the close answering an error, until the client's ``close-ok``; the
        #: ``close-ok`` answering the client's close, until the client closes its end.
        self.linger: float = CLOSE_LINGER
        self._stream = stream
        self._socket = plain_socket(stream)
        self._send_lock = trio.Lock()
        self._wake = trio.Event()
        self._handshake_deadline = (
            math.inf if handshake_timeout is None else trio.current_time() + handshake_timeout
        )
        self._opened = False
        # Octets taken from the core and being written now.
        self._in_flight = 0
        # Events the writer pulled from the core while the reader was parked in
        # receive_some (a heartbeat timeout); the reader takes them before asking the core.
        self._stash: deque[Event] = deque()
        self._reader_parked = False
        self._reading_paused = False
        self._resumed = trio.Event()
        self._resumed.set()
        self._eof = False
        self._ended = False
        # The core raised RemoteProtocolError: it takes no more bytes, its close is queued.
        self._failed = False
        # A close of ours waits for the client's close-ok (close_after_error).
        self._awaiting_close_ok = False
        # The client closed the connection and the core answered with close-ok.
        self._closed_by_client = False
        #: Set once the transport failed or was closed; writes stop.
        self.broken = False

    def __repr__(self) -> str:
        return f"<amqp_trio.ServerConnection {self.peer} {self.core.state.value}>"

    @property
    def outbound_size(self) -> int:
        """Octets of output not written yet: queued in the core, plus those being written."""
        return self.core.outbound_size + self._in_flight

    @property
    def unfinished_size(self) -> int:
        """Octets buffered in the core for bodies still arriving: the broker counts them
        against its memory watermark (the content header bounds each one)."""
        return self.core.unfinished_size

    # --- Reading ------------------------------------------------------------------------------

    async def next_event(self) -> Event:
        """The next event, reading the socket as needed.

        Answers the core queued by itself (``connection.start``, ``close-ok``, ``flow-ok``)
        are flushed before waiting for more bytes. At the end of the stream (or after two
        heartbeat intervals without a byte from the client, a handshake that took longer than
        ``handshake_timeout``, or a transport error) it returns
        :class:`~amqp_sansio.ConnectionLost`; after that, or after
        :class:`~amqp_sansio.ConnectionClosed`, calling it again raises ``RuntimeError``.
        While reading is paused (:meth:`pause_reading`) it waits before reading more bytes.

        :raises RemoteProtocolError: the client broke the protocol; the core already queued
            the ``connection.close``: call :meth:`aclose`, which writes it and gives the
            client the time to read it.
        """
        while True:
            if self._ended:
                raise RuntimeError("the connection ended: no more events")
            event: Event | Sentinel
            if self._stash:
                event = self._stash.popleft()
            else:
                try:
                    event = self.core.next_event()
                except RemoteProtocolError:
                    self._failed = True
                    raise
            if event is NEED_DATA:
                self.schedule_flush()
                await self._receive()
                continue
            kind = type(event)
            if kind is HeartbeatTimeout:
                logger.info("client %s missed two heartbeats: dropping it", self.peer)
                await self._close_transport()
                self._end_of_stream()
                continue
            if kind is ConnectionLost or kind is ConnectionClosed:
                self._ended = True
                if kind is ConnectionClosed:
                    assert isinstance(event, ConnectionClosed)
                    self._closed_by_client = event.by_peer
            return event

    async def _receive(self) -> None:
        """Read once and give the bytes to the core; a failed or closed transport, or the
        handshake deadline, is the end of the stream (``receive_data(b"")``)."""
        if self._eof:
            raise AssertionError("receive after the end of the stream")
        if not self._resumed.is_set():
            await self._resumed.wait()
        if not self._opened and self.core.state is ConnectionState.OPEN:
            self._opened = True
        deadline = math.inf if self._opened else self._handshake_deadline
        self._reader_parked = True
        data: bytes | bytearray = b""
        try:
            with trio.move_on_at(deadline) as scope:
                data = await self._stream.receive_some(RECEIVE_SIZE)
            if scope.cancelled_caught:
                logger.info(
                    "client %s did not finish the AMQP handshake in time: closing", self.peer
                )
                await self._close_transport()
        except _TRANSPORT_ERRORS as exc:
            logger.debug("read failed: %r", exc)
        finally:
            self._reader_parked = False
        if not data:
            self._end_of_stream()
            return
        # The read's time: a silent client is dead two intervals after its last octet.
        self.core.receive_data(data, trio.current_time())

    def _end_of_stream(self) -> None:
        if not self._eof:
            self._eof = True
            self.broken = True
            self._wake.set()  # the writer task ends
            self.core.receive_data(b"")

    def pause_reading(self) -> None:
        """Stop reading the client's bytes (flow control): :meth:`next_event` hands out what
        the core already has, then waits for :meth:`resume_reading`. Heartbeats from the
        client are not expected meanwhile. Any task may call it."""
        if not self._reading_paused:
            self._reading_paused = True
            self._resumed = trio.Event()

    def resume_reading(self) -> None:
        """Read the client's bytes again. Any task may call it."""
        if self._reading_paused:
            self._reading_paused = False
            self._resumed.set()

    @property
    def reading_paused(self) -> bool:
        """Whether :meth:`pause_reading` is in effect."""
        return self._reading_paused

    # --- Writing ------------------------------------------------------------------------------

    def schedule_flush(self) -> None:
        """Wake this connection's writer task to write what its core has queued. Synchronous
        and non-blocking: safe to call from any task (e.g. another connection's handler)."""
        self._wake.set()

    async def flush(self) -> None:
        """Write everything the core has queued.

        :raises ConnectionLostError: the transport failed.
        """
        lock = self._send_lock
        try:
            await trio.lowlevel.checkpoint_if_cancelled()
            try:
                lock.acquire_nowait()
            except trio.WouldBlock:
                await lock.acquire()
        except trio.Cancelled:
            self._wake.set()  # what was queued is still in the core
            raise
        try:
            await self._write_queued()
        finally:
            lock.release()

    async def _write_queued(self) -> None:
        if self.broken:
            raise ConnectionLostError("the connection's transport is closed")
        core = self.core
        wrote = False
        with trio.CancelScope(shield=True):
            while True:
                if not (self._failed or self._awaiting_close_ok):
                    self._run_hook(self.before_write)
                size = core.outbound_size
                buffers = core.buffers_to_send()
                if not buffers:
                    break
                self._in_flight = size
                try:
                    await send_buffers(self._stream, self._socket, buffers)
                except _TRANSPORT_ERRORS as exc:
                    logger.debug("write failed: %r", exc)
                    await self._close_transport()
                    raise ConnectionLostError(f"writing to the transport failed: {exc}") from exc
                finally:
                    self._in_flight = 0
                wrote = True
        if wrote and not self._awaiting_close_ok:
            self._run_hook(self.after_write)

    def _run_hook(self, hook: Callable[[], None]) -> None:
        try:
            hook()
        except Exception:
            # the application's bug: the client still gets a close, and the server goes on
            logger.exception("a write hook for %s failed: closing with 541", self.peer)
            self.close_after_error()

    async def run_writer(self) -> None:
        """The writer task: flush when woken, run the core's timers at their deadlines."""
        core = self.core
        while not self.broken:
            deadline = core.next_deadline()
            if not self._wake.is_set():
                with trio.move_on_at(math.inf if deadline is None else deadline):
                    await self._wake.wait()
            if self._wake.is_set():
                self._wake = trio.Event()
            now = trio.current_time()
            if deadline is not None and now >= deadline:
                core.handle_timer(now, reading=not self._reading_paused)
                if self._reader_parked:
                    await self._poll_parked_reader()
            try:
                await self.flush()
            except ConnectionLostError:
                return

    async def _poll_parked_reader(self) -> None:
        # The reader drained the core before parking, so anything next_event() returns now
        # was produced by handle_timer: a heartbeat timeout. Close the transport so the
        # parked receive_some returns and the reader handles it.
        event = self.core.next_event()
        if event is NEED_DATA:
            return
        self._stash.append(event)
        if type(event) is HeartbeatTimeout:
            await self._close_transport()

    # --- Closing ------------------------------------------------------------------------------

    def close_after_error(self, reply_text: str = "INTERNAL_ERROR") -> None:
        """The application failed serving this connection: queue ``connection.close`` 541
        INTERNAL_ERROR with *reply_text*, so that the client learns why rather than seeing its
        socket drop; :meth:`aclose` then writes it and waits for the client's ``close-ok``
        (:attr:`linger`). Does nothing when the core can no longer send a close (it is
        closing already, failed, or never got a protocol header)."""
        try:
            self.core.close(ReplyCode.INTERNAL_ERROR, reply_text)
        except LocalProtocolError:
            return
        self._awaiting_close_ok = True
        self.schedule_flush()

    async def aclose(self) -> None:
        """Write what is queued (e.g. a close), then close the transport. Shielded from
        cancellation; calling it again does nothing.

        The write is given :data:`CLOSE_FLUSH_TIMEOUT` seconds (a client that does not read
        could hold it forever). Then, for at most :attr:`linger` seconds, the client's input is
        read and discarded, because closing a socket with unread input resets it, and the reset
        could destroy our last words before the client read them: after a close of ours (the
        one answering a ``RemoteProtocolError`` from :meth:`next_event`, or
        :meth:`close_after_error`'s) until the client's ``close-ok``; after the ``close-ok``
        answering the client's close, until the client closes its end, as RabbitMQ does (a
        client may still write what it queued before its close).
        """
        with trio.CancelScope(shield=True):
            if not self.broken:
                with trio.move_on_after(CLOSE_FLUSH_TIMEOUT), suppress(ConnectionLostError):
                    await self.flush()
                if self._failed or self._awaiting_close_ok:
                    await self._linger(until_close_ok=True)
                elif self._closed_by_client:
                    await self._linger(until_close_ok=False)
            await self._close_transport()

    async def _linger(self, *, until_close_ok: bool) -> None:
        if self.broken or self._eof:
            return
        keep = len(_CLOSE_OK_FRAME) - 1
        tail = b""
        with trio.move_on_after(self.linger):
            while True:
                try:
                    data = await self._stream.receive_some(RECEIVE_SIZE)
                except _TRANSPORT_ERRORS:
                    return
                if not data:
                    return
                if not until_close_ok:
                    continue
                window = tail + bytes(data)
                if _CLOSE_OK_FRAME in window:
                    return
                tail = window[-keep:]

    async def _close_transport(self) -> None:
        """Close the transport at once (no graceful TLS close-notify)."""
        self.broken = True
        self._wake.set()
        self._resumed.set()
        await trio.aclose_forcefully(self._stream)


#: What :func:`serve` calls for each accepted connection.
ConnectionHandler: TypeAlias = Callable[[ServerConnection], Awaitable[None]]


def _peer_name(stream: trio.abc.Stream) -> str:
    if isinstance(stream, trio.SSLStream):
        stream = stream.transport_stream
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
    handshake_timeout: float | None = None,
    initial: bytes = b"",
) -> None:
    """Run *handler* on one connection over *stream* (a socket, a TLS stream, or a
    ``trio.testing`` memory stream for tests), with its writer task; close it when the
    handler returns. *initial* holds octets already read from *stream* (see
    :func:`read_protocol_header`).

    An exception from the handler is logged and ends only this connection, with
    ``connection.close`` 541 INTERNAL_ERROR when the core can still send one
    (:meth:`ServerConnection.close_after_error`); cancellation propagates.
    """
    conn = ServerConnection(stream, config, handshake_timeout=handshake_timeout, initial=initial)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run_writer)
        try:
            await handler(conn)
        except Exception:
            logger.exception("the handler for %s failed: closing with 541", conn.peer)
            conn.close_after_error()
        finally:
            await conn.aclose()
            nursery.cancel_scope.cancel()


async def serve(
    handler: ConnectionHandler,
    host: str | None = "127.0.0.1",
    port: int = 5672,
    *,
    config: ConnectionConfig | None = None,
    ssl_context: ssl.SSLContext | None = None,
    handshake_timeout: float | None = None,
    max_connections: int | trio.CapacityLimiter | None = None,
    task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Accept AMQP connections on *host*:*port* forever, like ``trio.serve_tcp``: each one
    runs ``await handler(ServerConnection)`` in its own task (see :func:`serve_stream`).

    ``port=0`` picks a free port; with ``await nursery.start(serve, handler, ...)`` the
    listeners come back from ``task_status.started(listeners)``, so
    ``listeners[0].socket.getsockname()[1]`` is the port.

    With *ssl_context* every connection speaks TLS (``amqps``). *handshake_timeout* bounds the
    time from accept (including the TLS handshake) to ``connection.open-ok``.
    *max_connections* (a number, or a ``trio.CapacityLimiter`` that several listeners share)
    bounds the open connections: at the limit, the listener stops accepting until one
    closes, as RabbitMQ's ``connection_max`` does.

    The core serves the versions of ``config.protocols`` and refuses other headers itself; a
    server that runs another core for some headers (0-10) reads the header first with
    :func:`read_protocol_header` under :func:`serve_streams`.
    """
    run = functools.partial(
        serve_stream, handler, config=config, handshake_timeout=handshake_timeout
    )
    await serve_streams(
        run,
        host,
        port,
        ssl_context=ssl_context,
        max_connections=max_connections,
        task_status=task_status,
    )


async def serve_streams(
    run: Callable[[trio.abc.Stream], Awaitable[None]],
    host: str | None = "127.0.0.1",
    port: int = 5672,
    *,
    ssl_context: ssl.SSLContext | None = None,
    max_connections: int | trio.CapacityLimiter | None = None,
    task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """The listener under :func:`serve`: each accepted stream (TLS-wrapped with
    *ssl_context*) runs ``await run(stream)`` in its own task, at most *max_connections* at
    once. *run* owns the stream and closes it."""
    limiter = (
        trio.CapacityLimiter(max_connections)
        if isinstance(max_connections, int)
        else max_connections
    )
    listeners = await trio.open_tcp_listeners(port, host=host)
    async with trio.open_nursery() as nursery:
        for listener in listeners:
            nursery.start_soon(_accept_loop, listener, nursery, run, ssl_context, limiter)
        task_status.started(listeners)
    raise AssertionError("the listeners stopped")


async def read_protocol_header(stream: trio.abc.Stream, timeout: float | None) -> bytes:
    """Read a client's first 8 octets (its protocol header) from *stream*, within *timeout*
    seconds (None: no limit): what a server serving several cores on one port decides by
    (:func:`amqp_sansio.choose_version`). Returns everything read, which may be more than 8
    octets (a client may send its next frames at once); fewer than 8 when the stream ended,
    failed or the time ran out.
    """
    data = bytearray()
    with trio.move_on_after(math.inf if timeout is None else timeout):
        while len(data) < 8:
            try:
                chunk = await stream.receive_some(RECEIVE_SIZE)
            except _TRANSPORT_ERRORS as exc:
                logger.debug("read failed: %r", exc)
                break
            if not chunk:
                break
            data += chunk
    return bytes(data)


async def _accept_loop(
    listener: trio.SocketListener,
    nursery: trio.Nursery,
    run: Callable[[trio.abc.Stream], Awaitable[None]],
    ssl_context: ssl.SSLContext | None,
    limiter: trio.CapacityLimiter | None,
) -> NoReturn:
    async with listener:
        while True:
            token = object()
            if limiter is not None:
                await limiter.acquire_on_behalf_of(token)
            try:
                stream: trio.abc.Stream = await listener.accept()
            except OSError as exc:
                if limiter is not None:
                    limiter.release_on_behalf_of(token)
                if exc.errno not in _ACCEPT_CAPACITY_ERRNOS:
                    raise
                logger.warning("accept failed (%s): retrying in %s s", exc, _ACCEPT_RETRY)
                await trio.sleep(_ACCEPT_RETRY)
                continue
            if ssl_context is not None:
                stream = trio.SSLStream(stream, ssl_context, server_side=True)
            nursery.start_soon(_run_one, run, stream, limiter, token)


async def _run_one(
    run: Callable[[trio.abc.Stream], Awaitable[None]],
    stream: trio.abc.Stream,
    limiter: trio.CapacityLimiter | None,
    token: object,
) -> None:
    try:
        await run(stream)
    finally:
        if limiter is not None:
            limiter.release_on_behalf_of(token)
