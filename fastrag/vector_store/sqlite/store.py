"""The embedded default store: one SQLite file with documents, metadata, vectors and a BM25 index.

``SQLiteVectorStore`` implements both :class:`~fastrag.protocols.VectorStore` (exact cosine k-NN with
numpy) and :class:`~fastrag.protocols.LexicalStore` (BM25 over a postings table in the
same database), so one open
store serves both branches of a hybrid retriever. It needs no server and nothing beyond the standard
library and numpy.

Design:

- **BM25** is Lucene's: ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))``, k1 = 1.2, b = 0.75 (Robertson &
  Zaragoza 2009; Lucene ``BM25Similarity``), over the terms of :class:`~fastrag.analysis.Analyzer`
  (stemmed, stopwords removed, CJK bigrams), the same analysis on both sides. The inverted index is a
  plain SQLite table of postings ``(term, doc, tf)`` (a clustered B-tree, written in the same transaction
  as the documents). SQLite's FTS5 was measured and rejected: its ``bm25()`` clamps the IDF of any term
  found in more than half of the documents to 1e-6, so on a small store every score collapses to noise;
  Python's ``sqlite3`` cannot register another FTS5 ranking function; and reading term statistics
  through ``fts5vocab`` made SciFact queries three times slower than the postings table. Only documents
  sharing at least one term with the query are scored. A search reads the postings of its terms with one
  aggregate row per term (document frequency and ``group_concat`` of ``doc,tf`` pairs), parsed by numpy,
  instead of one Python tuple per posting: half the time on SciFact, and SQLite does that work without
  holding Python's GIL, so the other branch of a hybrid runs meanwhile.
- **Languages**: a document whose ``metadata["language"]`` is set is analysed with that language's
  Snowball stemmer (:meth:`~fastrag.analysis.Analyzer.for_language`; no stemmer for Chinese, Japanese,
  Korean and other languages Snowball lacks; CJK runs are segmented into bigrams in every language), one
  without with the store's analyzer (English by default). ``search_text(..., language="de")`` analyses the
  question in German; without ``language`` it uses the store's analyzer, as before. A store file created
  before this existed and already holding documents with a language keeps analysing everything with the
  store's analyzer (recorded as ``language_analysis = "store"``), so its old postings stay consistent;
  index into a new store to get per-language analysis.
- **k-NN** is exact: the vectors of the documents that pass the filter are scored with one matrix product.
  The filter is applied before ranking, so a filtered top-k is never short while enough documents match.
- **Filters** are evaluated inside SQLite by a registered function that runs :func:`fastrag.filters.matches`
  on each row's metadata. The store therefore has exactly the reference semantics by construction (type
  rules, missing keys, ISO-8601 dates), which a translation to ``json_extract`` SQL could not guarantee.
- **Writes** are single transactions: an interrupted upsert or delete leaves the previous state. File
  databases use the WAL journal. Writes run in a worker thread on one writer connection, one at a time.
- **Reads** (``search_vector``, ``search_text``, ``get``, ``count``) on a file run on a bounded pool of
  read-only connections (``read_connections``, default ``min(4, os.cpu_count())``, opened on demand), so
  reads run concurrently with each other and with a write: the two branches of a hybrid retriever search
  at the same time, and a write never waits for a search (WAL: readers and the writer do not block each
  other). Each call is one read transaction, so it sees one committed state (a snapshot) even while this
  store, another store or another process writes. A read does its SQL and numpy work in one worker thread.
  ``":memory:"`` (and ``""``, a private temporary database) cannot be shared between connections: such a
  store keeps one connection and runs every call on it, one at a time. Concurrency needs a file.
- **Caches**: the normalised vector matrix and the BM25 document lengths are kept in memory between reads,
  keyed by a generation number the database itself keeps (``meta.generation``, raised by a trigger on
  every inserted, updated or deleted document, in the same transaction, by any writer). A read compares
  its snapshot's generation with the cache's and reloads from its own snapshot when they differ, so it
  never scores with vectors or statistics of another state; a cache is replaced only by a newer
  generation, as one immutable object.
- **Errors**: a busy or locked database (another process holds the write lock past the 5 s busy timeout)
  raises :class:`~fastrag.errors.TransientBackendError`, which :mod:`fastrag.retry` may retry; any other
  SQLite failure raises :class:`~fastrag.errors.BackendError`. Text that is not valid Unicode (a lone
  surrogate), metadata nested too deeply, non-finite floats and integers too long to write as JSON
  are rejected with :class:`~fastrag.errors.InvalidParameterError` before anything is written.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

import anyio
import numpy as np

from fastrag.analysis import Analyzer
from fastrag.errors import (
    BackendError,
    BackendUnavailableError,
    ConfigurationError,
    DimensionMismatchError,
    InvalidParameterError,
    TransientBackendError,
)
from fastrag.filters import Filter, FilterLike, dump_filter, matches, parse_filter
from fastrag.models import RANK, SCORE, Document, owned_document
from fastrag.retrieval._validation import check_positive_int
from fastrag.vector_store._metadata import metadata_json
from fastrag.vector_store._validation import check_dimension, check_k, check_query_vector, check_unique_ids

__all__ = ["SQLiteVectorStore"]

_SCHEMA_VERSION = "2"
_BM25_K1 = 1.2  # Lucene BM25Similarity defaults (Robertson & Zaragoza 2009 recommend k1 in [1.2, 2.0])
_BM25_B = 0.75
_BUSY_CODES = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (primary result codes)
_BUSY_TIMEOUT_S = 5.0  # how long every connection waits for a lock before SQLITE_BUSY
_PRIVATE_PATHS = (":memory:", "")  # databases private to one connection: no pool of readers
T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    rowid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    content TEXT NOT NULL,
    metadata TEXT NOT NULL,
    embedding BLOB,
    n_terms INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS postings (
    term TEXT NOT NULL,
    doc INTEGER NOT NULL,
    tf INTEGER NOT NULL,
    PRIMARY KEY (term, doc)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS postings_doc ON postings (doc);
INSERT OR IGNORE INTO meta VALUES ('generation', '0');
CREATE TRIGGER IF NOT EXISTS documents_generation_insert AFTER INSERT ON documents BEGIN
    UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation';
END;
CREATE TRIGGER IF NOT EXISTS documents_generation_update AFTER UPDATE ON documents BEGIN
    UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation';
END;
CREATE TRIGGER IF NOT EXISTS documents_generation_delete AFTER DELETE ON documents BEGIN
    UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation';
END;
"""
# The generation is raised by triggers, so every writer raises it (an older fastrag, another process, a
# script), inside its own transaction: a snapshot's generation names the committed state it sees.
_GENERATION_SQL = "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'generation'"
# Per query term (in term order): its document frequency and its postings as one "doc,tf,doc,tf" string,
# pairs kept together in one aggregate.
_POSTINGS_SQL = (
    "SELECT term, count(*), group_concat(doc || ',' || tf) FROM postings "
    "WHERE term IN (SELECT value FROM json_each(?)) GROUP BY term"
)


