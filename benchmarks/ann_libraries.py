"""Approximate nearest-neighbour libraries side by side, for the embedded SQLite store's ANN index.

Measures, each in a fresh process and on the same vectors, against numpy's exact k-NN (``m @ q`` +
``argpartition``, as the store does today):

* ``usearch`` (`usearch <https://github.com/unum-cloud/usearch>`_, HNSW);
* ``faiss-hnsw``, ``faiss-ivf``, ``faiss-pq-fastscan`` (`faiss-cpu <https://github.com/facebookresearch/faiss>`_:
  ``IndexHNSWFlat``; ``IndexIVFFlat``; ``PQ{dim/2}x4fs`` 4-bit product-quantisation fast scan whose best
  candidates are re-scored exactly from the float vectors, its breadth being how many);
* ``hnswlib`` (`hnswlib <https://github.com/nmslib/hnswlib>`_, HNSW);
* ``fastrag-hnsw``: :class:`fastrag.vector_store.sqlite.ann.HNSWIndex`, the wrapper the choice produced.

The choice it informs is written up in ``docs/ann.md``.

Corpora (cosine similarity on L2-normalised float32 rows, so inner product = cosine):

* ``random``: ``--n`` vectors of 256 dims, ``rng.standard_normal((n, 256), dtype=np.float32)`` L2-normalised
  (seed 0), queries the same way from seed 1: the benchmark's synthetic corpus, and the worst case for a
  graph index (no cluster structure, high intrinsic dimension);
* ``scifact``: BEIR SciFact's 5,183 abstracts (title + text) embedded with the shipped static model
  (:class:`fastrag.ingestion.Model2VecEmbedder`, 256 dims), queries SciFact's questions: real text vectors;
* ``scifact-sentences``: the same abstracts cut into sentences (one row each, about ten times as many),
  the same model and questions: real text vectors at a size where an index starts to matter.

In each corpus the last 1% of the rows (the last rows of the random stream) is held out of the build and
added afterwards, to time an incremental add of rows like the others.

Per library and corpus:

* build seconds (``--threads`` build threads), the resident-memory growth of the build (MB), file size (MB),
  save and load seconds, and whether the file can be memory-mapped (``view``: load seconds and the resident
  growth of a mapped load);
* recall@10 against exact and p50 latency of one query at a time (one search thread) for each search
  breadth (``ef_search``; ``nprobe`` for IVF; rows re-ranked for the PQ scan), and the same p50 for
  numpy's exact search;
* the chosen breadth: the smallest that reaches ``--target-recall`` (0.95), its p50 / exact p50;
* concurrency: the same queries from 2 Python threads at once on one index: do they return exactly what a
  serial run returns, and queries/s with 2 threads over 1;
* incremental add: seconds to add 1% more vectors after the build, and whether each is then its own
  nearest neighbour; removal support;
* filtered search with a random allowed set of 1% and 50% of the keys, through each library's own filter
  (faiss HNSW and IVF: ``IDSelectorBitmap`` in ``SearchParameters``; hnswlib: a Python ``filter`` callable;
  usearch's Python binding has no predicate and faiss refuses parameters on fast-scan indexes, so those
  over-fetch ``breadth / selectivity`` (usearch: ``2 k / selectivity``) and drop disallowed keys;
  fastrag-hnsw: its own policy, ``docs/ann.md``):
  recall@10 against exact over the allowed rows, the share of queries that came back with k results, any
  disallowed key returned, p50, against numpy's exact filtered search (``flatnonzero`` + gather + product).

Run from the repository root (about two minutes with the defaults on 2 cores)::

    python benchmarks/ann_libraries.py                      # random 20,000 + SciFact, all libraries
    python benchmarks/ann_libraries.py --datasets scifact-sentences
    python benchmarks/ann_libraries.py --n 1000000 --queries 100 --datasets random --libs faiss-pq-fastscan
    python benchmarks/ann_libraries.py --smoke              # seconds: 2,000 random vectors

A graph index of 100,000 random rows takes a minute or more to build on 2 cores; ``--index-dir DIR
--build-only`` builds it in chunks over several short runs (``--build-budget`` seconds each, resumed from
the saved partial index), and a later run with the same ``--index-dir`` measures the finished index.

Prints the tables (markdown) and writes them to ``--out`` when given.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# One search thread everywhere (numpy's BLAS too, as benchmarks/speed.py does); builds take --threads.
# faiss's OpenMP threads sleep rather than spin while waiting: on a shared machine, spinning made a faiss
# build 5x slower (8.9 s against 1.7 s for a 2,000-row PQ index here); hnswlib and usearch do not spin.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCIFACT = ROOT.parent / "shared" / "datasets" / "scifact"
DIM = 256
K = 10
LIBS = ("usearch", "faiss-hnsw", "faiss-ivf", "hnswlib", "faiss-pq-fastscan", "fastrag-hnsw")


# --------------------------------------------------------------------------------------------- helpers


def rss_mb() -> float:
    """Current resident set size of this process, MB (from /proc; 0 where there is none)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def unit_rows(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    m = rng.standard_normal((n, dim), dtype=np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    return m


def exact_top_k(matrix: np.ndarray, queries: np.ndarray, k: int, allowed: np.ndarray | None = None) -> np.ndarray:
    """``(nq, k)`` positions of the exact top-k by inner product (best first), over ``allowed`` rows only."""
    rows = np.arange(len(matrix)) if allowed is None else np.flatnonzero(allowed)
    out = np.empty((len(queries), min(k, len(rows))), dtype=np.int64)
    for start in range(0, len(queries), 64):
        s = queries[start : start + 64] @ matrix[rows].T
        top = np.argpartition(-s, out.shape[1] - 1, axis=1)[:, : out.shape[1]]
        order = np.argsort(-np.take_along_axis(s, top, axis=1), axis=1)
        out[start : start + 64] = rows[np.take_along_axis(top, order, axis=1)]
    return out


def numpy_exact(matrix: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    scores = matrix @ q
    top = np.argpartition(-scores, k)[:k]
    return top[np.argsort(-scores[top])]


def numpy_exact_filtered(matrix: np.ndarray, q: np.ndarray, k: int, allowed: np.ndarray) -> np.ndarray:
    rows = np.flatnonzero(allowed)
    scores = matrix[rows] @ q
    kk = min(k, len(rows))
    top = np.argpartition(-scores, kk - 1)[:kk]
    return rows[top[np.argsort(-scores[top])]]


def recall(found: list[np.ndarray], truth: np.ndarray) -> float:
    pairs = zip(found, truth, strict=True)
    return float(np.mean([len(set(f.tolist()) & set(t.tolist())) / max(1, len(t)) for f, t in pairs]))


def p50_ms(fn: Callable[[np.ndarray], Any], queries: np.ndarray) -> tuple[float, list[Any]]:
    """Median milliseconds of ``fn(q)`` over the queries, one at a time (after one warm-up call)."""
    fn(queries[0])
    times, out = [], []
    for q in queries:
        t = time.perf_counter()
        out.append(fn(q))
        times.append(time.perf_counter() - t)
    return 1000 * statistics.median(times), out


# ------------------------------------------------------------------------------------------- adapters


class Adapter:
    """One library behind the same small interface. Keys are row positions ``0..n-1`` here."""

    name = ""
    breadth_name = "ef_search"
    breadths: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 1024, 2048)
    mmap_note = ""
    remove_note = ""
    filter_note = ""

    def __init__(self, m: int, ef_construction: int, threads: int) -> None:
        self.m, self.efc, self.threads = m, ef_construction, threads
        self.index: Any = None

    def params(self) -> str:
        return f"M={self.m}, ef_construction={self.efc}"

    def build(self, matrix: np.ndarray) -> None: ...
    def search(self, q: np.ndarray, k: int, breadth: int) -> np.ndarray: ...
    def filtered(self, q: np.ndarray, k: int, breadth: int, allowed: np.ndarray) -> np.ndarray: ...
    def add(self, matrix: np.ndarray, start: int) -> None: ...
    def save(self, path: str) -> None: ...
    def load(self, path: str, *, view: bool) -> Any: ...


class USearchAdapter(Adapter):
    name = "usearch"
    mmap_note = "yes (Index.restore(view=True))"
    remove_note = "yes (remove marks deleted; compact rebuilds)"
    filter_note = "none in Python: over-fetch + drop"

    def build(self, matrix: np.ndarray) -> None:
        from usearch.index import Index

        self.index = Index(ndim=matrix.shape[1], metric="ip", dtype="f32", connectivity=self.m,
                           expansion_add=self.efc, expansion_search=64)
        self.index.add(np.arange(len(matrix), dtype=np.uint64), matrix, threads=self.threads)

    def _search(self, index: Any, q: np.ndarray, k: int, breadth: int) -> np.ndarray:
        index.expansion_search = breadth
        return np.asarray(index.search(q, k, threads=1).keys, dtype=np.int64)

    def search(self, q: np.ndarray, k: int, breadth: int) -> np.ndarray:
        return self._search(self.index, q, k, breadth)

    def filtered(self, q: np.ndarray, k: int, breadth: int, allowed: np.ndarray) -> np.ndarray:
        share = max(allowed.mean(), 1.0 / len(allowed))
        count = min(len(self.index), math.ceil(2 * k / share))
        keys = self._search(self.index, q, count, max(breadth, count))
        return keys[allowed[keys]][:k]

    def add(self, matrix: np.ndarray, start: int) -> None:
        self.index.add(np.arange(start, start + len(matrix), dtype=np.uint64), matrix, threads=self.threads)

    def save(self, path: str) -> None:
        self.index.save(path)

    def load(self, path: str, *, view: bool) -> Any:
        from usearch.index import Index

        return Index.restore(path, view=view)


class FaissHNSWAdapter(Adapter):
    name = "faiss-hnsw"
    mmap_note = "yes (IO_FLAG_MMAP_IFC: the vectors; graph read)"
    remove_note = "no (IndexHNSW has no remove_ids): mask + rebuild"
    filter_note = "IDSelectorBitmap, in C++"

    def build(self, matrix: np.ndarray) -> None:
        import faiss

        faiss.omp_set_num_threads(self.threads)
        self.index = faiss.IndexHNSWFlat(matrix.shape[1], self.m, faiss.METRIC_INNER_PRODUCT)
        self.index.hnsw.efConstruction = self.efc
        self.index.add(matrix)
        faiss.omp_set_num_threads(1)

    def search(self, q: np.ndarray, k: int, breadth: int) -> np.ndarray:
        import faiss

        _, ids = self.index.search(q[None, :], k, params=faiss.SearchParametersHNSW(efSearch=breadth))
        return ids[0][ids[0] >= 0]

    def filtered(self, q: np.ndarray, k: int, breadth: int, allowed: np.ndarray) -> np.ndarray:
        import faiss

        bitmap = np.packbits(allowed, bitorder="little")  # per query: the caller's mask changes per query
        sel = faiss.IDSelectorBitmap(len(allowed), faiss.swig_ptr(bitmap))
        _, ids = self.index.search(q[None, :], k, params=faiss.SearchParametersHNSW(efSearch=breadth, sel=sel))
        return ids[0][ids[0] >= 0]

    def add(self, matrix: np.ndarray, start: int) -> None:
        import faiss

        faiss.omp_set_num_threads(self.threads)
        self.index.add(matrix)
        faiss.omp_set_num_threads(1)

    def save(self, path: str) -> None:
        import faiss

        faiss.write_index(self.index, path)

    def load(self, path: str, *, view: bool) -> Any:
        import faiss

        return faiss.read_index(path, faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY if view else 0)


class FaissIVFAdapter(Adapter):
    name = "faiss-ivf"
    breadth_name = "nprobe"
    mmap_note = "yes (IO_FLAG_MMAP: the inverted lists)"
    remove_note = "yes (remove_ids)"
    filter_note = "IDSelectorBitmap, in C++"

    def params(self) -> str:
        return f"IVFFlat, nlist={self.nlist}"

    def build(self, matrix: np.ndarray) -> None:
        import faiss

        faiss.omp_set_num_threads(self.threads)
        n, dim = matrix.shape
        self.nlist = max(16, int(4 * math.sqrt(n)))  # faiss wiki's guideline: 4 * sqrt(n) to 16 * sqrt(n)
        self.breadths = tuple(p for p in (4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048) if p <= self.nlist)
        quantizer = faiss.IndexFlatIP(dim)
        self.index = faiss.IndexIVFFlat(quantizer, dim, self.nlist, faiss.METRIC_INNER_PRODUCT)
        sample = matrix[np.random.default_rng(3).choice(n, min(n, 64 * self.nlist), replace=False)]
        self.index.train(sample)
        self.index.add(matrix)
        faiss.omp_set_num_threads(1)

    def search(self, q: np.ndarray, k: int, breadth: int) -> np.ndarray:
        import faiss

        _, ids = self.index.search(q[None, :], k, params=faiss.SearchParametersIVF(nprobe=breadth))
        return ids[0][ids[0] >= 0]

    def filtered(self, q: np.ndarray, k: int, breadth: int, allowed: np.ndarray) -> np.ndarray:
        import faiss

        bitmap = np.packbits(allowed, bitorder="little")
        sel = faiss.IDSelectorBitmap(len(allowed), faiss.swig_ptr(bitmap))
        _, ids = self.index.search(q[None, :], k, params=faiss.SearchParametersIVF(nprobe=breadth, sel=sel))
        return ids[0][ids[0] >= 0]

    def add(self, matrix: np.ndarray, start: int) -> None:
        self.index.add(matrix)

    def save(self, path: str) -> None:
        import faiss

        faiss.write_index(self.index, path)

    def load(self, path: str, *, view: bool) -> Any:
        import faiss

        return faiss.read_index(path, faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY if view else 0)


class FaissPQFastScanAdapter(Adapter):
    """Not a graph: 4-bit product-quantisation codes (``PQ{dim/2}x4fs``, 64 bytes a vector at 256 dims) scanned
    with SIMD lookup tables, then the best ``breadth`` candidates re-scored exactly from the float vectors
    (which the store holds anyway). A full scan, so no worse on random vectors than on real ones."""

    name = "faiss-pq-fastscan"
    breadth_name = "rerank"
    breadths = (50, 100, 200, 500, 1000, 2000)
    mmap_note = "no (fast-scan codes are read into memory)"
    remove_note = "yes (remove_ids)"
    filter_note = "none (params refused): over-fetch + drop"

    def params(self) -> str:
        return f"PQ{self.subquantizers}x4fs + exact rerank"

    def build(self, matrix: np.ndarray) -> None:
        import faiss

        faiss.omp_set_num_threads(self.threads)
        n, dim = matrix.shape
        self.subquantizers = dim // 2
        self.index = faiss.index_factory(dim, f"PQ{self.subquantizers}x4fs", faiss.METRIC_INNER_PRODUCT)
        self.index.train(matrix[np.random.default_rng(3).choice(n, min(n, 50_000), replace=False)])
        self.index.add(matrix)
        self.matrix = matrix
        faiss.omp_set_num_threads(1)

    def _rerank(self, q: np.ndarray, candidates: np.ndarray, k: int) -> np.ndarray:
        scores = self.matrix[candidates] @ q
        top = np.argpartition(-scores, min(k, len(scores)) - 1)[:k] if len(scores) > k else np.arange(len(scores))
        return candidates[top[np.argsort(-scores[top])]]

    def search(self, q: np.ndarray, k: int, breadth: int) -> np.ndarray:
        _, ids = self.index.search(q[None, :], max(k, breadth))
        return self._rerank(q, ids[0][ids[0] >= 0], k)

    def filtered(self, q: np.ndarray, k: int, breadth: int, allowed: np.ndarray) -> np.ndarray:
        share = max(allowed.mean(), 1.0 / len(allowed))
        count = min(self.index.ntotal, math.ceil(max(k, breadth) / share))
        _, ids = self.index.search(q[None, :], count)
        candidates = ids[0][ids[0] >= 0]
        return self._rerank(q, candidates[allowed[candidates]], k)

    def add(self, matrix: np.ndarray, start: int) -> None:
        self.index.add(matrix)
        self.matrix = np.vstack([self.matrix, matrix])

    def save(self, path: str) -> None:
        import faiss

        faiss.write_index(self.index, path)

    def load(self, path: str, *, view: bool) -> Any:
        import faiss

        return faiss.read_index(path)


class FastragHNSWAdapter(Adapter):
    """fastrag's own wrapper, :class:`fastrag.vector_store.sqlite.ann.HNSWIndex` (faiss HNSW keyed by rowid):
    the same graph as ``faiss-hnsw`` plus the key map, the per-query bitmap of the caller's mask, and the
    exact answer for rare or short filters."""

    name = "fastrag-hnsw"
    mmap_note = "yes (HNSWIndex.load(mmap=True))"
    remove_note = "yes (tombstones; rebuild when dead_fraction grows)"
    filter_note = "IDSelectorBitmap, walk widened; exact when cheaper"

    def build(self, matrix: np.ndarray) -> None:
        from fastrag.vector_store.sqlite.ann import HNSWIndex

        self.index = HNSWIndex.build(matrix, np.arange(len(matrix)), m=self.m, ef_construction=self.efc)

    def search(self, q: np.ndarray, k: int, breadth: int) -> np.ndarray:
        return self.index.search(q, k, ef_search=breadth)[0]

    def filtered(self, q: np.ndarray, k: int, breadth: int, allowed: np.ndarray) -> np.ndarray:
        return self.index.search(q, k, allowed=allowed, ef_search=breadth)[0]

    def add(self, matrix: np.ndarray, start: int) -> None:
        self.index.add(matrix, np.arange(start, start + len(matrix)))

    def save(self, path: str) -> None:
        self.index.save(path)

    def load(self, path: str, *, view: bool) -> Any:
        from fastrag.vector_store.sqlite.ann import HNSWIndex

        return HNSWIndex.load(path, mmap=view)


class HnswlibAdapter(Adapter):
    name = "hnswlib"
    mmap_note = "no (load_index reads into memory)"
    remove_note = "yes (mark_deleted; replace_deleted)"
    filter_note = "Python callable per candidate"

    def build(self, matrix: np.ndarray) -> None:
        import hnswlib

        n, dim = matrix.shape
        self.dim = dim
        self.index = hnswlib.Index(space="ip", dim=dim)
        self.index.init_index(max_elements=n, M=self.m, ef_construction=self.efc)
        self.index.add_items(matrix, np.arange(n), num_threads=self.threads)

    def search(self, q: np.ndarray, k: int, breadth: int) -> np.ndarray:
        self.index.set_ef(max(breadth, k))
        labels, _ = self.index.knn_query(q, k=k, num_threads=1)
        return labels[0].astype(np.int64)

    def filtered(self, q: np.ndarray, k: int, breadth: int, allowed: np.ndarray) -> np.ndarray:
        self.index.set_ef(max(breadth, k))
        try:
            labels, _ = self.index.knn_query(q, k=k, num_threads=1, filter=lambda label: bool(allowed[label]))
        except RuntimeError:  # "Cannot return the results in a contiguous 2D array": fewer than k found
            return np.empty(0, dtype=np.int64)
        return labels[0].astype(np.int64)

    def add(self, matrix: np.ndarray, start: int) -> None:
        self.index.resize_index(self.index.get_current_count() + len(matrix))
        self.index.add_items(matrix, np.arange(start, start + len(matrix)), num_threads=self.threads)

    def save(self, path: str) -> None:
        self.index.save_index(path)

    def load(self, path: str, *, view: bool) -> Any:
        import hnswlib

        index = hnswlib.Index(space="ip", dim=self.dim)
        index.load_index(path)
        return index


# graph indexes, built row by row (--build-only can build them in chunks); the others build in seconds
RESUMABLE = ("usearch", "faiss-hnsw", "hnswlib", "fastrag-hnsw")

ADAPTERS: dict[str, type[Adapter]] = {
    "usearch": USearchAdapter, "faiss-hnsw": FaissHNSWAdapter, "faiss-ivf": FaissIVFAdapter, "hnswlib": HnswlibAdapter,
    "faiss-pq-fastscan": FaissPQFastScanAdapter, "fastrag-hnsw": FastragHNSWAdapter,
}


# ------------------------------------------------------------------------------------------ measuring


@dataclass
class Row:
    data: str
    n: int
    library: str
    params: str = ""
    build_s: float = 0.0
    build_rss_mb: float = 0.0
    file_mb: float = 0.0
    save_s: float = 0.0
    load_s: float = 0.0
    view_s: float | None = None
    view_rss_mb: float | None = None
    mmap: str = ""
    breadth_name: str = "ef_search"
    sweep: list[dict[str, float]] = field(default_factory=list)
    chosen: int = 0
    recall: float = 0.0
    p50_ms: float = 0.0
    exact_p50_ms: float = 0.0
    threads_agree: bool = False
    qps_1: float = 0.0
    qps_2: float = 0.0
    add_s: float = 0.0
    added_found: float = 0.0
    remove: str = ""
    filter_kind: str = ""
    filtered: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""


def qps(fn: Callable[[np.ndarray], Any], queries: np.ndarray, threads: int) -> tuple[float, list[list[Any]]]:
    """Queries/s with ``threads`` Python threads each running every query once; and each thread's results."""
    results: list[list[Any]] = [[] for _ in range(threads)]
    barrier = threading.Barrier(threads)

    def work(slot: int) -> None:
        if "faiss" in sys.modules:  # OpenMP's thread count is per calling thread: one search thread each
            sys.modules["faiss"].omp_set_num_threads(1)
        barrier.wait()
        results[slot] = [fn(q) for q in queries]

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    t = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return threads * len(queries) / (time.perf_counter() - t), results


def measure(lib: str, data: str, matrix: np.ndarray, queries: np.ndarray, extra: np.ndarray,
            args: argparse.Namespace) -> Row:
    """Every number for one library on one corpus; ``extra`` (held out of the build) is added at the end."""
    n = len(matrix)
    adapter = ADAPTERS[lib](args.m, args.ef_construction, args.threads)
    row = Row(data=data, n=n, library=lib, breadth_name=adapter.breadth_name, mmap=adapter.mmap_note,
              remove=adapter.remove_note, filter_kind=adapter.filter_note)
    gc.collect()
    before = rss_mb()
    if args.index_dir and lib in RESUMABLE:  # a build saved by --build-only runs: load it
        path, state = saved_build(args.index_dir, lib, data, n, args)
        if state["rows"] < n:
            raise RuntimeError(f"the saved build has {state['rows']:,} of {n:,} rows: run --build-only again")
        adapter.dim = matrix.shape[1]
        adapter.index = adapter.load(str(path), view=False)
        row.build_s = state["build_s"]
    else:
        t = time.perf_counter()
        adapter.build(matrix)
        row.build_s = time.perf_counter() - t
    row.build_rss_mb = rss_mb() - before
    if lib not in RESUMABLE or not args.index_dir:
        row.params = adapter.params()
    else:
        row.params = adapter.params() + ", resumable build"

    truth = exact_top_k(matrix, queries, K)
    row.exact_p50_ms, _ = p50_ms(lambda q: numpy_exact(matrix, q, K), queries)
    for breadth in adapter.breadths:
        ms, found = p50_ms(lambda q, b=breadth: adapter.search(q, K, b), queries)
        r = recall(found, truth)
        row.sweep.append({"breadth": breadth, "recall": r, "p50_ms": ms})
        if r >= args.target_recall:
            break
    hit = next((s for s in row.sweep if s["recall"] >= args.target_recall), row.sweep[-1])
    row.chosen, row.recall, row.p50_ms = int(hit["breadth"]), hit["recall"], hit["p50_ms"]

    # concurrency: 2 Python threads on one index against a serial run
    one = lambda q: adapter.search(q, K, row.chosen)  # noqa: E731
    row.qps_1, serial = qps(one, queries, 1)
    row.qps_2, both = qps(one, queries, 2)
    row.threads_agree = all(
        np.array_equal(a, b) for res in both for a, b in zip(res, serial[0], strict=True)
    )

    # filtered search
    rng = np.random.default_rng(7)
    for share in (0.01, 0.5):
        allowed = rng.random(n) < share
        ftruth = exact_top_k(matrix, queries, K, allowed)
        ms, found = p50_ms(lambda q, a=allowed: adapter.filtered(q, K, row.chosen, a), queries)
        ems, _ = p50_ms(lambda q, a=allowed: numpy_exact_filtered(matrix, q, K, a), queries)
        row.filtered.append({
            "allowed": share, "allowed_rows": int(allowed.sum()), "recall": recall(found, ftruth),
            "returned_k": float(np.mean([len(f) == min(K, allowed.sum()) for f in found])),
            "disallowed": int(sum(int((~allowed[f]).sum()) for f in found)), "p50_ms": ms, "exact_p50_ms": ems,
        })

    # persistence
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        path = os.path.join(tmp, "index.bin")
        t = time.perf_counter()
        adapter.save(path)
        row.save_s = time.perf_counter() - t
        row.file_mb = os.path.getsize(path) / 2**20
        t = time.perf_counter()
        loaded = adapter.load(path, view=False)
        row.load_s = time.perf_counter() - t
        del loaded
        if not adapter.mmap_note.startswith("no"):
            gc.collect()
            before = rss_mb()
            t = time.perf_counter()
            viewed = adapter.load(path, view=True)
            row.view_s = time.perf_counter() - t
            row.view_rss_mb = rss_mb() - before
            del viewed
        gc.collect()

    # incremental add of the held-out 1%: each must then be its own nearest neighbour
    t = time.perf_counter()
    adapter.add(extra, n)
    row.add_s = time.perf_counter() - t
    probe = extra[:50]
    row.added_found = float(np.mean([
        len(ids) > 0 and ids[0] == n + i for i, ids in enumerate(adapter.search(q, K, row.chosen) for q in probe)
    ]))
    return row


# ------------------------------------------------------------------------------------------------ data


def saved_build(folder: str, lib: str, data: str, n: int, args: argparse.Namespace) -> tuple[Path, dict[str, Any]]:
    """Where a resumable build of this library and corpus lives, and its state ``{"rows", "build_s"}``."""
    stem = Path(folder) / f"{lib}-{data}-{n}-M{args.m}-efc{args.ef_construction}"
    meta = stem.with_suffix(".json")
    state = json.loads(meta.read_text()) if meta.exists() else {"rows": 0, "build_s": 0.0}
    return stem.with_suffix(".index"), state


def build_resumable(lib: str, data: str, matrix: np.ndarray, args: argparse.Namespace) -> dict[str, Any]:
    """Build (or go on building) an index in chunks of 10,000 rows, saved after each chunk, for at most
    ``--build-budget`` seconds; the build seconds add up over runs. For machines where one long process is
    not welcome: the HNSW libraries insert one row at a time anyway, so chunks give the same graph as one
    call, less the parallelism lost at each chunk's end."""
    if lib not in RESUMABLE:
        return {"skipped": "builds in one go when measured"}
    adapter = ADAPTERS[lib](args.m, args.ef_construction, args.threads)
    adapter.dim = matrix.shape[1]
    path, state = saved_build(args.index_dir, lib, data, len(matrix), args)
    if state["rows"]:
        adapter.index = adapter.load(str(path), view=False)
    start = time.perf_counter()
    while state["rows"] < len(matrix) and time.perf_counter() - start < args.build_budget:
        rows = state["rows"]
        chunk = matrix[rows : rows + 10_000]
        t = time.perf_counter()
        if rows == 0:
            adapter.build(chunk)
        else:
            adapter.add(chunk, rows)
        state = {"rows": rows + len(chunk), "build_s": state["build_s"] + time.perf_counter() - t}
        adapter.save(str(path) + ".tmp")
        os.replace(str(path) + ".tmp", path)
        path.with_suffix(".json").write_text(json.dumps(state))
    return state


def held_out(n: int) -> int:
    """How many rows are kept out of the build and added afterwards (1%, at least 10)."""
    return max(10, n // 100)


Corpus = tuple[np.ndarray, np.ndarray, np.ndarray]  # rows to build from, held-out rows to add, queries


def random_corpus(n: int, n_queries: int) -> Corpus:
    """``n`` rows to build from and the held-out rows after them (one seed-0 stream); queries from seed 1."""
    rows = unit_rows(np.random.default_rng(0), n + held_out(n))
    return rows[:n], rows[n:], unit_rows(np.random.default_rng(1), n_queries)


def scifact_corpus(n_queries: int, *, sentences: bool = False) -> Corpus:
    """SciFact embedded with the shipped static model: one row per abstract (title + text), or with
    ``sentences`` one row per sentence of every abstract (about 10 times as many rows: real text vectors at
    a size where an index matters). Queries: SciFact's questions."""
    import re

    import anyio

    from fastrag.ingestion import Model2VecEmbedder

    docs = [json.loads(line) for line in (SCIFACT / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    if sentences:
        texts = [part for d in docs for part in re.split(r"(?<=[.!?])\s+", f"{d.get('title', '')}. {d.get('text', '')}")
                 if len(part) > 20]
    else:
        texts = [f"{d.get('title', '')}\n{d.get('text', '')}".strip() for d in docs]
    lines = (SCIFACT / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    questions = [json.loads(line)["text"] for line in lines]

    async def embed() -> tuple[np.ndarray, np.ndarray]:
        async with Model2VecEmbedder() as embedder:
            return await embedder.embed_documents(texts), await embedder.embed_documents(questions[:n_queries])

    matrix, queries = anyio.run(embed)  # the last 1% of the rows is the held-out part
    matrix = matrix[np.linalg.norm(matrix, axis=1) > 0]
    keep = np.linalg.norm(queries, axis=1) > 0
    h = held_out(len(matrix))
    return np.ascontiguousarray(matrix[:-h]), np.ascontiguousarray(matrix[-h:]), np.ascontiguousarray(queries[keep])


# ---------------------------------------------------------------------------------------------- tables


def tables(rows: list[Row], args: argparse.Namespace) -> str:
    out = [
        f"Machine: {os.cpu_count()} cores, {args.threads} build threads, searches one query at a time on one "
        f"thread; k={K}; M={args.m}, ef_construction={args.ef_construction} for the HNSW libraries; "
        f"{args.queries} queries; the chosen breadth is the smallest reaching recall@10 >= {args.target_recall}.",
        "",
        "| data | n | library | params | build s | index RSS MB | file MB | save s | load s | mmap load s (RSS MB) "
        "| breadth | recall@10 | p50 ms | exact p50 ms | p50 / exact | 2 threads agree | q/s 1 -> 2 threads "
        "| add 1% s (found) | removal |",
        "|" + " --- |" * 19,
    ]
    for r in rows:
        if r.error:
            out.append(f"| {r.data} | {r.n:,} | {r.library} | error: {r.error} |" + " |" * 15)
            continue
        view = "no" if r.view_s is None else f"{r.view_s:.3f} ({r.view_rss_mb:+.0f})"
        out.append(
            f"| {r.data} | {r.n:,} | {r.library} | {r.params} | {r.build_s:.1f} | {r.build_rss_mb:.0f} "
            f"| {r.file_mb:.0f} | {r.save_s:.2f} | {r.load_s:.3f} | {view} | {r.breadth_name}={r.chosen} "
            f"| {r.recall:.3f} | {r.p50_ms:.3f} | {r.exact_p50_ms:.3f} | {r.p50_ms / r.exact_p50_ms:.2f} "
            f"| {'yes' if r.threads_agree else 'NO'} | {r.qps_1:.0f} -> {r.qps_2:.0f} "
            f"| {r.add_s:.2f} ({r.added_found:.0%}) | {r.remove} |"
        )
    out += ["", "Search breadth sweep (one query at a time):", "",
            "| data | n | library | breadth | recall@10 | p50 ms |", "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        for s in r.sweep:
            out.append(f"| {r.data} | {r.n:,} | {r.library} | {r.breadth_name}={int(s['breadth'])} "
                       f"| {s['recall']:.3f} | {s['p50_ms']:.3f} |")
    out += ["", "Filtered search at the chosen breadth (recall against exact over the allowed rows):", "",
            "| data | n | library | filter | allowed | recall@10 | returned k | disallowed keys | p50 ms "
            "| exact filtered p50 ms |", "|" + " --- |" * 10]
    for r in rows:
        for f in r.filtered:
            out.append(
                f"| {r.data} | {r.n:,} | {r.library} | {r.filter_kind} | {f['allowed']:.0%} ({f['allowed_rows']:,}) "
                f"| {f['recall']:.3f} | {f['returned_k']:.0%} | {f['disallowed']} | {f['p50_ms']:.3f} "
                f"| {f['exact_p50_ms']:.3f} |"
            )
    return "\n".join(out) + "\n"


def run_worker(lib: str, data: str, folder: str, args: argparse.Namespace) -> Row:
    """Measure one library on the corpus saved in ``folder``, in a fresh process (so its memory is its own)."""
    cmd = [sys.executable, __file__, "--worker", lib, data, folder, "--m", str(args.m),
           "--ef-construction", str(args.ef_construction), "--threads", str(args.threads),
           "--target-recall", str(args.target_recall), "--build-budget", str(args.build_budget)]
    cmd += ["--tmp", args.tmp] if args.tmp else []
    cmd += ["--index-dir", args.index_dir] if args.index_dir else []
    cmd += ["--build-only"] if args.build_only else []
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if args.build_only:
        print(f"  {lib} {data}: {proc.stdout.strip() or proc.stderr.strip()[-300:]}", file=sys.stderr)
        return Row(data=data, n=0, library=lib, error="build only")
    if proc.returncode != 0:
        n = len(np.load(os.path.join(folder, "matrix.npy"), mmap_mode="r"))
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return Row(data=data, n=n, library=lib, error=last[:120])
    return Row(**json.loads(proc.stdout.strip().splitlines()[-1]))


def worker(lib: str, data: str, folder: str, args: argparse.Namespace) -> int:
    """The child's side of :func:`run_worker`: print the :class:`Row` as one JSON line."""
    matrix = np.load(os.path.join(folder, "matrix.npy"))
    extra = np.load(os.path.join(folder, "extra.npy"))
    queries = np.load(os.path.join(folder, "queries.npy"))
    if args.build_only:
        print(json.dumps(build_resumable(lib, data, matrix, args)))
        return 0
    print(json.dumps(measure(lib, data, matrix, queries, extra, args).__dict__))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--n", type=int, nargs="+", default=[20_000], help="sizes of the random corpus")
    parser.add_argument("--datasets", default="random,scifact",
                        help="comma-separated: random, scifact, scifact-sentences (about 50,000 rows)")
    parser.add_argument("--libs", default=",".join(LIBS), help=f"comma-separated, of: {', '.join(LIBS)}")
    parser.add_argument("--queries", type=int, default=200, help="queries per corpus")
    parser.add_argument("--m", type=int, default=32, help="HNSW M (usearch: connectivity)")
    parser.add_argument("--ef-construction", type=int, default=128,
                        help="HNSW ef_construction (usearch: expansion_add)")
    parser.add_argument("--threads", type=int, default=2, help="build threads")
    parser.add_argument("--target-recall", type=float, default=0.95, help="recall@10 the chosen breadth must reach")
    parser.add_argument("--tmp", default=None, help="folder for the saved index files (default: the system's)")
    parser.add_argument("--out", type=Path, default=None, help="also write the tables here (markdown)")
    parser.add_argument("--json", type=Path, default=None, help="also write the raw rows here")
    parser.add_argument("--index-dir", default=None,
                        help="keep the HNSW indexes here: measure loads a build finished by --build-only runs")
    parser.add_argument("--build-only", action="store_true",
                        help="with --index-dir: build or resume each index for --build-budget seconds, then stop")
    parser.add_argument("--build-budget", type=float, default=150.0, help="seconds of building per --build-only run")
    parser.add_argument("--smoke", action="store_true", help="2,000 random vectors, 50 queries (seconds)")
    parser.add_argument("--worker", nargs=3, metavar=("LIB", "DATA", "FOLDER"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(*args.worker, args)
    if args.smoke:
        args.n, args.datasets, args.queries = [2_000], "random", 50
    libs = [name.strip() for name in args.libs.split(",") if name.strip()]
    unknown = [name for name in libs if name not in ADAPTERS]
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    if unknown or not libs:
        parser.error(f"--libs: unknown {unknown}; choose from {', '.join(LIBS)}")
    if set(datasets) - {"random", "scifact", "scifact-sentences"} or not datasets:
        parser.error("--datasets: choose from random, scifact, scifact-sentences")
    if args.build_only and not args.index_dir:
        parser.error("--build-only needs --index-dir")
    if min(args.n) < 100 or args.queries < 1 or args.threads < 1:
        parser.error("--n must be at least 100, --queries and --threads at least 1")

    corpora: list[tuple[str, Callable[[], Corpus]]] = []
    if "random" in datasets:
        corpora += [("random", lambda n=n: random_corpus(n, args.queries)) for n in args.n]
    if "scifact" in datasets:
        corpora.append(("scifact", lambda: scifact_corpus(args.queries)))
    if "scifact-sentences" in datasets:
        corpora.append(("scifact-sentences", lambda: scifact_corpus(args.queries, sentences=True)))
    rows = []
    with tempfile.TemporaryDirectory(dir=args.tmp) as folder:
        for data, load in corpora:
            matrix, extra, queries = load()
            np.save(os.path.join(folder, "matrix.npy"), matrix)
            np.save(os.path.join(folder, "extra.npy"), extra)
            np.save(os.path.join(folder, "queries.npy"), queries)
            del matrix, extra
            for lib in libs:
                print(f"{data} n={len(np.load(os.path.join(folder, 'matrix.npy'), mmap_mode='r')):,} {lib} ...",
                      file=sys.stderr, flush=True)
                rows.append(run_worker(lib, data, folder, args))
    if args.build_only:
        return 0
    text = tables(rows, args)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in rows], indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
