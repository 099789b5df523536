"""Milvus filter translation: golden expressions, string escaping, the encodings, and injection.

The golden expressions are written out by hand (keys appear as the hex of their UTF-8 bytes, e.g.
``category`` -> ``63617465676f7279``; list elements as the first 32 hex digits of the SHA-256 of
``kind:value``). They hold no ``not`` and no ``exists``: real Milvus 2.5 refuses both. Literals and the
hostile-value tests run against real Milvus 2.5 (the session's server, tests/conftest.py) and compare with
``filters.matches``.
"""

from __future__ import annotations

import hashlib
import itertools
import random

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
from fastrag.vector_store.milvus.filters import encode_id

E, D1, D2, D3, D4 = "\ue000", "\ue001", "\ue002", "\ue003", "\ue004"


def _cmp(op: str, key: str, value) -> dict:
    return {op: {"key": key, "value": value}}


def _not(*filters) -> dict:
    return {"notAll": list(filters)}


def _element(hex_key: str, kind_and_value: str) -> str:
    return f'filter_values["l_{hex_key}_{hashlib.sha256(kind_and_value.encode()).hexdigest()[:32]}"]'


# ----------------------------------------------------------------------------------------- golden

CAT, YEAR, RATING, DATE, CODE = "63617465676f7279", "79656172", "726174696e67", "64617465", "636f6465"

