"""A knowledge base (or any fastrag retriever) where users already are: LangChain, LlamaIndex and Haystack.

Each adapter is one more caller of the same search: handed a :class:`~fastrag.knowledge_base.KnowledgeBase` it
calls :meth:`~fastrag.knowledge_base.KnowledgeBase.as_retriever` (so a question is planned by
:mod:`fastrag.planning` exactly as from Python, the command line, ``fastrag serve`` and the tool, and returns
the same ids, ranks and scores); handed any :class:`~fastrag.protocols.Retriever` (``kb.as_retriever(mode=
"keyword", user_id="alice")``, a :class:`~fastrag.retrieval.HybridRetriever`, ...) it calls that. No adapter
composes retrievers of its own.

- :mod:`fastrag.integrations.langchain`: ``LangChainRetriever``, a LangChain ``BaseRetriever``
  (``pip install "fastrag-retrieval[langchain]"``);
- :mod:`fastrag.integrations.llama_index`: ``LlamaIndexRetriever``, a LlamaIndex ``BaseRetriever`` returning
  ``NodeWithScore`` (``pip install "fastrag-retrieval[llama-index]"``);
- :mod:`fastrag.integrations.haystack`: ``HaystackRetriever``, a Haystack component, and
  ``translate_filters``, Haystack's filter syntax to fastrag's AST (``pip install "fastrag-retrieval[haystack]"``);
- :mod:`fastrag.integrations.bridge`: :func:`~fastrag.integrations.bridge.run_sync`, the event loop of the
  adapters' sync entry points (no extra).

``pip install "fastrag-retrieval[integrations]"`` installs all three frameworks. Importing this package (or
``import fastrag``) loads none of them; importing an adapter whose framework is missing raises ``ImportError``
with the ``pip install`` line to run.

Every adapter is async natively (its framework's async entry point awaits the search on the caller's event
loop) and sync through :func:`~fastrag.integrations.bridge.run_sync`, which works inside and outside a
running event loop. Each result carries fastrag's metadata as plain data: ``score`` (higher is better; its
range is the last stage's, see :attr:`~fastrag.knowledge_base.SearchResponse.documents`), zero-based
``rank``, ``branches`` (per-branch score and rank of a fused or reranked result) and ``source_uri``.
"""

from __future__ import annotations

__all__: list[str] = []
