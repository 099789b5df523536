"""The client of Cohere's API, shared by the embedder and the reranker: the ``cohere`` SDK's ``AsyncClientV2``.

:class:`CohereClient` is what :class:`~fastrag.ingestion.steps.cohere.CohereEmbedder` (``POST /v2/embed``) and
:class:`~fastrag.rerankers.cohere.CohereReranker` (``POST /v2/rerank``) each hold; they only build the call's
arguments and check its answer. What the client does for both:

- **Key**: ``api_key``, else ``CO_API_KEY``, then ``COHERE_API_KEY`` (the SDK's own order); none is a
  :class:`~fastrag.errors.ConfigurationError`. The key never appears in ``repr``, logs or messages (a server
  message that echoes it is redacted).
- **Base URL**: ``base_url``, else ``CO_API_URL`` read when the client is built (the SDK reads it once, when it
  is imported), else Cohere's production API; errors name the endpoint, ``{base_url}/v2/<endpoint>``.
- **The SDK** is imported when a client is built; without it, :class:`~fastrag.errors.ConfigurationError`
  with the ``pip install`` command. Its own retries are switched off (``max_retries=0``): the caller's
  :class:`~fastrag.retry.RetryPolicy` is the only one.
- **Errors** (:meth:`~fastrag.providers.cohere.CohereClient.call`): an SDK ``ApiError`` is mapped by its status as every provider's
  (:mod:`fastrag.providers.http`), with Cohere's 498 ("invalid token") an
  :class:`~fastrag.errors.AuthenticationError` too; ``httpx`` exceptions likewise (a timeout is a
  :class:`~fastrag.errors.RetrievalTimeoutError`, a refused connection a
  :class:`~fastrag.errors.BackendTemporarilyUnavailableError`, a dropped one a
  :class:`~fastrag.errors.TransientBackendError`); an answer the SDK cannot parse (its pydantic and JSON errors
  share no base class) is a :class:`~fastrag.errors.BackendError`. SDK exceptions are chained, never raised as
  they are.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import httpx

from fastrag.errors import BackendError, ConfigurationError, FastragError, RetrievalTimeoutError
from fastrag.providers.http import (
    AUTH_STATUSES,
    HTTPX_ERRORS,
    HeldHTTPClient,
    check_timeout,
    status_error,
    transport_error,
)

__all__ = ["API_KEY_ENV", "AUTH_STATUSES", "BASE_URL_ENV", "DEFAULT_BASE_URL", "INSTALL_HINT", "CohereClient"]

API_KEY_ENV = ("CO_API_KEY", "COHERE_API_KEY")
"""Environment variables read for the API key when none is given, in this order (the SDK's own order)."""
BASE_URL_ENV = "CO_API_URL"
"""The environment variable read for the base URL when none is given (the SDK's own)."""
DEFAULT_BASE_URL = "https://api.cohere.com"
"""Cohere's production API, where the SDK sends requests by default."""
INSTALL_HINT = 'pip install "fastrag-retrieval[cohere]"'

COHERE_AUTH_STATUSES = AUTH_STATUSES | {498}  # 498: Cohere's "invalid token"


class CohereClient(HeldHTTPClient):
    """One Cohere endpoint through the SDK: the key, the base URL, the SDK client, and typed errors.

    Args:
        endpoint: the API's path under the base URL (``"/v2/embed"``), for messages.
        owner: the class that uses it (``"CohereEmbedder"``), for messages.
        api_key: the key; ``None`` reads :data:`API_KEY_ENV`.
        base_url: the API's base URL; ``None`` reads :data:`BASE_URL_ENV`, else Cohere's.
        httpx_client: an ``httpx.AsyncClient`` for the SDK to send with; it stays the caller's (never closed
            here). Without one, the client creates its own and closes it in ``aclose()``.
        timeout: seconds one request may take, in (0, 1e6].
        what: names the request in messages (``"embedding request"``, ``"rerank request"``).
        stage: the :class:`~fastrag.errors.RetrievalTimeoutError`'s ``stage`` (``"embed"``, ``"rerank"``).

    Raises:
        ConfigurationError: no API key, or the ``cohere`` SDK is not installed (the message has the command).
        InvalidParameterError: a bad ``timeout`` or ``httpx_client``.
    """

    def __init__(
        self,
        *,
        endpoint: str,
        owner: str,
        api_key: str | None,
        base_url: str | None,
        httpx_client: httpx.AsyncClient | None,
        timeout: float,
        what: str,
        stage: str,
    ) -> None:
        self.timeout = check_timeout(timeout)
        self.check_http_client(httpx_client, "httpx_client")  # before the key and the SDK, as before
        key = api_key if api_key is not None else next((os.environ[v] for v in API_KEY_ENV if os.environ.get(v)), None)
        if not isinstance(key, str) or not key.strip():
            raise ConfigurationError(f"{owner} needs an API key: pass api_key= or set {' or '.join(API_KEY_ENV)}")
        try:
            import cohere
        except ImportError as exc:
            raise ConfigurationError(f"{owner} needs the cohere SDK: {INSTALL_HINT}") from exc
        if base_url is None:  # read now: the SDK reads CO_API_URL once, when it is imported
            base_url = os.environ.get(BASE_URL_ENV) or None
        self.base_url = base_url
        self.where = f"{(base_url or DEFAULT_BASE_URL).rstrip('/')}{endpoint}"
        self.what = what
        self.stage = stage
        self._secret = key.strip()
        super().__init__(httpx_client, timeout=self.timeout, name="httpx_client")
        self.sdk: Any = cohere.AsyncClientV2(
            api_key=self._secret, base_url=base_url, httpx_client=self._http, timeout=self.timeout,
            log_warning_experimental_features=False,
        )  # fmt: skip

    def redact(self, text: str) -> str:
        """``text`` with the API key replaced by ``***``."""
        return text.replace(self._secret, "***")

    async def call(self, method: str, /, **arguments: Any) -> Any:
        """``await sdk.<method>(**arguments)`` once, with the SDK's retries off and ``timeout`` applied.

        Raises:
            RetrievalTimeoutError: the request timed out.
            BackendError: an ``ApiError`` by its status, an ``httpx`` failure (as subclasses:
                AuthenticationError, RateLimitError, BackendTemporarilyUnavailableError,
                TransientBackendError where they apply), or an answer the SDK could not parse (see the module).
        """
        from cohere.core.api_error import ApiError

        # No SDK retries (the policy is the only one); "timeout" for cohere 7, "timeout_in_seconds" for 5.
        options = {"max_retries": 0, "timeout": self.timeout, "timeout_in_seconds": self.timeout}
        try:
            return await getattr(self.sdk, method)(**arguments, request_options=options)
        except ApiError as exc:
            raise status_error(
                getattr(exc, "status_code", None), message=body_message(getattr(exc, "body", None)),
                where=self.where, what=self.what, headers=getattr(exc, "headers", None),
                auth_statuses=COHERE_AUTH_STATUSES, redact=self.redact,
            ) from exc  # fmt: skip
        except HTTPX_ERRORS as exc:
            raise transport_error(exc, where=self.where, timeout=self._timeout_error) from exc
        except FastragError:
            raise
        except Exception as exc:  # an answer the SDK could not parse (pydantic and JSON errors share no base)
            raise BackendError(
                f"{self.what} failed: {type(exc).__name__}: {self.redact(str(exc))[:300]}", store=self.where
            ) from exc

    def _timeout_error(self) -> RetrievalTimeoutError:
        return RetrievalTimeoutError(
            f"{self.what} timed out after {self.timeout} s", timeout=self.timeout, stage=self.stage, store=self.where
        )



def body_message(body: Any) -> str:
    """The ``message`` of a Cohere error body (a mapping, or a model in older SDKs), else the body cut to
    300 characters."""
    if isinstance(body, Mapping) and isinstance(body.get("message"), str):
        return body["message"]
    if isinstance(getattr(body, "message", None), str):  # older SDKs parse the body into a model
        return body.message
    text = str(body)
    return text if len(text) <= 300 else text[:300] + "..."
