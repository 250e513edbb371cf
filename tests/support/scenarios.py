"""Integration scenarios written once against the client API every adapter shares.

Each ``scenario_*(connect, url)`` takes the adapter's ``connect`` (``amqp_trio.connect``, later
``amqp_asyncio.connect``, or a sync-to-async facade over ``amqp_blocking``) and a broker URL.
Scenarios use only that API and the standard library: no Trio, no asyncio, so they run under
any adapter. The caller bounds each one with its framework's timeout. Every queue has a unique
name and is deleted at the end.

The protocols below state the part of the API the scenarios use; mypy checks each adapter
against them, which keeps the adapters' surfaces from drifting apart.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from typing import TYPE_CHECKING, Final, Protocol

import pytest

from amqp_sansio import (
    BasicProperties,
    ChannelOpen,
    ChannelOpenOk,
    ConnectionClose,
    ConnectionOpen,
    ConnectionOpenOk,
    ConnectionStart,
    ConnectionStartOk,
    ConnectionTune,
    ConnectionTuneOk,
    Int64,
    QueueDeclare,
    QueueDeclareOk,
)
from amqp_sansio.client import (
    AccessRefused,
    ConnectionClosedError,
    ConnectionForced,
    ConnectionParameters,
    ConsumerCancelledError,
    MessageReturnedError,
    NotFound,
    PublishNackedError,
    ResourceLocked,
)
from amqp_sansio.framing import PROTOCOL_HEADER_0_9_1, FrameReader, MethodFrame
from amqp_sansio.testing import method_frame

from .rabbitmqctl import connection_pid, rabbitmqctl

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable
    from contextlib import AbstractAsyncContextManager

    from amqp_sansio import FieldTable, Method


class MessageLike(Protocol):
    @property
    def body(self) -> bytes: ...
    @property
    def properties(self) -> BasicProperties: ...
    @property
    def routing_key(self) -> str: ...
    @property
    def delivery_tag(self) -> int: ...
    @property
    def redelivered(self) -> bool: ...
    @property
    def consumer_tag(self) -> str | None: ...
    @property
    def message_count(self) -> int | None: ...
    @property
    def stream_offset(self) -> int | None: ...

    async def ack(self, *, multiple: bool = False) -> None: ...


class ConsumerLike(Protocol):
    @property
    def consumer_tag(self) -> str: ...

    def __aiter__(self) -> AsyncIterator[MessageLike]: ...


class PublisherLike(Protocol):
    @property
    def confirmed(self) -> int: ...
    @property
    def nacked(self) -> int: ...
    @property
    def failed(self) -> int: ...

    async def wait_for_confirms(self) -> None: ...

    async def publish(
        self,
        body: bytes,
        *,
        exchange: str = "",
        routing_key: str = "",
        properties: BasicProperties | None = None,
        mandatory: bool = False,
    ) -> object: ...


class ChannelLike(Protocol):
    @property
    def is_closed(self) -> bool: ...

    async def queue_declare(
        self,
        queue: str = "",
        *,
        passive: bool = False,
        durable: bool = False,
        exclusive: bool = False,
        auto_delete: bool = False,
        arguments: FieldTable | None = None,
    ) -> QueueDeclareOk: ...

    async def queue_delete(
        self, queue: str, *, if_unused: bool = False, if_empty: bool = False
    ) -> int: ...

    async def basic_qos(
        self, prefetch_count: int = 0, *, prefetch_size: int = 0, global_: bool = False
    ) -> None: ...

    async def confirm_select(self) -> None: ...

    async def basic_publish(
        self,
        body: bytes,
        *,
        exchange: str = "",
        routing_key: str = "",
        properties: BasicProperties | None = None,
        mandatory: bool = False,
    ) -> None: ...

    def publisher(self, window: int = 1000) -> AbstractAsyncContextManager[PublisherLike]: ...

    def basic_consume(
        self,
        queue: str,
        *,
        no_ack: bool = False,
        exclusive: bool = False,
        consumer_tag: str = "",
        arguments: FieldTable | None = None,
        buffer_size: int | None = None,
    ) -> AbstractAsyncContextManager[ConsumerLike]: ...

    async def basic_get(self, queue: str, *, no_ack: bool = False) -> MessageLike | None: ...


class ConnectionLike(Protocol):
    @property
    def blocked(self) -> bool: ...
    @property
    def is_closed(self) -> bool: ...

    def channel(self) -> AbstractAsyncContextManager[ChannelLike]: ...


class Connect(Protocol):
    def __call__(
        self, url_or_params: str = ..., *, connection_name: str | None = None
    ) -> AbstractAsyncContextManager[ConnectionLike]: ...


def unique(prefix: str) -> str:
    """A queue or exchange name no other test uses."""
    return f"test-{prefix}-{uuid.uuid4().hex[:12]}"


# --- Scenarios --------------------------------------------------------------------------------


async def scenario_publish_consume(connect: Connect, url: str) -> None:
    """Publish with confirms, consume with acks; bodies, properties and order survive."""
    queue = unique("pubcon")
    count = 20
    async with connect(url) as conn, conn.channel() as ch:
        await ch.queue_declare(queue)
        try:
            await ch.confirm_select()
            for n in range(count):
                props = BasicProperties(
                    content_type="text/plain", headers={"n": n}, message_id=f"m{n}"
                )
                await ch.basic_publish(f"body {n}".encode(), routing_key=queue, properties=props)
            await ch.basic_qos(5)
            seen: list[int] = []
            async with ch.basic_consume(queue) as consumer:
                async for msg in consumer:
                    n = len(seen)
                    assert msg.body == f"body {n}".encode()
                    assert msg.properties.content_type == "text/plain"
                    assert msg.properties.headers == {"n": n}
                    assert msg.properties.message_id == f"m{n}"
                    assert msg.routing_key == queue
                    assert msg.consumer_tag == consumer.consumer_tag
                    await msg.ack()
                    seen.append(n)
                    if len(seen) == count:
                        break
            assert seen == list(range(count))
            assert await ch.basic_get(queue) is None
        finally:
            await ch.queue_delete(queue)


async def scenario_basic_get(connect: Connect, url: str) -> None:
    """basic_get returns a message with the queue's remaining count, then None."""
    queue = unique("get")
    async with connect(url) as conn, conn.channel() as ch:
        await ch.queue_declare(queue)
        try:
            await ch.confirm_select()
            await ch.basic_publish(b"one", routing_key=queue)
            await ch.basic_publish(b"two", routing_key=queue)
            first = await ch.basic_get(queue)
            assert first is not None
            assert first.body == b"one"
            assert first.message_count == 1
            assert first.consumer_tag is None
            await first.ack()
            second = await ch.basic_get(queue, no_ack=True)
            assert second is not None
            assert second.body == b"two"
            assert await ch.basic_get(queue) is None
        finally:
            await ch.queue_delete(queue)


