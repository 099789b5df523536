"""Durability of the SQLite default: SIGKILL during `fastrag index`, whole documents per batch, snapshot reads."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import anyio
import numpy as np
import pytest

from fastrag.errors import BackendError
from fastrag.filters import field
from fastrag.ingestion import Chunker, IngestionPipeline
from fastrag.ingestion.parsers import file_kind, parse
from fastrag.models import Document
from fastrag.testing.fakes import HashingEmbedder, InMemoryStore
from fastrag.vector_store.sqlite import SQLiteVectorStore

FASTRAG = Path(sys.executable).with_name("fastrag")  # the console script installed next to this Python
N_FILES = 3_000
CHUNK_SIZE = 200


def write_corpus(root: Path, n: int) -> None:
    for i in range(n):
        folder = root / f"d{i // 100:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i:04d}.md").write_text(
            f"# File {i}\n\nAlpha section of file {i} about topic{i % 37}.\n\n"
            f"## Second\n\nBeta words for file {i}, number{i}.\n\n## Third\n\nGamma closing text {i}.\n",
            encoding="utf-8",
        )


def expected_chunks(root: Path, cwd: Path) -> dict[str, int]:
    """Chunks per source_uri, computed in-process with the CLI's chunker settings."""
    chunker = Chunker(chunk_size=CHUNK_SIZE, chunk_overlap=100)
    out = {}
    for path in sorted(root.rglob("*.md")):
        uri = path.relative_to(cwd).as_posix()
        for parsed in parse(path.read_bytes(), source_uri=uri, kind=file_kind(path)):
            out[parsed.source_uri] = len(list(chunker.chunk(parsed)))
    return out


def committed_chunks(db: Path) -> int:
    """Chunks committed so far, read through a separate read-only connection (never blocks the writer)."""
    if not db.exists():
        return 0
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.1)
        try:
            return conn.execute("SELECT count(*) FROM documents").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error:
        return 0  # the schema is not there yet


def assert_whole_documents(docs: list[Document], expected: dict[str, int]) -> None:
    by_uri: dict[str, list[int]] = defaultdict(list)
    for doc in docs:
        by_uri[doc.metadata["source_uri"]].append(doc.metadata["chunk_index"])
    for uri, indexes in by_uri.items():
        assert sorted(indexes) == list(range(expected[uri])), f"{uri} is stored incomplete: {sorted(indexes)}"


@pytest.mark.timeout(180)
def test_sigkill_during_fastrag_index_leaves_a_consistent_store_and_a_rerun_completes(tmp_path: Path) -> None:
    assert FASTRAG.exists(), f"no console script at {FASTRAG}"
    write_corpus(tmp_path / "corpus", N_FILES)
    expected = expected_chunks(tmp_path / "corpus", tmp_path)
    total = sum(expected.values())
    assert total == 3 * N_FILES
    db = tmp_path / "store.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTRAG_")}
    command = [str(FASTRAG), "index", "corpus", "--store", f"sqlite:///{db}", "--chunk-size", str(CHUNK_SIZE)]

    writer = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and writer.poll() is None and committed_chunks(db) < 300:
        time.sleep(0.01)
    writer.send_signal(signal.SIGKILL)
    writer.communicate()
    assert writer.returncode == -signal.SIGKILL, "fastrag index finished before it could be killed"
    at_kill = committed_chunks(db)
    assert 0 < at_kill < total, f"not killed mid-run: {at_kill} of {total} chunks committed"

    async def inspect() -> tuple[int, list[Document], list[str]]:
        async with SQLiteVectorStore(db) as store:  # opens (recovering the WAL) and answers
            hits = await store.search_text("alpha topic5", k=5)
            return await store.count(), await store.get(), [d.id for d in hits]

    count, docs, hits = anyio.run(inspect)
    assert count == len(docs) >= at_kill > 0 and hits
    assert_whole_documents(docs, expected)  # every stored file has all of its chunks, none half-written

    rerun = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=150)
    assert rerun.returncode == 0, rerun.stderr
    assert f"the store holds {total} chunks" in rerun.stdout
    count, docs, hits = anyio.run(inspect)
    ids = [d.id for d in docs]
    assert count == total == len(ids) == len(set(ids))  # nothing missing, nothing twice
    assert_whole_documents(docs, expected)
    assert {d.metadata["source_uri"] for d in docs} == set(expected)


