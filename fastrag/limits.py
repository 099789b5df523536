"""Bounds on what one call may ask for, and the checks of a call's arguments against them.

Every retriever in :mod:`fastrag.retrieval` takes ``limits=`` (default :data:`DEFAULT_LIMITS`) and raises
:class:`~fastrag.errors.InvalidParameterError` for a call outside them, before any backend call. The stores'
native hybrid retrievers and the rerankers run the same checks, which is why they live here, below both
retrieval and the stores (STYLE.md: stores never import retrieval). :mod:`fastrag.retrieval.limits` re-exports
the limits under their original path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastrag.errors import InvalidParameterError

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_K",
    "MAX_QUERY_CHARS",
    "RetrievalLimits",
    "check_k",
    "check_offset",
    "check_positive_int",
    "check_query",
]

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


def check_positive_int(value: Any, name: str, *, maximum: int | None = None) -> int:
    """Return ``value`` if it is an int > 0 (bools rejected) and at most ``maximum``.

    Raises:
        InvalidParameterError: otherwise.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidParameterError(f"{name} must be a positive int, got {value!r}")
    if maximum is not None and value > maximum:
        raise InvalidParameterError(f"{name} must be at most {maximum}, got {value}")
    return value


def check_k(k: Any, limits: RetrievalLimits = DEFAULT_LIMITS, name: str = "k") -> int:
    """Return ``k`` if it is an int in ``[1, limits.max_k]``, else raise :class:`InvalidParameterError`."""
    return check_positive_int(k, name, maximum=limits.max_k)


def check_query(query: Any, limits: RetrievalLimits = DEFAULT_LIMITS) -> str:
    """Return ``query`` if it is a non-blank string of valid Unicode within ``limits.max_query_chars``.

    Control characters and NUL are allowed (they are dropped by text analysis); a lone surrogate is not,
    since no backend can encode it as UTF-8.

    Raises:
        InvalidParameterError: not a string, blank, too long, or not encodable as UTF-8.
    """
    if not isinstance(query, str):
        raise InvalidParameterError(f"query must be a string, got {type(query).__name__}")
    if len(query) > limits.max_query_chars:
        raise InvalidParameterError(
            f"query is {len(query)} characters long; the limit is {limits.max_query_chars}"
        )
    if not query.strip():
        raise InvalidParameterError("query is empty or only whitespace")
    try:
        query.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidParameterError(f"query is not valid Unicode: {exc.reason} at position {exc.start}") from exc
    return query


def check_offset(offset: Any, k: int, limits: RetrievalLimits = DEFAULT_LIMITS) -> int:
    """``offset`` if it is an int >= 0 with ``offset + k <= limits.max_k`` (see :mod:`fastrag.retrieval.pagination`).

    Raises:
        InvalidParameterError: otherwise (the message names the limit).
    """
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidParameterError(f"offset must be an int >= 0, got {offset!r}")
    if offset + k > limits.max_k:
        raise InvalidParameterError(
            f"offset + k = {offset + k} is more than max_k={limits.max_k}: pages end at the {limits.max_k}th result"
        )
    return offset
