"""Server code reads a message's properties with no cast: mypy --strict checks this file (it is
part of `make typecheck`), and the adapters offer the same BasicProperties class."""

from __future__ import annotations

import pytest

import amqp_asyncio
import amqp_blocking
import amqp_trio
from amqp_sansio import (
    AMQP_0_8,
    BasicProperties,
    BasicPublish,
    ConnectionConfig,
    MessageReceived,
    PublishReturned,
)
from amqp_sansio._generated import spec_0_8
from amqp_sansio.testing import ConnectionPair


def _reply_to(event: MessageReceived) -> str | None:
    # What an embedded server does with a request: no cast, no isinstance.
    return event.basic_properties.reply_to


def _returned_type(event: PublishReturned) -> str | None:
    return event.properties.content_type


def test_server_code_reads_basic_properties_without_a_cast() -> None:
    pair = ConnectionPair()
    pair.handshake()
    channel = pair.open_channel()
    properties = amqp_trio.BasicProperties(reply_to="amq.rabbitmq.reply-to", correlation_id="1")
    pair.client.publish(channel, BasicPublish(routing_key="rpc"), properties, b"ping")
    [request] = pair.transfer(pair.client)
    assert isinstance(request, MessageReceived)
    assert _reply_to(request) == "amq.rabbitmq.reply-to"
    assert request.basic_properties is request.properties


def test_the_adapters_re_export_the_cores_basic_properties() -> None:
    assert amqp_trio.BasicProperties is BasicProperties
    assert amqp_asyncio.BasicProperties is BasicProperties
    assert amqp_blocking.BasicProperties is BasicProperties


def test_basic_properties_of_other_content_classes_is_a_clear_error() -> None:
    pair = ConnectionPair(ConnectionConfig(protocol=AMQP_0_8), ConnectionConfig(header_0_9="0-9"))
    pair.handshake()
    channel = pair.open_channel()
    deliver = spec_0_8.StreamDeliver(consumer_tag="c", delivery_tag=1, exchange="", queue="q")
    pair.server.send_content(channel, deliver, spec_0_8.StreamProperties(priority=3), b"tick")
    [message] = pair.transfer(pair.server)
    assert isinstance(message, MessageReceived)
    with pytest.raises(TypeError, match=r"StreamDeliver carries StreamProperties.*\.properties"):
        message.basic_properties  # noqa: B018
