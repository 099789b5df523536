"""A knowledge base: stores, embedder, sources, metadata schema and search settings behind one object.

::

    async with KnowledgeBase("sqlite:///kb.db", sources=["docs/"], fields={"year": "long"}) as kb:
        await kb.sync()                                   # index the sources (incremental)
        await kb.add_documents(notes, user_id="alice")    # alice's own notes
        docs = await kb.search("how are documents ranked?", user_id="alice", top_k=5)
        tool = kb.as_tool(user_id="alice")                # a function-calling tool over the same search

Search settings resolve field by field: the request (keyword arguments of :meth:`KnowledgeBase.search`),
then the knowledge base (``settings=``), then the system defaults: :data:`SYSTEM_DEFAULTS` (hybrid search,
weighted min-max fusion 0.7 dense / 0.3 BM25, 20 results), except that the fusion weights follow the
measured table :data:`~fastrag.retrieval.hybrid.LEXICAL_WEIGHT_BY_EMBEDDER` when the embedder is one of the
static models shipped with fastrag (BM25 0.9 / dense 0.1; origin ``"default:embedder"``).
:meth:`KnowledgeBase.search_result` returns the resolved settings, where each came from, and which strategy
ran.

Writes go to the vector store and, when there is a separate one, the lexical (BM25) store: every
``add_documents``, ``delete`` and ``clear`` hits both, so the two indexes hold the same documents. Nothing
is rebuilt when a persisted knowledge base is opened again; :meth:`KnowledgeBase.sync` re-embeds only the
files that changed.

Scoping (tenants): ``user_id=``, ``agent_id=`` or ``scope={"any_key": value}`` on a write stamps the
documents with those keys and stores them under scope-qualified ids; on a search, count or delete it
confines the call to documents carrying all of those keys (see :class:`KnowledgeBase`). A write whose
documents carry a tenant key the call's scope does not set to the same value is refused, so no write (and
no unscoped write) can plant a document in a tenant's view.
"""


from __future__ import annotations

from fastrag.knowledge_base.facade import KnowledgeBase
from fastrag.knowledge_base.response import SearchResponse
from fastrag.knowledge_base.schema import FIELD_TYPES
from fastrag.knowledge_base.retriever import KnowledgeBaseRetriever
from fastrag.scoping import MAX_SCOPE_INT, MIN_SCOPE_INT
from fastrag.settings import (
    AUTO_DIRECT_MAX,
    AUTO_RERANK_MIN,
    AUTO_WIDE_RETRIEVAL_K,
    FUSIONS,
    MAX_RANK_CONSTANT,
    MAX_WEIGHT,
    SEARCH_MODES,
    SYSTEM_DEFAULTS,
    ResolvedSearchSettings,
    SearchSettings,
    resolve_settings,
)

__all__ = [
    "AUTO_DIRECT_MAX",
    "AUTO_RERANK_MIN",
    "AUTO_WIDE_RETRIEVAL_K",
    "FIELD_TYPES",
    "FUSIONS",
    "MAX_RANK_CONSTANT",
    "MAX_SCOPE_INT",
    "MAX_WEIGHT",
    "MIN_SCOPE_INT",
    "SEARCH_MODES",
    "SYSTEM_DEFAULTS",
    "KnowledgeBase",
    "KnowledgeBaseRetriever",
    "ResolvedSearchSettings",
    "SearchResponse",
    "SearchSettings",
    "resolve_settings",
]
