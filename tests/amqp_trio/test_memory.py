"""amqp_trio without a broker: the client against our own server-role core over in-memory
streams, on Trio's MockClock (autojump), so timeouts and heartbeats take no real time.

Each test runs a small scripted server (``amqp_trio.serve_stream`` + a handler) and asserts what
crosses the wire: what the server receives, what the client raises.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final, final

import pytest
import trio
import trio.testing

import amqp_sansio
import amqp_trio
from amqp_sansio import (
    NEED_DATA,
    AuthenticationRequested,
    BasicAck,
    BasicCancel,
    BasicCancelOk,
    BasicConsume,
    BasicConsumeOk,
    BasicDeliver,
    BasicProperties,
    BasicPublish,
    BasicQos,
    BasicQosOk,
    ChannelClosed,
    ChannelOpened,
    ConfirmSelect,
    ConfirmSelectOk,
    ConnectionBlocked,
    ConnectionClosed,
    ConnectionConfig,
    ConnectionLost,
    ConnectionOpened,
    ConnectionUnblocked,
    MessageReceived,
    MethodReceived,
    QueueDeclare,
    QueueDeclareOk,
    RemoteProtocolError,
    Role,
    VirtualHostRequested,
)
from amqp_sansio.framing import FrameReader, HeartbeatFrame
from amqp_trio import ServerConnection
from amqp_trio._wire import CLOSE_LINGER

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from contextlib import AbstractAsyncContextManager

    from amqp_sansio import Buffer, Event, Method

pytestmark = pytest.mark.trio

URL: Final = "amqp://guest:guest@memory/?connection_timeout=5000"


# --- Test plumbing ----------------------------------------------------------------------------


@final
class TapStream(trio.abc.Stream):
    """A stream wrapper that records what is sent and can go silent (drop every send),
    which is how a dead peer looks from the other end."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner
        self.sent = bytearray()
        self.silent = False
        #: When the last octets arrived from the other end (Trio's clock).
        self.last_received = -math.inf

    async def send_all(self, data: Buffer) -> None:
        if self.silent:
            await trio.lowlevel.checkpoint()
            return
        self.sent += data
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await self.inner.receive_some(max_bytes)
        if data:
            self.last_received = trio.current_time()
        return data

    async def aclose(self) -> None:
        await self.inner.aclose()

    def heartbeats_sent(self) -> int:
        reader = FrameReader()
        reader.feed(bytes(self.sent[8:]) if self.sent.startswith(b"AMQP") else bytes(self.sent))
        count = 0
        while (frame := reader.next_frame()) is not None:
            count += isinstance(frame, HeartbeatFrame)
        return count


async def accept(conn: ServerConnection) -> None:
    """The server side of the handshake: accept any login and virtual host."""
    while True:
        event = await conn.next_event()
        if isinstance(event, AuthenticationRequested):
            conn.core.accept_authentication()
        elif isinstance(event, VirtualHostRequested):
            conn.core.accept_virtual_host()
        elif isinstance(event, ConnectionOpened):
            await conn.flush()
            return
        else:
            raise AssertionError(f"unexpected {event!r} during the handshake")


async def next_request(conn: ServerConnection) -> MethodReceived | MessageReceived:
    """The next method or message from the client (channel opens and closes are answered by
    the core)."""
    while True:
        event = await conn.next_event()
        if isinstance(event, ChannelOpened | ChannelClosed):
            continue
        if isinstance(event, MethodReceived | MessageReceived):
            return event
        raise AssertionError(f"expected a request, got {event!r}")


async def expect(conn: ServerConnection, cls: type[Method]) -> MethodReceived:
    event = await next_request(conn)
    assert isinstance(event, MethodReceived), event
    assert isinstance(event.method, cls), event
    return event


async def until_channel_closed(conn: ServerConnection) -> list[type[Method]]:
    """Read until the client closed a channel (the core answers close-ok); returns the
    methods received on the way."""
    methods: list[type[Method]] = []
    while True:
        event = await conn.next_event()
        if isinstance(event, ChannelClosed):
            assert event.by_peer
            return methods
        if isinstance(event, MethodReceived | MessageReceived):
            methods.append(type(event.method))
        elif not isinstance(event, ChannelOpened):
            raise AssertionError(f"expected a channel close, got {event!r}")


async def reply(conn: ServerConnection, channel: int, method: Method) -> None:
    conn.core.send_method(channel, method)
    await conn.flush()


def declare_ok(queue: str) -> QueueDeclareOk:
    return QueueDeclareOk(queue=queue, message_count=0, consumer_count=0)


async def serve_consume(conn: ServerConnection, *, prefetch: int) -> tuple[int, str]:
    """Answer basic.qos and basic.consume; returns (channel, consumer tag)."""
    qos = await expect(conn, BasicQos)
    assert isinstance(qos.method, BasicQos)
    assert qos.method.prefetch_count == prefetch
    await reply(conn, qos.channel, BasicQosOk())
    consume = await expect(conn, BasicConsume)
    assert isinstance(consume.method, BasicConsume)
    tag = consume.method.consumer_tag
    await reply(conn, consume.channel, BasicConsumeOk(consumer_tag=tag))
    return consume.channel, tag


