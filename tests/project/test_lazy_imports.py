"""Importing an adapter loads what a 0-9-1 client needs and nothing else: 0-10's and 0-8/0-9's
generated tables load when a connection (or a name) asks for them, and ``amqp-publish
--help`` imports no client at all. Checked by the modules a fresh interpreter holds, not by
time."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

_HEAVY = (
    "amqp_sansio.v0_10._generated.spec_0_10",
    "amqp_sansio._generated.spec_0_9",
    "amqp_sansio._generated.spec_0_8",
)


def loaded_after(code: str) -> set[str]:
    """The modules loaded after running *code* in a fresh interpreter."""
    script = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


@pytest.mark.parametrize("adapter", ["amqp_blocking", "amqp_trio", "amqp_asyncio"])
def test_an_adapter_loads_only_0_9_1s_tables(adapter: str) -> None:
    modules = loaded_after(f"import {adapter}")
    assert "amqp_sansio._generated.spec_0_9_1" in modules
    assert not modules & set(_HEAVY)
    assert "importlib.metadata" not in modules  # the version is read at the first handshake


def test_0_10_and_0_8_load_when_asked_for() -> None:
    modules = loaded_after(
        "import amqp_blocking, amqp_sansio\n"
        "amqp_blocking.Connection010\n"  # a 0-10 name: its half of the adapter loads
        "amqp_sansio.AMQP_0_8.methods"  # a 0-8 table
    )
    assert {_HEAVY[0], _HEAVY[2]} <= modules
    assert _HEAVY[1] not in modules  # 0-9's was never asked for


def test_amqp_publish_help_imports_no_client() -> None:
    modules = loaded_after(
        "import contextlib, io\n"
        "sys.argv = ['amqp-publish', '--help']\n"
        "from amqp_tools import publish_main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    publish_main()"
    )
    assert "amqp_blocking" not in modules
    assert "amqp_sansio" not in modules
