"""How client cost grows with channels and consumers, many queues, and many publishers.

Three parts, each library in its own worker process, rounds interleaved (order rotated),
medians reported:

* **channels**: one connection opens C channels (1, 10, 100, 1,000) with K consumers each
  (1, then 10 where C x K <= 1,000), each consumer on its own empty classic queue, ``basic.qos``
  prefetch 100 per channel, a ``multiple`` ack per channel every 50 deliveries (and at the end).
  Once every consumer is registered the worker says so, the harness publishes M messages
  spread evenly over the queues (pre-encoded, ``bench/_raw.py``), and the worker's **client CPU
  per message** (``time.process_time`` from that moment to the last ack, over M) is printed,
  M being 20,000 or 50 per channel, whichever is more (so 1,000 channels get 50,000: every
  channel acks every 50 deliveries at every scale, not once for its 20 as an even split of
  20,000 would have it),
  with its ratio to C=1 (goal, issue 20: at most 1.2x from 1 to 1,000 channels). Libraries:
  core (``bench/_core_client.py``), amqp_trio, amqp_asyncio (a task per consumer), amqp_blocking
  (one thread waits on one ``Inbox`` that every consumer delivers into) and pika
  (``BlockingConnection``, callbacks).
* **queues**: declare Q (10,000) exclusive classic queues and bind each to ``amq.direct``,
  pipelined where the API allows (core: every request sent before the replies are read, in
  batches of 1,000; amqp_trio and amqp_asyncio: concurrent tasks on one channel, at most 1,000
  in flight; amqp_blocking and pika: one call after the other). Printed: seconds, and the
  client's memory growth (resident set after the last bind over before the first, and the
  peak, both from ``/proc/self/status``). The queues go with the connection.
* **publishers**: P (100) raw clients, one thread and connection each, publish M / P messages
  with confirms (window 100) to a queue each, all at once, against the embedded broker and
  RabbitMQ: messages per second over all, and the broker's CPU per message (``/proc``).

    .venv/bin/python bench/scale.py                    # every part, 5 rounds
    .venv/bin/python bench/scale.py --quick            # smoke run, under 30 s
    .venv/bin/python bench/scale.py --parts channels --libs core,amqp_trio --rounds 7
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from _raw import RawClient

if TYPE_CHECKING:
    from collections.abc import Callable

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/"
HERE = Path(__file__).resolve().parent
LIBS = ["core", "amqp_trio", "amqp_asyncio", "amqp_blocking", "pika"]
QUICK_LIBS = LIBS[:-1]
PARTS = ["channels", "queues", "publishers"]
PREFETCH = 100
ACK_EVERY = 50
BODY = b"x" * 64
MAX_GROWTH = 1.2
MAX_CONSUMERS = 1000


# -- worker: the channels part -----------------------------------------------------------------


class Acks:
    """Per channel: deliveries seen and the highest tag; a ``multiple`` ack every ACK_EVERY."""

    __slots__ = ("acked", "count", "quota", "seen")

    def __init__(self, quota: int) -> None:
        self.count = self.seen = self.acked = 0
        self.quota = quota

    def delivered(self, tag: int) -> int:
        """Count one delivery; the tag to ack now (multiple), or 0."""
        self.count += 1
        if tag > self.seen:
            self.seen = tag
        if (self.count % ACK_EVERY == 0 or self.count == self.quota) and self.seen > self.acked:
            self.acked = self.seen
            return self.seen
        return 0


def ready() -> None:
    """Tell the harness every consumer is registered; wait for it to start publishing."""
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("the harness went away")


def consume_core(url: str, layout: list[list[str]], total: int) -> float:
    from _core_client import CoreClient
    from amqp_sansio import (
        NEED_DATA,
        BasicAck,
        BasicConsume,
        BasicQos,
        ChannelOpened,
        MessageReceived,
        MethodReceived,
    )

    client = CoreClient(url)
    try:
        core = client.core
        numbers = [client.channel] + [core.open_channel() for _ in layout[1:]]
        client.flush()
        opened = 1
        while opened < len(numbers):
            opened += sum(isinstance(e, ChannelOpened) for e in client.events())
        replies = 0
        for number, queues in zip(numbers, layout, strict=True):
            core.send_method(number, BasicQos(prefetch_count=PREFETCH))
            for index, queue in enumerate(queues):
                core.send_method(number, BasicConsume(queue=queue, consumer_tag=f"c{index}"))
        client.flush()
        expected = len(numbers) + sum(map(len, layout))
        while replies < expected:
            replies += sum(isinstance(e, MethodReceived) for e in client.events())
        per_channel = total // len(numbers)
        acks = {number: Acks(per_channel) for number in numbers}
        ready()
        cpu = time.process_time()
        received = 0
        next_event, send_method, read, flush = (
            core.next_event,
            core.send_method,
            client.read,
            client.flush,
        )
        while received < total:
            read()
            while (event := next_event()) is not NEED_DATA:
                if type(event) is MessageReceived:
                    received += 1
                    tag = acks[event.channel].delivered(event.method.delivery_tag)  # type: ignore[attr-defined]
                    if tag:
                        send_method(event.channel, BasicAck(delivery_tag=tag, multiple=True))
            flush()
        return time.process_time() - cpu
    finally:
        client.close()


def consume_amqp_trio(url: str, layout: list[list[str]], total: int) -> float:
    from contextlib import AsyncExitStack

    import trio

    import amqp_trio

    async def main() -> float:
        async with amqp_trio.connect(url) as conn, AsyncExitStack() as stack:
            consumers = []
            per_channel = total // len(layout)
            per_consumer = per_channel // len(layout[0])
            for queues in layout:
                ch = await stack.enter_async_context(conn.channel())
                await ch.basic_qos(prefetch_count=PREFETCH)
                acks = Acks(per_channel)
                for queue in queues:
                    consumer = await stack.enter_async_context(ch.basic_consume(queue))
                    consumers.append((ch, acks, consumer))
            ready()
            cpu = time.process_time()

            async def drain(
                ch: amqp_trio.Channel, acks: Acks, consumer: amqp_trio.Consumer
            ) -> None:
                got = 0
                async for message in consumer:
                    got += 1
                    tag = acks.delivered(message.delivery_tag)
                    if tag:
                        await ch.basic_ack(tag, multiple=True)
                    if got == per_consumer:
                        break

            async with trio.open_nursery() as nursery:
                for ch, acks, consumer in consumers:
                    nursery.start_soon(drain, ch, acks, consumer)
            return time.process_time() - cpu

    return trio.run(main)


def consume_amqp_asyncio(url: str, layout: list[list[str]], total: int) -> float:
    import asyncio
    from contextlib import AsyncExitStack

    import amqp_asyncio

    async def main() -> float:
        async with amqp_asyncio.connect(url) as conn, AsyncExitStack() as stack:
            consumers = []
            per_channel = total // len(layout)
            per_consumer = per_channel // len(layout[0])
            for queues in layout:
                ch = await stack.enter_async_context(conn.channel())
                await ch.basic_qos(prefetch_count=PREFETCH)
                acks = Acks(per_channel)
                for queue in queues:
                    consumer = await stack.enter_async_context(ch.basic_consume(queue))
                    consumers.append((ch, acks, consumer))
            ready()
            cpu = time.process_time()

            async def drain(
                ch: amqp_asyncio.Channel, acks: Acks, consumer: amqp_asyncio.Consumer
            ) -> None:
                got = 0
                async for message in consumer:
                    got += 1
                    tag = acks.delivered(message.delivery_tag)
                    if tag:
                        await ch.basic_ack(tag, multiple=True)
                    if got == per_consumer:
                        break

            async with asyncio.TaskGroup() as tasks:
                for ch, acks, consumer in consumers:
                    tasks.create_task(drain(ch, acks, consumer))
            return time.process_time() - cpu

    return asyncio.run(main())


def consume_amqp_blocking(url: str, layout: list[list[str]], total: int) -> float:
    from contextlib import ExitStack

    import amqp_blocking

    with amqp_blocking.connect(url) as conn, ExitStack() as stack:
        inbox = amqp_blocking.Inbox()
        channels = {}
        per_channel = total // len(layout)
        for queues in layout:
            ch = stack.enter_context(conn.channel())
            ch.basic_qos(prefetch_count=PREFETCH)
            channels[ch.number] = (ch, Acks(per_channel))
            for queue in queues:
                stack.enter_context(ch.basic_consume(queue, inbox=inbox))
        ready()
        cpu = time.process_time()
        for _ in range(total):
            message = inbox.get()
            assert message is not None
            ch, acks = channels[message.channel]
            tag = acks.delivered(message.delivery_tag)
            if tag:
                ch.basic_ack(tag, multiple=True)
        return time.process_time() - cpu


def consume_pika(url: str, layout: list[list[str]], total: int) -> float:
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        per_channel = total // len(layout)
        counter = [0]
        for queues in layout:
            channel = connection.channel()
            channel.basic_qos(prefetch_count=PREFETCH)
            acks = Acks(per_channel)

            def on_message(
                ch: pika.adapters.blocking_connection.BlockingChannel,
                method: pika.spec.Basic.Deliver,
                _props: object,
                _body: bytes,
                acks: Acks = acks,
            ) -> None:
                counter[0] += 1
                tag = acks.delivered(method.delivery_tag)
                if tag:
                    ch.basic_ack(tag, multiple=True)

            for queue in queues:
                channel.basic_consume(queue, on_message)
        ready()
        cpu = time.process_time()
        while counter[0] < total:
            connection.process_data_events(time_limit=None)
        return time.process_time() - cpu
    finally:
        connection.close()


CONSUMERS: dict[str, Callable[[str, list[list[str]], int], float]] = {
    "core": consume_core,
    "amqp_trio": consume_amqp_trio,
    "amqp_asyncio": consume_amqp_asyncio,
    "amqp_blocking": consume_amqp_blocking,
    "pika": consume_pika,
}


# -- worker: the queues part -------------------------------------------------------------------


def memory_kib() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process in KiB."""
    values = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            values[line[:5]] = int(line.split()[1])
    return values["VmRSS"], values["VmHWM"]