GOLDEN = [
    (_cmp("equals", "category", "technology"), f'filter_values["s_{CAT}"] == "technology"'),
    (_cmp("equals", "year", 2020), f'filter_values["n_{YEAR}"] == 2020.0'),
    (_cmp("equals", "year", 2020.0), f'filter_values["n_{YEAR}"] == 2020.0'),
    (_cmp("equals", "published", True), 'filter_values["b_7075626c6973686564"] == true'),
    # a missing key or another type: != is true in Milvus, as notEquals needs
    (_cmp("notEquals", "year", "2020"), f'filter_values["s_{YEAR}"] != "2020"'),
    (_cmp("in", "year", ["2020", 2021, 2021.0, False]),
     f'(filter_values["s_{YEAR}"] == "2020" or filter_values["n_{YEAR}"] == 2021.0'
     f' or filter_values["b_{YEAR}"] == false)'),
    (_cmp("in", "year", [1]), f'filter_values["n_{YEAR}"] == 1.0'),
    (_cmp("in", "year", []), '(id < "")'),
    (_cmp("notIn", "year", []), '(id >= "")'),
    (_cmp("notIn", "category", ["a"]), f'filter_values["s_{CAT}"] != "a"'),
    (_cmp("notIn", "year", ["a", 1]), f'(filter_values["s_{YEAR}"] != "a" and filter_values["n_{YEAR}"] != 1.0)'),
    (_cmp("greaterThan", "rating", -1.5), f'filter_values["n_{RATING}"] > -1.5'),
    (_cmp("lessThan", "rating", 4), f'filter_values["n_{RATING}"] < 4.0'),
    # 2020-01-01T02:00+02:00 is 2020-01-01T00:00Z = 1577836800 s after the epoch
    (_cmp("lessThanOrEquals", "date", "2020-01-01T02:00:00+02:00"), f'filter_values["d_{DATE}"] <= 1577836800000000'),
    # a date without a time is midnight UTC: one day before the epoch
    (_cmp("greaterThanOrEquals", "date", "1969-12-31"), f'filter_values["d_{DATE}"] >= -86400000000'),
    # % -> E D1 D1, _ -> E D1 D2: no wildcard is left but the trailing %
    (_cmp("startsWith", "code", "50%_"), f'filter_values["s_{CODE}"] like "50{E}{D1}{D1}{E}{D1}{D2}%"'),
    # every string starts with "": the presence marker (Milvus's like "%" is not that)
    (_cmp("startsWith", "code", ""), f'filter_values["m_s_{CODE}"] == 1'),
    (_cmp("stringContains", "code", ""), f'filter_values["m_s_{CODE}"] == 1'),
    # ' -> E D2 D2, the double quote is escaped for the literal, the backslash -> E D1 D3
    (_cmp("stringContains", "author", "O'B\"\\"),
     f'filter_values["s_617574686f72"] like "%O{E}{D2}{D2}B\\"{E}{D1}{D3}%"'),
    (_cmp("listContains", "tags", "a_i"), f'{_element("74616773", "s:a_i")} == 1'),
    (_cmp("listContains", "sizes", -2), f'{_element("73697a6573", "n:-2.0")} == 1'),
    (_cmp("listContains", "flags", True), f'{_element("666c616773", "b:true")} == 1'),
    # newline -> E D1 D4, carriage return -> E D2 D1 (Milvus literals cannot hold them); a tab stays
    (_cmp("equals", "meta.lang", "line\nbreak\ttab\r"),
     f'filter_values["s_6d6574612e6c616e67"] == "line{E}{D1}{D4}break\ttab{E}{D2}{D1}"'),
    # a key full of expression syntax is only ever hex
    (_cmp("equals", "x'] or true", "a"), 'filter_values["s_78275d206f722074727565"] == "a"'),
    (_cmp("equals", "城市", "東京"), 'filter_values["s_e59f8ee5b882"] == "東京"'),
    ({"andAll": [_cmp("equals", "a", 1)]}, 'filter_values["n_61"] == 1.0'),
    ({"andAll": [_cmp("equals", "a", 1), _cmp("equals", "b", "x")]},
     '(filter_values["n_61"] == 1.0 and filter_values["s_62"] == "x")'),
    # negations are pushed down (De Morgan): not (a and (b)) = (not a or not b)
    (_not(_cmp("equals", "a", 1), {"orAll": [_cmp("equals", "b", "x")]}),
     '(filter_values["n_61"] != 1.0 or filter_values["s_62"] != "x")'),
    ({"orAll": [_cmp("equals", "a", 1), {"notAll": _cmp("equals", "a", 2)}]},
     '(filter_values["n_61"] == 1.0 or filter_values["n_61"] != 2.0)'),
    (_not(_not(_cmp("equals", "a", 1))), 'filter_values["n_61"] == 1.0'),
    (_not({"orAll": [_cmp("equals", "a", 1), _cmp("in", "b", [])]}),
     '(filter_values["n_61"] != 1.0 and (id >= ""))'),
    # a negated range: the number is missing (marker != 1) or in the complementary range
    (_not(_cmp("greaterThan", "rating", 3)),
     f'(filter_values["m_n_{RATING}"] != 1 or filter_values["n_{RATING}"] <= 3.0)'),
    (_not(_cmp("lessThan", "date", "2020-01-01")),
     f'(filter_values["m_d_{DATE}"] != 1 or filter_values["d_{DATE}"] >= 1577836800000000)'),
    # a negated prefix: missing, or outside ["ab", "ac")
    (_not(_cmp("startsWith", "code", "ab")),
     f'(filter_values["m_s_{CODE}"] != 1 or filter_values["s_{CODE}"] < "ab" or filter_values["s_{CODE}"] >= "ac")'),
    # U+10FFFF cannot be incremented: carried to the previous character
    (_not(_cmp("startsWith", "code", "a\U0010ffff")),
     f'(filter_values["m_s_{CODE}"] != 1 or filter_values["s_{CODE}"] < "a\U0010ffff" or filter_values["s_{CODE}"] >= "b")'),
    # U+D7FF's successor is U+E000 (surrogates are not text)
    (_not(_cmp("startsWith", "code", "\ud7ff")),
     f'(filter_values["m_s_{CODE}"] != 1 or filter_values["s_{CODE}"] < "\ud7ff" or filter_values["s_{CODE}"] >= "{E}")'),
    (_not(_cmp("startsWith", "code", "\U0010ffff")),
     f'(filter_values["m_s_{CODE}"] != 1 or filter_values["s_{CODE}"] < "\U0010ffff")'),
    (_not(_cmp("stringContains", "code", "")), f'filter_values["m_s_{CODE}"] != 1'),
    (_not(_cmp("listContains", "tags", "x")), f'{_element("74616773", "s:x")} != 1'),
]


@pytest.mark.parametrize(("filter_json", "expected"), GOLDEN, ids=[f"golden{i}" for i in range(len(GOLDEN))])
def test_golden_translation(filter_json, expected):
    assert translate_filter(filter_json) == expected


def test_no_expression_holds_not_or_exists():
    for filter_json, _ in GOLDEN:
        words = translate_filter(filter_json).replace("(", " ").split()
        assert "not" not in words and "exists" not in words


def test_a_negated_substring_is_refused_before_any_query():
    for negated in (_not(_cmp("stringContains", "code", "ab")),
                    {"orAll": [_cmp("equals", "a", 1), _not(_cmp("stringContains", "code", "%"))]}):
        with pytest.raises(UnsupportedFilterError, match="stringContains"):
            translate_filter(negated)
    # two negations cancel: a plain substring test
    assert translate_filter(_not(_not(_cmp("stringContains", "code", "ab")))) == \
        f'filter_values["s_{CODE}"] like "%ab%"'


def test_translate_accepts_ast_and_json_string():
    from fastrag.filters import field

    assert translate_filter(field("a") == 1) == translate_filter('{"equals": {"key": "a", "value": 1}}')


