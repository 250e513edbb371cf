"""``bench/codec.py`` keeps working: a quick run verifies and times every library and the copy
floor, and the floor hands out exactly the bodies, however the reads cut them."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from tests.support import ROOT

if TYPE_CHECKING:
    from pathlib import Path
    from types import ModuleType

BENCH = ROOT / "bench" / "codec.py"


@pytest.fixture(scope="module")
def codec() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_codec", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_codec_bench_quick_run(tmp_path: Path) -> None:
    report = tmp_path / "codec.json"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json", str(report)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads(report.read_text())["results"]
    measured = {(row["op"], row["size"], row["lib"]) for row in results}
    libs = ("ours", "pamqp", "pika", "py-amqp")
    for size in ("64B", "1KiB", "64KiB"):
        for lib in libs:
            assert ("decode", size, lib) in measured
            assert ("encode", size, lib) in measured
        assert ("decode", size, "copy floor") in measured
        assert ("encode", size, "copy floor") not in measured
    goals = json.loads(report.read_text())["goals"]
    decode_goals = [goal for goal in goals if goal["op"] == "decode"]
    assert decode_goals
    assert all(goal["ceiling"] > 0 for goal in decode_goals)
    assert all(goal["ceiling"] is None for goal in goals if goal["op"] == "encode")
    assert done.stdout.count("copy floor") >= 3


@pytest.mark.parametrize("read_size", [0, 1, 7, 100, 1000, 4096, 65_697, 262_144])
def test_copy_floor_hands_out_every_body(codec: ModuleType, read_size: int) -> None:
    # 1000-octet bodies: with small reads a body spans many of them, with large ones several
    # bodies share one read and one straddles its end.
    body = codec.body_for(1000)
    data = codec.build_deliveries(7, body)
    bodies: list[tuple[object, ...]] = []
    codec.copy_floor(data, bodies.append, read_size, codec.body_spans(data))
    assert [got for *_, got in bodies] == [body] * 7
    assert all(type(got) is bytes for *_, got in bodies)


def test_copy_floor_verification_catches_a_wrong_span(codec: ModuleType) -> None:
    body = codec.body_for(64)
    data = codec.build_deliveries(3, body)
    assert len(codec.verify_floor(data, 3, body, 100)) == 3
    with pytest.raises(codec.BenchError, match="copy floor"):
        codec.verify_floor(data, 4, body, 100)
