"""Hybrid search fused inside Milvus: ``hybrid_search`` runs dense k-NN and BM25 with an RRF or weighted ranker,
the filter applied to both legs (the body of ``MilvusVectorStore.search_hybrid``; the retriever over it is
:class:`fastrag.vector_store.milvus.hybrid.MilvusHybridRetriever`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import numpy as np

from fastrag.errors import ConfigurationError, DimensionMismatchError, FastragError, InvalidParameterError
from fastrag.filters import FilterLike
from fastrag.models import BRANCHES, Document
from fastrag.vector_store.milvus.connection import import_pymilvus
from fastrag.vector_store.milvus.filters import MilvusExpr, and_expressions, native_or_translated
from fastrag.vector_store.milvus.results import (
    TIE_SLACK,
    bm25_score,
    check_search_k,
    document,
    ranked,
    settled_page,
)
from fastrag.vector_store.milvus.schema import (
    CONTENT_FIELD,
    HAS_VECTOR_FIELD,
    ID_FIELD,
    MAX_TOP_K,
    METADATA_FIELD,
    SPARSE_FIELD,
    VECTOR_FIELD,
)

if TYPE_CHECKING:
    from fastrag.vector_store.milvus.store import MilvusVectorStore

__all__ = ["ranker", "search_hybrid", "weighted_fusion"]


async def search_hybrid(
    store: MilvusVectorStore,
    query: str,
    embedding: np.ndarray,
    *,
    k: int,
    filter: FilterLike | MilvusExpr | None,  # noqa: A002
    fusion: str,
    rank_constant: int,
    weights: Sequence[float] | Mapping[str, float] | None,
    candidate_k: int,
    provenance: bool,
) -> list[Document]:
    """The body of ``MilvusVectorStore.search_hybrid``, whose docstring gives the arguments, result and errors."""
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
    exists = await store._searchable()
    if not store.enable_bm25:
        raise ConfigurationError(f"{store.name}: the collection has no BM25 index; create it with enable_bm25=True")
    if not exists:
        return []
    if not store._has_vectors:
        raise ConfigurationError(f"{store.name}: the collection holds no dense vectors (BM25 only)")
    if vector.shape[0] != store.dimension:
        raise DimensionMismatchError(
            f"{store.name}: query has dimension {vector.shape[0]}, the store holds {store.dimension}"
        )
    leg_k = min(max(candidate_k, k), MAX_TOP_K)
    requests = [
        pymilvus.AnnSearchRequest(data=[vector.tolist()], anns_field=VECTOR_FIELD,
                                  param={"metric_type": "COSINE"}, limit=leg_k, expr=dense_expression),
        pymilvus.AnnSearchRequest(data=[query], anns_field=SPARSE_FIELD,
                                  param={"metric_type": "BM25"}, limit=leg_k, expr=text_expression or None),
    ]
    fused: list[tuple[float, Document]] = []
    legs: dict[str, list[Document]] = {}

    async def hybrid_page(limit: int) -> list[Any]:
        result = await store._call(
            "hybrid_search", store.collection, requests, fusion_ranker, limit=limit,
            output_fields=[ID_FIELD, CONTENT_FIELD, METADATA_FIELD],
        )
        return result[0] if result else []

    async def run_hybrid() -> None:
        # RRF gives a document found by one leg at rank r the same score as one found by the other leg at
        # rank r, so ties at the cut are common: the first page already asks for _TIE_SLACK more
        found = await settled_page(hybrid_page, k, score=float, first=TIE_SLACK)
        fused.extend((float(h["distance"]), document(h["entity"])) for h in found)

    async def run_leg(name: str, data: Any, field: str, metric: str, expression: str) -> None:
        hits = await store._search(data, field, metric, leg_k, expression)
        if metric == "BM25":
            hits = [(v, d) for s, d in hits if (v := bm25_score(s)) is not None]
        # the server ranks each leg by score alone; ids order equal scores here, as everywhere
        legs[name] = ranked(hits, leg_k)

    weighted = isinstance(fusion_ranker, tuple)
    if not provenance and not weighted:
        await run_hybrid()
        return ranked(fused, k)
    failure: BaseException | None = None
    try:
        async with anyio.create_task_group() as tg:
            if not weighted:
                tg.start_soon(run_hybrid)
            tg.start_soon(run_leg, "vector", vector.tolist(), VECTOR_FIELD, "COSINE", dense_expression)
            tg.start_soon(run_leg, "bm25", query, SPARSE_FIELD, "BM25", text_expression)
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
