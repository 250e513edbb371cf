"""The embedded broker's 0-10 side seen by qpid-python 1.36's own client (Python 2.7): round
trips through ``amq.direct`` with application headers, small and 64 KiB bodies (split across
frames both ways)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.broker_0_10 import brokers_in_thread
from tests.support.qpid import require_qpid, run_py2

SCRIPT = Path(__file__).resolve().parents[1] / "support" / "py2" / "qpid_roundtrip_0_10.py2"


@pytest.mark.parametrize("size", [32, 64 * 1024])
def test_qpid_python_round_trip(size: int) -> None:
    require_qpid()
    with brokers_in_thread(1) as ports:
        done = run_py2(SCRIPT, "127.0.0.1", str(ports[0].amqp_0_10), "20", str(size))
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    result = json.loads(line[7:])
    assert result["bodies_ok"] == 20
    assert result["headers"] == [{"n": n, "from": "qpid-python"} for n in range(20)]
    assert result["keys"] == [result["queue"]] * 20
    assert result["left"] == 0
