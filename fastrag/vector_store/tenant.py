"""One tenant's view of a shared store: its writes are stamped with the tenant, its reads and deletes confined.

::

    async with SQLiteVectorStore("shared.db") as shared:
        alice = TenantScopedStore(shared, tenant="alice")
        await IngestionPipeline(embedder=embedder, vector_store=alice).run(["uploads/alice/"])
        retriever = HybridRetriever([VectorRetriever(vector_store=alice, embedder=embedder),
                                     BM25Retriever(store=alice)])

Through the view, the shared store looks like a private store holding only the tenant's documents:

- ``upsert`` sets ``metadata[tenant_key] = tenant`` on copies of the documents and stores each under a
  scoped id (:mod:`fastrag.scoping`: ``"tenant_id=alice::<id>"``, ``"tenant_id#42::<id>"`` for an int
  tenant; the tenant percent-encoded), so two tenants writing the same id (the same relative path, for
  ingestion) never overwrite each other, whatever characters their ids and tenants hold: tenant ``1``
  and tenant ``"1"``, or tenant ``"a:"`` writing ``":b"`` and tenant ``"a"`` writing ``"::b"``, get
  distinct stored ids. A document that already names another tenant is refused. The encoding is the
  one :class:`~fastrag.knowledge_base.KnowledgeBase` uses for ``user_id=`` and ``scope=``, so
  ``TenantScopedStore(store, tenant="alice", tenant_key="user_id")`` sees what ``kb.add_documents(...,
  user_id="alice")`` wrote, under the same ids.
- ``search_vector``, ``search_text``, ``count``, ``get`` and ``delete`` AND ``equals(tenant_key, tenant)``
  into their filter, and ids are mapped both ways: the tenant sees the ids it wrote.
- Nothing else of the shared store is reachable through the view (no ``clear()``), and closing the view
  does not close the shared store, which other tenants still use.

Reading the shared store directly (or through :class:`~fastrag.retrieval.TenantScopedRetriever`) shows
the stored ids.

**Stores written by older versions.** Before this encoding, stored ids were ``"<tenant>::<id>"``, which
let two tenants collide. The first call through a view samples the tenant's documents (``get`` with the
tenant filter, one document); when they carry the old ids, every call raises
:class:`~fastrag.errors.ConfigurationError` naming the tenant and the fix, rather than silently showing
them under foreign ids and writing duplicates beside them: run :meth:`TenantScopedStore.migrate_legacy_ids`
once (it rewrites them under the new ids). A shared store without ``get`` cannot be checked.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from fastrag.errors import ConfigurationError, InvalidParameterError
from fastrag.filters import FilterLike, combine_filters
from fastrag.models import TITLE, Document
from fastrag.scoping import DEFAULT_TENANT_KEY, SCOPE_SEPARATOR, scope_prefix, tenant_filter

__all__ = ["TenantScopedStore"]

logger = logging.getLogger("fastrag.retrieval")

_MIGRATION_BATCH = 256


class TenantScopedStore:
    """A view of ``store`` confined to one tenant (see the module docstring).

    It offers the methods of :class:`~fastrag.protocols.VectorStore`, and ``search_text`` and ``get`` when
    the shared store has them (so protocol checks answer for the shared store).

    Args:
        store: the shared store.
        tenant: the tenant's id: a non-empty str of valid Unicode (any characters), or an int within
            signed 64 bits.
        tenant_key: the metadata key holding the tenant (default ``"tenant_id"``).

    Raises:
        InvalidParameterError: a bad ``tenant`` or ``tenant_key``.

    Every method raises :class:`~fastrag.errors.ConfigurationError` when the tenant's documents in the
    shared store carry the ids of an older version (see the module docstring and
    :meth:`migrate_legacy_ids`).
    """

    def __init__(self, store: Any, *, tenant: str | int, tenant_key: str = DEFAULT_TENANT_KEY) -> None:
        self._scope = tenant_filter(tenant, tenant_key)
        self.store = store
        self.tenant = tenant
        self.tenant_key = tenant_key
        self._prefix = scope_prefix({tenant_key: tenant}) + SCOPE_SEPARATOR
        self._legacy_prefix = f"{tenant}{SCOPE_SEPARATOR}"  # "<tenant>::<id>", before fastrag.scoping
        self._format_checked = False

    # ---------------------------------------------------------------------------------------- ids

    def _stored_id(self, doc_id: str) -> str:
        if not isinstance(doc_id, str):
            raise InvalidParameterError(f"ids must be strings, got {doc_id!r}")
        return self._prefix + doc_id

    def _is_legacy(self, stored_id: str) -> bool:
        return stored_id.startswith(self._legacy_prefix) and not stored_id.startswith(self._prefix)

    async def _check_format(self) -> None:
        """Refuse to work over this tenant's documents while they carry the ids of an older version."""
        if self._format_checked or not callable(getattr(self.store, "get", None)):
            return
        sample = await self.store.get(filter=self._scope, limit=1)
        if sample and self._is_legacy(sample[0].id):
            raise ConfigurationError(
                f"{self.store!r} holds documents of {self.tenant_key}={self.tenant!r} under the stored-id format of "
                f"older fastrag versions ({sample[0].id!r}, '<tenant>::<id>'), which let tenants collide; this view "
                "stores ids as fastrag.scoping encodes them and would not find those documents. Rewrite them "
                "once with: await TenantScopedStore(store, tenant=..., tenant_key=...).migrate_legacy_ids("
                "embedder=<the embedder that indexed them>)"
            )
        self._format_checked = True

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
        await self._check_format()
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
        stored_ids = self._stored_ids(ids)
        await self._check_format()
        return await self.store.delete(ids=stored_ids, filter=self._filter(filter))

    # -------------------------------------------------------------------------------------- reads

    async def search_vector(
        self, embedding: np.ndarray, *, k: int, filter: FilterLike | None = None  # noqa: A002
    ) -> list[Document]:
        """The shared store's k-NN restricted to the tenant's documents."""
        await self._check_format()
        found = await self.store.search_vector(embedding, k=k, filter=self._filter(filter))
        return [self._own(doc) for doc in found]

    async def count(self, *, filter: FilterLike | None = None) -> int:  # noqa: A002
        """How many of the tenant's documents there are (matching ``filter`` when given)."""
        await self._check_format()
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
        await self._check_format()
        found = await self.store.search_text(query, k=k, filter=self._filter(filter))
        return [self._own(doc) for doc in found]

    async def _get(
        self, *, ids: Sequence[str] | None = None, filter: FilterLike | None = None, limit: int | None = None  # noqa: A002
    ) -> list[Document]:
        stored_ids = self._stored_ids(ids)
        await self._check_format()
        found = await self.store.get(ids=stored_ids, filter=self._filter(filter), limit=limit)
        return [self._own(doc) for doc in found]

    # ---------------------------------------------------------------------------------- migration

    async def migrate_legacy_ids(self, *, embedder: Any | None) -> int:
        """Rewrite this tenant's documents stored under an older version's ids (``"<tenant>::<id>"``) under
        the current ones; return how many were rewritten (0 when there were none).

        Each batch of old documents is written under its new id first, then the old copies are deleted, so
        an interruption leaves every document present at least once and a re-run finishes the job.

        Args:
            embedder: the embedder that indexed the documents: their vectors are recomputed from
                ``title`` + ``content`` as :class:`~fastrag.ingestion.IngestionPipeline` embeds them (a
                store's ``get`` returns no vectors). ``None`` rewrites them without vectors: only for a
                store used for BM25 alone.

        Raises:
            ConfigurationError: the shared store has no ``get``.
            Exception: whatever the shared store or the embedder raises.
        """
        if not callable(getattr(self.store, "get", None)):
            raise ConfigurationError(f"{self.store!r} has no get(): its documents cannot be read back to migrate")
        legacy = [doc for doc in await self.store.get(filter=self._scope) if self._is_legacy(doc.id)]
        for start in range(0, len(legacy), _MIGRATION_BATCH):
            batch = legacy[start : start + _MIGRATION_BATCH]
            renamed = [
                Document(id=self._prefix + doc.id[len(self._legacy_prefix) :], content=doc.content,
                         metadata=doc.metadata)
                for doc in batch
            ]  # fmt: skip
            embeddings = None
            if embedder is not None:
                texts = [_embedding_text(doc) for doc in renamed]
                embeddings = np.asarray(await embedder.embed_documents(texts), dtype=np.float32)
            await self.store.upsert(renamed, embeddings=embeddings)
            await self.store.delete(ids=[doc.id for doc in batch])
        if legacy:
            logger.info("%s=%r: %d document(s) rewritten under scoped ids", self.tenant_key, self.tenant, len(legacy))
        self._format_checked = False
        return len(legacy)

    # ---------------------------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> TenantScopedStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Nothing to release: the shared store stays open for the other tenants. Idempotent."""

    def __repr__(self) -> str:
        return f"TenantScopedStore({self.store!r}, tenant={self.tenant!r}, tenant_key={self.tenant_key!r})"


def _embedding_text(doc: Document) -> str:
    """What the ingestion pipeline embeds for a chunk: its title and content."""
    title = doc.metadata.get(TITLE) or ""
    return f"{title}\n{doc.content}" if title else doc.content
