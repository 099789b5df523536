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
- **Validation before sending**: a message whose content is not valid Unicode (a lone surrogate such as
  ``"\\ud800"``, which cannot be encoded as UTF-8), an ``api_key`` or header that HTTP cannot carry
  (non-ASCII, a line break, an empty or malformed header name) raise
  :class:`~fastrag.errors.InvalidParameterError` when the message or the client is built, never a
  retried transport error.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import Any, Literal, Self

import anyio
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
from fastrag.retry import RetryPolicy, retry_after_seconds

__all__ = [
    "API_KEY_ENV",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "ChatCompletion",
    "ChatMessage",
    "OpenAICompatibleLLM",
    "Role",
]

API_KEY_ENV = "OPENAI_API_KEY"
"""The environment variable :class:`OpenAICompatibleLLM` reads for its API key when none is given."""

Role = Literal["system", "user", "assistant"]
"""Who says a :class:`ChatMessage`: the instructions (``"system"``), the person, or the model."""

_ROLES = ("system", "user", "assistant")
_AUTH_STATUSES = frozenset({401, 403})
_UNAVAILABLE_STATUSES = frozenset({502, 503, 504})
_TRANSIENT_STATUSES = frozenset({408, 500})

DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024
"""Default largest response body :class:`OpenAICompatibleLLM` reads, in bytes (8 MiB, after decompression).
A chat completion is text the model generated: at the usual 4 characters per token even a 128k-token
reply is about 0.5 MB, so 8 MiB leaves room for verbose JSON and still bounds what a broken or hostile
server can make the client hold in memory."""

_MAX_TOKENS = 2**31 - 1  # servers read max_tokens as a 32-bit int
_MAX_TIMEOUT = 1e6  # seconds (11.6 days); far larger ones overflow the platform's time_t in socket timeouts

# RFC 9110 section 5.1 (a token) and 5.5 (field values) as h11 checks them, restricted to ASCII since
# httpx encodes str header values as ASCII.
_HEADER_NAME = re.compile(r"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")
_HEADER_VALUE = re.compile(r"(?:[\x21-\x7e]+(?:[ \t]+[\x21-\x7e]+)*)?")
_API_KEY = re.compile(r"[\x21-\x7e]+")
# set by the client itself: the body is always JSON, and its framing is httpx's
_RESERVED_HEADERS = frozenset({"content-type", "content-length", "transfer-encoding", "host"})
# the most digits an integer in a response may have; longer ones are read as None (Python refuses to
# convert more than 4,300 digits, and no count a server reports needs more than 18)
_MAX_INT_DIGITS = 18


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
            raise InvalidParameterError(f"role must be one of {_ROLES}, got {_shown(self.role)}")
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


