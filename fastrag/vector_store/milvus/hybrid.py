"""The retriever over Milvus's server-side hybrid search (:mod:`fastrag.vector_store.milvus.hybrid_search`):
dense k-NN and BM25 fused inside Milvus with an RRF or weighted ranker, the filter applied to both legs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from fastrag.errors import InvalidParameterError
from fastrag.filters import And, Filter, FilterLike, parse_filter
from fastrag.limits import check_offset, check_positive_int, check_query
from fastrag.models import Document
from fastrag.vector_store.milvus.connection import import_pymilvus
from fastrag.vector_store.milvus.filters import MilvusExpr, and_expressions, native_or_translated
from fastrag.vector_store.milvus.hybrid_search import ranker, search_hybrid, weighted_fusion
from fastrag.vector_store.milvus.results import check_search_k
from fastrag.vector_store.milvus.store import MilvusVectorStore

if TYPE_CHECKING:
    from fastrag.protocols import Embedder

__all__ = ["MilvusHybridRetriever", "ranker", "search_hybrid", "weighted_fusion"]


class MilvusHybridRetriever:
    """Hybrid retrieval fused inside Milvus: one ``hybrid_search`` call runs dense k-NN and BM25.

    The same result contract as :class:`~fastrag.retrieval.hybrid.HybridRetriever`: documents best first,
    copies stamped with the fused ``score`` and zero-based ``rank``; the filter applies to both legs before
    their top-k cuts. Per-branch provenance (``metadata["branches"]``) is only present with
    ``provenance=True``, because Milvus does not report per-leg scores (see
    :meth:`MilvusVectorStore.search_hybrid`).

    Args:
        store: a :class:`MilvusVectorStore` opened with ``enable_bm25=True``.
        embedder: the :class:`~fastrag.protocols.Embedder` whose vectors the store holds.
        fusion: ``"rrf"`` (default) or ``"weighted"``.
        rank_constant: RRF's constant (60, Cormack et al. 2009).
        weights: for ``"weighted"``: ``{"vector": w, "bm25": w}`` or ``(w_vector, w_bm25)`` in [0, 1].
        candidate_k: hits per leg (at least ``k``).
        filter: a filter (fastrag or :class:`MilvusExpr`) applied to every call, AND-ed with the call's own;
            both become one Milvus expression, so a fastrag and a native filter combine exactly.
        provenance: stamp ``branches`` by also running both legs as plain searches.

    Raises:
        InvalidParameterError: a bad ``fusion``, ``rank_constant``, ``weights`` or ``candidate_k``, or a
            store that is not a :class:`MilvusVectorStore`.
    """

    accepts_offset = True  # retrieve(..., offset=): fastrag.protocols.SupportsOffset

    name = "milvus_hybrid"

    def __init__(
        self,
        store: MilvusVectorStore,
        embedder: Embedder,
        *,
        fusion: Literal["rrf", "weighted"] = "rrf",
        rank_constant: int = 60,
        weights: Sequence[float] | Mapping[str, float] | None = None,
        candidate_k: int = 40,
        filter: FilterLike | None = None,  # noqa: A002
        provenance: bool = False,
    ) -> None:
        if not isinstance(store, MilvusVectorStore):
            raise InvalidParameterError(f"store must be a MilvusVectorStore, got {store!r}")
        ranker(import_pymilvus(), fusion, rank_constant, weights)  # validate now
        check_search_k(candidate_k, "candidate_k")
        self.store = store
        self.embedder = embedder
        self.fusion = fusion
        self.rank_constant = rank_constant
        self.weights = weights
        self.candidate_k = candidate_k
        native_or_translated(filter)  # a foreign or inexpressible filter raises now
        self.filter = filter if isinstance(filter, MilvusExpr) else parse_filter(filter)
        self.provenance = provenance

    async def retrieve(
        self, query: str, *, k: int = 10, filter: FilterLike | MilvusExpr | None = None, offset: int = 0  # noqa: A002
    ) -> list[Document]:
        """Up to ``k`` fused documents for ``query`` matching both filters, best first; ``offset`` skips that
        many (:mod:`fastrag.retrieval.pagination`).

        Raises:
            InvalidParameterError: ``k`` is not a positive int or ``query`` is blank (before any search).
            FilterError / UnsupportedFilterError: a filter is malformed / cannot be expressed.
            BackendError: Milvus failed. EmbeddingError: the embedder failed.
        """
        check_query(query)
        check_positive_int(k, "k")
        check_offset(offset, k)
        combined = self._combined(filter)
        embedding = await self.embedder.embed_query(query)
        found = await self.store.search_hybrid(
            query, embedding, k=offset + k, filter=combined, fusion=self.fusion, rank_constant=self.rank_constant,
            weights=self.weights, candidate_k=self.candidate_k, provenance=self.provenance,
        )
        return found[offset:] if offset else found

    def _combined(self, filter: FilterLike | MilvusExpr | None) -> Filter | MilvusExpr | None:  # noqa: A002
        """Both filters as one: an AST when both are fastrag filters, else one Milvus expression (exact: both
        sides are Milvus expressions). Raises before the query is embedded if either cannot be expressed."""
        given = [f for f in (self.filter, filter) if f is not None]
        expressions = [native_or_translated(f) for f in given]
        parts = [f if isinstance(f, MilvusExpr) else parse_filter(f) for f in given]
        if not parts:
            return None
        if len(parts) == 1:
            return parts[0]
        if any(isinstance(f, MilvusExpr) for f in parts):
            return MilvusExpr(and_expressions(*expressions))
        return And(tuple(parts))

    def __repr__(self) -> str:
        return (
            f"MilvusHybridRetriever(store={self.store!r}, fusion={self.fusion!r}, rank_constant={self.rank_constant!r}, "
            f"weights={self.weights!r}, candidate_k={self.candidate_k!r})"
        )