"""The classic queue type: RabbitMQ 3.10's ``rabbit_classic_queue``."""

from __future__ import annotations

from typing import Final

from ._queue_type import QueueType

__all__ = ["CLASSIC"]

CLASSIC: Final = QueueType(
    "classic",
    "rabbit_classic_queue",
    unsupported_arguments=frozenset(
        (
            "x-max-in-memory-length",
            "x-max-in-memory-bytes",
            "x-quorum-initial-group-size",
            "x-max-age",
            "x-stream-max-segment-size-bytes",
            "x-initial-cluster-size",
            "x-queue-leader-locator",
            "x-delivery-limit",
            "x-dead-letter-strategy",
        )
    ),
)
