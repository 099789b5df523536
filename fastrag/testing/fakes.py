"""Public test doubles: a naive in-memory store and a deterministic hashing embedder.

Use them to test code built on fastrag without a backend or a model::

    async with InMemoryStore() as store, HashingEmbedder() as embedder:
        pipeline = IngestionPipeline(embedder=embedder, vector_store=store)
        await pipeline.run(["docs/"])

They favour obviously-correct code over speed (every search is a full scan) and follow the protocols'
contracts: filters are evaluated by :func:`fastrag.filters.matches`, results are copies stamped with
``score`` and ``rank``, and nothing is mutated in place.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fastrag.errors import DimensionMismatchError, InvalidParameterError
from fastrag.filters import FilterLike, combine_filters, matches, parse_filter
from fastrag.lifecycle import AsyncResource
from fastrag.models import Document
from fastrag.vector_store._ranking import best_first

__all__ = ["HashingEmbedder", "InMemoryStore", "PrecomputedEmbedder", "RecordingSleep"]

_TOKEN = re.compile(r"\w+")


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.casefold())


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
        raise InvalidParameterError(f"k must be a positive integer, got {k!r}")


class InMemoryStore(AsyncResource):
    """A dict-backed store implementing ``VectorStore``, ``LexicalStore``, ``SupportsGet`` and
    ``SupportsScopedStatistics``.

    Documents live in a dict ``id -> (Document, vector or None)``. ``search_vector`` is exact cosine
    similarity (in [-1, 1], higher is better) over the documents that were written with a vector;
    ``search_text`` scores a document by term overlap, not BM25: the number of distinct query terms
    (lower-cased ``\\w+`` tokens) it contains, plus half the share of its tokens that are query terms (so
    more matched terms rank first, then denser documents; higher is better, always > 0) and never returns
    a document sharing no term. Ties break by id, so results are deterministic.

    Args:
        dimension: the vector width; when ``None`` it is fixed by the first write with embeddings.
    """

    def __init__(self, dimension: int | None = None) -> None:
        if dimension is not None and (isinstance(dimension, bool) or dimension <= 0):
            raise InvalidParameterError(f"dimension must be a positive integer, got {dimension!r}")
        self._dimension = dimension
        self._items: dict[str, tuple[Document, np.ndarray | None]] = {}

    @property
    def dimension(self) -> int | None:
        """The vector width, or ``None`` before the first write with embeddings."""
        return self._dimension

    # lifecycle (AsyncResource): aclose() only sets `closed`; the data stays readable

    async def upsert(self, documents: Sequence[Document], *, embeddings: np.ndarray | None = None) -> None:
        """Insert or replace ``documents`` by id, all or nothing.

        Args:
            documents: the documents to write.
            embeddings: ``(len(documents), dim)`` rows, or ``None`` to store text only (such documents
                are invisible to :meth:`search_vector`).

        Raises:
            DimensionMismatchError: the embeddings' shape does not fit ``documents`` or the dimension.
        """
        docs = list(documents)
        vectors: list[np.ndarray | None] = [None] * len(docs)
        if embeddings is not None:
            matrix = np.asarray(embeddings, dtype=np.float32)
            if matrix.ndim != 2 or matrix.shape[0] != len(docs):
                raise DimensionMismatchError(
                    f"embeddings must have shape ({len(docs)}, dim), got {tuple(matrix.shape)}"
                )
            if self._dimension is not None and matrix.shape[1] != self._dimension:
                raise DimensionMismatchError(
                    f"embeddings have width {matrix.shape[1]}, the store holds {self._dimension}"
                )
            if docs:
                self._dimension = int(matrix.shape[1])
            vectors = [row.copy() for row in matrix]
        for doc, vector in zip(docs, vectors, strict=True):
            self._items[doc.id] = (doc, vector)

    async def search_vector(
        self, embedding: np.ndarray, *, k: int, filter: FilterLike | None = None
    ) -> list[Document]:
        """The ``k`` documents with the highest cosine similarity to ``embedding`` (``(dim,)``).

        Raises:
            InvalidParameterError: ``k`` is not positive.
            DimensionMismatchError: ``embedding`` is not ``(dim,)``.
            FilterError: the filter is malformed.
        """
        _check_k(k)
        node = parse_filter(filter)
        query = np.asarray(embedding, dtype=np.float32)
        if query.ndim != 1 or (self._dimension is not None and query.shape[0] != self._dimension):
            raise DimensionMismatchError(f"query must have shape ({self._dimension},), got {tuple(query.shape)}")
        query_norm = float(np.linalg.norm(query))
        scored: list[tuple[float, str]] = []
        for doc_id, (doc, vector) in self._items.items():
            if vector is None or not matches(node, doc.metadata):
                continue
            denominator = query_norm * float(np.linalg.norm(vector))
            score = float(np.dot(query, vector)) / denominator if denominator > 0 else 0.0
            scored.append((score, doc_id))
        return best_first([(score, self._items[doc_id][0]) for score, doc_id in scored], k)

    async def search_text(self, query: str, *, k: int, filter: FilterLike | None = None) -> list[Document]:
        """The ``k`` documents with the most term overlap with ``query`` (see the class); none with zero.

        Raises:
            InvalidParameterError: ``k`` is not positive.
            FilterError: the filter is malformed.
        """
        _check_k(k)
        node = parse_filter(filter)
        terms = set(_tokens(query))
        scored: list[tuple[float, str]] = []
        for doc_id, (doc, _vector) in self._items.items():
            if not matches(node, doc.metadata):
                continue
            tokens = _tokens(doc.content)
            overlap = len(terms.intersection(tokens))
            if overlap:
                density = sum(token in terms for token in tokens) / len(tokens)
                scored.append((overlap + density / 2, doc_id))
        return best_first([(score, self._items[doc_id][0]) for score, doc_id in scored], k)

    async def search_text_scoped(
        self, query: str, *, k: int, scope: FilterLike | None, filter: FilterLike | None = None  # noqa: A002
    ) -> list[Document]:
        """:meth:`search_text` among the documents matching ``scope`` and ``filter``. Its term-overlap
        score uses no collection statistics, so it is a scope's own already
        (:class:`~fastrag.protocols.SupportsScopedStatistics`).

        Raises:
            InvalidParameterError: ``k`` is not positive.
            FilterError: the filter or the scope is malformed.
        """
        return await self.search_text(query, k=k, filter=combine_filters(scope, filter))

    async def delete(self, *, ids: Sequence[str] | None = None, filter: FilterLike | None = None) -> int:
        """Delete the documents with these ``ids`` that match ``filter`` (either may be omitted).

        Returns:
            How many documents were removed.

        Raises:
            InvalidParameterError: neither ``ids`` nor ``filter`` is given.
            FilterError: the filter is malformed.
        """
        if ids is None and filter is None:
            raise InvalidParameterError("delete needs ids, a filter, or both")
        doomed = [doc.id for doc in self._select(ids, filter)]
        for doc_id in doomed:
            del self._items[doc_id]
        return len(doomed)

    async def count(self, *, filter: FilterLike | None = None) -> int:
        """How many documents the store holds (matching ``filter`` when given)."""
        return len(self._select(None, filter))

    async def get(
        self, *, ids: Sequence[str] | None = None, filter: FilterLike | None = None, limit: int | None = None
    ) -> list[Document]:
        """Documents with these ``ids`` (missing ids are ignored) matching ``filter``, in id order.

        Raises:
            InvalidParameterError: ``limit`` is negative.
            FilterError: the filter is malformed.
        """
        if limit is not None and (isinstance(limit, bool) or limit < 0):
            raise InvalidParameterError(f"limit must be a non-negative integer, got {limit!r}")
        found = self._select(ids, filter)
        return found if limit is None else found[:limit]

    def _select(self, ids: Sequence[str] | None, filter: FilterLike | None) -> list[Document]:  # noqa: A002
        node = parse_filter(filter)
        if isinstance(ids, str):
            raise InvalidParameterError("ids must be a sequence of strings, not a single string")
        candidates = sorted(self._items) if ids is None else sorted(set(ids) & self._items.keys())
        return [self._items[i][0] for i in candidates if matches(node, self._items[i][0].metadata)]


class HashingEmbedder(AsyncResource):
    """A deterministic bag-of-words embedder for tests: no model, no download, stable across runs.

    Each lower-cased ``\\w+`` token is hashed (BLAKE2b) to one of ``dimension`` buckets with a sign; a
    text's vector is the sum over its tokens, L2-normalised. Texts sharing words are therefore closer
    than texts that share none, which is enough for retrieval tests. A text with no token embeds as the
    zero vector.

    Args:
        dimension: the vector width; must be positive.
    """

    def __init__(self, dimension: int = 64) -> None:
        if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension <= 0:
            raise InvalidParameterError(f"dimension must be a positive integer, got {dimension!r}")
        self._dimension = dimension

    @property
    def dimension(self) -> int:
        """Width of every vector."""
        return self._dimension

    @property
    def name(self) -> str:
        """``"hashing-<dimension>"``."""
        return f"hashing-{self._dimension}"

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), dimension)`` float32, L2-normalised rows (all zero for a text with no token).

        Raises:
            InvalidParameterError: ``texts`` is a single string.
        """
        if isinstance(texts, str):
            raise InvalidParameterError("texts must be a sequence of strings, not a single string")
        matrix = np.zeros((len(texts), self._dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for token in _tokens(text):
                digest = int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), "big")
                matrix[row, digest % self._dimension] += 1.0 if (digest >> 63) & 1 else -1.0
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)

    async def embed_query(self, text: str) -> np.ndarray:
        """``(dimension,)`` float32, L2-normalised; the same mapping as :meth:`embed_documents`."""
        return (await self.embed_documents([text]))[0]


