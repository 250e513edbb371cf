"""Issue 28: 0-10 connections recover through the same supervisor as 0-9-1 ones. The backlog
workload over 0-10 against the embedded broker's 0-10 model in memory, the link cut at every
frame boundary, recovered (new sessions, the queue declared again, the subscription again with
its credit) and checked (``amqp_sansio.v0_10.testing.BacklogTransfer010``)."""

from __future__ import annotations

from amqp_broker import memory_server_0_10
from amqp_sansio.v0_10.testing import fault_sweep_0_10, run_backlog_0_10


def test_the_0_10_backlog_runs_uncut() -> None:
    conn, workload = run_backlog_0_10(memory_server_0_10)
    assert conn.recoveries == []
    assert workload.accepted == set(range(workload.count))
    assert workload.checked > 0
    assert workload.stale_refused == 0


def test_a_0_10_cut_mid_consuming_recovers_with_the_counts() -> None:
    total = run_backlog_0_10(memory_server_0_10)[0].moved
    conn, workload = run_backlog_0_10(memory_server_0_10, cut_after=total // 2)
    (recovered,) = conn.recoveries
    assert recovered.epoch == conn.epoch == 1
    # A transfer waiting for its completion at the cut: unknown, sent again; the subscription's
    # buffered transfers were dropped (the broker released them), the held ones are stale.
    assert recovered.unknown_publishes >= 1
    assert recovered.dropped_deliveries >= 1
    assert workload.stale_refused == workload.held_limit
    assert workload.accepted == set(range(workload.count))


def test_0_10_frame_boundaries() -> None:
    total, recoveries = fault_sweep_0_10(memory_server_0_10)
    assert total > 300
    # Cuts in the first handshake recover nothing (nothing was open); every other one does.
    assert total - 12 <= recoveries < total
