"""Reliability, round two (issue 13, and issue 16 point 4): each test here failed before its fix.

Each section names the issue point it proves; docs/reliability.md lists the guarantees with these tests."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np
import pytest

from fastrag.errors import BackendUnavailableError, ConfigurationError, FilterError, InvalidParameterError
from fastrag.retrieval.result import retrieve_result
from fastrag.knowledge_base import KnowledgeBase, SearchSettings
from fastrag.models import Document
from fastrag.retrieval import BM25Retriever
from fastrag.testing.fakes import HashingEmbedder
from fastrag.testing.faults import FaultyStore
from fastrag.vector_store.tenant import TenantScopedStore
from fastrag.vector_store.sqlite import SQLiteVectorStore

pytestmark = pytest.mark.anyio


def notes(n: int) -> list[Document]:
    topics = ["solar panels", "tea brewing", "bicycle repair", "tax returns", "garden roses"]
    return [Document(id=f"doc{i}", content=f"notes about {topics[i % len(topics)]} number {i}") for i in range(n)]


# ------------------------------------------------------------- issue 16.4: BM25 needs a store with BM25


class DenseOnlyStore:
    """A vector store without full text (as Chroma is): no ``search_text``."""

    async def upsert(self, documents, *, embeddings=None):  # noqa: ANN001, ANN201
        return None

    async def search_vector(self, embedding, *, k, filter=None):  # noqa: ANN001, ANN201, A002
        return []

    async def count(self, *, filter=None):  # noqa: ANN001, ANN201, A002
        return 0

    async def delete(self, *, ids=None, filter=None):  # noqa: ANN001, ANN201, A002
        return 0


async def test_bm25_retriever_refuses_a_store_without_bm25_when_built_with_the_clis_advice() -> None:
    with pytest.raises(ConfigurationError) as caught:
        BM25Retriever(store=DenseOnlyStore())  # type: ignore[arg-type]
    message = str(caught.value)
    assert "needs BM25" in message and "DenseOnlyStore" in message
    assert "configure a lexical store" in message and "sqlite:///.fastrag/bm25.db" in message


# ------------------------------------------ issue 13.5: "auto" reports a store down like the other modes


async def test_auto_mode_reports_a_store_down_as_retrieval_failed_and_search_raises_it() -> None:
    async with SQLiteVectorStore(":memory:") as healthy:
        async with KnowledgeBase(healthy) as kb:
            await kb.add_documents(notes(6))
        down = FaultyStore(healthy)
        async with KnowledgeBase(down, settings=SearchSettings(search_mode="auto")) as kb:
            for mode in ("auto", "hybrid", "vector", "keyword"):
                response = await kb.search_result("solar panels", search_mode=mode)
                assert response.retrieval_failed, mode
                assert isinstance(response.error, BackendUnavailableError), mode
                assert response.documents == ()
            with pytest.raises(BackendUnavailableError):
                await kb.search("solar panels")


# ------------------------------------ issue 13.1 and 13.10: NUL and lone surrogates in ids, text and filters


def _make_store(kind: str, request: pytest.FixtureRequest) -> Any:
    if kind == "sqlite":
        return SQLiteVectorStore(":memory:")
    if kind == "qdrant":
        qdrant = pytest.importorskip("fastrag.vector_store.qdrant", reason="the qdrant extra is not installed")
        pytest.importorskip("qdrant_client", reason="the qdrant extra is not installed")
        return qdrant.QdrantVectorStore(location=":memory:", collection="t", enable_bm25=True)
    if kind == "chroma":
        pytest.importorskip("chromadb", reason="the chroma extra is not installed")
        from fastrag.vector_store.chroma import ChromaVectorStore

        return ChromaVectorStore(collection=f"t-{uuid.uuid4().hex[:16]}")
    if kind == "postgres":
        pytest.importorskip("psycopg", reason="the postgres extra is not installed")
        from fastrag.vector_store.postgres import PgVectorStore

        url = request.getfixturevalue("postgres_url")  # skips, saying why, when no PostgreSQL can run here
        return PgVectorStore(url, table=f"t_{uuid.uuid4().hex[:16]}", pool_size=2)
    if kind == "milvus-2.5":
        from fastrag.vector_store.milvus import MilvusVectorStore

        url = request.getfixturevalue("milvus_server")  # skips, saying why, when there is no native Milvus
        return MilvusVectorStore(url, f"t_{uuid.uuid4().hex[:16]}", enable_bm25=True)
    from fastrag.vector_store.opensearch import OpenSearchVectorStore

    url = request.getfixturevalue("opensearch_emulator")  # skips, saying why, when osmem-server is absent
    return OpenSearchVectorStore(url=url, index=f"t-{uuid.uuid4().hex[:16]}", timeout=10)


STORE_KINDS = ["sqlite", "qdrant", "chroma", "opensearch-emulator", "milvus-2.5", "postgres"]


@pytest.fixture(params=STORE_KINDS)
async def any_store(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    async with _make_store(request.param, request) as store:
        yield store


def unit_rows(n: int, dim: int = 4) -> np.ndarray:
    rows = np.zeros((n, dim), dtype=np.float32)
    for i in range(n):
        rows[i, i % dim] = 1.0
        rows[i, (i + 1) % dim] = 0.5
    return rows


NUL_IDS = ["a", "a\x00x", "a\x00", "\x00", "a\x00\x00", "\x00a"]


async def test_ids_that_differ_after_a_nul_stay_distinct_documents_on_every_store(any_store: Any) -> None:
    docs = [Document(id=doc_id, content=f"text {i}", metadata={"k": doc_id}) for i, doc_id in enumerate(NUL_IDS)]
    if type(any_store).__name__ == "PgVectorStore":
        # PostgreSQL's JSONB cannot hold U+0000: such metadata is refused before writing, never cut at the NUL
        with pytest.raises(InvalidParameterError):
            await any_store.upsert(docs, embeddings=unit_rows(len(docs)))
        assert await any_store.count() == 0
        docs = [Document(id=doc_id, content=f"text {i}", metadata={"k": f"v{i}"}) for i, doc_id in enumerate(NUL_IDS)]
        await any_store.upsert(docs, embeddings=unit_rows(len(docs)))
        for doc in docs:
            assert [(d.id, d.content) for d in await any_store.get(ids=[doc.id])] == [(doc.id, doc.content)]
        assert await any_store.delete(ids=["a\x00x"]) == 1
        assert sorted(d.id for d in await any_store.get()) == sorted(set(NUL_IDS) - {"a\x00x"})
        return
    await any_store.upsert(docs, embeddings=unit_rows(len(docs)))
    for doc in docs:
        assert [(d.id, d.content) for d in await any_store.get(ids=[doc.id])] == [(doc.id, doc.content)]
        assert await any_store.count(filter={"equals": {"key": "k", "value": doc.id}}) == 1
    assert await any_store.delete(ids=["a\x00x"]) == 1
    assert sorted(d.id for d in await any_store.get()) == sorted(set(NUL_IDS) - {"a\x00x"})
    assert await any_store.delete(filter={"equals": {"key": "k", "value": "\x00"}}) == 1
    assert sorted(d.id for d in await any_store.get()) == sorted(set(NUL_IDS) - {"a\x00x", "\x00"})


BAD_TEXT: list[Callable[[], Document]] = [
    lambda: Document(id="b\ud800", content="fine"),
    lambda: Document(id="ok", content="lone \udc00 surrogate"),
    lambda: Document(id="ok", content="fine", metadata={"k": "\ud800"}),
    lambda: Document(id="ok", content="fine", metadata={"\udfff": 1}),
    lambda: Document(id="ok", content="fine", metadata={"deep": [{"x": ["\ud800"]}]}),
]


async def test_text_that_is_not_valid_unicode_is_refused_typed_before_writing_on_every_store(any_store: Any) -> None:
    await any_store.upsert([Document(id="keep", content="kept")], embeddings=unit_rows(1))
    for make in BAD_TEXT:
        bad = make()
        with pytest.raises(InvalidParameterError, match="not valid Unicode"):
            await any_store.upsert([Document(id="first", content="x"), bad], embeddings=unit_rows(2))
    assert [d.id for d in await any_store.get()] == ["keep"]  # nothing of a refused batch was written
    for call in (lambda: any_store.get(ids=["b\ud800"]), lambda: any_store.delete(ids=["keep", "b\ud800"])):
        with pytest.raises(InvalidParameterError, match="not valid Unicode"):
            await call()
    assert await any_store.count() == 1


async def test_a_filter_value_that_is_not_valid_unicode_is_a_bad_argument_not_a_retrieval_failure(
    any_store: Any,
) -> None:
    await any_store.upsert([Document(id="d", content="solar power", metadata={"k": "v"})], embeddings=unit_rows(1))
    bad = {"equals": {"key": "k", "value": "x\ud800"}}
    with pytest.raises(FilterError, match="not valid Unicode"):
        await any_store.count(filter=bad)
    with pytest.raises(FilterError, match="not valid Unicode"):
        await any_store.get(filter={"in": {"key": "k", "value": ["v", "\udc00"]}})
    if callable(getattr(any_store, "search_text", None)):
        with pytest.raises(FilterError, match="not valid Unicode"):
            await retrieve_result(BM25Retriever(store=any_store), "solar", k=3, filter=bad)


# ------------------------------------------------- issue 13.2: tenants never share a stored id, in any encoding

COLLIDING_BEFORE = [  # (tenant, id) pairs that "<tenant>::<id>" stored under one id
    ((1, "x"), ("1", "x")),
    (("a:", ":b"), ("a", "::b")),
    (("a", "b::c"), ("a::b", "c")),
    (("a\x00", "x"), ("a", "\x00x")),
    (("a=b", "x"), ("a%3Db", "x")),
]


@pytest.mark.parametrize(("first", "second"), COLLIDING_BEFORE, ids=[repr(p) for p in COLLIDING_BEFORE])
async def test_tenant_views_never_overwrite_each_other_whatever_their_tenants_and_ids_hold(first, second) -> None:
    async with SQLiteVectorStore(":memory:") as shared:
        for tenant, doc_id in (first, second):
            view = TenantScopedStore(shared, tenant=tenant)
            await view.upsert([Document(id=doc_id, content=f"written by {tenant!r}")], embeddings=unit_rows(1))
        assert await shared.count() == 2
        for tenant, doc_id in (first, second):
            view = TenantScopedStore(shared, tenant=tenant)
            assert [(d.id, d.content) for d in await view.get()] == [(doc_id, f"written by {tenant!r}")]
            assert await view.delete(ids=[doc_id]) == 1
        assert await shared.count() == 0


async def test_a_tenant_view_and_a_knowledge_base_scope_share_one_encoding() -> None:
    async with SQLiteVectorStore(":memory:") as shared, KnowledgeBase(shared, embedder=HashingEmbedder()) as kb:
        await kb.add_documents([Document(id="a:b", content="kb note")], user_id="al:ice")
        view = TenantScopedStore(shared, tenant="al:ice", tenant_key="user_id")
        assert [(d.id, d.content) for d in await view.get()] == [("a:b", "kb note")]
        await view.upsert([Document(id="a:b", content="view note")], embeddings=unit_rows(1, 64))
        assert [(d.id, d.content) for d in await shared.get()] == [("user_id=al%3Aice::a:b", "view note")]
        assert [d.content for d in await kb.search("note", user_id="al:ice", search_mode="keyword")] == ["view note"]


async def test_a_store_written_with_the_old_tenant_ids_is_refused_then_migrated_never_orphaned() -> None:
    embedder = HashingEmbedder()
    async with SQLiteVectorStore(":memory:") as shared:
        old = [Document(id=f"alice::doc{i}", content=f"solar note {i}", metadata={"tenant_id": "alice", "title": "T"})
               for i in range(3)]  # what TenantScopedStore wrote before the scoped encoding
        await shared.upsert(old, embeddings=await embedder.embed_documents([f"T\n{d.content}" for d in old]))
        await shared.upsert([Document(id="bob::doc0", content="bob", metadata={"tenant_id": "bob"})])
        alice = TenantScopedStore(shared, tenant="alice")
        for call in (alice.get, alice.count, lambda: alice.search_text("solar", k=3),
                     lambda: alice.upsert([Document(id="doc0", content="new")])):
            with pytest.raises(ConfigurationError, match="migrate_legacy_ids"):
                await call()
        assert await shared.count() == 4  # nothing written beside the old copies
        assert await alice.migrate_legacy_ids(embedder=embedder) == 3
        assert sorted(d.id for d in await alice.get()) == ["doc0", "doc1", "doc2"]
        assert await alice.migrate_legacy_ids(embedder=embedder) == 0
        hits = await alice.search_vector(np.asarray(await embedder.embed_query("T\nsolar note 1")), k=1)
        assert [d.id for d in hits] == ["doc1"]  # vectors were rewritten too
        assert sorted(d.id for d in await shared.get()) == ["bob::doc0"] + [f"tenant_id=alice::doc{i}" for i in range(3)]


# ------------------------------------------------ issue 13.12: the default hybrid's top does not depend on k

WORDS = ("solar panel battery grid power energy wind turbine storage inverter roof cost tax credit install "
         "repair garden water pump heat winter summer price market home office cable charge meter voltage "
         "current load peak night day cloud sun light shade angle tilt north south east west noise warranty "
         "lease loan bank rate year month week hour minute").split()


def word_corpus(n: int, seed: int = 7) -> list[Document]:
    import random

    rng = random.Random(seed)
    return [Document(id=f"d{i:03d}", content=" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 18))))
            for i in range(n)]  # fmt: skip


QUERIES = ["solar panel cost", "wind turbine noise", "battery storage night", "heat pump winter price",
           "roof tilt angle south", "grid voltage peak load", "tax credit install loan"]


async def test_the_default_hybrids_first_results_are_the_same_for_k_10_and_k_60() -> None:
    from fastrag.config import open_embedder
    from fastrag.retrieval import HybridRetriever, VectorRetriever

    embedder = open_embedder()  # the shipped static model: the default fusion is min-max with BM25 at 0.9
    docs = word_corpus(400)
    async with SQLiteVectorStore(":memory:") as store:
        await store.upsert(docs, embeddings=np.asarray(await embedder.embed_documents([d.content for d in docs])))
        hybrid = HybridRetriever([VectorRetriever(vector_store=store, embedder=embedder), BM25Retriever(store=store)])
        for query in QUERIES:
            top = [(d.id, d.score) for d in await hybrid.retrieve(query, k=10)]
            for k in (41, 60, 200):
                deeper = [(d.id, d.score) for d in await hybrid.retrieve(query, k=k)]
                assert deeper[:10] == top, (query, k)
                assert len(deeper) == k and all(a[1] >= b[1] for a, b in zip(deeper, deeper[1:], strict=False))


# ------------------------------------------- issue 13.11: top k is a prefix of top k + n, however many tie

TIED = 60


def tied_corpus() -> list[Document]:
    same = [Document(id=f"t{i:02d}", content="boilerplate legal notice", metadata={"source_uri": f"notes/t{i:02d}.md",
                                                                                     "tenant_id": "acme"})
            for i in range(TIED)]  # fmt: skip
    other = [Document(id=f"o{i}", content="unrelated words entirely", metadata={"source_uri": f"notes/o{i}.md",
                                                                                 "tenant_id": "acme"})
             for i in range(5)]  # fmt: skip
    return same + other


def tie_retrievers(store: Any, embedder: Any) -> dict[str, Any]:
    from fastrag.rerankers import EmbedderReranker
    from fastrag.retrieval import (
        GroupingRetriever,
        HybridRetriever,
        PathFilterRetriever,
        ReciprocalRankFusion,
        RerankingRetriever,
        TenantScopedRetriever,
        VectorRetriever,
    )

    out: dict[str, Any] = {}
    if callable(getattr(store, "search_vector", None)) and not type(store).__name__.startswith("OpenSearch"):
        out["vector"] = VectorRetriever(vector_store=store, embedder=embedder)
    if callable(getattr(store, "search_text", None)):
        out["bm25"] = BM25Retriever(store=store)
    first = next(iter(out.values()))
    if len(out) == 2:
        out["hybrid"] = HybridRetriever([out["vector"], out["bm25"]])
        out["hybrid_rrf"] = HybridRetriever([out["vector"], out["bm25"]], fusion=ReciprocalRankFusion(), candidate_k=20)
    out["path_filter"] = PathFilterRetriever(first, include_glob="notes/**")
    out["reranking"] = RerankingRetriever(retriever=first, reranker=EmbedderReranker(embedder), candidate_k=TIED)
    out["tenant"] = TenantScopedRetriever(first, tenant="acme")
    out["grouping"] = GroupingRetriever(first, group_by="source_uri")
    if type(store).__name__ == "QdrantVectorStore":
        from fastrag.vector_store.qdrant import QdrantHybridRetriever

        out["qdrant_hybrid"] = QdrantHybridRetriever(store=store, embedder=embedder, candidate_k=TIED)
    return out


async def test_top_k_is_a_prefix_of_top_k_plus_n_with_many_tied_documents_on_every_store_and_retriever(
    any_store: Any,
) -> None:
    embedder = HashingEmbedder()
    docs = tied_corpus()
    vectors = np.asarray(await embedder.embed_documents([d.content for d in docs]))
    await any_store.upsert(docs[::-1], embeddings=vectors[::-1].copy())  # written in reverse id order
    for name, retriever in tie_retrievers(any_store, embedder).items():
        full = [d.id for d in await retriever.retrieve("boilerplate legal notice", k=TIED)]
        if name == "qdrant_hybrid":  # Qdrant fuses server-side: its legs order tied points by point id
            assert sorted(full) == [f"t{i:02d}" for i in range(TIED)], name
        else:
            assert full == [f"t{i:02d}" for i in range(TIED)], name  # ties broken by id
        for k in (1, 5, 10, 29, 41):
            assert [d.id for d in await retriever.retrieve("boilerplate legal notice", k=k)] == full[:k], (name, k)


# ------------------------------- issue 13.6: branch_timeout holds for store calls running in worker threads


async def _timed_partial(hybrid: Any, query: str) -> tuple[float, Any]:
    import time

    start = time.perf_counter()
    result = await hybrid.retrieve_result(query, k=5)
    return time.perf_counter() - start, result


async def test_branch_timeout_interrupts_a_slow_sqlite_filter_evaluation_in_its_worker_thread(
    monkeypatch, tmp_path
) -> None:
    import time

    from fastrag.errors import RetrievalTimeoutError
    from fastrag.retrieval import HybridRetriever, VectorRetriever
    from fastrag.vector_store.sqlite import columns

    embedder = HashingEmbedder()
    docs = [Document(id=f"d{i:04d}", content=f"solar power note {i}", metadata={"path": f"notes/{i}.md"})
            for i in range(3000)]  # fmt: skip
    real = columns.matches

    def slow(node, metadata):  # noqa: ANN001, ANN202 - a filter 3 ms per distinct value: 9 s for this store
        time.sleep(0.003)
        return real(node, metadata)

    async with SQLiteVectorStore(tmp_path / "s.db") as store:  # a file store reads on a pool of connections
        await store.upsert(docs, embeddings=np.asarray(await embedder.embed_documents([d.content for d in docs])))
        await BM25Retriever(store=store).retrieve("solar power", k=5)  # warm: the fast branch answers in time
        monkeypatch.setattr(columns, "matches", slow)
        slow_branch = VectorRetriever(vector_store=store, embedder=embedder,
                                      filter={"startsWith": {"key": "path", "value": "notes/1"}})
        hybrid = HybridRetriever({"vector": slow_branch, "bm25": BM25Retriever(store=store)},
                                 branch_timeout=0.5, on_branch_error="partial")
        elapsed, result = await _timed_partial(hybrid, "solar power")
        assert elapsed < 3.0, elapsed  # was 9 s and more: the thread ran the whole filter
        assert result.partial and not result.retrieval_failed and len(result.documents) == 5
        assert isinstance(result.failed_branches["vector"], RetrievalTimeoutError)
        monkeypatch.setattr(columns, "matches", real)
        assert await store.count(filter={"startsWith": {"key": "path", "value": "notes/1"}}) == 1111  # still sound


async def test_branch_timeout_interrupts_a_slow_sql_statement_of_a_sqlite_read(monkeypatch, tmp_path) -> None:
    from fastrag.errors import RetrievalTimeoutError
    from fastrag.retrieval import HybridRetriever, VectorRetriever
    from fastrag.vector_store.sqlite import store as store_module

    embedder = HashingEmbedder()
    docs = [Document(id=f"d{i}", content=f"solar power note {i}", metadata={"path": f"notes/{i}.md"}) for i in range(50)]
    real = store_module.load_column

    def slow_load(conn, *args):  # noqa: ANN001, ANN002, ANN202 - seconds of work inside SQLite first
        conn.execute("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 20000000) "
                     "SELECT count(*) FROM c").fetchone()
        return real(conn, *args)

    async with SQLiteVectorStore(tmp_path / "s.db") as store:
        await store.upsert(docs, embeddings=np.asarray(await embedder.embed_documents([d.content for d in docs])))
        await BM25Retriever(store=store).retrieve("solar power", k=5)  # warm: the fast branch answers in time
        monkeypatch.setattr(store_module, "load_column", slow_load)
        slow_branch = VectorRetriever(vector_store=store, embedder=embedder,
                                      filter={"startsWith": {"key": "path", "value": "notes/1"}})
        hybrid = HybridRetriever({"vector": slow_branch, "bm25": BM25Retriever(store=store)},
                                 branch_timeout=0.5, on_branch_error="partial")
        elapsed, result = await _timed_partial(hybrid, "solar power")
        assert elapsed < 3.0, elapsed  # uninterrupted, the statement runs for about 20 s
        assert result.partial and isinstance(result.failed_branches["vector"], RetrievalTimeoutError)
        monkeypatch.setattr(store_module, "load_column", real)
        assert await store.count(filter={"startsWith": {"key": "path", "value": "notes/1"}}) == 11  # it answers


async def test_branch_timeout_abandons_a_slow_qdrant_local_read() -> None:
    import threading
    import time

    qdrant = pytest.importorskip("fastrag.vector_store.qdrant", reason="the qdrant extra is not installed")
    from fastrag.errors import RetrievalTimeoutError
    from fastrag.retrieval import HybridRetriever, VectorRetriever

    embedder = HashingEmbedder()
    docs = notes(10)
    vectors = np.asarray(await embedder.embed_documents([d.content for d in docs]))
    release = threading.Event()
    async with qdrant.QdrantVectorStore(location=":memory:", collection="t") as slow_store, \
            SQLiteVectorStore(":memory:") as fast_store:  # fmt: skip
        await slow_store.upsert(docs, embeddings=vectors)
        await fast_store.upsert(docs, embeddings=vectors)
        client = slow_store._client
        real = client.query_points

        def stalled(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - local mode computing for 10 s
            release.wait(10)
            return real(*args, **kwargs)

        client.query_points = stalled
        hybrid = HybridRetriever({"vector": VectorRetriever(vector_store=slow_store, embedder=embedder),
                                  "bm25": BM25Retriever(store=fast_store)}, branch_timeout=0.5, on_branch_error="partial")
        await BM25Retriever(store=fast_store).retrieve("solar panels", k=3)  # warm: the fast branch answers in time
        started = time.perf_counter()
        result = await hybrid.retrieve_result("solar panels", k=3)
        elapsed = time.perf_counter() - started
        release.set()
        client.query_points = real
        assert elapsed < 3.0, elapsed  # the stalled read alone takes 10 s
        assert result.partial and isinstance(result.failed_branches["vector"], RetrievalTimeoutError)
        assert [d.id for d in result.documents]
        assert len(await slow_store.search_vector(vectors[0], k=2)) == 2  # the abandoned read let go of the store


# ------------------------- issue 13.3: path rules never answer "no match" while matching documents exist


def crowded_notes() -> list[Document]:
    """120 documents under notes/b/ that all outscore the one under notes/a/ for "solar power"."""
    crowd = [Document(id=f"b{i:03d}", content=f"solar power solar power solar panels {i}",
                      metadata={"source_uri": f"notes/b/{i:03d}.md"}) for i in range(120)]  # fmt: skip
    return [*crowd, Document(id="a", content="a note that mentions solar power once among many other words "
                             "about gardens, tea and bicycles", metadata={"source_uri": "notes/a/plan.md"})]


async def test_a_folder_glob_is_pushed_into_the_store_filter_and_finds_the_low_scoring_match() -> None:
    from fastrag.retrieval import PathFilterRetriever

    async with SQLiteVectorStore(":memory:") as store:
        await store.upsert(crowded_notes())
        recording = FaultyStore(store, failures=0)  # records every call, fails none
        retriever = PathFilterRetriever(BM25Retriever(store=recording), include_glob="notes/a/**")
        result = await retriever.retrieve_result("solar power", k=5)
        assert [d.id for d in result.documents] == ["a"] and not result.partial
        ((method, kwargs),) = recording.calls
        assert method == "search_text" and "startsWith" in repr(kwargs["filter"])  # the store ranked notes/a only
        excluded = PathFilterRetriever(BM25Retriever(store=store), exclude_glob="notes/b/**")
        assert [d.id for d in await excluded.retrieve("solar power", k=5)] == ["a"]


async def test_rules_the_store_cannot_express_page_through_candidates_until_k_pass() -> None:
    from fastrag.retrieval import PathFilterRetriever

    async with SQLiteVectorStore(":memory:") as store:
        await store.upsert(crowded_notes())
        for rules in ({"include_glob": "**/a/*.md"}, {"path_filter": r"/a/"}, {"include_glob": "*.md",
                                                                                "exclude_glob": "notes/b/*"}):
            retriever = PathFilterRetriever(BM25Retriever(store=store), fetch_k=10, **rules)
            assert retriever.pushdown is None or "notes/b" in repr(retriever.pushdown), rules
            result = await retriever.retrieve_result("solar power", k=3)
            assert [d.id for d in result.documents] == ["a"] and not result.partial, rules


async def test_a_search_stopped_by_max_k_is_reported_incomplete_never_no_match(caplog) -> None:
    from fastrag.retrieval import PathFilterRetriever, RetrievalLimits

    async with SQLiteVectorStore(":memory:") as store:
        await store.upsert(crowded_notes())
        retriever = PathFilterRetriever(BM25Retriever(store=store), path_filter=r"/a/", fetch_k=10,
                                        limits=RetrievalLimits(max_k=50))
        result = await retriever.retrieve_result("solar power", k=3)
        assert result.documents == () and not result.retrieval_failed
        assert result.partial and "50 candidates" in result.incomplete["path_filter"]
        assert "not examined" in caplog.text


def test_cli_include_glob_finds_the_one_matching_file_among_120_better_scoring_ones(tmp_path) -> None:
    import os
    import subprocess
    import sys

    for doc in crowded_notes():
        path = tmp_path / doc.metadata["source_uri"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(doc.content + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTRAG_")}

    def fastrag(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "fastrag.cli", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)  # fmt: skip

    indexed = fastrag("index", "notes")
    assert indexed.returncode == 0, indexed.stderr
    found = fastrag("search", "solar power", "--mode", "keyword", "--include-glob", "notes/a/**")
    assert found.returncode == 0, found.stderr
    assert "notes/a/plan.md" in found.stdout and "No documents matched" not in found.stdout
    unpushable = fastrag("search", "solar power", "--mode", "keyword", "--path-filter", "/a/", "--json")
    assert unpushable.returncode == 0, unpushable.stderr
    assert '"source_uri": "notes/a/plan.md"' in unpushable.stdout and '"incomplete": {}' in unpushable.stdout
