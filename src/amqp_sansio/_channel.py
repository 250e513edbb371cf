"""One channel's machine, as h2's ``H2Stream`` is one stream's: its state, its reply FIFOs,
content assembly, publisher confirms, returns tied to their publishes.

A :class:`ChannelMachine` never calls back into the connection: it writes its automatic answers
(open-ok, close-ok, flow-ok, cancel-ok) to the connection's :class:`~._outbox.Outbox` and hands
extra events to the connection's queue, both given in its :class:`ChannelLink`. Which method is
legal in which state, and what it does, comes from :mod:`._state`; this module only carries the
effects out.
"""

from __future__ import annotations

import functools
from collections import deque
from typing import TYPE_CHECKING, Final, Protocol, TypeAlias, cast, final

from ._confirms import Confirms, tie_returns
from ._errors import LocalProtocolError, RemoteProtocolError
from ._events import (
    ChannelClosed,
    ChannelFlowChanged,
    ChannelOpened,
    ConsumerCancelled,
    MessageBodyReceived,
    MessageCompleted,
    MessageReceived,
    MessageStarted,
    MethodReceived,
    PublishConfirmed,
    PublishNacked,
    PublishReturned,
)
from ._generated.reply_codes import ReplyCode
from ._state import ChannelState, ChannelTransition, Effect, discards, refusal_code

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._events import Event
    from ._frames import ContentBodyFrame, ContentHeaderFrame
    from ._generated.spec_0_9_1 import (
        BasicAck,
        BasicCancel,
        BasicNack,
        BasicProperties,
        BasicPublish,
        BasicReturn,
        ChannelClose,
        ChannelFlow,
    )
    from ._method import ContentProperties, Method, Role
    from ._outbox import Outbox
    from ._protocol import ProtocolSpec
    from ._state import CompiledTables
    from ._topology import TopologyRecorder

__all__ = ["Assembly", "ChannelLink", "ChannelMachine", "new_assembly"]

#: A body is allocated whole once this fraction of it arrived; before that it grows with what
#: arrives. The announced size is the peer's word: memory held stays within this factor of the
#: octets received, and a large message peaks at 1 + 1/16 of its size (the copy at the switch).
_GROWTH: Final = 16
_new: Final = object.__new__
_H = ChannelState
_H_OPEN: Final = ChannelState.OPEN


@final
class Assembly:
    """One message being received on a channel: method, then header, then bodies."""

    __slots__ = (
        "body",
        "body_size",
        "chunked",
        "method",
        "properties",
        "received",
        "request",
        "returned",
    )

    def __init__(self, method: Method) -> None:
        self.method = method
        #: The request a content reply answers (get-ok); it stays outstanding until the whole
        #: message arrived.
        self.request: Method | None = None
        #: A basic.return: handed out as PublishReturned, tied to its confirm.
        self.returned = False
        self.properties: ContentProperties | None = None
        self.body_size = 0
        self.received = 0
        self.body: bytearray | None = None
        self.chunked = False


def new_assembly(method: Method) -> Assembly:
    """An :class:`Assembly` for *method* (once per delivery: ``object.__new__`` and slot stores
    take less time than ``__init__``)."""
    assembly = _new(Assembly)
    assembly.method = method
    assembly.request = None
    assembly.returned = False
    assembly.properties = None
    assembly.body_size = 0
    assembly.received = 0
    assembly.body = None
    assembly.chunked = False
    return assembly


def _remote(text: str, code: int, ids: tuple[int, int] = (0, 0)) -> RemoteProtocolError:
    return RemoteProtocolError(text, reply_code=code, class_id=ids[0], method_id=ids[1])


def _local(text: str, code: int, ids: tuple[int, int] = (0, 0)) -> LocalProtocolError:
    return LocalProtocolError(text, reply_code=code, class_id=ids[0], method_id=ids[1])


class _Tagged(Protocol):
    """basic.consume, basic.cancel and their replies, in every version."""

    consumer_tag: str


_Handler: TypeAlias = "Callable[[ChannelMachine, Method], Event | None]"
_Dispatch: TypeAlias = "dict[ChannelState, dict[type[Method], tuple[_Handler, ChannelState]]]"


class _Make(Protocol):
    """A method class of some version, called with its fields by name."""

    def __call__(self, **fields: bool | int | str) -> Method: ...


