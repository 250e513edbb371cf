"""The tasks the servers run beside a broker with a store (Trio): the group commit and the
free-disk alarm."""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, NoReturn

import trio

if TYPE_CHECKING:
    from .._memory import MemoryMonitor
    from ._sqlite import DurableStore

__all__ = ["run_commits", "watch_disk"]


async def watch_disk(
    store: DurableStore, memory: MemoryMonitor, limit: int, interval: float
) -> NoReturn:
    """Every *interval* seconds: below *limit* octets free on the store's disk, publishers
    are blocked (RabbitMQ's ``disk_free_limit``) until there is room again."""
    while True:
        free = (await trio.to_thread.run_sync(shutil.disk_usage, store.directory)).free
        memory.set_disk_low(free < limit, free)
        await trio.sleep(interval)


async def run_commits(store: DurableStore) -> NoReturn:
    """Group commit: write everything queued in the store in one transaction, off the event
    loop; what publishers queue meanwhile goes into the next one. Then release the
    confirms that waited for it."""
    pending = trio.Event()

    def wake() -> None:
        pending.set()

    store.on_pending = wake
    if store.pending:
        pending.set()
    while True:
        await pending.wait()
        pending = trio.Event()
        batch = store.take_batch()
        # not abandoned on cancel: a write in progress finishes before the broker stops
        await trio.to_thread.run_sync(store.write, batch)
        for waiter in store.released():
            waiter()
