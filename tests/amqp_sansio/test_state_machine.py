"""A hypothesis state machine over a client and a server core joined by a lossless wire.

Random legal and illegal operations run on both ends: channels opened and closed from either
side, pipelined synchronous requests answered in order, publishes and deliveries of every size
class (empty, small, split over several frames, large enough for ``buffers_to_send``), publisher
confirms, flow, consumer cancels, illegal sends, injected protocol violations, a clean close and a
lost transport. Bytes move in random-sized pieces, so a side may act while half a message is on
the wire.

The test keeps its own model of each end (channel states, outstanding requests, messages in
flight, publish numbers) and checks after every step:

* an illegal send raises ``LocalProtocolError`` and writes nothing and changes nothing;
* legal traffic never makes either end raise ``RemoteProtocolError``;
* on the wire, a content method is followed by exactly its header and bodies on that channel
  (two contents never interleave on one channel), and no frame exceeds ``frame_max``;
* every reply event names the request it answers, oldest first (identity, not equality), and
  ``pending_requests()`` equals the model's queue;
* every message arrives whole, in order, with its body;
* publisher confirms: numbers come from ``publish()``, each is confirmed or nacked once, with
  ``multiple`` expanded to exactly the numbers the server meant;
* after a connection error the state stays ``ERROR`` and every call raises the same error.

The machine runs in each version (0-9-1, 0-9, 0-8): the same operations through the version's
classes, less what the version lacks (confirms, exchange.bind, connection.blocked, the server's
basic.cancel, which become illegal sends there).
"""

from __future__ import annotations

import random
import struct
from collections import deque
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from amqp_sansio import (
    AMQP_0_8,
    AMQP_0_9,
    AMQP_0_9_1,
    NEED_DATA,
    BasicAck,
    BasicCancel,
    BasicCancelOk,
    BasicConsume,
    BasicConsumeOk,
    BasicDeliver,
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicNack,
    BasicProperties,
    BasicPublish,
    BasicQos,
    BasicQosOk,
    BasicRecover,
    BasicRecoverOk,
    BasicReturn,
    BlockedByPeer,
    ChannelClosed,
    ChannelFlow,
    ChannelFlowChanged,
    ChannelOpen,
    ChannelOpened,
    ChannelState,
    ConfirmSelect,
    ConfirmSelectOk,
    ConnectionBlocked,
    ConnectionClose,
    ConnectionClosed,
    ConnectionConfig,
    ConnectionLost,
    ConnectionState,
    ConnectionUnblocked,
    ConsumerCancelled,
    ExchangeBind,
    ExchangeBindOk,
    ExchangeDeclare,
    ExchangeDeclareOk,
    LocalProtocolError,
    MessageReceived,
    Method,
    MethodReceived,
    ProtocolSpec,
    PublishConfirmed,
    PublishNacked,
    PublishReturned,
    QueueBind,
    QueueBindOk,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
    RemoteProtocolError,
    Role,
    TxSelect,
    TxSelectOk,
    UnblockedByPeer,
)
from amqp_sansio.framing import (
    HEARTBEAT_FRAME,
    ContentBodyFrame,
    ContentHeaderFrame,
    FrameReader,
    HeartbeatFrame,
    MethodFrame,
)
from amqp_sansio.testing import ConnectionPair, method_frame, parse_frames

if TYPE_CHECKING:
    from collections.abc import Callable

    from amqp_sansio import Connection, Event

CLIENT, SERVER = Role.CLIENT, Role.SERVER
FRAME_MAX = 4096
CHANNEL_MAX = 4
#: Drawn for a channel; see PairMachine.pick.
PICK = st.integers(0, 2 * CHANNEL_MAX + 1)
#: Body sizes: empty (no body frame), small, split over several frames, and over the 64 KiB
#: threshold at which publish() keeps the body as memoryview slices for buffers_to_send().
BODY_SIZES = st.one_of(
    st.just(0),
    st.integers(1, 100),
    st.integers(FRAME_MAX - 9, 3 * FRAME_MAX),
    st.just(70_000),
)


_EMPTY: dict[str, object] = {"table": {}, "longstr": b"", "shortstr": "", "bit": False}


def in_version(spec: ProtocolSpec, method: Method) -> Method:
    """*method* (a 0-9-1 class) as *spec*'s class of the same meaning: itself where the version
    shares the class, else with the fields both have (0-8's basic.consume has no arguments,
    0-9's a filter)."""
    cls = spec.by_meaning.get(method.NAME)
    if cls is None or cls is type(method):
        return method  # a meaning the version lacks: its send is refused
    fields = {
        name: getattr(method, name) if hasattr(method, name) else _EMPTY.get(kind, 0)
        for name, kind in cls.FIELDS
    }
    return spec.make(cls.NAME, **fields)


def _reply(request: Method, rng: random.Random, spec: ProtocolSpec = AMQP_0_9_1) -> Method:
    """What a broker answers to *request* (basic.get is answered by the rule itself)."""
    if isinstance(request, QueueDeclare):
        name = request.queue or f"amq.gen-{rng.randrange(1000)}"
        return QueueDeclareOk(queue=name, message_count=0, consumer_count=0)
    if request.NAME in ("basic.consume", "basic.cancel"):
        tag: str = getattr(request, "consumer_tag")  # noqa: B009 - a class of any version
        reply = BasicConsumeOk if request.NAME == "basic.consume" else BasicCancelOk
        return in_version(spec, reply(consumer_tag=tag or "amq.ctag-1"))
    if isinstance(request, QueueDelete):
        return QueueDeleteOk(message_count=rng.randrange(5))
    simple: dict[type[Method], Callable[[], Method]] = {
        ExchangeDeclare: ExchangeDeclareOk,
        ExchangeBind: ExchangeBindOk,
        QueueBind: QueueBindOk,
        BasicQos: BasicQosOk,
        BasicRecover: BasicRecoverOk,
        ConfirmSelect: ConfirmSelectOk,
        TxSelect: TxSelectOk,
    }
    return in_version(spec, simple[type(request)]())


