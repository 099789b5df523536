"""One hit per document (issue 18.2) on the SQLite store: GroupingRetriever (best chunk by default, or the
sum), a fusion that counts a group once per branch list, and metadata from the best-ranked chunk. The store
contract (fastrag.testing.store_contract) runs grouping on every store; KnowledgeBase, as_tool() and the
CLI are tested in test_pagination_grouping_surfaces.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastrag.errors import InvalidParameterError
from fastrag.models import Document
from fastrag.retrieval import BM25Retriever, GroupingRetriever, ReciprocalRankFusion, WeightedScoreFusion
from fastrag.retrieval.grouping import group_documents
from fastrag.testing.fakes import HashingEmbedder
from fastrag.vector_store.sqlite import SQLiteVectorStore

# "long" has four chunks that each mention the topic once, "short" one chunk that says it three times
CHUNKS = [
    *(Document(id=f"long#{i}", content=f"a zeppelin passage number {i} with filler words about other things",
               metadata={"parent_id": "long", "source_uri": "long.md", "chunk_index": i}) for i in range(4)),
    Document(id="short#0", content="zeppelin zeppelin zeppelin", metadata={"parent_id": "short", "source_uri": "short.md",
                                                                             "chunk_index": 0}),
    Document(id="other#0", content="nothing to see", metadata={"parent_id": "other", "source_uri": "other.md"}),
]


@pytest.fixture
async def store(tmp_path: Path):
    embedder = HashingEmbedder()
    async with SQLiteVectorStore(tmp_path / "g.db") as store:
        await store.upsert(CHUNKS, embeddings=await embedder.embed_documents([d.content for d in CHUNKS]))
        yield store


@pytest.mark.anyio
async def test_best_chunk_credits_the_group_and_sum_rewards_many_matches(store) -> None:
    bm25 = BM25Retriever(store=store)
    chunks = await bm25.retrieve("zeppelin", k=10)
    assert chunks[0].id == "short#0" and len(chunks) == 5
    best = await GroupingRetriever(bm25, group_by="parent_id").retrieve("zeppelin", k=5)
    assert [d.metadata["parent_id"] for d in best] == ["short", "long"]
    assert best[0].score == chunks[0].score  # credited with its best chunk
    long_chunks = [c for c in chunks if c.metadata["parent_id"] == "long"]
    assert best[1].id == long_chunks[0].id and best[1].score == long_chunks[0].score
    assert [c.id for c in best[1].group_chunks] == [c.id for c in long_chunks[1:]]  # the others, best first
    assert [c.score for c in best[1].group_chunks] == [c.score for c in long_chunks[1:]]
    assert best[1].metadata["chunk_index"] == long_chunks[0].metadata["chunk_index"]  # the best chunk's metadata

    summed = await GroupingRetriever(bm25, group_by="parent_id", score="sum").retrieve("zeppelin", k=5)
    assert [d.metadata["parent_id"] for d in summed] == ["long", "short"]
    assert summed[0].score == pytest.approx(sum(c.score for c in long_chunks))


@pytest.mark.anyio
async def test_k_groups_come_back_although_chunks_of_one_document_crowd_the_candidates(store) -> None:
    bm25 = BM25Retriever(store=store)
    # 1 candidate at first: one group; it asks again for more until it has 2 groups
    grouped = await GroupingRetriever(bm25, group_by="source_uri", candidate_k=1).retrieve("zeppelin passage", k=2)
    assert [d.metadata["source_uri"] for d in grouped] == ["long.md", "short.md"]
    assert len(grouped[0].group_chunks) == 3


def test_rrf_counts_a_group_once_per_branch_list() -> None:
    def ranked(*ids: str) -> list[Document]:
        return [Document(id=i, content=i, metadata={"parent_id": i[0]}).ranked(score=1.0 - n / 10, rank=n)
                for n, i in enumerate(ids)]

    results = {"bm25": ranked("a1", "a2", "a3", "b1"), "vector": ranked("b1", "a2")}
    plain = ReciprocalRankFusion().fuse(results)
    assert [d.id for d in plain][:2] == ["a2", "b1"]  # a's chunks earn credit separately
    fused = ReciprocalRankFusion(group_by="parent_id").fuse(results)
    assert [d.id for d in fused] == ["a1", "b1"]
    # group a: first in bm25 (1/61) and second in vector, among groups (1/62); b: second, then first
    assert fused[0].score == pytest.approx(1 / 61 + 1 / 62) and fused[1].score == pytest.approx(1 / 62 + 1 / 61)
    assert [c.id for c in fused[0].group_chunks] == ["a2", "a3"]  # the other chunks any branch found
    assert fused[0].branches["vector"].rank == 1 and fused[0].metadata["grouping"]["value"] == "a"
    weighted = WeightedScoreFusion(group_by="parent_id").fuse(results)
    assert sorted(d.metadata["parent_id"] for d in weighted) == ["a", "b"]


def test_invalid_grouping_arguments_raise() -> None:
    with pytest.raises(InvalidParameterError):
        ReciprocalRankFusion(group_by="")
    with pytest.raises(InvalidParameterError):
        group_documents([], by="parent_id", score="mean")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError):
        GroupingRetriever(object(), group_by="parent_id")  # type: ignore[arg-type]


def test_documents_without_the_key_are_groups_of_their_own() -> None:
    docs = [Document(id=i, content=i).ranked(score=1.0, rank=n) for n, i in enumerate(["x", "y"])]
    grouped = group_documents(docs, by="parent_id")
    assert [d.id for d in grouped] == ["x", "y"] and grouped[0].metadata["grouping"]["value"] is None
