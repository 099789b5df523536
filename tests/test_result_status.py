"""retrieve_result: "the store is down" is never mistaken for "nothing matched"; status is per call."""

from __future__ import annotations

import dataclasses
import logging

import anyio
import pytest

from fastrag.errors import BackendError, BackendUnavailableError, FilterError, InvalidParameterError
from fastrag.models import Document
from fastrag.retrieval import (
    BM25Retriever,
    HybridRetriever,
    PathFilterRetriever,
    RetrievalResult,
    TenantScopedRetriever,
    VectorRetriever,
    retrieve_result,
)
from fastrag.testing.fakes import HashingEmbedder, InMemoryStore
from fastrag.testing.faults import FaultyStore
from fastrag.vector_store.sqlite import SQLiteVectorStore

pytestmark = pytest.mark.anyio

RETRIEVERS = {
    "bm25": lambda store: BM25Retriever(store=store),
    "vector": lambda store: VectorRetriever(vector_store=store, embedder=HashingEmbedder()),
    "hybrid": lambda store: HybridRetriever(
        [VectorRetriever(vector_store=store, embedder=HashingEmbedder()), BM25Retriever(store=store)]
    ),
    "partial hybrid": lambda store: HybridRetriever(
        [VectorRetriever(vector_store=store, embedder=HashingEmbedder()), BM25Retriever(store=store)],
        on_branch_error="partial",
    ),
    "path filter": lambda store: PathFilterRetriever(BM25Retriever(store=store), include_glob="*.md"),
    "tenant": lambda store: TenantScopedRetriever(BM25Retriever(store=store), tenant="alice"),
}


def error_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR and r.name.startswith("fastrag")]


@pytest.mark.parametrize("kind", list(RETRIEVERS))
async def test_a_store_that_fails_every_call_is_a_failure_not_an_empty_result(kind, caplog) -> None:
    down = FaultyStore(InMemoryStore())
    result = await RETRIEVERS[kind](down).retrieve_result("solar power", k=3)
    assert result.retrieval_failed is True
    assert isinstance(result.error, BackendUnavailableError) and "faulty://store" in str(result.error)
    assert result.documents == () and result.partial is False
    assert len(error_records(caplog)) == 1  # logged once, not once per stage it crossed


@pytest.mark.parametrize("kind", list(RETRIEVERS))
async def test_a_healthy_empty_store_is_no_match_not_a_failure(kind, caplog) -> None:
    async with SQLiteVectorStore(":memory:") as store:
        result = await RETRIEVERS[kind](store).retrieve_result("solar power", k=3)
    assert result.retrieval_failed is False and result.error is None
    assert result.documents == () and result.failed_branches == {} and result.partial is False
    assert error_records(caplog) == []


async def test_a_healthy_store_returns_what_retrieve_returns() -> None:
    async with SQLiteVectorStore(":memory:") as store:
        embedder = HashingEmbedder()
        docs = [Document(id="a", content="solar power panels"), Document(id="b", content="wind power")]
        await store.upsert(docs, embeddings=await embedder.embed_documents([d.content for d in docs]))
        hybrid = RETRIEVERS["hybrid"](store)
        result = await hybrid.retrieve_result("solar power", k=2)
        assert list(result.documents) == await hybrid.retrieve("solar power", k=2)
        assert not result.retrieval_failed and [d.id for d in result.documents] == ["a", "b"]


async def test_retrieve_still_raises_and_logs_nothing(caplog) -> None:
    with pytest.raises(BackendUnavailableError):
        await BM25Retriever(store=FaultyStore(InMemoryStore())).retrieve("solar", k=3)
    assert error_records(caplog) == []  # the caller has the exception; logging it too would double it


async def test_any_retriever_works_with_the_function() -> None:
    class ThirdParty:  # conforms to the Retriever protocol without importing fastrag
        async def retrieve(self, query, *, k=10, filter=None):  # noqa: A002
            if query == "down":
                raise ConnectionResetError("peer reset")
            return [Document(id="x", content=query)]

    ok = await retrieve_result(ThirdParty(), "hello", k=1)
    assert [d.id for d in ok.documents] == ["x"] and not ok.retrieval_failed
    failed = await retrieve_result(ThirdParty(), "down", k=1)
    assert failed.retrieval_failed and isinstance(failed.error, ConnectionResetError)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [({"k": 0}, InvalidParameterError), ({"query": "  "}, InvalidParameterError),
     ({"filter": {"equals": {"key": "x"}}}, FilterError)],
)  # fmt: skip
async def test_invalid_arguments_are_raised_not_reported(kwargs, error, caplog) -> None:
    store = FaultyStore(InMemoryStore())
    call = {"query": "solar", "k": 3, **kwargs}
    with pytest.raises(error):
        await RETRIEVERS["hybrid"](store).retrieve_result(call.pop("query"), **call)
    assert store.calls == [] and error_records(caplog) == []


