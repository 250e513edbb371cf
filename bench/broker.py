"""The embedded broker (``amqp_broker``) next to RabbitMQ: amqp_trio's throughput against each.

For every size (default 1 KiB) and run, amqp_trio publishes N messages with pipelined confirms
(window 1000), publishes N without confirms, and consumes N (prefetch 1000, a ``multiple`` ack
every 100) against the RabbitMQ at ``AMQP_URL`` (default ``amqp://guest:guest@127.0.0.1:5672/``)
and against an embedded broker that this script starts as a subprocess
(``python -m amqp_broker --port 0``). Each case is a fresh worker process (the timed part is
``bench/_e2e_libs.py``'s ``run_amqp_trio``, the same as ``e2e.py``'s) on a fresh, uniquely named
queue that the harness declares (and fills, for consume, with the raw client) and deletes.

It prints the median msgs/s per case, embedded/RabbitMQ against the issue's goal (>= 0.5 at
1 KiB), and the broker process's CPU time per message (user + system from ``/proc/PID/stat``
around the case), which a busy machine disturbs far less than the throughput.

With ``--memory`` it measures instead what each broker holds: per idle connection (a raw
client with one channel open and no heartbeats; default 1,000 of them), per queue (exclusive,
classic; default 10,000) and per 1,000 queued 1 KiB messages (default 10,000 in one queue),
each as the growth of the broker's memory over its load: the embedded broker's resident set
(``VmRSS``), RabbitMQ's total memory as ``rabbitmqctl status`` reports it (``rss``; run as
root). The embedded broker runs with its default limits (handshake timeout, output bound,
watermark) in place.

    .venv/bin/python bench/broker.py                       # 20 000 messages, 3 runs, medians
    .venv/bin/python bench/broker.py --count 200 --runs 1  # smoke run
    .venv/bin/python bench/broker.py --json out.json --broker-profile /tmp/broker.prof
    .venv/bin/python bench/broker.py --memory              # 1,000 connections, 10,000 queues
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from _e2e_libs import Case, run_amqp_trio
from _raw import RawClient

if TYPE_CHECKING:
    from collections.abc import Callable

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/"
HERE = Path(__file__).resolve().parent
TARGETS = ["rabbitmq", "embedded"]
OPS = ["confirm", "publish", "consume"]
OP_TITLES = {
    "confirm": "publish, confirms (window 1000)",
    "publish": "publish, no confirms",
    "consume": "consume (prefetch 1000, ack/100)",
}
SIZES = {"16B": 16, "1KiB": 1024, "64KiB": 65536}
GOAL = 0.5
GOAL_SIZE = "1KiB"
#: The embedded broker holds at most half of what RabbitMQ does per connection and per queue.
MEMORY_GOAL = 0.5
CLOCK_TICK = os.sysconf("SC_CLK_TCK")


# -- worker ----------------------------------------------------------------------------------


def worker(spec: str) -> int:
    """Run one amqp_trio case described by the JSON ``spec``; print its timing as JSON."""
    case = Case(**json.loads(spec))
    result: dict[str, object] = {}
    try:
        result["seconds"], result["cpu_seconds"] = run_amqp_trio(case)
    except Exception as exc:  # reported to the harness, which goes on with other cases
        result["error"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(result), flush=True)
    return 0


# -- the brokers -----------------------------------------------------------------------------


def process_cpu(pid: int | None) -> float | None:
    """User + system CPU seconds of process ``pid`` (all its threads), or None."""
    if pid is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # fields after the parenthesised command name; utime and stime are fields 14 and 15
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICK


def find_rabbitmq_pid(port: int) -> int | None:
    """The pid of the process listening on ``port`` (RabbitMQ's Erlang VM), else None.

    By the listening socket, not by the name ``beam.smp``: a test may run a second node."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # local address is HOST:PORT in hex; state 0A is LISTEN; field 9 is the inode
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return None
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                if os.readlink(fd) in inodes:
                    return int(entry.name)
        except OSError:
            continue  # gone, or not ours to read
    return None


class EmbeddedBroker:
    """``python -m amqp_broker`` on a free port, as a subprocess."""

    def __init__(self, profile: str | None) -> None:
        command = [sys.executable, "-m", "amqp_broker", "--host", "127.0.0.1", "--port", "0"]
        if profile:
            command += ["--profile", profile]
        self.process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        assert self.process.stderr is not None
        line = self.process.stderr.readline()
        if "listening on" not in line:
            self.process.kill()
            raise RuntimeError(f"the embedded broker did not start: {line.strip()!r}")
        port = int(line.rsplit(":", 1)[1])
        self.url = f"amqp://guest:guest@127.0.0.1:{port}/"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# -- memory ----------------------------------------------------------------------------------

KIB = 1024


def process_rss(pid: int) -> int:
    """The resident set of process ``pid`` in octets."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * KIB
    raise RuntimeError(f"no VmRSS for {pid}")


def rabbitmq_memory(rabbitmqctl: str) -> int:
    """RabbitMQ's total memory as ``rabbitmqctl status`` reports it (the rss strategy)."""
    done = subprocess.run(
        [*rabbitmqctl.split(), "status", "--formatter", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return int(json.loads(done.stdout)["memory"]["total"]["rss"])


def measure_memory(url: str, read: Callable[[], int], args: argparse.Namespace) -> dict[str, float]:
    """Octets per idle connection, per queue and per 1,000 queued messages of 1 KiB."""

    def settled() -> int:
        time.sleep(args.memory_settle)  # RabbitMQ's figures lag a little
        return read()

    base = settled()
    clients = [RawClient(url) for _ in range(args.memory_connections)]
    with_connections = settled()
    admin = RawClient(url)
    try:
        queues = [f"bench-mem-{uuid.uuid4().hex[:12]}" for _ in range(args.memory_queues)]
        admin.queue_declare_exclusive(queues)
        with_queues = settled()
        body = b"m" * SIZES[GOAL_SIZE]
        admin.publish(queues[0], args.memory_messages, body)
        depth = admin.wait_for_depth(queues[0], args.memory_messages)
        if depth != args.memory_messages:
            raise RuntimeError(f"published {args.memory_messages}, the queue holds {depth}")
        with_messages = settled()
    finally:
        admin.close()  # the exclusive queues go with it
        for client in clients:
            client.close()
    return {
        "connection": (with_connections - base) / args.memory_connections,
        "queue": (with_queues - with_connections) / args.memory_queues,
        "1000_messages": (with_messages - with_queues) / args.memory_messages * 1000,
    }


def run_memory(args: argparse.Namespace, targets: list[str]) -> int:
    """The ``--memory`` mode: print (and with ``--json`` write) each broker's figures."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, max(soft, 2 * args.memory_connections + 256))
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    print(
        f"bench/broker.py --memory: {args.memory_connections} idle connections, "
        f"{args.memory_queues} queues, {args.memory_messages} messages of 1 KiB; "
        f"{platform.python_implementation()} {platform.python_version()}",
        flush=True,
    )
    figures: dict[str, dict[str, float]] = {}
    for target in targets:
        if target == "rabbitmq":
            read = functools.partial(rabbitmq_memory, args.rabbitmqctl)
            figures[target] = measure_memory(args.url, read, args)
        else:
            embedded = EmbeddedBroker(None)
            try:
                read = functools.partial(process_rss, embedded.process.pid)
                figures[target] = measure_memory(embedded.url, read, args)
            finally:
                embedded.stop()
        got = figures[target]
        print(
            f"  {target:<8} {got['connection'] / KIB:8.1f} KiB/connection "
            f"{got['queue'] / KIB:8.2f} KiB/queue "
            f"{got['1000_messages'] / KIB:9.1f} KiB/1000 messages",
            flush=True,
        )
    if len(figures) == 2:
        print()
        for key, label in (("connection", "idle connection"), ("queue", "queue")):
            ratio = figures["embedded"][key] / figures["rabbitmq"][key]
            mark = "met" if ratio <= MEMORY_GOAL else "MISSED"
            print(f"goal embedded/RabbitMQ <= {MEMORY_GOAL} per {label}: {ratio:.2f} {mark}")
        ratio = figures["embedded"]["1000_messages"] / figures["rabbitmq"]["1000_messages"]
        print(f"embedded/RabbitMQ per 1000 messages: {ratio:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"memory": figures}, indent=2) + "\n")
    return 0


# -- harness ---------------------------------------------------------------------------------


def run_worker(case: Case, timeout: float) -> dict[str, object]:
    try:
        done = subprocess.run(
            [sys.executable, str(HERE / "broker.py"), "--worker", json.dumps(asdict(case))],
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


def run_one(
    url: str, pid: int | None, op: str, size: str, args: argparse.Namespace
) -> dict[str, object]:
    queue = f"bench-broker-{op}-{size}-{uuid.uuid4().hex[:12]}"
    case = Case(
        url=url,
        op=op,
        queue=queue,
        count=args.count,
        body_size=SIZES[size],
        window=1000,
        prefetch=1000,
        ack_every=100,
    )
    admin = RawClient(url)
    try:
        admin.queue_declare(queue)
        try:
            if op == "consume":
                admin.publish(queue, case.count, case.body)
                depth = admin.wait_for_depth(queue, case.count)
                if depth != case.count:
                    return {"error": f"could not fill the queue: {depth} of {case.count}"}
            cpu_before = process_cpu(pid)
            outcome = run_worker(case, args.timeout)
            cpu_after = process_cpu(pid)
            if op != "consume" and "seconds" in outcome:
                depth = admin.wait_for_depth(queue, case.count, timeout=10.0)
                if depth != case.count:
                    return {"error": f"published {case.count}, the queue holds {depth}"}
            if cpu_before is not None and cpu_after is not None:
                outcome["broker_cpu_seconds"] = cpu_after - cpu_before
            return outcome
        finally:
            admin.queue_delete(queue)
    finally:
        admin.close()


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--url", default=os.environ.get("AMQP_URL", DEFAULT_URL))
    parser.add_argument("--count", "-n", type=int, default=20_000, help="messages per case")
    parser.add_argument("--runs", type=int, default=3, help="runs per case (median)")
    parser.add_argument("--sizes", default=GOAL_SIZE, help=f"comma list of {', '.join(SIZES)}")
    parser.add_argument("--ops", default=",".join(OPS), help=f"comma list of {', '.join(OPS)}")
    parser.add_argument("--targets", default=",".join(TARGETS), help="rabbitmq,embedded")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per case")
    parser.add_argument("--json", help="write every sample and the medians to this file")
    parser.add_argument(
        "--broker-profile", help="run the embedded broker under cProfile into this file"
    )
    parser.add_argument(
        "--memory", action="store_true", help="measure memory per connection/queue/message"
    )
    parser.add_argument("--memory-connections", type=int, default=1000, metavar="N")
    parser.add_argument("--memory-queues", type=int, default=10_000, metavar="N")
    parser.add_argument("--memory-messages", type=int, default=10_000, metavar="N")
    parser.add_argument(
        "--memory-settle",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="wait before each memory reading",
    )
    parser.add_argument(
        "--rabbitmqctl",
        default="rabbitmqctl",
        metavar="COMMAND",
        help="how to run rabbitmqctl for the broker at --url (e.g. with -n NODE)",
    )
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker)
    sizes = [s for s in args.sizes.split(",") if s]
    ops = [o for o in args.ops.split(",") if o]
    targets = [t for t in args.targets.split(",") if t]
    for name, chosen, allowed in (
        ("size", sizes, SIZES),
        ("op", ops, OPS),
        ("target", targets, TARGETS),
    ):
        bad = [item for item in chosen if item not in allowed]
        if bad:
            parser.error(f"unknown {name}: {', '.join(bad)} (choose from {', '.join(allowed)})")
    if args.count < 1 or args.runs < 1:
        parser.error("--count and --runs must be at least 1")
    if args.memory:
        return run_memory(args, targets)

    embedded = EmbeddedBroker(args.broker_profile) if "embedded" in targets else None
    try:
        where = {"rabbitmq": args.url, "embedded": embedded.url if embedded else ""}
        pids = {
            "rabbitmq": find_rabbitmq_pid(urlsplit(args.url).port or 5672),
            "embedded": embedded.process.pid if embedded else None,
        }
        load = os.getloadavg()
        print(
            f"bench/broker.py: N={args.count}, {args.runs} run(s), amqp_trio on "
            f"{platform.python_implementation()} {platform.python_version()}; load average "
            f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; RabbitMQ pid {pids['rabbitmq']}, "
            f"embedded pid {pids['embedded']}",
            flush=True,
        )
        samples: dict[str, list[dict[str, object]]] = {}
        failed = False
        for run in range(args.runs):
            order = targets[run % len(targets) :] + targets[: run % len(targets)]
            for size in sizes:
                for op in ops:
                    for target in order:
                        outcome = run_one(where[target], pids[target], op, size, args)
                        samples.setdefault(f"{target}/{op}/{size}", []).append(outcome)
                        if "error" in outcome:
                            failed = True
                            print(f"  {target} {op} {size}: {outcome['error']}", flush=True)
                            continue
                        rate = args.count / float(str(outcome["seconds"]))
                        cpu = outcome.get("broker_cpu_seconds")
                        cpu_text = (
                            f", broker CPU {float(str(cpu)) / args.count * 1e6:.1f} us/msg"
                            if cpu is not None
                            else ""
                        )
                        print(
                            f"  run {run + 1} {target:<8} {op:<7} {size:<5} {rate:>9,.0f} msgs/s"
                            + cpu_text,
                            flush=True,
                        )
    finally:
        if embedded is not None:
            embedded.stop()

    medians: dict[str, dict[str, float | None]] = {}
    for key, outcomes in samples.items():
        ok = [o for o in outcomes if "seconds" in o]
        medians[key] = {
            "msgs_per_s": median([args.count / float(str(o["seconds"])) for o in ok]),
            "broker_cpu_us_per_msg": median(
                [
                    float(str(o["broker_cpu_seconds"])) / args.count * 1e6
                    for o in ok
                    if "broker_cpu_seconds" in o
                ]
            ),
            "client_cpu_us_per_msg": median(
                [float(str(o["cpu_seconds"])) / args.count * 1e6 for o in ok]
            ),
        }

    def cell(value: float | None, fmt: str) -> str:
        return "n/a" if value is None else format(value, fmt)

    print()
    print(
        f"{'case':<34} {'size':<6} {'RabbitMQ msgs/s':>15} {'embedded msgs/s':>15} "
        f"{'ratio':>6}  {'broker CPU us/msg (RMQ / emb)':>29}"
    )
    verdicts = []
    for size in sizes:
        for op in ops:
            rmq = medians.get(f"rabbitmq/{op}/{size}", {})
            emb = medians.get(f"embedded/{op}/{size}", {})
            rate_r, rate_e = rmq.get("msgs_per_s"), emb.get("msgs_per_s")
            ratio = rate_e / rate_r if rate_r and rate_e else None
            print(
                f"{OP_TITLES[op]:<34} {size:<6} {cell(rate_r, ',.0f'):>15} "
                f"{cell(rate_e, ',.0f'):>15} {cell(ratio, '.2f'):>6}  "
                f"{cell(rmq.get('broker_cpu_us_per_msg'), '.1f'):>14} / "
                f"{cell(emb.get('broker_cpu_us_per_msg'), '.1f'):<12}"
            )
            if size == GOAL_SIZE and ratio is not None:
                verdicts.append((op, ratio))
    if verdicts:
        print()
        for op, ratio in verdicts:
            mark = "met" if ratio >= GOAL else "MISSED"
            print(f"goal embedded/RabbitMQ >= {GOAL:.0%} at {GOAL_SIZE}, {op}: {ratio:.2f} {mark}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "count": args.count,
                    "runs": args.runs,
                    "load_average": load,
                    "python": platform.python_version(),
                    "samples": samples,
                    "medians": medians,
                },
                indent=2,
            )
            + "\n"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
