"""docs/tutorial.md promises that its snippets run as written; this keeps the promise."""

from __future__ import annotations

import re

import pytest

from tests.support import ROOT

_TUTORIAL = ROOT / "docs" / "tutorial.md"


def _snippets() -> list[str]:
    return re.findall(r"```python\n(.*?)```", _TUTORIAL.read_text(), flags=re.DOTALL)


def _run(index: int) -> None:
    exec(compile(_snippets()[index], f"docs/tutorial.md snippet {index}", "exec"), {})


def test_the_tutorial_has_the_snippets_these_tests_expect() -> None:
    snippets = _snippets()
    assert len(snippets) == 4
    assert "amqp_trio.connect" in snippets[0]
    assert "pub.publish" in snippets[1]  # a fragment of snippet 0's channel, run there below
    assert "socket.create_connection" in snippets[2]
    assert "ConnectionPair" in snippets[3]


@pytest.mark.rabbitmq
def test_trio_snippet_and_its_publisher_fragment(
    rabbitmq_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    snippets = _snippets()
    fragment = "\n".join("            " + line for line in snippets[1].splitlines())
    program = snippets[0].replace(
        "            await ch.basic_qos(10)\n",
        fragment.replace("100_000", "200") + "\n            await ch.basic_qos(10)\n",
        1,
    )
    exec(compile(program, "docs/tutorial.md snippets 0+1", "exec"), {})
    assert capsys.readouterr().out.startswith("hello 1\n")


@pytest.mark.rabbitmq
def test_core_by_hand_snippet(rabbitmq_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    _run(2)
    assert capsys.readouterr().out == "hi\n"


def test_broker_free_snippet() -> None:
    _run(3)
