"""CohereReranker against a real HTTP server on 127.0.0.1 that speaks Cohere's ``POST /v2/rerank``.

The server is ``http.server`` in a thread; each test scripts its responses. Request and response shapes are
those of the ``cohere`` SDK (``cohere/v2/raw_client.py``: ``{"model", "query", "documents", "top_n",
"max_tokens_per_doc"}`` in, ``{"id", "results": [{"index", "relevance_score"}], "meta"}`` out). No network.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from fastrag.errors import (
    AuthenticationError,
    BackendError,
    ConfigurationError,
    RateLimitError,
    RetrievalTimeoutError,
    TransientBackendError,
)
from fastrag.models import Document
from fastrag.rerankers.cohere import CohereReranker
from fastrag.retrieval.reranking import RerankingRetriever
from fastrag.retry import RetryPolicy
from fastrag.testing.fakes import RecordingSleep
from fastrag.testing.http_server import Reply, ScriptedHTTPServer

pytestmark = pytest.mark.anyio

KEY = "test-key-123"


def score_of(text: str) -> float:
    """The fake model: a document's relevance is the number after "doc", divided by 1000."""
    match = re.search(r"doc (\d+)", text)
    return int(match.group(1)) / 1000 if match else 0.0


def rerank_ok(body: dict[str, Any]) -> Reply:
    """What Cohere answers: results sorted by relevance, at most top_n, indices into the request's documents."""
    results = sorted(
        ({"index": i, "relevance_score": score_of(t)} for i, t in enumerate(body["documents"])),
        key=lambda r: -r["relevance_score"],
    )
    if body.get("top_n") is not None:
        results = results[: body["top_n"]]
    return Reply(200, {"id": "abc", "results": results, "meta": {"api_version": {"version": "2"}}})


def FakeCohere() -> ScriptedHTTPServer:  # noqa: N802 - reads as the server it builds
    """A scripted /v2/rerank server answering with ``rerank_ok`` until a test scripts otherwise."""
    return ScriptedHTTPServer([rerank_ok])


@pytest.fixture
def server() -> Iterator[ScriptedHTTPServer]:
    fake = FakeCohere()
    yield fake
    fake.close()



def docs(n: int) -> list[Document]:
    # doc numbers are shuffled so the best documents are spread over the batches
    numbers = [(i * 37) % 101 for i in range(n)]
    return [Document(id=f"d{i}", content=f"doc {num} text", metadata={"source_uri": f"/p/{i}"}) for i, num in enumerate(numbers)]


def reranker(server: ScriptedHTTPServer, **kwargs: Any) -> CohereReranker:
    kwargs.setdefault("retry", RetryPolicy(max_attempts=3, jitter=False, sleep=RecordingSleep()))
    return CohereReranker("rerank-v3.5", api_key=KEY, base_url=server.url, **kwargs)


async def test_success_sends_cohere_request_shape_and_returns_scored_copies(server: ScriptedHTTPServer) -> None:
    candidates = docs(6)
    async with reranker(server) as r:
        out = await r.rerank("which doc is best?", candidates, k=3)
    assert len(server.requests) == 1
    request = server.requests[0]
    assert request.path == "/v2/rerank"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.body["model"] == "rerank-v3.5"
    assert request.body["query"] == "which doc is best?"
    assert request.body["documents"] == [d.content for d in candidates]
    assert request.body["top_n"] == 3
    expected = sorted(candidates, key=lambda d: -score_of(d.content))[:3]
    assert [d.id for d in out] == [d.id for d in expected]
    assert [d.score for d in out] == [score_of(d.content) for d in expected]
    assert [d.rank for d in out] == [0, 1, 2]
    assert out[0].source_uri == expected[0].source_uri
    assert candidates[0].score is None  # inputs untouched


