"""How fast a consumer resumes after its broker restarts: the time from the broker accepting
connections again to the first delivery to the consumer iterator made before the restart; and,
with ``--forced-closes N``, what N forced closes cost a pipelined confirmed workload.

The broker is the embedded one (``python -m amqp_broker``) in a subprocess, SIGKILLed and started
again on the same port; it forgets everything, so the client must declare the queue and consume
again by itself. A separate publisher connects once the port accepts, declares the same queue
and publishes one message. Every client retries at the same fixed interval (``--interval``;
aio-pika's ``connect_robust`` waits 5 s by default), so the figure is about half the interval
plus the reconnection itself.

Forced closes (``--forced-closes N``, issue 17): against RabbitMQ (``--url``, default
``$AMQP_URL`` or the local one), each adapter publishes with confirms through a publisher
(window 50, at most ``--rate`` publishes a second, 1000 by default: the broker is shared) and
consumes with acks (prefetch 100) on one connection, while ``rabbitmqctl
close_connection`` closes that connection (found by its connection name) N times, each after
``--gap`` more publishes and once the previous recovery finished. A publish whose outcome a close
made unknown is published again (at least once). Printed per adapter: confirmed messages that
never arrived (must be 0), unknown outcomes, stale settles (acks refused because their delivery
came before a close; the broker redelivers those), recoveries, wall time. Every close costs two
rabbitmqctl calls, about a second of CPU each.

Node kills (``--node-kills N``, issue 28): the same workload on a durable queue with persistent
messages against a private RabbitMQ node (``tests/support/rabbitmq_node.py``, never the shared
one), SIGKILLed and started again on its port N times per adapter. Printed per adapter: confirmed
messages lost, messages left in the queue once the consumer went idle (unprocessed), duplicate
deliveries, unknown outcomes, stale settles, and from the port opening again the time to
``Recovered`` and to the consumer's next delivery (median and max).

Usage: ``.venv/bin/python bench/recovery.py [--rounds 10] [--interval 0.5]``, or
``.venv/bin/python bench/recovery.py --forced-closes [N] [--gap 50] [--rate 1000] [--clients trio]``
or ``.venv/bin/python bench/recovery.py --node-kills N [--gap 50] [--clients trio]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol, final

import trio

import amqp_asyncio
import amqp_blocking
import amqp_trio
from amqp_sansio.client import (
    AMQPError,
    BasicProperties,
    PublishOutcomeUnknownError,
    Recovered,
    RecoveryEvent,
    RecoveryPolicy,
    StaleDeliveryError,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from amqp_sansio import FieldTable

QUEUE: Final = "bench-recovery"
WAIT: Final = 30.0
ROOT: Final = Path(__file__).resolve().parent.parent
DEFAULT_URL: Final = "amqp://guest:guest@127.0.0.1:5672/"


class Broker:
    """The embedded broker in a subprocess, killed and started again on one port."""

    def __init__(self) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/?connection_timeout=5000"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        """Start it; returns the monotonic time at which it first accepted a connection."""
        process = subprocess.Popen(
            [sys.executable, "-m", "amqp_broker", "--port", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=1),
            ):
                self.process = process
                return time.monotonic()
            time.sleep(0.002)
        process.kill()
        raise RuntimeError("the broker did not start")

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


def publish_one(url: str) -> None:
    """The publisher: declare the queue (as the consumer does) and publish one message."""
    with amqp_blocking.connect(url) as conn, conn.channel() as ch:
        ch.queue_declare(QUEUE)
        ch.basic_publish(b"after", routing_key=QUEUE)


def restart(broker: Broker) -> float:
    """Kill, start again, publish; returns when the broker accepted connections again."""
    broker.kill()
    time.sleep(0.2)  # every client notices the loss and starts retrying
    accepted = broker.start()
    publish_one(broker.url)
    return accepted


# --- the clients ------------------------------------------------------------------------------


def run_asyncio(broker: Broker, rounds: int, policy: RecoveryPolicy) -> list[float]:
    async def main() -> list[float]:
        times: list[float] = []
        async with amqp_asyncio.connect(broker.url, recovery=policy) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            await ch.queue_declare(QUEUE)
            async with ch.basic_consume(QUEUE, no_ack=True) as consumer:
                for _ in range(rounds):
                    accepted = await asyncio.to_thread(restart, broker)
                    async with asyncio.timeout(WAIT):
                        await anext(consumer)
                    times.append(time.monotonic() - accepted)
                    while not isinstance(await anext(events), Recovered):
                        pass
        return times

    return asyncio.run(main())


def run_trio(broker: Broker, rounds: int, policy: RecoveryPolicy) -> list[float]:
    async def main() -> list[float]:
        times: list[float] = []
        async with amqp_trio.connect(broker.url, recovery=policy) as conn:
            events = conn.recovery_events()
            ch = await conn.open_channel()
            await ch.queue_declare(QUEUE)
            async with ch.basic_consume(QUEUE, no_ack=True) as consumer:
                for _ in range(rounds):
                    accepted = await trio.to_thread.run_sync(restart, broker)
                    with trio.fail_after(WAIT):
                        await anext(consumer)
                    times.append(time.monotonic() - accepted)
                    while not isinstance(await anext(events), Recovered):
                        pass
        return times

    return trio.run(main)


def run_blocking(broker: Broker, rounds: int, policy: RecoveryPolicy) -> list[float]:
    times: list[float] = []
    with amqp_blocking.connect(broker.url, recovery=policy) as conn:
        events = conn.recovery_events()
        ch = conn.channel()
        ch.queue_declare(QUEUE)
        with ch.basic_consume(QUEUE, no_ack=True) as consumer:
            for _ in range(rounds):
                accepted = restart(broker)
                if consumer.get(WAIT) is None:
                    raise RuntimeError("no delivery after the restart")
                times.append(time.monotonic() - accepted)
                event = events.get(WAIT)
                while event is not None and not isinstance(event, Recovered):
                    event = events.get(WAIT)
    return times


def run_aio_pika(broker: Broker, rounds: int, interval: float) -> list[float]:
    import aio_pika

    async def main() -> list[float]:
        times: list[float] = []
        connection = await aio_pika.connect_robust(broker.url, reconnect_interval=interval)
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(QUEUE)
            async with queue.iterator(no_ack=True) as messages:
                for _ in range(rounds):
                    accepted = await asyncio.to_thread(restart, broker)
                    async with asyncio.timeout(WAIT):
                        await anext(messages)
                    times.append(time.monotonic() - accepted)
        return times

    return asyncio.run(main())


# --- forced closes ------------------------------------------------------------------------------

#: Publishes in flight at once (the publisher's window) and new ones per batch.
WINDOW: Final = 50
#: Messages published before the closes start; then batches of WINDOW until they end.
FIRST_BATCH: Final = 2000
#: The consumer is done once it had nothing for this long after the last confirmed message.
IDLE: Final = 1.0
#: How long a consumer waits for a delivery: longer than a node restart under load.
RESTART_WAIT: Final = 300.0


def close_connection(connection_name: str) -> None:
    """``rabbitmqctl close_connection`` on the connection with this name, with the tests'
    helpers (shared rather than copied)."""
    sys.path.insert(0, str(ROOT))
    try:
        from tests.support.rabbitmqctl import connection_pid, rabbitmqctl
    finally:
        sys.path.remove(str(ROOT))
    rabbitmqctl("close_connection", connection_pid(connection_name), "bench")


class _Ticket(Protocol):
    @property
    def done(self) -> bool: ...
    @property
    def error(self) -> AMQPError | None: ...


@final
class Workload:
    """What one adapter's run counts, and the closer: a thread that makes a fault (by default
    closes the connection named :attr:`name`) each time :attr:`published` grew by *gap*, once
    the previous recovery ended. A fault that restarts the broker returns when its port
    opened again, from which the consumer's resume is timed."""

    def __init__(
        self,
        closes: int,
        gap: int,
        rate: float,
        fault: Callable[[str], float | None] = lambda name: close_connection(name),
        *,
        durable: bool = False,
        arguments: FieldTable | None = None,
    ) -> None:
        self.name = f"bench-recovery-{uuid.uuid4().hex[:12]}"
        self.queue = f"{self.name}-q"
        self.closes = closes
        self.gap = gap
        self.rate = rate
        self.fault = fault
        self.durable = durable
        #: The queue's arguments (``x-queue-type`` for a quorum queue).
        self.arguments = arguments
        #: The connection's ``address`` once a runner connected (``host:port``).
        self.where: Callable[[], str] = lambda: ""
        #: Per fault: the node in use before it and the one ``Recovered`` named.
        self.moves: list[tuple[str, str]] = []
        self._before = ""
        # persistent messages on a durable queue survive a kill -9 of the node once confirmed
        self.properties = BasicProperties(delivery_mode=2) if durable else None
        self.started = time.monotonic()
        self.published = 0
        self.confirmed: set[int] = set()
        self.received: set[int] = set()
        self.deliveries = 0
        self.last_delivery = time.monotonic()
        self.unknown = 0
        self.stale = 0
        self.left = 0
        self.recoveries: list[Recovered] = []
        # Per fault, when its port opened (None: the broker stayed up), when Recovered came and
        # when the consumer's next delivery came. Kept apart and paired by index at the end: a
        # client can recover before the restart's probe saw the port open (the probe polls),
        # and then the fault has not returned yet when Recovered comes.
        self.port_opens: list[float | None] = []
        self.recovered_at: list[float] = []
        self.resumed_at: list[float] = []
        self.next_ident = FIRST_BATCH
        self._recovered = threading.Semaphore(0)
        self.closing = threading.Thread(target=self._close_repeatedly, daemon=True)
        self.closer_error: BaseException | None = None

    def policy(self) -> RecoveryPolicy:
        # a node restart under load takes tens of seconds; a forced close far less
        limit = 300 if self.durable else 60
        return RecoveryPolicy(
            initial_delay=0.05, multiplier=1, jitter=0, max_duration=limit, publish_wait=limit
        )

    def on_event(self, event: RecoveryEvent) -> None:
        if isinstance(event, Recovered):
            self.recovered_at.append(time.monotonic())
            self.recoveries.append(event)
            self.moves.append((self._before, event.address))
            self._recovered.release()

    def record(self, ident: int) -> None:
        """The consumer got message *ident*; the first delivery after a restart times the
        resume."""
        now = time.monotonic()
        if len(self.resumed_at) < len(self.recovered_at):
            self.resumed_at.append(now)
        self.deliveries += 1
        self.last_delivery = now
        self.received.add(ident)

    def finished(self, deadline: float) -> bool:
        """Every confirmed message arrived and the consumer has had nothing for a while (so
        redeliveries are in), or the deadline passed."""
        now = time.monotonic()
        if now > deadline:
            return True
        return self.all_received() and now - self.last_delivery > IDLE

    def _close_repeatedly(self) -> None:
        try:
            for done in range(self.closes):
                mark = self.published
                while self.published < mark + self.gap:
                    time.sleep(0.01)
                self._before = self.where()
                self.port_opens.append(self.fault(self.name))
                if not self._recovered.acquire(timeout=300):
                    raise RuntimeError(f"no recovery after close {done + 1}")
        except BaseException as exc:
            self.closer_error = exc

    def _since_port_opened(self, times: Sequence[float]) -> list[float]:
        # 0 when the client was back before the probe saw the port: within one probe interval
        return [
            max(0.0, at - opened)
            for opened, at in zip(self.port_opens, times, strict=False)
            if opened is not None
        ]

    @property
    def recovery_times(self) -> list[float]:
        """From each restart's port opening to ``Recovered``."""
        return self._since_port_opened(self.recovered_at)

    @property
    def resume_times(self) -> list[float]:
        """From each restart's port opening to the consumer's next delivery."""
        return self._since_port_opened(self.resumed_at)

    @property
    def closing_ended(self) -> bool:
        return not self.closing.is_alive()

    def settled(self, tickets: Sequence[tuple[int, _Ticket]]) -> list[int]:
        """Count a batch's outcomes; the publishes to make again (their outcome is unknown)."""
        again: list[int] = []
        for ident, ticket in tickets:
            if not ticket.done:
                raise RuntimeError(f"publish {ident} still pending after wait_for_confirms")
            if ticket.error is None:
                self.confirmed.add(ident)
            elif isinstance(ticket.error, PublishOutcomeUnknownError):
                self.unknown += 1
                again.append(ident)
            else:
                raise ticket.error
        return again

    def next_batch(self, again: list[int]) -> list[int]:
        """The unknown ones again, else new messages while the closes go on, else none."""
        if again or self.closing_ended:
            return again
        start, self.next_ident = self.next_ident, self.next_ident + WINDOW
        return list(range(start, self.next_ident))

    def pause(self) -> float:
        """Seconds to wait before the next publish, to publish at most :attr:`rate` a second
        (the broker is shared): spread out, so that publishes are in flight most of the time."""
        ahead = self.published / self.rate - (time.monotonic() - self.started)
        return ahead if ahead > 0.005 else 0.0

    def all_received(self) -> bool:
        return self.confirmed <= self.received

    def check_closer(self) -> None:
        if self.closer_error is not None:
            raise self.closer_error


