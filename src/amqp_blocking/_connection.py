"""The blocking connection: one background I/O thread owns the socket and the protocol core.

Threading model
---------------
* ``_lock`` guards the core, the :class:`~amqp_sansio.client.Router` and the outbound buffer.
  Every public call takes it for a few microseconds: it asks the core for the method's bytes,
  registers a waiter, tries one non-blocking ``send`` and releases the lock; then it waits for
  the reply (with the call's timeout), reading it itself when nobody else reads (below).
* The I/O thread sleeps in ``select`` on the socket (and, while bytes are left over, on its
  writability), on a wake-up socketpair, and until the core's next heartbeat deadline. It reads
  with the lock held only long enough to feed the core and route the events: it never runs
  application code, so heartbeats are answered however long a message handler takes.
* Socket reads and writes both happen under ``_lock``: an ``ssl.SSLSocket`` must not be used by
  two threads at once.

Leader/follower reads
---------------------
Waking an application thread from the I/O thread costs a thread switch and a GIL hand-over per
wake. So an application thread that waits for the broker (a consumer with an empty buffer, a
publisher waiting for confirms, a call waiting for its reply) reads the socket itself when
nobody else does (:meth:`Connection._lead_locked`): it holds the read role (``_reader``), polls
the socket, feeds the core and routes what came (to itself and to every other waiter), and lets
go of the role once it has what it waited for. Exactly one thread reads: the role is taken and
given back under ``_lock``, and the I/O thread reads only while nobody holds it.

The I/O thread stays the reader of last resort: while an application thread holds the role it
watches only its wake-up socket (and the socket's writability); when the role is let go it
leaves the socket alone for ``_HAND_BACK`` seconds (the thread that let go is usually back at
once, with its next wait) and then reads again (within ``_LOOK_AGAIN_MAX`` more while the role
went back and forth), so heartbeats, closes, cancels and returns are seen whether or not the
application calls in. A waiter that finds another thread reading
counts itself a follower: the reader wakes the I/O thread as it lets go, so a follower's reply is
read at once.
"""

from __future__ import annotations

import contextlib
import logging
import math
import select
import selectors
import socket
import ssl
import threading
import time
from typing import TYPE_CHECKING, Final, Literal, NamedTuple, final, overload

import attrs

from amqp_sansio import (
    NEED_DATA,
    ChannelClosed,
    ChannelFlowChanged,
    ConnectionClosed,
    ConnectionLost,
    ConnectionOpened,
    HeartbeatTimeout,
    MessageReceived,
    MethodReceived,
    RemoteProtocolError,
    Role,
    SecureRequested,
    UnblockedByPeer,
)
from amqp_sansio import (
    Connection as CoreConnection,
)
from amqp_sansio.client import (
    DEFAULT_REFRESH_MARGIN,
    DEFAULT_URL,
    ENDPOINT_ERRORS,
    AMQPError,
    ChannelBook,
    Connect,
    ConnectionClosedError,
    ConnectionLostError,
    ConnectionParameters,
    ConnectionTimeoutError,
    HeartbeatTimeoutError,
    LostChannels,
    ProtocolFallback,
    ProtocolVersionRefused,
    RecoveryEvent,
    RecoveryPolicy,
    RecoverySupervisor,
    Resume,
    Router,
    check_refresh_margin,
    connect_failed,
    connection_parameters,
    connection_telemetry,
    endpoint_parameters,
    error_from,
    refresh_delay,
    report_closed_by_broker,
    report_lost,
    report_protocol_error,
    wants_0_10,
)

from ._channel import Channel, Message
from ._recovery import RecoveryEvents, RecoveryObservable, carry_out, wait_for_recovery_locked
from ._waiter import Waiter
from ._wakeup import Wakeup

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType

    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from amqp_sansio import Event, FieldTable, ProtocolVersion
    from amqp_sansio.client import ConnectionParameters as Params
    from amqp_sansio.client import Credentials, CredentialsProvider, Endpoints, Reply, Telemetry

    from ._v0_10 import Connection010

__all__ = ["Connection", "OpenedCore", "RecoveryEvents", "connect", "connect_core"]

logger = logging.getLogger("amqp_blocking")

_READ_SIZE: Final = 256 * 1024
#: A publisher waits while more than this many octets are queued for the socket ...
_HIGH_WATER: Final = 4 * 1024 * 1024
#: ... until the I/O thread drained the queue below this.
_LOW_WATER: Final = 1024 * 1024
#: How long the I/O thread leaves the socket to an application thread that just read it.
_HAND_BACK: Final = 0.005
#: While application threads take the role and let go of it in turn, the I/O thread looks at
#: the socket again after _HAND_BACK, twice that, ... up to this (then it reads within
#: _LOOK_AGAIN_MAX + _HAND_BACK of the last let-go).
_LOOK_AGAIN_MAX: Final = 0.02
_WOULD_BLOCK: Final = (
    BlockingIOError,
    InterruptedError,
    ssl.SSLWantReadError,
    ssl.SSLWantWriteError,
)


# A protocol typed as a plain str gets the second signature even when it holds "0-10".
@overload
def connect(  # type: ignore[overload-overlap]
    url_or_params: str | ConnectionParameters = ...,
    *,
    ssl_context: ssl.SSLContext | None = ...,
    connection_name: str | None = ...,
    protocol: Literal["0-10", ProtocolVersion.AMQP_0_10],
    tracer_provider: TracerProvider | None = ...,
    meter_provider: MeterProvider | None = ...,
    recovery: RecoveryPolicy | None = ...,
    credentials: None = ...,
    refresh_margin: float = ...,
) -> Connection010: ...


