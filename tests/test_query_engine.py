"""QueryEngine: grounded prompts with numbered sources, citations mapped to retrieved documents, and no LLM call
when retrieval failed or found nothing. The LLM is a scripted fake that reads the prompt it is given."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest

from fastrag import BM25Retriever, Document, HybridRetriever, SQLiteVectorStore
from fastrag.errors import (
    AuthenticationError,
    BackendError,
    BackendUnavailableError,
    FilterError,
    InvalidParameterError,
)
from fastrag.llm import ChatMessage
from fastrag.models import LANGUAGE, SOURCE_URI, TITLE
from fastrag.protocols import LLM
from fastrag.querying import Answer, QueryEngine, SubQuestionEngine, build_prompt, parse_citations
from fastrag.querying.engine import DEFAULT_MAX_CONTEXT_CHARS, MAX_SOURCE_FIELD_CHARS
from fastrag.retrieval.result import RetrievalResult
from fastrag.testing.faults import FaultyStore

pytestmark = pytest.mark.anyio

CORPUS = [
    Document(id="bm25", content="BM25 ranks documents using term frequency and inverse document frequency.",
             metadata={TITLE: "BM25 ranking", LANGUAGE: "en", SOURCE_URI: "docs/bm25.md"}),
    Document(id="rrf", content="Reciprocal rank fusion combines ranked lists by summing reciprocal ranks.",
             metadata={TITLE: "Rank fusion", LANGUAGE: "en", SOURCE_URI: "docs/fusion.md"}),
    Document(id="pasta", content="Boil the pasta in salted water for nine minutes.",
             metadata={TITLE: "Cooking", LANGUAGE: "en", SOURCE_URI: "recipes/pasta.md"}),
    Document(id="bm25-de", content="BM25 bewertet Dokumente nach Termfrequenz.",
             metadata={TITLE: "BM25 Ranking", LANGUAGE: "de", SOURCE_URI: "docs/de/bm25.md"}),
]


class ScriptedLLM:
    """An LLM whose reply is ``answer(messages)``; records every call."""

    def __init__(self, answer: Callable[[Sequence[ChatMessage]], str] | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.answer = answer or (lambda messages: "I do not know.")

    async def chat(self, messages: Sequence[ChatMessage], *, temperature: float | None = None,
                   max_tokens: int | None = None) -> Any:
        self.calls.append({"messages": list(messages), "temperature": temperature, "max_tokens": max_tokens})
        return self.answer(messages)


def source_numbers(prompt: str) -> dict[str, int]:
    """{source_uri: number} as the prompt shows them (read from the prompt text, not from the engine)."""
    out = {}
    for block in prompt.split("\n\n"):
        number = re.match(r"\[(\d+)\]", block)
        uri = re.search(r"^source_uri: (.+)$", block, re.MULTILINE)
        if number and uri:
            out[uri.group(1)] = int(number.group(1))
    return out


def cite_uri(*uris: str, extra: str = "") -> Callable[[Sequence[ChatMessage]], str]:
    """A model that cites the sources with these source_uris, by the numbers the prompt gave them."""

    def answer(messages: Sequence[ChatMessage]) -> str:
        numbers = source_numbers(messages[-1].content)
        return "Answer " + " ".join(f"[{numbers[u]}]" for u in uris if u in numbers) + extra

    return answer


@pytest.fixture
async def store() -> AsyncIterator[SQLiteVectorStore]:
    async with SQLiteVectorStore(":memory:") as s:
        await s.upsert(CORPUS)
        yield s


async def test_citations_point_at_the_retrieved_documents(store: SQLiteVectorStore) -> None:
    llm = ScriptedLLM(cite_uri("docs/fusion.md", "docs/bm25.md"))
    engine = QueryEngine(retriever=BM25Retriever(store=store), llm=llm, k=3)
    answer = await engine.query("How does rank fusion combine ranked lists, and how does BM25 rank documents?")
    assert isinstance(answer, Answer)
    assert answer.status == "answered" and answer.grounded and not answer.partial
    assert [c.document.id for c in answer.citations] == ["rrf", "bm25"]
    assert all(c.document is answer.sources[c.number - 1] for c in answer.citations)
    assert {d.id for d in answer.sources} <= {"bm25", "rrf", "bm25-de", "pasta"}
    assert [d.id for d in answer.cited_documents] == ["rrf", "bm25"]
    assert answer.invalid_citations == ()
    assert len(llm.calls) == 1


async def test_prompt_numbers_sources_with_title_language_uri_and_instructs_to_cite(store: SQLiteVectorStore) -> None:
    llm = ScriptedLLM()
    answer = await QueryEngine(retriever=BM25Retriever(store=store), llm=llm, k=5).query("BM25 ranking")
    system, user = llm.calls[0]["messages"]
    assert system.role == "system" and user.role == "user"
    assert "[1]" in system.content and "do not know" in system.content
    assert user.content.rstrip().endswith("Question: BM25 ranking")
    for number, doc in enumerate(answer.sources, start=1):
        block = re.search(rf"^\[{number}\]\n(.*?)(?=\n\n|\Z)", user.content, re.MULTILINE | re.DOTALL)
        assert block, f"source [{number}] is missing"
        assert f"title: {doc.metadata[TITLE]}" in block.group(1)
        assert f"language: {doc.metadata[LANGUAGE]}" in block.group(1)
        assert f"source_uri: {doc.source_uri}" in block.group(1)
        assert doc.content in block.group(1)
    assert answer.sources == answer.retrieval.documents  # everything retrieved fits the budget, in order
    assert {"bm25", "bm25-de"} <= {d.id for d in answer.sources} and "pasta" not in {d.id for d in answer.sources}


async def test_a_citation_to_a_missing_source_is_reported_not_cited(store: SQLiteVectorStore) -> None:
    llm = ScriptedLLM(cite_uri("docs/bm25.md", extra=" and also [9] and [0]."))
    answer = await QueryEngine(retriever=BM25Retriever(store=store), llm=llm, k=2).query("BM25 ranking")
    assert [c.document.id for c in answer.citations] == ["bm25"]
    assert answer.invalid_citations == (9, 0)


def test_parse_citations_forms() -> None:
    docs = [Document(id=f"d{i}", content=f"text {i}") for i in range(1, 5)]
    citations, invalid = parse_citations(
        "A [1][3]. B [2, 4]. C [1;2]. D [Source 3]. E [2-3] [3-9]. Not: [x], [link](http://a), [12].", docs
    )
    assert [c.number for c in citations] == [1, 3, 2, 4]
    assert [c.document.id for c in citations] == ["d1", "d3", "d2", "d4"]
    assert invalid == (9, 12)
    assert parse_citations("no markers at all", docs) == ((), ())
    with pytest.raises(InvalidParameterError):
        parse_citations(None, docs)  # type: ignore[arg-type]


async def test_failed_retrieval_is_said_and_the_llm_is_not_called() -> None:
    llm = ScriptedLLM()
    async with SQLiteVectorStore(":memory:") as real:
        down = FaultyStore(real)  # every call raises BackendUnavailableError
        answer = await QueryEngine(retriever=BM25Retriever(store=down), llm=llm).query("anything at all")
    assert llm.calls == []
    assert answer.status == "retrieval_failed" and not answer.grounded
    assert answer.retrieval.retrieval_failed and isinstance(answer.retrieval.error, BackendUnavailableError)
    assert "Retrieval failed" in answer.text and "BackendUnavailableError" in answer.text
    assert "connection refused" in answer.text
    assert answer.citations == () and answer.sources == ()


async def test_a_retriever_without_retrieve_result_that_raises_is_a_failed_retrieval() -> None:
    class Broken:
        async def retrieve(self, query: str, *, k: int = 10, filter: object = None) -> list[Document]:
            raise BackendError("index is corrupt")

    llm = ScriptedLLM()
    answer = await QueryEngine(retriever=Broken(), llm=llm).query("q?")
    assert answer.status == "retrieval_failed" and "index is corrupt" in answer.text
    assert llm.calls == []


async def test_nothing_matched_says_no_sources_and_the_llm_is_not_called(store: SQLiteVectorStore) -> None:
    llm = ScriptedLLM()
    answer = await QueryEngine(retriever=BM25Retriever(store=store), llm=llm).query("quantum chromodynamics")
    assert llm.calls == []
    assert answer.status == "no_sources" and not answer.grounded
    assert not answer.retrieval.retrieval_failed
    assert "No sources" in answer.text


async def test_partial_hybrid_result_is_answered_and_marked(store: SQLiteVectorStore) -> None:
    hybrid = HybridRetriever(
        {"good": BM25Retriever(store=store), "down": BM25Retriever(store=FaultyStore(store))},
        on_branch_error="partial",
    )
    llm = ScriptedLLM(cite_uri("docs/bm25.md"))
    answer = await QueryEngine(retriever=hybrid, llm=llm).query("BM25 ranking")
    assert answer.status == "answered" and answer.partial
    assert set(answer.retrieval.failed_branches) == {"down"}
    assert [c.document.id for c in answer.citations] == ["bm25"]
    assert len(llm.calls) == 1


async def test_a_retriever_with_its_own_retrieve_result_is_used() -> None:
    doc = Document(id="x", content="X is documented here.", metadata={SOURCE_URI: "x.md"})
    seen: list[tuple[str, int, Any]] = []

    class ResultRetriever:
        async def retrieve(self, query: str, *, k: int = 10, filter: object = None) -> list[Document]:
            raise AssertionError("retrieve_result should have been used")

        async def retrieve_result(self, query: str, *, k: int = 10, filter: object = None) -> RetrievalResult:
            seen.append((query, k, filter))
            return RetrievalResult(documents=(doc, doc.with_metadata(extra=1)), partial=True)

    llm = ScriptedLLM(cite_uri("x.md"))
    answer = await QueryEngine(retriever=ResultRetriever(), llm=llm, k=1).query("what is x?", filter={"equals": {"key": "a", "value": 1}})
    assert seen == [("what is x?", 1, {"equals": {"key": "a", "value": 1}})]
    assert [d.id for d in answer.sources] == ["x"]  # at most k kept
    assert answer.partial and [c.document.id for c in answer.citations] == ["x"]


async def test_filter_and_k_reach_the_retriever(store: SQLiteVectorStore) -> None:
    llm = ScriptedLLM()
    engine = QueryEngine(retriever=BM25Retriever(store=store), llm=llm, k=5)
    answer = await engine.query("BM25", filter={"equals": {"key": "language", "value": "de"}})
    assert [d.id for d in answer.sources] == ["bm25-de"]
    answer = await engine.query("BM25", k=1)
    assert len(answer.sources) == 1
    with pytest.raises(FilterError):
        await engine.query("BM25", filter={"nonsense": 1})


def sources_section(prompt_text: str) -> str:
    """The text between "Sources:" and "Question:" of a user message, as the model reads it."""
    return prompt_text.split("Sources:\n\n", 1)[1].rsplit("\n\nQuestion:", 1)[0]


async def test_context_budget_counts_headers_truncates_and_drops_sources() -> None:
    docs = [Document(id=f"d{i}", content=str(i) * 50, metadata={SOURCE_URI: f"{i}.md"}) for i in range(1, 4)]
    # block 1: "[1]\nsource_uri: 1.md\n" (21) + 50 characters = 71; then "\n\n" (2) and block 2's header
    # "[2]\nsource_uri: 2.md\n" (21) leave 100 - 71 - 23 = 6 characters: 4 of content and " …"
    prompt = build_prompt("q?", docs, max_context_chars=100)
    assert [d.id for d in prompt.sources] == ["d1", "d2"]
    section = sources_section(prompt.messages[-1].content)
    assert len(section) == 100
    assert "1" * 50 in section and section.endswith("\n2222 …") and "3.md" not in section

    class Fixed:
        async def retrieve(self, query: str, *, k: int = 10, filter: object = None) -> list[Document]:
            return docs[:k]

    llm = ScriptedLLM(lambda messages: "See [1] and [3].")
    answer = await QueryEngine(retriever=Fixed(), llm=llm, max_context_chars=100).query("q?")
    assert [c.document.id for c in answer.citations] == ["d1"]
    assert answer.invalid_citations == (3,)  # source 3 was never shown to the model


def test_a_source_whose_header_does_not_fit_is_left_out_but_the_first_is_always_shown() -> None:
    docs = [Document(id=f"d{i}", content="x" * 10, metadata={TITLE: f"title {i}"}) for i in range(3)]
    prompt = build_prompt("q?", docs, max_context_chars=5)
    assert [d.id for d in prompt.sources] == ["d0"]
    assert sources_section(prompt.messages[-1].content) == "[1]\ntitle: title 0\n…"


def test_huge_metadata_cannot_blow_up_the_prompt() -> None:
    # 5,000 sources without content but with 1,000-character titles and long heading paths
    docs = [
        Document(id=f"d{i}", content="", metadata={TITLE: "t" * 1_000, SOURCE_URI: "u" * 5_000,
                                                 "headings": ["h" * 100] * 1_000})
        for i in range(5_000)
    ]
    for budget in (100, DEFAULT_MAX_CONTEXT_CHARS):
        prompt = build_prompt("q?", docs, max_context_chars=budget)
        section = sources_section(prompt.messages[-1].content)
        first_block = section.split("\n\n", 1)[0]
        assert len(section) <= max(budget, len(first_block))
        for line in section.splitlines():
            label, _, value = line.partition(": ")
            if label in ("title", "source_uri", "section"):
                assert len(value) <= MAX_SOURCE_FIELD_CHARS and value.endswith(" …")
    assert 1 < len(prompt.sources) < 100  # the default budget holds a few dozen of them


async def test_duplicate_documents_from_the_retriever_are_numbered_once() -> None:
    a = Document(id="a", content="Alpha.", metadata={SOURCE_URI: "a.md"})
    b = Document(id="b", content="Beta.", metadata={SOURCE_URI: "b.md"})

    class Repeats:
        async def retrieve(self, query: str, *, k: int = 10, filter: object = None) -> list[Document]:
            return [a, a.with_metadata(score=0.5), b, a]

    llm = ScriptedLLM(lambda messages: "Alpha [1], beta [2], alpha again [1].")
    answer = await QueryEngine(retriever=Repeats(), llm=llm).query("q?")
    assert [d.id for d in answer.sources] == ["a", "b"]
    assert source_numbers(llm.calls[0]["messages"][-1].content) == {"a.md": 1, "b.md": 2}
    assert [d.id for d in answer.cited_documents] == ["a", "b"]


def test_parse_citations_never_crashes_on_numbers_too_long_for_int() -> None:
    docs = [Document(id=f"d{i}", content=f"text {i}") for i in range(1, 4)]
    assert parse_citations("[" + "9" * 5000 + "]", docs) == ((), ())
    citations, invalid = parse_citations("[1-" + "9" * 5000 + "] and [" + "0" * 30 + "2] [12]", docs)
    assert [c.number for c in citations] == [1, 2]  # leading zeros do not make a number long
    assert invalid == (12,)


def test_parse_citations_expands_a_repeated_range_once() -> None:
    class ManySources(Sequence[Document]):
        """100,000 sources without building them (parse_citations reads len() and items)."""

        doc = Document(id="x", content="x")

        def __len__(self) -> int:
            return 100_000

        def __getitem__(self, index: Any) -> Any:
            return self.doc

    # expanding the range at every one of its 100,000 occurrences would visit 10**10 numbers
    citations, invalid = parse_citations("[1-100000]" * 100_000 + " [3] [100001]", ManySources())
    assert [c.number for c in citations] == list(range(1, 100_001))
    assert invalid == (100_001,)
    citations, _ = parse_citations("[5] [3-7] [1-9]", ManySources())
    assert [c.number for c in citations] == [5, 3, 4, 6, 7, 1, 2, 8, 9]


async def test_custom_system_prompt_temperature_and_max_tokens_are_passed(store: SQLiteVectorStore) -> None:
    llm = ScriptedLLM()
    engine = QueryEngine(retriever=BM25Retriever(store=store), llm=llm, system_prompt="Answer in French.",
                         temperature=0.0, max_tokens=100)
    await engine.query("BM25")
    call = llm.calls[0]
    assert call["messages"][0].content == "Answer in French."
    assert call["temperature"] == 0.0 and call["max_tokens"] == 100


async def test_llm_errors_propagate_and_a_non_text_reply_is_a_backend_error(store: SQLiteVectorStore) -> None:
    def refuse(messages: Sequence[ChatMessage]) -> str:
        raise AuthenticationError("key refused")

    with pytest.raises(AuthenticationError):
        await QueryEngine(retriever=BM25Retriever(store=store), llm=ScriptedLLM(refuse)).query("BM25")
    with pytest.raises(BackendError, match="not text"):
        await QueryEngine(retriever=BM25Retriever(store=store), llm=ScriptedLLM(lambda m: {"a": 1})).query("BM25")


async def test_bad_arguments_are_refused(store: SQLiteVectorStore) -> None:
    retriever, llm = BM25Retriever(store=store), ScriptedLLM()
    assert isinstance(llm, LLM)
    for kwargs in ({"k": 0}, {"max_context_chars": -1}, {"system_prompt": " "}, {"k": -10**5000},
                   {"temperature": "hot"}, {"temperature": -0.1}, {"temperature": 2.5}, {"temperature": float("nan")},
                   {"temperature": True}, {"temperature": 10**5000}, {"max_tokens": 0}, {"max_tokens": "100"},
                   {"max_tokens": True}):
        with pytest.raises(InvalidParameterError):
            QueryEngine(retriever=retriever, llm=llm, **kwargs)
        if "k" not in kwargs:
            with pytest.raises(InvalidParameterError):
                SubQuestionEngine(retriever=retriever, llm=llm, **kwargs)
    with pytest.raises(InvalidParameterError, match="chat"):
        QueryEngine(retriever=retriever, llm=object())  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="retrieve"):
        QueryEngine(retriever=object(), llm=llm)  # type: ignore[arg-type]
    engine = QueryEngine(retriever=retriever, llm=llm)
    for question, kwargs in (("", {}), ("  ", {}), ("ok", {"k": True}), ("ok", {"k": -2}), ("lone \ud800?", {})):
        with pytest.raises(InvalidParameterError):
            await engine.query(question, **kwargs)
    with pytest.raises(InvalidParameterError):
        build_prompt("q", [])
    assert llm.calls == []


def test_each_source_names_the_section_it_was_cut_from() -> None:
    """Two chunks titled alike ("Tea guide") are told apart by their heading paths."""
    green = Document(id="g", content="Brew at 80 °C.", metadata={TITLE: "Tea guide", "headings": ["Green tea", "Brewing"]})
    black = Document(id="b", content="Brew at 95 °C.", metadata={TITLE: "Tea guide", "headings": ["Black tea", "Brewing"]})
    plain = Document(id="p", content="No headings here.", metadata={TITLE: "Notes"})
    text = build_prompt("how hot?", [green, black, plain]).messages[-1].content
    assert "[1]\ntitle: Tea guide\nsection: Green tea > Brewing\nBrew at 80 °C." in text
    assert "[2]\ntitle: Tea guide\nsection: Black tea > Brewing\nBrew at 95 °C." in text
    assert "[3]\ntitle: Notes\nNo headings here." in text
