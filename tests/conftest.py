"""Shared fixtures: where the integration tests find a broker.

``amqp_url`` is parametrized over :data:`BROKERS`. Each entry names a fixture that yields a
URL (or skips/fails when that broker is unavailable); tests using ``amqp_url`` run once per
broker, and the ones running against RabbitMQ get the ``rabbitmq`` marker automatically. An
embedded broker joins by adding its name here and a fixture ``<name>_url``.

RabbitMQ comes from ``AMQP_URL`` (default ``amqp://guest:guest@127.0.0.1:5672/``). When it is
unreachable the tests skip with a message saying how to start it, except under ``CI=true``,
where they fail: CI must never pass by skipping.

Markers say what else a test needs: ``rabbitmq`` (a broker at ``AMQP_URL``; added here to every
test that uses ``rabbitmq_url``), ``spark`` (PySpark and Java; every test of ``amqp_spark``),
``node`` (Node.js with amqplib) and ``rabbitmq_cluster`` (a private 3-node RabbitMQ cluster,
``rabbitmq_cluster`` below: amqp_blocking's failover test runs in ``make test``, the other
adapters' with ``--cluster-all`` only (deselected otherwise); skipped with the reason where
rabbitmq-server is absent). ``make test`` also runs everything without them on Python 3.12 and 3.13
(``AMQP_SANSIO_TESTS=portable``, where PySpark is not installed, so the Spark test
modules are not even collected, nor the API reference's, which needs Sphinx and imports every
package), except ``qpid_suites`` (qpid-python's broker conformance suites, run on 3.11 only:
they exercise the broker's protocol behaviour, which the interpreter does not change, for two
minutes of every run).
"""

from __future__ import annotations

import os
import socket
import zlib
from typing import TYPE_CHECKING, Final

import hypothesis
import pytest

from amqp_sansio.client import ConnectionParameters

if TYPE_CHECKING:
    from collections.abc import Iterator

    from amqp_broker import BrokerThread
    from tests.support.rabbitmq_cluster import RabbitMQCluster
    from tests.support.rabbitmq_node import RabbitMQNode

# The project's own pytest plugin (also registered by its pytest11 entry point once installed):
# the embedded broker the integration tests run against is its session broker.
pytest_plugins = ["pytest_amqp_sansio", "pytester"]

#: Brokers ``amqp_url`` runs the integration tests against, by fixture name prefix.
BROKERS: Final[list[str]] = ["rabbitmq", "embedded"]

DEFAULT_AMQP_URL: Final = "amqp://guest:guest@127.0.0.1:5672/"

_HOW_TO_START = (
    "start one with `apt-get install rabbitmq-server && service rabbitmq-server start` "
    "(or `docker run -d -p 5672:5672 rabbitmq:3.10`), or point AMQP_URL at a broker"
)


def _unreachable_reason(url: str) -> str | None:
    params = ConnectionParameters.from_url(url)
    try:
        with socket.create_connection((params.host, params.port), timeout=2.0):
            return None
    except OSError as exc:
        return f"no RabbitMQ at {params.address} ({exc.strerror or exc})"


@pytest.fixture(scope="session")
def rabbitmq_url() -> str:
    """The RabbitMQ URL, after checking something listens there."""
    url = os.environ.get("AMQP_URL", DEFAULT_AMQP_URL)
    reason = _unreachable_reason(url)
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}: CI needs a broker", pytrace=False)
        pytest.skip(f"{reason}; {_HOW_TO_START}")
    return url


@pytest.fixture(scope="session")
def embedded_url(amqp_broker_session: BrokerThread) -> str:
    """The embedded broker (``amqp_broker``) in a thread of its own, for the whole session:
    the plugin's ``amqp_broker_session``."""
    return amqp_broker_session.url


@pytest.fixture(params=BROKERS)
def amqp_url(request: pytest.FixtureRequest) -> str:
    """A broker URL, once per entry of :data:`BROKERS`."""
    url = request.getfixturevalue(f"{request.param}_url")
    assert isinstance(url, str)
    return url


#: Test modules that import PySpark; left out of the portable run (see the module docstring).
_SPARK_MODULES: Final = ("amqp_spark/*", "project/test_bench_spark.py")

#: Test modules the portable runs leave to the main run: qpid-python's conformance suites
#: (Python 2.7 drives them; about 100 s, run once in ``make test``), the API reference's,
#: which needs Sphinx and imports every package (PySpark too), and kombu's suite and the Celery
#: workers on our kombu transport (two minutes of waiting on third-party code, which the
#: interpreter does not change), and amqpstorm's and aioamqp's management suites (half a
#: minute, the broker's HTTP API as they see it).
_MAIN_RUN_ONLY: Final = (
    "amqp_broker/test_qpid_suites.py",
    "amqp_broker/test_management_suites.py",
    "project/test_api_docs.py",
    "amqp_kombu/test_kombu_suite.py",
    "amqp_kombu/test_celery.py",
)

