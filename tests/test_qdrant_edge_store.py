"""The Qdrant store over Qdrant's own engine in process (``edge_path=``, Qdrant Edge via ``qdrant-edge-py``): the
shared store contract, and what the prototype mode adds (its URL, its folder layout, server-side hybrid)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("qdrant_client", reason="qdrant-client is not installed (fastrag-retrieval[qdrant])")
pytest.importorskip("qdrant_edge", reason="qdrant-edge-py (Qdrant's engine in process) has no wheel for this platform")

from fastrag.errors import BackendUnavailableError, ConfigurationError
from fastrag.retrieval import (
    BM25Retriever,
    HybridRetriever,
    ReciprocalRankFusion,
    VectorRetriever,
)
from fastrag.testing.fakes import HashingEmbedder
from fastrag.testing.filter_cases import FILTER_CORPUS
from fastrag.testing.store_contract import StoreContract, corpus_embeddings
from fastrag.vector_store.qdrant import QdrantHybridRetriever, QdrantVectorStore
from fastrag.vector_store.qdrant.connection import parse_store_url


class TestQdrantEdgeStore(StoreContract):
    @pytest.fixture
    def store_factory(self, tmp_path):
        return lambda: QdrantVectorStore(edge_path=tmp_path / "edge", collection="contract", enable_bm25=True)


def test_the_edge_url_names_an_edge_folder() -> None:
    assert parse_store_url("qdrant+edge:///data/q?collection=notes&bm25=true") == {
        "edge_path": "data/q", "collection": "notes", "enable_bm25": True,
    }
    assert parse_store_url("qdrant+edge:////srv/q")["edge_path"] == "/srv/q"
    with pytest.raises(ConfigurationError):
        parse_store_url("qdrant+edge://")
    with pytest.raises(ConfigurationError):
        QdrantVectorStore(edge_path="x", location=":memory:")


@pytest.mark.anyio
async def test_an_edge_store_is_a_qdrant_shard_with_its_settings_beside_it(tmp_path) -> None:
    url = f"qdrant+edge:///{tmp_path}/q?collection=notes&bm25=true"
    async with QdrantVectorStore.from_url(url, embedding_model="hash-8") as store:
        await store.upsert(FILTER_CORPUS, embeddings=corpus_embeddings(list(FILTER_CORPUS)))
    folder = tmp_path / "q" / "notes"
    assert (folder / "shard").is_dir() and (folder / "collection.json").is_file()
    import qdrant_edge

    shard = qdrant_edge.EdgeShard.load(str(folder / "shard"))  # a plain Qdrant Edge shard, readable without us
    try:
        assert shard.info().points_count == len(FILTER_CORPUS)
        assert "_bm25" in shard.info().payload_schema
    finally:
        shard.close()
    # the recorded settings are checked when the store opens again
    with pytest.raises(ConfigurationError, match="embedding_model"):
        async with QdrantVectorStore.from_url(url, embedding_model="another-model"):
            pass
    with pytest.raises(ConfigurationError, match="dimension"):
        async with QdrantVectorStore.from_url(url, dimension=3):
            pass


@pytest.mark.anyio
async def test_a_second_store_on_an_open_shard_is_refused(tmp_path) -> None:
    async with QdrantVectorStore(edge_path=tmp_path, collection="c", dimension=8) as store:
        await store.upsert(FILTER_CORPUS[:2], embeddings=corpus_embeddings(list(FILTER_CORPUS[:2])))
        with pytest.raises(BackendUnavailableError):
            async with QdrantVectorStore(edge_path=tmp_path, collection="c"):
                pass


@pytest.mark.anyio
async def test_bm25_and_knn_scores_equal_local_mode(tmp_path) -> None:
    """Qdrant's engine and qdrant-client's re-implementation give the same BM25 and cosine scores."""
    vectors = corpus_embeddings(list(FILTER_CORPUS))
    query = np.ones(8, dtype=np.float32)
    results = []
    for kwargs in ({"edge_path": tmp_path / "e"}, {"location": ":memory:"}):
        async with QdrantVectorStore(collection="c", enable_bm25=True, **kwargs) as store:
            await store.upsert(FILTER_CORPUS, embeddings=vectors)
            text = await store.search_text("python machine learning physics", k=12)
            knn = await store.search_vector(query, k=12)
            results.append(([(d.id, d.score) for d in text], [(d.id, d.score) for d in knn]))
    (edge_text, edge_knn), (local_text, local_knn) = results
    assert edge_text and [i for i, _ in edge_text] == [i for i, _ in local_text]
    assert [s for _, s in edge_text] == pytest.approx([s for _, s in local_text], rel=1e-5)
    assert [i for i, _ in edge_knn] == [i for i, _ in local_knn]
    assert [s for _, s in edge_knn] == pytest.approx([s for _, s in local_knn], abs=1e-5)


@pytest.fixture
async def edge_hybrid_store(tmp_path):
    embedder = HashingEmbedder(16)
    async with QdrantVectorStore(edge_path=tmp_path, collection="h", enable_bm25=True) as store:
        await store.upsert(FILTER_CORPUS, embeddings=await embedder.embed_documents([d.content for d in FILTER_CORPUS]))
        yield store, embedder


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("query", "filter_json"),
    [
        ("machine learning python", None),
        ("physics in Tokyo", {"equals": {"key": "category", "value": "science"}}),
        ("rust python tokyo", {"notAll": [{"listContains": {"key": "tags", "value": "ai"}}]}),
    ],
)
async def test_engine_rrf_equals_the_client_side_hybrid(edge_hybrid_store, query, filter_json) -> None:
    store, embedder = edge_hybrid_store
    server = QdrantHybridRetriever(store=store, embedder=embedder, candidate_k=3)
    client = HybridRetriever(
        [VectorRetriever(vector_store=store, embedder=embedder), BM25Retriever(store=store)],
        fusion=ReciprocalRankFusion(60), candidate_k=3,
    )
    got = await server.retrieve(query, k=3, filter=filter_json)
    want = await client.retrieve(query, k=3, filter=filter_json)
    assert got and [d.id for d in got] == [d.id for d in want]
    assert [d.score for d in got] == pytest.approx([d.score for d in want], rel=1e-6)


@pytest.mark.anyio
async def test_engine_dbsf_applies_the_filter_to_every_leg(edge_hybrid_store) -> None:
    store, embedder = edge_hybrid_store
    retriever = QdrantHybridRetriever(store=store, embedder=embedder, fusion="dbsf",
                                      filter={"notEquals": {"key": "city", "value": "Москва"}})
    hits = await retriever.retrieve("machine learning Moscow", k=12)
    assert hits and not {"d03", "d12"} & {d.id for d in hits}
    assert [d.score for d in hits] == sorted((d.score for d in hits), reverse=True)


@pytest.mark.anyio
async def test_open_store_takes_the_edge_url(tmp_path) -> None:
    from fastrag.config import open_store

    missing = tmp_path / "typo"
    with pytest.raises(BackendUnavailableError):
        async with open_store(f"qdrant+edge:///{missing}?collection=c", create=False):
            pass
    assert not missing.exists()  # a read of a mistyped path leaves nothing behind
    async with open_store(f"qdrant+edge:///{tmp_path}/q?collection=c&bm25=true", dimension=8) as store:
        await store.upsert(FILTER_CORPUS, embeddings=corpus_embeddings(list(FILTER_CORPUS)))
        assert await store.count(filter={"equals": {"key": "published", "value": True}}) == 5
