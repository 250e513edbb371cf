"""RabbitMQ 3.10's behaviours that clients depend on (issue 15, A-F; the 404 of a bind with
missing ends), as shared scenarios run against RabbitMQ and the embedded broker with the same
expectations: through amqp_trio and amqp_asyncio, and with raw frames where no client can go
(D)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Final

import pytest
import trio

import amqp_asyncio
import amqp_trio
from tests.support.scenarios import BEHAVIOUR_SCENARIOS, channel_above_channel_max

if TYPE_CHECKING:
    from tests.support.scenarios import FullConnect

_TIMEOUT: Final = 30

_trio_connect: FullConnect = amqp_trio.connect
_asyncio_connect: FullConnect = amqp_asyncio.connect


@pytest.mark.trio
@pytest.mark.parametrize("name", sorted(BEHAVIOUR_SCENARIOS))
async def test_behaviour_through_trio(name: str, amqp_url: str) -> None:
    with trio.fail_after(_TIMEOUT):
        await BEHAVIOUR_SCENARIOS[name](_trio_connect, amqp_url)


@pytest.mark.parametrize("name", sorted(BEHAVIOUR_SCENARIOS))
def test_behaviour_through_asyncio(name: str, amqp_url: str) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(_TIMEOUT):
            await BEHAVIOUR_SCENARIOS[name](_asyncio_connect, amqp_url)

    asyncio.run(bounded())


def test_channel_above_channel_max(amqp_url: str) -> None:
    channel_above_channel_max(amqp_url)
