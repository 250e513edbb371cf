"""The embedded broker serving AMQP 0-10 (and 0-9-1) from a thread, for tests of 0-10
clients.

:func:`brokers_in_thread` starts *count* independent brokers (each its own model, so tests
that use fixed queue names can run against them at once), each listening on free ports, in
one Trio thread; it yields their :class:`Ports` and stops them at the end of the block.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, NamedTuple

import trio

import amqp_broker

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["Ports", "brokers_in_thread"]


class Ports(NamedTuple):
    """Where one broker listens: 0-10 clients on ``amqp_0_10``, 0-9-1 ones on
    ``amqp_0_9_1``."""

    amqp_0_10: int
    amqp_0_9_1: int

    def url(self, protocol: str = "0-10") -> str:
        port = self.amqp_0_10 if protocol == "0-10" else self.amqp_0_9_1
        return f"amqp://guest:guest@127.0.0.1:{port}/"


@contextmanager
def brokers_in_thread(
    count: int = 1,
    *,
    options: amqp_broker.BrokerOptions | None = None,
    made: list[amqp_broker.Broker] | None = None,
) -> Iterator[list[Ports]]:
    """*options* for every broker; *made* receives the brokers (to look at their accounting
    from the test's thread)."""
    ports: list[Ports] = []
    failure: list[BaseException] = []
    started = threading.Event()
    holder: list[tuple[trio.lowlevel.TrioToken, trio.Event]] = []

    async def main() -> None:
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            for _ in range(count):
                # one port: the broker chooses the protocol by the client's header
                broker = amqp_broker.make_broker(options=options)
                if made is not None:
                    made.append(broker)
                listeners = await nursery.start(amqp_broker.serve, broker, "127.0.0.1", 0)
                port = int(listeners[0].socket.getsockname()[1])
                ports.append(Ports(port, port))
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
