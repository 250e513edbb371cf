"""AMQP 0-9 and 0-8 through the core, both roles: their own method classes and ids, the
classes the core gives no meaning (passed through, still checked by the tables), content of
other classes than basic, field tables narrowed to the version's types, connection.redirect."""

from __future__ import annotations

import datetime
import struct
from decimal import Decimal
from typing import TYPE_CHECKING, cast

import pytest

from amqp_sansio import (
    AMQP_0_8,
    AMQP_0_8_QPID,
    AMQP_0_9,
    AMQP_0_9_1,
    AuthenticationRequested,
    ChannelFlowChanged,
    ChannelOpened,
    ConnectionClosed,
    ConnectionConfig,
    ConnectionOpened,
    ConnectionRedirected,
    ConnectionState,
    ConsumerCancelled,
    FieldTable,
    LocalProtocolError,
    MessageContent,
    MessageReceived,
    MethodReceived,
    ProtocolSpec,
    RemoteProtocolError,
    Role,
    SecureRequested,
    VirtualHostRequested,
)
from amqp_sansio._generated import spec_0_8, spec_0_9, spec_0_9_1
from amqp_sansio._state import CHANNEL_LIFECYCLE
from amqp_sansio.framing import MethodFrame
from amqp_sansio.testing import ConnectionPair, feed, method_frame, parse_frames

if TYPE_CHECKING:
    from amqp_sansio import Connection, Event
    from amqp_sansio._method import Method

OLDER = [AMQP_0_9, AMQP_0_8]


def _pair(spec: ProtocolSpec, *, byte_at_a_time: bool = False) -> ConnectionPair:
    pair = ConnectionPair(
        ConnectionConfig(protocol=spec),
        ConnectionConfig(header_0_9="0-9"),
        byte_at_a_time=byte_at_a_time,
    )
    pair.handshake()
    assert pair.server.protocol is spec
    return pair


def _ids(data: bytes, spec: ProtocolSpec) -> list[tuple[int, int]]:
    ids = []
    offset = 0
    while offset < len(data):
        frame_type, _, size = struct.unpack_from(">BHI", data, offset)
        if frame_type == 1:
            ids.append(struct.unpack_from(">HH", data, offset + 7))
        offset += 8 + size
    return ids


# --- the tables -------------------------------------------------------------------------------


def test_shared_classes_are_the_0_9_1_classes() -> None:
    assert spec_0_8.QueueDeclare is spec_0_9_1.QueueDeclare
    assert spec_0_9.BasicPublish is spec_0_9_1.BasicPublish
    assert spec_0_8.BasicProperties is spec_0_9_1.BasicProperties
    assert spec_0_8.ConnectionClose is spec_0_9_1.ConnectionClose
    assert AMQP_0_8.ids(spec_0_9_1.ConnectionClose) == (10, 60)
    assert AMQP_0_8.ids(spec_0_9_1.ConnectionCloseOk) == (10, 61)
    assert AMQP_0_9.ids(spec_0_9_1.ConnectionClose) == (10, 50)
    # RabbitMQ's 0-8: basic.recover at 110 with recover-ok, recover-async at 100, queue.unbind
    assert AMQP_0_8.by_meaning["basic.recover"] is spec_0_9_1.BasicRecover
    assert AMQP_0_8.by_meaning["basic.recover-async"] is spec_0_9_1.BasicRecoverAsync
    assert AMQP_0_8.by_meaning["queue.unbind"] is spec_0_9_1.QueueUnbind


def test_classes_of_their_own_where_a_version_differs() -> None:
    # 0-8 channel.open-ok has no arguments; so channel.open, whose reply it is, is 0-8's own
    assert spec_0_8.ChannelOpenOk.FIELDS == ()
    assert AMQP_0_8.by_meaning["channel.open"] is not AMQP_0_9_1.by_meaning["channel.open"]
    assert (spec_0_8.ChannelOpenOk,) == spec_0_8.ChannelOpen.RESPONSES
    # basic.consume: no arguments table in 0-8, `filter` in 0-9
    assert "arguments" not in dict(spec_0_8.BasicConsume.FIELDS)
    assert dict(spec_0_9.BasicConsume.FIELDS)["filter"] == "table"
    # 0-9's basic.recover is 0-9-1's recover-async, under the old name
    assert (spec_0_9.BasicRecover.INDEX, spec_0_9.BasicRecover.RESPONSES) == (60 << 16 | 100, ())
    # connection.open may be answered by redirect: (10, 50) in 0-8, (10, 42) in 0-9
    assert spec_0_8.ConnectionRedirect.INDEX == 10 << 16 | 50
    assert spec_0_9.ConnectionRedirect.INDEX == 10 << 16 | 42
    assert (
        spec_0_9_1.ConnectionOpenOk,
        spec_0_9.ConnectionRedirect,
    ) == spec_0_9.ConnectionOpen.RESPONSES
    # only the client acks, and only the client cancels consumers, before RabbitMQ's 0-9-1
    assert AMQP_0_8.by_meaning["basic.ack"] is not AMQP_0_9_1.by_meaning["basic.ack"]
    assert {Role.CLIENT} == spec_0_8.BasicCancel.SENT_BY
    assert spec_0_8.TestContent.__test__ is False  # not collected by pytest


