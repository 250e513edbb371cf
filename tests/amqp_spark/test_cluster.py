"""amqp_spark on a Spark standalone cluster (a master and two workers, JVMs of their own on
loopback, started once for the module), against RabbitMQ: a streaming query loses an executor
JVM (``kill -9``; Spark reschedules its tasks), then its driver (``kill -9`` of the whole
driver process group), and is restarted from its checkpoint.

The driver is ``tests/amqp_spark/cluster_driver.py`` in a process of its own. The sink is read
through the file sink's own log (``_spark_metadata``), as Spark reads it: files a killed batch
left behind are not part of the output.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pytest

import amqp_blocking
from tests.support.spark_cluster import StandaloneCluster, committed_rows, standalone_cluster

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.rabbitmq

MESSAGES: Final = 100_000
#: The driver's maxMessagesPerTrigger: the batch that may come twice from a classic queue.
BATCH: Final = 20_000
RUN_LIMIT_S: Final = 600.0
_ROOT: Final = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    with standalone_cluster(tmp_path_factory.mktemp("spark-cluster")) as started:
        yield started


@pytest.fixture
def channel(rabbitmq_url: str) -> Iterator[amqp_blocking.Channel]:
    with amqp_blocking.connect(rabbitmq_url) as connection, connection.channel() as ch:
        yield ch


def fill(channel: amqp_blocking.Channel, kind: str) -> Iterator[str]:
    name = f"amqp-spark-cluster-{kind}-{uuid.uuid4().hex[:10]}"
    channel.queue_declare(name, durable=True, arguments={"x-queue-type": kind})
    channel.confirm_select()
    with channel.publisher(window=1000) as publisher:
        for index in range(MESSAGES):
            publisher.publish(b"%d" % index, routing_key=name)
    yield name
    channel.queue_delete(name)


@pytest.fixture
def drivers() -> Iterator[list[Driver]]:
    """Every driver a test starts, killed at the end whatever happened."""
    started: list[Driver] = []
    yield started
    for driver in started:
        if driver.process.poll() is None:
            driver.kill()


@pytest.fixture
def stream_queue(channel: amqp_blocking.Channel) -> Iterator[str]:
    yield from fill(channel, "stream")


@pytest.fixture
def classic_queue(channel: amqp_blocking.Channel) -> Iterator[str]:
    yield from fill(channel, "classic")


class Driver:
    """One run of the driver process; its ``batch <id> <rows>`` lines as they come."""

    def __init__(self, started: list[Driver], cluster: StandaloneCluster, *args: str) -> None:
        started.append(self)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.amqp_spark.cluster_driver", cluster.url, *args],
            cwd=_ROOT,
            env=cluster.env,
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # the driver JVM and its Python workers share its group
        )
        self.batches: list[int] = []
        self._pending = b""

    def wait_for_batches(self, count: int) -> None:
        """Until ``count`` batches completed (or the run ended: then fail)."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + RUN_LIMIT_S
        while len(self.batches) < count:
            left = deadline - time.monotonic()
            assert left > 0, f"only {len(self.batches)} batches completed"
            ready, _, _ = select.select([self.process.stdout], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(self.process.stdout.fileno(), 4096)
            assert chunk, f"the driver ended after {len(self.batches)} batches"
            self._pending += chunk
            *lines, self._pending = self._pending.split(b"\n")
            for line in lines:
                words = line.split()
                if words[:1] == [b"batch"]:
                    self.batches.append(int(words[2]))

    def kill(self) -> None:
        """``kill -9`` the driver, its JVM and its Python workers."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def finish(self) -> list[int]:
        """Wait for the run to end by itself; the sizes of all its batches."""
        output, _ = self.process.communicate(timeout=RUN_LIMIT_S)
        assert self.process.returncode == 0
        lines = (self._pending + output).split(b"\n")
        assert b"done" in lines
        self.batches += [int(line.split()[2]) for line in lines if line.startswith(b"batch ")]
        return self.batches


def test_stream_queue_survives_executor_and_driver_loss_exactly_once(
    cluster: StandaloneCluster,
    rabbitmq_url: str,
    stream_queue: str,
    tmp_path: Path,
    drivers: list[Driver],
) -> None:
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    first = Driver(drivers, cluster, rabbitmq_url, stream_queue, "stream", out, checkpoint)
    first.wait_for_batches(1)
    cluster.kill_executor()
    first.wait_for_batches(3)  # Spark ran the lost tasks again and went on
    first.kill()
    assert len(first.batches) < MESSAGES // BATCH  # it died before the end
    second = Driver(drivers, cluster, rabbitmq_url, stream_queue, "stream", out, checkpoint)
    assert sum(second.finish()) + sum(first.batches) >= MESSAGES

    offsets = [int(str(row["stream_offset"])) for row in committed_rows(Path(out))]
    assert len(offsets) == MESSAGES  # 0 duplicates
    assert sorted(offsets) == list(range(MESSAGES))  # 0 missing


def test_classic_queue_survives_executor_and_driver_loss_at_least_once(
    cluster: StandaloneCluster,
    rabbitmq_url: str,
    channel: amqp_blocking.Channel,
    classic_queue: str,
    tmp_path: Path,
    drivers: list[Driver],
) -> None:
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    first = Driver(drivers, cluster, rabbitmq_url, classic_queue, "classic", out, checkpoint)
    first.wait_for_batches(1)
    cluster.kill_executor()
    first.wait_for_batches(3)
    first.kill()
    # The broker requeued what the dead driver held unacknowledged: every message that left
    # the queue is in a batch Spark committed
    deadline = time.monotonic() + RUN_LIMIT_S
    while (ok := channel.queue_declare(classic_queue, passive=True)).consumer_count:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    committed = {row["body"] for row in committed_rows(Path(out))}
    assert MESSAGES - ok.message_count <= len(committed)

    second = Driver(drivers, cluster, rabbitmq_url, classic_queue, "classic", out, checkpoint)
    second.finish()
    rows = committed_rows(Path(out))
    bodies = [row["body"] for row in rows]
    assert set(bodies) == {b"%d" % index for index in range(MESSAGES)}  # 0 missing
    # duplicates: at most the batch in flight when the driver died, all marked redelivered
    assert len(bodies) - MESSAGES <= BATCH
    redelivered: dict[object, list[object]] = {}
    for row in rows:
        redelivered.setdefault(row["body"], []).append(row["redelivered"])
    for flags in redelivered.values():
        assert len(flags) == 1 or True in flags
    assert channel.queue_declare(classic_queue, passive=True).message_count == 0
