"""Reaching Milvus: the pymilvus import, store URLs, which SDK errors mean "unavailable", and the
in-process milvus-lite servers this package started (one per data file, stopped by the last store to close)."""

from __future__ import annotations

import os
import re
import threading
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from fastrag.errors import ConfigurationError, InvalidParameterError
from fastrag.vector_store.milvus.schema import ANALYZERS

INSTALL_HINT = 'pip install "fastrag-retrieval[milvus]"'
_LITE_FILE_NAME = re.compile(r"[A-Za-z0-9._-]{1,36}")


def parse_url(url: str) -> tuple[str, dict[str, Any]]:
    """The target (a server URI or a milvus-lite path) and constructor options a fastrag Milvus URL names.

    See :meth:`~fastrag.vector_store.milvus.MilvusVectorStore.from_url` for the forms.

    Raises:
        ConfigurationError: the URL is not one of those forms.
    """
    if not isinstance(url, str):
        raise ConfigurationError(f"store URL must be a string, got {url!r}")
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in ("milvus", "milvus+https", "milvus-lite"):
        raise ConfigurationError(
            f"{url!r} is not a Milvus URL; use milvus://host:19530/collection or "
            "milvus-lite:///path/to/file.db?collection=name"
        )
    path_part, _, query = rest.partition("?")
    try:
        params = {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True, strict_parsing=bool(query)).items()}
    except ValueError as exc:
        raise ConfigurationError(f"{url}: malformed query string {query!r}") from exc
    known = {"collection", "bm25", "dimension", "db", "timeout", "analyzer", "tenant_isolation"}
    unknown = set(params) - known
    if unknown:
        raise ConfigurationError(f"{url}: unknown parameters {sorted(unknown)}; known: {sorted(known)}")
    options: dict[str, Any] = {}
    if "bm25" in params:
        flag = params["bm25"].lower()
        if flag not in ("true", "false", "1", "0", "yes", "no"):
            raise ConfigurationError(f"{url}: bm25 must be true or false, got {params['bm25']!r}")
        options["enable_bm25"] = flag in ("true", "1", "yes")
    else:
        options["enable_bm25"] = True
    if "analyzer" in params:
        if params["analyzer"] not in ANALYZERS:
            raise ConfigurationError(
                f"{url}: unknown analyzer {params['analyzer']!r}; Milvus's built-in analyzers: {', '.join(ANALYZERS)}"
            )
        if not options["enable_bm25"]:
            raise ConfigurationError(f"{url}: analyzer= is the BM25 analyzer; it needs bm25=true")
        options["analyzer_params"] = {"type": params["analyzer"]}
    if "tenant_isolation" in params:
        if params["tenant_isolation"] not in ("shared", "collection"):
            raise ConfigurationError(
                f"{url}: tenant_isolation must be shared or collection, got {params['tenant_isolation']!r}"
            )
        options["tenant_isolation"] = params["tenant_isolation"]
    for name, target, kind in (("dimension", "dimension", int), ("timeout", "timeout", float)):
        if name in params:
            try:
                options[target] = kind(params[name])
            except ValueError as exc:
                raise ConfigurationError(f"{url}: {name} must be a number, got {params[name]!r}") from exc
    if scheme == "milvus-lite":
        if not path_part.startswith("/") or len(path_part) < 2:
            raise ConfigurationError(f"{url}: write milvus-lite:///relative.db or milvus-lite:////absolute.db")
        path = unquote(path_part[1:])
        if not path.endswith(".db"):
            raise ConfigurationError(f"{url}: a milvus-lite path must end in .db, got {path!r}")
        if "db" in params:
            raise ConfigurationError(f"{url}: db= is for servers; a milvus-lite file has one database")
        options["collection"] = params.get("collection", "fastrag")
        target_url = path
    else:
        split = urlsplit(f"http://{path_part}")
        if "collection" in params:
            raise ConfigurationError(f"{url}: put the collection in the path: milvus://host:port/collection")
        if split.username or split.password:
            raise ConfigurationError(f"{url}: do not put credentials in the URL; pass token=")
        try:
            port = split.port or 19530
        except ValueError as exc:
            raise ConfigurationError(f"{url}: bad port") from exc
        if not split.hostname:
            raise ConfigurationError(f"{url}: no host")
        collection = split.path.strip("/")
        if not collection or "/" in collection:
            raise ConfigurationError(f"{url}: name one collection in the path: milvus://host:port/collection")
        options["collection"] = collection
        if "db" in params:
            options["db_name"] = params["db"]
        transport = "https" if scheme == "milvus+https" else "http"
        host = f"[{split.hostname}]" if ":" in split.hostname else split.hostname
        target_url = f"{transport}://{host}:{port}"
    return target_url, options


