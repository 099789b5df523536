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
:func:`chat_completion` builds the answer of an OpenAI-compatible ``POST /v1/chat/completions``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

__all__ = ["Recorded", "Reply", "ScriptedHTTPServer", "Step", "chat_completion"]


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
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with outer._lock:
                    outer.requests.append(Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                    step = outer.script[min(len(outer.requests) - 1, len(outer.script) - 1)]
                reply = step(body)
                if reply.delay:
                    time.sleep(reply.delay)
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
