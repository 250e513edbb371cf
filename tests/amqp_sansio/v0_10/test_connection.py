"""The 0-10 connection, both roles: protocol headers, SASL, tune, open/redirect, heartbeats,
close, errors. Most tests run twice: whole and one octet at a time."""

from __future__ import annotations

import pytest

from amqp_sansio.v0_10 import (
    NEED_DATA,
    PROTOCOL_HEADER_0_10,
    AuthenticationRequested,
    Connection,
    ConnectionClose,
    ConnectionClosed,
    ConnectionConfig,
    ConnectionHeartbeat,
    ConnectionLost,
    ConnectionOpened,
    ConnectionRedirected,
    ConnectionStart,
    ConnectionState,
    ConnectionTune,
    ConnectionTuneOk,
    HeartbeatTimeout,
    LocalProtocolError,
    RemoteProtocolError,
    Role,
    SecureRequested,
    VirtualHostRequested,
    is_protocol_header_0_10,
)
from amqp_sansio.v0_10.testing import (
    ConnectionPair,
    control_frames,
    feed,
    feed_in_pieces,
    get_all_events,
    parse_assemblies,
)

BYTE_AT_A_TIME = pytest.mark.parametrize("byte_at_a_time", [False, True], ids=["whole", "bytewise"])


@BYTE_AT_A_TIME
def test_handshake_with_plain(byte_at_a_time: bool) -> None:
    pair = ConnectionPair(
        ConnectionConfig(username="alice", password="pw", virtual_host="vh", heartbeat=30),
        ConnectionConfig(heartbeat_min=10, heartbeat_max=20, known_hosts=("a:1",)),
        byte_at_a_time=byte_at_a_time,
    )
    client_events, server_events = pair.handshake()
    auth = next(e for e in server_events if isinstance(e, AuthenticationRequested))
    assert (auth.mechanism, auth.username, auth.response) == ("PLAIN", "alice", b"\0alice\0pw")
    assert "pw" not in repr(auth)
    assert (
        next(e for e in server_events if isinstance(e, VirtualHostRequested)).virtual_host == "vh"
    )
    (opened,) = client_events
    assert isinstance(opened, ConnectionOpened)
    assert (opened.heartbeat, opened.max_frame_size, opened.known_hosts) == (20, 65535, ("a:1",))
    assert pair.server.heartbeat == pair.client.heartbeat == 20
    assert opened.server_properties["product"].value == "amqp-sansio"  # type: ignore[union-attr]


def test_client_picks_anonymous_without_a_username() -> None:
    pair = ConnectionPair(ConnectionConfig(username=None))
    _, server_events = pair.handshake()
    auth = next(e for e in server_events if isinstance(e, AuthenticationRequested))
    assert (auth.mechanism, auth.response, auth.username) == ("ANONYMOUS", b"", None)


def test_client_refuses_a_server_without_its_mechanism() -> None:
    pair = ConnectionPair(None, ConnectionConfig(mechanisms=("CRAM-MD5",)))
    pair.transfer(pair.client)
    with pytest.raises(RemoteProtocolError, match="CRAM-MD5") as caught:
        pair.transfer(pair.server)
    assert caught.value.reply_code == 320
    (close,) = parse_assemblies(pair.client.data_to_send())
    assert isinstance(close.op, ConnectionClose)
    assert close.op.reply_code == 320


def start(pair: ConnectionPair) -> list[object]:
    """Headers and start: the server's events for start-ok."""
    assert pair.transfer(pair.client) == []
    assert pair.transfer(pair.server) == []
    return list(pair.transfer(pair.client))


def test_secure_round_trip_and_refusals() -> None:
    pair = ConnectionPair(
        ConnectionConfig(mechanism="X-TEST", sasl_response=b"hello"),
        ConnectionConfig(mechanisms=("X-TEST",)),
    )
    [auth] = start(pair)
    assert isinstance(auth, AuthenticationRequested)
    assert auth.response == b"hello"
    pair.server.send_secure(b"challenge")
    [secure] = pair.transfer(pair.server)
    assert secure == SecureRequested(challenge=b"challenge")
    with pytest.raises(LocalProtocolError):
        pair.server.accept_authentication()  # nothing to answer yet
    pair.client.answer_secure(b"answer")
    [again] = pair.transfer(pair.client)
    assert isinstance(again, AuthenticationRequested)
    assert again.response == b"answer"
    pair.server.refuse_authentication("bad")
    [closed] = pair.transfer(pair.server)
    assert closed == ConnectionClosed(reply_code=320, reply_text="bad", by_peer=True)
    [done] = pair.transfer(pair.client)
    assert isinstance(done, ConnectionClosed)
    assert not done.by_peer
    with pytest.raises(LocalProtocolError):
        pair.client.answer_secure(b"late")


