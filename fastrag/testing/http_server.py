"""A scripted JSON HTTP server on 127.0.0.1, for testing clients of HTTP model APIs without a network.

It is a real server (``http.server`` in a thread), so a client is tested through its HTTP stack: headers,
status codes, ``Retry-After``, timeouts and refused connections all behave as on the wire::

    def rerank(body):
        return Reply(200, {"results": [{"index": 0, "relevance_score": 0.9}]})

    with ScriptedHTTPServer([rerank]) as server:
        reranker = CohereReranker(api_key="k", base_url=server.url)
        ...
        assert server.requests[0].body["query"] == "..."

Each POST is recorded (path, lower-cased headers, JSON body) and answered by the script: the n-th request by
``script[n]``, the last step repeating. A step is a function from the request body to a :class:`Reply`.
:func:`chat_completion` builds the answer of an OpenAI-compatible ``POST /v1/chat/completions``;
:func:`openai_embeddings` and :func:`cohere_embeddings` answer ``POST /v1/embeddings`` and Cohere's
``POST /v2/embed`` with vectors of :func:`fake_vector` (a deterministic stand-in for a model). The server
counts the requests it is answering at once (:attr:`ScriptedHTTPServer.max_in_flight`), so a client's
concurrency bound can be checked on the wire.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

import numpy as np

__all__ = [
    "Recorded",
    "Reply",
    "ScriptedHTTPServer",
    "Step",
    "chat_completion",
    "cohere_embeddings",
    "fake_vector",
    "openai_embeddings",
]


@dataclass
class Reply:
    """What the server answers to one request.

    Attributes:
        status: the HTTP status code.
        body: a JSON-serialisable body (``None`` sends ``{}``).
        headers: extra response headers (e.g. ``{"retry-after": "2"}``).
        delay: seconds to wait before answering (to make a client time out).
        raw: bytes sent instead of ``body`` (a malformed response).
    """

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    raw: bytes | None = None


@dataclass(frozen=True)
class Recorded:
    """One request the server received: its path, lower-cased headers and JSON body."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


Step = Callable[[dict[str, Any]], Reply]
"""Answers one request: its JSON body in, the :class:`Reply` out."""


def chat_completion(text: str, *, model: str = "served-model", finish_reason: str = "stop") -> Reply:
    """The reply of an OpenAI-compatible chat-completions endpoint whose model answered ``text``.

    The shape follows OpenAI's API reference for ``POST /v1/chat/completions``: ``{"id", "object":
    "chat.completion", "created", "model", "choices": [{"index", "message": {"role", "content"},
    "finish_reason"}], "usage"}``.
    """
    return Reply(200, {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
    })


def fake_vector(text: str, dimension: int) -> list[float]:
    """A deterministic vector for ``text``: ``dimension`` floats drawn from a normal distribution seeded by the
    SHA-256 of the text, scaled by 3 (not unit length, so a client's normalisation shows). Equal texts give
    equal vectors; different texts give unrelated ones."""
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:8], "big")
    return (3.0 * np.random.default_rng(seed).standard_normal(dimension)).astype(np.float32).tolist()


def openai_embeddings(body: dict[str, Any], *, dimension: int = 8, model: str | None = None) -> Reply:
    """The reply of an OpenAI-compatible ``POST /v1/embeddings`` to ``body``, one :func:`fake_vector` per input.

    The shape follows OpenAI's API reference: ``{"object": "list", "data": [{"object": "embedding",
    "index", "embedding"}], "model", "usage": {"prompt_tokens", "total_tokens"}}``. A ``dimensions`` field
    in the request sets the width (as OpenAI's text-embedding-3 models do); the items are listed in reverse
    order, which the API allows (clients must place them by ``index``). A missing or empty ``input``, or an
    empty string in it, is answered with OpenAI's 400 error body.
    """
    inputs = body.get("input")
    inputs = [inputs] if isinstance(inputs, str) else inputs
    if not isinstance(inputs, list) or not inputs or any(not isinstance(t, str) or not t for t in inputs):
        return Reply(400, {"error": {"message": "'$.input' is invalid.", "type": "invalid_request_error",
                                     "param": None, "code": None}})
    width = body.get("dimensions", dimension)
    data = [{"object": "embedding", "index": i, "embedding": fake_vector(t, width)} for i, t in enumerate(inputs)]
    tokens = sum(len(t.split()) for t in inputs)
    return Reply(200, {"object": "list", "data": data[::-1], "model": model or body.get("model", "served-model"),
                       "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})


def cohere_embeddings(body: dict[str, Any], *, dimension: int = 8) -> Reply:
    """The reply of Cohere's ``POST /v2/embed`` to ``body``, one :func:`fake_vector` per text.

    The shape follows Cohere's API reference (v2): ``{"id", "embeddings": {"float": [[...]]}, "texts",
    "meta": {"api_version", "billed_units": {"input_tokens"}}, "response_type": "embeddings_by_type"}``.
    ``output_dimension`` in the request sets the width. A request without ``input_type`` or ``texts`` is
    answered with Cohere's 400 error body (``{"message": ...}``).
    """
    texts = body.get("texts")
    if not isinstance(texts, list) or not texts or not body.get("input_type"):
        return Reply(400, {"message": "invalid request: texts and input_type are required"})
    width = body.get("output_dimension") or dimension
    return Reply(200, {
        "id": "embed-1",
        "embeddings": {"float": [fake_vector(t, width) for t in texts]},
        "texts": texts,
        "meta": {"api_version": {"version": "2"}, "billed_units": {"input_tokens": sum(len(t.split()) for t in texts)}},
        "response_type": "embeddings_by_type",
    })


class ScriptedHTTPServer:
    """A JSON HTTP server on an ephemeral port of 127.0.0.1 that answers POSTs from a script.

    Args:
        script: the steps; request n is answered by ``script[min(n, len(script) - 1)]``. Assign
            ``server.script`` to change it between calls.
        path_prefix: appended to ``url`` (e.g. ``"/v1"`` for an OpenAI-style base URL).

    Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, script: Sequence[Step], *, path_prefix: str = "") -> None:
        if not script:
            raise ValueError("script must have at least one step")
        self.requests: list[Recorded] = []
        self.script: list[Step] = list(script)
        self.in_flight = 0
        """Requests being answered now."""
        self.max_in_flight = 0
        """The most requests answered at once since the server started (reset it by assigning 0)."""
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with outer._lock:
                    outer.requests.append(Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                    step = outer.script[min(len(outer.requests) - 1, len(outer.script) - 1)]
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                try:
                    reply = step(body)
                    if reply.delay:
                        time.sleep(reply.delay)
                finally:
                    with outer._lock:
                        outer.in_flight -= 1
                payload = reply.raw if reply.raw is not None else json.dumps(reply.body if reply.body is not None else {}).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:  # the client gave up (a timeout test)
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True  # a delayed answer never holds up close()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}{path_prefix}"
        """The server's base URL."""
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()

    def wait_for_requests(self, n: int, within: float = 10.0) -> int:
        """How many requests arrived, waiting up to ``within`` seconds for ``n`` of them.

        A client that timed out may have sent its request before the handler thread recorded it (the
        connection waits in the listen backlog on a busy machine), so count requests after a timeout with
        this, not with ``len(server.requests)``.
        """
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.requests) >= n:
                    break
            time.sleep(0.01)
        with self._lock:
            return len(self.requests)

    def close(self) -> None:
        """Stop serving and free the port (requests still being delayed are abandoned)."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
