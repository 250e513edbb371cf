"""Running the console scripts as a user would: the programs pip installed next to the
interpreter running the tests, in a subprocess, output captured."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Final

#: Generous: the commands answer within a second or two; this only stops a hung one.
TIMEOUT: Final = 120.0

_FRAME_LINE: Final = re.compile(r"^\S+\s+\S*\s+\[\d+\] (C>S|S>C) (.*)$")


def script(name: str) -> str:
    """The path of the console script *name* of this environment."""
    path = Path(sys.executable).parent / name
    assert path.exists(), f"{path} is missing: reinstall the project (make .venv/.installed)"
    return str(path)


def run_tool(
    name: str, *args: str, stdin: bytes | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run console script *name*; text output, never raising on a non-zero exit."""
    return subprocess.run(
        [script(name), *args],
        input=None if stdin is None else stdin.decode(),
        stdin=subprocess.DEVNULL if stdin is None else None,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=cwd,
        check=False,
    )


def frame_lines(output: str) -> list[str]:
    """The decoded frames of an amqp-decode output, without packet numbers and times:
    ``C>S ch1 basic.publish ...``."""
    lines = []
    for line in output.splitlines():
        found = _FRAME_LINE.match(line)
        if found:
            lines.append(f"{found[1]} {found[2]}")
    return lines


def assert_no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr, result.stderr
    assert "Traceback" not in result.stdout, result.stdout
