"""amqp_blocking behind the async API the shared scenarios use (issue 28): each method calls the
blocking one directly, so a scenario run with ``asyncio.run`` drives the adapter from the calling
thread while its I/O thread does the rest, as an application does; :class:`ThreadRuntime` runs
the scenario's background work in a thread of its own, as an application would.

Every call waits at most :data:`WAIT` seconds, and on leaving :func:`connect` the facade checks
what only the blocking adapter has: its ``on_recovery`` callback saw the very events its
``recovery_events()`` iterator gave.
"""

from __future__ import annotations

import asyncio
import threading
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final, Generic, TypeVar, final

import amqp_blocking
from amqp_sansio.client import DEFAULT_URL

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

    from amqp_sansio import QueueDeclareOk
    from amqp_sansio.client import AMQPError, RecoveryEvent, RecoveryPolicy, RecoveryState

T = TypeVar("T")

#: What any one blocking call may take (a broker restart under load takes seconds).
WAIT: Final = 60.0


@final
class Message:
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


def _message(message: amqp_blocking.Message | None) -> Message | None:
    return None if message is None else Message(message)


@final
class Consumer:
    def __init__(self, consumer: amqp_blocking.Consumer) -> None:
        self._consumer = consumer

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> Message:
        message = self._consumer.get(WAIT)
        if message is None:
            raise StopAsyncIteration
        return Message(message)

    async def get(self, timeout: float | None = None) -> Message | None:
        return _message(self._consumer.get(timeout))


@final
class Publisher:
    def __init__(self, publisher: amqp_blocking.Publisher) -> None:
        self._publisher = publisher

    @property
    def confirmed(self) -> int:
        return self._publisher.confirmed

    @property
    def unknown(self) -> int:
        return self._publisher.unknown

    async def publish(self, body: bytes, *, routing_key: str = "") -> amqp_blocking.PublishTicket:
        return self._publisher.publish(body, routing_key=routing_key, timeout=WAIT)

    async def wait_for_confirms(self) -> None:
        self._publisher.wait_for_confirms(WAIT)

    def take_failures(self) -> Sequence[AMQPError]:
        return self._publisher.take_failures()


@final
class Channel:
    def __init__(self, channel: amqp_blocking.Channel) -> None:
        self._channel = channel

    async def queue_declare(
        self, queue: str = "", *, passive: bool = False, exclusive: bool = False
    ) -> QueueDeclareOk:
        return self._channel.queue_declare(queue, passive=passive, exclusive=exclusive)

    async def queue_bind(self, queue: str, exchange: str) -> None:
        self._channel.queue_bind(queue, exchange)

    async def queue_delete(self, queue: str) -> int:
        return self._channel.queue_delete(queue)

    async def basic_qos(self, prefetch_count: int = 0) -> None:
        self._channel.basic_qos(prefetch_count)

    async def basic_publish(
        self, body: bytes, *, exchange: str = "", routing_key: str = ""
    ) -> None:
        self._channel.basic_publish(body, exchange=exchange, routing_key=routing_key)

    async def basic_get(self, queue: str, *, no_ack: bool = False) -> Message | None:
        return _message(self._channel.basic_get(queue, no_ack=no_ack))

    @asynccontextmanager
    async def basic_consume(self, queue: str) -> AsyncIterator[Consumer]:
        with self._channel.basic_consume(queue) as consumer:
            yield Consumer(consumer)

    @asynccontextmanager
    async def publisher(self, window: int = 1000) -> AsyncIterator[Publisher]:
        with self._channel.publisher(window) as publisher:
            yield Publisher(publisher)


@final
class Events:
    def __init__(self, events: amqp_blocking.RecoveryEvents) -> None:
        self._events = events

    def __aiter__(self) -> Events:
        return self

    async def __anext__(self) -> RecoveryEvent:
        event = self._events.get(WAIT)
        if event is None:  # the connection closed for good (or a hang: the caller says)
            raise StopAsyncIteration
        return event


@final
class Connection:
    def __init__(self, conn: amqp_blocking.Connection) -> None:
        self._conn = conn

    @property
    def recovery_state(self) -> RecoveryState:
        return self._conn.recovery_state

    @property
    def epoch(self) -> int:
        return self._conn.epoch

    @property
    def blocked(self) -> bool:
        return self._conn.blocked

    @property
    def is_closed(self) -> bool:
        return self._conn.is_closed

    @property
    def close_error(self) -> AMQPError | None:
        return self._conn.close_error

    async def open_channel(self) -> Channel:
        return Channel(self._conn.channel())

    def recovery_events(self) -> Events:
        return Events(self._conn.recovery_events())

    async def aclose(self) -> None:
        self._conn.close()


@asynccontextmanager
async def connect(
    url_or_params: str = DEFAULT_URL,
    *,
    connection_name: str | None = None,
    recovery: RecoveryPolicy | None = None,
) -> AsyncIterator[Connection]:
    with amqp_blocking.connect(
        url_or_params, connection_name=connection_name, recovery=recovery
    ) as conn:
        seen: list[RecoveryEvent] = []
        conn.on_recovery(seen.append)
        everything = conn.recovery_events()
        yield Connection(conn)
    # Closed: the iterator has ended; the callback, called on the I/O thread, saw the same.
    assert list(everything) == seen


@final
class _Pending(Generic[T]):
    def __init__(self, work: Callable[[], Awaitable[T]]) -> None:
        self._work = work
        self._outcome: list[T] = []
        self._error: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        async def run() -> None:
            self._outcome.append(await self._work())

        try:
            asyncio.run(run())
        except BaseException as exc:  # handed to result()
            self._error.append(exc)

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    async def result(self) -> T:
        self._thread.join(WAIT)
        assert not self._thread.is_alive(), "the background work did not end"
        if self._error:
            raise self._error[0]
        return self._outcome[0]


@final
class ThreadRuntime:
    """The scenarios' :class:`~tests.support.recovery_io_scenarios.Runtime` for the blocking
    facade: blocking calls are made directly, background work runs in a thread."""

    async def in_thread(self, function: Callable[[], T]) -> T:
        return function()

    @asynccontextmanager
    async def background(self, work: Callable[[], Awaitable[T]]) -> AsyncIterator[_Pending[T]]:
        pending = _Pending(work)
        pending._thread.start()
        yield pending
        await pending.result()

    async def settle(self) -> None:
        # Nothing tells when another thread waits: give it the time the old tests gave.
        await asyncio.sleep(0.2)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
