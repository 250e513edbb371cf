"""Instructions per message of the end-to-end cases, counted by callgrind: deterministic where
timings on a shared machine are noise.

Each (library, operation) runs ``bench/e2e.py``'s worker under ``valgrind --tool=callgrind``
twice, with a small and a large message count, against the embedded broker (a subprocess of
this script, not counted) or the broker at ``--url``; the difference of the two runs'
instruction totals over the difference of the counts is the cost of one message, start-up,
imports and the handshake cancelling out. The queue is declared (and for consume filled) by
the raw client beforehand and deleted afterwards, as ``e2e.py`` does.

    .venv/bin/python bench/instructions.py --libs amqp_trio,amqp_trio-0-10 --ops consume
    .venv/bin/python bench/instructions.py --counts 1000,5000 --size 1KiB
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import uuid
from dataclasses import asdict
from pathlib import Path

from _e2e_libs import Case
from _raw import RawClient

HERE = Path(__file__).resolve().parent
SIZES = {"16B": 16, "1KiB": 1024, "64KiB": 65536}
PAIRS = ["amqp_trio", "amqp_asyncio", "amqp_blocking"]


def instructions(lib: str, case: Case) -> int:
    """The instructions callgrind counted in one worker run of *case* (every thread)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        spec = json.dumps({"lib": lib, **asdict(case)})
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                sys.executable,
                str(HERE / "e2e.py"),
                "--worker",
                spec,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        result = json.loads((done.stdout.strip().splitlines() or ["{}"])[-1])
        if done.returncode != 0 or "seconds" not in result:
            raise RuntimeError(f"{lib} {case.op}: {result or done.stderr[-500:]}")
        for line in out.read_text().splitlines():
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise RuntimeError(f"{lib} {case.op}: no totals in callgrind's output")


def measure(admin: RawClient, url: str, lib: str, op: str, body_size: int, count: int) -> int:
    queue = f"bench-instr-{lib}-{op}-{uuid.uuid4().hex[:12]}"
    case = Case(
        url=url,
        op=op,
        queue=queue,
        count=count,
        body_size=body_size,
        window=1000,
        prefetch=1000,
        ack_every=100,
    )
    admin.queue_declare(queue)
    try:
        if op == "consume":
            admin.publish(queue, count, case.body)
            if admin.wait_for_depth(queue, count) != count:
                raise RuntimeError(f"could not fill {queue}")
        return instructions(lib, case)
    finally:
        admin.queue_delete(queue)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a broker to use instead of the embedded one")
    parser.add_argument(
        "--libs",
        default=",".join(lib for pair in PAIRS for lib in (pair, f"{pair}-0-10")),
        help="e2e.py library names",
    )
    parser.add_argument("--ops", default="publish,consume")
    parser.add_argument("--size", default="16B", choices=list(SIZES))
    parser.add_argument("--counts", default="1000,5000", help="the small and the large count")
    args = parser.parse_args()
    small, large = (int(n) for n in args.counts.split(","))
    libs = [lib.strip() for lib in args.libs.split(",") if lib.strip()]
    ops = [op.strip() for op in args.ops.split(",") if op.strip()]
    embedded = None
    url = args.url
    if url is None:
        from broker import EmbeddedBroker

        embedded = EmbeddedBroker(None)
        url = embedded.url
    admin = RawClient(url)
    try:
        print(f"instructions per message, {args.size}, ({large:,} - {small:,} messages)")
        print(f"load average {os.getloadavg()[0]:.1f}; the counts do not depend on it")
        print()
        print("| case | " + " | ".join(libs) + " |")
        print("|---|" + "--:|" * len(libs))
        for op in ops:
            cells = [f"{op} {args.size}"]
            for lib in libs:
                low = measure(admin, url, lib, op, SIZES[args.size], small)
                high = measure(admin, url, lib, op, SIZES[args.size], large)
                per = (high - low) / (large - small)
                cells.append(f"{per / 1000:.1f}k")
                print(f"  {lib} {op}: {low:,} / {high:,} -> {per:,.0f}", file=sys.stderr)
            print("| " + " | ".join(cells) + " |", flush=True)
    finally:
        admin.close()
        if embedded is not None:
            embedded.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