def forced_asyncio(url: str | Sequence[str], work: Workload) -> None:
    async def main() -> None:
        async with amqp_asyncio.connect(
            url, connection_name=work.name, recovery=work.policy()
        ) as conn:
            work.where = lambda: conn.address
            pub_ch = await conn.open_channel()
            sub_ch = await conn.open_channel()
            await pub_ch.queue_declare(work.queue, durable=work.durable, arguments=work.arguments)
            try:
                await sub_ch.basic_qos(100)

                async def consume() -> None:
                    async with sub_ch.basic_consume(work.queue) as consumer:
                        async for message in consumer:
                            work.record(int(message.body))
                            try:
                                await message.ack()
                            except StaleDeliveryError:
                                work.stale += 1

                async def watch() -> None:
                    async for event in conn.recovery_events():
                        work.on_event(event)

                tasks = [asyncio.create_task(consume()), asyncio.create_task(watch())]
                work.closing.start()
                batch = list(range(FIRST_BATCH))
                async with pub_ch.publisher(window=WINDOW) as publisher:
                    while batch:
                        tickets: list[tuple[int, amqp_asyncio.PublishTicket]] = []
                        for ident in batch:
                            # tickets carry the outcomes; untaken failures would raise
                            publisher.take_failures()
                            ticket = await publisher.publish(
                                b"%d" % ident, routing_key=work.queue, properties=work.properties
                            )
                            tickets.append((ident, ticket))
                            work.published += 1
                            await asyncio.sleep(work.pause())
                        await publisher.wait_for_confirms()
                        batch = work.next_batch(work.settled(tickets))
                        publisher.take_failures()
                await asyncio.to_thread(work.closing.join)
                work.check_closer()
                deadline = time.monotonic() + WAIT
                while not work.finished(deadline):
                    await asyncio.sleep(0.05)
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            finally:
                async with conn.channel() as cleanup:
                    work.left = await cleanup.queue_delete(work.queue)

    asyncio.run(main())


