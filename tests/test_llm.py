"""OpenAICompatibleLLM against a real HTTP server on 127.0.0.1 that speaks OpenAI's ``POST /v1/chat/completions``.

The server is ``http.server`` in a thread; each test scripts its responses. Shapes are those of OpenAI's API
reference: ``{"model", "messages": [{"role", "content"}], "temperature"?, "max_tokens"?}`` in,
``{"id", "object": "chat.completion", "model", "choices": [{"index", "message": {"role", "content"},
"finish_reason"}], "usage"}`` out; errors as ``{"error": {"message", "type", "code"}}``. No network.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from fastrag.errors import (
    AuthenticationError,
    BackendError,
    BackendTemporarilyUnavailableError,
    BackendUnavailableError,
    ConfigurationError,
    InvalidParameterError,
    RateLimitError,
    RetrievalTimeoutError,
    TransientBackendError,
)
from fastrag.llm import ChatCompletion, ChatMessage, OpenAICompatibleLLM
from fastrag.models import Document
from fastrag.protocols import LLM
from fastrag.querying import QueryEngine
from fastrag.retry import RetryPolicy
from fastrag.testing.fakes import RecordingSleep
from fastrag.testing.http_server import Reply, ScriptedHTTPServer, chat_completion

pytestmark = pytest.mark.anyio

KEY = "sk-test-123"
MESSAGES = [ChatMessage("system", "Be brief."), ChatMessage("user", "Say hello")]


def completion(text: str, *, model: str = "served-model", finish: str = "stop") -> Reply:
    return chat_completion(text, model=model, finish_reason=finish)


def echo(body: dict[str, Any]) -> Reply:
    """The fake model: answers with the last message's content, upper-cased."""
    return completion(body["messages"][-1]["content"].upper())


def error(status: int, message: str, headers: dict[str, str] | None = None) -> Callable[[dict[str, Any]], Reply]:
    return lambda body: Reply(status, {"error": {"message": message, "type": "x", "code": None}}, headers or {})


def FakeOpenAI() -> ScriptedHTTPServer:  # noqa: N802 - reads as the server it builds
    """A scripted /v1/chat/completions server answering with ``echo`` until a test scripts otherwise."""
    return ScriptedHTTPServer([echo], path_prefix="/v1")


@pytest.fixture
def server() -> Iterator[ScriptedHTTPServer]:
    fake = FakeOpenAI()
    yield fake
    fake.close()



def client(server: ScriptedHTTPServer, **kwargs: Any) -> OpenAICompatibleLLM:
    kwargs.setdefault("retry", RetryPolicy(max_attempts=3, jitter=False, sleep=RecordingSleep()))
    kwargs.setdefault("api_key", KEY)
    return OpenAICompatibleLLM(base_url=server.url, model="test-model", **kwargs)


async def test_chat_sends_the_chat_completions_request_and_returns_the_reply(server: ScriptedHTTPServer) -> None:
    async with client(server) as llm:
        assert isinstance(llm, LLM)
        reply = await llm.chat(MESSAGES)
    assert reply == "SAY HELLO"
    assert len(server.requests) == 1
    request = server.requests[0]
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.body == {
        "model": "test-model",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello"}],
    }  # no temperature, no max_tokens: the server's defaults apply


async def test_temperature_and_max_tokens_are_sent_when_set(server: ScriptedHTTPServer) -> None:
    async with client(server) as llm:
        await llm.chat(MESSAGES, temperature=0.0, max_tokens=64)
        await llm.chat(MESSAGES, max_tokens=8)
    assert server.requests[0].body["temperature"] == 0.0
    assert server.requests[0].body["max_tokens"] == 64
    assert "temperature" not in server.requests[1].body and server.requests[1].body["max_tokens"] == 8


