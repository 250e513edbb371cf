"""amqp_trio's writer task: publishes made in a loop are gathered into few writes, and a publish
after which its task waits for something else (a reply) is written in the writer's next turn,
without a gathering round first. Counted in scheduling rounds and writes on an in-memory
stream, never in time."""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING, Final, final

import pytest
import trio
import trio.testing

import amqp_trio
from amqp_sansio import (
    AuthenticationRequested,
    ChannelClosed,
    ConnectionOpened,
    MessageReceived,
    VirtualHostRequested,
)
from amqp_trio._wire import YIELD_EVERY

if TYPE_CHECKING:
    from amqp_sansio import Buffer
    from amqp_trio import ServerConnection

pytestmark = pytest.mark.trio

URL: Final = "amqp://guest:guest@memory/?connection_timeout=5000"


@final
class CountingStream(trio.abc.Stream):
    """The client's end: counts the writes and the messages' octets seen so far."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner
        self.writes = 0
        self.sent = bytearray()

    async def send_all(self, data: Buffer) -> None:
        self.writes += 1
        self.sent += data  # recorded when the writer runs, before the stream may yield
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def collect(conn: ServerConnection, bodies: list[bytes]) -> None:
    while True:
        event = await conn.next_event()
        if isinstance(event, AuthenticationRequested):
            conn.core.accept_authentication()
        elif isinstance(event, VirtualHostRequested):
            conn.core.accept_virtual_host()
        elif isinstance(event, ConnectionOpened):
            await conn.flush()
        elif isinstance(event, MessageReceived):
            bodies.append(bytes(event.body))
        elif isinstance(event, ChannelClosed):
            return


async def test_publishes_in_a_loop_are_gathered_into_few_writes() -> None:
    bodies: list[bytes] = []
    count = 20 * YIELD_EVERY
    async with trio.open_nursery() as nursery:
        client_end, server_end = trio.testing.memory_stream_pair()
        client = CountingStream(client_end)
        nursery.start_soon(amqp_trio.serve_stream, lambda conn: collect(conn, bodies), server_end)
        async with amqp_trio.connect_stream(client, URL) as conn, conn.channel() as ch:
            before = client.writes
            for n in range(count):
                await ch.basic_publish(b"%d" % n, routing_key="q")
            writes = client.writes - before
        nursery.cancel_scope.cancel()
    assert bodies == [b"%d" % n for n in range(count)]
    # one write per YIELD_EVERY publishes at most (plus the last ones), not one per publish
    assert writes <= count // YIELD_EVERY + 2


async def test_a_publish_whose_task_then_waits_is_written_in_the_writers_next_turn() -> None:
    bodies: list[bytes] = []
    async with trio.open_nursery() as nursery:
        client_end, server_end = trio.testing.memory_stream_pair()
        client = CountingStream(client_end)
        nursery.start_soon(amqp_trio.serve_stream, lambda conn: collect(conn, bodies), server_end)
        async with amqp_trio.connect_stream(client, URL) as conn, conn.channel() as ch:
            await trio.testing.wait_all_tasks_blocked()
            for n in range(3):
                before = len(client.sent)
                await ch.basic_publish(b"request %d" % n, routing_key="q")
                # The writer was woken by the publish and runs in the next scheduling batch;
                # two checkpoints here let that batch finish whatever the order within it.
                await trio.lowlevel.checkpoint()
                await trio.lowlevel.checkpoint()
                assert b"request %d" % n in client.sent[before:]
        nursery.cancel_scope.cancel()
    assert bodies == [b"request 0", b"request 1", b"request 2"]


def _socket_streams() -> tuple[trio.SocketStream, trio.SocketStream, socket.socket]:
    """A connected pair of plain sockets as Trio streams (client, server), and a second handle
    on the server's end to peek at what arrived before the server reads it."""
    client_sock, server_sock = socket.socketpair()
    peek = socket.socket(fileno=os.dup(server_sock.fileno()))
    client = trio.SocketStream(trio.socket.from_stdlib_socket(client_sock))
    server = trio.SocketStream(trio.socket.from_stdlib_socket(server_sock))
    return client, server, peek


