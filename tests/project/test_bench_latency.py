"""``bench/latency.py --quick`` keeps working: every one of this project's clients, core and
raw makes its round trips over direct reply-to and a reply queue, against RabbitMQ and the
embedded broker, and the report has a row for each."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from tests.support import ROOT

if TYPE_CHECKING:
    from pathlib import Path

LATENCY = ROOT / "bench" / "latency.py"


@pytest.mark.rabbitmq
def test_latency_quick_run(rabbitmq_url: str, tmp_path: Path) -> None:
    report = tmp_path / "latency.json"
    done = subprocess.run(
        [sys.executable, str(LATENCY), "--quick", "--url", rabbitmq_url, "--json", str(report)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(report.read_text())
    assert result["problems"] == []
    measured = {(m["target"], m["mode"], m["lib"]) for m in result["medians"]}
    assert measured == {
        (target, mode, lib)
        for target in ("rabbitmq", "embedded")
        for mode in ("direct", "queue")
        for lib in ("core", "raw", "amqp_trio", "amqp_asyncio", "amqp_blocking")
    }
    for row in result["medians"]:
        assert 0 < row["p50"] <= row["p99"] <= row["max"]
    assert "| amqp_trio |" in done.stdout
    assert "rabbitmq, reply via direct:" in done.stdout
