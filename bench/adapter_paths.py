"""The adapters' own per-message work, without a broker or a socket (issue 20).

Two paths, each timed with ``time.process_time`` and reported in µs per message, the best of
``--repeat`` runs:

* ``delivery``: N deliveries handed to a consumer as the router hands them
  (``Consumer.deliver``), then taken by its iterator (``async for`` / ``get()``), 50 times:
  amqp_trio, amqp_asyncio, amqp_blocking;
* ``settle``: N tickets registered as a pipelined publisher registers them, then settled by
  ``multiple`` acks of 100 through ``Router.handle``, 50 times: amqp_trio and amqp_blocking
  (one publisher thread waiting for the window, as in ``e2e.py``'s confirm run).

On a shared machine ``e2e.py``'s client CPU moves by more than these paths cost; these run in
one process for milliseconds and isolate what the adapters add. Compare two trees with
``PYTHONPATH=<tree>/src``::

    .venv/bin/python bench/adapter_paths.py
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
import types
from typing import TYPE_CHECKING

import trio

import amqp_asyncio._channel as aio
import amqp_blocking._channel as blk
import amqp_trio._channel as tri
from amqp_sansio import BasicDeliver, BasicProperties, MessageReceived, PublishConfirmed
from amqp_sansio.client import ChannelBook, Router

if TYPE_CHECKING:
    from collections.abc import Callable

N = 1000
REPEAT = 50
DELIVERY = MessageReceived(
    channel=1,
    method=BasicDeliver(
        consumer_tag="c", delivery_tag=5, redelivered=False, exchange="", routing_key="q"
    ),
    properties=BasicProperties(),
    body=b"x" * 16,
)
ACKS = [
    PublishConfirmed(channel=1, publish_numbers=tuple(range(first, first + 100)))
    for first in range(1, N + 1, 100)
]
# What the consumers and channels read of their connection: no telemetry, no recovery.
CONNECTION = types.SimpleNamespace(_telemetry=None, _policy=None, _core=None)


def per_message(seconds: float) -> float:
    return seconds / (REPEAT * N) * 1e6


async def trio_delivery() -> float:
    channel = types.SimpleNamespace(_conn=CONNECTION, number=1)
    consumer = tri.Consumer(channel, "t", no_ack=False, buffer_size=N)  # type: ignore[arg-type]
    start = time.process_time()
    for _ in range(REPEAT):
        for _ in range(N):
            consumer.deliver(DELIVERY)
        taken = 0
        async for _ in consumer:
            taken += 1
            if taken == N:
                break
    return per_message(time.process_time() - start)


async def asyncio_delivery() -> float:
    reading = types.SimpleNamespace(pause=lambda _: None, resume=lambda _: None)
    channel = aio.Channel(CONNECTION, ChannelBook(1))  # type: ignore[arg-type]
    consumer = aio.Consumer(channel, "a", no_ack=False, buffer_size=N, reading=reading)  # type: ignore[arg-type]
    start = time.process_time()
    for _ in range(REPEAT):
        for _ in range(N):
            consumer.deliver(DELIVERY)
        taken = 0
        async for _ in consumer:
            taken += 1
            if taken == N:
                break
    return per_message(time.process_time() - start)


def blocking_delivery() -> float:
    channel = blk.Channel(CONNECTION, ChannelBook(1))  # type: ignore[arg-type]
    consumer = blk.Consumer(channel, "b", False, None)
    start = time.process_time()
    for _ in range(REPEAT):
        for _ in range(N):
            consumer.deliver(DELIVERY)
        for _ in range(N):
            consumer.get()
    return per_message(time.process_time() - start)


def settle_all(book: ChannelBook, router: Router, register: Callable[[int], None]) -> float:
    spent = 0.0
    for _ in range(REPEAT):
        for number in range(1, N + 1):
            register(number)
        start = time.process_time()
        for ack in ACKS:
            router.handle(ack)
        spent += time.process_time() - start
    assert not book.confirms
    return per_message(spent)


async def trio_settle() -> float:
    router = Router(None, None)  # type: ignore[arg-type]
    book = router.channels[1] = ChannelBook(1)
    publisher = tri.Publisher(types.SimpleNamespace(), None, N)  # type: ignore[arg-type]

    def register(number: int) -> None:
        book.confirms[number] = tri.PublishTicket(number, publisher)
        publisher._count_published()

    return settle_all(book, router, register)


def blocking_settle() -> float:
    router = Router(None, None)  # type: ignore[arg-type]
    book = router.channels[1] = ChannelBook(1)
    lock = threading.Lock()
    channel = types.SimpleNamespace(_connection=types.SimpleNamespace(_lock=lock))
    publisher = blk.Publisher(channel, N)  # type: ignore[arg-type]
    publisher._waiting = 1  # a publishing thread waits for room in the window

    def register(number: int) -> None:
        book.confirms[number] = blk.PublishTicket(number, publisher, lock)
        publisher._count_published()

    with lock:  # the I/O thread settles with the connection lock held
        return settle_all(book, router, register)


CASES: dict[str, Callable[[], float]] = {
    "delivery amqp_trio": lambda: trio.run(trio_delivery),
    "delivery amqp_asyncio": lambda: asyncio.run(asyncio_delivery()),
    "delivery amqp_blocking": blocking_delivery,
    "settle amqp_trio": lambda: trio.run(trio_settle),
    "settle amqp_blocking": blocking_settle,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per case, best reported")
    args = parser.parse_args()
    for name, run in CASES.items():
        best = min(run() for _ in range(args.repeat))
        print(f"{name:24} {best:6.2f} µs per message")


if __name__ == "__main__":
    main()
