"""Issue 30: credentials providers against RabbitMQ 3.10's OAuth 2 backend.

A private node (tests/support/rabbitmq_node.py) runs ``rabbitmq_auth_backend_oauth2`` alone,
with a symmetric HS256 key; the tests mint their tokens with the standard library, valid for
a few seconds. Each adapter, through a provider that mints a fresh token at each call, keeps
one connection and publishes with confirms past the first token's expiry (update-secret, no
reconnect), then recovers from a forced close by logging in with a fresh token, and a token
with a wrong signature is refused as docs/credentials.md says.

What RabbitMQ 3.10 does with an expired token (checked by the last test): it leaves the
connection open and never tells the client; every permission check after ``exp`` fails with
403 ACCESS_REFUSED, which closes the channel. A channel caches its checks (until it is idle
for about a second, or its 60 s tick), so a channel that kept publishing to one exchange goes
on a while: only a check the cache does not hold shows an expired token. Each adapter's test
therefore ends its publishing with a fresh channel's ``queue.declare`` on the same connection.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
import uuid
from typing import TYPE_CHECKING, Final

import attrs
import pytest
import trio

import amqp_asyncio
import amqp_blocking
import amqp_trio
from amqp_sansio.client import (
    AccessRefused,
    ConnectionClosedError,
    Credentials,
    NotAllowed,
    Recovered,
    RecoveryPolicy,
)

from ...support.rabbitmq_node import rabbitmq_node

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from ...support.rabbitmq_node import RabbitMQNode

# The private node is started once per module and shares the private nodes' worker.
pytestmark = [pytest.mark.rabbitmq, pytest.mark.xdist_group("private_rabbitmq")]

KEY: Final = b"amqp-sansio-test-signing-key"
KEY_ID: Final = "key-1"
#: The tokens' audience and their scopes' prefix.
RESOURCE_SERVER_ID: Final = "rabbitmq"
SCOPES: Final = " ".join(f"{RESOURCE_SERVER_ID}.{p}:*/*" for p in ("configure", "write", "read"))

#: RabbitMQ 3.10's rabbitmq.conf cannot give a symmetric key (its signing_keys are PEM files):
#: advanced.config does. A "MAC" key's value is the HMAC secret itself.
ADVANCED_CONFIG: Final = f"""[{{rabbitmq_auth_backend_oauth2, [
  {{resource_server_id, <<"{RESOURCE_SERVER_ID}">>}},
  {{key_config, [
    {{default_key, <<"{KEY_ID}">>}},
    {{signing_keys, #{{
      <<"{KEY_ID}">> => {{map, #{{<<"kty">> => <<"MAC">>,
                               <<"alg">> => <<"HS256">>,
                               <<"value">> => <<"{KEY.decode()}">>}}}}
    }}}}
  ]}}
]}}].
"""
#: OAuth 2 only: every login here is a token (rabbitmqctl talks Erlang distribution, not AMQP).
CONF: Final = "auth_backends.1 = rabbit_auth_backend_oauth2\n"

#: A token's exp is in whole seconds: a token lives LIFETIME - 1 to LIFETIME seconds, and is
#: replaced MARGIN seconds before it expires.
LIFETIME: Final = 3
MARGIN: Final = 1.5
#: Between two publishes: the loop runs for seconds, this keeps it to a few hundred messages.
PAUSE: Final = 0.02
TIMEOUT: Final = 60
POLICY: Final = RecoveryPolicy(initial_delay=0.05, multiplier=1, jitter=0, max_duration=60)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def mint(lifetime: int = LIFETIME, key: bytes = KEY) -> tuple[str, int]:
    """An HS256 JWT with every permission on every virtual host, and its ``exp``."""
    exp = int(time.time()) + lifetime
    header = {"alg": "HS256", "typ": "JWT", "kid": KEY_ID}
    claims = {"sub": "app", "aud": [RESOURCE_SERVER_ID], "scope": SCOPES, "exp": exp}
    signed = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    signature = hmac.new(key, signed.encode(), hashlib.sha256).digest()
    return f"{signed}.{_b64(signature)}", exp


@attrs.define
class Tokens:
    """The provider: a fresh token at each call, counted. The first two live LIFETIME
    seconds; the later ones a minute, so that no refresh falls in the forced close: every call
    after it is the recovery's."""

    calls: int = 0
    first_exp: int = 0

    def __call__(self) -> Credentials:
        token, exp = mint(LIFETIME if self.calls < 2 else 60)
        self.calls += 1
        self.first_exp = self.first_exp or exp
        return Credentials(password=token, expires_at=exp)

    def refreshed(self) -> bool:
        """Past the first token's expiry, and two refreshes: the refresher asks the provider
        for the third token only once the second's update-secret was accepted."""
        return time.time() > self.first_exp + 0.5 and self.calls >= 3


