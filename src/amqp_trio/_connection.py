"""The Trio client connection: ``connect()`` and the reader task, which hands the core's events to
the client layer's :class:`~amqp_sansio.client.Router` and keeps the Trio side in step."""

from __future__ import annotations

import logging
import ssl
import time
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Final, Literal, final, overload

import attrs
import trio

import amqp_sansio
from amqp_sansio import (
    NEED_DATA,
    BlockedByPeer,
    ChannelClosed,
    ChannelFlowChanged,
    ChannelOpened,
    ConnectionClosed,
    ConnectionLost,
    ConnectionOpened,
    ConnectionState,
    ConsumerCancelled,
    HeartbeatTimeout,
    LocalProtocolError,
    MethodReceived,
    ProtocolVersion,
    PublishConfirmed,
    PublishNacked,
    PublishReturned,
    RemoteProtocolError,
    Role,
    SecureRequested,
    UnblockedByPeer,
)
from amqp_sansio.client import (
    DEFAULT_REFRESH_MARGIN,
    DEFAULT_URL,
    ENDPOINT_ERRORS,
    AMQPError,
    ConnectionClosedError,
    ConnectionLostError,
    ConnectionParameters,
    ConnectionTimeoutError,
    HeartbeatTimeoutError,
    ProtocolFallback,
    ProtocolVersionRefused,
    Router,
    Telemetry,
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

from ._channel import Channel
from ._message import Message
from ._recovery import Recovering
from ._waiter import Waiter
from ._wire import Wire

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable
    from contextlib import AbstractAsyncContextManager

    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from amqp_sansio import Event, FieldTable
    from amqp_sansio.client import (
        AsyncCredentialsProvider,
        Credentials,
        Endpoints,
        RecoveryPolicy,
    )

    from ._v0_10 import Connection010

__all__ = ["Connection", "connect", "connect_stream"]

logger: Final = logging.getLogger("amqp_trio")


@final
class Connection(Recovering):
    """An open AMQP connection (from :func:`connect`).

    One reader task reads the socket and routes events to channels; one writer task flushes
    what the core queued and sends heartbeats. Both live in the nursery :func:`connect` opens,
    and end with the connection.

    With a :class:`~amqp_sansio.client.RecoveryPolicy` (``connect(..., recovery=...)``), a
    lost connection is recovered (see :doc:`/recovery`): its channels, publishers and consumer
    iterators carry on over the new one; :attr:`recovery_state` and :meth:`recovery_events`
    say what happens.
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        params: ConnectionParameters,
        telemetry: Telemetry | None = None,
        recovery: RecoveryPolicy | None = None,
        reopen: Callable[[ConnectionParameters], Awaitable[trio.abc.Stream]] | None = None,
    ) -> None:
        #: The parameters the connection was made with.
        self.params: Final = params
        # OpenTelemetry hooks (amqp_sansio.client.instrument); None: tracing off.
        self._telemetry = telemetry
        self._core = amqp_sansio.Connection(Role.CLIENT, params.to_config(Message))
        self._wire = Wire(self._core, stream)
        # Replies, deliveries, confirms and closes go through the client layer's router; the
        # Trio side keeps only what it waits on (flow, blocked, the handshake).
        self._router = Router(self._core, telemetry)
        self._channels: dict[int, Channel] = {}
        self._closing = False
        # Set while the broker blocks publishers; the event fires on connection.unblocked.
        self._blocked: trio.Event | None = None
        self._opened = trio.Event()
        self._finished = trio.Event()
        self._handshaking = True
        self._needs_flush = False
        self._heartbeat_timed_out = False
        #: The broker's ``server-properties`` (product, version, capabilities, ...).
        self.server_properties: FieldTable = {}
        # connect(credentials=...): the provider and what it last gave (see update_secret).
        self._credentials_provider: AsyncCredentialsProvider | None = None
        self._credentials: Credentials | None = None
        self._nursery: trio.Nursery | None = None
        self._init_recovery(recovery, reopen)

    def __repr__(self) -> str:
        state = "closed" if self.is_closed else "open"
        return f"<amqp_trio.Connection {self.params.address} {state}>"

    # --- Public state -------------------------------------------------------------------------

    @property
    def blocked(self) -> bool:
        """Whether the broker currently blocks publishers (``connection.blocked``)."""
        return self._blocked is not None

    @property
    def blocked_reason(self) -> str | None:
        """The reason the broker gave for blocking, while blocked."""
        return self._router.blocked

    @property
    def is_closed(self) -> bool:
        """Whether the connection is closed, closing or lost."""
        return self._router.error is not None or self._closing

    @property
    def close_error(self) -> AMQPError | None:
        """Why the connection ended (:class:`~amqp_sansio.client.ConnectionClosedError` with
        the broker's reply, :class:`~amqp_sansio.client.ConnectionLostError`); None while
        open."""
        return self._router.error

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
        return self._core.heartbeat

    @property
    def frame_max(self) -> int:
        """The negotiated largest frame."""
        return self._core.frame_max

    @property
    def channel_max(self) -> int:
        """The negotiated highest channel number."""
        return self._core.channel_max

    # --- Channels -----------------------------------------------------------------------------

    @asynccontextmanager
    async def channel(self) -> AsyncIterator[Channel]:
        """Open a channel for the block; it is closed (200) on the way out."""
        ch = await self.open_channel()
        try:
            yield ch
        finally:
            await ch.aclose()

    async def open_channel(self) -> Channel:
        """Open a channel; close it with :meth:`Channel.aclose`."""
        if self._recovered is not None:
            await self._wait_recovered()
        self._check_open()
        try:
            number = self._core.open_channel()
        except LocalProtocolError as exc:
            self._raise_refused(exc)
            raise
        waiter = Waiter()
        ch = Channel(self, self._router.channel_opening(number, waiter))
        self._channels[number] = ch
        await waiter.wait(self._wire.send_request)
        return ch

    async def update_secret(self, secret: str, reason: str = "") -> None:
        """Send ``connection.update-secret`` with *secret* (RabbitMQ's OAuth 2 backend: a fresh
        token, before the old one expires) and wait for ``update-secret-ok``. From then on a
        recovery reconnects with *secret*, never with the password the connection opened with.
        The broker refuses a secret it does not accept by closing the connection (the spec's
        rule; RabbitMQ: 530 or 403): the call raises that close's error and the connection is
        over (or recovers, with the secret it had before). 0-8 and 0-9 have no update-secret
        (``LocalProtocolError``). The secret never appears in a log line or a ``repr``.
        """
        if self._recovered is not None:
            await self._wait_recovered()
        self._check_open()
        try:
            request = self._core.update_secret(secret.encode(), reason)
        except LocalProtocolError as exc:
            self._raise_refused(exc)
            raise
        waiter = Waiter()
        self._router.expect(0, request, waiter)
        await waiter.wait(self._wire.send_request)
        self._supervisor.secret = secret

    async def _refresh_credentials(self, margin: float) -> None:
        """connect(credentials=...)'s task: *margin* seconds before the current secret
        expires, ask the provider for the next and send it (update-secret). A recovery asks
        the provider by itself; a provider that fails is asked again a second later."""
        while True:
            current = self._credentials
            delay = None if current is None else refresh_delay(current, time.time(), margin)
            if delay is None:
                return  # it never expires
            await trio.sleep(delay)
            if self._credentials is not current:
                continue  # a recovery logged in with newer ones meanwhile
            provider = self._credentials_provider
            assert provider is not None
            try:
                fresh = await provider()
            except Exception:
                logger.exception("the credentials provider failed; asking again in 1 s")
                await trio.sleep(1.0)
                continue
            try:
                await self.update_secret(fresh.password, "credentials refreshed")
            except AMQPError as exc:
                if self._recovered is None and self.is_closed:
                    return  # the connection is over: nothing to refresh
                logger.info("update-secret failed (%s); recovery logs in afresh", exc)
                continue
            self._credentials = fresh

    # --- Closing ------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the connection (200) and wait for the broker's close-ok, shielded from
        cancellation and bounded by ``connection_timeout``. Pending calls raise
        :class:`~amqp_sansio.client.ConnectionClosedError`."""
        with trio.CancelScope(shield=True):
            if self._recovered is not None:
                # Recovering: stop, and end what waits for the connection to come back.
                self._closing = True
                self._supervisor.close()
                if self._recovery_scope is not None:
                    self._recovery_scope.cancel()
                self._give_up(ConnectionClosedError("closed by the client", reply_code=200))
                await self._wire.close_transport()
                return
            self._supervisor.close()
            if self._usable and not self._handshaking:
                self._closing = True
                with trio.move_on_after(self.params.connection_timeout):
                    self._core.close(200, "Normal shutdown")
                    with suppress(ConnectionLostError):
                        await self._wire.flush()
                    await self._finished.wait()
            elif self._closing and self._router.error is None and not self._finished.is_set():
                # Another task's aclose() is waiting for close-ok: wait with it.
                with trio.move_on_after(self.params.connection_timeout):
                    await self._finished.wait()
            if self._router.error is None:
                self._die(ConnectionClosedError("closed by the client", reply_code=200))
            await self._wire.close_transport()

    # --- Plumbing -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        error = self._router.error
        if error is not None:
            raise error
        if self._closing:
            raise ConnectionClosedError("the connection is closing", reply_code=200)

    def _raise_refused(self, exc: LocalProtocolError) -> None:
        """After the core refused a send: raise the connection's own error when the refusal
        is about the connection's state (failed, closing, closed) rather than the request, so
        a core ``LocalProtocolError`` reaches the caller only for what the caller asked.
        Returns when the request itself was illegal (the caller re-raises *exc*)."""
        error = self._router.error
        if error is not None:
            raise error from exc
        state = self._core.state
        if state is ConnectionState.ERROR:
            # The core failed before the reader saw why: only a heartbeat timeout does that
            # (the reader dies at once on a protocol error), and it is still queued.
            raise self._heartbeat_error() from exc
        if self._closing or state is not ConnectionState.OPEN:
            raise ConnectionClosedError("the connection is closing", reply_code=200) from exc

    @property
    def _usable(self) -> bool:
        """Whether the core still takes sends: not failed, closing or closed on either side
        (internal bookkeeping sends nothing otherwise)."""
        return (
            self._router.error is None
            and not self._closing
            and self._core.state is ConnectionState.OPEN
        )

    def _die(self, error: AMQPError) -> None:
        """The connection ended with *error* (kept unless it already ended)."""
        self._router.fail(error)
        if self._router.suspended is not None:
            self._on_suspended()  # the policy recovers it: channels and consumers stay
            return
        self._ended()

    def _ended(self) -> None:
        """After the router failed everything that waited: wake what waits on the Trio side."""
        channels, self._channels = self._channels, {}
        for ch in channels.values():
            ch._ended()
        if self._blocked is not None:
            self._blocked.set()
            self._blocked = None
        self._opened.set()

    async def _handshake(self, deadline: float) -> None:
        self._wire.schedule_flush()  # the protocol header
        with trio.move_on_at(deadline) as scope:
            await self._opened.wait()
        error = self._router.error
        if error is not None:
            raise error
        if scope.cancelled_caught:
            raise ConnectionTimeoutError(
                f"no connection.open-ok from {self.params.address} within "
                f"{self.params.connection_timeout} s"
            )
        self._supervisor.opened()
        logger.info(
            "connected to %s (vhost %r, heartbeat %d s)",
            self.params.address,
            self.params.virtual_host,
            self._core.heartbeat,
        )

    # --- The reader task ----------------------------------------------------------------------

    async def _run_reader(self) -> None:
        wire = self._wire
        route = self._router.handle
        route_message = self._router.route_message
        # Wire.next_event inlined: once per message, the call costs more than the check.
        stash = wire._stash
        core_next_event = self._core.next_event
        failed = False
        try:
            while True:
                try:
                    event = stash.popleft() if stash else core_next_event()
                except RemoteProtocolError as exc:
                    failed = True
                    report_protocol_error(logger, self.params.address, exc)
                    self._die(error_from(exc, connection=True))
                    break
                if self._supervisor.restoring and event is not NEED_DATA:
                    assert not isinstance(event, type(NEED_DATA))
                    if self._restore_event(event):
                        self._needs_flush = True  # its next step is queued in the core
                        continue
                if event is NEED_DATA:
                    if self._handshaking:
                        # the writer also picks up the deadlines the handshake sets
                        self._needs_flush = False
                        wire.schedule_flush()
                    elif self._needs_flush:
                        # most replies queue nothing: no writer wake-up for them
                        self._needs_flush = False
                        wire.flush_soon()
                    await wire.receive()
                    continue
                cls = type(event)
                if cls is Message:  # the core builds our class (ConnectionConfig.message_class)
                    assert isinstance(event, Message)
                    # Never waits: a consumer over its bound is paused by the router, whose
                    # basic.cancel goes out with the next flush.
                    if route_message(event):
                        self._needs_flush = True
                    continue
                if cls is PublishConfirmed or cls is PublishNacked or cls is PublishReturned:
                    route(event)
                    continue
                if await self._on_event(event):
                    break
            # The last words (a close-ok, or the close answering a protocol error).
            with suppress(ConnectionLostError):
                await wire.flush()
            if failed:
                await wire.linger()  # let the broker read our close before the socket goes
            await wire.close_transport()
        finally:
            if self._policy is None:
                self._set_closed()
                self._finished.set()  # under a policy the supervisor says when it is over

    async def _on_event(self, event: Event) -> bool:
        """Route an event other than a message or a confirm, then keep the Trio side in step
        (:data:`_REACTIONS`); True when the connection is finished."""
        kind = type(event)
        if kind is ConnectionLost:  # before the router, whose error would not say why
            error = self._lost_error()
            self._die(error)
            if self._router.suspended is None and not self._closing and not self._handshaking:
                report_lost(logger, self.params.address, error)
            return True
        if kind is HeartbeatTimeout:
            logger.warning("%s", self._heartbeat_error())
            self._heartbeat_timed_out = True
            await self._wire.close_transport()
            self._wire.end_of_stream()
            return False
        self._router.handle(event)
        react = _REACTIONS.get(kind)
        if react is None:
            raise AssertionError(f"unexpected event {event!r}")
        return react(self, event)

    # --- After the router: the Trio side of an event (True: the connection is finished) -------

    def _flush_soon(self, event: Event) -> bool:
        """The core answered (cancel-ok), or the router undid an abandoned open or consume: the
        writer flushes when the reader next waits for the transport."""
        self._needs_flush = True
        return False

    def _on_channel_closed(self, event: Event) -> bool:
        assert isinstance(event, ChannelClosed)
        # Unless the router reopened it under its own number (RecoveryPolicy.reopen_channels).
        reopened = event.channel in self._router.channels
        ch = None if reopened else self._channels.pop(event.channel, None)
        if event.by_peer:
            self._needs_flush = True  # the core answered with close-ok
            error = error_from(event, connection=False)
            logger.info("the broker closed channel %d: %s", event.channel, error)
        if ch is not None:
            ch._ended()
        return False

    def _on_flow_changed(self, event: Event) -> bool:
        assert isinstance(event, ChannelFlowChanged)
        self._needs_flush = True  # the core answered with flow-ok
        ch = self._channels.get(event.channel)
        if ch is not None:
            ch._flow_changed(event.active)
        return False

    def _on_blocked(self, event: Event) -> bool:
        assert isinstance(event, BlockedByPeer)
        logger.warning("the broker blocks publishing: %s", event.reason)
        if self._blocked is None:
            self._blocked = trio.Event()
        return False

    def _on_unblocked(self, event: Event) -> bool:
        logger.info("the broker unblocked publishing")
        if self._blocked is not None:
            self._blocked.set()
            self._blocked = None
        return False

    def _on_opened(self, event: Event) -> bool:
        assert isinstance(event, ConnectionOpened)
        self.server_properties = event.server_properties
        self._handshaking = False
        self._opened.set()
        return False

    def _on_closed(self, event: Event) -> bool:
        assert isinstance(event, ConnectionClosed)
        if event.by_peer:
            error = error_from(event, connection=True)
            # During the handshake connect() raises it: a warning would say it twice.
            report_closed_by_broker(
                logger, self.params.address, error, handshaking=self._handshaking
            )
        if self._router.suspended is not None:
            self._on_suspended()
            return True
        self._ended()
        return True

    def _on_secure_requested(self, event: Event) -> bool:
        # PLAIN, AMQPLAIN and EXTERNAL never get a challenge.
        with suppress(LocalProtocolError):  # the core failed meanwhile: nothing to say
            self._core.close(540, "NOT_IMPLEMENTED - SASL challenges are not supported")
            self._needs_flush = True
        return False

    def _heartbeat_error(self) -> HeartbeatTimeoutError:
        return HeartbeatTimeoutError(self.params.address, self._core.heartbeat)

    def _lost_error(self) -> ConnectionLostError:
        if self._heartbeat_timed_out:
            return self._heartbeat_error()
        if self._handshaking:
            text = f"{self.params.address} closed the transport during the handshake"
        else:
            text = f"the transport to {self.params.address} closed without a close handshake"
        return ConnectionLostError(text)


#: What the reader does after the router handled an event, by the event's type.
_REACTIONS: Final[dict[type[object], Callable[[Connection, Event], bool]]] = {
    MethodReceived: Connection._flush_soon,
    ChannelOpened: Connection._flush_soon,
    ConsumerCancelled: Connection._flush_soon,
    ChannelClosed: Connection._on_channel_closed,
    ChannelFlowChanged: Connection._on_flow_changed,
    BlockedByPeer: Connection._on_blocked,
    UnblockedByPeer: Connection._on_unblocked,
    ConnectionOpened: Connection._on_opened,
    ConnectionClosed: Connection._on_closed,
    SecureRequested: Connection._on_secure_requested,
}


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
) -> AbstractAsyncContextManager[Connection010]: ...


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
    credentials: AsyncCredentialsProvider | None = ...,
    refresh_margin: float = ...,
) -> AbstractAsyncContextManager[Connection]: ...


