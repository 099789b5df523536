"""Scale: the embedded store (SQLite) against bm25s, tantivy, numpy and faiss, from SciFact (5,183 documents)
to 1,000,000 synthetic chunks, side by side in one run. The targets are issue 12's.

Corpora, each measured in its own subprocess (so peak memory is that corpus's own), its store in a folder of
``--workdir`` (default: a new temporary folder) that is deleted afterwards:

* ``scifact``: BEIR SciFact, vectors of the shipped static model (cached on disk, ``embeddings.py``);
* ``synthetic:<n>`` for each of ``--sizes``: ``speed.py``'s ``synthetic(n)`` generator (imported, not copied),
  with ``metadata["cat"] = i % 100`` added here, so ``field("cat") == 7`` matches 1% of the chunks and
  ``field("n") >= 60`` (``n``, the word count, 30 to 90) about half.

Queries: SciFact's test questions, cycled to ``--queries``; their vectors as ``speed.py`` makes them (the static
model on SciFact, random unit vectors on the synthetic corpora), handed to fastrag through ``PrecomputedEmbedder``
and to the peers directly, so no latency includes embedding.

fastrag is driven through its public API only: ``SQLiteVectorStore(path)``, ``upsert`` in batches of 1,000 with
vectors, ``BM25Retriever(store=store)``, ``VectorRetriever(vector_store=store, embedder=...)``, the shipped
default ``HybridRetriever([vector, bm25])``, ``await r.retrieve(q, k=10, filter=...)``. The peers run in the same
process, called inline (a script's way; fastrag hands each search to a worker thread, whose cost is reported
as "thread hop"):

* **bm25s** (in memory, ``method="lucene"``, k1 1.2, b 0.75 as the store) indexes fastrag's analysed terms
  (``store.analyzer.analyze(text)``, text = title + newline + content as the store indexes it) and is queried
  with ``analyze(q, for_query=True)``, deduplicated as the store does: both rank the same terms with the same
  BM25 (bm25s drops Lucene's constant ``k1 + 1`` factor, which does not change the order);
* **tantivy** (the official bindings, an on-disk index in the workdir) gets the same terms joined by spaces
  into a field whose analyzer is tantivy's whitespace tokenizer alone (registered as ``fastrag_terms``: no
  lowercasing, no stemming, no long-token removal, so every term arrives unchanged), indexed with term
  frequencies and no positions; a query is a ``BooleanQuery`` of ``SHOULD`` ``TermQuery``s built directly
  (no query parser, whose syntax could reinterpret a term), searched with ``count=False`` (top 10
  only, so tantivy may skip blocks; counting every match would forbid that); the 10 hits' row numbers are
  read from a stored field;
* **numpy** exact k-NN: ``m @ q`` then ``argpartition`` and a sort of the top 10, the matrix in RAM;
* **faiss** ``IndexFlatIP`` (exact inner product; the vectors are unit length, so cosine).

Measured per corpus, query by query, the systems of one measure interleaved in an order rotated per query;
every latency is the p50 over ``--queries`` queries and every ratio a ratio of those medians:

1. BM25: fastrag, bm25s, tantivy; fastrag ÷ the faster peer (SciFact: ÷ bm25s); top-10 overlap as a check.
2. Filters (synthetic corpora): BM25 and dense with no filter, with ``cat == 7`` (1%) and with ``n >= 60``
   (about 50%): filtered ÷ unfiltered; the hits are checked against the filter and for a full top 10.
3. Exact dense: fastrag, numpy, faiss, and the read-only memory floor: bytes scanned (n x dim x 4) ÷ the read
   bandwidth measured in the same process (best of several ``np.add.reduce`` passes over 1 GiB, or over the
   matrix itself when it is larger; measured before and after the dense queries, the best kept).
4. Approximate index: ``SQLiteVectorStore(path, vector_index="hnsw")`` if the store accepts it (else "not
   available"): recall@10 against numpy's exact top 10, and p50 ÷ the exact store's p50.
5. Hybrid: p50 of the shipped hybrid ÷ p50 of its slowest branch, the branches being the same retriever
   objects run alone at the hybrid's ``candidate_k`` (slowest per query, as ``speed.py``; the ratio to the
   larger of the two branch medians is shown beside it).
6. Ingest: wall time, docs/s, CPU ms per document (``getrusage`` user + sys of the process ÷ documents), bytes
   written (``/proc/self/io`` ``write_bytes``) ÷ the final size on disk of every file in the store's folder
   after ``aclose()`` (listed), peak RSS (which includes the corpus held in memory; its RSS is shown too).
7. Reader under a trickle writer, at the synthetic size nearest 100,000: a writer process (``spawn``) upserts 10
   new documents every 0.2 s into the same file while this process runs BM25 and dense queries, in time
   blocks alternating without and with the writer; p50 with ÷ p50 without. The writer stops at the end, and
   by itself after ``--writer-seconds`` or if its parent dies.
8. Memory: a separate fastrag-only process (``spawn``) opens the store, runs queries of every kind, and reports
   its RSS ÷ (vector bytes n x dim x 4 + index bytes on disk). Index bytes: every SQLite b-tree but the
   ``documents`` table (which holds the text, the metadata and, today, the vectors, counted as n x dim x 4
   instead), per ``dbstat``, plus every file beside the database but its ``-wal`` and ``-shm`` (an ANN index).
   The RSS above that process's own baseline (interpreter, numpy, fastrag imported) is shown beside it.

Run from the repository root::

    python benchmarks/scale.py                                  # SciFact + 10k, 100k, 300k, 1M (hours)
    python benchmarks/scale.py --sizes 10000,100000             # minutes
    python benchmarks/scale.py --smoke --out /tmp/scale.md      # CI: 300 SciFact docs, 2,000 chunks, 20 queries

Writes ``benchmarks/results/scale.md`` (``--out``), ``scale.json`` (raw, with every latency), and the charts
``scale-latency.png`` and ``scale-ingest.png`` beside it. BLAS and OpenMP run one thread
(``--blas-threads``), for fastrag and the peers alike.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.metadata
import inspect
import gc
import json
import re
import math
import multiprocessing
import os
import platform
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import anyio
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import corpus as corpora  # noqa: E402
import embeddings  # noqa: E402
import speed  # noqa: E402
from speed import log, rss_mb  # noqa: E402
from embeddings import STATIC  # noqa: E402

from fastrag.errors import ConfigurationError, InvalidParameterError  # noqa: E402
from fastrag.filters import field, matches  # noqa: E402
from fastrag.models import Document  # noqa: E402
from fastrag.retrieval import BM25Retriever, HybridRetriever, VectorRetriever  # noqa: E402
from fastrag.testing.fakes import PrecomputedEmbedder  # noqa: E402
from fastrag.vector_store.sqlite import SQLiteVectorStore  # noqa: E402

K = 10
BATCH = 1000
BM25_K1, BM25_B = 1.2, 0.75  # the store's BM25 parameters (Lucene's defaults), given to bm25s
FILTERS = {"1%": field("cat") == 7, "50%": field("n") >= 60}
FILTER_TEXT = {"1%": 'field("cat") == 7', "50%": 'field("n") >= 60'}
PAYLOAD_TABLES = {"documents"}  # b-trees of text, metadata and vectors: not index
PEERS = ("bm25s", "tantivy", "numpy", "faiss")
TRICKLE_DOCS, TRICKLE_PERIOD_S = 10, 0.2
TRICKLE_BLOCK_S = 2.0  # each time block lasts at least this long (10 commits), and runs at least its queries


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def proc_io() -> dict[str, int]:
    try:
        with open("/proc/self/io") as f:
            return {k: int(v) for k, v in (line.split(":") for line in f)}
    except OSError:
        return {}


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def p50(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ratio(a: float, b: float) -> float:
    return a / b if b and not (math.isnan(a) or math.isnan(b)) else float("nan")


def rotated(items: list, i: int) -> list:
    j = i % len(items) if items else 0
    return items[j:] + items[:j]


async def clocked(fn, *args, **kwargs) -> tuple[float, object]:
    """``(milliseconds, result)`` of one call; ``fn`` may be sync (a peer) or async (fastrag)."""
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    if inspect.isawaitable(result):
        result = await result
    return (time.perf_counter() - start) * 1000, result


def overlap(a: list[str], b: list[str]) -> float:
    return len(set(a) & set(b)) / max(1, min(K, len(a), len(b))) if a and b else float(a == b)


# ------------------------------------------------------------------ the peers


def optional(module: str, dist: str) -> tuple[object | None, str]:
    """The module and its distribution's version, or ``None`` and why not."""
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        return None, f"not installed ({exc}); pip install {dist}"
    try:
        return mod, importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return mod, str(getattr(mod, "__version__", "?"))


