"""Failover on a real 3-node RabbitMQ cluster (issue 30) through amqp_asyncio: the shared
backlog workload on a quorum queue with three replicas while the node in use is SIGKILLed three
times. Opt-in (``--cluster-all``): ``make test`` runs amqp_blocking's."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Final

import pytest

import amqp_asyncio

from ..support.rabbitmq_cluster import KILLS
from ..support.recovery_scenarios import BacklogCounts, scenario_backlog_faults

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..support.rabbitmq_cluster import RabbitMQCluster

pytestmark = [pytest.mark.rabbitmq, pytest.mark.rabbitmq_cluster(opt_in=True)]

#: Generous: a kill waits for the node killed before it to start again; a hang is a bug.
_TIMEOUT: Final = 300


async def _failover(cluster: RabbitMQCluster) -> BacklogCounts:
    async with asyncio.timeout(_TIMEOUT):
        return await scenario_backlog_faults(
            amqp_asyncio.connect,
            cluster.urls,
            lambda _name, address: cluster.kill_node_at(address),
            faults=KILLS,
            arguments={"x-queue-type": "quorum"},
            declared=cluster.check_replicas,
        )


def test_failover_on_node_kills(
    rabbitmq_cluster: RabbitMQCluster, record_property: Callable[[str, object], None]
) -> None:
    counts = asyncio.run(_failover(rabbitmq_cluster))
    record_property("failover_seconds", counts.recovered_times)
    rabbitmq_cluster.check_failover(counts)