async def scenario_pipelined_confirms(connect: Connect, url: str) -> None:
    """The windowed publisher gets every publish confirmed."""
    queue = unique("window")
    count = 200
    async with connect(url) as conn, conn.channel() as ch:
        await ch.queue_declare(queue)
        try:
            async with ch.publisher(window=16) as pub:
                for n in range(count):
                    await pub.publish(b"%d" % n, routing_key=queue)
            assert pub.confirmed == count
            assert pub.failed == 0
            ok = await ch.queue_declare(queue, passive=True)
            assert ok.message_count == count
        finally:
            await ch.queue_delete(queue)


async def scenario_stream_offset(connect: Connect, url: str) -> None:
    """Read a stream queue from an offset: prefetch set, x-stream-offset as a consume
    argument; leaving the consumer must not reject the rest (a 540 would kill the
    connection)."""
    queue = unique("stream")
    total = 10
    start = 4
    async with connect(url) as conn, conn.channel() as ch:
        await ch.queue_declare(queue, durable=True, arguments={"x-queue-type": "stream"})
        try:
            await ch.confirm_select()
            for n in range(total):
                await ch.basic_publish(b"%d" % n, routing_key=queue)
            await ch.basic_qos(total)
            offsets: list[int] = []
            async with ch.basic_consume(
                queue, arguments={"x-stream-offset": Int64(start)}
            ) as consumer:
                async for msg in consumer:
                    headers = msg.properties.headers or {}
                    offset = headers["x-stream-offset"]
                    assert isinstance(offset, int)
                    assert msg.stream_offset == offset
                    assert msg.body == b"%d" % offset
                    await msg.ack()
                    offsets.append(offset)
                    if offset >= total - 1 - 2:  # stop early: buffered messages stay
                        break
            assert offsets == list(range(start, total - 2))
            # The connection survived leaving the consumer with deliveries buffered.
            assert not conn.is_closed
            ok = await ch.queue_declare(queue, passive=True)
            assert ok.queue == queue
        finally:
            await ch.queue_delete(queue)


