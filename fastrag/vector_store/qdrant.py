"""Qdrant adapter: dense k-NN, BM25 over a scored text index, the fastrag filter language, server-side hybrid.

``QdrantVectorStore`` implements :class:`~fastrag.protocols.VectorStore` and :class:`~fastrag.protocols.SupportsGet`,
and with ``enable_bm25=True`` also :class:`~fastrag.protocols.LexicalStore`, over a Qdrant server
(``url=``, through ``AsyncQdrantClient``) or qdrant-client's local mode (``location=":memory:"`` or
``path=``). ``QdrantHybridRetriever`` runs the dense and BM25 legs and their fusion (RRF or DBSF) inside
Qdrant, in one Query API request, with the filter on every leg. Install with ``pip install "fastrag-retrieval[qdrant]"``;
the SDK is imported only when a store is built or a filter translated. The docs page is
``docs/backends/qdrant.md``.

Design:

- **Points.** Qdrant point ids must be unsigned ints or UUIDs, so a document's point id is
  ``uuid5(POINT_ID_NAMESPACE, document.id)`` and the id itself is kept in the payload. The payload is
  ``{"id", "content", "metadata", "_f", "_bm25"}``: ``metadata`` as given (so native Qdrant filters can use
  ``metadata.<key>``), ``_f`` the filter shadow fields below, ``_bm25`` the analysed BM25 terms.
  The dense vector is the named vector ``"dense"`` (cosine); a document written without an embedding has
  none and is found only by BM25.
- **Filters** never run against ``metadata`` itself: Qdrant's own rules differ from
  :func:`fastrag.filters.matches` (a condition on an array payload matches when *any* element matches, so a
  list would ``equals`` its elements; ``1.0`` and ``1`` are different match values; ranges only know
  numbers and RFC 3339 strings). At write time every metadata key gets a small object of *shadow fields*
  under ``_f.<encoded key>``, each holding only values of one kind:

  - ``s``: a string value, as is (equals, in, startsWith, stringContains);
  - ``n``: a number (not a bool) as a canonical decimal string, ``str(int(v))`` when integral, else
    ``repr(v)``, so equality is exact and ``1 == 1.0`` (equals, in);
  - ``b``: a bool (equals, in);
  - ``r``: a number (not a bool) as a float64 (numeric ranges);
  - ``t``: a date-like string (:func:`fastrag.filters.parse_date`) as float64 microseconds since
    1970-01-01T00:00:00Z (date ranges);
  - ``l``: a list's scalar elements as tagged strings ``"s:<str>"``, ``"n:<number>"``, ``"b:true"``
    (listContains; here Qdrant's any-element matching is exactly the semantics wanted).

  A key made of ASCII letters, digits and ``_`` is encoded as ``k_<key>``; any other key (dots, quotes,
  unicode) as ``x_<hex of its UTF-8 bytes>``, so no key is ever parsed as a Qdrant JSON path and no two
  keys collide. :func:`translate_filter` maps the AST onto these fields (see its docstring); the result
  is exactly :func:`fastrag.filters.matches`, including missing keys (a condition on an absent shadow
  field is false, so ``must_not`` of it is true).
- **BM25** is Qdrant's own (1.20+): a text index with ``scoring`` on ``_bm25`` and a ``TextQuery``, with
  k1 = 1.2 and b = 0.75 and the corpus statistics (document count, document frequency, average length)
  kept live by Qdrant. The terms are fastrag's :class:`~fastrag.analysis.Analyzer` output (stemmed,
  stopwords removed, CJK bigrams), joined by spaces; the index uses the plain ``word`` tokenizer, which
  leaves such terms unchanged, so the analysis is the same as the SQLite store's. Qdrant's IDF is
  Lucene's ``ln(1 + (N - n + 0.5) / (n + 0.5))``.
- **Blocking.** Local mode computes in Python in the calling thread, so the adapter drives it through
  the synchronous ``QdrantClient`` in a worker thread (serialised by a lock) instead of blocking the
  event loop; a server is used through ``AsyncQdrantClient``. An injected client may be either kind.
"""

from __future__ import annotations

import functools
import inspect
import math
import re
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qs, unquote, urlsplit

import anyio
import numpy as np

from fastrag.analysis import Analyzer
from fastrag.errors import (
    BackendError,
    BackendTemporarilyUnavailableError,
    BackendUnavailableError,
    ConfigurationError,
    DimensionMismatchError,
    FastragError,
    InvalidParameterError,
    RateLimitError,
    UnsupportedFilterError,
)
from fastrag.filters import (
    And,
    Comparison,
    Filter,
    FilterLike,
    Not,
    Or,
    combine_filters,
    parse_date,
    parse_filter,
)
from fastrag.models import BRANCHES, RANK, SCORE, Document
from fastrag.vector_store._metadata import epoch_micros, is_number
from fastrag.vector_store._validation import (
    check_document_text,
    check_embeddings,
    check_k,
    check_query_vector,
    check_unique_ids,
    distinct_ids,
)

if TYPE_CHECKING:
    from qdrant_client import models as qmodels

    from fastrag.protocols import Embedder

__all__ = [
    "DEFAULT_COLLECTION",
    "POINT_ID_NAMESPACE",
    "QdrantHybridRetriever",
    "QdrantVectorStore",
    "point_id",
    "shadow_fields",
    "translate_filter",
]

INSTALL_HINT = 'pip install "fastrag-retrieval[qdrant]"'
DEFAULT_COLLECTION = "fastrag"
"""The collection a store uses when none is named."""
POINT_ID_NAMESPACE = uuid.UUID("f67e5ed0-a646-5da1-a0fb-6e1f5a2ec09c")
"""``uuid5(NAMESPACE_URL, "fastrag:document")``: the namespace of :func:`point_id`."""

DENSE = "dense"
ID_FIELD = "id"
CONTENT_FIELD = "content"
METADATA_FIELD = "metadata"
SHADOW_FIELD = "_f"
TERMS_FIELD = "_bm25"
SCHEMA_VERSION = 1
BM25_K1 = 1.2
BM25_B = 0.75
_READ_FIELDS = [ID_FIELD, CONTENT_FIELD, METADATA_FIELD]
_PAGE = 256
_ABANDONABLE = frozenset({"query_points", "query_batch_points", "scroll", "count"})  # reads of local mode
_INT64 = 2**63
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_]+")
_RANGE_ARG = {"greaterThan": "gt", "greaterThanOrEquals": "gte", "lessThan": "lt", "lessThanOrEquals": "lte"}


