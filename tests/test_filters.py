"""The filter language: the hand-worked table, JSON round trips, the builder, errors and matches()."""

from __future__ import annotations

import json
import math
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastrag.errors import FastragError, FilterError, UnsupportedFilterError
from fastrag.filters import (
    combine_filters,
    is_native_filter,
    COMPARISON_OPERATORS,
    LOGICAL_OPERATORS,
    And,
    Comparison,
    Not,
    Or,
    and_all,
    dump_filter,
    field,
    matches,
    not_all,
    or_all,
    parse_filter,
)
from fastrag.testing.filter_cases import (
    ALL_IDS,
    FILTER_CASES,
    FILTER_CORPUS,
    MISSING_KEY,
    FilterCase,
    filter_strategy,
)

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FILTERS = filter_strategy(FILTER_CORPUS)


def _json(value: Any) -> str:
    """A type-exact rendering: unlike ``==``, it tells ``True`` from ``1`` and ``1`` from ``1.0``."""
    return json.dumps(value, ensure_ascii=False)


def _selected(filter_json: Any) -> frozenset[str]:
    return frozenset(d.id for d in FILTER_CORPUS if matches(filter_json, d.metadata))


def _operators(filter_json: Any) -> set[str]:
    ((op, body),) = filter_json.items()
    if op in LOGICAL_OPERATORS:
        children = [body] if isinstance(body, dict) else body
        return {op}.union(*(_operators(child) for child in children))
    return {op}


# ----------------------------------------------------------------------------------- (a) the table


@pytest.mark.parametrize("case", FILTER_CASES, ids=lambda c: c.name)
def test_filter_table_agrees_with_matches(case: FilterCase) -> None:
    assert _selected(case.filter) == case.expected_ids


def test_corpus_and_table_are_well_formed() -> None:
    assert [d.id for d in FILTER_CORPUS] == sorted(ALL_IDS)
    names = [case.name for case in FILTER_CASES]
    assert len(names) == len(set(names))
    for case in FILTER_CASES:
        assert isinstance(case.expected_ids, frozenset)
        assert case.expected_ids <= ALL_IDS
        parse_filter(case.filter)
    with pytest.raises(AttributeError):
        FILTER_CASES[0].name = "renamed"  # type: ignore[misc]


def test_table_covers_every_operator_and_three_levels_of_nesting() -> None:
    used = set().union(*(_operators(case.filter) for case in FILTER_CASES))
    assert used == set(COMPARISON_OPERATORS) | set(LOGICAL_OPERATORS)

    assert max(_depth(case.filter) for case in FILTER_CASES) >= 3


def test_table_selects_neither_nothing_nor_everything_only() -> None:
    sizes = {len(case.expected_ids) for case in FILTER_CASES}
    assert 0 in sizes and len(ALL_IDS) in sizes and len(sizes) > 5


def _depth(node: Any) -> int:
    ((op, body),) = node.items()
    if op not in LOGICAL_OPERATORS:
        return 0
    return 1 + max(_depth(child) for child in ([body] if isinstance(body, dict) else body))


def _keys(node: Any) -> set[str]:
    ((op, body),) = node.items()
    if op in LOGICAL_OPERATORS:
        return set().union(*(_keys(child) for child in body))
    return {body["key"]}


_CORPUS_KEYS = {key for doc in FILTER_CORPUS for key in doc.metadata}


@PROPERTY
@given(FILTERS)
def test_filter_strategy_stays_within_the_corpus_and_depth(filter_json: dict[str, Any]) -> None:
    assert _depth(filter_json) <= 3
    assert _keys(filter_json) <= _CORPUS_KEYS | {MISSING_KEY}
    assert MISSING_KEY not in _CORPUS_KEYS


@settings(max_examples=50, deadline=None)
@given(filter_strategy(FILTER_CORPUS, max_depth=0))
def test_filter_strategy_max_depth_zero_gives_comparisons(filter_json: dict[str, Any]) -> None:
    assert isinstance(parse_filter(filter_json), Comparison)


