"""Validation at the boundary: every retriever rejects bad input with a typed error before any backend call."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fastrag.errors import (
    DimensionMismatchError,
    EmbeddingError,
    FilterError,
    InvalidParameterError,
    UnknownParameterError,
)
from fastrag.models import Document
from fastrag.retrieval import (
    MAX_K,
    MAX_QUERY_CHARS,
    BM25Retriever,
    HybridRetriever,
    PathFilterRetriever,
    ReciprocalRankFusion,
    RetrievalLimits,
    TenantScopedRetriever,
    VectorRetriever,
    WeightedScoreFusion,
)
from fastrag.testing.fakes import HashingEmbedder
from fastrag.vector_store.sqlite import SQLiteVectorStore

pytestmark = pytest.mark.anyio


class RecordingStore:
    """A vector and lexical store that records every call and finds nothing."""

    def __init__(self, dimension: int | None = None) -> None:
        self.calls: list[str] = []
        self.dimension = dimension

    async def search_vector(self, embedding, *, k, filter=None):  # noqa: A002
        self.calls.append("search_vector")
        return []

    async def search_text(self, query, *, k, filter=None):  # noqa: A002
        self.calls.append("search_text")
        return []


class RecordingEmbedder(HashingEmbedder):
    def __init__(self, dimension: int = 16, vector: np.ndarray | None = None) -> None:
        super().__init__(dimension)
        self.calls = 0
        self.vector = vector

    async def embed_query(self, text: str) -> np.ndarray:
        self.calls += 1
        return self.vector if self.vector is not None else await super().embed_query(text)


def build(kind: str, store: RecordingStore, embedder: RecordingEmbedder, limits: RetrievalLimits | None = None):
    extra = {} if limits is None else {"limits": limits}
    vector = VectorRetriever(vector_store=store, embedder=embedder, **extra)
    bm25 = BM25Retriever(store=store, **extra)
    return {
        "bm25": lambda: bm25,
        "vector": lambda: vector,
        "hybrid": lambda: HybridRetriever([vector, bm25], **extra),
        "path filter": lambda: PathFilterRetriever(HybridRetriever([vector, bm25]), include_glob="*.md", **extra),
        "tenant": lambda: TenantScopedRetriever(HybridRetriever([vector, bm25]), tenant="alice", **extra),
    }[kind]()


KINDS = ["bm25", "vector", "hybrid", "path filter", "tenant"]

BAD_CALLS = [
    pytest.param({"k": 0}, InvalidParameterError, id="k=0"),
    pytest.param({"k": -3}, InvalidParameterError, id="k<0"),
    pytest.param({"k": MAX_K + 1}, InvalidParameterError, id="k>max"),
    pytest.param({"k": 2.5}, InvalidParameterError, id="k float"),
    pytest.param({"k": True}, InvalidParameterError, id="k bool"),
    pytest.param({"k": "5"}, InvalidParameterError, id="k str"),
    pytest.param({"query": ""}, InvalidParameterError, id="empty query"),
    pytest.param({"query": " \t\n\u3000"}, InvalidParameterError, id="whitespace query"),
    pytest.param({"query": None}, InvalidParameterError, id="None query"),
    pytest.param({"query": b"bytes"}, InvalidParameterError, id="bytes query"),
    pytest.param({"query": "x" * (MAX_QUERY_CHARS + 1)}, InvalidParameterError, id="query too long"),
    pytest.param({"query": "lone \ud800 surrogate"}, InvalidParameterError, id="surrogate"),
    pytest.param({"filter": {"equals": {"key": "year", "value": [2020]}}}, FilterError, id="list under equals"),
    pytest.param({"filter": {"greaterThan": {"key": "year", "value": "soon"}}}, FilterError, id="range on text"),
    pytest.param({"filter": {"in": {"key": "tag", "value": "abc"}}}, FilterError, id="in needs a list"),
    pytest.param({"filter": {"equals": {"key": "x", "value": math.nan}}}, FilterError, id="nan value"),
    pytest.param({"filter": {"nope": {"key": "x", "value": 1}}}, FilterError, id="unknown operator"),
    pytest.param({"filter": "{not json"}, FilterError, id="not json"),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("call", "error"), BAD_CALLS)
async def test_bad_input_raises_a_typed_error_before_any_backend_call(kind, call, error) -> None:
    store, embedder = RecordingStore(), RecordingEmbedder()
    arguments = {"query": "solar power", "k": 5, **call}
    with pytest.raises(error):
        await build(kind, store, embedder).retrieve(arguments.pop("query"), **arguments)
    assert store.calls == [] and embedder.calls == 0


@pytest.mark.parametrize("kind", KINDS)
async def test_the_limits_are_inclusive_and_configurable(kind) -> None:
    store, embedder = RecordingStore(), RecordingEmbedder()
    assert await build(kind, store, embedder).retrieve("x" * MAX_QUERY_CHARS, k=MAX_K) == []
    small = RetrievalLimits(max_k=5, max_query_chars=10)
    retriever = build(kind, store, embedder, small)
    assert await retriever.retrieve("0123456789", k=5) == []
    store.calls.clear()
    for call in ({"query": "0123456789", "k": 6}, {"query": "0123456789a", "k": 5}):
        with pytest.raises(InvalidParameterError):
            await retriever.retrieve(call["query"], k=call["k"])
    assert store.calls == []


@pytest.mark.parametrize("kind", KINDS)
async def test_control_characters_and_nul_are_valid_query_text(kind) -> None:
    store, embedder = RecordingStore(), RecordingEmbedder()
    assert await build(kind, store, embedder).retrieve("solar\x00 power\x07\x1b[31m\r\n", k=3) == []
    assert store.calls


@pytest.mark.parametrize("limits", [{"max_k": 0}, {"max_query_chars": -1}, {"max_k": 2.0}, {"max_k": True}])
def test_limits_themselves_are_checked(limits) -> None:
    with pytest.raises(InvalidParameterError):
        RetrievalLimits(**limits)


async def test_over_fetching_is_capped_at_max_k() -> None:
    asked: list[int] = []

    class Inner:
        async def retrieve(self, query, *, k=10, filter=None):  # noqa: A002
            asked.append(k)
            return []

    await PathFilterRetriever(Inner(), include_glob="*.md").retrieve("q", k=2_000)
    await HybridRetriever([Inner()], candidate_k=50_000).retrieve("q", k=3)
    await HybridRetriever([Inner()], limits=RetrievalLimits(max_k=5)).retrieve("q", k=3)  # candidate_k 40
    assert asked == [MAX_K, MAX_K, 5]  # never more than a backend would accept
    with pytest.raises(InvalidParameterError):
        HybridRetriever([Inner()], limits={"max_k": 5})  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------- vectors


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
async def test_a_non_finite_query_vector_never_reaches_the_store(bad) -> None:
    vector = np.ones(16, dtype=np.float32)
    vector[3] = bad
    store, embedder = RecordingStore(), RecordingEmbedder(vector=vector)
    with pytest.raises(EmbeddingError):
        await VectorRetriever(vector_store=store, embedder=embedder).retrieve("solar", k=3)
    assert store.calls == []


@pytest.mark.parametrize("shape", [(8,), (1, 16), ()])
async def test_a_query_vector_of_the_wrong_shape_never_reaches_the_store(shape) -> None:
    store, embedder = RecordingStore(), RecordingEmbedder(vector=np.ones(shape, dtype=np.float32))
    with pytest.raises(DimensionMismatchError):
        await VectorRetriever(vector_store=store, embedder=embedder).retrieve("solar", k=3)
    assert store.calls == []


async def test_an_embedder_of_another_width_than_the_store_is_refused_before_searching() -> None:
    store = RecordingStore(dimension=32)
    with pytest.raises(DimensionMismatchError, match="32"):
        await VectorRetriever(vector_store=store, embedder=RecordingEmbedder(16)).retrieve("solar", k=3)
    assert store.calls == []
    async with SQLiteVectorStore(":memory:") as sqlite:  # a real store, and through a hybrid
        await sqlite.upsert([Document(id="a", content="x")], embeddings=np.ones((1, 32), dtype=np.float32))
        hybrid = HybridRetriever([VectorRetriever(vector_store=sqlite, embedder=HashingEmbedder(16)),
                                  BM25Retriever(store=sqlite)])  # fmt: skip
        with pytest.raises(DimensionMismatchError):
            await hybrid.retrieve("x", k=1)
        with pytest.raises(InvalidParameterError):  # the store's own check, for direct callers
            await sqlite.search_vector(np.full(32, np.nan, dtype=np.float32), k=1)


# -------------------------------------------------------------------------------- paths and fusion


@pytest.mark.parametrize(
    "rules",
    [{"path_filter": "("}, {"path_filter": "a{2,1}"}, {"path_filter": 5},
     {"include_glob": "{a,b}" * 12 + "*.md"},  # brace expansion past wcmatch's 1,000-pattern limit
     {"exclude_glob": ["ok/*.md", "{x,y}" * 11]}, {"include_glob": ""}, {"include_glob": [None]}],
)  # fmt: skip
def test_invalid_regex_or_glob_fails_at_construction(rules) -> None:
    with pytest.raises(InvalidParameterError):
        PathFilterRetriever(BM25Retriever(store=RecordingStore()), **rules)


@pytest.mark.parametrize(
    "make",
    [lambda: ReciprocalRankFusion(k=60), lambda: ReciprocalRankFusion(rank_constant=60, weight=[1, 2]),
     lambda: WeightedScoreFusion(normalisation="z_score"), lambda: WeightedScoreFusion(norm="min_max")],
)  # fmt: skip
def test_unknown_fusion_parameters_are_a_typed_error(make) -> None:
    with pytest.raises(UnknownParameterError) as caught:
        make()
    # typed, and still what Python code catching a bad keyword expects
    assert isinstance(caught.value, InvalidParameterError) and isinstance(caught.value, TypeError)
    assert "unknown parameter" in str(caught.value)


def test_unknown_normalization_is_invalid() -> None:
    with pytest.raises(InvalidParameterError):
        WeightedScoreFusion(normalization="softmax")  # type: ignore[arg-type]
