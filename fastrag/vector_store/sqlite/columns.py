"""Columnar evaluation of the filter AST: one in-memory column per metadata key, one boolean mask per filter.

The SQLite store keeps, for each top-level metadata key, a :class:`Column` holding that key's value at every
row position ``0 .. n-1`` (one position per rowid; deleted rows are masked by the store, not here), and asks
:func:`filter_mask` for the rows a filter selects::

    >>> from fastrag.filters import field
    >>> cat = Column.from_values([7, "7", MISSING, 7.0, True])
    >>> filter_mask(field("cat") == 7, 5, {"cat": cat}.__getitem__).tolist()
    [True, False, False, True, False]

**Exactness.** ``filter_mask(f, n, column)[i] == matches(f, metadata_i)`` for every position, where
``metadata_i`` is the metadata the column was built from. A column is dictionary-encoded: each position holds
an ``int32`` code into the column's distinct entries (a missing key is an entry of its own). A comparison is
answered per distinct entry and gathered to the rows with ``per_code[codes]``; per entry it is, by default,
:func:`fastrag.filters.matches` itself, called once on ``{key: entry}`` (``{}`` for a missing key), so the
semantics are the reference's by construction. Three faster paths replace that call where it would cost
too much, each reasoned below and property-tested against :func:`~fastrag.filters.matches`:

- ``equals`` / ``notEquals`` / ``in`` / ``notIn`` on a column of more than :data:`_PER_DISTINCT_LIMIT`
  entries: the entries that can equal a filter value are found in the column's hash index (a number is
  looked up as the ``int`` and as the ``float`` it equals exactly, so ``1`` finds ``1.0``; a bool only a
  bool; a string only a string), and each is confirmed with :func:`~fastrag.filters.matches`. Every other
  entry cannot be equal (Python's ``==`` between an ``int``/``float``/``str``/``bool`` and another of the
  kinds the index is keyed by implies equal hash keys), so it takes the operator's "no match" answer.
- numeric ranges on such a column: one ``float64`` comparison over the entries, used only when every
  integer entry and the bound are exactly representable in ``float64`` (then the ``float64`` comparison
  *is* Python's exact ``int``/``float`` comparison); bools, NaN, strings, lists and missing keys are marked
  "not a number", as :func:`~fastrag.filters.matches` treats them. Otherwise the per-entry reference runs.
- date ranges (a range whose bound is a string): every entry is read once with the reference's own
  :func:`fastrag.filters.parse_date` and kept as exact epoch microseconds (``int64``); the bound likewise.
  Aware ``datetime`` comparison is a comparison of those instants, so the masks agree.

These paths apply only to columns whose entries are all of the plain JSON kinds (``None``, ``bool``,
``int``, ``float``, ``str``, ``list``, ``dict``; a ``tuple`` too); a column built with other Python objects
(enums, ``numpy`` scalars, ``datetime`` values) answers every comparison through the reference, except date
ranges, which read those objects with :func:`~fastrag.filters.parse_date` as well.

**Building from SQLite.** :meth:`Column.from_json` takes ``metadata -> '$."key"'`` per row (the JSON text of
the value, SQLite 3.38 or later), as ``SELECT metadata -> ? FROM documents ORDER BY rowid`` gives it with
the path ``'$."key"'`` bound, and is exact for every value: it decodes that text as :func:`json.loads`
decodes the whole document. :meth:`Column.from_sqlite` takes ``json_type`` and ``json_extract`` per row;
``json_extract`` loses two things that :func:`json.loads` keeps (seen with SQLite 3.40): an integer outside
the signed 64-bit range comes back as a rounded ``float`` (detected: :meth:`~Column.from_sqlite` raises
rather than guess), and a string is cut at its first ``\\u0000`` (undetectable from the value). Neither can
address a key holding ``"``, ``\\`` or a control character through a ``$."key"`` path (JSON text escapes
them and the path does not unescape); build such a key's column with :meth:`Column.from_values` from the
decoded metadata.

**Threads.** A :class:`Column` never changes after it is built. What is derived from it on demand (``float64``
values, parsed dates) is computed once under the column's lock and then only read, so any number of threads
may call :func:`filter_mask` on the same columns at once.
"""

from __future__ import annotations

import json
import operator
import threading
from collections.abc import Callable, Hashable, Iterable, Sequence
from datetime import date
from functools import partial
from itertools import compress
from typing import Any, Final

import numpy as np

