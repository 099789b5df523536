"""OpenSearchVectorStore: the shared store contract, golden request bodies, errors, lifecycle.

What runs against what (see docs/backends/opensearch.md):

- ``TestOpenSearchEmulatedLexical``: the contract against ``osmem-server`` (an OpenSearch API emulator started
  by a session fixture on a free 127.0.0.1 port), BM25 + filters + writes; osmem has no k-NN, so
  ``supports_vectors = False``.
- ``TestOpenSearchEmulatedKnnShim`` / ``...ExactShim``: the full contract (vectors too) against osmem, with a
  client-side shim (``KnnShimConnection``) that answers the ``knn`` query and the ``knn_score`` script the
  way the k-NN plugin documents them (exact pre-filtered search; scores ``(1 + cos) / 2`` and ``1 + cos``)
  and passes everything else to osmem. It checks the adapter's filter-inside-k-NN plumbing, score
  conversion and ordering; it is not OpenSearch's k-NN.
- golden request-body tests: the exact JSON the adapter sends (mapping, bulk, ``knn``, ``script_score``,
  BM25), captured at the transport level.
- ``TestOpenSearchReal`` / ``TestOpenSearchRealExact``: the full contract against a real OpenSearch with the
  k-NN plugin when ``FASTRAG_TEST_OPENSEARCH_URL`` is set (``docker compose up -d opensearch``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fastrag.errors import (
    AuthenticationError,
    BackendError,
    BackendTemporarilyUnavailableError,
    BackendUnavailableError,
    ConfigurationError,
    DimensionMismatchError,
    FilterError,
    InvalidParameterError,
    RateLimitError,
)
from fastrag.models import Document
from fastrag.retrieval import BM25Retriever
from fastrag.retrieval.result import RetrievalResult, retrieve_result
from fastrag.testing.filter_cases import FILTER_CASES, FILTER_CORPUS
from fastrag.testing.store_contract import StoreContract

MISSING = 'is not installed: pip install "fastrag-retrieval[opensearch]"'
opensearchpy = pytest.importorskip("opensearchpy", reason=f"opensearch-py {MISSING}")
pytest.importorskip("aiohttp", reason=f"aiohttp (the async client of opensearch-py) {MISSING}")

from opensearchpy import AsyncOpenSearch  # noqa: E402
from opensearchpy._async.http_aiohttp import AIOHttpConnection, AsyncConnection  # noqa: E402

from fastrag.vector_store.opensearch import OpenSearchQuery, OpenSearchVectorStore  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
REAL_URL = os.environ.get("FASTRAG_TEST_OPENSEARCH_URL", "").strip()


def _index() -> str:
    return f"fastrag-test-{uuid.uuid4().hex[:12]}"


# ----------------------------------------------------------------------------------- the emulator


class TestOpenSearchEmulatedLexical(StoreContract):
    """BM25, filters and writes against osmem-server (no k-NN there)."""

    supports_vectors = False

    @pytest.fixture
    def store_factory(self, opensearch_emulator):  # noqa: ANN001, ANN201
        index = _index()
        return lambda: OpenSearchVectorStore(url=opensearch_emulator, index=index, timeout=10)


# ------------------------------------------------------------------------- the k-NN shim over osmem


class KnnShimConnection(AIOHttpConnection):
    """Answers the k-NN plugin's queries in Python, as the plugin documents them; all else goes to osmem.

    ``knn``: exact nearest neighbours among the documents matching the ``filter`` inside the query (what
    efficient filtering returns when it falls back to exact search), score ``(1 + cos) / 2`` (Lucene
    engine, space ``cosinesimil``). ``script_score`` with ``knn_score``: every document of the inner query,
    score ``1 + cos``. Requests of any other shape for these queries fail loudly.
    """

    async def perform_request(  # noqa: ANN201, PLR0913
        self, method, url, params=None, body=None, timeout=None, ignore=(), headers=None  # noqa: ANN001
    ):
        if url.endswith("/_search") and body:
            request = json.loads(body)
            query = request.get("query", {})
            if "knn" in query or "script_score" in query:
                return await self._knn(url, request, params, timeout, headers)
        return await super().perform_request(method, url, params, body, timeout, ignore, headers)

    async def _knn(self, url, request, params, timeout, headers):  # noqa: ANN001, ANN202
        query = request["query"]
        assert set(request) <= {"size", "query", "_source", "sort", "track_scores"}, request
        if "knn" in query:
            ((field_name, spec),) = query["knn"].items()
            assert set(spec) <= {"vector", "k", "filter"} and request["size"] == spec["k"], spec
            vector, candidates = spec["vector"], spec.get("filter", {"match_all": {}})
            to_score = lambda cos: (1.0 + cos) / 2.0  # noqa: E731
        else:
            script = query["script_score"]["script"]
            assert script["lang"] == "knn" and script["source"] == "knn_score", script
            assert script["params"]["space_type"] == "cosinesimil", script
            field_name, vector = script["params"]["field"], script["params"]["query_value"]
            candidates = query["script_score"]["query"]
            to_score = lambda cos: 1.0 + cos  # noqa: E731
        fetch = json.dumps({"size": 10_000, "query": candidates}).encode()
        status, response_headers, raw = await super().perform_request(
            "POST", url, params, fetch, timeout, (), headers
        )
        hits = [h for h in json.loads(raw)["hits"]["hits"] if h["_source"].get(field_name) is not None]
        q = np.asarray(vector, dtype=np.float32)
        scored = []
        for hit in hits:
            v = np.asarray(hit["_source"][field_name], dtype=np.float32)
            cos = float(np.dot(q, v) / (np.linalg.norm(q) * np.linalg.norm(v)))
            source = {k: v for k, v in hit["_source"].items() if k not in request.get("_source", {}).get("excludes", [])}
            scored.append({"_index": hit["_index"], "_id": hit["_id"], "_score": float(np.float32(to_score(cos))),
                           "_source": source})
        scored.sort(key=lambda h: -h["_score"])
        body = {"took": 1, "timed_out": False, "hits": {"total": {"value": len(scored), "relation": "eq"},
                                                         "max_score": None, "hits": scored[: request["size"]]}}
        return status, response_headers, json.dumps(body)


@pytest.fixture
async def shim_client(opensearch_emulator):  # noqa: ANN001, ANN201
    client = AsyncOpenSearch(hosts=[opensearch_emulator], connection_class=KnnShimConnection, timeout=10)
    yield client
    await client.close()


class TestOpenSearchEmulatedKnnShim(StoreContract):
    """The full contract on osmem, k-NN answered by the documented-semantics shim (approximate mode body)."""

    @pytest.fixture
    def store_factory(self, shim_client):  # noqa: ANN001, ANN201
        index = _index()
        return lambda: OpenSearchVectorStore(client=shim_client, index=index)


class TestOpenSearchEmulatedExactShim(TestOpenSearchEmulatedKnnShim):
    """The same, with ``exact=True`` (``script_score`` + ``knn_score`` body)."""

    @pytest.fixture
    def store_factory(self, shim_client):  # noqa: ANN001, ANN201
        index = _index()
        return lambda: OpenSearchVectorStore(client=shim_client, index=index, exact=True)


# --------------------------------------------------------------------------------- a real server


@pytest.fixture
async def real_store_factory():  # noqa: ANN201
    created: list[str] = []

    def factory(index: str, **kwargs: Any) -> OpenSearchVectorStore:
        created.append(index)
        if REAL_URL.startswith(("opensearch://", "opensearchs://")):
            return OpenSearchVectorStore.from_url(f"{REAL_URL.rstrip('/')}/{index}", **kwargs)
        return OpenSearchVectorStore(url=REAL_URL, index=index, **kwargs)

    yield factory
    for index in set(created):  # an index a test never wrote to was never created: 404 is fine
        async with factory(index) as store:
            await store._client.indices.delete(index=index, ignore=[404])


@pytest.mark.external_server("FASTRAG_TEST_OPENSEARCH_URL")
@pytest.mark.skipif(not REAL_URL, reason="FASTRAG_TEST_OPENSEARCH_URL is not set (a real OpenSearch with the k-NN "
                    "plugin, e.g. `docker compose up -d opensearch` and FASTRAG_TEST_OPENSEARCH_URL=http://localhost:9200)")
class TestOpenSearchReal(StoreContract):
    """The full contract, vectors included, against a real OpenSearch with the k-NN plugin."""

    exact = False

    @pytest.fixture
    def store_factory(self, real_store_factory):  # noqa: ANN001, ANN201
        index = _index()
        return lambda: real_store_factory(index, exact=self.exact)


class TestOpenSearchRealExact(TestOpenSearchReal):
    exact = True


# ------------------------------------------------------------------------- emulator-only checks


@pytest.mark.anyio
async def test_count_and_get_agree_with_the_filter_table(opensearch_emulator) -> None:  # noqa: ANN001
    """The contract's lexical run checks ids through BM25; here count() and get() must agree too."""
    async with OpenSearchVectorStore(url=opensearch_emulator, index=_index()) as store:
        await store.upsert(FILTER_CORPUS)
        failures = []
        for case in FILTER_CASES:
            expected = sorted(case.expected_ids)
            got_ids = [d.id for d in await store.get(filter=case.filter)]
            got_count = await store.count(filter=case.filter)
            if got_ids != expected or got_count != len(expected):
                failures.append((case.name, expected, got_ids, got_count))
        assert not failures


