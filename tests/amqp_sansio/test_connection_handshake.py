"""The handshake in both roles, through a ConnectionPair, fed whole and one byte at a time."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from amqp_sansio import (
    AuthenticationRequested,
    ConnectionClosed,
    ConnectionConfig,
    ConnectionLost,
    ConnectionOpened,
    ConnectionState,
    LocalProtocolError,
    RemoteProtocolError,
    SecureRequested,
    VirtualHostRequested,
)
from amqp_sansio._frames import PROTOCOL_HEADER_0_9, PROTOCOL_HEADER_0_9_1, PROTOCOL_HEADER_0_10
from amqp_sansio._generated.spec_0_9_1 import ConnectionClose, ConnectionStart, ConnectionTune
from amqp_sansio._table import decode_table_entries
from amqp_sansio.testing import ConnectionPair, feed, get_all_events, method_frame

if TYPE_CHECKING:
    from amqp_sansio import FieldTable

BYTEWISE = pytest.mark.parametrize("byte_at_a_time", [False, True], ids=["whole", "bytewise"])


def _to_auth(pair: ConnectionPair) -> list[object]:
    """Header, start, start-ok: return the server's events."""
    assert pair.transfer(pair.client) == []
    assert pair.transfer(pair.server) == []
    return list(pair.transfer(pair.client))


@BYTEWISE
def test_full_handshake_both_roles(byte_at_a_time: bool) -> None:
    pair = ConnectionPair(
        ConnectionConfig(connection_name="test-conn", heartbeat=30),
        ConnectionConfig(channel_max=100, frame_max=8192),
        byte_at_a_time=byte_at_a_time,
    )
    client_events, server_events = pair.handshake()
    auth, vhost, server_opened = server_events
    assert isinstance(auth, AuthenticationRequested)
    assert (auth.mechanism, auth.username) == ("PLAIN", "guest")
    assert auth.response == b"\0guest\0guest"
    assert "\\x00guest" not in repr(auth)
    assert "<redacted>" in repr(auth)
    caps = auth.client_properties["capabilities"]
    assert isinstance(caps, dict)
    assert sorted(caps) == sorted(
        [
            "publisher_confirms",
            "exchange_exchange_bindings",
            "basic.nack",
            "consumer_cancel_notify",
            "connection.blocked",
            "authentication_failure_close",
            "per_consumer_qos",
            "direct_reply_to",
        ]
    )
    assert auth.client_properties["connection_name"] == "test-conn"
    assert vhost == VirtualHostRequested(virtual_host="/")
    [client_opened] = client_events
    for opened in (client_opened, server_opened):
        assert isinstance(opened, ConnectionOpened)
        assert (opened.channel_max, opened.frame_max, opened.heartbeat) == (100, 8192, 30)
    assert pair.client.state is ConnectionState.OPEN
    assert pair.server.state is ConnectionState.OPEN


@BYTEWISE
def test_amqplain_response_is_a_table_without_size(byte_at_a_time: bool) -> None:
    pair = ConnectionPair(
        ConnectionConfig(sasl_mechanism="AMQPLAIN", username="u", password="p"),
        byte_at_a_time=byte_at_a_time,
    )
    _, server_events = pair.handshake()
    auth = server_events[0]
    assert isinstance(auth, AuthenticationRequested)
    assert auth.username == "u"
    assert decode_table_entries(auth.response, 0, len(auth.response)) == {
        "LOGIN": "u",
        "PASSWORD": "p",
    }


@BYTEWISE
def test_external_with_secure_loop(byte_at_a_time: bool) -> None:
    pair = ConnectionPair(
        ConnectionConfig(sasl_mechanism="EXTERNAL"),
        ConnectionConfig(mechanisms=("EXTERNAL",)),
        byte_at_a_time=byte_at_a_time,
    )
    [auth] = _to_auth(pair)
    assert isinstance(auth, AuthenticationRequested)
    assert (auth.mechanism, auth.response, auth.username) == ("EXTERNAL", b"", None)
    pair.server.send_secure(b"challenge")
    assert pair.transfer(pair.server) == [SecureRequested(challenge=b"challenge")]
    pair.client.answer_secure(b"answer")
    [again] = pair.transfer(pair.client)
    assert isinstance(again, AuthenticationRequested)
    assert again.response == b"answer"
    pair.server.accept_authentication()
    pair.transfer(pair.server)
    [vhost] = pair.transfer(pair.client)
    assert isinstance(vhost, VirtualHostRequested)
    pair.server.accept_virtual_host()
    assert pair.server.state is ConnectionState.OPEN


