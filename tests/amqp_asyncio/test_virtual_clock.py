"""amqp_asyncio's timers on a virtual clock (:mod:`tests.support.virtual_clock`), against a
server-role core in the same loop: exact times, no real waiting."""

from __future__ import annotations

import asyncio
from typing import Final

import pytest

import amqp_asyncio
from amqp_sansio import (
    NEED_DATA,
    AuthenticationRequested,
    Connection,
    ConnectionConfig,
    Role,
    VirtualHostRequested,
)
from amqp_sansio.client import HeartbeatTimeoutError
from amqp_sansio.framing import HEARTBEAT_FRAME
from tests.support.virtual_clock import run_on_virtual_clock

HEARTBEAT: Final = 2


async def serve_then_fall_silent(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, last_word_after: float
) -> float:
    """Shake hands, write one heartbeat *last_word_after* seconds after open-ok, then read and
    ignore everything: a broker whose host stopped. Returns when the last octet was written."""
    core = Connection(Role.SERVER, ConnectionConfig(heartbeat=HEARTBEAT))
    loop = asyncio.get_running_loop()
    opened = False
    while not opened:
        while (event := core.next_event()) is not NEED_DATA:
            if isinstance(event, AuthenticationRequested):
                core.accept_authentication()
            elif isinstance(event, VirtualHostRequested):
                core.accept_virtual_host()
                opened = True
        writer.write(core.data_to_send())
        if not opened:
            core.receive_data(await reader.read(65536))
    await asyncio.sleep(last_word_after)
    writer.write(HEARTBEAT_FRAME)
    return loop.time()


@pytest.mark.parametrize("last_word_after", [0.25, 0.5, 0.75, 1.0])
def test_dead_peer_is_declared_two_intervals_after_its_last_octet(last_word_after: float) -> None:
    # Not when the next timer tick noticed the last octet (up to 2.5 intervals).
    async def main() -> float:
        last_word: asyncio.Future[float] = asyncio.get_running_loop().create_future()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            last_word.set_result(await serve_then_fall_silent(reader, writer, last_word_after))
            while await reader.read(65536):
                pass  # the client's heartbeats, unanswered
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with (
            server,
            amqp_asyncio.connect(f"amqp://guest:guest@127.0.0.1:{port}/") as conn,
        ):
            assert conn.heartbeat == HEARTBEAT
            with pytest.raises(HeartbeatTimeoutError):
                await conn.open_channel()
            return asyncio.get_running_loop().time() - await last_word

    assert run_on_virtual_clock(main()) == pytest.approx(2 * HEARTBEAT)
