"""``fastrag serve``: the HTTP service over knowledge bases (fastrag.serve).

In-process tests drive the ASGI app through ``httpx.ASGITransport`` inside the app's lifespan; the
end-to-end test and the schemathesis fuzzing talk to a real ``fastrag serve`` subprocess on 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="fastrag serve needs the serve extra")

from fastrag.errors import ConfigurationError
from fastrag.knowledge_base import KnowledgeBase, SearchSettings
from fastrag.models import PARENT_ID, SOURCE_URI
from fastrag.serve import ServeLimits, create_app, load_config, parse_config
from fastrag.serve.config import TokenBinding
from fastrag.testing.fakes import HashingEmbedder
from fastrag.testing.faults import FaultyStore
from fastrag.vector_store.sqlite import SQLiteVectorStore

ROOT = Path(__file__).resolve().parents[1]

DOCS = [
    {"id": "bike-1", "content": "Bicycle repair: true the wheel and tension the spokes.",
     "metadata": {SOURCE_URI: "bikes/repair.md", PARENT_ID: "bikes/repair.md", "year": 2021}},
    {"id": "bike-2", "content": "Bicycle brakes need new pads every season.",
     "metadata": {SOURCE_URI: "bikes/brakes.md", "year": 2023}},
    {"id": "cat-1", "content": "Cats sleep sixteen hours a day.", "metadata": {SOURCE_URI: "pets/cats.md", "year": 2020}},
    {"id": "tea-1", "content": "Green tea is steeped at eighty degrees.", "metadata": {SOURCE_URI: "food/tea.md", "year": 2022}},
]


def kb(store: Any = None, **options: Any) -> KnowledgeBase:
    return KnowledgeBase(store if store is not None else SQLiteVectorStore(":memory:"), embedder=HashingEmbedder(), **options)


class Served:
    """An app inside its lifespan, with an in-process client."""

    def __init__(self, app: Any, client: httpx.AsyncClient) -> None:
        self.app, self.client = app, client

    async def add(self, name: str = "docs", docs: list[dict[str, Any]] = DOCS, **extra: Any) -> httpx.Response:
        return await self.client.post(f"/v1/knowledge-bases/{name}/documents", json={"documents": docs, **extra})

    async def retrieve(self, name: str = "docs", **body: Any) -> httpx.Response:
        return await self.client.post(f"/v1/knowledge-bases/{name}/retrieve", json=body)


async def served(knowledge_bases: dict[str, KnowledgeBase], **options: Any) -> AsyncIterator[Served]:
    app = create_app(knowledge_bases, **options)
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        yield Served(app, client)


@pytest.fixture
async def api() -> AsyncIterator[Served]:
    settings = SearchSettings(search_mode="hybrid", top_k=3)
    async for s in served({"docs": kb(settings=settings, fields={"year": "long"})}, limits=ServeLimits(max_top_k=50,
                          max_query_chars=200, max_body_bytes=4096, max_documents=10)):  # fmt: skip
        yield s


pytestmark = pytest.mark.anyio


# ------------------------------------------------------------------------------------------ retrieve


async def test_retrieve_returns_chunks_best_first_with_where_each_setting_came_from(api: Served) -> None:
    assert (await api.add()).json() == {"added": 4}
    response = await api.retrieve(query="bicycle repair spokes", fusion={"method": "rrf"}, top_k=2)
    assert response.status_code == 200, response.text
    body = response.json()
    results = body["results"]
    assert results[0]["chunk_id"] == "bike-1"
    assert len(results) == 2
    scores = [r["score"] for r in results]
    assert scores == sorted(scores, reverse=True)
    assert [r["rank"] for r in results] == [0, 1]
    first = results[0]
    assert first["document_id"] == "bikes/repair.md"  # the chunk's parent document
    assert first["source"] == "bikes/repair.md" and first["content"].startswith("Bicycle repair")
    assert first["metadata"]["year"] == 2021 and "score" not in first["metadata"]
    settings = body["settings"]
    assert settings["top_k"] == {"value": 2, "origin": "request"}  # request over knowledge base (3)
    assert settings["fusion"] == {"value": "rrf", "origin": "request"}
    assert settings["mode"] == {"value": "hybrid", "origin": "knowledge_base"}
    assert settings["rank_constant"] == {"value": 60, "origin": "default"}
    assert body["strategy"] == "hybrid" and body["partial"] is False and body["failed_branches"] == {}
    assert body["timings"]["total"] > 0
    # knowledge-base setting when the request leaves it out; a filter narrows
    response = await api.retrieve(query="bicycle", filter={"greaterThan": {"key": "year", "value": 2022}})
    assert [r["chunk_id"] for r in response.json()["results"]] == ["bike-2"]
    assert response.json()["settings"]["top_k"] == {"value": 3, "origin": "knowledge_base"}
    # the second page continues the first
    page2 = await api.retrieve(query="bicycle repair spokes", fusion={"method": "rrf"}, top_k=2, offset=2)
    assert [r["rank"] for r in page2.json()["results"]] == [2, 3]
    assert {r["chunk_id"] for r in page2.json()["results"]}.isdisjoint(r["chunk_id"] for r in results)


async def test_add_and_delete_documents(api: Served) -> None:
    await api.add()
    gone = await api.client.request("DELETE", "/v1/knowledge-bases/docs/documents", json={"ids": ["cat-1"]})
    assert gone.status_code == 200 and gone.json() == {"deleted": 1}
    by_filter = await api.client.request("DELETE", "/v1/knowledge-bases/docs/documents",
                                         json={"filter": {"equals": {"key": "year", "value": 2022}}})  # fmt: skip
    assert by_filter.json() == {"deleted": 1}
    left = await api.retrieve(query="cats tea bicycle", search_mode="keyword", top_k=10)
    assert sorted(r["chunk_id"] for r in left.json()["results"]) == ["bike-1", "bike-2"]
    nothing = await api.client.request("DELETE", "/v1/knowledge-bases/docs/documents", json={})
    assert nothing.status_code == 422


# ----------------------------------------------------------------------------------------- honesty


async def test_a_store_outage_is_a_503_naming_the_store_and_the_failed_branch() -> None:
    down_vector = FaultyStore(SQLiteVectorStore(":memory:"), methods={"search_vector"})
    async for api in served({"docs": kb(down_vector)}):
        assert (await api.add()).status_code == 200
        response = await api.retrieve(query="bicycle")  # hybrid: the dense branch fails
        assert response.status_code == 503, response.text
        body = response.json()
        assert body["error"] == "retrieval_failed" and body["retrieval_failed"] is True
        assert body["store"] == "faulty://store"
        assert set(body["failed_branches"]) == {"vector"}
        assert body["failed_branches"]["vector"]["error"] == "BackendUnavailableError"
        # BM25 alone still answers, from the same store
        keyword = await api.retrieve(query="bicycle", search_mode="keyword")
        assert keyword.status_code == 200 and keyword.json()["results"]
        assert (await api.client.get("/readyz")).status_code == 200  # count still answers

    # a knowledge base configured to answer from the surviving branch says which branch it lost
    degraded = FaultyStore(SQLiteVectorStore(":memory:"), methods={"search_vector"})
    async for api in served({"docs": kb(degraded, on_branch_error="partial")}):
        await api.add()
        response = await api.retrieve(query="bicycle wheel")
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["partial"] is True and set(body["failed_branches"]) == {"vector"}
        assert body["failed_branches"]["vector"]["store"] == "faulty://store"
        assert body["results"] and all(set(r["metadata"]["branches"]) == {"bm25"} for r in body["results"])

    down = FaultyStore(SQLiteVectorStore(":memory:"))
    async for api in served({"docs": kb(down)}):
        for mode in ("vector", "keyword", "hybrid", "auto"):
            response = await api.retrieve(query="bicycle", search_mode=mode)
            assert response.status_code == 503, (mode, response.text)
            assert response.json()["retrieval_failed"] is True and response.json()["store"] == "faulty://store"
        ready = await api.client.get("/readyz")
        assert ready.status_code == 503 and "docs" in ready.json()["message"]
        write = await api.add()
        assert write.status_code == 503 and write.json()["store"] == "faulty://store"
        delete = await api.client.request("DELETE", "/v1/knowledge-bases/docs/documents", json={"ids": ["bike-1"]})
        assert delete.status_code == 503 and delete.json()["error"] == "write_failed"
        assert (await api.client.get("/healthz")).json() == {"status": "ok"}


async def test_a_store_that_hangs_is_a_503_after_the_request_timeout() -> None:
    stalled = FaultyStore(SQLiteVectorStore(":memory:"), methods={"search_vector", "search_text"}, delay=30.0,
                          failures=0)  # fmt: skip
    async for api in served({"docs": kb(stalled)}, limits=ServeLimits(request_timeout=0.3)):
        await api.add()
        started = time.perf_counter()
        response = await api.retrieve(query="bicycle")
        assert time.perf_counter() - started < 10
        assert response.status_code == 503, response.text
        assert response.json()["retrieval_failed"] is True and "request_timeout" in response.json()["message"]
        assert response.json()["store"] == "FaultyStore"  # an injected store: its type (a URL otherwise)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "query"),
        ({"query": ""}, "query"),
        ({"query": "x" * 201}, "query"),  # the service's max_query_chars (200)
        ({"query": "   "}, "query"),  # blank: refused by the SDK, named here
        ({"query": "bike", "top_k": 0}, "top_k"),
        ({"query": "bike", "top_k": 51}, "top_k"),  # the service's max_top_k (50)
        ({"query": "bike", "top_k": "5"}, "top_k"),
        ({"query": "bike", "offset": -1}, "offset"),
        ({"query": "bike", "top_k": 50, "offset": 9_990}, "offset"),
        ({"query": "bike", "search_mode": "semantic"}, "search_mode"),
        ({"query": "bike", "filter": {"near": {"key": "year", "value": 1}}}, "filter"),
        ({"query": "bike", "filter": {"equals": {"key": "colour", "value": "red"}}}, "filter"),  # undeclared
        ({"query": "bike", "filter": {"greaterThan": {"key": "year", "value": "recent"}}}, "filter"),
        ({"query": "bike", "fusion": {"vector_weight": -1}}, "fusion"),
        ({"query": "bike", "fusion": {"vector_weight": 0, "keyword_weight": 0}}, "fusion"),
        ({"query": "bike", "user_id": True}, "user_id"),
        ({"query": "bike", "user_id": ""}, "user_id"),
        ({"query": "bike", "colour": "red"}, "colour"),
    ],
)
async def test_bad_input_is_a_422_naming_the_field(api: Served, body: dict[str, Any], field: str) -> None:
    response = await api.retrieve(**body)
    assert response.status_code == 422, response.text
    payload = response.json()
    assert payload["error"] == "invalid_request"
    assert any(field in [str(p) for p in d["loc"]] for d in payload["detail"]), payload


async def test_rerank_without_a_configured_model_reranks_with_the_default_reranker(api: Served) -> None:
    await api.add()
    response = await api.retrieve(query="bicycle wheel", rerank={"enabled": True})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["strategy"] == "hybrid+rerank"
    assert body["settings"]["rerank_model"] == {"value": "embedder", "origin": "default"}  # the knowledge base's embedder


async def test_values_no_store_can_keep_are_a_422_not_a_500(api: Served) -> None:
    # Python's JSON parser reads NaN and lone surrogates; the service refuses them before any store sees them
    for raw in ('{"query": "bike", "filter": {"equals": {"key": "year", "value": NaN}}}',
                '{"query": "bike\\ud800"}',
                '{"documents": [{"id": "x", "content": "a\\udfff"}]}'):  # fmt: skip
        path = "documents" if "documents" in raw else "retrieve"
        response = await api.client.post(f"/v1/knowledge-bases/docs/{path}", content=raw,
                                         headers={"content-type": "application/json"})  # fmt: skip
        assert response.status_code == 422, (raw, response.text)
    bad_json = await api.client.post("/v1/knowledge-bases/docs/retrieve", content="{", headers={"content-type": "application/json"})
    assert bad_json.status_code == 422


async def test_limits_on_body_size_and_batch_size(api: Served) -> None:
    big = await api.retrieve(query="bike", filter={"equals": {"key": "source_uri", "value": "x" * 5000}})
    assert big.status_code == 413 and big.json()["error"] == "body_too_large"
    many = [{"id": f"d{i}", "content": "c"} for i in range(11)]  # max_documents is 10
    response = await api.add(docs=many)
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "documents"]
    # a body that lies about its size is cut off all the same
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"query": "' + b"x" * 3000
        yield b"y" * 3000 + b'"}'

    streamed = await api.client.post("/v1/knowledge-bases/docs/retrieve", content=chunks(),
                                      headers={"content-type": "application/json"})  # fmt: skip
    assert streamed.status_code == 413


async def test_unknown_knowledge_base_is_a_404(api: Served) -> None:
    response = await api.retrieve("nope", query="bike")
    assert response.status_code == 404 and response.json()["error"] == "not_found"


# ------------------------------------------------------------------------------------------ tenancy


def token(label: str, secret: str, **scope: Any) -> TokenBinding:
    kbs = scope.pop("knowledge_bases", None)
    return TokenBinding(label=label, digest=hashlib.sha256(secret.encode()).digest(), scope=scope,
                        knowledge_bases=None if kbs is None else frozenset(kbs))  # fmt: skip


async def test_tokens_bind_tenants_a_caller_cannot_name_another_tenant() -> None:
    tokens = (token("alice", "alice-secret", user_id="alice"), token("bob", "bob-secret", user_id="bob"),
              token("ops", "ops-secret"), token("other", "other-secret", knowledge_bases=["other"]))  # fmt: skip
    async for api in served({"docs": kb(), "other": kb()}, tokens=tokens):
        def auth(secret: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {secret}"}

        url = "/v1/knowledge-bases/docs"
        doc = [{"id": "note", "content": "alice's private bicycle notes"}]
        missing = await api.client.post(f"{url}/retrieve", json={"query": "bicycle"})
        assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
        wrong = await api.client.post(f"{url}/retrieve", json={"query": "bicycle"}, headers=auth("guess"))
        assert wrong.status_code == 401
        # alice writes without naming a tenant: the token's binding applies
        added = await api.client.post(f"{url}/documents", json={"documents": doc}, headers=auth("alice-secret"))
        assert added.status_code == 200
        # alice cannot name bob, neither to read nor to write nor to delete
        for method, path, body in (("POST", "retrieve", {"query": "bicycle", "user_id": "bob"}),
                                   ("POST", "documents", {"documents": doc, "user_id": "bob"}),
                                   ("DELETE", "documents", {"ids": ["note"], "user_id": "bob"})):  # fmt: skip
            refused = await api.client.request(method, f"{url}/{path}", json=body, headers=auth("alice-secret"))
            assert refused.status_code == 403, (path, refused.text)
            assert refused.json()["error"] == "forbidden"
        # naming herself is fine; bob sees nothing of hers
        mine = await api.client.post(f"{url}/retrieve", json={"query": "bicycle", "user_id": "alice"},
                                     headers=auth("alice-secret"))  # fmt: skip
        assert [r["chunk_id"] for r in mine.json()["results"]] == ["note"]
        bobs = await api.client.post(f"{url}/retrieve", json={"query": "bicycle"}, headers=auth("bob-secret"))
        assert bobs.status_code == 200 and bobs.json()["results"] == []
        # an unbound token may name any tenant
        ops = await api.client.post(f"{url}/retrieve", json={"query": "bicycle", "user_id": "alice"},
                                    headers=auth("ops-secret"))  # fmt: skip
        assert [r["chunk_id"] for r in ops.json()["results"]] == ["note"]
        # a token limited to other knowledge bases
        other = await api.client.post(f"{url}/retrieve", json={"query": "bicycle"}, headers=auth("other-secret"))
        assert other.status_code == 403
        assert (await api.client.post("/v1/knowledge-bases/other/retrieve", json={"query": "bicycle"},
                                      headers=auth("other-secret"))).status_code == 200  # fmt: skip
        # health needs no token
        assert (await api.client.get("/healthz")).status_code == 200


def test_token_configuration(tmp_path: Path) -> None:
    digest = hashlib.sha256(b"s3cret").hexdigest()
    config = parse_config({
        "serve": {"max_top_k": 20, "tokens": {"alice": {"token_sha256": digest, "user_id": "alice"},
                                              "ops": {"token_env": "OPS_TOKEN", "knowledge_bases": ["docs"]}}},
        "knowledge_bases": {"docs": {"store": "sqlite:///:memory:"}},
    }, environ={"OPS_TOKEN": "ops"})  # fmt: skip
    assert config.limits.max_top_k == 20
    alice, ops = config.tokens
    assert alice.matches("s3cret") and not alice.matches("s3cret ") and dict(alice.scope) == {"user_id": "alice"}
    assert ops.matches("ops") and ops.knowledge_bases == frozenset({"docs"})
    for bad, words in (
        ({"serve": {"tokens": {"a": {"token_env": "UNSET_VARIABLE"}}}}, "UNSET_VARIABLE"),
        ({"serve": {"tokens": {"a": {"token_sha256": "abc"}}}}, "64 hex digits"),
        ({"serve": {"tokens": {"a": {"token_sha256": digest, "user_id": True}}}}, "user_id"),
        ({"serve": {"tokens": {"a": {"token_sha256": digest, "knowledge_bases": ["nope"]}}}}, "nope"),
        ({"serve": {"max_top_k": 0}}, "max_top_k"),
        ({"serve": {"colour": 1}}, "colour"),
        ({"serve": {"request_timeout": 0}}, "request_timeout"),
    ):
        with pytest.raises(ConfigurationError, match=words):
            parse_config({**bad, "knowledge_bases": {"docs": {}}}, environ={})
    with pytest.raises(ConfigurationError, match="no knowledge base"):
        parse_config({}, environ={})
    path = tmp_path / "kb.toml"
    path.write_text('[knowledge_bases."bad name"]\n', encoding="utf-8")
    with pytest.raises(ConfigurationError, match="kb.toml"):
        load_config(path)


# ------------------------------------------------------------------------------ logs, metrics, schema


async def test_access_log_metrics_and_openapi(api: Served, caplog: pytest.LogCaptureFixture) -> None:
    await api.add()
    with caplog.at_level(logging.INFO, logger="fastrag.serve.access"):
        await api.retrieve(query="bicycle")
    records = [json.loads(r.getMessage()) for r in caplog.records if r.name == "fastrag.serve.access"]
    assert len(records) == 1
    record = records[0]
    assert record["status"] == 200 and record["knowledge_base"] == "docs" and record["strategy"] == "hybrid"
    assert {"total", "vector", "bm25", "fusion"} <= set(record["timings"]) and record["seconds"] > 0
    metrics = (await api.client.get("/metrics")).text
    assert 'fastrag_http_requests_total{method="POST",route="/v1/knowledge-bases/{name}/retrieve",status="200"} 1.0' in metrics
    schema = (await api.client.get("/openapi.json")).json()
    assert {"/v1/knowledge-bases/{name}/retrieve", "/v1/knowledge-bases/{name}/documents", "/healthz",
            "/readyz"} <= set(schema["paths"])  # fmt: skip
    assert "/v1/knowledge-bases/{name}/ask" not in schema["paths"]  # no LLM configured
    (name,) = [p for p in schema["paths"]["/v1/knowledge-bases/{name}/retrieve"]["post"]["parameters"]
               if p["name"] == "name"]  # fmt: skip
    assert name["schema"]["enum"] == ["docs"]  # the served knowledge bases, so clients and fuzzers use them
    # JSON has one number type: 3.0 is the integer 3 (as JSON Schema's "integer" says); "3" is not
    assert (await api.retrieve(query="bicycle", top_k=3.0)).json()["settings"]["top_k"]["value"] == 3
    assert (await api.retrieve(query="bicycle", top_k=2.5)).status_code == 422


async def test_ask_answers_with_citations_when_an_llm_is_configured() -> None:
    class ScriptedLLM:
        def __init__(self) -> None:
            self.calls = 0

        async def chat(self, messages: Any, *, temperature: Any = None, max_tokens: Any = None) -> str:
            self.calls += 1
            return "Tension the spokes [1]."

    llm = ScriptedLLM()
    async for api in served({"docs": kb()}, llms={"docs": llm}):
        await api.add()
        response = await api.client.post("/v1/knowledge-bases/docs/ask", json={"question": "how to repair a bicycle wheel?", "top_k": 2})
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["status"] == "answered" and body["grounded"] is True and llm.calls == 1
        assert body["citations"][0]["number"] == 1 and body["citations"][0]["chunk_id"] == body["sources"][0]["chunk_id"]
    down = FaultyStore(SQLiteVectorStore(":memory:"), methods={"search_vector", "search_text", "count"})
    async for api in served({"docs": kb(down)}, llms={"docs": llm}):
        response = await api.client.post("/v1/knowledge-bases/docs/ask", json={"question": "bicycle?"})
        assert response.status_code == 503 and response.json()["retrieval_failed"] is True
        assert llm.calls == 1  # the LLM is not asked when retrieval failed


# ------------------------------------------------------------------------------ the real server


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``fastrag serve`` as a subprocess on 127.0.0.1 (the shipped embedder, a SQLite file)."""
    work = tmp_path_factory.mktemp("serve")
    config = work / "knowledge_bases.toml"
    config.write_text(
        f'[serve]\nmax_top_k = 50\n\n[knowledge_bases.docs]\nstore = "sqlite:///{work / "kb.db"}"\n'
        'fields = { year = "long" }\n',
        encoding="utf-8",
    )
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "fastrag.cli", "serve", "--config", str(config), "--port", str(port)],
                            cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"fastrag serve did not start:\n{proc.communicate()[0][-3000:]}")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            out = proc.communicate(timeout=20)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            out = proc.communicate()[0]
        # a clean shutdown: the lifespan closed the knowledge base
        assert "Application shutdown complete" in out, out[-3000:]