from fastrag.errors import InvalidParameterError
from fastrag.filters import Comparison, Filter, Not, Or, matches, parse_date, parse_filter
from fastrag.vector_store.sqlite.cancellation import checked
from fastrag.vector_store._metadata import epoch_micros

__all__ = ["MISSING", "Column", "filter_mask"]


class _Missing:
    """The type of :data:`MISSING`; there is exactly one instance."""

    __slots__ = ()
    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __reduce__(self) -> str:
        return "MISSING"  # pickles as this module's global, so the identity survives


MISSING: Final = _Missing()
"""Stands for an absent key in :meth:`Column.from_values`, and is what ``column[i]`` returns for
one. It is not ``None``: ``None`` is the JSON ``null`` value, which is present."""

_PER_DISTINCT_LIMIT = 1024
"""Columns with at most this many distinct entries answer equality and numeric-range comparisons by calling
:func:`fastrag.filters.matches` once per entry (about 3 microseconds each); larger ones use the hash-index
and ``float64`` paths described in the module docstring. Tests lower it to 0 to exercise those paths."""

_EQUALITY_OPERATORS = frozenset({"equals", "notEquals", "in", "notIn"})
_NEGATED_OPERATORS = frozenset({"notEquals", "notIn"})
_SET_OPERATORS = frozenset({"in", "notIn"})
_RANGE_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "greaterThan": operator.gt,
    "greaterThanOrEquals": operator.ge,
    "lessThan": operator.lt,
    "lessThanOrEquals": operator.le,
}

_SCALAR_TYPES = frozenset({str, int, float, bool, type(None), _Missing})
"""Exact types keyed as ``(type, value)`` without further checks."""
_CONTAINER_TYPES = frozenset({list, dict, tuple})
_PLAIN_TYPES = _SCALAR_TYPES | _CONTAINER_TYPES
_IS_FLOAT = partial(operator.is_, float)
_IS_INT = partial(operator.is_, int)
_LOOKUP_TYPES = frozenset({str, int, float, bool})
"""Exact types of filter values that the hash-index path looks up; anything else goes to the reference."""


class _Identity:
    """Tag of the key given to an unhashable value that cannot be written as JSON: its ``id``."""


def _key(value: Any) -> tuple[Hashable, Hashable]:
    """The dictionary-encoding key of one value: equal keys mean equal answers from ``matches``.

    Scalars of the plain kinds are keyed ``(type, value)``, so ``1``, ``1.0`` and ``True`` are three
    entries; values equal under ``==`` within one of those types (``0.0`` and ``-0.0``) share an entry,
    which is safe because :func:`fastrag.filters.matches` only compares them with ``==``, ``<``, ``>``
    and string methods. Containers are keyed by their JSON text, which tells ``1``, ``1.0`` and ``true``
    apart; other hashable objects by ``(type, value)``; anything else by identity.
    """
    cls = value.__class__
    if cls in _SCALAR_TYPES:
        return (cls, value)
    if cls in _CONTAINER_TYPES:
        try:
            return (cls, json.dumps(value))
        except (TypeError, ValueError):
            return (_Identity, id(value))
    try:
        hash(value)
    except TypeError:
        return (_Identity, id(value))
    return (cls, value)


# ---------------------------------------------------------------------------------------- decoding

_INT64_MIN = -(2**63)
_EXTRACTED_CLASS = {"integer": int, "real": float, "text": str}
"""The class json_extract returns for each scalar type, when it returns the value unchanged."""
_NUMBER_START = frozenset("-0123456789")


def _lossy_integer(value: Any) -> InvalidParameterError:
    return InvalidParameterError(
        f"json_extract returned an integer as the float {value!r}: SQLite rounds integers outside the signed "
        "64-bit range; build this column with Column.from_json from `metadata -> path`"
    )


def _decode_sqlite(kind: str | None, value: Any) -> Any:
    """The value :func:`json.loads` gives for one ``(json_type, json_extract)`` pair from SQLite.

    Raises:
        InvalidParameterError: an unknown type, a value of the wrong kind for its type, or an integer that
            ``json_extract`` returned as a ``float`` (SQLite does so outside the signed 64-bit range).
    """
    if kind is None:
        return MISSING
    if kind == "null":
        return None
    if kind == "true":
        return True
    if kind == "false":
        return False
    cls = value.__class__
    if kind == "integer":
        if cls is int:
            return value
        if cls is float:
            raise _lossy_integer(value)
    elif kind == "real":
        if cls is float:
            return value
    elif kind == "text":
        if cls is str:
            return value
    elif kind in ("array", "object"):
        if cls is str:
            decoded = _decode_json(value)
            if decoded.__class__ is (list if kind == "array" else dict):
                return decoded
    else:
        raise InvalidParameterError(f"unknown json_type {kind!r}; expected one of null, true, false, integer, "
                                    "real, text, array, object, or None for a missing key")
    raise InvalidParameterError(f"json_type {kind!r} does not fit the value {value!r}")


