"""Every method class through a ConnectionPair, fed whole and one byte at a time: the events on
the receiving side, the request each reply names, nowait variants, server-sent methods, and the
server role's answers to a misbehaving client."""

from __future__ import annotations

import struct

import pytest

from amqp_sansio import (
    NEED_DATA,
    AccessRequest,
    AccessRequestOk,
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
    BasicRecoverAsync,
    BasicRecoverOk,
    BasicReject,
    BasicReturn,
    BlockedByPeer,
    ChannelClose,
    ChannelFlow,
    ChannelFlowChanged,
    ChannelFlowOk,
    ChannelOpen,
    ChannelOpened,
    ConfirmSelect,
    ConfirmSelectOk,
    Connection,
    ConnectionBlocked,
    ConnectionClose,
    ConnectionConfig,
    ConnectionOpened,
    ConnectionStartOk,
    ConnectionState,
    ConnectionUnblocked,
    ConnectionUpdateSecret,
    ConnectionUpdateSecretOk,
    ConsumerCancelled,
    ExchangeBind,
    ExchangeBindOk,
    ExchangeDeclare,
    ExchangeDeclareOk,
    ExchangeDelete,
    ExchangeDeleteOk,
    ExchangeUnbind,
    ExchangeUnbindOk,
    LocalProtocolError,
    MessageBodyReceived,
    MessageCompleted,
    MessageReceived,
    MessageStarted,
    Method,
    MethodReceived,
    PublishReturned,
    QueueBind,
    QueueBindOk,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
    QueuePurge,
    QueuePurgeOk,
    QueueUnbind,
    QueueUnbindOk,
    RemoteProtocolError,
    Role,
    TxCommit,
    TxCommitOk,
    TxRollback,
    TxRollbackOk,
    TxSelect,
    TxSelectOk,
    UnblockedByPeer,
)
from amqp_sansio.framing import PROTOCOL_HEADER_0_9_1, MethodFrame
from amqp_sansio.testing import ConnectionPair, content_frames, feed, method_frame, parse_frames

BYTEWISE = pytest.mark.parametrize("byte_at_a_time", [False, True], ids=["whole", "bytewise"])
PROPS = BasicProperties(content_type="application/json", delivery_mode=2)


def _open(byte_at_a_time: bool) -> tuple[ConnectionPair, int]:
    pair = ConnectionPair(byte_at_a_time=byte_at_a_time)
    pair.handshake()
    ch = pair.client.open_channel()
    pair.transfer(pair.client)
    pair.transfer(pair.server)
    return pair, ch


# (request the client sends, the server's reply) for every synchronous client request.
SYNC: list[tuple[Method, Method]] = [
    (AccessRequest(realm="/data", active=True, read=True), AccessRequestOk(ticket=1)),
    (ExchangeDeclare(exchange="x", type="topic", durable=True), ExchangeDeclareOk()),
    (ExchangeDelete(exchange="x", if_unused=True), ExchangeDeleteOk()),
    (ExchangeBind(destination="d", source="s", routing_key="r.#"), ExchangeBindOk()),
    (ExchangeUnbind(destination="d", source="s", routing_key="r.#"), ExchangeUnbindOk()),
    (
        QueueDeclare(queue="q", arguments={"x-max-length": 10}),
        QueueDeclareOk(queue="q", message_count=4, consumer_count=1),
    ),
    (QueueBind(queue="q", exchange="x", routing_key="k"), QueueBindOk()),
    (QueueUnbind(queue="q", exchange="x", routing_key="k"), QueueUnbindOk()),
    (QueuePurge(queue="q"), QueuePurgeOk(message_count=4)),
    (QueueDelete(queue="q", if_empty=True), QueueDeleteOk(message_count=0)),
    (BasicQos(prefetch_count=50), BasicQosOk()),
    (BasicConsume(queue="q", no_ack=True), BasicConsumeOk(consumer_tag="amq.ctag-1")),
    (BasicCancel(consumer_tag="amq.ctag-1"), BasicCancelOk(consumer_tag="amq.ctag-1")),
    (BasicRecover(requeue=True), BasicRecoverOk()),
    (BasicGet(queue="q"), BasicGetEmpty()),
    (ConfirmSelect(), ConfirmSelectOk()),
    (TxSelect(), TxSelectOk()),
    (TxCommit(), TxCommitOk()),
    (TxRollback(), TxRollbackOk()),
]


