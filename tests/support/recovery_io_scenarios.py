"""Recovery's I/O, written once for the three adapters (issue 28): what each adapter does with
the sockets, timers and tasks the supervisor's decisions ask for. The decisions themselves
(backoff, give-up, endpoint order, restore order, unknown outcomes) are tested once, on a fake
clock, in tests/amqp_sansio/client/test_supervisor.py and test_recovery.py.

Each ``scenario_*(connect, runtime)`` takes the adapter's ``connect`` (``amqp_trio.connect``,
``amqp_asyncio.connect``, or tests/support/blocking_facade.py's over ``amqp_blocking``) and a
:class:`Runtime`: how the adapter's framework runs a blocking call (the broker's kill and
start), a piece of work beside the scenario (a publish that must wait), and lets that work
run until it waits. The scenarios use only the protocols below and the standard library; the
caller bounds each with its framework's timeout. Most start an embedded broker
(tests/support/restartable.py) and kill, pause or restart it; :func:`scenario_forced_closes`
closes the connection of a RabbitMQ at *url* with ``rabbitmqctl``.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Final, Protocol, TypeVar

import pytest

from amqp_sansio.client import (
    ConnectionClosedError,
    ConnectionForced,
    ConnectionLostError,
    HeartbeatTimeoutError,
    PublishOutcomeUnknownError,
    Recovered,
    RecoveryAttempt,
    RecoveryLost,
    RecoveryPolicy,
    RecoveryState,
    StaleDeliveryError,
)

from .rabbitmqctl import connection_pid, rabbitmqctl
from .restartable import RestartableBroker, restartable_broker
from .scenarios import unique

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
    from contextlib import AbstractAsyncContextManager

    from amqp_sansio import QueueDeclareOk
    from amqp_sansio.client import AMQPError, RecoveryEvent

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

POLICY: Final = RecoveryPolicy(initial_delay=0.1, multiplier=1, jitter=0, max_duration=60)
WAITING: Final = RecoveryPolicy(initial_delay=0.1, multiplier=1, jitter=0, publish_wait=30)


class Message(Protocol):
    @property
    def body(self) -> bytes: ...
    @property
    def epoch(self) -> int: ...

    async def ack(self, *, multiple: bool = False) -> None: ...


class Consumer(Protocol):
    def __aiter__(self) -> AsyncIterator[Message]: ...
    async def __anext__(self) -> Message: ...
    async def get(self, timeout: float | None = None) -> Message | None: ...


class Ticket(Protocol):
    @property
    def number(self) -> int: ...
    @property
    def error(self) -> AMQPError | None: ...


class Publisher(Protocol):
    @property
    def confirmed(self) -> int: ...
    @property
    def unknown(self) -> int: ...

    async def publish(self, body: bytes, *, routing_key: str = "") -> Ticket: ...
    async def wait_for_confirms(self) -> None: ...
    def take_failures(self) -> Sequence[AMQPError]: ...


class Channel(Protocol):
    async def queue_declare(
        self, queue: str = "", *, passive: bool = False, exclusive: bool = False
    ) -> QueueDeclareOk: ...
    async def queue_bind(self, queue: str, exchange: str) -> None: ...
    async def queue_delete(self, queue: str) -> int: ...
    async def basic_qos(self, prefetch_count: int = 0) -> None: ...
    async def basic_publish(
        self, body: bytes, *, exchange: str = "", routing_key: str = ""
    ) -> None: ...
    async def basic_get(self, queue: str, *, no_ack: bool = False) -> Message | None: ...
    def basic_consume(self, queue: str) -> AbstractAsyncContextManager[Consumer]: ...
    def publisher(self, window: int = 1000) -> AbstractAsyncContextManager[Publisher]: ...


class Connection(Protocol):
    @property
    def recovery_state(self) -> RecoveryState: ...
    @property
    def epoch(self) -> int: ...
    @property
    def blocked(self) -> bool: ...
    @property
    def is_closed(self) -> bool: ...
    @property
    def close_error(self) -> AMQPError | None: ...

    async def open_channel(self) -> Channel: ...
    def recovery_events(self) -> AsyncIterator[RecoveryEvent]: ...
    async def aclose(self) -> None: ...


class Connect(Protocol):
    def __call__(
        self,
        url_or_params: str = ...,
        *,
        connection_name: str | None = None,
        recovery: RecoveryPolicy | None = None,
    ) -> AbstractAsyncContextManager[Connection]: ...


class Pending(Protocol[T_co]):
    """Work started by :meth:`Runtime.background`."""

    @property
    def done(self) -> bool: ...
    async def result(self) -> T_co: ...


class Runtime(Protocol):
    """What the scenarios need of the adapter's framework."""

    async def in_thread(self, function: Callable[[], T]) -> T:
        """Run a blocking *function* (a broker's kill, start, or ``rabbitmqctl``) without
        stopping the connection's I/O."""
        ...

    def background(
        self, work: Callable[[], Awaitable[T]]
    ) -> AbstractAsyncContextManager[Pending[T]]:
        """Run *work* beside the block; leaving the block waits for it."""
        ...

    async def settle(self) -> None:
        """Let the background work run until it waits for something (a frame, a timer)."""
        ...

    async def sleep(self, seconds: float) -> None: ...


