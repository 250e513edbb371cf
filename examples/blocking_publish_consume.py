"""Publish with confirms and consume with acks through amqp_blocking.

Run against a broker at ``AMQP_URL`` (default ``amqp://guest:guest@127.0.0.1:5672/``)::

    AMQP_URL=amqp://guest:guest@127.0.0.1:5672/ python examples/blocking_publish_consume.py

It declares an exclusive queue, publishes 1000 messages through a pipelined publisher from
two threads sharing the connection, consumes them (a handler that takes its time does not
endanger the connection: the I/O thread answers heartbeats), and prints what it saw.
"""

from __future__ import annotations

import os
import threading

import amqp_blocking
from amqp_sansio import BasicProperties

URL = os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
COUNT = 1000


def main() -> None:
    with (
        amqp_blocking.connect(URL, connection_name="blocking example") as conn,
        conn.channel() as ch,
    ):
        queue = ch.queue_declare(exclusive=True).queue
        with ch.publisher(window=100) as pub:

            def publish(first: int) -> None:
                for n in range(first, COUNT, 2):
                    props = BasicProperties(message_id=str(n), content_type="text/plain")
                    pub.publish(b"message %d" % n, routing_key=queue, properties=props)

            threads = [threading.Thread(target=publish, args=(i,)) for i in (0, 1)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        print(f"published {pub.confirmed} confirmed messages")

        ch.basic_qos(100)
        seen = set()
        for msg in ch.consume(queue, timeout=1.0):
            seen.add(msg.properties.message_id)
            msg.ack()
        print(f"consumed {len(seen)} distinct messages")


if __name__ == "__main__":
    main()
