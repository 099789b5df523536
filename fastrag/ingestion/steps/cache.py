"""An on-disk cache of embeddings keyed by model and text, so re-embedding unchanged text costs nothing.

::

    async with EmbeddingCache(".fastrag/embedding-cache.db") as cache:
        embedder = CachedEmbedder(OpenAICompatibleEmbedder(model="text-embedding-3-small"), cache)
        await embedder.embed_documents(texts)   # the server sees only texts it has not embedded before

The cache is one SQLite file. A row's key is (the embedder's fingerprint, document or query, the SHA-256 of
the text); its value the float32 vector. The fingerprint is the embedder's ``fingerprint`` attribute when it
has one (fastrag's embedders do: the model name plus every option that changes a vector, such as
``dimensions`` or a prefix), else its ``name``; so vectors of another model or setting are never returned.
:class:`~fastrag.ingestion.IngestionPipeline` takes one (``embedding_cache=``), and ``fastrag index`` keeps
one beside a SQLite store (``embedding-cache.db`` in the store's folder) for every embedder but the static
Model2Vec ones, which encode faster than the cache can be read.

Writes are committed per call, so an interrupted run keeps what it embedded. Several processes may share
the file (SQLite's WAL mode with a busy timeout).
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.to_thread
import numpy as np

from fastrag.errors import BackendError, BackendUnavailableError, InvalidParameterError
from fastrag.ingestion.steps._remote import check_texts
from fastrag.lifecycle import AsyncResource
from fastrag.protocols import DeclaresLanguages

__all__ = ["CachedEmbedder", "EmbeddingCache", "fingerprint_of"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS embeddings (
    model TEXT NOT NULL,
    kind TEXT NOT NULL,
    text_sha256 BLOB NOT NULL,
    dimension INTEGER NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (model, kind, text_sha256)
) WITHOUT ROWID
"""
_LOOKUP_BATCH = 500  # keys per SELECT, under SQLite's default limit of bound parameters


def fingerprint_of(embedder: Any) -> str:
    """The cache key of ``embedder``'s vectors: its ``fingerprint`` when it has one, else its ``name``."""
    value = getattr(embedder, "fingerprint", None)
    return value if isinstance(value, str) and value else str(embedder.name)


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


