"""amqp_trio's connection recovery (issue 17) against the embedded broker killed and restarted
on the same port: channels, consumer iterators and publishers outlive the connection, the
topology comes back (a server-named queue under a new name), events say what happened, and a
delivery of the lost connection cannot be settled on the new one."""

from __future__ import annotations

import socket

import pytest
import trio
import trio.testing

import amqp_trio
from amqp_trio import (
    ConnectionLostError,
    Recovered,
    RecoveryAttempt,
    RecoveryLost,
    RecoveryPolicy,
    RecoveryState,
    StaleDeliveryError,
)

from ..support.restartable import RestartableBroker, restartable_broker

pytestmark = pytest.mark.trio

POLICY = RecoveryPolicy(initial_delay=0.1, multiplier=1, jitter=0, max_duration=60)


def _state(conn: amqp_trio.Connection) -> RecoveryState:
    """A call, so mypy does not narrow one reading of the property to the next."""
    return conn.recovery_state


async def test_recovers_after_the_broker_restarts() -> None:
    with restartable_broker() as broker, trio.fail_after(120):
        async with amqp_trio.connect(broker.url, recovery=POLICY) as conn:
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
                assert before.epoch == conn.epoch == 0

                await trio.to_thread.run_sync(broker.kill)
                lost = await anext(events)
                assert isinstance(lost, RecoveryLost)
                assert isinstance(lost.cause, ConnectionLostError)
                assert _state(conn) is RecoveryState.RECOVERING
                await trio.to_thread.run_sync(broker.start)
                event = await anext(events)
                while isinstance(event, RecoveryAttempt):  # refused while it was down
                    event = await anext(events)
                assert isinstance(event, Recovered)
                assert _state(conn) is RecoveryState.OPEN
                assert conn.epoch == event.epoch == 1
                assert event.renamed_queues[server_named] != server_named

                with pytest.raises(StaleDeliveryError, match="epoch 0"):
                    await before.ack()

                await ch.basic_publish(b"after", routing_key="jobs")
                await ch.basic_publish(b"to all", exchange="amq.fanout")
                after = await anext(jobs)
                assert (after.body, after.epoch) == (b"after", 1)
                await after.ack()
                assert (await anext(fanout)).body == b"to all"
                ok = await ch.queue_declare("jobs", passive=True)
                assert ok.consumer_count == 1
        assert _state(conn) is RecoveryState.CLOSED
        assert [e async for e in events] == []


async def test_a_publish_during_recovery_fails_fast_or_waits() -> None:
    fail_fast = RecoveryPolicy(initial_delay=0.1, multiplier=1, jitter=0, publish_wait=0)
    with restartable_broker() as broker, trio.fail_after(120):
        async with amqp_trio.connect(broker.url, recovery=fail_fast) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            await trio.to_thread.run_sync(broker.kill)
            assert isinstance(await anext(events), RecoveryLost)
            with pytest.raises(ConnectionLostError, match=r"recovering \(publish_wait is 0\)"):
                await ch.basic_publish(b"x", routing_key="q")
            await trio.to_thread.run_sync(broker.start)
            while not isinstance(await anext(events), Recovered):
                pass
            await ch.basic_publish(b"x", routing_key="q")

        waiting = RecoveryPolicy(initial_delay=0.1, multiplier=1, jitter=0, publish_wait=30)
        async with amqp_trio.connect(broker.url, recovery=waiting) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            await ch.queue_declare("waits")
            await trio.to_thread.run_sync(broker.kill)
            assert isinstance(await anext(events), RecoveryLost)
            done = trio.Event()

            async def publish() -> None:
                await ch.basic_publish(b"waited", routing_key="waits")
                done.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(publish)
                await trio.sleep(0.2)
                assert not done.is_set()
                await trio.to_thread.run_sync(broker.start)
            ok = await ch.queue_declare("waits", passive=True)
            assert ok.message_count == 1


async def test_a_publish_waiting_for_the_window_waits_for_recovery() -> None:
    # The window is full when the connection is lost: the publish that waited for room is
    # a publish during recovery (it waits, under publish_wait), not a failure of the old
    # connection.
    waiting = RecoveryPolicy(initial_delay=0.1, multiplier=1, jitter=0, publish_wait=30)
    with restartable_broker() as broker, trio.fail_after(120):
        async with amqp_trio.connect(broker.url, recovery=waiting) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            await ch.queue_declare("room")
            async with ch.publisher(window=1) as publisher:
                await trio.to_thread.run_sync(broker.pause)  # no confirm comes
                first = await publisher.publish(b"first", routing_key="room")
                tickets: list[amqp_trio.PublishTicket] = []

                async def second() -> None:
                    tickets.append(await publisher.publish(b"second", routing_key="room"))

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(second)
                    await trio.testing.wait_all_tasks_blocked()
                    await trio.to_thread.run_sync(broker.kill)
                    assert isinstance(await anext(events), RecoveryLost)
                    await trio.testing.wait_all_tasks_blocked()
                    assert tickets == []  # still waiting
                    await trio.to_thread.run_sync(broker.start)
                await publisher.wait_for_confirms()
                assert isinstance(first.error, amqp_trio.PublishOutcomeUnknownError)
                assert tickets[0].error is None  # confirmed by the new connection
                publisher.take_failures()
            ok = await ch.queue_declare("room", passive=True)
            assert ok.message_count == 1


