"""QdrantVectorStore: the shared store contract (local mode in memory and on disk, and a real server when
``FASTRAG_TEST_QDRANT_URL`` is set), plus what only the Qdrant adapter promises: payload layout, native
filters, BM25 equal to the formula, error mapping, settings recorded in the collection, server-side hybrid.
"""

from __future__ import annotations

import math
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

qdrant_client = pytest.importorskip("qdrant_client", reason="qdrant-client is not installed (fastrag-retrieval[qdrant])")

from qdrant_client import AsyncQdrantClient, QdrantClient  # noqa: E402
from qdrant_client import models as m  # noqa: E402

from fastrag.analysis import Analyzer  # noqa: E402
from fastrag.errors import (  # noqa: E402
    BackendError,
    BackendUnavailableError,
    ConfigurationError,
    DimensionMismatchError,
    FilterError,
    InvalidParameterError,
)
from fastrag.models import Document  # noqa: E402
from fastrag.retrieval import BM25Retriever, HybridRetriever, ReciprocalRankFusion, VectorRetriever  # noqa: E402
from fastrag.testing.fakes import HashingEmbedder  # noqa: E402
from fastrag.testing.filter_cases import FILTER_CORPUS  # noqa: E402
from fastrag.testing.store_contract import StoreContract, corpus_embeddings  # noqa: E402
from fastrag.vector_store.qdrant import QdrantHybridRetriever, QdrantVectorStore, point_id  # noqa: E402

SERVER_URL = os.environ.get("FASTRAG_TEST_QDRANT_URL")


# ------------------------------------------------------------------------------------------ contract


class TestQdrantMemoryStore(StoreContract):
    persistent = False

    @pytest.fixture
    def store_factory(self):
        return lambda: QdrantVectorStore(location=":memory:", collection="contract", enable_bm25=True)


