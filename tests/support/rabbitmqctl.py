"""``rabbitmqctl`` for the tests and ``bench/recovery.py``: run it, and find a connection by the
name its client gave it (to close it with ``close_connection``)."""

from __future__ import annotations

import subprocess
from typing import Final

_CTL_TIMEOUT: Final = 60.0


def rabbitmqctl(*args: str) -> str:
    """Run ``rabbitmqctl`` (about a second per call: it starts an Erlang VM)."""
    done = subprocess.run(
        ["rabbitmqctl", *args], capture_output=True, text=True, timeout=_CTL_TIMEOUT, check=True
    )
    return done.stdout


def connection_pid(connection_name: str) -> str:
    """The broker's pid for the connection whose client properties carry this name."""
    for line in rabbitmqctl("list_connections", "pid", "client_properties").splitlines():
        if f'"{connection_name}"' in line:
            return line.split("\t", 1)[0]
    raise AssertionError(f"no connection named {connection_name!r} on the broker")
