"""What a read of the SQLite store keeps in memory: the vectors, BM25 lengths and liveness of one committed state.

A write appends one *block* to the ``blocks`` table: the rowids it wrote (ascending, never reused), their
BM25 lengths, and their L2-normalised vectors as one float32 matrix; a delete or an update tombstones the
old rowid (``tombstones(rowid, generation)``). The ``generation`` in ``meta`` names each committed state
and rises with every write. So a reader that holds the state of generation ``g`` reaches a later one by
reading only the blocks added since and the tombstones written after ``g``: a commit costs readers what
it changed, not a reload of the whole matrix.

:class:`Snapshot` is one immutable state; :class:`Arena` holds the append-only arrays that successive
snapshots share (each snapshot sees a prefix; appending past it never changes what an older snapshot
sees, and growing the arrays copies them into new ones, leaving the old ones to the snapshots that
hold them). Large numpy allocations are mapped lazily by the operating system, so unused capacity costs
address space, not resident memory.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass, field

import numpy as np

from fastrag.vector_store.sqlite.lexical import length_norms, mean_length

__all__ = ["BLOCKS_SCHEMA", "Arena", "Snapshot", "encode_block"]

BLOCKS_SCHEMA = """
CREATE TABLE IF NOT EXISTS blocks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: readers and caches name blocks and segments by id
    rows BLOB NOT NULL,
    lengths BLOB NOT NULL,
    vectors BLOB,
    has_vector BLOB
);
CREATE TABLE IF NOT EXISTS tombstones (rowid INTEGER PRIMARY KEY, generation INTEGER NOT NULL);
"""
_ROWS = np.dtype("<i4")
_VEC = np.dtype("<f4")


def encode_block(rowids: np.ndarray, lengths: np.ndarray, vectors: np.ndarray | None, has_vector: np.ndarray) -> tuple:
    """The ``(rows, lengths, vectors, has_vector)`` column values of one block.

    ``vectors`` is ``(n, dim)`` float32, already L2-normalised (zero rows where ``has_vector`` is False);
    ``vectors`` is stored NULL when no row has one and ``has_vector`` NULL when every row has one.
    """
    rows = np.ascontiguousarray(rowids, dtype=_ROWS).tobytes()
    lens = np.ascontiguousarray(lengths, dtype=_ROWS).tobytes()
    if vectors is None or not has_vector.any():
        return rows, lens, None, None
    flags = None if has_vector.all() else np.ascontiguousarray(has_vector, dtype=np.uint8).tobytes()
    return rows, lens, np.ascontiguousarray(vectors, dtype=_VEC).tobytes(), flags


class Arena:
    """Append-only arrays shared by successive snapshots: per position the rowid, the vector and whether
    there is one; per rowid the BM25 length. Appends run under the store's cache lock."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.rowids = np.zeros(0, dtype=np.int64)
        self.matrix = np.zeros((0, dim), dtype=np.float32)
        self.has_vector = np.zeros(0, dtype=bool)
        self.lengths = np.zeros(0, dtype=np.float64)
        self.n = 0  # positions filled
        self.size = 0  # rowids covered (one past the largest)

    def append(self, rows: np.ndarray, lengths: np.ndarray, vectors: np.ndarray | None, has_vector: np.ndarray) -> None:
        n, m = self.n, len(rows)
        if n + m > len(self.rowids):
            cap = max(n + m, 2 * len(self.rowids), 1024)
            self.rowids = _grown(self.rowids, cap, n)
            self.has_vector = _grown(self.has_vector, cap, n)
            self.matrix = _grown(self.matrix, cap, n)
        self.rowids[n : n + m] = rows
        self.has_vector[n : n + m] = has_vector
        if vectors is not None and self.dim:
            self.matrix[n : n + m] = vectors
        else:
            self.matrix[n : n + m] = 0.0
        top = int(rows[-1]) + 1 if m else self.size
        if top > len(self.lengths):
            self.lengths = _grown(self.lengths, max(top, 2 * len(self.lengths), 1024), self.size)
        if top > self.size:
            self.lengths[self.size : top] = 0.0
        self.lengths[rows] = lengths
        self.n, self.size = n + m, max(self.size, top)


