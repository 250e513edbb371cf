#!/usr/bin/env python3
"""Write ``docs/spec-coverage.md``: every class and method of each protocol version, what the
core does with it, and the test files that exercise it.

The method lists and what the core does come from the generated tables and the state tables
(``amqp_sansio._protocol``, ``amqp_sansio._state``); the tests from reading the test suite: a test
file is listed for a method of a version when one of its tests, or the test helpers that test
uses (functions, classes and constants of ``tests/``, followed through calls and imports), names
the method (its class or its meaning, ``"basic.consume"``) and runs in that version (names
``AMQP_0_8``, ``spec_0_8``, ``"0-8"``, ... or, for 0-9-1, no other version). A test named
``test_every_method...`` iterates a version's table itself: it is listed for every method of the
versions it names but the connection class and the channel's own opening and closing. It is an
index of where to look, not a proof of coverage.

``python tools/gen_spec_coverage.py`` rewrites the page; ``--check`` exits 1 when it is stale.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Final

from amqp_sansio._protocol import AMQP_0_9_1, SPECS
from amqp_sansio._state import (
    CHANNEL_LIFECYCLE,
    CONNECTION_TRANSITIONS,
    Effect,
    channel_transitions,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from amqp_sansio._method import Method
    from amqp_sansio._protocol import ProtocolSpec

ROOT: Final = Path(__file__).resolve().parent.parent
PAGE: Final = ROOT / "docs" / "spec-coverage.md"
TESTS: Final = ROOT / "tests"
#: Test files listed per method, at most.
MOST: Final = 6
#: What a test_every_method... test names (see the module docstring).
EVERY: Final = "<every method>"

#: Names that put a test in a version.
MARKERS: Final = {
    "0-8": {"AMQP_0_8", "spec_0_8", "0-8", "PROTOCOL_HEADER_0_8", "PROTOCOL_HEADER_0_8_PDF"},
    "0-9": {"AMQP_0_9", "spec_0_9", "0-9", "PROTOCOL_HEADER_0_9"},
    "0-9-1": {"AMQP_0_9_1", "spec_0_9_1", "0-9-1", "PROTOCOL_HEADER_0_9_1"},
}

# --- what the core does -----------------------------------------------------------------------

#: How each effect on receipt reads in the page.
_DOES: Final = {
    Effect.NONE: "passed through",
    Effect.START: "handshake (answered)",
    Effect.START_OK: "handshake (asks the application)",
    Effect.SECURE: "handshake (asks the application)",
    Effect.TUNE: "handshake (answered)",
    Effect.TUNE_OK: "handshake (checked)",
    Effect.OPEN: "handshake (asks the application)",
    Effect.OPEN_OK: "handshake: `ConnectionOpened`",
    Effect.REDIRECT: "`ConnectionRedirected`",
    Effect.CLOSE: "close (answered)",
    Effect.CLOSE_OK: "close handshake",
    Effect.BLOCKED: "`BlockedByPeer`",
    Effect.UNBLOCKED: "`UnblockedByPeer`",
    Effect.CHANNEL_OPEN: "channel opened (answered)",
    Effect.CHANNEL_OPEN_OK: "`ChannelOpened`",
    Effect.FLOW: "`ChannelFlowChanged` (answered)",
    Effect.CONSUMER_CANCELLED: "`ConsumerCancelled` (answered)",
    Effect.CONFIRM: "publisher confirms",
    Effect.CONFIRMS_SELECTED: "publisher confirms",
    Effect.DELIVERY: "content assembled",
    Effect.CONTENT_REPLY: "content assembled, as a reply",
    Effect.PUBLISH: "content assembled, numbered for confirms",
    Effect.RETURN: "`PublishReturned`, tied to confirms",
}


def core_does(spec: ProtocolSpec) -> dict[str, str]:
    """Meaning -> what the core does when it receives it, from the state tables."""
    effects: dict[str, set[Effect]] = {}
    for rows in CONNECTION_TRANSITIONS.values():
        for row in rows.values():
            for key, transition in row.items():
                if isinstance(key, str):
                    effects.setdefault(key, set()).add(transition.received)
    for channel_rows in channel_transitions(spec.methods.values()).values():
        for channel_row in channel_rows.values():
            for key, channel_transition in channel_row.items():
                effects.setdefault(key, set()).add(channel_transition.received)
    does: dict[str, str] = {}
    for meaning, found in effects.items():
        meaningful = found - {Effect.NONE} or found
        does[meaning] = "; ".join(sorted({_DOES[e] for e in meaningful}))
    return does


# --- reading the tests ------------------------------------------------------------------------


class _Unit:
    """A function, class or module-level assignment of a test file: what it names."""

    def __init__(self, module: str, node: ast.AST) -> None:
        self.module = module
        self.words: set[str] = set()
        self.calls: set[str] = set()  # names it uses, to follow
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name):
                self.words.add(sub.id)
                self.calls.add(sub.id)
            elif isinstance(sub, ast.Attribute):
                self.words.add(sub.attr)
            elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                self.words.add(sub.value)
            elif isinstance(sub, ast.ClassDef):
                self.calls.update(b.id for b in sub.bases if isinstance(b, ast.Name))


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def _read_tests() -> tuple[dict[str, dict[str, _Unit]], dict[str, dict[str, str]]]:
    """Units by module and name, and each module's imports (name -> module)."""
    units: dict[str, dict[str, _Unit]] = {}
    imports: dict[str, dict[str, str]] = {}
    for path in sorted(TESTS.rglob("*.py")):
        if "node_modules" in path.parts:
            continue
        module = _module_name(path)
        tree = ast.parse(path.read_text(), str(path))
        mine: dict[str, _Unit] = {}
        imported: dict[str, str] = {}
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tests"):
                for alias in node.names:
                    imported[alias.asname or alias.name] = node.module
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                mine[node.name] = _Unit(module, node)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        mine[target.id] = _Unit(module, node)
            elif isinstance(node, ast.For):  # settings given to several machines in a loop
                for name in _names(node):
                    if name in mine:
                        mine[name].words |= _Unit(module, node).words
        units[module] = mine
        imports[module] = imported
    return units, imports