@lru_cache(maxsize=256)
def _parsed_filter(filter_json: str) -> Filter | None:
    return parse_filter(filter_json)


def _sql_match(filter_json: str, metadata_json: str) -> int:
    return int(matches(_parsed_filter(filter_json), json.loads(metadata_json)))


class SQLiteVectorStore:
    """Documents, vectors and a BM25 index in one SQLite database.

    Args:
        path: a database file (created with its parent folders if missing) or ``":memory:"``.
        dimension: expected vector width; when ``None`` it is fixed by the first write with embeddings.
            A file remembers its dimension; reopening it with another raises.
        embedding_model: the name of the embedder whose vectors the store holds; recorded on first use,
            and reopening with a different name raises, so vectors of two models are never mixed.
        analyzer: the BM25 text analysis (default: English stemming and stopwords, CJK bigrams). A file
            remembers its analyzer's language; reopening it with another raises.
        read_connections: how many read-only connections a file store may open for concurrent reads (an
            int > 0; default ``min(4, os.cpu_count())``). They are opened on demand, reused, and closed by
            :meth:`aclose`; the store holds at most this many plus its one writer connection. Ignored for
            ``":memory:"``, which runs everything on one connection.

    Every connection waits up to 5 seconds for a lock held by another connection (SQLite's busy timeout)
    before a call fails with :class:`~fastrag.errors.TransientBackendError`.

    Raises:
        BackendUnavailableError: the file cannot be opened or is not a fastrag database.
        ConfigurationError: ``dimension``, ``embedding_model`` or the analyzer differ from the file's.
        InvalidParameterError: ``dimension`` or ``read_connections`` is not a positive int.

    Example::

        async with SQLiteVectorStore(":memory:") as store:
            await store.upsert([Document(id="1", content="BM25 ranks documents")])
            hits = await store.search_text("ranking", k=5)
    """

    idempotent_upsert = True
    """An upsert replaces documents by id in one transaction, so :class:`~fastrag.retry.RetryingStore` may
    send it again after a transient failure (a database busy past its timeout)."""

    def __init__(
        self,
        path: str | Path = ":memory:",
        *,
        dimension: int | None = None,
        embedding_model: str | None = None,
        analyzer: Analyzer | None = None,
        read_connections: int | None = None,
    ) -> None:
        if dimension is not None and (not isinstance(dimension, int) or dimension <= 0):
            raise InvalidParameterError(f"dimension must be a positive int, got {dimension!r}")
        if read_connections is not None:
            check_positive_int(read_connections, "read_connections")
        self.path = str(path)
        self.analyzer = analyzer or Analyzer()
        self._private = self.path in _PRIVATE_PATHS
        self._max_readers = read_connections or min(4, os.cpu_count() or 1)
        self._lock = threading.Lock()  # the writer connection (and, for a private database, every call)
        self._closed = False
        # the pool of read connections: guarded by _pool; _busy counts those checked out, _opening those
        # being opened; every open reader is in _readers, the idle ones also in _idle (last used on top)
        self._pool = threading.Condition(threading.Lock())
        self._readers: list[sqlite3.Connection] = []
        self._idle: list[sqlite3.Connection] = []
        self._busy = 0
        self._opening = 0
        # caches, each one immutable tuple replaced whole: (generation, ...); -1 is no generation
        self._vectors_lock = threading.Lock()
        self._lengths_lock = threading.Lock()
        self._vectors: tuple[int, np.ndarray, np.ndarray] = (
            -1, np.zeros((0, 0), dtype=np.float32), np.zeros(0, dtype=np.int64)
        )
        self._lengths: tuple[int, np.ndarray, int, float] = (-1, np.zeros(1), 0, 1.0)
        self._conn = self._open()
        try:
            self.dimension: int | None = self._check_meta("dimension", dimension, int)
            self.embedding_model: str | None = self._check_meta("embedding_model", embedding_model, str)
            self._check_meta("analyzer_language", self.analyzer.language or "none", str)
            self._per_language = self._language_analysis()
        except BaseException:
            self._conn.close()
            raise

    # ------------------------------------------------------------------ lifecycle

    def __repr__(self) -> str:
        return f"SQLiteVectorStore({self.path!r})"

    def _connect(self, *, reader: bool) -> sqlite3.Connection:
        """A connection with this store's settings: busy timeout, filter function, PRAGMAs."""
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=_BUSY_TIMEOUT_S)
        try:
            conn.create_function("fastrag_match", 2, _sql_match, deterministic=True)
            if not self._private:
                conn.execute("PRAGMA synchronous=NORMAL")
            if reader:
                conn.execute("PRAGMA query_only=ON")  # a reader can never write, whatever runs on it
        except BaseException:
            conn.close()
            raise
        return conn

    def _open(self) -> sqlite3.Connection:
        """The writer connection, with the schema created or checked."""
        path = self.path
        try:
            if not self._private:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            conn = self._connect(reader=False)
            try:
                if not self._private:
                    conn.execute("PRAGMA journal_mode=WAL")  # persistent: the readers find the file in WAL mode
                conn.executescript(_SCHEMA)
                version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
                if version is None:
                    conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (_SCHEMA_VERSION,))
                elif version[0] != _SCHEMA_VERSION:
                    raise BackendUnavailableError(f"unsupported schema version {version[0]}", store=path)
            except BaseException:
                conn.close()
                raise
        except (sqlite3.Error, OSError) as exc:
            raise BackendUnavailableError(f"cannot open SQLite store: {exc}", store=path) from exc
        return conn

    def _check_meta(self, key: str, wanted: Any, kind: type) -> Any:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        if row is None:
            if wanted is not None:
                self._conn.execute("INSERT INTO meta VALUES (?, ?)", (key, str(wanted)))
            return wanted
        stored = kind(row[0])
        if wanted is not None and stored != wanted:
            raise ConfigurationError(
                f"{self.path}: the store was built with {key}={stored!r}, not {wanted!r}; "
                "use a new store or the same settings"
            )
        return stored

    def _language_analysis(self) -> bool:
        """Whether documents are analysed in their own language (recorded in the file on first open).

        A file from before per-language analysis that holds documents with a language keeps the old,
        store-wide analysis: their postings were made with it.
        """
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'language_analysis'").fetchone()
        if row is not None:
            return row[0] == "per_document"
        legacy = self._conn.execute(
            "SELECT 1 FROM documents WHERE json_extract(metadata, '$.language') IS NOT NULL LIMIT 1"
        ).fetchone()
        mode = "store" if legacy else "per_document"
        self._conn.execute("INSERT OR IGNORE INTO meta VALUES ('language_analysis', ?)", (mode,))
        return mode == "per_document"

    def _analyzer_for(self, language: object) -> Analyzer:
        """The analysis for text in ``language`` (the store's own when ``None`` or per-language analysis is off)."""
        return self.analyzer.for_language(language) if self._per_language else self.analyzer  # type: ignore[arg-type]

    async def __aenter__(self) -> SQLiteVectorStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every connection of the store. Idempotent.

        New calls are refused at once (:class:`~fastrag.errors.BackendUnavailableError`); calls already
        running finish first, then their connections are closed too.
        """
        await anyio.to_thread.run_sync(self._close_sync)

    def _close_sync(self) -> None:
        with self._pool:
            self._closed = True
            while self._busy or self._opening:  # reads in flight finish on their connections
                self._pool.wait()
            readers, self._readers, self._idle = self._readers, [], []
        for conn in readers:
            conn.close()
        with self._lock:  # a write in flight finishes first
            self._conn.close()

    def _error(self, exc: sqlite3.Error) -> BackendError:
        """Our error for a SQLite failure: busy or locked past the timeout is transient."""
        if isinstance(exc, sqlite3.OperationalError) and getattr(exc, "sqlite_errorcode", 0) & 0xFF in _BUSY_CODES:
            return TransientBackendError(f"SQLite database is busy: {exc}", store=self.path)
        return BackendError(f"SQLite error: {exc}", store=self.path)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` in a worker thread holding the writer connection's lock."""

        def call() -> T:
            with self._lock:
                if self._closed:
                    raise BackendUnavailableError("store is closed", store=self.path)
                try:
                    return fn(*args)
                except sqlite3.Error as exc:
                    raise self._error(exc) from exc

        return await anyio.to_thread.run_sync(call)

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, generation, *args)`` in one worker thread, inside one read transaction.

        Every statement ``fn`` runs on ``conn`` sees the same committed state (a snapshot), whose
        generation is ``generation``. A file store takes a connection from the read pool; a private
        (``":memory:"``) one uses its only connection under the lock.
        """
        if self._private:
            return await self._run(lambda: _in_snapshot(self._conn, fn, args))
        return await anyio.to_thread.run_sync(self._pooled_read, fn, args)

    def _pooled_read(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        conn = self._checkout()
        healthy = False
        try:
            result = _in_snapshot(conn, fn, args)
            healthy = True
            return result
        except sqlite3.Error as exc:
            raise self._error(exc) from exc
        except Exception:
            healthy = not conn.in_transaction  # our own error (a bad filter): the connection is fine
            raise
        finally:
            self._checkin(conn, healthy=healthy)

    def _checkout(self) -> sqlite3.Connection:
        """An idle read connection, a new one while fewer than ``read_connections`` are open, or wait."""
        with self._pool:
            while True:
                if self._closed:
                    raise BackendUnavailableError("store is closed", store=self.path)
                if self._idle:
                    self._busy += 1
                    return self._idle.pop()
                if len(self._readers) + self._opening < self._max_readers:
                    self._opening += 1
                    break
                self._pool.wait()
        conn: sqlite3.Connection | None = None
        try:
            conn = self._connect(reader=True)
        except sqlite3.Error as exc:
            raise BackendUnavailableError(f"cannot open SQLite store: {exc}", store=self.path) from exc
        finally:
            with self._pool:
                self._opening -= 1
                if conn is not None:
                    self._readers.append(conn)
                    self._busy += 1
                self._pool.notify_all()
        return conn

    def _checkin(self, conn: sqlite3.Connection, *, healthy: bool) -> None:
        """Return a read connection to the pool; one left in a bad state is closed instead."""
        with self._pool:
            self._busy -= 1
            if healthy:
                self._idle.append(conn)
            else:
                self._readers.remove(conn)
            self._pool.notify_all()
        if not healthy:
            conn.close()

    # ------------------------------------------------------------------ writes

    async def upsert(self, documents: Sequence[Document], *, embeddings: np.ndarray | None = None) -> None:
        """Insert or replace ``documents`` by id in one transaction.

        Args:
            documents: the documents; their ``content`` and ``metadata["title"]`` are indexed for BM25.
                Metadata must be JSON-serialisable.
            embeddings: ``(len(documents), dim)`` float32 (other float dtypes are converted), finite.
                ``None`` stores the documents without vectors: they are found by BM25 but not by k-NN.

        Raises:
            DimensionMismatchError: the width differs from the store's dimension, or the row count from
                ``len(documents)``.
            InvalidParameterError: a vector holds NaN or infinity, an id repeats, or metadata is not JSON.
            BackendError: SQLite failed; nothing was written.
        """
        docs = list(documents)
        if not docs:
            return
        check_unique_ids(docs)
        blobs = self._embedding_blobs(embeddings, len(docs))
        try:
            rows = [
                (d.id, d.content, metadata_json(d)[1], blob)
                for d, blob in zip(docs, blobs, strict=True)
            ]
        except RecursionError as exc:
            raise InvalidParameterError("document metadata nests too deeply to store") from exc
        for doc_id, content, metadata, _ in rows:
            try:
                doc_id.encode("utf-8"), content.encode("utf-8"), metadata.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InvalidParameterError(
                    f"document {doc_id!r} holds text that is not valid Unicode ({exc.reason}); nothing was written"
                ) from exc
        terms = await anyio.to_thread.run_sync(lambda: [self._index_terms(d) for d in docs])
        await self._run(self._upsert_sync, rows, terms)

    def _index_terms(self, doc: Document) -> list[str]:
        """BM25 terms of a document: its title, its section headings (below the title) and its content."""
        title = doc.metadata.get("title")
        parts = [title] if isinstance(title, str) and title else []
        headings = doc.metadata.get("headings")
        if isinstance(headings, list | tuple):
            parts.extend(h for h in headings if isinstance(h, str) and h != title)
        parts.append(doc.content)
        return self._analyzer_for(doc.metadata.get("language")).analyze("\n".join(parts))

    def _embedding_blobs(self, embeddings: np.ndarray | None, n: int) -> list[bytes | None]:
        if embeddings is None:
            return [None] * n
        matrix = np.asarray(embeddings, dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[0] != n:
            raise DimensionMismatchError(f"embeddings must have shape ({n}, dim), got {matrix.shape}")
        check_dimension(matrix.shape[1], self.dimension, store=self.path, what="embeddings have")
        if not np.isfinite(matrix).all():
            raise InvalidParameterError("embeddings contain NaN or infinity")
        return [row.tobytes() for row in matrix]

    def _upsert_sync(self, rows: list[tuple[str, str, str, bytes | None]], terms: list[list[str]]) -> None:
        conn = self._conn
        dims = {len(r[3]) // 4 for r in rows if r[3] is not None}
        conn.execute("BEGIN IMMEDIATE")
        try:
            if dims and self.dimension is None:
                (dim,) = dims
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('dimension', ?)", (str(dim),))
            for (doc_id, content, metadata, blob), doc_terms in zip(rows, terms, strict=True):
                old = conn.execute("SELECT rowid FROM documents WHERE id = ?", (doc_id,)).fetchone()
                if old is not None:
                    conn.execute("DELETE FROM postings WHERE doc = ?", old)
                    conn.execute(
                        "UPDATE documents SET content = ?, metadata = ?, embedding = ?, n_terms = ? WHERE rowid = ?",
                        (content, metadata, blob, len(doc_terms), old[0]),
                    )
                    rowid = old[0]
                else:
                    rowid = conn.execute(
                        "INSERT INTO documents (id, content, metadata, embedding, n_terms) VALUES (?, ?, ?, ?, ?)",
                        (doc_id, content, metadata, blob, len(doc_terms)),
                    ).lastrowid
                conn.executemany(
                    "INSERT INTO postings (term, doc, tf) VALUES (?, ?, ?)",
                    [(term, rowid, tf) for term, tf in Counter(doc_terms).items()],
                )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        if dims and self.dimension is None:
            (self.dimension,) = dims

    async def delete(self, *, ids: Sequence[str] | None = None, filter: FilterLike | None = None) -> int:  # noqa: A002
        """Delete documents in one transaction; return how many were removed.

        Args:
            ids: delete these ids (unknown ids are ignored).
            filter: delete documents matching this filter. With ``ids`` too, only documents that have one
                of the ids *and* match the filter are deleted.

        Raises:
            InvalidParameterError: neither ``ids`` nor ``filter`` was given (use :meth:`clear`).
            FilterError: the filter is malformed.
        """
        if ids is None and filter is None:
            raise InvalidParameterError("delete needs ids or a filter; use clear() to delete everything")
        where, params = self._where(ids=ids, filter=filter)
        return await self._run(self._delete_sync, where, params)

    async def clear(self) -> int:
        """Delete every document; return how many were removed."""
        return await self._run(self._delete_sync, "1", [])

    def _delete_sync(self, where: str, params: list[Any]) -> int:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            rowids = [r[0] for r in conn.execute(f"SELECT rowid FROM documents WHERE {where}", params)]
            for chunk in _chunks(rowids, 500):
                marks = ",".join("?" * len(chunk))
                conn.execute(f"DELETE FROM postings WHERE doc IN ({marks})", chunk)
                conn.execute(f"DELETE FROM documents WHERE rowid IN ({marks})", chunk)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return len(rowids)

    # ------------------------------------------------------------------ reads

    def _where(self, *, ids: Sequence[str] | None = None, filter: FilterLike | None = None) -> tuple[str, list[Any]]:  # noqa: A002
        clauses: list[str] = []
        params: list[Any] = []
        if ids is not None:
            if isinstance(ids, str):
                raise InvalidParameterError("ids must be a sequence of strings, not one string")
            ids = list(ids)
            clauses.append("id IN (SELECT value FROM json_each(?))")
            params.append(json.dumps(ids))
        node = parse_filter(filter)
        if node is not None:
            clauses.append("fastrag_match(?, metadata)")
            params.append(json.dumps(dump_filter(node)))
        return (" AND ".join(clauses) or "1"), params

    async def count(self, *, filter: FilterLike | None = None) -> int:  # noqa: A002
        """How many documents the store holds, or how many match ``filter``."""
        where, params = self._where(filter=filter)
        sql = f"SELECT count(*) FROM documents WHERE {where}"
        return await self._read(lambda conn, _generation: conn.execute(sql, params).fetchone()[0])

    async def get(
        self, *, ids: Sequence[str] | None = None, filter: FilterLike | None = None, limit: int | None = None  # noqa: A002
    ) -> list[Document]:
        """Documents with these ``ids`` and/or matching ``filter`` (all when neither), in id order."""
        where, params = self._where(ids=ids, filter=filter)
        sql = f"SELECT id, content, metadata FROM documents WHERE {where} ORDER BY id"
        if limit is not None:
            check_k(limit, "limit")
            sql += f" LIMIT {int(limit)}"
        rows = await self._read(lambda conn, _generation: conn.execute(sql, params).fetchall())
        return [Document(id=i, content=c, metadata=json.loads(m)) for i, c, m in rows]

    async def search_text(
        self, query: str, *, k: int, filter: FilterLike | None = None, language: str | None = None  # noqa: A002
    ) -> list[Document]:
        """BM25 search: the ``k`` best documents sharing at least one analysed term with ``query``.

        Args:
            query: free text; analysed like the documents (stemming, stopwords, CJK bigrams).
            k: how many documents at most (an int > 0).
            filter: only documents matching it are ranked (applied before the top-k cut).
            language: the question's language (ISO 639-1, e.g. ``"de"``): the question is stemmed as
                documents in that language were. ``None``: the store's analyzer (English by default).
                Documents in every language are searched either way.

        Returns:
            Copies best first, with ``score`` = BM25 (unbounded, > 0 for any match, higher is better) and
            zero-based ``rank``. Empty when no document shares a term, or when the query has no terms left
            after analysis (only stopwords or punctuation).

        Raises:
            InvalidParameterError: ``k`` is not a positive int, ``query`` is not a string, or ``language``
                is neither ``None`` nor a string.
            FilterError: the filter is malformed.
            BackendError: SQLite failed.
        """
        check_k(k)
        if not isinstance(query, str):
            raise InvalidParameterError(f"query must be a string, got {type(query).__name__}")
        if language is not None and not isinstance(language, str):
            raise InvalidParameterError(f"language must be None or a language code, got {language!r}")
        analyzer = self._analyzer_for(language)
        node = parse_filter(filter)
        # the question is analysed in the worker thread too: stemming stays off the event loop, and the
        # other branch of a hybrid can start meanwhile
        return await self._read(self._search_text_sync, analyzer, query, k, node)

    def _search_text_sync(
        self, conn: sqlite3.Connection, generation: int, analyzer: Analyzer, query: str, k: int, node: Filter | None
    ) -> list[Document]:
        terms = sorted(set(analyzer.analyze(query, for_query=True)))
        if not terms:
            return []
        # one row per query term: its document frequency and its postings as "doc,tf,doc,tf,...", built by
        # SQLite in C (no Python object per posting, and the GIL is free while SQLite works)
        found = conn.execute(_POSTINGS_SQL, (json.dumps(terms),)).fetchall()
        if not found:
            return []
        _, lengths, n_docs, avgdl = self._load_lengths(conn, generation)
        df = [n for _, n, _ in found]
        pairs = _parse_ints(",".join(p for _, _, p in found), 2 * sum(df)).reshape(-1, 2)
        rowids, tf = pairs[:, 0], pairs[:, 1].astype(np.float64)
        idf = [math.log(1.0 + (n_docs - n + 0.5) / (n + 0.5)) for n in df]
        weights = np.repeat(np.array(idf, dtype=np.float64), df)
        norm = _BM25_K1 * (1.0 - _BM25_B + _BM25_B * lengths[rowids] / avgdl)
        contributions = weights * tf * (_BM25_K1 + 1.0) / (tf + norm)
        candidates, inverse = np.unique(rowids, return_inverse=True)
        scores = np.bincount(inverse, weights=contributions, minlength=len(candidates))
        if node is not None:
            where, params = self._where(filter=node)
            allowed = np.fromiter(
                (r[0] for r in conn.execute(
                    f"SELECT rowid FROM documents WHERE rowid IN (SELECT value FROM json_each(?)) AND {where}",
                    [json.dumps(candidates.tolist()), *params],
                )),
                dtype=np.int64,
            )
            keep = np.isin(candidates, allowed)
            scores, candidates = scores[keep], candidates[keep]
            if len(candidates) == 0:
                return []
        return _ranked_rows(conn, scores, candidates, k)

    def _cached(self, slot: str, lock: threading.Lock, generation: int, load: Callable[[], tuple[Any, ...]]) -> Any:
        """The cache in attribute ``slot`` (a tuple led by its generation) for the state whose generation is
        ``generation``, built by ``load()`` (the rest of the tuple) when the cache holds another one. One reader
        loads under ``lock``; the others of the same generation wait and reuse it. A reader of an older
        snapshot gets its own load and never replaces a newer cache."""
        cached = getattr(self, slot)
        if cached[0] == generation:
            return cached
        with lock:
            cached = getattr(self, slot)
            if cached[0] == generation:
                return cached
            loaded = (generation, *load())
            if generation > cached[0]:
                setattr(self, slot, loaded)
            return loaded

    def _load_lengths(self, conn: sqlite3.Connection, generation: int) -> tuple[int, np.ndarray, int, float]:
        """``(generation, lengths, n_docs, avgdl)``: document lengths in terms indexed by rowid, the document
        count and the mean length (BM25's avgdl) of the state whose generation is ``generation``."""

        def load() -> tuple[np.ndarray, int, float]:
            rows = conn.execute("SELECT rowid, n_terms FROM documents").fetchall()
            top = max((r[0] for r in rows), default=0)
            lengths = np.zeros(top + 1, dtype=np.float64)
            for rowid, n in rows:
                lengths[rowid] = n
            total = float(lengths.sum())
            return lengths, len(rows), total / len(rows) if rows and total > 0 else 1.0

        return self._cached("_lengths", self._lengths_lock, generation, load)

    async def search_vector(
        self, embedding: np.ndarray, *, k: int, filter: FilterLike | None = None  # noqa: A002
    ) -> list[Document]:
        """Exact cosine k-NN among documents matching ``filter`` (applied before ranking).

        Args:
            embedding: ``(dim,)`` query vector (any scale; it is normalised).
            k: how many documents at most (an int > 0).
            filter: only documents matching it are ranked.

        Returns:
            Copies best first, ``score`` = cosine similarity in [-1, 1] (higher is better), zero-based
            ``rank``; ties are broken by id. Documents stored without a vector are never returned.

        Raises:
            DimensionMismatchError: the vector's width differs from the store's.
            InvalidParameterError: ``k`` is not a positive int, or the vector holds NaN or infinity.
            FilterError: the filter is malformed.
        """
        check_k(k)
        query = check_query_vector(embedding, dimension=self.dimension, store=self.path)
        node = parse_filter(filter)
        return await self._read(self._search_vector_sync, query, k, node)

    def _search_vector_sync(
        self, conn: sqlite3.Connection, generation: int, query: np.ndarray, k: int, node: Filter | None
    ) -> list[Document]:
        allowed = None
        if node is not None:
            where, params = self._where(filter=node)
            allowed = np.fromiter(
                (r[0] for r in conn.execute(f"SELECT rowid FROM documents WHERE embedding IS NOT NULL AND {where}", params)),
                dtype=np.int64,
            )
        _, matrix, rowids = self._load_vectors(conn, generation)
        if len(rowids) == 0:
            return []
        # the dimension may have been fixed by another connection's first write
        check_dimension(query.shape[0], matrix.shape[1], store=self.path, what="query has")
        if allowed is not None:
            positions = np.nonzero(np.isin(rowids, allowed))[0]
            matrix, rowids = matrix[positions], rowids[positions]
            if len(rowids) == 0:
                return []
        norm = float(np.linalg.norm(query))
        return _ranked_rows(conn, matrix @ (query / norm), rowids, k)

    def _load_vectors(self, conn: sqlite3.Connection, generation: int) -> tuple[int, np.ndarray, np.ndarray]:
        """``(generation, matrix, rowids)``: the L2-normalised ``(n, dim)`` float32 vectors of the state
        whose generation is ``generation``, and their rowids."""

        def load() -> tuple[np.ndarray, np.ndarray]:
            rows = conn.execute("SELECT rowid, embedding FROM documents WHERE embedding IS NOT NULL").fetchall()
            if rows:
                raw = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), -1)
                norms = np.linalg.norm(raw, axis=1, keepdims=True)
                matrix = np.divide(raw, norms, out=np.zeros_like(raw), where=norms > 0)
                if self.dimension is None:  # fixed by another connection's first write
                    self.dimension = int(raw.shape[1])
            else:
                matrix = np.zeros((0, self.dimension or 0), dtype=np.float32)
            rowids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            matrix.flags.writeable = rowids.flags.writeable = False  # shared by concurrent readers
            return matrix, rowids

        return self._cached("_vectors", self._vectors_lock, generation, load)


