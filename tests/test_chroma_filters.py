"""Chroma filter translation: golden ``where`` output written by hand, the shadow fields it relies on, and
hostile values going through a real embedded collection."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from fastrag.errors import FilterError, InvalidParameterError, UnsupportedFilterError
from fastrag.filters import field, matches
from fastrag.models import Document
from fastrag.vector_store.chroma import (
    NEVER_WHERE,
    PREFIX_INDEX_LENGTH,
    ChromaWhere,
    chroma_metadata,
    translate_filter,
)


def cmp(op: str, key: str, value: object) -> dict:
    return {op: {"key": key, "value": value}}


NUM_KEYS = "fastrag:keys:num"
DATE_KEYS = "fastrag:keys:date"

GOLDEN = [
    # equality: strings and bools on the field itself, numbers on the float shadow
    (cmp("equals", "category", "science"), {"category": {"$eq": "science"}}),
    (cmp("equals", "published", True), {"published": {"$eq": True}}),
    (cmp("equals", "year", 2020), {"fastrag:num:year": {"$eq": 2020.0}}),
    (cmp("equals", "rating", 4.5), {"fastrag:num:rating": {"$eq": 4.5}}),
    (cmp("equals", "year", "2020"), {"year": {"$eq": "2020"}}),
    (cmp("notEquals", "category", "science"), {"category": {"$ne": "science"}}),
    (cmp("notEquals", "year", 2020), {"fastrag:num:year": {"$ne": 2020.0}}),
    (cmp("notEquals", "published", False), {"published": {"$ne": False}}),
    # values are operands, never syntax: quotes, backslashes, %, _ and operator-looking text pass unchanged
    (cmp("equals", "author", "x' OR '1'='1"), {"author": {"$eq": "x' OR '1'='1"}}),
    (cmp("equals", "code", 'a\\b"%_'), {"code": {"$eq": 'a\\b"%_'}}),
    (cmp("equals", "k", "$ne"), {"k": {"$eq": "$ne"}}),
    # keys that Chroma or fastrag reserve are escaped; a dot is part of the key
    (cmp("equals", "meta.lang", "en"), {"meta.lang": {"$eq": "en"}}),
    (cmp("equals", "$and", "x"), {"fastrag:key:$and": {"$eq": "x"}}),
    (cmp("equals", "#document", "x"), {"fastrag:key:#document": {"$eq": "x"}}),
    (cmp("equals", "fastrag:json", "x"), {"fastrag:key:fastrag:json": {"$eq": "x"}}),
    (cmp("equals", "chroma:document", "x"), {"fastrag:key:chroma:document": {"$eq": "x"}}),
    (cmp("equals", "#document", 3), {"fastrag:num:#document": {"$eq": 3.0}}),
    # in / notIn: one homogeneous list per type
    (cmp("in", "category", ["a", "b", "a"]), {"category": {"$in": ["a", "b"]}}),
    (cmp("in", "year", [2019, 2020.0, 2020]), {"fastrag:num:year": {"$in": [2019.0, 2020.0]}}),
    (
        cmp("in", "year", ["2020", 2021, True, 1]),
        {"$or": [{"year": {"$in": ["2020"]}}, {"year": {"$in": [True]}}, {"fastrag:num:year": {"$in": [2021.0, 1.0]}}]},
    ),
    (
        cmp("notIn", "published", [1, False]),
        {"$and": [{"published": {"$nin": [False]}}, {"fastrag:num:published": {"$nin": [1.0]}}]},
    ),
    (cmp("in", "x", []), dict(NEVER_WHERE)),
    (cmp("notIn", "x", []), None),
    # ranges: numbers on the float shadow, dates on epoch microseconds (UTC)
    (cmp("greaterThan", "year", 2020), {"fastrag:num:year": {"$gt": 2020.0}}),
    (cmp("greaterThanOrEquals", "year", 2019.5), {"fastrag:num:year": {"$gte": 2019.5}}),
    (cmp("lessThan", "rating", 0), {"fastrag:num:rating": {"$lt": 0.0}}),
    (cmp("lessThanOrEquals", "rating", -1.5), {"fastrag:num:rating": {"$lte": -1.5}}),
    (cmp("greaterThanOrEquals", "date", "2020-01-01"), {"fastrag:date:date": {"$gte": 1577836800000000}}),
    (cmp("lessThan", "date", "2020-01-01T02:00:00+02:00"), {"fastrag:date:date": {"$lt": 1577836800000000}}),
    (cmp("greaterThan", "date", "1969-12-31T23:59:59.5Z"), {"fastrag:date:date": {"$gt": -500000}}),
    # strings: startsWith on the prefix list; stringContains "" is "any string"
    (cmp("startsWith", "source_uri", "docs/"), {"fastrag:prefix:source_uri": {"$contains": "docs/"}}),
    (cmp("startsWith", "code", "50%_"), {"fastrag:prefix:code": {"$contains": "50%_"}}),
    (cmp("startsWith", "category", ""), {"fastrag:prefix:category": {"$contains": ""}}),
    (cmp("stringContains", "category", ""), {"fastrag:prefix:category": {"$contains": ""}}),
    # listContains: the list field of the value's type
    (cmp("listContains", "tags", "ai"), {"fastrag:list:str:tags": {"$contains": "ai"}}),
    (cmp("listContains", "sizes", 2), {"fastrag:list:num:sizes": {"$contains": 2.0}}),
    (cmp("listContains", "flags", False), {"fastrag:list:bool:flags": {"$contains": False}}),
    # logic
    (
        {"andAll": [cmp("equals", "a", "x"), cmp("greaterThan", "n", 1)]},
        {"$and": [{"a": {"$eq": "x"}}, {"fastrag:num:n": {"$gt": 1.0}}]},
    ),
    ({"andAll": [cmp("equals", "a", "x")]}, {"a": {"$eq": "x"}}),
    ({"orAll": [cmp("equals", "a", "x")]}, {"a": {"$eq": "x"}}),
    (
        {"orAll": [cmp("equals", "a", "x"), {"orAll": [cmp("equals", "b", "y"), cmp("equals", "c", "z")]}]},
        {"$or": [{"a": {"$eq": "x"}}, {"b": {"$eq": "y"}}, {"c": {"$eq": "z"}}]},
    ),
    # negation is pushed to the leaves (Chroma has no $not)
    ({"notAll": [cmp("equals", "a", "x")]}, {"a": {"$ne": "x"}}),
    ({"notAll": cmp("in", "a", ["x", "y"])}, {"a": {"$nin": ["x", "y"]}}),
    ({"notAll": [cmp("notEquals", "a", "x")]}, {"a": {"$eq": "x"}}),
    (
        {"notAll": [cmp("equals", "a", "x"), cmp("equals", "b", "y")]},
        {"$or": [{"a": {"$ne": "x"}}, {"b": {"$ne": "y"}}]},
    ),
    (
        {"notAll": [{"orAll": [cmp("equals", "a", "x"), cmp("equals", "b", "y")]}]},
        {"$and": [{"a": {"$ne": "x"}}, {"b": {"$ne": "y"}}]},
    ),
    ({"notAll": [{"notAll": [cmp("equals", "a", "x")]}]}, {"a": {"$eq": "x"}}),
    (
        {"notAll": [cmp("greaterThan", "year", 2020)]},
        {"$or": [{"fastrag:num:year": {"$lte": 2020.0}}, {NUM_KEYS: {"$not_contains": "year"}}]},
    ),
    (
        {"notAll": [cmp("lessThanOrEquals", "date", "2020-01-01")]},
        {"$or": [{"fastrag:date:date": {"$gt": 1577836800000000}}, {DATE_KEYS: {"$not_contains": "date"}}]},
    ),
    ({"notAll": [cmp("startsWith", "city", "Zü")]}, {"fastrag:prefix:city": {"$not_contains": "Zü"}}),
    ({"notAll": [cmp("listContains", "tags", "ai")]}, {"fastrag:list:str:tags": {"$not_contains": "ai"}}),
    # constants fold away
    ({"andAll": [cmp("notIn", "x", []), cmp("equals", "a", "x")]}, {"a": {"$eq": "x"}}),
    ({"orAll": [cmp("in", "x", []), cmp("equals", "a", "x")]}, {"a": {"$eq": "x"}}),
    ({"andAll": [cmp("in", "x", []), cmp("equals", "a", "x")]}, dict(NEVER_WHERE)),
    ({"orAll": [cmp("notIn", "x", []), cmp("equals", "a", "x")]}, None),
    ({"notAll": [cmp("in", "x", [])]}, None),
    # integers beyond the float range: no stored number equals them; ranges hold for all numbers or none
    (cmp("equals", "n", 10**400), dict(NEVER_WHERE)),
    (cmp("notEquals", "n", 10**400), None),
    (cmp("lessThan", "n", 10**400), {NUM_KEYS: {"$contains": "n"}}),
    (cmp("greaterThan", "n", 10**400), dict(NEVER_WHERE)),
    (cmp("greaterThan", "n", -(10**400)), {NUM_KEYS: {"$contains": "n"}}),
    ({"notAll": [cmp("lessThan", "n", 10**400)]}, {NUM_KEYS: {"$not_contains": "n"}}),
    (cmp("in", "n", [10**400, 3]), {"fastrag:num:n": {"$in": [3.0]}}),
    (cmp("listContains", "n", 10**400), dict(NEVER_WHERE)),
]


@pytest.mark.parametrize(("filter_json", "expected"), GOLDEN, ids=[str(i) for i in range(len(GOLDEN))])
def test_golden_translation(filter_json: dict, expected: dict | None) -> None:
    assert translate_filter(filter_json) == expected


def test_builder_and_json_string_forms_translate_the_same() -> None:
    built = (field("category") == "science") & ~field("tags").list_contains("draft")
    as_json = '{"andAll": [{"equals": {"key": "category", "value": "science"}}, ' \
              '{"notAll": [{"listContains": {"key": "tags", "value": "draft"}}]}]}'
    expected = {"$and": [{"category": {"$eq": "science"}}, {"fastrag:list:str:tags": {"$not_contains": "draft"}}]}
    assert translate_filter(built) == translate_filter(as_json) == expected
    assert translate_filter(None) is None


def test_nested_three_levels() -> None:
    f = {
        "notAll": [
            {"orAll": [
                {"andAll": [cmp("in", "category", ["science", "health"]), {"notAll": [cmp("equals", "year", 2020)]}]},
                cmp("listContains", "tags", "python"),
            ]}
        ]
    }
    assert translate_filter(f) == {
        "$and": [
            {"$or": [{"category": {"$nin": ["science", "health"]}}, {"fastrag:num:year": {"$eq": 2020.0}}]},
            {"fastrag:list:str:tags": {"$not_contains": "python"}},
        ]
    }


def test_unsupported_constructs_raise_with_the_path() -> None:
    with pytest.raises(UnsupportedFilterError, match="substring") as info:
        translate_filter({"andAll": [cmp("equals", "a", "x"), {"notAll": [cmp("stringContains", "city", "ür")]}]})
    assert info.value.path == "$.andAll[1].notAll[0].stringContains"
    long_prefix = "p" * (PREFIX_INDEX_LENGTH + 1)
    with pytest.raises(UnsupportedFilterError, match=str(PREFIX_INDEX_LENGTH)):
        translate_filter(cmp("startsWith", "source_uri", long_prefix))
    assert translate_filter(cmp("startsWith", "k", long_prefix[:-1])) == {
        "fastrag:prefix:k": {"$contains": long_prefix[:-1]}
    }


def test_malformed_filters_raise_filter_error() -> None:
    with pytest.raises(FilterError):
        translate_filter({"bogus": {}})
    with pytest.raises(FilterError):
        translate_filter(cmp("greaterThan", "date", "not a date"))


def test_native_filter_wrapper_validates_its_shape() -> None:
    with pytest.raises(InvalidParameterError):
        ChromaWhere()
    with pytest.raises(InvalidParameterError):
        ChromaWhere(where="category == 'x'")  # type: ignore[arg-type]
    assert ChromaWhere(where={"category": "x"}).native_backend == "chroma"


# ------------------------------------------------------------------------------------ shadow fields


def test_chroma_metadata_golden() -> None:
    metadata = {
        "category": "tech",
        "published": True,
        "year": 2021,
        "rating": 4.5,
        "big": 2**64,
        "date": "2020-01-01T02:00:00+02:00",
        "tags": ["ai", 2, True, "ai", {"nested": 1}, None, 2.0],
        "empty": [],
        "nested": {"a": 1},
        "none": None,
        "#x": "reserved",
    }
    out = chroma_metadata(metadata, metadata_json="{}")
    assert out == {
        "fastrag:json": "{}",
        "category": "tech",
        "fastrag:prefix:category": ["", "t", "te", "tec", "tech"],
        "published": True,
        "year": 2021,
        "fastrag:num:year": 2021.0,
        "rating": 4.5,
        "fastrag:num:rating": 4.5,
        "fastrag:num:big": float(2**64),
        "date": "2020-01-01T02:00:00+02:00",
        "fastrag:prefix:date": [metadata["date"][:i] for i in range(len(metadata["date"]) + 1)],
        "fastrag:date:date": 1577836800000000,
        "fastrag:list:str:tags": ["ai"],
        "fastrag:list:bool:tags": [True],
        "fastrag:list:num:tags": [2.0],
        "fastrag:key:#x": "reserved",
        "fastrag:prefix:#x": ["", "r", "re", "res", "rese", "reser", "reserv", "reserve", "reserved"],
        "fastrag:keys:num": ["year", "rating", "big"],
        "fastrag:keys:date": ["date"],
    }


def test_prefix_shadow_is_capped() -> None:
    out = chroma_metadata({"s": "x" * 200})
    assert len(out["fastrag:prefix:s"]) == PREFIX_INDEX_LENGTH + 1
    assert out["fastrag:prefix:s"][-1] == "x" * PREFIX_INDEX_LENGTH


def test_numbers_chroma_cannot_filter_are_rejected() -> None:
    with pytest.raises(InvalidParameterError, match="huge"):
        chroma_metadata({"huge": 10**400})
    with pytest.raises(InvalidParameterError):
        chroma_metadata({"xs": [1, 10**400]})
    with pytest.raises(InvalidParameterError):
        chroma_metadata({"x": float("nan")})


# ------------------------------------------------------------------------------- through a real store

HOSTILE = [
    "O'Brien",
    'Say "hi"',
    "a\\b",
    "50%_off",
    "x' OR '1'='1",
    '") or true --',
    '{"$ne": null}',
    "$ne",
    "#document",
    "%",
    "_",
    "",
    "東京",
    "line\nbreak",
]


@pytest.fixture
async def hostile_store():
    chromadb = pytest.importorskip("chromadb")
    from fastrag.vector_store.chroma import ChromaVectorStore

    client = chromadb.EphemeralClient()
    docs = [
        Document(id=f"h{i:02d}", content=value, metadata={"value": value, "values": [value], value or "blank": 1})
        for i, value in enumerate(HOSTILE)
    ]
    vectors = np.eye(len(docs), dtype=np.float32)
    async with ChromaVectorStore(client=client, collection=f"hostile-{uuid.uuid4().hex[:8]}") as store:
        await store.upsert(docs, embeddings=vectors)
        yield store, docs


@pytest.mark.anyio
async def test_hostile_values_select_exactly_their_documents(hostile_store) -> None:
    store, docs = hostile_store
    for i, value in enumerate(HOSTILE):
        expected = f"h{i:02d}"
        for f in (
            cmp("equals", "value", value),
            cmp("in", "value", [value, "not there"]),
            cmp("listContains", "values", value),
            cmp("equals", value or "blank", 1),
        ):
            hits = await store.search_vector(np.ones(len(docs), dtype=np.float32), k=len(docs), filter=f)
            assert [d.id for d in hits] == [expected], (value, f)
        others = await store.count(filter=cmp("notEquals", "value", value))
        assert others == len(docs) - 1
        prefixed = {d.id for d in await store.get(filter=cmp("startsWith", "value", value))}
        assert prefixed == {d.id for d in docs if matches(cmp("startsWith", "value", value), d.metadata)}
    assert await store.count() == len(docs)
