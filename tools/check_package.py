"""Check the packaging (``make package-check``): build the sdist once, build a wheel from it on
each interpreter, install each wheel into a fresh virtual environment and smoke-test it there
with the C speedups and with ``AMQP_SANSIO_NO_EXTENSIONS`` set; then install the sdist with the
compiler made unavailable (``CC``, which ``hatch_build.py`` honours) and check that the pure
Python fallback works.

Each interpreter is given by an environment that already has the project's dependencies and the
``package`` group (``.venv``, ``.venv-3.12``, ``.venv-3.13``): it builds with its own hatchling
(no build isolation, nothing fetched), and the fresh environment borrows its site-packages
through a ``.pth`` file, so the project itself is installed with ``--no-deps``. The installed
copy must shadow the environment's editable install: the smoke test checks where each package
was imported from.

Usage: ``python tools/check_package.py ENV [ENV ...]`` (the first one builds the sdist).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parent.parent
WORK: Final = ROOT / "build" / "package-check"
SMOKE: Final = ROOT / "tools" / "package_smoke.py"


def run(*command: str | Path, env: dict[str, str] | None = None, cwd: Path = WORK) -> str:
    result = subprocess.run(
        [str(part) for part in command],
        capture_output=True,
        text=True,
        env=None if env is None else {**os.environ, **env},
        cwd=cwd,
        check=False,
    )
    if result.returncode:
        sys.exit(
            f"package-check: {' '.join(map(str, command))} failed ({result.returncode}):\n"
            f"{result.stdout}{result.stderr}"
        )
    return result.stdout + result.stderr


def interpreter(env: Path) -> tuple[Path, str, Path]:
    """The environment's python, its X.Y version, and its site-packages."""
    python = env.resolve() / "bin" / "python"
    out = run(
        python,
        "-c",
        "import sys, sysconfig; print(f'{sys.version_info[0]}.{sys.version_info[1]}'); "
        "print(sysconfig.get_path('purelib'))",
    )
    version, site = out.split()
    return python, version, Path(site)


def fresh_venv(python: Path, name: str, site: Path) -> Path:
    """A new virtual environment that sees *site* (the deps) after its own site-packages."""
    venv = WORK / name
    run(python, "-m", "venv", "--without-pip", venv)
    own = Path(
        run(
            venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"
        ).strip()
    )
    (own / "_package_check_deps.pth").write_text(f"{site}\n")
    return venv / "bin" / "python"


def install(python: Path, pip_python: Path, target: Path, env: dict[str, str] | None = None) -> str:
    return run(
        pip_python, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps",
        "--no-index", "--no-build-isolation", target, env=env,
    )  # fmt: skip


def smoke(python: Path, *, speedups: str, env: dict[str, str] | None = None) -> str:
    return run(python, "-I", SMOKE, "--speedups", speedups, env=env).strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("envs", nargs="+", type=Path, help="virtual environments to check with")
    args = parser.parse_args()
    started = time.monotonic()
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)

    def step(text: str) -> None:
        print(f"[{time.monotonic() - started:5.1f} s] {text}", flush=True)

    builder, _, _ = interpreter(args.envs[0])
    run(builder, "-m", "build", "--sdist", "--no-isolation", "--outdir", WORK / "dist", ROOT)
    (sdist,) = (WORK / "dist").glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = archive.getnames()
    strays = [n for n in names if n.endswith(".so") or "__pycache__" in n]
    if strays:
        sys.exit(f"package-check: the sdist holds build products: {strays[:5]}")
    step(f"sdist {sdist.name}: {len(names)} files")

    for env in args.envs:
        python, version, site = interpreter(env)
        source = WORK / f"src-{version}"
        with tarfile.open(sdist) as archive:
            archive.extractall(source, filter="data")
        (tree,) = source.iterdir()
        run(python, "-m", "build", "--wheel", "--no-isolation", "--outdir", WORK / "wheels", tree)
        tag = f"cp{version.replace('.', '')}"
        (wheel,) = (WORK / "wheels").glob(f"*-{tag}-{tag}-*.whl")
        fresh = fresh_venv(python, f"venv-{version}", site)
        install(fresh, python, wheel)
        step(f"Python {version}: {wheel.name} built from the sdist and installed")
        step(f"  {smoke(fresh, speedups='yes')}")
        step(f"  {smoke(fresh, speedups='off', env={'AMQP_SANSIO_NO_EXTENSIONS': '1'})}")

    # The sdist alone, with no compiler: hatch_build.py warns and builds a pure wheel.
    python, version, site = interpreter(args.envs[0])
    fresh = fresh_venv(python, f"venv-{version}-sdist", site)
    install(fresh, python, sdist, env={"CC": "/nonexistent/cc", "LDSHARED": ""})
    step(f"Python {version}: the sdist installed with the compiler unavailable (CC)")
    step(f"  {smoke(fresh, speedups='absent')}")
    step("package-check passed")


if __name__ == "__main__":
    main()
