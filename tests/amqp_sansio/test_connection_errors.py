"""Peer misbehaviour: each case checks the error class, the reply code, that the matching
connection.close is already queued, and that the error is sticky."""

from __future__ import annotations

import struct

import pytest

from amqp_sansio import (
    BasicDeliver,
    BasicProperties,
    BasicPublish,
    ChannelClose,
    ChannelOpen,
    Connection,
    ConnectionClose,
    ConnectionConfig,
    ConnectionState,
    LocalProtocolError,
    QueueDeclareOk,
    RemoteProtocolError,
)
from amqp_sansio.testing import ConnectionPair, content_frames, feed, method_frame

_DELIVER = BasicDeliver(
    consumer_tag="c", delivery_tag=1, redelivered=False, exchange="", routing_key="q"
)


def _open_client() -> tuple[Connection, int]:
    pair = ConnectionPair(ConnectionConfig(max_message_size=1 << 20))
    pair.handshake()
    ch = pair.client.open_channel()
    pair.transfer(pair.client)
    pair.transfer(pair.server)
    pair.client.data_to_send()
    return pair.client, ch


def _header(channel: int, body_size: int) -> bytes:
    payload = struct.pack(">HHQH", 60, 0, body_size, 0)
    return struct.pack(">BHI", 2, channel, len(payload)) + payload + b"\xce"


def _body(channel: int, data: bytes) -> bytes:
    return struct.pack(">BHI", 3, channel, len(data)) + data + b"\xce"


_DELIVER_FRAME = method_frame(1, _DELIVER)


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (method_frame(7, QueueDeclareOk(queue="", message_count=0, consumer_count=0)), 504),
        (method_frame(1, ChannelOpen()), 504),  # second open of an open channel
        (method_frame(1, QueueDeclareOk(queue="", message_count=0, consumer_count=0)), 503),
        (method_frame(0, QueueDeclareOk(queue="", message_count=0, consumer_count=0)), 503),
        (_header(1, 3), 505),  # header without a method
        (_header(0, 3), 505),  # content on channel 0
        (_body(1, b"abc"), 505),
        (_DELIVER_FRAME + _body(1, b"abc"), 505),  # body before header
        (_DELIVER_FRAME + _header(1, 2) + _body(1, b"abc"), 501),  # longer than announced
        (_DELIVER_FRAME + method_frame(1, _DELIVER), 505),  # method during content
        (
            _DELIVER_FRAME
            + _header(1, 5)
            + method_frame(1, ChannelClose(reply_code=200, reply_text="", class_id=0, method_id=0)),
            505,
        ),  # close during content
        (_DELIVER_FRAME + _header(1, 2**63), 506),
        (_DELIVER_FRAME + _header(1, (1 << 20) + 1), 506),
        (b"\x08\x00\x01\x00\x00\x00\x00\xce", 505),  # heartbeat on a non-zero channel
        (method_frame(1, BasicPublish()), 503),  # a client-only method sent to the client
    ],
)
@pytest.mark.parametrize("byte_at_a_time", [False, True], ids=["whole", "bytewise"])
def test_bad_input_closes_with_code(data: bytes, code: int, byte_at_a_time: bool) -> None:
    client, _ = _open_client()
    with pytest.raises(RemoteProtocolError) as info:
        feed(client, data, byte_at_a_time=byte_at_a_time)
    err = info.value
    assert err.reply_code == code
    close = ConnectionClose(
        reply_code=code,
        reply_text=err.reply_text[:255],
        class_id=err.class_id,
        method_id=err.method_id,
    )
    assert client.data_to_send() == method_frame(0, close)
    assert client.state is ConnectionState.ERROR
    with pytest.raises(RemoteProtocolError):
        client.next_event()
    with pytest.raises(RemoteProtocolError):
        client.receive_data(b"x")
    with pytest.raises(LocalProtocolError):
        client.open_channel()
    assert client.data_to_send() == b""


def test_huge_body_size_refused_before_buffering() -> None:
    client, _ = _open_client()
    client.receive_data(_DELIVER_FRAME + _header(1, 2**63))
    with pytest.raises(RemoteProtocolError) as info:
        client.next_event()
    assert (info.value.reply_code, info.value.class_id, info.value.method_id) == (506, 60, 60)


def test_events_before_the_error_are_delivered_first() -> None:
    client, ch = _open_client()
    good = content_frames(ch, _DELIVER, BasicProperties(), b"ok")
    client.receive_data(good + _body(ch, b"stray"))
    event = client.next_event()
    assert type(event).__name__ == "MessageReceived"
    with pytest.raises(RemoteProtocolError) as info:
        client.next_event()
    assert info.value.reply_code == 505


def test_method_before_open_is_503_on_the_server() -> None:
    pair = ConnectionPair()
    pair.transfer(pair.client)
    pair.transfer(pair.server)
    pair.transfer(pair.client)  # start-ok
    pair.server.accept_authentication()
    pair.server.receive_data(method_frame(1, ChannelOpen()))
    with pytest.raises(RemoteProtocolError) as info:
        pair.server.next_event()
    assert info.value.reply_code == 503
