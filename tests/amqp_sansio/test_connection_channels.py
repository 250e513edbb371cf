"""Channels, synchronous requests and content through a ConnectionPair, whole and bytewise."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from amqp_sansio import (
    BasicDeliver,
    BasicGet,
    BasicGetOk,
    BasicProperties,
    BasicPublish,
    ChannelClosed,
    ChannelFlow,
    ChannelFlowChanged,
    ChannelOpened,
    ChannelState,
    ConnectionClosed,
    ConnectionConfig,
    ConnectionLost,
    ExchangeDeclare,
    ExchangeDeclareOk,
    LocalProtocolError,
    MessageBodyReceived,
    MessageCompleted,
    MessageReceived,
    MessageStarted,
    MethodReceived,
    QueueDeclare,
    QueueDeclareOk,
)
from amqp_sansio.testing import ConnectionPair

if TYPE_CHECKING:
    from collections.abc import Callable

BYTEWISE = pytest.mark.parametrize("byte_at_a_time", [False, True], ids=["whole", "bytewise"])


def _open(
    byte_at_a_time: bool, *, channel_max: int | None = None, frame_max: int | None = None
) -> tuple[ConnectionPair, int]:
    pair = ConnectionPair(
        server_config=ConnectionConfig(channel_max=channel_max, frame_max=frame_max),
        byte_at_a_time=byte_at_a_time,
    )
    pair.handshake()
    channel = pair.client.open_channel()
    assert pair.transfer(pair.client) == [ChannelOpened(channel=channel)]
    assert pair.transfer(pair.server) == [ChannelOpened(channel=channel)]
    return pair, channel


@BYTEWISE
def test_channel_ids_are_allocated_lowest_first_and_reused(byte_at_a_time: bool) -> None:
    pair, first = _open(byte_at_a_time)
    second = pair.client.open_channel()
    assert (first, second) == (1, 2)
    pair.client.close_channel(first)
    assert pair.transfer(pair.client) == [
        ChannelOpened(channel=2),
        ChannelClosed(
            channel=1, reply_code=200, reply_text="", class_id=0, method_id=0, by_peer=True
        ),
    ]
    [opened, closed] = pair.transfer(pair.server)
    assert isinstance(closed, ChannelClosed)
    assert not closed.by_peer
    assert opened == ChannelOpened(channel=2)
    assert pair.client.open_channel() == 1


@BYTEWISE
def test_server_closes_channel_with_404(byte_at_a_time: bool) -> None:
    pair, channel = _open(byte_at_a_time)
    pair.server.close_channel(channel, 404, "NOT_FOUND - no queue")
    [closed] = pair.transfer(pair.server)
    assert closed == ChannelClosed(
        channel=channel,
        reply_code=404,
        reply_text="NOT_FOUND - no queue",
        class_id=0,
        method_id=0,
        by_peer=True,
    )
    assert pair.client.channel_state(channel) is ChannelState.CLOSED
    [server_closed] = pair.transfer(pair.client)
    assert isinstance(server_closed, ChannelClosed)
    assert pair.server.channel_state(channel) is ChannelState.CLOSED


def test_channel_max_is_enforced() -> None:
    pair, _ = _open(False, channel_max=2)
    assert pair.client.open_channel() == 2
    with pytest.raises(LocalProtocolError):
        pair.client.open_channel()


@BYTEWISE
def test_pipelined_requests_are_answered_in_order(byte_at_a_time: bool) -> None:
    pair, ch = _open(byte_at_a_time)
    requests = [QueueDeclare(queue=f"q{i}") for i in range(3)]
    for request in requests:
        pair.client.send_method(ch, request)
    pair.client.send_method(ch, QueueDeclare(queue="silent", nowait=True))
    assert pair.client.pending_requests(ch) == tuple(requests)
    server_events = pair.transfer(pair.client)
    assert [e.request for e in server_events if isinstance(e, MethodReceived)] == [None] * 4
    with pytest.raises(LocalProtocolError):  # the oldest request is a queue.declare
        pair.server.send_method(ch, ExchangeDeclareOk())
    assert pair.server.data_to_send() == b""
    for i in range(3):
        pair.server.send_method(
            ch, QueueDeclareOk(queue=f"q{i}", message_count=0, consumer_count=0)
        )
    with pytest.raises(LocalProtocolError):  # nothing left to answer: nowait expects nothing
        pair.server.send_method(ch, QueueDeclareOk(queue="x", message_count=0, consumer_count=0))
    replies = pair.transfer(pair.server)
    assert [(e.method, e.request) for e in replies if isinstance(e, MethodReceived)] == [
        (QueueDeclareOk(queue=f"q{i}", message_count=0, consumer_count=0), requests[i])
        for i in range(3)
    ]
    assert pair.client.pending_requests(ch) == ()


@BYTEWISE
def test_channel_flow_is_answered_by_the_core(byte_at_a_time: bool) -> None:
    pair, ch = _open(byte_at_a_time)
    pair.server.send_method(ch, ChannelFlow(active=False))
    assert pair.transfer(pair.server) == [ChannelFlowChanged(channel=ch, active=False)]
    [ok] = pair.transfer(pair.client)
    assert isinstance(ok, MethodReceived)
    assert ok.request == ChannelFlow(active=False)


@pytest.mark.parametrize("size", [0, 1, 4088, 4089, 100_000])
@BYTEWISE
def test_publish_and_deliver_assemble_one_message(size: int, byte_at_a_time: bool) -> None:
    pair, ch = _open(byte_at_a_time, frame_max=4096)
    body = bytes(range(256)) * (size // 256) + bytes(size % 256)
    props = BasicProperties(content_type="text/plain", headers={"a": 1})
    publish = BasicPublish(exchange="", routing_key="q")
    pair.client.publish(ch, publish, props, body)
    [received] = pair.transfer(pair.client)
    assert received == MessageReceived(channel=ch, method=publish, properties=props, body=body)
    deliver = BasicDeliver(
        consumer_tag="c", delivery_tag=1, redelivered=False, exchange="", routing_key="q"
    )
    pair.server.send_content(ch, deliver, props, memoryview(body))
    frames = pair.server.buffers_to_send()
    if size >= 65536:
        assert any(isinstance(b, memoryview) for b in frames)
    data = b"".join(bytes(b) for b in frames)
    from amqp_sansio.testing import feed

    [delivered] = feed(pair.client, data, byte_at_a_time=byte_at_a_time)
    assert isinstance(delivered, MessageReceived)
    assert delivered.body == body
    assert delivered.method == deliver


@BYTEWISE
def test_chunk_mode(byte_at_a_time: bool) -> None:
    pair = ConnectionPair(
        ConnectionConfig(chunk_threshold=5000),
        ConnectionConfig(frame_max=4096),
        byte_at_a_time=byte_at_a_time,
    )
    pair.handshake()
    ch = pair.client.open_channel()
    pair.transfer(pair.client)
    pair.transfer(pair.server)
    props = BasicProperties()
    deliver = BasicDeliver(
        consumer_tag="c", delivery_tag=1, redelivered=False, exchange="", routing_key="q"
    )
    pair.server.send_content(ch, deliver, props, b"x" * 10000)
    events = pair.transfer(pair.server)
    assert events[0] == MessageStarted(
        channel=ch, method=deliver, properties=props, body_size=10000
    )
    assert [len(e.data) for e in events if isinstance(e, MessageBodyReceived)] == [
        4088,
        4088,
        1824,
    ]
    assert events[-1] == MessageCompleted(channel=ch)


def test_basic_get_ok_answers_basic_get() -> None:
    pair, ch = _open(False)
    pair.client.send_method(ch, BasicGet(queue="q"))
    pair.transfer(pair.client)
    get_ok = BasicGetOk(
        delivery_tag=1, redelivered=False, exchange="", routing_key="q", message_count=0
    )
    pair.server.send_content(ch, get_ok, BasicProperties(), b"hi")
    with pytest.raises(LocalProtocolError):
        pair.server.send_content(ch, get_ok, BasicProperties(), b"again")
    [message] = pair.transfer(pair.server)
    assert isinstance(message, MessageReceived)
    assert message.body == b"hi"
    assert pair.client.pending_requests(ch) == ()


@BYTEWISE
def test_connection_close_both_directions(byte_at_a_time: bool) -> None:
    for closer_is_client in (True, False):
        pair, _ = _open(byte_at_a_time)
        closer = pair.client if closer_is_client else pair.server
        closer.close(320, "CONNECTION_FORCED - bye")
        [peer_event] = pair.transfer(closer)
        assert peer_event == ConnectionClosed(
            reply_code=320,
            reply_text="CONNECTION_FORCED - bye",
            class_id=0,
            method_id=0,
            by_peer=True,
        )
        [own_event] = pair.transfer(pair.peer(closer))
        assert isinstance(own_event, ConnectionClosed)
        assert not own_event.by_peer


def test_methods_crossing_our_close_are_discarded() -> None:
    pair, ch = _open(False)
    pair.client.send_method(ch, ExchangeDeclare(exchange="x"))
    pair.transfer(pair.client)
    pair.client.close_channel(ch)
    pair.server.send_method(ch, ExchangeDeclareOk())
    deliver = BasicDeliver(
        consumer_tag="c", delivery_tag=1, redelivered=False, exchange="", routing_key="q"
    )
    pair.server.send_content(ch, deliver, BasicProperties(), b"late")
    pair.transfer(pair.client)  # the server answers our close
    events = pair.transfer(pair.server)
    assert len(events) == 1
    assert isinstance(events[0], ChannelClosed)


def test_eof_reports_lost_requests() -> None:
    pair, ch = _open(False)
    request = QueueDeclare(queue="q")
    pair.client.send_method(ch, request)
    pair.client.receive_data(b"")
    assert pair.client.next_event() == ConnectionLost(
        pending_requests=((ch, request),), unconfirmed_publishes=()
    )
    with pytest.raises(RuntimeError):
        pair.client.receive_data(b"x")


def test_illegal_sends_write_nothing() -> None:
    pair, ch = _open(False)
    deliver = BasicDeliver(
        consumer_tag="c", delivery_tag=1, redelivered=False, exchange="", routing_key="q"
    )
    attempts: list[Callable[[], object]] = [
        lambda: pair.client.send_content(ch, deliver, BasicProperties(), b""),  # server-only
        lambda: pair.server.publish(ch, BasicPublish(), BasicProperties(), b""),  # client-only
        lambda: pair.client.send_method(5, QueueDeclare()),  # channel not open
        lambda: pair.client.send_method(
            ch, QueueDeclareOk(queue="", message_count=0, consumer_count=0)
        ),
        lambda: pair.server.send_method(ch, QueueDeclare()),
        lambda: pair.client.send_method(0, QueueDeclare()),  # not a connection method
    ]
    for attempt in attempts:
        with pytest.raises(LocalProtocolError):
            attempt()
        assert pair.client.data_to_send() == b""
        assert pair.server.data_to_send() == b""
