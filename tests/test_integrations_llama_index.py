"""fastrag.integrations.llama_index (issue 27.2): a LlamaIndex ``BaseRetriever`` with ``_aretrieve`` returning
``NodeWithScore``, over a real SQLite knowledge base, end to end inside a ``RetrieverQueryEngine`` with a mock
LLM."""

from __future__ import annotations

import threading
from typing import Any

import pytest

pytest.importorskip("llama_index.core", reason='the llama-index extra is not installed (pip install "fastrag-retrieval[llama-index]")')
from integration_corpus import QUESTION, build
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import (
    MetadataMode,
    NodeRelationship,
    NodeWithScore,
    TextNode,
)
from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters

from fastrag import Document, KnowledgeBase
from fastrag.errors import ConfigurationError, FilterError, InvalidParameterError
from fastrag.integrations.llama_index import LlamaIndexRetriever

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build(tmp_path_factory.mktemp("llama-index"))


def _hits(nodes: list[NodeWithScore]) -> list[tuple[str, int, float]]:
    return [(n.node.node_id, n.node.metadata["rank"], n.score) for n in nodes]


async def test_a_query_engine_with_a_mock_llm_answers_from_the_knowledge_bases_results(store: str) -> None:
    async with KnowledgeBase(store) as kb:
        reference = (await kb.search_result(QUESTION, top_k=3)).documents
        engine = RetrieverQueryEngine.from_args(LlamaIndexRetriever(kb, similarity_top_k=3), llm=MockLLM())
        response = await engine.aquery(QUESTION)
        sync_response = engine.query(QUESTION)  # the sync path, from inside this running loop
    expected = [(d.id, d.rank, d.score) for d in reference]
    assert expected and _hits(response.source_nodes) == expected == _hits(sync_response.source_nodes)
    assert all(isinstance(n, NodeWithScore) and isinstance(n.node, TextNode) for n in response.source_nodes)
    # MockLLM answers with the prompt it was given: the retrieved passages and their sources reached the LLM,
    # fastrag's ranking stamps did not
    answer = str(response)
    for doc in reference:
        assert doc.content in answer and f"source_uri: {doc.metadata['source_uri']}" in answer
    assert "branches:" not in answer and "rank:" not in answer and "score:" not in answer


async def test_nodes_carry_score_rank_branches_and_source_and_the_parent_as_source_relationship() -> None:
    class OneChunk:
        async def retrieve(self, query: str, *, k: int = 10, filter: Any = None) -> list[Document]:
            doc = Document(id="guide.md#2", content="Chunk text.",
                           metadata={"source_uri": "guide.md", "parent_id": "guide.md", "chunk_index": 2,
                                     "branches": {"bm25": {"score": 3.5, "rank": 0}}})  # fmt: skip
            return [doc.ranked(score=0.75, rank=0)]

    (hit,) = await LlamaIndexRetriever(OneChunk()).aretrieve("q")
    node = hit.node
    assert (node.node_id, hit.score, node.text) == ("guide.md#2", 0.75, "Chunk text.")
    assert node.metadata["rank"] == 0 and node.metadata["branches"] == {"bm25": {"score": 3.5, "rank": 0}}
    assert node.relationships[NodeRelationship.SOURCE].node_id == "guide.md" and node.ref_doc_id == "guide.md"
    shown = node.get_content(metadata_mode=MetadataMode.LLM)
    assert "source_uri: guide.md" in shown and "chunk_index" not in shown and "0.75" not in shown


async def test_similarity_top_k_and_filters_in_fastrags_json_form(store: str) -> None:
    english = {"equals": {"key": "lang", "value": "en"}}
    async with KnowledgeBase(store) as kb:
        nodes = await LlamaIndexRetriever(kb, similarity_top_k=4, filter=english).aretrieve(QUESTION)
        expected = await kb.search(QUESTION, top_k=4, filter=english)
        assert _hits(nodes) == [(d.id, d.rank, d.score) for d in expected]
        assert {n.node.metadata["lang"] for n in nodes} == {"en"}
        # no similarity_top_k: the knowledge base's resolved top_k
        assert len(await LlamaIndexRetriever(kb.as_retriever(top_k=2)).aretrieve(QUESTION)) == 2
        with pytest.raises(InvalidParameterError, match="similarity_top_k"):
            LlamaIndexRetriever(kb, similarity_top_k=0)
        with pytest.raises(FilterError):
            LlamaIndexRetriever(kb, filter={"equals": {"key": "lang"}})
        with pytest.raises(FilterError, match="LlamaIndex's filter type"):  # refused, never silently dropped
            LlamaIndexRetriever(kb, filter=MetadataFilters(filters=[MetadataFilter(key="lang", value="en")]))
        with pytest.raises(ConfigurationError):
            LlamaIndexRetriever("sqlite:///kb.db")


async def test_aretrieve_is_async_natively_and_retrieve_runs_on_the_bridge() -> None:
    threads: list[int] = []

    class Recording:
        async def retrieve(self, query: str, *, k: int = 10, filter: Any = None) -> list[Document]:
            threads.append(threading.get_ident())
            return [Document(id="a", content=query).ranked(score=1.0, rank=0)]

    retriever = LlamaIndexRetriever(Recording())
    await retriever.aretrieve("q")
    assert threads == [threading.get_ident()]
    assert [n.node.node_id for n in retriever.retrieve("q")] == ["a"]
    assert threads[1] != threading.get_ident()


def test_retrieve_outside_an_event_loop(store: str) -> None:
    from fastrag.integrations.bridge import run_sync

    kb = KnowledgeBase(store)
    try:
        nodes = LlamaIndexRetriever(kb, similarity_top_k=2).retrieve(QUESTION)
    finally:
        run_sync(kb.aclose)
    assert len(nodes) == 2 and nodes[0].score >= nodes[1].score
