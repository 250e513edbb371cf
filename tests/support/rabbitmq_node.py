"""A private RabbitMQ node for one test: its own ``RABBITMQ_NODENAME``, ports and data directory
under /tmp, started, SIGKILLed and started again (its durable queues survive) by the test alone,
never the shared node. Starting takes about 15 s of CPU."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Final, final

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

_START_TIMEOUT: Final = 120.0
#: The server script itself (``/usr/sbin/rabbitmq-server`` is a wrapper that changes user).
_SERVER: Final = "/usr/lib/rabbitmq/bin/rabbitmq-server"
#: ``rabbitmqctl`` itself (the one on PATH runs as another user, with another cookie).
_CTL: Final = "/usr/lib/rabbitmq/bin/rabbitmqctl"
#: What each boot (but a fresh node's first) logs before its listener opens.
_RECOVERING: Final = re.compile(r"Recovering \d+ queues of type rabbit_classic_queue")


class QueuesLostError(AssertionError):
    """The node came back from a SIGKILL without a durable queue it had: the broker lost it,
    and the confirmed persistent messages in it, by itself (seen with RabbitMQ 3.10 under load:
    its boot logged ``Recovering 0 queues`` and the client's restore declared the queue afresh,
    empty). A recovery scenario then waits for ever for messages no broker holds, and says
    nothing about the client."""


def _group(pgid: int) -> list[int]:
    """The processes of process group *pgid* (from /proc)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                # after the command's closing parenthesis: state, ppid, pgrp
                if int(stat.rsplit(")", 1)[1].split()[2]) == pgid:
                    pids.append(int(entry))
    return pids


