"""The one planner's cost: the shipped hybrid's p50, this checkout against another commit, side by side.

Two ways a question reaches the embedded store with the shipped model on SciFact (5,183 abstracts, 300 test
questions, one at a time, ``k=10``):

* ``HybridRetriever`` built by hand with the default fusion (``fusion=None``), as the README shows;
* ``KnowledgeBase.search(q, top_k=10)``: settings resolved and the chain planned on every call (since issue
  24 by ``fastrag.planning``, before it by ``KnowledgeBase._plan``).

Each checkout runs in its own subprocess (its own ``fastrag`` first on ``sys.path``) over its own copy of the
index, built by that checkout; the two run in alternating rounds, and each round times every question once
per path. The report gives each checkout's p50 per path (the median of the rounds' medians) and the ratio.

Run from the repository root::

    python benchmarks/planning.py --baseline 398c913          # the commit before the planner
    python benchmarks/planning.py --baseline 398c913 --smoke  # 300 documents, 50 questions, 2 rounds

Writes ``benchmarks/results/planning.md`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time, statistics
sys.path.insert(0, sys.argv[1])
sys.path.insert(1, sys.argv[2])
import anyio
from corpus import load
from fastrag import BM25Retriever, HybridRetriever, VectorRetriever
from fastrag.knowledge_base import KnowledgeBase
from fastrag.ingestion import Model2VecEmbedder
from fastrag.vector_store.sqlite import SQLiteVectorStore

store_path, max_docs, max_queries, rounds, phase = sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7]

async def main():
    corpus = load("scifact", max_docs=max_docs or None, max_queries=max_queries or None)
    async with Model2VecEmbedder() as embedder, SQLiteVectorStore(store_path) as store:
        if phase == "index":
            for start in range(0, len(corpus.docs), 1000):
                batch = corpus.docs[start:start + 1000]
                texts = corpus.texts[start:start + 1000]
                await store.upsert(batch, embeddings=await embedder.embed_documents(texts))
            print(json.dumps({"indexed": len(corpus.docs)}))
            return
        questions = list(corpus.queries.values())
        hybrid = HybridRetriever([VectorRetriever(vector_store=store, embedder=embedder), BM25Retriever(store=store)])
        async with KnowledgeBase(store, embedder=embedder) as kb:
            for q in questions[:10]:  # warm caches, the model and the store's columns
                await hybrid.retrieve(q, k=10)
                await kb.search(q, top_k=10)
            out = {"hybrid": [], "knowledge_base": []}
            for q in questions:
                t = time.perf_counter(); await hybrid.retrieve(q, k=10); out["hybrid"].append(time.perf_counter() - t)
                t = time.perf_counter(); await kb.search(q, top_k=10); out["knowledge_base"].append(time.perf_counter() - t)
        print(json.dumps({k: statistics.median(v) for k, v in out.items()}))

anyio.run(main)
"""


def _checkout(commit: str, into: Path) -> Path:
    """``commit``'s tree (its ``fastrag`` package) unpacked into ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "fastrag"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def _child(tree: Path, store: Path, args: argparse.Namespace, phase: str) -> dict[str, float]:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(tree), str(ROOT / "benchmarks"), str(store), str(args.max_docs),
         str(args.max_queries), "1", phase],
        check=True, capture_output=True, text=True, cwd=tree,
    )  # fmt: skip
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="the commit to compare with (e.g. the one before the planner)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-docs", type=int, default=0, help="0: the whole corpus")
    parser.add_argument("--max-queries", type=int, default=0, help="0: every test question")
    parser.add_argument("--smoke", action="store_true", help="300 documents, 50 questions, 2 rounds")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "planning.md")
    args = parser.parse_args()
    if args.smoke:
        args.max_docs, args.max_queries, args.rounds = 300, 50, 2
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="fastrag-planning-") as tmp:
        trees = {"baseline": _checkout(args.baseline, Path(tmp) / "baseline"), "current": ROOT}
        stores = {name: Path(tmp) / f"{name}.db" for name in trees}
        for name, tree in trees.items():
            _child(tree, stores[name], args, "index")
        seen: dict[str, dict[str, list[float]]] = {name: {"hybrid": [], "knowledge_base": []} for name in trees}
        for round_ in range(args.rounds):
            order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
            for name in order:
                for path, p50 in _child(trees[name], stores[name], args, "query").items():
                    seen[name][path].append(p50)
    p50 = {name: {path: statistics.median(v) for path, v in paths.items()} for name, paths in seen.items()}
    lines = [
        "# The planner's cost: the shipped hybrid's p50, side by side",
        "",
        f"`python benchmarks/planning.py --baseline {args.baseline}` at {head}: SciFact "
        f"({args.max_docs or 'all'} documents, {args.max_queries or 'all'} test questions), the shipped static "
        f"model, `k=10`, {args.rounds} alternating rounds; each cell is the median of the rounds' p50s.",
        "",
        f"| path | {args.baseline} (ms) | {head} (ms) | ratio |",
        "| --- | --- | --- | --- |",
    ]
    for path in ("hybrid", "knowledge_base"):
        base, cur = p50["baseline"][path] * 1000, p50["current"][path] * 1000
        label = "HybridRetriever (fusion=None)" if path == "hybrid" else "KnowledgeBase.search"
        lines.append(f"| {label} | {base:.3f} | {cur:.3f} | {cur / base:.3f} |")
    text = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