class EmbeddingCache(AsyncResource):
    """A SQLite file of vectors keyed by (embedder fingerprint, kind, SHA-256 of the text).

    Args:
        path: the SQLite file (created with its folder when missing), or ``":memory:"``.

    Raises:
        InvalidParameterError: ``path`` is empty.
        BackendUnavailableError: (on open) the file cannot be opened or is not a cache.
    """

    def __init__(self, path: str | Path) -> None:
        if not isinstance(path, str | Path) or not str(path):
            raise InvalidParameterError(f"path must be a file path, got {path!r}")
        self.path = str(path)
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    async def open(self) -> None:
        """Open (and create) the file; idempotent. Entering ``async with`` opens it too.

        Raises:
            BackendUnavailableError: the file cannot be opened, or holds another schema.
        """
        if self._db is None:
            await anyio.to_thread.run_sync(self._open_sync)

    def _open_sync(self) -> None:
        with self._lock:
            if self.closed:
                raise BackendUnavailableError("the embedding cache is closed", store=self.path)
            if self._db is not None:
                return
            try:
                if self.path != ":memory:":
                    Path(self.path).parent.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(self.path, check_same_thread=False, timeout=30.0)
                if self.path != ":memory:":
                    db.execute("PRAGMA journal_mode=WAL")
                db.execute(_SCHEMA)
                db.commit()
            except (sqlite3.Error, OSError) as exc:
                raise BackendUnavailableError(f"cannot open the embedding cache: {exc}", store=self.path) from exc
            self._db = db

    _close_if_enter_fails = False  # a file that failed to open holds nothing; open() may be tried again

    async def _aopen(self) -> None:
        await self.open()

    async def _aclose(self) -> None:
        """Close the file."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    async def get(self, model: str, kind: str, texts: Sequence[str]) -> list[np.ndarray | None]:
        """The cached ``(dim,)`` float32 vector of each text, or ``None`` where there is none.

        Raises:
            BackendError: the file cannot be read.
        """
        await self.open()
        keys = [_digest(t) for t in texts]
        return await anyio.to_thread.run_sync(self._get_sync, model, kind, keys)

    def _get_sync(self, model: str, kind: str, keys: list[bytes]) -> list[np.ndarray | None]:
        found: dict[bytes, np.ndarray] = {}
        with self._lock:
            db = self._require()
            try:
                unique = list(dict.fromkeys(keys))
                for start in range(0, len(unique), _LOOKUP_BATCH):
                    part = unique[start : start + _LOOKUP_BATCH]
                    rows = db.execute(
                        f"SELECT text_sha256, dimension, vector FROM embeddings WHERE model = ? AND kind = ? "
                        f"AND text_sha256 IN ({', '.join('?' * len(part))})",
                        [model, kind, *part],
                    ).fetchall()
                    for key, dimension, blob in rows:
                        vector = np.frombuffer(blob, dtype=np.float32)
                        if vector.shape == (dimension,):
                            found[bytes(key)] = vector.copy()
            except sqlite3.Error as exc:
                raise BackendError(f"cannot read the embedding cache: {exc}", store=self.path) from exc
        return [found.get(k) for k in keys]

    async def put(self, model: str, kind: str, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Store ``vectors[i]`` as the vector of ``texts[i]`` (replacing an older one), in one transaction.

        Raises:
            InvalidParameterError: ``vectors`` is not ``(len(texts), dim)``.
            BackendError: the file cannot be written.
        """
        matrix = np.ascontiguousarray(vectors, dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[0] != len(texts):
            raise InvalidParameterError(f"vectors must have shape ({len(texts)}, dim), got {matrix.shape}")
        rows = [(model, kind, _digest(t), int(matrix.shape[1]), matrix[i].tobytes()) for i, t in enumerate(texts)]
        await self.open()
        await anyio.to_thread.run_sync(self._put_sync, rows)

    def _put_sync(self, rows: list[tuple[str, str, bytes, int, bytes]]) -> None:
        with self._lock:
            db = self._require()
            try:
                with db:
                    db.executemany("INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?, ?, ?)", rows)
            except sqlite3.Error as exc:
                raise BackendError(f"cannot write the embedding cache: {exc}", store=self.path) from exc

    async def count(self, model: str | None = None) -> int:
        """How many vectors the cache holds (of one embedder fingerprint, or of all)."""
        await self.open()

        def run() -> int:
            with self._lock:
                db = self._require()
                sql, args = ("SELECT COUNT(*) FROM embeddings", []) if model is None else (
                    "SELECT COUNT(*) FROM embeddings WHERE model = ?", [model])
                return int(db.execute(sql, args).fetchone()[0])

        return await anyio.to_thread.run_sync(run)

    def _require(self) -> sqlite3.Connection:
        if self._db is None:
            raise BackendUnavailableError("the embedding cache is closed", store=self.path)
        return self._db

    def __repr__(self) -> str:
        return f"EmbeddingCache({self.path!r})"


class CachedEmbedder(AsyncResource):
    """An :class:`~fastrag.protocols.Embedder` that answers from an :class:`EmbeddingCache` and asks the
    wrapped embedder only for texts it has not seen (each distinct text once per call).

    ``name``, ``dimension``, ``fingerprint`` and ``languages`` are the wrapped embedder's. Closing this closes neither the
    embedder nor the cache (they stay the caller's).

    Args:
        embedder: the embedder to wrap.
        cache: where vectors are kept.
        cache_queries: also cache :meth:`embed_query` vectors (default ``False``: queries are short, and
            a query log on disk may not be wanted).

    Attributes:
        hits: texts answered from the cache so far.
        misses: texts sent to the wrapped embedder so far.
    """

    def __init__(self, embedder: Any, cache: EmbeddingCache, *, cache_queries: bool = False) -> None:
        if not isinstance(cache, EmbeddingCache):
            raise InvalidParameterError(f"cache must be an EmbeddingCache, got {cache!r}")
        self.embedder = embedder
        self.cache = cache
        self.cache_queries = cache_queries
        self.hits = 0
        self.misses = 0

    @property
    def name(self) -> str:
        """The wrapped embedder's name."""
        return str(self.embedder.name)

    @property
    def dimension(self) -> int:
        """The wrapped embedder's dimension."""
        return int(self.embedder.dimension)

    @property
    def languages(self) -> frozenset[str] | None:
        """The wrapped embedder's declared languages (:class:`~fastrag.protocols.DeclaresLanguages`), or
        ``None`` when it declares none (a hybrid then looks its ``name`` up)."""
        inner = self.embedder
        return inner.languages if isinstance(inner, DeclaresLanguages) else None

    @property
    def fingerprint(self) -> str:
        """The wrapped embedder's cache key (:func:`fingerprint_of`)."""
        return fingerprint_of(self.embedder)

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """As the wrapped embedder's ``embed_documents``; cached texts are not sent to it.

        Raises:
            InvalidParameterError: ``texts`` is a single string or holds a non-string.
            BackendError: the cache cannot be read or written; what the wrapped embedder raises.
        """
        return await self._embed(check_texts(texts), "document")

    async def embed_query(self, text: str) -> np.ndarray:
        """As the wrapped embedder's ``embed_query`` (cached only with ``cache_queries=True``)."""
        if not self.cache_queries:
            return await self.embedder.embed_query(text)
        if not isinstance(text, str):
            raise InvalidParameterError(f"text must be a string, got {type(text).__name__}")
        return (await self._embed([text], "query"))[0]

    async def _embed(self, texts: list[str], kind: Literal["document", "query"]) -> np.ndarray:
        if not texts:
            return await self.embedder.embed_documents([])
        model = self.fingerprint
        found = await self.cache.get(model, kind, texts)
        missing = list(dict.fromkeys(t for t, v in zip(texts, found, strict=True) if v is None))
        computed: dict[str, np.ndarray] = {}
        if missing:
            if kind == "query":
                vectors = np.stack([await self.embedder.embed_query(missing[0])])
            else:
                vectors = np.asarray(await self.embedder.embed_documents(missing), dtype=np.float32)
            await self.cache.put(model, kind, missing, vectors)
            computed = dict(zip(missing, vectors, strict=True))
        self.hits += len(texts) - sum(1 for v in found if v is None)
        self.misses += len(missing)
        rows = [v if v is not None else computed[t] for t, v in zip(texts, found, strict=True)]
        widths = {r.shape[0] for r in rows}
        if len(widths) != 1:
            raise BackendError(f"the cache holds vectors of widths {sorted(widths)} for {model!r}", store=self.cache.path)
        return np.stack(rows).astype(np.float32, copy=False)

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.embedder!r}, {self.cache!r})"
