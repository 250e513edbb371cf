# kombu has inline types but leaves most functions unannotated.
# mypy: disable-error-code="no-untyped-call"
"""Third-party clients drive the embedded broker over real sockets: pika's BlockingConnection,
aio-pika, py-amqp through kombu, and Node's amqplib (``tests/amqp_broker/node``, installed by
``make test``).

Each client declares and binds, publishes with confirms, consumes with acks, uses basic.get,
makes an RPC round trip and sees a server-sent cancel. The broker runs in a thread
(:func:`amqp_broker.run_in_thread`), one per module, in memory and then with a store. amqplib
also closes a connection with publishes still queued in its socket, against RabbitMQ and the
embedded broker alike.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import aio_pika
import aiormq.abc
import pamqp.commands
import pika
import pika.exceptions
import pytest
from kombu.connection import Connection as KombuConnection
from kombu.entity import Exchange, Queue
from kombu.messaging import Consumer, Producer

import amqp_broker

if TYPE_CHECKING:
    from collections.abc import Iterator

    from kombu.message import Message as KombuMessage

NODE_DIR = Path(__file__).parent / "node"


@pytest.fixture(scope="module", params=["in-memory", "data-dir"])
def url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Every client against the in-memory broker and against one keeping a store
    (``--data-dir``): durability must change nothing a client sees."""
    data_dir = tmp_path_factory.mktemp("store") if request.param == "data-dir" else None
    with amqp_broker.run_in_thread(users={"guest": "guest"}, data_dir=data_dir) as broker_url:
        yield broker_url


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


# --- pika -----------------------------------------------------------------------------------


