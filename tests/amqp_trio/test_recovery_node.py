"""amqp_trio's recovery against a private RabbitMQ node (issue 17): the node is SIGKILLed and
started again on its port with its data; the durable queue survives, the consumer iterator made
before the restart gets a message published after it."""

from __future__ import annotations

import pytest
import trio

import amqp_trio
from amqp_trio import Recovered, RecoveryAttempt, RecoveryLost, RecoveryPolicy

from ..support.rabbitmq_node import rabbitmq_node

pytestmark = [pytest.mark.rabbitmq, pytest.mark.trio]


async def test_a_consumer_resumes_after_the_node_restarts() -> None:
    policy = RecoveryPolicy(initial_delay=0.5, multiplier=1, jitter=0, max_duration=180)
    with rabbitmq_node() as node, trio.fail_after(400):
        async with amqp_trio.connect(node.url, recovery=policy) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            await ch.queue_declare("orders", durable=True)
            async with ch.basic_consume("orders") as consumer:
                await trio.to_thread.run_sync(node.kill)
                assert isinstance(await anext(events), RecoveryLost)
                await trio.to_thread.run_sync(node.start)
                event = await anext(events)
                while isinstance(event, RecoveryAttempt):
                    event = await anext(events)
                assert isinstance(event, Recovered)
                async with amqp_trio.connect(node.url) as publisher:
                    pub_ch = await publisher.open_channel()
                    ok = await pub_ch.queue_declare("orders", passive=True)
                    assert ok.consumer_count == 1  # ours, consuming again
                    await pub_ch.basic_publish(b"after the restart", routing_key="orders")
                message = await anext(consumer)
                assert message.body == b"after the restart"
                assert message.epoch == 1
                await message.ack()