def declare_core(url: str, names: list[str]) -> None:
    from _core_client import CoreClient
    from amqp_sansio import MethodReceived, QueueBind, QueueDeclare

    client = CoreClient(url)
    core, channel = client.core, client.channel
    for start in range(0, len(names), 1000):
        batch = names[start : start + 1000]
        for name in batch:
            core.send_method(channel, QueueDeclare(queue=name, exclusive=True))
            core.send_method(
                channel, QueueBind(queue=name, exchange="amq.direct", routing_key=name)
            )
        client.flush()
        replies = 0
        while replies < 2 * len(batch):
            replies += sum(type(e) is MethodReceived for e in client.events())
    # kept open by the caller's clock: the queues are exclusive
    KEEP.append(client)


KEEP: list[object] = []


def declare_amqp_trio(url: str, names: list[str]) -> None:
    import trio

    import amqp_trio

    async def main() -> None:
        async with amqp_trio.connect(url) as conn, conn.channel() as ch:
            limiter = trio.CapacityLimiter(1000)

            async def one(name: str) -> None:
                async with limiter:
                    await ch.queue_declare(name, exclusive=True)
                    await ch.queue_bind(name, "amq.direct", name)

            before = memory_kib()
            start = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for name in names:
                    nursery.start_soon(one, name)
            RESULT.extend([time.perf_counter() - start, *before, *memory_kib()])

    trio.run(main)


