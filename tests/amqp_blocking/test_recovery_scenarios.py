"""The shared recovery scenarios (tests/support/recovery_scenarios.py) through amqp_blocking, by
a thin sync-to-async facade whose methods call the blocking ones directly (as
tests/amqp_asyncio/test_scenarios.py does): the adapter is driven from the calling thread while
its I/O thread does the rest."""

from __future__ import annotations

import asyncio
import queue
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final, final

import pytest

import amqp_blocking
from amqp_sansio.client import DEFAULT_URL

from ..support.rabbitmqctl import connection_pid, rabbitmqctl
from ..support.recovery_scenarios import (
    BacklogCounts,
    again_if_the_broker_lost_the_queue,
    scenario_backlog_fault,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Sequence

    from amqp_sansio import BasicProperties, FieldTable
    from amqp_sansio.client import AMQPError, RecoveryEvent, RecoveryPolicy

    from ..support.rabbitmq_node import RabbitMQNode

pytestmark = pytest.mark.rabbitmq

_TIMEOUT: Final = 300.0


@final
class _Message:
    def __init__(self, message: amqp_blocking.Message) -> None:
        self._message = message

    @property
    def body(self) -> bytes:
        return self._message.body

    @property
    def epoch(self) -> int:
        return self._message.epoch

    async def ack(self, *, multiple: bool = False) -> None:
        self._message.ack(multiple=multiple)


@final
class _Consumer:
    def __init__(self, consumer: amqp_blocking.Consumer) -> None:
        self._consumer = consumer

    def __aiter__(self) -> _Consumer:
        return self

    async def __anext__(self) -> _Message:
        message = self._consumer.get(_TIMEOUT)
        if message is None:
            raise StopAsyncIteration
        return _Message(message)


@final
class _Publisher:
    def __init__(self, publisher: amqp_blocking.Publisher) -> None:
        self._publisher = publisher

    async def publish(
        self, body: bytes, *, routing_key: str = "", properties: BasicProperties | None = None
    ) -> amqp_blocking.PublishTicket:
        return self._publisher.publish(body, routing_key=routing_key, properties=properties)

    async def wait_for_confirms(self) -> None:
        self._publisher.wait_for_confirms(_TIMEOUT)

    def take_failures(self) -> Sequence[AMQPError]:
        return self._publisher.take_failures()


@final
class _Channel:
    def __init__(self, channel: amqp_blocking.Channel) -> None:
        self._channel = channel

    async def queue_declare(
        self, queue: str = "", *, durable: bool = False, arguments: FieldTable | None = None
    ) -> object:
        return self._channel.queue_declare(queue, durable=durable, arguments=arguments)

    async def queue_delete(self, queue: str) -> int:
        return self._channel.queue_delete(queue)

    async def basic_qos(self, prefetch_count: int = 0) -> None:
        self._channel.basic_qos(prefetch_count)

    async def basic_get(self, queue: str) -> _Message | None:
        message = self._channel.basic_get(queue)
        return None if message is None else _Message(message)

    @asynccontextmanager
    async def basic_consume(self, queue: str) -> AsyncIterator[_Consumer]:
        with self._channel.basic_consume(queue) as consumer:
            yield _Consumer(consumer)

    @asynccontextmanager
    async def publisher(self, window: int = 1000) -> AsyncIterator[_Publisher]:
        with self._channel.publisher(window) as publisher:
            yield _Publisher(publisher)


@final
class _Events:
    def __init__(self) -> None:
        self.queue: queue.Queue[RecoveryEvent] = queue.Queue()

    def __aiter__(self) -> _Events:
        return self

    async def __anext__(self) -> RecoveryEvent:
        return self.queue.get(timeout=_TIMEOUT)


@final
class _Connection:
    def __init__(self, conn: amqp_blocking.Connection) -> None:
        self._conn = conn
        self._events = _Events()
        conn.on_recovery(self._events.queue.put)

    @property
    def address(self) -> str:
        return self._conn.address

    async def open_channel(self) -> _Channel:
        return _Channel(self._conn.channel())

    def recovery_events(self) -> _Events:
        return self._events


@asynccontextmanager
async def _connect(
    url_or_params: str | Sequence[str] = DEFAULT_URL,
    *,
    connection_name: str | None = None,
    recovery: RecoveryPolicy | None = None,
) -> AsyncIterator[_Connection]:
    with amqp_blocking.connect(
        url_or_params, connection_name=connection_name, recovery=recovery
    ) as conn:
        yield _Connection(conn)


def _run(url: str, fault: Callable[[str], float | None]) -> BacklogCounts:
    return asyncio.run(scenario_backlog_fault(_connect, url, fault))


def _forced_close(name: str) -> None:
    rabbitmqctl("close_connection", connection_pid(name), "test")


def _check(counts: BacklogCounts) -> None:
    assert counts.unprocessed == 0
    assert counts.stale == 0
    print(counts)


def test_backlog_forced_close(rabbitmq_url: str) -> None:
    counts = _run(rabbitmq_url, _forced_close)
    _check(counts)


def test_backlog_node_kill(private_rabbitmq: RabbitMQNode) -> None:
    node = private_rabbitmq
    counts = asyncio.run(
        again_if_the_broker_lost_the_queue(
            lambda: scenario_backlog_fault(
                _connect, node.url, lambda _: node.restart(), recovered=node.check_kept
            )
        )
    )
    _check(counts)
    assert counts.resumed_after is not None


def test_backlog_node_forced_close(private_rabbitmq: RabbitMQNode) -> None:
    counts = _run(private_rabbitmq.url, private_rabbitmq.close_connection)
    _check(counts)