def test_numbers_beyond_double_precision_are_unsupported():
    for value in (2**53, -(2**53), 2**60, 1e300):
        with pytest.raises(UnsupportedFilterError, match="2\\*\\*53"):
            translate_filter(_cmp("equals", "n", value))
        with pytest.raises(UnsupportedFilterError):
            translate_filter({"andAll": [_cmp("equals", "a", 1), _cmp("lessThan", "n", value)]})
    assert translate_filter(_cmp("equals", "n", 2**53 - 1)).endswith("== 9007199254740991.0")
    with pytest.raises(UnsupportedFilterError):  # a list element is a number like any other
        translate_filter(_cmp("listContains", "l", 2**60))


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
    ("tab\tstays", '"tab\tstays"'),  # Milvus reads no \t escape; a raw tab is read back as a tab
    ("Zürich 東京 Москва 🙂", '"Zürich 東京 Москва 🙂"'),
    ('") or true --', '"\\") or true --"'),
    ("", '""'),
])
def test_string_literal(value, literal):
    assert string_literal(value) == literal


def test_string_literal_refuses_what_milvus_cannot_read():
    for bad in ("bad \ud800", "two\nlines", "cr\r"):
        with pytest.raises(UnsupportedFilterError):
            string_literal(bad)


_LITERAL_PROBES = [
    "O'Brien", 'Say "hi"', "a\\b", "\\", "trailing\\", "\\\"", "tab\there", "Zürich 東京 🙂", '") or true --',
    "%_", "'", "''", "\\n literally", "\\u00e9 literally", " ", "",
]


@pytest.mark.anyio
async def test_string_literals_are_read_back_exactly_by_milvus(milvus_server):
    """Each literal selects exactly the document whose id it spells, through real Milvus 2.5's parser: the
    probes above and 200 random strings (seeded) over an alphabet of quotes, backslashes and Unicode."""
    from fastrag.vector_store.milvus import MilvusExpr, MilvusVectorStore

    rng = random.Random(15)
    alphabet = "ab'\"\\ \t%_é東🙂" + E + D1
    strings = list(dict.fromkeys(_LITERAL_PROBES + ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8)))
                                                      for _ in range(200)]))
    docs = [Document(id=f"v{i:03}", content=value) for i, value in enumerate(strings)]
    async with MilvusVectorStore(milvus_server, "literals", dimension=2) as store:
        await store.upsert(docs, embeddings=np.ones((len(docs), 2), np.float32))
        for doc in docs:
            got = await store.get(filter=MilvusExpr(f"content == {string_literal(doc.content)}"))
            assert [d.id for d in got] == [doc.id], repr(doc.content)
        await store._call("drop_collection", "literals")


# ------------------------------------------------------------------------------------ encodings


def test_encoding_table():
    assert encode_text("50%_off\\") == f"50{E}{D1}{D1}{E}{D1}{D2}off{E}{D1}{D3}"
    assert encode_text("a\nb\rc'd") == f"a{E}{D1}{D4}b{E}{D2}{D1}c{E}{D2}{D2}d"
    assert encode_text(E + D1 + D2 + D3 + D4) == f"{E}{D2}{D3}{E}{D2}{D4}{E}{D3}{D1}{E}{D3}{D2}{E}{D3}{D3}"
    assert encode_text("plain *text*\t東京") == "plain *text*\t東京"
    assert escape_like("a%", prefix=True) == f'"a{E}{D1}{D1}%"'
    assert escape_like('"_', prefix=False) == f'"%\\"{E}{D1}{D2}%"'
    # ids keep %, _ and \ (Milvus compares ids by equality only); quotes, line breaks and E.. are coded
    assert encode_id("50%_a\\b") == "50%_a\\b"
    assert encode_id("O'B\n" + E) == f"O{E}{D2}{D2}B{E}{D1}{D4}{E}{D2}{D3}"
    assert decode_text(encode_id("O'B\n" + E + "%")) == "O'B\n" + E + "%"


_ALPHABET = "ab%_\\*'\"\n\r" + E + D1 + D2 + D3 + D4


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=_ALPHABET, max_size=8), st.text(alphabet=_ALPHABET, max_size=4))
def test_encoding_preserves_prefixes_and_substrings(value, part):
    encoded, encoded_part = encode_text(value), encode_text(part)
    assert decode_text(encoded) == value
    assert decode_text(encode_id(value)) == value
    assert not set("%_\\\n\r'") & set(encoded)
    assert not set("\n\r'") & set(encode_id(value))
    assert value.startswith(part) == encoded.startswith(encoded_part)
    assert (part in value) == (encoded_part in encoded)
    assert (value == part) == (encoded == encoded_part)


# --------------------------------------------------------------------------------- typed copies


def _element_key(hex_key: str, kind_and_value: str) -> str:
    return f"l_{hex_key}_{hashlib.sha256(kind_and_value.encode()).hexdigest()[:32]}"


