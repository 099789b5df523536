"""MilvusVectorStore: the shared store contract on real Milvus 2.5, plus Milvus specifics.

Milvus 2.5 here is milvus-lite 2.5.1's native build (the official Milvus engine, from PyPI). The contract runs
against it twice: served over TCP by a session fixture (``milvus_server`` in conftest.py), and in this process
through a ``.db`` file (pymilvus starts the same binary on a Unix socket). A third class runs it against the
server named by ``FASTRAG_TEST_MILVUS_URL`` (e.g. Milvus standalone from docker-compose); it is collected only
with ``--external-servers`` (see tests/conftest.py). All three use ``enable_bm25=True``; a vector-only store
is covered separately.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import numpy as np
import pytest

pytest.importorskip("pymilvus", reason="the milvus extra is not installed")
pytest.importorskip("milvus_lite", reason="milvus-lite (the local Milvus) is not installed")

from pymilvus import AsyncMilvusClient, MilvusClient  # noqa: E402

from fastrag.errors import (  # noqa: E402
    BackendError,
    BackendUnavailableError,
    ConfigurationError,
    DimensionMismatchError,
    FilterError,
    InvalidParameterError,
    UnsupportedFilterError,
)
from fastrag.models import Document  # noqa: E402
from fastrag.testing.filter_cases import FILTER_CORPUS  # noqa: E402
from fastrag.testing.store_contract import (  # noqa: E402
    KNN_DOCS,
    KNN_QUERY,
    KNN_VECTORS,
    StoreContract,
    corpus_embeddings,
)
from fastrag.vector_store.milvus import MilvusExpr, MilvusHybridRetriever, MilvusVectorStore  # noqa: E402

_names = itertools.count()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def lite_server(milvus_server) -> str:
    """The session's Milvus 2.5 server (conftest.py); its URL."""
    return milvus_server


@pytest.fixture(scope="module")
def lite_db(tmp_path_factory) -> Iterator[tuple[str, MilvusClient]]:
    """A milvus-lite data file for this module, and a client that keeps its local Milvus running.

    Stores that close do not stop a server they did not start, so tests do not pay for a restart each.
    """
    path = str(tmp_path_factory.mktemp("milvus-lite") / "contract.db")
    keeper = MilvusClient(uri=path)
    yield path, keeper
    keeper.close()
    from milvus_lite.server_manager import server_manager_instance

    server_manager_instance.release_server(path)


@pytest.fixture
def collection_name(request) -> str:
    return f"t{next(_names)}_{os.getpid()}"


def _dropper(client: MilvusClient, name: str) -> None:
    if client.has_collection(name):
        client.drop_collection(name)


# ---------------------------------------------------------------------------------------- contract


class _SharedFilterCorpus(StoreContract):
    """The filter table and the congruence test only read, so the filter corpus is written once per class
    (into its own collection, by the first test that needs it) and each test opens a new store on it; every
    other contract test gets a fresh collection from ``store_factory``. Saves ~300 collection builds."""

    _filled = False
    unsupported_filter_cases = frozenset({"not_contains_includes_missing"})
    """Milvus 2.5 has no ``not`` and no negated ``like`` on JSON: a negated (non-empty) stringContains is refused."""

    @pytest.fixture
    def shared_factory(self):  # overridden per class: a factory for the class's shared collection
        raise NotImplementedError

    @pytest.fixture
    async def filter_store(self, shared_factory):
        # the same documents and vectors as StoreContract.filter_store
        docs = [Document(id=d.id, content=f"{d.content} document", metadata=d.metadata) for d in FILTER_CORPUS]
        async with shared_factory() as store:
            if not type(self)._filled:
                await store.upsert(docs, embeddings=corpus_embeddings(docs))
                type(self)._filled = True
            yield store


class TestMilvus25LocalFile(_SharedFilterCorpus):
    """Real Milvus 2.5 on a ``.db`` file (milvus-lite 2.5.1's binary, started by pymilvus on a Unix socket),
    BM25 on. Reopen reconnects to the same data (the keeper client keeps the server up)."""

    @pytest.fixture
    def store_factory(self, lite_db, collection_name):
        path, keeper = lite_db
        yield lambda: MilvusVectorStore(path, collection_name, enable_bm25=True)
        _dropper(keeper, collection_name)

    @pytest.fixture
    def shared_factory(self, lite_db):
        return lambda: MilvusVectorStore(lite_db[0], "filter_corpus", enable_bm25=True)


class TestMilvus25Server(_SharedFilterCorpus):
    """Real Milvus 2.5 as a server process (milvus-lite 2.5.1's binary on a TCP port), reached over gRPC, BM25 on."""

    @pytest.fixture
    def store_factory(self, lite_server, collection_name):
        yield lambda: MilvusVectorStore(lite_server, collection_name, enable_bm25=True)
        client = MilvusClient(uri=lite_server)
        _dropper(client, collection_name)
        client.close()

    @pytest.fixture
    def shared_factory(self, lite_server):
        return lambda: MilvusVectorStore(lite_server, "filter_corpus", enable_bm25=True)


_ENV_URL = os.environ.get("FASTRAG_TEST_MILVUS_URL")


