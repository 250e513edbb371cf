"""Context switches of one end-to-end runner (``bench/_e2e_libs.py``) against RabbitMQ: the
process's ``ru_nvcsw`` (voluntary) and ``ru_nivcsw`` (involuntary, mostly other processes on a
loaded machine) over the run, for 16 B messages. Run it for two counts and take the difference
per message, so connecting and closing cancel out (issue 35: amqp_blocking's reading thread)::

    .venv/bin/python bench/rusage.py consume 6000
    .venv/bin/python bench/rusage.py consume 1000

``fill`` / ``run`` / ``clean`` do one step only (``run`` under ``valgrind --tool=callgrind``,
so that the fill is not counted).
"""

from __future__ import annotations

import argparse
import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _e2e_libs import RUNNERS, Case
from _raw import RawClient


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("op", choices=["consume", "confirm", "publish"])
    parser.add_argument("count", type=int)
    parser.add_argument("step", nargs="?", default="all", choices=["all", "fill", "run", "clean"])
    parser.add_argument("--lib", default="amqp_blocking", choices=sorted(RUNNERS))
    parser.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672/")
    args = parser.parse_args()
    queue = f"bench-rusage-{args.op}"
    if args.step in ("all", "fill"):
        client = RawClient(args.url)
        client.queue_delete(queue)
        client.queue_declare(queue)
        if args.op == "consume":
            client.publish(queue, args.count, b"x" * 16)
            client.wait_for_depth(queue, args.count)
        client.close()
    if args.step in ("all", "run"):
        case = Case(args.url, args.op, queue, args.count, 16, 1000, 1000, 100)
        before = resource.getrusage(resource.RUSAGE_SELF)
        _, cpu = RUNNERS[args.lib](case)
        after = resource.getrusage(resource.RUSAGE_SELF)
        voluntary = after.ru_nvcsw - before.ru_nvcsw
        involuntary = after.ru_nivcsw - before.ru_nivcsw
        print(
            f"{args.lib} {args.op} {args.count}: switches {voluntary + involuntary} "
            f"(voluntary {voluntary}, involuntary {involuntary}), "
            f"client CPU {cpu / args.count * 1e6:.1f} µs/msg",
            flush=True,
        )
    if args.step in ("all", "clean"):
        client = RawClient(args.url)
        client.queue_delete(queue)
        client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
