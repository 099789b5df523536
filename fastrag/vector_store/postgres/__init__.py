"""PostgreSQL + pgvector: :class:`PgVectorStore` (dense k-NN, BM25 computed in SQL, the fastrag filter language).

- ``store.py``: the store (connection pool, writes, k-NN, BM25, error mapping); its docstring gives the design;
- ``filters.py``: the pure translation of the filter AST into a parametrised SQL condition (:func:`translate_filter`);
- ``schema.py``: the tables and their DDL;
- ``queries.py``: the BM25 and k-NN statements;
- ``connection.py``: store URLs, redacted names, and psycopg's exceptions mapped to fastrag's.

Install with ``pip install "fastrag-retrieval[postgres]"``; importing this package loads no driver (psycopg
loads when a store is built). The docs page is ``docs/backends/postgres.md``.
"""

from fastrag.vector_store.postgres.filters import PgWhere, translate_filter
from fastrag.vector_store.postgres.store import DEFAULT_TABLE, PgVectorStore

__all__ = ["DEFAULT_TABLE", "PgVectorStore", "PgWhere", "translate_filter"]