@pytest.mark.external_server("FASTRAG_TEST_MILVUS_URL")
@pytest.mark.skipif(not _ENV_URL, reason="FASTRAG_TEST_MILVUS_URL is not set (a real Milvus, e.g. http://localhost:19530)")
class TestMilvusServerFromEnvironment(_SharedFilterCorpus):
    """A real Milvus (standalone from docker-compose) named by ``FASTRAG_TEST_MILVUS_URL``."""

    @pytest.fixture
    def store_factory(self, collection_name):
        yield lambda: MilvusVectorStore(_ENV_URL, collection_name, enable_bm25=True, timeout=30)
        client = MilvusClient(uri=_ENV_URL)
        _dropper(client, collection_name)
        client.close()

    @pytest.fixture
    def shared_factory(self, env_filter_collection):
        return lambda: MilvusVectorStore(_ENV_URL, env_filter_collection, enable_bm25=True, timeout=30)


@pytest.fixture(scope="module")
def env_filter_collection() -> Iterator[str]:
    """The shared filter-corpus collection on the ``FASTRAG_TEST_MILVUS_URL`` server, dropped afterwards."""
    name = f"fastrag_filter_corpus_{os.getpid()}"
    yield name
    client = MilvusClient(uri=_ENV_URL)
    _dropper(client, name)
    client.close()


# ------------------------------------------------------------------------------- Milvus specifics


@pytest.fixture
def lite_store(lite_db, collection_name):
    path, keeper = lite_db

    names = []

    def make(suffix: str = "", **kwargs) -> MilvusVectorStore:
        kwargs.setdefault("enable_bm25", True)
        names.append(collection_name + suffix)
        return MilvusVectorStore(path, collection_name + suffix, **kwargs)

    yield make
    for name in set(names):
        _dropper(keeper, name)


@pytest.mark.anyio
async def test_metadata_round_trips_exactly(lite_store):
    metadata = {
        "int": 7, "float": 3.0, "neg": -0.5, "bool": True, "false": False, "none": None, "big": 2**63 - 1,
        "small": -(2**63),
        "text": 'é "quoted" \\ \n\t 東京 🙂', "list": [1, "a", True, 2.5, None], "nested": {"a": {"b": [1, {"c": "d"}]}},
        "": "empty key", "weird key ']\"": "v",
    }
    async with lite_store() as store:
        await store.upsert([Document(id="m", content="x", metadata=metadata)], embeddings=np.ones((1, 4), np.float32))
        (got,) = await store.get(ids=["m"])
        (hit,) = await store.search_vector(np.ones(4, np.float32), k=1)
    assert dict(got.metadata) == metadata
    assert type(got.metadata["int"]) is int and type(got.metadata["float"]) is float
    assert got.metadata["bool"] is True and got.metadata["list"][2] is True
    assert {k: v for k, v in hit.metadata.items() if k not in ("score", "rank")} == metadata


@pytest.mark.anyio
async def test_documents_without_vectors_are_found_by_bm25_only(lite_store):
    async with lite_store(dimension=4) as store:
        await store.upsert([Document(id="a", content="solar power")])
        await store.upsert([Document(id="b", content="wind power")], embeddings=np.ones((1, 4), np.float32))
        assert [d.id for d in await store.search_text("power", k=5)] == ["a", "b"]
        assert [d.id for d in await store.search_vector(np.ones(4, np.float32), k=5)] == ["b"]
        assert await store.count() == 2


@pytest.mark.anyio
async def test_first_write_without_vectors_needs_a_dimension_or_bm25(lite_store):
    async with lite_store(enable_bm25=False) as store:
        with pytest.raises(InvalidParameterError, match="dimension"):
            await store.upsert([Document(id="a", content="text")])
        assert await store.count() == 0
        assert await store.search_vector(np.ones(2, np.float32), k=1) == []


@pytest.mark.anyio
async def test_bm25_only_collection(lite_store):
    """A first write without embeddings and without dimension= makes a BM25-only collection (keyword eval)."""
    async with lite_store("_lex") as store:
        await store.upsert([Document(id="a", content="solar text"), Document(id="b", content="wind")])
        assert store.dimension is None
        assert [d.id for d in await store.search_text("solar", k=3)] == ["a"]
        assert await store.search_vector(np.ones(2, np.float32), k=3) == []
        with pytest.raises(ConfigurationError, match="no dense vectors"):
            await store.upsert([Document(id="c", content="x")], embeddings=np.ones((1, 2), np.float32))
        with pytest.raises(ConfigurationError, match="no dense vectors"):
            await store.search_hybrid("solar", np.ones(2, np.float32), k=3)
    async with lite_store("_lex") as store:
        assert (store.dimension, await store.count()) == (None, 2)
    with pytest.raises(ConfigurationError, match="BM25 only"):
        async with lite_store("_lex", dimension=4):
            pass


@pytest.mark.anyio
async def test_writes_are_searchable_at_once_without_a_flush(lite_store):
    """Milvus 2.5 searches its growing segments itself: the store never flushes on its own there (it does only
    for milvus-lite 3.x's Python scan), and a bulk load is found at once (Strong consistency)."""
    docs = [Document(id=f"b{i:03}", content=f"bulk row {i}") for i in range(300)]
    async with lite_store() as store:
        assert not store._lite_server
        flushes: list[str] = []
        flush = store._client.flush

        def counting(*args, **kwargs):
            flushes.append(args[0])
            return flush(*args, **kwargs)

        store._client.flush = counting
        await store.upsert(docs)
        assert [d.id for d in await store.search_text("299", k=3)] == ["b299"]
        assert await store.count() == 300 and flushes == []
        await store.flush()
        assert flushes == [store.collection] and await store.count() == 300


