"""amqp_trio's 0-10 server role over a Trio stream (``serve_stream_0_10``), driven by the 0-10
core's client role over an in-memory stream pair: the handshake, a command completed by the
handler, a result, and the close."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import amqp_trio
from amqp_sansio.v0_10 import (
    NEED_DATA,
    AuthenticationRequested,
    CommandReceived,
    CommandsCompleted,
    Connection,
    ConnectionClosed,
    ConnectionConfig,
    ConnectionOpened,
    QueueDeclare,
    QueueQuery,
    QueueQueryResult,
    ResultReceived,
    Role,
    SessionOpened,
    VirtualHostRequested,
)

pytestmark = pytest.mark.trio


async def test_serve_stream_0_10_runs_a_handler() -> None:
    client_stream, server_stream = trio.testing.memory_stream_pair()
    seen: list[str] = []

    async def handler(conn: amqp_trio.ServerConnection010) -> None:
        core = conn.core
        while True:
            event = await conn.next_event()
            if isinstance(event, AuthenticationRequested):
                seen.append(f"auth {event.username}")
                core.accept_authentication()
            elif isinstance(event, VirtualHostRequested):
                core.accept_virtual_host()
            elif isinstance(event, CommandReceived):
                session = core.session(event.channel)
                command = event.command
                seen.append(type(command).NAME)
                if isinstance(command, QueueQuery):
                    session.send_result(
                        event.command_id, QueueQueryResult(queue=command.queue, message_count=7)
                    )
                else:
                    session.complete(event.command_id)
            elif isinstance(event, ConnectionClosed):
                return

    client = Connection(Role.CLIENT, ConnectionConfig(username="u", password="p"))

    async def until(kind: type[object]) -> list[object]:
        """Handle events, write what the client queued, read; until an event of *kind*."""
        events: list[object] = []
        while True:
            while (event := client.next_event()) is not NEED_DATA:
                events.append(event)
            data = client.data_to_send()
            if data:
                await client_stream.send_all(data)
            if any(isinstance(e, kind) for e in events):
                return events
            client.receive_data(await client_stream.receive_some(65536))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(amqp_trio.serve_stream_0_10, server_stream, handler)
        with trio.fail_after(10):
            await until(ConnectionOpened)
            session = client.attach("s")
            await until(SessionOpened)
            declared = session.send(QueueDeclare(queue="q"), sync=True)
            events = await until(CommandsCompleted)
            assert any(isinstance(e, CommandsCompleted) and declared in e.commands for e in events)
            session.send(QueueQuery(queue="q"), sync=True)
            events = await until(ResultReceived)
            result = next(e for e in events if isinstance(e, ResultReceived))
            assert isinstance(result.value, QueueQueryResult)
            assert result.value.message_count == 7
            client.close()
            await until(ConnectionClosed)
    assert seen == ["auth u", "queue.declare", "queue.query"]