class OpenAICompatibleLLM:
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
            stays the caller's: :meth:`aclose` does not close it. Without one, the client creates its own
            and closes it in :meth:`aclose`. Redirects are not followed even when it would follow them.
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
        _check_base_url(base_url, example="http://localhost:8000/v1")
        if not isinstance(model, str) or not model.strip():
            raise InvalidParameterError(f"model must be a non-empty string, got {_shown(model)}")
        try:
            model.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidParameterError(f"model is not valid Unicode: {exc.reason} at position {exc.start}") from exc
        if not _is_number(timeout) or not 0 < timeout <= _MAX_TIMEOUT:
            raise InvalidParameterError(f"timeout must be a number of seconds in (0, {_MAX_TIMEOUT:.0f}], got {_shown(timeout)}")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidParameterError(f"retry must be a RetryPolicy, got {_shown(retry)}")
        if http_client is not None and not isinstance(http_client, httpx.AsyncClient):
            raise InvalidParameterError(f"http_client must be an httpx.AsyncClient, got {_shown(http_client)}")
        if isinstance(max_response_bytes, bool) or not isinstance(max_response_bytes, int) or max_response_bytes <= 0:
            raise InvalidParameterError(f"max_response_bytes must be a positive int, got {_shown(max_response_bytes)}")
        extra = _check_headers(headers)
        if "authorization" in extra and api_key is not None:
            raise InvalidParameterError("pass the key either as api_key or as an Authorization header, not both")
        key = api_key if api_key is not None or "authorization" in extra else (os.environ.get(API_KEY_ENV) or None)
        if key is not None:
            source = "api_key" if api_key is not None else API_KEY_ENV
            if not isinstance(key, str) or not _API_KEY.fullmatch(key.strip()):
                # the key itself is a secret: never put it in the message
                raise InvalidParameterError(
                    f"{source} must be a non-empty string of printable ASCII characters without spaces or line breaks"
                )
        self.base_url = base_url.strip().rstrip("/")
        self.model = model
        self.timeout = float(timeout)
        self.retry = retry or RetryPolicy()
        self.max_response_bytes = max_response_bytes
        self._headers = {**extra, "content-type": "application/json"}
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
            if not _is_number(temperature) or not 0 <= temperature <= 2:
                raise InvalidParameterError(f"temperature must be a number in [0, 2], got {_shown(temperature)}")
            body["temperature"] = float(temperature)
        if max_tokens is not None:
            if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 0 < max_tokens <= _MAX_TOKENS:
                raise InvalidParameterError(f"max_tokens must be an int in [1, {_MAX_TOKENS}], got {_shown(max_tokens)}")
            body["max_tokens"] = max_tokens
        return body

    async def _request(self, body: dict[str, Any]) -> ChatCompletion:
        """One attempt, bounded by ``timeout`` as a whole; the parsed first choice."""
        try:
            with anyio.fail_after(self.timeout):
                status, headers, content = await self._send(body)
        except TimeoutError as exc:
            raise self._timeout_error() from exc
        if status != 200:
            raise _status_error(status, headers, content, self.base_url)
        try:
            payload = _loads(content)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise BackendError(f"the response is not JSON ({_reason(exc)}): {_snippet(content)}", store=self.base_url) from exc
        return _parse_completion(payload, content, self.base_url)

    async def _send(self, body: dict[str, Any]) -> tuple[int, httpx.Headers, bytes]:
        """POST ``body`` and read the response, at most ``max_response_bytes`` of it (decompressed).

        ``httpx`` exceptions become fastrag errors here.
        """
        where = self.base_url
        try:
            async with self._http.stream(
                "POST", self.url, json=body, headers=self._headers, timeout=self.timeout, follow_redirects=False
            ) as response:
                declared = response.headers.get("content-length", "")
                limit = self.max_response_bytes
                # only the decoded size counts, but a body declared larger is refused unread unless compressed
                if declared.isascii() and declared.isdigit() and len(declared) <= _MAX_INT_DIGITS and int(declared) > limit and (
                    response.headers.get("content-encoding", "identity").strip().lower() == "identity"
                ):
                    raise self._too_large(response.status_code, f"it declares {int(declared)} bytes")
                chunks: list[bytes] = []
                size = 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > limit:
                        raise self._too_large(response.status_code, f"more than {limit} bytes arrived")
                    chunks.append(chunk)
                return response.status_code, response.headers, b"".join(chunks)
        except httpx.TimeoutException as exc:
            raise self._timeout_error() from exc
        except httpx.ConnectError as exc:
            raise BackendTemporarilyUnavailableError(f"cannot connect: {exc}", store=where) from exc
        except httpx.LocalProtocolError as exc:  # the request itself: sending it again cannot help
            raise BackendError(f"the request could not be sent: {exc}", store=where) from exc
        except httpx.UnsupportedProtocol as exc:  # a URL scheme httpx cannot speak: sending again cannot help
            raise BackendError(f"connection failed: {type(exc).__name__}: {exc}", store=where) from exc
        except httpx.TransportError as exc:  # read/write errors, a dropped connection, a bad response, a proxy
            raise TransientBackendError(f"connection failed: {type(exc).__name__}: {exc}", store=where) from exc
        except httpx.DecodingError as exc:
            raise BackendError(f"the response body could not be decoded: {exc}", store=where) from exc
        except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError) as exc:  # TooManyRedirects and the rest
            raise BackendError(f"the request failed: {type(exc).__name__}: {exc}", store=where) from exc

    def _timeout_error(self) -> RetrievalTimeoutError:
        return RetrievalTimeoutError(
            f"chat completion timed out after {self.timeout} s", timeout=self.timeout, stage="chat", store=self.base_url
        )

    def _too_large(self, status: int, detail: str) -> BackendError:
        return BackendError(
            f"the response (HTTP {status}) is longer than max_response_bytes={self.max_response_bytes}: {detail}",
            store=self.base_url,
        )

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


def _check_base_url(base_url: Any, *, example: str) -> None:
    """Refuse a ``base_url`` that is not an absolute http(s) URL with a host.

    Raises:
        ConfigurationError: names the value and shows ``example``.
    """
    if not isinstance(base_url, str) or not base_url.strip():
        raise ConfigurationError(f"base_url must be an http(s) URL such as {example!r}, got {base_url!r}")
    try:
        parsed = httpx.URL(base_url.strip())
    except (httpx.InvalidURL, TypeError, UnicodeError) as exc:
        raise ConfigurationError(f"base_url is not a valid URL: {base_url!r} ({exc})") from exc
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigurationError(f"base_url must be an http(s) URL such as {example!r}, got {base_url!r}")


