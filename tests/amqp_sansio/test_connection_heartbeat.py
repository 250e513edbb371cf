"""Heartbeats with a fake clock (plain floats): frames on the wire when idle and not when busy,
a dead peer detected after two silent intervals and not before, both roles."""

from __future__ import annotations

import pytest

from amqp_sansio import (
    BasicProperties,
    BasicPublish,
    Connection,
    ConnectionConfig,
    ConnectionLost,
    ConnectionState,
    HeartbeatTimeout,
    LocalProtocolError,
    MessageReceived,
    QueueDeclare,
    Role,
)
from amqp_sansio.framing import HEARTBEAT_FRAME
from amqp_sansio.testing import ConnectionPair, feed, get_all_events

INTERVAL = 10


def _pair(heartbeat: int = INTERVAL, *, byte_at_a_time: bool = False) -> tuple[ConnectionPair, int]:
    pair = ConnectionPair(
        ConnectionConfig(heartbeat=heartbeat),
        ConnectionConfig(heartbeat=heartbeat),
        byte_at_a_time=byte_at_a_time,
    )
    pair.handshake()
    ch = pair.client.open_channel()
    pair.transfer(pair.client)
    pair.transfer(pair.server)
    return pair, ch


def test_no_deadline_when_heartbeats_are_off() -> None:
    pair, _ = _pair(heartbeat=0)
    for conn in (pair.client, pair.server):
        assert conn.heartbeat == 0
        assert conn.next_deadline() is None
        conn.handle_timer(1000.0)
        assert conn.data_to_send() == b""
        assert get_all_events(conn) == []


def test_no_deadline_before_tuning() -> None:
    conn = Connection(Role.CLIENT, ConnectionConfig(heartbeat=5))
    assert conn.next_deadline() is None
    conn.handle_timer(50.0)
    assert conn.data_to_send()  # the protocol header only: no heartbeat before tune
    assert conn.data_to_send() == b""


@pytest.mark.parametrize("role", ["client", "server"])
def test_first_tick_sets_the_baseline(role: str) -> None:
    pair, _ = _pair()
    conn = pair.client if role == "client" else pair.server
    assert conn.heartbeat == INTERVAL
    assert conn.next_deadline() == 0.0
    conn.handle_timer(1000.0)
    assert conn.data_to_send() == b""
    assert conn.next_deadline() == 1000.0 + INTERVAL / 2


@pytest.mark.parametrize("byte_at_a_time", [False, True], ids=["whole", "bytewise"])
def test_idle_connections_heartbeat_every_half_interval(byte_at_a_time: bool) -> None:
    pair, _ = _pair(byte_at_a_time=byte_at_a_time)
    now = 0.0
    for conn in (pair.client, pair.server):
        conn.handle_timer(now)
    sent = {"client": 0, "server": 0}
    for _ in range(40):  # 20 intervals; each side hears the other's heartbeats and lives on
        deadlines = [pair.client.next_deadline(), pair.server.next_deadline()]
        assert None not in deadlines
        now = min(d for d in deadlines if d is not None)
        for name, conn in (("client", pair.client), ("server", pair.server)):
            conn.handle_timer(now)
            data = conn.data_to_send()
            assert data in (b"", HEARTBEAT_FRAME)
            sent[name] += len(data) // len(HEARTBEAT_FRAME)
            if data:  # feeding b"" would close the transport
                assert feed(pair.peer(conn), data, byte_at_a_time=byte_at_a_time) == []
    assert now == 20 * INTERVAL
    assert sent == {"client": 40, "server": 40}
    assert pair.client.state is pair.server.state is ConnectionState.OPEN


def test_busy_connection_sends_no_heartbeat() -> None:
    pair, ch = _pair()
    pair.client.handle_timer(0.0)
    for tick in range(1, 20):
        pair.client.publish(ch, BasicPublish(routing_key="q"), BasicProperties(), b"busy")
        assert [type(e) for e in pair.transfer(pair.client)] == [MessageReceived]
        pair.client.receive_data(HEARTBEAT_FRAME)  # the server is alive
        pair.client.handle_timer(tick * INTERVAL / 2)
        assert pair.client.data_to_send() == b""


def test_buffers_to_send_counts_as_sending() -> None:
    pair, ch = _pair()
    pair.client.handle_timer(0.0)
    pair.client.publish(ch, BasicPublish(), BasicProperties(), b"x" * 100_000)
    assert len(pair.client.buffers_to_send()) > 1
    pair.client.handle_timer(5.0)
    assert pair.client.buffers_to_send() == []
    pair.client.handle_timer(10.0)  # idle since the previous check
    assert b"".join(pair.client.buffers_to_send()) == HEARTBEAT_FRAME
    pair.client.handle_timer(15.0)  # only our own heartbeat went out: still idle
    assert b"".join(pair.client.buffers_to_send()) == HEARTBEAT_FRAME


