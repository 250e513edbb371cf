"""One object per delivery: the core builds each whole message as
``ConnectionConfig.message_class``, and the client layer completes that same object as the
adapter's message instead of copying the event into a second one."""

from __future__ import annotations

import asyncio

import attrs
import pytest
import trio

import amqp_asyncio
import amqp_blocking
import amqp_trio
from amqp_sansio import (
    BasicDeliver,
    BasicGet,
    BasicGetOk,
    BasicProperties,
    BasicReturn,
    ConnectionConfig,
    MessageReceived,
)
from amqp_sansio.client import Message, bound_message
from amqp_sansio.testing import ConnectionPair

FRAME_MAX = 4096
PROPS = BasicProperties(content_type="text/plain", headers={"n": 1})
#: The owner a bound message settles on: only kept, never called here.
OWNER = object()


@attrs.define(kw_only=True, slots=True, weakref_slot=False)
class _Tagged(MessageReceived):
    """A core user's own message class, with a field the core leaves unset."""

    note: str = ""


def _pair(message_class: type[MessageReceived]) -> tuple[ConnectionPair, int]:
    pair = ConnectionPair(ConnectionConfig(frame_max=FRAME_MAX, message_class=message_class))
    pair.handshake()
    channel = pair.open_channel()
    pair.client.data_to_send()
    return pair, channel


def _deliver(tag: int) -> BasicDeliver:
    return BasicDeliver(consumer_tag="c", delivery_tag=tag, exchange="x", routing_key="k")


@pytest.mark.parametrize("size", [0, 10, 3 * FRAME_MAX])  # no body, one frame, several
def test_the_core_builds_every_message_as_the_configured_class(size: int) -> None:
    pair, ch = _pair(_Tagged)
    body = b"b" * size
    deliver = _deliver(1)
    pair.server.send_content(ch, deliver, PROPS, body)
    get = BasicGet(queue="q")
    pair.client.send_method(ch, get)
    pair.transfer(pair.client)
    get_ok = BasicGetOk(delivery_tag=2, exchange="", routing_key="q", message_count=5)
    pair.server.send_content(ch, get_ok, PROPS, body)
    first, second = pair.transfer(pair.server)
    for event, method, request in ((first, deliver, None), (second, get_ok, get)):
        assert type(event) is _Tagged
        assert isinstance(event, MessageReceived)
        assert (event.channel, event.method, event.properties) == (ch, method, PROPS)
        assert bytes(event.body) == body
        assert event.request is request
        with pytest.raises(AttributeError):
            _ = event.note  # the core sets the event's fields only


def test_by_default_the_core_builds_message_received() -> None:
    pair, ch = _pair(MessageReceived)
    pair.server.send_content(ch, _deliver(1), PROPS, b"x")
    (event,) = pair.transfer(pair.server)
    assert type(event) is MessageReceived
    assert ConnectionConfig().message_class is MessageReceived


def test_message_class_must_be_a_message_received() -> None:
    with pytest.raises(TypeError, match="message_class"):
        ConnectionConfig(message_class=BasicProperties)  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [10, 3 * FRAME_MAX])
def test_bound_message_completes_the_core_s_object_in_place(size: int) -> None:
    pair, ch = _pair(amqp_trio.Message)
    body = b"b" * size
    pair.server.send_content(
        ch,
        BasicDeliver(
            consumer_tag="c", delivery_tag=7, redelivered=True, exchange="x", routing_key="k"
        ),
        PROPS,
        body,
    )
    get = BasicGet(queue="q")
    pair.client.send_method(ch, get)
    pair.transfer(pair.client)
    get_ok = BasicGetOk(delivery_tag=8, exchange="", routing_key="q", message_count=5)
    pair.server.send_content(ch, get_ok, PROPS, body)
    delivered, got = pair.transfer(pair.server)
    assert isinstance(delivered, amqp_trio.Message)
    assert isinstance(got, amqp_trio.Message)
    message = bound_message(amqp_trio.Message, delivered, OWNER, None)
    assert message is delivered
    assert type(message.body) is bytes  # a multi-frame body was a bytearray
    assert message == amqp_trio.Message(
        body=body,
        properties=PROPS,
        exchange="x",
        routing_key="k",
        delivery_tag=7,
        redelivered=True,
        consumer_tag="c",
        channel=ch,
    )
    assert (message.epoch, message._owner, message.request) == (0, OWNER, None)
    # Its fields were copied out: the method is not kept alive by a buffered message.
    assert message.method is None
    from_get = bound_message(amqp_trio.Message, got, OWNER, None)
    assert from_get is got
    assert (from_get.consumer_tag, from_get.message_count, from_get.delivery_tag) == (None, 5, 8)
    assert (from_get.method, from_get.request) == (None, get)