def test_filter_strategy_reaches_every_operator_and_selective_filters() -> None:
    seen: set[str] = set()
    sizes: set[int] = set()

    @settings(max_examples=400, deadline=None, database=None)
    @given(FILTERS)
    def collect(filter_json: dict[str, Any]) -> None:
        seen.update(_operators(filter_json))
        sizes.add(len(_selected(filter_json)))

    collect()
    assert seen == set(COMPARISON_OPERATORS) | set(LOGICAL_OPERATORS)
    assert {0, len(ALL_IDS)} < sizes and len(sizes) >= 6


# ------------------------------------------------------------------------------- (b) JSON round trip


@pytest.mark.parametrize("case", FILTER_CASES, ids=lambda c: c.name)
def test_table_filters_round_trip(case: FilterCase) -> None:
    ast = parse_filter(case.filter)
    assert parse_filter(dump_filter(ast)) == ast
    assert _json(dump_filter(parse_filter(_json(case.filter)))) == _json(dump_filter(ast))


@PROPERTY
@given(FILTERS)
def test_dump_parse_round_trip(filter_json: dict[str, Any]) -> None:
    ast = parse_filter(filter_json)
    assert parse_filter(dump_filter(ast)) == ast
    assert _json(dump_filter(ast)) == _json(filter_json)


@PROPERTY
@given(FILTERS)
def test_round_trip_through_a_json_string(filter_json: dict[str, Any]) -> None:
    text = _json(filter_json)
    ast = parse_filter(text)
    assert ast == parse_filter(filter_json)
    assert _json(dump_filter(ast)) == text
    assert parse_filter(json.dumps(dump_filter(ast))) == ast


@PROPERTY
@given(FILTERS)
def test_dump_is_plain_json(filter_json: dict[str, Any]) -> None:
    dumped = dump_filter(parse_filter(filter_json))
    assert json.loads(json.dumps(dumped)) == dumped
    assert type(dumped) is dict


def test_round_trip_keeps_value_types() -> None:
    for value in [True, 1, 1.0, "1", 0, False, -0.5, "O'Brien", "東京"]:
        filter_json = {"equals": {"key": "k", "value": value}}
        assert _json(dump_filter(parse_filter(filter_json))) == _json(filter_json)
    filter_json = {"in": {"key": "k", "value": [True, 1, 1.0, "1"]}}
    assert _json(dump_filter(parse_filter(filter_json))) == _json(filter_json)


def test_not_all_object_form_parses_like_the_list_form() -> None:
    leaf = {"equals": {"key": "a", "value": 1}}
    assert parse_filter({"notAll": leaf}) == parse_filter({"notAll": [leaf]})
    assert dump_filter(parse_filter({"notAll": leaf})) == {"notAll": [leaf]}


def test_parse_accepts_none_and_ast_nodes() -> None:
    assert parse_filter(None) is None
    node = field("a") == 1
    assert parse_filter(node) is node
    assert matches(None, {}) is True


def test_sets_are_stored_as_tuples_and_hashable() -> None:
    node = parse_filter({"in": {"key": "a", "value": [1, 2]}})
    assert isinstance(node, Comparison) and node.value == (1, 2)
    assert hash(node) == hash(field("a").one_of((1, 2)))


# ------------------------------------------------------------------------------------- (c) builder