@pytest.mark.parametrize(("request_", "reply"), SYNC, ids=[r.NAME for r, _ in SYNC])
@BYTEWISE
def test_request_and_reply(request_: Method, reply: Method, byte_at_a_time: bool) -> None:
    pair, ch = _open(byte_at_a_time)
    pair.client.send_method(ch, request_)
    assert pair.client.pending_requests(ch) == (request_,)
    assert pair.transfer(pair.client) == [MethodReceived(channel=ch, method=request_, request=None)]
    pair.server.send_method(ch, reply)
    with pytest.raises(LocalProtocolError):  # the only request was answered
        pair.server.send_method(ch, reply)
    assert pair.transfer(pair.server) == [
        MethodReceived(channel=ch, method=reply, request=request_)
    ]
    assert pair.client.pending_requests(ch) == ()


NOWAIT: list[tuple[Method, Method]] = [
    (ExchangeDeclare(exchange="x", nowait=True), ExchangeDeclareOk()),
    (ExchangeDelete(exchange="x", nowait=True), ExchangeDeleteOk()),
    (ExchangeBind(destination="d", source="s", nowait=True), ExchangeBindOk()),
    (ExchangeUnbind(destination="d", source="s", nowait=True), ExchangeUnbindOk()),
    (
        QueueDeclare(queue="q", nowait=True),
        QueueDeclareOk(queue="q", message_count=0, consumer_count=0),
    ),
    (QueueBind(queue="q", exchange="x", nowait=True), QueueBindOk()),
    (QueuePurge(queue="q", nowait=True), QueuePurgeOk(message_count=0)),
    (QueueDelete(queue="q", nowait=True), QueueDeleteOk(message_count=0)),
    (BasicConsume(queue="q", consumer_tag="c", nowait=True), BasicConsumeOk(consumer_tag="c")),
    (BasicCancel(consumer_tag="c", nowait=True), BasicCancelOk(consumer_tag="c")),
    (ConfirmSelect(nowait=True), ConfirmSelectOk()),
]


@pytest.mark.parametrize(("request_", "reply"), NOWAIT, ids=[r.NAME for r, _ in NOWAIT])
@BYTEWISE
def test_nowait_expects_no_reply(request_: Method, reply: Method, byte_at_a_time: bool) -> None:
    pair, ch = _open(byte_at_a_time)
    pair.client.send_method(ch, request_)
    assert pair.client.pending_requests(ch) == ()
    assert pair.transfer(pair.client) == [MethodReceived(channel=ch, method=request_, request=None)]
    with pytest.raises(LocalProtocolError):
        pair.server.send_method(ch, reply)
    assert pair.server.data_to_send() == b""
    # A reply the client did not ask for is a 503 from the server.
    with pytest.raises(RemoteProtocolError) as info:
        feed(pair.client, method_frame(ch, reply), byte_at_a_time=byte_at_a_time)
    assert (info.value.reply_code, info.value.class_id, info.value.method_id) == (
        503,
        reply.CLASS_ID,
        reply.METHOD_ID,
    )


ASYNC: list[Method] = [
    BasicAck(delivery_tag=7, multiple=True),
    BasicReject(delivery_tag=8, requeue=False),
    BasicNack(delivery_tag=9, multiple=False, requeue=True),
    BasicRecoverAsync(requeue=True),
]


@pytest.mark.parametrize("method", ASYNC, ids=[m.NAME for m in ASYNC])
@BYTEWISE
def test_client_methods_without_reply(method: Method, byte_at_a_time: bool) -> None:
    pair, ch = _open(byte_at_a_time)
    pair.client.send_method(ch, method)
    assert pair.client.pending_requests(ch) == ()
    assert pair.transfer(pair.client) == [MethodReceived(channel=ch, method=method, request=None)]
    assert pair.server.data_to_send() == b""


