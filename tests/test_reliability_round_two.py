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
    from fastrag.vector_store.opensearch import OpenSearchVectorStore

    url = request.getfixturevalue("opensearch_emulator")  # skips, saying why, when osmem-server is absent
    return OpenSearchVectorStore(url=url, index=f"t-{uuid.uuid4().hex[:16]}", timeout=10)


STORE_KINDS = ["sqlite", "qdrant", "chroma", "opensearch-emulator"]


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
