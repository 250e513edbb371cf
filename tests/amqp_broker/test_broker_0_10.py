"""The embedded broker's 0-10 side: seen by qpid-python 1.36's own client (Python 2.7), round
trips through ``amq.direct`` with application headers, small and 64 KiB bodies (split across
frames both ways); the broker's limits applied to 0-10 connections."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

import amqp_blocking
import amqp_broker
from amqp_broker import BrokerOptions
from amqp_sansio import header_for
from amqp_sansio.client import ConnectionForced, ConnectionParameters
from tests.support.broker_0_10 import brokers_in_thread
from tests.support.qpid import require_qpid, run_py2

SCRIPT = Path(__file__).resolve().parents[1] / "support" / "py2" / "qpid_roundtrip_0_10.py2"


@pytest.mark.parametrize("size", [32, 64 * 1024])
def test_qpid_python_round_trip(size: int) -> None:
    require_qpid()
    with brokers_in_thread(1) as ports:
        done = run_py2(SCRIPT, "127.0.0.1", str(ports[0].amqp_0_10), "20", str(size))
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    result = json.loads(line[7:])
    assert result["bodies_ok"] == 20
    assert result["headers"] == [{"n": n, "from": "qpid-python"} for n in range(20)]
    assert result["keys"] == [result["queue"]] * 20
    assert result["left"] == 0


def test_the_handshake_timeout_applies_to_0_10_clients() -> None:
    options = BrokerOptions(handshake_timeout=0.2)
    with amqp_broker.run_in_thread(options=options) as url:
        params = ConnectionParameters.from_url(url)
        with socket.create_connection((params.host, params.port), timeout=30) as sock:
            sock.sendall(header_for("0-10"))
            received = b""
            while chunk := sock.recv(4096):  # the header and connection.start, then EOF
                received += chunk
    assert received.startswith(header_for("0-10"))


def test_a_0_10_client_beyond_channel_max_is_refused() -> None:
    options = BrokerOptions(channel_max=2)
    with (
        amqp_broker.run_in_thread(options=options) as url,
        amqp_blocking.connect(url, protocol="0-10") as conn,
    ):
        first = conn.open_session()
        with pytest.raises(ValueError, match="no free channel"):
            conn.open_session()
        first.close()


def test_shutdown_closes_0_10_connections_with_320() -> None:
    with amqp_broker.run_in_thread() as url:
        conn = amqp_blocking.connect(url, protocol="0-10")
        session = conn.open_session()
        session.queue_declare("q", auto_delete=True)
    # the broker stopped: connection.close 320, as its 0-9-1 clients get it
    with pytest.raises(ConnectionForced, match="broker forced connection closure"):
        session.queue_query("q")
    assert conn.is_closed
    conn.close()
