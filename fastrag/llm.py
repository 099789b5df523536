"""Chat with a large language model: the message types and an OpenAI-compatible chat-completions client.

The :class:`~fastrag.protocols.LLM` protocol is one method, ``await llm.chat(messages) -> str``. This module
holds the types it speaks (:class:`ChatMessage`) and :class:`OpenAICompatibleLLM`, a client for any server
that implements OpenAI's ``POST /v1/chat/completions`` (OpenAI itself, vLLM, llama.cpp's ``llama-server``,
Ollama, LiteLLM, LM Studio, ...), over ``httpx``::

    async with OpenAICompatibleLLM(base_url="http://localhost:8000/v1", model="qwen2.5-7b-instruct") as llm:
        reply = await llm.chat([ChatMessage("user", "Say hello")], temperature=0.0)

Behaviour:

- **Request**: ``POST {base_url}/chat/completions`` with ``{"model", "messages": [{"role", "content"}]}``,
  plus ``temperature`` and ``max_tokens`` only when they are set (otherwise the server's defaults apply),
  and ``Authorization: Bearer <api_key>`` when there is a key.
- **API key**: ``api_key=None`` reads ``OPENAI_API_KEY``. When neither is set, requests carry no
  ``Authorization`` header: local servers (vLLM, llama.cpp, Ollama) usually need none. A server that does
  need one answers 401, raised as :class:`~fastrag.errors.AuthenticationError`.
- **Retries**: only :class:`~fastrag.errors.TransientBackendError` is retried, under a
  :class:`~fastrag.retry.RetryPolicy` (at least the server's ``Retry-After``): HTTP 429
  (:class:`~fastrag.errors.RateLimitError`), 408, 500, 502, 503, 504, a timeout
  (:class:`~fastrag.errors.RetrievalTimeoutError`), a refused or dropped connection
  (:class:`~fastrag.errors.BackendTemporarilyUnavailableError`). A completion changes no state on the
  server, so resending it is safe (it may be billed twice).
- **Errors**: 401 and 403 raise :class:`~fastrag.errors.AuthenticationError`; any other 4xx (400: a bad
  request, 404: an unknown model, 422) a :class:`~fastrag.errors.BackendError` carrying the server's
  message, never retried; a body that is not JSON or lacks ``choices[0].message.content`` (a string) a
  :class:`~fastrag.errors.BackendError`. ``httpx`` exceptions are chained, never raised as they are.
"""

from __future__ import annotations

import email.utils
import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import Any, Literal, Self

import httpx

from fastrag.errors import (
    AuthenticationError,
    BackendError,
    BackendTemporarilyUnavailableError,
    BackendUnavailableError,
    ConfigurationError,
    InvalidParameterError,
    RateLimitError,
    RetrievalTimeoutError,
    TransientBackendError,
)
from fastrag.retry import RetryPolicy

__all__ = ["API_KEY_ENV", "ChatCompletion", "ChatMessage", "OpenAICompatibleLLM", "Role"]

API_KEY_ENV = "OPENAI_API_KEY"
"""The environment variable :class:`OpenAICompatibleLLM` reads for its API key when none is given."""

Role = Literal["system", "user", "assistant"]
"""Who says a :class:`ChatMessage`: the instructions (``"system"``), the person, or the model."""