class Bm25sPeer:
    """bm25s over fastrag's analysed terms (in memory)."""

    def __init__(self, bm25s, term_lists: list[list[str]], ids: list[str]) -> None:
        self.model = bm25s.BM25(k1=BM25_K1, b=BM25_B, method="lucene")
        self.model.index(term_lists, show_progress=False)
        self.ids = ids

    def search(self, terms: list[str], k: int) -> list[str]:
        if not terms:
            return []
        found = self.model.retrieve([terms], k=k, show_progress=False, n_threads=0)
        # bm25s always returns k rows; rows scored 0 share no term with the query (the store omits them)
        return [self.ids[int(d)] for d, s in zip(found.documents[0], found.scores[0], strict=True) if s > 0]


class TantivyPeer:
    """tantivy over the same terms, joined by spaces, split again by its whitespace tokenizer (on disk)."""

    def __init__(self, tantivy, folder: Path, term_lists: list[list[str]], ids: list[str]) -> None:
        self.t = tantivy
        builder = tantivy.SchemaBuilder()
        builder.add_text_field("body", stored=False, tokenizer_name="fastrag_terms", index_option="freq")
        builder.add_unsigned_field("row", stored=True)
        self.schema = builder.build()
        folder.mkdir(parents=True, exist_ok=True)
        self.index = tantivy.Index(self.schema, path=str(folder), reuse=False)
        self.index.register_tokenizer("fastrag_terms", tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build())
        writer = self.index.writer(heap_size=256_000_000, num_threads=1)
        for row, terms in enumerate(term_lists):
            doc = tantivy.Document()
            doc.add_text("body", " ".join(terms))
            doc.add_unsigned("row", row)
            writer.add_document(doc)
        writer.commit()
        writer.wait_merging_threads()
        self.index.reload()
        self.searcher = self.index.searcher()
        self.segments = self.searcher.num_segments
        self.ids = ids

    def search(self, terms: list[str], k: int) -> list[str]:
        if not terms:
            return []
        t = self.t
        query = t.Query.boolean_query(
            [(t.Occur.Should, t.Query.term_query(self.schema, "body", term, index_option="freq")) for term in terms]
        )
        hits = self.searcher.search(query, k, count=False).hits
        return [self.ids[self.searcher.doc(address)["row"][0]] for _, address in hits]


class NumpyPeer:
    def __init__(self, matrix: np.ndarray, ids: list[str]) -> None:
        self.matrix, self.ids = matrix, ids

    def search(self, q: np.ndarray, k: int) -> list[str]:
        scores = self.matrix @ q
        top = np.argpartition(-scores, k)[:k] if len(scores) > k else np.arange(len(scores))
        top = top[np.argsort(-scores[top], kind="stable")]
        return [self.ids[i] for i in top.tolist()]


class FaissPeer:
    def __init__(self, faiss, matrix: np.ndarray, ids: list[str]) -> None:
        self.index = faiss.IndexFlatIP(matrix.shape[1])
        self.index.add(matrix)
        self.ids = ids

    def search(self, q: np.ndarray, k: int) -> list[str]:
        _, found = self.index.search(q[None, :], k)
        return [self.ids[i] for i in found[0].tolist() if i >= 0]


def read_bandwidth(matrix: np.ndarray, passes: int = 5) -> dict:
    """Read bandwidth in GB/s (1e9 bytes/s): the best of ``passes`` timed passes of read-only kernels over at
    least 1 GiB (the vector matrix itself when it is larger).

    ``np.add.reduce`` is the kernel the issue names, but numpy's pairwise float32 sum is compute-bound on one
    core (about half the rate of the others on the development machine), which would put the floor too high;
    ``np.maximum.reduce`` and a BLAS dot product of the buffer with itself read the same bytes once each at
    memory speed. Every kernel's best is kept; the floor uses the fastest.
    """
    if matrix.nbytes >= 2**30:
        buf, what = matrix.reshape(-1), f"the vector matrix ({matrix.nbytes / 2**30:.2f} GiB)"
    else:
        buf, what = np.ones(2**28, dtype=np.float32), "a 1 GiB float32 buffer"
    kernels = {"np.add.reduce": np.add.reduce, "np.maximum.reduce": np.maximum.reduce,
               "np.dot(buf, buf)": lambda b: np.dot(b, b)}
    out = {}
    for name, kernel in kernels.items():
        best = math.inf
        for _ in range(passes):
            start = time.perf_counter()
            kernel(buf)
            best = min(best, time.perf_counter() - start)
        out[name] = buf.nbytes / best / 1e9
    return {"gbps": max(out.values()), "kernel": max(out, key=out.get), "by_kernel": out, "over": what}


# ------------------------------------------------------------------ corpora


def load(spec: str, args) -> tuple[list[Document], np.ndarray, dict[str, np.ndarray], list[str]]:
    """Documents, their vectors, ``{query: vector}`` and the query list (cycled to ``--queries``)."""
    if spec == "scifact":
        ns = SimpleNamespace(scifact_docs=args.scifact_docs, synthetic_size=0)
        docs, vectors, qtable = speed.load_corpus("scifact", ns)
    else:
        size = int(spec.split(":")[1])
        docs, vectors, qtable = speed.load_corpus("synthetic", SimpleNamespace(synthetic_size=size, scifact_docs=None))
        for i, d in enumerate(docs):  # 1% per category: field("cat") == 7
            docs[i] = Document(id=d.id, content=d.content, metadata={**d.metadata, "cat": i % 100})
    texts = list(qtable)
    return docs, np.ascontiguousarray(vectors, dtype=np.float32), qtable, [texts[i % len(texts)] for i in range(args.queries)]


def trickle_size(args) -> int | None:
    """The synthetic size nearest 100,000 (on a log scale), where the trickle writer runs."""
    return min(args.sizes, key=lambda n: abs(math.log(n / 100_000))) if args.sizes else None


# ------------------------------------------------------------------ child processes (spawned)


def trickle_writer(path: str, dim: int, words: list[str], active, stop, idle, added, max_seconds: float) -> None:
    """Upsert 10 new documents every 0.2 s into ``path`` while ``active`` is set; stop on ``stop``, after
    ``max_seconds``, or when the parent process is gone."""
    anyio.run(_trickle, path, dim, words, active, stop, idle, added, max_seconds)


async def _trickle(path, dim, words, active, stop, idle, added, max_seconds) -> None:
    rng = np.random.default_rng(7)
    parent, end, n = os.getppid(), time.monotonic() + max_seconds, 0
    async with SQLiteVectorStore(path, embedding_model=STATIC) as store:
        tick = time.monotonic()
        while not stop.is_set() and time.monotonic() < end and os.getppid() == parent:
            if not active.is_set():
                idle.set()
                await anyio.sleep(0.01)
                tick = time.monotonic()
                continue
            idle.clear()
            docs = []
            for _ in range(TRICKLE_DOCS):
                length = int(rng.integers(30, 91))
                docs.append(Document(id=f"trickle-{n}", content=" ".join(rng.choice(words, length).tolist()),
                                     metadata={"n": length, "cat": n % 100}))
                n += 1
            await store.upsert(docs, embeddings=embeddings.l2(rng.standard_normal((len(docs), dim), dtype=np.float32)))
            with added.get_lock():
                added.value += len(docs)
            tick += TRICKLE_PERIOD_S
            await anyio.sleep(max(0.0, tick - time.monotonic()))
    idle.set()


