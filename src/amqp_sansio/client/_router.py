"""The event router every client adapter shares: no I/O, no clock, no threads.

:class:`Router` routes the core's events to what an adapter registered: a waiter per request
(matched by the request each reply names, so a reply always finds the request it answers), a
sink per consumer, and a sink per unconfirmed publish. The adapters differ only in the waiter and
sink types (a Trio event, an ``asyncio.Future``, a thread-safe waiter; a Trio memory channel, a
deque and a transport pause, a thread queue), so this module sees them through small protocols.
The caller serialises access (Trio and asyncio run on one thread; the blocking adapter holds its
connection lock).
"""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING, Final, Protocol, TypeAlias, final

import attrs

from .. import (
    AMQP_0_9_1,
    BasicCancel,
    BasicCancelOk,
    BasicConsume,
    BasicConsumeOk,
    BasicDeliver,
    BasicQos,
    BasicQosOk,
    BlockedByPeer,
    ChannelClosed,
    ChannelFlowChanged,
    ChannelOpened,
    ChannelState,
    ConfirmSelect,
    ConnectionClosed,
    ConnectionLost,
    ConnectionState,
    ConsumerCancelled,
    MessageReceived,
    MethodReceived,
    PublishConfirmed,
    PublishNacked,
    PublishReturned,
    UnblockedByPeer,
)
from ._confirms import ConfirmTracker
from ._errors import (
    AMQPError,
    ChannelClosedError,
    ConnectionClosedError,
    ConnectionLostError,
    ConsumerCancelledError,
    MessageReturnedError,
    PublishOutcomeUnknownError,
    error_from,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .. import Buffer, Connection, ContentProperties, Event, Method
    from ._instrument import Telemetry
    from ._recovery import RecoveryPolicy

__all__ = [
    "ChannelBook",
    "ConfirmSink",
    "ConsumerSink",
    "Reply",
    "ReturnCallback",
    "ReturnHandler",
    "ReturnSink",
    "Router",
    "Waiter",
    "end_suspended",
    "return_sink",
]

logger = logging.getLogger("amqp_sansio.client")

#: What a request's waiter receives: the reply method, a ``basic.get-ok`` message, or None
#: (``channel.open-ok``).
Reply: TypeAlias = "Method | MessageReceived | None"


class Waiter(Protocol):
    """One request's outcome: ``asyncio.Future`` fits, and so do the Trio and blocking waiters.

    A waiter that reports :meth:`done` before its reply came was given up by its caller
    (cancelled, timed out): the router then drops the reply, and undoes what it would have
    started (a channel nobody will use, a consumer nobody iterates).
    """

    def done(self) -> bool: ...

    def set_result(self, result: Reply, /) -> None: ...

    def set_exception(self, exception: BaseException, /) -> None: ...


class ConsumerSink(Protocol):
    """Where a consumer's deliveries go. A sink never refuses one: the adapter never stops
    reading the socket for a full buffer (closes, heartbeats, confirms and cancels must be
    seen at once), so a consumer's memory is bounded by its prefetch, or by pausing it."""

    def deliver(self, event: MessageReceived, book: ChannelBook, /) -> bool:
        """Take one delivery, which came on *book*'s channel (the incarnation its tag
        belongs to: a message settles there, or is stale). False means "I hold more than my
        bound": the router pauses the consumer when that is safe (see
        :meth:`Router.resume_consumer`); the delivery is kept all the same."""

    def finish(self, error: AMQPError | None, by_us: bool, /) -> None:
        """No more deliveries. *error* is None after our ``basic.cancel`` was answered, else
        why the consumer ended: :class:`ConsumerCancelledError` (the broker cancelled it), or
        the close of the channel or the connection; *by_us* says whether we ended it (our
        cancel, or a close we asked for)."""

    def cancelling(self) -> None:
        """Our ``basic.cancel`` for this consumer was just sent: deliveries until its
        cancel-ok may be dropped rather than waited for."""

    def drop_unhanded(self) -> int:
        """The connection was lost: drop the deliveries not handed out yet (their tags died
        with the connection; the broker requeued them) and say how many; ``no_ack`` ones were
        settled already and stay."""


class ConfirmSink(Protocol):
    """Told the outcome of each publish it registered: None for acked, else the error."""

    def settle(self, publish_number: int, error: AMQPError | None, /) -> None: ...


class ReturnSink(Protocol):
    """Receives mandatory publishes the broker returned outside confirm mode (without one, the
    router logs them)."""

    def returned(self, error: MessageReturnedError, /) -> None: ...


#: An application's handler of returns outside confirm mode (a channel's ``on_return``).
ReturnHandler: TypeAlias = "Callable[[MessageReturnedError], object]"


@final
class ReturnCallback:
    """The ReturnSink of a channel whose application gave ``on_return(handler)``: each
    return outside confirm mode is handed to *handler*. It runs where the router runs (the
    reader task, or the blocking adapter's I/O thread), so an exception from it is logged, not
    raised: it must not take the connection down with it."""

    __slots__ = ("handler",)

    def __init__(self, handler: ReturnHandler) -> None:
        self.handler: Final = handler

    def returned(self, error: MessageReturnedError, /) -> None:
        try:
            self.handler(error)
        except Exception:
            logger.exception("on_return handler %r failed for %s", self.handler, error)


@final
class _LogReturns:
    __slots__ = ()

    def returned(self, error: MessageReturnedError, /) -> None:
        logger.warning(
            "%s (give the channel an on_return handler, or use confirm mode, to see it)", error
        )


_LOG_RETURNS: Final = _LogReturns()


def return_sink(handler: ReturnHandler | None) -> ReturnSink:
    """The ReturnSink for a channel's ``on_return(handler)``: *handler*'s, or a warning in
    the log for None (nobody asked for returns)."""
    return _LOG_RETURNS if handler is None else ReturnCallback(handler)


_Entry: TypeAlias = "tuple[Waiter, ConsumerSink | None, Method | None]"

#: What a kept publish sent: its ``basic.publish``, properties and body.
Republish: TypeAlias = "tuple[Method, ContentProperties, bytes]"


@final
class ChannelBook:
    """What one open channel waits for, and what the router learnt about it."""

    __slots__ = (
        "close_waiter",
        "confirm_mode",
        "confirms",
        "consumers",
        "consumes",
        "error",
        "flow_active",
        "kept",
        "number",
        "paused",
        "pausing",
        "prefetch_count",
        "qos",
        "restore_consumes",
        "return_sink",
        "rpcs",
        "superseded",
        "tracker",
        "unbounded",
    )

    def __init__(self, number: int) -> None:
        #: The channel id.
        self.number: Final = number
        #: Waiters for our requests, oldest first, each with the consumer sink a
        #: ``basic.consume`` registers when its ok arrives and the request itself (None for
        #: channel.open): replies are matched to it by identity (see :meth:`take`).
        self.rpcs: deque[_Entry] = deque()
        #: The consumers the broker confirmed, by tag.
        self.consumers: dict[str, ConsumerSink] = {}
        #: Their ``basic.consume`` requests, by tag (to consume again after a server cancel).
        self.consumes: dict[str, BasicConsume] = {}
        #: Consumers whose pausing ``basic.cancel`` is on its way, by tag: True once their sink
        #: asked to be resumed before the cancel-ok came.
        self.pausing: dict[str, bool] = {}
        #: Paused consumers (cancel-ok came), by tag: consumed again by
        #: :meth:`Router.resume_consumer`.
        self.paused: dict[str, ConsumerSink] = {}
        #: Set when the connection was lost (:meth:`Router.suspend`): the ``basic.consume`` of
        #: each consumer the topology does not hold (paused, pausing, or being consumed again
        #: by the router), by tag, for the restore to consume again.
        self.restore_consumes: dict[str, BasicConsume] = {}
        #: Consumers over their bound that are not paused, by tag: their prefetch bounds them,
        #: or pausing them is unsafe (warned about once).
        self.unbounded: set[str] = set()
        #: The sink of each unconfirmed publish, by publish number.
        self.confirms: dict[int, ConfirmSink] = {}
        self.tracker = ConfirmTracker()
        #: The waiter of our ``channel.close`` (set by :meth:`Router.expect_close`).
        self.close_waiter: Waiter | None = None
        #: Where returns outside confirm mode go (None: logged).
        self.return_sink: ReturnSink | None = None
        #: Why the channel is unusable, once it is.
        self.error: AMQPError | None = None
        #: False while the broker paused the channel (``channel.flow``).
        self.flow_active = True
        #: Whether ``confirm.select`` was sent on the channel.
        self.confirm_mode = False
        #: The ``prefetch_count`` of the last ``basic.qos`` the broker accepted.
        self.prefetch_count = 0
        #: The last ``basic.qos`` the broker accepted, per ``global_`` (to send again when
        #: the channel is reopened).
        self.qos: dict[bool, BasicQos] = {}
        #: True once the channel was opened again under another book (recovery, or
        #: ``RecoveryPolicy.reopen_channels``): deliveries that came on this one can no longer
        #: be settled.
        self.superseded = False
        #: What each unconfirmed publish sent, by publish number, to send it again on the next
        #: connection (``RecoveryPolicy.republish_unknown``); None: not kept.
        self.kept: dict[int, Republish] | None = None

    def paused_consumes(self) -> dict[str, BasicConsume]:
        """The ``basic.consume`` of each consumer paused or pausing, by tag."""
        return {
            tag: self.consumes[tag] for tag in (*self.paused, *self.pausing) if tag in self.consumes
        }

    def keep(
        self, publish_number: int, method: Method, properties: ContentProperties, body: Buffer
    ) -> None:
        """Remember what publish *publish_number* sent, until its confirm (only while
        :attr:`kept` is a dict). A body that is not ``bytes`` is copied: the caller may reuse
        its buffer once the publish returned."""
        assert self.kept is not None
        self.kept[publish_number] = (
            method,
            properties,
            body if type(body) is bytes else bytes(body),
        )

    def reopened(self, number: int) -> ChannelBook:
        """A book for this channel opened again as *number* on a new connection: its
        consumers, confirm mode, QoS, return sink and publish keeping carry over (its waiters
        and unconfirmed publishes do not: see :meth:`Router.republish`)."""
        book = ChannelBook(number)
        book.consumers = dict(self.consumers)
        book.consumers.update(self.paused)  # a paused consumer consumes again when restored
        book.consumes = dict(self.consumes)
        book.confirm_mode = self.confirm_mode
        book.prefetch_count = self.prefetch_count
        book.qos = dict(self.qos)
        book.return_sink = self.return_sink
        book.kept = None if self.kept is None else {}
        return book

    def expect(self, request: Method, waiter: Waiter, consumer: ConsumerSink | None = None) -> None:
        """*request*, which expects a reply, was sent on this channel; *consumer* is the sink
        of a ``basic.consume``, registered when the broker confirms it.

        :raises AssertionError: *request* has no reply in the connection's version (0-9's
            ``basic.recover``): the core waits for none, so the waiter would never be done.
        """
        if not request.expects_reply():
            raise AssertionError(f"{request.NAME} has no reply in this version: nothing to await")
        self.rpcs.append((waiter, consumer, request))
        request = AMQP_0_9_1.adapt(request)  # the meaning of a 0-8/0-9 connection's class
        cls = type(request)
        if cls is BasicCancel:
            assert isinstance(request, BasicCancel)
            sink = self.consumers.get(request.consumer_tag)
            if sink is not None:
                sink.cancelling()
        elif cls is ConfirmSelect:
            self.confirm_mode = True

    def consumer_tags(self) -> set[str]:
        """The tags of the channel's consumers, confirmed or still waiting for consume-ok."""
        tags = set(self.consumers)
        for _, sink, sent in self.rpcs:
            if sink is None or sent is None:
                continue
            request = AMQP_0_9_1.adapt(sent)
            if type(request) is BasicConsume:
                assert isinstance(request, BasicConsume)
                tags.add(request.consumer_tag)
        return tags

    def take(self, request: Method | None) -> _Entry:
        """Remove and return the entry of *request*, which the core named as the one a reply
        answers (``MethodReceived.request``, ``MessageReceived.request`` for a get-ok; None
        for channel.open-ok). The core lets RabbitMQ's consume-ok and cancel-ok arrive after
        later replies, so the answer is not always the oldest entry."""
        rpcs = self.rpcs
        if rpcs[0][2] is request:
            return rpcs.popleft()
        for index, entry in enumerate(rpcs):
            if entry[2] is request:
                del rpcs[index]
                return entry
        raise AssertionError(f"no waiter on channel {self.number} for {request!r}")


@final
class _Unawaited:
    """The waiter of a request nobody waits for: its reply is dropped."""

    __slots__ = ()

    def done(self) -> bool:
        return True

    def set_result(self, result: Reply, /) -> None:
        pass

    def set_exception(self, exception: BaseException, /) -> None:
        pass


_UNAWAITED: Final = _Unawaited()


@final
class _Keep:
    """The waiter of a consume the router made again itself: the sink stays registered (an
    abandoned waiter would cancel it)."""

    __slots__ = ()

    def done(self) -> bool:
        return False

    def set_result(self, result: Reply, /) -> None:
        pass

    def set_exception(self, exception: BaseException, /) -> None:
        pass


_KEEP: Final = _Keep()
#: The waiter of each step that restores a reopened channel (see :meth:`Router._reopen`).
_RESTORE: Final = _Keep()
#: The waiter of a ``basic.cancel`` that pauses a consumer (see :meth:`Router._pause`).
_PAUSE: Final = _Keep()
#: The queue of RabbitMQ's direct reply-to: consuming it again is a new pseudo-queue.
_REPLY_TO: Final = "amq.rabbitmq.reply-to"


def _settle_all(book: ChannelBook, error: AMQPError, *, by_us: bool) -> None:
    book.error = error
    rpcs, book.rpcs = book.rpcs, deque()
    for waiter, _, _ in rpcs:
        if not waiter.done():
            waiter.set_exception(error)
    consumers, book.consumers = book.consumers, {}
    consumers.update(book.paused)
    book.paused = {}
    book.pausing = {}
    for sink in consumers.values():
        sink.finish(error, by_us)
    confirms, book.confirms = book.confirms, {}
    # Whether the broker routed these is unknown: say so, never pass the close off as their
    # outcome (a 320 is why the connection went, not a refusal of each publish).
    for number, confirm in sorted(confirms.items()):
        confirm.settle(number, PublishOutcomeUnknownError(number, error))
    book.tracker = ConfirmTracker()
    if book.close_waiter is not None and not book.close_waiter.done():
        book.close_waiter.set_result(None)


@final
class Router:
    """Routes client-role events to waiters and sinks, per channel.

    When a ``channel.open-ok`` or ``basic.consume-ok`` arrives for a caller that stopped waiting
    (timed out or cancelled), the router undoes it on *core*: it closes the channel nobody will
    use and cancels the consumer nobody iterates (only while the connection and the channel are
    open). The adapter flushes the core as usual.
    """

    __slots__ = (
        "_core",
        "blocked",
        "channels",
        "error",
        "on_reopened",
        "reconsume_on_cancel",
        "recover_on",
        "reopen_channels",
        "republish_unknown",
        "suspended",
        "telemetry",
        "unknown",
    )

    def __init__(self, core: Connection, telemetry: Telemetry | None = None) -> None:
        self._core = core
        #: OpenTelemetry's hooks (see :func:`~amqp_sansio.client.instrument`): told the outcome
        #: of each confirm-mode publish, whose send span ends with it. None: tracing off.
        self.telemetry = telemetry
        #: The books of the open channels, by number.
        self.channels: dict[int, ChannelBook] = {0: ChannelBook(0)}
        #: The reason RabbitMQ gave in ``connection.blocked``, None while not blocked.
        self.blocked: str | None = None
        #: Why the connection is unusable, once it is.
        self.error: AMQPError | None = None
        #: Set by an adapter that recovers connections: says whether losing the connection
        #: with an error starts recovery (:meth:`RecoveryPolicy.triggers`). Then
        #: :meth:`fail` suspends instead: consumers are kept for the next connection.
        self.recover_on: Callable[[AMQPError], bool] | None = None
        #: The books of the channels when the connection was lost for recovery (their
        #: consumers kept, unfinished), by number; None unless :meth:`fail` suspended.
        self.suspended: dict[int, ChannelBook] | None = None
        #: Publishes pending when the connection was suspended: their outcome is unknown.
        self.unknown = 0
        #: Consume again when the broker cancels a consumer (``RecoveryPolicy``).
        self.reconsume_on_cancel = False
        #: Keep what each confirm-mode publish sent until its confirm, and on a loss keep the
        #: publishes pending instead of ending them unknown, for :meth:`republish` on the next
        #: connection (``RecoveryPolicy.republish_unknown``).
        self.republish_unknown = False
        #: Open a channel again when the broker closes it with a channel error
        #: (``RecoveryPolicy.reopen_channels``); :attr:`on_reopened` is told.
        self.reopen_channels = False
        #: Called with the old channel number, the new book and the error that closed the
        #: channel when it was reopened: the adapter moves its channel object to the new book
        #: (it may have the old number) and reports it. Without it nothing is reopened.
        self.on_reopened: Callable[[int, ChannelBook, AMQPError], None] | None = None

    @property
    def core(self) -> Connection:
        """The client core whose events this router routes."""
        return self._core

    def recover_with(
        self,
        policy: RecoveryPolicy,
        recover_on: Callable[[AMQPError], bool],
        on_reopened: Callable[[int, ChannelBook, AMQPError], None],
    ) -> None:
        """Route for a connection that *policy* recovers: *recover_on* says whether an error
        suspends the connection (see :meth:`fail`), *on_reopened* is told of each channel
        opened again after a channel error (see :attr:`on_reopened`), and the policy says
        whether a cancelled consumer consumes again, whether unconfirmed publishes are kept
        for :meth:`republish` and whether channels are reopened."""
        self.recover_on = recover_on
        self.on_reopened = on_reopened
        self.reconsume_on_cancel = policy.reconsume_on_cancel
        self.republish_unknown = policy.republish_unknown
        self.reopen_channels = policy.reopen_channels

    # --- registration (call right after the matching core call) --------------------------------

    def channel_opening(self, number: int, waiter: Waiter) -> ChannelBook:
        """``open_channel()`` returned *number*; *waiter* gets None at open-ok."""
        book = self.channels[number] = ChannelBook(number)
        if self.republish_unknown:
            book.kept = {}
        book.rpcs.append((waiter, None, None))
        return book

    def channel_reopened(self, number: int, lost: ChannelBook | None) -> ChannelBook:
        """Recovery opened a channel again as *number* on this router's connection: its book,
        carrying over what *lost* (the lost connection's book of it, if any) had (see
        :meth:`ChannelBook.reopened`)."""
        book = ChannelBook(number) if lost is None else lost.reopened(number)
        if book.kept is None and self.republish_unknown:
            book.kept = {}
        self.channels[number] = book
        return book

    def expect(
        self,
        channel: int,
        request: Method,
        waiter: Waiter,
        consumer: ConsumerSink | None = None,
    ) -> None:
        """*request*, which expects a reply, was sent on *channel* (see
        :meth:`ChannelBook.expect`)."""
        self.channels[channel].expect(request, waiter, consumer)

    def expect_close(self, channel: int, waiter: Waiter) -> None:
        """``close_channel()`` was called; *waiter* gets None when the channel is closed."""
        self.channels[channel].close_waiter = waiter

    def expect_confirm(self, channel: int, publish_number: int, sink: ConfirmSink) -> None:
        """A publish in confirm mode got *publish_number*."""
        self.channels[channel].confirms[publish_number] = sink

    def cancel_consumer(self, channel: int, consumer_tag: str, sink: ConsumerSink) -> bool:
        """The caller gave up a consumer the broker already confirmed (its wait for consume-ok
        ended just as the ok arrived): forget *sink* and send ``basic.cancel`` when the channel
        is open; its reply is dropped. True when something was sent (flush the core)."""
        book = self.channels.get(channel)
        if book is None or book.consumers.get(consumer_tag) is not sink:
            return False
        del book.consumers[consumer_tag]
        return self._send_unawaited(channel, BasicCancel(consumer_tag=consumer_tag))

    # --- events --------------------------------------------------------------------------------

    def handle(self, event: Event) -> bool:
        """Resolve whatever *event* answers; events about the transport are the adapter's.
        True when a delivery paused its consumer (:meth:`route_message`): flush the core."""
        if isinstance(event, MessageReceived):  # the hot path (any message_class): no lookup
            return self.route_message(event)
        route = _ROUTES.get(type(event))
        if route is not None:
            route(self, event)
        return False

    # --- one method per event type (see _ROUTES) -----------------------------------------------

    def _on_confirmed(self, event: Event) -> None:
        assert isinstance(event, PublishConfirmed)
        book = self.channels.get(event.channel)
        if book is not None:
            if self.telemetry is None and not book.tracker.holds_returns:
                # The common case (every number acked, no return to report): no outcome list.
                confirms = book.confirms
                for number in event.publish_numbers:
                    sink = confirms.pop(number, None)
                    if sink is not None:
                        sink.settle(number, None)
                return
            outcomes = book.tracker.confirmed(event.publish_numbers)
            self._settle(book, outcomes)
            if self.telemetry is not None:
                self.telemetry.confirmed(book.number, outcomes)

    def _on_nacked(self, event: Event) -> None:
        assert isinstance(event, PublishNacked)
        book = self.channels.get(event.channel)
        if book is not None:
            outcomes = book.tracker.nacked(event.publish_numbers)
            self._settle(book, outcomes)
            if self.telemetry is not None:
                self.telemetry.confirmed(book.number, outcomes)

    def _on_channel_opened(self, event: Event) -> None:
        assert isinstance(event, ChannelOpened)
        waiter = self.channels[event.channel].take(None)[0]
        if not waiter.done():
            waiter.set_result(None)
        elif self._core.state is ConnectionState.OPEN:
            # open_channel() gave up: nobody will use or close this channel.
            self._core.close_channel(event.channel, 200, "Normal shutdown")
            self.expect_close(event.channel, _UNAWAITED)

    def _on_consumer_cancelled(self, event: Event) -> None:
        assert isinstance(event, ConsumerCancelled)
        book = self.channels.get(event.channel)
        consumer = None if book is None else book.consumers.pop(event.consumer_tag, None)
        if consumer is None:
            return
        assert book is not None
        request = book.consumes.pop(event.consumer_tag, None)
        if (
            self.reconsume_on_cancel
            and request is not None
            and self._reconsume(event.channel, request, consumer)
        ):
            return
        consumer.finish(ConsumerCancelledError(event.consumer_tag), False)

    def _reconsume(self, channel: int, request: BasicConsume, consumer: ConsumerSink) -> bool:
        """The broker cancelled a consumer (its queue was deleted, a node went down): declare
        the queue again when the topology recorded it (with its bindings), then consume again
        with the same tag into the same sink. A refusal closes the channel, which ends the
        sink with the broker's error. False when nothing could be sent."""
        core = self._core
        if core.state is not ConnectionState.OPEN or core.channel_state(channel) is not (
            ChannelState.OPEN
        ):
            return False
        topology = core.topology
        declare = topology.queues.get(request.queue)
        if declare is not None and declare.queue:  # a server-named one would get a new name
            self._send_unawaited(channel, declare)
            for bind in topology.queue_bindings:
                if bind.queue == request.queue:
                    self._send_unawaited(channel, bind)
        core.send_method(channel, request)
        self.channels[channel].expect(request, _KEEP, consumer)
        logger.info(
            "consuming again from %r after the broker cancelled %s",
            request.queue,
            request.consumer_tag,
        )
        return True

    def _on_flow_changed(self, event: Event) -> None:
        assert isinstance(event, ChannelFlowChanged)
        book = self.channels.get(event.channel)
        if book is not None:
            book.flow_active = event.active

    def _on_blocked(self, event: Event) -> None:
        assert isinstance(event, BlockedByPeer)
        self.blocked = event.reason

    def _on_unblocked(self, event: Event) -> None:
        self.blocked = None

    def _on_connection_closed(self, event: Event) -> None:
        assert isinstance(event, ConnectionClosed)
        if event.by_peer:
            self.fail(error_from(event, connection=True))
        else:
            self.closed_by_us()

    def _on_connection_lost(self, event: Event) -> None:
        self.fail(ConnectionLostError("the connection to the broker was lost"))

    def closed_by_us(self) -> None:
        """Our ``connection.close`` was answered: everything still waiting fails, consumers end."""
        self._fail(ConnectionClosedError("the connection was closed", reply_code=200), by_us=True)

    def fail(self, error: AMQPError) -> None:
        """The connection is gone: every waiter, consumer and unconfirmed publish gets *error*
        (the first error given is the one kept in :attr:`error`).

        When :attr:`recover_on` says *error* starts recovery, consumers are kept instead
        (see :meth:`suspend`)."""
        if self.suspended is not None:
            return  # already suspended for recovery: the first error stands
        if self.error is None and self.recover_on is not None and self.recover_on(error):
            self.suspend(error)
            return
        self._fail(error, by_us=False)

    def suspend(self, error: AMQPError) -> None:
        """The connection was lost and will be recovered: waiting calls get *error*,
        unconfirmed publishes an unknown outcome, and consumers are kept, unfinished, in
        :attr:`suspended` for the adapter to attach to the next connection's channels."""
        self.error = error
        channels, self.channels = self.channels, {}
        for book in channels.values():
            self.unknown += self._set_aside(book, error)
        self.suspended = channels

    def _set_aside(self, book: ChannelBook, error: AMQPError) -> int:
        """*book*'s channel ended with *error* and will be opened again: waiting calls get the
        error, publishes kept for republish stay pending and the other unconfirmed ones end
        unknown (how many is returned), consumers are kept, unfinished."""
        consumers, book.consumers = book.consumers, {}
        # Not in the topology (their cancel-ok came, or their consume-ok did not yet): the
        # restore consumes them again itself, or their iterators would wait for ever.
        restore = book.paused_consumes()
        for waiter, sink, sent in book.rpcs:
            consume = None if sent is None else AMQP_0_9_1.adapt(sent)
            if waiter is _KEEP and sink is not None and isinstance(consume, BasicConsume):
                # consumed again by the router (a resume, a server cancel): it was in flight
                tag = next(
                    (t for t, c in book.consumes.items() if c == consume), consume.consumer_tag
                )
                consumers[tag] = sink
                restore.setdefault(tag, book.consumes.get(tag, consume))
        book.restore_consumes = restore
        consumers.update(book.paused)  # restored consuming: their buffers start again
        book.paused = {}
        book.pausing = {}
        kept = book.kept or {}
        pending = {n: sink for n, sink in book.confirms.items() if n in kept}
        book.confirms = {n: sink for n, sink in book.confirms.items() if n not in kept}
        unknown = len(book.confirms)
        _settle_all(book, error, by_us=False)
        book.consumers = consumers
        book.confirms = pending
        book.superseded = True
        if self.telemetry is not None:
            self.telemetry.channel_ended(book.number, error)
        return unknown

    def resume(self, lost: ChannelBook | None, book: ChannelBook) -> tuple[int, int]:
        """Recovery restored the topology and the adapter moved its channel object to *book*,
        the new connection's channel that replaces *lost*: consumers the restore left out
        (filtered, or refused and skipped) end, and *lost*'s kept publishes go out again
        (:meth:`republish`). Returns how many were published again and how many ended
        unknown; the adapter flushes the core."""
        restored = {tag for _, tag in self._core.topology.consumers}
        for tag, sink in list(book.consumers.items()):
            if tag not in restored:
                del book.consumers[tag]
                sink.finish(ConnectionLostError("its consumer was not restored"), False)
        if lost is None or not lost.confirms:
            return 0, 0
        return self.republish(lost, book)

    def republish(self, lost: ChannelBook, book: ChannelBook) -> tuple[int, int]:
        """Send again, on the new connection's channel *book*, the publishes *lost* kept
        pending at the loss (:meth:`suspend`), oldest first; each keeps its sink, so its ticket
        or waiter gets the new publish's outcome. One that cannot be sent (the channel is not
        open or not in confirm mode: the recovery filter left ``confirm.select`` out) ends
        unknown. Returns how many were sent and how many ended unknown; the adapter flushes the
        core."""
        confirms, lost.confirms = lost.confirms, {}
        kept, lost.kept = lost.kept or {}, None if lost.kept is None else {}
        core = self._core
        sendable = (
            book.confirm_mode
            and core.state is ConnectionState.OPEN
            and core.channel_state(book.number) is ChannelState.OPEN
        )
        cause = lost.error or ConnectionLostError("the connection was lost")
        sent = 0
        for old in sorted(confirms):
            sink = confirms[old]
            record = kept.get(old)
            if sendable and record is not None and book.kept is not None:
                number = core.publish(book.number, *record)
                if number is not None:
                    book.kept[number] = record
                    book.confirms[number] = sink
                    sent += 1
                    continue
            sink.settle(old, PublishOutcomeUnknownError(old, cause))
        if sent:
            logger.info("published %d messages again on channel %d", sent, book.number)
        return sent, len(confirms) - sent

    def _fail(self, error: AMQPError, *, by_us: bool) -> None:
        if self.error is None:
            self.error = error
        channels, self.channels = self.channels, {}
        for book in channels.values():
            _settle_all(book, error, by_us=by_us)
            if self.telemetry is not None:
                self.telemetry.channel_ended(book.number, error)

    def _reopen(self, book: ChannelBook, error: AMQPError) -> bool:
        """The broker closed *book*'s channel with *error*: open it again (``channel.open``,
        then its ``basic.qos``, ``confirm.select`` and consumers with their tags, pipelined,
        then the publishes kept for republish), and tell :attr:`on_reopened`. The call that
        caused the error still gets it. False (the channel stays closed) while the connection
        is not open, while our own close of it was pending, and when it closed again before
        its restore was answered: the restore itself was refused, and trying again would
        loop."""
        core = self._core
        if (
            self.on_reopened is None
            or core.state is not ConnectionState.OPEN
            or book.close_waiter is not None
            or any(waiter is _RESTORE for waiter, _, _ in book.rpcs)
        ):
            return False
        unknown = self._set_aside(book, error)
        number = core.open_channel()
        new = self.channel_reopened(number, book)
        new.rpcs.append((_RESTORE, None, None))
        for qos in book.qos.values():
            self._restore(new, qos)
        if book.confirm_mode:
            self._restore(new, ConfirmSelect())
        for tag, sink in book.consumers.items():
            consume = book.consumes.get(tag)
            if consume is None:
                sink.finish(error, False)
                continue
            self._restore(new, attrs.evolve(consume, consumer_tag=tag), sink)
        book.consumers = {}
        republished = self.republish(book, new)[0] if book.confirms else 0
        logger.info(
            "the broker closed channel %d (%s): opened it again as %d, %d consumers and %d "
            "publishes carried over, %d publishes unknown",
            book.number,
            error,
            number,
            len(new.consumers),
            republished,
            unknown,
        )
        self.on_reopened(book.number, new, error)
        return True

    def _restore(
        self, book: ChannelBook, request: Method, sink: ConsumerSink | None = None
    ) -> None:
        request = self._core.protocol.adapt(request)
        self._core.send_method(book.number, request)
        book.expect(request, _RESTORE, sink)

    def _send_unawaited(self, channel: int, request: Method) -> bool:
        """Send *request*, whose reply nobody waits for, while the channel is open."""
        core = self._core
        if core.state is not ConnectionState.OPEN or core.channel_state(channel) is not (
            ChannelState.OPEN
        ):
            return False
        request = core.protocol.adapt(request)
        core.send_method(channel, request)
        self.channels[channel].expect(request, _UNAWAITED)
        return True

    def route_message(self, event: MessageReceived) -> bool:
        """:meth:`handle` for a delivery or a get-ok: adapters call it straight from their
        read loop (once per message, the dispatch is worth skipping). True when it queued
        output in the core (a consumer over its bound was paused): flush."""
        book = self.channels.get(event.channel)
        if book is None:
            return False  # a closing channel's delivery: the broker requeues it
        method = event.method
        if type(method) is BasicDeliver:
            tag = method.consumer_tag
            consumer = book.consumers.get(tag)
            if consumer is not None:
                return False if consumer.deliver(event, book) else self._pause(book, tag)
            # Between our basic.cancel and its ok; never rejected, so a stream queue's offsets
            # stay untouched and a classic queue requeues it at channel close.
            logger.debug(
                "delivery %d for a cancelled consumer %r kept unacknowledged",
                method.delivery_tag,
                method.consumer_tag,
            )
            return False
        # A get-ok names its basic.get, which may have been passed by an outstanding consume
        # or cancel like any reply.
        waiter = book.take(event.request)[0]
        if not waiter.done():
            waiter.set_result(event)
        return False

    # --- a consumer's bound -------------------------------------------------------------------

    def _pause(self, book: ChannelBook, tag: str) -> bool:
        """A consumer holds more than its bound (the application lags): pause it with a
        ``basic.cancel`` (the deliveries already on their way still come to it) when the broker
        does not bound it itself and pausing is safe. True when the cancel was queued."""
        if tag in book.pausing or tag in book.paused or tag in book.unbounded:
            return False
        sent = book.consumes.get(tag)
        core = self._core
        if (
            sent is None
            or core.state is not ConnectionState.OPEN
            or core.channel_state(book.number) is not ChannelState.OPEN
        ):
            return False
        consume = AMQP_0_9_1.adapt(sent)
        assert isinstance(consume, BasicConsume)
        if not consume.no_ack and book.prefetch_count:
            book.unbounded.add(tag)  # no: the prefetch bounds it, the broker sends no more
            return False
        why = _unpausable(consume, core)
        if why is not None:
            book.unbounded.add(tag)
            logger.warning(
                "consumer %s holds more deliveries than its buffer_size and cannot be "
                "paused (%s): its buffer grows until the application catches up; give the "
                "channel a prefetch (basic_qos) to bound it",
                tag,
                why,
            )
            return False
        request = core.protocol.adapt(BasicCancel(consumer_tag=tag))
        core.send_method(book.number, request)
        book.rpcs.append((_PAUSE, None, request))
        book.pausing[tag] = False
        logger.debug("paused consumer %s on channel %d: its buffer is full", tag, book.number)
        return True

    def resume_consumer(self, channel: int, consumer_tag: str) -> bool:
        """A paused consumer's application caught up (its sink calls this once its buffer is
        down to half its bound): consume again, with the same tag into the same sink. True
        when something was queued in the core (flush); nothing when it was not paused."""
        book = self.channels.get(channel)
        if book is None:
            return False
        if consumer_tag in book.pausing:
            book.pausing[consumer_tag] = True  # consumed again at its cancel-ok
            return False
        sink = book.paused.pop(consumer_tag, None)
        if sink is None:
            return False
        return self._consume_again(book, consumer_tag, sink)

    def _consume_again(self, book: ChannelBook, tag: str, sink: ConsumerSink) -> bool:
        core = self._core
        consume = book.consumes.get(tag)
        if (
            consume is None
            or core.state is not ConnectionState.OPEN
            or core.channel_state(book.number) is not ChannelState.OPEN
        ):
            book.paused[tag] = sink  # ended with the channel, like the others
            return False
        request = core.protocol.adapt(consume)
        core.send_method(book.number, request)
        book.expect(request, _KEEP, sink)
        logger.debug("resumed consumer %s on channel %d", tag, book.number)
        return True

    def _on_method(self, event: Event) -> None:
        assert isinstance(event, MethodReceived)
        book = self.channels.get(event.channel)
        if book is None or event.request is None:
            logger.debug("unsolicited %s on channel %d", event.method.NAME, event.channel)
            return
        waiter, consumer, request = book.take(event.request)
        # A 0-8/0-9 connection's own classes are handed out as 0-9-1's of the same meaning.
        method = AMQP_0_9_1.adapt(event.method)
        cls = type(method)
        if consumer is not None and cls is BasicConsumeOk:
            assert isinstance(method, BasicConsumeOk)
            book.consumers[method.consumer_tag] = consumer
            if isinstance(request, BasicConsume):
                book.consumes[method.consumer_tag] = request
            if waiter.done():  # basic_consume() gave up: nobody iterates this consumer
                # It stays registered until cancel-ok: what comes before goes to its sink.
                self._send_unawaited(event.channel, BasicCancel(consumer_tag=method.consumer_tag))
        elif cls is BasicCancelOk and waiter is _PAUSE:
            assert isinstance(method, BasicCancelOk)
            tag = method.consumer_tag
            paused = book.consumers.pop(tag, None)
            resume = book.pausing.pop(tag, False)
            if paused is not None:
                book.paused[tag] = paused
                if resume:  # queued in the core: the adapter flushes after a reply
                    self.resume_consumer(event.channel, tag)
        elif cls is BasicCancelOk:
            assert isinstance(method, BasicCancelOk)
            cancelled = book.consumers.pop(method.consumer_tag, None)
            book.consumes.pop(method.consumer_tag, None)
            if cancelled is not None:
                cancelled.finish(None, True)
        elif cls is BasicQosOk:
            assert request is not None
            request = AMQP_0_9_1.adapt(request)
            assert isinstance(request, BasicQos)
            book.prefetch_count = request.prefetch_count
            book.qos[request.global_] = request
        if not waiter.done():
            waiter.set_result(method)

    @staticmethod
    def _settle(book: ChannelBook, outcomes: list[tuple[int, AMQPError | None]]) -> None:
        confirms = book.confirms
        for number, outcome in outcomes:
            sink = confirms.pop(number, None)
            if sink is not None:
                sink.settle(number, outcome)
        kept = book.kept
        if kept:
            for number, _ in outcomes:
                kept.pop(number, None)

    def _on_returned(self, event: Event) -> None:
        assert isinstance(event, PublishReturned)
        book = self.channels.get(event.channel)
        if book is None:
            return
        error = book.tracker.returned(
            event.channel, event.publish_number, event.method, event.properties, event.body
        )
        if event.publish_number is not None:
            return  # reported with the confirm that follows
        (_LOG_RETURNS if book.return_sink is None else book.return_sink).returned(error)

    def _on_channel_closed(self, event: Event) -> None:
        assert isinstance(event, ChannelClosed)
        book = self.channels.pop(event.channel, None)
        if book is None:
            return
        if event.by_peer:
            error: AMQPError = error_from(event, connection=False)
            if self.reopen_channels and self._reopen(book, error):
                return
        else:
            error = ChannelClosedError("the channel was closed", reply_code=200)
        _settle_all(book, error, by_us=not event.by_peer)
        if self.telemetry is not None:
            self.telemetry.channel_ended(book.number, error)


def _unpausable(consume: BasicConsume, core: Connection) -> str | None:
    """Why cancelling *consume* for a while could lose or reorder what the application relies
    on, or None when it is safe: a paused exclusive consumer lets another one take the queue,
    the last consumer of an auto-delete queue deletes it (and what is in it), and a queue this
    connection did not declare may be one."""
    if consume.exclusive:
        return "an exclusive consumer"
    if consume.queue == _REPLY_TO:
        return "direct reply-to"
    declared = core.topology.queues.get(consume.queue)
    if declared is None:
        return f"queue {consume.queue!r} was not declared on this connection"
    if declared.auto_delete:
        return f"queue {consume.queue!r} is auto-delete"
    return None


def end_suspended(books: Mapping[int, ChannelBook], cause: AMQPError) -> None:
    """Recovery gave up: the consumers kept in the lost connection's *books* end with *cause*,
    and the publishes kept for republish end unknown."""
    for book in books.values():
        consumers, book.consumers = book.consumers, {}
        consumers.update(book.paused)
        book.paused = {}
        for sink in consumers.values():
            sink.finish(cause, False)
        confirms, book.confirms = book.confirms, {}
        for number, confirm in sorted(confirms.items()):
            confirm.settle(number, PublishOutcomeUnknownError(number, cause))
        if book.kept is not None:
            book.kept = {}


#: How :meth:`Router.handle` routes each event type but ``MessageReceived``; the others
#: (heartbeat timeouts, the handshake's) are the adapter's alone.
_ROUTES: Final[dict[type[object], Callable[[Router, Event], None]]] = {
    MethodReceived: Router._on_method,
    PublishConfirmed: Router._on_confirmed,
    PublishNacked: Router._on_nacked,
    PublishReturned: Router._on_returned,
    ChannelOpened: Router._on_channel_opened,
    ChannelClosed: Router._on_channel_closed,
    ConsumerCancelled: Router._on_consumer_cancelled,
    ChannelFlowChanged: Router._on_flow_changed,
    BlockedByPeer: Router._on_blocked,
    UnblockedByPeer: Router._on_unblocked,
    ConnectionClosed: Router._on_connection_closed,
    ConnectionLost: Router._on_connection_lost,
}