async def test_a_publish_the_broker_blocked_waits_for_recovery() -> None:
    # The broker blocks publishers (a 1-octet memory watermark) when the connection is lost:
    # the publish that waited for it to unblock is a publish during recovery.
    waiting = RecoveryPolicy(initial_delay=0.1, multiplier=1, jitter=0, publish_wait=30)
    broker = RestartableBroker()
    broker.start("--memory-high-watermark-bytes", "1")
    try:
        with trio.fail_after(120):
            async with amqp_trio.connect(broker.url, recovery=waiting) as conn:
                events = conn.recovery_events()
                ch = await conn.open_channel()
                await ch.queue_declare("held")
                async with ch.publisher() as publisher:
                    await publisher.publish(b"first", routing_key="held")  # the alarm's
                    while not conn.blocked:
                        await trio.sleep(0.01)
                    tickets: list[amqp_trio.PublishTicket] = []

                    async def held_back() -> None:
                        tickets.append(await publisher.publish(b"held", routing_key="held"))

                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(held_back)
                        await trio.testing.wait_all_tasks_blocked()
                        await trio.to_thread.run_sync(broker.kill)
                        assert isinstance(await anext(events), RecoveryLost)
                        await trio.testing.wait_all_tasks_blocked()
                        assert tickets == []  # still waiting
                        await trio.to_thread.run_sync(broker.start)  # no alarm now
                    await publisher.wait_for_confirms()
                    assert tickets[0].error is None
                ok = await ch.queue_declare("held", passive=True)
                assert ok.message_count == 1
    finally:
        broker.kill()


async def test_endpoints_are_tried_in_turn_and_what_waits_is_bounded() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"amqp://guest:guest@127.0.0.1:{sock.getsockname()[1]}/"
    with restartable_broker() as broker, trio.fail_after(120):
        policy = RecoveryPolicy(
            initial_delay=0.05,
            multiplier=1,
            jitter=0,
            endpoints=[dead, broker.url],
            publish_buffer=10,
            max_duration=60,  # not a count of attempts: the restart may take a while
        )
        async with amqp_trio.connect(broker.url, recovery=policy) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            await trio.to_thread.run_sync(broker.kill)
            assert isinstance(await anext(events), RecoveryLost)
            with pytest.raises(ConnectionLostError, match="publish_buffer is full"):
                await ch.basic_publish(b"eleven byte", routing_key="q")
            await trio.to_thread.run_sync(broker.start)
            event = await anext(events)
            while isinstance(event, RecoveryAttempt):
                if event.attempt % 2:
                    assert dead.endswith(f"{event.url}/")  # odd attempts: the first endpoint
                event = await anext(events)
            assert isinstance(event, Recovered)
            assert event.attempt % 2 == 0  # the second endpoint, the live one
            await ch.basic_publish(b"eleven byte", routing_key="q")


async def test_a_heartbeat_timeout_starts_recovery() -> None:
    with restartable_broker() as broker, trio.fail_after(120):
        async with amqp_trio.connect(f"{broker.url}&heartbeat=1", recovery=POLICY) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            await ch.queue_declare("beats")
            await trio.to_thread.run_sync(broker.pause)
            lost = await anext(events)
            assert isinstance(lost, RecoveryLost)
            assert isinstance(lost.cause, amqp_trio.HeartbeatTimeoutError)
            await trio.to_thread.run_sync(broker.resume)
            event = await anext(events)
            while isinstance(event, RecoveryAttempt):
                event = await anext(events)
            assert isinstance(event, Recovered)
            ok = await ch.queue_declare("beats", passive=True)
            assert ok.queue == "beats"


async def test_close_during_recovery_gives_up() -> None:
    with restartable_broker() as broker, trio.fail_after(60):
        async with amqp_trio.connect(broker.url, recovery=POLICY) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            queue = (await ch.queue_declare("", exclusive=True)).queue
            async with ch.basic_consume(queue) as consumer:
                await trio.to_thread.run_sync(broker.kill)
                assert isinstance(await anext(events), RecoveryLost)
                await conn.aclose()
                assert _state(conn) is RecoveryState.CLOSED
                with pytest.raises(amqp_trio.ConnectionClosedError):
                    await anext(consumer)
