"""``bench/scale.py --quick`` keeps working: every client of ours and core consume over 1 and
10 channels and declare and bind queues, and 100 publishers run against the embedded broker
and RabbitMQ, each part reporting a row for everything it ran and leaving no queue behind."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from tests.support import ROOT

if TYPE_CHECKING:
    from pathlib import Path

SCALE = ROOT / "bench" / "scale.py"
OURS = ("core", "amqp_trio", "amqp_asyncio", "amqp_blocking")


@pytest.mark.rabbitmq
def test_scale_quick_run(rabbitmq_url: str, tmp_path: Path) -> None:
    before = _bench_queues()
    report = tmp_path / "scale.json"
    done = subprocess.run(
        [sys.executable, str(SCALE), "--quick", "--url", rabbitmq_url, "--json", str(report)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(report.read_text())
    assert result["failed"] == []
    measured = {(row["lib"], row["channels"]) for row in result["channels"]}
    assert measured == {(lib, channels) for lib in OURS for channels in (1, 10)}
    assert all(row["median"] > 0 for row in result["channels"])
    assert set(result["queues"]) == set(OURS)
    assert set(result["publishers"]) == {"embedded", "rabbitmq"}
    assert _bench_queues() <= before  # none of this run's queues is left


def _bench_queues() -> set[str]:
    """The bench's queues on RabbitMQ (another run of it may be under way on a shared machine)."""
    listed = subprocess.run(
        ["rabbitmqctl", "list_queues", "--quiet", "name"],
        capture_output=True,
        text=True,
        check=True,
    )
    return {name for name in listed.stdout.split() if name.startswith("bench-scale-")}