@BYTEWISE
def test_refused_authentication_closes_with_403(byte_at_a_time: bool) -> None:
    pair = ConnectionPair(byte_at_a_time=byte_at_a_time)
    _to_auth(pair)
    pair.server.refuse_authentication("bad password")
    [closed] = pair.transfer(pair.server)
    assert closed == ConnectionClosed(
        reply_code=403,
        reply_text="ACCESS_REFUSED - bad password",
        class_id=0,  # as RabbitMQ's: no method named
        method_id=0,
        by_peer=True,
    )
    [server_closed] = pair.transfer(pair.client)
    assert isinstance(server_closed, ConnectionClosed)
    assert not server_closed.by_peer
    assert pair.client.state is pair.server.state is ConnectionState.CLOSED


@pytest.mark.parametrize(
    "capabilities",
    [{}, {"authentication_failure_close": False}, {"authentication_failure_close": 1}],
    ids=["absent", "false", "not-a-boolean"],
)
def test_refused_authentication_of_a_client_that_did_not_ask_sends_nothing(
    capabilities: FieldTable,
) -> None:
    """RabbitMQ sends the 403 close only to a client that advertised the
    authentication_failure_close capability (a boolean true); any other is dropped without a
    word, as 0-9-1 says: the server's core is CLOSED with nothing to send, and the client sees
    the transport close."""
    pair = ConnectionPair(ConnectionConfig(client_properties={"capabilities": capabilities}))
    [auth] = _to_auth(pair)
    assert isinstance(auth, AuthenticationRequested)
    pair.server.refuse_authentication("bad password")
    assert pair.server.state is ConnectionState.CLOSED
    assert pair.server.data_to_send() == b""
    [lost] = pair.end_of_stream(pair.server)
    assert isinstance(lost, ConnectionLost)
    with pytest.raises(LocalProtocolError, match="no authentication is waiting"):
        pair.server.refuse_authentication("again")


def test_refused_virtual_host_closes_with_530() -> None:
    pair = ConnectionPair(ConnectionConfig(virtual_host="nope"))
    _to_auth(pair)
    pair.server.accept_authentication()
    pair.transfer(pair.server)
    assert pair.transfer(pair.client) == [VirtualHostRequested(virtual_host="nope")]
    pair.server.refuse_virtual_host("no vhost 'nope'")
    [closed] = pair.transfer(pair.server)
    assert isinstance(closed, ConnectionClosed)
    assert (closed.reply_code, closed.class_id, closed.method_id) == (530, 10, 40)


def test_decisions_without_a_request_are_local_errors() -> None:
    pair = ConnectionPair()
    with pytest.raises(LocalProtocolError):
        pair.server.accept_authentication()
    with pytest.raises(LocalProtocolError):
        pair.server.accept_virtual_host()
    assert pair.server.data_to_send() == b""


def test_client_sends_header_first() -> None:
    pair = ConnectionPair()
    assert pair.client.data_to_send() == PROTOCOL_HEADER_0_9_1


@pytest.mark.parametrize("header", [PROTOCOL_HEADER_0_9_1, PROTOCOL_HEADER_0_9])
def test_server_accepts_0_9_1_and_0_9_headers(header: bytes) -> None:
    pair = ConnectionPair()
    assert feed(pair.server, header) == []
    assert pair.server.state is ConnectionState.AWAIT_START_OK
    # connection.start: method frame on channel 0, class 10 method 10, version 0-9
    out = pair.server.data_to_send()
    assert out[:3] == b"\x01\x00\x00"
    assert out[7:13] == b"\x00\x0a\x00\x0a\x00\x09"


@pytest.mark.parametrize(
    "header", [PROTOCOL_HEADER_0_10, b"AMQP\x00\x01\x00\x00", b"GET / HTTP/1.1\r\n"]
)
def test_server_answers_bad_header_with_its_own(header: bytes) -> None:
    pair = ConnectionPair()
    with pytest.raises(RemoteProtocolError) as info:
        feed(pair.server, header)
    assert info.value.reply_code in (501, 540)
    assert pair.server.data_to_send() == PROTOCOL_HEADER_0_9_1
    assert pair.server.state is ConnectionState.ERROR
    with pytest.raises(RemoteProtocolError):
        pair.server.next_event()


