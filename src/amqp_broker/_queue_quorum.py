"""The quorum queue type: RabbitMQ 3.10's ``rabbit_quorum_queue``, without replication.

Its behaviour besides the argument table: deliveries count (``x-delivery-count``: one more
after each return: reject or nack with requeue, recover, a closed channel; shown on a
consumer's delivery once above 0, on every ``basic.get`` from 0), and with
``x-delivery-limit`` N a message returned an N+1st time is dead-lettered with reason
``delivery_limit`` (or dropped when the queue has no dead-letter exchange); durable, not
exclusive, not auto-delete, not server-named; no priorities; no consumer on a channel with a
global prefetch (540).
"""

from __future__ import annotations

from typing import Final

from ._queue_type import QueueType

__all__ = ["DEAD_LETTER_STRATEGIES", "QUORUM"]

QUORUM: Final = QueueType(
    "quorum",
    "rabbit_quorum_queue",
    unsupported_arguments=frozenset(
        (
            "x-max-priority",
            "x-queue-mode",
            "x-queue-version",
            "x-max-age",
            "x-stream-max-segment-size-bytes",
            "x-initial-cluster-size",
            "x-queue-master-locator",
        )
    ),
    replicated=True,
    global_qos=False,
    counts_deliveries=True,
)

#: ``x-dead-letter-strategy`` values; in memory both deliver a dead-lettered message once
#: (RabbitMQ's at-least-once only matters across node failures).
DEAD_LETTER_STRATEGIES: Final = frozenset(("at-most-once", "at-least-once"))