def rss_probe(path: str, ann_path: str | None, qtable: dict, queries: list[str], filtered: bool, ann_kind: str) -> dict:
    """In a fresh process: RSS after imports, then after opening the store and running every kind of query."""
    return anyio.run(_rss_probe, path, ann_path, qtable, queries, filtered, ann_kind)


async def _rss_probe(path, ann_path, qtable, queries, filtered, ann_kind) -> dict:
    base = rss_mb()
    embedder = PrecomputedEmbedder(STATIC, qtable)
    kinds = 0
    async with SQLiteVectorStore(path, embedding_model=STATIC) as store:
        bm25 = BM25Retriever(store=store)
        dense = VectorRetriever(vector_store=store, embedder=embedder)
        hybrid = HybridRetriever([VectorRetriever(vector_store=store, embedder=embedder), bm25])
        runs = [(r, None) for r in (bm25, dense, hybrid)]
        if filtered:
            runs += [(r, f) for r in (bm25, dense) for f in FILTERS.values()]
        for r, flt in runs:
            for q in queries:
                await r.retrieve(q, k=K, filter=flt)
            kinds += 1
        after = rss_mb()  # one store as users open it by default (exact k-NN)
    ann_after = None
    if ann_path is not None:
        # the approximate index in a store object of its own (which holds its own copy of the vectors for the
        # exact re-scoring): measured after the first store is closed, so the two copies are not summed
        del store, bm25, dense, hybrid, runs
        gc.collect()
        async with SQLiteVectorStore(ann_path, embedding_model=STATIC, vector_index=ann_kind) as ann:
            ann_r = VectorRetriever(vector_store=ann, embedder=embedder)
            for r in (ann_r, BM25Retriever(store=ann)):
                for q in queries:
                    await r.retrieve(q, k=K)
            kinds += 1
            ann_after = rss_mb()
    return {"rss_base_mb": base, "rss_after_warmup_mb": after, "rss_ann_after_warmup_mb": ann_after, "kinds": kinds,
            "queries_per_kind": len(queries)}


# ------------------------------------------------------------------ sizes on disk


def files_in(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()}


def ann_rss(m: dict, denom: int) -> str:
    """The memory table's "with ANN" cell: RSS in MB and its ratio to vectors plus index, or a dash."""
    got = m.get("rss_ann_after_warmup_mb")
    return "–" if got is None else f"{got:,.0f} ({got * 2**20 / denom:.2f}x)"


def index_bytes(db: Path) -> tuple[int, dict[str, int]]:
    """Bytes of every b-tree of the database but the payload tables (``dbstat``), and the b-trees' sizes."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        sizes = dict(conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall())
    finally:
        conn.close()
    return sum(v for k, v in sizes.items() if k not in PAYLOAD_TABLES), sizes


# ------------------------------------------------------------------ one corpus


async def interleaved(systems: list[tuple[str, object]], queries: list[str], lat: dict, prefix: str) -> list[dict]:
    """Every system on every query, one at a time, in an order rotated per query (so no system always runs
    first or after the same one); each time appended to ``lat[prefix + name]``, in query order. Returns the
    hits per query, ``{name: hits}``."""
    found = []
    for i, q in enumerate(queries):
        got = {}
        for name, fn in rotated(systems, i):
            ms, got[name] = await clocked(fn, q)
            lat.setdefault(prefix + name, []).append(ms)
        found.append(got)
    return found


def hit_ids(hits) -> list[str]:
    return [h.id if isinstance(h, Document) else h for h in hits]


async def ingest(path: Path, docs: list[Document], vectors: np.ndarray, **options) -> dict:
    """Measure 6: upsert in batches, close, and what it cost."""
    io0, cpu0, wall0 = proc_io(), cpu_s(), time.perf_counter()
    store = SQLiteVectorStore(path, embedding_model=STATIC, **options)
    for i in range(0, len(docs), BATCH):
        await store.upsert(docs[i : i + BATCH], embeddings=vectors[i : i + BATCH])
    await store.aclose()
    wall, cpu, io1 = time.perf_counter() - wall0, cpu_s() - cpu0, proc_io()
    files = files_in(path.parent)
    return {
        "wall_s": wall, "docs_per_s": len(docs) / wall, "cpu_ms_per_doc": cpu * 1000 / len(docs),
        "write_bytes": io1.get("write_bytes", 0) - io0.get("write_bytes", 0),
        "wchar": io1.get("wchar", 0) - io0.get("wchar", 0),
        "cancelled_write_bytes": io1.get("cancelled_write_bytes", 0) - io0.get("cancelled_write_bytes", 0),
        "final_bytes": sum(files.values()), "files": files, "peak_rss_mb": peak_rss_mb(),
    }


async def open_ann(folder: Path, path: Path, docs: list[Document], vectors: np.ndarray, res: dict, args):
    """The approximate index if the store has one: ``(store, its path)`` or ``(None, None)``; the status in
    ``res``. An empty throwaway store tells whether ``vector_index`` is accepted at all; then the measured store
    is reopened with it, or, if the index can only be chosen when a store is created, a second one is built."""
    kind = args.ann_index
    if kind == "none" or len(docs) > args.ann_max_docs:
        res["ann_status"] = ("skipped (--ann-index none)" if kind == "none" else
                             f"skipped: {len(docs):,} documents > --ann-max-docs {args.ann_max_docs:,} "
                             f"(building a {kind} index at this size takes too long for one run; docs/ann.md)")
        return None, None
    probe = folder / "ann-probe"
    try:
        try:
            await SQLiteVectorStore(probe / "probe.db", vector_index=kind).aclose()
        finally:
            shutil.rmtree(probe, ignore_errors=True)
    except (TypeError, ConfigurationError, InvalidParameterError) as exc:
        res["ann_status"] = f"not available ({type(exc).__name__}: {exc})"
        return None, None
    try:
        res["ann_status"] = f"the same store file opened with vector_index={kind!r}"
        return SQLiteVectorStore(path, embedding_model=STATIC, vector_index=kind), path
    except ConfigurationError as exc:
        ann_path = folder / "ann" / "store.db"
        res["ann_ingest"] = await ingest(ann_path, docs, vectors, vector_index=kind)
        res["ann_status"] = f"a second store created with vector_index={kind!r} (reopening the first: {exc})"
        return SQLiteVectorStore(ann_path, embedding_model=STATIC, vector_index=kind), ann_path


def build_peers(folder: Path, analyzer, docs: list[Document], vectors: np.ndarray, ids: list[str], args,
                res: dict) -> dict[str, object]:
    """The installed peers, the lexical ones over ``analyzer``'s terms of the text the store indexes."""
    interned: dict[str, str] = {}  # one string object per distinct term: 1M documents' terms fit in memory
    start = time.perf_counter()
    term_lists = [[interned.setdefault(t, t) for t in analyzer.analyze(corpora.doc_text(d))] for d in docs]
    res["peer_analysis_s"] = time.perf_counter() - start
    peers: dict[str, object] = {}
    res["peer_versions"], res["peer_build_s"] = {}, {}
    for name in PEERS:
        mod, res["peer_versions"][name] = optional(name, {"faiss": "faiss-cpu"}.get(name, name))
        if mod is None:
            continue
        start = time.perf_counter()
        if name == "bm25s":
            peers[name] = Bm25sPeer(mod, term_lists, ids)
        elif name == "tantivy":
            peers[name] = peer = TantivyPeer(mod, folder / "tantivy", term_lists, ids)
            res["tantivy_segments"] = peer.segments
            res["tantivy_bytes"] = sum(p.stat().st_size for p in (folder / "tantivy").iterdir() if p.is_file())
        elif name == "numpy":
            peers[name] = NumpyPeer(vectors, ids)
        else:
            if args.blas_threads:
                mod.omp_set_num_threads(args.blas_threads)
            peers[name] = FaissPeer(mod, vectors, ids)
        res["peer_build_s"][name] = time.perf_counter() - start
    return peers


