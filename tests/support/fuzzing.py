"""The fuzzing engine shared by ``tests/amqp_sansio/test_fuzz.py`` (a fixed budget in the suite) and
``fuzz/fuzz_connection.py`` (as long as you like).

A :class:`Session` is what one core lived through: octets from its peer (:class:`Receive`) and
calls the application made on it (:class:`Act`). Sessions come from the RabbitMQ recordings in
``tests/fixtures/rabbitmq`` and from conversations between a client and a server core
(:func:`pair_sessions`; :func:`version_sessions` for 0-9 and 0-8). :func:`mutate_session` flips,
inserts, deletes, duplicates and truncates octets in the received data with a seeded
:class:`random.Random`; :func:`run_session` replays a session into a fresh core, in random-sized
pieces, and checks the fuzz property:

* only events come out of ``next_event()``, or a ``RemoteProtocolError``; the application's own
  calls raise nothing but ``LocalProtocolError``;
* after a ``RemoteProtocolError`` the connection stays failed (every later call raises the same
  error) and what it wrote last ends with the ``connection.close`` carrying the error's code;
* the octets held unparsed never exceed one frame (``frame_max``) plus a protocol header.
"""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Final, final

import attrs
import pytest

from amqp_sansio import (
    AMQP_0_8,
    AMQP_0_9,
    NEED_DATA,
    AuthenticationRequested,
    BasicAck,
    BasicCancel,
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
    BasicReturn,
    ChannelFlow,
    ConfirmSelect,
    ConfirmSelectOk,
    Connection,
    ConnectionBlocked,
    ConnectionClose,
    ConnectionConfig,
    ConnectionState,
    ConnectionUnblocked,
    Event,
    ExchangeDeclare,
    ExchangeDeclareOk,
    LocalProtocolError,
    MessageContent,
    Method,
    ProtocolSpec,
    QueueDeclare,
    QueueDeclareOk,
    RemoteProtocolError,
    Role,
    SecureRequested,
    VirtualHostRequested,
)
from amqp_sansio._generated import spec_0_8, spec_0_9
from amqp_sansio.framing import (
    PROTOCOL_HEADER_0_8,
    PROTOCOL_HEADER_0_9,
    PROTOCOL_HEADER_0_9_1,
    MethodFrame,
)
from amqp_sansio.testing import get_all_events, parse_frames
from tests.support import RABBITMQ_CAPTURES

if TYPE_CHECKING:
    import random
    from collections.abc import Callable

FIXTURES: Final = RABBITMQ_CAPTURES
#: Octets a core may hold unparsed beyond one frame: a protocol header being read.
SLACK: Final = 8


@final
@attrs.frozen
class Receive:
    """Octets from the peer."""

    data: bytes


@final
@attrs.frozen
class Act:
    """A call the application made on the core."""

    name: str
    action: Callable[[Connection], object] = attrs.field(eq=False, repr=False)


Step = Receive | Act


@final
@attrs.frozen
class Session:
    """What one core lived through, replayable into a fresh core of *role*."""

    name: str
    role: Role
    steps: tuple[Step, ...]
    config: ConnectionConfig | None = None
    #: The protocol version the session speaks.
    version: str = "0-9-1"

    def with_steps(self, steps: tuple[Step, ...], suffix: str) -> Session:
        return attrs.evolve(self, steps=steps, name=f"{self.name}{suffix}")


@final
@attrs.frozen
class Outcome:
    """How a replay ended."""

    events: int
    error: RemoteProtocolError | None
    max_buffered: int


# --- the corpus ---------------------------------------------------------------------------------


def fixture_sessions() -> list[Session]:
    """Every RabbitMQ recording, as the client stream fed to our server role and the server
    stream fed to our client role (which breaks off where the recorded client sent something
    our client core never did: also worth fuzzing)."""
    sessions: list[Session] = []
    for path in sorted(FIXTURES.glob("*.json")):
        chunks = json.loads(path.read_text())["chunks"]
        for role, sender in ((Role.SERVER, "client"), (Role.CLIENT, "server")):
            steps = tuple(Receive(bytes.fromhex(c["hex"])) for c in chunks if c["from"] == sender)
            sessions.append(Session(f"rabbitmq/{path.stem}/{role.value}", role, steps))
    return sessions