async def test_title_is_sent_with_the_content(server: ScriptedHTTPServer) -> None:
    async with reranker(server) as r:
        await r.rerank("q", [Document(id="a", content="body", metadata={"title": "Title"})])
    assert server.requests[0].body["documents"] == ["Title\nbody"]
    assert "top_n" not in server.requests[0].body or server.requests[0].body["top_n"] is None


async def test_429_is_retried_after_retry_after_then_succeeds(server: ScriptedHTTPServer) -> None:
    server.script = [lambda body: Reply(429, {"message": "slow down"}, {"Retry-After": "2"}), rerank_ok]
    sleeps = RecordingSleep()
    async with reranker(server, retry=RetryPolicy(max_attempts=3, initial_backoff=0.1, sleep=sleeps)) as r:
        out = await r.rerank("q", docs(4))
    assert len(server.requests) == 2
    assert len(sleeps.delays) == 1 and sleeps.delays[0] >= 2.0  # honoured Retry-After
    assert [d.score for d in out] == sorted((score_of(d.content) for d in docs(4)), reverse=True)


async def test_429_every_time_raises_rate_limit_error_after_the_attempts(server: ScriptedHTTPServer) -> None:
    server.script = [lambda body: Reply(429, {"message": "slow down"}, {"Retry-After": "1"})]
    async with reranker(server) as r:
        with pytest.raises(RateLimitError) as info:
            await r.rerank("q", docs(3))
    assert len(server.requests) == 3
    assert info.value.retry_after == 1.0
    assert "slow down" in str(info.value)


async def test_401_raises_authentication_error_and_is_not_retried(server: ScriptedHTTPServer) -> None:
    server.script = [lambda body: Reply(401, {"message": "invalid api token"})]
    async with reranker(server) as r:
        with pytest.raises(AuthenticationError, match="invalid api token"):
            await r.rerank("q", docs(3))
    assert len(server.requests) == 1


async def test_403_is_an_authentication_error_too(server: ScriptedHTTPServer) -> None:
    server.script = [lambda body: Reply(403, {"message": "forbidden"})]
    async with reranker(server) as r:
        with pytest.raises(AuthenticationError):
            await r.rerank("q", docs(2))
    assert len(server.requests) == 1


async def test_400_is_a_backend_error_never_retried(server: ScriptedHTTPServer) -> None:
    server.script = [lambda body: Reply(400, {"message": "model not found"})]
    async with reranker(server) as r:
        with pytest.raises(BackendError, match="model not found") as info:
            await r.rerank("q", docs(2))
    assert not isinstance(info.value, TransientBackendError)
    assert len(server.requests) == 1


async def test_503_is_retried(server: ScriptedHTTPServer) -> None:
    server.script = [lambda body: Reply(503, {"message": "busy"}), rerank_ok]
    async with reranker(server) as r:
        out = await r.rerank("q", docs(3))
    assert len(server.requests) == 2 and len(out) == 3


async def test_timeout_raises_typed_timeout_error_after_retrying(server: ScriptedHTTPServer) -> None:
    server.script = [lambda body: Reply(200, rerank_ok(body).body, delay=5.0)]
    async with reranker(server, timeout=0.2, retry=RetryPolicy(max_attempts=2, sleep=RecordingSleep())) as r:
        start = time.monotonic()
        with pytest.raises(RetrievalTimeoutError) as info:
            await r.rerank("q", docs(3))
    assert time.monotonic() - start < 4.0  # neither attempt waited for the slow (5 s) answer
    assert info.value.timeout == 0.2
    assert server.wait_for_requests(2) == 2  # the timeout was retried once, then raised
    assert server.wait_for_requests(3, within=0.3) == 2  # and not a third time


