"""Channels, consumers and pipelined publishers of the Trio client."""

from __future__ import annotations

import logging
from collections import deque
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Final, NoReturn, final

import trio

from amqp_sansio import (
    BasicAck,
    BasicGet,
    BasicProperties,
    BasicPublish,
    ChannelState,
    ConfirmSelect,
    LocalProtocolError,
    QueueDeclareOk,
    TxCommit,
    TxRollback,
    TxSelect,
)
from amqp_sansio import _client_requests as request
from amqp_sansio._client_shared import PublisherCounts
from amqp_sansio.client import (
    AMQPError,
    ChannelClosedError,
    ConfirmTracker,
    PublishOutcome,
)

from ._message import Message
from ._wire import YIELD_EVERY

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable
    from types import TracebackType

    from amqp_sansio import FieldTable, Method
    from amqp_sansio._method import Buffer

    from ._connection import Connection

__all__ = ["Channel", "Consumer", "PublishTicket", "Publisher"]

logger: Final = logging.getLogger("amqp_trio")


@final
class _Reply:
    """One synchronous request's outcome, resolved by the reader task.

    A caller cancelled while waiting leaves it in the channel's FIFO: the reply still arrives
    (the core matches it to ``request``) and is consumed and dropped here.
    """

    __slots__ = ("_done", "abandoned", "error", "request", "value")

    def __init__(self, request: Method | None = None) -> None:
        #: What this reply answers (None: channel.open); replies are found by it, not by
        #: position, because the core lets RabbitMQ's consume-ok/cancel-ok come late.
        self.request = request
        self._done = trio.Event()
        self.value: Method | Message | None = None
        self.error: AMQPError | None = None
        self.abandoned = False

    def resolve(self, value: Method | Message | None) -> None:
        self.value = value
        self._done.set()

    def fail(self, error: AMQPError) -> None:
        if not self._done.is_set():
            self.error = error
            self._done.set()

    async def wait(self, flush: Callable[[], Awaitable[None]]) -> Method | Message | None:
        """Flush the request out, then wait for the reply; a caller that leaves early
        (cancelled, or the flush failed) abandons the reply."""
        try:
            await flush()
            await self._done.wait()
        except BaseException:
            self.abandoned = True
            raise
        if self.error is not None:
            raise self.error
        return self.value


@final
class PublishTicket:
    """One publish made through a :class:`Publisher`: its number, and its outcome once the
    broker settled it. Await :meth:`wait` to get the outcome of this publish alone."""

    __slots__ = ("_done", "_error", "_event", "_owner", "number")

    def __init__(self, number: int, owner: Publisher | None) -> None:
        #: The channel's publish sequence number (1 for the first publish after confirm.select).
        self.number: Final = number
        self._owner = owner
        self._done = False
        self._error: AMQPError | None = None
        self._event: trio.Event | None = None

    def __repr__(self) -> str:
        state = "pending" if not self._done else ("failed" if self._error else "confirmed")
        return f"<PublishTicket {self.number} {state}>"

    @property
    def done(self) -> bool:
        """Whether the broker settled the publish (or the connection ended)."""
        return self._done

    @property
    def error(self) -> AMQPError | None:
        """The failure (:class:`~amqp_sansio.client.PublishNackedError`,
        :class:`~amqp_sansio.client.MessageReturnedError`, a connection error); None while
        pending or when confirmed."""
        return self._error

    async def wait(self) -> None:
        """Wait until the broker confirmed this publish.

        :raises PublishNackedError: the broker nacked it.
        :raises MessageReturnedError: a mandatory publish was returned unroutable.
        :raises ConnectionClosedError: the connection closed first (also
            :class:`ChannelClosedError`, :class:`ConnectionLostError`).
        """
        if not self._done:
            if self._event is None:
                self._event = trio.Event()
            await self._event.wait()
        if self._error is not None:
            raise self._error

    def _settle(self, outcome: PublishOutcome) -> None:
        if self._done:
            return
        self._done = True
        self._error = outcome
        if self._event is not None:
            self._event.set()
        if self._owner is not None:
            self._owner._settled(outcome)


