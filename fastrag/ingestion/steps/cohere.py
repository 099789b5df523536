"""Cohere's embed API (``POST /v2/embed``) through the ``cohere`` SDK's ``AsyncClientV2``.

Install with ``pip install "fastrag-retrieval[cohere]"``; the SDK is imported only when an embedder is built::

    async with CohereEmbedder(model="embed-v4.0") as embedder:          # key from CO_API_KEY
        vectors = await embedder.embed_documents(["first text", "second text"])

Documents are sent with ``input_type="search_document"`` and queries with ``"search_query"``, as Cohere's
retrieval models require. At most ``batch_size`` texts go in one request (Cohere's limit: 96); batches run
concurrently, at most ``max_concurrency`` at a time. Retries, errors, empty strings and normalisation behave
as for :class:`~fastrag.ingestion.steps.openai_compatible.OpenAICompatibleEmbedder`: only
:class:`~fastrag.errors.TransientBackendError` is retried (429 with ``Retry-After``, 5xx, timeouts, dropped
connections; the SDK's own retries are off); 401, 403 and 498 raise
:class:`~fastrag.errors.AuthenticationError`; other statuses and responses that do not fit the request raise
:class:`~fastrag.errors.BackendError`; every error names the endpoint and never the key.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable
from typing import Any, Literal

import httpx

from fastrag.embedding_languages import declared_languages
from fastrag.errors import (
    AuthenticationError,
    BackendError,
    BackendTemporarilyUnavailableError,
    ConfigurationError,
    InvalidParameterError,
    RateLimitError,
    RetrievalTimeoutError,
    TransientBackendError,
)
from fastrag.ingestion.steps._remote import Kind, RemoteEmbedder
from fastrag.rerankers.cohere import (
    API_KEY_ENV,
    BASE_URL_ENV,
    INSTALL_HINT,
    _body_message,
)
from fastrag.retry import RetryPolicy, retry_after_seconds

__all__ = ["COHERE_MAX_TEXTS", "CohereEmbedder"]

COHERE_MAX_TEXTS = 96
"""Cohere's limit on texts per embed request (API reference, ``POST /v2/embed``)."""

_AUTH = frozenset({401, 403, 498})  # 498: Cohere's "invalid token"
_UNAVAILABLE = frozenset({502, 503, 504})


