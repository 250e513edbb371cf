"""The shared recovery scenarios (tests/support/recovery_scenarios.py) through amqp_asyncio
(``asyncio.run``): a backlog of at least the prefetch when the connection is force-closed (shared
RabbitMQ, found by its name) and when a private node is SIGKILLed and restarted or force-closes
it."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Final

import pytest

import amqp_asyncio

from ..support import stall_dump
from ..support.rabbitmq_node import QueuesLostError
from ..support.rabbitmqctl import connection_pid, rabbitmqctl
from ..support.recovery_scenarios import (
    BacklogCounts,
    RecoveringConnect,
    again_if_the_broker_lost_the_queue,
    scenario_backlog_fault,
)
from ..support.scenarios import unique

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from ..support.rabbitmq_node import RabbitMQNode

pytestmark = pytest.mark.rabbitmq

#: Generous: a node restart under load takes tens of seconds; a hang is a bug.
_TIMEOUT: Final = 300


def _forced_close(name: str) -> None:
    rabbitmqctl("close_connection", connection_pid(name), "test")


async def _bounded(
    connect: RecoveringConnect,
    url: str,
    fault: Callable[[str], float | None],
    ctl: stall_dump.Ctl = rabbitmqctl,
    logs: Path | None = None,
    recovered: Callable[[str], None] | None = None,
) -> BacklogCounts:
    task = asyncio.ensure_future(scenario_backlog_fault(connect, url, fault, recovered=recovered))
    done, _ = await asyncio.wait({task}, timeout=_TIMEOUT)
    if not done:
        # A hang leaves both sides' state, taken before the cancel unwinds the scenario.
        print(stall_dump.stall_report(ctl, logs))
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise TimeoutError(f"the scenario took over {_TIMEOUT} s")
    return task.result()


def _check(counts: BacklogCounts) -> None:
    assert counts.unprocessed == 0
    assert counts.stale == 0  # every delivery after Recovered came on the live connection
    print(counts)


def test_backlog_forced_close(rabbitmq_url: str) -> None:
    counts = asyncio.run(_bounded(amqp_asyncio.connect, rabbitmq_url, _forced_close))
    _check(counts)
    assert counts.recovered_after is None


def test_backlog_node_kill(private_rabbitmq: RabbitMQNode) -> None:
    node = private_rabbitmq
    counts = asyncio.run(
        again_if_the_broker_lost_the_queue(
            lambda: _bounded(
                amqp_asyncio.connect,
                node.url,
                lambda _: node.restart(),
                node.ctl,
                node.root / "log",
                node.check_kept,
            )
        )
    )
    _check(counts)
    assert counts.resumed_after is not None


def test_backlog_node_forced_close(private_rabbitmq: RabbitMQNode) -> None:
    node = private_rabbitmq
    counts = asyncio.run(
        _bounded(amqp_asyncio.connect, node.url, node.close_connection, node.ctl, node.root / "log")
    )
    _check(counts)


def test_a_queue_the_node_forgot_is_named(private_rabbitmq: RabbitMQNode) -> None:
    """``check_kept``: a durable queue holding a message passes; an empty one (what the
    restore declares when the broker forgot the queue) raises QueuesLostError naming it."""
    node = private_rabbitmq
    queue = unique("kept")

    async def main() -> None:
        async with amqp_asyncio.connect(node.url) as conn:
            ch = await conn.open_channel()
            await ch.queue_declare(queue, durable=True)
            try:
                with pytest.raises(QueuesLostError, match=queue):
                    node.check_kept(queue)
                await ch.confirm_select()  # the publish below returns once it is queued
                await ch.basic_publish(b"kept", routing_key=queue)
                node.check_kept(queue)
            finally:
                await ch.queue_delete(queue)

    asyncio.run(main())


def test_a_scenario_whose_broker_lost_the_queue_runs_once_more() -> None:
    """The run a broker loss spoiled runs again; lost twice, the error stands."""
    outcomes: list[BacklogCounts | QueuesLostError] = [QueuesLostError("lost"), BacklogCounts()]

    async def run() -> BacklogCounts:
        outcome = outcomes.pop(0)
        if isinstance(outcome, QueuesLostError):
            raise outcome
        return outcome

    assert asyncio.run(again_if_the_broker_lost_the_queue(run)) == BacklogCounts()
    outcomes[:] = [QueuesLostError("lost"), QueuesLostError("lost again")]
    with pytest.raises(QueuesLostError, match="lost again"):
        asyncio.run(again_if_the_broker_lost_the_queue(run))
