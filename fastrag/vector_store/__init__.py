"""The stores: one subpackage (or module) per backend, every store importable from here.

::

    from fastrag.vector_store import (ChromaVectorStore, MilvusVectorStore, OpenSearchVectorStore,
                                      PgVectorStore, QdrantVectorStore, SQLiteVectorStore)

Each name loads its backend on first use (PEP 562), so this import needs no extra installed, and using one
store never imports another's SDK; a store whose SDK is missing says which extra to install when it is
built. :class:`~fastrag.vector_store.tenant.TenantScopedStore` gives one tenant a confined view of any of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastrag._lazy import lazy_exports

if TYPE_CHECKING:  # pragma: no cover
    from fastrag.vector_store.chroma import ChromaVectorStore
    from fastrag.vector_store.milvus import MilvusVectorStore
    from fastrag.vector_store.opensearch import OpenSearchVectorStore
    from fastrag.vector_store.postgres import PgVectorStore
    from fastrag.vector_store.qdrant import QdrantVectorStore
    from fastrag.vector_store.sqlite import SQLiteVectorStore
    from fastrag.vector_store.tenant import TenantScopedStore

_EXPORTS: dict[str, str] = {
    "ChromaVectorStore": "fastrag.vector_store.chroma",
    "MilvusVectorStore": "fastrag.vector_store.milvus",  # a module or a subpackage: either layout
    "OpenSearchVectorStore": "fastrag.vector_store.opensearch",
    "PgVectorStore": "fastrag.vector_store.postgres",
    "QdrantVectorStore": "fastrag.vector_store.qdrant",
    "SQLiteVectorStore": "fastrag.vector_store.sqlite",
    "TenantScopedStore": "fastrag.vector_store.tenant",
}

__all__ = [
    "ChromaVectorStore",
    "MilvusVectorStore",
    "OpenSearchVectorStore",
    "PgVectorStore",
    "QdrantVectorStore",
    "SQLiteVectorStore",
    "TenantScopedStore",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