def deliver(conn: ServerConnection, channel: int, tag: str, n: int) -> None:
    method = BasicDeliver(consumer_tag=tag, delivery_tag=n, exchange="", routing_key="q")
    conn.core.send_content(channel, method, BasicProperties(), b"m%d" % n)


async def run_server(
    nursery: trio.Nursery,
    script: Callable[[ServerConnection], Awaitable[None]],
    *,
    heartbeat: int = 0,
    lockstep: bool = False,
) -> tuple[TapStream, TapStream]:
    """Start *script* as the server on one end of an in-memory pair; returns the client's
    end and the server's end, both tapped."""
    pair = trio.testing.lockstep_stream_pair() if lockstep else trio.testing.memory_stream_pair()
    client, server = TapStream(pair[0]), TapStream(pair[1])
    config = ConnectionConfig(heartbeat=heartbeat)
    nursery.start_soon(
        lambda: amqp_trio.serve_stream(script, server, config=config),
        name="fake server",
    )
    return client, server


def connect(stream: trio.abc.Stream) -> AbstractAsyncContextManager[amqp_trio.Connection]:
    return amqp_trio.connect_stream(stream, URL)


# --- Handshake and timeouts -------------------------------------------------------------------


async def test_connection_timeout_when_the_server_never_answers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    client, _server = trio.testing.memory_stream_pair()
    start = trio.current_time()
    with pytest.raises(amqp_trio.ConnectionTimeoutError, match=r"within 5\.0 s"):
        async with amqp_trio.connect_stream(client, URL):
            raise AssertionError("connected to nobody")
    assert trio.current_time() - start == pytest.approx(5.0)