_ROLES = ("system", "user", "assistant")
_AUTH_STATUSES = frozenset({401, 403})
_UNAVAILABLE_STATUSES = frozenset({502, 503, 504})
_TRANSIENT_STATUSES = frozenset({408, 500})


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One message of a chat.

    Attributes:
        role: ``"system"``, ``"user"`` or ``"assistant"``.
        content: the text of the message.

    Raises:
        InvalidParameterError: the role is not one of the three, or the content is not a string.

    Examples:
        >>> ChatMessage("user", "What is BM25?")
        ChatMessage(role='user', content='What is BM25?')
    """

    role: Role
    content: str

    def __post_init__(self) -> None:
        if self.role not in _ROLES:
            raise InvalidParameterError(f"role must be one of {_ROLES}, got {self.role!r}")
        if not isinstance(self.content, str):
            raise InvalidParameterError(f"content must be a string, got {type(self.content).__name__}")


@dataclass(frozen=True, slots=True)
class ChatCompletion:
    """What a chat-completions server answered (the first choice).

    Attributes:
        content: the generated text.
        model: the model the server says answered (may differ from the one asked for: an alias resolved),
            or ``None`` when it did not say.
        finish_reason: why generation stopped: ``"stop"`` (the model ended), ``"length"`` (``max_tokens``
            reached: the text is cut off), ... or ``None`` when the server did not say.
        usage: token counts the server reported (``prompt_tokens``, ``completion_tokens``,
            ``total_tokens``); empty when it reported none.
    """

    content: str
    model: str | None = None
    finish_reason: str | None = None
    usage: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "usage", MappingProxyType(dict(self.usage)))


class OpenAICompatibleLLM:
    """A client for an OpenAI-compatible ``POST /chat/completions`` endpoint; an :class:`~fastrag.protocols.LLM`.

    Args:
        base_url: the API's base URL, up to and including the version: ``"https://api.openai.com/v1"``,
            ``"http://localhost:8000/v1"`` (vLLM), ``"http://localhost:11434/v1"`` (Ollama). Requests go to
            ``{base_url}/chat/completions``.
        model: the model name the server knows, e.g. ``"gpt-4o-mini"``.
        api_key: the bearer token; ``None`` reads ``OPENAI_API_KEY``; when neither is set no
            ``Authorization`` header is sent (see the module docstring).
        timeout: seconds one request may take (connect, send, and each read); past it the request fails
            with :class:`~fastrag.errors.RetrievalTimeoutError` (retried under ``retry``).
        retry: the :class:`~fastrag.retry.RetryPolicy` for transient failures (default ``RetryPolicy()``:
            3 attempts); ``RetryPolicy(max_attempts=1)`` never retries.
        http_client: an ``httpx.AsyncClient`` to send requests with (proxies, TLS, connection limits). It
            stays the caller's: :meth:`aclose` does not close it. Without one, the client creates its own
            and closes it in :meth:`aclose`.
        headers: extra HTTP headers for every request (an organisation or project header, a gateway key).

    Raises:
        ConfigurationError: ``base_url`` is not an ``http://`` or ``https://`` URL.
        InvalidParameterError: ``model`` is blank; ``timeout`` is not a finite number > 0; ``api_key`` is
            empty or spans lines; ``retry``, ``http_client`` or ``headers`` has the wrong type.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        http_client: httpx.AsyncClient | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.strip():
            raise ConfigurationError(f"base_url must be an http(s) URL such as 'http://localhost:8000/v1', got {base_url!r}")
        try:
            parsed = httpx.URL(base_url.strip())
        except (httpx.InvalidURL, TypeError) as exc:
            raise ConfigurationError(f"base_url is not a valid URL: {base_url!r} ({exc})") from exc
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ConfigurationError(f"base_url must be an http(s) URL such as 'http://localhost:8000/v1', got {base_url!r}")
        if not isinstance(model, str) or not model.strip():
            raise InvalidParameterError(f"model must be a non-empty string, got {model!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not math.isfinite(timeout) or timeout <= 0:
            raise InvalidParameterError(f"timeout must be a finite number of seconds > 0, got {timeout!r}")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidParameterError(f"retry must be a RetryPolicy, got {retry!r}")
        if http_client is not None and not isinstance(http_client, httpx.AsyncClient):
            raise InvalidParameterError(f"http_client must be an httpx.AsyncClient, got {http_client!r}")
        if headers is not None and (
            not isinstance(headers, Mapping)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items())
        ):
            raise InvalidParameterError(f"headers must be a mapping of str to str, got {headers!r}")
        key = api_key if api_key is not None else (os.environ.get(API_KEY_ENV) or None)
        if key is not None and (not isinstance(key, str) or not key.strip() or "\n" in key or "\r" in key):
            raise InvalidParameterError("api_key must be None or a non-empty single-line string")
        self.base_url = base_url.strip().rstrip("/")
        self.model = model
        self.timeout = float(timeout)
        self.retry = retry or RetryPolicy()
        self._headers = {"content-type": "application/json", **dict(headers or {})}
        if key is not None:
            self._headers["authorization"] = f"Bearer {key.strip()}"
        self._owns_http = http_client is None
        self._http = http_client if http_client is not None else httpx.AsyncClient(timeout=self.timeout)
        self._closed = False

    @property
    def url(self) -> str:
        """The endpoint requests go to: ``{base_url}/chat/completions``."""
        return f"{self.base_url}/chat/completions"

    async def chat(
        self, messages: Sequence[ChatMessage], *, temperature: float | None = None, max_tokens: int | None = None
    ) -> str:
        """The model's reply to ``messages`` (the text of the first choice).

        See :meth:`complete` for the arguments and errors; this returns only ``complete(...).content``.
        """
        return (await self.complete(messages, temperature=temperature, max_tokens=max_tokens)).content

    async def complete(
        self, messages: Sequence[ChatMessage], *, temperature: float | None = None, max_tokens: int | None = None
    ) -> ChatCompletion:
        """Send ``messages`` and return the first choice with the server's metadata.

        Args:
            messages: the chat so far, at least one :class:`ChatMessage`.
            temperature: sampling temperature in [0, 2] (0 is the most deterministic); sent only when set.
            max_tokens: the most tokens to generate (an int >= 1); sent only when set. A reply cut off by
                it has ``finish_reason == "length"``.

        Returns:
            A :class:`ChatCompletion`.

        Raises:
            InvalidParameterError: no messages, a message that is not a :class:`ChatMessage`, a
                ``temperature`` outside [0, 2], or a ``max_tokens`` that is not a positive int.
            AuthenticationError: the key was refused (401, 403).
            RateLimitError: still rate limited (429) after the retries, or asked to wait longer than the
                policy's ``max_backoff``.
            RetrievalTimeoutError: a request still timed out after the retries.
            BackendTemporarilyUnavailableError: the server could not be reached or answered 502/503/504,
                after the retries.
            TransientBackendError: 408 or 500 after the retries, or a dropped connection.
            BackendUnavailableError: the client is closed.
            BackendError: any other status (400, 404, 422, ... with the server's message), or a response
                that is not JSON or has no ``choices[0].message.content`` string.
        """
        body = self._body(messages, temperature, max_tokens)
        if self._closed:
            raise BackendUnavailableError("the LLM client is closed", store=self.base_url)
        return await self.retry.call(self._request, body)

    def _body(self, messages: Sequence[ChatMessage], temperature: float | None, max_tokens: int | None) -> dict[str, Any]:
        if isinstance(messages, str | bytes) or not isinstance(messages, Sequence) or not messages:
            raise InvalidParameterError("messages must be a non-empty sequence of ChatMessage")
        for message in messages:
            if not isinstance(message, ChatMessage):
                raise InvalidParameterError(f"messages must be ChatMessage objects, got {type(message).__name__}")
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m.role, "content": m.content} for m in messages],
        }
        if temperature is not None:
            if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not 0 <= temperature <= 2:
                raise InvalidParameterError(f"temperature must be a number in [0, 2], got {temperature!r}")
            body["temperature"] = float(temperature)
        if max_tokens is not None:
            if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 0:
                raise InvalidParameterError(f"max_tokens must be a positive int, got {max_tokens!r}")
            body["max_tokens"] = max_tokens
        return body

    async def _request(self, body: dict[str, Any]) -> ChatCompletion:
        """One POST; the parsed first choice. HTTP and transport failures become fastrag errors."""
        where = self.base_url
        try:
            response = await self._http.post(self.url, json=body, headers=self._headers, timeout=self.timeout)
        except httpx.TimeoutException as exc:
            raise RetrievalTimeoutError(
                f"chat completion timed out after {self.timeout} s", timeout=self.timeout, stage="chat", store=where
            ) from exc
        except httpx.ConnectError as exc:
            raise BackendTemporarilyUnavailableError(f"cannot connect: {exc}", store=where) from exc
        except httpx.TransportError as exc:
            raise TransientBackendError(f"connection failed: {type(exc).__name__}: {exc}", store=where) from exc
        if response.status_code != 200:
            raise _status_error(response, where)
        try:
            payload = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BackendError(f"the response is not JSON: {_snippet(response.text)}", store=where) from exc
        return _parse_completion(payload, where)

    async def aclose(self) -> None:
        """Close the HTTP client if this object created it (an injected one stays open). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"OpenAICompatibleLLM(base_url={self.base_url!r}, model={self.model!r})"


def _parse_completion(payload: Any, where: str) -> ChatCompletion:
    choices = payload.get("choices") if isinstance(payload, Mapping) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise BackendError(f"the response has no choices: {_snippet(json.dumps(payload))}", store=where)
    message = choices[0].get("message")
    content = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(content, str):
        raise BackendError(
            f"the response has no choices[0].message.content string: {_snippet(json.dumps(payload))}", store=where
        )
    model = payload.get("model")
    finish = choices[0].get("finish_reason")
    raw_usage = payload.get("usage")
    usage = (
        {k: v for k, v in raw_usage.items() if isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)}
        if isinstance(raw_usage, Mapping)
        else {}
    )
    return ChatCompletion(
        content=content,
        model=model if isinstance(model, str) else None,
        finish_reason=finish if isinstance(finish, str) else None,
        usage=usage,
    )


def _status_error(response: httpx.Response, where: str) -> BackendError:
    status = response.status_code
    message = f"HTTP {status}: {_server_message(response)}"
    if status in _AUTH_STATUSES:
        return AuthenticationError(f"the API key was refused ({message})", store=where)
    retry_after = _retry_after(response.headers)
    if status == 429:
        return RateLimitError(f"rate limited ({message})", store=where, retry_after=retry_after)
    if status in _UNAVAILABLE_STATUSES:
        return BackendTemporarilyUnavailableError(f"server unavailable ({message})", store=where, retry_after=retry_after)
    if status in _TRANSIENT_STATUSES:
        return TransientBackendError(f"server error ({message})", store=where, retry_after=retry_after)
    return BackendError(f"chat completion request failed ({message})", store=where)


def _server_message(response: httpx.Response) -> str:
    """The error message of an OpenAI-style body ``{"error": {"message": ...}}``, else the body itself."""
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return _snippet(response.text)
    if isinstance(body, Mapping):
        error = body.get("error")
        if isinstance(error, Mapping) and isinstance(error.get("message"), str):
            return error["message"]
        if isinstance(error, str):
            return error
        if isinstance(body.get("message"), str):
            return body["message"]
    return _snippet(json.dumps(body))


def _snippet(text: str, limit: int = 300) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds from ``Retry-After`` (delta-seconds or an HTTP date) or ``retry-after-ms``; ``None`` if absent."""
    try:
        raw_ms = headers.get("retry-after-ms")
        if raw_ms is not None:
            value = float(raw_ms) / 1000.0
            return value if math.isfinite(value) and value >= 0 else None
        raw = headers.get("retry-after")
        if raw is None:
            return None
        try:
            value = float(raw)
        except ValueError:
            value = max(0.0, email.utils.parsedate_to_datetime(raw).timestamp() - time.time())
        return value if math.isfinite(value) and value >= 0 else None
    except (TypeError, ValueError, OverflowError):
        return None