@pytest.mark.parametrize(
    ("built", "filter_json"),
    [
        (field("x") == 1, {"equals": {"key": "x", "value": 1}}),
        (field("x") != "a", {"notEquals": {"key": "x", "value": "a"}}),
        (field("x") > 1.5, {"greaterThan": {"key": "x", "value": 1.5}}),
        (field("x") >= 2020, {"greaterThanOrEquals": {"key": "x", "value": 2020}}),
        (field("d") < "2024-01-01", {"lessThan": {"key": "d", "value": "2024-01-01"}}),
        (field("d") <= "2024-01-01T10:00:00+02:00",
         {"lessThanOrEquals": {"key": "d", "value": "2024-01-01T10:00:00+02:00"}}),
        (field("x") == True, {"equals": {"key": "x", "value": True}}),  # noqa: E712
        (field("c").one_of(["a", "b"]), {"in": {"key": "c", "value": ["a", "b"]}}),
        (field("c").one_of(v for v in ("a", 1)), {"in": {"key": "c", "value": ["a", 1]}}),
        (field("c").not_one_of(("a", True)), {"notIn": {"key": "c", "value": ["a", True]}}),
        (field("s").starts_with("50%"), {"startsWith": {"key": "s", "value": "50%"}}),
        (field("s").contains("O'B"), {"stringContains": {"key": "s", "value": "O'B"}}),
        (field("t").list_contains("ai"), {"listContains": {"key": "t", "value": "ai"}}),
        (field("meta.lang") == "en", {"equals": {"key": "meta.lang", "value": "en"}}),
        ((field("a") == 1) & (field("b") == 2),
         {"andAll": [{"equals": {"key": "a", "value": 1}}, {"equals": {"key": "b", "value": 2}}]}),
        ((field("a") == 1) | (field("b") == 2),
         {"orAll": [{"equals": {"key": "a", "value": 1}}, {"equals": {"key": "b", "value": 2}}]}),
        (~(field("a") == 1), {"notAll": [{"equals": {"key": "a", "value": 1}}]}),
        # & and | flatten runs of the same operator, from either side.
        ((field("a") == 1) & (field("b") == 2) & (field("c") == 3),
         {"andAll": [{"equals": {"key": k, "value": v}} for k, v in (("a", 1), ("b", 2), ("c", 3))]}),
        ((field("a") == 1) | ((field("b") == 2) | (field("c") == 3)),
         {"orAll": [{"equals": {"key": k, "value": v}} for k, v in (("a", 1), ("b", 2), ("c", 3))]}),
        (((field("a") == 1) | (field("b") == 2)) & (field("c") == 3),
         {"andAll": [{"orAll": [{"equals": {"key": "a", "value": 1}}, {"equals": {"key": "b", "value": 2}}]},
                     {"equals": {"key": "c", "value": 3}}]}),
        (~((field("a") == 1) & (field("b") == 2)),
         {"notAll": [{"andAll": [{"equals": {"key": "a", "value": 1}}, {"equals": {"key": "b", "value": 2}}]}]}),
        (not_all(field("a") == 1, field("b") == 2),
         {"notAll": [{"equals": {"key": "a", "value": 1}}, {"equals": {"key": "b", "value": 2}}]}),
        (and_all(field("a") == 1), {"andAll": [{"equals": {"key": "a", "value": 1}}]}),
        (or_all(field("a") == 1), {"orAll": [{"equals": {"key": "a", "value": 1}}]}),
        (~~(field("a") == 1), {"equals": {"key": "a", "value": 1}}),
        (~not_all(field("a") == 1, field("b") == 2),
         {"andAll": [{"equals": {"key": "a", "value": 1}}, {"equals": {"key": "b", "value": 2}}]}),
        (((field("category") == "science") & (field("year") >= 2020)) | ~field("tags").list_contains("ai"),
         {"orAll": [
             {"andAll": [{"equals": {"key": "category", "value": "science"}},
                         {"greaterThanOrEquals": {"key": "year", "value": 2020}}]},
             {"notAll": [{"listContains": {"key": "tags", "value": "ai"}}]},
         ]}),
    ],
)
def test_builder_matches_json_form(built: Any, filter_json: dict[str, Any]) -> None:
    assert built == parse_filter(filter_json)
    assert _json(dump_filter(built)) == _json(filter_json)


def test_builder_selects_like_the_table() -> None:
    by_name = {case.name: case for case in FILTER_CASES}
    built = {
        "and_all": (field("category") == "science") & (field("year") >= 2020),
        "not_all_is_not_and": not_all(field("category") == "science", field("year") >= 2020),
        "list_contains": field("tags").list_contains("ai"),
        "starts_with_percent_literal": field("code").starts_with("50%"),
        "contains_backslash": field("code").contains("\\"),
        "not_in_strings": field("category").not_one_of(["technology", "science"]),
    }
    for name, node in built.items():
        assert _selected(node) == by_name[name].expected_ids, name


