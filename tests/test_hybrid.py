"""HybridRetriever: concurrent branches, the same filter everywhere, fused output, early validation."""

import anyio
import pytest

from fastrag.errors import BackendError, FilterError, InvalidParameterError
from fastrag.filters import field, parse_filter
from fastrag.models import Document
from fastrag.retrieval.fusion import ReciprocalRankFusion, WeightedScoreFusion
from fastrag.retrieval.hybrid import HybridRetriever

pytestmark = pytest.mark.anyio


class FakeRetriever:
    """Returns fixed (id, score) pairs as ranked copies and records every call."""

    def __init__(self, hits=(), *, name=None):
        self.hits = list(hits)
        self.calls = []
        if name is not None:
            self.name = name

    async def retrieve(self, query, *, k=10, filter=None):  # noqa: A002
        self.calls.append({"query": query, "k": k, "filter": filter})
        return [
            Document(id=i, content=f"text of {i}", metadata={"score": s, "rank": r})
            for r, (i, s) in enumerate(self.hits[:k])
        ]


class VectorRetriever(FakeRetriever):
    pass


class BM25Retriever(FakeRetriever):
    pass


class WaitingRetriever(FakeRetriever):
    """Sets its own event, then waits for ``other``; deadlocks unless branches run concurrently."""

    def __init__(self, hits, *, mine: anyio.Event, other: anyio.Event):
        super().__init__(hits)
        self.mine, self.other = mine, other

    async def retrieve(self, query, *, k=10, filter=None):  # noqa: A002
        self.mine.set()
        await self.other.wait()
        return await super().retrieve(query, k=k, filter=filter)


class FailingRetriever(FakeRetriever):
    async def retrieve(self, query, *, k=10, filter=None):  # noqa: A002
        await anyio.sleep(0)
        raise BackendError("index is gone", store="bm25.db")


class HangingRetriever(FakeRetriever):
    cancelled = False

    async def retrieve(self, query, *, k=10, filter=None):  # noqa: A002
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            self.cancelled = True
            raise


async def test_branches_run_concurrently():
    a_started, b_started = anyio.Event(), anyio.Event()
    a = WaitingRetriever([("x", 1.0)], mine=a_started, other=b_started)
    b = WaitingRetriever([("y", 1.0)], mine=b_started, other=a_started)
    with anyio.fail_after(5):  # run one after the other, a would wait for b forever
        fused = await HybridRetriever({"a": a, "b": b}).retrieve("q")
    assert sorted(d.id for d in fused) == ["x", "y"]


async def test_fuses_branch_results_with_provenance():
    vector = VectorRetriever([("b", 0.75), ("d", 0.5), ("a", 0.25)])
    bm25 = BM25Retriever([("a", 10.0), ("b", 6.0), ("c", 2.0)])
    # Min-max without a floor, equal weights (the default fusion is pinned in tests/test_default_fusion.py):
    #   bm25 a 1, b .5, c 0;  vector b 1, d .5, a 0
    #   b = .5*.5 + .5*1 = .75;  a = .5*1 + .5*0 = .5;  d = .5*.5 = .25;  c = 0
    fused = await HybridRetriever([vector, bm25], fusion=WeightedScoreFusion(normalization="min_max", floor=0)).retrieve("q", k=3)
    assert [d.id for d in fused] == ["b", "a", "d"]
    assert [d.score for d in fused] == pytest.approx([0.75, 0.5, 0.25])
    assert [d.rank for d in fused] == [0, 1, 2]
    assert fused[0].metadata["branches"] == {"bm25": {"score": 6.0, "rank": 1}, "vector": {"score": 0.75, "rank": 0}}


async def test_uses_the_given_fusion():
    # RRF, rank_constant=1: a = 1/2 + 1/4 = .75, b = 1/3 + 1/2 = .8333, d = 1/3, c = 1/4
    vector = VectorRetriever([("b", 0.75), ("d", 0.5), ("a", 0.25)])
    bm25 = BM25Retriever([("a", 10.0), ("b", 6.0), ("c", 2.0)])
    hybrid = HybridRetriever([bm25, vector], fusion=ReciprocalRankFusion(rank_constant=1))
    fused = await hybrid.retrieve("q")
    assert [d.id for d in fused] == ["b", "a", "d", "c"]
    assert [d.score for d in fused] == pytest.approx([5 / 6, 0.75, 1 / 3, 0.25])


