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


async def test_what_a_full_socket_did_not_take_is_written_first_by_the_writer() -> None:
    # The publishing task's write takes what the socket buffer holds; the rest of that message
    # goes out before anything queued after it, so the peer gets every body whole and in order.
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
            assert conn._wire._leftover  # the socket took part of it
            await ch.basic_publish(b"after", routing_key="q")
            await ch.basic_publish(b"last", routing_key="q")
        nursery.cancel_scope.cancel()
    assert bodies == [large, b"after", b"last"]