@pytest.mark.anyio
async def test_tenant_views_are_confined_on_real_milvus(lite_server, collection_name):
    """TenantScopedStore over real Milvus 2.5: each view sees, finds and deletes only its tenant's documents,
    by every read path, though both wrote the id "x" and bob's "x" scores higher for the query."""
    from fastrag.vector_store.tenant import TenantScopedStore

    async with MilvusVectorStore(lite_server, collection_name, enable_bm25=True) as shared:
        try:
            alice, bob = TenantScopedStore(shared, tenant="alice"), TenantScopedStore(shared, tenant="bob")
            await alice.upsert([Document(id="x", content="solar panel report"), Document(id="y", content="wind")],
                               embeddings=np.array([[1, 0], [0, 1]], np.float32))
            await bob.upsert([Document(id="x", content="solar solar panel panel")],
                             embeddings=np.array([[1, 0.01]], np.float32))
            assert (await alice.count(), await bob.count(), await shared.count()) == (2, 1, 3)
            assert [d.content for d in await alice.search_text("solar panel", k=5)] == ["solar panel report"]
            assert [d.id for d in await alice.search_vector(np.array([1, 0], np.float32), k=5)] == ["x", "y"]
            assert [d.id for d in await bob.search_vector(np.array([1, 0], np.float32), k=5)] == ["x"]
            assert [d.content for d in await bob.get(ids=["x", "y"])] == ["solar solar panel panel"]
            assert await bob.delete(ids=["x", "y"]) == 1  # bob has no "y": alice's stays
            assert (await alice.count(), await bob.count()) == (2, 0)
        finally:
            await shared._call("drop_collection", collection_name)


@pytest.mark.anyio
async def test_reads_and_deletes_past_milvus_query_window(lite_server, collection_name):
    """Milvus answers one query with at most 16,384 rows and says nothing when a query without a limit stops
    there: get(), delete(filter=) and clear() must still see every document (16,500 here)."""
    n = 16_500
    docs = [Document(id=f"d{i:05}", content="x", metadata={"odd": i % 2 == 1}) for i in range(n)]
    async with MilvusVectorStore(lite_server, collection_name, dimension=2) as store:
        try:
            for start in range(0, n, 5_500):
                batch = docs[start : start + 5_500]
                await store.upsert(batch, embeddings=np.ones((len(batch), 2), np.float32))
            got = await store.get()
            assert len(got) == n and [d.id for d in got[:2]] == ["d00000", "d00001"] and got[-1].id == "d16499"
            assert len(await store.get(filter={"notEquals": {"key": "odd", "value": "x"}})) == n
            assert await store.delete(filter={"equals": {"key": "odd", "value": True}}) == n // 2
            assert await store.count() == n // 2
            assert await store.clear() == n // 2
            assert await store.count() == 0
        finally:
            await store._call("drop_collection", collection_name)


@pytest.mark.anyio
async def test_title_is_indexed_for_bm25(lite_store):
    async with lite_store() as store:
        await store.upsert([Document(id="t", content="body only", metadata={"title": "Photosynthesis"})],
                           embeddings=np.ones((1, 2), np.float32))
        (hit,) = await store.search_text("photosynthesis", k=1)
    assert hit.id == "t" and hit.content == "body only" and hit.score > 0


@pytest.mark.anyio
async def test_get_delete_and_ties(lite_store):
    docs = [Document(id=i, content="same text", metadata={"n": n}) for n, i in enumerate(["c", "a", "d", "b"])]
    async with lite_store() as store:
        await store.upsert(docs, embeddings=np.ones((4, 3), np.float32))
        assert [d.id for d in await store.get()] == ["a", "b", "c", "d"]
        assert [d.id for d in await store.get(limit=2)] == ["a", "b"]
        assert [d.id for d in await store.get(ids=["d", "a", "zz"])] == ["a", "d"]
        # equal scores come back in id order, from both searches
        assert [d.id for d in await store.search_vector(np.ones(3, np.float32), k=3)] == ["a", "b", "c"]
        assert [d.id for d in await store.search_text("same", k=4)] == ["a", "b", "c", "d"]
        # ids AND filter: only "c" (n=0) is both listed and matching
        assert await store.delete(ids=["c", "a"], filter={"lessThan": {"key": "n", "value": 1}}) == 1
        assert await store.delete(ids=["c"]) == 0
        assert await store.delete(ids=[]) == 0
        assert await store.clear() == 3
        assert await store.count() == 0
        with pytest.raises(InvalidParameterError):
            await store.get(ids="abc")
        with pytest.raises(InvalidParameterError):
            await store.get(limit=0)


