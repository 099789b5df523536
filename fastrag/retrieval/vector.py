"""Dense retrieval: embed the question, k-NN in a vector store."""

from __future__ import annotations

import logging

import numpy as np

from fastrag import tracing
from fastrag.errors import DimensionMismatchError, EmbeddingError
from fastrag.filters import FilterLike, combine_filters
from fastrag.models import Document
from fastrag.protocols import Embedder, VectorStore
from fastrag.retrieval._validation import check_k, check_query
from fastrag.retrieval.limits import DEFAULT_LIMITS, RetrievalLimits
from fastrag.retrieval.pagination import check_offset
from fastrag.retrieval.result import ReturnsResult, record_zero_vector, timed
from fastrag.retrieval.thresholds import check_min_score, keep_above

logger = logging.getLogger("fastrag.retrieval")

__all__ = ["VectorRetriever"]


class VectorRetriever(ReturnsResult):
    """k-NN retrieval: ``embedder.embed_query(query)`` then ``vector_store.search_vector``.

    Args:
        vector_store: any :class:`~fastrag.protocols.VectorStore`.
        embedder: the :class:`~fastrag.protocols.Embedder` whose vectors the store holds.
        filter: a filter applied to every call, AND-ed with the call's own filter.
        limits: bounds on ``k`` and the query (default :data:`~fastrag.retrieval.limits.DEFAULT_LIMITS`).
        min_score: drop hits whose score is below this (cosine similarity, so in [-1, 1]); applied to the
            store's top ``k``, so fewer may come back. ``None`` (default): no threshold. Above 1 warns: no
            hit can reach it. See :mod:`fastrag.retrieval.thresholds`.

    Scores are the store's (cosine similarity in [-1, 1] for the built-in stores), higher is better.
    :meth:`~fastrag.retrieval.result.ReturnsResult.retrieve_result` reports the stages ``"embed"`` and
    ``"search"``.

    :meth:`retrieve` raises every error below but ``BackendError`` before the store is called.

    Raises:
        InvalidParameterError: (when built) ``min_score`` is not ``None`` or a finite number; (when called)
            ``k`` is not a positive int within ``limits.max_k``, or the query is empty, too long or not valid
            Unicode.
        FilterError: a filter is malformed.
        DimensionMismatchError: the query vector is not ``(embedder.dimension,)``, or its width differs
            from the store's ``dimension`` attribute (when the store has one).
        EmbeddingError: the query vector holds NaN or infinity.
        BackendError: the store failed.
    """

    accepts_offset = True  # retrieve(..., offset=): fastrag.protocols.SupportsOffset

    name = "vector"

    def __init__(
        self,
        *,
        vector_store: VectorStore,
        embedder: Embedder,
        filter: FilterLike | None = None,  # noqa: A002
        limits: RetrievalLimits = DEFAULT_LIMITS,
        min_score: float | None = None,
    ) -> None:
        self.min_score = check_min_score(min_score, maximum=1.0, scale="cosine similarity")
        self.vector_store = vector_store
        self.embedder = embedder
        self.filter = combine_filters(filter)
        self.limits = limits

    async def retrieve(
        self, query: str, *, k: int = 10, filter: FilterLike | None = None, offset: int = 0  # noqa: A002
    ) -> list[Document]:
        """Up to ``k`` documents nearest to ``query``, best first, matching both filters.

        A question that embeds to the zero vector (none of its words is in the model's vocabulary) has
        no dense neighbours: the result is empty, and in a hybrid the other branches decide. It is never
        silent: a WARNING on logger ``fastrag.retrieval``, and
        ``RetrievalResult.zero_vector_branches`` (:mod:`fastrag.retrieval.result`) names the branch.

        ``offset`` skips that many results: the call returns ranks ``offset .. offset + k - 1`` of the
        list for ``k = offset + k`` (:mod:`fastrag.retrieval.pagination`).
        """
        check_query(query, self.limits)
        check_k(k, self.limits)
        check_offset(offset, k, self.limits)
        node = combine_filters(self.filter, filter)
        with timed("embed", span=tracing.embedding(_model_name(self.embedder))):
            embedding = self._checked(await self.embedder.embed_query(query))
        if not embedding.any():
            # every word of the question is outside the model's vocabulary: it has no dense neighbours
            # (stores refuse an all-zero query, whose cosine with anything is undefined)
            record_zero_vector(self.name)
            logger.warning(
                "dense retrieval: %r embedded the question to the zero vector (none of its words is in its "
                "vocabulary); no dense results for %r", getattr(self.embedder, "name", self.embedder), query[:80],
            )
            return []
        with timed("search", span=tracing.store_call("search_vector", self.vector_store)) as call:
            found = await self.vector_store.search_vector(embedding, k=offset + k, filter=node)
            call.returned(found)
        if self.min_score is not None:
            found = keep_above(found, self.min_score)
        return found[offset:] if offset else found

    def _checked(self, embedding: np.ndarray) -> np.ndarray:
        """The embedder's vector, if it is ``(dim,)`` and finite: garbage never reaches the store."""
        vector = np.asarray(embedding)
        expected = getattr(self.embedder, "dimension", None)
        stored = getattr(self.vector_store, "dimension", None)
        if vector.ndim != 1 or (isinstance(expected, int) and vector.shape[0] != expected):
            raise DimensionMismatchError(
                f"{self.embedder!r} returned a query vector of shape {vector.shape}, expected ({expected},)"
            )
        if isinstance(stored, int) and not isinstance(stored, bool) and vector.shape[0] != stored:
            raise DimensionMismatchError(
                f"query vectors have dimension {vector.shape[0]}, the store {self.vector_store!r} holds {stored}"
            )
        if not np.issubdtype(vector.dtype, np.number) or not np.isfinite(vector).all():
            raise EmbeddingError(f"{self.embedder!r} returned a query vector with NaN or infinity")
        return vector


def _model_name(embedder: object) -> str | None:
    name = getattr(embedder, "name", None)
    return name if isinstance(name, str) else None
