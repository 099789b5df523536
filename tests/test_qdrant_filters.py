"""Qdrant filter translation: golden ``models.Filter`` objects written by hand, and the shadow payload fields.

Pure tests: no client, no collection. The behaviour against real points is in ``test_qdrant_store.py``.
"""

from __future__ import annotations

import uuid

import pytest

qdrant_client = pytest.importorskip("qdrant_client", reason="qdrant-client is not installed (fastrag-retrieval[qdrant])")

from qdrant_client import models as m  # noqa: E402

from fastrag.errors import FilterError, UnsupportedFilterError  # noqa: E402
from fastrag.filters import field  # noqa: E402
from fastrag.vector_store.qdrant import POINT_ID_NAMESPACE, point_id, shadow_fields, translate_filter  # noqa: E402


def fc(key: str, **kwargs) -> m.FieldCondition:  # noqa: ANN003
    return m.FieldCondition(key=key, **kwargs)


def only(condition) -> m.Filter:  # noqa: ANN001
    return m.Filter(must=[condition])


GOLDEN = [
    # equals: one shadow field per kind, so a bool never meets an int and "2020" never meets 2020
    ({"equals": {"key": "category", "value": "technology"}},
     only(fc("_f.k_category.s", match=m.MatchValue(value="technology")))),
    ({"equals": {"key": "year", "value": 2020}}, only(fc("_f.k_year.n", match=m.MatchValue(value="2020")))),
    ({"equals": {"key": "year", "value": 2020.0}}, only(fc("_f.k_year.n", match=m.MatchValue(value="2020")))),
    ({"equals": {"key": "year", "value": "2020"}}, only(fc("_f.k_year.s", match=m.MatchValue(value="2020")))),
    ({"equals": {"key": "rating", "value": -1.5}}, only(fc("_f.k_rating.n", match=m.MatchValue(value="-1.5")))),
    ({"equals": {"key": "published", "value": True}}, only(fc("_f.k_published.b", match=m.MatchValue(value=True)))),
    ({"equals": {"key": "published", "value": 1}}, only(fc("_f.k_published.n", match=m.MatchValue(value="1")))),
    # notEquals / notIn: must_not, so a point without the shadow field (a missing key) matches
    ({"notEquals": {"key": "category", "value": "x' OR '1'='1"}},
     m.Filter(must_not=[fc("_f.k_category.s", match=m.MatchValue(value="x' OR '1'='1"))])),
    ({"in": {"key": "year", "value": ["2020", 2021, 2021.0, True, "2020"]}},
     m.Filter(should=[
         fc("_f.k_year.s", match=m.MatchAny(any=["2020"])),
         fc("_f.k_year.n", match=m.MatchAny(any=["2021"])),
         fc("_f.k_year.b", match=m.MatchValue(value=True)),
     ])),
    ({"in": {"key": "city", "value": ["東京", "Москва"]}}, only(fc("_f.k_city.s", match=m.MatchAny(any=["東京", "Москва"])))),
    ({"in": {"key": "city", "value": []}}, only(m.HasIdCondition(has_id=[]))),
    ({"notIn": {"key": "published", "value": [True, False]}},
     m.Filter(must_not=[m.Filter(should=[
         fc("_f.k_published.b", match=m.MatchValue(value=True)),
         fc("_f.k_published.b", match=m.MatchValue(value=False)),
     ])])),
    ({"notIn": {"key": "city", "value": []}}, m.Filter(must_not=[m.HasIdCondition(has_id=[])])),
    # ranges: numbers on the float64 field r, dates on t (microseconds since the epoch, UTC)
    ({"greaterThan": {"key": "year", "value": 2020}}, only(fc("_f.k_year.r", range=m.Range(gt=2020.0)))),
    ({"lessThanOrEquals": {"key": "rating", "value": 3.75}}, only(fc("_f.k_rating.r", range=m.Range(lte=3.75)))),
    ({"greaterThanOrEquals": {"key": "date", "value": "2020-01-01"}},
     only(fc("_f.k_date.t", range=m.Range(gte=1577836800000000.0)))),
    ({"lessThan": {"key": "date", "value": "2020-01-01T02:00:00+02:00"}},
     only(fc("_f.k_date.t", range=m.Range(lt=1577836800000000.0)))),
    ({"greaterThan": {"key": "date", "value": "2022-02-28T23:59:59.5"}},
     only(fc("_f.k_date.t", range=m.Range(gt=1646092799500000.0)))),
    # strings: literal, case-sensitive prefix and substring on the string-only field s
    ({"startsWith": {"key": "code", "value": "50%_"}}, only(fc("_f.k_code.s", match=m.MatchPrefix(prefix="50%_")))),
    ({"startsWith": {"key": "code", "value": "a\\"}}, only(fc("_f.k_code.s", match=m.MatchPrefix(prefix="a\\")))),
    ({"stringContains": {"key": "author", "value": '") or true --'}},
     only(fc("_f.k_author.s", match=m.MatchSubstring(substring='") or true --')))),
    ({"startsWith": {"key": "code", "value": ""}},
     m.Filter(must_not=[m.IsEmptyCondition(is_empty=m.PayloadField(key="_f.k_code.s"))])),
    ({"stringContains": {"key": "code", "value": ""}},
     m.Filter(must_not=[m.IsEmptyCondition(is_empty=m.PayloadField(key="_f.k_code.s"))])),
    # listContains: tagged elements in l; Qdrant's any-element matching is exactly the semantics wanted
    ({"listContains": {"key": "tags", "value": "ai"}}, only(fc("_f.k_tags.l", match=m.MatchValue(value="s:ai")))),
    ({"listContains": {"key": "sizes", "value": 2.0}}, only(fc("_f.k_sizes.l", match=m.MatchValue(value="n:2")))),
    ({"listContains": {"key": "sizes", "value": True}}, only(fc("_f.k_sizes.l", match=m.MatchValue(value="b:true")))),
    # keys that are not plain identifiers are hex-encoded, never parsed as a JSON path
    ({"equals": {"key": "meta.lang", "value": "en"}},
     only(fc("_f.x_6d6574612e6c616e67.s", match=m.MatchValue(value="en")))),
    ({"equals": {"key": "x') OR 1=1 --", "value": "a"}},
     only(fc("_f.x_782729204f5220313d31202d2d.s", match=m.MatchValue(value="a")))),
    ({"equals": {"key": 'a"b[0]', "value": 1}}, only(fc("_f.x_6122625b305d.n", match=m.MatchValue(value="1")))),
    ({"equals": {"key": "Größe", "value": "L"}}, only(fc("_f.x_4772c3b6c39f65.s", match=m.MatchValue(value="L")))),
    # logic
    ({"andAll": [{"equals": {"key": "a", "value": "x"}}, {"greaterThan": {"key": "b", "value": 1}}]},
     m.Filter(must=[fc("_f.k_a.s", match=m.MatchValue(value="x")), fc("_f.k_b.r", range=m.Range(gt=1.0))])),
    ({"orAll": [{"equals": {"key": "a", "value": "x"}}, {"listContains": {"key": "t", "value": 3}}]},
     m.Filter(should=[fc("_f.k_a.s", match=m.MatchValue(value="x")), fc("_f.k_t.l", match=m.MatchValue(value="n:3"))])),
    ({"notAll": [{"equals": {"key": "a", "value": "x"}}]},
     m.Filter(must_not=[fc("_f.k_a.s", match=m.MatchValue(value="x"))])),
    ({"notAll": {"equals": {"key": "a", "value": "x"}}},
     m.Filter(must_not=[fc("_f.k_a.s", match=m.MatchValue(value="x"))])),
    ({"notAll": [{"equals": {"key": "a", "value": "x"}}, {"lessThan": {"key": "b", "value": 0}}]},
     m.Filter(must_not=[m.Filter(must=[fc("_f.k_a.s", match=m.MatchValue(value="x")),
                                       fc("_f.k_b.r", range=m.Range(lt=0.0))])])),
    ({"notAll": [{"notEquals": {"key": "a", "value": False}}]},
     m.Filter(must_not=[m.Filter(must_not=[fc("_f.k_a.b", match=m.MatchValue(value=False))])])),
    ({"andAll": [{"orAll": [{"equals": {"key": "a", "value": 1}}]}, {"notAll": [{"in": {"key": "b", "value": ["y"]}}]}]},
     m.Filter(must=[m.Filter(should=[fc("_f.k_a.n", match=m.MatchValue(value="1"))]),
                    m.Filter(must_not=[fc("_f.k_b.s", match=m.MatchAny(any=["y"]))])])),
]


