"""The Chroma record layout: the field names fastrag writes beside each record's JSON copy, the flat metadata
written for a document (:func:`chroma_metadata`), and the way back from a record to a document (see the package
docstring for the table of fields)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from fastrag.errors import InvalidParameterError
from fastrag.filters import parse_date
from fastrag.models import Document
from fastrag.vector_store._metadata import epoch_micros, is_number, metadata_json

DEFAULT_COLLECTION = "fastrag"
"""The collection used when none is named."""

PREFIX_INDEX_LENGTH = 64
"""Longest ``startsWith`` prefix, in characters, that the store can answer (the prefix shadow's length)."""

FORMAT_VERSION = 1
"""Version of the record layout described in the package docstring, kept in the collection's metadata."""

JSON_KEY = "fastrag:json"
NUMBER_KEYS = "fastrag:keys:num"
DATE_KEYS = "fastrag:keys:date"

COLLECTION_NAME = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9._-]{1,510})[a-zA-Z0-9]$")
"""What Chroma accepts as a collection name: 3 to 512 characters from ``[a-zA-Z0-9._-]``, alphanumeric ends."""

_RESERVED_PREFIXES = ("fastrag:", "chroma:", "#", "$")
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


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


def float_or_none(value: int | float) -> float | None:
    """``value`` as a float, or ``None`` for an int beyond the float range."""
    try:
        return float(value)
    except OverflowError:
        return None


def distinct(values: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(values))


def chroma_metadata(metadata: Mapping[str, Any], *, metadata_json: str | None = None) -> dict[str, Any]:
    """The Chroma metadata fastrag writes for a document's ``metadata`` (see the package docstring).

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
            strings = distinct(v for v in value if isinstance(v, str))
            bools = distinct(v for v in value if isinstance(v, bool))
            floats = distinct(_checked_float(key, v) for v in value if is_number(v))
            for kind, items in (("str", strings), ("bool", bools), ("num", floats)):
                if items:
                    out[list_key(kind, key)] = items
    if numbers:
        out[NUMBER_KEYS] = numbers
    if dates:
        out[DATE_KEYS] = dates
    return out


def _checked_float(key: str, value: int | float) -> float:
    as_float = float_or_none(value)
    if as_float is None or not math.isfinite(as_float):
        raise InvalidParameterError(
            f"metadata {key!r}: Chroma filters compare numbers as 64-bit floats; {value!r} is out of range"
        )
    return as_float


# ---------------------------------------------------------------------------------------- records


def prepare_metadata(docs: list[Document]) -> list[dict[str, Any]]:
    """The Chroma metadata of each document (:func:`chroma_metadata` of its JSON-checked metadata)."""
    out = []
    for doc in docs:
        _, text = metadata_json(doc)
        out.append(chroma_metadata(json.loads(text), metadata_json=text))
    return out


def to_document(doc_id: str, content: str | None, metadata: Mapping[str, Any] | None) -> Document:
    """The document a Chroma record holds: its metadata from the JSON copy, or a foreign record's plain fields."""
    fields = dict(metadata or {})
    stored = fields.get(JSON_KEY)
    if isinstance(stored, str):
        restored = json.loads(stored)
    else:  # a record not written by fastrag: its plain fields
        restored = {k: v for k, v in fields.items() if not k.startswith("fastrag:")}
    return Document(id=doc_id, content=content or "", metadata=restored)