# No time limit per example: Hypothesis's default (200 ms) turns a stall of a loaded machine
# into a failure, and the project's tests never assert on time.
hypothesis.settings.register_profile("project", deadline=None)
hypothesis.settings.load_profile("project")

if os.environ.get("AMQP_SANSIO_TESTS") == "portable":
    collect_ignore_glob = [*_SPARK_MODULES, *_MAIN_RUN_ONLY]
    # The other interpreters run every test, not the search: a few examples each (a test's own
    # @settings still wins where it sets max_examples).
    hypothesis.settings.register_profile("portable", max_examples=10, deadline=None)
    hypothesis.settings.load_profile("portable")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cluster-all",
        action="store_true",
        help="run the 3-node RabbitMQ cluster failover test with every adapter (by default "
        "amqp_blocking's only: each adapter costs about 45 s)",
    )


#: Opt-in tests: deselected unless ``-m`` names their marker.
_OPT_IN: Final = ("management_suites_rabbitmq",)


def _opted_out(config: pytest.Config, item: pytest.Item) -> bool:
    # The cluster failover test runs with amqp_blocking only by default (each adapter costs
    # about 45 s) unless --cluster-all; the opt-in markers' tests only when -m names them.
    cluster = item.get_closest_marker("rabbitmq_cluster")
    if cluster is not None and cluster.kwargs.get("opt_in"):
        return not config.getoption("--cluster-all")
    asked = str(config.option.markexpr)
    return any(item.get_closest_marker(m) is not None and m not in asked for m in _OPT_IN)


def _other_shard(item: pytest.Item) -> bool:
    """``AMQP_SANSIO_SHARD=I/N``: whether *item* belongs to another of N shards (by a hash of
    its id, the same on every interpreter). ``make test`` runs the portable tests half on
    Python 3.12 and half on 3.13, each of them also on 3.11 in the main run: the interpreters
    are covered, and the two runs cost one run's time."""
    shard = os.environ.get("AMQP_SANSIO_SHARD")
    if not shard:
        return False
    index, _, count = shard.partition("/")
    return zlib.crc32(item.nodeid.encode()) % int(count) != int(index)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # deselected, not skipped: a skip in make test reads as something not done
    opted_out = [item for item in items if _opted_out(config, item) or _other_shard(item)]
    if opted_out:
        config.hook.pytest_deselected(items=opted_out)
        items[:] = [item for item in items if item not in opted_out]
    for item in items:
        if item.get_closest_marker("rabbitmq_cluster") is not None:
            # One worker runs every test on the session's cluster: one cluster, not two.
            item.add_marker(pytest.mark.xdist_group("rabbitmq_cluster"))
        callspec = getattr(item, "callspec", None)
        on_rabbitmq = callspec is not None and callspec.params.get("amqp_url") == "rabbitmq"
        if on_rabbitmq or "rabbitmq_url" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.rabbitmq)
        if any(item.path.match(f"tests/{pattern}") for pattern in _SPARK_MODULES):
            item.add_marker(pytest.mark.spark)
            # Under pytest-xdist one worker runs every Spark test: one JVM for all of them.
            item.add_marker(pytest.mark.xdist_group("spark"))
        elif "private_rabbitmq" in getattr(item, "fixturenames", ()):
            # One worker runs every test on the session's private node: one node, not two.
            item.add_marker(pytest.mark.xdist_group("private_rabbitmq"))
        elif item.name.startswith("test_rabbitmq_scenario[blocked"):
            # Each sets and lifts RabbitMQ's memory alarm, which is broker-wide: one worker
            # runs them in turn, so one test's lift never ends another's alarm.
            item.add_marker(pytest.mark.xdist_group("rabbitmq_memory_alarm"))


@pytest.fixture(scope="session")
def private_rabbitmq() -> Iterator[RabbitMQNode]:
    """One private RabbitMQ node for every test that kills or force-closes its broker (never the
    shared one at 5672): started once (about 15 s of CPU), removed at the end."""
    from tests.support.rabbitmq_node import rabbitmq_node

    with rabbitmq_node() as node:
        yield node


@pytest.fixture(scope="session")
def rabbitmq_cluster() -> Iterator[RabbitMQCluster]:
    """A private 3-node RabbitMQ cluster (tests/support/rabbitmq_cluster.py) for the failover
    tests, which kill its nodes: started once (about 45 s of CPU), removed at the end. Skips
    where no RabbitMQ server is installed (under ``CI=true`` it fails)."""
    from tests.support.rabbitmq_cluster import rabbitmq_cluster, rabbitmq_server_absent

    reason = rabbitmq_server_absent()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}: CI needs it", pytrace=False)
        pytest.skip(reason)
    with rabbitmq_cluster() as cluster:
        yield cluster