class CohereEmbedder(RemoteEmbedder):
    """An :class:`~fastrag.protocols.Embedder` over Cohere's embed API.

    Args:
        model: the embed model, e.g. ``"embed-v4.0"``, ``"embed-english-v3.0"``.
        api_key: the API key; ``None`` reads ``CO_API_KEY``, then ``COHERE_API_KEY``.
        base_url: the API's base URL (default ``CO_API_URL`` when set, else Cohere's); requests go to
            ``{base_url}/v2/embed``.
        dimensions: ``output_dimension`` (embed-v4.0: 256, 512, 1024 or 1536); ``None``: the model's.
        truncate: what Cohere does with a text past the model's context: ``"END"`` (its default) or
            ``"START"`` cut it, ``"NONE"`` refuses it (HTTP 400).
        batch_size: the most texts per request (at most Cohere's 96).
        max_batch_tokens: the most tokens per request, counted with ``count_tokens``; ``None``: no limit.
        count_tokens: ``text -> tokens``; default the UTF-8 length in bytes (an upper bound).
        max_text_characters: cut each text to this many characters before sending.
        max_concurrency: the most requests in flight at once for this embedder.
        timeout: seconds one request may take; retried under ``retry``.
        retry: the :class:`~fastrag.retry.RetryPolicy` (default ``RetryPolicy()``).
        httpx_client: an ``httpx.AsyncClient`` to use; it stays the caller's (not closed).
        languages: the languages the model was trained for (ISO 639-1 codes or BCP 47 tags, ``{"en"}``);
            ``None`` (default): the model's entry in :data:`~fastrag.embedding_languages.MODEL_LANGUAGES`,
            and when it has none an :class:`~fastrag.embedding_languages.UnknownLanguagesWarning`.

    Raises:
        ConfigurationError: the ``cohere`` SDK is not installed, or there is no API key.
        InvalidParameterError: a blank model, a ``batch_size`` outside [1, 96], a bad ``truncate``, a
            non-positive limit or timeout; ``languages`` that is not a collection of language codes.
    """

    def __init__(
        self,
        model: str = "embed-v4.0",
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        dimensions: int | None = None,
        truncate: Literal["END", "START", "NONE"] = "END",
        batch_size: int = COHERE_MAX_TEXTS,
        max_batch_tokens: int | None = None,
        count_tokens: Any = None,
        max_text_characters: int | None = None,
        max_concurrency: int = 4,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        httpx_client: httpx.AsyncClient | None = None,
        languages: Iterable[str] | None = None,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise InvalidParameterError(f"model must be a non-empty string, got {model!r}")
        if truncate not in ("END", "START", "NONE"):
            raise InvalidParameterError(f"truncate must be 'END', 'START' or 'NONE', got {truncate!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not math.isfinite(timeout) or timeout <= 0:
            raise InvalidParameterError(f"timeout must be a finite number of seconds > 0, got {timeout!r}")
        if isinstance(batch_size, int) and not isinstance(batch_size, bool) and batch_size > COHERE_MAX_TEXTS:
            raise InvalidParameterError(f"batch_size must be at most Cohere's {COHERE_MAX_TEXTS}, got {batch_size}")
        if httpx_client is not None and not isinstance(httpx_client, httpx.AsyncClient):
            raise InvalidParameterError(f"httpx_client must be an httpx.AsyncClient, got {httpx_client!r}")
        self._setup(
            dimensions=dimensions, batch_size=batch_size, max_batch_tokens=max_batch_tokens,
            count_tokens=count_tokens, max_concurrency=max_concurrency, retry=retry,
            max_text_characters=max_text_characters,
        )  # fmt: skip
        key = api_key if api_key is not None else next((os.environ[v] for v in API_KEY_ENV if os.environ.get(v)), None)
        if not isinstance(key, str) or not key.strip():
            raise ConfigurationError(f"CohereEmbedder needs an API key: pass api_key= or set {' or '.join(API_KEY_ENV)}")
        try:
            import cohere
        except ImportError as exc:
            raise ConfigurationError(f"CohereEmbedder needs the cohere SDK: {INSTALL_HINT}") from exc
        if base_url is None:  # read now: the SDK reads CO_API_URL once, when it is imported
            base_url = os.environ.get(BASE_URL_ENV) or None
        self.model = model
        self.base_url = base_url
        self.truncate = truncate
        self.timeout = float(timeout)
        self._secret = key.strip()
        self._owns_http = httpx_client is None
        self._http = httpx_client if httpx_client is not None else httpx.AsyncClient(timeout=self.timeout)
        self._client: Any = cohere.AsyncClientV2(
            api_key=self._secret, base_url=base_url, httpx_client=self._http, timeout=self.timeout,
            log_warning_experimental_features=False,
        )  # fmt: skip
        self._where = f"{(base_url or 'https://api.cohere.com').rstrip('/')}/v2/embed"
        self._label = "CohereEmbedder"
        self._languages = declared_languages(model, languages, embedder="CohereEmbedder")

    @property
    def languages(self) -> frozenset[str] | None:
        """The languages (ISO 639-1) the model covers: ``languages=`` as given, else the model's entry in
        :data:`~fastrag.embedding_languages.MODEL_LANGUAGES`; ``None`` when unknown (then a hybrid runs the
        dense branch on questions in every language; :class:`~fastrag.protocols.SupportsLanguages`)."""
        return self._languages

    @property
    def name(self) -> str:
        """``"cohere:<model>"``: stores record it and refuse vectors of another model."""
        return f"cohere:{self.model}"

    @property
    def fingerprint(self) -> str:
        """:attr:`name` plus the options that change a text's vector (``dimensions``, ``truncate``, the cut)."""
        options = {"dimensions": self.dimensions, "truncate": self.truncate, "max_text_characters": self.max_text_characters}
        digest = hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()[:16]
        return f"{self.name}#{digest}"

    async def _close(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    def __repr__(self) -> str:
        where = f", base_url={self.base_url!r}" if self.base_url else ""
        return f"CohereEmbedder(model={self.model!r}{where})"

    async def _request(self, texts: list[str], kind: Kind) -> list[list[float]]:
        from cohere.core.api_error import ApiError

        options: dict[str, Any] = {"max_retries": 0, "timeout": self.timeout, "timeout_in_seconds": self.timeout}
        kwargs: dict[str, Any] = {}
        if self.dimensions is not None:
            kwargs["output_dimension"] = self.dimensions
        where = self._where
        try:
            response = await self._client.embed(
                model=self.model, texts=texts, input_type="search_query" if kind == "query" else "search_document",
                embedding_types=["float"], truncate=self.truncate, request_options=options, **kwargs,
            )  # fmt: skip
        except ApiError as exc:
            raise self._api_error(exc) from exc
        except httpx.TimeoutException as exc:
            raise RetrievalTimeoutError(
                f"embedding request timed out after {self.timeout} s", timeout=self.timeout, stage="embed", store=where
            ) from exc
        except httpx.ConnectError as exc:
            raise BackendTemporarilyUnavailableError(f"cannot connect: {exc}", store=where) from exc
        except httpx.TransportError as exc:
            raise TransientBackendError(f"connection failed: {type(exc).__name__}: {exc}", store=where) from exc
        except Exception as exc:  # a body the SDK could not parse (pydantic and JSON errors share no base)
            raise BackendError(f"embedding failed: {type(exc).__name__}: {self._redact(str(exc))[:300]}", store=where) from exc
        embeddings = getattr(response, "embeddings", None)
        vectors = getattr(embeddings, "float_", None)
        if vectors is None:
            vectors = getattr(embeddings, "float", None)
        if not isinstance(vectors, list):
            raise BackendError("the response has no embeddings.float list", store=where)
        return vectors

    def _redact(self, text: str) -> str:
        return text.replace(self._secret, "***")

    def _api_error(self, exc: Any) -> BackendError:
        status = getattr(exc, "status_code", None)
        message = f"HTTP {status}: {self._redact(_body_message(getattr(exc, 'body', None)))}"
        where = self._where
        if status in _AUTH:
            return AuthenticationError(f"the API key was refused ({message})", store=where)
        retry_after = retry_after_seconds(getattr(exc, "headers", None))
        if status == 429:
            return RateLimitError(f"rate limited ({message})", store=where, retry_after=retry_after)
        if status in _UNAVAILABLE:
            return BackendTemporarilyUnavailableError(f"server unavailable ({message})", store=where, retry_after=retry_after)
        if status == 500:
            return TransientBackendError(f"server error ({message})", store=where, retry_after=retry_after)
        return BackendError(f"embedding request failed ({message})", store=where)
