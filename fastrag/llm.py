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
  message, never retried; a body that is not JSON (including JSON nested too deeply for Python's parser)
  or lacks ``choices[0].message.content`` (a string) a :class:`~fastrag.errors.BackendError`. ``httpx``
  exceptions are chained, never raised as they are: timeouts become
  :class:`~fastrag.errors.RetrievalTimeoutError`, a refused connection
  :class:`~fastrag.errors.BackendTemporarilyUnavailableError`, any other transport failure (a dropped
  connection, a protocol error from the server) :class:`~fastrag.errors.TransientBackendError`, and a body
  that cannot be decoded (``Content-Encoding: gzip`` over bytes that are not gzip) or any other ``httpx``
  error a :class:`~fastrag.errors.BackendError`.
- **Redirects** are not followed (``httpx``'s default, also forced on an injected ``http_client``): a 3xx
  raises :class:`~fastrag.errors.BackendError` naming the status and the ``Location``, since resending a
  POST body to another URL is not something to do silently. Point ``base_url`` at the final URL.
- **Limits**: ``timeout`` bounds a whole attempt (connecting, sending, and receiving the complete
  response), so a server that trickles its answer byte by byte cannot hold a call longer than that; and the
  response body is read as a stream and refused past ``max_response_bytes`` (8 MiB by default, counted
  after ``Content-Encoding`` decompression) with :class:`~fastrag.errors.BackendError`.
- **The HTTP layer** (base URL and header checks, the key, one bounded attempt, the status and ``httpx``
  error mapping, redaction of the key) is :class:`~fastrag.providers.openai.OpenAICompatibleClient`, shared
  with :class:`~fastrag.ingestion.steps.openai_compatible.OpenAICompatibleEmbedder`; this module builds the
  chat request and reads its answer.
- **Validation before sending**: a message whose content is not valid Unicode (a lone surrogate such as
  ``"\\ud800"``, which cannot be encoded as UTF-8), an ``api_key`` or header that HTTP cannot carry
  (non-ASCII, a line break, an empty or malformed header name) raise
  :class:`~fastrag.errors.InvalidParameterError` when the message or the client is built, never a
  retried transport error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import httpx

from fastrag.errors import BackendError, BackendUnavailableError, InvalidParameterError
from fastrag.lifecycle import AsyncResource
from fastrag.providers.http import is_number, shown
from fastrag.providers.openai import API_KEY_ENV, OpenAICompatibleClient
from fastrag.retry import RetryPolicy

__all__ = [
    "API_KEY_ENV",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "ChatCompletion",
    "ChatMessage",
    "OpenAICompatibleLLM",
    "Role",
]

Role = Literal["system", "user", "assistant"]
"""Who says a :class:`ChatMessage`: the instructions (``"system"``), the person, or the model."""

_ROLES = ("system", "user", "assistant")

DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024
"""Default largest response body :class:`OpenAICompatibleLLM` reads, in bytes (8 MiB, after decompression).
A chat completion is text the model generated: at the usual 4 characters per token even a 128k-token
reply is about 0.5 MB, so 8 MiB leaves room for verbose JSON and still bounds what a broken or hostile
server can make the client hold in memory."""

_MAX_TOKENS = 2**31 - 1  # servers read max_tokens as a 32-bit int


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One message of a chat.

    Attributes:
        role: ``"system"``, ``"user"`` or ``"assistant"``.
        content: the text of the message.

    Raises:
        InvalidParameterError: the role is not one of the three, or the content is not a string or is not
            valid Unicode (a lone surrogate such as ``"\\ud800"``: it cannot be sent as UTF-8).

    Examples:
        >>> ChatMessage("user", "What is BM25?")
        ChatMessage(role='user', content='What is BM25?')
    """

    role: Role
    content: str

    def __post_init__(self) -> None:
        if self.role not in _ROLES:
            raise InvalidParameterError(f"role must be one of {_ROLES}, got {shown(self.role)}")
        if not isinstance(self.content, str):
            raise InvalidParameterError(f"content must be a string, got {type(self.content).__name__}")
        try:
            self.content.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidParameterError(
                f"content is not valid Unicode: {exc.reason} at position {exc.start}"
            ) from exc


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


class OpenAICompatibleLLM(AsyncResource):
    """A client for an OpenAI-compatible ``POST /chat/completions`` endpoint; an :class:`~fastrag.protocols.LLM`.

    Args:
        base_url: the API's base URL, up to and including the version: ``"https://api.openai.com/v1"``,
            ``"http://localhost:8000/v1"`` (vLLM), ``"http://localhost:11434/v1"`` (Ollama). Requests go to
            ``{base_url}/chat/completions``.
        model: the model name the server knows, e.g. ``"gpt-4o-mini"``.
        api_key: the bearer token, printable ASCII without spaces; ``None`` reads ``OPENAI_API_KEY`` (unless
            ``headers`` has its own ``Authorization``); when neither is set no ``Authorization`` header is
            sent (see the module docstring).
        timeout: seconds one attempt may take in all: connecting, sending the request and receiving the
            whole response (enforced with :func:`anyio.fail_after`, and given to ``httpx`` for each phase);
            past it the attempt fails with :class:`~fastrag.errors.RetrievalTimeoutError` (retried under
            ``retry``, each attempt with a fresh ``timeout``).
        retry: the :class:`~fastrag.retry.RetryPolicy` for transient failures (default ``RetryPolicy()``:
            3 attempts); ``RetryPolicy(max_attempts=1)`` never retries.
        http_client: an ``httpx.AsyncClient`` to send requests with (proxies, TLS, connection limits). It
            stays the caller's: ``aclose()`` does not close it. Without one, the client creates its own
            and closes it in ``aclose()``. Redirects are not followed even when it would follow them.
        headers: extra HTTP headers for every request (an organisation or project header, a gateway key).
            Names are RFC 9110 tokens, case-insensitive, each at most once; values are printable ASCII
            (spaces and tabs inside), without line breaks or surrounding whitespace (HTTP forbids control
            characters, and ``httpx`` sends ``str`` values as ASCII). ``Content-Type``, ``Content-Length``, ``Transfer-Encoding`` and ``Host``
            are the client's own. An ``Authorization`` here is sent as it is; it cannot be combined
            with ``api_key``.
        max_response_bytes: the largest response body read, in bytes after decompression (an int >= 1;
            default :data:`DEFAULT_MAX_RESPONSE_BYTES`, 8 MiB); a longer one raises
            :class:`~fastrag.errors.BackendError` (not retried) without being read to its end.

    Raises:
        ConfigurationError: ``base_url`` is not an ``http://`` or ``https://`` URL.
        InvalidParameterError: ``model`` is blank or not valid Unicode; ``timeout`` is not a number of
            seconds in (0, 1e6]; ``api_key`` (or ``OPENAI_API_KEY``) is empty or not printable ASCII without spaces, or is
            given together with an ``Authorization`` header; a header name or value HTTP cannot carry (see
            ``headers``), a reserved or repeated header name; ``max_response_bytes`` is not a positive int;
            ``retry``, ``http_client`` or ``headers`` has the wrong type.
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
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise InvalidParameterError(f"model must be a non-empty string, got {shown(model)}")
        try:
            model.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidParameterError(f"model is not valid Unicode: {exc.reason} at position {exc.start}") from exc
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidParameterError(f"retry must be a RetryPolicy, got {shown(retry)}")
        self._client = self._own(OpenAICompatibleClient(
            base_url=base_url, path="/chat/completions", example="http://localhost:8000/v1", api_key=api_key,
            headers=headers, timeout=timeout, http_client=http_client, max_response_bytes=max_response_bytes,
            what="chat completion request", stage="chat",
        ))  # fmt: skip
        self.base_url = self._client.base_url
        self.model = model
        self.timeout = self._client.timeout
        self.retry = retry or RetryPolicy()
        self.max_response_bytes = max_response_bytes
        self._http = self._client.http

    @property
    def url(self) -> str:
        """The endpoint requests go to: ``{base_url}/chat/completions``."""
        return self._client.url

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
            max_tokens: the most tokens to generate (an int in [1, 2**31 - 1]); sent only when set. A reply cut off by
                it has ``finish_reason == "length"``.

        Returns:
            A :class:`ChatCompletion`.

        Raises:
            InvalidParameterError: no messages, a message that is not a :class:`ChatMessage`, a
                ``temperature`` outside [0, 2], or a ``max_tokens`` that is not an int in [1, 2**31 - 1].
            AuthenticationError: the key was refused (401, 403).
            RateLimitError: still rate limited (429) after the retries, or asked to wait longer than the
                policy's ``max_backoff``.
            RetrievalTimeoutError: an attempt still ran past ``timeout`` (the whole attempt, not one read)
                after the retries.
            BackendTemporarilyUnavailableError: the server could not be reached or answered 502/503/504,
                after the retries.
            TransientBackendError: 408 or 500 after the retries, or a dropped connection or a protocol
                error from the server.
            BackendUnavailableError: the client is closed.
            BackendError: a redirect (3xx, not followed: the message names the ``Location``); any other
                status (400, 404, 422, ... with the server's message); a body longer than
                ``max_response_bytes``, one that cannot be decoded (a bad ``Content-Encoding``), is not JSON
                (or nests too deeply to parse), or has no ``choices[0].message.content`` string; any other
                ``httpx`` error.
        """
        body = self._body(messages, temperature, max_tokens)
        if self._client.closed:
            raise BackendUnavailableError("the LLM client is closed", store=self.url)
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
            if not is_number(temperature) or not 0 <= temperature <= 2:
                raise InvalidParameterError(f"temperature must be a number in [0, 2], got {shown(temperature)}")
            body["temperature"] = float(temperature)
        if max_tokens is not None:
            if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 0 < max_tokens <= _MAX_TOKENS:
                raise InvalidParameterError(f"max_tokens must be an int in [1, {_MAX_TOKENS}], got {shown(max_tokens)}")
            body["max_tokens"] = max_tokens
        return body

    async def _request(self, body: dict[str, Any]) -> ChatCompletion:
        """One attempt, bounded by ``timeout`` as a whole; the parsed first choice."""
        return _parse_completion(await self._client.post_json(body), self._client)

    def __repr__(self) -> str:
        return f"OpenAICompatibleLLM(base_url={self.base_url!r}, model={self.model!r})"


def _parse_completion(payload: Any, client: OpenAICompatibleClient) -> ChatCompletion:
    """The first choice of a chat-completions answer; :class:`BackendError` naming the endpoint when it has none."""

    def bad(what: str) -> BackendError:
        return BackendError(f"the response has no {what}: {client.redact(shown(payload, limit=300))}", store=client.where)

    choices = payload.get("choices") if isinstance(payload, Mapping) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise bad("choices")
    message = choices[0].get("message")
    text = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(text, str):
        raise bad("choices[0].message.content string")
    model = payload.get("model")
    finish = choices[0].get("finish_reason")
    raw_usage = payload.get("usage")
    # a count that is not a non-negative int (a float, a bool, NaN, null, an integer too long) is left out
    usage = (
        {
            k: v
            for k, v in raw_usage.items()
            if isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
        }
        if isinstance(raw_usage, Mapping)
        else {}
    )
    return ChatCompletion(
        content=text,
        model=model if isinstance(model, str) else None,
        finish_reason=finish if isinstance(finish, str) else None,
        usage=usage,
    )