@final
class Recorder:
    """Runs a conversation between a client and a server core and records each core's
    session. Decisions (authentication, virtual host) are answered the way :func:`run_session`
    answers them, so they are not recorded."""

    def __init__(
        self,
        name: str,
        client_config: ConnectionConfig | None = None,
        server_config: ConnectionConfig | None = None,
        version: str = "0-9-1",
    ) -> None:
        self.name = name
        self.version = version
        self.configs = {Role.CLIENT: client_config, Role.SERVER: server_config}
        self.conns = {
            Role.CLIENT: Connection(Role.CLIENT, client_config),
            Role.SERVER: Connection(Role.SERVER, server_config),
        }
        self.steps: dict[Role, list[Step]] = {Role.CLIENT: [], Role.SERVER: []}
        #: Answer connection.open with connection.redirect (0-8, 0-9).
        self.redirect = False

    def act(self, role: Role, name: str, action: Callable[[Connection], object]) -> None:
        action(self.conns[role])
        self.steps[role].append(Act(name, action))

    def move(self, sender: Role) -> list[Event]:
        data = self.conns[sender].data_to_send()
        receiver = sender.peer
        if not data:
            return []
        self.steps[receiver].append(Receive(data))
        conn = self.conns[receiver]
        conn.receive_data(data)
        events: list[Event] = []
        while True:
            event = conn.next_event()
            if event is NEED_DATA:
                return events
            if self.redirect and isinstance(event, VirtualHostRequested):
                self.act(receiver, "redirect", lambda conn: conn.redirect("elsewhere:5672"))
            else:
                answer_decision(conn, event)
            events.append(event)

    def settle(self) -> None:
        """Move bytes both ways until both are quiet."""
        for _ in range(20):
            before = sum(len(steps) for steps in self.steps.values())
            self.move(Role.CLIENT)
            self.move(Role.SERVER)
            if before == sum(len(steps) for steps in self.steps.values()):
                return
        raise AssertionError("the cores kept talking")

    def sessions(self) -> list[Session]:
        return [
            Session(
                f"pair/{self.name}/{role.value}",
                role,
                tuple(steps),
                self.configs[role],
                self.version,
            )
            for role, steps in self.steps.items()
        ]


def answer_decision(conn: Connection, event: Event) -> None:
    """What a permissive application answers to the core's questions."""
    if isinstance(event, AuthenticationRequested):
        conn.accept_authentication()
    elif isinstance(event, VirtualHostRequested):
        conn.accept_virtual_host()
    elif isinstance(event, SecureRequested):
        conn.answer_secure(b"")


def _props() -> BasicProperties:
    return BasicProperties(
        content_type="text/plain",
        headers={"x-n": 1, "nested": {"list": [1, "two", b"3"]}},
        delivery_mode=2,
        message_id="m-1",
    )


def _send(channel: int, method: Method) -> Callable[[Connection], object]:
    return lambda conn: conn.send_method(channel, method)


def _publish(channel: int, method: Method, body: bytes) -> Callable[[Connection], object]:
    return lambda conn: conn.publish(channel, method, _props(), body)


def _content(channel: int, method: Method, body: bytes) -> Callable[[Connection], object]:
    return lambda conn: conn.send_content(channel, method, _props(), body)


