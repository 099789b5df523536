"""fastrag.integrations.langchain (issue 27.1): a LangChain ``BaseRetriever`` over a real SQLite knowledge base
or any fastrag retriever; langchain-tests' standard retriever tests; async natively, sync through the bridge
inside and outside a running loop; ``k`` in the constructor and per call; score, rank, branches and source in
metadata; fastrag's JSON filters."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_core", reason='the langchain extra is not installed (pip install "fastrag-retrieval[langchain]")')
from integration_corpus import QUESTION, build
from langchain_core.documents import Document as LangChainDocument
from langchain_tests.integration_tests import RetrieversIntegrationTests

from fastrag import Document, KnowledgeBase
from fastrag.errors import ConfigurationError, FilterError, InvalidParameterError
from fastrag.integrations.bridge import run_sync
from fastrag.integrations.langchain import LangChainRetriever

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build(tmp_path_factory.mktemp("langchain"))


# ------------------------------------------------------------------------- langchain-tests' standard tests

_STANDARD: dict[str, Any] = {}


@pytest.fixture(scope="module")
def standard_kb(store: str) -> Any:
    """One knowledge base for the standard tests, opened on the bridge's loop (as a sync user's first call
    would) and closed after them."""
    kb = KnowledgeBase(store)
    run_sync(kb.open)
    _STANDARD["kb"] = kb
    yield kb
    run_sync(kb.aclose)
    _STANDARD.clear()


@pytest.mark.usefixtures("standard_kb")
class TestLangChainStandardRetrieverTests(RetrieversIntegrationTests):
    """langchain-tests 1.1's ``RetrieversIntegrationTests``, unchanged: ``k`` in the constructor and in
    ``invoke``, ``invoke`` and ``ainvoke`` returning LangChain ``Document``\\ s."""

    @property
    def retriever_constructor(self) -> type[LangChainRetriever]:
        return LangChainRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"retriever": _STANDARD["kb"]}

    @property
    def retriever_query_example(self) -> str:
        return QUESTION


# ----------------------------------------------------------------------------------------- behaviour


def _hits(docs: list[LangChainDocument]) -> list[tuple[str, int, float]]:
    return [(d.id, d.metadata["rank"], d.metadata["score"]) for d in docs]


async def test_results_are_the_knowledge_bases_with_score_rank_branches_and_source(store: str) -> None:
    async with KnowledgeBase(store) as kb:
        reference = (await kb.search_result(QUESTION, top_k=5)).documents
        docs = await LangChainRetriever(retriever=kb, k=5).ainvoke(QUESTION)
    assert reference and _hits(docs) == [(d.id, d.rank, d.score) for d in reference]
    first = docs[0]
    assert isinstance(first, LangChainDocument) and first.page_content == reference[0].content
    assert set(first.metadata["branches"]) == {"vector", "bm25"}  # a hybrid search: both branches' provenance
    assert first.metadata["source"] == first.metadata["source_uri"] == f"docs/{first.id}.md"
    assert first.metadata["title"] and first.metadata["lang"]  # the document's own metadata too
    json.dumps([d.metadata for d in docs])  # plain data (no read-only mapping views)


async def test_k_in_the_constructor_per_call_and_the_knowledge_bases_top_k_by_default(store: str) -> None:
    async with KnowledgeBase(store) as kb:
        assert len(await LangChainRetriever(retriever=kb, k=2).ainvoke(QUESTION)) == 2
        assert len(await LangChainRetriever(retriever=kb, k=2).ainvoke(QUESTION, k=5)) == 5
        # no k: the knowledge base's resolved top_k (as_retriever's setting), not Retriever.retrieve's default 10
        assert len(await LangChainRetriever(retriever=kb.as_retriever(top_k=3)).ainvoke(QUESTION)) == 3
        with pytest.raises(InvalidParameterError):
            LangChainRetriever(retriever=kb, k=0)
        with pytest.raises(InvalidParameterError):
            await LangChainRetriever(retriever=kb).ainvoke(QUESTION, k=True)
    async with KnowledgeBase(store, settings=_settings(top_k=4)) as kb:
        assert len(await LangChainRetriever(retriever=kb).ainvoke(QUESTION)) == 4


def _settings(**values: Any) -> Any:
    from fastrag.settings import SearchSettings

    return SearchSettings(**values)


async def test_filters_take_fastrags_json_form_in_the_constructor_and_per_call(store: str) -> None:
    english = {"equals": {"key": "lang", "value": "en"}}
    recent = {"greaterThanOrEquals": {"key": "year", "value": 2021}}
    async with KnowledgeBase(store) as kb:
        docs = await LangChainRetriever(retriever=kb, filter=english).ainvoke(QUESTION)
        assert docs and {d.metadata["lang"] for d in docs} == {"en"}
        expected = [d.id for d in await kb.search(QUESTION, filter=english)]
        assert [d.id for d in docs] == expected
        # a call's filter replaces the constructor's; a JSON string is the same filter
        docs = await LangChainRetriever(retriever=kb, filter=english).ainvoke(QUESTION, filter=json.dumps(recent))
        assert docs and all(d.metadata["year"] >= 2021 for d in docs)
        assert "rerank" in {d.id for d in docs}  # German, 2022: the constructor's filter was replaced
        with pytest.raises(FilterError, match=r"\$\.equals"):
            LangChainRetriever(retriever=kb, filter={"equals": {"key": "lang"}})
        with pytest.raises(FilterError):
            await LangChainRetriever(retriever=kb).ainvoke(QUESTION, filter={"nonsense": {}})


async def test_invoke_works_inside_a_running_event_loop(store: str) -> None:
    async with KnowledgeBase(store) as kb:
        retriever = LangChainRetriever(retriever=kb, k=4)
        expected = _hits(await retriever.ainvoke(QUESTION))
        # a sync call from a coroutine (as in a notebook cell): anyio.run would refuse to start here
        assert _hits(retriever.invoke(QUESTION)) == expected
        assert [_hits(docs) for docs in retriever.batch([QUESTION] * 3)] == [expected] * 3


class RecordingRetriever:
    """A fastrag Retriever that records the thread of each call (any retriever, not only a knowledge base)."""

    def __init__(self) -> None:
        self.threads: list[int] = []
        self.calls: list[dict[str, Any]] = []

    async def retrieve(self, query: str, *, k: int = 10, filter: Any = None) -> list[Document]:
        self.threads.append(threading.get_ident())
        self.calls.append({"query": query, "k": k, "filter": filter})
        return [Document(id=f"d{i}", content=query).ranked(score=1.0 / (i + 1), rank=i) for i in range(k)]


async def test_ainvoke_is_async_natively_and_invoke_runs_on_the_bridge() -> None:
    fake = RecordingRetriever()
    retriever = LangChainRetriever(retriever=fake)
    docs = await retriever.ainvoke("q")
    assert fake.threads == [threading.get_ident()]  # awaited on this loop, not in an executor thread
    assert fake.calls[0]["k"] == 10 and [d.id for d in docs] == [f"d{i}" for i in range(10)]
    retriever.invoke("q", k=2, filter={"equals": {"key": "lang", "value": "en"}})
    assert fake.threads[1] != threading.get_ident()  # the bridge's loop thread
    from fastrag.filters import field

    assert fake.calls[1]["k"] == 2 and fake.calls[1]["filter"] == (field("lang") == "en")


def test_invoke_works_outside_an_event_loop_and_a_non_retriever_is_refused(store: str) -> None:
    kb = KnowledgeBase(store)  # never opened by hand: the first sync call opens it on the bridge's loop
    try:
        docs = LangChainRetriever(retriever=kb, k=3).invoke(QUESTION)
        assert len(docs) == 3 and all(isinstance(d, LangChainDocument) for d in docs)
    finally:
        run_sync(kb.aclose)
    with pytest.raises(ConfigurationError, match="KnowledgeBase or a fastrag Retriever"):
        LangChainRetriever(retriever=Path("kb.db"))
