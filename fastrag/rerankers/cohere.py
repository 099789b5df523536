"""Cohere's rerank API (``POST /v2/rerank``) through the ``cohere`` SDK's ``AsyncClientV2``.

Install with ``pip install "fastrag-retrieval[cohere]"``; the SDK is imported only when a reranker is built.

::

    async with CohereReranker(model="rerank-v3.5") as reranker:       # key from CO_API_KEY
        retriever = RerankingRetriever(retriever=hybrid, reranker=reranker, candidate_k=100)

Behaviour:

- **Batches**: one request carries at most ``max_documents_per_request`` documents (Cohere's documented
  limit is 1,000). A longer candidate list is split into consecutive batches, sent concurrently (at most
  ``max_concurrent_requests`` at a time), and the results merged by score. Cohere's relevance scores are
  computed per (query, document) pair and normalised to [0, 1], so scores from different batches compare.
- **Retries**: only :class:`~fastrag.errors.TransientBackendError` is retried, under a
  :class:`~fastrag.retry.RetryPolicy` (bounded exponential backoff with full jitter, at least the server's
  ``Retry-After``): HTTP 429 (:class:`~fastrag.errors.RateLimitError`), 500, 502, 503, 504, a timeout
  (:class:`~fastrag.errors.RetrievalTimeoutError`), a refused or dropped connection. The SDK's own retries are
  switched off, so the policy is the only one. A rerank request changes nothing, so resending it is safe.
- **Errors** name the endpoint (``{base_url}/v2/rerank``) and never the key: HTTP 401, 403 and 498 raise
  :class:`~fastrag.errors.AuthenticationError`; 502, 503, 504 and a refused connection
  :class:`~fastrag.errors.BackendTemporarilyUnavailableError` (retried; also a
  :class:`~fastrag.errors.BackendUnavailableError`); any other status :class:`~fastrag.errors.BackendError`
  (400 and 422 name the request's fault, and are never retried). SDK exceptions are chained, never raised as
  they are. The key, the base URL, the SDK client and this mapping are
  :class:`~fastrag.providers.cohere.CohereClient`'s, shared with
  :class:`~fastrag.ingestion.steps.cohere.CohereEmbedder`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import anyio
import httpx

from fastrag.errors import BackendError, BackendUnavailableError, InvalidParameterError
from fastrag.lifecycle import AsyncResource
from fastrag.models import Document
from fastrag.providers.cohere import API_KEY_ENV, CohereClient
from fastrag.providers.cohere import BASE_URL_ENV as BASE_URL_ENV  # defined here before providers/; still importable
from fastrag.providers.cohere import INSTALL_HINT as INSTALL_HINT
from fastrag.rerankers._ranking import check_rerank_args, ranked_by_scores, text_of
from fastrag.retry import RetryPolicy

__all__ = ["API_KEY_ENV", "COHERE_MAX_DOCUMENTS", "CohereReranker"]

COHERE_MAX_DOCUMENTS = 1_000
"""Cohere's limit on documents per rerank request (API reference, ``POST /v2/rerank``)."""


