"""Issue 17's fault sweep: the scripted workload against the embedded broker's model in memory,
the link cut at every frame boundary and at every octet of the handshake, recovered with the
client layer's plan and run to its end, the invariants checked at every cut (see
``amqp_sansio.testing.run_workload`` and ``tests/support/sweep.py``)."""

from __future__ import annotations

import os
from typing import Final, Literal

import pytest

from amqp_broker import memory_server
from amqp_sansio import BasicAck, QueueDeclare
from amqp_sansio.client import RecoveryPolicy, StaleDeliveryError
from amqp_sansio.testing import BacklogConsume, MemoryConnection, fault_sweep, run_workload

from ..support.sweep import DURABLE, ConfirmedConsume


def test_the_workload_runs_uncut() -> None:
    workload = ConfirmedConsume()
    conn = run_workload(workload, memory_server())
    assert conn.recoveries == []
    assert workload.delivered == set(range(200))
    assert (workload.unknown, workload.stale_refused, conn.epoch) == (0, 0, 0)


def test_a_cut_mid_publishing_recovers_everything() -> None:
    total = run_workload(ConfirmedConsume(), memory_server()).moved
    workload = ConfirmedConsume()
    conn = run_workload(workload, memory_server(), cut_after=total // 2)
    (recovered,) = conn.recoveries
    assert conn.epoch == recovered.epoch == 1
    # The server-named queue got a new name, and its binding and consumer followed it.
    (old,) = recovered.renamed_queues
    assert recovered.renamed_queues[old] == workload.server_queue != old
    assert workload.server_queue in conn.core.topology.queues
    assert {c.queue for c in conn.core.topology.consumers.values()} == {
        DURABLE,
        workload.server_queue,
    }
    # The cut left deliveries unacked and publishes unconfirmed: reported, not faked.
    assert workload.stale_refused > 0
    assert recovered.unknown_publishes == workload.unknown > 0
    assert workload.first_numbers == {0: 1, 1: 1}


#: Frame boundaries cut in make test, out of about 1,400 (each run is the whole workload, ~10 ms
#: on an idle core); AMQP_FULL_SWEEP=1 cuts at every one of them.
FRAME_SAMPLE: Final = None if os.environ.get("AMQP_FULL_SWEEP") else 250


def test_frame_boundaries() -> None:
    report = fault_sweep(ConfirmedConsume, memory_server, sample=FRAME_SAMPLE, seed=17)
    assert report.unit == "frame"
    assert report.total > 1000  # setup, 200 publishes, confirms, deliveries, acks
    assert len(report.cut_points) == (FRAME_SAMPLE or report.total)
    # A cut before the connection is open recovers no topology; every other run recovers.
    assert len(report.cut_points) - 10 < report.recoveries <= len(report.cut_points)
    assert report.refused_settles > 0


def test_every_octet_of_the_handshake() -> None:
    # The cut is in the handshake: a shorter run after it covers the same recovery paths.
    report = fault_sweep(lambda: ConfirmedConsume(count=20), memory_server, unit="octet")
    assert report.total > 300  # the header, start, start-ok, tune, tune-ok, open, open-ok
    assert report.cut_points == tuple(range(report.total))
    # Cut inside the handshake: the first connection never opened, nothing to restore.
    assert report.recoveries == 0
    assert report.failed_attempts == report.total


def test_a_sample_of_cut_points() -> None:
    report = fault_sweep(ConfirmedConsume, memory_server, sample=10, seed=3)
    assert len(report.cut_points) == 10
    assert report.cut_points[0] == 0
    assert report.cut_points[-1] == report.total - 1


def test_settling_a_stale_delivery_is_refused_or_ignored() -> None:
    cases: tuple[tuple[Literal["raise", "ignore"], type[StaleDeliveryError] | None], ...] = (
        ("raise", StaleDeliveryError),
        ("ignore", None),
    )
    for stale, expected in cases:
        conn = MemoryConnection(memory_server(), policy=RecoveryPolicy(stale_settle=stale))
        conn.open()
        channel = conn.open_channel()
        conn.send(channel, QueueDeclare(queue="q"))
        conn.pump()
        conn.recover()
        if expected is None:
            assert not conn.settle(channel, BasicAck(delivery_tag=1), epoch=0)
        else:
            with pytest.raises(StaleDeliveryError, match="delivery 1 came on connection epoch 0"):
                conn.settle(channel, BasicAck(delivery_tag=1), epoch=0)
        assert conn.refused_settles == 1
        assert conn.core.data_to_send() == b""  # nothing reached the wire


# --- Issue 28: the backlog workload, through the client layer ---------------------------------


def test_the_backlog_workload_runs_uncut() -> None:
    workload = BacklogConsume()
    conn = run_workload(workload, memory_server())
    assert conn.recoveries == []
    assert workload.acked == set(range(60))
    assert workload.checked > 0
    assert workload.stale_refused == 0


def test_a_backlog_cut_at_every_frame_boundary() -> None:
    """At every cut: every confirmed message acked, no delivery of the live connection refused,
    the broker's unacked count equal to what the client buffered or holds (so no prefetch
    slot is leaked), and the backlog consumed to the end (BacklogConsume.check)."""
    report = fault_sweep(BacklogConsume, memory_server, seed=28)
    assert report.total > 400
    assert len(report.cut_points) == report.total  # all of them: about 4 ms each
    # Cuts before the channels open recover no topology; the others recover, and those that
    # caught messages in the application's hands refused settling them.
    assert report.recoveries > report.total - 20
    assert report.refused_settles > report.total // 2
