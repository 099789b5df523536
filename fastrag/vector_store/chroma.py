"""Chroma as a dense :class:`~fastrag.protocols.VectorStore`: cosine k-NN with filters pushed down.

``ChromaVectorStore`` keeps documents, their vectors and their metadata in one Chroma collection, embedded
(``chromadb.EphemeralClient`` / ``PersistentClient``, whose synchronous calls run in worker threads) or on a
Chroma server (``chromadb.AsyncHttpClient``). Chroma has no BM25, so this store is not a
:class:`~fastrag.protocols.LexicalStore`: pair it with one (for example
:class:`~fastrag.vector_store.sqlite.SQLiteVectorStore`) in a
:class:`~fastrag.retrieval.HybridRetriever` (``docs/backends/chroma.md``).

Design:

- **Vectors** live in a collection created with ``configuration={"hnsw": {"space": "cosine"}}`` and
  ``embedding_function=None``; fastrag always passes explicit embeddings (Chroma's default embedding
  function would try to download a model). Chroma returns the cosine *distance*; the score is
  ``1 - distance``, the cosine similarity in [-1, 1]. HNSW is approximate; on small collections (fewer
  records than ``ef_search``, 100) it visits every vector and is exact.
- **Metadata** round-trips exactly through a JSON copy under ``fastrag:json``. Chroma metadata holds only
  scalars and homogeneous lists, so filtering uses flat fields derived from it, written next to the copy
  (``k`` is a top-level metadata key; see :func:`chroma_metadata`):

  ================================  =========================================================================
  field                             holds
  ================================  =========================================================================
  ``k``                             a string or bool value as is; a number as is (ints within 64 bits)
  ``fastrag:num:k``                 a number as a 64-bit float (Chroma compares an int field with a float
                                    operand after truncating the operand, so numbers are compared here)
  ``fastrag:date:k``                an ISO-8601 date string as epoch microseconds (UTC), for date ranges
  ``fastrag:prefix:k``              a string's prefixes, of 0 to :data:`PREFIX_INDEX_LENGTH` characters
  ``fastrag:list:{str,bool,num}:k`` the string, bool and number (as float) elements of a list value
  ``fastrag:keys:num`` / ``:date``  the keys holding a number / a date, to express "not a number"
  ================================  =========================================================================

  A key that starts with ``fastrag:``, ``chroma:``, ``#`` or ``$`` (reserved by Chroma or by us) is stored
  as ``fastrag:key:<key>``. Nested mappings, ``None`` and list elements that are not scalars are kept in
  the JSON copy only: no filter can select them, which is exactly what :func:`fastrag.filters.matches` says.
- **Filters** are translated by :func:`translate_filter` into one Chroma ``where`` (no post-filtering). Chroma
  has no ``$not``, so negations are pushed down to the leaves (De Morgan); a negated range becomes "the
  opposite range, or the key holds no number/date". ``$ne``, ``$nin`` and ``$not_contains`` select records
  that lack the field (Chroma >= 0.6 semantics, pinned by this module's tests), which is what
  ``notEquals``/``notIn`` need. ``stringContains`` with a non-empty value and ``startsWith`` with a prefix
  longer than :data:`PREFIX_INDEX_LENGTH` raise :class:`~fastrag.errors.UnsupportedFilterError`.
- **Native filters**: pass ``filter=ChromaWhere(where={...}, where_document={...})`` to hand Chroma a
  ``where`` / ``where_document`` of your own, unchanged.
- **Upserts** replace a record's metadata: Chroma's ``upsert`` merges metadata, so fields of the previous
  version are read first and deleted (set to ``None``) in the same ``upsert`` call.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlparse

import anyio
import httpx
import numpy as np

from fastrag.errors import (
    AuthenticationError,
    BackendError,
    BackendTemporarilyUnavailableError,
    BackendUnavailableError,
    ConfigurationError,
    DimensionMismatchError,
    FastragError,
    FilterError,
    InvalidParameterError,
    RateLimitError,
    UnsupportedFilterError,
)
from fastrag.filters import RANGE_OPERATORS, And, Comparison, Filter, FilterLike, Not, Or, parse_date, parse_filter
from fastrag.models import Document
from fastrag.vector_store._metadata import epoch_micros, is_number, metadata_json
from fastrag.vector_store._validation import (
    check_dimension,
    check_embeddings,
    check_k,
    check_query_vector,
    check_document_text,
    check_unique_ids,
    distinct_ids,
)

__all__ = [
    "DEFAULT_COLLECTION",
    "PREFIX_INDEX_LENGTH",
    "ChromaVectorStore",
    "ChromaWhere",
    "chroma_metadata",
    "translate_filter",
]

DEFAULT_COLLECTION = "fastrag"
"""The collection used when none is named."""

PREFIX_INDEX_LENGTH = 64
"""Longest ``startsWith`` prefix, in characters, that the store can answer (the prefix shadow's length)."""

FORMAT_VERSION = 1
"""Version of the record layout described in the module docstring, kept in the collection's metadata."""

JSON_KEY = "fastrag:json"
NUMBER_KEYS = "fastrag:keys:num"
DATE_KEYS = "fastrag:keys:date"
NEVER_WHERE: Mapping[str, Any] = {"fastrag:never": {"$eq": True}}
"""The ``where`` of a filter that matches nothing (a field no record has); the store skips the query."""

_RESERVED_PREFIXES = ("fastrag:", "chroma:", "#", "$")
_COLLECTION_NAME = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9._-]{1,510})[a-zA-Z0-9]$")
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_FLIPPED = {"$gt": "$lte", "$gte": "$lt", "$lt": "$gte", "$lte": "$gt"}
_RANGE = {"greaterThan": "$gt", "greaterThanOrEquals": "$gte", "lessThan": "$lt", "lessThanOrEquals": "$lte"}
_INSTALL_HINT = 'ChromaVectorStore needs chromadb: pip install "fastrag-retrieval[chroma]"'