def test_field_is_not_hashable() -> None:
    with pytest.raises(TypeError):
        hash(field("a"))


# -------------------------------------------------------------------------------------- (d) errors


@pytest.mark.parametrize(
    ("bad", "path"),
    [
        ({"like": {"key": "a", "value": "x"}}, "$"),
        ({"equals": {"key": "a", "value": 1}, "in": {"key": "a", "value": [1]}}, "$"),
        ({}, "$"),
        ([{"equals": {"key": "a", "value": 1}}], "$"),
        ("[]", "$"),
        (42, "$"),
        ({"equals": {"key": "a"}}, "$.equals"),
        ({"equals": {"value": 1}}, "$.equals"),
        ({"equals": {"key": "a", "value": 1, "extra": 2}}, "$.equals"),
        ({"equals": ["a", 1]}, "$.equals"),
        ({"equals": {"key": "", "value": 1}}, "$.equals.key"),
        ({"equals": {"key": 5, "value": 1}}, "$.equals.key"),
        ({"andAll": []}, "$.andAll"),
        ({"orAll": []}, "$.orAll"),
        ({"notAll": []}, "$.notAll"),
        ({"andAll": "a"}, "$.andAll"),
        ({"andAll": {"equals": {"key": "a", "value": 1}}}, "$.andAll"),
        ({"andAll": [1]}, "$.andAll[0]"),
        ({"in": {"key": "a", "value": "abc"}}, "$.in.value"),
        ({"notIn": {"key": "a", "value": 1}}, "$.notIn.value"),
        ({"in": {"key": "a", "value": {"x": 1}}}, "$.in.value"),
        ({"in": {"key": "a", "value": [1, None]}}, "$.in.value[1]"),
        ({"in": {"key": "a", "value": [1, 2, [3]]}}, "$.in.value[2]"),
        ({"greaterThan": {"key": "year", "value": "2020"}}, "$.greaterThan.value"),
        ({"lessThan": {"key": "d", "value": "not a date"}}, "$.lessThan.value"),
        ({"lessThan": {"key": "d", "value": "2024-13-01"}}, "$.lessThan.value"),
        ({"greaterThanOrEquals": {"key": "a", "value": True}}, "$.greaterThanOrEquals.value"),
        ({"lessThanOrEquals": {"key": "a", "value": False}}, "$.lessThanOrEquals.value"),
        ({"greaterThan": {"key": "a", "value": None}}, "$.greaterThan.value"),
        ({"greaterThan": {"key": "a", "value": [1]}}, "$.greaterThan.value"),
        ({"equals": {"key": "a", "value": math.nan}}, "$.equals.value"),
        ({"notEquals": {"key": "a", "value": math.inf}}, "$.notEquals.value"),
        ({"greaterThan": {"key": "a", "value": math.nan}}, "$.greaterThan.value"),
        ({"lessThan": {"key": "a", "value": -math.inf}}, "$.lessThan.value"),
        ({"in": {"key": "a", "value": [1, math.nan]}}, "$.in.value[1]"),
        ({"listContains": {"key": "a", "value": math.nan}}, "$.listContains.value"),
        ({"equals": {"key": "a", "value": None}}, "$.equals.value"),
        ({"equals": {"key": "a", "value": [1]}}, "$.equals.value"),
        ({"equals": {"key": "a", "value": {"b": 1}}}, "$.equals.value"),
        ({"listContains": {"key": "a", "value": ["x"]}}, "$.listContains.value"),
        ({"startsWith": {"key": "a", "value": 1}}, "$.startsWith.value"),
        ({"stringContains": {"key": "a", "value": None}}, "$.stringContains.value"),
        ({"andAll": [{"equals": {"key": "a", "value": 1}}, {"greaterThan": {"key": "b", "value": "x"}}]},
         "$.andAll[1].greaterThan.value"),
        ({"andAll": [{"equals": {"key": "a", "value": 1}},
                     {"orAll": [{"in": {"key": "b", "value": [1, 2, {"x": 1}]}}]}]},
         "$.andAll[1].orAll[0].in.value[2]"),
        ({"orAll": [{"notAll": [{"andAll": [{"like": {}}]}]}]}, "$.orAll[0].notAll[0].andAll[0]"),
        ({"notAll": {"equals": {"key": "a"}}}, "$.notAll.equals"),
        ({"notAll": {"bogus": 1}}, "$.notAll"),
        ('{"andAll": [{"equals": {"key": "a", "value": NaN}}]}', "$.andAll[0].equals.value"),
        ('{"equals": {"key": "a"', "$"),
        ("not json at all", "$"),
        ("", "$"),
        ('{"greaterThan": {"key": "a", "value": ' + "9" * 5000 + "}}", "$"),
    ],
)
def test_malformed_filter_raises_with_path(bad: Any, path: str) -> None:
    with pytest.raises(FilterError) as info:
        parse_filter(bad)
    assert info.value.path == path
    assert f"(at {path})" in str(info.value)
    with pytest.raises(FilterError):
        matches(bad, {"a": 1})