async def test_complete_reports_model_finish_reason_and_usage(server: ScriptedHTTPServer) -> None:
    server.script = [lambda body: completion("cut off", model="gpt-x-2024", finish="length")]
    async with client(server) as llm:
        out = await llm.complete(MESSAGES, max_tokens=2)
    assert out == ChatCompletion(
        content="cut off", model="gpt-x-2024", finish_reason="length",
        usage={"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
    )


async def test_extra_headers_and_trailing_slash_in_base_url(server: ScriptedHTTPServer) -> None:
    async with OpenAICompatibleLLM(base_url=server.url + "/", model="m", api_key=KEY, headers={"OpenAI-Project": "p1"}) as llm:
        await llm.chat(MESSAGES)
    assert server.requests[0].path == "/v1/chat/completions"
    assert server.requests[0].headers["openai-project"] == "p1"


async def test_api_key_from_environment_or_none(monkeypatch: pytest.MonkeyPatch, server: ScriptedHTTPServer) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    async with OpenAICompatibleLLM(base_url=server.url, model="m") as llm:
        await llm.chat(MESSAGES)
    assert server.requests[-1].headers["authorization"] == "Bearer sk-from-env"
    monkeypatch.delenv("OPENAI_API_KEY")
    async with OpenAICompatibleLLM(base_url=server.url, model="m") as llm:  # a local server needs no key
        await llm.chat(MESSAGES)
    assert "authorization" not in server.requests[-1].headers


async def test_401_raises_authentication_error_with_the_server_message_and_is_not_retried(server: ScriptedHTTPServer) -> None:
    server.script = [error(401, "Incorrect API key provided")]
    async with client(server) as llm:
        with pytest.raises(AuthenticationError, match="Incorrect API key provided"):
            await llm.chat(MESSAGES)
    assert len(server.requests) == 1


async def test_403_is_an_authentication_error(server: ScriptedHTTPServer) -> None:
    server.script = [error(403, "forbidden")]
    async with client(server) as llm:
        with pytest.raises(AuthenticationError):
            await llm.chat(MESSAGES)
    assert len(server.requests) == 1


@pytest.mark.parametrize("status", [400, 404, 422])
async def test_other_4xx_is_a_backend_error_with_the_message_never_retried(server: ScriptedHTTPServer, status: int) -> None:
    server.script = [error(status, "The model `nope` does not exist")]
    async with client(server) as llm:
        with pytest.raises(BackendError, match="The model `nope` does not exist") as info:
            await llm.chat(MESSAGES)
    assert not isinstance(info.value, TransientBackendError | AuthenticationError)
    assert len(server.requests) == 1


async def test_429_is_retried_after_retry_after_then_succeeds(server: ScriptedHTTPServer) -> None:
    server.script = [error(429, "slow down", {"Retry-After": "2"}), echo]
    sleeps = RecordingSleep()
    async with client(server, retry=RetryPolicy(max_attempts=3, initial_backoff=0.1, sleep=sleeps)) as llm:
        assert await llm.chat(MESSAGES) == "SAY HELLO"
    assert len(server.requests) == 2
    assert len(sleeps.delays) == 1 and sleeps.delays[0] >= 2.0


async def test_429_every_time_raises_rate_limit_error_after_the_attempts(server: ScriptedHTTPServer) -> None:
    server.script = [error(429, "slow down", {"retry-after-ms": "1500"})]
    async with client(server) as llm:
        with pytest.raises(RateLimitError, match="slow down") as info:
            await llm.chat(MESSAGES)
    assert len(server.requests) == 3
    assert info.value.retry_after == 1.5


@pytest.mark.parametrize("status", [500, 502, 503, 504])
async def test_5xx_is_retried(server: ScriptedHTTPServer, status: int) -> None:
    server.script = [error(status, "busy"), echo]
    async with client(server) as llm:
        assert await llm.chat(MESSAGES) == "SAY HELLO"
    assert len(server.requests) == 2


async def test_503_every_time_raises_temporarily_unavailable(server: ScriptedHTTPServer) -> None:
    server.script = [error(503, "overloaded")]
    async with client(server) as llm:
        with pytest.raises(BackendTemporarilyUnavailableError, match="overloaded") as info:
            await llm.chat(MESSAGES)
    assert isinstance(info.value, BackendUnavailableError)
    assert len(server.requests) == 3


async def test_timeout_raises_typed_timeout_error_after_retrying(server: ScriptedHTTPServer) -> None:
    server.script = [lambda body: Reply(200, echo(body).body, delay=5.0)]
    async with client(server, timeout=0.2, retry=RetryPolicy(max_attempts=2, sleep=RecordingSleep())) as llm:
        with pytest.raises(RetrievalTimeoutError) as info:
            await llm.chat(MESSAGES)
    assert info.value.timeout == 0.2
    assert server.wait_for_requests(2) == 2  # retried once, then raised
    assert server.wait_for_requests(3, within=0.3) == 2


async def test_connection_refused_is_temporarily_unavailable_and_retried() -> None:
    fake = FakeOpenAI()
    url = fake.url
    fake.close()  # nothing listens on that port any more
    sleeps = RecordingSleep()
    llm = OpenAICompatibleLLM(base_url=url, model="m", retry=RetryPolicy(max_attempts=2, sleep=sleeps))
    async with llm:
        with pytest.raises(BackendTemporarilyUnavailableError, match="cannot connect"):
            await llm.chat(MESSAGES)
    assert len(sleeps.delays) == 1


@pytest.mark.parametrize(
    "reply",
    [
        Reply(200, raw=b"<html>not json</html>"),
        Reply(200, {"choices": []}),
        Reply(200, {"choices": [{"message": {"role": "assistant", "content": None}}]}),
        Reply(200, {"choices": [{"message": {"role": "assistant"}}]}),
        Reply(200, {"object": "chat.completion"}),
        Reply(200, raw=b"[1, 2]"),
    ],
    ids=["not-json", "no-choices", "null-content", "no-content", "no-choices-key", "a-list"],
)
async def test_a_malformed_response_is_a_backend_error_not_retried(server: ScriptedHTTPServer, reply: Reply) -> None:
    server.script = [lambda body: reply]
    async with client(server) as llm:
        with pytest.raises(BackendError) as info:
            await llm.chat(MESSAGES)
    assert not isinstance(info.value, TransientBackendError)
    assert len(server.requests) == 1


async def test_injected_http_client_is_used_and_not_closed(server: ScriptedHTTPServer) -> None:
    seen: list[str] = []

    async def hook(request: httpx.Request) -> None:
        seen.append(str(request.url))

    async with httpx.AsyncClient(event_hooks={"request": [hook]}) as http:
        llm = OpenAICompatibleLLM(base_url=server.url, model="m", http_client=http)
        await llm.chat(MESSAGES)
        await llm.aclose()
        await llm.aclose()  # idempotent
        assert not http.is_closed
    assert seen == [f"{server.url}/chat/completions"]


async def test_own_http_client_is_closed_and_a_closed_client_refuses_calls(server: ScriptedHTTPServer) -> None:
    llm = client(server)
    await llm.aclose()
    assert llm._http.is_closed
    with pytest.raises(BackendUnavailableError, match="closed"):
        await llm.chat(MESSAGES)
    assert server.requests == []


@pytest.mark.parametrize(
    ("kwargs", "error_type"),
    [
        ({"base_url": "localhost:8000/v1"}, ConfigurationError),
        ({"base_url": "ftp://example.com/v1"}, ConfigurationError),
        ({"base_url": ""}, ConfigurationError),
        ({"model": " "}, InvalidParameterError),
        ({"timeout": 0}, InvalidParameterError),
        ({"timeout": float("nan")}, InvalidParameterError),
        ({"api_key": ""}, InvalidParameterError),
        ({"api_key": "a\nb"}, InvalidParameterError),
        ({"retry": 3}, InvalidParameterError),
        ({"headers": {"x": 1}}, InvalidParameterError),
        ({"model": "\ud800"}, InvalidParameterError),
        ({"api_key": "ключ"}, InvalidParameterError),  # httpx sends header values as ASCII
        ({"api_key": "sk test"}, InvalidParameterError),
        ({"headers": {"X-Org": "日本"}}, InvalidParameterError),
        ({"headers": {"X-Org": "a\r\nInjected: 1"}}, InvalidParameterError),
        ({"headers": {"X-Org": " padded"}}, InvalidParameterError),
        ({"headers": {"": "x"}}, InvalidParameterError),
        ({"headers": {"X Org": "x"}}, InvalidParameterError),
        ({"headers": {"Content-Type": "text/plain"}}, InvalidParameterError),
        ({"headers": {"X-Org": "a", "x-org": "b"}}, InvalidParameterError),
        ({"headers": {"Authorization": "Bearer a"}, "api_key": "b"}, InvalidParameterError),
        ({"max_response_bytes": 0}, InvalidParameterError),
        ({"max_response_bytes": 1.5}, InvalidParameterError),
    ],
)
def test_bad_settings_are_refused_when_built(kwargs: dict[str, Any], error_type: type[Exception]) -> None:
    settings = {"base_url": "http://127.0.0.1:9/v1", "model": "m", **kwargs}
    with pytest.raises(error_type):
        OpenAICompatibleLLM(**settings)


async def test_bad_call_arguments_are_refused_before_any_request(server: ScriptedHTTPServer) -> None:
    async with client(server) as llm:
        for messages, kwargs in [
            ([], {}),
            ("hello", {}),
            ([{"role": "user", "content": "hi"}], {}),
            (MESSAGES, {"temperature": 3.0}),
            (MESSAGES, {"temperature": True}),
            (MESSAGES, {"max_tokens": 0}),
            (MESSAGES, {"max_tokens": 10**5000}),  # json.dumps could not even write it
        ]:
            with pytest.raises(InvalidParameterError):
                await llm.chat(messages, **kwargs)  # type: ignore[arg-type]
    assert server.requests == []


def test_chat_message_validates_role_and_content() -> None:
    assert ChatMessage("assistant", "ok").role == "assistant"
    with pytest.raises(InvalidParameterError):
        ChatMessage("tool", "x")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError):
        ChatMessage("user", None)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="Unicode"):
        ChatMessage("user", "a lone surrogate \ud800 cannot be sent as UTF-8")
    assert ChatMessage("user", "emoji 😀 and ß are fine").content.endswith("fine")