RESULT: list[float] = []


def declare_amqp_asyncio(url: str, names: list[str]) -> None:
    import asyncio

    import amqp_asyncio

    async def main() -> None:
        async with amqp_asyncio.connect(url) as conn, conn.channel() as ch:
            limiter = asyncio.Semaphore(1000)

            async def one(name: str) -> None:
                async with limiter:
                    await ch.queue_declare(name, exclusive=True)
                    await ch.queue_bind(name, "amq.direct", name)

            before = memory_kib()
            start = time.perf_counter()
            async with asyncio.TaskGroup() as tasks:
                for name in names:
                    tasks.create_task(one(name))
            RESULT.extend([time.perf_counter() - start, *before, *memory_kib()])

    asyncio.run(main())


def declare_amqp_blocking(url: str, names: list[str]) -> None:
    import amqp_blocking

    with amqp_blocking.connect(url) as conn, conn.channel() as ch:
        before = memory_kib()
        start = time.perf_counter()
        for name in names:
            ch.queue_declare(name, exclusive=True)
            ch.queue_bind(name, "amq.direct", name)
        RESULT.extend([time.perf_counter() - start, *before, *memory_kib()])


def declare_pika(url: str, names: list[str]) -> None:
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = connection.channel()
        before = memory_kib()
        start = time.perf_counter()
        for name in names:
            channel.queue_declare(name, exclusive=True)
            channel.queue_bind(name, "amq.direct", name)
        RESULT.extend([time.perf_counter() - start, *before, *memory_kib()])
    finally:
        connection.close()