def test_virtual_host_refused_or_redirected() -> None:
    pair = ConnectionPair()
    start(pair)
    pair.server.accept_authentication()
    pair.transfer(pair.server)
    [open_] = pair.transfer(pair.client)
    assert isinstance(open_, VirtualHostRequested)
    pair.server.redirect("elsewhere:5672", ["b:1", "c:2"])
    [redirected] = pair.transfer(pair.server)
    assert redirected == ConnectionRedirected(host="elsewhere:5672", known_hosts=("b:1", "c:2"))
    assert pair.client.state is pair.server.state is ConnectionState.CLOSED

    pair = ConnectionPair()
    start(pair)
    pair.server.accept_authentication()
    pair.transfer(pair.server)
    pair.transfer(pair.client)
    pair.server.refuse_virtual_host()
    [closed] = pair.transfer(pair.server)
    assert isinstance(closed, ConnectionClosed)
    assert closed.reply_code == 402


def test_server_answers_a_0_9_1_header_with_its_own_and_fails() -> None:
    server = Connection(Role.SERVER)
    with pytest.raises(RemoteProtocolError, match="AMQP 0-9-1"):
        feed(server, b"AMQP\x00\x00\x09\x01")
    assert server.data_to_send() == PROTOCOL_HEADER_0_10
    with pytest.raises(RemoteProtocolError):
        server.next_event()  # sticky


def test_server_refuses_what_is_not_amqp_at_once() -> None:
    server = Connection(Role.SERVER)
    with pytest.raises(RemoteProtocolError, match="not an AMQP protocol header"):
        feed(server, b"GET")
    assert server.data_to_send() == PROTOCOL_HEADER_0_10


def test_client_recognises_a_server_answering_another_header() -> None:
    client = Connection(Role.CLIENT)
    assert client.data_to_send() == PROTOCOL_HEADER_0_10
    with pytest.raises(RemoteProtocolError, match="AMQP 0-9-1") as caught:
        feed(client, b"AMQP\x00\x00\x09\x01", byte_at_a_time=True)
    assert caught.value.reply_code == 501
    assert client.data_to_send() == b""  # nothing to answer: the server closes


def test_dispatcher_seam_header_already_consumed() -> None:
    client = Connection(Role.CLIENT)
    data = client.data_to_send()
    assert is_protocol_header_0_10(data)
    server = Connection(Role.SERVER, header_consumed=True)
    reply = server.data_to_send()
    assert reply.startswith(PROTOCOL_HEADER_0_10)
    assert isinstance(parse_assemblies(reply)[0].op, ConnectionStart)
    assert feed(client, reply) == []
    [auth] = feed(server, client.data_to_send())
    assert isinstance(auth, AuthenticationRequested)


def test_tune_negotiates_down_and_the_server_checks_tune_ok() -> None:
    pair = ConnectionPair(
        ConnectionConfig(channel_max=10, max_frame_size=8192),
        ConnectionConfig(channel_max=100, max_frame_size=16384),
    )
    pair.handshake()
    assert (pair.client.channel_max, pair.client.max_frame_size) == (10, 8192)
    assert (pair.server.channel_max, pair.server.max_frame_size) == (10, 8192)

    server = Connection(Role.SERVER, ConnectionConfig(channel_max=5))
    client = Connection(Role.CLIENT)
    feed(server, client.data_to_send())
    feed(client, server.data_to_send())
    feed(server, client.data_to_send())
    server.accept_authentication()
    server.data_to_send()
    # a client that asks for more channels than offered
    data = control_frames(0, ConnectionTuneOk(channel_max=9))
    with pytest.raises(RemoteProtocolError, match="channel-max 9"):
        feed(server, data)


def test_client_refuses_a_tune_below_the_minimum_frame_size() -> None:
    client = Connection(Role.CLIENT)
    server = Connection(Role.SERVER)
    feed(server, client.data_to_send())
    feed(client, server.data_to_send())
    feed(server, client.data_to_send())
    server.data_to_send()
    with pytest.raises(RemoteProtocolError, match="MIN-MAX-FRAME-SIZE"):
        feed(client, control_frames(0, ConnectionTune(max_frame_size=512)))


def test_controls_out_of_order_are_protocol_errors() -> None:
    pair = ConnectionPair()
    pair.handshake()
    with pytest.raises(RemoteProtocolError, match=r"connection\.tune from the server"):
        feed(pair.client, control_frames(0, ConnectionTune()))
    pair = ConnectionPair()
    pair.handshake()
    with pytest.raises(RemoteProtocolError, match="belongs on channel 0"):
        feed(
            pair.client,
            control_frames(3, ConnectionHeartbeat()) + control_frames(3, ConnectionTune()),
        )


@BYTE_AT_A_TIME
def test_close_both_ways_and_crossing(byte_at_a_time: bool) -> None:
    pair = ConnectionPair(byte_at_a_time=byte_at_a_time)
    pair.handshake()
    pair.client.close(200, "bye")
    [closed] = pair.transfer(pair.client)
    assert closed == ConnectionClosed(reply_code=200, reply_text="bye", by_peer=True)
    [done] = pair.transfer(pair.server)
    assert done == ConnectionClosed(reply_code=200, reply_text="bye", by_peer=False)
    with pytest.raises(LocalProtocolError):
        pair.client.close()

    pair = ConnectionPair(byte_at_a_time=byte_at_a_time)
    pair.handshake()
    pair.client.close()
    pair.server.close(320, "shutting down")
    client_data, server_data = pair.client.data_to_send(), pair.server.data_to_send()
    assert feed(pair.client, server_data) == []
    assert feed(pair.server, client_data) == []
    [a] = pair.transfer(pair.client)
    [b] = pair.transfer(pair.server)
    assert isinstance(a, ConnectionClosed)
    assert isinstance(b, ConnectionClosed)
    assert pair.client.state is pair.server.state is ConnectionState.CLOSED


