"""The embedded broker's 0-10 side: seen by qpid-python 1.36's own client (Python 2.7), round
trips through ``amq.direct`` with application headers, small and 64 KiB bodies (split across
frames both ways); qpid.messaging acknowledging; when the broker reports completion (asked, not
after every read); a deleted queue's acquired messages in its alternate exchange; the broker's
limits applied to 0-10 connections."""

from __future__ import annotations

import json
import socket
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import amqp_blocking
import amqp_broker
from amqp_broker import BrokerOptions
from amqp_sansio import header_for
from amqp_sansio.client import ConnectionForced, ConnectionParameters
from tests.support.broker_0_10 import brokers_in_thread
from tests.support.qpid import require_qpid, run_py2

if TYPE_CHECKING:
    from subprocess import CompletedProcess

    from amqp_sansio.v0_10.client import Message

PY2 = Path(__file__).resolve().parents[1] / "support" / "py2"
SCRIPT = PY2 / "qpid_roundtrip_0_10.py2"


def _result(done: CompletedProcess[str]) -> dict[str, object]:
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    found: dict[str, object] = json.loads(line[7:])
    return found


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.mark.parametrize("size", [32, 64 * 1024])
def test_qpid_python_round_trip(size: int) -> None:
    require_qpid()
    with brokers_in_thread(1) as ports:
        done = run_py2(SCRIPT, "127.0.0.1", str(ports[0].amqp_0_10), "20", str(size))
    result = _result(done)
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


def test_qpid_messaging_acknowledges_what_it_fetched() -> None:
    # qpid.messaging dies on a session.known-completed it did not ask for (it never asks):
    # the broker answered its session.completed with one after each acknowledge
    require_qpid()
    queue = _unique("qpid-messaging")
    with brokers_in_thread(1) as ports:
        url = ports[0].url()
        with amqp_blocking.connect_0_10(url) as conn, conn.session() as session:
            session.queue_declare(queue)
        done = run_py2(
            PY2 / "qpid_messaging_ack_0_10.py2", "127.0.0.1", str(ports[0].amqp_0_10), queue, "3"
        )
        with amqp_blocking.connect_0_10(url) as conn, conn.session() as session:
            left = session.queue_query(queue).message_count
            session.queue_delete(queue)
    result = _result(done)
    assert result["bodies"] == [f"message {n}" for n in range(3)]
    assert result["redelivered"] == [False] * 3
    assert result["unacked"] == 0
    assert left == 0  # accepted: gone from the queue


def test_qpid_python_publishes_2000_transfers_with_one_report() -> None:
    # qpid-python spends time in proportion to its outstanding commands on every
    # session.completed: the broker reports when asked (here the final execution.sync), not
    # after every read, so 2,000 unsynced 64 KiB transfers cost one report, not 2,000
    require_qpid()
    queue = _unique("qpid-bulk")
    with brokers_in_thread(1) as ports:
        url = ports[0].url()
        with amqp_blocking.connect_0_10(url) as conn, conn.session() as session:
            session.queue_declare(queue)
        done = run_py2(
            PY2 / "qpid_bulk_0_10.py2",
            "127.0.0.1",
            str(ports[0].amqp_0_10),
            queue,
            "2000",
            str(64 * 1024),
            timeout=300,
        )
        with amqp_blocking.connect_0_10(url) as conn, conn.session() as session:
            session.queue_delete(queue)
    result = _result(done)
    print(f"2,000 transfers of 64 KiB: {result['seconds']:.2f} s, {result['reports']} report(s)")
    assert result["queued"] == 2000
    assert result["reports"] == 1
    assert result["ranges"] == [1]  # one range: every command up to the sync


def _get(subscription: amqp_blocking.Subscription010) -> Message:
    message = subscription.get(timeout=10)
    assert message is not None
    return message


def _drain(session: amqp_blocking.Session010, queue: str) -> list[bytes]:
    """Every message of *queue*, accepted."""
    count = session.queue_query(queue).message_count or 0
    sub = session.subscribe(queue, prefetch=max(count, 1))
    bodies = []
    for _ in range(count):
        message = _get(sub)
        bodies.append(message.body)
        message.accept()
    sub.cancel()
    session.sync()
    return bodies


def test_a_deleted_queues_acquired_messages_go_to_its_alternate_exchange() -> None:
    # 5 acquired and not accepted, 2 ready: all 7 reach the alternate when the queue goes, in
    # the queue's order; settling the 5 afterwards (accept, release, reject, the session's
    # end) neither duplicates nor loses one
    alt, dead, queue = _unique("alt"), _unique("dead"), _unique("q")
    with brokers_in_thread(1) as ports:
        url = ports[0].url()
        with amqp_blocking.connect_0_10(url) as conn, conn.session() as admin:
            admin.exchange_declare(alt, "fanout")
            admin.queue_declare(dead)
            admin.exchange_bind(dead, alt)
            admin.queue_declare(queue, alternate_exchange=alt)
            for n in range(7):
                admin.transfer("", b"m%d" % n, routing_key=queue)
            with amqp_blocking.connect_0_10(url) as other:
                consumer = other.open_session()
                sub = consumer.subscribe(queue, prefetch=5)  # 5 delivered before it returns
                held = [_get(sub), _get(sub)]  # taking 2 of 5 grants no credit back
                admin.queue_delete(queue)
                assert admin.queue_query(dead).message_count == 7
                held[0].accept()
                held[1].release()
                _get(sub).reject()
                consumer.sync()
                assert admin.queue_query(dead).message_count == 7
            # the connection closed with two of them unsettled
            assert admin.queue_query(dead).message_count == 7
            assert _drain(admin, dead) == [b"m%d" % n for n in range(7)]
            admin.queue_delete(dead)
            admin.exchange_delete(alt)


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_accepted_in_a_transaction_when_the_queue_goes(outcome: str) -> None:
    # accepted, not committed: a commit consumes them; a rollback makes them unaccepted
    # messages of a deleted queue, which go to its alternate exchange then
    alt, dead, queue = _unique("alt"), _unique("dead"), _unique("q")
    with brokers_in_thread(1) as ports:
        url = ports[0].url()
        with amqp_blocking.connect_0_10(url) as conn, conn.session() as admin:
            admin.exchange_declare(alt, "fanout")
            admin.queue_declare(dead)
            admin.exchange_bind(dead, alt)
            admin.queue_declare(queue, alternate_exchange=alt)
            for n in range(3):
                admin.transfer("", b"m%d" % n, routing_key=queue)
            with amqp_blocking.connect_0_10(url) as other:
                consumer = other.open_session()
                consumer.tx_select()
                sub = consumer.subscribe(queue, prefetch=10)
                for _ in range(3):
                    _get(sub).accept()
                consumer.sync()
                admin.queue_delete(queue)
                assert admin.queue_query(dead).message_count == 0
                if outcome == "commit":
                    consumer.tx_commit()
                else:
                    consumer.tx_rollback()
                expected = 0 if outcome == "commit" else 3
                assert admin.queue_query(dead).message_count == expected
            assert _drain(admin, dead) == [b"m%d" % n for n in range(expected)]
            admin.queue_delete(dead)
            admin.exchange_delete(alt)
