"""The connection side of :class:`~fastrag.vector_store.postgres.PgVectorStore`: store URLs, what messages may
show of them, and how psycopg's exceptions become fastrag's.

Errors (each chains psycopg's exception and names the store):

- a statement cancelled by ``statement_timeout``, no pooled connection within the timeout, no connection at
  all (refused, DNS, connect timeout), a connection lost, the server shutting down, too many connections:
  :class:`~fastrag.errors.BackendTemporarilyUnavailableError` (retried by :class:`~fastrag.retry.RetryingStore`);
- a serialization failure, a deadlock, a lock not available, or (in an upsert) a unique violation because a
  concurrent upsert of the same id committed first: :class:`~fastrag.errors.TransientBackendError` (the
  retried upsert then replaces that document, as an upsert should);
- credentials refused (SQLSTATE class 28): :class:`~fastrag.errors.AuthenticationError`;
- anything else: :class:`~fastrag.errors.BackendError`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from fastrag.errors import (
    AuthenticationError,
    BackendError,
    BackendTemporarilyUnavailableError,
    ConfigurationError,
    FastragError,
    TransientBackendError,
)

__all__ = ["URL_OPTIONS", "backend_error", "parse_url", "redacted"]

URL_OPTIONS = frozenset({"table", "dimension", "timeout", "create", "pool_size", "ef_search"})
"""The query parameters of a store URL that are fastrag's; every other one goes to libpq."""


def _flag(url: str, name: str, value: str) -> bool:
    lowered = value.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ConfigurationError(f"{url}: {name} must be true or false, got {value!r}")


def redacted(conninfo: str) -> str:
    """``conninfo`` (a URL or a key/value string) without its password, for messages and logs."""
    if "://" not in conninfo:
        return " ".join(part for part in conninfo.split() if not part.lower().startswith("password="))
    parts = urlsplit(conninfo)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    user = f"{parts.username}@" if parts.username else ""
    return f"{parts.scheme}://{user}{host}{parts.path}"


def parse_url(url: str) -> tuple[str, dict[str, Any]]:
    """``(libpq URL, constructor arguments)`` for a store URL (the form
    :meth:`~fastrag.vector_store.postgres.store.PgVectorStore.from_url` documents).

    The fastrag options (``table``, ``dimension``, ``timeout``, ``create``, ``pool_size``, ``ef_search``) become
    arguments; every other query parameter stays in the libpq URL; the scheme becomes ``postgresql``.

    Raises:
        ConfigurationError: the URL is not a PostgreSQL URL, or an option's value is invalid.
    """
    if not isinstance(url, str):
        raise ConfigurationError(f"store URL must be a string, got {url!r}")
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("postgresql", "postgres"):
        raise ConfigurationError(f"{url!r} is not a PostgreSQL URL; use postgresql://USER@HOST:PORT/DB?table=NAME")
    options: dict[str, str] = {}
    passthrough: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in URL_OPTIONS:
            options[key] = value
        else:
            passthrough.append((key, value))
    args: dict[str, Any] = {}
    if "table" in options:
        args["table"] = unquote(options["table"])
    if "create" in options:
        args["create"] = _flag(url, "create", options["create"])
    for name, kind in (("dimension", int), ("timeout", float), ("pool_size", int), ("ef_search", int)):
        if name in options:
            try:
                args[name] = kind(options[name])
            except ValueError as exc:
                raise ConfigurationError(f"{url}: {name} must be a number, got {options[name]!r}") from exc
    conninfo = parts._replace(scheme="postgresql", query=urlencode(passthrough, quote_via=quote)).geturl()
    return conninfo, args


def backend_error(what: str, exc: BaseException, *, store: str, timeout: float) -> FastragError:
    """fastrag's error for a psycopg (or psycopg-pool) exception raised while doing ``what``.

    See the module docstring for the mapping. ``store`` names the store in the message; ``timeout`` (seconds)
    is the limit a timeout message quotes.
    """
    import psycopg
    import psycopg_pool

    errors = psycopg.errors
    text = " ".join(str(exc).split())[:500] or type(exc).__name__
    message = f"{what} failed: {type(exc).__name__}: {text}"
    if isinstance(exc, errors.QueryCanceled):
        return BackendTemporarilyUnavailableError(
            f"{what} timed out (statement_timeout {timeout:g} s): {text}", store=store
        )
    if isinstance(exc, psycopg_pool.PoolTimeout):
        return BackendTemporarilyUnavailableError(
            f"{what}: no connection within {timeout:g} s: {text}", store=store
        )
    sqlstate = getattr(exc, "sqlstate", None) or ""
    if sqlstate.startswith("28"):
        return AuthenticationError(message, store=store)
    if sqlstate in ("40001", "40P01", "55P03"):  # serialization failure, deadlock, lock not available
        return TransientBackendError(message, store=store)
    if sqlstate == "23505" and what == "upsert":  # another upsert of the same id committed first: sent again,
        return TransientBackendError(  # this one replaces it, as an upsert should
            f"upsert: a concurrent upsert wrote one of these ids first ({text})", store=store
        )
    if isinstance(exc, psycopg.OperationalError) and (
        not sqlstate or sqlstate.startswith(("08", "57P", "53"))
    ):  # no connection, connection lost, server shutting down, too many connections or out of resources
        return BackendTemporarilyUnavailableError(message, store=store)
    if isinstance(exc, psycopg.InterfaceError | OSError | TimeoutError):
        return BackendTemporarilyUnavailableError(message, store=store)
    return BackendError(message, store=store)
