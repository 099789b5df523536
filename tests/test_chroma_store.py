"""ChromaVectorStore: the shared store contract on embedded Chroma (in memory and on disk) and on a real
``chroma run`` server through the async HTTP client, plus what only this adapter promises: hybrid search
with a separate BM25 store, native filters, metadata replacement on upsert, error mapping, URLs."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import numpy as np
import pytest

from fastrag.errors import (
    BackendError,
    BackendUnavailableError,
    ConfigurationError,
    DimensionMismatchError,
    FilterError,
    InvalidParameterError,
    UnsupportedFilterError,
)
from fastrag.filters import Comparison, Filter, field, parse_filter
from fastrag.models import Document
from fastrag.retrieval import BM25Retriever, HybridRetriever, VectorRetriever
from fastrag.testing.fakes import HashingEmbedder
from fastrag.testing.filter_cases import FILTER_CASES, FILTER_CORPUS
from fastrag.testing.store_contract import KNN_DOCS, KNN_QUERY, KNN_VECTORS, StoreContract, corpus_embeddings
from fastrag.vector_store.chroma import PREFIX_INDEX_LENGTH, ChromaVectorStore, ChromaWhere
from fastrag.vector_store.sqlite import SQLiteVectorStore

chromadb = pytest.importorskip("chromadb", reason="the chroma extra is not installed")

ROOT = Path(__file__).resolve().parents[1]
CHROMA = Path(sys.executable).parent / "chroma"
ENV_URL = "FASTRAG_TEST_CHROMA_URL"

# The filter-table cases Chroma cannot express (docs/backends/chroma.md, "Unsupported filters"): every
# stringContains with a non-empty value. Each must raise UnsupportedFilterError before any query runs.
UNSUPPORTED_CASES = frozenset({
    "contains",
    "contains_case_sensitive",
    "contains_lowercase_only",
    "contains_percent_literal",
    "contains_underscore_literal",
    "contains_percent_underscore",
    "contains_backslash",
    "contains_single_quote",
    "contains_double_quote",
    "contains_injection_stored",
    "contains_injection_absent",
    "contains_percent_absent",
    "contains_cjk",
    "contains_umlaut",
    "contains_only_strings_not_ints",
    "contains_only_strings_not_lists",
    "not_contains_includes_missing",
})


def unique_collection() -> str:
    return f"t-{uuid.uuid4().hex[:16]}"


def _needs_unsupported(node: Filter) -> bool:
    if isinstance(node, Comparison):
        return (node.operator == "stringContains" and node.value != "") or (
            node.operator == "startsWith" and len(node.value) > PREFIX_INDEX_LENGTH
        )
    return any(_needs_unsupported(child) for child in node.filters)


def test_unsupported_cases_are_exactly_the_substring_filters() -> None:
    derived = {case.name for case in FILTER_CASES if _needs_unsupported(parse_filter(case.filter))}
    assert derived == UNSUPPORTED_CASES


# --------------------------------------------------------------------------------- a real server


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def start_chroma_server(folder: Path) -> Iterator[str]:
    """Run ``chroma run`` on a free 127.0.0.1 port until the block ends; yields its ``http://`` URL."""
    if not CHROMA.exists():
        pytest.skip(f"no chroma console script next to {sys.executable} (pip install chromadb)")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = folder / "chroma-server.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [str(CHROMA), "run", "--path", str(folder / "chroma-server"), "--host", "127.0.0.1", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"chroma run exited with {proc.returncode}: {log_path.read_text(errors='replace')}")
                try:
                    if httpx.get(f"{url}/api/v2/heartbeat", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail(f"chroma run did not answer in 60 s: {log_path.read_text(errors='replace')}")
                time.sleep(0.1)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A ``chroma run`` server for the whole session (skipped when the chroma script is absent)."""
    with start_chroma_server(tmp_path_factory.mktemp("chroma-server")) as url:
        yield url


# ------------------------------------------------------------------------------------- contract


class ChromaContract(StoreContract):
    """The contract, with the filter corpus written once per collection instead of once per filter case.

    The filter tests only read, so each opens a fresh store over one long-lived collection holding
    ``FILTER_CORPUS`` (written by the first of them); every other contract test gets an empty collection
    from ``store_factory``. This keeps three full contract runs under a minute on two cores.
    """

    supports_text = False
    unsupported_filter_cases = UNSUPPORTED_CASES

    @pytest.fixture
    def filter_store_factory(self):
        raise NotImplementedError("override filter_store_factory in the subclass")

    @pytest.fixture
    async def filter_store(self, filter_store_factory):
        async with filter_store_factory() as store:
            if await store.count() != len(FILTER_CORPUS):
                await store.upsert(FILTER_CORPUS, embeddings=corpus_embeddings(FILTER_CORPUS))
            assert await store.count() == len(FILTER_CORPUS)
            yield store


@pytest.fixture(scope="session")
def ephemeral_system() -> Iterator[None]:
    """Keeps Chroma's in-process ephemeral system alive between tests (it stops when its last client closes)."""
    client = chromadb.EphemeralClient()
    yield
    client.close()


@pytest.fixture(scope="session")
def persistent_filter_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("chroma-filters")
    client = chromadb.PersistentClient(path=str(folder))  # keeps the folder's system open between tests
    yield folder
    client.close()


class TestChromaEphemeral(ChromaContract):
    persistent = False

    @pytest.fixture
    def store_factory(self):
        return lambda: ChromaVectorStore(collection=unique_collection())

    @pytest.fixture
    def filter_store_factory(self, ephemeral_system):
        return lambda: ChromaVectorStore(collection="contract-filters")


class TestChromaPersistent(ChromaContract):
    @pytest.fixture
    def store_factory(self, tmp_path):
        return lambda: ChromaVectorStore(path=tmp_path / "chroma", collection="contract")

    @pytest.fixture
    def filter_store_factory(self, persistent_filter_folder):
        return lambda: ChromaVectorStore(path=persistent_filter_folder, collection="contract-filters")


class TestChromaServer(ChromaContract):
    @pytest.fixture
    def store_factory(self, chroma_server):
        name = unique_collection()
        return lambda: ChromaVectorStore(url=chroma_server, collection=name, timeout=30)

    @pytest.fixture
    def filter_store_factory(self, chroma_server):
        return lambda: ChromaVectorStore(url=chroma_server, collection="contract-filters", timeout=30)


def _drop_collections(url: str, names: list[str]) -> None:
    parsed = urlparse(url)
    client = chromadb.HttpClient(host=parsed.hostname, port=parsed.port or 8000, ssl=parsed.scheme.endswith("https"))
    for name in names:
        with suppress(Exception):  # best-effort cleanup of a test collection
            client.delete_collection(name)


@pytest.fixture(scope="session")
def environment_server() -> Iterator[tuple[str, str]]:
    """``(url, filter collection)`` of the real server named by FASTRAG_TEST_CHROMA_URL; skips when unset."""
    url = os.environ.get(ENV_URL)
    if not url:
        pytest.skip(f"{ENV_URL} is not set (a chroma://host:port URL of a running Chroma server)")
    name = unique_collection()
    yield url, name
    _drop_collections(url, [name])


@pytest.mark.external_server("FASTRAG_TEST_CHROMA_URL")
class TestChromaFromEnvironment(ChromaContract):
    """The same contract against a real Chroma server (docker-compose), named by FASTRAG_TEST_CHROMA_URL."""

    @pytest.fixture
    def store_factory(self, environment_server):
        url, _ = environment_server
        name = unique_collection()
        yield lambda: ChromaVectorStore.from_url(url, collection=name, timeout=30)
        _drop_collections(url, [name])

    @pytest.fixture
    def filter_store_factory(self, environment_server):
        url, name = environment_server
        return lambda: ChromaVectorStore.from_url(url, collection=name, timeout=30)


# ----------------------------------------------------------------- Chroma semantics we rely on


@pytest.mark.parametrize("mode", ["embedded", "server"])
def test_chroma_semantics_the_translation_relies_on(mode: str, request: pytest.FixtureRequest) -> None:
    """Chroma (>= 0.6) behaviours the translation depends on; an upgrade that changes one fails here."""
    if mode == "embedded":
        client = chromadb.EphemeralClient()
    else:
        url = urlparse(request.getfixturevalue("chroma_server"))
        client = chromadb.HttpClient(host=url.hostname, port=url.port)
    col = client.create_collection(unique_collection(), embedding_function=None)
    col.add(ids=["has", "other", "none"], embeddings=[[1, 0], [0, 1], [1, 1]],
            metadatas=[{"k": 1, "l": ["x"]}, {"k": True, "l": ["y"]}, {"z": "z"}])

    def ids(where: dict) -> list[str]:
        return sorted(col.get(where=where, include=[])["ids"])

    # negative operators select records that lack the field (notEquals / notIn need exactly that)
    assert ids({"k": {"$ne": 1}}) == ["none", "other"]  # and a bool is not the number 1
    assert ids({"k": {"$nin": [1]}}) == ["none", "other"]
    assert ids({"l": {"$not_contains": "x"}}) == ["none", "other"]
    # an int field against a float operand is truncated: why numbers are compared on a float field
    assert ids({"k": {"$eq": 1.5}}) == ["has"]
    # upsert merges metadata: why the store deletes the fields of the replaced version
    col.upsert(ids=["has"], embeddings=[[1, 0]], metadatas=[{"z": "new"}])
    assert col.get(ids=["has"], include=["metadatas"])["metadatas"][0] == {"k": 1, "l": ["x"], "z": "new"}
    if mode == "embedded":
        client.close()


# ---------------------------------------------------------------------------------- hybrid pairing

CORPUS = [
    Document(id="bm25", content="BM25 ranks documents by term frequency and inverse document frequency.",
             metadata={"topic": "lexical", "year": 2009}),
    Document(id="dense", content="Dense retrieval embeds questions and documents as vectors for k-NN search.",
             metadata={"topic": "dense", "year": 2020}),
    Document(id="hybrid", content="Hybrid search fuses BM25 and dense vectors with reciprocal rank fusion.",
             metadata={"topic": "hybrid", "year": 2021}),
    Document(id="cooking", content="Slow-cooked tomato sauce needs time, salt and olive oil.",
             metadata={"topic": "food", "year": 2015}),
]


@pytest.mark.anyio
async def test_chroma_dense_with_sqlite_bm25_in_a_hybrid_retriever() -> None:
    embedder = HashingEmbedder(64)
    vectors = await embedder.embed_documents([d.content for d in CORPUS])
    async with ChromaVectorStore(collection=unique_collection()) as dense, SQLiteVectorStore(":memory:") as lexical:
        await dense.upsert(CORPUS, embeddings=vectors)
        await lexical.upsert(CORPUS)  # the lexical store needs no vectors
        hybrid = HybridRetriever([VectorRetriever(vector_store=dense, embedder=embedder), BM25Retriever(store=lexical)])
        hits = await hybrid.retrieve("how does BM25 rank documents", k=3)
        assert hits[0].id == "bm25"
        assert set(hits[0].branches) == {"vector", "bm25"}
        assert [d.rank for d in hits] == list(range(len(hits)))
        filtered = await hybrid.retrieve("how does BM25 rank documents", k=3, filter=field("year") >= 2020)
        assert {d.id for d in filtered} <= {"dense", "hybrid"} and filtered
        # the filter reached both branches: neither returned a document from before 2020
        assert all(d.metadata["year"] >= 2020 for d in filtered)
        with pytest.raises(UnsupportedFilterError):
            await hybrid.retrieve("bm25", k=3, filter=field("topic").contains("ex"))


def test_docs_example_runs(tmp_path: Path) -> None:
    """The Python block of docs/backends/chroma.md runs as written and prints ranked lines."""
    page = (ROOT / "docs" / "backends" / "chroma.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", page, re.S | re.M)
    assert blocks, "docs/backends/chroma.md has no python block"
    script = tmp_path / "example.py"
    script.write_text(blocks[0], encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTRAG_")}
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines and all(re.match(r"^\d+ -?[\d.]+ \S+", line) for line in lines), lines
    assert (tmp_path / "chroma-data").is_dir()


# ------------------------------------------------------------------------------ adapter behaviour


@pytest.mark.anyio
async def test_upsert_replaces_metadata_fields_chroma_would_merge() -> None:
    async with ChromaVectorStore(collection=unique_collection()) as store:
        first = Document(id="a", content="v1", metadata={"category": "old", "tags": ["x"], "year": 2000})
        await store.upsert([first], embeddings=np.ones((1, 4), dtype=np.float32))
        await store.upsert([Document(id="a", content="v2", metadata={"other": 1})],
                           embeddings=np.ones((1, 4), dtype=np.float32))
        assert await store.count(filter={"equals": {"key": "category", "value": "old"}}) == 0
        assert await store.count(filter={"listContains": {"key": "tags", "value": "x"}}) == 0
        assert await store.count(filter={"lessThan": {"key": "year", "value": 3000}}) == 0
        assert await store.count(filter={"notAll": [{"greaterThan": {"key": "year", "value": 0}}]}) == 1
        (doc,) = await store.get()
        assert (doc.content, dict(doc.metadata)) == ("v2", {"other": 1})


@pytest.mark.anyio
async def test_metadata_round_trips_exactly_and_results_are_copies() -> None:
    metadata = {"int": 3, "float": 3.0, "bool": True, "one": 1, "big": 2**70, "s": "ü\n\"'", "list": [1, "a", None],
                "nested": {"deep": [{"x": 1}]}, "none": None, "#reserved": "r", "fastrag:json": "mine", "": "empty"}
    doc = Document(id="d", content="", metadata=metadata)
    async with ChromaVectorStore(collection=unique_collection()) as store:
        await store.upsert([doc], embeddings=np.array([[1.0, 0.0]], dtype=np.float32))
        (got,) = await store.get(ids=["d"])
        (hit,) = await store.search_vector(np.array([1.0, 0.0]), k=1)
        assert await store.count(filter={"equals": {"key": "#reserved", "value": "r"}}) == 1
        assert await store.count(filter={"equals": {"key": "fastrag:json", "value": "mine"}}) == 1
        assert await store.count(filter={"equals": {"key": "big", "value": 2**70}}) == 1
    assert dict(got.metadata) == metadata and got.content == ""
    assert type(got.metadata["int"]) is int and type(got.metadata["float"]) is float
    assert got.metadata["bool"] is True and got.metadata["one"] == 1 and type(got.metadata["one"]) is int
    assert hit.rank == 0 and round(hit.score, 4) == 1.0 and hit.metadata["big"] == 2**70
    assert dict(doc.metadata) == metadata  # the input is untouched


@pytest.mark.anyio
async def test_ties_are_broken_by_id_even_past_k() -> None:
    docs = [Document(id=f"d{i:02d}", content="same") for i in range(30)]
    vectors = np.tile(np.array([[1.0, 0.0, 0.0]], dtype=np.float32), (30, 1))
    async with ChromaVectorStore(collection=unique_collection()) as store:
        await store.upsert(docs[::-1], embeddings=vectors)
        hits = await store.search_vector(np.array([1.0, 0.0, 0.0]), k=5)
    assert [d.id for d in hits] == ["d00", "d01", "d02", "d03", "d04"]


@pytest.mark.anyio
async def test_get_in_id_order_with_limit_and_filter() -> None:
    docs = [Document(id=f"g{i}", content=str(i), metadata={"even": i % 2 == 0}) for i in range(9, -1, -1)]
    async with ChromaVectorStore(collection=unique_collection()) as store:
        await store.upsert(docs, embeddings=np.eye(10, dtype=np.float32))
        assert [d.id for d in await store.get(limit=3)] == ["g0", "g1", "g2"]
        evens = await store.get(filter={"equals": {"key": "even", "value": True}}, limit=2)
        assert [d.id for d in evens] == ["g0", "g2"]
        assert [d.id for d in await store.get(ids=["g5", "g1", "nope"])] == ["g1", "g5"]
        assert await store.get(ids=[]) == []
        assert await store.delete(ids=[]) == 0
        assert await store.delete(ids=["g1", "g2"], filter={"equals": {"key": "even", "value": True}}) == 1
        assert await store.count() == 9
        with pytest.raises(InvalidParameterError):
            await store.get(ids="g1")
        with pytest.raises(InvalidParameterError):
            await store.get(limit=0)


@pytest.mark.anyio
async def test_native_where_passes_through() -> None:
    async with ChromaVectorStore(collection=unique_collection()) as store:
        await store.upsert(KNN_DOCS, embeddings=KNN_VECTORS)
        native = ChromaWhere(where={"group": {"$eq": "b"}})
        assert [d.id for d in await store.search_vector(KNN_QUERY, k=5, filter=native)] == ["mid", "orth"]
        assert await store.count(filter=ChromaWhere(where_document={"$contains": "orth"})) == 1
        assert await store.count(filter=ChromaWhere(where={"fastrag:prefix:group": {"$contains": "a"}})) == 3
        assert [d.id for d in await store.get(filter=native)] == ["mid", "orth"]
        with pytest.raises(FilterError):
            await store.count(filter=ChromaWhere(where={"group": {"$regex": "b"}}))
        assert await store.delete(filter=native) == 2
        assert await store.count() == 3


@pytest.mark.anyio
async def test_missing_embeddings_and_bad_vectors_are_rejected_before_writing() -> None:
    async with ChromaVectorStore(collection=unique_collection()) as store:
        with pytest.raises(InvalidParameterError, match="embeddings"):
            await store.upsert([Document(id="a", content="x")])
        with pytest.raises(InvalidParameterError):
            await store.upsert([Document(id="a", content="x")], embeddings=np.array([[np.nan, 1.0]]))
        with pytest.raises(InvalidParameterError):
            await store.upsert([Document(id="a", content="x"), Document(id="a", content="y")],
                               embeddings=np.ones((2, 2)))
        with pytest.raises(InvalidParameterError):
            await store.upsert([Document(id="a", content="x", metadata={"x": object()})], embeddings=np.ones((1, 2)))
        with pytest.raises(DimensionMismatchError):
            await store.upsert([Document(id="a", content="x")], embeddings=np.ones((2, 2)))
        assert await store.count() == 0
        assert await store.search_vector(np.ones(2), k=3) == []  # no collection yet: empty, not an error
        with pytest.raises(InvalidParameterError):
            await store.search_vector(np.array([np.inf, 1.0]), k=1)


@pytest.mark.anyio
async def test_persistent_collection_remembers_its_dimension(tmp_path: Path) -> None:
    async with ChromaVectorStore(path=tmp_path, collection="dims") as store:
        await store.upsert(KNN_DOCS, embeddings=KNN_VECTORS)
    async with ChromaVectorStore(path=tmp_path, collection="dims") as store:
        assert store.dimension == 4
        with pytest.raises(DimensionMismatchError):
            await store.search_vector(np.ones(3), k=1)
    with pytest.raises(ConfigurationError, match="dimension"):
        async with ChromaVectorStore(path=tmp_path, collection="dims", dimension=8):
            pass
    async with ChromaVectorStore(path=tmp_path, collection="eager", dimension=16) as store:
        assert store.dimension == 16
    async with ChromaVectorStore(path=tmp_path, collection="eager", create=False) as store:
        assert store.dimension == 16 and await store.count() == 0
    # a collection that does not exist is never read as "empty": opening it for reading fails
    with pytest.raises(BackendUnavailableError, match="does not exist"):
        async with ChromaVectorStore(path=tmp_path, collection="absent", create=False):
            pass


@pytest.mark.anyio
async def test_foreign_or_non_cosine_collections_are_refused() -> None:
    client = chromadb.EphemeralClient()
    client.create_collection("foreign-one", embedding_function=None)
    client.create_collection("l2-space", embedding_function=None, configuration={"hnsw": {"space": "l2"}},
                             metadata={"fastrag:format": 1, "fastrag:dimension": 4, "fastrag:prefix_length": 64})
    with pytest.raises(ConfigurationError, match="not created by fastrag"):
        async with ChromaVectorStore(client=client, collection="foreign-one"):
            pass
    with pytest.raises(ConfigurationError, match="cosine"):
        async with ChromaVectorStore(client=client, collection="l2-space"):
            pass


@pytest.mark.anyio
async def test_injected_client_is_never_closed_and_close_is_idempotent(tmp_path: Path) -> None:
    client = chromadb.PersistentClient(path=str(tmp_path))
    store = ChromaVectorStore(client=client, collection="injected")
    async with store:
        await store.upsert(KNN_DOCS, embeddings=KNN_VECTORS)
    await store.aclose()
    with pytest.raises(BackendUnavailableError, match="closed"):
        await store.count()
    assert client.get_collection("injected", embedding_function=None).count() == 5  # still usable
    client.close()


@pytest.mark.anyio
async def test_injected_async_http_client(chroma_server: str) -> None:
    url = urlparse(chroma_server)
    client = await chromadb.AsyncHttpClient(host=url.hostname, port=url.port)
    name = unique_collection()
    async with ChromaVectorStore(client=client, collection=name) as store:
        await store.upsert(KNN_DOCS, embeddings=KNN_VECTORS)
        assert [d.id for d in await store.search_vector(KNN_QUERY, k=2)] == ["near", "mid"]
    assert await (await client.get_collection(name, embedding_function=None)).count() == 5


@pytest.mark.anyio
async def test_unreachable_server_is_unavailable_and_named_quickly() -> None:
    port = free_port()
    started = time.monotonic()
    store = ChromaVectorStore(url=f"http://127.0.0.1:{port}", collection="nowhere", timeout=2)
    with pytest.raises(BackendUnavailableError, match=rf"127\.0\.0\.1:{port}/nowhere") as info:
        await store.count()
    assert isinstance(info.value.__cause__, Exception)
    assert time.monotonic() - started < 5
    await store.aclose()


@pytest.mark.anyio
async def test_silent_server_times_out_as_unavailable() -> None:
    with socket.socket() as listener:  # accepts connections (the kernel's backlog) but never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        started = time.monotonic()
        store = ChromaVectorStore(url=f"http://127.0.0.1:{port}", collection="silent", timeout=0.5)
        with pytest.raises(BackendUnavailableError, match="silent"):
            await store.count()
        assert time.monotonic() - started < 5
        await store.aclose()


class _FaultyProxy:
    """A reverse proxy in front of a real Chroma server that answers every request itself while ``answer``
    is set (a status and a JSON body: an auth gateway, a load balancer with no backend, a broken cache)."""

    def __init__(self, upstream: str) -> None:
        import http.server
        import threading

        self.answer: tuple[int, Any] | None = None
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _relay(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                if proxy.answer is not None:
                    status, payload = proxy.answer
                    data = json.dumps(payload).encode()
                    self.send_response(status)
                else:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                    reply = httpx.request(self.command, upstream + self.path, content=body, headers=headers, timeout=30)
                    data = reply.content
                    self.send_response(reply.status_code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _relay

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.anyio
async def test_http_failures_behind_a_proxy_map_to_typed_errors_naming_the_store(chroma_server: str) -> None:
    # issue 13.8: 401/403 are AuthenticationError, 502-504 are retried like every adapter's, and a 200 with a
    # body of the wrong shape is a typed error naming the store, never a TypeError
    from fastrag.errors import AuthenticationError, BackendTemporarilyUnavailableError
    from fastrag.retry import RetryingStore, RetryPolicy

    proxy = _FaultyProxy(chroma_server)
    try:
        async with ChromaVectorStore(url=proxy.url, collection=unique_collection(), timeout=10) as store:
            await store.upsert(KNN_DOCS, embeddings=KNN_VECTORS)
            for status in (401, 403):
                proxy.answer = (status, {"detail": "invalid token"})
                with pytest.raises(AuthenticationError, match=str(status)) as auth:
                    await store.count()
                assert auth.value.store == store.location
            for status in (502, 503, 504):
                proxy.answer = (status, {"detail": "no upstream"})
                with pytest.raises(BackendTemporarilyUnavailableError, match=str(status)):
                    await store.search_vector(KNN_QUERY, k=2)
            proxy.answer = (200, {})
            for call in (store.count, lambda: store.count(filter={"equals": {"key": "x", "value": 1}}), store.get,
                         lambda: store.search_vector(KNN_QUERY, k=2)):
                with pytest.raises(BackendError, match="malformed|Chroma failed") as bad:
                    await call()
                assert bad.value.store == store.location and not isinstance(bad.value, BackendUnavailableError)
            # a 502 that clears is retried through the retry wrapper, as docs/reliability.md says
            proxy.answer = (502, {"detail": "no upstream"})
            sleeps: list[float] = []

            async def sleep(seconds: float) -> None:
                sleeps.append(seconds)
                proxy.answer = None  # the gateway recovers

            retrying = RetryingStore(store, policy=RetryPolicy(max_attempts=3, sleep=sleep))
            assert await retrying.count() == len(KNN_DOCS) and len(sleeps) == 1
    finally:
        proxy.close()


class _FailingCollection:
    """Stands in for a Chroma collection whose every call fails inside Chroma."""

    def __init__(self, real, error):
        self._real, self._error = real, error

    def __getattr__(self, name):
        attr = getattr(self._real, name)
        if name in {"query", "get", "count", "upsert", "delete"}:
            def fail(*args, **kwargs):
                raise self._error
            return fail
        return attr


@pytest.mark.anyio
async def test_chroma_errors_become_backend_errors_naming_the_store() -> None:
    name = unique_collection()
    async with ChromaVectorStore(collection=name) as store:
        await store.upsert(KNN_DOCS, embeddings=KNN_VECTORS)
        cause = chromadb.errors.InternalError("boom")
        store._collection = _FailingCollection(store._collection, cause)
        for call in (store.count(), store.search_vector(KNN_QUERY, k=1), store.get(),
                     store.upsert(KNN_DOCS[:1], embeddings=KNN_VECTORS[:1])):
            with pytest.raises(BackendError, match=rf"chroma\+memory:///{name}.*boom") as info:
                await call
            assert not isinstance(info.value, BackendUnavailableError)
            assert info.value.__cause__ is cause


@pytest.mark.anyio
async def test_server_going_away_is_unavailable(tmp_path: Path) -> None:
    """A server that stops while a store is open: the next call raises BackendUnavailableError, not a hang."""
    with start_chroma_server(tmp_path) as url:
        store = ChromaVectorStore(url=url, collection="going-away", timeout=5)
        await store.__aenter__()
        await store.upsert(KNN_DOCS, embeddings=KNN_VECTORS)
    started = time.monotonic()
    with pytest.raises(BackendUnavailableError, match="going-away"):
        await store.search_vector(KNN_QUERY, k=1)
    assert time.monotonic() - started < 5
    await store.aclose()


# ------------------------------------------------------------------------------------ construction


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("chroma://db.example:9000/docs", ("http://db.example:9000", None, "docs")),
        ("chroma://db.example/docs", ("http://db.example:8000", None, "docs")),
        ("chroma+https://db.example/docs", ("https://db.example:443", None, "docs")),
        ("chroma://[::1]:8000/", ("http://[::1]:8000", None, "fastrag")),
        ("chroma+path:////var/lib/chroma?collection=notes", (None, "/var/lib/chroma", "notes")),
        ("chroma+path:///var/lib/chroma?collection=notes", (None, "var/lib/chroma", "notes")),
        ("chroma+path:data/chroma", (None, "data/chroma", "fastrag")),
        ("chroma+path:////a%20b", (None, "/a b", "fastrag")),
        ("chroma+memory:///scratch", (None, None, "scratch")),
        ("chroma+memory://", (None, None, "fastrag")),
    ],
)
def test_from_url(url: str, expected: tuple) -> None:
    store = ChromaVectorStore.from_url(url)
    server, path, collection = expected
    assert store.collection == collection
    assert store.path == path
    if server is None:
        assert store._server is None
    else:
        parsed = urlparse(server)
        assert store._server == (parsed.hostname, parsed.port, parsed.scheme == "https")
        assert store.location.endswith(f":{parsed.port}/{collection}")


def test_from_url_keywords_override_and_errors() -> None:
    store = ChromaVectorStore.from_url("chroma://h:1/a-collection", collection="other", dimension=8, timeout=3)
    assert (store.collection, store.dimension, store.timeout) == ("other", 8, 3.0)
    for bad in ("chroma+path://host/dir", "chroma://h/c?x=1", "chroma+memory://host/c", "chroma:///nohost",
                "chroma+path:", "milvus://h/c", "chroma://h:notaport/c", "chroma+path:/d?other=1",
                "chroma://h/c#frag"):
        with pytest.raises(ConfigurationError):
            ChromaVectorStore.from_url(bad)
    with pytest.raises(ConfigurationError, match="collection name"):
        ChromaVectorStore.from_url("chroma+memory:///ab")


def test_constructor_validation() -> None:
    with pytest.raises(ConfigurationError, match="at most one"):
        ChromaVectorStore(url="http://h:1", path="/tmp/x")
    with pytest.raises(ConfigurationError):
        ChromaVectorStore(url="ftp://h/")
    with pytest.raises(ConfigurationError):
        ChromaVectorStore(url="http://h:1/some/path")
    for bad in ("ab", "-abc", "abc-", "a b c", "x" * 513):
        with pytest.raises(ConfigurationError):
            ChromaVectorStore(collection=bad)
    for dimension in (0, -1, True, 2.5):
        with pytest.raises(InvalidParameterError):
            ChromaVectorStore(dimension=dimension)
    for timeout in (0, -1, float("inf"), True):
        with pytest.raises(InvalidParameterError):
            ChromaVectorStore(timeout=timeout)
    assert repr(ChromaVectorStore(collection="abc")) == "ChromaVectorStore('chroma+memory:///abc')"


def test_importing_fastrag_does_not_import_chromadb() -> None:
    code = "import sys, fastrag, fastrag.vector_store.chroma; assert 'chromadb' not in sys.modules, 'imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_missing_chromadb_is_a_configuration_error_with_the_install_command() -> None:
    code = (
        "import sys; sys.modules['chromadb'] = None\n"
        "from fastrag.errors import ConfigurationError\n"
        "from fastrag.vector_store.chroma import ChromaVectorStore\n"
        "try:\n    ChromaVectorStore()\nexcept ConfigurationError as exc:\n    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60)
    assert 'pip install "fastrag-retrieval[chroma]"' in out.stdout


@pytest.mark.anyio
async def test_concurrent_reads_and_writes_on_one_embedded_store() -> None:
    import anyio

    async with ChromaVectorStore(collection=unique_collection()) as store:
        await store.upsert(KNN_DOCS, embeddings=KNN_VECTORS)
        results: list[list[str]] = []

        async def search() -> None:
            results.append([d.id for d in await store.search_vector(KNN_QUERY, k=2)])

        async def write(i: int) -> None:
            doc = Document(id=f"w{i}", content="w", metadata={"i": i})
            await store.upsert([doc], embeddings=np.array([[0, 0, 0, 1]], dtype=np.float32))

        async with anyio.create_task_group() as group:
            for i in range(10):
                group.start_soon(search)
                group.start_soon(write, i)
        assert results == [["near", "mid"]] * 10
        assert await store.count() == 15


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["path", "server"])
async def test_embedding_model_is_recorded_and_enforced(mode: str, tmp_path: Path, request) -> None:
    if mode == "path":
        def open_store(**kwargs):
            return ChromaVectorStore(path=tmp_path, collection="models", **kwargs)
    else:
        url, name = request.getfixturevalue("chroma_server"), unique_collection()

        def open_store(**kwargs):
            return ChromaVectorStore.from_url(f"chroma://{urlparse(url).netloc}/{name}", **kwargs)
    async with open_store(embedding_model="model-a", dimension=None) as store:
        await store.upsert(KNN_DOCS, embeddings=KNN_VECTORS)
    async with open_store() as store:
        assert store.embedding_model == "model-a"
    with pytest.raises(ConfigurationError, match="model-a"):
        async with open_store(embedding_model="model-b"):
            pass
    async with open_store(embedding_model="model-a") as store:
        assert await store.count() == 5
    # a collection built without a model name records the first one it is opened with
    other = ChromaVectorStore(path=tmp_path / "other", collection="unnamed", dimension=4)
    async with other:
        pass
    async with ChromaVectorStore(path=tmp_path / "other", collection="unnamed", embedding_model="m") as store:
        assert store.embedding_model == "m"
    async with ChromaVectorStore(path=tmp_path / "other", collection="unnamed") as store:
        assert store.embedding_model == "m"
