"""Milvus filter translation: golden expressions, string escaping, the wildcard-free encoding, and injection.

The golden expressions are written out by hand (keys appear as the hex of their UTF-8 bytes, e.g.
``category`` -> ``63617465676f7279``). Escaping is checked against milvus-lite's own expression tokenizer, and
the injection tests run hostile values through a live milvus-lite store and compare with ``filters.matches``.
"""

from __future__ import annotations

import importlib.util
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastrag.errors import FilterError, InvalidParameterError, UnsupportedFilterError
from fastrag.filters import matches
from fastrag.models import Document
from fastrag.vector_store.milvus import (
    decode_text,
    encode_text,
    escape_like,
    filter_values,
    string_literal,
    translate_filter,
)

E, D1, D2, D3 = "\ue000", "\ue001", "\ue002", "\ue003"


def _cmp(op: str, key: str, value) -> dict:
    return {op: {"key": key, "value": value}}


# ----------------------------------------------------------------------------------------- golden

GOLDEN = [
    (_cmp("equals", "category", "technology"),
     '(exists filter_values["s_63617465676f7279"] and filter_values["s_63617465676f7279"] == "technology")'),
    (_cmp("equals", "year", 2020),
     '(exists filter_values["n_79656172"] and filter_values["n_79656172"] == 2020.0)'),
    (_cmp("equals", "year", 2020.0),
     '(exists filter_values["n_79656172"] and filter_values["n_79656172"] == 2020.0)'),
    (_cmp("equals", "published", True),
     '(exists filter_values["b_7075626c6973686564"] and filter_values["b_7075626c6973686564"] == true)'),
    (_cmp("notEquals", "year", "2020"),
     'not (exists filter_values["s_79656172"] and filter_values["s_79656172"] == "2020")'),
    (_cmp("in", "year", ["2020", 2021, 2021.0, False]),
     '((exists filter_values["s_79656172"] and filter_values["s_79656172"] == "2020")'
     ' or (exists filter_values["n_79656172"] and filter_values["n_79656172"] == 2021.0)'
     ' or (exists filter_values["b_79656172"] and filter_values["b_79656172"] == false))'),
    (_cmp("in", "year", [1]),
     '(exists filter_values["n_79656172"] and filter_values["n_79656172"] == 1.0)'),
    (_cmp("in", "year", []), '(id < "")'),
    (_cmp("notIn", "year", []), 'not (id < "")'),
    (_cmp("notIn", "category", ["a"]),
     'not (exists filter_values["s_63617465676f7279"] and filter_values["s_63617465676f7279"] == "a")'),
    (_cmp("greaterThan", "rating", -1.5),
     '(exists filter_values["n_726174696e67"] and filter_values["n_726174696e67"] > -1.5)'),
    (_cmp("lessThan", "rating", 4),
     '(exists filter_values["n_726174696e67"] and filter_values["n_726174696e67"] < 4.0)'),
    # 2020-01-01T02:00+02:00 is 2020-01-01T00:00Z = 1577836800 s after the epoch
    (_cmp("lessThanOrEquals", "date", "2020-01-01T02:00:00+02:00"),
     '(exists filter_values["d_64617465"] and filter_values["d_64617465"] <= 1577836800000000)'),
    # a date without a time is midnight UTC: one day before the epoch
    (_cmp("greaterThanOrEquals", "date", "1969-12-31"),
     '(exists filter_values["d_64617465"] and filter_values["d_64617465"] >= -86400000000)'),
    # % -> E D1 D1, _ -> E D1 D2: no wildcard is left but the trailing %
    (_cmp("startsWith", "code", "50%_"),
     f'(exists filter_values["s_636f6465"] and filter_values["s_636f6465"] like "50{E}{D1}{D1}{E}{D1}{D2}%")'),
    (_cmp("startsWith", "code", ""),
     '(exists filter_values["s_636f6465"] and filter_values["s_636f6465"] like "%")'),
    # the double quote is escaped for the literal, the backslash is encoded (E D1 D3), the ' stays
    (_cmp("stringContains", "author", "O'B\"\\"),
     f'(exists filter_values["s_617574686f72"] and filter_values["s_617574686f72"] like "%O\'B\\"{E}{D1}{D3}%")'),
    (_cmp("listContains", "tags", "a_i"),
     '(exists filter_values["ls_74616773"] and json_contains(filter_values["ls_74616773"], "a_i"))'),
    (_cmp("listContains", "sizes", -2),
     '(exists filter_values["ln_73697a6573"] and json_contains(filter_values["ln_73697a6573"], (-2.0)))'),
    (_cmp("listContains", "flags", True),
     '(exists filter_values["lb_666c616773"] and json_contains(filter_values["lb_666c616773"], true))'),
    (_cmp("equals", "meta.lang", "line\nbreak\ttab\r"),
     '(exists filter_values["s_6d6574612e6c616e67"] and filter_values["s_6d6574612e6c616e67"] == "line\\nbreak\\ttab\\r")'),
    # a key full of expression syntax is only ever hex
    (_cmp("equals", "x'] or true", "a"),
     '(exists filter_values["s_78275d206f722074727565"] and filter_values["s_78275d206f722074727565"] == "a")'),
    (_cmp("equals", "城市", "東京"),
     '(exists filter_values["s_e59f8ee5b882"] and filter_values["s_e59f8ee5b882"] == "東京")'),
    ({"andAll": [_cmp("equals", "a", 1)]},
     '(exists filter_values["n_61"] and filter_values["n_61"] == 1.0)'),
    ({"andAll": [_cmp("equals", "a", 1), _cmp("equals", "b", "x")]},
     '((exists filter_values["n_61"] and filter_values["n_61"] == 1.0)'
     ' and (exists filter_values["s_62"] and filter_values["s_62"] == "x"))'),
    ({"notAll": [_cmp("equals", "a", 1), {"orAll": [_cmp("equals", "b", "x")]}]},
     'not ((exists filter_values["n_61"] and filter_values["n_61"] == 1.0)'
     ' and (exists filter_values["s_62"] and filter_values["s_62"] == "x"))'),
    ({"orAll": [_cmp("equals", "a", 1), {"notAll": _cmp("equals", "a", 2)}]},
     '((exists filter_values["n_61"] and filter_values["n_61"] == 1.0)'
     ' or not (exists filter_values["n_61"] and filter_values["n_61"] == 2.0))'),
]


