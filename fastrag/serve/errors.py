"""Errors of ``fastrag serve`` as HTTP answers: :class:`ServeError` and the mapping of the SDK's errors.

Every error body is :class:`~fastrag.serve.schemas.ErrorResponse`: ``error`` (a code), ``message``, and for
a failed retrieval ``retrieval_failed``, ``store`` (its URL without a password) and ``failed_branches``; a 422
lists each bad field in ``detail`` as ``{"loc": ["body", field], "msg", "type"}``.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from fastrag.errors import BackendError

__all__ = ["ServeError", "failure", "field_of", "invalid", "safe_store_name", "store_of"]


class ServeError(Exception):
    """An HTTP error with the JSON body of :class:`~fastrag.serve.schemas.ErrorResponse`.

    Attributes:
        status: the HTTP status code.
        body: the JSON body: ``error``, ``message`` and the extra fields given.
    """

    def __init__(self, status: int, error: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.body = status, {"error": error, "message": message, **extra}


def invalid(field: str | None, message: str, kind: str = "value_error") -> ServeError:
    loc = ["body", field] if field else ["body"]
    return ServeError(422, "invalid_request", f"{field}: {message}" if field else message,
                      detail=[{"loc": loc, "msg": message, "type": kind}])  # fmt: skip


_FIELDS = ("query", "question", "top_k", "offset", "filter", "search_mode", "fusion", "rerank", "user_id",
           "agent_id", "documents", "ids", "min_score", "min_relative_score", "min_vector_score",
           "min_keyword_score")  # fmt: skip
_SETTING_FIELDS = {"vector_weight": "fusion", "keyword_weight": "fusion", "rank_constant": "fusion",
                   "rerank_model": "rerank", "retrieval_k": "rerank", "scope": "user_id", "BM25": "search_mode",
                   "lexical_store": "search_mode", "document": "documents"}  # fmt: skip


def field_of(message: str) -> str | None:
    """The request field an SDK error message is about (the first field name it mentions)."""
    found = [(message.find(name), name) for name in _FIELDS if name in message]
    found += [(message.find(word), field) for word, field in _SETTING_FIELDS.items() if word in message]
    return min(found)[1] if found else None


def safe_store_name(spec: Any) -> str:
    """A store's URL without its password, or its type name for an injected store."""
    if not isinstance(spec, str):
        return type(spec).__name__
    parts = urllib.parse.urlsplit(spec)
    if parts.password is None:
        return spec
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def store_of(kb: Any, error: BaseException | None) -> str:
    if isinstance(error, BackendError) and error.store:
        return safe_store_name(error.store)
    return safe_store_name(kb._store_spec)


def failure(kb: Any, error: BaseException) -> dict[str, Any]:
    return {"error": type(error).__name__, "message": str(error), "store": store_of(kb, error)}