def _state(conn: Connection) -> RecoveryState:
    """A call, so mypy does not narrow one reading of the property to the next."""
    return conn.recovery_state


async def _recovered(events: AsyncIterator[RecoveryEvent]) -> Recovered:
    """The next ``Recovered``, after the attempts refused while the broker was down."""
    event = await anext(events)
    while isinstance(event, RecoveryAttempt):
        event = await anext(events)
    assert isinstance(event, Recovered), event
    return event


# --- against the embedded broker, killed and restarted on the same port ------------------------


async def scenario_recovers_after_the_broker_restarts(connect: Connect, rt: Runtime) -> None:
    """Channels and consumer iterators outlive the connection, the topology comes back (a
    server-named queue under a new name), and a delivery of the lost connection cannot be
    settled on the new one."""
    with restartable_broker() as broker:
        async with connect(broker.url, recovery=POLICY) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            await ch.queue_declare("jobs")
            server_named = (await ch.queue_declare("", exclusive=True)).queue
            await ch.queue_bind(server_named, "amq.fanout")
            async with ch.basic_consume("jobs") as jobs, ch.basic_consume(server_named) as fanout:
                await ch.basic_publish(b"before", routing_key="jobs")
                before = await anext(jobs)
                assert before.body == b"before"
                assert before.epoch == conn.epoch == 0

                await rt.in_thread(broker.kill)
                lost = await anext(events)
                assert isinstance(lost, RecoveryLost)
                assert isinstance(lost.cause, ConnectionLostError)
                assert _state(conn) is RecoveryState.RECOVERING
                await rt.in_thread(broker.start)
                event = await _recovered(events)
                assert _state(conn) is RecoveryState.OPEN
                assert conn.epoch == event.epoch == 1
                assert event.renamed_queues[server_named] != server_named

                # The delivery of the lost connection: refused locally, never sent.
                with pytest.raises(StaleDeliveryError, match="epoch 0"):
                    await before.ack()

                # The old channel and consumer iterators carry on.
                await ch.basic_publish(b"after", routing_key="jobs")
                await ch.basic_publish(b"to all", exchange="amq.fanout")
                after = await anext(jobs)
                assert (after.body, after.epoch) == (b"after", 1)
                await after.ack()
                assert (await anext(fanout)).body == b"to all"
                ok = await ch.queue_declare("jobs", passive=True)
                assert ok.consumer_count == 1
            assert not conn.is_closed
        assert _state(conn) is RecoveryState.CLOSED
        assert [e async for e in events] == []  # ended with the connection


async def scenario_without_a_policy_a_lost_connection_stays_closed(
    connect: Connect, rt: Runtime
) -> None:
    with restartable_broker() as broker:
        async with connect(broker.url) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            await rt.in_thread(broker.kill)
            # The events end when the connection does: none came, it ended by itself.
            assert [e async for e in events] == []
            assert isinstance(conn.close_error, ConnectionLostError)
            with pytest.raises(ConnectionLostError):
                await ch.queue_declare("q")
            assert _state(conn) is RecoveryState.CLOSED