def test_octets_after_the_close_handshake_are_ignored() -> None:
    pair = ConnectionPair()
    pair.handshake()
    pair.server.close()
    pair.transfer(pair.server)
    assert pair.client.state is ConnectionState.CLOSED
    assert feed(pair.client, b"\xff" * 40) == []  # not even parsed: no framing error
    assert pair.client.data_to_send() != b""  # the close-ok, written before


def test_end_of_stream_is_connection_lost() -> None:
    pair = ConnectionPair()
    pair.handshake()
    assert feed(pair.client, b"") == [ConnectionLost(incomplete_commands=())]
    with pytest.raises(RuntimeError):
        pair.client.receive_data(b"x")
    assert pair.client.next_event() is NEED_DATA


def test_errors_are_sticky_and_close_with_501() -> None:
    pair = ConnectionPair()
    pair.handshake()
    with pytest.raises(RemoteProtocolError) as caught:
        feed(pair.server, b"\xff" * 12)
    assert caught.value.reply_code == 501
    (close,) = parse_assemblies(pair.server.data_to_send())
    assert isinstance(close.op, ConnectionClose)
    assert close.op.reply_code == 501
    with pytest.raises(RemoteProtocolError):
        pair.server.receive_data(b"more")
    with pytest.raises(LocalProtocolError, match="failed earlier"):
        pair.server.attach("x")
    pair.client.send_failed()
    with pytest.raises(LocalProtocolError, match="send failed"):
        pair.client.close()


def test_sessions_need_an_open_connection() -> None:
    client = Connection(Role.CLIENT)
    with pytest.raises(LocalProtocolError, match="state AWAIT_HEADER"):
        client.attach("early")
    assert "role=client" in repr(client)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0


def test_heartbeats_go_out_when_idle_and_silence_is_a_timeout() -> None:
    pair = ConnectionPair(ConnectionConfig(heartbeat=10), ConnectionConfig(heartbeat_min=1))
    pair.handshake()
    client = pair.client
    assert client.heartbeat == 10
    assert client.next_deadline() == 0.0
    client.handle_timer(100.0)
    assert client.next_deadline() == 105.0
    client.handle_timer(105.0)  # nothing written since: a heartbeat
    [heartbeat] = parse_assemblies(client.data_to_send())
    assert isinstance(heartbeat.op, ConnectionHeartbeat)
    # the server sees heartbeats as liveness only
    assert feed(pair.server, control_frames(0, ConnectionHeartbeat())) == []
    client.handle_timer(110.0)
    client.data_to_send()
    feed(client, control_frames(0, ConnectionHeartbeat()))
    client.handle_timer(115.0)  # the peer was heard: alive
    client.handle_timer(136.0)  # then silence for two intervals
    assert get_all_events(client) == [HeartbeatTimeout()]
    assert client.next_deadline() is None
    with pytest.raises(LocalProtocolError, match="two heartbeat intervals"):
        client.attach("late")


def test_no_heartbeat_unless_the_server_offers_one() -> None:
    pair = ConnectionPair(ConnectionConfig(heartbeat=10))
    pair.handshake()
    assert pair.client.heartbeat == 0
    assert pair.client.next_deadline() is None
    pair.client.handle_timer(5.0)
    assert pair.client.data_to_send() == b""


def test_not_reading_keeps_the_peer_alive() -> None:
    pair = ConnectionPair(ConnectionConfig(heartbeat=2), ConnectionConfig(heartbeat_min=2))
    pair.handshake()
    server = pair.server
    server.handle_timer(0.0)
    for now in (1.0, 2.0, 3.0, 4.0, 5.0, 6.0):
        server.handle_timer(now, reading=False)
    assert get_all_events(server) == []


def test_random_pieces_give_the_same_events() -> None:
    import random

    pair = ConnectionPair()
    pair.handshake()
    whole_pair = ConnectionPair()
    whole_pair.handshake()
    s1, _ = pair.attach("x")
    s2, _ = whole_pair.attach("x")
    for session in (s1, s2):
        for n in range(20):
            session.transfer("", b"m" * n)
    pieces = feed_in_pieces(pair.server, pair.client.data_to_send(), random.Random(5))
    whole = feed(whole_pair.server, whole_pair.client.data_to_send())
    assert pieces == whole
    assert len(whole) == 20


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="max_frame_size"):
        ConnectionConfig(max_frame_size=100)
    with pytest.raises(ValueError, match="channel_max"):
        ConnectionConfig(channel_max=0)
    with pytest.raises(ValueError, match="sync_every"):
        ConnectionConfig(sync_every=-1)
    assert "pw" not in repr(ConnectionConfig(password="pw"))
