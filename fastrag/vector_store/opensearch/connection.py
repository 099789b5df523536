"""Reaching OpenSearch: the ``opensearch-py`` import, index names, store URLs, and the texts of OpenSearch's
errors (for fastrag's messages)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from fastrag.errors import ConfigurationError

INSTALL_HINT = 'pip install "fastrag-retrieval[opensearch]"'

ANALYZERS = (
    "arabic", "armenian", "basque", "bengali", "brazilian", "bulgarian", "catalan", "cjk", "czech", "danish",
    "dutch", "english", "estonian", "finnish", "fingerprint", "french", "galician", "german", "greek", "hindi",
    "hungarian", "indonesian", "irish", "italian", "keyword", "latvian", "lithuanian", "norwegian", "pattern",
    "persian", "portuguese", "romanian", "russian", "simple", "sorani", "spanish", "standard", "stop", "swedish",
    "thai", "turkish", "whitespace",
)
"""OpenSearch's built-in analyzers (OpenSearch docs, "Analyzers": the built-in and the language analyzers), the
names ``?analyzer=`` takes. The constructor also takes an analyzer a plugin installs (``icu_analyzer``, ...)."""


def import_sdk() -> Any:
    """The ``opensearchpy`` module, imported on first use (with its async client).

    Raises:
        ConfigurationError: opensearch-py or aiohttp is missing (with the ``pip install`` line).
    """
    try:
        import opensearchpy
        from opensearchpy import AsyncOpenSearch  # noqa: F401  (needs aiohttp, the [async] extra)
    except ImportError as exc:
        raise ConfigurationError(
            f"OpenSearchVectorStore needs opensearch-py with its async client (aiohttp): {INSTALL_HINT}"
        ) from exc
    return opensearchpy


BAD_INDEX_CHARS = frozenset('\\/*?"<>| ,#:')


def check_index_name(index: Any) -> str:
    """``index`` when OpenSearch accepts it as an index name.

    Raises:
        ConfigurationError: it does not.
    """
    if not isinstance(index, str) or not index:
        raise ConfigurationError(f"index must be a non-empty string, got {index!r}")
    bad = sorted(set(index) & BAD_INDEX_CHARS)
    if (
        bad
        or index != index.lower()
        or index[0] in "_-+"
        or index in (".", "..")
        or len(index.encode("utf-8")) > 255
    ):
        raise ConfigurationError(
            f"invalid OpenSearch index name {index!r}: use lowercase, no spaces or any of \\ / * ? \" < > | , # :, "
            "not starting with _ - +, at most 255 bytes"
        )
    return index


def strip_credentials(url: str) -> str:
    """``url`` without ``user:password@`` (for messages and store names)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url.rstrip("/")
    return parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]).geturl().rstrip("/")


def parse_store_url(url: str) -> dict[str, Any]:
    """The constructor options (``url``, ``index``, ``http_auth``, ``verify_certs``, ``timeout``, ``exact``,
    ``analyzer``) an ``opensearch://`` URL names.

    See :meth:`~fastrag.vector_store.opensearch.OpenSearchVectorStore.from_url` for the form.

    Raises:
        ConfigurationError: the URL is not of that form, or names an analyzer that is not one of
            :data:`ANALYZERS` (the message lists them).
    """
    if not isinstance(url, str):
        raise ConfigurationError(f"store URL must be a string, got {url!r}")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("opensearch", "opensearchs"):
        raise ConfigurationError(
            f"{strip_credentials(url)}: expected opensearch://host:port/index or opensearchs://host:port/index"
        )
    try:
        port = parts.port or 9200
    except ValueError as exc:
        raise ConfigurationError(f"{strip_credentials(url)}: invalid port") from exc
    host = parts.hostname
    if not host:
        raise ConfigurationError(f"{strip_credentials(url)}: no host")
    index = unquote(parts.path.lstrip("/"))
    if not index or "/" in index:
        raise ConfigurationError(f"{strip_credentials(url)}: write opensearch://host:port/index (one index name)")
    if ":" in host:
        host = f"[{host}]"
    options: dict[str, Any] = {
        "url": f"{'https' if scheme == 'opensearchs' else 'http'}://{host}:{port}",
        "index": index,
    }
    if parts.username is not None:
        options["http_auth"] = (unquote(parts.username), unquote(parts.password or ""))
    for name, raw in parse_qsl(parts.query, keep_blank_values=True):
        if name in ("verify_certs", "exact"):
            if raw.lower() not in ("true", "false", "1", "0"):
                raise ConfigurationError(f"{strip_credentials(url)}: {name} must be true or false, got {raw!r}")
            options[name] = raw.lower() in ("true", "1")
        elif name == "timeout":
            try:
                options["timeout"] = float(raw)
            except ValueError as exc:
                raise ConfigurationError(f"{strip_credentials(url)}: timeout must be seconds, got {raw!r}") from exc
        elif name == "analyzer":
            if raw not in ANALYZERS:
                raise ConfigurationError(
                    f"{strip_credentials(url)}: unknown analyzer {raw!r}; OpenSearch's built-in analyzers: "
                    + ", ".join(ANALYZERS)
                )
            options["analyzer"] = raw
        else:
            raise ConfigurationError(
                f"{strip_credentials(url)}: unknown option {name!r}; known: analyzer, exact, timeout, verify_certs"
            )
    return options


def error_type(exc: Any) -> str | None:
    """The OpenSearch error type of an SDK exception (``index_not_found_exception``, ...), if it has one."""
    info = getattr(exc, "info", None)
    if isinstance(info, Mapping):
        error = info.get("error")
        if isinstance(error, Mapping):
            return error.get("type")
    error = getattr(exc, "error", None)
    return error if isinstance(error, str) else None


def error_text(error: Any) -> str:
    """``type: reason`` of one error object of a ``_bulk`` or ``_delete_by_query`` answer."""
    if isinstance(error, Mapping):
        cause = error.get("cause", error)
        if isinstance(cause, Mapping):
            return f"{cause.get('type')}: {cause.get('reason')}"
    return str(error)


def describe_error(exc: Any) -> str:
    """A short text of an SDK exception: the root cause's ``type: reason`` when OpenSearch sent one."""
    info = getattr(exc, "info", None)
    if isinstance(info, Mapping) and isinstance(info.get("error"), Mapping):
        error = info["error"]
        root = (error.get("root_cause") or [error])[0]
        reason = root.get("reason") if isinstance(root, Mapping) else None
        return f"{error.get('type')}: {reason or error.get('reason')}"
    error = getattr(exc, "error", None)
    detail = getattr(exc, "info", None)
    if isinstance(detail, BaseException):
        return f"{error}: {detail}"
    return str(error if error is not None else exc)


def describe_client(client: Any) -> str:
    """``scheme://host:port`` of an injected client's first host, for messages (``"opensearch"`` if unknown)."""
    try:
        host = client.transport.hosts[0]
        scheme = "https" if host.get("use_ssl") or host.get("scheme") == "https" else "http"
        return f"{scheme}://{host['host']}:{host.get('port', 9200)}"
    except (AttributeError, IndexError, KeyError, TypeError):
        return "opensearch"
