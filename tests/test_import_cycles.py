"""No import cycles among fastrag's modules (STYLE.md: "No import cycles between modules").

The graph is read statically from the source (``ast``): an edge ``a -> b`` for every ``import`` or
``from ... import`` of a fastrag module in ``a``, wherever it stands (module level, or inside a function or
method: an import deferred into a function still makes ``a`` depend on ``b``, and deferring is how a cycle
hides). Imports under ``if TYPE_CHECKING:`` are left out (they never run). ``from package import name``
counts as importing ``package.name`` when that is a module, else ``package``. A cycle is a strongly
connected component of more than one module (Tarjan 1972).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "fastrag"

# Cycles known and owned by work in progress elsewhere, each with its reason. The test fails when one of
# them is gone too, so that this list only ever shrinks.
KNOWN_CYCLES: dict[frozenset[str], str] = {}


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(path: Path, modules: set[str], root: Path = ROOT) -> set[str]:
    """The fastrag modules ``path`` imports anywhere but under ``if TYPE_CHECKING:``."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                full = f"{target}.{alias.name}"
                found.add(full if full in modules else target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return {m for m in found if m in modules and m != name}


@functools.cache
def import_graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): imports_of(p, modules) for p in paths}


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_the_cycle_finder_finds_deferred_and_module_level_cycles(tmp_path: Path) -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"f"}, "f": {"e"}, "g": set()}
    assert sorted(map(sorted, cycles(graph))) == [["a", "b", "c"], ["e", "f"]]
    source = tmp_path / "fastrag" / "x.py"
    source.parent.mkdir()
    source.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fastrag import y\n"
        "def f():\n    from fastrag.z import thing\n    import fastrag.w\n",
        encoding="utf-8",
    )
    modules = {"fastrag.x", "fastrag.y", "fastrag.z", "fastrag.w"}
    assert imports_of(source, modules, tmp_path) == {"fastrag.z", "fastrag.w"}


def test_no_import_cycles_among_fastrag_modules() -> None:
    found = set(cycles(import_graph()))
    new = [sorted(c) for c in found - set(KNOWN_CYCLES)]
    assert not new, f"import cycles (break each by moving what both sides need into a module of its own): {new}"
    gone = [sorted(c) for c in set(KNOWN_CYCLES) - found]
    assert not gone, f"these known cycles are gone: remove them from KNOWN_CYCLES: {gone}"


@pytest.mark.parametrize(
    ("importer", "imported"),
    [("fastrag.tool", "fastrag.knowledge_base"), ("fastrag.retrieval.sections", "fastrag.ingestion.pipeline")],
)
def test_the_two_cycles_of_issue_15_stay_broken(importer: str, imported: str) -> None:
    graph = import_graph()
    assert imported not in graph[importer]
    assert importer in graph[imported]  # the dependency that remains runs one way only
