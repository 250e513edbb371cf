"""Failover on a real 3-node RabbitMQ cluster (issue 30) through amqp_trio: the shared backlog
workload on a quorum queue with three replicas while the node in use is SIGKILLed three times.
Opt-in (``--cluster-all``): ``make test`` runs amqp_blocking's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import pytest
import trio

import amqp_trio

from ..support.rabbitmq_cluster import KILLS
from ..support.recovery_scenarios import scenario_backlog_faults

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..support.rabbitmq_cluster import RabbitMQCluster

pytestmark = [pytest.mark.rabbitmq, pytest.mark.rabbitmq_cluster(opt_in=True), pytest.mark.trio]

#: Generous: a kill waits for the node killed before it to start again; a hang is a bug.
_TIMEOUT: Final = 300


async def test_failover_on_node_kills(
    rabbitmq_cluster: RabbitMQCluster, record_property: Callable[[str, object], None]
) -> None:
    cluster = rabbitmq_cluster
    with trio.fail_after(_TIMEOUT):
        counts = await scenario_backlog_faults(
            amqp_trio.connect,
            cluster.urls,
            lambda _name, address: cluster.kill_node_at(address),
            faults=KILLS,
            arguments={"x-queue-type": "quorum"},
            declared=cluster.check_replicas,
        )
    record_property("failover_seconds", counts.recovered_times)
    cluster.check_failover(counts)
