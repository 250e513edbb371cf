"""A server-sent ``basic.cancel`` (the queue was deleted by someone else) against RabbitMQ: with
``RecoveryPolicy(reconsume_on_cancel=True)`` the queue is declared again and the same consumer
iterator goes on; without it the iterator ends with ConsumerCancelledError."""

from __future__ import annotations

import time

import pytest

import amqp_blocking
from amqp_blocking import ConsumerCancelledError, NotFound, RecoveryPolicy

from ..support.scenarios import unique

pytestmark = pytest.mark.rabbitmq

WAIT = 10.0


def _consumed(conn: amqp_blocking.Connection, queue: str) -> bool:
    """Whether *queue* exists and has a consumer (a channel per look: a 404 closes it)."""
    try:
        with conn.channel() as ch:
            return ch.queue_declare(queue, passive=True).consumer_count > 0
    except NotFound:
        return False


@pytest.mark.parametrize("reconsume", [True, False], ids=["reconsume", "ends"])
def test_a_server_cancel_reconsumes_when_the_policy_says_so(
    rabbitmq_url: str, reconsume: bool
) -> None:
    queue = unique("reconsume")
    policy = RecoveryPolicy(reconsume_on_cancel=reconsume)
    with (
        amqp_blocking.connect(rabbitmq_url, recovery=policy) as conn,
        amqp_blocking.connect(rabbitmq_url) as other,
    ):
        ch = conn.channel()
        other_ch = other.channel()
        ch.queue_declare(queue)
        ch.queue_bind(queue, "amq.direct", routing_key=queue)
        try:
            with ch.basic_consume(queue) as consumer:
                other_ch.queue_delete(queue)  # RabbitMQ cancels our consumer
                if not reconsume:
                    with pytest.raises(ConsumerCancelledError):
                        consumer.get(WAIT)
                    return
                # Declared again (and bound again), consumed again: a publish through the
                # binding reaches the same iterator.
                deadline = time.monotonic() + WAIT
                while not _consumed(other, queue) and time.monotonic() < deadline:
                    time.sleep(0.05)
                other_ch.basic_publish(b"again", exchange="amq.direct", routing_key=queue)
                message = consumer.get(WAIT)
                assert message is not None
                assert message.body == b"again"
                message.ack()
        finally:
            with other.channel() as cleanup:
                cleanup.queue_delete(queue)