async def scenario_a_publish_during_recovery_fails_fast_or_waits(
    connect: Connect, rt: Runtime
) -> None:
    fail_fast = RecoveryPolicy(initial_delay=0.1, multiplier=1, jitter=0, publish_wait=0)
    with restartable_broker() as broker:
        async with connect(broker.url, recovery=fail_fast) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            await rt.in_thread(broker.kill)
            assert isinstance(await anext(events), RecoveryLost)
            with pytest.raises(ConnectionLostError, match=r"recovering \(publish_wait is 0\)"):
                await ch.basic_publish(b"x", routing_key="q")
            await rt.in_thread(broker.start)
            await _recovered(events)
            await ch.basic_publish(b"x", routing_key="q")

        async with connect(broker.url, recovery=WAITING) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            await ch.queue_declare("waits")
            await rt.in_thread(broker.kill)
            assert isinstance(await anext(events), RecoveryLost)
            async with rt.background(
                lambda: ch.basic_publish(b"waited", routing_key="waits")
            ) as publish:
                await rt.settle()
                assert not publish.done  # waiting for the connection to come back
                await rt.in_thread(broker.start)
                await publish.result()
            ok = await ch.queue_declare("waits", passive=True)
            assert ok.message_count == 1


async def scenario_a_publish_waiting_for_the_window_waits_for_recovery(
    connect: Connect, rt: Runtime
) -> None:
    # The window is full when the connection is lost: the publish that waited for room is
    # a publish during recovery (it waits, under publish_wait), not a failure of the old
    # connection.
    with restartable_broker() as broker:
        async with connect(broker.url, recovery=WAITING) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            await ch.queue_declare("room")
            async with ch.publisher(window=1) as publisher:
                await rt.in_thread(broker.pause)  # no confirm comes
                first = await publisher.publish(b"first", routing_key="room")
                async with rt.background(
                    lambda: publisher.publish(b"second", routing_key="room")
                ) as second:
                    await rt.settle()
                    assert not second.done  # waiting for room
                    await rt.in_thread(broker.kill)
                    assert isinstance(await anext(events), RecoveryLost)
                    await rt.settle()
                    assert not second.done  # still waiting
                    await rt.in_thread(broker.start)
                    ticket = await second.result()
                await publisher.wait_for_confirms()
                assert isinstance(first.error, PublishOutcomeUnknownError)
                assert ticket.error is None  # confirmed by the new connection
                publisher.take_failures()
            ok = await ch.queue_declare("room", passive=True)
            assert ok.message_count == 1


async def scenario_a_publish_the_broker_blocked_waits_for_recovery(
    connect: Connect, rt: Runtime
) -> None:
    # The broker blocks publishers (a 1-octet memory watermark) when the connection is lost:
    # the publish that waited for it to unblock is a publish during recovery.
    broker = RestartableBroker()
    broker.start("--memory-high-watermark-bytes", "1")
    try:
        async with connect(broker.url, recovery=WAITING) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            await ch.queue_declare("held")
            async with ch.publisher() as publisher:
                await publisher.publish(b"first", routing_key="held")  # the alarm's
                while not conn.blocked:
                    await rt.sleep(0.01)
                async with rt.background(
                    lambda: publisher.publish(b"held", routing_key="held")
                ) as held:
                    await rt.settle()
                    assert not held.done  # blocked
                    await rt.in_thread(broker.kill)
                    assert isinstance(await anext(events), RecoveryLost)
                    await rt.settle()
                    assert not held.done  # still waiting
                    await rt.in_thread(broker.start)  # no alarm now
                    ticket = await held.result()
                await publisher.wait_for_confirms()
                assert ticket.error is None
            ok = await ch.queue_declare("held", passive=True)
            assert ok.message_count == 1
    finally:
        broker.kill()


async def scenario_endpoints_are_tried_in_turn_and_what_waits_is_bounded(
    connect: Connect, rt: Runtime
) -> None:
    """The adapter dials the endpoint each attempt names (a refused one is an attempt), and
    counts a publish's octets against ``publish_buffer``."""
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"amqp://guest:guest@127.0.0.1:{sock.getsockname()[1]}/"
    with restartable_broker() as broker:
        policy = RecoveryPolicy(
            initial_delay=0.05,
            multiplier=1,
            jitter=0,
            endpoints=[dead, broker.url],
            publish_buffer=10,
            max_duration=60,  # not a count of attempts: the restart may take a while
        )
        async with connect(broker.url, recovery=policy) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            await rt.in_thread(broker.kill)
            assert isinstance(await anext(events), RecoveryLost)
            with pytest.raises(ConnectionLostError, match="publish_buffer is full"):
                await ch.basic_publish(b"eleven byte", routing_key="q")
            await rt.in_thread(broker.start)
            event = await anext(events)
            while isinstance(event, RecoveryAttempt):
                if event.attempt % 2:
                    assert dead.endswith(f"{event.url}/")  # odd attempts: the first endpoint
                event = await anext(events)
            assert isinstance(event, Recovered)
            assert event.attempt % 2 == 0  # the second endpoint, the live one
            await ch.basic_publish(b"eleven byte", routing_key="q")