@pytest.fixture
def fast_dir(tmp_path):
    """A fresh folder, in RAM (``/dev/shm``) when the machine has one.

    Local mode commits every write to SQLite on disk; on a busy CI disk that makes the 300-odd contract
    tests of the ``path=`` store take minutes. The behaviour under test (a persistent folder, reopened) is
    the same in RAM.
    """
    if not os.path.isdir("/dev/shm"):
        yield tmp_path
        return
    folder = tempfile.mkdtemp(prefix="fastrag-qdrant-", dir="/dev/shm")
    try:
        yield pathlib.Path(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class TestQdrantPathStore(StoreContract):
    @pytest.fixture
    def store_factory(self, fast_dir):
        return lambda: QdrantVectorStore(path=fast_dir / "qdrant", collection="contract", enable_bm25=True)


def _server_store(collection: str) -> QdrantVectorStore:
    assert SERVER_URL is not None
    if SERVER_URL.startswith(("http://", "https://")):
        return QdrantVectorStore(url=SERVER_URL, collection=collection, enable_bm25=True)
    return QdrantVectorStore.from_url(SERVER_URL, collection=collection, enable_bm25=True)


@pytest.mark.external_server("FASTRAG_TEST_QDRANT_URL")
@pytest.mark.skipif(
    not SERVER_URL,
    reason="FASTRAG_TEST_QDRANT_URL is not set; no Qdrant server runs on this machine (docker-compose provides one)",
)
class TestQdrantServerStore(StoreContract):
    @pytest.fixture
    async def store_factory(self):
        collection = f"fastrag_test_{uuid.uuid4().hex[:12]}"
        yield lambda: _server_store(collection)
        async with _server_store(collection) as store:
            await store._call("delete_collection", collection_name=collection)


# ------------------------------------------------------------------------------------------ helpers


def memory_store(**kwargs) -> QdrantVectorStore:  # noqa: ANN003
    kwargs.setdefault("enable_bm25", True)
    return QdrantVectorStore(location=":memory:", collection="t", **kwargs)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def unit(*rows: list[float]) -> np.ndarray:
    matrix = np.array(rows, dtype=np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


# --------------------------------------------------------------------------------- import and extras


def test_import_fastrag_does_not_import_qdrant_client():
    code = (
        "import sys, fastrag, fastrag.vector_store, fastrag.vector_store.qdrant; "
        "assert 'qdrant_client' not in sys.modules, 'qdrant_client was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_missing_sdk_raises_configuration_error_with_install_command(monkeypatch):
    from fastrag.vector_store.qdrant import translate_filter

    for name in [n for n in sys.modules if n == "qdrant_client" or n.startswith("qdrant_client.")]:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ConfigurationError, match=r'pip install "fastrag-retrieval\[qdrant\]"'):
        QdrantVectorStore(location=":memory:")
    with pytest.raises(ConfigurationError, match=r'pip install "fastrag-retrieval\[qdrant\]"'):
        translate_filter({"equals": {"key": "a", "value": 1}})


# ------------------------------------------------------------------------------------------ errors


def test_constructor_needs_exactly_one_location():
    with pytest.raises(ConfigurationError):
        QdrantVectorStore()
    with pytest.raises(ConfigurationError):
        QdrantVectorStore(location=":memory:", url="http://127.0.0.1:6333")
    with pytest.raises(InvalidParameterError):
        QdrantVectorStore(location=":memory:", dimension=0)
    with pytest.raises(InvalidParameterError):
        QdrantVectorStore(location=":memory:", timeout=0)
    with pytest.raises(ConfigurationError, match="url="):
        QdrantVectorStore(location="http://127.0.0.1:6333")


@pytest.mark.anyio
async def test_unreachable_server_is_backend_unavailable_naming_the_store():
    url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    store = QdrantVectorStore(url=url, collection="docs", timeout=1)
    with pytest.raises(BackendUnavailableError) as info:
        await store.count()
    assert time.monotonic() - started < 10
    assert url in str(info.value) and "docs" in str(info.value)
    assert info.value.store == store.name
    assert info.value.__cause__ is not None
    with pytest.raises(BackendUnavailableError):
        async with QdrantVectorStore(url=url, collection="docs", timeout=1):
            pass
    await store.aclose()


class _StatusHandler(BaseHTTPRequestHandler):
    status = 500

    def _answer(self) -> None:
        body = b'{"status": {"error": "boom"}, "time": 0.0}'
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _answer  # noqa: N815

    def log_message(self, *args) -> None:  # noqa: ANN002
        pass


@pytest.mark.anyio
@pytest.mark.parametrize(("status", "unavailable"), [(500, False), (400, False), (503, True)])
async def test_server_error_statuses_are_mapped(status, unavailable):
    handler = type("Handler", (_StatusHandler,), {"status": status})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        store = QdrantVectorStore(url=f"http://127.0.0.1:{server.server_port}", collection="docs", timeout=2)
        with pytest.raises(BackendError) as info:
            await store.count()
        assert isinstance(info.value, BackendUnavailableError) is unavailable
        assert "boom" in str(info.value) and "docs" in str(info.value)
        await store.aclose()
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.anyio
async def test_path_is_locked_to_one_open_store(tmp_path):
    async with QdrantVectorStore(path=tmp_path / "q") as first:
        await first.upsert([Document(id="a", content="x")], embeddings=np.ones((1, 2), dtype=np.float32))
        with pytest.raises(BackendUnavailableError, match="already accessed"):
            QdrantVectorStore(path=tmp_path / "q")
    async with QdrantVectorStore(path=tmp_path / "q") as second:
        assert await second.count() == 1


@pytest.mark.anyio
async def test_aclose_is_idempotent_and_a_closed_store_refuses_work():
    store = memory_store()
    await store.upsert([Document(id="a", content="x")])
    await store.aclose()
    await store.aclose()
    with pytest.raises(BackendUnavailableError, match="closed"):
        await store.count()


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_injected_client_is_used_and_never_closed(kind):
    client = QdrantClient(location=":memory:") if kind == "sync" else AsyncQdrantClient(location=":memory:")
    async with QdrantVectorStore(client=client, collection="shared", enable_bm25=True) as store:
        await store.upsert([Document(id="a", content="solar power")], embeddings=np.ones((1, 3), dtype=np.float32))
        assert [d.id for d in await store.search_text("solar", k=1)] == ["a"]
    # the client still answers after the store closed
    exists = client.collection_exists("shared")
    assert (await exists if kind == "async" else exists) is True
    async with QdrantVectorStore(client=client, collection="shared") as again:
        assert again.enable_bm25 is True
        assert await again.count() == 1
    if kind == "async":
        await client.close()
    else:
        client.close()


# ------------------------------------------------------------------------- settings in the collection


@pytest.mark.anyio
async def test_collection_remembers_its_settings(tmp_path):
    path = tmp_path / "q"
    async with QdrantVectorStore(path=path, enable_bm25=True, embedding_model="model-a") as store:
        await store.upsert([Document(id="a", content="x")], embeddings=np.ones((1, 4), dtype=np.float32))
    async with QdrantVectorStore(path=path) as store:  # None adopts the collection's settings
        assert (store.dimension, store.enable_bm25, store.embedding_model) == (4, True, "model-a")
    for wrong in (
        {"dimension": 8},
        {"enable_bm25": False},
        {"embedding_model": "model-b"},
        {"analyzer": Analyzer("de")},
    ):
        with pytest.raises(ConfigurationError, match="built with"):
            async with QdrantVectorStore(path=path, **wrong):
                pass


@pytest.mark.anyio
async def test_a_collection_not_made_by_fastrag_is_refused():
    client = QdrantClient(location=":memory:")
    client.create_collection("theirs", vectors_config=m.VectorParams(size=4, distance=m.Distance.DOT))
    with pytest.raises(ConfigurationError, match="not a fastrag collection"):
        async with QdrantVectorStore(client=client, collection="theirs"):
            pass
    client.close()


@pytest.mark.anyio
async def test_create_false_and_a_missing_collection():
    with pytest.raises(BackendUnavailableError, match="does not exist"):
        async with QdrantVectorStore(location=":memory:", create=False):
            pass
    async with memory_store() as store:  # reads on a collection that does not exist yet are empty
        assert await store.count() == 0
        assert await store.get() == []
        assert await store.search_vector(np.ones(3), k=2) == []
        assert await store.search_text("solar", k=2) == []
        assert await store.delete(ids=["a"]) == 0


@pytest.mark.anyio
async def test_dimension_creates_the_collection_when_opened():
    async with QdrantVectorStore(location=":memory:", collection="c", dimension=3) as store:
        assert store._client.collection_exists("c")
        with pytest.raises(DimensionMismatchError):
            await store.search_vector(np.ones(4), k=1)
        with pytest.raises(DimensionMismatchError):
            await store.upsert([Document(id="a", content="x")], embeddings=np.ones((1, 4)))


# ----------------------------------------------------------------------------------- payload, writes


@pytest.mark.anyio
async def test_payload_layout_and_point_ids():
    doc = Document(id="doc/1", content="hello", metadata={"lang": "en", "tags": ["a", "b"]})
    async with memory_store() as store:
        await store.upsert([doc], embeddings=np.ones((1, 2), dtype=np.float32))
        (point,) = store._client.retrieve("t", ids=[point_id("doc/1")], with_payload=True)
    assert str(point.id) == str(uuid.uuid5(uuid.uuid5(uuid.NAMESPACE_URL, "fastrag:document"), "doc/1"))
    assert point.payload["id"] == "doc/1"
    assert point.payload["content"] == "hello"
    assert point.payload["metadata"] == {"lang": "en", "tags": ["a", "b"]}
    assert point.payload["_f"] == {"k_lang": {"s": "en"}, "k_tags": {"l": ["s:a", "s:b"]}}
    assert point.payload["_bm25"] == "hello"


METADATA = {
    "int": 7,
    "float_integral": 3.0,
    "float": -0.25,
    "big": 2**62 + 1,
    "bool": False,
    "none": None,
    "text": "Zoë \"quoted\" \\ 50%_",
    "list": [1, "two", 3.5, True, None, {"x": [1]}],
    "nested": {"a": {"b": [1, 2.0]}, "c.d": "e"},
    "dotted.key": "v",
    "東京": "都",
}


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["memory", "path"])
async def test_metadata_round_trips_exactly(tmp_path, mode):
    def open_store() -> QdrantVectorStore:
        if mode == "memory":
            return store_in_memory
        return QdrantVectorStore(path=tmp_path / "q", enable_bm25=True)

    store_in_memory = memory_store()
    doc = Document(id="m", content="metadata round trip", metadata=METADATA)
    async with open_store() as store:
        await store.upsert([doc], embeddings=np.ones((1, 2), dtype=np.float32))
        if mode == "memory":
            found = await store.get(ids=["m"])
            await _check_round_trip(found[0].metadata)
    if mode == "path":
        async with open_store() as store:
            (found,) = await store.get(ids=["m"])
            await _check_round_trip(found.metadata)
            (hit,) = await store.search_vector(np.ones(2), k=1)
            await _check_round_trip({k: v for k, v in hit.metadata.items() if k not in ("score", "rank")})


async def _check_round_trip(metadata) -> None:  # noqa: ANN001
    assert dict(metadata) == METADATA
    for key, value in METADATA.items():
        assert type(metadata[key]) is type(value), key


@pytest.mark.anyio
async def test_bad_metadata_and_vectors_are_rejected_before_writing():
    async with memory_store() as store:
        await store.upsert([Document(id="ok", content="x")], embeddings=np.ones((1, 2), dtype=np.float32))
        for metadata in ({"x": float("nan")}, {"x": 2**63}, {"x": [-(2**63) - 1]}, {"x": object()}, {"x": {"y": math.inf}}):
            with pytest.raises(InvalidParameterError):
                await store.upsert([Document(id="bad", content="x", metadata=metadata)])
        with pytest.raises(InvalidParameterError):
            await store.upsert([Document(id="bad", content="x")], embeddings=np.full((1, 2), np.nan))
        with pytest.raises(InvalidParameterError):
            await store.upsert([Document(id="a", content="x"), Document(id="a", content="y")])
        with pytest.raises(DimensionMismatchError):
            await store.upsert([Document(id="bad", content="x")], embeddings=np.ones((2, 2)))
        assert await store.count() == 1
        with pytest.raises(InvalidParameterError):
            await store.search_vector(np.array([np.inf, 0]), k=1)
        with pytest.raises(InvalidParameterError):
            await store.get(ids="ok")
        assert (await store.get(ids=[]), await store.count(filter={"in": {"key": "x", "value": []}})) == ([], 0)


@pytest.mark.anyio
async def test_documents_without_vectors_are_found_by_bm25_only():
    async with memory_store() as store:
        await store.upsert([Document(id="text", content="solar energy")])  # the collection has no vector yet
        assert store.dimension is None
        assert await store.search_vector(np.ones(3), k=3) == []
        await store.upsert([Document(id="vec", content="solar wind")], embeddings=np.ones((1, 3), dtype=np.float32))
        assert store.dimension == 3
        assert [d.id for d in await store.search_vector(np.ones(3), k=3)] == ["vec"]
        assert [d.id for d in await store.search_text("solar", k=3)] == ["text", "vec"]


@pytest.mark.anyio
async def test_ties_are_broken_by_id_across_the_cut_and_zero_vectors_are_refused():
    docs = [Document(id=f"t{i}", content="same") for i in (5, 3, 9, 1, 7, 2)]
    async with memory_store() as store:
        await store.upsert(docs, embeddings=np.ones((6, 2), dtype=np.float32))
        hits = await store.search_vector(np.ones(2), k=3)
        assert [d.id for d in hits] == ["t1", "t2", "t3"]
        assert [d.rank for d in hits] == [0, 1, 2]
        text = await store.search_text("same", k=4)
        assert [d.id for d in text] == ["t1", "t2", "t3", "t5"]
        with pytest.raises(InvalidParameterError, match="all zeros"):  # the same on every store (contract)
            await store.search_vector(np.zeros(2), k=2, filter={"notEquals": {"key": "x", "value": 1}})


@pytest.mark.anyio
async def test_delete_ids_and_filter_together_and_clear():
    async with memory_store() as store:
        await store.upsert(FILTER_CORPUS, embeddings=corpus_embeddings(FILTER_CORPUS))
        removed = await store.delete(ids=["d01", "d02", "d03", "nope"], filter={"equals": {"key": "category", "value": "technology"}})
        assert removed == 2
        assert [d.id for d in await store.get(ids=["d01", "d02", "d03"])] == ["d02"]
        assert [d.id for d in await store.get(limit=3)] == ["d02", "d04", "d05"]
        assert await store.clear() == 10
        assert await store.count() == 0


# ------------------------------------------------------------------------------ filters on real points


ODD_DOCS = [
    Document(id="o1", content="one", metadata={"a.b": "v", "x') OR 1=1 --": "q", 'say "hi"': 1, "Größe": "L"}),
    Document(id="o2", content="two", metadata={"a": {"b": "v"}, "k_x": "plain", "x_6162": "hexlike"}),
    Document(id="o3", content="three", metadata={"ab": "hexlike", "val": "a\\b%_*'\"", "list": ["a\\b", "%"]}),
]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("filter_json", "expected"),
    [
        ({"equals": {"key": "a.b", "value": "v"}}, ["o1"]),  # a dotted key is one key, not a path into "a"
        ({"equals": {"key": "x') OR 1=1 --", "value": "q"}}, ["o1"]),
        ({"equals": {"key": 'say "hi"', "value": 1.0}}, ["o1"]),
        ({"equals": {"key": "Größe", "value": "L"}}, ["o1"]),
        ({"equals": {"key": "k_x", "value": "plain"}}, ["o2"]),
        ({"equals": {"key": "x_6162", "value": "hexlike"}}, ["o2"]),  # the encoded names never collide
        ({"equals": {"key": "ab", "value": "hexlike"}}, ["o3"]),
        ({"equals": {"key": "val", "value": "a\\b%_*'\""}}, ["o3"]),
        ({"startsWith": {"key": "val", "value": "a\\b%_*"}}, ["o3"]),
        ({"startsWith": {"key": "val", "value": "a\\b%__"}}, []),
        ({"stringContains": {"key": "val", "value": "%_*'"}}, ["o3"]),
        ({"stringContains": {"key": "val", "value": ".*"}}, []),
        ({"listContains": {"key": "list", "value": "%"}}, ["o3"]),
        ({"listContains": {"key": "list", "value": "a\\b"}}, ["o3"]),
        ({"notEquals": {"key": "x') OR 1=1 --", "value": "q"}}, ["o2", "o3"]),
    ],
)
async def test_odd_keys_and_values_select_the_right_documents(filter_json, expected):
    async with memory_store() as store:
        await store.upsert(ODD_DOCS, embeddings=corpus_embeddings(ODD_DOCS))
        assert [d.id for d in await store.get(filter=filter_json)] == expected
        assert sorted(d.id for d in await store.search_vector(np.ones(8), k=5, filter=filter_json)) == expected


