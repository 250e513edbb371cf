"""The shared integration scenarios (tests/support/scenarios.py) through amqp_asyncio and through
amqp_blocking, against a broker.

amqp_asyncio runs them as they are (``asyncio.run``). amqp_blocking runs them through a thin
sync-to-async facade whose methods call the blocking ones directly: the blocking adapter is
exercised from the calling thread, as applications use it, while its I/O thread does the rest.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final, final

import pytest

import amqp_asyncio
import amqp_blocking
from amqp_sansio.client import DEFAULT_URL
from tests.support.scenarios import RABBITMQ_SCENARIOS, SCENARIOS

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from amqp_sansio import BasicProperties, FieldTable, QueueDeclareOk
    from tests.support.scenarios import Connect

# Generous: a scenario that hangs is a bug, not slowness; rabbitmqctl takes ~1 s per call.
_SCENARIO_TIMEOUT: Final = 60


# --- the blocking facade ----------------------------------------------------------------------


@final
class _Message:
    def __init__(self, message: amqp_blocking.Message) -> None:
        self._message = message

    @property
    def body(self) -> bytes:
        return self._message.body

    @property
    def properties(self) -> BasicProperties:
        return self._message.properties

    @property
    def routing_key(self) -> str:
        return self._message.routing_key

    @property
    def delivery_tag(self) -> int:
        return self._message.delivery_tag

    @property
    def redelivered(self) -> bool:
        return self._message.redelivered

    @property
    def consumer_tag(self) -> str | None:
        return self._message.consumer_tag

    @property
    def message_count(self) -> int | None:
        return self._message.message_count

    @property
    def stream_offset(self) -> int | None:
        return self._message.stream_offset

    async def ack(self, *, multiple: bool = False) -> None:
        self._message.ack(multiple=multiple)


@final
class _Consumer:
    def __init__(self, consumer: amqp_blocking.Consumer) -> None:
        self._consumer = consumer

    @property
    def consumer_tag(self) -> str:
        return self._consumer.consumer_tag

    def __aiter__(self) -> _Consumer:
        return self

    async def __anext__(self) -> _Message:
        message = self._consumer.get()
        if message is None:
            raise StopAsyncIteration
        return _Message(message)


@final
class _Publisher:
    def __init__(self, publisher: amqp_blocking.Publisher) -> None:
        self._publisher = publisher

    @property
    def confirmed(self) -> int:
        return self._publisher.confirmed

    @property
    def nacked(self) -> int:
        return self._publisher.nacked

    @property
    def failed(self) -> int:
        return self._publisher.failed

    async def wait_for_confirms(self) -> None:
        self._publisher.wait_for_confirms()

    async def publish(
        self,
        body: bytes,
        *,
        exchange: str = "",
        routing_key: str = "",
        properties: BasicProperties | None = None,
        mandatory: bool = False,
    ) -> object:
        return self._publisher.publish(
            body,
            exchange=exchange,
            routing_key=routing_key,
            properties=properties,
            mandatory=mandatory,
        )


@final
class _Channel:
    def __init__(self, channel: amqp_blocking.Channel) -> None:
        self._channel = channel

    @property
    def is_closed(self) -> bool:
        return self._channel.is_closed

    async def queue_declare(
        self,
        queue: str = "",
        *,
        passive: bool = False,
        durable: bool = False,
        exclusive: bool = False,
        auto_delete: bool = False,
        arguments: FieldTable | None = None,
    ) -> QueueDeclareOk:
        return self._channel.queue_declare(
            queue,
            passive=passive,
            durable=durable,
            exclusive=exclusive,
            auto_delete=auto_delete,
            arguments=arguments,
        )

    async def queue_delete(
        self, queue: str, *, if_unused: bool = False, if_empty: bool = False
    ) -> int:
        return self._channel.queue_delete(queue, if_unused=if_unused, if_empty=if_empty)

    async def basic_qos(
        self, prefetch_count: int = 0, *, prefetch_size: int = 0, global_: bool = False
    ) -> None:
        self._channel.basic_qos(prefetch_count, prefetch_size=prefetch_size, global_=global_)

    async def confirm_select(self) -> None:
        self._channel.confirm_select()

    async def basic_publish(
        self,
        body: bytes,
        *,
        exchange: str = "",
        routing_key: str = "",
        properties: BasicProperties | None = None,
        mandatory: bool = False,
    ) -> None:
        self._channel.basic_publish(
            body,
            exchange=exchange,
            routing_key=routing_key,
            properties=properties,
            mandatory=mandatory,
        )

    @asynccontextmanager
    async def publisher(self, window: int = 1000) -> AsyncIterator[_Publisher]:
        with self._channel.publisher(window) as pub:
            yield _Publisher(pub)

    @asynccontextmanager
    async def basic_consume(
        self,
        queue: str,
        *,
        no_ack: bool = False,
        exclusive: bool = False,
        consumer_tag: str = "",
        arguments: FieldTable | None = None,
        buffer_size: int | None = None,
    ) -> AsyncIterator[_Consumer]:
        with self._channel.basic_consume(
            queue,
            no_ack=no_ack,
            exclusive=exclusive,
            consumer_tag=consumer_tag,
            arguments=arguments,
        ) as consumer:
            yield _Consumer(consumer)

    async def basic_get(self, queue: str, *, no_ack: bool = False) -> _Message | None:
        message = self._channel.basic_get(queue, no_ack=no_ack)
        return None if message is None else _Message(message)


@final
class _Connection:
    def __init__(self, connection: amqp_blocking.Connection) -> None:
        self._connection = connection

    @property
    def blocked(self) -> bool:
        return self._connection.blocked

    @property
    def is_closed(self) -> bool:
        return self._connection.is_closed

    @asynccontextmanager
    async def channel(self) -> AsyncIterator[_Channel]:
        with self._connection.channel() as ch:
            yield _Channel(ch)


@asynccontextmanager
async def blocking_connect(
    url_or_params: str = DEFAULT_URL, *, connection_name: str | None = None
) -> AsyncIterator[_Connection]:
    """``amqp_blocking.connect`` seen through the async API the scenarios use."""
    with amqp_blocking.connect(url_or_params, connection_name=connection_name) as conn:
        yield _Connection(conn)


# --- the tests --------------------------------------------------------------------------------

ADAPTERS: Final[dict[str, Connect]] = {
    "asyncio": amqp_asyncio.connect,
    "blocking": blocking_connect,
}


def _run(scenario: Callable[[Connect, str], Awaitable[None]], adapter: str, url: str) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(_SCENARIO_TIMEOUT):
            await scenario(ADAPTERS[adapter], url)

    asyncio.run(bounded())


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario(name: str, adapter: str, amqp_url: str) -> None:
    _run(SCENARIOS[name], adapter, amqp_url)


@pytest.mark.rabbitmq
@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
@pytest.mark.parametrize("name", sorted(RABBITMQ_SCENARIOS))
def test_rabbitmq_scenario(name: str, adapter: str, rabbitmq_url: str) -> None:
    _run(RABBITMQ_SCENARIOS[name], adapter, rabbitmq_url)
