"""``RecoveryPolicy(reopen_channels=True)`` against RabbitMQ: a passive declare of a missing queue
(404, a channel error) still raises, and the same channel object carries on under a new channel
with its QoS, confirm mode and consumer; a delivery that came before cannot be settled, and the
broker redelivers it to the same iterator. Without the option the channel stays closed."""

from __future__ import annotations

import pytest

import amqp_blocking
from amqp_blocking import ChannelReopened, NotFound, RecoveryPolicy, StaleDeliveryError

from ..support.scenarios import unique

pytestmark = pytest.mark.rabbitmq

WAIT = 30.0


def test_a_channel_closed_by_a_channel_error_is_reopened(rabbitmq_url: str) -> None:
    queue = unique("reopen")
    policy = RecoveryPolicy(reopen_channels=True)
    with amqp_blocking.connect(rabbitmq_url, recovery=policy) as conn:
        events = conn.recovery_events()
        ch = conn.channel()
        try:
            ch.queue_declare(queue)
            ch.basic_qos(prefetch_count=1)
            ch.confirm_select()
            with ch.basic_consume(queue) as consumer:
                ch.basic_publish(b"first", routing_key=queue)
                first = consumer.get(WAIT)
                assert first is not None
                number = ch.number

                with pytest.raises(NotFound):
                    ch.queue_declare(unique("missing"), passive=True)
                event = events.get(WAIT)
                assert isinstance(event, ChannelReopened)
                assert (event.channel, event.new_channel) == (number, ch.number)
                assert isinstance(event.cause, NotFound)
                assert not ch.is_closed

                # Its tag named a delivery of the closed channel: refused, never sent.
                with pytest.raises(StaleDeliveryError, match="channel the broker closed"):
                    first.ack()
                again = consumer.get(WAIT)  # requeued at the close, to the same iterator
                assert again is not None
                assert (again.body, again.redelivered) == (b"first", True)

                # Confirm mode is back (the publish returns on its ack), and so is the QoS:
                # with one delivery unacked, the next waits in the queue.
                ch.basic_publish(b"second", routing_key=queue)
                ok = ch.queue_declare(queue, passive=True)
                assert (ok.consumer_count, ok.message_count) == (1, 1)
                again.ack()
                second = consumer.get(WAIT)
                assert second is not None
                assert second.body == b"second"
                second.ack()
        finally:
            with conn.channel() as cleanup:
                cleanup.queue_delete(queue)


def test_without_reopen_channels_it_stays_closed(rabbitmq_url: str) -> None:
    with amqp_blocking.connect(rabbitmq_url, recovery=RecoveryPolicy()) as conn:
        ch = conn.channel()
        with pytest.raises(NotFound):
            ch.queue_declare(unique("missing"), passive=True)
        assert ch.is_closed
        with pytest.raises(NotFound):
            ch.queue_declare(unique("missing"))
