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
- **Reads** (``search_vector``, ``search_text``, ``get``, ``count``) on a file run on a bounded pool of
  read-only connections (``read_connections``, default ``min(4, os.cpu_count())``), so reads run
  concurrently with each other and with a write (WAL). Each call is one read transaction, so it sees one
  committed state (a snapshot) even while this store, another store or another process writes.
  ``":memory:"`` (and ``""``) cannot be shared between connections: such a store keeps one connection.
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
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import anyio
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
    TransientBackendError,
)
from fastrag.filters import Filter, FilterLike, matches, parse_filter
from fastrag.models import Document, owned_document
from fastrag.retrieval._validation import check_positive_int
from fastrag.scoring import query_term_counts
from fastrag.vector_store._metadata import metadata_json
from fastrag.vector_store._validation import (
    check_dimension,
    check_k,
    check_query_vector,
    check_unique_ids,
)
from fastrag.vector_store.sqlite import cancellation, lexical, snapshot
from fastrag.vector_store.sqlite.columns import Column, filter_mask
from fastrag.vector_store.sqlite.rows import (
    IN_CHUNK,
    chunks,
    dead_mask,
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
    set_meta,
)
from fastrag.vector_store.sqlite.snapshot import EMPTY, Arena, Snapshot

__all__ = ["SQLiteVectorStore"]

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
_ANN_SAVE_EVERY = 0.05  # save the ANN index again once vectors added since its last save pass this share
T = TypeVar("T")



def _languages_of(value: str) -> tuple[str, ...]:
    return tuple(json.loads(value))


