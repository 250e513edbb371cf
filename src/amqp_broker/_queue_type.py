"""What a queue type is to the model: its name, the arguments RabbitMQ refuses for it and the
rules that set it apart. Each type is one module (:mod:`._queue_classic`,
:mod:`._queue_quorum`, :mod:`._queue_stream`); :mod:`._queues` lists them, so adding a type is
adding a module and naming it there."""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import attrs

from ._errors import BrokerError

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["QueueType"]


@final
@attrs.frozen
class QueueType:
    """One ``x-queue-type``, with RabbitMQ 3.10's rules for it (probed on the wire:
    ``tests/amqp_broker/test_queue_types.py`` declares every argument of every type against
    both brokers)."""

    #: The ``x-queue-type`` value.
    name: str
    #: RabbitMQ's module, as its error texts name the type (``rabbit_classic_queue``).
    implementation: str
    #: Arguments RabbitMQ refuses for this type with 406 ``invalid arg 'x-...' for queue 'q'
    #: in vhost '/' of queue type rabbit_..._queue``, before it looks at any value. Arguments
    #: it does not know (``x-foo``) are accepted by every type.
    unsupported_arguments: frozenset[str]
    #: Quorum and stream queues: durable, neither exclusive nor auto-delete, never
    #: server-named.
    replicated: bool = False
    #: Whether a consumer may come from a channel with a global prefetch (``basic.qos
    #: global=true``); where not, ``basic.consume`` is 540 and closes the connection.
    global_qos: bool = True
    #: Quorum queues: every delivery carries ``x-delivery-count`` (returns so far) and
    #: ``x-delivery-limit`` drops or dead-letters a message returned more often.
    counts_deliveries: bool = False

    def check_arguments(self, keys: Iterable[str], where: str) -> None:
        """406 for the first of *keys* this type refuses (*where*: ``queue 'q' in vhost
        '/'``)."""
        for key in keys:
            if key in self.unsupported_arguments:
                raise BrokerError(
                    406, f"invalid arg '{key}' for {where} of queue type {self.implementation}"
                )