def forced_trio(url: str | Sequence[str], work: Workload) -> None:
    async def main() -> None:
        async with amqp_trio.connect(
            url, connection_name=work.name, recovery=work.policy()
        ) as conn:
            work.where = lambda: conn.address
            pub_ch = await conn.open_channel()
            sub_ch = await conn.open_channel()
            await pub_ch.queue_declare(work.queue, durable=work.durable, arguments=work.arguments)
            try:
                await sub_ch.basic_qos(100)

                async def consume() -> None:
                    async with sub_ch.basic_consume(work.queue) as consumer:
                        async for message in consumer:
                            work.record(int(message.body))
                            try:
                                await message.ack()
                            except StaleDeliveryError:
                                work.stale += 1

                async def watch() -> None:
                    async for event in conn.recovery_events():
                        work.on_event(event)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(consume)
                    nursery.start_soon(watch)
                    work.closing.start()
                    batch = list(range(FIRST_BATCH))
                    async with pub_ch.publisher(window=WINDOW) as publisher:
                        while batch:
                            tickets: list[tuple[int, amqp_trio.PublishTicket]] = []
                            for ident in batch:
                                # tickets carry the outcomes; untaken failures would raise
                                publisher.take_failures()
                                ticket = await publisher.publish(
                                    b"%d" % ident,
                                    routing_key=work.queue,
                                    properties=work.properties,
                                )
                                tickets.append((ident, ticket))
                                work.published += 1
                                await trio.sleep(work.pause())
                            await publisher.wait_for_confirms()
                            batch = work.next_batch(work.settled(tickets))
                            publisher.take_failures()
                    await trio.to_thread.run_sync(work.closing.join)
                    work.check_closer()
                    deadline = time.monotonic() + WAIT
                    while not work.finished(deadline):
                        await trio.sleep(0.05)
                    nursery.cancel_scope.cancel()
            finally:
                with trio.CancelScope(shield=True):
                    async with conn.channel() as cleanup:
                        work.left = await cleanup.queue_delete(work.queue)

    trio.run(main)


