"""Reaching Chroma: the chromadb import, store and server URLs, the mapping of SDK exceptions to fastrag's errors
(with the HTTP status read from the response itself), and the per-event-loop HTTP clients chromadb shares."""

from __future__ import annotations

import asyncio
import sys
import threading
from contextvars import ContextVar
from typing import Any
from urllib.parse import parse_qsl, unquote, urlparse

import httpx

from fastrag.errors import (
    AuthenticationError,
    BackendError,
    BackendTemporarilyUnavailableError,
    ConfigurationError,
    RateLimitError,
)
from fastrag.vector_store.chroma.schema import DEFAULT_COLLECTION

INSTALL_HINT = 'ChromaVectorStore needs chromadb: pip install "fastrag-retrieval[chroma]"'


def parse_store_url(url: str) -> dict[str, Any]:
    """The constructor options (``url``, ``path``, ``collection``) a Chroma store URL names.

    See :meth:`~fastrag.vector_store.chroma.ChromaVectorStore.from_url` for the forms.

    Raises:
        ConfigurationError: the URL is not one of those forms.
    """
    if not isinstance(url, str):
        raise ConfigurationError(f"a Chroma store URL must be a string, got {url!r}")
    parsed = urlparse(url)
    scheme = parsed.scheme.lower()
    query = dict(parse_qsl(parsed.query, keep_blank_values=True))
    if parsed.fragment:
        raise ConfigurationError(f"{url}: a Chroma store URL has no #fragment")
    options: dict[str, Any] = {}
    if scheme in ("chroma", "chroma+http", "chroma+https"):
        if query:
            raise ConfigurationError(f"{url}: unknown query parameters {sorted(query)}")
        if not parsed.hostname:
            raise ConfigurationError(f"{url}: no host; write chroma://host:port/collection")
        try:
            port = parsed.port
        except ValueError as exc:
            raise ConfigurationError(f"{url}: invalid port") from exc
        http = "https" if scheme == "chroma+https" else "http"
        options["url"] = f"{http}://{netloc(parsed.hostname)}:{port or (443 if http == 'https' else 8000)}"
        options["collection"] = unquote(parsed.path.strip("/")) or DEFAULT_COLLECTION
    elif scheme == "chroma+path":
        if parsed.netloc:
            raise ConfigurationError(
                f"{url}: write chroma+path:///relative/dir or chroma+path:////absolute/dir (no host)"
            )
        if set(query) - {"collection"}:
            raise ConfigurationError(f"{url}: unknown query parameters {sorted(set(query) - {'collection'})}")
        folder = unquote(parsed.path)
        if folder.startswith("/"):  # as sqlite:///: three slashes then a relative path, four for absolute
            folder = folder[1:]
        if not folder:
            raise ConfigurationError(f"{url}: no folder")
        options["path"] = folder
        options["collection"] = query.get("collection") or DEFAULT_COLLECTION
    elif scheme == "chroma+memory":
        if parsed.netloc or query:
            raise ConfigurationError(f"{url}: write chroma+memory:///collection")
        options["collection"] = unquote(parsed.path.strip("/")) or DEFAULT_COLLECTION
    else:
        raise ConfigurationError(
            f"{url}: not a Chroma store URL; write chroma://host:port/collection, "
            "chroma+path:///dir?collection=name or chroma+memory:///collection"
        )
    return options


def import_chromadb() -> Any:
    """The ``chromadb`` module, imported on first use.

    Raises:
        ConfigurationError: chromadb is not installed (with the ``pip install`` line), or fails to import.
    """
    try:
        import chromadb
    except ImportError as exc:
        raise ConfigurationError(f"{INSTALL_HINT} ({exc})") from exc
    except Exception as exc:  # chromadb refuses to load, e.g. on an SQLite older than it needs
        raise ConfigurationError(f"chromadb is installed but failed to import: {exc}") from exc
    return chromadb


def current_loop_key() -> int:
    """The key chromadb's ``AsyncFastAPI`` files its per-event-loop ``httpx.AsyncClient`` under."""
    try:
        return hash(asyncio.get_running_loop())
    except RuntimeError:
        return 0


# chromadb 1.5's AsyncFastAPI keeps one httpx.AsyncClient per event loop in a class-level dict, shared by
# every async client on that loop, and offers no way to close it. We count the HTTP clients this module
# created per loop and close the loop's httpx client when the last of them closes, so connections are not
# left bound to a finished event loop (whose hash a later loop may reuse).
_HTTP_CLIENTS_PER_LOOP: dict[int, int] = {}
_HTTP_LOCK = threading.Lock()


def register_async_client() -> int:
    """Count one more ``AsyncHttpClient`` created by this package on the running event loop; return the loop's key
    (pass it to :func:`release_async_client` when the client closes)."""
    key = current_loop_key()
    with _HTTP_LOCK:
        _HTTP_CLIENTS_PER_LOOP[key] = _HTTP_CLIENTS_PER_LOOP.get(key, 0) + 1
    return key