def test_bound_message_copies_a_plain_event() -> None:
    # A core left at MessageReceived: the adapter's message is a second object, as complete.
    pair, ch = _pair(MessageReceived)
    pair.server.send_content(ch, _deliver(3), PROPS, b"x")
    (event,) = pair.transfer(pair.server)
    assert isinstance(event, MessageReceived)
    message = bound_message(amqp_trio.Message, event, OWNER, None)
    assert message is not event
    assert (message.method, message.request, message.delivery_tag) == (None, None, 3)
    assert event.method == _deliver(3)  # the event itself is left as it was


def test_a_message_built_by_hand_or_from_content_has_no_method() -> None:
    delivered = Message(
        body=b"x", properties=PROPS, exchange="e", routing_key="k", delivery_tag=2, consumer_tag="c"
    )
    assert (delivered.method, delivered.request) == (None, None)
    returned = BasicReturn(reply_code=312, reply_text="NO_ROUTE", exchange="e", routing_key="k")
    from_return = Message.from_content(1, returned, PROPS, b"x")
    assert (from_return.method, from_return.exchange, from_return.delivery_tag) == (None, "e", 0)
    deliver = _deliver(4)
    from_deliver = Message.from_content(1, deliver, PROPS, bytearray(b"x"))
    assert (from_deliver.method, from_deliver.delivery_tag, from_deliver.body) == (None, 4, b"x")
    # Context, not content: equality and repr leave the method and the request out.
    assert delivered == attrs.evolve(delivered, method=returned, request=BasicGet())
    assert "method" not in repr(delivered)
    assert delivered.basic_properties is PROPS


def _check_handed_out(message: Message, queue: str, get: bool) -> None:
    assert isinstance(message, MessageReceived)
    assert type(message.body) is bytes
    assert message.method is None  # copied out
    assert message.routing_key == queue
    if get:
        assert type(message.request) is BasicGet
        assert message.request.queue == queue
        assert (message.consumer_tag, message.message_count) == (None, 2)  # b"a" of three
    else:
        assert message.request is None
        assert message.consumer_tag is not None
        assert message.message_count is None


BIG = b"z" * 300_000  # more than one frame at any frame_max the brokers propose


def test_amqp_trio_hands_out_the_core_s_object(amqp_url: str) -> None:
    async def main() -> None:
        async with amqp_trio.connect(amqp_url) as conn, conn.channel() as ch:
            queue = (await ch.queue_declare(exclusive=True)).queue
            await ch.confirm_select()
            for body in (b"a", BIG, b"c"):
                await ch.basic_publish(body, routing_key=queue)
            got = await ch.basic_get(queue)
            assert got is not None
            assert got.body == b"a"
            _check_handed_out(got, queue, get=True)
            async with ch.basic_consume(queue) as consumer:
                for body in (BIG, b"c"):
                    message = await consumer.get(timeout=10)
                    assert message is not None
                    assert message.body == body
                    _check_handed_out(message, queue, get=False)
                    await message.ack()
            await got.ack()

    trio.run(main)


def test_amqp_asyncio_hands_out_the_core_s_object(amqp_url: str) -> None:
    async def main() -> None:
        async with amqp_asyncio.connect(amqp_url) as conn, conn.channel() as ch:
            queue = (await ch.queue_declare(exclusive=True)).queue
            await ch.confirm_select()
            for body in (b"a", BIG, b"c"):
                await ch.basic_publish(body, routing_key=queue)
            got = await ch.basic_get(queue)
            assert got is not None
            assert got.body == b"a"
            _check_handed_out(got, queue, get=True)
            async with ch.basic_consume(queue) as consumer:
                for body in (BIG, b"c"):
                    message = await consumer.get(timeout=10)
                    assert message is not None
                    assert message.body == body
                    _check_handed_out(message, queue, get=False)
                    await message.ack()
            await got.ack()

    asyncio.run(main())


def test_amqp_blocking_hands_out_the_core_s_object(amqp_url: str) -> None:
    with amqp_blocking.connect(amqp_url) as conn, conn.channel() as ch:
        queue = ch.queue_declare(exclusive=True).queue
        ch.confirm_select()
        for body in (b"a", BIG, b"c"):
            ch.basic_publish(body, routing_key=queue)
        got = ch.basic_get(queue)
        assert got is not None
        assert got.body == b"a"
        _check_handed_out(got, queue, get=True)
        with ch.basic_consume(queue) as consumer:
            for body in (BIG, b"c"):
                message = consumer.get(timeout=10)
                assert message is not None
                assert message.body == body
                _check_handed_out(message, queue, get=False)
                message.ack()
        got.ack()


def test_amqp_blocking_connect_core_keeps_the_plain_event(amqp_url: str) -> None:
    # Its caller drives the core itself and dispatches on type(event) (amqp_spark does).
    opened = amqp_blocking.connect_core(amqp_url)
    try:
        assert opened.core.config.message_class is MessageReceived
    finally:
        opened.sock.close()
    with amqp_blocking.connect(amqp_url) as conn:
        assert conn._core.config.message_class is amqp_blocking.Message
