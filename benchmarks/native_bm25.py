"""Native BM25 core (fastrag.vector_store.sqlite.native) against the numpy reference path and tantivy fed
fastrag's own terms, interleaved per query in one run, as ratios; and queries/s at 1, 8 and 32 concurrent
``BM25Retriever.retrieve`` calls (issue 28, point 2).

Per corpus (SciFact 5,183 documents; synthetic ``syn:N`` chunks of 30-90 words drawn from SciFact's unigram
distribution, as benchmarks/speed.py makes them):

1. p50 latency per query, the three systems interleaved query by query (rotated order):
   - ``store native``: ``await store.search_text(q, k=10)`` with the core (``FASTRAG_NATIVE=1``);
   - ``store numpy``: the same call on the numpy reference path (``FASTRAG_NATIVE=0``);
   - ``kernel native`` / ``kernel numpy``: the time spent inside ``lexical.bm25_top`` of those calls (from
     the query terms' postings to the candidates: what the core replaces);
   - ``tantivy``: tantivy's official bindings, on disk, the store's own analysed terms of every document
     joined by spaces into a whitespace-tokenised field, queried with a boolean Should query of the query's
     analysed terms (benchmarks/scale.py's ``TantivyPeer``), called inline: its search and the 10 hits'
     stored row numbers, no thread hop, no rows read.
   Top-10 ids: native against numpy must be identical (counted).
2. queries/s with C calls in flight (C = 1, 8, 32), each call ``BM25Retriever(store).retrieve(q, k=10)``,
   native and numpy, and tantivy from anyio's worker threads (``to_thread.run_sync``) at the same C.

Usage: python benchmarks/native_bm25.py [--corpora scifact,syn:100000] [--queries 300] [--out NAME]
tantivy is imported from the environment (pip install tantivy; or PYTHONPATH pointing at a --target folder).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus as corpora  # noqa: E402
from scale import TantivyPeer  # noqa: E402
from speed import synthetic  # noqa: E402

from fastrag.analysis import Analyzer  # noqa: E402
from fastrag.retrieval.bm25 import BM25Retriever  # noqa: E402
from fastrag.scoring import query_term_counts  # noqa: E402
from fastrag.vector_store.sqlite import SQLiteVectorStore, lexical, native  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


class KernelTimer:
    """Wraps lexical.bm25_top (the store calls it through the module) and adds up the seconds inside it."""

    def __init__(self) -> None:
        self.inner = lexical.bm25_top
        self.seconds = 0.0

    def __call__(self, *a, **kw):
        t = time.perf_counter()
        try:
            return self.inner(*a, **kw)
        finally:
            self.seconds += time.perf_counter() - t


def p50(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


async def measure(spec: str, n_queries: int, workdir: Path) -> dict:
    if spec == "scifact":
        c = corpora.load("scifact")
        docs = c.docs
    else:
        docs, _ = synthetic(int(spec.split(":")[1]))
    queries = list(corpora.load("scifact").queries.values())
    queries = [queries[i % len(queries)] for i in range(n_queries)]
    res: dict = {"corpus": spec, "docs": len(docs), "queries": n_queries}
    analyzer = Analyzer()
    store = SQLiteVectorStore(workdir / f"{spec.replace(':', '_')}.db")
    t = time.perf_counter()
    for i in range(0, len(docs), 2000):
        await store.upsert(docs[i : i + 2000])
    res["ingest_s"] = time.perf_counter() - t
    term_lists = [store._index_terms(d) for d in docs]  # the store's own analysed terms
    ids = [d.id for d in docs]
    peer = None
    try:
        import tantivy

        t = time.perf_counter()
        peer = TantivyPeer(tantivy, workdir / f"tantivy_{spec.replace(':', '_')}", term_lists, ids)
        res["tantivy_index_s"] = time.perf_counter() - t
        res["tantivy_version"] = getattr(tantivy, "__version__", "?")
    except ImportError as exc:
        res["tantivy_missing"] = str(exc)
    del term_lists
    qterms = [[t for t, n in query_term_counts([analyzer.analyze(q, for_query=True)]).items() for _ in range(n)]
              for q in queries]  # fmt: skip

    timer = KernelTimer()
    lexical.bm25_top = timer
    series: dict[str, list[float]] = {k: [] for k in ("store_native", "store_numpy", "kernel_native", "kernel_numpy", "tantivy")}
    same = 0
    try:
        for flag in ("1", "0"):  # warm both paths (postings cache, snapshot)
            os.environ["FASTRAG_NATIVE"] = flag
            for q in queries[:50]:
                await store.search_text(q, k=10)
        systems = ["native", "numpy"] + (["tantivy"] if peer else [])
        for i, q in enumerate(queries):
            got = {}
            for name in systems[i % len(systems):] + systems[: i % len(systems)]:
                if name == "tantivy":
                    t = time.perf_counter()
                    peer.search(qterms[i], 10)
                    series["tantivy"].append(time.perf_counter() - t)
                    continue
                os.environ["FASTRAG_NATIVE"] = "1" if name == "native" else "0"
                timer.seconds = 0.0
                t = time.perf_counter()
                hits = await store.search_text(q, k=10)
                series[f"store_{name}"].append(time.perf_counter() - t)
                series[f"kernel_{name}"].append(timer.seconds)
                got[name] = [(d.id, round(d.score, 9)) for d in hits]
            same += got["native"] == got["numpy"]
    finally:
        lexical.bm25_top = timer.inner
    res["p50_ms"] = {k: 1000 * p50(v) for k, v in series.items() if v}
    res["top10_identical"] = f"{same}/{len(queries)}"

    # queries/s under concurrency
    retriever = BM25Retriever(store=store)
    qps: dict[str, dict[int, float]] = {"native": {}, "numpy": {}, "tantivy": {}}
    total = min(len(queries), 300)
    for calls in (1, 8, 32):
        for name in ("native", "numpy", "tantivy"):
            if name == "tantivy" and peer is None:
                continue
            os.environ["FASTRAG_NATIVE"] = "0" if name == "numpy" else "1"
            limiter = anyio.CapacityLimiter(calls)
            todo = iter(range(total))

            async def one_caller() -> None:
                for j in todo:
                    if name == "tantivy":
                        await anyio.to_thread.run_sync(peer.search, qterms[j], 10, limiter=limiter)
                    else:
                        await retriever.retrieve(queries[j], k=10)

            t = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for _ in range(calls):
                    tg.start_soon(one_caller)
            qps[name][calls] = total / (time.perf_counter() - t)
    res["qps"] = qps
    os.environ.pop("FASTRAG_NATIVE", None)
    await store.aclose()
    return res


def table(results: list[dict]) -> list[str]:
    def f(x: float, d: int = 3) -> str:
        return f"{x:.{d}f}"

    lines = ["## BM25 p50 (ms), interleaved per query", "",
             "| corpus | docs | store native | store numpy | ÷ numpy | kernel native | kernel numpy | kernel ÷ numpy | "
             "tantivy (inline) | store native ÷ tantivy | kernel native ÷ tantivy | top-10 native = numpy |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]  # fmt: skip
    for r in results:
        p = r["p50_ms"]
        tv = p.get("tantivy", float("nan"))
        lines.append(
            f"| {r['corpus']} | {r['docs']:,} | {f(p['store_native'])} | {f(p['store_numpy'])} | "
            f"{f(p['store_native'] / p['store_numpy'], 2)}x | {f(p['kernel_native'])} | {f(p['kernel_numpy'])} | "
            f"{f(p['kernel_native'] / p['kernel_numpy'], 2)}x | {f(tv)} | {f(p['store_native'] / tv, 2)}x | "
            f"{f(p['kernel_native'] / tv, 2)}x | {r['top10_identical']} |"
        )
    lines += ["", "## queries/s at 1 / 8 / 32 calls in flight", "",
              "| corpus | native | native 8÷1, 32÷1 | numpy | numpy 8÷1, 32÷1 | tantivy (thread pool) | native ÷ numpy at 32 |",
              "| --- | --- | --- | --- | --- | --- | ---: |"]  # fmt: skip
    for r in results:
        q = r["qps"]

        def row(name: str) -> tuple[str, str]:
            v = q.get(name) or {}
            if not v:
                return "-", "-"
            v = {int(c): x for c, x in v.items()}
            return " / ".join(f"{v[c]:,.0f}" for c in (1, 8, 32)), f"{v[8] / v[1]:.2f}, {v[32] / v[1]:.2f}"

        (n, nr), (m, mr), (t, _) = row("native"), row("numpy"), row("tantivy")
        ratio = {int(c): x for c, x in q["native"].items()}[32] / {int(c): x for c, x in q["numpy"].items()}[32]
        lines.append(f"| {r['corpus']} | {n} | {nr} | {m} | {mr} | {t} | {ratio:.2f}x |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpora", default="scifact,syn:100000")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--out", default="native_bm25")
    args = ap.parse_args()
    if not native.enabled():
        sys.exit(f"the native core is not built: {native.unavailable_reason()}")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.corpora.split(","):
            r = anyio.run(measure, spec, args.queries, Path(tmp))
            print(json.dumps(r), flush=True)
            results.append(r)
    load = os.getloadavg()
    head = [f"# Native BM25 core vs numpy path vs tantivy ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
            f"`python benchmarks/native_bm25.py --corpora {args.corpora} --queries {args.queries}`; "
            f"{platform.machine()}, {os.cpu_count()} cores shared with other work (load at the end {load[0]:.1f}); "
            "k = 10. Ratios are within one run, the systems interleaved per query.", ""]  # fmt: skip
    text = "\n".join(head + table(results)) + "\n"
    print(text)
    (RESULTS / f"{args.out}.md").write_text(text, encoding="utf-8")
    (RESULTS / f"{args.out}.json").write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