class SQLiteVectorStore:
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
            :meth:`aclose`; the store holds at most this many plus its one writer connection. Ignored for
            ``":memory:"``, which runs everything on one connection.
        vector_index: ``"exact"`` (default): k-NN scans every vector, exact. ``"hnsw"``: approximate k-NN
            through an HNSW graph (:class:`~fastrag.vector_store.sqlite.ann.HNSWIndex`), best on real
            embeddings. ``"pq"``: a 4-bit product-quantisation fast scan whose best 256 candidates are
            re-scored exactly (:class:`~fastrag.vector_store.sqlite.ann.PQFastScanIndex`): still a scan, but
            of 64-byte codes; it is what reaches recall@10 0.96 at a twentieth of the exact time on a
            million unstructured vectors. Both need faiss (``pip install "fastrag-retrieval[ann]"``), are built on the
            first dense search, extended by each later search with the vectors written since, and saved
            beside the store file (``<path>-<store id>.hnsw`` / ``.pq``) so the next process opens them
            instead of building them. Recall and speed by corpus: ``docs/ann.md``. Filtered searches stay
            complete (a rare filter is answered exactly). ``":memory:"`` stores keep the index in memory.
        ef_search: the HNSW candidate list per search (an int > 0; ``None``: the index's default): larger
            is slower and closer to exact. Only for ``vector_index="hnsw"``.

    Every connection waits up to 5 seconds for a lock held by another connection (SQLite's busy timeout)
    before a call fails with :class:`~fastrag.errors.TransientBackendError`.

    Raises:
        BackendUnavailableError: the file cannot be opened or is not a fastrag database.
        ConfigurationError: ``dimension``, ``embedding_model`` or the analyzer differ from the file's; or
            ``vector_index="hnsw"`` or ``"pq"`` without faiss installed (raised by the first dense search).
        InvalidParameterError: ``dimension``, ``read_connections`` or ``ef_search`` is not a positive int,
            or ``vector_index`` is not ``"exact"``, ``"hnsw"`` or ``"pq"``.

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
        vector_index: str = "exact",
        ef_search: int | None = None,
    ) -> None:
        if vector_index not in _VECTOR_INDEXES:
            raise InvalidParameterError(f"vector_index must be one of {_VECTOR_INDEXES}, got {vector_index!r}")
        if ef_search is not None:
            check_positive_int(ef_search, "ef_search")
            if vector_index != "hnsw":
                raise InvalidParameterError(f"ef_search applies to vector_index='hnsw' only, not {vector_index!r}")
        self.vector_index = vector_index
        self._ef_search = ef_search
        self._ann: Any = None  # the approximate index, once a dense search needed it
        self._ann_lock = threading.Lock()
        self._ann_unsaved = 0  # vectors added to it since it was last saved
        self._ann_generation = -1  # the newest state whose deletions it has dropped
        if dimension is not None and (not isinstance(dimension, int) or dimension <= 0):
            raise InvalidParameterError(f"dimension must be a positive int, got {dimension!r}")
        if read_connections is not None:
            check_positive_int(read_connections, "read_connections")
        self.path = str(path)
        self.analyzer = analyzer or Analyzer()
        self._adopt_analysis = analyzer is None
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
        # the newest snapshot a read has seen, the arena its arrays live in, and the metadata columns
        # (key -> (column by rowid, the generation from which it is valid)); replaced under _cache_lock
        self._cache_lock = threading.Lock()
        self._snapshot: Snapshot = EMPTY
        self._arena: Arena | None = None
        self._columns: dict[str, tuple[Column, int]] = {}
        self._postings = lexical.PostingsCache()  # hot terms' postings rows, valid across states
        self._conn = self._open()
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
            self._store_id = self._check_meta("store_id", None, str) or self._new_store_id()
        except FastragError:
            raise
        except (sqlite3.Error, *_CORRUPT_DATA) as exc:  # a damaged file can fail anywhere in these reads
            raise BackendUnavailableError(f"cannot open SQLite store {self.path}: {_corrupt(exc)}", store=self.path) from exc

    # ------------------------------------------------------------------ lifecycle

    def __repr__(self) -> str:
        return f"SQLiteVectorStore({self.path!r})"

    def _connect(self, *, reader: bool) -> sqlite3.Connection:
        """A connection with this store's settings: busy timeout, PRAGMAs."""
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=_BUSY_TIMEOUT_S)
        cancellation.install(conn)  # a cancelled read stops inside SQLite (fastrag.vector_store.sqlite.cancellation)
        try:
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
                create_or_migrate(conn, path)
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

    def _new_store_id(self) -> str:
        """A random id for this store file, recorded once: files beside it (the ANN index) carry it in
        their name, so a store recreated at the same path never opens another store's index."""
        self._conn.execute("INSERT OR IGNORE INTO meta VALUES ('store_id', ?)", (uuid.uuid4().hex,))
        store_id = self._conn.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()[0]
        if not self._private:  # index files of a store that lived at this path before: never opened again
            folder, name = os.path.split(os.path.abspath(self.path))
            stale = re.compile(re.escape(name) + r"-[0-9a-f]{32}\.(hnsw|pq)")
            for entry in os.listdir(folder or "."):
                if stale.fullmatch(entry) and store_id not in entry:
                    with contextlib.suppress(OSError):
                        os.remove(os.path.join(folder, entry))
        return store_id

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
        if self._conn.execute("SELECT 1 FROM documents LIMIT 1").fetchone() is None:
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
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
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
        if getattr(exc, "sqlite_errorcode", 0) & 0xFF in _DAMAGED_CODES:
            return BackendError(f"SQLite error: {exc}: the store file is damaged; restore it from a backup or "
                                "rebuild it with `fastrag index`", store=self.path)  # fmt: skip
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
                    if cancellation.is_interrupt(exc):
                        cancellation.raise_if_cancelled()  # the caller was cancelled: raise that, not an error
                    raise self._error(exc) from exc
                except FastragError:
                    raise
                except _CORRUPT_DATA as exc:
                    raise BackendError(_corrupt(exc), store=self.path) from exc

        return await anyio.to_thread.run_sync(call)

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, snapshot, *args)`` in one worker thread, inside one read transaction.

        Every statement ``fn`` runs on ``conn`` sees the same committed state, and ``snapshot`` is the
        in-memory view of that state (:meth:`_snapshot_for`). A file store takes a connection from the read pool; a private
        (``":memory:"``) one uses its only connection under the lock.
        """
        if self._private:
            return await self._run(lambda: self._in_snapshot(self._conn, fn, args))
        return await anyio.to_thread.run_sync(self._pooled_read, fn, args)

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
            BackendError: SQLite failed; nothing was written.
        """
        docs = list(documents)
        if not docs:
            return
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
        await self._run(self._upsert_sync, rows, counts, matrix, languages)

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
            conn.execute(BUMP_SQL)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        if matrix is not None and self.dimension is None:
            self.dimension = int(matrix.shape[1])
        self._maintain()

    def _maintain(self) -> None:
        """After a write: merge BM25 segments (tiered, ``MERGE_FACTOR`` of one level into the next), and
        compact everything when deleted rows outnumber live ones. Each step is a transaction of its own
        that raises the generation, so readers pick up the new segment list; an interruption leaves the
        state before that step, which is as correct (only less compact)."""
        conn = self._conn
        while True:
            dead = conn.execute("SELECT count(*) FROM tombstones").fetchone()[0]
            # count(*) of the documents scans them: only when enough rows died for it to matter
            if dead > 1000 and dead > conn.execute("SELECT count(*) FROM documents").fetchone()[0]:
                self._compact()
                return
            full = conn.execute(
                "SELECT level FROM segments GROUP BY level HAVING count(*) >= ? ORDER BY level LIMIT 1",
                (lexical.MERGE_FACTOR,),
            ).fetchone()
            if full is None:
                return
            level = full[0]
            conn.execute("BEGIN IMMEDIATE")
            try:
                ids = [r[0] for r in conn.execute(
                    "SELECT id FROM segments WHERE level = ? ORDER BY id LIMIT ?", (level, lexical.MERGE_FACTOR)
                )]
                if len(ids) == lexical.MERGE_FACTOR:  # another writer may have merged meanwhile
                    lexical.merge_segments(conn, ids, level + 1, dead_mask(conn))
                    conn.execute(BUMP_SQL)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def _compact(self) -> None:
        """Rewrite every block and segment without the deleted rows, and forget the tombstones."""
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            dead = dead_mask(conn)
            blocks = [r[0] for r in conn.execute("SELECT id FROM blocks ORDER BY id")]
            pending: list[tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]] = []
            dim = meta_int(conn, "dimension", 0)
            for block_id in blocks:
                rows_b, lengths_b, vectors_b, flags_b = conn.execute(
                    "SELECT rows, lengths, vectors, has_vector FROM blocks WHERE id = ?", (block_id,)
                ).fetchone()
                rows = np.frombuffer(rows_b, dtype="<i4")
                keep = ~dead[rows] if dead is not None else np.ones(len(rows), dtype=bool)
                lengths = np.frombuffer(lengths_b, dtype="<i4")[keep]
                if vectors_b is None:
                    vectors, has = np.zeros((int(keep.sum()), dim), dtype=np.float32), np.zeros(int(keep.sum()), dtype=bool)
                else:
                    vectors = np.frombuffer(vectors_b, dtype="<f4").reshape(len(rows), -1)[keep]
                    has = (np.ones(len(rows), dtype=bool) if flags_b is None else np.frombuffer(flags_b, dtype=np.uint8).astype(bool))[keep]
                pending.append((rows[keep], lengths, vectors, has))
            conn.execute("DELETE FROM blocks")
            if pending:
                rows = np.concatenate([p[0] for p in pending])
                lengths = np.concatenate([p[1] for p in pending])
                has = np.concatenate([p[3] for p in pending])
                vectors = np.concatenate([p[2] for p in pending]) if dim else None
                for start in range(0, len(rows), BLOCK_ROWS):
                    part = slice(start, start + BLOCK_ROWS)
                    conn.execute(
                        "INSERT INTO blocks (rows, lengths, vectors, has_vector) VALUES (?, ?, ?, ?)",
                        snapshot.encode_block(rows[part], lengths[part], None if vectors is None else vectors[part], has[part]),
                    )
            segments = [r[0] for r in conn.execute("SELECT id FROM segments ORDER BY id")]
            if segments:
                top = conn.execute("SELECT max(level) FROM segments").fetchone()[0]
                lexical.merge_segments(conn, segments, top + 1, dead)
            conn.execute("DELETE FROM tombstones")
            conn.execute(BUMP_SQL)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    async def delete(self, *, ids: Sequence[str] | None = None, filter: FilterLike | None = None) -> int:
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
        ids = id_list(ids)
        node = parse_filter(filter)
        return await self._run(self._delete_sync, ids, node, False)

    async def clear(self) -> int:
        """Delete every document; return how many were removed."""
        return await self._run(self._delete_sync, None, None, True)

    def _delete_sync(self, ids: list[str] | None, node: Filter | None, everything: bool) -> int:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
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
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        if rowids:
            self._maintain()
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

    def _search_text_sync(
        self,
        conn: sqlite3.Connection,
        snap: Snapshot,
        language: str | None,
        query: str,
        k: int,
        node: Filter | None,
        rows: bool = True,
    ) -> list[Document]:
        counts = query_term_counts(a.analyze(query, for_query=True) for a in self._query_analyzers(conn, language))
        if not counts or not snap.segments or not snap.n_live:
            return []
        lists = self._postings.lists(conn, snap.segments, list(counts), snap.norms, snap.avgdl)
        candidates, scores = lexical.bm25_top(
            lists,
            live=None if snap.all_live else snap.live,
            allowed=None if node is None else self._mask(conn, snap, node),
            n_docs=snap.n_live,
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
            BackendError: SQLite failed.
        """
        if self.vector_index == "exact":
            return 0

        def build(_conn: sqlite3.Connection, snap: Snapshot) -> int:
            if not len(snap.rowids) or not snap.matrix.shape[1]:
                return 0
            index = self._ann_for(snap)
            if self._ann_unsaved and not self._private:
                with self._ann_lock:
                    index.save(f"{self.path}-{self._store_id}.{self.vector_index}")
                    self._ann_unsaved = 0
            return len(index)

        return await self._read(build)

    def _search_ann(
        self, conn: sqlite3.Connection, snap: Snapshot, query: np.ndarray, k: int, node: Filter | None, rows: bool
    ) -> list[Document]:
        index = self._ann_for(snap)
        allowed = None
        if node is not None:
            allowed = self._mask(conn, snap, node)
        elif index.max_key >= snap.size or snap.generation < self._ann_generation:
            allowed = snap.live  # rows newer than this state (or deleted since it) are not its answers
        if self.vector_index == "hnsw":
            keys, scores = index.search(query, k, allowed=allowed, ef_search=self._ef_search)
        else:  # candidates found on compressed codes are scored exactly on the snapshot's own vectors
            keys, scores = index.search(query, k, allowed=allowed, vectors=lambda wanted: vectors_of(snap, wanted))
        return ranked_rows(conn, scores, keys, k, rows=rows) if len(keys) else []

    def _ann_for(self, snap: Snapshot) -> Any:
        """The approximate index, opened or built on first use, holding every vector of ``snap`` (vectors
        written since it was last extended are added now). Saved beside the store file after a build and
        once the vectors added since the last save pass 5% of it."""
        from fastrag.vector_store.sqlite.ann import HNSWIndex, PQFastScanIndex

        kind = HNSWIndex if self.vector_index == "hnsw" else PQFastScanIndex
        path = None if self._private else f"{self.path}-{self._store_id}.{self.vector_index}"
        with self._ann_lock:
            index = self._ann
            if index is None and path is not None and os.path.exists(path):
                index = kind.load(path)
            def rebuilt() -> Any:  # from every live row with a vector; unsaved until written
                chosen = np.flatnonzero(snap.searchable)
                self._ann_unsaved = len(chosen) + 1
                return kind.build(snap.matrix[chosen], snap.rowids[chosen])

            if index is None or index.dimension != snap.matrix.shape[1]:
                index = rebuilt()
            # rowids ascend by position: only a state holding rows past the index's last key has new ones
            fresh = len(snap.rowids) and int(snap.rowids[-1]) > index.max_key
            new = np.flatnonzero(snap.has_vector & (snap.rowids > index.max_key)) if fresh else ()
            if len(new):
                index.add(snap.matrix[new], snap.rowids[new])
                self._ann_unsaved += len(new)
            if snap.generation > self._ann_generation:  # rows deleted since: never answers again
                keys = index.keys
                keys = keys[keys < snap.size]
                gone = keys[~snap.live[keys]]
                if len(gone):
                    index.remove(gone)
                    self._ann_unsaved += len(gone)
                self._ann_generation = snap.generation
            # a graph mostly of deleted waypoints, or codebooks trained on under half the rows: build again
            if index.dead_fraction > 0.3 or getattr(index, "untrained_fraction", 0.0) > 0.5:
                index = rebuilt()
            self._ann = index
            if path is not None and self._ann_unsaved > _ANN_SAVE_EVERY * len(index):
                index.save(path)
                self._ann_unsaved = 0
            return index

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
