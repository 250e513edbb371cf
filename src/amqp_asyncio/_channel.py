"""Channels, consumers, pipelined publishers and messages of the asyncio adapter."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Final, final

import attrs

from amqp_sansio import (
    BasicCancel,
    BasicConsume,
    BasicGet,
    BasicProperties,
    BasicPublish,
    MessageReceived,
    client,
)
from amqp_sansio.client import (
    AMQPError,
    AsyncMessage,
    ChannelClosedError,
    ConsumerCancelledError,
    PublisherCounts,
    PublishTicketState,
    return_sink,
)

from ._generated_channel import ChannelMethods

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from types import TracebackType

    from amqp_sansio import Connection as CoreConnection
    from amqp_sansio import FieldTable, Method
    from amqp_sansio.client import ChannelBook, Reply, ReturnHandler

    from ._connection import Connection

__all__ = ["Channel", "Consumer", "Message", "PublishTicket", "Publisher"]

logger: Final = logging.getLogger("amqp_asyncio")

_NO_PROPERTIES: Final = BasicProperties()
_bound_message: Final = client.bound_message


@final
@attrs.define(kw_only=True, slots=True, weakref_slot=False)
class Message(AsyncMessage):
    """A delivered message (see :class:`amqp_sansio.client.Message` for the fields) that can be
    settled on the channel it arrived on."""


@final
class _ConfirmFuture:
    """The confirm sink of one waiting ``basic_publish``."""

    __slots__ = ("future",)

    def __init__(self, future: asyncio.Future[None]) -> None:
        self.future = future

    def settle(self, publish_number: int, error: AMQPError | None, /) -> None:
        future = self.future
        if future.done():
            return  # the publisher was cancelled: the outcome has nobody to go to
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)


@final
class PublishTicket(PublishTicketState):
    """One publish made through a :class:`Publisher`: its number, and its outcome once the
    broker settled it. Await :meth:`wait` to get the outcome of this publish alone."""

    __slots__ = ("_future",)

    def __init__(self, number: int, owner: Publisher) -> None:
        super().__init__(number, owner)
        self._future: asyncio.Future[None] | None = None

    async def wait(self) -> None:
        """Wait until the broker confirmed this publish.

        :raises PublishNackedError: the broker nacked it.
        :raises MessageReturnedError: a mandatory publish was returned unroutable.
        :raises ConnectionClosedError: the connection closed first (also
            :class:`ChannelClosedError`, :class:`ConnectionLostError`).
        """
        if not self._done:
            if self._future is None:
                self._future = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._future)
        if self._error is not None:
            raise self._error

    def settle(self, publish_number: int, error: AMQPError | None, /) -> None:
        future = self._future
        if self._record(error) and future is not None and not future.done():
            future.set_result(None)


@final
class Publisher(PublisherCounts):
    """Pipelined publishing with publisher confirms (from :meth:`Channel.publisher`).

    :meth:`publish` returns as soon as the message is queued for writing, waiting only while
    ``window`` publishes are unconfirmed. Each outcome is counted (:attr:`confirmed`,
    :attr:`nacked`, :attr:`returned`, :attr:`failed`) and every failure is kept until taken
    with :meth:`take_failures` or raised on leaving the ``async with`` block as an
    ``ExceptionGroup``. The tickets :meth:`publish` returns can be awaited one by one. Memory
    stays bounded: at most ``window`` publishes in flight and at most ``window`` kept failures
    (when that many pile up, the next :meth:`publish` raises them).
    """

    def __init__(self, channel: Channel, window: int) -> None:
        super().__init__(window)
        self._channel = channel
        self._conn = channel._conn
        self._room: asyncio.Future[None] | None = None
        self._idle: asyncio.Future[None] | None = None

    async def publish(
        self,
        body: bytes | bytearray | memoryview,
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
        while True:
            # Also when the connection was lost while this publish waited for room.
            if self._conn._recovered is not None:
                await self._conn._wait_recovered(len(body))
            if self._in_flight < self.window:
                break
            if self._room is None:
                self._room = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._room)
        channel = self._channel
        await channel._wait_publishable(len(body))
        number = channel._publish_now(body, exchange, routing_key, properties, mandatory)
        if number is None:
            raise RuntimeError("the channel is not in confirm mode: call confirm_select()")
        ticket = PublishTicket(number, self)
        channel._book.confirms[number] = ticket
        self._count_published()
        conn = self._conn
        conn._flush_soon()
        if conn._write_paused:
            await conn._drain()
        return ticket

    async def wait_for_confirms(self) -> None:
        """Wait until every publish so far is settled (failures are kept, not raised)."""
        while self._in_flight:
            if self._idle is None:
                self._idle = asyncio.get_running_loop().create_future()
            self._conn._flush()
            await asyncio.shield(self._idle)

    def _settled(self, outcome: AMQPError | None) -> None:
        self._count_settled(outcome)
        room = self._room
        if room is not None:
            self._room = None
            if not room.done():
                room.set_result(None)
        if not self._in_flight and self._idle is not None:
            idle, self._idle = self._idle, None
            if not idle.done():
                idle.set_result(None)

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
class Consumer:
    """The messages of one ``basic.consume``, as an async iterator.

    Deliveries wait in a buffer of ``buffer_size`` messages (by default the channel's
    prefetch count). The connection never stops reading for a full buffer (a close, a
    heartbeat, a cancel is always seen at once): with a prefetch the broker sends no more than
    that, and a consumer without one is paused (``basic.cancel``) while it holds more than
    ``buffer_size`` and resumed once the application took half (see :doc:`/recovery`).
    Iteration ends with
    :class:`~amqp_sansio.client.ConsumerCancelledError` after the buffered messages when the
    broker cancels the consumer, with the close error when the channel or connection closes,
    and normally (``StopAsyncIteration``) after :meth:`Channel.basic_cancel`.
    """

    def __init__(
        self,
        channel: Channel,
        consumer_tag: str,
        *,
        no_ack: bool,
        buffer_size: int,
        queue: str = "",
    ) -> None:
        self._channel = channel
        #: The queue consumed from.
        self.queue: Final = queue
        # OpenTelemetry: the connection's hooks, and the message being processed.
        self._telemetry = channel._conn._telemetry
        self._processing: client.Processing | None = None
        #: The consumer's tag (generated by the client when none was given).
        self.consumer_tag: Final = consumer_tag
        self.no_ack: Final = no_ack
        self.buffer_size: Final = buffer_size
        # Messages, not events: a delivery waiting here is one object fewer for the garbage
        # collector to walk and promote (buffers of thousands made full collections frequent).
        self._buffer: deque[Message] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._ended = False
        self._error: AMQPError | None = None
        self._fatal = False
        # The buffer went over buffer_size: the router may have paused the consumer, so the
        # iterator asks it to resume once half is taken.
        self._over = False
        #: Deliveries received but dropped undelivered (after the consumer was stopped).
        self.dropped = 0

    def __repr__(self) -> str:
        return f"<Consumer {self.consumer_tag!r} on channel {self._channel.number}>"

    @property
    def buffered(self) -> int:
        """Messages received from the broker and not handed out yet."""
        return len(self._buffer)

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> Message:
        if self._processing is not None:
            self._end_processing()
        buffer = self._buffer
        while True:
            if self._fatal and self._error is not None:
                raise self._error
            if buffer:
                message = buffer.popleft()
                if self._over and len(buffer) <= self.buffer_size // 2:
                    self._over = False
                    self._channel._resume_consumer(self.consumer_tag)
                return message if self._telemetry is None else self._process(message)
            if self._ended:
                if self._error is not None:
                    raise self._error
                raise StopAsyncIteration
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None

    def _process(self, message: Message) -> Message:
        """OpenTelemetry: the "process" span of *message*, current until the next one."""
        assert self._telemetry is not None
        self._processing = self._telemetry.process(self.queue, message, no_ack=self.no_ack)
        return message

    def _end_processing(self) -> None:
        processing, self._processing = self._processing, None
        if processing is not None:
            processing.end()

    async def get(self, timeout: float | None = None) -> Message | None:
        """The next message, or None after *timeout* seconds without one, or once the consumer
        ended normally (:meth:`Channel.basic_cancel`) and its buffer is empty: ``async for``
        with a limit on each wait. A timeout takes nothing from the buffer (as when the task
        is cancelled), so no message is lost to it.

        :raises ConsumerCancelledError: the broker cancelled the consumer (after the buffer
            was handed out).
        :raises ChannelClosedError: the channel was closed (at once, dropping the buffer: its
            deliveries can no longer be acknowledged); likewise
            :class:`~amqp_sansio.client.ConnectionClosedError` and
            :class:`~amqp_sansio.client.ConnectionLostError`.
        """
        try:
            async with asyncio.timeout(timeout):
                return await self.__anext__()
        except StopAsyncIteration:
            return None
        except TimeoutError:
            return None

    # --- ConsumerSink: called while the connection routes events ------------------------------

    def deliver(self, event: MessageReceived, book: ChannelBook, /) -> bool:
        """Buffer a delivery that came on *book*'s channel; False when the buffer holds more
        than ``buffer_size`` (the router may pause the consumer)."""
        if self._ended:
            self.dropped += 1
            return True
        buffer = self._buffer
        buffer.append(self._channel._message(event, book))
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if len(buffer) > self.buffer_size:
            self._over = True
            return False
        return True

    def finish(self, error: AMQPError | None, by_us: bool, /) -> None:
        # Ended by us (a cancel, a close we asked for): iteration stops after the buffered
        # deliveries. A closed channel or connection ends iteration at once (the buffered
        # deliveries can no longer be acked); a broker cancel comes after what is buffered.
        if by_us:
            error = None
        self._end(error, fatal=error is not None and not isinstance(error, ConsumerCancelledError))

    def cancelling(self) -> None:
        """Deliveries until cancel-ok are buffered as before."""

    def _end(self, error: AMQPError | None, *, fatal: bool) -> None:
        if self._ended:
            return
        self._ended = True
        self._error = error
        self._fatal = fatal
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def drop_unhanded(self) -> int:
        """The connection was lost: deliveries not handed out yet can no longer be acked, and
        the broker requeued them (they come again); no_ack ones were settled and stay."""
        if self.no_ack:
            return 0
        dropped = len(self._buffer)
        self._buffer.clear()
        self._over = False
        return dropped

    def _drop_buffer(self) -> None:
        left = len(self._buffer)
        self._buffer.clear()
        self.dropped += left


@final
class Channel(ChannelMethods):
    """An open AMQP channel. Every method waits for the broker's reply where the protocol has
    one; cancelling a call (``asyncio.timeout``, a task group) is always safe: the request is
    either not sent or its late reply is dropped.

    When the broker closes the channel (a soft error), the pending call raises the error for
    its reply code (:class:`~amqp_sansio.client.NotFound`, ...), later calls raise it too,
    and the connection stays usable.
    """

    def __init__(self, connection: Connection, book: ChannelBook) -> None:
        self._conn = connection
        self._core = connection._core
        self._book = book
        self._return_handler: ReturnHandler | None = None
        book.return_sink = return_sink(None)
        #: The channel id (on the current connection: a recovered channel may get another).
        self.number = book.number
        self._flow_resumed: asyncio.Future[None] | None = None
        # The last publish's method, used again while the next has the same fields (an
        # attrs instance per publish costs about as much as encoding it).
        self._last_publish = BasicPublish()

    def _rebind(self, core: CoreConnection, book: ChannelBook) -> None:
        """The connection was recovered: carry on as channel *book* of its new core."""
        self._core = core
        self._book = book
        book.return_sink = return_sink(self._return_handler)
        self.number = book.number
        self._flow_resumed = None

    def __repr__(self) -> str:
        state = "closed" if self.is_closed else "open"
        return f"<amqp_asyncio.Channel {self.number} {state}>"

    def on_return(self, handler: ReturnHandler | None) -> None:
        """Hand every mandatory publish the broker returns outside confirm mode to
        *handler*, as a :class:`~amqp_sansio.client.MessageReturnedError` (``reply_code``,
        ``reply_text``, ``message``; ``publish_number`` None), like pika's return callback.
        None (the default) only logs a warning. In confirm mode a return is the publish's
        outcome instead (its confirm raises it) and never reaches *handler*. The handler
        stays set when the connection recovers.

        *handler* runs in the connection's reader task: it must not block (to process
        returns in a task of your own, put them into an :class:`asyncio.Queue` with
        ``put_nowait``, see :doc:`/asyncio`). An exception from it is logged and dropped.
        """
        self._return_handler = handler
        self._book.return_sink = return_sink(handler)

    @property
    def is_closed(self) -> bool:
        """Whether the channel is closed (or closing)."""
        return self._book.error is not None or self._book.close_waiter is not None

    @property
    def in_confirm_mode(self) -> bool:
        """Whether :meth:`confirm_select` was called."""
        return self._book.confirm_mode

    # --- plumbing -----------------------------------------------------------------------------

    def _has_reply(self, method: Method) -> bool:
        return self._core.protocol.has_reply(method.NAME)

    def _check_open(self) -> None:
        error = self._book.error
        if error is not None:
            raise error
        self._conn._check_open()
        if self._book.close_waiter is not None:
            raise ChannelClosedError("the channel is closing", reply_code=200)

    def _send(self, method: Method, consumer: Consumer | None = None) -> asyncio.Future[Reply]:
        """Queue a request in the core and its future in the FIFO, with no await between."""
        self._check_open()
        method = self._core.protocol.adapt(method)  # a 0-8/0-9 connection's own class
        self._core.send_method(self.number, method)
        future: asyncio.Future[Reply] = self._conn._loop.create_future()
        self._book.expect(method, future, consumer)
        return future

    async def _call(self, method: Method, consumer: Consumer | None = None) -> Reply:
        if self._conn._recovered is not None:
            await self._conn._wait_recovered()
        telemetry = self._conn._telemetry
        if telemetry is not None and type(method) is BasicGet:
            assert isinstance(method, BasicGet)
            with telemetry.receive(self.number, method) as receiving:
                future = self._send(method, consumer)
                self._conn._flush()
                reply = await future
                receiving.got(reply)
            return reply
        future = self._send(method, consumer)
        self._conn._flush()
        return await future

    async def _wait_for_book(self, book: object, /) -> None:
        """AsyncSettler: a delivery on *book*, the new connection's channel, is settled once
        the restore resumed this channel on it (until then it is on the lost one)."""
        if book is not self._book and self._conn._recovered is not None:
            await self._conn._wait_recovered()

    async def _send_no_reply(self, method: Method, traced: bool = False) -> None:
        telemetry = self._conn._telemetry
        if telemetry is not None and not traced:
            settling = telemetry.settle(self.number, method)
            if settling is not None:
                with settling:
                    await self._send_no_reply(method, True)
                return
        self._check_open()
        self._core.send_method(self.number, self._core.protocol.adapt(method))
        self._conn._flush_soon()

    def _message(self, event: MessageReceived, book: ChannelBook | None = None) -> Message:
        """*event* as a message settled on this channel; *book*: the channel incarnation it
        came on (a delivery), else the current one (a get-ok)."""
        conn = self._conn
        if conn._policy is None:
            return _bound_message(Message, event, self, None)
        return _bound_message(Message, event, self, conn._epoch, book or self._book)

    def _resume_consumer(self, consumer_tag: str) -> None:
        """A consumer over its bound caught up: consume again if the router paused it."""
        if self._conn._book.resume_consumer(self.number, consumer_tag):
            self._conn._flush_soon()

    def _got_message(self, reply: Reply) -> Message | None:
        event = client.got_message(reply, MessageReceived)
        return None if event is None else self._message(event)

    def _flow_changed(self, active: bool) -> None:
        if active:
            resumed, self._flow_resumed = self._flow_resumed, None
            if resumed is not None and not resumed.done():
                resumed.set_result(None)
        elif self._flow_resumed is None:
            self._flow_resumed = self._conn._loop.create_future()

    # --- lifecycle ----------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the channel (200) and wait for the broker's close-ok, shielded from
        cancellation and bounded by the connection's ``connection_timeout``. Unacknowledged
        deliveries go back to their queues. Closing twice does nothing."""
        if self.is_closed or self._conn.is_closed:
            return
        future: asyncio.Future[Reply] = self._conn._loop.create_future()
        self._core.close_channel(self.number, 200, "Normal shutdown")
        self._book.close_waiter = future
        self._conn._flush()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._conn.params.connection_timeout):
                await asyncio.shield(future)

    # --- basic: publishing --------------------------------------------------------------------

    async def _wait_publishable(self, octets: int = 0) -> None:
        conn = self._conn
        while True:
            # A connection lost while this publish waited: wait for it as during recovery.
            if conn._recovered is not None:
                await conn._wait_recovered(octets)
            self._check_open()
            if conn._unblocked is not None:
                await asyncio.shield(conn._unblocked)
            elif self._flow_resumed is not None:
                await asyncio.shield(self._flow_resumed)
            else:
                return

    def _publish_now(
        self,
        body: bytes | bytearray | memoryview,
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
        telemetry = self._conn._telemetry
        if telemetry is None:
            number = self._core.publish(
                self.number, method, _NO_PROPERTIES if properties is None else properties, body
            )
        else:
            number = telemetry.publish(
                self.number,
                exchange,
                routing_key,
                properties,
                memoryview(body).nbytes,
                partial(self._core.publish, self.number, method, body=body),
            )
        book = self._book
        if book.kept is not None and number is not None:
            book.keep(number, method, _NO_PROPERTIES if properties is None else properties, body)
        return number

    async def basic_publish(
        self,
        body: bytes | bytearray | memoryview,
        *,
        exchange: str = "",
        routing_key: str = "",
        properties: BasicProperties | None = None,
        mandatory: bool = False,
    ) -> None:
        """Publish one message.

        Waits while the broker blocks publishers (``connection.blocked``) or paused the
        channel (``channel.flow``): wrap it in ``asyncio.timeout()`` for a timeout. In
        confirm mode it returns when the broker acked the message.

        :raises PublishNackedError: confirm mode: the broker nacked it.
        :raises MessageReturnedError: confirm mode: a ``mandatory`` publish was unroutable.
        """
        conn = self._conn
        if conn._recovered is not None:
            await conn._wait_recovered(len(body))
        if conn._unblocked is not None or self._flow_resumed is not None:
            await self._wait_publishable(len(body))
        else:
            self._check_open()
        number = self._publish_now(body, exchange, routing_key, properties, mandatory)
        if number is None:
            conn._flush_soon()
            if conn._write_paused:
                await conn._drain()
            return
        future: asyncio.Future[None] = conn._loop.create_future()
        self._book.confirms[number] = _ConfirmFuture(future)
        conn._flush()
        await future

    def publisher(self, window: int = 1000) -> client.PublisherBlock[Publisher]:
        """A pipelined publisher keeping at most *window* publishes unconfirmed (puts the
        channel in confirm mode), for the length of an ``async with`` block::

            async with channel.publisher(window=100) as pub:
                await pub.publish(body, routing_key=queue)

        Leaving the block waits for every confirm and raises the failures as an
        ``ExceptionGroup``; see :class:`Publisher`. What it returns is not the publisher
        itself: ``pub = channel.publisher(); pub.publish(...)`` is a ``TypeError`` that says
        so."""
        return client.PublisherBlock(self._publisher(window))

    @asynccontextmanager
    async def _publisher(self, window: int) -> AsyncIterator[Publisher]:
        pub = Publisher(self, window)
        await self.confirm_select()
        async with pub:
            yield pub

    # --- basic: consuming ---------------------------------------------------------------------

    def basic_consume(
        self,
        queue: str,
        *,
        no_ack: bool = False,
        exclusive: bool = False,
        consumer_tag: str = "",
        arguments: FieldTable | None = None,
        buffer_size: int | None = None,
    ) -> client.ConsumeBlock[Consumer]:
        """Start a consumer for the length of an ``async with`` block; iterate over it with
        ``async for``, or take one message at a time with :meth:`Consumer.get`::

            async with channel.basic_consume(queue) as consumer:
                async for message in consumer:
                    ...

        The buffer holds *buffer_size* messages (default: the channel's prefetch count, or
        1000 without one). Leaving the block cancels the consumer (``basic.cancel``, waiting
        for cancel-ok) **without** rejecting buffered messages (RabbitMQ stream queues close
        the connection on a reject): messages received but not handed out stay
        unacknowledged and are redelivered when the channel closes (or after
        :meth:`basic_recover`).
        """
        return client.ConsumeBlock(
            self._consume(
                queue,
                no_ack=no_ack,
                exclusive=exclusive,
                consumer_tag=consumer_tag,
                arguments=arguments,
                buffer_size=buffer_size,
            )
        )

    @asynccontextmanager
    async def _consume(
        self,
        queue: str,
        *,
        no_ack: bool = False,
        exclusive: bool = False,
        consumer_tag: str = "",
        arguments: FieldTable | None = None,
        buffer_size: int | None = None,
    ) -> AsyncIterator[Consumer]:
        if self._conn._recovered is not None:
            await self._conn._wait_recovered()
        size = client.consumer_buffer_size(buffer_size, self._book.prefetch_count)
        tag = client.consumer_tag(consumer_tag, "amqp-asyncio", self._book.consumers)
        consumer = Consumer(self, tag, no_ack=no_ack, buffer_size=size, queue=queue)
        method = BasicConsume(
            queue=queue,
            consumer_tag=tag,
            no_ack=no_ack,
            exclusive=exclusive,
            arguments=arguments or {},
        )
        future = self._send(method, consumer)
        self._conn._flush()
        try:
            await future
        except asyncio.CancelledError:
            # If the broker still confirms the consume, the connection cancels it.
            consumer._end(None, fatal=True)
            raise
        try:
            yield consumer
        finally:
            await self._finish_consumer(consumer)

    async def _finish_consumer(self, consumer: Consumer) -> None:
        consumer._end_processing()
        tag = consumer.consumer_tag
        if self._book.consumers.get(tag) is consumer and not self.is_closed:
            with contextlib.suppress(AMQPError, TimeoutError):
                async with asyncio.timeout(self._conn.params.connection_timeout):
                    await asyncio.shield(self._call(BasicCancel(consumer_tag=tag)))
        consumer._end(None, fatal=True)
        consumer._drop_buffer()
        self._report_dropped(consumer)

    def _report_dropped(self, consumer: Consumer) -> None:
        client.report_dropped(
            logger,
            consumer.consumer_tag,
            consumer.dropped,
            no_ack=consumer.no_ack,
            channel=self.number,
        )