@pytest.mark.anyio
async def test_native_filters_pass_through_and_are_never_confused_with_fastrag_json():
    native = m.Filter(must=[m.FieldCondition(key="metadata.category", match=m.MatchValue(value="science"))])
    async with memory_store() as store:
        await store.upsert(FILTER_CORPUS, embeddings=corpus_embeddings(FILTER_CORPUS))
        science = ["d02", "d05", "d08", "d12"]
        assert await store.count(filter=native) == 4
        assert [d.id for d in await store.get(filter=native)] == science
        assert sorted(d.id for d in await store.search_vector(np.ones(8), k=12, filter=native)) == science
        assert sorted(d.id for d in await store.search_text("physics science", k=12, filter=native)) == ["d02", "d05", "d12"]
        # Qdrant's own Filter JSON, given as a dict, is read as a fastrag filter and rejected
        with pytest.raises(FilterError):
            await store.count(filter={"must": [{"key": "metadata.category", "match": {"value": "science"}}]})
        assert await store.delete(ids=["d02", "d01"], filter=native) == 1
        assert await store.count(filter=native) == 3


# ------------------------------------------------------------------------------------------- BM25


BM25_CORPUS = [
    Document(id="b1", content="Solar panels convert sunlight; a panel needs cleaning."),
    Document(id="b2", content="Solar energy, solar power."),
    Document(id="b3", content="Wind turbines generate electricity from wind."),
    Document(id="b4", content="The history of energy includes coal, oil, gas, wind, hydro, nuclear and solar power."),
]


