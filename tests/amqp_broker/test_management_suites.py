"""Third-party suites that need RabbitMQ's management API, run unchanged (issue 34):
amqpstorm 3.1.4's management tests and aioamqp 0.15.0's suite (see
``tests/support/management_suites.py`` for how they are fetched and pointed at a broker),
each against the embedded broker and against a private RabbitMQ 3.10 node with
rabbitmq_management, all four runs at once (they mostly wait). Each test's outcome against
the embedded broker must be its outcome against RabbitMQ, except the differences listed in
``management_suites_expected.toml`` with their reasons: a listed difference that is gone
fails too, as a strict xfail would.

aioamqp waits ``AMQP_REFRESH_TIME`` seconds before it reads queues from the API: its default,
6, against RabbitMQ (whose statistics lag by up to about 3 s here), 1 against the embedded
broker, whose API reads the model (the second only lets unconfirmed publishes arrive).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Final

import pytest

from ..support import management_suites as suites
from ..support.rabbitmq_node import rabbitmq_node

EXPECTED: Final = Path(__file__).with_name("management_suites_expected.toml")
#: Longest a suite may run (aioamqp against RabbitMQ: about a minute).
TIMEOUT: Final = 300.0

#: One worker runs the tests that start private nodes (see tests/conftest.py).
pytestmark = [pytest.mark.rabbitmq, pytest.mark.xdist_group("private_rabbitmq")]


def _embedded(address: str) -> subprocess.Popen[bytes]:
    """``amqp-broker`` on *address*:5672 with the management API on *address*:15672."""
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "amqp_broker", "--host", address, "--port", "5672"),
            *("--management-port", "15672"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    for line in process.stderr:  # it says where it listens once it does
        if b"management API on" in line:
            return process
    raise AssertionError(f"amqp-broker did not start: {process.wait()}")


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    """``"<suite>/<broker>"`` -> outcome per test."""
    suite_dir = suites.aioamqp_suite()
    suites.aioamqp_python()
    out = tmp_path_factory.mktemp("management-suites")
    rabbit = suites.loopback_address()
    with rabbitmq_node(management=True, host=rabbit, port=5672, management_port=15672) as _node:
        brokers = []
        runs: dict[str, subprocess.Popen[bytes]] = {}
        try:
            embedded = {}
            for suite in ("amqpstorm", "aioamqp"):
                embedded[suite] = suites.loopback_address()
                brokers.append(_embedded(embedded[suite]))  # one per suite: no shared state

            def start(suite: str, broker: str) -> None:
                host = embedded[suite] if broker == "embedded" else rabbit
                junit = out / f"{suite}-{broker}.xml"
                if suite == "amqpstorm":
                    command, env = suites.amqpstorm_command(host, junit)
                    cwd = out
                else:
                    refresh = 1 if broker == "embedded" else 6
                    command, env = suites.aioamqp_command(host, refresh, junit)
                    cwd = suite_dir
                runs[f"{suite}/{broker}"] = subprocess.Popen(
                    command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )

            # The two suites one after the other on the node (amqpstorm's API client gives
            # RabbitMQ one second an answer), the embedded runs meanwhile.
            for suite, broker in (
                ("amqpstorm", "rabbitmq"),
                ("amqpstorm", "embedded"),
                ("aioamqp", "embedded"),
            ):
                start(suite, broker)
            runs["amqpstorm/rabbitmq"].wait(TIMEOUT)
            start("aioamqp", "rabbitmq")
            for run in runs.values():
                run.wait(TIMEOUT)
        finally:
            for process in [*runs.values(), *brokers]:
                process.kill()
                process.wait()
            for process in brokers:
                assert process.stderr is not None
                process.stderr.close()
    return {key: suites.outcomes(out / f"{key.replace('/', '-')}.xml") for key in runs}


def _expected(suite: str) -> dict[str, str]:
    table: dict[str, dict[str, str]] = tomllib.loads(EXPECTED.read_text())
    return table.get(suite, {})


@pytest.mark.parametrize(
    ("suite", "counts"),
    [
        # (passed, failed, skipped) against the embedded broker, then against RabbitMQ
        ("amqpstorm", ((27, 28, 0), (54, 1, 0))),
        ("aioamqp", ((95, 0, 2), (95, 0, 2))),
    ],
)
def test_suite_outcomes_are_rabbitmqs(
    results: dict[str, dict[str, str]],
    suite: str,
    counts: tuple[tuple[int, int, int], tuple[int, int, int]],
) -> None:
    ours, theirs = results[f"{suite}/embedded"], results[f"{suite}/rabbitmq"]
    assert set(ours) == set(theirs)
    differing = {test: (ours[test], theirs[test]) for test in ours if ours[test] != theirs[test]}
    assert sorted(differing) == sorted(_expected(suite)), differing

    def tally(found: dict[str, str]) -> tuple[int, int, int]:
        values = list(found.values())
        return values.count("passed"), values.count("failed"), values.count("skipped")

    assert (tally(ours), tally(theirs)) == counts
