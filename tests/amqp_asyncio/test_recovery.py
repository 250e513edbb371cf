"""amqp_asyncio's connection recovery (issue 17) against the embedded broker killed and
restarted on the same port: channels, consumer iterators and publishers outlive the connection,
the topology comes back (a server-named queue under a new name), events say what happened, and
a delivery of the lost connection cannot be settled on the new one."""

from __future__ import annotations

import asyncio
import socket
from typing import TYPE_CHECKING

import pytest

import amqp_asyncio
from amqp_asyncio import (
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
    from collections.abc import Awaitable, Callable

POLICY = RecoveryPolicy(initial_delay=0.1, multiplier=1, jitter=0, max_duration=60)
_TIMEOUT = 120


def _run(test: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(_TIMEOUT):
            await test()

    asyncio.run(bounded())


def _state(conn: amqp_asyncio.Connection) -> RecoveryState:
    """A call, so mypy does not narrow one reading of the property to the next."""
    return conn.recovery_state


async def _in_thread(function: object) -> None:
    assert callable(function)
    await asyncio.get_running_loop().run_in_executor(None, function)


def test_recovers_after_the_broker_restarts() -> None:
    _run(_recovers_after_the_broker_restarts)


async def _recovers_after_the_broker_restarts() -> None:
    with restartable_broker() as broker:
        async with amqp_asyncio.connect(broker.url, recovery=POLICY) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            await ch.queue_declare("jobs")
            server_named = (await ch.queue_declare("", exclusive=True)).queue
            await ch.queue_bind(server_named, "amq.fanout")
            async with (
                ch.basic_consume("jobs") as jobs,
                ch.basic_consume(server_named) as fanout,
            ):
                await ch.basic_publish(b"before", routing_key="jobs")
                before = await anext(jobs)
                assert before.body == b"before"
                assert before.epoch == conn.epoch == 0

                await _in_thread(broker.kill)
                lost = await anext(events)
                assert isinstance(lost, RecoveryLost)
                assert isinstance(lost.cause, ConnectionLostError)
                assert _state(conn) is RecoveryState.RECOVERING
                await _in_thread(broker.start)
                event = await anext(events)
                while isinstance(event, RecoveryAttempt):  # refused while it was down
                    assert event.next_delay == pytest.approx(0.1)
                    event = await anext(events)
                assert isinstance(event, Recovered)
                assert _state(conn) is RecoveryState.OPEN
                assert conn.epoch == event.epoch == 1
                new_name = event.renamed_queues[server_named]
                assert new_name != server_named

                # The delivery of the lost connection: refused locally, never sent.
                with pytest.raises(StaleDeliveryError, match="epoch 0"):
                    await before.ack()

                # The old channel and consumer iterators carry on.
                await ch.basic_publish(b"after", routing_key="jobs")
                await ch.basic_publish(b"to all", exchange="amq.fanout")
                after = await anext(jobs)
                assert (after.body, after.epoch) == (b"after", 1)
                await after.ack()
                assert (await anext(fanout)).body == b"to all"
                ok = await ch.queue_declare("jobs", passive=True)
                assert ok.consumer_count == 1
            assert not conn.is_closed
        assert _state(conn) is RecoveryState.CLOSED
        assert [e async for e in events] == []  # ended with the connection


def test_without_a_policy_a_lost_connection_stays_closed() -> None:
    _run(_without_a_policy_a_lost_connection_stays_closed)


async def _without_a_policy_a_lost_connection_stays_closed() -> None:
    with restartable_broker() as broker:
        async with amqp_asyncio.connect(broker.url) as conn:
            ch = await conn.open_channel()
            await _in_thread(broker.kill)
            error = await conn.wait_closed()
            assert isinstance(error, ConnectionLostError)
            with pytest.raises(ConnectionLostError):
                await ch.queue_declare("q")
            assert _state(conn) is RecoveryState.CLOSED


def test_a_publish_during_recovery_fails_fast_or_waits() -> None:
    _run(_a_publish_during_recovery_fails_fast_or_waits)


async def _a_publish_during_recovery_fails_fast_or_waits() -> None:
    fail_fast = RecoveryPolicy(initial_delay=0.1, multiplier=1, jitter=0, publish_wait=0)
    with restartable_broker() as broker:
        async with amqp_asyncio.connect(broker.url, recovery=fail_fast) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            await _in_thread(broker.kill)
            assert isinstance(await anext(events), RecoveryLost)
            with pytest.raises(ConnectionLostError, match=r"recovering \(publish_wait is 0\)"):
                await ch.basic_publish(b"x", routing_key="q")
            await _in_thread(broker.start)
            while not isinstance(await anext(events), Recovered):
                pass
            await ch.basic_publish(b"x", routing_key="q")

        waiting = RecoveryPolicy(initial_delay=0.1, multiplier=1, jitter=0, publish_wait=30)
        async with amqp_asyncio.connect(broker.url, recovery=waiting) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            await ch.queue_declare("waits")
            await _in_thread(broker.kill)
            assert isinstance(await anext(events), RecoveryLost)
            publish = asyncio.create_task(ch.basic_publish(b"waited", routing_key="waits"))
            await asyncio.sleep(0.2)
            assert not publish.done()
            await _in_thread(broker.start)
            await publish
            ok = await ch.queue_declare("waits", passive=True)
            assert ok.message_count == 1


def test_a_publish_waiting_for_the_window_waits_for_recovery() -> None:
    _run(_a_publish_waiting_for_the_window_waits_for_recovery)


async def _a_publish_waiting_for_the_window_waits_for_recovery() -> None:
    # The window is full when the connection is lost: the publish that waited for room is
    # a publish during recovery (it waits, under publish_wait), not a failure of the old
    # connection.
    waiting = RecoveryPolicy(initial_delay=0.1, multiplier=1, jitter=0, publish_wait=30)
    with restartable_broker() as broker:
        async with amqp_asyncio.connect(broker.url, recovery=waiting) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            await ch.queue_declare("room")
            async with ch.publisher(window=1) as publisher:
                await _in_thread(broker.pause)  # no confirm comes
                first = await publisher.publish(b"first", routing_key="room")
                second = asyncio.create_task(publisher.publish(b"second", routing_key="room"))
                await asyncio.sleep(0.2)
                assert not second.done()  # waiting for room
                await _in_thread(broker.kill)
                assert isinstance(await anext(events), RecoveryLost)
                await asyncio.sleep(0.2)
                assert not second.done()  # still waiting
                await _in_thread(broker.start)
                ticket = await second
                await publisher.wait_for_confirms()
                assert isinstance(first.error, amqp_asyncio.PublishOutcomeUnknownError)
                assert ticket.error is None  # confirmed by the new connection
                publisher.take_failures()
            ok = await ch.queue_declare("room", passive=True)
            assert ok.message_count == 1


def test_a_publish_the_broker_blocked_waits_for_recovery() -> None:
    _run(_a_publish_the_broker_blocked_waits_for_recovery)


async def _a_publish_the_broker_blocked_waits_for_recovery() -> None:
    # The broker blocks publishers (a 1-octet memory watermark) when the connection is lost:
    # the publish that waited for it to unblock is a publish during recovery.
    waiting = RecoveryPolicy(initial_delay=0.1, multiplier=1, jitter=0, publish_wait=30)
    broker = RestartableBroker()
    broker.start("--memory-high-watermark-bytes", "1")
    try:
        async with amqp_asyncio.connect(broker.url, recovery=waiting) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            await ch.queue_declare("held")
            async with ch.publisher() as publisher:
                await publisher.publish(b"first", routing_key="held")  # the alarm's
                while not conn.blocked:
                    await asyncio.sleep(0.01)
                held = asyncio.create_task(publisher.publish(b"held", routing_key="held"))
                await asyncio.sleep(0.2)
                assert not held.done()  # blocked
                await _in_thread(broker.kill)
                assert isinstance(await anext(events), RecoveryLost)
                await asyncio.sleep(0.2)
                assert not held.done()  # still waiting
                await _in_thread(broker.start)  # no alarm now
                ticket = await held
                await publisher.wait_for_confirms()
                assert ticket.error is None
            ok = await ch.queue_declare("held", passive=True)
            assert ok.message_count == 1
    finally:
        broker.kill()


def test_endpoints_are_tried_in_turn_and_what_waits_is_bounded() -> None:
    _run(_endpoints_are_tried_in_turn_and_what_waits_is_bounded)


async def _endpoints_are_tried_in_turn_and_what_waits_is_bounded() -> None:
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
            max_duration=60,  # a broker starting on a loaded machine takes seconds
        )
        async with amqp_asyncio.connect(broker.url, recovery=policy) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            await _in_thread(broker.kill)
            assert isinstance(await anext(events), RecoveryLost)
            with pytest.raises(ConnectionLostError, match="publish_buffer is full"):
                await ch.basic_publish(b"eleven byte", routing_key="q")
            await _in_thread(broker.start)
            event = await anext(events)
            while isinstance(event, RecoveryAttempt):
                if event.attempt % 2:
                    assert dead.endswith(f"{event.url}/")  # odd attempts: the first endpoint
                event = await anext(events)
            assert isinstance(event, Recovered)
            assert event.attempt % 2 == 0  # the second endpoint, the live one
            await ch.basic_publish(b"eleven byte", routing_key="q")


def test_a_heartbeat_timeout_starts_recovery() -> None:
    _run(_a_heartbeat_timeout_starts_recovery)


async def _a_heartbeat_timeout_starts_recovery() -> None:
    with restartable_broker() as broker:
        async with amqp_asyncio.connect(f"{broker.url}&heartbeat=1", recovery=POLICY) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            await ch.queue_declare("beats")
            await _in_thread(broker.pause)
            lost = await anext(events)
            assert isinstance(lost, RecoveryLost)
            assert isinstance(lost.cause, amqp_asyncio.HeartbeatTimeoutError)
            await _in_thread(broker.resume)
            event = await anext(events)
            while isinstance(event, RecoveryAttempt):
                event = await anext(events)
            assert isinstance(event, Recovered)
            ok = await ch.queue_declare("beats", passive=True)
            assert ok.queue == "beats"


def test_close_during_recovery_gives_up() -> None:
    _run(_close_during_recovery_gives_up)


async def _close_during_recovery_gives_up() -> None:
    with restartable_broker() as broker:
        async with amqp_asyncio.connect(broker.url, recovery=POLICY) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            queue = (await ch.queue_declare("", exclusive=True)).queue
            async with ch.basic_consume(queue) as consumer:
                await _in_thread(broker.kill)
                assert isinstance(await anext(events), RecoveryLost)
                await conn.aclose()
                assert _state(conn) is RecoveryState.CLOSED
                with pytest.raises(amqp_asyncio.ConnectionClosedError):
                    await consumer.get(30)
