"""qpid-python 1.36 under Python 2.7, as an independent AMQP 0-10 peer and encoder.

qpid-python is Python 2 only (``../shared/notes/interop.md`` §11). It is installed with pyenv's
Python 2.7.18 into ``.cache/qpid27`` (gitignored) the first time a test or tool needs it, and
reused after that; the Python 2 scripts that drive it (``*.py2`` files: ruff and mypy read only
Python 3) run as subprocesses with ``PYTHONPATH`` pointing at the install.

* :func:`python27` finds the interpreter (``$PYTHON27``, pyenv's 2.7.18, ``python2.7`` on the
  PATH), or None.
* :func:`qpid_install` installs qpid-python, qpid-qmf and qpid-tools (the last two only so that
  ``qpid_tests`` imports) unless they are there, and returns the directory.
* :func:`require_qpid` is what tests call: it skips the test, saying why, only when no Python
  2.7 exists; a failed install is an error, never a skip.
* :func:`run_py2` and :func:`start_py2` run a Python 2 script with qpid importable.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
CACHE: Final = ROOT / ".cache" / "qpid27"
PACKAGES: Final = ("qpid-python", "qpid-qmf", "qpid-tools")
_MARKER: Final = CACHE / "qpid" / "ops.py"


class QpidUnavailable(RuntimeError):
    """Python 2.7 is not installed here (the only reason to skip a qpid test)."""


def python27() -> Path | None:
    """The Python 2.7 interpreter to run qpid-python with, or None."""
    candidates: list[str] = []
    if os.environ.get("PYTHON27"):
        candidates.append(os.environ["PYTHON27"])
    pyenv = shutil.which("pyenv")
    if pyenv is not None:
        root = subprocess.run(
            [pyenv, "root"], capture_output=True, text=True, check=False
        ).stdout.strip()
        if root:
            candidates.append(str(Path(root) / "versions" / "2.7.18" / "bin" / "python"))
    candidates.append(str(Path.home() / ".pyenv" / "versions" / "2.7.18" / "bin" / "python"))
    found = shutil.which("python2.7")
    if found is not None:
        candidates.append(found)
    for candidate in candidates:
        path = Path(candidate)
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


def qpid_install(python: Path | None = None) -> Path:
    """The directory holding qpid-python 1.36, installed into ``.cache/qpid27`` if needed.

    :raises QpidUnavailable: there is no Python 2.7.
    :raises RuntimeError: pip failed (network, index): an error, not a reason to skip.
    """
    python = python or python27()
    if python is None:
        raise QpidUnavailable(
            "Python 2.7 is not installed (pyenv install 2.7.18, or set PYTHON27): qpid-python "
            "1.36, the independent AMQP 0-10 peer, runs only under Python 2"
        )
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    with open(CACHE.parent / "qpid27.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one install even if several processes ask
        if not _MARKER.exists():
            pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
            done = subprocess.run(
                [*pip, "--no-deps", "--target", str(CACHE), *PACKAGES],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0 or not _MARKER.exists():
                raise RuntimeError(
                    f"installing {', '.join(PACKAGES)} with {python} into {CACHE} failed:\n"
                    f"{done.stdout}\n{done.stderr}"
                )
    return CACHE


def require_qpid() -> tuple[Path, Path]:
    """``(python27, qpid_dir)`` for a test; skips it only when Python 2.7 is absent."""
    import pytest

    python = python27()
    if python is None:
        pytest.skip(
            "qpid-python interop needs Python 2.7 (pyenv install 2.7.18, or set PYTHON27); "
            "it is not installed on this machine"
        )
    return python, qpid_install(python)


def py2_env(qpid_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = str(qpid_dir)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_py2(
    script: Path, *args: str, timeout: float = 60, input_text: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a Python 2 *script* with qpid importable; raises if it fails."""
    python, qpid_dir = python27(), qpid_install()
    assert python is not None
    done = subprocess.run(
        [str(python), str(script), *args],
        env=py2_env(qpid_dir),
        capture_output=True,
        text=True,
        timeout=timeout,
        input=input_text,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"{script.name} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        )
    return done


def start_py2(script: Path, *args: str, log: Path | None = None) -> subprocess.Popen[str]:
    """Start a Python 2 *script* with qpid importable; stdout and stderr are pipes, or both go
    to the file *log* (for a long run whose output could fill a pipe)."""
    python, qpid_dir = python27(), qpid_install()
    assert python is not None
    if log is not None:
        with open(log, "w") as out:  # the child keeps its own descriptor
            return subprocess.Popen(
                [str(python), str(script), *args],
                env=py2_env(qpid_dir),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )
    return subprocess.Popen(
        [str(python), str(script), *args],
        env=py2_env(qpid_dir),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
