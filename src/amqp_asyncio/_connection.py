"""The asyncio connection: a ``Protocol`` feeds the core; calls write through it.

Everything runs on the event loop's thread, so there are no locks: a call asks the core for
its bytes and registers its future in the same synchronous step, which is what makes
cancellation safe (a cancelled call's future is simply done when its reply arrives, and the
reply is dropped; the core's per-channel FIFO stays in step with the broker).

Publishes and acks are not written one by one: they accumulate in the core's outbound buffer
and one ``transport.write`` per loop iteration (or per 64 KiB) sends them together. Requests
that wait for a reply flush at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl as ssl_module
import time
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final, Literal, final, overload

import attrs

from amqp_sansio import (
    NEED_DATA,
    BlockedByPeer,
    ChannelClosed,
    ChannelFlowChanged,
    ConnectionClosed,
    ConnectionLost,
    ConnectionOpened,
    HeartbeatTimeout,
    MethodReceived,
    RemoteProtocolError,
    Role,
    SecureRequested,
    UnblockedByPeer,
)
from amqp_sansio import Connection as CoreConnection
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
    RecoveryPolicy,
    RecoverySupervisor,
    Resume,
    Router,
    check_refresh_margin,
    connect_failed,
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
from ._recovery import RecoveryEvents, RecoveryObservable, carry_out, wait_for_recovery

if TYPE_CHECKING:
    import ssl
    from collections.abc import AsyncIterator
    from contextlib import AbstractAsyncContextManager

    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from amqp_sansio import Event, FieldTable, ProtocolVersion
    from amqp_sansio.client import (
        AsyncCredentialsProvider,
        Credentials,
        Endpoints,
        Reply,
        Telemetry,
    )

    from ._v0_10 import Connection010

__all__ = ["Connection", "RecoveryEvents", "connect"]

logger: Final = logging.getLogger("amqp_asyncio")

#: Publishes and acks accumulate up to this many octets before a write is forced.
_BATCH: Final = 64 * 1024


@final
class _Protocol(asyncio.Protocol):
    """Hands the transport's bytes and state changes to the :class:`Connection`.

    A plain ``Protocol``: the transport's reads arrive as new ``bytes`` objects, which the core
    keeps as they are; a ``BufferedProtocol``'s reused buffer would be copied out of each time.
    """

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        # A recovered connection gets a new transport: the old one's late callbacks are
        # ignored.
        self._generation = conn._generation

    def _current(self) -> bool:
        return self._generation == self._conn._generation

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        if not self._current():
            transport.abort()
            return
        self._conn._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._conn._flush()  # the protocol header

    def data_received(self, data: bytes) -> None:
        conn = self._conn
        if self._generation != conn._generation:
            return
        # The read's time: a silent peer is dead two intervals after its last octet.
        conn._core.receive_data(data, conn._loop.time())
        conn._process_events()

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._current():
            return
        self._conn._transport_lost(exc)
        if not self._conn._transport_gone.done():
            self._conn._transport_gone.set_result(None)

    def pause_writing(self) -> None:
        if self._current():
            self._conn._write_paused = True

    def resume_writing(self) -> None:
        if self._current():
            self._conn._write_paused = False
            self._conn._wake_drain_waiters()


@final
class Connection(RecoveryObservable[Router, ChannelBook]):
    """An open AMQP connection on an asyncio event loop (made by :func:`connect`).

    Use it from the loop's thread only. Every call that waits for the broker can be cancelled
    (``asyncio.timeout``, ``TaskGroup`` cancellation): the request is either not sent or its
    late reply is dropped, and the connection stays usable.

    With a :class:`~amqp_sansio.client.RecoveryPolicy` (``connect(..., recovery=...)``), a
    lost connection is recovered (see :doc:`/recovery`): its channels, publishers and consumer
    iterators carry on over the new one; :attr:`recovery_state` and :meth:`recovery_events`
    say what happens.
    """

    def __init__(
        self,
        params: ConnectionParameters,
        loop: asyncio.AbstractEventLoop,
        telemetry: Telemetry | None = None,
        recovery: RecoveryPolicy | None = None,
    ) -> None:
        #: The parameters the connection was made with.
        self.params: Final = params
        # OpenTelemetry hooks (amqp_sansio.client.instrument); None: tracing off.
        self._telemetry: Final = telemetry
        self._loop = loop
        self._generation = 0
        self._policy = recovery
        self._subscribers: set[RecoveryEvents] = set()
        # Recovery's decisions; this connection carries out its actions.
        self._supervisor: RecoverySupervisor[Router, ChannelBook] = RecoverySupervisor(
            params, recovery, emit=self._emit, logger=logger
        )
        self._epoch = self._supervisor.epoch
        self._supervisor.telemetry = telemetry
        #: While recovering: resolved when the connection is back (or recovery gave up).
        self._recovered: asyncio.Future[None] | None = None
        self._recovery_task: asyncio.Task[None] | None = None
        # The current attempt's restore: resolved when it is done, or with why it failed.
        self._restored: asyncio.Future[None] | None = None
        # The lost connection's channel objects, by their number there, until resumed.
        self._lost_channels: dict[int, Channel] = {}
        self._core = CoreConnection(Role.CLIENT, params.to_config(Message))
        self._book = Router(self._core, telemetry)
        self._supervisor.attach(self._book, self._channel_reopened)
        self._transport: asyncio.Transport | None = None
        self._opened: asyncio.Future[ConnectionOpened] = loop.create_future()
        self._finished: asyncio.Future[None] = loop.create_future()
        #: Set by connection_lost: a TLS transport needs loop iterations to shut down after close().
        self._transport_gone: asyncio.Future[None] = loop.create_future()
        self._unblocked: asyncio.Future[None] | None = None
        self._closing = False
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        # connect(credentials=...): the provider and what it last gave (see update_secret).
        self._credentials_provider: AsyncCredentialsProvider | None = None
        self._credentials: Credentials | None = None
        self._flush_scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        self._channels: dict[int, Channel] = {}
        #: The broker's ``server-properties`` (product, version, capabilities, ...).
        self.server_properties: FieldTable = {}

    def __repr__(self) -> str:
        state = "closed" if self.is_closed else "open"
        return f"<amqp_asyncio.Connection {self.params.address} {state}>"

    # --- public state -------------------------------------------------------------------------

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
        return self._book.error is not None or self._closing

    @property
    def close_error(self) -> AMQPError | None:
        """Why the connection ended (:class:`~amqp_sansio.client.ConnectionClosedError` with
        the broker's reply, :class:`~amqp_sansio.client.ConnectionLostError`); None while
        open."""
        return self._book.error

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

    async def wait_closed(self) -> AMQPError:
        """Wait until the connection ends (closed by either side or lost); returns why."""
        await asyncio.shield(self._finished)
        error = self._book.error
        assert error is not None
        return error

    async def wait_unblocked(self) -> None:
        """Return once the broker does not block publishers (at once when it does not)."""
        while self._unblocked is not None:
            await asyncio.shield(self._unblocked)

    # --- channels -----------------------------------------------------------------------------

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
        await self._wait_recovered()
        self._check_open()
        number = self._core.open_channel()
        waiter: asyncio.Future[Reply] = self._loop.create_future()
        book = self._book.channel_opening(number, waiter)
        ch = Channel(self, book)
        self._channels[number] = ch
        self._flush()
        await waiter
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
        await self._wait_recovered()
        self._check_open()
        request = self._core.update_secret(secret.encode(), reason)
        waiter: asyncio.Future[Reply] = self._loop.create_future()
        self._book.expect(0, request, waiter)
        self._flush()
        await waiter
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
            await asyncio.sleep(delay)
            if self._credentials is not current:
                continue  # a recovery logged in with newer ones meanwhile
            provider = self._credentials_provider
            assert provider is not None
            try:
                fresh = await provider()
            except Exception:
                logger.exception("the credentials provider failed; asking again in 1 s")
                await asyncio.sleep(1.0)
                continue
            try:
                await self.update_secret(fresh.password, "credentials refreshed")
            except AMQPError as exc:
                if self._recovered is None and self.is_closed:
                    return  # the connection is over: nothing to refresh
                logger.info("update-secret failed (%s); recovery logs in afresh", exc)
                continue
            self._credentials = fresh

    # --- closing ------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the connection (200) and wait for the broker's close-ok, shielded from
        cancellation and bounded by ``connection_timeout``. Pending calls raise
        :class:`~amqp_sansio.client.ConnectionClosedError`. Closing twice does nothing.
        Closing while recovering stops recovery."""
        task = self._recovery_task
        self._supervisor.close()
        if task is not None and not task.done():
            self._closing = True
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self._end_attempt()
            self._give_up(ConnectionClosedError("closed by the client", reply_code=200))
            return
        if self._book.error is None and not self._closing and self._transport is not None:
            self._closing = True
            self._core.close(200, "Normal shutdown")
            self._flush()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.params.connection_timeout):
                    await asyncio.shield(self._finished)
        if self._book.error is None:
            self._book.fail(ConnectionClosedError("closed by the client", reply_code=200))
        self._finish()
        if self._transport is not None and not self._transport_gone.done():
            try:
                async with asyncio.timeout(self.params.connection_timeout):
                    await asyncio.shield(self._transport_gone)
            except TimeoutError:
                self._transport.abort()

    # --- plumbing for channels ------------------------------------------------------------------

    def _check_open(self) -> None:
        error = self._book.error
        if error is not None:
            if self._recovered is not None:
                raise ConnectionLostError(
                    f"the connection to {self.params.address} is recovering ({error})"
                ) from error
            raise error
        if self._closing:
            raise ConnectionClosedError("the connection is closing", reply_code=200)

    def _flush(self) -> None:
        """Write everything the core queued."""
        data = self._core.data_to_send()
        if data and self._transport is not None and not self._finished.done():
            self._transport.write(data)

    def _flush_soon(self) -> None:
        """Publishes and acks: write within this loop iteration, or now once the core holds
        64 KiB."""
        if self._core.outbound_size >= _BATCH:
            self._flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._scheduled_flush)

    def _scheduled_flush(self) -> None:
        self._flush_scheduled = False
        self._flush()

    async def _drain(self) -> None:
        """Wait while the transport's write buffer is over its high-water mark."""
        while self._write_paused and not self._finished.done():
            waiter: asyncio.Future[None] = self._loop.create_future()
            self._drain_waiters.append(waiter)
            await waiter

    def _wake_drain_waiters(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    # --- events -------------------------------------------------------------------------------

    def _process_events(self) -> None:
        core = self._core
        book = self._book
        while True:
            try:
                event = core.next_event()
            except RemoteProtocolError as exc:
                report_protocol_error(logger, self.params.address, exc)
                book.fail(error_from(exc, connection=True))
                self._flush()  # the close answering the error
                self._finish()
                return
            if event is NEED_DATA:
                break
            if self._supervisor.restoring and self._restore_event(event):
                continue
            cls = type(event)
            if cls is Message:  # once per message (the core builds our class): no dispatch;
                # never waits (a consumer over its bound is paused by the router, flushed below)
                book.route_message(event)  # type: ignore[arg-type]
                continue
            book.handle(event)
            if cls is not MethodReceived:
                self._after_event(event)
        self._flush()  # automatic answers: close-ok, flow-ok, cancel-ok, heartbeats

    def _after_event(self, event: Event) -> None:
        cls = type(event)
        if cls is ConnectionOpened:
            assert isinstance(event, ConnectionOpened)
            self.server_properties = event.server_properties
            if not self._opened.done():
                self._opened.set_result(event)
            self._arm_timer()
        elif cls is ChannelClosed:
            assert isinstance(event, ChannelClosed)
            if event.channel not in self._book.channels:  # else reopened under its number
                self._channels.pop(event.channel, None)
            if event.by_peer:
                logger.info(
                    "the broker closed channel %d: %d %s",
                    event.channel,
                    event.reply_code,
                    event.reply_text,
                )
        elif cls is ChannelFlowChanged:
            assert isinstance(event, ChannelFlowChanged)
            ch = self._channels.get(event.channel)
            if ch is not None:
                ch._flow_changed(event.active)
        elif cls is BlockedByPeer:
            logger.warning("the broker blocks publishing: %s", self._book.blocked)
            if self._unblocked is None:
                self._unblocked = self._loop.create_future()
        elif cls is UnblockedByPeer:
            logger.info("the broker unblocked publishing")
            self._release_unblocked()
        elif cls is ConnectionClosed:
            assert isinstance(event, ConnectionClosed)
            if event.by_peer:
                # During the handshake connect() raises it: a warning would say it twice.
                report_closed_by_broker(
                    logger,
                    self.params.address,
                    error_from(event, connection=True),
                    handshaking=not self._opened.done(),
                )
            self._flush()  # the close-ok
            self._finish()
        elif cls is ConnectionLost:
            self._finish()
        elif cls is HeartbeatTimeout:
            error = HeartbeatTimeoutError(self.params.address, self._core.heartbeat)
            logger.warning("%s", error)
            self._book.fail(error)  # first, so what the core reports as lost gets it too
            if self._transport is not None:
                self._transport.abort()  # connection_lost reports what is lost
        elif cls is SecureRequested:
            # PLAIN, AMQPLAIN and EXTERNAL never get a challenge.
            self._core.close(540, "NOT_IMPLEMENTED - SASL challenges are not supported")

    def _release_unblocked(self) -> None:
        unblocked, self._unblocked = self._unblocked, None
        if unblocked is not None and not unblocked.done():
            unblocked.set_result(None)

    def _transport_lost(self, exc: Exception | None) -> None:
        if not self._finished.done():
            if exc is not None:
                logger.debug("transport error on %s: %r", self.params.address, exc)
            with contextlib.suppress(RuntimeError, RemoteProtocolError):
                self._core.receive_data(b"")
            with contextlib.suppress(RemoteProtocolError):
                while (event := self._core.next_event()) is not NEED_DATA:
                    self._book.handle(event)
            if self._book.error is None:
                error = ConnectionLostError(
                    f"the transport to {self.params.address} closed without a close handshake"
                )
                self._book.fail(error)
                if self._book.suspended is None and not self._closing and self._opened.done():
                    report_lost(logger, self.params.address, error)
        self._finish()

    def _finish(self) -> None:
        if self._supervisor.attempting:
            self._end_attempt()  # the recovery task reports it
            return
        if self._supervisor.recovering:
            return  # already suspended: the transport's own end comes after the close
        if self._book.suspended is not None and not self._closing:
            self._suspend()
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._opened.done():
            error = self._book.error
            self._opened.set_exception(
                error
                if error is not None
                else ConnectionLostError(
                    f"{self.params.address} closed the transport during the handshake"
                )
            )
            self._opened.exception()  # retrieved here: connect() may be gone already
        self._release_unblocked()
        self._wake_drain_waiters()
        for ch in self._channels.values():
            ch._flow_changed(True)
        self._channels.clear()
        if not self._finished.done():
            self._finished.set_result(None)
        if self._transport is not None:
            self._transport.close()
        self._set_closed()

    # --- recovery: the supervisor decides, this carries its actions out ----------------------

    def _channel_reopened(self, old: int, book: ChannelBook) -> None:
        """The router opened channel *old* again as *book* after a channel error."""
        ch = self._channels.pop(old, None)
        if ch is not None:
            ch._rebind(self._core, book)
            self._channels[book.number] = ch
        self._flush_soon()

    def _suspend(self) -> None:
        """The connection was lost and the policy recovers it: keep channels and consumers,
        reset what belonged to the transport, and start recovering."""
        cause = self._book.error
        assert cause is not None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._release_unblocked()  # blocked belongs to the lost connection
        self._wake_drain_waiters()
        channels = dict(self._channels)
        self._channels.clear()
        for ch in channels.values():
            ch._flow_changed(True)
        if self._transport is not None:
            self._transport.close()
        self._lost_channels = channels
        self._recovered = self._loop.create_future()
        self._supervisor.lost(LostChannels(self._book), cause, self._loop.time())
        self._recovery_task = self._loop.create_task(self._recover())

    async def _wait_recovered(self, octets: int = 0) -> None:
        """While recovering: wait for the connection to come back (see
        :func:`~amqp_asyncio._recovery.wait_for_recovery`)."""
        if self._recovered is not None:
            assert self._policy is not None
            await wait_for_recovery(
                self._supervisor, self._policy.publish_wait, self._recovered, octets
            )

    async def _recover(self) -> None:
        """Carry out the supervisor's actions until the connection is back or it gave up."""
        await carry_out(
            self._supervisor,
            self._loop,
            self._attempt,
            self._end_attempt,
            self._give_up,
        )

    async def _attempt(self, action: Connect) -> None:
        """Connect to the action's endpoint, restore, and resume the channels."""
        supervisor = self._supervisor
        loop = self._loop
        params = action.params
        provider = self._credentials_provider
        if provider is not None:  # the provider's current secret logs in
            try:
                credentials = await provider()
            except Exception as exc:  # a failed attempt: the policy says what comes next
                raise ConnectionLostError(f"the credentials provider failed: {exc!r}") from exc
            self._credentials = credentials
            supervisor.secret = credentials.password
            params = attrs.evolve(params, password=credentials.password)
        self._generation += 1
        self._core = CoreConnection(Role.CLIENT, params.to_config(Message))
        self._book = Router(self._core, self._telemetry)
        supervisor.attach(self._book, self._channel_reopened)
        self._transport = None
        self._opened = loop.create_future()
        self._transport_gone = loop.create_future()
        self._write_paused = False
        context = params.ssl_context() if params.tls else None
        async with asyncio.timeout_at(action.deadline):
            await loop.create_connection(
                lambda: _Protocol(self),
                params.host,
                params.port,
                ssl=context,
                server_hostname=params.tls_server_hostname if context is not None else None,
            )
            await asyncio.shield(self._opened)
            restored = self._restored = loop.create_future()
            supervisor.connected(self._book)
            self._flush()
            if supervisor.restoring:
                await restored
        resume = supervisor.next_action(loop.time())
        assert isinstance(resume, Resume)
        lost, self._lost_channels = self._lost_channels, {}
        for old, book in resume.channels.items():
            ch = lost.get(old)
            if ch is not None:
                ch._rebind(self._core, book)
                self._channels[book.number] = ch
        supervisor.resume()
        self._flush()
        recovered, self._recovered = self._recovered, None
        if recovered is not None and not recovered.done():
            recovered.set_result(None)

    def _restore_event(self, event: Event) -> bool:
        """An event while the topology is restored: the supervisor's first (True); a refused
        step fails the attempt, but the router still sees the event."""
        supervisor = self._supervisor
        restored = self._restored
        try:
            taken = supervisor.handle(event)
        except AMQPError as exc:
            if restored is not None and not restored.done():
                restored.set_exception(exc)
                restored.exception()  # retrieved: the attempt may be gone already
            return False
        if not supervisor.restoring and restored is not None and not restored.done():
            restored.set_result(None)
        return taken

    def _end_attempt(self) -> None:
        """An attempt failed (or its connection ended): close its transport."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        error = self._book.error or ConnectionLostError("the connection was lost during recovery")
        for future in (self._restored, self._opened):
            if future is not None and not future.done():
                future.set_exception(error)
                future.exception()  # retrieved: the attempt may be gone already
        if self._transport is not None:
            self._transport.abort()
            self._transport = None

    def _give_up(self, cause: AMQPError) -> None:
        """Recovery ended for good (the consumers ended with *cause*): what still waits gets
        it, and the connection is closed."""
        self._lost_channels = {}
        lost = Router(self._core)
        lost.fail(cause)
        self._book = lost
        done, self._recovered = self._recovered, None
        if done is not None and not done.done():
            done.set_result(None)
        self._channels.clear()
        if not self._finished.done():
            self._finished.set_result(None)
        self._set_closed()

    # --- heartbeats ---------------------------------------------------------------------------

    def _arm_timer(self) -> None:
        deadline = self._core.next_deadline()
        if deadline is not None and not self._finished.done():
            self._timer = self._loop.call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._core.handle_timer(self._loop.time())
        self._process_events()
        self._arm_timer()


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
        (:class:`~amqp_sansio.client.NotAllowed`), or closed the connection right after
        opening it.
    :raises ProtocolVersionRefused: the broker does not speak the version asked for (with
        ``"auto"``: none of those it offered).
    :raises OSError: the TCP connection failed.
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
    fresh: Credentials | None = None
    conn: Connection | None = None
    for number, endpoint in enumerate(endpoints, 1):
        fallback = ProtocolFallback(endpoint)
        while conn is None:
            params = fallback.params
            try:
                if credentials is not None:
                    fresh = await credentials()
                    params = attrs.evolve(params, password=fresh.password)
                telemetry = connection_telemetry(
                    params.host, params.port, tracer_provider, meter_provider
                )
                conn = await _open(params, ssl_context, telemetry, recovery)
            except ProtocolVersionRefused as exc:
                if not fallback.retry(exc):
                    raise
            except ENDPOINT_ERRORS as exc:
                if number == len(endpoints):
                    raise
                logger.warning(
                    "could not connect to %s (%s): trying %s",
                    params.address,
                    exc,
                    endpoints[number].address,
                )
                break
        if conn is not None:
            break
    assert conn is not None
    conn._supervisor.use_endpoints(endpoints, url_or_params)
    refresher = None
    if credentials is not None:
        conn._credentials_provider = credentials
        conn._credentials = fresh
        refresher = asyncio.create_task(conn._refresh_credentials(refresh_margin))
    try:
        yield conn
    finally:
        if refresher is not None:
            refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await refresher
        await conn.aclose()


async def _open(
    params: ConnectionParameters,
    ssl_context: ssl.SSLContext | None,
    telemetry: Telemetry | None,
    recovery: RecoveryPolicy | None = None,
) -> Connection:
    loop = asyncio.get_running_loop()
    conn = Connection(params, loop, telemetry, recovery)
    context = ssl_context
    if context is None and params.tls:
        context = params.ssl_context()
    try:
        async with asyncio.timeout(params.connection_timeout):
            try:
                await loop.create_connection(
                    lambda: _Protocol(conn),
                    params.host,
                    params.port,
                    ssl=context,
                    server_hostname=params.tls_server_hostname if context is not None else None,
                )
            except OSError as exc:
                if isinstance(exc, (TimeoutError, ssl_module.SSLError)):
                    raise  # the timeout below; TLS's own errors say enough
                raise connect_failed(params.address, exc) from exc
            await asyncio.shield(conn._opened)
        if conn._book.error is not None:  # closed in the read that brought open-ok
            raise conn._book.error
    except TimeoutError:
        conn._finish()
        raise ConnectionTimeoutError(
            f"could not connect to {params.address} within {params.connection_timeout} s"
        ) from None
    except BaseException:
        conn._finish()
        raise
    conn._supervisor.opened()
    logger.info(
        "connected to %s (vhost %r, heartbeat %d s)",
        params.address,
        params.virtual_host,
        conn.heartbeat,
    )
    return conn