def _grown(array: np.ndarray, capacity: int, keep: int) -> np.ndarray:
    grown = np.empty((capacity, *array.shape[1:]), dtype=array.dtype)
    grown[:keep] = array[:keep]
    return grown


@dataclass(eq=False)
class Snapshot:
    """The in-memory view of one committed state (generation). Arrays are read-only views; never mutate.

    Attributes:
        generation: the state's generation (``meta.generation``).
        blocks: ids of the blocks it holds, ascending; ``ends[i]`` is the position after block ``i``.
        segments: ids of the BM25 segments of the state.
        rowids: ``(n,)`` int64, the rowid at each position (ascending).
        matrix: ``(n, dim)`` float32, L2-normalised vectors by position (zero rows where none).
        has_vector: ``(n,)`` bool.
        lengths: ``(size,)`` float64 BM25 document lengths by rowid.
        live: ``(size,)`` bool, True for rowids of documents in this state.
        n_live: live documents; total_length: sum of their lengths.
    """

    generation: int
    blocks: tuple[int, ...]
    ends: tuple[int, ...]
    segments: tuple[int, ...]
    rowids: np.ndarray
    matrix: np.ndarray
    has_vector: np.ndarray
    lengths: np.ndarray
    live: np.ndarray
    n_live: int
    total_length: float
    _lazy: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _lazy_lock: threading.RLock = field(default_factory=threading.RLock, repr=False)  # one derived value may need another

    @property
    def size(self) -> int:
        return len(self.live)

    @property
    def all_live(self) -> bool:
        """Whether every row of every block is live (no tombstoned row waits for a merge)."""
        return self.n_live == len(self.rowids)

    @property
    def avgdl(self) -> float:
        return mean_length(self.total_length, self.n_live)

    def _derived(self, name: str, make) -> np.ndarray:  # noqa: ANN001
        got = self._lazy.get(name)
        if got is None:
            with self._lazy_lock:
                got = self._lazy.get(name)
                if got is None:
                    got = make()
                    got.flags.writeable = False
                    self._lazy[name] = got
        return got

    @property
    def norms(self) -> np.ndarray:
        """``(size,)`` float64: BM25's ``k1 * (1 - b + b * |d| / avgdl)`` per rowid."""
        return self._derived("norms", lambda: length_norms(self.lengths, self.avgdl))

    @property
    def all_searchable(self) -> bool:
        """Whether every position is a live document with a vector (no mask needed for k-NN)."""
        return bool(self._derived("all_searchable", lambda: np.array(self.searchable.all())))

    @property
    def searchable(self) -> np.ndarray:
        """``(n,)`` bool: positions of live documents that have a vector."""
        return self._derived("searchable", lambda: self.has_vector & self.live[self.rowids])


EMPTY = Snapshot(
    generation=-1, blocks=(), ends=(), segments=(), rowids=np.zeros(0, dtype=np.int64),
    matrix=np.zeros((0, 0), dtype=np.float32), has_vector=np.zeros(0, dtype=bool),
    lengths=np.zeros(0), live=np.zeros(0, dtype=bool), n_live=0, total_length=0.0,
)


def load(conn: sqlite3.Connection, generation: int, newest: Snapshot, arena: Arena | None, dim: int) -> tuple[Snapshot, Arena, bool]:
    """The snapshot of the state ``conn``'s read transaction sees (generation ``generation``).

    Built from ``newest`` (the store's cached snapshot, sharing ``arena``) by reading only what changed
    when that is possible, else from scratch into a new arena. Returns the snapshot, the arena it lives
    in, and whether it may replace ``newest`` as the store's cache (it is newer).

    Runs under the store's cache lock (it appends to ``arena``).
    """
    blocks = [r[0] for r in conn.execute("SELECT id FROM blocks ORDER BY id")]
    segments = tuple(r[0] for r in conn.execute("SELECT id FROM segments ORDER BY id"))
    old = newest.blocks
    prefix = arena is not None and arena.dim == dim and tuple(blocks[: len(old)]) == old
    if prefix and generation > newest.generation:
        return _extended(conn, generation, newest, arena, blocks, segments), arena, True  # type: ignore[arg-type]
    if arena is not None and arena.dim == dim and generation < newest.generation and tuple(old[: len(blocks)]) == tuple(blocks):
        return _older(conn, generation, newest, blocks, segments), arena, False
    fresh = Arena(dim)
    snap = _extended(conn, generation, _empty_like(fresh), fresh, blocks, segments)
    return snap, fresh, generation > newest.generation