def test_path_prefix_is_prepended() -> None:
    with pytest.raises(FilterError) as info:
        parse_filter({"andAll": [{"in": {"key": "a", "value": "x"}}]}, path="$.filter")
    assert info.value.path == "$.filter.andAll[0].in.value"
    with pytest.raises(FilterError) as info:
        parse_filter("{oops", path="$.filter")
    assert info.value.path == "$.filter"


def test_invalid_json_error_chains_the_decoder_error() -> None:
    with pytest.raises(FilterError) as info:
        parse_filter('{"equals": ')
    assert isinstance(info.value.__cause__, json.JSONDecodeError)


def test_non_string_operator_keys_raise_filter_error() -> None:
    with pytest.raises(FilterError) as info:
        parse_filter({1: {"key": "a", "value": 1}, "equals": {"key": "a", "value": 1}})
    assert info.value.path == "$"
    with pytest.raises(FilterError) as info:
        parse_filter({1: {"key": "a", "value": 1}})
    assert info.value.path == "$"


def test_huge_integers_are_valid_numbers() -> None:
    huge = 10**400
    assert matches(field("a") < huge, {"a": 10**399}) is True
    assert matches(field("a") > huge, {"a": 1e308}) is False
    assert matches({"equals": {"key": "a", "value": huge}}, {"a": huge}) is True


@pytest.mark.parametrize(
    ("build", "path"),
    [
        (lambda: field("a") > "soon", "$.greaterThan.value"),
        (lambda: field("a") >= True, "$.greaterThanOrEquals.value"),
        (lambda: field("a") < math.nan, "$.lessThan.value"),
        (lambda: field("a") == None, "$.equals.value"),  # noqa: E711
        (lambda: field("a") != [1], "$.notEquals.value"),
        (lambda: field("a").one_of("abc"), "$.in.value"),
        (lambda: field("a").not_one_of("abc"), "$.notIn.value"),
        (lambda: field("a").one_of([[1]]), "$.in.value[0]"),
        (lambda: field("a").not_one_of([1, math.inf]), "$.notIn.value[1]"),
        (lambda: field("a").starts_with(5), "$.startsWith.value"),
        (lambda: field("a").contains(None), "$.stringContains.value"),
        (lambda: field("a").list_contains([1]), "$.listContains.value"),
        (lambda: field("") == 1, "$.equals.key"),
        (lambda: and_all(), "$.andAll"),
        (lambda: or_all(), "$.orAll"),
        (lambda: not_all(), "$.notAll"),
        (lambda: (field("a") == 1) & {"equals": {"key": "b", "value": 2}}, "$.andAll[1]"),
        (lambda: Comparison("like", "a", 1), "$"),  # type: ignore[arg-type]
    ],
)
def test_builder_errors(build: Any, path: str) -> None:
    with pytest.raises(FilterError) as info:
        build()
    assert info.value.path == path


# ------------------------------------------------------------------------------------ (e) hierarchy


def test_filter_error_is_a_value_error() -> None:
    assert issubclass(FilterError, ValueError)
    assert issubclass(FilterError, FastragError)
    with pytest.raises(ValueError):
        parse_filter({"bogus": {}})
    with pytest.raises(ValueError):
        matches({"greaterThan": {"key": "a", "value": "not a date"}}, {})
    assert FilterError("boom").path == "$"


