"""No import cycles among fastrag's modules, and the layers of STYLE.md run one way only.

The graph is read statically from the source (``ast``): an edge ``a -> b`` for every ``import`` or
``from ... import`` of a fastrag module in ``a``, wherever it stands (module level, or inside a function or
method: an import deferred into a function still makes ``a`` depend on ``b``, and deferring is how a cycle
hides). Relative imports are resolved against ``a``'s package. Imports under ``if TYPE_CHECKING:`` are left
out (they never run). ``from package import name`` counts as importing ``package.name`` when that is a
module, else ``package``. A cycle is a strongly connected component of more than one module (Tarjan 1972).

The layer rules (STYLE.md, "Layers run one way, top to bottom: entrances -> knowledge base -> planning ->
retrieval -> stores -> models, filters, errors. Stores never import retrieval; retrieval never imports
ingestion.") read the same graph plus the imports a module makes by name at run time: a string naming a
fastrag module passed to ``importlib.import_module`` or held as a value of a dict (the PEP 562 lazy-export
tables ``{"Name": "fastrag.module"}``), since those run as surely as an ``import`` statement does.
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


def imports_of(path: Path, modules: set[str], root: Path = ROOT, *, by_name: bool = False) -> set[str]:
    """The fastrag modules ``path`` imports anywhere but under ``if TYPE_CHECKING:``; with ``by_name``, also
    those it imports by a string naming the module (``importlib.import_module("fastrag.x")``, or a value of
    a dict literal or comprehension, as lazy-export tables hold them)."""
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
        elif by_name:
            named: list[ast.expr] = []
            if isinstance(node, ast.Dict):
                named = [value for value in node.values if value is not None]
            elif isinstance(node, ast.DictComp):
                named = [node.value]
            elif isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                named = node.args[:1] if name in ("import_module", "__import__") else []
            found.update(v.value for v in named if isinstance(v, ast.Constant) and isinstance(v.value, str))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return {m for m in found if m in modules and m != name}


@functools.cache
def import_graph(*, by_name: bool = False) -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): imports_of(p, modules, by_name=by_name) for p in paths}


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


def test_the_cycle_of_issue_15_between_the_tool_and_the_knowledge_base_stays_broken() -> None:
    graph = import_graph()
    assert not any(m.startswith("fastrag.knowledge_base") for m in graph["fastrag.tool"])
    assert "fastrag.tool" in graph["fastrag.knowledge_base.facade"]  # the dependency that remains runs one way only


# ------------------------------------------------------------------------------------------------ layers


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


# STYLE.md's layers, top to bottom: a module may import its own layer and any layer below it, never one above.
# Modules in no layer (fastrag itself, config, analysis, limits, scoping, protocols, retry, ingestion, sections,
# rerankers, providers, querying, ...) are not ordered by this table; the rules after it place the ones STYLE.md
# places. "planning" is STYLE.md's composer (fastrag/planning.py), listed so that the rule holds once it exists.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("entrances", ("fastrag.cli", "fastrag.serve", "fastrag.mcp")),
    ("knowledge base", ("fastrag.knowledge_base",)),
    ("planning", ("fastrag.planning",)),
    ("retrieval", ("fastrag.retrieval",)),
    # The native hybrid retrievers (vector_store/milvus/hybrid.py, vector_store/qdrant/hybrid.py) are stores'
    # modules and follow the stores' rule: they check their arguments with fastrag.limits and search through
    # their store's public search_hybrid, so nothing in vector_store/ needs retrieval.
    ("stores", ("fastrag.vector_store",)),
    ("models, filters, errors", ("fastrag.models", "fastrag.filters", "fastrag.errors")),
]

# (rule, importers, what they must never import): the sentences of STYLE.md that name a package outside the
# table above ("stores never import retrieval" is the table's), and where this layout puts such packages.
NEVER: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = [
    ("retrieval never imports ingestion", ("fastrag.retrieval",), ("fastrag.ingestion",)),
    # the diagram's "documents -> IngestionPipeline: parse > chunk > embed > write (VectorStore / LexicalStore)"
    ("stores never import ingestion, which writes to them", ("fastrag.vector_store",), ("fastrag.ingestion",)),
    # sections/ reads files with the ingestion parsers (SectionIndex.add_text, add_file); the pipeline is handed
    # a SectionIndex and imports its type only under TYPE_CHECKING, so the two run one way
    ("ingestion never imports sections, which imports the parsers", ("fastrag.ingestion",), ("fastrag.sections",)),
    # providers/: "the HTTP clients shared by the chat client, embedders, rerankers", so below all three
    ("providers never import the chat client, embedders or rerankers they serve", ("fastrag.providers",),
     ("fastrag.llm", "fastrag.ingestion", "fastrag.rerankers", "fastrag.querying")),
]


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every edge of ``graph`` that breaks :data:`LAYERS` or :data:`NEVER`, as ``"rule: a -> b"``."""

    def layer(module: str) -> int | None:
        return next((i for i, (_, prefixes) in enumerate(LAYERS) if _within(module, prefixes)), None)

    found = []
    for importer, imported in sorted((a, b) for a, targets in graph.items() for b in targets):
        low, high = layer(importer), layer(imported)
        if low is not None and high is not None and high < low:
            found.append(f"{LAYERS[low][0]} never import {LAYERS[high][0]}: {importer} -> {imported}")
        if low is not None and LAYERS[low][0] == "models, filters, errors" and high is None:
            found.append(f"models, filters and errors import only each other: {importer} -> {imported}")
        for rule, importers, forbidden in NEVER:
            if _within(importer, importers) and _within(imported, forbidden):
                found.append(f"{rule}: {importer} -> {imported}")
    return found