def test_0_9_channel_open_ok_is_the_0_9_1_class() -> None:
    # 0-9 names the longstr channel-id; 0-9-1 reserves it under the same name (RabbitMQ's JSON):
    # identical on the wire and in Python, so shared.
    assert spec_0_9.ChannelOpenOk is spec_0_9_1.ChannelOpenOk


# --- the core in both roles -------------------------------------------------------------------


@pytest.mark.parametrize("byte_at_a_time", [False, True])
@pytest.mark.parametrize("spec", OLDER, ids=lambda s: s.version.value)
def test_a_conversation(spec: ProtocolSpec, byte_at_a_time: bool) -> None:
    pair = _pair(spec, byte_at_a_time=byte_at_a_time)
    client, server = pair.client, pair.server
    channel = pair.open_channel()

    declare = spec.make(
        "queue.declare", queue="q", arguments={"x-max-length": 5, "x-name": "n", "d": {"k": 7}}
    )
    client.send_method(channel, declare)
    [received] = pair.transfer(client)
    assert isinstance(received, MethodReceived)
    # the ints went as I, and come back as ints
    assert received.method == declare
    server.send_method(
        channel, spec.make("queue.declare-ok", queue="q", message_count=0, consumer_count=0)
    )
    [answer] = pair.transfer(server)
    assert isinstance(answer, MethodReceived)
    assert answer.request is declare

    consume_fields: dict[str, object] = {"queue": "q", "consumer_tag": "c"}
    if spec is AMQP_0_9:
        consume_fields["filter"] = {}
    client.send_method(channel, spec.make("basic.consume", **consume_fields))
    pair.transfer(client)
    server.send_method(channel, spec.make("basic.consume-ok", consumer_tag="c"))
    pair.transfer(server)

    headers: FieldTable = {
        "n": 1,
        "s": "x",
        "when": datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC),
    }
    props = spec_0_9_1.BasicProperties(content_type="text/plain", headers=headers)
    client.publish(channel, spec.make("basic.publish", routing_key="q"), props, b"body")
    [published] = pair.transfer(client)
    assert isinstance(published, MessageReceived)
    assert published.properties.headers == headers  # type: ignore[attr-defined]
    deliver = spec.make(
        "basic.deliver", consumer_tag="c", delivery_tag=1, exchange="", routing_key="q"
    )
    server.send_content(channel, deliver, published.properties, published.body)
    [delivered] = pair.transfer(server)
    assert isinstance(delivered, MessageReceived)
    assert delivered.body == b"body"
    client.send_method(channel, spec.make("basic.ack", delivery_tag=1))
    [acked] = pair.transfer(client)
    assert isinstance(acked, MethodReceived)

    client.close(200, "bye")
    data = client.data_to_send()
    # 0-8 closes at (10, 60), 0-9 at (10, 50)
    assert _ids(data, spec) == [(10, 60) if spec is AMQP_0_8 else (10, 50)]
    [closed] = feed(server, data)
    assert isinstance(closed, ConnectionClosed)
    [closed] = pair.transfer(server)
    assert isinstance(closed, ConnectionClosed)


def test_0_8_channel_open_ok_is_empty_on_the_wire() -> None:
    pair = _pair(AMQP_0_8)
    pair.client.open_channel()
    pair.transfer(pair.client)
    data = pair.server.data_to_send()
    assert data == b"\x01\x00\x01\x00\x00\x00\x04\x00\x14\x00\x0b\xce"
    assert feed(pair.client, data) == [ChannelOpened(channel=1)]


