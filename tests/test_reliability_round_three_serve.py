"""Issue 26 (reliability, round three), point 9: what one client may hold of ``fastrag serve``.

Each test runs a real uvicorn on 127.0.0.1 (configured by :func:`fastrag.serve.server.server_config`, as
``fastrag serve`` runs it) in a thread of its own, and talks to it over raw sockets: clients that send their
headers or body a byte at a time, that send nothing, or too much. Before, uvicorn held such connections until
the client left (900 slow-header clients for 75 s each).
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="fastrag serve needs the serve extra")

import uvicorn  # after the skip

from fastrag.errors import ConfigurationError
from fastrag.knowledge_base import KnowledgeBase
from fastrag.serve import ServeLimits, create_app, parse_config
from fastrag.serve.config import ServerLimits
from fastrag.serve.server import server_config
from fastrag.testing.fakes import HashingEmbedder
from fastrag.vector_store.sqlite import SQLiteVectorStore

ROOT = Path(__file__).resolve().parents[1]
PARSERS = ["h11", pytest.param("httptools", marks=pytest.mark.skipif(importlib.util.find_spec("httptools") is None,
                                                                   reason="httptools is not installed"))]  # fmt: skip
WAIT = 20.0  # seconds a test waits for the server to close a connection: far past every limit set here
DOCS = [{"id": f"d{i}", "content": f"solar power note {i}", "metadata": {"source_uri": f"notes/{i}.md"}}
        for i in range(50)]  # fmt: skip


def app(store: Any = None, **options: Any) -> Any:
    kb = KnowledgeBase(store if store is not None else SQLiteVectorStore(":memory:"), embedder=HashingEmbedder())
    return create_app({"docs": kb}, **options)


@contextmanager
def serving(limits: ServerLimits, *, http: str = "auto", asgi: Any = None) -> Iterator[int]:
    """A real uvicorn serving the fastrag app on 127.0.0.1, in a thread; yields its port."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = server_config(asgi if asgi is not None else app(), limits, http=http, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + WAIT
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(WAIT)
        sock.close()


def connect(port: int) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    conn.setblocking(False)
    return conn


def trickle(conns: list[socket.socket], first: bytes, then: bytes = b"x") -> dict[socket.socket, bytes]:
    """Send ``first`` on every connection, then one byte of ``then`` every 0.2 s to each still open, until
    the server closes it; returns what each received. Fails if one is still open after :data:`WAIT`."""
    for conn in conns:
        conn.sendall(first)
    received = {conn: b"" for conn in conns}
    open_ = set(conns)
    deadline = time.monotonic() + WAIT
    while open_ and time.monotonic() < deadline:
        time.sleep(0.2)
        for conn in list(open_):
            try:
                while chunk := conn.recv(65536):
                    received[conn] += chunk
                open_.discard(conn)  # b"": the server closed it
                continue
            except BlockingIOError:
                pass
            except (ConnectionResetError, BrokenPipeError):
                open_.discard(conn)
                continue
            if then:
                try:
                    conn.send(then)
                except (BrokenPipeError, ConnectionResetError):
                    open_.discard(conn)
    for conn in conns:
        conn.close()
    assert not open_, f"{len(open_)} of {len(conns)} connections still open after {WAIT} s"
    return received


# ----------------------------------------------------------------------------------------- the head


