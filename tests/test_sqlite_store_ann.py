"""The SQLite store with an approximate index (``vector_index="hnsw"``): the whole store contract, recall
against the exact store, deletes and filters, and the saved index reused by the next process."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from fastrag import Document, field
from fastrag.errors import InvalidParameterError
from fastrag.testing.store_contract import StoreContract
from fastrag.vector_store.sqlite import SQLiteVectorStore

pytest.importorskip("faiss", reason="the HNSW index needs faiss (pip install 'fastrag-retrieval[ann]')")


class TestSQLiteHNSWStore(StoreContract):
    @pytest.fixture
    def store_factory(self, tmp_path):
        return lambda: SQLiteVectorStore(tmp_path / "contract.db", vector_index="hnsw")


class TestSQLitePQStore(StoreContract):
    @pytest.fixture
    def store_factory(self, tmp_path):
        return lambda: SQLiteVectorStore(tmp_path / "contract.db", vector_index="pq")


KINDS = pytest.mark.parametrize("kind", ["hnsw", "pq"])


def corpus(n: int = 3000, dim: int = 32) -> tuple[list[Document], np.ndarray]:
    rng = np.random.default_rng(0)
    docs = [Document(id=f"d{i:04d}", content=f"word{i % 7}", metadata={"c": i % 10}) for i in range(n)]
    return docs, rng.standard_normal((n, dim)).astype(np.float32)


@KINDS
@pytest.mark.anyio
async def test_approximate_results_agree_with_exact_and_never_return_deleted_or_filtered_rows(tmp_path: Path, kind: str) -> None:
    docs, vectors = corpus()
    queries = np.random.default_rng(1).standard_normal((30, 32)).astype(np.float32)
    async with SQLiteVectorStore(tmp_path / "a.db", vector_index=kind) as ann, SQLiteVectorStore(tmp_path / "a.db") as exact:
        await ann.upsert(docs, embeddings=vectors)
        recall = [
            len({d.id for d in await ann.search_vector(q, k=10)} & {d.id for d in await exact.search_vector(q, k=10)}) / 10
            for q in queries
        ]
        assert np.mean(recall) >= 0.95
        await ann.delete(ids=[f"d{i:04d}" for i in range(0, 3000, 3)])
        for q in queries[:10]:
            hits = await ann.search_vector(q, k=10)
            assert len(hits) == 10 and all(int(d.id[1:]) % 3 for d in hits)
            filtered = await ann.search_vector(q, k=10, filter=field("c") == 4)
            assert len(filtered) == 10 and all(d.metadata["c"] == 4 and int(d.id[1:]) % 3 for d in filtered)
        await ann.upsert([Document(id="new", content="x")], embeddings=queries[:1] * 3)
        assert (await ann.search_vector(queries[0], k=1))[0].id == "new"  # written after the build: found


@KINDS
@pytest.mark.anyio
async def test_the_index_is_saved_beside_the_store_and_reopened_not_rebuilt(tmp_path: Path, monkeypatch, kind: str) -> None:
    docs, vectors = corpus(800)
    async with SQLiteVectorStore(tmp_path / "s.db", vector_index=kind) as store:
        await store.upsert(docs, embeddings=vectors)
        first = [d.id for d in await store.search_vector(vectors[5], k=5)]
    saved = [p for p in os.listdir(tmp_path) if p.endswith(f".{kind}")]
    assert len(saved) == 1 and saved[0].startswith("s.db-")
    from fastrag.vector_store.sqlite import ann

    def no_build(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("the saved index should have been opened")

    monkeypatch.setattr(ann.HNSWIndex if kind == "hnsw" else ann.PQFastScanIndex, "build", no_build)
    async with SQLiteVectorStore(tmp_path / "s.db", vector_index=kind) as store:
        assert [d.id for d in await store.search_vector(vectors[5], k=5)] == first
    # a new store at the same path never opens the old store's index (another store id)
    os.remove(tmp_path / "s.db")
    monkeypatch.undo()
    async with SQLiteVectorStore(tmp_path / "s.db", vector_index=kind) as store:
        await store.upsert(docs[:10], embeddings=vectors[:10] * -1)
        assert {d.id for d in await store.search_vector(vectors[5], k=20)} <= {d.id for d in docs[:10]}


def test_vector_index_and_ef_search_are_checked(tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match="vector_index"):
        SQLiteVectorStore(tmp_path / "x.db", vector_index="ivf")
    with pytest.raises(InvalidParameterError, match="ef_search"):
        SQLiteVectorStore(tmp_path / "x.db", vector_index="hnsw", ef_search=0)


@KINDS
@pytest.mark.anyio
async def test_build_vector_index_builds_and_saves_before_any_search(tmp_path: Path, kind: str, monkeypatch) -> None:
    docs, vectors = corpus(600)
    async with SQLiteVectorStore(tmp_path / "b.db", vector_index=kind) as store:
        await store.upsert(docs, embeddings=vectors)
        assert await store.build_vector_index() == 600
        assert any(p.endswith(f".{kind}") for p in os.listdir(tmp_path))
        from fastrag.vector_store.sqlite import ann

        def no_build(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            raise AssertionError("the search should use the index built ahead")

        monkeypatch.setattr(ann.HNSWIndex if kind == "hnsw" else ann.PQFastScanIndex, "build", no_build)
        assert len(await store.search_vector(vectors[0], k=5)) == 5
    async with SQLiteVectorStore(tmp_path / "e.db") as exact:
        assert await exact.build_vector_index() == 0


@pytest.mark.anyio
async def test_a_store_recreated_at_a_path_removes_the_old_stores_index_files(tmp_path: Path) -> None:
    docs, vectors = corpus(300)
    async with SQLiteVectorStore(tmp_path / "r.db", vector_index="hnsw") as store:
        await store.upsert(docs, embeddings=vectors)
        await store.build_vector_index()
    neighbour = tmp_path / ("r.db-x.db-" + "0" * 32 + ".hnsw")  # another store's index, whose name starts alike
    neighbour.write_bytes(b"not ours")
    old = [p for p in os.listdir(tmp_path) if p.endswith(".hnsw") and not p.startswith("r.db-x")]
    assert len(old) == 1
    os.remove(tmp_path / "r.db")
    async with SQLiteVectorStore(tmp_path / "r.db", vector_index="hnsw"):
        pass
    assert not (tmp_path / old[0]).exists() and neighbour.exists()


def test_ef_search_applies_to_hnsw_only(tmp_path: Path) -> None:
    for kind in ("exact", "pq"):
        with pytest.raises(InvalidParameterError, match="ef_search applies"):
            SQLiteVectorStore(tmp_path / f"{kind}.db", vector_index=kind, ef_search=64)
