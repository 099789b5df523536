"""Bounds on what one retrieval call may ask for, checked before any backend call.

Every retriever in :mod:`fastrag.retrieval` takes ``limits=`` (default :data:`DEFAULT_LIMITS`) and raises
:class:`~fastrag.errors.InvalidParameterError` for a call outside them. The names are defined in
:mod:`fastrag.limits` (below retrieval, so that stores can check the same bounds) and re-exported here,
their original import path.
"""

from __future__ import annotations

from fastrag.limits import DEFAULT_LIMITS, MAX_K, MAX_QUERY_CHARS, RetrievalLimits

__all__ = ["DEFAULT_LIMITS", "MAX_K", "MAX_QUERY_CHARS", "RetrievalLimits"]