NASTY = ["a*b", "a?b", "a\\b", "*", "?", "\\", '"}}, {"match_all": {}}', "x' OR '1'='1", "%_", "${x}", "a b",
         "\\*", "東京*", ""]


@pytest.mark.anyio
async def test_injection_values_select_exactly_their_documents(opensearch_emulator) -> None:  # noqa: ANN001
    docs = [Document(id=f"n{i:02}", content=f"nasty value {i}", metadata={"v": value, "k": [value]})
            for i, value in enumerate(NASTY)]
    async with OpenSearchVectorStore(url=opensearch_emulator, index=_index()) as store:
        await store.upsert(docs)
        for doc in docs:
            value = doc.metadata["v"]
            want = sorted(d.id for d in docs if d.metadata["v"] == value)
            for op in ("equals", "listContains"):
                got = [d.id for d in await store.get(filter={op: {"key": "v" if op == "equals" else "k", "value": value}})]
                assert got == want, (op, value)
            got = [d.id for d in await store.get(filter={"in": {"key": "v", "value": [value, "absent"]}})]
            assert got == want, ("in", value)
            got = [d.id for d in await store.get(filter={"startsWith": {"key": "v", "value": value}})]
            assert got == sorted(d.id for d in docs if d.metadata["v"].startswith(value)), ("startsWith", value)
            got = [d.id for d in await store.get(filter={"stringContains": {"key": "v", "value": value}})]
            assert got == sorted(d.id for d in docs if value in d.metadata["v"]), ("stringContains", value)
        for text in ['{"match_all": {}}', "*", "title:x OR y", '"unbalanced', "\\", "a AND NOT b", "(((", "^~"]:
            assert await store.search_text(text, k=5) == [], text


