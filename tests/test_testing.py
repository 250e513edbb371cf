"""amqp_sansio.testing: the pair, the feeder and the frame builders."""

from __future__ import annotations

from amqp_sansio import (
    NEED_DATA,
    BasicDeliver,
    BasicProperties,
    ChannelOpen,
    ChannelOpened,
    Connection,
    ConnectionState,
    MessageReceived,
    Role,
)
from amqp_sansio.testing import ConnectionPair, content_frames, feed, get_all_events, method_frame


def test_method_frame_bytes() -> None:
    assert method_frame(1, ChannelOpen()) == bytes.fromhex("010001000000050014000a00ce")


def test_feed_bytewise_gives_the_same_events_as_whole() -> None:
    results = []
    for bytewise in (False, True):
        pair = ConnectionPair(byte_at_a_time=bytewise)
        pair.handshake()
        ch = pair.client.open_channel()
        pair.transfer(pair.client)
        pair.transfer(pair.server)
        deliver = BasicDeliver(
            consumer_tag="c", delivery_tag=1, redelivered=False, exchange="", routing_key="q"
        )
        data = content_frames(ch, deliver, BasicProperties(), b"x" * 9000)
        results.append(feed(pair.client, data, byte_at_a_time=bytewise))
    assert results[0] == results[1]
    [message] = results[0]
    assert isinstance(message, MessageReceived)
    assert message.body == b"x" * 9000


def test_handshake_opens_both_ends() -> None:
    pair = ConnectionPair()
    pair.handshake()
    assert pair.client.state is pair.server.state is ConnectionState.OPEN
    assert pair.peer(pair.client) is pair.server
    assert pair.peer(pair.server) is pair.client


def test_get_all_events_stops_at_need_data() -> None:
    conn = Connection(Role.SERVER)
    assert get_all_events(conn) == []
    assert conn.next_event() is NEED_DATA
    pair = ConnectionPair()
    pair.handshake()
    pair.client.open_channel()
    assert pair.transfer(pair.client) == [ChannelOpened(channel=1)]
