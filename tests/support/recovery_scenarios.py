"""Recovery scenarios written once against the client API the async adapters share (issue 28).

Each ``scenario_*(connect, url, fault)`` takes the adapter's ``connect``, a broker URL and the
fault to make: a plain function (it blocks its caller while, say, a private RabbitMQ node is
SIGKILLed and restarted) that returns the monotonic time at which the broker accepted
connections again, or None when the broker stayed up (a forced close).
:func:`scenario_backlog_faults` runs the same workload through several faults on one connection
to several endpoints (a cluster's nodes), its fault given the address of the node in use.
Scenarios use only that API and the standard library, so amqp_trio runs them natively and
amqp_asyncio with ``asyncio.run``; the caller bounds each with its framework's timeout. Queues
have unique names and are deleted at the end.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Final, Protocol

import attrs

from amqp_sansio import BasicProperties, FieldTable
from amqp_sansio.client import (
    PublishOutcomeUnknownError,
    Recovered,
    RecoveryEvent,
    RecoveryPolicy,
    StaleDeliveryError,
)

from . import stall_dump
from .rabbitmq_node import QueuesLostError
from .scenarios import unique

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
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
    async def queue_declare(
        self, queue: str = "", *, durable: bool = False, arguments: FieldTable | None = None
    ) -> object: ...
    async def queue_delete(self, queue: str) -> int: ...
    async def basic_qos(self, prefetch_count: int = 0) -> None: ...
    async def basic_get(self, queue: str) -> RecoveringMessage | None: ...
    def basic_consume(
        self, queue: str
    ) -> AbstractAsyncContextManager[AsyncIterator[RecoveringMessage]]: ...
    def publisher(self, window: int = 1000) -> AbstractAsyncContextManager[RecoveringPublisher]: ...


class RecoveringConnection(Protocol):
    @property
    def address(self) -> str: ...
    async def open_channel(self) -> RecoveringChannel: ...
    def recovery_events(self) -> AsyncIterator[RecoveryEvent]: ...


class RecoveringConnect(Protocol):
    def __call__(
        self,
        url_or_params: str | Sequence[str] = ...,
        *,
        connection_name: str | None = None,
        recovery: RecoveryPolicy | None = None,
    ) -> AbstractAsyncContextManager[RecoveringConnection]: ...


@attrs.define
class BacklogCounts:
    """What one run of :func:`scenario_backlog_fault` (or :func:`scenario_backlog_faults`)
    saw."""

    confirmed: int = 0
    unknown: int = 0
    duplicates: int = 0
    stale: int = 0
    dropped: int = 0
    unprocessed: int = 0
    #: From the time the fault returned (the broker accepting again, or a node's kill) to
    #: ``Recovered`` and to the next delivery, the longest of the faults' (None: the broker
    #: stayed up).
    recovered_after: float | None = None
    resumed_after: float | None = None
    #: The same per fault.
    recovered_times: list[float] = attrs.field(factory=list)
    resumed_times: list[float] = attrs.field(factory=list)
    #: Per fault: the node in use before it, and the one ``Recovered`` named (``host:port``).
    addresses: list[tuple[str, str]] = attrs.field(factory=list)


async def _publish(
    publisher: RecoveringPublisher, queue: str, idents: Sequence[int]
) -> list[tuple[int, RecoveringTicket]]:
    tickets = []
    for ident in idents:
        publisher.take_failures()  # the tickets carry the outcomes
        ticket = await publisher.publish(b"%d" % ident, routing_key=queue, properties=_PERSISTENT)
        tickets.append((ident, ticket))
    return tickets


async def again_if_the_broker_lost_the_queue(
    run: Callable[[], Awaitable[BacklogCounts]],
) -> BacklogCounts:
    """*run* a node-kill scenario, and once more when the node came back without the scenario's
    durable queue (:class:`~tests.support.rabbitmq_node.QueuesLostError`, raised by the
    scenario's ``recovered`` check, ``RabbitMQNode.check_kept``): RabbitMQ itself
    lost the scenario's queue and its confirmed messages, so that run says nothing about the
    client (it used to wait for them until the test's timeout). Lost twice in a row fails."""
    try:
        return await run()
    except QueuesLostError as exc:
        print(f"{exc}: running the scenario once more")
        return await run()


async def scenario_backlog_fault(
    connect: RecoveringConnect,
    url: str,
    fault: Callable[[str], float | None],
    *,
    recovered: Callable[[str], None] | None = None,
) -> BacklogCounts:
    """A durable queue of :data:`BACKLOG` persistent messages, a consumer with prefetch
    :data:`PREFETCH` that acked :data:`IN_HAND` of them, :data:`IN_FLIGHT` more published
    without waiting, then *fault* (given the connection's name). After ``Recovered`` the
    unknown outcomes are published again and the consumer takes everything: every confirmed
    message is processed at least once and none is left in the queue. *recovered* (if given) is
    called with the queue's name after ``Recovered``, before anything is published or acked on
    the new connection: it may check the broker kept the queue (and raise)."""
    return await scenario_backlog_faults(
        connect, url, lambda name, _address: fault(name), recovered=recovered
    )


async def scenario_backlog_faults(
    connect: RecoveringConnect,
    endpoints: str | Sequence[str],
    fault: Callable[[str, str], float | None],
    *,
    faults: int = 1,
    arguments: FieldTable | None = None,
    declared: Callable[[str], None] | None = None,
    recovered: Callable[[str], None] | None = None,
) -> BacklogCounts:
    """:func:`scenario_backlog_fault`'s workload, *faults* times on one connection to
    *endpoints*: each round a fresh backlog of :data:`BACKLOG` for the consumer (which goes on
    consuming), :data:`IN_HAND` taken, :data:`IN_FLIGHT` more without waiting, then *fault*
    given the connection's name and the address of the node in use (``host:port``); after
    ``Recovered`` the unknown outcomes are published again and every confirmed message is
    processed before the next round. The queue is declared with *arguments* (say a quorum
    queue), and *declared* (if given) is called with its name before the first publish;
    *recovered* (if given) with its name after each ``Recovered`` (see
    :func:`scenario_backlog_fault`)."""
    name = unique("recovery-scenario")
    queue = unique("recovery-backlog")
    policy = RecoveryPolicy(
        initial_delay=0.05, multiplier=1, jitter=0, max_duration=300, publish_wait=300
    )
    counts = BacklogCounts()
    received: set[int] = set()
    confirmed: set[int] = set()
    published = 0
    epoch: int | None = None  # the live connection's, once a recovery said it
    state = stall_dump.begin()  # what a timed-out test prints
    state.queue = queue
    state.received = received
    state.confirmed = confirmed

    async def take(consumer: AsyncIterator[RecoveringMessage], opened: float | None) -> None:
        message = await anext(consumer)
        if opened is not None and len(counts.resumed_times) < len(counts.recovered_times):
            counts.resumed_times.append(time.monotonic() - opened)
        ident = int(message.body)
        state.note(f"{ident}@{message.epoch}")
        if ident in received:
            counts.duplicates += 1
        received.add(ident)
        if epoch is not None:
            # a delivery received on the live connection is never refused
            assert message.epoch == epoch, (message.epoch, epoch)
        try:
            await message.ack()
        except StaleDeliveryError:
            counts.stale += 1

    async with connect(endpoints, connection_name=name, recovery=policy) as conn:
        state.conn = conn
        events = conn.recovery_events()
        ch = await conn.open_channel()
        state.channel = ch
        await ch.queue_declare(queue, durable=True, arguments=arguments)
        if declared is not None:
            declared(queue)
        await ch.basic_qos(PREFETCH)
        try:
            async with ch.publisher(window=1000) as publisher:
                pending = await _publish(publisher, queue, range(BACKLOG))
                published = BACKLOG
                async with ch.basic_consume(queue) as consumer:
                    state.consumer = consumer
                    for round_ in range(faults):
                        if round_:
                            more = range(published, published + BACKLOG)
                            pending += await _publish(publisher, queue, more)
                            published += BACKLOG
                        for _ in range(IN_HAND):
                            await take(consumer, None)
                        await publisher.wait_for_confirms()
                        more = range(published, published + IN_FLIGHT)
                        pending += await _publish(publisher, queue, more)
                        published += IN_FLIGHT
                        before = conn.address
                        state.published = published
                        state.phase = f"round {round_}: fault"
                        opened = fault(name, before)
                        state.phase = f"round {round_}: waiting for Recovered"
                        event = await anext(events)
                        state.note(repr(event))
                        while not isinstance(event, Recovered):
                            event = await anext(events)
                            state.note(repr(event))
                        state.phase = f"round {round_}: waiting for confirms"
                        epoch = event.epoch
                        counts.addresses.append((before, event.address))
                        if opened is not None:
                            counts.recovered_times.append(time.monotonic() - opened)
                        counts.dropped += event.dropped_deliveries
                        if recovered is not None:  # after the timing: it may take a second
                            recovered(queue)
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
                            state.published += len(again)
                        state.phase = f"round {round_}: consuming what was confirmed"
                        while not confirmed <= received:
                            await take(consumer, opened)
            state.phase = "basic_get of what is left"
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
    counts.recovered_after = max(counts.recovered_times, default=None)
    counts.resumed_after = max(counts.resumed_times, default=None)
    assert set(range(published)) <= confirmed
    return counts