@pytest.mark.anyio
async def test_metadata_round_trips_exactly(opensearch_emulator) -> None:  # noqa: ANN001
    metadata = {"int": 3, "float": 3.0, "neg_zero": -0.0, "bool": True, "zero": 0, "false": False, "none": None,
                "big": 2**70, "list": [1, 1.0, True, "1", None, [2], {"x": "y"}], "nested": {"a": {"b": [1.5]}},
                "unicode": "Zürich 東京 Москва", "meta.lang": "en", "": "empty key", "title": "A title"}
    long_id = "é" * 300  # 600 UTF-8 bytes: over OpenSearch's 512-byte _id limit
    docs = [Document(id="m", content="round trip", metadata=metadata), Document(id=long_id, content="long id"),
            Document(id="~h:" + "0" * 64, content="looks hashed")]
    async with OpenSearchVectorStore(url=opensearch_emulator, index=_index()) as store:
        await store.upsert(docs)
        got = {d.id: d for d in await store.get()}
        assert json.dumps(dict(got["m"].metadata), sort_keys=True) == json.dumps(metadata, sort_keys=True)
        assert set(got) == {"m", long_id, "~h:" + "0" * 64}
        hit = (await store.search_text("title", k=1))[0]
        assert hit.id == "m" and hit.metadata["big"] == 2**70 and type(hit.metadata["float"]) is float
        assert await store.delete(ids=[long_id]) == 1
        assert await store.count() == 2


@pytest.mark.anyio
async def test_delete_with_ids_and_filter_is_an_and(opensearch_emulator) -> None:  # noqa: ANN001
    docs = [Document(id=f"d{i}", content="x", metadata={"even": i % 2 == 0}) for i in range(6)]
    async with OpenSearchVectorStore(url=opensearch_emulator, index=_index()) as store:
        await store.upsert(docs)
        assert await store.delete(ids=["d0", "d1", "d2"], filter={"equals": {"key": "even", "value": True}}) == 2
        assert [d.id for d in await store.get()] == ["d1", "d3", "d4", "d5"]
        assert await store.delete(ids=[]) == 0
        assert [d.id for d in await store.get(limit=2)] == ["d1", "d3"]
        assert await store.clear() == 4


@pytest.mark.anyio
async def test_native_query_passes_through(opensearch_emulator) -> None:  # noqa: ANN001
    async with OpenSearchVectorStore(url=opensearch_emulator, index=_index()) as store:
        await store.upsert(FILTER_CORPUS)
        native = OpenSearchQuery({"terms": {"f_str.category": ["art", "health"]}})
        assert [d.id for d in await store.get(filter=native)] == ["d04", "d07", "d09"]
        assert await store.count(filter=native) == 3
        hits = await store.search_text("sleep painting heat", k=5, filter=native)
        assert {d.id for d in hits} == {"d04", "d07", "d09"}
        with pytest.raises(FilterError):  # a plain mapping is always a fastrag filter
            await store.count(filter={"terms": {"f_str.category": ["art"]}})