class CohereReranker(AsyncResource):
    """Reranks candidates with a Cohere rerank model.

    Args:
        model: the rerank model, e.g. ``"rerank-v3.5"``.
        api_key: the API key; ``None`` reads ``CO_API_KEY``, then ``COHERE_API_KEY``.
        base_url: the API's base URL (default: ``CO_API_URL`` when set at construction, else Cohere's production API);
            point it at a proxy, a private deployment or a test server. Requests go to
            ``{base_url}/v2/rerank``.
        httpx_client: an ``httpx.AsyncClient`` to send requests with (proxies, TLS, connection limits). It
            stays the caller's: ``aclose()`` does not close it. Without one, the reranker creates its
            own and closes it in ``aclose()``.
        timeout: seconds one request may take (connect, send and read); past it the request fails with
            :class:`~fastrag.errors.RetrievalTimeoutError` (retried under ``retry``).
        max_documents_per_request: the most documents in one request (Cohere's limit: 1,000).
        max_concurrent_requests: how many batches may be in flight at once.
        max_tokens_per_doc: Cohere truncates each document to this many tokens (its default: 4,096).
        retry: the :class:`~fastrag.retry.RetryPolicy` for transient failures (default ``RetryPolicy()``:
            3 attempts); ``RetryPolicy(max_attempts=1)`` never retries.
        include_title: send ``"title\\ncontent"`` for candidates with a ``metadata["title"]``.

    Raises:
        ConfigurationError: the ``cohere`` SDK is not installed (the message has the pip command), or no
            API key was given or found in the environment.
        InvalidParameterError: an argument is out of range (a non-positive limit or timeout, a blank model).
    """

    name = "cohere"

    def __init__(
        self,
        model: str = "rerank-v3.5",
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        httpx_client: httpx.AsyncClient | None = None,
        timeout: float = 30.0,
        max_documents_per_request: int = COHERE_MAX_DOCUMENTS,
        max_concurrent_requests: int = 4,
        max_tokens_per_doc: int | None = None,
        retry: RetryPolicy | None = None,
        include_title: bool = True,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise InvalidParameterError(f"model must be a non-empty string, got {model!r}")
        for label, value in (
            ("max_documents_per_request", max_documents_per_request),
            ("max_concurrent_requests", max_concurrent_requests),
            ("max_tokens_per_doc", max_tokens_per_doc),
        ):
            if value is None and label == "max_tokens_per_doc":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InvalidParameterError(f"{label} must be a positive int, got {value!r}")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidParameterError(f"retry must be a RetryPolicy, got {retry!r}")
        self._client = self._own(CohereClient(
            endpoint="/v2/rerank", owner="CohereReranker", api_key=api_key, base_url=base_url,
            httpx_client=httpx_client, timeout=timeout, what="rerank request", stage="rerank",
        ))  # fmt: skip
        self.model = model
        self.base_url = self._client.base_url
        self.timeout = self._client.timeout
        self.max_documents_per_request = max_documents_per_request
        self.max_concurrent_requests = max_concurrent_requests
        self.max_tokens_per_doc = max_tokens_per_doc
        self.retry = retry or RetryPolicy()
        self.include_title = include_title
        self._http = self._client.http
        self._where = self._client.where

    async def rerank(self, query: str, documents: Sequence[Document], *, k: int | None = None) -> list[Document]:
        """Copies of ``documents`` best first by Cohere's relevance score, at most ``k``.

        Returns:
            Copies stamped with ``score`` (Cohere's relevance score, in [0, 1], higher is better) and
            zero-based ``rank``; ties keep the candidates' order. ``[]`` for no documents (no request).

        Raises:
            InvalidParameterError: bad arguments (see :class:`~fastrag.protocols.Reranker`).
            AuthenticationError: the API key was refused (401, 403, 498).
            RateLimitError: still rate limited (429) after the retries, or asked to wait longer than the
                policy's ``max_backoff``.
            RetrievalTimeoutError: a request still timed out after the retries.
            TransientBackendError: a 5xx or a dropped connection, after the retries.
            BackendUnavailableError: the API cannot be reached (connection refused, DNS failure).
            BackendError: any other failure, e.g. 400 or 422 (a bad model name, too many documents), or a
                response that does not fit the request.
        """
        docs = check_rerank_args(query, documents, k)
        if not docs:
            return []
        if self.closed:
            raise BackendUnavailableError("the reranker is closed", store=self._where)
        texts = [text_of(d, include_title=self.include_title) for d in docs]
        size = self.max_documents_per_request
        starts = list(range(0, len(texts), size))
        scores: list[float] = [-math.inf] * len(texts)
        limiter = anyio.CapacityLimiter(self.max_concurrent_requests)

        async def run(start: int) -> None:
            batch = texts[start : start + size]
            top_n = min(k, len(batch)) if k is not None else None
            async with limiter:
                results = await self.retry.call(self._request, query, batch, top_n)
            for index, score in results:
                scores[start + index] = score

        if len(starts) == 1:
            await run(0)
        else:
            try:
                async with anyio.create_task_group() as tg:
                    for start in starts:
                        tg.start_soon(run, start)
            except BaseExceptionGroup as group:  # one batch failed: raise its error, not a group
                first = next((e for e in group.exceptions if isinstance(e, Exception)), None)
                if first is None or any(not isinstance(e, Exception) for e in group.exceptions):
                    raise
                raise first from None
        # A document a batch did not return (beyond that batch's top_n) keeps -inf: below all the others.
        ranked = ranked_by_scores(docs, scores, k)
        return [d for d in ranked if d.score is not None and d.score != -math.inf]

    async def _request(self, query: str, texts: list[str], top_n: int | None) -> list[tuple[int, float]]:
        """One ``/v2/rerank`` call; ``[(index within texts, relevance score)]``. Errors become fastrag's."""
        kwargs: dict[str, Any] = {}
        if top_n is not None:
            kwargs["top_n"] = top_n
        if self.max_tokens_per_doc is not None:
            kwargs["max_tokens_per_doc"] = self.max_tokens_per_doc
        response = await self._client.call("rerank", model=self.model, query=query, documents=texts, **kwargs)
        return _checked_results(response, len(texts), top_n, self._where)

    def __repr__(self) -> str:
        where = f", base_url={self.base_url!r}" if self.base_url else ""
        return f"CohereReranker(model={self.model!r}{where})"


def _checked_results(response: Any, n: int, top_n: int | None, where: str) -> list[tuple[int, float]]:
    results = getattr(response, "results", None)
    if not isinstance(results, list):
        raise BackendError("the rerank response has no results list", store=where)
    out: list[tuple[int, float]] = []
    seen: set[int] = set()
    for item in results:
        index, score = getattr(item, "index", None), getattr(item, "relevance_score", None)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n or index in seen:
            raise BackendError(f"the rerank response has a bad or repeated index {index!r} for {n} documents", store=where)
        if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
            raise BackendError(f"the rerank response has a bad relevance_score {score!r}", store=where)
        seen.add(index)
        out.append((index, float(score)))
    if len(out) < (n if top_n is None else min(top_n, n)):
        raise BackendError(f"the rerank response scored {len(out)} of {n} documents", store=where)
    return out
