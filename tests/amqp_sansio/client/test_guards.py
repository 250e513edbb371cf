"""Error messages that say what to do, shared by the three adapters through the client layer:
a str body, ``async for`` over ``basic_consume(...)`` without ``async with``, a refused port,
and a refused login that is raised without also being printed."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import textwrap

import pytest
import trio

import amqp_asyncio
import amqp_blocking
import amqp_trio
from amqp_sansio import BasicProperties, BasicPublish
from amqp_sansio.client import ConsumeBlock, connect_failed
from amqp_sansio.testing import ConnectionPair
from tests.support import ROOT

_CONSUME_HINT = r"write `async with channel\.basic_consume\(queue\) as consumer:`"
_STR_BODY = r"must be bytes .*not str: encode it first"
_REFUSED = r"could not connect to 127\.0\.0\.1:\d+: Connection refused \(no broker listens there"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_str_body_is_a_type_error_that_says_encode() -> None:
    pair = ConnectionPair()
    pair.handshake()
    channel = pair.open_channel()
    with pytest.raises(TypeError, match=_STR_BODY):
        pair.client.publish(channel, BasicPublish(), BasicProperties(), "text")  # type: ignore[arg-type]
    assert pair.client.data_to_send() == b""  # nothing half-sent


def test_connect_failed_keeps_the_class_and_puts_the_reason_in_the_message() -> None:
    group = ExceptionGroup("attempts", [ConnectionRefusedError(111, "Error connecting: refused")])
    outer = OSError("all attempts to connect to h:1 failed")
    outer.__cause__ = group
    error = connect_failed("h:1", outer)
    assert type(error) is ConnectionRefusedError
    assert error.errno == 111
    assert str(error).startswith("[Errno 111] could not connect to h:1: Connection refused (")
    unresolved = connect_failed("nowhere:1", socket.gaierror(-2, "Name or service not known"))
    assert type(unresolved) is socket.gaierror
    assert "could not connect to nowhere:1: Name or service not known" in str(unresolved)
    assert "no broker listens" not in str(unresolved)


def test_a_refused_port_says_so_in_every_adapter() -> None:
    url = f"amqp://guest:guest@127.0.0.1:{_closed_port()}/"

    async def trio_connect() -> None:
        async with amqp_trio.connect(url):
            pass

    async def asyncio_connect() -> None:
        async with amqp_asyncio.connect(url):
            pass

    with pytest.raises(ConnectionRefusedError, match=_REFUSED):
        trio.run(trio_connect)
    with pytest.raises(ConnectionRefusedError, match=_REFUSED):
        asyncio.run(asyncio_connect())
    with pytest.raises(ConnectionRefusedError, match=_REFUSED), amqp_blocking.connect(url):
        pass


@pytest.mark.rabbitmq
def test_str_body_and_consume_without_async_with_in_the_adapters(rabbitmq_url: str) -> None:
    async def with_trio() -> None:
        async with amqp_trio.connect(rabbitmq_url) as conn, conn.channel() as ch:
            queue = (await ch.queue_declare(exclusive=True)).queue
            with pytest.raises(TypeError, match=_STR_BODY):
                await ch.basic_publish("text", routing_key=queue)  # type: ignore[arg-type]
            block = ch.basic_consume(queue)
            assert isinstance(block, ConsumeBlock)
            with pytest.raises(TypeError, match=_CONSUME_HINT):
                async for _ in block:  # type: ignore[attr-defined]
                    pass
            async with block as consumer:  # still usable the right way
                assert consumer.consumer_tag

    async def with_asyncio() -> None:
        async with amqp_asyncio.connect(rabbitmq_url) as conn, conn.channel() as ch:
            queue = (await ch.queue_declare(exclusive=True)).queue
            with pytest.raises(TypeError, match=_STR_BODY):
                await ch.basic_publish("text", routing_key=queue)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match=_CONSUME_HINT):
                async for _ in ch.basic_consume(queue):  # type: ignore[attr-defined]
                    pass

    trio.run(with_trio)
    asyncio.run(with_asyncio())
    with amqp_blocking.connect(rabbitmq_url) as conn, conn.channel() as ch:
        queue = ch.queue_declare(exclusive=True).queue
        with pytest.raises(TypeError, match=_STR_BODY):
            ch.basic_publish("text", routing_key=queue)  # type: ignore[arg-type]


@pytest.mark.rabbitmq
def test_a_refused_login_is_raised_and_not_also_printed(rabbitmq_url: str) -> None:
    # A script with no logging set up: Python prints warnings to stderr by itself.
    bad = rabbitmq_url.replace("guest:guest@", "guest:not-the-password@", 1)
    assert bad != rabbitmq_url
    program = textwrap.dedent(
        f"""
        import asyncio, trio, amqp_asyncio, amqp_blocking, amqp_trio
        from amqp_sansio.client import AccessRefused, ConnectionClosedError
        url = {bad!r}
        async def t():
            async with amqp_trio.connect(url):
                pass
        async def a():
            async with amqp_asyncio.connect(url):
                pass
        for attempt in (lambda: trio.run(t), lambda: asyncio.run(a()),
                        lambda: amqp_blocking.connect(url).close()):
            try:
                attempt()
            except ConnectionClosedError as exc:
                assert exc.reply_code == 403, exc
            else:
                raise AssertionError("logged in with a wrong password")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
