"""``make demo`` installs only what the demo runs; ``make test`` keeps the full set; the README
says what each needs and how long it takes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from tests.support import ROOT


def _dry_run(target: str, *variables: str) -> list[str]:
    """The commands *target* runs from scratch (``make -n -B``: print, run nothing)."""
    make = shutil.which("make")
    assert make is not None, "make is needed to run make's own targets"
    # Run from make test, this make inherits MAKELEVEL and MAKEFLAGS: it would print
    # "Entering directory" lines and honour the outer run's flags.
    env = {k: v for k, v in os.environ.items() if k not in {"MAKELEVEL", "MAKEFLAGS", "MFLAGS"}}
    done = subprocess.run(
        [make, "--no-print-directory", "-n", "-B", target, *variables],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return done.stdout.splitlines()


def _installs(commands: list[str]) -> list[str]:
    return [c for c in commands if "pip install" in c and "--upgrade pip" not in c]


def test_make_demo_installs_the_trio_extra_only_into_a_venv_of_its_own() -> None:
    commands = _dry_run("demo")
    [install] = _installs(commands)
    assert install.startswith(".venv-demo/bin/python -m pip install")
    assert install.endswith("-e '.[trio]'")  # no spark, no tools, no --group
    assert commands[-1] == ".venv-demo/bin/python examples/demo.py"
    assert not any(c.startswith(".venv/") for c in commands)  # the full venv is not built


def test_make_demo_protocol_runs_the_demo_over_that_version() -> None:
    commands = _dry_run("demo", "PROTOCOL=0-10")
    assert commands[-1] == ".venv-demo/bin/python examples/demo.py --protocol 0-10"


def test_make_test_keeps_the_full_set() -> None:
    installs = _installs(_dry_run("pytest"))
    assert (
        ".venv/bin/python -m pip install --quiet -e '.[trio,spark,tools]' --group dev" in installs
    )


def test_the_demo_imports_nothing_beyond_the_trio_extra() -> None:
    source = (ROOT / "examples" / "demo.py").read_text()
    imported = set(re.findall(r"^\s*(?:from|import) (\w+)", source, flags=re.MULTILINE))
    third_party = imported - {"__future__", "argparse", "os", "sys", "time", "uuid", "typing"}
    assert third_party <= {"trio", "amqp_trio", "amqp_broker"}, third_party


def test_the_readme_says_what_each_command_needs_and_how_long_it_takes() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    for needed in ("Python 3.11", "`make`", "Java", "Node"):
        assert needed in section, needed
    assert re.search(r"^\| `make demo` \|.*\| about \d+ seconds", section, re.MULTILINE), section
    assert "about 15-20 minutes" in section
