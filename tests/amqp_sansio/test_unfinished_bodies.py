"""0-9-1 bodies still arriving are counted on the connection (``unfinished_size``), which the
embedded broker adds to what its memory watermark counts (issue 27, item 12, as 0-10 does)."""

from __future__ import annotations

import struct

from amqp_sansio import BasicProperties, BasicPublish, MessageReceived
from amqp_sansio.testing import ConnectionPair, content_frames, feed


def frames_of(data: bytes) -> list[bytes]:
    frames: list[bytes] = []
    at = 0
    while at < len(data):
        (size,) = struct.unpack_from(">I", data, at + 3)
        frames.append(data[at : at + 8 + size])
        at += 8 + size
    return frames


def test_bodies_under_way_on_two_channels_are_counted_until_they_end() -> None:
    pair = ConnectionPair()
    pair.handshake()
    assert pair.open_channel() == 1
    assert pair.open_channel() == 2
    server = pair.server
    method = BasicPublish(exchange="", routing_key="q")
    one = frames_of(content_frames(1, method, BasicProperties(), bytes(100_000), frame_max=4096))
    two = frames_of(content_frames(2, method, BasicProperties(), bytes(50_000), frame_max=4096))
    assert server.unfinished_size == 0
    feed(server, b"".join(one[:4] + two[:3]))  # method, header, then body frames of each
    held = server.unfinished_size
    assert held >= 2 * 4088 + 4088  # what arrived at least (growth may allocate more)
    assert held <= 100_000 + 50_000
    events = feed(server, b"".join(one[4:]))
    assert [type(e) for e in events] == [MessageReceived]
    assert 0 < server.unfinished_size <= 50_000  # channel 2's body is still under way
    feed(server, b"".join(two[3:]))
    assert server.unfinished_size == 0