def test_end_to_end_against_fastrag_serve(server: str) -> None:
    with httpx.Client(base_url=server, timeout=30) as client:
        assert client.post("/v1/knowledge-bases/docs/documents", json={"documents": DOCS}).json() == {"added": 4}
        response = client.post("/v1/knowledge-bases/docs/retrieve", json={"query": "bicycle brakes pads", "top_k": 2})
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["results"][0]["chunk_id"] == "bike-2" and body["results"][0]["source"] == "bikes/brakes.md"
        assert body["settings"]["top_k"]["origin"] == "request"
        assert client.post("/v1/knowledge-bases/docs/retrieve", json={"query": "x", "top_k": 51}).status_code == 422
        assert client.get("/readyz").json()["knowledge_bases"] == {"docs": "ok"}


def test_fuzzing_the_openapi_schema_finds_no_server_error(server: str) -> None:
    """schemathesis generates valid and invalid requests for every operation; none may get a 5xx."""
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import Unsatisfiable

    schema = schemathesis.openapi.from_url(f"{server}/openapi.json")
    modes = (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE)
    failures: list[str] = []
    seen = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in modes:
            @settings(max_examples=8, deadline=None, database=None, derandomize=True,
                      suppress_health_check=list(HealthCheck))  # fmt: skip
            @given(case=operation.as_strategy(generation_mode=mode))
            def check(case: Any) -> None:
                nonlocal seen
                seen += 1
                response = case.call(base_url=server, timeout=30)
                if response.status_code >= 500:
                    failures.append(f"{case.method} {case.formatted_path} {case.body!r}: "
                                    f"{response.status_code} {response.text[:300]}")  # fmt: skip

            try:
                check()
            except Unsatisfiable:
                assert mode is schemathesis.GenerationMode.NEGATIVE  # nothing invalid to make (no inputs)
    assert seen >= 40, seen  # every operation, valid and invalid bodies
    assert not failures, "\n".join(failures[:10])


