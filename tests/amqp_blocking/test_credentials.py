"""amqp_blocking's connect(credentials=...): the provider's password logs in, a secret about
to expire is replaced by update-secret without reconnecting, and recovery asks the provider."""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING

import pytest

import amqp_blocking
from amqp_blocking import Credentials, Recovered, RecoveryPolicy
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

    def provider() -> Credentials:
        # valid for 1 s, refreshed 0.9 s before: a new token about every 0.1 s
        return Credentials(password=f"token-{next(numbers)}", expires_at=time.time() + 1.0)

    with BrokerThread(users={"guest": "token-1"}) as broker:
        broker.call(record)
        url = broker.url.replace("token-1", "not-used")  # the provider's password logs in
        with (
            amqp_blocking.connect(url, credentials=provider, refresh_margin=0.9) as conn,
            conn.channel() as ch,
        ):
            deadline = time.monotonic() + 30
            while len(updates) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            ch.queue_declare(exclusive=True)  # the same connection, still open
    assert updates[:3] == [b"token-2", b"token-3", b"token-4"]


def test_a_provider_is_refused_with_0_10() -> None:
    with pytest.raises(ValueError, match="needs 0-9-1"):
        amqp_blocking.connect(
            "amqp://h/", protocol="0-10", credentials=lambda: Credentials(password="x")
        )


def test_recovery_logs_in_with_what_the_provider_gives_now(tmp_path: Path) -> None:
    def users(password: str) -> str:
        path = tmp_path / f"users-{password}.toml"
        path.write_text(f'[users]\napp = "{password}"\n')
        return str(path)

    current = ["p1"]
    calls: list[str] = []

    def provider() -> Credentials:
        calls.append(current[0])
        return Credentials(password=current[0])  # no expiry: never refreshed by a timer

    broker = RestartableBroker()
    broker.start("--config", users("p1"))
    url = f"amqp://app:not-used@127.0.0.1:{broker.port}/?connection_timeout=5000"
    try:
        with (
            amqp_blocking.connect(url, recovery=POLICY, credentials=provider) as conn,
            conn.channel() as ch,
        ):
            events = conn.recovery_events()
            current[0] = "p2"
            broker.kill()
            broker.start("--config", users("p2"))
            seen = [events.get(60)]
            while not isinstance(seen[-1], Recovered):  # attempts refused while it was down
                assert seen[-1] is not None, seen
                seen.append(events.get(60))
            ch.queue_declare(exclusive=True)
    finally:
        broker.kill()
    assert calls[0] == "p1"
    assert calls[-1] == "p2"  # asked again before the attempt that recovered


def test_credentials_inside_the_margin_are_refreshed_once_a_second_not_in_a_loop() -> None:
    updates: list[bytes] = []

    def accept(user: str, secret: bytes) -> bool:
        updates.append(secret)
        return True

    def record(broker: Broker) -> None:
        broker.secret_check = accept

    expires_at = time.time() + 30  # within the margin from the start, like a cached token

    def provider() -> Credentials:
        return Credentials(password="token", expires_at=expires_at)

    with BrokerThread(users={"guest": "token"}) as broker:
        broker.call(record)
        with amqp_blocking.connect(broker.url, credentials=provider, refresh_margin=60):
            deadline = time.monotonic() + 30
            while not updates and time.monotonic() < deadline:
                time.sleep(0.05)
            first = time.monotonic()
            time.sleep(0.5)
            elapsed = time.monotonic() - first
            count = len(updates)
    # about one a second (a loaded machine makes fewer); in a loop, hundreds
    assert 1 <= count <= 2 + elapsed
