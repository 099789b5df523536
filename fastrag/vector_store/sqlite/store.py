"""The embedded default store: one SQLite file with documents, metadata, vectors and a BM25 index.

``SQLiteVectorStore`` implements both :class:`~fastrag.protocols.VectorStore` (exact cosine k-NN with
numpy) and :class:`~fastrag.protocols.LexicalStore` (BM25), so one open store serves both branches of a
hybrid retriever. It needs no server and nothing beyond the standard library and numpy.

Design (the measurements behind it are in ``docs/benchmarks.md``, "The embedded store at scale"):

- **Storage**: ``documents(rowid, id, content, metadata)`` holds what a search returns. Every write
  also appends one *block* (the rowids it wrote, their BM25 lengths and their L2-normalised vectors as
  one float32 matrix; :mod:`fastrag.vector_store.sqlite.snapshot`) and one BM25 *segment* (per term, the rowids and term
  frequencies as packed arrays; :mod:`fastrag.vector_store.sqlite.lexical`), all in one transaction. Rowids are never reused: an
  update writes a new version under a new rowid and tombstones the old one, so every block and posting
  stays valid for the life of the file.
- **BM25** is Lucene's (``idf = ln(1 + (N - df + 0.5) / (df + 0.5))``, k1 = 1.2, b = 0.75; Robertson &
  Zaragoza 2009) over the terms of :class:`~fastrag.analysis.Analyzer`, the same analysis on both sides.
  A search reads, for each query term, one packed row per segment (a few rows, whatever the corpus
  size) and scores with numpy into a dense array by rowid. Segments are merged 32 at a time into the
  next level by the writer after its commit (a tiered policy; merges drop deleted documents' postings).
  SQLite's FTS5 was measured and rejected earlier: its ``bm25()`` clamps the IDF of any term found in
  more than half the documents; one ``(term, doc, tf)`` row per posting, the previous design, cost about
  480 ns per posting to read and made a 300,000-chunk search 12-19x slower than bm25s.
- **Languages**: a document whose ``metadata["language"]`` is set is analysed with that language's
  Snowball stemmer (:meth:`~fastrag.analysis.Analyzer.for_language`); one without with the store's
  analyzer (English by default). ``search_text(..., language="de")`` analyses the question in German;
  without a language, in each language the store's documents were analysed in (``languages()``,
  recorded in ``meta``), the terms searched together.
- **k-NN** is exact: one matrix product over the vectors, which a reader keeps in memory as one float32
  matrix (the read-only floor: the scan reads each vector once). Documents without a vector, deleted
  ones and (with a filter) non-matching ones are masked out before the top-k cut, so a filtered top-k is
  never short while enough documents match.
- **Filters** are evaluated on in-memory columns of the metadata (:mod:`fastrag.vector_store.sqlite.columns`), one per key, built
  on first use and extended as documents are added, with exactly the reference semantics of
  :func:`fastrag.filters.matches`: a filter costs one vectorised mask, not a scan with a JSON parse per row.
- **Writes** are single transactions: an interrupted upsert or delete leaves the previous state. File
  databases use the WAL journal. Writes run in a worker thread on one writer connection, one at a time.
  The BM25 merges and the compaction that follow a write (:mod:`fastrag.vector_store.sqlite.maintenance`)
  run after its commit, each in a transaction of its own: one that fails (the disk filled) leaves the
  write committed and reported so, is logged, shown by ``status()``, and run again by the next write.
- **Reads** (``search_vector``, ``search_text``, ``get``, ``count``) on a file run on a bounded pool of
  read-only connections (``read_connections``, default ``min(4, os.cpu_count())``), so reads run
  concurrently with each other and with a write (WAL). Each call is one read transaction, so it sees one
  committed state (a snapshot) even while this store, another store or another process writes. A call
  takes a token of a capacity limiter of two per connection before it hops into a worker thread, so at
  most one thread per connection waits for one (and a returned connection wakes one); the other calls
  wait in the event loop, in order (issue 28). ``":memory:"`` (and ``""``) cannot be shared between
  connections: such a store keeps one connection.
- **Read-only files**: a store this process cannot write (a read-only file system, permissions, or
  ``read_only=True``) opens for reading (:mod:`fastrag.vector_store.sqlite.access`: SQLite's ``mode=ro``,
  or ``immutable`` when its WAL index cannot be created); its writes raise
  :class:`~fastrag.errors.ReadOnlyStoreError`.
- **Caches**: the vectors, BM25 lengths and liveness of the newest state a read has seen are kept in
  memory (:class:`~fastrag.vector_store.sqlite.snapshot.Snapshot`), named by the generation the database keeps (``meta.generation``,
  raised by every write in its own transaction). A read of a newer state extends them by the blocks and
  tombstones written since (a commit of 10 documents costs readers 10 documents, not a reload); a read of
  an older state than the cache derives its own view. So a read never scores with another state's data.
- **Old files**: a store written by fastrag before this layout (schema 2: one postings row per term and
  document) is migrated in place when opened, in one transaction (an interruption leaves the old file).
  A store whose postings were made by another text analysis (meta ``analysis``, see
  :attr:`~fastrag.analysis.Analyzer.signature`; absent before issue 14) is re-analysed from its stored
  documents when opened, in one transaction, with a warning on logger ``fastrag.vector_store``.
- **Errors**: a busy or locked database (another process holds the write lock past the 5 s busy timeout)
  raises :class:`~fastrag.errors.TransientBackendError`, which :mod:`fastrag.retry` may retry; any other
  SQLite failure raises :class:`~fastrag.errors.BackendError`. Text that is not valid Unicode (a lone
  surrogate), metadata nested too deeply, non-finite floats and integers too long to write as JSON
  are rejected with :class:`~fastrag.errors.InvalidParameterError` before anything is written.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sqlite3
import threading
import time
import uuid
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.lowlevel
import numpy as np

from fastrag.analysis import SNOWBALL_LANGUAGES, SNOWBALL_STOPWORD_LANGUAGES, Analyzer, language_code, primary_language
from fastrag.deferred import rows_deferred
from fastrag.errors import (
    BackendError,
    BackendUnavailableError,
    ConfigurationError,
    DimensionMismatchError,
    FastragError,
    InvalidParameterError,
    ReadOnlyStoreError,
    TransientBackendError,
)
from fastrag.filters import Filter, FilterLike, matches, parse_filter
from fastrag.lifecycle import AsyncResource
from fastrag.limits import check_positive_int
from fastrag.models import Document, owned_document
from fastrag.scoring import query_term_counts
from fastrag.vector_store._metadata import metadata_json
from fastrag.vector_store._validation import (
    check_dimension,
    check_k,
    check_query_vector,
    check_unique_ids,
)
from fastrag.vector_store.sqlite import access, cancellation, lexical, maintenance, snapshot
from fastrag.vector_store.sqlite.columns import Column, filter_mask
from fastrag.vector_store.sqlite.maintenance import SQLiteStoreStatus
from fastrag.vector_store.sqlite.rows import (
    IN_CHUNK,
    chunks,
    delete_rows,
    id_list,
    load_column,
    ranked_rows,
    rowids_of,
    select_rowids,
    vectors_of,
)
from fastrag.vector_store.sqlite.schema import (
    BLOCK_ROWS,
    BUMP_SQL,
    GENERATION_SQL,
    MAX_ROWID,
    create_or_migrate,
    meta_int,
    name_state,
    record_allocation,
    rollback,
    set_meta,
)
from fastrag.vector_store.sqlite.snapshot import EMPTY, Arena, Snapshot

if TYPE_CHECKING:
    from fastrag.vector_store.sqlite.ann.keeper import IndexKeeper

__all__ = ["SQLiteReplaceWriter", "SQLiteStoreStatus", "SQLiteVectorStore"]

logger = logging.getLogger("fastrag.vector_store")

_BUSY_CODES = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (primary result codes)
_DAMAGED_CODES = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB
# What reading a damaged file can raise in our own decoding (packed arrays, JSON, text) once SQLite has
# handed back bytes that are not what was written: a row id past an array, an unknown key, bad UTF-8, a
# BLOB where text was stored.
_CORRUPT_DATA = (LookupError, ValueError, TypeError, OverflowError)


def _corrupt(exc: BaseException) -> str:
    return (
        f"the store file looks damaged: reading it failed with {type(exc).__name__}: {exc}; restore it from a "
        "backup or rebuild it with `fastrag index`"
    )
_BUSY_TIMEOUT_S = 5.0  # how long every connection waits for a lock before SQLITE_BUSY
_PRIVATE_PATHS = (":memory:", "")  # databases private to one connection: no pool of readers
_VECTOR_INDEXES = ("exact", "hnsw", "pq")
_THREADS_PER_CONNECTION = 2
"""Worker threads a connection may have at once: the one using it and one parked, ready to take it when it
comes back (:meth:`SQLiteVectorStore._limiters`)."""
T = TypeVar("T")
# Per event loop (an anyio RunVar) and per store: the capacity limiters gating the hop into a worker thread,
# (reads, writer). A limiter belongs to one event loop; a store used from several loops gets one per loop.
_LIMITERS: anyio.lowlevel.RunVar[weakref.WeakKeyDictionary[Any, tuple[anyio.CapacityLimiter, anyio.CapacityLimiter]]] = (
    anyio.lowlevel.RunVar("fastrag_sqlite_limiters")
)


def _languages_of(value: str) -> tuple[str, ...]:
    return tuple(json.loads(value))


class SQLiteVectorStore(AsyncResource):
    """Documents, vectors and a BM25 index in one SQLite database.

    Args:
        path: a database file (created with its parent folders if missing) or ``":memory:"``.
        dimension: expected vector width; when ``None`` it is fixed by the first write with embeddings.
            A file remembers its dimension; reopening it with another raises.
        embedding_model: the name of the embedder whose vectors the store holds; recorded on first use,
            and reopening with a different name raises, so vectors of two models are never mixed.
        analyzer: the BM25 text analysis. A file remembers its analyzer's language; reopening it with
            another raises. ``None`` (default): the analysis the file was built with (its language, and
            whether Snowball's stopwords are dropped), English stemming and stopwords for a new file, so a
            store built by ``fastrag eval --language ru`` opens as it was built.
        read_connections: how many read-only connections a file store may open for concurrent reads (an
            int > 0; default ``min(4, os.cpu_count())``). They are opened on demand, reused, and closed by
            ``aclose()``; the store holds at most this many plus its one writer connection. Ignored for
            ``":memory:"``, which runs everything on one connection.
        vector_index: ``"exact"`` (default): k-NN scans every vector, exact. ``"hnsw"``: approximate k-NN
            through an HNSW graph (:class:`~fastrag.vector_store.sqlite.ann.HNSWIndex`), best on real
            embeddings. ``"pq"``: a 4-bit product-quantisation fast scan whose best 256 candidates are
            re-scored exactly (:class:`~fastrag.vector_store.sqlite.ann.PQFastScanIndex`): still a scan, but
            of 64-byte codes; it is what reaches recall@10 0.96 at a twentieth of the exact time on a
            million unstructured vectors. Both need faiss (``pip install "fastrag-retrieval[ann]"``), are built on the
            first dense search, extended by each later search with the vectors written since, and saved
            beside the store file (``<path>-<store id>.hnsw`` / ``.pq``) so the next process opens them
            instead of building them, when the file is of this store's history (not after a backup was
            restored over it: :mod:`fastrag.vector_store.sqlite.ann.keeper`); a failed save is logged, never
            raised by a search. Recall and speed by corpus: ``docs/ann.md``. Filtered searches stay
            complete (a rare filter is answered exactly). ``":memory:"`` stores keep the index in memory.
        ef_search: the HNSW candidate list per search (an int > 0; ``None``: the index's default): larger
            is slower and closer to exact. Only for ``vector_index="hnsw"``.
        read_only: ``None`` (default): read-write when this process can write the file, its folder and its
            journal (``<path>-wal``, ``<path>-shm``), else read-only (a read-only file system, a file or
            folder this user may not write; logged at INFO on logger ``fastrag.vector_store``, WARNING
            when only an immutable open is possible: :mod:`fastrag.vector_store.sqlite.access`).
            ``True``: read-only whatever the permissions. ``False``: read-write or
            :class:`~fastrag.errors.BackendUnavailableError`. A read-only store searches, counts and gets
            as any other; :meth:`upsert`, :meth:`delete` and :meth:`clear` raise
            :class:`~fastrag.errors.ReadOnlyStoreError`; ``read_only`` (the attribute) and :meth:`status`
            say which it is.

    Every connection waits up to 5 seconds for a lock held by another connection (SQLite's busy timeout)
    before a call fails with :class:`~fastrag.errors.TransientBackendError`.

    Raises:
        BackendUnavailableError: the file cannot be opened or is not a fastrag database; or, read-only, it
            does not exist, needs a migration or a re-analysis (which write), or its journal cannot be read
            (:func:`fastrag.vector_store.sqlite.access.choose`); or ``read_only=False`` and it is not writable.
        ConfigurationError: ``dimension``, ``embedding_model`` or the analyzer differ from the file's; or
            ``vector_index="hnsw"`` or ``"pq"`` without faiss installed (raised by the first dense search).
        InvalidParameterError: ``dimension``, ``read_connections`` or ``ef_search`` is not a positive int,
            or ``vector_index`` is not ``"exact"``, ``"hnsw"`` or ``"pq"``.

    Example::

        async with SQLiteVectorStore(":memory:") as store:
            await store.upsert([Document(id="1", content="BM25 ranks documents")])
            hits = await store.search_text("ranking", k=5)
    """

    accepts_language = True  # search_text(..., language=): fastrag.protocols.SupportsQueryLanguage

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
        vector_index: str = "exact",
        ef_search: int | None = None,
        read_only: bool | None = None,
    ) -> None:
        if vector_index not in _VECTOR_INDEXES:
            raise InvalidParameterError(f"vector_index must be one of {_VECTOR_INDEXES}, got {vector_index!r}")
        if ef_search is not None:
            check_positive_int(ef_search, "ef_search")
            if vector_index != "hnsw":
                raise InvalidParameterError(f"ef_search applies to vector_index='hnsw' only, not {vector_index!r}")
        self.vector_index = vector_index
        self._ef_search = ef_search
        self._ann: IndexKeeper | None = None  # the approximate index (vector_index "hnsw" or "pq"), once opened
        if dimension is not None and (not isinstance(dimension, int) or dimension <= 0):
            raise InvalidParameterError(f"dimension must be a positive int, got {dimension!r}")
        if read_connections is not None:
            check_positive_int(read_connections, "read_connections")
        if read_only not in (None, True, False):
            raise InvalidParameterError(f"read_only must be None, True or False, got {read_only!r}")
        if read_only and str(path) in _PRIVATE_PATHS:
            raise InvalidParameterError(f"read_only=True needs a store file, not {str(path)!r} (a private, empty database)")
        self.path = str(path)
        self.analyzer = analyzer or Analyzer()
        self._adopt_analysis = analyzer is None
        self._private = self.path in _PRIVATE_PATHS
        self._max_readers = read_connections or min(4, os.cpu_count() or 1)
        self._lock = threading.Lock()  # the writer connection (and, for a private database, every call)
        self._maintenance = maintenance.MaintenanceRecord()  # the last post-commit merge's outcome
        # the pool of read connections: guarded by _pool; _busy counts those checked out, _opening those
        # being opened; every open reader is in _readers, the idle ones also in _idle (last used on top).
        # The hop into a worker thread is gated by a capacity limiter of two per connection (_limiters),
        # so at most one thread per connection ever waits here, and a returned connection wakes one.
        self._pool = threading.Condition(threading.Lock())
        self._readers: list[sqlite3.Connection] = []
        self._idle: list[sqlite3.Connection] = []
        self._busy = 0
        self._opening = 0
        # the newest snapshot a read has seen, the arena its arrays live in, and the metadata columns
        # (key -> (column by rowid, the generation from which it is valid)); replaced under _cache_lock
        self._cache_lock = threading.Lock()
        self._snapshot: Snapshot = EMPTY
        self._arena: Arena | None = None
        self._columns: dict[str, tuple[Column, int]] = {}
        self._postings = lexical.PostingsCache()  # hot terms' postings rows, valid across states
        self._access = access.READ_WRITE
        self._conn = self._open(read_only)
        try:
            self._check_opened(dimension, embedding_model)
        except BaseException:
            self._conn.close()
            raise

    def _check_opened(self, dimension: int | None, embedding_model: str | None) -> None:
        """Check the file's recorded settings against ours, and record what is missing (constructor)."""
        try:
            self.dimension: int | None = self._check_meta("dimension", dimension, int)
            self.embedding_model: str | None = self._check_meta("embedding_model", embedding_model, str)
            if self._adopt_analysis:
                self.analyzer = self._recorded_analyzer()
            self._check_meta("analyzer_language", self.analyzer.language or "none", str)
            self._per_language = self._language_analysis()
            self._check_analysis()
            self._stored_languages(self._conn)  # recorded once for a file from before the record
            self._store_id: str | None = self._check_meta("store_id", None, str) or (
                None if self.read_only else self._new_store_id()
            )
            if not self.read_only:
                name_state(self._conn)  # the state as opened has a token, which an ANN index file built from it keeps
            self._open_ann()
        except FastragError:
            raise
        except (sqlite3.Error, *_CORRUPT_DATA) as exc:  # a damaged file can fail anywhere in these reads
            raise BackendUnavailableError(f"cannot open SQLite store {self.path}: {_corrupt(exc)}", store=self.path) from exc

    # ------------------------------------------------------------------ lifecycle

    def __repr__(self) -> str:
        return f"SQLiteVectorStore({self.path!r})"

    @property
    def read_only(self) -> bool:
        """Whether the store was opened read-only (writes raise :class:`~fastrag.errors.ReadOnlyStoreError`)."""
        return self._access.read_only

    def _refuse_writes(self, what: str) -> None:
        if self._access.read_only:
            raise ReadOnlyStoreError(
                f"the store is opened read-only ({self._access.reason}): {what} is refused; open it where "
                "it is writable to change it",
                store=self.path,
            )

    def _connect(self, *, reader: bool) -> sqlite3.Connection:
        """A connection with this store's settings: busy timeout, PRAGMAs."""
        target = self._access.target or self.path
        conn = sqlite3.connect(
            target, check_same_thread=False, isolation_level=None, timeout=_BUSY_TIMEOUT_S, uri=self._access.uri
        )
        cancellation.install(conn)  # a cancelled read stops inside SQLite (fastrag.vector_store.sqlite.cancellation)
        try:
            if not self._private:
                conn.execute("PRAGMA synchronous=NORMAL")
            if reader or self._access.read_only:
                conn.execute("PRAGMA query_only=ON")  # a reader can never write, whatever runs on it
        except BaseException:
            conn.close()
            raise
        return conn

    def _open(self, read_only: bool | None) -> sqlite3.Connection:
        """The writer connection (read-only for a store opened so), with the schema created or checked."""
        path = self.path
        try:
            if not self._private:
                self._access = access.choose(path, read_only=read_only)
                if self._access.read_only:
                    log = logger.warning if self._access.mode == "immutable" else logger.info
                    log("%s: opened %s (%s); searches work, writes raise ReadOnlyStoreError%s", path,
                        self._access.mode, self._access.reason,
                        "; commits made later by another process are not seen" if self._access.mode == "immutable" else "")
                else:
                    Path(path).parent.mkdir(parents=True, exist_ok=True)
            conn = self._connect(reader=False)
            try:
                if not self._private and not self._access.read_only:
                    conn.execute("PRAGMA journal_mode=WAL")  # persistent: the readers find the file in WAL mode
                create_or_migrate(conn, path, read_only=self._access.read_only)
            except BaseException:
                conn.close()
                raise
        except (sqlite3.Error, OSError) as exc:
            raise BackendUnavailableError(f"cannot open SQLite store: {exc}", store=path) from exc
        except _CORRUPT_DATA as exc:  # e.g. a damaged header decoded as text
            raise BackendUnavailableError(f"cannot open SQLite store {path}: {_corrupt(exc)}", store=path) from exc
        return conn

    def _recorded_analyzer(self) -> Analyzer:
        """The analyzer the file was built with (for ``analyzer=None``): its recorded language, with
        Snowball's stopwords when its recorded signature names them; English for a new file."""
        rows = dict(self._conn.execute("SELECT key, value FROM meta WHERE key IN ('analyzer_language', 'analysis')"))
        language = rows.get("analyzer_language")
        if language is None or language == "en":
            return self.analyzer
        if language == "none":
            return Analyzer(None)
        if language not in SNOWBALL_LANGUAGES:
            raise ConfigurationError(f"{self.path}: the store was built with analyzer_language={language!r}, which "
                                     "this version of fastrag cannot analyse; use a new store")
        stopwords = language not in SNOWBALL_STOPWORD_LANGUAGES or " stopwords=snowball" in rows.get("analysis", "")
        return Analyzer(language, stopwords=stopwords)

    def _check_meta(self, key: str, wanted: Any, kind: type) -> Any:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        if row is None:
            if wanted is not None and not self.read_only:  # a read-only store records nothing
                self._conn.execute("INSERT INTO meta VALUES (?, ?)", (key, str(wanted)))
            return wanted
        stored = kind(row[0])
        if wanted is not None and stored != wanted:
            raise ConfigurationError(
                f"{self.path}: the store was built with {key}={stored!r}, not {wanted!r}; "
                "use a new store or the same settings"
            )
        return stored

    def _new_store_id(self) -> str:
        """A random id for this store file, recorded once: files beside it (the ANN index) carry it in
        their name, so a store recreated at the same path never opens another store's index."""
        self._conn.execute("INSERT OR IGNORE INTO meta VALUES ('store_id', ?)", (uuid.uuid4().hex,))
        store_id = self._conn.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()[0]
        if not self._private:  # index files of a store that lived at this path before: never opened again
            folder, name = os.path.split(os.path.abspath(self.path))
            stale = re.escape(name) + r"-[0-9a-f]{32}\.(hnsw|pq)"
            for entry in os.listdir(folder or "."):
                if re.fullmatch(stale, entry) and store_id not in entry:
                    with contextlib.suppress(OSError):
                        os.remove(os.path.join(folder, entry))
            from fastrag.vector_store.sqlite.ann import files

            files.remove_abandoned(folder or ".", stale)  # and what their crashed saves left
        return store_id

    def _open_ann(self) -> None:
        """Hold the approximate index's keeper (``vector_index`` "hnsw" or "pq"), and remove what saves of
        this store's index files killed midway left (every kind: the files are this store's; never a save
        another live process is writing, :mod:`fastrag.vector_store.sqlite.ann.files`). Imports no faiss."""
        from fastrag.vector_store.sqlite.ann import files
        from fastrag.vector_store.sqlite.ann.keeper import IndexKeeper

        if not self._private and not self.read_only and self._store_id is not None:
            folder, name = os.path.split(os.path.abspath(self.path))
            files.remove_abandoned(folder or ".", re.escape(f"{name}-{self._store_id}") + r"\.(hnsw|pq)")
        if self.vector_index != "exact":
            path = None if self._private or self._store_id is None else f"{self.path}-{self._store_id}.{self.vector_index}"
            self._ann = IndexKeeper(self.vector_index, path=path, store=self.path, store_id=self._store_id or "",
                                    read_only=self.read_only)  # fmt: skip

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
        if not self.read_only:
            self._conn.execute("INSERT OR IGNORE INTO meta VALUES ('language_analysis', ?)", (mode,))
        return mode == "per_document"

    def _check_analysis(self) -> None:
        """Re-analyse the stored documents when their postings were made by another analysis.

        The file records :attr:`Analyzer.signature <fastrag.analysis.Analyzer.signature>` (meta
        ``analysis``; a file without it was written before issue 14, by analysis version 1). When the
        signature differs and the store holds documents, every document is analysed again from its stored
        content and metadata and the BM25 lengths and segments are rewritten, in one transaction (an
        interruption leaves the old index), with a warning on logger ``fastrag.vector_store`` saying so
        and how long it took: about the time of indexing the text again, without embedding it.
        """
        signature = self.analyzer.signature
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'analysis'").fetchone()
        if row is not None and row[0] == signature:
            return
        empty = self._conn.execute("SELECT 1 FROM documents LIMIT 1").fetchone() is None
        if self.read_only:
            if empty:
                return
            raise BackendUnavailableError(
                f"the store's BM25 index was made by {row[0] if row else 'fastrag-analysis/1'}, and this fastrag "
                f"analyses text as {signature}; it must be re-analysed, which writes, but it is opened read-only "
                f"({self._access.reason}): open it once where it is writable",
                store=self.path,
            )
        if empty:
            self._conn.execute("INSERT OR REPLACE INTO meta VALUES ('analysis', ?)", (signature,))
            return
        started = time.perf_counter()
        count = self._reanalyse(signature)
        if count:
            logger.warning(
                "%s: the BM25 index was made by %s; re-analysed its %d documents with %s in %.1f s",
                self.path, row[0] if row else "fastrag-analysis/1", count, signature, time.perf_counter() - started,
            )

    def _reanalyse(self, signature: str) -> int:
        """Rewrite every block's BM25 lengths and every segment from the documents analysed anew (one
        transaction); returns how many documents were analysed (0 when another process just did it)."""
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'analysis'").fetchone()
            if row is not None and row[0] == signature:
                conn.execute("ROLLBACK")
                return 0
            dim = meta_int(conn, "dimension", 0)
            keys, vectors, flags = [], [], []
            for rows_b, vectors_b, flags_b in conn.execute("SELECT rows, vectors, has_vector FROM blocks ORDER BY id"):
                rows = np.frombuffer(rows_b, dtype="<i4")
                keys.append(rows)
                if vectors_b is None:
                    vectors.append(np.zeros((len(rows), dim), dtype=np.float32))
                    flags.append(np.zeros(len(rows), dtype=bool))
                else:
                    vectors.append(np.frombuffer(vectors_b, dtype="<f4").reshape(len(rows), -1))
                    flags.append(np.ones(len(rows), dtype=bool) if flags_b is None
                                 else np.frombuffer(flags_b, dtype=np.uint8).astype(bool))
            key = np.concatenate(keys) if keys else np.zeros(0, dtype=np.int32)
            order = np.argsort(key, kind="stable")
            key = key[order]
            matrix = np.concatenate(vectors)[order] if keys else np.zeros((0, dim), dtype=np.float32)
            has = np.concatenate(flags)[order] if keys else np.zeros(0, dtype=bool)
            for table in ("blocks", "postings", "segments", "tombstones"):
                conn.execute(f"DELETE FROM {table}")
            count = 0
            cursor = conn.execute("SELECT rowid, id, content, metadata FROM documents ORDER BY rowid")
            while batch := cursor.fetchmany(BLOCK_ROWS):
                rowids = np.array([r[0] for r in batch], dtype=np.int64)
                counts = [
                    Counter(self._index_terms(Document(id=i, content=c, metadata=json.loads(m)))) for _, i, c, m in batch
                ]
                at = np.minimum(np.searchsorted(key, rowids), max(len(key) - 1, 0))
                found = (key[at] == rowids) if len(key) else np.zeros(len(rowids), dtype=bool)
                block_has = has[at] & found if len(key) else found
                block_vectors = matrix[at] if dim and len(key) else None
                if block_vectors is not None:
                    block_vectors = np.where(block_has[:, None], block_vectors, np.float32(0.0))
                conn.execute(
                    "INSERT INTO blocks (rows, lengths, vectors, has_vector) VALUES (?, ?, ?, ?)",
                    snapshot.encode_block(rowids, np.array([c.total() for c in counts], dtype=np.int64),
                                          block_vectors, block_has),
                )
                lexical.write_segment(conn, rowids.tolist(), counts, level=8)  # a level small writes reach late
                count += len(batch)
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('analysis', ?)", (signature,))
            conn.execute(BUMP_SQL)
            conn.execute("COMMIT")
        except BaseException as exc:
            rollback(conn, exc)
            raise
        return count

    def _language_key(self, language: object) -> str:
        """How a document's language is recorded among the store's languages: the code whose analysis it
        got (``""`` for the store's own analyzer)."""
        if not self._per_language:
            return ""
        analyzer = self.analyzer.for_language(language)  # type: ignore[arg-type]
        return "" if analyzer is self.analyzer else str(primary_language(language))

    def _stored_languages(self, conn: sqlite3.Connection) -> tuple[str, ...]:
        """The recorded languages of the stored documents (meta ``languages``, a JSON list: ``""`` is the
        store's own analyzer). Recorded by every write; a store written before the record lists its
        documents' languages once, here (one scan of their metadata)."""
        row = conn.execute("SELECT value FROM meta WHERE key = 'languages'").fetchone()
        if row is not None:
            return _languages_of(row[0])
        found = {
            self._language_key(value)
            for (value,) in conn.execute("SELECT DISTINCT json_extract(metadata, '$.language') FROM documents")
        }
        if not conn.execute("PRAGMA query_only").fetchone()[0]:
            conn.execute("INSERT OR IGNORE INTO meta VALUES ('languages', ?)", (json.dumps(sorted(found)),))
        return tuple(sorted(found))

    async def languages(self) -> tuple[str, ...]:
        """The languages the stored documents were analysed in (ISO 639-1 codes from their
        ``metadata["language"]``, sorted; ``""`` stands for documents analysed by the store's own analyzer:
        no language, one without analysis of its own, or a store without per-language analysis). A
        language stays listed after its last document is deleted."""
        return await self._read(lambda conn, snap: self._stored_languages(conn))

    def _query_analyzers(self, conn: sqlite3.Connection, language: str | None) -> list[Analyzer]:
        """The analyses a question goes through: its language's when given; else each language the store
        holds (issue 14: never English only against documents stemmed otherwise)."""
        if language is not None or not self._per_language:
            return [self._analyzer_for(language)]
        held = self._stored_languages(conn)
        analyzers = {id(a): a for a in (self.analyzer.for_language(code or None) for code in held)}
        return list(analyzers.values()) or [self.analyzer]

    def _analyzer_for(self, language: object) -> Analyzer:
        """The analysis for text in ``language`` (the store's own when ``None`` or per-language analysis is off)."""
        return self.analyzer.for_language(language) if self._per_language else self.analyzer  # type: ignore[arg-type]

    async def _aclose(self) -> None:
        """Close every connection of the store (``aclose()``).

        New calls are refused at once (:class:`~fastrag.errors.BackendUnavailableError`; ``closed`` is
        already true); calls already running finish first, then their connections are closed too.
        """
        await anyio.to_thread.run_sync(self._close_sync)

    def _close_sync(self) -> None:
        with self._pool:
            self._pool.notify_all()  # reads waiting for a connection see the store closed and raise
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
        if getattr(exc, "sqlite_errorcode", 0) & 0xFF in _DAMAGED_CODES:
            return BackendError(f"SQLite error: {exc}: the store file is damaged; restore it from a backup or "
                                "rebuild it with `fastrag index`", store=self.path)  # fmt: skip
        return BackendError(f"SQLite error: {exc}", store=self.path)

    def _limiters(self) -> tuple[anyio.CapacityLimiter, anyio.CapacityLimiter]:
        """This event loop's capacity limiters of this store: ``(reads, writer)``.

        Every hop into a worker thread takes a token first: two per connection (``_THREADS_PER_CONNECTION``),
        ``read_connections`` connections for reads of a file store, one for what runs on the writer
        connection (writes; every call of a ``":memory:"`` store). So each connection has at most one
        thread using it and one parked, ready to take it the moment it comes back (and woken alone,
        ``notify``); calls beyond that wait in the event loop, in order. Issue 28: a search parked a worker
        thread on the read pool, up to anyio's 40, and every returned connection woke all of them.

        Two per connection rather than one, by measurement (``benchmarks/results/concurrency-variants.md``):
        with one, a returned connection idles until the event loop has handed the next call to a thread,
        which cost 25-40% of the queries/s at 32 calls in flight on a busy 2-core machine; the waiting
        thread takes it at once.

        The limiters live per event loop (an anyio ``RunVar``), as a limiter belongs to one: a store used
        from several loops at once can park more threads, which the pool's condition still serves in turn.
        """
        table = _LIMITERS.get(None)
        if table is None:
            table = weakref.WeakKeyDictionary()
            _LIMITERS.set(table)
        limiters = table.get(self)
        if limiters is None:
            limiters = table[self] = (
                anyio.CapacityLimiter(_THREADS_PER_CONNECTION * self._max_readers),
                anyio.CapacityLimiter(_THREADS_PER_CONNECTION),
            )
        return limiters

    def _refuse_if_closed(self) -> None:
        if self.closed:
            raise BackendUnavailableError("store is closed", store=self.path)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` in a worker thread holding the writer connection's lock (one such thread at a
        time: the writer limiter)."""
        self._refuse_if_closed()

        def call() -> T:
            with self._lock:
                if self.closed:
                    raise BackendUnavailableError("store is closed", store=self.path)
                return self._mapped(fn, *args)

        return await anyio.to_thread.run_sync(call, limiter=self._limiters()[1])

    def _mapped(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` with SQLite's errors (and damaged data) raised as ours."""
        try:
            return fn(*args)
        except sqlite3.Error as exc:
            if cancellation.is_interrupt(exc):
                cancellation.raise_if_cancelled()  # the caller was cancelled: raise that, not an error
            raise self._error(exc) from exc
        except FastragError:
            raise
        except _CORRUPT_DATA as exc:
            raise BackendError(_corrupt(exc), store=self.path) from exc

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, snapshot, *args)`` in one worker thread, inside one read transaction.

        Every statement ``fn`` runs on ``conn`` sees the same committed state, and ``snapshot`` is the
        in-memory view of that state (:meth:`_snapshot_for`). A file store takes a connection from the read pool; a private
        (``":memory:"``) one uses its only connection under the lock. At most two threads per read
        connection hop in at once, one reading and one ready (:meth:`_limiters`); the other calls wait in
        the event loop.
        """
        if self._private:
            return await self._run(lambda: self._in_snapshot(self._conn, fn, args))
        self._refuse_if_closed()
        return await anyio.to_thread.run_sync(self._pooled_read, fn, args, limiter=self._limiters()[0])

    def _pooled_read(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        conn = self._checkout()
        healthy = False
        try:
            result = self._in_snapshot(conn, fn, args)
            healthy = True
            return result
        except sqlite3.Error as exc:
            if cancellation.is_interrupt(exc):
                healthy = not conn.in_transaction
                cancellation.raise_if_cancelled()  # the caller was cancelled: raise that, not an error
            raise self._error(exc) from exc
        except FastragError:
            healthy = not conn.in_transaction  # our own error (a bad filter): the connection is fine
            raise
        except _CORRUPT_DATA as exc:
            healthy = not conn.in_transaction
            raise BackendError(_corrupt(exc), store=self.path) from exc
        except BaseException:  # anything else, the caller's cancellation raised by a checkpoint included
            healthy = not conn.in_transaction
            raise
        finally:
            self._checkin(conn, healthy=healthy)

    def _checkout(self) -> sqlite3.Connection:
        """An idle read connection, a new one while fewer than ``read_connections`` are open, or wait."""
        with self._pool:
            while True:
                if self.closed:
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
                if conn is None or self.closed:  # a slot came free; or aclose waits for this one
                    self._wake()
        return conn

    def _checkin(self, conn: sqlite3.Connection, *, healthy: bool) -> None:
        """Return a read connection to the pool; one left in a bad state is closed instead."""
        with self._pool:
            self._busy -= 1
            if healthy:
                self._idle.append(conn)
            else:
                self._readers.remove(conn)
            self._wake()
        if not healthy:
            conn.close()

    def _wake(self) -> None:
        """A connection (or a slot for one) came free: wake one waiting read, which takes it; once the
        store is closing, wake every waiter (aclose waits for the last connection, and waiting reads must
        see the store closed). Called holding ``_pool``."""
        if self.closed:
            self._pool.notify_all()
        else:
            self._pool.notify()

    # ------------------------------------------------------------------ snapshots

    def _in_snapshot(self, conn: sqlite3.Connection, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        """``fn(conn, snapshot, *args)`` inside one read transaction on ``conn``; rolled back after."""
        conn.execute("BEGIN")
        try:
            with cancellation.reading():  # a cancelled caller stops this read (SQL and filter loops)
                # the first read starts the transaction's snapshot; the generation names the state it sees
                generation = conn.execute(GENERATION_SQL).fetchone()[0]
                with cancellation.uninterrupted():  # it appends to the shared arena: whole or not at all
                    snap = self._snapshot_for(conn, generation)
                return fn(conn, snap, *args)
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")  # a read transaction: nothing to commit

    def _snapshot_for(self, conn: sqlite3.Connection, generation: int) -> Snapshot:
        """The in-memory view of the state ``conn``'s transaction sees, from the cache when it is that state.

        A newer state extends the cache by what was written since and replaces it; an older one (a read
        that began before another read refreshed the cache) gets a view of its own.
        """
        cached = self._snapshot
        if cached.generation == generation:
            return cached
        with self._cache_lock:
            cached = self._snapshot
            if cached.generation == generation:
                return cached
            dim = self.dimension
            if dim is None:  # fixed by another connection's first write
                row = conn.execute("SELECT value FROM meta WHERE key = 'dimension'").fetchone()
                dim = self.dimension = int(row[0]) if row else None
            snap, arena, newer = snapshot.load(conn, generation, cached, self._arena, dim or 0)
            if newer:
                self._snapshot, self._arena = snap, arena
            return snap

    def _mask(self, conn: sqlite3.Connection, snap: Snapshot, node: Filter) -> np.ndarray:
        """``(snap.size,)`` bool by rowid: live documents of ``snap`` that match ``node``."""
        size = snap.size
        mask = filter_mask(node, size, lambda key: self._column(conn, snap, key))
        return mask & snap.live

    def _column(self, conn: sqlite3.Connection, snap: Snapshot, key: str) -> Column:
        """The values of metadata ``key`` by rowid for ``snap`` (at least ``snap.size`` rows)."""
        cached = self._columns.get(key)
        if cached is not None and len(cached[0]) >= snap.size and snap.generation >= cached[1]:
            return cached[0].head(snap.size)
        with self._cache_lock:
            cached = self._columns.get(key)
            if cached is not None and snap.generation >= cached[1]:
                column, valid_from = cached
                if len(column) >= snap.size:
                    return column.head(snap.size)
                column = column.concat(load_column(conn, key, len(column), snap.size))
                # rows deleted before this state read as missing: valid for this state and later ones
                self._columns[key] = (column, max(valid_from, snap.generation))
                return column
            column = load_column(conn, key, 0, snap.size)
            if cached is None or snap.generation >= cached[1]:
                self._columns[key] = (column, snap.generation)
            return column

    # ------------------------------------------------------------------ writes

    async def upsert(self, documents: Sequence[Document], *, embeddings: np.ndarray | None = None) -> None:
        """Insert or replace ``documents`` by id in one transaction.

        Args:
            documents: the documents; their ``content``, ``metadata["title"]`` and section headings are
                indexed for BM25. Metadata must be JSON-serialisable.
            embeddings: ``(len(documents), dim)`` float32 (other float dtypes are converted), finite.
                ``None`` stores the documents without vectors: they are found by BM25 but not by k-NN.

        Raises:
            DimensionMismatchError: the width differs from the store's dimension, or the row count from
                ``len(documents)``.
            InvalidParameterError: a vector holds NaN or infinity, an id repeats, or metadata is not JSON.
            ReadOnlyStoreError: the store is opened read-only (:attr:`read_only`); nothing was written.
            BackendError: SQLite failed; nothing was written (with SQLite's own error: "database or disk
                is full" when the disk filled).

        Once the write has committed, the BM25 segments are merged when a level is full
        (:mod:`fastrag.vector_store.sqlite.maintenance`), in transactions of their own. A failure there
        does not fail the call, whose documents are stored: it is logged at ERROR on logger
        ``fastrag.vector_store`` with SQLite's error, reported by :meth:`status`, and the merge is run
        again by the next write.
        """
        self._refuse_writes("upsert")
        prepared = await self._prepare(documents, embeddings)
        if prepared is not None:
            await self._run(self._upsert_sync, *prepared)

    async def _prepare(
        self, documents: Sequence[Document], embeddings: np.ndarray | None
    ) -> tuple[list[tuple[str, str, str]], list[Counter[str]], np.ndarray | None, set[str]] | None:
        """The rows, BM25 term counts, normalised vectors and languages of an upsert (checked, as
        :meth:`upsert` documents); ``None`` for no documents."""
        docs = list(documents)
        if not docs:
            return None
        check_unique_ids(docs)
        matrix = self._embedding_matrix(embeddings, len(docs))
        try:
            rows = [(d.id, d.content, metadata_json(d)[1]) for d in docs]
        except RecursionError as exc:
            raise InvalidParameterError("document metadata nests too deeply to store") from exc
        for doc_id, content, metadata in rows:
            try:
                doc_id.encode("utf-8"), content.encode("utf-8"), metadata.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InvalidParameterError(
                    f"document {doc_id!r} holds text that is not valid Unicode ({exc.reason}); nothing was written"
                ) from exc

        def analyse() -> list[Counter[str]]:
            return [Counter(self._index_terms(d)) for d in docs]

        counts = await anyio.to_thread.run_sync(analyse)
        languages = {self._language_key(d.metadata.get("language")) for d in docs}
        return rows, counts, matrix, languages

    def _index_terms(self, doc: Document) -> list[str]:
        """BM25 terms of a document: its title, its section headings (below the title) and its content."""
        title = doc.metadata.get("title")
        parts = [title] if isinstance(title, str) and title else []
        headings = doc.metadata.get("headings")
        if isinstance(headings, list | tuple):
            parts.extend(h for h in headings if isinstance(h, str) and h != title)
        parts.append(doc.content)
        return self._analyzer_for(doc.metadata.get("language")).analyze("\n".join(parts))

    def _embedding_matrix(self, embeddings: np.ndarray | None, n: int) -> np.ndarray | None:
        """The vectors as an ``(n, dim)`` float32 matrix, L2-normalised (zero rows stay zero)."""
        if embeddings is None:
            return None
        matrix = np.asarray(embeddings, dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[0] != n or matrix.shape[1] == 0:
            raise DimensionMismatchError(f"embeddings must have shape ({n}, dim), got {matrix.shape}")
        check_dimension(matrix.shape[1], self.dimension, store=self.path, what="embeddings have")
        if not np.isfinite(matrix).all():
            raise InvalidParameterError("embeddings contain NaN or infinity")
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)

    def _upsert_sync(
        self, rows: list[tuple[str, str, str]], counts: list[Counter[str]], matrix: np.ndarray | None,
        languages: set[str] | None = None,
    ) -> None:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            self._insert_rows(rows, counts, matrix, languages)
            conn.execute("COMMIT")
        except BaseException as exc:
            rollback(conn, exc)  # SQLite may have rolled back already (disk full): keep its error
            raise
        if matrix is not None and self.dimension is None:
            self.dimension = int(matrix.shape[1])
        self._maintain()

    def _insert_rows(
        self, rows: list[tuple[str, str, str]], counts: list[Counter[str]], matrix: np.ndarray | None,
        languages: set[str] | None = None,
    ) -> None:
        """Insert or replace ``rows`` inside the writer connection's open transaction."""
        conn = self._conn
        if languages:
            known = set(self._stored_languages(conn))
            if not languages <= known:
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('languages', ?)",
                             (json.dumps(sorted(known | languages)),))
        if matrix is not None:
            stored = conn.execute("SELECT value FROM meta WHERE key = 'dimension'").fetchone()
            check_dimension(matrix.shape[1], int(stored[0]) if stored else None, store=self.path, what="embeddings have")
            if stored is None:
                conn.execute("INSERT INTO meta VALUES ('dimension', ?)", (str(matrix.shape[1]),))
        old = rowids_of(conn, [r[0] for r in rows])
        if old:
            delete_rows(conn, sorted(old.values()))
        first = meta_int(conn, "next_rowid")
        rowids = list(range(first, first + len(rows)))
        if rowids[-1] > MAX_ROWID:
            raise BackendError(f"the store has used all {MAX_ROWID} row ids; copy it into a new store", store=self.path)
        conn.executemany(
            "INSERT INTO documents (rowid, id, content, metadata) VALUES (?, ?, ?, ?)",
            [(r, *row) for r, row in zip(rowids, rows, strict=True)],
        )
        lengths = np.array([c.total() for c in counts], dtype=np.int64)
        has_vector = np.full(len(rows), matrix is not None)  # a zero vector is stored (it scores 0)
        conn.execute(
            "INSERT INTO blocks (rows, lengths, vectors, has_vector) VALUES (?, ?, ?, ?)",
            snapshot.encode_block(np.array(rowids), lengths, matrix, has_vector),
        )
        lexical.write_segment(conn, rowids, counts)
        set_meta(conn, "next_rowid", rowids[-1] + 1)
        record_allocation(conn, rowids[-1] + 1)  # names this history for the ANN index file
        conn.execute(BUMP_SQL)

    def _maintain(self) -> None:
        """After a committed write: the BM25 merges and the compaction that are due
        (:func:`fastrag.vector_store.sqlite.maintenance.maintain`). The write is committed whatever happens
        here, so a failure (the disk filling during a merge) is not raised: it is recorded for
        :meth:`status`, logged at ERROR with SQLite's own error, and the next write runs the due steps again."""
        try:
            maintenance.maintain(self._conn)
        except Exception as exc:  # the write before it committed: never report it failed
            self._maintenance.failed(exc)
            logger.error(
                "%s: the BM25 segment merge after a committed write failed (%s: %s); the write is stored, the "
                "merge runs again at the next write (see status())",
                self.path, type(exc).__name__, exc, exc_info=not isinstance(exc, sqlite3.Error),
            )
        else:
            self._maintenance.succeeded()

    async def delete(self, *, ids: Sequence[str] | None = None, filter: FilterLike | None = None) -> int:
        """Delete documents in one transaction; return how many were removed.

        Args:
            ids: delete these ids (unknown ids are ignored).
            filter: delete documents matching this filter. With ``ids`` too, only documents that have one
                of the ids *and* match the filter are deleted.

        Raises:
            InvalidParameterError: neither ``ids`` nor ``filter`` was given (use :meth:`clear`).
            FilterError: the filter is malformed.
            ReadOnlyStoreError: the store is opened read-only (:attr:`read_only`).
        """
        self._refuse_writes("delete")
        if ids is None and filter is None:
            raise InvalidParameterError("delete needs ids or a filter; use clear() to delete everything")
        ids = id_list(ids)
        node = parse_filter(filter)
        return await self._run(self._delete_sync, ids, node, False)

    async def clear(self) -> int:
        """Delete every document; return how many were removed.

        Raises:
            ReadOnlyStoreError: the store is opened read-only (:attr:`read_only`).
        """
        self._refuse_writes("clear")
        return await self._run(self._delete_sync, None, None, True)

    @contextlib.asynccontextmanager
    async def atomic_replace(self, *, delete: FilterLike) -> AsyncIterator[SQLiteReplaceWriter]:
        """Replace the documents matching ``delete`` by those upserted through the writer, in one
        transaction however many batches it takes (:class:`~fastrag.protocols.SupportsAtomicReplace`).

        ::

            async with store.atomic_replace(delete=field("source_uri") == "big.txt") as writer:
                for documents, embeddings in batches:
                    await writer.upsert(documents, embeddings=embeddings)

        The documents matching ``delete`` when the write opens are deleted first; the writer's batches are
        then written (each as :meth:`upsert` writes, replacing by id). It commits when the block ends
        without an error; an error or a cancellation in the block rolls it all back. Readers of a file
        store see the old documents until the commit, then the new ones, never a part; the BM25 merges run
        after the commit, as after :meth:`upsert`. The write holds the store's writer connection (and the
        file's write lock) from opening to the end of the block: other writes wait for it (another process
        past its busy timeout gets a :class:`~fastrag.errors.TransientBackendError`), and so do the reads
        of a ``":memory:"`` store, whose one connection it is.

        Raises:
            FilterError: ``delete`` is malformed.
            ReadOnlyStoreError: the store is opened read-only (:attr:`read_only`).
            BackendError: SQLite failed; nothing of the write is stored. The writer's ``upsert`` raises
                as :meth:`upsert` does.
        """
        self._refuse_writes("atomic_replace")
        node = parse_filter(delete)
        self._refuse_if_closed()
        if node is None:
            raise InvalidParameterError("atomic_replace needs a filter of the documents it replaces")
        # one writer-limiter token for the whole write: other writers park at most one thread on the lock,
        # so the write's own steps (run without the limiter) always find a thread
        limiter = self._limiters()[1]
        await limiter.acquire()
        try:

            def begin() -> None:
                self._lock.acquire()
                try:
                    if self.closed:
                        raise BackendUnavailableError("store is closed", store=self.path)
                    try:
                        self._conn.execute("BEGIN IMMEDIATE")
                        self._delete_rows(None, node, False)
                    except BaseException as exc:
                        rollback(self._conn, exc)
                        raise
                except BaseException:
                    self._lock.release()
                    raise

            await anyio.to_thread.run_sync(partial(self._mapped, begin))
            writer = SQLiteReplaceWriter(self)

            def end(commit: bool) -> None:
                try:
                    if commit:
                        try:
                            self._mapped(self._conn.execute, "COMMIT")
                        except BaseException as exc:
                            rollback(self._conn, exc)
                            raise
                        if writer.dimension is not None and self.dimension is None:
                            self.dimension = writer.dimension
                        self._maintain()
                    elif self._conn.in_transaction:
                        self._conn.execute("ROLLBACK")
                finally:
                    self._lock.release()

            try:
                yield writer
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(end, False)
                raise
            finally:
                writer.closed = True
            with anyio.CancelScope(shield=True):  # a commit under way finishes; the lock is always released
                await anyio.to_thread.run_sync(end, True)
        finally:
            limiter.release()

    def _delete_sync(self, ids: list[str] | None, node: Filter | None, everything: bool) -> int:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            removed = self._delete_rows(ids, node, everything)
            conn.execute("COMMIT")
        except BaseException as exc:
            rollback(conn, exc)
            raise
        if removed:
            self._maintain()
        return removed

    def _delete_rows(self, ids: list[str] | None, node: Filter | None, everything: bool) -> int:
        """Delete inside the writer connection's open transaction, before it wrote anything: the filter is
        evaluated on the cached view of the committed state, which an uncommitted write must never enter."""
        conn = self._conn
        generation = meta_int(conn, "generation")
        if everything:
            rowids = [r[0] for r in conn.execute("SELECT rowid FROM documents")]
        else:
            if ids is not None:
                rowids = sorted(rowids_of(conn, ids).values()) if ids else []
            if node is not None:
                snap = self._snapshot_for(conn, generation)
                chosen = np.flatnonzero(self._mask(conn, snap, node))
                rowids = chosen.tolist() if ids is None else np.intersect1d(chosen, rowids).tolist()
        if rowids:
            delete_rows(conn, rowids)  # the trigger tombstones them
            conn.execute(BUMP_SQL)
        return len(rowids)

    # ------------------------------------------------------------------ reads

    async def count(self, *, filter: FilterLike | None = None) -> int:
        """How many documents the store holds, or how many match ``filter``.

        Raises:
            FilterError: the filter is malformed.
        """
        node = parse_filter(filter)

        def count(conn: sqlite3.Connection, snap: Snapshot) -> int:
            return snap.n_live if node is None else int(np.count_nonzero(self._mask(conn, snap, node)))

        return await self._read(count)

    async def get(
        self, *, ids: Sequence[str] | None = None, filter: FilterLike | None = None, limit: int | None = None
    ) -> list[Document]:
        """Documents with these ``ids`` and/or matching ``filter`` (all when neither), in id order.

        Raises:
            InvalidParameterError: ``ids`` is one string, or ``limit`` is not a positive int.
            FilterError: the filter is malformed.
        """
        wanted = id_list(ids)
        node = parse_filter(filter)
        if limit is not None:
            check_k(limit, "limit")

        def get(conn: sqlite3.Connection, snap: Snapshot) -> list[tuple[str, str, str]]:
            if wanted is not None:
                rows = []
                for chunk in chunks(wanted, IN_CHUNK):
                    rows += conn.execute(
                        f"SELECT id, content, metadata FROM documents WHERE id IN ({','.join('?' * len(chunk))})", chunk
                    ).fetchall()
                if node is not None:
                    rows = [r for r in rows if matches(node, json.loads(r[2]))]
                rows.sort(key=lambda r: r[0])
                return rows[:limit]
            if node is None:
                sql = "SELECT id, content, metadata FROM documents ORDER BY id"
                return conn.execute(sql + (f" LIMIT {int(limit)}" if limit else "")).fetchall()
            chosen = np.flatnonzero(self._mask(conn, snap, node)).tolist()
            keyed = sorted(select_rowids(conn, "id", chosen).items(), key=lambda item: item[1][0])[:limit]
            found = select_rowids(conn, "id, content, metadata", [r for r, _ in keyed])
            return [found[r] for r, _ in keyed]

        rows = await self._read(get)
        return [Document(id=i, content=c, metadata=json.loads(m)) for i, c, m in rows]

    async def search_text(
        self, query: str, *, k: int, filter: FilterLike | None = None, language: str | None = None
    ) -> list[Document]:
        """BM25 search: the ``k`` best documents sharing at least one analysed term with ``query``.

        Args:
            query: free text; analysed like the documents (stemming, stopwords, CJK bigrams).
            k: how many documents at most (an int > 0).
            filter: only documents matching it are ranked (applied before the top-k cut).
            language: the question's language (ISO 639-1, e.g. ``"de"``): the question is stemmed as
                documents in that language were. ``None``: the question is analysed in each language
                the store's documents were analysed in (:meth:`languages`; only the store's analyzer,
                English by default, when no document has a language of its own) and the terms of all
                these analyses are searched together. Documents in every language are searched either
                way. A term the question holds twice counts twice (Lucene's convention,
                :func:`~fastrag.scoring.query_term_counts`).

        Returns:
            Copies best first, with ``score`` = BM25 (unbounded, > 0 for any match, higher is better) and
            zero-based ``rank``; ties are broken by id. Empty when no document shares a term, or when the
            query has no terms left after analysis (only stopwords or punctuation).

        Raises:
            InvalidParameterError: ``k`` is not a positive int, ``query`` is not a string, or ``language``
                is neither ``None`` nor a registered language code
                (:func:`~fastrag.analysis.language_code`: ``"xx"`` and ``""`` are refused).
            FilterError: the filter is malformed.
            BackendError: SQLite failed.
        """
        check_k(k)
        if not isinstance(query, str):
            raise InvalidParameterError(f"query must be a string, got {type(query).__name__}")
        if language is not None and language_code(language) is None:
            raise InvalidParameterError(f"language must be None or a registered language code such as 'de', got {language!r}")
        node = parse_filter(filter)
        # the question is analysed in the worker thread too: stemming stays off the event loop, and the
        # other branch of a hybrid can start meanwhile
        return await self._read(self._search_text_sync, language, query, k, node, not rows_deferred(self))

    async def search_text_scoped(
        self,
        query: str,
        *,
        k: int,
        scope: FilterLike | None,
        filter: FilterLike | None = None,  # noqa: A002
        language: str | None = None,
    ) -> list[Document]:
        """BM25 search among the documents matching ``scope`` (and ``filter``), scored as if the store held
        only the documents matching ``scope``: ``N``, the document frequencies and ``avgdl`` are counted
        over them (:class:`~fastrag.protocols.SupportsScopedStatistics`; the tenant's own statistics, which
        :class:`~fastrag.scoping.ScopedStore` asks for). ``scope=None``: :meth:`search_text`.

        The scope's documents are a mask of the in-memory metadata columns (one vectorised pass over the
        store's rows, as any filter), its mean length a sum over that mask; ``df`` is counted within it from
        the query terms' postings, so the cost over :meth:`search_text` is about one filter evaluation.

        Args:
            query: as :meth:`search_text`.
            k: as :meth:`search_text`.
            scope: a fastrag filter (a tenant's ``equals``): the documents the statistics are counted over,
                and the only ones returned.
            filter: as :meth:`search_text`: narrows what is returned, not the statistics.
            language: as :meth:`search_text`.

        Returns:
            As :meth:`search_text`. A document's score depends only on the documents matching ``scope``.

        Raises:
            InvalidParameterError: as :meth:`search_text`.
            FilterError: the filter or the scope is malformed.
            BackendError: SQLite failed.
        """
        check_k(k)
        if not isinstance(query, str):
            raise InvalidParameterError(f"query must be a string, got {type(query).__name__}")
        if language is not None and language_code(language) is None:
            raise InvalidParameterError(f"language must be None or a registered language code such as 'de', got {language!r}")
        node = parse_filter(filter)
        within = parse_filter(scope)
        return await self._read(self._search_text_sync, language, query, k, node, not rows_deferred(self), within)

    def _search_text_sync(
        self,
        conn: sqlite3.Connection,
        snap: Snapshot,
        language: str | None,
        query: str,
        k: int,
        node: Filter | None,
        rows: bool = True,
        scope: Filter | None = None,
    ) -> list[Document]:
        counts = query_term_counts(a.analyze(query, for_query=True) for a in self._query_analyzers(conn, language))
        if not counts or not snap.segments or not snap.n_live:
            return []
        lists = self._postings.lists(conn, snap.segments, list(counts), snap.norms, snap.avgdl)
        live, n_docs = (None if snap.all_live else snap.live), snap.n_live
        if scope is not None:  # the scope's own N, df and avgdl (issue 26.1: no statistics across tenants)
            lists, n_docs = lexical.scoped_lists(lists, self._mask(conn, snap, scope), snap.lengths)
            live = None  # the lists hold the scope's live documents only
            if not n_docs:
                return []
        candidates, scores = lexical.bm25_top(
            lists,
            live=live,
            allowed=None if node is None else self._mask(conn, snap, node),
            n_docs=n_docs,
            size=snap.size,
            k=k,
            query_weights=[counts[t.term] for t in lists],
        )
        return ranked_rows(conn, scores, candidates, k, rows=rows) if len(candidates) else []

    async def search_vector(
        self, embedding: np.ndarray, *, k: int, filter: FilterLike | None = None
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
        return await self._read(self._search_vector_sync, query, k, node, not rows_deferred(self))

    def _search_vector_sync(
        self, conn: sqlite3.Connection, snap: Snapshot, query: np.ndarray, k: int, node: Filter | None, rows: bool = True
    ) -> list[Document]:
        if len(snap.rowids) == 0 or not snap.matrix.shape[1]:
            return []
        # the dimension may have been fixed by another connection's first write
        check_dimension(query.shape[0], snap.matrix.shape[1], store=self.path, what="query has")
        if self.vector_index != "exact":
            return self._search_ann(conn, snap, query, k, node, rows)
        scores = snap.matrix @ (query / np.float32(np.linalg.norm(query)))
        if node is None and snap.all_searchable:
            return ranked_rows(conn, scores, snap.rowids, k, rows=rows)
        allowed = snap.searchable if node is None else snap.searchable & self._mask(conn, snap, node)[snap.rowids]
        positions = np.flatnonzero(allowed)
        return ranked_rows(conn, scores[positions], snap.rowids[positions], k, rows=rows)

    async def status(self) -> SQLiteStoreStatus:
        """How the store is: read-write or read-only (and why), its size, and whether the maintenance that
        follows writes (BM25 segment merges, compaction) is due or failed, with SQLite's own error.

        A merge that failed after its write had committed (the disk filled, issue 26) shows here as
        ``maintenance_error`` and ``maintenance_due``, until a later write runs it. ``maintenance_error``
        is what this process saw; ``maintenance_due`` is read from the file, so it also shows a merge that
        another process left undone.

        Returns:
            A :class:`~fastrag.vector_store.sqlite.maintenance.SQLiteStoreStatus`.

        Raises:
            BackendUnavailableError: the store is closed.
            BackendError: SQLite failed.
        """

        def read(conn: sqlite3.Connection, snap: Snapshot) -> tuple[int, int, str | None]:
            return snap.n_live, len(snap.segments), maintenance.due(conn)

        documents, segments, due = await self._read(read)
        error, failed_at, failures = self._maintenance.read()
        return SQLiteStoreStatus(
            path=self.path, access="read-write" if self._private else self._access.mode,
            read_only_reason=self._access.reason, documents=documents, segments=segments, maintenance_due=due,
            maintenance_error=error, maintenance_failed_at=failed_at, maintenance_failures=failures,
        )

    async def build_vector_index(self) -> int:
        """Build (or bring up to date) the approximate index now, instead of in the first dense search.

        With ``vector_index="hnsw"`` or ``"pq"`` the index is otherwise built by the first dense search,
        which then takes as long as the build (``docs/ann.md``: an HNSW graph over a million vectors takes
        minutes; a PQ index seconds). Call this after a bulk ingest; it also saves the index beside the
        store file, so other processes open it instead of building their own.

        Returns:
            How many vectors the index holds (0 for ``vector_index="exact"``, which has none).

        Raises:
            ConfigurationError: faiss is not installed (``pip install "fastrag-retrieval[ann]"``).
            BackendUnavailableError: the index was built but its file cannot be written (a full disk, a
                read-only folder): searches use the index in memory meanwhile (and only warn when their own
                save fails; ``docs/ann.md``).
            BackendError: SQLite failed.
        """
        keeper = self._ann
        if keeper is None:
            return 0

        def build(conn: sqlite3.Connection, snap: Snapshot) -> int:
            if not len(snap.rowids) or not snap.matrix.shape[1]:
                return 0
            index = keeper.current(conn, snap, save=False)
            keeper.save()  # nothing for a read-only store (the keeper never writes there)
            return len(index)

        return await self._read(build)

    def _search_ann(
        self, conn: sqlite3.Connection, snap: Snapshot, query: np.ndarray, k: int, node: Filter | None, rows: bool
    ) -> list[Document]:
        keeper = self._ann
        assert keeper is not None  # vector_index is "hnsw" or "pq"
        index = keeper.current(conn, snap)
        allowed = None
        if node is not None:
            allowed = self._mask(conn, snap, node)
        elif index.max_key >= snap.size or snap.generation < keeper.generation:
            allowed = snap.live  # rows newer than this state (or deleted since it) are not its answers
        if self.vector_index == "hnsw":
            keys, scores = index.search(query, k, allowed=allowed, ef_search=self._ef_search)
        else:  # candidates found on compressed codes are scored exactly on the snapshot's own vectors
            keys, scores = index.search(query, k, allowed=allowed, vectors=lambda wanted: vectors_of(snap, wanted))
        return ranked_rows(conn, scores, keys, k, rows=rows) if len(keys) else []

    async def hydrate(self, documents: Sequence[Document]) -> list[Document]:
        """``documents`` (hits returned without rows, see :mod:`fastrag.deferred`) with their stored content
        and metadata, in the same order; each keeps its own metadata (``score``, ``rank``, ``branches``)
        over the stored keys. Hits whose document was deleted since are left out.

        Raises:
            BackendError: SQLite failed.
        """
        hits = list(documents)
        if not hits:
            return []

        def read(conn: sqlite3.Connection, _snap: Snapshot) -> dict[str, tuple[str, str]]:
            found: dict[str, tuple[str, str]] = {}
            ids = [d.id for d in hits]
            for chunk in chunks(ids, IN_CHUNK):
                for doc_id, content, metadata in conn.execute(
                    f"SELECT id, content, metadata FROM documents WHERE id IN ({','.join('?' * len(chunk))})", chunk
                ):
                    found[doc_id] = (content, metadata)
            return found

        found = await self._read(read)
        out = []
        for hit in hits:
            row = found.get(hit.id)
            if row is not None:
                metadata = json.loads(row[1])
                metadata.update(hit.metadata)
                out.append(owned_document(hit.id, row[0], metadata))
        return out


class SQLiteReplaceWriter:
    """The writing end of :meth:`SQLiteVectorStore.atomic_replace` (a :class:`~fastrag.protocols.BatchWriter`)."""

    def __init__(self, store: SQLiteVectorStore) -> None:
        self._store = store
        self.dimension: int | None = None  # the width the write fixes, adopted by the store at the commit
        self.closed = False
        self._turn = anyio.Lock()  # one batch at a time on the store's one writer connection

    async def upsert(self, documents: Sequence[Document], *, embeddings: np.ndarray | None = None) -> None:
        """Add ``documents`` to the open write (replacing by id), checked as
        :meth:`SQLiteVectorStore.upsert` checks them; readers see them once the write commits.

        Raises:
            InvalidParameterError: the write has ended, or as :meth:`SQLiteVectorStore.upsert`.
            DimensionMismatchError, BackendError: as :meth:`SQLiteVectorStore.upsert`; the write then rolls
                back when the error leaves its block.
        """
        if self.closed:
            raise InvalidParameterError("this atomic_replace has ended; open another to write")
        store = self._store
        prepared = await store._prepare(documents, embeddings)
        if prepared is None:
            return
        async with self._turn:
            if self.closed:
                raise InvalidParameterError("this atomic_replace has ended; open another to write")
            await anyio.to_thread.run_sync(partial(store._mapped, store._insert_rows, *prepared))
        if prepared[2] is not None:
            self.dimension = int(prepared[2].shape[1])
