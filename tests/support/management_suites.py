"""Two third-party suites that need RabbitMQ's management HTTP API, run unchanged in
subprocesses (so our pytest configuration and warning filters do not apply to them):

* amqpstorm 3.1.4's management tests (``amqpstorm/tests/functional/management``): its wheel
  ships them, so the pinned test dependency (pyproject's ``test`` group) is all it takes; they
  run with ``--pyargs`` under this interpreter. They find the broker in ``AMQP_HOST`` (AMQP on
  that host's port 5672: ``Connection(HOST, ...)`` passes no port), ``AMQP_HTTP_URL``,
  ``AMQP_USERNAME`` and ``AMQP_PASSWORD``.
* aioamqp 0.15.0's suite (``aioamqp/tests``): its sdist and wheel leave the tests out, so the
  release's source tarball (the project's tag tarball, which Debian's archive keeps as
  ``python-aioamqp_0.15.0.orig.tar.gz``) is fetched with apt's own downloader, checked against
  its pinned SHA-256 and unpacked into ``.cache/aioamqp-0.15.0`` (gitignored) the first time;
  nothing of theirs is checked in. Its test case needs asynctest, which Python 3.11 cannot
  import, so it runs under Python 3.10 (pyenv's) in a venv of its own,
  ``.cache/aioamqp-0.15.0-venv``, with :data:`AIOAMQP_REQUIREMENTS`. It finds AMQP in
  ``AMQP_HOST``/``AMQP_PORT`` and the management API at ``AMQP_HOST:15672`` (hard-coded, as
  guest/guest, through pyrabbit2), and waits ``AMQP_REFRESH_TIME`` seconds (default 6) before
  reading queues from the API.

Both hard-code a port (5672, 15672), so each broker gets a loopback address of its own
(:func:`loopback_address`, in 127.0.0.0/8) where it listens on those ports: the shared node at
127.0.0.1:5672 is never touched.
"""

from __future__ import annotations

import fcntl
import os
import random
import shutil
import socket
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
CACHE_ROOT: Final = ROOT / ".cache"

AMQPSTORM_VERSION: Final = "3.1.4"
AMQPSTORM_CACHE: Final = CACHE_ROOT / f"amqpstorm-{AMQPSTORM_VERSION}"
#: amqpstorm's test that connects to 192.168.1.50 (to see a connection fail): never run here,
#: where nothing but loopback addresses may be the target of a test.
AMQPSTORM_DESELECTED: Final = "not test_api_with_inaccessible"

AIOAMQP_VERSION: Final = "0.15.0"
AIOAMQP_CACHE: Final = CACHE_ROOT / f"aioamqp-{AIOAMQP_VERSION}"
AIOAMQP_VENV: Final = CACHE_ROOT / f"aioamqp-{AIOAMQP_VERSION}-venv"
#: The source tarball in Debian's pool (the path under the archive's root) and its SHA-256 (as
#: the .dsc of python-aioamqp 0.15.0-2 lists it).
_AIOAMQP_POOL: Final = "pool/main/p/python-aioamqp/python-aioamqp_0.15.0.orig.tar.gz"
_AIOAMQP_SHA256: Final = "4d30fe210c742496b5b78de0337f49524571240701eb6c2dc348b1b9d8f819a9"
#: What aioamqp's requirements_dev.txt asks for the tests, pinned (pamqp: 0.15.0's range).
AIOAMQP_REQUIREMENTS: Final = (
    "pytest==8.4.2",
    "asynctest==0.13.0",
    "pyrabbit2==1.0.7",
    "requests==2.32.5",
    "pamqp==3.3.0",
)
_AIOAMQP_PYTHON: Final = "3.10"
_APT_HELPER: Final = "/usr/lib/apt/apt-helper"


def loopback_address() -> str:
    """A 127.x.y.z address where nothing listens on 5672 or 15672 yet."""
    while True:
        address = f"127.{random.randint(34, 250)}.{random.randint(0, 255)}.{random.randint(2, 254)}"
        try:
            for port in (5672, 15672):
                with socket.socket() as sock:
                    sock.bind((address, port))
        except OSError:
            continue
        return address


def _debian_archive() -> str:
    """The Debian archive this machine's apt uses (its sources, not a host of ours)."""
    for path in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for line in path.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "URIs" and "debian" in value and "security" not in value:
                return value.split()[0].rstrip("/")
    raise RuntimeError("no Debian archive in /etc/apt/sources.list.d/*.sources")


