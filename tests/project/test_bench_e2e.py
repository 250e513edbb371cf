"""``bench/e2e.py`` keeps working: a tiny run of the raw client, core and amqp_trio against
RabbitMQ writes its JSON report and the PNG chart, with every case measured."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from tests.support import ROOT

if TYPE_CHECKING:
    from pathlib import Path

E2E = ROOT / "bench" / "e2e.py"


@pytest.mark.rabbitmq
def test_e2e_smoke_run(rabbitmq_url: str, tmp_path: Path) -> None:
    report, chart = tmp_path / "e2e.json", tmp_path / "e2e.png"
    done = subprocess.run(
        [
            sys.executable,
            str(E2E),
            "--url",
            rabbitmq_url,
            "--libs",
            "raw,core,amqp_trio",
            "--sizes",
            "16B,1KiB",
            "-n",
            "200",
            "--runs",
            "1",
            "--json",
            str(report),
            "--chart",
            str(chart),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(report.read_text())
    measured = {(m["op"], m["size"], m["lib"]) for m in result["medians"]}
    assert measured == {
        (op, size, lib)
        for op in ("publish", "confirm", "consume")
        for size in ("16B", "1KiB")
        for lib in ("raw", "core", "amqp_trio")
    }
    assert result["problems"] == []
    assert "| consume 1KiB | 200 |" in done.stdout
    assert "Goals for amqp_trio at 1KiB:" in done.stdout
    assert "amqp_trio CPU/core" in done.stdout
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
