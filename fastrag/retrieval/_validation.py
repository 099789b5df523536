"""Argument checks shared by the retrievers (raised before any search runs)."""

from __future__ import annotations

from typing import Any

from fastrag.errors import InvalidParameterError


def check_positive_int(value: Any, name: str) -> int:
    """Return ``value`` if it is an int > 0 (bools rejected), else raise :class:`InvalidParameterError`."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidParameterError(f"{name} must be a positive int, got {value!r}")
    return value


def check_query(query: Any) -> str:
    """Return ``query`` if it is a non-blank string, else raise :class:`InvalidParameterError`."""
    if not isinstance(query, str):
        raise InvalidParameterError(f"query must be a string, got {type(query).__name__}")
    if not query.strip():
        raise InvalidParameterError("query is empty or only whitespace")
    return query