@BYTEWISE
def test_get_ok_carries_the_message_and_names_the_get(byte_at_a_time: bool) -> None:
    pair, ch = _open(byte_at_a_time)
    get = BasicGet(queue="q", no_ack=False)
    pair.client.send_method(ch, get)
    pair.client.send_method(ch, get)
    pair.transfer(pair.client)
    get_ok = BasicGetOk(
        delivery_tag=1, redelivered=True, exchange="x", routing_key="k", message_count=3
    )
    pair.server.send_content(ch, get_ok, PROPS, b'{"n": 1}')
    pair.server.send_method(ch, BasicGetEmpty())
    assert pair.transfer(pair.server) == [
        MessageReceived(channel=ch, method=get_ok, properties=PROPS, body=b'{"n": 1}'),
        MethodReceived(channel=ch, method=BasicGetEmpty(), request=get),
    ]
    assert pair.client.pending_requests(ch) == ()


@BYTEWISE
def test_publish_deliver_and_return(byte_at_a_time: bool) -> None:
    pair, ch = _open(byte_at_a_time)
    publish = BasicPublish(exchange="x", routing_key="k", mandatory=True)
    assert pair.client.publish(ch, publish, PROPS, b"hello") is None
    assert pair.transfer(pair.client) == [
        MessageReceived(channel=ch, method=publish, properties=PROPS, body=b"hello")
    ]
    deliver = BasicDeliver(
        consumer_tag="c", delivery_tag=1, redelivered=False, exchange="x", routing_key="k"
    )
    returned = BasicReturn(reply_code=312, reply_text="NO_ROUTE", exchange="x", routing_key="k")
    pair.server.send_content(ch, deliver, PROPS, b"hello")
    pair.server.send_content(ch, returned, PROPS, b"")
    assert pair.transfer(pair.server) == [
        MessageReceived(channel=ch, method=deliver, properties=PROPS, body=b"hello"),
        PublishReturned(
            channel=ch, publish_number=None, method=returned, properties=PROPS, body=b""
        ),
    ]


@pytest.mark.parametrize("nowait", [False, True])
@BYTEWISE
def test_server_cancels_a_consumer(nowait: bool, byte_at_a_time: bool) -> None:
    pair, ch = _open(byte_at_a_time)
    cancel = BasicCancel(consumer_tag="amq.ctag-1", nowait=nowait)
    pair.server.send_method(ch, cancel)
    assert pair.server.pending_requests(ch) == (() if nowait else (cancel,))
    assert pair.transfer(pair.server) == [ConsumerCancelled(channel=ch, consumer_tag="amq.ctag-1")]
    if nowait:
        assert pair.client.data_to_send() == b""  # no cancel-ok
    else:
        ok = BasicCancelOk(consumer_tag="amq.ctag-1")
        assert pair.transfer(pair.client) == [MethodReceived(channel=ch, method=ok, request=cancel)]
    assert pair.server.pending_requests(ch) == ()


@pytest.mark.parametrize("sender", ["client", "server"])
@BYTEWISE
def test_channel_flow_from_either_side(sender: str, byte_at_a_time: bool) -> None:
    pair, ch = _open(byte_at_a_time)
    conn = pair.client if sender == "client" else pair.server
    flow = ChannelFlow(active=False)
    conn.send_method(ch, flow)
    assert pair.transfer(conn) == [ChannelFlowChanged(channel=ch, active=False)]
    assert pair.transfer(pair.peer(conn)) == [
        MethodReceived(channel=ch, method=ChannelFlowOk(active=False), request=flow)
    ]
    assert conn.pending_requests(ch) == ()


@BYTEWISE
def test_flow_ok_waits_for_the_replies_the_server_owes(byte_at_a_time: bool) -> None:
    pair, ch = _open(byte_at_a_time)
    declare = QueueDeclare(queue="q")
    purge = QueuePurge(queue="q")
    flow = ChannelFlow(active=False)
    for request in (declare, purge, flow):
        pair.client.send_method(ch, request)
    assert pair.transfer(pair.client) == [
        MethodReceived(channel=ch, method=declare, request=None),
        MethodReceived(channel=ch, method=purge, request=None),
        ChannelFlowChanged(channel=ch, active=False),
    ]
    assert pair.server.data_to_send() == b""  # flow-ok may not overtake declare-ok
    pair.server.send_method(ch, QueueDeclareOk(queue="q", message_count=0, consumer_count=0))
    pair.server.send_method(ch, QueuePurgeOk(message_count=0))
    assert [e.request for e in pair.transfer(pair.server)] == [declare, purge, flow]  # type: ignore[union-attr]


