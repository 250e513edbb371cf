"""amqp_trio's work per message in deterministic counts, against RabbitMQ (issue 35).

One case per process, meant to run under ``valgrind --tool=callgrind`` twice with two message
counts: the difference of the two instruction totals divided by the difference of the counts
is the cost per message, start-up and connection cancelled out. ``--steps`` prints Trio task
steps and scheduler batches (a ``trio.abc.Instrument``) instead, for the same difference.

Cases: ``publish`` and ``confirm`` (``_e2e_libs.py``'s amqp_trio runner, window 1,000),
``core-publish`` and ``core-confirm`` (its core runner), ``declare`` (a loop of passive
``queue_declare``: a request and its reply through a waiter) and ``echo`` (publish to a queue,
then take the message back from a ``no_ack`` consumer on the same channel: the reply path of
``latency.py``'s runner without a responder). Compare two trees with ``PYTHONPATH=<tree>/src``::

    valgrind --tool=callgrind .venv/bin/python bench/trio_counts.py publish 1200 65536
    valgrind --tool=callgrind .venv/bin/python bench/trio_counts.py publish 200 65536
    .venv/bin/python bench/trio_counts.py declare 2000 0 --steps

The queue it uses is declared before and deleted after.
"""

from __future__ import annotations

import argparse
import os

import trio

import amqp_trio
from _e2e_libs import Case, run_amqp_trio, run_core

CASES = ("publish", "confirm", "core-publish", "core-confirm", "declare", "echo")


class StepCounter(trio.abc.Instrument):
    """Task steps and scheduler batches (one epoll poll each) while installed."""

    def __init__(self) -> None:
        self.steps = 0
        self.batches = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1

    def before_io_wait(self, timeout: float) -> None:
        self.batches += 1


async def _queue(url: str, queue: str, declare: bool) -> None:
    async with amqp_trio.connect(url) as conn, conn.channel() as ch:
        if declare:
            await ch.queue_declare(queue)
        else:
            await ch.queue_delete(queue)


async def _calls(
    url: str, case: str, queue: str, count: int, size: int, counter: StepCounter | None
) -> None:
    async with amqp_trio.connect(url) as conn, conn.channel() as ch:
        if counter is not None:
            trio.lowlevel.add_instrument(counter)
        if case == "declare":
            for _ in range(count):
                await ch.queue_declare(queue, passive=True)
        else:
            body = b"x" * size
            async with ch.basic_consume(queue, no_ack=True) as consumer:
                receive = consumer.__anext__
                for _ in range(count):
                    await ch.basic_publish(body, routing_key=queue)
                    await receive()
        if counter is not None:
            trio.lowlevel.remove_instrument(counter)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("case", choices=CASES)
    parser.add_argument("count", type=int)
    parser.add_argument("size", type=int, help="body octets (publish, confirm, echo)")
    parser.add_argument(
        "--url", default=os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
    )
    parser.add_argument("--steps", action="store_true", help="print Trio task steps and batches")
    args = parser.parse_args()
    queue = f"trio-counts-{os.getpid()}"
    counter = StepCounter() if args.steps else None
    trio.run(_queue, args.url, queue, True)
    try:
        if args.case in ("declare", "echo"):
            trio.run(_calls, args.url, args.case, queue, args.count, args.size, counter)
        else:
            op = args.case.removeprefix("core-")
            case = Case(args.url, op, queue, args.count, args.size, 1000, 0, 0)
            if counter is None:
                (run_core if args.case.startswith("core-") else run_amqp_trio)(case)
            else:
                # The runner calls trio.run itself: count across all of it.
                run = trio.run

                def counted(*a: object, **k: object) -> object:
                    return run(*a, instruments=[counter], **k)  # type: ignore[arg-type]

                trio.run = counted  # type: ignore[assignment]
                try:
                    run_amqp_trio(case)
                finally:
                    trio.run = run
    finally:
        trio.run(_queue, args.url, queue, False)
    if counter is not None:
        steps, batches = counter.steps, counter.batches
        print(f"{args.case} {args.count} x {args.size}: task steps {steps}, batches {batches}")


if __name__ == "__main__":
    main()