REQUEST_KINDS = [
    "queue.declare",
    "exchange.declare",
    "basic.qos",
    "queue.bind",
    "queue.delete",
    "basic.consume",
    "basic.cancel",
    "basic.get",
    "confirm.select",
    "basic.recover",
    "exchange.bind",
    "tx.select",
    "channel.flow",
]


def _request(kind: str, nowait: bool, n: int) -> Method:
    """A client request; *nowait* where the method has the flag."""
    if kind == "queue.declare":
        return QueueDeclare(queue=f"q{n}" if n % 3 else "", nowait=nowait)
    if kind == "exchange.declare":
        return ExchangeDeclare(exchange=f"x{n}", type="direct", nowait=nowait)
    if kind == "basic.qos":
        return BasicQos(prefetch_count=n % 100)
    if kind == "queue.bind":
        return QueueBind(queue=f"q{n}", exchange="amq.direct", routing_key="k", nowait=nowait)
    if kind == "queue.delete":
        return QueueDelete(queue=f"q{n}", nowait=nowait)
    if kind == "basic.consume":
        return BasicConsume(queue=f"q{n}", consumer_tag=f"c{n}", nowait=nowait)
    if kind == "basic.cancel":
        return BasicCancel(consumer_tag=f"c{n}", nowait=nowait)
    if kind == "basic.get":
        return BasicGet(queue=f"q{n}")
    if kind == "confirm.select":
        return ConfirmSelect(nowait=nowait)
    if kind == "basic.recover":
        return BasicRecover(requeue=True)
    if kind == "exchange.bind":
        return ExchangeBind(destination=f"x{n}", source="amq.direct", nowait=nowait)
    if kind == "tx.select":
        return TxSelect()
    assert kind == "channel.flow"
    return ChannelFlow(active=bool(n % 2))


RETURN = BasicReturn(reply_code=312, reply_text="NO_ROUTE", exchange="amq.direct", routing_key="k")
DELIVER = BasicDeliver(consumer_tag="c", delivery_tag=1, exchange="", routing_key="q")


def _send(channel: int, method: Method) -> Callable[[Connection], object]:
    return lambda conn: conn.send_method(channel, method)


def _publish(channel: int, method: Method, body: bytes) -> Callable[[Connection], object]:
    return lambda conn: conn.publish(channel, method, BasicProperties(), body)


Key = tuple[int, int]  # a channel id and its incarnation (Side.key)


class WireMonitor:
    """Parses one direction of the wire and checks content framing per channel."""

    def __init__(self, spec: ProtocolSpec) -> None:
        self.reader = FrameReader(
            frame_max=FRAME_MAX, methods=spec.methods, properties=spec.properties
        )
        #: channel -> octets of body still due (-1: the header is due)
        self.content: dict[int, int] = {}

    def watch(self, data: bytes) -> None:
        self.reader.feed(data)
        while (frame := self.reader.next_frame()) is not None:
            channel = frame.channel
            due = self.content.get(channel)
            if isinstance(frame, MethodFrame):
                assert due is None, f"{frame.method!r} on channel {channel} inside a content"
                if type(frame.method).HAS_CONTENT:
                    self.content[channel] = -1
            elif isinstance(frame, ContentHeaderFrame):
                assert due == -1, f"content header on channel {channel} not after its method"
                if frame.body_size:
                    self.content[channel] = frame.body_size
                else:
                    del self.content[channel]
            elif isinstance(frame, ContentBodyFrame):
                size = len(frame.payload)
                assert due is not None, f"body frame on channel {channel} outside a content"
                assert 0 < size <= due, (channel, due, size)
                assert size <= FRAME_MAX - 8
                if size == due:
                    del self.content[channel]
                else:
                    self.content[channel] = due - size
            else:
                assert isinstance(frame, HeartbeatFrame)