async def test_login_refused_raises_with_the_reply_text(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def refuse(conn: ServerConnection) -> None:
        event = await conn.next_event()
        assert isinstance(event, AuthenticationRequested)
        assert event.username == "guest"
        conn.core.refuse_authentication("Login was refused")
        await conn.flush()
        await conn.next_event()  # close-ok

    async with trio.open_nursery() as nursery:
        client, _ = await run_server(nursery, refuse)
        with pytest.raises(amqp_trio.ConnectionClosedError) as info:
            async with amqp_trio.connect_stream(client, URL):
                raise AssertionError("logged in")
        assert info.value.reply_code == 403
        assert info.value.reply_text == "ACCESS_REFUSED - Login was refused"


# --- Cancellation -----------------------------------------------------------------------------


async def test_cancelled_call_late_reply_is_dropped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    release = trio.Event()

    async def script(conn: ServerConnection) -> None:
        await accept(conn)
        first = await expect(conn, QueueDeclare)
        await release.wait()
        await reply(conn, first.channel, declare_ok("first"))
        second = await expect(conn, QueueDeclare)
        await reply(conn, second.channel, declare_ok("second"))
        assert await until_channel_closed(conn) == []

    async with trio.open_nursery() as nursery:
        client, _ = await run_server(nursery, script)
        async with connect(client) as conn, conn.channel() as ch:
            with trio.move_on_after(1) as scope:
                await ch.queue_declare("first")
            assert scope.cancelled_caught
            release.set()
            ok = await ch.queue_declare("second")
            assert ok.queue == "second"
            assert not ch.is_closed


async def test_cancelled_open_channel_closes_it_when_it_opens(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def script(conn: ServerConnection) -> None:
        await accept(conn)
        assert await until_channel_closed(conn) == []  # the channel nobody waited for
        declare = await expect(conn, QueueDeclare)
        assert declare.channel == 1  # the id was freed and reused
        await reply(conn, declare.channel, declare_ok("q"))
        assert await until_channel_closed(conn) == []

    async with trio.open_nursery() as nursery:
        client, _ = await run_server(nursery, script)
        async with connect(client) as conn:
            with trio.CancelScope() as scope:
                scope.cancel()
                await conn.open_channel()
            await trio.sleep(1)
            async with conn.channel() as ch:
                assert ch.number == 1
                assert (await ch.queue_declare("q")).queue == "q"


# --- Broker signals ---------------------------------------------------------------------------


async def test_channel_error_fails_the_call_and_keeps_the_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def script(conn: ServerConnection) -> None:
        await accept(conn)
        declare = await expect(conn, QueueDeclare)
        conn.core.close_channel(declare.channel, 404, "NOT_FOUND - no queue 'q' in vhost '/'")
        await conn.flush()
        again = await expect(conn, QueueDeclare)
        await reply(conn, again.channel, declare_ok("q2"))
        assert await until_channel_closed(conn) == []

    async with trio.open_nursery() as nursery:
        client, _ = await run_server(nursery, script)
        async with connect(client) as conn:
            async with conn.channel() as ch:
                with pytest.raises(amqp_trio.NotFound) as info:
                    await ch.queue_declare("q", passive=True)
                assert info.value.reply_text == "NOT_FOUND - no queue 'q' in vhost '/'"
                assert ch.is_closed
                with pytest.raises(amqp_trio.NotFound):
                    await ch.basic_publish(b"")
            async with conn.channel() as ch2:
                assert (await ch2.queue_declare("q2")).queue == "q2"


async def test_blocked_publish_waits_and_honours_fail_after(
    autojump_clock: trio.testing.MockClock,
) -> None:
    unblock = trio.Event()
    published: list[bytes] = []

    async def script(conn: ServerConnection) -> None:
        await accept(conn)
        assert isinstance(await conn.next_event(), ChannelOpened)
        await reply(conn, 0, ConnectionBlocked(reason="low on memory"))
        await unblock.wait()
        await reply(conn, 0, ConnectionUnblocked())
        message = await next_request(conn)
        assert isinstance(message, MessageReceived)
        assert isinstance(message.method, BasicPublish)
        published.append(bytes(message.body))
        assert await until_channel_closed(conn) == []

    async with trio.open_nursery() as nursery:
        client, _ = await run_server(nursery, script)
        async with connect(client) as conn, conn.channel() as ch:
            while not conn.blocked:
                await trio.sleep(0.1)
            assert conn.blocked_reason == "low on memory"
            with pytest.raises(trio.TooSlowError):
                with trio.fail_after(3):
                    await ch.basic_publish(b"too early", routing_key="q")
            unblock.set()
            await ch.basic_publish(b"after unblock", routing_key="q")
            assert not conn.blocked
    assert published == [b"after unblock"]  # the timed-out publish never reached the wire


async def test_server_close_fails_pending_call_and_consumer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def script(conn: ServerConnection) -> None:
        await accept(conn)
        await serve_consume(conn, prefetch=0)
        await expect(conn, QueueDeclare)
        conn.core.close(320, "CONNECTION_FORCED - broker shutdown")
        await conn.flush()
        await conn.next_event()  # close-ok

    async with trio.open_nursery() as nursery:
        client, _ = await run_server(nursery, script)
        async with connect(client) as conn, conn.channel() as ch:
            await ch.basic_qos(0)
            async with ch.basic_consume("q") as consumer:
                with pytest.raises(amqp_trio.ConnectionForced) as info:
                    await ch.queue_declare("q")
                assert info.value.reply_text == "CONNECTION_FORCED - broker shutdown"
                with pytest.raises(amqp_trio.ConnectionForced):
                    await consumer.__anext__()
            assert conn.is_closed
            assert conn.close_error is info.value
            with pytest.raises(amqp_trio.ConnectionForced):
                await conn.open_channel()


async def test_server_close_leaves_pending_confirms_unknown(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Issue 17, defect 4: publishes pending when the broker closes the connection may have
    been routed: their outcome is unknown, never the 320 itself nor a nack."""

    async def script(conn: ServerConnection) -> None:
        await accept(conn)
        select = await expect(conn, ConfirmSelect)
        await reply(conn, select.channel, ConfirmSelectOk())
        for _ in range(3):
            assert isinstance(await next_request(conn), MessageReceived)
        conn.core.send_method(select.channel, BasicAck(delivery_tag=1, multiple=False))
        conn.core.close(320, "CONNECTION_FORCED - broker shutdown")
        await conn.flush()
        await conn.next_event()  # close-ok

    async with trio.open_nursery() as nursery:
        client, _ = await run_server(nursery, script)
        async with connect(client) as conn, conn.channel() as ch:
            await ch.confirm_select()
            async with ch.publisher(window=10) as publisher:
                tickets = [await publisher.publish(b"m", routing_key="q") for _ in range(3)]
                await publisher.wait_for_confirms()
                failures = publisher.take_failures()
            assert tickets[0].error is None
            assert [type(t.error) for t in tickets[1:]] == [
                amqp_trio.PublishOutcomeUnknownError
            ] * 2
            assert failures == [t.error for t in tickets[1:]]
            for ticket in tickets[1:]:
                error = ticket.error
                assert isinstance(error, amqp_trio.PublishOutcomeUnknownError)
                assert isinstance(error.cause, amqp_trio.ConnectionForced)
                assert "unknown outcome" in str(error)
            assert (publisher.confirmed, publisher.unknown, publisher.nacked) == (1, 2, 0)


async def test_transport_loss_fails_pending_calls(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def script(conn: ServerConnection) -> None:
        await accept(conn)
        await expect(conn, QueueDeclare)
        await conn.aclose()  # no close handshake: the TCP connection just ends

    async with trio.open_nursery() as nursery:
        client, _ = await run_server(nursery, script)
        async with connect(client) as conn, conn.channel() as ch:
            with pytest.raises(amqp_trio.ConnectionLostError):
                await ch.queue_declare("q")
            assert isinstance(conn.close_error, amqp_trio.ConnectionLostError)


# --- Consumers --------------------------------------------------------------------------------


async def test_leaving_a_consumer_cancels_it_without_rejecting_buffered_messages(
    autojump_clock: trio.testing.MockClock,
) -> None:
    after_cancel: list[type[Method]] = []

    async def script(conn: ServerConnection) -> None:
        await accept(conn)
        channel, tag = await serve_consume(conn, prefetch=10)
        for n in range(1, 6):
            deliver(conn, channel, tag, n)
        await conn.flush()
        ack = await expect(conn, BasicAck)
        assert isinstance(ack.method, BasicAck)
        assert ack.method.delivery_tag == 1
        cancel = await expect(conn, BasicCancel)
        deliver(conn, channel, tag, 6)  # crosses the cancel: must not block the client
        await reply(conn, channel, BasicCancelOk(consumer_tag=tag))
        assert isinstance(cancel.method, BasicCancel)
        assert cancel.method.consumer_tag == tag
        after_cancel.extend(await until_channel_closed(conn))

    async with trio.open_nursery() as nursery:
        client, _ = await run_server(nursery, script)
        async with connect(client) as conn, conn.channel() as ch:
            await ch.basic_qos(10)
            async with ch.basic_consume("q") as consumer:
                async for msg in consumer:
                    await msg.ack()
                    break
    # Nothing rejected or nacked: the unprocessed deliveries go back when the channel closes.
    assert after_cancel == []


async def test_server_cancel_ends_iteration_after_buffered_messages(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def script(conn: ServerConnection) -> None:
        await accept(conn)
        channel, tag = await serve_consume(conn, prefetch=0)
        deliver(conn, channel, tag, 1)
        deliver(conn, channel, tag, 2)
        conn.core.send_method(channel, BasicCancel(consumer_tag=tag))
        await conn.flush()
        await expect(conn, BasicCancelOk)  # answered by the client's core
        assert await until_channel_closed(conn) == []

    async with trio.open_nursery() as nursery:
        client, _ = await run_server(nursery, script)
        async with connect(client) as conn, conn.channel() as ch:
            await ch.basic_qos(0)
            bodies: list[bytes] = []
            tags: list[str] = []

            async def consume() -> None:
                async with ch.basic_consume("q") as consumer:
                    tags.append(consumer.consumer_tag)
                    async for msg in consumer:
                        bodies.append(msg.body)  # noqa: PERF401  (kept when it raises)

            with pytest.raises(amqp_trio.ConsumerCancelledError) as info:
                await consume()
            assert bodies == [b"m1", b"m2"]
            assert [info.value.consumer_tag] == tags
            assert not ch.is_closed


# --- Heartbeats -------------------------------------------------------------------------------


async def test_heartbeats_go_out_when_idle(autojump_clock: trio.testing.MockClock) -> None:
    async def script(conn: ServerConnection) -> None:
        await accept(conn)
        declare = await expect(conn, QueueDeclare)
        await reply(conn, declare.channel, declare_ok("q"))
        assert await until_channel_closed(conn) == []

    async with trio.open_nursery() as nursery:
        client, server = await run_server(nursery, script, heartbeat=2)
        async with connect(client) as conn, conn.channel() as ch:
            assert conn.heartbeat == 2
            await trio.sleep(30)
            # Both sides kept each other alive through 15 intervals of silence.
            assert client.heartbeats_sent() >= 10
            assert server.heartbeats_sent() >= 10
            assert (await ch.queue_declare("q")).queue == "q"


async def test_dead_peer_is_detected(autojump_clock: trio.testing.MockClock) -> None:
    async def script(conn: ServerConnection) -> None:
        await accept(conn)
        await expect(conn, QueueDeclare)
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        client, server = await run_server(nursery, script, heartbeat=2)
        async with connect(client) as conn, conn.channel() as ch:
            server.silent = True  # the server's host vanished: not even heartbeats
            start = trio.current_time()
            with pytest.raises(amqp_trio.HeartbeatTimeoutError, match="heartbeat"):
                await ch.queue_declare("q")
            assert trio.current_time() - start <= 3 * 2
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("quiet_after", [10.0, 10.25, 10.5, 10.75])
async def test_dead_peer_is_declared_two_intervals_after_its_last_octet(
    autojump_clock: trio.testing.MockClock, quiet_after: float
) -> None:
    # Not when the writer's next tick noticed the last octet (2.5 intervals in the worst case).
    async def script(conn: ServerConnection) -> None:
        await accept(conn)
        await expect(conn, QueueDeclare)
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        client, server = await run_server(nursery, script, heartbeat=2)
        async with connect(client) as conn, conn.channel() as ch:
            await trio.sleep(quiet_after)  # heartbeats both ways meanwhile
            server.silent = True
            with pytest.raises(amqp_trio.HeartbeatTimeoutError, match="heartbeat"):
                await ch.queue_declare("q")
            assert trio.current_time() - client.last_received == pytest.approx(2 * 2)
        nursery.cancel_scope.cancel()


async def test_server_sees_a_lost_client(autojump_clock: trio.testing.MockClock) -> None:
    events: list[Event] = []

    async def script(conn: ServerConnection) -> None:
        await accept(conn)
        events.append(await conn.next_event())

    async with trio.open_nursery() as nursery:
        client, _ = await run_server(nursery, script, heartbeat=2)
        async with connect(client):
            client.silent = True
            await trio.sleep(10)
    assert len(events) == 1
    assert isinstance(events[0], ConnectionLost)


async def test_a_full_buffer_never_stops_the_reader(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Issue 28: the application takes nothing, its buffer holds the whole prefetch, and the
    broker's close is still seen at once: the reader never waits for room."""

    async def script(conn: ServerConnection) -> None:
        await accept(conn)
        channel, tag = await serve_consume(conn, prefetch=2)
        for n in (1, 2):
            deliver(conn, channel, tag, n)
        await conn.flush()
        await trio.sleep(5)
        conn.core.close(320, "CONNECTION_FORCED - test")
        await conn.flush()
        await conn.next_event()  # close-ok

    async with trio.open_nursery() as nursery:
        client, _ = await run_server(nursery, script)
        async with connect(client) as conn, conn.channel() as ch:
            await ch.basic_qos(2)
            async with ch.basic_consume("q") as consumer:
                await trio.sleep(4)
                assert consumer.buffered == 2
                assert conn.close_error is None
                await trio.sleep(2)
                # Seen within a second of being sent, with the buffer still full.
                assert isinstance(conn.close_error, amqp_trio.ConnectionForced)
                with pytest.raises(amqp_trio.ConnectionForced):
                    await consumer.__anext__()


async def test_a_consumer_without_a_prefetch_is_paused_and_resumed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Issue 28: a consumer the broker does not bound (no prefetch) holds at most its
    buffer_size: past it the client sends basic.cancel, and consumes again with the same tag
    once the application took half; nothing is lost or reordered."""
    sent: list[type[Method]] = []

    async def script(conn: ServerConnection) -> None:
        await accept(conn)
        declare = await expect(conn, QueueDeclare)
        await reply(conn, declare.channel, declare_ok("q"))
        consume = await expect(conn, BasicConsume)
        assert isinstance(consume.method, BasicConsume)
        channel, tag = consume.channel, consume.method.consumer_tag
        await reply(conn, channel, BasicConsumeOk(consumer_tag=tag))
        for n in range(1, 7):  # 6 on their way: 4 fit, the 5th pauses, the 6th was in flight
            deliver(conn, channel, tag, n)
        await conn.flush()
        cancel = await expect(conn, BasicCancel)
        assert isinstance(cancel.method, BasicCancel)
        assert cancel.method.consumer_tag == tag
        sent.append(BasicCancel)
        await reply(conn, channel, BasicCancelOk(consumer_tag=tag))
        acks: list[int] = []
        while len(acks) < 8:  # the acks, and the consume again once half was taken
            event = await expect(conn, BasicAck | BasicConsume)  # type: ignore[arg-type]
            if isinstance(event.method, BasicAck):
                acks.append(event.method.delivery_tag)
                continue
            assert isinstance(event.method, BasicConsume)
            assert event.method.consumer_tag == tag
            assert acks == [1, 2, 3]  # resumed as the 4th was taken: 2 of 6 left
            sent.append(BasicConsume)
            await reply(conn, channel, BasicConsumeOk(consumer_tag=tag))
            for n in range(7, 9):
                deliver(conn, channel, tag, n)
            await conn.flush()
        assert acks == list(range(1, 9))
        await expect(conn, BasicCancel)
        await reply(conn, channel, BasicCancelOk(consumer_tag=tag))
        assert await until_channel_closed(conn) == []

    async with trio.open_nursery() as nursery:
        client, _ = await run_server(nursery, script)
        async with connect(client) as conn, conn.channel() as ch:
            await ch.queue_declare("q")
            async with ch.basic_consume("q", buffer_size=4) as consumer:
                await trio.sleep(1)
                assert consumer.buffered == 6  # kept, not dropped: the pause is upstream
                assert sent == [BasicCancel]
                received = []
                async for msg in consumer:
                    received.append(msg.delivery_tag)
                    await msg.ack()
                    if len(received) == 8:
                        break
                assert received == list(range(1, 9))
                assert sent == [BasicCancel, BasicConsume]


async def test_slow_consumer_is_not_mistaken_for_a_dead_peer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def script(conn: ServerConnection) -> None:
        await accept(conn)
        channel, tag = await serve_consume(conn, prefetch=3)
        for n in range(1, 4):
            deliver(conn, channel, tag, n)
        await conn.flush()
        acks = [await expect(conn, BasicAck) for _ in range(3)]
        assert [a.method.delivery_tag for a in acks if isinstance(a.method, BasicAck)] == [1, 2, 3]
        declare = await expect(conn, QueueDeclare)
        await reply(conn, declare.channel, declare_ok("still here"))
        await expect(conn, BasicCancel)
        await reply(conn, channel, BasicCancelOk(consumer_tag=tag))
        assert await until_channel_closed(conn) == []

    async with trio.open_nursery() as nursery:
        client, _ = await run_server(nursery, script, heartbeat=2, lockstep=True)
        async with connect(client) as conn, conn.channel() as ch:
            await ch.basic_qos(3)
            async with ch.basic_consume("q") as consumer:
                # The application takes nothing for 15 heartbeat intervals.
                await trio.sleep(30)
                assert consumer.buffered == 3
                assert client.heartbeats_sent() >= 10  # the server kept hearing from us
                for _ in range(3):
                    msg = await consumer.__anext__()
                    await msg.ack()
                assert (await ch.queue_declare("q")).queue == "still here"


async def test_dead_peer_is_detected_while_a_consumer_buffer_is_full(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The application takes nothing: the reader still reads, so a silent peer is dead two
    # intervals after its last octet, full buffer or not.
    async def script(conn: ServerConnection) -> None:
        await accept(conn)
        channel, tag = await serve_consume(conn, prefetch=1)
        deliver(conn, channel, tag, 1)
        await conn.flush()
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        client, server = await run_server(nursery, script, heartbeat=2)
        async with connect(client) as conn, conn.channel() as ch:
            await ch.basic_qos(1)
            async with ch.basic_consume("q") as consumer:
                await trio.sleep(1)
                assert consumer.buffered == 1
                server.silent = True
                silent_since = trio.current_time()
                with trio.fail_after(60):
                    while conn.close_error is None:
                        await trio.sleep(0.25)
                assert isinstance(conn.close_error, amqp_trio.HeartbeatTimeoutError)
                assert trio.current_time() - silent_since <= 2 * 2 + 0.25
                assert consumer.buffered == 1
                with pytest.raises(amqp_trio.HeartbeatTimeoutError):
                    await consumer.__anext__()
        nursery.cancel_scope.cancel()


async def test_serve_over_tcp() -> None:
    async def handler(conn: ServerConnection) -> None:
        await accept(conn)
        assert conn.peer.startswith("127.0.0.1:")
        declare = await expect(conn, QueueDeclare)
        assert isinstance(declare.method, QueueDeclare)
        await reply(conn, declare.channel, declare_ok(f"echo-{declare.method.queue}"))
        assert await until_channel_closed(conn) == []
        event = await conn.next_event()
        assert event.__class__.__name__ == "ConnectionClosed"

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(amqp_trio.serve, handler, "127.0.0.1", 0)
        port = listeners[0].socket.getsockname()[1]
        async with amqp_trio.connect(f"amqp://127.0.0.1:{port}") as conn:
            async with conn.channel() as ch:
                assert (await ch.queue_declare("q")).queue == "echo-q"
            assert conn.server_properties["product"] == "amqp-sansio"
        nursery.cancel_scope.cancel()


# --- Closing while the connection closes, failed cores, cancellation, writes -----------------

CLOSE_METHOD: Final = b"\x00\x0a\x00\x32"  # connection.close's class and method ids


async def test_closing_channels_while_the_connection_closes_is_quiet(
    autojump_clock: trio.testing.MockClock,
) -> None:
    got_close = trio.Event()
    release = trio.Event()
    seen: list[type[Event]] = []

    async def script(conn: ServerConnection) -> None:
        await accept(conn)
        while True:
            event = await conn.next_event()
            seen.append(type(event))
            if isinstance(event, ConnectionClosed):
                got_close.set()
                await release.wait()
                return  # the close-ok goes out as the connection ends

    async with trio.open_nursery() as nursery:
        client, _ = await run_server(nursery, script)
        async with connect(client) as conn:
            first = await conn.open_channel()
            async with trio.open_nursery() as closer:
                async with conn.channel() as second:
                    closer.start_soon(conn.aclose)
                    await got_close.wait()  # the client's core is CLIENT_CLOSING now
                    await first.aclose()  # used to raise LocalProtocolError
                    assert first.is_closed
                    with pytest.raises(amqp_trio.ConnectionClosedError, match="closing"):
                        await second.queue_declare("q")
                    with pytest.raises(amqp_trio.ConnectionClosedError, match="closing"):
                        await second.basic_publish(b"late", routing_key="q")
                    with pytest.raises(amqp_trio.ConnectionClosedError, match="closing"):
                        await conn.open_channel()
                # leaving `second` while the connection closes: quiet too
                assert second.is_closed
                release.set()
            assert isinstance(conn.close_error, amqp_trio.ConnectionClosedError)
    # Neither channel sent channel.close after connection.close; nothing else reached the wire.
    assert seen == [ChannelOpened, ChannelOpened, ConnectionClosed]


async def test_cancelled_open_channel_answered_while_the_connection_closes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    hold = trio.Event()
    after_hold: list[type[Event]] = []

    async def script(conn: ServerConnection) -> None:
        await accept(conn)
        assert isinstance(await conn.next_event(), ChannelOpened)  # open-ok queued, not sent
        await hold.wait()
        while True:
            event = await conn.next_event()  # sends the open-ok, then reads the close
            after_hold.append(type(event))
            if isinstance(event, ConnectionClosed):
                return

    async with trio.open_nursery() as nursery:
        client, _ = await run_server(nursery, script)
        async with connect(client) as conn:
            with trio.move_on_after(1) as scope:
                await conn.open_channel()
            assert scope.cancelled_caught
            async with trio.open_nursery() as closer:
                closer.start_soon(conn.aclose)
                while CLOSE_METHOD not in client.sent:
                    await trio.sleep(0.01)
                hold.set()  # the open-ok now reaches a client that is closing
    # The abandoned channel was not closed on a closing connection (a protocol error).
    assert after_hold == [ConnectionClosed]


async def test_cancelled_publish_is_not_sent(autojump_clock: trio.testing.MockClock) -> None:
    published: list[bytes] = []

    async def script(conn: ServerConnection) -> None:
        await accept(conn)
        while True:
            event = await conn.next_event()
            if isinstance(event, MessageReceived):
                published.append(bytes(event.body))
            elif isinstance(event, ChannelClosed):
                return

    async with trio.open_nursery() as nursery:
        client, _ = await run_server(nursery, script)
        async with connect(client) as conn, conn.channel() as ch:
            with trio.CancelScope() as scope:
                scope.cancel()
                await ch.basic_publish(b"cancelled", routing_key="q")
            assert scope.cancelled_caught
            for n in range(300):  # past YIELD_EVERY: publishes that yield now and then
                await ch.basic_publish(b"%d" % n, routing_key="q")
    assert published == [b"%d" % n for n in range(300)]


async def test_cancelled_iteration_loses_no_message(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def script(conn: ServerConnection) -> None:
        await accept(conn)
        channel, tag = await serve_consume(conn, prefetch=300)
        for n in range(1, 201):
            deliver(conn, channel, tag, n)
        await conn.flush()
        await expect(conn, BasicCancel)
        await reply(conn, channel, BasicCancelOk(consumer_tag=tag))
        await until_channel_closed(conn)

    async with trio.open_nursery() as nursery:
        client, _ = await run_server(nursery, script)
        async with connect(client) as conn, conn.channel() as ch:
            await ch.basic_qos(300)
            bodies: list[bytes] = []
            async with ch.basic_consume("q") as consumer:
                while len(bodies) < 200:
                    if len(bodies) % 50 == 7:
                        with trio.CancelScope() as scope:
                            scope.cancel()
                            await consumer.__anext__()
                        assert scope.cancelled_caught
                    bodies.append((await consumer.__anext__()).body)
    assert bodies == [b"m%d" % n for n in range(1, 201)]


async def _client_handshake(stream: trio.abc.Stream) -> amqp_sansio.Connection:
    """A bare client core over *stream*, through connection.open-ok."""
    core = amqp_sansio.Connection(Role.CLIENT, ConnectionConfig())
    while True:
        event = core.next_event()
        if out := core.data_to_send():
            await stream.send_all(out)
        if event is NEED_DATA:
            core.receive_data(await stream.receive_some())
        elif isinstance(event, ConnectionOpened):
            return core


async def _read_close(stream: trio.abc.Stream, core: amqp_sansio.Connection) -> ConnectionClosed:
    while True:
        event = core.next_event()
        if event is NEED_DATA:
            core.receive_data(await stream.receive_some())
        elif isinstance(event, ConnectionClosed):
            return event


@pytest.mark.parametrize("client_answers", [True, False])
async def test_server_aclose_after_a_protocol_error_waits_for_the_client(
    autojump_clock: trio.testing.MockClock, client_answers: bool
) -> None:
    times: dict[str, float] = {}
    errors: list[RemoteProtocolError] = []

    async def handler(conn: ServerConnection) -> None:
        await accept(conn)
        try:
            await conn.next_event()
        except RemoteProtocolError as exc:
            errors.append(exc)
        times["failed"] = trio.current_time()
        await conn.aclose()
        times["closed"] = trio.current_time()

    client, server = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(amqp_trio.serve_stream, handler, server)
        core = await _client_handshake(client)
        await client.send_all(b"\x09\x00\x00\x00\x00\x00\x00\xce")  # no such frame type
        closed = await _read_close(client, core)
        assert closed.by_peer
        assert closed.reply_code == errors[0].reply_code
        if client_answers:
            await client.send_all(core.data_to_send())  # close-ok
        else:
            await client.send_all(b"garbage the server discards" * 100)
        assert await client.receive_some() == b""  # the server closed the transport
    if client_answers:
        assert times["closed"] == times["failed"]  # closed at the close-ok, no linger
    else:
        assert times["closed"] - times["failed"] == pytest.approx(CLOSE_LINGER)


@pytest.mark.parametrize("client_closes", [True, False])
async def test_server_reads_until_the_client_closes_after_close_ok(
    autojump_clock: trio.testing.MockClock, client_closes: bool
) -> None:
    """After the close-ok answering the client's close, the server reads (and discards) what
    the client still writes, until it closes its end or ``linger`` seconds: closing a socket
    with unread input resets it under the close-ok (amqplib writes the publishes it queued
    before its close)."""
    times: dict[str, float] = {}

    async def handler(conn: ServerConnection) -> None:
        conn.linger = 5.0
        await accept(conn)
        closed = await conn.next_event()
        assert isinstance(closed, ConnectionClosed)
        assert closed.by_peer
        times["close-ok"] = trio.current_time()
        await conn.aclose()
        times["closed"] = trio.current_time()

    client, server = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(amqp_trio.serve_stream, handler, server)
        core = await _client_handshake(client)
        core.close()
        await client.send_all(core.data_to_send())
        await client.send_all(b"publishes queued before the close" * 100)
        closed = await _read_close(client, core)
        assert not closed.by_peer  # the server's close-ok answered ours
        await trio.sleep(1.0)
        await client.send_all(b"more of them" * 100)  # still read: no error
        if client_closes:
            await client.send_eof()
        assert await client.receive_some() == b""  # the server closed the transport
    if client_closes:
        assert times["closed"] - times["close-ok"] == pytest.approx(1.0)  # at our end
    else:
        assert times["closed"] - times["close-ok"] == pytest.approx(5.0)  # linger's bound


@pytest.mark.parametrize("where", ["handler", "before_write", "after_write"])
async def test_an_application_error_closes_with_541(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture, where: str
) -> None:
    """A handler (or a write hook) that raises ends its connection with connection.close 541
    INTERNAL_ERROR and a log line, never a dropped socket; the server waits for close-ok."""

    def fail() -> None:
        raise RuntimeError("a bug in the application")

    async def handler(conn: ServerConnection) -> None:
        await accept(conn)
        declare = await expect(conn, QueueDeclare)
        if where == "handler":
            fail()
        setattr(conn, where, fail)
        conn.core.send_method(declare.channel, declare_ok("q"))
        await conn.flush()
        await conn.next_event()  # close-ok

    async with trio.open_nursery() as nursery:
        client, _ = await run_server(nursery, handler)
        async with connect(client) as conn, conn.channel() as ch:
            if where != "handler":
                await ch.queue_declare("q")  # answered; the failed hook's close follows
            with pytest.raises(amqp_trio.ConnectionClosedError) as info:
                await ch.queue_declare("q")
    assert info.value.reply_code == 541
    assert info.value.reply_text == "INTERNAL_ERROR"
    assert "closing with 541" in caplog.text
    assert "a bug in the application" in caplog.text


async def _collect_bodies(conn: ServerConnection, into: list[bytes]) -> None:
    await accept(conn)
    while True:
        event = await conn.next_event()
        if isinstance(event, MessageReceived):
            into.append(bytes(event.body))
        elif isinstance(event, ConnectionClosed | ConnectionLost):
            return


def _bodies() -> list[Buffer]:
    # Large bodies stay memoryviews in the core; mixed with small ones they make many buffers
    # per write, and 24 MiB overflow the socket buffer (partial writes).
    bodies: list[Buffer] = []
    for n in range(96):
        size = (256 * 1024 + n) if n % 3 else 100 + n
        body = bytes([n % 251]) * size
        bodies.append(memoryview(body) if n % 2 else bytearray(body) if n % 5 == 0 else body)
    return bodies


@pytest.mark.parametrize("transport", ["tcp", "memory"])
async def test_large_and_small_publishes_arrive_whole_and_in_order(transport: str) -> None:
    received: list[bytes] = []
    bodies = _bodies()
    async with trio.open_nursery() as nursery:
        if transport == "tcp":
            listeners = await nursery.start(
                amqp_trio.serve, lambda conn: _collect_bodies(conn, received), "127.0.0.1", 0
            )
            port = listeners[0].socket.getsockname()[1]
            session = amqp_trio.connect(f"amqp://127.0.0.1:{port}?frame_max=131072")
        else:
            client, server = trio.testing.memory_stream_pair()
            nursery.start_soon(
                amqp_trio.serve_stream, lambda conn: _collect_bodies(conn, received), server
            )
            session = amqp_trio.connect_stream(client, URL)
        async with session as conn, conn.channel() as ch:
            for body in bodies:
                await ch.basic_publish(body, routing_key="q")
        nursery.cancel_scope.cancel()
    assert received == [bytes(body) for body in bodies]
