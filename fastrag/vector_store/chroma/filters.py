"""Fastrag filters as Chroma ``where`` mappings: the pure :func:`translate_filter` (no SDK, no I/O) and
:class:`ChromaWhere`, a native filter passed through unchanged. The fields it reads are those
:func:`~fastrag.vector_store.chroma.schema.chroma_metadata` writes (the table in the package docstring)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastrag.errors import FilterError, InvalidParameterError, UnsupportedFilterError
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
from fastrag.vector_store._metadata import epoch_micros, is_number
from fastrag.vector_store.chroma.schema import (
    DATE_KEYS,
    NUMBER_KEYS,
    PREFIX_INDEX_LENGTH,
    date_key,
    distinct,
    float_or_none,
    list_key,
    native_key,
    number_key,
    prefix_key,
)

NEVER_WHERE: Mapping[str, Any] = {"fastrag:never": {"$eq": True}}
"""The ``where`` of a filter that matches nothing (a field no record has); the store skips the query."""

Where = dict[str, Any] | bool
"""A translated (sub)filter: a Chroma ``where`` mapping, or a constant (``True`` matches all, ``False`` none)."""

_FLIPPED = {"$gt": "$lte", "$gte": "$lt", "$lt": "$gte", "$lte": "$gt"}
_RANGE = {"greaterThan": "$gt", "greaterThanOrEquals": "$gte", "lessThan": "$lt", "lessThanOrEquals": "$lte"}


@dataclass(frozen=True, slots=True)
class ChromaWhere:
    """A native Chroma filter, passed through unchanged: ``filter=ChromaWhere(where={"category": "news"})``.

    The store recognises a native filter by this type only; any other filter argument is a fastrag filter
    (an AST node, its JSON form, or a JSON string). Field names are those of the package docstring: a
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

    Leaves, over the fields of the package docstring (``k`` the key, ``num(k)`` = ``fastrag:num:k``, ...):

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
        as_float = float_or_none(value)
        if as_float is None:
            return negate  # no stored number equals an int beyond the float range
        field, operand = list_key("num", key), as_float
    return {field: {"$not_contains" if negate else "$contains": operand}}


def _membership(key: str, values: Sequence[Any], negate: bool, *, single: bool) -> Where:
    strings = distinct(v for v in values if isinstance(v, str))
    bools = distinct(v for v in values if isinstance(v, bool))
    floats = distinct(f for v in values if is_number(v) and (f := float_or_none(v)) is not None)
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
        bound: float | int | None = float_or_none(value)
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
