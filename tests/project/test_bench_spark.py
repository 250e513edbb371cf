"""``bench/spark.py --executor`` keeps working: a tiny in-process run (no Spark job) reads the
stream three ways and prints a line per reader, and leaves no queue behind."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import ROOT

BENCH = ROOT / "bench" / "spark.py"


@pytest.mark.rabbitmq
def test_spark_bench_executor_smoke_run(rabbitmq_url: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--executor",
            "--url",
            rabbitmq_url,
            "--read",
            "1200",
            "--size",
            "16",
            "--repeat",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1,200 stream messages of 16 B read in this process" in done.stdout, done.stdout
    for reader in ("pika", "amqp_blocking consumer", "read_stream_range"):
        line = next(row for row in done.stdout.splitlines() if row.startswith(reader))
        rate, client = line[len(reader) :].split()[:2]
        assert float(rate.replace(",", "")) > 0
        assert float(client) > 0
    queues = subprocess.run(
        ["rabbitmqctl", "list_queues", "name"], capture_output=True, text=True, check=True
    )
    assert "bench-spark-executor-" not in queues.stdout