def _sdk() -> Any:
    """``qdrant_client.models``, or :class:`ConfigurationError` with the install command."""
    try:
        from qdrant_client import models
    except ImportError as exc:
        raise ConfigurationError(f"the Qdrant store needs qdrant-client: {INSTALL_HINT}") from exc
    return models


# ------------------------------------------------------------------------------------ ids, payload


def point_id(document_id: str) -> str:
    """The Qdrant point id of a fastrag document id: ``str(uuid5(POINT_ID_NAMESPACE, document_id))``."""
    return str(uuid.uuid5(POINT_ID_NAMESPACE, document_id))


def _encode_key(key: str) -> str:
    if _PLAIN_KEY.fullmatch(key):
        return f"k_{key}"
    return "x_" + key.encode("utf-8", "surrogatepass").hex()


def _path(key: str, kind: str) -> str:
    return f"{SHADOW_FIELD}.{_encode_key(key)}.{kind}"


def _number_text(value: float) -> str:
    """Canonical decimal form: equal numbers (``2020``, ``2020.0``) give the same string, others differ."""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return str(int(value))


def _tag(value: Any) -> str | None:
    if isinstance(value, bool):
        return "b:true" if value else "b:false"
    if is_number(value):
        return "n:" + _number_text(value)
    if isinstance(value, str):
        return "s:" + value
    return None


def shadow_fields(metadata: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The ``_f`` payload object for ``metadata`` (see the module docstring): ``{encoded key: {kind: value}}``.

    Pure; ``metadata`` must already hold plain JSON values with finite floats.
    """
    out: dict[str, dict[str, Any]] = {}
    for key, value in metadata.items():
        entry: dict[str, Any] = {}
        if isinstance(value, bool):
            entry["b"] = value
        elif is_number(value):
            entry["n"] = _number_text(value)
            entry["r"] = float(value)
        elif isinstance(value, str):
            entry["s"] = value
            moment = parse_date(value)
            if moment is not None:
                entry["t"] = float(epoch_micros(moment))
        elif isinstance(value, list | tuple):
            tags = list(dict.fromkeys(t for t in map(_tag, value) if t is not None))
            if tags:
                entry["l"] = tags
        if entry:
            out[_encode_key(str(key))] = entry
    return out


def _plain(value: Any, path: str = "metadata") -> Any:
    """JSON-ready copy of a metadata value; rejects what Qdrant cannot store faithfully."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        if not -_INT64 <= value < _INT64:
            raise InvalidParameterError(f"{path}: {value} does not fit a Qdrant payload integer (signed 64-bit)")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidParameterError(f"{path}: non-finite float {value!r}")
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, f"{path}[{i}]") for i, v in enumerate(value)]
    raise InvalidParameterError(f"{path}: {type(value).__name__} is not a JSON value (str, number, bool, list, dict)")


# ----------------------------------------------------------------------------------------- filters


def translate_filter(node: FilterLike) -> qmodels.Filter:
    """Translate a fastrag filter into a Qdrant ``models.Filter`` over the shadow fields.

    Pure: no backend call. The result selects exactly the documents :func:`fastrag.filters.matches`
    selects, given points written by :class:`QdrantVectorStore` (``_f`` shadow fields)::

        equals k v           FieldCondition(_f.K.s | .n | .b, MatchValue(v))     by the kind of v; a number as
                                                                                 its canonical string
        notEquals k v        Filter(must_not=[<equals>])                         a missing key matches
        in k [vs]            MatchAny on .s and on .n, MatchValue on .b, OR-ed with should;
                             an empty list: HasIdCondition(has_id=[]) (matches nothing)
        notIn k [vs]         Filter(must_not=[<in>])
        greaterThan ... k v  FieldCondition(_f.K.r, Range(gt=float(v)))          a number
                             FieldCondition(_f.K.t, Range(gt=<µs since epoch>))  a date
        startsWith k p       FieldCondition(_f.K.s, MatchPrefix(p))              case-sensitive, literal
        stringContains k p   FieldCondition(_f.K.s, MatchSubstring(p))
            (an empty p):    Filter(must_not=[IsEmptyCondition(_f.K.s)])         any string value
        listContains k v     FieldCondition(_f.K.l, MatchValue(<tag of v>))      any element, by kind
        andAll / orAll       Filter(must=[...]) / Filter(should=[...])
        notAll [f]           Filter(must_not=[f]);  notAll [f1, f2, ...]: Filter(must_not=[Filter(must=[...])])

    ``K`` is the encoded key (``k_<key>`` or ``x_<hex>``). Values travel as typed model fields, never as
    text to be parsed, so quotes, backslashes, ``%``, ``_`` and ``*`` are literal.

    Args:
        node: a filter AST node, its JSON form (a mapping) or a JSON string.

    Returns:
        A ``qdrant_client.models.Filter`` (a single condition is wrapped in ``Filter(must=[...])``).

    Raises:
        FilterError: the filter is malformed.
        UnsupportedFilterError: a range bound is an integer that a float64 cannot hold exactly (Qdrant's
            ranges compare float64 values).
        ConfigurationError: qdrant-client is not installed.
    """
    m = _sdk()
    parsed = parse_filter(node)
    if parsed is None:
        raise InvalidParameterError("translate_filter needs a filter, got None")
    condition = _condition(m, parsed, "$")
    return condition if isinstance(condition, m.Filter) else m.Filter(must=[condition])


def _condition(m: Any, node: Filter, path: str) -> Any:
    if isinstance(node, And):
        return m.Filter(must=[_condition(m, c, f"{path}.andAll[{i}]") for i, c in enumerate(node.filters)])
    if isinstance(node, Or):
        return m.Filter(should=[_condition(m, c, f"{path}.orAll[{i}]") for i, c in enumerate(node.filters)])
    if isinstance(node, Not):
        inner = [_condition(m, c, f"{path}.notAll[{i}]") for i, c in enumerate(node.filters)]
        return m.Filter(must_not=inner if len(inner) == 1 else [m.Filter(must=inner)])
    return _comparison(m, node, f"{path}.{node.operator}")


def _never(m: Any) -> Any:
    return m.HasIdCondition(has_id=[])


def _equals(m: Any, key: str, value: Any) -> Any:
    if isinstance(value, bool):
        return m.FieldCondition(key=_path(key, "b"), match=m.MatchValue(value=value))
    if is_number(value):
        return m.FieldCondition(key=_path(key, "n"), match=m.MatchValue(value=_number_text(value)))
    return m.FieldCondition(key=_path(key, "s"), match=m.MatchValue(value=value))


