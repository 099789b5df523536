"""Milvus as a fastrag store: dense k-NN, BM25 and server-side hybrid search in one collection.

``MilvusVectorStore`` implements :class:`~fastrag.protocols.VectorStore` and :class:`~fastrag.protocols.SupportsGet`
over a Milvus collection and, with ``enable_bm25=True``, :class:`~fastrag.protocols.LexicalStore` through
Milvus's built-in BM25 function, so one open store serves both branches of a hybrid retriever.
:class:`MilvusHybridRetriever` runs both branches inside Milvus (``hybrid_search`` with an RRF or weighted
ranker) with the filter applied to each. The same code runs against:

- **milvus-lite in-process**: ``url="./data/fastrag.db"`` (any path ending in ``.db``; it is a folder with
  a lock, one process at a time). pymilvus starts milvus-lite's gRPC server in a thread of this process;
  closing the last store on that path stops it and releases the lock (unless something else in the
  process started it first).
- **a Milvus server**: ``url="http://host:19530"``: Milvus standalone/distributed, Zilliz Cloud
  (``https://...`` with ``token=``), or ``milvus-lite server --data-dir D --port P``.

Collection schema (created on the first write, or on open when ``dimension=`` is given)::

    id            VARCHAR(65535), primary key: the document id as given
    content       VARCHAR(65535): the document text, returned as is
    metadata      JSON: the metadata as given (round-trips ints, floats, bools, lists, nested objects)
    filter_values JSON: typed, normalised copies of the top-level metadata values (see below)
    has_vector    BOOL: whether the document was written with an embedding               (dense only)
    embedding     FLOAT_VECTOR(dim), FLAT index (exact), metric COSINE                    (dense only)
    text          VARCHAR(65535) with an analyzer: title + content, the BM25 input         (enable_bm25 only)
    sparse        SPARSE_FLOAT_VECTOR, BM25 function output from ``text``, k1 1.2, b 0.75  (enable_bm25 only)

The collection properties record ``fastrag.schema_version`` and ``fastrag.embedding_model``. A collection
whose first write has no embeddings and no ``dimension=`` was given is BM25-only (no dense fields): it serves
keyword search, k-NN finds nothing in it, and writing vectors to it raises.

Filters (:func:`translate_filter`) become Milvus boolean expressions over ``filter_values``, never over
``metadata``, because Milvus compares JSON values loosely (``true == 1`` holds in milvus-lite, ``"2020"`` and
``2020`` meet in some engines, a missing key makes ``not`` unknown). On upsert each top-level metadata value
``v`` under key ``k`` is copied into ``filter_values`` under a typed name, with ``H`` the hex of ``k``'s
UTF-8 bytes (so no key needs escaping)::

    s_H   a string, in a wildcard-free encoding (see "Strings and LIKE")
    d_H   a string that is an ISO-8601 date: the instant in integer microseconds since 1970-01-01 UTC
    n_H   a number (not a bool) as an IEEE double
    b_H   a bool
    ls_H / ln_H / lb_H   the string / number / bool elements of a list

so a bool is never compared with a number, a string never with a number, and date ranges compare instants
(offsets and date-only values normalised to UTC). Every comparison is guarded by ``exists``, so it is true
or false, never unknown, and ``not`` negates it exactly: ``notEquals`` and ``notIn`` match a missing key.

Strings and LIKE: Milvus has no literal substring test, and milvus-lite's ``like`` has no escape for ``%``
and ``_``. The ``s_`` copy therefore replaces ``%``, ``_``, ``\\`` and four private-use characters
(U+E000..U+E003) by three-character codes ``U+E000 d1 d2`` (``d`` in U+E001..U+E003), so no ``%``, ``_``
or ``\\`` is left. The code is prefix-free and no match can begin inside a code, so ``s`` starts with (contains) ``p`` exactly when
``encode(s)`` starts with (contains) ``encode(p)``, and ``startsWith``/``stringContains`` become
``like "<encode(p)>%"`` / ``like "%<encode(p)>%"`` with no wildcard left in the literal part.

Numbers are compared as IEEE doubles, exact for every filter value of magnitude below 2**53; a filter with a
larger number raises :class:`~fastrag.errors.UnsupportedFilterError`.

Native filters: pass ``filter=MilvusExpr('metadata["lang"] == "en"')`` to any method to send a Milvus
expression unchanged (Milvus's own semantics; it may use ``id``, ``content``, ``metadata[...]``).
A ``str`` filter is always fastrag's JSON form, so the two cannot be confused.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qs, unquote, urlsplit

import anyio
import numpy as np

from fastrag.errors import (
    BackendError,
    BackendTemporarilyUnavailableError,
    BackendUnavailableError,
    ConfigurationError,
    DimensionMismatchError,
    FastragError,
    InvalidParameterError,
    UnsupportedFilterError,
)
from fastrag.filters import RANGE_OPERATORS, And, Comparison, Filter, FilterLike, Not, Or, parse_date, parse_filter
from fastrag.models import BRANCHES, TITLE, Document
from fastrag.vector_store._metadata import epoch_micros, metadata_json
from fastrag.vector_store._ranking import best_first
from fastrag.vector_store._validation import (
    check_dimension,
    check_embeddings,
    check_k,
    check_query_vector,
    check_unique_ids,
)

if TYPE_CHECKING:
    from fastrag.protocols import Embedder

__all__ = [
    "MilvusExpr",
    "MilvusHybridRetriever",
    "MilvusVectorStore",
    "decode_text",
    "encode_text",
    "escape_like",
    "filter_values",
    "string_literal",
    "translate_filter",
]

_INSTALL_HINT = 'pip install "fastrag-retrieval[milvus]"'

ID_FIELD = "id"
CONTENT_FIELD = "content"
METADATA_FIELD = "metadata"
FILTER_FIELD = "filter_values"
HAS_VECTOR_FIELD = "has_vector"
VECTOR_FIELD = "embedding"
TEXT_FIELD = "text"
SPARSE_FIELD = "sparse"

MAX_VARCHAR_BYTES = 65535
"""Milvus's largest VARCHAR; ids, contents and BM25 texts longer than this (UTF-8 bytes) are refused."""
BM25_K1 = 1.2
BM25_B = 0.75
"""BM25 parameters set on the sparse index (Milvus's defaults; milvus-lite's own default k1 is 1.5): Robertson &
Zaragoza (2009), "The Probabilistic Relevance Framework: BM25 and Beyond"."""
MAX_TOP_K = 16384
"""Milvus's largest ``limit`` for one search."""
_TIE_SLACK = 16
"""Extra hits past ``k`` that a search asks for at least once one page showed a tie at the cut (the first page
asks for one more than ``k``), so that equal scores at the cut can be ordered by id."""
_UPSERT_BATCH = 256
_LITE_FLUSH_ROWS = 256
_ID_BATCH = 500
_MAX_EXACT_NUMBER = 2**53
_FALSE = f'{ID_FIELD} < ""'
_TRUE = f'{ID_FIELD} >= ""'
_SCHEMA_PROPERTY = "fastrag.schema_version"
_MODEL_PROPERTY = "fastrag.embedding_model"
_SCHEMA_VERSION = 1
_COLLECTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")


# ------------------------------------------------------------------------------------ native filters


@dataclass(frozen=True, slots=True)
class MilvusExpr:
    """A native Milvus boolean expression, passed to Milvus unchanged as a filter.

    Recognised by type wherever a method takes ``filter=``; a plain ``str`` is always fastrag's JSON form.
    The expression has Milvus's own semantics (JSON values compare loosely, a missing key is null), not
    :func:`fastrag.filters.matches`. It may use the fields ``id``, ``content`` and ``metadata["key"]``.

    Example::

        await store.search_vector(q, k=5, filter=MilvusExpr('metadata["lang"] == "en" or metadata["lang"] == "de"'))
    """

    expression: str

    def __post_init__(self) -> None:
        if not isinstance(self.expression, str) or not self.expression.strip():
            raise InvalidParameterError(f"MilvusExpr needs a non-empty expression string, got {self.expression!r}")


# ----------------------------------------------------------------------------------------- escaping

