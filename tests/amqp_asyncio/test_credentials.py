"""amqp_asyncio's connect(credentials=...): the provider's password logs in, a secret about to
expire is replaced by update-secret without reconnecting, and recovery asks the provider."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import TYPE_CHECKING

import pytest

import amqp_asyncio
from amqp_asyncio import Credentials, Recovered, RecoveryPolicy
from amqp_broker import BrokerThread

from ..support.restartable import RestartableBroker

if TYPE_CHECKING:
    from pathlib import Path

    from amqp_broker import Broker

POLICY = RecoveryPolicy(initial_delay=0.1, multiplier=1, jitter=0, max_duration=60)


def test_the_secret_is_refreshed_before_it_expires() -> None:
    updates: list[bytes] = []

    def accept(user: str, secret: bytes) -> bool:
        updates.append(secret)
        return True

    def record(broker: Broker) -> None:
        broker.secret_check = accept

    numbers = itertools.count(1)

    async def provider() -> Credentials:
        # valid for 1 s, refreshed 0.9 s before: a new token about every 0.1 s
        return Credentials(password=f"token-{next(numbers)}", expires_at=time.time() + 1.0)

    with BrokerThread(users={"guest": "token-1"}) as broker:
        broker.call(record)
        url = broker.url.replace("token-1", "not-used")  # the provider's password logs in

        async def main() -> None:
            async with (
                amqp_asyncio.connect(url, credentials=provider, refresh_margin=0.9) as conn,
                conn.channel() as ch,
            ):
                async with asyncio.timeout(30):
                    while len(updates) < 3:
                        await asyncio.sleep(0.05)
                await ch.queue_declare(exclusive=True)  # the same connection, still open

        asyncio.run(main())
    assert updates[:3] == [b"token-2", b"token-3", b"token-4"]


def test_a_provider_is_refused_with_0_10() -> None:
    async def provider() -> Credentials:
        return Credentials(password="x")

    with pytest.raises(ValueError, match="needs 0-9-1"):
        amqp_asyncio.connect("amqp://h/", protocol="0-10", credentials=provider)


def test_recovery_logs_in_with_what_the_provider_gives_now(tmp_path: Path) -> None:
    def users(password: str) -> str:
        path = tmp_path / f"users-{password}.toml"
        path.write_text(f'[users]\napp = "{password}"\n')
        return str(path)

    current = ["p1"]
    calls = 0

    async def provider() -> Credentials:
        nonlocal calls
        calls += 1
        return Credentials(password=current[0])  # no expiry: never refreshed by a timer

    broker = RestartableBroker()
    broker.start("--config", users("p1"))
    url = f"amqp://app:not-used@127.0.0.1:{broker.port}/?connection_timeout=5000"

    async def main() -> None:
        async with (
            amqp_asyncio.connect(url, recovery=POLICY, credentials=provider) as conn,
            conn.channel() as ch,
        ):
            events = conn.recovery_events()
            current[0] = "p2"
            await asyncio.to_thread(broker.kill)
            await asyncio.to_thread(broker.start, "--config", users("p2"))
            async with asyncio.timeout(60):
                async for event in events:
                    if isinstance(event, Recovered):
                        break
            await ch.queue_declare(exclusive=True)

    try:
        asyncio.run(main())
    finally:
        broker.kill()
    assert calls >= 2  # at connect, and before the attempt that recovered
