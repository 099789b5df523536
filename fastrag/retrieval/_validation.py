"""Argument checks shared by the retrievers (raised before any search runs)."""

from __future__ import annotations

from typing import Any

from fastrag.errors import InvalidParameterError
from fastrag.retrieval.limits import DEFAULT_LIMITS, RetrievalLimits


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


def fetch_limit(retriever: Any, limits: RetrievalLimits) -> int:
    """The most documents to ask ``retriever`` for: ``limits.max_k``, or less if its own limits say so."""
    own = getattr(retriever, "limits", None)
    return min(limits.max_k, own.max_k) if isinstance(own, RetrievalLimits) else limits.max_k
