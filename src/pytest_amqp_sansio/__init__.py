"""pytest plugin of amqp-sansio: a broker for your tests without RabbitMQ on the machine.

Registered through the ``pytest11`` entry point, so installing ``amqp-sansio`` is enough (or
``-p pytest_amqp_sansio`` / ``pytest_plugins = ["pytest_amqp_sansio"]`` without installing).
Loading it imports nothing beyond the standard library and pytest: the broker fixtures import
``amqp_broker`` (which needs the ``trio`` extra) when a test asks for them, so a project
without Trio loses nothing by having the plugin installed.

Fixtures:

* ``amqp_broker``: an embedded broker (``amqp_broker``) serving on a free port of 127.0.0.1
  in a thread of its own, started for the test and stopped after it; an
  :class:`amqp_broker.BrokerThread` (``.url``, ``.snapshot()``, ``.call()``,
  ``.close_connection(name)``, ``.peek(queue)``, ``.purge(queue)``). Its users, virtual
  hosts and :class:`~amqp_broker.BrokerOptions` come from the ``amqp_broker`` marker.
* ``amqp_broker_session``: the same, one for the whole session (default settings).
* ``amqp_broker_url``: ``AMQP_URL`` when it is set (after checking it answers: a failure under
  ``CI=true``, else a skip saying so), otherwise the session broker's URL.
* ``amqp_management_url``: ``http://127.0.0.1:PORT/`` of the ``amqp_broker`` fixture's
  management HTTP API; the test is marked ``@pytest.mark.amqp_broker(management=True)``.
* ``amqp_pair``: an :class:`amqp_sansio.testing.ConnectionPair` whose handshake is done.

The broker runs in its own thread with its own Trio run, so the fixtures serve plain tests,
``asyncio.run`` and pytest-asyncio tests, and pytest-trio tests alike. See
``docs/testing-plugin.md``.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

    from amqp_broker import BrokerThread
    from amqp_sansio.testing import ConnectionPair

__all__ = [
    "amqp_broker",
    "amqp_broker_session",
    "amqp_broker_url",
    "amqp_management_url",
    "amqp_pair",
]

#: The keywords the ``amqp_broker`` marker takes (those of :class:`amqp_broker.BrokerThread`).
MARKER_KEYWORDS: Final = (
    "users",
    "vhosts",
    "host",
    "options",
    "ssl_context",
    "management",
    "data_dir",
)

_NEEDS_TRIO: Final = (
    "the {fixture} fixture runs the embedded broker, which needs Trio: "
    "pip install 'amqp-sansio[trio]' (or use amqp_broker_url with AMQP_URL set to a broker)"
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "amqp_broker(users=None, vhosts=('/',), host='127.0.0.1', options=None, "
        "ssl_context=None, management=False, data_dir=None): how the amqp_broker fixture "
        "starts its broker (see amqp_broker.BrokerThread)",
    )


def _start(fixture: str, settings: dict[str, object]) -> BrokerThread:
    try:
        from amqp_broker import BrokerThread
    except ImportError as exc:
        pytest.fail(f"{_NEEDS_TRIO.format(fixture=fixture)} ({exc})", pytrace=False)
    thread = BrokerThread(**settings)  # type: ignore[arg-type]  # checked by _marker_settings
    thread.start()
    return thread


def _marker_settings(request: pytest.FixtureRequest) -> dict[str, object]:
    settings: dict[str, object] = {}
    for marker in reversed(list(request.node.iter_markers("amqp_broker"))):
        if marker.args:
            pytest.fail("the amqp_broker marker takes keywords only", pytrace=False)
        unknown = sorted(set(marker.kwargs) - set(MARKER_KEYWORDS))
        if unknown:
            pytest.fail(
                f"the amqp_broker marker takes {', '.join(MARKER_KEYWORDS)}; "
                f"not {', '.join(unknown)}",
                pytrace=False,
            )
        settings.update(marker.kwargs)  # the closest marker (the test's own) wins
    return settings


@pytest.fixture
def amqp_broker(request: pytest.FixtureRequest) -> Iterator[BrokerThread]:
    """An embedded broker for this test alone (settings from the ``amqp_broker`` marker)."""
    thread = _start("amqp_broker", _marker_settings(request))
    try:
        yield thread
    finally:
        thread.stop()


@pytest.fixture(scope="session")
def amqp_broker_session() -> Iterator[BrokerThread]:
    """An embedded broker shared by the whole session: use unique queue names."""
    thread = _start("amqp_broker_session", {})
    try:
        yield thread
    finally:
        thread.stop()


def _unreachable(url: str) -> str | None:
    parts = urlsplit(url)
    if parts.scheme not in ("amqp", "amqps"):
        return f"AMQP_URL={url!r} is not an amqp:// or amqps:// URL"
    try:
        port = parts.port
    except ValueError as exc:
        return f"AMQP_URL={url!r}: {exc}"
    host = parts.hostname or "localhost"
    port = port or (5671 if parts.scheme == "amqps" else 5672)
    try:
        with socket.create_connection((host, port), timeout=2.0):
            return None
    except OSError as exc:
        return f"nothing answers at {host}:{port} (AMQP_URL; {exc.strerror or exc})"


@pytest.fixture(scope="session")
def amqp_broker_url(request: pytest.FixtureRequest) -> str:
    """``AMQP_URL`` when set and answering, else the session's embedded broker's URL.

    A set ``AMQP_URL`` that does not answer fails the test under ``CI=true`` (CI must never
    pass by skipping) and skips it otherwise.
    """
    url = os.environ.get("AMQP_URL")
    if not url:
        broker = request.getfixturevalue("amqp_broker_session")
        return str(broker.url)
    reason = _unreachable(url)
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}: CI needs a broker", pytrace=False)
        pytest.skip(f"{reason}; unset AMQP_URL to use the embedded broker")
    return url


@pytest.fixture
def amqp_management_url(request: pytest.FixtureRequest) -> str:
    """The management API of the ``amqp_broker`` fixture's broker."""
    if not _marker_settings(request).get("management"):
        pytest.fail(
            "amqp_management_url needs @pytest.mark.amqp_broker(management=True)", pytrace=False
        )
    broker: BrokerThread = request.getfixturevalue("amqp_broker")
    return broker.management_url


@pytest.fixture
def amqp_pair() -> ConnectionPair:
    """A client core and a server core joined in memory, their handshake done."""
    from amqp_sansio.testing import ConnectionPair

    pair = ConnectionPair()
    pair.handshake()
    return pair
