"""The shared recovery I/O scenarios (tests/support/recovery_io_scenarios.py) through
amqp_blocking, by the sync-to-async facade of tests/support/blocking_facade.py run with
``asyncio.run``: the embedded broker killed, paused and restarted on the same port, and
RabbitMQ's forced closes."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Final

import pytest

from ..support import blocking_facade
from ..support.recovery_io_scenarios import SCENARIOS, scenario_forced_closes, scenario_id

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ..support.recovery_io_scenarios import Connect, Runtime

#: Bounds the awaits; each blocking call is bounded by the facade's WAIT.
_TIMEOUT: Final = 120
_RABBITMQ_TIMEOUT: Final = 300

_RUNTIME: Final[Runtime] = blocking_facade.ThreadRuntime()
_CONNECT: Final[Connect] = blocking_facade.connect


async def _bounded(work: Awaitable[None], timeout: float) -> None:
    async with asyncio.timeout(timeout):
        await work


@pytest.mark.parametrize("scenario", SCENARIOS, ids=scenario_id)
def test_scenario(scenario: Callable[[Connect, Runtime], Awaitable[None]]) -> None:
    asyncio.run(_bounded(scenario(_CONNECT, _RUNTIME), _TIMEOUT))


@pytest.mark.rabbitmq
def test_forced_closes_lose_no_confirmed_message(rabbitmq_url: str) -> None:
    work = scenario_forced_closes(_CONNECT, _RUNTIME, rabbitmq_url)
    asyncio.run(_bounded(work, _RABBITMQ_TIMEOUT))
