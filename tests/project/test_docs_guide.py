"""The guide's pages promise that their examples run as written; this keeps the promise.

Pages that talk to a broker name ``amqp://guest:guest@127.0.0.1:5672/``: the tests run them
against every broker in ``amqp_url`` (RabbitMQ and the embedded one) by swapping the URL.
"""

from __future__ import annotations

import re

import pytest

from amqp_sansio import ChannelFlow
from amqp_sansio.framing import MethodFrame
from amqp_sansio.testing import ConnectionPair, feed, parse_frames
from tests.support import ROOT

_LOCAL_URL = "amqp://guest:guest@127.0.0.1:5672/"


def snippets(page: str) -> list[str]:
    text = (ROOT / "docs" / page).read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def run(page: str, index: int, url: str | None = None) -> None:
    code = snippets(page)[index]
    if url is not None:
        assert _LOCAL_URL in code, f"docs/{page} snippet {index} names no broker URL"
        code = code.replace(_LOCAL_URL, url)
    exec(compile(code, f"docs/{page} snippet {index}", "exec"), {"__name__": "__guide__"})


# --- docs/server.md ---------------------------------------------------------------------------


def test_server_page_has_the_snippets_these_tests_expect() -> None:
    found = snippets("server.md")
    assert len(found) == 2
    assert "check_credentials" in found[0]
    assert "selectors" in found[1]


def test_server_credentials_snippet() -> None:
    run("server.md", 0)


def test_server_on_non_blocking_sockets_writes_partially_and_loses_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run("server.md", 1)
    out = capsys.readouterr().out
    match = re.fullmatch(r"echoed 1 MiB; partial writes: (\d+)\n", out)
    assert match is not None, out
    assert int(match.group(1)) > 0  # the loop's partial-write path ran


def _listed(text: str, heading: str) -> set[str]:
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"`((?:connection|channel)\.[a-z-]+)`", section))


def test_the_list_of_what_the_core_answers_by_itself_matches_the_wire() -> None:
    answered: set[str] = set()
    pair = ConnectionPair()
    feed(pair.server, pair.client.data_to_send())  # the protocol header
    for frame in parse_frames(pair.server.data_to_send()):
        assert isinstance(frame, MethodFrame)
        answered.add(frame.method.NAME)
    pair = ConnectionPair()
    pair.handshake()

    def unprompted(send: str) -> None:
        events = pair.transfer(pair.client)
        assert events, send
        out = pair.server.data_to_send()
        for frame in parse_frames(out):
            assert isinstance(frame, MethodFrame)
            answered.add(frame.method.NAME)
        if out:
            feed(pair.client, out)

    channel = pair.client.open_channel()
    unprompted("open")
    pair.client.send_method(channel, ChannelFlow(active=False))
    unprompted("flow")
    pair.client.close_channel(channel)
    unprompted("close")
    pair.client.close()
    unprompted("connection close")
    assert answered == {
        "connection.start",
        "channel.open-ok",
        "channel.flow-ok",
        "channel.close-ok",
        "connection.close-ok",
    }
    server_page = (ROOT / "docs" / "server.md").read_text()
    assert answered <= _listed(server_page, "## What the core answers by itself")
    trio_row = next(
        line
        for line in (ROOT / "docs" / "trio.md").read_text().splitlines()
        if line.startswith("| `await next_event()`")
    )
    assert answered <= set(re.findall(r"`((?:connection|channel)\.[a-z-]+)`", trio_row))


# --- docs/rpc.md ------------------------------------------------------------------------------


def test_rpc_page_has_one_program_per_adapter() -> None:
    found = snippets("rpc.md")
    assert [s.count("import amqp_") for s in found] == [1, 1, 1]
    for snippet, adapter in zip(found, ["amqp_trio", "amqp_asyncio", "amqp_blocking"], strict=True):
        assert f"import {adapter}\n" in snippet
        assert "amq.rabbitmq.reply-to" in snippet
        assert "replies.get(timeout=10)" in snippet


@pytest.mark.parametrize("index", [0, 1, 2], ids=["trio", "asyncio", "blocking"])
def test_rpc_over_direct_reply_to(
    index: int, amqp_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run("rpc.md", index, amqp_url)
    assert capsys.readouterr().out == "HELLO\nWORLD\n"


# --- docs/shutdown.md -------------------------------------------------------------------------


def test_shutdown_page_has_one_program_per_adapter() -> None:
    found = snippets("shutdown.md")
    for snippet, adapter in zip(found, ["amqp_trio", "amqp_asyncio", "amqp_blocking"], strict=True):
        assert f"import {adapter}\n" in snippet
        assert "signal.raise_signal" in snippet


@pytest.mark.parametrize("index", [0, 1, 2], ids=["trio", "asyncio", "blocking"])
def test_shutdown_on_a_signal_requeues_what_was_not_acked(
    index: int, amqp_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run("shutdown.md", index, amqp_url)
    lines = capsys.readouterr().out.splitlines()
    page = (ROOT / "docs" / "shutdown.md").read_text()
    printed = page.split("It prints:\n\n```text\n", 1)[1].split("```", 1)[0].splitlines()
    if index == 0:
        assert lines == printed  # the output the page shows is the Trio program's
    jobs = [line for line in lines if line.startswith(("done", "left"))]
    assert jobs == [line for line in printed if line.startswith(("done", "left"))]
    assert any(line.startswith("stopped") for line in lines)
