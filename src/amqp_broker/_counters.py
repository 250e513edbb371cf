"""What the broker counts as messages go through it, for rabbitmq_prometheus's aggregated
channel counters (``rabbitmq_channel_messages_published_total`` and the rest): one set for the
whole broker, as RabbitMQ's ``/metrics`` aggregates its channels."""

from __future__ import annotations

from typing import final

import attrs

__all__ = ["MessageCounters"]


@final
@attrs.define
class MessageCounters:
    """Monotonic counts since the broker started, over every protocol's channels."""

    #: Publishes accepted on a channel (0-10 transfers too), inside transactions as well.
    published: int = 0
    #: Publishes confirmed in confirm mode (basic.ack to the publisher).
    confirmed: int = 0
    #: Publishes routed nowhere: returned (mandatory) or dropped.
    unroutable_returned: int = 0
    unroutable_dropped: int = 0
    #: Consumer deliveries that wait for an ack, and those that do not (no-ack).
    delivered_ack: int = 0
    delivered: int = 0
    #: Deliveries (consumer or get) of messages delivered before.
    redelivered: int = 0
    #: ``basic.get`` answered with a message that waits for an ack, without, or empty.
    get_ack: int = 0
    get: int = 0
    get_empty: int = 0
    #: Deliveries acknowledged (each tag a multiple ack covers counts).
    acked: int = 0
