#!/usr/bin/env python3
"""Write the AMQP 0-10 codec vectors made by qpid-python 1.36 (``tests/fixtures/v0_10``).

qpid-python runs only under Python 2.7: this installs it into ``.cache/qpid27`` when needed
(``tests/support/qpid.py``), runs ``tools/qpid_vectors_0_10.py2`` with it, and stores its JSON
output in ``tests/fixtures/v0_10/qpid_vectors.json``, which
``tests/amqp_sansio/v0_10/test_qpid_vectors.py`` decodes and re-encodes.

``python tools/qpid_vectors_0_10.py`` rewrites the fixture; ``--check`` exits 1 when a fresh run
would write something else.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.qpid import run_py2  # noqa: E402

SCRIPT = ROOT / "tools" / "qpid_vectors_0_10.py2"
FIXTURE = ROOT / "tests" / "fixtures" / "v0_10" / "qpid_vectors.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 if the fixture is stale")
    args = parser.parse_args(argv)
    output = run_py2(SCRIPT).stdout
    if args.check:
        if not FIXTURE.exists() or FIXTURE.read_text() != output:
            print(f"{FIXTURE.relative_to(ROOT)} is stale; run tools/qpid_vectors_0_10.py")
            return 1
        return 0
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(output)
    print(f"wrote {FIXTURE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
