"""A private three-node RabbitMQ cluster on loopback for one test session (issue 30): three
:class:`~tests.support.rabbitmq_node.RabbitMQNode`\\ s (their own ``RABBITMQ_NODENAME``, AMQP
and distribution ports and data directories under /tmp) sharing one Erlang cookie, started at
once, nodes 2 and 3 joined to node 1 with ``rabbitmqctl stop_app``/``join_cluster``/
``start_app``. A node the test SIGKILLs (:meth:`RabbitMQCluster.kill_node_at`) is started again
in the background on the same ports with its data, and so rejoins the cluster by itself; the
next kill waits for it, so that two of the three replicas of a quorum queue are always up.

Starting the cluster costs about 45 s of CPU (15 s a node) and the joins a few more."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import socket
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Final, final

from .rabbitmq_node import _SERVER, RabbitMQNode

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from .recovery_scenarios import BacklogCounts

_CLOSE_TIMEOUT: Final = 30.0
#: Kills of the node in use per failover test (the issue's three).
KILLS: Final = 3


def rabbitmq_server_absent() -> str | None:
    """Why the cluster cannot run here (no rabbitmq-server to start), or None."""
    if not os.access(_SERVER, os.X_OK):
        return f"{_SERVER} is absent: the 3-node cluster tests need a RabbitMQ server installed"
    return None


def _address(node: RabbitMQNode) -> str:
    return f"127.0.0.1:{node.port}"


@final
class RabbitMQCluster:
    """Three joined nodes; :attr:`urls` are the endpoints to give ``connect()``."""

    def __init__(self, root: Path, size: int = 3) -> None:
        cookie = uuid.uuid4().hex.upper()
        self.nodes = [RabbitMQNode(root / f"node{number + 1}") for number in range(size)]
        for node in self.nodes:
            # one cookie for the nodes and their rabbitmqctl: HOME is the node's own
            cookie_file = Path(node.env["HOME"]) / ".erlang.cookie"
            cookie_file.write_text(cookie)
            cookie_file.chmod(0o400)
        self._restarting: threading.Thread | None = None
        self._restart_error: BaseException | None = None
        #: The monotonic time each restarted node accepted AMQP again.
        self.restarted_at: list[float] = []

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    @property
    def addresses(self) -> list[str]:
        """Each node's ``host:port``, as ``conn.address`` names it."""
        return [_address(node) for node in self.nodes]

    def node_at(self, address: str) -> RabbitMQNode:
        for node in self.nodes:
            if _address(node) == address:
                return node
        raise AssertionError(f"no node of the cluster at {address}")

    def start(self) -> None:
        """Start every node at once (each start is mostly CPU-bound boot; in parallel the wall
        time is that of the slowest), then join nodes 2 and 3 to node 1: their apps stopped at
        once, then joined and started again one after the other."""
        _in_parallel([node.start for node in self.nodes])
        first, *others = self.nodes
        _in_parallel([functools.partial(node.ctl, "stop_app") for node in others])
        # One at a time: each join changes the cluster's membership, and two start_apps at once
        # failed once in three tries (rabbitmqctl's exit status 69).
        for node in others:
            node.ctl("join_cluster", first.name)
            node.ctl("start_app")
        running = self.running_nodes()
        assert running == sorted(node.name for node in self.nodes), running

    def quorum_members(self, queue: str) -> list[str]:
        """The nodes holding a replica of the quorum queue *queue* (``list_queues members``)."""
        listing = self.live_node().ctl(
            "list_queues", "name", "type", "members", "--no-table-headers", "--quiet"
        )
        for line in listing.splitlines():
            name, kind, members = line.split("\t", 2)
            if name == queue:
                assert kind == "quorum", line
                return sorted(m.strip(" '") for m in members.strip("[]").split(","))
        raise AssertionError(f"no queue {queue!r} in {listing!r}")

    def check_replicas(self, queue: str) -> None:
        """The quorum queue *queue* has a replica on every node (RabbitMQ 3.10's default
        initial group size is the cluster's size)."""
        assert self.quorum_members(queue) == sorted(node.name for node in self.nodes)

    def live_node(self) -> RabbitMQNode:
        self.wait_restarted()
        return self.nodes[0]

    def kill_node_at(self, address: str) -> float:
        """SIGKILL the node at *address* (``host:port``) once the previously killed one is back,
        and start it again in the background; returns the monotonic time of the kill."""
        self.wait_restarted()
        node = self.node_at(address)
        node.kill()
        killed = time.monotonic()
        _wait_closed(node.port)  # the dying beam.smp may hold its listener a moment longer
        self._restarting = threading.Thread(target=self._restart, args=(node,), daemon=True)
        self._restarting.start()
        return killed

    def _restart(self, node: RabbitMQNode) -> None:
        try:
            node.start()
            self.restarted_at.append(time.monotonic())
        except BaseException as exc:  # reported by wait_restarted
            self._restart_error = exc

    def wait_restarted(self) -> None:
        """Wait until the node killed last accepts AMQP again (it rejoined the cluster)."""
        restarting, self._restarting = self._restarting, None
        if restarting is not None:
            restarting.join()
        error, self._restart_error = self._restart_error, None
        if error is not None:
            raise error

    def running_nodes(self) -> list[str]:
        """The running nodes ``cluster_status`` lists (asked of node 1)."""
        status = json.loads(self.live_node().ctl("cluster_status", "--formatter", "json"))
        return sorted(status["running_nodes"])

    def check_failover(self, counts: BacklogCounts, kills: int = KILLS) -> None:
        """What a failover test asserts of :func:`scenario_backlog_faults`'s counts: each kill
        moved the connection to another node of the cluster, where it stayed until the next
        kill; nothing confirmed was lost (the scenario waits for it) or left unprocessed; every
        delivery after a recovery was settled; the killed node came back into the cluster."""
        print(counts)
        print(
            "failover (kill -9 to Recovered):",
            ", ".join(
                f"{before} -> {after} {took * 1000:.0f} ms"
                for (before, after), took in zip(
                    counts.addresses, counts.recovered_times, strict=True
                )
            ),
        )
        assert len(counts.addresses) == len(counts.recovered_times) == kills
        for number, (before, after) in enumerate(counts.addresses):
            assert after in self.addresses, after
            assert after != before, f"kill {number + 1}: still on the killed node {before}"
            if number:
                assert before == counts.addresses[number - 1][1]
        assert counts.unprocessed == 0
        assert counts.stale == 0
        assert counts.confirmed > 0
        self.wait_restarted()
        assert self.running_nodes() == sorted(node.name for node in self.nodes)

    def kill_all(self) -> None:
        with contextlib.suppress(BaseException):
            self.wait_restarted()
        for node in self.nodes:
            node.kill()


def _wait_closed(port: int) -> None:
    deadline = time.monotonic() + _CLOSE_TIMEOUT
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return
        time.sleep(0.01)
    raise AssertionError(f"port {port} still accepts {_CLOSE_TIMEOUT} s after the kill")


def _in_parallel(calls: Sequence[Callable[[], object]]) -> None:
    errors: list[BaseException] = []

    def run(call: Callable[[], object]) -> None:
        try:
            call()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(call,), daemon=True) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


@contextlib.contextmanager
def rabbitmq_cluster(size: int = 3) -> Iterator[RabbitMQCluster]:
    """A joined cluster whose nodes are killed and whose data is removed on the way out, also
    when starting or joining failed."""
    root = Path(tempfile.mkdtemp(prefix="cluster-rmq-", dir="/tmp"))
    cluster = RabbitMQCluster(root, size)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.kill_all()
        shutil.rmtree(root, ignore_errors=True)
