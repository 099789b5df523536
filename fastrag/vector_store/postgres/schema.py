"""The tables a :class:`~fastrag.vector_store.postgres.PgVectorStore` keeps in PostgreSQL, and their DDL.

For a store named ``T`` (the ``table`` argument)::

    T          one row per document
      doc_key    bigint identity primary key     the postings' reference (8 bytes, not the id text)
      id         text unique                     the document id
      content    text                            the text
      metadata   jsonb                           filters run on it (GIN index, jsonb_path_ops)
      metadata_text text                         the metadata exactly as written (JSON), for reading back:
                                                 jsonb reorders keys and rewrites numbers (1e+22 -> an int)
      dates      jsonb                           {key: epoch µs} for metadata values that are date strings
      embedding  vector(dim) or NULL             L2-normalised; HNSW index, vector_ip_ops
      doc_len    integer                         the document's BM25 length (analysed terms)
    T_terms    BM25 postings: (term, doc_key, tf, doc_len), primary key (term, doc_key) covering tf and
               doc_len, so a query term's postings are one index-only range scan; a write deletes a
               document's postings with it (no foreign key: its per-row check would double the write time)
    T_stats    one row: n_docs, total_len (BM25's N and the sum of lengths), kept by every write
    T_meta     settings: schema, dimension, embedding_model, analyzer_language

Every name is quoted with :class:`psycopg.sql.Identifier`; the table name is checked against
:data:`TABLE_NAME` first, so the derived names stay within PostgreSQL's 63-byte identifier limit.
"""

from __future__ import annotations

import re
from typing import Any

from fastrag.errors import InvalidParameterError

__all__ = ["SCHEMA_VERSION", "TABLE_NAME", "Names", "check_table_name", "create_statements", "vector_index_statements"]

SCHEMA_VERSION = 1
"""Written to ``T_meta`` when the tables are created; a table of another version is refused."""
TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,47}")
"""Valid table names: a letter or ``_``, then letters, digits and ``_``; at most 48 characters."""


def check_table_name(table: Any) -> str:
    """Return ``table`` if it is a valid store name (:data:`TABLE_NAME`).

    Raises:
        InvalidParameterError: otherwise.
    """
    if not isinstance(table, str) or not TABLE_NAME.fullmatch(table):
        raise InvalidParameterError(
            f"table must be 1-48 ASCII letters, digits or _, not starting with a digit, got {table!r}"
        )
    return table


class Names:
    """The quoted identifiers of one store's tables and indexes (``psycopg.sql`` objects)."""

    def __init__(self, table: str) -> None:
        from psycopg import sql

        check_table_name(table)
        self.table = sql.Identifier(table)
        self.terms = sql.Identifier(f"{table}_terms")
        self.stats = sql.Identifier(f"{table}_stats")
        self.meta = sql.Identifier(f"{table}_meta")
        self.metadata_index = sql.Identifier(f"{table}_metadata_gin")
        self.vector_index = sql.Identifier(f"{table}_embedding_hnsw")
        self.terms_doc_index = sql.Identifier(f"{table}_terms_doc")
        self.raw = table

    def fmt(self, text: str) -> Any:
        """``text`` with ``{table}``, ``{terms}``, ``{stats}``, ``{meta}`` filled in, as a ``psycopg.sql.Composed``."""
        from psycopg import sql

        return sql.SQL(text).format(table=self.table, terms=self.terms, stats=self.stats, meta=self.meta)


def create_statements(names: Names, dimension: int | None) -> list[Any]:
    """The DDL that creates a store's tables (run in one transaction; ``IF NOT EXISTS`` throughout)."""
    from psycopg import sql

    vector_type = sql.SQL("vector") if dimension is None else sql.SQL("vector({})").format(sql.Literal(dimension))
    return [
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {table} ("
            " doc_key bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
            " id text NOT NULL UNIQUE,"
            " content text NOT NULL,"
            " metadata jsonb NOT NULL,"
            " metadata_text text NOT NULL,"
            " dates jsonb NOT NULL,"
            " embedding {vector} NULL,"
            " doc_len integer NOT NULL)"
        ).format(table=names.table, vector=vector_type),
        sql.SQL("CREATE INDEX IF NOT EXISTS {index} ON {table} USING gin (metadata jsonb_path_ops)").format(
            index=names.metadata_index, table=names.table
        ),
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {terms} ("
            " term text NOT NULL,"
            " doc_key bigint NOT NULL,"
            " tf integer NOT NULL,"
            " doc_len integer NOT NULL,"
            " PRIMARY KEY (term, doc_key) INCLUDE (tf, doc_len))"
        ).format(terms=names.terms),
        sql.SQL("CREATE INDEX IF NOT EXISTS {index} ON {terms} (doc_key)").format(
            index=names.terms_doc_index, terms=names.terms
        ),
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {stats} ("
            " one boolean PRIMARY KEY DEFAULT true CHECK (one),"
            " n_docs bigint NOT NULL,"
            " total_len bigint NOT NULL)"
        ).format(stats=names.stats),
        sql.SQL("INSERT INTO {stats} (n_docs, total_len) VALUES (0, 0) ON CONFLICT DO NOTHING").format(
            stats=names.stats
        ),
        sql.SQL("CREATE TABLE IF NOT EXISTS {meta} (key text PRIMARY KEY, value text NOT NULL)").format(
            meta=names.meta
        ),
    ]


def vector_index_statements(names: Names, dimension: int, *, m: int, ef_construction: int) -> list[Any]:
    """Fix the ``embedding`` column's width and build its HNSW index (inner product over unit vectors)."""
    from psycopg import sql

    return [
        sql.SQL("ALTER TABLE {table} ALTER COLUMN embedding TYPE vector({dim})").format(
            table=names.table, dim=sql.Literal(dimension)
        ),
        sql.SQL(
            "CREATE INDEX IF NOT EXISTS {index} ON {table} USING hnsw (embedding vector_ip_ops)"
            " WITH (m = {m}, ef_construction = {ef})"
        ).format(index=names.vector_index, table=names.table, m=sql.Literal(m), ef=sql.Literal(ef_construction)),
    ]