def reference_bm25(docs: list[Document], query: str, k1: float = 1.2, b: float = 0.75) -> dict[str, float]:
    """BM25 (Robertson & Zaragoza 2009) with Lucene's IDF ln(1 + (N - n + 0.5) / (n + 0.5))."""
    analyzer = Analyzer()
    terms = {d.id: Counter(analyzer.analyze(d.content)) for d in docs}
    lengths = {i: sum(c.values()) for i, c in terms.items()}
    avgdl = sum(lengths.values()) / len(docs)
    scores = {}
    for doc_id, tf in terms.items():
        score = 0.0
        for term in set(analyzer.analyze(query)):
            n = sum(1 for c in terms.values() if term in c)
            if tf[term]:
                idf = math.log(1 + (len(docs) - n + 0.5) / (n + 0.5))
                score += idf * tf[term] * (k1 + 1) / (tf[term] + k1 * (1 - b + b * lengths[doc_id] / avgdl))
        if score > 0:
            scores[doc_id] = score
    return scores


@pytest.mark.anyio
async def test_bm25_scores_are_the_formula_with_live_corpus_statistics():
    async with memory_store() as store:
        await store.upsert(BM25_CORPUS[:2])
        first = {d.id: d.score for d in await store.search_text("solar power", k=10)}
        assert first == pytest.approx(reference_bm25(BM25_CORPUS[:2], "solar power"), rel=1e-6)
        await store.upsert(BM25_CORPUS[2:])  # N, document frequencies and the average length all change
        second = {d.id: d.score for d in await store.search_text("solar power", k=10)}
        assert second == pytest.approx(reference_bm25(BM25_CORPUS, "solar power"), rel=1e-6)
        assert second["b2"] != first["b2"]
        await store.delete(ids=["b4"])
        third = {d.id: d.score for d in await store.search_text("solar power", k=10)}
        assert third == pytest.approx(reference_bm25(BM25_CORPUS[:3], "solar power"), rel=1e-6)