def _names(node: ast.AST) -> Iterable[str]:
    return (n.id for n in ast.walk(node) if isinstance(n, ast.Name))


def _closure(
    module: str,
    name: str,
    units: dict[str, dict[str, _Unit]],
    imports: dict[str, dict[str, str]],
) -> set[str]:
    """Every word the unit *name* of *module* names, with the units it uses, transitively."""
    words: set[str] = set()
    seen: set[tuple[str, str]] = set()
    todo = [(module, name)]
    while todo:
        key = todo.pop()
        if key in seen:
            continue
        seen.add(key)
        where, what = key
        unit = units.get(where, {}).get(what)
        if unit is None:
            continue
        words |= unit.words
        for call in unit.calls:
            if call in units[where]:
                todo.append((where, call))
            elif call in imports[where]:
                todo.append((imports[where][call], call))
    return words


def index_tests() -> dict[str, list[tuple[str, frozenset[str]]]]:
    """Version -> (test file, the words its tests name in that version) per test file."""
    units, imports = _read_tests()
    index: dict[str, dict[str, set[str]]] = {version: {} for version in MARKERS}
    for module, mine in units.items():
        if not module.split(".")[-1].startswith("test_"):
            continue
        for name in mine:
            if not name.lower().startswith("test"):
                continue
            words = _closure(module, name, units, imports)
            if name.startswith("test_every_method"):
                words.add(EVERY)
            versions = {v for v, marks in MARKERS.items() if words & marks}
            if not versions - {"0-9-1"}:
                versions.add("0-9-1")  # the default version
            shown = module.removeprefix("tests.").replace(".", "/") + ".py"
            for version in versions:
                index[version].setdefault(shown, set()).update(words)
    return {
        version: [(file, frozenset(words)) for file, words in sorted(files.items())]
        for version, files in index.items()
    }


def _files(cls: type[Method], tests: Sequence[tuple[str, frozenset[str]]]) -> str:
    names = {cls.NAME, cls.__name__}
    if cls.CLASS_ID != 10 and cls.NAME not in CHANNEL_LIFECYCLE:
        names.add(EVERY)
    found = [file for file, words in tests if words & names]
    if not found:
        return "none"
    shown = ", ".join(f"`{file}`" for file in found[:MOST])
    return shown + (f" and {len(found) - MOST} more" if len(found) > MOST else "")


# --- the page ---------------------------------------------------------------------------------

_HEADER: Final = """\
<!-- AUTOGENERATED by tools/gen_spec_coverage.py from the method tables, the state tables and
the tests: run `python tools/gen_spec_coverage.py`. `--check` (make gencheck, a test) fails when
stale. -->

# Spec coverage

The method classes are generated from the spec by `tools/gen_spec.py` and checked in under
`src/amqp_sansio/_generated/`; a test fails when they are stale.

{inputs}

Origins, licences and checksums are in `spec/SOURCES.md`.

A method of 0-9 or 0-8 that means the same as in 0-9-1 (the same spec name) and is identical on
the wire and in Python (field names, types and defaults, synchronous, content, replies, senders)
**is** the 0-9-1 class: "shared" below; its ids in the version are the version's own where they
differ (0-8's `connection.close` is (10, 60)). Fields 0-9-1 also has take 0-9-1's defaults, so
that one meaning has one Python signature (RabbitMQ's 0-8 JSON defaults `ticket` to 1; we send
0, as py-amqplib does and RabbitMQ ignores). Everything else is the version's own class.

"The core" is what the connection does when it receives the method, from the state tables
({doc}`state-machines`): "passed through" means a `MethodReceived` event, after the checks every
method gets (the sender's role, the channel's state, replies in order, nowait). Content of any
class (basic, file, stream, 0-8's test) is assembled into `MessageReceived`. A method with no row
is refused. "Tests" lists the test files whose tests (or the helpers they use) name the method
in that version; an index, not a proof (`tools/gen_spec_coverage.py` says how it is found).
Every method of every version also goes through the codec's round trips and a frame reader with
the version's ids (`amqp_sansio/test_spec.py`, `amqp_sansio/test_spec_versions.py`), which are
not listed per row.
"""