@overload
def connect(
    url_or_params: Endpoints = ...,
    *,
    ssl_context: ssl.SSLContext | None = ...,
    connection_name: str | None = ...,
    protocol: str | ProtocolVersion | None = ...,
    tracer_provider: TracerProvider | None = ...,
    meter_provider: MeterProvider | None = ...,
    recovery: RecoveryPolicy | None = ...,
    credentials: CredentialsProvider | None = ...,
    refresh_margin: float = ...,
) -> Connection: ...


def connect(
    url_or_params: Endpoints = DEFAULT_URL,
    *,
    ssl_context: ssl.SSLContext | None = None,
    connection_name: str | None = None,
    protocol: str | ProtocolVersion | None = None,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    recovery: RecoveryPolicy | None = None,
    credentials: CredentialsProvider | None = None,
    refresh_margin: float = DEFAULT_REFRESH_MARGIN,
) -> Connection | Connection010:
    """Open a connection and start its I/O thread; use it as a context manager.

    ``protocol="0-10"`` opens an AMQP 0-10 connection instead: a :class:`Connection010`
    (sessions, not channels) from :func:`connect_0_10`. A URL asking for 0-10 needs it
    (``connect(url, protocol="0-10")``), so that the connection's type is known.

    ``url_or_params`` is an ``amqp://``/``amqps://`` URL or :class:`ConnectionParameters`, or
    a sequence of them: a cluster's nodes, tried in turn (or shuffled: the policy's
    ``endpoint_order``) until one answers; a node that is down, unreachable or too slow is
    skipped, a refused login is not; recovery walks them too, from the node after the lost
    one (see :doc:`/recovery`);
    ``ssl_context`` replaces the context the parameters would build (``amqps`` only);
    ``connection_name`` is shown in RabbitMQ's management UI. ``protocol`` (``"0-9-1"``,
    ``"0-9"``, ``"0-8"`` or ``"auto"``) wins over the URL's ``protocol`` parameter; ``"auto"``
    tries 0-9-1 and reconnects with what the server answers (:doc:`/versions`).
    ``tracer_provider`` or ``meter_provider`` turn OpenTelemetry on for this connection (see
    :func:`amqp_sansio.client.instrument`).
    With ``recovery``, a connection lost after it opened is recovered (see
    :doc:`/recovery`); without it, it stays closed.
    ``credentials`` (a callable returning :class:`~amqp_sansio.client.Credentials`) gives
    the password to log in with, at connect and before every recovery attempt, instead of the
    URL's; when they expire, ``refresh_margin`` seconds before ``expires_at`` a thread of the
    connection asks again and sends the new secret (:meth:`Connection.update_secret`): an
    OAuth 2 token is refreshed without reconnecting (see :doc:`/credentials`).

    :raises ConnectionTimeoutError: the TCP connect, TLS handshake and AMQP handshake did not
        finish within ``connection_timeout`` (per attempt).
    :raises ConnectionClosedError: the broker refused the login (403) or the virtual host (530),
        or closed the connection right after opening it.
    :raises ProtocolVersionRefused: the broker does not speak the version asked for (with
        ``"auto"``: none of those it offered).
    :raises OSError: the broker could not be reached.
    """
    refresh_margin = check_refresh_margin(refresh_margin)
    if wants_0_10(
        protocol, recovery=recovery, tracer_provider=tracer_provider, meter_provider=meter_provider
    ):
        if credentials is not None:
            raise ValueError("a credentials provider needs 0-9-1 (0-10 has no update-secret)")
        if not isinstance(url_or_params, (str, ConnectionParameters)):
            raise ValueError("several endpoints need 0-9-1: give 0-10 one URL")
        from ._v0_10 import connect_0_10  # 0-10's tables load only when asked for

        return connect_0_10(
            url_or_params,
            ssl_context=ssl_context,
            connection_name=connection_name,
            recovery=recovery,
        )
    order = "in_order" if recovery is None else recovery.endpoint_order
    endpoints = endpoint_parameters(url_or_params, connection_name, protocol, order=order)
    opened: OpenedCore | None = None
    fresh: Credentials | None = None
    for number, endpoint in enumerate(endpoints, 1):
        fresh = None if credentials is None else credentials()
        given = endpoint if fresh is None else attrs.evolve(endpoint, password=fresh.password)
        try:
            opened = connect_core(given, ssl_context=ssl_context, message_class=Message)
            break
        except ENDPOINT_ERRORS as exc:
            if number == len(endpoints):
                raise
            logger.warning(
                "could not connect to %s (%s): trying %s",
                given.address,
                exc,
                endpoints[number].address,
            )
    assert opened is not None
    params = opened.params
    telemetry = connection_telemetry(params.host, params.port, tracer_provider, meter_provider)
    conn = Connection(
        opened.sock, opened.core, opened.opened, params, telemetry, recovery, ssl_context
    )
    with conn._lock:
        conn._supervisor.use_endpoints(endpoints, url_or_params)
    error = conn.close_error
    if error is not None:  # closed in the read that brought open-ok, as the other adapters say
        conn.close()
        raise error
    if credentials is not None:
        conn._refresh_with(credentials, fresh, refresh_margin)
    return conn


@final
class OpenedCore(NamedTuple):
    """What :func:`connect_core` hands over: the socket and the core that shook hands on it."""

    #: The connected socket, in blocking mode without a timeout (TLS-wrapped for ``amqps``).
    sock: socket.socket
    #: The client core, open: the next octets it reads are the broker's replies.
    core: CoreConnection
    #: The negotiated limits (``heartbeat``, ``frame_max``, ``channel_max``).
    opened: ConnectionOpened
    #: The parameters it connected with.
    params: ConnectionParameters


