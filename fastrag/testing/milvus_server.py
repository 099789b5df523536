"""Run real Milvus 2.5 as a local server for tests and benchmarks (no Docker), from PyPI's ``milvus-lite==2.5.1``.

milvus-lite 2.5.1 ships the official native Milvus 2.5 build as a binary (``milvus_lite/lib/milvus``). Given a
data file and a ``host:port`` it serves Milvus's gRPC API over TCP: dense k-NN (FLAT, IVF_FLAT, AUTOINDEX), the
BM25 function and ``hybrid_search``::

    with milvus_server(tmp_path / "milvus.db") as url:          # http://127.0.0.1:<free port>
        async with MilvusVectorStore(url, "docs", enable_bm25=True) as store:
            ...

(milvus-lite 3.x is a Python re-implementation of the API and has no such binary: :func:`milvus_binary` raises.)
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["milvus_binary", "milvus_server", "start_milvus", "stop_process"]

_LOCKS: dict[int, Any] = {}
"""The lock file each running server watches, by process id (see :func:`start_milvus`)."""


def milvus_binary() -> Path:
    """The native Milvus binary that milvus-lite 2.5.x installs.

    Raises:
        ImportError: milvus-lite is not installed.
        FileNotFoundError: the installed milvus-lite has no native binary (3.x is pure Python).
    """
    import warnings

    with warnings.catch_warnings():  # milvus-lite 2.5.1 imports pkg_resources, which warns
        warnings.simplefilter("ignore", UserWarning)
        import milvus_lite

    binary = Path(milvus_lite.__file__).parent / "lib" / "milvus"
    if not binary.is_file():
        version = getattr(milvus_lite, "__version__", "?")
        raise FileNotFoundError(
            f"milvus-lite {version} has no native Milvus binary at {binary}; install milvus-lite==2.5.1"
        )
    return binary


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def milvus_server(data_file: str | os.PathLike[str], *, startup_timeout: float = 60.0) -> Iterator[str]:
    """Start Milvus 2.5 serving ``data_file`` on a free 127.0.0.1 port (:func:`start_milvus`); yield its URL;
    stop it on exit (:func:`stop_process`)."""
    proc, url = start_milvus(data_file, startup_timeout=startup_timeout)
    try:
        yield url
    finally:
        stop_process(proc)


def start_milvus(data_file: str | os.PathLike[str], *, startup_timeout: float = 60.0) -> tuple[subprocess.Popen, str]:
    """Start Milvus 2.5 serving ``data_file`` on a free 127.0.0.1 port; return the process and its URL once a
    client gets an answer. Stop it with :func:`stop_process`; it also exits by itself when this process ends,
    however it ends (it watches a lock file this process holds).

    Args:
        data_file: the data file (created if missing; its folder must exist). Its name must match
            ``[A-Za-z0-9._-]{1,36}`` (milvus-lite's rule).
        startup_timeout: seconds to wait for ``list_collections`` to answer.

    Raises:
        ImportError / FileNotFoundError: see :func:`milvus_binary`.
        RuntimeError: the server exited, or did not answer within ``startup_timeout`` (it is stopped then).
    """
    binary = milvus_binary()
    port = _free_port()
    data = Path(data_file).resolve()
    # The binary's optional fifth argument is a lock file it watches: it exits once no process holds the lock.
    # This process holds it, so the server goes away with this process even when it is killed (SIGKILL,
    # a crashed test run) and never outlives the tests.
    lock_path = data.parent / f".{data.name}.server.lock"
    lock = open(lock_path, "a")  # noqa: SIM115 - held for the server's life, closed by stop_process
    try:
        fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        lock.close()
        raise RuntimeError(f"{data} is already served by another process (lock {lock_path})") from exc
    env = dict(os.environ, LD_LIBRARY_PATH=f"{binary.parent}:{os.environ.get('LD_LIBRARY_PATH', '')}")
    try:
        proc = subprocess.Popen(
            [str(binary), str(data), f"127.0.0.1:{port}", "ERROR", str(lock_path)],
            cwd=str(data.parent), env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            start_new_session=True,  # a Ctrl-C to the tests does not reach it before the cleanup
        )
    except BaseException:
        lock.close()
        raise
    _LOCKS[proc.pid] = lock
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_ready(proc, url, port, startup_timeout)
    except BaseException:
        stop_process(proc)
        raise
    return proc, url


def _wait_until_ready(proc: subprocess.Popen, url: str, port: int, timeout: float) -> None:
    from pymilvus import MilvusClient

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            error = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise RuntimeError(f"Milvus exited with status {proc.returncode}: {error.strip()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                pass
        except OSError:
            time.sleep(0.05)
            continue
        client = MilvusClient(uri=url, timeout=5)
        try:
            client.list_collections()
            return
        finally:
            client.close()
    raise RuntimeError(f"Milvus did not answer on {url} within {timeout} s")


def stop_process(proc: subprocess.Popen) -> None:
    """Stop a server process: SIGTERM, SIGKILL after 10 s; close its pipes and release its lock. Idempotent."""
    lock = _LOCKS.pop(proc.pid, None)
    if lock is not None:
        lock.close()  # releases the lock: the server exits by itself too
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