@pytest.mark.anyio
async def test_bm25_analysis_matches_the_sqlite_store():
    docs = [
        Document(id="run", content="The runner was running quickly"),
        Document(id="zh", content="黑豹队的防守只丢了308分，在联赛中排名第六。"),
        Document(id="ru", content="Москва — столица России."),
        Document(id="title", content="body text only", metadata={"title": "Photosynthesis"}),
    ]
    async with memory_store() as store:
        await store.upsert(docs)
        assert [d.id for d in await store.search_text("runs", k=5)] == ["run"]
        assert [d.id for d in await store.search_text("黑豹队的防守", k=5)] == ["zh"]
        assert [d.id for d in await store.search_text("СТОЛИЦА", k=5)] == ["ru"]
        assert [d.id for d in await store.search_text("photosynthesis", k=5)] == ["title"]
        assert await store.search_text("the a was", k=5) == []
        for query in ['"unbalanced', "NEAR(a b)", "a* OR b", "col:value", "(((", "^start", "\x00"]:
            assert isinstance(await store.search_text(query, k=3), list)
        with pytest.raises(InvalidParameterError):
            await store.search_text(b"bytes", k=3)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_search_text_without_bm25_is_a_configuration_error():
    async with QdrantVectorStore(location=":memory:", enable_bm25=False) as store:
        await store.upsert([Document(id="a", content="solar")], embeddings=np.ones((1, 2), dtype=np.float32))
        with pytest.raises(ConfigurationError, match="enable_bm25"):
            await store.search_text("solar", k=1)