def pair_sessions() -> list[Session]:
    """Conversations between our two cores covering every kind of frame and most methods."""
    c, s = Role.CLIENT, Role.SERVER
    deliver = BasicDeliver(consumer_tag="c1", delivery_tag=1, exchange="", routing_key="q")
    sessions: list[Session] = []

    busy = Recorder("busy", server_config=ConnectionConfig(frame_max=4096, channel_max=8))
    busy.settle()
    busy.act(c, "open 1", lambda conn: conn.open_channel())
    busy.act(c, "open 2", lambda conn: conn.open_channel())
    busy.act(c, "declare", lambda conn: conn.send_method(1, QueueDeclare(queue="q")))
    busy.act(c, "exchange", lambda conn: conn.send_method(1, ExchangeDeclare(exchange="x")))
    busy.act(c, "qos", lambda conn: conn.send_method(1, BasicQos(prefetch_count=10)))
    busy.act(c, "consume", lambda conn: conn.send_method(1, BasicConsume(queue="q")))
    busy.act(c, "get", lambda conn: conn.send_method(2, BasicGet(queue="q")))
    busy.act(c, "get again", lambda conn: conn.send_method(2, BasicGet(queue="q")))
    busy.settle()
    replies = [
        QueueDeclareOk(queue="q", message_count=0, consumer_count=0),
        ExchangeDeclareOk(),
        BasicQosOk(),
        BasicConsumeOk(consumer_tag="c1"),
    ]
    for reply in replies:
        busy.act(s, reply.NAME, _send(1, reply))
    get_ok = BasicGetOk(delivery_tag=2, exchange="", routing_key="q", message_count=0)
    busy.act(s, "get-ok", lambda conn: conn.send_content(2, get_ok, _props(), b"got"))
    busy.act(s, "get-empty", lambda conn: conn.send_method(2, BasicGetEmpty()))
    busy.act(s, "deliver 0", lambda conn: conn.send_content(1, deliver, _props(), b""))
    busy.act(s, "deliver big", lambda conn: conn.send_content(1, deliver, _props(), b"d" * 9000))
    busy.act(s, "flow", lambda conn: conn.send_method(1, ChannelFlow(active=False)))
    busy.act(s, "blocked", lambda conn: conn.send_method(0, ConnectionBlocked(reason="mem")))
    busy.act(s, "unblocked", lambda conn: conn.send_method(0, ConnectionUnblocked()))
    busy.settle()
    busy.act(c, "ack", lambda conn: conn.send_method(1, BasicAck(delivery_tag=1)))
    busy.act(c, "confirm", lambda conn: conn.send_method(2, ConfirmSelect()))
    for n, size in enumerate((0, 10, 5000, 100)):
        method = BasicPublish(exchange="x", routing_key="k", mandatory=n % 2 == 1)
        busy.act(c, f"publish {size}", _publish(2, method, b"p" * size))
    busy.settle()
    ret = BasicReturn(reply_code=312, reply_text="NO_ROUTE", exchange="x", routing_key="k")
    busy.act(s, "confirm-ok", lambda conn: conn.send_method(2, ConfirmSelectOk()))
    busy.act(s, "return", lambda conn: conn.send_content(2, ret, _props(), b"p" * 10))
    busy.act(s, "ack 2", lambda conn: conn.send_method(2, BasicAck(delivery_tag=2, multiple=True)))
    busy.act(s, "nack 3", lambda conn: conn.send_method(2, BasicNack(delivery_tag=3)))
    busy.act(s, "cancel", lambda conn: conn.send_method(1, BasicCancel(consumer_tag="c1")))
    busy.settle()
    busy.act(s, "close 2", lambda conn: conn.close_channel(2, 406, "PRECONDITION_FAILED"))
    busy.act(c, "close 1", lambda conn: conn.close_channel(1))
    busy.settle()
    busy.act(c, "close", lambda conn: conn.close())
    busy.settle()
    sessions += busy.sessions()

    chunked = Recorder(
        "chunked",
        client_config=ConnectionConfig(chunk_threshold=100, heartbeat=0),
        server_config=ConnectionConfig(frame_max=4096),
    )
    chunked.settle()
    chunked.act(c, "open", lambda conn: conn.open_channel())
    chunked.settle()
    for size in (50, 101, 20_000):
        chunked.act(s, f"deliver {size}", _content(1, deliver, b"z" * size))
    chunked.act(s, "server closes", lambda conn: conn.close(320, "CONNECTION_FORCED"))
    chunked.settle()
    sessions += chunked.sessions()
    return sessions


