"""HTTP failures as fastrag errors: what every model-API client (OpenAI-compatible, Cohere) maps the same way.

One table for the statuses of every provider (RFC 9110 meanings, and the providers' documented ones):

=============================  ==========================================================================
status                         error
=============================  ==========================================================================
3xx                            :class:`~fastrag.errors.BackendError` naming the ``Location`` (never followed)
401, 403 (Cohere: also 498)    :class:`~fastrag.errors.AuthenticationError` (never retried)
429                            :class:`~fastrag.errors.RateLimitError` with ``retry_after``
502, 503, 504                  :class:`~fastrag.errors.BackendTemporarilyUnavailableError` with ``retry_after``
408, 500                       :class:`~fastrag.errors.TransientBackendError` with ``retry_after``
any other                      :class:`~fastrag.errors.BackendError` with the server's message
=============================  ==========================================================================

and for ``httpx``'s exceptions (:func:`transport_error`): a timeout is a
:class:`~fastrag.errors.RetrievalTimeoutError`, a refused connection a
:class:`~fastrag.errors.BackendTemporarilyUnavailableError`, a dropped connection or a protocol error from the
server a :class:`~fastrag.errors.TransientBackendError`; a request that cannot be sent (a bad header, a URL
scheme ``httpx`` cannot speak), a body that cannot be decoded and anything else a
:class:`~fastrag.errors.BackendError`. Only the :class:`~fastrag.errors.TransientBackendError` ones are retried
(:mod:`fastrag.retry`). Text taken from an answer passes through a ``redact`` function, so a server that
echoes the API key back never puts it in a message.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from fastrag.errors import (
    AuthenticationError,
    BackendError,
    BackendTemporarilyUnavailableError,
    InvalidParameterError,
    RateLimitError,
    RetrievalTimeoutError,
    TransientBackendError,
)
from fastrag.lifecycle import AsyncResource
from fastrag.retry import retry_after_seconds

__all__ = [
    "AUTH_STATUSES",
    "HTTPX_ERRORS",
    "HeldHTTPClient",
    "MAX_TIMEOUT",
    "TRANSIENT_STATUSES",
    "UNAVAILABLE_STATUSES",
    "check_timeout",
    "is_number",
    "shown",
    "snippet",
    "status_error",
    "transport_error",
]

AUTH_STATUSES = frozenset({401, 403})
"""Statuses that mean the key was refused (RFC 9110: 401 Unauthorized, 403 Forbidden)."""
UNAVAILABLE_STATUSES = frozenset({502, 503, 504})
"""Statuses of a server or gateway that cannot answer now (Bad Gateway, Service Unavailable, Gateway Timeout)."""
TRANSIENT_STATUSES = frozenset({408, 500})
"""Other statuses worth retrying: 408 Request Timeout, 500 Internal Server Error."""

MAX_TIMEOUT = 1e6
"""The longest ``timeout`` a client takes, in seconds (11.6 days); far larger ones overflow the platform's
``time_t`` in socket timeouts."""


def status_error(
    status: int | None,
    *,
    message: str,
    where: str,
    what: str,
    headers: Mapping[str, str] | None = None,
    auth_statuses: frozenset[int] = AUTH_STATUSES,
    redact: Callable[[str], str] = str,
) -> BackendError:
    """The typed error for a non-2xx answer (see the module's table).

    Args:
        status: the HTTP status (``None`` when an SDK did not say: a plain :class:`BackendError`).
        message: the server's message (already extracted from its body).
        where: the endpoint, for the error's ``store``.
        what: names the request in the generic case (``"embedding request"``: "embedding request failed").
        headers: the answer's headers (``Retry-After``, ``Location``).
        auth_statuses: the statuses that mean the key was refused (Cohere adds 498, its "invalid token").
        redact: run over text taken from the answer.
    """
    headers = headers or {}
    if status is not None and 300 <= status < 400:
        location = headers.get("location")
        target = f"to {redact(snippet(location))!r}" if location else "without a Location"
        return BackendError(
            f"HTTP {status}: the server redirected {target}; redirects are not followed (a POST is not resent "
            "to another URL): set base_url to the final URL",
            store=where,
        )
    text = f"HTTP {status}: {redact(message)}"
    if status in auth_statuses:
        return AuthenticationError(f"the API key was refused ({text})", store=where)
    retry_after = retry_after_seconds(headers)
    if status == 429:
        return RateLimitError(f"rate limited ({text})", store=where, retry_after=retry_after)
    if status in UNAVAILABLE_STATUSES:
        return BackendTemporarilyUnavailableError(f"server unavailable ({text})", store=where, retry_after=retry_after)
    if status in TRANSIENT_STATUSES:
        return TransientBackendError(f"server error ({text})", store=where, retry_after=retry_after)
    return BackendError(f"{what} failed ({text})", store=where)


def transport_error(
    exc: Exception, *, where: str, timeout: Callable[[], RetrievalTimeoutError]
) -> BackendError:
    """The typed error for an ``httpx`` exception raised while sending or reading (see the module).

    Args:
        exc: what ``httpx`` raised (an ``HTTPError``, ``InvalidURL`` or ``StreamError``).
        where: the endpoint, for the error's ``store``.
        timeout: builds the timeout error (it names the request, its stage and its limit).
    """
    if isinstance(exc, httpx.TimeoutException):
        return timeout()
    if isinstance(exc, httpx.ConnectError):
        return BackendTemporarilyUnavailableError(f"cannot connect: {exc}", store=where)
    if isinstance(exc, httpx.LocalProtocolError):  # the request itself: sending it again cannot help
        return BackendError(f"the request could not be sent: {exc}", store=where)
    if isinstance(exc, httpx.UnsupportedProtocol):  # a URL scheme httpx cannot speak: sending again cannot help
        return BackendError(f"connection failed: {type(exc).__name__}: {exc}", store=where)
    if isinstance(exc, httpx.TransportError):  # read/write errors, a dropped connection, a bad response, a proxy
        return TransientBackendError(f"connection failed: {type(exc).__name__}: {exc}", store=where)
    if isinstance(exc, httpx.DecodingError):
        return BackendError(f"the response body could not be decoded: {exc}", store=where)
    return BackendError(f"the request failed: {type(exc).__name__}: {exc}", store=where)  # TooManyRedirects, ...


HTTPX_ERRORS = (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError)
"""Every exception ``httpx`` raises while sending or reading, for an ``except`` around a request."""


class HeldHTTPClient(AsyncResource):
    """The ``httpx.AsyncClient`` a provider client sends with: an injected one stays the caller's (never closed
    here); without one, its own, closed by ``aclose()`` (``fastrag.lifecycle.AsyncResource``). The
    base of both provider clients.

    Args:
        http_client: the injected client, or ``None``.
        timeout: seconds, for the client created when none is injected.

    Raises:
        InvalidParameterError: ``http_client`` is not an ``httpx.AsyncClient`` (``name`` names the argument).
    """

    def __init__(self, http_client: httpx.AsyncClient | None, *, timeout: float, name: str = "http_client") -> None:
        self.check_http_client(http_client, name)
        self._http = http_client if http_client is not None else self._own(httpx.AsyncClient(timeout=timeout))

    @staticmethod
    def check_http_client(http_client: Any, name: str = "http_client") -> None:
        """Refuse an ``http_client`` that is neither ``None`` nor an ``httpx.AsyncClient`` (before anything is built).

        Raises:
            InvalidParameterError: naming the argument ``name``.
        """
        if http_client is not None and not isinstance(http_client, httpx.AsyncClient):
            raise InvalidParameterError(f"{name} must be an httpx.AsyncClient, got {shown(http_client)}")

    @property
    def http(self) -> httpx.AsyncClient:
        """The ``httpx.AsyncClient`` requests go through (the injected one, or the client's own)."""
        return self._http


def check_timeout(timeout: Any) -> float:
    """``timeout`` as a float, if it is a number of seconds in ``(0, MAX_TIMEOUT]``.

    Raises:
        InvalidParameterError: otherwise.
    """
    if not is_number(timeout) or not 0 < timeout <= MAX_TIMEOUT:
        raise InvalidParameterError(f"timeout must be a number of seconds in (0, {MAX_TIMEOUT:.0f}], got {shown(timeout)}")
    return float(timeout)


def is_number(value: Any) -> bool:
    """A finite int or float, not a bool (no float conversion: an int of any size is fine)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) or math.isfinite(value)


def shown(value: Any, limit: int = 80) -> str:
    """``repr(value)`` for a message, cut to ``limit`` characters; never raises (an int of over 4,300 digits
    has no ``repr``)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a message must not fail
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + "..."


def snippet(text: str | bytes, limit: int = 300) -> str:
    """The start of ``text`` on one line, at most ``limit`` characters (bytes are decoded leniently)."""
    if isinstance(text, bytes):
        text = text[: limit * 4].decode("utf-8", errors="replace")
    text = text.replace("\r", " ").replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."
