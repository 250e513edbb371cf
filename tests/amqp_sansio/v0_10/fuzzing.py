"""The 0-10 fuzz engine: a corpus of what each role receives, mutations, and a replay that checks
the core's one promise about hostile input.

``tests/amqp_sansio/v0_10/test_fuzz.py`` runs it with a fixed budget;
``fuzz/fuzz_connection_0_10.py`` runs it for as long as you like.

The property: fed any octets, whole or in pieces, with or without an end of stream,
``next_event()`` returns events or raises :class:`RemoteProtocolError` (with reply code 501 or
320, the ``connection.close`` already written, or for a server refusing a protocol header its
own header), and nothing else; the error is sticky; and the core never holds more than a frame
of unparsed octets (plus a protocol header).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Final, final

from amqp_sansio.v0_10 import (
    MAX_SEQUENCE_SET_RANGES,
    NEED_DATA,
    PROTOCOL_HEADER_0_10,
    AcceptMode,
    AuthenticationRequested,
    CommandReceived,
    Connection,
    ConnectionClose,
    ConnectionConfig,
    ConnectionHeartbeat,
    ConnectionOpened,
    CreditUnit,
    DeliveryProperties,
    ErrorCode,
    ExchangeQuery,
    ExchangeQueryResult,
    FlowMode,
    MessageAccept,
    MessageProperties,
    MessageReceived,
    MessageTransfer,
    ProtocolError,
    QueueDeclare,
    RemoteProtocolError,
    Role,
    SecureRequested,
    SequenceSet,
    SessionCompleted,
    SessionGap,
    SessionRequestTimeout,
    SessionState,
    VirtualHostRequested,
)
from amqp_sansio.v0_10.framing import MAX_FRAME_SIZE, encode_command, encode_control
from amqp_sansio.v0_10.testing import ConnectionPair, parse_assemblies

if TYPE_CHECKING:
    from amqp_sansio.v0_10 import Event

__all__ = ["Outcome", "corpus", "mutate", "replay"]

#: The bound on unfinished segments in replays: above the largest segment of the corpus (the
#: largest sequence set's control, 65,5xx octets over several frames), below what
#: :func:`unfinished_bodies` sends.
UNFINISHED_BOUND: Final = 96 * 1024
REPLAY_CONFIG: Final = ConnectionConfig(
    heartbeat=5, heartbeat_min=1, heartbeat_max=10, max_unfinished_size=UNFINISHED_BOUND
)

#: Octets that mean something in 0-10 frames: flags, segment types, size extremes.
INTERESTING: Final = (0x00, 0x01, 0x02, 0x03, 0x04, 0x0F, 0x0B, 0x07, 0x0E, 0x10, 0x7F, 0x80, 0xFF)


def conversation(closer: Role) -> tuple[bytes, bytes]:
    """A conversation using most of the protocol; the octets the client and the server sent.

    *closer* detaches the first session and closes the connection, so that the other role's
    received octets replay into a core that only answers (see :func:`_respond`)."""
    pair = ConnectionPair(
        ConnectionConfig(heartbeat=5), ConnectionConfig(heartbeat_min=1, heartbeat_max=10)
    )
    pair.handshake()
    client, server = pair.attach("fuzz")
    declare = client.send(QueueDeclare(queue="q", auto_delete=True), sync=True)
    query = client.send(ExchangeQuery(name="amq.direct"), sync=True)
    for event in pair.transfer(pair.client):
        assert isinstance(event, CommandReceived)
    server.complete(declare)
    server.send_result(query, ExchangeQueryResult(type="direct", arguments={"a": [1, "b"]}))
    pair.transfer(pair.server)
    headers = [
        DeliveryProperties(routing_key="q", delivery_mode=2),
        MessageProperties(content_type="text/plain", application_headers={"n": 1, "f": 1.5}),
    ]
    client.transfer("amq.direct", b"small", headers=headers)
    client.transfer("amq.direct", bytes(range(256)) * 100, headers=headers, sync=True)
    client.subscribe("q", "d", accept_mode=AcceptMode.EXPLICIT)
    client.set_flow_mode("d", FlowMode.WINDOW)
    client.flow("d", CreditUnit.MESSAGE, 3)
    client.flow("d", CreditUnit.BYTE)
    for event in pair.transfer(pair.client):
        if isinstance(event, CommandReceived | MessageReceived):
            server.complete(event.command_id)
    pair.transfer(pair.server)
    ids = [
        server.transfer("d", b"m%d" % n, headers=headers, accept_mode=AcceptMode.EXPLICIT)
        for n in range(3)
    ]
    pair.transfer(pair.server)
    client.accept(ids[:2])
    client.release(ids[2])
    client.flush(expected=True, confirmed=True, completed=True)
    pair.transfer(pair.client)
    pair.transfer(pair.server)
    pair.client._send_control(1, SessionGap(commands=SequenceSet.of(99)))
    pair.client._send_control(1, SessionRequestTimeout(timeout=5))
    pair.client._send_control(0, ConnectionHeartbeat())
    pair.exchange()
    other, _ = pair.attach("second")
    bad = other.send(QueueDeclare(queue="missing", passive=True), sync=True)
    pair.transfer(pair.client)
    pair.server.session(2).raise_exception(ErrorCode.NOT_FOUND, "missing", command_id=bad)
    pair.exchange(pair.server)
    if closer is Role.CLIENT:
        client.detach()
        pair.exchange()
        pair.client.close()
        pair.exchange()
    else:
        server.detach()
        pair.exchange(pair.server)
        pair.server.close()
        pair.exchange(pair.server)
    return bytes(pair.client_sent), bytes(pair.server_sent)


def largest_sets() -> tuple[bytes, bytes]:
    """What each role sends a peer when it is hostile with sequence sets (issue 27): the
    largest ``session.completed`` the wire holds (8,191 ranges, shuffled), and a client's
    ``message.accept`` of as many ranges; the octets the client and the server sent."""
    pair = ConnectionPair()
    pair.handshake()
    client, _ = pair.attach("fuzz")
    order = list(range(MAX_SEQUENCE_SET_RANGES))
    random.Random(27).shuffle(order)
    largest = SequenceSet((3 * n, 3 * n + 1) for n in order)
    pair.client._send_control(1, SessionCompleted(commands=largest, timely_reply=True))
    client.send(MessageAccept(transfers=largest))
    pair.transfer(pair.client)
    pair.server._send_control(1, SessionCompleted(commands=largest, timely_reply=True))
    pair.transfer(pair.server)
    return bytes(pair.client_sent), bytes(pair.server_sent)


def unfinished_bodies() -> bytes:
    """What a server receives from a client that starts bodies on two sessions and ends
    neither: more unfinished octets than :data:`REPLAY_CONFIG` allows (issue 27)."""
    pair = ConnectionPair()
    pair.handshake()
    pair.attach("fuzz")
    pair.attach("second")
    sent = bytearray(pair.client_sent)
    for channel in (1, 2):
        out = bytearray()
        encode_command(
            out,
            channel,
            MessageTransfer(destination=""),
            4096,
            headers=[DeliveryProperties(routing_key="q")],
            body=bytes(UNFINISHED_BOUND),
        )
        sent += out[: -_last_frame_size(out)]
    return bytes(sent)


def _last_frame_size(frames: bytearray) -> int:
    at = size = 0
    while at < len(frames):
        size = int.from_bytes(frames[at + 2 : at + 4], "big")
        at += size
    return size


def corpus() -> list[tuple[Role, bytes]]:
    """Inputs for each role: what it received in :func:`conversation` (the peer closing),
    a handshake cut short, the largest sequence sets and bodies that never end."""
    client_sent, _ = conversation(Role.CLIENT)
    _, server_sent = conversation(Role.SERVER)
    close = bytearray()
    encode_control(close, 0, ConnectionClose(reply_code=200), 4096)
    client_sets, server_sets = largest_sets()
    return [
        (Role.SERVER, client_sent),
        (Role.CLIENT, server_sent),
        (Role.SERVER, client_sent[:60]),
        (Role.CLIENT, server_sent[:200] + bytes(close)),
        (Role.SERVER, client_sets),
        (Role.CLIENT, server_sets),
        (Role.SERVER, unfinished_bodies()),
    ]


def mutate(data: bytes, rng: random.Random) -> bytes:
    """*data* with one to four random mutations."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        if not buf:
            buf += bytes([rng.randrange(256)])
            continue
        at = rng.randrange(len(buf))
        kind = rng.randrange(8)
        if kind == 0:
            buf[at] ^= 1 << rng.randrange(8)
        elif kind == 1:
            buf[at] = rng.choice(INTERESTING)
        elif kind == 2:
            buf.insert(at, rng.choice(INTERESTING))
        elif kind == 3:
            del buf[at : at + rng.randint(1, 16)]
        elif kind == 4:
            piece = buf[at : at + rng.randint(1, 32)]
            buf[at:at] = piece
        elif kind == 5:  # a frame size field set to an extreme
            buf[at : at + 2] = rng.choice((b"\x00\x00", b"\xff\xff", b"\x00\x0c", b"\x10\x00"))
        elif kind == 6:
            del buf[at:]
        else:
            buf[at : at + 4] = bytes(rng.randrange(256) for _ in range(4))
    return bytes(buf)


