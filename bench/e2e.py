"""End-to-end benchmark against a real broker: amqp_trio next to five peers and a raw client.

For each library it publishes N messages without and with publisher confirms and consumes N
messages (prefetch 1000, a ``multiple`` ack every 100), with bodies of 16 B, 1 KiB and 64 KiB,
against the RabbitMQ at ``AMQP_URL`` (default ``amqp://guest:guest@127.0.0.1:5672/``). The
libraries: amqp_trio (ours; this project's amqp_asyncio and amqp_blocking run too, next to
their own peers), aio-pika, aiormq, pika (BlockingConnection), py-amqp and
async_amqp (its Trio flavour, run from its own virtualenv ``bench/.venv-async-amqp`` because it
needs pamqp < 4), plus a raw client that writes pre-encoded frames from plain sockets: the
broker's ceiling on this machine, and ``core``, a bare blocking socket loop over
``amqp_sansio.Connection`` (``bench/_core_client.py``): the floor the adapters are held against
(each adapter's client CPU per message over core's, issue 20). ``--broker embedded`` runs it all
against the embedded broker (``python -m amqp_broker`` on a free port) instead; it serves AMQP
0-10 too, and each adapter's 0-10 client (``amqp_trio-0-10``, ...) is then printed next to its
0-9-1 one, client CPU per message and msgs/s of 0-10 over 0-9-1's (issue 35: at most 1.1x).
``bench/instructions.py`` counts the same cases' instructions per message with callgrind.

Every case runs in its own worker process against a fresh, uniquely named queue that the harness
declares (and, for consume, fills) beforehand and deletes afterwards; publishes are checked to
have all arrived. The clock covers only the operation (see ``bench/_e2e_libs.py``).

    .venv/bin/python bench/e2e.py                    # full run: 3 runs, medians
    .venv/bin/python bench/e2e.py --quick            # smoke run: small N, 1 run
    .venv/bin/python bench/e2e.py --libs raw,amqp_trio --sizes 1KiB --runs 5
    .venv/bin/python bench/e2e.py --libs raw,core,amqp_trio,amqp_asyncio,amqp_blocking --runs 5
    .venv/bin/python bench/e2e.py --broker embedded --libs raw,core,amqp_trio --runs 5
    .venv/bin/python bench/e2e.py --json out.json --chart docs/img/e2e.png
    .venv/bin/python bench/e2e.py --libs tracing --sizes 1KiB   # the cost of OpenTelemetry

This file is also the worker (``--worker``); its top-level imports are the standard library
only, so it runs under the async_amqp virtualenv too.
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
import time
import uuid
from dataclasses import asdict
from pathlib import Path

from _e2e_libs import RUNNERS, Case
from _raw import RawClient, RawProtocolError

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/"
HERE = Path(__file__).resolve().parent
ASYNC_AMQP_PYTHON = HERE / ".venv-async-amqp" / "bin" / "python"

OURS = "amqp_trio"
RAW = "raw"
#: a bare blocking socket loop over amqp_sansio.Connection: what the adapters add is measured
#: against it (issue 20)
CORE = "core"
# this project's other adapters, measured against their own peers (issue 5), never as peers
OUR_OTHERS = ["amqp_asyncio", "amqp_blocking"]
# the cost of tracing (--libs tracing picks them with amqp_trio and aio-pika): amqp_trio traced
# through OpenTelemetry's no-op providers and into the SDK's in-memory exporter, next to
# aio-pika with opentelemetry-instrumentation-aio-pika into the same SDK setup
TRACED = ["amqp_trio+otel-noop", "amqp_trio+otel-sdk", "aio-pika+otel-sdk"]
TRACING_SET = [OURS, *TRACED[:2], "aio-pika", TRACED[2]]
# AMQP 0-10 (issue 19): our three clients and qpid-python's under Python 2.7; only the embedded
# broker speaks it (--broker embedded), on the port its 0-9-1 clients use
LIBS_0_10 = ["amqp_trio-0-10", "amqp_asyncio-0-10", "amqp_blocking-0-10", "qpid-python-0-10"]
DEFAULT_LIBS = [RAW, CORE, OURS, *OUR_OTHERS, "aio-pika", "aiormq", "pika", "py-amqp", "async_amqp"]
LIBS = [*DEFAULT_LIBS, *TRACED, *LIBS_0_10]
PEERS = [lib for lib in DEFAULT_LIBS if lib not in (RAW, CORE, OURS, *OUR_OTHERS)]
DISTRIBUTIONS = {
    OURS: "amqp-sansio",
    "amqp_asyncio": "amqp-sansio",
    "amqp_blocking": "amqp-sansio",
    "aio-pika": "aio-pika",
    "aiormq": "aiormq",
    "pika": "pika",
    "py-amqp": "amqp",
    "async_amqp": "async-amqp",
    "amqp_trio+otel-noop": "amqp-sansio",
    "amqp_trio+otel-sdk": "amqp-sansio",
    "aio-pika+otel-sdk": "aio-pika",
    "amqp_trio-0-10": "amqp-sansio",
    "amqp_asyncio-0-10": "amqp-sansio",
    "amqp_blocking-0-10": "amqp-sansio",
}
OPS = ["publish", "confirm", "consume"]
OP_TITLES = {
    "publish": "publish, no confirms",
    "confirm": "publish with confirms",
    "consume": "consume (prefetch 1000, ack every 100)",
}
SIZES = {"16B": 16, "1KiB": 1024, "64KiB": 65536}
FULL_COUNT = {"16B": 20_000, "1KiB": 20_000, "64KiB": 2_000}
QUICK_COUNT = {"16B": 500, "1KiB": 500, "64KiB": 50}
# (op, minimum ours/raw, minimum ours/best peer) at 1 KiB, from the issue
GOALS = [("confirm", 0.7, 2.0), ("publish", 0.8, None), ("consume", 0.8, None)]
# issue 5, at 1 KiB: (adapter, minimum ratio over each named peer on every case, its peers,
# minimum over raw with confirms)
OTHER_GOALS = [
    ("amqp_asyncio", 2.0, ("aio-pika", "aiormq"), 0.6),
    ("amqp_blocking", 1.5, ("pika", "py-amqp"), 0.6),
]
GOAL_SIZE = "1KiB"
# issue 20, at every size: each adapter's client CPU per message at most this times core's,
# and amqp_trio's msgs/s at least this times raw's
ADAPTERS = [OURS, *OUR_OTHERS]
MAX_CPU_OVER_CORE = 1.3
MIN_TRIO_OVER_RAW = 0.9
# issue 35: each adapter's 0-10 client CPU per message at most this times its 0-9-1 client's
MAX_CPU_0_10 = 1.1
MAX_ATTEMPTS = 3


# -- worker ----------------------------------------------------------------------------------


def worker(spec: str) -> int:
    """Run one case described by the JSON ``spec``; print one JSON line with the outcome."""
    fields = json.loads(spec)
    lib = fields.pop("lib")
    case = Case(**fields)
    result: dict[str, object] = {}
    dist = DISTRIBUTIONS.get(lib)
    if dist is not None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            result["version"] = version(dist)
        except PackageNotFoundError:
            result["version"] = "?"
    try:
        result["seconds"], result["cpu_seconds"] = RUNNERS[lib](case)
    except ImportError as exc:
        result["unavailable"] = f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # reported to the harness, which goes on with other cases
        result["error"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(result), flush=True)
    return 0


# -- harness ---------------------------------------------------------------------------------


def python_for(lib: str) -> tuple[Path | str | None, str]:
    if lib != "async_amqp":
        return sys.executable, ""
    if ASYNC_AMQP_PYTHON.exists():
        return ASYNC_AMQP_PYTHON, ""
    return None, (
        f"{ASYNC_AMQP_PYTHON.parent.parent.relative_to(HERE.parent)} does not exist; `make bench` "
        "creates it (python3.11 -m venv, then pip install async-amqp==0.5.5 trio)"
    )


def run_case(lib: str, case: Case, timeout: float) -> dict[str, object]:
    python, why = python_for(lib)
    if python is None:
        return {"unavailable": why}
    spec = json.dumps({"lib": lib, **asdict(case)})
    try:
        done = subprocess.run(
            [str(python), str(HERE / "e2e.py"), "--worker", spec],
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
    admin: RawClient, lib: str, op: str, size: str, count: int, args: argparse.Namespace
) -> dict[str, object]:
    queue = f"bench-e2e-{lib}-{op}-{size}-{uuid.uuid4().hex[:12]}"
    body_size = SIZES[size]
    case = Case(
        url=args.url,
        op=op,
        queue=queue,
        count=count,
        body_size=body_size,
        window=args.window,
        prefetch=args.prefetch,
        ack_every=args.ack_every,
    )
    admin.queue_declare(queue)
    try:
        if op == "consume":
            admin.publish(queue, count, case.body)
            depth = admin.wait_for_depth(queue, count)
            if depth != count:
                return {"error": f"could not fill the queue: {depth} of {count} messages"}
        outcome = run_case(lib, case, args.timeout)
        if op != "consume" and "seconds" in outcome:
            depth = admin.wait_for_depth(queue, count, timeout=10.0)
            if depth != count:
                outcome = {"error": f"published {count}, the queue holds {depth}"}
        return outcome
    finally:
        admin.queue_delete(queue)


def run_measured(
    admin: RawClient, lib: str, op: str, size: str, count: int, args: argparse.Namespace
) -> dict[str, object]:
    """:func:`run_one`, run again when the broker blocked publishers (a memory alarm, e.g.
    another process testing ``connection.blocked``) while it ran: such a sample measures
    the alarm, not the library."""
    for _attempt in range(MAX_ATTEMPTS):
        if admin.check_blocked(wait=120.0) and admin.blocked:
            return {"error": "the broker has blocked publishers for 2 minutes (memory alarm?)"}
        outcome = run_one(admin, lib, op, size, count, args)
        if not admin.check_blocked():
            return outcome
        print(
            f"e2e: the broker blocked publishers during {lib} {op} {size}: again", file=sys.stderr
        )
    return {"error": f"the broker blocked publishers during {MAX_ATTEMPTS} attempts"}


def sources_fingerprint() -> str:
    """A hash of amqp_trio's and amqp_sansio's sources: the numbers belong to this state."""
    import hashlib

    digest = hashlib.sha256()
    for package in ("amqp_sansio", "amqp_trio"):
        for path in sorted((HERE.parent / "src" / package).rglob("*.py")):
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def rotated(items: list[str], by: int) -> list[str]:
    by %= max(1, len(items))
    return items[by:] + items[:by]


def fmt_rate(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:,.0f}"


def fmt_ratio(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def summarise(
    samples: dict[tuple[str, str, str], list[float]],
) -> dict[tuple[str, str, str], float]:
    """Median msgs/s per (op, size, lib)."""
    return {key: statistics.median(rates) for key, rates in samples.items() if rates}


def ratios(
    medians: dict[tuple[str, str, str], float], op: str, size: str, libs: list[str]
) -> tuple[float | None, float | None, str | None]:
    ours = medians.get((op, size, OURS))
    raw = medians.get((op, size, RAW))
    peer_rates = {
        lib: medians[(op, size, lib)] for lib in libs if lib in PEERS and (op, size, lib) in medians
    }
    best_peer = max(peer_rates, key=peer_rates.__getitem__) if peer_rates else None
    over_raw = ours / raw if ours is not None and raw else None
    over_peer = ours / peer_rates[best_peer] if ours is not None and best_peer else None
    return over_raw, over_peer, best_peer


def print_table(
    medians: dict[tuple[str, str, str], float],
    problems: dict[tuple[str, str, str], str],
    libs: list[str],
    ops: list[str],
    sizes: list[str],
    counts: dict[str, int],
    runs: int,
) -> list[str]:
    lines = [f"msgs/s, median of {runs} run(s); ratios are amqp_trio / raw and / best peer", ""]
    header = ["case", "N", *libs, "ours/raw", "ours/best peer"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join(["---", "--:"] + ["--:"] * (len(libs) + 2)) + "|")
    for op in ops:
        for size in sizes:
            cells = [f"{op} {size}", f"{counts[size]:,}"]
            for lib in libs:
                rate = medians.get((op, size, lib))
                cells.append(
                    fmt_rate(rate)
                    if rate is not None
                    else ("n/a" if (op, size, lib) in problems else "-")
                )
            over_raw, over_peer, best = ratios(medians, op, size, libs)
            cells.append(fmt_ratio(over_raw))
            cells.append(f"{fmt_ratio(over_peer)} ({best})" if best and over_peer else "-")
            lines.append("| " + " | ".join(cells) + " |")
    if problems:
        lines.append("")
        lines.append("n/a:")
        seen: set[tuple[str, str]] = set()
        for (op, size, lib), text in sorted(problems.items()):
            if (lib, text) in seen and text.startswith("unavailable"):
                continue
            seen.add((lib, text))
            lines.append(f"  {lib} {op} {size}: {text}")
    return lines


def cpu_table(
    cpu_medians: dict[tuple[str, str, str], float],
    libs: list[str],
    ops: list[str],
    sizes: list[str],
    runs: int,
) -> list[str]:
    """The client process's CPU time per message while timed: what each library costs,
    much less disturbed by a busy broker or machine than msgs/s."""
    lines = [f"client CPU µs per message (process time while timed), median of {runs} run(s)", ""]
    lines.append("| case | " + " | ".join(libs) + " |")
    lines.append("|---|" + "--:|" * len(libs))
    for op in ops:
        for size in sizes:
            cells = [f"{op} {size}"]
            for lib in libs:
                value = cpu_medians.get((op, size, lib))
                cells.append("-" if value is None else f"{value:.1f}")
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def adapter_lines(
    medians: dict[tuple[str, str, str], float],
    cpu_medians: dict[tuple[str, str, str], float],
    libs: list[str],
    ops: list[str],
    sizes: list[str],
) -> list[str]:
    """Issue 20: each adapter's client CPU per message over core's; amqp_trio's msgs/s over
    raw's."""
    adapters = [lib for lib in ADAPTERS if lib in libs]
    lines = [
        (
            f"Adapter overhead: client CPU per message / core's (goal <= {MAX_CPU_OVER_CORE}x); "
            f"{OURS} msgs/s / raw's (goal >= {MIN_TRIO_OVER_RAW}x)"
        ),
        "",
        "| case | " + " | ".join(f"{lib} CPU/core" for lib in adapters) + f" | {OURS}/raw |",
        "|---|" + "--:|" * (len(adapters) + 1),
    ]
    missed: list[str] = []
    for op in ops:
        for size in sizes:
            cells = [f"{op} {size}"]
            core = cpu_medians.get((op, size, CORE))
            for lib in adapters:
                cpu = cpu_medians.get((op, size, lib))
                ratio = cpu / core if cpu is not None and core else None
                cells.append(fmt_ratio(ratio))
                if ratio is not None and ratio > MAX_CPU_OVER_CORE:
                    missed.append(f"{lib} CPU {op} {size} {ratio:.2f}x")
            ours, raw = medians.get((op, size, OURS)), medians.get((op, size, RAW))
            over_raw = ours / raw if ours is not None and raw else None
            cells.append(fmt_ratio(over_raw))
            if over_raw is not None and over_raw < MIN_TRIO_OVER_RAW:
                missed.append(f"{OURS}/raw {op} {size} {over_raw:.2f}x")
            lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("  missed: " + ", ".join(missed) if missed else "  every measured goal met")
    return lines


