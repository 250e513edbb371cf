"""Where RabbitMQ's behaviour, not the spec's letter, decides: replies that overtake each other,
heartbeat 0 meaning "off", and frames a few octets over frame_max."""

from __future__ import annotations

import struct

import pytest

from amqp_sansio import (
    BasicCancel,
    BasicCancelOk,
    BasicConsume,
    BasicConsumeOk,
    BasicProperties,
    BasicPublish,
    ConnectionConfig,
    MessageReceived,
    MethodReceived,
    QueueDeclare,
    QueueDeclareOk,
    RemoteProtocolError,
)
from amqp_sansio.testing import ConnectionPair, feed, get_all_events, method_frame


def _channel(pair: ConnectionPair) -> int:
    pair.handshake()
    return pair.open_channel()


@pytest.mark.parametrize("byte_at_a_time", [False, True], ids=["whole", "bytewise"])
def test_consume_ok_overtaken_by_a_later_reply_is_matched_by_tag(byte_at_a_time: bool) -> None:
    # RabbitMQ 3.10.8 answered a pipelined passive declare before the consume sent ahead of it.
    pair = ConnectionPair()
    ch = _channel(pair)
    consume = BasicConsume(queue="q", consumer_tag="ctag-1")
    declare = QueueDeclare(queue="q", passive=True)
    pair.client.send_method(ch, consume)
    pair.client.send_method(ch, declare)
    pair.client.data_to_send()
    wire = method_frame(
        ch, QueueDeclareOk(queue="q", message_count=0, consumer_count=0)
    ) + method_frame(ch, BasicConsumeOk(consumer_tag="ctag-1"))
    events = feed(pair.client, wire, byte_at_a_time=byte_at_a_time)
    assert [(type(e.method), e.request) for e in events if isinstance(e, MethodReceived)] == [
        (QueueDeclareOk, declare),
        (BasicConsumeOk, consume),
    ]
    assert pair.client.pending_requests(ch) == ()


def test_cancel_ok_is_matched_by_tag_and_a_server_named_consume_takes_any_tag() -> None:
    pair = ConnectionPair()
    ch = _channel(pair)
    consume = BasicConsume(queue="q")  # the server names the consumer
    cancel = BasicCancel(consumer_tag="other")
    pair.client.send_method(ch, consume)
    pair.client.send_method(ch, cancel)
    pair.client.data_to_send()
    events = feed(
        pair.client,
        method_frame(ch, BasicCancelOk(consumer_tag="other"))
        + method_frame(ch, BasicConsumeOk(consumer_tag="amq.ctag-x")),
    )
    assert [e.request for e in events if isinstance(e, MethodReceived)] == [cancel, consume]


def test_a_consume_ok_with_another_tag_answers_the_oldest_consume() -> None:
    pair = ConnectionPair()
    ch = _channel(pair)
    first = BasicConsume(queue="q", consumer_tag="mine")
    pair.client.send_method(ch, first)
    pair.client.send_method(ch, BasicConsume(queue="q", consumer_tag="also-mine"))
    pair.client.data_to_send()
    events = feed(pair.client, method_frame(ch, BasicConsumeOk(consumer_tag="renamed")))
    assert [e.request for e in events if isinstance(e, MethodReceived)] == [first]


def test_a_reply_overtaking_anything_but_a_consume_or_cancel_is_a_503() -> None:
    pair = ConnectionPair()
    ch = _channel(pair)
    pair.client.send_method(ch, QueueDeclare(queue="q"))
    pair.client.send_method(ch, BasicConsume(queue="q", consumer_tag="mine"))
    pair.client.data_to_send()
    with pytest.raises(RemoteProtocolError) as info:
        feed(pair.client, method_frame(ch, BasicConsumeOk(consumer_tag="mine")))
    assert info.value.reply_code == 503


@pytest.mark.parametrize(
    ("client_heartbeat", "negotiated"),
    [(None, 60), (0, 0), (30, 30), (120, 60)],
    ids=["accept", "off", "lower", "server-lower"],
)
def test_client_heartbeat_zero_turns_heartbeats_off(
    client_heartbeat: int | None, negotiated: int
) -> None:
    pair = ConnectionPair(ConnectionConfig(heartbeat=client_heartbeat), ConnectionConfig())
    pair.handshake()
    assert pair.client.heartbeat == negotiated
    assert pair.server.heartbeat == negotiated
    assert (pair.client.next_deadline() is None) == (negotiated == 0)


def _publish_with_body_frame_of(ch: int, payload: int) -> bytes:
    """A publish whose single body frame carries *payload* octets, as off-by-8 clients send."""
    body = b"x" * payload
    wire = bytearray(method_frame(ch, BasicPublish(routing_key="q")))
    header = bytearray()
    BasicProperties().encode(header)
    wire += struct.pack(">BHIHHQ", 2, ch, 12 + len(header), 60, 0, payload) + header + b"\xce"
    wire += struct.pack(">BHI", 3, ch, payload) + body + b"\xce"
    return bytes(wire)


def test_the_server_role_accepts_frames_eight_octets_over_frame_max() -> None:
    pair = ConnectionPair(ConnectionConfig(frame_max=4096), ConnectionConfig(frame_max=4096))
    ch = _channel(pair)
    events = feed(pair.server, _publish_with_body_frame_of(ch, 4096))
    assert [len(e.body) for e in events if isinstance(e, MessageReceived)] == [4096]


def test_the_server_role_refuses_nine_octets_over_and_the_client_role_any_excess() -> None:
    pair = ConnectionPair(ConnectionConfig(frame_max=4096), ConnectionConfig(frame_max=4096))
    ch = _channel(pair)
    with pytest.raises(RemoteProtocolError) as info:
        feed(pair.server, _publish_with_body_frame_of(ch, 4097))
    assert info.value.reply_code == 501

    pair = ConnectionPair(ConnectionConfig(frame_max=4096), ConnectionConfig(frame_max=4096))
    ch = _channel(pair)
    deliver = method_frame(ch, BasicConsumeOk(consumer_tag="c"))
    pair.client.send_method(ch, BasicConsume(queue="q", consumer_tag="c"))
    pair.client.data_to_send()
    assert get_all_events(pair.client) == []
    feed(pair.client, deliver)
    oversized = struct.pack(">BHI", 3, ch, 4089) + b"x" * 4089 + b"\xce"
    with pytest.raises(RemoteProtocolError) as info:
        feed(pair.client, oversized)
    assert info.value.reply_code == 501
