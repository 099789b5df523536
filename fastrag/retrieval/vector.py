"""Dense retrieval: embed the question, k-NN in a vector store."""

from __future__ import annotations

from fastrag.filters import FilterLike, combine_filters
from fastrag.models import Document
from fastrag.protocols import Embedder, VectorStore
from fastrag.retrieval._validation import check_positive_int, check_query

__all__ = ["VectorRetriever"]


class VectorRetriever:
    """k-NN retrieval: ``embedder.embed_query(query)`` then ``vector_store.search_vector``.

    Args:
        vector_store: any :class:`~fastrag.protocols.VectorStore`.
        embedder: the :class:`~fastrag.protocols.Embedder` whose vectors the store holds.
        filter: a filter applied to every call, AND-ed with the call's own filter.

    Scores are the store's (cosine similarity in [-1, 1] for the built-in stores), higher is better.

    Raises (from :meth:`retrieve`):
        InvalidParameterError: ``k`` is not a positive int, or the query is empty.
        FilterError: a filter is malformed.
        DimensionMismatchError: the embedder's dimension differs from the store's.
        BackendError: the store failed.
    """

    name = "vector"

    def __init__(self, *, vector_store: VectorStore, embedder: Embedder, filter: FilterLike | None = None) -> None:  # noqa: A002
        self.vector_store = vector_store
        self.embedder = embedder
        self.filter = combine_filters(filter)

    async def retrieve(self, query: str, *, k: int = 10, filter: FilterLike | None = None) -> list[Document]:  # noqa: A002
        """Up to ``k`` documents nearest to ``query``, best first, matching both filters."""
        check_query(query)
        check_positive_int(k, "k")
        node = combine_filters(self.filter, filter)
        embedding = await self.embedder.embed_query(query)
        return await self.vector_store.search_vector(embedding, k=k, filter=node)