async def scenario_nack(connect: Connect, url: str) -> None:
    """x-max-length 1 with x-overflow reject-publish: the second publish is nacked, both with
    basic_publish and with the pipelined publisher."""
    queue = unique("nack")
    args: FieldTable = {"x-max-length": 1, "x-overflow": "reject-publish"}
    async with connect(url) as conn, conn.channel() as ch:
        await ch.queue_declare(queue, arguments=args)
        try:
            await ch.confirm_select()
            await ch.basic_publish(b"fits", routing_key=queue)
            with pytest.raises(PublishNackedError) as nacked:
                await ch.basic_publish(b"overflows", routing_key=queue)
            assert nacked.value.publish_number == 2
            counts: list[int] = []

            async def publish_two() -> None:
                async with ch.publisher(window=4) as pub:
                    await pub.publish(b"a", routing_key=queue)
                    await pub.publish(b"b", routing_key=queue)
                    await pub.wait_for_confirms()
                    counts.append(pub.nacked)

            with pytest.raises(ExceptionGroup) as group:
                await publish_two()
            assert counts == [2]
            numbers = [
                e.publish_number
                for e in group.value.exceptions
                if isinstance(e, PublishNackedError)
            ]
            assert numbers == [3, 4]
        finally:
            await ch.queue_delete(queue)


async def scenario_mandatory_return(connect: Connect, url: str) -> None:
    """A mandatory publish nobody can route comes back as MessageReturnedError (312)."""
    nowhere = unique("noroute")
    async with connect(url) as conn, conn.channel() as ch:
        await ch.confirm_select()
        props = BasicProperties(message_id="lost")
        with pytest.raises(MessageReturnedError) as returned:
            await ch.basic_publish(
                b"undeliverable", routing_key=nowhere, mandatory=True, properties=props
            )
        error = returned.value
        assert error.reply_code == 312
        assert error.reply_text == "NO_ROUTE"
        assert error.publish_number == 1
        assert error.message.body == b"undeliverable"
        assert error.message.routing_key == nowhere
        assert error.message.properties.message_id == "lost"
        # The channel stays usable.
        await ch.basic_publish(b"", routing_key=nowhere)


async def scenario_server_cancel(connect: Connect, url: str) -> None:
    """Deleting the queue under a consumer ends its iterator with ConsumerCancelledError,
    after the messages already delivered."""
    queue = unique("cancel")
    async with connect(url) as conn, conn.channel() as ch, conn.channel() as other:
        await ch.queue_declare(queue)
        await ch.confirm_select()
        await ch.basic_publish(b"before", routing_key=queue)
        await ch.basic_qos(10)
        received: list[bytes] = []
        tags: list[str] = []

        async def consume() -> None:
            async with ch.basic_consume(queue) as consumer:
                tags.append(consumer.consumer_tag)
                async for msg in consumer:
                    received.append(msg.body)
                    await other.queue_delete(queue)

        with pytest.raises(ConsumerCancelledError) as cancelled:
            await consume()
        assert received == [b"before"]
        assert [cancelled.value.consumer_tag] == tags
        assert not ch.is_closed


async def scenario_channel_error(connect: Connect, url: str) -> None:
    """A passive declare of a missing queue raises NotFound and closes only that channel."""
    missing = unique("missing")
    async with connect(url) as conn:
        async with conn.channel() as ch:
            with pytest.raises(NotFound) as not_found:
                await ch.queue_declare(missing, passive=True)
            assert not_found.value.reply_code == 404
            assert missing in not_found.value.reply_text
            assert ch.is_closed
            with pytest.raises(NotFound):
                await ch.queue_declare(missing)
        assert not conn.is_closed
        async with conn.channel() as ch2:
            queue = unique("after-error")
            ok = await ch2.queue_declare(queue)
            assert ok.queue == queue
            await ch2.queue_delete(queue)


