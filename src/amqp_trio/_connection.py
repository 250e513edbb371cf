"""The Trio client connection: ``connect()``, the reader task and event routing."""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Final, final

import trio

import amqp_sansio
from amqp_sansio import (
    NEED_DATA,
    BasicDeliver,
    BasicGetOk,
    BasicReturn,
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
    MessageReceived,
    MethodReceived,
    PublishConfirmed,
    PublishNacked,
    PublishReturned,
    RemoteProtocolError,
    Role,
    SecureRequested,
    UnblockedByPeer,
)
from amqp_sansio.client import (
    DEFAULT_URL,
    AMQPError,
    ChannelClosedError,
    ConfirmTracker,
    ConnectionClosedError,
    ConnectionLostError,
    ConnectionParameters,
    ConnectionTimeoutError,
    ConsumerCancelledError,
    connection_parameters,
    error_from,
)

from ._channel import Channel, Consumer, _Reply
from ._message import Message
from ._wire import Wire

if TYPE_CHECKING:
    import ssl
    from collections.abc import AsyncIterator

    from amqp_sansio import Event, FieldTable

__all__ = ["Connection", "connect", "connect_stream"]

logger: Final = logging.getLogger("amqp_trio")


@final
class Connection:
    """An open AMQP connection (from :func:`connect`).

    One reader task reads the socket and routes events to channels; one writer task flushes
    what the core queued and sends heartbeats. Both live in the nursery :func:`connect` opens,
    and end with the connection.
    """

    def __init__(self, stream: trio.abc.Stream, params: ConnectionParameters) -> None:
        #: The parameters the connection was made with.
        self.params: Final = params
        self._core = amqp_sansio.Connection(Role.CLIENT, params.to_config())
        self._wire = Wire(self._core, stream)
        self._channels: dict[int, Channel] = {}
        self._error: AMQPError | None = None
        self._closing = False
        # Set while the broker blocks publishers; the event fires on connection.unblocked.
        self._blocked: trio.Event | None = None
        self._blocked_reason: str | None = None
        self._opened = trio.Event()
        self._finished = trio.Event()
        self._handshaking = True
        self._needs_flush = False
        self._heartbeat_timed_out = False
        #: The broker's ``server-properties`` (product, version, capabilities, ...).
        self.server_properties: FieldTable = {}

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
        return self._blocked_reason

    @property
    def is_closed(self) -> bool:
        """Whether the connection is closed, closing or lost."""
        return self._error is not None or self._closing

    @property
    def close_error(self) -> AMQPError | None:
        """Why the connection ended (:class:`~amqp_sansio.client.ConnectionClosedError` with
        the broker's reply, :class:`~amqp_sansio.client.ConnectionLostError`); None while
        open."""
        return self._error

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
        self._check_open()
        try:
            number = self._core.open_channel()
        except LocalProtocolError as exc:
            self._raise_refused(exc)
            raise
        ch = Channel(self, number)
        self._channels[number] = ch
        reply = _Reply()
        ch._replies.append(reply)
        await reply.wait(self._flush)
        return ch

    # --- Closing ------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the connection (200) and wait for the broker's close-ok, shielded from
        cancellation and bounded by ``connection_timeout``. Pending calls raise
        :class:`~amqp_sansio.client.ConnectionClosedError`."""
        with trio.CancelScope(shield=True):
            if self._usable and not self._handshaking:
                self._closing = True
                with trio.move_on_after(self.params.connection_timeout):
                    self._core.close(200, "Normal shutdown")
                    with suppress(ConnectionLostError):
                        await self._flush()
                    await self._finished.wait()
            elif self._closing and self._error is None and not self._finished.is_set():
                # Another task's aclose() is waiting for close-ok: wait with it.
                with trio.move_on_after(self.params.connection_timeout):
                    await self._finished.wait()
            if self._error is None:
                self._die(ConnectionClosedError("closed by the client", reply_code=200))
            await self._wire.close_transport()

    # --- Plumbing -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closing:
            raise ConnectionClosedError("the connection is closing", reply_code=200)

    def _raise_refused(self, exc: LocalProtocolError) -> None:
        """After the core refused a send: raise the connection's own error when the refusal
        is about the connection's state (failed, closing, closed) rather than the request, so
        a core ``LocalProtocolError`` reaches the caller only for what the caller asked.
        Returns when the request itself was illegal (the caller re-raises *exc*)."""
        if self._error is not None:
            raise self._error from exc
        state = self._core.state
        if state is ConnectionState.ERROR:
            # The core failed before the reader saw why (a heartbeat timeout still queued).
            raise ConnectionLostError(f"the connection failed: {exc.reply_text}") from exc
        if self._closing or state is not ConnectionState.OPEN:
            raise ConnectionClosedError("the connection is closing", reply_code=200) from exc

    @property
    def _usable(self) -> bool:
        """Whether the core still takes sends: not failed, closing or closed on either side
        (internal bookkeeping sends nothing otherwise)."""
        return (
            self._error is None and not self._closing and self._core.state is ConnectionState.OPEN
        )

    async def _flush(self) -> None:
        await self._wire.flush()

    def _die(self, error: AMQPError) -> None:
        if self._error is not None:
            return
        self._error = error
        channels, self._channels = self._channels, {}
        for ch in channels.values():
            ch._fail(error)
        if self._blocked is not None:
            self._blocked.set()
            self._blocked = None
        self._opened.set()

    async def _handshake(self, deadline: float) -> None:
        self._wire.schedule_flush()  # the protocol header
        with trio.move_on_at(deadline) as scope:
            await self._opened.wait()
        if self._error is not None:
            raise self._error
        if scope.cancelled_caught:
            raise ConnectionTimeoutError(
                f"no connection.open-ok from {self.params.address} within "
                f"{self.params.connection_timeout} s"
            )
        logger.info(
            "connected to %s (vhost %r, heartbeat %d s)",
            self.params.address,
            self.params.virtual_host,
            self._core.heartbeat,
        )

    # --- The reader task ----------------------------------------------------------------------

    async def _run_reader(self) -> None:
        wire = self._wire
        failed = False
        try:
            while True:
                try:
                    event = wire.next_event()
                except RemoteProtocolError as exc:
                    failed = True
                    logger.warning("protocol error from the broker: %r", exc)
                    self._die(error_from(exc, connection=True))
                    break
                if event is NEED_DATA:
                    if self._needs_flush or self._handshaking:
                        self._needs_flush = False
                        wire.schedule_flush()
                    await wire.receive()
                    continue
                if type(event) is MessageReceived:
                    assert isinstance(event, MessageReceived)
                    waiting = self._on_message(event)
                    if waiting is not None:
                        await waiting[0]._deliver(waiting[1])
                    continue
                if await self._dispatch(event):
                    break
            # The last words (a close-ok, or the close answering a protocol error).
            with suppress(ConnectionLostError):
                await wire.flush()
            if failed:
                await wire.linger()  # let the broker read our close before the socket goes
            await wire.close_transport()
        finally:
            self._finished.set()

    async def _dispatch(self, event: Event) -> bool:
        """Route one event; True when the connection is finished."""
        kind = type(event)
        if kind is PublishConfirmed:
            assert isinstance(event, PublishConfirmed)
            ch = self._channels.get(event.channel)
            if ch is not None and ch._confirm is not None:
                ch._settle(ch._confirm.confirmed(event.publish_numbers))
        elif kind is MethodReceived:
            assert isinstance(event, MethodReceived)
            self._on_method(event)
        elif kind is PublishNacked:
            assert isinstance(event, PublishNacked)
            ch = self._channels.get(event.channel)
            if ch is not None and ch._confirm is not None:
                ch._settle(ch._confirm.nacked(event.publish_numbers))
        elif kind is PublishReturned:
            assert isinstance(event, PublishReturned)
            self._on_returned(
                event.channel, event.publish_number, event.method, event.properties, event.body
            )
        elif kind is ChannelOpened:
            assert isinstance(event, ChannelOpened)
            self._on_channel_opened(event.channel)
        elif kind is ChannelClosed:
            assert isinstance(event, ChannelClosed)
            self._on_channel_closed(event)
        elif kind is ConsumerCancelled:
            assert isinstance(event, ConsumerCancelled)
            self._needs_flush = True  # the core answered with cancel-ok
            ch = self._channels.get(event.channel)
            consumer = None if ch is None else ch._consumers.pop(event.consumer_tag, None)
            if consumer is not None:
                logger.info("the broker cancelled consumer %s", event.consumer_tag)
                consumer._end(ConsumerCancelledError(event.consumer_tag), fatal=False)
        elif kind is ChannelFlowChanged:
            assert isinstance(event, ChannelFlowChanged)
            self._needs_flush = True  # the core answered with flow-ok
            ch = self._channels.get(event.channel)
            if ch is not None:
                ch._flow_changed(event.active)
        elif kind is BlockedByPeer:
            assert isinstance(event, BlockedByPeer)
            logger.warning("the broker blocks publishing: %s", event.reason)
            self._blocked_reason = event.reason
            if self._blocked is None:
                self._blocked = trio.Event()
        elif kind is UnblockedByPeer:
            logger.info("the broker unblocked publishing")
            self._blocked_reason = None
            if self._blocked is not None:
                self._blocked.set()
                self._blocked = None
        elif kind is ConnectionOpened:
            assert isinstance(event, ConnectionOpened)
            self.server_properties = event.server_properties
            self._handshaking = False
            self._opened.set()
        elif kind is ConnectionClosed:
            assert isinstance(event, ConnectionClosed)
            self._on_connection_closed(event)
            return True
        elif kind is ConnectionLost:
            assert isinstance(event, ConnectionLost)
            self._die(ConnectionLostError(self._lost_text()))
            return True
        elif kind is HeartbeatTimeout:
            logger.warning(
                "no bytes from %s for two heartbeat intervals (%d s): dropping the connection",
                self.params.address,
                self._core.heartbeat,
            )
            self._heartbeat_timed_out = True
            await self._wire.close_transport()
            self._wire.end_of_stream()
        elif kind is SecureRequested:
            # PLAIN, AMQPLAIN and EXTERNAL never get a challenge.
            with suppress(LocalProtocolError):  # the core failed meanwhile: nothing to say
                self._core.close(540, "NOT_IMPLEMENTED - SASL challenges are not supported")
                self._needs_flush = True
        else:
            raise AssertionError(f"unexpected event {event!r}")
        return False

    def _lost_text(self) -> str:
        if self._heartbeat_timed_out:
            return (
                f"no bytes from {self.params.address} for two heartbeat intervals "
                f"({self._core.heartbeat} s)"
            )
        if self._handshaking:
            return f"{self.params.address} closed the transport during the handshake"
        return f"the transport to {self.params.address} closed without a close handshake"

    def _on_message(self, event: MessageReceived) -> tuple[Consumer, Message] | None:
        """Route a message; a delivery that must wait for room in its consumer's buffer is
        returned for the reader to await (synchronous otherwise: no coroutine per message)."""
        ch = self._channels.get(event.channel)
        if ch is None:
            return None  # a closing channel's delivery: the broker requeues it
        method = event.method
        if type(method) is BasicDeliver:
            assert isinstance(method, BasicDeliver)
            consumer = ch._consumers.get(method.consumer_tag)
            if consumer is None:
                # After basic_cancel: left unacknowledged, redelivered when the channel closes.
                logger.debug("delivery for stopped consumer %s dropped", method.consumer_tag)
                return None
            message = Message.from_content(event.channel, method, event.properties, event.body)
            message._owner = ch
            if not consumer._offer(message):
                return consumer, message
        elif type(method) is BasicGetOk:
            message = Message.from_content(event.channel, method, event.properties, event.body)
            message._owner = ch
            ch._resolve(message)
        elif type(method) is BasicReturn:
            assert isinstance(method, BasicReturn)
            self._on_returned(event.channel, None, method, event.properties, event.body)
        else:
            raise AssertionError(f"unexpected content method {method!r}")
        return None

    def _on_returned(
        self,
        channel: int,
        publish_number: int | None,
        method: BasicReturn,
        properties: amqp_sansio.ContentProperties,
        body: bytes | bytearray,
    ) -> None:
        ch = self._channels.get(channel)
        if ch is None:
            return
        tracker = ch._confirm if ch._confirm is not None else ConfirmTracker()
        error = tracker.returned(channel, publish_number, method, properties, body)
        if publish_number is None:
            logger.warning("%s (use confirm mode to get it as an exception)", error)

    def _on_method(self, event: MethodReceived) -> None:
        if event.request is None:
            logger.debug("ignored %r on channel %d", event.method, event.channel)
            return
        ch = self._channels.get(event.channel)
        if ch is not None:
            ch._resolve(event.method, event.request)

    def _on_channel_opened(self, number: int) -> None:
        ch = self._channels.get(number)
        if ch is None:
            return
        abandoned = bool(ch._replies) and ch._replies[0].abandoned
        ch._resolve(None)
        if abandoned:
            # open_channel() was cancelled: nobody will use or close this channel.
            ch._closing = True
            if self._usable:
                self._core.close_channel(number, 200, "Normal shutdown")
                self._needs_flush = True

    def _on_channel_closed(self, event: ChannelClosed) -> None:
        ch = self._channels.pop(event.channel, None)
        if event.by_peer:
            self._needs_flush = True  # the core answered with close-ok
            error: AMQPError = error_from(event, connection=False)
            logger.info("the broker closed channel %d: %s", event.channel, error)
        else:
            error = ChannelClosedError("closed by the client", reply_code=200)
        if ch is not None:
            ch._fail(error)

    def _on_connection_closed(self, event: ConnectionClosed) -> None:
        if event.by_peer:
            error: AMQPError = error_from(event, connection=True)
            logger.warning("the broker closed the connection: %s", error)
        else:
            error = ConnectionClosedError("closed by the client", reply_code=200)
        self._die(error)


@asynccontextmanager
async def connect(
    url_or_params: str | ConnectionParameters = DEFAULT_URL,
    *,
    ssl_context: ssl.SSLContext | None = None,
    connection_name: str | None = None,
) -> AsyncIterator[Connection]:
    """Connect to a broker for the duration of an ``async with`` block.

    *url_or_params* is an ``amqp://``/``amqps://`` URL (see
    :meth:`~amqp_sansio.client.ConnectionParameters.from_url`) or
    :class:`~amqp_sansio.client.ConnectionParameters`. TLS is used for ``amqps`` or when
    *ssl_context* is given (default context: :meth:`ConnectionParameters.ssl_context`).
    *connection_name* shows in the broker's management UI.

    Leaving the block closes the connection (200) and waits for the broker's close-ok.

    :raises ConnectionTimeoutError: TCP, TLS and AMQP handshake took longer than
        ``connection_timeout``.
    :raises ConnectionClosedError: the broker refused the login (403) or the virtual host
        (:class:`~amqp_sansio.client.NotAllowed`).
    :raises OSError: the TCP connection failed.
    """
    params = connection_parameters(url_or_params, connection_name)
    deadline = trio.current_time() + params.connection_timeout
    stream: trio.abc.Stream
    try:
        with trio.fail_at(deadline):
            tcp = await trio.open_tcp_stream(params.host, params.port)
            stream = tcp
            if params.tls or ssl_context is not None:
                context = ssl_context if ssl_context is not None else params.ssl_context()
                assert context is not None
                tls = trio.SSLStream(tcp, context, server_hostname=params.tls_server_hostname)
                stream = tls
                try:
                    await tls.do_handshake()
                except BaseException:
                    await trio.aclose_forcefully(tcp)
                    raise
    except trio.TooSlowError:
        raise ConnectionTimeoutError(
            f"could not connect to {params.address} within {params.connection_timeout} s"
        ) from None
    async with _session(stream, params, deadline) as conn:
        yield conn


@asynccontextmanager
async def connect_stream(
    stream: trio.abc.Stream,
    url_or_params: str | ConnectionParameters = DEFAULT_URL,
    *,
    connection_name: str | None = None,
) -> AsyncIterator[Connection]:
    """Like :func:`connect`, over a stream you opened yourself (a Unix socket, an SSH
    tunnel, a ``trio.testing`` memory stream). Host, port and TLS settings of
    *url_or_params* are not used; the stream is closed on the way out."""
    params = connection_parameters(url_or_params, connection_name)
    deadline = trio.current_time() + params.connection_timeout
    async with _session(stream, params, deadline) as conn:
        yield conn


@asynccontextmanager
async def _session(
    stream: trio.abc.Stream, params: ConnectionParameters, deadline: float
) -> AsyncIterator[Connection]:
    conn = Connection(stream, params)
    failure: BaseException | None = None
    async with trio.open_nursery() as nursery:
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
