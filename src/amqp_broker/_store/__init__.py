"""Durability: what the broker writes to disk so that durable definitions and persistent
messages survive a restart (``--data-dir``).

The model calls a :class:`DurableStore` on every change that must survive (declare, delete,
bind, enqueue, deliver, settle); the store only queues the change in memory. The transport
writes the queued changes in one transaction (group commit, :meth:`DurableStore.take_batch`
then :meth:`DurableStore.write`) and releases the publisher confirms that waited for it.
Without a store the broker is in-memory, as it always was.
"""

from __future__ import annotations

from ._sqlite import (
    DurableStore,
    RecoveredBinding,
    RecoveredExchange,
    RecoveredMessage,
    RecoveredPolicy,
    RecoveredQueue,
    Recovery,
    StoreBatch,
    StoreError,
    is_persistent,
)

__all__ = [
    "DurableStore",
    "RecoveredBinding",
    "RecoveredExchange",
    "RecoveredMessage",
    "RecoveredPolicy",
    "RecoveredQueue",
    "Recovery",
    "StoreBatch",
    "StoreError",
    "is_persistent",
]
