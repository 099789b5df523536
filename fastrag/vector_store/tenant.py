"""One tenant's view of a shared store: its writes are stamped with the tenant, its reads and deletes confined.

::

    async with SQLiteVectorStore("shared.db") as shared:
        alice = TenantScopedStore(shared, tenant="alice")
        await IngestionPipeline(embedder=embedder, vector_store=alice).run(["uploads/alice/"])
        retriever = HybridRetriever([VectorRetriever(vector_store=alice, embedder=embedder),
                                     BM25Retriever(store=alice)])

Through the view, the shared store looks like a private store holding only the tenant's documents:

- ``upsert`` sets ``metadata[tenant_key] = tenant`` on copies of the documents and stores each under the
  id ``"<tenant>::<id>"``, so two tenants writing the same id (the same relative path, for ingestion)
  never overwrite each other. A document that already names another tenant is refused.
- ``search_vector``, ``search_text``, ``count``, ``get`` and ``delete`` AND ``equals(tenant_key, tenant)``
  into their filter, and ids are mapped both ways: the tenant sees the ids it wrote.
- Nothing else of the shared store is reachable through the view (no ``clear()``), and closing the view
  does not close the shared store, which other tenants still use.

Reading the shared store directly (or through :class:`~fastrag.retrieval.TenantScopedRetriever`) shows
the stored ids, ``"<tenant>::<id>"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fastrag.errors import InvalidParameterError
from fastrag.filters import FilterLike, combine_filters
from fastrag.models import Document
from fastrag.retrieval.tenant import DEFAULT_TENANT_KEY, tenant_filter

__all__ = ["ID_SEPARATOR", "TenantScopedStore"]

ID_SEPARATOR = "::"
"""Between the tenant and the document id in stored ids; a tenant id may not contain it."""


class TenantScopedStore:
    """A view of ``store`` confined to one tenant (see the module docstring).

    It offers the methods of :class:`~fastrag.protocols.VectorStore`, and ``search_text`` and ``get`` when
    the shared store has them (so protocol checks answer for the shared store).

    Args:
        store: the shared store.
        tenant: the tenant's id: a non-empty str without ``"::"``, or an int.
        tenant_key: the metadata key holding the tenant (default ``"tenant_id"``).

    Raises:
        InvalidParameterError: a bad ``tenant`` or ``tenant_key``.
    """

    def __init__(self, store: Any, *, tenant: str | int, tenant_key: str = DEFAULT_TENANT_KEY) -> None:
        self._scope = tenant_filter(tenant, tenant_key)
        if ID_SEPARATOR in str(tenant):
            raise InvalidParameterError(f"tenant {tenant!r} must not contain {ID_SEPARATOR!r}")
        self.store = store
        self.tenant = tenant
        self.tenant_key = tenant_key
        self._prefix = f"{tenant}{ID_SEPARATOR}"

    # ---------------------------------------------------------------------------------------- ids

    def _stored_id(self, doc_id: str) -> str:
        return self._prefix + doc_id

    def _stored_ids(self, ids: Sequence[str] | None) -> list[str] | None:
        if ids is None:
            return None
        if isinstance(ids, str):
            raise InvalidParameterError("ids must be a sequence of strings, not one string")
        return [self._stored_id(i) for i in ids]

    def _own(self, doc: Document) -> Document:
        """The tenant's view of a stored document: the id it wrote."""
        if doc.id.startswith(self._prefix):
            return Document(id=doc.id[len(self._prefix) :], content=doc.content, metadata=doc.metadata)
        return doc

    def _filter(self, filter: FilterLike | None) -> Any:  # noqa: A002
        return combine_filters(self._scope, filter)

    # ------------------------------------------------------------------------------------- writes

    async def upsert(self, documents: Sequence[Document], *, embeddings: np.ndarray | None = None) -> None:
        """Write copies of ``documents`` stamped with the tenant, under tenant-qualified ids.

        Raises:
            InvalidParameterError: a document's ``metadata[tenant_key]`` names another tenant.
            Exception: whatever the shared store's ``upsert`` raises.
        """
        stamped = []
        for doc in documents:
            current = doc.metadata.get(self.tenant_key, self.tenant)
            if current != self.tenant or type(current) is not type(self.tenant):
                raise InvalidParameterError(
                    f"document {doc.id!r} has {self.tenant_key}={current!r}; this view writes only {self.tenant!r}"
                )
            stamped.append(
                Document(id=self._stored_id(doc.id), content=doc.content,
                         metadata={**doc.metadata, self.tenant_key: self.tenant})
            )  # fmt: skip
        await self.store.upsert(stamped, embeddings=embeddings)

    async def delete(self, *, ids: Sequence[str] | None = None, filter: FilterLike | None = None) -> int:  # noqa: A002
        """Delete the tenant's documents with these ``ids`` and/or matching ``filter``.

        Raises:
            InvalidParameterError: neither ``ids`` nor ``filter`` was given.
        """
        if ids is None and filter is None:
            raise InvalidParameterError("delete needs ids or a filter")
        return await self.store.delete(ids=self._stored_ids(ids), filter=self._filter(filter))

    # -------------------------------------------------------------------------------------- reads

    async def search_vector(
        self, embedding: np.ndarray, *, k: int, filter: FilterLike | None = None  # noqa: A002
    ) -> list[Document]:
        """The shared store's k-NN restricted to the tenant's documents."""
        found = await self.store.search_vector(embedding, k=k, filter=self._filter(filter))
        return [self._own(doc) for doc in found]

    async def count(self, *, filter: FilterLike | None = None) -> int:  # noqa: A002
        """How many of the tenant's documents there are (matching ``filter`` when given)."""
        return await self.store.count(filter=self._filter(filter))

    def __getattr__(self, name: str) -> Any:
        # the optional capabilities exist exactly when the shared store has them
        if name == "search_text" and hasattr(self.store, "search_text"):
            return self._search_text
        if name == "get" and hasattr(self.store, "get"):
            return self._get
        if name in ("dimension", "embedding_model"):
            return getattr(self.store, name)
        raise AttributeError(f"{type(self).__name__!r} has no attribute {name!r}")

    async def _search_text(self, query: str, *, k: int, filter: FilterLike | None = None) -> list[Document]:  # noqa: A002
        found = await self.store.search_text(query, k=k, filter=self._filter(filter))
        return [self._own(doc) for doc in found]

    async def _get(
        self, *, ids: Sequence[str] | None = None, filter: FilterLike | None = None, limit: int | None = None  # noqa: A002
    ) -> list[Document]:
        found = await self.store.get(ids=self._stored_ids(ids), filter=self._filter(filter), limit=limit)
        return [self._own(doc) for doc in found]

    # ---------------------------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> TenantScopedStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Nothing to release: the shared store stays open for the other tenants. Idempotent."""

    def __repr__(self) -> str:
        return f"TenantScopedStore({self.store!r}, tenant={self.tenant!r}, tenant_key={self.tenant_key!r})"
