"""What ``fastrag serve`` serves: the knowledge bases, the request limits and the bearer tokens, from TOML.

::

    [serve]
    max_query_chars = 2048          # longest query, in characters (at most 8,192)
    max_top_k = 100                 # largest top_k a request may ask for (at most 10,000)
    max_body_bytes = 1048576        # largest request body, in bytes (413 above it)
    max_documents = 1000            # most documents one add request may carry
    request_timeout = 30.0          # seconds one retrieval may take (503 naming the store after it)
    header_timeout = 10.0           # seconds for a request's line and headers to arrive (408, then closed)
    body_timeout = 30.0             # seconds for its body to arrive once the headers have (408, then closed)
    keep_alive_timeout = 5.0        # seconds an idle connection stays open after a response
    max_connections = 1000          # open connections; a request beyond them is answered 503 at once
    max_header_bytes = 16384        # the longest request line and headers, in bytes (431, then closed)
    retrieve_api_max_text_chars = 128  # POST /v1/retrieve: the longest retrievalQuery.text (at most 8,192)

    [serve.tokens.alice]            # a bearer token bound to a tenant
    token_sha256 = "9f86d08..."     # SHA-256 (hex) of the token: the file holds no secret
    user_id = "alice"               # every call with this token is confined to user_id "alice"
    knowledge_bases = ["docs"]      # and may only reach these knowledge bases (default: all)

    [serve.tokens.ops]
    token_env = "FASTRAG_OPS_TOKEN" # or: the token itself, read from this environment variable at startup

    [knowledge_bases.docs]          # one table per knowledge base, served as /v1/knowledge-bases/docs/...
    store = "sqlite:///kb.db"       # every key of KnowledgeBase.from_config
    top_k = 5
    subspaces = false               # true: every POST /v1/retrieve on it names its subspace(s) (docs/serve.md)

With no ``[serve.tokens]`` table the service answers every caller (bind it to 127.0.0.1, or put it behind a
proxy that authenticates). With tokens, every ``/v1`` call needs ``Authorization: Bearer <token>``; a token
bound to ``user_id`` / ``agent_id`` can neither name another tenant (403) nor act outside its tenant (its
binding is applied to every call that names none). A token without a binding may name any tenant.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastrag.errors import ConfigurationError
from fastrag.retrieval.limits import MAX_K, MAX_QUERY_CHARS
from fastrag.scoping import check_scope_value

__all__ = ["ServeConfig", "ServeLimits", "ServerLimits", "TokenBinding", "load_config", "parse_config"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True, slots=True)
class ServeLimits:
    """Per-request bounds, checked before any store is called (a request past one gets a 422 naming the
    field, or 413 for the body).

    Attributes:
        max_query_chars: the longest ``query``, in characters (1 to 8,192, the SDK's own limit).
        max_top_k: the largest ``top_k`` (1 to 10,000); ``offset + top_k`` stays within 10,000.
        max_body_bytes: the largest request body, in bytes (>= 1,024).
        max_documents: the most documents one ``POST .../documents`` may carry (>= 1).
        request_timeout: seconds one retrieval (or ``ask``'s retrieval) may take before it is cancelled and
            answered with a 503 (``retrieval_failed``, the store named); a number in (0, 3600].
        retrieve_api_max_text_chars: the longest ``retrievalQuery.text`` of ``POST /v1/retrieve``, in
            characters (1 to 8,192; default 128, the Retrieve API design's limit).

    Raises:
        ConfigurationError: a bound out of its range.
    """

    max_query_chars: int = 2_048
    max_top_k: int = 100
    max_body_bytes: int = 1_048_576
    max_documents: int = 1_000
    request_timeout: float = 30.0
    retrieve_api_max_text_chars: int = 128

    def __post_init__(self) -> None:
        timeout = self.request_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 3600:
            raise ConfigurationError(f"serve.request_timeout must be a number of seconds in (0, 3600], got {timeout!r}")
        for name, low, high in (
            ("max_query_chars", 1, MAX_QUERY_CHARS),
            ("max_top_k", 1, MAX_K),
            ("max_body_bytes", 1_024, 1 << 31),
            ("max_documents", 1, 100_000),
            ("retrieve_api_max_text_chars", 1, MAX_QUERY_CHARS),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ConfigurationError(f"serve.{name} must be an int in [{low}, {high}], got {value!r}")


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """What one client may hold of the server: its connection, and the time it takes to send a request.
    Applied by the server (:mod:`fastrag.serve.server`, which ``fastrag serve`` runs), before the app sees a
    request; a client past one is answered and its connection closed.

    Attributes:
        header_timeout: seconds from a connection's opening (or, on a kept-alive connection, from the first
            byte of its next request) until the request line and headers have all arrived; past it the
            server answers 408 and closes the connection (a connection that sent nothing is closed without
            an answer). A number in (0, 3600]; default 10. uvicorn has no such limit of its own.
        body_timeout: seconds from the end of the headers until the whole body has arrived; past it, 408
            and the connection is closed (the app sees a disconnected client). In (0, 3600]; default 30.
        keep_alive_timeout: seconds an idle connection is kept open after a response (uvicorn's
            ``timeout_keep_alive``). In (0, 3600]; default 5, uvicorn's.
        max_connections: the most connections served at once (uvicorn's ``limit_concurrency``, which
            counts open connections and requests in progress): a request that arrives while this many
            are open or running is answered 503 at once, ``/healthz`` included. An int in [1, 1,000,000];
            default 1,000.
        max_header_bytes: the longest request line and headers, in bytes; a request past it is answered
            431 and its connection closed. An int in [1,024, 1,048,576]; default 16,384, h11's own default.

    Raises:
        ConfigurationError: a bound out of its range.
    """

    header_timeout: float = 10.0
    body_timeout: float = 30.0
    keep_alive_timeout: float = 5.0
    max_connections: int = 1_000
    max_header_bytes: int = 16_384

    def __post_init__(self) -> None:
        for name in ("header_timeout", "body_timeout", "keep_alive_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 3600:
                raise ConfigurationError(f"serve.{name} must be a number of seconds in (0, 3600], got {value!r}")
        for name, low, high in (("max_connections", 1, 1_000_000), ("max_header_bytes", 1_024, 1 << 20)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ConfigurationError(f"serve.{name} must be an int in [{low:,}, {high:,}], got {value!r}")


@dataclass(frozen=True, slots=True)
class TokenBinding:
    """One bearer token and what it may do.

    Attributes:
        label: the token's name in the configuration (logged instead of the token).
        digest: SHA-256 of the token (32 bytes).
        scope: the tenant keys bound to the token (``{"user_id": "alice"}``); empty: any tenant.
        knowledge_bases: the knowledge bases the token may reach; ``None``: all.
    """

    label: str
    digest: bytes
    scope: Mapping[str, str | int] = field(default_factory=dict)
    knowledge_bases: frozenset[str] | None = None

    def matches(self, token: str) -> bool:
        """Whether ``token`` is this token (compared in constant time)."""
        return hmac.compare_digest(hashlib.sha256(token.encode("utf-8")).digest(), self.digest)


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """The parsed configuration: knowledge-base tables (not opened), limits and tokens.

    Attributes:
        knowledge_bases: ``{name: table}``, each a mapping for
            :meth:`~fastrag.knowledge_base.KnowledgeBase.from_config`.
        limits: the request limits.
        tokens: the bearer tokens; empty: no authentication.
        server: the connection limits (read timeouts, connection count, header size).
    """

    knowledge_bases: Mapping[str, Mapping[str, Any]]
    limits: ServeLimits = field(default_factory=ServeLimits)
    tokens: tuple[TokenBinding, ...] = ()
    server: ServerLimits = field(default_factory=ServerLimits)


def _token(label: str, table: Any, names: set[str], environ: Mapping[str, str]) -> TokenBinding:
    where = f"serve.tokens.{label}"
    if not isinstance(table, Mapping):
        raise ConfigurationError(f"{where} must be a table")
    unknown = sorted(set(table) - {"token_sha256", "token_env", "user_id", "agent_id", "knowledge_bases"})
    if unknown:
        raise ConfigurationError(f"{where}: unknown key(s) {unknown}")
    if ("token_sha256" in table) == ("token_env" in table):
        raise ConfigurationError(f"{where}: set exactly one of token_sha256 and token_env")
    if "token_sha256" in table:
        digest = table["token_sha256"]
        if not isinstance(digest, str) or not _HEX64.match(digest.lower()):
            raise ConfigurationError(f"{where}.token_sha256 must be 64 hex digits (sha256sum of the token)")
        raw = bytes.fromhex(digest)
    else:
        variable = table["token_env"]
        if not isinstance(variable, str) or not variable:
            raise ConfigurationError(f"{where}.token_env must name an environment variable")
        secret = environ.get(variable)
        if not secret:
            raise ConfigurationError(f"{where}: environment variable {variable} is not set or empty")
        raw = hashlib.sha256(secret.encode("utf-8")).digest()
    scope: dict[str, str | int] = {}
    for key in ("user_id", "agent_id"):
        if key in table:
            try:
                check_scope_value(key, table[key])
            except ValueError as exc:
                raise ConfigurationError(f"{where}.{key}: {exc}") from exc
            scope[key] = table[key]
    allowed = None
    if "knowledge_bases" in table:
        kbs = table["knowledge_bases"]
        if not isinstance(kbs, list) or not all(isinstance(k, str) for k in kbs):
            raise ConfigurationError(f"{where}.knowledge_bases must be a list of names")
        missing = sorted(set(kbs) - names)
        if missing:
            raise ConfigurationError(f"{where}.knowledge_bases names unknown knowledge base(s) {missing}")
        allowed = frozenset(kbs)
    return TokenBinding(label=label, digest=raw, scope=scope, knowledge_bases=allowed)


def parse_config(data: Mapping[str, Any], *, environ: Mapping[str, str] | None = None) -> ServeConfig:
    """A :class:`ServeConfig` from a parsed TOML document (see the module docstring).

    Raises:
        ConfigurationError: no ``[knowledge_bases.NAME]`` table, a bad name (letters, digits, ``_.-``, at
            most 64), an unknown key, a bad limit, or a bad token table (two tokens with the same digest
            included).
    """
    environ = os.environ if environ is None else environ
    unknown = sorted(set(data) - {"serve", "knowledge_bases"})
    if unknown:
        raise ConfigurationError(f"unknown table(s) {unknown}; known: ['serve', 'knowledge_bases']")
    kbs = data.get("knowledge_bases")
    if not isinstance(kbs, Mapping) or not kbs:
        raise ConfigurationError("no knowledge base configured: add a [knowledge_bases.NAME] table")
    for name, table in kbs.items():
        if not _NAME.match(name):
            raise ConfigurationError(f"knowledge base name {name!r}: use letters, digits, '_', '.', '-' (at most 64)")
        if not isinstance(table, Mapping):
            raise ConfigurationError(f"knowledge_bases.{name} must be a table")
    serve = data.get("serve", {})
    if not isinstance(serve, Mapping):
        raise ConfigurationError("[serve] must be a table")
    limit_names = ("max_query_chars", "max_top_k", "max_body_bytes", "max_documents", "request_timeout",
                   "retrieve_api_max_text_chars")  # fmt: skip
    server_names = ("header_timeout", "body_timeout", "keep_alive_timeout", "max_connections", "max_header_bytes")
    unknown = sorted(set(serve) - {*limit_names, *server_names, "tokens"})
    if unknown:
        raise ConfigurationError(f"serve: unknown key(s) {unknown}; known: {[*limit_names, *server_names, 'tokens']}")
    limits = ServeLimits(**{k: serve[k] for k in limit_names if k in serve})
    server = ServerLimits(**{k: serve[k] for k in server_names if k in serve})
    token_tables = serve.get("tokens", {})
    if not isinstance(token_tables, Mapping):
        raise ConfigurationError("[serve.tokens] must be a table of tables")
    tokens = tuple(_token(label, table, set(kbs), environ) for label, table in token_tables.items())
    if len({t.digest for t in tokens}) != len(tokens):
        raise ConfigurationError("two serve.tokens have the same token")
    return ServeConfig(knowledge_bases={k: dict(v) for k, v in kbs.items()}, limits=limits, tokens=tokens,
                       server=server)  # fmt: skip


def load_config(path: str | Path, *, environ: Mapping[str, str] | None = None) -> ServeConfig:
    """Read and parse a ``knowledge_bases.toml`` (see :func:`parse_config`).

    Raises:
        ConfigurationError: the file cannot be read, is not TOML, or :func:`parse_config` refuses it (the
            message names the file).
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"{path}: invalid TOML: {exc}") from exc
    except OSError as exc:
        raise ConfigurationError(f"{path}: cannot read: {exc}") from exc
    try:
        return parse_config(data, environ=environ)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{path}: {exc}") from exc
