"""Fuzz the amqp_sansio core for as long as you like, with hypothesis driving the inputs.

    python fuzz/fuzz_connection.py --seconds 600 --role both
    python fuzz/fuzz_connection.py --replay fuzz/crashes/<file>.json

Inputs are the ones ``tests/amqp_sansio/test_fuzz.py`` uses with a fixed budget: recorded RabbitMQ
conversations and conversations between our own cores, mutated (``tests/support/fuzzing.py``), and
random octets; each is fed whole or in random pieces, with or without an end of stream. The
property is the same: only events or ``RemoteProtocolError``, failures sticky with the close
written last, never more than a frame held unparsed. An input that breaks it is shrunk by
hypothesis and saved to ``fuzz/crashes/`` (gitignored) as JSON that ``--replay`` runs again.
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

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from tests.support.fuzzing import (  # noqa: E402
    Act,
    Receive,
    Session,
    Step,
    corpus,
    mutate_session,
    run_session,
)

from amqp_sansio import Role  # noqa: E402
from amqp_sansio.framing import PROTOCOL_HEADER_0_9_1  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Sequence

CRASHES = Path(__file__).resolve().parent / "crashes"
#: Examples per hypothesis run; progress is printed between runs.
BATCH = 200


class Case:
    """One input: a session, how it is cut into pieces, whether the stream ends."""

    def __init__(self, session: Session, base: Session | None, pieces: int | None, eof: bool):
        self.session = session
        self.base = base
        self.pieces = pieces
        self.eof = eof

    def run(self) -> str:
        rng = None if self.pieces is None else random.Random(self.pieces)
        outcome = run_session(self.session, rng, eof=self.eof)
        return "events" if outcome.error is None else str(outcome.error.reply_code)

    def to_json(self, error: str) -> str:
        steps: list[dict[str, object]] = []
        for step in self.session.steps:
            if isinstance(step, Receive):
                steps.append({"receive": step.data.hex()})
            else:
                assert self.base is not None
                steps.append({"act": self.base.steps.index(step), "name": step.name})
        return json.dumps(
            {
                "role": self.session.role.value,
                "base": None if self.base is None else self.base.name,
                "steps": steps,
                "pieces": self.pieces,
                "eof": self.eof,
                "error": error,
            },
            indent=1,
        )


def case_from_json(text: str, sessions: Sequence[Session]) -> Case:
    saved = json.loads(text)
    role = Role(saved["role"])
    base = next((s for s in sessions if s.name == saved["base"]), None)
    steps: list[Step] = []
    for entry in saved["steps"]:
        if "receive" in entry:
            steps.append(Receive(bytes.fromhex(entry["receive"])))
        else:
            assert base is not None, f"unknown base session {saved['base']!r}"
            act = base.steps[entry["act"]]
            assert isinstance(act, Act)
            steps.append(act)
    if base is None:
        session = Session("replay", role, tuple(steps))
    else:
        session = base.with_steps(tuple(steps), "+replay")
    return Case(session, base, saved["pieces"], saved["eof"])


def cases(sessions: Sequence[Session], roles: Sequence[Role]) -> st.SearchStrategy[Case]:
    @st.composite
    def mutated(draw: st.DrawFn) -> Case:
        base = draw(st.sampled_from(sessions))
        rng = random.Random(draw(st.integers(0, 2**32 - 1)))
        return Case(mutate_session(base, rng), base, draw(_pieces), draw(st.booleans()))

    @st.composite
    def random_octets(draw: st.DrawFn) -> Case:
        role = draw(st.sampled_from(roles))
        data = draw(st.binary(max_size=4096))
        if draw(st.booleans()):
            data = PROTOCOL_HEADER_0_9_1 + data
        session = Session(f"random/{role.value}", role, (Receive(data),))
        return Case(session, None, draw(_pieces), draw(st.booleans()))

    return st.one_of(mutated(), mutated(), random_octets())


_pieces = st.none() | st.integers(0, 2**32 - 1)


def save(case: Case, error: BaseException) -> Path:
    text = "".join(traceback.format_exception(error))
    data = case.to_json(text)
    CRASHES.mkdir(exist_ok=True)
    path = (
        CRASHES / f"{case.session.role.value}-{hashlib.sha256(data.encode()).hexdigest()[:16]}.json"
    )
    path.write_text(data)
    return path


def fuzz(seconds: float, roles: Sequence[Role]) -> int:
    sessions = [s for s in corpus() if s.role in roles]
    outcomes: collections.Counter[str] = collections.Counter()
    crashes: list[Path] = []
    last: list[Case] = []

    @settings(
        max_examples=BATCH,
        deadline=None,
        database=None,
        phases=[Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(cases(sessions, roles))
    def one(case: Case) -> None:
        last[:] = [case]
        outcomes[case.run()] += 1

    start = time.monotonic()
    report = start
    while time.monotonic() - start < seconds:
        try:
            one()
        except Exception as error:  # the shrunk failing case ran last
            crashes.append(save(last[0], error))
            print(f"CRASH {type(error).__name__}: {error} -> {crashes[-1]}", flush=True)
        now = time.monotonic()
        if now - report >= 5 or now - start >= seconds:
            report = now
            total = sum(outcomes.values())
            codes = ", ".join(f"{code}: {n}" for code, n in outcomes.most_common())
            print(
                f"{now - start:7.1f}s {total} inputs ({total / (now - start):.0f}/s), "
                f"{len(crashes)} crashes; outcomes {codes}",
                flush=True,
            )
    return 1 if crashes else 0


def replay(path: Path) -> int:
    case = case_from_json(path.read_text(), corpus())
    print(f"replaying {path}: {case.session.name}, {len(case.session.steps)} steps")
    print(case.run())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to run")
    parser.add_argument("--role", choices=["client", "server", "both"], default="both")
    parser.add_argument("--replay", type=Path, help="run one saved crash again and exit")
    args = parser.parse_args(argv)
    if args.replay is not None:
        return replay(args.replay)
    roles = [Role.CLIENT, Role.SERVER] if args.role == "both" else [Role(args.role)]
    return fuzz(args.seconds, roles)


if __name__ == "__main__":
    sys.exit(main())
