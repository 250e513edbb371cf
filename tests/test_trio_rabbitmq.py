"""The shared integration scenarios (tests/scenarios.py) through amqp_trio, against a broker."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import trio

import amqp_trio

from .scenarios import RABBITMQ_SCENARIOS, SCENARIOS

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .scenarios import Connect

# Generous: a scenario that hangs is a bug, not slowness; rabbitmqctl takes ~1 s per call.
_SCENARIO_TIMEOUT = 60

_connect: Connect = amqp_trio.connect


async def _run(scenario: Callable[[Connect, str], Awaitable[None]], url: str) -> None:
    with trio.fail_after(_SCENARIO_TIMEOUT):
        await scenario(_connect, url)


@pytest.mark.trio
@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_scenario(name: str, amqp_url: str) -> None:
    await _run(SCENARIOS[name], amqp_url)


@pytest.mark.rabbitmq
@pytest.mark.trio
@pytest.mark.parametrize("name", sorted(RABBITMQ_SCENARIOS))
async def test_rabbitmq_scenario(name: str, rabbitmq_url: str) -> None:
    await _run(RABBITMQ_SCENARIOS[name], rabbitmq_url)
