"""Unfinished 0-10 segments (issue 27, item 12): their octets are counted on the connection
(``unfinished_size``) and bounded over all channels together (``max_unfinished_size``)."""

from __future__ import annotations

import struct

import pytest

from amqp_sansio.v0_10 import (
    ConnectionClose,
    ConnectionConfig,
    ConnectionState,
    DeliveryProperties,
    MessageTransfer,
    RemoteProtocolError,
)
from amqp_sansio.v0_10.testing import ConnectionPair, command_frames, feed, parse_assemblies


def body_frames(channel: int, size: int) -> list[bytes]:
    data = command_frames(
        channel,
        MessageTransfer(destination=""),
        headers=[DeliveryProperties(routing_key="q")],
        body=bytes(size),
    )
    frames: list[bytes] = []
    at = 0
    while at < len(data):
        (length,) = struct.unpack_from(">H", data, at + 2)
        frames.append(data[at : at + length])
        at += length
    return frames


def body_octets(frames: list[bytes]) -> int:
    return sum(len(frame) - 12 for frame in frames if frame[1] == 3)


def test_unfinished_bodies_on_all_channels_count_together_and_are_bounded() -> None:
    pair = ConnectionPair(server_config=ConnectionConfig(max_unfinished_size=30_000))
    pair.handshake()
    pair.attach("a")
    pair.attach("b")
    server = pair.server
    first, second = body_frames(1, 20_000), body_frames(2, 20_000)
    feed(server, b"".join(first[:-1]))
    assert server.unfinished_size == body_octets(first[:-1])
    feed(server, first[-1])  # the body ends: its octets are the message's now
    assert server.unfinished_size == 0
    feed(server, b"".join(first[:3] + second[:3]))
    assert server.unfinished_size == body_octets(first[:3] + second[:3])
    with pytest.raises(RemoteProtocolError, match="over the connection's bound of 30000") as exc:
        feed(server, b"".join(first[3:-1] + second[3:-1]))
    assert exc.value.reply_code == 320
    [close] = parse_assemblies(server.data_to_send())
    assert close.op == ConnectionClose(reply_code=320, reply_text=exc.value.reply_text)
    assert server.state is ConnectionState.ERROR or server.state is ConnectionState.CLOSING


def test_the_bound_defaults_to_max_message_size() -> None:
    pair = ConnectionPair(server_config=ConnectionConfig(max_message_size=50_000))
    pair.handshake()
    pair.attach("a")
    pair.attach("b")
    frames = body_frames(1, 45_000)[:-1] + body_frames(2, 45_000)[:-1]
    with pytest.raises(RemoteProtocolError, match="bound of 50000"):
        feed(pair.server, b"".join(frames))
