"""Speed of fastrag's embedded default (SQLite): ingestion, latency, throughput under concurrency, memory,
and two ratios measured in the same run.

Corpora:

* ``scifact``: BEIR SciFact (5,183 abstracts), vectors of the shipped static model (cached on disk);
* ``synthetic``: ``--synthetic-size`` chunks (default 200,000) of 30 to 90 words drawn from SciFact's
  word distribution (so SciFact's queries hit realistic posting lists), random unit vectors of 256 dims.

Queries: SciFact's 300 test questions (cycled), their vectors precomputed (scifact: the static model;
synthetic: random), so embedding time is excluded everywhere and the numbers measure retrieval.

Measured per corpus, each in a fresh subprocess (so peak memory is the corpus's own):

* documents/s of ``SQLiteVectorStore.upsert`` in batches of 1,000 with vectors (BM25 analysis included);
* p50/p95 latency of ``retrieve(q, k=10)`` for BM25, dense and hybrid (the shipped default
  ``HybridRetriever``), queries one at a time;
* queries/s of the hybrid at concurrency 1, 8 and 64 (that many queries in flight on one store);
* peak resident memory (``ru_maxrss``) and the resident size after loading, before indexing;
* **overhead**: fastrag's ``BM25Retriever`` / ``VectorRetriever`` against the same work done directly
  (its SQL on a second ``sqlite3`` connection to the same file, the same numpy scoring, rows decoded to
  ``(id, score, content, metadata)``), interleaved query by query; overhead = median ratio − 1. The
  direct call is measured twice: awaited in a worker thread (``anyio.to_thread.run_sync``), which is how
  an async service must call a blocking client such as ``sqlite3`` without stalling its event loop, and
  is the baseline of the 5% target; and inline (blocking the loop), shown beside it, whose difference is
  the cost of that one hand-off;
* **hybrid / slowest branch**: per query, the hybrid's latency against the slower of its two branches
  run alone with the same ``candidate_k``, each the best of ``--repeat``; reported as the ratio of medians. The store serves the two
  branches on two read connections at once; the table also shows the median fusion time and each branch's
  time inside the hybrid (``retrieve_result(...).timings``), which say where the rest goes; and the
  floor no concurrent hybrid can beat on this machine: the direct baseline's two searches (no fastrag, no
  fusion) started together in two worker threads on two connections, against the slower one alone.

Run from the repository root::

    python benchmarks/speed.py                          # scifact + 200,000 synthetic chunks
    python benchmarks/speed.py --synthetic-size 50000   # quicker
    python benchmarks/speed.py --smoke                  # CI: 200 SciFact docs, 2,000 synthetic chunks

The measuring processes run numpy's BLAS single-threaded (``--blas-threads 1``; 0 keeps the library's
default), for fastrag and the direct baseline alike.

Writes ``benchmarks/results/speed.md`` (``--out``) and ``speed.json`` beside it.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import re
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import anyio
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus as corpora  # noqa: E402
import embeddings  # noqa: E402
from embeddings import STATIC  # noqa: E402

from fastrag.models import Document  # noqa: E402
from fastrag.retrieval import BM25Retriever, HybridRetriever, VectorRetriever  # noqa: E402
from fastrag.testing.fakes import PrecomputedEmbedder  # noqa: E402
from fastrag.vector_store.sqlite import lexical  # noqa: E402
from fastrag.vector_store.sqlite import SQLiteVectorStore  # noqa: E402

# The store's BM25 parameters (Lucene's defaults), read from it so the direct baseline scores identically.
_BM25_K1, _BM25_B = lexical.BM25_K1, lexical.BM25_B

HERE = Path(__file__).resolve().parent
K = 10


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


# ------------------------------------------------------------------ corpora


def synthetic(size: int, seed: int = 0) -> tuple[list[Document], np.ndarray]:
    """``size`` chunks of 30-90 words drawn from SciFact's unigram distribution; random unit vectors."""
    source = corpora.load("scifact")
    counts = Counter(w for t in source.texts for w in re.findall(r"[A-Za-z][A-Za-z0-9-]+", t.lower()))
    words = list(counts)
    p = np.array(list(counts.values()), dtype=np.float64)
    p /= p.sum()
    rng = np.random.default_rng(seed)
    lengths = rng.integers(30, 91, size)
    flat = rng.choice(len(words), size=int(lengths.sum()), p=p).astype(np.int32)  # word indices, not strings
    docs, pos = [], 0
    for i, n in enumerate(lengths):
        docs.append(Document(id=f"syn-{i}", content=" ".join([words[j] for j in flat[pos : pos + n].tolist()]),
                             metadata={"n": int(n)}))
        pos += n
    del flat
    vectors = embeddings.l2(rng.standard_normal((size, 256), dtype=np.float32))
    return docs, vectors