# ------------------------------------------------------------------------------------------ from_url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("qdrant://db.example:6333/docs", {"url": "http://db.example:6333", "collection": "docs"}),
        ("qdrant://db.example/docs?bm25=true&timeout=2.5", {"url": "http://db.example:6333", "collection": "docs",
                                                            "enable_bm25": True, "timeout": 2.5}),
        ("qdrants://db.example:443/docs", {"url": "https://db.example:443", "collection": "docs"}),
        ("qdrant://db.example:6333", {"url": "http://db.example:6333"}),
        ("qdrant+memory:///notes?dimension=8", {"location": ":memory:", "collection": "notes", "dimension": 8}),
        ("qdrant+memory://", {"location": ":memory:"}),
        ("qdrant+path:///data/q?collection=notes&create=false", {"path": "data/q", "collection": "notes", "create": False}),
        ("qdrant+path:////var/lib/q", {"path": "/var/lib/q"}),
    ],
)
def test_from_url_forms(monkeypatch, url, expected):
    seen = {}
    monkeypatch.setattr(QdrantVectorStore, "__init__", lambda self, **kwargs: seen.update(kwargs))
    QdrantVectorStore.from_url(url)
    assert seen == expected
    seen.clear()
    QdrantVectorStore.from_url(url, collection="override")
    assert seen["collection"] == "override"


@pytest.mark.parametrize(
    "url",
    ["sqlite:///x.db", "qdrant:/docs", "qdrant:///docs", "qdrant+path://", "qdrant://h/a/b", "qdrant://h/d?bm25=maybe",
     "qdrant://h/d?colour=red", "qdrant://h:port/d", "qdrant+memory://host/x"],
)
def test_from_url_rejects_bad_urls(url):
    with pytest.raises(ConfigurationError):
        QdrantVectorStore.from_url(url)


@pytest.mark.anyio
async def test_from_url_opens_a_working_store(tmp_path):
    async with QdrantVectorStore.from_url("qdrant+memory:///notes?bm25=true") as store:
        await store.upsert([Document(id="a", content="solar")])
        assert [d.id for d in await store.search_text("solar", k=1)] == ["a"]
    async with QdrantVectorStore.from_url(f"qdrant+path:///{tmp_path}/q?collection=notes", dimension=2) as store:
        assert store.collection == "notes" and store.dimension == 2


# ---------------------------------------------------------------------------------- server-side hybrid


@pytest.fixture
async def hybrid_store():
    embedder = HashingEmbedder(16)
    async with memory_store() as store:
        vectors = await embedder.embed_documents([d.content for d in FILTER_CORPUS])
        await store.upsert(FILTER_CORPUS, embeddings=vectors)
        yield store, embedder


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("query", "filter_json"),
    [
        ("machine learning python", None),
        ("physics in Tokyo", {"equals": {"key": "category", "value": "science"}}),
        ("rust python tokyo", {"notAll": [{"listContains": {"key": "tags", "value": "ai"}}]}),
    ],
)
async def test_server_rrf_equals_the_client_side_hybrid(hybrid_store, query, filter_json):
    """Same documents, order, scores and provenance as ``HybridRetriever`` with ``ReciprocalRankFusion(60)``.

    The legs are cut (``candidate_k=3``) above any tie in their scores: within a leg Qdrant orders tied
    scores its own way, while fastrag's stores order them by id (see docs/backends/qdrant.md).
    """
    store, embedder = hybrid_store
    server = QdrantHybridRetriever(store=store, embedder=embedder, candidate_k=3)
    client = HybridRetriever(
        [VectorRetriever(vector_store=store, embedder=embedder), BM25Retriever(store=store)],
        fusion=ReciprocalRankFusion(60), candidate_k=3,
    )
    got = await server.retrieve(query, k=3, filter=filter_json)
    want = await client.retrieve(query, k=3, filter=filter_json)
    assert [d.id for d in got] == [d.id for d in want]
    assert [d.score for d in got] == pytest.approx([d.score for d in want], rel=1e-9)
    assert [d.rank for d in got] == list(range(len(got)))
    for a, b in zip(got, want, strict=True):
        assert {n: br.rank for n, br in a.branches.items()} == {n: br.rank for n, br in b.branches.items()}
        assert {k: v for k, v in a.metadata.items() if k not in ("score", "rank", "branches")} == \
               {k: v for k, v in b.metadata.items() if k not in ("score", "rank", "branches")}


