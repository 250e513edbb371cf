"""The stream queue type: RabbitMQ 3.10's ``rabbit_stream_queue`` (its log is
:mod:`._streams`)."""

from __future__ import annotations

from typing import Final

from ._queue_type import QueueType

__all__ = ["STREAM"]

STREAM: Final = QueueType(
    "stream",
    "rabbit_stream_queue",
    unsupported_arguments=frozenset(
        (
            "x-expires",
            "x-message-ttl",
            "x-dead-letter-exchange",
            "x-dead-letter-routing-key",
            "x-max-length",
            "x-max-in-memory-length",
            "x-max-in-memory-bytes",
            "x-max-priority",
            "x-overflow",
            "x-queue-mode",
            "x-queue-version",
            "x-single-active-consumer",
            "x-quorum-initial-group-size",
            "x-queue-master-locator",
            "x-delivery-limit",
            "x-dead-letter-strategy",
        )
    ),
    replicated=True,
    global_qos=False,
)
