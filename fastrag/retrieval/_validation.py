"""Argument checks shared by the retrievers (raised before any search runs).

The checks of ``k``, queries and positive ints are :mod:`fastrag.limits`' (re-exported here for the
retrievers); :func:`fetch_limit`, which asks a wrapped retriever for its own limits, is retrieval's own.
"""

from __future__ import annotations

from typing import Any

from fastrag.limits import RetrievalLimits, check_k, check_positive_int, check_query

__all__ = ["check_k", "check_positive_int", "check_query", "fetch_limit"]


def fetch_limit(retriever: Any, limits: RetrievalLimits) -> int:
    """The most documents to ask ``retriever`` for: ``limits.max_k``, or less if its own limits say so."""
    own = getattr(retriever, "limits", None)
    return min(limits.max_k, own.max_k) if isinstance(own, RetrievalLimits) else limits.max_k
