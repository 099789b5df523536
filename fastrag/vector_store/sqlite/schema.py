"""The SQLite store's schema: the tables, the migration of older files, and the ``meta`` table's counters.

Tables: ``meta`` (schema version, generation, next rowid, dimension, model, analyzer, store id),
``documents`` (what a search returns), ``blocks`` and ``tombstones``
(:mod:`fastrag.vector_store.sqlite.snapshot`), ``segments`` and ``postings``
(:mod:`fastrag.vector_store.sqlite.lexical`), ``allocations`` (below). A schema-2 file (one postings row
per term and document, vectors per document row) is rewritten as schema 3 in one transaction the first
time it is opened; the ``allocations`` table is added to a schema-3 file without it when it is opened.

**Allocations: which history a rowid belongs to.** Rowids are never reused within one history of a file,
so a file beside the store (the ANN index) can say "I hold the vectors of rowids below ``n``". But a
backup restored over the store brings back an older ``next_rowid``, and the writes after it hand out the
same rowids again to other documents. So every write that hands out rowids records, in its own
transaction, a random token for the state it ends in: ``allocations(next_rowid, token)``
(:func:`record_allocation`); a store opened on a state without one records one (:func:`name_state`).
A file built from the state whose ``next_rowid`` was ``n`` keeps ``(n, token)``; the store's state is a
descendant of that state (the same history: every rowid below ``n`` names the same document) exactly
when its ``allocations`` still hold that pair (:func:`allocation_token`): a restored backup from before
the allocation does not, and a write after the restore draws a new token. The newest
:data:`ALLOCATIONS_KEPT` allocations are kept; a file naming an older one cannot be checked and is not
trusted.
"""

from __future__ import annotations

import sqlite3
import uuid
from typing import Any

import numpy as np

from fastrag.errors import BackendError, BackendUnavailableError
from fastrag.vector_store.sqlite import lexical, snapshot

__all__ = [
    "ALLOCATIONS_KEPT", "BLOCK_ROWS", "BUMP_SQL", "GENERATION_SQL", "MAX_ROWID", "SCHEMA", "SCHEMA_VERSION",
    "allocation_token", "create_or_migrate", "meta_int", "name_state", "record_allocation", "rollback", "set_meta",
]

SCHEMA_VERSION = "3"
MAX_ROWID = 2**31 - 1  # rowids are packed as int32 in blocks and postings
BLOCK_ROWS = 65_536  # rows per block written by a compaction or a migration (a blob stays far below 1 GB)
ALLOCATIONS_KEPT = 100_000
"""Allocations kept (about 60 bytes each, 6 MB at most): a file naming an older one is not trusted. An ANN
index file is saved again once the vectors added since pass 5% of it, so only a store written in more than
100,000 transactions between two saves loses the name of its index file's state (it is then rebuilt)."""

SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    rowid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    content TEXT NOT NULL,
    metadata TEXT NOT NULL
);
"""
    + snapshot.BLOCKS_SCHEMA
    + """
CREATE TRIGGER IF NOT EXISTS documents_tombstone AFTER DELETE ON documents BEGIN
    UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation';
    INSERT OR REPLACE INTO tombstones
        SELECT old.rowid, CAST(value AS INTEGER) FROM meta WHERE key = 'generation';
END;
"""
    + lexical.SCHEMA
    + """