def _decode_json(text: Any) -> Any:
    """``json.loads(text)``; ``None`` is a missing key.

    Raises:
        InvalidParameterError: ``text`` is not a string, or not valid JSON.
    """
    if text is None:
        return MISSING
    if text.__class__ is not str:
        raise InvalidParameterError(f"expected the JSON text of a value or None, got {text!r}")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidParameterError(f"not valid JSON: {text[:80]!r}: {exc}") from exc


def _decode_json_texts(texts: Sequence[Any]) -> list[Any]:
    """:func:`_decode_json` of each text, with every number literal decoded by one ``json.loads`` call.

    The number-like texts (first character ``-`` or a digit) are joined with commas into one JSON array.
    When that array holds exactly one number per text, each is what ``json.loads`` gives for its text
    alone: a text holding a comma would add elements, and no text can add none. Otherwise (a count or a
    kind that does not fit, or invalid JSON) each text is decoded, and refused, on its own.

    Raises:
        InvalidParameterError: a text is neither ``None`` nor a string of valid JSON.
    """
    flags = [text.__class__ is str and text[:1] in _NUMBER_START for text in texts]
    numeric = list(compress(texts, flags))
    if numeric:
        try:
            decoded = json.loads("[" + ",".join(numeric) + "]")
        except ValueError:
            decoded = None
        if decoded is not None and len(decoded) == len(numeric) and set(map(type, decoded)) <= {int, float}:
            if len(numeric) == len(texts):
                return decoded
            numbers = iter(decoded)
            return [next(numbers) if flag else _decode_json(text) for text, flag in zip(texts, flags, strict=True)]
    return [_decode_json(text) for text in texts]


def _dictionary(items: Sequence[Any]) -> tuple[np.ndarray, list[Any]]:
    """Dictionary-encode hashable ``items``: an ``int64`` code per item and the distinct items, each the
    first of its equals, in order of first appearance.

    Raises:
        InvalidParameterError: an item is not hashable.
    """
    try:
        first = dict.fromkeys(items)
    except TypeError as exc:
        raise InvalidParameterError(f"column values must be hashable here: {exc}") from exc
    distinct = list(first)
    code_of = dict(zip(distinct, range(len(distinct)), strict=True))
    return np.fromiter(map(code_of.__getitem__, items), dtype=np.int64, count=len(items)), distinct


# ------------------------------------------------------------------------------------------ column

_NOT_COMPUTED: Final = object()
_CONSTRUCT = object()


