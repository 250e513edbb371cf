"""``rabbitmqctl`` for the tests and ``bench/recovery.py``: run it, find a connection by the
name its client gave it, and close a connection by that name."""

from __future__ import annotations

import re
import subprocess
from typing import Final

_CTL_TIMEOUT: Final = 60.0
# Names the tests give their connections; checked before one is spliced into Erlang source.
_NAME: Final = re.compile(r"[A-Za-z0-9._: -]+")


def rabbitmqctl(*args: str) -> str:
    """Run ``rabbitmqctl`` (about a second per call: it starts an Erlang VM)."""
    done = subprocess.run(
        ["rabbitmqctl", *args], capture_output=True, text=True, timeout=_CTL_TIMEOUT, check=True
    )
    return done.stdout


def close_connection_named(connection_name: str, reason: str = "test") -> None:
    """``close_connection`` (320 CONNECTION_FORCED, *reason* as its text) on the connection
    whose client properties carry this name: one ``rabbitmqctl eval``, one Erlang VM start
    (about a second of CPU), where listing connections and then closing one took two."""
    if not _NAME.fullmatch(connection_name) or not _NAME.fullmatch(reason):
        raise ValueError(f"a name or reason to splice into Erlang: {connection_name!r} {reason!r}")
    found = rabbitmqctl(
        "eval",
        f'[rabbit_networking:close_connection(Pid, "{reason}") '
        "|| Pid <- rabbit_networking:connections(), "
        "{client_properties, Props} <- rabbit_networking:connection_info(Pid, "
        "[client_properties]), "
        f'lists:member({{<<"connection_name">>, longstr, <<"{connection_name}">>}}, Props)].',
    )
    if found.strip() != "[ok]":
        raise AssertionError(f"no connection named {connection_name!r} closed: {found.strip()}")
