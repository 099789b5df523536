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
:class:`~fastrag.errors.BackendError`; every error names the endpoint and never the key. The key, the base URL,
the SDK client and the error mapping are :class:`~fastrag.providers.cohere.CohereClient`'s, shared with
:class:`~fastrag.rerankers.cohere.CohereReranker`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any, Literal

import httpx

from fastrag.embedding_languages import declared_languages
from fastrag.errors import BackendError, InvalidParameterError
from fastrag.ingestion.steps._remote import Kind, RemoteEmbedder
from fastrag.providers.cohere import CohereClient
from fastrag.retry import RetryPolicy

__all__ = ["COHERE_MAX_TEXTS", "CohereEmbedder"]

COHERE_MAX_TEXTS = 96
"""Cohere's limit on texts per embed request (API reference, ``POST /v2/embed``)."""


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
        if isinstance(batch_size, int) and not isinstance(batch_size, bool) and batch_size > COHERE_MAX_TEXTS:
            raise InvalidParameterError(f"batch_size must be at most Cohere's {COHERE_MAX_TEXTS}, got {batch_size}")
        self._setup(
            dimensions=dimensions, batch_size=batch_size, max_batch_tokens=max_batch_tokens,
            count_tokens=count_tokens, max_concurrency=max_concurrency, retry=retry,
            max_text_characters=max_text_characters,
        )  # fmt: skip
        self._client = self._own(CohereClient(
            endpoint="/v2/embed", owner="CohereEmbedder", api_key=api_key, base_url=base_url,
            httpx_client=httpx_client, timeout=timeout, what="embedding request", stage="embed",
        ))  # fmt: skip
        self.model = model
        self.base_url = self._client.base_url
        self.truncate = truncate
        self.timeout = self._client.timeout
        self._http = self._client.http
        self._where = self._client.where
        self._label = "CohereEmbedder"
        self._languages = declared_languages(model, languages, embedder="CohereEmbedder")

    @property
    def languages(self) -> frozenset[str] | None:
        """The languages (ISO 639-1) the model covers: ``languages=`` as given, else the model's entry in
        :data:`~fastrag.embedding_languages.MODEL_LANGUAGES`; ``None`` when unknown (then a hybrid runs the
        dense branch on questions in every language; :class:`~fastrag.protocols.DeclaresLanguages`)."""
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

    def __repr__(self) -> str:
        where = f", base_url={self.base_url!r}" if self.base_url else ""
        return f"CohereEmbedder(model={self.model!r}{where})"

    async def _request(self, texts: list[str], kind: Kind) -> list[list[float]]:
        kwargs: dict[str, Any] = {}
        if self.dimensions is not None:
            kwargs["output_dimension"] = self.dimensions
        response = await self._client.call(
            "embed", model=self.model, texts=texts, input_type="search_query" if kind == "query" else "search_document",
            embedding_types=["float"], truncate=self.truncate, **kwargs,
        )  # fmt: skip
        embeddings = getattr(response, "embeddings", None)
        vectors = getattr(embeddings, "float_", None)
        if vectors is None:
            vectors = getattr(embeddings, "float", None)
        if not isinstance(vectors, list):
            raise BackendError("the response has no embeddings.float list", store=self._where)
        return vectors