def test_filter_values_keep_types_apart():
    values = filter_values({
        "year": "2020", "n": 2020, "f": 1.5, "b": True, "i": 1, "d": "2020-01-01T02:00:00+02:00",
        "l": ["x%", 2, True, 2.5, None, {"o": 1}, 2.0, -0.0], "none": None, "obj": {"a": 1}, "huge": 10**400,
        "code": "50%_",
    })
    assert values == {
        "s_79656172": "2020", "m_s_79656172": 1,
        "n_6e": 2020.0, "m_n_6e": 1, "n_66": 1.5, "m_n_66": 1, "b_62": True, "n_69": 1.0, "m_n_69": 1,
        "s_64": "2020-01-01T02:00:00+02:00", "m_s_64": 1, "d_64": 1577836800000000, "m_d_64": 1,
        # one key per distinct element: 2 and 2.0 are one number, -0.0 is 0.0; None and objects count for nothing
        _element_key("6c", "s:x%"): 1, _element_key("6c", "n:2.0"): 1, _element_key("6c", "b:true"): 1,
        _element_key("6c", "n:2.5"): 1, _element_key("6c", "n:0.0"): 1,
        "n_68756765": 1.7976931348623157e308, "m_n_68756765": 1,
        "s_636f6465": f"50{E}{D1}{D1}{E}{D1}{D2}", "m_s_636f6465": 1,
    }


# -------------------------------------------------------------------- against real Milvus 2.5

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
async def hostile_store(milvus_server):
    from fastrag.vector_store.milvus import MilvusVectorStore

    docs = _hostile_docs()
    async with MilvusVectorStore(milvus_server, "hostile", enable_bm25=True) as store:
        await store.upsert(docs, embeddings=np.ones((len(docs), 2), np.float32))
        yield store, docs
        await store._call("drop_collection", "hostile")


def _expected(docs, filter_json) -> set[str]:
    return {d.id for d in docs if matches(filter_json, d.metadata)}


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


@pytest.mark.anyio
async def test_hostile_ids_round_trip(milvus_server):
    """Ids with quotes and line breaks are stored encoded (milvus-lite 2.5.1 cannot upsert an id holding ' and no
    Milvus literal holds a line break) and come back as given, from every read."""
    from fastrag.vector_store.milvus import MilvusVectorStore

    ids = ["plain", "O'Brien", 'q"uote', "back\\slash", "new\nline", "cr\rid", "東京", "50%_", "x' or '1'='1",
           E + "pua", "tab\tid"]
    docs = [Document(id=i, content=f"doc {n} solar") for n, i in enumerate(ids)]
    async with MilvusVectorStore(milvus_server, "hostile_ids", enable_bm25=True) as store:
        try:
            await store.upsert(docs, embeddings=np.ones((len(docs), 2), np.float32))
            await store.upsert(docs[:3], embeddings=np.ones((3, 2), np.float32))  # an upsert over existing ids
            assert await store.count() == len(ids)
            assert [d.id for d in await store.get(ids=ids)] == sorted(ids)
            assert [d.id for d in await store.get()] == sorted(ids)
            assert [d.id for d in await store.get(ids=["x' or '1'='1"])] == ["x' or '1'='1"]
            assert {d.id for d in await store.search_text("solar", k=20)} == set(ids)
            assert {d.id for d in await store.search_vector(np.ones(2, np.float32), k=20)} == set(ids)
            assert await store.delete(ids=["O'Brien", "new\nline", "missing'"]) == 2
            assert sorted(d.id for d in await store.get()) == sorted(set(ids) - {"O'Brien", "new\nline"})
        finally:
            await store._call("drop_collection", "hostile_ids")


@pytest.mark.anyio
async def test_why_strings_are_encoded(hostile_store):
    """Real Milvus 2.5's ``like`` reads ``_`` and ``%`` as wildcards however they are written, and its literals
    read no ``\\n`` escape: the encoding is what makes ``startsWith``/``stringContains`` and equality exact.

    If this starts failing, Milvus changed; the encoding stays correct either way."""
    from fastrag.vector_store.milvus import MilvusExpr

    store, docs = hostile_store
    # "a_b" as a like pattern: a, any one character, b: a_b, a%b, a*b, a\b
    assert await store.count(filter=MilvusExpr('metadata["all"] like "a_b"')) == 4
    assert await store.count(filter=_cmp("equals", "all", "a_b")) == 1
    assert await store.count(filter=_cmp("startsWith", "all", "a_")) == 1
    # the escape \n is not a newline to Milvus: the raw metadata cannot be compared with a line break
    assert await store.count(filter=MilvusExpr('metadata["all"] == "line\\nbreak"')) == 0
    assert await store.count(filter=_cmp("equals", "all", "line\nbreak")) == 1