def test_0_8_recover_is_synchronous_as_rabbitmq_reads_it() -> None:
    pair = _pair(AMQP_0_8)
    channel = pair.open_channel()
    recover = AMQP_0_8.make("basic.recover", requeue=True)
    pair.client.send_method(channel, recover)
    assert _ids(pair.client.data_to_send(), AMQP_0_8) == [(60, 110)]
    assert pair.client.pending_requests(channel) == (recover,)
    pair.server.receive_data(method_frame(channel, recover))
    pair.server.next_event()
    pair.server.send_method(channel, AMQP_0_8.make("basic.recover-ok"))
    [ok] = pair.transfer(pair.server)
    assert isinstance(ok, MethodReceived)
    assert ok.request is recover


# --- field tables -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "value", "wire"),
    [
        (AMQP_0_8, 7, b"I\x00\x00\x00\x07"),
        (AMQP_0_8, "s", b"S\x00\x00\x00\x01s"),
        (AMQP_0_8, Decimal("1.5"), b"D\x01\x00\x00\x00\x0f"),
        (AMQP_0_9, None, b"V"),
        (AMQP_0_9_1, 7, b"b\x07"),  # 0-9-1 keeps RabbitMQ's smallest fit
        (AMQP_0_9_1, True, b"t\x01"),
    ],
)
def test_tables_are_encoded_with_the_version_s_types(
    spec: ProtocolSpec, value: object, wire: bytes
) -> None:
    pair = _pair(spec) if spec is not AMQP_0_9_1 else ConnectionPair()
    if spec is AMQP_0_9_1:
        pair.handshake()
    channel = pair.open_channel()
    pair.client.send_method(channel, spec.make("queue.declare", queue="q", arguments={"k": value}))
    data = pair.client.data_to_send()
    assert data.endswith(b"\x01k" + wire + b"\xce")


@pytest.mark.parametrize("spec", OLDER, ids=lambda s: s.version.value)
@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (True, "bool"),
        (1.5, "float"),
        (b"x", "bytes"),
        ([1], "list"),
        (2**40, "int"),
        (spec_0_9_1.BasicProperties, "type"),
    ],
)
def test_values_the_version_lacks_are_refused_before_anything_is_written(
    spec: ProtocolSpec, value: object, kind: str
) -> None:
    pair = _pair(spec)
    channel = pair.open_channel()
    declare = spec.make("queue.declare", queue="q", arguments={"x-k": value})
    with pytest.raises(LocalProtocolError) as info:
        pair.client.send_method(channel, declare)
    text = info.value.reply_text
    assert text.startswith("queue.declare arguments['x-k']: ")
    assert kind in text
    assert f"AMQP {spec.version.value} field tables define only" in text
    assert info.value.reply_code == 502
    assert pair.client.data_to_send() == b""
    # the caller's method is left alone
    assert cast("spec_0_9_1.QueueDeclare", declare).arguments == {"x-k": value}


def test_void_is_0_9_only_and_headers_are_checked_too() -> None:
    pair = _pair(AMQP_0_8)
    channel = pair.open_channel()
    props = spec_0_9_1.BasicProperties(headers={"h": None})
    with pytest.raises(LocalProtocolError, match=r"BasicProperties headers\['h'\]: a NoneType"):
        pair.client.publish(channel, spec_0_9_1.BasicPublish(), props, b"")
    assert pair.client.data_to_send() == b""


def test_received_tables_decode_every_type_in_every_version() -> None:
    pair = _pair(AMQP_0_8)
    channel = pair.open_channel()
    # the client gets a table of 0-9-1 types (a bool, an int64) from the server: decoded
    declare_ok = method_frame(
        channel,
        spec_0_9_1.ExchangeDeclare(exchange="e", arguments={"t": True, "l": 2**40}),
        protocol=AMQP_0_8,
    )
    [received] = feed(pair.server, declare_ok)
    assert isinstance(received, MethodReceived)
    assert isinstance(received.method, spec_0_9_1.ExchangeDeclare)
    assert received.method.arguments == {"t": True, "l": 2**40}


