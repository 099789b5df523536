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

import contextlib
import math
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from fastrag.errors import BackendUnavailableError, ConfigurationError, InvalidParameterError
from fastrag.vector_store._validation import check_embeddings, check_k, check_query_vector

__all__ = [
    "DEFAULT_CANDIDATE_K",
    "DEFAULT_EF_CONSTRUCTION",
    "DEFAULT_EF_SEARCH",
    "DEFAULT_EXACT_ROWS_PER_CANDIDATE",
    "DEFAULT_EXACT_SHARE",
    "DEFAULT_M",
    "DEFAULT_TRAINING_ROWS",
    "HNSWIndex",
    "PQFastScanIndex",
]

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

_INSTALL_HINT = 'the SQLite store\'s ANN index needs faiss: pip install "fastrag-retrieval[ann]"'
_WHAT = "ANN index"


def _faiss() -> Any:
    """The ``faiss`` module, imported on first use.

    Raises:
        ConfigurationError: faiss (``faiss-cpu``) is not installed; the message names the pip command.
    """
    try:
        import faiss
    except ImportError as exc:
        raise ConfigurationError(_INSTALL_HINT) from exc
    return faiss


class _ReadWriteLock:
    """Many readers or one writer; a waiting writer holds back new readers, so it cannot starve."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writing = False
        self._writers_waiting = 0

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        with self._cond:
            while self._writing or self._writers_waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        with self._cond:
            self._writers_waiting += 1
            try:
                while self._writing or self._readers:
                    self._cond.wait()
            finally:
                self._writers_waiting -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()


def _best(keys: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best of ``keys`` by ``scores``, best first: int64 keys and float32 scores."""
    if len(keys) > k:
        top = np.argpartition(-scores, k - 1)[:k]
        keys, scores = keys[top], scores[top]
    order = np.argsort(-scores, kind="stable")
    return keys[order].astype(np.int64), scores[order].astype(np.float32)


def _removal_keys(keys: Any) -> np.ndarray:
    """``keys`` to remove as int64 (any integers; those not in an index are ignored by the caller).

    Raises:
        InvalidParameterError: ``keys`` is not a 1-D integer array.
    """
    arr = np.asarray(keys)
    if arr.ndim != 1 or (len(arr) and not np.issubdtype(arr.dtype, np.integer)):
        raise InvalidParameterError(f"keys must be a 1-D integer array, got {arr.dtype} {arr.shape}")
    return arr.astype(np.int64, copy=False)


