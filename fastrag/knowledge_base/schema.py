"""A knowledge base's declared metadata fields: their types, and the checks of documents and filters against them."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from fastrag.errors import (
    ConfigurationError,
    FilterError,
    InvalidParameterError,
)
from fastrag.filters import (
    RANGE_OPERATORS,
    SET_OPERATORS,
    Comparison,
    Filter,
    comparisons,
    parse_date,
)
from fastrag.models import (
    BRANCHES,
    CHUNK_INDEX,
    CONTENT_HASH,
    HEADINGS,
    LANGUAGE,
    PARENT_ID,
    RANK,
    RESERVED_KEYS,
    SCORE,
    SOURCE_URI,
    TITLE,
    Document,
)

FIELD_TYPES: tuple[str, ...] = ("string", "long", "double", "date", "list", "boolean", "tenant")
"""The metadata field types a knowledge base can declare (see :class:`KnowledgeBase`, ``fields=``).
``"tenant"`` marks a tenant key (a non-empty str or a signed 64-bit int), like the built-in ``user_id`` and
``agent_id``: writes must set it through the call's scope, never in a document's metadata."""

TENANT_FIELD = "tenant"  # field type of user_id / agent_id (and declared tenant keys): a str or an int
STAMPED_KEYS = (SCORE, RANK, BRANCHES)  # set by ranking stages on the copies they return; refused on write
IMPLICIT_FIELDS: Mapping[str, str] = MappingProxyType(
    {
        SOURCE_URI: "string",
        TITLE: "string",
        LANGUAGE: "string",
        PARENT_ID: "string",
        CHUNK_INDEX: "long",
        CONTENT_HASH: "string",
        HEADINGS: "list",
        "chunker": "string",  # fastrag.ingestion.pipeline.CHUNKER
        "section_index": "long",  # fastrag.sections: where a chunk lies in its parsed section
        "section_start": "long",
        "section_end": "long",
        "user_id": TENANT_FIELD,
        "agent_id": TENANT_FIELD,
    }
)

KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# ------------------------------------------------------------------------------------------ response




def check_fields_declaration(fields: Mapping[str, str] | None) -> dict[str, str] | None:
    if fields is None:
        return None
    if not isinstance(fields, Mapping):
        raise ConfigurationError(f"fields must be a mapping of field name to type, got {fields!r}")
    declared: dict[str, str] = {}
    for name, kind in fields.items():
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"field names must be non-empty strings, got {name!r}")
        if kind not in FIELD_TYPES:
            raise ConfigurationError(f"field {name!r}: unknown type {kind!r}; expected one of {', '.join(FIELD_TYPES)}")
        if name in RESERVED_KEYS and name not in IMPLICIT_FIELDS:
            raise ConfigurationError(f"field {name!r} is a reserved metadata key set by fastrag's stages")
        implicit = IMPLICIT_FIELDS.get(name)
        if implicit is not None and implicit != kind and not (implicit == TENANT_FIELD and kind in ("string", "long")):
            raise ConfigurationError(f"field {name!r} is built in with type {implicit!r}, not {kind!r}")
        declared[name] = kind
    return {**IMPLICIT_FIELDS, **declared}


def _value_fits(kind: str, value: Any) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "long":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "double":
        return _is_number(value) and math.isfinite(value)
    if kind == "date":
        return isinstance(value, str) and parse_date(value) is not None
    if kind == "list":
        return isinstance(value, list | tuple)
    if kind == "boolean":
        return isinstance(value, bool)
    return isinstance(value, str | int) and not isinstance(value, bool)  # tenant


_KIND_WORDS = {
    "string": "a string",
    "long": "an integer",
    "double": "a finite number",
    "date": "an ISO-8601 date string",
    "list": "a list",
    "boolean": "true or false",
    TENANT_FIELD: "a string or an integer",
}


def check_document_fields(doc: Document, fields: Mapping[str, str]) -> None:
    for key, value in doc.metadata.items():
        kind = fields.get(key)
        if kind is None:
            continue
        if not _value_fits(kind, value):
            raise InvalidParameterError(
                f"document {doc.id!r}: field {key!r} is declared {kind if kind != TENANT_FIELD else 'a tenant key'} "
                f"and must be {_KIND_WORDS[kind]}, got {value!r}"
            )


def check_filter_fields(node: Filter, fields: Mapping[str, str]) -> None:
    """Check a filter against the declared fields; raise FilterError naming the node's path."""
    for path, comparison in comparisons(node):
        _check_comparison_fields(comparison, fields, path)


def _check_comparison_fields(node: Comparison, fields: Mapping[str, str], path: str) -> None:
    op, key, value = node.operator, node.key, node.value
    here = f"{path}.{op}"
    kind = fields.get(key)
    if kind is None:
        declared = sorted(k for k in fields if k not in IMPLICIT_FIELDS)
        builtin = sorted(IMPLICIT_FIELDS)
        raise FilterError(
            f"field {key!r} is not declared; declared fields: {declared}; built-in: {builtin}", path=f"{here}.key"
        )
    label = "a tenant key" if kind == TENANT_FIELD else f"a {kind} field"
    if op in RANGE_OPERATORS:
        if kind in ("long", "double"):
            if not _is_number(value):
                raise FilterError(f"{op} on {label} ({key!r}) needs a number, got {value!r}", path=f"{here}.value")
            if kind == "long" and isinstance(value, float) and not value.is_integer():
                raise FilterError(
                    f"{op} on {label} ({key!r}) needs an integer (a whole number), got {value!r}", path=f"{here}.value"
                )
        elif kind == "date":
            if not isinstance(value, str):
                raise FilterError(f"{op} on {label} ({key!r}) needs an ISO-8601 date, got {value!r}", path=f"{here}.value")
        else:
            raise FilterError(
                f"{op} is a range operator; {key!r} is {label}: ranges apply to long, double and date fields",
                path=here,
            )
        return
    if op in ("startsWith", "stringContains"):
        if kind != "string":
            raise FilterError(f"{op} applies to string fields; {key!r} is {label}", path=here)
        return
    if op == "listContains":
        if kind != "list":
            raise FilterError(f"listContains applies to list fields; {key!r} is {label}", path=here)
        return
    # equals, notEquals, in, notIn
    if kind == "list":
        raise FilterError(f"{op} never matches a list field ({key!r}); use listContains", path=here)
    items = list(value) if op in SET_OPERATORS else [value]
    for i, item in enumerate(items):
        if not _value_fits(kind, item) or (kind == "double" and isinstance(item, bool)):
            where = f"{here}.value[{i}]" if op in SET_OPERATORS else f"{here}.value"
            raise FilterError(f"{key!r} is {label}: {op} needs {_KIND_WORDS[kind]}, got {item!r}", path=where)


# ------------------------------------------------------------------------------------- knowledge base