def test_capabilities_are_left_out_of_0_8_and_0_9_properties() -> None:
    for spec in OLDER:
        _, server_events = ConnectionPair(ConnectionConfig(protocol=spec)).handshake()
        [opened] = [e for e in server_events if isinstance(e, ConnectionOpened)]
        # RabbitMQ's capabilities are booleans, which 0-8 and 0-9 tables can't carry
        assert opened.client_properties["capabilities"] == {}
    with pytest.raises(LocalProtocolError, match="start-ok client_properties"):
        ConnectionPair(ConnectionConfig(protocol="0-8", client_properties={"flag": True}))
    with pytest.raises(LocalProtocolError, match="start server_properties"):
        ConnectionPair(server_config=ConnectionConfig(server_properties={"flag": True}))
    # a server of 0-9-1 only may say what it likes
    ConnectionPair(
        server_config=ConnectionConfig(protocols=["0-9-1"], server_properties={"flag": True})
    )


# --- methods the core gives no meaning --------------------------------------------------------


def test_0_9_message_transfer_passes_through_with_its_content_field() -> None:
    pair = _pair(AMQP_0_9)
    channel = pair.open_channel()
    zero: dict[str, object] = {"bit": False, "shortstr": "", "longstr": b"", "table": {"k": 1}}
    fields = {name: zero.get(kind, 0) for name, kind in spec_0_9.MessageTransfer.FIELDS}
    fields["body"] = MessageContent(data=b"hello", reference=False)
    transfer = AMQP_0_9.make("message.transfer", **fields)
    # both roles send message.transfer; it asks for message.ok (or reject)
    pair.server.send_method(channel, transfer)
    [received] = pair.transfer(pair.server)
    assert isinstance(received, MethodReceived)
    assert received.method == transfer
    with pytest.raises(LocalProtocolError, match="does not answer the oldest request"):
        pair.client.send_method(channel, spec_0_9.MessageEmpty())
    pair.client.send_method(channel, spec_0_9.MessageOk())
    [ok] = pair.transfer(pair.client)
    assert isinstance(ok, MethodReceived)
    assert ok.request == transfer


def test_0_9_channel_ping_is_answered_by_channel_ok_either_way() -> None:
    pair = _pair(AMQP_0_9)
    channel = pair.open_channel()
    for sender in (pair.client, pair.server):
        sender.send_method(channel, spec_0_9.ChannelPing())
        pair.transfer(sender)
        pair.peer(sender).send_method(channel, spec_0_9.ChannelOk())
        [ok] = pair.transfer(pair.peer(sender))
        assert isinstance(ok, MethodReceived)
        assert isinstance(ok.request, spec_0_9.ChannelPing)


def test_directions_still_hold_for_methods_passed_through() -> None:
    pair = _pair(AMQP_0_8)
    channel = pair.open_channel()
    alert = spec_0_8.ChannelAlert(reply_code=200, reply_text="", details={})
    with pytest.raises(LocalProtocolError, match=r"cannot send channel\.alert as the client"):
        pair.client.send_method(channel, alert)
    # ... and the server refuses what only a server sends (503)
    with pytest.raises(RemoteProtocolError) as info:
        feed(pair.server, method_frame(channel, alert, protocol=AMQP_0_8))
    assert info.value.reply_code == 503
    assert (info.value.class_id, info.value.method_id) == (20, 30)


def test_a_reply_of_another_version_is_refused() -> None:
    pair = _pair(AMQP_0_8)
    channel = pair.open_channel()
    with pytest.raises(LocalProtocolError):
        pair.client.send_method(channel, spec_0_9_1.BasicConsume(queue="q"))  # 0-9-1's


def test_0_8_file_transfer_stages_content_that_answers_open_ok() -> None:
    # file.open -> file.open-ok (a reply that asks for file.stage) -> file.stage with content
    pair = _pair(AMQP_0_8)
    channel = pair.open_channel()
    opened = spec_0_8.FileOpen(identifier="f", content_size=4)
    pair.client.send_method(channel, opened)
    pair.transfer(pair.client)
    open_ok = spec_0_8.FileOpenOk(staged_size=0)
    pair.server.send_method(channel, open_ok)
    [received] = pair.transfer(pair.server)
    assert isinstance(received, MethodReceived)
    assert received.request == opened
    assert pair.client.pending_requests(channel) == ()
    assert pair.server.pending_requests(channel) == (open_ok,)
    props = spec_0_8.FileProperties(filename="f.txt", headers={"k": "v"})
    pair.client.send_content(channel, spec_0_8.FileStage(), props, b"data")
    [staged] = pair.transfer(pair.client)
    assert isinstance(staged, MessageReceived)
    assert staged.properties == props
    assert staged.request == open_ok
    assert pair.server.pending_requests(channel) == ()


