"""A published message, and how its time to live is read."""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import attrs

from ._errors import BrokerError

if TYPE_CHECKING:
    from amqp_sansio import BasicProperties

__all__ = ["Message", "expiry", "parse_expiration"]


@final
@attrs.frozen(slots=True)
class Message:
    """A published message; shared, never changed, by every queue it was routed to."""

    exchange: str
    routing_key: str
    properties: BasicProperties = attrs.field(eq=False)
    body: bytes | bytearray = attrs.field(eq=False)

    @property
    def size(self) -> int:
        """Body size in octets."""
        return len(self.body)


def expiry(queue_ttl: int | None, expiration: str | None, now: float) -> float | None:
    """When a message queued at *now* expires: the lower of the queue's ``x-message-ttl``
    and the message's ``expiration`` (milliseconds), or None."""
    ttl = queue_ttl
    if expiration is not None:
        per_message = parse_expiration(expiration)
        ttl = per_message if ttl is None else min(ttl, per_message)
    return None if ttl is None else now + ttl / 1000


def parse_expiration(expiration: str) -> int:
    """The ``expiration`` property in milliseconds; 406 when it is not a non-negative
    integer, with RabbitMQ's text."""
    if not expiration.isdigit():
        reason = (
            "{value_negative," + expiration + "}"
            if expiration[1:].isdigit() and expiration[0] == "-"
            else "no_integer"
        )
        raise BrokerError(406, f"invalid expiration '{expiration}': {reason}")
    return int(expiration)