class PrecomputedEmbedder(AsyncResource):
    """An embedder answering from vectors computed beforehand, so a benchmark or test times retrieval and
    not the model, and every system compared sees exactly the same vectors.

    Args:
        name: the model's name (stores record it; hybrid retrieval picks its default fusion by it).
        vectors: ``{text: (dim,) vector}``, all of one width, L2-normalised by the caller; kept as float32.
        fallback: an :class:`~fastrag.protocols.Embedder` for texts not in ``vectors`` (``None``: such a
            text raises :class:`KeyError`). ``misses`` counts the texts it was asked for.

    Raises:
        InvalidParameterError: ``vectors`` is empty or its vectors are not all ``(dim,)`` of one width.
    """

    def __init__(self, name: str, vectors: Mapping[str, np.ndarray], *, fallback: Any = None) -> None:
        widths = {np.shape(v) for v in vectors.values()}
        if not vectors or len(widths) != 1 or len(next(iter(widths))) != 1:
            raise InvalidParameterError(f"vectors must be a non-empty table of (dim,) vectors of one width, got {widths}")
        keys = list(vectors)
        matrix = np.asarray([vectors[k] for k in keys], dtype=np.float32)
        self._table = dict(zip(keys, matrix, strict=True))
        self._name = name
        self._dimension = int(matrix.shape[1])
        self.fallback = fallback
        self.misses = 0

    @property
    def name(self) -> str:
        """The name given."""
        return self._name

    @property
    def dimension(self) -> int:
        """Width of every vector."""
        return self._dimension

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), dimension)`` float32 rows from the table (the fallback's for texts not in it).

        Raises:
            InvalidParameterError: ``texts`` is a single string.
            KeyError: a text is not in the table and there is no fallback.
        """
        if isinstance(texts, str):
            raise InvalidParameterError("texts must be a sequence of strings, not a single string")
        rows = [self._table.get(t) for t in texts]
        missing = [i for i, row in enumerate(rows) if row is None]
        if missing:
            if self.fallback is None:
                raise KeyError(f"{len(missing)} texts have no precomputed {self._name} vector")
            self.misses += len(missing)
            computed = await self.fallback.embed_documents([texts[i] for i in missing])
            for i, vector in zip(missing, computed, strict=True):
                rows[i] = np.asarray(vector, dtype=np.float32)
        return np.stack(rows) if rows else np.zeros((0, self._dimension), dtype=np.float32)

    async def embed_query(self, text: str) -> np.ndarray:
        """The table's ``(dimension,)`` vector for ``text`` (else the fallback's ``embed_query``)."""
        vector = self._table.get(text)
        if vector is not None:
            return vector
        if self.fallback is None:
            raise KeyError(f"the query has no precomputed {self._name} vector")
        self.misses += 1
        return np.asarray(await self.fallback.embed_query(text), dtype=np.float32)

    # lifecycle (AsyncResource): nothing to release (a fallback stays the caller's)


class RecordingSleep:
    """A :attr:`~fastrag.retry.RetryPolicy.sleep` that records each requested delay (seconds) instead of waiting,
    so retry tests run instantly and can assert the backoff schedule: ``RetryPolicy(sleep=RecordingSleep())``."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