class Column:
    """One metadata key's values at row positions ``0 .. n-1``, dictionary-encoded and immutable.

    Build one with :meth:`from_json`, :meth:`from_sqlite`, :meth:`from_values` or :meth:`missing`, and
    extend it with :meth:`concat` (which returns a new column). ``len(column)`` is ``n``; ``column[i]``
    is the value at position ``i`` as :func:`json.loads` gives it, or :data:`MISSING`.

    Memory: 4 bytes per position (an ``int32`` code) plus, per distinct value, its Python object and a
    hash-index slot, and, once a filter needed them, 9 bytes for its ``float64`` number and 9 for its date.
    """

    __slots__ = ("_codes", "_dates", "_entries", "_index", "_lock", "_numbers", "_plain")

    _codes: np.ndarray
    _entries: tuple[Any, ...]
    _index: dict[Hashable, dict[Any, int]]  # key tag (a type) -> key value -> code; see _key
    _plain: bool
    _lock: threading.Lock
    _numbers: Any
    _dates: Any

    def __init__(
        self,
        token: object,
        codes: np.ndarray,
        entries: Sequence[Any],
        index: dict[Hashable, dict[Any, int]],
        *,
        numbers: Any = _NOT_COMPUTED,
        dates: Any = _NOT_COMPUTED,
    ) -> None:
        if token is not _CONSTRUCT:
            raise TypeError("build a Column with Column.from_json, from_sqlite, from_values or missing")
        codes.flags.writeable = False
        set_ = object.__setattr__
        set_(self, "_codes", codes)
        set_(self, "_entries", tuple(entries))
        set_(self, "_index", index)
        set_(self, "_plain", set(map(type, self._entries)) <= _PLAIN_TYPES)
        set_(self, "_lock", threading.Lock())
        set_(self, "_numbers", numbers)
        set_(self, "_dates", dates)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Column is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Column is immutable")

    # ----------------------------------------------------------------------------------- building

    @classmethod
    def from_json(cls, texts: Sequence[str | None]) -> Column:
        """A column from the JSON text of each row's value, as SQLite's ``metadata -> '$."key"'`` gives it.

        Exact for every value: the text is decoded as :func:`json.loads` decodes it (SQLite's ``->`` keeps
        number literals and string escapes as written), so integers of any size and strings holding
        ``\\u0000`` come back as they were stored. Each distinct text is decoded once.

        Args:
            texts: per row position, the value's JSON text, or ``None`` where the key is missing (SQL
                ``NULL``; a JSON ``null`` value is the text ``"null"``).

        Returns:
            A column of ``len(texts)`` positions.

        Raises:
            InvalidParameterError: an element is neither ``None`` nor a string of valid JSON.
        """
        codes, distinct = _dictionary(texts)
        return cls._from_distinct(codes, _decode_json_texts(distinct))

    @classmethod
    def from_sqlite(cls, types: Sequence[str | None], values: Sequence[Any]) -> Column:
        """A column from SQLite's ``json_type(metadata, '$."key"')`` and ``json_extract(metadata, '$."key"')``.

        ``'true'`` / ``'false'`` rows (which ``json_extract`` returns as ``1`` / ``0``) become bools,
        ``'array'`` / ``'object'`` rows are decoded from their JSON text, ``'null'`` is ``None`` and a
        ``None`` type is a missing key. Each distinct ``(type, value)`` pair is decoded once.

        Exact except where ``json_extract`` itself lost information: a string with ``\\u0000`` is returned
        cut at that character, which cannot be seen here (use :meth:`from_json` where metadata may hold
        one). An integer outside the signed 64-bit range, which ``json_extract`` returns as a rounded
        float, is refused. Where rows hold both ``0.0`` and ``-0.0`` under type ``'real'``, ``column[i]``
        may give either (they are one entry: no filter tells them apart).

        Args:
            types: per row position, ``json_type``'s answer: ``None`` (key missing), ``'null'``,
                ``'true'``, ``'false'``, ``'integer'``, ``'real'``, ``'text'``, ``'array'`` or ``'object'``.
            values: per row position, ``json_extract``'s answer: an ``int``, ``float`` or ``str``, the JSON
                text for ``'array'`` / ``'object'``, anything for ``None`` / ``'null'`` / booleans.

        Returns:
            A column of ``len(types)`` positions.

        Raises:
            InvalidParameterError: the sequences differ in length, a type is unknown, a value does not fit
                its type, an array or object is not valid JSON, or an ``'integer'`` value is a float.
        """
        if len(types) != len(values):
            raise InvalidParameterError(f"{len(types)} json types but {len(values)} values")
        # Types and values are encoded apart (no tuple per row); a dict merges 1, 1.0 and the 1 of a
        # 'true', which the type code then tells apart again.
        try:
            kinds = list(dict.fromkeys(types))
        except TypeError as exc:
            raise InvalidParameterError(f"json types must be strings or None: {exc}") from exc
        value_codes, distinct_values = _dictionary(values)
        if len(kinds) == 1 and set(map(type, distinct_values)) == {_EXTRACTED_CLASS.get(kinds[0])}:
            return cls._from_distinct(value_codes, distinct_values)  # json_extract gave them unchanged
        if len(kinds) <= 1:
            codes, pairs = value_codes, [(kinds[0], value) for value in distinct_values]
        else:
            type_codes, kinds = _dictionary(types)
            combined = type_codes * len(distinct_values) + value_codes
            _, first_rows, codes = np.unique(combined, return_index=True, return_inverse=True)
            pairs = [(types[row], values[row]) for row in first_rows.tolist()]  # each from a row of its type
        entries = [
            value if value.__class__ is _EXTRACTED_CLASS.get(kind) else _decode_sqlite(kind, value)
            for kind, value in pairs
        ]
        if "integer" in kinds and _INT64_MIN in distinct_values:
            # json_extract gives the float -2.0**63 for -(2**63) - 1 (and lower), equal to the int -(2**63):
            # the rows sharing that int's entry must all hold an int.
            for group, (kind, value) in enumerate(pairs):
                if kind == "integer" and value == _INT64_MIN:
                    for row in np.flatnonzero(codes == group).tolist():
                        if values[row].__class__ is not int:
                            raise _lossy_integer(values[row])
        return cls._from_distinct(codes, entries)

    @classmethod
    def from_values(cls, values: Sequence[Any]) -> Column:
        """A column from Python values, as :func:`json.loads` gives them, with :data:`MISSING` for an absent key.

        Other Python objects (``datetime``, enums, ...) are accepted and evaluated exactly, through
        :func:`fastrag.filters.matches` per distinct value. Containers are grouped by their JSON text.

        Args:
            values: per row position, the key's value in that row's metadata, or :data:`MISSING`.

        Returns:
            A column of ``len(values)`` positions.
        """
        values = list(values)
        if len(set(map(type, values))) <= 1 and (not values or values[0].__class__ in _SCALAR_TYPES):
            return cls._from_distinct(*_dictionary(values))  # one scalar type: 1 and 1.0 cannot both occur
        keys = [(v.__class__, v) if v.__class__ in _SCALAR_TYPES else _key(v) for v in values]
        codes, distinct = _dictionary(keys)
        first = dict(zip(reversed(keys), reversed(values), strict=True))  # the first value under each key
        return cls._from_distinct(codes, [first[key] for key in distinct])

    @classmethod
    def missing(cls, n: int) -> Column:
        """A column of ``n`` positions where the key is missing everywhere.

        Raises:
            InvalidParameterError: ``n`` is negative or not an int.
        """
        _check_length(n)
        return cls(_CONSTRUCT, np.zeros(n, dtype=np.int32), [MISSING], {_Missing: {MISSING: 0}})

    @classmethod
    def _from_distinct(cls, codes: np.ndarray, decoded: list[Any]) -> Column:
        """The column whose position ``i`` holds ``decoded[codes[i]]``; entries with equal :func:`_key`
        (``"1.0"`` and ``"1.00"`` read as JSON) are merged into one."""
        classes = list(map(type, decoded))
        kinds = set(classes)
        if kinds <= _SCALAR_TYPES:  # the usual case: one dict per type, built at C speed
            index: dict[Hashable, dict[Any, int]] = {}
            for kind in kinds:
                if len(kinds) == 1:
                    values, positions = decoded, range(len(decoded))
                else:
                    chosen = list(map(partial(operator.is_, kind), classes))
                    values, positions = list(compress(decoded, chosen)), compress(range(len(decoded)), chosen)
                index[kind] = dict(zip(values, positions, strict=False))
                if len(index[kind]) < len(values):
                    break  # equal values to merge (0.0 and -0.0 from two texts, say)
            else:
                return cls(_CONSTRUCT, codes.astype(np.int32), decoded, index)
        index, entries = {}, []
        remap = np.empty(len(decoded), dtype=np.int64)
        for i, entry in enumerate(decoded):
            remap[i] = _add_entry(index, entries, entry)
        if len(entries) >= 2**31:
            raise InvalidParameterError("a column holds at most 2**31 - 1 distinct values")
        return cls(_CONSTRUCT, remap[codes].astype(np.int32), entries, index)

    def concat(self, other: Column) -> Column:
        """A new column holding this column's positions followed by ``other``'s.

        Cost: proportional to the positions and distinct values of both; numbers and dates already
        derived for this column are reused and only ``other``'s new values are read.

        Raises:
            InvalidParameterError: ``other`` is not a :class:`Column`.
        """
        if not isinstance(other, Column):
            raise InvalidParameterError(f"can only concat a Column, got {type(other).__name__}")
        index = {tag: dict(inner) for tag, inner in self._index.items()}
        entries = list(self._entries)
        remap = np.fromiter(
            (_add_entry(index, entries, entry) for entry in other._entries), dtype=np.int64, count=other.cardinality
        )
        if len(entries) >= 2**31:
            raise InvalidParameterError("a column holds at most 2**31 - 1 distinct values")
        codes = np.concatenate([self._codes, remap.astype(np.int32)[other._codes]])
        added = entries[len(self._entries):]
        numbers, dates = self._numbers, self._dates
        if numbers is not _NOT_COMPUTED:
            numbers = _join_numbers(numbers, _derive_numbers(added))
        if dates is not _NOT_COMPUTED:
            dates = _join_dates(dates, _derive_dates(added))
        return Column(_CONSTRUCT, codes, entries, index, numbers=numbers, dates=dates)

    def head(self, n: int) -> Column:
        """The column of this one's first ``n`` positions (sharing its entries and derived caches: extra
        entries that no kept position uses are harmless, as masks are gathered by position).

        Raises:
            InvalidParameterError: ``n`` is negative or past the column's end.
        """
        if not isinstance(n, int) or not 0 <= n <= len(self):
            raise InvalidParameterError(f"head({n!r}) of a column of {len(self)} positions")
        if n == len(self):
            return self
        return Column(_CONSTRUCT, self._codes[:n], self._entries, self._index, numbers=self._numbers, dates=self._dates)

    # ------------------------------------------------------------------------------------ reading

    def __len__(self) -> int:
        return int(self._codes.shape[0])

    def __getitem__(self, position: int) -> Any:
        """The value at ``position`` (as :func:`json.loads` gives it), or :data:`MISSING`.

        Raises:
            IndexError: ``position`` is out of range.
        """
        return self._entries[int(self._codes[position])]

    @property
    def cardinality(self) -> int:
        """How many distinct values (a missing key counts as one) the column holds."""
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Column(n={len(self)}, cardinality={self.cardinality})"

    # ------------------------------------------------------------------------- derived, write-once

    def _derived(self, slot: str, derive: Callable[[Sequence[Any]], Any]) -> Any:
        """The value of cache ``slot``, computed once under the lock (double-checked) and never replaced."""
        value = getattr(self, slot)
        if value is _NOT_COMPUTED:
            with self._lock:
                value = getattr(self, slot)
                if value is _NOT_COMPUTED:
                    value = derive(self._entries)
                    object.__setattr__(self, slot, value)
        return value

    def _numbers_view(self) -> tuple[np.ndarray, np.ndarray, bool]:
        return self._derived("_numbers", _derive_numbers)

    def _dates_view(self) -> tuple[np.ndarray, np.ndarray] | None:
        return self._derived("_dates", _derive_dates)