@final
class Consumer:
    """The messages of one ``basic.consume``, as an async iterator.

    Deliveries wait in a buffer of ``buffer_size`` messages (by default the channel's
    prefetch count): when it is full the connection's reader stops reading the socket, so a
    slow consumer slows the broker down instead of filling memory. Iteration ends with
    :class:`~amqp_sansio.client.ConsumerCancelledError` after the buffered messages when the
    broker cancels the consumer, with the close error when the channel or connection closes,
    and normally (``StopAsyncIteration``) after :meth:`Channel.basic_cancel`.
    """

    def __init__(self, channel: Channel, consumer_tag: str, *, no_ack: bool, buffer_size: int):
        self._channel = channel
        #: The consumer's tag (generated by the client when none was given).
        self.consumer_tag: Final = consumer_tag
        self.no_ack: Final = no_ack
        self.buffer_size: Final = buffer_size
        self._send, self._receive = trio.open_memory_channel[Message](buffer_size)
        self._error: AMQPError | None = None
        self._fatal = False
        #: Set when the client asked to stop: deliveries no longer wait for buffer space.
        self._stopping = False
        self._ended = False
        self._send_scope: trio.CancelScope | None = None
        self._unyielded = 0
        self.dropped = 0

    def __repr__(self) -> str:
        return f"<Consumer {self.consumer_tag!r} on channel {self._channel.number}>"

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> Message:
        if self._fatal and self._error is not None:
            raise self._error
        # A buffered message is taken without a scheduling round (the reader filled the
        # buffer from one read); the iterator still yields every YIELD_EVERY messages and is
        # checked for cancellation before anything is taken, so no message is lost to it.
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            message = self._receive.receive_nowait()
        except trio.WouldBlock:
            self._unyielded = 0
            try:
                return await self._receive.receive()
            except (trio.EndOfChannel, trio.ClosedResourceError):
                self._stop()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            self._stop()
        self._unyielded += 1
        if self._unyielded >= YIELD_EVERY:
            self._unyielded = 0
            await trio.lowlevel.cancel_shielded_checkpoint()
        return message

    def _stop(self) -> NoReturn:
        if self._error is not None:
            raise self._error from None
        raise StopAsyncIteration from None

    @property
    def buffered(self) -> int:
        """Messages received from the broker and not handed out yet."""
        return self._receive.statistics().current_buffer_used

    # --- Called by the reader task --------------------------------------------------------

    def _offer(self, message: Message) -> bool:
        """Buffer or drop *message* without waiting; False when the buffer is full (then
        :meth:`_deliver` waits for room)."""
        if self._stopping:
            self._drop(1)
            return True
        try:
            self._send.send_nowait(message)
        except trio.WouldBlock:
            return False
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._drop(1)
        return True

    async def _deliver(self, message: Message) -> None:
        if self._offer(message):
            return
        # Backpressure: the reader waits here, so the socket is not read until the
        # application takes a message (or stops the consumer, which cancels this scope).
        self._channel._conn._wire.pause_reading()
        with trio.CancelScope() as scope:
            self._send_scope = scope
            try:
                await self._send.send(message)
                return
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            finally:
                self._send_scope = None
        self._drop(1)

    def _drop(self, count: int) -> None:
        self.dropped += count

    def _stop_buffering(self) -> None:
        self._stopping = True
        if self._send_scope is not None:
            self._send_scope.cancel()

    def _end(self, error: AMQPError | None, *, fatal: bool) -> None:
        """No more deliveries: after the buffered ones (not ``fatal``) iteration raises
        *error* or stops."""
        if self._ended:
            return
        self._ended = True
        self._error = error
        self._fatal = fatal
        self._stop_buffering()
        self._send.close()

    async def _close_receiving(self) -> None:
        left = self.buffered
        await self._receive.aclose()
        if left:
            self._drop(left)