@pytest.mark.parametrize("role", ["client", "server"])
def test_dead_peer_detected_after_two_silent_intervals(role: str) -> None:
    pair, ch = _pair()
    conn = pair.client if role == "client" else pair.server
    if role == "client":
        request = QueueDeclare(queue="q")
        conn.send_method(ch, request)
        conn.data_to_send()
    conn.handle_timer(100.0)
    for now in (105.0, 110.0, 115.0, 119.5):  # silence, but less than two intervals
        conn.handle_timer(now)
        assert conn.data_to_send() in (b"", HEARTBEAT_FRAME)
        assert get_all_events(conn) == []
    assert conn.next_deadline() == 100.0 + 2 * INTERVAL
    conn.handle_timer(120.0)
    assert conn.next_event() == HeartbeatTimeout()
    assert get_all_events(conn) == []
    assert conn.state is ConnectionState.ERROR
    assert conn.next_deadline() is None
    assert conn.data_to_send() == b""  # nothing queued for a dead peer
    with pytest.raises(LocalProtocolError) as info:
        conn.close()
    assert "heartbeat" in info.value.reply_text
    with pytest.raises(LocalProtocolError):
        conn.send_method(ch, QueueDeclare(queue="other"))
    # Late octets are not parsed; closing the transport reports what was lost.
    conn.receive_data(HEARTBEAT_FRAME)
    assert get_all_events(conn) == []
    lost = feed(conn, b"")
    pending = ((ch, request),) if role == "client" else ()
    assert lost == [ConnectionLost(pending_requests=pending, unconfirmed_publishes=())]
    assert conn.next_deadline() is None
    assert repr(conn).startswith(f"<Connection role={role} state=CLOSED")


def test_received_octets_push_the_timeout_back() -> None:
    pair, _ = _pair()
    client = pair.client
    client.handle_timer(0.0)
    client.handle_timer(5.0)
    client.receive_data(HEARTBEAT_FRAME)
    client.handle_timer(10.0)  # activity seen at this tick
    for now in (15.0, 20.0, 25.0, 29.0):
        client.handle_timer(now)
        assert get_all_events(client) == []
    assert client.next_deadline() == 30.0
    client.handle_timer(30.0)
    assert get_all_events(client) == [HeartbeatTimeout()]


def _run_timers(conn: Connection) -> list[float]:
    """Call ``handle_timer`` at each deadline, as an adapter's timer does, until the peer is
    declared dead; returns the times of the ticks."""
    ticks = []
    while (deadline := conn.next_deadline()) is not None:
        conn.handle_timer(deadline)
        ticks.append(deadline)
        if get_all_events(conn) == [HeartbeatTimeout()]:
            return ticks
    raise AssertionError(f"no heartbeat timeout after the ticks {ticks}")


@pytest.mark.parametrize("role", ["client", "server"])
def test_dead_peer_counts_from_the_arrival_the_adapter_gives(role: str) -> None:
    # With the read's time, two intervals count from the last octet itself, not from the tick
    # that noticed it (which came up to half an interval later: 2.5 intervals of silence).
    pair, _ = _pair()
    conn = pair.client if role == "client" else pair.server
    conn.handle_timer(0.0)
    conn.handle_timer(5.0)
    conn.receive_data(HEARTBEAT_FRAME, now=6.0)
    assert conn.next_deadline() == 10.0  # the next heartbeat check
    assert _run_timers(conn) == [10.0, 15.0, 20.0, 25.0, 6.0 + 2 * INTERVAL]


def test_the_latest_arrival_counts() -> None:
    pair, _ = _pair()
    client = pair.client
    client.handle_timer(0.0)
    client.receive_data(HEARTBEAT_FRAME)
    client.handle_timer(5.0)  # activity seen at this tick (no arrival time given)
    client.receive_data(HEARTBEAT_FRAME[:1], now=4.0)  # older than what the tick saw
    client.receive_data(HEARTBEAT_FRAME[1:], now=5.5)
    assert _run_timers(client) == [10.0, 15.0, 20.0, 25.0, 5.5 + 2 * INTERVAL]


def test_timer_after_close_does_nothing() -> None:
    pair, _ = _pair()
    pair.client.handle_timer(0.0)
    pair.client.close()
    pair.transfer(pair.client)
    pair.transfer(pair.server)
    assert pair.client.state is ConnectionState.CLOSED
    assert pair.client.next_deadline() is None
    pair.client.handle_timer(1000.0)
    assert pair.client.data_to_send() == b""
    assert get_all_events(pair.client) == []


def test_silence_while_reading_is_paused_is_not_a_dead_peer() -> None:
    # An adapter that stops reading for backpressure says so; heartbeats still go out.
    pair, _ = _pair()
    conn = pair.client
    conn.handle_timer(0.0)
    now = 0.0
    for _ in range(10):  # five intervals of silence
        now += INTERVAL / 2
        conn.handle_timer(now, reading=False)
        assert get_all_events(conn) == []
        assert conn.data_to_send() == HEARTBEAT_FRAME
    # Reading again: two silent intervals from here are a dead peer, as usual.
    conn.handle_timer(now + 2 * INTERVAL)
    assert get_all_events(conn) == [HeartbeatTimeout()]