def _version_session(spec: ProtocolSpec) -> Recorder:
    """A conversation in 0-9 or 0-8 over what the two share with 0-9-1 and the classes of their
    own: consume, recover, their content of other classes, the methods passed through."""
    c, s = Role.CLIENT, Role.SERVER
    version = spec.version.value
    talk = Recorder(
        f"{version}",
        ConnectionConfig(protocol=spec),
        ConnectionConfig(frame_max=4096, channel_max=8, header_0_9="0-9"),
        version,
    )
    make = spec.make
    talk.settle()
    talk.act(c, "open", lambda conn: conn.open_channel())
    arguments = {"x-n": 1, "x-s": "v", "nested": {"n": 2}}
    declare = make("queue.declare", queue="q", arguments=arguments)
    talk.act(c, "declare", _send(1, declare))
    consume: dict[str, object] = {"queue": "q", "consumer_tag": "c1"}
    if spec is AMQP_0_9:
        consume["filter"] = {}
    talk.act(c, "consume", _send(1, make("basic.consume", **consume)))
    talk.act(c, "publish", lambda conn: conn.publish(1, make("basic.publish"), _old_props(), b"p"))
    talk.act(c, "recover", _send(1, make("basic.recover", requeue=True)))
    talk.settle()
    talk.act(
        s,
        "declare-ok",
        _send(1, make("queue.declare-ok", queue="q", message_count=0, consumer_count=0)),
    )
    talk.act(s, "consume-ok", _send(1, make("basic.consume-ok", consumer_tag="c1")))
    if spec is AMQP_0_8:
        talk.act(s, "recover-ok", _send(1, make("basic.recover-ok")))
    deliver = make("basic.deliver", consumer_tag="c1", delivery_tag=1, exchange="", routing_key="q")
    talk.act(s, "deliver", lambda conn: conn.send_content(1, deliver, _old_props(), b"d" * 5000))
    talk.settle()
    talk.act(c, "ack", _send(1, make("basic.ack", delivery_tag=1)))
    talk.act(c, "reject", _send(1, make("basic.reject", delivery_tag=1)))
    talk.act(c, "flow", _send(1, make("channel.flow", active=True)))
    talk.settle()
    if spec is AMQP_0_8:
        # file.open, open-ok (a reply asking for file.stage), stage with file properties
        talk.act(c, "file.open", _send(1, spec_0_8.FileOpen(identifier="f", content_size=3)))
        talk.settle()
        talk.act(s, "file.open-ok", _send(1, spec_0_8.FileOpenOk(staged_size=0)))
        talk.settle()
        props = spec_0_8.FileProperties(filename="f", headers={"k": 1})
        talk.act(
            c, "file.stage", lambda conn: conn.send_content(1, spec_0_8.FileStage(), props, b"abc")
        )
        stream = spec_0_8.StreamDeliver(consumer_tag="c", delivery_tag=2, exchange="", queue="q")
        stream_props = spec_0_8.StreamProperties(priority=1)
        talk.act(s, "stream", lambda conn: conn.send_content(1, stream, stream_props, b"s"))
        alert = spec_0_8.ChannelAlert(reply_code=310, reply_text="late", details={"a": "b"})
        talk.act(s, "alert", _send(1, alert))
    else:
        fields = {n: _ZERO.get(k, 0) for n, k in spec_0_9.MessageTransfer.FIELDS}
        transfer = make("message.transfer", **fields | {"body": MessageContent(data=b"inline")})
        talk.act(c, "transfer", _send(1, transfer))
        talk.act(s, "ping", _send(1, spec_0_9.ChannelPing()))
        talk.settle()
        talk.act(s, "message.ok", _send(1, spec_0_9.MessageOk()))
        talk.act(c, "channel.ok", _send(1, spec_0_9.ChannelOk()))
    talk.settle()
    talk.act(s, "close 1", lambda conn: conn.close_channel(1, 406, "PRECONDITION_FAILED"))
    talk.settle()
    talk.act(c, "close", lambda conn: conn.close())
    talk.settle()
    return talk


_ZERO: Final[dict[str, object]] = {"bit": False, "shortstr": "", "longstr": b"", "table": {}}


def _old_props() -> BasicProperties:
    """Properties whose headers 0-8 and 0-9 can carry."""
    return BasicProperties(content_type="text/plain", headers={"x-n": 1, "s": "v"}, priority=1)