@pytest.mark.anyio
async def test_empty_store_reads_before_the_index_exists(opensearch_emulator) -> None:  # noqa: ANN001
    index = _index()
    async with OpenSearchVectorStore(url=opensearch_emulator, index=index) as store:
        assert await store.count() == 0
        assert await store.search_text("anything", k=3) == []
        assert await store.search_vector(np.ones(4, dtype=np.float32), k=3) == []
        assert await store.get() == []
        assert await store.delete(ids=["x"]) == 0
        await store.upsert([Document(id="a", content="now it exists")])
        assert await store.count() == 1


@pytest.mark.anyio
async def test_missing_index_with_create_false_is_unavailable(opensearch_emulator) -> None:  # noqa: ANN001
    index = _index()
    with pytest.raises(BackendUnavailableError, match=index):
        async with OpenSearchVectorStore(url=opensearch_emulator, index=index, create=False):
            pass


@pytest.mark.anyio
async def test_foreign_index_and_other_dimension_are_refused(opensearch_emulator) -> None:  # noqa: ANN001
    foreign = _index()
    client = AsyncOpenSearch(hosts=[opensearch_emulator])
    try:
        await client.indices.create(index=foreign, body={"mappings": {"properties": {"x": {"type": "keyword"}}}})
    finally:
        await client.close()
    with pytest.raises(ConfigurationError, match="not created by fastrag"):
        async with OpenSearchVectorStore(url=opensearch_emulator, index=foreign):
            pass
    index = _index()
    async with OpenSearchVectorStore(url=opensearch_emulator, index=index, dimension=4) as store:
        assert store.dimension == 4
    with pytest.raises(ConfigurationError, match="dimension 4"):
        async with OpenSearchVectorStore(url=opensearch_emulator, index=index, dimension=8):
            pass
    async with OpenSearchVectorStore(url=opensearch_emulator, index=index) as store:
        assert store.dimension == 4  # read from the mapping
        with pytest.raises(DimensionMismatchError):
            await store.upsert([Document(id="a", content="x")], embeddings=np.ones((1, 3), dtype=np.float32))
    with pytest.raises(ConfigurationError, match="analyzer"):
        async with OpenSearchVectorStore(url=opensearch_emulator, index=index, analyzer="standard"):
            pass


@pytest.mark.anyio
async def test_embedding_model_is_recorded_and_enforced(opensearch_emulator) -> None:  # noqa: ANN001
    index = _index()
    async with OpenSearchVectorStore(url=opensearch_emulator, index=index, embedding_model="model-a") as store:
        await store.upsert([Document(id="a", content="x")], embeddings=np.ones((1, 4), dtype=np.float32))
    async with OpenSearchVectorStore(url=opensearch_emulator, index=index) as store:
        assert (store.embedding_model, store.dimension) == ("model-a", 4)
    with pytest.raises(ConfigurationError, match="model-a"):
        async with OpenSearchVectorStore(url=opensearch_emulator, index=index, embedding_model="model-b"):
            pass
    later = _index()
    async with OpenSearchVectorStore(url=opensearch_emulator, index=later) as store:
        await store.upsert([Document(id="a", content="x")])
        assert store.embedding_model is None
    async with OpenSearchVectorStore(url=opensearch_emulator, index=later, embedding_model="model-c"):
        pass
    async with OpenSearchVectorStore(url=opensearch_emulator, index=later) as store:
        assert store.embedding_model == "model-c"


@pytest.mark.anyio
async def test_lexical_index_gains_a_vector_field_on_first_embeddings(opensearch_emulator) -> None:  # noqa: ANN001
    async with OpenSearchVectorStore(url=opensearch_emulator, index=_index()) as store:
        await store.upsert([Document(id="a", content="text only")])
        assert store.dimension is None
        await store.upsert([Document(id="b", content="with vector")], embeddings=np.ones((1, 3), dtype=np.float32))
        assert store.dimension == 3
        mapping = await store._client.indices.get_mapping(index=store.index)
        assert mapping[store.index]["mappings"]["properties"]["embedding"]["dimension"] == 3


# ------------------------------------------------------------------ golden bodies (transport level)


class RecordingConnection(AsyncConnection):
    """Records every request and answers from ``responder(method, url, params, body) -> (status, json)``."""

    responder: Callable[..., tuple[int, Any]]
    requests: list[tuple[str, str, dict, Any]]
    closed: list[bool]

    async def perform_request(  # noqa: ANN201, PLR0913
        self, method, url, params=None, body=None, timeout=None, ignore=(), headers=None  # noqa: ANN001
    ):
        text = body.decode() if isinstance(body, bytes) else body
        if text and url.endswith("/_bulk"):
            decoded: Any = [json.loads(line) for line in text.splitlines() if line]
        else:
            decoded = json.loads(text) if text else None
        plain = {k: v.decode() if isinstance(v, bytes) else v for k, v in (params or {}).items()}
        self.requests.append((method, url, plain, decoded))
        status, payload = self.responder(method, url, params or {}, decoded)
        raw = json.dumps(payload) if payload is not None else ""
        if not (200 <= status < 300) and status not in ignore:
            self._raise_error(status, raw, "application/json")
        return status, {"content-type": "application/json"}, raw

    async def close(self) -> None:
        self.closed.append(True)


