"""``make demo``: a publish/consume round trip of N messages through amqp_trio, with throughput.

    python examples/demo.py [--count 20000] [--size 1024] [--window 1000] [--url URL]
                            [--protocol 0-9-1|0-10]

It publishes N messages with publisher confirms, keeping up to ``--window`` of them unconfirmed
in flight, then consumes them back (prefetch 1000, a ``multiple`` ack every 100), checks every
body, and prints messages/s and MB/s for both directions. A progress bar on stderr updates in
place on a terminal and prints a line every 10 % otherwise.

With ``--protocol 0-10`` the same round trip runs over AMQP 0-10 (``make demo PROTOCOL=0-10``):
a session instead of a channel, transfers with an ``execution.sync`` every ``--window`` of them
instead of confirms, and a subscription with 1000 messages of credit whose messages are
accepted. RabbitMQ does not speak 0-10, so that usually means the embedded broker, which serves
0-10 and 0-9-1 on one port.

The broker is the one at ``--url`` (default ``AMQP_URL``, else
``amqp://guest:guest@127.0.0.1:5672/``) when it answers there; otherwise the demo starts the
embedded broker (``amqp_broker``) in this process and says so. The queue has a unique name and
is deleted at the end.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from typing import TextIO

import trio

import amqp_trio
from amqp_trio import AMQPError

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/"
ACK_EVERY = 100
PREFETCH = 1000


class ProgressBar:
    """A plain-text progress bar: redrawn in place on a terminal, a line per 10 % otherwise."""

    WIDTH = 30

    def __init__(self, label: str, total: int, stream: TextIO = sys.stderr) -> None:
        self.label = label
        self.total = max(1, total)
        self.stream = stream
        self.interactive = stream.isatty()
        self.started = time.perf_counter()
        self._last_draw = 0.0
        self._last_step = -1

    def update(self, done: int) -> None:
        if self.interactive:
            now = time.perf_counter()
            if now - self._last_draw >= 0.1:
                self._last_draw = now
                self.stream.write("\r" + self._line(done))
                self.stream.flush()
        else:
            step = 10 * done // self.total
            if step > self._last_step:
                self._last_step = step
                self.stream.write(self._line(done) + "\n")
                self.stream.flush()

    def finish(self, done: int) -> None:
        if self.interactive:
            self.stream.write("\r" + self._line(done) + "\n")
            self.stream.flush()
        else:
            self.update(done)

    def _line(self, done: int) -> str:
        fraction = min(1.0, done / self.total)
        filled = int(self.WIDTH * fraction)
        elapsed = time.perf_counter() - self.started
        rate = done / elapsed if elapsed > 0 else 0.0
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        return (
            f"{self.label:<8} [{bar}] {fraction:4.0%} {done:>9,}/{self.total:,}"
            f"  {rate:>9,.0f} msgs/s"
        )


def report(label: str, count: int, size: int, seconds: float) -> str:
    rate = count / seconds
    megabytes = count * size / seconds / 1e6
    return (
        f"{label}: {count:,} messages of {size:,} B in {seconds:.2f} s = {rate:,.0f} msgs/s, "
        f"{megabytes:,.1f} MB/s"
    )


async def broker_at(url: str, protocol: str) -> str | None:
    """The product and version of the AMQP broker accepting a connection at *url* in
    *protocol* within 3 seconds, or None when none does."""
    product: object
    version: object
    try:
        with trio.move_on_after(3):
            if protocol == "0-10":
                async with amqp_trio.connect(url, protocol="0-10") as conn010:
                    product = conn010.server_properties.get("product", "a broker")
                    version = conn010.server_properties.get("version", "")
            else:
                async with amqp_trio.connect(url) as conn:
                    product = conn.server_properties.get("product", "a broker")
                    version = conn.server_properties.get("version", "")
            return f"{product!s} {version!s}".strip()
    except (OSError, AMQPError):
        return None
    return None


async def round_trip_0_10(url: str, count: int, size: int, window: int) -> None:
    """The round trip over AMQP 0-10: sync'd transfers out, a subscription with credit in."""
    queue = f"demo-{uuid.uuid4().hex[:12]}"
    pad = b"." * (size - 10)
    async with (
        amqp_trio.connect(url, protocol="0-10", connection_name="amqp-sansio demo") as conn,
        conn.session() as session,
    ):
        await session.queue_declare(queue)
        try:
            bar = ProgressBar("publish", count)
            started = time.perf_counter()
            for n in range(count):
                # unsynced transfers, then one execution.sync per window: 0-10's confirms
                await session.transfer("", b"%010d" % n + pad, routing_key=queue, sync=False)
                if (n + 1) % window == 0 or n + 1 == count:
                    await session.sync()
                    bar.update(n + 1)
            published = time.perf_counter() - started
            bar.finish(count)

            bar = ProgressBar("consume", count)
            received = 0
            started = time.perf_counter()
            subscription = await session.subscribe(queue, prefetch=PREFETCH)
            async for message in subscription:
                if message.body != b"%010d" % received + pad:
                    raise RuntimeError(f"message {received} came back wrong")
                message.accept()
                received += 1
                if received % ACK_EVERY == 0 or received == count:
                    bar.update(received)
                    if received == count:
                        break
            await session.sync()  # every accept done
            consumed = time.perf_counter() - started
            bar.finish(received)
            await subscription.cancel()
        finally:
            await session.queue_delete(queue)
    print(report("publish (synced)         ", count, size, published))
    print(report("consume (accepted)       ", count, size, consumed))
    print(report("both, one after the other", count, size, published + consumed))


