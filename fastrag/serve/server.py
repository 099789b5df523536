"""Running the app: uvicorn, with bounds on what one client may hold (:class:`~fastrag.serve.config.ServerLimits`).

::

    run(app_from_config(config), config.server, host="127.0.0.1", port=8000)   # what `fastrag serve` does

uvicorn (0.55, the version read for this) bounds the idle time between requests (``timeout_keep_alive``, armed once a
response has been sent) and the connections it serves (``limit_concurrency``), and h11 bounds an incomplete
request head (16 KiB); but nothing bounds the time a client takes to send a request. A connection that sends
nothing, or its headers a byte a second, is held until the client leaves (uvicorn's keep-alive timer is not
armed on a new connection, and any byte received cancels it), and httptools, uvicorn's default parser,
accepts headers of any size (a 4 MB header was answered 200). So this module runs uvicorn with its own HTTP protocol classes: uvicorn's (h11
or httptools, whichever uvicorn would pick), each with two deadlines and a size check added:

- **the head**: from a connection's opening, or from the first byte of a later request on a kept-alive
  connection, the request line and headers must all arrive within ``header_timeout``; past it the server
  answers ``408`` (``{"error": "request_timeout", ...}``) and closes the connection; one that sent nothing
  is closed without an answer;
- **the body**: from the end of the head, the whole body must arrive within ``body_timeout``; past it, the
  same ``408`` (unless the app has begun its answer) and the connection is closed; the app sees a client
  that disconnected;
- **the size of the head**: a request line and headers over ``max_header_bytes`` are answered ``431``
  (``{"error": "header_too_large", ...}``) and the connection is closed, with either parser.

Each such close is logged at INFO on the ``fastrag.serve`` logger, naming the client and the limit. The
limits do not cover the app's own work: ``request_timeout`` bounds a retrieval
(:class:`~fastrag.serve.config.ServeLimits`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from http import HTTPStatus
from typing import Any, Literal

import uvicorn

from fastrag.serve.config import ServerLimits

__all__ = ["run", "server_config"]

logger = logging.getLogger("fastrag.serve")

_READ_SIZE = 256 * 1024
"""The most bytes asyncio hands a protocol at once (``selector_events``' ``max_size``): one read may carry
that much more than an incomplete head before the size check sees it, so h11's own bound is set past ours."""


def _head_size(scope: dict[str, Any]) -> int:
    """The bytes of a parsed request line and headers (each header ``name: value\\r\\n``)."""
    line = len(scope.get("method", "")) + len(scope.get("raw_path", b"")) + len(scope.get("query_string", b"")) + 12
    return line + sum(len(name) + len(value) + 4 for name, value in scope.get("headers", ())) + 2


class _Deadlines:
    """The deadlines and the size check, mixed into one of uvicorn's HTTP protocol classes (h11, httptools).

    It reads what both classes keep: ``cycle`` (the current request: ``scope``, ``more_body``,
    ``response_started``, ``response_complete``, ``disconnected``, ``message_event``), ``transport``,
    ``client`` and ``loop``, and wraps ``connection_made``, ``data_received``, ``on_response_complete`` and
    ``connection_lost``. A new ``cycle`` object is how it learns that a request head has arrived."""

    cycle: Any
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    client: tuple[str, int] | None

    def __init__(self, *args: Any, limits: ServerLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._limits = limits
        self._timer: asyncio.TimerHandle | None = None
        self._phase: Literal["head", "body", "idle"] | None = None  # what the running timer waits for
        self._seen: Any = None  # the request whose head arrived last
        self._head_bytes = 0

    # --------------------------------------------------------------------------- uvicorn's protocol

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._await_head(0)

    def data_received(self, data: bytes) -> None:
        phase = self._phase
        super().data_received(data)  # type: ignore[misc]
        if self.transport.is_closing():
            self._cancel()
        elif self.cycle is not self._seen:  # a request head arrived
            self._head_arrived()
        elif phase == "idle":  # the first byte of the next request on a kept-alive connection
            self._await_head(len(data))
        elif phase == "head":
            self._head_bytes += len(data)
            if self._head_bytes > self._limits.max_header_bytes:
                self._refuse_head_size()
        elif phase == "body" and not self.cycle.more_body:
            self._cancel()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        if self.transport.is_closing():
            self._cancel()
        elif self.cycle is not self._seen:  # a pipelined request began
            self._head_arrived()
        elif self._phase != "body" and self.cycle.response_complete:  # (a body still arriving keeps its deadline)
            self._cancel()
            self._phase = "idle"  # uvicorn's keep-alive timer runs until the next request's first byte

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        super().connection_lost(exc)  # type: ignore[misc]

    # ------------------------------------------------------------------------------------- deadlines

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._phase = None

    def _arm(self, phase: Literal["head", "body"], seconds: float) -> None:
        self._cancel()
        self._phase = phase
        self._timer = self.loop.call_later(seconds, self._expired)

    def _await_head(self, received: int) -> None:
        self._arm("head", self._limits.header_timeout)
        self._head_bytes = received
        if received > self._limits.max_header_bytes:
            self._refuse_head_size()

    def _head_arrived(self) -> None:
        self._seen = self.cycle
        self._cancel()
        if _head_size(self.cycle.scope) > self._limits.max_header_bytes:
            self._refuse_head_size()
        elif self.cycle.more_body:
            self._arm("body", self._limits.body_timeout)

    def _expired(self) -> None:
        self._timer = None
        phase, self._phase = self._phase, None
        if self.transport.is_closing():
            return
        if phase == "head":
            why = f"the request head did not arrive within header_timeout ({self._limits.header_timeout:g} s)"
            self._close(why, 408, "request_timeout", answer=self._head_bytes > 0)
        elif phase == "body":
            why = f"the request body did not arrive within body_timeout ({self._limits.body_timeout:g} s)"
            self._close(why, 408, "request_timeout", answer=not self.cycle.response_started)

    def _refuse_head_size(self) -> None:
        why = f"the request line and headers are over max_header_bytes ({self._limits.max_header_bytes} bytes)"
        self._close(why, 431, "header_too_large", answer=True)

    def _close(self, why: str, status: int, code: str, *, answer: bool) -> None:
        """Answer ``status`` (when ``answer``) and close: the request in progress, if any, sees a disconnect."""
        self._cancel()
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
        logger.info("closed the connection from %s: %s", client, why)
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # uvicorn drops what the app sends from now on; its receive() says so
            cycle.message_event.set()
            answer = answer and not cycle.response_started
        if answer:
            body = json.dumps({"error": code, "message": why}).encode()
            head = (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
                    f"content-length: {len(body)}\r\nconnection: close\r\n\r\n")  # fmt: skip
            self.transport.write(head.encode("ascii") + body)
        self.transport.close()


@functools.cache
def _protocol(http: str) -> type[asyncio.Protocol]:
    if http == "auto":
        try:
            import httptools  # noqa: F401 - uvicorn's own choice: httptools when it is installed
        except ImportError:
            http = "h11"
        else:
            http = "httptools"
    if http == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    else:
        from uvicorn.protocols.http.h11_impl import H11Protocol as base  # type: ignore[assignment]
    return type(f"Bounded{base.__name__}", (_Deadlines, base), {})


def server_config(
    app: Any,
    limits: ServerLimits | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
    http: Literal["auto", "h11", "httptools"] = "auto",
) -> uvicorn.Config:
    """The uvicorn configuration ``fastrag serve`` runs ``app`` with.

    Args:
        app: the ASGI app (:func:`~fastrag.serve.app.create_app`).
        limits: the connection limits (default :class:`~fastrag.serve.config.ServerLimits`).
        host: the interface to listen on.
        port: the TCP port (0: any free one, when the server is given no socket).
        log_level: uvicorn's log level (``"info"``, ...).
        http: the HTTP parser: uvicorn's choice (httptools when installed, else h11), or one of them.

    Returns:
        A ``uvicorn.Config`` (lifespan on, uvicorn's access log off: the app logs each request once,
        WebSocket upgrades off), whose HTTP protocol enforces ``limits``.
    """
    limits = limits or ServerLimits()
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        ws="none",
        http=functools.partial(_protocol(http), limits=limits),  # type: ignore[arg-type]
        timeout_keep_alive=limits.keep_alive_timeout,  # type: ignore[arg-type] - a float works: call_later
        limit_concurrency=limits.max_connections,
        h11_max_incomplete_event_size=limits.max_header_bytes + _READ_SIZE,  # ours answers first, with 431
    )


def run(app: Any, limits: ServerLimits | None = None, *, host: str = "127.0.0.1", port: int = 8000,
        log_level: str = "info") -> None:  # fmt: skip
    """Serve ``app`` until interrupted (SIGINT, SIGTERM), with :func:`server_config`'s configuration."""
    uvicorn.Server(server_config(app, limits, host=host, port=port, log_level=log_level)).run()
