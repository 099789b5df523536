"""Pages of results: ``retrieve(query, k=size, offset=n * size)``.

Every built-in retriever takes ``offset`` (the number of results to skip, default 0): the call returns
results ``offset .. offset + k - 1`` of the ranked list the retriever would give for
``k = offset + k``, with their ranks in that full list (page 2 of size 10 holds ranks 10 to 19).
So pages are consistent exactly when a retriever's top ``k`` is a prefix of its top ``k + n``: then
consecutive pages never repeat or skip a document, and page 1 + page 2 equals the top ``2 * size``. Every
store breaks score ties by id, so that holds for k-NN and BM25 on every store; for the compositions:

* :class:`~fastrag.retrieval.hybrid.HybridRetriever` with fastrag's fusions: at every depth (the fusion
  scores each branch over its first ``candidate_k`` documents whatever ``k`` is; a fusion of your own
  whose ``fuse`` takes no ``depth`` is consistent only for pages that end within ``candidate_k``);
* :class:`~fastrag.retrieval.reranking.RerankingRetriever`, and the server-side hybrids of Qdrant and
  Milvus: for pages that end within ``candidate_k`` (they rerank, or fuse, the same candidates); a page
  past it reads deeper lists, which may order the top differently. Raise ``candidate_k`` to the deepest
  page you serve;
* :class:`~fastrag.retrieval.grouping.GroupingRetriever` with ``score="max"``: groups page consistently
  whenever the inner retriever does; with ``"sum"`` only within ``candidate_k`` (deeper reading adds to
  the sums).

``offset + k`` may not exceed the retriever's ``limits.max_k`` (10,000 by default): deep paging past it is
refused, not silently truncated. There is no cursor: a store that changes between two calls may shift
documents across the page boundary, as in every engine that pages by offset.

:func:`retrieve_page` pages any retriever, including one whose ``retrieve`` takes no ``offset`` (it asks
that one for ``offset + k`` and slices).
"""

from __future__ import annotations

from typing import Any

from fastrag.errors import InvalidParameterError
from fastrag.filters import FilterLike
from fastrag.limits import check_offset  # defined below retrieval, re-exported here (its original path)
from fastrag.models import Document
from fastrag.protocols import Retriever, SupportsOffset

__all__ = ["check_offset", "retrieve_page", "takes_offset"]


def takes_offset(retriever: Any) -> bool:
    """Whether ``retriever`` declares that its ``retrieve`` takes ``offset=``
    (:class:`~fastrag.protocols.SupportsOffset`)."""
    return isinstance(retriever, SupportsOffset) and retriever.accepts_offset is True


async def retrieve_page(
    retriever: Retriever, query: str, *, k: int = 10, offset: int = 0, filter: FilterLike | None = None  # noqa: A002
) -> list[Document]:
    """Results ``offset .. offset + k - 1`` of ``retriever`` for ``query`` (see the module).

    A retriever that takes ``offset`` is passed it; any other is asked for ``offset + k`` and the list is
    sliced.

    Raises:
        InvalidParameterError: ``offset`` is not an int >= 0; otherwise whatever ``retrieve`` raises.
    """
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidParameterError(f"offset must be an int >= 0, got {offset!r}")
    if offset == 0:
        return await retriever.retrieve(query, k=k, filter=filter)
    if takes_offset(retriever):
        return await retriever.retrieve(query, k=k, offset=offset, filter=filter)  # type: ignore[call-arg]
    if isinstance(k, bool) or not isinstance(k, int):
        raise InvalidParameterError(f"k must be a positive int, got {k!r}")
    found = await retriever.retrieve(query, k=offset + k, filter=filter)
    return list(found[offset : offset + k])