@pytest.mark.anyio
@pytest.mark.parametrize("fusion", ["rrf", "dbsf"])
async def test_server_hybrid_applies_the_filter_to_every_leg(hybrid_store, fusion):
    store, embedder = hybrid_store
    retriever = QdrantHybridRetriever(store=store, embedder=embedder, fusion=fusion,
                                      filter={"notEquals": {"key": "city", "value": "Москва"}})
    # d03 and d12 (Moscow) are the best BM25 and dense matches for this query; neither leg may return them
    hits = await retriever.retrieve("machine learning Moscow", k=12, filter={"notEquals": {"key": "category", "value": "art"}})
    ids = [d.id for d in hits]
    assert ids and not {"d03", "d12", "d07"} & set(ids)
    assert all(d.branches and set(d.branches) <= {"vector", "bm25"} for d in hits)
    assert [d.score for d in hits] == sorted((d.score for d in hits), reverse=True)
    native = m.Filter(must=[m.FieldCondition(key="metadata.category", match=m.MatchValue(value="health"))])
    assert {d.id for d in await retriever.retrieve("health heat sleep", k=5, filter=native)} <= {"d04", "d09"}


@pytest.mark.anyio
async def test_server_hybrid_weights_and_validation(hybrid_store):
    store, embedder = hybrid_store
    bm25_only = QdrantHybridRetriever(store=store, embedder=embedder, weights={"vector": 0, "bm25": 1})
    hits = await bm25_only.retrieve("physics", k=5)
    assert [d.id for d in hits] == [d.id for d in await store.search_text("physics", k=5)]
    for bad in (
        {"fusion": "sum"},
        {"rank_constant": 0},
        {"candidate_k": -1},
        {"weights": {"vector": 1}},
        {"weights": {"vector": -1, "bm25": 1}},
        {"weights": {"vector": 0, "bm25": 0}},
        {"fusion": "dbsf", "weights": {"vector": 1, "bm25": 1}},
    ):
        with pytest.raises(InvalidParameterError):
            QdrantHybridRetriever(store=store, embedder=embedder, **bad)
    retriever = QdrantHybridRetriever(store=store, embedder=embedder)
    for k in (0, True):
        with pytest.raises(InvalidParameterError):
            await retriever.retrieve("physics", k=k)
    with pytest.raises(InvalidParameterError):
        await retriever.retrieve("   ")
    with pytest.raises(DimensionMismatchError):
        await QdrantHybridRetriever(store=store, embedder=HashingEmbedder(4)).retrieve("physics")
    # only stopwords: the BM25 leg has no terms and the dense leg alone is fused
    assert [set(d.branches) for d in await retriever.retrieve("the", k=3)] == [{"vector"}] * 3


@pytest.mark.anyio
async def test_the_store_s_search_hybrid_is_what_the_retriever_returns(hybrid_store):
    """``QdrantVectorStore.search_hybrid`` is public (the retriever embeds the question and calls it), and
    checks its own arguments before any request."""
    store, embedder = hybrid_store
    retriever = QdrantHybridRetriever(store=store, embedder=embedder, fusion="dbsf", candidate_k=5)
    query, where = "machine learning python", {"notEquals": {"key": "category", "value": "art"}}
    direct = await store.search_hybrid(query, await embedder.embed_query(query), k=4, filter=where, fusion="dbsf",
                                       candidate_k=5)
    assert direct == await retriever.retrieve(query, k=4, filter=where)
    assert [d.rank for d in direct] == [0, 1, 2, 3] and all(d.branches for d in direct)
    vector = await embedder.embed_query(query)
    for bad in ({"k": 0}, {"k": 3, "fusion": "sum"}, {"k": 3, "candidate_k": 0}, {"k": 3, "weights": {"bm25": 1}}):
        with pytest.raises(InvalidParameterError):
            await store.search_hybrid(query, vector, **bad)
    with pytest.raises(InvalidParameterError):
        await store.search_hybrid(" ", vector, k=3)


@pytest.mark.anyio
async def test_server_hybrid_needs_bm25():
    async with QdrantVectorStore(location=":memory:", enable_bm25=False) as store:
        await store.upsert([Document(id="a", content="x")], embeddings=np.ones((1, 16), dtype=np.float32))
        with pytest.raises(ConfigurationError, match="enable_bm25"):
            await QdrantHybridRetriever(store=store, embedder=HashingEmbedder(16)).retrieve("x")


