"""amqp_blocking's recovery against a private RabbitMQ node (issue 17): the node is SIGKILLed
and started again on its port with its data; the durable queue survives, the consumer iterator
made before the restart gets a message published after it."""

from __future__ import annotations

from typing import Final

import pytest

import amqp_blocking
from amqp_blocking import Recovered, RecoveryAttempt, RecoveryLost, RecoveryPolicy

from ..support.rabbitmq_node import rabbitmq_node

pytestmark = pytest.mark.rabbitmq

#: The node takes a while to start on a loaded machine.
WAIT: Final = 200.0


def test_a_consumer_resumes_after_the_node_restarts() -> None:
    policy = RecoveryPolicy(initial_delay=0.5, multiplier=1, jitter=0, max_duration=180)
    with rabbitmq_node() as node, amqp_blocking.connect(node.url, recovery=policy) as conn:
        events = conn.recovery_events()
        ch = conn.channel()
        ch.queue_declare("orders", durable=True)
        with ch.basic_consume("orders") as consumer:
            node.kill()
            assert isinstance(events.get(WAIT), RecoveryLost)
            node.start()
            event = events.get(WAIT)
            while isinstance(event, RecoveryAttempt):
                event = events.get(WAIT)
            assert isinstance(event, Recovered)
            with amqp_blocking.connect(node.url) as publisher:
                pub_ch = publisher.channel()
                ok = pub_ch.queue_declare("orders", passive=True)
                assert ok.consumer_count == 1  # ours, consuming again
                pub_ch.basic_publish(b"after the restart", routing_key="orders")
            message = consumer.get(WAIT)
            assert message is not None
            assert message.body == b"after the restart"
            assert message.epoch == 1
            message.ack()
