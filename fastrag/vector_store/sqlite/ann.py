"""Approximate k-NN for the embedded SQLite store: an HNSW graph over its vectors, from faiss.

:class:`HNSWIndex` wraps `faiss <https://github.com/facebookresearch/faiss>`_'s ``IndexHNSWFlat`` (inner
product over L2-normalised float32 rows, so scores are cosine similarities) inside an ``IndexIDMap`` that
keys each vector by the store's int64 rowid. It needs the ``ann`` extra: ``pip install "fastrag[ann]"``;
faiss is imported on first use, never by ``import fastrag``.

Algorithm: Hierarchical Navigable Small World graphs (Malkov & Yashunin, "Efficient and robust approximate
nearest neighbor search using Hierarchical Navigable Small World graphs", IEEE TPAMI 42(4), 2020;
arXiv:1603.09320, 2016/2018). A search walks a layered proximity graph greedily from one entry point,
keeping the ``ef_search`` best candidates seen; ``M`` bounds each node's links (``2 * M`` on the bottom
layer) and ``ef_construction`` is the candidate list while inserting. Larger values: better recall,
slower builds and searches.

Why faiss (``docs/ann.md`` has the table, ``benchmarks/ann_libraries.py`` measures it): at equal recall it
had the lowest single-query latency of usearch, faiss and hnswlib on this machine; it is the only one of
the three whose Python binding filters inside the C++ search (an ``IDSelectorBitmap`` of allowed keys;
hnswlib calls a Python function per visited node, usearch's binding has no filter at all); its saved
vectors can be memory-mapped; and it is actively maintained. It cannot delete from an HNSW graph, so
:meth:`HNSWIndex.remove` tombstones (the vector stays in the graph as a waypoint, never in a result) and
the owner rebuilds when :attr:`HNSWIndex.dead_fraction` grows.

Parameters, measured on 2 cores with ``benchmarks/ann_libraries.py`` (recall@10 against exact numpy k-NN,
one query at a time; see ``docs/ann.md`` for every size and library):

- ``M = 32``, ``ef_construction = 128``: the defaults.
- ``ef_search``: SciFact's static-model vectors (5,183 rows) reach recall@10 0.955 at 32; random unit
  vectors of 256 dims, the worst case for any graph index, need 256 at 20,000 rows (0.949, 1.0 ms against
  1.0 ms exact: no gain at that size) and 512 at 100,000. The default is :data:`DEFAULT_EF_SEARCH`; pass
  ``ef_search=`` per search to trade recall for latency.

Filtered search (``allowed``): faiss skips disallowed keys inside the graph walk but stops after about
``ef_search`` steps, so a rare filter can come back short (SciFact, 1% allowed: 5% of the queries got
all 10). So :meth:`HNSWIndex.search` answers exactly (a product over the allowed rows' stored vectors)
when fewer than ``exact_below`` of the indexed keys are allowed, and also whenever the graph walk returns
fewer than ``k`` while more allowed keys exist: the result is never short unless fewer than ``k`` allowed
keys are in the index.

Concurrency: searches share the index; :meth:`~HNSWIndex.add` and :meth:`~HNSWIndex.remove` mutate it in
place under the write side of a readers-writer lock. faiss documents its CPU indexes as safe for
concurrent searches but not for a search during a change ("Threads and asynchronous calls" in the faiss
wiki), so a search waits while a change runs and never sees a half-inserted vector.
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from fastrag.errors import BackendUnavailableError, ConfigurationError, InvalidParameterError
from fastrag.vector_store._validation import check_embeddings, check_k, check_query_vector

__all__ = [
    "DEFAULT_EF_CONSTRUCTION",
    "DEFAULT_EF_SEARCH",
    "DEFAULT_EXACT_BELOW",
    "DEFAULT_M",
    "HNSWIndex",
]

DEFAULT_M = 32
"""HNSW links per node (``2 * M`` on the bottom layer). 32: recall 0.95 needs a smaller ``ef_search``
than with 16 on 256-dim vectors, for 256 bytes of links per vector."""

DEFAULT_EF_CONSTRUCTION = 128
"""Candidates kept while inserting. 128: within 0.01 recall of 200 on the benchmark, 1.5x faster to build."""

DEFAULT_EF_SEARCH = 128
"""Candidates kept while searching (at least ``k``). 128 gives recall@10 >= 0.98 on SciFact's
static-model vectors; random 256-dim vectors need 512 at 100,000 rows (``docs/ann.md``)."""

DEFAULT_EXACT_BELOW = 0.02
"""When fewer than this share of the indexed keys is allowed, :meth:`HNSWIndex.search` scores the
allowed rows exactly: at 1% the graph walk visits mostly disallowed nodes and can come back short, while
the exact product over 1% of the rows is already cheap."""

_INSTALL_HINT = 'the SQLite store\'s ANN index needs faiss: pip install "fastrag[ann]"'
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

    def __init__(self, index: Any, *, exact_below: float, source: IO[bytes] | None = None) -> None:
        faiss = _faiss()
        self._index = index  # IndexIDMap(IndexHNSWFlat), inner product
        self._hnsw = faiss.downcast_index(index.index)
        self.dimension = int(index.d)
        self._exact_below = float(exact_below)
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
        exact_below: float = DEFAULT_EXACT_BELOW,
    ) -> HNSWIndex:
        """Build an index over ``matrix``, row ``i`` keyed by ``keys[i]``.

        Building uses faiss's OpenMP threads (all cores unless ``OMP_NUM_THREADS`` or
        ``faiss.omp_set_num_threads`` says otherwise): about 90 s for 100,000 random 256-dim rows on 2
        busy cores, ``docs/ann.md``.

        Args:
            matrix: ``(n, dim)`` float32 (other floats are converted), rows L2-normalised (so that the
                inner product the index ranks by is cosine similarity; not checked). ``n`` may be 0.
            keys: ``(n,)`` distinct non-negative integers (the store's rowids), stored as int64.
            m: HNSW ``M``, links per node (an int >= 2). Default :data:`DEFAULT_M`.
            ef_construction: candidates kept while inserting (an int > 0). Default
                :data:`DEFAULT_EF_CONSTRUCTION`.
            ef_search: default candidates kept while searching (an int > 0; at least ``k`` is used);
                saved with the index. Default :data:`DEFAULT_EF_SEARCH`.
            exact_below: share of the indexed keys (0 to 1) under which a filtered search is answered
                exactly instead (not saved; give it again to :meth:`load`). Default
                :data:`DEFAULT_EXACT_BELOW`.

        Returns:
            The new index.

        Raises:
            ConfigurationError: faiss is not installed (``pip install "fastrag[ann]"``).
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
        _check_share(exact_below)
        hnsw = faiss.IndexHNSWFlat(rows.shape[1], m, faiss.METRIC_INNER_PRODUCT)
        hnsw.hnsw.efConstruction = ef_construction
        hnsw.hnsw.efSearch = ef_search
        index = faiss.IndexIDMap(hnsw)  # keeps a reference to hnsw
        if len(rows):
            index.add_with_ids(rows, ids)
        return cls(index, exact_below=exact_below)

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, mmap: bool = True,
             exact_below: float = DEFAULT_EXACT_BELOW) -> HNSWIndex:
        """Open an index written by :meth:`save`.

        Args:
            path: the file.
            mmap: map the stored vectors (about 80% of the file at ``dim = 256``, ``M = 32``) from the file
                instead of reading them into memory; the graph is read. The first :meth:`add` or
                :meth:`remove` then reads the whole index into memory (from the same file, even if it was
                replaced since). ``False``: read everything now.
            exact_below: as in :meth:`build`.

        Returns:
            The index, with the ``ef_search`` it was saved with.

        Raises:
            ConfigurationError: faiss is not installed.
            BackendUnavailableError: the file is missing, unreadable, or not an index :meth:`save` wrote.
            InvalidParameterError: ``exact_below`` is out of range.
        """
        faiss = _faiss()
        _check_share(exact_below)
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
        return cls(index, exact_below=exact_below, source=source)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the index to ``path`` atomically: a temporary file in the same folder, fsync, rename.

        A reader of ``path`` sees the old file or the new one, never a partial one, even if this process
        dies midway. Searches may run meanwhile; changes wait.

        Raises:
            BackendUnavailableError: the file cannot be written (the folder is missing, read-only, full).
        """
        faiss = _faiss()
        target = Path(path)
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        try:
            with self._lock.reading():
                faiss.write_index(self._index, str(tmp))
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

    # --------------------------------------------------------------------------------------- changes

    def add(self, matrix: np.ndarray, keys: np.ndarray) -> None:
        """Insert vectors, in place (this index changes; nothing is returned).

        A key already in the index is replaced: its old vector is tombstoned (see :meth:`remove`) and the
        new one inserted. Searches wait while this runs (about 0.25 s per 1,000 random 256-dim rows into
        20,000 on 2 cores; more as the graph grows), so they never see a half-inserted vector.

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
        arr = np.asarray(keys)
        if arr.ndim != 1 or (len(arr) and not np.issubdtype(arr.dtype, np.integer)):
            raise InvalidParameterError(f"keys must be a 1-D integer array, got {arr.dtype} {arr.shape}")
        arr = arr.astype(np.int64, copy=False)
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
        self, query: np.ndarray, k: int, *, allowed: np.ndarray | None = None, ef_search: int | None = None
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

        Returns:
            ``(keys, scores)``: ``(r,)`` int64 keys and ``(r,)`` float32 cosine similarities in [-1, 1],
            higher is better, best first. ``r == k`` unless fewer than ``k`` allowed keys are in the
            index, in which case all of them (``r`` may be 0). No key outside ``allowed`` or removed is
            ever returned. Approximate: recall@10 against exact search depends on ``ef_search`` (module
            docstring); a filter allowing fewer than ``exact_below`` of the keys, or one the graph walk
            cannot fill, is answered exactly.

        Raises:
            DimensionMismatchError: ``query`` is not ``(dimension,)``.
            InvalidParameterError: ``k`` or ``ef_search`` is not a positive int; ``query`` holds NaN,
                infinity or only zeros; ``allowed`` is not a 1-D bool array.
        """
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
            if self._n_live == 0:
                return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
            if allowed is None:
                bits = self._covered_bits  # None unless tombstones exist: then only live keys
            else:
                allowed = allowed[: len(self._position)]
                if np.count_nonzero(allowed) < max(k, self._exact_below * self._n_live):
                    return self._exact(q, k, allowed)
                bits = np.packbits(allowed, bitorder="little")
            ef = max(k, self._hnsw.hnsw.efSearch if ef_search is None else ef_search)
            # one selector and parameters object per call: IndexIDMap swaps params.sel during a search
            selector = None if bits is None else faiss.IDSelectorBitmap(len(bits), faiss.swig_ptr(bits))
            params = faiss.SearchParametersHNSW(efSearch=ef, sel=selector)
            scores, ids = self._index.search(q[None, :], k, params=params)
            del selector, bits  # alive until here: faiss holds raw pointers to both
            found = ids[0] >= 0
            keys, top = ids[0][found].astype(np.int64), scores[0][found].astype(np.float32)
            if len(keys) < k:
                reachable = self._n_live if allowed is None else int(np.count_nonzero(allowed & self._covered[: len(allowed)]))
                if len(keys) < min(k, reachable):
                    return self._exact(q, k, allowed)
            return keys, top

    def _exact(self, q: np.ndarray, k: int, allowed: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k over the allowed indexed keys, from the vectors the index stores (reader, locked)."""
        faiss = _faiss()
        keys = np.flatnonzero(self._covered if allowed is None else allowed & self._covered[: len(allowed)])
        if not len(keys):
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        storage = faiss.downcast_index(self._hnsw.storage)
        vectors = faiss.rev_swig_ptr(storage.get_xb(), self._n_stored * self.dimension)
        scores = vectors.reshape(self._n_stored, self.dimension)[self._position[keys]] @ q
        if len(keys) > k:
            top = np.argpartition(-scores, k - 1)[:k]
            keys, scores = keys[top], scores[top]
        order = np.argsort(-scores, kind="stable")
        return keys[order].astype(np.int64), scores[order].astype(np.float32)

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


def _check_share(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise InvalidParameterError(f"exact_below must be a number from 0 to 1, got {value!r}")
