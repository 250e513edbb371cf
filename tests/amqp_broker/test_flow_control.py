"""Flow control as RabbitMQ does it, on the wire, against the embedded broker in a process of
its own (so its memory can be measured): a consumer that never reads its socket, a publisher
(amqp_blocking, with confirms) filling that consumer's queue, and a pika consumer on another
connection and queue.

With a 4 MiB watermark and a 1 MiB output limit the broker's memory stays bounded by those two
(plus the interpreter's slack) while the publisher pushes three times the watermark: the
publisher receives ``connection.blocked`` when the non-reader's queue crosses the watermark and
``connection.unblocked`` once that queue is purged; the other consumer keeps consuming while
publishers are blocked; and every confirmed message is accounted for at the end.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
import uuid
from typing import TYPE_CHECKING, Final

import pika
import pytest

import amqp_blocking
from amqp_sansio import (
    BasicConsume,
    BasicConsumeOk,
    BasicQos,
    BasicQosOk,
    ChannelOpen,
    ChannelOpenOk,
)
from tests.support.scenarios import RawAMQP

if TYPE_CHECKING:
    from collections.abc import Iterator

MIB: Final = 1024 * 1024
WATERMARK: Final = 4 * MIB
OUTBOUND: Final = MIB
BODY: Final = b"x" * (16 * 1024)
TOTAL: Final = 3 * WATERMARK // len(BODY)  # three times the watermark, in 16 KiB messages
#: The interpreter's own growth on top of what the broker holds (frames being parsed, a read
#: buffer per connection, allocator slack), measured at about 1 MiB.
SLACK: Final = 4 * MIB
BOUND: Final = 60.0  # a hang guard


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def broker() -> Iterator[tuple[str, int]]:
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "amqp_broker", "--host", "127.0.0.1", "--port", "0"),
            *("--memory-high-watermark-bytes", str(WATERMARK)),
            *("--outbound-limit", str(OUTBOUND)),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        assert line.startswith("amqp_broker listening on 127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1])
        yield f"amqp://guest:guest@127.0.0.1:{port}/", process.pid
    finally:
        process.terminate()
        process.wait(timeout=30)
        assert process.stderr is not None
        process.stderr.close()


def test_a_non_reader_and_the_watermark_bound_memory_and_block_publishers(
    broker: tuple[str, int],
) -> None:
    url, pid = broker
    slow, own = f"flow-slow-{uuid.uuid4().hex[:8]}", f"flow-own-{uuid.uuid4().hex[:8]}"
    params = pika.URLParameters(url)
    admin = pika.BlockingConnection(params)
    ach = admin.channel()
    ach.queue_declare(slow)
    ach.queue_declare(own)
    for n in range(300):
        ach.basic_publish("", own, b"own %d" % n)

    # The non-reader: consumes with manual acks and no prefetch limit, then never reads.
    reader = RawAMQP(url)
    reader.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    reader.send(1, ChannelOpen())
    reader.expect(ChannelOpenOk, 1)
    reader.send(1, BasicQos(prefetch_count=0))
    reader.expect(BasicQosOk, 1)
    reader.send(1, BasicConsume(queue=slow, consumer_tag="never-reads"))
    reader.expect(BasicConsumeOk, 1)
    base = rss(pid)

    consumed: list[float] = []
    stop = threading.Event()

    def consume_own() -> None:
        connection = pika.BlockingConnection(params)
        channel = connection.channel()
        channel.basic_qos(prefetch_count=1)
        for method, _, _ in channel.consume(own, inactivity_timeout=0.5):
            if method is not None:
                consumed.append(time.monotonic())
                channel.basic_ack(method.delivery_tag)
                time.sleep(0.01)
            if stop.is_set() or len(consumed) == 300:
                break
        channel.cancel()
        connection.close()

    confirmed: list[int] = []
    publisher = amqp_blocking.connect(url)

    def publish() -> None:
        with publisher.channel() as channel:
            channel.confirm_select()
            for n in range(TOTAL):
                channel.basic_publish(BODY, routing_key=slow)  # raises on a nack
                confirmed.append(n)

    peak = [0]

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], rss(pid) - base)
            time.sleep(0.01)

    threads = [threading.Thread(target=f) for f in (consume_own, publish, sample)]
    for thread in threads:
        thread.start()
    purged = 0
    blocked: list[tuple[float, str | None]] = []
    unblocked: list[float] = []
    deadline = time.monotonic() + BOUND
    try:
        while len(confirmed) < TOTAL:
            assert time.monotonic() < deadline, (len(confirmed), blocked, unblocked)
            if not publisher.blocked:
                time.sleep(0.01)
                continue
            blocked.append((time.monotonic(), publisher.blocked_reason))
            # Blocked: the other consumer goes on meanwhile; then make room.
            since = blocked[-1][0]
            while sum(1 for t in consumed if t > since) < 5 and len(consumed) < 300:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            purged += ach.queue_purge(slow).method.message_count
            while publisher.blocked:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            unblocked.append(time.monotonic())
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=BOUND)
        publisher.close()
    reader.close()  # its unacknowledged deliveries go back to the queue
    time.sleep(0.2)
    purged += ach.queue_purge(slow).method.message_count
    ach.queue_delete(slow)
    ach.queue_delete(own)
    admin.close()

    assert len(confirmed) == TOTAL
    assert purged == TOTAL  # nothing queued was lost
    assert blocked
    assert {reason for _, reason in blocked} == {"low on memory"}
    assert len(unblocked) == len(blocked)
    assert len(blocked) >= 2  # three watermarks' worth: blocked, made room, blocked again
    assert peak[0] <= WATERMARK + OUTBOUND + SLACK, peak[0] / MIB
