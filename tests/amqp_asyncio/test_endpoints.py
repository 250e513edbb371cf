"""amqp_asyncio's connect() with several endpoints: a dead node is skipped, and when the node
in use shuts down, recovery fails over to the next one with the topology restored there."""

from __future__ import annotations

import asyncio
import socket

import amqp_asyncio
from amqp_asyncio import Recovered, RecoveryLost, RecoveryPolicy
from amqp_broker import BrokerThread

POLICY = RecoveryPolicy(initial_delay=0.1, multiplier=1, jitter=0, max_duration=60)


def dead_url() -> str:
    with socket.socket() as sock:  # a port nobody listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"amqp://guest:guest@127.0.0.1:{port}/?connection_timeout=5000"


def address(url: str) -> str:
    return url.split("@", 1)[1].split("/", 1)[0]


def test_a_dead_node_is_skipped_and_recovery_fails_over() -> None:
    first, second = BrokerThread(), BrokerThread()
    first.start()
    second.start()
    endpoints = [dead_url(), first.url, second.url]

    async def main() -> None:
        async with (
            amqp_asyncio.connect(endpoints, recovery=POLICY) as conn,
            conn.channel() as ch,
        ):
            assert conn.address == address(first.url)  # the dead one was skipped
            events = conn.recovery_events()
            await ch.queue_declare("failover-jobs")
            await asyncio.to_thread(first.stop)  # 320 CONNECTION_FORCED to its clients
            assert isinstance(await anext(events), RecoveryLost)
            async with asyncio.timeout(60):
                recovered = None
                async for event in events:
                    if isinstance(event, Recovered):
                        recovered = event
                        break
            assert recovered is not None
            assert recovered.address == conn.address == address(second.url)
            ok = await ch.queue_declare("failover-jobs", passive=True)  # restored there
            assert ok.message_count == 0
            await ch.queue_delete("failover-jobs")

    try:
        asyncio.run(main())
    finally:
        first.stop()
        second.stop()