@pytest.mark.parametrize(("filter_json", "expected"), GOLDEN, ids=lambda v: str(v)[:60] if isinstance(v, dict) else "")
def test_golden_translation(filter_json: dict, expected: m.Filter) -> None:
    assert translate_filter(filter_json) == expected


def test_builder_json_string_and_ast_translate_alike() -> None:
    ast = (field("category") == "science") & ~(field("year") > 2020)
    expected = m.Filter(must=[
        fc("_f.k_category.s", match=m.MatchValue(value="science")),
        m.Filter(must_not=[fc("_f.k_year.r", range=m.Range(gt=2020.0))]),
    ])
    assert translate_filter(ast) == expected
    json_text = '{"andAll": [{"equals": {"key": "category", "value": "science"}}, ' \
                '{"notAll": [{"greaterThan": {"key": "year", "value": 2020}}]}]}'
    assert translate_filter(json_text) == expected


def test_values_travel_verbatim() -> None:
    """No escaping and no string building: the value object is the filter value, byte for byte."""
    for value in ["x' OR '1'='1", '") or true --', "a\\b", "50%_off", "a*", "%", "_", "\x00\n\t", "Zoë 東京"]:
        native = translate_filter({"equals": {"key": "author", "value": value}})
        assert native.must[0].match.value == value
        native = translate_filter({"startsWith": {"key": "author", "value": value}})
        assert native.must[0].match.prefix == value


