"""Publish with confirms and consume with acks through amqp_asyncio.

Run against a broker at ``AMQP_URL`` (default ``amqp://guest:guest@127.0.0.1:5672/``)::

    AMQP_URL=amqp://guest:guest@127.0.0.1:5672/ python examples/asyncio_publish_consume.py

A producer and a consumer run side by side in a ``TaskGroup`` on one connection: the producer
publishes 1000 messages through a pipelined publisher, the consumer acknowledges them and
stops when it has them all. uvloop is used when it is installed.
"""

from __future__ import annotations

import asyncio
import importlib
import os

import amqp_asyncio
from amqp_sansio import BasicProperties

URL = os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
COUNT = 1000


async def main() -> None:
    async with (
        amqp_asyncio.connect(URL, connection_name="asyncio example") as conn,
        conn.channel() as ch,
    ):
        queue = (await ch.queue_declare(exclusive=True)).queue
        await ch.basic_qos(100)

        async def produce() -> None:
            async with conn.channel() as pch, pch.publisher(window=100) as pub:
                for n in range(COUNT):
                    props = BasicProperties(message_id=str(n), content_type="text/plain")
                    await pub.publish(b"message %d" % n, routing_key=queue, properties=props)
            print(f"published {pub.confirmed} confirmed messages")

        async def consume() -> None:
            seen = set()
            async with ch.basic_consume(queue) as consumer:
                async for msg in consumer:
                    seen.add(msg.properties.message_id)
                    await msg.ack()
                    if len(seen) == COUNT:
                        break
            print(f"consumed {len(seen)} distinct messages")

        async with asyncio.TaskGroup() as group:
            group.create_task(consume())
            group.create_task(produce())


if __name__ == "__main__":
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        asyncio.run(main())
    else:
        uvloop.run(main())
