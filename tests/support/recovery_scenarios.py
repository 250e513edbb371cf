"""Recovery scenarios written once against the client API the async adapters share (issue 28).

Each ``scenario_*(connect, url, fault)`` takes the adapter's ``connect``, a broker URL and the
fault to make: a plain function (it blocks its caller while, say, a private RabbitMQ node is
SIGKILLed and restarted) that returns the monotonic time at which the broker accepted
connections again, or None when the broker stayed up (a forced close). Scenarios use only that
API and the standard library, so amqp_trio runs them natively and amqp_asyncio with
``asyncio.run``; the caller bounds each with its framework's timeout. Queues have unique names
and are deleted at the end.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Final, Protocol

import attrs

from amqp_sansio import BasicProperties
from amqp_sansio.client import (
    PublishOutcomeUnknownError,
    Recovered,
    RecoveryEvent,
    RecoveryPolicy,
    StaleDeliveryError,
)

from .scenarios import unique

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Sequence
    from contextlib import AbstractAsyncContextManager

    from amqp_sansio.client import AMQPError

#: A backlog of at least the prefetch when the fault comes: the issue's stall.
PREFETCH: Final = 50
BACKLOG: Final = 300
IN_HAND: Final = 5
#: Published without waiting for confirms just before the fault: their outcomes are unknown.
IN_FLIGHT: Final = 100
_PERSISTENT: Final = BasicProperties(delivery_mode=2)


class RecoveringMessage(Protocol):
    @property
    def body(self) -> bytes: ...
    @property
    def epoch(self) -> int: ...

    async def ack(self, *, multiple: bool = False) -> None: ...


class RecoveringTicket(Protocol):
    @property
    def done(self) -> bool: ...
    @property
    def error(self) -> AMQPError | None: ...


class RecoveringPublisher(Protocol):
    async def publish(
        self, body: bytes, *, routing_key: str = "", properties: BasicProperties | None = None
    ) -> RecoveringTicket: ...
    async def wait_for_confirms(self) -> None: ...
    def take_failures(self) -> Sequence[AMQPError]: ...


class RecoveringChannel(Protocol):
    async def queue_declare(self, queue: str = "", *, durable: bool = False) -> object: ...
    async def queue_delete(self, queue: str) -> int: ...
    async def basic_qos(self, prefetch_count: int = 0) -> None: ...
    async def basic_get(self, queue: str) -> RecoveringMessage | None: ...
    def basic_consume(
        self, queue: str
    ) -> AbstractAsyncContextManager[AsyncIterator[RecoveringMessage]]: ...
    def publisher(self, window: int = 1000) -> AbstractAsyncContextManager[RecoveringPublisher]: ...


class RecoveringConnection(Protocol):
    async def open_channel(self) -> RecoveringChannel: ...
    def recovery_events(self) -> AsyncIterator[RecoveryEvent]: ...


class RecoveringConnect(Protocol):
    def __call__(
        self,
        url_or_params: str = ...,
        *,
        connection_name: str | None = None,
        recovery: RecoveryPolicy | None = None,
    ) -> AbstractAsyncContextManager[RecoveringConnection]: ...


@attrs.define
class BacklogCounts:
    """What one run of :func:`scenario_backlog_fault` saw."""

    confirmed: int = 0
    unknown: int = 0
    duplicates: int = 0
    stale: int = 0
    dropped: int = 0
    unprocessed: int = 0
    #: From the broker accepting again to ``Recovered`` and to the next delivery (None: the
    #: broker stayed up).
    recovered_after: float | None = None
    resumed_after: float | None = None


async def _publish(
    publisher: RecoveringPublisher, queue: str, idents: Sequence[int]
) -> list[tuple[int, RecoveringTicket]]:
    tickets = []
    for ident in idents:
        publisher.take_failures()  # the tickets carry the outcomes
        ticket = await publisher.publish(b"%d" % ident, routing_key=queue, properties=_PERSISTENT)
        tickets.append((ident, ticket))
    return tickets


async def scenario_backlog_fault(
    connect: RecoveringConnect, url: str, fault: Callable[[str], float | None]
) -> BacklogCounts:
    """A durable queue of :data:`BACKLOG` persistent messages, a consumer with prefetch
    :data:`PREFETCH` that acked :data:`IN_HAND` of them, :data:`IN_FLIGHT` more published
    without waiting, then *fault* (given the connection's name). After ``Recovered`` the
    unknown outcomes are published again and the consumer takes everything: every confirmed
    message is processed at least once and none is left in the queue."""
    name = unique("recovery-scenario")
    queue = unique("recovery-backlog")
    policy = RecoveryPolicy(
        initial_delay=0.05, multiplier=1, jitter=0, max_duration=300, publish_wait=300
    )
    counts = BacklogCounts()
    received: set[int] = set()
    confirmed: set[int] = set()
    async with connect(url, connection_name=name, recovery=policy) as conn:
        events = conn.recovery_events()
        ch = await conn.open_channel()
        await ch.queue_declare(queue, durable=True)
        await ch.basic_qos(PREFETCH)
        try:
            async with ch.publisher(window=1000) as publisher:
                pending = await _publish(publisher, queue, range(BACKLOG))
                async with ch.basic_consume(queue) as consumer:
                    for _ in range(IN_HAND):
                        message = await anext(consumer)
                        received.add(int(message.body))
                        await message.ack()
                    await publisher.wait_for_confirms()
                    pending += await _publish(publisher, queue, range(BACKLOG, BACKLOG + IN_FLIGHT))
                    opened = fault(name)
                    event = await anext(events)
                    while not isinstance(event, Recovered):
                        event = await anext(events)
                    if opened is not None:
                        counts.recovered_after = time.monotonic() - opened
                    counts.dropped = event.dropped_deliveries
                    while pending:
                        await publisher.wait_for_confirms()
                        again = []
                        for ident, ticket in pending:
                            assert ticket.done
                            if ticket.error is None:
                                confirmed.add(ident)
                            else:
                                assert isinstance(ticket.error, PublishOutcomeUnknownError)
                                counts.unknown += 1
                                again.append(ident)
                        pending = await _publish(publisher, queue, again)
                    while not confirmed <= received:
                        message = await anext(consumer)
                        if opened is not None and counts.resumed_after is None:
                            counts.resumed_after = time.monotonic() - opened
                        ident = int(message.body)
                        if ident in received:
                            counts.duplicates += 1
                        received.add(ident)
                        # a delivery received on the live connection is never refused
                        assert message.epoch == event.epoch, (message.epoch, event.epoch)
                        try:
                            await message.ack()
                        except StaleDeliveryError:
                            counts.stale += 1
            # What the queue still holds once the consumer left: duplicates of processed
            # messages (republished unknown outcomes), never a message nobody processed.
            while (left := await ch.basic_get(queue)) is not None:
                if int(left.body) in received:
                    counts.duplicates += 1
                else:
                    counts.unprocessed += 1
                await left.ack()
        finally:
            await ch.queue_delete(queue)
    counts.confirmed = len(confirmed)
    assert set(range(BACKLOG + IN_FLIGHT)) <= confirmed
    return counts
