"""A RabbitMQ stream queue: append messages, then read them from an offset, as often as wanted.

    AMQP_URL=amqp://guest:guest@127.0.0.1:5672/ python examples/stream_queue.py [offset]

A stream (``x-queue-type: stream``, durable) keeps its messages after they are read. A consumer
says where to start with the ``x-stream-offset`` argument (an offset number, ``first``, ``last``,
``next`` or a timestamp), must set a prefetch count and must ack, and must not reject or nack
(RabbitMQ answers with a 540 that closes the connection). Leaving ``basic_consume``'s block
cancels the consumer without rejecting what is buffered, so it is safe on a stream. The stream
has a unique name and is deleted at the end.
"""

from __future__ import annotations

import os
import sys
import uuid

import trio

import amqp_trio

AMQP_URL = os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
MESSAGES = 10


async def main(offset: int) -> None:
    stream = f"example-stream-{uuid.uuid4().hex[:8]}"
    async with amqp_trio.connect(AMQP_URL) as conn, conn.channel() as ch:
        await ch.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
        try:
            async with ch.publisher() as publisher:
                for n in range(MESSAGES):
                    await publisher.publish(f"event {n}".encode(), routing_key=stream)
            print(f"appended {MESSAGES} messages to stream {stream}")

            await ch.basic_qos(prefetch_count=100)  # streams need a prefetch count
            wanted = MESSAGES - offset
            read = 0
            with trio.fail_after(10):
                async with ch.basic_consume(
                    stream, arguments={"x-stream-offset": offset}
                ) as consumer:
                    async for message in consumer:
                        # RabbitMQ tells each message's offset in its x-stream-offset header
                        at = message.stream_offset
                        print(f"read {message.body.decode()!r} at offset {at!r}")
                        await message.ack()
                        read += 1
                        if read == wanted:
                            break
        finally:
            await ch.queue_delete(stream)


if __name__ == "__main__":
    start = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    if not 0 <= start < MESSAGES:
        sys.exit(f"offset must be between 0 and {MESSAGES - 1}")
    trio.run(main, start)
