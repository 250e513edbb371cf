"""Publish a few messages with publisher confirms, then consume and acknowledge them.

    AMQP_URL=amqp://guest:guest@127.0.0.1:5672/ python examples/publish_consume.py [count]

The queue has a unique name and is deleted at the end.
"""

from __future__ import annotations

import os
import sys
import uuid

import trio

import amqp_trio
from amqp_sansio import BasicProperties

AMQP_URL = os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")


async def main(count: int) -> None:
    queue = f"example-hello-{uuid.uuid4().hex[:8]}"
    async with amqp_trio.connect(AMQP_URL) as conn, conn.channel() as ch:
        await ch.queue_declare(queue)
        try:
            await ch.confirm_select()
            for n in range(count):
                # in confirm mode basic_publish returns once the broker has the message
                await ch.basic_publish(
                    f"hello {n}".encode(),
                    routing_key=queue,
                    properties=BasicProperties(content_type="text/plain"),
                )
            print(f"published {count} messages to {queue}, all confirmed")

            received = 0
            async with ch.basic_consume(queue) as consumer:
                async for message in consumer:
                    print(f"received {message.body.decode()!r} (tag {message.delivery_tag})")
                    await message.ack()
                    received += 1
                    if received == count:
                        break
        finally:
            await ch.queue_delete(queue)


if __name__ == "__main__":
    trio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 3)
