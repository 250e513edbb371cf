"""amqp_trio's recovery options beyond the defaults (issue 17), against the embedded broker
killed and restarted on the same port: publishes pending at the loss are published again
(``republish_unknown``) or end unknown."""

from __future__ import annotations

import pytest
import trio

import amqp_trio
from amqp_trio import Recovered, RecoveryAttempt, RecoveryLost, RecoveryPolicy

from ..support.restartable import restartable_broker

pytestmark = pytest.mark.trio


@pytest.mark.parametrize("republish", [True, False], ids=["republish", "unknown"])
async def test_publishes_pending_at_the_loss_are_republished_or_unknown(republish: bool) -> None:
    policy = RecoveryPolicy(initial_delay=0.1, multiplier=1, jitter=0, republish_unknown=republish)
    with restartable_broker() as broker, trio.fail_after(120):
        async with amqp_trio.connect(broker.url, recovery=policy) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            await ch.queue_declare("pending")
            async with ch.publisher(window=100) as pub:
                await (await pub.publish(b"0", routing_key="pending")).wait()
                # A stopped broker reads nothing: these reach its socket, never its queue.
                await trio.to_thread.run_sync(broker.pause)
                tickets = [
                    await pub.publish(str(n).encode(), routing_key="pending") for n in range(1, 21)
                ]
                await trio.to_thread.run_sync(broker.kill)
                assert isinstance(await anext(events), RecoveryLost)
                await trio.to_thread.run_sync(broker.start)
                event = await anext(events)
                while isinstance(event, RecoveryAttempt):
                    event = await anext(events)
                assert isinstance(event, Recovered)
                await pub.wait_for_confirms()
                if republish:
                    assert (event.republished, event.unknown_publishes) == (20, 0)
                    assert [t.error for t in tickets] == [None] * 20
                    assert [t.number for t in tickets] == list(range(2, 22))  # as first sent
                    assert (pub.confirmed, pub.unknown) == (21, 0)
                else:
                    assert (event.republished, event.unknown_publishes) == (0, 20)
                    assert all(
                        isinstance(t.error, amqp_trio.PublishOutcomeUnknownError) for t in tickets
                    )
                    assert (pub.confirmed, pub.unknown) == (1, 20)
                    pub.take_failures()
            # The broker restarted empty: only what was published again is in the queue, in
            # the order it was first published, and once.
            bodies = []
            while (message := await ch.basic_get("pending", no_ack=True)) is not None:
                bodies.append(message.body)
            assert bodies == ([str(n).encode() for n in range(1, 21)] if republish else [])