def declare_core_timed(url: str, names: list[str]) -> None:
    from _core_client import CoreClient

    client = CoreClient(url)  # warms the imports; its own connection is closed at once
    client.close()
    before = memory_kib()
    start = time.perf_counter()
    declare_core(url, names)
    RESULT.extend([time.perf_counter() - start, *before, *memory_kib()])
    for kept in KEEP:
        kept.close()  # type: ignore[attr-defined]


DECLARERS: dict[str, Callable[[str, list[str]], object]] = {
    "core": declare_core_timed,
    "amqp_trio": declare_amqp_trio,
    "amqp_asyncio": declare_amqp_asyncio,
    "amqp_blocking": declare_amqp_blocking,
    "pika": declare_pika,
}


def worker(spec: str) -> int:
    fields = json.loads(spec)
    lib = fields["lib"]
    try:
        if fields["part"] == "channels":
            cpu = CONSUMERS[lib](fields["url"], fields["layout"], fields["total"])
            print(json.dumps({"cpu": cpu}), flush=True)
        else:
            names = [f"bench-scale-{uuid.uuid4().hex[:10]}-{i}" for i in range(fields["queues"])]
            DECLARERS[lib](fields["url"], names)
            seconds, rss0, _hwm0, rss1, hwm1 = RESULT
            print(
                json.dumps({"seconds": seconds, "rss_kib": rss1 - rss0, "peak_kib": hwm1 - rss0}),
                flush=True,
            )
    except ImportError as exc:
        print(json.dumps({"unavailable": str(exc)}), flush=True)
    return 0


# -- the harness -------------------------------------------------------------------------------


def spawn(spec: dict[str, object]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HERE / "scale.py"), "--worker", json.dumps(spec)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str], timeout: float) -> dict[str, object]:
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [line for line in out.strip().splitlines() if line.startswith("{")]
    if process.returncode != 0 or not lines:
        tail = (err.strip().splitlines() or ["no output"])[-1]
        return {"error": f"worker exited with {process.returncode}: {tail}"}
    result: dict[str, object] = json.loads(lines[-1])
    return result


def channels_case(
    admin: RawClient, url: str, lib: str, channels: int, consumers: int, total: int, timeout: float
) -> dict[str, object]:
    tag = uuid.uuid4().hex[:10]
    layout = [[f"bench-scale-{tag}-{c}-{k}" for k in range(consumers)] for c in range(channels)]
    queues = [queue for row in layout for queue in row]
    for queue in queues:
        admin.queue_declare(queue)
    try:
        process = spawn(
            {"part": "channels", "lib": lib, "url": url, "layout": layout, "total": total}
        )
        assert process.stdout is not None
        assert process.stdin is not None
        line = process.stdout.readline()
        if line.strip() != "ready":
            process.kill()
            return {"error": f"worker did not get ready: {line.strip() or finish(process, 10)}"}
        process.stdin.write("go\n")
        process.stdin.flush()
        per_queue = total // len(queues)
        for queue in queues:
            admin.publish(queue, per_queue, BODY)
        return finish(process, timeout)
    finally:
        for queue in queues:
            admin.queue_delete(queue)


def publishers_case(
    url: str, publishers: int, total: int, broker_pid: int | None
) -> dict[str, float]:
    from broker import process_cpu

    per = total // publishers
    clients = [RawClient(url) for _ in range(publishers)]
    queues = [f"bench-scale-pub-{uuid.uuid4().hex[:10]}" for _ in clients]
    errors: list[BaseException] = []
    try:
        for client, queue in zip(clients, queues, strict=True):
            client.queue_declare(queue)
            client.confirm_select()
        barrier = threading.Barrier(publishers + 1)

        def run(client: RawClient, queue: str) -> None:
            barrier.wait()
            try:
                client.publish_confirmed(queue, per, BODY, window=100)
            except BaseException as exc:
                errors.append(exc)

        threads = [
            threading.Thread(target=run, args=pair) for pair in zip(clients, queues, strict=True)
        ]
        for thread in threads:
            thread.start()
        broker_before = process_cpu(broker_pid)
        barrier.wait()
        start = time.perf_counter()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - start
        broker_after = process_cpu(broker_pid)
        if errors:
            raise RuntimeError(f"{len(errors)} publishers failed: {errors[0]!r}")
        result = {"msgs_per_s": per * publishers / seconds}
        if broker_before is not None and broker_after is not None:
            result["broker_cpu_us"] = (broker_after - broker_before) / (per * publishers) * 1e6
        return result
    finally:
        for client, queue in zip(clients, queues, strict=True):
            try:
                client.queue_delete(queue)
                client.close()
            except (OSError, RuntimeError):
                client.sock.close()


