"""A server-sent ``basic.cancel`` (the queue was deleted by someone else) against RabbitMQ: with
``RecoveryPolicy(reconsume_on_cancel=True)`` the queue is declared again and the same consumer
iterator goes on; without it the iterator ends with ConsumerCancelledError."""

from __future__ import annotations

import pytest
import trio

import amqp_trio
from amqp_trio import ConsumerCancelledError, NotFound, RecoveryPolicy

from ..support.scenarios import unique

pytestmark = [pytest.mark.rabbitmq, pytest.mark.trio]


async def _consumed(conn: amqp_trio.Connection, queue: str) -> bool:
    """Whether *queue* exists and has a consumer (a channel per look: a 404 closes it)."""
    try:
        async with conn.channel() as ch:
            return (await ch.queue_declare(queue, passive=True)).consumer_count > 0
    except NotFound:
        return False


@pytest.mark.parametrize("reconsume", [True, False], ids=["reconsume", "ends"])
async def test_a_server_cancel_reconsumes_when_the_policy_says_so(
    rabbitmq_url: str, reconsume: bool
) -> None:
    queue = unique("reconsume")
    policy = RecoveryPolicy(reconsume_on_cancel=reconsume)
    with trio.fail_after(60):
        async with (
            amqp_trio.connect(rabbitmq_url, recovery=policy) as conn,
            amqp_trio.connect(rabbitmq_url) as other,
        ):
            ch = await conn.open_channel()
            other_ch = await other.open_channel()
            await ch.queue_declare(queue)
            await ch.queue_bind(queue, "amq.direct", routing_key=queue)
            try:
                async with ch.basic_consume(queue) as consumer:
                    await other_ch.queue_delete(queue)  # RabbitMQ cancels our consumer
                    if not reconsume:
                        with pytest.raises(ConsumerCancelledError):
                            await consumer.get(10)
                        return
                    # Declared again (and bound again), consumed again: a publish through the
                    # binding reaches the same iterator.
                    while not await _consumed(other, queue):
                        await trio.sleep(0.05)
                    await other_ch.basic_publish(b"again", exchange="amq.direct", routing_key=queue)
                    message = await consumer.get(10)
                    assert message is not None
                    assert message.body == b"again"
                    await message.ack()
            finally:
                with trio.CancelScope(shield=True):
                    async with other.channel() as cleanup:
                        await cleanup.queue_delete(queue)
