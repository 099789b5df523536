"""A second ANN index type: 4-bit product-quantisation fast scan, its best candidates re-scored exactly
(:class:`PQFastScanIndex`; its class docstring and ``docs/ann.md`` say when to prefer it to the HNSW graph)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from fastrag.errors import BackendUnavailableError, InvalidParameterError
from fastrag.vector_store._validation import check_embeddings, check_k, check_query_vector
from fastrag.vector_store.sqlite.ann._faiss import (
    INDEX_NAME,
    ReadWriteLock,
    best_k,
    check_keys,
    import_faiss,
    read_index,
    removal_keys,
    save_index_atomically,
)

DEFAULT_CANDIDATE_K = 256
"""Fast-scan candidates re-scored exactly per search (at least ``k`` are). Measured on random 256-dim unit
vectors (2 cores, ``docs/ann.md``): recall@10 0.962 at 4.0 ms against 84 ms exact at 1,000,000 rows (200:
0.950, the edge of the 0.95 target; 500: 0.987 at 4.8 ms); 0.992 at 0.8 ms against 9.7 ms at 100,000."""

DEFAULT_TRAINING_ROWS = 65_536
"""Rows sampled (seed 0, without replacement) to train the product quantiser's codebooks."""

DEFAULT_EXACT_SHARE = 0.03
"""A search scores the allowed rows exactly when they number at most this share of the stored rows (plus
the re-score depth): the fast scan costs 4-8 ns per stored row, an exact row gathered from the store's
matrix and dotted about 195 ns per allowed row (random 256-dim rows, 100,000 and 1,000,000 of them, 2
cores), a break-even share of 0.02-0.04."""

_PQ_NBITS = 4  # the fast-scan kernels handle 4-bit codes only
_PQ_CENTROIDS = 1 << _PQ_NBITS


