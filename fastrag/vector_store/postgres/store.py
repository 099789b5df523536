"""``PgVectorStore``: documents, pgvector embeddings and a BM25 index in PostgreSQL tables.

It implements :class:`~fastrag.protocols.VectorStore`, :class:`~fastrag.protocols.LexicalStore` and
:class:`~fastrag.protocols.SupportsGet` over psycopg 3 (async) with a connection pool (psycopg-pool),
and pgvector. Install with ``pip install "fastrag-retrieval[postgres]"``; the drivers are imported only
when a store is built. The tables are described in :mod:`fastrag.vector_store.postgres.schema`, the
filter translation in :mod:`fastrag.vector_store.postgres.filters`, the docs page is
``docs/backends/postgres.md``.

Design:

- **k-NN**: vectors are L2-normalised on write and on query, and ranked by pgvector's inner product
  (``<#>``) under an HNSW index (``vector_ip_ops``): on unit vectors that is cosine similarity. Not
  ``vector_cosine_ops``: pgvector leaves zero vectors out of a cosine HNSW index (an index scan would never
  return them, an exact scan would score them NaN), while the inner product scores them 0 everywhere.
  Filtered searches use pgvector 0.8's iterative index scan (``hnsw.iterative_scan = strict_order``);
  when the index still returns fewer than ``k`` rows the query is run again without the index (exact),
  so a filtered top-k is never short while enough documents match.
- **BM25** is computed in SQL from stored statistics, with Lucene's formula and parameters (k1 = 1.2,
  b = 0.75; ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))``; Robertson & Zaragoza 2009): the postings
  table holds each document's analysed terms and frequencies (fastrag's
  :class:`~fastrag.analysis.Analyzer`, the same analysis as the SQLite store, per document language), the
  stats row holds ``N`` and the sum of lengths, both kept by every write in its transaction. A scoped
  search (:meth:`PgVectorStore.search_text_scoped`, :class:`~fastrag.protocols.SupportsScopedStatistics`)
  counts ``N``, ``df`` and the mean length over the scope's documents instead, so a tenant's scores do not
  depend on other tenants' documents.
  PostgreSQL's own ``tsvector``/``ts_rank_cd`` was measured and rejected: it is not BM25 (no IDF) and
  scores SciFact lower (``benchmarks/postgres_fulltext.py``, ``docs/backends/postgres.md``).
- **Writes** are one transaction each: an interrupted upsert or delete leaves the previous state.
- **Errors**: an unreachable server, a dropped connection, a pool or statement timeout raise
  :class:`~fastrag.errors.BackendTemporarilyUnavailableError`; serialization failures and deadlocks
  :class:`~fastrag.errors.TransientBackendError` (both retried by :class:`~fastrag.retry.RetryingStore`);
  refused credentials :class:`~fastrag.errors.AuthenticationError`; anything else
  :class:`~fastrag.errors.BackendError`. Each chains psycopg's exception and names the store.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import anyio
import numpy as np

from fastrag.analysis import Analyzer, primary_language
from fastrag.errors import (
    BackendError,
    BackendUnavailableError,
    ConfigurationError,
    DimensionMismatchError,
    FastragError,
    InvalidParameterError,
)
from fastrag.filters import FilterLike, combine_filters, is_native_filter
from fastrag.lifecycle import AsyncResource
from fastrag.models import Document
from fastrag.scoring import query_term_counts, repeated_terms
from fastrag.vector_store._metadata import metadata_json
from fastrag.vector_store._validation import (
    check_embeddings,
    check_k,
    check_query_vector,
    check_unique_ids,
    distinct_ids,
)
from fastrag.vector_store.postgres.connection import backend_error, parse_url, redacted
from fastrag.vector_store.postgres.filters import PgWhere, translate_filter
from fastrag.vector_store.postgres.queries import bm25_query, knn_query
from fastrag.vector_store.postgres.rows import check_metadata as _check_metadata
from fastrag.vector_store.postgres.rows import check_text as _check_text
from fastrag.vector_store.postgres.rows import check_unicode as _check_unicode
from fastrag.vector_store.postgres.rows import date_shadow as _date_shadow
from fastrag.vector_store.postgres.rows import encode_text as _encode_text
from fastrag.vector_store.postgres.rows import row_document as _row_document
from fastrag.vector_store.postgres.schema import (
    SCHEMA_VERSION,
    Names,
    check_table_name,
    create_statements,
    vector_index_statements,
)

__all__ = ["DEFAULT_TABLE", "PgVectorStore"]

INSTALL_HINT = 'pip install "fastrag-retrieval[postgres]"'
DEFAULT_TABLE = "fastrag"
"""The table a store uses when none is named."""
BM25_K1 = 1.2
BM25_B = 0.75
T = TypeVar("T")


def _drivers() -> tuple[Any, Any]:
    """``(psycopg, psycopg_pool)``, or :class:`ConfigurationError` with the install command."""
    try:
        import pgvector.psycopg  # noqa: F401  (imported to check the extra is complete)
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise ConfigurationError(f"the PostgreSQL store needs psycopg, psycopg-pool and pgvector: {INSTALL_HINT}") from exc
    return psycopg, psycopg_pool


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)


class PgVectorStore(AsyncResource):
    """Documents with dense vectors and a BM25 index in PostgreSQL (pgvector).

    Give exactly one of ``conninfo`` and ``pool``.

    Args:
        conninfo: a libpq connection string or URL (``postgresql://user@host:5432/db``); the store opens a
            pool of connections to it (at most ``pool_size``) and closes it in ``aclose()``.
        pool: a ``psycopg_pool.AsyncConnectionPool`` to use instead; it is never opened or closed by the store.
        table: the store's name: its tables are ``table``, ``table_terms``, ``table_stats`` and ``table_meta``.
            1-48 ASCII letters, digits or ``_``.
        dimension: the vector width. With it the vector index is built when the tables are created; without
            it, on the first write with embeddings. The tables remember it; a different value raises.
        embedding_model: the embedder's name; recorded on first use, and a different name raises, so
            vectors of two models are never mixed.
        analyzer: the BM25 text analysis (default: English). The tables remember its language. A document
            with ``metadata["language"]`` is analysed in that language.
        create: create the tables (and the ``vector`` extension) when missing; with ``False`` a missing
            table raises :class:`~fastrag.errors.BackendUnavailableError`.
        timeout: seconds: to connect, to wait for a pooled connection, and (for a pool the store opens) the
            server's ``statement_timeout`` for every statement.
        pool_size: the most connections the store's own pool opens (an int > 0).
        ef_search: HNSW's candidate list per search (``hnsw.ef_search``; at least ``k`` is used); larger is
            slower and closer to exact.
        hnsw_m: HNSW's ``m`` (links per node) when the index is built.
        hnsw_ef_construction: HNSW's ``ef_construction`` when the index is built.

    Raises:
        ConfigurationError: not exactly one of ``conninfo`` and ``pool``; the drivers are missing; or (when
            the store opens) ``dimension``, ``embedding_model`` or the analyzer language differ from the tables'.
        InvalidParameterError: a bad ``table``, ``dimension``, ``timeout``, ``pool_size`` or HNSW setting.
        BackendUnavailableError: (when the store opens) the server cannot be reached, or the table does not
            exist and ``create`` is false.
        AuthenticationError: (when the store opens) the server refused the credentials.

    Example::

        async with PgVectorStore("postgresql://postgres@localhost:5432/postgres", table="docs") as store:
            await store.upsert(docs, embeddings=vectors)
            hits = await store.search_text("solar panels", k=5, filter=field("lang") == "en")
    """

    accepts_language = True  # search_text(..., language=): fastrag.protocols.SupportsQueryLanguage

    idempotent_upsert = True
    """An upsert replaces documents by id in one transaction, so :class:`~fastrag.retry.RetryingStore` may
    send it again after a transient failure."""

    def __init__(
        self,
        conninfo: str | None = None,
        *,
        pool: Any | None = None,
        table: str = DEFAULT_TABLE,
        dimension: int | None = None,
        embedding_model: str | None = None,
        analyzer: Analyzer | None = None,
        create: bool = True,
        timeout: float = 10.0,
        pool_size: int = 4,
        ef_search: int = 40,
        hnsw_m: int = 16,
        hnsw_ef_construction: int = 64,
    ) -> None:
        if (conninfo is None) == (pool is None):
            raise ConfigurationError("PgVectorStore needs exactly one of conninfo= and pool=")
        if conninfo is not None and (not isinstance(conninfo, str) or not conninfo.strip()):
            raise ConfigurationError(f"conninfo must be a non-empty string, got {conninfo!r}")
        check_table_name(table)
        if dimension is not None and (isinstance(dimension, bool) or not isinstance(dimension, int) or dimension <= 0):
            raise InvalidParameterError(f"dimension must be a positive int, got {dimension!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0 or not math.isfinite(timeout):
            raise InvalidParameterError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        for name, value in (("pool_size", pool_size), ("ef_search", ef_search), ("hnsw_m", hnsw_m),
                            ("hnsw_ef_construction", hnsw_ef_construction)):
            check_k(value, name)
        if not isinstance(create, bool):
            raise InvalidParameterError(f"create must be a bool, got {create!r}")
        self._psycopg, self._pool_module = _drivers()
        self.table = table
        self.dimension: int | None = dimension
        self.embedding_model = embedding_model
        self.analyzer = analyzer or Analyzer()
        self.timeout = float(timeout)
        self.ef_search = ef_search
        self._hnsw = (hnsw_m, hnsw_ef_construction)
        self._create = create
        self._names = Names(table)
        self._conninfo = conninfo
        self._owns_pool = pool is None
        self._pool = pool
        self._pool_size = pool_size
        self._vector_info: Any = None
        self._open_lock = anyio.Lock()
        self._ready_done = False
        where = redacted(conninfo) if conninfo is not None else type(pool).__name__
        self.name = f"postgres {where} table {table!r}"

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> PgVectorStore:
        """Build a store from a URL; ``kwargs`` are constructor arguments and win over the URL's options.

        Form: ``postgresql://[USER[:PASSWORD]@]HOST[:PORT]/DATABASE?table=NAME`` (``postgres://`` too).
        fastrag's options, all optional: ``table`` (default ``fastrag``), ``dimension=N``,
        ``timeout=SECONDS``, ``create=true|false``, ``pool_size=N``, ``ef_search=N``. Every other query
        parameter (``sslmode``, ``application_name``, ...) is passed to libpq unchanged.

        Raises:
            ConfigurationError: the URL is not a PostgreSQL URL or an option is invalid.
        """
        conninfo, args = parse_url(url)
        args.update(kwargs)
        try:
            return cls(conninfo, **args)
        except InvalidParameterError as exc:
            raise ConfigurationError(f"{redacted(url)}: {exc}") from exc

    def __repr__(self) -> str:
        return f"PgVectorStore({self.name!r})"

    # ------------------------------------------------------------------ lifecycle

    async def _aopen(self) -> None:
        """Open the pool and create or check the tables (entering ``async with``; a failure closes the store)."""
        await self._ready()

    async def _aclose(self) -> None:
        """Close the pool the store opened (an injected pool stays open)."""
        if self._owns_pool and self._pool is not None:
            pool, self._pool = self._pool, None
            try:
                await pool.close()
            except Exception as exc:  # noqa: BLE001 - closing must not mask the caller's own error
                raise BackendError(f"closing the connection pool failed: {exc}", store=self.name) from exc

    def _map_error(self, what: str, exc: BaseException) -> FastragError:
        return backend_error(what, exc, store=self.name, timeout=self.timeout)

    async def _ready(self) -> None:
        """Open the pool and create or check the tables, once."""
        if self.closed:
            raise BackendUnavailableError("store is closed", store=self.name)
        if self._ready_done:
            return
        async with self._open_lock:
            if self._ready_done:
                return
            psycopg = self._psycopg
            try:
                if self._owns_pool and self._pool is None:
                    # one direct connection first: it reports why a server cannot be reached (the pool
                    # would only time out), and creates or checks the tables
                    async with await psycopg.AsyncConnection.connect(
                        self._conninfo, connect_timeout=max(1, math.ceil(self.timeout)), autocommit=True
                    ) as conn:
                        await self._prepare(conn)
                    # the server options of the URL (a search_path, say) are kept; the timeout is added to them
                    given = psycopg.conninfo.conninfo_to_dict(self._conninfo).get("options") or ""
                    options = f"{given} -c statement_timeout={max(1, int(self.timeout * 1000))}".strip()
                    self._pool = self._pool_module.AsyncConnectionPool(
                        self._conninfo, min_size=1, max_size=self._pool_size, timeout=self.timeout, open=False,
                        kwargs={"connect_timeout": max(1, math.ceil(self.timeout)), "autocommit": True,
                                "options": options},
                        configure=self._configure,
                    )
                    await self._pool.open(wait=False)
                else:
                    async with self._pool.connection(timeout=self.timeout) as conn:
                        await self._prepare(conn)
            except FastragError:
                raise
            except Exception as exc:
                raise self._map_error("opening the store", exc) from exc
            self._ready_done = True

    async def _prepare(self, conn: Any) -> None:
        """Create the tables when missing (and allowed), then read and check their settings."""
        from pgvector.psycopg.vector import register_vector_info

        names = self._names
        exists = (await (await conn.execute("SELECT to_regclass(%s) IS NOT NULL", [names.fmt("{meta}").as_string(conn)])
                         ).fetchone())[0]
        if not exists:
            if not self._create:
                raise BackendUnavailableError("the table does not exist (create=False)", store=self.name)
            await self._create_tables(conn)
        info = await self._psycopg.types.TypeInfo.fetch(conn, "vector")
        if info is None:
            raise BackendUnavailableError("the pgvector extension is not installed in this database", store=self.name)
        register_vector_info(conn, info)
        self._vector_info = info
        async with conn.transaction():
            rows = await (await conn.execute(names.fmt("SELECT key, value FROM {meta}"))).fetchall()
            meta = dict(rows)
            if meta.get("schema") != str(SCHEMA_VERSION):
                raise ConfigurationError(
                    f"{self.name}: not a fastrag table (schema {SCHEMA_VERSION}); use another table name"
                )
            stored_dim = int(meta["dimension"]) if "dimension" in meta else None
            self._check_setting("dimension", stored_dim, self.dimension)
            self._check_setting("analyzer_language", meta.get("analyzer_language"), self.analyzer.language or "none")
            self._check_setting("embedding_model", meta.get("embedding_model"), self.embedding_model)
            await self._check_analysis(conn, meta.get("analysis", "fastrag-analysis/1"))
            if stored_dim is None and self.dimension is not None:
                await self._fix_dimension(conn, self.dimension)
            self.dimension = stored_dim if stored_dim is not None else self.dimension
            if "embedding_model" not in meta and self.embedding_model is not None:
                await self._set_meta(conn, "embedding_model", self.embedding_model)
            self.embedding_model = meta.get("embedding_model", self.embedding_model)

    async def _check_analysis(self, conn: Any, stored: str) -> None:
        """Refuse a store whose BM25 terms were made by another text analysis (``Analyzer.signature``): its
        postings would not match this fastrag's query terms. An empty store is stamped with the current one."""
        signature = self.analyzer.signature
        if stored == signature:
            return
        row = await (await conn.execute(self._names.fmt("SELECT EXISTS (SELECT 1 FROM {table})"))).fetchone()
        if row[0]:
            raise ConfigurationError(
                f"{self.name}: the table's BM25 terms were made by {stored}, this fastrag analyses text by "
                f"{signature}, so keyword search would miss words; index the documents again into a new table "
                "(`fastrag index PATHS --store postgresql://...?table=NEW`, or upsert them from Python)"
            )
        await conn.execute(
            self._names.fmt("INSERT INTO {meta} (key, value) VALUES ('analysis', %s)"
                            " ON CONFLICT (key) DO UPDATE SET value = excluded.value"),
            [signature],
        )

    async def _create_tables(self, conn: Any) -> None:
        names = self._names
        try:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except self._psycopg.Error as exc:
            if not await self._has_vector(conn):
                raise BackendUnavailableError(
                    f"the pgvector extension is missing and cannot be created here ({exc}); "
                    "run CREATE EXTENSION vector as a superuser", store=self.name
                ) from exc
        async with conn.transaction():
            # concurrent creators of the same table wait here for the first
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"fastrag:{names.raw}"])
            for statement in create_statements(names, None):
                await conn.execute(statement)
            await conn.execute(
                names.fmt("INSERT INTO {meta} (key, value) VALUES ('schema', %s), ('analyzer_language', %s),"
                          " ('analysis', %s) ON CONFLICT DO NOTHING"),
                [str(SCHEMA_VERSION), self.analyzer.language or "none", self.analyzer.signature],
            )

    @staticmethod
    async def _has_vector(conn: Any) -> bool:
        row = await (await conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'")).fetchone()
        return row is not None

    def _check_setting(self, key: str, stored: Any, wanted: Any) -> None:
        if wanted is not None and stored is not None and stored != wanted:
            raise ConfigurationError(
                f"{self.name}: the table was built with {key}={stored!r}, not {wanted!r}; "
                "use another table or the same settings"
            )

    async def _set_meta(self, conn: Any, key: str, value: str) -> None:
        await conn.execute(
            self._names.fmt("INSERT INTO {meta} (key, value) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING"),
            [key, value],
        )

    async def _fix_dimension(self, conn: Any, dimension: int) -> None:
        """Inside a transaction: set the table's dimension (if still unset) and build the HNSW index."""
        row = await (await conn.execute(
            self._names.fmt("SELECT value FROM {meta} WHERE key = 'dimension' FOR UPDATE")
        )).fetchone()
        if row is None:
            await conn.execute(self._names.fmt("LOCK TABLE {meta} IN EXCLUSIVE MODE"))
            row = await (await conn.execute(self._names.fmt("SELECT value FROM {meta} WHERE key = 'dimension'"))).fetchone()
        if row is not None:
            if int(row[0]) != dimension:
                raise DimensionMismatchError(
                    f"{self.name}: embeddings have dimension {dimension}, the store holds {row[0]}"
                )
            self.dimension = dimension
            return
        m, ef = self._hnsw
        for statement in vector_index_statements(self._names, dimension, m=m, ef_construction=ef):
            await conn.execute(statement)
        await self._set_meta(conn, "dimension", str(dimension))
        self.dimension = dimension

    async def _run(self, what: str, fn: Callable[[Any], Awaitable[T]], *, transaction: bool = True) -> T:
        """``await fn(conn)`` on a pooled connection; psycopg errors become fastrag's.

        ``transaction``: run ``fn`` in one transaction (every write, and reads that set ``LOCAL`` settings).
        A read of one statement runs without one on the store's own pool (autocommit: one round trip); on an
        injected pool every call gets a transaction, whatever the pool's autocommit setting.
        """
        await self._ready()
        pool = self._pool
        if self.closed or pool is None:
            raise BackendUnavailableError("store is closed", store=self.name)
        from pgvector.psycopg.vector import register_vector_info

        try:
            async with pool.connection(timeout=self.timeout) as conn:
                if not self._owns_pool:
                    register_vector_info(conn, self._vector_info)
                if transaction or not self._owns_pool:
                    async with conn.transaction():
                        return await fn(conn)
                return await fn(conn)
        except FastragError:
            raise
        except Exception as exc:
            raise self._map_error(what, exc) from exc

    async def _configure(self, conn: Any) -> None:
        """Each new connection of the store's own pool: pgvector's types, and the k-NN session settings."""
        from pgvector.psycopg.vector import register_vector_info

        register_vector_info(conn, self._vector_info)
        await conn.execute(
            "SELECT set_config('hnsw.iterative_scan', 'strict_order', false), set_config('hnsw.ef_search', %s, false)",
            [str(self.ef_search)],
        )

    # ------------------------------------------------------------------ filters

    @staticmethod
    def _stored_ids(ids: Sequence[str] | None) -> list[str] | None:
        """``ids`` checked (strings, valid Unicode, no repeats) and encoded as the table stores them."""
        wanted = distinct_ids(ids)
        if wanted is None:
            return None
        for doc_id in wanted:
            _check_unicode(doc_id, "a document id")
        return [_encode_text(doc_id) for doc_id in wanted]

    def _where(self, filter: FilterLike | PgWhere | None, ids: Sequence[str] | None = None) -> tuple[Any, list[Any]]:  # noqa: A002
        """The ``WHERE`` condition (a ``psycopg.sql`` object) and its parameters; translated before any call."""
        from psycopg import sql

        parts: list[str] = []
        params: list[Any] = []
        if ids is not None:
            parts.append("id = ANY(%s)")
            params.append(ids)
        if filter is not None:
            combined = combine_filters(filter)
            if isinstance(combined, PgWhere):
                parts.append(f"({combined.sql})")
                params.extend(combined.params)
            elif combined is not None and not is_native_filter(combined):
                text, values = translate_filter(combined)
                parts.append(text)
                params.extend(values)
            elif combined is not None:
                raise InvalidParameterError(
                    f"{self.name} takes fastrag filters or PgWhere, not {type(combined).__name__}"
                )
        return sql.SQL(" AND ".join(parts) if parts else "true"), params

    # ------------------------------------------------------------------ writes

    async def upsert(self, documents: Sequence[Document], *, embeddings: np.ndarray | None = None) -> None:
        """Insert or replace ``documents`` by id, in one transaction.

        Args:
            documents: the documents; their ``content``, ``metadata["title"]`` and section headings
                (``metadata["headings"]``) are indexed for BM25. Metadata must be JSON.
            embeddings: ``(len(documents), dim)`` float (converted to float32, L2-normalised), finite.
                ``None`` stores the documents without vectors: they are found by BM25, not by k-NN.

        Raises:
            DimensionMismatchError: the width differs from the store's, or the row count from ``len(documents)``.
            InvalidParameterError: a vector holds NaN or infinity, an id repeats, metadata is not JSON, a
                metadata key or string holds U+0000 (``jsonb`` cannot), or any text holds a lone surrogate.
                (U+0000 in an id or content is stored escaped and read back as written.)
            BackendError: PostgreSQL failed; nothing was written.
        """
        docs = list(documents)
        if not docs:
            return
        for doc in docs:
            if not isinstance(doc, Document):
                raise InvalidParameterError(f"upsert takes Document objects, got {type(doc).__name__}")
        check_unique_ids(docs)
        matrix = (
            None if embeddings is None
            else _unit_rows(check_embeddings(embeddings, len(docs), dimension=self.dimension, store=self.name))
        )

        def prepare() -> tuple[list[tuple[Any, ...]], list[str], list[str], list[int]]:
            rows, term_ids, terms, tfs = [], [], [], []
            for doc in docs:
                try:
                    meta, text = metadata_json(doc)
                except RecursionError as exc:
                    raise InvalidParameterError(f"document {doc.id!r}: metadata nests too deeply to store") from exc
                _check_unicode(doc.id, "a document id")
                _check_unicode(doc.content, f"document {doc.id!r}")
                _check_metadata(meta, f"document {doc.id!r} metadata")
                counts = Counter(self._index_terms(doc))
                for term, tf in counts.items():
                    term_ids.append(_encode_text(doc.id))
                    terms.append(term)
                    tfs.append(tf)
                rows.append((_encode_text(doc.id), _encode_text(doc.content), text, text,
                             json.dumps(_date_shadow(meta)), sum(counts.values())))
            return rows, term_ids, terms, tfs

        rows, term_ids, terms, tfs = await anyio.to_thread.run_sync(prepare)
        postings = list(zip(term_ids, terms, tfs, strict=True))
        languages = {self._language_key(d.metadata.get("language")) for d in docs}
        names = self._names

        async def write(conn: Any) -> None:
            if matrix is not None:
                if not await self._dimension_recorded(conn):
                    await self._fix_dimension(conn, matrix.shape[1])
                elif matrix.shape[1] != self.dimension:
                    raise DimensionMismatchError(
                        f"{self.name}: embeddings have dimension {matrix.shape[1]}, the store holds {self.dimension}"
                    )
            removed = await (await conn.execute(
                names.fmt("WITH gone AS (DELETE FROM {table} WHERE id = ANY(%s) RETURNING doc_key, doc_len),"
                          " postings AS (DELETE FROM {terms} WHERE doc_key IN (SELECT doc_key FROM gone))"
                          " SELECT count(*), coalesce(sum(doc_len), 0) FROM gone"),
                [[r[0] for r in rows]],
            )).fetchone()
            async with conn.cursor() as cur:
                await cur.executemany(
                    names.fmt("INSERT INTO {table} (id, content, metadata, metadata_text, dates, embedding, doc_len)"
                              " VALUES (%s, %s, %s::jsonb, %s, %s::jsonb, %s, %s) RETURNING doc_key"),
                    [(*r[:5], None if matrix is None else matrix[i], r[5]) for i, r in enumerate(rows)],
                    returning=True,
                )
                keys = []
                while True:
                    keys.append((await cur.fetchone())[0])
                    if not cur.nextset():
                        break
                if postings:  # COPY in binary: no per-row statement, and the ids need no lookup
                    by_id = {r[0]: (key, r[5]) for r, key in zip(rows, keys, strict=True)}
                    async with cur.copy(names.fmt("COPY {terms} (term, doc_key, tf, doc_len) FROM STDIN (FORMAT BINARY)")) as copy:
                        copy.set_types(["text", "int8", "int4", "int4"])
                        for doc_id, term, tf in sorted(postings, key=lambda p: (p[1], by_id[p[0]][0])):
                            key, length = by_id[doc_id]
                            await copy.write_row((term, key, tf, length))
            await conn.execute(
                names.fmt("UPDATE {stats} SET n_docs = n_docs + %s, total_len = total_len + %s"),
                [len(rows) - removed[0], sum(r[5] for r in rows) - int(removed[1])],
            )
            await conn.execute(
                names.fmt("INSERT INTO {meta} (key, value) SELECT 'language:' || code, '' FROM unnest(%s::text[])"
                          " AS code ON CONFLICT (key) DO NOTHING"),
                [sorted(languages)],
            )

        await self._run("upsert", write)

    async def _dimension_recorded(self, conn: Any) -> bool:
        row = await (await conn.execute(self._names.fmt("SELECT value FROM {meta} WHERE key = 'dimension'"))).fetchone()
        if row is not None:
            self.dimension = int(row[0])
        return row is not None

    def _language_key(self, language: object) -> str:
        """How a document's language is recorded among the store's languages: the code whose analysis it got
        (``""`` for the store's own analyzer), as the SQLite store records it."""
        analyzer = self.analyzer.for_language(language)  # type: ignore[arg-type]
        return "" if analyzer is self.analyzer else str(primary_language(language))

    async def languages(self) -> tuple[str, ...]:
        """The languages the stored documents were analysed in (ISO 639-1 codes from their
        ``metadata["language"]``, sorted; ``""`` stands for the store's own analyzer). A language stays
        listed after its last document is deleted.

        Raises:
            BackendError: PostgreSQL failed.
        """

        async def read(conn: Any) -> tuple[str, ...]:
            rows = await (await conn.execute(
                self._names.fmt("SELECT substr(key, 10) FROM {meta} WHERE starts_with(key, 'language:')")
            )).fetchall()
            return tuple(sorted(r[0] for r in rows))

        return await self._run("languages", read, transaction=False)

    def _index_terms(self, doc: Document) -> list[str]:
        """BM25 terms of a document: its title, its section headings and its content, in its language."""
        title = doc.metadata.get("title")
        parts = [title] if isinstance(title, str) and title else []
        headings = doc.metadata.get("headings")
        if isinstance(headings, list | tuple):
            parts.extend(h for h in headings if isinstance(h, str) and h != title)
        parts.append(doc.content)
        language = doc.metadata.get("language")
        return self.analyzer.for_language(language).analyze("\n".join(parts))  # type: ignore[arg-type]

    async def delete(self, *, ids: Sequence[str] | None = None, filter: FilterLike | PgWhere | None = None) -> int:  # noqa: A002
        """Delete documents in one transaction; return how many were removed.

        Args:
            ids: delete these ids (unknown ids are ignored).
            filter: a fastrag filter or a :class:`PgWhere`. With ``ids`` too, only documents that have one
                of the ids *and* match the filter are deleted.

        Raises:
            InvalidParameterError: neither ``ids`` nor ``filter`` was given (use :meth:`clear`).
            FilterError: the filter is malformed; UnsupportedFilterError: it cannot be expressed.
            BackendError: PostgreSQL failed; nothing was deleted.
        """
        if ids is None and filter is None:
            raise InvalidParameterError("delete needs ids or a filter; use clear() to delete everything")
        where, params = self._where(filter, self._stored_ids(ids))
        return await self._delete(where, params)

    async def clear(self) -> int:
        """Delete every document; return how many were removed."""
        from psycopg import sql

        return await self._delete(sql.SQL("true"), [])

    async def _delete(self, where: Any, params: list[Any]) -> int:
        names = self._names

        async def delete(conn: Any) -> int:
            from psycopg import sql

            query = sql.SQL(
                "WITH gone AS (DELETE FROM {table} WHERE {where} RETURNING doc_key, doc_len),"
                " postings AS (DELETE FROM {terms} WHERE doc_key IN (SELECT doc_key FROM gone))"
                " SELECT count(*), coalesce(sum(doc_len), 0) FROM gone"
            ).format(table=names.table, terms=names.terms, where=where)
            n, length = await (await conn.execute(query, params)).fetchone()
            if n:
                await conn.execute(names.fmt("UPDATE {stats} SET n_docs = n_docs - %s, total_len = total_len - %s"),
                                   [n, int(length)])
            return int(n)

        return await self._run("delete", delete)

    # ------------------------------------------------------------------ reads

    async def count(self, *, filter: FilterLike | PgWhere | None = None) -> int:  # noqa: A002
        """How many documents the store holds, or how many match ``filter``.

        Raises:
            FilterError: the filter is malformed; UnsupportedFilterError: it cannot be expressed.
            BackendError: PostgreSQL failed.
        """
        from psycopg import sql

        where, params = self._where(filter)

        async def count(conn: Any) -> int:
            query = sql.SQL("SELECT count(*) FROM {table} WHERE {where}").format(table=self._names.table, where=where)
            return int((await (await conn.execute(query, params)).fetchone())[0])

        return await self._run("count", count, transaction=False)

    async def get(
        self, *, ids: Sequence[str] | None = None, filter: FilterLike | PgWhere | None = None,  # noqa: A002
        limit: int | None = None,
    ) -> list[Document]:
        """Documents with these ``ids`` and/or matching ``filter`` (all when neither), in id order.

        Raises:
            InvalidParameterError: ``ids`` is one string, or ``limit`` is not a positive int.
            FilterError: the filter is malformed; UnsupportedFilterError: it cannot be expressed.
            BackendError: PostgreSQL failed.
        """
        from psycopg import sql

        if limit is not None:
            check_k(limit, "limit")
        where, params = self._where(filter, self._stored_ids(ids))

        async def get(conn: Any) -> list[Document]:
            query = sql.SQL(
                "SELECT id, content, metadata_text FROM {table} WHERE {where} ORDER BY id COLLATE \"C\""
                + ("" if limit is None else " LIMIT %s")
            ).format(table=self._names.table, where=where)
            rows = await (await conn.execute(query, params + ([] if limit is None else [limit]))).fetchall()
            return [_row_document(i, c, m) for i, c, m in rows]

        docs = await self._run("get", get, transaction=False)
        return sorted(docs, key=lambda d: d.id)

    async def search_vector(
        self, embedding: np.ndarray, *, k: int, filter: FilterLike | PgWhere | None = None  # noqa: A002
    ) -> list[Document]:
        """Cosine k-NN among documents matching ``filter`` (applied inside PostgreSQL, before ranking).

        Args:
            embedding: ``(dim,)`` query vector (any scale; it is normalised).
            k: how many documents at most (an int > 0).
            filter: a fastrag filter or a :class:`PgWhere`.

        Returns:
            Copies best first, ``score`` = cosine similarity in [-1, 1] (higher is better; a document stored
            with a zero vector scores 0), zero-based ``rank``; ties are broken by id. Approximate (HNSW):
            with an index the nearest documents can be missed, never documents that do not match; when at
            least ``k`` documents with vectors match, ``k`` come back. Documents stored without a vector are
            never returned.

        Raises:
            DimensionMismatchError: the vector's width differs from the store's.
            InvalidParameterError: ``k`` is not a positive int, or the vector holds NaN or infinity or only zeros.
            FilterError: the filter is malformed; UnsupportedFilterError: it cannot be expressed.
            BackendError: PostgreSQL failed.
        """
        from pgvector import Vector

        check_k(k)
        query = check_query_vector(embedding, dimension=self.dimension, store=self.name)
        where, params = self._where(filter)
        await self._ready()
        query = check_query_vector(query, dimension=self.dimension, store=self.name)
        vector = Vector(query / np.float32(np.linalg.norm(query)))
        select = self._knn_sql(where)
        settings = not self._owns_pool or k + 1 > self.ef_search  # else the pool's session settings serve

        async def search(conn: Any) -> list[tuple[float, Document]]:
            limit = k + 1
            if settings:
                await conn.execute(
                    "SELECT set_config('hnsw.iterative_scan', 'strict_order', true),"
                    " set_config('hnsw.ef_search', %s, true)", [str(min(1000, max(self.ef_search, limit)))]
                )
            rows = await (await conn.execute(select, [vector, *params, vector, limit])).fetchall()
            if len(rows) < k:  # the index ran out before k matching rows: ask again without it, exactly
                async with conn.transaction():
                    await conn.execute("SET LOCAL enable_indexscan = off")
                    rows = await (await conn.execute(select, [vector, *params, vector, limit])).fetchall()
            while len(rows) == limit and rows[k - 1][3] == rows[-1][3]:
                limit *= 2  # the k-th score ties with the next: widen until the tie is complete
                rows = await (await conn.execute(select, [vector, *params, vector, limit])).fetchall()
            return [(max(-1.0, min(1.0, float(s))), _row_document(i, c, m))
                    for i, c, m, s in rows]

        scored = await self._run("search_vector", search, transaction=settings)
        ordered = sorted(scored, key=lambda sd: (-sd[0], sd[1].id))[:k]
        return [doc.ranked(score=score, rank=rank) for rank, (score, doc) in enumerate(ordered)]

    async def search_text(
        self, query: str, *, k: int, filter: FilterLike | PgWhere | None = None, language: str | None = None,  # noqa: A002
    ) -> list[Document]:
        """BM25 search computed in SQL: the ``k`` best documents sharing at least one analysed term with ``query``.

        Args:
            query: free text, analysed like the documents (stemming, stopwords, CJK bigrams).
            k: how many documents at most (an int > 0).
            filter: a fastrag filter or a :class:`PgWhere`; applied before the top-k cut.
            language: the question's language (ISO 639-1): the question is stemmed as documents in that
                language were. ``None``: the question is analysed in each language the store's documents were
                analysed in (:meth:`languages`; the store's analyzer, English by default, when none has a
                language of its own) and the terms of all these analyses are searched together. A term the
                question holds twice counts twice (Lucene's convention, :func:`~fastrag.scoring.query_term_counts`).

        Returns:
            Copies best first with ``score`` = BM25 (Lucene's formula, k1 = 1.2, b = 0.75; unbounded, > 0,
            higher is better) and zero-based ``rank``; ties broken by id. Empty when the query has no terms
            left after analysis or no document shares one.

        Raises:
            InvalidParameterError: ``k`` is not a positive int, ``query`` is not a string, or ``language``
                is neither ``None`` nor a language code.
            FilterError: the filter is malformed; UnsupportedFilterError: it cannot be expressed.
            BackendError: PostgreSQL failed.
        """
        return await self._search_text(query, k, filter, language, None)

    async def search_text_scoped(
        self,
        query: str,
        *,
        k: int,
        scope: FilterLike | PgWhere | None,
        filter: FilterLike | PgWhere | None = None,  # noqa: A002
        language: str | None = None,
    ) -> list[Document]:
        """BM25 search among the documents matching ``scope`` (and ``filter``), scored as if the table held
        only the documents matching ``scope``: ``N``, the document frequencies and ``avgdl`` are counted
        over them in the statement (:class:`~fastrag.protocols.SupportsScopedStatistics`; the tenant's own
        statistics, which :class:`~fastrag.scoping.ScopedStore` asks for). ``scope=None``:
        :meth:`search_text`.

        The statement reads the scope's documents (``scope`` translated like any filter: the metadata GIN
        index serves a tenant's ``equals``) and only their postings of the query terms, instead of the
        stats row and every posting of the terms (:func:`~fastrag.vector_store.postgres.queries.bm25_query`).

        Args:
            query: as :meth:`search_text`.
            k: as :meth:`search_text`.
            scope: a fastrag filter or a :class:`PgWhere`: the documents the statistics are counted over, and
                the only ones returned.
            filter: as :meth:`search_text`: narrows what is returned, not the statistics.
            language: as :meth:`search_text`.

        Returns:
            As :meth:`search_text`. A document's score depends only on the documents matching ``scope``.

        Raises:
            InvalidParameterError: as :meth:`search_text`.
            FilterError: the filter or the scope is malformed; UnsupportedFilterError: one cannot be expressed.
            BackendError: PostgreSQL failed.
        """
        return await self._search_text(query, k, filter, language, scope)

    async def _search_text(self, query: str, k: int, filter: Any, language: str | None, scope: Any) -> list[Document]:  # noqa: A002
        check_k(k)
        if not isinstance(query, str):
            raise InvalidParameterError(f"query must be a string, got {type(query).__name__}")
        if language is not None and not isinstance(language, str):
            raise InvalidParameterError(f"language must be None or a language code, got {language!r}")
        where, params = self._where(filter)
        within, within_params = (None, []) if scope is None else self._where(scope)
        if language is not None:
            analyzers = [self.analyzer.for_language(language)]
        else:  # each language the documents were analysed in, never English only against others (as SQLite)
            held = await self.languages()
            analyzers = list({id(a): a for a in (self.analyzer.for_language(c or None) for c in held)}.values())
            analyzers = analyzers or [self.analyzer]
        terms = repeated_terms(await anyio.to_thread.run_sync(
            lambda: query_term_counts(a.analyze(query, for_query=True) for a in analyzers)))
        _check_text(" ".join(terms), "the query")
        if not terms:
            await self._ready()
            return []
        select = self._bm25_sql(where, scope=within)

        async def search(conn: Any) -> list[Any]:
            return await (await conn.execute(select, [*within_params, terms, *params, k])).fetchall()

        rows = await self._run("search_text", search, transaction=False)
        return [_row_document(i, c, m).ranked(score=float(s), rank=r)
                for r, (i, c, m, s) in enumerate(rows)]

    def _bm25_sql(self, where: Any, *, scope: Any = None) -> Any:
        """The BM25 statement (parameters ``[*scope's, terms with repeats, *where's, k]``); see
        :func:`~.queries.bm25_query`."""
        return bm25_query(self._names, where, k1=BM25_K1, b=BM25_B, scope=scope)

    def _knn_sql(self, where: Any) -> Any:
        """The k-NN statement (parameters ``[vector, *where's, vector, limit]``); see :func:`~.queries.knn_query`."""
        return knn_query(self._names, where)
