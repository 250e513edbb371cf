"""Real bytes recorded from RabbitMQ 3.10.8 (tests/fixtures/rabbitmq) decode correctly."""

from __future__ import annotations

import json

import pytest

import amqp_sansio as amqp
from amqp_sansio.framing import (
    PROTOCOL_HEADER_0_9_1,
    ContentBodyFrame,
    ContentHeaderFrame,
    Frame,
    FrameReader,
    HeartbeatFrame,
    MethodFrame,
    ProtocolVersion,
    parse_protocol_header,
)
from tests.support import RABBITMQ_CAPTURES

FIXTURES = RABBITMQ_CAPTURES
# Conversations where both sides speak valid 0-9-1 from the first byte to the last.
CLEAN = sorted(p.stem for p in FIXTURES.glob("*.json") if p.stem not in {"bad_header", "bad_frame"})


def stream(name: str, side: str) -> bytes:
    recording = json.loads((FIXTURES / f"{name}.json").read_text())
    return b"".join(bytes.fromhex(c["hex"]) for c in recording["chunks"] if c["from"] == side)


def frames(data: bytes, *, byte_at_a_time: bool = False) -> list[Frame]:
    reader = FrameReader(frame_max=131072)
    out: list[Frame] = []
    pieces = [data[i : i + 1] for i in range(len(data))] if byte_at_a_time else [data]
    for piece in pieces:
        reader.feed(piece)
        while (frame := reader.next_frame()) is not None:
            out.append(frame)
    assert reader.buffered == 0
    return out


def methods(data: bytes) -> list[amqp.Method]:
    return [f.method for f in frames(data) if isinstance(f, MethodFrame)]


@pytest.mark.parametrize("name", CLEAN)
@pytest.mark.parametrize("side", ["client", "server"])
def test_every_recorded_frame_decodes(name: str, side: str) -> None:
    data = stream(name, side)
    if side == "client":
        header = parse_protocol_header(data)
        assert header is not None
        assert header.version is ProtocolVersion.AMQP_0_9_1
        data = data[8:]
    whole = frames(data)
    assert whole
    assert frames(data, byte_at_a_time=True) == whole


def test_handshake() -> None:
    server = methods(stream("handshake", "server"))
    start = server[0]
    assert isinstance(start, amqp.ConnectionStart)
    assert (start.version_major, start.version_minor) == (0, 9)
    assert start.mechanisms == b"PLAIN AMQPLAIN"
    props = start.server_properties
    assert props["product"] == "RabbitMQ"
    capabilities = props["capabilities"]
    assert isinstance(capabilities, dict)
    assert capabilities["publisher_confirms"] is True
    assert capabilities["consumer_cancel_notify"] is True
    tune = server[1]
    assert isinstance(tune, amqp.ConnectionTune)
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (2047, 131072, 60)
    assert [type(m) for m in server[2:]] == [
        amqp.ConnectionOpenOk,
        amqp.ChannelOpenOk,
        amqp.ChannelCloseOk,
        amqp.ConnectionCloseOk,
    ]


def test_delivery_with_headers() -> None:
    server = frames(stream("delivery_with_headers", "server"))
    delivers = [
        i
        for i, f in enumerate(server)
        if isinstance(f, MethodFrame) and isinstance(f.method, amqp.BasicDeliver)
    ]
    assert len(delivers) == 2
    first, second = delivers
    header = server[first + 1]
    assert isinstance(header, ContentHeaderFrame)
    props = header.properties
    assert isinstance(props, amqp.BasicProperties)
    assert props.content_type == "application/json"
    assert props.delivery_mode == 2
    assert props.headers == {"a": 1, "b": "x", "c": True}
    assert props.timestamp == 1767225600
    body = server[first + 2]
    assert isinstance(body, ContentBodyFrame)
    assert len(body.payload) == header.body_size
    # the 10,000-byte body came in frames of frame_max - 8 = 4088 bytes
    sizes = [
        len(f.payload) for f in server[second + 2 : second + 5] if isinstance(f, ContentBodyFrame)
    ]
    assert sizes == [4088, 4088, 1824]


def test_confirms_with_multiple() -> None:
    acks = [
        m for m in methods(stream("confirm_multiple", "server")) if isinstance(m, amqp.BasicAck)
    ]
    assert any(a.multiple for a in acks)
    assert acks[-1].delivery_tag == 50
    tags = [a.delivery_tag for a in acks]
    assert tags == sorted(tags)


def test_channel_close_404() -> None:
    close = next(
        m
        for m in methods(stream("channel_close_404", "server"))
        if isinstance(m, amqp.ChannelClose)
    )
    assert close.reply_code == amqp.ReplyCode.NOT_FOUND
    assert close.reply_text.startswith("NOT_FOUND - no queue 'capture.missing'")
    assert (close.class_id, close.method_id) == (
        amqp.QueueDeclare.CLASS_ID,
        amqp.QueueDeclare.METHOD_ID,
    )


def test_connection_close_forced() -> None:
    close = next(
        m
        for m in methods(stream("connection_close_forced", "server"))
        if isinstance(m, amqp.ConnectionClose)
    )
    assert close.reply_code == amqp.ReplyCode.CONNECTION_FORCED
    assert close.reply_text == "CONNECTION_FORCED - capture test"


def test_mandatory_return_then_ack() -> None:
    server = methods(stream("mandatory_return", "server"))
    kinds = [type(m) for m in server]
    assert kinds.index(amqp.BasicReturn) < kinds.index(amqp.BasicAck)
    returned = server[kinds.index(amqp.BasicReturn)]
    assert isinstance(returned, amqp.BasicReturn)
    assert returned.reply_code == amqp.ReplyCode.NO_ROUTE


def test_server_sent_cancel() -> None:
    cancel = next(
        m for m in methods(stream("consumer_cancel", "server")) if isinstance(m, amqp.BasicCancel)
    )
    assert cancel.nowait is True


def test_heartbeats() -> None:
    beats = [f for f in frames(stream("heartbeat", "server")) if isinstance(f, HeartbeatFrame)]
    assert len(beats) >= 3
    assert all(b.channel == 0 for b in beats)


def test_bad_header_gets_rabbitmqs_own_header() -> None:
    assert stream("bad_header", "server") == PROTOCOL_HEADER_0_9_1
    header = parse_protocol_header(stream("bad_header", "client"))
    assert header is not None
    assert header.version is ProtocolVersion.AMQP_0_10


def test_bad_frame_end_closes_with_501() -> None:
    close = methods(stream("bad_frame", "server"))[-1]
    assert isinstance(close, amqp.ConnectionClose)
    assert close.reply_code == amqp.ReplyCode.FRAME_ERROR
    assert "invalid_frame_end_marker" in close.reply_text
    # and our reader refuses the same bytes the same way
    client = stream("bad_frame", "client")[8:]
    with pytest.raises(amqp.RemoteProtocolError) as excinfo:
        frames(client)
    assert excinfo.value.reply_code == amqp.ReplyCode.FRAME_ERROR