@pytest.mark.anyio
async def test_a_batch_never_splits_a_document_so_a_failed_run_leaves_whole_documents(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    for i in range(10):  # three sections each: three chunks each
        folder = root
        folder.mkdir(exist_ok=True)
        (folder / f"f{i}.md").write_text(f"# T{i}\n\nfirst {i}\n\n## B\n\nsecond {i}\n\n## C\n\nthird {i}\n")

    class FailsOnThirdWrite(InMemoryStore):
        batches: list[list[str]] = []

        async def upsert(self, documents, *, embeddings=None):
            if len(self.batches) == 2:
                raise BackendError("disk full", store="mem")
            self.batches.append([d.id for d in documents])
            await super().upsert(documents, embeddings=embeddings)

    store = FailsOnThirdWrite()
    pipeline = IngestionPipeline(embedder=HashingEmbedder(), vector_store=store, batch_size=4, show_progress=False)
    with pytest.raises(BackendError):
        await pipeline.run([root])
    assert [len(b) for b in store.batches] == [3, 3]  # a batch closes early rather than cut a file
    stored = await store.get()
    assert len(stored) == 6
    assert_whole_documents(stored, defaultdict(lambda: 3))


# ------------------------------------------------------------------------------ consistent snapshots

N_BASE, N_BATCH = 200, 1_500


def base_docs() -> list[Document]:
    return [Document(id=f"base{i}", content=f"ordinary text {i}", metadata={"batch": False}) for i in range(N_BASE)]


def batch_docs(version: int) -> list[Document]:
    return [Document(id=f"new{i}", content=f"zephyr wind {i} v{version}", metadata={"batch": True})
            for i in range(N_BATCH)]  # fmt: skip


async def toggle_and_read(writer: SQLiteVectorStore, reader: SQLiteVectorStore, rounds: int) -> list[tuple]:
    """The writer adds the batch in one upsert and removes it in one delete, ``rounds`` times, while the
    reader counts and searches as fast as it can. Returns what the reader saw."""
    vectors = np.random.default_rng(0).random((N_BATCH, 8), dtype=np.float32) + 0.1
    query = np.ones(8, dtype=np.float32)
    seen: list[tuple] = []
    done = anyio.Event()

    async def write() -> None:
        for version in range(rounds):
            await writer.upsert(batch_docs(version), embeddings=vectors)
            await writer.delete(filter=field("batch") == True)  # noqa: E712
        done.set()

    async def read() -> None:
        while not done.is_set():
            seen.append((
                await reader.count(),
                await reader.count(filter=field("batch") == True),  # noqa: E712
                len(await reader.search_text("zephyr", k=N_BATCH + 10)),
                len(await reader.search_vector(query, k=N_BASE + N_BATCH + 10)),
            ))  # fmt: skip

    async with anyio.create_task_group() as tg:
        tg.start_soon(write)
        tg.start_soon(read)
    return seen


def assert_old_or_new(seen: list[tuple]) -> None:
    """Each call saw the state before the batch or after it; the tuple spans calls, so only each entry."""
    for count, in_batch, text_hits, vector_hits in seen:
        assert count in (N_BASE, N_BASE + N_BATCH)
        assert in_batch in (0, N_BATCH) and text_hits in (0, N_BATCH)
        assert vector_hits in (N_BASE, N_BASE + N_BATCH)
    assert len(seen) >= 2


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_readers_of_one_store_see_the_old_or_the_new_state_never_a_partial_one(tmp_path: Path) -> None:
    async with SQLiteVectorStore(tmp_path / "one.db") as store:
        await store.upsert(base_docs(), embeddings=np.ones((N_BASE, 8), dtype=np.float32))
        assert_old_or_new(await toggle_and_read(store, store, rounds=3))


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_a_second_connection_sees_consistent_snapshots_and_the_latest_commit(tmp_path: Path) -> None:
    # two stores on one file are two connections, as two processes would have
    path = tmp_path / "two.db"
    async with SQLiteVectorStore(path) as writer, SQLiteVectorStore(path) as reader:
        await writer.upsert(base_docs(), embeddings=np.ones((N_BASE, 8), dtype=np.float32))
        assert len(await reader.search_vector(np.ones(8, dtype=np.float32), k=10)) == 10  # warm its caches
        assert_old_or_new(await toggle_and_read(writer, reader, rounds=3))
        await writer.upsert(batch_docs(99), embeddings=np.ones((N_BATCH, 8), dtype=np.float32))
        # the reader's cached vectors and BM25 statistics follow the other connection's commits
        assert len(await reader.search_vector(np.ones(8, dtype=np.float32), k=N_BASE + N_BATCH)) == N_BASE + N_BATCH
        assert len(await reader.search_text("zephyr v99", k=N_BATCH)) == N_BATCH
        await writer.delete(ids=[f"new{i}" for i in range(N_BATCH)])
        assert len(await reader.search_vector(np.ones(8, dtype=np.float32), k=N_BASE + N_BATCH)) == N_BASE
        assert await reader.search_text("zephyr", k=5) == []



# ------------------------------------------------------------------------------ concurrent reads during writes

HAMMER_ROUNDS, HAMMER_BATCH, HAMMER_DIM = 6, 25, 8
HAMMER_QUERY = np.linspace(1.0, 2.0, HAMMER_DIM, dtype=np.float32)
EVEN = field("even") == True  # noqa: E712


def hammer_writes() -> list[tuple[str, object]]:
    """The writes, in order: the base, then each round adds a batch and removes the one from two rounds
    before (two transactions a round), so document count, BM25 statistics and vectors all change."""
    def batch(v: int) -> tuple[list[Document], np.ndarray]:
        docs = [Document(id=f"v{v}-{i:02d}", content=f"hammer common round{v} " + "filler " * (i % 7),
                         metadata={"even": i % 2 == 0, "round": v}) for i in range(HAMMER_BATCH)]  # fmt: skip
        return docs, np.random.default_rng(v + 1).random((HAMMER_BATCH, HAMMER_DIM), dtype=np.float32) + 0.05

    writes: list[tuple[str, object]] = [("upsert", batch(-1))]
    for v in range(HAMMER_ROUNDS):
        writes.append(("upsert", batch(v)))
        if v >= 2:
            writes.append(("delete", [f"v{v - 2}-{i:02d}" for i in range(HAMMER_BATCH)]))
    return writes


async def apply(store: SQLiteVectorStore, write: tuple[str, object]) -> None:
    kind, payload = write
    if kind == "upsert":
        docs, vectors = payload  # type: ignore[misc]
        await store.upsert(docs, embeddings=vectors)
    else:
        await store.delete(ids=payload)  # type: ignore[arg-type]


HAMMER_READS = {
    "count": lambda s: s.count(),
    "count even": lambda s: s.count(filter=EVEN),
    "bm25": lambda s: s.search_text("hammer round3 filler", k=200),
    "bm25 even": lambda s: s.search_text("common filler", k=7, filter=EVEN),
    "dense": lambda s: s.search_vector(HAMMER_QUERY, k=200),
    "dense even": lambda s: s.search_vector(HAMMER_QUERY, k=9, filter=EVEN),
    "get": lambda s: s.get(filter=EVEN),
}


def answer(result: object) -> object:
    if isinstance(result, list):
        return tuple((d.id, None if d.score is None else round(d.score, 9)) for d in result)
    return result


@pytest.mark.anyio
@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", ["file", ":memory:"])
async def test_concurrent_reads_during_writes_each_equal_the_answer_of_one_committed_state(tmp_path: Path, where: str) -> None:
    writes = hammer_writes()
    # the answer of every read in every committed state, computed one call at a time on a second store
    states: list[dict[str, object]] = []
    async with SQLiteVectorStore(":memory:") as reference:
        for write in writes:
            await apply(reference, write)
            states.append({name: answer(await read(reference)) for name, read in HAMMER_READS.items()})
    assert all(states[i] != states[i + 1] for i in range(len(states) - 1))  # every write changes the answers

    path = tmp_path / "hammer.db" if where == "file" else ":memory:"
    async with SQLiteVectorStore(path, read_connections=3) as store:
        await apply(store, writes[0])
        done = anyio.Event()
        seen: list[list[tuple[str, object, bool]]] = [[] for _ in range(5)]

        async def write_all() -> None:
            for write in writes[1:]:
                await apply(store, write)
                await anyio.sleep(0)
            done.set()

        async def read_all(reader: int) -> None:
            names = list(HAMMER_READS)
            i, after_last_write = reader, 0
            while after_last_write < len(names):  # until each read has run once after the last write
                name, late = names[i % len(names)], done.is_set()
                seen[reader].append((name, answer(await HAMMER_READS[name](store)), late))
                i, after_last_write = i + 1, after_last_write + late

        async with anyio.create_task_group() as tg:
            tg.start_soon(write_all)
            for reader in range(len(seen)):
                tg.start_soon(read_all, reader)

    for reads in seen:
        low = 0  # one task's reads never go back to an older state than one it has already seen
        for name, got, late in reads:
            matching = [s for s in range(low, len(states)) if states[s][name] == got]
            assert matching, f"{name}: {got!r} is the answer of no committed state at or after state {low}"
            low = matching[0]
            if late:  # began after the last write committed: the last state
                assert got == states[-1][name], name
