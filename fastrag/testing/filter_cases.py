"""A fixed corpus and a hand-worked table of (filter, expected ids) that every store must reproduce.

:data:`FILTER_CORPUS` holds twelve small documents (``d01`` .. ``d12``) whose metadata exercises the filter
semantics documented in :mod:`fastrag.filters`: mixed types under one key (``year`` is the *string*
``"2020"`` in ``d04``; ``published`` is the *int* ``1`` in ``d05``; ``tags`` is a plain string in ``d07``),
missing keys (``d09`` has only a category, ``d10`` has no metadata at all), dates with and without times
and offsets, unicode, and values full of quotes, backslashes, ``%`` and ``_``.

:data:`FILTER_CASES` lists filters in their JSON form with the ids they must select. Every expected set was
worked out by hand from the corpus and the documented semantics, not by calling
:func:`fastrag.filters.matches`; ``tests/test_filters.py`` cross-checks the two. A store contract test
upserts the corpus, runs each case and compares ids::

    @pytest.mark.parametrize("case", FILTER_CASES, ids=lambda c: c.name)
    async def test_filter_table(store, case):
        hits = await store.search_vector(query, k=len(FILTER_CORPUS), filter=case.filter)
        assert {d.id for d in hits} == case.expected_ids

:func:`filter_strategy` generates random valid filters over a corpus's keys and values for property-based
tests that compare a store with :func:`fastrag.filters.matches` (needs ``hypothesis``, in the ``test``
extra).

The float metadata key is ``rating``, not ``score``: ``score`` and ``rank`` are reserved keys
(:data:`fastrag.models.RESERVED_KEYS`) that ranking stages stamp on the documents they return.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from fastrag.filters import COMPARISON_OPERATORS, RANGE_OPERATORS, parse_date
from fastrag.models import Document

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

__all__ = ["ALL_IDS", "FILTER_CASES", "FILTER_CORPUS", "MISSING_KEY", "FilterCase", "filter_strategy"]


@dataclass(frozen=True, slots=True)
class FilterCase:
    """One row of the filter table.

    Attributes:
        name: a unique, test-id friendly name.
        filter: the filter in its JSON form (see :mod:`fastrag.filters`). Do not mutate it.
        expected_ids: ids of the :data:`FILTER_CORPUS` documents the filter selects.
    """

    name: str
    filter: dict[str, Any]
    expected_ids: frozenset[str]


# ------------------------------------------------------------------------------------------- corpus
#
# The same corpus as a table (``-`` is a missing key). Dates are also given as UTC instants, in order.
#
# id   category    year    rating published  date (UTC instant)            tags              city
# d01  technology  2021    4.5    True       2021-03-15 00:00              [python, ai]      Zürich
# d02  science     2019    3.0    False      2019-11-02 08:30              [physics]         東京
# d03  technology  2023    4.0    True       2022-12-31 22:00 (+02:00)     [ai, ml, python]  Москва
# d04  health      "2020"  2.5    False      2020-06-30 00:00              -                 zürich
# d05  science     2022    5      1 (int)    2022-02-28 23:59:59 (naive)   [physics, ai]     São Paulo
# d06  Technology  2018    1.5    True       2018-07-04 17:00 (-05:00)     [history]         -
# d07  art         -       3.75   -          "not a date"                  "ai" (a string)   -
# d08  science     2020    -1.5   False      2020-01-01 00:00              [ml]              Zürich
# d09  health      -       -      -          -                             -                 -
# d10  -           -       -      -          -                             -                 -
# d11  technology  2024    4.5    True       2024-02-29 10:00              [python, rust]    東京都
# d12  science     2020    3.5    True       2020-07-01 01:00 (-02:00)     [ML]              Москва
#
# id   author           code        other
# d01  O'Brien          50%_off     sizes [1, 2]; "meta.lang": "en"
# d02  Say "hi"         a\b
# d03  Ана              50-off
# d04  -                5000_off
# d05  x' OR '1'='1     50_50       sizes [2, 3]
# d06  ") or true --    a%b
# d07  -                ab
# d08  O'Brien          -
# d11  Zoë              -

FILTER_CORPUS: list[Document] = [
    Document(
        id="d01",
        content="Python tooling for machine learning in Zürich.",
        metadata={
            "category": "technology",
            "year": 2021,
            "rating": 4.5,
            "published": True,
            "date": "2021-03-15",
            "tags": ["python", "ai"],
            "sizes": [1, 2],
            "city": "Zürich",
            "author": "O'Brien",
            "code": "50%_off",
            "meta.lang": "en",
        },
    ),
    Document(
        id="d02",
        content="A survey of particle physics experiments in Tokyo.",
        metadata={
            "category": "science",
            "year": 2019,
            "rating": 3.0,
            "published": False,
            "date": "2019-11-02T08:30:00Z",
            "tags": ["physics"],
            "city": "東京",
            "author": 'Say "hi"',
            "code": "a\\b",
        },
    ),
    Document(
        id="d03",
        content="Machine learning models written in Python, from Moscow.",
        metadata={
            "category": "technology",
            "year": 2023,
            "rating": 4.0,
            "published": True,
            "date": "2023-01-01T00:00:00+02:00",
            "tags": ["ai", "ml", "python"],
            "city": "Москва",
            "author": "Ана",
            "code": "50-off",
        },
    ),
    Document(
        id="d04",
        content="Public health guidance on summer heat.",
        metadata={
            "category": "health",
            "year": "2020",
            "rating": 2.5,
            "published": False,
            "date": "2020-06-30",
            "city": "zürich",
            "code": "5000_off",
        },
    ),
    Document(
        id="d05",
        content="Solar physics and artificial intelligence in São Paulo.",
        metadata={
            "category": "science",
            "year": 2022,
            "rating": 5,
            "published": 1,
            "date": "2022-02-28T23:59:59",
            "tags": ["physics", "ai"],
            "sizes": [2, 3],
            "city": "São Paulo",
            "author": "x' OR '1'='1",
            "code": "50_50",
        },
    ),
    Document(
        id="d06",
        content="The history of the telegraph.",
        metadata={
            "category": "Technology",
            "year": 2018,
            "rating": 1.5,
            "published": True,
            "date": "2018-07-04T12:00:00-05:00",
            "tags": ["history"],
            "author": '") or true --',
            "code": "a%b",
        },
    ),
    Document(
        id="d07",
        content="Painting with light: an essay.",
        metadata={
            "category": "art",
            "rating": 3.75,
            "date": "not a date",
            "tags": "ai",
            "code": "ab",
        },
    ),
    Document(
        id="d08",
        content="Chemistry of the new year's fireworks.",
        metadata={
            "category": "science",
            "year": 2020,
            "rating": -1.5,
            "published": False,
            "date": "2020-01-01T00:00:00Z",
            "tags": ["ml"],
            "city": "Zürich",
            "author": "O'Brien",
        },
    ),
    Document(id="d09", content="Sleep and recovery.", metadata={"category": "health"}),
    Document(id="d10", content="An untitled note without metadata."),
    Document(
        id="d11",
        content="Rust and Python interoperability in Tokyo.",
        metadata={
            "category": "technology",
            "year": 2024,
            "rating": 4.5,
            "published": True,
            "date": "2024-02-29T10:00:00+00:00",
            "tags": ["python", "rust"],
            "city": "東京都",
            "author": "Zoë",
        },
    ),
    Document(
        id="d12",
        content="Machine learning for climate science in Moscow.",
        metadata={
            "category": "science",
            "year": 2020,
            "rating": 3.5,
            "published": True,
            "date": "2020-06-30T23:00:00-02:00",
            "tags": ["ML"],
            "city": "Москва",
        },
    ),
]

ALL_IDS: frozenset[str] = frozenset(f"d{n:02d}" for n in range(1, 13))
"""The ids of every document in :data:`FILTER_CORPUS`."""


# ------------------------------------------------------------------------------------------ helpers


def _ids(*numbers: int) -> frozenset[str]:
    return frozenset(f"d{n:02d}" for n in numbers)


def _all_but(*numbers: int) -> frozenset[str]:
    return ALL_IDS - _ids(*numbers)


def _cmp(op: str, key: str, value: Any) -> dict[str, Any]:
    return {op: {"key": key, "value": value}}


def _and(*filters: dict[str, Any]) -> dict[str, Any]:
    return {"andAll": list(filters)}


def _or(*filters: dict[str, Any]) -> dict[str, Any]:
    return {"orAll": list(filters)}


def _not(*filters: dict[str, Any]) -> dict[str, Any]:
    return {"notAll": list(filters)}


def _case(name: str, filter_json: dict[str, Any], expected: frozenset[str]) -> FilterCase:
    return FilterCase(name=name, filter=filter_json, expected_ids=expected)


# --------------------------------------------------------------------------------------------- table

FILTER_CASES: list[FilterCase] = [
    # -------------------------------------------------------------------------------------- equals
    _case("equals_string", _cmp("equals", "category", "technology"), _ids(1, 3, 11)),
    _case("equals_string_case_sensitive", _cmp("equals", "category", "Technology"), _ids(6)),
    _case("equals_int", _cmp("equals", "year", 2020), _ids(8, 12)),
    _case("equals_int_given_as_float", _cmp("equals", "year", 2020.0), _ids(8, 12)),
    _case("equals_string_number_only_matches_string", _cmp("equals", "year", "2020"), _ids(4)),
    _case("equals_float", _cmp("equals", "rating", 4.5), _ids(1, 11)),
    _case("equals_int_matches_float_metadata", _cmp("equals", "rating", 3), _ids(2)),
    _case("equals_float_matches_int_metadata", _cmp("equals", "rating", 5.0), _ids(5)),
    _case("equals_negative_float", _cmp("equals", "rating", -1.5), _ids(8)),
    _case("equals_bool_true_not_int_1", _cmp("equals", "published", True), _ids(1, 3, 6, 11, 12)),
    _case("equals_bool_false", _cmp("equals", "published", False), _ids(2, 4, 8)),
    _case("equals_int_1_not_bool_true", _cmp("equals", "published", 1), _ids(5)),
    _case("equals_int_0_not_bool_false", _cmp("equals", "published", 0), _ids()),
    _case("equals_scalar_never_matches_list", _cmp("equals", "tags", "physics"), _ids()),
    _case("equals_scalar_matches_string_under_list_key", _cmp("equals", "tags", "ai"), _ids(7)),
    _case("equals_missing_key", _cmp("equals", "no_such_key", "technology"), _ids()),
    _case("equals_unicode_umlaut", _cmp("equals", "city", "Zürich"), _ids(1, 8)),
    _case("equals_unicode_without_umlaut", _cmp("equals", "city", "Zurich"), _ids()),
    _case("equals_unicode_cjk", _cmp("equals", "city", "東京"), _ids(2)),
    _case("equals_unicode_cyrillic", _cmp("equals", "city", "Москва"), _ids(3, 12)),
    _case("equals_single_quote", _cmp("equals", "author", "O'Brien"), _ids(1, 8)),
    _case("equals_double_quotes", _cmp("equals", "author", 'Say "hi"'), _ids(2)),
    _case("equals_backslash", _cmp("equals", "code", "a\\b"), _ids(2)),
    _case("equals_percent_underscore", _cmp("equals", "code", "50%_off"), _ids(1)),
    _case("equals_sql_injection_value_stored", _cmp("equals", "author", "x' OR '1'='1"), _ids(5)),
    _case("equals_sql_injection_value_absent", _cmp("equals", "category", "x' OR '1'='1"), _ids()),
    _case("equals_quote_paren_injection_stored", _cmp("equals", "author", '") or true --'), _ids(6)),
    _case("equals_quote_paren_injection_absent", _cmp("equals", "category", '") or true --'), _ids()),
    _case("equals_percent_is_not_a_wildcard", _cmp("equals", "category", "%"), _ids()),
    _case("equals_underscore_is_not_a_wildcard", _cmp("equals", "code", "a_b"), _ids()),
    _case("equals_dotted_key_is_one_key", _cmp("equals", "meta.lang", "en"), _ids(1)),
    _case("equals_injection_looking_key", _cmp("equals", "x') OR 1=1 --", "a"), _ids()),
    # ----------------------------------------------------------------------------------- notEquals
    _case("not_equals_string", _cmp("notEquals", "category", "technology"), _all_but(1, 3, 11)),
    _case("not_equals_int_includes_string_and_missing", _cmp("notEquals", "year", 2020), _all_but(8, 12)),
    _case("not_equals_string_number", _cmp("notEquals", "year", "2020"), _all_but(4)),
    _case("not_equals_bool_includes_int_1_and_missing", _cmp("notEquals", "published", True),
          _ids(2, 4, 5, 7, 8, 9, 10)),
    _case("not_equals_missing_key_matches_all", _cmp("notEquals", "no_such_key", "x"), ALL_IDS),
    _case("not_equals_list_key", _cmp("notEquals", "tags", "ai"), _all_but(7)),
    _case("not_equals_single_quote", _cmp("notEquals", "author", "O'Brien"), _all_but(1, 8)),
    _case("not_equals_injection_looking_key", _cmp("notEquals", "x') OR 1=1 --", "a"), ALL_IDS),
    # ------------------------------------------------------------------------------------------ in
    _case("in_strings", _cmp("in", "category", ["technology", "science"]), _ids(1, 2, 3, 5, 8, 11, 12)),
    _case("in_ints", _cmp("in", "year", [2019, 2020]), _ids(2, 8, 12)),
    _case("in_mixed_string_and_int", _cmp("in", "year", ["2020", 2021]), _ids(1, 4)),
    _case("in_numbers_by_value", _cmp("in", "rating", [4, 3.5]), _ids(3, 12)),
    _case("in_bool", _cmp("in", "published", [True]), _ids(1, 3, 6, 11, 12)),
    _case("in_int_1_not_bool", _cmp("in", "published", [1]), _ids(5)),
    _case("in_int_and_bool", _cmp("in", "published", [1, False]), _ids(2, 4, 5, 8)),
    _case("in_unicode", _cmp("in", "city", ["東京", "Москва", "São Paulo"]), _ids(2, 3, 5, 12)),
    _case("in_quotes_and_injection", _cmp("in", "author", ["O'Brien", "x' OR '1'='1", 'Say "hi"']),
          _ids(1, 2, 5, 8)),
    _case("in_never_matches_list", _cmp("in", "tags", ["ai", "physics"]), _ids(7)),
    _case("in_missing_key", _cmp("in", "no_such_key", ["x", 1]), _ids()),
    _case("in_percent_literal", _cmp("in", "code", ["50%", "a%"]), _ids()),
    # --------------------------------------------------------------------------------------- notIn
    _case("not_in_strings", _cmp("notIn", "category", ["technology", "science"]), _ids(4, 6, 7, 9, 10)),
    _case("not_in_ints_includes_string_and_missing", _cmp("notIn", "year", [2019, 2020]),
          _ids(1, 3, 4, 5, 6, 7, 9, 10, 11)),
    _case("not_in_bools_includes_int_and_missing", _cmp("notIn", "published", [True, False]), _ids(5, 7, 9, 10)),
    _case("not_in_missing_key_matches_all", _cmp("notIn", "no_such_key", ["x"]), ALL_IDS),
    _case("not_in_unicode", _cmp("notIn", "city", ["Zürich", "zürich"]), _all_but(1, 4, 8)),
    # ------------------------------------------------------------------------------ numeric ranges
    _case("gt_int", _cmp("greaterThan", "year", 2020), _ids(1, 3, 5, 11)),
    _case("gte_int_skips_string_year", _cmp("greaterThanOrEquals", "year", 2020), _ids(1, 3, 5, 8, 11, 12)),
    _case("lt_int", _cmp("lessThan", "year", 2020), _ids(2, 6)),
    _case("lte_int", _cmp("lessThanOrEquals", "year", 2020), _ids(2, 6, 8, 12)),
    _case("gte_float_bound_on_int_year", _cmp("greaterThanOrEquals", "year", 2019.5), _ids(1, 3, 5, 8, 11, 12)),
    _case("gt_int_on_floats", _cmp("greaterThan", "rating", 4), _ids(1, 5, 11)),
    _case("gte_int_on_floats", _cmp("greaterThanOrEquals", "rating", 4), _ids(1, 3, 5, 11)),
    _case("gte_float_on_floats", _cmp("greaterThanOrEquals", "rating", 4.0), _ids(1, 3, 5, 11)),
    _case("lt_zero", _cmp("lessThan", "rating", 0), _ids(8)),
    _case("lte_float", _cmp("lessThanOrEquals", "rating", 3.0), _ids(2, 4, 6, 8)),
    _case("gt_negative_skips_missing", _cmp("greaterThan", "rating", -2), _all_but(9, 10)),
    _case("range_on_bool_key_only_int_matches", _cmp("greaterThanOrEquals", "published", 0), _ids(5)),
    _case("range_on_list_never_matches", _cmp("greaterThan", "sizes", 0), _ids()),
    _case("range_on_missing_key", _cmp("lessThan", "no_such_key", 10), _ids()),
    _case("number_range_on_strings", _cmp("greaterThan", "category", 0), _ids()),
    _case("number_range_on_dates", _cmp("greaterThan", "date", 0), _ids()),
    # --------------------------------------------------------------------------------- date ranges
    _case("gte_date", _cmp("greaterThanOrEquals", "date", "2020-01-01"), _ids(1, 3, 4, 5, 8, 11, 12)),
    _case("gt_date_exclusive", _cmp("greaterThan", "date", "2020-01-01"), _ids(1, 3, 4, 5, 11, 12)),
    _case("gt_datetime_z", _cmp("greaterThan", "date", "2020-01-01T00:00:00Z"), _ids(1, 3, 4, 5, 11, 12)),
    _case("lt_date", _cmp("lessThan", "date", "2020-01-01"), _ids(2, 6)),
    _case("lte_datetime_offset_zero", _cmp("lessThanOrEquals", "date", "2020-01-01T00:00:00+00:00"),
          _ids(2, 6, 8)),
    _case("lt_date_offset_moves_across_midnight", _cmp("lessThan", "date", "2023-01-01"),
          _ids(1, 2, 3, 4, 5, 6, 8, 12)),
    _case("gte_date_offset_excludes_earlier_instant", _cmp("greaterThanOrEquals", "date", "2023-01-01"), _ids(11)),
    _case("gt_date_negative_offset_is_later", _cmp("greaterThan", "date", "2020-07-01"), _ids(1, 3, 5, 11, 12)),
    _case("lte_naive_datetime", _cmp("lessThanOrEquals", "date", "2020-06-30T23:59:59"), _ids(2, 4, 6, 8)),
    _case("lte_same_instant_other_offset", _cmp("lessThanOrEquals", "date", "2018-07-04T13:00:00-04:00"), _ids(6)),
    _case("lt_same_instant_other_offset", _cmp("lessThan", "date", "2018-07-04T13:00:00-04:00"), _ids()),
    _case("gte_naive_metadata_is_utc", _cmp("greaterThanOrEquals", "date", "2022-02-28T23:59:59Z"), _ids(3, 5, 11)),
    _case("gt_naive_value_is_utc", _cmp("greaterThan", "date", "2022-02-28T23:59:59"), _ids(3, 11)),
    _case("lte_date_only_metadata_is_midnight", _cmp("lessThanOrEquals", "date", "2021-03-15T00:00:00Z"),
          _ids(1, 2, 4, 6, 8, 12)),
    _case("lt_date_only_metadata_is_midnight", _cmp("lessThan", "date", "2021-03-15T00:00:00Z"),
          _ids(2, 4, 6, 8, 12)),
    _case("date_range_on_numbers_and_non_dates", _cmp("greaterThan", "year", "2000-01-01"), _ids()),
    _case("date_range_on_plain_strings", _cmp("lessThan", "category", "2100-01-01"), _ids()),
    # ---------------------------------------------------------------------------------- startsWith
    _case("starts_with", _cmp("startsWith", "category", "tech"), _ids(1, 3, 11)),
    _case("starts_with_case_sensitive", _cmp("startsWith", "category", "Tech"), _ids(6)),
    _case("starts_with_whole_value", _cmp("startsWith", "category", "technology"), _ids(1, 3, 11)),
    _case("starts_with_empty_prefix_matches_any_string", _cmp("startsWith", "category", ""), _all_but(10)),
    _case("starts_with_percent_literal", _cmp("startsWith", "code", "50%"), _ids(1)),
    _case("starts_with_underscore_literal", _cmp("startsWith", "code", "50_"), _ids(5)),
    _case("starts_with_digits", _cmp("startsWith", "code", "50"), _ids(1, 3, 4, 5)),
    _case("starts_with_letter_percent_literal", _cmp("startsWith", "code", "a%"), _ids(6)),
    _case("starts_with_star_literal", _cmp("startsWith", "code", "a*"), _ids()),
    _case("starts_with_backslash", _cmp("startsWith", "code", "a\\"), _ids(2)),
    _case("starts_with_lone_percent", _cmp("startsWith", "author", "%"), _ids()),
    _case("starts_with_lone_underscore", _cmp("startsWith", "author", "_"), _ids()),
    _case("starts_with_unicode", _cmp("startsWith", "city", "Zü"), _ids(1, 8)),
    _case("starts_with_cjk", _cmp("startsWith", "city", "東京"), _ids(2, 11)),
    _case("starts_with_single_quote", _cmp("startsWith", "author", "O'"), _ids(1, 8)),
    _case("starts_with_injection", _cmp("startsWith", "author", "x' OR"), _ids(5)),
    _case("starts_with_quote_paren", _cmp("startsWith", "author", '")'), _ids(6)),
    _case("starts_with_only_strings_not_ints", _cmp("startsWith", "year", "20"), _ids(4)),
    _case("starts_with_only_strings_not_lists", _cmp("startsWith", "tags", "a"), _ids(7)),
    _case("starts_with_missing_key", _cmp("startsWith", "no_such_key", ""), _ids()),
    # ------------------------------------------------------------------------------ stringContains
    _case("contains", _cmp("stringContains", "category", "ch"), _ids(1, 3, 6, 11)),
    _case("contains_case_sensitive", _cmp("stringContains", "category", "Tech"), _ids(6)),
    _case("contains_lowercase_only", _cmp("stringContains", "author", "o"), _ids(6, 11)),
    _case("contains_percent_literal", _cmp("stringContains", "code", "%"), _ids(1, 6)),
    _case("contains_underscore_literal", _cmp("stringContains", "code", "_"), _ids(1, 4, 5)),
    _case("contains_percent_underscore", _cmp("stringContains", "code", "%_"), _ids(1)),
    _case("contains_backslash", _cmp("stringContains", "code", "\\"), _ids(2)),
    _case("contains_single_quote", _cmp("stringContains", "author", "'"), _ids(1, 5, 8)),
    _case("contains_double_quote", _cmp("stringContains", "author", '"'), _ids(2, 6)),
    _case("contains_injection_stored", _cmp("stringContains", "author", "' OR '"), _ids(5)),
    _case("contains_injection_absent", _cmp("stringContains", "category", "' OR '1'='1"), _ids()),
    _case("contains_percent_absent", _cmp("stringContains", "author", "%"), _ids()),
    _case("contains_cjk", _cmp("stringContains", "city", "京"), _ids(2, 11)),
    _case("contains_umlaut", _cmp("stringContains", "city", "ürich"), _ids(1, 4, 8)),
    _case("contains_only_strings_not_ints", _cmp("stringContains", "year", "02"), _ids(4)),
    _case("contains_only_strings_not_lists", _cmp("stringContains", "tags", "a"), _ids(7)),
    # -------------------------------------------------------------------------------- listContains
    _case("list_contains", _cmp("listContains", "tags", "ai"), _ids(1, 3, 5)),
    _case("list_contains_python", _cmp("listContains", "tags", "python"), _ids(1, 3, 11)),
    _case("list_contains_case_sensitive", _cmp("listContains", "tags", "ml"), _ids(3, 8)),
    _case("list_contains_upper", _cmp("listContains", "tags", "ML"), _ids(12)),
    _case("list_contains_int", _cmp("listContains", "sizes", 2), _ids(1, 5)),
    _case("list_contains_int_given_as_float", _cmp("listContains", "sizes", 2.0), _ids(1, 5)),
    _case("list_contains_bool_not_int", _cmp("listContains", "sizes", True), _ids()),
    _case("list_contains_only_lists", _cmp("listContains", "category", "technology"), _ids()),
    _case("list_contains_missing_key", _cmp("listContains", "no_such_key", "ai"), _ids()),
    # ------------------------------------------------------------------------------------- logical
    _case("and_all", _and(_cmp("equals", "category", "science"), _cmp("greaterThanOrEquals", "year", 2020)),
          _ids(5, 8, 12)),
    _case("and_all_single", _and(_cmp("equals", "code", "ab")), _ids(7)),
    _case("and_all_not_equals_with_missing",
          _and(_cmp("notEquals", "category", "science"), _cmp("notEquals", "published", False)),
          _ids(1, 3, 6, 7, 9, 10, 11)),
    _case("and_all_date_window",
          _and(_cmp("greaterThanOrEquals", "date", "2020-01-01"), _cmp("lessThan", "date", "2021-01-01")),
          _ids(4, 8, 12)),
    _case("and_all_rating_window",
          _and(_cmp("greaterThan", "rating", 3.7), _cmp("lessThan", "rating", 3.8)), _ids(7)),
    _case("or_all", _or(_cmp("equals", "city", "Zürich"), _cmp("listContains", "tags", "rust")), _ids(1, 8, 11)),
    _case("or_all_single", _or(_cmp("equals", "code", "ab")), _ids(7)),
    _case("or_all_type_mismatch", _or(_cmp("equals", "year", 2020), _cmp("equals", "year", "2020")),
          _ids(4, 8, 12)),
    _case("not_all_single_is_negation", _not(_cmp("equals", "category", "technology")), _all_but(1, 3, 11)),
    _case("not_all_single_object_form", {"notAll": _cmp("equals", "category", "technology")}, _all_but(1, 3, 11)),
    _case("not_all_is_not_and",
          _not(_cmp("equals", "category", "science"), _cmp("greaterThanOrEquals", "year", 2020)),
          _all_but(5, 8, 12)),
    _case("not_range_includes_missing_and_mismatched", _not(_cmp("greaterThan", "year", 2020)),
          _ids(2, 4, 6, 7, 8, 9, 10, 12)),
    _case("not_starts_with_includes_missing", _not(_cmp("startsWith", "city", "Zü")), _all_but(1, 8)),
    _case("not_list_contains_includes_non_lists", _not(_cmp("listContains", "tags", "ai")), _all_but(1, 3, 5)),
    _case("not_contains_includes_missing", _not(_cmp("stringContains", "category", "ch")), _all_but(1, 3, 6, 11)),
    _case("not_not_equals", _not(_cmp("notEquals", "category", "technology")), _ids(1, 3, 11)),
    _case("not_not_in", _not(_cmp("notIn", "published", [True, False])), _ids(1, 2, 3, 4, 6, 8, 11, 12)),
    _case("double_negation", _not(_not(_cmp("equals", "category", "science"))), _ids(2, 5, 8, 12)),
    _case("not_or_with_missing",
          _not(_or(_cmp("greaterThanOrEquals", "year", 2021), _cmp("lessThan", "year", 2019))),
          _ids(2, 4, 7, 8, 9, 10, 12)),
    _case(
        "nested_three_levels_and",
        _and(
            _or(_cmp("equals", "category", "technology"), _cmp("equals", "category", "science")),
            _not(_and(_cmp("greaterThanOrEquals", "rating", 4), _cmp("listContains", "tags", "python"))),
            _or(_cmp("greaterThanOrEquals", "year", 2020), _cmp("startsWith", "city", "東")),
        ),
        _ids(2, 5, 8, 12),
    ),
    _case(
        "nested_three_levels_or",
        _or(
            _and(
                _cmp("equals", "published", True),
                _not(_or(_cmp("equals", "city", "Zürich"), _cmp("equals", "city", "Москва"))),
            ),
            _and(_cmp("lessThan", "date", "2020-01-01"), _not(_cmp("equals", "year", 2018))),
        ),
        _ids(2, 6, 11),
    ),
    _case(
        "nested_three_levels_not",
        _not(
            _or(
                _and(_cmp("in", "category", ["science", "health"]), _not(_cmp("equals", "year", 2020))),
                _cmp("listContains", "tags", "python"),
            )
        ),
        _ids(6, 7, 8, 10, 12),
    ),
]
"""The filter table: every operator, nesting, missing keys, type mismatches, unicode and escaping."""


# ------------------------------------------------------------------------------------- hypothesis

MISSING_KEY = "no_such_key"
"""A key that no corpus document has; :func:`filter_strategy` uses it to test missing-key semantics."""

_SPECIAL_STRINGS = ("", "%", "_", "*", "'", '"', "\\", "x' OR '1'='1", '") or true --', "%_", "a_b")


_DATE_FORMATS = ("date", "naive", "Z", "+00:00", "+02:00", "-05:00", "+05:30", "-10:30", "+14:00")


def _format_date(moment: datetime, form: str) -> str:
    """``moment`` (naive, read as UTC) as an ISO-8601 string: date only, naive, ``Z``, or shifted to an offset."""
    if form == "date":
        return moment.date().isoformat()
    if form == "naive":
        return moment.isoformat()
    if form == "Z":
        return moment.isoformat() + "Z"
    sign = 1 if form[0] == "+" else -1
    offset = timezone(sign * timedelta(hours=int(form[1:3]), minutes=int(form[4:6])))
    return moment.replace(tzinfo=UTC).astimezone(offset).isoformat()


def _is_finite_scalar(value: Any) -> bool:
    if isinstance(value, float):
        return value == value and value not in (float("inf"), float("-inf"))
    return isinstance(value, str | int | bool)


def filter_strategy(corpus: Iterable[Document], *, max_depth: int = 3) -> SearchStrategy[dict[str, Any]]:
    """A hypothesis strategy of random valid filters in JSON form over ``corpus``'s keys and values.

    Keys are the corpus's metadata keys plus one that no document has (:data:`MISSING_KEY`). Values are
    mostly taken from what the corpus holds under the same key (scalars, list elements, prefixes and
    substrings of strings, date strings, neighbouring numbers), so most filters select some documents and
    not others; the rest come from anywhere in the corpus (type mismatches), generated dates with and
    without offsets, and strings that look like SQL or LIKE syntax. ``in`` lists may be empty. Logical
    nodes nest at most
    ``max_depth`` deep. Every filter is in canonical form (``notAll`` always holds a list), so
    ``dump_filter(parse_filter(f)) == f``. Numbers are exact binary fractions and dates have whole
    seconds, so a correct store reproduces :func:`fastrag.filters.matches` without rounding issues.

    Args:
        corpus: the documents the filters will be run against.
        max_depth: the deepest nesting of ``andAll`` / ``orAll`` / ``notAll`` (0 for single comparisons).

    Returns:
        A strategy of ``dict`` filters that :func:`fastrag.filters.parse_filter` accepts.

    Raises:
        ImportError: ``hypothesis`` is not installed (``pip install "fastrag-retrieval[test]"``).
    """
    try:
        from hypothesis import strategies as st
    except ImportError as exc:  # pragma: no cover - hypothesis ships with the test extra
        raise ImportError('filter_strategy needs hypothesis: pip install "fastrag-retrieval[test]"') from exc

    pools: dict[str, _Pool] = {MISSING_KEY: _Pool()}  # top-level values under each key
    elements: dict[str, _Pool] = {MISSING_KEY: _Pool()}  # elements of list values under each key
    everything = _Pool(strings=list(_SPECIAL_STRINGS))
    for doc in corpus:
        for key, value in doc.metadata.items():
            pool, items = pools.setdefault(key, _Pool()), elements.setdefault(key, _Pool())
            for item in value if isinstance(value, list | tuple) else [value]:
                (items if isinstance(value, list | tuple) else pool).add(item)
                everything.add(item)

    # One integer per date (15-minute steps over 2017-2025) and one format: cheap for hypothesis to vary.
    moments = st.integers(0, 9 * 365 * 24 * 4).map(lambda q: datetime(2017, 1, 1) + timedelta(minutes=15 * q))
    generated_dates = st.tuples(moments, st.sampled_from(_DATE_FORMATS)).map(lambda p: _format_date(*p))
    exact_numbers = st.integers(-3000, 3000) | st.integers(-4000, 4000).map(lambda n: n / 4)
    text = st.text(alphabet="abcxyzACTüé京Мо%_'\"\\* -0129", max_size=6)

    def values(pool: _Pool) -> dict[str, SearchStrategy[Any]]:
        """Value strategies per operator family, drawn from ``pool`` where it has something to offer."""
        if pool.numbers:
            numbers = st.sampled_from(_distinct(pool.numbers))
            low, high = math.floor(min(pool.numbers)) - 2, math.ceil(max(pool.numbers)) + 2
            around = st.integers(low, high) | st.integers(4 * low, 4 * high).map(lambda n: n / 4)
        else:
            numbers = around = exact_numbers
        number = st.one_of(
            numbers,
            numbers.map(float),
            st.tuples(numbers, st.sampled_from([-1, -0.5, 0.5, 1])).map(lambda p: p[0] + p[1]),
            around,
        )
        date = (st.sampled_from(_distinct(pool.dates)) | generated_dates) if pool.dates else generated_dates
        strings = st.sampled_from(_distinct(pool.strings)) if pool.strings else text
        prefixes = strings.flatmap(lambda s: st.integers(0, len(s)).map(lambda i: s[:i]))
        substrings = strings.flatmap(
            lambda s: st.tuples(st.integers(0, len(s)), st.integers(0, len(s))).map(lambda ij: s[min(ij) : max(ij)])
        )
        own = st.sampled_from(_distinct(pool.scalars)) if pool.scalars else text
        # Kinds this key does not hold come from the corpus-wide values (see operator_leaf), not from here.
        kinds = [own, own, own, own, text]
        kinds += [strings] if pool.strings else []
        kinds += [number] if pool.numbers else []
        kinds += [st.booleans()] if any(isinstance(v, bool) for v in pool.scalars) else []
        scalar = st.one_of(kinds)
        if pool.numbers and pool.dates or not (pool.numbers or pool.dates):
            bound = st.one_of(number, date)
        else:
            bound = date if pool.dates else number  # the other kind comes from the corpus-wide values
        return {
            "scalar": scalar,
            "list": st.lists(scalar, min_size=0, max_size=4),
            "range": bound,
            "prefix": st.one_of(prefixes, prefixes, prefixes, text),
            "substring": st.one_of(substrings, substrings, substrings, text),
        }

    family = {
        "equals": "scalar", "notEquals": "scalar", "listContains": "scalar", "in": "list", "notIn": "list",
        "startsWith": "prefix", "stringContains": "substring",
    } | dict.fromkeys(RANGE_OPERATORS, "range")
    assert set(family) == set(COMPARISON_OPERATORS)
    fits = {
        "scalar": lambda pool: bool(pool.scalars),
        "list": lambda pool: bool(pool.scalars),
        "range": lambda pool: bool(pool.numbers or pool.dates),
        "prefix": lambda pool: bool(pool.strings),
        "substring": lambda pool: bool(pool.strings),
    }
    any_value = values(everything)
    key_list = sorted(pools)
    per_key = {key: values(pools[key]) for key in key_list}
    per_key_elements = {key: values(elements[key]) for key in key_list}

    def operator_leaf(op: str) -> SearchStrategy[dict[str, Any]]:
        # Mostly a key where the operator can match and a value seen under that key, so that most filters
        # select some documents and not others; sometimes any key (missing keys, type mismatches) or a
        # value from anywhere in the corpus.
        own_pools, own_values = (elements, per_key_elements) if op == "listContains" else (pools, per_key)
        fitting = [key for key in key_list if fits[family[op]](own_pools[key])]
        by_key = {
            key: st.one_of(
                own_values[key][family[op]], own_values[key][family[op]], own_values[key][family[op]],
                any_value[family[op]],
            ).map(lambda v, key=key: {op: {"key": key, "value": v}})
            for key in key_list
        }
        keys = st.sampled_from(key_list)
        if fitting:
            keys = st.one_of(st.sampled_from(fitting), st.sampled_from(fitting), keys)
        return keys.flatmap(by_key.__getitem__)

    leaf = st.one_of([operator_leaf(op) for op in COMPARISON_OPERATORS])
    node = leaf
    for _ in range(max_depth):
        children = st.lists(node, min_size=1, max_size=3)
        node = st.one_of(
            leaf,
            children.map(lambda fs: {"andAll": fs}),
            children.map(lambda fs: {"orAll": fs}),
            children.map(lambda fs: {"notAll": fs}),
        )
    return node


@dataclass
class _Pool:
    """Finite scalars seen under one metadata key, by kind."""

    scalars: list[Any] = field(default_factory=list)
    strings: list[str] = field(default_factory=list)
    numbers: list[int | float] = field(default_factory=list)
    dates: list[str] = field(default_factory=list)

    def add(self, item: Any) -> None:
        if not _is_finite_scalar(item):
            return
        self.scalars.append(item)
        if isinstance(item, str):
            self.strings.append(item)
            if parse_date(item) is not None:
                self.dates.append(item)
        elif not isinstance(item, bool):
            self.numbers.append(item)


def _distinct(values: Iterable[Any]) -> list[Any]:
    """Distinct values in a fixed order, telling ``True`` from ``1`` and ``1`` from ``1.0``.

    The order is fixed so that a given corpus always yields the same strategy, whatever the set order.
    """
    return [v for _, v in sorted({(type(v).__name__, repr(v)): v for v in values}.items())]
