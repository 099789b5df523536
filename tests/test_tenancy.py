"""Tenant scoping: every branch and every stacked stage sees only the bound tenant's documents."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from fastrag.errors import FilterError, InvalidParameterError, UnsupportedFilterError
from fastrag.filters import field, matches
from fastrag.ingestion import IngestionPipeline
from fastrag.models import Document
from fastrag.retrieval import (
    BM25Retriever,
    HybridRetriever,
    PathFilterRetriever,
    TenantScopedRetriever,
    VectorRetriever,
)
from fastrag.testing.fakes import HashingEmbedder, InMemoryStore
from fastrag.vector_store.sqlite import SQLiteVectorStore
from fastrag.vector_store.tenant import TenantScopedStore

pytestmark = pytest.mark.anyio


def docs() -> list[Document]:
    out = []
    for i in range(6):
        # bob's documents repeat the query words, so unscoped they would outrank alice's
        out.append(Document(id=f"alice{i}", content=f"solar panel report {i}",
                            metadata={"tenant_id": "alice", "source_uri": f"docs/a{i}.md", "lang": "en"}))
        out.append(Document(id=f"bob{i}", content=f"solar solar panel panel report report {i}",
                            metadata={"tenant_id": "bob", "source_uri": f"docs/b{i}.md", "lang": "en"}))
    out.append(Document(id="nobody", content="solar solar solar panel", metadata={"source_uri": "docs/n.md"}))
    out.append(Document(id="int-tenant", content="solar panel", metadata={"tenant_id": 7, "source_uri": "docs/7.md"}))
    return out  # fmt: skip


class Spy:
    """Records the filter each call receives, then delegates."""

    def __init__(self, inner, name: str) -> None:
        self.inner, self.name, self.filters = inner, name, []

    async def retrieve(self, query, *, k=10, filter=None):  # noqa: A002
        self.filters.append(filter)
        return await self.inner.retrieve(query, k=k, filter=filter)


@pytest.fixture
async def store():
    embedder = HashingEmbedder()
    async with SQLiteVectorStore(":memory:") as store:
        corpus = docs()
        await store.upsert(corpus, embeddings=await embedder.embed_documents([d.content for d in corpus]))
        yield store


def hybrid_over(store, *, spies: list[Spy] | None = None, fixed_filter=None) -> HybridRetriever:
    embedder = HashingEmbedder()
    vector = Spy(VectorRetriever(vector_store=store, embedder=embedder), "vector")
    # a branch with its own fixed filter, which says nothing about tenants
    bm25 = Spy(BM25Retriever(store=store, filter=fixed_filter or field("lang") == "en"), "bm25")
    if spies is not None:
        spies.extend([vector, bm25])
    return HybridRetriever([vector, bm25], candidate_k=50)


def stacks(store, spies):
    return {
        "tenant(hybrid)": lambda: TenantScopedRetriever(hybrid_over(store, spies=spies), tenant="alice"),
        "tenant(path(hybrid))": lambda: TenantScopedRetriever(
            PathFilterRetriever(hybrid_over(store, spies=spies), include_glob="docs/*.md"), tenant="alice"),
        "path(tenant(hybrid))": lambda: PathFilterRetriever(
            TenantScopedRetriever(hybrid_over(store, spies=spies), tenant="alice"), exclude_glob="**/b*.md"),
        "tenant(hybrid(path(hybrid), bm25))": lambda: TenantScopedRetriever(HybridRetriever({
            "inner": PathFilterRetriever(hybrid_over(store, spies=spies), path_filter="docs/"),
            "plain": Spy(BM25Retriever(store=store), "plain"),
        }), tenant="alice"),
    }  # fmt: skip


STACKS = ["tenant(hybrid)", "tenant(path(hybrid))", "path(tenant(hybrid))", "tenant(hybrid(path(hybrid), bm25))"]


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("call_filter", [None, field("lang") == "en", (field("tenant_id") == "bob") | (field("lang") == "en")])
async def test_no_stage_or_branch_returns_another_tenants_document(store, stack, call_filter) -> None:
    spies: list[Spy] = []
    retriever = stacks(store, spies)[stack]()
    found = await retriever.retrieve("solar panel report", k=20, filter=call_filter)
    assert found and all(d.metadata["tenant_id"] == "alice" for d in found)
    assert sorted(d.id for d in found) == [f"alice{i}" for i in range(6)]
    # every branch was handed a filter that excludes bob's and untenanted documents: the store never ranked them
    assert spies
    for spy in spies:
        assert spy.filters
        for received in spy.filters:
            for doc in docs():
                if doc.metadata.get("tenant_id") != "alice":
                    assert not matches(received, doc.metadata), (spy.name, received, doc.id)


async def test_hybrid_rerank_and_language_stages_stacked_stay_in_scope(store) -> None:
    from fastrag.retrieval.language import LanguageAwareRetriever
    from fastrag.retrieval.reranking import RerankingRetriever

    class ReversingReranker:  # puts the first stage's worst candidates first: a leak would surface
        async def rerank(self, query, documents, *, k=None):
            ranked = list(reversed(list(documents)))[:k]
            return [d.ranked(score=float(len(ranked) - r), rank=r) for r, d in enumerate(ranked)]

    class English:
        def detect(self, text):
            return "en"

    spies: list[Spy] = []
    stack = TenantScopedRetriever(
        LanguageAwareRetriever(
            retriever=RerankingRetriever(retriever=hybrid_over(store, spies=spies), reranker=ReversingReranker()),
            detector=English(),
        ),
        tenant="alice",
    )
    found = await stack.retrieve("solar panel report", k=20)
    assert sorted(d.id for d in found) == [f"alice{i}" for i in range(6)]
    assert all(spy.filters and not any(matches(f, {"tenant_id": "bob"}) for f in spy.filters) for spy in spies)
    result = await stack.retrieve_result("solar panel report", k=3)
    assert not result.retrieval_failed and all(d.metadata["tenant_id"] == "alice" for d in result.documents)


async def test_the_call_filter_cannot_widen_the_scope(store) -> None:
    retriever = TenantScopedRetriever(hybrid_over(store), tenant="alice")
    assert await retriever.retrieve("solar", k=20, filter=field("tenant_id") == "bob") == []
    assert await retriever.retrieve("solar", k=20, filter={"notEquals": {"key": "tenant_id", "value": "alice"}}) == []


async def test_hybrid_gives_the_scoped_call_filter_to_every_branch(store) -> None:
    spies: list[Spy] = []
    hybrid = hybrid_over(store, spies=spies)
    await TenantScopedRetriever(hybrid, tenant="alice").retrieve("solar", k=3)
    assert [s.name for s in spies] == ["vector", "bm25"]
    assert all(len(s.filters) == 1 and s.filters[0] is spies[0].filters[0] for s in spies)


async def test_tenant_ids_may_be_ints_and_compare_by_type(store) -> None:
    found = await TenantScopedRetriever(hybrid_over(store, fixed_filter=field("source_uri") != ""), tenant=7).retrieve("solar", k=20)
    assert [d.id for d in found] == ["int-tenant"]
    assert await TenantScopedRetriever(hybrid_over(store), tenant="7").retrieve("solar", k=20) == []


async def test_a_stage_that_drops_the_filter_cannot_leak(store, caplog) -> None:
    class IgnoresFilters:  # searches the shared store itself: neither the filter nor the tenant's scope reach it
        async def retrieve(self, query, *, k=10, filter=None):  # noqa: A002
            return await store.search_text(query, k=k)  # the filter is dropped

    found = await TenantScopedRetriever(IgnoresFilters(), tenant="alice").retrieve("solar panel report", k=20)
    assert found and all(d.metadata["tenant_id"] == "alice" for d in found)
    assert [d.rank for d in found] == list(range(len(found)))
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "tenant isolation" in record.getMessage()


async def test_a_native_filter_cannot_replace_the_scope(store) -> None:
    class NativeQuery:
        pass

    with pytest.raises(UnsupportedFilterError):  # refused, never dropped
        await TenantScopedRetriever(hybrid_over(store), tenant="alice").retrieve("solar", k=3, filter=NativeQuery())


async def test_result_status_through_the_scope(store) -> None:
    result = await TenantScopedRetriever(hybrid_over(store), tenant="alice").retrieve_result("solar", k=3)
    assert not result.retrieval_failed and len(result.documents) == 3


@pytest.mark.parametrize(
    "kwargs",
    [{"tenant": ""}, {"tenant": None}, {"tenant": True}, {"tenant": 1.5}, {"tenant": "a", "tenant_key": ""},
     {"tenant": "a", "tenant_key": "score"}, {"tenant": "a", "tenant_key": "source_uri"}],
)  # fmt: skip
def test_bad_tenants_are_rejected(kwargs) -> None:
    with pytest.raises(InvalidParameterError):
        TenantScopedRetriever(BM25Retriever(store=InMemoryStore()), **kwargs)


async def test_a_malformed_call_filter_is_a_filter_error(store) -> None:
    with pytest.raises(FilterError):
        await TenantScopedRetriever(hybrid_over(store), tenant="alice").retrieve("solar", filter={"equals": {}})


# ----------------------------------------------------------------------------------------- writes


async def test_ingestion_through_a_tenant_view_stamps_and_isolates(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    for who in ("alice", "bob"):  # the same relative paths for both tenants
        folder = tmp_path / who / "notes"
        folder.mkdir(parents=True)
        (folder / "plan.md").write_text(f"# Plan\n\n{who} keeps the solar budget.\n\n## Later\n\nMore {who} text.\n")
        (folder / "todo.txt").write_text(f"{who} must buy panels.\n")
    embedder = HashingEmbedder()
    async with SQLiteVectorStore(tmp_path / "shared.db") as shared:
        views = {who: TenantScopedStore(shared, tenant=who) for who in ("alice", "bob")}
        for who, view in views.items():
            monkeypatch.chdir(tmp_path / who)  # source_uri "notes/plan.md" for both
            report = await IngestionPipeline(embedder=embedder, vector_store=view, show_progress=False).run(["notes"])
            assert report.ok and report.files_indexed == 2
        per_tenant = await views["alice"].count()
        assert per_tenant == await views["bob"].count() > 0
        assert await shared.count() == 2 * per_tenant  # nobody overwrote anybody
        stored = await shared.get()
        assert {d.metadata["tenant_id"] for d in stored} == {"alice", "bob"}
        assert all(d.id.startswith(f"tenant_id={d.metadata['tenant_id']}::") for d in stored)

        # re-indexing through the view recognises its own chunks (ids map both ways) and writes nothing
        monkeypatch.chdir(tmp_path / "alice")
        again = await IngestionPipeline(embedder=embedder, vector_store=views["alice"], show_progress=False).run(["notes"])
        assert again.files_unchanged == 2 and again.chunks_written == 0
        # pruning alice's deleted file touches only alice's chunks
        (tmp_path / "alice" / "notes" / "todo.txt").unlink()
        pruned = await IngestionPipeline(embedder=embedder, vector_store=views["alice"], show_progress=False).run(
            ["notes"], prune=True)  # fmt: skip
        assert pruned.files_pruned == 1
        assert await views["bob"].count() == per_tenant and await views["alice"].count() == per_tenant - 1

        # searching through the view: only the tenant's documents, under the ids it wrote
        hybrid = HybridRetriever([VectorRetriever(vector_store=views["bob"], embedder=embedder),
                                  BM25Retriever(store=views["bob"])])  # fmt: skip
        found = await hybrid.retrieve("solar budget panels", k=10)
        assert found and all(d.metadata["tenant_id"] == "bob" and "::" not in d.id for d in found)
        assert {d.id for d in found} <= {d.id for d in await views["bob"].get()}

        # the view refuses another tenant's documents, offers no way to clear the shared store,
        # and closing it leaves the shared store open
        with pytest.raises(InvalidParameterError):
            await views["alice"].upsert([Document(id="x", content="x", metadata={"tenant_id": "bob"})])
        with pytest.raises(InvalidParameterError):
            await views["alice"].delete()
        assert not hasattr(views["alice"], "clear")
        await views["alice"].aclose()
        assert await shared.count() == 2 * per_tenant - 1


def test_a_tenant_view_needs_a_usable_tenant() -> None:
    for tenant in ("", None, True, 1.5, "lone \ud800", 2**63):
        with pytest.raises(InvalidParameterError):
            TenantScopedStore(object(), tenant=tenant)  # type: ignore[arg-type]
