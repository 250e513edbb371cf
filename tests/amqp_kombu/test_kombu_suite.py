# kombu has inline types but leaves most functions unannotated.
# mypy: disable-error-code="no-untyped-call"
"""kombu's own integration tests run on the amqp-sansio transport: the shared classes of kombu
5.7.0's ``t/integration/common.py`` (fetched from its sdist, see ``tests/support/kombu_suite.py``),
subclassed as kombu's ``test_py_amqp.py`` does for ``pyamqp``, with fixtures of ours, against
RabbitMQ (in a virtual host of its own, deleted afterwards: kombu's tests leave their queues
behind) and against an embedded broker of this module's own.

``kombu_suite_expected_failures.toml`` lists the tests expected to fail and why; a listed test
that passes fails, as does an unlisted one that fails. ``KOMBU_SUITE_TRANSPORT=pyamqp`` runs the
same tests on kombu's own transport (py-amqp), the baseline the list is compared with.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pytest
from kombu.connection import Connection as KombuConnection

import amqp_kombu
from tests.support.kombu_suite import integration_common

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.amqp_kombu.conftest import Broker

common = integration_common()

#: The transport under test: ours, or kombu's py-amqp one for the baseline.
TRANSPORT: Final = os.environ.get("KOMBU_SUITE_TRANSPORT", "amqp-sansio")
EXPECTED: Final = Path(__file__).with_name("kombu_suite_expected_failures.toml")
assert amqp_kombu.SCHEMES["amqp-sansio"]  # the import registered the scheme


def _expected_failures() -> dict[str, str]:
    """``"<broker>::<Class>::<test>"`` -> why, for the transport under test."""
    table = tomllib.loads(EXPECTED.read_text())
    failures: dict[str, str] = table.get(TRANSPORT, {})
    return failures


@pytest.fixture(autouse=True)
def _expected_to_fail(request: pytest.FixtureRequest, broker: Broker) -> None:
    if TRANSPORT != "amqp-sansio" and broker.protocol != "0-9-1":
        pytest.skip("kombu's own transports speak 0-9-1 only")  # the baseline run only
    assert isinstance(request.node, pytest.Function)
    cls = request.node.cls
    assert cls is not None
    key = f"{request.node.callspec.params['broker']}::{cls.__name__}::{request.node.originalname}"
    reason = _expected_failures().get(key)
    if reason is not None:
        request.applymarker(pytest.mark.xfail(reason=reason, strict=True))


def _connection(url: str, options: dict[str, object]) -> Iterator[KombuConnection]:
    conn = KombuConnection(url, transport_options=options)
    try:
        yield conn
    finally:
        conn.release()  # kombu's tests leave some open


@pytest.fixture
def connection(broker: Broker) -> Iterator[KombuConnection]:
    yield from _connection(f"{TRANSPORT}://{broker.address}", broker.transport_options)


@pytest.fixture
def invalid_connection(broker: Broker) -> Iterator[KombuConnection]:
    yield from _connection(f"{TRANSPORT}://localhost:12345", broker.transport_options)


@pytest.fixture
def failover_connection(broker: Broker) -> Iterator[KombuConnection]:
    yield from _connection(
        f"{TRANSPORT}://localhost:12345;{TRANSPORT}://{broker.address}",
        broker.transport_options,
    )


class TestBasicFunctionality(common.BasicFunctionality):  # type: ignore[misc,name-defined]
    pass


class TestExchangeTypes(common.BaseExchangeTypes):  # type: ignore[misc,name-defined]
    pass


class TestTimeToLive(common.BaseTimeToLive):  # type: ignore[misc,name-defined]
    pass


class TestPriority(common.BasePriority):  # type: ignore[misc,name-defined]
    pass


class TestFailover(common.BaseFailover):  # type: ignore[misc,name-defined]
    pass


class TestMessage(common.BaseMessage):  # type: ignore[misc,name-defined]
    pass


class TestEventLoop(common.BaseEventLoop):  # type: ignore[misc,name-defined]
    pass