async def measure(spec: str, args, folder: Path) -> dict:
    """Every measure on one corpus, in this process; the result as JSON-ready data."""
    t_start = time.perf_counter()
    res: dict = {"corpus": spec.split(":")[0], "spec": spec, "loadavg_start": os.getloadavg()}
    lat: dict[str, list[float]] = {}
    res["latencies_ms"] = lat
    rss0 = rss_mb()
    docs, vectors, qtable, queries = load(spec, args)
    synthetic_corpus = spec != "scifact"
    n, dim = vectors.shape
    ids = [d.id for d in docs]
    res.update(docs=n, dim=dim, slice=spec == "scifact" and args.scifact_docs is not None,
               queries=len(queries), rss_start_mb=rss0, rss_corpus_loaded_mb=rss_mb())
    if synthetic_corpus:
        res["filter_matching"] = {name: sum(matches(f, d.metadata) for d in docs) for name, f in FILTERS.items()}
    words = sorted({w for d in docs[:2000] for w in d.content.split()})
    path = folder / "store" / "store.db"
    log(f"{spec}: {n:,} documents loaded ({time.perf_counter() - t_start:.0f} s)")

    res["ingest"] = await ingest(path, docs, vectors)  # 6.
    log(f"{spec}: ingested in {res['ingest']['wall_s']:.1f} s ({res['ingest']['docs_per_s']:,.0f} docs/s), "
        f"{res['ingest']['final_bytes'] / 2**20:.1f} MB on disk")
    ann_store, ann_path = await open_ann(folder, path, docs, vectors, res, args)  # 4., set up while the corpus is here
    store = SQLiteVectorStore(path, embedding_model=STATIC)
    analyzer = store.analyzer
    peers = build_peers(folder, analyzer, docs, vectors, ids, args, res)
    del docs
    log(f"{spec}: peers built: {', '.join(f'{k} {v:.1f} s' for k, v in res['peer_build_s'].items())}")

    def lexical(peer):  # the query analysed and deduplicated as the store does, inside the timing
        return lambda q: peer.search(sorted(set(analyzer.analyze(q, for_query=True))), K)

    def dense(peer):
        return lambda q: peer.search(qtable[q], K)

    embedder = PrecomputedEmbedder(STATIC, qtable)
    async with store:
        bm25 = BM25Retriever(store=store)
        vector = VectorRetriever(vector_store=store, embedder=embedder)
        hybrid = HybridRetriever([vector, bm25])
        cand = hybrid.candidate_k
        res["hybrid"] = {"candidate_k": cand, "fusion": repr(hybrid.fusion)}
        for r in (bm25, vector, hybrid):  # load the caches once
            await r.retrieve(queries[0], k=K)
        for f in FILTERS.values() if synthetic_corpus else ():
            await bm25.retrieve(queries[0], k=K, filter=f)
            await vector.retrieve(queries[0], k=K, filter=f)
        for name, peer in peers.items():
            (dense(peer) if name in ("numpy", "faiss") else lexical(peer))(queries[0])
        hops = []
        for _ in range(200):
            start = time.perf_counter()
            await anyio.to_thread.run_sync(int)
            hops.append((time.perf_counter() - start) * 1000)
        res["thread_hop_p50_ms"] = p50(hops)

        # 1. BM25 against bm25s and tantivy
        systems = [("fastrag", lambda q: bm25.retrieve(q, k=K))]
        systems += [(name, lexical(peers[name])) for name in ("bm25s", "tantivy") if name in peers]
        found = await interleaved(systems, queries, lat, "bm25_")
        res["bm25_overlap"] = {name: statistics.mean(overlap(hit_ids(g["fastrag"]), g[name]) for g in found)
                               for name, _ in systems[1:]}
        log(f"{spec}: BM25 done")

        # 3. exact dense against numpy, faiss and the memory floor
        passes = 1 if args.smoke else 5
        bandwidth = [read_bandwidth(vectors, passes)]
        systems = [("fastrag", lambda q: vector.retrieve(q, k=K))]
        systems += [(name, dense(peers[name])) for name in ("numpy", "faiss") if name in peers]
        found = await interleaved(systems, queries, lat, "dense_")
        if not args.smoke:
            bandwidth.append(read_bandwidth(vectors, passes))
        exact_top = {q: g.get("numpy") or hit_ids(g["fastrag"]) for q, g in zip(queries, found, strict=True)}
        best = max(bandwidth, key=lambda b: b["gbps"])
        res["dense"] = {
            "same_top10_as_numpy": statistics.mean(overlap(hit_ids(g["fastrag"]), exact_top[q])
                                                   for q, g in zip(queries, found, strict=True)),
            "read_gbps": best["gbps"], "read_kernel": best["kernel"], "bandwidth_runs": bandwidth,
            "bytes_scanned": n * dim * 4, "floor_ms": n * dim * 4 / (best["gbps"] * 1e9) * 1000,
        }
        log(f"{spec}: dense done ({best['gbps']:.1f} GB/s)")

        # 2. filters
        if synthetic_corpus:
            retrievers = {"bm25": bm25, "dense": vector}
            systems = [(f"{kind}_{fname or 'none'}",
                        lambda q, r=retrievers[kind], flt=FILTERS.get(fname): r.retrieve(q, k=K, filter=flt))
                       for kind in retrievers for fname in (None, *FILTERS)]
            found = await interleaved(systems, queries, lat, "filter_")
            res["filters"] = {}
            for kind in retrievers:
                for fname in (None, *FILTERS):
                    key, flt = f"{kind}_{fname or 'none'}", FILTERS.get(fname)
                    full = min(K, res["filter_matching"][fname] if fname else n)
                    res["filters"][key] = {
                        "short_results": sum(len(g[key]) < full for g in found),
                        "non_matching_hits": sum(not matches(flt, d.metadata) for g in found for d in g[key]),
                    }
            log(f"{spec}: filters done")

        # 5. hybrid against its slowest branch (the same retriever objects, at candidate_k)
        systems = [("bm25", lambda q: bm25.retrieve(q, k=cand)), ("dense", lambda q: vector.retrieve(q, k=cand)),
                   ("hybrid", lambda q: hybrid.retrieve(q, k=K))]
        await interleaved(systems, queries, lat, "hybrid_run_")
        lat["hybrid_run_slowest_branch"] = [max(a, b) for a, b in zip(lat["hybrid_run_bm25"], lat["hybrid_run_dense"],
                                                                      strict=True)]
        log(f"{spec}: hybrid done")

        # 4. approximate index
        if ann_store is not None:
            async with ann_store:
                ann = VectorRetriever(vector_store=ann_store, embedder=embedder)
                res["ann_first_query_ms"], _ = await clocked(ann.retrieve, queries[0], k=K)
                systems = [("ann", lambda q: ann.retrieve(q, k=K)), ("exact", lambda q: vector.retrieve(q, k=K))]
                found = await interleaved(systems, queries, lat, "ann_run_")
                res["ann_recall_at_10"] = statistics.mean(len(set(hit_ids(g["ann"])) & set(exact_top[q][:K])) / K
                                                          for q, g in zip(queries, found, strict=True))
            log(f"{spec}: ANN done")

        # 7. reader under a trickle writer in another process
        if synthetic_corpus and n == trickle_size(args):
            res["trickle"] = await trickle(str(path), dim, words, bm25, vector, queries, args, lat)
            log(f"{spec}: trickle writer done")
        res["rss_after_warmup_this_process_mb"] = rss_mb()

        # 8. memory of a fastrag-only process
        res["memory"] = memory(path, ann_path, qtable, queries, synthetic_corpus,
                               vector_bytes=(n + res.get("trickle", {}).get("docs_added", 0)) * dim * 4,
                               ann_kind=args.ann_index)
        log(f"{spec}: memory probe done")
    res["loadavg_end"] = os.getloadavg()
    res["elapsed_s"] = time.perf_counter() - t_start
    try:
        from threadpoolctl import threadpool_info

        res["threadpools"] = [{k: i.get(k) for k in ("internal_api", "version", "num_threads", "prefix")}
                              for i in threadpool_info()]
    except ImportError:
        res["threadpools"] = "threadpoolctl not installed"
    return res


