"""Load and cancellation: one shared hybrid retriever over one SQLite store, many concurrent calls."""

from __future__ import annotations

import asyncio
import random
import sqlite3

import anyio
import pytest

from fastrag.errors import BackendUnavailableError
from fastrag.models import Document
from fastrag.retrieval import BM25Retriever, HybridRetriever, VectorRetriever
from fastrag.testing.fakes import HashingEmbedder
from fastrag.vector_store.sqlite import SQLiteVectorStore

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

TOPICS = ["solar", "wind", "tidal", "nuclear", "coal", "hydro", "geothermal", "biomass", "battery", "grid"]
QUERIES = [f"{a} {b} power" for a in TOPICS for b in TOPICS[:2]] + ["storage grid"]


def corpus() -> list[Document]:
    rng = random.Random(3)
    return [
        Document(id=f"d{i:03d}", content=" ".join(rng.choice(TOPICS) for _ in range(8)) + f" plant {i}",
                 metadata={"n": i, "even": i % 2 == 0})
        for i in range(120)
    ]  # fmt: skip


async def open_hybrid(path) -> tuple[SQLiteVectorStore, HybridRetriever]:
    store, embedder = SQLiteVectorStore(path), HashingEmbedder()
    docs = corpus()
    await store.upsert(docs, embeddings=await embedder.embed_documents([d.content for d in docs]))
    return store, HybridRetriever([VectorRetriever(vector_store=store, embedder=embedder), BM25Retriever(store=store)])


def snapshot(docs: list[Document]) -> list[tuple[str, float]]:
    return [(d.id, d.score) for d in docs]


async def test_1000_concurrent_calls_on_one_retriever_match_the_sequential_results(tmp_path) -> None:
    store, hybrid = await open_hybrid(tmp_path / "load.db")
    async with store:
        calls = [(QUERIES[i % len(QUERIES)], 3 + i % 5, {"equals": {"key": "even", "value": True}} if i % 4 == 0 else None)
                 for i in range(1000)]  # fmt: skip
        expected: dict[tuple, list] = {}
        for query, k, filter_ in calls:  # one by one, before any concurrency
            key = (query, k, str(filter_))
            if key not in expected:
                expected[key] = snapshot(await hybrid.retrieve(query, k=k, filter=filter_))
        got: list[tuple[tuple, list]] = []

        async def one(query: str, k: int, filter_) -> None:
            got.append(((query, k, str(filter_)), snapshot(await hybrid.retrieve(query, k=k, filter=filter_))))

        with anyio.fail_after(90):
            async with anyio.create_task_group() as tg:
                for query, k, filter_ in calls:
                    tg.start_soon(one, query, k, filter_)
        assert len(got) == 1000
        for key, result in got:
            assert result == expected[key], key
        assert all(result for _, result in got)


def tasks_now() -> int:
    return len(asyncio.all_tasks())


async def test_cancelled_calls_leave_no_task_thread_or_transaction_behind(tmp_path) -> None:
    path = tmp_path / "cancel.db"
    store, hybrid = await open_hybrid(path)
    before = tasks_now()
    expected = snapshot(await hybrid.retrieve("solar power", k=5))
    finished = 0

    async def one(i: int) -> None:
        nonlocal finished
        await hybrid.retrieve(QUERIES[i % len(QUERIES)], k=5)
        finished += 1

    # a cancel scope around many calls, cancelled while they are in flight
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            for i in range(300):
                tg.start_soon(one, i)
            await anyio.sleep(0.02)
            scope.cancel()
    assert scope.cancelled_caught and finished < 300
    # timeouts on single calls, some expiring mid-search
    timed_out = 0
    for i in range(60):
        with anyio.move_on_after(0.0005 * (i % 6)) as deadline:
            await hybrid.retrieve(QUERIES[i % len(QUERIES)], k=5)
        timed_out += deadline.cancelled_caught
    assert timed_out > 0

    assert tasks_now() == before  # every branch task ended
    # the worker threads finished their SQLite calls: nobody holds the writer connection, every read
    # connection is back in the pool, and no transaction is left open on any of them
    assert store._lock.acquire(blocking=False)
    store._lock.release()
    assert not store._conn.in_transaction
    readers = list(store._readers)
    assert readers and sorted(map(id, store._idle)) == sorted(map(id, readers))
    assert not any(conn.in_transaction for conn in readers)
    # the store still answers, with the same results, and closes cleanly
    assert snapshot(await hybrid.retrieve("solar power", k=5)) == expected
    assert await store.count() == 120
    with anyio.fail_after(10):
        await store.aclose()
        await store.aclose()  # idempotent
    with pytest.raises(BackendUnavailableError):
        await store.count()
    # every connection is closed: the writer's and each reader's
    for conn in (store._conn, *readers):
        with pytest.raises(sqlite3.ProgrammingError, match="closed"):
            conn.execute("SELECT 1")
    assert not path.with_name(path.name + "-wal").exists()  # the last connection closed checkpointed it away


async def test_cancelling_calls_blocked_on_a_full_read_pool_leaks_no_connection(tmp_path) -> None:
    """With one read connection, most concurrent calls wait for it; cancelling them while they wait (or
    while they read) returns the connection every time, and the store keeps answering."""
    path = tmp_path / "pool.db"
    store, embedder = SQLiteVectorStore(path, read_connections=1), HashingEmbedder()
    docs = corpus()
    await store.upsert(docs, embeddings=await embedder.embed_documents([d.content for d in docs]))
    hybrid = HybridRetriever([VectorRetriever(vector_store=store, embedder=embedder), BM25Retriever(store=store)])
    expected = snapshot(await hybrid.retrieve("wind power", k=5))
    for round_ in range(5):
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                for i in range(50):
                    tg.start_soon(hybrid.retrieve, QUERIES[i % len(QUERIES)])
                await anyio.sleep(0.001 * round_)
                scope.cancel()
    assert len(store._readers) == len(store._idle) == 1  # never more than one, and it is back in the pool
    assert snapshot(await hybrid.retrieve("wind power", k=5)) == expected
    readers = list(store._readers)
    with anyio.fail_after(10):
        await store.aclose()
    for conn in (store._conn, *readers):
        with pytest.raises(sqlite3.ProgrammingError, match="closed"):
            conn.execute("SELECT 1")
