"""Score thresholds (issue 18.3) on the SQLite store: a branch's own score, a reranker's score, a relative
cut on fused scores, and the warning for a threshold no result can reach. The store contract
(fastrag.testing.store_contract) runs the branch thresholds on every store."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from fastrag.errors import InvalidParameterError
from fastrag.models import Document
from fastrag.retrieval import (
    BM25Retriever,
    HybridRetriever,
    ReciprocalRankFusion,
    RerankingRetriever,
    VectorRetriever,
    WeightedScoreFusion,
)
from fastrag.retrieval.thresholds import keep_relative
from fastrag.testing.fakes import HashingEmbedder
from fastrag.vector_store.sqlite import SQLiteVectorStore

DOCS = [
    Document(id="a", content="solar panels on the roof convert sunlight"),
    Document(id="b", content="solar energy is renewable energy"),
    Document(id="c", content="wind turbines and solar farms"),
    Document(id="d", content="the history of coal mining"),
]


class LengthReranker:
    """Scores a document by its content length in characters (a known, checkable scale)."""

    async def rerank(self, query: str, documents: Sequence[Document], *, k: int | None = None) -> list[Document]:
        ranked = sorted(documents, key=lambda d: (-len(d.content), d.id))[:k]
        return [d.ranked(score=float(len(d.content)), rank=i) for i, d in enumerate(ranked)]


@pytest.fixture
async def store(tmp_path: Path):
    embedder = HashingEmbedder()
    async with SQLiteVectorStore(tmp_path / "t.db") as store:
        await store.upsert(DOCS, embeddings=await embedder.embed_documents([d.content for d in DOCS]))
        yield store


@pytest.mark.anyio
async def test_vector_min_score_drops_hits_below_the_cosine(store) -> None:
    plain = await VectorRetriever(vector_store=store, embedder=HashingEmbedder()).retrieve("solar energy", k=4)
    assert len(plain) == 4 and plain[-1].score < plain[0].score
    cut = (plain[1].score + plain[2].score) / 2
    kept = await VectorRetriever(vector_store=store, embedder=HashingEmbedder(), min_score=cut).retrieve(
        "solar energy", k=4
    )
    assert [d.id for d in kept] == [d.id for d in plain[:2]] and [d.rank for d in kept] == [0, 1]


@pytest.mark.anyio
async def test_reranker_min_score_applies_to_the_reranker_score_after_reranking(store) -> None:
    first = BM25Retriever(store=store)
    reranked = RerankingRetriever(retriever=first, reranker=LengthReranker(), min_score=29)
    hits = await reranked.retrieve("solar", k=3)
    # lengths: a 41, c 29, b 32: all solar hits pass 29 but only the reranker's scores were compared
    assert [(d.id, d.score) for d in hits] == [("a", 41.0), ("b", 32.0), ("c", 29.0)]
    strict = RerankingRetriever(retriever=first, reranker=LengthReranker(), min_score=30)
    assert [d.id for d in await strict.retrieve("solar", k=3)] == ["a", "b"]


@pytest.mark.anyio
async def test_relative_cut_keeps_documents_within_the_fraction_of_the_best_fused_score(store) -> None:
    branches = {"bm25": BM25Retriever(store=store),
                "vector": VectorRetriever(vector_store=store, embedder=HashingEmbedder())}
    for fusion in (ReciprocalRankFusion(), WeightedScoreFusion(normalization="min_max")):
        full = await HybridRetriever(branches, fusion=fusion).retrieve("solar energy", k=4)
        cut = HybridRetriever(branches, fusion=fusion, min_relative_score=0.9)
        expected = [d.id for d in full if d.score >= 0.9 * full[0].score]
        assert [d.id for d in await cut.retrieve("solar energy", k=4)] == expected
        assert 1 <= len(expected) < len(full)


def test_keep_relative_with_non_positive_best_keeps_the_best_at_fraction_one() -> None:
    scores = [("a", -0.2), ("b", -0.3), ("c", -0.5)]
    docs = [Document(id=i, content="x").ranked(score=s, rank=n) for n, (i, s) in enumerate(scores)]
    assert [d.id for d in keep_relative(docs, 1.0)] == ["a"]
    assert [d.id for d in keep_relative(docs, 0.1)] == ["a", "b"]  # the cut: -0.2 - 0.9 * 0.2 = -0.38
    unscored = [Document(id="u", content="x")]
    assert keep_relative(unscored, 0.5) == []


def test_unreachable_thresholds_warn_and_invalid_ones_raise(tmp_path: Path) -> None:
    store = SQLiteVectorStore(tmp_path / "w.db")
    with pytest.warns(UserWarning, match="highest cosine similarity possible"):
        VectorRetriever(vector_store=store, embedder=HashingEmbedder(), min_score=1.5)
    with pytest.warns(UserWarning, match="above 1"):
        HybridRetriever([BM25Retriever(store=store)], min_relative_score=1.2)
    for bad in (float("nan"), "0.5", True):
        with pytest.raises(InvalidParameterError):
            BM25Retriever(store=store, min_score=bad)
    for bad in (0, -0.5, float("inf")):
        with pytest.raises(InvalidParameterError):
            HybridRetriever([BM25Retriever(store=store)], min_relative_score=bad)
    assert np.isfinite(VectorRetriever(vector_store=store, embedder=HashingEmbedder(), min_score=-1).min_score)