def forced_blocking(url: str | Sequence[str], work: Workload) -> None:
    with amqp_blocking.connect(url, connection_name=work.name, recovery=work.policy()) as conn:
        work.where = lambda: conn.address
        conn.on_recovery(work.on_event)
        pub_ch = conn.channel()
        sub_ch = conn.channel()
        pub_ch.queue_declare(work.queue, durable=work.durable, arguments=work.arguments)
        try:
            sub_ch.basic_qos(100)
            consumer = sub_ch.basic_consume(work.queue)

            def consume() -> None:
                while (message := consumer.get(RESTART_WAIT)) is not None:
                    work.record(int(message.body))
                    try:
                        message.ack()
                    except StaleDeliveryError:
                        work.stale += 1

            consuming = threading.Thread(target=consume, daemon=True)
            consuming.start()
            work.closing.start()
            batch = list(range(FIRST_BATCH))
            with pub_ch.publisher(window=WINDOW) as publisher:
                while batch:
                    tickets: list[tuple[int, amqp_blocking.PublishTicket]] = []
                    for ident in batch:
                        # tickets carry the outcomes; untaken failures would raise
                        publisher.take_failures()
                        tickets.append(
                            (
                                ident,
                                publisher.publish(
                                    b"%d" % ident,
                                    routing_key=work.queue,
                                    properties=work.properties,
                                ),
                            )
                        )
                        work.published += 1
                        time.sleep(work.pause())
                    publisher.wait_for_confirms(WAIT)
                    batch = work.next_batch(work.settled(tickets))
                    publisher.take_failures()
            work.closing.join()
            work.check_closer()
            deadline = time.monotonic() + WAIT
            while not work.finished(deadline):
                time.sleep(0.05)
            consumer.close()
            consuming.join(WAIT)
        finally:
            with conn.channel() as cleanup:
                work.left = cleanup.queue_delete(work.queue)


