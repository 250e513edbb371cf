"""Dead-lettering: the copy of a message that goes to a queue's dead-letter exchange, with
RabbitMQ's ``x-death`` records and ``x-first-death-*`` headers.

Pure functions; routing the copy is the virtual host's work
(:meth:`._vhost.VirtualHost.dead_letter`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import attrs

from amqp_sansio import FieldTable, Int64

from ._fields import typed
from ._message import Message

if TYPE_CHECKING:
    from amqp_sansio import FieldArray

    from ._queues import Queue

__all__ = ["dead_lettered", "may_reach"]


def dead_lettered(
    queue: Queue, message: Message, reason: str, exchange_name: str, wall_clock: float
) -> Message:
    """The copy of *message* dead-lettered from *queue* for *reason* (``rejected``,
    ``expired``, ``maxlen``, ``delivery_limit``) to *exchange_name*, at *wall_clock* seconds
    since the epoch."""
    properties = message.properties
    headers: FieldTable = dict(properties.headers or {})
    deaths_value = headers.get("x-death")
    deaths: FieldArray = list(deaths_value) if isinstance(deaths_value, list) else []
    routing_keys: FieldArray = [message.routing_key]
    cc = headers.get("CC")
    if isinstance(cc, list):
        routing_keys += cc
    record: FieldTable | None = None
    for index, existing in enumerate(deaths):
        if (
            isinstance(existing, dict)
            and existing.get("queue") == queue.name
            and existing.get("reason") == reason
        ):
            record = existing
            del deaths[index]
            break
    stamp = datetime.fromtimestamp(int(wall_clock), tz=UTC)
    if record is None:
        record = {
            "count": Int64(1),
            "reason": reason,
            "queue": queue.name,
            "time": stamp,
            "exchange": message.exchange,
            "routing-keys": routing_keys,
        }
        if reason == "expired" and properties.expiration is not None:
            record["original-expiration"] = properties.expiration
    else:
        count = typed(record.get("count"))
        record = dict(record)
        record["count"] = Int64((count if isinstance(count, int) else 0) + 1)
        record["time"] = stamp
    deaths.insert(0, record)
    headers["x-death"] = deaths
    if "x-first-death-reason" not in headers:
        headers["x-first-death-reason"] = reason
        headers["x-first-death-queue"] = queue.name
        headers["x-first-death-exchange"] = message.exchange
    routing_key = queue.dead_letter_routing_key or message.routing_key
    return Message(
        exchange=exchange_name,
        routing_key=routing_key,
        properties=attrs.evolve(
            properties,
            headers=headers,
            expiration=None if reason == "expired" else properties.expiration,
        ),
        body=message.body,
    )


def may_reach(copy: Message, target: Queue) -> bool:
    """Whether a dead-lettered *copy* may enter *target*: RabbitMQ drops automatic cycles
    (the copy already died in *target*) unless a rejection is among its deaths."""
    headers = copy.properties.headers or {}
    deaths = headers.get("x-death")
    if not isinstance(deaths, list):
        return True
    cycles = any(isinstance(d, dict) and d.get("queue") == target.name for d in deaths)
    rejected_before = any(isinstance(d, dict) and d.get("reason") == "rejected" for d in deaths)
    return not cycles or rejected_before
