"""Fault injection: a store wrapper that fails, stalls or records on demand, to test code built on fastrag.

::

    down = FaultyStore(InMemoryStore())                      # every call raises: a store that is down
    flaky = FaultyStore(store, failures=2)                   # the first two calls fail, then it recovers
    limited = FaultyStore(store, failures=1, error=lambda: TransientBackendError("429", retry_after=0.2))
    slow = FaultyStore(store, delay=5.0, methods={"search_text"})   # BM25 stalls for 5 s

Results are the wrapped store's, unchanged. ``calls`` records every call as ``(method, kwargs)``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

import anyio
import numpy as np

from fastrag.errors import BackendUnavailableError
from fastrag.filters import FilterLike
from fastrag.lifecycle import AsyncResource
from fastrag.models import Document

__all__ = ["FaultyStore"]

_METHODS = frozenset({"upsert", "search_vector", "search_text", "count", "get", "delete"})


def _unavailable() -> Exception:
    return BackendUnavailableError("injected fault: connection refused", store="faulty://store")


class FaultyStore(AsyncResource):
    """Wraps a store (``VectorStore``, ``LexicalStore``, ``SupportsGet``) and injects faults into its calls.

    Args:
        store: the store whose answers pass through when a call does not fail.
        failures: how many matching calls fail before the rest pass through; ``None`` (default): all fail.
        error: makes the exception each failing call raises (default: a
            :class:`~fastrag.errors.BackendUnavailableError` naming ``faulty://store``).
        methods: which methods are affected (default: all six store methods).
        delay: seconds an affected call waits (cancellably) before failing or answering.
    """

    def __init__(
        self,
        store: Any,
        *,
        failures: int | None = None,
        error: Callable[[], Exception] = _unavailable,
        methods: Collection[str] = _METHODS,
        delay: float = 0.0,
    ) -> None:
        self.store = store
        self.failures = failures
        self.error = error
        self.methods = frozenset(methods)
        self.delay = delay
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.failed = 0

    async def _fault(self, method: str, **kwargs: Any) -> None:
        self.calls.append((method, kwargs))
        if method not in self.methods:
            return
        if self.delay:
            await anyio.sleep(self.delay)
        if self.failures is None or self.failed < self.failures:
            self.failed += 1
            raise self.error()

    async def upsert(self, documents: Sequence[Document], *, embeddings: np.ndarray | None = None) -> None:
        await self._fault("upsert", ids=[d.id for d in documents])
        await self.store.upsert(documents, embeddings=embeddings)

    async def search_vector(self, embedding: np.ndarray, *, k: int, filter: FilterLike | None = None) -> list[Document]:  # noqa: A002
        await self._fault("search_vector", k=k, filter=filter)
        return await self.store.search_vector(embedding, k=k, filter=filter)

    async def search_text(self, query: str, *, k: int, filter: FilterLike | None = None) -> list[Document]:  # noqa: A002
        await self._fault("search_text", query=query, k=k, filter=filter)
        return await self.store.search_text(query, k=k, filter=filter)

    async def count(self, *, filter: FilterLike | None = None) -> int:  # noqa: A002
        await self._fault("count", filter=filter)
        return await self.store.count(filter=filter)

    async def get(
        self, *, ids: Sequence[str] | None = None, filter: FilterLike | None = None, limit: int | None = None  # noqa: A002
    ) -> list[Document]:
        await self._fault("get", ids=ids, filter=filter, limit=limit)
        return await self.store.get(ids=ids, filter=filter, limit=limit)

    async def delete(self, *, ids: Sequence[str] | None = None, filter: FilterLike | None = None) -> int:  # noqa: A002
        await self._fault("delete", ids=ids, filter=filter)
        return await self.store.delete(ids=ids, filter=filter)

    async def _aclose(self) -> None:
        """Close the wrapped store."""
        await self.store.aclose()

    @property
    def dimension(self) -> int | None:
        """The wrapped store's dimension, if it has one."""
        return getattr(self.store, "dimension", None)