async def scenario_blocked(connect: Connect, url: str) -> None:
    """connection.blocked: with the memory alarm on, the broker blocks the connection after a
    publish and stops reading it; calls wait until the alarm is lifted, then go through.

    A thread lifts the alarm as soon as the connection reports being blocked (the window is
    about a second); it always restores the watermark, since other tests share the broker.
    """
    queue = unique("blocked")
    async with connect(url) as conn, conn.channel() as ch:
        await ch.queue_declare(queue)
        saw_blocked = threading.Event()

        def lift_alarm_once_blocked() -> None:
            try:
                deadline = time.monotonic() + 20.0
                while time.monotonic() < deadline and not conn.blocked:
                    time.sleep(0.02)
                if conn.blocked:
                    saw_blocked.set()
            finally:
                rabbitmqctl("set_vm_memory_high_watermark", "0.4")

        try:
            rabbitmqctl("set_vm_memory_high_watermark", "0.0000001")
        except BaseException:
            rabbitmqctl("set_vm_memory_high_watermark", "0.4")
            raise
        lifter = threading.Thread(target=lift_alarm_once_blocked, daemon=True)
        lifter.start()
        try:
            try:
                await ch.basic_publish(b"triggers the block", routing_key=queue)
                await ch.basic_publish(b"waits for unblock", routing_key=queue)
            finally:
                # Round trips until the lifter is done (never block the event loop on join()):
                # while blocked the broker reads nothing, so these wait for the alarm to lift.
                while lifter.is_alive():
                    await ch.queue_declare(queue, passive=True)
            assert saw_blocked.is_set()
            ok = await ch.queue_declare(queue, passive=True)
            assert ok.message_count == 2
            assert not conn.blocked
        finally:
            await ch.queue_delete(queue)  # the broker is shared: nothing left, pass or fail


async def scenario_forced_close(connect: Connect, url: str) -> None:
    """rabbitmqctl close_connection: the next call raises ConnectionForced with the reply
    text, and leaving the blocks is quiet."""
    name = unique("forced")
    reason = f"closed by test {name}"
    async with connect(url, connection_name=name) as conn, conn.channel() as ch:
        rabbitmqctl("close_connection", connection_pid(name), reason)
        with pytest.raises(ConnectionForced) as forced:
            await ch.queue_declare(unique("never"))
        assert forced.value.reply_code == 320
        assert forced.value.reply_text == f"CONNECTION_FORCED - {reason}"
        assert isinstance(forced.value, ConnectionClosedError)
        assert conn.is_closed


#: Scenarios any AMQP 0-9-1 broker should pass, by name.
SCENARIOS: Final[dict[str, Callable[[Connect, str], Awaitable[None]]]] = {
    "publish_consume": scenario_publish_consume,
    "basic_get": scenario_basic_get,
    "pipelined_confirms": scenario_pipelined_confirms,
    "nack": scenario_nack,
    "mandatory_return": scenario_mandatory_return,
    "server_cancel": scenario_server_cancel,
    "channel_error": scenario_channel_error,
}

#: Scenarios that need RabbitMQ itself: stream queues, or ``rabbitmqctl`` on this host.
RABBITMQ_SCENARIOS: Final[dict[str, Callable[[Connect, str], Awaitable[None]]]] = {
    "stream_offset": scenario_stream_offset,
    "blocked": scenario_blocked,
    "forced_close": scenario_forced_close,
}


# --- RabbitMQ 3.10's behaviour where clients depend on it (issue 15, A-F) ----------------------
#
# Each runs against RabbitMQ and the embedded broker with the same expectations; the texts were
# probed on RabbitMQ 3.10.8. They use a little more of the channel API than the scenarios above,
# so they take the adapters that have it all (amqp_trio, amqp_asyncio).


class FullChannelLike(ChannelLike, Protocol):
    async def exchange_declare(
        self,
        exchange: str,
        exchange_type: str = "direct",
        *,
        passive: bool = False,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: FieldTable | None = None,
    ) -> None: ...

    async def exchange_delete(self, exchange: str, *, if_unused: bool = False) -> None: ...

    async def exchange_bind(
        self,
        destination: str,
        source: str,
        routing_key: str = "",
        *,
        arguments: FieldTable | None = None,
    ) -> None: ...

    async def exchange_unbind(
        self,
        destination: str,
        source: str,
        routing_key: str = "",
        *,
        arguments: FieldTable | None = None,
    ) -> None: ...

    async def queue_bind(
        self,
        queue: str,
        exchange: str,
        routing_key: str = "",
        *,
        arguments: FieldTable | None = None,
    ) -> None: ...

    async def queue_unbind(
        self,
        queue: str,
        exchange: str,
        routing_key: str = "",
        *,
        arguments: FieldTable | None = None,
    ) -> None: ...

    async def basic_reject(self, delivery_tag: int, *, requeue: bool = True) -> None: ...

    async def basic_nack(
        self, delivery_tag: int, *, multiple: bool = False, requeue: bool = True
    ) -> None: ...


