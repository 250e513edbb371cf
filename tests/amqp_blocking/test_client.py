"""amqp_blocking against RabbitMQ: what only a thread-based adapter has to prove.

The shared scenarios run through tests/amqp_asyncio/test_scenarios.py; these tests cover the I/O
thread (heartbeats while the application sleeps), thread safety, call timeouts and the
consume iterator.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import pytest

import amqp_blocking
from amqp_sansio import NEED_DATA, BasicProperties, ConnectionClosed, Event, Int64
from amqp_sansio.client import ConnectionClosedError, ConnectionParameters, NotFound
from tests.support.scenarios import unique
from tests.support.silent_proxy import SilentProxy, silent_proxy

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

pytestmark = pytest.mark.rabbitmq


@pytest.fixture
def conn(rabbitmq_url: str) -> Iterator[amqp_blocking.Connection]:
    with amqp_blocking.connect(rabbitmq_url) as connection:
        yield connection


@pytest.fixture
def queue(conn: amqp_blocking.Connection) -> Iterator[str]:
    name = unique("blocking")
    with conn.channel() as ch:
        ch.queue_declare(name)
    yield name
    with conn.channel() as ch:
        ch.queue_delete(name)


def _with_query(url: str, query: str) -> str:
    return url + ("&" if "?" in url else "?") + query


@pytest.fixture
def proxy(rabbitmq_url: str) -> Iterator[SilentProxy]:
    """Between a client and RabbitMQ: held silent, it makes any reply late (a zero timeout
    alone races the reply, and a loaded machine lets the reply win every time)."""
    host_port = rabbitmq_url.split("@", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    with silent_proxy((host, int(port))) as p:
        yield p


@pytest.fixture
def late_conn(proxy: SilentProxy) -> Iterator[amqp_blocking.Connection]:
    with amqp_blocking.connect(proxy.url()) as connection:
        yield connection


def _time_out(proxy: SilentProxy, call: Callable[[], object]) -> None:
    """*call* times out: its request reaches the broker and its reply comes back only after."""
    proxy.go_silent()
    try:
        with pytest.raises(TimeoutError):
            call()
    finally:
        proxy.resume()


def test_handler_sleeping_three_heartbeats_keeps_the_connection(rabbitmq_url: str) -> None:
    # heartbeat=2: RabbitMQ drops a client that sends nothing for two intervals. The handler
    # sleeps 6 s with the delivery in hand; the I/O thread keeps the heartbeats going.
    name = unique("heartbeat")
    with amqp_blocking.connect(_with_query(rabbitmq_url, "heartbeat=2")) as conn:
        assert conn.heartbeat == 2
        with conn.channel() as ch:
            ch.queue_declare(name)
            try:
                ch.confirm_select()
                ch.basic_publish(b"first", routing_key=name)
                ch.basic_publish(b"second", routing_key=name)
                ch.basic_qos(1)
                bodies: list[bytes] = []
                with ch.consume(name, timeout=30.0) as messages:
                    for msg in messages:
                        if not bodies:
                            time.sleep(6.0)  # three heartbeat intervals
                        msg.ack()
                        bodies.append(msg.body)
                        if len(bodies) == 2:
                            break
                assert bodies == [b"first", b"second"]
                assert not conn.is_closed
                assert ch.queue_declare(name, passive=True).message_count == 0
            finally:
                ch.queue_delete(name)


def test_eight_threads_publish_with_confirms_on_one_connection(
    conn: amqp_blocking.Connection, queue: str
) -> None:
    # Four threads share one channel with waiting publishes, four share one windowed
    # publisher on another channel: nothing may be lost or duplicated.
    per_thread = 150
    errors: list[BaseException] = []
    with conn.channel() as waiting, conn.channel() as pipelined:
        waiting.confirm_select()
        with pipelined.publisher(window=32) as pub:

            def publish(thread: int) -> None:
                try:
                    for n in range(per_thread):
                        props = BasicProperties(message_id=f"{thread}-{n}")
                        if thread < 4:
                            waiting.basic_publish(b"w", routing_key=queue, properties=props)
                        else:
                            pub.publish(b"p", routing_key=queue, properties=props)
                except BaseException as exc:  # reported to the main thread
                    errors.append(exc)

            threads = [threading.Thread(target=publish, args=(t,)) for t in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        assert errors == []
        assert pub.confirmed == 4 * per_thread
        total = 8 * per_thread
        assert waiting.queue_declare(queue, passive=True).message_count == total
        waiting.basic_qos(200)
        ids = []
        for msg in waiting.consume(queue, timeout=1.0):
            ids.append(msg.properties.message_id)
            msg.ack()
    assert len(ids) == total
    assert set(ids) == {f"{t}-{n}" for t in range(8) for n in range(per_thread)}


def test_a_timed_out_call_drops_its_late_reply(
    late_conn: amqp_blocking.Connection, proxy: SilentProxy, queue: str
) -> None:
    with late_conn.channel() as ch:
        _time_out(proxy, lambda: ch.queue_declare(queue, passive=True, timeout=0.05))
        # The next reply goes to the next call, not to the abandoned one.
        other = unique("after-timeout")
        ok = ch.queue_declare(other, exclusive=True)
        assert ok.queue == other
        assert ch.queue_declare(queue, passive=True).queue == queue


def test_consume_ends_after_its_idle_timeout_and_cancels(
    conn: amqp_blocking.Connection, queue: str
) -> None:
    with conn.channel() as ch:
        for n in range(3):
            ch.basic_publish(b"%d" % n, routing_key=queue)
        consumer = ch.consume(queue, timeout=0.3, no_ack=True)
        assert [msg.body for msg in consumer] == [b"0", b"1", b"2"]
        assert ch.queue_declare(queue, passive=True).consumer_count == 0
        assert consumer.get(timeout=0) is None


def test_cancel_from_another_thread_ends_the_iteration(
    conn: amqp_blocking.Connection, queue: str
) -> None:
    with conn.channel() as ch:
        consumer = ch.basic_consume(queue)
        canceller = threading.Timer(0.2, consumer.cancel)
        canceller.start()
        assert list(consumer) == []  # blocks until the other thread cancels
        canceller.join()
        assert ch.queue_declare(queue, passive=True).consumer_count == 0


def test_nack_multiple_requeues_every_earlier_delivery(
    conn: amqp_blocking.Connection, queue: str
) -> None:
    with conn.channel() as ch:
        ch.confirm_select()
        for n in range(4):
            ch.basic_publish(b"%d" % n, routing_key=queue)
        got = [ch.basic_get(queue) for _ in range(4)]
        assert [m.body for m in got if m is not None] == [b"0", b"1", b"2", b"3"]
        last = got[-1]
        assert last is not None
        last.nack(multiple=True)
        again = ch.basic_get(queue)
        assert again is not None
        assert again.redelivered
        again.reject(requeue=False)
        assert ch.queue_declare(queue, passive=True).message_count == 3


def test_closing_a_stream_consumer_keeps_its_buffer_unrejected(
    conn: amqp_blocking.Connection,
) -> None:
    # RabbitMQ answers a reject or nack on a stream queue by closing the connection; closing
    # the consumer with deliveries buffered must leave the connection up and the stream whole.
    name = unique("stream")
    with conn.channel() as ch:
        ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
        try:
            ch.confirm_select()
            for n in range(20):
                ch.basic_publish(b"%d" % n, routing_key=name)
            ch.basic_qos(20)
            with ch.consume(name, timeout=5.0, arguments={"x-stream-offset": Int64(0)}) as c:
                first = next(c)
                assert first.body == b"0"
                first.ack()
            assert not conn.is_closed
            with ch.consume(name, timeout=0.5, arguments={"x-stream-offset": Int64(0)}) as c:
                assert [int(m.body) for m in c] == list(range(20))
        finally:
            ch.queue_delete(name)
    assert not conn.is_closed


def test_a_channel_error_names_its_code_and_spares_the_connection(
    conn: amqp_blocking.Connection,
) -> None:
    missing = unique("missing")
    ch = conn.channel()
    with pytest.raises(NotFound) as raised:
        ch.queue_declare(missing, passive=True)
    assert raised.value.reply_code == 404
    assert ch.is_closed
    with pytest.raises(NotFound):
        ch.basic_publish(b"", routing_key=missing)
    ch.close()  # closing a closed channel does nothing
    with conn.channel() as again:
        assert again.number == ch.number  # the id was freed
    assert not conn.is_closed


def test_wrong_password_is_a_403_close(rabbitmq_url: str) -> None:
    params = ConnectionParameters.from_url(rabbitmq_url)
    url = f"amqp://{params.username}:not-the-password@{params.address}/"
    with pytest.raises(ConnectionClosedError) as raised:
        amqp_blocking.connect(url)
    assert raised.value.reply_code == 403


def test_closing_the_connection_ends_consumers_and_later_calls(rabbitmq_url: str) -> None:
    conn = amqp_blocking.connect(rabbitmq_url, connection_name=unique("closing"))
    ch = conn.channel()
    name = ch.queue_declare(exclusive=True).queue
    consumer = ch.basic_consume(name)
    ended = threading.Event()

    def consume() -> None:
        assert consumer.get() is None
        ended.set()

    thread = threading.Thread(target=consume)
    thread.start()
    conn.close()
    thread.join()
    assert ended.is_set()
    assert conn.is_closed
    assert isinstance(conn.close_error, ConnectionClosedError)
    assert conn.close_error.reply_code == 200
    with pytest.raises(ConnectionClosedError):
        ch.basic_publish(b"", routing_key=name)
    conn.close()  # twice is fine


def test_parameters_and_bad_input(rabbitmq_url: str) -> None:
    with pytest.raises(ValueError, match="heartbeat"):
        amqp_blocking.connect(_with_query(rabbitmq_url, "heartbeat=x"))
    with pytest.raises(TypeError, match="url_or_params"):
        amqp_blocking.connect(5672)  # type: ignore[call-overload]
    params = ConnectionParameters.from_url(rabbitmq_url)
    with amqp_blocking.connect(params, connection_name=unique("named")) as conn:
        assert conn.params.connection_name is not None
        assert conn.params.connection_name.startswith("test-named-")
        assert "password" not in repr(conn)
        assert conn.server_properties["product"] == "RabbitMQ"
        with conn.channel() as ch, pytest.raises(ValueError, match="window"):
            ch.publisher(window=0)


def test_timed_out_channel_open_and_consume_are_undone(
    late_conn: amqp_blocking.Connection, proxy: SilentProxy, queue: str
) -> None:
    conn = late_conn
    # Both requests reach the broker after their callers gave up: the channel is closed and
    # the consumer cancelled as soon as the broker confirms them.
    for _ in range(20):
        _time_out(proxy, lambda: conn.channel(timeout=0.05).close())
        ch = conn.channel()
        # The orphan may be undone before this open: then ch took its number, and the check
        # below (a lower number comes free) needs the orphan still holding one. Try again.
        if ch.number > 1:
            break
        ch.close()
    with ch:
        _time_out(proxy, lambda: ch.basic_consume(queue, timeout=0.05).close())
        # RabbitMQ updates consumer counts asynchronously: poll, bounded, until it shows 0.
        deadline = time.monotonic() + 10
        while ch.queue_declare(queue, passive=True).consumer_count and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ch.queue_declare(queue, passive=True).consumer_count == 0
        first = ch.number
    numbers = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with conn.channel() as probe:
            numbers.append(probe.number)
            if probe.number < first:
                break
    assert numbers[-1] < first  # the orphan's id was freed


def test_threads_consume_and_declare_on_one_channel(
    conn: amqp_blocking.Connection, queue: str
) -> None:
    # RabbitMQ may answer a later request before basic.consume-ok or basic.cancel-ok; calls
    # from other threads on the same channel must wait instead of sharing its request queue.
    errors: list[BaseException] = []
    with conn.channel() as ch:

        def consume() -> None:
            try:
                for _ in range(10):
                    ch.basic_consume(queue).close()
            except BaseException as exc:
                errors.append(exc)

        def declare() -> None:
            try:
                for _ in range(20):
                    assert ch.queue_declare(queue, passive=True).queue == queue
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=f) for f in (consume, declare, consume, declare)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert ch.queue_declare(queue, passive=True).consumer_count == 0
    assert not conn.is_closed


def test_connect_core_hands_over_an_open_core(rabbitmq_url: str) -> None:
    # no I/O thread: the caller drives the core on the socket, here through a close handshake
    opened = amqp_blocking.connect_core(
        _with_query(rabbitmq_url, "heartbeat=0"), connection_name="core test"
    )
    try:
        assert opened.opened.heartbeat == 0
        assert opened.params.connection_name == "core test"
        core, sock = opened.core, opened.sock
        core.close(200, "bye")
        sock.sendall(core.data_to_send())
        events: list[Event] = []
        while not any(isinstance(e, ConnectionClosed) for e in events):
            event = core.next_event()
            if event is NEED_DATA:
                core.receive_data(sock.recv(4096))
            else:
                events.append(event)
    finally:
        opened.sock.close()