RUNNERS: Final[dict[str, Callable[[str | Sequence[str], Workload], None]]] = {
    "asyncio": forced_asyncio,
    "trio": forced_trio,
    "blocking": forced_blocking,
}


def forced_closes(args: argparse.Namespace) -> None:
    runners = RUNNERS
    clients = args.clients.split(",") if args.clients else list(runners)
    print(
        f"{args.forced_closes} forced closes (rabbitmqctl close_connection) per adapter during "
        f"pipelined confirmed publishing (window {WINDOW}) and consuming, one close per "
        f"{args.gap} publishes, at most {args.rate:.0f} publishes/s, against {args.url}"
    )
    print(
        f"{'client':<10} {'lost':>5} {'unknown':>8} {'stale':>6} {'recoveries':>10} "
        f"{'confirmed':>10} {'wall':>8}"
    )
    for name in clients:
        work = Workload(args.forced_closes, args.gap, args.rate)
        started = time.monotonic()
        try:
            runners[name](args.url, work)
        except Exception as exc:  # a client that loses its way is a result, not a crash
            traceback.print_exc()
            print(f"{name:<10} failed after {len(work.recoveries)} recoveries: {exc!r}")
            continue
        wall = time.monotonic() - started
        lost = len(work.confirmed - work.received)
        unknown_reported = sum(r.unknown_publishes for r in work.recoveries)
        note = "" if unknown_reported == work.unknown else f" (events: {unknown_reported})"
        print(
            f"{name:<10} {lost:>5} {work.unknown:>8}{note} {work.stale:>6} "
            f"{len(work.recoveries):>10} {len(work.confirmed):>10} {wall:>7.1f}s"
        )


