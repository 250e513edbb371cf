"""A published message, what it costs to hold, and how its time to live is read."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, final

import attrs

from amqp_sansio.framing import encode_table

from ._errors import BrokerError

if TYPE_CHECKING:
    from amqp_sansio import BasicProperties

__all__ = ["PROPERTIES_ESTIMATE", "Message", "expiry", "parse_expiration"]

#: Octets counted for a message's content header and properties besides its headers table.
PROPERTIES_ESTIMATE: Final = 128


@final
@attrs.frozen(slots=True)
class Message:
    """A published message; shared, never changed, by every queue it was routed to."""

    exchange: str
    routing_key: str
    properties: BasicProperties = attrs.field(eq=False)
    body: bytes | bytearray = attrs.field(eq=False)
    #: Octets the broker counts while it holds the message (memory high watermark): the body,
    #: the encoded headers table and :data:`PROPERTIES_ESTIMATE` for the rest.
    held: int = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        held = len(self.body) + PROPERTIES_ESTIMATE
        headers = self.properties.headers
        if headers:
            scratch = bytearray()
            encode_table(scratch, headers)
            held += len(scratch)
        object.__setattr__(self, "held", held)

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
