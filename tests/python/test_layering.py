"""The package's own import graph: clients never import the store, no module cycle (imports made
only for type checking count too), and no ``assert`` in library code (``python -O`` drops them)."""

from __future__ import annotations

import ast
from pathlib import Path

import mqlite

PACKAGE = Path(mqlite.__file__).parent
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__"))
# Clients of a store: they get a ClientContext and never see Store.
CLIENTS = ("producer", "pull", "push", "aio", "_context", "_completion")


def _imports(module: str) -> set[str]:
    """The mqlite modules ``module`` imports, anywhere in its source."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module == "mqlite":
                out.update(a.name for a in node.names if a.name in MODULES)
            elif node.module.startswith("mqlite."):
                out.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[1] for a in node.names if a.name.startswith("mqlite."))
    return out & set(MODULES)


def test_clients_do_not_import_the_store() -> None:
    for client in CLIENTS:
        assert "store" not in _imports(client), client


def test_the_module_graph_has_no_cycle() -> None:
    graph = {m: _imports(m) for m in MODULES}
    done: set[str] = set()

    def visit(m: str, path: list[str]) -> None:
        assert m not in path, " -> ".join([*path, m])
        if m in done:
            return
        for dep in sorted(graph[m]):
            visit(dep, [*path, m])
        done.add(m)

    for m in MODULES:
        visit(m, [])


def test_library_code_has_no_assert() -> None:
    for module in MODULES:
        tree = ast.parse((PACKAGE / f"{module}.py").read_text(encoding="utf-8"))
        lines = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Assert)]
        assert not lines, f"{module}.py: assert at lines {lines}"
