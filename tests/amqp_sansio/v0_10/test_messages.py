"""message.transfer and message credit: assembly, settlement, subscriptions, both flow modes and
units, flush and stop, the byte count of a transfer, and the client's completion policy."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from amqp_sansio.v0_10 import (
    UNLIMITED,
    AcceptMode,
    Acquired,
    CommandReceived,
    CommandsCompleted,
    ConnectionConfig,
    Credit,
    CreditUnit,
    DeliveryProperties,
    FlowMode,
    FragmentProperties,
    LocalProtocolError,
    MessageAccept,
    MessageAcquire,
    MessageCancel,
    MessageFlush,
    MessageProperties,
    MessageReceived,
    MessageReject,
    MessageRelease,
    MessageTransfer,
    RemoteProtocolError,
    ResultReceived,
    SequenceSet,
    Session,
    SessionCompleted,
    UnknownStruct,
)
from amqp_sansio.v0_10.framing import encode_header_segment
from amqp_sansio.v0_10.testing import ConnectionPair, feed, parse_assemblies

if TYPE_CHECKING:
    from collections.abc import Sequence


def setup(
    byte_at_a_time: bool = False, **client: object
) -> tuple[ConnectionPair, Session, Session]:
    pair = ConnectionPair(ConnectionConfig(**client), byte_at_a_time=byte_at_a_time)  # type: ignore[arg-type]
    pair.handshake()
    client_session, server_session = pair.attach("s")
    return pair, client_session, server_session


def subscribe(
    pair: ConnectionPair,
    client: Session,
    server: Session,
    mode: int,
    messages: int | None,
    octets: int | None,
) -> None:
    """A subscription "d" with the given credit; the server completes each command."""
    client.subscribe("q", "d", accept_mode=AcceptMode.EXPLICIT)
    client.set_flow_mode("d", mode)
    if messages is not None:
        client.flow("d", CreditUnit.MESSAGE, messages)
    if octets is not None:
        client.flow("d", CreditUnit.BYTE, octets)
    for event in pair.transfer(pair.client):
        assert isinstance(event, CommandReceived)
        server.complete(event.command_id)
    pair.transfer(pair.server)


def sent(data: bytes) -> list[object]:
    return [a.op for a in parse_assemblies(data)]


def reports(data: bytes) -> list[SessionCompleted]:
    """The session.completed controls in *data*."""
    return [op for op in sent(data) if isinstance(op, SessionCompleted)]


@pytest.mark.parametrize("byte_at_a_time", [False, True])
def test_a_transfer_arrives_as_one_event(byte_at_a_time: bool) -> None:
    pair, client, _ = setup(byte_at_a_time)
    props = MessageProperties(content_type="text/plain", application_headers={"k": "v"})
    body = bytes(range(256)) * 300  # 76800 octets: several frames
    command_id = client.transfer(
        "amq.direct", body, headers=[DeliveryProperties(routing_key="q"), props], sync=True
    )
    [message] = pair.transfer(pair.client)
    assert isinstance(message, MessageReceived)
    assert message.command_id == command_id
    assert message.transfer == MessageTransfer(
        destination="amq.direct", accept_mode=AcceptMode.NONE, acquire_mode=0
    )
    assert message.body == body
    assert message.sync
    assert message.delivery_properties == DeliveryProperties(routing_key="q")
    assert message.message_properties is not None
    assert message.message_properties.content_type == "text/plain"
    header = bytearray()
    encode_header_segment(header, message.headers)
    assert message.size == len(body) + len(header)


def test_large_bodies_are_sent_without_copying() -> None:
    pair, client, _ = setup()
    body = bytearray(b"a" * 100_000)
    client.transfer("x", body)
    buffers = pair.client.buffers_to_send()
    assert any(isinstance(b, memoryview) and b.obj is body for b in buffers)
    [message] = feed(pair.server, b"".join(bytes(b) for b in buffers))
    assert isinstance(message, MessageReceived)
    assert message.body == body


def test_header_entries_keep_order_and_unknown_structs() -> None:
    pair, client, _ = setup()
    unknown = UnknownStruct(0x0499, b"\x01\x00\x07")
    headers = [MessageProperties(content_length=1), unknown, FragmentProperties()]
    client.transfer("x", b"y", headers=headers)
    [message] = pair.transfer(pair.client)
    assert isinstance(message, MessageReceived)
    assert message.headers == tuple(headers)
    assert message.delivery_properties is None


def test_accept_release_reject_and_acquire_name_received_transfers() -> None:
    pair, client, server = setup()
    subscribe(pair, client, server, FlowMode.CREDIT, 10, UNLIMITED)
    ids = [server.transfer("d", b"m", accept_mode=AcceptMode.EXPLICIT) for _ in range(4)]
    received = pair.transfer(pair.server)
    assert [e.command_id for e in received if isinstance(e, MessageReceived)] == ids
    # the client never accepts by itself
    out = sent(pair.client.data_to_send())
    assert not any(isinstance(op, MessageAccept) for op in out)
    client.accept(ids[:2])
    client.release(ids[2], set_redelivered=True)
    client.reject(SequenceSet.of(ids[3]), code=1, text="bad")
    acquire = client.acquire(ids[0])
    events = pair.transfer(pair.client)
    commands = [e.command for e in events if isinstance(e, CommandReceived)]
    assert commands == [
        MessageAccept(transfers=SequenceSet([(ids[0], ids[1])])),
        MessageRelease(transfers=SequenceSet.of(ids[2]), set_redelivered=True),
        MessageReject(transfers=SequenceSet.of(ids[3]), code=1, text="bad"),
        MessageAcquire(transfers=SequenceSet.of(ids[0])),
    ]
    server.send_result(acquire, Acquired(transfers=SequenceSet.of(ids[0])))
    result = next(e for e in pair.transfer(pair.server) if isinstance(e, ResultReceived))
    assert result.value == Acquired(transfers=SequenceSet.of(ids[0]))


def test_message_credit_is_never_exceeded_and_a_refusal_writes_nothing() -> None:
    pair, client, server = setup()
    subscribe(pair, client, server, FlowMode.CREDIT, 2, UNLIMITED)
    assert server.credit("d") == Credit(mode=FlowMode.CREDIT, messages=2, octets=UNLIMITED)
    server.transfer("d", b"1")
    server.transfer("d", b"2")
    before = pair.server.data_to_send()
    with pytest.raises(LocalProtocolError, match="no credit"):
        server.transfer("d", b"3" * 100_000)  # a large body: still nothing written
    assert pair.server.data_to_send() == b""
    assert pair.server.buffers_to_send() == []
    assert server.next_command_id == 2
    feed(pair.client, before)
    pair.transfer(pair.client)  # completions do not return credit in credit mode
    assert server.credit("d") == Credit(mode=FlowMode.CREDIT, messages=0, octets=UNLIMITED)
    client.flow("d", CreditUnit.MESSAGE, 1)
    pair.transfer(pair.client)
    server.transfer("d", b"3")


def test_byte_credit_counts_the_header_segment_as_qpidd_does() -> None:
    pair, client, server = setup()
    subscribe(pair, client, server, FlowMode.CREDIT, None, 19 * 2)
    client.flow("d", CreditUnit.MESSAGE)  # infinite message credit
    pair.transfer(pair.client)
    # qpid's test_credit_flow_bytes: an 8-octet body with routing key and exchange is 19 octets
    headers = [DeliveryProperties(routing_key="q", exchange="")]
    server.transfer("d", b"abcdefgh", headers=headers)
    assert server.credit("d") == Credit(mode=FlowMode.CREDIT, messages=UNLIMITED, octets=19)
    server.transfer("d", b"abcdefgh", headers=headers)
    with pytest.raises(LocalProtocolError, match="19 octets"):
        server.transfer("d", b"abcdefgh", headers=headers)
    messages = pair.transfer(pair.server)
    assert [e.size for e in messages if isinstance(e, MessageReceived)] == [19, 19]


def test_window_credit_comes_back_only_with_completion() -> None:
    pair, client, server = setup(auto_complete=False)
    subscribe(pair, client, server, FlowMode.WINDOW, 2, UNLIMITED)
    first = server.transfer("d", b"1", accept_mode=AcceptMode.EXPLICIT)
    server.transfer("d", b"2", accept_mode=AcceptMode.EXPLICIT)
    assert server.credit("d") == Credit(mode=FlowMode.WINDOW, messages=0, octets=UNLIMITED)
    pair.transfer(pair.server)
    client.accept(first)  # accepting returns no credit
    pair.transfer(pair.client)
    assert server.credit("d").messages == 0  # type: ignore[union-attr]
    client.complete(first)  # completion does
    [done] = pair.transfer(pair.client)
    assert isinstance(done, CommandsCompleted)
    assert server.credit("d") == Credit(mode=FlowMode.WINDOW, messages=1, octets=UNLIMITED)


def test_window_byte_credit_returns_the_transfers_size() -> None:
    pair, client, server = setup()
    subscribe(pair, client, server, FlowMode.WINDOW, None, 100)
    client.flow("d", CreditUnit.MESSAGE)
    pair.transfer(pair.client)
    server.transfer("d", b"x" * 60)
    assert server.credit("d").octets == 40  # type: ignore[union-attr]
    pair.transfer(pair.server)
    pair.transfer(pair.client)  # the client's completion
    assert server.credit("d").octets == 100  # type: ignore[union-attr]


def test_flush_and_stop_zero_the_senders_credit() -> None:
    pair, client, server = setup()
    subscribe(pair, client, server, FlowMode.CREDIT, 5, UNLIMITED)
    client.stop("d")
    client.flow("d", CreditUnit.BYTE)
    pair.transfer(pair.client)
    assert server.credit("d").messages == 0  # type: ignore[union-attr]
    client.flow("d", CreditUnit.MESSAGE, 5)
    flush = client.send(MessageFlush(destination="d"), sync=True)
    events = pair.transfer(pair.client)
    assert isinstance(events[-1], CommandReceived)
    assert events[-1].command == MessageFlush(destination="d")
    assert server.credit("d").messages == 5  # type: ignore[union-attr]
    server.transfer("d", b"what I have")  # the server sends what it has, then completes
    server.complete(flush)
    assert server.credit("d").messages == 0  # type: ignore[union-attr]
    events = pair.transfer(pair.server)
    assert any(isinstance(e, CommandsCompleted) and flush in e.commands for e in events)


def test_server_transfers_need_a_subscription() -> None:
    pair, client, server = setup()
    with pytest.raises(LocalProtocolError, match="no subscription"):
        server.transfer("d", b"x")
    subscribe(pair, client, server, FlowMode.CREDIT, UNLIMITED, UNLIMITED)
    server.transfer("d", b"x")
    client.send(MessageCancel(destination="d"))
    pair.transfer(pair.client)
    with pytest.raises(LocalProtocolError, match="no subscription"):
        server.transfer("d", b"x")
    # a client's transfers to exchanges need no credit unless the server sends flow
    assert client.credit("amq.direct") is None
    client.transfer("amq.direct", b"x")


def test_client_completes_received_transfers_in_one_batch_per_read() -> None:
    pair, client, server = setup()
    subscribe(pair, client, server, FlowMode.CREDIT, UNLIMITED, UNLIMITED)
    ids = [server.transfer("d", b"m") for _ in range(10)]
    events = pair.transfer(pair.server)
    assert len(events) == 10
    assert reports(pair.client.data_to_send()) == [
        SessionCompleted(commands=SequenceSet([(ids[0], ids[-1])]), timely_reply=False)
    ]


def test_client_reports_before_a_window_sender_would_stall() -> None:
    pair, client, server = setup()
    subscribe(pair, client, server, FlowMode.WINDOW, 4, UNLIMITED)
    for _ in range(4):
        server.transfer("d", b"m")
    with pytest.raises(LocalProtocolError):
        server.transfer("d", b"m")
    data = pair.server.data_to_send()
    events = feed(pair.client, data)
    assert sum(isinstance(e, MessageReceived) for e in events) == 4
    reports = [op for op in sent(pair.client.data_to_send()) if isinstance(op, SessionCompleted)]
    # half the window used: reported; then the rest, within the same read
    assert [r.commands for r in reports] == [SequenceSet([(0, 1)]), SequenceSet([(0, 3)])]
    # A sender that sends whenever it can never stalls: each read's reports free the window.
    for _ in range(5):
        feed(pair.server, b"".join(_completed_frames(reports)))
        sent_now = 0
        while True:
            try:
                server.transfer("d", b"m")
            except LocalProtocolError:
                break
            sent_now += 1
        assert sent_now == 4
        events = feed(pair.client, pair.server.data_to_send())
        assert sum(isinstance(e, MessageReceived) for e in events) == 4
        reports = [
            op for op in sent(pair.client.data_to_send()) if isinstance(op, SessionCompleted)
        ]


def test_a_server_granting_window_credit_reports_before_the_sender_stalls() -> None:
    # manual completion without eager reports (the server role's defaults): completing half
    # of the window it granted reports at once, as the client role does
    pair, client, server = setup()
    server.set_flow_mode("d", FlowMode.WINDOW)
    server.flow("d", CreditUnit.MESSAGE, 4)
    server.flow("d", CreditUnit.BYTE, UNLIMITED)
    pair.transfer(pair.server)
    pair.transfer(pair.client)
    for _ in range(4):
        client.transfer("d", b"m")
    assert client.credit("d") == Credit(mode=FlowMode.WINDOW, messages=0, octets=UNLIMITED)
    events = pair.transfer(pair.client)
    ids = [e.command_id for e in events if isinstance(e, MessageReceived)]
    assert len(ids) == 4
    server.complete(ids[0], report=False)
    assert reports(pair.server.data_to_send()) == []
    server.complete(ids[1], report=False)
    data = pair.server.data_to_send()
    assert reports(data) == [
        SessionCompleted(commands=SequenceSet([(ids[0], ids[1])]), timely_reply=False)
    ]
    feed(pair.client, data)
    assert client.credit("d") == Credit(mode=FlowMode.WINDOW, messages=2, octets=UNLIMITED)


def _completed_frames(reports: list[SessionCompleted]) -> list[bytes]:
    from amqp_sansio.v0_10.testing import control_frames

    return [control_frames(1, report) for report in reports]


def test_a_sync_transfer_is_reported_at_once() -> None:
    pair, client, server = setup()
    subscribe(pair, client, server, FlowMode.CREDIT, UNLIMITED, UNLIMITED)
    server.transfer("d", b"m", sync=True)
    data = pair.server.data_to_send()
    pair.client.receive_data(data)
    event = pair.client.next_event()
    assert isinstance(event, MessageReceived)
    # reported while handing the message out, before the input ran out
    assert reports(pair.client.data_to_send()) == [
        SessionCompleted(commands=SequenceSet.of(event.command_id), timely_reply=False)
    ]


def _summary(events: Sequence[object]) -> list[tuple[object, ...]]:
    return [
        (e.command_id, e.transfer, e.headers, e.body, e.sync, e.size)
        for e in events
        if isinstance(e, MessageReceived)
    ]


def test_transfers_decode_alike_whatever_the_reads_cut() -> None:
    # Whole transfers in one read take the three-frame shortcut; reads that cut a transfer
    # anywhere take the frame by frame path for it: the events are the same.
    pair, client, _ = setup()
    props = [DeliveryProperties(routing_key="q"), MessageProperties(content_length=3)]
    for n in range(3):
        client.transfer("x", b"abc", headers=props, sync=n == 2)
    client.transfer("x", b"")  # an empty body segment
    client.transfer("x", b"no header")
    data = pair.client.data_to_send()
    expected = _summary(feed(setup()[0].server, data))
    assert len(expected) == 5
    for cut in range(1, len(data)):
        server = setup()[0].server
        events = feed(server, data[:cut]) + feed(server, data[cut:])
        assert _summary(events) == expected, cut


def test_a_bad_frame_after_a_command_segment_is_refused_as_before() -> None:
    pair, client, _ = setup()
    client.transfer("x", b"abc", headers=[DeliveryProperties(routing_key="q")])
    data = bytearray(pair.client.data_to_send())
    header_frame = data.index(b"\x03\x02")  # the header segment's frame: flags, type
    data[header_frame + 4] = 1  # a reserved octet
    with pytest.raises(RemoteProtocolError, match="reserved"):
        feed(pair.server, bytes(data))


def test_outbound_size_counts_what_data_to_send_hands_out() -> None:
    pair, client, _ = setup()
    conn = pair.client
    assert conn.outbound_size == 0
    client.transfer("x", b"small")
    client.transfer("x", b"b" * 100_000)  # written as views of the body
    client.transfer("x", b"small")
    size = conn.outbound_size
    assert size == len(conn.data_to_send())
    assert conn.outbound_size == 0