class FullConnectionLike(Protocol):
    @property
    def is_closed(self) -> bool: ...

    def channel(self) -> AbstractAsyncContextManager[FullChannelLike]: ...


class FullConnect(Protocol):
    def __call__(
        self, url_or_params: str = ..., *, connection_name: str | None = None
    ) -> AbstractAsyncContextManager[FullConnectionLike]: ...


async def _drain(ch: FullChannelLike, queue: str) -> list[tuple[bytes, bool]]:
    """Every message left in *queue*, with its redelivered flag (basic.get, no ack)."""
    got: list[tuple[bytes, bool]] = []
    while (message := await ch.basic_get(queue, no_ack=True)) is not None:
        got.append((message.body, message.redelivered))
    return got


async def scenario_unbind_missing(connect: FullConnect, url: str) -> None:
    """A. queue.unbind and exchange.unbind naming a queue or exchange that no longer exists
    answer unbind-ok (aio-pika's cleanup unbinds after an auto-delete)."""
    queue, exchange, other = unique("unbind-q"), unique("unbind-x"), unique("unbind-x2")
    async with connect(url) as conn, conn.channel() as ch:
        await ch.exchange_declare(exchange, "direct")
        await ch.exchange_declare(other, "direct")
        await ch.queue_declare(queue)
        await ch.queue_bind(queue, exchange, "k")
        await ch.exchange_bind(other, exchange, "k")
        await ch.queue_delete(queue)
        await ch.queue_unbind(queue, exchange, "k")  # the queue is gone
        await ch.exchange_delete(other)
        await ch.exchange_unbind(other, exchange, "k")  # the destination is gone
        await ch.exchange_unbind(exchange, other, "k")  # the source is gone
        await ch.exchange_delete(exchange)
        await ch.queue_unbind(queue, exchange, "k")  # both are gone
        await ch.exchange_unbind(other, exchange, "k")
        assert not ch.is_closed


async def scenario_requeue_in_place(connect: FullConnect, url: str) -> None:
    """B. basic.reject and basic.nack with requeue put each message back in its original
    position, one at a time or in any order."""
    queue = unique("requeue")
    async with connect(url) as conn, conn.channel() as ch:
        await ch.queue_declare(queue)
        try:
            await ch.confirm_select()
            for n in range(6):
                await ch.basic_publish(b"m%d" % n, routing_key=queue)
            tags = []
            for _ in range(4):
                message = await ch.basic_get(queue)
                assert message is not None
                tags.append(message.delivery_tag)
            for tag in tags:  # m0, m1, m2, m3 in turn
                await ch.basic_reject(tag, requeue=True)
            assert await _drain(ch, queue) == [
                (b"m0", True),
                (b"m1", True),
                (b"m2", True),
                (b"m3", True),
                (b"m4", False),
                (b"m5", False),
            ]
            for n in range(6):
                await ch.basic_publish(b"n%d" % n, routing_key=queue)
            tags = []
            for _ in range(4):
                message = await ch.basic_get(queue)
                assert message is not None
                tags.append(message.delivery_tag)
            for index in (2, 0, 3, 1):
                await ch.basic_nack(tags[index], requeue=True)
            await ch.basic_publish(b"late", routing_key=queue)
            assert [body for body, _ in await _drain(ch, queue)] == [
                b"n0",
                b"n1",
                b"n2",
                b"n3",
                b"n4",
                b"n5",
                b"late",
            ]
        finally:
            await ch.queue_delete(queue)


async def scenario_passive_default_exchange(connect: FullConnect, url: str) -> None:
    """C. A passive exchange.declare of the default exchange is 403 ACCESS_REFUSED; only the
    channel closes."""
    async with connect(url) as conn:
        async with conn.channel() as ch:
            with pytest.raises(AccessRefused) as refused:
                await ch.exchange_declare("", "direct", passive=True)
            assert refused.value.reply_code == 403
            assert refused.value.reply_text == (
                "ACCESS_REFUSED - operation not permitted on the default exchange"
            )
            assert ch.is_closed
        async with conn.channel() as ch:
            await ch.exchange_declare("amq.direct", "direct", passive=True)
        assert not conn.is_closed