def test_0_8_stream_deliver_and_test_content_are_assembled() -> None:
    pair = _pair(AMQP_0_8)
    channel = pair.open_channel()
    deliver = spec_0_8.StreamDeliver(consumer_tag="c", delivery_tag=1, exchange="", queue="q")
    props = spec_0_8.StreamProperties(priority=3)
    pair.server.send_content(channel, deliver, props, b"tick")
    [message] = pair.transfer(pair.server)
    assert isinstance(message, MessageReceived)
    assert (message.method, message.properties, message.body) == (deliver, props, b"tick")
    # test.content asks for test.content-ok, both with content
    content = spec_0_8.TestContent()
    test_props = spec_0_8.TestProperties()  # the test class has no properties
    pair.client.send_content(channel, content, test_props, b"abc")
    [asked] = pair.transfer(pair.client)
    assert isinstance(asked, MessageReceived)
    ok = spec_0_8.TestContentOk(content_checksum=1)
    pair.server.send_content(channel, ok, test_props, b"")
    [answered] = pair.transfer(pair.server)
    assert isinstance(answered, MessageReceived)
    assert answered.request is content


# --- connection.redirect ----------------------------------------------------------------------


def _to_open(spec: ProtocolSpec, *, insist: bool = False) -> ConnectionPair:
    pair = ConnectionPair(ConnectionConfig(protocol=spec), ConnectionConfig(header_0_9="0-9"))
    feed(pair.server, pair.client.data_to_send())
    for _ in range(3):
        pair.transfer(pair.server)
        data = pair.client.data_to_send()
        if insist:
            frames = parse_frames(data, protocol=spec)
            for frame in frames:
                if isinstance(frame, MethodFrame) and frame.method.NAME == "connection.open":
                    frame.method.insist = True  # type: ignore[attr-defined]
            data = b"".join(
                method_frame(f.channel, f.method, protocol=spec)
                for f in frames
                if isinstance(f, MethodFrame)
            )
        for event in feed(pair.server, data):
            if isinstance(event, VirtualHostRequested):
                return pair
            if isinstance(event, AuthenticationRequested):
                pair.server.accept_authentication()
    raise AssertionError("no VirtualHostRequested")


@pytest.mark.parametrize("spec", OLDER, ids=lambda s: s.version.value)
def test_redirect_ends_the_connection_and_names_the_host(spec: ProtocolSpec) -> None:
    pair = _to_open(spec)
    pair.server.redirect("other:5673", known_hosts="a,b")
    assert pair.server.state is ConnectionState.CLOSED
    data = pair.server.data_to_send()
    assert _ids(data, spec) == [(10, 50) if spec is AMQP_0_8 else (10, 42)]
    assert feed(pair.client, data) == [ConnectionRedirected(host="other:5673", known_hosts="a,b")]
    assert pair.client.state is ConnectionState.CLOSED
    assert pair.client.data_to_send() == b""
    with pytest.raises(LocalProtocolError):
        pair.client.open_channel()


def test_redirect_is_refused_where_it_can_not_be_sent() -> None:
    pair = _to_open(AMQP_0_9_1)
    with pytest.raises(LocalProtocolError, match=r"0-9-1 has no connection\.redirect"):
        pair.server.redirect("other")
    pair.server.accept_virtual_host()  # still owed, and still possible
    assert pair.server.state is ConnectionState.OPEN
    insisting = _to_open(AMQP_0_8, insist=True)
    with pytest.raises(LocalProtocolError, match="insists"):
        insisting.server.redirect("other")
    insisting.server.refuse_virtual_host("no")
    assert insisting.server.data_to_send()


# --- every method of every version through both cores -----------------------------------------

#: A value of each wire type; bits are False, so nowait is off and every request is answered.
_SAMPLE: dict[str, object] = {
    "bit": False,
    "octet": 1,
    "short": 2,
    "long": 3,
    "longlong": 1,
    "timestamp": 5,
    "shortstr": "s",
    "longstr": b"l",
    "table": {"k": "v"},
    "content": MessageContent(data=b"c"),
}
#: Sends that need more than an open channel: the server's acks settle publishes made in
#: confirm mode (test_connection_confirms.py covers them).
_NEEDS_SETUP = {("basic.ack", Role.SERVER), ("basic.nack", Role.SERVER)}


