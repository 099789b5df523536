"""The embedded default store (SQLite): :class:`SQLiteVectorStore` and the pieces it is built from.

- ``store.py``: the store itself (documents, writes, snapshots, the read pool, k-NN and BM25 search);
  its module docstring describes the design;
- ``lexical.py``: the BM25 index, immutable segments of packed per-term postings, and BM25 scoring;
- ``snapshot.py``: the in-memory view of one committed state (vectors, lengths, liveness), extended
  incrementally by what each commit wrote;
- ``columns.py``: metadata columns and the vectorised evaluation of the filter AST;
- ``maintenance.py``: what the writer does after a commit (segment merges, compaction) and the store's
  status report (:class:`SQLiteStoreStatus`);
- ``access.py``: opening the file read-write, or read-only when this process cannot write it.
"""

from fastrag.vector_store.sqlite.maintenance import SQLiteStoreStatus
from fastrag.vector_store.sqlite.store import SQLiteVectorStore

__all__ = ["SQLiteStoreStatus", "SQLiteVectorStore"]
