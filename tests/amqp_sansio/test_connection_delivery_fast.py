"""A delivery in one step (``FrameReader.next_content``): when a ``basic.deliver``'s header and
its one body frame are already buffered, the client core hands out the message without the
frame-by-frame assembly. The events must be the same however the octets are cut, and every
unusual content (several body frames, an empty body, the size limits, chunking, a wrong header
or body, frames of another channel in between) still takes the checked path."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import pytest

from amqp_sansio import (
    BasicDeliver,
    BasicProperties,
    ChannelClose,
    Connection,
    ConnectionConfig,
    MessageBodyReceived,
    MessageCompleted,
    MessageReceived,
    MessageStarted,
    MethodReceived,
    RemoteProtocolError,
)
from amqp_sansio.testing import (
    ConnectionPair,
    content_frames,
    feed,
    feed_in_pieces,
    method_frame,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

FRAME_MAX = 4096
PROPERTIES = [
    BasicProperties(),
    BasicProperties(
        content_type="application/json",
        delivery_mode=2,
        headers={"x-trace": "abc", "n": 7},
        message_id="m-1",
        timestamp=1_700_000_000,
    ),
]
# empty, one frame (down to the last octet that fits), two frames, three frames
BODY_SIZES = [0, 1, FRAME_MAX - 8, FRAME_MAX - 7, 3 * FRAME_MAX]


def _client(config: ConnectionConfig | None = None) -> tuple[Connection, list[int]]:
    """A client core after the handshake, channels 1 and 2 open."""
    pair = ConnectionPair(config or ConnectionConfig(frame_max=FRAME_MAX))
    pair.handshake()
    channels = [pair.open_channel(), pair.open_channel()]
    pair.client.data_to_send()
    return pair.client, channels


def _deliver(channel: int, tag: int, props: BasicProperties, body: bytes) -> bytes:
    method = BasicDeliver(consumer_tag="c", delivery_tag=tag, exchange="", routing_key="q")
    return content_frames(channel, method, props, body, frame_max=FRAME_MAX)


def _wire(rng: random.Random) -> tuple[bytes, list[tuple[int, int, BasicProperties, bytes]]]:
    """Deliveries of every size and property set on two channels, in a shuffled order."""
    cases = [
        (channel, size, props) for channel in (1, 2) for size in BODY_SIZES for props in PROPERTIES
    ]
    rng.shuffle(cases)
    wire = bytearray()
    expected = []
    for tag, (channel, size, props) in enumerate(cases, start=1):
        body = bytes(rng.getrandbits(8) for _ in range(size))
        wire += _deliver(channel, tag, props, body)
        expected.append((channel, tag, props, body))
    return bytes(wire), expected


def _seen(events: Sequence[object]) -> list[tuple[int, int, BasicProperties, bytes]]:
    out = []
    for event in events:
        assert type(event) is MessageReceived
        method = event.method
        assert isinstance(method, BasicDeliver)
        assert isinstance(event.properties, BasicProperties)
        assert event.request is None
        out.append((event.channel, method.delivery_tag, event.properties, bytes(event.body)))
    return out


@pytest.mark.parametrize("cut", ["whole", "octets", "random"])
def test_deliveries_are_the_same_however_the_octets_arrive(cut: str) -> None:
    rng = random.Random(20)
    wire, expected = _wire(rng)
    client, _ = _client()
    if cut == "whole":
        events = feed(client, wire)
    elif cut == "octets":
        events = feed(client, wire, byte_at_a_time=True)
    else:
        events = feed_in_pieces(client, wire, random.Random(7))
    assert _seen(events) == expected
    assert client.data_to_send() == b""  # nothing answered: every delivery was well formed


def test_whole_deliveries_are_bytes_of_their_own() -> None:
    client, (ch, _) = _client()
    body = b"x" * 100
    (event,) = feed(client, _deliver(ch, 1, PROPERTIES[1], body))
    assert type(event) is MessageReceived
    assert type(event.body) is bytes
    assert event.body == body
    assert event.properties == PROPERTIES[1]


@pytest.mark.parametrize("size", [99, 100])
def test_a_body_at_max_message_size_arrives_whole(size: int) -> None:
    client, (ch, _) = _client(ConnectionConfig(frame_max=FRAME_MAX, max_message_size=100))
    (event,) = feed(client, _deliver(ch, 1, PROPERTIES[0], b"y" * size))
    assert type(event) is MessageReceived
    assert event.body == b"y" * size


def test_a_body_over_max_message_size_is_still_refused() -> None:
    client, (ch, _) = _client(ConnectionConfig(frame_max=FRAME_MAX, max_message_size=100))
    with pytest.raises(RemoteProtocolError) as caught:
        feed(client, _deliver(ch, 1, PROPERTIES[0], b"y" * 101))
    assert caught.value.reply_code == 506


def test_a_body_over_the_chunk_threshold_still_comes_in_chunks() -> None:
    client, (ch, _) = _client(ConnectionConfig(frame_max=FRAME_MAX, chunk_threshold=50))
    events = feed(client, _deliver(ch, 1, PROPERTIES[0], b"a" * 50))
    assert [type(e) for e in events] == [MessageReceived]
    events = feed(client, _deliver(ch, 2, PROPERTIES[0], b"b" * 51))
    assert [type(e) for e in events] == [MessageStarted, MessageBodyReceived, MessageCompleted]
    assert isinstance(events[1], MessageBodyReceived)
    assert events[1].data == b"b" * 51


def test_a_header_of_another_class_after_a_delivery_is_still_refused() -> None:
    client, (ch, _) = _client()
    wire = _deliver(ch, 1, PROPERTIES[0], b"z" * 10)
    method_end = 7 + int.from_bytes(wire[3:7], "big") + 1
    # the content header's class id (after the 7-octet frame header): 50, not basic's 60
    broken = wire[: method_end + 7] + (50).to_bytes(2, "big") + wire[method_end + 9 :]
    with pytest.raises(RemoteProtocolError, match="no content class 50") as caught:
        feed(client, broken)
    assert caught.value.reply_code == 502


def test_a_body_in_two_frames_within_frame_max_is_left_to_the_checked_path() -> None:
    client, (ch, _) = _client()
    whole = _deliver(ch, 1, PROPERTIES[0], b"abcdef")
    # The same content with its body as two frames of 3 octets: legal, not the one-frame case.
    split = whole[: len(whole) - (7 + 6 + 1)]
    for part in (b"abc", b"def"):
        split += b"\x03" + ch.to_bytes(2, "big") + len(part).to_bytes(4, "big") + part + b"\xce"
    (event,) = feed(client, split)
    assert type(event) is MessageReceived
    assert event.body == b"abcdef"


def test_a_method_of_another_channel_between_header_and_body_is_left_to_the_checked_path() -> None:
    client, (one, two) = _client()
    wire = _deliver(one, 1, PROPERTIES[0], b"q" * 5)
    body_frame = 7 + 5 + 1
    close = method_frame(
        two, ChannelClose(reply_code=404, reply_text="NOT_FOUND", class_id=50, method_id=10)
    )
    events = feed(client, wire[:-body_frame] + close + wire[-body_frame:])
    # the channel 2 close arrives first, then the delivery on channel 1 completes
    assert [type(e) for e in events][-1] is MessageReceived
    assert any(type(e) is not MessageReceived for e in events)
    last = events[-1]
    assert isinstance(last, MessageReceived)
    assert last.body == b"q" * 5
    assert not any(type(e) is MethodReceived and e.channel == one for e in events)
