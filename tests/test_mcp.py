"""``fastrag mcp`` (fastrag.mcp), driven by the official SDK's own client: a real ``fastrag mcp`` process over
stdio and over streamable HTTP on 127.0.0.1, over a real SQLite knowledge base; bearer tokens bound to tenants
as ``fastrag serve`` binds them; a store that goes down (an OpenSearch emulator, stopped) is a tool error naming
it. In-process checks (the SDK's in-memory transport) cover a partial search, the request timeout, the spans
and the configuration errors."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

pytest.importorskip("mcp", reason='fastrag mcp needs the mcp extra: pip install "fastrag-retrieval[mcp]"')

import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from fastrag import Document
from fastrag.errors import ConfigurationError
from fastrag.knowledge_base import KnowledgeBase, SearchSettings
from fastrag.mcp import create_server, server_from_config, tool_name
from fastrag.serve.config import TokenBinding, parse_config
from fastrag.testing.faults import FaultyStore
from fastrag.vector_store.sqlite import SQLiteVectorStore

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "how do I repair a bicycle wheel?"
TOKENS = {"alice": "alice-secret-token", "bob": "bob-secret-token", "ops": "ops-secret-token"}
SHARED = [
    Document(id="wheel", content="Bicycle repair: true the wheel and tension the spokes evenly.",
             metadata={"source_uri": "bikes/wheel.md", "title": "Wheel"}),
    Document(id="brakes", content="Bicycle brakes need new pads every season; repair cables yearly.",
             metadata={"source_uri": "bikes/brakes.md", "title": "Brakes"}),
    Document(id="tea", content="Green tea is steeped at eighty degrees for two minutes.",
             metadata={"source_uri": "food/tea.md", "title": "Tea"}),
]
TENANT = {
    "alice": [Document(id="a-note", content="Alice's note: repair the bicycle wheel with a spoke key.",
                       metadata={"source_uri": "notes/alice.md", "title": "Alice"})],
    "bob": [Document(id="b-note", content="Bob's note: the bicycle wheel repair needs a truing stand.",
                     metadata={"source_uri": "notes/bob.md", "title": "Bob"})],
}


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@pytest.fixture(scope="module")
def docs_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("mcp") / "docs.db"

    async def build() -> None:
        async with KnowledgeBase(f"sqlite:///{path}") as kb:
            await kb.add_documents(SHARED)
            for user, docs in TENANT.items():
                await kb.add_documents(docs, user_id=user)

    anyio.run(build)
    return path


@pytest.fixture
def remote(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A knowledge base whose BM25 store is an OpenSearch server (the osmem-server emulator), populated;
    ``stop()`` takes that store down."""
    pytest.importorskip("osmem_server", reason="osmem-server is not installed (pip install osmem-server)")
    from fastrag.testing.opensearch_emulator import opensearch_emulator

    with contextlib.ExitStack() as stack:
        url = stack.enter_context(opensearch_emulator())
        table = {"store": f"sqlite:///{tmp_path / 'remote.db'}", "lexical_store": url.replace("http://", "opensearch://")
                 + "/remote", "mode": "keyword"}  # fmt: skip

        async def build() -> None:
            async with KnowledgeBase.from_config(table) as kb:
                await kb.add_documents(SHARED)

        anyio.run(build)
        yield {"table": table, "url": url + "/remote", "stop": stack.close}


def _config(path: Path, docs_db: Path, remote: dict[str, Any] | None, **serve: Any) -> Path:
    lines = ["[serve]", "request_timeout = 20.0"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in serve.items()]
    lines += ["", "[serve.tokens.alice]", f'token_sha256 = "{_sha(TOKENS["alice"])}"', 'user_id = "alice"',
              "", "[serve.tokens.bob]", f'token_sha256 = "{_sha(TOKENS["bob"])}"', 'user_id = "bob"',
              'knowledge_bases = ["docs"]', "", "[serve.tokens.ops]", f'token_sha256 = "{_sha(TOKENS["ops"])}"',
              "", "[knowledge_bases.docs]", f'store = "sqlite:///{docs_db}"', "top_k = 5"]  # fmt: skip
    if remote is not None:
        lines += ["", "[knowledge_bases.remote]", *(f"{k} = {json.dumps(v)}" for k, v in remote["table"].items())]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FASTRAG_", "OTEL_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _hits(answer: dict[str, Any]) -> list[tuple[str, int, float]]:
    return [(r["id"], r["rank"], r["score"]) for r in answer["results"]]