@pytest.mark.anyio
async def test_ties_at_the_cut_are_ordered_by_id_however_many_there_are(lite_store):
    # 40 documents tie at the top (same vector, same text; two others score lower): more than any fixed slack
    # past k, so the store must widen its search until the tie ends to return the lowest ids
    ids = [f"t{n:02d}" for n in range(40)]
    tied = [Document(id=i, content="same words here") for i in reversed(ids)]
    best = [Document(id="zz-best", content="same words here same words here"),
            Document(id="zz-second", content="same words")]
    vectors = np.vstack([np.ones((40, 2), np.float32), [[1.0, 0.0]], [[1.0, 0.2]]]).astype(np.float32)
    async with lite_store() as store:
        await store.upsert(tied + best, embeddings=vectors)
        await store.flush()
        calls: list[int] = []
        search = store._client.search

        def counting(*args, **kwargs):  # returns search's result, or its awaitable for an async client
            calls.append(kwargs["limit"])
            return search(*args, **kwargs)

        store._client.search = counting
        got = await store.search_vector(np.ones(2, np.float32), k=5)
        assert [d.id for d in got] == ids[:5]
        assert len(calls) > 1 and calls[0] == 6  # k + 1 first, then wider while the tie ran past the cut
        calls.clear()
        top = await store.search_vector(np.array([1.0, 0.0], np.float32), k=1)
        assert [d.id for d in top] == ["zz-best"] and calls == [2]  # no tie at the cut: one search of k + 1


@pytest.mark.anyio
async def test_native_milvus_filter_passes_through(lite_store):
    docs = [Document(id="x", content="a", metadata={"lang": "en", "n": 1}),
            Document(id="y", content="b", metadata={"lang": "de", "n": True})]
    async with lite_store() as store:
        await store.upsert(docs, embeddings=np.ones((2, 2), np.float32))
        native = MilvusExpr('metadata["lang"] == "de"')
        assert [d.id for d in await store.search_vector(np.ones(2, np.float32), k=5, filter=native)] == ["y"]
        assert await store.count(filter=MilvusExpr('id in ["x", "y"]')) == 2
        # Milvus's own semantics: JSON true == 1 in milvus-lite, which fastrag filters never allow
        assert await store.count(filter={"equals": {"key": "n", "value": 1}}) == 1
        with pytest.raises(FilterError):  # a plain string is fastrag JSON, never an expression
            await store.count(filter='metadata["lang"] == "de"')
        with pytest.raises(UnsupportedFilterError):  # another backend's native filter is refused by type
            await store.count(filter=object())
        with pytest.raises(BackendError) as info:
            await store.count(filter=MilvusExpr("metadata[ == broken"))
        assert not isinstance(info.value, BackendUnavailableError)
        assert info.value.__cause__ is not None and "collection" in str(info.value)


@pytest.mark.anyio
async def test_native_expression_passes_through_the_retrievers(lite_store):
    from fastrag.retrieval import BM25Retriever, HybridRetriever, VectorRetriever
    from fastrag.testing.fakes import HashingEmbedder

    embedder = HashingEmbedder(8)
    docs = [Document(id="x", content="solar power", metadata={"lang": "en"}),
            Document(id="y", content="solar energy", metadata={"lang": "de"})]
    async with lite_store() as store:
        await store.upsert(docs, embeddings=await embedder.embed_documents([d.content for d in docs]))
        native = MilvusExpr('metadata["lang"] == "de"')
        assert [d.id for d in await BM25Retriever(store=store, filter=native).retrieve("solar", k=5)] == ["y"]
        hybrid = HybridRetriever([VectorRetriever(vector_store=store, embedder=embedder), BM25Retriever(store=store)])
        assert [d.id for d in await hybrid.retrieve("solar", k=5, filter=native)] == ["y"]


@pytest.mark.anyio
async def test_validation_happens_before_any_call(lite_store):
    store = lite_store()
    try:
        with pytest.raises(InvalidParameterError):
            await store.search_vector(np.array([np.nan, 1.0], np.float32), k=1)
        with pytest.raises(InvalidParameterError):
            await store.search_vector(np.ones(2, np.float32), k=16385)
        with pytest.raises(UnsupportedFilterError):
            await store.count(filter={"equals": {"key": "n", "value": 2**60}})
        with pytest.raises(InvalidParameterError):
            await store.upsert([Document(id="a", content="x")], embeddings=np.full((1, 2), np.inf, np.float32))
        with pytest.raises(InvalidParameterError, match="JSON"):
            await store.upsert([Document(id="a", content="x", metadata={"o": object()})])
        with pytest.raises(InvalidParameterError, match="65535"):
            await store.upsert([Document(id="a", content="x" * 70000)], embeddings=np.ones((1, 2), np.float32))
        assert store._client is None  # none of these opened a connection
    finally:
        await store.aclose()


@pytest.mark.anyio
async def test_an_integer_beyond_int64_is_a_typed_input_error_before_any_call(lite_store):
    """Issue 13.10: Milvus's JSON holds int64; a bigger integer, at any depth, is the caller's mistake
    (InvalidParameterError naming the document), not a BackendError from the server; nothing is written."""
    store = lite_store()
    try:
        for big in (2**63, -(2**63) - 1, 2**64, [1, {"deep": 2**70}]):
            with pytest.raises(InvalidParameterError, match=r"'a'.*int64"):
                await store.upsert([Document(id="a", content="x", metadata={"n": big})],
                                   embeddings=np.ones((1, 2), np.float32))
        assert store._client is None  # refused before connecting
        await store.upsert([Document(id="a", content="x", metadata={"n": 2**63 - 1, "m": -(2**63)})],
                           embeddings=np.ones((1, 2), np.float32))
        assert (await store.get(ids=["a"]))[0].metadata == {"n": 2**63 - 1, "m": -(2**63)}
    finally:
        await store.aclose()