def connect_core(
    url_or_params: str | ConnectionParameters = DEFAULT_URL,
    *,
    ssl_context: ssl.SSLContext | None = None,
    connection_name: str | None = None,
    protocol: str | ProtocolVersion | None = None,
    message_class: type[MessageReceived] = MessageReceived,
) -> OpenedCore:
    """Connect and run the AMQP handshake in the calling thread, then hand over the socket and
    the core: no I/O thread, no locks; the caller drives ``receive_data``/``next_event``/
    ``data_to_send`` itself (and ``next_deadline``/``handle_timer`` when heartbeats are on),
    and closes the socket. :func:`connect` is this plus the I/O thread. *message_class* is
    what the core builds each message as (:attr:`~amqp_sansio.ConnectionConfig.message_class`;
    :func:`connect` passes :class:`Message`).

    The core may already hold events after ``connection.open-ok``: the broker's frames that
    arrived in the same read (a ``connection.blocked``, a ``connection.close``). Drain
    ``next_event()`` before waiting for the socket.

    :raises ConnectionTimeoutError: the TCP connect, TLS handshake and AMQP handshake did not
        finish within ``connection_timeout``.
    :raises ConnectionClosedError: the broker refused the login (403) or the virtual host (530).
    :raises ProtocolVersionRefused: the broker does not speak the version asked for.
    :raises OSError: the broker could not be reached.
    """
    fallback = ProtocolFallback(connection_parameters(url_or_params, connection_name, protocol))
    while True:
        try:
            return _connect_once(fallback.params, ssl_context, message_class)
        except ProtocolVersionRefused as exc:
            if not fallback.retry(exc):
                raise


def _connect_once(
    params: Params, ssl_context: ssl.SSLContext | None, message_class: type[MessageReceived]
) -> OpenedCore:
    deadline = time.monotonic() + params.connection_timeout
    context = ssl_context if ssl_context is not None else params.ssl_context()
    try:
        sock = socket.create_connection((params.host, params.port), params.connection_timeout)
    except TimeoutError:
        raise ConnectionTimeoutError(
            f"no TCP connection to {params.address} within {params.connection_timeout} s"
        ) from None
    except OSError as exc:
        raise connect_failed(params.address, exc) from exc
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if context is not None:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            try:
                sock = context.wrap_socket(sock, server_hostname=params.tls_server_hostname)
            except TimeoutError:
                raise ConnectionTimeoutError(
                    f"no TLS handshake with {params.address} within {params.connection_timeout} s"
                ) from None
        core = CoreConnection(Role.CLIENT, params.to_config(message_class))
        opened = _handshake(sock, core, params, deadline)
        sock.settimeout(None)
    except BaseException:
        sock.close()
        raise
    logger.info(
        "connected to %s vhost %r as %r (heartbeat %d s, frame_max %d)",
        params.address,
        params.virtual_host,
        params.username,
        opened.heartbeat,
        opened.frame_max,
    )
    return OpenedCore(sock, core, opened, params)


def _handshake(
    sock: socket.socket, core: CoreConnection, params: Params, deadline: float
) -> ConnectionOpened:
    """Drive the AMQP handshake on the blocking socket, in the calling thread."""
    sock.sendall(core.data_to_send())
    while True:
        try:
            event = core.next_event()
        except RemoteProtocolError as exc:
            _send_quietly(sock, core.data_to_send())
            raise error_from(exc, connection=True) from exc
        if event is NEED_DATA:
            out = core.data_to_send()  # answers to start and tune are made by next_event()
            if out:
                sock.sendall(out)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ConnectionTimeoutError(
                    f"no AMQP handshake with {params.address} within {params.connection_timeout} s"
                )
            sock.settimeout(remaining)
            try:
                data = sock.recv(_READ_SIZE)
            except TimeoutError:
                continue
            core.receive_data(data)
            continue
        if isinstance(event, ConnectionOpened):
            return event
        if isinstance(event, ConnectionClosed):
            _send_quietly(sock, core.data_to_send())
            raise error_from(event, connection=True)
        if isinstance(event, ConnectionLost):
            raise ConnectionLostError(
                f"{params.address} closed the connection during the handshake (wrong "
                "credentials or virtual host on a broker that does not say why?)"
            )
        if isinstance(event, SecureRequested):
            raise ConnectionClosedError(
                f"the broker sent a SASL challenge, which {params.auth_mechanism} does not use",
                reply_code=530,
            )


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):
        sock.sendall(data)


