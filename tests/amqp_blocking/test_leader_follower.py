"""Leader/follower reads (issue 35): an application thread that waits for the broker reads the
socket itself while nobody else does, and hands the reading back when it has what it waited
for. Whoever reads routes everything: another thread's reply, a close by the broker; and the
I/O thread keeps the connection alive while the application does not call in."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Final

import pytest

import amqp_blocking
from amqp_sansio.client import AMQPError, ConnectionForced

if TYPE_CHECKING:
    import amqp_broker

WAIT: Final = 30.0


def _reading(conn: amqp_blocking.Connection, thread: threading.Thread) -> None:
    """Wait until *thread* holds the connection's read role."""
    deadline = time.monotonic() + WAIT
    while conn._reader is not thread:
        assert thread.is_alive()
        assert time.monotonic() < deadline, "the thread never started reading"
        time.sleep(0.001)


def test_a_consuming_thread_reads_the_reply_another_thread_waits_for(amqp_url: str) -> None:
    with amqp_blocking.connect(amqp_url) as conn, conn.channel() as ch, conn.channel() as other:
        queue = ch.queue_declare(exclusive=True).queue
        got: list[amqp_blocking.Message | None] = []
        with ch.basic_consume(queue) as consumer:
            thread = threading.Thread(target=lambda: got.append(consumer.get(timeout=WAIT)))
            thread.start()
            _reading(conn, thread)
            # This thread finds the consuming thread reading: that one reads the reply.
            assert other.queue_declare(queue, passive=True).message_count == 0
            assert conn._reader is thread  # still waiting for its message
            other.basic_publish(b"for the reader", routing_key=queue)
            thread.join(WAIT)
            assert not thread.is_alive()
            [message] = got
            assert message is not None
            assert message.body == b"for the reader"
            message.ack()
        # The role was handed back: the next call reads its own reply.
        assert conn._reader is None
        assert other.queue_declare(queue, passive=True).message_count == 0


def test_a_close_by_the_broker_is_seen_by_the_reading_thread(
    amqp_broker: amqp_broker.BrokerThread,
) -> None:
    with amqp_blocking.connect(f"{amqp_broker.url}?name=reader") as conn:
        ch = conn.channel()
        ch.queue_declare("leader-close")
        errors: list[AMQPError] = []
        consumer = ch.basic_consume("leader-close")

        def consume() -> None:
            try:
                consumer.get(timeout=WAIT)
            except AMQPError as exc:
                errors.append(exc)

        thread = threading.Thread(target=consume)
        thread.start()
        _reading(conn, thread)
        closed = amqp_broker.close_connection(
            "reader", reply_code=320, reply_text="CONNECTION_FORCED - leader test"
        )
        assert closed == 1
        thread.join(WAIT)
        assert not thread.is_alive()
        [error] = errors
        assert isinstance(error, ConnectionForced)
        assert error.reply_code == 320
        assert conn.is_closed
        assert conn.close_error is error
        with pytest.raises(ConnectionForced):
            conn.channel()


def test_heartbeats_go_on_while_the_application_reads_and_while_it_never_calls_in(
    amqp_url: str,
) -> None:
    # RabbitMQ closes a connection that sends no heartbeat for two intervals (1 s here).
    with amqp_blocking.connect(f"{amqp_url}?heartbeat=1") as conn, conn.channel() as ch:
        assert conn.heartbeat == 1
        queue = ch.queue_declare(exclusive=True).queue
        with ch.basic_consume(queue) as consumer:
            # This thread reads the socket for 3.5 intervals: it sends the heartbeats.
            assert consumer.get(timeout=3.5) is None
            # Then it lets go and never calls in: the I/O thread sends them.
            time.sleep(3.5)
        assert conn.close_error is None
        ch.confirm_select()
        ch.basic_publish(b"alive", routing_key=queue)  # returns once confirmed
        assert ch.queue_declare(queue, passive=True).message_count == 1


def test_threads_that_wait_at_once_each_get_what_they_wait_for(amqp_url: str) -> None:
    # Consumers, confirming publishers and plain calls on one connection, all waiting at
    # once: whoever reads routes for the others, and the role moves between them.
    per_queue = 300
    with amqp_blocking.connect(amqp_url) as conn, conn.channel() as setup:
        queues = [setup.queue_declare(exclusive=True).queue for _ in range(3)]
        bodies: dict[str, list[bytes]] = {queue: [] for queue in queues}
        errors: list[BaseException] = []

        def consume(queue: str) -> None:
            try:
                with conn.channel() as ch, ch.basic_consume(queue, no_ack=True) as consumer:
                    while len(bodies[queue]) < per_queue:
                        message = consumer.get(timeout=WAIT)
                        assert message is not None, f"{queue}: no message within {WAIT} s"
                        bodies[queue].append(message.body)
            except BaseException as exc:
                errors.append(exc)

        def publish(queue: str) -> None:
            try:
                with conn.channel() as ch, ch.publisher(window=20) as publisher:
                    for n in range(per_queue):
                        publisher.publish(b"%d" % n, routing_key=queue)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=consume, args=(queue,)) for queue in queues]
        threads += [threading.Thread(target=publish, args=(queue,)) for queue in queues]
        for thread in threads:
            thread.start()
        with conn.channel() as ch:
            while any(thread.is_alive() for thread in threads[len(queues) :]):
                assert ch.queue_declare(queues[0], passive=True).queue == queues[0]
        for thread in threads:
            thread.join(WAIT)
        assert not errors
        assert not any(thread.is_alive() for thread in threads)
        for queue in queues:
            assert bodies[queue] == [b"%d" % n for n in range(per_queue)]


def test_a_thread_only_looking_does_not_keep_the_socket_from_being_read(amqp_url: str) -> None:
    # get(timeout=0) reads nothing itself: the I/O thread must go on reading for it.
    with (
        amqp_blocking.connect(amqp_url) as conn,
        conn.channel() as ch,
        amqp_blocking.connect(amqp_url) as publishing,
        publishing.channel() as other,
    ):
        queue = ch.queue_declare(exclusive=True).queue
        other.confirm_select()
        looking = threading.Event()
        got: list[amqp_blocking.Message] = []
        with ch.basic_consume(queue) as consumer:

            def look() -> None:
                deadline = time.monotonic() + WAIT
                while (message := consumer.get(timeout=0)) is None:
                    looking.set()
                    if time.monotonic() > deadline:
                        return
                got.append(message)

            thread = threading.Thread(target=look)
            thread.start()
            assert looking.wait(WAIT)
            other.basic_publish(b"looked for", routing_key=queue)  # from another connection
            thread.join(WAIT + 5)
            [message] = got
            assert message.body == b"looked for"
            message.ack()