def recording_client(responder: Callable[..., tuple[int, Any]]) -> tuple[Any, list, list]:
    requests: list = []
    closed: list = []
    connection = type("Rec", (RecordingConnection,), {"responder": staticmethod(responder), "requests": requests,
                                                      "closed": closed})
    client = AsyncOpenSearch(hosts=[{"host": "recorded.invalid", "port": 9200}], connection_class=connection,
                             max_retries=0)
    return client, requests, closed


def fake_cluster(hits: list[dict] | None = None, *, exists: bool = True, dimension: int | None = 4):  # noqa: ANN201
    """A responder for an existing fastrag index; ``_search`` answers with ``hits``."""
    from fastrag.vector_store.opensearch import index_body

    def respond(method: str, url: str, params: dict, body: Any) -> tuple[int, Any]:
        if method == "HEAD":
            return (200 if exists else 404), None
        if url.endswith("/_mapping") and method == "GET":
            return 200, {"idx": {"mappings": index_body(dimension=dimension)["mappings"]}}
        if method == "PUT":
            return 200, {"acknowledged": True}
        if url.endswith("/_search"):
            return 200, {"hits": {"hits": hits or []}}
        if url.endswith("/_count"):
            return 200, {"count": 7}
        if url.endswith("/_delete_by_query"):
            return 200, {"deleted": 2, "failures": []}
        if url.endswith("/_bulk"):
            return 200, {"errors": False, "items": [{"index": {"status": 201}}] * (len(body) // 2)}
        raise AssertionError(f"unexpected request {method} {url}")

    return respond


def hit(doc_id: str, score: float, metadata: dict | None = None) -> dict:
    return {"_id": doc_id, "_score": score,
            "_source": {"id": doc_id, "content": f"text of {doc_id}", "metadata_json": json.dumps(metadata or {})}}


@pytest.mark.anyio
async def test_golden_index_creation_and_bulk_bodies() -> None:
    client, requests, _ = recording_client(fake_cluster(exists=False))
    async with OpenSearchVectorStore(client=client, index="idx", dimension=4) as store:
        await store.upsert([Document(id="a", content="Solar", metadata={"title": "T", "n": 1, "tags": ["x"]})],
                           embeddings=np.array([[1, 0, 0, 0]], dtype=np.float32))
    await client.close()
    assert [(m, u) for m, u, _, _ in requests] == [("HEAD", "/idx"), ("PUT", "/idx"), ("GET", "/idx/_mapping"),
                                                    ("POST", "/idx/_bulk")]
    assert requests[1][3] == {
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
                "embedding": {"type": "knn_vector", "dimension": 4,
                              "method": {"name": "hnsw", "space_type": "cosinesimil", "engine": "lucene"}},
            },
        },
    }
    assert requests[3][2] == {"refresh": "true"}
    assert requests[3][3] == [
        {"index": {"_id": "a"}},
        {"id": "a", "content": "Solar", "title": "T", "metadata_json": '{"title": "T", "n": 1, "tags": ["x"]}',
         "f_str": {"title": "T"}, "f_int": {"n": 1}, "l_str": {"tags": ["x"]}, "embedding": [1.0, 0.0, 0.0, 0.0]},
    ]


@pytest.mark.anyio
async def test_golden_knn_body_and_score_conversion() -> None:
    hits = [hit("b", 0.9), hit("a", 1.0), hit("d", 0.5), hit("c", 0.9)]  # (1 + cos) / 2
    client, requests, _ = recording_client(fake_cluster(hits))
    store = OpenSearchVectorStore(client=client, index="idx")
    found = await store.search_vector(np.array([2, 0, 0, 0], dtype=np.float32), k=3,
                                      filter={"equals": {"key": "group", "value": "b"}})
    await store.aclose()
    await client.close()
    method, url, params, body = requests[-1]
    assert (method, url) == ("POST", "/idx/_search")
    assert body == {
        "size": 3,
        "query": {"knn": {"embedding": {"vector": [2.0, 0.0, 0.0, 0.0], "k": 3,
                                        "filter": {"term": {"f_str.group": "b"}}}}},
        "_source": {"excludes": ["embedding"]},
    }
    assert [(d.id, round(d.score, 6), d.rank) for d in found] == [("a", 1.0, 0), ("b", 0.8, 1), ("c", 0.8, 2)]
    assert found[0].content == "text of a"


