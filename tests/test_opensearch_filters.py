"""OpenSearch filter translation and document layout: golden outputs written by hand, plus properties.

These tests need neither a server nor the opensearch-py SDK: ``translate_filter``, ``document_source`` and
``index_body`` are pure functions.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastrag.errors import FilterError, InvalidParameterError
from fastrag.filters import field, parse_filter
from fastrag.models import Document
from fastrag.testing.filter_cases import FILTER_CASES, FILTER_CORPUS, filter_strategy
from fastrag.vector_store.opensearch import (
    OpenSearchQuery,
    document_source,
    encode_key,
    escape_wildcard,
    index_body,
    translate_filter,
)


def cmp(op: str, key: str, value):  # noqa: ANN001, ANN201
    return {op: {"key": key, "value": value}}


def should(*clauses):  # noqa: ANN001, ANN201
    return {"bool": {"should": list(clauses), "minimum_should_match": 1}}


# ------------------------------------------------------------------------------------------ golden

GOLDEN = [
    # equals: one shadow field per type, numbers in both numeric fields where representable
    ("equals_str", cmp("equals", "category", "technology"), {"term": {"f_str.category": "technology"}}),
    ("equals_str_number", cmp("equals", "year", "2020"), {"term": {"f_str.year": "2020"}}),
    ("equals_int", cmp("equals", "year", 2020),
     should({"term": {"f_int.year": 2020}}, {"term": {"f_num.year": 2020.0}})),
    ("equals_integral_float", cmp("equals", "rating", 5.0),
     should({"term": {"f_int.rating": 5}}, {"term": {"f_num.rating": 5.0}})),
    ("equals_float", cmp("equals", "rating", 4.5), {"term": {"f_num.rating": 4.5}}),
    ("equals_negative_zero", cmp("equals", "x", -0.0), should({"term": {"f_int.x": 0}}, {"term": {"f_num.x": 0.0}})),
    ("equals_true", cmp("equals", "published", True), {"term": {"f_bool.published": True}}),
    ("equals_false", cmp("equals", "published", False), {"term": {"f_bool.published": False}}),
    ("equals_int_beyond_int64_exact_double", cmp("equals", "x", 2**63), {"term": {"f_num.x": 9.223372036854775808e18}}),
    ("equals_int_beyond_int64_not_a_double", cmp("equals", "x", 2**63 + 1), {"match_none": {}}),
    ("equals_int64_max_not_a_double", cmp("equals", "x", 2**63 - 1), {"term": {"f_int.x": 9223372036854775807}}),
    ("equals_quotes_stay_values", cmp("equals", "author", "x' OR '1'='1"), {"term": {"f_str.author": "x' OR '1'='1"}}),
    ("equals_json_lookalike", cmp("equals", "a", '"}}, {"match_all": {}}'),
     {"term": {"f_str.a": '"}}, {"match_all": {}}'}}),
    ("not_equals", cmp("notEquals", "category", "technology"),
     {"bool": {"must_not": [{"term": {"f_str.category": "technology"}}]}}),
    ("not_equals_int", cmp("notEquals", "year", 2020),
     {"bool": {"must_not": [should({"term": {"f_int.year": 2020}}, {"term": {"f_num.year": 2020.0}})]}}),
    # in / notIn: terms per type
    ("in_strings", cmp("in", "category", ["technology", "science"]),
     {"terms": {"f_str.category": ["technology", "science"]}}),
    ("in_one", cmp("in", "category", ["technology"]), {"term": {"f_str.category": "technology"}}),
    ("in_mixed", cmp("in", "year", ["2020", 2021]),
     should({"term": {"f_str.year": "2020"}}, {"term": {"f_int.year": 2021}}, {"term": {"f_num.year": 2021.0}})),
    ("in_int_and_bool", cmp("in", "published", [1, False]),
     should({"term": {"f_int.published": 1}}, {"term": {"f_num.published": 1.0}}, {"term": {"f_bool.published": False}})),
    ("in_dedupes_by_type_and_value", cmp("in", "k", [1, 1.0, True, 2.5, 1]),
     should({"term": {"f_int.k": 1}}, {"terms": {"f_num.k": [1.0, 2.5]}}, {"term": {"f_bool.k": True}})),
    ("in_empty", cmp("in", "k", []), {"match_none": {}}),
    ("not_in", cmp("notIn", "category", ["technology", "science"]),
     {"bool": {"must_not": [{"terms": {"f_str.category": ["technology", "science"]}}]}}),
    ("not_in_empty", cmp("notIn", "k", []), {"match_all": {}}),
    # numeric ranges: an int bound for the long field, a double bound for the double field
    ("gt_int", cmp("greaterThan", "year", 2020),
     should({"range": {"f_int.year": {"gt": 2020}}}, {"range": {"f_num.year": {"gt": 2020.0}}})),
    ("gte_fraction", cmp("greaterThanOrEquals", "year", 2019.5),
     should({"range": {"f_int.year": {"gte": 2020}}}, {"range": {"f_num.year": {"gte": 2019.5}}})),
    ("gt_fraction", cmp("greaterThan", "year", 2019.5),
     should({"range": {"f_int.year": {"gt": 2019}}}, {"range": {"f_num.year": {"gt": 2019.5}}})),
    ("lt_fraction", cmp("lessThan", "year", 2019.5),
     should({"range": {"f_int.year": {"lt": 2020}}}, {"range": {"f_num.year": {"lt": 2019.5}}})),
    ("lte_fraction", cmp("lessThanOrEquals", "year", 2019.5),
     should({"range": {"f_int.year": {"lte": 2019}}}, {"range": {"f_num.year": {"lte": 2019.5}}})),
    ("lt_negative_fraction", cmp("lessThan", "rating", -1.5),
     should({"range": {"f_int.rating": {"lt": -1}}}, {"range": {"f_num.rating": {"lt": -1.5}}})),
    ("lte_negative_zero", cmp("lessThanOrEquals", "x", -0.0),
     should({"range": {"f_int.x": {"lte": 0}}}, {"range": {"f_num.x": {"lte": 0.0}}})),
    # 2**53 + 1 is not a double; the nearest double below is 2**53, so x > v <=> x > 2**53 for doubles
    ("gt_int_rounded_down_as_double", cmp("greaterThan", "x", 2**53 + 1),
     should({"range": {"f_int.x": {"gt": 9007199254740993}}}, {"range": {"f_num.x": {"gt": 9007199254740992.0}}})),
    ("lt_int_rounded_down_as_double", cmp("lessThan", "x", 2**53 + 1),
     should({"range": {"f_int.x": {"lt": 9007199254740993}}}, {"range": {"f_num.x": {"lte": 9007199254740992.0}}})),
    # 2**53 + 3 rounds up to 2**53 + 4, so x > v <=> x >= 2**53 + 4 and x <= v <=> x < 2**53 + 4
    ("gt_int_rounded_up_as_double", cmp("greaterThan", "x", 2**53 + 3),
     should({"range": {"f_int.x": {"gt": 9007199254740995}}}, {"range": {"f_num.x": {"gte": 9007199254740996.0}}})),
    ("lte_int_rounded_up_as_double", cmp("lessThanOrEquals", "x", 2**53 + 3),
     should({"range": {"f_int.x": {"lte": 9007199254740995}}}, {"range": {"f_num.x": {"lt": 9007199254740996.0}}})),
    ("gt_beyond_every_number", cmp("greaterThan", "x", 10**400), {"match_none": {}}),
    ("lt_beyond_every_number", cmp("lessThan", "x", 10**400),
     should({"exists": {"field": "f_int.x"}}, {"exists": {"field": "f_num.x"}})),
    ("gt_huge_double", cmp("greaterThan", "x", 1e300), {"range": {"f_num.x": {"gt": 1e300}}}),
    ("gte_tiny_double", cmp("greaterThanOrEquals", "x", -1e300),
     should({"exists": {"field": "f_int.x"}}, {"range": {"f_num.x": {"gte": -1e300}}})),
    ("gte_int64_max", cmp("greaterThanOrEquals", "x", 2**63 - 1),
     should({"range": {"f_int.x": {"gte": 9223372036854775807}}}, {"range": {"f_num.x": {"gte": 9.223372036854775808e18}}})),
    ("gt_int64_max", cmp("greaterThan", "x", 2**63 - 1), {"range": {"f_num.x": {"gte": 9.223372036854775808e18}}}),
    # date ranges: epoch microseconds (UTC) on the f_date shadow; values from `date -u -d ... +%s`
    ("gte_date_only", cmp("greaterThanOrEquals", "date", "2020-01-01"),
     {"range": {"f_date.date": {"gte": 1577836800000000}}}),
    ("lt_date_with_offset", cmp("lessThan", "date", "2023-01-01T00:00:00+02:00"),
     {"range": {"f_date.date": {"lt": 1672524000000000}}}),
    ("lte_negative_offset", cmp("lessThanOrEquals", "date", "2018-07-04T13:00:00-04:00"),
     {"range": {"f_date.date": {"lte": 1530723600000000}}}),
    ("gt_naive_is_utc", cmp("greaterThan", "date", "2022-02-28T23:59:59"),
     {"range": {"f_date.date": {"gt": 1646092799000000}}}),
    ("gt_before_epoch_fraction", cmp("greaterThan", "date", "1969-12-31T23:59:59.500000Z"),
     {"range": {"f_date.date": {"gt": -500000}}}),
    ("gte_year_one", cmp("greaterThanOrEquals", "date", "0001-01-01"),
     {"range": {"f_date.date": {"gte": -62135596800000000}}}),
    # strings
    ("starts_with", cmp("startsWith", "category", "tech"), {"prefix": {"f_str.category": {"value": "tech"}}}),
    ("starts_with_literal_specials", cmp("startsWith", "code", "50%_*?\\"),
     {"prefix": {"f_str.code": {"value": "50%_*?\\"}}}),
    ("starts_with_empty", cmp("startsWith", "category", ""), {"exists": {"field": "f_str.category"}}),
    ("contains", cmp("stringContains", "category", "ch"), {"wildcard": {"f_str.category": {"value": "*ch*"}}}),
    ("contains_escaped", cmp("stringContains", "code", "a*b?c\\d"),
     {"wildcard": {"f_str.code": {"value": "*a\\*b\\?c\\\\d*"}}}),
    ("contains_percent_underscore", cmp("stringContains", "code", "%_"), {"wildcard": {"f_str.code": {"value": "*%_*"}}}),
    ("contains_empty", cmp("stringContains", "code", ""), {"exists": {"field": "f_str.code"}}),
    # listContains: the list-element shadows
    ("list_contains_str", cmp("listContains", "tags", "ai"), {"term": {"l_str.tags": "ai"}}),
    ("list_contains_int", cmp("listContains", "sizes", 2),
     should({"term": {"l_int.sizes": 2}}, {"term": {"l_num.sizes": 2.0}})),
    ("list_contains_bool", cmp("listContains", "sizes", True), {"term": {"l_bool.sizes": True}}),
    # keys are percent-encoded field names
    ("dotted_key", cmp("equals", "meta.lang", "en"), {"term": {"f_str.meta%2Elang": "en"}}),
    ("injection_key", cmp("equals", "x') OR 1=1 --", "a"), {"term": {"f_str.x%27%29%20OR%201%3D1%20--": "a"}}),
    ("unicode_key", cmp("equals", "städt", "a"), {"term": {"f_str.st%C3%A4dt": "a"}}),
    ("pattern_key", cmp("startsWith", "a*", "b"), {"prefix": {"f_str.a%2A": {"value": "b"}}}),
    # logic
    ("and_all", {"andAll": [cmp("equals", "a", "x"), cmp("equals", "b", True)]},
     {"bool": {"filter": [{"term": {"f_str.a": "x"}}, {"term": {"f_bool.b": True}}]}}),
    ("or_all", {"orAll": [cmp("equals", "a", "x"), cmp("equals", "b", True)]},
     should({"term": {"f_str.a": "x"}}, {"term": {"f_bool.b": True}})),
    ("not_all_single", {"notAll": [cmp("equals", "a", "x")]}, {"bool": {"must_not": [{"term": {"f_str.a": "x"}}]}}),
    ("not_all_object_form", {"notAll": cmp("equals", "a", "x")}, {"bool": {"must_not": [{"term": {"f_str.a": "x"}}]}}),
    ("not_all_many", {"notAll": [cmp("equals", "a", "x"), cmp("equals", "b", True)]},
     {"bool": {"must_not": [{"bool": {"filter": [{"term": {"f_str.a": "x"}}, {"term": {"f_bool.b": True}}]}}]}}),
    ("nested", {"andAll": [{"orAll": [cmp("startsWith", "c", "t"), {"notAll": [cmp("in", "d", ["u"])]}]}]},
     {"bool": {"filter": [should({"prefix": {"f_str.c": {"value": "t"}}},
                                 {"bool": {"must_not": [{"term": {"f_str.d": "u"}}]}})]}}),
]


@pytest.mark.parametrize(("name", "filter_json", "expected"), GOLDEN, ids=[g[0] for g in GOLDEN])
def test_translate_filter_golden(name: str, filter_json: dict, expected: dict) -> None:
    got = translate_filter(filter_json)
    assert got == expected
    # float and int are told apart in the JSON that is sent (2020 vs 2020.0), so compare the text as well
    assert json.dumps(got, sort_keys=True) == json.dumps(expected, sort_keys=True)


def test_negative_zero_is_sent_as_positive_zero() -> None:
    assert "-0.0" not in json.dumps(translate_filter(cmp("equals", "x", -0.0)))
    assert "-0.0" not in json.dumps(translate_filter(cmp("greaterThan", "x", -0.0)))


def test_translate_accepts_ast_and_json_string() -> None:
    ast = (field("category") == "science") & ~(field("year") >= 2020)
    expected = {"bool": {"filter": [
        {"term": {"f_str.category": "science"}},
        {"bool": {"must_not": [
            should({"range": {"f_int.year": {"gte": 2020}}}, {"range": {"f_num.year": {"gte": 2020.0}}}),
        ]}},
    ]}}
    assert translate_filter(ast) == expected
    assert translate_filter(json.dumps({"equals": {"key": "k", "value": "v"}})) == {"term": {"f_str.k": "v"}}


@pytest.mark.parametrize("bad", [None, {"bogus": {}}, {"equals": {"key": "", "value": 1}},
                                 {"greaterThan": {"key": "d", "value": "not a date"}}, "{not json"])
def test_malformed_filters_raise_filter_error(bad) -> None:  # noqa: ANN001
    with pytest.raises(FilterError):
        translate_filter(bad)


def test_every_table_case_translates_to_json() -> None:
    """No construct of the filter table is unsupported, and every translation is plain JSON."""
    for case in FILTER_CASES:
        dsl = translate_filter(case.filter)
        assert json.loads(json.dumps(dsl, allow_nan=False)) == dsl, case.name


def _string_leaves(node):  # noqa: ANN001, ANN202
    if isinstance(node, dict):
        for key, value in node.items():
            yield key
            yield from _string_leaves(value)
    elif isinstance(node, list):
        for item in node:
            yield from _string_leaves(item)
    elif isinstance(node, str):
        yield node


@settings(max_examples=300, deadline=None, database=None)
@given(filter_json=filter_strategy(FILTER_CORPUS))
def test_generated_filters_translate_with_values_kept_whole(filter_json: dict) -> None:
    """Any generated filter translates; every string value is a JSON value of its own (wildcards escaped)."""
    dsl = translate_filter(filter_json)
    leaves = set(_string_leaves(json.loads(json.dumps(dsl, allow_nan=False))))
    for node in _walk(parse_filter(filter_json)):
        if isinstance(node.value, str) and node.value and node.operator not in RANGE_OPS:
            literal = f"*{escape_wildcard(node.value)}*" if node.operator == "stringContains" else node.value
            assert literal in leaves, (node, dsl)
        elif node.operator in ("in", "notIn"):
            assert all(v in leaves for v in node.value if isinstance(v, str)), (node, dsl)


RANGE_OPS = ("greaterThan", "greaterThanOrEquals", "lessThan", "lessThanOrEquals")


def _walk(node):  # noqa: ANN001, ANN202
    children = getattr(node, "filters", None)
    if children is None:
        yield node
        return
    for child in children:
        yield from _walk(child)


# ------------------------------------------------------------------------------------------ keys


@pytest.mark.parametrize(("key", "encoded"), [
    ("category", "category"), ("snake_case-key9", "snake_case-key9"), ("meta.lang", "meta%2Elang"),
    ("a b", "a%20b"), ("%", "%25"), ("*?", "%2A%3F"), ("東京", "%E6%9D%B1%E4%BA%AC"), ("_id", "_id"),
])
def test_encode_key_golden(key: str, encoded: str) -> None:
    assert encode_key(key) == encoded


@settings(max_examples=300, deadline=None, database=None)
@given(st.text(min_size=1, max_size=8), st.text(min_size=1, max_size=8))
def test_encode_key_is_injective_and_field_safe(a: str, b: str) -> None:
    assert re.fullmatch(r"[A-Za-z0-9_%-]+", encode_key(a))
    assert (encode_key(a) == encode_key(b)) == (a == b)


# ------------------------------------------------------------------------------------- documents


def test_document_source_golden() -> None:
    doc = Document(
        id="d1",
        content="Solar panels",
        metadata={
            "title": "Energy",
            "year": 2020,
            "year_str": "2020",
            "rating": 3.0,
            "neg_zero": -0.0,
            "published": True,
            "date": "2023-01-01T00:00:00+02:00",
            "tags": ["ai", 2, 2.5, False, {"x": 1}, ["nested"]],
            "huge": 2**70,
            "nested": {"a": [1, 2]},
            "none": None,
            "meta.lang": "en",
            "": "empty key",
        },
    )
    source = document_source(doc, [0.5, -0.25])
    assert source == {
        "id": "d1",
        "content": "Solar panels",
        "title": "Energy",
        "metadata_json": json.dumps(
            {"title": "Energy", "year": 2020, "year_str": "2020", "rating": 3.0, "neg_zero": -0.0, "published": True,
             "date": "2023-01-01T00:00:00+02:00", "tags": ["ai", 2, 2.5, False, {"x": 1}, ["nested"]],
             "huge": 2**70, "nested": {"a": [1, 2]}, "none": None, "meta.lang": "en", "": "empty key"},
            ensure_ascii=False,
        ),
        "f_str": {"title": "Energy", "year_str": "2020", "date": "2023-01-01T00:00:00+02:00", "meta%2Elang": "en"},
        "f_int": {"year": 2020},
        "f_num": {"rating": 3.0, "neg_zero": 0.0, "huge": 1.1805916207174113e21},
        "f_bool": {"published": True},
        "f_date": {"date": 1672524000000000},
        "l_str": {"tags": ["ai"]},
        "l_int": {"tags": [2]},
        "l_num": {"tags": [2.5]},
        "l_bool": {"tags": [False]},
        "embedding": [0.5, -0.25],
    }
    assert json.loads(source["metadata_json"]) == dict(doc.metadata)
    assert "-0.0" not in json.dumps(source["f_num"])


def test_document_source_refuses_what_opensearch_cannot_index() -> None:
    with pytest.raises(InvalidParameterError, match="JSON"):
        document_source(Document(id="a", content="x", metadata={"v": float("nan")}))
    with pytest.raises(InvalidParameterError, match="JSON"):
        document_source(Document(id="a", content="x", metadata={"v": object()}))
    with pytest.raises(InvalidParameterError, match="32766"):
        document_source(Document(id="a", content="x", metadata={"long": "é" * 20000}))


def test_index_body_golden() -> None:
    assert index_body(dimension=4) == {
        "settings": {"index": {"knn": True}},
        "mappings": {
            "_meta": {"fastrag": {"schema": 1}},
            "dynamic_templates": [
                {"f_str": {"path_match": "f_str.*", "mapping": {"type": "keyword"}}},
                {"f_int": {"path_match": "f_int.*", "mapping": {"type": "long"}}},
                {"f_num": {"path_match": "f_num.*", "mapping": {"type": "double"}}},
                {"f_bool": {"path_match": "f_bool.*", "mapping": {"type": "boolean"}}},
                {"f_date": {"path_match": "f_date.*", "mapping": {"type": "long"}}},
                {"l_str": {"path_match": "l_str.*", "mapping": {"type": "keyword"}}},
                {"l_int": {"path_match": "l_int.*", "mapping": {"type": "long"}}},
                {"l_num": {"path_match": "l_num.*", "mapping": {"type": "double"}}},
                {"l_bool": {"path_match": "l_bool.*", "mapping": {"type": "boolean"}}},
            ],
            "properties": {
                "id": {"type": "keyword"},
                "content": {"type": "text", "analyzer": "english"},
                "title": {"type": "text", "analyzer": "english"},
                "metadata_json": {"type": "keyword", "index": False, "doc_values": False},
                "f_str": {"type": "object"}, "f_int": {"type": "object"}, "f_num": {"type": "object"},
                "f_bool": {"type": "object"}, "f_date": {"type": "object"}, "l_str": {"type": "object"},
                "l_int": {"type": "object"}, "l_num": {"type": "object"}, "l_bool": {"type": "object"},
                "embedding": {
                    "type": "knn_vector",
                    "dimension": 4,
                    "method": {"name": "hnsw", "space_type": "cosinesimil", "engine": "lucene"},
                },
            },
        },
    }
    assert "embedding" not in index_body(dimension=None)["mappings"]["properties"]
    assert index_body(dimension=None, analyzer="german")["mappings"]["properties"]["title"]["analyzer"] == "german"


def test_native_query_is_kept_as_plain_json() -> None:
    native = OpenSearchQuery({"term": {"f_str.category": "science"}})
    assert native.query == {"term": {"f_str.category": "science"}}
    with pytest.raises(InvalidParameterError):
        OpenSearchQuery({})
    with pytest.raises(InvalidParameterError):
        OpenSearchQuery({"term": {"x": float("nan")}})