# ------------------------------------------------------------------------ Qdrant semantics relied upon


def _raw_clients():
    yield "local", QdrantClient(location=":memory:")
    if SERVER_URL and SERVER_URL.startswith(("http://", "https://")):
        yield "server", QdrantClient(url=SERVER_URL, timeout=30, check_compatibility=False)


def test_qdrant_behaviours_the_translation_relies_on():
    """Raw Qdrant conditions behave as ``translate_filter`` assumes (also against a server when
    ``FASTRAG_TEST_QDRANT_URL`` is set); an upgrade that changes one of them fails here first."""
    for where, client in _raw_clients():
        name = f"fastrag_semantics_{uuid.uuid4().hex[:8]}"
        client.create_collection(name, vectors_config={})
        client.upsert(name, points=[
            m.PointStruct(id=1, vector={}, payload={"f": {"k_a": {"s": "50%_off", "l": ["s:x", "n:2"], "r": 2.5}}}),
            m.PointStruct(id=2, vector={}, payload={"f": {"k_a": {"n": "1", "b": True}}}),
            m.PointStruct(id=3, vector={}, payload={"other": 1}),
        ], wait=True)

        def ids(*conditions, clause="must"):  # noqa: ANN001, ANN002, ANN202
            flt = m.Filter(**{clause: list(conditions)})
            points, _ = client.scroll(name, scroll_filter=flt, limit=10)
            return sorted(p.id for p in points)

        try:
            s = m.PayloadField(key="f.k_a.s")
            assert ids(m.FieldCondition(key="f.k_a.s", match=m.MatchValue(value="50%_off"))) == [1], where
            assert ids(m.FieldCondition(key="f.k_a.s", match=m.MatchValue(value="50%_off")), clause="must_not") == [2, 3]
            assert ids(m.FieldCondition(key="f.k_a.l", match=m.MatchValue(value="n:2"))) == [1]  # any element
            assert ids(m.FieldCondition(key="f.k_a.b", match=m.MatchValue(value=True))) == [2]
            assert ids(m.FieldCondition(key="f.k_a.n", match=m.MatchAny(any=["1", "2"]))) == [2]
            assert ids(m.FieldCondition(key="f.k_a.r", range=m.Range(gt=2.0, lte=2.5))) == [1]
            assert ids(m.FieldCondition(key="f.k_a.s", match=m.MatchPrefix(prefix="50%_"))) == [1]
            assert ids(m.FieldCondition(key="f.k_a.s", match=m.MatchPrefix(prefix="50%-"))) == []
            assert ids(m.FieldCondition(key="f.k_a.s", match=m.MatchSubstring(substring="%_o"))) == [1]
            assert ids(m.FieldCondition(key="f.k_a.s", match=m.MatchSubstring(substring="O"))) == []  # case-sensitive
            assert ids(m.IsEmptyCondition(is_empty=s), clause="must_not") == [1]  # a missing parent is empty
            assert ids(m.HasIdCondition(has_id=[])) == []
            assert ids(m.HasIdCondition(has_id=[]), clause="must_not") == [1, 2, 3]
        finally:
            client.delete_collection(name)
            client.close()


def test_the_docs_page_example_runs():
    """The Python block of docs/backends/qdrant.md runs as written."""
    page = (pathlib.Path(__file__).parent.parent / "docs" / "backends" / "qdrant.md").read_text(encoding="utf-8")
    blocks = [block.split("```", 1)[0] for block in page.split("```python\n")[1:]]
    assert blocks, "docs/backends/qdrant.md has no python block"
    for block in blocks:
        result = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert any(line.startswith("k-NN  0 ") for line in lines), result.stdout
        assert any(line.startswith("BM25  0 a ") for line in lines), result.stdout
        assert any(line.startswith("RRF   0 ") for line in lines), result.stdout


@pytest.mark.anyio
@pytest.mark.parametrize("fusion", ["rrf", "dbsf"])
async def test_server_hybrid_pages_join_into_the_top(hybrid_store, fusion):
    """Pagination (issue 18.1) on Qdrant's server-side fusion: page 1 + page 2 == top 2 * size."""
    store, embedder = hybrid_store
    retriever = QdrantHybridRetriever(store=store, embedder=embedder, fusion=fusion, candidate_k=20)
    top = await retriever.retrieve("machine learning health", k=6)
    pages = await retriever.retrieve("machine learning health", k=3) + await retriever.retrieve(
        "machine learning health", k=3, offset=3)
    assert [d.id for d in pages] == [d.id for d in top] and [d.rank for d in pages] == list(range(6))