def med(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("AMQP_URL", DEFAULT_URL))
    parser.add_argument("--quick", action="store_true", help="smoke run, under 30 s")
    parser.add_argument("--libs", help=f"from {','.join(LIBS)} (default: all; --quick: not pika)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"from {','.join(PARTS)}")
    parser.add_argument("--rounds", type=int, help="rounds, medians reported (default 5)")
    parser.add_argument("--messages", type=int, help="M for the channels part (default 20,000)")
    parser.add_argument("--queues", type=int, help="Q for the queues part (default 10,000)")
    parser.add_argument("--publishers", type=int, default=100)
    parser.add_argument("--published", type=int, help="messages over all publishers (50,000)")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        return worker(args.worker)
    chosen = args.libs or ",".join(QUICK_LIBS if args.quick else LIBS)
    libs = [lib for lib in chosen.split(",") if lib]
    parts = [part for part in args.parts.split(",") if part]
    for name, items, known in (("library", libs, LIBS), ("part", parts, PARTS)):
        if not items or any(item not in known for item in items):
            raise SystemExit(f"unknown {name} in {items}; known: {known}")
    quick = args.quick
    rounds = args.rounds or (1 if quick else 5)
    messages = args.messages or (2000 if quick else 20_000)
    queue_count = args.queues or (200 if quick else 10_000)
    published = args.published or (2000 if quick else 50_000)
    grid = (
        [(1, 1), (10, 1)]
        if quick
        else [(1, 1), (10, 1), (100, 1), (1000, 1), (1, 10), (10, 10), (100, 10)]
    )
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))
    started = time.monotonic()
    load_before = os.getloadavg()
    report: dict[str, object] = {"rounds": rounds, "load_average": [load_before]}
    lines: list[str] = []
    failed: list[str] = []

    if "channels" in parts:
        admin = RawClient(args.url)
        cpu: dict[tuple[str, int, int], list[float]] = {}
        try:
            for run in range(rounds):
                for channels, consumers in grid:
                    shift = run % len(libs)
                    # The same acks per message at every scale (see the module's docstring).
                    count = max(messages, channels * ACK_EVERY)
                    for lib in libs[shift:] + libs[:shift]:
                        outcome = channels_case(
                            admin, args.url, lib, channels, consumers, count, args.timeout
                        )
                        key = (lib, channels, consumers)
                        value = outcome.get("cpu")
                        if isinstance(value, float):
                            cpu.setdefault(key, []).append(value / count * 1e6)
                            note = f"{value / count * 1e6:.1f} µs/msg"
                        else:
                            note = str(outcome)
                            failed.append(f"channels {key}: {outcome}")
                        print(
                            f"[{time.monotonic() - started:5.0f}s] channels round {run + 1} "
                            f"{channels}x{consumers} {lib}: {note}",
                            file=sys.stderr,
                            flush=True,
                        )
        finally:
            admin.close()
        lines += [
            (
                f"Client CPU µs per message, {messages:,} messages (or {ACK_EVERY} per channel, "
                f"whichever is more) of {len(BODY)} B over C channels x K consumers on one "
                f"connection (median of {rounds}); in brackets: over C=1, K=1"
            ),
            "",
            "| C x K | " + " | ".join(libs) + " |",
            "|---|" + "--:|" * len(libs),
        ]
        for channels, consumers in grid:
            cells = [f"{channels} x {consumers}"]
            for lib in libs:
                value = med(cpu.get((lib, channels, consumers), []))
                base = med(cpu.get((lib, 1, 1), []))
                if value is None:
                    cells.append("n/a")
                else:
                    cells.append(f"{value:.1f} ({value / base:.2f}x)" if base else f"{value:.1f}")
            lines.append("| " + " | ".join(cells) + " |")
        top = max(c for c, k in grid if k == 1)
        for lib in libs:
            low, high = med(cpu.get((lib, 1, 1), [])), med(cpu.get((lib, top, 1), []))
            if low and high and high / low > MAX_GROWTH:
                lines.append(
                    f"  {lib}: 1 -> {top} channels {high / low:.2f}x (goal <= {MAX_GROWTH}x)"
                )
        lines.append("")
        print("\n".join(lines), flush=True)
        lines.clear()
        report["channels"] = [
            {"lib": lib, "channels": c, "consumers": k, "cpu_us": values, "median": med(values)}
            for (lib, c, k), values in cpu.items()
        ]

    if "queues" in parts:
        rows: dict[str, list[dict[str, float]]] = {}
        for run in range(rounds):
            shift = run % len(libs)
            for lib in libs[shift:] + libs[:shift]:
                process = spawn(
                    {"part": "queues", "lib": lib, "url": args.url, "queues": queue_count}
                )
                outcome = finish(process, args.timeout)
                if "seconds" in outcome:
                    rows.setdefault(lib, []).append(outcome)  # type: ignore[arg-type]
                    note = f"{outcome['seconds']:.2f} s, +{outcome['rss_kib']} KiB"
                else:
                    note = str(outcome)
                    failed.append(f"queues {lib}: {outcome}")
                print(
                    f"[{time.monotonic() - started:5.0f}s] queues round {run + 1} {lib}: {note}",
                    file=sys.stderr,
                    flush=True,
                )
        lines += [
            f"Declare and bind {queue_count:,} exclusive queues, one channel (median of {rounds})",
            "",
            "| lib | seconds | queues/s | RSS growth KiB | peak over start KiB |",
            "|---|--:|--:|--:|--:|",
        ]
        for lib in libs:
            got = rows.get(lib, [])
            if not got:
                lines.append(f"| {lib} | n/a | | | |")
                continue
            seconds = med([r["seconds"] for r in got]) or 0.0
            rss = med([r["rss_kib"] for r in got]) or 0.0
            peak = med([r["peak_kib"] for r in got]) or 0.0
            lines.append(
                f"| {lib} | {seconds:.2f} | {queue_count / seconds:,.0f} | {rss:,.0f} "
                f"| {peak:,.0f} |"
            )
        lines.append("")
        print("\n".join(lines), flush=True)
        lines.clear()
        report["queues"] = rows

    if "publishers" in parts:
        from broker import EmbeddedBroker, find_rabbitmq_pid

        results: dict[str, list[dict[str, float]]] = {}
        embedded = EmbeddedBroker(None)
        try:
            targets = {
                "embedded": (embedded.url, embedded.process.pid),
                "rabbitmq": (args.url, find_rabbitmq_pid(urlsplit(args.url).port or 5672)),
            }
            for run in range(rounds):
                for target in (
                    ["embedded", "rabbitmq"] if run % 2 == 0 else ["rabbitmq", "embedded"]
                ):
                    url, pid = targets[target]
                    try:
                        got = publishers_case(url, args.publishers, published, pid)
                    except (OSError, RuntimeError) as exc:
                        failed.append(f"publishers {target}: {exc}")
                        continue
                    results.setdefault(target, []).append(got)
                    print(
                        f"[{time.monotonic() - started:5.0f}s] publishers round {run + 1} "
                        f"{target}: {got['msgs_per_s']:,.0f} msgs/s",
                        file=sys.stderr,
                        flush=True,
                    )
        finally:
            embedded.stop()
        lines += [
            (
                f"{args.publishers} concurrent publishers (raw clients, confirms, window 100), "
                f"{published:,} messages of {len(BODY)} B in all (median of {rounds})"
            ),
            "",
            "| broker | msgs/s | broker CPU µs/msg |",
            "|---|--:|--:|",
        ]
        for target in ("embedded", "rabbitmq"):
            got = results.get(target, [])
            rate = med([r["msgs_per_s"] for r in got])
            broker_cpu = med([r["broker_cpu_us"] for r in got if "broker_cpu_us" in r])
            lines.append(
                f"| {target} | {'n/a' if rate is None else f'{rate:,.0f}'} | "
                f"{'-' if broker_cpu is None else f'{broker_cpu:.1f}'} |"
            )
        lines.append("")
        report["publishers"] = results

    if lines:
        print("\n".join(lines))
    load_after = os.getloadavg()
    print(
        f"Python {platform.python_version()}, {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} CPUs, load average {load_before[0]:.2f} before, {load_after[0]:.2f} "
        f"after; {time.monotonic() - started:.0f} s"
    )
    if failed:
        print("failed:\n  " + "\n  ".join(failed))
    if args.json is not None:
        report["load_average"] = [load_before, load_after]
        report["failed"] = failed
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