def _build(spec: ProtocolSpec, cls: type[Method]) -> Method:
    return spec.make(cls.NAME, **{name: _SAMPLE[kind] for name, kind in cls.FIELDS})


def _send(pair: ConnectionPair, role: Role, channel: int, method: Method) -> None:
    conn = pair.client if role is Role.CLIENT else pair.server
    if not type(method).HAS_CONTENT:
        conn.send_method(channel, method)
        return
    props_cls = conn.protocol.properties[type(method).CLASS_ID]
    if method.NAME == "basic.publish":
        conn.publish(channel, method, props_cls(), b"body")
    else:
        conn.send_content(channel, method, props_cls(), b"body")


def _exchange(
    spec: ProtocolSpec, pair: ConnectionPair, sender: Role, method: Method, answer: int
) -> None:
    """*sender* sends *method* on channel 1; its peer sees it, and a request is answered (by
    the peer's core itself, or by the peer with reply number *answer*), down the chain."""
    _send(pair, sender, 1, method)
    conn = pair.client if sender is Role.CLIENT else pair.server
    events = pair.transfer(conn)
    assert len(events) == 1, events
    [event] = events
    seen = getattr(event, "method", None)
    if isinstance(event, ChannelFlowChanged | ConsumerCancelled):  # the core's own events
        assert event.channel == 1
    else:
        assert seen == method, event
    if not method.expects_reply():
        return
    peer = pair.peer(conn)
    if peer.outbound_size:  # answered by the peer's core itself (flow-ok, cancel-ok)
        [reply] = pair.transfer(peer)
        assert isinstance(reply, MethodReceived)
        assert reply.request is method
        return
    responses = type(method).RESPONSES
    reply_method = _build(spec, responses[min(answer, len(responses) - 1)])
    _exchange(spec, pair, sender.peer, reply_method, 0)


def _conversations(spec: ProtocolSpec) -> list[tuple[str, Role, int]]:
    """(meaning, sender, reply chosen) for every method that is not a reply, and every role
    that may send it."""
    replies = {reply for cls in spec.methods.values() for reply in cls.RESPONSES}
    cases = []
    for cls in spec.methods.values():
        if cls.CLASS_ID == 10 or cls.NAME in CHANNEL_LIFECYCLE or cls in replies:
            continue
        for role in sorted(cls.SENT_BY, key=lambda r: r.value):
            if (cls.NAME, role) in _NEEDS_SETUP:
                continue
            cases += [(cls.NAME, role, n) for n in range(max(1, len(cls.RESPONSES)))]
    return cases


@pytest.mark.parametrize("spec", [AMQP_0_9_1, *OLDER], ids=lambda s: s.version.value)
def test_every_method_passes_the_tables_in_both_roles(spec: ProtocolSpec) -> None:
    """Every method of every version but the connection class (the handshake tests) and the
    channel lifecycle: sent by each role that may send it, received by the other, answered with
    each reply it may get; and refused from a role that may not send it, on sending and on
    receipt."""
    checked = set()
    for meaning, sender, answer in _conversations(spec):
        pair = _pair(spec)
        pair.open_channel()
        method = _build(spec, spec.by_meaning[meaning])
        _exchange(spec, pair, sender, method, answer)
        chain = [type(method)]
        while chain:  # the replies, and their replies (file.open-ok asks for file.stage)
            cls = chain.pop()
            if cls.NAME not in checked:
                checked.add(cls.NAME)
                chain += cls.RESPONSES
    for cls in spec.methods.values():
        if cls.CLASS_ID == 10 or cls.NAME in CHANNEL_LIFECYCLE:
            continue
        for role in {Role.CLIENT, Role.SERVER} - cls.SENT_BY:
            pair = _pair(spec)
            pair.open_channel()
            method = _build(spec, cls)
            with pytest.raises(LocalProtocolError):
                _send(pair, role, 1, method)
            receiver = pair.server if role is Role.CLIENT else pair.client
            with pytest.raises(RemoteProtocolError) as info:
                feed(receiver, method_frame(1, method, protocol=spec))
            assert info.value.reply_code == 503
    wanted = {
        cls.NAME
        for cls in spec.methods.values()
        if cls.CLASS_ID != 10 and cls.NAME not in CHANNEL_LIFECYCLE
    }
    untested = wanted - checked
    assert untested <= {name for name, _ in _NEEDS_SETUP}, untested