async def test_filter_reaches_every_branch():
    branches = [FakeRetriever([("a", 1.0)]), FakeRetriever([("b", 1.0)]), FakeRetriever()]
    flt = (field("lang") == "en") & (field("year") >= 2020)
    await HybridRetriever(branches).retrieve("q", filter=flt)
    assert all(r.calls == [{"query": "q", "k": 200, "filter": flt}] for r in branches)  # default candidate_k
    # A JSON-form filter is parsed once and every branch gets the same AST.
    json_filter = {"equals": {"key": "lang", "value": "de"}}
    await HybridRetriever(branches).retrieve("q", filter=json_filter)
    assert all(r.calls[-1]["filter"] == parse_filter(json_filter) for r in branches)


async def test_each_branch_gets_max_of_candidate_k_and_k():
    a, b = FakeRetriever(), FakeRetriever()
    hybrid = HybridRetriever({"a": a, "b": b}, candidate_k=20)
    await hybrid.retrieve("q", k=5)
    await hybrid.retrieve("q", k=30)
    assert [c["k"] for c in a.calls] == [20, 30]
    assert [c["k"] for c in b.calls] == [20, 30]


async def test_sequence_weights_follow_branch_order_not_completion_order():
    # "slow" is listed first but finishes after "fast"; weights [1, 0] must still keep only "slow".
    fast_done, never = anyio.Event(), anyio.Event()
    slow = WaitingRetriever([("from_slow", 1.0)], mine=never, other=fast_done)

    class Fast(FakeRetriever):
        async def retrieve(self, query, *, k=10, filter=None):  # noqa: A002
            try:
                return await super().retrieve(query, k=k, filter=filter)
            finally:
                fast_done.set()

    hybrid = HybridRetriever([slow, Fast([("from_fast", 1.0)])], fusion=WeightedScoreFusion([1, 0]))
    with anyio.fail_after(5):
        fused = await hybrid.retrieve("q")
    assert [d.id for d in fused] == ["from_slow"]


def test_branch_names():
    names = list(
        HybridRetriever(
            [VectorRetriever(), BM25Retriever(), VectorRetriever(), FakeRetriever(name="dense"), VectorRetriever()]
        ).retrievers
    )
    assert names == ["vector", "bm25", "vector_1", "dense", "vector_2"]
    assert list(HybridRetriever({"kNN": FakeRetriever(), "text": FakeRetriever()}).retrievers) == ["kNN", "text"]
    # A hybrid retriever is itself a branch named "hybrid".
    inner = HybridRetriever([VectorRetriever()])
    assert list(HybridRetriever([inner, BM25Retriever()]).retrievers) == ["hybrid", "bm25"]


async def test_branch_error_propagates_unchanged_and_cancels_the_others():
    hanging = HangingRetriever()
    hybrid = HybridRetriever({"slow": hanging, "broken": FailingRetriever()})
    with anyio.fail_after(5), pytest.raises(BackendError, match="index is gone"):
        await hybrid.retrieve("q")
    assert hanging.cancelled


@pytest.mark.parametrize("k", [0, -1, 2.5, "10", True, None])
async def test_bad_k_raises_before_any_search(k):
    a, b = FakeRetriever([("a", 1.0)]), FakeRetriever([("b", 1.0)])
    with pytest.raises(InvalidParameterError):
        await HybridRetriever([a, b]).retrieve("q", k=k)
    assert a.calls == b.calls == []


async def test_malformed_filter_raises_before_any_search():
    a = FakeRetriever([("a", 1.0)])
    with pytest.raises(FilterError):
        await HybridRetriever([a]).retrieve("q", filter={"equals": {"key": "lang"}})
    assert a.calls == []


@pytest.mark.parametrize("query", ["", "   ", None])
async def test_blank_query_raises_one_error_before_any_search(query):
    a, b = FakeRetriever([("a", 1.0)]), FakeRetriever([("b", 1.0)])
    with pytest.raises(InvalidParameterError):
        await HybridRetriever([a, b]).retrieve(query)
    assert a.calls == b.calls == []


@pytest.mark.parametrize(
    "make",
    [
        lambda a: HybridRetriever([]),
        lambda a: HybridRetriever({}),
        lambda a: HybridRetriever([a], candidate_k=0),
        lambda a: HybridRetriever([a], candidate_k=-5),
        lambda a: HybridRetriever([a], candidate_k=2.5),
        lambda a: HybridRetriever([a, object()]),
        lambda a: HybridRetriever({"": a}),
        lambda a: HybridRetriever([a], fusion=object()),
        # weights that do not fit the branches are caught before any search, not after
        lambda a: HybridRetriever([a, FakeRetriever()], fusion=ReciprocalRankFusion(weights=[1, 2, 3])),
        lambda a: HybridRetriever({"x": a}, fusion=WeightedScoreFusion({"y": 1.0})),
    ],
)
def test_bad_construction_raises(make):
    a = FakeRetriever([("a", 1.0)])
    with pytest.raises(InvalidParameterError):
        make(a)
    assert a.calls == []