@final
class Outcome:
    """How a replay ended: the events, and the error that ended it, if any."""

    def __init__(self, events: list[Event], error: RemoteProtocolError | None) -> None:
        self.events = events
        self.error = error


def _respond(conn: Connection, event: Event) -> None:
    """What an application does with an event (its own mistakes are LocalProtocolErrors)."""
    try:
        if isinstance(event, AuthenticationRequested):
            conn.accept_authentication()
        elif isinstance(event, VirtualHostRequested):
            conn.accept_virtual_host()
        elif isinstance(event, SecureRequested):
            conn.answer_secure(b"")
        elif isinstance(event, ConnectionOpened) and conn.role is Role.CLIENT:
            # the sessions of the recorded conversation, on channels 1 and 2
            conn.attach("fuzz")
            conn.attach("second")
        elif isinstance(event, CommandReceived | MessageReceived) and conn.role is Role.SERVER:
            session = conn.sessions.get(event.channel)
            if session is not None and session.state is SessionState.ATTACHED:
                session.complete(event.command_id)
    except ProtocolError as exc:
        if isinstance(exc, RemoteProtocolError):
            raise AssertionError(f"an application call raised {exc!r}") from exc


def replay(role: Role, data: bytes, rng: random.Random | int | None, *, eof: bool) -> Outcome:
    """Feed *data* to a new connection of *role* (whole; in random pieces of 1 to 64 octets
    when *rng* is a Random; in pieces of *rng* octets when it is an int) and check the
    property; raises AssertionError if it breaks."""
    conn = Connection(role, REPLAY_CONFIG)
    conn.data_to_send()
    events: list[Event] = []
    offset = 0
    limit = MAX_FRAME_SIZE + len(PROTOCOL_HEADER_0_10)
    error: RemoteProtocolError | None = None
    chunks = [data] if rng is None and data else []
    while rng is not None and offset < len(data):
        size = rng if isinstance(rng, int) else rng.randint(1, 64)
        chunks.append(data[offset : offset + size])
        offset += size
    if eof:
        chunks.append(b"")
    for chunk in chunks:
        conn.receive_data(chunk)  # no error was raised before: nothing to raise
        try:
            while (event := conn.next_event()) is not NEED_DATA:
                events.append(event)
                _respond(conn, event)
        except RemoteProtocolError as exc:
            error = exc
            _check_failure(conn, exc)
            break
        held = conn._reader.buffered + (len(conn._inbox) if conn._inbox is not None else 0)
        assert held <= limit, f"{held} octets held unparsed"
        assert 0 <= conn.unfinished_size <= UNFINISHED_BOUND, conn.unfinished_size
        conn.data_to_send()
    return Outcome(events, error)


def _check_failure(conn: Connection, exc: RemoteProtocolError) -> None:
    assert exc.reply_code in (320, 501), exc
    again: BaseException | None = None
    try:
        conn.next_event()
    except RemoteProtocolError as raised:
        again = raised
    if again is not exc:
        raise AssertionError(f"the error is not sticky: then {again!r}")
    written = conn.data_to_send()
    if written.startswith(PROTOCOL_HEADER_0_10) or not written:
        return  # a server's answer to a bad header, or a client refused by another version
    last = parse_assemblies(written)[-1].op
    assert isinstance(last, ConnectionClose), f"the last control written is {last!r}"
    assert last.reply_code == exc.reply_code


def random_input(rng: random.Random) -> tuple[Role, bytes]:
    """Random octets, half of them after a valid header and with frame-like starts."""
    role = rng.choice((Role.CLIENT, Role.SERVER))
    data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 512)))
    if rng.random() < 0.5:
        data = PROTOCOL_HEADER_0_10 + bytes([0x0F, rng.randrange(4)]) + data
    return role, data