@pytest.mark.parametrize("spec", [AMQP_0_9_1, *OLDER], ids=lambda s: s.version.value)
def test_the_handshake_and_the_closes_in_each_version(spec: ProtocolSpec) -> None:
    """The methods on the wire, by meaning and ids, with a SASL challenge and both closes."""
    pair = ConnectionPair(ConnectionConfig(protocol=spec), ConnectionConfig(header_0_9="0-9"))
    seen: list[tuple[str, tuple[int, int]]] = []

    def move(sender: Connection) -> list[Event]:
        data = sender.data_to_send()
        if not data:
            return []  # feeding b"" would end the stream
        frames = parse_frames(data, protocol=spec)
        seen.extend(
            (f.method.NAME, spec.ids(type(f.method))) for f in frames if isinstance(f, MethodFrame)
        )
        return feed(pair.peer(sender), data)

    for _ in range(6):
        for event in move(pair.client) + move(pair.server):
            if isinstance(event, AuthenticationRequested):
                if not any(name == "connection.secure" for name, _ in seen):
                    pair.server.send_secure(b"challenge?")
                else:
                    pair.server.accept_authentication()
            elif isinstance(event, SecureRequested):
                pair.client.answer_secure(b"answer")
            elif isinstance(event, VirtualHostRequested):
                pair.server.accept_virtual_host()
    move(pair.server)
    assert pair.client.state is pair.server.state is ConnectionState.OPEN
    channel = pair.open_channel()
    pair.server.close_channel(channel, 406, "PRECONDITION_FAILED")
    move(pair.server)
    move(pair.client)
    pair.client.close()
    move(pair.client)
    move(pair.server)
    close = (10, 60) if spec is AMQP_0_8 else (10, 50)
    assert [name for name, _ in seen] == [
        "connection.start",
        "connection.start-ok",
        "connection.secure",
        "connection.secure-ok",
        "connection.tune",
        "connection.tune-ok",
        "connection.open",
        "connection.open-ok",
        "channel.close",
        "channel.close-ok",
        "connection.close",
        "connection.close-ok",
    ]
    assert dict(seen)["connection.close"] == close
    assert dict(seen)["connection.close-ok"] == (close[0], close[1] + 1)


# --- adapt: code written against 0-9-1's classes speaking another version ------------------


def test_adapt_builds_the_version_s_class_of_the_same_meaning() -> None:
    consume = spec_0_9_1.BasicConsume(queue="q", consumer_tag="c", no_ack=True)
    assert AMQP_0_9_1.adapt(consume) is consume  # its own class: itself, no copy
    shared = spec_0_9_1.QueueDeclare(queue="q")
    assert AMQP_0_8.adapt(shared) is shared
    as_0_8 = AMQP_0_8.adapt(consume)
    assert type(as_0_8) is spec_0_8.BasicConsume
    assert (as_0_8.queue, as_0_8.consumer_tag, as_0_8.no_ack) == ("q", "c", True)
    # 0-9 calls the arguments table filter; back in 0-9-1 it is arguments again
    with_args = spec_0_9_1.BasicConsume(queue="q", arguments={"x-priority": 5})
    as_0_9 = AMQP_0_9.adapt(with_args)
    assert type(as_0_9) is spec_0_9.BasicConsume
    assert as_0_9.filter == {"x-priority": 5}
    assert AMQP_0_9_1.adapt(as_0_9) == with_args
    ack = AMQP_0_8.adapt(spec_0_9_1.BasicAck(delivery_tag=3, multiple=True))
    assert (type(ack), ack.delivery_tag, ack.multiple) == (spec_0_8.BasicAck, 3, True)  # type: ignore[attr-defined]


def test_adapt_refuses_what_the_version_can_not_say() -> None:
    with pytest.raises(LocalProtocolError, match=r"AMQP 0-8 has no method confirm\.select") as info:
        AMQP_0_8.adapt(spec_0_9_1.ConfirmSelect())
    assert (info.value.reply_code, info.value.class_id, info.value.method_id) == (540, 85, 10)
    consume = spec_0_9_1.BasicConsume(queue="q", arguments={"x-priority": 5})
    with pytest.raises(
        LocalProtocolError,
        match=r"basic.consume arguments=\{'x-priority': 5\}: AMQP 0-8's basic.consume has no",
    ):
        AMQP_0_8.adapt(consume)


