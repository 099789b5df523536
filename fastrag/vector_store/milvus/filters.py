"""Milvus filter translation: a fastrag filter AST becomes a Milvus boolean expression over typed shadow values.

Pure: nothing here imports pymilvus or talks to a server. :func:`translate_filter` is the entry point;
:func:`filter_values` computes the shadow values a row carries, and the escaping helpers make string
literals and ``like`` patterns that hold no unintended syntax or wildcard.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastrag.errors import InvalidParameterError, UnsupportedFilterError
from fastrag.filters import RANGE_OPERATORS, And, Comparison, Filter, FilterLike, Not, Or, parse_date, parse_filter
from fastrag.vector_store._metadata import epoch_micros
from fastrag.vector_store.milvus.schema import FILTER_FIELD, ID_FIELD

__all__ = [
    "MATCH_ALL",
    "MilvusExpr",
    "and_expressions",
    "decode_text",
    "encode_id",
    "encode_text",
    "escape_like",
    "filter_values",
    "ids_expression",
    "native_or_translated",
    "string_literal",
    "translate_filter",
]


@dataclass(frozen=True, slots=True)
class MilvusExpr:
    """A native Milvus boolean expression, passed to Milvus unchanged as a filter.

    Recognised by type wherever a method takes ``filter=``; a plain ``str`` is always fastrag's JSON form.
    The expression has Milvus's own semantics (JSON values compare loosely, a missing key is null), not
    :func:`fastrag.filters.matches`. It may use the fields ``id``, ``content`` and ``metadata["key"]``.

    Example::

        await store.search_vector(q, k=5, filter=MilvusExpr('metadata["lang"] == "en" or metadata["lang"] == "de"'))
    """

    expression: str

    def __post_init__(self) -> None:
        if not isinstance(self.expression, str) or not self.expression.strip():
            raise InvalidParameterError(f"MilvusExpr needs a non-empty expression string, got {self.expression!r}")


# ----------------------------------------------------------------------------------------- escaping

_LITERAL_ESCAPES = {"\\": "\\\\", '"': '\\"'}


def string_literal(value: str) -> str:
    """``value`` as a double-quoted Milvus string literal that the expression parser reads back exactly.

    Backslash and double quote are escaped (``\\\\``, ``\\"``); every other character, quotes ``'``, tabs and
    all of Unicode included, is written as is. Milvus 2.5 does not read ``\\n``, ``\\t`` or ``\\uXXXX`` as
    the characters they name, and refuses a raw line break, so a string with a newline or a
    carriage return has no literal: the stored values and ids that filters compare are encoded without them
    (:func:`encode_text`, ``encode_id``).

    Raises:
        UnsupportedFilterError: ``value`` is not a ``str``, cannot be encoded as UTF-8 (a lone surrogate), or
            holds a newline or carriage return.
    """
    if not isinstance(value, str):
        raise UnsupportedFilterError(f"expected a string, got {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UnsupportedFilterError(f"string {value!r} is not valid Unicode text") from exc
    if "\n" in value or "\r" in value:
        raise UnsupportedFilterError(f"string {value!r}: Milvus string literals cannot hold a line break")
    return '"' + "".join(_LITERAL_ESCAPES.get(ch, ch) for ch in value) + '"'


_CODE_ESCAPE = "\ue000"
_CODE_DIGITS = ("\ue001", "\ue002", "\ue003", "\ue004")
_ENCODED = ("%", "_", "\\", "\n", "\r", "'", _CODE_ESCAPE, *_CODE_DIGITS, "\x00")
_CODES = {
    ch: _CODE_ESCAPE + _CODE_DIGITS[n // 4] + _CODE_DIGITS[n % 4] for n, ch in enumerate(_ENCODED)
}
"""``%`` -> E D1 D1, ``_`` -> E D1 D2, ``\\`` -> E D1 D3, newline -> E D1 D4, carriage return -> E D2 D1,
``'`` -> E D2 D2, E -> E D2 D3, D1 -> E D2 D4, D2 -> E D3 D1, D3 -> E D3 D2, D4 -> E D3 D3, NUL -> E D3 D4
(E = U+E000, Dn = U+E000 + n). milvus-lite 2.5.1 fails a whole upsert ("internal error") for an id holding NUL."""
_CODE_TABLE = str.maketrans(_CODES)
_ID_CODE_TABLE = str.maketrans({ch: code for ch, code in _CODES.items() if ch not in ("%", "_", "\\")})
_DECODES = {code: ch for ch, code in _CODES.items()}


def encode_text(value: str) -> str:
    """The form in which string metadata is stored for filtering (``filter_values.s_*``): no wildcard, no line
    break, no quote that needs escaping.

    ``%``, ``_``, ``\\``, newline, carriage return, ``'``, NUL and U+E000..U+E004 become three-character codes
    ``U+E000 d1 d2`` (``d`` in U+E001..U+E004); every other character stays. The code is prefix-free and a
    match of ``encode_text(p)`` can only begin at a character boundary of the original (a digit never
    appears outside a code), so ``a.startswith(p) == encode_text(a).startswith(encode_text(p))`` and
    ``(p in a) == (encode_text(p) in encode_text(a))``.
    """
    return value.translate(_CODE_TABLE)


def encode_id(value: str) -> str:
    """The form in which a document id is stored in Milvus's primary key: newline, carriage return, ``'``, NUL
    and U+E000..U+E004 as in :func:`encode_text`, every other character as is (``%``, ``_`` and ``\\``
    stay). Line breaks have no Milvus literal, and milvus-lite 2.5.1 fails to upsert an id holding ``'``
    (its storage layer splices ids into SQL unescaped: "internal error"). :func:`decode_text` inverts it."""
    return value.translate(_ID_CODE_TABLE)


def decode_text(value: str) -> str:
    """Invert :func:`encode_text` and ``encode_id``."""
    if _CODE_ESCAPE not in value:
        return value
    out: list[str] = []
    i = 0
    while i < len(value):
        if value[i] == _CODE_ESCAPE:
            out.append(_DECODES[value[i : i + 3]])
            i += 3
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def escape_like(value: str, *, prefix: bool) -> str:
    """A Milvus ``like`` literal matching encoded strings that start with (``prefix=True``) or contain ``value``.

    ``value`` is encoded with :func:`encode_text` (so it holds no ``%``, ``_``, ``\\`` or line break) and the only
    wildcards are the ``%`` added here: ``"<enc>%"`` for a prefix, ``"%<enc>%"`` for a substring.
    """
    encoded = encode_text(value)
    return string_literal(f"{encoded}%" if prefix else f"%{encoded}%")


# ------------------------------------------------------------------------------ typed filter values

_MAX_DOUBLE = 1.7976931348623157e308
_PRESENT = 1
"""The value of the presence markers ``m_<kind>_<hex key>`` and list-element keys ``l_<hex key>_<digest>``."""


def _key_hex(key: str) -> str:
    try:
        return key.encode("utf-8").hex()
    except UnicodeEncodeError as exc:
        raise UnsupportedFilterError(f"key {key!r} is not valid Unicode text") from exc


def _path(name: str) -> str:
    return f'{FILTER_FIELD}["{name}"]'


def _stored_number(value: int | float) -> float:
    try:
        number = float(value)
    except OverflowError:  # an int beyond the double range: every exact filter value compares the same way
        return _MAX_DOUBLE if value > 0 else -_MAX_DOUBLE
    return number + 0.0  # -0.0 -> 0.0: equal numbers have one form


def _element_name(hex_key: str, kind: str, value: Any) -> str:
    """The key that marks a list under ``hex_key`` as holding ``value`` (of kind ``s``, ``n`` or ``b``).

    The element is named by the first 128 bits of the SHA-256 of its kind and canonical text (a string as
    is, a number as the ``repr`` of its double, a bool as ``true``/``false``), so any element makes a key
    of bounded length that needs no escaping, and two different elements share a name with probability
    about 2**-128.
    """
    if kind == "b":
        canonical = "true" if value else "false"
    elif kind == "n":
        canonical = repr(_stored_number(value))
    else:
        canonical = value
    digest = hashlib.sha256(f"{kind}:{canonical}".encode()).hexdigest()[:32]
    return f"l_{hex_key}_{digest}"


def filter_values(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The typed copies of ``metadata`` that filters run on (the ``filter_values`` JSON field).

    Args:
        metadata: a document's metadata (JSON-like).

    Returns:
        With ``H`` the hex of a key's UTF-8 bytes: ``s_H`` an encoded string (:func:`encode_text`), ``d_H``
        a date string's instant in epoch microseconds, ``n_H`` a number as a double, ``b_H`` a bool; beside
        ``s_``, ``d_`` and ``n_`` a presence marker ``m_s_H`` / ``m_d_H`` / ``m_n_H`` = 1; and for a list,
        one key ``l_H_<digest>`` = 1 per distinct string, number or bool element. ``None``, nested objects
        and other values contribute nothing (no filter operator can match them).

    Raises:
        UnicodeEncodeError: a key or string holds a lone surrogate.
    """
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        h = str(key).encode("utf-8").hex()
        if isinstance(value, bool):
            out[f"b_{h}"] = value
        elif isinstance(value, int | float):
            out[f"n_{h}"] = _stored_number(value)
            out[f"m_n_{h}"] = _PRESENT
        elif isinstance(value, str):
            value.encode("utf-8")
            out[f"s_{h}"] = encode_text(value)
            out[f"m_s_{h}"] = _PRESENT
            moment = parse_date(value)
            if moment is not None:
                out[f"d_{h}"] = epoch_micros(moment)
                out[f"m_d_{h}"] = _PRESENT
        elif isinstance(value, list | tuple):
            for element in value:
                if isinstance(element, str | int | float):
                    out[_element_name(h, _scalar_kind(element), element)] = _PRESENT
    return out


# ------------------------------------------------------------------------------- filter translation
#
# Milvus 2.5 as milvus-lite 2.5.1 builds it refuses every `not` ("unsupported expr proto node"), and has no
# `exists` for JSON paths. The translation is therefore negation-free: `not` is pushed down to the
# comparisons (De Morgan), and each comparison has a positive and a negated form built from what Milvus
# evaluates, on a JSON path that is missing, as false (==, <, >, <=, >=, like) or as true (!=):
#
#   equals v          P == v                          negated: P != v
#   range op n        P op n                          negated: (M != 1 or P op' n), op' the complement
#   startsWith p      P like "<enc p>%"               negated: (M != 1 or P < "<enc p>" or P >= next)
#   listContains v    filter_values["l_H_<d(v)>"] == 1  negated: ... != 1
#
# M is the path's presence marker (m_<kind>_H). String order is UTF-8 byte order, which is code point order,
# so the strings starting with e are exactly those in [e, next(e)), next(e) being e with its last code
# point incremented (U+10FFFF carried). A negated stringContains has no negation-free form and is refused.

_MAX_EXACT_NUMBER = 2**53
_FALSE = f'{ID_FIELD} < ""'
MATCH_ALL = f'{ID_FIELD} >= ""'
"""An expression every row matches (every id is at least the empty string): the store's "no filter" where
Milvus needs one (``delete``, paged queries)."""
_RANGE_SYMBOLS = {"greaterThan": ">", "greaterThanOrEquals": ">=", "lessThan": "<", "lessThanOrEquals": "<="}
_COMPLEMENT = {">": "<=", ">=": "<", "<": ">=", "<=": ">"}


def _number_literal(value: int | float) -> str:
    if not -_MAX_EXACT_NUMBER < value < _MAX_EXACT_NUMBER:
        raise UnsupportedFilterError(
            f"Milvus compares numbers as doubles; {value!r} is beyond +-2**53, where that is not exact"
        )
    return repr(float(value) + 0.0)


def _scalar_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "b"
    if isinstance(value, str):
        return "s"
    return "n"


def _scalar_literal(kind: str, value: Any) -> str:
    if kind == "b":
        return "true" if value else "false"
    if kind == "s":
        return string_literal(encode_text(value))
    return _number_literal(value)


def _present(kind: str, hex_key: str) -> str:
    return f"{_path(f'm_{kind}_{hex_key}')} == {_PRESENT}"


def _missing(kind: str, hex_key: str) -> str:
    return f"{_path(f'm_{kind}_{hex_key}')} != {_PRESENT}"


def _equals(key: str, value: Any, *, negated: bool) -> str:
    kind = _scalar_kind(value)
    return f"{_path(f'{kind}_{_key_hex(key)}')} {'!=' if negated else '=='} {_scalar_literal(kind, value)}"


def _one_of(key: str, values: Sequence[Any], *, negated: bool) -> str:
    parts: list[str] = []
    for value in values:
        part = _equals(key, value, negated=negated)
        if part not in parts:
            parts.append(part)
    if not parts:
        return f"({MATCH_ALL if negated else _FALSE})"
    return parts[0] if len(parts) == 1 else "(" + f" {'and' if negated else 'or'} ".join(parts) + ")"


def _successor(text: str) -> str | None:
    """The least string greater than every string that starts with ``text`` (``None``: there is none)."""
    chars = list(text)
    while chars:
        last = ord(chars.pop())
        if last < 0x10FFFF:
            following = last + 1 if last + 1 != 0xD800 else 0xE000  # surrogates are not text
            return "".join(chars) + chr(following)
    return None


def _comparison(node: Comparison, negated: bool) -> str:
    op, key, value = node.operator, node.key, node.value
    if op in ("equals", "notEquals"):
        return _equals(key, value, negated=negated != (op == "notEquals"))
    if op in ("in", "notIn"):
        return _one_of(key, value, negated=negated != (op == "notIn"))
    if op in RANGE_OPERATORS:
        if isinstance(value, str):
            moment = parse_date(value)
            if moment is None:  # unreachable: Comparison validates range values
                raise UnsupportedFilterError(f"{op} on {value!r}: not a number or an ISO-8601 date")
            kind, literal = "d", str(epoch_micros(moment))
        else:
            kind, literal = "n", _number_literal(value)
        hex_key = _key_hex(key)
        path, symbol = _path(f"{kind}_{hex_key}"), _RANGE_SYMBOLS[op]
        if not negated:
            return f"{path} {symbol} {literal}"
        return f"({_missing(kind, hex_key)} or {path} {_COMPLEMENT[symbol]} {literal})"
    if op in ("startsWith", "stringContains"):
        hex_key = _key_hex(key)
        path = _path(f"s_{hex_key}")
        if value == "":  # every string starts with and contains "" (Milvus's like "%" does not say so)
            return _present("s", hex_key) if not negated else _missing("s", hex_key)
        if not negated:
            return f"{path} like {escape_like(value, prefix=op == 'startsWith')}"
        if op == "stringContains":
            raise UnsupportedFilterError(
                f"a negated stringContains ({key!r} not containing {value!r}) cannot be expressed: Milvus 2.5 "
                "has no `not` and no negated `like` on JSON fields"
            )
        encoded = encode_text(value)
        parts = [_missing("s", hex_key), f"{path} < {string_literal(encoded)}"]
        upper = _successor(encoded)
        if upper is not None:
            parts.append(f"{path} >= {string_literal(upper)}")
        return "(" + " or ".join(parts) + ")"
    if op == "listContains":
        kind = _scalar_kind(value)
        if kind == "n":
            _number_literal(value)  # the same exactness limit as every other number
        elif kind == "s":
            string_literal(encode_text(value))  # refuses a lone surrogate
        name = _element_name(_key_hex(key), kind, value)
        return f"{_path(name)} {'!=' if negated else '=='} {_PRESENT}"
    raise UnsupportedFilterError(f"operator {op!r} has no Milvus translation")  # unreachable


def _translate(node: Filter, negated: bool = False) -> str:
    if isinstance(node, Comparison):
        return _comparison(node, negated)
    if isinstance(node, Not):  # not (a and b ...)
        return _translate(And(node.filters), not negated)
    conjunction = isinstance(node, And) != negated  # De Morgan: a negated "or" is an "and" of negations
    parts = [_translate(child, negated) for child in node.filters]
    return parts[0] if len(parts) == 1 else "(" + f" {'and' if conjunction else 'or'} ".join(parts) + ")"


def translate_filter(node: FilterLike) -> str:
    """Translate a fastrag filter into a Milvus boolean expression over the ``filter_values`` field.

    Pure: no I/O. The expression selects exactly the documents :func:`fastrag.filters.matches` selects,
    given rows written by :class:`~fastrag.vector_store.milvus.MilvusVectorStore` (see the package
    docstring for the layout). It holds no ``not`` and no ``exists``, which Milvus 2.5 (as milvus-lite
    2.5.1 builds it) refuses: negations are pushed down to the comparisons.

    =====================  ========================================================================
    fastrag                Milvus expression (``P`` = ``filter_values["<kind>_<hex of key>"]``, ``M`` =
                           its presence marker ``filter_values["m_<kind>_<hex of key>"]``)
    =====================  ========================================================================
    equals v               ``P == v``; ``P`` is ``s_``/``n_``/``b_`` by v's type
    notEquals v            ``P != v`` (true where the key is missing or of another type)
    in [a, b]              ``(Pa == a or Pb == b)``; ``[]`` is false (``id < ""``)
    notIn [a, b]           ``(Pa != a and Pb != b)``; ``[]`` is true (``id >= ""``)
    greaterThan n ...      ``P > n``; a date compares ``d_`` with epoch microseconds
    startsWith p           ``P like "<encode(p)>%"``
    stringContains p       ``P like "%<encode(p)>%"``
    listContains v         ``filter_values["l_<hex of key>_<digest of v>"] == 1``
    andAll / orAll         ``(a and b)`` / ``(a or b)``
    notAll                 the negation pushed down: ``not (a and b)`` is ``(not a or not b)``, with
                           ``not P > n`` = ``(M != 1 or P <= n)``, ``not startsWith p`` =
                           ``(M != 1 or P < "<encode(p)>" or P >= "<successor>")``, ``not P == v`` =
                           ``P != v``, ``not listContains v`` = ``... != 1``
    =====================  ========================================================================

    Numbers are written as double literals (``2020.0``), strings with :func:`string_literal`.

    Args:
        node: an AST node, or the JSON form (mapping or JSON string).

    Returns:
        The expression string.

    Raises:
        FilterError: the filter is malformed.
        InvalidParameterError: ``node`` is ``None``.
        UnsupportedFilterError: a number of magnitude 2**53 or more (not exactly comparable as a double),
            a string or key that is not valid Unicode, or a ``stringContains`` with a non-empty value
            under an odd number of ``notAll`` (Milvus 2.5 cannot negate ``like``).
    """
    parsed = parse_filter(node)
    if parsed is None:
        raise InvalidParameterError("translate_filter needs a filter, got None")
    return _translate(parsed)


def native_or_translated(filter: FilterLike | MilvusExpr | None) -> str | None:  # noqa: A002
    """The Milvus expression for ``filter``: a :class:`MilvusExpr` as is, a fastrag filter translated.

    Raises:
        FilterError / UnsupportedFilterError: see :func:`translate_filter`; UnsupportedFilterError also for
            another backend's native filter.
    """
    if filter is None:
        return None
    if isinstance(filter, MilvusExpr):
        return filter.expression
    if not isinstance(filter, Comparison | And | Or | Not | Mapping | str):
        raise UnsupportedFilterError(
            f"a Milvus store takes a fastrag filter or a MilvusExpr, not {type(filter).__name__} "
            "(another backend's native filter?)"
        )
    return translate_filter(filter)


def ids_expression(ids: Sequence[str], *, stored: bool = False) -> str:
    """``id in [...]`` for document ``ids`` (encoded with ``encode_id``), or for ids as stored
    (``stored=True``: already encoded, as a query returns them)."""
    return f"{ID_FIELD} in [" + ", ".join(string_literal(i if stored else encode_id(i)) for i in ids) + "]"


def and_expressions(*expressions: str | None) -> str:
    """The conjunction of the non-empty ``expressions`` (``""`` when there is none)."""
    parts = [e for e in expressions if e]
    if not parts:
        return ""
    return parts[0] if len(parts) == 1 else " and ".join(f"({p})" for p in parts)
