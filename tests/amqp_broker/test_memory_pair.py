"""amqp_broker.memory_pair(): the broker's model behind a ConnectionPair, outside any Trio run;
every assertion is on what the client core received."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

import amqp_broker
from amqp_sansio import (
    BasicGet,
    BasicGetEmpty,
    BasicProperties,
    BasicPublish,
    ConnectionConfig,
    ConnectionState,
    MessageReceived,
    MethodReceived,
    QueueDeclare,
    QueueDeclareOk,
)

if TYPE_CHECKING:
    from amqp_sansio.testing import ConnectionPair


def _declare(pair: ConnectionPair, channel: int, **kwargs: bool | str) -> QueueDeclareOk:
    pair.client.send_method(channel, QueueDeclare(**kwargs))  # type: ignore[arg-type]
    pair.transfer(pair.client)
    [reply] = pair.transfer(pair.server)
    assert isinstance(reply, MethodReceived)
    assert isinstance(reply.method, QueueDeclareOk)
    return reply.method


@pytest.mark.parametrize("byte_at_a_time", [False, True])
def test_the_broker_answers_with_its_own_rules(byte_at_a_time: bool) -> None:
    pair = amqp_broker.memory_pair(byte_at_a_time=byte_at_a_time)
    pair.handshake()
    channel = pair.open_channel()
    declared = _declare(pair, channel, queue="", exclusive=True)
    assert declared.queue.startswith("amq.gen-")  # the broker names it, as RabbitMQ does
    pair.client.send_method(channel, BasicGet(queue=declared.queue))
    pair.transfer(pair.client)
    [empty] = pair.transfer(pair.server)
    assert isinstance(empty, MethodReceived)
    assert isinstance(empty.method, BasicGetEmpty)


def test_the_broker_checks_the_login() -> None:
    pair = amqp_broker.memory_pair(ConnectionConfig(username="guest", password="wrong"))
    with pytest.raises(AssertionError, match="did not finish") as info:
        pair.handshake()
    assert "ConnectionClosed(reply_code=403, reply_text='ACCESS_REFUSED" in str(info.value)
    assert pair.client.state is ConnectionState.CLOSED


def test_a_dropped_link_requeues_and_deletes_exclusive_queues() -> None:
    server = amqp_broker.memory_server()
    broker = server.broker
    first = amqp_broker.memory_pair(server=server)
    first.handshake()
    channel = first.open_channel()
    exclusive = _declare(first, channel, queue="mine", exclusive=True).queue
    assert exclusive in broker.vhosts["/"].queues
    first.end_of_stream(first.client)
    assert exclusive not in broker.vhosts["/"].queues
    second = amqp_broker.memory_pair(server=server)
    second.handshake()
    assert _declare(second, second.open_channel(), queue="mine").message_count == 0


def test_pairs_on_one_broker_share_messages() -> None:
    server = amqp_broker.memory_server()
    producer = amqp_broker.memory_pair(server=server)
    producer.handshake()
    channel = producer.open_channel()
    _declare(producer, channel, queue="shared")
    producer.client.publish(channel, BasicPublish(routing_key="shared"), BasicProperties(), b"hi")
    producer.transfer(producer.client)
    consumer = amqp_broker.memory_pair(server=server)
    consumer.handshake()
    channel = consumer.open_channel()
    consumer.client.send_method(channel, BasicGet(queue="shared", no_ack=True))
    consumer.transfer(consumer.client)
    [message] = consumer.transfer(consumer.server)
    assert isinstance(message, MessageReceived)
    assert message.body == b"hi"
