"""What the SQLite store's writer does after a write has committed: merge BM25 segments, compact after
mass deletes; and the store's status report, which says whether that work is behind and why.

Every write commits first, then calls :func:`maintain`: while a level holds ``MERGE_FACTOR`` segments
they are merged into one of the next level (:func:`fastrag.vector_store.sqlite.lexical.merge_segments`),
and when deleted rows outnumber live ones (past 1,000) every block and segment is rewritten without them
(:func:`compact`). Each step is a transaction of its own that raises the generation, so readers pick up
the new segment list; an interruption leaves the state before that step, which is as correct, only less
compact (a query reads one more segment per term).

So a failure here (the disk filling during a merge, issue 26) never undoes or fails the write that ran
before it: the store records it (:class:`MaintenanceRecord`), logs it, and the next write runs the same
steps again, since what made them due is still there. :class:`SQLiteStoreStatus` reports it.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass

import numpy as np

from fastrag.vector_store.sqlite import lexical, snapshot
from fastrag.vector_store.sqlite.rows import dead_mask
from fastrag.vector_store.sqlite.schema import BLOCK_ROWS, BUMP_SQL, meta_int, rollback

__all__ = ["COMPACT_MIN_DEAD", "MaintenanceRecord", "SQLiteStoreStatus", "compact", "due", "maintain"]

COMPACT_MIN_DEAD = 1000
"""Deleted rows (tombstones) from which a compaction may run: it runs once they also outnumber the live
documents. Below it, dead postings cost a query little and are dropped by the next merge of their segment."""


def due(conn: sqlite3.Connection) -> str | None:
    """The maintenance step the state ``conn`` sees calls for: ``"compact"``, ``"merge"`` or ``None``."""
    dead = conn.execute("SELECT count(*) FROM tombstones").fetchone()[0]
    # count(*) of the documents scans them: only when enough rows died for it to matter
    if dead > COMPACT_MIN_DEAD and dead > conn.execute("SELECT count(*) FROM documents").fetchone()[0]:
        return "compact"
    full = conn.execute(
        "SELECT 1 FROM segments GROUP BY level HAVING count(*) >= ? LIMIT 1", (lexical.MERGE_FACTOR,)
    ).fetchone()
    return "merge" if full is not None else None


def maintain(conn: sqlite3.Connection) -> None:
    """Run every due step on the writer connection ``conn`` (no transaction open), each in a transaction
    of its own. Raises what SQLite raised (``sqlite3.OperationalError: database or disk is full``, busy
    past the timeout, ...) after rolling the failed step back; the steps before it stay committed."""
    while True:
        step = due(conn)
        if step is None:
            return
        if step == "compact":
            compact(conn)
            return
        _merge_one_level(conn)


def _merge_one_level(conn: sqlite3.Connection) -> None:
    """Merge the first ``MERGE_FACTOR`` segments of the lowest full level into one of the next level."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        full = conn.execute(
            "SELECT level FROM segments GROUP BY level HAVING count(*) >= ? ORDER BY level LIMIT 1",
            (lexical.MERGE_FACTOR,),
        ).fetchone()
        if full is not None:  # another writer may have merged meanwhile
            ids = [r[0] for r in conn.execute(
                "SELECT id FROM segments WHERE level = ? ORDER BY id LIMIT ?", (full[0], lexical.MERGE_FACTOR)
            )]
            lexical.merge_segments(conn, ids, full[0] + 1, dead_mask(conn))
            conn.execute(BUMP_SQL)
        conn.execute("COMMIT")
    except BaseException as exc:
        rollback(conn, exc)
        raise


def compact(conn: sqlite3.Connection) -> None:
    """Rewrite every block and segment without the deleted rows, and forget the tombstones (one transaction)."""
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
    except BaseException as exc:
        rollback(conn, exc)
        raise


class MaintenanceRecord:
    """The outcome of this process's last post-commit maintenance of one store (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.error: str | None = None
        self.failed_at: float | None = None
        self.failures = 0

    def failed(self, exc: BaseException) -> None:
        with self._lock:
            self.error = f"{type(exc).__name__}: {exc}"
            self.failed_at = time.time()
            self.failures += 1

    def succeeded(self) -> None:
        with self._lock:
            self.error, self.failed_at, self.failures = None, None, 0

    def read(self) -> tuple[str | None, float | None, int]:
        with self._lock:
            return self.error, self.failed_at, self.failures


@dataclass(frozen=True)
class SQLiteStoreStatus:
    """What ``SQLiteVectorStore.status()`` reports.

    Attributes:
        path: the store's file (or ``":memory:"``).
        access: ``"read-write"``; ``"read-only"`` (the file or its folder is not writable, or the store was
            opened with ``read_only=True``: SQLite's ``mode=ro``, which still sees other processes' commits);
            or ``"immutable"`` (read-only, and SQLite could not create the WAL index beside the file, so it
            reads the file as it is, without locks: commits made later by another process are not seen).
        read_only_reason: why the store is not writable (``None`` when it is).
        documents: live documents, in the newest committed state.
        segments: BM25 segments in that state (each query term reads one row per segment it holds).
        maintenance_due: a merge or a compaction is due and has not run (``"merge"``, ``"compact"``, or
            ``None``): after a failure, or written by a process that stopped before doing it. The next write
            of any process runs it.
        maintenance_error: why this process's last post-commit merge or compaction failed, as
            ``"<exception type>: <message>"`` of SQLite's own error (``"OperationalError: database or disk is
            full"``); ``None`` when none failed, or once a later one succeeded. The write before it is
            committed either way.
        maintenance_failed_at: when that failure happened (seconds since the epoch, ``time.time()``).
        maintenance_failures: consecutive failed attempts (0 after a success).
    """

    path: str
    access: str
    read_only_reason: str | None
    documents: int
    segments: int
    maintenance_due: str | None
    maintenance_error: str | None
    maintenance_failed_at: float | None
    maintenance_failures: int

    @property
    def read_only(self) -> bool:
        """Whether writes are refused (``access`` is not ``"read-write"``)."""
        return self.access != "read-write"

    @property
    def healthy(self) -> bool:
        """No maintenance failure is outstanding (a store may still be read-only, or have a step due that
        no write has run yet)."""
        return self.maintenance_error is None