def version_sessions() -> list[Session]:
    """Conversations between our two cores in 0-9 and in 0-8, and a redirect in each."""
    sessions: list[Session] = []
    for spec in (AMQP_0_9, AMQP_0_8):
        sessions += _version_session(spec).sessions()
        version = spec.version.value
        redirect = Recorder(
            f"{version}-redirect",
            ConnectionConfig(protocol=spec),
            ConnectionConfig(header_0_9="0-9"),
            version,
        )
        redirect.redirect = True
        redirect.settle()
        # short by nature (the client hears one event): not held to the pairs' length
        sessions += [
            attrs.evolve(s, name=s.name.replace("pair/", "redirect/")) for s in redirect.sessions()
        ]
    return sessions


def corpus() -> list[Session]:
    return fixture_sessions() + pair_sessions() + version_sessions()


# --- mutation -----------------------------------------------------------------------------------

#: Octets that mean something in AMQP framing: frame types, the frame end, size extremes.
_INTERESTING: Final = (0x00, 0x01, 0x02, 0x03, 0x08, 0xCE, 0x7F, 0x80, 0xFF)


def mutate(data: bytes, rng: random.Random) -> bytes:
    """*data* with one to four random mutations."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(8)
        pos = rng.randint(0, len(out))
        if kind == 0 and out:  # flip a bit
            pos = min(pos, len(out) - 1)
            out[pos] ^= 1 << rng.randrange(8)
        elif kind == 1 and out:  # an interesting or random octet
            pos = min(pos, len(out) - 1)
            out[pos] = rng.choice(_INTERESTING) if rng.random() < 0.5 else rng.randrange(256)
        elif kind == 2:  # insert random octets
            out[pos:pos] = rng.randbytes(rng.choice((1, 2, 4, 8, 64)))
        elif kind == 3:  # delete a range
            del out[pos : pos + rng.choice((1, 2, 4, 7, 100))]
        elif kind == 4:  # duplicate a range (a frame seen twice)
            length = rng.choice((1, 8, 30, 200))
            out[pos:pos] = out[pos : pos + length]
        elif kind == 5:  # truncate
            del out[pos:]
        elif kind == 6 and len(out) >= 4:  # a size or length field set to an extreme
            pos = min(pos, len(out) - 4)
            out[pos : pos + 4] = rng.choice(
                (b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x00\x00\x00\x00", b"\x00\x01\x00\x00")
            )
        else:  # swap two octets
            if len(out) >= 2:
                a, b = rng.randrange(len(out)), rng.randrange(len(out))
                out[a], out[b] = out[b], out[a]
    return bytes(out)


def mutate_session(session: Session, rng: random.Random) -> Session:
    """Mutate one or more received chunks; a truncated chunk ends the session there."""
    steps = list(session.steps)
    received = [i for i, step in enumerate(steps) if isinstance(step, Receive)]
    if not received:
        return session
    for index in rng.sample(received, k=min(len(received), rng.choice((1, 1, 1, 2, 3)))):
        step = steps[index]
        assert isinstance(step, Receive)
        steps[index] = Receive(mutate(step.data, rng))
    if rng.random() < 0.1:  # the transport breaks at a random point
        cut = rng.choice(received)
        step = steps[cut]
        assert isinstance(step, Receive)
        steps[cut] = Receive(step.data[: rng.randint(0, len(step.data))])
        del steps[cut + 1 :]
    return session.with_steps(tuple(steps), "+mutated")


def random_session(role: Role, rng: random.Random, version: str = "0-9-1") -> Session:
    """Random octets, after a valid protocol header half of the time (so framing is reached),
    into a core of *version* (the server reads the 0-9 header as 0-9)."""
    data = rng.randbytes(rng.choice((1, 7, 8, 30, 300, 5000)))
    headers = {
        "0-9-1": PROTOCOL_HEADER_0_9_1,
        "0-9": PROTOCOL_HEADER_0_9,
        "0-8": PROTOCOL_HEADER_0_8,
    }
    if role is Role.SERVER and rng.random() < 0.5:
        data = headers[version] + data
    config = (
        None
        if version == "0-9-1"
        else ConnectionConfig(protocol=version, protocols=[version], header_0_9="0-9")
    )
    return Session(f"random/{role.value}", role, (Receive(data),), config, version)


# --- replay and the property --------------------------------------------------------------------


def buffered(conn: Connection) -> int:
    """Octets *conn* holds unparsed.

    The connection exposes no count of its own, so this reads two private attributes: the
    frame reader (whose ``buffered`` property is public) and the inbox that holds octets before
    the protocol header is complete.
    """
    inbox = conn._inbox
    return conn._reader.buffered + (0 if inbox is None else len(inbox))


def frame_limit(conn: Connection) -> int:
    return conn._reader.frame_max


def _split(data: bytes, rng: random.Random | None) -> list[bytes]:
    if not data:
        return []  # an empty receive_data() would mean the end of the stream
    if rng is None:
        return [data]
    pieces: list[bytes] = []
    offset = 0
    while offset < len(data):
        size = rng.choice((1, 1, 2, 3, 7, 8, 13, 100, 4096, len(data)))
        pieces.append(data[offset : offset + size])
        offset += size
    return pieces


def check_failed(conn: Connection, error: RemoteProtocolError, written: bytes) -> None:
    """The state after a peer's violation: ERROR, sticky, and the close written last."""
    assert isinstance(error, RemoteProtocolError)
    assert conn.state is ConnectionState.ERROR
    if written and not written.startswith(b"AMQP"):
        frames = parse_frames(written, protocol=conn.protocol)
        closes = [f for f in frames if isinstance(f, MethodFrame) and f.channel == 0]
        closes = [f for f in closes if isinstance(f.method, ConnectionClose)]
        # Answers to frames parsed before the bad one may come first; the close comes last.
        if closes:
            last = frames[-1]
            assert len(closes) == 1
            assert isinstance(last, MethodFrame)
            assert isinstance(last.method, ConnectionClose)
            assert last.channel == 0
            assert last.method.reply_code == error.reply_code
    elif written:
        assert written == conn.protocol.header  # a server refusing a protocol header
    calls: list[Callable[[], object]] = [
        conn.next_event,
        lambda: conn.receive_data(b"\x01"),
        lambda: conn.receive_data(b""),
    ]
    for call in calls:
        with pytest.raises(RemoteProtocolError) as info:
            call()
        assert info.value is error
    assert conn.data_to_send() == b""
    with pytest.raises(LocalProtocolError):
        conn.close()
    assert conn.data_to_send() == b""