def test_a_relay_sends_properties_as_they_came() -> None:
    """A broker passing on another client's message (``send_content(relay=True)``) sends its
    headers as they are; without relay the server narrows them like any table it sends."""
    pair = _pair(AMQP_0_8)
    channel = pair.open_channel()
    consume = spec_0_8.BasicConsume(queue="q", consumer_tag="c")
    pair.client.send_method(channel, consume)
    feed(pair.server, pair.client.data_to_send())
    pair.server.send_method(channel, spec_0_9_1.BasicConsumeOk(consumer_tag="c"))
    feed(pair.client, pair.server.data_to_send())
    props = spec_0_9_1.BasicProperties(headers={"flag": True, "ratio": 1.5})
    deliver = spec_0_9_1.BasicDeliver(
        consumer_tag="c", delivery_tag=1, exchange="", routing_key="q"
    )
    with pytest.raises(LocalProtocolError, match=r"headers\['flag'\]: a bool"):
        pair.server.send_content(channel, deliver, props, b"x")
    pair.server.send_content(channel, deliver, props, b"x", relay=True)
    [message] = feed(pair.client, pair.server.data_to_send())
    assert isinstance(message, MessageReceived)
    assert message.properties.headers == {"flag": True, "ratio": 1.5}  # type: ignore[attr-defined]


def test_qpid_s_0_8_basic_consume_with_an_empty_arguments_table_is_read() -> None:
    # qpid-python's 0-8 spec adds 0-9-1's arguments table to basic.consume (RabbitMQ refuses it)
    pair = _pair(AMQP_0_8)
    channel = pair.open_channel()
    qpid_style = method_frame(channel, spec_0_9_1.BasicConsume(queue="q", consumer_tag="c"))
    [received] = feed(pair.server, qpid_style)
    assert isinstance(received, MethodReceived)
    assert received.method == spec_0_8.BasicConsume(queue="q", consumer_tag="c")
    with_arguments = spec_0_9_1.BasicConsume(queue="q2", arguments={"x-priority": 1})
    with pytest.raises(RemoteProtocolError, match=r"AMQP 0-8's basic\.consume has no arguments"):
        feed(pair.server, method_frame(channel, with_arguments))


def test_a_server_switches_a_0_8_client_to_qpid_s_dialect_at_its_login() -> None:
    """AMQP_0_8_QPID: qpid-python's 0-8, whose basic.recover (60, 100) is answered by a
    recover-ok (60, 101). The server chooses it while the login waits (from the client's
    properties), and only then."""
    pair = ConnectionPair(ConnectionConfig(protocol=AMQP_0_8_QPID))
    pair.transfer(pair.client)
    pair.transfer(pair.server)
    [auth] = pair.transfer(pair.client)
    assert isinstance(auth, AuthenticationRequested)
    assert pair.server.protocol is AMQP_0_8  # from the header: RabbitMQ's reading
    with pytest.raises(LocalProtocolError, match="speaks AMQP 0-8, not 0-9"):
        pair.server.use_dialect(AMQP_0_9)
    pair.server.use_dialect(AMQP_0_8_QPID)
    pair.server.accept_authentication()
    pair.transfer(pair.server)
    [vhost] = pair.transfer(pair.client)
    assert isinstance(vhost, VirtualHostRequested)
    pair.server.accept_virtual_host()
    pair.transfer(pair.server)
    with pytest.raises(LocalProtocolError, match="while a login waits"):
        pair.server.use_dialect(AMQP_0_8)
    with pytest.raises(LocalProtocolError, match="while a login waits"):
        pair.client.use_dialect(AMQP_0_8_QPID)
    channel = pair.open_channel()
    pair.client.send_method(channel, spec_0_9_1.BasicRecover(requeue=True))
    data = pair.client.data_to_send()
    assert data[7:11] == b"\x00\x3c\x00\x64"  # (60, 100)
    [recover] = feed(pair.server, data)
    assert isinstance(recover, MethodReceived)
    pair.server.send_method(channel, spec_0_9_1.BasicRecoverOk())
    data = pair.server.data_to_send()
    assert data[7:11] == b"\x00\x3c\x00\x65"  # (60, 101)
    [ok] = feed(pair.client, data)
    assert isinstance(ok, MethodReceived)
    assert ok.request == recover.method
    assert AMQP_0_8_QPID.has_reply("basic.recover")
    assert "basic.recover-async" not in AMQP_0_8_QPID.by_meaning
