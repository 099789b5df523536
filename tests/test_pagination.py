"""Pages of results (issue 18.1) and grouping (18.2) through every surface: the retrievers on SQLite (the
store contract runs vector, BM25, hybrid and grouped pages on every store), KnowledgeBase.search and
search_result, as_tool() and `fastrag search --offset/--group-by`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from fastrag.cli import main
from fastrag.errors import InvalidParameterError
from fastrag.knowledge_base import KnowledgeBase
from fastrag.models import Document
from fastrag.retrieval import (
    BM25Retriever,
    GroupingRetriever,
    HybridRetriever,
    PathFilterRetriever,
    ReciprocalRankFusion,
    RerankingRetriever,
    TenantScopedRetriever,
    VectorRetriever,
)
from fastrag.retrieval.pagination import retrieve_page
from fastrag.testing.fakes import HashingEmbedder
from fastrag.vector_store.sqlite import SQLiteVectorStore

# 30 chunks of 10 files; many share their text, so scores tie and only the id orders them
CHUNKS = [
    Document(id=f"f{i // 3:02}#{i % 3}", content=f"solar panel maintenance note {'extra words ' * (i % 4)}",
             metadata={"parent_id": f"f{i // 3:02}", "source_uri": f"notes/f{i // 3:02}.md", "tenant": i % 2})
    for i in range(30)
]


@pytest.fixture
async def store(tmp_path: Path):
    embedder = HashingEmbedder()
    async with SQLiteVectorStore(tmp_path / "p.db") as store:
        await store.upsert(CHUNKS, embeddings=await embedder.embed_documents([d.content for d in CHUNKS]))
        yield store


class ScoreReranker:
    """Keeps the first stage's order, scoring by the reciprocal of its position (a checkable reranker)."""

    async def rerank(self, query: str, documents: Sequence[Document], *, k: int | None = None) -> list[Document]:
        return [d.ranked(score=1 / (1 + n), rank=n) for n, d in enumerate(documents[:k])]


class NoOffsetRetriever:
    """A third-party retriever whose retrieve() takes no offset."""

    def __init__(self, inner: BM25Retriever) -> None:
        self.inner = inner

    async def retrieve(self, query: str, *, k: int = 10, filter=None) -> list[Document]:  # noqa: A002, ANN001
        return await self.inner.retrieve(query, k=k, filter=filter)


def retrievers(store: SQLiteVectorStore) -> list:
    bm25 = BM25Retriever(store=store)
    vector = VectorRetriever(vector_store=store, embedder=HashingEmbedder())
    hybrid = HybridRetriever([vector, bm25], candidate_k=40)
    return [
        bm25, vector, hybrid,
        RerankingRetriever(retriever=hybrid, reranker=ScoreReranker(), candidate_k=40),
        PathFilterRetriever(bm25, exclude_glob="notes/f0[0-2].md"),
        TenantScopedRetriever(bm25, tenant=1, tenant_key="tenant"),
        GroupingRetriever(bm25, group_by="source_uri"),
        GroupingRetriever(hybrid, group_by="parent_id", score="sum"),
    ]  # fmt: skip


@pytest.mark.anyio
async def test_consecutive_pages_of_every_retriever_join_into_the_top(store) -> None:
    size = 3
    for retriever in retrievers(store):
        top = await retriever.retrieve("solar maintenance", k=2 * size)
        assert len(top) == 2 * size, retriever
        first = await retriever.retrieve("solar maintenance", k=size)
        second = await retriever.retrieve("solar maintenance", k=size, offset=size)
        assert [d.id for d in first + second] == [d.id for d in top], retriever
        assert [d.rank for d in first + second] == list(range(2 * size)), retriever
        assert [d.score for d in first + second] == [d.score for d in top], retriever
        result = await retriever.retrieve_result("solar maintenance", k=size, offset=size)
        assert [d.id for d in result.documents] == [d.id for d in second], retriever


@pytest.mark.anyio
async def test_a_retriever_without_offset_is_paged_by_slicing(store) -> None:
    plain = NoOffsetRetriever(BM25Retriever(store=store))
    top = await plain.retrieve("solar", k=8)
    assert [d.id for d in await retrieve_page(plain, "solar", k=4, offset=4)] == [d.id for d in top[4:]]


@pytest.mark.anyio
async def test_offsets_are_checked_before_any_search(store) -> None:
    bm25 = BM25Retriever(store=store)
    for offset in (-1, True, 1.5, "2"):
        with pytest.raises(InvalidParameterError, match="offset"):
            await bm25.retrieve("solar", k=3, offset=offset)
    with pytest.raises(InvalidParameterError, match="max_k=10000"):
        await bm25.retrieve("solar", k=10, offset=9_995)
    assert await bm25.retrieve("solar", k=5, offset=100) == []  # past the end: an empty page


# ------------------------------------------------------------------------------ knowledge base, tool


