"""SubQuestionEngine and the deterministic splitter: a multi-hop question retrieves for each of its parts,
concurrently, and every merged document says which sub-question found it."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import anyio
import pytest

from fastrag import BM25Retriever, Document, SQLiteVectorStore
from fastrag.errors import BackendError, BackendUnavailableError, ConfigurationError, FilterError, InvalidParameterError
from fastrag.llm import ChatMessage
from fastrag.models import SOURCE_URI, TITLE
from fastrag.querying import SUB_QUESTIONS, SubQuestionEngine, SubQuestionResult, split_question
from fastrag.retrieval.limits import RetrievalLimits
from fastrag.retrieval.result import RetrievalResult

pytestmark = pytest.mark.anyio

# The facts about each country are in different documents; the distractors share words with the question.
CORPUS = [
    Document(id="de-leave", content="In Germany, parental leave (Elternzeit) lasts up to three years per parent.",
             metadata={TITLE: "Parental leave in Germany", SOURCE_URI: "de/leave.md"}),
    Document(id="fr-leave", content="In France, parental leave (congé parental) lasts up to one year, renewable twice.",
             metadata={TITLE: "Parental leave in France", SOURCE_URI: "fr/leave.md"}),
    Document(id="de-tax", content="Germany taxes income progressively.", metadata={SOURCE_URI: "de/tax.md"}),
    Document(id="fr-wine", content="France produces wine in Bordeaux.", metadata={SOURCE_URI: "fr/wine.md"}),
    Document(id="it-leave", content="Italy grants parental leave of ten months.", metadata={SOURCE_URI: "it/leave.md"}),
]
QUESTION = "How does parental leave differ between Germany and France?"
DE_Q = "How does parental leave work in Germany?"
FR_Q = "How does parental leave work in France?"


@pytest.fixture
async def store() -> AsyncIterator[SQLiteVectorStore]:
    async with SQLiteVectorStore(":memory:") as s:
        await s.upsert(CORPUS)
        yield s


class ScriptedLLM:
    def __init__(self, *replies: Callable[[Sequence[ChatMessage]], Any]) -> None:
        self.replies = list(replies)
        self.calls: list[list[ChatMessage]] = []

    async def chat(self, messages: Sequence[ChatMessage], *, temperature: float | None = None,
                   max_tokens: int | None = None) -> Any:
        self.calls.append(list(messages))
        return self.replies[min(len(self.calls), len(self.replies)) - 1](messages)


# ------------------------------------------------------------------------------------------ the splitter


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        (QUESTION, (DE_Q, FR_Q)),
        ("How do taxes differ between Germany, France and Italy?",
         ("How do taxes work in Germany?", "How do taxes work in France?", "How do taxes work in Italy?")),
        ("how does   BM25 scoring vary across Lucene and Tantivy",
         ("How does BM25 scoring work in Lucene?", "How does BM25 scoring work in Tantivy?")),
        # the items before the verb ("How do A and B differ in X?"), as a new user asked it
        ("How do Germany and France differ in parental leave?",
         ("What is parental leave in Germany?", "What is parental leave in France?")),
        ("How do Milvus, Qdrant and Chroma compare in terms of their filtering?",
         ("What is filtering in Milvus?", "What is filtering in Qdrant?", "What is filtering in Chroma?")),
        ("How do Milvus and Qdrant differ from each other regarding hybrid search?",
         ("What is hybrid search in Milvus?", "What is hybrid search in Qdrant?")),
        ("How do BM25 and TF-IDF differ?", ("What is BM25?", "What is TF-IDF?")),
        ("How does parental leave differ in Germany and France?",  # "does": the items follow the verb
         ("How does parental leave work in Germany?", "How does parental leave work in France?")),
        ("How does Milvus differ from Qdrant on filtering?", ("What is filtering in Milvus?", "What is filtering in Qdrant?")),
        ("How is BM25 different from TF-IDF?", ("What is BM25?", "What is TF-IDF?")),
        ("How does Milvus compare to Qdrant and Chroma?", ("What is Milvus?", "What is Qdrant?", "What is Chroma?")),
        ("How is parental leave different in Germany and France?",
         ("What is parental leave like in Germany?", "What is parental leave like in France?")),
        ("What is the difference between BM25 and TF-IDF?", ("What is BM25?", "What is TF-IDF?")),
        ("What is the difference in parental leave between Germany and France?",
         ("What is parental leave in Germany?", "What is parental leave in France?")),
        ("What are the main differences between Milvus and Qdrant in terms of filtering?",
         ("What is filtering in Milvus?", "What is filtering in Qdrant?")),
        ("Compare Milvus and Qdrant", ("What is Milvus?", "What is Qdrant?")),
        ("Compare Milvus with Qdrant on filtering.", ("What is filtering in Milvus?", "What is filtering in Qdrant?")),
        ("Compare parental leave between Germany and France",
         ("What is parental leave in Germany?", "What is parental leave in France?")),
        ("Milvus vs Qdrant", ("What is Milvus?", "What is Qdrant?")),
        ("Which is faster: Milvus vs. Qdrant for hybrid search?",
         ("What is hybrid search in Milvus?", "What is hybrid search in Qdrant?")),
        ("Chroma versus Qdrant versus Milvus", ("What is Chroma?", "What is Qdrant?", "What is Milvus?")),
        ("What is BM25 and what is RRF?", ("What is BM25?", "What is RRF?")),
        ("What is BM25 and how does RRF fuse rankings?", ("What is BM25?", "How does RRF fuse rankings?")),
        ("What is BM25? How does RRF work?", ("What is BM25?", "How does RRF work?")),
        ("Who wrote BM25, when was it published and why is it popular?",
         ("Who wrote BM25?", "When was it published?", "Why is it popular?")),
    ],
)
def test_split_question_splits_comparisons_and_conjunctions(question: str, expected: tuple[str, ...]) -> None:
    assert split_question(question) == expected


@pytest.mark.parametrize(
    "question",
    [
        "What is BM25?",
        "How are documents ranked?",
        "What should I eat and do in Rome?",        # "and do" does not start a second question
        "How does research and development work?",  # no comparison wording
        "How do taxes differ?",                     # nothing to compare against
        "Compare",
        "What is the difference between BM25 and BM25?",  # one distinct part
        "  What is   BM25?  ",
    ],
)
def test_a_question_with_nothing_to_split_is_its_own_only_sub_question(question: str) -> None:
    assert split_question(question) == (question.strip(),)


def test_split_question_limits_and_errors() -> None:
    assert split_question("Compare A, B, C, D and E", max_sub_questions=2) == ("What is A?", "What is B?")
    with pytest.raises(InvalidParameterError):
        split_question("")
    with pytest.raises(InvalidParameterError):
        split_question("What?", max_sub_questions=0)


# ------------------------------------------------------------------------------------ multi-hop retrieval


async def test_multi_hop_question_retrieves_both_parts_each_tagged_with_its_sub_question(store: SQLiteVectorStore) -> None:
    retriever = BM25Retriever(store=store)
    # asked as one question, the top document covers only one country
    assert len(await retriever.retrieve(QUESTION, k=1)) == 1
    result = await SubQuestionEngine(retriever=retriever, k=1).retrieve(QUESTION)
    assert isinstance(result, SubQuestionResult)
    assert result.splitter == "deterministic" and result.split_error is None
    assert result.sub_questions == (DE_Q, FR_Q)
    by_id = {d.id: d for d in result.documents}
    assert set(by_id) == {"de-leave", "fr-leave"}
    assert by_id["de-leave"].metadata[SUB_QUESTIONS] == [DE_Q]
    assert by_id["fr-leave"].metadata[SUB_QUESTIONS] == [FR_Q]
    assert [d.rank for d in result.documents] == [0, 1]
    assert list(result.per_question) == [DE_Q, FR_Q]
    assert [d.id for d in result.per_question[DE_Q].documents] == ["de-leave"]
    assert not result.partial and not result.retrieval_failed


async def test_merged_documents_are_fused_by_reciprocal_rank_and_tagged_in_order(store: SQLiteVectorStore) -> None:
    result = await SubQuestionEngine(retriever=BM25Retriever(store=store), k=5).retrieve(QUESTION)
    by_id = {d.id: d for d in result.documents}
    assert DE_Q in by_id["de-leave"].metadata[SUB_QUESTIONS]
    assert FR_Q in by_id["fr-leave"].metadata[SUB_QUESTIONS]
    assert len(result.documents) == len(by_id)  # deduplicated by id
    positions = {q: [d.id for d in r.documents] for q, r in result.per_question.items()}
    for doc in result.documents:  # a tag is there exactly when that sub-question's list had the document
        expected = [q for q in result.sub_questions if doc.id in positions[q]]
        assert doc.metadata[SUB_QUESTIONS] == expected
        assert set(doc.branches) == set(expected)
        # RRF (Cormack et al. 2009, rank constant 60): the sum of 1 / (60 + one-based position)
        assert doc.score == pytest.approx(sum(1 / (60 + positions[q].index(doc.id) + 1) for q in expected))
    assert [d.rank for d in result.documents] == list(range(len(result.documents)))
    assert [d.score for d in result.documents] == sorted((d.score for d in result.documents), reverse=True)
    assert any(len(d.metadata[SUB_QUESTIONS]) == 2 for d in result.documents)  # the case is exercised


async def test_sub_questions_are_retrieved_concurrently() -> None:
    started: list[str] = []
    all_started = anyio.Event()

    class Barrier:
        async def retrieve(self, query: str, *, k: int = 10, filter: object = None) -> list[Document]:
            started.append(query)
            if len(started) == 3:
                all_started.set()
            with anyio.fail_after(10):  # sequential retrieval would never get past this
                await all_started.wait()
            return [Document(id=query, content=query)]

    result = await SubQuestionEngine(retriever=Barrier()).retrieve("Compare A, B and C")
    assert sorted(started) == ["What is A?", "What is B?", "What is C?"]
    assert {d.id for d in result.documents} == set(started)


async def test_a_result_object_retriever_works_and_a_failed_sub_question_is_reported() -> None:
    docs = {"What is A?": [Document(id="a1", content="A is first."), Document(id="a2", content="A again.")]}

    class ResultRetriever:
        async def retrieve(self, query: str, *, k: int = 10, filter: object = None) -> list[Document]:
            raise AssertionError("retrieve_result should have been used")

        async def retrieve_result(self, query: str, *, k: int = 10, filter: object = None) -> RetrievalResult:
            if query in docs:
                return RetrievalResult(documents=tuple(docs[query][:k]))
            return RetrievalResult(error=BackendUnavailableError("B's shard is down"))

    result = await SubQuestionEngine(retriever=ResultRetriever(), k=5).retrieve("Compare A and B")
    assert [d.id for d in result.documents] == ["a1", "a2"]
    assert all(d.metadata[SUB_QUESTIONS] == ["What is A?"] for d in result.documents)
    assert result.failed_sub_questions == ("What is B?",)
    assert result.partial and not result.retrieval_failed
    assert isinstance(result.per_question["What is B?"].error, BackendUnavailableError)
    combined = result.retrieval
    assert combined.partial and set(combined.failed_branches) == {"What is B?"}
    assert docs["What is A?"][0].metadata == {}  # inputs untouched


async def test_every_sub_question_failing_is_a_failed_retrieval() -> None:
    class Down:
        async def retrieve(self, query: str, *, k: int = 10, filter: object = None) -> list[Document]:
            raise BackendUnavailableError("down")

    result = await SubQuestionEngine(retriever=Down()).retrieve("What is A and what is B?")
    assert result.retrieval_failed and result.documents == ()
    assert isinstance(result.retrieval.error, BackendUnavailableError)
    assert result.failed_sub_questions == ("What is A?", "What is B?")


async def test_filter_reaches_every_sub_question_and_a_bad_one_raises(store: SQLiteVectorStore) -> None:
    seen: list[Any] = []

    class Recording:
        async def retrieve(self, query: str, *, k: int = 10, filter: object = None) -> list[Document]:
            seen.append(filter)
            return []

    flt = {"equals": {"key": "lang", "value": "en"}}
    await SubQuestionEngine(retriever=Recording()).retrieve("Compare A and B", filter=flt)
    assert seen == [flt, flt]
    with pytest.raises(FilterError):
        await SubQuestionEngine(retriever=BM25Retriever(store=store)).retrieve(QUESTION, filter={"bogus": 1})


# ------------------------------------------------------------------------------------------ LLM splitting


async def test_the_llm_splits_when_given(store: SQLiteVectorStore) -> None:
    reply = "```json\n" + json.dumps([DE_Q, FR_Q, DE_Q.upper()]) + "\n```"
    llm = ScriptedLLM(lambda messages: reply)
    result = await SubQuestionEngine(retriever=BM25Retriever(store=store), llm=llm, k=1).retrieve(QUESTION)
    assert result.splitter == "llm"
    assert result.sub_questions == (DE_Q, FR_Q)  # the repeat (differing in case) is dropped
    assert llm.calls[0][-1].content == QUESTION
    assert "JSON array" in llm.calls[0][0].content
    assert {d.id for d in result.documents} == {"de-leave", "fr-leave"}


async def test_llm_split_object_form_and_limit(store: SQLiteVectorStore) -> None:
    llm = ScriptedLLM(lambda m: json.dumps({"sub_questions": ["a?", "b?", "c?"]}))
    engine = SubQuestionEngine(retriever=BM25Retriever(store=store), llm=llm, max_sub_questions=2)
    questions, splitter, error = await engine.sub_questions("anything")
    assert questions == ("a?", "b?") and splitter == "llm" and error is None


@pytest.mark.parametrize("reply", ["Sure! Here are some questions.", "[]", '["ok", 3]', '[""]', "{}", None])
async def test_an_invalid_llm_split_raises_by_default(store: SQLiteVectorStore, reply: Any) -> None:
    engine = SubQuestionEngine(retriever=BM25Retriever(store=store), llm=ScriptedLLM(lambda m: reply))
    with pytest.raises(BackendError, match="LLM"):
        await engine.retrieve(QUESTION)


async def test_deterministic_fallback_is_marked_and_logged(
    store: SQLiteVectorStore, caplog: pytest.LogCaptureFixture
) -> None:
    engine = SubQuestionEngine(
        retriever=BM25Retriever(store=store), llm=ScriptedLLM(lambda m: "not json"), k=1, fallback="deterministic"
    )
    with caplog.at_level(logging.WARNING, logger="fastrag.querying"):
        result = await engine.retrieve(QUESTION)
    assert result.splitter == "deterministic_fallback"
    assert isinstance(result.split_error, BackendError)
    assert result.sub_questions == (DE_Q, FR_Q)
    assert any("deterministic" in r.getMessage() for r in caplog.records)


async def test_query_answers_from_the_merged_sources_tagged_with_sub_questions(store: SQLiteVectorStore) -> None:
    def answer(messages: Sequence[ChatMessage]) -> str:
        prompt = messages[-1].content
        blocks = [b for b in prompt.split("\n\n") if b.startswith("[")]
        # cite each source by the sub-question it answers, as the prompt shows it
        de = next(b for b in blocks if f"answers: {DE_Q}" in b and "Germany" in b)
        fr = next(b for b in blocks if f"answers: {FR_Q}" in b and "France" in b)
        return f"Germany: three years {de[:3]}; France: one year {fr[:3]}."

    llm = ScriptedLLM(lambda m: json.dumps([DE_Q, FR_Q]), answer)
    out = await SubQuestionEngine(retriever=BM25Retriever(store=store), llm=llm, k=1).query(QUESTION)
    assert out.status == "answered"
    assert [c.document.id for c in out.citations] == ["de-leave", "fr-leave"]
    assert out.citations[0].document.metadata[SUB_QUESTIONS] == [DE_Q]
    assert llm.calls[1][-1].content.rstrip().endswith(f"Question: {QUESTION}")


async def test_query_without_llm_and_bad_arguments(store: SQLiteVectorStore) -> None:
    engine = SubQuestionEngine(retriever=BM25Retriever(store=store))
    with pytest.raises(ConfigurationError, match="LLM"):
        await engine.query(QUESTION)
    with pytest.raises(InvalidParameterError):
        await engine.retrieve("   ")
    for kwargs in ({"k": 0}, {"max_sub_questions": 0}, {"fallback": "silent"}, {"llm": object()}):
        with pytest.raises(InvalidParameterError):
            SubQuestionEngine(retriever=BM25Retriever(store=store), **kwargs)


async def test_a_sub_question_with_no_match_is_not_a_failure() -> None:
    class OnlyA:
        async def retrieve(self, query: str, *, k: int = 10, filter: object = None) -> list[Document]:
            return [Document(id="a", content="A.")] if "A" in query else []

    result = await SubQuestionEngine(retriever=OnlyA()).retrieve("Compare A and B")
    assert [(d.id, d.metadata[SUB_QUESTIONS]) for d in result.documents] == [("a", ["What is A?"])]
    assert not result.partial and result.failed_sub_questions == ()
    assert result.per_question["What is B?"].documents == ()


async def test_a_subject_first_comparison_retrieves_both_parts(store: SQLiteVectorStore) -> None:
    result = await SubQuestionEngine(retriever=BM25Retriever(store=store), k=1).retrieve(
        "How do Germany and France differ in parental leave?"
    )
    assert result.sub_questions == ("What is parental leave in Germany?", "What is parental leave in France?")
    assert {d.id for d in result.documents} == {"de-leave", "fr-leave"}


async def test_a_deeply_nested_llm_reply_is_a_failed_split_not_a_recursion_error(store: SQLiteVectorStore) -> None:
    reply = "[" * 100_000 + "]" * 100_000
    engine = SubQuestionEngine(retriever=BM25Retriever(store=store), llm=ScriptedLLM(lambda m: reply))
    with pytest.raises(BackendError, match="LLM"):
        await engine.retrieve(QUESTION)
    engine = SubQuestionEngine(retriever=BM25Retriever(store=store), llm=ScriptedLLM(lambda m: reply),
                               fallback="deterministic")
    result = await engine.retrieve(QUESTION)
    assert result.splitter == "deterministic_fallback" and isinstance(result.split_error, BackendError)
    assert result.sub_questions == (DE_Q, FR_Q)


@pytest.mark.parametrize(
    "sub_question",
    ["lone surrogate \ud800 in Germany?", "x" * 9_000, "parental leave in a very long question about Germany?"],
    ids=["surrogate", "over-long", "over-the-retriever's-limit"],
)
async def test_a_sub_question_the_retriever_would_refuse_is_a_failed_split(
    store: SQLiteVectorStore, sub_question: str
) -> None:
    # the retriever's own limits apply: 40 characters here
    retriever = BM25Retriever(store=store, limits=RetrievalLimits(max_query_chars=40))
    reply = json.dumps([DE_Q, sub_question])
    engine = SubQuestionEngine(retriever=retriever, llm=ScriptedLLM(lambda m: reply))
    with pytest.raises(BackendError, match="refuse") as info:
        await engine.retrieve(QUESTION)
    assert not isinstance(info.value, InvalidParameterError)
    engine = SubQuestionEngine(retriever=retriever, llm=ScriptedLLM(lambda m: reply), fallback="deterministic")
    result = await engine.retrieve(QUESTION)
    assert result.splitter == "deterministic_fallback"
    assert result.sub_questions == (DE_Q, FR_Q)
    assert {d.id for d in result.documents} >= {"de-leave", "fr-leave"}