_LITERAL_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def string_literal(value: str) -> str:
    """``value`` as a double-quoted Milvus string literal that the expression parser reads back exactly.

    Backslash, double quote, newline, carriage return and tab are escaped (``\\\\``, ``\\"``, ``\\n``,
    ``\\r``, ``\\t``: the escapes both Milvus and milvus-lite accept); every other character, quotes ``'``
    and all of Unicode included, is written as is.

    Raises:
        UnsupportedFilterError: ``value`` is not a ``str`` or cannot be encoded as UTF-8 (a lone surrogate).
    """
    if not isinstance(value, str):
        raise UnsupportedFilterError(f"expected a string, got {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UnsupportedFilterError(f"string {value!r} is not valid Unicode text") from exc
    return '"' + "".join(_LITERAL_ESCAPES.get(ch, ch) for ch in value) + '"'


_CODE_ESCAPE = "\ue000"
_CODE_DIGITS = ("\ue001", "\ue002", "\ue003")
_CODES = {
    "%": _CODE_ESCAPE + _CODE_DIGITS[0] + _CODE_DIGITS[0],
    "_": _CODE_ESCAPE + _CODE_DIGITS[0] + _CODE_DIGITS[1],
    "\\": _CODE_ESCAPE + _CODE_DIGITS[0] + _CODE_DIGITS[2],
    _CODE_ESCAPE: _CODE_ESCAPE + _CODE_DIGITS[1] + _CODE_DIGITS[0],
    _CODE_DIGITS[0]: _CODE_ESCAPE + _CODE_DIGITS[1] + _CODE_DIGITS[1],
    _CODE_DIGITS[1]: _CODE_ESCAPE + _CODE_DIGITS[1] + _CODE_DIGITS[2],
    _CODE_DIGITS[2]: _CODE_ESCAPE + _CODE_DIGITS[2] + _CODE_DIGITS[0],
}
_CODE_TABLE = str.maketrans(_CODES)
_DECODES = {code: ch for ch, code in _CODES.items()}


def encode_text(value: str) -> str:
    """The wildcard-free form in which string metadata is stored for filtering (``filter_values.s_*``).

    ``%``, ``_``, ``\\`` and U+E000..U+E003 become three-character codes ``U+E000 d1 d2`` (``d`` in
    U+E001..U+E003); every other character stays. The result holds no ``%``, ``_`` or ``\\``. The code is
    prefix-free and a match of ``encode_text(p)`` can only begin at a character boundary of the original,
    so ``a.startswith(p) == encode_text(a).startswith(encode_text(p))`` and
    ``(p in a) == (encode_text(p) in encode_text(a))``.
    """
    return value.translate(_CODE_TABLE)


def decode_text(value: str) -> str:
    """Invert :func:`encode_text`."""
    out: list[str] = []
    i = 0
    while i < len(value):
        if value[i] == _CODE_ESCAPE:
            out.append(_DECODES[value[i : i + 3]])
            i += 3
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def escape_like(value: str, *, prefix: bool) -> str:
    """A Milvus ``like`` literal matching encoded strings that start with (``prefix=True``) or contain ``value``.

    ``value`` is encoded with :func:`encode_text` (so it holds no ``%``, ``_`` or ``\\``) and the only
    wildcards are the ``%`` added here: ``"<enc>%"`` for a prefix, ``"%<enc>%"`` for a substring.
    """
    encoded = encode_text(value)
    return string_literal(f"{encoded}%" if prefix else f"%{encoded}%")


# ------------------------------------------------------------------------------ typed filter values

_MAX_DOUBLE = 1.7976931348623157e308


def _key_hex(key: str) -> str:
    try:
        return key.encode("utf-8").hex()
    except UnicodeEncodeError as exc:
        raise UnsupportedFilterError(f"key {key!r} is not valid Unicode text") from exc


def _path(kind: str, key: str) -> str:
    return f'{FILTER_FIELD}["{kind}_{_key_hex(key)}"]'


def _stored_number(value: int | float) -> float:
    try:
        return float(value)
    except OverflowError:  # an int beyond the double range: every exact filter value compares the same way
        return _MAX_DOUBLE if value > 0 else -_MAX_DOUBLE


def filter_values(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The typed copies of ``metadata`` that filters run on (the ``filter_values`` JSON field).

    Args:
        metadata: a document's metadata (JSON-like).

    Returns:
        ``{"s_<hex key>": encoded string, "d_<hex key>": epoch microseconds, "n_<hex key>": float,
        "b_<hex key>": bool, "ls_/ln_/lb_<hex key>": typed list elements}``; ``None``, nested objects and
        other values contribute nothing (no filter operator can match them).
    """
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        h = str(key).encode("utf-8").hex()
        if isinstance(value, bool):
            out[f"b_{h}"] = value
        elif isinstance(value, int | float):
            out[f"n_{h}"] = _stored_number(value)
        elif isinstance(value, str):
            out[f"s_{h}"] = encode_text(value)
            moment = parse_date(value)
            if moment is not None:
                out[f"d_{h}"] = epoch_micros(moment)
        elif isinstance(value, list | tuple):
            strings = [v for v in value if isinstance(v, str)]
            bools = [v for v in value if isinstance(v, bool)]
            numbers = [_stored_number(v) for v in value if isinstance(v, int | float) and not isinstance(v, bool)]
            if strings:
                out[f"ls_{h}"] = strings
            if numbers:
                out[f"ln_{h}"] = numbers
            if bools:
                out[f"lb_{h}"] = bools
    return out


# ------------------------------------------------------------------------------- filter translation


def _number_literal(value: int | float) -> str:
    if not -_MAX_EXACT_NUMBER < value < _MAX_EXACT_NUMBER:
        raise UnsupportedFilterError(
            f"Milvus compares numbers as doubles; {value!r} is beyond +-2**53, where that is not exact"
        )
    return repr(float(value))


def _scalar_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "b"
    if isinstance(value, str):
        return "s"
    return "n"


def _scalar_literal(kind: str, value: Any, *, encoded: bool) -> str:
    if kind == "b":
        return "true" if value else "false"
    if kind == "s":
        return string_literal(encode_text(value) if encoded else value)
    return _number_literal(value)


def _guard(path: str, condition: str) -> str:
    return f"(exists {path} and {condition})"


def _equals(key: str, value: Any) -> str:
    kind = _scalar_kind(value)
    path = _path(kind, key)
    return _guard(path, f"{path} == {_scalar_literal(kind, value, encoded=True)}")


def _one_of(key: str, values: Sequence[Any]) -> str:
    parts: list[str] = []
    for value in values:
        part = _equals(key, value)
        if part not in parts:
            parts.append(part)
    if not parts:
        return f"({_FALSE})"
    return parts[0] if len(parts) == 1 else "(" + " or ".join(parts) + ")"


_RANGE_SYMBOLS = {"greaterThan": ">", "greaterThanOrEquals": ">=", "lessThan": "<", "lessThanOrEquals": "<="}


def _comparison(node: Comparison) -> str:
    op, key, value = node.operator, node.key, node.value
    if op == "equals":
        return _equals(key, value)
    if op == "notEquals":
        return f"not {_equals(key, value)}"
    if op == "in":
        return _one_of(key, value)
    if op == "notIn":
        return f"not {_one_of(key, value)}"
    if op in RANGE_OPERATORS:
        if isinstance(value, str):
            moment = parse_date(value)
            if moment is None:  # unreachable: Comparison validates range values
                raise UnsupportedFilterError(f"{op} on {value!r}: not a number or an ISO-8601 date")
            path, literal = _path("d", key), str(epoch_micros(moment))
        else:
            path, literal = _path("n", key), _number_literal(value)
        return _guard(path, f"{path} {_RANGE_SYMBOLS[op]} {literal}")
    if op in ("startsWith", "stringContains"):
        path = _path("s", key)
        return _guard(path, f"{path} like {escape_like(value, prefix=op == 'startsWith')}")
    if op == "listContains":
        kind = _scalar_kind(value)
        path = _path(f"l{kind}", key)
        literal = _scalar_literal(kind, value, encoded=False)
        if literal.startswith("-"):
            literal = f"({literal})"  # milvus-lite reads only a literal or a parenthesised expression here
        return _guard(path, f"json_contains({path}, {literal})")
    raise UnsupportedFilterError(f"operator {op!r} has no Milvus translation")  # unreachable


def _translate(node: Filter) -> str:
    if isinstance(node, Comparison):
        return _comparison(node)
    parts = [_translate(child) for child in node.filters]
    if isinstance(node, Or):
        return parts[0] if len(parts) == 1 else "(" + " or ".join(parts) + ")"
    conjunction = parts[0] if len(parts) == 1 else "(" + " and ".join(parts) + ")"
    return f"not {conjunction}" if isinstance(node, Not) else conjunction


def translate_filter(node: FilterLike) -> str:
    """Translate a fastrag filter into a Milvus boolean expression over the ``filter_values`` field.

    Pure: no I/O. The expression selects exactly the documents :func:`fastrag.filters.matches` selects,
    given rows written by :class:`MilvusVectorStore` (see the module docstring for the encoding).

    =====================  ========================================================================
    fastrag                Milvus expression (``P`` = ``filter_values["<kind>_<hex of key>"]``)
    =====================  ========================================================================
    equals v               ``(exists P and P == v)``; ``P`` is ``s_``/``n_``/``b_`` by v's type
    notEquals v            ``not (exists P and P == v)``
    in [a, b]              ``((exists Pa and Pa == a) or (exists Pb and Pb == b))``; ``[]`` is false
    notIn [a, b]           ``not (...)`` of the ``in`` form
    greaterThan n ...      ``(exists n_ and n_ > n)``; a date compares ``d_`` with epoch microseconds
    startsWith p           ``(exists s_ and s_ like "<encode(p)>%")``
    stringContains p       ``(exists s_ and s_ like "%<encode(p)>%")``
    listContains v         ``(exists lT_ and json_contains(lT_, v))``, ``T`` = s, n or b by v's type
    andAll / orAll         ``(a and b)`` / ``(a or b)``
    notAll                 ``not (a and b)``
    =====================  ========================================================================

    Numbers are written as double literals (``2020.0``), strings with :func:`string_literal`.

    Args:
        node: an AST node, or the JSON form (mapping or JSON string).

    Returns:
        The expression string.

    Raises:
        FilterError: the filter is malformed.
        UnsupportedFilterError: a number of magnitude 2**53 or more (not exactly comparable as a double),
            or a string that is not valid Unicode.
    """
    parsed = parse_filter(node)
    if parsed is None:
        raise InvalidParameterError("translate_filter needs a filter, got None")
    return _translate(parsed)


def _native_or_translated(filter: FilterLike | MilvusExpr | None) -> str | None:  # noqa: A002
    if filter is None:
        return None
    if isinstance(filter, MilvusExpr):
        return filter.expression
    if not isinstance(filter, Comparison | And | Or | Not | Mapping | str):
        raise UnsupportedFilterError(
            f"a Milvus store takes a fastrag filter or a MilvusExpr, not {type(filter).__name__} "
            "(another backend's native filter?)"
        )
    return translate_filter(filter)


def _ids_expression(ids: Sequence[str]) -> str:
    return f"{ID_FIELD} in [" + ", ".join(string_literal(i) for i in ids) + "]"


def _and(*expressions: str | None) -> str:
    parts = [e for e in expressions if e]
    if not parts:
        return ""
    return parts[0] if len(parts) == 1 else " and ".join(f"({p})" for p in parts)


# ----------------------------------------------------------------------------------- SDK boundary


def _import_pymilvus() -> Any:
    try:
        import pymilvus
    except ImportError as exc:
        raise ConfigurationError(f"the Milvus store needs pymilvus: {_INSTALL_HINT}") from exc
    return pymilvus


def _is_unavailable(exc: BaseException) -> bool:
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


def _sdk_errors() -> tuple[type[BaseException], ...]:
    import grpc
    from pymilvus.exceptions import MilvusException

    return (MilvusException, grpc.RpcError, OSError, TimeoutError)


# Milvus-lite servers this module started in this process, by absolute data path: [open stores, started here].
_LITE_LOCK = threading.Lock()
_LITE_SERVERS: dict[str, list[Any]] = {}


def _lite_acquire(path: str) -> None:
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


def _lite_release(path: str) -> None:
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


# ------------------------------------------------------------------------------------------- store


class MilvusVectorStore:
    """Documents, dense vectors and (optionally) a BM25 index in one Milvus collection.

    Args:
        url: a milvus-lite data path ending in ``.db`` (a folder, created with its parents if missing;
            run in this process), or a server URI ``http://host:19530`` / ``https://...``. Optional when
            ``client`` is given (then it only names the store in messages).
        collection: the collection name (letters, digits, ``_``; not starting with a digit).
        dimension: the vector width. With ``create=True`` and a missing collection, the collection is created
            when the store opens; otherwise the first write with embeddings fixes it. An existing collection
            of another width raises.
        enable_bm25: create the collection with a BM25 function (an analysed ``text`` field feeding a sparse
            field) so :meth:`search_text` works. An existing collection keeps what it was created with.
        embedding_model: the embedder's name, recorded when the collection is created; opening a collection
            that recorded another name raises, so vectors of two models are never mixed.
        client: a ``pymilvus.AsyncMilvusClient`` or ``MilvusClient`` to use instead of opening one; it is
            never closed by this store.
        create: create the collection when it is missing; with ``False`` a missing collection raises.
        timeout: seconds allowed for each Milvus call, retries included.
        token: credentials for a server (``"user:password"`` or an API key); never put them in ``url``.
        db_name: the Milvus database (default: the server's default).
        analyzer_params: the BM25 analyzer (default ``{"type": "standard"}``: split on non-word characters,
            lowercase, no stemming). Real Milvus also has ``{"type": "english"}`` (stemming, stopwords);
            milvus-lite has only ``standard`` and ``jieba`` (Chinese).
        index_params: the dense index, ``{"index_type": ..., "params": {...}}`` (default ``FLAT``: exact k-NN;
            use ``HNSW`` or ``AUTOINDEX`` for large collections, approximate). The metric is always COSINE.

    Raises:
        InvalidParameterError: a bad ``collection``, ``dimension`` or ``timeout``, or neither ``url`` nor
            ``client``.
        ConfigurationError: ``pymilvus`` is not installed (``pip install "fastrag-retrieval[milvus]"``).

    Opening (``async with``, or the first call) raises :class:`BackendUnavailableError` when the server
    cannot be reached or the lite folder is locked by another process, and :class:`ConfigurationError` when
    the collection exists with another dimension or embedding model, or was not created by fastrag.

    Example::

        async with MilvusVectorStore("./milvus.db", "docs", enable_bm25=True) as store:
            await store.upsert(docs, embeddings=vectors)
            hits = await store.search_text("solar power", k=5)
    """

    def __init__(
        self,
        url: str | os.PathLike[str] | None = None,
        collection: str = "fastrag",
        *,
        dimension: int | None = None,
        enable_bm25: bool = False,
        embedding_model: str | None = None,
        client: Any = None,
        create: bool = True,
        timeout: float = 10.0,
        token: str | None = None,
        db_name: str | None = None,
        analyzer_params: Mapping[str, Any] | None = None,
        index_params: Mapping[str, Any] | None = None,
    ) -> None:
        if url is None and client is None:
            raise InvalidParameterError("MilvusVectorStore needs a url or a client")
        if not isinstance(collection, str) or not _COLLECTION_NAME.fullmatch(collection):
            raise InvalidParameterError(
                f"collection must be letters, digits and _ (not starting with a digit, at most 255), got {collection!r}"
            )
        if dimension is not None and (isinstance(dimension, bool) or not isinstance(dimension, int) or dimension <= 0):
            raise InvalidParameterError(f"dimension must be a positive int, got {dimension!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise InvalidParameterError(f"timeout must be a positive number of seconds, got {timeout!r}")
        pymilvus = _import_pymilvus()
        if client is not None and not isinstance(client, pymilvus.AsyncMilvusClient | pymilvus.MilvusClient):
            raise InvalidParameterError(f"client must be a pymilvus AsyncMilvusClient or MilvusClient, got {client!r}")
        self.url = os.fspath(url) if url is not None else f"<injected {type(client).__name__}>"
        self.collection = collection
        self.dimension: int | None = dimension
        self.embedding_model: str | None = embedding_model
        self.enable_bm25 = bool(enable_bm25)
        self.timeout = float(timeout)
        self._create = create
        self._token = token
        self._db_name = db_name
        self._analyzer_params = dict(analyzer_params) if analyzer_params is not None else {"type": "standard"}
        self._index_params = dict(index_params) if index_params is not None else {"index_type": "FLAT", "params": {}}
        self._client = client
        self._owns_client = client is None
        self._is_async = client is None or isinstance(client, pymilvus.AsyncMilvusClient)
        self._lite_path = self._lite_data_path(self.url) if client is None else None
        self._open_lock = anyio.Lock()
        self._opened = False
        self._closed = False
        self._exists = False
        self._has_vectors = True
        self._lite_server = False
        self._unflushed = 0
        self._flush_lock = anyio.Lock()

    # ------------------------------------------------------------------ construction from a URL

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> MilvusVectorStore:
        """Open the store a fastrag store URL names.

        Forms:

        - ``milvus://host[:port]/collection``: a Milvus server over plain gRPC (port 19530 by default);
          ``milvus+https://host[:port]/collection`` for TLS (Zilliz Cloud; pass ``token=``).
        - ``milvus-lite:///relative/path.db?collection=name`` and ``milvus-lite:////absolute/path.db?...``:
          milvus-lite in this process (the path must end in ``.db``; the collection defaults to
          ``fastrag``).

        Query parameters (both forms): ``bm25=true|false`` (default **true**, so one URL serves the keyword,
        vector and hybrid modes), ``dimension=N``, ``db=name`` (server only), ``timeout=seconds``.
        Keyword arguments override the URL's settings and are passed to the constructor.

        Raises:
            ConfigurationError: the URL is not one of these forms.
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
        known = {"collection", "bm25", "dimension", "db", "timeout"}
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
        options.update(kwargs)
        try:
            return cls(target_url, **options)
        except InvalidParameterError as exc:
            raise ConfigurationError(f"{url}: {exc}") from exc

    # ------------------------------------------------------------------ lifecycle

    def __repr__(self) -> str:
        return f"MilvusVectorStore({self.url!r}, collection={self.collection!r})"

    @property
    def name(self) -> str:
        """The store's name in messages: its URL and collection."""
        return f"{self.url} (collection {self.collection!r})"

    @staticmethod
    def _lite_data_path(url: str) -> str | None:
        lowered = url.lower()
        if lowered.startswith(("http://", "https://", "tcp://", "unix:")):
            return None
        if not url.endswith(".db"):
            raise InvalidParameterError(
                f"url must be a milvus-lite path ending in .db or a server URI (http://host:19530), got {url!r}"
            )
        return os.path.abspath(url)

    async def __aenter__(self) -> MilvusVectorStore:
        await self._ensure_open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the client this store opened (an injected one stays open). Idempotent.

        On a milvus-lite path, the last store to close stops the in-process server it started, which
        releases the folder's lock for other processes.
        """
        async with self._open_lock:
            if self._closed:
                return
            self._closed = True
            client, self._client = self._client, None
            if not self._opened or not self._owns_client:
                return
            with anyio.CancelScope(shield=True):
                try:
                    if client is not None:
                        await client.close()
                except _sdk_errors() as exc:
                    raise BackendError(f"closing the Milvus client failed: {exc}", store=self.name) from exc
                finally:
                    if self._lite_path is not None:
                        await anyio.to_thread.run_sync(_lite_release, self._lite_path)

    async def _ensure_open(self) -> None:
        if self._opened and not self._closed:
            return
        async with self._open_lock:
            if self._closed:
                raise BackendUnavailableError("store is closed", store=self.name)
            if self._opened:
                return
            if self._owns_client:
                self._client = await self._connect()
            try:
                self._lite_server = await self._is_milvus_lite()
                await self._load_collection_state()
                if not self._exists and self.dimension is not None and self._create:
                    await self._create_collection(self.dimension)
                elif not self._exists and not self._create:
                    raise BackendUnavailableError(
                        f"collection {self.collection!r} does not exist (create=False)", store=self.name
                    )
            except BaseException:
                if self._owns_client:
                    with anyio.CancelScope(shield=True):
                        try:
                            await self._client.close()
                        except _sdk_errors():
                            pass
                        if self._lite_path is not None:
                            await anyio.to_thread.run_sync(_lite_release, self._lite_path)
                    self._client = None
                raise
            self._opened = True

    async def _connect(self) -> Any:
        pymilvus = _import_pymilvus()
        kwargs: dict[str, Any] = {"timeout": self.timeout, "dedicated": True}
        if self._token:
            kwargs["token"] = self._token
        if self._db_name:
            kwargs["db_name"] = self._db_name
        lite = self._lite_path

        def make() -> Any:
            if lite is not None:
                try:
                    Path(lite).parent.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise BackendUnavailableError(f"cannot create the milvus-lite folder: {exc}", store=self.name) from exc
                try:
                    import milvus_lite  # noqa: F401
                except ImportError as exc:
                    raise ConfigurationError(f"a .db url needs milvus-lite: {_INSTALL_HINT}") from exc
                _lite_acquire(lite)
            try:
                return pymilvus.AsyncMilvusClient(uri=lite if lite is not None else self.url, **kwargs)
            except BaseException:
                if lite is not None:
                    _lite_release(lite)
                raise

        try:
            client = await anyio.to_thread.run_sync(make)
        except FastragError:
            raise
        except _sdk_errors() as exc:
            raise BackendUnavailableError(f"cannot open Milvus: {_message(exc)}", store=self.name) from exc
        try:
            await client.has_collection(self.collection, timeout=self.timeout)
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                try:
                    await client.close()
                except _sdk_errors():
                    pass
                if lite is not None:
                    await anyio.to_thread.run_sync(_lite_release, lite)
            if isinstance(exc, _sdk_errors()):
                raise BackendUnavailableError(f"cannot reach Milvus: {_message(exc)}", store=self.name) from exc
            raise
        return client

    async def _is_milvus_lite(self) -> bool:
        try:
            version = await self._call("get_server_version")
        except BackendUnavailableError:
            raise
        except BackendError:
            return False
        return str(version).startswith("milvus_lite")

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call ``client.method`` (awaited, or in a worker thread for a sync client), mapping SDK errors."""
        if self._client is None:
            raise BackendUnavailableError("store is closed", store=self.name)
        kwargs.setdefault("timeout", self.timeout)
        try:
            if self._is_async:
                return await getattr(self._client, method)(*args, **kwargs)
            return await anyio.to_thread.run_sync(partial(getattr(self._client, method), *args, **kwargs))
        except _sdk_errors() as exc:
            kind = BackendTemporarilyUnavailableError if _is_unavailable(exc) else BackendError
            raise kind(f"Milvus {method} failed: {_message(exc)}", store=self.name) from exc

    # ------------------------------------------------------------------ schema

    async def _load_collection_state(self) -> None:
        if not await self._call("has_collection", self.collection):
            self._exists = False
            return
        info = await self._call("describe_collection", self.collection)
        fields = {f["name"]: f for f in info.get("fields", [])}
        has_bm25 = TEXT_FIELD in fields and SPARSE_FIELD in fields
        has_vectors = VECTOR_FIELD in fields and HAS_VECTOR_FIELD in fields
        required = {ID_FIELD, CONTENT_FIELD, METADATA_FIELD, FILTER_FIELD}
        missing = sorted(required - set(fields))
        if missing or not (has_vectors or has_bm25) or _SCHEMA_PROPERTY not in (info.get("properties") or {}):
            raise ConfigurationError(
                f"{self.name}: the collection exists but was not created by fastrag (fields {sorted(fields)}); "
                "use another collection name"
            )
        dim = int(fields[VECTOR_FIELD].get("params", {}).get("dim")) if has_vectors else None
        if self.dimension is not None and dim != self.dimension:
            raise ConfigurationError(
                f"{self.name}: the collection was built with "
                + (f"dimension={dim}" if dim else "no dense vectors (BM25 only)")
                + f", not dimension={self.dimension}; use a new collection or the same settings"
            )
        if self.enable_bm25 and not has_bm25:
            raise ConfigurationError(
                f"{self.name}: the collection was created without BM25; open it with enable_bm25=False "
                "or use a new collection"
            )
        properties = info.get("properties") or {}
        model = properties.get(_MODEL_PROPERTY) or None
        if self.embedding_model is not None and model is not None and model != self.embedding_model:
            raise ConfigurationError(
                f"{self.name}: the collection was built with embedding_model={model!r}, not {self.embedding_model!r}; "
                "use a new collection or the same settings"
            )
        if self.embedding_model is not None and model is None:
            await self._call("alter_collection_properties", self.collection,
                             properties={_MODEL_PROPERTY: self.embedding_model})
        state = await self._call("get_load_state", self.collection)
        if getattr(state.get("state"), "name", str(state.get("state"))) != "Loaded":
            await self._call("load_collection", self.collection)  # e.g. milvus-lite after a restart
        self.dimension = dim
        self._has_vectors = has_vectors
        self.enable_bm25 = has_bm25
        self.embedding_model = self.embedding_model or model
        self._exists = True

    def _schema(self, dimension: int | None) -> Any:
        pymilvus = _import_pymilvus()
        schema = pymilvus.MilvusClient.create_schema(
            auto_id=False, enable_dynamic_field=False, description="fastrag documents"
        )
        schema.add_field(ID_FIELD, pymilvus.DataType.VARCHAR, is_primary=True, max_length=MAX_VARCHAR_BYTES)
        schema.add_field(CONTENT_FIELD, pymilvus.DataType.VARCHAR, max_length=MAX_VARCHAR_BYTES)
        schema.add_field(METADATA_FIELD, pymilvus.DataType.JSON)
        schema.add_field(FILTER_FIELD, pymilvus.DataType.JSON)
        if dimension is not None:
            schema.add_field(HAS_VECTOR_FIELD, pymilvus.DataType.BOOL)
            schema.add_field(VECTOR_FIELD, pymilvus.DataType.FLOAT_VECTOR, dim=dimension)
        if self.enable_bm25:
            schema.add_field(
                TEXT_FIELD, pymilvus.DataType.VARCHAR, max_length=MAX_VARCHAR_BYTES,
                enable_analyzer=True, analyzer_params=self._analyzer_params,
            )
            schema.add_field(SPARSE_FIELD, pymilvus.DataType.SPARSE_FLOAT_VECTOR)
            schema.add_function(pymilvus.Function(
                name="fastrag_bm25", function_type=pymilvus.FunctionType.BM25,
                input_field_names=[TEXT_FIELD], output_field_names=[SPARSE_FIELD],
            ))
        return schema

    def _index_specs(self, dimension: int | None) -> list[dict[str, Any]]:
        specs = []
        if dimension is not None:
            dense = {k: v for k, v in self._index_params.items() if k not in ("metric_type", "field_name", "index_name")}
            dense.setdefault("index_type", "FLAT")
            dense["params"] = dict(dense.get("params") or {})
            specs.append({"field_name": VECTOR_FIELD, "index_name": VECTOR_FIELD, "metric_type": "COSINE", **dense})
        if self.enable_bm25:
            specs.append({"field_name": SPARSE_FIELD, "index_name": SPARSE_FIELD,
                          "index_type": "SPARSE_INVERTED_INDEX", "metric_type": "BM25",
                          "params": {"bm25_k1": BM25_K1, "bm25_b": BM25_B}})
        return specs

    async def _create_collection(self, dimension: int | None) -> None:
        """Create the collection (without dense vectors when ``dimension`` is None), its indexes, and load it.

        A concurrent creator is tolerated: the collection it made is then opened as an existing one.
        """
        pymilvus = _import_pymilvus()
        schema = self._schema(dimension)
        try:
            properties = {_SCHEMA_PROPERTY: str(_SCHEMA_VERSION)}
            if self.embedding_model is not None:
                properties[_MODEL_PROPERTY] = self.embedding_model
            await self._call("create_collection", self.collection, schema=schema, consistency_level="Strong",
                             properties=properties)
        except BackendError:
            if not await self._call("has_collection", self.collection):
                raise
            await self._load_collection_state()  # another client created it meanwhile: open theirs
            return
        specs = self._index_specs(dimension)
        if self._owns_client or not self._is_async:
            # pymilvus's async create_index waits through AllocTimestamp, which milvus-lite does not serve;
            # the sync client can start the build without waiting, and we poll describe_index instead.
            await anyio.to_thread.run_sync(self._create_indexes_sync, specs)
        else:
            for spec in specs:
                try:
                    await self._call("create_index", self.collection, _index_params(pymilvus, spec))
                except BackendError:
                    if not await self._index_ready(spec["index_name"]):
                        raise
        await self._wait_for_indexes([spec["index_name"] for spec in specs])
        await self._call("load_collection", self.collection)
        self.dimension = dimension
        self._has_vectors = dimension is not None
        self._exists = True

    def _create_indexes_sync(self, specs: list[dict[str, Any]]) -> None:
        pymilvus = _import_pymilvus()
        client = self._client
        own_sync = self._is_async
        try:
            if own_sync:
                kwargs: dict[str, Any] = {"timeout": self.timeout}
                if self._token:
                    kwargs["token"] = self._token
                if self._db_name:
                    kwargs["db_name"] = self._db_name
                client = pymilvus.MilvusClient(uri=self._lite_path or self.url, **kwargs)
            try:
                existing = set(client.list_indexes(self.collection, timeout=self.timeout))
                for spec in specs:
                    if spec["index_name"] not in existing:
                        client.create_index(
                            self.collection, _index_params(pymilvus, spec), timeout=self.timeout, sync=False
                        )
            finally:
                if own_sync:
                    client.close()
        except _sdk_errors() as exc:
            kind = BackendUnavailableError if _is_unavailable(exc) else BackendError
            raise kind(f"Milvus create_index failed: {_message(exc)}", store=self.name) from exc

    async def _index_ready(self, index_name: str) -> bool:
        try:
            info = await self._call("describe_index", self.collection, index_name)
        except BackendError:
            return False
        return bool(info) and info.get("state") in (None, "Finished")

    async def _wait_for_indexes(self, names: list[str]) -> None:
        with anyio.move_on_after(self.timeout) as scope:
            delay = 0.005
            while True:
                ready = [await self._index_ready(name) for name in names]
                if all(ready):
                    return
                await anyio.sleep(delay)
                delay = min(delay * 2, 0.5)
        if scope.cancelled_caught:
            raise BackendError(f"indexes {names} were not built within {self.timeout} s", store=self.name)

    async def _ensure_collection(self, dimension: int | None) -> None:
        await self._ensure_open()
        if self._exists:
            return
        async with self._open_lock:
            if self._exists:
                return
            await self._load_collection_state()  # another process may have created it
            if self._exists:
                return
            if not self._create:
                raise BackendUnavailableError(
                    f"collection {self.collection!r} does not exist (create=False)", store=self.name
                )
            dim = dimension or self.dimension
            if dim is None and not self.enable_bm25:
                raise InvalidParameterError(
                    f"{self.name}: the first write to a new collection needs embeddings, or open the store "
                    "with dimension= (or enable_bm25=True for a BM25-only collection)"
                )
            await self._create_collection(dim)  # None: BM25 only, no dense vectors

    async def _readable(self) -> bool:
        """Open the store; whether its collection exists (a missing one reads as empty)."""
        await self._ensure_open()
        if not self._exists:
            async with self._open_lock:
                if not self._exists:
                    await self._load_collection_state()
        return self._exists

    async def _searchable(self) -> bool:
        """:meth:`_readable`, and on milvus-lite flush first when many rows were written since the last flush.

        milvus-lite searches unflushed rows (its memtable) with a per-query scan in Python, about 1 s for BM25
        over 5,000 documents; after a flush the same search takes about 25 ms. A Milvus server indexes its
        growing segments itself and is never flushed here.
        """
        exists = await self._readable()
        if exists and self._lite_server and self._unflushed >= _LITE_FLUSH_ROWS:
            async with self._flush_lock:
                if self._unflushed >= _LITE_FLUSH_ROWS:
                    await self.flush()
        return exists

    async def flush(self) -> None:
        """Ask Milvus to seal and persist what was written so far (``flush``).

        Not needed for correctness: writes are visible to searches at once (the collection uses Strong
        consistency). Useful after a bulk load on milvus-lite, where searches over unflushed rows are slow;
        the store does it by itself there before a search that follows 256 or more new rows.

        Raises:
            BackendError: Milvus failed.
        """
        if await self._readable():
            written = self._unflushed
            await self._call("flush", self.collection)
            self._unflushed = max(0, self._unflushed - written)

    # ------------------------------------------------------------------ writes

    async def upsert(self, documents: Sequence[Document], *, embeddings: np.ndarray | None = None) -> None:
        """Insert or replace ``documents`` by id.

        Args:
            documents: the documents. ``content`` and ``metadata["title"]`` feed BM25 (with
                ``enable_bm25``); metadata must be JSON (str keys; str, finite numbers, bools, None, lists,
                objects).
            embeddings: ``(len(documents), dim)`` float32 (other float dtypes are converted), finite; any
                scale (Milvus normalises for COSINE). ``None`` stores the documents without vectors: BM25
                finds them, k-NN never returns them.

        Raises:
            DimensionMismatchError: the width differs from the store's dimension, or the row count from
                ``len(documents)``.
            InvalidParameterError: a vector holds NaN or infinity, an id repeats, metadata is not JSON, an id,
                content or BM25 text is longer than 65535 UTF-8 bytes, or the first write to a new collection
                has no embeddings, no ``dimension`` was given and BM25 is off.
            ConfigurationError: embeddings for a BM25-only collection (one created by a first write without
                embeddings and without ``dimension``).
            BackendError: Milvus failed. Milvus has no transactions: batches of 256 documents are written
                one after another, so a failure can leave earlier batches written.
        """
        docs = list(documents)
        if not docs:
            return
        check_unique_ids(docs)
        matrix = (
            None if embeddings is None
            else check_embeddings(embeddings, len(docs), dimension=self.dimension, store=self.name)
        )
        rows = [self._row(doc) for doc in docs]
        await self._ensure_collection(None if matrix is None else matrix.shape[1])
        if matrix is not None and not self._has_vectors:
            raise ConfigurationError(
                f"{self.name}: the collection holds no dense vectors (it was created by a write without "
                "embeddings and no dimension=); use a new collection for vectors"
            )
        if matrix is not None and matrix.shape[1] != self.dimension:
            raise DimensionMismatchError(
                f"{self.name}: embeddings have dimension {matrix.shape[1]}, the store holds {self.dimension}"
            )
        for i, row in enumerate(rows):
            if self._has_vectors:
                assert self.dimension is not None
                row[HAS_VECTOR_FIELD] = matrix is not None
                # a document without a vector gets a unit placeholder that has_vector == false hides from k-NN
                row[VECTOR_FIELD] = matrix[i].tolist() if matrix is not None else [1.0] + [0.0] * (self.dimension - 1)
            if not self.enable_bm25:
                row.pop(TEXT_FIELD)
        for start in range(0, len(rows), _UPSERT_BATCH):
            await self._call("upsert", self.collection, rows[start : start + _UPSERT_BATCH])
            self._unflushed += len(rows[start : start + _UPSERT_BATCH])

    def _row(self, doc: Document) -> dict[str, Any]:
        metadata, _ = metadata_json(doc)
        title = doc.metadata.get(TITLE)
        text = f"{title}\n{doc.content}" if isinstance(title, str) and title else doc.content
        for label, value in (("id", doc.id), ("content", doc.content), ("title + content", text)):
            try:
                size = len(value.encode("utf-8"))
            except UnicodeEncodeError as exc:
                raise InvalidParameterError(f"document {doc.id!r}: {label} is not valid Unicode text") from exc
            if size > MAX_VARCHAR_BYTES:
                raise InvalidParameterError(
                    f"document {doc.id!r}: {label} is {size} UTF-8 bytes; Milvus holds at most "
                    f"{MAX_VARCHAR_BYTES} (chunk the text)"
                )
        try:
            values = filter_values(metadata)
        except UnicodeEncodeError as exc:
            raise InvalidParameterError(f"document {doc.id!r}: a metadata key is not valid Unicode text") from exc
        return {ID_FIELD: doc.id, CONTENT_FIELD: doc.content, METADATA_FIELD: metadata, FILTER_FIELD: values,
                TEXT_FIELD: text}

    async def delete(self, *, ids: Sequence[str] | None = None, filter: FilterLike | MilvusExpr | None = None) -> int:  # noqa: A002
        """Delete documents; return how many were removed.

        Args:
            ids: delete these ids (unknown ids are ignored).
            filter: delete documents matching this filter (fastrag filter or :class:`MilvusExpr`). With
                ``ids`` too, only documents that have one of the ids *and* match are deleted.

        The matching ids are read first and then deleted by id, so the count is exact; a document written
        between the two steps by another client is not deleted.

        Raises:
            InvalidParameterError: neither ``ids`` nor ``filter`` was given, or ``ids`` is a single string.
            FilterError: the filter is malformed; UnsupportedFilterError: it cannot be expressed.
            BackendError: Milvus failed.
        """
        if ids is None and filter is None:
            raise InvalidParameterError("delete needs ids or a filter; use clear() to delete everything")
        expressions = self._id_filter_expressions(ids, filter)
        if not expressions or not await self._readable():
            return 0
        doomed: list[str] = []
        for expression in expressions:
            rows = await self._call("query", self.collection, filter=expression, output_fields=[ID_FIELD])
            doomed.extend(row[ID_FIELD] for row in rows)
        doomed = sorted(set(doomed))
        for start in range(0, len(doomed), _ID_BATCH):
            await self._call("delete", self.collection, filter=_ids_expression(doomed[start : start + _ID_BATCH]))
        return len(doomed)

    async def clear(self) -> int:
        """Delete every document; return how many were removed."""
        return await self.delete(filter=MilvusExpr(_TRUE))

    def _id_filter_expressions(
        self, ids: Sequence[str] | None, filter: FilterLike | MilvusExpr | None  # noqa: A002
    ) -> list[str]:
        """Expressions whose union selects ``ids`` AND ``filter`` (ids in batches); ``[]`` selects nothing."""
        condition = _native_or_translated(filter)
        if ids is None:
            return [condition or _TRUE]
        if isinstance(ids, str) or not isinstance(ids, Sequence):
            raise InvalidParameterError("ids must be a sequence of strings, not one string")
        unique = sorted({str(i) for i in ids})
        for i in unique:
            string_literal(i)  # refuse unencodable ids before any call
        return [
            _and(_ids_expression(unique[start : start + _ID_BATCH]), condition)
            for start in range(0, len(unique), _ID_BATCH)
        ]

    # ------------------------------------------------------------------ reads

    async def count(self, *, filter: FilterLike | MilvusExpr | None = None) -> int:  # noqa: A002
        """How many documents the store holds, or how many match ``filter``.

        Raises:
            FilterError: the filter is malformed; UnsupportedFilterError: it cannot be expressed.
            BackendError: Milvus failed.
        """
        expression = _native_or_translated(filter) or ""
        if not await self._readable():
            return 0
        rows = await self._call("query", self.collection, filter=expression, output_fields=["count(*)"])
        return int(rows[0]["count(*)"]) if rows else 0

    async def get(
        self, *, ids: Sequence[str] | None = None, filter: FilterLike | MilvusExpr | None = None,  # noqa: A002
        limit: int | None = None,
    ) -> list[Document]:
        """Documents with these ``ids`` and/or matching ``filter`` (all when neither), in id order.

        Every matching document is read (one query per 500 ids) and sorted by id here; ``limit`` then
        keeps the first ones.

        Raises:
            InvalidParameterError: ``limit`` is not a positive int, or ``ids`` is a single string.
            FilterError: the filter is malformed; UnsupportedFilterError: it cannot be expressed.
            BackendError: Milvus failed.
        """
        if limit is not None:
            _check_k(limit, "limit")
        expressions = self._id_filter_expressions(ids, filter)
        if not expressions or not await self._readable():
            return []
        found: dict[str, Document] = {}
        for expression in expressions:
            rows = await self._call(
                "query", self.collection, filter=expression, output_fields=[ID_FIELD, CONTENT_FIELD, METADATA_FIELD]
            )
            for row in rows:
                found[row[ID_FIELD]] = _document(row)
        docs = [found[i] for i in sorted(found)]
        return docs if limit is None else docs[:limit]

    async def search_vector(
        self, embedding: np.ndarray, *, k: int, filter: FilterLike | MilvusExpr | None = None  # noqa: A002
    ) -> list[Document]:
        """Cosine k-NN among documents that have a vector and match ``filter`` (applied before ranking).

        Args:
            embedding: ``(dim,)`` query vector, any scale.
            k: how many documents at most (an int, 1..16384).
            filter: a fastrag filter or a :class:`MilvusExpr`.

        Returns:
            Copies best first, ``score`` = cosine similarity in [-1, 1] (higher is better), zero-based
            ``rank``; equal scores are ordered by id. With the default FLAT index the search is exact.

        Raises:
            InvalidParameterError: ``k`` is out of range, or the vector holds NaN or infinity.
            DimensionMismatchError: the vector's width differs from the store's.
            FilterError / UnsupportedFilterError: the filter is malformed / cannot be expressed.
            BackendError: Milvus failed.
        """
        _check_k(k)
        query = check_query_vector(embedding, dimension=None, store=self.name)  # the width is checked below
        if query.shape[0] == 0:
            raise DimensionMismatchError(f"query embedding must have shape (dim,), got {query.shape}")
        check_dimension(query.shape[0], self.dimension, store=self.name, what="query has")
        expression = _and(f"{HAS_VECTOR_FIELD} == true", _native_or_translated(filter))
        if not await self._searchable() or not self._has_vectors:
            return []  # no collection yet, or a BM25-only one: no document has a vector
        if query.shape[0] != self.dimension:
            raise DimensionMismatchError(
                f"{self.name}: query has dimension {query.shape[0]}, the store holds {self.dimension}"
            )
        if not np.any(query):
            raise InvalidParameterError("query embedding is all zeros; cosine similarity is undefined")
        hits = await self._search(query.tolist(), VECTOR_FIELD, "COSINE", k, expression)
        return _ranked([(_cosine_score(score), doc) for score, doc in hits], k)

    async def search_text(self, query: str, *, k: int, filter: FilterLike | MilvusExpr | None = None) -> list[Document]:  # noqa: A002
        """BM25 search (Milvus's BM25 function): the ``k`` best documents sharing a term with ``query``.

        Args:
            query: free text, analysed like the documents (``analyzer_params``).
            k: how many documents at most (an int, 1..16384).
            filter: a fastrag filter or a :class:`MilvusExpr`; applied before the top-k cut.

        Returns:
            Copies best first, ``score`` = BM25 (k1 = 1.2, b = 0.75, IDF ``log(1 + (N - n + 0.5) / (n + 0.5))``;
            unbounded, > 0, higher is better), zero-based ``rank``. milvus-lite computes IDF per segment.
            Empty when no document shares a term or the query is blank.

        Raises:
            InvalidParameterError: ``k`` is out of range or ``query`` is not a string.
            ConfigurationError: the collection was created without ``enable_bm25``.
            FilterError / UnsupportedFilterError: the filter is malformed / cannot be expressed.
            BackendError: Milvus failed.
        """
        _check_k(k)
        if not isinstance(query, str):
            raise InvalidParameterError(f"query must be a string, got {type(query).__name__}")
        expression = _native_or_translated(filter) or ""
        exists = await self._searchable()
        if not self.enable_bm25:
            raise ConfigurationError(f"{self.name}: the collection has no BM25 index; create it with enable_bm25=True")
        if not exists or not query.strip():
            return []
        hits = await self._search(query, SPARSE_FIELD, "BM25", k, expression)
        # milvus-lite reports BM25 as a negative distance, Milvus as a positive score: BM25 is never negative.
        return _ranked([(v, doc) for score, doc in hits if (v := _bm25_score(score)) is not None], k)

    async def _search(self, data: Any, field: str, metric: str, k: int, expression: str) -> list[tuple[float, Document]]:
        """``(distance, document)`` hits best first, enough for :func:`_ranked` to cut at ``k`` (see
        :meth:`_settled_page`)."""

        async def page(limit: int) -> list[Any]:
            result = await self._call(
                "search", self.collection, data=[data], anns_field=field, limit=limit,
                filter=expression, output_fields=[ID_FIELD, CONTENT_FIELD, METADATA_FIELD],
                search_params={"metric_type": metric},
            )
            return result[0] if result else []

        found = await self._settled_page(page, k, score=_bm25_score if metric == "BM25" else _cosine_score)
        return [(float(hit["distance"]), _document(hit["entity"])) for hit in found]

    @staticmethod
    async def _settled_page(
        page: Callable[[int], Awaitable[list[Any]]],
        k: int,
        *,
        score: Callable[[float], float | None],
        first: int = 1,
    ) -> list[Any]:
        """The raw hits of ``page(limit)`` (best first) once they hold ``k`` distinct ids, when that many
        match, and every hit whose score equals the ``k``-th distinct one's, so that equal scores at the cut
        can be ordered by id. ``score`` maps a hit's distance to the score the caller ranks by (``None``: the
        caller drops the hit). The first page asks for ``k + first`` hits (one more than needed shows whether
        a tie runs past the cut); a wider one is asked for only while a tie does, or while repeated ids
        leave fewer than ``k``."""
        limit = min(k + first, MAX_TOP_K)
        while True:
            found = await page(limit)
            if len(found) < limit or limit >= MAX_TOP_K or _cut_is_settled(found, k, score):
                return found
            limit = min(max(2 * limit, k + _TIE_SLACK), MAX_TOP_K)

    async def search_hybrid(
        self,
        query: str,
        embedding: np.ndarray,
        *,
        k: int,
        filter: FilterLike | MilvusExpr | None = None,  # noqa: A002
        fusion: Literal["rrf", "weighted"] = "rrf",
        rank_constant: int = 60,
        weights: Sequence[float] | Mapping[str, float] | None = None,
        candidate_k: int = 40,
        provenance: bool = False,
    ) -> list[Document]:
        """Dense k-NN and BM25 fused inside Milvus (``hybrid_search``), with ``filter`` applied to both legs.

        Args:
            query: the text for the BM25 leg (needs ``enable_bm25``).
            embedding: ``(dim,)`` query vector for the dense leg.
            k: how many fused documents at most (an int, 1..16384).
            filter: a fastrag filter or a :class:`MilvusExpr`, applied to each leg before its top-k cut.
            fusion: ``"rrf"``: Milvus's ``RRFRanker``, score = sum over legs of ``1 / (rank_constant + r)``
                with ``r`` the 1-based rank in that leg (Cormack, Clarke & Büttcher, SIGIR 2009). ``"weighted"``:
                ``WeightedRanker`` with ``norm_score=True``: each leg's score is mapped to [0, 1] (cosine by
                ``(1 + s) / 2``, BM25 by ``2 * atan(s) / pi``) and the weighted sum is the score.
            rank_constant: RRF's ``k`` (a positive int; 60 in the paper).
            weights: for ``"weighted"``: ``{"vector": w, "bm25": w}`` or ``(w_vector, w_bm25)``, each in
                [0, 1] (Milvus's range), not both 0; default equal.
            candidate_k: how many hits each leg contributes (at least ``k``).
            provenance: also run the two legs as plain searches (same requests, concurrently) and stamp each
                fused document's ``metadata["branches"]`` with its ``"vector"`` and ``"bm25"`` score and
                zero-based rank. Milvus's ``hybrid_search`` does not report per-leg scores, so without this
                the documents carry no ``branches``. It triples the work.

        Returns:
            Copies best first with the fused ``score`` (higher is better) and zero-based ``rank``; equal
            scores are ordered by id.

        Raises:
            InvalidParameterError: bad ``k``, ``query``, vector, ``fusion``, ``rank_constant``, ``weights`` or
                ``candidate_k``.
            DimensionMismatchError: the vector's width differs from the store's.
            ConfigurationError: the collection was created without BM25.
            FilterError / UnsupportedFilterError: the filter is malformed / cannot be expressed.
            BackendError: Milvus failed.
        """
        pymilvus = _import_pymilvus()
        _check_k(k)
        _check_k(candidate_k, "candidate_k")
        if not isinstance(query, str) or not query.strip():
            raise InvalidParameterError("query must be a non-blank string")
        vector = np.asarray(embedding, dtype=np.float32)
        if vector.ndim != 1 or vector.shape[0] == 0:
            raise DimensionMismatchError(f"query embedding must have shape (dim,), got {vector.shape}")
        if not np.isfinite(vector).all() or not np.any(vector):
            raise InvalidParameterError("query embedding contains NaN or infinity, or is all zeros")
        ranker = _ranker(pymilvus, fusion, rank_constant, weights)
        condition = _native_or_translated(filter)
        dense_expression = _and(f"{HAS_VECTOR_FIELD} == true", condition)
        text_expression = condition or ""
        exists = await self._searchable()
        if not self.enable_bm25:
            raise ConfigurationError(f"{self.name}: the collection has no BM25 index; create it with enable_bm25=True")
        if not exists:
            return []
        if not self._has_vectors:
            raise ConfigurationError(f"{self.name}: the collection holds no dense vectors (BM25 only)")
        if vector.shape[0] != self.dimension:
            raise DimensionMismatchError(
                f"{self.name}: query has dimension {vector.shape[0]}, the store holds {self.dimension}"
            )
        leg_k = min(max(candidate_k, k), MAX_TOP_K)
        requests = [
            pymilvus.AnnSearchRequest(data=[vector.tolist()], anns_field=VECTOR_FIELD,
                                      param={"metric_type": "COSINE"}, limit=leg_k, expr=dense_expression),
            pymilvus.AnnSearchRequest(data=[query], anns_field=SPARSE_FIELD,
                                      param={"metric_type": "BM25"}, limit=leg_k, expr=text_expression or None),
        ]
        fused: list[tuple[float, Document]] = []
        legs: dict[str, list[Document]] = {}

        async def hybrid_page(limit: int) -> list[Any]:
            result = await self._call(
                "hybrid_search", self.collection, requests, ranker, limit=limit,
                output_fields=[ID_FIELD, CONTENT_FIELD, METADATA_FIELD],
            )
            return result[0] if result else []

        async def run_hybrid() -> None:
            # RRF gives a document found by one leg at rank r the same score as one found by the other leg at
            # rank r, so ties at the cut are common: the first page already asks for _TIE_SLACK more
            found = await self._settled_page(hybrid_page, k, score=float, first=_TIE_SLACK)
            fused.extend((float(h["distance"]), _document(h["entity"])) for h in found)

        async def run_leg(name: str, data: Any, field: str, metric: str, expression: str) -> None:
            hits = await self._search(data, field, metric, leg_k, expression)
            if metric == "BM25":
                hits = [(v, d) for s, d in hits if (v := _bm25_score(s)) is not None]
            # the server ranks each leg by score alone; ids order equal scores here, as everywhere
            legs[name] = _ranked(hits, leg_k)

        if not provenance:
            await run_hybrid()
            return _ranked(fused, k)
        failure: BaseException | None = None
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(run_hybrid)
                tg.start_soon(run_leg, "vector", vector.tolist(), VECTOR_FIELD, "COSINE", dense_expression)
                tg.start_soon(run_leg, "bm25", query, SPARSE_FIELD, "BM25", text_expression)
        except BaseExceptionGroup as group:  # one request failing fails the search: raise its error as is
            failure = next((e for e in group.exceptions if isinstance(e, FastragError)), group.exceptions[0])
        if failure is not None:
            raise failure
        docs = _ranked(fused, k)
        where = {name: {d.id: {"score": d.score, "rank": d.rank} for d in hits} for name, hits in legs.items()}
        return [
            d.with_metadata(**{BRANCHES: {name: found[d.id] for name, found in sorted(where.items()) if d.id in found}})
            for d in docs
        ]


def _ranker(pymilvus: Any, fusion: str, rank_constant: Any, weights: Any) -> Any:
    if fusion == "rrf":
        _check_k(rank_constant, "rank_constant")
        if weights is not None:
            raise InvalidParameterError("weights apply to fusion='weighted' only")
        return pymilvus.RRFRanker(rank_constant)
    if fusion != "weighted":
        raise InvalidParameterError(f"fusion must be 'rrf' or 'weighted', got {fusion!r}")
    if weights is None:
        pair = (0.5, 0.5)
    elif isinstance(weights, Mapping):
        if set(weights) != {"vector", "bm25"}:
            raise InvalidParameterError(f'weights must name exactly "vector" and "bm25", got {sorted(weights)!r}')
        pair = (weights["vector"], weights["bm25"])
    elif isinstance(weights, Sequence) and not isinstance(weights, str | bytes) and len(weights) == 2:
        pair = (weights[0], weights[1])
    else:
        raise InvalidParameterError(f"weights must be (w_vector, w_bm25) or a mapping, got {weights!r}")
    for w in pair:
        if isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w) or not 0 <= w <= 1:
            raise InvalidParameterError(f"each weight must be a number in [0, 1] (Milvus's range), got {w!r}")
    if not any(pair):
        raise InvalidParameterError("at least one weight must be positive")
    return pymilvus.WeightedRanker(float(pair[0]), float(pair[1]), norm_score=True)


def _index_params(pymilvus: Any, spec: Mapping[str, Any]) -> Any:
    params = pymilvus.MilvusClient.prepare_index_params()
    params.add_index(**spec)
    return params


def _document(row: Mapping[str, Any]) -> Document:
    metadata = row.get(METADATA_FIELD)
    if isinstance(metadata, str | bytes):
        metadata = json.loads(metadata)
    return Document(id=str(row[ID_FIELD]), content=row.get(CONTENT_FIELD) or "", metadata=metadata or {})


def _cosine_score(distance: float) -> float:
    """The score a dense hit ranks by: Milvus's COSINE, clamped to [-1, 1] (float error can pass 1)."""
    return max(-1.0, min(1.0, distance))


def _bm25_score(distance: float) -> float | None:
    """The score a BM25 hit ranks by (milvus-lite reports it negated), or ``None`` for 0 (such a hit is dropped)."""
    return abs(distance) if distance != 0 else None


def _cut_is_settled(found: Sequence[Mapping[str, Any]], k: int, score: Callable[[float], float | None]) -> bool:
    """Whether a full page of raw hits (best first) needs no wider search: it holds ``k`` distinct kept ids
    and a hit past the ``k``-th scores differently from it (no hit tied with it was left out of the page),
    or it reaches hits the caller drops (``score`` gives ``None``; every hit after them is dropped too)."""
    seen: set[str] = set()
    for position, hit in enumerate(found):
        value = score(float(hit["distance"]))
        if value is None:
            return True
        seen.add(str(hit["entity"][ID_FIELD]))
        if len(seen) == k:
            return position < len(found) - 1 and score(float(found[-1]["distance"])) != value
    return False


def _ranked(hits: list[tuple[float, Document]], k: int) -> list[Document]:
    unique: dict[str, tuple[float, Document]] = {}
    for score, doc in hits:
        if doc.id not in unique:
            unique[doc.id] = (score, doc)
    return best_first(unique.values(), k)


def _check_k(k: Any, name: str = "k") -> None:
    check_k(k, name)
    if name == "k" and k > MAX_TOP_K:
        raise InvalidParameterError(f"{name} must be at most {MAX_TOP_K} (Milvus's largest search limit), got {k!r}")


def _message(exc: BaseException) -> str:
    message = getattr(exc, "message", None)
    return str(message) if message else (str(exc) or type(exc).__name__)


# --------------------------------------------------------------------------------------- retriever


class MilvusHybridRetriever:
    """Hybrid retrieval fused inside Milvus: one ``hybrid_search`` call runs dense k-NN and BM25.

    The same result contract as :class:`~fastrag.retrieval.hybrid.HybridRetriever`: documents best first,
    copies stamped with the fused ``score`` and zero-based ``rank``; the filter applies to both legs before
    their top-k cuts. Per-branch provenance (``metadata["branches"]``) is only present with
    ``provenance=True``, because Milvus does not report per-leg scores (see
    :meth:`MilvusVectorStore.search_hybrid`).

    Args:
        store: a :class:`MilvusVectorStore` opened with ``enable_bm25=True``.
        embedder: the :class:`~fastrag.protocols.Embedder` whose vectors the store holds.
        fusion: ``"rrf"`` (default) or ``"weighted"``.
        rank_constant: RRF's constant (60, Cormack et al. 2009).
        weights: for ``"weighted"``: ``{"vector": w, "bm25": w}`` or ``(w_vector, w_bm25)`` in [0, 1].
        candidate_k: hits per leg (at least ``k``).
        filter: a filter (fastrag or :class:`MilvusExpr`) applied to every call, AND-ed with the call's own;
            both become one Milvus expression, so a fastrag and a native filter combine exactly.
        provenance: stamp ``branches`` by also running both legs as plain searches.

    Raises:
        InvalidParameterError: a bad ``fusion``, ``rank_constant``, ``weights`` or ``candidate_k``, or a
            store that is not a :class:`MilvusVectorStore`.
    """

    name = "milvus_hybrid"

    def __init__(
        self,
        store: MilvusVectorStore,
        embedder: Embedder,
        *,
        fusion: Literal["rrf", "weighted"] = "rrf",
        rank_constant: int = 60,
        weights: Sequence[float] | Mapping[str, float] | None = None,
        candidate_k: int = 40,
        filter: FilterLike | None = None,  # noqa: A002
        provenance: bool = False,
    ) -> None:
        if not isinstance(store, MilvusVectorStore):
            raise InvalidParameterError(f"store must be a MilvusVectorStore, got {store!r}")
        _ranker(_import_pymilvus(), fusion, rank_constant, weights)  # validate now
        _check_k(candidate_k, "candidate_k")
        self.store = store
        self.embedder = embedder
        self.fusion = fusion
        self.rank_constant = rank_constant
        self.weights = weights
        self.candidate_k = candidate_k
        _native_or_translated(filter)  # a foreign or inexpressible filter raises now
        self.filter = filter if isinstance(filter, MilvusExpr) else parse_filter(filter)
        self.provenance = provenance

    async def retrieve(
        self, query: str, *, k: int = 10, filter: FilterLike | MilvusExpr | None = None  # noqa: A002
    ) -> list[Document]:
        """Up to ``k`` fused documents for ``query`` matching both filters, best first.

        Raises:
            InvalidParameterError: ``k`` is not a positive int or ``query`` is blank (before any search).
            FilterError / UnsupportedFilterError: a filter is malformed / cannot be expressed.
            BackendError: Milvus failed. EmbeddingError: the embedder failed.
        """
        from fastrag.retrieval._validation import check_positive_int, check_query

        check_query(query)
        check_positive_int(k, "k")
        combined = self._combined(filter)
        embedding = await self.embedder.embed_query(query)
        return await self.store.search_hybrid(
            query, embedding, k=k, filter=combined, fusion=self.fusion, rank_constant=self.rank_constant,
            weights=self.weights, candidate_k=self.candidate_k, provenance=self.provenance,
        )

    def _combined(self, filter: FilterLike | MilvusExpr | None) -> Filter | MilvusExpr | None:  # noqa: A002
        """Both filters as one: an AST when both are fastrag filters, else one Milvus expression (exact: both
        sides are Milvus expressions). Raises before the query is embedded if either cannot be expressed."""
        given = [f for f in (self.filter, filter) if f is not None]
        expressions = [_native_or_translated(f) for f in given]
        parts = [f if isinstance(f, MilvusExpr) else parse_filter(f) for f in given]
        if not parts:
            return None
        if len(parts) == 1:
            return parts[0]
        if any(isinstance(f, MilvusExpr) for f in parts):
            return MilvusExpr(_and(*expressions))
        return And(tuple(parts))

    def __repr__(self) -> str:
        return (
            f"MilvusHybridRetriever(store={self.store!r}, fusion={self.fusion!r}, rank_constant={self.rank_constant!r}, "
            f"weights={self.weights!r}, candidate_k={self.candidate_k!r})"
        )
