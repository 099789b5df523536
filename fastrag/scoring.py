"""BM25 as fastrag's stores compute it: the query's term counts, and a pure reference scoring function.

Every store that scores BM25 itself (the SQLite store's segments, the PostgreSQL store's SQL) follows
Lucene's conventions (``BM25Similarity``, Robertson & Zaragoza 2009; k1 = 1.2, b = 0.75):

``score(d) = sum over query terms t of qtf(t) * idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))``

with ``idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))``, ``N`` the number of documents, ``df(t)`` how
many hold ``t``, ``|d|`` a document's number of terms, ``avgdl`` their mean, and ``qtf(t)`` how many times
the analysed query holds ``t``. A repeated query word thus counts once per occurrence, as in Lucene's
``BooleanQuery`` of one ``TermQuery`` clause per word (which Lucene rewrites into one clause boosted by the
count), Anserini's bag-of-words queries and bm25s; before issue 25 fastrag counted each distinct term once,
which cost SciFact-like collections with long queries up to 0.07 nDCG@10. (Lucene 8+ drops the constant
``k1 + 1`` factor, which changes no ranking.)

:func:`bm25_scores` is the reference the fast paths are tested against: plain Python over the documents'
terms, no index, no pruning. Qdrant's stores score with Qdrant's own BM25, which counts a repeated query
term once (its text index has no query-term weights).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["BM25_B", "BM25_K1", "bm25_scores", "query_term_counts", "repeated_terms"]

BM25_K1 = 1.2
"""Term-frequency saturation: Lucene's ``BM25Similarity`` default (Robertson & Zaragoza 2009 recommend
k1 in [1.2, 2.0])."""
BM25_B = 0.75
"""Document-length normalisation: Lucene's ``BM25Similarity`` default."""


def query_term_counts(analyses: Iterable[Sequence[str]]) -> dict[str, int]:
    """The query's BM25 terms and ``qtf``, from one or more analyses of the same question.

    Args:
        analyses: the terms of each analysis of the question, with repeats
            (:meth:`Analyzer.analyze(query, for_query=True) <fastrag.analysis.Analyzer.analyze>`), e.g. one
            per language a store's documents were analysed in.

    Returns:
        ``{term: count}``, sorted by term: within one analysis a term counts once per occurrence; a term
        several analyses give counts as often as the analysis that gives it most (the analyses read the
        same words, so a word is not counted once per language). Empty when no analysis left a term.
    """
    counts: dict[str, int] = {}
    for terms in analyses:
        for term, n in Counter(terms).items():
            if n > counts.get(term, 0):
                counts[term] = n
    return dict(sorted(counts.items()))


def repeated_terms(counts: Mapping[str, int]) -> list[str]:
    """``counts`` (:func:`query_term_counts`) as a list holding each term ``count`` times, sorted: the form
    the PostgreSQL store's statement takes."""
    return [term for term, n in sorted(counts.items()) for _ in range(n)]


def bm25_scores(
    documents: Mapping[str, Sequence[str]],
    query: Sequence[str] | Mapping[str, int],
    *,
    k1: float = BM25_K1,
    b: float = BM25_B,
) -> dict[str, float]:
    """Lucene's BM25 of every document holding a query term, computed from scratch (the reference).

    Args:
        documents: each document's analysed terms with repeats, by id: the whole collection, from which
            ``N``, ``df`` and ``avgdl`` are counted (a document without terms counts in ``N`` and
            ``avgdl``).
        query: the analysed query's terms with repeats, or ``{term: qtf}``.
        k1: term-frequency saturation (>= 0).
        b: length normalisation in [0, 1].

    Returns:
        ``{id: score}`` for the documents sharing a term with the query (BM25 > 0, unbounded, higher is
        better; float64, summed in query-term order). Empty when ``documents`` or ``query`` is.
    """
    qtf = dict(query) if isinstance(query, Mapping) else dict(Counter(query))
    n = len(documents)
    if not n or not qtf:
        return {}
    counts = {doc_id: Counter(terms) for doc_id, terms in documents.items()}
    avgdl = sum(len(terms) for terms in documents.values()) / n
    df = {t: sum(1 for c in counts.values() if t in c) for t in qtf}
    idf = {t: math.log(1.0 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in qtf}
    scores: dict[str, float] = {}
    for doc_id, c in counts.items():
        norm = k1 * (1.0 - b + b * len(documents[doc_id]) / avgdl) if avgdl else k1 * (1.0 - b)
        score, matched = 0.0, False
        for t in sorted(qtf):
            tf = c.get(t, 0)
            if tf:
                matched = True
                score += qtf[t] * idf[t] * tf * (k1 + 1.0) / (tf + norm)
        if matched:
            scores[doc_id] = score
    return scores
