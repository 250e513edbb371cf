"""The shared recovery scenarios (tests/support/recovery_scenarios.py) through amqp_trio: a
backlog of at least the prefetch when the connection is force-closed (shared RabbitMQ, found by
its name) and when a private node is SIGKILLed and restarted or force-closes it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import pytest
import trio

import amqp_trio

from ..support.rabbitmqctl import connection_pid, rabbitmqctl
from ..support.recovery_scenarios import (
    BacklogCounts,
    again_if_the_broker_lost_the_queue,
    scenario_backlog_fault,
)

if TYPE_CHECKING:
    from ..support.rabbitmq_node import RabbitMQNode

pytestmark = [pytest.mark.rabbitmq, pytest.mark.trio]

#: Generous: a node restart under load takes tens of seconds; a hang is a bug.
_TIMEOUT: Final = 300


def _forced_close(name: str) -> None:
    rabbitmqctl("close_connection", connection_pid(name), "test")


def _check(counts: BacklogCounts) -> None:
    assert counts.unprocessed == 0
    assert counts.stale == 0  # every delivery after Recovered came on the live connection
    print(counts)


async def test_backlog_forced_close(rabbitmq_url: str) -> None:
    with trio.fail_after(_TIMEOUT):
        counts = await scenario_backlog_fault(amqp_trio.connect, rabbitmq_url, _forced_close)
    _check(counts)
    assert counts.recovered_after is None


async def test_backlog_node_kill(private_rabbitmq: RabbitMQNode) -> None:
    node = private_rabbitmq
    with trio.fail_after(_TIMEOUT):
        counts = await again_if_the_broker_lost_the_queue(
            lambda: scenario_backlog_fault(
                amqp_trio.connect,
                node.url,
                lambda _: node.restart(),
                recovered=node.check_kept,
            )
        )
    _check(counts)
    assert counts.resumed_after is not None


async def test_backlog_node_forced_close(private_rabbitmq: RabbitMQNode) -> None:
    node = private_rabbitmq
    with trio.fail_after(_TIMEOUT):
        counts = await scenario_backlog_fault(amqp_trio.connect, node.url, node.close_connection)
    _check(counts)
