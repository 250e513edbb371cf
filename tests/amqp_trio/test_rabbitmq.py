"""The shared integration scenarios (tests/support/scenarios.py) through amqp_trio."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import trio

import amqp_trio
from tests.support.scenarios import RABBITMQ_SCENARIOS, SCENARIOS

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from tests.support.scenarios import Connect

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


@pytest.mark.trio
async def test_concurrent_consumes_and_declares_get_their_own_replies(amqp_url: str) -> None:
    # RabbitMQ answers basic.consume from the queue's process, so a passive declare sent after
    # a consume may be answered first; each caller must still get the reply to its request.
    async with amqp_trio.connect(amqp_url) as conn, conn.channel() as ch:
        queue = (await ch.queue_declare(exclusive=True)).queue
        declared: list[str] = []
        tags: list[str] = []

        async def consume(n: int) -> None:
            async with ch.basic_consume(queue, consumer_tag=f"c{n}") as consumer:
                tags.append(consumer.consumer_tag)

        async def declare() -> None:
            declared.append((await ch.queue_declare(queue, passive=True)).queue)

        with trio.fail_after(_SCENARIO_TIMEOUT):
            async with trio.open_nursery() as nursery:
                for n in range(20):
                    nursery.start_soon(consume, n)
                    nursery.start_soon(declare)
        assert sorted(tags) == sorted(f"c{n}" for n in range(20))
        assert declared == [queue] * 20