def _check_headers(headers: Any) -> dict[str, str]:
    """``headers`` with lower-cased names, checked to be sendable over HTTP/1.1 (see the class docstring)."""
    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise InvalidParameterError(f"headers must be a mapping of str to str, got {type(headers).__name__}")
    out: dict[str, str] = {}
    for name, value in headers.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise InvalidParameterError(f"headers must be a mapping of str to str, got a {type(value).__name__} for {_shown(name)}")
        if not _HEADER_NAME.fullmatch(name):
            raise InvalidParameterError(
                f"header name {_shown(name)} is not a valid HTTP header name (letters, digits and !#$%&'*+-.^_`|~, not empty)"
            )
        lower = name.lower()
        if lower in _RESERVED_HEADERS:
            raise InvalidParameterError(f"header {_shown(name)} is set by the client and cannot be overridden")
        if lower in out:
            raise InvalidParameterError(f"header {_shown(name)} is given more than once (names are case-insensitive)")
        if not _HEADER_VALUE.fullmatch(value):
            # the value may be a secret (a gateway key): name the header, not the value
            raise InvalidParameterError(
                f"the value of header {_shown(name)} cannot be sent over HTTP: it must be printable ASCII "
                "(spaces and tabs only inside), without line breaks or leading/trailing whitespace"
            )
        out[lower] = value
    return out


def _is_number(value: Any) -> bool:
    """A finite int or float, not a bool (no float conversion: an int of any size is fine)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) or math.isfinite(value)


def _shown(value: Any, limit: int = 80) -> str:
    """``repr(value)`` for a message, cut to ``limit`` characters; never raises (an int of over 4,300 digits
    has no ``repr``)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a message must not fail
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + "..."


def _parse_int(text: str) -> int | None:
    """``json.loads``'s ``parse_int``: ``None`` for an integer too long to be a count (never a ValueError)."""
    return int(text) if len(text.lstrip("-")) <= _MAX_INT_DIGITS else None


def _loads(content: bytes) -> Any:
    """The JSON value of a response body (UTF-8, -16 or -32, as RFC 8259 allows).

    Raises:
        ValueError: not JSON, or not decodable text.
        RecursionError: nested too deeply for Python's parser.
    """
    return json.loads(content, parse_int=_parse_int)


def _reason(exc: BaseException) -> str:
    return "nested too deeply" if isinstance(exc, RecursionError) else type(exc).__name__


def _parse_completion(payload: Any, content: bytes, where: str) -> ChatCompletion:
    choices = payload.get("choices") if isinstance(payload, Mapping) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise BackendError(f"the response has no choices: {_snippet(content)}", store=where)
    message = choices[0].get("message")
    text = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(text, str):
        raise BackendError(f"the response has no choices[0].message.content string: {_snippet(content)}", store=where)
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


def _status_error(
    status: int,
    headers: httpx.Headers,
    content: bytes,
    where: str,
    *,
    what: str = "chat completion request",
    clean: Callable[[str], str] = str,
) -> BackendError:
    """The typed error for a non-2xx answer of an OpenAI-compatible endpoint (chat or embeddings).

    ``what`` names the request in the generic case; ``clean`` runs over text taken from the answer (the
    embedder passes its key redaction, for servers that echo the key back).
    """
    if 300 <= status < 400:
        location = headers.get("location")
        target = f"to {clean(_snippet(location))!r}" if location else "without a Location"
        return BackendError(
            f"HTTP {status}: the server redirected {target}; redirects are not followed (a POST is not resent "
            "to another URL): set base_url to the final URL",
            store=where,
        )
    message = f"HTTP {status}: {clean(_server_message(content))}"
    if status in _AUTH_STATUSES:
        return AuthenticationError(f"the API key was refused ({message})", store=where)
    retry_after = retry_after_seconds(headers)
    if status == 429:
        return RateLimitError(f"rate limited ({message})", store=where, retry_after=retry_after)
    if status in _UNAVAILABLE_STATUSES:
        return BackendTemporarilyUnavailableError(f"server unavailable ({message})", store=where, retry_after=retry_after)
    if status in _TRANSIENT_STATUSES:
        return TransientBackendError(f"server error ({message})", store=where, retry_after=retry_after)
    return BackendError(f"{what} failed ({message})", store=where)


def _server_message(content: bytes) -> str:
    """The error message of an OpenAI-style body ``{"error": {"message": ...}}``, else the body itself."""
    try:
        body = _loads(content)
    except (ValueError, RecursionError):
        return _snippet(content)
    if isinstance(body, Mapping):
        error = body.get("error")
        if isinstance(error, Mapping) and isinstance(error.get("message"), str):
            return _snippet(error["message"], limit=1000)
        if isinstance(error, str):
            return _snippet(error, limit=1000)
        if isinstance(body.get("message"), str):
            return _snippet(body["message"], limit=1000)
    return _snippet(content)


def _snippet(text: str | bytes, limit: int = 300) -> str:
    """The start of ``text`` on one line, at most ``limit`` characters (bytes are decoded leniently)."""
    if isinstance(text, bytes):
        text = text[: limit * 4].decode("utf-8", errors="replace")
    text = text.replace("\r", " ").replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."


