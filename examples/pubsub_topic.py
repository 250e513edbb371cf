"""Publish/subscribe with a topic exchange: two subscribers, each with its own exclusive,
server-named queue bound with patterns, receive the messages whose routing keys match.

    AMQP_URL=amqp://guest:guest@127.0.0.1:5672/ python examples/pubsub_topic.py

In a pattern ``*`` stands for exactly one word of the dotted routing key and ``#`` for zero or
more. The exchange has a unique name and is deleted at the end; the exclusive queues go away
with their channel's connection.
"""

from __future__ import annotations

import os
import uuid

import trio

import amqp_trio

AMQP_URL = os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
EVENTS = [
    ("kern.info", "disk attached"),
    ("kern.critical", "disk failed"),
    ("app.critical", "payment service down"),
    ("app.info", "deploy finished"),
    ("audit.login.root", "root logged in"),
]
# subscriber: (binding patterns, how many of EVENTS match them)
SUBSCRIBERS = {
    "kernel watcher": (["kern.*"], 2),
    "pager": (["*.critical", "audit.#"], 3),
}


async def subscribe(
    conn: amqp_trio.Connection,
    exchange: str,
    name: str,
    task_status: trio.TaskStatus[None],
) -> None:
    patterns, expected = SUBSCRIBERS[name]
    async with conn.channel() as ch:
        declared = await ch.queue_declare("", exclusive=True)
        for pattern in patterns:
            await ch.queue_bind(declared.queue, exchange, routing_key=pattern)
        async with ch.basic_consume(declared.queue, no_ack=True) as messages:
            task_status.started()  # bound and consuming: publishing may start
            got = 0
            async for message in messages:
                print(f"{name} {patterns} got [{message.routing_key}] {message.body.decode()}")
                got += 1
                if got == expected:
                    break


async def main() -> None:
    exchange = f"example-events-{uuid.uuid4().hex[:8]}"
    async with amqp_trio.connect(AMQP_URL) as conn, conn.channel() as ch:
        await ch.exchange_declare(exchange, "topic")
        print(f"topic exchange {exchange}")
        try:
            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    # subscribe first: a message that matches no binding is dropped
                    for name in SUBSCRIBERS:
                        await nursery.start(subscribe, conn, exchange, name)
                    async with ch.publisher() as publisher:
                        for routing_key, text in EVENTS:
                            await publisher.publish(
                                text.encode(), exchange=exchange, routing_key=routing_key
                            )
        finally:
            await ch.exchange_delete(exchange)


if __name__ == "__main__":
    trio.run(main)
