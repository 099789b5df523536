"""Approximate k-NN for the embedded SQLite store, from faiss: an HNSW graph, or a PQ fast scan re-scored.

Two index types with one API (``build``, ``add``, ``remove``, ``search``, ``save``, ``load``, ``len``,
``max_key``, ``keys``, ``dead_fraction``, ``memory_mapped``), so the store can hold either:
:class:`HNSWIndex` (below; sub-millisecond on real text vectors, a poor fit for random ones) and
:class:`PQFastScanIndex` (a linear scan of 4-bit codes whose best candidates are re-scored exactly against
the store's own float vectors; its class docstring and ``docs/ann.md`` say when to prefer it). Both
``search`` methods take ``vectors=``: the fast scan needs it, the graph ignores it.

:class:`HNSWIndex` wraps `faiss <https://github.com/facebookresearch/faiss>`_'s ``IndexHNSWFlat`` (inner
product over L2-normalised float32 rows, so scores are cosine similarities) inside an ``IndexIDMap`` that
keys each vector by the store's int64 rowid. It needs the ``ann`` extra: ``pip install "fastrag-retrieval[ann]"``;
faiss is imported on first use, never by ``import fastrag``.

Algorithm: Hierarchical Navigable Small World graphs (Yu. A. Malkov and D. A. Yashunin, "Efficient and
robust approximate nearest neighbor search using Hierarchical Navigable Small World graphs", IEEE TPAMI
42(4), 2020; arXiv:1603.09320, 2016/2018). A search walks a layered proximity graph greedily from one
entry point, keeping the ``ef_search`` best candidates seen; ``M`` bounds each node's links (``2 * M`` on
the bottom layer) and ``ef_construction`` is the candidate list while inserting. Larger values: better
recall, slower builds and searches.

Why faiss (``docs/ann.md`` has the tables; ``benchmarks/ann_libraries.py`` measures them): of usearch,
faiss and hnswlib, it is the only one whose Python binding filters inside the native search (an
``IDSelectorBitmap`` of allowed keys; hnswlib calls a Python function for every visited node, 15 ms a
query at 1% allowed on 50,000 rows; usearch's binding has no filter); its saved vectors can be
memory-mapped; it is actively released; and the same package has the index that meets the random-vector
target where no graph does (product-quantisation fast scan, ``docs/ann.md``). hnswlib's unfiltered graph
walk was about 1.4x faster at equal recall; usearch's was slower than both. faiss cannot delete from an
HNSW graph, so :meth:`HNSWIndex.remove` tombstones (the vector stays as a waypoint, never in a result)
and the owner rebuilds when :attr:`HNSWIndex.dead_fraction` grows.

Measured on 2 cores, one query at a time (recall@10 against exact numpy k-NN; ``docs/ann.md``), with
``M = 32`` and ``ef_construction = 128``:

- SciFact abstracts cut into sentences (50,170 rows of the shipped static model's 256-dim vectors):
  ``ef_search`` 64: recall 0.969 at 0.25 ms; 128: 0.988 at 0.39 ms; exact numpy: 2.6 ms. Build 18 s.
- Random unit vectors of 256 dims (the benchmark's synthetic corpus), the worst case for any graph:
  recall 0.95 needs ``ef_search`` 256 at 20,000 rows (1.3 ms, exact 1.1 ms) and about 1,100 at 100,000
  (9 ms, exact 10 ms): no faster than exact, and worse as the corpus grows. Use exact search, or the
  fast-scan index ``docs/ann.md`` describes, for such vectors.

Filtered search (``allowed``): faiss skips disallowed keys inside the walk but counts them against
``ef_search``, so a plain filtered walk loses recall as the filter narrows (50,000 sentences, ``ef_search``
128: 0.97 at 20% allowed, 0.92 at 5%, 0.69 at 1%) and can come back short. :meth:`HNSWIndex.search`
therefore widens the walk to ``ef_search * stored / allowed`` candidates (recall 0.995-1.0 at 2-50%
allowed) and scores the allowed rows exactly when that is cheaper: when they number at most
``exact_rows_per_candidate`` (32) times the widened list, from the measured cost of one exact row (about
50 ns) against one step of the walk (1.5-3 us). It also answers exactly whenever the walk returns fewer
than ``k`` while more allowed keys exist, so a result is never short unless fewer than ``k`` allowed keys
are in the index.

Concurrency: searches share the index; :meth:`~HNSWIndex.add` and :meth:`~HNSWIndex.remove` change it in
place under the write side of a readers-writer lock. faiss documents its CPU indexes as safe for
concurrent searches but not for a search during a change ("Threads and asynchronous calls" in the faiss
wiki), so a search waits while a change runs and never sees a half-inserted vector.

faiss builds with OpenMP threads; on a machine shared with other work set ``OMP_WAIT_POLICY=PASSIVE``
before faiss loads (spinning idle threads made builds up to 5x slower on a busy 2-core machine here).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import IO, Any

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

DEFAULT_M = 32
"""HNSW links per node (``2 * M`` on the bottom layer): 256 bytes of links a vector."""

DEFAULT_EF_CONSTRUCTION = 128
"""Candidates kept while inserting: 60 s for 100,000 random 256-dim rows, 18 s for 50,000 sentence
vectors, on 2 cores."""

DEFAULT_EF_SEARCH = 128
"""Candidates kept while searching (at least ``k``): recall@10 0.988 on 50,000 SciFact sentence vectors
(0.969 at 64), with room for recall to fall as a real corpus grows. Random vectors need far more."""

DEFAULT_EXACT_ROWS_PER_CANDIDATE = 32.0
"""A search scores the allowed rows exactly when they number at most this many times the walk's candidate
list: one exact row costs about 50 ns, one step of the walk 1.5-3 us (measured, 2 cores)."""

class HNSWIndex:
    """An HNSW index of L2-normalised vectors keyed by int64 rowids, with filtered search and atomic files.

    Build one with :meth:`build` or open a saved one with :meth:`load`; the constructor is not public.
    All methods are blocking (CPU-bound, the GIL released inside faiss): call them from a worker thread
    (``anyio.to_thread.run_sync``) in async code. Thread safety: any number of concurrent
    :meth:`search` calls; :meth:`add` and :meth:`remove` change the index in place while searches wait
    (see the module docstring); :meth:`save` may run alongside searches.

    Attributes:
        dimension: the vectors' width.
        stamp: the text :meth:`save` was given, as :meth:`load` read it back; ``None`` for a built index or
            a file saved without one. Never changed by the index itself.
    """

    def __init__(self, index: Any, *, exact_rows_per_candidate: float, source: IO[bytes] | None = None) -> None:
        faiss = import_faiss()
        self._index = index  # IndexIDMap(IndexHNSWFlat), inner product
        self._hnsw = faiss.downcast_index(index.index)
        self.dimension = int(index.d)
        self._exact_rows_per_candidate = float(exact_rows_per_candidate)
        self._source = source  # the open file a memory-mapped index views; None when it owns its memory
        self._lock = ReadWriteLock()
        self.stamp: str | None = None  # what load read from the file (see save)
        self._reindex()

    # ---------------------------------------------------------------------------------- construction

    @classmethod
    def build(
        cls,
        matrix: np.ndarray,
        keys: np.ndarray,
        *,
        m: int = DEFAULT_M,
        ef_construction: int = DEFAULT_EF_CONSTRUCTION,
        ef_search: int = DEFAULT_EF_SEARCH,
        exact_rows_per_candidate: float = DEFAULT_EXACT_ROWS_PER_CANDIDATE,
    ) -> HNSWIndex:
        """Build an index over ``matrix``, row ``i`` keyed by ``keys[i]``.

        Building uses faiss's OpenMP threads (all cores unless ``OMP_NUM_THREADS`` or
        ``faiss.omp_set_num_threads`` says otherwise): 18 s for 50,000 sentence vectors and 60 s for
        100,000 random 256-dim rows on 2 cores (``docs/ann.md``).

        Args:
            matrix: ``(n, dim)`` float32 (other floats are converted), rows L2-normalised (so that the
                inner product the index ranks by is cosine similarity; not checked). ``n`` may be 0.
            keys: ``(n,)`` distinct non-negative integers (the store's rowids), stored as int64.
            m: HNSW ``M``, links per node (an int >= 2). Default :data:`DEFAULT_M`.
            ef_construction: candidates kept while inserting (an int > 0). Default
                :data:`DEFAULT_EF_CONSTRUCTION`.
            ef_search: default candidates kept while searching (an int > 0; at least ``k`` is used);
                saved with the index. Default :data:`DEFAULT_EF_SEARCH`.
            exact_rows_per_candidate: a search scores the allowed rows exactly when there are at most
                this many times the graph walk's candidate list of them (a number >= 0; 0: only when the
                walk comes back short). Not saved: give it again to :meth:`load`. Default
                :data:`DEFAULT_EXACT_ROWS_PER_CANDIDATE`.

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
        if isinstance(m, bool) or not isinstance(m, int) or m < 2:
            raise InvalidParameterError(f"m must be an int >= 2, got {m!r}")
        check_k(ef_construction, "ef_construction")
        check_k(ef_search, "ef_search")
        _check_ratio(exact_rows_per_candidate)
        hnsw = faiss.IndexHNSWFlat(rows.shape[1], m, faiss.METRIC_INNER_PRODUCT)
        hnsw.hnsw.efConstruction = ef_construction
        hnsw.hnsw.efSearch = ef_search
        index = faiss.IndexIDMap(hnsw)  # keeps a reference to hnsw
        if len(rows):
            index.add_with_ids(rows, ids)
        return cls(index, exact_rows_per_candidate=exact_rows_per_candidate)

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, mmap: bool = True,
             exact_rows_per_candidate: float = DEFAULT_EXACT_ROWS_PER_CANDIDATE) -> HNSWIndex:
        """Open an index written by :meth:`save`.

        Args:
            path: the file.
            mmap: map the stored vectors (about 80% of the file at ``dim = 256``, ``M = 32``) from the file
                instead of reading them into memory; the graph is read. The first :meth:`add` or
                :meth:`remove` then reads the whole index into memory (from the same file, even if it was
                replaced since). ``False``: read everything now.
            exact_rows_per_candidate: as in :meth:`build`.

        Returns:
            The index, with the ``ef_search`` it was saved with and the ``stamp`` (:attr:`stamp`; ``None``
            for a file saved without one).

        Raises:
            ConfigurationError: faiss is not installed.
            BackendUnavailableError: the file is missing, unreadable, or not an index :meth:`save` wrote.
            InvalidParameterError: ``exact_rows_per_candidate`` is negative or not a number.
        """
        faiss = import_faiss()
        _check_ratio(exact_rows_per_candidate)
        try:
            index, stamp, source = read_index(path, mmap=mmap)
        except (OSError, RuntimeError) as exc:
            raise BackendUnavailableError(f"cannot read the ANN index {os.fspath(path)!r}: {exc}") from exc
        if (  # read_index returns the most derived class already (and owns it: never re-wrap it)
            not isinstance(index, faiss.IndexIDMap)
            or not isinstance(faiss.downcast_index(index.index), faiss.IndexHNSWFlat)
            or index.metric_type != faiss.METRIC_INNER_PRODUCT
        ):
            if source is not None:
                source.close()
            raise BackendUnavailableError(f"{os.fspath(path)!r} is not an index HNSWIndex.save wrote")
        loaded = cls(index, exact_rows_per_candidate=exact_rows_per_candidate, source=source)
        loaded.stamp = stamp
        return loaded

    def save(self, path: str | os.PathLike[str], *, stamp: str | None = None) -> None:
        """Write the index to ``path`` atomically: a temporary file in the same folder, fsync, rename.

        A reader of ``path`` sees the old file or the new one, never a partial one, even if this process
        dies midway; the temporary file of a save killed midway is removed by
        :func:`~fastrag.vector_store.sqlite.ann.files.remove_abandoned` (the store calls it when opened).
        Searches may run meanwhile; changes wait.

        Args:
            path: the file.
            stamp: text saved with the index and read back by :meth:`load` as :attr:`stamp` (the SQLite
                store records which state of its database the index covers). ``None``: none.

        Raises:
            BackendUnavailableError: the file cannot be written (the folder is missing, read-only, full);
                ``path`` is then unchanged and no temporary file is left.
        """
        save_index_atomically(self._index, self._lock, path, stamp)

    # --------------------------------------------------------------------------------------- changes

    def add(self, matrix: np.ndarray, keys: np.ndarray) -> None:
        """Insert vectors, in place (this index changes; nothing is returned).

        A key already in the index is replaced: its old vector is tombstoned (see :meth:`remove`) and the
        new one inserted. Searches wait while this runs (on 2 cores: about 0.5 s per 1,000 sentence
        vectors added to 50,000, 0.8 s per 1,000 random 256-dim rows added to 100,000), so they never see
        a half-inserted vector. Add in batches; a caller that cannot let searches wait that long builds a
        new index aside and swaps the reference.

        Args:
            matrix: ``(n, dimension)`` float32, rows L2-normalised.
            keys: ``(n,)`` distinct non-negative integers.

        Raises:
            DimensionMismatchError: ``matrix`` is not ``(len(keys), dimension)``.
            InvalidParameterError: a NaN or infinite value, or bad keys.
        """
        ids = check_keys(keys)
        rows = np.ascontiguousarray(check_embeddings(matrix, len(ids), dimension=self.dimension, store=INDEX_NAME))
        if not len(rows):
            return
        with self._lock.writing():
            self._own()
            self._tombstone(ids)
            self._index.add_with_ids(rows, ids)
            self._reindex()

    def remove(self, keys: np.ndarray) -> int:
        """Tombstone these keys, in place: they are never returned again.

        faiss cannot unlink a node from an HNSW graph, so the vector stays as a waypoint for other
        searches (and in memory and in the file) until the owner rebuilds, which it should do when
        :attr:`dead_fraction` grows (above 0.2, say: tombstones make every search a filtered one).

        Args:
            keys: integers; those not in the index are ignored.

        Returns:
            How many keys were in the index and are now removed.

        Raises:
            InvalidParameterError: ``keys`` is not a 1-D integer array.
        """
        arr = removal_keys(keys)
        with self._lock.writing():
            before = self._n_live
            if len(arr):
                self._own()
                self._tombstone(arr)
                self._reindex()
            return before - self._n_live

    def _own(self) -> None:
        """Read a memory-mapped index into memory (faiss aborts the process on a change to a mapped one)."""
        if self._source is None:
            return
        faiss = import_faiss()
        self._source.seek(0)
        index = faiss.read_index(faiss.PyCallbackIOReader(self._source.read))
        self._source.close()
        self._source = None
        self._index, self._hnsw = index, faiss.downcast_index(index.index)

    def _tombstone(self, keys: np.ndarray) -> None:
        """Point the positions of ``keys`` at key -1, which no selector admits (writer, under the lock)."""
        faiss = import_faiss()
        keys = keys[(keys >= 0) & (keys < len(self._position))]
        positions = self._position[keys]
        positions = positions[positions >= 0]
        if len(positions):
            id_map = faiss.rev_swig_ptr(self._index.id_map.data(), self._index.id_map.size())
            id_map[positions] = -1

    def _reindex(self) -> None:
        """Recompute the key -> position table and the live-key bitmap from the faiss id map."""
        faiss = import_faiss()
        id_map = faiss.vector_to_array(self._index.id_map).astype(np.int64, copy=False)
        live = np.flatnonzero(id_map >= 0)
        keys = id_map[live]
        position = np.full(int(keys.max()) + 1 if len(keys) else 0, -1, dtype=np.int64)
        position[keys] = live
        self._position = position  # key -> position in the graph, -1 where absent
        self._n_live = len(keys)
        self._n_stored = len(id_map)
        covered = np.zeros(len(position), dtype=bool)
        covered[keys] = True
        self._covered = covered
        self._covered_bits = np.packbits(covered, bitorder="little") if self._n_live < self._n_stored else None

    # ---------------------------------------------------------------------------------------- search

    def search(
        self,
        query: np.ndarray,
        k: int,
        *,
        allowed: np.ndarray | None = None,
        ef_search: int | None = None,
        vectors: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` indexed keys most similar to ``query``, best first.

        Args:
            query: ``(dimension,)`` vector, any scale (it is L2-normalised here), finite, not all zeros.
            k: how many at most (an int > 0).
            allowed: ``None`` (every indexed key) or a 1-D bool array indexed by key: True where the key
                may be returned (the row is live and passes the filter). Keys at or past ``len(allowed)``
                are not allowed. Allowed keys that are not in the index are simply not found: the caller
                searches rows it has not indexed yet itself.
            ef_search: candidates kept by the graph walk for this call (an int > 0; at least ``k`` is
                used). ``None``: the index's default (:data:`DEFAULT_EF_SEARCH` unless built otherwise).
            vectors: ignored (the graph stores its own vectors); accepted so that a caller can search an
                :class:`HNSWIndex` and a :class:`PQFastScanIndex` with the same call.

        Returns:
            ``(keys, scores)``: ``(r,)`` int64 keys and ``(r,)`` float32 cosine similarities in [-1, 1],
            higher is better, best first. ``r == k`` unless fewer than ``k`` allowed keys are in the
            index, in which case all of them (``r`` may be 0). No key outside ``allowed`` or removed is
            ever returned. Approximate: recall@10 against exact search depends on ``ef_search`` (module
            docstring). A filter, or tombstones, widen the walk to ``ef_search * stored / allowed``
            candidates; when the allowed rows are few (at most ``exact_rows_per_candidate`` times that
            list), or the walk comes back short, they are scored exactly instead.

        Raises:
            DimensionMismatchError: ``query`` is not ``(dimension,)``.
            InvalidParameterError: ``k`` or ``ef_search`` is not a positive int; ``query`` holds NaN,
                infinity or only zeros; ``allowed`` is not a 1-D bool array.
        """
        del vectors  # see the docstring
        faiss = import_faiss()
        check_k(k)
        if ef_search is not None:
            check_k(ef_search, "ef_search")
        q = check_query_vector(query, dimension=self.dimension, store=INDEX_NAME)
        q = np.ascontiguousarray(q / np.float32(np.linalg.norm(q)), dtype=np.float32)
        if allowed is not None:
            allowed = np.asarray(allowed)
            if allowed.dtype != np.bool_ or allowed.ndim != 1:
                raise InvalidParameterError(f"allowed must be a 1-D bool array, got {allowed.dtype} {allowed.shape}")
        with self._lock.reading():
            if allowed is None:
                mask, n_allowed = None, self._n_live
                bits = self._covered_bits  # None unless there are tombstones: then the live keys
            else:
                allowed = allowed[: len(self._position)]
                mask = allowed & self._covered[: len(allowed)]  # allowed keys that are in the index
                n_allowed = int(np.count_nonzero(mask))
                bits = None
            if n_allowed == 0:
                return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
            ef = max(k, self._hnsw.hnsw.efSearch if ef_search is None else ef_search)
            # the walk also steps on disallowed and tombstoned nodes: widen it so that about ef allowed
            # candidates are kept, as in an unfiltered search
            ef = min(self._n_stored, math.ceil(ef * self._n_stored / n_allowed))
            if n_allowed <= self._exact_rows_per_candidate * ef:
                return self._exact(q, k, mask)
            if mask is not None:
                bits = np.packbits(mask, bitorder="little")
            # one selector and parameters object per call: IndexIDMap swaps params.sel during a search
            selector = None if bits is None else faiss.IDSelectorBitmap(len(bits), faiss.swig_ptr(bits))
            params = faiss.SearchParametersHNSW(efSearch=ef, sel=selector)
            scores, ids = self._index.search(q[None, :], k, params=params)
            del selector, bits  # alive until here: faiss holds raw pointers to both
            found = ids[0] >= 0
            if np.count_nonzero(found) < min(k, n_allowed):  # the walk came back short
                return self._exact(q, k, mask)
            return ids[0][found].astype(np.int64), scores[0][found].astype(np.float32)

    def _exact(self, q: np.ndarray, k: int, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k over the keys ``mask`` (by key; ``None``: all live keys) admits, from the vectors the
        index stores (a reader, under the lock)."""
        faiss = import_faiss()
        keys = np.flatnonzero(self._covered if mask is None else mask)
        if not len(keys):
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        storage = faiss.downcast_index(self._hnsw.storage)
        vectors = faiss.rev_swig_ptr(storage.get_xb(), self._n_stored * self.dimension)
        scores = vectors.reshape(self._n_stored, self.dimension)[self._position[keys]] @ q
        return best_k(keys, scores, k)

    # ------------------------------------------------------------------------------------ inspection

    def __len__(self) -> int:
        """How many keys the index holds (tombstoned ones not counted)."""
        return self._n_live

    def __repr__(self) -> str:
        return (f"HNSWIndex(dimension={self.dimension}, keys={self._n_live}, max_key={self.max_key}, "
                f"M={self._hnsw.hnsw.nb_neighbors(1)}, ef_search={self.ef_search})")

    @property
    def max_key(self) -> int:
        """The largest key in the index, -1 when empty. The store adds the rowids above it (rowids are
        never reused, so every row with a larger rowid is new)."""
        return len(self._position) - 1

    @property
    def keys(self) -> np.ndarray:
        """The keys in the index, ascending, ``(len(self),)`` int64 (a copy)."""
        return np.flatnonzero(self._covered).astype(np.int64)

    @property
    def dead_fraction(self) -> float:
        """Share of the stored vectors that are tombstones (removed or replaced keys), 0 to 1."""
        return 0.0 if not self._n_stored else 1.0 - self._n_live / self._n_stored

    @property
    def ef_search(self) -> int:
        """The default ``ef_search`` of :meth:`search` (saved with the index)."""
        return int(self._hnsw.hnsw.efSearch)

    @property
    def memory_mapped(self) -> bool:
        """Whether the stored vectors are mapped from the file :meth:`load` opened."""
        return self._source is not None


def _check_ratio(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value < math.inf:
        raise InvalidParameterError(f"exact_rows_per_candidate must be a finite number >= 0, got {value!r}")

