"""One tenant's view of a shared store: its writes are stamped with the tenant, its reads and deletes confined.

::

    async with SQLiteVectorStore("shared.db") as shared:
        alice = TenantScopedStore(shared, tenant="alice")
        await IngestionPipeline(embedder=embedder, vector_store=alice).run(["uploads/alice/"])
        retriever = HybridRetriever([VectorRetriever(vector_store=alice, embedder=embedder),
                                     BM25Retriever(store=alice)])

:class:`TenantScopedStore` is :class:`fastrag.scoping.ScopedStore`, the one scoped view, for the one-key
scope ``{tenant_key: tenant}``; what it does is described there. In short, through the view the shared
store looks like a private store holding only the tenant's documents:

- ``upsert`` sets ``metadata[tenant_key] = tenant`` on copies of the documents and stores each under a
  scoped id (:mod:`fastrag.scoping`: ``"tenant_id=alice::<id>"``, ``"tenant_id#42::<id>"`` for an int
  tenant; the tenant percent-encoded), so two tenants writing the same id (the same relative path, for
  ingestion) never overwrite each other, whatever characters their ids and tenants hold: tenant ``1``
  and tenant ``"1"``, or tenant ``"a:"`` writing ``":b"`` and tenant ``"a"`` writing ``"::b"``, get
  distinct stored ids. A document that already names another tenant is refused, and so is an id that
  starts like a scoped id (``"k=v::x"``). The encoding is the one
  :class:`~fastrag.knowledge_base.KnowledgeBase` uses for ``user_id=`` and ``scope=``, so
  ``TenantScopedStore(store, tenant="alice", tenant_key="user_id")`` sees what ``kb.add_documents(...,
  user_id="alice")`` wrote, under the same ids (a document the knowledge base wrote for a narrower scope,
  ``user_id="alice", agent_id="a1"``, shows as ``"agent_id=a1::<id>"``, which ``get`` and ``delete`` take).
- ``search_vector``, ``search_text``, ``count``, ``get`` and ``delete`` AND ``equals(tenant_key, tenant)``
  into their filter, and ids are mapped both ways: the tenant sees the ids it wrote. A document that
  carries the tenant in its metadata under a plain id (written to the shared store directly) is shown under
  that id, as before.
- ``search_text`` scores BM25 with the tenant's own statistics (document count, document frequencies, mean
  length) where the shared store offers :class:`~fastrag.protocols.SupportsScopedStatistics` (SQLite,
  PostgreSQL): a tenant's keyword scores are the same whatever other tenants hold. ``statistics="store"``
  restores the store's collection-wide statistics. Milvus, Qdrant and OpenSearch compute BM25 over their
  whole collection: see ``docs/reliability.md`` ("BM25 statistics and tenants") for the collection per
  tenant that isolates them.
- Nothing else of the shared store is reachable through the view (no ``clear()``), and closing the view
  does not close the shared store, which other tenants still use.

Reading the shared store directly (or through :class:`~fastrag.retrieval.TenantScopedRetriever`) shows
the stored ids.

**Stores written by older versions.** Before :mod:`fastrag.scoping`, stored ids were ``"<tenant>::<id>"``,
which let two tenants collide. The first call through a view samples the tenant's documents (``get`` with
the tenant filter, one document); when they carry the old ids, every call raises
:class:`~fastrag.errors.ConfigurationError` naming the tenant and the fix, rather than silently showing
them under foreign ids and writing duplicates beside them: run :meth:`TenantScopedStore.migrate_legacy_ids`
once (it rewrites them under the new ids). A shared store without ``get`` cannot be checked.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from fastrag.errors import ConfigurationError
from fastrag.models import TITLE, Document
from fastrag.protocols import SupportsGet
from fastrag.scoping import (
    DEFAULT_TENANT_KEY,
    SCOPE_SEPARATOR,
    ScopedStore,
    scope_prefix,
    scoped_id,
    tenant_scope,
)

__all__ = ["TenantScopedStore"]

logger = logging.getLogger("fastrag.retrieval")

_MIGRATION_BATCH = 256


class TenantScopedStore(ScopedStore):
    """A view of ``store`` confined to one tenant (see the module docstring and
    :class:`~fastrag.scoping.ScopedStore`).

    It offers the methods of :class:`~fastrag.protocols.VectorStore`, and ``search_text`` and ``get`` when
    the shared store has them (so protocol checks answer for the shared store).

    Args:
        store: the shared store.
        tenant: the tenant's id: a non-empty str of valid Unicode (any characters), or an int within
            signed 64 bits.
        tenant_key: the metadata key holding the tenant (default ``"tenant_id"``).
        statistics: ``"scope"`` (default): BM25 with the tenant's own statistics where the store can;
            ``"store"``: the store's statistics over every tenant's documents.

    Raises:
        InvalidParameterError: a bad ``tenant``, ``tenant_key`` or ``statistics``.

    Every method raises :class:`~fastrag.errors.ConfigurationError` when the tenant's documents in the
    shared store carry the ids of an older version (see the module docstring and
    :meth:`migrate_legacy_ids`).
    """

    def __init__(
        self, store: Any, *, tenant: str | int, tenant_key: str = DEFAULT_TENANT_KEY, statistics: str = "scope"
    ) -> None:
        super().__init__(store, tenant_scope(tenant, tenant_key), show_unscoped=True, statistics=statistics)
        self.tenant = tenant
        self.tenant_key = tenant_key
        self._prefix = scope_prefix(self.scope) + SCOPE_SEPARATOR
        self._legacy_prefix = f"{tenant}{SCOPE_SEPARATOR}"  # "<tenant>::<id>", before fastrag.scoping
        self._format_checked = False

    def _is_legacy(self, stored_id: str) -> bool:
        return stored_id.startswith(self._legacy_prefix) and not stored_id.startswith(self._prefix)

    async def _ready(self) -> None:
        """Refuse to work over this tenant's documents while they carry the ids of an older version."""
        if self._format_checked or self.isolated or not isinstance(self.store, SupportsGet):
            # (a tenant collection of an isolating store was written by this version: no older ids there)
            return
        sample = await self.store.get(filter=self.scope.filter, limit=1)
        if sample and self._is_legacy(sample[0].id):
            raise ConfigurationError(
                f"{self.store!r} holds documents of {self.tenant_key}={self.tenant!r} under the stored-id format of "
                f"older fastrag versions ({sample[0].id!r}, '<tenant>::<id>'), which let tenants collide; this view "
                "stores ids as fastrag.scoping encodes them and would not find those documents. Rewrite them "
                "once with: await TenantScopedStore(store, tenant=..., tenant_key=...).migrate_legacy_ids("
                "embedder=<the embedder that indexed them>)"
            )
        self._format_checked = True

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
        if not isinstance(self.store, SupportsGet):
            raise ConfigurationError(f"{self.store!r} has no get(): its documents cannot be read back to migrate")
        legacy = [doc for doc in await self.store.get(filter=self.scope.filter) if self._is_legacy(doc.id)]
        for start in range(0, len(legacy), _MIGRATION_BATCH):
            batch = legacy[start : start + _MIGRATION_BATCH]
            renamed = [
                Document(id=scoped_id(self.scope, doc.id[len(self._legacy_prefix) :]), content=doc.content,
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

    def __repr__(self) -> str:
        return f"TenantScopedStore({self.store!r}, tenant={self.tenant!r}, tenant_key={self.tenant_key!r})"


def _embedding_text(doc: Document) -> str:
    """What the ingestion pipeline embeds for a chunk: its title and content."""
    title = doc.metadata.get(TITLE) or ""
    return f"{title}\n{doc.content}" if title else doc.content
