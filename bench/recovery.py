"""How fast a consumer resumes after its broker restarts: the time from the broker accepting
connections again to the first delivery to the consumer iterator made before the restart.

The broker is the embedded one (``python -m amqp_broker``) in a subprocess, SIGKILLed and started
again on the same port; it forgets everything, so the client must declare the queue and consume
again by itself. A separate publisher connects once the port accepts, declares the same queue
and publishes one message. Every client retries at the same fixed interval (``--interval``;
aio-pika's ``connect_robust`` waits 5 s by default), so the figure is about half the interval
plus the reconnection itself.

Usage: ``.venv/bin/python bench/recovery.py [--rounds 10] [--interval 0.5]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import statistics
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Final

import trio

import amqp_asyncio
import amqp_blocking
import amqp_trio
from amqp_sansio.client import Recovered, RecoveryPolicy

if TYPE_CHECKING:
    from collections.abc import Callable

QUEUE: Final = "bench-recovery"
WAIT: Final = 30.0


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument(
        "--clients", default="asyncio,trio,blocking,aio-pika", help="comma-separated"
    )
    args = parser.parse_args()
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
