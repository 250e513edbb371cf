"""Test control (issue 29), through the pytest plugin's ``amqp_broker`` fixture (a
:class:`amqp_broker.BrokerThread`): close one connection by its name with a reply code and text
(``rabbitmqctl close_connection``) and watch a client recover; connection names and client
properties in snapshots; peek at a queue's messages without taking them; purge."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import pytest

import amqp_blocking
from amqp_blocking import Recovered, RecoveryAttempt, RecoveryLost, RecoveryPolicy
from amqp_sansio import BasicProperties
from amqp_sansio.client import ConnectionForced

if TYPE_CHECKING:
    import amqp_broker

WAIT: Final = 30.0


def _named(url: str, name: str) -> str:
    return f"{url}?name={name}"


def test_snapshots_show_connection_names_and_client_properties(
    amqp_broker: amqp_broker.BrokerThread,
) -> None:
    with amqp_blocking.connect(_named(amqp_broker.url, "orders-worker")):
        [connection] = amqp_broker.snapshot().connections
    assert connection.name == "orders-worker"
    assert connection.client_properties["connection_name"] == "orders-worker"
    capabilities = connection.client_properties["capabilities"]
    assert isinstance(capabilities, dict)
    assert capabilities["publisher_confirms"] is True


def test_one_connection_closed_by_name(amqp_broker: amqp_broker.BrokerThread) -> None:
    url = amqp_broker.url
    with (
        amqp_blocking.connect(_named(url, "victim")) as victim,
        amqp_blocking.connect(_named(url, "bystander")) as bystander,
    ):
        channel = victim.channel()
        channel.queue_declare("held")
        channel.basic_publish(b"m", routing_key="held")
        taken = channel.basic_get("held")
        assert taken is not None
        assert (
            amqp_broker.close_connection(
                "victim", reply_code=320, reply_text="CONNECTION_FORCED - chaos test"
            )
            == 1
        )
        with pytest.raises(ConnectionForced) as caught:
            victim.channel().queue_declare("held", passive=True)
        assert caught.value.reply_code == 320
        assert caught.value.reply_text == "CONNECTION_FORCED - chaos test"
        # the other connection goes on; the unacknowledged message is back, redelivered
        [message] = amqp_broker.peek("held")
        assert (message.body, message.redelivered) == (b"m", True)
        assert bystander.channel().queue_declare("held", passive=True).message_count == 1
    assert amqp_broker.close_connection("nobody") == 0


def test_a_client_recovers_after_its_connection_is_closed_by_name(
    amqp_broker: amqp_broker.BrokerThread,
) -> None:
    policy = RecoveryPolicy(initial_delay=0.05, multiplier=1, jitter=0, max_duration=WAIT)
    with amqp_blocking.connect(_named(amqp_broker.url, "worker"), recovery=policy) as conn:
        events = conn.recovery_events()
        channel = conn.channel()
        channel.queue_declare("jobs")
        with channel.basic_consume("jobs") as consumer:
            amqp_broker.close_connection("worker")
            assert isinstance(events.get(WAIT), RecoveryLost)
            event = events.get(WAIT)
            while isinstance(event, RecoveryAttempt):
                event = events.get(WAIT)
            assert isinstance(event, Recovered)
            [connection] = amqp_broker.snapshot().connections
            assert connection.name == "worker"  # the same name after recovery
            assert amqp_broker.snapshot().queue("jobs").consumers == 1
            with amqp_blocking.connect(amqp_broker.url) as publisher:
                publisher.channel().basic_publish(b"after", routing_key="jobs")
            message = consumer.get(WAIT)
            assert message is not None
            assert message.body == b"after"
            message.ack()


def test_peek_and_purge(amqp_broker: amqp_broker.BrokerThread) -> None:
    with amqp_blocking.connect(amqp_broker.url) as conn:
        channel = conn.channel()
        channel.confirm_select()
        channel.queue_declare("q", durable=True, arguments={"x-queue-type": "quorum"})
        channel.basic_publish(b"first", routing_key="q", properties=BasicProperties(priority=3))
        channel.basic_publish(b"second", routing_key="q")
        taken = channel.basic_get("q")
        assert taken is not None
        taken.nack(requeue=True)
        channel.basic_qos(prefetch_count=0)  # a round trip: the nack is handled
        peeked = amqp_broker.peek("q")
        assert [(m.body, m.redelivered, m.delivery_count) for m in peeked] == [
            (b"first", True, 1),
            (b"second", False, 0),
        ]
        assert peeked[0].properties.priority == 3
        assert peeked[0].routing_key == "q"
        assert channel.queue_declare("q", passive=True).message_count == 2  # none taken
        assert amqp_broker.purge("q") == 2
        assert amqp_broker.peek("q") == ()
    with pytest.raises(KeyError):
        amqp_broker.peek("missing")
