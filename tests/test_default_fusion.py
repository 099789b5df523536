"""The default fusion of HybridRetriever: BM25 0.9 / dense 0.1 (min-max) with a shipped static model,
equal weights otherwise, and an explicit fusion kept as given (docs/retrievers.md, "The default fusion")."""

from __future__ import annotations

import anyio
import pytest

from fastrag.config import build_retriever
from fastrag.ingestion import Model2VecEmbedder
from fastrag.models import Document
from fastrag.retrieval import (
    BM25Retriever,
    HybridRetriever,
    ReciprocalRankFusion,
    VectorRetriever,
    WeightedScoreFusion,
    default_fusion,
)
from fastrag.vector_store.sqlite import SQLiteVectorStore


class NamedEmbedder:
    """Only a name: building a retriever never embeds anything."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.dimension = 4

    async def embed_documents(self, texts):  # pragma: no cover - never called
        raise AssertionError("not expected")

    async def embed_query(self, text):  # pragma: no cover - never called
        raise AssertionError("not expected")


@pytest.fixture
def store():
    store = SQLiteVectorStore(":memory:")
    yield store
    anyio.run(store.aclose)


def hybrid(store, embedder) -> HybridRetriever:
    return HybridRetriever([VectorRetriever(vector_store=store, embedder=embedder), BM25Retriever(store=store)])


def ranked(pairs: list[tuple[str, float]]) -> list[Document]:
    return [Document(id=i, content=i, metadata={"score": s, "rank": r}) for r, (i, s) in enumerate(pairs)]


# Two small branch lists. Min-max per branch:
#   bm25:   a 10 -> 1.0, b 6 -> 0.5, c 2 -> 0.0;   d absent -> 0
#   vector: b 0.8 -> 1.0, c 0.5 -> 0.5, d 0.2 -> 0.0;   a absent -> 0
BM25_LIST = [("a", 10.0), ("b", 6.0), ("c", 2.0)]
VECTOR_LIST = [("b", 0.8), ("c", 0.5), ("d", 0.2)]


def fuse(fusion) -> list[tuple[str, float]]:
    fused = fusion.fuse({"vector": ranked(VECTOR_LIST), "bm25": ranked(BM25_LIST)}, k=4)
    return [(d.id, d.score) for d in fused]


def test_shipped_static_model_gets_bm25_09_and_dense_01(store) -> None:
    fusion = hybrid(store, NamedEmbedder("static-minilm-d256")).fusion
    assert isinstance(fusion, WeightedScoreFusion)
    assert fusion.normalization == "min_max"
    assert dict(fusion.weights) == pytest.approx({"bm25": 0.9, "vector": 0.1})


def test_the_real_shipped_embedder_gets_the_same_default(store) -> None:
    # Model2VecEmbedder() names itself after the shipped folder; building it loads nothing
    fusion = hybrid(store, Model2VecEmbedder()).fusion
    assert dict(fusion.weights) == pytest.approx({"bm25": 0.9, "vector": 0.1})


def test_the_cli_hybrid_mode_uses_the_same_default(store) -> None:
    fusion = build_retriever("hybrid", store=store, embedder=NamedEmbedder("static-minilm-d256")).fusion
    assert isinstance(fusion, WeightedScoreFusion)
    assert dict(fusion.weights) == pytest.approx({"bm25": 0.9, "vector": 0.1})


def test_default_fusion_ranks_as_worked_by_hand(store) -> None:
    # fused = 0.9 * bm25 + 0.1 * vector: a 0.9, b 0.45 + 0.1 = 0.55, c 0 + 0.05 = 0.05, d 0
    got = fuse(hybrid(store, NamedEmbedder("static-minilm-d256")).fusion)
    assert [i for i, _ in got] == ["a", "b", "c", "d"]
    assert [s for _, s in got] == pytest.approx([0.9, 0.55, 0.05, 0.0])


@pytest.mark.parametrize("name", ["all-MiniLM-L6-v2", "minishlab/potion-base-8M", "static-minilm-d256-finetuned"])
def test_another_embedder_gets_equal_weights(store, name: str) -> None:
    fusion = hybrid(store, NamedEmbedder(name)).fusion
    assert isinstance(fusion, WeightedScoreFusion)
    assert fusion.normalization == "min_max"
    assert fusion.weights is None  # every branch weighs the same
    # fused = 0.5 * bm25 + 0.5 * vector: a 0.5, b 0.25 + 0.5 = 0.75, c 0 + 0.25 = 0.25, d 0
    got = fuse(fusion)
    assert [i for i, _ in got] == ["b", "a", "c", "d"]
    assert [s for _, s in got] == pytest.approx([0.75, 0.5, 0.25, 0.0])


def test_an_embedder_without_a_name_gets_equal_weights(store) -> None:
    class Nameless:
        async def embed_documents(self, texts):  # pragma: no cover
            raise AssertionError

        async def embed_query(self, text):  # pragma: no cover
            raise AssertionError

    assert hybrid(store, Nameless()).fusion.weights is None


def test_other_branch_combinations_get_equal_weights(store) -> None:
    shipped = NamedEmbedder("static-minilm-d256")
    vector = VectorRetriever(vector_store=store, embedder=shipped)
    bm25 = BM25Retriever(store=store)
    assert HybridRetriever([bm25, BM25Retriever(store=store)]).fusion.weights is None
    assert HybridRetriever([vector, bm25, BM25Retriever(store=store)]).fusion.weights is None
    # the shipped model under other branch names is not the measured bm25 + vector pair
    assert HybridRetriever({"dense": vector, "sparse": bm25}).fusion.weights is None
    assert default_fusion(None).weights is None


def test_an_explicit_fusion_is_kept_as_given(store) -> None:
    for fusion in (ReciprocalRankFusion(rank_constant=60), WeightedScoreFusion([0.5, 0.5], normalization="z_score")):
        retriever = HybridRetriever(
            [VectorRetriever(vector_store=store, embedder=NamedEmbedder("static-minilm-d256")), BM25Retriever(store=store)],
            fusion=fusion,
        )
        assert retriever.fusion is fusion