def _milliseconds(times: Sequence[float]) -> str:
    if not times:
        return f"{'-':>7} {'-':>7}"
    return f"{statistics.median(times) * 1000:>5.0f}ms {max(times) * 1000:>5.0f}ms"


def node_kills(args: argparse.Namespace) -> None:
    """The forced-close workload with a durable queue and persistent messages, but each fault is
    a ``kill -9`` of a private RabbitMQ node and its restart on the same port with its data."""
    sys.path.insert(0, str(ROOT))
    try:
        from tests.support.rabbitmq_node import rabbitmq_node
    finally:
        sys.path.remove(str(ROOT))
    clients = args.clients.split(",") if args.clients else list(RUNNERS)
    print(
        f"{args.node_kills} kill -9 + restarts of a private RabbitMQ node per adapter during "
        f"pipelined confirmed publishing (window {WINDOW}, persistent, durable queue) and "
        f"consuming (prefetch 100), one kill per {args.gap} publishes, at most "
        f"{args.rate:.0f} publishes/s; recovered = port open to Recovered, resumed = port open "
        "to the consumer's next delivery (median, max)"
    )
    _header()
    with rabbitmq_node() as node:

        def kill_and_restart(_name: str) -> float:
            node.kill()
            node.start()
            return time.monotonic()

        _kill_runs(args, clients, args.node_kills, node.url, lambda _work: kill_and_restart)


def _kill_runs(
    args: argparse.Namespace,
    clients: Sequence[str],
    kills: int,
    endpoints: str | Sequence[str],
    fault: Callable[[Workload], Callable[[str], float | None]],
    arguments: FieldTable | None = None,
) -> None:
    """Each client's run of the workload with *kills* faults (``fault(work)`` makes them), and
    its row of the table."""
    for name in clients:
        work = Workload(kills, args.gap, args.rate, durable=True, arguments=arguments)
        work.fault = fault(work)
        started = time.monotonic()
        try:
            RUNNERS[name](endpoints, work)
        except Exception as exc:  # a client that loses its way is a result, not a crash
            traceback.print_exc()
            print(f"{name:<9} failed after {len(work.recoveries)} recoveries: {exc!r}")
            continue
        wall = time.monotonic() - started
        lost = len(work.confirmed - work.received)
        duplicates = work.deliveries - len(work.received)
        moved = sum(before != after for before, after in work.moves)
        print(
            f"{name:<9} {lost:>4} {work.left:>6} {duplicates:>5} {work.unknown:>7} "
            f"{work.stale:>5} {len(work.recoveries):>5} {moved:>5} "
            f"{_milliseconds(work.recovery_times):>15} {_milliseconds(work.resume_times):>15} "
            f"{wall:>6.0f}s",
            flush=True,
        )