def test_integer_bound_without_exact_float64_is_unsupported() -> None:
    with pytest.raises(UnsupportedFilterError) as info:
        translate_filter({"greaterThan": {"key": "n", "value": 2**53 + 1}})
    assert info.value.path == "$.greaterThan.value"
    with pytest.raises(UnsupportedFilterError):
        translate_filter({"andAll": [{"lessThan": {"key": "n", "value": 10**400}}]})
    # 2**53 itself and 2**60 are exact float64 values
    assert translate_filter({"greaterThan": {"key": "n", "value": 2**60}}) == only(
        fc("_f.k_n.r", range=m.Range(gt=float(2**60)))
    )


def test_malformed_filters_raise_filter_error() -> None:
    with pytest.raises(FilterError):
        translate_filter({"greaterThan": {"key": "year", "value": "not a date"}})
    with pytest.raises(FilterError):
        translate_filter({"must": [{"key": "a", "match": {"value": 1}}]})  # Qdrant's JSON is not fastrag's


def test_shadow_fields_golden() -> None:
    metadata = {
        "category": "technology",
        "year": 2021,
        "rating": 4.0,
        "published": True,
        "date": "2023-01-01T00:00:00+02:00",
        "tags": ["ai", 2, 2.0, False, None, {"x": 1}, ["nested"]],
        "meta.lang": "en",
        "empty": [],
        "nothing": None,
        "nested": {"a": 1},
    }
    assert shadow_fields(metadata) == {
        "k_category": {"s": "technology"},
        "k_year": {"n": "2021", "r": 2021.0},
        "k_rating": {"n": "4", "r": 4.0},
        "k_published": {"b": True},
        "k_date": {"s": "2023-01-01T00:00:00+02:00", "t": 1672524000000000.0},
        "k_tags": {"l": ["s:ai", "n:2", "b:false"]},
        "x_6d6574612e6c616e67": {"s": "en"},
    }


def test_number_canonical_form_is_exact() -> None:
    fields = shadow_fields({"a": 0.1, "b": -0.0, "c": 9007199254740993, "d": 1e300})
    assert fields["k_a"]["n"] == "0.1"
    assert fields["k_b"]["n"] == "0"
    assert fields["k_c"]["n"] == "9007199254740993"  # an int beyond 2**53 keeps every digit for equality
    assert fields["k_d"]["n"] == str(int(1e300))


def test_point_id_is_a_stable_uuid5() -> None:
    namespace = uuid.uuid5(uuid.NAMESPACE_URL, "fastrag:document")
    assert namespace == POINT_ID_NAMESPACE
    assert point_id("d01") == str(uuid.uuid5(namespace, "d01")) == "bfecb15b-6eac-55fa-9f64-fc8a141262c9"
    assert point_id("d02") != point_id("d01")