async def _reference(docs_db: Path, question: str = QUESTION, **call: Any) -> list[tuple[str, int, float]]:
    async with KnowledgeBase.from_config({"store": f"sqlite:///{docs_db}", "top_k": 5}) as kb:
        response = await kb.search_result(question, **call)
    assert response.error is None
    return [(d.id, d.rank, d.score) for d in response.documents]


def _answer(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    [block] = result.content
    assert json.loads(block.text) == result.structured_content
    return result.structured_content


def _error_text(result: Any) -> str:
    assert result.is_error, result.structured_content
    [block] = result.content
    return block.text


# ------------------------------------------------------------------------------------------------ stdio


async def test_stdio_one_tool_per_knowledge_base_with_as_tools_schema_answering_like_search_result(
    tmp_path: Path, docs_db: Path, remote: dict[str, Any]
) -> None:
    config = _config(tmp_path / "knowledge_bases.toml", docs_db, remote)
    params = StdioServerParameters(command=sys.executable, args=["-m", "fastrag.cli", "mcp", "--config", str(config)],
                                   env=_env(), cwd=str(tmp_path))  # fmt: skip
    with open(tmp_path / "stderr.log", "w") as errlog:  # noqa: SIM117 - the log outlives the client
        async with Client(_stdio(params, errlog)) as client:
            listed = (await client.list_tools()).tools
            assert [t.name for t in listed] == ["search_docs", "search_remote"]
            expected = KnowledgeBase.from_config({"store": f"sqlite:///{docs_db}", "top_k": 5}).as_tool(name="search_docs")
            docs_tool = listed[0]
            assert docs_tool.input_schema == expected.parameters
            assert docs_tool.description.startswith(expected.description)
            assert docs_tool.annotations is not None and docs_tool.annotations.read_only_hint is True

            # over stdio the caller is unscoped: the tenants' notes are in the index it searches (under their
            # stored ids, which name the tenant)
            answer = _answer(await client.call_tool("search_docs", {"query": QUESTION}))
            assert _hits(answer) == await _reference(docs_db)
            assert answer["complete"] is True and answer["failed_branches"] == {} and answer["partial"] is False
            assert {"user_id=alice::a-note", "user_id=bob::b-note"} <= {r["id"] for r in answer["results"]}
            page = _answer(await client.call_tool("search_docs", {"query": QUESTION, "top_k": 2, "offset": 1}))
            assert _hits(page) == (await _reference(docs_db, top_k=2, offset=1))

            # wrong arguments: a tool error the model can correct from
            text = _error_text(await client.call_tool("search_docs", {"query": QUESTION, "filter": {"near": {}}}))
            assert text.startswith("FilterError:")
            text = _error_text(await client.call_tool("search_docs", {"query": QUESTION, "top_k": 1000}))
            assert "top_k" in text
            with pytest.raises(MCPError, match="unknown tool 'search_nothing'"):
                await client.call_tool("search_nothing", {"query": QUESTION})

            # the remote knowledge base answers, then its store goes down: an error naming it, not "no match"
            found = _answer(await client.call_tool("search_remote", {"query": QUESTION}))
            assert found["results"] and found["results"][0]["id"] == "wheel"
            remote["stop"]()
            text = _error_text(await client.call_tool("search_remote", {"query": QUESTION}))
            assert text.startswith(f"retrieval failed: the store {remote['url']} failed: ")
            assert "BackendTemporarilyUnavailableError" in text or "BackendUnavailableError" in text
            # the other knowledge base is unaffected
            assert _hits(_answer(await client.call_tool("search_docs", {"query": QUESTION}))) == await _reference(docs_db)


@contextlib.asynccontextmanager
async def _stdio(params: StdioServerParameters, errlog: Any) -> AsyncIterator[Any]:
    from mcp.client.stdio import stdio_client

    async with stdio_client(params, errlog=errlog) as streams:
        yield streams


# ------------------------------------------------------------------------------------------------- http


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def http_server(tmp_path: Path, docs_db: Path, remote: dict[str, Any]) -> Iterator[dict[str, Any]]:
    config = _config(tmp_path / "knowledge_bases.toml", docs_db, remote)
    port = _free_port()
    log = open(tmp_path / "server.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "fastrag.cli", "mcp", "--config", str(config), "--transport", "http",
                             "--port", str(port)], cwd=tmp_path, env=_env(), stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx.get(url, timeout=2)
                break
            except httpx.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    raise AssertionError((tmp_path / "server.log").read_text()) from None
                time.sleep(0.2)
        yield {"url": url, "remote": remote, "log": tmp_path / "server.log"}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _as(url: str, token: str | None) -> Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return Client(streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers, timeout=60)))


