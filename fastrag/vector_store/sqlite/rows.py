"""Reading the SQLite store's documents: ids to rowids, rows by rowid, the exact top-k with ties by id,
metadata columns for filters, and vectors by rowid."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

import numpy as np

from fastrag.errors import InvalidParameterError
from fastrag.models import RANK, SCORE, Document, owned_document
from fastrag.vector_store._validation import check_id_text
from fastrag.vector_store.sqlite.columns import MISSING, Column
from fastrag.vector_store.sqlite.schema import meta_int
from fastrag.vector_store.sqlite.snapshot import Snapshot

__all__ = [
    "IN_CHUNK", "chunks", "dead_mask", "delete_rows", "id_list", "load_column", "ranked_rows", "rowids_of",
    "select_rowids", "vectors_of",
]

IN_CHUNK = 10_000  # values bound per "IN (...)" list

def delete_rows(conn: sqlite3.Connection, rowids: list[int]) -> None:
    """Delete documents ``rowids``; the ``documents_tombstone`` trigger records each as deleted."""
    for chunk in chunks(rowids, IN_CHUNK):
        conn.execute(f"DELETE FROM documents WHERE rowid IN ({','.join('?' * len(chunk))})", chunk)


def vectors_of(snap: Snapshot, keys: np.ndarray) -> np.ndarray:
    """The L2-normalised vectors of rowids ``keys`` in ``snap`` (zero rows for keys it does not hold)."""
    at = np.searchsorted(snap.rowids, keys)
    inside = at < len(snap.rowids)
    found = np.zeros(len(keys), dtype=bool)
    found[inside] = snap.rowids[at[inside]] == keys[inside]
    out = np.zeros((len(keys), snap.matrix.shape[1]), dtype=np.float32)
    out[found] = snap.matrix[at[found]]
    return out



def id_list(ids: Sequence[str] | None) -> list[str] | None:
    if ids is None:
        return None
    if isinstance(ids, str):
        raise InvalidParameterError("ids must be a sequence of strings, not one string")
    out = list(ids)
    for doc_id in out:
        check_id_text(doc_id)
    return out


def rowids_of(conn: sqlite3.Connection, ids: list[str]) -> dict[str, int]:
    """``{id: rowid}`` of the stored documents among ``ids`` (ids bound as parameters: exact, NUL included)."""
    found: dict[str, int] = {}
    for chunk in chunks(ids, IN_CHUNK):
        found.update(conn.execute(
            f"SELECT id, rowid FROM documents WHERE id IN ({','.join('?' * len(chunk))})", chunk
        ).fetchall())
    return found


def select_rowids(conn: sqlite3.Connection, columns: str, rowids: list[int]) -> dict[int, tuple]:
    """``{rowid: (columns...)}`` for the documents ``rowids``."""
    found: dict[int, tuple] = {}
    for chunk in chunks(rowids, IN_CHUNK):
        for row in conn.execute(f"SELECT rowid, {columns} FROM documents WHERE rowid IN ({','.join('?' * len(chunk))})", chunk):
            found[row[0]] = row[1:]
    return found


def dead_mask(conn: sqlite3.Connection) -> np.ndarray | None:
    """bool by rowid, True for tombstoned rows; ``None`` when there are none."""
    dead = np.fromiter((r[0] for r in conn.execute("SELECT rowid FROM tombstones")), dtype=np.int64)
    if not len(dead):
        return None
    mask = np.zeros(meta_int(conn, "next_rowid"), dtype=bool)
    mask[dead] = True
    return mask


def load_column(conn: sqlite3.Connection, key: str, start: int, stop: int) -> Column:
    """The values of metadata ``key`` for rowids ``start`` to ``stop - 1`` (missing where no document)."""
    n = stop - start
    if any(c in key for c in '"\\') or any(ord(c) < 0x20 for c in key):  # no JSON path label can name it
        values: list[Any] = [MISSING] * n
        for rowid, metadata in conn.execute(
            "SELECT rowid, metadata FROM documents WHERE rowid >= ? AND rowid < ?", (start, stop)
        ):
            values[rowid - start] = json.loads(metadata).get(key, MISSING)
        return Column.from_values(values)
    # "->" gives the value's JSON text: exact where json_extract is not (integers beyond int64, text
    # holding U+0000)
    texts: list[str | None] = [None] * n
    for rowid, text in conn.execute(
        "SELECT rowid, metadata -> ? FROM documents WHERE rowid >= ? AND rowid < ?", (f'$."{key}"', start, stop)
    ):
        texts[rowid - start] = text
    return Column.from_json(texts)


def ranked_rows(conn: sqlite3.Connection, scores: np.ndarray, rowids: np.ndarray, k: int, *, rows: bool = True) -> list[Document]:
    """The ``k`` best rows by score, ties broken by id, as documents stamped with score and rank (with
    ``rows=False``, hits with an empty content and only those stamps: see :mod:`fastrag.deferred`).

    Exact at the cut however many scores tie there: the ids of every row tied at the k-th score are read,
    so the top ``k`` is always a prefix of the top ``k + n``.
    """
    if len(scores) > k:
        cut = np.partition(scores, len(scores) - k)[len(scores) - k]
        above = np.flatnonzero(scores > cut)
        tied = np.flatnonzero(scores == cut)
        if len(above) + len(tied) > k:  # ties at the cut: the smallest ids among them
            ids = select_rowids(conn, "id", rowids[tied].tolist())
            tied = np.array(sorted(tied.tolist(), key=lambda p: ids[int(rowids[p])][0])[: k - len(above)], dtype=np.int64)
        top = np.concatenate([above, tied])
    else:
        top = np.arange(len(scores))
    chosen = rowids[top].tolist()
    if not rows:
        ids = select_rowids(conn, "id", chosen)
        ranked = sorted(((float(s), ids[r][0]) for s, r in zip(scores[top].tolist(), chosen, strict=True)),
                        key=lambda h: (-h[0], h[1]))  # fmt: skip
        return [owned_document(doc_id, "", {SCORE: score, RANK: rank}) for rank, (score, doc_id) in enumerate(ranked)]
    found = select_rowids(conn, "id, content, metadata", chosen)
    hits = [(float(s), found[r]) for s, r in zip(scores[top].tolist(), chosen, strict=True)]
    hits.sort(key=lambda h: (-h[0], h[1][0]))
    out = []
    for rank, (score, (doc_id, content, metadata)) in enumerate(hits):
        stamped = json.loads(metadata)
        stamped[SCORE], stamped[RANK] = score, rank  # one Document per hit, not a copy of a copy
        out.append(owned_document(doc_id, content, stamped))  # our own rows, checked when written
    return out


def chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]
