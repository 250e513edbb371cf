"""amqp_blocking's Consumer.get: the next message with a timeout, losing nothing to the timeout."""

from __future__ import annotations

import amqp_blocking


def test_get_returns_messages_then_none_on_timeout_and_loses_nothing(amqp_url: str) -> None:
    with amqp_blocking.connect(amqp_url) as conn, conn.channel() as ch:
        queue = ch.queue_declare(exclusive=True).queue
        ch.confirm_select()
        ch.basic_publish(b"one", routing_key=queue)
        with ch.basic_consume(queue) as consumer:
            first = consumer.get(timeout=10)
            assert first is not None
            assert first.body == b"one"
            first.ack()
            assert consumer.get(timeout=0.05) is None  # nothing there: no error
            ch.basic_publish(b"two", routing_key=queue)
            second = consumer.get(timeout=10)
            assert second is not None
            assert second.body == b"two"
            second.ack()
            ch.basic_cancel(consumer.consumer_tag)
            assert consumer.get() is None  # ended: None at once, no wait