def cluster_kills(args: argparse.Namespace) -> None:
    """The node-kill workload on a quorum queue of a private 3-node RabbitMQ cluster
    (``tests/support/rabbitmq_cluster.py``), the three nodes' URLs as endpoints: each fault is a
    ``kill -9`` of the node the connection is on (restarted in the background, and waited for
    before the next kill), so the client fails over to another node."""
    sys.path.insert(0, str(ROOT))
    try:
        from tests.support.rabbitmq_cluster import rabbitmq_cluster
    finally:
        sys.path.remove(str(ROOT))
    clients = args.clients.split(",") if args.clients else list(RUNNERS)
    print(
        f"{args.cluster} kill -9s per adapter of the node in use of a private 3-node RabbitMQ "
        f"cluster (quorum queue, 3 replicas; the killed node restarts in the background) during "
        f"pipelined confirmed publishing (window {WINDOW}, persistent) and consuming (prefetch "
        f"100), one kill per {args.gap} publishes, at most {args.rate:.0f} publishes/s; moved = "
        "recoveries onto another node; failover = kill to Recovered, resumed = kill to the "
        "consumer's next delivery (median, max)"
    )
    _header(failover=True)
    started = time.monotonic()
    with rabbitmq_cluster() as cluster:
        print(f"cluster up in {time.monotonic() - started:.0f} s", flush=True)

        def fault(work: Workload) -> Callable[[str], float | None]:
            return lambda _name: cluster.kill_node_at(work.where())

        _kill_runs(args, clients, args.cluster, cluster.urls, fault, {"x-queue-type": "quorum"})
        cluster.wait_restarted()
        running = cluster.running_nodes()
        print(f"running at the end: {len(running)} nodes of {len(cluster.nodes)}")


def _header(*, failover: bool = False) -> None:
    recovered = "failover" if failover else "recovered"
    print(
        f"{'client':<9} {'lost':>4} {'unproc':>6} {'dups':>5} {'unknown':>7} {'stale':>5} "
        f"{'kills':>5} {'moved':>5} {recovered:>15} {'resumed':>15} {'wall':>7}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument(
        "--clients",
        default="",
        help="comma-separated (default: asyncio,trio,blocking,aio-pika; with --forced-closes "
        "the three adapters)",
    )
    parser.add_argument(
        "--forced-closes",
        type=int,
        nargs="?",
        const=100,
        metavar="N",
        help="instead of restarts: N forced closes (100 if N is left out) against RabbitMQ",
    )
    parser.add_argument(
        "--node-kills",
        type=int,
        metavar="N",
        help="instead of restarts: N kill -9 + restarts of a private RabbitMQ node per adapter",
    )
    parser.add_argument(
        "--cluster",
        type=int,
        metavar="N",
        help="instead of restarts: N kill -9s per adapter of the node in use of a private "
        "3-node RabbitMQ cluster (quorum queue), failing over to the others",
    )
    parser.add_argument("--gap", type=int, default=50, help="publishes between forced closes")
    parser.add_argument(
        "--rate", type=float, default=1000, help="at most this many publishes a second"
    )
    parser.add_argument("--url", default=os.environ.get("AMQP_URL", DEFAULT_URL))
    args = parser.parse_args()
    if args.cluster is not None:
        logging.basicConfig(level=logging.ERROR)
        cluster_kills(args)
        return
    if args.node_kills is not None:
        logging.basicConfig(level=logging.ERROR)
        node_kills(args)
        return
    if args.forced_closes is not None:
        logging.basicConfig(level=logging.ERROR)  # not a warning per close
        forced_closes(args)
        return
    args.clients = args.clients or "asyncio,trio,blocking,aio-pika"
    policy = RecoveryPolicy(initial_delay=args.interval, multiplier=1, jitter=0)
    runners: dict[str, Callable[[Broker], list[float]]] = {
        "asyncio": lambda b: run_asyncio(b, args.rounds, policy),
        "trio": lambda b: run_trio(b, args.rounds, policy),
        "blocking": lambda b: run_blocking(b, args.rounds, policy),
        "aio-pika": lambda b: run_aio_pika(b, args.rounds, args.interval),
    }
    print(
        f"time from the broker accepting again to the first delivery to the old consumer, "
        f"retry interval {args.interval} s, {args.rounds} restarts each"
    )
    print(f"{'client':<10} {'median':>8} {'min':>8} {'max':>8}")
    for name in args.clients.split(","):
        broker = Broker()
        broker.start()
        try:
            times = runners[name](broker)
        except Exception as exc:  # a client that never resumes is a result, not a crash
            print(f"{name:<10} failed: {exc!r}")
            continue
        finally:
            broker.kill()
        print(
            f"{name:<10} {statistics.median(times) * 1000:>6.0f} ms {min(times) * 1000:>5.0f} ms "
            f"{max(times) * 1000:>5.0f} ms"
        )


if __name__ == "__main__":
    main()