@BYTEWISE
def test_blocked_and_unblocked(byte_at_a_time: bool) -> None:
    pair, _ = _open(byte_at_a_time)
    pair.server.send_method(0, ConnectionBlocked(reason="low on memory"))
    pair.server.send_method(0, ConnectionUnblocked())
    assert pair.transfer(pair.server) == [
        BlockedByPeer(reason="low on memory"),
        UnblockedByPeer(),
    ]


@BYTEWISE
def test_update_secret(byte_at_a_time: bool) -> None:
    pair, _ = _open(byte_at_a_time)
    pair.client.update_secret(b"s3cret-token", "token refresh")
    request = ConnectionUpdateSecret(new_secret=b"s3cret-token", reason="token refresh")
    assert pair.client.pending_requests(0) == (request,)
    [received] = pair.transfer(pair.client)
    assert received == MethodReceived(channel=0, method=request, request=None)
    assert "s3cret" not in repr(received)
    with pytest.raises(LocalProtocolError):  # only the client updates its secret
        pair.server.update_secret(b"x", "no")
    pair.server.send_method(0, ConnectionUpdateSecretOk())
    [answer] = pair.transfer(pair.server)
    assert answer == MethodReceived(channel=0, method=ConnectionUpdateSecretOk(), request=request)
    assert "s3cret" not in repr(answer)
    assert pair.client.pending_requests(0) == ()


def test_update_secret_needs_an_open_connection() -> None:
    client = Connection(Role.CLIENT)
    with pytest.raises(LocalProtocolError):
        client.update_secret(b"token", "too early")
    assert client.data_to_send()  # the protocol header only
    assert client.data_to_send() == b""


@BYTEWISE
def test_pipelined_requests_of_every_class_are_answered_in_order(byte_at_a_time: bool) -> None:
    pair, ch = _open(byte_at_a_time)
    for request, _ in SYNC:
        pair.client.send_method(ch, request)
    assert len(pair.transfer(pair.client)) == len(SYNC)
    for _, reply in SYNC:
        pair.server.send_method(ch, reply)
    events = pair.transfer(pair.server)
    assert events == [
        MethodReceived(channel=ch, method=reply, request=request) for request, reply in SYNC
    ]


# --- The server role against a misbehaving client ----------------------------------------------


def _header(channel: int, body_size: int) -> bytes:
    payload = struct.pack(">HHQH", 60, 0, body_size, 0)
    return struct.pack(">BHI", 2, channel, len(payload)) + payload + b"\xce"


def _body(channel: int, data: bytes) -> bytes:
    return struct.pack(">BHI", 3, channel, len(data)) + data + b"\xce"


_PUBLISH = method_frame(1, BasicPublish(exchange="", routing_key="q"))
_CLOSE = ChannelClose(reply_code=200, reply_text="", class_id=0, method_id=0)
_DELIVER = BasicDeliver(
    consumer_tag="c", delivery_tag=1, redelivered=False, exchange="", routing_key="q"
)