# ----------------------------------------------------------------------------- (f) matches is total

_finite_or_not = st.floats(allow_nan=True, allow_infinity=True)
_offsets = st.integers(-23 * 60 - 59, 23 * 60 + 59).map(lambda m: timezone(timedelta(minutes=m)))
_date_strings = st.one_of(
    st.dates().map(date.isoformat),
    st.datetimes().map(datetime.isoformat),
    st.datetimes(timezones=st.just(UTC)).map(lambda d: d.isoformat().replace("+00:00", "Z")),
    st.datetimes(timezones=_offsets).map(datetime.isoformat),
    st.from_regex(r"\A[0-9]{4}-.{0,20}\Z"),
)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**300, max_value=10**400),
    _finite_or_not,
    st.text(max_size=12),
    _date_strings,
    st.dates(),
    st.datetimes(),
    st.datetimes(timezones=_offsets),
)
_json_like = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner) | st.dictionaries(st.text(max_size=5), inner,
                                                                                          max_size=3),
    max_leaves=12,
)
_corpus_keys = sorted({key for doc in FILTER_CORPUS for key in doc.metadata} | {"no_such_key"})
_metadata = st.dictionaries(st.sampled_from(_corpus_keys) | st.text(max_size=6), _json_like, max_size=8)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(filter_json=FILTERS, metadata=_metadata)
def test_matches_never_raises_on_json_like_metadata(filter_json: dict[str, Any], metadata: dict[str, Any]) -> None:
    assert matches(filter_json, metadata) in (True, False)


@settings(max_examples=200, deadline=None)
@given(filter_json=FILTERS)
def test_matches_accepts_every_form_of_a_filter(filter_json: dict[str, Any]) -> None:
    ast = parse_filter(filter_json)
    for doc in FILTER_CORPUS:
        expected = matches(ast, doc.metadata)
        assert matches(filter_json, doc.metadata) is expected
        assert matches(_json(filter_json), doc.metadata) is expected


def test_matches_handles_date_objects_and_odd_numbers() -> None:
    assert matches(field("d") >= "2024-05-01", {"d": date(2024, 5, 1)})
    assert matches(field("d") < "2024-05-01T00:00:01Z", {"d": datetime(2024, 5, 1)})
    assert matches(field("d") > "2024-05-01T01:00:00+02:00", {"d": datetime(2024, 5, 1, tzinfo=UTC)})
    assert not matches(field("d") > "2024-05-01", {"d": "2024-05"})
    assert not matches(field("x") > 0, {"x": math.nan})
    assert not matches(field("x") == 1, {"x": math.nan})
    assert matches(field("x") != 1, {"x": math.nan})
    assert matches(field("x") > 0, {"x": math.inf})
    assert not matches(field("x") > 0, {"x": True})
    assert not matches(field("x") == 1, {"x": [1]})
    assert matches(field("x").list_contains(1), {"x": (1, 2)})
    assert not matches(field("x").list_contains(1), {"x": [True]})
    assert not matches(field("a.b") == 1, {"a": {"b": 1}})


# ---------------------------------------------------------------------------------- (g) negation

_corpus_metadata = st.sampled_from([dict(d.metadata) for d in FILTER_CORPUS])


@PROPERTY
@given(first=FILTERS, rest=st.lists(FILTERS, min_size=0, max_size=2), metadata=_corpus_metadata | _metadata)
def test_not_all_is_not_of_and(first: dict, rest: list[dict], metadata: dict[str, Any]) -> None:
    children = [first, *rest]
    expected = not all(matches(child, metadata) for child in children)
    assert matches({"notAll": children}, metadata) is expected
    assert matches({"notAll": [{"andAll": children}]}, metadata) is expected
    assert matches(not_all(*(parse_filter(c) for c in children)), metadata) is expected


