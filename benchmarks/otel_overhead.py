"""What OpenTelemetry costs a search: the shipped hybrid's p50 before the instrumentation, with
``opentelemetry-api`` alone (no SDK: every span a no-op), and with the SDK recording every span, side by side.

The searches: ``KnowledgeBase.search(q, top_k=10)`` and ``KnowledgeBase.search_result(q, top_k=10)`` (hybrid, the
shipped static model, the embedded SQLite store) over SciFact (5,183 abstracts, 300 test questions, one at a
time). Each configuration runs in its own subprocess (its own ``fastrag`` first on ``sys.path``) over one index
built by the baseline checkout; configurations run in alternating rounds, each round times every question once
per path, and each cell is the median of the rounds' p50s.

* ``baseline``: ``--baseline``'s ``fastrag`` (the commit before the spans), no tracer provider;
* ``api only``: this checkout, no tracer provider (what every user without an SDK runs);
* ``sdk``: this checkout with an SDK ``TracerProvider`` and a ``SimpleSpanProcessor`` into an
  ``InMemorySpanExporter`` (cleared after each question): the cost of recording, exporting aside.

Run from the repository root::

    python benchmarks/otel_overhead.py --baseline 6e496b8          # the commit before the spans
    python benchmarks/otel_overhead.py --baseline 6e496b8 --smoke  # 300 documents, 50 questions, 2 rounds

Writes ``benchmarks/results/otel_overhead.md`` (``--out``) and the rounds' p50s beside it (``.json``).
"""

from __future__ import annotations

import argparse
import json
import os
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
from fastrag.knowledge_base import KnowledgeBase
from fastrag.ingestion import Model2VecEmbedder
from fastrag.vector_store.sqlite import SQLiteVectorStore

store_path, max_docs, max_queries, phase, sdk = sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7]
clear = lambda: None
if sdk == "1":
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    clear = exporter.clear

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
        async with KnowledgeBase(store, embedder=embedder) as kb:
            for q in questions[:10]:  # warm caches, the model and the store's columns
                await kb.search(q, top_k=10)
                await kb.search_result(q, top_k=10)
            clear()
            out = {"search": [], "search_result": []}
            spans = 0
            for q in questions:
                t = time.perf_counter(); await kb.search(q, top_k=10); out["search"].append(time.perf_counter() - t)
                t = time.perf_counter(); await kb.search_result(q, top_k=10); out["search_result"].append(time.perf_counter() - t)
                if sdk == "1":
                    spans = max(spans, len(exporter.get_finished_spans()))
                    clear()
        print(json.dumps({**{k: statistics.median(v) for k, v in out.items()}, "spans": spans}))

anyio.run(main)
"""

# one no-op span, timed in one process: what each span costs a search without an SDK
MICRO = r"""
import json, sys, timeit
sys.path.insert(0, sys.argv[1])
from contextlib import nullcontext
from fastrag import tracing
from fastrag.retrieval.result import timed

def span():
    with tracing.span("x"):
        pass

def stage():
    with timed("x"):
        pass

def store():
    with tracing.store_call("search_vector", None) as call:
        call.returned(3)

def bare():
    with nullcontext():
        pass

n = 200_000
best = {name: min(timeit.repeat(fn, number=n, repeat=7)) / n for name, fn in
        (("span", span), ("stage", stage), ("store", store), ("nullcontext", bare))}