@pytest.mark.parametrize(("filter_json", "expected"), GOLDEN, ids=[f"golden{i}" for i in range(len(GOLDEN))])
def test_golden_translation(filter_json, expected):
    assert translate_filter(filter_json) == expected


def test_translate_accepts_ast_and_json_string():
    from fastrag.filters import field

    assert translate_filter(field("a") == 1) == translate_filter('{"equals": {"key": "a", "value": 1}}')


def test_numbers_beyond_double_precision_are_unsupported():
    for value in (2**53, -(2**53), 2**60, 1e300):
        with pytest.raises(UnsupportedFilterError, match="2\\*\\*53"):
            translate_filter(_cmp("equals", "n", value))
        with pytest.raises(UnsupportedFilterError):
            translate_filter({"andAll": [_cmp("equals", "a", 1), _cmp("lessThan", "n", value)]})
    assert translate_filter(_cmp("equals", "n", 2**53 - 1)).endswith("== 9007199254740991.0)")


def test_malformed_filters_raise_filter_error():
    with pytest.raises(FilterError):
        translate_filter({"equals": {"key": "a"}})
    with pytest.raises(FilterError):
        translate_filter(_cmp("greaterThan", "a", "not a date"))
    with pytest.raises(InvalidParameterError):
        translate_filter(None)


# -------------------------------------------------------------------------------- string literals


@pytest.mark.parametrize(("value", "literal"), [
    ("plain", '"plain"'),
    ("O'Brien", '"O\'Brien"'),
    ('Say "hi"', '"Say \\"hi\\""'),
    ("a\\b", '"a\\\\b"'),
    ("tail\\", '"tail\\\\"'),
    ("two\nlines\r\n\tand tab", '"two\\nlines\\r\\n\\tand tab"'),
    ("Zürich 東京 Москва 🙂", '"Zürich 東京 Москва 🙂"'),
    ('") or true --', '"\\") or true --"'),
    ("", '""'),
])
def test_string_literal(value, literal):
    assert string_literal(value) == literal