def test_client_reports_refused_header() -> None:
    pair = ConnectionPair()
    pair.client.data_to_send()
    with pytest.raises(RemoteProtocolError) as info:
        feed(pair.client, PROTOCOL_HEADER_0_9_1, byte_at_a_time=True)
    assert info.value.reply_code == 540
    assert pair.client.data_to_send() == b""


def _tuned_client(tune: ConnectionTune, config: ConnectionConfig | None = None) -> ConnectionPair:
    pair = ConnectionPair(config)
    _to_auth(pair)
    pair.server.accept_authentication()
    pair.server.data_to_send()
    pair.client.receive_data(method_frame(0, tune))
    return pair


@pytest.mark.parametrize(
    ("ours", "theirs", "wire", "effective"),
    [
        ((0, 0, None), (2047, 131072, 60), (2047, 131072, 60), (2047, 131072, 60)),
        ((10, 8192, 5), (2047, 131072, 60), (10, 8192, 5), (10, 8192, 5)),
        ((0, 0, 0), (0, 0, 0), (0, 0, 0), (65535, 2**32 - 1, 0)),
        ((100, 0, None), (0, 0, 30), (100, 0, 30), (100, 2**32 - 1, 30)),
        ((0, 0, 0), (2047, 131072, 60), (2047, 131072, 0), (2047, 131072, 0)),  # 0: off
    ],
)
def test_tune_negotiation(
    ours: tuple[int, int, int | None],
    theirs: tuple[int, int, int],
    wire: tuple[int, int, int],
    effective: tuple[int, int, int],
) -> None:
    config = ConnectionConfig(channel_max=ours[0], frame_max=ours[1], heartbeat=ours[2])
    tune = ConnectionTune(channel_max=theirs[0], frame_max=theirs[1], heartbeat=theirs[2])
    pair = _tuned_client(tune, config)
    pair.client.data_to_send()  # nothing new before the tune is parsed
    assert get_all_events(pair.client) == []
    assert (pair.client.channel_max, pair.client.frame_max, pair.client.heartbeat) == effective
    out = pair.client.data_to_send()
    # tune-ok: 7-octet frame header, class 10 method 31, then channel_max, frame_max, heartbeat
    assert out[7:11] == b"\x00\x0a\x00\x1f"
    assert out[11:19] == wire[0].to_bytes(2) + wire[1].to_bytes(4) + wire[2].to_bytes(2)


def test_tune_frame_max_below_minimum_is_refused_with_530() -> None:
    pair = _tuned_client(ConnectionTune(channel_max=0, frame_max=4095, heartbeat=0))
    pair.client.data_to_send()
    with pytest.raises(RemoteProtocolError) as info:
        pair.client.next_event()
    assert (info.value.reply_code, info.value.class_id, info.value.method_id) == (530, 10, 30)
    close = ConnectionClose(
        reply_code=530, reply_text=info.value.reply_text, class_id=10, method_id=30
    )
    assert pair.client.data_to_send() == method_frame(0, close)


@pytest.mark.parametrize(
    ("channel_max", "frame_max"),
    [(0, 131072), (2048, 131072), (2047, 0), (2047, 4095), (1, 1 << 20)],
)
def test_server_refuses_tune_ok_out_of_range(channel_max: int, frame_max: int) -> None:
    from amqp_sansio._generated.spec_0_9_1 import ConnectionTuneOk

    pair = ConnectionPair()
    _to_auth(pair)
    pair.server.accept_authentication()
    pair.server.data_to_send()
    pair.server.receive_data(
        method_frame(0, ConnectionTuneOk(channel_max=channel_max, frame_max=frame_max, heartbeat=0))
    )
    with pytest.raises(RemoteProtocolError) as info:
        pair.server.next_event()
    assert info.value.reply_code == 530
    assert pair.server.data_to_send().startswith(bytes.fromhex("0100000000"))


def test_start_with_wrong_version_is_refused() -> None:
    pair = ConnectionPair()
    pair.client.data_to_send()
    start = ConnectionStart(version_major=0, version_minor=8, server_properties={})
    pair.client.receive_data(method_frame(0, start))
    with pytest.raises(RemoteProtocolError) as info:
        pair.client.next_event()
    assert info.value.reply_code == 540


def test_password_never_in_repr() -> None:
    config = ConnectionConfig(username="alice", password="s3cret", sasl_response=b"s3cret")
    assert "s3cret" not in repr(config)
    pair = ConnectionPair(config)
    [auth] = _to_auth(pair)
    assert "s3cret" not in repr(pair.client)
    assert "s3cret" not in repr(auth)