Where = dict[str, Any] | bool
"""A translated (sub)filter: a Chroma ``where`` mapping, or a constant (``True`` matches all, ``False`` none)."""


# ------------------------------------------------------------------------------------ field names


def native_key(key: str) -> str:
    """The Chroma field holding metadata ``key``'s scalar value as is (reserved prefixes are escaped)."""
    return key if key and not key.startswith(_RESERVED_PREFIXES) else f"fastrag:key:{key}"


def number_key(key: str) -> str:
    """The Chroma field holding ``key``'s number as a 64-bit float."""
    return f"fastrag:num:{key}"


def date_key(key: str) -> str:
    """The Chroma field holding ``key``'s ISO-8601 date as epoch microseconds (UTC)."""
    return f"fastrag:date:{key}"


def prefix_key(key: str) -> str:
    """The Chroma list field holding the prefixes of ``key``'s string value."""
    return f"fastrag:prefix:{key}"


def list_key(kind: str, key: str) -> str:
    """The Chroma list field holding the ``kind`` (``str``, ``bool``, ``num``) elements of ``key``'s list."""
    return f"fastrag:list:{kind}:{key}"


# ------------------------------------------------------------------------------------------ values


def _as_float(value: int | float) -> float | None:
    """``value`` as a float, or ``None`` for an int beyond the float range."""
    try:
        return float(value)
    except OverflowError:
        return None


def _distinct(values: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(values))


