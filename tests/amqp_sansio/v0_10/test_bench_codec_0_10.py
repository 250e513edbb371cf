"""The 0-10 part of ``bench/codec.py`` keeps working: ours and qpid-python time the same
transfers, each side's frames read back by the other (skipped only without Python 2.7)."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.qpid import python27

if TYPE_CHECKING:
    from types import ModuleType

BENCH = Path(__file__).resolve().parents[3] / "bench"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_codec_0_10", BENCH / "_codec_0_10.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_ours_and_qpid_time_the_same_transfers(bench: ModuleType) -> None:
    qpid = python27() is not None
    if not qpid:
        pytest.skip("Python 2.7 is not installed: qpid-python's side can't run")
    rows = bench.run(
        {"64B": (64, 20), "64KiB": (65536, 3)},
        1,
        4096,
        "cpu",
        time.process_time,
        qpid=True,
        ours_0_9_1={("decode", "64B"): 1.0},
    )
    libs = {(row["lib"], row["op"], row["size"]) for row in rows}
    for op in ("decode", "encode"):
        for size in ("64B", "64KiB"):
            assert ("ours 0-10", op, size) in libs
            assert ("qpid-python", op, size) in libs
    assert all(row["median_msgs_per_s"] > 0 for row in rows)


def test_our_decoder_sees_what_was_sent(bench: ModuleType) -> None:
    body = bytes(range(100))
    data = bench.build_transfers(5, body)
    bench.verify_ours(data, 5, body, 7)  # reads of 7 octets: every frame cut
