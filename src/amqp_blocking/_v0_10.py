"""AMQP 0-10 for synchronous code: :func:`connect_0_10`, :class:`Connection010`,
:class:`Session010` and :class:`Subscription010`, thin over :mod:`amqp_sansio.v0_10.client`.

An I/O thread reads the socket, feeds the core, routes its events and runs the heartbeat timer;
calls queue their command and write it under the connection's lock, then wait on its condition
(notified whenever an event was routed). Sessions and subscriptions may be used from several
threads.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
import time
import uuid
from typing import TYPE_CHECKING, Final, final

from amqp_sansio.client import (
    DEFAULT_URL,
    AMQPError,
    Connect,
    ConnectionClosedError,
    ConnectionLostError,
    ConnectionParameters,
    ConnectionTimeoutError,
    RecoveryEvent,
    RecoveryPolicy,
    RecoverySupervisor,
    Resume,
    connect_failed,
    connection_parameters,
)
from amqp_sansio.v0_10.client import (
    DEFAULT_PREFETCH,
    ClientCore,
    ClientSession,
    FlowModeName,
    LostSessions,
    Message,
    Pending,
    Properties,
    SubscriptionCore,
)

from ._generated_session import SessionMethods
from ._recovery import RecoveryObservable, carry_out, wait_for_recovery_locked
from ._wakeup import Wakeup

if TYPE_CHECKING:
    import ssl
    from collections.abc import Callable, Iterable, Iterator
    from types import TracebackType

    from amqp_sansio.v0_10 import Command, Map, Struct

__all__ = ["Connection010", "Session010", "Subscription010", "connect_0_10"]

logger: Final = logging.getLogger("amqp_blocking")

_NO_PROPERTIES: Final = Properties()
#: As the 0-9-1 reader's: a 64 KiB read left most 64 KiB transfers in two reads, with the
#: partial frame copied forward each time (amqp_trio consuming 64 KiB: 146 -> 110 us of client
#: CPU per message, medians of 3, with 256 KiB reads).
_READ: Final = 256 * 1024
#: Queued output from which a publishing thread writes it itself: one large write costs less
#: than handing it to the I/O thread (64 KiB transfers to the embedded broker, bench/e2e.py:
#: 30 us of client CPU each written by the caller, 39 us handed over), and it is the
#: backpressure on a fast publisher.
_WRITE_NOW: Final = 64 * 1024


@final
class Connection010(RecoveryObservable[ClientCore, ClientSession]):
    """An AMQP 0-10 connection (from :func:`connect_0_10`; a context manager that closes
    it): open sessions with :meth:`session`.

    With a :class:`~amqp_sansio.client.RecoveryPolicy` (``connect_0_10(..., recovery=...)``)
    a lost connection is recovered by the client layer's supervisor on the I/O thread, as a
    0-9-1 one is (see :doc:`/recovery`): new sessions replace the lost ones, what the client
    declared is declared again, subscriptions subscribe again into the same iterators.
    """

    def __init__(
        self,
        params: ConnectionParameters,
        sock: socket.socket,
        recovery: RecoveryPolicy | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.params: Final = params
        self._sock = sock
        self._policy = recovery
        self._ssl_context = ssl_context
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._events_guard = self._cond
        self._listeners: list[Callable[[RecoveryEvent], None]] = []
        self._logger = logger
        self._supervisor: RecoverySupervisor[ClientCore, ClientSession] = RecoverySupervisor(
            params, recovery, emit=self._emit_locked, logger=logger
        )
        self._core = self._new_core(params)
        self._sessions: dict[int, Session010] = {}
        self._closing = False
        #: True from a loss the policy recovers until the connection is back or gave up.
        self._recovering = False
        self._stop_recovery = threading.Event()
        self._thread = threading.Thread(target=self._run, name="amqp_blocking 0-10", daemon=True)
        # Output queued outside a call that writes (accepts, credit, unsynced transfers) is
        # written by the I/O thread, woken through this pair once per batch: a write (and an
        # accept command) per message costs more than the message.
        self._wake = Wakeup()
        # Where wait_any starts looking next: each subscription gets its turn.
        self._next_ready = 0

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

    def _new_core(self, params: ConnectionParameters) -> ClientCore:
        core = ClientCore(params, wake=self._wake_locked, guard=self._lock)
        supervisor = self._supervisor
        core.epochs = supervisor.epoch
        if self._policy is not None:
            core.recover_on = supervisor.recover_on
        return core

    @property
    def is_closed(self) -> bool:
        return self._core.error is not None and not self._recovering

    @property
    def close_error(self) -> AMQPError | None:
        """Why the connection ended (as a 0-9-1 connection's ``close_error``); None while open
        or recovering."""
        return self._core.error if self.is_closed else None

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

    def _wake_locked(self) -> None:
        """Have the I/O thread write what the core queued (it writes after every read
        itself)."""
        if threading.current_thread() is not self._thread:
            self._wake.set()

    def _run(self) -> None:
        try:
            self._run_sockets()
        finally:
            self._wake.close()

    def _run_sockets(self) -> None:
        while True:
            self._serve()
            with self._lock:
                core = self._core
                if not core.suspended or self._closing or core.error is None:
                    self._set_closed_locked()
                    return
                self._recovering = True
                self._supervisor.lost(LostSessions(core), core.error, time.monotonic())
            if not self._recover():
                return

    def _serve(self) -> None:
        """Serve the current socket until the connection ends."""
        core = self._core
        conn = core.conn
        while True:
            with self._lock:
                if core.closed.done:
                    return
                deadline = conn.next_deadline()
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            woken = False
            try:
                watched: list[socket.socket | Wakeup] = [self._sock, self._wake]
                readable, _, _ = select.select(watched, [], [], timeout)
                if self._wake in readable:
                    woken = True
                    self._wake.drain()
                data = self._sock.recv(_READ) if self._sock in readable else None
            except OSError:
                data = b""
            with self._lock:
                if woken:
                    self._wake.pending = False
                if data is None:
                    if not woken:
                        conn.handle_timer(time.monotonic())
                else:
                    core.receive_data(data, time.monotonic())
                core.process()
                self._flush_locked()
                eof = data is not None and not data
                if eof:
                    core.closed.finish()
                self._cond.notify_all()
                if eof or core.error is not None:
                    # over (closed by either side, or lost): the socket is done too
                    with contextlib.suppress(OSError):
                        self._sock.close()
                    return

    # --- recovery: the supervisor decides, the I/O thread carries its actions out -------------

    def _recover(self) -> bool:
        return carry_out(
            self._supervisor,
            self._cond,
            self._stop_recovery,
            self._attempt,
            lambda _cause: self._give_up_locked(),
            lambda: self._closing,
        )

    def _attempt(self, action: Connect) -> None:
        supervisor = self._supervisor
        params = action.params
        sock = _open_socket(params, self._ssl_context, action.deadline)
        try:
            with self._lock:
                if self._closing:
                    raise ConnectionClosedError("closed by the client", reply_code=200)
                self._sock = sock
                core = self._core = self._new_core(params)
                self._flush_locked()  # the protocol header
            self._read_until(sock, core, action.deadline, lambda: core.opened.done)
            with self._lock:
                core.opened.outcome()
                supervisor.connected(core)
                self._flush_locked()
            self._read_until(sock, core, action.deadline, lambda: not supervisor.restoring)
        except BaseException:
            with contextlib.suppress(OSError):
                sock.close()
            raise
        with self._lock:
            if self._closing:
                with contextlib.suppress(OSError):
                    sock.close()
                return
            resume = supervisor.next_action(time.monotonic())
            assert isinstance(resume, Resume)
            lost, self._sessions = self._sessions, {}
            for old, new in resume.channels.items():
                session = lost.get(old)
                if session is not None:
                    session._core = new
                    self._sessions[new.channel] = session
            self._recovering = False
            supervisor.resume()
            self._flush_locked()
            self._cond.notify_all()

    def _read_until(
        self, sock: socket.socket, core: ClientCore, deadline: float, done: Callable[[], bool]
    ) -> None:
        """Read the attempt's socket in this thread until *done* (the handshake, the restore).

        :raises AMQPError: the connection failed, or a restore step was refused.
        """
        supervisor = self._supervisor
        while True:
            with self._lock:
                if core.error is not None:
                    raise core.error
                if done():
                    return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise supervisor.timeout_error()
            readable, _, _ = select.select([sock], [], [], remaining)
            if not readable:
                continue
            data = sock.recv(_READ)
            with self._lock:
                core.receive_data(data, time.monotonic())
                core.process()
                if supervisor.restoring:
                    supervisor.handle(None)
                self._flush_locked()
                if not data and core.error is None:
                    raise ConnectionLostError("the connection was lost during recovery")

    def _give_up_locked(self) -> None:
        self._recovering = False
        self._set_closed_locked()

    def _wait_recovered_locked(self) -> None:
        """While recovering: wait (lock released) for the connection to come back (see
        :func:`~amqp_blocking._recovery.wait_for_recovery_locked`)."""
        if self._recovering:
            assert self._policy is not None
            wait_for_recovery_locked(
                self._supervisor, self._policy.publish_wait, self._cond, lambda: self._recovering
            )

    def _start(self) -> None:
        with self._lock:
            self._flush_locked()  # the protocol header
        self._thread.start()

    def _abandon(self) -> None:
        """A connect that failed: stop the I/O thread (it sees the end of the stream, whatever
        arrives later) and close the socket; nothing outlives the failed call."""
        with self._lock:
            self._closing = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the thread's select
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(self.params.connection_timeout)
        with contextlib.suppress(OSError):
            self._sock.close()
        if not self._thread.is_alive():  # else the thread closes them as it ends
            self._wake.close()

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
            self._wait_recovered_locked()
            core = self._core.attach(name or f"amqp_blocking.{uuid.uuid4()}")
            core.attached = Pending()
            self._wait(core.attached)
            session = self._sessions[core.channel] = Session010(self, core)
            return session

    @contextlib.contextmanager
    def session(self, name: str | None = None) -> Iterator[Session010]:
        """A session for the duration of a ``with`` block (closed at its end)."""
        session = self.open_session(name)
        try:
            yield session
        finally:
            session.close()

    def wait_any(
        self, subscriptions: Iterable[Subscription010], timeout: float | None = None
    ) -> Subscription010 | None:
        """Wait until one of *subscriptions* (of this connection's sessions) has a message
        to take, or has ended; return it (then ``get(timeout=0)`` takes the message, or raises
        why it ended, or returns None for a cancelled one), or None after *timeout* seconds.
        One thread serves several subscriptions this way; they take turns when several are
        ready.

        :raises ValueError: a subscription of another connection.
        :raises ConnectionClosedError: the connection is over (also ``ConnectionLostError``).
        """
        subs = list(subscriptions)
        for sub in subs:
            if sub._session._conn is not self:
                raise ValueError(f"{sub!r} belongs to another connection")
        found: list[Subscription010] = []

        def ready() -> bool:
            count = len(subs)
            for step in range(count):
                sub = subs[(self._next_ready + step) % count]
                if sub._core.buffer or sub._core.finished:
                    self._next_ready = (self._next_ready + step + 1) % count
                    found.append(sub)
                    return True
            return self._core.error is not None

        with self._lock:
            if not self._cond.wait_for(ready, timeout):
                return None
            if found:
                return found[0]
            assert self._core.error is not None
            raise self._core.error

    def close(self) -> None:
        """Close the connection (``connection.close``) and wait for ``close-ok``. Closing
        while recovering stops recovery."""
        self._stop_recovery.set()
        with self._lock:
            self._closing = True
            if self._supervisor.close():
                self._give_up_locked()
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
        with self._lock:
            self._set_closed_locked()


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

    @property
    def is_closed(self) -> bool:
        """Whether the session is over (detached, failed with an ``execution.exception``, or
        its connection closed)."""
        return self._core.error is not None or self._core.detached.done or self._conn.is_closed

    def _call(self, send: Callable[[Pending], object]) -> Struct | None:
        with self._conn._lock:
            self._conn._wait_recovered_locked()
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
            conn = self._conn
            with conn._lock:
                conn._wait_recovered_locked()
                self._core.transfer(destination, body, headers, None)
                if conn._core.conn.outbound_size >= _WRITE_NOW:
                    conn._flush_locked()
                else:
                    conn._wake_locked()
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
            conn._sessions.pop(self._core.channel, None)
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

    def __repr__(self) -> str:
        return f"<amqp_blocking.Subscription010 {self.destination!r} on {self.queue!r}>"

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
                lambda: bool(core.buffer) or core.finished or conn.is_closed,
                timeout,
            )
            # The credit take() grants back wakes the I/O thread itself.
            message = core.take()
            if message is not None:
                return message
            if core.error is not None:
                raise core.error
            if core.cancelled:
                return None
            if conn.is_closed:
                raise conn._core.error or ConnectionLostError("the connection ended")
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


def _open_socket(
    params: ConnectionParameters, ssl_context: ssl.SSLContext | None, deadline: float
) -> socket.socket:
    context = ssl_context
    if context is None and params.tls:
        context = params.ssl_context()
    try:
        sock = socket.create_connection(
            (params.host, params.port), max(deadline - time.monotonic(), 0.001)
        )
    except TimeoutError:
        raise ConnectionTimeoutError(
            f"could not connect to {params.address} within {params.connection_timeout} s"
        ) from None
    except OSError as exc:
        raise connect_failed(params.address, exc) from exc
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if context is not None:
        try:
            sock = context.wrap_socket(sock, server_hostname=params.tls_server_hostname)
        except BaseException:
            sock.close()
            raise
    sock.settimeout(None)
    return sock


def connect_0_10(
    url_or_params: str | ConnectionParameters = DEFAULT_URL,
    *,
    ssl_context: ssl.SSLContext | None = None,
    connection_name: str | None = None,
    recovery: RecoveryPolicy | None = None,
) -> Connection010:
    """Open an AMQP 0-10 connection (as :func:`connect` does for 0-9-1: the same URLs and
    parameters, and *recovery*, see :doc:`/recovery`); use it as a context manager, or call
    :meth:`Connection010.close`.

    :raises ConnectionTimeoutError: no ``connection.open-ok`` within ``connection_timeout``
        (the I/O thread is stopped before this raises).
    """
    params = connection_parameters(url_or_params, connection_name)
    deadline = time.monotonic() + params.connection_timeout
    sock = _open_socket(params, ssl_context, deadline)
    conn = Connection010(params, sock, recovery, ssl_context)
    conn._start()
    try:
        with conn._lock:
            remaining = max(0.0, deadline - time.monotonic())
            conn._wait(conn._core.opened, remaining)
    except BaseException:
        conn._abandon()
        raise
    conn._supervisor.opened()
    return conn