class Side:
    """The test's model of one end."""

    def __init__(self, role: Role, conn: Connection) -> None:
        self.role = role
        self.conn = conn
        spec = conn.protocol
        #: "open" until it sends connection.close ("closing"); then "closed", or "error"/"lost"
        self.state = "open"
        self.error: RemoteProtocolError | None = None
        #: channel -> "opening" | "open" | "closing"; a channel not here is closed
        self.channels: dict[int, str] = {}
        #: requests we sent, oldest first, each the very object the core must name back
        self.requests: dict[int, deque[Method]] = {}
        #: requests received that the application must answer, oldest first
        self.to_answer: dict[int, deque[Method]] = {}
        #: messages the peer sent us that are still due: (method type, body)
        self.due: dict[Key, deque[tuple[type[Method], bytes]]] = {}
        self.outbox = bytearray()  # written by this end, not yet delivered
        self.monitor = WireMonitor(spec)
        # Publisher confirms. Client: publish numbers not yet confirmed or nacked, and the next
        # number; server: what it received in confirm mode and has not acked yet.
        self.confirming: dict[int, int] = {}  # channel -> next publish number
        self.unconfirmed: dict[int, set[int]] = {}
        self.expected_confirms: dict[Key, deque[tuple[str, tuple[int, ...]]]] = {}
        self.expected_returns: dict[Key, deque[int | None]] = {}
        self.received_publishes: dict[int, int] = {}  # server: count since confirm.select
        self.unacked: dict[int, set[int]] = {}
        self.mandatory: dict[int, set[int]] = {}  # client: mandatory publish numbers
        self.flushes = 0
        #: channel -> how many times it was opened (client: sent, server: received)
        self.generation: dict[int, int] = {}

    @property
    def usable(self) -> bool:
        return self.state == "open"

    def key(self, channel: int) -> Key:
        """*channel* in its current incarnation: what the peer sends on one incarnation must
        not be expected on the next (the client may reopen an id the server is still closing).
        """
        return channel, self.generation.get(channel, 0)

    def forget_channel(self, channel: int) -> None:
        for by_key in (self.due, self.expected_confirms, self.expected_returns):
            by_key.pop(self.key(channel), None)
        for table in (
            self.channels,
            self.requests,
            self.to_answer,
            self.confirming,
            self.unconfirmed,
            self.received_publishes,
            self.unacked,
            self.mandatory,
        ):
            table.pop(channel, None)

    def forget_all(self) -> None:
        for channel in range(1, CHANNEL_MAX + 1):
            self.forget_channel(channel)

    def channel_is(self, channel: int, *states: str) -> bool:
        return self.usable and self.channels.get(channel) in states


def _state_of(side: Side, status: str) -> ChannelState:
    if status == "opening":
        return ChannelState.OPENING
    if status == "open":
        return ChannelState.OPEN
    assert status == "closing"
    return ChannelState.CLIENT_CLOSING if side.role is CLIENT else ChannelState.SERVER_CLOSING


