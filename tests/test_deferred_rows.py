"""A hybrid whose branches search one SQLite store reads the rows of the k fused documents once, after
fusion (fastrag.deferred), and answers exactly as when every branch reads its own rows."""

from __future__ import annotations

import numpy as np
import pytest

from fastrag import BM25Retriever, Document, HybridRetriever, VectorRetriever, field
from fastrag.deferred import defers_rows
from fastrag.retrieval.fusion import ReciprocalRankFusion
from fastrag.testing.fakes import HashingEmbedder
from fastrag.vector_store.sqlite import SQLiteVectorStore
from fastrag.vector_store.tenant import TenantScopedStore

WORDS = "solar wind battery grid storage turbine hydro nuclear coal price policy market demand panel".split()


class PlainVector(VectorRetriever):
    """The same retriever under another type: the hybrid does not defer rows for it."""


class PlainBM25(BM25Retriever):
    pass


def corpus() -> list[Document]:
    rng = np.random.default_rng(5)
    return [Document(id=f"d{i:03d}", content=" ".join(rng.choice(WORDS, size=8)),
                     metadata={"n": i, "title": f"note {i}", "tags": ["a", str(i % 3)]}) for i in range(150)]  # fmt: skip


def full(docs: list[Document]) -> list[tuple]:
    return [(d.id, d.content, dict(d.metadata)) for d in docs]


@pytest.mark.anyio
@pytest.mark.parametrize("fusion", [None, ReciprocalRankFusion()])
async def test_deferred_rows_answer_exactly_as_rows_read_by_each_branch(tmp_path, fusion) -> None:
    embedder = HashingEmbedder(32)
    async with SQLiteVectorStore(tmp_path / "d.db") as store:
        docs = corpus()
        await store.upsert(docs, embeddings=await embedder.embed_documents([d.content for d in docs]))
        kwargs = {} if fusion is None else {"fusion": fusion}
        deferred = HybridRetriever([VectorRetriever(vector_store=store, embedder=embedder), BM25Retriever(store=store)], **kwargs)
        plain = HybridRetriever([PlainVector(vector_store=store, embedder=embedder), PlainBM25(store=store)], **kwargs)
        assert deferred._rows_store is store and plain._rows_store is None
        for query in ("solar battery storage", "coal price policy", "wind"):
            for k, where in ((5, None), (10, field("n") >= 40), (60, None)):
                assert full(await deferred.retrieve(query, k=k, filter=where)) == full(await plain.retrieve(query, k=k, filter=where))


@pytest.mark.anyio
async def test_branches_carry_ids_and_the_store_reads_k_rows_once(tmp_path, monkeypatch) -> None:
    embedder = HashingEmbedder(32)
    async with SQLiteVectorStore(tmp_path / "d.db") as store:
        docs = corpus()
        await store.upsert(docs, embeddings=await embedder.embed_documents([d.content for d in docs]))
        hybrid = HybridRetriever([VectorRetriever(vector_store=store, embedder=embedder), BM25Retriever(store=store)], candidate_k=40)
        seen: dict[str, list] = {}
        real_fuse, real_hydrate = hybrid.fusion.fuse, store.hydrate

        def fuse(results, *, k=None, depth=None):  # noqa: ANN001, ANN202 - the fusion declares accepts_depth
            seen["branches"] = [d for docs in results.values() for d in docs]
            return real_fuse(results, k=k, depth=depth)

        async def hydrate(documents):  # noqa: ANN001, ANN202
            seen.setdefault("hydrated", []).append(len(documents))
            return await real_hydrate(documents)

        monkeypatch.setattr(hybrid.fusion, "fuse", fuse)
        monkeypatch.setattr(store, "hydrate", hydrate)
        got = await hybrid.retrieve("solar wind battery", k=7)
        assert len(got) == 7 and all(d.content for d in got)
        assert len(seen["branches"]) > 7 and all(d.content == "" for d in seen["branches"])
        assert seen["hydrated"] == [7]
        # a plain search of the same store, outside the hybrid, still reads its rows
        assert all(d.content for d in await store.search_text("solar", k=5))


@pytest.mark.anyio
async def test_a_document_deleted_before_hydration_is_left_out(tmp_path) -> None:
    async with SQLiteVectorStore(tmp_path / "d.db") as store:
        await store.upsert([Document(id="a", content="solar"), Document(id="b", content="solar panel")])
        hits = [Document(id="b", content="", metadata={"score": 2.0, "rank": 0}),
                Document(id="a", content="", metadata={"score": 1.0, "rank": 1})]  # fmt: skip
        await store.delete(ids=["a"])
        got = await store.hydrate(hits)
        assert [(d.id, d.content, d.score, d.rank) for d in got] == [("b", "solar panel", 2.0, 0)]


@pytest.mark.anyio
async def test_a_tenant_scope_over_the_store_never_defers_rows(tmp_path) -> None:
    # the scope forwards unknown attributes to the shared store, whose rows are named otherwise: deferring
    # through it could read another tenant's document
    embedder = HashingEmbedder(16)
    async with SQLiteVectorStore(tmp_path / "t.db") as shared:
        alice, bob = TenantScopedStore(shared, tenant="alice"), TenantScopedStore(shared, tenant="bob")
        await alice.upsert([Document(id="x", content="alice solar secret")], embeddings=await embedder.embed_documents(["alice solar secret"]))
        await bob.upsert([Document(id="x", content="bob solar note")], embeddings=await embedder.embed_documents(["bob solar note"]))
        assert defers_rows(shared) and not defers_rows(alice)
        hybrid = HybridRetriever([VectorRetriever(vector_store=bob, embedder=embedder), BM25Retriever(store=bob)])
        assert hybrid._rows_store is None
        assert [d.content for d in await hybrid.retrieve("solar", k=5)] == ["bob solar note"]
