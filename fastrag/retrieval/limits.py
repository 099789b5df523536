"""Bounds on what one retrieval call may ask for, checked before any backend call.

Every retriever in :mod:`fastrag.retrieval` takes ``limits=`` (default :data:`DEFAULT_LIMITS`) and raises
:class:`~fastrag.errors.InvalidParameterError` for a call outside them.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastrag.errors import InvalidParameterError

__all__ = ["DEFAULT_LIMITS", "MAX_K", "MAX_QUERY_CHARS", "RetrievalLimits"]

MAX_K = 10_000
"""Default largest ``k`` (and ``candidate_k``, ``fetch_k``). 10,000 is the lowest hard limit among the
backends fastrag supports (OpenSearch ``index.max_result_window`` and k-NN ``k``; Milvus allows 16,384), so
a ``k`` that passes here never fails at a backend for its size, and one call never materialises more than
10,000 documents."""

MAX_QUERY_CHARS = 8_192
"""Default longest query, in characters (Python ``str`` length, i.e. code points). Far above any question a
person types and above what embedding models read (all-MiniLM-L6-v2 truncates at 256 word pieces, about
1,000 characters of English), it still bounds the work of one call: BM25 looks up each distinct query term."""


@dataclass(frozen=True, slots=True)
class RetrievalLimits:
    """Per-call bounds.

    Attributes:
        max_k: the largest ``k`` a call may ask for (an int >= 1).
        max_query_chars: the longest query, in characters (an int >= 1).

    Raises:
        InvalidParameterError: a bound is not a positive int.
    """

    max_k: int = MAX_K
    max_query_chars: int = MAX_QUERY_CHARS

    def __post_init__(self) -> None:
        for name in ("max_k", "max_query_chars"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InvalidParameterError(f"{name} must be a positive int, got {value!r}")


DEFAULT_LIMITS = RetrievalLimits()
"""``RetrievalLimits(max_k=10_000, max_query_chars=8_192)``."""