async def round_trip(url: str, count: int, size: int, window: int) -> None:
    queue = f"demo-{uuid.uuid4().hex[:12]}"
    # each body starts with its sequence number, so the consumer can check order and content
    pad = b"." * (size - 10)
    async with (
        amqp_trio.connect(url, connection_name="amqp-sansio demo") as conn,
        conn.channel() as ch,
    ):
        await ch.queue_declare(queue)
        try:
            bar = ProgressBar("publish", count)
            started = time.perf_counter()
            async with ch.publisher(window=window) as publisher:
                for n in range(count):
                    await publisher.publish(b"%010d" % n + pad, routing_key=queue)
                    if n % 256 == 0:
                        bar.update(publisher.confirmed)
            published = time.perf_counter() - started
            bar.finish(publisher.confirmed)

            await ch.basic_qos(prefetch_count=PREFETCH)
            bar = ProgressBar("consume", count)
            received = 0
            started = time.perf_counter()
            async with ch.basic_consume(queue) as consumer:
                async for message in consumer:
                    if message.body != b"%010d" % received + pad:
                        raise RuntimeError(f"message {received} came back wrong")
                    received += 1
                    if received % ACK_EVERY == 0 or received == count:
                        await message.ack(multiple=True)
                        bar.update(received)
                        if received == count:
                            break
            consumed = time.perf_counter() - started
            bar.finish(received)
        finally:
            await ch.queue_delete(queue)
    print(report("publish (confirmed)      ", count, size, published))
    print(report("consume (acked)          ", count, size, consumed))
    print(report("both, one after the other", count, size, published + consumed))


async def main(args: argparse.Namespace) -> int:
    where = args.url.rsplit("@", 1)[-1]  # no credentials on screen
    run = round_trip_0_10 if args.protocol == "0-10" else round_trip
    product = await broker_at(args.url, args.protocol)
    print(f"protocol: AMQP {args.protocol}")
    if product is not None:
        print(f"broker: {product} at {where}")
        await run(args.url, args.count, args.size, args.window)
        return 0
    print(f"no broker answers at {where}: starting the embedded broker")
    try:
        from amqp_broker import running
    except ImportError as exc:
        print(
            f"demo: the embedded broker (amqp_broker) is not available ({exc}); "
            "start RabbitMQ (rabbitmq-server -detached) or set AMQP_URL",
            file=sys.stderr,
        )
        return 1
    async with running() as url:
        print(f"broker: embedded amqp_broker in this process at {url.rsplit('@', 1)[-1]}")
        await run(url, args.count, args.size, args.window)
    return 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20_000, help="messages (default 20000)")
    parser.add_argument("--size", type=int, default=1024, help="body octets, at least 10")
    parser.add_argument("--window", type=int, default=1000, help="unconfirmed publishes")
    parser.add_argument("--url", default=os.environ.get("AMQP_URL", DEFAULT_URL))
    parser.add_argument(
        "--protocol", choices=("0-9-1", "0-10"), default="0-9-1", help="AMQP version"
    )
    args = parser.parse_args()
    if args.count < 1 or args.size < 10 or args.window < 1:
        parser.error("--count and --window must be positive and --size at least 10")
    return args


if __name__ == "__main__":
    sys.exit(trio.run(main, parse_args()))
