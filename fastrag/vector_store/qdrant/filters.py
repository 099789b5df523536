"""Fastrag filters as Qdrant ``models.Filter`` over the shadow fields: the pure :func:`translate_filter` (no backend
call; qdrant-client builds the models), a native ``models.Filter`` passed through, and filters AND-ed together."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fastrag.errors import InvalidParameterError, UnsupportedFilterError
from fastrag.filters import (
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
from fastrag.vector_store.qdrant.connection import import_models
from fastrag.vector_store.qdrant.schema import list_tag, number_text, shadow_path

if TYPE_CHECKING:
    from qdrant_client import models as qmodels

_RANGE_ARG = {"greaterThan": "gt", "greaterThanOrEquals": "gte", "lessThan": "lt", "lessThanOrEquals": "lte"}


def translate_filter(node: FilterLike) -> qmodels.Filter:
    """Translate a fastrag filter into a Qdrant ``models.Filter`` over the shadow fields.

    Pure: no backend call. The result selects exactly the documents :func:`fastrag.filters.matches`
    selects, given points written by :class:`~fastrag.vector_store.qdrant.QdrantVectorStore` (``_f`` shadow fields)::

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
    m = import_models()
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
        return m.FieldCondition(key=shadow_path(key, "b"), match=m.MatchValue(value=value))
    if is_number(value):
        return m.FieldCondition(key=shadow_path(key, "n"), match=m.MatchValue(value=number_text(value)))
    return m.FieldCondition(key=shadow_path(key, "s"), match=m.MatchValue(value=value))


def _one_of(m: Any, key: str, values: Sequence[Any]) -> Any:
    strings = list(dict.fromkeys(v for v in values if isinstance(v, str)))
    numbers = list(dict.fromkeys(number_text(v) for v in values if is_number(v)))
    bools = list(dict.fromkeys(v for v in values if isinstance(v, bool)))
    conditions = []
    if strings:
        conditions.append(m.FieldCondition(key=shadow_path(key, "s"), match=m.MatchAny(any=strings)))
    if numbers:
        conditions.append(m.FieldCondition(key=shadow_path(key, "n"), match=m.MatchAny(any=numbers)))
    conditions.extend(m.FieldCondition(key=shadow_path(key, "b"), match=m.MatchValue(value=b)) for b in bools)
    if not conditions:
        return _never(m)
    return conditions[0] if len(conditions) == 1 else m.Filter(should=conditions)


def _has_string(m: Any, key: str) -> Any:
    return m.Filter(must_not=[m.IsEmptyCondition(is_empty=m.PayloadField(key=shadow_path(key, "s")))])


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
            return m.FieldCondition(key=shadow_path(key, "r"), range=m.Range(**{_RANGE_ARG[op]: bound}))
        moment = parse_date(value)
        if moment is None:  # unreachable: Comparison validates range values
            raise UnsupportedFilterError(f"not a number or a date: {value!r}", path=f"{path}.value")
        return m.FieldCondition(key=shadow_path(key, "t"), range=m.Range(**{_RANGE_ARG[op]: float(epoch_micros(moment))}))
    if op == "startsWith":
        if value == "":
            return _has_string(m, key)
        return m.FieldCondition(key=shadow_path(key, "s"), match=m.MatchPrefix(prefix=value))
    if op == "stringContains":
        if value == "":
            return _has_string(m, key)
        return m.FieldCondition(key=shadow_path(key, "s"), match=m.MatchSubstring(substring=value))
    if op == "listContains":
        return m.FieldCondition(key=shadow_path(key, "l"), match=m.MatchValue(value=list_tag(value)))
    raise UnsupportedFilterError(f"unknown operator {op!r}", path=path)  # unreachable


def native_filter(m: Any, filter: Any) -> Any:
    """A ``models.Filter`` passes through unchanged; anything else is a fastrag filter and is translated."""
    if filter is None:
        return None
    if isinstance(filter, m.Filter):
        return filter
    return translate_filter(filter)


def and_filters(m: Any, *filters: Any) -> Any:
    """The conjunction of the filters that are not ``None`` (``None`` when none is)."""
    present = [f for f in filters if f is not None]
    if not present:
        return None
    return present[0] if len(present) == 1 else m.Filter(must=present)
