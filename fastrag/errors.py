"""Errors raised by fastrag.

Every error fastrag raises derives from :class:`FastragError`, so one ``except`` catches them all. Errors
about bad input also derive from :class:`ValueError`, so code that already catches ``ValueError`` keeps
working. Adapters chain the backend's own exception (``raise ... from exc``); callers never need to catch
a backend SDK type.

::

    FastragError
    ├── InvalidParameterError (ValueError)     bad argument: k <= 0, negative weight, bad regex, ...
    ├── FilterError (ValueError)               malformed filter; names the bad node's path
    │   └── UnsupportedFilterError             valid filter a backend cannot express
    ├── ConfigurationError (ValueError)        bad store URL or settings; missing optional extra
    ├── DimensionMismatchError (ValueError)    vector width differs from the store's
    ├── IngestionError                         a file could not be read or parsed
    ├── EmbeddingError                         the embedding model failed
    └── BackendError                           the store failed while answering
        └── BackendUnavailableError            the store cannot be reached or opened
"""

from __future__ import annotations

__all__ = [
    "BackendError",
    "BackendUnavailableError",
    "ConfigurationError",
    "DimensionMismatchError",
    "EmbeddingError",
    "FastragError",
    "FilterError",
    "IngestionError",
    "InvalidParameterError",
    "UnsupportedFilterError",
]


class FastragError(Exception):
    """Root of every error fastrag raises."""


class InvalidParameterError(FastragError, ValueError):
    """An argument is out of its valid range (``k <= 0``, a negative weight, an invalid regex, ...)."""


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
