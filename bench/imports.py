"""Import cost: each adapter's and each peer's ``import`` (pika, aio-pika, py-amqp) and
``amqp-publish --help``, every run in a fresh interpreter, the median of N runs (CPU time of
the process: user + system, so other load on the machine counts less than in wall time).

    .venv/bin/python bench/imports.py            # N=10
    .venv/bin/python bench/imports.py --n 5 --json

Modules that are not installed are reported as such and skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

IMPORTS = ("amqp_blocking", "amqp_trio", "amqp_asyncio", "pika", "aio_pika", "amqp")
# Each child prints the CPU seconds the import took (resource.getrusage, children excluded).
_CHILD = """
import resource
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
before = cpu()
{statement}
print(cpu() - before)
"""
_PUBLISH_HELP = """
import contextlib, io, sys
sys.argv = ["amqp-publish", "--help"]
from amqp_tools import publish_main
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    publish_main()
"""


def _run(statement: str) -> float | None:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD.format(statement=statement)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    if done.returncode != 0:
        return None
    return float(done.stdout.strip().splitlines()[-1])


def _interpreter() -> float:
    # What an empty interpreter costs, measured the same way, to subtract nothing but to show.
    return _run("pass") or 0.0


def measure(n: int) -> dict[str, float | None]:
    results: dict[str, float | None] = {}
    cases = {f"import {name}": f"import {name}" for name in IMPORTS}
    cases["amqp-publish --help"] = _PUBLISH_HELP
    for label, statement in cases.items():
        runs = [_run(statement) for _ in range(n)]
        found = [run for run in runs if run is not None]
        results[label] = statistics.median(found) if len(found) == n else None
    results["(empty statement)"] = statistics.median(_interpreter() for _ in range(n))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10, help="runs per case (median)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    results = measure(args.n)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    where = f"{args.n} fresh processes, {Path(sys.executable).name}"
    print(f"{'case':<28} {'median CPU (ms)':>16}    ({where})")
    for label, value in results.items():
        shown = "not installed" if value is None else f"{value * 1000:.0f}"
        print(f"{label:<28} {shown:>16}")


if __name__ == "__main__":
    main()