def chroma_metadata(metadata: Mapping[str, Any], *, metadata_json: str | None = None) -> dict[str, Any]:
    """The Chroma metadata fastrag writes for a document's ``metadata`` (see the module docstring).

    Args:
        metadata: JSON-like metadata (string keys; str, int, float, bool, ``None``, lists, mappings).
        metadata_json: its JSON text, when already serialised; stored under ``fastrag:json``.

    Returns:
        A flat mapping of Chroma fields: scalars and non-empty homogeneous lists only.

    Raises:
        InvalidParameterError: a number is not finite, or an integer is beyond the float range (it could not
            be filtered), or the metadata is not JSON-serialisable.
    """
    if metadata_json is None:
        try:
            metadata_json = json.dumps(metadata, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidParameterError(f"document metadata must be JSON-serialisable: {exc}") from exc
    out: dict[str, Any] = {JSON_KEY: metadata_json}
    numbers: list[str] = []
    dates: list[str] = []
    for key, value in metadata.items():
        if isinstance(value, bool):
            out[native_key(key)] = value
        elif isinstance(value, str):
            out[native_key(key)] = value
            out[prefix_key(key)] = [value[:i] for i in range(min(len(value), PREFIX_INDEX_LENGTH) + 1)]
            moment = parse_date(value)
            if moment is not None:
                out[date_key(key)] = epoch_micros(moment)
                dates.append(key)
        elif is_number(value):
            out[number_key(key)] = _checked_float(key, value)
            numbers.append(key)
            if isinstance(value, float) or _I64_MIN <= value <= _I64_MAX:
                out[native_key(key)] = value
        elif isinstance(value, list | tuple):
            strings = _distinct(v for v in value if isinstance(v, str))
            bools = _distinct(v for v in value if isinstance(v, bool))
            floats = _distinct(_checked_float(key, v) for v in value if is_number(v))
            for kind, items in (("str", strings), ("bool", bools), ("num", floats)):
                if items:
                    out[list_key(kind, key)] = items
    if numbers:
        out[NUMBER_KEYS] = numbers
    if dates:
        out[DATE_KEYS] = dates
    return out


def _checked_float(key: str, value: int | float) -> float:
    as_float = _as_float(value)
    if as_float is None or not math.isfinite(as_float):
        raise InvalidParameterError(
            f"metadata {key!r}: Chroma filters compare numbers as 64-bit floats; {value!r} is out of range"
        )
    return as_float


# ----------------------------------------------------------------------------------------- filters


@dataclass(frozen=True, slots=True)
class ChromaWhere:
    """A native Chroma filter, passed through unchanged: ``filter=ChromaWhere(where={"category": "news"})``.

    The store recognises a native filter by this type only; any other filter argument is a fastrag filter
    (an AST node, its JSON form, or a JSON string). Field names are those of the module docstring: a
    string, bool or number ``k`` is the field ``k``; lists are under ``fastrag:list:...``. ``where_document``
    filters the document text (``$contains``, ``$regex``, ...). Chroma validates both before any query;
    a malformed one raises :class:`~fastrag.errors.FilterError`.

    Attributes:
        where: a Chroma ``where`` mapping, or ``None``.
        where_document: a Chroma ``where_document`` mapping, or ``None``.
    """

    where: Mapping[str, Any] | None = None
    where_document: Mapping[str, Any] | None = None
    native_backend = "chroma"
    """Marks the object as a native filter for the Chroma backend."""

    def __post_init__(self) -> None:
        for name in ("where", "where_document"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Mapping):
                raise InvalidParameterError(f"ChromaWhere.{name} must be a mapping or None, got {value!r}")
        if self.where is None and self.where_document is None:
            raise InvalidParameterError("ChromaWhere needs a where or a where_document")


def translate_filter(filter: FilterLike | None) -> dict[str, Any] | None:  # noqa: A002
    """Translate a fastrag filter into a Chroma ``where`` with the exact :func:`fastrag.filters.matches` semantics.

    Leaves, over the fields of the module docstring (``k`` the key, ``num(k)`` = ``fastrag:num:k``, ...):

    - ``equals`` a string or bool: ``{k: {"$eq": v}}``; a number: ``{num(k): {"$eq": float(v)}}``
      (so ``1 == 1.0``, a bool never equals a number, a string never equals a number). ``in`` groups its
      values by type into ``$in`` lists joined by ``$or`` (an empty list matches nothing). ``notEquals``
      and ``notIn`` are the same with ``$ne`` / ``$nin`` joined by ``$and`` (``notIn []`` matches all).
    - ranges on a number: ``{num(k): {"$gt": float(v)}}``; on a date: ``{date(k): {"$gt": micros}}``.
    - ``startsWith``: ``{prefix(k): {"$contains": p}}``; ``listContains``: ``$contains`` on the list field
      of the value's type. ``stringContains ""`` is ``startsWith ""`` (any string).
    - ``andAll`` / ``orAll``: ``$and`` / ``$or``; ``notAll``: the negation pushed to the leaves. A negated
      range is ``$or`` of the opposite range and ``{"fastrag:keys:num": {"$not_contains": k}}``.

    Constant parts are folded: a filter matching everything translates to ``None``, one matching nothing to
    :data:`NEVER_WHERE`.

    Raises:
        FilterError: the filter is malformed.
        UnsupportedFilterError: ``stringContains`` with a non-empty value (Chroma has no substring operator
            on metadata), or ``startsWith`` with a prefix longer than :data:`PREFIX_INDEX_LENGTH`.
    """
    node = parse_filter(filter)
    if node is None:
        return None
    where = _translate(node, False, "$")
    if where is True:
        return None
    if where is False:
        return {key: dict(value) for key, value in NEVER_WHERE.items()}
    return where


def _translate(node: Filter, negate: bool, path: str) -> Where:
    if isinstance(node, Comparison):
        return _leaf(node, negate, f"{path}.{node.operator}")
    name = {And: "andAll", Or: "orAll", Not: "notAll"}[type(node)]
    if isinstance(node, Not):  # NOT (f1 AND f2 ...)
        conjunction, negate = negate, not negate
    else:
        conjunction = isinstance(node, And) != negate
    parts = [_translate(child, negate, f"{path}.{name}[{i}]") for i, child in enumerate(node.filters)]
    return _all(parts) if conjunction else _any(parts)


def _all(parts: Iterable[Where]) -> Where:
    items: list[dict[str, Any]] = []
    for part in parts:
        if part is False:
            return False
        if part is True:
            continue
        items.extend(part["$and"] if set(part) == {"$and"} else [part])
    return True if not items else items[0] if len(items) == 1 else {"$and": items}


def _any(parts: Iterable[Where]) -> Where:
    items: list[dict[str, Any]] = []
    for part in parts:
        if part is True:
            return True
        if part is False:
            continue
        items.extend(part["$or"] if set(part) == {"$or"} else [part])
    return False if not items else items[0] if len(items) == 1 else {"$or": items}


def _leaf(node: Comparison, negate: bool, path: str) -> Where:
    op, key, value = node.operator, node.key, node.value
    if op == "notEquals":
        op, negate = "equals", not negate
    elif op == "notIn":
        op, negate = "in", not negate
    if op == "equals":
        return _membership(key, (value,), negate, single=True)
    if op == "in":
        return _membership(key, value, negate, single=False)
    if op in RANGE_OPERATORS:
        return _range(_RANGE[op], key, value, negate)
    if op == "stringContains":
        if value:
            raise UnsupportedFilterError(
                "Chroma cannot express stringContains: its where has no substring operator on metadata "
                "($contains on metadata tests list membership)",
                path=path,
            )
        op = "startsWith"  # the empty string is in every string: "the value is a string"
    if op == "startsWith":
        if len(value) > PREFIX_INDEX_LENGTH:
            raise UnsupportedFilterError(
                f"Chroma stores string prefixes up to {PREFIX_INDEX_LENGTH} characters; this prefix has "
                f"{len(value)}",
                path=path,
            )
        return {prefix_key(key): {"$not_contains" if negate else "$contains": value}}
    # listContains
    if isinstance(value, bool):
        field, operand = list_key("bool", key), value
    elif isinstance(value, str):
        field, operand = list_key("str", key), value
    else:
        as_float = _as_float(value)
        if as_float is None:
            return negate  # no stored number equals an int beyond the float range
        field, operand = list_key("num", key), as_float
    return {field: {"$not_contains" if negate else "$contains": operand}}


def _membership(key: str, values: Sequence[Any], negate: bool, *, single: bool) -> Where:
    strings = _distinct(v for v in values if isinstance(v, str))
    bools = _distinct(v for v in values if isinstance(v, bool))
    floats = _distinct(f for v in values if is_number(v) and (f := _as_float(v)) is not None)
    if single:
        operator = "$ne" if negate else "$eq"
        groups = [(native_key(key), g[0]) for g in (strings, bools) if g]
        groups += [(number_key(key), floats[0])] if floats else []
    else:
        operator = "$nin" if negate else "$in"
        groups = [(native_key(key), g) for g in (strings, bools) if g]
        groups += [(number_key(key), floats)] if floats else []
    parts = [{field: {operator: operand}} for field, operand in groups]
    return _all(parts) if negate else _any(parts)


def _range(operator: str, key: str, value: Any, negate: bool) -> Where:
    if is_number(value):
        field, kinds = number_key(key), NUMBER_KEYS
        bound: float | int | None = _as_float(value)
        if bound is None:  # an int beyond every float: the range holds for no number or for every number
            holds_for_all = (value > 0) == (operator in ("$lt", "$lte"))
            present = {kinds: {"$contains": key}} if holds_for_all else False
            if not negate:
                return present
            return {kinds: {"$not_contains": key}} if holds_for_all else True
    else:
        moment = parse_date(value)
        if moment is None:  # unreachable: Comparison validates range bounds
            raise FilterError(f"range bound {value!r} is neither a number nor an ISO-8601 date")
        field, kinds, bound = date_key(key), DATE_KEYS, epoch_micros(moment)
    if not negate:
        return {field: {operator: bound}}
    return {"$or": [{field: {_FLIPPED[operator]: bound}}, {kinds: {"$not_contains": key}}]}


# ------------------------------------------------------------------------------------------- store


def _chromadb() -> Any:
    try:
        import chromadb
    except ImportError as exc:
        raise ConfigurationError(f"{_INSTALL_HINT} ({exc})") from exc
    except Exception as exc:  # chromadb refuses to load, e.g. on an SQLite older than it needs
        raise ConfigurationError(f"chromadb is installed but failed to import: {exc}") from exc
    return chromadb


def _loop_key() -> int:
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


class ChromaVectorStore:
    """Documents and vectors in one Chroma collection: cosine k-NN with fastrag filters pushed down.

    Give at most one of ``client``, ``url`` and ``path``; with none, the store uses Chroma's in-memory
    ``EphemeralClient`` (shared by every ephemeral client of the process, lost when the last one closes).

    Args:
        client: a Chroma client to use (``chromadb.EphemeralClient()``, ``PersistentClient(...)``,
            ``HttpClient(...)``, or an ``await chromadb.AsyncHttpClient(...)``); the store never closes it.
        url: a Chroma server, ``http://host:port`` (port 8000 when omitted) or ``https://host[:port]``,
            reached through ``chromadb.AsyncHttpClient``.
        path: a folder for ``chromadb.PersistentClient`` (created if missing).
        collection: the collection name: 3 to 512 characters from ``[a-zA-Z0-9._-]``, starting and ending
            with a letter or digit.
        dimension: the vector width. When given, the collection is created on open (with ``create``) and an
            existing one must have it; when ``None`` it is read from the collection or fixed by the first
            write.
        create: create the collection when it does not exist (on open when ``dimension`` is given, else on
            the first write). With ``False``, writing to a missing collection raises.
        embedding_model: the name of the embedder whose vectors the collection holds; recorded in the
            collection's metadata on first use, and opening it with a different name raises, so vectors of
            two models are never mixed. ``None`` accepts whatever is recorded (see :attr:`embedding_model`).
        timeout: seconds allowed for each request to a Chroma server through the async HTTP client
            (connecting included); embedded clients and injected synchronous clients are not timed.

    Raises:
        ConfigurationError: chromadb is not installed, more than one of ``client``/``url``/``path`` is given,
            the URL or collection name is invalid.
        InvalidParameterError: ``dimension`` or ``timeout`` is not positive.

    Opening (``async with``, or the first call) raises :class:`~fastrag.errors.BackendUnavailableError`
    when the server cannot be reached, and :class:`~fastrag.errors.ConfigurationError` when the collection
    exists but was not created by fastrag, does not use cosine, or has another dimension or embedding model.

    Example::

        async with ChromaVectorStore(path="./chroma", collection="docs") as store:
            await store.upsert(documents, embeddings=vectors)
            hits = await store.search_vector(query_vector, k=5, filter={"equals": {"key": "lang", "value": "en"}})
    """

    def __init__(
        self,
        *,
        client: Any = None,
        url: str | None = None,
        path: str | Path | None = None,
        collection: str = DEFAULT_COLLECTION,
        dimension: int | None = None,
        create: bool = True,
        embedding_model: str | None = None,
        timeout: float = 10.0,
    ) -> None:
        given = [name for name, v in (("client", client), ("url", url), ("path", path)) if v is not None]
        if len(given) > 1:
            raise ConfigurationError(f"give at most one of client, url and path, not {' and '.join(given)}")
        if not isinstance(collection, str) or not _COLLECTION_NAME.match(collection):
            raise ConfigurationError(
                f"invalid Chroma collection name {collection!r}: 3 to 512 characters from [a-zA-Z0-9._-], "
                "starting and ending with a letter or digit"
            )
        if dimension is not None and (isinstance(dimension, bool) or not isinstance(dimension, int) or dimension <= 0):
            raise InvalidParameterError(f"dimension must be a positive int, got {dimension!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < math.inf:
            raise InvalidParameterError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if embedding_model is not None and (not isinstance(embedding_model, str) or not embedding_model):
            raise InvalidParameterError(f"embedding_model must be a non-empty string, got {embedding_model!r}")
        self._chromadb = _chromadb()
        self.collection = collection
        self.dimension: int | None = dimension
        self.create = bool(create)
        self.timeout = float(timeout)
        self.embedding_model: str | None = embedding_model
        """The embedder name recorded in the collection (known once the store is open), or ``None``."""
        self._client = client
        self._owns_client = client is None
        self._server: tuple[str, int, bool] | None = None
        self.path: str | None = None
        if url is not None:
            self._server = _parse_server_url(url)
            host, port, ssl = self._server
            self.location = f"chroma{'+https' if ssl else ''}://{_netloc(host)}:{port}/{collection}"
        elif path is not None:
            self.path = str(path)
            self.location = f"chroma+path://{Path(self.path).resolve()}?collection={collection}"
        elif client is not None:
            self.location = f"chroma ({type(client).__name__}) collection {collection}"
        else:
            self.location = f"chroma+memory:///{collection}"
        self._is_async = False
        self._collection: Any = None
        self._opened = False
        self._closed = False
        self._open_lock: anyio.Lock | None = None
        self._loop_key: int | None = None
        self._max_batch: int | None = None

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> ChromaVectorStore:
        """The store a URL names (opened on first use); keyword arguments (``dimension``, ...) override the URL.

        URL forms:

        - ``chroma://host[:port]/collection`` (or ``chroma+http://``): a Chroma server over HTTP (port 8000
          by default); ``chroma+https://host[:port]/collection`` over HTTPS (port 443 by default).
        - ``chroma+path:///relative/dir?collection=name`` or ``chroma+path:////absolute/dir?collection=name``
          (the same slash rule as ``sqlite:///``):
          an embedded ``PersistentClient`` on that folder.
        - ``chroma+memory:///collection``: the embedded in-memory ``EphemeralClient``.

        The collection defaults to :data:`DEFAULT_COLLECTION`; the path is percent-decoded.

        Raises:
            ConfigurationError: the URL is not one of these forms.
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
            options["url"] = f"{http}://{_netloc(parsed.hostname)}:{port or (443 if http == 'https' else 8000)}"
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
        options.update(kwargs)
        return cls(**options)

    def __repr__(self) -> str:
        return f"ChromaVectorStore({self.location!r})"

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> ChromaVectorStore:
        try:
            await self._open()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the client the store created (never an injected one). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._collection = None
        client, self._client = self._client, None
        if client is None or not self._owns_client:
            return
        if self._is_async:
            await _release_async_client(client, self._loop_key)
            return
        close = getattr(client, "close", None)
        if callable(close):
            try:
                await anyio.to_thread.run_sync(close)
            except Exception as exc:
                raise BackendError(f"closing the Chroma client failed: {exc}", store=self.location) from exc

    async def _open(self) -> None:
        if self._closed:
            raise BackendUnavailableError("store is closed", store=self.location)
        if self._opened:
            return
        if self._open_lock is None:
            self._open_lock = anyio.Lock()
        async with self._open_lock:
            if self._closed:
                raise BackendUnavailableError("store is closed", store=self.location)
            if self._opened:
                return
            if self._client is None:
                self._client = await self._create_client()
            self._is_async = isinstance(self._client, self._chromadb.api.AsyncClientAPI)
            collection = await self._fetch_collection()
            if collection is None and not self.create:
                raise BackendUnavailableError(
                    f"collection {self.collection!r} does not exist (create=False)", store=self.location
                )
            if collection is None and self.dimension is not None and self.create:
                collection = await self._create_collection(self.dimension)
            if collection is not None:
                await self._record_embedding_model(collection)
            self._collection = collection
            self._opened = True

    async def _record_embedding_model(self, collection: Any) -> None:
        """Record ``embedding_model`` in a collection that has none recorded yet."""
        metadata = dict(collection.metadata or {})
        if self.embedding_model is None or metadata.get("fastrag:embedding_model") is not None:
            return
        metadata["fastrag:embedding_model"] = self.embedding_model
        await self._call(lambda: collection.modify(metadata=metadata), "recording the embedding model")

    async def _create_client(self) -> Any:
        chromadb = self._chromadb
        if self._server is not None:
            host, port, ssl = self._server
            try:
                with anyio.fail_after(self.timeout):
                    client = await chromadb.AsyncHttpClient(host=host, port=port, ssl=ssl)
            except Exception as exc:
                raise _mapped(exc, self.location, "connecting") from exc
            key = _loop_key()
            with _HTTP_LOCK:
                _HTTP_CLIENTS_PER_LOOP[key] = _HTTP_CLIENTS_PER_LOOP.get(key, 0) + 1
            self._loop_key = key
            return client
        try:
            if self.path is not None:
                Path(self.path).mkdir(parents=True, exist_ok=True)
                return await anyio.to_thread.run_sync(lambda: chromadb.PersistentClient(path=self.path))
            return await anyio.to_thread.run_sync(chromadb.EphemeralClient)
        except Exception as exc:
            raise BackendUnavailableError(f"cannot open Chroma: {exc}", store=self.location) from exc

    async def _call(self, fn: Callable[[], Any], what: str) -> Any:
        """Run one Chroma call: awaited under the timeout (async client) or in a worker thread (sync)."""
        token = _HTTP_STATUS.set(None)
        try:
            if self._is_async:
                _watch_statuses(self._client)
                with anyio.fail_after(self.timeout):
                    return await fn()
            return await anyio.to_thread.run_sync(fn)
        except FastragError:
            raise
        except Exception as exc:
            if isinstance(exc, self._chromadb.errors.NotFoundError):
                self._collection = None  # deleted behind our back: look it up again next time
                self._opened = False
            raise _mapped(exc, self.location, what, status=_HTTP_STATUS.get()) from exc
        finally:
            _HTTP_STATUS.reset(token)

    @contextmanager
    def _reading(self, what: str) -> Iterator[None]:
        """Turn an answer of the wrong shape (a proxy's ``{}`` with status 200) into a typed error naming the store."""
        try:
            yield
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise BackendError(f"Chroma answered {what} with a malformed response: {exc!r}", store=self.location) from exc

    async def _fetch_collection(self) -> Any:
        client = self._client
        try:
            collection = await self._call(
                lambda: client.get_collection(self.collection, embedding_function=None), "opening the collection"
            )
        except BackendError as exc:
            cause = exc.__cause__
            if isinstance(cause, self._chromadb.errors.NotFoundError) or "does not exist" in str(cause):
                self._opened = False
                return None
            raise
        self._check_collection(collection)
        return collection

    async def _create_collection(self, dimension: int) -> Any:
        client = self._client
        metadata: dict[str, Any] = {
            "fastrag:format": FORMAT_VERSION,
            "fastrag:dimension": dimension,
            "fastrag:prefix_length": PREFIX_INDEX_LENGTH,
        }
        if self.embedding_model is not None:
            metadata["fastrag:embedding_model"] = self.embedding_model
        collection = await self._call(
            lambda: client.get_or_create_collection(
                self.collection,
                configuration={"hnsw": {"space": "cosine"}},
                metadata=metadata,
                embedding_function=None,
            ),
            "creating the collection",
        )
        self._check_collection(collection)
        return collection

    def _check_collection(self, collection: Any) -> None:
        metadata = dict(collection.metadata or {})
        if metadata.get("fastrag:format") != FORMAT_VERSION:
            raise ConfigurationError(
                f"{self.location}: collection {self.collection!r} was not created by fastrag (its metadata has "
                f"fastrag:format={metadata.get('fastrag:format')!r}, expected {FORMAT_VERSION}); "
                "use another collection name"
            )
        configuration = getattr(collection, "configuration_json", None) or {}  # .configuration warns
        space = next((c.get("space") for c in (configuration.get("hnsw"), configuration.get("spann")) if c), None)
        if space not in (None, "cosine"):
            raise ConfigurationError(f"{self.location}: collection uses the {space!r} space, not cosine")
        if metadata.get("fastrag:prefix_length") != PREFIX_INDEX_LENGTH:
            raise ConfigurationError(
                f"{self.location}: collection indexes prefixes up to {metadata.get('fastrag:prefix_length')!r} "
                f"characters, this fastrag version {PREFIX_INDEX_LENGTH}; re-index into a new collection"
            )
        stored = metadata.get("fastrag:dimension")
        if self.dimension is not None and stored != self.dimension:
            raise ConfigurationError(
                f"{self.location}: the collection holds dimension {stored!r}, not {self.dimension!r}; "
                "use a new collection or the same dimension"
            )
        model = metadata.get("fastrag:embedding_model")
        if self.embedding_model is not None and model is not None and model != self.embedding_model:
            raise ConfigurationError(
                f"{self.location}: the collection was built with embedding_model={model!r}, not "
                f"{self.embedding_model!r}; use a new collection or the same model"
            )
        self.dimension = stored
        self.embedding_model = model or self.embedding_model

    async def _max_batch_size(self) -> int:
        if self._max_batch is None:
            read = getattr(self._client, "get_max_batch_size", None)
            size = 1000 if read is None else await self._call(read, "reading the batch size")
            self._max_batch = max(1, int(size))
        return self._max_batch

    # ------------------------------------------------------------------ filters

    def _native(
        self, filter: FilterLike | ChromaWhere | None  # noqa: A002
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """``(where, where_document)`` for a filter argument; validated before any query."""
        if isinstance(filter, ChromaWhere):
            where = None if filter.where is None else dict(filter.where)
            where_document = None if filter.where_document is None else dict(filter.where_document)
            validators = self._chromadb.api.types
            try:
                if where is not None:
                    validators.validate_where(where)
                if where_document is not None:
                    validators.validate_where_document(where_document)
            except (TypeError, ValueError) as exc:
                raise FilterError(f"invalid native Chroma filter: {exc}") from exc
            return where, where_document
        return translate_filter(filter), None

    # ------------------------------------------------------------------ writes

    async def upsert(self, documents: Sequence[Document], *, embeddings: np.ndarray | None = None) -> None:
        """Insert or replace ``documents`` by id (content, metadata and vector all replaced).

        Args:
            documents: the documents; metadata must be JSON-serialisable, and its numbers finite.
            embeddings: ``(len(documents), dim)`` float32 (other float dtypes are converted), finite; any
                scale (cosine normalises). Required: a Chroma record without a vector cannot exist here.

        Writes go in batches of Chroma's maximum batch size; each batch is one ``upsert`` call. Chroma merges
        metadata on upsert, so the fields of a replaced version are read first and removed in the same call
        (two writers upserting the same id at once may leave a stale filter field; the stored metadata, read
        back by :meth:`get` and searches, is always the last written).

        Raises:
            InvalidParameterError: ``embeddings`` is missing or holds NaN or infinity, an id repeats, or
                metadata is not JSON or holds a number Chroma cannot filter.
            DimensionMismatchError: the width differs from the store's dimension, or the row count from
                ``len(documents)``.
            BackendUnavailableError: the server cannot be reached, or the collection is missing with
                ``create=False``.
            BackendError: Chroma failed.
        """
        docs = list(documents)
        if not docs:
            return
        ids = check_unique_ids(docs)
        check_document_text(docs)
        if embeddings is None:
            raise InvalidParameterError("ChromaVectorStore stores vectors: upsert needs embeddings")
        matrix = check_embeddings(embeddings, len(docs), dimension=None, store=self.location)  # width: below
        self._check_dimension(matrix.shape[1], "embeddings have")
        metadatas = await anyio.to_thread.run_sync(_prepare_metadata, docs)
        await self._open()
        self._check_dimension(matrix.shape[1], "embeddings have")
        if self._collection is None:
            if not self.create:
                raise BackendUnavailableError(
                    f"collection {self.collection!r} does not exist (create=False)", store=self.location
                )
            self._collection = await self._create_collection(matrix.shape[1])
            self._check_dimension(matrix.shape[1], "embeddings have")  # another writer may have created it
        collection = self._collection
        batch = await self._max_batch_size()
        for start in range(0, len(docs), batch):
            chunk_ids = ids[start : start + batch]
            chunk_meta = metadatas[start : start + batch]
            previous = await self._call(
                lambda chunk_ids=chunk_ids: collection.get(ids=chunk_ids, include=["metadatas"]), "upsert"
            )
            old_fields = {i: set(m or ()) for i, m in zip(previous["ids"], previous["metadatas"] or [], strict=False)}
            for doc_id, meta in zip(chunk_ids, chunk_meta, strict=True):
                for stale in old_fields.get(doc_id, set()) - set(meta):
                    meta[stale] = None  # Chroma deletes a metadata field set to None
            await self._call(
                lambda chunk_ids=chunk_ids, chunk_meta=chunk_meta, start=start: collection.upsert(
                    ids=chunk_ids,
                    embeddings=matrix[start : start + batch],
                    metadatas=chunk_meta,
                    documents=[d.content for d in docs[start : start + batch]],
                ),
                "upsert",
            )
        if self.dimension is None:
            self.dimension = int(matrix.shape[1])

    def _check_dimension(self, width: int, what: str) -> None:
        check_dimension(width, self.dimension, store=self.location, what=what)

    async def delete(
        self, *, ids: Sequence[str] | None = None, filter: FilterLike | ChromaWhere | None = None  # noqa: A002
    ) -> int:
        """Delete documents; return how many were removed.

        Args:
            ids: delete these ids (unknown ids are ignored).
            filter: delete documents matching it (a fastrag filter or a :class:`ChromaWhere`). With ``ids``
                too, only documents that have one of the ids *and* match are deleted.

        The matching ids are read, then deleted by id in batches (not one transaction).

        Raises:
            InvalidParameterError: neither ``ids`` nor ``filter`` was given.
            FilterError: the filter is malformed; UnsupportedFilterError: Chroma cannot express it.
            BackendError: Chroma failed.
        """
        if ids is None and filter is None:
            raise InvalidParameterError("delete needs ids or a filter")
        id_list = distinct_ids(ids)
        where, where_document = self._native(filter)
        if id_list == [] or where == NEVER_WHERE:
            return 0
        await self._open()
        collection = self._collection
        if collection is None:
            return 0
        found = await self._call(
            lambda: collection.get(ids=id_list, where=where, where_document=where_document, include=[]), "delete"
        )
        with self._reading("delete"):
            doomed = [str(i) for i in found["ids"]]
        batch = await self._max_batch_size()
        for start in range(0, len(doomed), batch):
            chunk = doomed[start : start + batch]
            await self._call(lambda chunk=chunk: collection.delete(ids=chunk), "delete")
        return len(doomed)

    # ------------------------------------------------------------------ reads

    async def count(self, *, filter: FilterLike | ChromaWhere | None = None) -> int:  # noqa: A002
        """How many documents the store holds, or how many match ``filter``.

        Raises:
            FilterError: the filter is malformed; UnsupportedFilterError: Chroma cannot express it.
            BackendError: Chroma failed.
        """
        where, where_document = self._native(filter)
        if where == NEVER_WHERE:
            return 0
        await self._open()
        collection = self._collection
        if collection is None:
            return 0
        if where is None and where_document is None:
            total = await self._call(collection.count, "count")
            with self._reading("count"):
                if isinstance(total, bool) or not isinstance(total, int) or total < 0:
                    raise TypeError(f"a count must be an int >= 0, got {total!r}")
                return total
        found = await self._call(
            lambda: collection.get(where=where, where_document=where_document, include=[]), "count"
        )
        with self._reading("count"):
            return len(found["ids"])

    async def get(
        self,
        *,
        ids: Sequence[str] | None = None,
        filter: FilterLike | ChromaWhere | None = None,  # noqa: A002
        limit: int | None = None,
    ) -> list[Document]:
        """Documents with these ``ids`` and/or matching ``filter`` (all when neither), in id order.

        Args:
            ids: only these ids (unknown ids are ignored).
            filter: only documents matching it.
            limit: at most this many, the first in id order (an int > 0).

        Raises:
            InvalidParameterError: ``limit`` is not a positive int, or ``ids`` is a string.
            FilterError: the filter is malformed; UnsupportedFilterError: Chroma cannot express it.
            BackendError: Chroma failed.
        """
        if limit is not None:
            check_k(limit, "limit")
        id_list = distinct_ids(ids)
        where, where_document = self._native(filter)
        if id_list == [] or where == NEVER_WHERE:
            return []
        await self._open()
        collection = self._collection
        if collection is None:
            return []
        if limit is not None:
            found = await self._call(
                lambda: collection.get(ids=id_list, where=where, where_document=where_document, include=[]), "get"
            )
            with self._reading("get"):
                id_list = sorted(found["ids"])[:limit]
            if not id_list:
                return []
            where = where_document = None
        result = await self._call(
            lambda: collection.get(
                ids=id_list, where=where, where_document=where_document, include=["metadatas", "documents"]
            ),
            "get",
        )
        with self._reading("get"):
            docs = [
                _document(i, c, m)
                for i, c, m in zip(result["ids"], result["documents"] or [], result["metadatas"] or [], strict=True)
            ]
        docs.sort(key=lambda d: d.id)
        return docs

    async def search_vector(
        self, embedding: np.ndarray, *, k: int, filter: FilterLike | ChromaWhere | None = None  # noqa: A002
    ) -> list[Document]:
        """Cosine k-NN among documents matching ``filter`` (applied by Chroma before ranking).

        Args:
            embedding: ``(dim,)`` query vector (any scale; cosine normalises it). A zero vector scores 0
                against every document.
            k: how many documents at most (an int > 0).
            filter: a fastrag filter, or a :class:`ChromaWhere`.

        Returns:
            Copies best first, ``score`` = cosine similarity ``1 - distance`` in [-1, 1] (higher is better),
            zero-based ``rank``; ties are broken by id (the store asks Chroma for more results until the
            ``k``-th score is not tied with the last one returned).

        Raises:
            DimensionMismatchError: the vector's width differs from the store's.
            InvalidParameterError: ``k`` is not a positive int, or the vector holds NaN or infinity.
            FilterError: the filter is malformed; UnsupportedFilterError: Chroma cannot express it.
            BackendUnavailableError: the server cannot be reached; BackendError: Chroma failed.
        """
        check_k(k)
        query = check_query_vector(embedding, dimension=None, store=self.location)  # width: below
        if query.shape[0] == 0:
            raise DimensionMismatchError(f"query embedding must have shape (dim,), got {query.shape}")
        self._check_dimension(query.shape[0], "query has")
        where, where_document = self._native(filter)
        if where == NEVER_WHERE:
            return []
        await self._open()
        self._check_dimension(query.shape[0], "query has")
        collection = self._collection
        if collection is None:
            return []
        wanted = k + 1
        while True:
            result = await self._call(
                lambda n=wanted: collection.query(
                    query_embeddings=query[None, :],
                    n_results=n,
                    where=where,
                    where_document=where_document,
                    include=["metadatas", "documents", "distances"],
                ),
                "search_vector",
            )
            with self._reading("search_vector"):
                hits = sorted(
                    (
                        (min(1.0, max(-1.0, 1.0 - float(distance))), i, c, m)
                        for i, c, m, distance in zip(
                            result["ids"][0], result["documents"][0], result["metadatas"][0], result["distances"][0],
                            strict=True,
                        )
                    ),
                    key=lambda h: (-h[0], h[1]),
                )
            if len(hits) < wanted or hits[-1][0] != hits[k - 1][0]:
                break
            wanted *= 2  # the k-th score ties with the last one fetched: more may tie beyond it
        with self._reading("search_vector"):
            return [_document(i, c, m).ranked(score=s, rank=r) for r, (s, i, c, m) in enumerate(hits[:k])]


# ----------------------------------------------------------------------------------------- helpers


def _prepare_metadata(docs: list[Document]) -> list[dict[str, Any]]:
    out = []
    for doc in docs:
        _, text = metadata_json(doc)
        out.append(chroma_metadata(json.loads(text), metadata_json=text))
    return out


def _document(doc_id: str, content: str | None, metadata: Mapping[str, Any] | None) -> Document:
    fields = dict(metadata or {})
    stored = fields.get(JSON_KEY)
    if isinstance(stored, str):
        restored = json.loads(stored)
    else:  # a record not written by fastrag: its plain fields
        restored = {k: v for k, v in fields.items() if not k.startswith("fastrag:")}
    return Document(id=doc_id, content=content or "", metadata=restored)


def _netloc(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _parse_server_url(url: str) -> tuple[str, int, bool]:
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


def _mapped(exc: BaseException, store: str, what: str, *, status: int | None = None) -> BackendError:
    """Our error for a Chroma SDK exception raised while doing ``what``; ``status`` is the HTTP status of the
    last response the call received (chromadb raises a bare ``Exception(body)`` for a non-Chroma error
    body, so the status is read from the response itself, see :func:`_watch_statuses`)."""
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


_HTTP_STATUS: ContextVar[int | None] = ContextVar("fastrag_chroma_http_status", default=None)
"""The status of the last HTTP response seen by the current call (set by :func:`_record_status`)."""


async def _record_status(response: httpx.Response) -> None:
    _HTTP_STATUS.set(response.status_code)


def _watch_statuses(client: Any) -> None:
    """Hook :func:`_record_status` into the httpx client chromadb's ``AsyncHttpClient`` uses on this event loop
    (idempotent; a chromadb without that layout is left alone, its errors mapped without a status)."""
    get_http = getattr(getattr(client, "_server", None), "_get_client", None)
    if get_http is None:
        return
    try:
        hooks = get_http().event_hooks
    except Exception:  # noqa: BLE001 - another chromadb layout
        return
    if _record_status not in hooks.get("response", []):
        hooks.setdefault("response", []).append(_record_status)


async def _release_async_client(client: Any, loop_key: int | None) -> None:
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
    if http is not None and loop_key == _loop_key():
        await http.aclose()