def test_string_literal_refuses_lone_surrogates():
    with pytest.raises(UnsupportedFilterError):
        string_literal("bad \ud800")


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_string_literal_round_trips_through_the_milvus_lite_tokenizer(value):
    tokens = pytest.importorskip("milvus_lite.search.filter.tokens")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return
    parsed = tokens.tokenize(string_literal(value))
    assert [t.kind.name for t in parsed] == ["STRING", "EOF"]
    assert parsed[0].value == value


# ------------------------------------------------------------------------- wildcard-free encoding


def test_encoding_table():
    assert encode_text("50%_off\\") == f"50{E}{D1}{D1}{E}{D1}{D2}off{E}{D1}{D3}"
    assert encode_text(E + D1 + D2 + D3) == f"{E}{D2}{D1}{E}{D2}{D2}{E}{D2}{D3}{E}{D3}{D1}"
    assert encode_text("plain *text* 東京") == "plain *text* 東京"
    assert escape_like("a%", prefix=True) == f'"a{E}{D1}{D1}%"'
    assert escape_like('"_', prefix=False) == f'"%\\"{E}{D1}{D2}%"'


_ALPHABET = "ab%_\\*'\"" + E + D1 + D2 + D3


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=_ALPHABET, max_size=8), st.text(alphabet=_ALPHABET, max_size=4))
def test_encoding_preserves_prefixes_and_substrings(value, part):
    encoded, encoded_part = encode_text(value), encode_text(part)
    assert decode_text(encoded) == value
    assert not set("%_\\") & set(encoded)
    assert value.startswith(part) == encoded.startswith(encoded_part)
    assert (part in value) == (encoded_part in encoded)
    assert (value == part) == (encoded == encoded_part)


# --------------------------------------------------------------------------------- typed copies


def test_filter_values_keep_types_apart():
    values = filter_values({
        "year": "2020", "n": 2020, "f": 1.5, "b": True, "i": 1, "d": "2020-01-01T02:00:00+02:00",
        "l": ["x%", 2, True, 2.5, None, {"o": 1}], "none": None, "obj": {"a": 1}, "huge": 10**400,
        "code": "50%_",
    })
    assert values == {
        "s_79656172": "2020", "n_6e": 2020.0, "n_66": 1.5, "b_62": True, "n_69": 1.0,
        "s_64": "2020-01-01T02:00:00+02:00", "d_64": 1577836800000000,
        "ls_6c": ["x%"], "ln_6c": [2.0, 2.5], "lb_6c": [True],
        "n_68756765": 1.7976931348623157e308,
        "s_636f6465": f"50{E}{D1}{D1}{E}{D1}{D2}",
    }


# ------------------------------------------------------------------------ against a live store

_needs_lite = pytest.mark.skipif(
    importlib.util.find_spec("pymilvus") is None or importlib.util.find_spec("milvus_lite") is None,
    reason="the milvus extra (pymilvus, milvus-lite) is not installed",
)

HOSTILE = [
    "O'Brien", 'Say "hi"', "a\\b", "\\", "\\\\", "trailing\\", "50%", "%", "_", "%_", "a_b", "a%b", "100%_off",
    "x' OR '1'='1", '") or true --', "'; drop collection c; --", "line\nbreak", "cr\rlf\r\n", "tab\there",
    "Zürich", "東京都", "Москва", "🙂 emoji", E + "pua" + D1, D2 + D3, "like %", "*", "a*b", "[x]", 'metadata["k"]',
    "exists x", "id < \"\"", " ", "",
]
HOSTILE_KEYS = ["k", "k'", 'k"', "k\\", "k]", "k.dot", "ключ", "id", "x') OR 1=1 --"]


def _hostile_docs() -> list[Document]:
    docs = []
    for i, (value, key) in enumerate(zip(HOSTILE, itertools.cycle(HOSTILE_KEYS), strict=False)):
        docs.append(Document(id=f"h{i:02}", content="hostile", metadata={key: value, "all": value, "list": [value]}))
    return docs


