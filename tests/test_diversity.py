"""MMR (Carbonell & Goldstein 1998) as an opt-in stage over any retriever, at every entrance (issue 25.7)."""

from __future__ import annotations

import numpy as np
import pytest

from fastrag import Document
from fastrag.errors import InvalidParameterError
from fastrag.knowledge_base import KnowledgeBase
from fastrag.retrieval.diversity import MMRRetriever, mmr_order
from fastrag.settings import SearchSettings

pytestmark = pytest.mark.anyio

# the question points along x; a and a2 are near-duplicates along x, b is off to the side
VECTORS = {"q": [1.0, 0.0, 0.0], "a": [1.0, 0.1, 0.0], "a2": [1.0, 0.12, 0.0], "b": [0.6, 0.0, 0.8]}


class Axes:
    """An embedder whose vectors are VECTORS by text."""

    name = "axes"
    dimension = 3

    async def embed_query(self, text: str) -> np.ndarray:
        return np.asarray(VECTORS[text], dtype=np.float32)

    async def embed_documents(self, texts: list[str]) -> np.ndarray:
        return np.asarray([VECTORS[t] for t in texts], dtype=np.float32)


class Listed:
    """A first stage that returns the documents a, a2, b in that order (by relevance)."""

    async def retrieve(self, query: str, *, k: int = 10, filter=None) -> list[Document]:  # noqa: A002
        docs = [Document(id=t, content=t) for t in ("a", "a2", "b")]
        return [d.ranked(score=1.0 - i / 10, rank=i) for i, d in enumerate(docs)][:k]


def _cos(x, y) -> float:
    x, y = np.asarray(x), np.asarray(y)
    return float(x @ y / np.linalg.norm(x) / np.linalg.norm(y))


def test_mmr_picks_by_the_formula_worked_by_hand() -> None:
    q, a, a2, b = (VECTORS[t] for t in ("q", "a", "a2", "b"))
    picked, values = mmr_order(np.array(q), np.array([a, a2, b]), mmr_lambda=0.5, n=3)
    # first: the most relevant (a); second: b, since a2 repeats a: 0.5*cos(q,b) - 0.5*cos(b,a) beats
    # 0.5*cos(q,a2) - 0.5*cos(a2,a)
    assert picked == [0, 2, 1]
    assert values[0] == pytest.approx(0.5 * _cos(q, a))
    assert values[1] == pytest.approx(0.5 * _cos(q, b) - 0.5 * _cos(b, a))
    assert values[2] == pytest.approx(0.5 * _cos(q, a2) - 0.5 * max(_cos(a2, a), _cos(a2, b)))
    # lambda 1: relevance alone, the cosine order
    assert mmr_order(np.array(q), np.array([a, a2, b]), mmr_lambda=1.0, n=3)[0] == [0, 1, 2]


async def test_a_near_duplicate_falls_below_a_different_result_and_pages_agree() -> None:
    mmr = MMRRetriever(Listed(), embedder=Axes(), mmr_lambda=0.5, candidate_k=3)
    found = await mmr.retrieve("q", k=3)
    assert [d.id for d in found] == ["a", "b", "a2"]
    assert [d.rank for d in found] == [0, 1, 2]
    assert found[1].branches["first_stage"].rank == 2 and found[1].branches["mmr"].rank == 1
    assert [d.id for d in await mmr.retrieve("q", k=1, offset=1)] == ["b"]  # the second page is the list's rank 1


def test_mmr_lambda_out_of_range_is_refused() -> None:
    with pytest.raises(InvalidParameterError, match="mmr_lambda"):
        MMRRetriever(Listed(), embedder=Axes(), mmr_lambda=1.5)
    with pytest.raises(InvalidParameterError, match="mmr_lambda"):
        SearchSettings(mmr_lambda=-0.1)


async def test_the_knowledge_base_diversifies_with_mmr_lambda() -> None:
    docs = [Document(id="a", content="solar panels convert sunlight into electricity on roofs"),
            Document(id="a2", content="solar panels convert sunlight into electricity on rooftops"),
            Document(id="b", content="wind turbines also make electricity from moving air")]  # fmt: skip
    async with KnowledgeBase("sqlite:///:memory:") as kb:
        await kb.add_documents(docs)
        plain = await kb.search_result("solar electricity", top_k=3, mode="vector")
        diverse = await kb.search_result("solar electricity", top_k=3, mode="vector", mmr_lambda=0.3)
    assert [d.id for d in plain.documents][:2] == ["a", "a2"] or [d.id for d in plain.documents][:2] == ["a2", "a"]
    assert [d.id for d in diverse.documents][1] == "b"  # the near-duplicate no longer takes the second place
    assert diverse.strategy == "vector+mmr" and diverse.settings.origin("mmr_lambda") == "request"