def test_pika_blocking_connection(url: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ch = connection.channel()
        ch.confirm_delivery()
        exchange, queue = unique("pika-x"), unique("pika-q")
        # durable and persistent: with a store, each confirm waits for its write
        ch.exchange_declare(exchange, "direct", durable=True)
        ch.queue_declare(queue, durable=True)
        ch.queue_bind(queue, exchange, "key")
        persistent = pika.BasicProperties(delivery_mode=2)
        for index in range(3):
            # confirmed: raises on a nack
            ch.basic_publish(exchange, "key", b"m%d" % index, properties=persistent)
        with pytest.raises(pika.exceptions.UnroutableError):
            ch.basic_publish(exchange, "nobody", b"lost", mandatory=True)

        method, _, body = ch.basic_get(queue)
        assert method is not None
        assert (body, method.message_count) == (b"m0", 2)
        ch.basic_ack(method.delivery_tag)

        received = []
        for method, _, body in ch.consume(queue, inactivity_timeout=2):
            assert method is not None, "the broker stopped delivering"
            received.append(body)
            ch.basic_ack(method.delivery_tag)
            if len(received) == 2:
                break
        ch.cancel()
        assert received == [b"m1", b"m2"]
        ch.queue_delete(queue)
        ch.exchange_delete(exchange)
    finally:
        connection.close()


def test_pika_rpc_round_trip(url: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        server, client = connection.channel(), connection.channel()
        rpc_queue = unique("pika-rpc")
        server.queue_declare(rpc_queue, exclusive=True)

        def answer(
            channel: pika.adapters.blocking_connection.BlockingChannel,
            method: pika.spec.Basic.Deliver,
            properties: pika.BasicProperties,
            body: bytes,
        ) -> None:
            channel.basic_publish(
                "",
                properties.reply_to,
                body.upper(),
                pika.BasicProperties(correlation_id=properties.correlation_id),
            )
            channel.basic_ack(method.delivery_tag)

        server.basic_consume(rpc_queue, answer)
        reply_queue = client.queue_declare("", exclusive=True).method.queue
        client.basic_publish(
            "",
            rpc_queue,
            b"ping",
            pika.BasicProperties(reply_to=reply_queue, correlation_id="c-1"),
        )
        for method, properties, body in client.consume(reply_queue, inactivity_timeout=2):
            assert method is not None, "no RPC reply"
            assert (properties.correlation_id, body) == ("c-1", b"PING")
            client.basic_ack(method.delivery_tag)
            break
    finally:
        connection.close()


def test_pika_sees_server_sent_cancel(url: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ch, admin = connection.channel(), connection.channel()
        queue = unique("pika-doomed")
        ch.queue_declare(queue)
        cancelled: list[str] = []
        ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
        tag = ch.basic_consume(queue, lambda *args: None)
        admin.queue_delete(queue)
        connection.process_data_events(time_limit=0.5)
        while not cancelled:
            connection.process_data_events(time_limit=0.5)
        assert cancelled == [tag]
    finally:
        connection.close()


# --- aio-pika -------------------------------------------------------------------------------


async def _aio_pika_scenario(url: str) -> None:
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        exchange = await channel.declare_exchange(
            unique("aio-x"), aio_pika.ExchangeType.TOPIC, durable=True
        )
        queue = await channel.declare_queue(unique("aio-q"), durable=True)
        await queue.bind(exchange, "a.#")
        for index in range(3):
            persistent = aio_pika.Message(
                b"m%d" % index, delivery_mode=aio_pika.DeliveryMode.PERSISTENT
            )
            await exchange.publish(persistent, routing_key="a.b")
        # aiormq answers a returned mandatory publish with the basic.return (as with RabbitMQ)
        returned = await exchange.publish(
            aio_pika.Message(b"lost"), routing_key="z", mandatory=True
        )
        assert isinstance(returned, aiormq.abc.DeliveredMessage)
        assert isinstance(returned.delivery, pamqp.commands.Basic.Return)
        assert (returned.delivery.reply_code, returned.delivery.reply_text) == (312, "NO_ROUTE")

        first = await queue.get(no_ack=False)
        assert first is not None
        assert first.body == b"m0"
        assert first.message_count == 2
        await first.ack()

        received = []
        async with queue.iterator() as messages:
            async for message in messages:
                received.append(message.body)
                await message.ack()
                if len(received) == 2:
                    break
        assert received == [b"m1", b"m2"]

        # RPC round trip
        rpc_queue = await channel.declare_queue(unique("aio-rpc"), exclusive=True)

        async def answer(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            async with message.process():
                await channel.default_exchange.publish(
                    aio_pika.Message(message.body.upper(), correlation_id=message.correlation_id),
                    routing_key=str(message.reply_to),
                )

        await rpc_queue.consume(answer)
        reply_queue = await channel.declare_queue("", exclusive=True)
        replies: asyncio.Queue[aio_pika.abc.AbstractIncomingMessage] = asyncio.Queue()
        await reply_queue.consume(replies.put, no_ack=True)
        await channel.default_exchange.publish(
            aio_pika.Message(b"ping", reply_to=reply_queue.name, correlation_id="c-1"),
            routing_key=rpc_queue.name,
        )
        reply = await asyncio.wait_for(replies.get(), 5)
        assert (reply.body, reply.correlation_id) == (b"PING", "c-1")

        # a server-sent cancel reaches aiormq's consumer-cancel callbacks
        doomed = await channel.declare_queue(unique("aio-doomed"))
        cancelled: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        raw = await channel.get_underlay_channel()
        raw.on_consumer_cancel_callbacks.add(
            lambda frame: (
                None if cancelled.done() else cancelled.set_result(str(frame.consumer_tag))
            )
        )

        async def ignore(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            await message.ack()

        tag = await doomed.consume(ignore)
        admin = await connection.channel()
        await admin.queue_delete(doomed.name)
        assert await asyncio.wait_for(cancelled, 5) == tag
        await queue.delete()
        await exchange.delete()


def test_aio_pika(url: str) -> None:
    asyncio.run(asyncio.wait_for(_aio_pika_scenario(url), 30))


# --- py-amqp through kombu ------------------------------------------------------------------


def test_kombu_py_amqp(url: str) -> None:
    with KombuConnection(
        url.replace("amqp://", "pyamqp://"), transport_options={"confirm_publish": True}
    ) as connection:
        exchange = Exchange(unique("kombu-x"), type="direct", durable=False)
        queue = Queue(unique("kombu-q"), exchange, routing_key="k", durable=False)
        with connection.channel() as channel:
            producer = Producer(channel, exchange=exchange)
            queue(channel).declare()
            for index in range(3):
                producer.publish({"n": index}, routing_key="k", serializer="json")

            message = queue(channel).get(no_ack=False)
            assert message is not None
            assert message.payload == {"n": 0}
            assert message.delivery_info["message_count"] == 2
            message.ack()

            received: list[object] = []

            def on_message(body: object, message: KombuMessage) -> None:
                received.append(body)
                message.ack()

            with Consumer(channel, [queue], callbacks=[on_message]):
                while len(received) < 2:
                    connection.drain_events(timeout=5)
            assert received == [{"n": 1}, {"n": 2}]

            # RPC round trip through the default exchange
            reply_queue = Queue(unique("kombu-reply"), exclusive=True, durable=False)
            rpc_queue = Queue(unique("kombu-rpc"), exclusive=True, durable=False)
            reply_queue(channel).declare()
            rpc_queue(channel).declare()
            replies: list[object] = []

            def serve(body: object, message: KombuMessage) -> None:
                assert isinstance(body, str)
                Producer(channel).publish(
                    body.upper(),
                    routing_key=message.properties["reply_to"],
                    correlation_id=message.properties["correlation_id"],
                    serializer="json",
                )
                message.ack()

            def collect(body: object, message: KombuMessage) -> None:
                replies.append((body, message.properties["correlation_id"]))
                message.ack()

            with (
                Consumer(channel, [rpc_queue], callbacks=[serve]),
                Consumer(channel, [reply_queue], callbacks=[collect]),
            ):
                Producer(channel).publish(
                    "ping",
                    routing_key=rpc_queue.name,
                    reply_to=reply_queue.name,
                    correlation_id="c-1",
                    serializer="json",
                )
                while not replies:
                    connection.drain_events(timeout=5)
            assert replies == [("PING", "c-1")]

            # py-amqp itself: a server-sent cancel reaches on_cancel
            raw = connection.default_channel
            doomed = unique("kombu-doomed")
            raw.queue_declare(doomed)
            cancelled: list[str] = []
            tag = raw.basic_consume(doomed, callback=lambda m: None, on_cancel=cancelled.append)
            with connection.channel() as admin:
                admin.queue_delete(doomed)
            while not cancelled:
                connection.drain_events(timeout=5)
            assert cancelled == [tag]
            queue(channel).delete()
            exchange(channel).delete()


# --- Node's amqplib -------------------------------------------------------------------------


def _node(script: str, url: str) -> object:
    """Run ``node tests/amqp_broker/node/<script> <url>``; what it printed, as JSON."""
    node = shutil.which("node")
    assert node is not None, "Node.js is needed for this test (apt-get install nodejs npm)"
    assert (NODE_DIR / "node_modules" / "amqplib").is_dir(), (
        "amqplib is not installed: run `make test` or `npm ci --prefix tests/amqp_broker/node`"
    )
    result = subprocess.run(
        [node, str(NODE_DIR / script), url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.node
def test_node_amqplib(url: str) -> None:
    assert _node("broker_client.js", url) == {
        "server": {"product": "RabbitMQ", "version": "3.10.8"},
        "confirmed": 2,
        "get": "one",
        "consumed": "two",
        "rpc": "PING",
        "returned": "NO_ROUTE",
        "cancelled": True,
    }


@pytest.mark.node
def test_node_amqplib_closes_with_publishes_queued(amqp_url: str) -> None:
    """amqplib's "find high watermark" tests: publishes fill its socket, then it closes the
    connection and goes on writing them after its connection.close. The broker reads them and
    keeps the socket open after close-ok until amqplib closes it, as RabbitMQ does; a broker
    that closes at once resets the socket and amqplib's close callback never runs (EPIPE)."""
    assert _node("close_with_queued_publishes.js", amqp_url) == {
        "plain": "closed",
        "confirm": "closed",
    }