@final
class Publisher(PublisherCounts):
    """Pipelined publishing with publisher confirms (from :meth:`Channel.publisher`).

    :meth:`publish` returns as soon as the message is written, waiting only while ``window``
    publishes are unconfirmed. Each outcome is counted (:attr:`confirmed`, :attr:`nacked`,
    :attr:`returned`, :attr:`failed`) and every failure is kept until taken with
    :meth:`take_failures` or raised on leaving the ``async with`` block as an
    ``ExceptionGroup``. The tickets :meth:`publish` returns can be awaited one by one.
    Memory stays bounded: at most ``window`` publishes in flight and at most ``window`` kept
    failures (when that many pile up, the next :meth:`publish` raises them).
    """

    def __init__(self, channel: Channel, window: int) -> None:
        super().__init__(window)
        self._channel = channel
        self._room = trio.lowlevel.ParkingLot()
        self._idle = trio.lowlevel.ParkingLot()

    async def publish(
        self,
        body: Buffer,
        *,
        exchange: str = "",
        routing_key: str = "",
        properties: BasicProperties | None = None,
        mandatory: bool = False,
    ) -> PublishTicket:
        """Publish one message; waits while ``window`` publishes are unconfirmed (and while
        the broker blocks publishers). Returns its ticket.

        :raises ExceptionGroup: ``window`` failures piled up untaken; they are raised here
            (and forgotten) so a failing stream of publishes stops early.
        """
        if len(self._failures) >= self.window:
            self._raise_failures()
        channel = self._channel
        while self._in_flight >= self.window or not channel._may_publish():
            if self._in_flight >= self.window:
                await self._room.park()
            else:
                await channel._wait_publishable()
        channel._check_open()
        # Checked before anything is queued: a cancelled publish is not sent.
        await trio.lowlevel.checkpoint_if_cancelled()
        ticket = channel._publish_tracked(
            body, exchange, routing_key, properties, mandatory, owner=self
        )
        self._count_published()
        wire = channel._conn._wire
        if wire.note_output(_METHOD_SIZE + len(body)):
            await wire.output_turn()
        return ticket

    async def wait_for_confirms(self) -> None:
        """Wait until every publish so far is settled (failures are kept, not raised)."""
        while self._in_flight:
            await self._idle.park()

    def _settled(self, outcome: PublishOutcome) -> None:
        self._count_settled(outcome)
        self._room.unpark()
        if not self._in_flight:
            self._idle.unpark_all()

    async def __aenter__(self) -> Publisher:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            return  # the block failed: do not wait for confirms on the way out
        await self.wait_for_confirms()
        if self._failures:
            self._raise_failures()