@pytest.mark.anyio
async def test_vector_only_store(lite_store):
    async with lite_store(enable_bm25=False) as store:
        await store.upsert(KNN_DOCS, embeddings=KNN_VECTORS)
        assert [d.id for d in await store.search_vector(KNN_QUERY, k=2)] == ["near", "mid"]
        with pytest.raises(ConfigurationError, match="enable_bm25"):
            await store.search_text("near", k=1)
    with pytest.raises(ConfigurationError, match="without BM25"):
        async with lite_store(enable_bm25=True):
            pass


@pytest.mark.anyio
async def test_reopen_with_other_settings_is_refused(lite_store):
    async with lite_store(dimension=4, embedding_model="model-a") as store:
        assert store.dimension == 4
    async with lite_store() as store:
        assert (store.dimension, store.embedding_model, store.enable_bm25) == (4, "model-a", True)
    with pytest.raises(ConfigurationError, match="model-a"):
        async with lite_store(embedding_model="model-b"):
            pass
    with pytest.raises(ConfigurationError, match="dimension"):
        async with lite_store(dimension=8):
            pass


@pytest.mark.anyio
async def test_foreign_and_missing_collections(lite_db, collection_name):
    path, keeper = lite_db
    with pytest.raises(BackendUnavailableError, match="does not exist"):
        async with MilvusVectorStore(path, collection_name, create=False):
            pass
    keeper.create_collection(collection_name, dimension=4)
    try:
        with pytest.raises(ConfigurationError, match="not created by fastrag"):
            async with MilvusVectorStore(path, collection_name):
                pass
    finally:
        keeper.drop_collection(collection_name)


@pytest.mark.anyio
async def test_injected_clients_are_used_and_never_closed(lite_server, collection_name):
    sync_client = MilvusClient(uri=lite_server)
    async_client = AsyncMilvusClient(uri=lite_server)
    try:
        # a sync client: every call runs in a worker thread, and it creates the collection
        async with MilvusVectorStore(client=sync_client, collection=collection_name, enable_bm25=True) as store:
            await store.upsert(KNN_DOCS, embeddings=KNN_VECTORS)
            assert [d.id for d in await store.search_vector(KNN_QUERY, k=1)] == ["near"]
        assert collection_name in sync_client.list_collections()
        # an async client on the existing collection
        async with MilvusVectorStore(client=async_client, collection=collection_name) as store:
            assert [d.id for d in await store.search_text("orthogonal", k=1)] == ["orth"]
            assert await store.delete(filter={"equals": {"key": "group", "value": "a"}}) == 3
        assert await async_client.has_collection(collection_name)
        # an async client creating a collection: its index wait needs an RPC milvus-lite lacks; the store copes
        other = collection_name + "_b"
        async with MilvusVectorStore(client=async_client, collection=other, dimension=4) as store:
            await store.upsert(KNN_DOCS, embeddings=KNN_VECTORS)
            assert await store.count() == 5
        await async_client.drop_collection(other)
        with pytest.raises(InvalidParameterError):
            MilvusVectorStore(client=object())
    finally:
        _dropper(sync_client, collection_name)
        sync_client.close()
        await async_client.close()


@pytest.mark.anyio
async def test_unreachable_server_is_unavailable_quickly():
    url = f"http://127.0.0.1:{_free_port()}"
    started = time.monotonic()
    with pytest.raises(BackendUnavailableError, match=f"127.0.0.1.*collection 'c'") as info:
        async with MilvusVectorStore(url, "c", timeout=1):
            pass
    assert time.monotonic() - started < 10
    assert info.value.__cause__ is not None
    store = MilvusVectorStore(url, "c", timeout=1)
    with pytest.raises(BackendUnavailableError):
        await store.count()
    await store.aclose()


@pytest.mark.anyio
async def test_server_going_away_is_unavailable(tmp_path):
    from fastrag.testing.milvus_server import start_milvus, stop_process as _stop

    proc, url = start_milvus(tmp_path / "gone.db")
    try:
        async with MilvusVectorStore(url, "gone", dimension=2, timeout=2) as store:
            await store.upsert([Document(id="a", content="x")], embeddings=np.ones((1, 2), np.float32))
            _stop(proc)
            started = time.monotonic()
            with pytest.raises(BackendUnavailableError, match="gone"):
                await store.count()
            assert time.monotonic() - started < 15
    finally:
        if proc.poll() is None:
            _stop(proc)


_ORPHAN = """
import sys, time
from fastrag.testing.milvus_server import start_milvus
proc, url = start_milvus(sys.argv[1])
print(proc.pid, flush=True)
time.sleep(600)
"""


