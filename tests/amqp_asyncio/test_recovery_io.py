"""The shared recovery I/O scenarios (tests/support/recovery_io_scenarios.py) through
amqp_asyncio (``asyncio.run``): the embedded broker killed, paused and restarted on the same
port, and RabbitMQ's forced closes."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final, Generic, TypeVar, final

import pytest

import amqp_asyncio

from ..support.recovery_io_scenarios import SCENARIOS, scenario_forced_closes, scenario_id

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from ..support.recovery_io_scenarios import Connect, Runtime

T = TypeVar("T")

_TIMEOUT: Final = 120
_RABBITMQ_TIMEOUT: Final = 300


@final
class _Pending(Generic[T]):
    def __init__(self, task: asyncio.Task[T]) -> None:
        self.task = task

    @property
    def done(self) -> bool:
        return self.task.done()

    async def result(self) -> T:
        return await self.task


@final
class _AsyncioRuntime:
    async def in_thread(self, function: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(None, function)

    @asynccontextmanager
    async def background(self, work: Callable[[], Awaitable[T]]) -> AsyncIterator[_Pending[T]]:
        async def run() -> T:
            return await work()

        task = asyncio.create_task(run())
        try:
            yield _Pending(task)
        except BaseException:
            task.cancel()  # the scenario failed: its work goes with it
            raise
        await task

    async def settle(self) -> None:
        # Nothing tells when every task waits: give them the time the old tests gave.
        await asyncio.sleep(0.2)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


_RUNTIME: Final[Runtime] = _AsyncioRuntime()
_CONNECT: Final[Connect] = amqp_asyncio.connect


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
