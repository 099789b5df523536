"""``QdrantHybridRetriever``: dense k-NN and BM25 fused inside Qdrant (RRF or DBSF) in one Query API request.

The retriever embeds the query and calls :meth:`QdrantVectorStore.search_hybrid`, the store's public hybrid
search; it reaches into nothing private of the store."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from fastrag.errors import InvalidParameterError
from fastrag.filters import FilterLike, combine_filters
from fastrag.limits import check_offset
from fastrag.models import Document
from fastrag.vector_store._validation import check_k
from fastrag.vector_store.qdrant.connection import import_models
from fastrag.vector_store.qdrant.filters import and_filters, native_filter
from fastrag.vector_store.qdrant.store import QdrantVectorStore, check_hybrid_options

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
        check_hybrid_options(fusion, rank_constant, weights, candidate_k)
        self.store = store
        self.embedder = embedder
        self.fusion = fusion
        self.rank_constant = rank_constant
        self.weights = dict(weights) if weights is not None else None
        self.candidate_k = candidate_k
        self._models = import_models()
        self.filter = filter if isinstance(filter, self._models.Filter) else combine_filters(filter)

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
        check_offset(offset, k)
        m = self._models
        qfilter = and_filters(m, native_filter(m, self.filter), native_filter(m, filter))  # raises before embedding
        embedding = await self.embedder.embed_query(query)
        found = await self.store.search_hybrid(
            query, embedding, k=offset + k, filter=qfilter, fusion=self.fusion, rank_constant=self.rank_constant,
            weights=self.weights, candidate_k=self.candidate_k,
        )  # fmt: skip
        return found[offset:] if offset else found