def memory(path: Path, ann_path: Path | None, qtable: dict, queries: list[str], filtered: bool, *,
           vector_bytes: int, ann_kind: str) -> dict:
    """Measure 8: RSS of a fresh fastrag-only process after every kind of query, and the bytes it holds."""
    def beside(db: Path) -> dict[str, int]:
        return {k: v for k, v in files_in(db.parent).items()
                if k != db.name and not k.endswith(("-wal", "-shm", "-journal"))}

    idx, btrees = index_bytes(path)
    idx -= min(btrees.get("blocks", 0), vector_bytes)  # the blocks b-tree holds the vectors: counted once, as vectors
    files = beside(path)
    if ann_path is not None and ann_path != path:  # a second store: only its ANN files count
        files.update({f"ann/{k}": v for k, v in beside(ann_path).items()})
    few = queries[: min(len(queries), 50)]
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        mem = pool.submit(rss_probe, str(path), str(ann_path) if ann_path else None, {q: qtable[q] for q in few},
                          few, filtered, ann_kind).result()
    mem.update(vector_bytes=vector_bytes, index_bytes=idx + sum(files.values()), btrees=btrees, files_beside=files)
    return mem


async def trickle(path: str, dim: int, words: list[str], bm25, vector, queries: list[str], args, lat) -> dict:
    """Alternate blocks without and with a writer process; BM25 and dense p50 in each."""
    ctx = multiprocessing.get_context("spawn")
    active, stop, idle = ctx.Event(), ctx.Event(), ctx.Event()
    added = ctx.Value("i", 0)
    writer = ctx.Process(target=trickle_writer, daemon=True,
                         args=(path, dim, words, active, stop, idle, added, args.writer_seconds))
    writer.start()
    deadline = time.monotonic() + args.writer_seconds
    blocks = 2 if args.smoke else 5
    per_block = max(1, len(queries) // (2 * blocks))
    block_s = 0.5 if args.smoke else TRICKLE_BLOCK_S
    out: dict = {"blocks": 2 * blocks, "queries_per_block": per_block, "block_s": block_s,
                 "queries_per_block_run": [], "incomplete": []}
    kinds = [("bm25", bm25), ("dense", vector)]
    try:
        for b in range(2 * blocks):
            with_writer = b % 2 == 1
            tag = "with" if with_writer else "without"
            if time.monotonic() > deadline - 5 or not writer.is_alive():
                out["incomplete"].append(f"block {b}: writer gone or past --writer-seconds; stopped")
                break
            if with_writer:
                before = added.value
                active.set()
                t0 = time.monotonic()
                while added.value == before and time.monotonic() - t0 < 30 and writer.is_alive():
                    await anyio.sleep(0.01)  # the block starts under a writer that has committed
                if added.value == before:
                    out["incomplete"].append(f"block {b}: the writer committed nothing in 30 s")
                    break
            else:
                active.clear()
                t0 = time.monotonic()
                while not idle.is_set() and time.monotonic() - t0 < 30:
                    await anyio.sleep(0.01)
                for _, r in kinds:  # after the last commit the first read reloads; the steady state is measured
                    await r.retrieve(queries[0], k=K)
            commits_before = added.value
            block_end, i = time.monotonic() + block_s, 0
            while i < per_block or time.monotonic() < block_end:  # at least its queries, at least block_s
                q = queries[(b * per_block + i) % len(queries)]
                for name, r in rotated(kinds, i):
                    ms, _ = await clocked(r.retrieve, q, k=K)
                    lat.setdefault(f"trickle_{name}_{tag}", []).append(ms)
                i += 1
            out["queries_per_block_run"].append(i)
            if with_writer:
                out.setdefault("docs_added_during_blocks", []).append(added.value - commits_before)
    finally:
        active.clear()
        stop.set()
        writer.join(timeout=30)
        if writer.is_alive():
            writer.terminate()  # our own child, by its handle
            writer.join()
            out["incomplete"].append("the writer did not stop within 30 s and was terminated")
        out["writer_exitcode"] = writer.exitcode
    out["docs_added"] = added.value
    return out


def worker(spec: str, args) -> dict:
    base = Path(args.workdir)
    folder = Path(tempfile.mkdtemp(prefix=f"{spec.replace(':', '-')}-", dir=base))
    try:
        return anyio.run(measure, spec, args, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ------------------------------------------------------------------ report

APPLIES = {  # the sizes each of issue 12's targets names (None: SciFact)
    "bm25": lambda r: (r["corpus"] == "scifact" and not r["slice"]) or r["docs"] in (10_000, 100_000, 300_000, 1_000_000),
    "filter": lambda r: r["docs"] == 300_000,
    "floor": lambda r: r["corpus"] != "scifact" and r["docs"] >= 100_000,
    "ann": lambda r: r["docs"] == 1_000_000,
    "hybrid": lambda r: (r["corpus"] == "scifact" and not r["slice"]) or r["docs"] == 100_000,
    "cpu": lambda r: r["docs"] == 1_000_000,
    "written": lambda r: True,
    "trickle": lambda r: r["docs"] == 100_000,
    "rss": lambda r: True,
}


def met(ok: bool | None, applies: bool) -> str:
    """``yes``/``NO`` where the target names this size, in brackets elsewhere, ``–`` when not measured."""
    if ok is None:
        return "–"
    word = "yes" if ok else "NO"
    return word if applies else f"({word})"


def within(value: float, limit: float) -> bool | None:
    return None if math.isnan(value) else value <= limit


def f(x: float | None, digits: int = 2, suffix: str = "") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:,.{digits}f}{suffix}"


def label(r: dict) -> str:
    return "SciFact" if r["corpus"] == "scifact" else "synthetic"


def series_p50(r: dict, key: str) -> float:
    return p50(r["latencies_ms"].get(key, []))


def tables(results: list[dict], peers_missing: dict[str, str]) -> list[str]:
    ok = [r for r in results if "error" not in r]
    missing = "; ".join(f"{k}: {v}" for k, v in peers_missing.items())
    lines: list[str] = []

    lines += ["## 1. BM25 against bm25s and tantivy", "",
              "Target: fastrag's p50 at most 1.5x the faster of bm25s and tantivy (SciFact: 1.5x bm25s). "
              "All three rank fastrag's own analysed terms (`store.analyzer.analyze(text)`: stemmed, stopwords "
              "removed; queries with `for_query=True`, deduplicated as the store does); the peers' times include "
              "analysing the query, as fastrag's do. bm25s: in memory, `method=\"lucene\"`, k1 1.2, b 0.75 (the "
              "store's); `retrieve(..., n_threads=0)`. tantivy: on disk, the terms joined by spaces into a field "
              "whose analyzer is tantivy's whitespace tokenizer alone (no lowercasing, stemming or length filter, "
              "so the terms arrive unchanged), term frequencies without positions; a query is a `BooleanQuery` of "
              "`SHOULD` `TermQuery`s (no query parser), `search(..., count=False)`, the 10 hits' ids read from a "
              "stored field. Overlap: mean share of fastrag's top 10 that the peer also "
              "returned (the same BM25 in bm25s; tantivy quantises document lengths to one byte)."
              + (f" Missing peers: {missing}." if missing else ""), "",
              "| corpus | docs | fastrag BM25 p50 ms | bm25s p50 ms | tantivy p50 ms | ÷ bm25s | ÷ tantivy | "
              "÷ faster peer | top-10 overlap bm25s / tantivy | target | met? |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in ok:
        ours, b, t = (series_p50(r, f"bm25_{s}") for s in ("fastrag", "bm25s", "tantivy"))
        if r["corpus"] == "scifact":
            ref, target = b, "<= 1.5x bm25s"
        else:
            ref, target = min((x for x in (b, t) if not math.isnan(x)), default=float("nan")), "<= 1.5x faster peer"
        rr = ratio(ours, ref)
        ov = r.get("bm25_overlap", {})
        lines.append(f"| {label(r)} | {r['docs']:,} | {f(ours)} | {f(b)} | {f(t)} | {f(ratio(ours, b), 2, 'x')} | "
                     f"{f(ratio(ours, t), 2, 'x')} | {f(rr, 2, 'x')} | {f(ov.get('bm25s'), 2)} / {f(ov.get('tantivy'), 2)} | "
                     f"{target} | {met(within(rr, 1.5), APPLIES['bm25'](r))} |")

    lines += ["", "## 2. Filtered search", "",
              "Target: at 300k, filtered p50 at most 1.5x the same search unfiltered, for BM25 and for dense. "
              "Synthetic corpora only (their metadata carry `cat` and `n`). \"short\": queries whose dense top 10 "
              "was shorter than min(10, matching documents); \"wrong\": hits that do not match the filter (both "
              "should be 0).", "",
              "| corpus | docs | filter | matching | BM25 p50 ms unfiltered / filtered | BM25 ratio | "
              "dense p50 ms unfiltered / filtered | dense ratio | short / wrong | target | met? |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in ok:
        if "filters" not in r:
            continue
        for fname in FILTERS:
            bu, bf = series_p50(r, "filter_bm25_none"), series_p50(r, f"filter_bm25_{fname}")
            du, df = series_p50(r, "filter_dense_none"), series_p50(r, f"filter_dense_{fname}")
            worst = max(ratio(bf, bu), ratio(df, du))
            fl = r["filters"]
            bad = (f"{fl[f'dense_{fname}']['short_results']} / "
                   f"{fl[f'bm25_{fname}']['non_matching_hits'] + fl[f'dense_{fname}']['non_matching_hits']}")
            lines.append(f"| {label(r)} | {r['docs']:,} | `{FILTER_TEXT[fname]}` | "
                         f"{r['filter_matching'][fname]:,} ({r['filter_matching'][fname] / r['docs']:.0%}) | "
                         f"{f(bu)} / {f(bf)} | {f(ratio(bf, bu), 2, 'x')} | {f(du)} / {f(df)} | {f(ratio(df, du), 2, 'x')} | "
                         f"{bad} | <= 1.5x | {met(within(worst, 1.5), APPLIES['filter'](r))} |")

    lines += ["", "## 3. Exact dense against numpy, faiss and the memory floor", "",
              "Target: from 100k up, fastrag's exact dense p50 at most 1.3x the read-only memory floor (bytes "
              "scanned n x dim x 4 ÷ read bandwidth measured in the same process: the best of 5 passes (1 with --smoke) of "
              "`np.add.reduce`, `np.maximum.reduce` and `np.dot(buf, buf)` over 1 GiB or the matrix if larger, "
              "before and after the dense queries (before only with --smoke); the fastest kernel is named). Same top 10: mean overlap of "
              "fastrag's top 10 with numpy's (1.00 = exact).", "",
              "| corpus | docs | fastrag dense p50 ms | numpy p50 ms | faiss flat p50 ms | ÷ numpy | ÷ faiss | "
              "MB scanned | read GB/s | floor ms | ÷ floor | numpy ÷ floor | same top 10 | target | met? |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in ok:
        ours, npy, fa = (series_p50(r, f"dense_{s}") for s in ("fastrag", "numpy", "faiss"))
        d = r["dense"]
        rr = ratio(ours, d["floor_ms"])
        lines.append(f"| {label(r)} | {r['docs']:,} | {f(ours)} | {f(npy)} | {f(fa)} | {f(ratio(ours, npy), 2, 'x')} | "
                     f"{f(ratio(ours, fa), 2, 'x')} | {f(d['bytes_scanned'] / 1e6, 1)} | {f(d['read_gbps'], 1)} ({d['read_kernel']}) | "
                     f"{f(d['floor_ms'], 3)} | {f(rr, 2, 'x')} | {f(ratio(npy, d['floor_ms']), 2, 'x')} | "
                     f"{f(d['same_top10_as_numpy'], 2)} | <= 1.3x floor | {met(within(rr, 1.3), APPLIES['floor'](r))} |")

    lines += ["", "## 4. Approximate index", "",
              "Target: at 1M, recall@10 against exact at least 0.95 and p50 at most 0.1x the exact search "
              "(`SQLiteVectorStore(path, vector_index=\"hnsw\")`, when the store accepts it).", "",
              "| corpus | docs | status | ANN p50 ms | exact p50 ms | ANN ÷ exact | recall@10 | first ANN query ms | "
              "target | met? |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in ok:
        if "ann_recall_at_10" in r:
            a, e = series_p50(r, "ann_run_ann"), series_p50(r, "ann_run_exact")
            rc = r["ann_recall_at_10"]
            good = rc >= 0.95 and ratio(a, e) <= 0.1
            lines.append(f"| {label(r)} | {r['docs']:,} | {r['ann_status']} | {f(a)} | {f(e)} | {f(ratio(a, e), 3, 'x')} | "
                         f"{rc:.3f} | {f(r.get('ann_first_query_ms'), 1)} | recall >= 0.95, <= 0.1x | "
                         f"{met(good, APPLIES['ann'](r))} |")
        else:
            lines.append(f"| {label(r)} | {r['docs']:,} | {r.get('ann_status', '?')} | – | – | – | – | – | "
                         f"recall >= 0.95, <= 0.1x | {met(False, APPLIES['ann'](r)) if APPLIES['ann'](r) else '–'} |")

    lines += ["", "## 5. Hybrid against its slowest branch", "",
              "Target: on SciFact and at 100k, the shipped hybrid's p50 at most 1.15x the p50 of its slowest branch "
              "(per query the slower of the two branches run alone at the hybrid's `candidate_k`; the same retriever "
              "objects). The ratio to the larger of the two branch medians is shown too.", "",
              "| corpus | docs | candidate_k | hybrid p50 ms | BM25 p50 ms | dense p50 ms | slowest branch p50 ms | "
              "hybrid ÷ slowest | ÷ larger branch median | target | met? |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in ok:
        h, b, d, s = (series_p50(r, f"hybrid_run_{x}") for x in ("hybrid", "bm25", "dense", "slowest_branch"))
        rr = ratio(h, s)
        lines.append(f"| {label(r)} | {r['docs']:,} | {r['hybrid']['candidate_k']} | {f(h)} | {f(b)} | {f(d)} | {f(s)} | "
                     f"{f(rr, 2, 'x')} | {f(ratio(h, max(b, d)), 2, 'x')} | <= 1.15x | {met(within(rr, 1.15), APPLIES['hybrid'](r))} |")

    lines += ["", "## 6. Ingest", "",
              "`upsert` in batches of 1,000 with vectors, then `aclose()`. Targets: CPU per document at 1M at most "
              "1.4x that at 10k (the ratio is to the 10k synthetic run, or the smallest synthetic size measured); "
              "bytes written (`/proc/self/io` write_bytes) at most 3x the final size on disk. Peak RSS includes the "
              "corpus held in memory (its RSS after loading in brackets).", "",
              "| corpus | docs | wall s | docs/s | CPU ms/doc | CPU/doc ÷ smallest synthetic | MB written | "
              "final MB | written ÷ final | files after close | peak RSS MB (corpus loaded) | target | met? |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    synth = [r for r in ok if r["corpus"] != "scifact"]
    ref = next((r for r in synth if r["docs"] == 10_000), min(synth, key=lambda r: r["docs"], default=None))
    for r in ok:
        g = r["ingest"]
        written = g["write_bytes"] or g["wchar"]
        how = "" if g["write_bytes"] else " (wchar: no write_bytes)"
        wr = ratio(written, g["final_bytes"])
        cr = ratio(g["cpu_ms_per_doc"], ref["ingest"]["cpu_ms_per_doc"]) if ref and r["corpus"] != "scifact" else float("nan")
        files = ", ".join(f"{k} {v / 2**20:.1f} MB" for k, v in g["files"].items())
        cpu_cell = met(within(cr, 1.4), APPLIES["cpu"](r))
        lines.append(f"| {label(r)} | {r['docs']:,} | {g['wall_s']:.1f} | {g['docs_per_s']:,.0f} | {g['cpu_ms_per_doc']:.3f} | "
                     f"{f(cr, 2, 'x')} | {written / 2**20:,.1f}{how} | {g['final_bytes'] / 2**20:,.1f} | {f(wr, 2, 'x')} | "
                     f"{files} | {g['peak_rss_mb']:,.0f} ({r['rss_corpus_loaded_mb']:,.0f}) | "
                     f"CPU <= 1.4x at 1M; written <= 3x | CPU {cpu_cell}; written {met(within(wr, 3), APPLIES['written'](r))} |")

    lines += ["", "## 7. Reader under a trickle writer", "",
              f"Target: at 100k, reader p50 with a writer process upserting {TRICKLE_DOCS} new documents every "
              f"{TRICKLE_PERIOD_S} s into the same file at most 1.5x the p50 without it. Time blocks alternate "
              "without / with the writer, each at least its share of the queries and at least "
              f"{TRICKLE_BLOCK_S:g} s (0.5 s with --smoke; BM25 and dense queries alternating); after each writer block one untimed "
              "query per kind absorbs the reload.",
              "", "| corpus | docs | blocks x queries run | docs added | BM25 p50 ms without / with | BM25 ratio | "
              "dense p50 ms without / with | dense ratio | incomplete | target | met? |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in ok:
        t = r.get("trickle")
        if not t:
            continue
        bw, bwith = series_p50(r, "trickle_bm25_without"), series_p50(r, "trickle_bm25_with")
        dw, dwith = series_p50(r, "trickle_dense_without"), series_p50(r, "trickle_dense_with")
        worst = max(ratio(bwith, bw), ratio(dwith, dw))
        inc = "; ".join(t["incomplete"]) or "no"
        lines.append(f"| {label(r)} | {r['docs']:,} | {t['blocks']} x {min(t['queries_per_block_run'], default=0)}-{max(t['queries_per_block_run'], default=0)} | {t['docs_added']:,} | "
                     f"{f(bw)} / {f(bwith)} | {f(ratio(bwith, bw), 2, 'x')} | {f(dw)} / {f(dwith)} | "
                     f"{f(ratio(dwith, dw), 2, 'x')} | {inc} | <= 1.5x | "
                     f"{met(within(worst, 1.5), APPLIES['trickle'](r))} |")

    lines += ["", "## 8. Memory after warm-up", "",
              "Target: RSS after warm-up at most 1.3x the bytes of vectors plus index. A fresh fastrag-only process "
              "opens the store and runs every kind of query (BM25, dense, hybrid, both filters on synthetic corpora), "
              "50 queries each; its RSS is compared with vector bytes (n x dim x 4) plus index bytes on disk (every "
              "SQLite b-tree but `documents`, the vectors in the blocks counted once, plus any file beside the "
              "database but its -wal and -shm). \"Above baseline\": that RSS minus the same process's RSS after its "
              "imports. \"With ANN\": after that store is closed, the same process opens the store with the "
              "approximate index and runs dense and BM25 queries on it.", "",
              "| corpus | docs | RSS after warm-up MB | above baseline MB | vector MB | index MB on disk | "
              "RSS ÷ (vectors + index) | above baseline ÷ (vectors + index) | with ANN: RSS MB (÷) | target | met? |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in ok:
        m = r["memory"]
        denom = m["vector_bytes"] + m["index_bytes"]
        rr = ratio(m["rss_after_warmup_mb"] * 2**20, denom)
        above = m["rss_after_warmup_mb"] - m["rss_base_mb"]
        lines.append(f"| {label(r)} | {r['docs']:,} | {m['rss_after_warmup_mb']:,.0f} | {above:,.0f} | "
                     f"{m['vector_bytes'] / 2**20:,.1f} | {m['index_bytes'] / 2**20:,.1f} | {f(rr, 2, 'x')} | "
                     f"{f(ratio(above * 2**20, denom), 2, 'x')} | {ann_rss(m, denom)} | <= 1.3x | "
                     f"{met(within(rr, 1.3), APPLIES['rss'](r))} |")

    lines += ["", "## Context: the peers' builds, the thread hop, the machine's state per corpus", "",
              "| corpus | docs | analysis for the peers s | bm25s index s | tantivy index s (segments, MB) | "
              "faiss add s | worker-thread hop p50 ms | load average start / end | corpus wall s |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in ok:
        b = r["peer_build_s"]
        tv = (f"{b['tantivy']:.1f} ({r.get('tantivy_segments')}, {r.get('tantivy_bytes', 0) / 2**20:.1f})"
              if "tantivy" in b else "–")
        lines.append(f"| {label(r)} | {r['docs']:,} | {r['peer_analysis_s']:.1f} | {f(b.get('bm25s'), 1)} | {tv} | "
                     f"{f(b.get('faiss'), 2)} | {r['thread_hop_p50_ms']:.3f} | {r['loadavg_start'][0]:.1f} / "
                     f"{r['loadavg_end'][0]:.1f} | {r['elapsed_s']:.0f} |")
    for r in results:
        if "error" in r:
            lines += ["", f"**{r['spec']} failed**: `{r['error']}`"]
    return lines


def charts(results: list[dict], out: Path) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ["Charts skipped: matplotlib is not installed (`pip install matplotlib`)."]
    ok = [r for r in results if "error" not in r]
    synth = sorted((r for r in ok if r["corpus"] != "scifact"), key=lambda r: r["docs"])
    sci = [r for r in ok if r["corpus"] == "scifact"]
    kinds = sorted({m.group(1) for r in ok if (m := re.search(r"vector_index='(\w+)'", r.get("ann_status", "")))})
    series = [("fastrag BM25", "bm25_fastrag", "C0", "-", "o"), ("fastrag dense (exact)", "dense_fastrag", "C1", "-", "o"),
              (f"fastrag ANN ({'/'.join(kinds) or 'none'})", "ann_run_ann", "C2", "-", "D"), ("fastrag hybrid", "hybrid_run_hybrid", "C3", "-", "s"),
              ("bm25s", "bm25_bm25s", "C4", "--", "^"), ("tantivy", "bm25_tantivy", "C5", "--", "v"),
              ("numpy m @ q", "dense_numpy", "C6", ":", "^"), ("faiss IndexFlatIP", "dense_faiss", "C7", ":", "v")]
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for name, key, color, style, marker in series:
        pts = [(r["docs"], series_p50(r, key)) for r in synth if r["latencies_ms"].get(key)]
        if pts:
            ax.plot(*zip(*pts, strict=True), style, color=color, marker=marker, label=name)
        for r in sci:
            if r["latencies_ms"].get(key):
                ax.plot(r["docs"], series_p50(r, key), marker=marker, color=color, fillstyle="none", linestyle="")
    ax.set(xscale="log", yscale="log", xlabel="corpus size (chunks; hollow markers: SciFact)",
           ylabel="p50 latency per query, ms (k=10)", title="Latency against corpus size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    lat_png = out.with_name(out.stem + "-latency.png")
    fig.savefig(lat_png, dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    if synth:
        ax.plot([r["docs"] for r in synth], [r["ingest"]["docs_per_s"] for r in synth], "-o", color="C0",
                label="fastrag SQLite upsert (batches of 1,000, with vectors)")
    for r in sci:
        ax.plot(r["docs"], r["ingest"]["docs_per_s"], marker="s", color="C0", fillstyle="none", linestyle="",
                label="SciFact")
    ax.set(xscale="log", yscale="log", xlabel="corpus size (chunks)", ylabel="documents per second",
           title="Ingest throughput against corpus size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    ing_png = out.with_name(out.stem + "-ingest.png")
    fig.savefig(ing_png, dpi=120)
    plt.close(fig)
    return [f"Charts: `{lat_png.name}` (p50 against corpus size, log-log) and `{ing_png.name}` (ingest docs/s)."]


def machine() -> dict:
    info = {"cores": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__,
            "sqlite": sqlite3.sqlite_version, "platform": platform.platform()}
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout if sys.platform == "linux" else ""
    info["cpu"] = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name")), "?")
    try:
        with open("/proc/meminfo") as fh:
            info["ram_gib"] = int(fh.readline().split()[1]) / 2**20
    except OSError:
        info["ram_gib"] = float("nan")
    return info


# ------------------------------------------------------------------ main


def parse_sizes(text: str) -> list[int]:
    sizes = []
    for part in text.split(","):
        part = part.strip().replace("_", "")
        if not part:
            continue
        if not part.isdigit():
            raise argparse.ArgumentTypeError(f"not a whole number of chunks: {part!r}")
        n = int(part)
        if n < 1000:
            raise argparse.ArgumentTypeError(f"{n}: each size must be at least 1,000 (the 1% filter needs 10 matches)")
        sizes.append(n)
    if len(set(sizes)) != len(sizes):
        raise argparse.ArgumentTypeError("a size is repeated")
    return sorted(sizes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=parse_sizes, default=parse_sizes("10000,100000,300000,1000000"),
                        help="synthetic corpus sizes in chunks, comma-separated, each >= 1,000; \"\" for none "
                             "(default: 10000,100000,300000,1000000)")
    parser.add_argument("--no-scifact", action="store_true", help="skip the SciFact corpus")
    parser.add_argument("--scifact-docs", type=int, default=None, help="a slice of SciFact (default: all 5,183)")
    parser.add_argument("--queries", type=int, default=200,
                        help="queries per measure (SciFact test questions, cycled past 300; default 200)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="folder for the stores and the tantivy index (each corpus in its own subfolder, deleted "
                             "after it); default: a new temporary folder")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "scale.md",
                        help="the markdown report; scale.json and the PNG charts go beside it "
                             "(default: benchmarks/results/scale.md)")
    parser.add_argument("--writer-seconds", type=float, default=900.0,
                        help="the most the trickle writer runs; it stops by itself after this many seconds "
                             "(default 900)")
    parser.add_argument("--blas-threads", type=int, default=1,
                        help="OPENBLAS/OMP/MKL threads in the measuring processes, faiss's OpenMP included "
                             "(default 1; 0: the library default)")
    parser.add_argument("--ann-index", default="hnsw",
                        help="the store's approximate index measured in 4. (its vector_index=, e.g. hnsw; 'none' skips "
                             "measure 4; default hnsw)")
    parser.add_argument("--ann-max-docs", type=int, default=300_000,
                        help="measure 4 only on corpora up to this many documents: building the index is part of "
                             "the run (HNSW on 2 cores: about a minute per 100,000 random vectors; default 300000)")
    parser.add_argument("--smoke", action="store_true",
                        help="CI: 2,000 synthetic chunks, 300 SciFact documents, 20 queries; under a minute")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.queries < 1:
        parser.error("--queries must be at least 1")
    if args.scifact_docs is not None and args.scifact_docs < 100:
        parser.error("--scifact-docs must be at least 100")
    if not args.writer_seconds > 0:
        parser.error("--writer-seconds must be more than 0")
    if args.blas_threads < 0:
        parser.error("--blas-threads must be 0 or more")
    if args.workdir is not None and not args.workdir.is_dir():
        parser.error(f"--workdir {args.workdir} is not an existing folder")
    if args.smoke:
        args.sizes, args.scifact_docs, args.queries = [2000], args.scifact_docs or 300, min(args.queries, 20)
        args.writer_seconds = min(args.writer_seconds, 60.0)
    if not args.sizes and args.no_scifact:
        parser.error("nothing to measure: --sizes is empty and --no-scifact is given")
    if args.worker:
        print(json.dumps(worker(args.worker, args)))
        return

    started, load_start = time.perf_counter(), os.getloadavg()
    own_workdir = args.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="fastrag-scale-")) if own_workdir else args.workdir
    specs = ([] if args.no_scifact else ["scifact"]) + [f"synthetic:{n}" for n in args.sizes]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    if args.blas_threads:
        env.update({v: str(args.blas_threads) for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")})
    results = []
    try:
        for spec in specs:
            log(f"== {spec}")
            cmd = [sys.executable, __file__, *sys.argv[1:], "--workdir", str(workdir), "--worker", spec]
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=None, text=True, env=env)
            last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
            if proc.returncode == 0 and last.startswith("{"):
                results.append(json.loads(last))
            else:
                results.append({"spec": spec, "corpus": spec.split(":")[0],
                                "error": f"worker exited with {proc.returncode} (its stderr is above)"})
    finally:
        if own_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    elapsed, load_end = time.perf_counter() - started, os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    m = machine()
    peers_missing = {}
    versions = {}
    for r in results:
        for name, v in r.get("peer_versions", {}).items():
            (peers_missing if v.startswith("not installed") else versions)[name] = v
    blas = next((r["threadpools"] for r in results if "threadpools" in r), "?")
    blas_text = (", ".join(f"{t['internal_api']} {t['version'] or ''} ({t['prefix']}, {t['num_threads']} "
                           f"thread{'s' if t['num_threads'] != 1 else ''})" for t in blas)
                 if isinstance(blas, list) else str(blas))
    cmdline = "python benchmarks/scale.py" + ("".join(f" {a}" for a in sys.argv[1:]))
    lines = [
        "# The embedded store at scale: fastrag (SQLite) against bm25s, tantivy, numpy and faiss",
        "",
        f"Generated by `{cmdline}` on {datetime.date.today().isoformat()} in {elapsed / 60:.1f} min.",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['ram_gib']:.1f} GiB RAM, {m['platform']}; Python {m['python']}, "
        f"numpy {m['numpy']}, BLAS/OpenMP in the measuring processes: {blas_text}; SQLite {m['sqlite']}. Peers: "
        + (", ".join(f"{k} {v}" for k, v in versions.items()) or "none") + ". "
        f"Load average (1, 5, 15 min) at the start: {load_start[0]:.1f}, {load_start[1]:.1f}, {load_start[2]:.1f}; "
        f"at the end: {load_end[0]:.1f}, {load_end[1]:.1f}, {load_end[2]:.1f}.",
        "",
        f"Each corpus in its own process; `k={K}`; queries: SciFact test questions with precomputed vectors, "
        f"{args.queries} per measure, one at a time, the systems of a measure interleaved query by query (order "
        "rotated per query); latencies are p50 in ms, ratios are ratios of p50s. The peers are called inline; "
        "fastrag hands each search to a worker thread (its cost: \"thread hop\" below). Issue 12's targets name "
        "certain sizes; a verdict in brackets is for a size the target does not name.",
        "",
        *tables(results, peers_missing),
        "",
        *charts(results, args.out),
        "",
    ]
    args.out.write_text("\n".join(lines))
    meta = {"command": cmdline, "machine": m, "loadavg_start": load_start, "loadavg_end": load_end,
            "elapsed_s": elapsed, "peer_versions": versions, "peers_missing": peers_missing}
    args.out.with_suffix(".json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
