"""The API reference: generated from every public module's ``__all__`` (fresh, complete, each
name once), with the Sphinx settings that keep it readable, checked on a small real build."""

from __future__ import annotations

import importlib
import importlib.util
import re
import subprocess
import sys
from typing import TYPE_CHECKING

from tests.support import ROOT

if TYPE_CHECKING:
    from pathlib import Path

_GENERATOR = ROOT / "tools" / "gen_api_docs.py"
_PAGE = ROOT / "docs" / "api.md"


def _generator_modules() -> list[str]:
    source = _GENERATOR.read_text()
    block = source.split("MODULES: Final[dict[str, str]] = {", 1)[1].split("\n}\n", 1)[0]
    return re.findall(r'^    "([\w.]+)": ', block, flags=re.MULTILINE)


def test_the_api_page_is_fresh() -> None:
    spec = importlib.util.spec_from_file_location("gen_api_docs", _GENERATOR)
    assert spec is not None
    assert spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    assert generator.generate() == _PAGE.read_text(), "run python tools/gen_api_docs.py"


def test_every_exported_name_is_documented_once() -> None:
    text = _PAGE.read_text()
    entries = re.findall(
        r"^\.\. (?:autoclass|autoexception|autofunction|py:data):: ([\w.]+)$",
        text,
        flags=re.MULTILINE,
    )
    assert len(entries) == len(set(entries)), "a name documented twice"
    documented = set(entries)
    mentioned = set(re.findall(r"`~([\w.]+)`", text))
    for module_name in _generator_modules():
        module = importlib.import_module(module_name)
        for name in module.__all__:
            full = f"{module_name}.{name}"
            home = getattr(getattr(module, name), "__module__", module_name)
            assert full in documented or f"{home}.{name}" in mentioned | documented, full
    assert text.count("\n## `amqp_sansio`\n") == 1


def test_the_reference_covers_the_public_modules() -> None:
    ext = (ROOT / "docs" / "_ext" / "readable_api.py").read_text()
    public = re.findall(r'^    "([\w.]+)",$', ext.split("PUBLIC: Final = (", 1)[1], re.MULTILINE)
    generated = _generator_modules()
    assert set(public) == set(generated) - {"amqp_sansio.client.exports"}


def test_broker_internals_and_private_modules_stay_out() -> None:
    text = _PAGE.read_text()
    broker = text.split("\n## `amqp_broker`\n", 1)[1].split("\n## ", 1)[0]
    members = re.search(r"autoclass:: amqp_broker\.Broker\n   :members: (.*)\n", broker)
    assert members is not None
    assert "dispatch" not in members.group(1)
    assert "admit" not in members.group(1)
    assert "ConnectionState\n   :members:\n   :undoc-members:" in text
    assert "ChannelState\n   :members:\n   :undoc-members:" in text
    assert ".. py:data:: amqp_sansio.FieldTable\n   :value: dict[str, FieldValue]\n" in text


def test_a_real_build_is_readable(tmp_path: Path) -> None:
    # docs/conf.py's settings on a page with the cases that went wrong.
    source = tmp_path / "src"
    source.mkdir()
    (source / "index.rst").write_text(
        "Reference\n=========\n\n"
        ".. autoclass:: amqp_broker.Broker\n   :members: add_vhost, connect\n\n"
        ".. autoclass:: amqp_sansio.Connection\n   :members: state, buffers_to_send\n\n"
        ".. autoclass:: amqp_sansio.ConnectionState\n   :members:\n   :undoc-members:\n\n"
        ".. autoclass:: amqp_trio.Channel\n   :members: queue_declare\n"
    )
    out = tmp_path / "html"
    done = subprocess.run(
        [
            sys.executable, "-m", "sphinx", "-q", "-b", "html",
            "-c", str(ROOT / "docs"), "-D", "html_theme=basic", str(source), str(out),
        ],
        capture_output=True, text=True, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    html = (out / "index.html").read_text()
    text = re.sub(r"<[^>]+>", "", html)
    assert 'id="amqp_broker.Broker.connect"' in html
    assert 'id="amqp_broker.Broker.admit"' not in html  # the member list is honoured
    assert 'id="amqp_sansio.ConnectionState.OPEN"' in html  # enum members are listed
    assert 'href="#amqp_sansio.ConnectionState"' in html  # Connection.state links home
    assert "_state" not in re.sub(r"\bchannel_state\b", "", text)
    assert "TypeAliasForwardRef" not in text
    assert "FieldTable | None" in text  # queue_declare's arguments, by the alias's name
    assert "Decimal" not in text.split("queue_declare", 1)[1]  # not the expanded union
    assert re.search(r"list\[(amqp_sansio\.)?Buffer\]", text)
