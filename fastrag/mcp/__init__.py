"""``fastrag mcp``: knowledge bases as Model Context Protocol tools, over stdio or streamable HTTP.

Needs the ``mcp`` extra (``pip install "fastrag-retrieval[mcp]"``, the official ``mcp`` SDK). See docs/mcp.md.

Each knowledge base of a ``knowledge_bases.toml`` (the file ``fastrag serve`` reads, parsed by
:func:`fastrag.serve.config.load_config`) is one search tool, ``search_<name>``, built by
:meth:`~fastrag.knowledge_base.KnowledgeBase.as_tool` and called through
:meth:`~fastrag.tool.KnowledgeBaseTool.run`: the tool's input schema is the knowledge-base tool's, and what
it answers is what ``run`` returns (results with ``complete``, ``partial``, ``failed_branches``,
``skipped_branches``, ``incomplete``). Over HTTP the ``[serve.tokens]`` bearer tokens bind callers to tenants
and knowledge bases exactly as they do for ``fastrag serve``.

* :mod:`fastrag.mcp.server`: :func:`~fastrag.mcp.server.create_server` and
  :func:`~fastrag.mcp.server.server_from_config` build a :class:`~fastrag.mcp.server.KnowledgeBaseServer`
  (the SDK's server, served over stdio or as a streamable HTTP app with bearer tokens).
"""

from __future__ import annotations

__all__ = ["KnowledgeBaseServer", "create_server", "server_from_config", "tool_name"]


def __getattr__(name: str) -> object:
    # the server needs the mcp SDK (the mcp extra; fastrag.mcp.server says how to install it); this package does not
    if name in __all__:
        from fastrag.mcp import server

        return getattr(server, name)
    raise AttributeError(f"module 'fastrag.mcp' has no attribute {name!r}")