@pytest.mark.anyio
async def test_golden_exact_knn_body_and_score_conversion() -> None:
    client, requests, _ = recording_client(fake_cluster([hit("a", 1.8), hit("z", 0.0)]))  # 1 + cos
    store = OpenSearchVectorStore(client=client, index="idx", exact=True)
    native = OpenSearchQuery({"term": {"f_str.group": "b"}})
    found = await store.search_vector(np.array([0, 1, 0, 0], dtype=np.float32), k=2, filter=native)
    without = await store.search_vector(np.array([0, 1, 0, 0], dtype=np.float32), k=2)
    await client.close()
    assert requests[-2][3] == {
        "size": 2,
        "query": {"script_score": {
            "query": {"bool": {"filter": [{"exists": {"field": "embedding"}}, {"term": {"f_str.group": "b"}}]}},
            "script": {"lang": "knn", "source": "knn_score",
                       "params": {"field": "embedding", "query_value": [0.0, 1.0, 0.0, 0.0],
                                  "space_type": "cosinesimil"}},
        }},
        "sort": [{"_score": {"order": "desc"}}, {"id": {"order": "asc"}}],
        "track_scores": True,
        "_source": {"excludes": ["embedding"]},
    }
    assert requests[-1][3]["query"]["script_score"]["query"] == {"bool": {"filter": [{"exists": {"field": "embedding"}}]}}
    assert [(d.id, round(d.score, 6)) for d in found] == [("a", 0.8), ("z", -1.0)]
    assert len(without) == 2


@pytest.mark.anyio
async def test_golden_text_count_delete_and_get_bodies() -> None:
    client, requests, _ = recording_client(fake_cluster([hit("a", 2.5)]))
    store = OpenSearchVectorStore(client=client, index="idx", refresh="wait_for")
    flt = {"notEquals": {"key": "lang", "value": "de"}}
    translated = {"bool": {"must_not": [{"term": {"f_str.lang": "de"}}]}}
    hits = await store.search_text('solar "panel" OR *', k=4, filter=flt)
    assert await store.count(filter=flt) == 7
    assert await store.delete(ids=["a", "b"], filter=flt) == 2
    await store.get(filter=flt, limit=5)
    await store.upsert([Document(id="x", content="y")])
    await client.close()
    bodies = {url: (params, body) for _, url, params, body in requests[2:]}
    assert requests[2][3] == {
        "size": 4,
        "query": {"bool": {"should": [{"match": {"content": 'solar "panel" OR *'}},
                                      {"match": {"title": 'solar "panel" OR *'}}],
                           "minimum_should_match": 1, "filter": [translated]}},
        "sort": [{"_score": {"order": "desc"}}, {"id": {"order": "asc"}}],
        "track_scores": True,
        "_source": {"excludes": ["embedding"]},
    }
    assert [(d.id, d.score, d.rank) for d in hits] == [("a", 2.5, 0)]
    assert bodies["/idx/_count"] == ({}, {"query": translated})
    assert bodies["/idx/_delete_by_query"] == (
        {"refresh": "true"}, {"query": {"bool": {"filter": [{"terms": {"id": ["a", "b"]}}, translated]}}})
    assert requests[-2][3] == {"size": 5, "query": translated, "sort": [{"id": {"order": "asc"}}],
                               "_source": {"excludes": ["embedding"]}}
    assert bodies["/idx/_bulk"][0] == {"refresh": "wait_for"}


@pytest.mark.anyio
@pytest.mark.parametrize("call", [
    lambda s: s.search_vector(np.array([np.nan, 0, 0, 0], dtype=np.float32), k=1),
    lambda s: s.search_vector(np.zeros(4, dtype=np.float32), k=1),
    lambda s: s.search_vector(np.ones(3, dtype=np.float32), k=1),
    lambda s: s.search_vector(np.ones(4, dtype=np.float32), k=0),
    lambda s: s.search_text("x", k=-1),
    lambda s: s.search_text(b"x", k=1),
    lambda s: s.count(filter={"bogus": {}}),
    lambda s: s.delete(),
    lambda s: s.delete(ids="abc"),
    lambda s: s.get(limit=0),
    lambda s: s.upsert([Document(id="a", content="x"), Document(id="a", content="y")]),
    lambda s: s.upsert([Document(id="a", content="x")], embeddings=np.zeros((1, 4), dtype=np.float32)),
    lambda s: s.upsert([Document(id="a", content="x")], embeddings=np.full((1, 4), np.inf, dtype=np.float32)),
    lambda s: s.upsert([Document(id="a", content="x")], embeddings=np.ones((2, 4), dtype=np.float32)),
    lambda s: s.upsert([Document(id="a", content="x", metadata={"f": float("nan")})]),
], ids=["nan", "zero", "dim", "k0", "k-1", "bytes", "filter", "noargs", "idstr", "limit0", "dupes", "zerorow", "inf",
        "rows", "nanmeta"])
