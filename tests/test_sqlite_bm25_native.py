"""The native BM25 core (fastrag.vector_store.sqlite.native) against the numpy reference: the same top k
(every document tied at the cut included), the same scores, on random corpora (hypothesis) and on SciFact
end to end; and it releases the GIL while it scores."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import anyio
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastrag.vector_store.sqlite import lexical, native

pytestmark = pytest.mark.skipif(
    not native.enabled(), reason=f"the native BM25 core is not built here ({native.unavailable_reason() or 'FASTRAG_NATIVE=0'})"
)
core = native.core()
STRATEGIES = {"automatic": 0, "dense": 1, "block-max MaxScore": 2}


def random_lists(rng: np.random.Generator, n_docs: int, vocabulary: int, max_tf: int, length_values: int):
    """Term lists of a random collection (rowids 1..n_docs, Zipf-like document frequencies; few distinct
    lengths and frequencies, so that many documents tie) and its norms."""
    lengths = rng.integers(1, 1 + length_values, n_docs + 1).astype(np.float64) * 7
    norms = lexical.length_norms(lengths, lexical.mean_length(float(lengths[1:].sum()), n_docs))
    lists = []
    for t in range(vocabulary):
        share = min(0.95, 2.0 / (t + 1))
        docs = (np.flatnonzero(rng.random(n_docs) < share) + 1).astype(np.int32)
        if len(docs):
            tfs = rng.integers(1, 1 + max_tf, len(docs))
            lists.append(lexical._joined(None, [(docs, tfs.astype(np.uint16))], norms, f"t{t}"))
    return lists


def reference_cut(rowids: np.ndarray, scores: np.ndarray, k: int) -> dict[int, float]:
    """The reference's candidates scoring at least its k-th best score: what the core must return."""
    if len(scores) > k:
        cut = np.partition(scores, len(scores) - k)[len(scores) - k]
        keep = scores >= cut
        rowids, scores = rowids[keep], scores[keep]
    return dict(zip(rowids.tolist(), scores.tolist(), strict=True))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    n_docs=st.integers(1, 3000),
    vocabulary=st.integers(1, 12),
    max_tf=st.integers(1, 4),
    length_values=st.integers(1, 6),
    k=st.integers(1, 40),
    with_live=st.booleans(),
    with_allowed=st.booleans(),
    with_weights=st.booleans(),
    strategy=st.sampled_from(sorted(STRATEGIES)),
)
def test_core_returns_the_references_top_k_and_scores(
    seed: int, n_docs: int, vocabulary: int, max_tf: int, length_values: int, k: int,
    with_live: bool, with_allowed: bool, with_weights: bool, strategy: str,
) -> None:  # fmt: skip
    rng = np.random.default_rng(seed)
    lists = random_lists(rng, n_docs, vocabulary, max_tf, length_values)
    if not lists:
        return
    query = [lists[i] for i in sorted(rng.choice(len(lists), size=int(rng.integers(1, len(lists) + 1)), replace=False))]
    live = rng.random(n_docs + 1) < 0.8 if with_live else None
    allowed = rng.random(n_docs + 1) < 0.4 if with_allowed else None
    n_live = int(live[1:].sum()) if live is not None else n_docs
    weights = rng.integers(1, 4, len(query)).tolist() if with_weights else None
    args = dict(live=live, allowed=allowed, n_docs=n_live, size=n_docs + 1, k=k, query_weights=weights)
    expected = reference_cut(*lexical.bm25_top_reference(query, **args), k)
    rowids, scores = core.bm25_top(
        [t.docs for t in query], [t.weights for t in query], [t.block_max for t in query],
        [1.0] * len(query) if weights is None else [float(w) for w in weights],
        None if live is None else live.view(np.uint8), None if allowed is None else allowed.view(np.uint8),
        n_live, n_docs + 1, k, STRATEGIES[strategy],
    )  # fmt: skip
    got = dict(zip(rowids.tolist(), scores.tolist(), strict=True))
    assert sorted(got) == sorted(expected)  # the same documents, ties at the cut included
    assert got == pytest.approx(expected, rel=1e-12, abs=0)
    assert rowids.tolist() == sorted(rowids.tolist())


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_block_max_maxscore_skips_work_yet_stays_exact_on_long_lists(strategy: str) -> None:
    # 200k documents, two common terms and a rare one: the top 10 are the rare term's best documents
    rng = np.random.default_rng(7)
    lists = random_lists(rng, 200_000, 6, 5, 40)
    expected = reference_cut(*lexical.bm25_top_reference(lists, live=None, allowed=None, n_docs=200_000, size=200_001, k=10), 10)
    rowids, scores = core.bm25_top([t.docs for t in lists], [t.weights for t in lists], [t.block_max for t in lists],
                                   [1.0] * len(lists), None, None, 200_000, 200_001, 10, STRATEGIES[strategy])  # fmt: skip
    assert dict(zip(rowids.tolist(), scores.tolist(), strict=True)) == pytest.approx(expected, rel=1e-12, abs=0)