class PQFastScanIndex:
    """A product-quantisation fast-scan index keyed by int64 rowids, re-scored exactly: the same API as
    :class:`HNSWIndex`, for vectors a graph cannot search well (no neighbourhood structure).

    What it is: faiss's ``IndexPQFastScan`` (``PQ{M}x4fs``, inner product) inside an ``IndexIDMap``.
    Each row is cut into ``M`` sub-vectors, each replaced by the 4-bit index of its nearest of 16 trained
    centroids (product quantisation: H. Jégou, M. Douze and C. Schmid, "Product quantization for nearest
    neighbor search", IEEE TPAMI 33(1), 2011); a search scores every code with SIMD look-up tables held
    in registers (fast scan: F. André, A.-M. Kermarrec and N. Le Scouarnec, "Cache locality is not
    enough: high-performance nearest neighbor search with product quantization fast scan", VLDB 2015;
    faiss's 4-bit variant: "Quicker ADC", IEEE TPAMI 2019). The ``candidate_k`` best by that estimate are
    then re-scored exactly against the float vectors, which the index does not keep: :meth:`search`
    takes a ``vectors`` function that gathers them from the store's own matrix. So the index costs
    ``M / 2`` bytes a vector (64 at 256 dims with the default ``M = dim / 2``) and the scores it returns
    are exact cosine similarities; only which rows reach the re-scoring is approximate.

    A search reads every stored code, so its cost grows linearly with the corpus (about 4 ms at 1,000,000
    rows on 2 cores against 84 ms for the exact scan) and does not depend on how clustered the data
    are: on random vectors it meets recall@10 >= 0.95 where HNSW cannot (``docs/ann.md``).

    Training and drift: the codebooks are trained once, by :meth:`build`, on up to ``training_rows``
    sampled rows; :meth:`add` encodes new rows with them. Rows unlike the training sample (another
    embedding model, a new domain) are coded coarsely, so their estimates are noisy and recall among them
    falls: rebuild when :attr:`untrained_fraction` (the share of live rows added after training) grows
    large (above 0.5, say) or the data have changed in kind. :meth:`remove` tombstones keys (never returned
    again; their codes stay until a rebuild, :attr:`dead_fraction`): faiss's own ``remove_ids`` on a
    fast-scan index left codes added afterwards unfindable by its scan (faiss-cpu 1.15: a vector equal to
    the query missing from the scan's top 20), so it is not used. Tombstones are not saved: whoever
    loads the index removes the keys its data no longer holds.

    Filters: faiss does not filter fast-scan searches, so :meth:`search` fetches ``candidate_k * stored /
    allowed`` candidates and keeps the allowed ones, and scores the allowed rows exactly (through
    ``vectors``) when they are few or when the fetch comes back short; a result is never short unless
    fewer than ``k`` allowed keys are in the index.

    Thread safety as :class:`HNSWIndex`: concurrent searches share the index; :meth:`add` and
    :meth:`remove` change it under the write side of a readers-writer lock. Build one with :meth:`build`
    or :meth:`load`; the constructor is not public. All methods block (CPU-bound; faiss releases the GIL).

    Attributes:
        dimension: the vectors' width.
        stamp: as :attr:`HNSWIndex.stamp`.
    """

    def __init__(self, index: Any, *, candidate_k: int, exact_share: float, trained_rows: int) -> None:
        faiss = import_faiss()
        self._index = index  # IndexIDMap(IndexPQFastScan), inner product
        self._pq = faiss.downcast_index(index.index)
        self.dimension = int(index.d)
        self._candidate_k = candidate_k
        self._exact_share = float(exact_share)
        self._lock = ReadWriteLock()
        self.stamp: str | None = None  # what load read from the file (see save)
        self._dead = np.zeros(0, dtype=bool)  # by key: tombstoned (still coded, never returned)
        self._reindex()
        # live rows encoded by codebooks trained on them (a loaded index counts as trained on all it holds)
        self._trained_rows = min(trained_rows, self._n_live)

    # ---------------------------------------------------------------------------------- construction

    @classmethod
    def build(
        cls,
        matrix: np.ndarray,
        keys: np.ndarray,
        *,
        sub_quantizers: int | None = None,
        training_rows: int = DEFAULT_TRAINING_ROWS,
        candidate_k: int = DEFAULT_CANDIDATE_K,
        exact_share: float = DEFAULT_EXACT_SHARE,
    ) -> PQFastScanIndex:
        """Train the codebooks on a sample of ``matrix`` and encode every row, row ``i`` keyed by ``keys[i]``.

        On 2 cores: about 2 s for 100,000 random 256-dim rows, 6-9 s for 1,000,000 (training on 65,536
        rows dominates small builds; faiss's OpenMP threads, see the module docstring).

        Args:
            matrix: ``(n, dim)`` float32 (other floats are converted), rows L2-normalised (not checked). ``n``
                may be 0: the first :meth:`add` then trains on its rows.
            keys: ``(n,)`` distinct non-negative integers (the store's rowids), stored as int64.
            sub_quantizers: ``M``, the sub-vectors each row is cut into (an int > 0 dividing ``dim``); each
                takes 4 bits. ``None``: ``dim / 2`` (2 dims a sub-vector, 64 bytes a row at 256 dims) when
                ``dim`` is even, else ``dim``.
            training_rows: how many rows (sampled with seed 0) train the codebooks (an int > 0). Fewer than
                16 rows are repeated to 16.
            candidate_k: default fast-scan candidates re-scored exactly per search (an int > 0; at least
                ``k`` are used). Not saved: give it again to :meth:`load`. Default
                :data:`DEFAULT_CANDIDATE_K`.
            exact_share: a filtered search scores the allowed rows exactly when they number at most this
                share of the stored rows plus the re-score depth (a number in [0, 1]). Not saved. Default
                :data:`DEFAULT_EXACT_SHARE`.

        Returns:
            The new index.

        Raises:
            ConfigurationError: faiss is not installed (``pip install "fastrag-retrieval[ann]"``).
            DimensionMismatchError: ``matrix`` is not ``(len(keys), dim)`` with ``dim > 0``.
            InvalidParameterError: a NaN or infinite value; bad keys; a parameter out of range.
        """
        faiss = import_faiss()
        ids = check_keys(keys)
        rows = np.ascontiguousarray(check_embeddings(matrix, len(ids), dimension=None, store=INDEX_NAME))
        dim = rows.shape[1]
        if sub_quantizers is None:
            sub_quantizers = dim // 2 if dim % 2 == 0 else dim
        if (isinstance(sub_quantizers, bool) or not isinstance(sub_quantizers, int) or sub_quantizers < 1
                or dim % sub_quantizers):
            raise InvalidParameterError(f"sub_quantizers must be an int > 0 dividing {dim}, got {sub_quantizers!r}")
        check_k(training_rows, "training_rows")
        check_k(candidate_k, "candidate_k")
        _check_share(exact_share)
        pq = faiss.IndexPQFastScan(dim, sub_quantizers, _PQ_NBITS, faiss.METRIC_INNER_PRODUCT)
        index = faiss.IndexIDMap(pq)  # keeps a reference to pq
        if len(rows):
            _train(pq, rows, training_rows)
            index.add_with_ids(rows, ids)
        return cls(index, candidate_k=candidate_k, exact_share=exact_share, trained_rows=len(rows))

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        mmap: bool = True,
        candidate_k: int = DEFAULT_CANDIDATE_K,
        exact_share: float = DEFAULT_EXACT_SHARE,
    ) -> PQFastScanIndex:
        """Open an index written by :meth:`save`.

        Args:
            path: the file.
            mmap: accepted for the same call as :meth:`HNSWIndex.load`, but the codes are always read into
                memory (faiss maps only flat float storage; fast-scan codes live in aligned tables). They
                are small: 64 bytes a row at 256 dims, 61 MB at 1,000,000 rows. :attr:`memory_mapped` is
                False.
            candidate_k: as in :meth:`build`.
            exact_share: as in :meth:`build`.

        Returns:
            The index, with the ``stamp`` it was saved with (:attr:`stamp`). Every row it holds counts as
            trained on (:attr:`untrained_fraction` 0).

        Raises:
            ConfigurationError: faiss is not installed.
            BackendUnavailableError: the file is missing, unreadable, or not an index :meth:`save` wrote.
            InvalidParameterError: ``candidate_k`` or ``exact_share`` is out of range.
        """
        del mmap  # see the docstring: nothing to map
        faiss = import_faiss()
        check_k(candidate_k, "candidate_k")
        _check_share(exact_share)
        try:
            index, stamp, _ = read_index(path, mmap=False)
        except (OSError, RuntimeError) as exc:
            raise BackendUnavailableError(f"cannot read the ANN index {os.fspath(path)!r}: {exc}") from exc
        if (
            not isinstance(index, faiss.IndexIDMap)
            or not isinstance(faiss.downcast_index(index.index), faiss.IndexPQFastScan)
            or index.metric_type != faiss.METRIC_INNER_PRODUCT
        ):
            raise BackendUnavailableError(f"{os.fspath(path)!r} is not an index PQFastScanIndex.save wrote")
        loaded = cls(index, candidate_k=candidate_k, exact_share=exact_share, trained_rows=int(index.ntotal))
        loaded.stamp = stamp
        return loaded

    def save(self, path: str | os.PathLike[str], *, stamp: str | None = None) -> None:
        """Write the index to ``path`` atomically: a temporary file in the same folder, fsync, rename.

        A reader of ``path`` sees the old file or the new one, never a partial one. Searches may run
        meanwhile; changes wait. ``candidate_k`` and ``exact_share`` are not saved; ``stamp`` is, as by
        :meth:`HNSWIndex.save`.

        Raises:
            BackendUnavailableError: the file cannot be written (the folder is missing, read-only, full);
                ``path`` is then unchanged and no temporary file is left.
        """
        save_index_atomically(self._index, self._lock, path, stamp)

    # --------------------------------------------------------------------------------------- changes

    def add(self, matrix: np.ndarray, keys: np.ndarray) -> None:
        """Encode and insert vectors, in place; a key already stored (live or removed) is refused.

        Rows are encoded with the codebooks :meth:`build` trained (an index built empty trains on the
        first rows added); rows far from that training sample are estimated coarsely (see the class
        docstring and :attr:`untrained_fraction`). Searches wait while this runs; replacing keys costs a
        compaction of the codes (linear in the index).

        Args:
            matrix: ``(n, dimension)`` float32, rows L2-normalised.
            keys: ``(n,)`` distinct non-negative integers.

        Raises:
            DimensionMismatchError: ``matrix`` is not ``(len(keys), dimension)``.
            InvalidParameterError: a NaN or infinite value, bad keys, or a key already stored.
        """
        ids = check_keys(keys)
        rows = np.ascontiguousarray(check_embeddings(matrix, len(ids), dimension=self.dimension, store=INDEX_NAME))
        if not len(rows):
            return
        with self._lock.writing():
            again = self._stored(ids)
            if len(again):
                raise InvalidParameterError(
                    f"keys {again[:5].tolist()} are already in the index: a fast-scan index cannot replace or "
                    "revive keys in place (faiss's removal corrupts the scan of codes added after it); build it again"
                )
            trained = self._trained_rows
            if not self._pq.is_trained:
                _train(self._pq, rows, DEFAULT_TRAINING_ROWS)
                trained = len(rows)
            self._index.add_with_ids(rows, ids)
            self._reindex()
            self._trained_rows = max(0, trained)

    def remove(self, keys: np.ndarray) -> int:
        """Tombstone these keys, in place: they are never returned again; their codes stay until a rebuild
        (:attr:`dead_fraction`; faiss's own removal is not used, see the class docstring).

        Args:
            keys: integers; those not in the index are ignored.

        Returns:
            How many keys were in the index and are now removed.

        Raises:
            InvalidParameterError: ``keys`` is not a 1-D integer array.
        """
        arr = removal_keys(keys)
        with self._lock.writing():
            arr = arr[(arr >= 0) & (arr < len(self._covered))]
            arr = np.unique(arr[self._covered[arr]])
            if len(arr):
                if len(self._dead) < len(self._covered):
                    grown = np.zeros(len(self._covered), dtype=bool)
                    grown[: len(self._dead)] = self._dead
                    self._dead = grown
                self._dead[arr] = True
                self._reindex()
                # which rows went is not tracked: assume the untrained ones stay (the cautious reading)
                self._trained_rows = max(0, min(self._trained_rows - len(arr), self._n_live))
            return len(arr)

    def _stored(self, keys: np.ndarray) -> np.ndarray:
        """The keys among ``keys`` whose codes are stored (live or tombstoned)."""
        faiss = import_faiss()
        stored = faiss.vector_to_array(self._index.id_map).astype(np.int64, copy=False)
        return np.unique(keys[np.isin(keys, stored)])

    def _reindex(self) -> None:
        """Recompute the live-key bitmap from the faiss id map and the tombstones."""
        faiss = import_faiss()
        id_map = faiss.vector_to_array(self._index.id_map).astype(np.int64, copy=False)
        covered = np.zeros(int(id_map.max()) + 1 if len(id_map) else 0, dtype=bool)
        covered[id_map] = True
        dead = self._dead[: len(covered)]
        covered[: len(dead)] &= ~dead
        self._covered = covered  # by key: True where the key is in the index and not tombstoned
        self._n_stored = len(id_map)
        self._n_live = int(np.count_nonzero(covered))

    # ---------------------------------------------------------------------------------------- search

    def search(
        self,
        query: np.ndarray,
        k: int,
        *,
        allowed: np.ndarray | None = None,
        vectors: Callable[[np.ndarray], np.ndarray] | None = None,
        candidate_k: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` indexed keys most similar to ``query``, best first, with exact scores.

        Args:
            query: ``(dimension,)`` vector, any scale (it is L2-normalised here), finite, not all zeros.
            k: how many at most (an int > 0).
            allowed: ``None`` (every indexed key) or a 1-D bool array indexed by key: True where the key
                may be returned. Keys at or past ``len(allowed)`` are not allowed. As in
                :meth:`HNSWIndex.search`.
            vectors: required. Given ``(r,)`` int64 keys of this index, returns their ``(r, dimension)``
                float32 L2-normalised vectors in that order (the store gathers them from its matrix by
                rowid). Called once or twice per search, under the index's read lock.
            candidate_k: fast-scan candidates re-scored for this call (an int > 0; at least ``k`` are
                used). ``None``: the index's default (:data:`DEFAULT_CANDIDATE_K` unless built otherwise).

        Returns:
            ``(keys, scores)``: ``(r,)`` int64 keys and ``(r,)`` float32 cosine similarities in [-1, 1]
            (exact: ``vectors(keys) @ query``), higher is better, best first. ``r == k`` unless fewer
            than ``k`` allowed keys are in the index, in which case all of them. No key outside
            ``allowed`` is ever returned. Approximate only in which rows reach the re-scoring: recall@10
            against exact search depends on ``candidate_k`` (``docs/ann.md``). A filter widens the fetch
            to ``candidate_k * stored / allowed``; when the allowed rows number at most ``exact_share *
            stored + candidate_k``, or the fetch holds fewer than ``k`` of them, they are scored exactly.

        Raises:
            DimensionMismatchError: ``query`` is not ``(dimension,)``.
            InvalidParameterError: ``k`` or ``candidate_k`` is not a positive int; ``query`` holds NaN,
                infinity or only zeros; ``allowed`` is not a 1-D bool array; ``vectors`` is missing or
                returns an array of the wrong shape.
        """
        check_k(k)
        if candidate_k is not None:
            check_k(candidate_k, "candidate_k")
        if vectors is None or not callable(vectors):
            raise InvalidParameterError("PQFastScanIndex.search needs vectors=, a function from keys to their vectors")
        q = check_query_vector(query, dimension=self.dimension, store=INDEX_NAME)
        q = np.ascontiguousarray(q / np.float32(np.linalg.norm(q)), dtype=np.float32)
        if allowed is not None:
            allowed = np.asarray(allowed)
            if allowed.dtype != np.bool_ or allowed.ndim != 1:
                raise InvalidParameterError(f"allowed must be a 1-D bool array, got {allowed.dtype} {allowed.shape}")
        with self._lock.reading():
            n_stored = self._n_stored  # tombstoned codes are scanned too
            if allowed is None:
                mask, n_allowed = (None if self._n_live == n_stored else self._covered), self._n_live
            else:
                allowed = allowed[: len(self._covered)]
                mask = allowed & self._covered[: len(allowed)]
                n_allowed = int(np.count_nonzero(mask))
            if n_allowed == 0:
                return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
            depth = max(k, self._candidate_k if candidate_k is None else candidate_k)
            if n_allowed <= self._exact_share * n_stored + depth:
                return self._rescore(q, k, np.flatnonzero(self._covered if mask is None else mask), vectors)
            fetch = min(n_stored, math.ceil(depth * n_stored / n_allowed))
            _, ids = self._index.search(q[None, :], fetch)
            candidates = ids[0][ids[0] >= 0]
            if mask is not None:
                candidates = candidates[candidates < len(mask)]
                candidates = candidates[mask[candidates]]
            if len(candidates) < min(k, n_allowed):  # the fetch held too few allowed rows
                return self._rescore(q, k, np.flatnonzero(mask), vectors)
            return self._rescore(q, k, candidates.astype(np.int64, copy=False), vectors)

    def _rescore(
        self, q: np.ndarray, k: int, keys: np.ndarray, vectors: Callable[[np.ndarray], np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k of ``keys`` by ``vectors(keys) @ q``, best first."""
        rows = np.asarray(vectors(keys), dtype=np.float32)
        if rows.shape != (len(keys), self.dimension):
            raise InvalidParameterError(
                f"vectors returned shape {rows.shape} for {len(keys)} keys, expected {(len(keys), self.dimension)}"
            )
        scores = rows @ q
        return best_k(keys, scores, k)

    # ------------------------------------------------------------------------------------ inspection

    def __len__(self) -> int:
        """How many keys the index holds."""
        return self._n_live

    def __repr__(self) -> str:
        return (f"PQFastScanIndex(dimension={self.dimension}, keys={self._n_live}, max_key={self.max_key}, "
                f"M={self._pq.M}, candidate_k={self._candidate_k})")

    @property
    def max_key(self) -> int:
        """The largest key in the index, -1 when empty (as :attr:`HNSWIndex.max_key`)."""
        return len(self._covered) - 1

    @property
    def keys(self) -> np.ndarray:
        """The keys in the index, ascending, ``(len(self),)`` int64 (a copy)."""
        return np.flatnonzero(self._covered).astype(np.int64)

    @property
    def dead_fraction(self) -> float:
        """Share of the stored codes that are tombstoned (0 to 1): rebuild when it grows."""
        return 0.0 if not self._n_stored else 1.0 - self._n_live / self._n_stored

    @property
    def untrained_fraction(self) -> float:
        """Share of the live rows added after the codebooks were trained, 0 to 1 (an upper bound after
        removals). A rebuild retrains on the current rows: worth it when this is large and the new rows
        may differ from the old (class docstring)."""
        return 0.0 if not self._n_live else 1.0 - self._trained_rows / self._n_live

    @property
    def candidate_k(self) -> int:
        """The default ``candidate_k`` of :meth:`search`."""
        return self._candidate_k

    @property
    def memory_mapped(self) -> bool:
        """Always False: fast-scan codes are read into memory (see :meth:`load`)."""
        return False


def _train(pq: Any, rows: np.ndarray, training_rows: int) -> None:
    """Train ``pq``'s codebooks on up to ``training_rows`` of ``rows`` sampled with seed 0 (repeated to 16
    rows when fewer: k-means needs at least as many points as the 16 centroids)."""
    if len(rows) > training_rows:
        rows = rows[np.sort(np.random.default_rng(0).choice(len(rows), training_rows, replace=False))]
    if len(rows) < _PQ_CENTROIDS:
        rows = np.ascontiguousarray(np.resize(rows, (_PQ_CENTROIDS, rows.shape[1])))
    pq.train(rows)


def _check_share(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise InvalidParameterError(f"exact_share must be a number in [0, 1], got {value!r}")
