"""Request/reply over RabbitMQ's direct reply-to: a Fibonacci server and a client in one process.

    AMQP_URL=amqp://guest:guest@127.0.0.1:5672/ python examples/rpc.py [n ...]

The client consumes from the pseudo-queue ``amq.rabbitmq.reply-to`` with ``no_ack`` *before*
publishing its requests with ``reply_to="amq.rabbitmq.reply-to"`` on the same channel; the
broker routes each reply straight back to that consumer, with no reply queue to declare or
delete. Replies are matched to requests by ``correlation_id``. The request queue has a unique
name and is deleted at the end.
"""

from __future__ import annotations

import os
import sys
import uuid

import trio

import amqp_trio
from amqp_sansio import BasicProperties

AMQP_URL = os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
REPLY_TO = "amq.rabbitmq.reply-to"


def fib(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


async def serve_requests(
    conn: amqp_trio.Connection, queue: str, task_status: trio.TaskStatus[None]
) -> None:
    async with conn.channel() as ch:
        await ch.basic_qos(prefetch_count=10)
        async with ch.basic_consume(queue) as requests:
            task_status.started()
            async for request in requests:
                n = int(request.body)
                reply_to = request.properties.reply_to
                if reply_to is not None:
                    await ch.basic_publish(
                        str(fib(n)).encode(),
                        routing_key=reply_to,
                        properties=BasicProperties(
                            correlation_id=request.properties.correlation_id
                        ),
                    )
                await request.ack()


async def call_all(conn: amqp_trio.Connection, queue: str, numbers: list[int]) -> dict[int, int]:
    async with conn.channel() as ch:
        pending: dict[str, int] = {}
        results: dict[int, int] = {}
        async with ch.basic_consume(REPLY_TO, no_ack=True) as replies:
            for n in numbers:
                correlation_id = uuid.uuid4().hex
                pending[correlation_id] = n
                await ch.basic_publish(
                    str(n).encode(),
                    routing_key=queue,
                    properties=BasicProperties(reply_to=REPLY_TO, correlation_id=correlation_id),
                )
            async for reply in replies:
                n = pending.pop(reply.properties.correlation_id or "")
                results[n] = int(reply.body)
                if not pending:
                    break
        return results


async def main(numbers: list[int]) -> None:
    queue = f"example-rpc-{uuid.uuid4().hex[:8]}"
    async with amqp_trio.connect(AMQP_URL) as conn:
        async with conn.channel() as ch:
            await ch.queue_declare(queue)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(serve_requests, conn, queue)
                with trio.fail_after(10):
                    results = await call_all(conn, queue, numbers)
                nursery.cancel_scope.cancel()
            for n in numbers:
                print(f"fib({n}) = {results[n]}")
        finally:
            async with conn.channel() as ch:
                await ch.queue_delete(queue)


if __name__ == "__main__":
    trio.run(main, [int(arg) for arg in sys.argv[1:]] or [10, 20, 30, 90])