@PROPERTY
@given(filter_json=FILTERS, metadata=_corpus_metadata | _metadata)
def test_double_negation(filter_json: dict, metadata: dict[str, Any]) -> None:
    node = parse_filter(filter_json)
    expected = matches(node, metadata)
    assert matches({"notAll": [{"notAll": [filter_json]}]}, metadata) is expected
    assert matches({"notAll": {"notAll": filter_json}}, metadata) is expected
    assert matches({"notAll": [filter_json]}, metadata) is (not expected)
    assert matches(~~node, metadata) is expected
    if not isinstance(node, Not):
        assert ~~node == node
    elif len(node.filters) == 1:
        assert ~node == node.filters[0]  # ~ unwraps a single negation rather than stacking another
    assert matches(~node, metadata) is (not expected)


@PROPERTY
@given(children=st.lists(FILTERS, min_size=2, max_size=3))
def test_inverting_a_not_all_gives_back_the_and(children: list[dict]) -> None:
    nodes = [parse_filter(c) for c in children]
    assert ~not_all(*nodes) == And(tuple(nodes))
    for doc in FILTER_CORPUS:
        assert matches(~not_all(*nodes), doc.metadata) is matches({"andAll": children}, doc.metadata)


def test_not_all_on_the_corpus_is_a_complement() -> None:
    for case in FILTER_CASES:
        assert _selected({"notAll": [case.filter]}) == ALL_IDS - case.expected_ids, case.name


def test_and_or_identities_on_the_corpus() -> None:
    cases = FILTER_CASES[:: max(1, len(FILTER_CASES) // 12)]
    for left in cases:
        for right in cases:
            pair = [left.filter, right.filter]
            assert _selected({"andAll": pair}) == left.expected_ids & right.expected_ids
            assert _selected({"orAll": pair}) == left.expected_ids | right.expected_ids
            # De Morgan: NOT (a AND b) == (NOT a) OR (NOT b).
            assert _selected({"notAll": pair}) == _selected({"orAll": [{"notAll": [f]} for f in pair]})


def test_ast_node_types() -> None:
    node = parse_filter(FILTER_CASES[-1].filter)
    assert isinstance(node, Not)
    assert isinstance(node.filters[0], Or)
    assert isinstance(node.filters[0].filters[0], And)


@pytest.mark.parametrize("depth", [33, 5000])
def test_too_deep_nesting_is_a_filter_error(depth):
    leaf = {"equals": {"key": "a", "value": 1}}
    node = leaf
    for _ in range(depth):
        node = {"notAll": [node]}
    with pytest.raises(FilterError, match="deeper than 32"):
        parse_filter(node)
    with pytest.raises(FilterError):
        parse_filter(json.dumps(node) if depth < 900 else "[" * 100_000)


def test_nesting_at_the_limit_parses():
    node = {"equals": {"key": "a", "value": 1}}
    for _ in range(32):
        node = {"notAll": [node]}
    assert matches(node, {"a": 1}) is True  # 32 negations cancel out


class _BackendQuery:
    """Stands for a backend SDK's own filter object."""


def test_a_single_native_filter_passes_through_combine():
    native = _BackendQuery()
    assert combine_filters(None, native) is native
    assert is_native_filter(native) and not is_native_filter({"equals": {"key": "a", "value": 1}})


def test_a_native_filter_is_never_silently_combined():
    with pytest.raises(UnsupportedFilterError):
        combine_filters({"equals": {"key": "a", "value": 1}}, _BackendQuery())


def test_comparisons_yields_every_comparison_with_the_path_errors_use() -> None:
    from fastrag.filters import comparisons

    node = parse_filter({"andAll": [
        {"equals": {"key": "a", "value": 1}},
        {"notAll": [{"in": {"key": "b", "value": ["x"]}}, {"orAll": [{"startsWith": {"key": "c", "value": "p"}}]}]},
    ]})
    assert [(path, c.key) for path, c in comparisons(node)] == [
        ("$.andAll[0]", "a"), ("$.andAll[1].notAll[0]", "b"), ("$.andAll[1].notAll[1].orAll[0]", "c"),
    ]
    lone = parse_filter({"equals": {"key": "a", "value": 1}})
    assert [(path, c.key) for path, c in comparisons(lone)] == [("$", "a")]