@attrs.define
class Seen:
    """What one adapter's run saw; the test checks it the same way for all three."""

    #: Publishes that returned, i.e. were confirmed (confirm mode), and what the queue held.
    published: int = 0
    held: int = 0
    epoch_after_expiry: int = -1
    calls_before_close: int = 0
    calls_after_recovery: int = 0
    epoch_after_recovery: int = -1
    refused: Exception | None = None


@pytest.fixture(scope="module")
def oauth2_node() -> Iterator[RabbitMQNode]:
    with rabbitmq_node(
        plugins=["rabbitmq_auth_backend_oauth2"], extra_conf=CONF, advanced_config=ADVANCED_CONFIG
    ) as node:
        yield node


def _url(node: RabbitMQNode, password: str = "not-used") -> str:
    return f"amqp://app:{password}@127.0.0.1:{node.port}/?connection_timeout=10000"


def _force_close(node: RabbitMQNode) -> None:
    """320 CONNECTION_FORCED for the one connection open on the module's node: one rabbitmqctl
    call (about 2 s on a loaded machine), where ``close_connection`` by name takes two."""
    node.ctl("close_all_connections", "test")


def _on_trio(node: RabbitMQNode, name: str, queue: str, tokens: Tokens) -> Seen:
    seen = Seen()

    async def provider() -> Credentials:
        return tokens()

    async def main() -> None:
        with trio.fail_after(TIMEOUT):
            async with (
                amqp_trio.connect(
                    _url(node),
                    connection_name=name,
                    recovery=POLICY,
                    credentials=provider,
                    refresh_margin=MARGIN,
                ) as conn,
                conn.channel() as ch,
            ):
                events = conn.recovery_events()
                await ch.confirm_select()
                await ch.queue_declare(queue)
                while not tokens.refreshed():
                    await ch.basic_publish(b"%d" % seen.published, routing_key=queue)
                    seen.published += 1
                    await trio.sleep(PAUSE)
                async with conn.channel() as fresh:  # a check no channel cached yet
                    await fresh.queue_declare(queue)
                seen.epoch_after_expiry = conn.epoch
                seen.calls_before_close = tokens.calls
                await trio.to_thread.run_sync(_force_close, node)
                async for event in events:
                    if isinstance(event, Recovered):
                        break
                seen.calls_after_recovery = tokens.calls
                seen.epoch_after_recovery = conn.epoch
                await ch.basic_publish(b"after recovery", routing_key=queue)
                seen.published += 1
                seen.held = await ch.queue_delete(queue)
                bad, _ = mint(key=b"not-the-key")
                try:
                    await conn.update_secret(bad, "a forged token")
                except NotAllowed as exc:
                    seen.refused = exc
                assert conn.is_closed

    trio.run(main)
    return seen


def _on_asyncio(node: RabbitMQNode, name: str, queue: str, tokens: Tokens) -> Seen:
    seen = Seen()

    async def provider() -> Credentials:
        return tokens()

    async def main() -> None:
        async with (
            asyncio.timeout(TIMEOUT),
            amqp_asyncio.connect(
                _url(node),
                connection_name=name,
                recovery=POLICY,
                credentials=provider,
                refresh_margin=MARGIN,
            ) as conn,
            conn.channel() as ch,
        ):
            events = conn.recovery_events()
            await ch.confirm_select()
            await ch.queue_declare(queue)
            while not tokens.refreshed():
                await ch.basic_publish(b"%d" % seen.published, routing_key=queue)
                seen.published += 1
                await asyncio.sleep(PAUSE)
            async with conn.channel() as fresh:  # a check no channel cached yet
                await fresh.queue_declare(queue)
            seen.epoch_after_expiry = conn.epoch
            seen.calls_before_close = tokens.calls
            await asyncio.to_thread(_force_close, node)
            async for event in events:
                if isinstance(event, Recovered):
                    break
            seen.calls_after_recovery = tokens.calls
            seen.epoch_after_recovery = conn.epoch
            await ch.basic_publish(b"after recovery", routing_key=queue)
            seen.published += 1
            seen.held = await ch.queue_delete(queue)
            bad, _ = mint(key=b"not-the-key")
            try:
                await conn.update_secret(bad, "a forged token")
            except NotAllowed as exc:
                seen.refused = exc
            assert conn.is_closed

    asyncio.run(main())
    return seen


