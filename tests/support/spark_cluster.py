"""A Spark standalone cluster on loopback for one test session: a master and workers as JVMs of
their own, started with PySpark's own ``spark-class`` (``org.apache.spark.deploy.master.Master``,
``org.apache.spark.deploy.worker.Worker``), every port on 127.0.0.1 and chosen free, every
directory under a temporary root. Workers run with this process's environment, so executors
and their Python workers import the sources under test."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Final, final

import pyarrow.parquet as pq
import pyspark

if TYPE_CHECKING:
    from collections.abc import Iterator

_START_TIMEOUT: Final = 180.0
SPARK_HOME: Final = Path(pyspark.__file__).parent
_SPARK_CLASS: Final = SPARK_HOME / "bin" / "spark-class"
#: What an executor JVM runs (its command line names this class).
EXECUTOR_CLASS: Final = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cluster_environment(root: Path) -> dict[str, str]:
    """The environment of the cluster's JVMs and of drivers started against it."""
    src = str(Path(__file__).resolve().parents[2] / "src")
    path = os.environ.get("PYTHONPATH")
    return {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_DIRS": str(root / "local"),
        "SPARK_LOG_DIR": str(root / "logs"),
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": src if not path else f"{src}{os.pathsep}{path}",
    }


def _children(pid: int) -> list[int]:
    # every thread's list: a JVM starts processes from threads other than its main one
    found: list[int] = []
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(word) for word in children.read_text().split()]
        except OSError:
            continue
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@final
class StandaloneCluster:
    """A master and ``workers`` workers of ``cores`` cores and ``memory`` each."""

    def __init__(self, root: Path, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.root = root
        for sub in ("local", "logs", "work"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        self.env = cluster_environment(root)
        self.port = free_port()
        self.ui_port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self._workers = workers
        self._cores = cores
        self._memory = memory
        self._processes: list[subprocess.Popen[bytes]] = []

    def _spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = (self.root / "logs" / f"{name}.out").open("wb")
        process = subprocess.Popen(
            [str(_SPARK_CLASS), *args],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own group: stop() takes its children with it
        )
        log.close()
        self._processes.append(process)
        return process

    def start(self) -> None:
        """Start the master, then the workers; return once every worker is registered."""
        self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.ui_port),
        )
        self.workers = [
            self._spawn(
                f"worker-{index}",
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                "127.0.0.1",
                "--port",
                str(free_port()),
                "--webui-port",
                str(free_port()),
                "--cores",
                str(self._cores),
                "--memory",
                self._memory,
                "--work-dir",
                str(self.root / "work" / str(index)),
                self.url,
            )
            for index in range(self._workers)
        ]
        deadline = time.monotonic() + _START_TIMEOUT
        while self.state().get("aliveworkers") != self._workers:
            for process in self._processes:
                if process.poll() is not None:
                    raise RuntimeError(
                        f"a cluster JVM exited with {process.returncode}; logs in "
                        f"{self.root / 'logs'}"
                    )
            if time.monotonic() > deadline:
                raise TimeoutError(f"the cluster did not start; logs in {self.root / 'logs'}")
            time.sleep(0.5)

    def state(self) -> dict[str, object]:
        """The master's JSON status (``/json/``); empty while it is not up yet."""
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.ui_port}/json/", timeout=5
            ) as reply:
                loaded = json.loads(reply.read())
        except OSError:
            return {}
        return loaded if isinstance(loaded, dict) else {}

    def executor_pids(self) -> list[int]:
        """The executor JVMs the workers run now (children of the worker JVMs)."""
        return [
            child
            for worker in self.workers
            for child in _children(worker.pid)
            if EXECUTOR_CLASS in _cmdline(child)
        ]

    def kill_executor(self) -> int:
        """``kill -9`` one executor JVM (its Python workers die with their parent's socket)."""
        pids = self.executor_pids()
        if not pids:
            raise RuntimeError("no executor is running")
        os.kill(pids[0], signal.SIGKILL)
        return pids[0]

    def stop(self) -> None:
        for process in reversed(self._processes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in self._processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self._processes.clear()


@contextlib.contextmanager
def standalone_cluster(root: Path, workers: int = 2) -> Iterator[StandaloneCluster]:
    """A started cluster, stopped (every JVM of it) on exit."""
    cluster = StandaloneCluster(root, workers)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def committed_rows(out: Path) -> list[dict[str, object]]:
    """The rows of the parquet sink's committed files, per its ``_spark_metadata`` log."""
    files: set[str] = set()
    log = out / "_spark_metadata"
    for entry in sorted(log.iterdir()) if log.exists() else []:
        if entry.name.startswith(".") or entry.name.endswith(".crc"):
            continue
        for line in entry.read_text().splitlines()[1:]:  # the first line is the version
            record = json.loads(line)
            if record.get("action") == "add":
                files.add(record["path"].removeprefix("file://"))
    rows: list[dict[str, object]] = []
    for path in sorted(files):
        rows += pq.read_table(path).to_pylist()
    return rows
