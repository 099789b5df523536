"""A knowledge base as a :class:`~fastrag.protocols.Retriever` (:meth:`KnowledgeBase.as_retriever`)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from fastrag.models import (
    Document,
)

if TYPE_CHECKING:  # pragma: no cover
    from fastrag.knowledge_base.facade import KnowledgeBase
    from fastrag.retrieval.result import RetrievalResult


class KnowledgeBaseRetriever:
    """A :class:`~fastrag.protocols.Retriever` over a knowledge base's search (see
    :meth:`KnowledgeBase.as_retriever`)."""

    accepts_offset = True  # retrieve(..., offset=): fastrag.protocols.SupportsOffset

    name = "knowledge_base"

    def __init__(self, knowledge_base: KnowledgeBase, scope: Mapping[str, str | int], settings: Mapping[str, Any]) -> None:
        self.knowledge_base = knowledge_base
        self.scope = MappingProxyType(dict(scope))
        self.settings = MappingProxyType(dict(settings))

    async def retrieve(self, query: str, *, k: int | None = None, filter: Any = None, offset: int = 0) -> list[Document]:
        """:meth:`KnowledgeBase.search` for ``query`` with ``top_k=k`` (``None``: the resolved ``top_k`` of these
        settings; see there for the errors)."""
        return await self.knowledge_base.search(query, filter=filter, scope=dict(self.scope) or None, offset=offset,
                                                **self._with_k(k))  # fmt: skip

    def _with_k(self, k: int | None) -> dict[str, Any]:
        return {**self.settings, "top_k": k} if k is not None else dict(self.settings)

    async def retrieve_result(
        self, query: str, *, k: int | None = None, filter: Any = None, offset: int = 0
    ) -> RetrievalResult:
        """:meth:`KnowledgeBase.search_result` as a :class:`~fastrag.retrieval.result.RetrievalResult`
        (:meth:`~fastrag.knowledge_base.SearchResponse.as_result`)."""
        response = await self.knowledge_base.search_result(
            query, filter=filter, scope=dict(self.scope) or None, offset=offset, **self._with_k(k)
        )
        return response.as_result()

    def __repr__(self) -> str:
        return f"KnowledgeBaseRetriever({self.knowledge_base!r}, scope={dict(self.scope)!r}, settings={dict(self.settings)!r})"