def _table(spec: ProtocolSpec, tests: Sequence[tuple[str, frozenset[str]]]) -> list[str]:
    base = AMQP_0_9_1
    shared = set(base.methods.values())
    does = core_does(spec)
    out = [
        "| method | ids | sent by | replies | class | the core | tests |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    classes: dict[int, list[tuple[int, type[Method]]]] = {}
    for index, cls in spec.methods.items():
        classes.setdefault(index >> 16, []).append((index, cls))
    for class_id in sorted(classes):
        for index, cls in sorted(classes[class_id], key=lambda item: item[0] & 0xFFFF):
            senders = ", ".join(sorted(r.value for r in cls.SENT_BY))
            replies = ", ".join(f"`{r.NAME.split('.')[1]}`" for r in cls.RESPONSES) or "-"
            if cls.HAS_CONTENT:
                replies += " (content)"
            kind = "shared" if spec is not base and cls in shared else "own"
            if spec is base:
                kind = "-"
            row = [
                f"`{cls.NAME}`",
                f"{index >> 16}, {index & 0xFFFF}",
                senders,
                replies,
                kind,
                does.get(cls.NAME, "refused (no row)"),
                _files(cls, tests),
            ]
            out.append("| " + " | ".join(row) + " |")
    return out


def _version_notes(spec: ProtocolSpec) -> list[str]:
    methods = list(spec.methods.values())
    classes = sorted({index >> 16 for index in spec.methods})
    base = AMQP_0_9_1
    notes = [f"{len(methods)} methods in {len(classes)} classes."]
    if spec is not base:
        shared = sum(cls in set(base.methods.values()) for cls in methods)
        notes[0] = f"{len(methods)} methods in {len(classes)} classes, {shared} shared with 0-9-1."
    passed = [
        cls.NAME.split(".")[0]
        for cls in methods
        if cls.NAME.split(".")[0] not in {"connection", "channel", "basic", "queue", "exchange"}
        and cls.NAME not in CHANNEL_LIFECYCLE
    ]
    if passed:
        others = ", ".join(f"`{name}`" for name in dict.fromkeys(passed))
        notes.append(f"Classes the core gives no meaning beyond the tables: {others}.")
    return notes


_INPUTS: Final = (
    (
        "`amqp0-9-1.stripped.extended.xml` (BSD)",
        (
            "0-9-1's methods, argument lists, `<chassis>` (who may send what), `<response>` pairs, "
            "constants, reply codes"
        ),
    ),
    (
        "`amqp-rabbitmq-0.9.1.json` (MIT)",
        (
            "default values, RabbitMQ's names for reserved fields (`ticket`, `nowait`, "
            "`cluster_id`), the `access` class"
        ),
    ),
    ("`amqp0-9.stripped.xml` (BSD)", "0-9's classes, methods, chassis, responses, constants"),
    ("`amqp0-8.stripped.xml` (BSD)", "0-8's classes, methods, chassis, responses, constants"),
    (
        "`amqp-rabbitmq-0.8.json` (MIT)",
        (
            "where RabbitMQ's 0-8 differs: basic.recover at (60, 110) with recover-ok, "
            "recover-async at 100, queue.unbind; defaults of the methods 0-9-1 lacks"
        ),
    ),
    (
        "`amqp0-9-1.extended.xml`, `amqp0-9.xml`, `amqp0-8.xml` (AMQP spec licence)",
        "labels and first paragraphs used as docstrings",
    ),
)

_TITLES: Final = {
    "0-9-1": "AMQP 0-9-1 with RabbitMQ's extensions",
    "0-9": "AMQP 0-9",
    "0-8": "AMQP 0-8 as RabbitMQ 3.10 reads it",
}


def render() -> str:
    index = index_tests()
    inputs = ["| input (in `spec/`) | used for |", "| --- | --- |"]
    inputs += [f"| {name} | {use} |" for name, use in _INPUTS]
    out = [_HEADER.replace("{inputs}", "\n".join(inputs))]
    for spec in SPECS.values():
        version = spec.version.value
        out.append(f"## {_TITLES[version]}")
        out.append("")
        out += _version_notes(spec)
        out.append("")
        out += _table(spec, index[version])
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not PAGE.exists() or PAGE.read_text() != text:
            print(f"{PAGE.relative_to(ROOT)} is stale; run `python tools/gen_spec_coverage.py`")
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
