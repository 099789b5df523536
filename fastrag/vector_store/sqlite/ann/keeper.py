"""The SQLite store's ANN index over time: opened from its file only when the file is of this store's
history, extended with each newer state, saved beside the store, and kept answering in memory when the
file cannot be written.

:class:`IndexKeeper` is what :class:`~fastrag.vector_store.sqlite.SQLiteVectorStore` holds for
``vector_index="hnsw"`` or ``"pq"``. Its rules:

- **Which file is trusted.** The file is ``<store path>-<store id>.<kind>``; it is saved with a stamp (the
  store id and the ``(next_rowid, token)`` allocation of the state it covers,
  :mod:`fastrag.vector_store.sqlite.schema`). Opened, it is used only when the store's own ``allocations``
  still hold that pair (the store's state descends from the file's: every rowid the file holds names the
  same document, later writes only added rowids above and deleted rows) *and* every live row with a vector
  at or below its largest key is in it. Otherwise (a backup restored since, a file without a stamp, a file
  that cannot be read) the index is built again from the store, with a WARNING on logger
  ``fastrag.vector_store`` naming the reason. A trusted file is extended with the rows written since and
  purged of the rows deleted since, never rebuilt for them.
- **A file that cannot be written** (a full disk, a read-only folder): the search that tried to save goes
  on with the index in memory, and a WARNING on logger ``fastrag.vector_store`` names the file and the
  error; the save is tried again once another 5% of vectors have been added (one warning per attempt, not
  per search). An explicit :meth:`IndexKeeper.save` (``build_vector_index``) raises instead.
- **Temporary files** of saves interrupted by a crash are removed when the store opens
  (:func:`~fastrag.vector_store.sqlite.ann.files.remove_abandoned`: only those no live process is writing).

A backup must be restored with every store on the file closed (SQLite's rule for replacing a database
file); a process that keeps a store open across a restore keeps its in-memory caches of the old history.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sqlite3
import threading
from typing import Any

import numpy as np

from fastrag.errors import BackendUnavailableError
from fastrag.vector_store.sqlite.schema import allocation_token
from fastrag.vector_store.sqlite.snapshot import Snapshot

__all__ = ["SAVE_EVERY", "IndexKeeper"]

logger = logging.getLogger("fastrag.vector_store")

SAVE_EVERY = 0.05
"""Save the index again once the vectors added (or removed) since its last save pass this share of it."""


class IndexKeeper:
    """The approximate index of one store: built or opened on first use, extended, saved (module docstring).

    Args:
        kind: ``"hnsw"`` (:class:`~fastrag.vector_store.sqlite.ann.HNSWIndex`) or ``"pq"``
            (:class:`~fastrag.vector_store.sqlite.ann.PQFastScanIndex`).
        path: the index file, ``None`` for a store that keeps it in memory only (``":memory:"``).
        store: the store's path, for messages.
        store_id: the store's id, saved in the stamp and checked when the file is opened.
        read_only: the store is read-only: a saved file is read (when it may be trusted), never written.

    Thread safety: :meth:`current` and :meth:`save` may be called from any thread; they take turns.
    """

    def __init__(self, kind: str, *, path: str | None, store: str, store_id: str, read_only: bool = False) -> None:
        self.kind = kind
        self.path = path
        self.read_only = read_only
        """A store opened read-only: its saved index is read, never written."""
        self._store = store
        self._store_id = store_id
        self._lock = threading.Lock()
        self._index: Any = None  # the approximate index, once a dense search needed it
        self._unsaved = 0  # vectors added to or removed from it since it was last saved
        self._retry_at = 0  # after a failed save: the count of unsaved vectors at which to try again
        self._state: tuple[int, str | None] = (0, None)  # the (next_rowid, token) of the state it covers
        self.generation = -1
        """The newest state (generation) whose deletions the index has dropped; a search of an older state
        passes its own live rows as the filter."""

    def current(self, conn: sqlite3.Connection, snap: Snapshot, *, save: bool = True) -> Any:
        """The index, holding every vector of ``snap`` (or of a newer state), ready to search.

        Opened from the file (if it is of this store's history) or built on first use; extended with the
        vectors written since and purged of the rows deleted since when ``snap`` is at least as new as
        every state it has seen; rebuilt when over 30% of it is deleted rows (or, for PQ, over half was
        added after training). With ``save``, written to the file after a build and once the changes
        since the last save pass :data:`SAVE_EVERY` of it; a failed save is logged, never raised.

        Args:
            conn: the connection whose read transaction ``snap`` is (the allocations are read on it).
            snap: the state being searched.
            save: whether this call may save the file.

        Raises:
            ConfigurationError: faiss is not installed.
            BackendError: SQLite failed.
        """
        from fastrag.vector_store.sqlite.ann import HNSWIndex, PQFastScanIndex

        kind = HNSWIndex if self.kind == "hnsw" else PQFastScanIndex
        with self._lock:
            state = allocation_token(conn)  # the state snap is of: the same read transaction
            index = self._index
            if index is None and self.path is not None and os.path.exists(self.path):
                index = self._opened(kind, conn, snap)

            def rebuilt() -> Any:  # from every live row with a vector; unsaved until written
                chosen = np.flatnonzero(snap.searchable)
                self._unsaved = len(chosen) + 1
                self.generation = snap.generation
                self._state = state
                return kind.build(snap.matrix[chosen], snap.rowids[chosen])

            if index is None or index.dimension != snap.matrix.shape[1]:
                index = rebuilt()
            elif snap.generation >= self.generation:  # a state older than one seen: search it as it is
                # rowids ascend by position: only a state holding rows past the index's last key has new
                # ones; deleted rows are never added (a key tombstoned once is never live again)
                fresh = len(snap.rowids) and int(snap.rowids[-1]) > index.max_key
                new = np.flatnonzero(snap.searchable & (snap.rowids > index.max_key)) if fresh else ()
                if len(new):
                    index.add(snap.matrix[new], snap.rowids[new])
                    self._unsaved += len(new)
                if snap.generation > self.generation:  # rows deleted since: never answers again
                    keys = index.keys
                    keys = keys[keys < snap.size]
                    gone = keys[~snap.live[keys]]
                    if len(gone):
                        index.remove(gone)
                        self._unsaved += len(gone)
                    self.generation = snap.generation
                self._state = state
            # a graph mostly of deleted waypoints, or codebooks trained on under half the rows: build again
            if index.dead_fraction > 0.3 or getattr(index, "untrained_fraction", 0.0) > 0.5:
                index = rebuilt()
            self._index = index
            if (save and self.path is not None and not self.read_only and self._unsaved > SAVE_EVERY * len(index)
                    and self._unsaved >= self._retry_at):
                try:
                    self._write()
                except BackendUnavailableError as exc:
                    self._retry_at = self._unsaved + max(1, math.ceil(SAVE_EVERY * len(index)))
                    logger.warning(
                        "%s: %s; searches go on with the index in memory, and the save is tried again once %d "
                        "more vectors are added", self._store, exc, self._retry_at - self._unsaved,
                    )
            return index

    def save(self) -> None:
        """Write the index to its file now if it changed since its last save (nothing for an in-memory
        store, or before the index exists).

        Raises:
            BackendUnavailableError: the file cannot be written (the index stays in memory and searches
                use it).
        """
        with self._lock:
            if self.path is not None and not self.read_only and self._index is not None and self._unsaved:
                self._write()

    def _write(self) -> None:
        """Save the index with the stamp of the state it covers (under the lock)."""
        next_rowid, token = self._state
        stamp = json.dumps({"store_id": self._store_id, "next_rowid": next_rowid, "token": token})
        self._index.save(self.path, stamp=stamp)
        self._unsaved = 0
        self._retry_at = 0

    def _opened(self, kind: Any, conn: sqlite3.Connection, snap: Snapshot) -> Any:
        """The saved index if it may be trusted for ``snap`` (module docstring), else ``None`` (logged)."""
        try:
            index = kind.load(self.path)
        except BackendUnavailableError as exc:
            logger.warning("%s: %s; building the index again", self._store, exc)
            return None
        why = self._distrust(index, conn, snap)
        if why is None:
            return index
        logger.warning("%s: the saved ANN index %s %s; building it again", self._store, self.path, why)
        return None

    def _distrust(self, index: Any, conn: sqlite3.Connection, snap: Snapshot) -> str | None:
        """Why ``index`` (just loaded) is not an index of ``snap``'s history, or ``None`` when it is."""
        try:
            stamp = json.loads(index.stamp) if index.stamp is not None else None
        except ValueError:
            stamp = None
        if not isinstance(stamp, dict) or not isinstance(stamp.get("token"), str):
            return "does not say which state of the store it was built from (saved by an older fastrag?)"
        next_rowid = stamp.get("next_rowid")
        if stamp.get("store_id") != self._store_id or not isinstance(next_rowid, int):
            return "was saved for another store"
        if allocation_token(conn, next_rowid)[1] != stamp["token"]:
            return "was built from another history of this store (a backup restored since?)"
        if index.dimension != snap.matrix.shape[1]:
            return "holds vectors of another width"
        expected = snap.rowids[snap.searchable & (snap.rowids <= index.max_key)]
        if not np.isin(expected, index.keys, assume_unique=True).all():
            return "lacks documents the store holds (a backup restored since?)"
        return None
