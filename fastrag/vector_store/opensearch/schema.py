"""The OpenSearch index layout: the ``PUT /<index>`` body, the ``knn_vector`` mapping, and the ``_source``
fastrag writes for a document, with its typed shadow fields (the table in the package docstring)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from fastrag.errors import InvalidParameterError
from fastrag.filters import parse_date
from fastrag.models import Document
from fastrag.vector_store._metadata import epoch_micros, metadata_json

SCHEMA_VERSION = 1
"""Recorded in the index mapping's ``_meta.fastrag.schema``; an index with another value is refused."""

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_KEYWORD_BYTES = 32766
"""Lucene's limit on one indexed term; longer string metadata values cannot be filtered on, so they are refused."""
MAX_ID_BYTES = 512
"""OpenSearch's limit on ``_id``."""

_SAFE_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
HASHED_ID_PREFIX = "~h:"

# Scalar shadow namespaces (top-level values) and list-element namespaces, by value type.
SCALAR_NS = {"str": "f_str", "int": "f_int", "num": "f_num", "bool": "f_bool", "date": "f_date"}
LIST_NS = {"str": "l_str", "int": "l_int", "num": "l_num", "bool": "l_bool"}
NS_TYPES = {
    "f_str": "keyword", "f_int": "long", "f_num": "double", "f_bool": "boolean", "f_date": "long",
    "l_str": "keyword", "l_int": "long", "l_num": "double", "l_bool": "boolean",
}


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


def shadow_field(namespace: str, key: str) -> str:
    """The shadow field of metadata ``key`` in ``namespace`` (``f_str``, ``l_num``, ...): ``namespace.<encode_key(key)>``."""
    return f"{namespace}.{encode_key(key)}"


def as_double(value: float) -> float:
    """``value`` as OpenSearch should store or compare it (``-0.0`` as ``0.0``)."""
    return 0.0 if value == 0 else value  # Lucene orders -0.0 below 0.0; Python says they are equal


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
    properties.update({ns: {"type": "object"} for ns in NS_TYPES})
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
                {ns: {"path_match": f"{ns}.*", "mapping": {"type": kind}}} for ns, kind in NS_TYPES.items()
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
    """The ``_source`` fastrag writes for ``document`` (see the package docstring for the fields).

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
                    shadows.setdefault(LIST_NS[kind], {}).setdefault(name, []).append(_shadow_value(kind, item))
            continue
        kind = _shadow_kind(document.id, key, value)
        if kind is None:
            continue
        shadows.setdefault(SCALAR_NS[kind], {})[name] = _shadow_value(kind, value)
        if kind == "str" and (moment := parse_date(value)) is not None:
            shadows.setdefault("f_date", {})[name] = epoch_micros(moment)
    for ns in NS_TYPES:
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
        return as_double(float(value))  # ints beyond int64 are filtered at double precision (documented)
    return value


def opensearch_id(doc_id: str) -> str:
    """The ``_id`` of a document: its id, or ``~h:`` + SHA-256 when that is too long or could collide."""
    if len(doc_id.encode("utf-8", "surrogatepass")) > MAX_ID_BYTES or doc_id.startswith(HASHED_ID_PREFIX):
        return HASHED_ID_PREFIX + hashlib.sha256(doc_id.encode("utf-8", "surrogatepass")).hexdigest()
    return doc_id
