"""kombu 5.7.0's own integration tests (``t/integration/`` of its sdist), which its wheel does
not ship: the sdist is fetched from the package index into ``.cache/kombu-5.7.0`` (gitignored)
the first time a test needs it, as ``tests/support/qpid.py`` installs qpid-python, and reused
after that. Nothing of kombu's is checked in.

:func:`integration_common` loads ``t/integration/common.py``, the shared test classes kombu's
transport modules (``test_py_amqp.py``, ...) subclass, as a module of its own.
"""

from __future__ import annotations

import fcntl
import importlib.util
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING, Final

import kombu

if TYPE_CHECKING:
    from types import ModuleType

ROOT: Final = Path(__file__).resolve().parents[2]
VERSION: Final = "5.7.0"
CACHE: Final = ROOT / ".cache" / f"kombu-{VERSION}"
_COMMON: Final = CACHE / "t" / "integration" / "common.py"


def suite_dir() -> Path:
    """The directory holding kombu's ``t/integration``, fetched and unpacked if needed.

    :raises RuntimeError: the index did not give the sdist (an error, never a skip).
    """
    if kombu.__version__ != VERSION:
        raise RuntimeError(
            f"kombu {kombu.__version__} is installed; the suite is {VERSION}'s (pyproject pins it)"
        )
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    with open(CACHE.parent / f"kombu-{VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one download even if several workers ask
        if not _COMMON.exists():
            download = CACHE.parent / f"kombu-{VERSION}-sdist"
            done = subprocess.run(
                [
                    *(sys.executable, "-m", "pip", "download", "--quiet"),
                    *("--no-deps", "--no-binary", ":all:", "--disable-pip-version-check"),
                    *("-d", str(download), f"kombu=={VERSION}"),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            archive = download / f"kombu-{VERSION}.tar.gz"
            if done.returncode != 0 or not archive.exists():
                raise RuntimeError(
                    f"downloading kombu {VERSION}'s sdist failed:\n{done.stdout}\n{done.stderr}"
                )
            prefix = f"kombu-{VERSION}/t/"
            with tarfile.open(archive) as tar:
                members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
                for member in members:
                    member.name = member.name.removeprefix(f"kombu-{VERSION}/")
                tar.extractall(CACHE, members=members, filter="data")
    return CACHE


def integration_common() -> ModuleType:
    """kombu's ``t/integration/common.py``, imported as ``kombu_integration_common``."""
    name = "kombu_integration_common"
    if name in sys.modules:
        return sys.modules[name]
    path = suite_dir() / "t" / "integration" / "common.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
