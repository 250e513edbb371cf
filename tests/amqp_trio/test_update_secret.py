"""amqp_trio's Connection.update_secret: accepted by RabbitMQ and the embedded broker, a refusal
closes the connection with 530, and recovery logs in with the updated secret."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import trio

import amqp_trio
from amqp_broker import BrokerThread
from amqp_trio import NotAllowed, Recovered, RecoveryPolicy

from ..support.restartable import RestartableBroker

if TYPE_CHECKING:
    from pathlib import Path

    from amqp_broker import Broker

POLICY = RecoveryPolicy(initial_delay=0.1, multiplier=1, jitter=0, max_duration=60)


def users_config(tmp_path: Path, password: str) -> str:
    path = tmp_path / f"users-{password}.toml"
    path.write_text(f'[users]\napp = "{password}"\n')
    return str(path)


def accept_fresh_tokens(broker: Broker) -> None:
    broker.secret_check = lambda user, secret: secret.startswith(b"fresh")


def test_an_updated_secret_keeps_the_connection(amqp_url: str) -> None:
    async def main() -> None:
        async with amqp_trio.connect(amqp_url) as conn, conn.channel() as ch:
            await conn.update_secret("guest", "token refresh")
            await ch.queue_declare(exclusive=True)  # still open and usable

    trio.run(main)


def test_a_refused_secret_closes_the_connection_with_530() -> None:
    with BrokerThread() as broker:
        broker.call(accept_fresh_tokens)

        async def main() -> None:
            async with amqp_trio.connect(broker.url) as conn:
                await conn.update_secret("fresh-1", "refresh")
                with pytest.raises(NotAllowed, match="New secret was refused") as info:
                    await conn.update_secret("stale", "refresh")
                assert info.value.reply_code == 530
                assert conn.is_closed

        trio.run(main)


def test_recovery_logs_in_with_the_updated_secret(tmp_path: Path) -> None:
    broker = RestartableBroker()
    broker.start("--config", users_config(tmp_path, "t1"))
    url = f"amqp://app:t1@127.0.0.1:{broker.port}/?connection_timeout=5000"

    async def main() -> None:
        async with amqp_trio.connect(url, recovery=POLICY) as conn, conn.channel() as ch:
            events = conn.recovery_events()
            await conn.update_secret("t2", "rotated")
            await trio.to_thread.run_sync(broker.kill)
            # the restarted broker knows only the new secret: t1 would be refused (403)
            await trio.to_thread.run_sync(broker.start, "--config", users_config(tmp_path, "t2"))
            with trio.fail_after(60):
                async for event in events:
                    if isinstance(event, Recovered):
                        break
            await ch.queue_declare(exclusive=True)

    try:
        trio.run(main)
    finally:
        broker.kill()
