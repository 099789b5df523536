"""The BM25 index's scoring: MaxScore pruning returns exactly the top k that scoring every posting does."""

from __future__ import annotations

import numpy as np
import pytest

from fastrag.vector_store.sqlite import lexical


def segments(rng: np.random.Generator, n_docs: int, vocabulary: int, n_segments: int) -> list[tuple[str, bytes, bytes]]:
    """Postings rows of random documents split over segments (Zipf-like term frequencies, long and short
    lists), as the store writes them."""
    rows = []
    bounds = np.linspace(1, n_docs + 1, n_segments + 1).astype(int)
    weights = 1.0 / np.arange(1, vocabulary + 1)
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        for t in range(vocabulary):
            present = rng.random(hi - lo) < min(0.9, 3 * weights[t])
            docs = np.arange(lo, hi)[present]
            if len(docs):
                tfs = rng.integers(1, 6, len(docs))
                rows.append((f"t{t}", *lexical.encode(docs, tfs)))
    return rows


def term_lists(rows: list[tuple[str, bytes, bytes]], norms: np.ndarray) -> list[lexical.TermList]:
    """The store's per-term lists (segments joined, weights computed) for postings rows."""
    by_term: dict[str, list] = {}
    for term, d, f in rows:
        by_term.setdefault(term, []).append(lexical.decode(d, f))
    return [lexical._joined(None, pieces, norms) for pieces in by_term.values()]


def top(rowids: np.ndarray, scores: np.ndarray, k: int) -> list[tuple[int, float]]:
    order = sorted(zip(scores.tolist(), rowids.tolist(), strict=True), key=lambda p: (-p[0], p[1]))[:k]
    return [(r, round(s, 9)) for s, r in order]


@pytest.mark.parametrize("seed", range(12))
def test_maxscore_returns_the_same_top_k_as_scoring_every_posting(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(seed)
    n_docs = int(rng.integers(50, 3000))
    rows = segments(rng, n_docs, vocabulary=int(rng.integers(3, 30)), n_segments=int(rng.integers(1, 5)))
    lengths = rng.integers(1, 80, n_docs + 1).astype(np.float64)
    live = rng.random(n_docs + 1) < 0.9 if seed % 2 else None
    n_live = int(live.sum()) if live is not None else n_docs
    norms = lexical.BM25_K1 * (1 - lexical.BM25_B + lexical.BM25_B * lengths / lengths.mean())
    allowed = rng.random(n_docs + 1) < 0.3 if seed % 3 == 0 else None
    terms = sorted({r[0] for r in rows})
    query = [r for r in rows if r[0] in set(rng.choice(terms, size=min(len(terms), int(rng.integers(1, 8))), replace=False))]
    k = int(rng.integers(1, 25))
    lists = term_lists(query, norms)
    everything = lexical.bm25_top(lists, live=live, allowed=allowed, n_docs=n_live, size=n_docs + 1, k=k)
    monkeypatch.setattr(lexical, "MAXSCORE_MIN_POSTINGS", 0)
    pruned = lexical.bm25_top(lists, live=live, allowed=allowed, n_docs=n_live, size=n_docs + 1, k=k)
    assert top(*pruned, k) == top(*everything, k)
    if allowed is not None:
        assert allowed[pruned[0]].all()
    if live is not None:
        assert live[pruned[0]].all()


def test_maxscore_prunes_the_long_lists_of_common_terms() -> None:
    # one rare term in 20 documents, one common term in every document: the common one is only probed
    n = 100_000
    rare = np.arange(1, n + 1, 5_000)
    rows = [("rare", *lexical.encode(rare, np.full(len(rare), 3))), ("common", *lexical.encode(np.arange(1, n + 1), np.ones(n)))]
    norms = np.full(n + 1, lexical.BM25_K1)
    rowids, _ = lexical.bm25_top(term_lists(rows, norms), live=None, allowed=None, n_docs=n, size=n + 1, k=10)
    assert rowids.tolist() == rare.tolist()  # candidates: the rare term's documents, not all 100,000


def test_exact_bm25_scores_against_the_formula() -> None:
    # two documents, lengths 2 and 6 (avgdl 4); "a" in both (tf 1, 3), "b" in the first only (tf 1)
    lengths = np.array([0.0, 2.0, 6.0])
    norms = lexical.BM25_K1 * (1 - lexical.BM25_B + lexical.BM25_B * lengths / 4.0)
    rows = [("a", *lexical.encode(np.array([1, 2]), np.array([1, 3]))), ("b", *lexical.encode(np.array([1]), np.array([1])))]
    rowids, scores = lexical.bm25_top(term_lists(rows, norms), live=None, allowed=None, n_docs=2, size=3, k=2)

    def part(tf: float, length: float) -> float:
        return tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / 4.0))

    idf_a, idf_b = np.log(1 + 0.5 / 2.5), np.log(1 + 1.5 / 1.5)
    assert rowids.tolist() == [1, 2]
    assert scores == pytest.approx([idf_a * part(1, 2) + idf_b * part(1, 2), idf_a * part(3, 6)], rel=1e-6)