async def scenario_exclusive_redeclare(connect: FullConnect, url: str) -> None:
    """E. A non-exclusive queue.declare of an exclusive queue from another channel of the same
    connection is 405 RESOURCE_LOCKED; a passive declare is allowed."""
    queue = unique("exclusive")
    async with connect(url) as conn, conn.channel() as ch:
        await ch.queue_declare(queue, exclusive=True)
        async with conn.channel() as other:
            with pytest.raises(ResourceLocked) as locked:
                await other.queue_declare(queue)
            assert locked.value.reply_code == 405
            assert locked.value.reply_text == (
                f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{queue}' in "
                "vhost '/'. It could be originally declared on another connection or the "
                "exclusive property value does not match that of the original declaration."
            )
        async with conn.channel() as other:
            ok = await other.queue_declare(queue, passive=True)
            assert ok.queue == queue
            await other.queue_declare(queue, exclusive=True)  # the same owner: fine
        await ch.queue_delete(queue)


async def scenario_priority_queue(connect: FullConnect, url: str) -> None:
    """F. x-max-priority: higher priority first, arrival order within a priority (none counts
    as 0, above the maximum as the maximum), for basic.get, deliveries and requeues."""
    queue = unique("priority")
    order = [1, 5, 3, 0, 9, None, 12, 5]
    async with connect(url) as conn, conn.channel() as ch:
        await ch.queue_declare(queue, arguments={"x-max-priority": 10})
        try:
            await ch.confirm_select()

            async def publish(body: bytes, priority: int | None) -> None:
                props = BasicProperties(priority=priority)
                await ch.basic_publish(body, routing_key=queue, properties=props)

            for n, priority in enumerate(order):
                await publish(b"%d:%s" % (n, str(priority).encode()), priority)
            got = [body for body, _ in await _drain(ch, queue)]
            assert got == [b"6:12", b"4:9", b"1:5", b"7:5", b"2:3", b"0:1", b"3:0", b"5:None"]

            for priority in (1, 5, 3, 0, 9):
                await publish(b"p%d" % priority, priority)
            taken = []
            for _ in range(2):
                message = await ch.basic_get(queue)
                assert message is not None
                taken.append(message.body)
            assert taken == [b"p9", b"p5"]
            await publish(b"p7", 7)
            await publish(b"p5b", 5)
            await ch.basic_nack(0, multiple=True, requeue=True)
            got = [body for body, _ in await _drain(ch, queue)]
            assert got == [b"p9", b"p7", b"p5", b"p5b", b"p3", b"p1", b"p0"]

            for priority in (1, 5, 3, 0, 9):
                await publish(b"c%d" % priority, priority)
            await ch.basic_qos(1)
            delivered: list[bytes] = []
            async with ch.basic_consume(queue) as consumer:
                async for message in consumer:
                    delivered.append(message.body)
                    await message.ack()
                    if len(delivered) == 5:
                        break
            assert delivered == [b"c9", b"c5", b"c3", b"c1", b"c0"]
        finally:
            await ch.queue_delete(queue)


async def scenario_bind_missing(connect: FullConnect, url: str) -> None:
    """queue.bind and exchange.bind with an end missing are 404 NOT_FOUND naming it; with both
    missing the 404 names the source exchange (RabbitMQ looks both up and reports the source
    first), before any exclusive-owner check of the queue."""
    queue, source, destination = unique("bind-q"), unique("bind-src"), unique("bind-dst")
    vhost = "in vhost '/'"
    # (which bind, its destination, its source, the missing end named, class id, method id)
    cases = [
        ("queue", queue, source, f"exchange '{source}'", 50, 20),
        ("queue", queue, "amq.direct", f"queue '{queue}'", 50, 20),
        ("exchange", destination, source, f"exchange '{source}'", 40, 30),
        ("exchange", destination, "amq.direct", f"exchange '{destination}'", 40, 30),
        ("exchange", "amq.direct", source, f"exchange '{source}'", 40, 30),
    ]
    async with connect(url) as conn:
        for kind, into, origin, named, class_id, method_id in cases:
            async with conn.channel() as ch:
                bind = ch.queue_bind if kind == "queue" else ch.exchange_bind
                with pytest.raises(NotFound) as missing:
                    await bind(into, origin, "k")
                assert missing.value.reply_text == f"NOT_FOUND - no {named} {vhost}"
                assert (missing.value.class_id, missing.value.method_id) == (class_id, method_id)
                assert ch.is_closed
        async with connect(url) as owner, owner.channel() as mine:
            await mine.queue_declare(queue, exclusive=True)
            async with conn.channel() as ch:
                with pytest.raises(NotFound) as missing:
                    await ch.queue_bind(queue, source, "k")  # not 405: the exchange is missing
                assert missing.value.reply_text == f"NOT_FOUND - no exchange '{source}' {vhost}"
        assert not conn.is_closed


