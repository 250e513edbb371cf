"""amqp_blocking: returns outside confirm mode reach the channel's on_return handler; the URL's
max_message_size caps what the client accepts."""

from __future__ import annotations

import logging
import queue

import pytest

import amqp_blocking
from amqp_sansio import BasicProperties
from amqp_sansio.client import MessageReturnedError, ResourceError

UNROUTABLE = "amqp-sansio-test-no-such-queue"


def with_query(url: str, query: str) -> str:
    return url + ("&" if "?" in url else "?") + query


def test_return_without_confirms_reaches_the_handler(amqp_url: str) -> None:
    with amqp_blocking.connect(amqp_url) as conn, conn.channel() as ch:
        returns: queue.Queue[MessageReturnedError] = queue.Queue()
        ch.on_return(returns.put)
        ch.basic_publish(
            b"lost",
            routing_key=UNROUTABLE,
            mandatory=True,
            properties=BasicProperties(message_id="m1"),
        )
        returned = returns.get(timeout=10)
        assert (returned.reply_code, returned.reply_text) == (312, "NO_ROUTE")
        assert returned.publish_number is None
        assert returned.message.body == b"lost"
        assert returned.message.routing_key == UNROUTABLE
        assert returned.message.properties.message_id == "m1"
        # in confirm mode the return is the publish's outcome, not the handler's
        ch.confirm_select()
        with pytest.raises(MessageReturnedError):
            ch.basic_publish(b"x", routing_key=UNROUTABLE, mandatory=True)
        assert returns.empty()


def test_failing_handler_is_logged_and_the_channel_stays_usable(
    amqp_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    def handler(error: MessageReturnedError) -> None:
        raise RuntimeError("handler bug")

    with (
        caplog.at_level(logging.ERROR, logger="amqp_sansio.client"),
        amqp_blocking.connect(amqp_url) as conn,
        conn.channel() as ch,
    ):
        name = ch.queue_declare(exclusive=True).queue
        ch.on_return(handler)
        ch.basic_publish(b"lost", routing_key=UNROUTABLE, mandatory=True)
        ch.basic_publish(b"kept", routing_key=name)
        with ch.basic_consume(name) as consumer:  # ordered after the return
            message = consumer.get(timeout=10)
            assert message is not None
            assert message.body == b"kept"
            message.ack()
    assert any("on_return handler" in r.getMessage() for r in caplog.records)


def test_max_message_size_in_the_url_caps_inbound_messages(amqp_url: str) -> None:
    with pytest.raises(ResourceError, match="over max_message_size 10") as info:
        receive_over_the_cap(with_query(amqp_url, "max_message_size=10"))
    assert info.value.reply_code == 506


def receive_over_the_cap(url: str) -> None:
    with amqp_blocking.connect(url) as conn, conn.channel() as ch:
        name = ch.queue_declare(exclusive=True).queue
        ch.basic_publish(b"x" * 10, routing_key=name)
        with ch.basic_consume(name) as consumer:
            message = consumer.get(timeout=10)
            assert message is not None
            assert message.body == b"x" * 10  # at the cap: accepted
            message.ack()
            ch.basic_publish(b"x" * 11, routing_key=name)
            consumer.get(timeout=10)