async def test_query_engine_over_the_http_client_cites_the_retrieved_documents(server: ScriptedHTTPServer) -> None:
    docs = [
        Document(id="bm25", content="BM25 ranks documents by term frequency.", metadata={"title": "BM25", "source_uri": "bm25.md"}),
        Document(id="rrf", content="RRF fuses ranked lists.", metadata={"title": "RRF", "source_uri": "rrf.md"}),
    ]

    class Fixed:
        async def retrieve(self, query: str, *, k: int = 10, filter: object = None) -> list[Document]:
            return docs[:k]

    def answer(body: dict[str, Any]) -> Reply:
        prompt = body["messages"][-1]["content"]
        # the fake model cites the source whose block mentions "term frequency"
        blocks = prompt.split("\n\n")
        number = next(b.split("]")[0].lstrip("[") for b in blocks if "term frequency" in b)
        return completion(f"By term frequency [{number}].")

    server.script = [answer]
    async with client(server) as llm:
        out = await QueryEngine(retriever=Fixed(), llm=llm, k=2).query("How does BM25 rank?")
    assert [m["role"] for m in server.requests[0].body["messages"]] == ["system", "user"]
    assert [c.document.id for c in out.citations] == ["bm25"]
    assert out.citations[0].document.source_uri == "bm25.md"
    assert out.grounded and out.status == "answered"