def test_store_bm25_through_the_core_ranks_scifact_as_the_reference(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from fastrag.evaluation import load_beir
    from fastrag.models import Document
    from fastrag.vector_store.sqlite import SQLiteVectorStore

    folder = Path(__file__).resolve().parents[1] / ".." / "shared" / "datasets" / "scifact"
    if not folder.is_dir():
        pytest.skip("../shared/datasets/scifact is not beside this checkout")
    data = load_beir(folder)
    queries = list(data.queries.items())[:150]

    async def run() -> tuple[list, list]:
        async with SQLiteVectorStore(tmp_path / "s.db") as store:
            docs = [Document(id=i, content=d.content, metadata={"n": n % 3}) for n, (i, d) in enumerate(data.corpus.items())]
            await store.upsert(docs)
            await store.delete(ids=[d.id for d in docs[::50]])  # tombstones
            out = []
            for flag in ("1", "0"):
                monkeypatch.setenv("FASTRAG_NATIVE", flag)
                found = []
                for _, text in queries:
                    for f in (None, {"equals": {"key": "n", "value": 1}}):
                        hits = await store.search_text(text, k=10, filter=f)
                        found.append([(d.id, d.score) for d in hits])
                out.append(found)
            return out[0], out[1]

    native_hits, reference_hits = anyio.run(run)
    assert [[i for i, _ in h] for h in native_hits] == [[i for i, _ in h] for h in reference_hits]
    for a, b in zip(native_hits, reference_hits, strict=True):
        assert [s for _, s in a] == pytest.approx([s for _, s in b], rel=1e-9)


def test_the_gil_is_released_while_the_core_scores() -> None:
    # with a switch interval far longer than the test, a Python thread only runs while the searching
    # thread has released the GIL: it makes progress during the native search exactly when the core
    # releases it
    n = 2_000_000
    docs = np.arange(1, n + 1, dtype=np.int32)
    weights = np.full(n, 1.5, dtype=np.float32)
    args = ([docs, docs[::2].copy(), docs[::3].copy()], [weights, weights[::2].copy(), weights[::3].copy()],
            [None, None, None], [1.0, 1.0, 1.0], None, None, n, n + 1, 10, 1)  # fmt: skip
    counter = [0]
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            counter[0] += 1
            time.sleep(0)  # gives the GIL back between steps, so the searching thread can take it

    old = sys.getswitchinterval()
    sys.setswitchinterval(30.0)
    spinner = threading.Thread(target=spin)
    try:
        spinner.start()
        progress = []
        for _ in range(20):
            before = counter[0]
            core.bm25_top(*args)  # ~10-50 ms of scoring
            progress.append(counter[0] - before)
            if progress[-1] > 0:
                break
    finally:
        stop.set()
        spinner.join()
        sys.setswitchinterval(old)
    assert max(progress) > 0, progress
