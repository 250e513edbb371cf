"""qpid-python's own 0-10 server delegate (``py2/qpid_server_0_10.py2``) as a peer for tests of
our 0-10 clients: :func:`qpid_server` starts it, yields its port and a function returning what
it logged once the client has gone."""

from __future__ import annotations

import json
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from tests.support.qpid import require_qpid, start_py2

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["Json", "qpid_server"]

Json: TypeAlias = bool | int | float | str | list["Json"] | dict[str, "Json"] | None

SCRIPT = Path(__file__).resolve().parent / "py2" / "qpid_server_0_10.py2"


@contextmanager
def qpid_server() -> Iterator[tuple[int, Callable[[], dict[str, Json]]]]:
    require_qpid()
    process = start_py2(SCRIPT)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("PORT "):
            process.kill()
            raise RuntimeError(f"qpid's server did not start: {line}{process.communicate()}")
        port = int(line.split()[1])
        found: list[dict[str, Json]] = []

        def log() -> dict[str, Json]:
            if not found:
                out, err = process.communicate(timeout=30)
                entry = next((x for x in out.splitlines() if x.startswith("LOG ")), None)
                assert entry is not None, f"qpid's server logged nothing:\n{out}\n{err}"
                found.append(json.loads(entry[4:]))
            return found[0]

        yield port, log
    finally:
        if process.poll() is None:
            try:
                process.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