async def test_bad_input_is_rejected_before_any_request(call) -> None:  # noqa: ANN001
    client, requests, _ = recording_client(fake_cluster())
    store = OpenSearchVectorStore(client=client, index="idx", dimension=4)
    with pytest.raises((InvalidParameterError, DimensionMismatchError, FilterError)):
        await call(store)
    await client.close()
    assert requests == []


# ----------------------------------------------------------------------------------- errors


@pytest.mark.anyio
@pytest.mark.parametrize(("status", "error"), [
    (400, BackendError), (500, BackendError), (401, AuthenticationError), (403, AuthenticationError),
    (503, BackendTemporarilyUnavailableError), (502, BackendTemporarilyUnavailableError), (429, RateLimitError),
])
async def test_http_errors_map_to_fastrag_errors(status: int, error: type) -> None:
    def respond(method: str, url: str, params: dict, body: Any) -> tuple[int, Any]:
        if method == "HEAD" or url.endswith("/_mapping"):
            return fake_cluster()(method, url, params, body)
        return status, {"error": {"type": "some_exception", "reason": "it broke",
                                  "root_cause": [{"type": "some_exception", "reason": "it broke"}]}, "status": status}

    client, _, _ = recording_client(respond)
    store = OpenSearchVectorStore(url="http://user:secret@db.example:9200", client=client, index="idx")
    with pytest.raises(error) as info:
        await store.count()
    await client.close()
    assert type(info.value) is error
    assert isinstance(info.value.__cause__, opensearchpy.exceptions.TransportError)
    assert info.value.store == "http://db.example:9200/idx" and "secret" not in str(info.value)
    assert "it broke" in str(info.value) and str(status) in str(info.value)


@pytest.mark.anyio
@pytest.mark.parametrize("answer", [{}, {"hits": {}}, {"hits": {"hits": "x"}}, {"hits": {"hits": [1]}}, [], "x",
                                    {"count": "many"}, {"hits": {"hits": [{"_id": "a", "_score": "high"}]}}])
async def test_a_malformed_200_answer_is_a_typed_error_naming_the_store(answer: Any) -> None:
    # a proxy or a broken server answering 200 with a body of the wrong shape: issue 13.8
    def respond(method: str, url: str, params: dict, body: Any) -> tuple[int, Any]:
        if method == "HEAD" or url.endswith("/_mapping"):
            return fake_cluster()(method, url, params, body)
        return 200, answer

    client, _, _ = recording_client(respond)
    store = OpenSearchVectorStore(url="http://db.example:9200", client=client, index="idx")
    for call in (store.count, lambda: store.search_text("solar", k=3), store.get,
                 lambda: retrieve_result(BM25Retriever(store=store), "solar", k=3)):
        try:
            outcome = await call()
        except BackendError as exc:
            error: BaseException = exc
        else:
            if isinstance(outcome, RetrievalResult):
                assert outcome.retrieval_failed
                error = outcome.error
            else:  # an answer of the right shape for this call: nothing to prove here
                continue
        assert type(error) is BackendError and error.store == "http://db.example:9200/idx", error
        assert "malformed" in str(error) or "not written by fastrag" in str(error)
    await client.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.anyio
async def test_unreachable_server_is_unavailable_quickly() -> None:
    port = _free_port()
    start = time.monotonic()
    store = OpenSearchVectorStore(url=f"http://127.0.0.1:{port}", index="docs", timeout=2)
    with pytest.raises(BackendUnavailableError, match=f"127.0.0.1:{port}/docs") as info:
        await store.count()
    assert isinstance(info.value.__cause__, opensearchpy.exceptions.ConnectionError)
    assert time.monotonic() - start < 5
    await store.aclose()
    with pytest.raises(BackendUnavailableError):  # and opening one fails at once, closing its client
        async with OpenSearchVectorStore(url=f"http://127.0.0.1:{port}", index="docs", timeout=2):
            pass


@pytest.mark.anyio
async def test_silent_server_times_out_as_unavailable() -> None:
    with socket.socket() as listener:  # accepts connections (backlog) and never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        start = time.monotonic()
        store = OpenSearchVectorStore(url=f"http://127.0.0.1:{port}", index="docs", timeout=0.5)
        with pytest.raises(BackendUnavailableError, match="docs"):
            await store.search_text("x", k=1)
        await store.aclose()
        assert time.monotonic() - start < 5


