"""The embedded default store (SQLite): :class:`SQLiteVectorStore` and the pieces it is built from.

- :mod:`.store`: the store itself (documents, writes, snapshots, the read pool, k-NN and BM25 search);
"""

from fastrag.vector_store.sqlite.store import SQLiteVectorStore

__all__ = ["SQLiteVectorStore"]