def _on_blocking(node: RabbitMQNode, name: str, queue: str, tokens: Tokens) -> Seen:
    seen = Seen()
    with (
        amqp_blocking.connect(
            _url(node),
            connection_name=name,
            recovery=POLICY,
            credentials=tokens,
            refresh_margin=MARGIN,
        ) as conn,
        conn.channel() as ch,
    ):
        events = conn.recovery_events()
        ch.confirm_select()
        ch.queue_declare(queue)
        deadline = time.monotonic() + TIMEOUT
        while not tokens.refreshed():
            assert time.monotonic() < deadline
            ch.basic_publish(b"%d" % seen.published, routing_key=queue, timeout=TIMEOUT)
            seen.published += 1
            time.sleep(PAUSE)
        with conn.channel() as fresh:  # a check no channel cached yet
            fresh.queue_declare(queue)
        seen.epoch_after_expiry = conn.epoch
        seen.calls_before_close = tokens.calls
        _force_close(node)
        event = events.get(TIMEOUT)
        while not isinstance(event, Recovered):
            assert event is not None
            event = events.get(TIMEOUT)
        seen.calls_after_recovery = tokens.calls
        seen.epoch_after_recovery = conn.epoch
        ch.basic_publish(b"after recovery", routing_key=queue, timeout=TIMEOUT)
        seen.published += 1
        seen.held = ch.queue_delete(queue)
        bad, _ = mint(key=b"not-the-key")
        try:
            conn.update_secret(bad, "a forged token", timeout=TIMEOUT)
        except NotAllowed as exc:
            seen.refused = exc
        assert conn.is_closed
    return seen


@pytest.mark.parametrize(
    "run", [_on_trio, _on_asyncio, _on_blocking], ids=["trio", "asyncio", "blocking"]
)
def test_a_provider_outlives_its_tokens_and_recovers_with_a_fresh_one(
    oauth2_node: RabbitMQNode, run: Callable[[RabbitMQNode, str, str, Tokens], Seen]
) -> None:
    tokens = Tokens()
    suffix = uuid.uuid4().hex[:8]
    seen = run(oauth2_node, f"oauth2-{suffix}", f"oauth2-{suffix}", tokens)
    # the same connection all along: every refresh was an update-secret, none a reconnect
    assert seen.epoch_after_expiry == 0
    assert seen.calls_before_close == 3  # the token it logged in with, and two refreshes
    assert seen.published > 1
    assert seen.held == seen.published  # every confirmed message, none lost in the recovery
    # the forced close: recovered, logging in with a token asked for then (not the first,
    # which had expired: RabbitMQ refuses an expired token at login)
    assert seen.epoch_after_recovery == 1
    assert seen.calls_after_recovery > seen.calls_before_close
    assert isinstance(seen.refused, NotAllowed)
    assert seen.refused.reply_code == 530
    assert "New secret was refused" in str(seen.refused)


def test_rabbitmq_keeps_a_connection_whose_token_expired(oauth2_node: RabbitMQNode) -> None:
    """RabbitMQ 3.10 at ``exp``: the connection stays open; what needs a permission check
    the channel has not cached is refused (403, the channel closes) until update-secret
    brings a valid token. Without update-secret nothing closes the connection; update-secret
    accepts an expired token (and nothing passes after it), login does not."""
    token, exp = mint(lifetime=2)
    with amqp_blocking.connect(_url(oauth2_node, token)) as conn:
        with conn.channel() as ch:
            ch.queue_declare("", exclusive=True)
        time.sleep(max(0.0, exp - time.time()) + 0.1)
        with pytest.raises(AccessRefused, match="token has expired"), conn.channel() as ch:
            ch.queue_declare("", exclusive=True)
        assert not conn.is_closed
        expired, _ = mint(lifetime=-10)
        conn.update_secret(expired, "an expired token", timeout=TIMEOUT)
        with pytest.raises(AccessRefused, match="token has expired"), conn.channel() as ch:
            ch.queue_declare("", exclusive=True)
        fresh, _ = mint()
        conn.update_secret(fresh, "token refresh", timeout=TIMEOUT)
        with conn.channel() as ch:
            ch.queue_declare("", exclusive=True)
    with pytest.raises(ConnectionClosedError, match="Login was refused") as info:
        amqp_blocking.connect(_url(oauth2_node, expired))
    assert info.value.reply_code == 403