def protocol_lines(
    medians: dict[tuple[str, str, str], float],
    cpu_medians: dict[tuple[str, str, str], float],
    libs: list[str],
    ops: list[str],
    sizes: list[str],
) -> list[str]:
    """Issue 35: each adapter's 0-10 client next to its 0-9-1 one on the same broker, client
    CPU per message (and msgs/s) of 0-10 over 0-9-1's."""
    pairs = [(lib, f"{lib}-0-10") for lib in ADAPTERS if lib in libs and f"{lib}-0-10" in libs]
    if not pairs:
        return []
    lines = [
        f"0-10 / 0-9-1 per adapter: client CPU per message (goal <= {MAX_CPU_0_10}x), msgs/s",
        "",
        "| case | "
        + " | ".join(f"{lib} CPU 0-10/0-9-1 | {lib} msgs/s 0-10/0-9-1" for lib, _ in pairs)
        + " |",
        "|---|" + "--:|--:|" * len(pairs),
    ]
    missed: list[str] = []
    for op in ops:
        for size in sizes:
            cells = [f"{op} {size}"]
            for old, new in pairs:
                cpu_old = cpu_medians.get((op, size, old))
                cpu_new = cpu_medians.get((op, size, new))
                cpu = cpu_new / cpu_old if cpu_new is not None and cpu_old else None
                rate_old, rate_new = medians.get((op, size, old)), medians.get((op, size, new))
                rate = rate_new / rate_old if rate_new is not None and rate_old else None
                cells += [fmt_ratio(cpu), fmt_ratio(rate)]
                if cpu is not None and cpu > MAX_CPU_0_10:
                    missed.append(f"{new} CPU {op} {size} {cpu:.2f}x")
            lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("  missed: " + ", ".join(missed) if missed else "  every measured goal met")
    return lines


