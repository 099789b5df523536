"""Adapters report a store that is down during a request as transient, so RetryPolicy can retry it,
and still as "unavailable", so code that handles an outage keeps catching it."""

from __future__ import annotations

import socket

import pytest

from fastrag.errors import BackendTemporarilyUnavailableError, BackendUnavailableError, TransientBackendError
from fastrag.retry import RetryPolicy


def test_temporarily_unavailable_is_both_transient_and_unavailable():
    error = BackendTemporarilyUnavailableError("reset", store="s", retry_after=1.5)
    assert isinstance(error, TransientBackendError) and isinstance(error, BackendUnavailableError)
    assert error.retry_after == 1.5 and error.store == "s" and "s: reset" in str(error)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.anyio
async def test_unreachable_opensearch_is_retried_then_reported():
    pytest.importorskip("opensearchpy")
    from fastrag.vector_store.opensearch import OpenSearchVectorStore

    sleeps: list[float] = []

    async def no_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    policy = RetryPolicy(max_attempts=3, initial_backoff=0.01, jitter=False, sleep=no_sleep)
    store = OpenSearchVectorStore(url=f"http://127.0.0.1:{_closed_port()}", index="down", timeout=2)
    try:
        with pytest.raises(BackendTemporarilyUnavailableError):
            await policy.call(store.count)
    finally:
        await store.aclose()
    assert len(sleeps) == 2  # three attempts: the error was recognised as transient