@final
class Connection(RecoveryObservable[Router, ChannelBook]):
    """An open AMQP connection with its I/O thread. Every method is safe from any thread.

    Made by :func:`connect`; close it with :meth:`close` or a ``with`` block.
    """

    def __init__(
        self,
        sock: socket.socket,
        core: CoreConnection,
        opened: ConnectionOpened,
        params: ConnectionParameters,
        telemetry: Telemetry | None = None,
        recovery: RecoveryPolicy | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        # OpenTelemetry hooks (amqp_sansio.client.instrument); None: tracing off.
        self._telemetry: Final = telemetry
        self._policy = recovery
        self._ssl_context = ssl_context
        self._listeners: list[Callable[[RecoveryEvent], None]] = []
        self._logger = logger
        # Recovery's decisions; the I/O thread carries out its actions.
        self._supervisor: RecoverySupervisor[Router, ChannelBook] = RecoverySupervisor(
            params, recovery, emit=self._emit_locked, logger=logger
        )
        self._epoch = self._supervisor.epoch
        self._supervisor.telemetry = telemetry
        #: True from a loss the policy recovers until the connection is back or gave up.
        self._recovering = False
        self._suspend_pending = False
        self._stop_recovery = threading.Event()
        # connect(credentials=...): the provider, what it last gave, the refresher's stop.
        self._credentials_provider: CredentialsProvider | None = None
        self._credentials: Credentials | None = None
        self._stop_refresh = threading.Event()
        # The lost connection's channel objects, by their number there, until resumed.
        self._lost_channels: dict[int, Channel] = {}
        self._channel_objs: dict[int, Channel] = {}
        self._sock = sock
        self._core = core
        #: The parameters the connection was made with.
        self.params: Final = params
        self._params = params
        self._opened = opened
        self._lock = threading.Lock()
        #: Publishers wait on this while too much is queued for the socket.
        self._writable = threading.Condition(self._lock)
        self._events_guard = self._writable
        self._book = Router(core, telemetry)
        self._supervisor.attach(self._book, self._channel_reopened_locked)
        self._supervisor.opened()  # connect_core did the handshake
        self._out = bytearray()
        self._close_waiter: Waiter | None = None
        self._finished = False
        self._send_error: OSError | None = None
        self._wake = Wakeup()  # the I/O thread's
        # Leader/follower (see the module's docstring): the application thread holding the read
        # role, whether the I/O thread serves the socket (else nobody may lead), how often the
        # role was taken, when it was last let go, whether the I/O thread sleeps until woken,
        # how many waiters wait for another thread's reads, and the reader's own wake-up.
        self._reader: threading.Thread | None = None
        self._serving = False
        self._takes = 0
        self._released_at = 0.0
        self._io_parked = False
        self._followers = 0
        self._reader_wake = Wakeup()
        self._rpoll = select.poll()
        self._rpoll.register(self._reader_wake, select.POLLIN)
        self._rpoll_fd = -1
        sock.setblocking(False)
        # Made before the events below are routed: a close among them wakes it (to stop).
        self._thread = threading.Thread(
            target=self._run, name=f"amqp_blocking I/O {params.address}", daemon=True
        )
        # Frames that came in the read that brought open-ok (a connection.blocked, a close)
        # are in the core already: the I/O thread would not look before the socket stirs.
        with self._lock:
            self._process_events_locked()
            if not self._finished:
                self._flush_locked()
        self._thread.start()

    def __repr__(self) -> str:
        state = "closed" if self._finished else "open"
        return f"<amqp_blocking.Connection {self._params.address} {state}>"

    # --- public API ---------------------------------------------------------------------------

    @property
    def server_properties(self) -> FieldTable:
        """The broker's ``server-properties`` (product, version, capabilities, ...)."""
        return self._opened.server_properties

    @property
    def address(self) -> str:
        """``host:port`` of the node the connection is on: the endpoint the first connect
        reached, then the one each recovery reached (``params`` stay those it was made with)."""
        return self._supervisor.in_use.address

    @property
    def protocol(self) -> str:
        """The AMQP version spoken: ``"0-9-1"``, ``"0-9"`` or ``"0-8"`` (what ``"auto"``
        settled on)."""
        return self._core.protocol.version.value

    @property
    def heartbeat(self) -> int:
        """The negotiated heartbeat interval in seconds (0: off)."""
        return self._opened.heartbeat

    @property
    def frame_max(self) -> int:
        """The negotiated largest frame."""
        return self._opened.frame_max

    @property
    def channel_max(self) -> int:
        """The negotiated highest channel number."""
        return self._opened.channel_max

    @property
    def blocked(self) -> bool:
        """Whether the broker currently blocks publishers (``connection.blocked``)."""
        return self._book.blocked is not None

    @property
    def blocked_reason(self) -> str | None:
        """The reason the broker gave for blocking, while blocked."""
        return self._book.blocked

    @property
    def is_closed(self) -> bool:
        """Whether the connection is closed, closing or lost."""
        return self._book.error is not None or self._finished or self._close_waiter is not None

    @property
    def close_error(self) -> AMQPError | None:
        """Why the connection ended (:class:`~amqp_sansio.client.ConnectionClosedError` with
        the broker's reply, :class:`~amqp_sansio.client.ConnectionLostError`); None while
        open."""
        return self._book.error

    def open_channel(self, *, timeout: float | None = None) -> Channel:
        """Open a channel; close it with :meth:`Channel.close` (or use :meth:`channel`)."""
        return self.channel(timeout=timeout)

    def channel(self, *, timeout: float | None = None) -> Channel:
        """Open a channel; it is a context manager that closes it (200) on the way out."""
        waiter = Waiter()
        with self._lock:
            self._check_open()
            number = self._core.open_channel()
            book = self._book.channel_opening(number, waiter)
            channel = self._channel_objs[number] = Channel(self, book)
            self._flush_locked()
        self._wait_reply(waiter, timeout)
        return channel

    def update_secret(self, secret: str, reason: str = "", *, timeout: float | None = None) -> None:
        """Send ``connection.update-secret`` with *secret* (RabbitMQ's OAuth 2 backend: a fresh
        token, before the old one expires) and wait (at most *timeout*
        seconds) for ``update-secret-ok``. From then on a
        recovery reconnects with *secret*, never with the password the connection opened with.
        The broker refuses a secret it does not accept by closing the connection (the spec's
        rule; RabbitMQ: 530 or 403): the call raises that close's error and the connection is
        over (or recovers, with the secret it had before). 0-8 and 0-9 have no update-secret
        (``LocalProtocolError``). The secret never appears in a log line or a ``repr``.
        """
        waiter = Waiter()
        with self._lock:
            self._check_open()
            request = self._core.update_secret(secret.encode(), reason)
            self._book.expect(0, request, waiter)
            self._flush_locked()
        self._wait_reply(waiter, timeout)
        with self._lock:
            self._supervisor.secret = secret

    def _refresh_with(
        self, provider: CredentialsProvider, current: Credentials | None, margin: float
    ) -> None:
        self._credentials_provider = provider
        self._credentials = current
        thread = threading.Thread(
            target=self._refresh_credentials,
            args=(margin,),
            name=f"amqp_blocking credentials {self._params.address}",
            daemon=True,
        )
        thread.start()

    def _refresh_credentials(self, margin: float) -> None:
        """The refresher thread: *margin* seconds before the current secret expires, ask the
        provider for the next and send it (update-secret). A recovery asks the provider by
        itself; a provider or an update that fails is tried again a second later."""
        provider = self._credentials_provider
        assert provider is not None
        while not self._stop_refresh.is_set():
            current = self._credentials
            delay = None if current is None else refresh_delay(current, time.time(), margin)
            if delay is None or self._stop_refresh.wait(delay):
                return  # they never expire, or the connection closed
            if self._credentials is not current:
                continue  # a recovery logged in with newer ones meanwhile
            try:
                fresh = provider()
                self.update_secret(fresh.password, "credentials refreshed")
            except Exception as exc:
                if self.is_closed and not self._recovering:
                    return  # the connection is over: nothing to refresh
                logger.warning("credentials refresh failed (%s); trying again in 1 s", exc)
                self._stop_refresh.wait(1.0)
                continue
            self._credentials = fresh

    def close(self, *, timeout: float | None = None) -> None:
        """Close the connection (reply code 200) and stop the I/O thread.

        Waits up to *timeout* (default: the connection timeout) for the broker's ``close-ok``,
        then closes the socket regardless. Pending calls raise :class:`ConnectionClosedError`;
        consumers end. Calling it again does nothing.
        """
        if timeout is None:
            timeout = self._params.connection_timeout
        waiter: Waiter | None = None
        self._stop_recovery.set()
        self._stop_refresh.set()
        with self._lock:
            if self._supervisor.close():
                self._give_up_locked(ConnectionClosedError("closed by the client", reply_code=200))
            if not self._finished and self._book.error is None and self._close_waiter is None:
                waiter = self._close_waiter = Waiter()
                self._core.close(200, "")
                self._flush_locked()
            elif self._close_waiter is not None:
                waiter = self._close_waiter
        if waiter is not None:
            try:
                self._wait_reply(waiter, timeout)
            except TimeoutError:
                logger.warning("no close-ok from %s within %s s", self._params.address, timeout)
                self._abort()
            except AMQPError:
                pass  # the connection went away some other way: closed all the same
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def __enter__(self) -> Connection:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- for channels, consumers and publishers (lock held where it says so) -------------------

    def _check_open(self) -> None:
        if self._recovering:
            self._wait_recovered_locked()
        error = self._book.error
        if error is not None:
            raise error
        if self._close_waiter is not None or self._finished:
            raise ConnectionClosedError("the connection was closed", reply_code=200)

    def _flush_locked(self) -> None:
        """Write what the core produced: at once if the socket takes it, else via the thread."""
        data = self._core.data_to_send()
        if not data:
            return
        if self._out or self._finished:
            self._out += data
            return
        try:
            sent = self._sock.send(data)
        except _WOULD_BLOCK:
            sent = 0
        except OSError as exc:
            self._send_error = exc
            self._wake_locked()
            return
        if sent < len(data):
            self._out += memoryview(data)[sent:]
            self._wake_locked()

    def _publishable_locked(self, book: ChannelBook) -> bool:
        """Whether a publish on *book*'s channel may go at once: nothing the publish path
        would wait for or raise (recovery, a close, a block, flow, a full outbound queue).
        One call per publish instead of the four checks that say so one by one."""
        return (
            not self._recovering
            and book.error is None
            and book.close_waiter is None
            and book.flow_active
            and self._book.error is None
            and self._book.blocked is None
            and self._close_waiter is None
            and not self._finished
            and len(self._out) <= _HIGH_WATER
        )

    def _wait_writable_locked(self, timeout: float | None) -> None:
        """Backpressure for publishers: wait while the outbound queue is over the high water."""
        if len(self._out) <= _HIGH_WATER:
            return
        if not self._writable.wait_for(
            lambda: len(self._out) <= _LOW_WATER or self._finished, timeout
        ):
            raise TimeoutError(f"the socket did not drain within {timeout} s")
        self._check_open()

    # --- leader/follower reads ---------------------------------------------------------------

    def _lead_locked(self, done: Callable[[], object], deadline: float | None) -> bool | None:
        """Wait (lock held; released while polling) until *done()*, reading the socket in this
        thread: True once done, False when *deadline* (``time.monotonic``) passed first, None
        when another thread reads (or the connection is finishing or recovering): then wait as
        before, as a follower, for the thread that reads."""
        if not self._may_lead_locked():
            return None
        if done():
            return True
        if deadline is not None and time.monotonic() >= deadline:
            # Only looking (a timeout of 0): not a read, so it must not keep the I/O thread
            # off the socket either.
            return False
        fd = self._sock.fileno()
        poll = self._rpoll
        if fd != self._rpoll_fd:
            if self._rpoll_fd >= 0:
                poll.unregister(self._rpoll_fd)
            poll.register(fd, select.POLLIN)
            self._rpoll_fd = fd
        lock = self._lock
        self._reader = threading.current_thread()
        self._takes += 1
        try:
            while not done():
                if self._stopping():
                    return None
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    return False
                until = self._core.next_deadline()
                if until is None or (deadline is not None and deadline < until):
                    until = deadline
                ms = -1 if until is None else max(math.ceil((until - now) * 1000), 0)
                lock.release()
                try:
                    ready = poll.poll(ms)
                finally:
                    lock.acquire()
                readable = False
                for ready_fd, _ in ready:
                    if ready_fd == fd:
                        readable = True
                    else:
                        self._reader_wake.pending = False
                        self._reader_wake.drain()
                if self._stopping():  # the socket may be closed already
                    return None
                self._step_locked(readable, False)
            return True
        finally:
            self._let_go_locked()

    def _read_now_locked(self) -> None:
        """Read and route what already came, in this thread and without waiting, while nobody
        else reads: a publisher calls this every few publishes, so its confirms are read
        between its publishes and the I/O thread stays off the socket."""
        if not self._may_lead_locked():
            return
        self._reader = threading.current_thread()
        self._takes += 1
        try:
            self._step_locked(True, False)
        finally:
            self._let_go_locked()

    def _may_lead_locked(self) -> bool:
        """Whether this thread may take the read role: nobody holds it, the I/O thread serves
        the socket (not finishing, not recovering), and this is not the I/O thread itself."""
        return not (
            self._reader is not None
            or not self._serving
            or self._stopping()
            or self._recovering
            or threading.current_thread() is self._thread
        )

    def _let_go_locked(self) -> None:
        """Give the read role back to the I/O thread."""
        self._reader = None
        self._released_at = time.monotonic()
        if self._followers or self._io_parked or self._stopping():
            self._wake_locked()  # the I/O thread reads for them (or stops) at once
        if not self._serving:
            self._writable.notify_all()  # the I/O thread waits to leave _serve

    def _wait_reply(self, waiter: Waiter, timeout: float | None) -> Reply:
        """*waiter*'s result (see :meth:`Waiter.wait`), reading the socket in this thread
        while nobody else does."""
        if waiter.done():
            return waiter.wait(timeout, self._lock)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            led = self._lead_locked(waiter.done, deadline)
            if led is None:
                self._followers += 1
        if led is not None:
            return waiter.wait(0, self._lock)  # done, or a timeout (raised)
        try:
            remaining = None if deadline is None else deadline - time.monotonic()
            return waiter.wait(remaining, self._lock)
        finally:
            with self._lock:
                self._followers -= 1

    def _wake_reader_locked(self) -> None:
        """Wake the application thread polling the socket, to look at the connection's state."""
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader_wake.set()

    def _wake_reader(self) -> None:
        """:meth:`_wake_reader_locked` from a thread that holds another connection's lock."""
        self._reader_wake.nudge()

    def _wake_locked(self) -> None:
        if threading.current_thread() is not self._thread:
            self._wake.set()

    def _abort(self) -> None:
        """Drop the transport without a close handshake (the thread finishes the rest)."""
        with self._lock:
            if self._send_error is None:
                self._send_error = OSError("closed by the application")
            self._wake_locked()
            self._wake_reader_locked()

    # --- the I/O thread -----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                self._serve()
                with self._lock:
                    if not self._suspend_pending or self._finished:
                        break
                if not self._recover():
                    break
        finally:
            with self._lock:
                self._wake.close()
                self._reader_wake.close()

    def _stopping(self) -> bool:
        """Whether the connection finished or waits to be recovered (another thread may have
        made it so since the last look)."""
        return self._finished or self._suspend_pending

    def _serve(self) -> None:
        """Serve the current socket until the connection finishes or is suspended: read it
        while no application thread does (see the module's docstring), write what is left."""
        selector = selectors.DefaultSelector()
        sock = self._sock
        mask = 0
        seen_takes = -1
        look_again = _HAND_BACK
        try:
            if self._finished:  # closed by the frames that came with open-ok (see __init__)
                return
            selector.register(self._wake, selectors.EVENT_READ)
            with self._lock:
                self._serving = True
            while True:
                wait: float | None = None
                with self._lock:
                    if self._stopping():
                        break
                    want_write = bool(self._out)
                    deadline = self._core.next_deadline()
                    self._wake.pending = False
                    reading = self._reader is None
                    cycling = self._takes != seen_takes
                    seen_takes = self._takes
                    if reading and not self._followers:
                        # Let go of just now: its thread is usually back with its next wait.
                        grace = self._released_at + _HAND_BACK - time.monotonic()
                        if grace > 0:
                            reading = False
                            wait = look_again if cycling else grace
                    elif not reading and not cycling:
                        # Held since the last look: its reader wakes us as it lets go.
                        self._io_parked = True
                    elif not reading:
                        wait = look_again  # taken and let go in turn: look again later
                    if reading:
                        look_again = _HAND_BACK
                    elif wait == look_again:
                        look_again = min(look_again * 2, _LOOK_AGAIN_MAX)
                want = (selectors.EVENT_READ if reading else 0) | (
                    selectors.EVENT_WRITE if want_write else 0
                )
                if want != mask:
                    if not mask:
                        selector.register(sock, want)
                    elif not want:
                        selector.unregister(sock)
                    else:
                        selector.modify(sock, want)
                    mask = want
                timeout = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                if wait is not None and (timeout is None or wait < timeout):
                    timeout = wait
                readable = writable = False
                for key, events in selector.select(timeout):
                    if key.fileobj is self._wake:
                        self._wake.drain()
                    else:
                        readable = bool(events & selectors.EVENT_READ)
                        writable = bool(events & selectors.EVENT_WRITE)
                with self._lock:
                    self._io_parked = False
                    # An application thread may have taken the role (or read and let go of
                    # it) since the select: then the socket is left to it a while longer.
                    if readable and self._reader is None and not self._followers:
                        readable = self._released_at + _HAND_BACK <= time.monotonic()
                    self._step_locked(readable and self._reader is None, writable)
        except BaseException:  # a bug: fail every waiter instead of hanging them
            logger.exception("the I/O thread of %s failed", self._params.address)
            with self._lock:
                self._book.fail(ConnectionLostError("the I/O thread failed; see the log"))
                self._finish_locked()
            raise
        finally:
            selector.close()
            with self._lock:
                self._serving = False
                # Recovery replaces the socket: wait for a reader polling this one to let go.
                while self._reader is not None:
                    self._wake_reader_locked()
                    self._writable.wait()

    def _step_locked(self, readable: bool, writable: bool) -> None:
        if writable:
            self._write_out_locked()
        if readable:
            self._read_locked()
        if self._send_error is not None and not self._finished and not self._suspend_pending:
            self._lost_locked(self._send_error)
            return
        deadline = self._core.next_deadline()
        if deadline is not None:
            now = time.monotonic()
            if now >= deadline:
                self._core.handle_timer(now)
        self._process_events_locked()
        if not self._finished:
            self._flush_locked()

    def _read_locked(self) -> None:
        sock = self._sock
        while True:
            try:
                # recv, not recv_into a reused buffer: the core keeps a received bytes object as
                # it is, and would copy a view of a buffer we reuse.
                data = sock.recv(_READ_SIZE)
            except _WOULD_BLOCK:
                return
            except OSError as exc:
                self._lost_locked(exc)
                return
            # The read's time: a silent peer is dead two intervals after its last octet.
            self._core.receive_data(data, time.monotonic())
            if not data:
                return
            # One read per step, even when it filled the buffer: the selector reports the socket
            # again, and in between the lock is free for application threads (their acks waited
            # milliseconds behind back-to-back 256 KiB reads). Only an SSL socket must be drained
            # here: it may hold decrypted octets the selector cannot see.
            if not (isinstance(sock, ssl.SSLSocket) and sock.pending()):
                return

    def _write_out_locked(self) -> None:
        out = self._out
        try:
            sent = self._sock.send(out)
        except _WOULD_BLOCK:
            return
        except OSError as exc:
            self._send_error = exc
            return
        del out[:sent]
        if len(out) <= _LOW_WATER:
            self._writable.notify_all()

    def _process_events_locked(self) -> None:
        core = self._core
        book = self._book
        while not self._finished and not self._suspend_pending:
            try:
                event = core.next_event()
            except RemoteProtocolError as exc:
                report_protocol_error(logger, self._params.address, exc)
                book.fail(error_from(exc, connection=True))
                self._drain_and_finish_locked()
                return
            if event is NEED_DATA:
                return
            cls = type(event)
            if cls is Message:  # once per message (the core builds our class): no dispatch
                book.route_message(event)  # type: ignore[arg-type]
                continue
            book.handle(event)
            if cls is not MethodReceived:
                self._after_event_locked(event)

    def _after_event_locked(self, event: Event) -> None:
        cls = type(event)
        if cls is ConnectionClosed:
            assert isinstance(event, ConnectionClosed)
            if event.by_peer:
                report_closed_by_broker(
                    logger, self._params.address, error_from(event, connection=True)
                )
            else:
                logger.debug("connection to %s closed", self._params.address)
            self._drain_and_finish_locked()
        elif cls is UnblockedByPeer or cls is ChannelFlowChanged or cls is ChannelClosed:
            if cls is ChannelClosed:
                assert isinstance(event, ChannelClosed)
                if event.channel not in self._book.channels:  # else reopened under its number
                    self._channel_objs.pop(event.channel, None)
            self._writable.notify_all()  # publishers waiting in _wait_publishable_locked
        elif cls is ConnectionLost:
            error = self._book.error
            if error is not None and self._book.suspended is None and self._close_waiter is None:
                report_lost(logger, self._params.address, error)
            self._finish_locked()
        elif cls is HeartbeatTimeout:
            error = HeartbeatTimeoutError(self._params.address, self._core.heartbeat)
            logger.warning("%s", error)
            self._lost_locked(None, error)

    def _lost_locked(self, exc: OSError | None, error: AMQPError | None = None) -> None:
        """The transport is gone: the core reports what is lost, the waiters get the error
        (*error* when given: it is the first the router keeps)."""
        if exc is not None:
            logger.debug("transport error on %s: %r", self._params.address, exc)
        if error is not None:
            self._book.fail(error)
        # RuntimeError: already at EOF; RemoteProtocolError: the core failed earlier.
        with contextlib.suppress(RuntimeError, RemoteProtocolError):
            self._core.receive_data(b"")
        try:
            while (event := self._core.next_event()) is not NEED_DATA:
                self._book.handle(event)
        except RemoteProtocolError:
            pass
        self._book.fail(
            ConnectionLostError(
                f"the transport to {self._params.address} closed without a close handshake"
            )
        )
        final = self._book.error
        quiet = error is not None or self._book.suspended is not None or self._close_waiter
        if final is not None and not quiet:  # a heartbeat timeout was said; recovery says its own
            report_lost(logger, self._params.address, final)
        self._finish_locked()

    def _drain_and_finish_locked(self) -> None:
        """Write what is queued (a close-ok, a close answering an error), then finish."""
        data = bytes(self._out) + self._core.data_to_send()
        self._out.clear()
        if data:
            try:
                self._sock.setblocking(True)
                self._sock.settimeout(1.0)
                self._sock.sendall(data)
            except OSError:
                pass
        self._finish_locked()

    def _finish_locked(self) -> None:
        if self._finished or self._suspend_pending:
            return
        # The I/O thread (if parked) and an application thread polling the socket look again.
        self._wake_locked()
        self._wake_reader_locked()
        if self._book.suspended is not None and self._close_waiter is None:
            # Lost, and the policy recovers it: the I/O thread reconnects once out of _serve.
            # Calls wait from now on (the router already holds the loss's error), and the
            # deliveries of this connection can no longer be settled.
            self._suspend_pending = True
            self._recovering = True
            cause = self._book.error
            assert cause is not None
            self._supervisor.lost(LostChannels(self._book), cause, time.monotonic())
            with contextlib.suppress(OSError):
                self._sock.close()
            return
        self._finished = True
        with contextlib.suppress(OSError):
            self._sock.close()
        if self._close_waiter is not None and not self._close_waiter.done():
            self._close_waiter.set_result(None)
        self._writable.notify_all()
        self._set_closed_locked()

    # --- recovery: the supervisor decides, the I/O thread carries its actions out -------------

    def _channel_reopened_locked(self, old: int, book: ChannelBook) -> None:
        """The router opened channel *old* again as *book* after a channel error (the I/O
        thread flushes after routing)."""
        ch = self._channel_objs.pop(old, None)
        if ch is not None:
            ch._rebind_locked(book)
            self._channel_objs[book.number] = ch

    def _wait_recovered_locked(self, octets: int = 0) -> None:
        """While recovering: wait (lock released) for the connection to come back (see
        :func:`~amqp_blocking._recovery.wait_for_recovery_locked`)."""
        assert self._policy is not None
        wait_for_recovery_locked(
            self._supervisor,
            self._policy.publish_wait,
            self._writable,
            lambda: self._recovering,
            octets,
        )

    def _recover(self) -> bool:
        """Carry out the supervisor's actions until the connection is back (True) or it gave
        up or the application closed (False)."""
        supervisor = self._supervisor
        with self._lock:
            self._lost_channels = dict(self._channel_objs)
            self._channel_objs.clear()
            self._out.clear()
            self._send_error = None
            self._suspend_pending = False
            self._writable.notify_all()
        return carry_out(
            supervisor,
            self._writable,
            self._stop_recovery,
            self._attempt,
            self._give_up_locked,
            lambda: self._finished,  # closed by the application meanwhile
        )

    def _attempt(self, action: Connect) -> None:
        """Connect to the action's endpoint, restore the topology reading the new socket in
        this thread, then resume the channels."""
        supervisor = self._supervisor
        params = action.params
        provider = self._credentials_provider
        if provider is not None:  # the provider's current secret logs in
            try:
                credentials = provider()
            except Exception as exc:  # a failed attempt: the policy says what comes next
                raise ConnectionLostError(f"the credentials provider failed: {exc!r}") from exc
            self._credentials = credentials
            with self._lock:
                supervisor.secret = credentials.password
            params = attrs.evolve(params, password=credentials.password)
        opened = connect_core(params, ssl_context=self._ssl_context, message_class=Message)
        sock, core = opened.sock, opened.core
        router = Router(core, self._telemetry)
        supervisor.attach(router, self._channel_reopened_locked)
        try:
            with self._lock:
                if self._finished:
                    raise ConnectionClosedError("closed by the client", reply_code=200)
                self._sock, self._core, self._book = sock, core, router
                self._opened = opened.opened
                supervisor.connected(router)
                sock.sendall(core.data_to_send())
            while supervisor.restoring:
                remaining = action.deadline - time.monotonic()
                if remaining <= 0:
                    raise supervisor.timeout_error()
                sock.settimeout(remaining)
                try:
                    data = sock.recv(_READ_SIZE)
                except TimeoutError:
                    continue
                with self._lock:
                    core.receive_data(data, time.monotonic())
                    self._restore_events_locked()
                    out = core.data_to_send()
                if out:
                    sock.sendall(out)
                if not data:
                    raise router.error or ConnectionLostError(
                        "the connection was lost during recovery"
                    )
        except BaseException:
            with contextlib.suppress(OSError):
                sock.close()
            raise
        sock.setblocking(False)
        with self._lock:
            if self._finished:  # closed by the application meanwhile
                with contextlib.suppress(OSError):
                    sock.close()
                return
            resume = supervisor.next_action(time.monotonic())
            assert isinstance(resume, Resume)
            lost, self._lost_channels = self._lost_channels, {}
            for old, book in resume.channels.items():
                ch = lost.get(old)
                if ch is not None:
                    ch._rebind_locked(book)
                    self._channel_objs[book.number] = ch
            self._recovering = False
            supervisor.resume()
            self._flush_locked()
            self._writable.notify_all()

    def _restore_events_locked(self) -> None:
        """Route the new core's events during restore: the supervisor's first (it raises when
        a step is refused), the rest (deliveries to restored consumers) to the router."""
        core = self._core
        supervisor = self._supervisor
        while (event := core.next_event()) is not NEED_DATA:
            if supervisor.restoring and supervisor.handle(event):
                continue
            self._book.handle(event)

    def _give_up_locked(self, cause: AMQPError) -> None:
        """Recovery ended for good (the consumers ended with *cause*): what still waits gets
        it, and the connection is closed."""
        self._lost_channels = {}
        lost = Router(self._core)
        lost.fail(cause)
        self._book = lost
        self._recovering = False
        self._suspend_pending = False
        self._finished = True
        self._channel_objs.clear()
        if self._close_waiter is not None and not self._close_waiter.done():
            self._close_waiter.set_result(None)
        self._writable.notify_all()
        self._set_closed_locked()