@pytest.mark.parametrize(
    ("data", "code"),
    [
        pytest.param(method_frame(7, QueueDeclare(queue="q")), 504, id="unopened-channel"),
        pytest.param(method_frame(1, ChannelOpen()), 504, id="second-open"),
        pytest.param(_header(1, 3), 505, id="header-without-method"),
        pytest.param(_header(0, 3), 505, id="header-on-channel-0"),
        pytest.param(_body(0, b"abc"), 505, id="body-on-channel-0"),
        pytest.param(method_frame(0, BasicPublish()), 503, id="publish-on-channel-0"),
        pytest.param(_PUBLISH + _body(1, b"abc"), 505, id="body-before-header"),
        pytest.param(_PUBLISH + _header(1, 5) + _header(1, 5), 505, id="second-header"),
        pytest.param(_PUBLISH + _header(1, 2) + _body(1, b"abc"), 501, id="body-too-long"),
        pytest.param(
            _PUBLISH + _header(1, 5) + method_frame(1, _CLOSE), 505, id="close-in-content"
        ),
        pytest.param(_PUBLISH + _header(1, 2**63), 506, id="body-size-2**63"),
        pytest.param(b"\x08\x00\x01\x00\x00\x00\x00\xce", 505, id="heartbeat-on-channel-1"),
        pytest.param(method_frame(1, _DELIVER), 503, id="server-only-method"),
        pytest.param(method_frame(1, BasicCancelOk(consumer_tag="c")), 503, id="reply-to-nothing"),
    ],
)
@BYTEWISE
def test_server_answers_client_misbehaviour(data: bytes, code: int, byte_at_a_time: bool) -> None:
    pair, _ = _open(byte_at_a_time)
    server = pair.server
    with pytest.raises(RemoteProtocolError) as info:
        feed(server, data, byte_at_a_time=byte_at_a_time)
    err = info.value
    assert err.reply_code == code
    close = ConnectionClose(
        reply_code=code,
        reply_text=err.reply_text[:255],
        class_id=err.class_id,
        method_id=err.method_id,
    )
    assert server.data_to_send() == method_frame(0, close)
    assert server.state is ConnectionState.ERROR
    with pytest.raises(RemoteProtocolError):
        server.next_event()
    with pytest.raises(LocalProtocolError):
        server.send_method(1, QueueDeclareOk(queue="q", message_count=0, consumer_count=0))
    # The client hears the close and answers it.
    events = feed(pair.client, method_frame(0, close))
    assert [type(e).__name__ for e in events] == ["ConnectionClosed"]


@BYTEWISE
def test_body_on_channel_0_to_the_client(byte_at_a_time: bool) -> None:
    pair, _ = _open(byte_at_a_time)
    with pytest.raises(RemoteProtocolError) as info:
        feed(pair.client, _body(0, b"x"), byte_at_a_time=byte_at_a_time)
    assert info.value.reply_code == 505


def test_content_split_at_frame_max_reassembles_on_the_server() -> None:
    pair, ch = _open(True)
    body = bytes(range(256)) * 40
    data = content_frames(ch, BasicPublish(routing_key="q"), PROPS, body, frame_max=4096)
    [message] = feed(pair.server, data, byte_at_a_time=True)
    assert isinstance(message, MessageReceived)
    assert message.body == body


# --- Edges of the state machines -------------------------------------------------------------


@BYTEWISE
def test_crossed_closes(byte_at_a_time: bool) -> None:
    pair, ch = _open(byte_at_a_time)
    pair.client.close_channel(ch, 200, "client")
    pair.server.close_channel(ch, 406, "server")
    client_sent = pair.client.data_to_send()
    server_sent = pair.server.data_to_send()
    # Each side answers the other's close and reports the channel closed on the close-ok.
    assert feed(pair.server, client_sent, byte_at_a_time=byte_at_a_time) == []
    assert feed(pair.client, server_sent, byte_at_a_time=byte_at_a_time) == []
    [client_closed] = pair.transfer(pair.server)
    [server_closed] = pair.transfer(pair.client)
    assert (client_closed.reply_code, server_closed.reply_code) == (200, 406)  # type: ignore[union-attr]
    pair.client.close(200, "bye")
    pair.server.close(320, "forced")
    client_sent = pair.client.data_to_send()
    assert feed(pair.client, pair.server.data_to_send(), byte_at_a_time=byte_at_a_time) == []
    assert feed(pair.server, client_sent, byte_at_a_time=byte_at_a_time) == []
    [client_end] = pair.transfer(pair.server)
    [server_end] = pair.transfer(pair.client)
    assert type(client_end).__name__ == type(server_end).__name__ == "ConnectionClosed"
    assert pair.client.state is pair.server.state is ConnectionState.CLOSED


def test_frames_crossing_our_connection_close_are_discarded() -> None:
    pair, ch = _open(False)
    pair.client.close()
    pair.server.send_method(0, ConnectionBlocked(reason="late"))
    pair.server.send_content(ch, _DELIVER, PROPS, b"late")
    late = pair.server.data_to_send()
    pair.transfer(pair.client)  # the server answers our close
    assert feed(pair.client, late) == []
    [closed] = pair.transfer(pair.server)
    assert type(closed).__name__ == "ConnectionClosed"