async def test_the_failed_branch_is_named_even_when_it_ends_the_call() -> None:
    async with SQLiteVectorStore(":memory:") as healthy:
        broken = FaultyStore(InMemoryStore())
        hybrid = HybridRetriever({"dense": VectorRetriever(vector_store=healthy, embedder=HashingEmbedder()),
                                  "keyword": BM25Retriever(store=broken)})  # fmt: skip
        result = await hybrid.retrieve_result("solar", k=3)
    assert result.retrieval_failed and list(result.failed_branches) == ["keyword"]
    assert result.failed_branches["keyword"] is result.error


async def test_timings_are_per_stage_in_seconds() -> None:
    async with SQLiteVectorStore(":memory:") as store:
        result = await RETRIEVERS["hybrid"](store).retrieve_result("solar", k=3)
        assert set(result.timings) == {"total", "vector", "vector/embed", "vector/search", "bm25", "fusion"}
        assert all(0 <= t <= result.timings["total"] for t in result.timings.values())
        alone = await RETRIEVERS["vector"](store).retrieve_result("solar", k=3)
        assert set(alone.timings) == {"total", "embed", "search"}
    failed = await RETRIEVERS["bm25"](FaultyStore(InMemoryStore())).retrieve_result("solar", k=3)
    assert set(failed.timings) == {"total"}


async def test_the_result_is_frozen() -> None:
    result = RetrievalResult(documents=[Document(id="a", content="x")], failed_branches={"b": ValueError()})
    assert isinstance(result.documents, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.partial = True  # type: ignore[misc]
    with pytest.raises(TypeError):
        result.failed_branches["c"] = ValueError()  # type: ignore[index]


class QueryDependentStore(InMemoryStore):
    """Fails a search whose query (or vector) comes from a query starting with "fail"; yields in between."""

    async def search_text(self, query, *, k, filter=None):  # noqa: A002
        await anyio.sleep(0.001)
        if query.startswith("fail"):
            raise BackendError(f"cannot answer {query!r}", store="flaky://")
        return await super().search_text(query, k=k, filter=filter)


async def test_concurrent_calls_never_see_each_others_status(caplog) -> None:
    store = QueryDependentStore()
    embedder = HashingEmbedder()
    docs = [Document(id=f"d{i}", content=f"term{i} shared words") for i in range(20)]
    await store.upsert(docs, embeddings=await embedder.embed_documents([d.content for d in docs]))
    retrievers = {
        "raise": HybridRetriever([VectorRetriever(vector_store=store, embedder=embedder), BM25Retriever(store=store)]),
        "partial": HybridRetriever([VectorRetriever(vector_store=store, embedder=embedder), BM25Retriever(store=store)],
                                   on_branch_error="partial"),
    }  # fmt: skip
    queries = [f"{'fail' if i % 3 == 0 else 'ok'} term{i % 20} shared" for i in range(120)]
    results: dict[tuple[str, str], RetrievalResult] = {}

    async def one(policy: str, query: str) -> None:
        results[policy, query] = await retrievers[policy].retrieve_result(query, k=5)

    async with anyio.create_task_group() as tg:
        for query in queries:
            for policy in retrievers:
                tg.start_soon(one, policy, query)

    for (policy, query), result in results.items():
        failing = query.startswith("fail")
        assert list(result.failed_branches) == (["bm25"] if failing else [])
        if policy == "raise":
            assert result.retrieval_failed is failing and result.partial is False
            assert (result.error is not None and query in str(result.error)) is failing
        else:
            assert result.retrieval_failed is False and result.partial is failing and len(result.documents) == 5
            if failing:
                assert query in str(result.failed_branches["bm25"])
    failures = sum(q.startswith("fail") for q in queries) * len(retrievers)
    assert len(error_records(caplog)) == failures  # once per failure, whichever stage absorbed it