def netloc(host: str) -> str:
    """``host`` as it appears in a URL's authority (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host else host


def parse_server_url(url: str) -> tuple[str, int, bool]:
    """``(host, port, ssl)`` of a Chroma server URL, ``http://host:port`` (port 8000 when omitted) or
    ``https://host[:port]`` (443).

    Raises:
        ConfigurationError: the URL is not of that form.
    """
    if not isinstance(url, str):
        raise ConfigurationError(f"url must be a string, got {url!r}")
    parsed = urlparse(url)
    scheme = parsed.scheme.lower()
    if scheme not in ("http", "https") or not parsed.hostname:
        raise ConfigurationError(f"{url}: a Chroma server URL is http://host:port or https://host[:port]")
    if parsed.path not in ("", "/") or parsed.query or parsed.fragment:
        raise ConfigurationError(f"{url}: a Chroma server URL has no path, query or fragment")
    try:
        port = parsed.port
    except ValueError as exc:
        raise ConfigurationError(f"{url}: invalid port") from exc
    return parsed.hostname, port or (443 if scheme == "https" else 8000), scheme == "https"


def mapped_error(exc: BaseException, store: str, what: str, *, status: int | None = None) -> BackendError:
    """Our error for a Chroma SDK exception raised while doing ``what``; ``status`` is the HTTP status of the
    last response the call received (chromadb raises a bare ``Exception(body)`` for a non-Chroma error
    body, so the status is read from the response itself, see :func:`watch_statuses`)."""
    text = str(exc) or type(exc).__name__
    chroma_errors = getattr(sys.modules.get("chromadb.errors"), "__dict__", {})
    auth_types = tuple(t for t in (chroma_errors.get("AuthorizationError"), chroma_errors.get("ChromaAuthError")) if t)
    if status in (401, 403) or (auth_types and isinstance(exc, auth_types)):
        return AuthenticationError(f"Chroma refused the credentials ({what}): HTTP {status or 401}: {text}", store=store)
    if status == 429:
        return RateLimitError(f"Chroma rate limit ({what}): {text}", store=store)
    if status in (502, 503, 504):
        return BackendTemporarilyUnavailableError(f"Chroma server unavailable ({what}): HTTP {status}: {text}", store=store)
    if isinstance(exc, TimeoutError | httpx.TransportError | ConnectionError) or "Could not connect" in text:
        return BackendTemporarilyUnavailableError(f"cannot reach the Chroma server ({what}): {text}", store=store)
    if status is not None and status >= 400:
        return BackendError(f"Chroma failed ({what}): HTTP {status}: {text}", store=store)
    return BackendError(f"Chroma failed ({what}): {text}", store=store)


HTTP_STATUS: ContextVar[int | None] = ContextVar("fastrag_chroma_http_status", default=None)
"""The status of the last HTTP response seen by the current call (set by :func:`record_status`)."""


async def record_status(response: httpx.Response) -> None:
    """An httpx response hook: note the response's status in :data:`HTTP_STATUS`."""
    HTTP_STATUS.set(response.status_code)


def watch_statuses(client: Any) -> None:
    """Hook :func:`record_status` into the httpx client chromadb's ``AsyncHttpClient`` uses on this event loop
    (idempotent; a chromadb without that layout is left alone, its errors mapped without a status)."""
    get_http = getattr(getattr(client, "_server", None), "_get_client", None)
    if get_http is None:
        return
    try:
        hooks = get_http().event_hooks
    except Exception:  # noqa: BLE001 - another chromadb layout
        return
    if record_status not in hooks.get("response", []):
        hooks.setdefault("response", []).append(record_status)


async def release_async_client(client: Any, loop_key: int | None) -> None:
    """Forget an ``AsyncHttpClient`` this module created (chromadb 1.5 has no ``close`` for it)."""
    try:
        from chromadb.api.async_fastapi import AsyncFastAPI
        from chromadb.api.shared_system_client import SharedSystemClient
    except ImportError:  # pragma: no cover - another chromadb layout: nothing we know how to release
        return
    for owner in (client, getattr(client, "_admin_client", None)):
        identifier = getattr(owner, "_identifier", None)
        SharedSystemClient._identifier_to_system.pop(identifier, None)
        SharedSystemClient._identifier_to_refcount.pop(identifier, None)
    if loop_key is None:
        return
    with _HTTP_LOCK:
        left = _HTTP_CLIENTS_PER_LOOP.get(loop_key, 1) - 1
        if left > 0:
            _HTTP_CLIENTS_PER_LOOP[loop_key] = left
            return
        _HTTP_CLIENTS_PER_LOOP.pop(loop_key, None)
        http = getattr(AsyncFastAPI, "_clients", {}).pop(loop_key, None)
    if http is not None and loop_key == current_loop_key():
        await http.aclose()
