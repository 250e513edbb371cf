"""The broker's modules import one another one way only: no cycles, not even through
``TYPE_CHECKING`` imports, and no private module of ``amqp_sansio`` or ``amqp_trio``."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter

from tests.support import ROOT

PACKAGE = ROOT / "src" / "amqp_broker"


def sibling_imports() -> dict[str, set[str]]:
    """Module name -> the ``amqp_broker`` modules it imports (at any level of the file)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.glob("*.py")):
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                imported.add(node.module)
        graph[path.stem] = imported
    return graph


def test_modules_import_one_way() -> None:
    graph = sibling_imports()
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as exc:
        raise AssertionError(f"import cycle among amqp_broker modules: {exc.args[1]}") from exc


def test_only_public_names_of_the_core_and_trio() -> None:
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                parts = node.module.split(".")
                if parts[0] in ("amqp_sansio", "amqp_trio"):
                    assert not any(p.startswith("_") for p in parts), (path.name, node.module)