def _empty_like(arena: Arena) -> Snapshot:
    return Snapshot(
        generation=-1, blocks=(), ends=(), segments=(), rowids=arena.rowids[:0], matrix=arena.matrix[:0],
        has_vector=arena.has_vector[:0], lengths=arena.lengths[:0], live=np.zeros(0, dtype=bool),
        n_live=0, total_length=0.0,
    )


def _extended(
    conn: sqlite3.Connection, generation: int, base: Snapshot, arena: Arena, blocks: list[int], segments: tuple[int, ...]
) -> Snapshot:
    """``base`` plus the blocks after its own and the tombstones written after its generation."""
    ends = list(base.ends)
    new_ids = blocks[len(base.blocks) :]
    added: list[tuple[np.ndarray, np.ndarray]] = []
    if new_ids:
        since = base.blocks[-1] if base.blocks else -1
        for rows_b, lengths_b, vectors_b, flags_b in conn.execute(
            "SELECT rows, lengths, vectors, has_vector FROM blocks WHERE id > ? ORDER BY id", (since,)
        ):
            rows = np.frombuffer(rows_b, dtype=_ROWS).astype(np.int64)
            lengths = np.frombuffer(lengths_b, dtype=_ROWS).astype(np.float64)
            if vectors_b is None:
                vectors, has = None, np.zeros(len(rows), dtype=bool)
            else:
                vectors = np.frombuffer(vectors_b, dtype=_VEC).reshape(len(rows), -1)
                has = np.ones(len(rows), dtype=bool) if flags_b is None else np.frombuffer(flags_b, dtype=np.uint8).astype(bool)
            arena.append(rows, lengths, vectors, has)
            ends.append(arena.n)
            added.append((rows, lengths))
    size = arena.size
    live = np.zeros(size, dtype=bool)
    live[: base.size] = base.live
    n_live, total = base.n_live, base.total_length
    for rows, lengths in added:
        live[rows] = True
        n_live += len(rows)
        total += float(lengths.sum())
    if base.generation >= 0 or blocks:
        dead = np.fromiter(
            (r[0] for r in conn.execute("SELECT rowid FROM tombstones WHERE generation > ?", (max(base.generation, -1),))),
            dtype=np.int64,
        )
        dead = dead[dead < size]
        dead = dead[live[dead]]
        if len(dead):
            live[dead] = False
            n_live -= len(dead)
            total -= float(arena.lengths[dead].sum())
    live.flags.writeable = False
    n = arena.n
    return Snapshot(
        generation=generation, blocks=tuple(blocks), ends=tuple(ends), segments=segments,
        rowids=_view(arena.rowids[:n]), matrix=_view(arena.matrix[:n]), has_vector=_view(arena.has_vector[:n]),
        lengths=_view(arena.lengths[:size]), live=live, n_live=n_live, total_length=total,
    )


def _older(conn: sqlite3.Connection, generation: int, newest: Snapshot, blocks: list[int], segments: tuple[int, ...]) -> Snapshot:
    """An older state than ``newest`` whose blocks are a prefix of newest's: the prefix, with the rows that
    newest saw deleted after ``generation`` alive again."""
    n = newest.ends[len(blocks) - 1] if blocks else 0
    rowids = newest.rowids[:n]
    size = int(rowids[-1]) + 1 if n else 0
    live = np.array(newest.live[:size])
    revived = np.fromiter(
        (r[0] for r in conn.execute("SELECT rowid FROM tombstones WHERE generation > ?", (generation,))), dtype=np.int64
    )
    revived = revived[revived < size]
    # rowids ascend across blocks and are never reused, so a row deleted after this state with a rowid
    # below ``size`` is a row of this state's own blocks: it was live here
    live[revived] = True
    live.flags.writeable = False
    lengths = newest.lengths[:size]
    return Snapshot(
        generation=generation, blocks=tuple(blocks), ends=newest.ends[: len(blocks)], segments=segments,
        rowids=rowids, matrix=newest.matrix[:n], has_vector=newest.has_vector[:n], lengths=lengths, live=live,
        n_live=int(live.sum()), total_length=float(lengths[live].sum()),
    )


def _view(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view
