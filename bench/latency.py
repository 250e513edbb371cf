"""Request/reply latency: N sequential round trips through a broker, p50/p99/max per library.

A responder process (``core``, a bare loop over ``amqp_sansio.Connection``, the same for every
library) consumes a request queue without acks and publishes each request's body back to its
``reply_to`` with its ``correlation_id``. Each library, in its own worker process, makes
``--calls`` sequential calls after ``--warmup`` calls that are not counted: publish a request of
``--size`` octets with ``reply_to`` set, wait for the reply, next. Two ways to get the reply:

* ``direct``: RabbitMQ's direct reply-to: the requester consumes ``amq.rabbitmq.reply-to``
  (``no_ack``) and sends ``reply_to="amq.rabbitmq.reply-to"``; the broker routes the reply to it
  without a queue;
* ``queue``: an exclusive, server-named reply queue consumed ``no_ack``.

Libraries: amqp_trio, amqp_asyncio, amqp_blocking (this project's adapters), ``core`` (the floor
the adapters are held against), ``raw`` (pre-encoded frames, ``bench/_raw.py``), pika
(``BlockingConnection``), aio-pika and py-amqp, whichever are installed. Targets: the RabbitMQ at
``--url`` and the embedded broker (``python -m amqp_broker`` on a free port). Rounds are
interleaved (library order rotated each round); the table gives the median over rounds of each
round's p50, p99 and max, and the client CPU per call; goals (issue 20): every adapter's p50 at
most 1.1x core's, its p99 no worse than the best peer's.

    .venv/bin/python bench/latency.py                  # 10,000 calls, 5 rounds, both targets
    .venv/bin/python bench/latency.py --quick          # smoke run (ours, core, raw), < 30 s
    .venv/bin/python bench/latency.py --libs core,amqp_trio --modes direct --targets embedded

This file is also the responder (``--responder``) and the worker (``--worker``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    from collections.abc import Callable

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/"
HERE = Path(__file__).resolve().parent
DIRECT = "amq.rabbitmq.reply-to"
ADAPTERS = ["amqp_trio", "amqp_asyncio", "amqp_blocking"]
PEERS = ["pika", "aio-pika", "py-amqp"]
LIBS = ["core", "raw", *ADAPTERS, *PEERS]
#: --quick: this project's clients and the two floors, no peers (a worker process each)
QUICK_LIBS = ["core", "raw", *ADAPTERS]
MODES = ["direct", "queue"]
TARGETS = ["rabbitmq", "embedded"]
MAX_P50_OVER_CORE = 1.1

#: (latencies in seconds, client CPU seconds of the timed calls)
Result = tuple[list[float], float]


# -- the responder -----------------------------------------------------------------------------


def responder(url: str, queue: str) -> int:
    """Answer every request on *queue* until killed; print ``ready`` once consuming."""
    from _core_client import CoreClient
    from amqp_sansio import (
        NEED_DATA,
        BasicConsume,
        BasicProperties,
        BasicPublish,
        MessageReceived,
        QueueDeclare,
    )

    client = CoreClient(url)
    core = client.core
    channel = client.channel
    client.call(QueueDeclare(queue=queue, exclusive=True))
    core.send_method(channel, BasicConsume(queue=queue, no_ack=True, consumer_tag="responder"))
    client.flush()
    print("ready", flush=True)
    next_event = core.next_event
    publish = core.publish
    while True:
        client.read()
        while (event := next_event()) is not NEED_DATA:
            if type(event) is MessageReceived:
                props = event.properties
                publish(
                    channel,
                    BasicPublish(routing_key=props.reply_to or ""),  # type: ignore[attr-defined]
                    BasicProperties(correlation_id=props.correlation_id),  # type: ignore[attr-defined]
                    event.body,
                )
        client.flush()


class Responder:
    def __init__(self, url: str) -> None:
        self.queue = f"bench-latency-{uuid.uuid4().hex[:12]}"
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "latency.py"), "--responder", url, self.queue],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if line.strip() != "ready":
            self.process.kill()
            raise RuntimeError(f"the responder did not start: {line!r}")

    def stop(self) -> None:
        self.process.terminate()  # its exclusive queue goes with its connection
        self.process.wait(timeout=30)


# -- the requesters, one per library -----------------------------------------------------------


class Calls:
    """Times *warmup* + *count* calls of ``call()``; the warm-up ones are not kept."""

    def __init__(self, warmup: int, count: int) -> None:
        self.warmup = warmup
        self.count = count

    def run(self, call: Callable[[], object]) -> Result:
        for _ in range(self.warmup):
            call()
        clock = time.perf_counter
        latencies = []
        append = latencies.append
        cpu = time.process_time()
        for _ in range(self.count):
            start = clock()
            call()
            append(clock() - start)
        return latencies, time.process_time() - cpu

    async def arun(self, call: Callable[[], object]) -> Result:
        for _ in range(self.warmup):
            await call()  # type: ignore[misc]
        clock = time.perf_counter
        latencies = []
        append = latencies.append
        cpu = time.process_time()
        for _ in range(self.count):
            start = clock()
            await call()  # type: ignore[misc]
            append(clock() - start)
        return latencies, time.process_time() - cpu


def check_reply(body: bytes, expected: bytes) -> None:
    if body != expected:
        raise RuntimeError(f"reply of {len(body)} octets, expected {len(expected)}")


def run_core(url: str, queue: str, mode: str, body: bytes, calls: Calls) -> Result:
    from _core_client import CoreClient
    from amqp_sansio import (
        NEED_DATA,
        BasicConsume,
        BasicProperties,
        BasicPublish,
        MessageReceived,
        QueueDeclare,
    )

    client = CoreClient(url)
    try:
        core = client.core
        channel = client.channel
        reply_to = DIRECT
        if mode == "queue":
            reply_to = client.call(QueueDeclare(exclusive=True)).queue  # type: ignore[attr-defined]
        client.call(BasicConsume(queue=reply_to, no_ack=True, consumer_tag="reply"))
        method = BasicPublish(routing_key=queue)
        props = BasicProperties(reply_to=reply_to, correlation_id="1")
        publish, next_event, read = core.publish, core.next_event, client.read
        data_to_send, sendall = core.data_to_send, client.sock.sendall

        def call() -> None:
            publish(channel, method, props, body)
            sendall(data_to_send())
            while True:
                read()
                while (event := next_event()) is not NEED_DATA:
                    if type(event) is MessageReceived:
                        check_reply(event.body, body)
                        return

        return calls.run(call)
    finally:
        client.close()


def run_raw(url: str, queue: str, mode: str, body: bytes, calls: Calls) -> Result:
    from _raw import (
        _BODY,
        _FRAME_HEADER,
        _HEADER,
        CONSUME,
        CONSUME_OK,
        PUBLISH,
        Q_DECLARE_OK,
        RawClient,
        _frame,
        _method,
        _shortstr,
    )

    client = RawClient(url)
    try:
        reply_to = DIRECT
        if mode == "queue":
            args = b"\x00\x00" + _shortstr("") + b"\x08" + b"\x00" * 4  # exclusive
            client.sock.sendall(_method(1, 50 << 16 | 10, args))
            ok = client._expect(Q_DECLARE_OK)
            reply_to = ok[1 : 1 + ok[0]].decode()
        consume = b"\x00\x00" + _shortstr(reply_to) + _shortstr("reply") + b"\x02" + b"\x00" * 4
        client.sock.sendall(_method(1, CONSUME, consume))  # no_ack
        client._expect(CONSUME_OK)
        # reply_to (flag bit 9) and correlation_id (bit 10), in flag order
        properties = struct.pack(">H", 1 << 10 | 1 << 9) + _shortstr("1") + _shortstr(reply_to)
        request = (
            _method(1, PUBLISH, b"\x00\x00" + _shortstr("") + _shortstr(queue) + b"\x00")
            + _frame(_HEADER, 1, struct.pack(">HHQ", 60, 0, len(body)) + properties)
            + _frame(_BODY, 1, body)
        )
        sock, buf, size = client.sock, client._buf, len(body)

        def call() -> None:
            sock.sendall(request)
            got = -1  # body octets of the reply; -1 until its header arrived
            while got < size:
                while len(buf) < 7 or len(buf) < 8 + _FRAME_HEADER.unpack_from(buf, 0)[2]:
                    client._fill()
                frame_type, _channel, length = _FRAME_HEADER.unpack_from(buf, 0)
                if frame_type == _HEADER:
                    got = 0
                elif frame_type == _BODY:
                    got += length
                del buf[: 8 + length]

        return calls.run(call)
    finally:
        client.close()


def run_amqp_trio(url: str, queue: str, mode: str, body: bytes, calls: Calls) -> Result:
    import trio

    import amqp_trio
    from amqp_sansio import BasicProperties

    async def main() -> Result:
        async with amqp_trio.connect(url) as conn, conn.channel() as ch:
            reply_to = DIRECT
            if mode == "queue":
                reply_to = (await ch.queue_declare(exclusive=True)).queue
            props = BasicProperties(reply_to=reply_to, correlation_id="1")
            async with ch.basic_consume(reply_to, no_ack=True) as replies:
                receive = replies.__anext__

                async def call() -> None:
                    await ch.basic_publish(body, routing_key=queue, properties=props)
                    check_reply((await receive()).body, body)

                return await calls.arun(call)

    return trio.run(main)


def run_amqp_asyncio(url: str, queue: str, mode: str, body: bytes, calls: Calls) -> Result:
    import asyncio

    import amqp_asyncio
    from amqp_sansio import BasicProperties

    async def main() -> Result:
        async with amqp_asyncio.connect(url) as conn, conn.channel() as ch:
            reply_to = DIRECT
            if mode == "queue":
                reply_to = (await ch.queue_declare(exclusive=True)).queue
            props = BasicProperties(reply_to=reply_to, correlation_id="1")
            async with ch.basic_consume(reply_to, no_ack=True) as replies:
                receive = replies.__anext__

                async def call() -> None:
                    await ch.basic_publish(body, routing_key=queue, properties=props)
                    check_reply((await receive()).body, body)

                return await calls.arun(call)

    return asyncio.run(main())


def run_amqp_blocking(url: str, queue: str, mode: str, body: bytes, calls: Calls) -> Result:
    import amqp_blocking
    from amqp_sansio import BasicProperties

    with amqp_blocking.connect(url) as conn, conn.channel() as ch:
        reply_to = DIRECT
        if mode == "queue":
            reply_to = ch.queue_declare(exclusive=True).queue
        props = BasicProperties(reply_to=reply_to, correlation_id="1")
        with ch.basic_consume(reply_to, no_ack=True) as replies:
            receive = iter(replies).__next__

            def call() -> None:
                ch.basic_publish(body, routing_key=queue, properties=props)
                check_reply(receive().body, body)

            return calls.run(call)


def run_pika(url: str, queue: str, mode: str, body: bytes, calls: Calls) -> Result:
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = connection.channel()
        reply_to = DIRECT
        if mode == "queue":
            reply_to = channel.queue_declare("", exclusive=True).method.queue
        got: list[bytes] = []

        def on_reply(_ch: object, _method: object, _props: object, reply: bytes) -> None:
            got.append(reply)

        channel.basic_consume(reply_to, on_reply, auto_ack=True)
        props = pika.BasicProperties(reply_to=reply_to, correlation_id="1")
        process = connection.process_data_events

        def call() -> None:
            channel.basic_publish("", queue, body, props)
            while not got:
                process(time_limit=None)
            check_reply(got.pop(), body)

        return calls.run(call)
    finally:
        connection.close()


def run_py_amqp(url: str, queue: str, mode: str, body: bytes, calls: Calls) -> Result:
    import amqp

    parts = urlsplit(url)
    connection = amqp.Connection(
        host=f"{parts.hostname or '127.0.0.1'}:{parts.port or 5672}",
        userid=unquote(parts.username or "guest"),
        password=unquote(parts.password or "guest"),
        virtual_host=unquote(parts.path[1:]) if len(parts.path) > 1 else "/",
    )
    connection.connect()
    try:
        channel = connection.channel()
        reply_to = DIRECT
        if mode == "queue":
            reply_to = channel.queue_declare("", exclusive=True).queue
        got: list[bytes] = []
        channel.basic_consume(reply_to, callback=lambda m: got.append(m.body), no_ack=True)
        drain = connection.drain_events

        def call() -> None:
            message = amqp.Message(body, reply_to=reply_to, correlation_id="1")
            channel.basic_publish(message, exchange="", routing_key=queue)
            while not got:
                drain(timeout=30)
            check_reply(got.pop(), body)

        return calls.run(call)
    finally:
        connection.close()


def run_aio_pika(url: str, queue: str, mode: str, body: bytes, calls: Calls) -> Result:
    import asyncio

    import aio_pika

    async def main() -> Result:
        connection = await aio_pika.connect(url)
        async with connection:
            channel = await connection.channel()
            exchange = channel.default_exchange
            replies: asyncio.Queue[bytes] = asyncio.Queue()
            if mode == "queue":
                reply_queue = await channel.declare_queue("", exclusive=True)
                reply_to = reply_queue.name

                async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                    replies.put_nowait(message.body)

                await reply_queue.consume(on_message, no_ack=True)
            else:
                # aio-pika cannot declare the pseudo-queue: consume it on the aiormq channel
                reply_to = DIRECT
                underlay = await channel.get_underlay_channel()

                async def on_raw(message: object) -> None:
                    replies.put_nowait(message.body)  # type: ignore[attr-defined]

                await underlay.basic_consume(DIRECT, on_raw, no_ack=True)

            async def call() -> None:
                message = aio_pika.Message(body, reply_to=reply_to, correlation_id="1")
                await exchange.publish(message, routing_key=queue)
                check_reply(await replies.get(), body)

            return await calls.arun(call)

    return asyncio.run(main())


RUNNERS: dict[str, Callable[[str, str, str, bytes, Calls], Result]] = {
    "core": run_core,
    "raw": run_raw,
    "amqp_trio": run_amqp_trio,
    "amqp_asyncio": run_amqp_asyncio,
    "amqp_blocking": run_amqp_blocking,
    "pika": run_pika,
    "aio-pika": run_aio_pika,
    "py-amqp": run_py_amqp,
}
DISTRIBUTIONS = {"pika": "pika", "aio-pika": "aio-pika", "py-amqp": "amqp"}


def worker(spec: str) -> int:
    """Run one library, every mode asked for; print one JSON line."""
    fields = json.loads(spec)
    lib = fields["lib"]
    calls = Calls(fields["warmup"], fields["calls"])
    body = b"x" * fields["size"]
    result: dict[str, object] = {}
    if lib in DISTRIBUTIONS:
        from importlib.metadata import PackageNotFoundError, version

        try:
            result["version"] = version(DISTRIBUTIONS[lib])
        except PackageNotFoundError:
            result["unavailable"] = f"{DISTRIBUTIONS[lib]} is not installed"
            print(json.dumps(result), flush=True)
            return 0
    for mode in fields["modes"]:
        try:
            latencies, cpu = RUNNERS[lib](fields["url"], fields["queue"], mode, body, calls)
        except Exception as exc:  # reported to the harness, which goes on
            result[mode] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        latencies.sort()
        result[mode] = {
            "p50": percentile(latencies, 50),
            "p99": percentile(latencies, 99),
            "max": latencies[-1],
            "cpu": cpu / len(latencies),
        }
    print(json.dumps(result), flush=True)
    return 0


def percentile(ordered: list[float], pct: float) -> float:
    """The nearest-rank percentile of an ordered list."""
    rank = max(1, min(len(ordered), round(pct / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


# -- the harness -------------------------------------------------------------------------------


def run_worker(spec: dict[str, object], timeout: float) -> dict[str, object]:
    try:
        done = subprocess.run(
            [sys.executable, str(HERE / "latency.py"), "--worker", json.dumps(spec)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"worker exited with {done.returncode}: {tail}"}
    outcome: dict[str, object] = json.loads(lines[-1])
    return outcome


def parse_list(text: str, allowed: list[str], what: str) -> list[str]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    unknown = [item for item in items if item not in allowed]
    if unknown or not items:
        raise SystemExit(f"unknown {what}: {', '.join(unknown) or text!r}; known: {allowed}")
    return items


def us(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e6:,.0f}"


Key = tuple[str, str, str]  # (target, mode, lib)


def report(
    samples: dict[Key, list[dict[str, float]]],
    problems: dict[Key, str],
    targets: list[str],
    modes: list[str],
    libs: list[str],
    rounds: int,
) -> tuple[list[str], dict[Key, dict[str, float]]]:
    medians: dict[Key, dict[str, float]] = {}
    for key, rows in samples.items():
        if rows:
            medians[key] = {
                stat: statistics.median(row[stat] for row in rows)
                for stat in ("p50", "p99", "max", "cpu")
            }
    lines = [
        (
            f"Round-trip latency in µs (median over {rounds} round(s) of each round's p50, p99, "
            "max) and client CPU µs per call; p50/core: the library's p50 over core's"
        ),
        "",
    ]
    missed: list[str] = []
    for target in targets:
        for mode in modes:
            lines.append(f"{target}, reply via {mode}:")
            lines.append("")
            lines.append("| lib | p50 | p99 | max | CPU/call | p50/core |")
            lines.append("|---|--:|--:|--:|--:|--:|")
            core = medians.get((target, mode, "core"))
            peer_p99 = [
                medians[(target, mode, p)]["p99"] for p in PEERS if (target, mode, p) in medians
            ]
            for lib in libs:
                row = medians.get((target, mode, lib))
                if row is None:
                    text = problems.get((target, mode, lib), "not measured")
                    lines.append(f"| {lib} | n/a: {text} | | | | |")
                    continue
                ratio = row["p50"] / core["p50"] if core else None
                cells = [lib, us(row["p50"]), us(row["p99"]), us(row["max"]), us(row["cpu"])]
                cells.append("-" if ratio is None else f"{ratio:.2f}x")
                lines.append("| " + " | ".join(cells) + " |")
                if lib in ADAPTERS:
                    if ratio is not None and ratio > MAX_P50_OVER_CORE:
                        missed.append(f"{target} {mode} {lib} p50/core {ratio:.2f}x")
                    if peer_p99 and row["p99"] > min(peer_p99):
                        missed.append(
                            f"{target} {mode} {lib} p99 {us(row['p99'])} > best peer "
                            f"{us(min(peer_p99))}"
                        )
            lines.append("")
    lines.append(
        f"Goals: every adapter's p50 at most {MAX_P50_OVER_CORE}x core's; its p99 no worse "
        "than the best peer's."
    )
    lines.append("  missed: " + "; ".join(missed) if missed else "  every measured goal met")
    return lines, medians


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("AMQP_URL", DEFAULT_URL))
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 200 calls, 1 round, no peers"
    )
    parser.add_argument("--libs", help=f"from {','.join(LIBS)} (default: all; --quick: ours)")
    parser.add_argument("--modes", default=",".join(MODES), help="direct,queue")
    parser.add_argument("--targets", default=",".join(TARGETS), help="rabbitmq,embedded")
    parser.add_argument("--calls", type=int, help="timed calls per round (default 10,000)")
    parser.add_argument("--warmup", type=int, help="calls before the clock (default 500)")
    parser.add_argument("--rounds", type=int, help="rounds, medians reported (default 5)")
    parser.add_argument("--size", type=int, default=64, help="request and reply body octets")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per worker")
    parser.add_argument("--json", type=Path, help="write samples and medians here")
    parser.add_argument("--responder", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.responder is not None:
        return responder(*args.responder)
    if args.worker is not None:
        return worker(args.worker)
    default_libs = QUICK_LIBS if args.quick else LIBS
    libs = parse_list(args.libs or ",".join(default_libs), LIBS, "library")
    modes = parse_list(args.modes, MODES, "mode")
    targets = parse_list(args.targets, TARGETS, "target")
    calls = args.calls or (200 if args.quick else 10_000)
    warmup = args.warmup if args.warmup is not None else (20 if args.quick else 500)
    rounds = args.rounds or (1 if args.quick else 5)
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))

    samples: dict[Key, list[dict[str, float]]] = {
        (t, m, lib): [] for t in targets for m in modes for lib in libs
    }
    problems: dict[Key, str] = {}
    versions: dict[str, str] = {}
    started = time.monotonic()
    load_before = os.getloadavg()
    for target in targets:
        embedded = None
        url = args.url
        if target == "embedded":
            from broker import EmbeddedBroker

            embedded = EmbeddedBroker(None)
            url = embedded.url
        try:
            responder_process = Responder(url)
        except (OSError, RuntimeError) as exc:
            if embedded is not None:
                embedded.stop()
            for key in samples:
                if key[0] == target:
                    problems[key] = f"no responder: {exc}"
            continue
        try:
            for run in range(rounds):
                shift = run % len(libs)
                for lib in libs[shift:] + libs[:shift]:
                    spec = {
                        "lib": lib,
                        "url": url,
                        "queue": responder_process.queue,
                        "modes": modes,
                        "calls": calls,
                        "warmup": warmup,
                        "size": args.size,
                    }
                    outcome = run_worker(spec, args.timeout)
                    if "version" in outcome:
                        versions[lib] = str(outcome["version"])
                    notes = []
                    for mode in modes:
                        got = outcome.get(mode)
                        if isinstance(got, dict) and "p50" in got:
                            samples[(target, mode, lib)].append(got)
                            notes.append(f"{mode} p50 {us(got['p50'])} µs")
                        else:
                            why = (
                                got.get("error")
                                if isinstance(got, dict)
                                else outcome.get("unavailable", outcome.get("error"))
                            )
                            problems[(target, mode, lib)] = str(why)
                            notes.append(f"{mode} n/a: {why}")
                    print(
                        f"[{time.monotonic() - started:5.0f}s] {target} round {run + 1} {lib}: "
                        + ", ".join(notes),
                        file=sys.stderr,
                        flush=True,
                    )
        finally:
            responder_process.stop()
            if embedded is not None:
                embedded.stop()
    for key in list(problems):
        if samples.get(key):
            del problems[key]
    lines, medians = report(samples, problems, targets, modes, libs, rounds)
    print("\n".join(lines))
    described = ", ".join(f"{lib} {v}" for lib, v in versions.items())
    print(
        f"\n{calls:,} calls after {warmup} warm-up, {args.size} B bodies; Python "
        f"{platform.python_version()}, {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} CPUs, load average {load_before[0]:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after; {described or 'no peers'}; "
        f"{time.monotonic() - started:.0f} s"
    )
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "calls": calls,
                    "warmup": warmup,
                    "rounds": rounds,
                    "size": args.size,
                    "versions": versions,
                    "load_average": [load_before, os.getloadavg()],
                    "samples": [
                        {"target": t, "mode": m, "lib": lib, "rounds": rows}
                        for (t, m, lib), rows in samples.items()
                    ],
                    "medians": [
                        {"target": t, "mode": m, "lib": lib, **row}
                        for (t, m, lib), row in medians.items()
                    ],
                    "problems": [
                        {"target": t, "mode": m, "lib": lib, "text": text}
                        for (t, m, lib), text in problems.items()
                    ],
                },
                indent=2,
            )
            + "\n"
        )
    failed = [text for text in problems.values() if "not installed" not in text]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