@final
class ChannelLink:
    """What the channels of one connection share: the version's tables, where output and extra
    events go, the topology recorder (client role) and the limits on received content."""

    __slots__ = (
        "chunk_threshold",
        "close_ok",
        "dispatch",
        "events",
        "flow",
        "flow_ok",
        "make",
        "max_message_size",
        "message_class",
        "outbox",
        "role",
        "spec",
        "tables",
        "topology",
    )

    def __init__(
        self,
        *,
        spec: ProtocolSpec,
        tables: CompiledTables,
        role: Role,
        outbox: Outbox,
        events: deque[Event],
        topology: TopologyRecorder | None,
        max_message_size: int,
        chunk_threshold: int | None,
        message_class: type[MessageReceived],
    ) -> None:
        self.spec: Final = spec
        self.tables: Final = tables
        self.role: Final = role
        self.outbox: Final = outbox
        self.events: Final = events
        self.topology: Final = topology
        self.max_message_size: Final = max_message_size
        self.chunk_threshold: Final = chunk_threshold
        self.message_class: Final = message_class
        #: The peer's methods: ``[state][class] -> (handler, next state)``.
        self.dispatch: Final = _dispatch(tables)
        by_meaning = spec.by_meaning
        self.flow: Final = by_meaning["channel.flow"]
        self.close_ok: Final = by_meaning["channel.close-ok"]
        self.flow_ok: Final = cast("_Make", by_meaning["channel.flow-ok"])

        def make(meaning: str) -> _Make:
            return cast("_Make", by_meaning[meaning])

        #: The version's class for a meaning, to build an automatic answer with.
        self.make: Final = make