def _exited(pid: int) -> bool:
    """Whether every thread of *pid* has exited (gone, or a zombie), so its sockets are closed.
    A multithreaded process's leader shows ``Z`` while its other threads still run."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for task in tasks:
        with contextlib.suppress(OSError, IndexError):
            state = Path(f"/proc/{pid}/task/{task}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state not in ("Z", "X"):
                return False
    return True


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@final
class RabbitMQNode:
    """The node; :meth:`kill` and :meth:`start` it. It listens on *host* (a loopback address),
    *port* and *management_port* (free ones when not given); *plugins* are enabled besides
    *management*'s, *extra_conf* is appended to its ``rabbitmq.conf`` and *advanced_config*,
    when given, is its ``advanced.config``."""

    def __init__(
        self,
        root: Path,
        *,
        management: bool = False,
        host: str = "127.0.0.1",
        port: int | None = None,
        management_port: int | None = None,
        plugins: Sequence[str] = (),
        extra_conf: str = "",
        advanced_config: str | None = None,
    ) -> None:
        self.root = root
        #: The address every listener binds (a loopback one: 127.0.0.0/8).
        self.host = host
        #: The management plugin's HTTP port (``management=True``: with rabbitmq_prometheus
        #: on ``prometheus_port``), or None.
        self.management_port = (management_port or _free_port(host)) if management else None
        self.prometheus_port = _free_port(host) if management else None
        self.name = f"recovery-{uuid.uuid4().hex[:8]}@localhost"
        self.port = port or _free_port(host)
        self.url = f"amqp://guest:guest@{host}:{self.port}/?connection_timeout=10000"
        for sub in ("home", "mnesia", "log"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        enabled = ["rabbitmq_management", "rabbitmq_prometheus"] if management else []
        # enabled offline: the node reads the file at boot; the trailing dot is required
        (root / "enabled_plugins").write_text(f"[{','.join([*enabled, *plugins])}].")
        conf = f"listeners.tcp.1 = {host}:{self.port}\n"
        if management:
            conf += (
                f"management.tcp.port = {self.management_port}\n"
                f"management.tcp.ip = {host}\n"
                f"prometheus.tcp.port = {self.prometheus_port}\n"
                f"prometheus.tcp.ip = {host}\n"
            )
        (root / "rabbitmq.conf").write_text(conf + extra_conf)
        self.env = {
            **os.environ,
            "HOME": str(root / "home"),
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_IP_ADDRESS": host,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(_free_port()),
            "RABBITMQ_MNESIA_BASE": str(root / "mnesia"),
            "RABBITMQ_LOG_BASE": str(root / "log"),
            "RABBITMQ_CONFIG_FILE": str(root / "rabbitmq"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(root / "enabled_plugins"),
        }
        if advanced_config is not None:  # what rabbitmq.conf cannot say (Erlang terms)
            (root / "advanced.config").write_text(advanced_config)
            self.env["RABBITMQ_ADVANCED_CONFIG_FILE"] = str(root / "advanced.config")
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the node and wait until it accepts AMQP connections."""
        process = subprocess.Popen(
            [_SERVER],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: kill() ends the node, nothing else
        )
        self._process = process
        deadline = time.monotonic() + _START_TIMEOUT
        ports = [p for p in (self.port, self.management_port) if p is not None]
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise AssertionError(f"rabbitmq-server exited with {process.returncode}")
            with contextlib.suppress(OSError):
                for port in ports:
                    socket.create_connection((self.host, port), timeout=1).close()
                return
            time.sleep(0.02)  # the time it returns is when recovery is timed from
        self.kill()
        raise AssertionError(f"the node {self.name} did not start within {_START_TIMEOUT} s")

    def ctl(self, *args: str) -> str:
        """Run ``rabbitmqctl`` against this node (its own cookie, not the shared node's;
        about a second per call)."""
        done = subprocess.run(
            [_CTL, "-n", self.name, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=_START_TIMEOUT,
            check=True,
        )
        return done.stdout

    def restart(self) -> float:
        """SIGKILL the node and start it again; the monotonic time its port accepted again."""
        self.kill()
        self.start()
        return time.monotonic()

    def check_kept(self, queue: str) -> None:
        """After a :meth:`restart` and the client's recovery, before anything was published
        or acked on the new connection: check that the node kept *queue*, a durable queue that
        held confirmed persistent messages at the kill. Counted with ``rabbitmqctl`` (ready and
        unacknowledged), so the client's restore, which declares the queue again, cannot hide
        a loss: a queue the broker forgot comes back empty.

        :raises QueuesLostError: the queue is empty (or gone): the broker lost it.
        """
        counts = dict(
            line.split("\t", 1)
            for line in self.ctl("list_queues", "name", "messages").splitlines()
            if "\t" in line
        )
        found = counts.get(queue)
        if found is None or found.strip() == "0":
            time.sleep(3)  # the node's log lags: what each boot recovered, for the message
            log = self.root / "log" / f"{self.name}.log"
            boots: list[str] = []
            with contextlib.suppress(OSError):
                boots = _RECOVERING.findall(log.read_text(errors="replace"))
            raise QueuesLostError(
                f"RabbitMQ lost the durable queue {queue!r} across SIGKILL: the node "
                f"{self.name} holds {'no such queue' if found is None else 'it empty'} "
                f"(its boots logged {boots}), so the restore declared it afresh; its "
                "confirmed messages are gone whatever the client does"
            )

    def close_connection(self, connection_name: str) -> None:
        """``rabbitmqctl close_connection`` on this node, for the connection with this name."""
        for line in self.ctl("list_connections", "pid", "client_properties").splitlines():
            if f'"{connection_name}"' in line:
                self.ctl("close_connection", line.split("\t", 1)[0], "test")
                return
        raise AssertionError(f"no connection named {connection_name!r} on {self.name}")

    def kill(self) -> None:
        """SIGKILL the node's process group (its beam.smp and helpers; epmd is shared and
        stays) and wait until every process of it has exited.

        The server script runs the VM as a background child, so reaping the script is not
        enough: the VM can take a few hundred ms longer to die, and meanwhile the kernel still
        completes TCP handshakes on its listening socket (then resets them). A :meth:`start`
        right after would take that for the new node's port opening."""
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        members = _group(process.pid)  # dying or zombies, not reaped yet: all still listed
        process.wait()
        deadline = time.monotonic() + _START_TIMEOUT
        while not all(_exited(pid) for pid in members):
            if time.monotonic() > deadline:
                raise AssertionError(f"the node {self.name} outlived SIGKILL by {_START_TIMEOUT} s")
            time.sleep(0.005)


@contextlib.contextmanager
def rabbitmq_node(
    *,
    management: bool = False,
    host: str = "127.0.0.1",
    port: int | None = None,
    management_port: int | None = None,
    plugins: Sequence[str] = (),
    extra_conf: str = "",
    advanced_config: str | None = None,
) -> Iterator[RabbitMQNode]:
    """A node that is killed and whose data is removed on the way out; *management* enables
    rabbitmq_management and rabbitmq_prometheus on ports of their own. *host*, *port* and
    *management_port* pin where it listens (default: 127.0.0.1, free ports); *plugins*,
    *extra_conf* (``rabbitmq.conf`` lines) and *advanced_config* (its text) go to
    :class:`RabbitMQNode`."""
    root = Path(tempfile.mkdtemp(prefix="recovery-rmq-", dir="/tmp"))
    node = RabbitMQNode(
        root,
        management=management,
        host=host,
        port=port,
        management_port=management_port,
        plugins=plugins,
        extra_conf=extra_conf,
        advanced_config=advanced_config,
    )
    try:
        node.start()
        yield node
    finally:
        node.kill()
        shutil.rmtree(root, ignore_errors=True)