def aioamqp_suite() -> Path:
    """``.cache/aioamqp-0.15.0`` (the release's source tree, tests included), fetched if needed.

    :raises RuntimeError: the download failed or did not match its SHA-256.
    """
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    with open(CACHE_ROOT / f"aioamqp-{AIOAMQP_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one download even if several workers ask
        if not (AIOAMQP_CACHE / "aioamqp" / "tests" / "testcase.py").exists():
            archive = CACHE_ROOT / f"aioamqp-{AIOAMQP_VERSION}.orig.tar.gz"
            done = subprocess.run(
                [
                    _APT_HELPER,
                    "download-file",
                    f"{_debian_archive()}/{_AIOAMQP_POOL}",
                    str(archive),
                    f"SHA256:{_AIOAMQP_SHA256}",
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0 or not archive.exists():
                raise RuntimeError(f"fetching aioamqp {AIOAMQP_VERSION} failed:\n{done.stderr}")
            with tarfile.open(archive) as tar:
                members = tar.getmembers()
                for member in members:
                    member.name = member.name.partition("/")[2]
                tar.extractall(AIOAMQP_CACHE, members=[m for m in members if m.name], filter="data")
            archive.unlink()
    return AIOAMQP_CACHE


def _python310() -> Path:
    candidates = [
        Path.home() / ".pyenv" / "versions" / f"{_AIOAMQP_PYTHON}.13" / "bin" / "python3",
        *sorted((Path.home() / ".pyenv" / "versions").glob(f"{_AIOAMQP_PYTHON}.*/bin/python3")),
    ]
    found = shutil.which(f"python{_AIOAMQP_PYTHON}")
    if found is not None:
        candidates.append(Path(found))
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise RuntimeError(f"aioamqp's suite needs Python {_AIOAMQP_PYTHON} (pyenv install 3.10)")


def aioamqp_python() -> Path:
    """The Python 3.10 of ``.cache/aioamqp-0.15.0-venv``, made with its requirements if
    needed."""
    python = AIOAMQP_VENV / "bin" / "python"
    marker = AIOAMQP_VENV / ".installed"
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    with open(CACHE_ROOT / f"aioamqp-{AIOAMQP_VERSION}-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        installed = marker.read_text() if marker.exists() else ""
        if installed != "\n".join(AIOAMQP_REQUIREMENTS):
            shutil.rmtree(AIOAMQP_VENV, ignore_errors=True)
            subprocess.run([str(_python310()), "-m", "venv", str(AIOAMQP_VENV)], check=True)
            done = subprocess.run(
                [
                    *(str(python), "-m", "pip", "install", "--quiet"),
                    *("--disable-pip-version-check", *AIOAMQP_REQUIREMENTS),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise RuntimeError(f"installing aioamqp's test requirements failed:\n{done}")
            marker.write_text("\n".join(AIOAMQP_REQUIREMENTS))
    return python


def amqpstorm_path() -> str | None:
    """Where amqpstorm 3.1.4 is imported from: None when this interpreter has it (the test
    group installs it), else ``.cache/amqpstorm-3.1.4``, pip-installed there (without its
    dependencies: pamqp and requests come with the test group) if needed, for a venv synced
    before the pin."""
    try:
        import amqpstorm
    except ImportError:
        pass
    else:
        if amqpstorm.__version__ != AMQPSTORM_VERSION:
            raise RuntimeError(f"amqpstorm {amqpstorm.__version__} is installed, not the pin")
        return None
    target = AMQPSTORM_CACHE
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    with open(CACHE_ROOT / f"amqpstorm-{AMQPSTORM_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "amqpstorm" / "tests" / "functional" / "management").is_dir():
            shutil.rmtree(target, ignore_errors=True)
            done = subprocess.run(
                [
                    *(sys.executable, "-m", "pip", "install", "--quiet"),
                    *("--disable-pip-version-check", "--no-deps", "--target", str(target)),
                    f"amqpstorm=={AMQPSTORM_VERSION}",
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise RuntimeError(f"installing amqpstorm {AMQPSTORM_VERSION} failed:\n{done}")
    return str(target)


def amqpstorm_command(address: str, junit: Path) -> tuple[list[str], dict[str, str]]:
    """The command and environment running amqpstorm's management tests against the broker
    at *address* (AMQP on 5672, the API on 15672, guest/guest)."""
    path = amqpstorm_path()
    env = {
        **os.environ,
        "AMQP_HOST": address,
        "AMQP_USERNAME": "guest",
        "AMQP_PASSWORD": "guest",
        "AMQP_URI": f"amqp://guest:guest@{address}:5672/%2F",
        "AMQP_HTTP_URL": f"http://{address}:15672",
    }
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (path, env.get("PYTHONPATH")) if p)
    command = [
        *(sys.executable, "-m", "pytest", "-c", os.devnull, "--rootdir", str(junit.parent)),
        *("-p", "no:cacheprovider", "-p", "no:pytest_amqp_sansio", "-q"),
        *("--junitxml", str(junit), "-k", AMQPSTORM_DESELECTED),
        *("--pyargs", "amqpstorm.tests.functional.management"),
    ]
    return command, env


def aioamqp_command(address: str, refresh: int, junit: Path) -> tuple[list[str], dict[str, str]]:
    """The command (run in :func:`aioamqp_suite`'s directory) and environment running aioamqp's
    suite against the broker at *address*, waiting *refresh* seconds for the API's queue
    statistics."""
    env = {
        **os.environ,
        "AMQP_HOST": address,
        "AMQP_PORT": "5672",
        "AMQP_REFRESH_TIME": str(refresh),
    }
    env.pop("PYTHONPATH", None)
    command = [
        *(str(aioamqp_python()), "-m", "pytest", "-c", os.devnull, "--rootdir", "."),
        *("-p", "no:cacheprovider", "-q", "--junitxml", str(junit), "aioamqp/tests"),
    ]
    return command, env


def outcomes(junit: Path) -> dict[str, str]:
    """``"<module>::<Class>::<test>"`` -> passed, failed or skipped, from a JUnit XML report."""
    found: dict[str, str] = {}
    for case in ET.parse(junit).iter("testcase"):
        module = case.get("classname", "").rsplit(".", 1)
        key = f"{module[0].rsplit('.', 1)[-1]}::{module[-1]}::{case.get('name')}"
        tags = {child.tag for child in case}
        found[key] = (
            "failed"
            if tags & {"failure", "error"}
            else "skipped"
            if "skipped" in tags
            else "passed"
        )
    return found
