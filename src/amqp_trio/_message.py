"""The message a Trio consumer or ``basic_get`` hands out: the shared data plus awaitable
settlement bound to its channel."""

from __future__ import annotations

from typing import final

import attrs

from amqp_sansio.client import AsyncMessage

__all__ = ["Message"]


@final
@attrs.define(kw_only=True, slots=True, weakref_slot=False)
class Message(AsyncMessage):
    """A delivered message (see :class:`amqp_sansio.client.Message` for the fields) that can be
    settled on the channel it arrived on."""