# ------------------------------------------------------------------------------ hostile or broken servers


def deep(n: int = 100_000) -> bytes:
    return b"[" * n + b"]" * n


@pytest.mark.parametrize(
    ("reply", "error_type"),
    [
        (Reply(200, raw=deep()), BackendError),
        (Reply(400, raw=b'{"error": ' + deep() + b"}"), BackendError),
        (Reply(500, raw=deep()), TransientBackendError),
    ],
    ids=["200", "400", "500"],
)
async def test_deeply_nested_json_is_a_backend_error_not_a_recursion_error(
    server: ScriptedHTTPServer, reply: Reply, error_type: type[BackendError]
) -> None:
    server.script = [lambda body: reply]
    async with client(server, retry=RetryPolicy(max_attempts=1)) as llm:
        with pytest.raises(error_type) as info:
            await llm.chat(MESSAGES)
    assert f"HTTP {reply.status}" in str(info.value) or "nested too deeply" in str(info.value)


async def test_an_integer_too_long_for_python_in_usage_is_left_out(server: ScriptedHTTPServer) -> None:
    body = json.dumps(chat_completion("hi").body).replace('"total_tokens": 15', '"total_tokens": ' + "9" * 5000)
    assert "9" * 5000 in body
    server.script = [lambda _: Reply(200, raw=body.encode())]
    async with client(server) as llm:
        out = await llm.complete(MESSAGES)
    assert out.content == "hi"
    assert dict(out.usage) == {"prompt_tokens": 12, "completion_tokens": 3}


