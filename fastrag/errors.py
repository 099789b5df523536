"""Errors raised by fastrag.

Every error fastrag raises derives from :class:`FastragError`, so one ``except`` catches them all. Errors
about bad input also derive from :class:`ValueError`, so code that already catches ``ValueError`` keeps
working. Adapters chain the backend's own exception (``raise ... from exc``); callers never need to catch
a backend SDK type.

::

    FastragError
    ├── InvalidParameterError (ValueError)     bad argument: k <= 0, negative weight, bad regex, ...
    │   ├── UnknownParameterError (TypeError)  an unknown keyword argument (a misspelt option)
    │   └── RegexTimeoutError                  a regex (a path filter) ran past its time limit: a pattern
    │                                          that backtracks catastrophically on the text it is given
    ├── FilterError (ValueError)               malformed filter; names the bad node's path
    │   └── UnsupportedFilterError             valid filter a backend cannot express
    ├── ConfigurationError (ValueError)        bad store URL or settings; missing optional extra
    ├── DimensionMismatchError (ValueError)    vector width differs from the store's
    ├── IngestionError                         a file could not be read or parsed
    │   ├── NoTextError                        a sound file with no text to read: encrypted, scanned
    │   └── ParserMemoryError                  a file needs more memory to parse than the parser's limit
    ├── SectionNotFoundError (LookupError)     a hit's parent document or section is not in a SectionIndex
    ├── EmbeddingError                         the embedding model failed
    ├── RerankerError                          a local reranker failed, or a reranker returned a bad result
    └── BackendError                           the store (or a remote model API) failed while answering
        ├── BackendUnavailableError            the store cannot be reached or opened
        ├── ReadOnlyStoreError                 a write to a store opened read-only
        ├── AuthenticationError                the credentials were refused (HTTP 401, 403)
        └── TransientBackendError              may succeed if retried: connection reset, timeout, 429, 503
            ├── BackendTemporarilyUnavailableError   unreachable, timed out or 502/503/504 during a request
            │                                        (also a BackendUnavailableError)
            ├── RateLimitError                 the backend said too many requests (HTTP 429)
            └── RetrievalTimeoutError          a retrieval stage, branch or request ran past its timeout

``UnknownParameterError`` is also a ``TypeError``, as Python's own error for an unknown keyword would be.
``RegexTimeoutError`` is an ``InvalidParameterError``, not a ``TransientBackendError``: the same pattern on the
same paths would time out again, so it is never retried.

Only :class:`TransientBackendError` is ever retried (see :mod:`fastrag.retry`); an adapter raises it for a
failure that says nothing about the request itself (a dropped connection, a timeout, HTTP 429 or 503) and
sets ``retry_after`` from the backend's ``Retry-After`` when there is one. Errors about the request
(``ValueError`` subclasses, HTTP 4xx other than 429) are never retried.
"""

from __future__ import annotations

__all__ = [
    "AuthenticationError",
    "BackendError",
    "BackendTemporarilyUnavailableError",
    "BackendUnavailableError",
    "ConfigurationError",
    "DimensionMismatchError",
    "EmbeddingError",
    "FastragError",
    "FilterError",
    "IngestionError",
    "InvalidParameterError",
    "NoTextError",
    "ParserMemoryError",
    "RateLimitError",
    "ReadOnlyStoreError",
    "RegexTimeoutError",
    "RerankerError",
    "RetrievalTimeoutError",
    "SectionNotFoundError",
    "TransientBackendError",
    "UnknownParameterError",
    "UnsupportedFilterError",
]


class FastragError(Exception):
    """Root of every error fastrag raises."""


class InvalidParameterError(FastragError, ValueError):
    """An argument is out of its valid range (``k <= 0``, a negative weight, an invalid regex, ...)."""


class UnknownParameterError(InvalidParameterError, TypeError):
    """An unknown keyword argument (a misspelt option). Also a ``TypeError``, as Python's own would be."""


class RegexTimeoutError(InvalidParameterError):
    """A regular expression ran past its time limit while matching: a pattern that backtracks catastrophically
    on the text it was given (``(a|a)+$`` on a path of 30 ``a``), which could otherwise hold the thread for
    minutes. Raised by :class:`~fastrag.retrieval.PathFilterRetriever`, whose ``path_filter_timeout`` bounds the
    time spent matching ``path_filter`` in one call.

    Attributes:
        pattern: the regular expression.
        timeout: the limit that was exceeded, in seconds.
        text: the text being matched when the limit ran out (a ``source_uri``), or ``None``.
    """

    def __init__(self, message: str, *, pattern: str, timeout: float, text: str | None = None) -> None:
        super().__init__(message)
        self.pattern = pattern
        self.timeout = timeout
        self.text = text


class FilterError(FastragError, ValueError):
    """A filter is malformed.

    Attributes:
        path: where the bad node sits, as a JSON-pointer-like string such as ``"$.andAll[1].in.value"``.
    """

    def __init__(self, message: str, *, path: str = "$") -> None:
        super().__init__(f"{message} (at {path})")
        self.path = path


class UnsupportedFilterError(FilterError):
    """A well-formed filter uses a construct that the chosen backend cannot express.

    Raised before any query runs; a filter is never dropped silently.
    """


class ConfigurationError(FastragError, ValueError):
    """Settings or a store URL are invalid, or an optional extra needed for them is not installed."""