def _one_of(m: Any, key: str, values: Sequence[Any]) -> Any:
    strings = list(dict.fromkeys(v for v in values if isinstance(v, str)))
    numbers = list(dict.fromkeys(_number_text(v) for v in values if is_number(v)))
    bools = list(dict.fromkeys(v for v in values if isinstance(v, bool)))
    conditions = []
    if strings:
        conditions.append(m.FieldCondition(key=_path(key, "s"), match=m.MatchAny(any=strings)))
    if numbers:
        conditions.append(m.FieldCondition(key=_path(key, "n"), match=m.MatchAny(any=numbers)))
    conditions.extend(m.FieldCondition(key=_path(key, "b"), match=m.MatchValue(value=b)) for b in bools)
    if not conditions:
        return _never(m)
    return conditions[0] if len(conditions) == 1 else m.Filter(should=conditions)


def _has_string(m: Any, key: str) -> Any:
    return m.Filter(must_not=[m.IsEmptyCondition(is_empty=m.PayloadField(key=_path(key, "s")))])


def _comparison(m: Any, node: Comparison, path: str) -> Any:
    op, key, value = node.operator, node.key, node.value
    if op == "equals":
        return _equals(m, key, value)
    if op == "notEquals":
        return m.Filter(must_not=[_equals(m, key, value)])
    if op == "in":
        return _one_of(m, key, value)
    if op == "notIn":
        return m.Filter(must_not=[_one_of(m, key, value)])
    if op in _RANGE_ARG:
        if is_number(value):
            try:
                bound = float(value)
            except OverflowError:
                bound = math.inf
            if isinstance(value, int) and bound != value:
                raise UnsupportedFilterError(
                    f"Qdrant ranges compare float64 values; the integer bound {value} has no exact float64 form",
                    path=f"{path}.value",
                )
            return m.FieldCondition(key=_path(key, "r"), range=m.Range(**{_RANGE_ARG[op]: bound}))
        moment = parse_date(value)
        if moment is None:  # unreachable: Comparison validates range values
            raise UnsupportedFilterError(f"not a number or a date: {value!r}", path=f"{path}.value")
        return m.FieldCondition(key=_path(key, "t"), range=m.Range(**{_RANGE_ARG[op]: float(epoch_micros(moment))}))
    if op == "startsWith":
        if value == "":
            return _has_string(m, key)
        return m.FieldCondition(key=_path(key, "s"), match=m.MatchPrefix(prefix=value))
    if op == "stringContains":
        if value == "":
            return _has_string(m, key)
        return m.FieldCondition(key=_path(key, "s"), match=m.MatchSubstring(substring=value))
    if op == "listContains":
        return m.FieldCondition(key=_path(key, "l"), match=m.MatchValue(value=_tag(value)))
    raise UnsupportedFilterError(f"unknown operator {op!r}", path=path)  # unreachable


def _native_filter(m: Any, filter: Any) -> Any:
    """A ``models.Filter`` passes through unchanged; anything else is a fastrag filter and is translated."""
    if filter is None:
        return None
    if isinstance(filter, m.Filter):
        return filter
    return translate_filter(filter)


def _and(m: Any, *filters: Any) -> Any:
    present = [f for f in filters if f is not None]
    if not present:
        return None
    return present[0] if len(present) == 1 else m.Filter(must=present)


# ---------------------------------------------------------------------------------- error mapping


def _is_unavailable(exc: BaseException) -> bool:
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


def _retry_after(exc: BaseException) -> float | None:
    """Seconds from a response's ``Retry-After`` header (delta-seconds form), if it has one."""
    headers = getattr(exc, "headers", None) or {}
    try:
        value = float(headers.get("retry-after") or headers.get("Retry-After"))
    except (TypeError, ValueError):
        return None
    return value if value >= 0 else None


def _describe(exc: BaseException) -> str:
    source = getattr(exc, "source", None)  # ResponseHandlingException wraps the transport error
    inner = source if isinstance(source, BaseException) else exc
    text = " ".join((str(inner) or type(inner).__name__).split())
    return f"{type(inner).__name__}: {text[:500]}"


# ------------------------------------------------------------------------------------------- store


