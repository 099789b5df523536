"""Hostile input (hypothesis): filter JSON, query strings, metadata values, file contents.

None may crash the process (only typed fastrag errors come out), hang (every test has a timeout), or
corrupt the store (it still answers, and its counts match what was accepted).
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastrag.errors import FilterError, InvalidParameterError
from fastrag.filters import COMPARISON_OPERATORS, LOGICAL_OPERATORS, dump_filter, matches, parse_filter
from fastrag.ingestion import IngestionPipeline
from fastrag.models import Document
from fastrag.retrieval import MAX_QUERY_CHARS, BM25Retriever, HybridRetriever, VectorRetriever
from fastrag.testing.fakes import HashingEmbedder
from fastrag.vector_store.sqlite import SQLiteVectorStore

pytestmark = pytest.mark.timeout(120)

FAST = settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])

# ------------------------------------------------------------------------------------ strategies

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=30,
)
operators = st.sampled_from(COMPARISON_OPERATORS + LOGICAL_OPERATORS + ("bogus", ""))
# filter-shaped JSON: mostly the right structure with wrong details, to reach deep into the parser
filter_like = st.recursive(
    st.builds(lambda op, key, value: {op: {"key": key, "value": value}}, operators, st.text(max_size=5) | scalars,
              json_values)
    | st.builds(lambda op, body: {op: body}, operators, json_values),
    lambda inner: st.builds(lambda op, children: {op: children}, operators, st.lists(inner, max_size=3) | inner),
    max_leaves=12,
)  # fmt: skip
metadata_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)  # fmt: skip
query_text = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=300)  # any valid Unicode
hostile_query = query_text | st.text(alphabet=st.sampled_from("\x00\x01\x07\x1b\x7f\u200b\u202e\ufeff \t\n\r"))


def has_non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(has_non_finite(v) for v in value.values())
    if isinstance(value, list):
        return any(has_non_finite(v) for v in value)
    return False


# --------------------------------------------------------------------------------------- fixtures

CORPUS = [
    Document(id=f"d{i}", content=f"{word} energy report number {i}", metadata={"i": i, "word": word})
    for i, word in enumerate(["solar", "wind", "tidal", "coal", "hydro", "nuclear", "биомасса", "太阳能"] * 3)
]


@pytest.fixture(scope="module")
def portal() -> Iterator[anyio.from_thread.BlockingPortal]:
    with anyio.from_thread.start_blocking_portal() as portal:
        yield portal


@pytest.fixture(scope="module")
def searchable(portal, tmp_path_factory) -> Iterator[tuple[SQLiteVectorStore, HybridRetriever]]:
    store = SQLiteVectorStore(tmp_path_factory.mktemp("hostile") / "store.db")
    embedder = HashingEmbedder()

    async def load() -> None:
        await store.upsert(CORPUS, embeddings=await embedder.embed_documents([d.content for d in CORPUS]))

    portal.call(load)
    hybrid = HybridRetriever([VectorRetriever(vector_store=store, embedder=embedder), BM25Retriever(store=store)])
    yield store, hybrid
    portal.call(store.aclose)


def still_healthy(portal, store: SQLiteVectorStore, count: int) -> None:
    assert portal.call(store.count) == count
    hits = portal.call(functools.partial(store.search_text, "solar energy", k=3))
    assert hits and hits[0].metadata["word"] == "solar"


# ----------------------------------------------------------------------------------------- filters


@FAST
@given(st.one_of(json_values, filter_like))
def test_any_json_value_parses_or_raises_filter_error(value) -> None:
    for candidate in (value, json.dumps(value, allow_nan=True)):
        try:
            node = parse_filter(candidate)
        except FilterError:
            continue
        if node is not None:
            assert parse_filter(dump_filter(node)) == node  # what parses round-trips
            assert isinstance(matches(node, {"key": 1, "": "x", "a": [1, "b"]}), bool)


@FAST
@given(st.text(max_size=200) | st.builds(lambda n: "[" * n + "]" * n, st.integers(0, 5000))
       | st.builds(lambda n: '{"andAll": [' * n, st.integers(0, 3000)))  # fmt: skip
def test_any_string_parses_or_raises_filter_error(text) -> None:
    try:
        parse_filter(text)
    except FilterError:
        pass


@SLOW
@given(filter_like)
def test_filters_from_json_never_break_a_store_search(portal, searchable, value) -> None:
    store, hybrid = searchable
    try:
        node = parse_filter(value)
    except FilterError:
        return
    found = portal.call(functools.partial(hybrid.retrieve, "solar energy", k=5, filter=node))
    assert all(matches(node, d.metadata) for d in found)


# ----------------------------------------------------------------------------------------- queries


@SLOW
@given(hostile_query)
def test_any_query_returns_documents_or_a_typed_error(portal, searchable, query) -> None:
    store, hybrid = searchable
    try:
        found = portal.call(functools.partial(hybrid.retrieve, query, k=5))
    except InvalidParameterError:
        assert not query.strip()  # the only query refused here is a blank one
        return
    assert isinstance(found, list) and len(found) <= 5
    assert {d.id for d in found} <= {d.id for d in CORPUS}


def test_long_and_malformed_queries(portal, searchable) -> None:
    store, hybrid = searchable
    words = " ".join(f"w{i}" for i in range(3000))[:MAX_QUERY_CHARS - 6] + " solar"
    assert len(words) <= MAX_QUERY_CHARS
    assert portal.call(functools.partial(hybrid.retrieve, words, k=3))
    for bad in ("x" * (MAX_QUERY_CHARS + 1), "a\ud800b", "\udfff", " \t\n\r\x0b\x0c"):
        with pytest.raises(InvalidParameterError):
            portal.call(functools.partial(hybrid.retrieve, bad, k=3))
    still_healthy(portal, store, len(CORPUS))


# ---------------------------------------------------------------------------------------- metadata


@SLOW
@given(st.lists(st.dictionaries(st.text(max_size=10), metadata_values, max_size=5), min_size=1, max_size=3),
       st.text(max_size=50))  # fmt: skip
def test_metadata_is_stored_faithfully_or_rejected_before_writing(portal, tmp_path_factory, batch, content) -> None:
    store = SQLiteVectorStore(":memory:")
    documents = [Document(id=f"m{i}", content=content, metadata=m) for i, m in enumerate(batch)]
    try:
        portal.call(store.upsert, documents)
    except InvalidParameterError:
        assert any(has_non_finite(m) for m in batch)  # only non-finite floats are refused here
        assert portal.call(store.count) == 0  # all or nothing
    else:
        assert not any(has_non_finite(m) for m in batch)
        stored = portal.call(store.get)
        assert [d.metadata for d in stored] == [json.loads(json.dumps(m)) for m in batch]
    portal.call(store.aclose)


def test_hostile_metadata_is_rejected_with_a_typed_error(portal) -> None:
    store = SQLiteVectorStore(":memory:")
    deep: Any = "bottom"
    for _ in range(100_000):
        deep = [deep]
    cases = [
        {"nan": math.nan}, {"inf": [1, {"x": -math.inf}]}, {"huge": 10**5000}, {"deep": deep},
        {"surrogate \ud800": 1}, {"value": "lone \udc00"}, {"obj": object()}, {"bytes": b"\x00"},
    ]
    for metadata in cases:
        with pytest.raises(InvalidParameterError):
            portal.call(store.upsert, [Document(id="x", content="text", metadata=metadata)])
    with pytest.raises(InvalidParameterError):
        portal.call(store.upsert, [Document(id="x", content="bad \ud83d text")])
    ok = {"big": 10**30, "neg": -(10**30), "uni ключ 鍵": "värde", "nul\x00": "\x00", "nested": {"a": [[], {}]}}
    portal.call(store.upsert, [Document(id="ok", content="fine words", metadata=ok)])
    assert portal.call(store.count) == 1 and dict(portal.call(store.get)[0].metadata) == ok
    assert portal.call(functools.partial(store.count, filter={"greaterThan": {"key": "big", "value": 10**29}})) == 1
    portal.call(store.aclose)


# --------------------------------------------------------------------------------------- ingestion

markdownish = st.lists(
    st.sampled_from(["# ", "## ", "###### ", "> ", ">>>>>>>> ", "- ", "    - ", "1. ", "```", "~~~", "|", "---",
                     "*", "_", "[", "](", ")", "<div>", "</div>", "<!--", "\n", "\n\n", "\t", "\x00", "\r", "word ",
                     "Ünïcödé ", "中文", "\u202e", "&amp;", "&#0;", "\\"]),
    max_size=300,
).map("".join)  # fmt: skip
htmlish = st.lists(
    st.sampled_from(["<html>", "<head>", "<title>", "</title>", "<body>", "<p>", "</p", "<script>", "</script>",
                     "<style>", "<h1>", "</h2>", "<b", "<i>", "<!--", "-->", "<![CDATA[", "&nbsp;", "&#x110000;",
                     "<", ">", "=\"", "text ", "\x00", "<table><tr><td>", "<div>"]),
    max_size=300,
).map("".join)  # fmt: skip


@SLOW
@given(st.lists(st.tuples(st.sampled_from([".md", ".txt", ".html"]),
                          st.binary(max_size=3000) | markdownish.map(str.encode) | htmlish.map(str.encode)),
                min_size=1, max_size=4))  # fmt: skip
def test_any_file_contents_index_or_fail_per_file(portal, tmp_path_factory, files) -> None:
    root = tmp_path_factory.mktemp("files")
    for i, (suffix, data) in enumerate(files):
        (root / f"f{i}{suffix}").write_bytes(data)
    check_ingestion(portal, root, n_files=len(files))


def test_pathological_files_index_or_fail_per_file(portal, tmp_path) -> None:
    root = tmp_path / "files"
    root.mkdir()
    hostile = {
        "one-huge-line.txt": b"x" * 3_000_000,
        "huge-line-of-words.md": b"# T\n\n" + b"word " * 400_000,
        "only-spaces.txt": b" " * 1_000_000,
        "deep-quotes.md": b">" * 100_000 + b" deep\n",
        "deep-list.md": "".join("  " * i + "- item\n" for i in range(400)).encode(),
        "deep-brackets.md": b"[" * 20_000 + b"x" + b"]" * 20_000,
        "deep-divs.html": b"<div>" * 50_000 + b"x" + b"</div>" * 10,
        "broken.html": b"<html><body><p>unclosed <b><i <script>alert(1)<p>text</scr ipt> <!-- never closed",
        "many-headings.md": b"".join(b"#" * (1 + i % 6) + b" h%d\n" % i for i in range(20_000)),
        "nul-and-controls.txt": b"a\x00b\x01c\x07\x1b[31m red \r\r\n" * 1000,
        "bom.md": b"\xef\xbb\xbf# Title\n\ntext",
        "random.txt": os.urandom(100_000),
        "latin1.md": "caf\xe9".encode("latin-1"),
    }
    for name, data in hostile.items():
        (root / name).write_bytes(data)
    check_ingestion(portal, root, n_files=len(hostile))


def check_ingestion(portal, root: Path, *, n_files: int) -> None:
    store = SQLiteVectorStore(":memory:")
    pipeline = IngestionPipeline(embedder=HashingEmbedder(), vector_store=store, show_progress=False)

    async def run() -> Any:
        with anyio.fail_after(100):
            return await pipeline.run([root])

    report = portal.call(run)
    # every file is indexed, or skipped as empty (nothing to write), or reported; none is lost
    assert report.files_indexed + report.files_skipped + len(report.errors) == n_files
    assert all(s.reason == "no text to index (empty)" for s in report.skipped_files)
    assert all("not valid UTF-8" in e.message or "cannot" in e.message for e in report.errors)
    assert portal.call(store.count) == report.chunks_written  # the store holds exactly what was written
    stored = portal.call(store.get)
    by_uri: dict[str, list[int]] = {}
    for doc in stored:
        by_uri.setdefault(doc.metadata["source_uri"], []).append(doc.metadata["chunk_index"])
    assert all(sorted(v) == list(range(len(v))) for v in by_uri.values())
    if stored:  # and it still answers
        word = next((w for d in stored for w in d.content.split() if w.isalpha()), None)
        if word:
            assert isinstance(portal.call(functools.partial(store.search_text, word, k=3)), list)
    again = portal.call(run)  # re-indexing the same files changes nothing
    assert again.chunks_written == 0 and again.files_unchanged == n_files - len(report.errors) - report.files_skipped
    assert again.skipped_files == report.skipped_files
    assert portal.call(store.count) == report.chunks_written
    portal.call(store.aclose)
