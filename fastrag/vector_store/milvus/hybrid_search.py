"""Hybrid search fused inside Milvus: ``hybrid_search`` runs dense k-NN and BM25 with an RRF or weighted ranker,
the filter applied to both legs (the body of ``MilvusVectorStore.search_hybrid``; the retriever over it is
:class:`fastrag.vector_store.milvus.hybrid.MilvusHybridRetriever`).

``plan_hybrid`` checks the arguments and builds the two legs; the store checks its collection can answer
and hands ``run_hybrid`` the two calls it needs (a ``hybrid_search`` page and a plain leg search), so
nothing here reaches into the store."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import numpy as np

from fastrag.errors import DimensionMismatchError, FastragError, InvalidParameterError
from fastrag.filters import FilterLike
from fastrag.models import BRANCHES, Document
from fastrag.vector_store.milvus.connection import import_pymilvus
from fastrag.vector_store.milvus.filters import MilvusExpr, and_expressions, native_or_translated
from fastrag.vector_store.milvus.results import (
    TIE_SLACK,
    bm25_score,
    check_search_k,
    ranked,
    settled_page,
)
from fastrag.vector_store.milvus.rows import document
from fastrag.vector_store.milvus.schema import (
    HAS_VECTOR_FIELD,
    MAX_TOP_K,
    SPARSE_FIELD,
    VECTOR_FIELD,
)

__all__ = ["HybridPlan", "plan_hybrid", "ranker", "run_hybrid", "search_hybrid", "weighted_fusion"]


@dataclass(frozen=True, slots=True)
class HybridPlan:
    """A checked hybrid search, ready to send: what ``plan_hybrid`` builds before the store is touched."""

    query: str
    vector: np.ndarray  # (dim,) float32, finite, not all zero
    k: int
    fusion_ranker: Any  # pymilvus.RRFRanker, or the (w_vector, w_bm25) pair weighted_fusion applies
    dense_expression: str
    text_expression: str
    requests: list[Any]  # the two pymilvus.AnnSearchRequest legs, dense first
    leg_k: int


def plan_hybrid(
    query: str,
    embedding: np.ndarray,
    *,
    k: int,
    filter: FilterLike | MilvusExpr | None,  # noqa: A002
    fusion: str,
    rank_constant: int,
    weights: Sequence[float] | Mapping[str, float] | None,
    candidate_k: int,
) -> HybridPlan:
    """Check the arguments of ``MilvusVectorStore.search_hybrid`` (whose docstring gives them and the errors)
    and build its two legs; raises before any call to Milvus."""
    pymilvus = import_pymilvus()
    check_search_k(k)
    check_search_k(candidate_k, "candidate_k")
    if not isinstance(query, str) or not query.strip():
        raise InvalidParameterError("query must be a non-blank string")
    vector = np.asarray(embedding, dtype=np.float32)
    if vector.ndim != 1 or vector.shape[0] == 0:
        raise DimensionMismatchError(f"query embedding must have shape (dim,), got {vector.shape}")
    if not np.isfinite(vector).all() or not np.any(vector):
        raise InvalidParameterError("query embedding contains NaN or infinity, or is all zeros")
    fusion_ranker = ranker(pymilvus, fusion, rank_constant, weights)
    condition = native_or_translated(filter)
    dense_expression = and_expressions(f"{HAS_VECTOR_FIELD} == true", condition)
    text_expression = condition or ""
    leg_k = min(max(candidate_k, k), MAX_TOP_K)
    requests = [
        pymilvus.AnnSearchRequest(data=[vector.tolist()], anns_field=VECTOR_FIELD,
                                  param={"metric_type": "COSINE"}, limit=leg_k, expr=dense_expression),
        pymilvus.AnnSearchRequest(data=[query], anns_field=SPARSE_FIELD,
                                  param={"metric_type": "BM25"}, limit=leg_k, expr=text_expression or None),
    ]  # fmt: skip
    return HybridPlan(query, vector, k, fusion_ranker, dense_expression, text_expression, requests, leg_k)


async def run_hybrid(
    plan: HybridPlan,
    *,
    hybrid_page: Callable[[list[Any], Any, int], Awaitable[list[Any]]],
    search_leg: Callable[[Any, str, str, int, str], Awaitable[list[tuple[float, Document]]]],
    provenance: bool,
) -> list[Document]:
    """Run a planned hybrid search (the store has checked that its collection can answer it).

    Args:
        plan: from ``plan_hybrid``.
        hybrid_page: ``await hybrid_page(requests, ranker, limit)``: the raw hits of one ``hybrid_search``
            call asking for ``limit`` fused hits (the store's client call).
        search_leg: ``await search_leg(data, field, metric, k, expression)``: one leg as a plain search,
            ``(distance, document)`` best first, enough to cut at ``k`` (the store's own search).
        provenance: stamp ``metadata["branches"]`` (see ``MilvusVectorStore.search_hybrid``).
    """
    k, vector, query, fusion_ranker = plan.k, plan.vector, plan.query, plan.fusion_ranker
    fused: list[tuple[float, Document]] = []
    legs: dict[str, list[Document]] = {}

    async def page(limit: int) -> list[Any]:
        return await hybrid_page(plan.requests, fusion_ranker, limit)

    async def run_fused() -> None:
        # RRF gives a document found by one leg at rank r the same score as one found by the other leg at
        # rank r, so ties at the cut are common: the first page already asks for _TIE_SLACK more
        found = await settled_page(page, k, score=float, first=TIE_SLACK)
        fused.extend((float(h["distance"]), document(h["entity"])) for h in found)

    async def run_leg(name: str, data: Any, field: str, metric: str, expression: str) -> None:
        hits = await search_leg(data, field, metric, plan.leg_k, expression)
        if metric == "BM25":
            hits = [(v, d) for s, d in hits if (v := bm25_score(s)) is not None]
        # the server ranks each leg by score alone; ids order equal scores here, as everywhere
        legs[name] = ranked(hits, plan.leg_k)

    weighted = isinstance(fusion_ranker, tuple)
    if not provenance and not weighted:
        await run_fused()
        return ranked(fused, k)
    failure: BaseException | None = None
    try:
        async with anyio.create_task_group() as tg:
            if not weighted:
                tg.start_soon(run_fused)
            tg.start_soon(run_leg, "vector", vector.tolist(), VECTOR_FIELD, "COSINE", plan.dense_expression)
            tg.start_soon(run_leg, "bm25", query, SPARSE_FIELD, "BM25", plan.text_expression)
    except BaseExceptionGroup as group:  # one request failing fails the search: raise its error as is
        failure = next((e for e in group.exceptions if isinstance(e, FastragError)), group.exceptions[0])
    if failure is not None:
        raise failure
    if weighted:
        fused = weighted_fusion(legs["vector"], legs["bm25"], fusion_ranker)
    docs = ranked(fused, k)
    if not provenance:
        return docs
    where = {name: {d.id: {"score": d.score, "rank": d.rank} for d in hits} for name, hits in legs.items()}
    return [
        d.with_metadata(**{BRANCHES: {name: found[d.id] for name, found in sorted(where.items()) if d.id in found}})
        for d in docs
    ]


async def search_hybrid(store: Any, query: str, embedding: np.ndarray, **options: Any) -> list[Document]:
    """``await store.search_hybrid(query, embedding, **options)``: this module's entry point before the body
    moved into ``plan_hybrid`` and ``run_hybrid``, kept so that the old import keeps working."""
    return await store.search_hybrid(query, embedding, **options)


def weighted_fusion(
    dense: Sequence[Document], bm25: Sequence[Document], weights: tuple[float, float]
) -> list[tuple[float, Document]]:
    """``(fused score, document)`` for every document of either leg: ``w_vector * (1 + cosine) / 2 +
    w_bm25 * 2 * atan(bm25) / pi`` (each leg's score mapped to [0, 1], as Milvus's ``WeightedRanker`` documents
    for ``norm_score=True``), a leg that did not return the document contributing 0.

    fastrag computes this itself from the two legs' hits because Milvus 2.5's ``WeightedRanker`` maps BM25 as a
    distance (``1 - 2 * atan(s) / pi``): measured on milvus-lite 2.5.1, the best BM25 hit fused lowest."""
    scores: dict[str, float] = {}
    docs: dict[str, Document] = {}
    for hits, weight, normalise in (
        (dense, weights[0], lambda s: (1.0 + s) / 2.0),
        (bm25, weights[1], lambda s: 2.0 * math.atan(s) / math.pi),
    ):
        for doc in hits:
            docs.setdefault(doc.id, doc)
            scores[doc.id] = scores.get(doc.id, 0.0) + weight * normalise(float(doc.score))
    return [(scores[i], docs[i]) for i in docs]


def ranker(pymilvus: Any, fusion: str, rank_constant: Any, weights: Any) -> Any:
    """For ``"rrf"`` Milvus's ``RRFRanker(rank_constant)``; for ``"weighted"`` the validated weight pair
    ``(w_vector, w_bm25)`` that :func:`weighted_fusion` applies.

    Raises:
        InvalidParameterError: a bad ``fusion``, ``rank_constant`` or ``weights``.
    """
    if fusion == "rrf":
        check_search_k(rank_constant, "rank_constant")
        if weights is not None:
            raise InvalidParameterError("weights apply to fusion='weighted' only")
        return pymilvus.RRFRanker(rank_constant)
    if fusion != "weighted":
        raise InvalidParameterError(f"fusion must be 'rrf' or 'weighted', got {fusion!r}")
    if weights is None:
        pair = (0.5, 0.5)
    elif isinstance(weights, Mapping):
        if set(weights) != {"vector", "bm25"}:
            raise InvalidParameterError(f'weights must name exactly "vector" and "bm25", got {sorted(weights)!r}')
        pair = (weights["vector"], weights["bm25"])
    elif isinstance(weights, Sequence) and not isinstance(weights, str | bytes) and len(weights) == 2:
        pair = (weights[0], weights[1])
    else:
        raise InvalidParameterError(f"weights must be (w_vector, w_bm25) or a mapping, got {weights!r}")
    for w in pair:
        if isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w) or not 0 <= w <= 1:
            raise InvalidParameterError(f"each weight must be a number in [0, 1] (Milvus's range), got {w!r}")
    if not any(pair):
        raise InvalidParameterError("at least one weight must be positive")
    return (float(pair[0]), float(pair[1]))