def connect(
    url_or_params: Endpoints = DEFAULT_URL,
    *,
    ssl_context: ssl.SSLContext | None = None,
    connection_name: str | None = None,
    protocol: str | ProtocolVersion | None = None,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    recovery: RecoveryPolicy | None = None,
    credentials: AsyncCredentialsProvider | None = None,
    refresh_margin: float = DEFAULT_REFRESH_MARGIN,
) -> AbstractAsyncContextManager[Connection] | AbstractAsyncContextManager[Connection010]:
    """Connect to a broker for the duration of an ``async with`` block.

    ``protocol="0-10"`` opens an AMQP 0-10 connection instead: a :class:`Connection010`
    (sessions, not channels) from :func:`connect_0_10`. A URL asking for 0-10 needs it
    (``connect(url, protocol="0-10")``), so that the connection's type is known.

    *url_or_params* is an ``amqp://``/``amqps://`` URL (see
    :meth:`~amqp_sansio.client.ConnectionParameters.from_url`) or
    :class:`~amqp_sansio.client.ConnectionParameters`, or a sequence of them: a cluster's
    nodes, tried in turn (or shuffled: the policy's ``endpoint_order``) until one answers; a
    node that is down, unreachable or too slow is skipped, a refused login is not. Recovery
    walks them too, from the node after the lost one (see :doc:`/recovery`). TLS is used for
    ``amqps`` or when *ssl_context* is given (default context:
    :meth:`ConnectionParameters.ssl_context`).
    *connection_name* shows in the broker's management UI. *protocol* (``"0-9-1"``,
    ``"0-9"``, ``"0-8"`` or ``"auto"``) wins over the URL's ``protocol`` parameter; ``"auto"``
    tries 0-9-1 and reconnects with what the server answers (:doc:`/versions`).
    *tracer_provider* or *meter_provider* turn OpenTelemetry on for this connection (see
    :func:`amqp_sansio.client.instrument`).

    Leaving the block closes the connection (200) and waits for the broker's close-ok.

    *credentials* (an async callable returning :class:`~amqp_sansio.client.Credentials`)
    gives the password to log in with, at connect and before every recovery attempt, instead
    of the URL's; when they expire, *refresh_margin* seconds before ``expires_at`` the
    connection asks again and sends the new secret (:meth:`Connection.update_secret`): an
    OAuth 2 token is refreshed without reconnecting (see :doc:`/credentials`).

    With *recovery*, a connection lost after it opened (the socket, a heartbeat timeout, a
    320 from the broker, as the policy says) is recovered: see :doc:`/recovery`. Without it
    a lost connection stays closed.

    :raises ConnectionTimeoutError: TCP, TLS and AMQP handshake took longer than
        ``connection_timeout`` (per attempt).
    :raises ConnectionClosedError: the broker refused the login (403) or the virtual host
        (:class:`~amqp_sansio.client.NotAllowed`).
    :raises ProtocolVersionRefused: the broker does not speak the version asked for (with
        ``"auto"``: none of those it offered).
    :raises OSError: the TCP connection failed; :class:`ssl.SSLError` (an ``OSError``) the TLS
        handshake did, with the reason (``ssl.SSLCertVerificationError``: certificate verify
        failed).
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
    return _connect(
        url_or_params,
        ssl_context,
        connection_name,
        protocol,
        tracer_provider,
        meter_provider,
        recovery,
        credentials,
        refresh_margin,
    )


@asynccontextmanager
async def _connect(
    url_or_params: Endpoints,
    ssl_context: ssl.SSLContext | None,
    connection_name: str | None,
    protocol: str | ProtocolVersion | None,
    tracer_provider: TracerProvider | None,
    meter_provider: MeterProvider | None,
    recovery: RecoveryPolicy | None = None,
    credentials: AsyncCredentialsProvider | None = None,
    refresh_margin: float = DEFAULT_REFRESH_MARGIN,
) -> AsyncIterator[Connection]:
    order = "in_order" if recovery is None else recovery.endpoint_order
    endpoints = endpoint_parameters(url_or_params, connection_name, protocol, order=order)

    async def reopen(again: ConnectionParameters) -> trio.abc.Stream:
        # A recovery attempt: the same way in, with its own deadline.
        return await _open_stream(
            again, ssl_context, trio.current_time() + again.connection_timeout
        )

    for number, endpoint in enumerate(endpoints, 1):
        fallback = ProtocolFallback(endpoint)
        while True:
            params = fallback.params
            fresh = None if credentials is None else await credentials()
            if fresh is not None:
                params = attrs.evolve(params, password=fresh.password)
            deadline = trio.current_time() + params.connection_timeout
            entered = False
            try:
                stream = await _open_stream(params, ssl_context, deadline)
                async with _session(
                    stream, params, deadline, tracer_provider, meter_provider, recovery, reopen
                ) as conn:
                    entered = True
                    conn._supervisor.use_endpoints(endpoints, url_or_params)
                    if credentials is not None:
                        conn._credentials_provider = credentials
                        conn._credentials = fresh
                        assert conn._nursery is not None
                        conn._nursery.start_soon(conn._refresh_credentials, refresh_margin)
                    yield conn
                return
            except ProtocolVersionRefused as exc:
                if entered or not fallback.retry(exc):
                    raise
            except ENDPOINT_ERRORS as exc:
                if entered or number == len(endpoints):
                    raise
                logger.warning(
                    "could not connect to %s (%s): trying %s",
                    params.address,
                    exc,
                    endpoints[number].address,
                )
                break


async def _open_stream(
    params: ConnectionParameters, ssl_context: ssl.SSLContext | None, deadline: float
) -> trio.abc.Stream:
    stream: trio.abc.Stream
    try:
        with trio.fail_at(deadline):
            try:
                tcp = await trio.open_tcp_stream(params.host, params.port)
            except OSError as exc:
                raise connect_failed(params.address, exc) from exc
            stream = tcp
            if params.tls or ssl_context is not None:
                context = ssl_context if ssl_context is not None else params.ssl_context()
                assert context is not None
                tls = trio.SSLStream(tcp, context, server_hostname=params.tls_server_hostname)
                stream = tls
                try:
                    await tls.do_handshake()
                except trio.BrokenResourceError as exc:
                    await trio.aclose_forcefully(tcp)
                    # Trio wraps the TLS failure in an error without a message: raise the
                    # ssl.SSLError itself ("certificate verify failed: ..."), as the others do.
                    if isinstance(exc.__cause__, ssl.SSLError):
                        raise exc.__cause__ from None
                    raise
                except BaseException:
                    await trio.aclose_forcefully(tcp)
                    raise
    except trio.TooSlowError:
        raise ConnectionTimeoutError(
            f"could not connect to {params.address} within {params.connection_timeout} s"
        ) from None
    return stream


@asynccontextmanager
async def connect_stream(
    stream: trio.abc.Stream,
    url_or_params: str | ConnectionParameters = DEFAULT_URL,
    *,
    connection_name: str | None = None,
    protocol: str | ProtocolVersion | None = None,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
) -> AsyncIterator[Connection]:
    """Like :func:`connect`, over a stream you opened yourself (a Unix socket, an SSH
    tunnel, a ``trio.testing`` memory stream). Host, port and TLS settings of
    *url_or_params* are not used; the stream is closed on the way out. There is no second
    stream to reconnect on: ``"auto"`` tries 0-9-1 only."""
    params = ProtocolFallback(
        connection_parameters(url_or_params, connection_name, protocol)
    ).params
    deadline = trio.current_time() + params.connection_timeout
    async with _session(stream, params, deadline, tracer_provider, meter_provider) as conn:
        yield conn


@asynccontextmanager
async def _session(
    stream: trio.abc.Stream,
    params: ConnectionParameters,
    deadline: float,
    tracer_provider: TracerProvider | None,
    meter_provider: MeterProvider | None,
    recovery: RecoveryPolicy | None = None,
    reopen: Callable[[ConnectionParameters], Awaitable[trio.abc.Stream]] | None = None,
) -> AsyncIterator[Connection]:
    telemetry = connection_telemetry(params.host, params.port, tracer_provider, meter_provider)
    conn = Connection(stream, params, telemetry, recovery, reopen)
    failure: BaseException | None = None
    async with trio.open_nursery() as nursery:
        conn._nursery = nursery
        if recovery is not None:
            nursery.start_soon(conn._supervise, conn._finished)
        else:
            nursery.start_soon(conn._run_reader)
            nursery.start_soon(conn._wire.run_writer)
        try:
            await conn._handshake(deadline)
            yield conn
        except BaseException as exc:
            # Re-raised outside the nursery, so the caller sees the body's own exception
            # rather than an ExceptionGroup around it.
            failure = exc
        finally:
            await conn.aclose()
            nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure
