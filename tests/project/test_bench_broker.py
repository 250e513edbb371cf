"""``bench/broker.py`` keeps working: a tiny run against RabbitMQ and the embedded broker it
starts prints a measured line per case, the comparison table and the goal lines; a tiny
``--memory`` run against the embedded broker prints and writes its figures."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from tests.support import ROOT

if TYPE_CHECKING:
    from pathlib import Path

BENCH = ROOT / "bench" / "broker.py"


@pytest.mark.rabbitmq
def test_broker_bench_smoke_run(rabbitmq_url: str, tmp_path: Path) -> None:
    report = tmp_path / "broker.json"
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--url",
            rabbitmq_url,
            "--count",
            "50",
            "--runs",
            "1",
            "--json",
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for target in ("rabbitmq", "embedded"):
        for op in ("confirm", "publish", "consume"):
            assert f"run 1 {target:<8} {op:<7} 1KiB " in done.stdout, done.stdout
    for op in ("confirm", "publish", "consume"):
        assert f"goal embedded/RabbitMQ >= 50% at 1KiB, {op}: " in done.stdout
    result = json.loads(report.read_text())
    assert set(result["medians"]) == {
        f"{target}/{op}/1KiB"
        for target in ("rabbitmq", "embedded")
        for op in ("confirm", "publish", "consume")
    }
    for medians in result["medians"].values():
        assert medians["msgs_per_s"] > 0
        assert medians["broker_cpu_us_per_msg"] is not None


def test_broker_memory_bench_smoke_run(tmp_path: Path) -> None:
    report = tmp_path / "memory.json"
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--memory",
            "--targets",
            "embedded",
            *("--memory-connections", "5", "--memory-queues", "20", "--memory-messages", "50"),
            *("--memory-settle", "0.05", "--json", str(report)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "KiB/connection" in done.stdout
    result = json.loads(report.read_text())
    assert set(result["memory"]["embedded"]) == {"connection", "queue", "1000_messages"}