def _running(pid: int) -> bool:
    """Whether ``pid`` is alive (an exited process that nothing reaped yet, a zombie, is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True  # no /proc: trust kill(0)


def test_a_test_server_never_outlives_the_process_that_started_it(tmp_path):
    """The Milvus server a test run starts goes away with that run even when the run is killed (SIGKILL): it
    watches a lock file the run holds."""
    child = subprocess.Popen([sys.executable, "-c", _ORPHAN, str(tmp_path / "orphan.db")], stdout=subprocess.PIPE,
                             text=True)
    try:
        server_pid = int(child.stdout.readline())
        os.kill(server_pid, 0)  # it runs
        child.kill()
        child.wait()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if not _running(server_pid):
                return
            time.sleep(0.1)
        os.kill(server_pid, 9)
        pytest.fail("the Milvus server outlived the killed process that started it")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()


@pytest.mark.anyio
async def test_closed_store_raises_and_close_is_idempotent(lite_store):
    store = lite_store()
    await store.aclose()
    await store.aclose()
    with pytest.raises(BackendUnavailableError, match="closed"):
        await store.count()


@pytest.mark.anyio
async def test_two_stores_share_one_lite_server_until_the_last_closes(tmp_path):
    from milvus_lite.server_manager import server_manager_instance

    path = str(tmp_path / "shared.db")
    first = MilvusVectorStore(path, "one", dimension=2)
    second = MilvusVectorStore(path, "two", dimension=2)
    async with first, second:
        await first.upsert([Document(id="a", content="x")], embeddings=np.ones((1, 2), np.float32))
        await first.aclose()
        assert await second.count() == 0  # the server is still up for the second store
        assert os.path.realpath(path) in server_manager_instance._servers
    assert os.path.realpath(path) not in server_manager_instance._servers  # the last close stopped it


_CHILD = """
import sys, anyio, numpy as np
from fastrag.errors import BackendUnavailableError
from fastrag.vector_store.milvus import MilvusVectorStore
path = sys.argv[1]
async def attempt():
    try:
        async with MilvusVectorStore(path, "persisted") as store:
            hits = await store.search_text("kept", k=3)
            print("read", await store.count(), [d.id for d in hits], hits[0].metadata["n"], flush=True)
    except BackendUnavailableError as exc:
        print("unavailable", "persisted" in str(exc), flush=True)
anyio.run(attempt)
sys.stdin.readline()
anyio.run(attempt)
"""


@pytest.mark.anyio
async def test_lite_folder_persists_and_is_locked_while_open(tmp_path):
    """Closing the last store stops its in-process server: the data is on disk and another process can open it."""
    path = str(tmp_path / "nested" / "persist.db")
    store = MilvusVectorStore(path, "persisted", enable_bm25=True)
    await store.upsert([Document(id="k", content="kept text", metadata={"n": 1})],
                       embeddings=np.ones((1, 2), np.float32))
    child = subprocess.Popen([sys.executable, "-c", _CHILD, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().split() == ["unavailable", "True"]  # our process holds the lock
        await store.aclose()
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().split() == ["read", "1", "['k']", "1"]
        assert child.wait(timeout=60) == 0
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        for stream in (child.stdin, child.stdout, child.stderr):
            stream.close()
    async with MilvusVectorStore(path, "persisted") as again:  # and this process can reopen it afterwards
        assert [d.id for d in await again.get()] == ["k"]


# ------------------------------------------------------------------------------------ server hybrid


class _TableEmbedder:
    """Returns a fixed vector per query, so the dense leg's ranking is chosen by the test."""

    name = "table"
    dimension = 4

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table

    async def embed_query(self, text: str) -> np.ndarray:
        return np.asarray(self.table[text], dtype=np.float32)

    async def embed_documents(self, texts):  # pragma: no cover - not used
        raise NotImplementedError


HYBRID_DOCS = [
    Document(id="bm25_best", content="solar solar solar panel", metadata={"keep": False}),
    Document(id="dense_best", content="unrelated words", metadata={"keep": False}),
    Document(id="both", content="solar panel roof", metadata={"keep": True}),
    Document(id="text_only", content="a solar farm", metadata={"keep": True}),
    Document(id="vector_only", content="nothing shared", metadata={"keep": True}),
]
# no two documents tie in the dense leg (cosine with [1, 0, 0, 0]: 0.0995, 1, 0.994, 0, 0.970): Milvus orders ties
# inside hybrid_search its own way, and the RRF check below recomputes scores from the provenance ranks
HYBRID_VECTORS = np.array(
    [[0.1, 1, 0, 0], [1, 0, 0, 0], [0.9, 0.1, 0, 0], [0, 0, 1, 0], [0.8, 0, 0.2, 0]], dtype=np.float32
)


@pytest.mark.anyio
async def test_hybrid_applies_the_filter_to_both_legs(lite_store):
    embedder = _TableEmbedder({"solar panel": [1, 0, 0, 0]})
    keep = {"equals": {"key": "keep", "value": True}}
    async with lite_store() as store:
        await store.upsert(HYBRID_DOCS, embeddings=HYBRID_VECTORS)
        assert (await store.search_text("solar panel", k=1))[0].id == "bm25_best"
        assert (await store.search_vector(KNN_QUERY, k=1))[0].id == "dense_best"
        unfiltered = await MilvusHybridRetriever(store, embedder).retrieve("solar panel", k=5)
        assert {"bm25_best", "dense_best"} <= {d.id for d in unfiltered}
        for fusion in ("rrf", "weighted"):
            retriever = MilvusHybridRetriever(store, embedder, fusion=fusion, provenance=True)
            hits = await retriever.retrieve("solar panel", k=5, filter=keep)
            assert {d.id for d in hits} == {"both", "text_only", "vector_only"}
            assert hits[0].id == "both"
            assert [d.rank for d in hits] == [0, 1, 2]
            assert [d.score for d in hits] == sorted((d.score for d in hits), reverse=True)
            # a retriever-level filter combines with the call's filter
            narrowed = await MilvusHybridRetriever(store, embedder, fusion=fusion, filter=keep).retrieve(
                "solar panel", k=5, filter={"notEquals": {"key": "keep", "value": True}})
            assert narrowed == []