def _check_keys(keys: Any) -> np.ndarray:
    """``keys`` as a 1-D int64 array of distinct non-negative values.

    Raises:
        InvalidParameterError: not 1-D, a non-integer dtype, a negative key, a repeat.
    """
    arr = np.asarray(keys)
    n = len(arr) if arr.ndim == 1 else -1
    if arr.ndim != 1:
        raise InvalidParameterError(f"keys must be a 1-D array of rowids, got shape {arr.shape}")
    if n and not np.issubdtype(arr.dtype, np.integer):
        raise InvalidParameterError(f"keys must be integers (rowids), got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if n and arr.min() < 0:
        raise InvalidParameterError("keys must be non-negative (rowids)")
    if len(np.unique(arr)) != n:
        raise InvalidParameterError("keys must be distinct")
    return arr


class HNSWIndex:
    """An HNSW index of L2-normalised vectors keyed by int64 rowids, with filtered search and atomic files.

    Build one with :meth:`build` or open a saved one with :meth:`load`; the constructor is not public.
    All methods are blocking (CPU-bound, the GIL released inside faiss): call them from a worker thread
    (``anyio.to_thread.run_sync``) in async code. Thread safety: any number of concurrent
    :meth:`search` calls; :meth:`add` and :meth:`remove` change the index in place while searches wait
    (see the module docstring); :meth:`save` may run alongside searches.

    Attributes:
        dimension: the vectors' width.
    """

    def __init__(self, index: Any, *, exact_rows_per_candidate: float, source: IO[bytes] | None = None) -> None:
        faiss = _faiss()
        self._index = index  # IndexIDMap(IndexHNSWFlat), inner product
        self._hnsw = faiss.downcast_index(index.index)
        self.dimension = int(index.d)
        self._exact_rows_per_candidate = float(exact_rows_per_candidate)
        self._source = source  # the open file a memory-mapped index views; None when it owns its memory
        self._lock = _ReadWriteLock()
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
        faiss = _faiss()
        ids = _check_keys(keys)
        rows = np.ascontiguousarray(check_embeddings(matrix, len(ids), dimension=None, store=_WHAT))
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
            The index, with the ``ef_search`` it was saved with.

        Raises:
            ConfigurationError: faiss is not installed.
            BackendUnavailableError: the file is missing, unreadable, or not an index :meth:`save` wrote.
            InvalidParameterError: ``exact_rows_per_candidate`` is negative or not a number.
        """
        faiss = _faiss()
        _check_ratio(exact_rows_per_candidate)
        source: IO[bytes] | None = None
        try:
            if not mmap:
                index = faiss.read_index(os.fspath(path))
            else:
                # keep the file open, so a later change reads the very file the map shows (a save by
                # someone else replaces the name, not this inode)
                for _ in range(3):
                    source = open(path, "rb")  # noqa: SIM115 (lives as long as the index)
                    index = faiss.read_index(os.fspath(path), faiss.IO_FLAG_MMAP_IFC)
                    if os.fstat(source.fileno()).st_ino == os.stat(path).st_ino:
                        break
                    source.close()
                else:
                    source = None
                    raise OSError("the file was replaced three times while it was being opened")
        except (OSError, RuntimeError) as exc:
            if source is not None:
                source.close()
            raise BackendUnavailableError(f"cannot read the ANN index {os.fspath(path)!r}: {exc}") from exc
        if (  # read_index returns the most derived class already (and owns it: never re-wrap it)
            not isinstance(index, faiss.IndexIDMap)
            or not isinstance(faiss.downcast_index(index.index), faiss.IndexHNSWFlat)
            or index.metric_type != faiss.METRIC_INNER_PRODUCT
        ):
            if source is not None:
                source.close()
            raise BackendUnavailableError(f"{os.fspath(path)!r} is not an index HNSWIndex.save wrote")
        return cls(index, exact_rows_per_candidate=exact_rows_per_candidate, source=source)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the index to ``path`` atomically: a temporary file in the same folder, fsync, rename.

        A reader of ``path`` sees the old file or the new one, never a partial one, even if this process
        dies midway. Searches may run meanwhile; changes wait.

        Raises:
            BackendUnavailableError: the file cannot be written (the folder is missing, read-only, full).
        """
        _save_atomically(self._index, self._lock, path)

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
        ids = _check_keys(keys)
        rows = np.ascontiguousarray(check_embeddings(matrix, len(ids), dimension=self.dimension, store=_WHAT))
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
        arr = _removal_keys(keys)
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
        faiss = _faiss()
        self._source.seek(0)
        index = faiss.read_index(faiss.PyCallbackIOReader(self._source.read))
        self._source.close()
        self._source = None
        self._index, self._hnsw = index, faiss.downcast_index(index.index)

    def _tombstone(self, keys: np.ndarray) -> None:
        """Point the positions of ``keys`` at key -1, which no selector admits (writer, under the lock)."""
        faiss = _faiss()
        keys = keys[(keys >= 0) & (keys < len(self._position))]
        positions = self._position[keys]
        positions = positions[positions >= 0]
        if len(positions):
            id_map = faiss.rev_swig_ptr(self._index.id_map.data(), self._index.id_map.size())
            id_map[positions] = -1

    def _reindex(self) -> None:
        """Recompute the key -> position table and the live-key bitmap from the faiss id map."""
        faiss = _faiss()
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
        faiss = _faiss()
        check_k(k)
        if ef_search is not None:
            check_k(ef_search, "ef_search")
        q = check_query_vector(query, dimension=self.dimension, store=_WHAT)
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
        faiss = _faiss()
        keys = np.flatnonzero(self._covered if mask is None else mask)
        if not len(keys):
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        storage = faiss.downcast_index(self._hnsw.storage)
        vectors = faiss.rev_swig_ptr(storage.get_xb(), self._n_stored * self.dimension)
        scores = vectors.reshape(self._n_stored, self.dimension)[self._position[keys]] @ q
        return _best(keys, scores, k)

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


# ------------------------------------------------------------------------------------------------------
# A second index type: 4-bit product-quantisation fast scan, its best candidates re-scored exactly
# ------------------------------------------------------------------------------------------------------

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
    """

    def __init__(self, index: Any, *, candidate_k: int, exact_share: float, trained_rows: int) -> None:
        faiss = _faiss()
        self._index = index  # IndexIDMap(IndexPQFastScan), inner product
        self._pq = faiss.downcast_index(index.index)
        self.dimension = int(index.d)
        self._candidate_k = candidate_k
        self._exact_share = float(exact_share)
        self._lock = _ReadWriteLock()
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
        faiss = _faiss()
        ids = _check_keys(keys)
        rows = np.ascontiguousarray(check_embeddings(matrix, len(ids), dimension=None, store=_WHAT))
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
            The index. Every row it holds counts as trained on (:attr:`untrained_fraction` 0).

        Raises:
            ConfigurationError: faiss is not installed.
            BackendUnavailableError: the file is missing, unreadable, or not an index :meth:`save` wrote.
            InvalidParameterError: ``candidate_k`` or ``exact_share`` is out of range.
        """
        del mmap  # see the docstring: nothing to map
        faiss = _faiss()
        check_k(candidate_k, "candidate_k")
        _check_share(exact_share)
        try:
            index = faiss.read_index(os.fspath(path))
        except (OSError, RuntimeError) as exc:
            raise BackendUnavailableError(f"cannot read the ANN index {os.fspath(path)!r}: {exc}") from exc
        if (
            not isinstance(index, faiss.IndexIDMap)
            or not isinstance(faiss.downcast_index(index.index), faiss.IndexPQFastScan)
            or index.metric_type != faiss.METRIC_INNER_PRODUCT
        ):
            raise BackendUnavailableError(f"{os.fspath(path)!r} is not an index PQFastScanIndex.save wrote")
        return cls(index, candidate_k=candidate_k, exact_share=exact_share, trained_rows=int(index.ntotal))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the index to ``path`` atomically: a temporary file in the same folder, fsync, rename.

        A reader of ``path`` sees the old file or the new one, never a partial one. Searches may run
        meanwhile; changes wait. ``candidate_k`` and ``exact_share`` are not saved.

        Raises:
            BackendUnavailableError: the file cannot be written (the folder is missing, read-only, full).
        """
        _save_atomically(self._index, self._lock, path)

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
        ids = _check_keys(keys)
        rows = np.ascontiguousarray(check_embeddings(matrix, len(ids), dimension=self.dimension, store=_WHAT))
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
        arr = _removal_keys(keys)
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
        faiss = _faiss()
        stored = faiss.vector_to_array(self._index.id_map).astype(np.int64, copy=False)
        return np.unique(keys[np.isin(keys, stored)])

    def _reindex(self) -> None:
        """Recompute the live-key bitmap from the faiss id map and the tombstones."""
        faiss = _faiss()
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
        q = check_query_vector(query, dimension=self.dimension, store=_WHAT)
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
        return _best(keys, scores, k)

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


def _save_atomically(index: Any, lock: _ReadWriteLock, path: str | os.PathLike[str]) -> None:
    """Write a faiss ``index`` to ``path`` via a temporary file in the same folder, fsync and rename, holding
    the read side of ``lock`` while faiss writes.

    Raises:
        BackendUnavailableError: the file cannot be written.
    """
    faiss = _faiss()
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        with lock.reading():
            faiss.write_index(index, str(tmp))
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
        with contextlib.suppress(OSError):  # make the rename durable where the platform allows
            dir_fd = os.open(target.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
    except (OSError, RuntimeError) as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise BackendUnavailableError(f"cannot write the ANN index {os.fspath(path)!r}: {exc}") from exc


def _check_share(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise InvalidParameterError(f"exact_share must be a number in [0, 1], got {value!r}")
