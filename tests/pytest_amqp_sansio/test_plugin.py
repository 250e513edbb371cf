"""The pytest plugin (``pytest_amqp_sansio``), run as users run it: inner pytest sessions in
``pytester``'s directories, with pytest-trio, with ``asyncio.run``, and without Trio at all."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

    from amqp_broker import BrokerThread
    from amqp_sansio.testing import ConnectionPair

_LOAD = ("-p", "pytest_amqp_sansio")


def _dead_url() -> str:
    """An amqp:// URL at a port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"amqp://guest:guest@127.0.0.1:{port}/"


def test_loading_the_plugin_imports_only_the_standard_library() -> None:
    script = textwrap.dedent(
        """
        import sys
        import pytest
        before = set(sys.modules)
        import pytest_amqp_sansio
        new = {name.partition(".")[0] for name in set(sys.modules) - before}
        print(sorted(new - set(sys.stdlib_module_names) - {"pytest_amqp_sansio"}))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_the_entry_point_names_the_module() -> None:
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads(
        (Path(__file__).parents[2] / "pyproject.toml").read_text(encoding="utf-8")
    )
    # named like the module, so -p / pytest_plugins and the entry point register it once
    assert pyproject["project"]["entry-points"]["pytest11"] == {
        "pytest_amqp_sansio": "pytest_amqp_sansio"
    }


def test_the_project_uses_the_plugins_session_broker(
    embedded_url: str, amqp_broker_session: BrokerThread
) -> None:
    assert embedded_url == amqp_broker_session.url


def test_amqp_pair_is_open(amqp_pair: ConnectionPair) -> None:
    channel = amqp_pair.open_channel()
    assert channel == 1


def test_broker_fixtures_under_trio_and_asyncio(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_inner="""
        import asyncio

        import pytest

        import amqp_asyncio
        import amqp_trio
        from amqp_broker import BrokerOptions


        @pytest.mark.trio
        @pytest.mark.amqp_broker(vhosts=["/", "other"], options=BrokerOptions(channel_max=7))
        async def test_trio(amqp_broker):
            async with amqp_trio.connect(amqp_broker.url) as conn, conn.channel() as ch:
                assert conn.channel_max == 7
                await ch.queue_declare("q1")
                await ch.exchange_declare("x1", "topic")
                await ch.queue_bind("q1", "x1", routing_key="a.#")
                await ch.basic_publish(b"hello", exchange="x1", routing_key="a.b")
                await ch.basic_get("q1")  # a round trip: the publish was routed
                await ch.basic_publish(b"again", exchange="x1", routing_key="a.b")
                await ch.basic_get("q1")
                snapshot = amqp_broker.snapshot()
            queue = snapshot.queue("q1")
            assert (queue.messages_ready, queue.messages_unacknowledged) == (0, 2)
            binding = snapshot.exchange("x1").bindings[0]
            assert (binding.destination, binding.routing_key) == ("q1", "a.#")
            assert {v.vhost for v in snapshot.exchanges} == {"/", "other"}
            [connection] = snapshot.connections
            assert (connection.user, connection.vhost, connection.channels) == ("guest", "/", 1)


        def test_asyncio(amqp_broker):
            async def main():
                async with amqp_asyncio.connect(amqp_broker.url) as conn:
                    async with conn.channel() as ch:
                        await ch.queue_declare("q2")
                        await ch.basic_publish(b"x", routing_key="q2")
                        await ch.queue_declare("q2", passive=True)
            asyncio.run(main())
            snapshot = amqp_broker.snapshot()
            assert snapshot.queue("q2").messages_ready == 1
            assert snapshot.connections == ()
            with pytest.raises(KeyError, match="no queue 'q1'"):
                snapshot.queue("q1")  # each test has its own broker


        def test_session_one(amqp_broker_session, amqp_broker_url):
            assert amqp_broker_url == amqp_broker_session.url


        def test_session_two(amqp_broker_session, amqp_broker_url):
            assert amqp_broker_url == amqp_broker_session.url


        def test_call_changes_the_broker(amqp_broker):
            amqp_broker.call(lambda broker: broker.add_vhost("late"))
            assert "late" in {e.vhost for e in amqp_broker.snapshot().exchanges}


        @pytest.mark.amqp_broker(queues=1)
        def test_bad_marker(amqp_broker):
            pass
        """
    )
    result = pytester.runpytest(*_LOAD, "-W", "error")
    result.assert_outcomes(passed=5, errors=1)
    result.stdout.fnmatch_lines(["*the amqp_broker marker takes users, vhosts,*not queues*"])


def test_amqp_broker_url_when_amqp_url_does_not_answer(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(
        test_inner="""
        def test_url(amqp_broker_url):
            pass
        """
    )
    monkeypatch.setenv("AMQP_URL", _dead_url())
    monkeypatch.delenv("CI", raising=False)
    skipped = pytester.runpytest(*_LOAD, "-rs")
    skipped.assert_outcomes(skipped=1)
    skipped.stdout.fnmatch_lines(["*nothing answers at 127.0.0.1:*unset AMQP_URL*"])
    monkeypatch.setenv("CI", "true")
    failed = pytester.runpytest(*_LOAD)
    failed.assert_outcomes(errors=1)
    failed.stdout.fnmatch_lines(["*nothing answers at 127.0.0.1:*: CI needs a broker*"])
    monkeypatch.setenv("AMQP_URL", "http://example.com/")
    wrong = pytester.runpytest(*_LOAD)
    wrong.assert_outcomes(errors=1)
    wrong.stdout.fnmatch_lines(["*is not an amqp:// or amqps:// URL*"])


def test_without_trio(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, rabbitmq_url: str
) -> None:
    # A user without the trio extra: trio cannot be imported (and so pytest-trio is absent).
    pytester.makepyfile(
        block_trio="""
        import sys
        sys.modules["trio"] = None  # import trio now raises ImportError
        """,
        test_inner="""
        import sys

        import amqp_blocking


        def test_pair(amqp_pair):
            assert amqp_pair.open_channel() == 1


        def test_url_from_the_environment(amqp_broker_url):
            with amqp_blocking.connect(amqp_broker_url) as conn, conn.channel() as ch:
                assert ch.queue_declare("", exclusive=True).queue.startswith("amq.gen-")
            assert sys.modules["trio"] is None


        def test_embedded(amqp_broker):
            pass
        """,
    )
    monkeypatch.setenv("AMQP_URL", rabbitmq_url)
    # Trio's Hypothesis hook and pytest-trio come with Trio: a user without it has neither.
    result = pytester.runpytest_subprocess(
        "-p", "block_trio", "-p", "no:trio", "-p", "no:hypothesispytest", *_LOAD
    )
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        ["*the amqp_broker fixture runs the embedded broker, which needs Trio: pip install*"]
    )


def test_the_docs_examples_pass(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    import re
    from pathlib import Path

    page = Path(__file__).parents[2] / "docs" / "testing-plugin.md"
    snippets = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL)
    for number, snippet in enumerate(snippets):
        pytester.makepyfile(**{f"test_doc{number}": snippet})
    monkeypatch.delenv("AMQP_URL", raising=False)
    result = pytester.runpytest(*_LOAD, "-W", "error")
    result.assert_outcomes(passed=len(snippets))