async def scenario_a_heartbeat_timeout_starts_recovery(connect: Connect, rt: Runtime) -> None:
    with restartable_broker() as broker:
        async with connect(f"{broker.url}&heartbeat=1", recovery=POLICY) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            await ch.queue_declare("beats")
            await rt.in_thread(broker.pause)
            lost = await anext(events)
            assert isinstance(lost, RecoveryLost)
            assert isinstance(lost.cause, HeartbeatTimeoutError)
            await rt.in_thread(broker.resume)
            await _recovered(events)
            ok = await ch.queue_declare("beats", passive=True)
            assert ok.queue == "beats"


async def scenario_close_during_recovery_gives_up(connect: Connect, rt: Runtime) -> None:
    with restartable_broker() as broker:
        async with connect(broker.url, recovery=POLICY) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            queue = (await ch.queue_declare("", exclusive=True)).queue
            async with ch.basic_consume(queue) as consumer:
                await rt.in_thread(broker.kill)
                assert isinstance(await anext(events), RecoveryLost)
                await conn.aclose()
                assert _state(conn) is RecoveryState.CLOSED
                with pytest.raises(ConnectionClosedError):
                    await anext(consumer)


async def _publishes_pending_at_the_loss(connect: Connect, rt: Runtime, republish: bool) -> None:
    """Publishes pending at the loss are published again (``republish_unknown``) or end
    unknown; each ticket gets its outcome."""
    policy = RecoveryPolicy(initial_delay=0.1, multiplier=1, jitter=0, republish_unknown=republish)
    with restartable_broker() as broker:
        async with connect(broker.url, recovery=policy) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            await ch.queue_declare("pending")
            async with ch.publisher(window=100) as pub:
                await pub.publish(b"0", routing_key="pending")
                await pub.wait_for_confirms()
                # A stopped broker reads nothing: these reach its socket, never its queue.
                await rt.in_thread(broker.pause)
                tickets = [
                    await pub.publish(str(n).encode(), routing_key="pending") for n in range(1, 21)
                ]
                await rt.in_thread(broker.kill)
                assert isinstance(await anext(events), RecoveryLost)
                await rt.in_thread(broker.start)
                event = await _recovered(events)
                await pub.wait_for_confirms()
                if republish:
                    assert (event.republished, event.unknown_publishes) == (20, 0)
                    assert [t.error for t in tickets] == [None] * 20
                    assert [t.number for t in tickets] == list(range(2, 22))  # as first sent
                    assert (pub.confirmed, pub.unknown) == (21, 0)
                else:
                    assert (event.republished, event.unknown_publishes) == (0, 20)
                    assert all(isinstance(t.error, PublishOutcomeUnknownError) for t in tickets)
                    assert (pub.confirmed, pub.unknown) == (1, 20)
                    pub.take_failures()
            # The broker restarted empty: only what was published again is in the queue, in
            # the order it was first published, and once.
            bodies = []
            while (message := await ch.basic_get("pending", no_ack=True)) is not None:
                bodies.append(message.body)
            assert bodies == ([str(n).encode() for n in range(1, 21)] if republish else [])


async def scenario_publishes_pending_at_the_loss_are_republished(
    connect: Connect, rt: Runtime
) -> None:
    await _publishes_pending_at_the_loss(connect, rt, republish=True)


async def scenario_publishes_pending_at_the_loss_are_unknown(connect: Connect, rt: Runtime) -> None:
    await _publishes_pending_at_the_loss(connect, rt, republish=False)


#: The scenarios against the embedded broker, for the runners to parametrize over.
SCENARIOS: Final[Sequence[Callable[[Connect, Runtime], Awaitable[None]]]] = (
    scenario_recovers_after_the_broker_restarts,
    scenario_without_a_policy_a_lost_connection_stays_closed,
    scenario_a_publish_during_recovery_fails_fast_or_waits,
    scenario_a_publish_waiting_for_the_window_waits_for_recovery,
    scenario_a_publish_the_broker_blocked_waits_for_recovery,
    scenario_endpoints_are_tried_in_turn_and_what_waits_is_bounded,
    scenario_a_heartbeat_timeout_starts_recovery,
    scenario_close_during_recovery_gives_up,
    scenario_publishes_pending_at_the_loss_are_republished,
    scenario_publishes_pending_at_the_loss_are_unknown,
)