@pytest.mark.anyio
async def test_hybrid_rrf_scores_and_provenance(lite_store):
    embedder = _TableEmbedder({"solar panel": [1, 0, 0, 0]})
    async with lite_store() as store:
        await store.upsert(HYBRID_DOCS, embeddings=HYBRID_VECTORS)
        hits = await MilvusHybridRetriever(store, embedder, rank_constant=10, provenance=True).retrieve(
            "solar panel", k=5)
        plain = await MilvusHybridRetriever(store, embedder, rank_constant=10).retrieve("solar panel", k=5)
        with pytest.raises(BackendError):  # one failing request fails the search with the store's error
            await MilvusHybridRetriever(store, embedder, provenance=True).retrieve(
                "solar panel", k=5, filter=MilvusExpr("metadata[ == broken"))
    assert [d.id for d in plain] == [d.id for d in hits]
    assert all("branches" not in d.metadata for d in plain)
    for doc in hits:
        # RRF (Cormack et al. 2009) with 1-based ranks: sum of 1 / (rank_constant + rank + 1) over the legs
        expected = sum(1 / (10 + b.rank + 1) for b in doc.branches.values())
        assert doc.score == pytest.approx(expected, rel=1e-5)
    both = next(d for d in hits if d.id == "both")
    assert set(both.branches) == {"vector", "bm25"}
    assert set(next(d for d in hits if d.id == "vector_only").branches) == {"vector"}
    assert hits[0].id == "both"


@pytest.mark.anyio
async def test_hybrid_weighted_and_validation(lite_store):
    embedder = _TableEmbedder({"solar panel": [1, 0, 0, 0]})
    async with lite_store() as store:
        await store.upsert(HYBRID_DOCS, embeddings=HYBRID_VECTORS)
        dense_only = await MilvusHybridRetriever(store, embedder, fusion="weighted",
                                                 weights={"vector": 1.0, "bm25": 0.0}).retrieve("solar panel", k=2)
        text_only = await MilvusHybridRetriever(store, embedder, fusion="weighted",
                                                weights=(0.0, 1.0)).retrieve("solar panel", k=1)
        native = await MilvusHybridRetriever(store, embedder).retrieve(
            "solar panel", k=5, filter=MilvusExpr('metadata["keep"] == true'))
        # a retriever-level fastrag filter and a call's native expression combine into one expression
        both = await MilvusHybridRetriever(store, embedder, filter={"equals": {"key": "keep", "value": True}}).retrieve(
            "solar panel", k=5, filter=MilvusExpr('id != "both"'))
    assert [d.id for d in dense_only] == ["dense_best", "both"]
    assert [d.id for d in text_only] == ["bm25_best"]
    assert {d.id for d in native} == {"both", "text_only", "vector_only"}
    assert {d.id for d in both} == {"text_only", "vector_only"}
    for bad in (dict(fusion="max"), dict(rank_constant=0), dict(fusion="weighted", weights=(2.0, 0.5)),
                dict(fusion="weighted", weights=(0, 0)), dict(fusion="weighted", weights={"dense": 1}),
                dict(weights=(0.5, 0.5)), dict(candidate_k=0)):
        with pytest.raises(InvalidParameterError):
            MilvusHybridRetriever(store, embedder, **bad)
    retriever = MilvusHybridRetriever(store, embedder)
    with pytest.raises(InvalidParameterError):
        await retriever.retrieve("  ", k=3)
    with pytest.raises(UnsupportedFilterError):
        await retriever.retrieve("solar panel", k=3, filter={"lessThan": {"key": "n", "value": 1e300}})


@pytest.mark.anyio
async def test_hybrid_needs_bm25_and_the_right_dimension(lite_store):
    async with lite_store(enable_bm25=False) as store:
        await store.upsert(KNN_DOCS, embeddings=KNN_VECTORS)
        with pytest.raises(ConfigurationError):
            await store.search_hybrid("near", KNN_QUERY, k=2)
    async with lite_store("_bm25", dimension=4) as store:
        with pytest.raises(DimensionMismatchError):
            await store.search_hybrid("near", np.ones(3, np.float32), k=2)
        assert await store.search_hybrid("near", KNN_QUERY, k=2) == []


# ------------------------------------------------------------------------------------- from_url