def run_session(
    session: Session,
    pieces: random.Random | None = None,
    *,
    eof: bool = False,
    byte_at_a_time: bool = False,
) -> Outcome:
    """Replay *session* into a fresh core and check the fuzz property.

    *pieces*: None feeds each received chunk whole; a seeded Random cuts it into pieces of 1 to
    4096 octets; *byte_at_a_time* feeds one octet at a time. *eof* ends the stream afterwards.
    """
    conn = Connection(session.role, session.config)
    conn.data_to_send()
    events = 0
    max_buffered = 0
    for step in session.steps:
        if isinstance(step, Act):
            # After a mutation the application's call may be illegal: that is fine.
            with contextlib.suppress(LocalProtocolError):
                step.action(conn)
            conn.data_to_send()
            continue
        split = (
            [step.data[i : i + 1] for i in range(len(step.data))]
            if byte_at_a_time
            else _split(step.data, pieces)
        )
        for piece in split:
            conn.receive_data(piece)  # raises only once failed, and we stop before that
            try:
                while (event := conn.next_event()) is not NEED_DATA:
                    assert isinstance(event, Event), event
                    events += 1
                    answer_decision(conn, event)
                    conn.data_to_send()
            except RemoteProtocolError as error:
                # What the failing call wrote: answers to frames before the bad one, the close.
                check_failed(conn, error, conn.data_to_send())
                return Outcome(events, error, max_buffered)
            held = buffered(conn)
            max_buffered = max(max_buffered, held)
            assert held <= frame_limit(conn) + SLACK, (held, frame_limit(conn))
            conn.data_to_send()
    if eof:
        conn.receive_data(b"")
        try:
            events += len(get_all_events(conn))
        except RemoteProtocolError as error:
            check_failed(conn, error, conn.data_to_send())
            return Outcome(events, error, max_buffered)
    return Outcome(events, None, max_buffered)
