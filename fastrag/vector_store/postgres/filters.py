"""The fastrag filter AST as a parametrised PostgreSQL ``WHERE`` condition over a :class:`PgVectorStore` table.

Pure: :func:`translate_filter` makes no connection and needs no driver. Its result is SQL text with ``%s``
placeholders (psycopg's parameter style) and the list of parameters that fill them, in order. **No key and
no value is ever part of the SQL text**: keys and values travel only as parameters (a key inside a JSON
parameter or as a text parameter), so quotes, backslashes, ``%``, ``_`` and injection attempts are inert.
The SQL text is built only from this module's fixed fragments.

The condition reads two columns of the store's table:

- ``metadata`` (``jsonb``): the document's metadata;
- ``dates`` (``jsonb``): a *shadow* object written with the document, ``{key: epoch microseconds}`` for each
  metadata value that is a date string (:func:`fastrag.filters.parse_date`, computed in Python on write, so
  the date grammar is exactly fastrag's and never PostgreSQL's).

Translation (``K`` and ``V`` are parameters; every leaf is ``true`` or ``false``, never ``NULL``, so
``NOT`` has its two-valued meaning)::

    equals K V            metadata @> {"K": V}                     jsonb containment: numbers compare by
                                                                   value (1 = 1.0), a bool only a bool, a
                                                                   string only a string, a list never a
                                                                   scalar; a missing key is false
    notEquals K V         NOT (<equals>)                           a missing key matches
    in K [V1, V2]         (metadata @> {"K": V1} OR metadata @> {"K": V2});  in K []: false
    notIn K [...]         NOT (<in>)
    greaterThan K n       CASE WHEN jsonb_typeof(metadata -> K) = 'number'
                               THEN (metadata -> K)::numeric > n::numeric ELSE false END
    greaterThan K date    COALESCE((dates -> K)::numeric > µs::numeric, false)
    startsWith K p        CASE WHEN jsonb_typeof(metadata -> K) = 'string'
                               THEN starts_with(metadata ->> K, p) ELSE false END     literal, case-sensitive
    stringContains K p    CASE ... THEN strpos(metadata ->> K, p) > 0 ELSE false END  literal, case-sensitive
    listContains K V      metadata @> {"K": [V]}                   an element equal to V (by the rules of
                                                                   equals); a scalar value never matches
    andAll / orAll        (a AND b ...) / (a OR b ...)
    notAll [a, b]         NOT (a AND b)

``@>`` conditions use the table's GIN index on ``metadata`` (``jsonb_path_ops``). Numbers compare as
``numeric``: exactly, at any size (an integer beyond 64 bits too). A float is written in its shortest
round-tripping decimal form (``repr``), in the stored metadata as in a filter, so float-to-float and
int-to-int comparisons are exactly Python's; an integer and a float beyond 2**53 that Python calls equal
only because the float's binary value is that integer compare by the float's shortest decimal instead.

PostgreSQL text cannot hold the character U+0000: a key or value containing it raises
:class:`~fastrag.errors.UnsupportedFilterError` (no stored document can hold it either: the store refuses
it on write).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fastrag.errors import InvalidParameterError, UnsupportedFilterError
from fastrag.filters import RANGE_OPERATORS, And, Comparison, Filter, FilterLike, Not, Or, parse_date, parse_filter
from fastrag.vector_store._metadata import epoch_micros, is_number

__all__ = ["PgWhere", "SqlCondition", "json_number", "translate_filter"]

SqlCondition = tuple[str, list[Any]]
"""``(sql, params)``: SQL text with ``%s`` placeholders, and the parameters that fill them, in order."""

_RANGE_SQL = {"greaterThan": ">", "greaterThanOrEquals": ">=", "lessThan": "<", "lessThanOrEquals": "<="}
_CONTAINS = "metadata @> %s::jsonb"
_FALSE: SqlCondition = ("false", [])


@dataclass(frozen=True, slots=True)
class PgWhere:
    """A native PostgreSQL condition, passed to the store's ``WHERE`` clause as written.

    ``filter=PgWhere("metadata ->> 'lang' = %s", ["en"])``. The text is SQL you write (the columns are
    ``id``, ``content``, ``metadata`` (jsonb) and ``dates`` (jsonb), see ``docs/backends/postgres.md``);
    put values in ``params`` behind ``%s`` placeholders, never into the text. PostgreSQL checks it when
    the query runs; an invalid condition raises :class:`~fastrag.errors.BackendError`.

    Attributes:
        sql: the condition, with ``%s`` placeholders.
        params: one value per placeholder.
    """

    sql: str
    params: Sequence[Any] = ()
    native_backend = "postgres"
    """Marks the object as a native filter for the PostgreSQL backend."""

    def __post_init__(self) -> None:
        if not isinstance(self.sql, str) or not self.sql.strip():
            raise InvalidParameterError(f"PgWhere.sql must be a non-empty string, got {self.sql!r}")
        if isinstance(self.params, str | bytes) or not isinstance(self.params, Sequence):
            raise InvalidParameterError(f"PgWhere.params must be a sequence, got {self.params!r}")
        object.__setattr__(self, "params", tuple(self.params))


def json_number(value: int | float) -> str:
    """A number as JSON text: ``str(int)`` for an int, ``repr(float)`` for a float (its shortest exact form)."""
    return repr(float(value)) if isinstance(value, float) else str(int(value))


def translate_filter(node: FilterLike) -> SqlCondition:
    """Translate a fastrag filter into a parametrised SQL condition (see the module docstring).

    Args:
        node: a filter AST node, its JSON form (a mapping) or a JSON string.

    Returns:
        ``(sql, params)``: a boolean SQL expression over the columns ``metadata`` and ``dates`` with one
        ``%s`` per parameter, and the parameters (JSON text for ``::jsonb`` placeholders, decimal text for
        ``::numeric`` ones, plain strings for keys and string operands).

    Raises:
        InvalidParameterError: ``node`` is ``None``.
        FilterError: the filter is malformed.
        UnsupportedFilterError: a key or value holds U+0000, which PostgreSQL text cannot hold.
    """
    parsed = parse_filter(node)
    if parsed is None:
        raise InvalidParameterError("translate_filter needs a filter, got None")
    return _condition(parsed, "$")


def _condition(node: Filter, path: str) -> SqlCondition:
    if isinstance(node, Comparison):
        return _comparison(node, f"{path}.{node.operator}")
    op = {And: "andAll", Or: "orAll", Not: "notAll"}[type(node)]
    parts = [_condition(child, f"{path}.{op}[{i}]") for i, child in enumerate(node.filters)]
    params = [p for part in parts for p in part[1]]
    if len(parts) == 1:
        sql = parts[0][0]
    else:
        sql = "(" + (" OR " if isinstance(node, Or) else " AND ").join(p[0] for p in parts) + ")"
    return _negate((sql, params)) if isinstance(node, Not) else (sql, params)


def _check_text(text: str, path: str) -> str:
    if "\x00" in text:
        raise UnsupportedFilterError("PostgreSQL text cannot hold the character U+0000", path=path)
    return text


def _contains(key: str, value: Any, path: str) -> SqlCondition:
    try:
        text = json.dumps({key: value}, ensure_ascii=False, allow_nan=False)
    except ValueError as exc:  # an integer with more digits than Python will print
        raise UnsupportedFilterError(f"cannot write {type(value).__name__} value as JSON: {exc}", path=path) from exc
    return _CONTAINS, [text]


def _one_of(key: str, values: Sequence[Any], path: str) -> SqlCondition:
    distinct = list({(type(v).__name__, repr(v)): v for v in values}.values())
    if not distinct:
        return _FALSE
    if len(distinct) == 1:
        return _contains(key, distinct[0], path)
    parts = [_contains(key, v, path) for v in distinct]
    return "(" + " OR ".join(p[0] for p in parts) + ")", [p[1][0] for p in parts]


def _negate(condition: SqlCondition) -> SqlCondition:
    sql, params = condition
    if sql == "false":
        return "true", []
    return (f"NOT {sql}" if sql.startswith("(") else f"NOT ({sql})"), params


def _comparison(node: Comparison, path: str) -> SqlCondition:
    op, key, value = node.operator, node.key, node.value
    _check_text(key, f"{path}.key")
    for item in value if isinstance(value, tuple) else (value,):
        if isinstance(item, str):
            _check_text(item, f"{path}.value")
    vpath = f"{path}.value"
    if op == "equals":
        return _contains(key, value, vpath)
    if op == "notEquals":
        return _negate(_contains(key, value, vpath))
    if op == "in":
        return _one_of(key, value, vpath)
    if op == "notIn":
        return _negate(_one_of(key, value, vpath))
    if op in RANGE_OPERATORS:
        symbol = _RANGE_SQL[op]
        if is_number(value):
            return (
                f"CASE WHEN jsonb_typeof(metadata -> %s) = 'number' "
                f"THEN (metadata -> %s)::numeric {symbol} %s::numeric ELSE false END",
                [key, key, json_number(value)],
            )
        moment = parse_date(value)
        if moment is None:  # unreachable: Comparison validates range values
            raise UnsupportedFilterError(f"not a number or a date: {value!r}", path=f"{path}.value")
        return f"COALESCE((dates -> %s)::numeric {symbol} %s::numeric, false)", [key, str(epoch_micros(moment))]
    if op == "startsWith":
        return (
            "CASE WHEN jsonb_typeof(metadata -> %s) = 'string' THEN starts_with(metadata ->> %s, %s) ELSE false END",
            [key, key, value],
        )
    if op == "stringContains":
        return (
            "CASE WHEN jsonb_typeof(metadata -> %s) = 'string' THEN strpos(metadata ->> %s, %s) > 0 ELSE false END",
            [key, key, value],
        )
    if op == "listContains":
        return _contains(key, [value], vpath)
    raise UnsupportedFilterError(f"unknown operator {op!r}", path=path)  # unreachable
