"""The HTTP client of an OpenAI-compatible API, shared by the chat client and the embedder.

:class:`OpenAICompatibleClient` is one endpoint (``{base_url}/chat/completions``, ``{base_url}/embeddings``)
spoken over ``httpx``; :class:`~fastrag.llm.OpenAICompatibleLLM` and
:class:`~fastrag.ingestion.steps.openai_compatible.OpenAICompatibleEmbedder` each hold one and only build the
request body and read the answer. What the client does for both:

- **Base URL**: an absolute ``http://`` or ``https://`` URL with a host (:func:`check_base_url`), else
  :class:`~fastrag.errors.ConfigurationError`.
- **Key**: ``api_key``, else the environment variable ``api_key_env`` unless a key header (``Authorization``,
  and for the embedder ``api-key``, Azure's) is among ``headers``; sent as ``Authorization: Bearer <key>``;
  none when neither is set (local servers need none). A key that HTTP cannot carry (empty, non-ASCII, a
  space or line break) raises :class:`~fastrag.errors.InvalidParameterError` without showing it.
- **Headers** (:func:`check_headers`): RFC 9110 tokens, printable ASCII values, each name once;
  ``Content-Type``, ``Content-Length``, ``Transfer-Encoding`` and ``Host`` are the client's own.
- **One attempt** (:meth:`~fastrag.providers.openai.OpenAICompatibleClient.post_json`): ``timeout`` bounds it whole (connecting,
  sending, receiving every byte, with :func:`anyio.fail_after`); the body is read as a stream and refused past
  ``max_response_bytes`` (after decompression; an uncompressed body that declares more is refused unread);
  redirects are never followed; a non-200 answer and every ``httpx`` exception become the typed errors of
  :mod:`fastrag.providers.http`; the answer must be JSON (``json.loads``; an integer of more than 18 digits
  reads as ``None``, so no count can make Python refuse it).
- **Redaction**: the key is replaced by ``***`` in any text of the server's put in an error message.

Retries are the caller's (a :class:`~fastrag.retry.RetryPolicy` around ``post_json``, which changes no
state on the server: resending is safe, if possibly billed twice).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

import anyio
import httpx

from fastrag.errors import (
    BackendError,
    BackendUnavailableError,
    ConfigurationError,
    InvalidParameterError,
    RetrievalTimeoutError,
)
from fastrag.providers.http import (
    HTTPX_ERRORS,
    HeldHTTPClient,
    check_timeout,
    shown,
    snippet,
    status_error,
    transport_error,
)

__all__ = [
    "API_KEY_ENV",
    "DEFAULT_BASE_URL",
    "OpenAICompatibleClient",
    "check_base_url",
    "check_headers",
    "loads",
    "server_message",
]

API_KEY_ENV = "OPENAI_API_KEY"
"""The environment variable read for the API key when none is given (OpenAI's SDK reads the same)."""

DEFAULT_BASE_URL = "https://api.openai.com/v1"
"""OpenAI's API."""

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


class OpenAICompatibleClient(HeldHTTPClient):
    """One OpenAI-compatible endpoint: ``POST {base_url}{path}`` with a JSON body, one attempt at a time.

    Args:
        base_url: the API's base URL up to and including the version (``"http://localhost:8000/v1"``).
        path: the endpoint under it (``"/chat/completions"``, ``"/embeddings"``).
        example: a base URL to show in the error for a bad ``base_url``.
        api_key: the bearer token; ``None`` reads ``api_key_env`` unless ``headers`` has a key header.
        api_key_env: the environment variable read for the key.
        key_headers: header names (lower case) that carry a key of their own; given with ``api_key``
            they are refused (the key would be sent twice).
        headers: extra headers for every request (see :func:`check_headers`).
        timeout: seconds one attempt may take in all, in (0, 1e6].
        http_client: an ``httpx.AsyncClient`` to send with; it stays the caller's (never closed here).
            Without one, the client creates its own and closes it in ``aclose()``.
        max_response_bytes: the largest body read, in bytes after decompression (an int >= 1).
        what: names the request in messages (``"chat completion request"``, ``"embedding request"``).
        stage: the :class:`~fastrag.errors.RetrievalTimeoutError`'s ``stage`` (``"chat"``, ``"embed"``).
        where: how errors name the endpoint (their ``store``); default the full URL.

    Raises:
        ConfigurationError: ``base_url`` is not an http(s) URL with a host.
        InvalidParameterError: a bad ``timeout``, ``max_response_bytes``, ``http_client``, header or key (the
            message names the key's source, never the key).
    """

    def __init__(
        self,
        *,
        base_url: str,
        path: str,
        example: str,
        api_key: str | None,
        api_key_env: str = API_KEY_ENV,
        key_headers: tuple[str, ...] = ("authorization",),
        headers: Mapping[str, str] | None,
        timeout: float,
        http_client: httpx.AsyncClient | None,
        max_response_bytes: int,
        what: str,
        stage: str,
        where: str | None = None,
    ) -> None:
        check_base_url(base_url, example=example)
        self.timeout = check_timeout(timeout)
        super().__init__(http_client, timeout=self.timeout)
        if isinstance(max_response_bytes, bool) or not isinstance(max_response_bytes, int) or max_response_bytes <= 0:
            raise InvalidParameterError(f"max_response_bytes must be a positive int, got {shown(max_response_bytes)}")
        extra = check_headers(headers)
        has_key_header = any(name in extra for name in key_headers)
        if has_key_header and api_key is not None:
            names = "/".join("Authorization" if n == "authorization" else n for n in key_headers)
            raise InvalidParameterError(f"pass the key either as api_key or as an {names} header, not both")
        key = api_key if api_key is not None or has_key_header else (os.environ.get(api_key_env) or None)
        if key is not None and (not isinstance(key, str) or not _API_KEY.fullmatch(key.strip())):
            source = "api_key" if api_key is not None else api_key_env
            # the key itself is a secret: never put it in the message
            raise InvalidParameterError(
                f"{source} must be a non-empty string of printable ASCII characters without spaces or line breaks"
            )
        self.base_url = base_url.strip().rstrip("/")
        self.url = f"{self.base_url}{path}"
        self.where = where if where is not None else self.url
        self.max_response_bytes = max_response_bytes
        self.what = what
        self.stage = stage
        self._secret = key.strip() if key is not None else None
        self._headers = {**extra, "content-type": "application/json"}
        if self._secret is not None:
            self._headers["authorization"] = f"Bearer {self._secret}"

    def redact(self, text: str) -> str:
        """``text`` with the API key replaced by ``***`` (for messages holding what a server answered)."""
        return text.replace(self._secret, "***") if self._secret else text

    def answer_text(self, content: bytes) -> str:
        """The start of an answer's body on one line, redacted, for an error message."""
        return self.redact(snippet(content))

    async def post_json(self, body: dict[str, Any]) -> Any:
        """Send ``body`` once and return the answer's JSON value (status 200 only).

        Raises:
            BackendUnavailableError: the client is closed.
            RetrievalTimeoutError: the attempt ran past ``timeout``.
            BackendError: a non-200 answer or an ``httpx`` failure, as :mod:`fastrag.providers.http` maps them
                (to its subclasses AuthenticationError, RateLimitError, BackendTemporarilyUnavailableError,
                TransientBackendError where they apply); a body longer than ``max_response_bytes``, or one
                that is not JSON (or nests too deeply to parse).
        """
        if self.closed:
            raise BackendUnavailableError("the client is closed", store=self.where)
        try:
            with anyio.fail_after(self.timeout):
                status, headers, content = await self._send(body)
        except TimeoutError as exc:
            raise self._timeout_error() from exc
        if status != 200:
            raise status_error(
                status, message=server_message(content), where=self.where, what=self.what, headers=headers,
                redact=self.redact,
            )  # fmt: skip
        try:
            return loads(content)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            reason = "nested too deeply" if isinstance(exc, RecursionError) else type(exc).__name__
            raise BackendError(f"the response is not JSON ({reason}): {self.answer_text(content)}",
                               store=self.where) from exc  # fmt: skip

    async def _send(self, body: dict[str, Any]) -> tuple[int, httpx.Headers, bytes]:
        """POST ``body`` and read the answer, at most ``max_response_bytes`` of it (decompressed)."""
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
        except HTTPX_ERRORS as exc:
            raise transport_error(exc, where=self.where, timeout=self._timeout_error) from exc

    def _timeout_error(self) -> RetrievalTimeoutError:
        return RetrievalTimeoutError(
            f"{self.what} timed out after {self.timeout} s", timeout=self.timeout, stage=self.stage, store=self.where
        )

    def _too_large(self, status: int, detail: str) -> BackendError:
        return BackendError(
            f"the response (HTTP {status}) is longer than max_response_bytes={self.max_response_bytes}: {detail}",
            store=self.where,
        )



def check_base_url(base_url: Any, *, example: str) -> None:
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


def check_headers(headers: Any) -> dict[str, str]:
    """``headers`` with lower-cased names, checked to be sendable over HTTP/1.1.

    Names are RFC 9110 tokens, case-insensitive, each at most once; values printable ASCII (spaces and tabs
    inside), without line breaks or surrounding whitespace. ``Content-Type``, ``Content-Length``,
    ``Transfer-Encoding`` and ``Host`` are the client's own.

    Raises:
        InvalidParameterError: not a mapping of str to str, a bad or reserved or repeated name, or a value
            HTTP cannot carry (the message names the header, never the value: it may be a secret).
    """
    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise InvalidParameterError(f"headers must be a mapping of str to str, got {type(headers).__name__}")
    out: dict[str, str] = {}
    for name, value in headers.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise InvalidParameterError(f"headers must be a mapping of str to str, got a {type(value).__name__} for {shown(name)}")
        if not _HEADER_NAME.fullmatch(name):
            raise InvalidParameterError(
                f"header name {shown(name)} is not a valid HTTP header name (letters, digits and !#$%&'*+-.^_`|~, not empty)"
            )
        lower = name.lower()
        if lower in _RESERVED_HEADERS:
            raise InvalidParameterError(f"header {shown(name)} is set by the client and cannot be overridden")
        if lower in out:
            raise InvalidParameterError(f"header {shown(name)} is given more than once (names are case-insensitive)")
        if not _HEADER_VALUE.fullmatch(value):
            # the value may be a secret (a gateway key): name the header, not the value
            raise InvalidParameterError(
                f"the value of header {shown(name)} cannot be sent over HTTP: it must be printable ASCII "
                "(spaces and tabs only inside), without line breaks or leading/trailing whitespace"
            )
        out[lower] = value
    return out


def _parse_int(text: str) -> int | None:
    """``json.loads``'s ``parse_int``: ``None`` for an integer too long to be a count (never a ValueError)."""
    return int(text) if len(text.lstrip("-")) <= _MAX_INT_DIGITS else None


def loads(content: bytes) -> Any:
    """The JSON value of a response body (UTF-8, -16 or -32, as RFC 8259 allows); an integer of more than 18
    digits reads as ``None``.

    Raises:
        ValueError: not JSON, or not decodable text.
        RecursionError: nested too deeply for Python's parser.
    """
    return json.loads(content, parse_int=_parse_int)


def server_message(content: bytes) -> str:
    """The error message of an OpenAI-style body ``{"error": {"message": ...}}``, else the body itself."""
    try:
        body = loads(content)
    except (ValueError, RecursionError):
        return snippet(content)
    if isinstance(body, Mapping):
        error = body.get("error")
        if isinstance(error, Mapping) and isinstance(error.get("message"), str):
            return snippet(error["message"], limit=1000)
        if isinstance(error, str):
            return snippet(error, limit=1000)
        if isinstance(body.get("message"), str):
            return snippet(body["message"], limit=1000)
    return snippet(content)
