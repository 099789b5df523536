"""Deferred rows: a hybrid search reads each result's content and metadata once, after fusion.

Each branch of a :class:`~fastrag.retrieval.HybridRetriever` fetches ``candidate_k`` hits (40 to 200),
and fusion keeps ``k`` of them (often 10). When every branch searches the same store, and that store
can answer with ids and scores alone (:class:`DeferredRows`), the hybrid asks it to: the branches then
carry only ``id``, ``score`` and ``rank``, and the store reads the rows of the ``k`` fused documents in
one call (:meth:`DeferredRows.hydrate`). The result is the same documents, with the same content,
metadata and stamps, for a fraction of the reading and decoding.

The request travels in a :class:`contextvars.ContextVar` (:data:`DEFER_ROWS_FOR`), set by the hybrid for
its branches only: retrievers between the two (``VectorRetriever``, ``BM25Retriever``) need no new
argument, and any other caller of the store gets full rows as always.

A document deleted between the branch search and the hydration is left out of the result (it no longer
exists); the hybrid then returns fewer than ``k`` documents, as if the delete had come first.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Protocol, runtime_checkable

from fastrag.models import Document

__all__ = ["DEFER_ROWS_FOR", "DeferredRows", "defers_rows", "rows_deferred"]

DEFER_ROWS_FOR: ContextVar[object | None] = ContextVar("fastrag_defer_rows_for", default=None)
"""The store whose searches may return hits without rows in this context (``None``: none)."""


@runtime_checkable
class DeferredRows(Protocol):
    """A store that can return hits without their rows (while :data:`DEFER_ROWS_FOR` names it) and read
    the rows of chosen hits later."""

    async def hydrate(self, documents: Sequence[Document]) -> list[Document]:
        """``documents`` (hits returned without rows) with their stored content and metadata, in order.

        Each result carries the stored metadata overlaid with the hit's own (``score``, ``rank``,
        ``branches``, ...). Hits whose document no longer exists are left out.
        """
        ...


def rows_deferred(store: object) -> bool:
    """Whether ``store``'s searches in the current context may leave the rows out."""
    return DEFER_ROWS_FOR.get() is store


def defers_rows(store: object) -> bool:
    """Whether ``store``'s own class implements :class:`DeferredRows` (looked up statically: a wrapper that
    forwards unknown attributes to an inner store, such as a tenant scope, does not count, since the
    inner store's rows are not the wrapper's)."""
    return inspect.getattr_static(store, "hydrate", None) is not None and not isinstance(store, type)
