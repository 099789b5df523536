"""OpenSearch: k-NN (:class:`~fastrag.protocols.VectorStore`) and BM25 (:class:`~fastrag.protocols.LexicalStore`)
in one index, through the async ``opensearch-py`` client (``pip install "fastrag-retrieval[opensearch]"``).

Design (the docs page ``docs/backends/opensearch.md`` has the full tables):

- **One index, one document per fastrag document.** ``_id`` is the document id (ids longer than 512 UTF-8
  bytes, OpenSearch's limit, or starting with ``~h:`` are stored under ``~h:`` + SHA-256 of the id; the
  original id is always the ``id`` keyword field, which every query and sort uses).
- **BM25** is OpenSearch's own (Lucene ``BM25Similarity``, k1 = 1.2, b = 0.75): a ``match`` query (terms
  OR-ed) on ``content`` and on ``title`` (``metadata["title"]`` when it is a string), both ``text`` fields
  with the ``english`` analyzer by default (standard tokenizer, lowercasing, English stopwords, Porter
  stemming). A document sharing no analysed term with the query cannot match a ``match`` query, so it is
  never returned.
- **k-NN** is the k-NN plugin: a ``knn_vector`` field (``hnsw``, engine ``lucene``, space ``cosinesimil``).
  By default :meth:`OpenSearchVectorStore.search_vector` sends a ``knn`` query with the filter *inside* it
  (efficient filtering: Lucene picks an exact pre-filtered search or a filtered HNSW walk, so a filtered
  top-k is not short while enough documents match). With ``exact=True`` it sends a ``script_score`` query
  with the plugin's ``knn_score`` script over the filtered documents instead (brute force, exact, slower on
  large indexes). Scores are converted back to cosine similarity in [-1, 1]: the ``knn`` query scores
  ``(1 + cos) / 2`` and the script ``1 + cos`` (OpenSearch docs, "Spaces" and "Exact k-NN with scoring
  script").
- **Metadata** is kept verbatim as a JSON string (``metadata_json``, neither indexed nor in doc values), so it
  round-trips exactly (ints stay ints, ``3.0`` stays a float, bools stay bools, nested values survive).
  For filtering, every top-level value is also written to a typed *shadow* field, one namespace per type, so
  the type rules of :mod:`fastrag.filters` hold exactly: ``f_str.<key>`` (keyword), ``f_int.<key>`` (long),
  ``f_num.<key>`` (double, floats), ``f_bool.<key>`` (boolean), ``f_date.<key>`` (long: epoch
  microseconds, UTC, for strings that are ISO-8601 dates), and for list elements ``l_str``, ``l_int``,
  ``l_num``, ``l_bool``. The string ``"2020"`` and the number ``2020`` live in different fields, so they
  never compare; a missing key is simply an absent field. Keys are percent-encoded into field names
  (:func:`encode_key`), so a dot is part of the key, not a path, and no key can address another field.
- **Filters** become Query DSL (:func:`translate_filter`): ``bool`` ``filter`` / ``should`` with
  ``minimum_should_match: 1`` / ``must_not`` over ``term``, ``terms``, ``range``, ``prefix``, ``wildcard``
  and ``exists``. Values are JSON values in the request body, never spliced into query strings; the only
  escaping needed is ``\\``, ``*`` and ``?`` in the ``wildcard`` pattern of ``stringContains``. Every
  construct of the filter language is expressed exactly; nothing raises
  :class:`~fastrag.errors.UnsupportedFilterError`.
- **Native filters**: pass ``filter=OpenSearchQuery({...})`` to use any Query DSL query as the filter. A plain
  mapping is always read as a fastrag filter, so the two can never be confused.
- **Writes** go through the ``_bulk`` API with ``refresh=true`` by default, so a write is visible to the next
  read. OpenSearch has no multi-document transactions: if some documents of a batch are rejected, the others
  are written and :class:`~fastrag.errors.BackendError` lists the rejected ids. Everything fastrag can check
  (dimensions, NaN, zero vectors, JSON, over-long keyword values) is checked before anything is sent.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import parse_qsl, unquote, urlsplit

import anyio
import numpy as np

from fastrag.errors import (
    AuthenticationError,
    BackendError,
    BackendTemporarilyUnavailableError,
    BackendUnavailableError,
    ConfigurationError,
    DimensionMismatchError,
    FilterError,
    InvalidParameterError,
    RateLimitError,
)
from fastrag.filters import (
    RANGE_OPERATORS,
    And,
    Comparison,
    Filter,
    FilterLike,
    Not,
    Or,
    parse_date,
    parse_filter,
)
from fastrag.models import Document
from fastrag.vector_store._metadata import epoch_micros, metadata_json
from fastrag.vector_store._ranking import best_first
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
    "SCHEMA_VERSION",
    "OpenSearchQuery",
    "OpenSearchVectorStore",
    "document_source",
    "encode_key",
    "escape_wildcard",
    "index_body",
    "knn_search_body",
    "text_search_body",
    "translate_filter",
    "vector_mapping",
]

SCHEMA_VERSION = 1
"""Recorded in the index mapping's ``_meta.fastrag.schema``; an index with another value is refused."""

INSTALL_HINT = 'pip install "fastrag-retrieval[opensearch]"'

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_KEYWORD_BYTES = 32766
"""Lucene's limit on one indexed term; longer string metadata values cannot be filtered on, so they are refused."""
MAX_ID_BYTES = 512
"""OpenSearch's limit on ``_id``."""
MAX_RESULT_WINDOW = 10_000
"""OpenSearch's default ``index.max_result_window``: the largest ``k`` one search can return."""

_SAFE_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_HASHED_ID_PREFIX = "~h:"
_BULK_CHUNK = 500
_PAGE = 1000
_IDS_CHUNK = 10_000
_SOURCE_EXCLUDES = {"excludes": ["embedding"]}

# Scalar shadow namespaces (top-level values) and list-element namespaces, by value type.
_SCALAR_NS = {"str": "f_str", "int": "f_int", "num": "f_num", "bool": "f_bool", "date": "f_date"}
_LIST_NS = {"str": "l_str", "int": "l_int", "num": "l_num", "bool": "l_bool"}
_NS_TYPES = {
    "f_str": "keyword", "f_int": "long", "f_num": "double", "f_bool": "boolean", "f_date": "long",
    "l_str": "keyword", "l_int": "long", "l_num": "double", "l_bool": "boolean",
}


# ------------------------------------------------------------------------------------------ fields