class PairMachine(RuleBasedStateMachine):
    #: The version both ends speak.
    SPEC: ProtocolSpec = AMQP_0_9_1

    def __init__(self) -> None:
        super().__init__()
        spec = self.SPEC
        self.pair = ConnectionPair(
            ConnectionConfig(protocol=spec),
            ConnectionConfig(channel_max=CHANNEL_MAX, frame_max=FRAME_MAX, protocols=[spec]),
        )
        #: The request kinds of this version, and the requests a received method may answer.
        self.kinds = [kind for kind in REQUEST_KINDS if kind in spec.by_meaning]
        self.requests_of_version = [c for c in spec.methods.values() if c.RESPONSES]
        self.pair.handshake()
        self.pair.open_channel()
        self.sides = {
            CLIENT: Side(CLIENT, self.pair.client),
            SERVER: Side(SERVER, self.pair.server),
        }
        for side in self.sides.values():
            side.channels[1] = "open"
            side.generation[1] = 1
        self.rng = random.Random(0)
        self.counter = 0
        self.steps = 0
        self.transport_gone = False
        self.returns_in_flight: dict[int, int] = {}  # returns sent outside confirm mode

    # --- plumbing -----------------------------------------------------------------------------

    def peer(self, side: Side) -> Side:
        return self.sides[side.role.peer]

    def v(self, method: Method) -> Method:
        """*method* in the version both ends speak."""
        return in_version(self.SPEC, method)

    def next_n(self) -> int:
        self.counter += 1
        return self.counter

    def pick(self, side: Side, pick: int, *wanted: str | int) -> int:
        """Mostly a channel in one of the *wanted* states (or one of the *wanted* ids), now
        and then any id, so that most operations are legal and some are not."""
        candidates = sorted(
            ch for ch, status in side.channels.items() if status in wanted or ch in wanted
        )
        if candidates and pick < 2 * CHANNEL_MAX:
            return candidates[pick % len(candidates)]
        return pick % (CHANNEL_MAX + 1) + 1

    def flush(self, side: Side) -> None:
        """Move what the core wrote to the test's wire, through the monitor."""
        side.flushes += 1
        if side.flushes % 2:
            data = side.conn.data_to_send()
        else:
            data = b"".join(bytes(buffer) for buffer in side.conn.buffers_to_send())
        if data:
            side.monitor.watch(data)
            side.outbox += data

    def deliver(self, sender: Side, amount: int | None = None) -> None:
        """Move *amount* octets (all by default) of *sender*'s outbox to its peer, in random
        pieces, handling the peer's events one by one."""
        receiver = self.peer(sender)
        data = bytes(sender.outbox if amount is None else sender.outbox[:amount])
        del sender.outbox[: len(data)]
        if not data or receiver.state in ("lost", "closed"):
            # Nothing is sent to an end that closed cleanly (every send after it is illegal).
            assert not data or receiver.state == "lost"
            return
        if receiver.state == "error":
            with pytest.raises(RemoteProtocolError) as info:
                receiver.conn.receive_data(data)
            assert info.value is receiver.error
            return
        offset = 0
        while offset < len(data):
            size = self.rng.choice((1, 7, 100, 5000, len(data)))
            receiver.conn.receive_data(data[offset : offset + size])
            offset += size
            self.drain(receiver)
        self.flush(receiver)

    def drain(self, side: Side) -> None:
        while True:
            event = side.conn.next_event()  # legal traffic: never a RemoteProtocolError
            if event is NEED_DATA:
                return
            self.on_event(side, event)

    def expect_refused(self, side: Side, action: Callable[[Connection], object]) -> None:
        """*action* is illegal: LocalProtocolError, nothing written, nothing changed."""
        conn = side.conn
        self.flush(side)
        before = self.snapshot(side)
        with pytest.raises(LocalProtocolError):
            action(conn)
        assert conn.data_to_send() == b""
        assert conn.buffers_to_send() == []
        assert self.snapshot(side) == before

    def snapshot(self, side: Side) -> tuple[object, ...]:
        conn = side.conn
        return (
            conn.state,
            tuple(conn.channel_state(ch) for ch in range(CHANNEL_MAX + 2)),
            tuple(tuple(map(id, conn.pending_requests(ch))) for ch in range(CHANNEL_MAX + 1)),
        )

    # --- events -------------------------------------------------------------------------------

    def on_event(self, side: Side, event: Event) -> None:
        if isinstance(event, ChannelOpened):
            ch = event.channel
            if side.role is SERVER:
                assert ch not in side.channels
                side.channels[ch] = "open"
                side.generation[ch] = side.generation.get(ch, 0) + 1
            else:
                assert side.channels[ch] == "opening"
                side.channels[ch] = "open"
                self.answered(side, ch, self.SPEC.by_meaning["channel.open"])
        elif isinstance(event, ChannelClosed):
            ch = event.channel
            if event.by_peer:
                assert side.channels.get(ch) in ("opening", "open"), (ch, side.channels)
            else:
                assert side.channels.get(ch) == "closing"
            unsettled = side.unconfirmed if side.role is CLIENT else side.unacked
            assert event.unconfirmed_publishes == tuple(sorted(unsettled.get(ch, ())))
            side.forget_channel(ch)
        elif isinstance(event, MethodReceived):
            ch, method = event.channel, event.method
            if event.request is not None:
                assert self.answered(side, ch, None) is event.request
                assert type(method) in type(event.request).RESPONSES
            elif side.role is SERVER and method.expects_reply():
                side.to_answer.setdefault(ch, deque()).append(method)
                if isinstance(method, ConfirmSelect):
                    side.received_publishes.setdefault(ch, 0)
            else:
                assert not any(type(method) in cls.RESPONSES for cls in self.requests_of_version), (
                    method
                )
                if isinstance(method, ConfirmSelect):  # nowait
                    side.received_publishes.setdefault(ch, 0)
                # Without the confirm API, acks for publishes arrive as plain methods.
                assert method.NAME in ("basic.ack", "basic.nack") or side.role is SERVER
        elif isinstance(event, MessageReceived):
            ch = event.channel
            expected_type, body = side.due[side.key(ch)].popleft()
            assert type(event.method) is expected_type
            assert bytes(event.body) == body
            assert not isinstance(event.method, BasicReturn)  # a PublishReturned instead
            if isinstance(event.method, BasicGetOk):
                assert isinstance(self.answered(side, ch, BasicGet), BasicGet)
            if isinstance(event.method, BasicPublish) and ch in side.received_publishes:
                number = side.received_publishes[ch] = side.received_publishes[ch] + 1
                side.unacked.setdefault(ch, set()).add(number)
        elif isinstance(event, ChannelFlowChanged | ConsumerCancelled):
            assert side.channels.get(event.channel) in ("opening", "open")
        elif isinstance(event, BlockedByPeer | UnblockedByPeer):
            assert side.role is CLIENT
        elif isinstance(event, ConnectionClosed):
            assert event.by_peer == (side.state == "open")
            self.check_left_over(side, event.pending_requests, event.unconfirmed_publishes)
            side.state = "closed"
            side.forget_all()
        elif isinstance(event, PublishConfirmed | PublishNacked):
            self.on_confirm(side, event)
        elif isinstance(event, PublishReturned):
            ch = event.channel
            expected_type, body = side.due[side.key(ch)].popleft()
            assert expected_type is BasicReturn
            assert bytes(event.body) == body
            tied = side.expected_returns[side.key(ch)].popleft()
            if tied is None and self.returns_in_flight.get(ch):
                self.returns_in_flight[ch] -= 1
            # A return waiting for its confirm when the channel closes is released untied.
            assert event.publish_number in (tied, None if side.channels[ch] == "closing" else tied)
        else:
            raise AssertionError(f"unexpected event {event!r} at the {side.role.value}")

    def on_confirm(self, side: Side, event: PublishConfirmed | PublishNacked) -> None:
        assert side.role is CLIENT
        ch = event.channel
        numbers = event.publish_numbers
        kind = "ack" if isinstance(event, PublishConfirmed) else "nack"
        assert numbers == tuple(sorted(set(numbers))), numbers  # unique, ascending
        assert side.expected_confirms[side.key(ch)].popleft() == (kind, numbers)
        unconfirmed = side.unconfirmed[ch]
        assert set(numbers) <= unconfirmed, (numbers, unconfirmed)  # never twice
        unconfirmed -= set(numbers)

    def check_left_over(
        self,
        side: Side,
        pending_requests: tuple[tuple[int, Method], ...],
        unconfirmed_publishes: tuple[tuple[int, int], ...],
    ) -> None:
        """What a lost or closed connection reports as never answered: exactly the model's."""
        expected = [(ch, request) for ch in sorted(side.requests) for request in side.requests[ch]]
        assert len(pending_requests) == len(expected)
        for (ch, request), (ch2, request2) in zip(pending_requests, expected, strict=True):
            assert ch == ch2
            assert request is request2
        unsettled = side.unconfirmed if side.role is CLIENT else side.unacked
        assert unconfirmed_publishes == tuple(
            (ch, n) for ch in sorted(unsettled) for n in sorted(unsettled[ch])
        )

    def answered(self, side: Side, ch: int, kind: type[Method] | None) -> Method:
        request = side.requests[ch].popleft()
        assert kind is None or type(request) is kind, (request, kind)
        return request

    # --- invariants ---------------------------------------------------------------------------

    @invariant()
    def model_matches_core(self) -> None:
        self.steps += 1
        for side in self.sides.values():
            conn = side.conn
            if side.state == "error":
                assert conn.state is ConnectionState.ERROR
                for call in (conn.next_event, lambda c=conn: c.receive_data(b"\x08")):
                    with pytest.raises(RemoteProtocolError) as info:
                        call()
                    assert info.value is side.error
                assert conn.data_to_send() == b""
                continue
            if side.state in ("closed", "lost"):
                assert conn.state is ConnectionState.CLOSED
            elif side.state == "closing":
                assert conn.state in (
                    ConnectionState.CLIENT_CLOSING,
                    ConnectionState.SERVER_CLOSING,
                )
            else:
                assert conn.state is ConnectionState.OPEN
            for ch in range(1, CHANNEL_MAX + 2):
                status = side.channels.get(ch)
                expected = ChannelState.CLOSED if status is None else _state_of(side, status)
                assert conn.channel_state(ch) is expected, (side.role, ch, side.channels)
                pending = conn.pending_requests(ch)
                model = tuple(side.requests.get(ch, ()))
                assert len(pending) == len(model)
                assert all(a is b for a, b in zip(pending, model, strict=True))

    # --- channels -----------------------------------------------------------------------------

    @rule()
    def client_opens_a_channel(self) -> None:
        side = self.sides[CLIENT]
        if not side.usable:
            self.expect_refused(side, lambda c: c.open_channel())
            return
        free = [ch for ch in range(1, CHANNEL_MAX + 1) if ch not in side.channels]
        if not free:
            self.expect_refused(side, lambda c: c.open_channel())
            return
        ch = side.conn.open_channel()
        assert ch == free[0]
        side.generation[ch] = side.generation.get(ch, 0) + 1
        side.channels[ch] = "opening"
        [request] = side.conn.pending_requests(ch)
        assert request.NAME == "channel.open"
        side.requests[ch] = deque([request])
        self.flush(side)

    @rule(role=st.sampled_from([CLIENT, SERVER]), ch=PICK)
    def close_channel(self, role: Role, ch: int) -> None:
        side = self.sides[role]
        ch = self.pick(side, ch, "opening", "open")
        legal = ("opening", "open") if role is CLIENT else ("open",)
        if not side.channel_is(ch, *legal):
            self.expect_refused(side, lambda c: c.close_channel(ch, 200, "bye"))
            return
        side.conn.close_channel(ch, 200, "bye")
        side.channels[ch] = "closing"
        self.flush(side)

    # --- synchronous requests -----------------------------------------------------------------

    @rule(
        ch=PICK,
        kind=st.sampled_from(REQUEST_KINDS),
        nowait=st.booleans(),
    )
    def client_sends_a_request(self, ch: int, kind: str, nowait: bool) -> None:
        side = self.sides[CLIENT]
        ch = self.pick(side, ch, "opening", "open")
        request = self.v(_request(kind, nowait, self.next_n()))
        if kind not in self.kinds:  # a method this version lacks
            self.expect_refused(side, lambda c: c.send_method(ch, request))
            return
        if not side.channel_is(ch, "opening", "open"):
            self.expect_refused(side, lambda c: c.send_method(ch, request))
            return
        if isinstance(request, TxSelect) and ch in side.confirming:
            return  # tx and confirms don't mix on one channel (RabbitMQ: 406)
        if isinstance(request, ConfirmSelect) and self.returns_in_flight.get(ch):
            return
        if isinstance(request, ChannelFlow) and side.requests.get(ch):
            return  # the server core answers flow ahead of older requests: see the test below
        if isinstance(request, ConfirmSelect) and ch not in side.confirming:
            side.confirming[ch] = 1
            side.unconfirmed[ch] = set()
            side.expected_confirms[side.key(ch)] = deque()
        side.conn.send_method(ch, request)
        if request.expects_reply():
            side.requests.setdefault(ch, deque()).append(request)
        self.flush(side)

    @rule(
        ch=PICK,
        flow=st.booleans(),
        active=st.booleans(),
        nowait=st.booleans(),
    )
    def server_sends_flow_or_cancel(self, ch: int, flow: bool, active: bool, nowait: bool) -> None:
        side = self.sides[SERVER]
        ch = self.pick(side, ch, "open")
        request: Method = self.v(
            ChannelFlow(active=active)
            if flow
            else BasicCancel(consumer_tag=f"c{self.next_n()}", nowait=nowait)
        )
        if not side.channel_is(ch, "open") or SERVER not in type(request).SENT_BY:
            # before RabbitMQ's 0-9-1 extension, only the client cancels a consumer
            self.expect_refused(side, lambda c: c.send_method(ch, request))
            return
        side.conn.send_method(ch, request)
        if request.expects_reply():
            side.requests.setdefault(ch, deque()).append(request)
        self.flush(side)

    @rule(ch=PICK, size=BODY_SIZES, get_ok=st.booleans())
    def server_answers_the_oldest_request(self, ch: int, size: int, get_ok: bool) -> None:
        side = self.sides[SERVER]
        self.answer_oldest(
            self.pick(side, ch, *[c for c, todo in side.to_answer.items() if todo]), size, get_ok
        )

    def answer_oldest(self, ch: int, size: int, get_ok: bool) -> None:
        side = self.sides[SERVER]
        pending = side.to_answer.get(ch)
        if not pending:
            # A reply with no request.
            reply = QueueDeclareOk(queue="q", message_count=0, consumer_count=0)
            self.expect_refused(side, _send(ch, reply))
            return
        request = pending[0]
        if not side.channel_is(ch, "open"):
            if not isinstance(request, BasicGet):
                self.expect_refused(side, _send(ch, _reply(request, self.rng, self.SPEC)))
            return
        if isinstance(request, BasicGet):
            if get_ok:
                body = self.rng.randbytes(size)
                method = BasicGetOk(
                    delivery_tag=self.next_n(),
                    exchange="",
                    routing_key=request.queue,
                    message_count=0,
                )
                side.conn.send_content(ch, method, BasicProperties(), body)
                self.peer(side).due.setdefault(side.key(ch), deque()).append((BasicGetOk, body))
            else:
                side.conn.send_method(ch, BasicGetEmpty())
        else:
            # A reply that answers another request than the oldest is refused first.
            wrong = BasicQosOk() if not isinstance(request, BasicQos) else TxSelectOk()
            self.expect_refused(side, lambda c: c.send_method(ch, wrong))
            side.conn.send_method(ch, _reply(request, self.rng, self.SPEC))
        pending.popleft()
        self.flush(side)

    # --- content ------------------------------------------------------------------------------

    @rule(ch=PICK, size=BODY_SIZES, mandatory=st.booleans())
    def client_publishes(self, ch: int, size: int, mandatory: bool) -> None:
        side = self.sides[CLIENT]
        ch = self.pick(side, ch, "opening", "open")
        body = self.rng.randbytes(size)
        method = BasicPublish(exchange="amq.direct", routing_key="k", mandatory=mandatory)
        props = BasicProperties(content_type="application/octet-stream", delivery_mode=2)
        if not side.channel_is(ch, "opening", "open"):
            self.expect_refused(side, lambda c: c.publish(ch, method, props, body))
            return
        number = side.conn.publish(ch, method, props, body)
        if ch in side.confirming:
            assert number == side.confirming[ch]
            side.unconfirmed[ch].add(number)
            if mandatory:
                side.mandatory.setdefault(ch, set()).add(number)
            side.confirming[ch] += 1
        else:
            assert number is None
        self.peer(side).due.setdefault(side.key(ch), deque()).append((BasicPublish, body))
        self.flush(side)

    @rule(ch=PICK, size=BODY_SIZES)
    def server_delivers(self, ch: int, size: int) -> None:
        side = self.sides[SERVER]
        ch = self.pick(side, ch, "open")
        body = self.rng.randbytes(size)
        method = BasicDeliver(
            consumer_tag="c", delivery_tag=self.next_n(), exchange="", routing_key="q"
        )
        if not side.channel_is(ch, "open"):
            self.expect_refused(side, lambda c: c.send_content(ch, method, BasicProperties(), body))
            return
        side.conn.send_content(ch, method, BasicProperties(), body)
        self.peer(side).due.setdefault(side.key(ch), deque()).append((BasicDeliver, body))
        self.flush(side)

    @rule(ch=PICK, tag=st.integers(1, 50), multiple=st.booleans())
    def client_acks_a_delivery(self, ch: int, tag: int, multiple: bool) -> None:
        side = self.sides[CLIENT]
        ch = self.pick(side, ch, "opening", "open")
        ack = self.v(BasicAck(delivery_tag=tag, multiple=multiple))
        if not side.channel_is(ch, "opening", "open"):
            self.expect_refused(side, lambda c: c.send_method(ch, ack))
            return
        side.conn.send_method(ch, ack)
        self.flush(side)

    # --- publisher confirms -------------------------------------------------------------------

    @rule(
        ch=PICK,
        pick=st.integers(0, 1000),
        multiple=st.booleans(),
        nack=st.booleans(),
        returned=st.booleans(),
    )
    def server_confirms(
        self, ch: int, pick: int, multiple: bool, nack: bool, returned: bool
    ) -> None:
        side = self.sides[SERVER]
        ch = self.pick(side, ch, *[c for c, tags in side.unacked.items() if tags])
        unacked = sorted(side.unacked.get(ch, ()))
        if not unacked or not side.channel_is(ch, "open"):
            return
        tag = unacked[pick % len(unacked)]
        client = self.peer(side)
        # RabbitMQ returns only mandatory publishes. A return for another one would be tied by
        # the core to some unconfirmed mandatory publish with the same exchange and routing key,
        # and held until that one's confirm: legal, but not what this model predicts.
        returned = returned and tag in client.mandatory.get(ch, ())
        if returned:
            # A mandatory publish that could not be routed: basic.return, then its ack.
            body = self.rng.randbytes(pick % 50)
            side.conn.send_content(ch, RETURN, BasicProperties(), body)
            client.due.setdefault(side.key(ch), deque()).append((BasicReturn, body))
            tied = tag
            client.expected_returns.setdefault(side.key(ch), deque()).append(tied)
            multiple = nack = False
        numbers = tuple(n for n in unacked if n <= tag) if multiple else (tag,)
        cls = BasicNack if nack else BasicAck
        side.conn.send_method(ch, cls(delivery_tag=tag, multiple=multiple))
        side.unacked[ch] -= set(numbers)
        client.expected_confirms[side.key(ch)].append(("nack" if nack else "ack", numbers))
        self.flush(side)

    @rule(ch=PICK, size=st.integers(0, 30))
    def server_returns_outside_confirm_mode(self, ch: int, size: int) -> None:
        side = self.sides[SERVER]
        ch = self.pick(side, ch, "open")
        client = self.peer(side)
        if not side.channel_is(ch, "open") or ch in client.confirming:
            return
        # Until it arrives the client must not enter confirm mode on the channel: the core would
        # then hold it for a confirm (see test_returns_keep_their_wire_order for what follows).
        self.returns_in_flight[ch] = self.returns_in_flight.get(ch, 0) + 1
        body = self.rng.randbytes(size)
        side.conn.send_content(ch, RETURN, BasicProperties(), body)
        client.due.setdefault(side.key(ch), deque()).append((BasicReturn, body))
        client.expected_returns.setdefault(side.key(ch), deque()).append(None)
        self.flush(side)

    # --- the connection -----------------------------------------------------------------------

    @rule(blocked=st.booleans())
    def server_blocks_or_unblocks(self, blocked: bool) -> None:
        side = self.sides[SERVER]
        method: Method = (
            ConnectionBlocked(reason="low on memory") if blocked else ConnectionUnblocked()
        )
        if not side.usable or method.NAME not in self.SPEC.by_meaning:
            self.expect_refused(side, lambda c: c.send_method(0, method))
            return
        side.conn.send_method(0, method)
        self.flush(side)

    @rule(
        role=st.sampled_from([CLIENT, SERVER]), amount=st.integers(0, 20_000), whole=st.booleans()
    )
    def move_bytes(self, role: Role, amount: int, whole: bool) -> None:
        self.deliver(self.sides[role], None if whole else amount)

    @rule(answer=st.booleans())
    def move_everything(self, answer: bool) -> None:
        """Move all bytes both ways; with *answer*, the server answers every request it got,
        oldest first, like a responsive broker."""
        server = self.sides[SERVER]
        for _ in range(4):
            for side in self.sides.values():
                self.deliver(side)
            if answer:
                for ch, pending in list(server.to_answer.items()):
                    while pending and server.channel_is(ch, "open"):
                        self.answer_oldest(ch, len(pending) * 10, len(pending) % 2 == 0)

    @rule(data=st.data())
    def illegal_send(self, data: st.DataObject) -> None:
        role = data.draw(st.sampled_from([CLIENT, SERVER]))
        side = self.sides[role]
        open_channels = [ch for ch, s in side.channels.items() if s == "open"]
        closing = [ch for ch, s in side.channels.items() if s == "closing"]
        closed = [ch for ch in range(1, CHANNEL_MAX + 1) if ch not in side.channels]
        body = b"x" * 10
        props = BasicProperties()
        choices: list[Callable[[Connection], object]] = [
            # channel ids outside 1..channel_max
            lambda c: c.send_method(0, QueueDeclare(queue="q")),
            lambda c: c.send_method(CHANNEL_MAX + 1, BasicQos(prefetch_count=1)),
            # the wrong role
            lambda c: c.accept_authentication(),
            lambda c: c.accept_virtual_host(),
        ]
        if role is CLIENT:
            choices += [
                lambda c: c.send_content(1, DELIVER, props, body),
                lambda c: c.send_method(1, BasicQosOk()),
            ]
        else:
            choices += [
                lambda c: c.open_channel(),
                lambda c: c.publish(1, BasicPublish(), props, body),
                lambda c: c.send_method(1, QueueDeclare(queue="q")),
            ]
        for ch in closed + closing:  # not open; after close, only close-ok
            choices.append(_send(ch, BasicAck(delivery_tag=1)))
            if role is CLIENT:
                choices.append(_publish(ch, BasicPublish(), body))
        for ch in open_channels:
            choices += [
                # content methods need publish()/send_content(), and those need content methods
                _send(ch, BasicPublish()),
                _publish(ch, QueueDeclare(), body),
                # a field that cannot be encoded: nothing half-written, nothing queued
                _send(ch, QueueDeclare(queue="x" * 300)),
                _send(ch, ChannelOpen()),
            ]
        if not side.usable:
            choices.append(lambda c: c.close())
        action = data.draw(st.sampled_from(choices))
        self.expect_refused(side, action)

    @precondition(lambda self: self.steps > 12)
    @rule(role=st.sampled_from([CLIENT, SERVER]), chance=st.integers(0, 15))
    def close_connection(self, role: Role, chance: int) -> None:
        side = self.sides[role]
        if chance or not side.usable:
            return
        side.conn.close(320, "CONNECTION_FORCED - test")
        side.state = "closing"
        self.flush(side)

    @precondition(lambda self: self.steps > 12)
    @rule(role=st.sampled_from([CLIENT, SERVER]), kind=st.integers(0, 3), chance=st.integers(0, 15))
    def peer_breaks_the_protocol(self, role: Role, kind: int, chance: int) -> None:
        side = self.sides[role]
        if chance or not side.usable:
            return
        peer = self.peer(side)
        self.deliver(peer)  # everything legal first, so the model agrees with the core
        if side.state != "open":
            return
        unused = next(ch for ch in range(1, 0xFFFF) if ch not in side.channels)
        if kind == 0:  # a method on a channel that was never opened: 504
            bad = method_frame(unused, BasicQosOk() if role is CLIENT else BasicQos())
        elif kind == 1:  # a heartbeat on a channel other than 0: 505 (as RabbitMQ)
            bad = HEARTBEAT_FRAME[:1] + b"\x00\x01" + HEARTBEAT_FRAME[3:]
        elif kind == 2:  # a frame end other than 0xCE: 501
            bad = method_frame(0, ConnectionBlocked(reason="x"))[:-1] + b"\x00"
        else:  # a content header with no method before it: 505
            bad = struct.pack(">BHIHHQHB", 2, unused, 14, 60, 0, 0, 0, 0xCE)
        conn = side.conn
        self.flush(side)
        conn.receive_data(bad)
        with pytest.raises(RemoteProtocolError) as info:
            conn.next_event()  # the violation is the first thing after what was drained
        error = info.value
        assert error.reply_code == (504, 505, 501, 505)[kind]
        data = conn.data_to_send()
        [close_frame] = parse_frames(data, frame_max=FRAME_MAX, protocol=self.SPEC)
        assert isinstance(close_frame, MethodFrame)
        assert close_frame.channel == 0
        assert isinstance(close_frame.method, ConnectionClose)
        assert close_frame.method.reply_code == error.reply_code
        # The close goes out to the peer like any other bytes.
        side.monitor.watch(data)
        side.outbox += data
        side.state = "error"
        side.error = error

    @precondition(lambda self: self.steps > 12 and not self.transport_gone)
    @rule(chance=st.integers(0, 15))
    def transport_lost(self, chance: int) -> None:
        if chance:
            return
        self.transport_gone = True
        for side in self.sides.values():
            conn = side.conn
            side.outbox.clear()  # in flight: lost with the transport
            if side.state == "error":
                with pytest.raises(RemoteProtocolError):
                    conn.receive_data(b"")
                continue
            if side.state in ("closed", "lost"):
                if side.state == "closed":
                    conn.receive_data(b"")
                    assert conn.next_event() is NEED_DATA
                continue
            conn.receive_data(b"")
            event = conn.next_event()
            assert isinstance(event, ConnectionLost), event
            self.check_left_over(side, event.pending_requests, event.unconfirmed_publishes)
            assert conn.next_event() is NEED_DATA
            side.state = "lost"
            side.forget_all()

    def teardown(self) -> None:
        # Whatever was left in flight must still go through cleanly.
        for side in self.sides.values():
            if side.state == "open":
                self.flush(side)
        for _ in range(4):
            for side in self.sides.values():
                self.deliver(side)