class QdrantVectorStore:
    """Documents with dense vectors in one Qdrant collection; BM25 too with ``enable_bm25``.

    Exactly one of ``url``, ``location``, ``path`` and ``client`` names where the collection lives.

    Args:
        url: a Qdrant server, ``http://host:6333`` (REST through ``AsyncQdrantClient``).
        location: ``":memory:"`` for qdrant-client's in-process local mode (gone when closed).
        path: a folder for local mode on disk. The folder is locked to one client: close a store
            before opening another on the same folder.
        collection: the collection name.
        dimension: the vector width. With it the collection is created when the store opens (if
            missing); without it, on the first write, with the width of that write's embeddings. A
            collection remembers its width; a different ``dimension`` raises.
        client: an ``AsyncQdrantClient`` or ``QdrantClient`` to use; it is never closed by the store.
        enable_bm25: index ``title`` + ``content`` for BM25 (:meth:`search_text`). ``None`` (default)
            takes the collection's setting, ``False`` for a new one; an explicit value must match an
            existing collection's.
        analyzer: the BM25 text analysis (default: English). A collection remembers its language.
        embedding_model: the embedder's name; recorded on first use, and a different name raises, so
            vectors of two models are never mixed.
        create: create the collection when it is missing; with ``False`` a missing collection raises.
        timeout: seconds for each server request (rounded up to whole seconds by qdrant-client).
        api_key: the server's API key.
        prefer_grpc: talk gRPC to a server instead of REST.

    Raises:
        ConfigurationError: not exactly one location; qdrant-client is missing; ``dimension``, ``analyzer``,
            ``enable_bm25`` or ``embedding_model`` differ from the collection's (raised when the store opens).
        BackendUnavailableError: local mode cannot open ``path`` (locked by another client).
        InvalidParameterError: ``dimension`` or ``timeout`` is not positive.

    Example::

        async with QdrantVectorStore(location=":memory:", collection="docs", enable_bm25=True) as store:
            await store.upsert(docs, embeddings=vectors)
            hits = await store.search_vector(query_vector, k=5, filter=field("lang") == "en")
    """

    def __init__(
        self,
        *,
        url: str | None = None,
        location: str | None = None,
        path: str | Any | None = None,
        collection: str = DEFAULT_COLLECTION,
        dimension: int | None = None,
        client: Any | None = None,
        enable_bm25: bool | None = None,
        analyzer: Analyzer | None = None,
        embedding_model: str | None = None,
        create: bool = True,
        timeout: float = 10.0,
        api_key: str | None = None,
        prefer_grpc: bool = False,
    ) -> None:
        given = [name for name, v in (("url", url), ("location", location), ("path", path), ("client", client))
                 if v is not None]
        if len(given) != 1:
            raise ConfigurationError(
                f"QdrantVectorStore needs exactly one of url=, location=, path= or client=, got {given or 'none'}"
            )
        if location is not None and location != ":memory:":
            raise ConfigurationError(f"location must be ':memory:', got {location!r}; use url= for a server")
        if dimension is not None and (isinstance(dimension, bool) or not isinstance(dimension, int) or dimension <= 0):
            raise InvalidParameterError(f"dimension must be a positive int, got {dimension!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise InvalidParameterError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        if not isinstance(collection, str) or not collection:
            raise InvalidParameterError(f"collection must be a non-empty string, got {collection!r}")
        if enable_bm25 is not None and not isinstance(enable_bm25, bool):
            raise InvalidParameterError(f"enable_bm25 must be a bool or None, got {enable_bm25!r}")
        m = _sdk()
        self.collection = collection
        self.dimension: int | None = dimension
        self.analyzer = analyzer or Analyzer()
        self.embedding_model = embedding_model
        self._want_bm25 = enable_bm25
        self.enable_bm25: bool = bool(enable_bm25)
        self._create = create
        self._models = m
        self._lock = threading.Lock()
        self._open_lock = anyio.Lock()
        self._exists: bool | None = None
        self._has_dense = False
        self._meta: dict[str, Any] = {}
        self._closed = False
        where = url or location or (str(path) if path is not None else None) or f"{type(client).__name__}"
        self.name = f"qdrant {where} collection {collection!r}"
        self._owns_client = client is None
        if client is not None:
            self._client = client
        elif url is not None:
            from qdrant_client import AsyncQdrantClient

            try:
                self._client = AsyncQdrantClient(
                    url=url, timeout=math.ceil(timeout), api_key=api_key, prefer_grpc=prefer_grpc,
                    check_compatibility=False,
                )
            except Exception as exc:
                raise ConfigurationError(f"{self.name}: invalid Qdrant URL: {exc}") from exc
        else:
            from qdrant_client import QdrantClient

            try:
                if path is not None:
                    self._client = QdrantClient(path=str(path))
                else:
                    self._client = QdrantClient(location=location)
            except Exception as exc:
                raise BackendUnavailableError(f"cannot open Qdrant local mode: {exc}", store=self.name) from exc
        self._is_async = inspect.iscoroutinefunction(getattr(self._client, "query_points", None))

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> QdrantVectorStore:
        """Build a store from a URL; ``kwargs`` are constructor arguments and win over the URL's options.

        Forms (``COLLECTION`` defaults to ``"fastrag"``)::

            qdrant://HOST[:PORT]/COLLECTION        a server over http (port 6333 by default)
            qdrants://HOST[:PORT]/COLLECTION       a server over https
            qdrant+memory:///COLLECTION            local mode in memory
            qdrant+path:///PATH?collection=NAME    local mode on disk: a relative PATH;
            qdrant+path:////PATH?collection=NAME   an absolute /PATH (as sqlite:/// URLs)

        Query options, all optional: ``collection`` (for the local forms), ``bm25=true|false``,
        ``dimension=N``, ``timeout=SECONDS``, ``create=true|false``; a server's API key may be given as
        ``api_key=`` (better passed as a keyword argument than written into a URL).

        Raises:
            ConfigurationError: the URL is not one of these forms or an option is invalid.
        """
        if not isinstance(url, str):
            raise ConfigurationError(f"store URL must be a string, got {url!r}")
        scheme, sep, rest = url.partition("://")
        scheme = scheme.lower()
        if not sep or scheme not in ("qdrant", "qdrants", "qdrant+memory", "qdrant+path"):
            raise ConfigurationError(
                f"{url!r} is not a Qdrant URL; use qdrant://HOST:PORT/COLLECTION, qdrant+memory:///COLLECTION "
                "or qdrant+path:///PATH?collection=NAME"
            )
        body, _, query = rest.partition("?")
        options = {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}
        known = {"collection", "bm25", "dimension", "timeout", "create", "api_key"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ConfigurationError(f"{url}: unknown options {unknown}; known: {sorted(known)}")
        args: dict[str, Any] = {}
        if "bm25" in options:
            args["enable_bm25"] = _flag(url, "bm25", options["bm25"])
        if "create" in options:
            args["create"] = _flag(url, "create", options["create"])
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
                raise ConfigurationError(f"{url}: write qdrant+path:///relative/dir or qdrant+path:////absolute/dir")
            args["path"] = unquote(body[1:])
        if collection:
            args["collection"] = collection
        args.update(kwargs)
        return cls(**args)

    def __repr__(self) -> str:
        return f"QdrantVectorStore({self.name!r})"

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> QdrantVectorStore:
        try:
            await self._ready()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the client the store created (an injected client stays open). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if not self._owns_client:
            return
        try:
            if self._is_async:
                await self._client.close()
            else:
                await anyio.to_thread.run_sync(self._close_sync)
        except Exception as exc:
            raise BackendError(f"closing the client failed: {_describe(exc)}", store=self.name) from exc

    def _close_sync(self) -> None:
        with self._lock:
            self._client.close()

    async def _call(self, method: str, /, **kwargs: Any) -> Any:
        if self._closed:
            raise BackendUnavailableError("store is closed", store=self.name)
        try:
            if self._is_async:
                return await getattr(self._client, method)(**kwargs)
            call = functools.partial(getattr(self._client, method), **kwargs)
            # A read is abandoned when its caller is cancelled (a branch_timeout, a cancel scope): local
            # mode cannot be interrupted, so the call returns on time and the thread finishes unobserved,
            # holding the store's lock until then. A write is always waited for.
            return await anyio.to_thread.run_sync(self._locked, call, abandon_on_cancel=method in _ABANDONABLE)
        except FastragError:
            raise
        except Exception as exc:
            if _is_unavailable(exc):
                raise BackendTemporarilyUnavailableError(f"{method} failed: {_describe(exc)}", store=self.name) from exc
            if getattr(exc, "status_code", None) == 429:
                raise RateLimitError(f"{method} failed: {_describe(exc)}", store=self.name,
                                     retry_after=_retry_after(exc)) from exc
            raise BackendError(f"{method} failed: {_describe(exc)}", store=self.name) from exc

    def _locked(self, call: Callable[[], Any]) -> Any:
        with self._lock:
            return call()

    # ------------------------------------------------------------------ collection state

    async def _ready(self) -> bool:
        """Learn (once) whether the collection exists and check its settings; create it when asked."""
        if self._exists:
            return True
        async with self._open_lock:
            if self._exists:
                return True
            exists = await self._call("collection_exists", collection_name=self.collection)
            if exists:
                await self._adopt()
            elif not self._create:
                raise BackendUnavailableError("the collection does not exist (create=False)", store=self.name)
            elif self.dimension is not None:
                await self._create_collection(self.dimension)
            return bool(self._exists)

    async def _adopt(self) -> None:
        info = await self._call("get_collection", collection_name=self.collection)
        meta = (getattr(info.config, "metadata", None) or {}).get("fastrag")
        if not isinstance(meta, dict) or meta.get("schema") != SCHEMA_VERSION:
            raise ConfigurationError(
                f"{self.name}: not a fastrag collection (schema {SCHEMA_VERSION}); use a new collection name"
            )
        vectors = info.config.params.vectors
        dense = vectors.get(DENSE) if isinstance(vectors, Mapping) else None
        if dense is not None:
            if dense.distance != self._models.Distance.COSINE:
                raise ConfigurationError(f"{self.name}: the dense vector uses {dense.distance}, not cosine")
            self._check_setting("dimension", dense.size, self.dimension)
            self.dimension = dense.size
            self._has_dense = True
        elif self.dimension is not None and self._create:
            await self._add_dense(self.dimension)
        self._check_setting("analyzer_language", meta.get("analyzer_language"), self.analyzer.language or "none")
        self._check_setting("enable_bm25", meta.get("enable_bm25"), self._want_bm25)
        self.enable_bm25 = bool(meta.get("enable_bm25"))
        await self._check_analysis(meta)
        stored_model = meta.get("embedding_model")
        self._check_setting("embedding_model", stored_model, self.embedding_model)
        self._meta = dict(meta)
        self._exists = True
        if stored_model is None and self.embedding_model is not None:
            await self._write_meta()
        elif self.embedding_model is None:
            self.embedding_model = stored_model

    async def _check_analysis(self, meta: dict[str, Any]) -> None:
        """Refuse a BM25 collection whose terms were made by another text analysis (issue 14): its postings
        would not match this fastrag's query terms. A collection without the key predates the record
        (analysis version 1); one without points is simply stamped with the current analysis."""
        stored = meta.get("analysis", "fastrag-analysis/1")
        signature = self.analyzer.signature
        if not self.enable_bm25 or stored == signature:
            return
        result = await self._call("count", collection_name=self.collection, exact=True)
        if int(result.count):
            raise ConfigurationError(
                f"{self.name}: the collection's BM25 terms were made by {stored}, this fastrag analyses text by "
                f"{signature}, so keyword search would miss words; index the documents again into a new "
                f"collection (`fastrag index PATHS --store <a new qdrant collection URL>`, or upsert them from Python)"
            )
        meta["analysis"] = signature
        await self._call("update_collection", collection_name=self.collection, metadata={"fastrag": meta})

    def _check_setting(self, key: str, stored: Any, wanted: Any) -> None:
        if wanted is not None and stored is not None and stored != wanted:
            raise ConfigurationError(
                f"{self.name}: the collection was built with {key}={stored!r}, not {wanted!r}; "
                "use a new collection or the same settings"
            )

    async def _write_meta(self) -> None:
        self._meta.update(embedding_model=self.embedding_model)
        await self._call("update_collection", collection_name=self.collection, metadata={"fastrag": self._meta})

    async def _create_collection(self, dimension: int | None) -> None:
        m = self._models
        self._meta = {
            "schema": SCHEMA_VERSION,
            "analyzer_language": self.analyzer.language or "none",
            "analysis": self.analyzer.signature,
            "enable_bm25": self.enable_bm25,
            "embedding_model": self.embedding_model,
        }
        vectors = {} if dimension is None else {DENSE: m.VectorParams(size=dimension, distance=m.Distance.COSINE)}
        await self._call(
            "create_collection", collection_name=self.collection, vectors_config=vectors,
            metadata={"fastrag": self._meta},
        )
        if self.enable_bm25:
            await self._call(
                "create_payload_index", collection_name=self.collection, field_name=TERMS_FIELD,
                field_schema=m.TextIndexParams(
                    type=m.TextIndexType.TEXT, tokenizer=m.TokenizerType.WORD, lowercase=True,
                    scoring=m.TextScoringParams(type=m.TextScoringType.BM25),
                ),
                wait=True,
            )
        self.dimension = dimension
        self._has_dense = dimension is not None
        self._exists = True

    async def _add_dense(self, dimension: int) -> None:
        m = self._models
        await self._call(
            "create_vector_name", collection_name=self.collection, vector_name=DENSE,
            vector_name_config=m.DenseVectorNameConfig(
                dense=m.DenseVectorConfig(size=dimension, distance=m.Distance.COSINE)
            ),
            wait=True,
        )
        self.dimension = dimension
        self._has_dense = True

    async def _ready_for_write(self, dimension: int | None) -> None:
        async with self._open_lock:
            if not self._exists:
                exists = await self._call("collection_exists", collection_name=self.collection)
                if exists:
                    await self._adopt()
                elif not self._create:
                    raise BackendUnavailableError("the collection does not exist (create=False)", store=self.name)
                else:
                    await self._create_collection(dimension if dimension is not None else self.dimension)
            if dimension is not None:
                if self.dimension is not None and self.dimension != dimension:
                    raise DimensionMismatchError(
                        f"{self.name}: embeddings have dimension {dimension}, the store holds {self.dimension}"
                    )
                if not self._has_dense:
                    await self._add_dense(dimension)

    # ------------------------------------------------------------------ filters

    def _filter(self, filter: FilterLike | Any | None, ids: Sequence[str] | None = None) -> Any:
        """The Qdrant filter for ``filter`` (fastrag or native) AND-ed with ``ids``; translated before any call."""
        m = self._models
        id_condition = None
        if ids is not None:
            if isinstance(ids, str) or not isinstance(ids, Sequence | set | frozenset):
                raise InvalidParameterError("ids must be a sequence of strings, not one string")
            unique = distinct_ids(list(ids)) or []  # valid Unicode: point_id() encodes them as UTF-8
            id_condition = m.Filter(must=[m.HasIdCondition(has_id=[point_id(i) for i in unique])])
        return _and(m, _native_filter(m, filter), id_condition)

    # ------------------------------------------------------------------ writes

    async def upsert(self, documents: Sequence[Document], *, embeddings: np.ndarray | None = None) -> None:
        """Insert or replace ``documents`` by id, in one Qdrant update request.

        Args:
            documents: the documents. Metadata must be JSON (str, int within signed 64 bits, finite float,
                bool, None, lists, mappings); with BM25 enabled, ``title`` + ``content`` are indexed.
            embeddings: ``(len(documents), dim)`` float (converted to float32), finite; ``None`` stores the
                documents without vectors (found by BM25, not by k-NN).

        Raises:
            DimensionMismatchError: the width differs from the collection's, or the row count from
                ``len(documents)``.
            InvalidParameterError: a vector holds NaN or infinity, an id repeats, or metadata is not JSON.
            BackendError: Qdrant failed.
        """
        docs = list(documents)
        if not docs:
            return
        for doc in docs:
            if not isinstance(doc, Document):
                raise InvalidParameterError(f"upsert takes Document objects, got {type(doc).__name__}")
        check_unique_ids(docs)
        check_document_text(docs)
        matrix = (
            None if embeddings is None
            else check_embeddings(embeddings, len(docs), dimension=self.dimension, store=self.name)
        )
        # Validation and payload building are CPU work: off the event loop, and before any backend call.
        metadata = await anyio.to_thread.run_sync(lambda: [_plain(dict(d.metadata)) for d in docs])
        await self._ready_for_write(None if matrix is None else matrix.shape[1])
        points = await anyio.to_thread.run_sync(self._points, docs, metadata, matrix, self.enable_bm25)
        await self._call("upsert", collection_name=self.collection, points=points, wait=True)

    def _points(
        self, docs: list[Document], metadata: list[dict[str, Any]], matrix: np.ndarray | None, bm25: bool
    ) -> list[Any]:
        m = self._models
        points = []
        for i, (doc, meta) in enumerate(zip(docs, metadata, strict=True)):
            payload: dict[str, Any] = {
                ID_FIELD: doc.id, CONTENT_FIELD: doc.content, METADATA_FIELD: meta, SHADOW_FIELD: shadow_fields(meta),
            }
            terms = " ".join(self._index_terms(doc)) if bm25 else ""
            if terms:
                payload[TERMS_FIELD] = terms
            vector = {} if matrix is None else {DENSE: matrix[i].tolist()}
            points.append(m.PointStruct(id=point_id(doc.id), vector=vector, payload=payload))
        return points

    def _index_terms(self, doc: Document) -> list[str]:
        title = doc.metadata.get("title")
        text = f"{title}\n{doc.content}" if isinstance(title, str) and title else doc.content
        return self.analyzer.analyze(text)

    async def delete(self, *, ids: Sequence[str] | None = None, filter: FilterLike | Any | None = None) -> int:
        """Delete documents; return how many were removed.

        The matching point ids are read first (a scroll), then exactly those points are deleted in one
        request, so the count is exact.

        Args:
            ids: delete these ids (unknown ids are ignored).
            filter: a fastrag filter or a native ``models.Filter``. With ``ids`` too, only documents with
                one of the ids *and* matching the filter are deleted.

        Raises:
            InvalidParameterError: neither ``ids`` nor ``filter`` was given (use :meth:`clear`).
            FilterError: the filter is malformed; UnsupportedFilterError: it cannot be expressed.
            BackendError: Qdrant failed.
        """
        if ids is None and filter is None:
            raise InvalidParameterError("delete needs ids or a filter; use clear() to delete everything")
        return await self._delete_matching(self._filter(filter, ids))

    async def clear(self) -> int:
        """Delete every document; return how many were removed."""
        return await self._delete_matching(None)

    async def _delete_matching(self, qfilter: Any) -> int:
        if not await self._ready():
            return 0
        found = [p.id for p in await self._scroll(qfilter, payload=False)]
        if not found:
            return 0
        m = self._models
        for start in range(0, len(found), 1000):
            await self._call(
                "delete", collection_name=self.collection,
                points_selector=m.PointIdsList(points=found[start : start + 1000]), wait=True,
            )
        return len(found)

    # ------------------------------------------------------------------ reads

    async def _scroll(self, qfilter: Any, *, payload: bool) -> list[Any]:
        points: list[Any] = []
        offset = None
        while True:
            page, offset = await self._call(
                "scroll", collection_name=self.collection, scroll_filter=qfilter, limit=_PAGE, offset=offset,
                with_payload=_READ_FIELDS if payload else False, with_vectors=False,
            )
            points.extend(page)
            if offset is None:
                return points

    async def count(self, *, filter: FilterLike | Any | None = None) -> int:
        """How many documents the store holds, or how many match ``filter`` (fastrag or native)."""
        qfilter = self._filter(filter)
        if not await self._ready():
            return 0
        result = await self._call("count", collection_name=self.collection, count_filter=qfilter, exact=True)
        return int(result.count)

    async def get(
        self, *, ids: Sequence[str] | None = None, filter: FilterLike | Any | None = None, limit: int | None = None
    ) -> list[Document]:
        """Documents with these ``ids`` and/or matching ``filter`` (all when neither), in id order.

        Every matching point is read (paged) and sorted by id here, since Qdrant orders by point id.
        """
        if limit is not None:
            check_k(limit, "limit")
        qfilter = self._filter(filter, ids)
        if not await self._ready():
            return []
        docs = sorted((_document(p.payload) for p in await self._scroll(qfilter, payload=True)), key=lambda d: d.id)
        return docs if limit is None else docs[:limit]

    async def search_vector(
        self, embedding: np.ndarray, *, k: int, filter: FilterLike | Any | None = None
    ) -> list[Document]:
        """Cosine k-NN among documents matching ``filter`` (applied inside Qdrant, before ranking).

        Args:
            embedding: ``(dim,)`` query vector (any scale; Qdrant normalises it).
            k: how many documents at most (an int > 0).
            filter: a fastrag filter, or a native ``qdrant_client.models.Filter`` passed through as is.

        Returns:
            Copies best first, ``score`` = cosine similarity in [-1, 1] (higher is better), zero-based
            ``rank``; ties are broken by id. A zero vector scores 0 against everything. Documents stored
            without a vector are never returned.

        Raises:
            DimensionMismatchError: the vector's width differs from the store's.
            InvalidParameterError: ``k`` is not a positive int, or the vector holds NaN or infinity.
            FilterError: the filter is malformed; UnsupportedFilterError: it cannot be expressed.
            BackendError: Qdrant failed.
        """
        check_k(k)
        query = check_query_vector(embedding, dimension=self.dimension, store=self.name)
        qfilter = self._filter(filter)
        if not await self._ready() or not self._has_dense:
            return []
        query = check_query_vector(query, dimension=self.dimension, store=self.name)
        m = self._models
        if not np.any(query):
            zero = _and(m, qfilter, m.Filter(must=[m.HasVectorCondition(has_vector=DENSE)]))
            docs = sorted((_document(p.payload) for p in await self._scroll(zero, payload=True)), key=lambda d: d.id)
            return [d.ranked(score=0.0, rank=r) for r, d in enumerate(docs[:k])]
        scored = await self._query_top(k, query=query.tolist(), using=DENSE, query_filter=qfilter)
        return [d.ranked(score=min(1.0, max(-1.0, s)), rank=r) for r, (s, d) in enumerate(scored)]

    async def search_text(self, query: str, *, k: int, filter: FilterLike | Any | None = None) -> list[Document]:
        """BM25 (Qdrant's text-index scoring, k1 = 1.2, b = 0.75) over ``title`` + ``content``.

        Args:
            query: free text, analysed like the documents (stemming, stopwords, CJK bigrams).
            k: how many documents at most (an int > 0).
            filter: a fastrag filter or a native ``models.Filter``; applied before the top-k cut.

        Returns:
            Copies best first with ``score`` = BM25 (unbounded, > 0, higher is better; float32 precision)
            and zero-based ``rank``; ties broken by id. Only documents sharing at least one analysed term
            with the query; empty when the query has no terms left after analysis.

        Raises:
            ConfigurationError: the store was not opened with ``enable_bm25=True`` (nor is its collection).
            InvalidParameterError: ``k`` is not a positive int or ``query`` is not a string.
            FilterError: the filter is malformed; UnsupportedFilterError: it cannot be expressed.
            BackendError: Qdrant failed.
        """
        check_k(k)
        if not isinstance(query, str):
            raise InvalidParameterError(f"query must be a string, got {type(query).__name__}")
        qfilter = self._filter(filter)
        exists = await self._ready()
        if not self.enable_bm25:
            raise ConfigurationError(f"{self.name}: BM25 is not enabled; open the store with enable_bm25=True")
        text_query = self._text_query(query)
        if not exists or text_query is None:
            return []
        scored = await self._query_top(k, query=text_query, using=TERMS_FIELD, query_filter=qfilter)
        return [d.ranked(score=s, rank=r) for r, (s, d) in enumerate(scored)]

    def _text_query(self, query: str) -> Any | None:
        terms = sorted(set(self.analyzer.analyze(query)))
        if not terms:
            return None
        m = self._models
        return m.TextQuery(
            text=m.TextQueryInput(
                query=" ".join(terms), scoring=m.Bm25Scoring(bm25=m.Bm25Params(k=BM25_K1, b=BM25_B))
            )
        )

    async def _query_top(self, k: int, **request: Any) -> list[tuple[float, Document]]:
        """The top ``k`` (score, document) pairs, ties broken by id: widens the request until the tie at
        the cut is complete, so the documents that tie with the k-th are all seen before sorting."""
        limit = k + 1
        while True:
            response = await self._call(
                "query_points", collection_name=self.collection, limit=limit, with_payload=_READ_FIELDS, **request
            )
            points = response.points
            if len(points) < limit or points[k - 1].score != points[-1].score:
                break
            limit *= 2
        scored = sorted(((float(p.score), _document(p.payload)) for p in points), key=lambda sd: (-sd[0], sd[1].id))
        return scored[:k]


# ---------------------------------------------------------------------------------------- hybrid


class QdrantHybridRetriever:
    """Dense k-NN and BM25 fused inside Qdrant: one Query API request with two prefetch legs.

    Both legs (``"vector"``: the embedded query on the dense vector; ``"bm25"``: the analysed query on the
    text index) carry the same filter and ask for ``max(candidate_k, k)`` documents; Qdrant fuses them.
    The same request batch also returns each leg's list, so every result records its per-branch score
    and rank under ``metadata["branches"]``, as :class:`~fastrag.retrieval.hybrid.HybridRetriever` does.

    Args:
        store: a :class:`QdrantVectorStore` with BM25 enabled.
        embedder: the embedder whose vectors the store holds.
        fusion: ``"rrf"`` (Reciprocal Rank Fusion, Cormack et al. 2009) or ``"dbsf"`` (Qdrant's
            distribution-based score fusion: each leg normalised by mean ± 3 standard deviations, summed).
        rank_constant: RRF's constant, as in :class:`~fastrag.retrieval.fusion.ReciprocalRankFusion`:
            unweighted, a document scores ``sum 1 / (rank_constant + r)`` with one-based ranks ``r`` (sent to
            Qdrant as ``k = rank_constant + 1``, since Qdrant counts ranks from zero).
        weights: RRF only: ``{"vector": w, "bm25": w}``, passed to Qdrant's weighted RRF, which divides the
            one-based rank by the weight: ``1 / (r / w + rank_constant)``; not the same numbers as
            ``ReciprocalRankFusion(weights=...)``.
        candidate_k: how many documents each leg contributes, at least ``k``.
        filter: a filter AND-ed with every call's filter (fastrag or native ``models.Filter``).

    Raises:
        ConfigurationError: ``store`` has no BM25 (checked on the first call, once the collection is known).
        InvalidParameterError: unknown ``fusion``; ``rank_constant`` or ``candidate_k`` not a positive int;
            weights that are negative, all zero, name other branches, or are given with ``"dbsf"``.
    """

    name = "hybrid"

    def __init__(
        self,
        *,
        store: QdrantVectorStore,
        embedder: Embedder,
        fusion: Literal["rrf", "dbsf"] = "rrf",
        rank_constant: int = 60,
        weights: Mapping[str, float] | None = None,
        candidate_k: int = 40,
        filter: FilterLike | Any | None = None,
    ) -> None:
        if not isinstance(store, QdrantVectorStore):
            raise InvalidParameterError(f"store must be a QdrantVectorStore, got {type(store).__name__}")
        if fusion not in ("rrf", "dbsf"):
            raise InvalidParameterError(f"fusion must be 'rrf' or 'dbsf', got {fusion!r}")
        check_k(rank_constant, "rank_constant")
        check_k(candidate_k, "candidate_k")
        if weights is not None:
            if fusion != "rrf":
                raise InvalidParameterError("weights apply to RRF only; Qdrant's DBSF takes none")
            if not isinstance(weights, Mapping) or set(weights) != {"vector", "bm25"}:
                raise InvalidParameterError(f'weights must map exactly "vector" and "bm25", got {weights!r}')
            for key, w in weights.items():
                if isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w) or w < 0:
                    raise InvalidParameterError(f"weight {key!r} must be a finite number >= 0, got {w!r}")
            if all(w == 0 for w in weights.values()):
                raise InvalidParameterError("at least one weight must be > 0")
        self.store = store
        self.embedder = embedder
        self.fusion = fusion
        self.rank_constant = rank_constant
        self.weights = dict(weights) if weights is not None else None
        self.candidate_k = candidate_k
        self.filter = filter if isinstance(filter, store._models.Filter) else combine_filters(filter)

    def __repr__(self) -> str:
        return (
            f"QdrantHybridRetriever(store={self.store!r}, fusion={self.fusion!r}, rank_constant={self.rank_constant}, "
            f"weights={self.weights!r}, candidate_k={self.candidate_k})"
        )

    async def retrieve(
        self, query: str, *, k: int = 10, filter: FilterLike | Any | None = None, offset: int = 0  # noqa: A002
    ) -> list[Document]:
        """Up to ``k`` fused documents for ``query`` matching both filters, best first; ``offset`` skips that
        many (:mod:`fastrag.retrieval.pagination`).

        Returns:
            Copies stamped with the fused ``score`` (RRF: in ``(0, 2 / (rank_constant + 1)]``; DBSF: a sum
            of normalised scores), zero-based ``rank`` and ``metadata["branches"] = {"vector": {"score",
            "rank"}, "bm25": {...}}`` for the legs that returned the document. Ties are broken by the best
            leg rank, then id.

        Raises:
            InvalidParameterError: ``k`` is not a positive int or the query is blank.
            FilterError / UnsupportedFilterError: a filter is malformed or cannot be expressed.
            DimensionMismatchError: the embedder's width differs from the store's.
            ConfigurationError: the store has no BM25.
            BackendError: Qdrant failed.
        """
        if not isinstance(query, str) or not query.strip():
            raise InvalidParameterError("query must be a non-blank string")
        check_k(k)
        from fastrag.retrieval.pagination import check_offset

        check_offset(offset, k)
        page_end = offset + k
        store, m = self.store, self.store._models
        qfilter = _and(m, store._filter(self.filter), store._filter(filter))
        exists = await store._ready()
        if not store.enable_bm25:
            raise ConfigurationError(f"{store.name}: QdrantHybridRetriever needs a store with enable_bm25=True")
        embedding = check_query_vector(
            await self.embedder.embed_query(query), dimension=store.dimension, store=store.name
        )
        text_query = store._text_query(query)
        if not exists:
            return []
        fetch_k = max(self.candidate_k, page_end)
        weights = self.weights or {"vector": 1.0, "bm25": 1.0}
        legs: list[tuple[str, Any, str]] = []
        if store._has_dense and np.any(embedding) and weights["vector"] > 0:
            legs.append(("vector", embedding.tolist(), DENSE))
        if text_query is not None and weights["bm25"] > 0:  # a zero weight drops the leg, as in fastrag's fusions
            legs.append(("bm25", text_query, TERMS_FIELD))
        if not legs:
            return []
        if self.fusion == "dbsf":
            fused_query = m.FusionQuery(fusion=m.Fusion.DBSF)
        else:
            leg_weights = None if self.weights is None else [float(self.weights[name]) for name, _, _ in legs]
            fused_query = m.RrfQuery(rrf=m.Rrf(k=self.rank_constant + 1, weights=leg_weights))
        prefetch = [m.Prefetch(query=q, using=using, filter=qfilter, limit=fetch_k) for _, q, using in legs]
        requests = [
            m.QueryRequest(prefetch=prefetch, query=fused_query, filter=qfilter, limit=fetch_k * len(legs),
                           with_payload=_READ_FIELDS),
            *(m.QueryRequest(query=q, using=using, filter=qfilter, limit=fetch_k, with_payload=[ID_FIELD])
              for _, q, using in legs),
        ]
        fused, *leg_results = await store._call(
            "query_batch_points", collection_name=store.collection, requests=requests
        )
        branches: dict[str, dict[str, dict[str, Any]]] = {}
        for (name, _, _), result in zip(legs, leg_results, strict=True):
            for rank, point in enumerate(result.points):
                doc_id = (point.payload or {}).get(ID_FIELD)
                branches.setdefault(doc_id, {}).setdefault(name, {"score": float(point.score), "rank": rank})
        ordered = sorted(
            ((float(p.score), _document(p.payload)) for p in fused.points),
            key=lambda sd: (-sd[0], min((b["rank"] for b in branches.get(sd[1].id, {}).values()), default=fetch_k),
                            sd[1].id),
        )
        out = []
        for rank, (score, doc) in enumerate(ordered[:page_end]):
            if rank < offset:
                continue
            metadata = {key: v for key, v in doc.metadata.items() if key not in (SCORE, RANK, BRANCHES)}
            metadata[SCORE] = score
            metadata[RANK] = rank
            metadata[BRANCHES] = dict(sorted(branches.get(doc.id, {}).items()))
            out.append(Document(id=doc.id, content=doc.content, metadata=metadata))
        return out


# ----------------------------------------------------------------------------------------- helpers


def _document(payload: Mapping[str, Any] | None) -> Document:
    payload = payload or {}
    if not isinstance(payload.get(ID_FIELD), str):
        raise BackendError(f"a point without a fastrag document id in its payload: {dict(payload)!r:.200}")
    return Document(
        id=payload[ID_FIELD], content=payload.get(CONTENT_FIELD, ""), metadata=payload.get(METADATA_FIELD) or {}
    )


def _flag(url: str, name: str, value: str) -> bool:
    lowered = value.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ConfigurationError(f"{url}: {name} must be true or false, got {value!r}")
