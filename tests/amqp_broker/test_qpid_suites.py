"""An independent 0-8/0-9 peer: qpid-python 1.36's conformance suites ``qpid_tests.broker_0_8``
and ``broker_0_9`` against the embedded broker, with a checked-in list of the tests expected to
fail and why (``qpid_expected_failures.toml``).

Three runs, each against its own broker, at once (the suites mostly wait on timeouts):

* ``default``: qpid's client as it comes (its 0-9 spec, header ``AMQP 1 1 0 9``), served as
  0-9-1 (RabbitMQ's reading): both suites.
* ``header_0_9``: the broker reading ``AMQP 1 1 0 9`` as 0-9: both suites.
* ``spec_0_8``: qpid's client loading its 0-8 spec (``AMQP 1 1 8 0``), the broker proposing
  heartbeat 0 (qpid's 0-8 reader can't read heartbeat frames): broker_0_8. The broker speaks
  qpid's 0-8 dialect to it (``amqp_sansio.AMQP_0_8_QPID``: basic.recover answered).

The test fails when a listed test passes or an unlisted one fails. qpid-python runs under
Python 2.7 (``tests/support/qpid.py`` installs it); without Python 2.7 the test skips, saying so.
"""

from __future__ import annotations

import subprocess
import time
import tomllib
import xml.etree.ElementTree as ET
from contextlib import ExitStack
from pathlib import Path
from typing import Final, final

import attrs
import pytest

import amqp_broker
from amqp_broker import BrokerOptions
from amqp_sansio.client import ConnectionParameters
from tests.support.qpid import require_qpid, start_py2

pytestmark = pytest.mark.qpid_suites

HERE: Final = Path(__file__).parent
SCRIPT: Final = HERE.parent / "support" / "py2" / "qpid_broker_suites.py2"
EXPECTED: Final = HERE / "qpid_expected_failures.toml"

#: How long qpid's tests wait for a message they expect (its default, 1 s, is short for a loaded
#: machine running two test workers; only the tests that expect a message and get none wait it).
RECV_TIMEOUT: Final = ("--define=qpid.recv_timeout=2",)

#: Seconds for all three runs together (about 80 on a quiet machine, the longest run's time:
#: default and header_0_9 each run both suites).
DEADLINE: Final = 400


@final
@attrs.frozen
class Run:
    options: BrokerOptions
    #: The spec qpid's client loads: "0-9" (its default) or "0-8".
    spec: str
    suites: tuple[str, ...]
    #: Each suite's floor of passing tests (the issue's counts).
    floor: dict[str, int]


RUNS: Final = {
    "default": Run(
        BrokerOptions(),
        "0-9",
        ("broker_0_8", "broker_0_9"),
        {"broker_0_8": 34, "broker_0_9": 14},
    ),
    "header_0_9": Run(
        BrokerOptions(header_0_9="0-9"),
        "0-9",
        ("broker_0_8", "broker_0_9"),
        {"broker_0_8": 34, "broker_0_9": 14},
    ),
    "spec_0_8": Run(BrokerOptions(heartbeat=0), "0-8", ("broker_0_8",), {"broker_0_8": 34}),
}


def _results(xml_file: Path) -> dict[str, bool]:
    """Test name (without ``qpid_tests.``) -> passed, from the harness's JUnit-style report."""
    out: dict[str, bool] = {}
    for case in ET.parse(xml_file).getroot().iter("testcase"):
        name = f"{case.get('classname')}.{case.get('name')}".removeprefix("qpid_tests.")
        out[name] = case.find("failure") is None and case.find("skipped") is None
    return out


def _why(log: Path, name: str) -> str:
    """The last line the harness printed about *name*'s failure."""
    lines = log.read_text(errors="replace").splitlines()
    for index, line in enumerate(lines):
        if line.startswith(f"qpid_tests.{name} ") and line.rstrip().endswith("fail"):
            tail = [t.strip() for t in lines[index + 1 : index + 40] if t.strip()]
            ends = [
                t for t in tail if not t.startswith(("File ", "Error during", "raise", "phase"))
            ]
            return ends[-1] if ends else "?"
    return "?"


def test_qpid_broker_suites(tmp_path: Path) -> None:
    require_qpid()
    expected = tomllib.loads(EXPECTED.read_text())
    reasons: dict[str, str] = expected["reasons"]
    for run in expected["runs"].values():
        for name in [*run["fail"], *run["ignore"]]:
            assert name in reasons, f"{name} is listed without a reason"

    procs: dict[str, subprocess.Popen[str]] = {}
    with ExitStack() as stack:
        for label, run in RUNS.items():
            url = stack.enter_context(amqp_broker.run_in_thread(options=run.options))
            params = ConnectionParameters.from_url(url)
            broker = f"{params.username}/{params.password}@{params.host}:{params.port}"
            ignore = [f"--ignore=qpid_tests.{name}" for name in expected["runs"][label]["ignore"]]
            patterns = [f"qpid_tests.{suite}.*" for suite in run.suites]
            xml_file, log = tmp_path / f"{label}.xml", tmp_path / f"{label}.log"
            procs[label] = start_py2(
                SCRIPT, run.spec, broker, str(xml_file), *RECV_TIMEOUT, *ignore, *patterns, log=log
            )
        deadline = time.monotonic() + DEADLINE
        try:
            for label, proc in procs.items():
                left = max(deadline - time.monotonic(), 0.1)
                try:
                    proc.wait(left)
                except subprocess.TimeoutExpired:
                    tail = (tmp_path / f"{label}.log").read_text()[-3000:]
                    raise AssertionError(
                        f"qpid run {label!r} did not finish in {DEADLINE} s:\n{tail}"
                    ) from None
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()

    problems: list[str] = []
    summary: list[str] = []
    for label, run in RUNS.items():
        xml_file, log = tmp_path / f"{label}.xml", tmp_path / f"{label}.log"
        assert xml_file.exists(), f"run {label!r} wrote no report:\n{log.read_text()[-3000:]}"
        results = _results(xml_file)
        listed = set(expected["runs"][label]["fail"])
        for suite in run.suites:
            names = [n for n in results if n.startswith(f"{suite}.")]
            passed = sum(results[n] for n in names)
            skipped = [n for n in expected["runs"][label]["ignore"] if n.startswith(f"{suite}.")]
            summary.append(
                f"{label} {suite}: {passed}/{len(names) + len(skipped)} pass"
                + (f" ({len(skipped)} not run)" if skipped else "")
            )
            if passed < run.floor[suite]:
                problems.append(f"{label} {suite}: {passed} pass, below {run.floor[suite]}")
        for name, ok in sorted(results.items()):
            if ok and name in listed:
                problems.append(f"{label}: {name} passes but is listed to fail ({reasons[name]})")
            elif not ok and name not in listed:
                problems.append(f"{label}: {name} fails, unlisted: {_why(log, name)}")
        problems.extend(
            f"{label}: {name} is listed but did not run" for name in sorted(listed - set(results))
        )
    print("\n".join(summary))  # shown with -s or on failure: the counts for the notes
    assert not problems, "\n".join([*problems, "", *summary])