def _derive_numbers(entries: Sequence[Any]) -> tuple[np.ndarray, np.ndarray, bool]:
    """Per entry: its ``float64`` value, whether it is a number to ``matches`` (exactly an ``int`` or a
    ``float``, so not a bool, and not NaN), and whether every ``int`` among them is exactly a ``float64``.

    Meant for plain columns, whose numbers are exactly ``int`` or ``float``.
    """
    k = len(entries)
    classes = list(map(type, entries))
    is_float = np.fromiter(map(_IS_FLOAT, classes), dtype=bool, count=k)
    is_int = np.fromiter(map(_IS_INT, classes), dtype=bool, count=k)
    values = np.zeros(k, dtype=np.float64)
    is_number = is_int.copy()
    exact = True
    if is_float.any():
        floats = np.fromiter(compress(entries, is_float.tolist()), dtype=np.float64)
        values[is_float] = floats
        is_number[is_float] = ~np.isnan(floats)
    if is_int.any():
        ints = list(compress(entries, is_int.tolist()))
        try:
            as_int64 = np.array(ints, dtype=np.int64)
        except OverflowError:
            as_int64 = None
        if as_int64 is not None and bool(np.all((as_int64 >= -(2**53)) & (as_int64 <= 2**53))):
            values[is_int] = as_int64  # every int of magnitude <= 2**53 is exactly a float64
        else:
            exact = all(_float_equals(v) for v in ints)
            if exact:
                values[is_int] = [float(v) for v in ints]
    values.flags.writeable = False
    is_number.flags.writeable = False
    return values, is_number, exact


