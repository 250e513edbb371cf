"""amqp_blocking.Inbox: one wait for the deliveries of several consumers, on several channels
and connections, with each consumer's end reported in its place."""

from __future__ import annotations

import threading
import time
import uuid
from typing import TYPE_CHECKING

import pytest

import amqp_blocking
from amqp_blocking import ChannelClosedError, ConsumerCancelledError, Inbox

if TYPE_CHECKING:
    from collections.abc import Callable


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def _until(condition: Callable[[], bool]) -> None:
    """Poll *condition* (the I/O thread fills the inbox); fail after 10 s, never pass."""
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "the deliveries never came"
        time.sleep(0.005)


def test_one_inbox_takes_the_messages_of_consumers_on_two_connections(amqp_url: str) -> None:
    inbox = Inbox()
    with (
        amqp_blocking.connect(amqp_url) as conn_a,
        amqp_blocking.connect(amqp_url) as conn_b,
        conn_a.channel() as ch_a,
        conn_b.channel() as ch_b,
    ):
        queue_a = ch_a.queue_declare(exclusive=True).queue
        queue_b = ch_b.queue_declare(exclusive=True).queue
        ch_a.confirm_select()
        ch_b.confirm_select()
        consumer_a = ch_a.basic_consume(queue_a, inbox=inbox)
        consumer_b = ch_b.basic_consume(queue_b, inbox=inbox)
        assert inbox.get(timeout=0) is None  # nothing yet: None, no error
        for index in range(3):
            ch_a.basic_publish(b"a%d" % index, routing_key=queue_a)
            ch_b.basic_publish(b"b%d" % index, routing_key=queue_b)
        got: dict[str, list[bytes]] = {consumer_a.consumer_tag: [], consumer_b.consumer_tag: []}
        for _ in range(6):
            message = inbox.get(timeout=10)
            assert message is not None
            assert message.consumer_tag is not None
            got[message.consumer_tag].append(message.body)
            message.ack()  # settles on the channel it came on
        assert got == {
            consumer_a.consumer_tag: [b"a0", b"a1", b"a2"],
            consumer_b.consumer_tag: [b"b0", b"b1", b"b2"],
        }
        assert len(inbox) == 0
        with pytest.raises(RuntimeError, match="Inbox"):
            consumer_a.get(timeout=0)
        # Acked: nothing comes back when the channels close.
        consumer_a.cancel()
        consumer_b.cancel()
        assert inbox.get(timeout=0) is None  # our own cancel is no error
        assert ch_a.queue_declare(queue_a, passive=True).message_count == 0


def test_a_waiting_get_wakes_for_a_delivery_from_another_thread(amqp_url: str) -> None:
    inbox = Inbox()
    with amqp_blocking.connect(amqp_url) as conn, conn.channel() as ch:
        queue = ch.queue_declare(exclusive=True).queue
        ch.basic_consume(queue, inbox=inbox, no_ack=True)
        taken: list[bytes] = []
        waiter = threading.Thread(target=lambda: taken.append(_body(inbox.get(timeout=30))))
        waiter.start()
        ch.basic_publish(b"late", routing_key=queue)
        waiter.join(30)
        assert taken == [b"late"]


def _body(message: amqp_blocking.Message | None) -> bytes:
    assert message is not None
    return message.body


def test_a_broker_cancel_comes_after_the_consumers_earlier_messages(amqp_url: str) -> None:
    inbox = Inbox()
    with amqp_blocking.connect(amqp_url) as conn, conn.channel() as ch, conn.channel() as other:
        queue = _name("inbox-cancel")
        ch.queue_declare(queue)
        ch.confirm_select()
        consumer = ch.basic_consume(queue, inbox=inbox, no_ack=True)
        ch.basic_publish(b"before", routing_key=queue)
        other.queue_delete(queue)  # the broker cancels the consumer
        first = inbox.get(timeout=10)
        assert first is not None
        assert first.body == b"before"
        with pytest.raises(ConsumerCancelledError) as raised:
            inbox.get(timeout=10)
        assert raised.value.consumer_tag == consumer.consumer_tag
        assert inbox.get(timeout=0) is None


def test_a_closed_channel_is_raised_at_once_and_drops_its_messages(amqp_url: str) -> None:
    inbox = Inbox()
    with amqp_blocking.connect(amqp_url) as conn:
        ch = conn.channel()
        queue = ch.queue_declare(exclusive=True).queue
        ch.confirm_select()
        for index in range(3):
            ch.basic_publish(b"m%d" % index, routing_key=queue)
        ch.basic_qos(3)
        ch.basic_consume(queue, inbox=inbox)
        _until(lambda: len(inbox) == 3)
        with pytest.raises(ChannelClosedError):
            ch.exchange_declare(_name("missing"), passive=True)  # 404 closes the channel
        with pytest.raises(ChannelClosedError):
            inbox.get(timeout=10)  # at once, ahead of the messages that can't be acked
        assert len(inbox) == 0
        with conn.channel() as again:  # the broker requeued them
            assert again.queue_declare(queue, passive=True).message_count == 3


def test_closing_a_consumer_drops_its_messages_and_counts_them(amqp_url: str) -> None:
    inbox = Inbox()
    with amqp_blocking.connect(amqp_url) as conn, conn.channel() as ch:
        queue = ch.queue_declare(exclusive=True).queue
        kept_queue = ch.queue_declare(exclusive=True).queue
        ch.confirm_select()
        ch.basic_publish(b"dropped", routing_key=queue)
        ch.basic_publish(b"kept", routing_key=kept_queue)
        doomed = ch.basic_consume(queue, inbox=inbox)
        kept = ch.basic_consume(kept_queue, inbox=inbox, no_ack=True)
        _until(lambda: len(inbox) == 2)
        doomed.close()
        assert doomed.dropped == 1
        message = inbox.get(timeout=10)
        assert message is not None
        assert (message.body, message.consumer_tag) == (b"kept", kept.consumer_tag)
        assert inbox.get(timeout=0) is None
