"""The Qdrant collection layout: payload field names, point ids, the filter shadow fields of a document's metadata
(:func:`shadow_fields`), and the way back from a payload to a document (the design in the package docstring)."""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Mapping
from typing import Any

from fastrag.errors import BackendError, InvalidParameterError
from fastrag.filters import parse_date
from fastrag.models import Document
from fastrag.vector_store._metadata import epoch_micros, is_number

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
READ_FIELDS = [ID_FIELD, CONTENT_FIELD, METADATA_FIELD]
"""The payload fields a read returns (not the shadow fields nor the BM25 terms)."""
_INT64 = 2**63
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_]+")


def point_id(document_id: str) -> str:
    """The Qdrant point id of a fastrag document id: ``str(uuid5(POINT_ID_NAMESPACE, document_id))``."""
    return str(uuid.uuid5(POINT_ID_NAMESPACE, document_id))


def encode_key(key: str) -> str:
    """The shadow-field name of a metadata key: ``k_<key>`` for ``[A-Za-z0-9_]+``, else ``x_<hex of its UTF-8>``."""
    if _PLAIN_KEY.fullmatch(key):
        return f"k_{key}"
    return "x_" + key.encode("utf-8", "surrogatepass").hex()


def shadow_path(key: str, kind: str) -> str:
    """The payload path of ``key``'s shadow field of ``kind`` (``s``, ``n``, ``b``, ``r``, ``t``, ``l``)."""
    return f"{SHADOW_FIELD}.{encode_key(key)}.{kind}"


def number_text(value: float) -> str:
    """Canonical decimal form: equal numbers (``2020``, ``2020.0``) give the same string, others differ."""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return str(int(value))


def list_tag(value: Any) -> str | None:
    """The ``l`` tag of a list element (``"s:<str>"``, ``"n:<number>"``, ``"b:true"``), ``None`` for a non-scalar."""
    if isinstance(value, bool):
        return "b:true" if value else "b:false"
    if is_number(value):
        return "n:" + number_text(value)
    if isinstance(value, str):
        return "s:" + value
    return None


def shadow_fields(metadata: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The ``_f`` payload object for ``metadata`` (see the package docstring): ``{encoded key: {kind: value}}``.

    Pure; ``metadata`` must already hold plain JSON values with finite floats.
    """
    out: dict[str, dict[str, Any]] = {}
    for key, value in metadata.items():
        entry: dict[str, Any] = {}
        if isinstance(value, bool):
            entry["b"] = value
        elif is_number(value):
            entry["n"] = number_text(value)
            entry["r"] = float(value)
        elif isinstance(value, str):
            entry["s"] = value
            moment = parse_date(value)
            if moment is not None:
                entry["t"] = float(epoch_micros(moment))
        elif isinstance(value, list | tuple):
            tags = list(dict.fromkeys(t for t in map(list_tag, value) if t is not None))
            if tags:
                entry["l"] = tags
        if entry:
            out[encode_key(str(key))] = entry
    return out


def point_payload(document: Document, metadata: dict[str, Any], terms: str = "") -> dict[str, Any]:
    """The payload of ``document``'s point: ``{"id", "content", "metadata", "_f"}``, plus ``"_bm25"`` when
    ``terms`` (the analysed BM25 terms, space-joined) is not empty. ``metadata`` is the output of
    :func:`plain_metadata`. Shared by the store and the Qdrant Edge filter tests, so both hold the same points."""
    payload: dict[str, Any] = {
        ID_FIELD: document.id, CONTENT_FIELD: document.content, METADATA_FIELD: metadata,
        SHADOW_FIELD: shadow_fields(metadata),
    }
    if terms:
        payload[TERMS_FIELD] = terms
    return payload


def plain_metadata(value: Any, path: str = "metadata") -> Any:
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
        return {str(k): plain_metadata(v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain_metadata(v, f"{path}[{i}]") for i, v in enumerate(value)]
    raise InvalidParameterError(f"{path}: {type(value).__name__} is not a JSON value (str, number, bool, list, dict)")


def to_document(payload: Mapping[str, Any] | None) -> Document:
    """The document a point's payload holds.

    Raises:
        BackendError: the payload has no fastrag document id.
    """
    payload = payload or {}
    if not isinstance(payload.get(ID_FIELD), str):
        raise BackendError(f"a point without a fastrag document id in its payload: {dict(payload)!r:.200}")
    return Document(
        id=payload[ID_FIELD], content=payload.get(CONTENT_FIELD, ""), metadata=payload.get(METADATA_FIELD) or {}
    )