@pytest.mark.parametrize("http", PARSERS)
def test_slow_header_clients_are_answered_408_and_dropped_and_health_still_answers(http: str) -> None:
    with serving(ServerLimits(header_timeout=1.0), http=http) as port:
        slow = [connect(port) for _ in range(20)]
        silent = connect(port)  # opens and sends nothing
        # while they are held, the service answers others
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=WAIT).json() == {"status": "ok"}
        received = trickle(slow, b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: ", then=b"x")
        received |= trickle([silent], b"", then=b"")
    for conn in slow:
        assert received[conn].startswith(b"HTTP/1.1 408 "), received[conn][:200]
        assert b"header_timeout (1 s)" in received[conn]
    assert received[silent] == b""  # nothing sent, nothing answered: closed


@pytest.mark.parametrize("http", PARSERS)
def test_a_kept_alive_connection_sending_its_next_head_slowly_is_dropped(http: str) -> None:
    with serving(ServerLimits(header_timeout=1.0, keep_alive_timeout=30.0), http=http) as port:
        conn = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        first = b""
        while b'{"status":"ok"}' not in first:
            first += conn.recv(65536)
        conn.setblocking(False)
        received = trickle([conn], b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: ", then=b"x")
    assert received[conn].startswith(b"HTTP/1.1 408 ") and b"header_timeout" in received[conn]


# ----------------------------------------------------------------------------------------- the body


@pytest.mark.parametrize("http", PARSERS)
def test_a_slow_body_is_answered_408_and_dropped(http: str) -> None:
    with serving(ServerLimits(body_timeout=1.0), http=http) as port:
        conn = connect(port)
        head = (b"POST /v1/knowledge-bases/docs/retrieve HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                b"Content-Length: 200\r\n\r\n{")  # fmt: skip
        received = trickle([conn], head, then=b" ")
        # the service is fine after
        answer = httpx.post(f"http://127.0.0.1:{port}/v1/knowledge-bases/docs/retrieve", json={"query": "solar"},
                            timeout=WAIT)  # fmt: skip
        assert answer.status_code == 200, answer.text
    assert received[conn].startswith(b"HTTP/1.1 408 "), received[conn][:200]
    assert b"body_timeout (1 s)" in received[conn]


# ----------------------------------------------------------------------------------- size and count


@pytest.mark.parametrize("http", PARSERS)
def test_headers_over_max_header_bytes_are_answered_431_whether_sent_at_once_or_in_pieces(http: str) -> None:
    big = b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: " + b"b" * 5000 + b"\r\n\r\n"
    with serving(ServerLimits(max_header_bytes=4096), http=http) as port:
        at_once, in_pieces = connect(port), connect(port)
        received = trickle([at_once], big, then=b"")
        received |= trickle([in_pieces], big[:3000], then=b"b" * 500)  # never ends its head
        fine = httpx.get(f"http://127.0.0.1:{port}/healthz", headers={"X-Small": "s" * 3000}, timeout=WAIT)
        assert fine.status_code == 200
    for conn in (at_once, in_pieces):
        assert received[conn].startswith(b"HTTP/1.1 431 "), received[conn][:200]
        assert b"max_header_bytes (4096 bytes)" in received[conn]


def test_requests_past_max_connections_are_answered_503_until_connections_close() -> None:
    with serving(ServerLimits(max_connections=4, header_timeout=1.0)) as port:
        idle = [connect(port) for _ in range(4)]
        time.sleep(0.2)  # the server has accepted them
        with httpx.Client(timeout=WAIT) as client:
            assert client.get(f"http://127.0.0.1:{port}/healthz").status_code == 503
        trickle(idle, b"", then=b"")  # dropped at header_timeout
        with httpx.Client(timeout=WAIT) as client:
            assert client.get(f"http://127.0.0.1:{port}/healthz").status_code == 200


# ----------------------------------------------------------------------------------- configuration


def test_the_limits_come_from_the_serve_table_with_defaults() -> None:
    config = parse_config({"knowledge_bases": {"docs": {}}}, environ={})
    assert config.server == ServerLimits(header_timeout=10.0, body_timeout=30.0, keep_alive_timeout=5.0,
                                         max_connections=1000, max_header_bytes=16384)  # fmt: skip
    table = {"header_timeout": 2.5, "body_timeout": 4, "keep_alive_timeout": 1.0, "max_connections": 50,
             "max_header_bytes": 8192}  # fmt: skip
    config = parse_config({"serve": table, "knowledge_bases": {"docs": {}}}, environ={})
    assert config.server == ServerLimits(**table)
    uv = server_config(object(), config.server)
    assert (uv.timeout_keep_alive, uv.limit_concurrency) == (1.0, 50)
    for key, bad in (("header_timeout", 0), ("body_timeout", -1), ("keep_alive_timeout", "5"),
                     ("max_connections", 0), ("max_header_bytes", 100), ("max_connections", 2.0)):  # fmt: skip
        with pytest.raises(ConfigurationError, match=key):
            parse_config({"serve": {key: bad}, "knowledge_bases": {"docs": {}}}, environ={})


def test_fastrag_serve_applies_the_header_timeout_of_its_configuration(tmp_path: Path) -> None:
    config = tmp_path / "kb.toml"
    store = f"sqlite:///{tmp_path / 'kb.db'}"
    config.write_text(f'[serve]\nheader_timeout = 1.0\n\n[knowledge_bases.docs]\nstore = "{store}"\n', encoding="utf-8")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "fastrag.cli", "serve", "--config", str(config), "--port", str(port)]
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "fastrag serve did not start"
            time.sleep(0.1)
        conn = connect(port)
        received = trickle([conn], b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: ", then=b"x")
        assert received[conn].startswith(b"HTTP/1.1 408 ") and b"header_timeout (1 s)" in received[conn]
    finally:
        proc.terminate()
        try:
            out = proc.communicate(timeout=20)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            out = proc.communicate()[0]
    assert "closed the connection from 127.0.0.1:" in out and "header_timeout (1 s)" in out, out[-3000:]


# --------------------------------------------------------------------------------- request_timeout


def test_a_retrieval_past_request_timeout_stops_its_sqlite_read_in_the_worker_thread(monkeypatch, tmp_path) -> None:
    """The 503 comes at the deadline, and the worker thread's SQL statement was interrupted there (SQLite's
    progress handler sees the cancelled request), not left running: the read connection is back in the pool."""
    from fastrag.vector_store.sqlite import store as store_module

    running = {"now": 0, "interrupted": 0}
    real = store_module.load_column

    def slow_load(conn, *args):  # about 20 s of work inside SQLite first
        running["now"] += 1
        try:
            conn.execute("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 20000000) "
                         "SELECT count(*) FROM c").fetchone()
        except Exception:
            running["interrupted"] += 1
            raise
        finally:
            running["now"] -= 1
        return real(conn, *args)

    store = SQLiteVectorStore(tmp_path / "kb.db")
    asgi = app(store, limits=ServeLimits(request_timeout=0.5))
    with serving(ServerLimits(), asgi=asgi) as port, \
            httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as client:  # fmt: skip
        assert client.post("/v1/knowledge-bases/docs/documents", json={"documents": DOCS}).status_code == 200
        monkeypatch.setattr(store_module, "load_column", slow_load)
        slow_filter = {"startsWith": {"key": "source_uri", "value": "notes/1"}}
        answer = client.post("/v1/knowledge-bases/docs/retrieve", json={"query": "solar", "filter": slow_filter})
        assert answer.status_code == 503 and "request_timeout" in answer.json()["message"], answer.text
        assert running == {"now": 0, "interrupted": running["interrupted"]} and running["interrupted"] >= 1
        assert sorted(map(id, store._idle)) == sorted(map(id, store._readers))  # every read connection returned
        monkeypatch.setattr(store_module, "load_column", real)
        assert client.post("/v1/knowledge-bases/docs/retrieve", json={"query": "solar"}).status_code == 200
