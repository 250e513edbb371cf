"""The adapters' channel methods and 0-10 session methods, generated from the client layer's
requests tables by ``tools/gen_channels.py``: the checked-in modules are fresh, and every adapter
uses them as generated (the three cannot drift apart)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import pytest

import amqp_asyncio
import amqp_blocking
import amqp_trio
from amqp_sansio.client import REQUESTS, message_count
from amqp_sansio.v0_10.client import SESSION_REQUESTS

if TYPE_CHECKING:
    import types

ROOT = Path(__file__).resolve().parents[2]
ADAPTERS = [amqp_trio, amqp_asyncio, amqp_blocking]
GENERATED = "_generated_channel.py"
GENERATED_SESSION = "_generated_session.py"


def test_checked_in_modules_are_fresh() -> None:
    result = subprocess.run(
        [sys.executable, "tools/gen_channels.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_check_fails_on_a_stale_module(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "tools", tmp_path / "tools")
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    for adapter in ADAPTERS:
        (tmp_path / "src" / adapter.__name__).mkdir(parents=True)
        for name in (GENERATED, GENERATED_SESSION):
            shutil.copy(ROOT / "src" / adapter.__name__ / name, tmp_path / "src" / adapter.__name__)
    stale = tmp_path / "src" / "amqp_asyncio" / GENERATED
    stale.write_text(stale.read_text().replace('"""Delete an exchange."""', '"""Delete it."""'))
    result = subprocess.run(
        [sys.executable, "tools/gen_channels.py", "--check"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "stale" in result.stdout
    assert f"src/amqp_asyncio/{GENERATED}" in result.stdout
    assert f"src/amqp_trio/{GENERATED}" not in result.stdout
    assert GENERATED_SESSION not in result.stdout


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda m: m.__name__)
def test_channels_use_the_generated_methods(adapter: types.ModuleType) -> None:
    generated = importlib.import_module(f"{adapter.__name__}._generated_channel").ChannelMethods
    assert issubclass(adapter.Channel, generated)
    for request in REQUESTS:
        method = getattr(adapter.Channel, request.name)
        assert method is getattr(generated, request.name), f"{request.name} is overridden"
        assert inspect.getdoc(method) == request.doc_for(adapter.__name__)
        assert inspect.iscoroutinefunction(method) is (adapter is not amqp_blocking)
        names = list(inspect.signature(method).parameters)[1:]
        expected = [param.name for param in request.params]
        if adapter is amqp_blocking and request.expects_reply:
            expected.append("timeout")
        assert names == expected, request.name


def _generator() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("gen_channels", ROOT / "tools/gen_channels.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_request_without_a_reply_in_some_version_does_not_wait_there() -> None:
    """0-9's basic.recover has no recover-ok: the generated method asks the connection's
    version before waiting, and a request that would have to return a reply's value there is
    refused by the generator."""
    generator = _generator()
    recover = next(r for r in REQUESTS if r.name == "basic_recover")
    for adapter in generator.ADAPTERS:
        source = "\n".join(generator.method_source(adapter, recover))
        assert "if not self._has_reply(request):  # none in AMQP 0-9" in source
        assert "self._send_no_reply(request)" in source
    declare = next(r for r in REQUESTS if r.name == "queue_declare")
    assert "_has_reply" not in "\n".join(generator.method_source(generator.ADAPTERS[0], declare))
    returning = attrs.evolve(recover, returns="int", reader=message_count)
    with pytest.raises(SystemExit, match="AMQP 0-9 gives it no reply, so it can return nothing"):
        generator.check(returning)


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda m: m.__name__)
def test_0_10_sessions_use_the_generated_methods(adapter: types.ModuleType) -> None:
    generated = importlib.import_module(f"{adapter.__name__}._generated_session").SessionMethods
    session = importlib.import_module(f"{adapter.__name__}._v0_10").Session010
    assert issubclass(session, generated)
    for request in SESSION_REQUESTS:
        method = getattr(session, request.name)
        assert method is getattr(generated, request.name), f"{request.name} is overridden"
        assert inspect.getdoc(method) == request.doc
        assert inspect.iscoroutinefunction(method) is (adapter is not amqp_blocking)
        names = list(inspect.signature(method).parameters)[1:]
        assert names == [param.name for param in request.params], request.name
