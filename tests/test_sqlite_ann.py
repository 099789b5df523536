"""The SQLite store's ANN index (fastrag.vector_store.sqlite.ann.HNSWIndex, faiss HNSW).

What a caller relies on: recall against exact k-NN, filtered search that never returns a disallowed key
and is never short while enough allowed keys exist (1% and 50% filters), incremental add and remove, save
and load (memory-mapped too) giving the same answers, and concurrent searches (also during a write)
agreeing with serial ones. Speed is measured in benchmarks/ann_libraries.py, not here.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from fastrag.errors import (
    BackendUnavailableError,
    ConfigurationError,
    DimensionMismatchError,
    InvalidParameterError,
)
from fastrag.vector_store.sqlite.ann import HNSWIndex, PQFastScanIndex

needs_faiss = pytest.mark.skipif(
    importlib.util.find_spec("faiss") is None, reason='faiss is not installed: pip install "fastrag-retrieval[ann]"'
)

N, DIM, K = 5_000, 64, 10


def unit_rows(seed: int, n: int, dim: int = DIM) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((n, dim), dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def exact(matrix: np.ndarray, keys: np.ndarray, q: np.ndarray, k: int, allowed: np.ndarray | None = None) -> np.ndarray:
    """The exact top-k keys (numpy), over the keys ``allowed`` admits."""
    scores = matrix @ (q / np.linalg.norm(q))
    if allowed is not None:
        ok = np.zeros(len(keys), dtype=bool)
        inside = keys < len(allowed)
        ok[inside] = allowed[keys[inside]]
        scores = np.where(ok, scores, -np.inf)
    top = np.argsort(-scores, kind="stable")[:k]
    return keys[top[np.isfinite(scores[top])]]


def recall(found: list[np.ndarray], truth: list[np.ndarray]) -> float:
    pairs = zip(found, truth, strict=True)
    return float(np.mean([len(set(f.tolist()) & set(t.tolist())) / max(1, len(t)) for f, t in pairs]))


@pytest.fixture(scope="module")
def corpus() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """5,000 random unit vectors of 64 dims, keyed by sparse rowids (3i + 1), and 100 queries."""
    return unit_rows(0, N), np.arange(N, dtype=np.int64) * 3 + 1, unit_rows(1, 100)


@pytest.fixture(scope="module")
def index(corpus: tuple[np.ndarray, np.ndarray, np.ndarray]) -> HNSWIndex:
    if importlib.util.find_spec("faiss") is None:
        pytest.skip('faiss is not installed: pip install "fastrag-retrieval[ann]"')
    matrix, keys, _ = corpus
    return HNSWIndex.build(matrix, keys)


@needs_faiss
def test_recall_against_exact(index: HNSWIndex, corpus: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    matrix, keys, queries = corpus
    results = [index.search(q, K) for q in queries]
    assert recall([r[0] for r in results], [exact(matrix, keys, q, K) for q in queries]) >= 0.95
    for found, scores in results:
        assert found.dtype == np.int64 and scores.dtype == np.float32 and len(found) == K
        assert np.all(np.diff(scores) <= 0)  # best first
    # the scores are the cosine similarities of the returned keys
    q = queries[0]
    found, scores = index.search(q * 7.5, K)  # any scale: the query is normalised
    np.testing.assert_allclose(scores, matrix[(found - 1) // 3] @ q, rtol=1e-5, atol=1e-6)
    assert len(index) == N and index.max_key == int(keys[-1])
    np.testing.assert_array_equal(index.keys, keys)


@needs_faiss
@pytest.mark.parametrize("share", [0.01, 0.5])
@pytest.mark.parametrize("walk", [False, True], ids=["default", "graph-walk-forced"])
def test_filtered_search_returns_only_allowed_keys_and_k_of_them(
    corpus: tuple[np.ndarray, np.ndarray, np.ndarray], index: HNSWIndex, share: float, walk: bool
) -> None:
    matrix, keys, queries = corpus
    # on 5,000 rows the default answers both filters exactly (cheaper); exact_rows_per_candidate=0 forces
    # the widened graph walk, which must hold up on its own
    idx = HNSWIndex.build(matrix, keys, exact_rows_per_candidate=0) if walk else index
    rng = np.random.default_rng(int(share * 100))
    allowed = np.zeros(int(keys[-1]) + 1, dtype=bool)
    allowed[rng.choice(keys, int(share * N), replace=False)] = True
    allowed[0] = True  # a key that is not in the index: never returned
    found = [idx.search(q, K, allowed=allowed)[0] for q in queries]
    for f in found:
        assert len(f) == K
        assert allowed[f].all()
    assert recall(found, [exact(matrix, keys, q, K, allowed) for q in queries]) >= 0.95


class _ShortWalk:
    """A stand-in for the faiss index whose graph walk returns only half of what it finds."""

    def __init__(self, inner: object) -> None:
        self.inner = inner

    def search(self, x: np.ndarray, k: int, params: object = None) -> tuple[np.ndarray, np.ndarray]:
        scores, ids = self.inner.search(x, k, params=params)  # type: ignore[attr-defined]
        ids[:, k // 2 :] = -1
        return scores, ids


@needs_faiss
def test_a_short_graph_walk_is_completed_exactly(corpus: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    matrix, keys, queries = corpus
    idx = HNSWIndex.build(matrix[:2_000], keys[:2_000], m=8, ef_construction=32, exact_rows_per_candidate=0)
    idx._index = _ShortWalk(idx._index)  # noqa: SLF001 (simulates faiss coming back short)
    allowed = np.zeros(int(keys[1_999]) + 1, dtype=bool)
    allowed[keys[:2_000:20]] = True  # 100 allowed keys
    for q in queries[:20]:
        found, scores = idx.search(q, K, allowed=allowed)
        np.testing.assert_array_equal(found, exact(matrix[:2_000], keys[:2_000], q, K, allowed))
        np.testing.assert_allclose(scores, matrix[(found - 1) // 3] @ q, rtol=1e-5, atol=1e-6)


@needs_faiss
def test_fewer_allowed_keys_than_k_returns_all_of_them(index: HNSWIndex, corpus: tuple[np.ndarray, ...]) -> None:
    matrix, keys, queries = corpus
    allowed = np.zeros(int(keys[-1]) + 1, dtype=bool)
    allowed[keys[[5, 500, 4999]]] = True
    found, scores = index.search(queries[0], K, allowed=allowed)
    assert sorted(found.tolist()) == sorted(keys[[5, 500, 4999]].tolist())
    assert np.all(np.diff(scores) <= 0)
    # a short mask: keys at or past its end are not allowed
    short = np.ones(100, dtype=bool)
    found, _ = index.search(queries[0], K, allowed=short)
    assert len(found) == K and found.max() < 100
    assert len(index.search(queries[0], K, allowed=np.zeros(0, dtype=bool))[0]) == 0


@needs_faiss
def test_add_after_build_finds_the_new_vectors_and_replaces_existing_keys(
    corpus: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> None:
    matrix, keys, _ = corpus
    idx = HNSWIndex.build(matrix[:1_500], keys[:1_500], m=16, ef_construction=64)
    idx.add(matrix[1_500:2_000], keys[1_500:2_000])
    assert len(idx) == 2_000 and idx.max_key == int(keys[1_999])
    for i in range(1_500, 2_000, 10):
        found, scores = idx.search(matrix[i], 1)
        assert found[0] == keys[i] and scores[0] == pytest.approx(1.0, abs=1e-5)
    # re-adding a key replaces its vector: the old one is never returned again
    idx.add(matrix[2_000:2_001], keys[:1])
    assert len(idx) == 2_000 and idx.dead_fraction > 0
    assert idx.search(matrix[2_000], 1)[0][0] == keys[0]
    assert keys[0] not in idx.search(matrix[0], K)[0]


@needs_faiss
def test_removed_keys_are_never_returned(corpus: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    matrix, keys, queries = corpus
    idx = HNSWIndex.build(matrix[:1_000], keys[:1_000], m=16, ef_construction=64, exact_rows_per_candidate=0)
    gone = keys[:1_000:2]
    assert idx.remove(np.append(gone, 10**6)) == len(gone)  # a key not in the index is ignored
    assert len(idx) == 500 and idx.dead_fraction == pytest.approx(0.5)
    for q in queries[:30]:
        found, _ = idx.search(q, K)
        assert len(found) == K and not np.isin(found, gone).any()
        allowed = np.ones(int(keys[999]) + 1, dtype=bool)
        found, _ = idx.search(q, K, allowed=allowed)
        assert len(found) == K and not np.isin(found, gone).any()


@needs_faiss
@pytest.mark.parametrize("mmap", [True, False])
def test_save_and_load_round_trip(
    index: HNSWIndex, corpus: tuple[np.ndarray, np.ndarray, np.ndarray], tmp_path: Path, mmap: bool
) -> None:
    matrix, keys, queries = corpus
    path = tmp_path / "vectors.hnsw"
    path.write_bytes(b"an older file")
    index.save(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vectors.hnsw"]  # no temporary file left
    loaded = HNSWIndex.load(path, mmap=mmap)
    assert loaded.memory_mapped is mmap
    assert len(loaded) == len(index) and loaded.max_key == index.max_key and loaded.ef_search == index.ef_search
    allowed = np.random.default_rng(5).random(int(keys[-1]) + 1) < 0.3
    for q in queries[:30]:
        for a in (None, allowed):
            f1, s1 = index.search(q, K, allowed=a)
            f2, s2 = loaded.search(q, K, allowed=a)
            np.testing.assert_array_equal(f1, f2)
            np.testing.assert_array_equal(s1, s2)
    # a change to a mapped index reads it into memory first (faiss would abort the process otherwise),
    # from the file it mapped even if the name was replaced since
    index.save(path)
    extra = unit_rows(9, 20)
    loaded.add(extra, np.arange(20) + 10**6)
    assert not loaded.memory_mapped and len(loaded) == N + 20
    assert loaded.search(extra[3], 1)[0][0] == 10**6 + 3


@needs_faiss
def test_concurrent_searches_agree_with_serial(index: HNSWIndex, corpus: tuple[np.ndarray, ...]) -> None:
    _, keys, queries = corpus
    allowed = np.random.default_rng(6).random(int(keys[-1]) + 1) < 0.5
    serial = [(index.search(q, K)[0], index.search(q, K, allowed=allowed)[0]) for q in queries]
    results: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(4)]
    barrier = threading.Barrier(4)

    def work(slot: int) -> None:
        barrier.wait()
        results[slot] = [(index.search(q, K)[0], index.search(q, K, allowed=allowed)[0]) for q in queries]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got in results:
        assert len(got) == len(serial)
        for (a, b), (c, d) in zip(got, serial, strict=True):
            np.testing.assert_array_equal(a, c)
            np.testing.assert_array_equal(b, d)


@needs_faiss
def test_searches_during_adds_see_whole_states(corpus: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    matrix, keys, queries = corpus
    idx = HNSWIndex.build(matrix[:1_000], keys[:1_000], ef_construction=40)
    errors: list[BaseException] = []
    done = threading.Event()

    def reader() -> None:
        try:
            while not done.is_set():
                for q in queries[:10]:
                    found, scores = idx.search(q, K)
                    assert len(found) == K and np.all(np.diff(scores) <= 0)
                    assert np.isin(found, keys[:2_000]).all()
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in readers:
        t.start()
    try:
        for start in range(1_000, 2_000, 250):
            idx.add(matrix[start : start + 250], keys[start : start + 250])
    finally:
        done.set()
        for t in readers:
            t.join()
    assert not errors, errors[0]
    assert len(idx) == 2_000


@needs_faiss
def test_bad_arguments_are_refused(index: HNSWIndex, tmp_path: Path) -> None:
    q = unit_rows(2, 1)[0]
    with pytest.raises(InvalidParameterError):
        index.search(q, 0)
    with pytest.raises(InvalidParameterError):
        index.search(np.zeros(DIM, dtype=np.float32), K)
    with pytest.raises(DimensionMismatchError):
        index.search(q[:10], K)
    with pytest.raises(InvalidParameterError):
        index.search(q, K, allowed=np.ones(10, dtype=np.int8))
    with pytest.raises(InvalidParameterError):
        HNSWIndex.build(unit_rows(3, 3), np.array([1, 1, 2]))
    with pytest.raises(InvalidParameterError):
        HNSWIndex.build(unit_rows(3, 3), np.array([-1, 0, 2]))
    with pytest.raises(DimensionMismatchError):
        HNSWIndex.build(unit_rows(3, 3), np.array([0, 1]))
    with pytest.raises(DimensionMismatchError):
        index.add(unit_rows(3, 2, dim=DIM + 1), np.array([10**7, 10**7 + 1]))
    with pytest.raises(BackendUnavailableError):
        HNSWIndex.load(tmp_path / "missing.hnsw")
    (tmp_path / "junk.hnsw").write_bytes(b"not an index")
    with pytest.raises(BackendUnavailableError):
        HNSWIndex.load(tmp_path / "junk.hnsw", mmap=False)
    with pytest.raises(BackendUnavailableError):
        index.save(tmp_path / "no-such-folder" / "x.hnsw")


@needs_faiss
def test_empty_index(tmp_path: Path) -> None:
    idx = HNSWIndex.build(np.zeros((0, 8), dtype=np.float32), np.zeros(0, dtype=np.int64))
    assert len(idx) == 0 and idx.max_key == -1
    found, scores = idx.search(unit_rows(4, 1, dim=8)[0], K)
    assert len(found) == 0 and len(scores) == 0
    idx.add(unit_rows(4, 3, dim=8), np.array([2, 4, 6]))
    assert sorted(idx.search(unit_rows(5, 1, dim=8)[0], K)[0].tolist()) == [2, 4, 6]


def test_missing_faiss_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "faiss", None)  # import faiss now raises ImportError
    with pytest.raises(ConfigurationError, match=r'pip install "fastrag-retrieval\[ann\]"'):
        HNSWIndex.build(unit_rows(0, 3, dim=8), np.arange(3))


# ------------------------------------------------------------------------------------------------------
# PQFastScanIndex: the same API, fast-scan candidates re-scored exactly through the caller's vectors
# ------------------------------------------------------------------------------------------------------

PQ_N = 20_000


@pytest.fixture(scope="module")
def pq_corpus() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """20,000 random unit vectors of 64 dims keyed by sparse rowids (3i + 1), and 100 queries."""
    return unit_rows(10, PQ_N), np.arange(PQ_N, dtype=np.int64) * 3 + 1, unit_rows(11, 100)


def gather(matrix: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """The ``vectors`` function the store passes: rowids (3i + 1) to their rows."""
    return lambda ks: matrix[(ks - 1) // 3]


@pytest.fixture(scope="module")
def pq_index(pq_corpus: tuple[np.ndarray, np.ndarray, np.ndarray]) -> PQFastScanIndex:
    if importlib.util.find_spec("faiss") is None:
        pytest.skip('faiss is not installed: pip install "fastrag-retrieval[ann]"')
    matrix, keys, _ = pq_corpus
    return PQFastScanIndex.build(matrix, keys)


@needs_faiss
def test_pq_recall_against_exact_with_exact_scores(
    pq_index: PQFastScanIndex, pq_corpus: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> None:
    matrix, keys, queries = pq_corpus
    vectors = gather(matrix)
    results = [pq_index.search(q, K, vectors=vectors) for q in queries]
    assert recall([r[0] for r in results], [exact(matrix, keys, q, K) for q in queries]) >= 0.95
    for (found, scores), q in zip(results, queries, strict=True):
        assert found.dtype == np.int64 and scores.dtype == np.float32 and len(found) == K
        assert np.all(np.diff(scores) <= 0)  # best first
        np.testing.assert_allclose(scores, vectors(found) @ q, rtol=1e-5, atol=1e-6)  # exact cosine
    # any query scale; the same call as HNSWIndex (which ignores vectors=)
    assert pq_index.search(queries[0] * 7.5, K, vectors=vectors)[0].tolist() == results[0][0].tolist()


@needs_faiss
@pytest.mark.parametrize("share", [0.01, 0.5])
@pytest.mark.parametrize("fetch", [False, True], ids=["default", "over-fetch-forced"])
def test_pq_filtered_search_returns_only_allowed_keys_and_k_of_them(
    pq_corpus: tuple[np.ndarray, np.ndarray, np.ndarray], pq_index: PQFastScanIndex, share: float, fetch: bool
) -> None:
    matrix, keys, queries = pq_corpus
    # by default 1% (200 rows) is scored exactly and 50% over-fetched; exact_share=0 with candidate_k
    # under 200 forces the over-fetch at 1% too
    idx = PQFastScanIndex.build(matrix, keys, exact_share=0, candidate_k=128) if fetch else pq_index
    rng = np.random.default_rng(int(share * 100))
    allowed = np.zeros(int(keys[-1]) + 1, dtype=bool)
    allowed[rng.choice(keys, int(share * PQ_N), replace=False)] = True
    allowed[0] = True  # a key that is not in the index: never returned
    found = [idx.search(q, K, allowed=allowed, vectors=gather(matrix))[0] for q in queries]
    for f in found:
        assert len(f) == K
        assert allowed[f].all()
    assert recall(found, [exact(matrix, keys, q, K, allowed) for q in queries]) >= 0.95


class _ShortFetch:
    """A stand-in for the faiss index whose fast scan returns only half of what it finds."""

    def __init__(self, inner: object) -> None:
        self.inner = inner

    def search(self, x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        scores, ids = self.inner.search(x, k)  # type: ignore[attr-defined]
        ids[:, 5:] = -1
        return scores, ids


@needs_faiss
def test_pq_a_short_fetch_is_completed_exactly(pq_corpus: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    matrix, keys, queries = pq_corpus
    idx = PQFastScanIndex.build(matrix[:2_000], keys[:2_000], exact_share=0, candidate_k=10)
    idx._index = _ShortFetch(idx._index)  # noqa: SLF001 (simulates faiss coming back short)
    allowed = np.zeros(int(keys[1_999]) + 1, dtype=bool)
    allowed[keys[:2_000:20]] = True  # 100 allowed keys
    for q in queries[:20]:
        found, _ = idx.search(q, K, allowed=allowed, vectors=gather(matrix))
        np.testing.assert_array_equal(found, exact(matrix[:2_000], keys[:2_000], q, K, allowed))


@needs_faiss
def test_pq_fewer_allowed_keys_than_k_and_short_masks(
    pq_index: PQFastScanIndex, pq_corpus: tuple[np.ndarray, ...]
) -> None:
    matrix, keys, queries = pq_corpus
    allowed = np.zeros(int(keys[-1]) + 1, dtype=bool)
    allowed[keys[[5, 500, 19_999]]] = True
    found, _ = pq_index.search(queries[0], K, allowed=allowed, vectors=gather(matrix))
    assert sorted(found.tolist()) == sorted(keys[[5, 500, 19_999]].tolist())
    found, _ = pq_index.search(queries[0], K, allowed=np.ones(100, dtype=bool), vectors=gather(matrix))
    assert len(found) == K and found.max() < 100


@needs_faiss
def test_pq_add_after_build_remove_and_add_again(pq_corpus: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    matrix, keys, queries = pq_corpus
    vectors = gather(matrix)
    idx = PQFastScanIndex.build(matrix[:15_000], keys[:15_000])
    idx.add(matrix[15_000:], keys[15_000:])  # encoded with the codebooks trained at build
    assert len(idx) == PQ_N and idx.max_key == int(keys[-1]) and idx.untrained_fraction == pytest.approx(0.25)
    for i in range(15_000, PQ_N, 250):
        found, scores = idx.search(matrix[i], 1, vectors=vectors)
        assert found[0] == keys[i] and scores[0] == pytest.approx(1.0, abs=1e-5)
    assert recall([idx.search(q, K, vectors=vectors)[0] for q in queries],
                  [exact(matrix, keys, q, K) for q in queries]) >= 0.95
    gone = keys[:PQ_N:2]
    assert idx.remove(np.append(gone, 10**7)) == len(gone)  # a key not in the index is ignored
    assert len(idx) == PQ_N // 2 and idx.dead_fraction == pytest.approx(0.5)  # tombstoned, not deleted
    for q in queries[:20]:
        found, _ = idx.search(q, K, vectors=vectors)
        assert len(found) == K and not np.isin(found, gone).any()
    # a row added after removals is found by the scan itself (faiss's own removal lost these)
    fresh = queries[0] / np.linalg.norm(queries[0])
    idx.add(fresh[None, :], np.array([10**7]))
    with_fresh = {**{int(k): matrix[i] for i, k in enumerate(keys)}, 10**7: fresh}
    assert idx.search(fresh, 1, vectors=lambda ks: np.array([with_fresh[int(k)] for k in ks]), candidate_k=5)[0][0] == 10**7
    # a key cannot be re-added (replaced or revived) in place
    with pytest.raises(InvalidParameterError, match="already in the index"):
        idx.add(matrix[1:2], keys[1:2])


@needs_faiss
def test_pq_save_and_load_round_trip(
    pq_index: PQFastScanIndex, pq_corpus: tuple[np.ndarray, np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    matrix, keys, queries = pq_corpus
    path = tmp_path / "vectors.pqfs"
    path.write_bytes(b"an older file")
    pq_index.save(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vectors.pqfs"]  # no temporary file left
    loaded = PQFastScanIndex.load(path)
    assert not loaded.memory_mapped
    assert len(loaded) == len(pq_index) and loaded.max_key == pq_index.max_key
    assert loaded.keys.tolist() == pq_index.keys.tolist()
    allowed = np.random.default_rng(5).random(int(keys[-1]) + 1) < 0.3
    for q in queries[:30]:
        for a in (None, allowed):
            f1, s1 = pq_index.search(q, K, allowed=a, vectors=gather(matrix))
            f2, s2 = loaded.search(q, K, allowed=a, vectors=gather(matrix))
            np.testing.assert_array_equal(f1, f2)
            np.testing.assert_array_equal(s1, s2)
    with pytest.raises(BackendUnavailableError):  # an HNSW file is not a fast-scan one
        HNSWIndex.build(unit_rows(3, 50), np.arange(50)).save(tmp_path / "g.hnsw")
        PQFastScanIndex.load(tmp_path / "g.hnsw")


@needs_faiss
def test_pq_concurrent_searches_agree_with_serial(
    pq_index: PQFastScanIndex, pq_corpus: tuple[np.ndarray, ...]
) -> None:
    matrix, keys, queries = pq_corpus
    vectors = gather(matrix)
    allowed = np.random.default_rng(6).random(int(keys[-1]) + 1) < 0.5

    def run() -> list[tuple[np.ndarray, np.ndarray]]:
        return [(pq_index.search(q, K, vectors=vectors)[0],
                 pq_index.search(q, K, allowed=allowed, vectors=vectors)[0]) for q in queries]

    serial = run()
    results: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(4)]
    barrier = threading.Barrier(4)

    def work(slot: int) -> None:
        barrier.wait()
        results[slot] = run()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got in results:
        assert len(got) == len(serial)
        for (a, b), (c, d) in zip(got, serial, strict=True):
            np.testing.assert_array_equal(a, c)
            np.testing.assert_array_equal(b, d)


@needs_faiss
def test_pq_empty_build_trains_on_first_add_and_bad_arguments(
    pq_index: PQFastScanIndex, tmp_path: Path
) -> None:
    idx = PQFastScanIndex.build(np.zeros((0, 8), dtype=np.float32), np.zeros(0, dtype=np.int64))
    assert len(idx) == 0 and idx.max_key == -1
    rows = unit_rows(4, 3, dim=8)
    assert len(idx.search(rows[0], K, vectors=lambda ks: rows[ks])[0]) == 0
    idx.add(rows, np.array([0, 1, 2]))  # fewer rows than the 16 centroids: repeated for training
    assert idx.search(rows[2], K, vectors=lambda ks: rows[ks])[0].tolist()[0] == 2
    q = unit_rows(2, 1)[0]
    with pytest.raises(InvalidParameterError):
        pq_index.search(q, K)  # vectors= is required
    with pytest.raises(InvalidParameterError):
        pq_index.search(q, K, vectors=lambda ks: np.zeros((len(ks), 3), dtype=np.float32))
    with pytest.raises(InvalidParameterError):
        PQFastScanIndex.build(unit_rows(3, 20), np.arange(20), sub_quantizers=5)  # 5 does not divide 64
    with pytest.raises(InvalidParameterError):
        PQFastScanIndex.build(unit_rows(3, 20), np.arange(20), exact_share=2.0)
    with pytest.raises(BackendUnavailableError):
        PQFastScanIndex.load(tmp_path / "missing.pqfs")