@final
class Channel:
    """An open AMQP channel. Every method waits for the broker's reply where the protocol has
    one; cancelling a call (a cancel scope, a timeout) is always safe: the request is either
    not sent or its late reply is consumed and dropped.

    When the broker closes the channel (a soft error), the pending call raises the error for
    its reply code (:class:`~amqp_sansio.client.NotFound`, ...), later calls raise it too,
    and the connection stays usable.
    """

    def __init__(self, connection: Connection, number: int) -> None:
        self._conn = connection
        self._core = connection._core
        #: The channel id.
        self.number: Final = number
        self._replies: deque[_Reply] = deque()
        self._consumers: dict[str, Consumer] = {}
        self._closed_error: AMQPError | None = None
        self._closed = trio.Event()
        self._closing = False
        self._prefetch_count = 0
        self._confirm: ConfirmTracker | None = None
        self._unconfirmed: dict[int, PublishTicket] = {}
        self._flow_active = True
        self._flow_resumed = trio.Event()
        self._flow_resumed.set()
        # The last publish's method, reused while the next one is the same: the core keeps
        # no reference to it, and building one costs about a tenth of a publish.
        self._last_publish = BasicPublish()

    def __repr__(self) -> str:
        state = "closed" if self.is_closed else "open"
        return f"<amqp_trio.Channel {self.number} {state}>"

    @property
    def is_closed(self) -> bool:
        """Whether the channel is closed (or closing)."""
        return self._closed_error is not None or self._closing

    @property
    def in_confirm_mode(self) -> bool:
        """Whether :meth:`confirm_select` was called."""
        return self._confirm is not None

    # --- Plumbing -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        self._conn._check_open()
        if self._closed_error is not None:
            raise self._closed_error
        if self._closing:
            raise ChannelClosedError("the channel is closing", reply_code=200)

    def _send(self, method: Method) -> _Reply:
        """Queue a request in the core and its waiter in our FIFO, with no await between."""
        self._check_open()
        try:
            self._core.send_method(self.number, method)
        except LocalProtocolError as exc:
            self._raise_refused(exc)
            raise
        reply = _Reply(method)
        self._replies.append(reply)
        return reply

    async def _call(self, method: Method) -> Method | Message | None:
        reply = self._send(method)
        return await reply.wait(self._conn._flush)

    def _send_detached(self, method: Method) -> None:
        """Send a request whose reply nobody waits for (consumed and dropped on arrival);
        nothing when the channel or the connection is closing or gone."""
        if self.is_closed or not self._conn._usable:
            return
        self._send(method).abandoned = True
        self._conn._wire.schedule_flush()

    async def _send_no_reply(self, method: Method) -> None:
        self._check_open()
        await trio.lowlevel.checkpoint_if_cancelled()  # before sending: cancelled = not sent
        try:
            self._core.send_method(self.number, method)
        except LocalProtocolError as exc:
            self._raise_refused(exc)
            raise
        await self._conn._wire.queue_output(_METHOD_SIZE, urgent=True)

    def _raise_refused(self, exc: LocalProtocolError) -> None:
        """After the core refused a send: raise the connection's or the channel's error when
        the refusal is about their state; return when the request itself was illegal."""
        self._conn._raise_refused(exc)
        if self._closed_error is not None:
            raise self._closed_error from exc
        if self._closing or self._core.channel_state(self.number) is not ChannelState.OPEN:
            raise ChannelClosedError("the channel is closing", reply_code=200) from exc

    # --- Called by the reader task ------------------------------------------------------------

    def _resolve(self, value: Method | Message | None, request: Method | None = None) -> None:
        """Resolve the waiter of *request*, which the core named (None: the oldest waiter,
        for channel.open-ok); get-ok, which names no request, takes the oldest basic.get."""
        replies = self._replies
        reply = None
        if isinstance(value, Message):
            reply = next((r for r in replies if isinstance(r.request, BasicGet)), None)
        elif replies and (request is None or replies[0].request is request):
            reply = replies[0]
        else:
            reply = next((r for r in replies if r.request is request), None)
        if reply is None:
            raise AssertionError(f"a reply on channel {self.number} with no waiter: {value!r}")
        if reply is replies[0]:
            replies.popleft()
        else:
            replies.remove(reply)
        if reply.abandoned:
            logger.debug("channel %d: dropped the late reply %r", self.number, value)
        reply.resolve(value)

    def _fail(self, error: AMQPError) -> None:
        """The channel is gone (closed by either side, or the connection ended)."""
        if self._closed_error is None:
            self._closed_error = error
        fatal = not (isinstance(error, ChannelClosedError) and error.reply_code == 200)
        while self._replies:
            self._replies.popleft().fail(error)
        for consumer in self._consumers.values():
            consumer._end(error, fatal=fatal)
        self._consumers.clear()
        unconfirmed, self._unconfirmed = self._unconfirmed, {}
        for ticket in unconfirmed.values():
            ticket._settle(error)
        self._flow_resumed.set()
        self._closed.set()

    def _settle(self, outcomes: list[tuple[int, PublishOutcome]]) -> None:
        pop = self._unconfirmed.pop
        for number, outcome in outcomes:
            ticket = pop(number, None)
            if ticket is not None:
                ticket._settle(outcome)

    def _flow_changed(self, active: bool) -> None:
        self._flow_active = active
        if active:
            self._flow_resumed.set()
        elif self._flow_resumed.is_set():
            self._flow_resumed = trio.Event()

    # --- Lifecycle ----------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the channel (200) and wait for the broker's close-ok, shielded from
        cancellation and bounded by the connection's ``connection_timeout``. Unacknowledged
        deliveries go back to their queues. Closing twice does nothing, and neither does
        closing a channel whose connection is closing or closed (that closes the channel)."""
        if self.is_closed:
            return
        self._closing = True
        if not self._conn._usable:
            return
        with trio.CancelScope(shield=True):
            with trio.move_on_after(self._conn.params.connection_timeout):
                try:
                    self._core.close_channel(self.number, 200, "Normal shutdown")
                except LocalProtocolError:
                    return  # the broker closed the channel meanwhile (its error is kept)
                try:
                    await self._conn._flush()
                except AMQPError:
                    return
                await self._closed.wait()

    # --- exchange -----------------------------------------------------------------------------

    async def exchange_declare(
        self,
        exchange: str,
        exchange_type: str = "direct",
        *,
        passive: bool = False,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: FieldTable | None = None,
    ) -> None:
        """Declare an exchange (``passive``: only check that it exists, else NotFound)."""
        await self._call(
            request.exchange_declare(
                exchange,
                exchange_type,
                passive=passive,
                durable=durable,
                auto_delete=auto_delete,
                internal=internal,
                arguments=arguments,
            )
        )

    async def exchange_delete(self, exchange: str, *, if_unused: bool = False) -> None:
        """Delete an exchange."""
        await self._call(request.exchange_delete(exchange, if_unused=if_unused))

    async def exchange_bind(
        self,
        destination: str,
        source: str,
        routing_key: str = "",
        *,
        arguments: FieldTable | None = None,
    ) -> None:
        """Bind exchange *destination* to exchange *source* (RabbitMQ extension)."""
        await self._call(
            request.exchange_bind(destination, source, routing_key, arguments=arguments)
        )

    async def exchange_unbind(
        self,
        destination: str,
        source: str,
        routing_key: str = "",
        *,
        arguments: FieldTable | None = None,
    ) -> None:
        """Remove an exchange-to-exchange binding."""
        await self._call(
            request.exchange_unbind(destination, source, routing_key, arguments=arguments)
        )

    # --- queue --------------------------------------------------------------------------------

    async def queue_declare(
        self,
        queue: str = "",
        *,
        passive: bool = False,
        durable: bool = False,
        exclusive: bool = False,
        auto_delete: bool = False,
        arguments: FieldTable | None = None,
    ) -> QueueDeclareOk:
        """Declare a queue (``""``: the broker names it); returns ``queue.declare-ok`` with
        ``queue``, ``message_count`` and ``consumer_count``."""
        reply = await self._call(
            request.queue_declare(
                queue,
                passive=passive,
                durable=durable,
                exclusive=exclusive,
                auto_delete=auto_delete,
                arguments=arguments,
            )
        )
        return request.declared_queue(reply)

    async def queue_bind(
        self,
        queue: str,
        exchange: str,
        routing_key: str = "",
        *,
        arguments: FieldTable | None = None,
    ) -> None:
        """Bind a queue to an exchange."""
        await self._call(request.queue_bind(queue, exchange, routing_key, arguments=arguments))

    async def queue_unbind(
        self,
        queue: str,
        exchange: str,
        routing_key: str = "",
        *,
        arguments: FieldTable | None = None,
    ) -> None:
        """Remove a queue binding."""
        await self._call(request.queue_unbind(queue, exchange, routing_key, arguments=arguments))

    async def queue_purge(self, queue: str) -> int:
        """Remove every ready message from a queue; returns how many."""
        return request.message_count(await self._call(request.queue_purge(queue)))

    async def queue_delete(
        self, queue: str, *, if_unused: bool = False, if_empty: bool = False
    ) -> int:
        """Delete a queue; returns how many messages it held."""
        reply = await self._call(
            request.queue_delete(queue, if_unused=if_unused, if_empty=if_empty)
        )
        return request.message_count(reply)

    # --- basic: settings ----------------------------------------------------------------------

    async def basic_qos(
        self, prefetch_count: int = 0, *, prefetch_size: int = 0, global_: bool = False
    ) -> None:
        """Limit unacknowledged deliveries (per consumer; ``global_``: per channel). Consumers
        started afterwards get a buffer of ``prefetch_count`` messages."""
        await self._call(
            request.basic_qos(prefetch_count, prefetch_size=prefetch_size, global_=global_)
        )
        self._prefetch_count = prefetch_count

    async def confirm_select(self) -> None:
        """Put the channel in confirm mode: :meth:`basic_publish` then waits for the broker's
        ack, and :meth:`publisher` pipelines. Calling it again does nothing."""
        if self._confirm is not None:
            self._check_open()
            return
        reply = self._send(ConfirmSelect())
        # From here on the core numbers publishes; track before anything can be published.
        self._confirm = ConfirmTracker()
        await reply.wait(self._conn._flush)

    # --- basic: publishing --------------------------------------------------------------------

    def _may_publish(self) -> bool:
        return self._conn._blocked is None and self._flow_active

    async def _wait_publishable(self) -> None:
        self._check_open()
        conn = self._conn
        while conn._blocked is not None or not self._flow_active:
            blocked = conn._blocked
            if blocked is not None:
                await blocked.wait()
            else:
                await self._flow_resumed.wait()
            self._check_open()

    def _publish_now(
        self,
        body: Buffer,
        exchange: str,
        routing_key: str,
        properties: BasicProperties | None,
        mandatory: bool,
    ) -> int | None:
        method = self._last_publish
        if (
            method.routing_key != routing_key
            or method.exchange != exchange
            or method.mandatory != mandatory
        ):
            method = BasicPublish(exchange=exchange, routing_key=routing_key, mandatory=mandatory)
            self._last_publish = method
        try:
            return self._core.publish(
                self.number, method, _NO_PROPERTIES if properties is None else properties, body
            )
        except LocalProtocolError as exc:
            self._raise_refused(exc)
            raise

    async def basic_publish(
        self,
        body: Buffer,
        *,
        exchange: str = "",
        routing_key: str = "",
        properties: BasicProperties | None = None,
        mandatory: bool = False,
    ) -> None:
        """Publish one message.

        Waits while the broker blocks publishers (``connection.blocked``) or paused the
        channel (``channel.flow``): wrap it in ``trio.fail_after()`` for a timeout. In confirm
        mode it returns when the broker acked the message.

        :raises PublishNackedError: confirm mode: the broker nacked it.
        :raises MessageReturnedError: confirm mode: a ``mandatory`` publish was unroutable.
        """
        conn = self._conn
        if conn._blocked is not None or not self._flow_active:
            await self._wait_publishable()
        elif (
            conn._error is not None
            or conn._closing
            or self._closed_error is not None
            or self._closing
        ):
            self._check_open()  # raises the error
        # Checked before anything is queued: a cancelled publish is not sent. After this
        # point nothing raises Cancelled until the message is queued (see queue_output).
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._confirm is None:
            self._publish_now(body, exchange, routing_key, properties, mandatory)
            wire = conn._wire
            # queue_output in two steps: most publishes need no coroutine for it.
            if wire.note_output(_METHOD_SIZE + len(body)):
                await wire.output_turn()
            return
        ticket = self._publish_tracked(body, exchange, routing_key, properties, mandatory, None)
        await self._conn._wire.queue_output(_METHOD_SIZE + len(body))
        await ticket.wait()

    def _publish_tracked(
        self,
        body: Buffer,
        exchange: str,
        routing_key: str,
        properties: BasicProperties | None,
        mandatory: bool,
        owner: Publisher | None,
    ) -> PublishTicket:
        """Publish in confirm mode and register the ticket that the broker's ack settles."""
        if self._confirm is None:
            raise RuntimeError("the channel is not in confirm mode: call confirm_select()")
        number = self._publish_now(body, exchange, routing_key, properties, mandatory)
        assert number is not None
        ticket = PublishTicket(number, owner)
        self._unconfirmed[number] = ticket
        return ticket

    @asynccontextmanager
    async def publisher(self, window: int = 1000) -> AsyncIterator[Publisher]:
        """A pipelined publisher keeping at most *window* publishes unconfirmed (puts the
        channel in confirm mode). Leaving the block waits for every confirm and raises the
        failures as an ``ExceptionGroup``; see :class:`Publisher`."""
        pub = Publisher(self, window)
        await self.confirm_select()
        async with pub:
            yield pub

    # --- basic: consuming ---------------------------------------------------------------------

    @asynccontextmanager
    async def basic_consume(
        self,
        queue: str,
        *,
        no_ack: bool = False,
        exclusive: bool = False,
        consumer_tag: str = "",
        arguments: FieldTable | None = None,
        buffer_size: int | None = None,
    ) -> AsyncIterator[Consumer]:
        """Start a consumer; iterate over it with ``async for``.

        The buffer holds *buffer_size* messages (default: the channel's prefetch count, or
        1000 without one). Leaving the block cancels the consumer (``basic.cancel``, waiting
        for cancel-ok) **without** rejecting buffered messages (RabbitMQ stream queues close
        the connection on a reject): messages received but not handed out stay
        unacknowledged and are redelivered when the channel closes (or after
        :meth:`basic_recover`).
        """
        size = request.consumer_buffer_size(buffer_size, self._prefetch_count)
        tag = request.consumer_tag(consumer_tag, "amqp-trio", self._consumers)
        consumer = Consumer(self, tag, no_ack=no_ack, buffer_size=size)
        reply = self._send(
            request.basic_consume(
                queue, tag, no_ack=no_ack, exclusive=exclusive, arguments=arguments
            )
        )
        # Registered before consume-ok: deliveries may follow it in the same read.
        self._consumers[tag] = consumer
        try:
            await reply.wait(self._conn._flush)
        except BaseException:
            if self._consumers.pop(tag, None) is not None:
                consumer._end(None, fatal=True)
                self._send_detached(request.basic_cancel(tag))
            raise
        try:
            yield consumer
        finally:
            await self._finish_consumer(consumer)

    async def _finish_consumer(self, consumer: Consumer) -> None:
        consumer._stop_buffering()
        await consumer._close_receiving()
        tag = consumer.consumer_tag
        if self._consumers.get(tag) is consumer and not self.is_closed and self._conn._usable:
            with trio.CancelScope(shield=True):
                with trio.move_on_after(self._conn.params.connection_timeout):
                    with suppress(AMQPError):
                        await self._call(request.basic_cancel(tag))
        if self._consumers.get(tag) is consumer:
            del self._consumers[tag]
        consumer._end(None, fatal=True)
        self._report_dropped(consumer)

    def _report_dropped(self, consumer: Consumer) -> None:
        request.report_dropped(
            logger,
            consumer.consumer_tag,
            consumer.dropped,
            no_ack=consumer.no_ack,
            channel=self.number,
        )

    async def basic_cancel(self, consumer_tag: str) -> None:
        """Cancel a consumer: its iterator hands out what is buffered, then stops."""
        consumer = self._consumers.get(consumer_tag)
        if consumer is not None:
            consumer._stop_buffering()
        await self._call(request.basic_cancel(consumer_tag))
        if consumer is not None and self._consumers.get(consumer_tag) is consumer:
            del self._consumers[consumer_tag]
            consumer._end(None, fatal=False)
            self._report_dropped(consumer)

    async def basic_get(self, queue: str, *, no_ack: bool = False) -> Message | None:
        """Fetch one message (None when the queue is empty)."""
        reply = await self._call(request.basic_get(queue, no_ack=no_ack))
        return request.got_message(reply, Message)

    # --- basic: settling ----------------------------------------------------------------------

    async def basic_ack(self, delivery_tag: int, *, multiple: bool = False) -> None:
        """Acknowledge a delivery (``multiple``: and every earlier one)."""
        await self._send_no_reply(BasicAck(delivery_tag=delivery_tag, multiple=multiple))

    async def basic_nack(
        self, delivery_tag: int, *, multiple: bool = False, requeue: bool = True
    ) -> None:
        """Negatively acknowledge deliveries (RabbitMQ extension)."""
        await self._send_no_reply(
            request.basic_nack(delivery_tag, multiple=multiple, requeue=requeue)
        )

    async def basic_reject(self, delivery_tag: int, *, requeue: bool = True) -> None:
        """Reject one delivery."""
        await self._send_no_reply(request.basic_reject(delivery_tag, requeue=requeue))

    async def basic_recover(self, requeue: bool = True) -> None:
        """Redeliver every unacknowledged message of the channel (RabbitMQ supports only
        ``requeue=True``)."""
        await self._call(request.basic_recover(requeue))

    # --- tx and flow --------------------------------------------------------------------------

    async def tx_select(self) -> None:
        """Put the channel in transaction mode."""
        await self._call(TxSelect())

    async def tx_commit(self) -> None:
        """Commit the current transaction."""
        await self._call(TxCommit())

    async def tx_rollback(self) -> None:
        """Roll back the current transaction."""
        await self._call(TxRollback())

    async def flow(self, active: bool) -> bool:
        """Ask the broker to pause (False) or resume (True) deliveries; returns the state the
        broker confirmed. RabbitMQ refuses ``flow(False)`` with 540, closing the connection."""
        return request.flow_state(await self._call(request.flow(active)))


_NO_PROPERTIES: Final = BasicProperties()
#: Roughly what a method frame (plus a content header) adds to a body on the wire.
_METHOD_SIZE: Final = 64