@pytest.fixture
async def hostile_store(tmp_path):
    from fastrag.vector_store.milvus import MilvusVectorStore

    docs = _hostile_docs()
    async with MilvusVectorStore(str(tmp_path / "hostile.db"), "hostile", enable_bm25=True) as store:
        await store.upsert(docs, embeddings=np.ones((len(docs), 2), np.float32))
        yield store, docs


def _expected(docs, filter_json) -> set[str]:
    return {d.id for d in docs if matches(filter_json, d.metadata)}


@_needs_lite
@pytest.mark.anyio
async def test_hostile_values_select_exactly_and_never_error(hostile_store):
    store, docs = hostile_store
    filters = []
    for value in HOSTILE:
        filters += [_cmp("equals", "all", value), _cmp("notEquals", "all", value), _cmp("startsWith", "all", value),
                    _cmp("stringContains", "all", value), _cmp("listContains", "list", value),
                    _cmp("in", "all", [value, "O'Brien"]), _cmp("notIn", "all", [value])]
        for cut in {1, 2, len(value) - 1}:
            if 0 < cut < len(value):
                filters += [_cmp("startsWith", "all", value[:cut]), _cmp("stringContains", "all", value[cut:])]
    for key in HOSTILE_KEYS:
        filters += [_cmp("startsWith", key, ""), _cmp("notEquals", key, "O'Brien"), _cmp("equals", key, "%")]
    for filter_json in filters:
        got = await store.count(filter=filter_json)
        expected = _expected(docs, filter_json)
        assert got == len(expected), filter_json
        if len(expected) <= 3:
            hits = await store.search_text("hostile", k=len(docs), filter=filter_json)
            assert {d.id for d in hits} == expected, filter_json
    # every hostile value is found by equality, and only its own document
    for doc in docs:
        hits = await store.get(filter=_cmp("equals", "all", doc.metadata["all"]))
        assert [d.id for d in hits] == [doc.id]
        assert dict(hits[0].metadata) == dict(doc.metadata)
    # hostile ids are values too
    assert await store.count(filter=None) == len(docs)
    assert await store.get(ids=["h00' or id != '", 'h01") or (id != "']) == []


@_needs_lite
@pytest.mark.anyio
async def test_hostile_ids_round_trip(tmp_path):
    from fastrag.vector_store.milvus import MilvusVectorStore

    ids = ["plain", "O'Brien", 'q"uote', "back\\slash", "new\nline", "東京", "50%_", "x' or '1'='1"]
    docs = [Document(id=i, content=f"doc {n}") for n, i in enumerate(ids)]
    async with MilvusVectorStore(str(tmp_path / "ids.db"), "ids", enable_bm25=True) as store:
        await store.upsert(docs, embeddings=np.ones((len(docs), 2), np.float32))
        assert [d.id for d in await store.get(ids=ids)] == sorted(ids)
        assert [d.id for d in await store.get(ids=["x' or '1'='1"])] == ["x' or '1'='1"]
        assert await store.delete(ids=["O'Brien", "new\nline", "missing'"]) == 2
        assert sorted(d.id for d in await store.get()) == sorted(set(ids) - {"O'Brien", "new\nline"})


@_needs_lite
@pytest.mark.anyio
async def test_milvus_lite_like_has_no_escape_character(hostile_store):
    """Why strings are encoded: milvus-lite's ``like`` treats ``\\%`` and ``\\_`` as a backslash then a wildcard.

    If this starts failing, milvus-lite gained LIKE escapes; the encoding stays correct either way.
    """
    from fastrag.vector_store.milvus import MilvusExpr

    store, docs = hostile_store
    # "a\\_b" as a Milvus literal is the pattern a\_b, which milvus-lite reads as a, \, any character, b
    assert await store.count(filter=MilvusExpr('metadata["all"] like "a\\\\_b"')) == 0
    assert await store.count(filter=MilvusExpr('metadata["all"] like "a_b"')) == 4  # a_b, a%b, a*b, a\\b
    assert await store.count(filter=_cmp("equals", "all", "a_b")) == 1
    assert await store.count(filter=_cmp("startsWith", "all", "a_")) == 1