@final
class ChannelMachine:
    """One channel: its state, the requests each side still has to answer, the message being
    received, and publisher confirms (once ``confirm.select`` was sent or received)."""

    __slots__ = (
        "close",
        "confirms",
        "content",
        "link",
        "number",
        "requests_in",
        "requests_out",
        "state",
    )

    def __init__(self, number: int, link: ChannelLink) -> None:
        self.number: Final = number
        self.link: Final = link
        self.state = _H.CLOSED
        #: Requests we sent, oldest first, each waiting for the peer's reply.
        self.requests_out: deque[Method] = deque()
        #: Requests the peer sent that the application must answer, oldest first.
        self.requests_in: deque[Method] = deque()
        #: The channel.close we sent, for the ChannelClosed event.
        self.close: ChannelClose | None = None
        self.content: Assembly | None = None
        #: Set by confirm.select (sent by the client, received by the server).
        self.confirms: Confirms | None = None

    def __repr__(self) -> str:
        return f"<ChannelMachine {self.number} {self.state.value}>"

    # --- The peer's methods -------------------------------------------------------------------

    def receive(self, method: Method) -> Event | None:
        """A method from the peer on this channel (the connection is open).

        :raises RemoteProtocolError: it is illegal here (505 inside content, 503/504 by the
            tables) or answers no outstanding request.
        """
        cls = type(method)
        content = self.content
        if content is not None:
            raise _remote(
                f"{cls.NAME} on channel {self.number} interrupts the content of "
                f"{content.method.NAME}",
                ReplyCode.UNEXPECTED_FRAME,
                self.link.spec.ids(cls),
            )
        state = self.state
        entry = self.link.dispatch[state].get(cls)
        if entry is None:
            if discards(state, self.link.role):
                return None
            raise _remote(
                f"{cls.NAME} is not allowed from the {self.link.role.peer.value} on channel "
                f"{self.number} in state {state.value}",
                refusal_code(state, cls.NAME),
                self.link.spec.ids(cls),
            )
        handler, self.state = entry
        return handler(self, method)

    def pass_through(self, method: Method) -> MethodReceived:
        """A method the application handles, matched to the request it answers."""
        request = self._match_reply(method)
        if request is not None and type(request) in self.link.tables.recorded:
            topology = self.link.topology
            assert topology is not None  # recorded only in the client role
            topology.succeeded(self.number, request, method)
        # A reply may be a request too (0-8/0-9 file.open-ok asks for file.stage).
        if method.expects_reply():
            self.requests_in.append(method)
        return MethodReceived(channel=self.number, method=method, request=request)

    def _opened_by_peer(self, method: Method) -> ChannelOpened:
        self._answer(self.link.make("channel.open-ok")())
        return ChannelOpened(channel=self.number)

    def _open_ok(self, method: Method) -> ChannelOpened:
        self._match_reply(method)
        return ChannelOpened(channel=self.number)

    def _closed_by_peer(self, method: Method) -> Event | None:
        self._answer(self.link.close_ok())
        if self.state is not _H.CLOSED:
            return None  # crossed our close: ChannelClosed comes with our close-ok
        return self._closed(cast("ChannelClose", method), by_peer=True)

    def _close_ok(self, method: Method) -> Event:
        assert self.close is not None
        return self._closed(self.close, by_peer=False)

    def _closed(self, close: ChannelClose, *, by_peer: bool) -> Event:
        topology = self.link.topology
        if topology is not None:
            topology.channel_closed(self.number)
        confirms = self.confirms
        closed = ChannelClosed(
            channel=self.number,
            reply_code=close.reply_code,
            reply_text=close.reply_text,
            class_id=close.class_id,
            method_id=close.method_id,
            by_peer=by_peer,
            unconfirmed_publishes=() if confirms is None else confirms.unsettled(),
        )
        if confirms is None:
            return closed
        return self._emit(confirms.release(), closed)

    def _flow(self, method: Method) -> ChannelFlowChanged:
        flow = cast("ChannelFlow", method)
        if self.requests_in:  # the application owes older replies: flow-ok must not overtake
            self.requests_in.append(method)
        else:
            self._answer(self.link.flow_ok(active=flow.active))
        return ChannelFlowChanged(channel=self.number, active=flow.active)

    def _consumer_cancelled(self, method: Method) -> ConsumerCancelled:
        cancel = cast("BasicCancel", method)
        if not cancel.nowait:
            self._answer(self.link.make("basic.cancel-ok")(consumer_tag=cancel.consumer_tag))
        topology = self.link.topology
        if topology is not None:
            topology.consumer_cancelled(self.number, cancel.consumer_tag)
        return ConsumerCancelled(channel=self.number, consumer_tag=cancel.consumer_tag)

    def _confirms_selected(self, method: Method) -> MethodReceived:
        # Server role: the client's publishes are numbered from now on.
        if self.confirms is None:
            self.confirms = Confirms()
        return self.pass_through(method)

    def _confirm(self, method: Method) -> Event | None:
        # Client role: a publisher confirm.
        confirm = cast("BasicAck | BasicNack", method)
        confirms = self.confirms
        tag = confirm.delivery_tag
        if confirms is None or not confirms.covers(tag, confirm.multiple):
            # RabbitMQ closes a channel with 406 when a client acks an unknown delivery tag;
            # a broker that confirms what was never published is broken beyond one channel,
            # and the core's peer errors are connection errors: 406 on the connection.
            raise _remote(
                f"{confirm.NAME} of delivery tag {tag} (multiple={confirm.multiple}) on channel "
                f"{self.number} confirms no unconfirmed publish ("
                + (
                    "the channel is not in confirm mode"
                    if confirms is None
                    else f"{confirms.next - 1} published; unknown or already confirmed"
                )
                + ")",
                ReplyCode.PRECONDITION_FAILED,
                self.link.spec.ids(type(confirm)),
            )
        numbers = confirms.settle(tag, confirm.multiple)
        event: Event
        if confirm.NAME == "basic.ack":
            event = PublishConfirmed(channel=self.number, publish_numbers=numbers)
        else:
            event = PublishNacked(channel=self.number, publish_numbers=numbers)
        if not confirms.mandatory:
            return event
        return self._emit(tie_returns(confirms, numbers), event)

    def _delivery(self, method: Method) -> None:
        self.content = new_assembly(method)
        if method.RESPONSES:  # content that asks for a reply (0-8 test.content)
            self.requests_in.append(method)

    def _content_reply(self, method: Method) -> None:
        # get-ok answers a basic.get, which stays outstanding until the body is in
        assembly = self.content = new_assembly(method)
        assembly.request = self._match_reply(method, keep=True)
        if method.RESPONSES:
            self.requests_in.append(method)

    def _published(self, method: Method) -> None:
        # Server role: the client numbers its publishes the same way once confirms are on.
        if self.confirms is not None:
            self.confirms.next += 1
        self.content = new_assembly(method)

    def _returned_start(self, method: Method) -> None:
        assembly = self.content = new_assembly(method)
        assembly.returned = True

    def _match_reply(self, method: Method, *, keep: bool = False) -> Method | None:
        """Pop the request *method* answers (with *keep*, only find it); None when it is not a
        reply. 503 when it answers no outstanding request; RabbitMQ's reorder rule
        (:data:`~._state.OVERTAKABLE_REQUESTS`) lets a reply skip consumes and cancels."""
        cls = type(method)
        tables = self.link.tables
        if cls not in tables.replies:
            return None
        requests = self.requests_out
        tag = cast("_Tagged", method).consumer_tag if cls in tables.tagged else None
        overtakable = tables.overtakable
        untagged: int | None = None  # a consume/cancel this -ok answers, though its tag differs
        for index, request in enumerate(requests):
            skippable = type(request) in overtakable
            if cls in type(request).RESPONSES:
                if tag is None or (
                    skippable and cast("_Tagged", request).consumer_tag in (tag, "")
                ):
                    if not keep:
                        del requests[index]
                    return request
                if untagged is None:
                    untagged = index
            if not skippable:
                break
        if untagged is not None:
            request = requests[untagged]
            if not keep:
                del requests[untagged]
            return request
        oldest = requests[0].NAME if requests else "nothing"
        raise _remote(
            f"{cls.NAME} on channel {self.number} answers no outstanding request (oldest: "
            f"{oldest})",
            ReplyCode.COMMAND_INVALID,
            self.link.spec.ids(cls),
        )

    def _emit(self, first: list[PublishReturned], last: Event) -> Event:
        """Hand out *first*, then *last*, through the connection's queue (only used while it
        is empty, so the order holds)."""
        if not first:
            return last
        events = self.link.events
        events.extend(first[1:])
        events.append(last)
        return first[0]

    # --- Content ------------------------------------------------------------------------------

    def on_header(self, frame: ContentHeaderFrame) -> Event | None:
        """The content header of the message under way (``content`` is set)."""
        assembly = self.content
        assert assembly is not None
        method = assembly.method
        if assembly.properties is not None or frame.class_id != method.CLASS_ID:
            raise RemoteProtocolError(
                f"unexpected content header (class {frame.class_id}) on channel {frame.channel}"
                f" after {method.NAME}",
                reply_code=ReplyCode.UNEXPECTED_FRAME,
            )
        size = frame.body_size
        link = self.link
        if size > link.max_message_size:
            # Refused before a single body octet is buffered. A hard 506 rather than a channel
            # close with 311: the body frames still on the wire could only be skipped by
            # reading them, and a peer that sends more than we said we accept is a resource
            # problem for the whole connection (RabbitMQ treats its own limits on frames the
            # same way).
            ids = link.spec.ids(type(method))
            raise RemoteProtocolError(
                f"{method.NAME} on channel {frame.channel} announces a body of {size} octets, "
                f"over max_message_size {link.max_message_size}",
                reply_code=ReplyCode.RESOURCE_ERROR,
                class_id=ids[0],
                method_id=ids[1],
            )
        assembly.properties = frame.properties
        assembly.body_size = size
        threshold = link.chunk_threshold
        # Returns always arrive whole: one event ties them to their publish.
        if threshold is not None and size > threshold and not assembly.returned:
            assembly.chunked = True
            link.events.append(
                MessageStarted(
                    channel=frame.channel,
                    method=method,
                    properties=frame.properties,
                    body_size=size,
                    request=assembly.request,
                )
            )
            return None
        if size == 0:
            return self._message_done(assembly, b"")
        return None

    def on_body(self, frame: ContentBodyFrame) -> Event | None:
        """A content body frame of the message under way (``content`` is set)."""
        assembly = self.content
        assert assembly is not None
        payload = frame.payload
        size = len(payload)
        received = assembly.received
        if assembly.properties is None or size > assembly.body_size - received:
            # 501 for an overrun: the header fixed the framing of this message and the body
            # frame breaks it (a frame-level inconsistency, not a frame out of sequence).
            # A body before the header is out of sequence: 505.
            code = (
                ReplyCode.UNEXPECTED_FRAME if assembly.properties is None else ReplyCode.FRAME_ERROR
            )
            raise RemoteProtocolError(
                f"content body frame of {size} octets on channel {self.number} "
                + (
                    "before the content header"
                    if assembly.properties is None
                    else f"overruns the announced body size {assembly.body_size} "
                    f"({received} received)"
                ),
                reply_code=code,
            )
        total = received + size
        assembly.received = total
        if assembly.chunked:
            if total == assembly.body_size:
                self._finish(assembly)
                self.link.events.append(MessageCompleted(channel=self.number))
            return MessageBodyReceived(channel=self.number, data=payload)
        if size == assembly.body_size:
            return self._message_done(assembly, payload)
        body = assembly.body
        body_size = assembly.body_size
        if body is None:
            if total * _GROWTH < body_size:
                assembly.body = bytearray(payload)  # held: only what arrived
                return None
            body = assembly.body = bytearray(body_size)
        elif len(body) < body_size:  # still growing with what arrives
            if total * _GROWTH < body_size:
                body += payload
                return None
            whole = bytearray(body_size)
            whole[:received] = body
            body = assembly.body = whole
        body[received:total] = payload
        if total == body_size:
            return self._message_done(assembly, body)
        return None

    def _finish(self, assembly: Assembly) -> None:
        self.content = None
        if assembly.request is not None:
            _forget(self.requests_out, assembly.request)

    def _message_done(
        self, assembly: Assembly, body: bytes | bytearray | memoryview
    ) -> Event | None:
        self.content = None
        properties = assembly.properties
        assert properties is not None
        method = assembly.method
        request = assembly.request
        if request is not None:
            _forget(self.requests_out, request)
        if assembly.returned:
            # The header's class was checked against the method's: a return's is basic's.
            return self._returned(
                cast("BasicReturn", method), cast("BasicProperties", properties), body
            )
        # Once per delivery: object.__new__ and slot stores take a third of the time of the
        # keyword __init__ (0.08 vs 0.27 us, CPython 3.11). MessageReceived has no validators.
        event = _new(self.link.message_class)
        event.channel = self.number
        event.method = method
        event.properties = properties
        event.body = body
        event.request = request
        return event

    def _returned(
        self,
        method: BasicReturn,
        properties: BasicProperties,
        body: bytes | bytearray | memoryview,
    ) -> PublishReturned | None:
        """Client role: hand a return out now, or hold it for the confirm that covers it."""
        event = PublishReturned(
            channel=self.number,
            publish_number=None,
            method=method,
            properties=properties,
            body=body,
        )
        confirms = self.confirms
        if confirms is None:
            return event
        key = (method.exchange, method.routing_key)
        free = confirms.free.get(key, 0)
        if not free:  # no unconfirmed mandatory publish left that it could belong to
            if not confirms.held:
                return event
            confirms.held.append((event, False))  # never overtake an older return
            return None
        if free == 1:
            del confirms.free[key]
        else:
            confirms.free[key] = free - 1
        confirms.held.append((event, True))
        return None

    # --- Our methods --------------------------------------------------------------------------

    def check_send(self, method: Method) -> ChannelTransition:
        """The row of *method* if we may send it now; raises and changes nothing otherwise.

        :raises LocalProtocolError: illegal in this state, a reply to something else than the
            oldest request received, or (server) an ack that settles no publish.
        """
        cls = type(method)
        state = self.state
        row = self.link.tables.channel_send[state].get(cls)
        if row is None:
            raise _local(
                f"cannot send {cls.NAME} as the {self.link.role.value} on channel {self.number} "
                f"in state {state.value}",
                refusal_code(state, cls.NAME),
                self.link.spec.ids(cls),
            )
        self.check_reply(method)
        if row.sent is Effect.SETTLE_PUBLISHES:
            self._check_settles(method)
        return row

    def sent(self, method: Method, row: ChannelTransition) -> None:
        """*method* (checked by :meth:`check_send`) was written: move, and record what it did."""
        self.state = row.next
        effect = row.sent
        if effect is Effect.CLOSE_SENT:
            self.close = cast("ChannelClose", method)
            return
        self.commit(method)
        if effect is Effect.NONE:
            return
        if effect is Effect.CONFIRMS_SELECTED:
            if self.confirms is None:  # selecting again changes nothing (RabbitMQ agrees)
                self.confirms = Confirms()
        elif effect is Effect.SETTLE_PUBLISHES:
            confirm = cast("BasicAck | BasicNack", method)
            assert self.confirms is not None  # checked by check_send
            self.confirms.settle(confirm.delivery_tag, confirm.multiple)
        elif effect is Effect.RECORD and not method.expects_reply():
            topology = self.link.topology
            assert topology is not None  # topology methods are sent by the client only
            topology.succeeded(self.number, method, None)

    def number_publish(self, method: BasicPublish) -> int | None:
        """Client role: the number of a publish just written, or None outside confirm mode."""
        confirms = self.confirms
        return None if confirms is None else confirms.number(method)

    def check_reply(self, method: Method) -> None:
        cls = type(method)
        if cls not in self.link.tables.replies or cls is self.link.close_ok:
            return
        requests_in = self.requests_in
        if not requests_in or cls not in type(requests_in[0]).RESPONSES:
            oldest = requests_in[0].NAME if requests_in else "nothing"
            raise _local(
                f"{cls.NAME} does not answer the oldest request received ({oldest})",
                ReplyCode.COMMAND_INVALID,
                self.link.spec.ids(cls),
            )

    def _check_settles(self, method: Method) -> None:
        """Server role: a confirm must settle publishes the client made in confirm mode."""
        confirm = cast("BasicAck | BasicNack", method)
        confirms = self.confirms
        if confirms is None or not confirms.covers(confirm.delivery_tag, confirm.multiple):
            raise _local(
                f"{confirm.NAME} of delivery tag {confirm.delivery_tag} (multiple="
                f"{confirm.multiple}) on channel {self.number} settles no publish: "
                + (
                    "the client did not select confirm mode"
                    if confirms is None
                    else f"{confirms.next - 1} published, or already settled"
                ),
                ReplyCode.PRECONDITION_FAILED,
                self.link.spec.ids(type(confirm)),
            )

    def commit(self, method: Method) -> None:
        """The request FIFOs after a send: a reply answers the oldest request received (and
        releases the flow-oks waiting behind it); a request waits for its reply."""
        if type(method) in self.link.tables.replies:
            requests_in = self.requests_in
            requests_in.popleft()
            # A channel.flow that arrived behind this request is answered now, in order.
            flow = self.link.flow
            while requests_in and type(requests_in[0]) is flow:
                waiting = cast("ChannelFlow", requests_in.popleft())
                self._answer(self.link.flow_ok(active=waiting.active))
        # A reply may be a request too (0-8/0-9 file.open-ok asks for file.stage).
        if method.expects_reply():
            self.requests_out.append(method)

    def _answer(self, method: Method) -> None:
        """An answer the machine sends by itself, through the same table as every send."""
        row = self.link.tables.channel_send[self.state].get(type(method))
        if row is None:
            raise AssertionError(f"automatic {method.NAME} refused in {self.state}")
        self.link.outbox.method(self.number, method)
        self.state = row.next