class DimensionMismatchError(FastragError, ValueError):
    """A vector's width differs from the dimension the store or embedder expects."""


class IngestionError(FastragError):
    """A source could not be read or parsed during ingestion."""


class NoTextError(IngestionError):
    """A file that is not damaged but holds no text fastrag can read without outside help: an encrypted PDF
    or Word file that needs a password, a scanned PDF without a text layer, a legacy ``.doc``. The ingestion
    pipeline skips it and names it with the reason (``IngestionReport.skipped_files``), rather than counting
    it as failed.

    Attributes:
        source: the file, as named in the message.
        reason: why, in words, without the file name (``"encrypted PDF that needs a password"``).
    """

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"{source}: {reason}")
        self.source = source
        self.reason = reason

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (self.source, self.reason))


class ParserMemoryError(IngestionError):
    """A file needs more memory to parse than the parser's memory limit allows (a Word file whose XML
    unpacks to hundreds of megabytes). The ingestion pipeline skips it and names it with the reason
    (``IngestionReport.skipped_files``); it is never reported as malformed.

    Attributes:
        source: the file, as named in the message.
        reason: why, in words, without the file name; names the limit and how to raise it.
        limit: the limit, in bytes; ``None`` when no limit was set and the machine's memory ran out.
    """

    def __init__(self, source: str, reason: str, *, limit: int | None) -> None:
        super().__init__(f"{source}: {reason}")
        self.source = source
        self.reason = reason
        self.limit = limit

    def __reduce__(self) -> tuple[object, tuple[str, str, int | None]]:
        return (_parser_memory_error, (self.source, self.reason, self.limit))


def _parser_memory_error(source: str, reason: str, limit: int | None) -> ParserMemoryError:
    """Rebuilds a pickled :class:`ParserMemoryError` (its ``limit`` is keyword-only)."""
    return ParserMemoryError(source, reason, limit=limit)


class SectionNotFoundError(FastragError, LookupError):
    """A retrieved chunk cannot be traced back to a section held by a
    :class:`~fastrag.sections.SectionIndex`: its parent document is not in the index, the index
    holds another version of it, or no section of it contains the chunk.

    Attributes:
        parent_id: the parent document's id the chunk names, or ``None`` when it names none.
        chunk_id: the id of the chunk that could not be resolved.
    """

    def __init__(self, message: str, *, parent_id: str | None = None, chunk_id: str | None = None) -> None:
        super().__init__(message)
        self.parent_id = parent_id
        self.chunk_id = chunk_id


class EmbeddingError(FastragError):
    """The embedding model failed to load or to embed."""


class BackendError(FastragError):
    """The store failed while answering a request.

    Attributes:
        store: a human-readable name of the store (its URL or path), for messages and logs.
    """

    def __init__(self, message: str, *, store: str | None = None) -> None:
        super().__init__(message if store is None else f"{store}: {message}")
        self.store = store


class BackendUnavailableError(BackendError):
    """The store cannot be reached, opened or read."""


class ReadOnlyStoreError(BackendError):
    """A write (upsert, delete, clear) to a store opened read-only: its file or folder is not writable by
    this process (a read-only file system, permissions), or it was opened with ``read_only=True``. The
    message names the store and why. Never retried: the store stays read-only while it is open."""


class AuthenticationError(BackendError):
    """The backend refused the credentials (HTTP 401 or 403: a missing, wrong or revoked API key).

    Never retried: sending the same key again cannot succeed.
    """


class RerankerError(FastragError):
    """A local reranker failed to load or to score, or a reranker returned an invalid result (a document
    that was not among the candidates, the same document twice)."""


class TransientBackendError(BackendError):
    """The store failed in a way that may pass if the same request is sent again.

    Adapters raise it for connection resets, timeouts, HTTP 429 (too many requests) and 503 (unavailable).
    :class:`~fastrag.retry.RetryPolicy` retries only this error, and only for idempotent calls.

    Attributes:
        store: as for :class:`BackendError`.
        retry_after: seconds the backend asked us to wait before retrying (HTTP ``Retry-After``), or ``None``.
    """

    def __init__(self, message: str, *, store: str | None = None, retry_after: float | None = None) -> None:
        super().__init__(message, store=store)
        self.retry_after = retry_after


class BackendTemporarilyUnavailableError(TransientBackendError, BackendUnavailableError):
    """The store could not be reached or did not answer in time (connection refused or reset, timeout,
    HTTP 502/503/504) during a request: unavailable now, and worth retrying.

    Both a :class:`TransientBackendError` (so :class:`~fastrag.retry.RetryPolicy` retries it) and a
    :class:`BackendUnavailableError` (so code that handles "the store is down" still catches it).
    """


class RateLimitError(TransientBackendError):
    """The backend refused the request because too many were sent (HTTP 429).

    Retried by :class:`~fastrag.retry.RetryPolicy`, waiting at least ``retry_after`` seconds when the
    backend sent ``Retry-After``.
    """


class RetrievalTimeoutError(TransientBackendError):
    """A retrieval stage (for example one branch of a hybrid retriever) ran past its timeout and was cancelled.

    Attributes:
        timeout: the limit that was exceeded, in seconds.
        stage: the name of the stage or branch that timed out, when known.
    """

    def __init__(self, message: str, *, timeout: float, stage: str | None = None, store: str | None = None) -> None:
        super().__init__(message, store=store)
        self.timeout = timeout
        self.stage = stage
