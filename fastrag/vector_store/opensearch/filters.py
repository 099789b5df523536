"""Fastrag filters as OpenSearch Query DSL: the pure :func:`translate_filter` (no SDK, no I/O) over the shadow
fields :func:`~fastrag.vector_store.opensearch.document_source` writes, and :class:`OpenSearchQuery`, a
native query passed through unchanged."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastrag.errors import FilterError, InvalidParameterError
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
from fastrag.vector_store._metadata import epoch_micros
from fastrag.vector_store.opensearch.schema import (
    INT64_MAX,
    INT64_MIN,
    LIST_NS,
    SCALAR_NS,
    as_double,
    shadow_field,
)

_MATCH_NONE: dict[str, Any] = {"match_none": {}}
MATCH_ALL: dict[str, Any] = {"match_all": {}}
"""A query matching every document."""


@dataclass(frozen=True, slots=True)
class OpenSearchQuery:
    """A native OpenSearch Query DSL query, passed through as the filter unchanged.

    ``store.search_text("q", k=5, filter=OpenSearchQuery({"term": {"f_str.category": "science"}}))``.
    It is used in filter context (it does not change scores). Shadow field names are built as described in
    the package docstring (``f_str.<encode_key(key)>`` and so on); :func:`translate_filter` output can be
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
    the shadow fields :func:`~fastrag.vector_store.opensearch.document_source` writes:

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
        return _equals(SCALAR_NS, key, [value])
    if op == "notEquals":
        return {"bool": {"must_not": [_equals(SCALAR_NS, key, [value])]}}
    if op == "in":
        return _equals(SCALAR_NS, key, list(value))
    if op == "notIn":
        return {"bool": {"must_not": [_equals(SCALAR_NS, key, list(value))]}} if value else dict(MATCH_ALL)
    if op == "listContains":
        return _equals(LIST_NS, key, [value])
    if op in RANGE_OPERATORS:
        return _range(op, key, value)
    if op == "startsWith":
        if value == "":
            return {"exists": {"field": shadow_field("f_str", key)}}
        return {"prefix": {shadow_field("f_str", key): {"value": value}}}
    if op == "stringContains":
        if value == "":
            return {"exists": {"field": shadow_field("f_str", key)}}
        return {"wildcard": {shadow_field("f_str", key): {"value": f"*{escape_wildcard(value)}*"}}}
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
                add("num", as_double(as_float))
        else:  # a finite float
            if value.is_integer() and INT64_MIN <= value <= INT64_MAX:
                add("int", int(value))
            add("num", as_double(value))
    order = [namespaces[kind] for kind in ("str", "int", "num", "bool")]
    clauses = []
    for ns in order:
        items = by_ns.get(ns)
        if not items:
            continue
        name = shadow_field(ns, key)
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
        return {"range": {shadow_field("f_date", key): {_RANGE_KEYS[op]: epoch_micros(moment)}}}
    clauses = [c for c in (_int_range(op, key, value), _float_range(op, key, value)) if c is not None]
    if not clauses:
        return dict(_MATCH_NONE)
    if len(clauses) == 1:
        return clauses[0]
    return {"bool": {"should": clauses, "minimum_should_match": 1}}


def _int_range(op: str, key: str, value: int | float) -> dict[str, Any] | None:
    """``range`` on ``f_int`` equivalent to ``x <op> value`` for every int64 ``x``; ``None`` when none matches."""
    name = shadow_field("f_int", key)
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
    name = shadow_field("f_num", key)
    lower = op in ("greaterThan", "greaterThanOrEquals")
    if isinstance(value, float):
        return {"range": {name: {_RANGE_KEYS[op]: as_double(value)}}}
    try:
        bound = float(value)
    except OverflowError:  # |value| > the largest double: every double is below (or above) it
        above_all = value > 0
        return None if lower == above_all else {"exists": {"field": name}}
    if bound == value:
        return {"range": {name: {_RANGE_KEYS[op]: as_double(bound)}}}
    # value is an int between two doubles and bound is the nearer one, so no double lies strictly between.
    if bound > value:  # x > v <=> x >= bound; x >= v <=> x >= bound; x < v <=> x < bound; x <= v <=> x < bound
        key_op = "gte" if lower else "lt"
    else:  # x > v <=> x > bound; x >= v <=> x > bound; x < v <=> x <= bound; x <= v <=> x <= bound
        key_op = "gt" if lower else "lte"
    return {"range": {name: {key_op: bound}}}


def native_query(filter: FilterLike | OpenSearchQuery | None) -> dict[str, Any] | None:  # noqa: A002
    """The Query DSL of a filter argument: native passes through, fastrag filters are parsed and translated."""
    if filter is None:
        return None
    if isinstance(filter, OpenSearchQuery):
        return dict(filter.query)
    node = parse_filter(filter)
    return None if node is None else _translate(node)


def combined_query(ids: list[str] | None, native: dict[str, Any] | None) -> dict[str, Any]:
    """One query for "one of ``ids`` (when given) and matching ``native`` (when given)"; ``match_all`` for neither."""
    if ids is None and native is not None:
        return native
    clauses: list[dict[str, Any]] = []
    if ids is not None:
        clauses.append({"terms": {"id": ids}})
    if native is not None:
        clauses.append(native)
    return {"bool": {"filter": clauses}} if clauses else dict(MATCH_ALL)
