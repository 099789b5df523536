"""Reaching Qdrant: the qdrant-client import, store URLs, and which SDK exceptions mean an outage or a rate limit."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from fastrag.errors import ConfigurationError

INSTALL_HINT = 'pip install "fastrag-retrieval[qdrant]"'


def import_models() -> Any:
    """``qdrant_client.models``, or :class:`ConfigurationError` with the install command."""
    try:
        from qdrant_client import models
    except ImportError as exc:
        raise ConfigurationError(f"the Qdrant store needs qdrant-client: {INSTALL_HINT}") from exc
    return models


def parse_store_url(url: str) -> dict[str, Any]:
    """The constructor arguments a ``qdrant://``, ``qdrants://``, ``qdrant+memory://``, ``qdrant+path://`` or
    ``qdrant+edge://`` URL names.

    See :meth:`~fastrag.vector_store.qdrant.QdrantVectorStore.from_url` for the forms and options.

    Raises:
        ConfigurationError: the URL is not one of those forms or an option is invalid.
    """
    if not isinstance(url, str):
        raise ConfigurationError(f"store URL must be a string, got {url!r}")
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in ("qdrant", "qdrants", "qdrant+memory", "qdrant+path", "qdrant+edge"):
        raise ConfigurationError(
            f"{url!r} is not a Qdrant URL; use qdrant://HOST:PORT/COLLECTION, qdrant+memory:///COLLECTION, "
            "qdrant+path:///PATH?collection=NAME or qdrant+edge:///PATH?collection=NAME"
        )
    body, _, query = rest.partition("?")
    options = {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}
    known = {"collection", "bm25", "dimension", "timeout", "create", "api_key"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigurationError(f"{url}: unknown options {unknown}; known: {sorted(known)}")
    args: dict[str, Any] = {}
    if "bm25" in options:
        args["enable_bm25"] = url_flag(url, "bm25", options["bm25"])
    if "create" in options:
        args["create"] = url_flag(url, "create", options["create"])
    for name, kind in (("dimension", int), ("timeout", float)):
        if name in options:
            try:
                args[name] = kind(options[name])
            except ValueError as exc:
                raise ConfigurationError(f"{url}: {name} must be a number, got {options[name]!r}") from exc
    if "api_key" in options:
        args["api_key"] = options["api_key"]
    collection = options.get("collection")
    if scheme in ("qdrant", "qdrants"):
        host, _, path = body.partition("/")
        if not host:
            raise ConfigurationError(f"{url}: no host; write qdrant://HOST:PORT/COLLECTION")
        if "/" in path.strip("/"):
            raise ConfigurationError(f"{url}: the path must be one collection name")
        collection = unquote(path.strip("/")) or collection
        try:
            port = urlsplit(f"//{host}").port
        except ValueError as exc:
            raise ConfigurationError(f"{url}: invalid port") from exc
        http = "https" if scheme == "qdrants" else "http"
        args["url"] = f"{http}://{host}" if port is not None else f"{http}://{host}:6333"
    elif scheme == "qdrant+memory":
        if not body.startswith("/") and body:
            raise ConfigurationError(f"{url}: write qdrant+memory:///COLLECTION")
        collection = unquote(body.strip("/")) or collection
        args["location"] = ":memory:"
    else:
        if not body.startswith("/") or len(body) < 2:
            raise ConfigurationError(f"{url}: write {scheme}:///relative/dir or {scheme}:////absolute/dir")
        args["edge_path" if scheme == "qdrant+edge" else "path"] = unquote(body[1:])
    if collection:
        args["collection"] = collection
    return args


def is_unavailable(exc: BaseException) -> bool:
    """Whether an SDK exception means Qdrant could not be reached or is overloaded (a transient outage)."""
    from qdrant_client.http.exceptions import (
        ResponseHandlingException,
        UnexpectedResponse,
    )

    if isinstance(exc, ResponseHandlingException | ConnectionError | TimeoutError):
        return True
    if isinstance(exc, UnexpectedResponse):
        return exc.status_code in (502, 503, 504)
    try:
        import httpx

        if isinstance(exc, httpx.TransportError):
            return True
    except ImportError:  # pragma: no cover - httpx is a core dependency
        pass
    code = getattr(exc, "code", None)
    if callable(code):  # grpc.RpcError
        try:
            name = getattr(code(), "name", "")
        except Exception:  # noqa: BLE001
            return False
        return name in ("UNAVAILABLE", "DEADLINE_EXCEEDED")
    return False


def retry_after(exc: BaseException) -> float | None:
    """Seconds from a response's ``Retry-After`` header (delta-seconds form), if it has one."""
    headers = getattr(exc, "headers", None) or {}
    try:
        value = float(headers.get("retry-after") or headers.get("Retry-After"))
    except (TypeError, ValueError):
        return None
    return value if value >= 0 else None


def describe_error(exc: BaseException) -> str:
    """``Type: message`` of an SDK exception (the transport error a wrapper holds), on one line, at most 500 characters."""
    source = getattr(exc, "source", None)  # ResponseHandlingException wraps the transport error
    inner = source if isinstance(source, BaseException) else exc
    text = " ".join((str(inner) or type(inner).__name__).split())
    return f"{type(inner).__name__}: {text[:500]}"


def url_flag(url: str, name: str, value: str) -> bool:
    """A URL option's boolean value (``1/true/yes/on``, ``0/false/no/off``).

    Raises:
        ConfigurationError: it is neither.
    """
    lowered = value.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ConfigurationError(f"{url}: {name} must be true or false, got {value!r}")
