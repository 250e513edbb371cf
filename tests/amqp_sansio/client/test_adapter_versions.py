"""AMQP 0-8 and 0-9 through each adapter (amqp_trio, amqp_asyncio, amqp_blocking), against
RabbitMQ 3.10 and the embedded broker; ``protocol="auto"`` against servers that answer with
another version's header.

One session per adapter and version: the handshake, exchange and queue declare/bind/unbind/
delete, publish with properties and headers, get, ack, recover (answered with recover-ok in 0-8,
asynchronous in 0-9: the adapter must not wait for a reply), consume, reject, qos, a channel
error, a method only 0-9-1 has (refused before anything is written) and the connection's
close. The
version is chosen with the URL's ``protocol`` query parameter; ``connect(protocol=...)`` wins
over it. RabbitMQ serves ``AMQP 1 1 0 9`` as 0-9-1, whose tables agree with 0-9's on everything
used here; the embedded broker does the same by default, and serves it as 0-9 when configured
(``header_0_9``), which runs here too.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import uuid
from contextlib import asynccontextmanager, closing
from typing import TYPE_CHECKING, Final, Protocol, final

import pytest
import trio

import amqp_asyncio
import amqp_blocking
import amqp_broker
import amqp_trio
from amqp_broker import BrokerOptions
from amqp_sansio import (
    BasicProperties,
    LocalProtocolError,
    ProtocolHeader,
    ProtocolVersion,
    header_for,
)
from amqp_sansio.client import NotFound, ProtocolVersionRefused

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
    from contextlib import AbstractAsyncContextManager

    from amqp_sansio import FieldTable, QueueDeclareOk

_TIMEOUT: Final = 30

VERSIONS: Final = ("0-8", "0-9")


# --- what the session uses of each adapter ----------------------------------------------------


class _Message(Protocol):
    @property
    def body(self) -> bytes: ...
    @property
    def properties(self) -> BasicProperties: ...
    @property
    def delivery_tag(self) -> int: ...
    @property
    def message_count(self) -> int | None: ...
    @property
    def redelivered(self) -> bool: ...

    async def ack(self, *, multiple: bool = False) -> None: ...


class _Consumer(Protocol):
    def __aiter__(self) -> _Consumer: ...
    async def __anext__(self) -> _Message: ...


class _Channel(Protocol):
    @property
    def is_closed(self) -> bool: ...
    async def exchange_declare(self, exchange: str, exchange_type: str = "direct") -> None: ...
    async def exchange_delete(self, exchange: str) -> None: ...
    async def queue_declare(
        self, queue: str = "", *, passive: bool = False, arguments: FieldTable | None = None
    ) -> QueueDeclareOk: ...
    async def queue_bind(self, queue: str, exchange: str, routing_key: str = "") -> None: ...
    async def queue_unbind(self, queue: str, exchange: str, routing_key: str = "") -> None: ...
    async def queue_delete(self, queue: str) -> int: ...
    async def basic_qos(self, prefetch_count: int = 0) -> None: ...
    async def confirm_select(self) -> None: ...
    async def basic_publish(
        self,
        body: bytes,
        *,
        exchange: str = "",
        routing_key: str = "",
        properties: BasicProperties | None = None,
    ) -> None: ...
    async def basic_get(self, queue: str) -> _Message | None: ...
    def basic_consume(self, queue: str) -> AbstractAsyncContextManager[_Consumer]: ...
    async def basic_reject(self, delivery_tag: int, *, requeue: bool = True) -> None: ...
    async def basic_recover(self, requeue: bool = True) -> None: ...


class _Connection(Protocol):
    @property
    def protocol(self) -> str: ...
    @property
    def is_closed(self) -> bool: ...
    def channel(self) -> AbstractAsyncContextManager[_Channel]: ...


class _Connect(Protocol):
    def __call__(
        self, url_or_params: str = ..., *, protocol: str | None = None
    ) -> AbstractAsyncContextManager[_Connection]: ...


# amqp_blocking seen through the async API above (its calls run in the calling thread)


@final
class _BlockingMessage:
    def __init__(self, message: amqp_blocking.Message) -> None:
        self._message = message
        self.body = message.body
        self.properties = message.properties
        self.delivery_tag = message.delivery_tag
        self.message_count = message.message_count
        self.redelivered = message.redelivered

    async def ack(self, *, multiple: bool = False) -> None:
        self._message.ack(multiple=multiple)


@final
class _BlockingConsumer:
    def __init__(self, consumer: amqp_blocking.Consumer) -> None:
        self._consumer = consumer

    def __aiter__(self) -> _BlockingConsumer:
        return self

    async def __anext__(self) -> _Message:
        message = self._consumer.get()
        if message is None:
            raise StopAsyncIteration
        return _BlockingMessage(message)


@final
class _BlockingChannel:
    def __init__(self, channel: amqp_blocking.Channel) -> None:
        self._ch = channel

    @property
    def is_closed(self) -> bool:
        return self._ch.is_closed

    async def exchange_declare(self, exchange: str, exchange_type: str = "direct") -> None:
        self._ch.exchange_declare(exchange, exchange_type)

    async def exchange_delete(self, exchange: str) -> None:
        self._ch.exchange_delete(exchange)

    async def queue_declare(
        self, queue: str = "", *, passive: bool = False, arguments: FieldTable | None = None
    ) -> QueueDeclareOk:
        return self._ch.queue_declare(queue, passive=passive, arguments=arguments)

    async def queue_bind(self, queue: str, exchange: str, routing_key: str = "") -> None:
        self._ch.queue_bind(queue, exchange, routing_key)

    async def queue_unbind(self, queue: str, exchange: str, routing_key: str = "") -> None:
        self._ch.queue_unbind(queue, exchange, routing_key)

    async def queue_delete(self, queue: str) -> int:
        return self._ch.queue_delete(queue)

    async def basic_qos(self, prefetch_count: int = 0) -> None:
        self._ch.basic_qos(prefetch_count)

    async def confirm_select(self) -> None:
        self._ch.confirm_select()

    async def basic_publish(
        self,
        body: bytes,
        *,
        exchange: str = "",
        routing_key: str = "",
        properties: BasicProperties | None = None,
    ) -> None:
        self._ch.basic_publish(
            body, exchange=exchange, routing_key=routing_key, properties=properties
        )

    async def basic_get(self, queue: str) -> _Message | None:
        message = self._ch.basic_get(queue)
        return None if message is None else _BlockingMessage(message)

    @asynccontextmanager
    async def basic_consume(self, queue: str) -> AsyncIterator[_Consumer]:
        with self._ch.basic_consume(queue) as consumer:
            yield _BlockingConsumer(consumer)

    async def basic_reject(self, delivery_tag: int, *, requeue: bool = True) -> None:
        self._ch.basic_reject(delivery_tag, requeue=requeue)

    async def basic_recover(self, requeue: bool = True) -> None:
        self._ch.basic_recover(requeue)


@final
class _BlockingConnection:
    def __init__(self, connection: amqp_blocking.Connection) -> None:
        self._conn = connection

    @property
    def protocol(self) -> str:
        return self._conn.protocol

    @property
    def is_closed(self) -> bool:
        return self._conn.is_closed

    @asynccontextmanager
    async def channel(self) -> AsyncIterator[_Channel]:
        with self._conn.channel() as ch:
            yield _BlockingChannel(ch)


@asynccontextmanager
async def _blocking_connect(
    url_or_params: str = "", *, protocol: str | None = None
) -> AsyncIterator[_Connection]:
    with amqp_blocking.connect(url_or_params, protocol=protocol) as conn:
        yield _BlockingConnection(conn)


_trio_connect: _Connect = amqp_trio.connect
_asyncio_connect: _Connect = amqp_asyncio.connect
_ADAPTERS: Final[dict[str, _Connect]] = {
    "trio": _trio_connect,
    "asyncio": _asyncio_connect,
    "blocking": _blocking_connect,
}


def _run(adapter: str, body: Callable[[_Connect], Awaitable[None]]) -> None:
    """Run ``await body(connect)`` under the adapter's own event loop (asyncio for blocking's
    facade), bounded by :data:`_TIMEOUT`."""
    connect = _ADAPTERS[adapter]

    async def under_trio() -> None:
        with trio.fail_after(_TIMEOUT):
            await body(connect)

    async def under_asyncio() -> None:
        async with asyncio.timeout(_TIMEOUT):
            await body(connect)

    if adapter == "trio":
        trio.run(under_trio)
    else:
        asyncio.run(under_asyncio())


# --- the session ------------------------------------------------------------------------------


async def _session(connect: _Connect, url: str, version: str) -> None:
    name = f"amqp-sansio.versions.{uuid.uuid4().hex[:8]}"
    exchange, queue = f"{name}.x", f"{name}.q"
    async with connect(f"{url}?protocol={version}") as conn:
        assert conn.protocol == version
        async with conn.channel() as ch:
            await ch.exchange_declare(exchange, "direct")
            declared = await ch.queue_declare(queue, arguments={"x-max-length": 100})
            assert declared.queue == queue
            try:
                await ch.queue_bind(queue, exchange, "k")
                await ch.basic_qos(10)
                headers: FieldTable = {"n": 7, "s": "text", "nested": {"deep": 1}}
                props = BasicProperties(
                    content_type="text/plain",
                    delivery_mode=2,
                    priority=3,
                    message_id="m1",
                    headers=headers,
                )
                await ch.basic_publish(
                    b"first", exchange=exchange, routing_key="k", properties=props
                )
                got = await ch.basic_get(queue)
                assert got is not None
                assert (got.body, got.message_count) == (b"first", 0)
                assert got.properties.headers == headers
                assert (got.properties.content_type, got.properties.message_id) == (
                    "text/plain",
                    "m1",
                )
                assert (got.properties.delivery_mode, got.properties.priority) == (2, 3)
                await got.ack()
                # unacknowledged, then recovered: 0-9's basic.recover has no reply, so the
                # call returns at once and the broker requeues before it answers the next get
                await ch.basic_publish(b"again", exchange=exchange, routing_key="k")
                unacked = await ch.basic_get(queue)
                assert unacked is not None
                assert (unacked.body, unacked.redelivered) == (b"again", False)
                await ch.basic_recover(requeue=True)
                redelivered = await ch.basic_get(queue)
                assert redelivered is not None
                assert (redelivered.body, redelivered.redelivered) == (b"again", True)
                await redelivered.ack()
                await ch.basic_publish(b"second", exchange=exchange, routing_key="k")
                async with ch.basic_consume(queue) as consumer:
                    async for message in consumer:
                        assert message.body == b"second"
                        await ch.basic_reject(message.delivery_tag, requeue=False)
                        break
                assert await ch.basic_get(queue) is None  # rejected without requeue: gone
                await ch.queue_unbind(queue, exchange, "k")
            finally:
                await ch.queue_delete(queue)
                await ch.exchange_delete(exchange)
        async with conn.channel() as ch:
            missing = f"{name}.missing"
            with pytest.raises(NotFound) as info:
                await ch.queue_declare(missing, passive=True)
            assert missing in info.value.reply_text
            assert ch.is_closed
        async with conn.channel() as ch:
            # what only 0-9-1 has is refused before anything is written; the channel stays open
            with pytest.raises(LocalProtocolError, match=f"AMQP {version} has no method confirm"):
                await ch.confirm_select()
            assert not ch.is_closed
    assert conn.is_closed


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("adapter", sorted(_ADAPTERS))
def test_a_session(adapter: str, version: str, amqp_url: str) -> None:
    _run(adapter, lambda connect: _session(connect, amqp_url, version))


@pytest.fixture(scope="module")
def broker_0_9_url() -> Iterator[str]:
    """The embedded broker reading ``AMQP 1 1 0 9`` as 0-9 (qpid-python's reading)."""
    with amqp_broker.run_in_thread(options=BrokerOptions(header_0_9="0-9")) as url:
        yield url


@pytest.mark.parametrize("adapter", sorted(_ADAPTERS))
def test_a_0_9_session_served_as_0_9(adapter: str, broker_0_9_url: str) -> None:
    _run(adapter, lambda connect: _session(connect, broker_0_9_url, "0-9"))


# --- negotiation ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker_0_8_url() -> Iterator[str]:
    """An embedded broker of 0-8 alone: it answers other headers with ``AMQP 1 1 8 0``."""
    with amqp_broker.run_in_thread(options=BrokerOptions(protocols=("0-8",))) as url:
        yield url


@pytest.mark.parametrize("adapter", sorted(_ADAPTERS))
def test_auto_reconnects_with_what_the_server_answered(adapter: str, broker_0_8_url: str) -> None:
    async def body(connect: _Connect) -> None:
        async with connect(broker_0_8_url, protocol="auto") as conn:
            assert conn.protocol == "0-8"
            async with conn.channel() as ch:
                assert (await ch.queue_declare()).queue.startswith("amq.gen-")
        with pytest.raises(ProtocolVersionRefused) as info:
            async with connect(broker_0_8_url, protocol="0-9-1"):
                raise AssertionError("a 0-8 broker served 0-9-1")
        assert info.value.requested is ProtocolVersion.AMQP_0_9_1
        assert info.value.offered.version is ProtocolVersion.AMQP_0_8
        assert info.value.reply_code == 540

    _run(adapter, body)


@pytest.mark.parametrize("adapter", sorted(_ADAPTERS))
def test_auto_speaks_0_9_1_to_a_server_that_does(adapter: str, amqp_url: str) -> None:
    async def body(connect: _Connect) -> None:
        async with connect(f"{amqp_url}?protocol=auto") as conn:
            assert conn.protocol == "0-9-1"

    _run(adapter, body)


@final
class _Refuser:
    """A server that answers every header with *answer* and resets the connection, as RabbitMQ
    does after its header (the client must read the header before the reset); it records the
    headers it was sent."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.headers: list[bytes] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        with closing(self._listener):
            while True:
                try:
                    sock, _ = self._listener.accept()
                except OSError:
                    return
                with closing(sock):
                    header = b""
                    while len(header) < 8 and (chunk := sock.recv(8 - len(header))):
                        header += chunk
                    self.headers.append(header)
                    sock.sendall(self.answer)
                    # SO_LINGER 0: close() sends a reset, not a FIN
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")

    def close(self) -> None:
        self._listener.close()  # a blocked accept() raises OSError
        with closing(socket.socket()) as poke:
            poke.connect_ex(("127.0.0.1", self.port))
        self._thread.join(5)

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"


@pytest.mark.parametrize(
    ("answer", "tried"),
    [
        # it names 0-8: tried next, and refused too; nothing else is worth trying
        (header_for("0-8"), ["0-9-1", "0-8"]),
        # it names nothing we speak: each of 0-9-1, 0-9, 0-8 in turn
        (header_for("1.0"), ["0-9-1", "0-9", "0-8"]),
    ],
    ids=["answers-0-8", "answers-1.0"],
)
@pytest.mark.parametrize("adapter", sorted(_ADAPTERS))
def test_auto_reads_the_header_before_the_reset(
    adapter: str, answer: bytes, tried: list[str]
) -> None:
    refuser = _Refuser(answer)
    try:

        async def body(connect: _Connect) -> None:
            with pytest.raises(ProtocolVersionRefused) as info:
                async with connect(refuser.url, protocol="auto"):
                    raise AssertionError("connected to a server that only refuses")
            assert info.value.offered == ProtocolHeader(answer)
            assert info.value.requested.value == tried[-1]

        _run(adapter, body)
        assert refuser.headers == [header_for(version) for version in tried]
    finally:
        refuser.close()


@pytest.mark.parametrize("adapter", sorted(_ADAPTERS))
def test_a_server_offering_0_10_gets_a_clear_error(adapter: str) -> None:
    refuser = _Refuser(header_for("0-10"))
    try:

        async def body(connect: _Connect) -> None:
            with pytest.raises(ValueError, match="the server speaks AMQP 0-10 only") as info:
                async with connect(refuser.url, protocol="auto"):
                    raise AssertionError("connected to a server that only refuses")
            assert isinstance(info.value.__cause__, ProtocolVersionRefused)
            with pytest.raises(ProtocolVersionRefused) as refused:
                async with connect(refuser.url):
                    raise AssertionError("connected to a server that only refuses")
            assert refused.value.offered.version is ProtocolVersion.AMQP_0_10

        _run(adapter, body)
        assert refuser.headers == [header_for("0-9-1")] * 2
    finally:
        refuser.close()


@pytest.mark.parametrize("adapter", sorted(_ADAPTERS))
def test_bad_protocols_are_refused_before_connecting(adapter: str) -> None:
    async def body(connect: _Connect) -> None:
        with pytest.raises(ValueError, match=r"connect\(url, protocol='0-10'\)"):
            async with connect("amqp://127.0.0.1:1/?protocol=0-10"):
                raise AssertionError("connected")
        with pytest.raises(ValueError, match=r"expected '0-9-1', '0-9', '0-8', '0-10' or 'auto'"):
            async with connect("amqp://127.0.0.1:1/?protocol=1.0"):
                raise AssertionError("connected")

    _run(adapter, body)
