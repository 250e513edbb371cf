"""Bodies as views of the received octets (``ConnectionConfig.body_view_threshold``): a large
body that lies whole in one read is handed out without a copy, as a read-only ``memoryview``
that stays valid after later reads; anything cut by a read, smaller than the threshold, or
parsed out of a buffer the reader may still change, is ``bytes`` as before."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import pytest

from amqp_sansio import (
    BasicDeliver,
    BasicProperties,
    Connection,
    ConnectionConfig,
    MessageBodyReceived,
    MessageReceived,
)
from amqp_sansio._frames import ContentBodyFrame, FrameReader
from amqp_sansio.testing import ConnectionPair, content_frames, feed, feed_in_pieces

if TYPE_CHECKING:
    from collections.abc import Sequence

FRAME_MAX = 131072
THRESHOLD = 1024
PROPERTIES = BasicProperties(content_type="application/octet-stream", delivery_mode=2)


def _client(views: int | None = None, chunks: int | None = None) -> Connection:
    """A client core after the handshake, channel 1 open."""
    config = ConnectionConfig(
        frame_max=FRAME_MAX, body_view_threshold=views, chunk_threshold=chunks
    )
    pair = ConnectionPair(config)
    pair.handshake()
    assert pair.open_channel() == 1
    pair.client.data_to_send()
    return pair.client


def _deliver(tag: int, body: bytes, *, frame_max: int = FRAME_MAX) -> bytes:
    method = BasicDeliver(consumer_tag="c", delivery_tag=tag, exchange="", routing_key="q")
    return content_frames(1, method, PROPERTIES, body, frame_max=frame_max)


def _bodies(events: Sequence[object]) -> list[bytes | bytearray | memoryview]:
    out = []
    for event in events:
        assert type(event) is MessageReceived
        assert event.properties == PROPERTIES
        out.append(event.body)
    return out


def test_a_large_body_in_one_read_is_a_view_of_that_read() -> None:
    client = _client(views=THRESHOLD)
    body = random.Random(1).randbytes(64 * 1024)
    read = _deliver(1, body) + _deliver(2, b"small")
    events = feed(client, read)
    large, small = _bodies(events)
    assert type(large) is memoryview
    assert large.readonly
    assert large.obj is read  # no copy: a slice of the very object received
    assert large == body
    assert type(small) is bytes  # under the threshold: a copy of its own, as without views
    assert small == b"small"


def test_a_view_stays_valid_after_later_reads() -> None:
    client = _client(views=THRESHOLD)
    first = random.Random(2).randbytes(4096)
    (event,) = feed(client, _deliver(1, first))
    assert isinstance(event, MessageReceived)
    view = event.body
    # Later reads, whole and cut anywhere, replace the reader's buffer; the view keeps its own.
    later = b"".join(_deliver(tag, bytes([tag]) * 3000) for tag in range(2, 12))
    events = feed_in_pieces(client, later, random.Random(3))
    assert [bytes(body) for body in _bodies(events)] == [bytes([t]) * 3000 for t in range(2, 12)]
    assert view == first


@pytest.mark.parametrize("cut", ["octets", "random"])
def test_bodies_cut_by_reads_are_bytes_and_the_same(cut: str) -> None:
    rng = random.Random(4)
    bodies = [rng.randbytes(size) for size in (THRESHOLD, 3000, 70_000, 10, 2 * FRAME_MAX)]
    wire = b"".join(_deliver(tag, body) for tag, body in enumerate(bodies, start=1))
    viewing = _client(views=THRESHOLD)
    copying = _client()
    if cut == "octets":
        # One octet per read: the reader holds a bytearray it changes, never a view of it.
        got = feed(viewing, wire, byte_at_a_time=True)
        assert all(type(body) is not memoryview for body in _bodies(got))
        want = feed(copying, wire, byte_at_a_time=True)
    else:
        got = feed_in_pieces(viewing, wire, random.Random(5))
        want = feed_in_pieces(copying, wire, random.Random(5))
    assert [bytes(body) for body in _bodies(got)] == bodies
    assert [bytes(body) for body in _bodies(want)] == bodies


def test_no_threshold_means_no_views() -> None:
    client = _client()
    body = b"z" * (64 * 1024)
    (event,) = feed(client, _deliver(1, body))
    assert isinstance(event, MessageReceived)
    assert type(event.body) is bytes
    assert event.body == body


def test_a_body_of_several_frames_is_assembled_as_before() -> None:
    client = _client(views=THRESHOLD)
    body = random.Random(6).randbytes(10_000)
    # frame_max 4096: three body frames, each over the threshold
    (event,) = feed(client, _deliver(1, body, frame_max=4096))
    assert isinstance(event, MessageReceived)
    assert type(event.body) is bytearray
    assert event.body == body


def test_chunks_are_views_too() -> None:
    client = _client(views=THRESHOLD, chunks=THRESHOLD)
    body = random.Random(7).randbytes(5000)
    events = feed(client, _deliver(1, body, frame_max=4096))
    chunks = [event.data for event in events if isinstance(event, MessageBodyReceived)]
    assert [type(chunk) for chunk in chunks] == [memoryview, bytes]  # 4088 octets, then 912
    assert b"".join(chunks) == body


def test_the_frame_reader_hands_out_views_from_the_threshold_up() -> None:
    reader = FrameReader(frame_max=FRAME_MAX, view_threshold=100)
    frames = b"".join(
        b"\x03\x00\x01" + len(p).to_bytes(4, "big") + p + b"\xce" for p in (b"a" * 99, b"b" * 100)
    )
    reader.feed(frames)
    below, at = reader.next_frame(), reader.next_frame()
    assert isinstance(below, ContentBodyFrame)
    assert isinstance(at, ContentBodyFrame)
    assert type(below.payload) is bytes
    assert type(at.payload) is memoryview
    assert at.payload == b"b" * 100
    assert reader.next_frame() is None


@pytest.mark.parametrize("bad", [-1, 1.5, "1"])
def test_a_bad_threshold_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="view_threshold"):
        FrameReader(view_threshold=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="body_view_threshold"):
        ConnectionConfig(body_view_threshold=bad)  # type: ignore[arg-type]