def test_cli_exit_status_for_a_bad_configuration_and_an_unreachable_store(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    bad = tmp_path / "bad.toml"
    bad.write_text('[knowledge_bases.docs]\ncolour = "red"\n', encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "fastrag.cli", "serve", "--config", str(bad)], env=env,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 1 and "knowledge_bases.docs" in proc.stderr and "colour" in proc.stderr
    pytest.importorskip("psycopg", reason="the unreachable store is a PostgreSQL URL (postgres extra)")
    down = tmp_path / "down.toml"
    down.write_text('[knowledge_bases.docs]\nstore = "postgresql://postgres:secret@127.0.0.1:1/postgres"\n', encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "fastrag.cli", "serve", "--config", str(down), "--port", "0"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "knowledge base 'docs' could not be opened" in proc.stderr and "127.0.0.1" in proc.stderr
    assert "secret" not in proc.stderr


def test_without_the_serve_extra_the_command_names_the_install(tmp_path: Path) -> None:
    config = tmp_path / "kb.toml"
    config.write_text('[knowledge_bases.docs]\nstore = "sqlite:///:memory:"\n', encoding="utf-8")
    code = ("import sys; sys.modules['fastapi'] = None; from fastrag.cli import main; "
            f"sys.argv = ['fastrag', 'serve', '--config', {str(config)!r}]; main()")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1 and 'pip install "fastrag-retrieval[serve]"' in proc.stderr, proc.stderr


def test_on_branch_error_is_a_knowledge_base_setting() -> None:
    assert KnowledgeBase.from_config({"on_branch_error": "partial"}).on_branch_error == "partial"
    assert KnowledgeBase.from_config({}).on_branch_error == "raise"
    with pytest.raises(ConfigurationError, match="on_branch_error"):
        KnowledgeBase.from_config({"on_branch_error": "ignore"})


def test_the_docker_compose_configuration_parses() -> None:
    config = load_config(ROOT / "deploy" / "knowledge_bases.toml")
    assert set(config.knowledge_bases) == {"docs"}
    KnowledgeBase.from_config(config.knowledge_bases["docs"])  # valid, not opened


async def test_score_thresholds_in_a_request_cut_the_results_and_are_reported(api: Served) -> None:
    await api.add()
    query = "bicycle repair spokes"
    everything = (await api.retrieve(query=query, search_mode="keyword", top_k=10)).json()["results"]
    assert [r["chunk_id"] for r in everything] == ["bike-1", "bike-2"]  # BM25: only the bicycle chunks match
    cut = (everything[0]["score"] + everything[1]["score"]) / 2
    kept = await api.retrieve(query=query, search_mode="keyword", top_k=10, min_score=cut)
    assert kept.status_code == 200, kept.text
    assert [r["chunk_id"] for r in kept.json()["results"]] == ["bike-1"] and kept.json()["knowledge_base"] == "docs"
    assert kept.json()["settings"]["min_score"] == {"value": cut, "origin": "request"}
    assert (await api.retrieve(query=query)).json()["settings"]["min_score"] == {"value": None, "origin": "default"}
    fused = (await api.retrieve(query=query, top_k=10)).json()["results"]
    relative = (await api.retrieve(query=query, top_k=10, min_relative_score=0.5)).json()["results"]
    expected = [r["chunk_id"] for r in fused if r["score"] >= 0.5 * fused[0]["score"]]
    assert [r["chunk_id"] for r in relative] == expected and 1 <= len(expected) < len(fused)
    branch = (await api.retrieve(query=query, top_k=10, min_keyword_score=cut, min_vector_score=1.0)).json()["results"]
    assert [r["chunk_id"] for r in branch] == ["bike-1"]  # no cosine reaches 1.0: only BM25's best is fused


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"min_score": 0.5}, "min_score", "min_relative_score"),  # the knowledge base searches hybrid
        ({"search_mode": "keyword", "min_relative_score": 0.5}, "min_relative_score", "no fusion"),
        ({"min_relative_score": 0}, "min_relative_score", "greater than 0"),
        ({"search_mode": "keyword", "min_score": "high"}, "min_score", "valid number"),
    ],
)
async def test_a_threshold_that_cannot_apply_is_a_422_naming_it(api: Served, body: dict[str, Any], field: str,
                                                                says: str) -> None:  # fmt: skip
    response = await api.retrieve(query="bicycle", **body)
    assert response.status_code == 422, response.text
    payload = response.json()
    assert any(field in [str(p) for p in d["loc"]] for d in payload["detail"]), payload
    assert says in payload["message"] + json.dumps(payload["detail"])