async def test_http_binds_bearer_tokens_to_tenants_as_serve_does(http_server: dict[str, Any], docs_db: Path) -> None:
    url = http_server["url"]
    # no token, or an unknown one: 401 before any MCP message is read
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    headers = {"Accept": "application/json, text/event-stream"}
    for auth in ({}, {"Authorization": "Bearer not-a-token"}):
        refused = httpx.post(url, json=initialize, headers={**headers, **auth}, timeout=10)
        assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer")
    with pytest.raises(BaseException):  # noqa: B017, PT011 - the SDK client fails to connect (its error type varies)
        async with _as(url, None) as client:
            await client.list_tools()

    async with _as(url, TOKENS["alice"]) as alice:
        assert [t.name for t in (await alice.list_tools()).tools] == ["search_docs", "search_remote"]
        answer = _answer(await alice.call_tool("search_docs", {"query": QUESTION}))
        assert _hits(answer) == await _reference(docs_db, user_id="alice")
        assert [r["id"] for r in answer["results"]] == ["a-note"]  # her notes only: never bob's, nor the shared ones
        # she cannot name another tenant: not as an argument, not in a filter
        text = _error_text(await alice.call_tool("search_docs", {"query": QUESTION, "user_id": "bob"}))
        assert text.startswith("UnknownParameterError:") and "user_id" in text
        bob_filter = {"equals": {"key": "user_id", "value": "bob"}}
        text = _error_text(await alice.call_tool("search_docs", {"query": QUESTION, "filter": bob_filter}))
        assert text.startswith("FilterError:") and "user_id" in text
        alice_schema = {t.name: t.input_schema for t in (await alice.list_tools()).tools}["search_docs"]
        assert "user_id" in alice_schema["$defs"]["key"]["not"]["enum"]

    async with _as(url, TOKENS["bob"]) as bob:
        assert [t.name for t in (await bob.list_tools()).tools] == ["search_docs"]  # knowledge_bases = ["docs"]
        answer = _answer(await bob.call_tool("search_docs", {"query": QUESTION}))
        assert [r["id"] for r in answer["results"]] == ["b-note"]
        with pytest.raises(MCPError, match="unknown tool 'search_remote'"):
            await bob.call_tool("search_remote", {"query": QUESTION})

    async with _as(url, TOKENS["ops"]) as ops:  # a token without a tenant: the whole index, as in fastrag serve
        answer = _answer(await ops.call_tool("search_docs", {"query": QUESTION}))
        assert _hits(answer) == await _reference(docs_db)
        assert {"user_id=alice::a-note", "user_id=bob::b-note", "wheel"} <= {r["id"] for r in answer["results"]}
        http_server["remote"]["stop"]()
        text = _error_text(await ops.call_tool("search_remote", {"query": QUESTION}))
        assert text.startswith(f"retrieval failed: the store {http_server['remote']['url']} failed: ")


# ------------------------------------------------------------------------------------------ in process


async def test_a_partial_search_is_a_result_marked_incomplete_not_an_error(docs_db: Path) -> None:
    down = FaultyStore(SQLiteVectorStore(str(docs_db)), methods={"search_vector"})
    served = create_server({"docs": KnowledgeBase(down, on_branch_error="partial")})
    async with Client(served.server) as client:
        answer = _answer(await client.call_tool("search_docs", {"query": QUESTION}))
    assert answer["partial"] is True and answer["complete"] is False
    assert list(answer["failed_branches"]) == ["vector"]
    assert answer["failed_branches"]["vector"].startswith("BackendUnavailableError: ")
    assert answer["results"]  # BM25's


