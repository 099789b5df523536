"""A knowledge base (or any fastrag retriever) as a LlamaIndex retriever.

Needs LlamaIndex's core package: ``pip install "fastrag-retrieval[llama-index]"`` (``llama-index-core`` 0.14).

::

    from fastrag import KnowledgeBase
    from fastrag.integrations.llama_index import LlamaIndexRetriever
    from llama_index.core.query_engine import RetrieverQueryEngine

    async with KnowledgeBase("sqlite:///kb.db") as kb:
        retriever = LlamaIndexRetriever(kb, similarity_top_k=5)
        nodes = await retriever.aretrieve("how are results fused?")      # NodeWithScore, best first
        engine = RetrieverQueryEngine.from_args(retriever, llm=my_llm)   # any LlamaIndex LLM
        answer = await engine.aquery("how are results fused?")

``aretrieve`` (and so a query engine's ``aquery``) awaits the search natively on the caller's event loop;
``retrieve`` runs it through :func:`~fastrag.integrations.bridge.run_sync`, inside or outside a running loop.
"""

from __future__ import annotations

from typing import Any

import fastrag.integrations._adapter as _adapter
from fastrag.models import (
    BRANCHES,
    CHUNK_INDEX,
    CONTENT_HASH,
    GROUP,
    PARENT_ID,
    RANK,
    SCORE,
)
from fastrag.models import Document as FastragDocument

try:
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import (
        NodeRelationship,
        NodeWithScore,
        QueryBundle,
        RelatedNodeInfo,
        TextNode,
    )
    from llama_index.core.vector_stores.types import MetadataFilters
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise _adapter.missing_framework(__name__, "LlamaIndex (llama-index-core)", 'pip install "fastrag-retrieval[llama-index]"', exc) from exc

__all__ = ["HIDDEN_METADATA_KEYS", "LlamaIndexRetriever", "to_node_with_score"]

HIDDEN_METADATA_KEYS: tuple[str, ...] = (
    SCORE, RANK, BRANCHES, GROUP, CONTENT_HASH, CHUNK_INDEX, PARENT_ID, "chunker", "section_index", "section_start",
    "section_end",
)  # fmt: skip
"""Metadata keys a node keeps but does not show an LLM or an embedding model (``excluded_llm_metadata_keys``,
``excluded_embed_metadata_keys``): the ranking stamps and fastrag's bookkeeping. ``source_uri``, ``title``,
``headings`` and ``page`` stay visible, so an answer can cite them."""


def to_node_with_score(doc: FastragDocument) -> NodeWithScore:
    """A fastrag result as a LlamaIndex ``NodeWithScore``: a ``TextNode`` with the fastrag id (``id_``), text and
    metadata (plain data: ``score``, ``rank``, ``branches``, ``source_uri``, ...; :data:`HIDDEN_METADATA_KEYS`
    hidden from models), its parent document as the ``SOURCE`` relationship when it has one, and the score."""
    metadata = _adapter.plain_metadata(doc)
    relationships = {}
    if isinstance(metadata.get(PARENT_ID), str) and metadata[PARENT_ID]:
        relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=metadata[PARENT_ID])
    hidden = [key for key in HIDDEN_METADATA_KEYS if key in metadata]
    node = TextNode(id_=doc.id, text=doc.content, metadata=metadata, relationships=relationships,
                    excluded_llm_metadata_keys=hidden, excluded_embed_metadata_keys=list(hidden))  # fmt: skip
    return NodeWithScore(node=node, score=doc.score)


class LlamaIndexRetriever(BaseRetriever):
    """A LlamaIndex ``BaseRetriever`` over a fastrag knowledge base or retriever, returning ``NodeWithScore``.

    Args:
        retriever: a :class:`~fastrag.knowledge_base.KnowledgeBase` (searched through
            :meth:`~fastrag.knowledge_base.KnowledgeBase.as_retriever`: its settings, no scope) or any fastrag
            :class:`~fastrag.protocols.Retriever`, such as ``kb.as_retriever(mode="keyword", user_id="alice")``.
        similarity_top_k: nodes to return (1 to 10,000; LlamaIndex's name for ``k``); ``None``: a knowledge base's
            resolved ``top_k`` (20 unless set), 10 for another retriever.
        filter: a fastrag filter in its JSON form, a JSON string or an AST node (:mod:`fastrag.filters`), applied
            to every call. LlamaIndex's ``MetadataFilters`` are refused (they are not translated).
        callback_manager: LlamaIndex's callback manager; ``None``: the global one.

    A call returns ``NodeWithScore``\\ s best first (see :func:`to_node_with_score`): ``score`` is fastrag's
    (higher is better; the range is the last stage's, see :attr:`~fastrag.knowledge_base.SearchResponse.documents`),
    and the node's metadata holds ``score``, zero-based ``rank``, ``branches`` and ``source_uri`` too. The
    question's text is searched (fastrag embeds it itself); a ``QueryBundle``'s embedding is not used.

    Raises:
        ConfigurationError: (at construction) ``retriever`` is neither a knowledge base nor a retriever.
        InvalidParameterError: ``similarity_top_k`` is not an int in [1, 10000]; an invalid query.
        FilterError: (at construction) a malformed filter, or a ``MetadataFilters``.
        BackendError, EmbeddingError, RerankerError: the search failed (see
            :meth:`~fastrag.knowledge_base.KnowledgeBase.search`).
    """

    def __init__(
        self,
        retriever: Any,
        *,
        similarity_top_k: int | None = None,
        filter: Any = None,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        if isinstance(filter, MetadataFilters):
            _adapter.refuse_filter_object(filter, "LlamaIndex")
        self.retriever = _adapter.target(retriever)
        self.similarity_top_k = None if similarity_top_k is None else _adapter.check_k(similarity_top_k, name="similarity_top_k")
        self.filter = _adapter.check_filter(filter)
        super().__init__(callback_manager=callback_manager)

    async def _search(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        k = _adapter.resolve_k(self.similarity_top_k, self.retriever)
        found = await _adapter.search(self.retriever, query_bundle.query_str, k=k, filter=self.filter)
        return [to_node_with_score(doc) for doc in found]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        from fastrag.integrations.bridge import run_sync

        return run_sync(self._search, query_bundle)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return await self._search(query_bundle)