def scenario_id(scenario: object) -> str:
    name = getattr(scenario, "__name__", "")
    return name.removeprefix("scenario_")


# --- against RabbitMQ ---------------------------------------------------------------------------

#: Forced closes: each costs two rabbitmqctl calls (find the connection, close it), about a
#: second of CPU each; eight per adapter in make test, `bench/recovery.py --forced-closes`
#: does a hundred.
CLOSES: Final = 8
MESSAGES: Final = 2000


def _close_connection(name: str) -> None:
    rabbitmqctl("close_connection", connection_pid(name), "test")


async def scenario_forced_closes(connect: Connect, rt: Runtime, url: str) -> None:
    """The connection, found by its name, is closed with ``rabbitmqctl close_connection``
    (320) again and again during pipelined confirmed publishing and consuming. No confirmed
    message is lost, the consumer resumes on every new connection, and the publishes whose
    outcome the closes made unknown are counted and published again."""
    name = unique("recovery")
    queue = unique("recovery-q")
    policy = RecoveryPolicy(initial_delay=0.05, multiplier=1, jitter=0, max_duration=60)
    received: set[int] = set()
    stale = 0
    stop = False
    progress = 0
    async with connect(url, connection_name=name, recovery=policy) as conn:
        events = conn.recovery_events()
        pub_ch = await conn.open_channel()
        sub_ch = await conn.open_channel()
        await pub_ch.queue_declare(queue)
        await sub_ch.basic_qos(100)

        async def consume() -> None:
            nonlocal stale
            # It stops (and cancels its consumer) before its queue goes, else the broker
            # cancels it; the short get lets it see the stop.
            async with sub_ch.basic_consume(queue) as consumer:
                while not stop:
                    message = await consumer.get(0.1)
                    if message is None:
                        continue
                    received.add(int(message.body))
                    try:
                        await message.ack()
                    except StaleDeliveryError:
                        stale += 1  # handed out before a close: the broker redelivers it

        async def close_repeatedly() -> list[Recovered]:
            recoveries: list[Recovered] = []
            for _ in range(CLOSES):
                mark = progress
                while progress < mark + MESSAGES // (CLOSES * 2):
                    await rt.sleep(0.01)
                await rt.in_thread(lambda: _close_connection(name))
                lost = await anext(events)
                assert isinstance(lost, RecoveryLost)
                assert isinstance(lost.cause, ConnectionForced)
                recovered = await anext(events)
                assert isinstance(recovered, Recovered), recovered
                recoveries.append(recovered)
            return recoveries

        confirmed: set[int] = set()
        unknown = 0
        pending = list(range(MESSAGES))
        async with (
            rt.background(consume),
            rt.background(close_repeatedly) as closer,
            pub_ch.publisher(window=50) as publisher,
        ):
            try:
                while pending:
                    tickets: list[tuple[int, Ticket]] = []
                    for ident in pending:
                        # Each ticket carries its outcome: the publisher's kept copies are
                        # dropped, or a close with a full window of unknown outcomes in flight
                        # would pile up `window` of them and the next publish would raise them.
                        publisher.take_failures()
                        tickets.append(
                            (ident, await publisher.publish(b"%d" % ident, routing_key=queue))
                        )
                        progress += 1
                    await publisher.wait_for_confirms()
                    pending = []
                    for ident, ticket in tickets:
                        if (error := ticket.error) is None:
                            confirmed.add(ident)
                        else:
                            assert isinstance(error, PublishOutcomeUnknownError), error
                            unknown += 1
                            pending.append(ident)  # at least once: publish it again
                    publisher.take_failures()
                    if not pending and not closer.done:
                        pending = [MESSAGES + len(confirmed)]  # keep traffic until the closes end
                recoveries = await closer.result()
                assert len(recoveries) == CLOSES
                assert publisher.unknown == unknown
                assert [r.epoch for r in recoveries] == list(range(1, CLOSES + 1))
                assert sum(r.unknown_publishes for r in recoveries) == unknown
                while not confirmed <= received:
                    await rt.sleep(0.05)
            finally:
                stop = True  # the consumer leaves, whatever happened
        await pub_ch.queue_delete(queue)
    assert set(range(MESSAGES)) <= confirmed
    print(f"{CLOSES} forced closes: {unknown} unknown outcomes republished, {stale} stale acks")
