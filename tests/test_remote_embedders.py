"""OpenAICompatibleEmbedder and CohereEmbedder: the shared embedder contract against a local server speaking
each API (OpenAI's ``/v1/embeddings``, Cohere's ``/v2/embed``), and what is particular to each."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fastrag.errors import (
    BackendError,
    ConfigurationError,
    EmbeddingError,
    InvalidParameterError,
)
from fastrag.ingestion import CohereEmbedder, OpenAICompatibleEmbedder
from fastrag.retry import RetryPolicy
from fastrag.testing.embedder_contract import TEXTS, HTTPEmbedderContract
from fastrag.testing.http_server import (
    Reply,
    ScriptedHTTPServer,
    cohere_embeddings,
    fake_vector,
    openai_embeddings,
)

pytestmark = pytest.mark.anyio


class TestOpenAICompatibleEmbedder(HTTPEmbedderContract):
    path_prefix = "/v1"
    path = "/v1/embeddings"

    def texts_of(self, body: dict[str, Any]) -> list[str]:
        return body["input"]

    def ok(self, body: dict[str, Any]) -> Reply:
        return openai_embeddings(body)

    def error_body(self, message: str) -> dict[str, Any]:
        return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}

    def build(self, server: ScriptedHTTPServer, **options: Any) -> OpenAICompatibleEmbedder:
        return OpenAICompatibleEmbedder("text-embedding-3-small", base_url=server.url, **options)


class TestCohereEmbedder(HTTPEmbedderContract):
    path = "/v2/embed"

    def texts_of(self, body: dict[str, Any]) -> list[str]:
        return body["texts"]

    def ok(self, body: dict[str, Any]) -> Reply:
        return cohere_embeddings(body)

    def error_body(self, message: str) -> dict[str, Any]:
        return {"message": message}

    def build(self, server: ScriptedHTTPServer, **options: Any) -> CohereEmbedder:
        return CohereEmbedder("embed-v4.0", base_url=server.url, **options)


def expected(texts: list[str], dimension: int = 8) -> np.ndarray:
    rows = np.array([fake_vector(t, dimension) for t in texts], dtype=np.float64)
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


# ------------------------------------------------------------------------------------------ OpenAI


@pytest.fixture
def openai_server():
    with ScriptedHTTPServer([openai_embeddings], path_prefix="/v1") as server:
        yield server


async def test_openai_sends_prefixes_input_types_dimensions_and_places_vectors_by_index(openai_server) -> None:
    embedder = OpenAICompatibleEmbedder(
        "nv-embed", base_url=openai_server.url, api_key="k", dimensions=16, query_prefix="query: ",
        document_prefix="passage: ", query_input_type="query", document_input_type="passage",
        extra_body={"truncate": "END"},
    )
    async with embedder:
        assert embedder.dimension == 16  # known before any request
        docs = await embedder.embed_documents(TEXTS[:3])
        query = await embedder.embed_query("what is BM25?")
    first, second = (r.body for r in openai_server.requests)
    assert first == {"model": "nv-embed", "input": [f"passage: {t}" for t in TEXTS[:3]], "encoding_format": "float",
                     "dimensions": 16, "input_type": "passage", "truncate": "END"}
    assert second["input"] == ["query: what is BM25?"] and second["input_type"] == "query"
    # the server lists items in reverse order; each vector lands at its index
    np.testing.assert_allclose(docs, expected([f"passage: {t}" for t in TEXTS[:3]], 16), atol=1e-6)
    np.testing.assert_allclose(query, expected(["query: what is BM25?"], 16)[0], atol=1e-6)


async def test_openai_batches_by_tokens_and_learns_the_dimension(openai_server) -> None:
    texts = ["a" * 40, "b" * 40, "c" * 40, "d" * 90, "e"]
    async with OpenAICompatibleEmbedder("m", base_url=openai_server.url, batch_size=10, max_batch_tokens=100) as embedder:
        with pytest.raises(EmbeddingError, match="dimension is not known"):
            embedder.dimension
        vectors = await embedder.embed_documents(texts)
        assert embedder.dimension == 8
    # UTF-8 bytes count as tokens: 40+40 | 40 | 90 (past 100 with the next) | ... each batch <= 100
    # (batches run concurrently: compare them in any order)
    assert sorted(r.body["input"] for r in openai_server.requests) == sorted([texts[:2], texts[2:3], texts[3:5]])
    np.testing.assert_allclose(vectors, expected(texts), atol=1e-6)


async def test_openai_does_not_send_empty_strings_and_probes_the_dimension_for_empty_input(openai_server) -> None:
    async with OpenAICompatibleEmbedder("m", base_url=openai_server.url) as embedder:
        assert (await embedder.embed_documents([])).shape == (0, 8)  # one probe request
        assert len(openai_server.requests) == 1
        vectors = await embedder.embed_documents(["", "x"])
    assert openai_server.requests[-1].body["input"] == ["x"]
    assert not vectors[0].any() and np.isclose(np.linalg.norm(vectors[1]), 1.0)


async def test_openai_refuses_a_width_other_than_the_dimensions_asked(openai_server) -> None:
    openai_server.script = [lambda body: openai_embeddings({**body, "dimensions": 4})]  # ignores the width asked
    async with OpenAICompatibleEmbedder("m", base_url=openai_server.url, dimensions=8) as embedder:
        with pytest.raises(BackendError, match="dimensions=8"):
            await embedder.embed_documents(["x"])


async def test_openai_reads_the_key_from_the_environment_and_never_shows_it(openai_server, monkeypatch) -> None:
    monkeypatch.setenv("MY_EMBEDDINGS_KEY", "sk-from-env-1234")
    embedder = OpenAICompatibleEmbedder("m", base_url=openai_server.url, api_key_env="MY_EMBEDDINGS_KEY")
    async with embedder:
        await embedder.embed_documents(["x"])
    assert openai_server.requests[0].headers["authorization"] == "Bearer sk-from-env-1234"
    assert "sk-from-env" not in repr(embedder) and "sk-from-env" not in str(vars(embedder).get("_where"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    async with OpenAICompatibleEmbedder("m", base_url=openai_server.url) as keyless:
        await keyless.embed_documents(["x"])
    assert "authorization" not in openai_server.requests[-1].headers


async def test_openai_name_carries_the_model() -> None:
    a = OpenAICompatibleEmbedder("text-embedding-3-small", base_url="http://127.0.0.1:9/v1")
    b = OpenAICompatibleEmbedder("text-embedding-3-small", base_url="http://127.0.0.1:9/v1", dimensions=256)
    c = OpenAICompatibleEmbedder("text-embedding-3-large", base_url="http://127.0.0.1:9/v1")
    assert a.name == b.name == "openai:text-embedding-3-small" and c.name == "openai:text-embedding-3-large"
    assert a.fingerprint != b.fingerprint  # the cache never mixes widths or prefixes
    for e in (a, b, c):
        await e.aclose()


@pytest.mark.parametrize("kwargs", [
    {"model": " "}, {"batch_size": 0}, {"max_concurrency": 0}, {"dimensions": -1}, {"timeout": 0},
    {"extra_body": {"input": ["x"]}}, {"api_key": "has space"}, {"max_batch_tokens": 0},
])
async def test_openai_refuses_bad_options(kwargs: dict[str, Any]) -> None:
    options = {"model": "m", "base_url": "http://127.0.0.1:9/v1", **kwargs}
    with pytest.raises(InvalidParameterError):
        OpenAICompatibleEmbedder(**options)


async def test_openai_refuses_a_base_url_that_is_not_http() -> None:
    with pytest.raises(ConfigurationError):
        OpenAICompatibleEmbedder("m", base_url="ftp://example.com/v1")


async def test_openai_unreachable_endpoint_is_named() -> None:
    async with OpenAICompatibleEmbedder("m", base_url="http://127.0.0.1:9/v1", retry=RetryPolicy(max_attempts=1)) as e:
        with pytest.raises(BackendError, match="127.0.0.1:9/v1/embeddings"):
            await e.embed_documents(["x"])


async def test_openai_normalises_large_but_float32_values_without_losing_the_direction() -> None:
    """[1e30, 1e30, 0, 0] fits float32, but squaring it there overflows: the row was silently all zeros."""
    step = lambda body: Reply(200, {"data": [{"index": 0, "embedding": [1e30, 1e30, 0.0, 0.0]}]})  # noqa: E731
    with ScriptedHTTPServer([step], path_prefix="/v1") as server:
        async with OpenAICompatibleEmbedder("m", base_url=server.url) as embedder:
            vector = await embedder.embed_query("big")
    np.testing.assert_allclose(vector, [2**-0.5, 2**-0.5, 0.0, 0.0], rtol=1e-6)


# ------------------------------------------------------------------------------------------ Cohere


async def test_cohere_sends_search_document_and_search_query_input_types() -> None:
    with ScriptedHTTPServer([cohere_embeddings]) as server:
        async with CohereEmbedder("embed-v4.0", api_key="k", base_url=server.url, dimensions=8) as embedder:
            docs = await embedder.embed_documents(TEXTS[:2])
            query = await embedder.embed_query("what is BM25?")
    first, second = (r.body for r in server.requests)
    assert first["input_type"] == "search_document" and first["texts"] == TEXTS[:2]
    assert first["embedding_types"] == ["float"] and first["output_dimension"] == 8 and first["model"] == "embed-v4.0"
    assert second["input_type"] == "search_query" and second["texts"] == ["what is BM25?"]
    np.testing.assert_allclose(docs, expected(TEXTS[:2]), atol=1e-6)
    np.testing.assert_allclose(query, expected(["what is BM25?"])[0], atol=1e-6)
    assert embedder.name == "cohere:embed-v4.0"


async def test_cohere_needs_a_key_and_caps_batches_at_96(monkeypatch) -> None:
    for var in ("CO_API_KEY", "COHERE_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigurationError, match="CO_API_KEY"):
        CohereEmbedder()
    with pytest.raises(InvalidParameterError, match="96"):
        CohereEmbedder(api_key="k", batch_size=97)
