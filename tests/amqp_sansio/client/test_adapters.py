"""What the client layer promises, held by all three adapters against a scripted server on a
loopback socket (our own server-role core, :mod:`tests.support.scripted_server`)."""

from __future__ import annotations

import asyncio
import ssl
from typing import TYPE_CHECKING, Final

import pytest
import trio

import amqp_asyncio
import amqp_blocking
import amqp_broker
import amqp_trio
from amqp_sansio import ConnectionBlocked, ConnectionClosed
from amqp_sansio.client import (
    AMQPError,
    ConnectionForced,
    ConnectionLostError,
    HeartbeatTimeoutError,
)
from tests.support.scripted_server import ScriptedServer
from tests.support.tls import self_signed_certificate

if TYPE_CHECKING:
    from collections.abc import Iterator

    from amqp_sansio import Connection as CoreConnection

ADAPTERS: Final = ("trio", "asyncio", "blocking")


def blocked_reason_at_connect(adapter: str, url: str) -> str | None:
    """Connect with *adapter*; the ``blocked_reason`` the connection shows as connect returns."""
    if adapter == "blocking":
        with amqp_blocking.connect(url) as conn:
            return conn.blocked_reason

    async def on_asyncio() -> str | None:
        async with amqp_asyncio.connect(url) as conn:
            return conn.blocked_reason

    async def on_trio() -> str | None:
        async with amqp_trio.connect(url) as conn:
            return conn.blocked_reason

    return asyncio.run(on_asyncio()) if adapter == "asyncio" else trio.run(on_trio)


# --- Frames in the read that brings connection.open-ok -----------------------------------------


def _close_forced(core: CoreConnection) -> None:
    core.close(320, "CONNECTION_FORCED - broker shutdown")


def _block(core: CoreConnection) -> None:
    core.send_method(0, ConnectionBlocked(reason="low on memory"))


@pytest.mark.parametrize("heartbeat", [0, 60])
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_close_that_came_with_open_ok_is_raised(adapter: str, heartbeat: int) -> None:
    with ScriptedServer(_close_forced, heartbeat=heartbeat) as server:
        with pytest.raises(ConnectionForced, match="broker shutdown"):
            blocked_reason_at_connect(adapter, server.url)
        # ... and answered with close-ok (the server never closes the socket first).
        closed = server.wait_for(ConnectionClosed)
        assert isinstance(closed, ConnectionClosed)
        assert closed.reply_code == 320


@pytest.mark.parametrize("heartbeat", [0, 60])
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_block_that_came_with_open_ok_shows_at_connect(adapter: str, heartbeat: int) -> None:
    with ScriptedServer(_block, heartbeat=heartbeat) as server:
        assert blocked_reason_at_connect(adapter, server.url) == "low on memory"


# --- A broker that stops answering ----------------------------------------------------------------


def errors_of_a_silent_broker(adapter: str, url: str) -> tuple[BaseException, object]:
    """Connect with *adapter* and open a channel on a broker that never answers again: the
    error the open raised and the connection's ``close_error``."""
    if adapter == "blocking":
        with amqp_blocking.connect(url) as conn:
            with pytest.raises(AMQPError) as info:
                conn.channel()
            return info.value, conn.close_error

    async def on_asyncio() -> tuple[BaseException, object]:
        async with amqp_asyncio.connect(url) as conn:
            with pytest.raises(AMQPError) as info:
                await conn.open_channel()
            return info.value, conn.close_error

    async def on_trio() -> tuple[BaseException, object]:
        async with amqp_trio.connect(url) as conn:
            with pytest.raises(AMQPError) as info:
                await conn.open_channel()
            return info.value, conn.close_error

    return asyncio.run(on_asyncio()) if adapter == "asyncio" else trio.run(on_trio)


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_heartbeat_timeout_raises_one_error_with_one_text(adapter: str) -> None:
    with ScriptedServer(heartbeat=1, silent_after_open=True) as server:
        raised, close_error = errors_of_a_silent_broker(adapter, server.url)
    assert type(raised) is HeartbeatTimeoutError
    assert isinstance(raised, ConnectionLostError)  # what code written before it catches
    assert str(raised) == (
        f"no bytes from 127.0.0.1:{server.port} for two heartbeat intervals (1 s each): "
        "the connection was dropped"
    )
    assert (raised.address, raised.heartbeat) == (f"127.0.0.1:{server.port}", 1)
    assert close_error is raised


# --- TLS --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def untrusted_tls_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The embedded broker behind TLS with a self-signed certificate no client trusts."""
    cert, key = self_signed_certificate(tmp_path_factory.mktemp("tls"))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    with amqp_broker.run_in_thread(ssl_context=context, host="localhost") as url:
        assert url.startswith("amqps://")
        yield url


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_an_untrusted_certificate_raises_the_ssl_error_with_its_reason(
    adapter: str, untrusted_tls_url: str
) -> None:
    with pytest.raises(ssl.SSLCertVerificationError) as info:
        blocked_reason_at_connect(adapter, untrusted_tls_url)
    assert "certificate verify failed: self-signed certificate" in str(info.value)
    assert info.value.verify_message == "self-signed certificate"
