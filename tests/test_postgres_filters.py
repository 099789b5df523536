"""PostgreSQL filter translation: golden ``(sql, params)`` written by hand, and the promise that no key or
value ever becomes SQL text (checked on generated filters full of quotes and SQL-looking strings).
Pure: no server, no driver (``translate_filter`` imports neither)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastrag.errors import FilterError, InvalidParameterError, UnsupportedFilterError
from fastrag.filters import RANGE_OPERATORS, comparisons, field, parse_filter
from fastrag.testing.filter_cases import FILTER_CORPUS, filter_strategy
from fastrag.vector_store.postgres.filters import json_number, translate_filter


def cmp(op: str, key: str, value: object) -> dict:
    return {op: {"key": key, "value": value}}


CONTAINS = "metadata @> %s::jsonb"
NUMBER = "CASE WHEN jsonb_typeof(metadata -> %s) = 'number' THEN (metadata -> %s)::numeric {} %s::numeric ELSE false END"
STRING = "CASE WHEN jsonb_typeof(metadata -> %s) = 'string' THEN {} ELSE false END"

GOLDEN = [
    # equality: one jsonb containment; the key and the value are inside the JSON parameter
    (cmp("equals", "category", "science"), (CONTAINS, ['{"category": "science"}'])),
    (cmp("equals", "year", 2020), (CONTAINS, ['{"year": 2020}'])),
    (cmp("equals", "year", 2020.0), (CONTAINS, ['{"year": 2020.0}'])),
    (cmp("equals", "published", True), (CONTAINS, ['{"published": true}'])),
    (cmp("equals", "author", "x' OR '1'='1"), (CONTAINS, ['{"author": "x\' OR \'1\'=\'1"}'])),
    (cmp("equals", "x') OR 1=1 --", "a"), (CONTAINS, ['{"x\') OR 1=1 --": "a"}'])),
    (cmp("equals", "meta.lang", "en"), (CONTAINS, ['{"meta.lang": "en"}'])),
    (cmp("equals", "city", "Zürich"), (CONTAINS, ['{"city": "Zürich"}'])),
    (cmp("equals", "code", 'a\\b"'), (CONTAINS, ['{"code": "a\\\\b\\""}'])),
    (cmp("notEquals", "year", 2020), ("NOT (" + CONTAINS + ")", ['{"year": 2020}'])),
    # in / notIn: OR of containments, repeats dropped; an empty list is a constant
    (cmp("in", "year", [2019, "2019", True, 2019]),
     (f"({CONTAINS} OR {CONTAINS} OR {CONTAINS})", ['{"year": 2019}', '{"year": "2019"}', '{"year": true}'])),
    (cmp("in", "category", ["a"]), (CONTAINS, ['{"category": "a"}'])),
    (cmp("in", "x", []), ("false", [])),
    (cmp("notIn", "x", []), ("true", [])),
    (cmp("notIn", "p", [1, False]), (f"NOT ({CONTAINS} OR {CONTAINS})", ['{"p": 1}', '{"p": false}'])),
    # ranges: numbers as numeric text (exact at any size), dates on the shadow column in epoch µs (UTC)
    (cmp("greaterThan", "year", 2020), (NUMBER.format(">"), ["year", "year", "2020"])),
    (cmp("lessThanOrEquals", "rating", -1.5), (NUMBER.format("<="), ["rating", "rating", "-1.5"])),
    (cmp("lessThan", "n", 10**30), (NUMBER.format("<"), ["n", "n", "1" + "0" * 30])),
    (cmp("greaterThanOrEquals", "date", "2020-01-01"),
     ("COALESCE((dates -> %s)::numeric >= %s::numeric, false)", ["date", "1577836800000000"])),
    (cmp("lessThan", "date", "2020-01-01T02:00:00+02:00"),
     ("COALESCE((dates -> %s)::numeric < %s::numeric, false)", ["date", "1577836800000000"])),
    (cmp("greaterThan", "date", "1969-12-31T23:59:59.5Z"),
     ("COALESCE((dates -> %s)::numeric > %s::numeric, false)", ["date", "-500000"])),
    # strings: starts_with / strpos, literal (no LIKE, so % and _ need no escaping)
    (cmp("startsWith", "code", "50%_"),
     (STRING.format("starts_with(metadata ->> %s, %s)"), ["code", "code", "50%_"])),
    (cmp("stringContains", "author", "' OR '"),
     (STRING.format("strpos(metadata ->> %s, %s) > 0"), ["author", "author", "' OR '"])),
    (cmp("startsWith", "k", ""), (STRING.format("starts_with(metadata ->> %s, %s)"), ["k", "k", ""])),
    # listContains: containment of a one-element array (an element equal by the rules of equals)
    (cmp("listContains", "sizes", 2), (CONTAINS, ['{"sizes": [2]}'])),
    (cmp("listContains", "tags", "ai"), (CONTAINS, ['{"tags": ["ai"]}'])),
    # logic
    ({"andAll": [cmp("equals", "a", "x"), {"notAll": [cmp("equals", "b", 1), cmp("equals", "c", True)]}]},
     (f"({CONTAINS} AND NOT ({CONTAINS} AND {CONTAINS}))", ['{"a": "x"}', '{"b": 1}', '{"c": true}'])),
    ({"orAll": [cmp("equals", "a", "x")]}, (CONTAINS, ['{"a": "x"}'])),
    ({"notAll": cmp("in", "a", ["x", "y"])}, (f"NOT ({CONTAINS} OR {CONTAINS})", ['{"a": "x"}', '{"a": "y"}'])),
    ({"notAll": [{"notAll": [cmp("greaterThan", "y", 1)]}]},
     (f"NOT (NOT ({NUMBER.format('>')}))", ["y", "y", "1"])),
    ({"orAll": [cmp("in", "x", []), cmp("equals", "a", 1)]}, (f"(false OR {CONTAINS})", ['{"a": 1}'])),
]


@pytest.mark.parametrize(("filter_json", "expected"), GOLDEN, ids=[str(i) for i in range(len(GOLDEN))])
def test_golden_translation(filter_json: dict, expected: tuple) -> None:
    assert translate_filter(filter_json) == expected


def test_builder_and_json_string_forms_translate_the_same() -> None:
    built = (field("category") == "science") & ~field("tags").list_contains("draft")
    as_json = ('{"andAll": [{"equals": {"key": "category", "value": "science"}}, '
               '{"notAll": [{"listContains": {"key": "tags", "value": "draft"}}]}]}')
    expected = (f"({CONTAINS} AND NOT ({CONTAINS}))", ['{"category": "science"}', '{"tags": ["draft"]}'])
    assert translate_filter(built) == translate_filter(as_json) == expected


def test_errors() -> None:
    with pytest.raises(InvalidParameterError):
        translate_filter(None)  # type: ignore[arg-type]
    with pytest.raises(FilterError):
        translate_filter({"bogus": {}})
    with pytest.raises(FilterError):
        translate_filter(cmp("greaterThan", "date", "not a date"))
    with pytest.raises(UnsupportedFilterError) as info:
        translate_filter({"andAll": [cmp("equals", "a", "x"), cmp("equals", "b", "nul\x00")]})
    assert info.value.path == "$.andAll[1].equals.value"
    with pytest.raises(UnsupportedFilterError):
        translate_filter(cmp("startsWith", "k\x00", "x"))


def test_json_number_is_the_shortest_exact_form() -> None:
    assert [json_number(v) for v in (3, 3.0, 0.1, -1.5, 10**20, 1e22)] == ["3", "3.0", "0.1", "-1.5",
                                                                           "100000000000000000000", "1e+22"]


# Markers that no SQL fragment contains: a value or key that reached the SQL text would show up.
_MARKED = st.sampled_from(["Ωk", "x' OR 'Ω'='Ω", 'Ω") or true --', "Ω%s", "Ω;DROP TABLE t;", "Ω\\", "Ω{table}"])


def _marked(node: object) -> object:
    """``node`` with every key, and every string value outside ranges (dates stay dates), marked with Ω."""
    if isinstance(node, list):
        return [_marked(v) for v in node]
    ((op, body),) = node.items()  # type: ignore[union-attr]
    if op in ("andAll", "orAll", "notAll"):
        return {op: _marked(body)}
    value = body["value"]
    if op not in RANGE_OPERATORS:
        if isinstance(value, str):
            value = "Ω" + value
        elif isinstance(value, list):
            value = ["Ω" + v if isinstance(v, str) else v for v in value]
    return {op: {"key": "Ω" + body["key"], "value": value}}


@settings(max_examples=200, deadline=None, database=None)
@given(filter_json=filter_strategy(FILTER_CORPUS), extra=_MARKED)
def test_no_key_or_value_ever_reaches_the_sql_text(filter_json: dict, extra: str) -> None:
    marked = _marked({"andAll": [filter_json, cmp("equals", extra, extra)]})
    sql, params = translate_filter(marked)
    assert "Ω" not in sql
    assert sql.count("%s") == len(params)
    assert sql.replace("%s", "").count("%") == 0  # nothing psycopg would read as a placeholder
    keys = set(params) | {k for p in params if p.startswith("{") for k in json.loads(p)}
    for _, node in comparisons(parse_filter(marked)):  # every key travels as a parameter (or in JSON)
        assert node.key in keys or (node.operator in ("in", "notIn") and not node.value)