async def test_a_retrieval_past_request_timeout_is_a_tool_error_naming_the_store(docs_db: Path) -> None:
    from fastrag.serve.config import ServeLimits

    slow = FaultyStore(SQLiteVectorStore(str(docs_db)), failures=0, delay=30.0, methods={"search_text"})
    served = create_server({"docs": KnowledgeBase(slow, settings=SearchSettings(mode="keyword"))},
                           limits=ServeLimits(request_timeout=0.3))
    async with Client(served.server) as client:
        started = time.monotonic()
        text = _error_text(await client.call_tool("search_docs", {"query": QUESTION}))
    assert text == "retrieval failed: it took longer than request_timeout (0.3 s); store FaultyStore"
    assert time.monotonic() - started < 20


async def test_each_search_span_names_its_knowledge_base(docs_db: Path) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from fastrag import tracing

    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    previous = tracing.use_tracer_provider(provider)
    try:
        served = create_server({"docs": KnowledgeBase(f"sqlite:///{docs_db}")})
        async with Client(served.server) as client:
            _answer(await client.call_tool("search_docs", {"query": QUESTION, "top_k": 2}))
    finally:
        tracing.use_tracer_provider(previous)
    [search] = [s for s in exporter.get_finished_spans() if s.name == "retrieval"]
    assert search.attributes["gen_ai.data_source.id"] == "docs"
    assert search.attributes["fastrag.search.hits"] == 2


def test_configurations_no_caller_could_search_are_refused_at_startup(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'x.db'}"
    with pytest.raises(ConfigurationError, match="knowledge_bases.private cannot be served to a caller without a tenant"):
        create_server({"private": KnowledgeBase(db, require_scope=True)})
    unbound = TokenBinding(label="ops", digest=hashlib.sha256(b"t").digest())
    bound = TokenBinding(label="alice", digest=hashlib.sha256(b"a").digest(), scope={"user_id": "alice"})
    with pytest.raises(ConfigurationError, match=r"cannot be served to serve\.tokens\.ops"):
        create_server({"private": KnowledgeBase(db, require_scope=True)}, tokens=(bound, unbound))
    assert create_server({"private": KnowledgeBase(db, require_scope=True)}, tokens=(bound,)).tokens == (bound,)
    with pytest.raises(ConfigurationError, match="the same tool name 'search_a_b'"):
        create_server({"a.b": KnowledgeBase(db), "a_b": KnowledgeBase(db)})
    with pytest.raises(ConfigurationError, match="at most 64 characters"):
        tool_name("x" * 60)
    # stdio ignores the tokens (its one caller is the process that started it), HTTP requires them
    config = parse_config({"serve": {"tokens": {"ops": {"token_sha256": _sha("t")}}},
                           "knowledge_bases": {"docs": {"store": db}}})  # fmt: skip
    assert server_from_config(config).tokens == ()
    assert [t.label for t in server_from_config(config, transport="http").tokens] == ["ops"]


def test_the_command_reports_a_bad_configuration_and_a_missing_extra(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[knowledge_bases.docs]\nstore = "sqlite:///x.db"\nmode = "sideways"\n', encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "fastrag.cli", "mcp", "--config", str(bad)], cwd=tmp_path,
                          env=_env(), capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 1 and "knowledge_bases.docs" in done.stderr and "mode" in done.stderr
    good = tmp_path / "good.toml"
    good.write_text(f'[knowledge_bases.docs]\nstore = "sqlite:///{tmp_path / "x.db"}"\n', encoding="utf-8")
    code = textwrap.dedent(
        f"""
        import importlib.abc, importlib.machinery, sys

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "mcp" or name.startswith(("mcp.", "mcp_types")):
                    raise ModuleNotFoundError(f"No module named {{name!r}} (blocked by the test)", name=name)
                return None

        sys.meta_path.insert(0, Block())
        from fastrag.cli import main
        main(["mcp", "--config", {str(good)!r}], prog_name="fastrag")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert 'pip install "fastrag-retrieval[mcp]"' in done.stderr
