"""A knowledge base (or any fastrag retriever) as a LangChain retriever.

Needs LangChain's core package: ``pip install "fastrag-retrieval[langchain]"`` (``langchain-core`` 1.8 or
later; the class passes ``langchain-tests``' standard retriever tests).

::

    from fastrag import KnowledgeBase
    from fastrag.integrations.langchain import LangChainRetriever

    async with KnowledgeBase("sqlite:///kb.db") as kb:
        retriever = LangChainRetriever(retriever=kb, k=5)
        docs = await retriever.ainvoke("how are results fused?")            # async, on your loop
        docs = retriever.invoke("how are results fused?", k=2,               # sync, loop or no loop
                                filter={"equals": {"key": "lang", "value": "en"}})
        docs[0].metadata["score"], docs[0].metadata["rank"], docs[0].metadata["source"]

    keyword_only = LangChainRetriever(retriever=kb.as_retriever(mode="keyword", user_id="alice"))

``ainvoke`` awaits the search natively on the caller's event loop; ``invoke`` runs it through
:func:`~fastrag.integrations.bridge.run_sync` (fastrag's background loop), so it works in plain scripts and
inside a running loop alike.
"""

from __future__ import annotations

from typing import Any

import fastrag.integrations._adapter as _adapter
from fastrag.models import SOURCE_URI
from fastrag.models import Document as FastragDocument

try:
    from langchain_core.callbacks import (
        AsyncCallbackManagerForRetrieverRun,
        CallbackManagerForRetrieverRun,
    )
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from pydantic import ConfigDict, Field
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise _adapter.missing_framework(__name__, "LangChain (langchain-core)", 'pip install "fastrag-retrieval[langchain]"', exc) from exc

__all__ = ["SOURCE", "LangChainRetriever", "to_langchain_document"]

SOURCE = "source"
"""The metadata key LangChain's loaders and chains read a document's origin from; set to fastrag's
``source_uri`` (when the document has one and no ``source`` of its own)."""


def to_langchain_document(doc: FastragDocument) -> Document:
    """A fastrag result as a LangChain ``Document``: the same ``id`` and text (``page_content``), and fastrag's
    metadata as plain data (``score``, ``rank``, ``branches``, ``source_uri``, ...) plus ``source``."""
    metadata = _adapter.plain_metadata(doc)
    if doc.metadata.get(SOURCE_URI) is not None:
        metadata.setdefault(SOURCE, doc.metadata[SOURCE_URI])
    return Document(id=doc.id, page_content=doc.content, metadata=metadata)


class LangChainRetriever(BaseRetriever):
    """A LangChain ``BaseRetriever`` over a fastrag knowledge base or retriever.

    Built with keyword arguments, as every LangChain retriever (a pydantic model):
    ``LangChainRetriever(retriever=kb, k=5, filter={...})``.

    Attributes:
        retriever: a :class:`~fastrag.knowledge_base.KnowledgeBase` (searched through
            :meth:`~fastrag.knowledge_base.KnowledgeBase.as_retriever`: its settings, no scope) or any fastrag
            :class:`~fastrag.protocols.Retriever`, such as ``kb.as_retriever(mode="keyword", user_id="alice")``.
        k: documents to return (1 to 10,000); ``None``: a knowledge base's resolved ``top_k`` (20 unless set),
            10 for another retriever. A call's ``k`` replaces it.
        filter: a fastrag filter (its JSON form, a JSON string, or an AST node; :mod:`fastrag.filters`) every
            call applies unless it passes its own ``filter``, which replaces this one.

    Calls (``invoke(query, k=..., filter=...)``, ``ainvoke``, ``batch``, ...) return LangChain ``Document``\\ s,
    best first, with ``id`` the fastrag id and ``metadata`` holding ``score`` (higher is better; the range is
    the last stage's, see :attr:`~fastrag.knowledge_base.SearchResponse.documents`), zero-based ``rank``,
    ``branches`` (``{branch: {"score", "rank"}}`` for a fused or reranked result), ``source_uri`` and
    ``source`` (the same value), and the document's own metadata.

    Raises:
        ConfigurationError: (at construction) ``retriever`` is neither a knowledge base nor a retriever.
        InvalidParameterError: ``k`` is not an int in [1, 10000]; an invalid query.
        FilterError: a malformed filter (at construction for ``filter=``, at the call for a call's).
        BackendError, EmbeddingError, RerankerError: the search failed (see
            :meth:`~fastrag.knowledge_base.KnowledgeBase.search`).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    retriever: Any = Field(description="the fastrag retriever searched (a knowledge base's as_retriever())")
    k: int | None = None
    filter: Any = None

    def __init__(self, **data: Any) -> None:
        # checked here rather than in pydantic validators, which would turn fastrag's typed errors (ValueErrors)
        # into a pydantic ValidationError
        if "retriever" in data:
            data["retriever"] = _adapter.target(data["retriever"])
        if data.get("k") is not None:
            _adapter.check_k(data["k"])
        if data.get("filter") is not None:
            data["filter"] = _adapter.check_filter(data["filter"])
        super().__init__(**data)

    def _call(self, k: Any, filter: Any) -> tuple[int, Any]:
        return _adapter.resolve_k(self.k if k is None else k, self.retriever), _adapter.check_filter(
            self.filter if filter is None else filter
        )

    async def _search(self, query: str, k: Any, filter: Any) -> list[Document]:
        k, node = self._call(k, filter)
        found = await _adapter.search(self.retriever, query, k=k, filter=node)
        return [to_langchain_document(doc) for doc in found]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None, filter: Any = None
    ) -> list[Document]:
        from fastrag.integrations.bridge import run_sync

        return run_sync(self._search, query, k, filter)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, k: int | None = None, filter: Any = None
    ) -> list[Document]:
        return await self._search(query, k, filter)
