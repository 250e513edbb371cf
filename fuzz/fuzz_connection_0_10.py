"""Fuzz the AMQP 0-10 core (``amqp_sansio.v0_10``) for as long as you like.

    python fuzz/fuzz_connection_0_10.py --seconds 600 --role both

The engine is ``tests/amqp_sansio/v0_10/fuzzing.py``, which ``tests/amqp_sansio/v0_10/test_fuzz.py``
runs with a fixed budget: a recorded conversation between our own client and server cores (each
role gets what its peer sent), mutated (bits flipped, octets replaced by frame flags and segment
types, inserted, deleted, duplicated, size fields set to extremes, streams cut), and random
octets, half of them after a valid protocol header. Each input is fed whole or in random
pieces, with or without an end of stream. The property: only events or ``RemoteProtocolError``
(501 or 320, the ``connection.close`` written last, sticky), never more than a frame held
unparsed. A failing input is saved to ``fuzz/crashes/`` as JSON that ``--replay`` runs again.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import random
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from tests.amqp_sansio.v0_10.fuzzing import (  # noqa: E402
    corpus,
    mutate,
    random_input,
    replay,
)

from amqp_sansio.v0_10 import Role  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Sequence

CRASHES = Path(__file__).resolve().parent / "crashes"


def one(
    seed: int, roles: Sequence[Role], base: list[tuple[Role, bytes]]
) -> tuple[Role, bytes, int | None, bool]:
    """The input of a seed: role, octets, the seed of its pieces (None: whole), end of stream."""
    rng = random.Random(seed)
    if rng.random() < 0.3:
        role, data = random_input(rng)
        while role not in roles:
            role, data = random_input(rng)
    else:
        role, data = rng.choice([item for item in base if item[0] in roles])
        data = mutate(data, rng)
    pieces = rng.randrange(2**32) if rng.random() < 0.5 else None
    return role, data, pieces, rng.random() < 0.3


def run(role: Role, data: bytes, pieces: int | None, eof: bool) -> str:
    outcome = replay(role, data, None if pieces is None else random.Random(pieces), eof=eof)
    return "events" if outcome.error is None else str(outcome.error.reply_code)


def save(role: Role, data: bytes, pieces: int | None, eof: bool, error: BaseException) -> Path:
    text = json.dumps(
        {
            "role": role.value,
            "data": data.hex(),
            "pieces": pieces,
            "eof": eof,
            "error": "".join(traceback.format_exception(error)),
        },
        indent=1,
    )
    CRASHES.mkdir(exist_ok=True)
    name = f"v0_10-{role.value}-{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
    path = CRASHES / name
    path.write_text(text)
    return path


def fuzz(seconds: float, roles: Sequence[Role]) -> int:
    base = corpus()
    outcomes: collections.Counter[str] = collections.Counter()
    crashes = 0
    start = report = time.monotonic()
    seed = random.randrange(2**32)
    while time.monotonic() - start < seconds:
        seed += 1
        role, data, pieces, eof = one(seed, roles, base)
        try:
            outcomes[run(role, data, pieces, eof)] += 1
        except Exception as error:
            crashes += 1
            path = save(role, data, pieces, eof, error)
            print(f"CRASH {type(error).__name__}: {error} -> {path}", flush=True)
        now = time.monotonic()
        if now - report >= 5 or now - start >= seconds:
            report = now
            total = sum(outcomes.values())
            codes = ", ".join(f"{code}: {n}" for code, n in outcomes.most_common())
            print(
                f"{now - start:7.1f}s {total} inputs ({total / (now - start):.0f}/s), "
                f"{crashes} crashes; outcomes {codes}",
                flush=True,
            )
    return 1 if crashes else 0


def replay_file(path: Path) -> int:
    saved = json.loads(path.read_text())
    role = Role(saved["role"])
    print(f"replaying {path}: {role.value}, {len(saved['data']) // 2} octets")
    print(run(role, bytes.fromhex(saved["data"]), saved["pieces"], saved["eof"]))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to run")
    parser.add_argument("--role", choices=["client", "server", "both"], default="both")
    parser.add_argument("--replay", type=Path, help="run one saved crash again and exit")
    args = parser.parse_args(argv)
    if args.replay is not None:
        return replay_file(args.replay)
    roles = [Role.CLIENT, Role.SERVER] if args.role == "both" else [Role(args.role)]
    return fuzz(args.seconds, roles)


if __name__ == "__main__":
    sys.exit(main())