def test_server_counts_publishes_once_per_channel_in_confirm_mode() -> None:
    pair, ch = _open(False)
    pair.client.send_method(ch, ConfirmSelect(nowait=True))
    pair.client.send_method(ch, ConfirmSelect(nowait=True))  # a second select changes nothing
    for _ in range(3):
        pair.client.publish(ch, BasicPublish(), PROPS, b"")
    pair.transfer(pair.client)
    with pytest.raises(LocalProtocolError):
        pair.server.send_method(ch, BasicAck(delivery_tag=4))
    pair.server.send_method(ch, BasicAck(delivery_tag=3, multiple=True))
    [confirmed] = pair.transfer(pair.server)
    assert confirmed.publish_numbers == (1, 2, 3)  # type: ignore[union-attr]


def test_content_and_method_calls_are_not_interchangeable() -> None:
    pair, ch = _open(False)
    with pytest.raises(LocalProtocolError):
        pair.client.send_method(ch, BasicPublish())
    with pytest.raises(LocalProtocolError):
        pair.client.publish(ch, QueueDeclare(queue="q"), PROPS, b"")
    with pytest.raises(LocalProtocolError):
        pair.client.send_method(70_000, QueueDeclare(queue="q"))
    assert pair.client.data_to_send() == b""


def test_large_publish_after_small_output_keeps_the_order() -> None:
    pair, ch = _open(False)
    pair.client.send_method(ch, QueueDeclare(queue="q", nowait=True))
    body = b"b" * 70_000
    pair.client.publish(ch, BasicPublish(routing_key="q"), PROPS, body)
    data = b"".join(bytes(b) for b in pair.client.buffers_to_send())
    [declared, published] = feed(pair.server, data)
    assert isinstance(declared, MethodReceived)
    assert isinstance(published, MessageReceived)
    assert published.body == body


def test_sending_before_open_is_refused() -> None:
    client = Connection(Role.CLIENT)
    with pytest.raises(LocalProtocolError) as info:
        client.send_method(1, QueueDeclare(queue="q"))
    assert info.value.reply_code == 503


def test_long_reply_text_is_cut_at_255_octets() -> None:
    pair, ch = _open(False)
    pair.client.close_channel(ch, 200, "é" * 200)  # 400 octets of UTF-8
    [closed] = pair.transfer(pair.client)
    assert closed.reply_text == "é" * 127  # type: ignore[union-attr]


def test_send_failed_makes_the_connection_unusable() -> None:
    pair, ch = _open(False)
    pair.client.send_failed()
    assert pair.client.state is ConnectionState.ERROR
    with pytest.raises(LocalProtocolError):
        pair.client.send_method(ch, QueueDeclare(queue="q"))


def test_channel_numbers_above_channel_max_open_but_not_more_channels_than_it() -> None:
    # RabbitMQ 3.10 opens channel 65535 under channel_max 2047: it counts open channels.
    pair = ConnectionPair(server_config=ConnectionConfig(channel_max=2))
    pair.handshake()
    assert feed(pair.server, method_frame(3, ChannelOpen())) == [ChannelOpened(channel=3)]
    assert feed(pair.server, method_frame(65535, ChannelOpen())) == [ChannelOpened(channel=65535)]
    with pytest.raises(RemoteProtocolError) as info:
        feed(pair.server, method_frame(1, ChannelOpen()))
    assert info.value.reply_code == 530
    assert info.value.reply_text == (
        "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)"
    )
    assert (info.value.class_id, info.value.method_id) == (0, 0)


def test_server_answers_on_a_channel_above_channel_max() -> None:
    pair = ConnectionPair(server_config=ConnectionConfig(channel_max=2))
    pair.handshake()
    feed(pair.server, method_frame(65535, ChannelOpen()))
    feed(pair.server, method_frame(65535, QueueDeclare(queue="q")))
    pair.server.data_to_send()
    pair.server.send_method(65535, QueueDeclareOk(queue="q", message_count=0, consumer_count=0))
    [frame] = parse_frames(pair.server.data_to_send())
    assert isinstance(frame, MethodFrame)
    assert frame.channel == 65535
    with pytest.raises(LocalProtocolError):
        pair.client.send_method(3, ChannelOpen())  # the client role keeps to channel_max