def _in_snapshot(conn: sqlite3.Connection, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
    """``fn(conn, generation, *args)`` inside one read transaction on ``conn``; rolled back after."""
    conn.execute("BEGIN")
    try:
        # the first read starts the snapshot; the generation names the committed state it sees
        generation = conn.execute(_GENERATION_SQL).fetchone()[0]
        return fn(conn, generation, *args)
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")  # a read transaction: nothing to commit


def _ranked_rows(conn: sqlite3.Connection, scores: np.ndarray, rowids: np.ndarray, k: int) -> list[Document]:
    """The ``k`` best rows by score (ties by id) as documents stamped with score and rank."""
    top = _top_k(scores, k)
    chosen = rowids[top].tolist()
    marks = ",".join("?" * len(chosen))
    found = {
        r: (i, c, m)
        for r, i, c, m in conn.execute(f"SELECT rowid, id, content, metadata FROM documents WHERE rowid IN ({marks})", chosen)
    }
    hits = [(float(s), found[r]) for s, r in zip(scores[top].tolist(), chosen, strict=True)]
    hits.sort(key=lambda h: (-h[0], h[1][0]))
    del hits[k:]
    out = []
    for rank, (score, (doc_id, content, metadata)) in enumerate(hits):
        stamped = json.loads(metadata)
        stamped[SCORE], stamped[RANK] = score, rank  # one Document per hit, not a copy of a copy
        out.append(owned_document(doc_id, content, stamped))  # our own rows, checked when written
    return out


def _top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` highest scores, generous at the cut so ties at the boundary can be sorted by id."""
    if k >= len(scores):
        return np.arange(len(scores))
    cut = np.partition(scores, len(scores) - k)[len(scores) - k]
    at_or_above = scores >= cut
    return np.flatnonzero(at_or_above) if np.count_nonzero(at_or_above) <= 4 * k else np.argpartition(-scores, k)[:k]


def _parse_ints(text: str, count: int) -> np.ndarray:
    """The ``count`` comma-separated integers of ``text`` (SQLite's ``group_concat`` of integer columns)."""
    values = np.fromstring(text, dtype=np.int64, sep=",") if count else np.zeros(0, dtype=np.int64)
    if len(values) != count:  # never expected: integers SQLite wrote itself
        raise BackendError(f"postings could not be read: {len(values)} numbers, expected {count}")
    return values


def _chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]