#: Behaviours A, B, C, E, F of issue 15, by name (D needs raw frames: see
#: :func:`channel_above_channel_max`), and the 404s of a bind with missing ends.
BEHAVIOUR_SCENARIOS: Final[dict[str, Callable[[FullConnect, str], Awaitable[None]]]] = {
    "bind_missing": scenario_bind_missing,
    "unbind_missing": scenario_unbind_missing,
    "requeue_in_place": scenario_requeue_in_place,
    "passive_default_exchange": scenario_passive_default_exchange,
    "exclusive_redeclare": scenario_exclusive_redeclare,
    "priority_queue": scenario_priority_queue,
}


# --- raw frames -------------------------------------------------------------------------------


class RawAMQP:
    """A handshake and frames by hand on a blocking socket, for what no client lets one do
    (channel numbers above channel_max, a chosen tune-ok)."""

    def __init__(self, url: str, *, channel_max: int = 0, timeout: float = 10.0) -> None:
        params = ConnectionParameters.from_url(url)
        self.sock = socket.create_connection((params.host, params.port), timeout=timeout)
        self.reader = FrameReader()
        self.sock.sendall(PROTOCOL_HEADER_0_9_1)
        self.expect(ConnectionStart)
        self.send(
            0,
            ConnectionStartOk(
                client_properties={"capabilities": {"consumer_cancel_notify": True}},
                mechanism="PLAIN",
                response=b"\0%s\0%s" % (params.username.encode(), params.password.encode()),
                locale="en_US",
            ),
        )
        tune = self.expect(ConnectionTune)
        assert isinstance(tune, ConnectionTune)
        self.send(
            0,
            ConnectionTuneOk(
                channel_max=channel_max or tune.channel_max,
                frame_max=tune.frame_max,
                heartbeat=0,
            ),
        )
        self.send(0, ConnectionOpen(virtual_host=params.virtual_host))
        self.expect(ConnectionOpenOk)

    def send(self, channel: int, method: Method) -> None:
        self.sock.sendall(method_frame(channel, method))

    def method(self) -> tuple[int, Method] | None:
        """The next method frame's channel and method (None at the end of the stream)."""
        while True:
            frame = self.reader.next_frame()
            if frame is None:
                try:
                    data = self.sock.recv(65536)
                except ConnectionResetError:
                    data = b""
                if not data:
                    return None
                self.reader.feed(data)
            elif isinstance(frame, MethodFrame):
                return frame.channel, frame.method

    def expect(self, kind: type[Method], channel: int = 0) -> Method:
        got = self.method()
        assert got is not None, f"the connection ended before {kind.__name__}"
        assert got[0] == channel, got
        assert isinstance(got[1], kind), got
        return got[1]

    def close(self) -> None:
        self.sock.close()


def channel_above_channel_max(url: str) -> None:
    """D. channel.open on a number above the negotiated channel_max opens the channel (RabbitMQ
    3.10 limits how many are open); one more open channel than channel_max is 530, named by no
    method."""
    raw = RawAMQP(url)
    try:
        raw.send(65535, ChannelOpen())
        raw.expect(ChannelOpenOk, 65535)
        raw.send(65535, QueueDeclare(queue="", exclusive=True))
        declared = raw.expect(QueueDeclareOk, 65535)
        assert isinstance(declared, QueueDeclareOk)
        assert declared.queue.startswith("amq.gen-")
    finally:
        raw.close()
    raw = RawAMQP(url, channel_max=2)
    try:
        raw.send(1, ChannelOpen())
        raw.expect(ChannelOpenOk, 1)
        raw.send(500, ChannelOpen())
        raw.expect(ChannelOpenOk, 500)
        raw.send(3, ChannelOpen())
        close = raw.expect(ConnectionClose)
        assert close == ConnectionClose(
            reply_code=530,
            reply_text=(
                "NOT_ALLOWED - number of channels opened (2) has reached the negotiated "
                "channel_max (2)"
            ),
            class_id=0,
            method_id=0,
        )
    finally:
        raw.close()