async def test_a_body_that_is_not_gzip_under_content_encoding_gzip_is_a_backend_error(server: ScriptedHTTPServer) -> None:
    server.script = [lambda body: Reply(200, raw=b"not gzip at all", headers={"content-encoding": "gzip"})]
    async with client(server) as llm:
        with pytest.raises(BackendError, match="decoded") as info:
            await llm.chat(MESSAGES)
    assert isinstance(info.value.__cause__, httpx.DecodingError)
    assert not isinstance(info.value, TransientBackendError)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("raised", "error_type", "transient"),
    [
        (httpx.ReadTimeout, RetrievalTimeoutError, True),
        (httpx.ConnectTimeout, RetrievalTimeoutError, True),
        (httpx.ConnectError, BackendTemporarilyUnavailableError, True),
        (httpx.ReadError, TransientBackendError, True),
        (httpx.WriteError, TransientBackendError, True),
        (httpx.RemoteProtocolError, TransientBackendError, True),
        (httpx.LocalProtocolError, BackendError, False),
        (httpx.UnsupportedProtocol, BackendError, False),
        (httpx.ProxyError, TransientBackendError, True),
        (httpx.DecodingError, BackendError, False),
        (httpx.TooManyRedirects, BackendError, False),
    ],
)
async def test_every_httpx_error_becomes_a_fastrag_error_chaining_it(
    raised: type[httpx.HTTPError], error_type: type[BackendError], transient: bool
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise raised("boom", request=request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        llm = OpenAICompatibleLLM(base_url="http://llm.test/v1", model="m", http_client=http,
                                  retry=RetryPolicy(max_attempts=1))
        with pytest.raises(error_type) as info:
            await llm.chat(MESSAGES)
    assert isinstance(info.value.__cause__, raised)
    assert isinstance(info.value, TransientBackendError) == transient


@pytest.mark.parametrize("raised", [httpx.StreamConsumed(), httpx.InvalidURL("bad")], ids=["stream", "url"])
async def test_httpx_errors_outside_http_error_are_converted_too(raised: Exception) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise raised

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        llm = OpenAICompatibleLLM(base_url="http://llm.test/v1", model="m", http_client=http)
        with pytest.raises(BackendError) as info:
            await llm.chat(MESSAGES)
    assert info.value.__cause__ is raised


class TrickleServer:
    """Answers every POST with a valid chat completion, sent one byte every ``interval`` seconds."""

    def __init__(self, interval: float) -> None:
        body = json.dumps(chat_completion("slowly " * 20).body).encode()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers.get("content-length", 0)))
                try:
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(body)))
                    self.end_headers()
                    for byte in body:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(interval)
                except OSError:  # the client gave up
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


