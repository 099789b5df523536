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
``score(d) = sum_t qtf(t) * idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * |d| / avgdl))``, with ``N``,
``df`` and ``avgdl`` counted over the live documents, exactly as when every posting was one row, or, for a
scoped search (:meth:`~fastrag.vector_store.sqlite.SQLiteVectorStore.search_text_scoped`), over the live
documents of the scope (:func:`scoped_lists`), so a tenant's scores are those of a store holding only its
documents; ``qtf(t)`` is the count of the term in the query (a repeated query term counts once per
occurrence, as in Lucene's ``BooleanQuery`` of one clause per word; since issue 25).
:func:`fastrag.scoring.bm25_scores` is the reference the tests hold :func:`bm25_top` to.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

from fastrag.vector_store.sqlite import native

__all__ = [
    "BM25_B",
    "PostingsCache",
    "BM25_K1",
    "MAXSCORE_MIN_POSTINGS",
    "MERGE_FACTOR",
    "SCHEMA",
    "TermList",
    "bm25_top",
    "bm25_top_reference",
    "decode",
    "insert_segment",
    "length_norms",
    "mean_length",
    "merge_segments",
    "scoped_lists",
    "write_segment",
]

BM25_K1 = 1.2  # Lucene BM25Similarity defaults (Robertson & Zaragoza 2009 recommend k1 in [1.2, 2.0])
BM25_B = 0.75
MERGE_FACTOR = 32
"""Segments of one level merged into one of the next. 32 keeps a million documents written in batches of
1,000 to two rewrites of each posting (a WAL journal already writes every page twice, and issue 12's
budget is three times the final size), while a query seeks at most ~31 segments per level per term (and
none for the hot terms :class:`PostingsCache` holds)."""
_DOCS = np.dtype("<i4")
_TF16 = np.dtype("<u2")
_TF32 = np.dtype("<u4")

SCHEMA = """
CREATE TABLE IF NOT EXISTS segments (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: readers and caches name blocks and segments by id
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
                gone = _padded(dead, docs)
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


MAXSCORE_MIN_POSTINGS = 50_000
"""From this many postings in a query's terms, :func:`bm25_top` prunes with MaxScore instead of scoring
every posting (below it one numpy pass over everything is cheaper than the bookkeeping)."""


class TermList(NamedTuple):
    """One query term's postings over every segment of a state: rowids ascending (int32), their term
    frequencies, and ``weights``: BM25's term-frequency part ``(k1 + 1) * tf / (tf + norm)`` per
    posting (float32), for the document lengths' mean the lists were read with; ``term``: the term."""

    docs: np.ndarray
    tfs: np.ndarray
    weights: np.ndarray
    term: str = ""
    block_max: np.ndarray | None = None
    """The largest of ``weights`` in each block of ``native.BLOCK``
    postings (float32), for the native core's block-max bounds; ``None``: the core computes them."""


def bm25_top(
    lists: Sequence[TermList],
    *,
    live: np.ndarray | None,
    allowed: np.ndarray | None,
    n_docs: int,
    size: int,
    k: int,
    query_weights: Sequence[float] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Candidates holding the ``k`` best BM25 documents: :func:`bm25_top_reference`'s contract, computed by
    the native core (``fastrag.vector_store.sqlite.native``: block-max MaxScore into a top-k heap, the
    GIL released while it scores) when it is built, by :func:`bm25_top_reference` otherwise.

    The native core returns exactly the documents scoring at least the ``k``-th best score (ties at the
    cut kept, for the caller's tie-break by id), with scores equal to the reference's (the same float64
    terms added in the same order); the reference may return more candidates, never other top ``k``.

    Raises:
        ValueError: ``query_weights`` is not aligned with ``lists``.
    """
    if query_weights is not None and len(query_weights) != len(lists):
        raise ValueError(f"{len(query_weights)} query weights for {len(lists)} term lists")
    core = native.core()
    if core is None:
        return bm25_top_reference(lists, live=live, allowed=allowed, n_docs=n_docs, size=size, k=k, query_weights=query_weights)
    return core.bm25_top(
        [t.docs for t in lists],
        [t.weights for t in lists],
        [t.block_max for t in lists],
        [1.0] * len(lists) if query_weights is None else [float(w) for w in query_weights],
        None if live is None else live.view(np.uint8),
        None if allowed is None else allowed.view(np.uint8),
        n_docs,
        size,
        k,
    )


def bm25_top_reference(
    lists: Sequence[TermList],
    *,
    live: np.ndarray | None,
    allowed: np.ndarray | None,
    n_docs: int,
    size: int,
    k: int,
    query_weights: Sequence[float] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Candidates holding the ``k`` best BM25 documents for a query whose terms' postings are ``lists``.

    ``score(d) = sum_t qtf(t) * idf(t) * weight(t, d)`` with ``idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))``.

    Args:
        lists: one :class:`TermList` per query term found in the index.
        live: bool per rowid, or ``None`` when every rowid the postings name is live. Document
            frequencies count live documents only, as BM25's statistics are over the whole collection.
        allowed: bool per rowid of the documents that may be returned (a filter), or ``None`` for all.
        n_docs: ``N``, the number of live documents.
        size: one past the largest rowid.
        k: how many of the best documents the candidates must hold.
        query_weights: ``qtf(t)`` for each of ``lists`` (aligned), each > 0: how many times the query
            holds the term (:func:`fastrag.scoring.query_term_counts`); ``None``: 1 for every term.

    Returns:
        ``(rowids, scores)``: rowids (int64, ascending) and their float64 BM25 scores (> 0: Lucene's
        idf is positive). Every document outside them scores strictly less than the ``k``-th best among
        them (or shares no term), so their top ``k`` (ties by id) is the top ``k`` of the collection.
        Both empty when no allowed, live document shares a term.

    Small queries score every posting. From :data:`MAXSCORE_MIN_POSTINGS` postings, MaxScore (Turtle &
    Flood 1995, "Query evaluation: strategies and optimizations"): terms are taken by decreasing upper
    bound of their contribution (idf times their largest weight); once the bounds of the terms left sum
    below a lower bound of the ``k``-th best score, documents found only in those terms cannot reach
    the top ``k``, so those terms' (long) lists are only binary-searched for the candidates. A term's
    query weight scales its idf, so its bound and every contribution alike: the pruning stays exact.
    """
    if query_weights is not None and len(query_weights) != len(lists):
        raise ValueError(f"{len(query_weights)} query weights for {len(lists)} term lists")
    scored: list[tuple[float, float, np.ndarray, np.ndarray]] = []  # (bound, qtf * idf, docs, weights)
    for i, term_list in enumerate(lists):
        docs, weights = term_list.docs, term_list.weights
        if live is not None:
            keep = live[docs]
            docs, weights = docs[keep], weights[keep]
        df = len(docs)
        if df == 0:
            continue
        idf = float(np.log1p((n_docs - df + 0.5) / (df + 0.5)))
        if query_weights is not None:
            idf *= float(query_weights[i])
        if allowed is not None:
            keep = allowed[docs]
            docs, weights = docs[keep], weights[keep]
            if not len(docs):
                continue
        scored.append((idf * float(weights.max()), idf, docs, weights))
    if not scored:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    total = sum(len(t[2]) for t in scored)
    essential = len(scored)
    if total >= MAXSCORE_MIN_POSTINGS and len(scored) > 1:
        scored.sort(key=lambda t: -t[0])
        rest = np.cumsum([t[0] for t in scored][::-1])[::-1].tolist() + [0.0]  # rest[j]: bounds of scored[j:]
        lengths = [len(t[2]) for t in scored]
        left = np.cumsum(lengths[::-1])[::-1].tolist() + [0]  # left[j]: postings of scored[j:]
        threshold = 0.0  # a lower bound of the k-th best score
        essential = found = 0
        # stop once the terms left cannot lift a new document into the top k, and probing them for the
        # candidates found so far (a binary search each) is cheaper than scoring them
        while essential < len(scored) and not (
            threshold > 0.0 and rest[essential] < threshold * (1.0 - 1e-9) and 4 * found < left[essential]
        ):
            _, idf, _, weights = scored[essential]
            if len(weights) >= k:  # k documents score at least this much from this term alone
                threshold = max(threshold, idf * float(np.partition(weights, len(weights) - k)[len(weights) - k]))
            found += len(weights)
            essential += 1
    rowids, scores = _accumulate(scored[:essential], size, k if essential == len(scored) else None)
    for _, idf, docs, weights in scored[essential:]:  # the terms left: probed for the candidates only
        at = np.searchsorted(docs, rowids)
        inside = at < len(docs)
        hit = np.zeros(len(rowids), dtype=bool)
        hit[inside] = docs[at[inside]] == rowids[inside]
        scores[hit] += idf * weights[at[hit]].astype(np.float64)
    return rowids, scores


def _accumulate(
    scored: list[tuple[float, float, np.ndarray, np.ndarray]], size: int, k: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Rowids (ascending) and the summed ``idf * weight`` of the documents in ``scored``'s lists; with
    ``k``, only those scoring at least the ``k``-th best (ties kept), when that is cheaper to say."""
    if len(scored) == 1:
        _, idf, docs, weights = scored[0]
        return docs.astype(np.int64), idf * weights.astype(np.float64)
    docs = np.concatenate([t[2] for t in scored])
    contributions = np.concatenate([t[1] * t[3].astype(np.float64) for t in scored])
    if len(docs) * 8 < size:  # few postings: a sort of them is cheaper than an array by rowid
        rowids, inverse = np.unique(docs, return_inverse=True)
        return rowids.astype(np.int64), np.bincount(inverse, weights=contributions, minlength=len(rowids))
    dense = np.bincount(docs, weights=contributions, minlength=size)
    if k is not None and k < size:
        # the k-th best score, then only the documents at or above it: one pass each, where listing
        # every document with a score would cost a slow scattered nonzero() over the whole array
        cut = float(np.partition(dense, size - k)[size - k])
        rowids = np.flatnonzero(dense >= cut) if cut > 0.0 else np.flatnonzero(dense)
    else:
        rowids = np.flatnonzero(dense)
    return rowids, dense[rowids]


class PostingsCache:
    """Decoded postings of recently searched terms, with their BM25 weights: a hot term costs no SQL and
    no decoding (a bounded LRU).

    An entry holds one term's postings over a set of segments. A search whose state has exactly those
    segments uses it as it is; one whose state added segments (a write since) reads only the new
    segments' rows for that term and extends the entry; anything else (a merge replaced segments) reads
    the term again. Postings never change inside a segment, so an entry is never stale, only incomplete.
    Weights depend on the mean document length, so they are recomputed when it changed.

    Args:
        max_bytes: the most bytes of arrays kept (10 per posting); least recently used terms go first.
    """

    def __init__(self, max_bytes: int = 128 << 20) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, tuple[frozenset[int], TermList, float]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def lists(
        self, conn: sqlite3.Connection, segments: tuple[int, ...], terms: Sequence[str], norms: np.ndarray, avgdl: float
    ) -> list[TermList]:
        """The :class:`TermList` of each of ``terms`` found in ``segments`` (read on ``conn`` where not
        cached), with weights for ``norms`` (``k1 * (1 - b + b * |d| / avgdl)`` by rowid), in the order
        of ``terms``; a term not in the index has none."""
        wanted = frozenset(segments)
        have: dict[str, tuple[frozenset[int], TermList, float]] = {}
        missing: dict[frozenset[int], list[str]] = defaultdict(list)  # segments to read -> terms
        with self._lock:
            for term in terms:
                entry = self._entries.get(term)
                if entry is not None and entry[0] <= wanted:
                    self._entries.move_to_end(term)
                    have[term] = entry
                    if entry[0] != wanted:
                        missing[wanted - entry[0]].append(term)
                else:
                    missing[wanted].append(term)
        fetched: dict[str, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
        for segs, group in missing.items():
            ids = sorted(segs)
            for term, d, f in conn.execute(
                f"SELECT term, docs, tfs FROM postings WHERE segment IN ({','.join('?' * len(ids))}) "
                f"AND term IN ({','.join('?' * len(group))})",
                [*ids, *group],
            ):
                fetched[term].append(decode(d, f))
        out: list[TermList] = []
        updates: list[tuple[str, TermList]] = []
        for term in terms:
            entry = have.get(term)
            pieces = fetched.get(term, [])
            if entry is None and not pieces:
                continue  # not in the index
            current = entry[1] if entry is not None else None
            if pieces or current is None:
                current = _joined(current, pieces, norms, term)
                updates.append((term, current))
            elif entry[2] != avgdl:
                current = _term_list(current.docs, current.tfs, _weights(current.docs, current.tfs, norms), term)
                updates.append((term, current))
            if len(current.docs):
                out.append(current)
        with self._lock:
            for term, current in updates:
                self._put(term, wanted, current, avgdl)
        return out

    def _put(self, term: str, segments: frozenset[int], current: TermList, avgdl: float) -> None:
        size = 10 * len(current.docs) + 100
        old = self._entries.pop(term, None)
        if old is not None:
            self._bytes -= 10 * len(old[1].docs) + 100
        if size > self.max_bytes // 4:
            return  # one term never takes over the cache
        self._entries[term] = (segments, current, avgdl)
        self._bytes += size
        while self._bytes > self.max_bytes:
            _, (_, dropped, _) = self._entries.popitem(last=False)
            self._bytes -= 10 * len(dropped.docs) + 100


def _joined(
    current: TermList | None, pieces: list[tuple[np.ndarray, np.ndarray]], norms: np.ndarray, term: str = ""
) -> TermList:
    """``current`` (if any) and ``pieces`` as one list, rowids ascending, with fresh weights."""
    parts = ([(current.docs, current.tfs)] if current is not None else []) + pieces
    if len(parts) == 1:
        docs, tfs = parts[0]
    else:
        parts.sort(key=lambda p: int(p[0][0]) if len(p[0]) else 0)
        docs = np.concatenate([p[0] for p in parts])
        tfs = np.concatenate([p[1].astype(np.uint32) for p in parts])
        if not (np.diff(docs) > 0).all():  # segments whose rowid ranges interleave
            order = np.argsort(docs, kind="stable")
            docs, tfs = docs[order], tfs[order]
    return _term_list(docs, tfs, _weights(docs, tfs, norms), term)


def _term_list(docs: np.ndarray, tfs: np.ndarray, weights: np.ndarray, term: str) -> TermList:
    """A :class:`TermList`, with its block maxima when the native core will score it (cached with it)."""
    core = native.core()
    return TermList(docs, tfs, weights, term, None if core is None else core.block_max(weights))


def mean_length(total_length: float, n_docs: int) -> float:
    """BM25's ``avgdl``: the mean analysed length of ``n_docs`` documents whose lengths sum to
    ``total_length``; 1.0 when there are none or all are empty (no posting is then scored)."""
    return total_length / n_docs if n_docs and total_length > 0 else 1.0


def length_norms(lengths: np.ndarray, avgdl: float) -> np.ndarray:
    """BM25's ``k1 * (1 - b + b * |d| / avgdl)`` for each length in ``lengths`` (float64)."""
    return BM25_K1 * (1.0 - BM25_B + (BM25_B / avgdl) * lengths)


def scoped_lists(lists: Sequence[TermList], inside: np.ndarray, lengths: np.ndarray) -> tuple[list[TermList], int]:
    """The statistics inputs of a BM25 search over a sub-collection (a tenant's documents).

    Args:
        lists: the query terms' postings over the whole store (:meth:`PostingsCache.lists`).
        inside: bool by rowid: the live documents of the sub-collection.
        lengths: BM25 document lengths by rowid.

    Returns:
        ``(lists, n_docs)``: each term's postings restricted to ``inside`` (terms with none left dropped),
        their weights recomputed for the sub-collection's mean length, and its document count ``N``, to
        pass to :func:`bm25_top` with ``live=None``: ``df`` is then counted within it too.
    """
    held = lengths[inside]
    n_docs = len(held)
    avgdl = mean_length(float(held.sum()), n_docs)
    out: list[TermList] = []
    for term in lists:
        keep = inside[term.docs]
        if keep.any():
            mine, freqs = term.docs[keep], term.tfs[keep]
            # the norms of these postings only (not of every rowid), so _weights reads them by position
            norms = length_norms(lengths[mine], avgdl)
            out.append(_term_list(mine, freqs, _weights(np.arange(len(mine)), freqs, norms), term.term))
    return out, n_docs


def _weights(docs: np.ndarray, tfs: np.ndarray, norms: np.ndarray) -> np.ndarray:
    tf = tfs.astype(np.float32)
    return (np.float32(BM25_K1 + 1.0) * tf / (tf + norms[docs].astype(np.float32))).astype(np.float32)