def _forget(requests: deque[Method], request: Method) -> None:
    """Remove *request* itself (not an equal one) from *requests*."""
    for index, waiting in enumerate(requests):
        if waiting is request:
            del requests[index]
            return


_HANDLERS: Final[dict[Effect, _Handler]] = {
    Effect.NONE: ChannelMachine.pass_through,
    Effect.CHANNEL_OPEN: ChannelMachine._opened_by_peer,
    Effect.CHANNEL_OPEN_OK: ChannelMachine._open_ok,
    Effect.CLOSE: ChannelMachine._closed_by_peer,
    Effect.CLOSE_OK: ChannelMachine._close_ok,
    Effect.FLOW: ChannelMachine._flow,
    Effect.CONSUMER_CANCELLED: ChannelMachine._consumer_cancelled,
    Effect.CONFIRMS_SELECTED: ChannelMachine._confirms_selected,
    Effect.CONFIRM: ChannelMachine._confirm,
    Effect.DELIVERY: ChannelMachine._delivery,
    Effect.CONTENT_REPLY: ChannelMachine._content_reply,
    Effect.PUBLISH: ChannelMachine._published,
    Effect.RETURN: ChannelMachine._returned_start,
}


@functools.cache
def _dispatch(tables: CompiledTables) -> _Dispatch:
    """The peer's rows with their handlers, made once per (version, role)."""
    return {
        state: {cls: (_HANDLERS[row.received], row.next) for cls, row in rows.items()}
        for state, rows in tables.channel_receive.items()
    }