def goal_lines(medians: dict[tuple[str, str, str], float], libs: list[str]) -> list[str]:
    lines = [f"Goals for {OURS} at {GOAL_SIZE}:"]
    for op, min_raw, min_peer in GOALS:
        over_raw, over_peer, best = ratios(medians, op, GOAL_SIZE, libs)
        checks = [("raw", over_raw, min_raw)]
        if min_peer is not None:
            checks.append((f"best peer ({best})", over_peer, min_peer))
        for name, value, minimum in checks:
            if value is None:
                verdict = "not measured"
            elif value >= minimum:
                verdict = "met"
            else:
                verdict = "MISSED"
            lines.append(
                f"  {OP_TITLES[op]}: ours/{name} {fmt_ratio(value)} (goal >= {minimum}x): {verdict}"
            )
    return lines


def other_goal_lines(
    medians: dict[tuple[str, str, str], float], libs: list[str], ops: list[str]
) -> list[str]:
    """Issue 5's goals for amqp_asyncio and amqp_blocking at 1 KiB (for those measured)."""
    lines: list[str] = []
    for lib, min_peer, peers, min_raw in OTHER_GOALS:
        if lib not in libs:
            continue
        lines.append(f"Goals for {lib} at {GOAL_SIZE}:")
        for op in ops:
            ours = medians.get((op, GOAL_SIZE, lib))
            checks: list[tuple[str, float | None, float]] = []
            for peer in peers:
                rate = medians.get((op, GOAL_SIZE, peer)) if peer in libs else None
                checks.append((peer, ours / rate if ours and rate else None, min_peer))
            if op == "confirm":
                raw = medians.get((op, GOAL_SIZE, RAW))
                checks.append((RAW, ours / raw if ours and raw else None, min_raw))
            for name, value, minimum in checks:
                if value is None:
                    verdict = "not measured"
                elif value >= minimum:
                    verdict = "met"
                else:
                    verdict = "MISSED"
                lines.append(
                    f"  {OP_TITLES[op]}: {lib}/{name} {fmt_ratio(value)} "
                    f"(goal >= {minimum}x): {verdict}"
                )
    return lines


