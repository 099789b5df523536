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
    everything = lexical.bm25_top(query, live=live, allowed=allowed, norms=norms, n_docs=n_live, k=k)
    monkeypatch.setattr(lexical, "MAXSCORE_MIN_POSTINGS", 0)
    pruned = lexical.bm25_top(query, live=live, allowed=allowed, norms=norms, n_docs=n_live, k=k)
    assert top(*pruned, k) == top(*everything, k)
    assert len(pruned[0]) <= len(everything[0])
    if allowed is not None:
        assert allowed[pruned[0]].all()
    if live is not None:
        assert live[pruned[0]].all()


def test_maxscore_prunes_the_long_lists_of_common_terms(monkeypatch: pytest.MonkeyPatch) -> None:
    # one rare term in 20 documents, one common term in every document: the common one is only probed
    n = 100_000
    rare = np.arange(1, n + 1, 5_000)
    rows = [("rare", *lexical.encode(rare, np.full(len(rare), 3))), ("common", *lexical.encode(np.arange(1, n + 1), np.ones(n)))]
    norms = np.full(n + 1, lexical.BM25_K1)
    rowids, _ = lexical.bm25_top(rows, live=None, allowed=None, norms=norms, n_docs=n, k=10)
    assert rowids.tolist() == rare.tolist()  # candidates: the rare term's documents, not all 100,000