def test_server_refuses_an_unoffered_mechanism() -> None:
    pair = ConnectionPair()
    feed(pair.server, PROTOCOL_HEADER_0_9_1)
    start_ok = ConnectionStartOk(client_properties={}, mechanism="EXTERNAL", response=b"")
    with pytest.raises(RemoteProtocolError) as info:
        feed(pair.server, method_frame(0, start_ok))
    assert info.value.reply_code == 503


def test_server_properties_and_config_limits() -> None:
    pair = ConnectionPair(server_config=ConnectionConfig(server_properties={"product": "test"}))
    [opened], _ = pair.handshake()
    assert isinstance(opened, ConnectionOpened)
    # merged over ours, as client_properties are
    assert opened.server_properties["product"] == "test"
    capabilities = opened.server_properties["capabilities"]
    assert isinstance(capabilities, dict)
    assert capabilities["publisher_confirms"] is True
    with pytest.raises(ValueError, match="channel_max"):
        ConnectionConfig(channel_max=-1)
    with pytest.raises(ValueError, match="frame_max"):
        ConnectionConfig(frame_max=100)


@pytest.mark.parametrize("size", [100_000, 300_000])
def test_a_body_grows_with_what_arrives_then_is_allocated_whole(size: int) -> None:
    pair = ConnectionPair(server_config=ConnectionConfig(frame_max=4096))
    pair.handshake()
    ch = pair.client.open_channel()
    pair.transfer(pair.client)
    pair.transfer(pair.server)
    body = bytes(range(256)) * (size // 256) + b"end"
    deliver = _DELIVER
    pair.server.send_content(ch, deliver, PROPS, body)
    [message] = pair.transfer(pair.server)
    assert isinstance(message, MessageReceived)
    assert message.body == body
    assert isinstance(message.body, bytearray)


def test_a_get_stays_outstanding_until_its_message_is_whole_and_the_message_names_it() -> None:
    pair, ch = _open(False)
    first, second = BasicGet(queue="q"), BasicGet(queue="q")
    pair.client.send_method(ch, first)
    pair.client.send_method(ch, second)
    pair.transfer(pair.client)
    get_ok = BasicGetOk(delivery_tag=1, exchange="", routing_key="q", message_count=0)
    pair.server.send_content(ch, get_ok, PROPS, b"body")
    data = pair.server.data_to_send()
    pair.client.receive_data(data[:-1])  # all but the body frame's end octet
    assert pair.client.next_event() is NEED_DATA
    assert pair.client.pending_requests(ch) == (first, second)
    pair.client.receive_data(data[-1:])
    message = pair.client.next_event()
    assert isinstance(message, MessageReceived)
    assert message.request is first
    assert pair.client.pending_requests(ch) == (second,)


def test_a_chunked_get_ok_names_its_get_and_answers_it_when_complete() -> None:
    pair = ConnectionPair(client_config=ConnectionConfig(chunk_threshold=2))
    pair.handshake()
    ch = pair.client.open_channel()
    pair.transfer(pair.client)
    pair.transfer(pair.server)
    get = BasicGet(queue="q")
    pair.client.send_method(ch, get)
    pair.transfer(pair.client)
    get_ok = BasicGetOk(delivery_tag=1, exchange="", routing_key="q", message_count=0)
    pair.server.send_content(ch, get_ok, PROPS, b"body")
    events = pair.transfer(pair.server)
    assert [type(e) for e in events] == [MessageStarted, MessageBodyReceived, MessageCompleted]
    started = events[0]
    assert isinstance(started, MessageStarted)
    assert started.request is get
    assert pair.client.pending_requests(ch) == ()


@pytest.mark.parametrize("size", [0, 10, 70_000])
def test_outbound_size_is_what_data_to_send_hands_out(size: int) -> None:
    pair, ch = _open(False)
    assert pair.client.outbound_size == 0
    pair.client.publish(ch, BasicPublish(exchange="", routing_key="q"), PROPS, b"x" * size)
    pair.client.send_method(ch, BasicQos(prefetch_count=1))
    expected = pair.client.outbound_size
    assert expected > size
    assert len(pair.client.data_to_send()) == expected
    assert pair.client.outbound_size == 0
