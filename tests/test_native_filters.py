"""Native backend filters pass through the retrievers to the store untouched."""

from __future__ import annotations

import pytest

from fastrag.errors import UnsupportedFilterError
from fastrag.models import Document
from fastrag.retrieval import BM25Retriever, HybridRetriever, VectorRetriever
from fastrag.testing.fakes import HashingEmbedder


class NativeQuery:
    """Stands for a backend SDK's own filter object."""


class RecordingStore:
    def __init__(self) -> None:
        self.filters: list[object] = []

    async def search_text(self, query, *, k, filter=None):  # noqa: A002
        self.filters.append(filter)
        return [Document(id="t", content="t").ranked(score=1.0, rank=0)]

    async def search_vector(self, embedding, *, k, filter=None):  # noqa: A002
        self.filters.append(filter)
        return [Document(id="v", content="v").ranked(score=0.5, rank=0)]


@pytest.mark.anyio
async def test_native_filter_reaches_every_branch_unchanged():
    store, native = RecordingStore(), NativeQuery()
    hybrid = HybridRetriever([VectorRetriever(vector_store=store, embedder=HashingEmbedder()), BM25Retriever(store=store)])
    await hybrid.retrieve("question", k=2, filter=native)
    assert len(store.filters) == 2 and all(f is native for f in store.filters)


@pytest.mark.anyio
async def test_bm25_retriever_fixed_native_filter_is_passed_on():
    store, native = RecordingStore(), NativeQuery()
    await BM25Retriever(store=store, filter=native).retrieve("question", k=1)
    assert store.filters == [native]


@pytest.mark.anyio
async def test_native_and_fastrag_filters_are_not_silently_merged():
    store = RecordingStore()
    retriever = BM25Retriever(store=store, filter=NativeQuery())
    with pytest.raises(UnsupportedFilterError):
        await retriever.retrieve("question", k=1, filter={"equals": {"key": "a", "value": 1}})
    assert store.filters == []


