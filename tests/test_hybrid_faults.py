"""HybridRetriever under faults: per-branch timeouts, and the "raise" / "partial" branch-error policies."""

from __future__ import annotations

import logging
import math

import anyio
import pytest

from fastrag.errors import (
    BackendError,
    BackendUnavailableError,
    InvalidParameterError,
    RetrievalTimeoutError,
    TransientBackendError,
)
from fastrag.models import Document
from fastrag.retrieval import BM25Retriever, HybridRetriever, ReciprocalRankFusion, VectorRetriever
from fastrag.testing.fakes import HashingEmbedder, InMemoryStore
from fastrag.testing.faults import FaultyStore

pytestmark = pytest.mark.anyio


class Fixed:
    """A branch returning fixed (id, score) hits, optionally after a delay, or raising."""

    def __init__(self, hits=(), *, delay: float = 0.0, error: Exception | None = None) -> None:
        self.hits, self.delay, self.error = list(hits), delay, error
        self.cancelled = False
        self.finished = False

    async def retrieve(self, query, *, k=10, filter=None):  # noqa: A002
        try:
            await anyio.sleep(self.delay)
        except anyio.get_cancelled_exc_class():
            self.cancelled = True
            raise
        if self.error is not None:
            raise self.error
        self.finished = True
        return [Document(id=i, content=i).ranked(score=s, rank=r) for r, (i, s) in enumerate(self.hits[:k])]


HEALTHY = [("a", 3.0), ("b", 2.0), ("c", 1.0)]


def errors_logged(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR and r.name.startswith("fastrag")]


async def test_a_branch_past_its_timeout_raises_a_typed_error_and_is_cancelled() -> None:
    slow = Fixed(HEALTHY, delay=60)
    hybrid = HybridRetriever({"fast": Fixed(HEALTHY), "slow": slow}, branch_timeout=0.05)
    with anyio.fail_after(10), pytest.raises(RetrievalTimeoutError) as caught:
        await hybrid.retrieve("q", k=3)
    assert caught.value.stage == "slow" and caught.value.timeout == 0.05 and "'slow'" in str(caught.value)
    assert isinstance(caught.value, TransientBackendError) and isinstance(caught.value, BackendError)
    assert slow.cancelled and not slow.finished


async def test_without_a_timeout_a_slow_branch_is_waited_for() -> None:
    hybrid = HybridRetriever({"fast": Fixed(HEALTHY), "slow": Fixed(HEALTHY, delay=0.05)})
    assert [d.id for d in await hybrid.retrieve("q", k=3)] == ["a", "b", "c"]


async def test_partial_returns_the_healthy_branches_marked_partial_and_names_the_timed_out_one() -> None:
    hybrid = HybridRetriever({"fast": Fixed(HEALTHY), "slow": Fixed([("z", 9.0)], delay=60)},
                             branch_timeout=0.05, on_branch_error="partial")  # fmt: skip
    with anyio.fail_after(10):
        result = await hybrid.retrieve_result("q", k=3)
    assert not result.retrieval_failed and result.partial
    assert [d.id for d in result.documents] == ["a", "b", "c"]
    assert list(result.failed_branches) == ["slow"]
    assert isinstance(result.failed_branches["slow"], RetrievalTimeoutError)
    assert all(set(d.branches) == {"fast"} for d in result.documents)


async def test_partial_keeps_the_healthy_branch_order_under_mapping_weights(caplog) -> None:
    # the shipped default for bm25 + vector weighs branches by name; a missing branch must not break it
    store = FaultyStore(InMemoryStore(), methods={"search_vector"})
    embedder = HashingEmbedder()
    docs = [Document(id=f"d{i}", content=" ".join(["solar"] * (i + 1) + ["filler"] * (10 - i))) for i in range(6)]
    await store.store.upsert(docs, embeddings=await embedder.embed_documents([d.content for d in docs]))
    bm25_alone = await BM25Retriever(store=store).retrieve("solar", k=4)
    hybrid = HybridRetriever({"vector": VectorRetriever(vector_store=store, embedder=embedder),
                              "bm25": BM25Retriever(store=store)},
                             fusion=ReciprocalRankFusion(weights={"vector": 1.0, "bm25": 2.0}),
                             on_branch_error="partial")  # fmt: skip
    docs_out = await hybrid.retrieve("solar", k=4)  # plain retrieve(): documents, and an ERROR log
    assert [d.id for d in docs_out] == [d.id for d in bm25_alone]
    [record] = errors_logged(caplog)
    assert "'vector'" in record.getMessage() and "partial" in record.getMessage()
    result = await hybrid.retrieve_result("solar", k=4)
    assert result.partial and list(result.failed_branches) == ["vector"]
    assert isinstance(result.failed_branches["vector"], BackendUnavailableError)


async def test_raise_policy_fails_the_call_with_the_branch_error() -> None:
    error = BackendError("index is gone", store="bm25.db")
    hybrid = HybridRetriever({"fast": Fixed(HEALTHY), "broken": Fixed(error=error)})
    with pytest.raises(BackendError) as caught:
        await hybrid.retrieve("q")
    assert caught.value is error
    result = await hybrid.retrieve_result("q")
    assert result.retrieval_failed and result.error is error and not result.partial


@pytest.mark.parametrize("policy", ["raise", "partial"])
async def test_when_every_branch_fails_the_first_error_is_raised_naming_the_others(policy) -> None:
    first, second = BackendUnavailableError("down", store="a"), BackendError("broken", store="b")
    hybrid = HybridRetriever({"one": Fixed(error=first), "two": Fixed(error=second)}, on_branch_error=policy)
    with pytest.raises(BackendUnavailableError) as caught:  # one typed error, never an ExceptionGroup
        await hybrid.retrieve("q")
    assert caught.value is first and any("'two'" in note and "broken" in note for note in caught.value.__notes__)
    result = await hybrid.retrieve_result("q")
    assert result.retrieval_failed and result.error is first and not result.partial
    assert dict(result.failed_branches) == {"one": first, "two": second}


async def test_partial_waits_for_the_healthy_branches_instead_of_cancelling_them() -> None:
    late = Fixed(HEALTHY, delay=0.05)
    hybrid = HybridRetriever({"broken": Fixed(error=BackendError("x")), "late": late}, on_branch_error="partial")
    assert [d.id for d in await hybrid.retrieve("q", k=3)] == ["a", "b", "c"]
    assert late.finished and not late.cancelled


async def test_nested_hybrid_failures_are_named_by_path() -> None:
    inner = HybridRetriever({"x": Fixed(HEALTHY), "y": Fixed(error=BackendError("y down"))}, on_branch_error="partial")
    outer = HybridRetriever({"inner": inner, "z": Fixed(HEALTHY)})
    result = await outer.retrieve_result("q", k=3)
    assert result.partial and list(result.failed_branches) == ["inner/y"]
    assert {"inner", "inner/x", "inner/y", "inner/fusion", "z", "fusion", "total"} <= set(result.timings)


@pytest.mark.parametrize(
    "kwargs",
    [{"branch_timeout": 0}, {"branch_timeout": -1}, {"branch_timeout": math.nan}, {"branch_timeout": math.inf},
     {"branch_timeout": "1"}, {"branch_timeout": True}, {"on_branch_error": "ignore"}, {"on_branch_error": None}],
)  # fmt: skip
def test_bad_fault_settings_are_rejected(kwargs) -> None:
    with pytest.raises(InvalidParameterError):
        HybridRetriever([Fixed()], **kwargs)
