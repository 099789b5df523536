"""The contract every store adapter must pass: same documents, same filters, same expected ids.

Use it by subclassing :class:`StoreContract` in a test module and overriding the ``store_factory`` fixture
with an async context-manager factory that opens an *empty* store (a fresh collection) each call::

    class TestMyStore(StoreContract):
        @pytest.fixture
        def store_factory(self, tmp_path):
            return lambda: MyStore(path=tmp_path / "db")

``reopen`` tests call the factory twice on the same location, so a factory for a persistent store must
return a store over the same data each time; set ``persistent = False`` on the subclass when the store
cannot be reopened (an in-memory database).

The suite needs ``pytest``, ``anyio`` and ``hypothesis`` (the ``test`` extra).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from fastrag.errors import DimensionMismatchError, FilterError, InvalidParameterError, UnsupportedFilterError
from fastrag.filters import dump_filter, matches, parse_filter
from fastrag.lifecycle import AsyncResource
from fastrag.models import Document
from fastrag.testing.filter_cases import FILTER_CASES, FILTER_CORPUS, FilterCase, filter_strategy

__all__ = ["StoreContract", "corpus_embeddings"]

DIM = 8


def corpus_embeddings(docs: list[Document], dim: int = DIM) -> np.ndarray:
    """Deterministic unit vectors for ``docs`` (a pseudo-random direction seeded by each id)."""
    rows = []
    for doc in docs:
        rng = np.random.default_rng(abs(hash_id(doc.id)))
        row = rng.normal(size=dim).astype(np.float32)
        rows.append(row / np.linalg.norm(row))
    return np.stack(rows)


def hash_id(doc_id: str) -> int:
    """A stable (process-independent) integer for a document id."""
    value = 0
    for ch in doc_id.encode():
        value = (value * 131 + ch) % (2**31 - 1)
    return value


# k-NN ordering corpus: cosine with the query [1, 0, 0, 0] is 1.0, 0.8, 0.6, 0.0, -1.0 by construction.
KNN_DOCS = [
    Document(id="far", content="far", metadata={"group": "a"}),
    Document(id="near", content="near", metadata={"group": "a"}),
    Document(id="mid", content="mid", metadata={"group": "b"}),
    Document(id="orth", content="orthogonal", metadata={"group": "b"}),
    Document(id="opp", content="opposite", metadata={"group": "a"}),
]
KNN_VECTORS = np.array(
    [[0.6, 0.8, 0, 0], [1, 0, 0, 0], [0.8, 0.6, 0, 0], [0, 0, 1, 0], [-1, 0, 0, 0]], dtype=np.float32
)
KNN_QUERY = np.array([1, 0, 0, 0], dtype=np.float32)

# BM25 ordering corpus: for the query "solar panel", "both" has both terms, "solar2" repeats one term in
# a short text, "solar1" mentions it once in a long text, "none" shares no term and must never appear.
BM25_DOCS = [
    Document(id="both", content="Solar panels convert sunlight; a panel needs cleaning.", metadata={"lang": "en"}),
    Document(id="solar2", content="Solar energy, solar power.", metadata={"lang": "en"}),
    Document(id="solar1", content="The history of energy includes coal, oil, gas, wind, hydro, nuclear and solar "
             "generation across many decades and countries.", metadata={"lang": "en"}),
    Document(id="none", content="Wind turbines generate electricity.", metadata={"lang": "en"}),
]


class StoreContract:
    """Tests every store must pass. Override the ``store_factory`` fixture (see the module docstring)."""

    persistent = True
    supports_text = True
    supports_vectors = True
    unsupported_filter_cases: frozenset[str] = frozenset()
    """Names of ``FILTER_CASES`` this backend cannot express: they must raise ``UnsupportedFilterError``
    before any query runs (and be listed in the backend's docs). Every other case must pass."""

    @pytest.fixture
    def store_factory(self) -> Callable[[], Any]:
        raise NotImplementedError("override store_factory in the subclass")

    @pytest.fixture
    async def filter_store(self, store_factory):  # noqa: ANN001, ANN201
        # Every document gets the term "document", so a BM25 search for it sees the whole corpus.
        docs = [Document(id=d.id, content=f"{d.content} document", metadata=d.metadata) for d in FILTER_CORPUS]
        async with store_factory() as store:
            await store.upsert(docs, embeddings=corpus_embeddings(docs))
            yield store

    # ------------------------------------------------------------------ filters

    @pytest.mark.anyio
    @pytest.mark.parametrize("case", FILTER_CASES, ids=lambda c: c.name)
    async def test_filter_table(self, filter_store, case: FilterCase) -> None:  # noqa: ANN001
        if case.name in self.unsupported_filter_cases:
            with pytest.raises(UnsupportedFilterError):
                await self._filtered_ids(filter_store, case.filter)
            return
        assert await self._filtered_ids(filter_store, case.filter) == case.expected_ids

    async def _filtered_ids(self, store: Any, filter_json: dict) -> frozenset[str]:
        n = len(FILTER_CORPUS)
        found: set[str] = set()
        if self.supports_vectors:
            hits = await store.search_vector(np.ones(DIM, dtype=np.float32), k=n, filter=filter_json)
            found = {d.id for d in hits}
            assert await store.count(filter=filter_json) == len(found)
        if self.supports_text:
            text_hits = await store.search_text("document", k=n, filter=filter_json)
            text_ids = {d.id for d in text_hits}
            if self.supports_vectors:
                assert text_ids == found, "BM25 and k-NN disagree on the same filter"
            found = text_ids
        return frozenset(found)

    @pytest.mark.anyio
    async def test_filter_congruence_with_matches(self, filter_store) -> None:  # noqa: ANN001
        """At least 200 generated filters: the store selects exactly what ``filters.matches`` selects."""
        seen: list[int] = []
        unsupported: list[int] = []

        @settings(max_examples=200 if not self.unsupported_filter_cases else 400, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
        @given(filter_json=filter_strategy(FILTER_CORPUS))
        def check(filter_json: dict) -> None:
            expected = frozenset(d.id for d in FILTER_CORPUS if matches(filter_json, d.metadata))
            try:
                got = anyio_from_thread(self._filtered_ids, filter_store, filter_json)
            except UnsupportedFilterError:
                if not self.unsupported_filter_cases:
                    raise
                unsupported.append(1)
                return
            assert got == expected, dump_filter(parse_filter(filter_json))
            seen.append(1)

        import anyio.to_thread

        await anyio.to_thread.run_sync(check)
        assert len(seen) >= 200

    @pytest.mark.anyio
    async def test_malformed_filter_raises_before_search(self, filter_store) -> None:  # noqa: ANN001
        with pytest.raises(FilterError):
            await filter_store.count(filter={"greaterThan": {"key": "year", "value": "not a date"}})
        if self.supports_text:
            with pytest.raises(FilterError):
                await filter_store.search_text("document", k=3, filter={"bogus": {}})

    @pytest.mark.anyio
    async def test_filtered_knn_is_not_short(self, store_factory) -> None:  # noqa: ANN001
        """Filtering before ranking: the 3 matching documents come back although 40 closer ones do not match."""
        if not self.supports_vectors:
            pytest.skip("store has no vectors")
        docs = [Document(id=f"x{i:02}", content="x", metadata={"keep": i >= 40}) for i in range(43)]
        vectors = np.array([[1.0, i / 100, 0, 0] if i < 40 else [0, 0, 1.0, 0] for i in range(43)], dtype=np.float32)
        async with store_factory() as store:
            await store.upsert(docs, embeddings=vectors)
            hits = await store.search_vector(KNN_QUERY, k=3, filter={"equals": {"key": "keep", "value": True}})
        assert sorted(d.id for d in hits) == ["x40", "x41", "x42"]

    # ------------------------------------------------------------------ ranking

    @pytest.mark.anyio
    async def test_knn_ordering_and_scores(self, store_factory) -> None:  # noqa: ANN001
        if not self.supports_vectors:
            pytest.skip("store has no vectors")
        async with store_factory() as store:
            await store.upsert(KNN_DOCS, embeddings=KNN_VECTORS)
            hits = await store.search_vector(KNN_QUERY, k=5)
            filtered = await store.search_vector(KNN_QUERY, k=2, filter={"equals": {"key": "group", "value": "b"}})
        assert [d.id for d in hits] == ["near", "mid", "far", "orth", "opp"]
        assert [d.rank for d in hits] == [0, 1, 2, 3, 4]
        assert [round(d.score, 4) for d in hits] == [1.0, 0.8, 0.6, 0.0, -1.0]
        assert [d.id for d in filtered] == ["mid", "orth"]

    @pytest.mark.anyio
    async def test_bm25_ordering_and_no_zero_matches(self, store_factory) -> None:  # noqa: ANN001
        if not self.supports_text:
            pytest.skip("store has no full-text index")
        async with store_factory() as store:
            await store.upsert(BM25_DOCS, embeddings=corpus_embeddings(BM25_DOCS, 4))
            hits = await store.search_text("solar panel", k=10)
        ids = [d.id for d in hits]
        assert ids[0] == "both"
        assert ids.index("solar2") < ids.index("solar1")
        assert "none" not in ids
        assert all(d.score > 0 for d in hits)
        assert [d.rank for d in hits] == list(range(len(hits)))

    # ------------------------------------------------------------------ writes

    @pytest.mark.anyio
    async def test_upsert_replaces_by_id(self, store_factory) -> None:  # noqa: ANN001
        async with store_factory() as store:
            await store.upsert(KNN_DOCS, embeddings=KNN_VECTORS)
            replacement = Document(id="opp", content="now a solar document", metadata={"group": "c"})
            await store.upsert([replacement], embeddings=KNN_QUERY[None, :])
            assert await store.count() == 5
            assert await store.count(filter={"equals": {"key": "group", "value": "c"}}) == 1
            if self.supports_vectors:
                hits = await store.search_vector(KNN_QUERY, k=2)
                assert {d.id for d in hits} == {"near", "opp"}
            if self.supports_text:
                assert [d.id for d in await store.search_text("solar", k=5)] == ["opp"]
                assert await store.search_text("opposite", k=5) == []

    @pytest.mark.anyio
    async def test_delete_by_ids_and_by_filter(self, store_factory) -> None:  # noqa: ANN001
        async with store_factory() as store:
            await store.upsert(KNN_DOCS, embeddings=KNN_VECTORS)
            assert await store.delete(ids=["near", "missing"]) == 1
            assert await store.count() == 4
            assert await store.delete(filter={"equals": {"key": "group", "value": "b"}}) == 2
            assert await store.count() == 2
            if self.supports_vectors:
                assert [d.id for d in await store.search_vector(KNN_QUERY, k=5)] == ["far", "opp"]
            if self.supports_text:
                assert await store.search_text("mid orthogonal near", k=5) == []
            with pytest.raises(InvalidParameterError):
                await store.delete()

    @pytest.mark.anyio
    async def test_wrong_dimension_is_rejected(self, store_factory) -> None:  # noqa: ANN001
        if not self.supports_vectors:
            pytest.skip("store has no vectors")
        async with store_factory() as store:
            await store.upsert(KNN_DOCS, embeddings=KNN_VECTORS)
            with pytest.raises(DimensionMismatchError):
                await store.upsert([Document(id="w", content="w")], embeddings=np.ones((1, 3), dtype=np.float32))
            with pytest.raises(DimensionMismatchError):
                await store.search_vector(np.ones(3, dtype=np.float32), k=1)
            assert await store.count() == 5

    @pytest.mark.anyio
    async def test_all_zero_query_vector_is_refused(self, store_factory) -> None:  # noqa: ANN001
        """Cosine with a zero vector is undefined: every store refuses it rather than answer arbitrarily."""
        if not self.supports_vectors:
            pytest.skip("store has no vectors")
        async with store_factory() as store:
            await store.upsert(KNN_DOCS, embeddings=KNN_VECTORS)
            with pytest.raises(InvalidParameterError):
                await store.search_vector(np.zeros(4, dtype=np.float32), k=3)

    @pytest.mark.anyio
    @pytest.mark.parametrize("k", [0, -1, 1.5, True])
    async def test_invalid_k_is_rejected(self, store_factory, k: Any) -> None:  # noqa: ANN001
        async with store_factory() as store:
            if self.supports_vectors:
                with pytest.raises(InvalidParameterError):
                    await store.search_vector(KNN_QUERY, k=k)
            if self.supports_text:
                with pytest.raises(InvalidParameterError):
                    await store.search_text("solar", k=k)

    @pytest.mark.anyio
    async def test_reopen_keeps_everything(self, store_factory) -> None:  # noqa: ANN001
        if not self.persistent:
            pytest.skip("store is not persistent")
        async with store_factory() as store:
            await store.upsert(KNN_DOCS, embeddings=KNN_VECTORS)
        async with store_factory() as store:
            assert await store.count() == 5
            if self.supports_vectors:
                assert [d.id for d in await store.search_vector(KNN_QUERY, k=2)] == ["near", "mid"]
            if self.supports_text:
                assert [d.id for d in await store.search_text("orthogonal", k=2)] == ["orth"]

    # ------------------------------------------------------------------ retrieval over the store

    @pytest.mark.anyio
    async def test_min_score_keeps_exactly_the_hits_at_or_above_it(self, store_factory) -> None:  # noqa: ANN001
        """Thresholds (issue 18.3) on each branch's own score, applied after the store's search."""
        from fastrag.retrieval import BM25Retriever, HybridRetriever, VectorRetriever

        async with store_factory() as store:
            await store.upsert(KNN_DOCS + BM25_DOCS, embeddings=np.vstack(
                [KNN_VECTORS, np.eye(4, dtype=np.float32)[[2, 3, 3, 2]] * 1.0]))
            if self.supports_vectors:
                # cosine with the query: near 1.0, mid 0.8, far 0.6, orth 0.0, the BM25 docs 0.0, opp -1.0
                vector = VectorRetriever(vector_store=store, embedder=FixedQueryEmbedder(KNN_QUERY), min_score=0.5)
                assert [d.id for d in await vector.retrieve("q", k=10)] == ["near", "mid", "far"]
                assert [d.rank for d in await vector.retrieve("q", k=2)] == [0, 1]
            if self.supports_text:
                everything = await BM25Retriever(store=store).retrieve("solar panel", k=10)
                assert everything[0].id == "both" and len(everything) >= 3
                cut = (everything[0].score + everything[1].score) / 2
                assert [d.id for d in await BM25Retriever(store=store, min_score=cut).retrieve("solar panel")] == ["both"]
                too_high = BM25Retriever(store=store, min_score=everything[0].score * 2)
                assert await too_high.retrieve("solar panel") == []
            if self.supports_vectors and self.supports_text:
                # a branch threshold cuts the branch's list before fusion: "opp" (cosine -1) is never fused in
                hybrid = HybridRetriever([
                    VectorRetriever(vector_store=store, embedder=FixedQueryEmbedder(KNN_QUERY), min_score=0.5),
                    BM25Retriever(store=store),
                ])
                full = await hybrid.retrieve("solar panel", k=20)
                assert {d.id for d in full} == {"near", "mid", "far"} | {d.id for d in everything}
                # a relative cut on the fused list: the documents within half of the best fused score
                half = HybridRetriever(hybrid.retrievers, fusion=hybrid.fusion, min_relative_score=0.5)
                kept = [d.id for d in full if d.score >= 0.5 * full[0].score]
                assert 0 < len(kept) < len(full)
                assert [d.id for d in await half.retrieve("solar panel", k=20)] == kept

    @pytest.mark.anyio
    async def test_grouping_returns_one_result_per_parent_with_its_other_chunks(self, store_factory) -> None:  # noqa: ANN001
        """Grouping (issue 18.2): one result per parent_id, the best chunk's metadata, the other chunks carried."""
        from fastrag.retrieval import BM25Retriever, GroupingRetriever, HybridRetriever, VectorRetriever
        from fastrag.retrieval.fusion import ReciprocalRankFusion

        # cosine with KNN_QUERY: p1#0 1.0, p1#1 0.99, p1#2 0.98, p2#0 0.8, p2#1 0.79, p3#0 0.6
        rows = [("p1#0", "p1", [1, 0]), ("p1#1", "p1", [0.99, 0.141]), ("p1#2", "p1", [0.98, 0.199]),
                ("p2#0", "p2", [0.8, 0.6]), ("p2#1", "p2", [0.79, 0.613]), ("p3#0", "p3", [0.6, 0.8])]
        docs = [Document(id=i, content=f"solar panel chunk {i}" if p != "p3" else "solar",
                         metadata={"parent_id": p, "chunk_index": int(i[-1])}) for i, p, _ in rows]
        vectors = np.array([[x, y, 0, 0] for _, _, (x, y) in rows], dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        async with store_factory() as store:
            await store.upsert(docs, embeddings=vectors)
            if self.supports_vectors:
                vector = VectorRetriever(vector_store=store, embedder=FixedQueryEmbedder(KNN_QUERY))
                grouped = await GroupingRetriever(vector, group_by="parent_id", candidate_k=2).retrieve("q", k=3)
                assert [d.id for d in grouped] == ["p1#0", "p2#0", "p3#0"]
                assert [d.rank for d in grouped] == [0, 1, 2]
                assert [c.id for c in grouped[0].group_chunks] == ["p1#1", "p1#2"]
                assert [c.id for c in grouped[1].group_chunks] == ["p2#1"] and grouped[2].group_chunks == ()
                assert grouped[0].metadata["chunk_index"] == 0 and round(grouped[0].score, 4) == 1.0
            if self.supports_text:
                bm25 = BM25Retriever(store=store)
                grouped = await GroupingRetriever(bm25, group_by="parent_id").retrieve("solar panel", k=10)
                assert sorted(d.metadata["parent_id"] for d in grouped) == ["p1", "p2", "p3"]
                assert sum(1 + len(d.group_chunks) for d in grouped) == 6
            if self.supports_vectors and self.supports_text:
                hybrid = HybridRetriever(
                    [VectorRetriever(vector_store=store, embedder=FixedQueryEmbedder(KNN_QUERY)), BM25Retriever(store=store)],
                    fusion=ReciprocalRankFusion(group_by="parent_id"),
                )
                fused = await hybrid.retrieve("solar panel", k=10)
                assert sorted(d.metadata["parent_id"] for d in fused) == ["p1", "p2", "p3"]
                # each branch counts a group once: no fused score exceeds one credit per branch
                assert all(d.score <= 2 / 61 + 1e-12 for d in fused)
                assert sum(1 + len(d.group_chunks) for d in fused) == 6

    @pytest.mark.anyio
    async def test_pages_never_repeat_or_skip_and_join_into_the_top(self, store_factory) -> None:  # noqa: ANN001
        """Pagination (issue 18.1): page 1 + page 2 == top 2 * size, also when every score ties."""
        from fastrag.retrieval import BM25Retriever, GroupingRetriever, HybridRetriever, VectorRetriever
        from fastrag.retrieval.fusion import ReciprocalRankFusion

        # 24 chunks with the same text and the same vector: every score ties, only the id orders them
        docs = [Document(id=f"d{i:02}", content="boilerplate footer text", metadata={"parent_id": f"p{i // 2}"})
                for i in range(24)]
        vectors = np.tile(np.array([[1, 0, 0, 0]], dtype=np.float32), (24, 1))
        size = 4  # 3 pages of 4: 12 chunks of 24, or all 12 groups
        async with store_factory() as store:
            await store.upsert(docs, embeddings=vectors)
            retrievers: list[Any] = []
            if self.supports_vectors:
                retrievers.append(VectorRetriever(vector_store=store, embedder=FixedQueryEmbedder(KNN_QUERY)))
            if self.supports_text:
                retrievers.append(BM25Retriever(store=store))
            if self.supports_vectors and self.supports_text:
                retrievers.append(HybridRetriever(retrievers[:2], fusion=ReciprocalRankFusion(), candidate_k=20))
            for retriever in list(retrievers):
                retrievers.append(GroupingRetriever(retriever, group_by="parent_id"))
            for retriever in retrievers:
                top = await retriever.retrieve("boilerplate", k=3 * size)
                pages = [await retriever.retrieve("boilerplate", k=size, offset=n * size) for n in range(3)]
                joined = [d.id for page in pages for d in page]
                assert joined == [d.id for d in top], retriever
                assert len(set(joined)) == len(joined) == 3 * size, retriever
                assert [d.rank for page in pages for d in page] == list(range(3 * size)), retriever
                result = await retriever.retrieve_result("boilerplate", k=size, offset=size)
                assert [d.id for d in result.documents] == [d.id for d in pages[1]], retriever


class FixedQueryEmbedder(AsyncResource):
    """An embedder whose every query embeds to one fixed vector (for retrieval over a store's own vectors);
    nothing to release (``fastrag.lifecycle.AsyncResource``)."""

    def __init__(self, vector: np.ndarray) -> None:
        self._vector = np.asarray(vector, dtype=np.float32)

    @property
    def dimension(self) -> int:
        return int(self._vector.shape[0])

    @property
    def name(self) -> str:
        return "fixed-query"

    async def embed_query(self, text: str) -> np.ndarray:
        return self._vector

    async def embed_documents(self, texts: list[str]) -> np.ndarray:
        return np.tile(self._vector, (len(texts), 1))


def anyio_from_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """Run an async function from a worker thread of the running event loop."""
    import anyio.from_thread

    return anyio.from_thread.run(fn, *args)