@pytest.fixture
async def kb():
    async with KnowledgeBase("sqlite:///:memory:", embedder=HashingEmbedder()) as kb:
        await kb.add_documents(CHUNKS)
        yield kb


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["keyword", "vector", "hybrid"])
async def test_knowledge_base_pages_and_groups(kb, mode: str) -> None:
    top = await kb.search("solar maintenance", search_mode=mode, top_k=8)
    first = await kb.search("solar maintenance", search_mode=mode, top_k=4)
    second = await kb.search("solar maintenance", search_mode=mode, top_k=4, offset=4)
    assert [d.id for d in first + second] == [d.id for d in top]
    assert [d.rank for d in second] == [4, 5, 6, 7]
    response = await kb.search_result("solar maintenance", search_mode=mode, top_k=4, offset=4)
    assert [d.id for d in response.documents] == [d.id for d in second]

    grouped = await kb.search("solar maintenance", search_mode=mode, top_k=10, group_by="source_uri")
    uris = [d.metadata["source_uri"] for d in grouped]
    assert len(uris) == len(set(uris)) == 10
    assert all(len(d.group_chunks) == 2 for d in grouped)  # each file's other two chunks
    page = await kb.search("solar maintenance", search_mode=mode, top_k=5, offset=5, group_by="source_uri")
    assert [d.id for d in page] == [d.id for d in grouped[5:]]
    response = await kb.search_result("solar maintenance", search_mode=mode, top_k=5, group_by="source_uri")
    assert response.strategy.endswith("+group") and response.settings.origin("group_by") == "request"


@pytest.mark.anyio
async def test_tool_pages_with_offset_and_groups_with_more(kb) -> None:
    tool = kb.as_tool()
    schema = tool.parameters
    assert schema["properties"]["offset"]["minimum"] == 0
    for arguments in ({"query": "solar", "top_k": 3, "offset": 3}, {"query": "solar", "offset": None}):
        jsonschema.Draft202012Validator(schema).validate(arguments)
    top = await tool({"query": "solar maintenance", "top_k": 6})
    second = await tool(json.dumps({"query": "solar maintenance", "top_k": 3, "offset": 3}))
    assert [r["id"] for r in second] == [r["id"] for r in top[3:]] and [r["rank"] for r in second] == [3, 4, 5]
    for bad in ({"query": "x", "offset": -1}, {"query": "x", "offset": "3"}, {"query": "x", "offset": True}):
        assert not jsonschema.Draft202012Validator(schema).is_valid(bad)
        with pytest.raises(InvalidParameterError):
            await tool(bad)
    grouped = await kb.as_tool(group_by="source_uri")({"query": "solar maintenance", "top_k": 4})
    assert len({r["source_uri"] for r in grouped}) == 4
    assert all(len(r["more"]) == 2 and set(r["more"][0]) == {"id", "content", "headings", "score"} for r in grouped)


# ----------------------------------------------------------------------------------------------- CLI


def test_cli_search_offset_and_group_by(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for n in range(6):
        paragraphs = "\n\n".join(f"Kestrel field note {n}.{p}: " + "hovering hunting " * 30 for p in range(3))
        (tmp_path / f"kestrel{n}.md").write_text(f"# Kestrel {n}\n\n{paragraphs}\n")
    monkeypatch.chdir(tmp_path)
    env = {"FASTRAG_STORE": None, "FASTRAG_MODE": None, "FASTRAG_CONFIG": None, "FASTRAG_LEXICAL_STORE": None}
    runner = CliRunner()

    def search(*args: str) -> list[dict]:
        result = runner.invoke(main, ["search", "kestrel hovering", "--mode", "keyword", "--json", *args], env=env,
                               catch_exceptions=False)
        assert result.exit_code == 0, result.stderr
        return json.loads(result.stdout)["documents"]

    indexed = runner.invoke(main, ["index", ".", "--chunk-size", "300"], env=env, catch_exceptions=False)
    assert indexed.exit_code == 0, indexed.stderr
    top = search("--top-k", "8")
    pages = search("--top-k", "4") + search("--top-k", "4", "--offset", "4")
    assert [d["id"] for d in pages] == [d["id"] for d in top]
    grouped = search("--top-k", "6", "--group-by", "source_uri")
    assert sorted(d["metadata"]["source_uri"] for d in grouped) == [f"kestrel{n}.md" for n in range(6)]
    assert all(d["metadata"]["grouping"]["chunks"] for d in grouped)
    text = runner.invoke(main, ["search", "kestrel hovering", "--mode", "keyword", "--group-by", "source_uri",
                                "--top-k", "2", "--offset", "2"], env=env, catch_exceptions=False)
    assert text.stdout.startswith(" 3. ") and "more matching chunks" in text.stdout
    past = runner.invoke(main, ["search", "kestrel", "--mode", "keyword", "--offset", "500"], env=env,
                         catch_exceptions=False)
    assert past.exit_code == 0 and "No documents past the first 500." in past.stdout


@pytest.mark.anyio
async def test_hybrid_pages_past_candidate_k_still_join_into_the_top(store) -> None:
    """fastrag's fusions score each branch over its first candidate_k (issue 13.12), so pages deeper than
    candidate_k are consistent too."""
    bm25 = BM25Retriever(store=store)
    vector = VectorRetriever(vector_store=store, embedder=HashingEmbedder())
    for hybrid in (HybridRetriever([vector, bm25], candidate_k=3),
                   HybridRetriever([vector, bm25], candidate_k=3, fusion=ReciprocalRankFusion())):
        top = await hybrid.retrieve("solar maintenance", k=12)
        pages = [await hybrid.retrieve("solar maintenance", k=3, offset=n * 3) for n in range(4)]
        assert [d.id for page in pages for d in page] == [d.id for d in top]
        assert [d.score for page in pages for d in page] == [d.score for d in top]
