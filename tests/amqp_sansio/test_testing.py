"""amqp_sansio.testing: the pair, the feeder and the frame builders."""

from __future__ import annotations

import random
import re

import pytest

from amqp_sansio import (
    NEED_DATA,
    AuthenticationRequested,
    BasicDeliver,
    BasicProperties,
    BasicPublish,
    ChannelOpen,
    ChannelOpened,
    Connection,
    ConnectionConfig,
    ConnectionLost,
    ConnectionState,
    Event,
    MessageReceived,
    MethodReceived,
    QueueDeclare,
    RemoteProtocolError,
    Role,
)
from amqp_sansio.framing import ContentBodyFrame, ContentHeaderFrame, MethodFrame
from amqp_sansio.testing import (
    ConnectionPair,
    content_frames,
    feed,
    feed_in_pieces,
    get_all_events,
    method_frame,
    parse_frames,
)
from tests.support import ROOT


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


def test_feed_in_pieces_by_sizes_and_by_random() -> None:
    results = []
    for pieces in ([1, 2, 3, 0, 5000], random.Random(3), [100_000]):
        pair = ConnectionPair()
        pair.handshake()
        ch = pair.open_channel()
        deliver = BasicDeliver(
            consumer_tag="c", delivery_tag=1, redelivered=False, exchange="", routing_key="q"
        )
        data = content_frames(ch, deliver, BasicProperties(), b"z" * 5000)
        results.append(feed_in_pieces(pair.client, data, pieces))
    assert results[0] == results[1] == results[2]
    [message] = results[0]
    assert isinstance(message, MessageReceived)
    assert message.body == b"z" * 5000


def test_feed_in_pieces_of_nothing_is_the_end_of_the_stream() -> None:
    pair = ConnectionPair()
    pair.handshake()
    [lost] = feed_in_pieces(pair.client, b"", [1])
    assert isinstance(lost, ConnectionLost)


def test_transfer_with_nothing_queued_moves_nothing() -> None:
    pair = ConnectionPair()
    pair.handshake()
    assert pair.transfer(pair.server) == []  # not the end of the stream
    assert pair.transfer(pair.client) == []
    assert pair.open_channel() == 1  # the link still works both ways
    assert pair.client.state is pair.server.state is ConnectionState.OPEN


def test_a_server_side_brings_its_own_core() -> None:
    core = Connection(Role.SERVER)

    class Refuser:
        """A server application that refuses every login."""

        def __init__(self) -> None:
            self.core = core
            self.lost_calls = 0

        def handle(self, event: Event, /) -> None:
            if isinstance(event, AuthenticationRequested):
                self.core.refuse_authentication("no")

        def protocol_error(self, error: RemoteProtocolError, /) -> None:
            raise AssertionError(error)

        def flush(self) -> None:
            pass

        def lost(self) -> None:
            self.lost_calls += 1

    with pytest.raises(ValueError, match="server_config"):
        ConnectionPair(server_config=ConnectionConfig(), server_side=Refuser())
    pair = ConnectionPair(server_side=Refuser())
    assert pair.server is core
    with pytest.raises(AssertionError, match="reply_code=403"):
        pair.handshake()


def test_end_of_stream_is_explicit() -> None:
    pair = ConnectionPair()
    pair.handshake()
    channel = pair.open_channel()
    pair.client.send_method(channel, QueueDeclare(queue="q"))
    declared, lost = pair.end_of_stream(pair.client)  # what was queued moves first
    assert isinstance(declared, MethodReceived)
    assert isinstance(lost, ConnectionLost)
    pair.client.send_method(channel, QueueDeclare(queue="r"))
    with pytest.raises(RuntimeError, match="after the end of the stream"):
        pair.transfer(pair.client)


def test_parse_frames_reads_what_a_core_wrote() -> None:
    client = Connection(Role.CLIENT)
    assert parse_frames(client.data_to_send()) == []  # the protocol header alone
    pair = ConnectionPair()
    pair.handshake()
    ch = pair.open_channel()
    pair.client.publish(ch, BasicPublish(routing_key="q"), BasicProperties(), b"b" * 5000)
    frames = parse_frames(pair.client.data_to_send(), frame_max=pair.client.frame_max)
    assert [type(f) for f in frames] == [MethodFrame, ContentHeaderFrame, ContentBodyFrame]
    with pytest.raises(ValueError, match="octets after the last whole frame"):
        parse_frames(method_frame(1, ChannelOpen())[:-1])


def test_open_channel_reports_a_channel_that_did_not_open() -> None:
    pair = ConnectionPair()
    pair.handshake()
    assert pair.open_channel() == 1
    # The server closes the connection: it discards the channel.open crossing its close.
    pair.server.close(320, "CONNECTION_FORCED")
    with pytest.raises(AssertionError, match="channel 2 did not open"):
        pair.open_channel()


def _doc_examples() -> list[str]:
    text = (ROOT / "docs" / "testing.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


@pytest.mark.parametrize("index", range(len(_doc_examples())))
def test_docs_testing_examples_run(index: int) -> None:
    # docs/testing.md promises that its examples run as they stand.
    exec(compile(_doc_examples()[index], f"docs/testing.md example {index}", "exec"), {})