def lite_data_path(url: str) -> str | None:
    """The absolute milvus-lite data file ``url`` names, or ``None`` for a server URI.

    Raises:
        InvalidParameterError: ``url`` is neither a server URI nor a path ending in ``.db`` whose file name
            milvus-lite accepts (letters, digits, ``.``, ``_``, ``-``; at most 36 characters).
    """
    lowered = url.lower()
    if lowered.startswith(("http://", "https://", "tcp://", "unix:")):
        return None
    if not url.endswith(".db"):
        raise InvalidParameterError(
            f"url must be a milvus-lite path ending in .db or a server URI (http://host:19530), got {url!r}"
        )
    name = os.path.basename(url)
    if not _LITE_FILE_NAME.fullmatch(name):
        raise InvalidParameterError(
            f"milvus-lite needs a file name of at most 36 letters, digits, '.', '_' or '-', got {name!r}"
        )
    return os.path.realpath(url)



def import_pymilvus() -> Any:
    try:
        import pymilvus
    except ImportError as exc:
        raise ConfigurationError(f"the Milvus store needs pymilvus: {INSTALL_HINT}") from exc
    return pymilvus


def dropped_by_ping_policy(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it chains) is gRPC's ``UNAVAILABLE: Too many pings``.

    milvus-lite 2.5.1 serving over TCP keeps gRPC's default server ping policy, which pymilvus's keepalive
    pings break on a connection left idle for about half a minute: the server closes it (GOAWAY) and the next
    call fails once while pymilvus reconnects; the call after that succeeds (seen in CI). One more attempt of
    that call is safe: every call the store makes is idempotent (reads, upserts by id, deletes, index
    creation after listing the existing indexes).
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if "Too many pings" in str(current):
            return True
        current = current.__cause__ or current.__context__
    return False


def is_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it chains) says the server cannot be reached or opened."""
    import grpc
    from pymilvus import exceptions as pe

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, pe.ConnectError | pe.MilvusUnavailableException | pe.ConnectionConfigException
                      | pe.ConnectionNotExistException | ConnectionError | TimeoutError):
            return True
        if isinstance(current, pe.MilvusException) and (
            current.code == 2 or "Retry timeout" in str(current.message)  # 2: Status.CONNECT_FAILED
        ):
            return True
        if isinstance(current, grpc.RpcError) and callable(getattr(current, "code", None)):
            if current.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                return True
        current = current.__cause__ or current.__context__
    return False


def sdk_errors() -> tuple[type[BaseException], ...]:
    import grpc
    from pymilvus.exceptions import MilvusException

    return (MilvusException, grpc.RpcError, OSError, TimeoutError)


# Milvus-lite servers this module started in this process, by absolute data path: [open stores, started here].
_LITE_LOCK = threading.Lock()
_LITE_SERVERS: dict[str, list[Any]] = {}


def lite_acquire(path: str) -> None:
    from milvus_lite.server_manager import server_manager_instance  # ships with pymilvus's lite extra

    with _LITE_LOCK:
        entry = _LITE_SERVERS.get(path)
        if entry is None:
            # pymilvus keeps one server per path; only a server that did not run before we came is ours to stop.
            running = getattr(server_manager_instance, "_servers", None)
            started_here = running is not None and path not in running
            _LITE_SERVERS[path] = [1, started_here]
        else:
            entry[0] += 1


def lite_release(path: str) -> None:
    with _LITE_LOCK:
        entry = _LITE_SERVERS.get(path)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] > 0:
            return
        del _LITE_SERVERS[path]
        started_here = entry[1]
    if started_here:
        from milvus_lite.server_manager import server_manager_instance

        server_manager_instance.release_server(path)


def message(exc: BaseException) -> str:
    message = getattr(exc, "message", None)
    return str(message) if message else (str(exc) or type(exc).__name__)


def python_milvus_lite() -> bool:
    """Whether the installed milvus-lite is 3.x, the Python re-implementation (not the native 2.5 build), whose
    searches over unflushed rows are slow scans (see ``MilvusVectorStore._searchable``). Read from the
    package's version, since milvus-lite 2.5.1's server does not implement ``GetVersion``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return int(version("milvus-lite").split(".")[0]) >= 3
    except (PackageNotFoundError, ValueError):
        return False