def encode_key(key: str) -> str:
    """The field-name form of a metadata key: ``[A-Za-z0-9_-]`` kept, every other character percent-encoded.

    The encoding is injective, keeps common keys readable (``category`` stays ``category``) and turns the
    characters that mean something in a field name (``.`` paths, ``*`` patterns) into plain text:
    ``"meta.lang"`` becomes ``"meta%2Elang"``.
    """
    return "".join(
        ch if ch in _SAFE_KEY_CHARS else "".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
        for ch in key
    )


def _field(namespace: str, key: str) -> str:
    return f"{namespace}.{encode_key(key)}"


def _as_double(value: float) -> float:
    return 0.0 if value == 0 else value  # Lucene orders -0.0 below 0.0; Python says they are equal


# ----------------------------------------------------------------------------------------- filters


@dataclass(frozen=True, slots=True)
class OpenSearchQuery:
    """A native OpenSearch Query DSL query, passed through as the filter unchanged.

    ``store.search_text("q", k=5, filter=OpenSearchQuery({"term": {"f_str.category": "science"}}))``.
    It is used in filter context (it does not change scores). Shadow field names are built as described in
    the module docstring (``f_str.<encode_key(key)>`` and so on); :func:`translate_filter` output can be
    embedded in a larger native query.

    Attributes:
        query: the Query DSL object, a JSON-serialisable mapping with one query type at the top.
    """

    query: Mapping[str, Any]
    native_backend = "opensearch"
    """Marks the object as a native filter for the OpenSearch backend."""

    def __post_init__(self) -> None:
        if not isinstance(self.query, Mapping) or not self.query:
            raise InvalidParameterError(f"OpenSearchQuery needs a non-empty Query DSL mapping, got {self.query!r}")
        try:
            plain = json.loads(json.dumps(self.query, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise InvalidParameterError(f"OpenSearchQuery must be JSON-serialisable: {exc}") from exc
        object.__setattr__(self, "query", plain)


def translate_filter(node: FilterLike) -> dict[str, Any]:
    """Translate a fastrag filter into an OpenSearch Query DSL query (for filter context).

    The translation is exact for every construct of the filter language (see :mod:`fastrag.filters`), given
    the shadow fields :func:`document_source` writes:

    - ``equals`` / ``listContains``: ``term`` on the shadow field of the value's type (strings ``f_str``,
      bools ``f_bool``, numbers both ``f_int`` and ``f_num`` where the value is representable there, so
      ``1 == 1.0``); ``in``: ``terms`` per type; ``notEquals`` / ``notIn``: ``bool.must_not`` (a missing key
      has no shadow field, so it matches).
    - ranges on numbers: ``range`` on ``f_int`` with the bound rounded to the integer that gives the same
      answer, OR ``range`` on ``f_num`` with the bound rounded to the double that gives the same answer;
      ranges on ISO-8601 dates: ``range`` on ``f_date`` (epoch microseconds, UTC).
    - ``startsWith``: ``prefix``; ``stringContains``: ``wildcard`` ``*value*`` with ``\\``, ``*`` and ``?``
      escaped; an empty prefix or substring is ``exists`` (any string).
    - ``andAll``: ``bool.filter``; ``orAll``: ``bool.should`` with ``minimum_should_match: 1``; ``notAll``:
      ``bool.must_not`` (of a ``bool.filter`` when it has several children).

    Args:
        node: a filter AST, or its JSON form (mapping or JSON string).

    Returns:
        A JSON-ready dict. Values appear as JSON values, never inside a query string.

    Raises:
        FilterError: the filter is malformed (or ``None``).
    """
    parsed = parse_filter(node)
    if parsed is None:
        raise FilterError("translate_filter needs a filter, got None")
    return _translate(parsed)


_MATCH_NONE: dict[str, Any] = {"match_none": {}}
_MATCH_ALL: dict[str, Any] = {"match_all": {}}


def _translate(node: Filter) -> dict[str, Any]:
    if isinstance(node, And):
        return {"bool": {"filter": [_translate(child) for child in node.filters]}}
    if isinstance(node, Or):
        return {"bool": {"should": [_translate(child) for child in node.filters], "minimum_should_match": 1}}
    if isinstance(node, Not):
        inner = (
            _translate(node.filters[0])
            if len(node.filters) == 1
            else {"bool": {"filter": [_translate(child) for child in node.filters]}}
        )
        return {"bool": {"must_not": [inner]}}
    return _comparison(node)


def _comparison(node: Comparison) -> dict[str, Any]:
    op, key, value = node.operator, node.key, node.value
    if op == "equals":
        return _equals(_SCALAR_NS, key, [value])
    if op == "notEquals":
        return {"bool": {"must_not": [_equals(_SCALAR_NS, key, [value])]}}
    if op == "in":
        return _equals(_SCALAR_NS, key, list(value))
    if op == "notIn":
        return {"bool": {"must_not": [_equals(_SCALAR_NS, key, list(value))]}} if value else dict(_MATCH_ALL)
    if op == "listContains":
        return _equals(_LIST_NS, key, [value])
    if op in RANGE_OPERATORS:
        return _range(op, key, value)
    if op == "startsWith":
        if value == "":
            return {"exists": {"field": _field("f_str", key)}}
        return {"prefix": {_field("f_str", key): {"value": value}}}
    if op == "stringContains":
        if value == "":
            return {"exists": {"field": _field("f_str", key)}}
        return {"wildcard": {_field("f_str", key): {"value": f"*{escape_wildcard(value)}*"}}}
    raise AssertionError(f"unknown operator {op!r}")  # Comparison validates operators


def escape_wildcard(text: str) -> str:
    """``text`` as a literal inside a ``wildcard`` pattern: ``\\``, ``*`` and ``?`` are backslash-escaped."""
    return text.replace("\\", "\\\\").replace("*", "\\*").replace("?", "\\?")


def _equals(namespaces: Mapping[str, str], key: str, values: Sequence[Any]) -> dict[str, Any]:
    """A query matching a shadow value equal (fastrag semantics) to any of ``values``."""
    by_ns: dict[str, list[Any]] = {}

    def add(kind: str, item: Any) -> None:
        bucket = by_ns.setdefault(namespaces[kind], [])
        if not any(type(item) is type(seen) and item == seen for seen in bucket):
            bucket.append(item)

    for value in values:
        if isinstance(value, bool):
            add("bool", value)
        elif isinstance(value, str):
            add("str", value)
        elif isinstance(value, int):
            if INT64_MIN <= value <= INT64_MAX:
                add("int", value)
            as_float = _exact_float(value)
            if as_float is not None:
                add("num", _as_double(as_float))
        else:  # a finite float
            if value.is_integer() and INT64_MIN <= value <= INT64_MAX:
                add("int", int(value))
            add("num", _as_double(value))
    order = [namespaces[kind] for kind in ("str", "int", "num", "bool")]
    clauses = []
    for ns in order:
        items = by_ns.get(ns)
        if not items:
            continue
        name = _field(ns, key)
        clauses.append({"term": {name: items[0]}} if len(items) == 1 else {"terms": {name: items}})
    if not clauses:
        return dict(_MATCH_NONE)
    if len(clauses) == 1:
        return clauses[0]
    return {"bool": {"should": clauses, "minimum_should_match": 1}}


def _exact_float(value: int) -> float | None:
    """``float(value)`` when it equals ``value`` exactly, else ``None``."""
    try:
        as_float = float(value)
    except OverflowError:
        return None
    return as_float if as_float == value else None


_RANGE_KEYS = {"greaterThan": "gt", "greaterThanOrEquals": "gte", "lessThan": "lt", "lessThanOrEquals": "lte"}


def _range(op: str, key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, str):  # validated as an ISO-8601 date by the parser
        moment = parse_date(value)
        assert moment is not None
        return {"range": {_field("f_date", key): {_RANGE_KEYS[op]: epoch_micros(moment)}}}
    clauses = [c for c in (_int_range(op, key, value), _float_range(op, key, value)) if c is not None]
    if not clauses:
        return dict(_MATCH_NONE)
    if len(clauses) == 1:
        return clauses[0]
    return {"bool": {"should": clauses, "minimum_should_match": 1}}


def _int_range(op: str, key: str, value: int | float) -> dict[str, Any] | None:
    """``range`` on ``f_int`` equivalent to ``x <op> value`` for every int64 ``x``; ``None`` when none matches."""
    name = _field("f_int", key)
    # For an integer x: x > v  <=> x > floor(v);  x >= v <=> x >= ceil(v);
    #                   x < v  <=> x < ceil(v);   x <= v <=> x <= floor(v).
    bound = math.floor(value) if op in ("greaterThan", "lessThanOrEquals") else math.ceil(value)
    lower = op in ("greaterThan", "greaterThanOrEquals")
    if lower:
        first_match = bound + 1 if op == "greaterThan" else bound
        if first_match > INT64_MAX:
            return None
        if first_match <= INT64_MIN:
            return {"exists": {"field": name}}
    else:
        last_match = bound - 1 if op == "lessThan" else bound
        if last_match < INT64_MIN:
            return None
        if last_match >= INT64_MAX:
            return {"exists": {"field": name}}
    return {"range": {name: {_RANGE_KEYS[op]: bound}}}


def _float_range(op: str, key: str, value: int | float) -> dict[str, Any] | None:
    """``range`` on ``f_num`` equivalent to ``x <op> value`` for every finite double ``x``."""
    name = _field("f_num", key)
    lower = op in ("greaterThan", "greaterThanOrEquals")
    if isinstance(value, float):
        return {"range": {name: {_RANGE_KEYS[op]: _as_double(value)}}}
    try:
        bound = float(value)
    except OverflowError:  # |value| > the largest double: every double is below (or above) it
        above_all = value > 0
        return None if lower == above_all else {"exists": {"field": name}}
    if bound == value:
        return {"range": {name: {_RANGE_KEYS[op]: _as_double(bound)}}}
    # value is an int between two doubles and bound is the nearer one, so no double lies strictly between.
    if bound > value:  # x > v <=> x >= bound; x >= v <=> x >= bound; x < v <=> x < bound; x <= v <=> x < bound
        key_op = "gte" if lower else "lt"
    else:  # x > v <=> x > bound; x >= v <=> x > bound; x < v <=> x <= bound; x <= v <=> x <= bound
        key_op = "gt" if lower else "lte"
    return {"range": {name: {key_op: bound}}}


# ---------------------------------------------------------------------------------------- documents


def index_body(*, dimension: int | None, analyzer: str = "english", embedding_model: str | None = None) -> dict[str, Any]:
    """The ``PUT /<index>`` body fastrag creates an index with (settings and mappings).

    Args:
        dimension: the vector width, or ``None`` to create the index without a vector field (it is added
            on the first write with embeddings).
        analyzer: the OpenSearch analyzer of ``content`` and ``title``.
        embedding_model: recorded in ``_meta.fastrag.embedding_model`` when given.
    """
    properties: dict[str, Any] = {
        "id": {"type": "keyword"},
        "content": {"type": "text", "analyzer": analyzer},
        "title": {"type": "text", "analyzer": analyzer},
        "metadata_json": {"type": "keyword", "index": False, "doc_values": False},
    }
    properties.update({ns: {"type": "object"} for ns in _NS_TYPES})
    if dimension is not None:
        properties["embedding"] = vector_mapping(dimension)
    meta: dict[str, Any] = {"schema": SCHEMA_VERSION}
    if embedding_model is not None:
        meta["embedding_model"] = embedding_model
    return {
        "settings": {"index": {"knn": True}},
        "mappings": {
            "_meta": {"fastrag": meta},
            "dynamic_templates": [
                {ns: {"path_match": f"{ns}.*", "mapping": {"type": kind}}} for ns, kind in _NS_TYPES.items()
            ],
            "properties": properties,
        },
    }


def vector_mapping(dimension: int) -> dict[str, Any]:
    """The ``knn_vector`` mapping of the ``embedding`` field: HNSW, Lucene engine, cosine similarity."""
    return {
        "type": "knn_vector",
        "dimension": dimension,
        "method": {"name": "hnsw", "space_type": "cosinesimil", "engine": "lucene"},
    }


def document_source(document: Document, embedding: Sequence[float] | None = None) -> dict[str, Any]:
    """The ``_source`` fastrag writes for ``document`` (see the module docstring for the fields).

    Raises:
        InvalidParameterError: the metadata is not JSON-serialisable (or holds NaN or infinity), or a string
            value is longer than :data:`MAX_KEYWORD_BYTES` UTF-8 bytes.
    """
    metadata, text = metadata_json(document)
    source: dict[str, Any] = {"id": document.id, "content": document.content}
    title = metadata.get("title")
    if isinstance(title, str) and title:
        source["title"] = title
    source["metadata_json"] = text
    shadows: dict[str, dict[str, Any]] = {}
    for key, value in metadata.items():
        if key == "":
            continue  # no filter can name an empty key
        name = encode_key(key)
        if isinstance(value, list):
            for item in value:
                kind = _shadow_kind(document.id, key, item)
                if kind is not None and kind != "date":
                    shadows.setdefault(_LIST_NS[kind], {}).setdefault(name, []).append(_shadow_value(kind, item))
            continue
        kind = _shadow_kind(document.id, key, value)
        if kind is None:
            continue
        shadows.setdefault(_SCALAR_NS[kind], {})[name] = _shadow_value(kind, value)
        if kind == "str" and (moment := parse_date(value)) is not None:
            shadows.setdefault("f_date", {})[name] = epoch_micros(moment)
    for ns in _NS_TYPES:
        if ns in shadows:
            source[ns] = shadows[ns]
    if embedding is not None:
        source["embedding"] = list(embedding)
    return source


def _shadow_kind(doc_id: str, key: str, value: Any) -> str | None:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        if INT64_MIN <= value <= INT64_MAX:
            return "int"
        return "num" if _finite_float(value) else None  # beyond int64: filtered at double precision
    if isinstance(value, float):
        return "num"
    if isinstance(value, str):
        if len(value.encode("utf-8", "surrogatepass")) > MAX_KEYWORD_BYTES:
            raise InvalidParameterError(
                f"document {doc_id!r}: metadata {key!r} holds a string over {MAX_KEYWORD_BYTES} UTF-8 bytes, "
                "which OpenSearch cannot index as a keyword; keep long text in content"
            )
        return "str"
    return None  # dicts, nested lists, None: never equal to a scalar, never in a range


def _finite_float(value: int) -> bool:
    try:
        float(value)
    except OverflowError:
        return False
    return True


def _shadow_value(kind: str, value: Any) -> Any:
    if kind == "num":
        return _as_double(float(value))  # ints beyond int64 are filtered at double precision (documented)
    return value


def _opensearch_id(doc_id: str) -> str:
    """The ``_id`` of a document: its id, or ``~h:`` + SHA-256 when that is too long or could collide."""
    if len(doc_id.encode("utf-8", "surrogatepass")) > MAX_ID_BYTES or doc_id.startswith(_HASHED_ID_PREFIX):
        return _HASHED_ID_PREFIX + hashlib.sha256(doc_id.encode("utf-8", "surrogatepass")).hexdigest()
    return doc_id


# -------------------------------------------------------------------------------------------- store


def _import_sdk() -> Any:
    try:
        import opensearchpy
        from opensearchpy import AsyncOpenSearch  # noqa: F401  (needs aiohttp, the [async] extra)
    except ImportError as exc:
        raise ConfigurationError(
            f"OpenSearchVectorStore needs opensearch-py with its async client (aiohttp): {INSTALL_HINT}"
        ) from exc
    return opensearchpy


_BAD_INDEX_CHARS = frozenset('\\/*?"<>| ,#:')


def _check_index_name(index: Any) -> str:
    if not isinstance(index, str) or not index:
        raise ConfigurationError(f"index must be a non-empty string, got {index!r}")
    bad = sorted(set(index) & _BAD_INDEX_CHARS)
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


def _strip_credentials(url: str) -> str:
    """``url`` without ``user:password@`` (for messages and store names)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url.rstrip("/")
    return parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]).geturl().rstrip("/")


Refresh = bool | Literal["wait_for"]


class OpenSearchVectorStore:
    """Documents, vectors and a BM25 index in one OpenSearch index (k-NN plugin for vectors).

    Implements :class:`~fastrag.protocols.VectorStore`, :class:`~fastrag.protocols.LexicalStore` and
    :class:`~fastrag.protocols.SupportsGet`.

    Args:
        url: the cluster, ``http(s)://host:port`` (default ``http://localhost:9200``). Ignored when ``client``
            is given, except to name the store in messages.
        index: the index name (OpenSearch rules: lowercase, no ``\\ / * ? " < > | , # :`` or spaces).
        dimension: the vector width. When given, the index is created (if missing and ``create``) as soon as
            the store is opened; an existing index with another width raises. When ``None``, it is read from
            the index, or fixed by the first write with embeddings.
        embedding_model: the name of the embedder whose vectors the index holds; recorded in the mapping's
            ``_meta`` on first use, and opening the index with a different name raises, so vectors of two
            models are never mixed. Read back into :attr:`embedding_model` when the store opens.
        client: an ``opensearchpy.AsyncOpenSearch`` to use instead of creating one. It is never closed by
            the store; a client the store creates is closed by :meth:`aclose`.
        timeout: seconds each HTTP request may take.
        http_auth: ``(user, password)`` for HTTP basic auth.
        verify_certs: verify the server's TLS certificate (https only).
        create: create the index (with its mappings) when it does not exist. With ``False``, a missing
            index raises :class:`~fastrag.errors.BackendUnavailableError`.
        exact: ``False`` (default): approximate k-NN (``knn`` query, HNSW, filter inside the query).
            ``True``: exact k-NN (``script_score`` with the ``knn_score`` script over the filtered
            documents).
        refresh: the ``refresh`` of every write. ``True`` (default) makes a write visible to the next read;
            ``"wait_for"`` waits for the next scheduled refresh; ``False`` returns at once (reads may not see
            the write for up to ``index.refresh_interval``).
        analyzer: the OpenSearch analyzer of ``content`` and ``title`` when the index is created
            (default ``"english"``: stemming and stopwords). An existing index with another one raises.

    Raises:
        ConfigurationError: the SDK is missing (the message has the ``pip install`` command), or an argument
            is invalid.

    Example::

        async with OpenSearchVectorStore(url="http://localhost:9200", index="docs", dimension=256) as store:
            await store.upsert(docs, embeddings=vectors)
            hits = await store.search_vector(query_vector, k=10, filter={"equals": {"key": "lang", "value": "en"}})
    """

    def __init__(
        self,
        *,
        url: str | None = None,
        index: str = "fastrag",
        dimension: int | None = None,
        embedding_model: str | None = None,
        client: Any | None = None,
        timeout: float = 10.0,
        http_auth: tuple[str, str] | None = None,
        verify_certs: bool = True,
        create: bool = True,
        exact: bool = False,
        refresh: Refresh = True,
        analyzer: str = "english",
    ) -> None:
        if dimension is not None and (isinstance(dimension, bool) or not isinstance(dimension, int) or dimension <= 0):
            raise InvalidParameterError(f"dimension must be a positive int, got {dimension!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise InvalidParameterError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if refresh not in (True, False, "wait_for"):
            raise InvalidParameterError(f"refresh must be True, False or 'wait_for', got {refresh!r}")
        if embedding_model is not None and (not isinstance(embedding_model, str) or not embedding_model):
            raise InvalidParameterError(f"embedding_model must be a non-empty string, got {embedding_model!r}")
        if not isinstance(analyzer, str) or not analyzer:
            raise InvalidParameterError(f"analyzer must be an OpenSearch analyzer name, got {analyzer!r}")
        self.index = _check_index_name(index)
        self.dimension: int | None = dimension
        self.embedding_model: str | None = embedding_model
        self.exact = bool(exact)
        self.create = bool(create)
        self.refresh: Refresh = refresh
        self.analyzer = analyzer
        self._sdk = _import_sdk()
        if client is not None:
            self.url = _strip_credentials(url) if url else _describe_client(client)
            self._client = client
            self._owns_client = False
        else:
            raw = url or "http://localhost:9200"
            parts = urlsplit(raw)
            try:
                parts.port  # noqa: B018  (raises on a malformed port)
            except ValueError as exc:
                raise ConfigurationError(f"{_strip_credentials(raw)}: invalid port") from exc
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ConfigurationError(
                    f"url must be http(s)://host:port, got {_strip_credentials(raw)!r} "
                    "(use OpenSearchVectorStore.from_url for opensearch:// URLs)"
                )
            self.url = _strip_credentials(raw)
            kwargs: dict[str, Any] = {"timeout": timeout, "max_retries": 1, "retry_on_timeout": False}
            if parts.scheme == "https":
                kwargs.update(use_ssl=True, verify_certs=verify_certs, ssl_show_warn=False)
            if http_auth is not None:
                kwargs["http_auth"] = tuple(http_auth)
            try:
                self._client = self._sdk.AsyncOpenSearch(hosts=[raw], **kwargs)
            except self._sdk.exceptions.ImproperlyConfigured as exc:
                raise ConfigurationError(f"{self.url}: {exc}") from exc
            self._owns_client = True
        self.name = f"{self.url}/{self.index}"
        self._closed = False
        self._ready = False
        self._has_vector_field = False
        self._ready_lock = anyio.Lock()

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> OpenSearchVectorStore:
        """Open a store from ``opensearch://[user:password@]host[:port]/index[?options]``.

        ``opensearch://`` speaks http, ``opensearchs://`` https; the port defaults to 9200. Options in the query
        string: ``verify_certs=false``, ``timeout=<seconds>``, ``exact=true``. Keyword arguments override
        anything read from the URL.

        Raises:
            ConfigurationError: the URL is not of this form.
        """
        if not isinstance(url, str):
            raise ConfigurationError(f"store URL must be a string, got {url!r}")
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("opensearch", "opensearchs"):
            raise ConfigurationError(
                f"{_strip_credentials(url)}: expected opensearch://host:port/index or opensearchs://host:port/index"
            )
        try:
            port = parts.port or 9200
        except ValueError as exc:
            raise ConfigurationError(f"{_strip_credentials(url)}: invalid port") from exc
        host = parts.hostname
        if not host:
            raise ConfigurationError(f"{_strip_credentials(url)}: no host")
        index = unquote(parts.path.lstrip("/"))
        if not index or "/" in index:
            raise ConfigurationError(f"{_strip_credentials(url)}: write opensearch://host:port/index (one index name)")
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
                    raise ConfigurationError(f"{_strip_credentials(url)}: {name} must be true or false, got {raw!r}")
                options[name] = raw.lower() in ("true", "1")
            elif name == "timeout":
                try:
                    options["timeout"] = float(raw)
                except ValueError as exc:
                    raise ConfigurationError(f"{_strip_credentials(url)}: timeout must be seconds, got {raw!r}") from exc
            else:
                raise ConfigurationError(
                    f"{_strip_credentials(url)}: unknown option {name!r}; known: exact, timeout, verify_certs"
                )
        options.update(kwargs)
        return cls(**options)

    def __repr__(self) -> str:
        return f"OpenSearchVectorStore({self.name!r})"

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> OpenSearchVectorStore:
        try:
            await self._ensure_ready(for_write=False)
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client if the store created it (an injected client stays open). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._owns_client:
            await self._client.close()

    async def _call(self, what: str, fn: Any, /, **kwargs: Any) -> Any:
        """Run one client call, turning SDK exceptions into fastrag's (chained)."""
        if self._closed:
            raise BackendUnavailableError("store is closed", store=self.name)
        exceptions = self._sdk.exceptions
        try:
            return await fn(**kwargs)
        except exceptions.ConnectionError as exc:  # includes ConnectionTimeout and SSLError
            raise BackendTemporarilyUnavailableError(
                f"cannot reach OpenSearch ({what}): {_describe(exc)}", store=self.name
            ) from exc
        except exceptions.TransportError as exc:
            status = exc.status_code if isinstance(exc.status_code, int) else None
            message = f"{what} failed: HTTP {status} {_describe(exc)}"
            if status in (502, 503, 504):
                raise BackendTemporarilyUnavailableError(message, store=self.name) from exc
            if status == 429:
                raise RateLimitError(message, store=self.name) from exc
            if status in (401, 403):
                raise AuthenticationError(message, store=self.name) from exc
            if status == 404 and _error_type(exc) == "index_not_found_exception":
                raise BackendUnavailableError(f"index {self.index!r} does not exist ({what})", store=self.name) from exc
            raise BackendError(message, store=self.name) from exc
        except exceptions.OpenSearchException as exc:  # SerializationError, ImproperlyConfigured, ...
            raise BackendError(f"{what} failed: {exc}", store=self.name) from exc

    async def _ensure_ready(self, *, for_write: bool, dimension: int | None = None) -> bool:
        """Check (once) that the index exists and is fastrag's; create it when allowed. Return whether it exists."""
        if self._ready:
            return True
        async with self._ready_lock:
            if self._ready:
                return True
            exists = await self._call("index exists", self._client.indices.exists, index=self.index)
            if not exists:
                if not self.create:
                    raise BackendUnavailableError(
                        f"index {self.index!r} does not exist (create=False)", store=self.name
                    )
                if not for_write and self.dimension is None:
                    return False  # created by the first write; until then the store is empty
                await self._create_index(self.dimension or dimension)
            await self._load_mapping()
            self._ready = True
            return True

    async def _create_index(self, dimension: int | None) -> None:
        body = index_body(dimension=dimension, analyzer=self.analyzer, embedding_model=self.embedding_model)
        try:
            await self._call("create index", self._client.indices.create, index=self.index, body=body)
        except BackendError as exc:
            cause = exc.__cause__
            if not (
                isinstance(cause, self._sdk.exceptions.TransportError)
                and _error_type(cause) == "resource_already_exists_exception"
            ):
                raise  # else: created concurrently by someone else; its mapping is checked next

    async def _load_mapping(self) -> None:
        response = await self._call("get mapping", self._client.indices.get_mapping, index=self.index)
        mapping = next(iter(response.values()), {}).get("mappings", {}) if isinstance(response, Mapping) else {}
        meta = mapping.get("_meta", {}).get("fastrag", {})
        schema = meta.get("schema")
        if schema != SCHEMA_VERSION:
            raise ConfigurationError(
                f"{self.name}: the index exists but was not created by fastrag (schema {schema!r}, "
                f"expected {SCHEMA_VERSION}); use another index name"
            )
        stored_model = meta.get("embedding_model")
        if stored_model is not None and self.embedding_model is not None and stored_model != self.embedding_model:
            raise ConfigurationError(
                f"{self.name}: the index was built with embedding_model={stored_model!r}, not "
                f"{self.embedding_model!r}; use a new index or the same model"
            )
        if stored_model is None and self.embedding_model is not None:
            await self._call(
                "record embedding model",
                self._client.indices.put_mapping,
                index=self.index,
                body={"_meta": {"fastrag": {**meta, "embedding_model": self.embedding_model}}},
            )
        self.embedding_model = stored_model or self.embedding_model
        properties = mapping.get("properties", {})
        stored_analyzer = properties.get("content", {}).get("analyzer", "standard")
        if stored_analyzer != self.analyzer:
            raise ConfigurationError(
                f"{self.name}: the index was built with analyzer {stored_analyzer!r}, not {self.analyzer!r}"
            )
        vector = properties.get("embedding")
        if vector is not None:
            stored = int(vector["dimension"])
            space = vector.get("space_type") or vector.get("method", {}).get("space_type")
            if space != "cosinesimil":
                raise ConfigurationError(f"{self.name}: the embedding field uses space {space!r}, not cosinesimil")
            if self.dimension is not None and self.dimension != stored:
                raise ConfigurationError(
                    f"{self.name}: the index holds vectors of dimension {stored}, not {self.dimension}; "
                    "use a new index or the same dimension"
                )
            self.dimension = stored
            self._has_vector_field = True
        elif self.dimension is not None:
            await self._add_vector_field(self.dimension)

    async def _add_vector_field(self, dimension: int) -> None:
        await self._call(
            "add vector field",
            self._client.indices.put_mapping,
            index=self.index,
            body={"properties": {"embedding": vector_mapping(dimension)}},
        )
        self.dimension = dimension
        self._has_vector_field = True

    # ------------------------------------------------------------------ writes

    async def upsert(self, documents: Sequence[Document], *, embeddings: np.ndarray | None = None) -> None:
        """Insert or replace ``documents`` by id (``_bulk`` ``index`` actions).

        Args:
            documents: the documents; ``content`` and ``metadata["title"]`` are indexed for BM25, metadata is
                stored verbatim and in typed shadow fields for filtering. Metadata must be JSON-serialisable.
            embeddings: ``(len(documents), dim)`` float32 (other float dtypes are converted), finite, no zero
                rows (cosine is undefined for them). ``None`` stores the documents without vectors: BM25
                finds them, k-NN does not.

        Raises:
            DimensionMismatchError: the width differs from the store's dimension, or the row count from
                ``len(documents)``.
            InvalidParameterError: a vector holds NaN or infinity or is all zeros, an id repeats, metadata
                is not JSON, or a string metadata value is over 32 766 UTF-8 bytes. Nothing is sent.
            BackendUnavailableError: OpenSearch cannot be reached.
            BackendError: OpenSearch rejected the request, or some documents (listed; the others of the batch
                are written: OpenSearch has no multi-document transactions).
        """
        docs = list(documents)
        if not docs:
            return
        check_unique_ids(docs)
        check_document_text(docs)
        rows = self._vector_rows(embeddings, len(docs))
        sources = [document_source(d, row) for d, row in zip(docs, rows, strict=True)]
        width = None if rows[0] is None else len(rows[0])
        await self._ensure_ready(for_write=True, dimension=width)
        if width is not None:
            if self.dimension is not None and width != self.dimension:  # the dimension was just read
                raise DimensionMismatchError(
                    f"{self.name}: embeddings have dimension {width}, the store holds {self.dimension}"
                )
            if not self._has_vector_field:
                await self._add_vector_field(width)
        for start in range(0, len(docs), _BULK_CHUNK):
            chunk = list(zip(docs[start : start + _BULK_CHUNK], sources[start : start + _BULK_CHUNK], strict=True))
            body: list[dict[str, Any]] = []
            for doc, source in chunk:
                body.append({"index": {"_id": _opensearch_id(doc.id)}})
                body.append(source)
            response = await self._call(
                "bulk upsert", self._client.bulk, index=self.index, body=body, refresh=_refresh_param(self.refresh)
            )
            if self._mapping(response, "bulk upsert").get("errors"):
                failed = [
                    (doc.id, item.get("index", {}).get("error"))
                    for (doc, _), item in zip(chunk, response.get("items", []), strict=False)
                    if item.get("index", {}).get("error")
                ]
                sample = "; ".join(f"{i!r}: {_error_text(e)}" for i, e in failed[:3])
                raise BackendError(
                    f"OpenSearch rejected {len(failed)} of {len(chunk)} documents (the others were written): {sample}",
                    store=self.name,
                )

    def _vector_rows(self, embeddings: np.ndarray | None, n: int) -> list[list[float] | None]:
        if embeddings is None:
            return [None] * n
        matrix = check_embeddings(embeddings, n, dimension=self.dimension, store=self.name)
        if not np.any(matrix, axis=1).all():
            raise InvalidParameterError("an embedding is all zeros; cosine similarity is undefined for it")
        return matrix.tolist()

    async def delete(
        self, *, ids: Sequence[str] | None = None, filter: FilterLike | OpenSearchQuery | None = None  # noqa: A002
    ) -> int:
        """Delete documents (``_delete_by_query``); return how many were removed.

        Args:
            ids: delete these ids (unknown ids are ignored).
            filter: delete documents matching this filter (fastrag filter or :class:`OpenSearchQuery`). With
                ``ids`` too, only documents that have one of the ids *and* match the filter are deleted.

        Raises:
            InvalidParameterError: neither ``ids`` nor ``filter`` was given (use :meth:`clear`).
            FilterError: the filter is malformed.
            BackendUnavailableError / BackendError: OpenSearch failed.
        """
        if ids is None and filter is None:
            raise InvalidParameterError("delete needs ids or a filter; use clear() to delete everything")
        native = _native(filter)
        id_list = distinct_ids(ids)
        if id_list == [] or not await self._ensure_ready(for_write=False):
            return 0
        if id_list is None:
            return await self._delete_by_query(_query(None, native))
        deleted = 0
        for start in range(0, len(id_list), _IDS_CHUNK):
            deleted += await self._delete_by_query(_query(id_list[start : start + _IDS_CHUNK], native))
        return deleted

    async def clear(self) -> int:
        """Delete every document (the index and its mappings stay); return how many were removed."""
        if not await self._ensure_ready(for_write=False):
            return 0
        return await self._delete_by_query(dict(_MATCH_ALL))

    async def _delete_by_query(self, query: dict[str, Any]) -> int:
        response = await self._call(
            "delete by query",
            self._client.delete_by_query,
            index=self.index,
            body={"query": query},
            refresh=self.refresh is not False,
        )
        if self._mapping(response, "delete by query").get("failures"):
            raise BackendError(
                f"delete by query failed for some documents: {_error_text(response['failures'][0])}", store=self.name
            )
        with self._reading("delete by query"):
            return int(response.get("deleted", 0))

    # ------------------------------------------------------------------ reads

    async def count(self, *, filter: FilterLike | OpenSearchQuery | None = None) -> int:  # noqa: A002
        """How many documents the index holds, or how many match ``filter`` (``_count``).

        Raises:
            FilterError: the filter is malformed.
            BackendUnavailableError / BackendError: OpenSearch failed.
        """
        native = _native(filter)
        if not await self._ensure_ready(for_write=False):
            return 0
        body = None if native is None else {"query": native}
        response = await self._call("count", self._client.count, index=self.index, body=body)
        with self._reading("count"):
            count = response["count"]
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise TypeError(f"count must be an int >= 0, got {count!r}")
            return count

    async def get(
        self,
        *,
        ids: Sequence[str] | None = None,
        filter: FilterLike | OpenSearchQuery | None = None,  # noqa: A002
        limit: int | None = None,
    ) -> list[Document]:
        """Documents with these ``ids`` and/or matching ``filter`` (all when neither), in id order.

        Pages through the index sorted by ``id`` with ``search_after``, so any number of documents comes back.

        Raises:
            InvalidParameterError: ``limit`` is not a positive int.
            FilterError: the filter is malformed.
            BackendUnavailableError / BackendError: OpenSearch failed.
        """
        if limit is not None:
            check_k(limit, "limit")
        native = _native(filter)
        id_list = distinct_ids(ids)
        if id_list == [] or not await self._ensure_ready(for_write=False):
            return []
        chunks = [None] if id_list is None else [id_list[i : i + _IDS_CHUNK] for i in range(0, len(id_list), _IDS_CHUNK)]
        found: list[Document] = []
        for chunk in chunks:
            found.extend(await self._scan(_query(chunk, native), limit))
        found.sort(key=lambda d: d.id)
        return found if limit is None else found[:limit]

    async def _scan(self, query: dict[str, Any], limit: int | None) -> list[Document]:
        out: list[Document] = []
        after: list[Any] | None = None
        while limit is None or len(out) < limit:
            size = _PAGE if limit is None else min(_PAGE, limit - len(out))
            body: dict[str, Any] = {
                "size": size, "query": query, "sort": [{"id": {"order": "asc"}}], "_source": _SOURCE_EXCLUDES,
            }
            if after is not None:
                body["search_after"] = after
            response = await self._call("get", self._client.search, index=self.index, body=body)
            hits = self._hits(response, "get")
            out.extend(self._document(hit) for hit in hits)
            if len(hits) < size:
                break
            with self._reading("get"):
                after = hits[-1]["sort"]
        return out

    async def search_text(
        self, query: str, *, k: int, filter: FilterLike | OpenSearchQuery | None = None  # noqa: A002
    ) -> list[Document]:
        """BM25 search: the ``k`` best documents sharing at least one analysed term with ``query``.

        Sends ``bool`` { ``should``: [``match`` content, ``match`` title], ``minimum_should_match``: 1,
        ``filter``: [the filter] }, sorted by score then id.

        Args:
            query: free text, analysed by the index's analyzer (``english``: stemming, stopwords). It is a JSON
                string value of a ``match`` query, so no query syntax in it is interpreted.
            k: how many documents at most (an int > 0, at most ``index.max_result_window``, 10 000 by default).
            filter: only documents matching it are ranked (filter context, applied before the top-k cut).

        Returns:
            Copies best first, ``score`` = OpenSearch BM25 (unbounded, > 0, higher is better; sum over the
            content and title fields), zero-based ``rank``; ties by id. Empty when no document shares a term.

        Raises:
            InvalidParameterError: ``k`` is not a positive int or ``query`` is not a string.
            FilterError: the filter is malformed.
            BackendUnavailableError / BackendError: OpenSearch failed.
        """
        check_k(k)
        if not isinstance(query, str):
            raise InvalidParameterError(f"query must be a string, got {type(query).__name__}")
        native = _native(filter)
        if not query.strip() or not await self._ensure_ready(for_write=False):
            return []
        body = text_search_body(query, k=k, filter_query=native)
        response = await self._call("search_text", self._client.search, index=self.index, body=body)
        hits = [(self._score(hit), hit) for hit in self._hits(response, "search_text")]
        return self._ranked(hits, k)

    async def search_vector(
        self, embedding: np.ndarray, *, k: int, filter: FilterLike | OpenSearchQuery | None = None  # noqa: A002
    ) -> list[Document]:
        """k-NN by cosine similarity among documents matching ``filter`` (applied before ranking).

        Approximate by default (``knn`` query with the filter inside it, the k-NN plugin's efficient
        filtering); exact with ``exact=True`` (``script_score`` + ``knn_score``). See :func:`knn_search_body`.

        Args:
            embedding: ``(dim,)`` query vector, any scale, not all zeros.
            k: how many documents at most (an int > 0, at most 10 000).
            filter: only documents matching it are ranked.

        Returns:
            Copies best first, ``score`` = cosine similarity in [-1, 1] (higher is better; converted from the
            OpenSearch score, float32 precision), zero-based ``rank``; ties by id. Documents stored without a
            vector are never returned.

        Raises:
            DimensionMismatchError: the vector's width differs from the store's.
            InvalidParameterError: ``k`` is not a positive int, or the vector holds NaN or infinity or is all
                zeros.
            FilterError: the filter is malformed.
            BackendUnavailableError / BackendError: OpenSearch failed.
        """
        check_k(k)
        vector = check_query_vector(embedding, dimension=None, store=self.name)  # the width is checked below
        if not vector.any():
            raise InvalidParameterError("query embedding is all zeros; cosine similarity is undefined for it")
        check_dimension(vector.shape[0], self.dimension, store=self.name, what="query has")
        native = _native(filter)
        if not await self._ensure_ready(for_write=False) or not self._has_vector_field:
            return []
        if vector.shape[0] != self.dimension:  # the dimension was just read from the index
            raise DimensionMismatchError(
                f"{self.name}: query has dimension {vector.shape[0]}, the store holds {self.dimension}"
            )
        body = knn_search_body(vector.tolist(), k=k, filter_query=native, exact=self.exact)
        response = await self._call("search_vector", self._client.search, index=self.index, body=body)
        hits = []
        for hit in self._hits(response, "search_vector"):
            raw = self._score(hit)
            cosine = raw - 1.0 if self.exact else 2.0 * raw - 1.0
            hits.append((min(1.0, max(-1.0, cosine)), hit))
        return self._ranked(hits, k)

    # ------------------------------------------------------------------ helpers

    @contextmanager
    def _reading(self, what: str) -> Iterator[None]:
        """Turn an answer of the wrong shape (a proxy's ``{}`` with status 200) into a typed error naming the store."""
        try:
            yield
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise BackendError(f"OpenSearch answered {what} with a malformed response: {exc!r}", store=self.name) from exc

    def _mapping(self, response: Any, what: str) -> Mapping[str, Any]:
        if not isinstance(response, Mapping):
            raise BackendError(f"OpenSearch answered {what} with a malformed response: {response!r:.200}", store=self.name)
        return response

    def _hits(self, response: Any, what: str) -> list[Mapping[str, Any]]:
        """``response["hits"]["hits"]``, checked: a list of objects."""
        with self._reading(what):
            hits = self._mapping(response, what)["hits"]["hits"]
            if not isinstance(hits, list) or not all(isinstance(hit, Mapping) for hit in hits):
                raise TypeError(f"hits.hits must be a list of objects, got {hits!r:.200}")
            return hits

    def _score(self, hit: Mapping[str, Any]) -> float:
        score = hit.get("_score")
        if score is None and hit.get("sort"):
            score = hit["sort"][0]
        if score is None:
            raise BackendError(f"OpenSearch returned a hit without a score: {hit.get('_id')!r}", store=self.name)
        with self._reading("a search"):
            return float(score)

    def _ranked(self, hits: list[tuple[float, Mapping[str, Any]]], k: int) -> list[Document]:
        return best_first([(score, self._document(hit)) for score, hit in hits], k)

    def _document(self, hit: Mapping[str, Any]) -> Document:
        source = hit.get("_source") or {}
        try:
            return Document(id=source["id"], content=source["content"], metadata=json.loads(source["metadata_json"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise BackendError(
                f"document {hit.get('_id')!r} was not written by fastrag (missing or bad {exc})", store=self.name
            ) from exc


# ------------------------------------------------------------------------------------- request bodies


def text_search_body(query: str, *, k: int, filter_query: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``_search`` body of :meth:`OpenSearchVectorStore.search_text`."""
    boolean: dict[str, Any] = {
        "should": [{"match": {"content": query}}, {"match": {"title": query}}],
        "minimum_should_match": 1,
    }
    if filter_query is not None:
        boolean["filter"] = [filter_query]
    return {
        "size": k,
        "query": {"bool": boolean},
        "sort": [{"_score": {"order": "desc"}}, {"id": {"order": "asc"}}],
        "track_scores": True,
        "_source": _SOURCE_EXCLUDES,
    }


def knn_search_body(
    vector: list[float], *, k: int, filter_query: Mapping[str, Any] | None = None, exact: bool = False
) -> dict[str, Any]:
    """The ``_search`` body of :meth:`OpenSearchVectorStore.search_vector`.

    ``exact=False``: ``{"knn": {"embedding": {"vector", "k", "filter"}}}``, the filter inside the ``knn``
    query (efficient filtering: OpenSearch 2.4+ with the Lucene engine). Score ``(1 + cos) / 2``.

    ``exact=True``: ``script_score`` with ``{"lang": "knn", "source": "knn_score"}`` and space
    ``cosinesimil`` over ``bool.filter`` [``exists`` embedding, the filter]. Score ``1 + cos``.
    """
    if not exact:
        knn: dict[str, Any] = {"vector": vector, "k": k}
        if filter_query is not None:
            knn["filter"] = filter_query
        return {"size": k, "query": {"knn": {"embedding": knn}}, "_source": _SOURCE_EXCLUDES}
    candidates: list[Any] = [{"exists": {"field": "embedding"}}]
    if filter_query is not None:
        candidates.append(filter_query)
    return {
        "size": k,
        "query": {
            "script_score": {
                "query": {"bool": {"filter": candidates}},
                "script": {
                    "lang": "knn",
                    "source": "knn_score",
                    "params": {"field": "embedding", "query_value": vector, "space_type": "cosinesimil"},
                },
            }
        },
        "sort": [{"_score": {"order": "desc"}}, {"id": {"order": "asc"}}],
        "track_scores": True,
        "_source": _SOURCE_EXCLUDES,
    }


def _native(filter: FilterLike | OpenSearchQuery | None) -> dict[str, Any] | None:  # noqa: A002
    """The Query DSL of a filter argument: native passes through, fastrag filters are parsed and translated."""
    if filter is None:
        return None
    if isinstance(filter, OpenSearchQuery):
        return dict(filter.query)
    node = parse_filter(filter)
    return None if node is None else _translate(node)


def _query(ids: list[str] | None, native: dict[str, Any] | None) -> dict[str, Any]:
    if ids is None and native is not None:
        return native
    clauses: list[dict[str, Any]] = []
    if ids is not None:
        clauses.append({"terms": {"id": ids}})
    if native is not None:
        clauses.append(native)
    return {"bool": {"filter": clauses}} if clauses else dict(_MATCH_ALL)


def _refresh_param(refresh: Refresh) -> str:
    return "wait_for" if refresh == "wait_for" else ("true" if refresh else "false")


def _error_type(exc: Any) -> str | None:
    info = getattr(exc, "info", None)
    if isinstance(info, Mapping):
        error = info.get("error")
        if isinstance(error, Mapping):
            return error.get("type")
    error = getattr(exc, "error", None)
    return error if isinstance(error, str) else None


def _error_text(error: Any) -> str:
    if isinstance(error, Mapping):
        cause = error.get("cause", error)
        if isinstance(cause, Mapping):
            return f"{cause.get('type')}: {cause.get('reason')}"
    return str(error)


def _describe(exc: Any) -> str:
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


def _describe_client(client: Any) -> str:
    try:
        host = client.transport.hosts[0]
        scheme = "https" if host.get("use_ssl") or host.get("scheme") == "https" else "http"
        return f"{scheme}://{host['host']}:{host.get('port', 9200)}"
    except (AttributeError, IndexError, KeyError, TypeError):
        return "opensearch"
