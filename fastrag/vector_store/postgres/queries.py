"""The two read statements of :class:`~fastrag.vector_store.postgres.PgVectorStore`: BM25 and k-NN.

Each is a ``psycopg.sql.Composed`` over one store's tables (:class:`~fastrag.vector_store.postgres.schema.Names`)
and a ``WHERE`` condition (:func:`~fastrag.vector_store.postgres.filters.translate_filter`'s SQL); values are
parameters. The benchmarks send the same statements through a bare psycopg connection.
"""

from __future__ import annotations

from typing import Any

from fastrag.vector_store.postgres.schema import Names

__all__ = ["bm25_query", "knn_query"]


def bm25_query(names: Names, where: Any, *, k1: float, b: float, scope: Any = None) -> Any:
    """BM25 (Lucene's formula: ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))``, term part
    ``tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avgdl))``, each term's part times its count in the query;
    :mod:`fastrag.scoring`) of every document holding a query term, filtered by ``where``, best first, ties
    by id (code point order).

    ``N``, ``df`` and ``avgdl`` are the table's (the stats row and every posting), or, with ``scope`` (a
    ``WHERE`` condition on the documents table), those of the documents matching it: only their postings
    are read, so the scores are those of a table holding only them (a tenant's own statistics).

    Parameters, in order: ``scope``'s parameters (with ``scope``), the query terms (``text[]``) with repeats,
    a term once per occurrence (:func:`fastrag.scoring.repeated_terms`; a list of distinct terms scores each
    once), ``where``'s parameters, ``k``. Rows: ``(id, content, metadata_text, score)``.
    """
    from psycopg import sql

    # Materialised steps keep the plan to what BM25 needs whatever the planner's statistics say: the
    # query terms' postings (index-only range scans of the primary key, which covers tf and doc_len),
    # their document frequencies, the scores per document; then the documents they name, filtered and cut.
    query = "q AS MATERIALIZED (SELECT term, count(*)::float8 AS qtf FROM unnest(%s::text[]) AS u(term) GROUP BY term),"
    if scope is None:
        statistics = sql.SQL(
            "WITH " + query +
            " p AS MATERIALIZED (SELECT term, doc_key, tf, doc_len FROM {terms}"
            "                    WHERE term = ANY(ARRAY(SELECT term FROM q))),"
            " st AS MATERIALIZED (SELECT n_docs::float8 AS n,"
            "                     greatest(total_len, 1)::float8 / greatest(n_docs, 1) AS avgdl FROM {stats}),"
        ).format(terms=names.terms, stats=names.stats)
    else:  # the scope's documents, then their postings of the query terms, then their N and mean length
        statistics = sql.SQL(
            "WITH sd AS MATERIALIZED (SELECT doc_key, doc_len FROM {table} WHERE {scope}), " + query +
            " p AS MATERIALIZED (SELECT t.term, t.doc_key, t.tf, t.doc_len FROM {terms} t"
            "                    JOIN sd ON sd.doc_key = t.doc_key WHERE t.term = ANY(ARRAY(SELECT term FROM q))),"
            " st AS MATERIALIZED (SELECT count(*)::float8 AS n,"
            "                     greatest(coalesce(sum(doc_len), 0), 1)::float8 / greatest(count(*), 1) AS avgdl"
            "                     FROM sd),"
        ).format(table=names.table, scope=scope, terms=names.terms)
    return statistics + sql.SQL(
        " w AS MATERIALIZED (SELECT p.term, max(q.qtf) * ln(1 + ((SELECT n FROM st) - count(*) + 0.5) / (count(*) + 0.5))"
        "                    AS idf FROM p JOIN q ON q.term = p.term GROUP BY p.term),"
        " s AS (SELECT p.doc_key, sum(w.idf * p.tf * {k1p1}"
        "              / (p.tf + {k1} * (1 - {b} + {b} * p.doc_len / (SELECT avgdl FROM st)))) AS score"
        "       FROM p JOIN w ON w.term = p.term GROUP BY p.doc_key)"
        " SELECT d.id, d.content, d.metadata_text, s.score FROM s JOIN {table} d ON d.doc_key = s.doc_key"
        " WHERE {where} ORDER BY s.score DESC, d.id COLLATE \"C\" LIMIT %s"
    ).format(table=names.table, where=where, k1p1=sql.Literal(k1 + 1), k1=sql.Literal(k1), b=sql.Literal(b))


def knn_query(names: Names, where: Any) -> Any:
    """The documents with a vector matching ``where``, by pgvector's inner product with the (unit) query
    vector, nearest first (the HNSW index's order: ``ORDER BY embedding <#> q``).

    Parameters, in order: the query vector, ``where``'s parameters, the query vector again, the limit. Rows:
    ``(id, content, metadata_text, score)`` with ``score`` the inner product (cosine on unit vectors).
    """
    from psycopg import sql

    return sql.SQL(
        "SELECT id, content, metadata_text, -(embedding <#> %s) AS score FROM {table}"
        " WHERE embedding IS NOT NULL AND {where} ORDER BY embedding <#> %s LIMIT %s"
    ).format(table=names.table, where=where)
