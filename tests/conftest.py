"""Shared pytest fixtures."""

import time
import urllib.request
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
        binary = osmem.resolve_binary()
    except osmem.OsmemError as exc:
        pytest.skip(f"osmem-server has no binary for this platform: {exc}")
    # port 0: the server binds a free port itself and prints its URL once it listens
    server = osmem.OsmemServer.start(addr="127.0.0.1:0", japanese=False, binary=binary, startup_timeout=30)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(server.url, timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield server.url
    finally:
        server.close()
