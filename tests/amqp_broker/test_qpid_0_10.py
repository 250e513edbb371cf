"""qpid's own 0-10 conformance tests (``qpid_tests.broker_0_10``, qpid-python 1.36 under
Python 2.7) against the embedded broker.

The protocol modules (queue, exchange, message, query, example, broker, alternate_exchange,
tx: 104 tests) run in two halves at once, each against a broker of its own (the tests use
fixed queue names). Every test must pass except those listed in
``qpid_0_10_expected_failures.txt`` with a reason; a listed test that passes fails this test
too, so the list stays true.
"""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.support.broker_0_10 import brokers_in_thread
from tests.support.qpid import py2_env, require_qpid

pytestmark = pytest.mark.qpid_suites

HERE = Path(__file__).resolve().parent
EXPECTED = HERE / "qpid_0_10_expected_failures.txt"
SUITE = "qpid_tests.broker_0_10"
#: The modules and how many tests each holds (qpid-python 1.36), in two halves of about the
#: same running time.
HALVES = (
    {"message": 32, "tx": 3, "broker": 3, "example": 1},
    {"queue": 19, "exchange": 28, "query": 7, "alternate_exchange": 11},
)


def expected_failures() -> dict[str, str]:
    found: dict[str, str] = {}
    for line in EXPECTED.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, reason = line.partition(" ")
            assert reason.strip(), f"{name}: the list gives no reason"
            found[name] = reason.strip()
    return found


def _results(xml: Path) -> dict[str, bool]:
    outcome: dict[str, bool] = {}
    for case in ET.parse(xml).iter("testcase"):
        name = f"{case.get('classname')}.{case.get('name')}"
        failed = case.find("failure") is not None or case.find("error") is not None
        outcome[name] = not failed
    return outcome


def test_qpid_broker_0_10_suite(tmp_path: Path) -> None:
    python, qpid_dir = require_qpid()
    with brokers_in_thread(len(HALVES)) as ports:
        runs = []
        for half, port in zip(HALVES, ports, strict=True):
            xml = tmp_path / f"{port.amqp_0_10}.xml"
            patterns = [f"{SUITE}.{module}.*" for module in half]
            process = subprocess.Popen(
                [
                    str(python),
                    str(qpid_dir / "bin" / "qpid-python-test"),
                    "-m",
                    "qpid_tests",
                    "-b",
                    f"127.0.0.1:{port.amqp_0_10}",
                    "-x",
                    str(xml),
                    *patterns,
                ],
                env=py2_env(qpid_dir),
                cwd=qpid_dir,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            runs.append((process, xml))
        outputs = []
        for process, _ in runs:
            try:
                outputs.append(process.communicate(timeout=300)[0])
            except subprocess.TimeoutExpired:
                process.kill()
                outputs.append(process.communicate()[0])
    outcome: dict[str, bool] = {}
    for (_, xml), output in zip(runs, outputs, strict=True):
        assert xml.exists(), f"qpid-python-test wrote no results:\n{output[-3000:]}"
        outcome.update(_results(xml))
    counts = {module: n for half in HALVES for module, n in half.items()}
    per_module: dict[str, list[int]] = {module: [0, 0] for module in counts}
    for name, passed in outcome.items():
        per_module[name.split(".")[2]][0 if passed else 1] += 1
    report = ", ".join(f"{m} {p}/{p + f}" for m, (p, f) in per_module.items())
    print(f"qpid_tests.broker_0_10 against amqp_broker: {report}")
    for module, n in counts.items():
        assert sum(per_module[module]) == n, f"{module}: ran {sum(per_module[module])} of {n}"
    expected = expected_failures()
    unexpected = sorted(
        name for name, passed in outcome.items() if not passed and name not in expected
    )
    now_passing = sorted(name for name in expected if outcome.get(name))
    missing = sorted(name for name in expected if name not in outcome)
    log = "\n".join(o[-4000:] for o in outputs)
    assert not unexpected, f"failed and not in {EXPECTED.name}: {unexpected}\n{log}"
    assert not now_passing, f"listed in {EXPECTED.name} but passed: {now_passing}"
    assert not missing, f"listed in {EXPECTED.name} but not run: {missing}"
    assert sum(outcome.values()) >= 94
