"""Full-text retrieval: BM25 in a lexical store."""

from __future__ import annotations

from fastrag.filters import FilterLike, combine_filters
from fastrag.models import Document
from fastrag.protocols import LexicalStore
from fastrag.retrieval._validation import check_positive_int, check_query

__all__ = ["BM25Retriever"]


class BM25Retriever:
    """BM25 retrieval through ``store.search_text`` (Robertson & Zaragoza, 2009).

    Args:
        store: any :class:`~fastrag.protocols.LexicalStore`.
        filter: a filter applied to every call, AND-ed with the call's own filter.

    Scores are BM25: unbounded, higher is better, comparable only within one query.

    Raises (from :meth:`retrieve`):
        InvalidParameterError: ``k`` is not a positive int, or the query is empty.
        FilterError: a filter is malformed.
        BackendError: the store failed.
    """

    name = "bm25"

    def __init__(self, *, store: LexicalStore, filter: FilterLike | None = None) -> None:  # noqa: A002
        self.store = store
        self.filter = combine_filters(filter)

    async def retrieve(self, query: str, *, k: int = 10, filter: FilterLike | None = None) -> list[Document]:  # noqa: A002
        """Up to ``k`` documents sharing terms with ``query``, best first, matching both filters."""
        check_query(query)
        check_positive_int(k, "k")
        return await self.store.search_text(query, k=k, filter=combine_filters(self.filter, filter))