def test_from_url_forms(tmp_path):
    server = MilvusVectorStore.from_url("milvus://db.example:19531/docs?bm25=false&dimension=8&db=prod&timeout=3")
    assert (server.url, server.collection, server.enable_bm25, server.dimension, server.timeout) == (
        "http://db.example:19531", "docs", False, 8, 3.0)
    assert server._db_name == "prod"
    assert MilvusVectorStore.from_url("milvus://localhost/docs").url == "http://localhost:19530"
    assert MilvusVectorStore.from_url("milvus://localhost/docs").enable_bm25 is True
    assert MilvusVectorStore.from_url("milvus+https://x.cloud:443/c", token="t").url == "https://x.cloud:443"
    lite = MilvusVectorStore.from_url("milvus-lite:///data/x.db?collection=notes")
    assert (lite.url, lite.collection, lite.enable_bm25) == ("data/x.db", "notes", True)
    absolute = MilvusVectorStore.from_url(f"milvus-lite:///{tmp_path}/y.db")
    assert (absolute.url, absolute.collection) == (f"{tmp_path}/y.db", "fastrag")
    assert MilvusVectorStore.from_url("milvus-lite:///x.db", enable_bm25=False).enable_bm25 is False
    for bad in ("sqlite:///x.db", "milvus://host:19530", "milvus://host:19530/a/b", "milvus://u:p@host/c",
                "milvus-lite:///x.sqlite", "milvus-lite://x.db", "milvus://host/c?bm25=maybe",
                "milvus://host/c?unknown=1", "milvus://host/bad-name", "milvus://host:notaport/c",
                "milvus-lite:///x.db?db=other"):
        with pytest.raises(ConfigurationError):
            MilvusVectorStore.from_url(bad)


def test_constructor_validation():
    with pytest.raises(InvalidParameterError):
        MilvusVectorStore()
    for kwargs in (dict(collection="1abc"), dict(collection="a-b"), dict(dimension=0), dict(timeout=0)):
        with pytest.raises(InvalidParameterError):
            MilvusVectorStore("./x.db", **kwargs)
    with pytest.raises(InvalidParameterError, match=r"\.db"):
        MilvusVectorStore("./x.sqlite")


def test_missing_sdk_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pymilvus", None)
    with pytest.raises(ConfigurationError, match=r'pip install "fastrag-retrieval\[milvus\]"'):
        MilvusVectorStore("./x.db")


def test_importing_fastrag_does_not_import_the_sdk():
    code = ("import sys, fastrag, fastrag.vector_store.milvus as m; "
            "m.translate_filter({'equals': {'key': 'a', 'value': 1}}); "
            "print(sorted(n for n in ('pymilvus', 'milvus_lite', 'grpc') if n in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"


@pytest.mark.anyio
async def test_hybrid_pages_join_into_the_top(lite_store):
    """Pagination (issue 18.1) on Milvus's server-side fusion: page 1 + page 2 == top 2 * size."""
    embedder = _TableEmbedder({"solar panel": [1, 0, 0, 0]})
    async with lite_store() as store:
        await store.upsert(HYBRID_DOCS, embeddings=HYBRID_VECTORS)
        for fusion in ("rrf", "weighted"):
            retriever = MilvusHybridRetriever(store, embedder, fusion=fusion)
            top = await retriever.retrieve("solar panel", k=4)
            pages = await retriever.retrieve("solar panel", k=2) + await retriever.retrieve("solar panel", k=2, offset=2)
            assert [d.id for d in pages] == [d.id for d in top] and len(top) == 4


@pytest.mark.anyio
async def test_a_connection_the_server_dropped_for_its_ping_policy_is_retried_once(milvus_server):
    """milvus-lite 2.5.1 closes a connection pymilvus's keepalive pings while idle (gRPC UNAVAILABLE "Too many
    pings"); the next call fails once while pymilvus reconnects. That one failure is retried, a second is not."""
    from pymilvus.exceptions import MilvusException

    from fastrag.vector_store.milvus import MilvusVectorStore

    def dropped() -> MilvusException:
        error = MilvusException(code=2, message="Fail connecting to server")
        error.__cause__ = RuntimeError("UNAVAILABLE: Too many pings")
        return error

    async with MilvusVectorStore(milvus_server, "ping_policy", dimension=2) as store:
        client = store._client
        real = client.has_collection
        failures = []

        async def flaky(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            if len(failures) < budget:
                failures.append(1)
                raise dropped()
            return await real(*args, **kwargs)

        client.has_collection = flaky
        try:
            budget = 1
            assert await store._call("has_collection", "ping_policy") in (True, False)
            assert len(failures) == 1
            failures.clear()
            budget = 2
            with pytest.raises(BackendError, match="Fail connecting"):
                await store._call("has_collection", "ping_policy")
        finally:
            client.has_collection = real


@pytest.mark.anyio
async def test_opening_over_a_connection_dropped_for_the_ping_policy_retries_once(milvus_server, monkeypatch):
    """gRPC shares connections between channels, so a new client can get one milvus-lite closed for its ping
    policy: the first call while opening fails (seen in a fresh-clone CI run). It is retried once."""
    import pymilvus
    from pymilvus.exceptions import MilvusException

    from fastrag.errors import BackendUnavailableError
    from fastrag.vector_store.milvus import MilvusVectorStore

    real = pymilvus.AsyncMilvusClient.has_collection
    failures: list[int] = []
    budget = 1

    async def flaky(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if len(failures) < budget:
            failures.append(1)
            error = MilvusException(code=2, message="Fail connecting to server")
            error.__cause__ = RuntimeError("UNAVAILABLE: Too many pings")
            raise error
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(pymilvus.AsyncMilvusClient, "has_collection", flaky)
    async with MilvusVectorStore(milvus_server, "ping_policy_open", dimension=2) as store:
        assert await store.count() == 0
    assert len(failures) == 1
    failures.clear()
    budget = 2
    with pytest.raises(BackendUnavailableError, match="Fail connecting"):
        async with MilvusVectorStore(milvus_server, "ping_policy_open", dimension=2):
            pass
