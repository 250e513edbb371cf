"""Failover on a real 3-node RabbitMQ cluster (issue 30) through amqp_blocking, the adapter
``make test`` runs it with: the shared backlog workload (tests/support/recovery_scenarios.py) on
a quorum queue with three replicas, the node the connection is on SIGKILLed three times (and
started again), the three nodes' URLs as the endpoints."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from ..support.rabbitmq_cluster import KILLS
from ..support.recovery_scenarios import scenario_backlog_faults
from .test_recovery_scenarios import _connect

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..support.rabbitmq_cluster import RabbitMQCluster

pytestmark = [pytest.mark.rabbitmq, pytest.mark.rabbitmq_cluster]


def test_failover_on_node_kills(
    rabbitmq_cluster: RabbitMQCluster, record_property: Callable[[str, object], None]
) -> None:
    cluster = rabbitmq_cluster
    counts = asyncio.run(
        scenario_backlog_faults(
            _connect,
            cluster.urls,
            lambda _name, address: cluster.kill_node_at(address),
            faults=KILLS,
            arguments={"x-queue-type": "quorum"},
            declared=cluster.check_replicas,
        )
    )
    record_property("failover_seconds", counts.recovered_times)
    cluster.check_failover(counts)