async def test_timeout_bounds_the_whole_attempt_not_each_read() -> None:
    # every byte arrives well within the timeout, the whole body (hundreds of bytes) far past it
    trickle = TrickleServer(interval=0.05)
    try:
        llm = OpenAICompatibleLLM(base_url=trickle.url, model="m", timeout=0.5, retry=RetryPolicy(max_attempts=1))
        async with llm:
            with pytest.raises(RetrievalTimeoutError) as info:
                await llm.chat(MESSAGES)
        assert info.value.timeout == 0.5
    finally:
        trickle.close()


async def test_a_response_over_max_response_bytes_is_refused_and_not_retried(server: ScriptedHTTPServer) -> None:
    server.script = [lambda body: completion("x" * 5_000)]
    async with client(server, max_response_bytes=1_000) as llm:
        with pytest.raises(BackendError, match="max_response_bytes=1000") as info:
            await llm.chat(MESSAGES)
    assert not isinstance(info.value, TransientBackendError)
    assert len(server.requests) == 1
    async with client(server, max_response_bytes=100_000) as llm:  # the same reply under a larger limit
        assert await llm.chat(MESSAGES) == "x" * 5_000


async def test_max_response_bytes_counts_the_decompressed_body(server: ScriptedHTTPServer) -> None:
    text = "y" * 200_000
    packed = gzip.compress(json.dumps(completion(text).body).encode())
    assert len(packed) < 10_000  # on the wire it is small
    server.script = [lambda body: Reply(200, raw=packed, headers={"content-encoding": "gzip"})]
    async with client(server, max_response_bytes=10_000) as llm:
        with pytest.raises(BackendError, match="max_response_bytes"):
            await llm.chat(MESSAGES)
    async with client(server) as llm:  # the default 8 MiB reads it
        assert await llm.chat(MESSAGES) == text


async def test_a_redirect_is_a_backend_error_naming_status_and_location(server: ScriptedHTTPServer) -> None:
    target = f"{server.url}/moved/chat/completions"
    server.script = [lambda body: Reply(307, headers={"location": target})]
    async with client(server) as llm:
        with pytest.raises(BackendError, match="307") as info:
            await llm.chat(MESSAGES)
    assert target in str(info.value)
    assert not isinstance(info.value, TransientBackendError)
    # an injected client that follows redirects does not follow them here either
    async with httpx.AsyncClient(follow_redirects=True) as http:
        llm = OpenAICompatibleLLM(base_url=server.url, model="m", http_client=http)
        with pytest.raises(BackendError, match="307"):
            await llm.chat(MESSAGES)
    assert [r.path for r in server.requests] == ["/v1/chat/completions"] * 2


async def test_an_authorization_header_replaces_the_environment_key(
    monkeypatch: pytest.MonkeyPatch, server: ScriptedHTTPServer
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    async with OpenAICompatibleLLM(base_url=server.url, model="m", headers={"Authorization": "Basic Z2F0ZXdheQ=="}) as llm:
        await llm.chat(MESSAGES)
    assert server.requests[-1].headers["authorization"] == "Basic Z2F0ZXdheQ=="
    monkeypatch.setenv("OPENAI_API_KEY", "ключ")
    with pytest.raises(InvalidParameterError, match="OPENAI_API_KEY") as info:
        OpenAICompatibleLLM(base_url=server.url, model="m")
    assert "ключ" not in str(info.value)  # a key is never echoed
