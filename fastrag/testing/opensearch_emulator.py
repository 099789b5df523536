"""Run the ``osmem-server`` OpenSearch API emulator for tests and benchmarks (no JVM, no Docker).

``osmem-server`` (PyPI, a static binary) answers the OpenSearch REST API for indexing and BM25 search, which
is what fastrag's lexical OpenSearch contract needs; it has no k-NN plugin::

    with opensearch_emulator() as url:
        async with OpenSearchVectorStore(url=url, index="docs") as store:
            ...
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["opensearch_emulator"]


@contextmanager
def opensearch_emulator(*, startup_timeout: float = 30.0) -> Iterator[str]:
    """Start ``osmem-server`` on a free 127.0.0.1 port, wait until it answers, yield its URL, stop it on exit.

    Args:
        startup_timeout: seconds to wait for the server to start and answer ``GET /`` with 200.

    Raises:
        ImportError: ``osmem-server`` is not installed (``pip install osmem-server``).
        osmem_server.OsmemError: it has no binary for this platform, or failed to start.
        OSError: it started but did not answer within ``startup_timeout``.
    """
    import osmem_server

    # port 0: the server binds a free port itself and prints its URL once it listens
    server = osmem_server.OsmemServer.start(
        addr="127.0.0.1:0", japanese=False, binary=osmem_server.resolve_binary(), startup_timeout=startup_timeout
    )
    try:
        deadline = time.monotonic() + startup_timeout
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