CREATE TABLE IF NOT EXISTS allocations (
    seq INTEGER PRIMARY KEY,
    next_rowid INTEGER NOT NULL UNIQUE,
    token TEXT NOT NULL
);
"""
)
GENERATION_SQL = "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'generation'"
# every write ends by raising the generation once more, so its state has a generation no other state has
BUMP_SQL = "UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'"

def create_or_migrate(conn: sqlite3.Connection, path: str, *, read_only: bool = False) -> None:
    """Create the schema in a new file, migrate a schema-2 file in place, or refuse another version.

    With ``read_only`` (a store opened for reading only) nothing is written: a file of the current schema
    passes, anything else raises :class:`~fastrag.errors.BackendUnavailableError`.
    """
    version = None
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone():
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        version = row[0] if row else None
    if read_only and version != SCHEMA_VERSION:
        why = ("it holds no fastrag store (no meta table), and a read-only file cannot become one" if version is None
               else "it is of schema 2 and must be migrated, which writes: open it once where it is writable"
               if version == "2" else f"unsupported schema version {version}")  # fmt: skip
        raise BackendUnavailableError(f"cannot open the store read-only: {why}", store=path)
    if read_only:
        return
    if version == "2":
        migrate_from_2(conn, path)
        return
    if version not in (None, SCHEMA_VERSION):
        raise BackendUnavailableError(f"unsupported schema version {version}", store=path)
    conn.executescript(SCHEMA)
    for key, value in (("schema_version", SCHEMA_VERSION), ("generation", "0"), ("next_rowid", "1")):
        conn.execute("INSERT OR IGNORE INTO meta VALUES (?, ?)", (key, value))


def migrate_from_2(conn: sqlite3.Connection, path: str) -> None:
    """Rewrite a schema-2 store (one postings row per term and document, vectors per row) as blocks and
    segments, in one transaction: an interruption leaves the schema-2 file as it was."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] != "2":
            conn.execute("ROLLBACK")  # another process migrated it meanwhile
            return
        conn.execute("ALTER TABLE documents RENAME TO documents_v2")
        conn.execute("ALTER TABLE postings RENAME TO postings_v2")
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
            conn.execute(f'DROP TRIGGER "{name}"')
        conn.execute("DROP INDEX IF EXISTS postings_doc")
        # executescript would commit the transaction: one complete statement at a time
        for statement in statements(SCHEMA):
            conn.execute(statement)
        conn.execute("INSERT INTO documents (rowid, id, content, metadata) SELECT rowid, id, content, metadata FROM documents_v2")
        dim = conn.execute("SELECT value FROM meta WHERE key = 'dimension'").fetchone()
        dim = int(dim[0]) if dim else 0
        cursor = conn.execute("SELECT rowid, n_terms, embedding FROM documents_v2 ORDER BY rowid")
        while batch := cursor.fetchmany(BLOCK_ROWS):
            rows = np.array([r[0] for r in batch], dtype=np.int64)
            lengths = np.array([r[1] for r in batch], dtype=np.int64)
            has = np.array([r[2] is not None for r in batch], dtype=bool)
            vectors = None
            if dim and has.any():
                zero = bytes(4 * dim)
                raw = np.frombuffer(b"".join(r[2] if r[2] is not None else zero for r in batch), dtype=np.float32)
                raw = raw.reshape(len(batch), dim)
                norms = np.linalg.norm(raw, axis=1, keepdims=True)
                vectors = np.divide(raw, norms, out=np.zeros_like(raw), where=norms > 0)
            conn.execute(
                "INSERT INTO blocks (rows, lengths, vectors, has_vector) VALUES (?, ?, ?, ?)",
                snapshot.encode_block(rows, lengths, vectors, has),
            )

        def postings() -> Any:
            current, docs, tfs = None, [], []
            for term, doc, tf in conn.execute("SELECT term, doc, tf FROM postings_v2 ORDER BY term, doc"):
                if term != current:
                    if current is not None:
                        yield current, np.array(docs, dtype=np.int64), np.array(tfs, dtype=np.int64)
                    current, docs, tfs = term, [], []
                docs.append(doc)
                tfs.append(tf)
            if current is not None:
                yield current, np.array(docs, dtype=np.int64), np.array(tfs, dtype=np.int64)

        lexical.insert_segment(conn, 8, postings())  # one segment, at a level no small write merges into soon
        top = conn.execute("SELECT max(rowid) FROM documents_v2").fetchone()[0] or 0
        conn.execute("DROP TABLE postings_v2")
        conn.execute("DROP TABLE documents_v2")
        generation = meta_int(conn, "generation")
        for key, value in (("schema_version", SCHEMA_VERSION), ("generation", str(generation + 1)), ("next_rowid", str(top + 1))):
            conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))
        conn.execute("COMMIT")
    except BaseException as exc:
        rollback(conn, exc)
        raise




