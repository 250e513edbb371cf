"""The message a Trio consumer or ``basic_get`` hands out: the shared data plus awaitable
settlement bound to its channel."""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import attrs

from amqp_sansio import client

if TYPE_CHECKING:
    from ._channel import Channel

__all__ = ["Message"]


@final
@attrs.define(kw_only=True, slots=True, weakref_slot=False)
class Message(client.Message):
    """A delivered message (see :class:`amqp_sansio.client.Message` for the fields) that can be
    settled on the channel it arrived on."""

    _owner: Channel | None = attrs.field(default=None, repr=False, eq=False, alias="owner")

    def _channel_obj(self) -> Channel:
        owner = self._owner
        if owner is None:
            raise RuntimeError("this message is not bound to a channel")
        return owner

    async def ack(self, *, multiple: bool = False) -> None:
        """Acknowledge this message (and, with ``multiple``, every earlier one on the
        channel)."""
        await self._channel_obj().basic_ack(self.delivery_tag, multiple=multiple)

    async def nack(self, *, multiple: bool = False, requeue: bool = True) -> None:
        """Negatively acknowledge this message (RabbitMQ extension). Stream queues refuse it
        with a 540 that closes the connection."""
        await self._channel_obj().basic_nack(self.delivery_tag, multiple=multiple, requeue=requeue)

    async def reject(self, *, requeue: bool = True) -> None:
        """Reject this message. Stream queues refuse it with a 540 that closes the
        connection."""
        await self._channel_obj().basic_reject(self.delivery_tag, requeue=requeue)
