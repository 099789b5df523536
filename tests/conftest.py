"""Shared pytest fixtures."""

from typing import Any

import pytest


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
