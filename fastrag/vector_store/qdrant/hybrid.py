"""``QdrantHybridRetriever``: dense k-NN and BM25 fused inside Qdrant (RRF or DBSF) in one Query API request."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from fastrag.errors import ConfigurationError, InvalidParameterError
from fastrag.filters import FilterLike, combine_filters
from fastrag.models import BRANCHES, RANK, SCORE, Document
from fastrag.vector_store._validation import check_k, check_query_vector
from fastrag.vector_store.qdrant.filters import and_filters
from fastrag.vector_store.qdrant.schema import (
    DENSE,
    ID_FIELD,
    READ_FIELDS,
    TERMS_FIELD,
    to_document,
)
from fastrag.vector_store.qdrant.store import QdrantVectorStore

if TYPE_CHECKING:
    from fastrag.protocols import Embedder


class QdrantHybridRetriever:
    """Dense k-NN and BM25 fused inside Qdrant: one Query API request with two prefetch legs.

    Both legs (``"vector"``: the embedded query on the dense vector; ``"bm25"``: the analysed query on the
    text index) carry the same filter and ask for ``max(candidate_k, k)`` documents; Qdrant fuses them.
    The same request batch also returns each leg's list, so every result records its per-branch score
    and rank under ``metadata["branches"]``, as :class:`~fastrag.retrieval.hybrid.HybridRetriever` does.

    Args:
        store: a :class:`QdrantVectorStore` with BM25 enabled.
        embedder: the embedder whose vectors the store holds.
        fusion: ``"rrf"`` (Reciprocal Rank Fusion, Cormack et al. 2009) or ``"dbsf"`` (Qdrant's
            distribution-based score fusion: each leg normalised by mean ± 3 standard deviations, summed).
        rank_constant: RRF's constant, as in :class:`~fastrag.retrieval.fusion.ReciprocalRankFusion`:
            unweighted, a document scores ``sum 1 / (rank_constant + r)`` with one-based ranks ``r`` (sent to
            Qdrant as ``k = rank_constant + 1``, since Qdrant counts ranks from zero).
        weights: RRF only: ``{"vector": w, "bm25": w}``, passed to Qdrant's weighted RRF, which divides the
            one-based rank by the weight: ``1 / (r / w + rank_constant)``; not the same numbers as
            ``ReciprocalRankFusion(weights=...)``.
        candidate_k: how many documents each leg contributes, at least ``k``.
        filter: a filter AND-ed with every call's filter (fastrag or native ``models.Filter``).

    Raises:
        ConfigurationError: ``store`` has no BM25 (checked on the first call, once the collection is known).
        InvalidParameterError: unknown ``fusion``; ``rank_constant`` or ``candidate_k`` not a positive int;
            weights that are negative, all zero, name other branches, or are given with ``"dbsf"``.
    """

    accepts_offset = True  # retrieve(..., offset=): fastrag.protocols.SupportsOffset

    name = "hybrid"

    def __init__(
        self,
        *,
        store: QdrantVectorStore,
        embedder: Embedder,
        fusion: Literal["rrf", "dbsf"] = "rrf",
        rank_constant: int = 60,
        weights: Mapping[str, float] | None = None,
        candidate_k: int = 40,
        filter: FilterLike | Any | None = None,
    ) -> None:
        if not isinstance(store, QdrantVectorStore):
            raise InvalidParameterError(f"store must be a QdrantVectorStore, got {type(store).__name__}")
        if fusion not in ("rrf", "dbsf"):
            raise InvalidParameterError(f"fusion must be 'rrf' or 'dbsf', got {fusion!r}")
        check_k(rank_constant, "rank_constant")
        check_k(candidate_k, "candidate_k")
        if weights is not None:
            if fusion != "rrf":
                raise InvalidParameterError("weights apply to RRF only; Qdrant's DBSF takes none")
            if not isinstance(weights, Mapping) or set(weights) != {"vector", "bm25"}:
                raise InvalidParameterError(f'weights must map exactly "vector" and "bm25", got {weights!r}')
            for key, w in weights.items():
                if isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w) or w < 0:
                    raise InvalidParameterError(f"weight {key!r} must be a finite number >= 0, got {w!r}")
            if all(w == 0 for w in weights.values()):
                raise InvalidParameterError("at least one weight must be > 0")
        self.store = store
        self.embedder = embedder
        self.fusion = fusion
        self.rank_constant = rank_constant
        self.weights = dict(weights) if weights is not None else None
        self.candidate_k = candidate_k
        self.filter = filter if isinstance(filter, store._models.Filter) else combine_filters(filter)

    def __repr__(self) -> str:
        return (
            f"QdrantHybridRetriever(store={self.store!r}, fusion={self.fusion!r}, rank_constant={self.rank_constant}, "
            f"weights={self.weights!r}, candidate_k={self.candidate_k})"
        )

    async def retrieve(
        self, query: str, *, k: int = 10, filter: FilterLike | Any | None = None, offset: int = 0  # noqa: A002
    ) -> list[Document]:
        """Up to ``k`` fused documents for ``query`` matching both filters, best first; ``offset`` skips that
        many (:mod:`fastrag.retrieval.pagination`).

        Returns:
            Copies stamped with the fused ``score`` (RRF: in ``(0, 2 / (rank_constant + 1)]``; DBSF: a sum
            of normalised scores), zero-based ``rank`` and ``metadata["branches"] = {"vector": {"score",
            "rank"}, "bm25": {...}}`` for the legs that returned the document. Ties are broken by the best
            leg rank, then id.

        Raises:
            InvalidParameterError: ``k`` is not a positive int or the query is blank.
            FilterError / UnsupportedFilterError: a filter is malformed or cannot be expressed.
            DimensionMismatchError: the embedder's width differs from the store's.
            ConfigurationError: the store has no BM25.
            BackendError: Qdrant failed.
        """
        if not isinstance(query, str) or not query.strip():
            raise InvalidParameterError("query must be a non-blank string")
        check_k(k)
        from fastrag.retrieval.pagination import check_offset

        check_offset(offset, k)
        page_end = offset + k
        store, m = self.store, self.store._models
        qfilter = and_filters(m, store._filter(self.filter), store._filter(filter))
        exists = await store._ready()
        if not store.enable_bm25:
            raise ConfigurationError(f"{store.name}: QdrantHybridRetriever needs a store with enable_bm25=True")
        embedding = check_query_vector(
            await self.embedder.embed_query(query), dimension=store.dimension, store=store.name
        )
        text_query = store._text_query(query)
        if not exists:
            return []
        fetch_k = max(self.candidate_k, page_end)
        weights = self.weights or {"vector": 1.0, "bm25": 1.0}
        legs: list[tuple[str, Any, str]] = []
        if store._has_dense and np.any(embedding) and weights["vector"] > 0:
            legs.append(("vector", embedding.tolist(), DENSE))
        if text_query is not None and weights["bm25"] > 0:  # a zero weight drops the leg, as in fastrag's fusions
            legs.append(("bm25", text_query, TERMS_FIELD))
        if not legs:
            return []
        if self.fusion == "dbsf":
            fused_query = m.FusionQuery(fusion=m.Fusion.DBSF)
        else:
            leg_weights = None if self.weights is None else [float(self.weights[name]) for name, _, _ in legs]
            fused_query = m.RrfQuery(rrf=m.Rrf(k=self.rank_constant + 1, weights=leg_weights))
        prefetch = [m.Prefetch(query=q, using=using, filter=qfilter, limit=fetch_k) for _, q, using in legs]
        requests = [
            m.QueryRequest(prefetch=prefetch, query=fused_query, filter=qfilter, limit=fetch_k * len(legs),
                           with_payload=READ_FIELDS),
            *(m.QueryRequest(query=q, using=using, filter=qfilter, limit=fetch_k, with_payload=[ID_FIELD])
              for _, q, using in legs),
        ]
        fused, *leg_results = await store._call(
            "query_batch_points", collection_name=store.collection, requests=requests
        )
        branches: dict[str, dict[str, dict[str, Any]]] = {}
        for (name, _, _), result in zip(legs, leg_results, strict=True):
            for rank, point in enumerate(result.points):
                doc_id = (point.payload or {}).get(ID_FIELD)
                branches.setdefault(doc_id, {}).setdefault(name, {"score": float(point.score), "rank": rank})
        ordered = sorted(
            ((float(p.score), to_document(p.payload)) for p in fused.points),
            key=lambda sd: (-sd[0], min((b["rank"] for b in branches.get(sd[1].id, {}).values()), default=fetch_k),
                            sd[1].id),
        )
        out = []
        for rank, (score, doc) in enumerate(ordered[:page_end]):
            if rank < offset:
                continue
            metadata = {key: v for key, v in doc.metadata.items() if key not in (SCORE, RANK, BRANCHES)}
            metadata[SCORE] = score
            metadata[RANK] = rank
            metadata[BRANCHES] = dict(sorted(branches.get(doc.id, {}).items()))
            out.append(Document(id=doc.id, content=doc.content, metadata=metadata))
        return out
