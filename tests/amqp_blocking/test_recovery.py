"""amqp_blocking's connection recovery (issue 17) against the embedded broker killed and
restarted on the same port: channels and consumer iterators outlive the connection, the topology
comes back (a server-named queue under a new name), events arrive by callback and iterator, and
a delivery of the lost connection cannot be settled on the new one."""

from __future__ import annotations

import socket
import threading
import time
from typing import TYPE_CHECKING

import pytest

import amqp_blocking
from amqp_blocking import (
    ConnectionLostError,
    Recovered,
    RecoveryAttempt,
    RecoveryLost,
    RecoveryPolicy,
    RecoveryState,
    StaleDeliveryError,
)

from ..support.restartable import RestartableBroker, restartable_broker

if TYPE_CHECKING:
    from amqp_sansio.client import RecoveryEvent

POLICY = RecoveryPolicy(initial_delay=0.1, multiplier=1, jitter=0, max_duration=60)
WAIT = 30.0


def _state(conn: amqp_blocking.Connection) -> RecoveryState:
    """A call, so mypy does not narrow one reading of the property to the next."""
    return conn.recovery_state


def test_recovers_after_the_broker_restarts() -> None:
    seen: list[RecoveryEvent] = []
    with restartable_broker() as broker:
        with amqp_blocking.connect(broker.url, recovery=POLICY) as conn:
            conn.on_recovery(seen.append)
            events = conn.recovery_events()
            ch = conn.channel()
            ch.queue_declare("jobs")
            server_named = ch.queue_declare("", exclusive=True).queue
            ch.queue_bind(server_named, "amq.fanout")
            with ch.basic_consume("jobs") as jobs, ch.basic_consume(server_named) as fanout:
                ch.basic_publish(b"before", routing_key="jobs")
                before = jobs.get(WAIT)
                assert before is not None
                assert before.epoch == conn.epoch == 0

                broker.kill()
                lost = events.get(WAIT)
                assert isinstance(lost, RecoveryLost)
                assert isinstance(lost.cause, ConnectionLostError)
                assert _state(conn) is RecoveryState.RECOVERING
                broker.start()
                event = events.get(WAIT)
                while isinstance(event, RecoveryAttempt):  # refused while it was down
                    event = events.get(WAIT)
                assert isinstance(event, Recovered)
                assert _state(conn) is RecoveryState.OPEN
                assert conn.epoch == event.epoch == 1
                assert event.renamed_queues[server_named] != server_named

                with pytest.raises(StaleDeliveryError, match="epoch 0"):
                    before.ack()

                ch.basic_publish(b"after", routing_key="jobs")
                ch.basic_publish(b"to all", exchange="amq.fanout")
                after = jobs.get(WAIT)
                assert after is not None
                assert (after.body, after.epoch) == (b"after", 1)
                after.ack()
                to_all = fanout.get(WAIT)
                assert to_all is not None
                assert to_all.body == b"to all"
                assert ch.queue_declare("jobs", passive=True).consumer_count == 1
        assert _state(conn) is RecoveryState.CLOSED
        assert list(events) == []  # ended with the connection
    assert [type(e) for e in seen if not isinstance(e, RecoveryAttempt)] == [
        RecoveryLost,
        Recovered,
    ]


def test_a_call_during_recovery_waits_or_fails_fast() -> None:
    fail_fast = RecoveryPolicy(initial_delay=0.1, multiplier=1, jitter=0, publish_wait=0)
    with restartable_broker() as broker:
        with amqp_blocking.connect(broker.url, recovery=fail_fast) as conn:
            events = conn.recovery_events()
            ch = conn.channel()
            broker.kill()
            assert isinstance(events.get(WAIT), RecoveryLost)
            with pytest.raises(ConnectionLostError, match=r"recovering \(publish_wait is 0\)"):
                ch.basic_publish(b"x", routing_key="q")
            broker.start()
            while not isinstance(events.get(WAIT), Recovered):
                pass
            ch.basic_publish(b"x", routing_key="q")

        waiting = RecoveryPolicy(initial_delay=0.1, multiplier=1, jitter=0, publish_wait=30)
        with amqp_blocking.connect(broker.url, recovery=waiting) as conn:
            events = conn.recovery_events()
            ch = conn.channel()
            ch.queue_declare("waits")
            broker.kill()
            assert isinstance(events.get(WAIT), RecoveryLost)
            errors: list[BaseException] = []

            def publish() -> None:
                try:
                    ch.basic_publish(b"waited", routing_key="waits")
                except BaseException as exc:
                    errors.append(exc)

            publisher = threading.Thread(target=publish)
            publisher.start()
            publisher.join(0.2)
            assert publisher.is_alive()  # waiting for the connection to come back
            broker.start()
            publisher.join(WAIT)
            assert not publisher.is_alive()
            assert errors == []
            assert ch.queue_declare("waits", passive=True).message_count == 1


