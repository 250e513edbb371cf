"""AMQP 0-10 for synchronous code: :func:`connect_0_10`, :class:`Connection010`,
:class:`Session010` and :class:`Subscription010`, thin over :mod:`amqp_sansio.v0_10.client`.

An I/O thread reads the socket, feeds the core, routes its events and runs the heartbeat timer;
calls queue their command and write it under the connection's lock, then wait on its condition
(notified whenever an event was routed). Sessions and subscriptions may be used from several
threads.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
import uuid
from typing import TYPE_CHECKING, Final, final

from amqp_sansio.client import (
    DEFAULT_URL,
    ConnectionLostError,
    ConnectionParameters,
    ConnectionTimeoutError,
    connection_parameters,
)
from amqp_sansio.v0_10.client import (
    DEFAULT_PREFETCH,
    ClientCore,
    ClientSession,
    FlowModeName,
    Message,
    Pending,
    Properties,
    SubscriptionCore,
)

from ._generated_session import SessionMethods

if TYPE_CHECKING:
    import ssl
    from collections.abc import Callable, Iterator
    from types import TracebackType

    from amqp_sansio.v0_10 import Command, Map, Struct

__all__ = ["Connection010", "Session010", "Subscription010", "connect_0_10"]

_NO_PROPERTIES: Final = Properties()
_READ: Final = 65536


@final
class Connection010:
    """An AMQP 0-10 connection (from :func:`connect_0_10`; a context manager that closes
    it): open sessions with :meth:`session`."""

    def __init__(self, params: ConnectionParameters, sock: socket.socket) -> None:
        self.params: Final = params
        self._sock = sock
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._core = ClientCore(params, wake=self._flush_locked, guard=self._lock)
        self._thread = threading.Thread(target=self._run, name="amqp_blocking 0-10", daemon=True)

    def __repr__(self) -> str:
        return f"<amqp_blocking.Connection010 {self.params.address} closed={self.is_closed}>"

    def __enter__(self) -> Connection010:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def is_closed(self) -> bool:
        return self._core.error is not None

    @property
    def heartbeat(self) -> int:
        """The negotiated heartbeat interval (0: none)."""
        return self._core.conn.heartbeat

    @property
    def max_frame_size(self) -> int:
        return self._core.conn.max_frame_size

    @property
    def server_properties(self) -> Map:
        info = self._core.open_info
        return {} if info is None else dict(info.server_properties)

    # --- I/O ----------------------------------------------------------------------------------

    def _flush_locked(self) -> None:
        self._core.flush_settlements()
        data = self._core.conn.data_to_send()
        if data:
            try:
                self._sock.sendall(data)
            except OSError:
                self._core.receive_data(b"")
                self._core.process()

    def _run(self) -> None:
        core = self._core
        conn = core.conn
        while True:
            with self._lock:
                if core.closed.done:
                    return
                deadline = conn.next_deadline()
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                readable, _, _ = select.select([self._sock], [], [], timeout)
                data = self._sock.recv(_READ) if readable else None
            except OSError:
                data = b""
            with self._lock:
                if data is None:
                    conn.handle_timer(time.monotonic())
                else:
                    core.receive_data(data)
                core.process()
                self._flush_locked()
                if data == b"":
                    core.closed.finish()
                self._cond.notify_all()
                if data == b"" or core.closed.done:
                    if core.error is not None:
                        # over (closed by either side, or lost): the socket is done too
                        with contextlib.suppress(OSError):
                            self._sock.close()
                    return

    def _start(self) -> None:
        with self._lock:
            self._flush_locked()  # the protocol header
        self._thread.start()

    def _wait(self, pending: Pending, timeout: float | None = None) -> Struct | None:
        """Write what the call queued, then wait for *pending* (the lock is held)."""
        self._flush_locked()
        if not self._cond.wait_for(lambda: pending.done, timeout):
            raise ConnectionTimeoutError(f"no answer within {timeout} s")
        return pending.outcome()

    # --- API ----------------------------------------------------------------------------------

    def open_session(self, name: str | None = None) -> Session010:
        """Attach a session (named *name*, default a random one)."""
        with self._lock:
            core = self._core.attach(name or f"amqp_blocking.{uuid.uuid4()}")
            core.attached = Pending()
            self._wait(core.attached)
            return Session010(self, core)

    @contextlib.contextmanager
    def session(self, name: str | None = None) -> Iterator[Session010]:
        """A session for the duration of a ``with`` block (closed at its end)."""
        session = self.open_session(name)
        try:
            yield session
        finally:
            session.close()

    def close(self) -> None:
        """Close the connection (``connection.close``) and wait for ``close-ok``."""
        with self._lock:
            core = self._core
            if core.error is None:
                core.closed = Pending()
                core.close()
                with contextlib.suppress(ConnectionTimeoutError):
                    self._wait(core.closed, self.params.connection_timeout)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(self.params.connection_timeout)
        with contextlib.suppress(OSError):
            self._sock.close()


@final
class Session010(SessionMethods):
    """An attached 0-10 session: declare, bind, query and delete (results are return values;
    an ``execution.exception`` raises its typed :class:`~amqp_sansio.v0_10.client.ExecutionError`
    and ends the session), transfer, subscribe, transactions, :meth:`sync` and :meth:`close`."""

    def __init__(self, conn: Connection010, core: ClientSession) -> None:
        self._conn = conn
        self._core = core

    def __repr__(self) -> str:
        return f"<amqp_blocking.Session010 {self.name!r}>"

    @property
    def name(self) -> bytes:
        return self._core.name

    @property
    def connection(self) -> Connection010:
        return self._conn

    def _call(self, send: Callable[[Pending], object]) -> Struct | None:
        with self._conn._lock:
            pending = Pending()
            send(pending)
            return self._conn._wait(pending)

    def execute(
        self,
        command: Command,
        *,
        headers: tuple[Struct, ...] | None = None,
        body: bytes | None = None,
    ) -> Struct | None:
        """Send any command with the sync bit; return its result (None without one)."""
        return self._call(lambda p: self._core.execute(command, p, headers=headers, body=body))

    def sync(self) -> None:
        """``execution.sync``: returns once every earlier command is complete."""
        self._call(self._core.sync)

    def transfer(
        self,
        destination: str,
        body: bytes,
        *,
        routing_key: str = "",
        properties: Properties = _NO_PROPERTIES,
        sync: bool = True,
    ) -> None:
        """``message.transfer`` to exchange *destination* (``""``: the default exchange).

        With *sync* (the default) it returns once the broker completed it (it was routed and
        enqueued: 0-10's publisher confirm); else it returns once written.
        """
        headers = properties.header_segment(routing_key, len(body))
        if not sync:
            with self._conn._lock:
                self._core.transfer(destination, body, headers, None)
                self._conn._flush_locked()
            return
        self._call(lambda p: self._core.transfer(destination, body, headers, p))

    def subscribe(
        self,
        queue: str,
        *,
        destination: str | None = None,
        accept: bool = True,
        acquire: bool = True,
        exclusive: bool = False,
        arguments: Map | None = None,
        prefetch: int = DEFAULT_PREFETCH,
        flow_mode: FlowModeName = "credit",
    ) -> Subscription010:
        """``message.subscribe`` to *queue* with *prefetch* messages of credit (granted back
        as they are taken); iterate the returned :class:`Subscription010`. *accept* False:
        accept mode none (no settling); *acquire* False: browse (acquire mode not-acquired)."""
        subs: list[SubscriptionCore] = []

        def send(pending: Pending) -> None:
            subs.append(
                self._core.subscribe(
                    queue,
                    destination or f"amqp_blocking.{uuid.uuid4().hex[:12]}",
                    pending,
                    accept=accept,
                    acquire=acquire,
                    exclusive=exclusive,
                    arguments=arguments,
                    prefetch=prefetch,
                    flow_mode=flow_mode,
                )
            )

        self._call(send)
        return Subscription010(self, subs[0])

    def close(self) -> None:
        """Detach the session (after syncing, when it is usable)."""
        conn = self._conn
        with conn._lock:
            core = self._core
            if core.error is None and conn._core.error is None:
                with contextlib.suppress(Exception):
                    self.sync()
            core.detached = Pending()
            conn._core.detach(core)
            with contextlib.suppress(Exception):
                conn._wait(core.detached, conn.params.connection_timeout)


@final
class Subscription010:
    """A subscription's messages: ``for message in subscription`` (ends after
    :meth:`cancel`; raises why the session ended), or :meth:`get`."""

    def __init__(self, session: Session010, core: SubscriptionCore) -> None:
        self._session = session
        self._core = core

    @property
    def destination(self) -> str:
        return self._core.destination

    @property
    def queue(self) -> str:
        return self._core.queue

    def get(self, timeout: float | None = None) -> Message | None:
        """The next message; None once the subscription was cancelled.

        :raises TimeoutError: none arrived within *timeout* seconds.
        """
        core = self._core
        conn = self._session._conn
        with conn._lock:
            ready = conn._cond.wait_for(
                lambda: bool(core.buffer) or core.finished or conn._core.error is not None,
                timeout,
            )
            message = core.take()
            if message is not None:
                conn._flush_locked()
                return message
            if core.error is not None:
                raise core.error
            if core.cancelled:
                return None
            if conn._core.error is not None:
                raise conn._core.error
            if not ready:
                raise TimeoutError(f"no message within {timeout} s")
            raise ConnectionLostError("the subscription ended")

    def __iter__(self) -> Iterator[Message]:
        while (message := self.get()) is not None:
            yield message

    def cancel(self) -> None:
        """``message.cancel``; messages already buffered are still handed out."""
        if self._core.finished:
            return
        self._session._call(lambda p: self._session._core.cancel(self._core, p))


def connect_0_10(
    url_or_params: str | ConnectionParameters = DEFAULT_URL,
    *,
    ssl_context: ssl.SSLContext | None = None,
    connection_name: str | None = None,
) -> Connection010:
    """Open an AMQP 0-10 connection (as :func:`connect` does for 0-9-1: the same URLs and
    parameters); use it as a context manager, or call :meth:`Connection010.close`."""
    params = connection_parameters(url_or_params, connection_name)
    context = ssl_context
    if context is None and params.tls:
        context = params.ssl_context()
    deadline = time.monotonic() + params.connection_timeout
    try:
        sock = socket.create_connection((params.host, params.port), params.connection_timeout)
    except TimeoutError:
        raise ConnectionTimeoutError(
            f"could not connect to {params.address} within {params.connection_timeout} s"
        ) from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if context is not None:
        sock = context.wrap_socket(sock, server_hostname=params.tls_server_hostname)
    sock.settimeout(None)
    conn = Connection010(params, sock)
    conn._start()
    try:
        with conn._lock:
            remaining = max(0.0, deadline - time.monotonic())
            conn._wait(conn._core.opened, remaining)
    except BaseException:
        conn._core.receive_data(b"")
        with contextlib.suppress(OSError):
            sock.close()
        raise
    return conn
