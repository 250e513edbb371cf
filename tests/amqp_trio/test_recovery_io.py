"""The shared recovery I/O scenarios (tests/support/recovery_io_scenarios.py) through amqp_trio,
natively: the embedded broker killed, paused and restarted on the same port, and RabbitMQ's
forced closes."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final, Generic, TypeVar, final

import pytest
import trio
import trio.testing

import amqp_trio

from ..support.recovery_io_scenarios import SCENARIOS, scenario_forced_closes, scenario_id

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from ..support.recovery_io_scenarios import Connect, Runtime

pytestmark = pytest.mark.trio

T = TypeVar("T")

_TIMEOUT: Final = 120
_RABBITMQ_TIMEOUT: Final = 300


@final
class _Pending(Generic[T]):
    def __init__(self) -> None:
        self.finished = trio.Event()
        self.outcome: list[T] = []

    @property
    def done(self) -> bool:
        return self.finished.is_set()

    async def result(self) -> T:
        await self.finished.wait()
        return self.outcome[0]


@final
class _TrioRuntime:
    async def in_thread(self, function: Callable[[], T]) -> T:
        return await trio.to_thread.run_sync(function)

    @asynccontextmanager
    async def background(self, work: Callable[[], Awaitable[T]]) -> AsyncIterator[_Pending[T]]:
        pending: _Pending[T] = _Pending()

        async def run() -> None:
            pending.outcome.append(await work())
            pending.finished.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            yield pending

    async def settle(self) -> None:
        await trio.testing.wait_all_tasks_blocked()

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)


_RUNTIME: Final[Runtime] = _TrioRuntime()
_CONNECT: Final[Connect] = amqp_trio.connect


@pytest.mark.parametrize("scenario", SCENARIOS, ids=scenario_id)
async def test_scenario(scenario: Callable[[Connect, Runtime], Awaitable[None]]) -> None:
    with trio.fail_after(_TIMEOUT):
        await scenario(_CONNECT, _RUNTIME)


@pytest.mark.rabbitmq
async def test_forced_closes_lose_no_confirmed_message(rabbitmq_url: str) -> None:
    with trio.fail_after(_RABBITMQ_TIMEOUT):
        await scenario_forced_closes(_CONNECT, _RUNTIME, rabbitmq_url)