def test_returns_keep_their_wire_order() -> None:
    """Two returns arrive after the client entered confirm mode (the server sent them before it
    saw confirm.select) and one mandatory publish is unconfirmed: the application must still get
    them in the order the server sent them."""
    pair = ConnectionPair()
    pair.handshake()
    ch = pair.open_channel()
    pair.server.send_content(ch, RETURN, BasicProperties(), b"first")
    pair.server.send_content(ch, RETURN, BasicProperties(), b"second")
    pair.client.send_method(ch, ConfirmSelect())
    method = BasicPublish(exchange=RETURN.exchange, routing_key=RETURN.routing_key, mandatory=True)
    assert pair.client.publish(ch, method, BasicProperties(), b"") == 1
    events = pair.transfer(pair.server)
    pair.transfer(pair.client)
    pair.server.send_method(ch, ConfirmSelectOk())
    pair.server.send_method(ch, BasicAck(delivery_tag=1, multiple=False))
    events += pair.transfer(pair.server)
    bodies = [bytes(e.body) for e in events if isinstance(e, PublishReturned)]
    assert bodies == [b"first", b"second"]


def test_flow_ok_from_the_server_core_keeps_the_reply_order() -> None:
    """channel.flow pipelined behind a request: flow-ok must not overtake the earlier reply.

    The server core answers channel.flow by itself; if it does so while the application still
    owes an earlier reply on the channel, the client core (rightly, by its FIFO) refuses the
    flow-ok with a 503.
    """
    pair = ConnectionPair()
    pair.handshake()
    ch = pair.open_channel()
    declare = QueueDeclare(queue="q")
    flow = ChannelFlow(active=True)
    pair.client.send_method(ch, declare)
    pair.client.send_method(ch, flow)
    server_events = pair.transfer(pair.client)
    assert server_events[0] == MethodReceived(channel=ch, method=declare, request=None)
    pair.server.send_method(ch, QueueDeclareOk(queue="q", message_count=0, consumer_count=0))
    client_events = pair.transfer(pair.server)
    assert [type(e) for e in client_events] == [MethodReceived, MethodReceived]
    assert [e.request for e in client_events if isinstance(e, MethodReceived)] == [declare, flow]


PairMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_pair_state_machine = PairMachine.TestCase


class PairMachine0_9(PairMachine):
    SPEC = AMQP_0_9


class PairMachine0_8(PairMachine):
    SPEC = AMQP_0_8


# Fewer examples for the older versions: the machine is the same, the tables differ.
for _machine in (PairMachine0_9, PairMachine0_8):
    _machine.TestCase.settings = settings(
        max_examples=100,
        stateful_step_count=60,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
test_pair_state_machine_0_9 = PairMachine0_9.TestCase
test_pair_state_machine_0_8 = PairMachine0_8.TestCase
