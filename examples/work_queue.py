"""A work queue: one producer, two workers taking one task at a time (prefetch 1) and acking
each task when it is done, so a busy worker gets no new task and a crashed one loses none.

    AMQP_URL=amqp://guest:guest@127.0.0.1:5672/ python examples/work_queue.py [tasks]

Each task's body says how long it takes (a dot is 10 ms, as in RabbitMQ's tutorial). The queue
has a unique name and is deleted at the end.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections import Counter

import trio

import amqp_trio
from amqp_sansio import BasicProperties

AMQP_URL = os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
PERSISTENT = BasicProperties(delivery_mode=2)


class Tally:
    """Tasks done per worker; ``finished`` is set when all of them are."""

    def __init__(self, tasks: int) -> None:
        self.tasks = tasks
        self.done: Counter[str] = Counter()
        self.finished = trio.Event()

    def record(self, worker: str) -> None:
        self.done[worker] += 1
        if self.done.total() == self.tasks:
            self.finished.set()


async def worker(conn: amqp_trio.Connection, queue: str, name: str, tally: Tally) -> None:
    async with conn.channel() as ch:
        # at most one unacknowledged task per worker: fair dispatch
        await ch.basic_qos(prefetch_count=1)
        async with ch.basic_consume(queue) as consumer:
            async for message in consumer:
                await trio.sleep(0.01 * message.body.count(b"."))
                await message.ack()
                print(f"{name} did {message.body.decode()!r}")
                tally.record(name)


async def main(tasks: int) -> None:
    queue = f"example-tasks-{uuid.uuid4().hex[:8]}"
    async with amqp_trio.connect(AMQP_URL) as conn, conn.channel() as ch:
        await ch.queue_declare(queue)
        try:
            async with ch.publisher(window=100) as publisher:
                for n in range(tasks):
                    body = f"task {n} " + "." * (1 + n % 4)
                    await publisher.publish(body.encode(), routing_key=queue, properties=PERSISTENT)
            print(f"queued {tasks} tasks")
            tally = Tally(tasks)
            async with trio.open_nursery() as nursery:
                for name in ("worker-1", "worker-2"):
                    nursery.start_soon(worker, conn, queue, name, tally)
                await tally.finished.wait()
                nursery.cancel_scope.cancel()  # stops both consumers (basic.cancel)
            print("tasks per worker:", dict(sorted(tally.done.items())))
        finally:
            await ch.queue_delete(queue)


if __name__ == "__main__":
    trio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 10)