def test_the_layer_checker_sees_deferred_relative_and_by_name_imports(tmp_path: Path) -> None:
    package = tmp_path / "fastrag"
    for name in ("vector_store/__init__.py", "vector_store/x/__init__.py", "vector_store/x/hybrid.py",
                 "retrieval/__init__.py", "retrieval/pagination.py", "retrieval/sections.py",
                 "ingestion/__init__.py", "ingestion/parsers.py", "models.py", "analysis.py"):  # fmt: skip
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text("", encoding="utf-8")
    (package / "vector_store/x/hybrid.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fastrag.retrieval import sections\n"
        "def retrieve():\n    from ...retrieval.pagination import check_offset\n",
        encoding="utf-8",
    )
    (package / "retrieval/sections.py").write_text(
        "import importlib\n_LAZY = {'parse': 'fastrag.ingestion.parsers'}\n"
        "def add():\n    return importlib.import_module('fastrag.ingestion')\n",
        encoding="utf-8",
    )
    (package / "models.py").write_text("def f():\n    import fastrag.analysis\n", encoding="utf-8")
    paths = sorted(package.rglob("*.py"))
    modules = {module_name(p, tmp_path) for p in paths}
    graph = {module_name(p, tmp_path): imports_of(p, modules, tmp_path, by_name=True) for p in paths}
    assert graph["fastrag.vector_store.x.hybrid"] == {"fastrag.retrieval.pagination"}  # not the TYPE_CHECKING one
    assert graph["fastrag.retrieval.sections"] == {"fastrag.ingestion.parsers", "fastrag.ingestion"}
    assert layer_violations(graph) == [
        "models, filters and errors import only each other: fastrag.models -> fastrag.analysis",
        "retrieval never imports ingestion: fastrag.retrieval.sections -> fastrag.ingestion",
        "retrieval never imports ingestion: fastrag.retrieval.sections -> fastrag.ingestion.parsers",
        "stores never import retrieval: fastrag.vector_store.x.hybrid -> fastrag.retrieval.pagination",
    ]


def test_the_layers_of_style_md_run_one_way() -> None:
    found = layer_violations(import_graph(by_name=True))
    assert not found, "imports against the layers (move what both sides need down a layer):\n" + "\n".join(found)


# --------------------------------------------------------------------------------------- reach-through


def private_imports(package: Path = PACKAGE, root: Path = ROOT) -> set[tuple[str, str, str]]:
    """``(importer, module, name)`` for every ``from module import _name`` of another fastrag module's private
    name (module- or function-level; ``__future__`` and dunder names aside)."""
    found = set()
    for path in sorted(package.rglob("*.py")):
        name = module_name(path, root)
        base = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or node.module == "__future__":
                continue
            parts = base.split(".")
            target = ".".join(parts[: len(parts) - (node.level - 1)] + [node.module or ""]) if node.level else node.module
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__") and target.startswith("fastrag"):
                    found.add((name, target.rstrip("."), alias.name))
    return found


# Imports of private names that remain, each with its reason; the test fails when one is gone too, so that
# this table only ever shrinks (issue 24 counted 32; the providers, the Milvus store and the hybrids took 11;
# the ANN indexes' shared helpers, the query engines' shared checks, the parsers' suffixes and the analysis's
# CJK ranges, made public where they live, the other 20). A shared helper gets a public name in its module
# (a module private to its package, like retrieval/_validation.py, may hold it), never a new entry here.
KNOWN_PRIVATE_IMPORTS: dict[tuple[str, str, str], str] = {}


def test_no_module_imports_another_modules_private_names() -> None:
    found = private_imports()
    new = sorted(found - set(KNOWN_PRIVATE_IMPORTS))
    assert not new, f"imports of private names (make the name public where it is shared, or move it): {new}"
    gone = sorted(set(KNOWN_PRIVATE_IMPORTS) - found)
    assert not gone, f"these private imports are gone: remove them from KNOWN_PRIVATE_IMPORTS: {gone}"


def test_the_native_hybrids_use_only_their_stores_public_methods() -> None:
    """The Milvus and Qdrant hybrid retrievers and the Milvus hybrid search reach no private attribute of another
    object (``store._call``, ``store._models``...): they go through the store's public ``search_hybrid``."""
    reached = []
    paths = sorted((PACKAGE / "vector_store").glob("*/hybrid*.py"))
    assert {"milvus", "qdrant"} <= {path.parent.name for path in paths}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                owner = ast.unparse(node.value)
                if owner not in ("self", "cls"):
                    reached.append(f"{path.relative_to(ROOT)}:{node.lineno}: {owner}.{node.attr}")
    assert not reached, "\n".join(reached)