def _float_equals(value: int) -> bool:
    """Whether ``float(value)`` is exactly ``value``."""
    try:
        return float(value) == value
    except OverflowError:
        return False


def _join_numbers(
    head: tuple[np.ndarray, np.ndarray, bool], tail: tuple[np.ndarray, np.ndarray, bool]
) -> tuple[np.ndarray, np.ndarray, bool]:
    values, is_number = np.concatenate([head[0], tail[0]]), np.concatenate([head[1], tail[1]])
    values.flags.writeable = False
    is_number.flags.writeable = False
    return values, is_number, head[2] and tail[2]


def _derive_dates(entries: Sequence[Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """Per entry: epoch microseconds of :func:`fastrag.filters.parse_date`'s reading and whether it read one.

    ``None`` when some entry's instant cannot be computed (a ``datetime`` whose tzinfo gives no offset);
    range comparisons on that column then go through the reference.
    """
    micros = np.zeros(len(entries), dtype=np.int64)
    valid = np.zeros(len(entries), dtype=bool)
    for i, entry in enumerate(entries):
        if not isinstance(entry, str | date):
            continue  # parse_date reads nothing else
        moment = parse_date(entry)
        if moment is None:
            continue
        try:
            micros[i] = epoch_micros(moment)
        except (TypeError, ValueError, OverflowError):
            return None
        valid[i] = True
    micros.flags.writeable = False
    valid.flags.writeable = False
    return micros, valid


def _join_dates(
    head: tuple[np.ndarray, np.ndarray] | None, tail: tuple[np.ndarray, np.ndarray] | None
) -> tuple[np.ndarray, np.ndarray] | None:
    if head is None or tail is None:
        return None
    micros, valid = np.concatenate([head[0], tail[0]]), np.concatenate([head[1], tail[1]])
    micros.flags.writeable = False
    valid.flags.writeable = False
    return micros, valid


def _add_entry(index: dict[Hashable, dict[Any, int]], entries: list[Any], entry: Any) -> int:
    """The code of ``entry`` in ``index``, appending it to ``entries`` first if no equal key is there."""
    tag, value = _key(entry)
    inner = index.get(tag)
    if inner is None:
        inner = index[tag] = {}
    code = inner.setdefault(value, len(entries))
    if code == len(entries):
        entries.append(entry)
    return code


def _check_length(n: Any) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise InvalidParameterError(f"n must be a non-negative int, got {n!r}")


# -------------------------------------------------------------------------------------- evaluation


def filter_mask(node: Filter, n: int, column: Callable[[str], Column]) -> np.ndarray:
    """Which of ``n`` row positions ``node`` selects: ``mask[i] == matches(node, metadata_i)``.

    Each comparison costs one pass over its key's ``n`` codes plus work proportional to that column's
    distinct values (often less: see the module docstring); comparisons on one key under the same
    ``andAll`` / ``orAll`` / ``notAll`` share that pass. At 300,000 rows a mask takes a few milliseconds.

    Args:
        node: the filter, as an AST node (its JSON form is parsed with :func:`fastrag.filters.parse_filter`;
            ``None`` selects every row, as :func:`fastrag.filters.matches` does).
        n: the number of row positions.
        column: gives the :class:`Column` of a metadata key, of length ``n``; called at most once per key
            and call. For a key no row holds, return ``Column.missing(n)``.

    Returns:
        A new, writable ``(n,)`` ``bool`` array.

    Raises:
        FilterError: ``node`` is malformed.
        InvalidParameterError: ``n`` is negative, or ``column`` returned something other than a
            :class:`Column` of length ``n``.
    """
    _check_length(n)
    parsed = parse_filter(node)
    if parsed is None:
        return np.ones(n, dtype=bool)
    columns: dict[str, Column] = {}

    def get(key: str) -> Column:
        col = columns.get(key)
        if col is None:
            col = column(key)
            if not isinstance(col, Column):
                raise InvalidParameterError(f"column({key!r}) returned {type(col).__name__}, not a Column")
            if len(col) != n:
                raise InvalidParameterError(f"column({key!r}) has {len(col)} positions, expected {n}")
            columns[key] = col
        return col

    mask = _evaluate(parsed, n, get)
    return mask if mask.flags.writeable and mask.base is None else mask.copy()


def _evaluate(node: Filter, n: int, get: Callable[[str], Column]) -> np.ndarray:
    if isinstance(node, Comparison):
        col = get(node.key)
        return _gather(col, _per_code(node, col), n)
    conjunction = not isinstance(node, Or)  # andAll and notAll both AND their children
    combine = np.logical_and if conjunction else np.logical_or
    # Comparisons on one key combine per distinct value, then cost one gather for that key.
    per_key: dict[str, np.ndarray] = {}
    nested: list[Filter] = []
    for child in node.filters:
        if isinstance(child, Comparison):
            col = get(child.key)
            codes = _per_code(child, col)
            seen = per_key.get(child.key)
            per_key[child.key] = codes if seen is None else combine(seen, codes)
        else:
            nested.append(child)
    mask: np.ndarray | None = None
    parts: Iterable[Callable[[], np.ndarray]] = [
        *((lambda key=key, codes=codes: _gather(get(key), codes, n)) for key, codes in per_key.items()),
        *((lambda child=child: _evaluate(child, n, get)) for child in nested),
    ]
    for part in parts:
        if mask is not None and (not mask.any() if conjunction else mask.all()):
            break  # the answer can no longer change
        result = part()
        mask = result if mask is None else combine(mask, result, out=mask)
    assert mask is not None  # every logical node has at least one child
    if isinstance(node, Not):
        np.logical_not(mask, out=mask)
    return mask


def _gather(col: Column, per_code: np.ndarray, n: int) -> np.ndarray:
    """``per_code[codes]`` as a new ``(n,)`` bool array, with shortcuts for 0, 1, all-but-1 and all hits."""
    hits = int(np.count_nonzero(per_code))
    if hits == 0:
        return np.zeros(n, dtype=bool)
    if hits == per_code.size:
        return np.ones(n, dtype=bool)
    if hits == 1:
        return np.equal(col._codes, np.int32(per_code.argmax()))
    if hits == per_code.size - 1:
        return np.not_equal(col._codes, np.int32(per_code.argmin()))
    return np.take(per_code, col._codes)


def _per_code(comparison: Comparison, col: Column) -> np.ndarray:
    """Whether ``comparison`` matches each of ``col``'s distinct entries: a ``(cardinality,)`` bool array."""
    op, value = comparison.operator, comparison.value
    if op in _RANGE_COMPARE and isinstance(value, str):
        found = _date_range(comparison, col)
        if found is not None:
            return found
    elif col._plain and col.cardinality > _PER_DISTINCT_LIMIT:
        if op in _EQUALITY_OPERATORS:
            found = _equality_by_lookup(comparison, col)
        elif op in _RANGE_COMPARE:
            found = _numeric_range(comparison, col)
        else:
            found = None
        if found is not None:
            return found
    return _by_reference(comparison, col)


def _by_reference(comparison: Comparison, col: Column) -> np.ndarray:
    """The reference itself, once per distinct entry."""
    key = comparison.key
    return np.fromiter(
        (matches(comparison, {} if entry is MISSING else {key: entry}) for entry in checked(col._entries)),
        dtype=bool,
        count=col.cardinality,
    )


def _equal_keys(value: Any) -> list[tuple[type, Any]]:
    """The :func:`_key` of every plain value that can ``equals`` ``value`` (a str, int, float or bool)."""
    cls = value.__class__
    if cls is int:
        keys: list[tuple[type, Any]] = [(int, value)]
        try:
            as_float = float(value)
        except OverflowError:
            return keys
        return [*keys, (float, as_float)] if as_float == value else keys
    if cls is float and value.is_integer():
        return [(float, value), (int, int(value))]
    return [(cls, value)]


def _equality_by_lookup(comparison: Comparison, col: Column) -> np.ndarray | None:
    """``equals`` / ``notEquals`` / ``in`` / ``notIn`` via the column's hash index, each candidate confirmed
    by the reference; ``None`` when a filter value is not exactly a str, int, float or bool."""
    op, key = comparison.operator, comparison.key
    targets = comparison.value if op in _SET_OPERATORS else (comparison.value,)
    if any(target.__class__ not in _LOOKUP_TYPES for target in targets):
        return None
    per_code = np.full(col.cardinality, op in _NEGATED_OPERATORS, dtype=bool)
    for target in targets:
        for tag, candidate in _equal_keys(target):
            code = col._index.get(tag, {}).get(candidate)
            if code is not None:
                per_code[code] = matches(comparison, {key: col._entries[code]})
    return per_code


def _numeric_range(comparison: Comparison, col: Column) -> np.ndarray | None:
    """A numeric range as one ``float64`` comparison over the entries; ``None`` when that would not be
    exact (an integer entry or bound that ``float64`` cannot hold exactly)."""
    bound = comparison.value
    if bound.__class__ is int:
        try:
            as_float = float(bound)
        except OverflowError:
            return None
        if as_float != bound:
            return None
        bound = as_float
    elif bound.__class__ is not float:
        return None
    values, is_number, exact = col._numbers_view()
    if not exact:
        return None
    return np.logical_and(_RANGE_COMPARE[comparison.operator](values, bound), is_number)


def _date_range(comparison: Comparison, col: Column) -> np.ndarray | None:
    """A date range over instants parsed once per entry by the reference's ``parse_date``; ``None`` when
    the column's dates could not all be read as instants."""
    dates = col._dates_view()
    moment = parse_date(comparison.value)
    if dates is None or moment is None:
        return None
    micros, valid = dates
    return np.logical_and(_RANGE_COMPARE[comparison.operator](micros, epoch_micros(moment)), valid)
