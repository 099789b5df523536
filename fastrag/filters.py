"""One typed filter language for every store: the AST, its JSON form, a builder, and in-memory evaluation.

JSON form (parse with :func:`parse_filter`, dump with :func:`dump_filter`; they round-trip)::

    {"andAll": [
        {"in": {"key": "category", "value": ["technology", "science"]}},
        {"greaterThanOrEquals": {"key": "score", "value": 60}}
    ]}

The same filter from Python, with the builder (:func:`field`), and evaluated on one document's metadata
with :func:`matches`:

Examples:
    >>> from fastrag.filters import dump_filter, field, matches, parse_filter
    >>> f = field("category").one_of(["technology", "science"]) & (field("score") >= 60)
    >>> dump_filter(f)
    {'andAll': [{'in': {'key': 'category', 'value': ['technology', 'science']}},
                {'greaterThanOrEquals': {'key': 'score', 'value': 60}}]}
    >>> parse_filter(dump_filter(f)) == f
    True
    >>> matches(f, {"category": "science", "score": 72}), matches(f, {"category": "science"})
    (True, False)
    >>> matches(field("lang") != "en", {})  # a missing key matches notEquals
    True

Semantics (every store must return exactly the documents :func:`matches` selects):

=========================  ==========================================================================
operator                   matches a document when ...
=========================  ==========================================================================
``equals``                 the key is present and its scalar value equals ``value``. Numbers compare
                           by value (``1 == 1.0``); a bool equals only a bool; a string only a string.
                           A list value never ``equals`` a scalar (use ``listContains``).
``notEquals``              ``equals`` does not match; **a missing key matches**.
``in``                     ``equals`` matches for some element of ``value`` (a list of scalars).
``notIn``                  ``in`` does not match; **a missing key matches**.
``greaterThan`` ...        the key is present and of the value's kind: a number (not bool) against a
``lessThanOrEquals``       number, or a date against a date. Dates are ISO-8601 strings (or ``date``
                           / ``datetime`` objects in metadata); a date without a time is midnight, a
                           time without an offset is UTC. Anything else (missing key, a string that
                           is not a date, a bool, a list) does not match.
``startsWith``             the value is a string that starts with ``value`` (case-sensitive; ``%``,
                           ``_``, ``*`` are literal characters).
``stringContains``         the value is a string that contains ``value`` (case-sensitive, literal).
``listContains``           the value is a list with an element that ``equals`` ``value``.
``andAll``                 every sub-filter matches (at least one sub-filter required).
``orAll``                  at least one sub-filter matches (at least one sub-filter required).
``notAll``                 not every sub-filter matches: ``NOT (f1 AND f2 ...)``. With one sub-filter
                           it is plain negation. Accepts a list or a single filter object.
=========================  ==========================================================================

Keys name top-level metadata fields; a dot is part of the key, not a path.

Errors: a malformed filter raises :class:`~fastrag.errors.FilterError` whose ``path`` names the bad node,
for example ``$.andAll[1].greaterThan.value``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any, Literal, TypeAlias

from fastrag.errors import FilterError, UnsupportedFilterError

__all__ = [
    "COMPARISON_OPERATORS",
    "LOGICAL_OPERATORS",
    "And",
    "Comparison",
    "Field",
    "Filter",
    "FilterLike",
    "Not",
    "Or",
    "and_all",
    "combine_filters",
    "comparisons",
    "dump_filter",
    "field",
    "is_native_filter",
    "matches",
    "not_all",
    "or_all",
    "parse_date",
    "parse_filter",
]

Scalar: TypeAlias = str | int | float | bool

EQUALITY_OPERATORS = ("equals", "notEquals")
SET_OPERATORS = ("in", "notIn")
RANGE_OPERATORS = ("greaterThan", "greaterThanOrEquals", "lessThan", "lessThanOrEquals")
STRING_OPERATORS = ("startsWith", "stringContains")
LIST_OPERATORS = ("listContains",)
COMPARISON_OPERATORS: tuple[str, ...] = (
    EQUALITY_OPERATORS + SET_OPERATORS + RANGE_OPERATORS + STRING_OPERATORS + LIST_OPERATORS
)
LOGICAL_OPERATORS: tuple[str, ...] = ("andAll", "orAll", "notAll")

Operator = Literal[
    "equals",
    "notEquals",
    "in",
    "notIn",
    "greaterThan",
    "greaterThanOrEquals",
    "lessThan",
    "lessThanOrEquals",
    "startsWith",
    "stringContains",
    "listContains",
]


# --------------------------------------------------------------------------------------------- AST


@dataclass(frozen=True, slots=True)
class Comparison:
    """A leaf: ``operator`` applied to metadata ``key`` and ``value``. Build with :func:`field`."""

    operator: Operator
    key: str
    value: Any

    def __post_init__(self) -> None:
        _validate_comparison(self.operator, self.key, self.value, "$")
        if self.operator in SET_OPERATORS:
            object.__setattr__(self, "value", tuple(self.value))

    def __and__(self, other: Filter) -> And:
        return and_all(self, other)

    def __or__(self, other: Filter) -> Or:
        return or_all(self, other)

    def __invert__(self) -> Not:
        return Not((self,))


@dataclass(frozen=True, slots=True)
class And:
    """``andAll``: every sub-filter matches."""

    filters: tuple[Filter, ...]

    def __post_init__(self) -> None:
        _validate_children("andAll", self.filters)

    def __and__(self, other: Filter) -> And:
        return and_all(self, other)

    def __or__(self, other: Filter) -> Or:
        return or_all(self, other)

    def __invert__(self) -> Not:
        return Not((self,))


@dataclass(frozen=True, slots=True)
class Or:
    """``orAll``: at least one sub-filter matches."""

    filters: tuple[Filter, ...]

    def __post_init__(self) -> None:
        _validate_children("orAll", self.filters)

    def __and__(self, other: Filter) -> And:
        return and_all(self, other)

    def __or__(self, other: Filter) -> Or:
        return or_all(self, other)

    def __invert__(self) -> Not:
        return Not((self,))


@dataclass(frozen=True, slots=True)
class Not:
    """``notAll``: ``NOT (f1 AND f2 ...)``; with one sub-filter, plain negation."""

    filters: tuple[Filter, ...]

    def __post_init__(self) -> None:
        _validate_children("notAll", self.filters)

    def __and__(self, other: Filter) -> And:
        return and_all(self, other)

    def __or__(self, other: Filter) -> Or:
        return or_all(self, other)

    def __invert__(self) -> Filter:
        return self.filters[0] if len(self.filters) == 1 else And(self.filters)


Filter: TypeAlias = Comparison | And | Or | Not
"""A node of the filter AST."""

FilterLike: TypeAlias = Filter | Mapping[str, Any] | str
"""What public APIs accept as a filter: an AST node, its JSON form as a mapping, or a JSON string."""


def _validate_children(op: str, filters: Any) -> None:
    if not isinstance(filters, tuple) or not filters:
        raise FilterError(f"{op} needs at least one sub-filter", path=f"$.{op}")
    for i, child in enumerate(filters):
        if not isinstance(child, Comparison | And | Or | Not):
            raise FilterError(f"{op} element is not a filter: {child!r}", path=f"$.{op}[{i}]")


def and_all(*filters: Filter) -> And:
    """``andAll`` of ``filters``; nested ``And`` nodes are flattened."""
    return And(_flatten(And, filters))


def or_all(*filters: Filter) -> Or:
    """``orAll`` of ``filters``; nested ``Or`` nodes are flattened."""
    return Or(_flatten(Or, filters))


def not_all(*filters: Filter) -> Not:
    """``notAll`` of ``filters``: ``NOT (f1 AND f2 ...)``."""
    return Not(tuple(filters))


def _flatten(kind: type, filters: Iterable[Filter]) -> tuple[Filter, ...]:
    out: list[Filter] = []
    for f in filters:
        if isinstance(f, kind):
            out.extend(f.filters)  # type: ignore[attr-defined]
        else:
            out.append(f)
    return tuple(out)


# ----------------------------------------------------------------------------------------- builder


class Field:
    """Builder for comparisons on one metadata key: ``field("year") >= 2020``.

    Comparison operators (``==``, ``!=``, ``>``, ``>=``, ``<``, ``<=``) return :class:`Comparison`
    nodes; combine nodes with ``&`` (andAll), ``|`` (orAll) and ``~`` (notAll).
    """

    __slots__ = ("key",)
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, key: str) -> None:
        self.key = key

    def __eq__(self, value: Any) -> Comparison:  # type: ignore[override]
        return Comparison("equals", self.key, value)

    def __ne__(self, value: Any) -> Comparison:  # type: ignore[override]
        return Comparison("notEquals", self.key, value)

    def __gt__(self, value: Any) -> Comparison:
        return Comparison("greaterThan", self.key, value)

    def __ge__(self, value: Any) -> Comparison:
        return Comparison("greaterThanOrEquals", self.key, value)

    def __lt__(self, value: Any) -> Comparison:
        return Comparison("lessThan", self.key, value)

    def __le__(self, value: Any) -> Comparison:
        return Comparison("lessThanOrEquals", self.key, value)

    def one_of(self, values: Iterable[Scalar]) -> Comparison:
        """``in``: the value equals one of ``values``."""
        return Comparison("in", self.key, values if isinstance(values, str | bytes) else list(values))

    def not_one_of(self, values: Iterable[Scalar]) -> Comparison:
        """``notIn``: the value equals none of ``values`` (a missing key matches)."""
        return Comparison("notIn", self.key, values if isinstance(values, str | bytes) else list(values))

    def starts_with(self, prefix: str) -> Comparison:
        """``startsWith``: a string value beginning with ``prefix`` (literal, case-sensitive)."""
        return Comparison("startsWith", self.key, prefix)

    def contains(self, substring: str) -> Comparison:
        """``stringContains``: a string value containing ``substring`` (literal, case-sensitive)."""
        return Comparison("stringContains", self.key, substring)

    def list_contains(self, value: Scalar) -> Comparison:
        """``listContains``: a list value with an element equal to ``value``."""
        return Comparison("listContains", self.key, value)


def field(key: str) -> Field:
    """Start a comparison on metadata ``key``: ``field("lang") == "en"``."""
    return Field(key)


# --------------------------------------------------------------------------------------- validation


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_scalar(value: Any) -> bool:
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return isinstance(value, str | int | float | bool)


def _validate_comparison(op: str, key: Any, value: Any, path: str) -> None:
    here = f"{path}.{op}"
    if op not in COMPARISON_OPERATORS:
        raise FilterError(f"unknown operator {op!r}", path=path)
    if not isinstance(key, str) or not key:
        raise FilterError(f"key must be a non-empty string, got {key!r}", path=f"{here}.key")
    if not _is_unicode(key):
        raise FilterError(f"key {key!r} is not valid Unicode (a lone surrogate)", path=f"{here}.key")
    vpath = f"{here}.value"
    for i, item in enumerate(value if isinstance(value, list | tuple) else [value]):
        if isinstance(item, str) and not _is_unicode(item):  # no store holds such text: a bad argument
            where = f"{vpath}[{i}]" if isinstance(value, list | tuple) else vpath
            raise FilterError(f"{op} value {item!r} is not valid Unicode (a lone surrogate)", path=where)
    if op in EQUALITY_OPERATORS or op in LIST_OPERATORS:
        if not _is_scalar(value):
            raise FilterError(f"{op} needs a string, finite number or bool, got {value!r}", path=vpath)
    elif op in SET_OPERATORS:
        if isinstance(value, str | bytes) or not isinstance(value, Sequence):
            raise FilterError(f"{op} needs a list of scalars, got {value!r}", path=vpath)
        for i, item in enumerate(value):
            if not _is_scalar(item):
                raise FilterError(f"{op} list items must be strings, finite numbers or bools, got {item!r}",
                                  path=f"{vpath}[{i}]")
    elif op in RANGE_OPERATORS:
        if _is_number(value):
            if isinstance(value, float) and not math.isfinite(value):  # an int too big for a float is finite
                raise FilterError(f"{op} needs a finite number, got {value!r}", path=vpath)
        elif isinstance(value, str):
            if parse_date(value) is None:
                raise FilterError(
                    f"{op} needs a number or an ISO-8601 date, got the string {value!r}", path=vpath
                )
        else:
            raise FilterError(f"{op} needs a number or an ISO-8601 date, got {value!r}", path=vpath)
    elif op in STRING_OPERATORS:
        if not isinstance(value, str):
            raise FilterError(f"{op} needs a string, got {value!r}", path=vpath)


# ------------------------------------------------------------------------------------------ parsing


def parse_filter(obj: FilterLike | None, *, path: str = "$") -> Filter | None:
    """Parse a filter from its JSON form (a mapping or a JSON string); AST nodes pass through.

    Args:
        obj: ``None``, an AST node, a mapping in the JSON form, or a JSON string of it.
        path: path prefix used in error messages.

    Returns:
        The AST, or ``None`` when ``obj`` is ``None``.

    Raises:
        FilterError: the filter is malformed; ``path`` names the bad node.
    """
    if obj is None:
        return None
    if isinstance(obj, Comparison | And | Or | Not):
        return obj
    if isinstance(obj, str):
        try:
            obj = json.loads(obj)
        except ValueError as exc:  # JSONDecodeError, or an integer literal over Python's digit limit
            raise FilterError(f"filter is not valid JSON: {getattr(exc, 'msg', exc)}", path=path) from exc
        except RecursionError as exc:
            raise FilterError(f"filter nests deeper than {MAX_FILTER_DEPTH} levels", path=path) from exc
    return _parse_node(obj, path, 0)


MAX_FILTER_DEPTH = 32
"""How deeply logical operators may nest; deeper filters raise :class:`FilterError`."""


def _parse_node(obj: Any, path: str, depth: int) -> Filter:
    if depth > MAX_FILTER_DEPTH:
        raise FilterError(f"filter nests deeper than {MAX_FILTER_DEPTH} levels", path=path)
    if not isinstance(obj, Mapping):
        raise FilterError(f"a filter node must be an object, got {type(obj).__name__}", path=path)
    if len(obj) != 1:
        raise FilterError(
            f"a filter node must have exactly one operator, got {sorted(obj, key=str)!r}", path=path
        )
    ((op, body),) = obj.items()
    here = f"{path}.{op}"
    if op in LOGICAL_OPERATORS:
        if op == "notAll" and isinstance(body, Mapping):
            return Not((_parse_node(body, here, depth + 1),))
        if isinstance(body, str | bytes) or not isinstance(body, Sequence) or not body:
            raise FilterError(f"{op} needs a non-empty list of filters", path=here)
        children = tuple(_parse_node(child, f"{here}[{i}]", depth + 1) for i, child in enumerate(body))
        return {"andAll": And, "orAll": Or, "notAll": Not}[op](children)
    if op not in COMPARISON_OPERATORS:
        raise FilterError(
            f"unknown operator {op!r}; expected one of {', '.join(COMPARISON_OPERATORS + LOGICAL_OPERATORS)}",
            path=path,
        )
    if not isinstance(body, Mapping) or set(body) != {"key", "value"}:
        raise FilterError(f'{op} needs an object with exactly "key" and "value"', path=here)
    _validate_comparison(op, body["key"], body["value"], path)
    return Comparison(op, body["key"], body["value"])  # type: ignore[arg-type]


def dump_filter(node: Filter) -> dict[str, Any]:
    """The JSON form of ``node`` (a plain dict); ``parse_filter(dump_filter(f)) == f``."""
    if isinstance(node, Comparison):
        value = list(node.value) if node.operator in SET_OPERATORS else node.value
        return {node.operator: {"key": node.key, "value": value}}
    op = {And: "andAll", Or: "orAll", Not: "notAll"}[type(node)]
    return {op: [dump_filter(child) for child in node.filters]}


def comparisons(node: Filter, path: str = "$") -> Iterator[tuple[str, Comparison]]:
    """Every comparison in ``node``, in document order, with the JSON path of its node.

    Paths are those :class:`~fastrag.errors.FilterError` reports: ``"$"`` for a lone comparison,
    ``"$.andAll[0].notAll[1]"`` for one nested in logical nodes; append ``".<operator>.key"`` or
    ``".<operator>.value"`` to name a part of it.
    """
    if isinstance(node, Comparison):
        yield path, node
        return
    op = {And: "andAll", Or: "orAll", Not: "notAll"}[type(node)]
    for i, child in enumerate(node.filters):
        yield from comparisons(child, f"{path}.{op}[{i}]")


# --------------------------------------------------------------------------------------- evaluation

_MISSING = object()


def parse_date(value: Any) -> datetime | None:
    """Read an ISO-8601 date or date-time as an aware ``datetime`` (UTC when no offset), else ``None``.

    Accepts ``date`` and ``datetime`` objects, and strings such as ``2024-05-01``,
    ``2024-05-01T12:00:00``, ``2024-05-01T12:00:00Z`` and ``2024-05-01T12:00:00+02:00``.
    A string must start with a four-digit year and a dash, so plain numbers are never dates.
    """
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    if not isinstance(value, str) or len(value) < 10 or not value[:4].isdigit() or value[4] != "-":
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _scalar_equals(actual: Any, expected: Scalar) -> bool:
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(expected, bool) and isinstance(actual, bool) and actual is expected
    if _is_number(expected):
        return _is_number(actual) and actual == expected
    if isinstance(expected, str):
        return isinstance(actual, str) and actual == expected
    return False


def _compare(op: str, actual: Any, expected: Any) -> bool:
    if _is_number(expected):
        if not _is_number(actual) or (isinstance(actual, float) and math.isnan(actual)):
            return False
        left, right = actual, expected
    else:
        left, right = parse_date(actual), parse_date(expected)
        if left is None or right is None:
            return False
    if op == "greaterThan":
        return left > right
    if op == "greaterThanOrEquals":
        return left >= right
    if op == "lessThan":
        return left < right
    return left <= right


def matches(filter: FilterLike | None, metadata: Mapping[str, Any]) -> bool:  # noqa: A002
    """Evaluate ``filter`` against one document's ``metadata``; ``None`` matches everything.

    This is the reference semantics (see the module docstring); every store must agree with it.

    Raises:
        FilterError: the filter is malformed.
    """
    node = parse_filter(filter)
    return True if node is None else _matches(node, metadata)


def _matches(node: Filter, metadata: Mapping[str, Any]) -> bool:
    if isinstance(node, And):
        return all(_matches(child, metadata) for child in node.filters)
    if isinstance(node, Or):
        return any(_matches(child, metadata) for child in node.filters)
    if isinstance(node, Not):
        return not all(_matches(child, metadata) for child in node.filters)
    op, actual, expected = node.operator, metadata.get(node.key, _MISSING), node.value
    if op == "equals":
        return _scalar_equals(actual, expected)
    if op == "notEquals":
        return not _scalar_equals(actual, expected)
    if op == "in":
        return any(_scalar_equals(actual, v) for v in expected)
    if op == "notIn":
        return not any(_scalar_equals(actual, v) for v in expected)
    if op in RANGE_OPERATORS:
        return actual is not _MISSING and _compare(op, actual, expected)
    if op == "startsWith":
        return isinstance(actual, str) and actual.startswith(expected)
    if op == "stringContains":
        return isinstance(actual, str) and expected in actual
    if op == "listContains":
        return isinstance(actual, list | tuple) and any(_scalar_equals(item, expected) for item in actual)
    raise FilterError(f"unknown operator {op!r}")  # unreachable: Comparison validates operators


def is_native_filter(obj: Any) -> bool:
    """Whether ``obj`` is a backend's own filter rather than a fastrag one.

    A fastrag filter is an AST node, a mapping (the JSON form) or a JSON string; anything else (a Qdrant
    ``models.Filter``, an ``OpenSearchQuery``, a Milvus ``MilvusExpr``, ...) is native and passes through
    the retrievers untouched, for the store to accept or reject with a typed error.
    """
    return obj is not None and not isinstance(obj, Comparison | And | Or | Not | Mapping | str)


def combine_filters(*filters: FilterLike | Any | None) -> Filter | Any | None:
    """``andAll`` of the given filters, skipping ``None``; ``None`` when none is given.

    A single native filter (see :func:`is_native_filter`) is returned as it is. A native filter cannot be
    AND-ed with another filter here, since only its backend understands it: that raises rather than
    dropping either filter.

    Raises:
        FilterError: one of the filters is malformed.
        UnsupportedFilterError: a native filter was combined with another filter.
    """
    given = [f for f in filters if f is not None]
    natives = [f for f in given if is_native_filter(f)]
    if natives:
        if len(given) > 1:
            raise UnsupportedFilterError(
                "a native backend filter cannot be combined with another filter; express both in the "
                "backend's own filter, or both as fastrag filters"
            )
        return natives[0]
    nodes = [node for f in given if (node := parse_filter(f)) is not None]
    if not nodes:
        return None
    return nodes[0] if len(nodes) == 1 else and_all(*nodes)
