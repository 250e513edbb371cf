"""amqp_blocking's Connection.update_secret: accepted by RabbitMQ and the embedded broker, a
refusal closes the connection with 530, and recovery logs in with the updated secret."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

import amqp_blocking
from amqp_blocking import NotAllowed, Recovered, RecoveryPolicy
from amqp_broker import BrokerThread

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
    with amqp_blocking.connect(amqp_url) as conn, conn.channel() as ch:
        conn.update_secret("guest", "token refresh", timeout=10)
        ch.queue_declare(exclusive=True)  # still open and usable


def test_a_refused_secret_closes_the_connection_with_530() -> None:
    with BrokerThread() as broker:
        broker.call(accept_fresh_tokens)
        refuse_a_stale_secret(broker.url)


def refuse_a_stale_secret(url: str) -> None:
    with amqp_blocking.connect(url) as conn:
        conn.update_secret("fresh-1", "refresh", timeout=10)
        with pytest.raises(NotAllowed, match="New secret was refused") as info:
            conn.update_secret("stale", "refresh", timeout=10)
        assert info.value.reply_code == 530
        assert conn.is_closed


def test_recovery_logs_in_with_the_updated_secret(tmp_path: Path) -> None:
    broker = RestartableBroker()
    broker.start("--config", users_config(tmp_path, "t1"))
    url = f"amqp://app:t1@127.0.0.1:{broker.port}/?connection_timeout=5000"
    try:
        with amqp_blocking.connect(url, recovery=POLICY) as conn, conn.channel() as ch:
            events = conn.recovery_events()
            conn.update_secret("t2", "rotated", timeout=10)
            broker.kill()
            # the restarted broker knows only the new secret: t1 would be refused (403)
            broker.start("--config", users_config(tmp_path, "t2"))
            seen = [events.get(60)]
            while not isinstance(seen[-1], Recovered):  # attempts refused while it was down
                assert seen[-1] is not None, seen
                seen.append(events.get(60))
            ch.queue_declare(exclusive=True)
    finally:
        broker.kill()