def _peek(peek: socket.socket) -> bytes:
    try:
        return peek.recv(1 << 20, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return b""


async def test_a_publish_after_a_read_is_written_by_its_own_task_on_a_socket() -> None:
    # On a plain socket the first output after a read (here the channel's open-ok) is written
    # by the publishing task itself: it is in the server's socket before anything else runs.
    bodies: list[bytes] = []
    client, server, peek = _socket_streams()
    with peek:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(amqp_trio.serve_stream, lambda conn: collect(conn, bodies), server)
            async with amqp_trio.connect_stream(client, URL) as conn, conn.channel() as ch:
                await trio.testing.wait_all_tasks_blocked()
                assert _peek(peek) == b""
                await ch.basic_publish(b"request", routing_key="q")
                assert b"request" in _peek(peek)  # no checkpoint since the publish
                # A second publish before any read waits for the writer, gathered as before.
                await ch.basic_publish(b"second", routing_key="q")
                assert b"second" not in _peek(peek)
                peek.close()  # else its descriptor keeps the server's end open after the close
            nursery.cancel_scope.cancel()
    assert bodies == [b"request", b"second"]


async def test_what_a_full_socket_did_not_take_is_written_first_by_the_publisher() -> None:
    # The publishing task's write takes what the socket buffer holds; the publisher then waits
    # for the socket and writes the rest itself (as a blocking send would), before anything
    # queued after it, so the peer gets every body whole and in order.
    bodies: list[bytes] = []
    client, server, peek = _socket_streams()
    peek.close()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    large = bytes(range(256)) * 2048  # 512 KiB: more than the two buffers hold
    async with trio.open_nursery() as nursery:
        nursery.start_soon(amqp_trio.serve_stream, lambda conn: collect(conn, bodies), server)
        async with amqp_trio.connect_stream(client, URL) as conn, conn.channel() as ch:
            await trio.testing.wait_all_tasks_blocked()
            await ch.basic_publish(large, routing_key="q")
            # More than the two socket buffers hold, and nothing of it is left in the client:
            # the publisher waited for the server to read it.
            assert not conn._wire._leftover
            assert conn._core.outbound_size == 0
            await ch.basic_publish(b"after", routing_key="q")
            await ch.basic_publish(b"last", routing_key="q")
        nursery.cancel_scope.cancel()
    assert bodies == [large, b"after", b"last"]


@final
class GatedStream(trio.abc.Stream):
    """The server's end, whose reads can be held back: the client's socket then fills."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner
        self._open = trio.Event()
        self._open.set()

    def hold(self) -> None:
        self._open = trio.Event()

    def release(self) -> None:
        self._open.set()

    async def send_all(self, data: Buffer) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        await self._open.wait()
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _small_buffers(client: trio.SocketStream, server: trio.SocketStream) -> None:
    client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)


async def test_a_large_publish_cancelled_while_the_socket_is_full_goes_out_whole() -> None:
    # The message is in the core before the publish first waits, and what the socket did not
    # take is written under a shield: cancelling the publisher mid-message never leaves half
    # a frame on the wire, and the connection stays usable.
    bodies: list[bytes] = []
    client, raw_server, peek = _socket_streams()
    peek.close()
    _small_buffers(client, raw_server)
    server = GatedStream(raw_server)
    large = bytes(range(256)) * 2048  # 512 KiB
    async with trio.open_nursery() as nursery:
        nursery.start_soon(amqp_trio.serve_stream, lambda conn: collect(conn, bodies), server)
        async with amqp_trio.connect_stream(client, URL) as conn, conn.channel() as ch:
            await trio.testing.wait_all_tasks_blocked()
            server.hold()
            mid_write: list[bool] = []

            async def cancel_mid_message(scope: trio.CancelScope) -> None:
                await trio.testing.wait_all_tasks_blocked()
                # the publisher is writing the rest of its message, the socket full
                mid_write.append(conn._wire._send_lock.locked() and not bodies)
                scope.cancel()
                server.release()

            with trio.CancelScope() as scope:
                nursery.start_soon(cancel_mid_message, scope)
                await ch.basic_publish(large, routing_key="q")
            assert mid_write == [True]
            assert not conn._wire._leftover
            await ch.basic_publish(b"after", routing_key="q")
        nursery.cancel_scope.cancel()
    assert bodies == [large, b"after"]


async def test_large_publishes_from_several_tasks_keep_each_tasks_order() -> None:
    # Publishing tasks on two channels, each writing large bodies itself when no write is
    # under way and waiting for a full socket otherwise: every message arrives whole (the
    # server's core rejects interleaved frames) and each task's messages in its order.
    bodies: list[bytes] = []
    client, server, peek = _socket_streams()
    peek.close()
    _small_buffers(client, server)
    tasks, each, size = 4, 6, 100 * 1024

    def body(task: int, n: int) -> bytes:
        return bytes([task, n]) * (size // 2)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(amqp_trio.serve_stream, lambda conn: collect(conn, bodies), server)
        async with (
            amqp_trio.connect_stream(client, URL) as conn,
            conn.channel() as first,
            conn.channel() as second,
        ):

            async def publish(task: int) -> None:
                ch = first if task % 2 else second
                for n in range(each):
                    await ch.basic_publish(body(task, n), routing_key="q")

            async with trio.open_nursery() as publishers:
                for task in range(tasks):
                    publishers.start_soon(publish, task)
            await first.aclose()  # collect() returns at the first channel close
        nursery.cancel_scope.cancel()
    assert sorted(bodies) == sorted(body(t, n) for t in range(tasks) for n in range(each))
    for task in range(tasks):
        assert [b for b in bodies if b[0] == task] == [body(task, n) for n in range(each)]