def write_chart(
    path: Path,
    medians: dict[tuple[str, str, str], float],
    libs: list[str],
    ops: list[str],
    sizes: list[str],
    runs: int,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [lib for lib in libs if lib != RAW]
    fig, axes = plt.subplots(1, len(ops), figsize=(5.2 * len(ops), 4.6), sharey=True)
    axes_list = list(axes) if len(ops) > 1 else [axes]
    width = 0.8 / max(1, len(shown))
    colours = plt.get_cmap("tab10")
    for ax, op in zip(axes_list, ops, strict=True):
        for index, lib in enumerate(shown):
            xs, heights = [], []
            for position, size in enumerate(sizes):
                raw = medians.get((op, size, RAW))
                rate = medians.get((op, size, lib))
                if raw and rate is not None:
                    xs.append(position + (index - (len(shown) - 1) / 2) * width)
                    heights.append(rate / raw)
            bars = ax.bar(
                xs,
                heights,
                width,
                label=lib,
                color=colours(index),
                edgecolor="black" if lib == OURS else None,
                linewidth=1.2 if lib == OURS else 0,
            )
            if lib == OURS:
                ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=1)
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
        ax.set_xticks(range(len(sizes)), sizes)
        ax.set_title(OP_TITLES[op], fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    axes_list[0].set_ylabel("throughput / raw client (dashed line = 1.0)")
    handles, labels = axes_list[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(shown), fontsize=9, frameon=False)
    fig.suptitle(
        f"End-to-end against RabbitMQ on this machine, median of {runs} run(s); "
        "bars are msgs/s relative to the raw pre-encoded client",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def replot(report_path: Path, chart: Path | None) -> int:
    if chart is None:
        raise SystemExit("--replot needs --chart PATH")
    report = json.loads(report_path.read_text())
    medians = {(m["op"], m["size"], m["lib"]): float(m["msgs_per_s"]) for m in report["medians"]}
    libs = [lib for lib in LIBS if any(key[2] == lib for key in medians)]
    ops = [op for op in OPS if any(key[0] == op for key in medians)]
    sizes = [size for size in SIZES if any(key[1] == size for key in medians)]
    write_chart(chart, medians, libs, ops, sizes, int(report["runs"]))
    print(f"chart written to {chart}")
    return 0


def parse_list(text: str, allowed: list[str], what: str) -> list[str]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    unknown = [item for item in items if item not in allowed]
    if unknown or not items:
        raise SystemExit(f"unknown {what}: {', '.join(unknown) or text!r}; known: {allowed}")
    return items


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("AMQP_URL", DEFAULT_URL))
    parser.add_argument(
        "--broker",
        choices=["rabbitmq", "embedded"],
        default="rabbitmq",
        help="embedded: start `python -m amqp_broker` on a free port and run against it (it "
        "serves AMQP 0-10 too: the default libraries then include the 0-10 clients)",
    )
    parser.add_argument("--quick", action="store_true", help="small N and 1 run (smoke test)")
    parser.add_argument(
        "--libs",
        help=f"from {','.join(LIBS)}, or 'tracing' for {','.join(TRACING_SET)}",
    )
    parser.add_argument("--sizes", default=",".join(SIZES), help=f"from {','.join(SIZES)}")
    parser.add_argument("--ops", default=",".join(OPS), help=f"from {','.join(OPS)}")
    parser.add_argument("--runs", type=int, help="runs per case, median reported (default 3)")
    parser.add_argument("-n", "--count", type=int, help="messages per case (all sizes)")
    parser.add_argument("--window", type=int, default=1000, help="unconfirmed publishes")
    parser.add_argument("--prefetch", type=int, default=1000)
    parser.add_argument("--ack-every", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per case")
    parser.add_argument("--json", type=Path, help="write every sample and the medians here")
    parser.add_argument("--chart", type=Path, help="write a PNG chart here (matplotlib)")
    parser.add_argument(
        "--replot", type=Path, metavar="JSON", help="redraw --chart from a --json report, no run"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        return worker(args.worker)
    if args.replot is not None:
        return replot(args.replot, args.chart)

    if args.libs == "tracing":
        libs = TRACING_SET
    else:
        default = [*DEFAULT_LIBS, *(LIBS_0_10 if args.broker == "embedded" else [])]
        libs = parse_list(args.libs or ",".join(default), LIBS, "library")
    sizes = parse_list(args.sizes, list(SIZES), "size")
    ops = parse_list(args.ops, OPS, "operation")
    runs = args.runs or (1 if args.quick else 3)
    counts = {
        size: args.count or (QUICK_COUNT if args.quick else FULL_COUNT)[size] for size in sizes
    }

    # a terminated run still deletes its queue and stops its worker (finally blocks run)
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))
    if args.broker == "embedded":
        from broker import EmbeddedBroker

        embedded = EmbeddedBroker(None)
        args.url = embedded.url
        try:
            return measure(args, libs, sizes, ops, runs, counts)
        finally:
            embedded.stop()
    return measure(args, libs, sizes, ops, runs, counts)


def measure(
    args: argparse.Namespace,
    libs: list[str],
    sizes: list[str],
    ops: list[str],
    runs: int,
    counts: dict[str, int],
) -> int:
    try:
        admin = RawClient(args.url)
    except (OSError, RawProtocolError) as exc:
        print(f"e2e: no broker at {args.url}: {exc}", file=sys.stderr)
        return 2
    for lib in libs:
        python, why = python_for(lib)
        if python is None:
            print(f"e2e: {lib} skipped: {why}", file=sys.stderr)

    samples: dict[tuple[str, str, str], list[float]] = {
        (op, size, lib): [] for op in ops for size in sizes for lib in libs
    }
    cpu_samples: dict[tuple[str, str, str], list[float]] = {key: [] for key in samples}
    problems: dict[tuple[str, str, str], str] = {}
    versions: dict[str, str] = {}
    unavailable: dict[str, str] = {}
    total = runs * len(ops) * len(sizes) * len(libs)
    done = 0
    started = time.monotonic()
    try:
        for run in range(runs):
            for case_index, (op, size) in enumerate((o, s) for o in ops for s in sizes):
                for lib in rotated(libs, run + case_index):
                    done += 1
                    if lib in unavailable:
                        problems[(op, size, lib)] = unavailable[lib]
                        continue
                    outcome = run_measured(admin, lib, op, size, counts[size], args)
                    if "version" in outcome:
                        versions[lib] = str(outcome["version"])
                    seconds = outcome.get("seconds")
                    cpu_seconds = outcome.get("cpu_seconds")
                    if isinstance(seconds, float) and seconds > 0:
                        rate = counts[size] / seconds
                        samples[(op, size, lib)].append(rate)
                        note = f"{rate:,.0f} msgs/s"
                        if isinstance(cpu_seconds, float):
                            cpu_us = cpu_seconds / counts[size] * 1e6
                            cpu_samples[(op, size, lib)].append(cpu_us)
                            note += f", client CPU {cpu_us:.1f} µs/msg"
                    else:
                        if "unavailable" in outcome:
                            unavailable[lib] = f"unavailable: {outcome['unavailable']}"
                            note = unavailable[lib]
                        else:
                            note = f"error: {outcome.get('error')}"
                        problems[(op, size, lib)] = note
                    print(
                        f"[{done}/{total} {time.monotonic() - started:5.0f}s] run {run + 1} "
                        f"{op} {size} {lib}: {note}",
                        file=sys.stderr,
                        flush=True,
                    )
    finally:
        admin.close()

    for key in list(problems):
        if samples[key]:
            del problems[key]  # failed once, measured in another run
    medians = summarise(samples)
    cpu_medians = summarise(cpu_samples)
    print()
    print("\n".join(print_table(medians, problems, libs, ops, sizes, counts, runs)))
    print()
    print("\n".join(cpu_table(cpu_medians, libs, ops, sizes, runs)))
    print()
    adapter_goals: list[str] = []
    if CORE in libs:
        adapter_goals = adapter_lines(medians, cpu_medians, libs, ops, sizes)
        print("\n".join(adapter_goals))
        print()
    protocol_goals = protocol_lines(medians, cpu_medians, libs, ops, sizes)
    if protocol_goals:
        print("\n".join(protocol_goals))
        print()
    goals = goal_lines(medians, libs)
    if GOAL_SIZE in sizes and OURS in libs and RAW in libs:
        print("\n".join(goals))
    if GOAL_SIZE in sizes:
        other_goals = other_goal_lines(medians, libs, ops)
        if other_goals:
            print("\n".join(other_goals))
        goals += other_goals
    print()
    fingerprint = sources_fingerprint()
    described = [f"{lib} {versions[lib]}" for lib in libs if lib in versions]
    described.append(f"amqp_sansio + amqp_trio sources {fingerprint}")
    print(
        f"Python {platform.python_version()}, {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} CPUs; " + ", ".join(described)
    )

    if args.json is not None:
        report = {
            "url_host": args.url.rsplit("@", 1)[-1],
            "runs": runs,
            "counts": counts,
            "window": args.window,
            "prefetch": args.prefetch,
            "ack_every": args.ack_every,
            "versions": versions,
            "python": platform.python_version(),
            "sources": fingerprint,
            "samples": [
                {"op": op, "size": size, "lib": lib, "msgs_per_s": rates}
                for (op, size, lib), rates in samples.items()
            ],
            "medians": [
                {"op": op, "size": size, "lib": lib, "msgs_per_s": rate}
                for (op, size, lib), rate in medians.items()
            ],
            "cpu_us_per_msg": [
                {
                    "op": op,
                    "size": size,
                    "lib": lib,
                    "samples": values,
                    "median": cpu_medians.get((op, size, lib)),
                }
                for (op, size, lib), values in cpu_samples.items()
            ],
            "goals": goals,
            "adapter_goals": adapter_goals,
            "protocol_goals": protocol_goals,
            "broker": args.broker,
            "load_average": os.getloadavg(),
            "problems": [
                {"op": op, "size": size, "lib": lib, "text": text}
                for (op, size, lib), text in problems.items()
            ],
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    if args.chart is not None:
        write_chart(args.chart, medians, libs, ops, sizes, runs)
        print(f"chart written to {args.chart}")
    failed = [key for key, text in problems.items() if not text.startswith("unavailable")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
