"""The group-commit task the servers run beside a broker with a store (Trio)."""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

import trio

if TYPE_CHECKING:
    from ._sqlite import DurableStore

__all__ = ["run_commits"]


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