def test_a_publish_waiting_for_the_window_waits_for_recovery() -> None:
    # The window is full when the connection is lost: the publish that waited for room is
    # a publish during recovery (it waits, under publish_wait), not a failure of the old
    # connection.
    waiting = RecoveryPolicy(initial_delay=0.1, multiplier=1, jitter=0, publish_wait=30)
    with (
        restartable_broker() as broker,
        amqp_blocking.connect(broker.url, recovery=waiting) as conn,
    ):
        events = conn.recovery_events()
        ch = conn.channel()
        ch.queue_declare("room")
        with ch.publisher(window=1) as publisher:
            broker.pause()  # no confirm comes
            first = publisher.publish(b"first", routing_key="room")
            results: list[amqp_blocking.PublishTicket | BaseException] = []

            def second() -> None:
                try:
                    results.append(publisher.publish(b"second", routing_key="room"))
                except BaseException as exc:
                    results.append(exc)

            publishing = threading.Thread(target=second)
            publishing.start()
            publishing.join(0.2)
            assert publishing.is_alive()  # waiting for room
            broker.kill()
            assert isinstance(events.get(WAIT), RecoveryLost)
            publishing.join(0.2)
            assert publishing.is_alive()  # still waiting
            broker.start()
            publishing.join(WAIT)
            assert not publishing.is_alive()
            ticket = results[0]
            assert isinstance(ticket, amqp_blocking.PublishTicket), ticket
            publisher.wait_for_confirms(WAIT)
            assert isinstance(first.error, amqp_blocking.PublishOutcomeUnknownError)
            assert ticket.error is None  # confirmed by the new connection
            publisher.take_failures()
        assert ch.queue_declare("room", passive=True).message_count == 1


def test_a_publish_the_broker_blocked_waits_for_recovery() -> None:
    # The broker blocks publishers (a 1-octet memory watermark) when the connection is lost:
    # the publish that waited for it to unblock is a publish during recovery.
    waiting = RecoveryPolicy(initial_delay=0.1, multiplier=1, jitter=0, publish_wait=30)
    broker = RestartableBroker()
    broker.start("--memory-high-watermark-bytes", "1")
    try:
        with amqp_blocking.connect(broker.url, recovery=waiting) as conn:
            events = conn.recovery_events()
            ch = conn.channel()
            ch.queue_declare("held")
            with ch.publisher() as publisher:
                publisher.publish(b"first", routing_key="held")  # the alarm's
                deadline = time.monotonic() + WAIT
                while not conn.blocked and time.monotonic() < deadline:
                    time.sleep(0.01)
                results: list[amqp_blocking.PublishTicket | BaseException] = []

                def held_back() -> None:
                    try:
                        results.append(publisher.publish(b"held", routing_key="held"))
                    except BaseException as exc:
                        results.append(exc)

                publishing = threading.Thread(target=held_back)
                publishing.start()
                publishing.join(0.2)
                assert publishing.is_alive()  # blocked
                broker.kill()
                assert isinstance(events.get(WAIT), RecoveryLost)
                publishing.join(0.2)
                assert publishing.is_alive()  # still waiting
                broker.start()  # no alarm now
                publishing.join(WAIT)
                ticket = results[0]
                assert isinstance(ticket, amqp_blocking.PublishTicket), ticket
                publisher.wait_for_confirms(WAIT)
                assert ticket.error is None
            assert ch.queue_declare("held", passive=True).message_count == 1
    finally:
        broker.kill()


def test_endpoints_are_tried_in_turn_and_what_waits_is_bounded() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"amqp://guest:guest@127.0.0.1:{sock.getsockname()[1]}/"
    with restartable_broker() as broker:
        policy = RecoveryPolicy(
            initial_delay=0.05,
            multiplier=1,
            jitter=0,
            endpoints=[dead, broker.url],
            publish_buffer=10,
            max_duration=60,  # not a count of attempts: the restart may take a while
        )
        with amqp_blocking.connect(broker.url, recovery=policy) as conn:
            events = conn.recovery_events()
            ch = conn.channel()
            broker.kill()
            assert isinstance(events.get(WAIT), RecoveryLost)
            with pytest.raises(ConnectionLostError, match="publish_buffer is full"):
                ch.basic_publish(b"eleven byte", routing_key="q")
            broker.start()
            event = events.get(WAIT)
            while isinstance(event, RecoveryAttempt):
                if event.attempt % 2:
                    assert dead.endswith(f"{event.url}/")  # odd attempts: the first endpoint
                event = events.get(WAIT)
            assert isinstance(event, Recovered)
            assert event.attempt % 2 == 0  # the second endpoint, the live one
            ch.basic_publish(b"eleven byte", routing_key="q")


def test_a_heartbeat_timeout_starts_recovery() -> None:
    with (
        restartable_broker() as broker,
        amqp_blocking.connect(f"{broker.url}&heartbeat=1", recovery=POLICY) as conn,
    ):
        events = conn.recovery_events()
        ch = conn.channel()
        ch.queue_declare("beats")
        broker.pause()
        lost = events.get(WAIT)
        assert isinstance(lost, RecoveryLost)
        assert isinstance(lost.cause, amqp_blocking.HeartbeatTimeoutError)
        broker.resume()
        event = events.get(WAIT)
        while isinstance(event, RecoveryAttempt):
            event = events.get(WAIT)
        assert isinstance(event, Recovered)
        assert ch.queue_declare("beats", passive=True).queue == "beats"


def test_close_during_recovery_gives_up() -> None:
    with restartable_broker() as broker:
        conn = amqp_blocking.connect(broker.url, recovery=POLICY)
        events = conn.recovery_events()
        consumer = conn.channel().basic_consume(
            conn.channel().queue_declare("", exclusive=True).queue
        )
        broker.kill()
        assert isinstance(events.get(WAIT), RecoveryLost)
        conn.close()
        assert _state(conn) is RecoveryState.CLOSED
        with pytest.raises(amqp_blocking.ConnectionClosedError):
            consumer.get(WAIT)