print(json.dumps(best))
"""

CONFIGS = {"baseline": ("baseline", "0"), "api only": ("current", "0"), "sdk": ("current", "1")}
PATHS = {"search": "KnowledgeBase.search", "search_result": "KnowledgeBase.search_result"}


def _checkout(commit: str, into: Path) -> Path:
    """``commit``'s tree (its ``fastrag`` package) unpacked into ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "fastrag"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def _child(tree: Path, store: Path, args: argparse.Namespace, phase: str, sdk: str = "0") -> dict[str, float]:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(tree), str(ROOT / "benchmarks"), str(store), str(args.max_docs),
         str(args.max_queries), phase, sdk],
        capture_output=True, text=True, cwd=tree,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"{tree} ({phase}, sdk={sdk}) failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="the commit to compare with (the one before the spans)")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--max-docs", type=int, default=0, help="0: the whole corpus")
    parser.add_argument("--max-queries", type=int, default=0, help="0: every test question")
    parser.add_argument("--smoke", action="store_true", help="300 documents, 50 questions, 2 rounds")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "otel_overhead.md")
    args = parser.parse_args()
    if args.smoke:
        args.max_docs, args.max_queries, args.rounds = 300, 50, 2
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()  # fmt: skip
    from importlib.metadata import version

    versions = {name: version(name) for name in ("opentelemetry-api", "opentelemetry-sdk")}
    spans = 0
    with tempfile.TemporaryDirectory(prefix="fastrag-otel-") as tmp:
        trees = {"baseline": _checkout(args.baseline, Path(tmp) / "baseline"), "current": ROOT}
        store = Path(tmp) / "index.db"
        _child(trees["baseline"], store, args, "index")
        seen: dict[str, dict[str, list[float]]] = {name: {path: [] for path in PATHS} for name in CONFIGS}
        for round_ in range(args.rounds):
            order = list(CONFIGS) if round_ % 2 == 0 else list(reversed(CONFIGS))
            for name in order:
                tree, sdk = CONFIGS[name]
                out = _child(trees[tree], store, args, "query", sdk)
                spans = max(spans, int(out.pop("spans", 0)))
                for path, p50 in out.items():
                    seen[name][path].append(p50)
        micro = json.loads(subprocess.run([sys.executable, "-c", MICRO, str(ROOT)], check=True, capture_output=True,
                                          text=True).stdout.strip().splitlines()[-1])  # fmt: skip
    p50 = {name: {path: statistics.median(v) for path, v in paths.items()} for name, paths in seen.items()}
    # each round's api-only p50 over the baseline's of the same round (run back to back): the load of the
    # machine changes between rounds, much less within one
    ratios = {path: sorted(a / b for a, b in zip(seen["api only"][path], seen["baseline"][path], strict=True))
              for path in PATHS}  # fmt: skip
    paired = {path: statistics.median(r) for path, r in ratios.items()}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    per_span = micro["span"] - micro["nullcontext"]
    lines = [
        "# OpenTelemetry's cost: the shipped hybrid's p50, side by side",
        "",
        f"`python benchmarks/otel_overhead.py --baseline {args.baseline}` at {head}: SciFact "
        f"({args.max_docs or 'all'} documents, {args.max_queries or 'all'} test questions), the shipped static "
        f"model, hybrid, `top_k=10`, the SQLite store, {args.rounds} alternating rounds; each cell is the median of "
        f"the rounds' p50s. opentelemetry-api {versions['opentelemetry-api']}, opentelemetry-sdk "
        f"{versions['opentelemetry-sdk']}; with the SDK one `search` + `search_result` pair records {spans} spans.",
        "",
        f"| path | {args.baseline}, no spans (ms) | {head}, api only (ms) | ratio | paired ratio | "
        f"{head}, sdk recording (ms) | ratio |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for path, label in PATHS.items():
        base, api, sdk = (p50[name][path] * 1000 for name in ("baseline", "api only", "sdk"))
        lines.append(f"| {label} | {base:.3f} | {api:.3f} | {api / base:.3f} | {paired[path]:.3f} | {sdk:.3f} | "
                     f"{sdk / base:.3f} |")  # fmt: skip
    share = per_span * spans / 2 / (p50["baseline"]["search"])
    lines += [
        "",
        "The paired ratio is the median over rounds of that round's api-only p50 over the baseline's p50 (run back "
        f"to back); over the rounds it ranged {ratios['search'][0]:.3f}-{ratios['search'][-1]:.3f} (search) and "
        f"{ratios['search_result'][0]:.3f}-{ratios['search_result'][-1]:.3f} (search_result), with a load average "
        f"of {load:.1f} on {os.cpu_count()} cores at the end: the machine's load moves the p50s more than the spans "
        "can, so the whole-search ratios above are noise at this size. What one no-op span costs, timed alone in "
        "one process (best of 7 x 200,000, `opentelemetry-api` only):",
        "",
        "| block | µs |",
        "| --- | --- |",
        f"| `with nullcontext()` (what `timed()` returned outside `retrieve_result` before) | {micro['nullcontext'] * 1e6:.3f} |",
        f"| `with tracing.span(...)` | {micro['span'] * 1e6:.3f} |",
        f"| `with timed(...)` (a stage: span, no collector) | {micro['stage'] * 1e6:.3f} |",
        f"| `with tracing.store_call(...)` + `returned()` | {micro['store'] * 1e6:.3f} |",
        "",
        f"At {spans // 2} spans a search that is {per_span * spans / 2 * 1e6:.1f} µs, {share:.3%} of the baseline's "
        "`KnowledgeBase.search` p50.",
    ]
    text = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    raw = {"rounds_p50_seconds": seen, "micro_seconds": micro, "spans_per_pair": spans, "load_average": load}
    args.out.with_suffix(".json").write_text(json.dumps(raw, indent=1) + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
