"""Embeddings from any server that implements OpenAI's ``POST /v1/embeddings``, over ``httpx``.

OpenAI and Azure OpenAI's v1 API, Text Embeddings Inference (TEI), vLLM, Ollama, llama.cpp's
``llama-server``, LiteLLM, LM Studio, Infinity and NVIDIA NIM all speak it::

    async with OpenAICompatibleEmbedder(model="text-embedding-3-small") as embedder:  # key from OPENAI_API_KEY
        vectors = await embedder.embed_documents(["first text", "second text"])   # (2, 1536) float32

Behaviour:

- **Request**: ``POST {base_url}/embeddings`` with ``{"model", "input": [texts], "encoding_format":
  "float"}``, plus ``dimensions`` when set (OpenAI's text-embedding-3 models shorten their vectors), an
  ``input_type`` when the model wants one (``query_input_type`` / ``document_input_type``: NVIDIA NIM's
  ``"query"``/``"passage"``, ...), and ``extra_body``'s fields (TEI's ``"truncate": true``, ...). Models
  that want an instruction in the text itself (E5's ``"query: "``, nomic's ``"search_query: "``) get
  ``query_prefix`` / ``document_prefix`` prepended.
- **Batches**: at most ``batch_size`` texts and, with ``max_batch_tokens``, at most that many tokens per
  request (counted by ``count_tokens``; by default the UTF-8 length, an upper bound for byte-level BPE
  tokenizers). Batches run concurrently, at most ``max_concurrency`` requests at a time per embedder (the
  bound holds across concurrent calls). Vectors come back in input order whatever order the server lists
  them in (each carries its ``index``).
- **Retries**: :class:`~fastrag.errors.TransientBackendError` only, under a :class:`~fastrag.retry.RetryPolicy`
  that waits at least the server's ``Retry-After`` (or ``retry-after-ms``): HTTP 429
  (:class:`~fastrag.errors.RateLimitError`), 408, 500, 502, 503, 504, a timeout, a refused or dropped
  connection. Embedding changes nothing on the server, so resending a batch is safe (it may be billed twice).
- **Errors** name the endpoint (``{base_url}/embeddings``): 401/403
  :class:`~fastrag.errors.AuthenticationError`; other 4xx :class:`~fastrag.errors.BackendError` with the
  server's message, never retried; a body that is not JSON, or whose ``data`` does not hold exactly one
  finite vector per text, all of one width (``dimensions`` when set), :class:`~fastrag.errors.BackendError`.
- **Vectors** are L2-normalised here (OpenAI's already are; TEI and Ollama may not be). An empty string
  is not sent (the API refuses it) and embeds as the zero vector.
- **The key** is read from ``api_key``, else the ``api_key_env`` variable (``OPENAI_API_KEY``), and
  sent as ``Authorization: Bearer``; with neither, no header is sent (local servers need none). It never
  appears in ``repr``, logs or error messages (a server message that echoes it is redacted).
- **The HTTP layer** (base URL and header checks, the key, one bounded attempt, the status and ``httpx``
  error mapping, redaction) is :class:`~fastrag.providers.openai.OpenAICompatibleClient`, shared with the
  chat client :class:`~fastrag.llm.OpenAICompatibleLLM`; this module builds the embeddings request and
  reads its answer.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import httpx

from fastrag.embedding_languages import declared_languages
from fastrag.errors import BackendError, InvalidParameterError
from fastrag.ingestion.steps._remote import Kind, RemoteEmbedder
from fastrag.providers.http import shown
from fastrag.providers.openai import API_KEY_ENV, DEFAULT_BASE_URL, OpenAICompatibleClient
from fastrag.retry import RetryPolicy

__all__ = ["API_KEY_ENV", "DEFAULT_BASE_URL", "DEFAULT_MAX_RESPONSE_BYTES", "OpenAICompatibleEmbedder"]

DEFAULT_MAX_RESPONSE_BYTES = 256 * 1024 * 1024
"""The largest response body read by default, in bytes (256 MiB): 128 vectors of 3,072 floats as JSON
text take about 8 MB; a larger ``batch_size`` or wider model may need more."""


class OpenAICompatibleEmbedder(RemoteEmbedder):
    """An :class:`~fastrag.protocols.Embedder` over an OpenAI-compatible ``/embeddings`` endpoint.

    Args:
        model: the model the server knows (``"text-embedding-3-small"``, ``"BAAI/bge-small-en-v1.5"``,
            ``"nomic-embed-text"``).
        base_url: the API's base URL up to the version (``"http://localhost:8080/v1"`` for TEI,
            ``"http://localhost:11434/v1"`` for Ollama); default OpenAI's.
        api_key: the bearer token; ``None`` reads ``api_key_env`` (no header when that is unset too).
        api_key_env: the environment variable read when ``api_key`` is ``None``.
        dimensions: ask the model for vectors of this width (OpenAI text-embedding-3); also fixes
            ``dimension`` before the first request. Responses of another width are refused.
        query_prefix: prepended to every query (instruction-tuned models: E5's ``"query: "``).
        document_prefix: prepended to every document text (E5's ``"passage: "``).
        query_input_type: sent as ``input_type`` with queries when set (NVIDIA NIM's ``"query"``).
        document_input_type: sent as ``input_type`` with documents when set (NIM's ``"passage"``).
        extra_body: more JSON fields for every request (not ``model``, ``input``, ``dimensions``).
        batch_size: the most texts per request (OpenAI allows 2,048).
        max_batch_tokens: the most tokens per request, counted with ``count_tokens`` (OpenAI allows 300,000);
            ``None``: no token limit.
        count_tokens: ``text -> tokens`` for ``max_batch_tokens`` (e.g. a ``tiktoken`` encoder's
            ``lambda t: len(enc.encode(t))``; ``len`` to batch by characters); default the UTF-8 length in
            bytes (an upper bound).
        max_text_characters: cut each text to this many characters before sending (the endpoint refuses
            texts past its context; TEI can truncate itself with ``extra_body={"truncate": True}``).
        max_concurrency: the most requests in flight at once for this embedder.
        timeout: seconds one attempt may take in all (connect, send, receive); retried under ``retry``.
        retry: the :class:`~fastrag.retry.RetryPolicy` (default ``RetryPolicy()``: 3 attempts).
        http_client: an ``httpx.AsyncClient`` to use (proxies, TLS); it stays the caller's (not closed).
        headers: extra request headers (``api-key`` for Azure, an organisation); as for
            :class:`~fastrag.llm.OpenAICompatibleLLM`.
        max_response_bytes: the largest response body read (after decompression).
        languages: the languages the model was trained for (ISO 639-1 codes or BCP 47 tags, ``{"en"}``);
            ``None`` (default): the model's entry in :data:`~fastrag.embedding_languages.MODEL_LANGUAGES`,
            and when it has none an :class:`~fastrag.embedding_languages.UnknownLanguagesWarning`.

    Raises:
        ConfigurationError: ``base_url`` is not an http(s) URL.
        InvalidParameterError: a blank ``model``; a non-positive size, limit or timeout; a key or header
            HTTP cannot carry; ``extra_body`` that is not a JSON object or overrides a field set here;
            ``languages`` that is not a collection of language codes.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        api_key_env: str = API_KEY_ENV,
        dimensions: int | None = None,
        query_prefix: str = "",
        document_prefix: str = "",
        query_input_type: str | None = None,
        document_input_type: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
        batch_size: int = 128,
        max_batch_tokens: int | None = None,
        count_tokens: Callable[[str], int] | None = None,
        max_text_characters: int | None = None,
        max_concurrency: int = 4,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        http_client: httpx.AsyncClient | None = None,
        headers: Mapping[str, str] | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        languages: Iterable[str] | None = None,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise InvalidParameterError(f"model must be a non-empty string, got {shown(model)}")
        for label, value in (("query_prefix", query_prefix), ("document_prefix", document_prefix)):
            if not isinstance(value, str):
                raise InvalidParameterError(f"{label} must be a string, got {shown(value)}")
        for label, value in (("query_input_type", query_input_type), ("document_input_type", document_input_type)):
            if value is not None and (not isinstance(value, str) or not value):
                raise InvalidParameterError(f"{label} must be a non-empty string or None, got {shown(value)}")
        extra = dict(extra_body or {})
        if extra_body is not None and not isinstance(extra_body, Mapping):
            raise InvalidParameterError(f"extra_body must be a mapping, got {shown(extra_body)}")
        clash = sorted(set(extra) & {"model", "input", "dimensions", "input_type", "encoding_format"})
        if clash:
            raise InvalidParameterError(f"extra_body must not set {clash}: they are set by the embedder's own options")
        try:
            json.dumps(extra)
        except (TypeError, ValueError) as exc:
            raise InvalidParameterError(f"extra_body must be JSON-serialisable: {exc}") from exc
        self._setup(
            dimensions=dimensions, batch_size=batch_size, max_batch_tokens=max_batch_tokens,
            count_tokens=count_tokens, max_concurrency=max_concurrency, retry=retry,
            max_text_characters=max_text_characters,
        )  # fmt: skip
        self._client = self._own(OpenAICompatibleClient(
            base_url=base_url, path="/embeddings", example="http://localhost:8080/v1", api_key=api_key,
            api_key_env=api_key_env, key_headers=("authorization", "api-key"), headers=headers, timeout=timeout,
            http_client=http_client, max_response_bytes=max_response_bytes, what="embedding request", stage="embed",
        ))  # fmt: skip
        self.model = model
        self.base_url = self._client.base_url
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        self.query_input_type = query_input_type
        self.document_input_type = document_input_type
        self.extra_body = extra
        self.timeout = self._client.timeout
        self.max_response_bytes = max_response_bytes
        self._http = self._client.http
        self._where = self._client.url
        self._label = "OpenAICompatibleEmbedder"
        self._languages = declared_languages(model, languages, embedder="OpenAICompatibleEmbedder")

    @property
    def languages(self) -> frozenset[str] | None:
        """The languages (ISO 639-1) the model covers: ``languages=`` as given, else the model's entry in
        :data:`~fastrag.embedding_languages.MODEL_LANGUAGES`; ``None`` when unknown (then a hybrid runs the
        dense branch on questions in every language; :class:`~fastrag.protocols.DeclaresLanguages`)."""
        return self._languages

    @property
    def url(self) -> str:
        """The endpoint: ``{base_url}/embeddings``."""
        return self._client.url

    @property
    def name(self) -> str:
        """``"openai:<model>"``: stores record it and refuse vectors of another model."""
        return f"openai:{self.model}"

    @property
    def fingerprint(self) -> str:
        """:attr:`name` plus everything else that changes the vectors of a text (``dimensions``, prefixes,
        input types, ``extra_body``, the cut): the key of an :class:`~fastrag.ingestion.EmbeddingCache`."""
        options = {
            "dimensions": self.dimensions, "query_prefix": self.query_prefix, "document_prefix": self.document_prefix,
            "query_input_type": self.query_input_type, "document_input_type": self.document_input_type,
            "extra_body": self.extra_body, "max_text_characters": self.max_text_characters,
        }  # fmt: skip
        digest = hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()[:16]
        return f"{self.name}#{digest}"

    def __repr__(self) -> str:
        return f"OpenAICompatibleEmbedder(model={self.model!r}, base_url={self.base_url!r})"

    # -------------------------------------------------------------------------------------- requests

    def _body(self, texts: list[str], kind: Kind) -> dict[str, Any]:
        prefix = self.query_prefix if kind == "query" else self.document_prefix
        body: dict[str, Any] = {
            **self.extra_body,
            "model": self.model,
            "input": [prefix + t for t in texts] if prefix else texts,
            "encoding_format": "float",
        }
        if self.dimensions is not None:
            body["dimensions"] = self.dimensions
        input_type = self.query_input_type if kind == "query" else self.document_input_type
        if input_type is not None:
            body["input_type"] = input_type
        return body

    async def _request(self, texts: list[str], kind: Kind) -> list[list[float]]:
        payload = await self._client.post_json(self._body(texts, kind))
        data = payload.get("data") if isinstance(payload, Mapping) else None
        if not isinstance(data, list):
            raise BackendError(
                f"the response has no data list: {self._client.redact(shown(payload, limit=300))}", store=self._where
            )
        vectors: list[Any] = [None] * len(texts)
        for item in data:
            index = item.get("index") if isinstance(item, Mapping) else None
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(texts) or vectors[index] is not None:
                raise BackendError(f"the response has a bad or repeated index {shown(index)} for {len(texts)} texts",
                                   store=self._where)
            vectors[index] = item.get("embedding")
            if vectors[index] is None:
                raise BackendError(f"the response's item {index} has no embedding", store=self._where)
        if any(v is None for v in vectors):
            raise BackendError(f"the response has {len(data)} vectors for {len(texts)} texts", store=self._where)
        return vectors