def statements(script: str) -> list[str]:
    """The complete SQL statements of ``script`` (``sqlite3.complete_statement`` keeps a trigger whole)."""
    out, pending = [], ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n;"):
                out.append(pending.strip())
            pending = ""
    return out




def record_allocation(conn: sqlite3.Connection, next_rowid: int) -> None:
    """Name the state a write ends in, whose rowids end below ``next_rowid``, with a new random token (call
    it inside the writing transaction, after raising ``next_rowid``), and forget allocations older than
    the newest :data:`ALLOCATIONS_KEPT`."""
    seq = conn.execute(
        "INSERT OR REPLACE INTO allocations (next_rowid, token) VALUES (?, ?)", (next_rowid, uuid.uuid4().hex)
    ).lastrowid
    conn.execute("DELETE FROM allocations WHERE seq <= ?", (seq - ALLOCATIONS_KEPT,))


def name_state(conn: sqlite3.Connection) -> None:
    """Give the current ``next_rowid`` a token if no write recorded one (a file written before allocations
    were recorded, or a new one), on a connection outside any transaction.

    Looked up first, so opening a store whose state has its token writes nothing (and never waits for
    another process's write); the insert is one statement, atomic on its own. A database locked by another
    writer past the busy timeout is left without the token (an ANN index file built from this state is
    then not trusted by the next process, which builds it again; the next write records a token).
    """
    if allocation_token(conn)[1] is not None:
        return
    try:
        conn.execute(
            "INSERT OR IGNORE INTO allocations (next_rowid, token) "
            "SELECT CAST(value AS INTEGER), ? FROM meta WHERE key = 'next_rowid'",
            (uuid.uuid4().hex,),
        )
    except sqlite3.OperationalError as exc:
        if getattr(exc, "sqlite_errorcode", 0) & 0xFF not in (5, 6):  # SQLITE_BUSY, SQLITE_LOCKED
            raise


def allocation_token(conn: sqlite3.Connection, next_rowid: int | None = None) -> tuple[int, str | None]:
    """``(next_rowid, token)``: the store's ``next_rowid`` (or the one given) and the token of the allocation
    that ended there, ``None`` when none is recorded (an older writer, or one forgotten)."""
    if next_rowid is None:
        next_rowid = meta_int(conn, "next_rowid")
    row = conn.execute("SELECT token FROM allocations WHERE next_rowid = ?", (next_rowid,)).fetchone()
    return next_rowid, (row[0] if row else None)


def meta_int(conn: sqlite3.Connection, key: str, default: int | None = None) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    if row is None:
        if default is None:
            raise BackendError(f"the store's meta table has no {key!r}")
        return default
    return int(row[0])


def set_meta(conn: sqlite3.Connection, key: str, value: int) -> None:
    conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, str(value)))


def rollback(conn: sqlite3.Connection, exc: BaseException) -> None:
    """Roll back ``conn``'s transaction after ``exc`` failed it, if SQLite has not already done so.

    On some errors (``SQLITE_FULL`` "database or disk is full", ``SQLITE_IOERR``, ``SQLITE_NOMEM``) SQLite
    rolls the whole transaction back itself; a ``ROLLBACK`` then fails with "cannot rollback - no
    transaction is active", which would replace the real error (issue 26). Should the rollback itself
    fail, ``exc`` stays the error raised, with a note saying so.
    """
    if not conn.in_transaction:
        return
    try:
        conn.execute("ROLLBACK")
    except sqlite3.Error as failed:
        exc.add_note(f"and rolling the transaction back failed too: {type(failed).__name__}: {failed}")
