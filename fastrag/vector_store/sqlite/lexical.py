"""The BM25 index of the SQLite store: immutable segments of per-term postings arrays.

Layout (tables of the store's one database file, so an index write is part of the same transaction as
the documents it indexes):

- ``segments(id, level, n_postings)``: one row per segment. Every write adds one segment (level 0)
  holding the postings of the documents it wrote; when ``MERGE_FACTOR`` segments share a level the
  writer merges them into one segment of the next level, in a transaction of its own after its commit
  (a tiered merge policy, as Lucene's ``TieredMergePolicy`` and LSM trees use: each posting is rewritten
  about ``log_MERGE_FACTOR(documents / batch)`` times). A merge drops the postings of deleted documents.
- ``postings(segment, term, docs, tfs)``: per segment and term, the rowids of the documents holding the
  term as little-endian int32 (ascending) and their term frequencies as little-endian uint16 (uint32
  when a frequency exceeds 65,535: the width is told by the blob's length). Primary key
  ``(segment, term)``: a query seeks each (segment, query term) pair; a merge reads whole segments.

Rowids are never reused (the store hands them out from a counter), so a posting names one version of one
document for good: an update writes the new version under a new rowid and tombstones the old one, and a
reader that knows which rowids are live (:mod:`fastrag.vector_store.sqlite.snapshot`) skips dead postings
until a merge removes them.

Scoring is Lucene's BM25 (``BM25Similarity``; Robertson & Zaragoza 2009):
``idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))`` and
``score(d) = sum_t idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * |d| / avgdl))``, with ``N``, ``df``
and ``avgdl`` counted over the live documents, exactly as when every posting was one row.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Iterable, Sequence

import numpy as np

__all__ = [
    "BM25_B",
    "PostingsCache",
    "BM25_K1",
    "MAXSCORE_MIN_POSTINGS",
    "MERGE_FACTOR",
    "SCHEMA",
    "bm25_scores",
    "bm25_top",
    "decode",
    "insert_segment",
    "merge_segments",
    "write_segment",
]

BM25_K1 = 1.2  # Lucene BM25Similarity defaults (Robertson & Zaragoza 2009 recommend k1 in [1.2, 2.0])
BM25_B = 0.75
MERGE_FACTOR = 10  # segments of one level merged into one of the next
_DOCS = np.dtype("<i4")
_TF16 = np.dtype("<u2")
_TF32 = np.dtype("<u4")

SCHEMA = """
CREATE TABLE IF NOT EXISTS segments (
    id INTEGER PRIMARY KEY,
    level INTEGER NOT NULL,
    n_postings INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS postings (
    segment INTEGER NOT NULL,
    term TEXT NOT NULL,
    docs BLOB NOT NULL,
    tfs BLOB NOT NULL,
    PRIMARY KEY (segment, term)
) WITHOUT ROWID;
"""


def encode(docs: np.ndarray, tfs: np.ndarray) -> tuple[bytes, bytes]:
    """``(docs, tfs)`` blobs of one term's postings: int32 rowids, uint16 (or uint32) frequencies."""
    width = _TF16 if len(tfs) == 0 or int(tfs.max()) <= 0xFFFF else _TF32
    return np.ascontiguousarray(docs, dtype=_DOCS).tobytes(), np.ascontiguousarray(tfs, dtype=width).tobytes()


def decode(docs: bytes, tfs: bytes) -> tuple[np.ndarray, np.ndarray]:
    """The rowids (int32) and term frequencies (uint16 or uint32) of one postings row."""
    rows = np.frombuffer(docs, dtype=_DOCS)
    return rows, np.frombuffer(tfs, dtype=_TF16 if len(tfs) == 2 * len(rows) else _TF32)


def write_segment(conn: sqlite3.Connection, rowids: Sequence[int], counts: Sequence[dict[str, int]], level: int = 0) -> None:
    """Write one segment holding the postings of documents ``rowids`` (ascending), whose term frequencies
    are ``counts`` (term -> tf, one dict per document). Runs inside the caller's transaction."""
    by_term: dict[str, tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
    for rowid, doc_counts in zip(rowids, counts, strict=True):
        for term, tf in doc_counts.items():
            docs, tfs = by_term[term]
            docs.append(rowid)
            tfs.append(tf)
    insert_segment(conn, level, ((t, np.array(d, dtype=np.int64), np.array(f, dtype=np.int64)) for t, (d, f) in by_term.items()))


def insert_segment(conn: sqlite3.Connection, level: int, postings: Iterable[tuple[str, np.ndarray, np.ndarray]]) -> None:
    """Write one segment of ``level`` from ``(term, rowids ascending, tfs)`` triples (inside a transaction);
    a segment that would hold no posting is not written."""
    cur = conn.execute("INSERT INTO segments (level, n_postings) VALUES (?, 0)", (level,))
    segment = cur.lastrowid
    total = 0

    def rows() -> Iterable[tuple[int, str, bytes, bytes]]:
        nonlocal total
        for term, docs, tfs in postings:
            if len(docs):
                total += len(docs)
                yield (segment, term, *encode(docs, tfs))

    conn.executemany("INSERT INTO postings (segment, term, docs, tfs) VALUES (?, ?, ?, ?)", rows())
    if total == 0:
        conn.execute("DELETE FROM segments WHERE id = ?", (segment,))
    else:
        conn.execute("UPDATE segments SET n_postings = ? WHERE id = ?", (total, segment))


def merge_segments(conn: sqlite3.Connection, segment_ids: Sequence[int], level: int, dead: np.ndarray | None) -> None:
    """Replace ``segment_ids`` by one segment of ``level`` holding their postings, less those of the rowids
    that ``dead`` (bool, indexed by rowid; rowids past its end are live) marks deleted. Runs inside the
    caller's transaction."""
    marks = ",".join("?" * len(segment_ids))
    parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
    for term, docs, tfs in conn.execute(
        f"SELECT term, docs, tfs FROM postings WHERE segment IN ({marks}) ORDER BY segment", list(segment_ids)
    ):
        parts[term].append(decode(docs, tfs))

    def merged() -> Iterable[tuple[str, np.ndarray, np.ndarray]]:
        for term in sorted(parts):
            pieces = sorted(parts[term], key=lambda p: int(p[0][0]))  # each piece ascends; keep the whole so
            docs = np.concatenate([p[0] for p in pieces]) if len(pieces) > 1 else pieces[0][0]
            tfs = np.concatenate([p[1].astype(np.uint32) for p in pieces]) if len(pieces) > 1 else pieces[0][1]
            if len(pieces) > 1 and not (np.diff(docs) > 0).all():  # interleaved rowid ranges: sort
                order = np.argsort(docs, kind="stable")
                docs, tfs = docs[order], tfs[order]
            if dead is not None:
                gone = dead[docs] if len(dead) > int(docs.max()) else _padded(dead, docs)
                docs, tfs = docs[~gone], tfs[~gone]
            yield term, docs, tfs

    conn.execute(f"DELETE FROM postings WHERE segment IN ({marks})", list(segment_ids))
    conn.execute(f"DELETE FROM segments WHERE id IN ({marks})", list(segment_ids))
    insert_segment(conn, level, merged())


def _padded(dead: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """``dead[docs]`` where rowids past the end of ``dead`` are not dead."""
    inside = docs < len(dead)
    gone = np.zeros(len(docs), dtype=bool)
    gone[inside] = dead[docs[inside]]
    return gone


def bm25_scores(
    found: Iterable[tuple[str, bytes, bytes]],
    *,
    live: np.ndarray | None,
    norms: np.ndarray,
    n_docs: int,
) -> tuple[np.ndarray, np.ndarray]:
    """BM25 scores of the documents sharing a term with the query whose postings rows are ``found``.

    Every query term is scored at once: the rows' blobs are joined and decoded by numpy in one pass, so
    the cost is one numpy pass over the postings, whatever the number of terms and segments.

    Args:
        found: ``(term, docs, tfs)`` postings rows of the query's terms, from any number of segments.
        live: bool per rowid, or ``None`` when every rowid the postings name is live.
        norms: float64 per rowid: ``k1 * (1 - b + b * |d| / avgdl)``.
        n_docs: ``N``, the number of live documents.

    Returns:
        ``(rowids, scores)``: int64 rowids ascending and their float64 BM25 scores (> 0: Lucene's idf is
        positive); both empty when no posting is live.
    """
    rows = found if isinstance(found, list) else list(found)
    if not rows:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    index: dict[str, int] = {}
    row_terms = np.fromiter((index.setdefault(term, len(index)) for term, _, _ in rows), dtype=np.int64, count=len(rows))
    counts = np.fromiter((len(d) >> 2 for _, d, _ in rows), dtype=np.int64, count=len(rows))
    docs = np.frombuffer(b"".join([d for _, d, _ in rows]), dtype=_DOCS)
    if all(2 * len(f) == len(d) for _, d, f in rows):  # 2 bytes a frequency, 4 a rowid
        tfs = np.frombuffer(b"".join([f for _, _, f in rows]), dtype=_TF16)
    else:  # a row with a frequency past 65,535 is stored as uint32
        tfs = np.concatenate([decode(d, f)[1].astype(np.uint32) for _, d, f in rows])
    terms = np.repeat(row_terms, counts)
    if live is not None:
        keep = live[docs]
        docs, tfs, terms = docs[keep], tfs[keep], terms[keep]
    if not len(docs):
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    df = np.bincount(terms, minlength=len(index)).astype(np.float64)
    idf = np.log1p((n_docs - df + 0.5) / (df + 0.5))
    tf = tfs.astype(np.float64)
    contributions = idf[terms] * (BM25_K1 + 1.0) * tf / (tf + norms[docs])
    if len(docs) * 8 >= len(norms):  # many postings: a dense array by rowid is cheaper than a sort
        dense = np.bincount(docs, weights=contributions, minlength=len(norms))
        rowids = np.flatnonzero(dense)
        return rowids, dense[rowids]
    rowids, inverse = np.unique(docs, return_inverse=True)
    return rowids.astype(np.int64), np.bincount(inverse, weights=contributions, minlength=len(rowids))


MAXSCORE_MIN_POSTINGS = 50_000
"""From this many postings in a query's terms, :func:`bm25_top` prunes with MaxScore instead of scoring
every posting (below it one numpy pass over everything is cheaper than the bookkeeping)."""


def bm25_top(
    found: list[tuple[str, bytes, bytes]],
    *,
    live: np.ndarray | None,
    allowed: np.ndarray | None,
    norms: np.ndarray,
    n_docs: int,
    k: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Candidates holding the ``k`` best BM25 documents for the query terms whose postings are ``found``.

    Args:
        found: ``(term, docs, tfs)`` postings rows of the query's terms, from any number of segments.
        live: bool per rowid, or ``None`` when every rowid the postings name is live. Document
            frequencies count live documents only, as BM25's statistics are over the whole collection.
        allowed: bool per rowid of the documents that may be returned (a filter), or ``None`` for all.
        norms: float64 per rowid: ``k1 * (1 - b + b * |d| / avgdl)``.
        n_docs: ``N``, the number of live documents.
        k: how many of the best documents the candidates must hold.

    Returns:
        ``(rowids, scores)``: rowids (int64, ascending) and their exact float64 BM25 scores (> 0: Lucene's
        idf is positive). Every document outside them scores strictly less than the ``k``-th best among
        them (or shares no term), so their top ``k`` (ties by id) is the top ``k`` of the whole collection.
        Both empty when no allowed, live document shares a term.

    Small queries score every posting in one numpy pass. From :data:`MAXSCORE_MIN_POSTINGS` postings,
    MaxScore (Turtle & Flood 1995, "Query evaluation: strategies and optimizations"): terms are taken
    by decreasing upper bound of their contribution; once the bounds of the terms left sum below a
    lower bound of the ``k``-th best score, documents found only in those terms cannot reach the top
    ``k``, so those terms' long posting lists are only probed (binary search) for the candidates.
    """
    if sum(len(d) for _, d, _ in found) >> 2 >= MAXSCORE_MIN_POSTINGS:
        return _maxscore(found, live=live, allowed=allowed, norms=norms, n_docs=n_docs, k=k)
    rowids, scores = bm25_scores(found, live=live, norms=norms, n_docs=n_docs)
    if allowed is not None and len(rowids):
        keep = allowed[rowids]
        rowids, scores = rowids[keep], scores[keep]
    return rowids, scores


class PostingsCache:
    """The postings rows of recently searched terms, so a hot term costs no SQL (a bounded LRU).

    An entry holds one term's rows for a set of segments. A search whose state has exactly those
    segments uses it as it is; one whose state added segments (a write since) reads only the new
    segments' rows for that term and extends the entry; anything else (a merge replaced segments) reads
    the term again. Postings never change inside a segment, so an entry is never stale, only incomplete.

    Args:
        max_bytes: the most postings bytes kept; the least recently used terms are dropped beyond it.
    """

    def __init__(self, max_bytes: int = 64 << 20) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, tuple[frozenset[int], list[tuple[str, bytes, bytes]], int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def rows(self, conn: sqlite3.Connection, segments: tuple[int, ...], terms: Sequence[str]) -> list[tuple[str, bytes, bytes]]:
        """The ``(term, docs, tfs)`` rows of ``terms`` in ``segments``, read through the cache on ``conn``."""
        wanted = frozenset(segments)
        out: list[tuple[str, bytes, bytes]] = []
        missing: dict[frozenset[int], list[str]] = defaultdict(list)  # segments to read -> terms
        known: dict[str, tuple[frozenset[int], list[tuple[str, bytes, bytes]]]] = {}
        with self._lock:
            for term in terms:
                entry = self._entries.get(term)
                if entry is not None and entry[0] <= wanted:
                    self._entries.move_to_end(term)
                    out.extend(entry[1])
                    if entry[0] != wanted:
                        known[term] = (entry[0], entry[1])
                        missing[wanted - entry[0]].append(term)
                else:
                    missing[wanted].append(term)
        fetched: dict[str, list[tuple[str, bytes, bytes]]] = defaultdict(list)
        for segs, group in missing.items():
            ids = sorted(segs)
            for row in conn.execute(
                f"SELECT term, docs, tfs FROM postings WHERE segment IN ({','.join('?' * len(ids))}) "
                f"AND term IN ({','.join('?' * len(group))})",
                [*ids, *group],
            ):
                fetched[row[0]].append(row)
                out.append(row)
        with self._lock:
            for segs, group in missing.items():
                for term in group:
                    base = known.get(term, (frozenset(), []))[1]
                    self._put(term, wanted, base + fetched.get(term, []))
        return out

    def _put(self, term: str, segments: frozenset[int], rows: list[tuple[str, bytes, bytes]]) -> None:
        size = sum(len(d) + len(f) for _, d, f in rows) + 100
        if size > self.max_bytes // 4:
            return  # one term never takes over the cache
        old = self._entries.pop(term, None)
        if old is not None:
            self._bytes -= old[2]
        self._entries[term] = (segments, rows, size)
        self._bytes += size
        while self._bytes > self.max_bytes:
            _, (_, _, dropped) = self._entries.popitem(last=False)
            self._bytes -= dropped


def _term_lists(
    found: list[tuple[str, bytes, bytes]], live: np.ndarray | None, allowed: np.ndarray | None, n_docs: int
) -> list[tuple[float, float, np.ndarray, np.ndarray]]:
    """Per query term ``(upper bound, idf, rowids ascending, tfs)`` of its live, allowed postings."""
    by_term: dict[str, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
    for term, d, f in found:
        by_term[term].append(decode(d, f))
    lists = []
    for pieces in by_term.values():
        if len(pieces) > 1:
            pieces.sort(key=lambda p: int(p[0][0]) if len(p[0]) else 0)
            docs = np.concatenate([p[0] for p in pieces])
            tfs = np.concatenate([p[1].astype(np.uint32) for p in pieces])
            if not (np.diff(docs) > 0).all():  # segments whose rowid ranges interleave
                order = np.argsort(docs, kind="stable")
                docs, tfs = docs[order], tfs[order]
        else:
            docs, tfs = pieces[0]
        if live is not None:
            keep = live[docs]
            docs, tfs = docs[keep], tfs[keep]
        df = len(docs)
        if df == 0:
            continue
        idf = float(np.log1p((n_docs - df + 0.5) / (df + 0.5)))
        if allowed is not None:
            keep = allowed[docs]
            docs, tfs = docs[keep], tfs[keep]
            if not len(docs):
                continue
        tf_max = float(tfs.max())
        # tf / (tf + norm) grows with tf and falls with norm, whose least value is k1 * (1 - b) (length 0)
        # (raised by a few ulps so rounding in a contribution can never pass it)
        bound = idf * (BM25_K1 + 1.0) * tf_max / (tf_max + BM25_K1 * (1.0 - BM25_B)) * (1.0 + 1e-9)
        lists.append((bound, idf, docs, tfs))
    lists.sort(key=lambda t: -t[0])
    return lists


def _maxscore(
    found: list[tuple[str, bytes, bytes]],
    *,
    live: np.ndarray | None,
    allowed: np.ndarray | None,
    norms: np.ndarray,
    n_docs: int,
    k: int,
) -> tuple[np.ndarray, np.ndarray]:
    lists = _term_lists(found, live, allowed, n_docs)
    if not lists:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    rest = np.cumsum([t[0] for t in lists][::-1])[::-1].tolist() + [0.0]  # rest[j]: bounds of lists[j:]
    threshold = 0.0  # a lower bound of the k-th best score
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    j = 0
    while j < len(lists) and not (threshold > 0.0 and rest[j] < threshold):
        _, idf, docs, tfs = lists[j]
        tf = tfs.astype(np.float64)
        contributions = idf * (BM25_K1 + 1.0) * tf / (tf + norms[docs])
        parts.append((docs, contributions))
        if len(contributions) >= k:  # k documents score at least this much from this term alone
            threshold = max(threshold, float(np.partition(contributions, len(contributions) - k)[len(contributions) - k]))
        j += 1
    docs = np.concatenate([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
    contributions = np.concatenate([p[1] for p in parts]) if len(parts) > 1 else parts[0][1]
    if len(parts) == 1:
        rowids, scores = docs.astype(np.int64), contributions.copy()
    elif len(docs) * 8 >= len(norms):
        dense = np.bincount(docs, weights=contributions, minlength=len(norms))
        rowids = np.flatnonzero(dense)
        scores = dense[rowids]
    else:
        rowids, inverse = np.unique(docs, return_inverse=True)
        rowids, scores = rowids.astype(np.int64), np.bincount(inverse, weights=contributions, minlength=len(rowids))
    for _, idf, docs, tfs in lists[j:]:  # the terms left: probed for the candidates only
        at = np.searchsorted(docs, rowids)
        inside = at < len(docs)
        hit = np.zeros(len(rowids), dtype=bool)
        hit[inside] = docs[at[inside]] == rowids[inside]
        if hit.any():
            tf = tfs[at[hit]].astype(np.float64)
            scores[hit] += idf * (BM25_K1 + 1.0) * tf / (tf + norms[rowids[hit]])
    return rowids, scores