# ---------------------------------------------------------------------------------- lifecycle


@pytest.mark.anyio
async def test_injected_client_is_never_closed_and_close_is_idempotent() -> None:
    client, _, closed = recording_client(fake_cluster())
    async with OpenSearchVectorStore(client=client, index="idx") as store:
        assert await store.count() == 7
    await store.aclose()
    assert closed == []
    with pytest.raises(BackendUnavailableError, match="closed"):
        await store.count()
    await client.close()
    assert closed == [True]


@pytest.mark.anyio
async def test_own_client_is_closed_once(opensearch_emulator, monkeypatch) -> None:  # noqa: ANN001
    store = OpenSearchVectorStore(url=opensearch_emulator, index=_index())
    calls = []
    real_close = store._client.close

    async def counting_close() -> None:
        calls.append(1)
        await real_close()

    monkeypatch.setattr(store._client, "close", counting_close)
    async with store:
        await store.count()
    await store.aclose()
    assert calls == [1]


# --------------------------------------------------------------------------------- from_url


@pytest.mark.anyio
@pytest.mark.parametrize(("url", "expected"), [
    ("opensearch://localhost:9200/docs", ("http://localhost:9200", "docs", None, False)),
    ("opensearch://search.internal/docs", ("http://search.internal:9200", "docs", None, False)),
    ("opensearchs://admin:p%40ss@db.example:443/my-index?verify_certs=false&exact=true&timeout=3",
     ("https://db.example:443", "my-index", ("admin", "p@ss"), True)),
    ("opensearch://[::1]:9201/v6", ("http://[::1]:9201", "v6", None, False)),
])
async def test_from_url(url: str, expected: tuple) -> None:
    store = OpenSearchVectorStore.from_url(url)
    base, index, auth, exact = expected
    assert (store.url, store.index, store.exact) == (base, index, exact)
    assert store.name == f"{base}/{index}" and "p@ss" not in repr(store)
    assert store._client.transport.kwargs.get("http_auth") == auth
    await store.aclose()


@pytest.mark.parametrize("url", [
    "opensearch://localhost:9200", "opensearch://localhost:9200/", "opensearch://localhost:9200/a/b",
    "http://localhost:9200/docs", "opensearch://localhost:notaport/docs", "opensearch:///docs",
    "opensearch://localhost/docs?bogus=1", "opensearch://localhost/docs?exact=maybe", "opensearch://localhost/Docs",
    "opensearch://localhost/_docs", "opensearch://u:p@localhost:bad/docs",
])
def test_from_url_rejects_bad_urls(url: str) -> None:
    with pytest.raises(ConfigurationError):
        OpenSearchVectorStore.from_url(url)


def test_from_url_keyword_arguments_win() -> None:
    store = OpenSearchVectorStore.from_url("opensearch://localhost/docs?exact=true", exact=False, dimension=8)
    assert store.exact is False and store.dimension == 8


@pytest.mark.parametrize("kwargs", [{"url": "ftp://x/"}, {"url": "http://u:p@x:bad"}, {"index": "UPPER"}, {"index": "a b"}, {"dimension": 0},
                                    {"timeout": 0}, {"refresh": "sometimes"}])
def test_bad_constructor_arguments(kwargs: dict) -> None:
    with pytest.raises((ConfigurationError, InvalidParameterError)):
        OpenSearchVectorStore(**kwargs)


# ---------------------------------------------------------------------------------- imports


BLOCK = textwrap.dedent(
    """
    import importlib.abc, sys
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    sys.meta_path.insert(0, Block())
    """
)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTRAG_")}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)


def test_importing_the_module_does_not_import_the_sdk() -> None:
    result = _run(
        "import sys, fastrag, fastrag.vector_store.opensearch as m\n"
        "m.translate_filter({'equals': {'key': 'a', 'value': 1}})\n"
        "assert 'opensearchpy' not in sys.modules and 'aiohttp' not in sys.modules, sorted(sys.modules)\n"
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("blocked", ["opensearchpy", "aiohttp"])
def test_missing_sdk_names_the_extra(blocked: str) -> None:
    result = _run(
        f"BLOCKED = {{{blocked!r}}}\n" + BLOCK + textwrap.dedent(
            """
            from fastrag.errors import ConfigurationError
            from fastrag.vector_store.opensearch import OpenSearchVectorStore, translate_filter
            assert translate_filter({"equals": {"key": "a", "value": "b"}}) == {"term": {"f_str.a": "b"}}
            try:
                OpenSearchVectorStore(index="x")
            except ConfigurationError as exc:
                print(exc)
            else:
                raise SystemExit("no error")
            """
        )
    )
    assert result.returncode == 0, result.stderr
    assert 'pip install "fastrag-retrieval[opensearch]"' in result.stdout

