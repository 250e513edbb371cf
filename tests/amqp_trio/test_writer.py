"""amqp_trio's writer task: publishes made in a loop are gathered into few writes, and a publish
after which its task waits for something else (a reply) is written in the writer's next turn,
without a gathering round first. Counted in scheduling rounds and writes on an in-memory
stream, never in time."""

from __future__ import annotations

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