def load_corpus(name: str, args) -> tuple[list[Document], np.ndarray, dict[str, np.ndarray]]:
    queries = corpora.load("scifact").queries
    if name == "scifact":
        c = corpora.load("scifact", max_docs=args.scifact_docs)
        tag = "scifact" if args.scifact_docs is None else "scifact-slice"
        docs = c.docs
        vectors = embeddings.cached_vectors(STATIC, tag, "corpus", c.texts, log=log)
        qv = embeddings.cached_vectors(STATIC, "scifact", "queries", list(queries.values()), log=log)
    else:
        docs, vectors = synthetic(args.synthetic_size)
        qv = embeddings.l2(np.random.default_rng(1).standard_normal((len(queries), 256), dtype=np.float32))
    return docs, vectors, dict(zip(queries.values(), qv, strict=True))


# ------------------------------------------------------------------ the direct baseline


class DirectSQLite:
    """What a user calling SQLite and numpy directly would run: the store's SQL and scoring, no fastrag layer.

    It reads the store's own layout once (the blocks' rowids, lengths and vectors; schema 3), then per
    query the packed postings rows of the query's terms from every segment, scored with the same Lucene
    BM25 by numpy, and the rows of the top hits."""

    def __init__(self, path: str, analyzer) -> None:
        self.conn = sqlite3.connect(path, check_same_thread=False)
        self.analyzer = analyzer
        rowids, lengths, vectors = [], [], []
        for rows_b, lengths_b, vectors_b in self.conn.execute("SELECT rows, lengths, vectors FROM blocks ORDER BY id"):
            rows = np.frombuffer(rows_b, dtype="<i4").astype(np.int64)
            rowids.append(rows)
            lengths.append(np.frombuffer(lengths_b, dtype="<i4"))
            if vectors_b is not None:
                vectors.append(np.frombuffer(vectors_b, dtype="<f4").reshape(len(rows), -1))
        live = {r for (r,) in self.conn.execute("SELECT rowid FROM documents")}
        all_rows = np.concatenate(rowids)
        keep = np.fromiter((r in live for r in all_rows.tolist()), dtype=bool, count=len(all_rows))
        self.lengths = np.zeros(int(all_rows.max()) + 1)
        self.lengths[all_rows[keep]] = np.concatenate(lengths)[keep]
        self.n, self.avgdl = int(keep.sum()), float(self.lengths.sum()) / int(keep.sum())
        self.matrix = np.ascontiguousarray(np.concatenate(vectors)[keep]) if vectors else np.zeros((0, 0), np.float32)
        self.rowids = all_rows[keep]
        self.segments = [r[0] for r in self.conn.execute("SELECT id FROM segments")]
        self.live = np.zeros(len(self.lengths), dtype=bool)
        self.live[self.rowids] = True

    def _rows(self, rowids: np.ndarray, scores: np.ndarray, k: int) -> list[tuple]:
        top = np.argpartition(-scores, min(k, len(scores) - 1))[:k] if len(scores) > k else np.arange(len(scores))
        top = top[np.argsort(-scores[top], kind="stable")]
        chosen = rowids[top].tolist()
        found = {r: (i, c, m) for r, i, c, m in self.conn.execute(
            f"SELECT rowid, id, content, metadata FROM documents WHERE rowid IN ({','.join('?' * len(chosen))})", chosen)}
        hits = [(found[r][0], float(s), found[r][1], json.loads(found[r][2])) for r, s in zip(chosen, scores[top], strict=True)]
        hits.sort(key=lambda h: (-h[1], h[0]))  # ties by id, as the store breaks them
        return hits

    def bm25(self, query: str, k: int) -> list[tuple]:
        terms = sorted(set(self.analyzer.analyze(query, for_query=True)))
        # the store's query: per segment and term, the packed rowids (int32) and term frequencies (uint16)
        found = self.conn.execute(
            f"SELECT term, docs, tfs FROM postings WHERE segment IN ({','.join('?' * len(self.segments))}) "
            f"AND term IN ({','.join('?' * len(terms))})", [*self.segments, *terms]).fetchall()
        if not found:
            return []
        docs = np.concatenate([np.frombuffer(d, dtype="<i4") for _, d, _ in found])
        tf = np.concatenate([np.frombuffer(f, dtype="<u2" if 2 * len(f) == len(d) else "<u4") for _, d, f in found]).astype(np.float64)
        index: dict[str, int] = {}
        term_ids = np.repeat([index.setdefault(t, len(index)) for t, _, _ in found], [len(d) // 4 for _, d, _ in found])
        keep = self.live[docs]
        docs, tf, term_ids = docs[keep], tf[keep], term_ids[keep]
        df = np.bincount(term_ids, minlength=len(index)).astype(np.float64)
        idf = np.log1p((self.n - df + 0.5) / (df + 0.5))
        norm = _BM25_K1 * (1.0 - _BM25_B + _BM25_B * self.lengths[docs] / self.avgdl)
        contributions = idf[term_ids] * tf * (_BM25_K1 + 1.0) / (tf + norm)
        candidates, inverse = np.unique(docs, return_inverse=True)
        return self._rows(candidates, np.bincount(inverse, weights=contributions), k)

    def vector(self, query: np.ndarray, k: int) -> list[tuple]:
        return self._rows(self.rowids, self.matrix @ (query / np.linalg.norm(query)), k)


# ------------------------------------------------------------------ measurements


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def parallel_capacity() -> float:
    """CPU seconds per wall second of two threads doing the same GIL-free numpy work at once: about 2.0 when
    two cores are free for this process, about 1.0 when other work leaves it one (then no concurrency can
    shorten a hybrid query, however its branches are scheduled)."""
    a = np.random.default_rng(0).standard_normal((384, 384)).astype(np.float32)

    def work() -> None:
        for _ in range(40):
            a @ a

    threads = [threading.Thread(target=work) for _ in range(2)]
    wall, cpu = time.perf_counter(), time.process_time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return (time.process_time() - cpu) / (time.perf_counter() - wall)


async def latency(fn, queries: list[str], k: int = K) -> list[float]:
    out = []
    for q in queries:
        start = time.perf_counter()
        await fn(q, k=k)
        out.append((time.perf_counter() - start) * 1000)
    return out


async def throughput(retriever, queries: list[str], concurrency: int, total: int) -> float:
    todo = iter(range(total))

    async def worker() -> None:
        for i in todo:
            await retriever.retrieve(queries[i % len(queries)], k=K)

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(worker)
    return total / (time.perf_counter() - start)


async def worker(corpus: str, args) -> dict:
    rss_start = rss_mb()
    docs, vectors, qtable = load_corpus(corpus, args)
    queries = list(qtable)[: args.queries]
    embedder = PrecomputedEmbedder(STATIC, qtable)
    rss_loaded = rss_mb()
    result: dict = {"corpus": corpus, "store": "SQLite (file, WAL)", "docs": len(docs), "queries": len(queries)}
    with tempfile.TemporaryDirectory(prefix="fastrag-speed-") as tmp:
        path = str(Path(tmp) / "bench.db")
        async with SQLiteVectorStore(path, embedding_model=STATIC) as store:
            start = time.perf_counter()
            for i in range(0, len(docs), 1000):
                await store.upsert(docs[i : i + 1000], embeddings=vectors[i : i + 1000])
            ingest_s = time.perf_counter() - start
            result["ingest_docs_per_s"] = len(docs) / ingest_s
            result["ingest_s"] = ingest_s
            result["db_mb"] = sum(p.stat().st_size for p in Path(tmp).iterdir()) / 2**20
            log(f"  {corpus}: ingested {len(docs)} docs in {ingest_s:.1f} s")
            del docs, vectors
            bm25 = BM25Retriever(store=store)
            vector = VectorRetriever(vector_store=store, embedder=embedder)
            hybrid = HybridRetriever([VectorRetriever(vector_store=store, embedder=embedder), BM25Retriever(store=store)])
            cand = hybrid.candidate_k
            result["hybrid_candidate_k"], result["hybrid_fusion"] = cand, repr(hybrid.fusion)
            result["read_connections"] = getattr(store, "_max_readers", 1)
            for r in (bm25, vector, hybrid):
                await r.retrieve(queries[0], k=K)  # load the vector matrix and BM25 lengths once
            for name, r in (("bm25", bm25), ("dense", vector), ("hybrid", hybrid)):
                lat = await latency(r.retrieve, queries)
                result[f"{name}_p50_ms"], result[f"{name}_p95_ms"] = pct(lat, 50), pct(lat, 95)
            log(f"  {corpus}: latency done")
            # hybrid against its slowest branch, interleaved per query, the branches at candidate_k
            capacity = [parallel_capacity()]
            h, slow = [], []
            for q in queries:  # best of --repeat per query, the same statistic as the floor below
                hq, sq = [], []
                for _ in range(args.repeat):
                    t = await latency(bm25.retrieve, [q], k=cand)
                    t += await latency(vector.retrieve, [q], k=cand)
                    sq.append(max(t))
                    hq += await latency(hybrid.retrieve, [q])
                slow.append(min(sq))
                h.append(min(hq))
            result["hybrid_over_slowest_branch"] = statistics.median(h) / statistics.median(slow)
            capacity.append(parallel_capacity())
            result["parallel_capacity"] = statistics.mean(capacity)
            stages = [(await hybrid.retrieve_result(q, k=K)).timings for q in queries]
            for stage_name in ("fusion", "bm25", "vector"):
                result[f"hybrid_{stage_name}_stage_p50_ms"] = pct([t[stage_name] * 1000 for t in stages], 50)
            result["hybrid_over_branch_sum"] = statistics.median(h) / statistics.median(
                [a + b for a, b in zip(await latency(bm25.retrieve, queries, k=cand),
                                       await latency(vector.retrieve, queries, k=cand), strict=True)])
            # overhead against the direct baseline, interleaved query by query
            direct = DirectSQLite(path, store.analyzer)
            for name, ours, theirs in (
                ("bm25", lambda q: bm25.retrieve(q, k=K), lambda q: direct.bm25(q, K)),
                ("dense", lambda q: vector.retrieve(q, k=K), lambda q: direct.vector(qtable[q], K)),
            ):
                f_t, d_t, w_t, paired, paired_inline, same = [], [], [], [], [], 0
                for q in queries:
                    fq, dq, wq = [], [], []
                    for _ in range(args.repeat):
                        s = time.perf_counter()
                        got = await ours(q)
                        fq.append(time.perf_counter() - s)
                        s = time.perf_counter()
                        ref = theirs(q)  # inline: blocks the event loop, which an async service must not do
                        dq.append(time.perf_counter() - s)
                        s = time.perf_counter()
                        await anyio.to_thread.run_sync(theirs, q)  # how an async caller runs a blocking client
                        wq.append(time.perf_counter() - s)
                    f_t += fq
                    d_t += dq
                    w_t += wq
                    paired.append(min(fq) / min(wq))  # the least-disturbed of the repeats, per query
                    paired_inline.append(min(fq) / min(dq))
                    same += [d.id for d in got] == [r[0] for r in ref]
                result[f"{name}_direct_p50_ms"] = statistics.median(w_t) * 1000
                result[f"{name}_direct_inline_p50_ms"] = statistics.median(d_t) * 1000
                result[f"{name}_fastrag_p50_ms"] = statistics.median(f_t) * 1000
                result[f"{name}_overhead"] = statistics.median(paired) - 1
                result[f"{name}_overhead_inline"] = statistics.median(paired_inline) - 1
                result[f"{name}_same_results"] = same / len(queries)
            # The floor any concurrent hybrid faces here: the same two searches done directly (no fastrag, no
            # fusion), at candidate_k, each on its own connection in its own worker thread, started together,
            # against the slower of the two run alone the same way.
            lexical = copy.copy(direct)  # shares the loaded lengths and vectors, not the connection
            lexical.conn = sqlite3.connect(path, check_same_thread=False)
            together, slower = [], []
            for q in queries:
                alone, both = [], []
                for _ in range(args.repeat):
                    a = time.perf_counter()
                    await anyio.to_thread.run_sync(lexical.bm25, q, cand)
                    b = time.perf_counter()
                    await anyio.to_thread.run_sync(direct.vector, qtable[q], cand)
                    c = time.perf_counter()
                    alone.append(max(b - a, c - b))
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(anyio.to_thread.run_sync, lexical.bm25, q, cand)
                        tg.start_soon(anyio.to_thread.run_sync, direct.vector, qtable[q], cand)
                    both.append(time.perf_counter() - c)
                slower.append(min(alone))
                together.append(min(both))
            result["direct_both_over_slowest"] = statistics.median(together) / statistics.median(slower)
            lexical.conn.close()
            direct.conn.close()
            hops = []  # what one hand-off to a worker thread and back costs on this machine right now
            for _ in range(200):
                start = time.perf_counter()
                await anyio.to_thread.run_sync(int)
                hops.append((time.perf_counter() - start) * 1000)
            result["thread_hop_p50_ms"], result["thread_hop_p95_ms"] = pct(hops, 50), pct(hops, 95)
            log(f"  {corpus}: ratios done")
            for c in args.concurrency:
                result[f"hybrid_qps_c{c}"] = await throughput(hybrid, queries, c, max(args.qps_queries, c))
                result[f"bm25_qps_c{c}"] = await throughput(bm25, queries, c, max(args.qps_queries, c))
                result[f"dense_qps_c{c}"] = await throughput(vector, queries, c, max(args.qps_queries, c))
            log(f"  {corpus}: throughput done")
    result["loadavg_1min_end"] = os.getloadavg()[0]
    result["rss_after_load_mb"] = rss_loaded
    result["rss_start_mb"] = rss_start
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def _three(r: dict, name: str) -> str:
    return (f"{r[f'{name}_fastrag_p50_ms']:.3f} / {r[f'{name}_direct_p50_ms']:.3f} / "
            f"{r[f'{name}_direct_inline_p50_ms']:.3f}")


def table(results: list[dict], concurrency: list[int]) -> list[str]:
    lines = ["| corpus | docs | ingest docs/s | BM25 p50 / p95 ms | dense p50 / p95 ms | hybrid p50 / p95 ms | "
             + " | ".join(f"hybrid q/s c={c}" for c in concurrency) + " | peak RSS MB (after load) |",
             "|---|---|---|---|---|---|" + "---|" * len(concurrency) + "---|"]
    for r in results:
        lines.append(
            f"| {r['corpus']} | {r['docs']:,} | {r['ingest_docs_per_s']:,.0f} | {r['bm25_p50_ms']:.2f} / {r['bm25_p95_ms']:.2f} | "
            f"{r['dense_p50_ms']:.2f} / {r['dense_p95_ms']:.2f} | {r['hybrid_p50_ms']:.2f} / {r['hybrid_p95_ms']:.2f} | "
            + " | ".join(f"{r[f'hybrid_qps_c{c}']:.1f}" for c in concurrency)
            + f" | {r['peak_rss_mb']:.0f} ({r['rss_after_load_mb']:.0f}) |")
    lines += ["", "Per-branch throughput (queries/s):", "",
              "| corpus | " + " | ".join(f"BM25 c={c}" for c in concurrency) + " | "
              + " | ".join(f"dense c={c}" for c in concurrency) + " |",
              "|---|" + "---|" * (2 * len(concurrency))]
    for r in results:
        lines.append(f"| {r['corpus']} | " + " | ".join(f"{r[f'bm25_qps_c{c}']:.1f}" for c in concurrency) + " | "
                     + " | ".join(f"{r[f'dense_qps_c{c}']:.1f}" for c in concurrency) + " |")
    lines += ["", "Ratios (same run):", "",
              "| corpus | BM25: fastrag / direct in a worker thread / direct inline, p50 ms | BM25 overhead "
              "(in brackets: against inline) | dense: fastrag / direct in a worker thread / direct inline, p50 ms | "
              "dense overhead (in brackets: against inline) | same top-10 as direct (BM25 / dense) | hybrid / slowest branch | hybrid / sum of branches | "
              "the two direct searches at once / the slower alone | "
              "in the hybrid: BM25 / dense / fusion p50 ms | two threads' CPU s per wall s | "
              "one worker-thread hop p50 / p95 ms | overhead <= 5%? | hybrid <= 1.15x slowest? |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        over = max(r["bm25_overhead"], r["dense_overhead"])
        lines.append(
            f"| {r['corpus']} | {_three(r, 'bm25')} | {r['bm25_overhead']:+.1%} ({r['bm25_overhead_inline']:+.1%}) | "
            f"{_three(r, 'dense')} | {r['dense_overhead']:+.1%} ({r['dense_overhead_inline']:+.1%}) | "
            f"{r['bm25_same_results']:.0%} / {r['dense_same_results']:.0%} | {r['hybrid_over_slowest_branch']:.2f}x | "
            f"{r['hybrid_over_branch_sum']:.2f}x | {r['direct_both_over_slowest']:.2f}x | {r['hybrid_bm25_stage_p50_ms']:.2f} / {r['hybrid_vector_stage_p50_ms']:.2f} / "
            f"{r['hybrid_fusion_stage_p50_ms']:.2f} | {r['parallel_capacity']:.2f} | {r['thread_hop_p50_ms']:.3f} / {r['thread_hop_p95_ms']:.3f} | "
            f"{'yes' if over <= 0.05 else 'NO'} | "
            f"{'yes' if r['hybrid_over_slowest_branch'] <= 1.15 else 'NO'} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", nargs="+", choices=["scifact", "synthetic"], default=["scifact", "synthetic"],
                        help="which corpora to measure, each in its own process (default: both)")
    parser.add_argument("--synthetic-size", type=int, default=200_000, help="chunks in the synthetic corpus")
    parser.add_argument("--scifact-docs", type=int, default=None, help="a slice of SciFact (default: all)")
    parser.add_argument("--queries", type=int, default=300, help="distinct queries (SciFact test, at most 300)")
    parser.add_argument("--qps-queries", type=int, default=300, help="queries per throughput measurement")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64],
                        help="queries in flight for the queries/s measurements (each >= 1)")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions per query for the overhead ratio")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "speed.md",
                        help="the markdown report (the JSON goes beside it); default: benchmarks/results/speed.md")
    parser.add_argument("--smoke", action="store_true",
                        help="CI: a SciFact slice (200 documents plus those judged for the queries), 2,000 synthetic "
                             "chunks, 20 queries, 1 repeat")
    parser.add_argument("--blas-threads", type=int, default=1,
                        help="OPENBLAS/OMP threads in the measuring process (default 1: on a small shared machine a "
                             "multi-threaded matrix-vector product stalls for milliseconds waiting for a busy core)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    for name in ("synthetic_size", "queries", "qps_queries", "repeat"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if min(args.concurrency) < 1:
        parser.error("--concurrency values must be at least 1")
    if args.smoke:
        args.synthetic_size, args.scifact_docs = min(args.synthetic_size, 2000), args.scifact_docs or 200
        args.queries, args.qps_queries, args.repeat = 20, 64, 1
        args.concurrency = [1, 8, 64]
    if args.worker:
        print(json.dumps(anyio.run(worker, args.worker, args)))
        return
    started = time.perf_counter()
    load_start = os.getloadavg()
    results = []
    for corpus in args.corpora:
        log(f"{corpus}:")
        cmd = [sys.executable, __file__, *sys.argv[1:], "--worker", corpus]
        env = dict(os.environ)
        if args.blas_threads:
            env.update({v: str(args.blas_threads) for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")})
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True, env=env)
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    elapsed = time.perf_counter() - started
    load = os.getloadavg()
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout if sys.platform == "linux" else ""
    model = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name")), "?")
    lines = [
        "# Speed of the embedded default store (SQLite)",
        "",
        f"Generated by `python benchmarks/speed.py {' '.join(sys.argv[1:])}` in {elapsed:.0f} s: {os.cpu_count()} cores "
        f"({model}), Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}. Queries: SciFact test "
        f"questions with precomputed vectors; `k={K}`; hybrid = `HybridRetriever([VectorRetriever, BM25Retriever])` "
        f"as shipped (`candidate_k={results[0].get('hybrid_candidate_k')}`, `{results[0].get('hybrid_fusion')}`), "
        f"the store serving reads on up to {results[0].get('read_connections')} read connections; "
        f"BLAS threads: {args.blas_threads or 'library default'}. Latency: one query at a time. Overhead: median over queries of (fastrag's best of "
        f"{args.repeat} / direct's best of {args.repeat}) − 1, against the direct call awaited in a worker thread (how an "
        "async service calls sqlite3 without blocking its event loop); in brackets, against the direct call made inline. Load average (1, 5, 15 min) at the start: "
        f"{load_start[0]:.1f}, {load_start[1]:.1f}, {load_start[2]:.1f}; at the end: "
        f"{load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f}; on a loaded machine every hand-off to a worker thread waits for the scheduler, "
        "which fastrag and the worker-thread baseline pay and the inline call does not.",
        "",
        *table(results, args.concurrency),
        "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
