"""Channels, consumers, windowed publishers and messages of the blocking adapter."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from functools import partial
from typing import TYPE_CHECKING, Final, final

import attrs

from amqp_sansio import (
    BasicAck,
    BasicConsume,
    BasicGet,
    BasicNack,
    BasicProperties,
    BasicPublish,
    BasicReject,
    MessageReceived,
    client,
)
from amqp_sansio.client import (
    AMQPError,
    ChannelClosedError,
    ConsumerCancelledError,
    PublisherCounts,
    PublishTicketState,
    return_sink,
)
from amqp_sansio.client import Message as _BaseMessage

from ._generated_channel import ChannelMethods
from ._waiter import Waiter

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import TracebackType

    from amqp_sansio import FieldTable, Method
    from amqp_sansio.client import ChannelBook, Epoch, Reply, ReturnHandler

    from ._connection import Connection
    from ._inbox import Inbox

__all__ = ["Channel", "Consumer", "Message", "PublishTicket", "Publisher"]

_NO_PROPERTIES: Final = BasicProperties()
#: A publisher reads the confirms that came every this many publishes (a non-blocking read).
_READ_EVERY: Final = 32
_bound_message: Final = client.bound_message

logger = logging.getLogger("amqp_blocking")


@final
@attrs.define(kw_only=True, slots=True, weakref_slot=False)
class Message(_BaseMessage):
    """A received message with ``ack()``, ``nack()`` and ``reject()`` bound to its channel."""

    _owner: Channel | None = attrs.field(default=None, repr=False, eq=False, alias="owner")
    #: The epoch of the connection it came on (0 without recovery).
    epoch: int = attrs.field(default=0, eq=False)
    _epoch_cell: Epoch | None = attrs.field(default=None, repr=False, eq=False, alias="epoch_cell")
    # The channel book it came on (under a recovery policy): see AsyncMessage.
    _came_on: ChannelBook | None = attrs.field(default=None, repr=False, eq=False, alias="came_on")

    def _channel_object(self) -> Channel:
        if self._owner is None:
            raise RuntimeError("this message was not received on a channel")
        return self._owner

    def ack(self, *, multiple: bool = False) -> None:
        """Acknowledge this message (and, with *multiple*, every earlier one).

        :raises StaleDeliveryError: it came on a connection since lost (recovery), and the
            policy raises for those (it is never sent: the broker redelivers it).
        """
        self._channel_object()._settle(
            BasicAck(delivery_tag=self.delivery_tag, multiple=multiple), self
        )

    def nack(self, *, multiple: bool = False, requeue: bool = True) -> None:
        """Refuse this message (and, with *multiple*, every earlier one)."""
        self._channel_object()._settle(
            BasicNack(delivery_tag=self.delivery_tag, multiple=multiple, requeue=requeue), self
        )

    def reject(self, *, requeue: bool = True) -> None:
        """Refuse this message."""
        self._channel_object()._settle(
            BasicReject(delivery_tag=self.delivery_tag, requeue=requeue), self
        )


@final
class Channel(ChannelMethods):
    """An open channel. Thread-safe; a context manager that closes it.

    Every call that waits for the broker takes ``timeout`` (seconds, None: no limit) and
    raises :class:`TimeoutError` when it passes; a reply arriving later is dropped.
    """

    def __init__(self, connection: Connection, book: ChannelBook) -> None:
        self._connection = connection
        self._book = book
        self._return_handler: ReturnHandler | None = None
        book.return_sink = return_sink(None)
        self._number = book.number
        # The last publish's method, used again while the next has the same fields.
        self._last_publish = BasicPublish()

    def _rebind_locked(self, book: ChannelBook) -> None:
        """The connection was recovered: carry on as channel *book* of its new core."""
        self._book = book
        book.return_sink = return_sink(self._return_handler)
        self._number = book.number

    def __repr__(self) -> str:
        return f"<amqp_blocking.Channel {self._number}>"

    def on_return(self, handler: ReturnHandler | None) -> None:
        """Hand every mandatory publish the broker returns outside confirm mode to
        *handler*, as a :class:`~amqp_sansio.client.MessageReturnedError` (``reply_code``,
        ``reply_text``, ``message``; ``publish_number`` None), like pika's return callback.
        None (the default) only logs a warning. In confirm mode a return is the publish's
        outcome instead (its confirm raises it) and never reaches *handler*. The handler
        stays set when the connection recovers.

        *handler* runs on the thread reading the socket (the connection's I/O thread, or an
        application thread waiting for the broker): it must not block or call the
        connection (put the returns into a :class:`queue.Queue` and take them from your
        thread, see :doc:`/blocking`). An exception from it is logged and dropped.
        """
        self._return_handler = handler
        self._book.return_sink = return_sink(handler)

    @property
    def number(self) -> int:
        """The channel id (on the current connection: a recovered channel may get another)."""
        return self._number

    @property
    def is_closed(self) -> bool:
        """Whether the channel is closed (or closing), or its connection is."""
        return self._book.error is not None or self._book.close_waiter is not None

    @property
    def in_confirm_mode(self) -> bool:
        """Whether :meth:`confirm_select` was called."""
        return self._book.confirm_mode

    @property
    def connection(self) -> Connection:
        """The connection this channel belongs to."""
        return self._connection

    def __enter__(self) -> Channel:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self, *, timeout: float | None = None) -> None:
        """Close the channel (reply code 200). Unacknowledged deliveries go back to their
        queues (RabbitMQ's rule); nothing is rejected. Does nothing if already closed."""
        conn = self._connection
        waiter = Waiter()
        with conn._lock:
            if self._book.error is not None or conn._book.error is not None or conn._finished:
                return
            existing = self._book.close_waiter
            if existing is not None:
                assert isinstance(existing, Waiter)
                waiter = existing
            else:
                conn._core.close_channel(self._number)
                self._book.close_waiter = waiter
                conn._flush_locked()
        conn._wait_reply(waiter, timeout)

    # --- plumbing -----------------------------------------------------------------------------

    def _check_locked(self, octets: int = 0) -> None:
        conn = self._connection
        if conn._recovering:
            conn._wait_recovered_locked(octets)
        error = self._book.error
        if error is not None:
            raise error
        self._connection._check_open()
        if self._book.close_waiter is not None:
            raise ChannelClosedError("the channel is closing", reply_code=200)

    def _wait_publishable_locked(self, timeout: float | None) -> None:
        """Wait while the broker blocks publishers or paused the channel, and while too much
        is queued for the socket."""
        self._check_locked()
        conn = self._connection
        book = self._book
        if conn._book.blocked is not None or not book.flow_active:
            ready = conn._writable.wait_for(
                lambda: (
                    (conn._book.blocked is None and book.flow_active)
                    or book.error is not None
                    or conn._book.error is not None
                ),
                timeout,
            )
            if not ready:
                raise TimeoutError(f"publishing was blocked by the broker for {timeout} s")
            self._check_locked()
        conn._wait_writable_locked(timeout)

    def _has_reply(self, method: Method) -> bool:
        return self._connection._core.protocol.has_reply(method.NAME)

    def _request(
        self, method: Method, timeout: float | None, consumer: Consumer | None = None
    ) -> Reply:
        conn = self._connection
        waiter = Waiter()
        with conn._lock:
            self._check_locked()
            method = conn._core.protocol.adapt(method)  # a 0-8/0-9 connection's own class
            conn._core.send_method(self._number, method)
            self._book.expect(method, waiter, consumer)
            conn._flush_locked()
        return conn._wait_reply(waiter, timeout)

    def _call(self, method: Method, timeout: float | None) -> Reply:
        telemetry = self._connection._telemetry
        if telemetry is None or type(method) is not BasicGet:
            return self._request(method, timeout)
        assert isinstance(method, BasicGet)
        with telemetry.receive(self._number, method) as receiving:
            reply = self._request(method, timeout)
            receiving.got(reply)
        return reply

    def _send_no_reply(self, method: Method, message: Message | None = None) -> None:
        telemetry = self._connection._telemetry
        settling = None if telemetry is None else telemetry.settle(self._number, method)
        if settling is None:
            self._send_no_reply_now(method, message)
        else:
            with settling:
                self._send_no_reply_now(method, message)

    def _send_no_reply_now(self, method: Method, message: Message | None) -> None:
        conn = self._connection
        with conn._lock:
            self._check_locked()
            if message is not None:
                # A settle of *message*: checked under the lock once any recovery is over, so
                # a tag of a connection since lost never slips through.
                cell = message._epoch_cell
                came_on = message._came_on
                if cell is not None and not cell.allows(
                    message.delivery_tag,
                    message.epoch,
                    superseded=came_on is not None and came_on.superseded,
                ):
                    return  # stale, and the policy ignores those
            conn._core.send_method(self._number, conn._core.protocol.adapt(method))
            conn._flush_locked()

    def _settle(self, method: Method, message: Message) -> None:
        """Send a settle of *message*, unless it came on a connection since lost."""
        self._send_no_reply(method, message)

    def _check_open(self) -> None:
        with self._connection._lock:
            self._check_locked()

    def _message(self, event: MessageReceived, book: ChannelBook | None = None) -> Message:
        """*event* as a message settled on this channel; *book*: the channel incarnation it
        came on (a delivery), else the current one (a get-ok)."""
        conn = self._connection
        if conn._policy is None:
            return _bound_message(Message, event, self, None)
        return _bound_message(Message, event, self, conn._epoch, book or self._book)

    def _resume_consumer(self, consumer_tag: str) -> None:
        """A consumer over its bound caught up: consume again if the router paused it."""
        conn = self._connection
        with conn._lock:
            if conn._book.resume_consumer(self._number, consumer_tag):
                conn._flush_locked()

    def _got_message(self, reply: Reply) -> Message | None:
        event = client.got_message(reply, MessageReceived)
        return None if event is None else self._message(event)

    # --- publishing and consuming --------------------------------------------------------------

    def _publish_method(self, exchange: str, routing_key: str, mandatory: bool) -> BasicPublish:
        """The ``basic.publish`` for these fields: the last one when they are the same (an
        attrs instance per publish costs about as much as encoding it)."""
        method = self._last_publish
        if (
            method.routing_key != routing_key
            or method.exchange != exchange
            or method.mandatory != mandatory
        ):
            method = BasicPublish(exchange=exchange, routing_key=routing_key, mandatory=mandatory)
            self._last_publish = method
        return method

    def basic_publish(
        self,
        body: bytes | bytearray | memoryview,
        *,
        exchange: str = "",
        routing_key: str = "",
        properties: BasicProperties | None = None,
        mandatory: bool = False,
        timeout: float | None = None,
    ) -> None:
        """Publish a message. In confirm mode, return once the broker acked it.

        Waits while the broker blocks publishers (``connection.blocked``) or paused the
        channel (``channel.flow``), up to *timeout* in all.

        :raises PublishNackedError: the broker nacked it (confirm mode).
        :raises MessageReturnedError: ``mandatory`` and unroutable (confirm mode; outside it a
            return is only logged).
        :raises ConnectionLostError: the connection was lost before the confirm.
        """
        conn = self._connection
        method = self._publish_method(exchange, routing_key, mandatory)
        waiter: Waiter | None = None
        telemetry = conn._telemetry
        with conn._lock:
            if not conn._publishable_locked(self._book):
                if conn._recovering:
                    conn._wait_recovered_locked(len(body))
                self._wait_publishable_locked(timeout)
            if telemetry is None:
                number = conn._core.publish(
                    self._number, method, _NO_PROPERTIES if properties is None else properties, body
                )
            else:
                number = telemetry.publish(
                    self._number,
                    exchange,
                    routing_key,
                    properties,
                    memoryview(body).nbytes,
                    partial(conn._core.publish, self._number, method, body=body),
                )
            if number is not None:
                waiter = Waiter()
                book = self._book
                book.confirms[number] = waiter
                if book.kept is not None:
                    book.keep(number, method, properties or _NO_PROPERTIES, body)
            conn._flush_locked()
        if waiter is not None:
            conn._wait_reply(waiter, timeout)

    def publisher(self, window: int = 1000) -> Publisher:
        """A pipelined publisher keeping at most *window* publishes unconfirmed (puts the
        channel in confirm mode). Leaving its ``with`` block waits for every confirm and
        raises the failures as an ``ExceptionGroup``; see :class:`Publisher`."""
        pub = Publisher(self, window)
        self.confirm_select()
        return pub

    def basic_consume(
        self,
        queue: str,
        *,
        no_ack: bool = False,
        exclusive: bool = False,
        consumer_tag: str = "",
        arguments: FieldTable | None = None,
        timeout: float | None = None,
        buffer_size: int | None = None,
        inbox: Inbox | None = None,
    ) -> Consumer:
        """Start a consumer: an iterator of :class:`Message` and a context manager that
        cancels it. Iteration blocks until a message arrives or the consumer ends.

        The buffer holds *buffer_size* messages (default: the channel's prefetch count, or
        1000 without one); see :class:`Consumer`. With *inbox*, its deliveries and its end go
        to that :class:`Inbox` instead, shared with other consumers (take them with
        :meth:`Inbox.get`; the consumer itself is then not iterated, only cancelled or
        closed)."""
        return self._consume(
            queue, no_ack, exclusive, consumer_tag, arguments, timeout, None, buffer_size, inbox
        )

    def consume(
        self,
        queue: str,
        *,
        timeout: float | None = None,
        no_ack: bool = False,
        exclusive: bool = False,
        consumer_tag: str = "",
        arguments: FieldTable | None = None,
        buffer_size: int | None = None,
    ) -> Consumer:
        """Like :meth:`basic_consume`, but iteration ends (and the consumer is cancelled)
        after *timeout* seconds without a message. ``for msg in ch.consume(q, timeout=5):``.

        Stream queues: ``arguments={"x-stream-offset": n}`` (after ``basic_qos``). Closing the
        consumer never rejects a buffered delivery.
        """
        return self._consume(
            queue, no_ack, exclusive, consumer_tag, arguments, timeout, timeout, buffer_size
        )

    def _consume(
        self,
        queue: str,
        no_ack: bool,
        exclusive: bool,
        consumer_tag: str,
        arguments: FieldTable | None,
        timeout: float | None,
        inactivity_timeout: float | None,
        buffer_size: int | None,
        inbox: Inbox | None = None,
    ) -> Consumer:
        tag = client.consumer_tag(consumer_tag, "amqp-blocking", ())
        size = client.consumer_buffer_size(buffer_size, self._book.prefetch_count)
        consumer = Consumer(self, tag, no_ack, inactivity_timeout, queue, inbox, buffer_size=size)
        if inbox is not None:
            inbox._attach(self._connection)
        method = BasicConsume(
            queue=queue,
            consumer_tag=tag,
            no_ack=no_ack,
            exclusive=exclusive,
            arguments=arguments or {},
        )
        try:
            self._request(method, timeout, consumer)
        except TimeoutError:
            # If the broker still confirms the consume, the I/O thread cancels it.
            consumer.finish(None, True)
            raise
        return consumer


@final
class Consumer:
    """The deliveries of one consumer, in order. Iterate it from one thread at a time;
    :meth:`cancel` works from any thread.

    Messages wait in a local buffer of ``buffer_size`` messages (by default the channel's
    prefetch count) until taken. The connection never stops reading for a full buffer (the
    I/O thread reads whenever no waiting thread does: a close, a heartbeat, a cancel is seen
    at once): with a prefetch the broker sends no more than that, and a consumer without one
    is paused (``basic.cancel``) while it holds more than ``buffer_size`` and resumed once
    the application took half (see :doc:`/recovery`).
    Cancelling never rejects a buffered delivery: on a classic queue it returns to the queue
    when the channel closes; a stream queue's offsets stay untouched.
    """

    def __init__(
        self,
        channel: Channel,
        tag: str,
        no_ack: bool,
        inactivity_timeout: float | None,
        queue: str = "",
        inbox: Inbox | None = None,
        *,
        buffer_size: int = client.DEFAULT_CONSUMER_BUFFER,
    ) -> None:
        self._channel = channel
        self._inbox = inbox
        #: How many deliveries the buffer holds before the consumer is paused.
        self.buffer_size: Final = buffer_size
        # The buffer went over buffer_size: the router may have paused the consumer, so the
        # consuming thread asks it to resume once half is taken.
        self._over = False
        #: The queue consumed from.
        self.queue: Final = queue
        # OpenTelemetry: the connection's hooks, and the message being processed.
        self._telemetry = channel._connection._telemetry
        self._processing: client.Processing | None = None
        self._no_ack = no_ack
        #: Deliveries dropped undelivered by :meth:`close` (unacknowledged, never rejected).
        self.dropped = 0
        self._inactivity_timeout = inactivity_timeout
        self._tag = tag
        # Messages, not events: a delivery waiting here is one object fewer for the garbage
        # collector to walk and promote (buffers of thousands made full collections frequent).
        self._buffer: deque[Message] = deque()
        self._cond = threading.Condition(threading.Lock())
        self._waiting = False
        self._ended = False
        self._fatal = False
        self._error: AMQPError | None = None

    def __repr__(self) -> str:
        return f"<amqp_blocking.Consumer {self._tag!r} on channel {self._channel.number}>"

    @property
    def consumer_tag(self) -> str:
        """The tag the broker knows this consumer by."""
        return self._tag

    @property
    def no_ack(self) -> bool:
        """Whether the broker considers deliveries acknowledged when sent."""
        return self._no_ack

    @property
    def buffered(self) -> int:
        """Messages received from the broker and not handed out yet."""
        return len(self._buffer)

    # called by the reading thread (connection lock held): must not block

    def deliver(self, event: MessageReceived, book: ChannelBook, /) -> bool:
        if self._inbox is not None:  # bounded by the prefetch, shared with other consumers
            self._inbox._put(self._channel._message(event, book))
            return True
        buffer = self._buffer
        buffer.append(self._channel._message(event, book))
        if self._waiting:
            # One wake-up per wait, not per delivery: the rest of the read goes into the
            # buffer while the iterating thread gets going (it re-arms _waiting to wait again).
            with self._cond:
                if self._waiting:
                    self._waiting = False
                    self._cond.notify()
        if len(buffer) > self.buffer_size:
            self._over = True
            return False
        return True

    def cancelling(self) -> None:
        """Deliveries until cancel-ok are buffered as before."""

    def drop_unhanded(self) -> int:
        """The connection was lost: deliveries not handed out yet can no longer be acked, and
        the broker requeued them (they come again); no_ack ones were settled and stay."""
        if self._no_ack:
            return 0
        dropped = 0 if self._inbox is None else self._inbox._drop(self)
        with self._cond:
            dropped += len(self._buffer)
            self._buffer.clear()
            self._over = False
        return dropped

    def finish(self, error: AMQPError | None, by_us: bool, /) -> None:
        if by_us:
            error = None  # our cancel or close: iteration stops after the buffer
        with self._cond:
            if self._ended:
                return
            self._ended = True
            self._error = error
            # A closed channel or connection ends iteration at once (the buffered deliveries
            # can no longer be acked); a broker cancel comes after what is buffered.
            self._fatal = error is not None and not isinstance(error, ConsumerCancelledError)
            self._cond.notify_all()
        if error is not None and self._inbox is not None:
            self._inbox._end(self, error)

    # the consuming side

    def get(self, timeout: float | None = None) -> Message | None:
        """The next message, or None after *timeout* seconds without one or once the consumer
        was cancelled and its buffer is empty.

        :raises ConsumerCancelledError: the broker cancelled the consumer (after the buffer
            was handed out).
        :raises ChannelClosedError: the channel was closed (at once, dropping the buffer: its
            deliveries can no longer be acknowledged).
        :raises ConnectionClosedError: the connection was closed (also at once).
        :raises ConnectionLostError: the connection was lost (also at once).
        :raises RuntimeError: the consumer delivers into an :class:`Inbox`.
        """
        if self._inbox is not None:
            raise RuntimeError("this consumer delivers into an Inbox: take from Inbox.get()")
        if self._processing is not None:
            self._end_processing()
        buffer = self._buffer
        if self._fatal and self._error is not None:
            raise self._error
        if buffer:
            message = buffer.popleft()
            if self._over:
                self._taken()
            return message if self._telemetry is None else self._process(message)
        deadline = None if timeout is None else time.monotonic() + timeout
        # Read the socket in this thread while nobody else does (leader/follower): no wake-up
        # from the I/O thread per batch of deliveries.
        conn = self._channel._connection
        with conn._lock:
            led = conn._lead_locked(lambda: buffer or self._ended, deadline)
            if led is None:
                conn._followers += 1
        try:
            return self._wait(deadline)
        finally:
            if led is None:
                with conn._lock:
                    conn._followers -= 1

    def _wait(self, deadline: float | None) -> Message | None:
        """The rest of :meth:`get` once the buffer was empty: wait on the buffer (at once
        after leading, which filled it, ended the consumer, or reached the deadline)."""
        buffer = self._buffer
        with self._cond:
            try:
                while True:
                    # Set before the buffer is looked at (deliver appends, then looks at it):
                    # a delivery either is seen here or wakes us.
                    self._waiting = True
                    if buffer:
                        break
                    if self._ended:
                        if self._error is not None:
                            raise self._error
                        return None
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return None
                    self._cond.wait(remaining)
            finally:
                self._waiting = False
        message = buffer.popleft()
        if self._over:
            self._taken()
        return message if self._telemetry is None else self._process(message)

    def _taken(self) -> None:
        """A message was taken from a buffer that went over its bound: once half is left,
        the consumer is resumed if the router paused it."""
        if len(self._buffer) <= self.buffer_size // 2:
            self._over = False
            self._channel._resume_consumer(self._tag)

    def _process(self, message: Message) -> Message:
        """OpenTelemetry: the "process" span of *message*, current until the next one."""
        assert self._telemetry is not None
        self._processing = self._telemetry.process(self.queue, message, no_ack=self._no_ack)
        return message

    def _end_processing(self) -> None:
        processing, self._processing = self._processing, None
        if processing is not None:
            processing.end()

    def __iter__(self) -> Iterator[Message]:
        return self

    def __next__(self) -> Message:
        message = self.get(self._inactivity_timeout)
        if message is None:
            self.cancel()
            raise StopIteration
        return message

    def cancel(self, *, timeout: float | None = None) -> None:
        """Stop the deliveries (``basic.cancel``); buffered messages can still be taken.
        Does nothing if the consumer already ended."""
        if self._ended:
            return
        try:
            self._channel.basic_cancel(self._tag, timeout=timeout)
        except AMQPError:
            if not self._ended:
                raise

    def close(self) -> None:
        """Cancel the consumer and drop its buffer without rejecting anything: the dropped
        deliveries stay unacknowledged and return to their queue when the channel closes (a
        stream queue keeps every message anyway)."""
        self._end_processing()
        self.cancel()
        left = len(self._buffer)
        self._buffer.clear()
        if self._inbox is not None:
            left += self._inbox._drop(self)
        if left:
            self.dropped += left
            logger.info(
                "consumer %s stopped with %d deliveries not handed out; %s",
                self._tag,
                left,
                "they are lost (no_ack)"
                if self._no_ack
                else f"they stay unacknowledged until channel {self._channel.number} closes",
            )

    def __enter__(self) -> Consumer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@final
class PublishTicket(PublishTicketState):
    """One publish made through a :class:`Publisher`: its number, and its outcome once the
    broker settled it. :meth:`wait` waits for this publish alone."""

    __slots__ = ("_connection", "_event")

    def __init__(self, number: int, owner: Publisher, connection: Connection) -> None:
        super().__init__(number, owner)
        self._connection = connection
        self._event: threading.Event | None = None

    def wait(self, timeout: float | None = None) -> None:
        """Wait until the broker confirmed this publish.

        :raises PublishNackedError: the broker nacked it.
        :raises MessageReturnedError: a mandatory publish was returned unroutable.
        :raises ConnectionClosedError: the connection closed first (also
            :class:`ChannelClosedError`, :class:`ConnectionLostError`).
        :raises TimeoutError: *timeout* passed first.
        """
        conn = self._connection
        deadline = None if timeout is None else time.monotonic() + timeout
        event: threading.Event | None = None
        with conn._lock:
            if not self._done:
                led = conn._lead_locked(lambda: self._done, deadline)
                if led is False:
                    raise TimeoutError(f"publish {self.number} not confirmed within {timeout} s")
                if led is None and not self._done:
                    if self._event is None:
                        self._event = threading.Event()
                    event = self._event
                    conn._followers += 1
        if event is not None:
            try:
                confirmed = event.wait(_remaining(deadline))
            finally:
                with conn._lock:
                    conn._followers -= 1
            if not confirmed:
                raise TimeoutError(f"publish {self.number} not confirmed within {timeout} s")
        if self._error is not None:
            raise self._error

    def settle(self, publish_number: int, error: AMQPError | None, /) -> None:
        # The reading thread, connection lock held.
        if self._record(error) and self._event is not None:
            self._event.set()


@final
class Publisher(PublisherCounts):
    """Pipelined publishing with publisher confirms (from :meth:`Channel.publisher`);
    thread-safe.

    :meth:`publish` returns as soon as the message is written, waiting only while ``window``
    publishes are unconfirmed. Each outcome is counted (:attr:`confirmed`, :attr:`nacked`,
    :attr:`returned`, :attr:`failed`) and every failure is kept until taken with
    :meth:`take_failures` or raised on leaving the ``with`` block as an ``ExceptionGroup``.
    The tickets :meth:`publish` returns can be waited for one by one. Memory stays bounded:
    at most ``window`` publishes in flight and at most ``window`` kept failures (when that
    many pile up, the next :meth:`publish` raises them).
    """

    def __init__(self, channel: Channel, window: int) -> None:
        super().__init__(window)
        self._channel = channel
        self._cond = threading.Condition(channel._connection._lock)
        self._waiting = 0
        # Publishes until this thread reads the confirms that came meanwhile (see publish).
        self._unread = _READ_EVERY

    def _settled(self, outcome: AMQPError | None) -> None:
        # The reading thread, connection lock held; once per publish number (a multiple ack
        # settles many). Waiters wait for room in the window, for none in flight, or for an
        # error: wake them as one of those may have come true, not for every plain ack.
        self._count_settled(outcome)
        if self._waiting:
            in_flight = self._in_flight
            if outcome is not None or in_flight == self.window - 1 or not in_flight:
                self._cond.notify_all()

    def publish(
        self,
        body: bytes | bytearray | memoryview,
        *,
        exchange: str = "",
        routing_key: str = "",
        properties: BasicProperties | None = None,
        mandatory: bool = False,
        timeout: float | None = None,
    ) -> PublishTicket:
        """Publish one message; waits (up to *timeout*) while ``window`` publishes are
        unconfirmed and while the broker blocks publishers. Returns its ticket.

        :raises ExceptionGroup: ``window`` failures piled up untaken; they are raised here
            (and forgotten) so a failing stream of publishes stops early.
        """
        channel = self._channel
        conn = channel._connection
        method = channel._publish_method(exchange, routing_key, mandatory)
        with conn._lock:
            if len(self._failures) >= self.window:
                self._raise_failures()
            deadline = None if timeout is None else time.monotonic() + timeout
            if self._in_flight >= self.window:
                self._wait_locked(lambda: self._in_flight < self.window, timeout)
            if not conn._publishable_locked(channel._book):
                if conn._recovering:
                    conn._wait_recovered_locked(len(body))
                channel._wait_publishable_locked(_remaining(deadline))
            telemetry = conn._telemetry
            if telemetry is None:
                number = conn._core.publish(
                    channel._number,
                    method,
                    _NO_PROPERTIES if properties is None else properties,
                    body,
                )
            else:
                number = telemetry.publish(
                    channel._number,
                    exchange,
                    routing_key,
                    properties,
                    memoryview(body).nbytes,
                    partial(conn._core.publish, channel._number, method, body=body),
                )
            if number is None:
                raise RuntimeError("the channel is not in confirm mode: call confirm_select()")
            ticket = PublishTicket(number, self, conn)
            book = channel._book
            book.confirms[number] = ticket
            if book.kept is not None:
                book.keep(number, method, properties or _NO_PROPERTIES, body)
            self._count_published()
            conn._flush_locked()
            self._unread -= 1
            if not self._unread:
                # Read the confirms here every few publishes instead of the I/O thread waking
                # (and taking the GIL) for them while this thread publishes.
                self._unread = _READ_EVERY
                conn._read_now_locked()
        return ticket

    def _wait_locked(self, ready: _Predicate, timeout: float | None) -> None:
        book = self._channel._book
        if not self._wait_confirms_locked(lambda: ready() or book.error is not None, timeout):
            raise TimeoutError(f"the broker did not confirm within {timeout} s")
        self._channel._check_locked()

    def _wait_confirms_locked(self, ready: _Predicate, timeout: float | None) -> bool:
        """Wait (connection lock held) until *ready()*: reading the confirms in this thread
        while nobody else reads, else woken by the thread that does. False on a timeout."""
        conn = self._channel._connection
        deadline = None if timeout is None else time.monotonic() + timeout
        led = conn._lead_locked(ready, deadline)
        if led is not None:
            return led
        self._waiting += 1
        conn._followers += 1
        try:
            return self._cond.wait_for(ready, _remaining(deadline))
        finally:
            self._waiting -= 1
            conn._followers -= 1

    def wait_for_confirms(self, timeout: float | None = None) -> None:
        """Wait until every publish so far is settled (failures are kept, not raised)."""
        with self._channel._connection._lock:
            if self._in_flight and not self._wait_confirms_locked(
                lambda: not self._in_flight, timeout
            ):
                raise TimeoutError(f"{self._in_flight} publishes not confirmed within {timeout} s")

    def take_failures(self) -> list[AMQPError]:
        """The failures kept so far, oldest first; they are forgotten here."""
        with self._channel._connection._lock:
            return super().take_failures()

    def __enter__(self) -> Publisher:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            return  # the block failed: do not wait for confirms on the way out
        self.wait_for_confirms()
        with self._channel._connection._lock:
            if self._failures:
                self._raise_failures()


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(deadline - time.monotonic(), 0.0)


if TYPE_CHECKING:
    from collections.abc import Callable

    _Predicate = Callable[[], bool]
