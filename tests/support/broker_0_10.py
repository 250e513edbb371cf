"""The embedded broker serving AMQP 0-10 from a thread, for tests of 0-10 clients.

:func:`brokers_in_thread` starts *count* independent brokers (each its own model, so tests
that use fixed queue names can run against them at once), each listening on a free port, in
one Trio thread; it yields their ports and stops them at the end of the block.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING

import trio

import amqp_broker

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["brokers_in_thread"]


@contextmanager
def brokers_in_thread(count: int = 1) -> Iterator[list[int]]:
    ports: list[int] = []
    failure: list[BaseException] = []
    started = threading.Event()
    holder: list[tuple[trio.lowlevel.TrioToken, trio.Event]] = []

    async def main() -> None:
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            for _ in range(count):
                listeners = await nursery.start(amqp_broker.serve_0_10, amqp_broker.make_broker())
                ports.append(int(listeners[0].socket.getsockname()[1]))
            holder.append((trio.lowlevel.current_trio_token(), stop))
            started.set()
            await stop.wait()
            nursery.cancel_scope.cancel()

    def run() -> None:
        try:
            trio.run(main)
        except BaseException as exc:  # handed to the test's thread
            failure.append(exc)
        finally:
            started.set()

    thread = threading.Thread(target=run, name="amqp_broker 0-10", daemon=True)
    thread.start()
    started.wait()
    if not holder:
        raise RuntimeError("the 0-10 broker failed to start") from (failure[0] if failure else None)
    token, stop = holder[0]
    try:
        yield ports
    finally:
        trio.from_thread.run_sync(stop.set, trio_token=token)
        thread.join(10)
    if failure:
        raise failure[0]