async def test_oversized_candidate_list_is_batched_and_merged(server: ScriptedHTTPServer) -> None:
    candidates = docs(25)
    async with reranker(server, max_documents_per_request=10) as r:
        out = await r.rerank("q", candidates, k=7)
        everything = await r.rerank("q", candidates)
    sizes = sorted(len(req.body["documents"]) for req in server.requests[:3])
    assert sizes == [5, 10, 10]
    assert all(req.body["top_n"] == min(7, len(req.body["documents"])) for req in server.requests[:3])
    expected = sorted(candidates, key=lambda d: -score_of(d.content))
    assert [d.id for d in out] == [d.id for d in expected[:7]]
    assert [d.id for d in everything] == [d.id for d in expected]
    assert [d.score for d in everything] == [score_of(d.content) for d in expected]
    # the seven best come from more than one batch: merging really happened
    assert len({int(d.id[1:]) // 10 for d in out}) > 1


async def test_a_response_that_does_not_fit_the_request_is_an_error(server: ScriptedHTTPServer) -> None:
    server.script = [lambda body: Reply(200, {"results": [{"index": 7, "relevance_score": 0.5}]})]
    async with reranker(server) as r:
        with pytest.raises(BackendError, match="index"):
            await r.rerank("q", docs(2))


async def test_api_key_from_environment_and_missing_key(monkeypatch: pytest.MonkeyPatch, server: ScriptedHTTPServer) -> None:
    monkeypatch.delenv("CO_API_KEY", raising=False)
    monkeypatch.delenv("COHERE_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="CO_API_KEY"):
        CohereReranker(base_url=server.url)
    monkeypatch.setenv("COHERE_API_KEY", "from-env")
    async with CohereReranker(base_url=server.url) as r:
        await r.rerank("q", docs(1))
    assert server.requests[-1].headers["authorization"] == "Bearer from-env"


async def test_injected_httpx_client_is_used_and_not_closed(server: ScriptedHTTPServer) -> None:
    seen: list[str] = []

    async def hook(request: httpx.Request) -> None:
        seen.append(str(request.url))

    async with httpx.AsyncClient(event_hooks={"request": [hook]}) as client:
        r = CohereReranker(api_key=KEY, base_url=server.url, httpx_client=client)
        await r.rerank("q", docs(2))
        await r.aclose()
        await r.aclose()  # idempotent
        assert not client.is_closed
    assert seen == [f"{server.url}/v2/rerank"]


async def test_own_httpx_client_is_closed(server: ScriptedHTTPServer) -> None:
    r = reranker(server)
    await r.aclose()
    assert r._http.is_closed


async def test_empty_candidates_send_nothing(server: ScriptedHTTPServer) -> None:
    async with reranker(server) as r:
        assert await r.rerank("q", []) == []
    assert server.requests == []


async def test_reranking_retriever_over_cohere_keeps_first_stage_provenance(server: ScriptedHTTPServer) -> None:
    candidates = [d.ranked(score=10.0 - i, rank=i) for i, d in enumerate(docs(8))]

    class Fixed:
        async def retrieve(self, query: str, *, k: int = 10, filter: object = None) -> list[Document]:
            return candidates[:k]

    async with reranker(server) as r:
        out = await RerankingRetriever(retriever=Fixed(), reranker=r, candidate_k=8).retrieve("q", k=3)
    best = sorted(range(8), key=lambda i: -score_of(candidates[i].content))[:3]
    assert [d.id for d in out] == [candidates[i].id for i in best]
    for rank, (doc, i) in enumerate(zip(out, best, strict=True)):
        assert doc.branches["first_stage"].rank == i and doc.branches["first_stage"].score == 10.0 - i
        assert doc.branches["reranker"].rank == rank and doc.score == score_of(candidates[i].content)


async def test_base_url_from_the_environment(monkeypatch: pytest.MonkeyPatch, server: ScriptedHTTPServer) -> None:
    """CO_API_URL set after the SDK was imported still points the reranker at that server."""
    monkeypatch.setenv("CO_API_URL", server.url)
    async with CohereReranker(api_key="k") as r:
        out = await r.rerank("q", docs(3))
    assert r.base_url == server.url
    assert len(server.requests) == 1 and [d.id for d in out] == [d.id for d in sorted(docs(3), key=lambda d: -score_of(d.content))]
