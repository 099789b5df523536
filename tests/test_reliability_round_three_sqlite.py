"""Reliability, round three (issue 26) and the read pool (issue 28, point 1), for the embedded SQLite store.

Each test here failed before its fix, except the last two of the pool section, which guard what the fix
must keep (closing wakes every waiting read). docs/reliability.md lists the guarantees with these tests.

The tests that need a real full disk or a real read-only file system make them in a private mount
namespace (``unshare --mount``: a small tmpfs, a read-only bind mount), which needs root; without root a
read-only folder is made with permissions instead (``chmod``), which root would ignore.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import numpy as np
import pytest

from fastrag.errors import BackendError, BackendUnavailableError, ReadOnlyStoreError
from fastrag.models import Document
from fastrag.retrieval import BM25Retriever, HybridRetriever, VectorRetriever
from fastrag.testing.fakes import HashingEmbedder
from fastrag.vector_store.sqlite import SQLiteVectorStore, lexical

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[1]
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
FULL = "database or disk is full"


def batch(tag: str, n: int) -> list[Document]:
    return [Document(id=f"{tag}-{i}", content=f"tidal power plant {tag} number {i}") for i in range(n)]


async def fill_level_zero(store: SQLiteVectorStore) -> None:
    """One segment short of a merge: ``MERGE_FACTOR - 1`` writes of two documents each."""
    for b in range(lexical.MERGE_FACTOR - 1):
        await store.upsert([Document(id=f"old{b}-{i}", content=f"solar wind word{b} text{i}") for i in range(2)])


# ------------------------------------------------------------------ issue 26: a committed write reported failed


async def test_a_write_whose_merge_fails_after_its_commit_is_reported_committed(tmp_path, monkeypatch, caplog):
    """The merge that follows a write fails with SQLite's full-disk error (and, as SQLite does on
    SQLITE_FULL, its transaction is already rolled back): upsert returns, the 60 documents are stored and
    survive a reopen, the failure is logged with the real cause and shown by status(), and the next write
    runs the merge."""
    path = tmp_path / "full.db"
    real_merge = lexical.merge_segments

    def full_disk(conn, *args):
        conn.execute("ROLLBACK")  # SQLite rolls the transaction back itself on SQLITE_FULL
        raise sqlite3.OperationalError(FULL)

    async with SQLiteVectorStore(path) as store:
        await fill_level_zero(store)
        monkeypatch.setattr(lexical, "merge_segments", full_disk)
        with caplog.at_level(logging.ERROR, logger="fastrag.vector_store"):
            await store.upsert(batch("new", 60))  # raised BackendError "cannot rollback" before
        assert len(await store.get(ids=[d.id for d in batch("new", 60)])) == 60
        [record] = [r for r in caplog.records if r.name == "fastrag.vector_store" and r.levelno == logging.ERROR]
        assert str(path) in record.getMessage() and FULL in record.getMessage()
        status = await store.status()
        assert status.maintenance_error == f"OperationalError: {FULL}"
        assert status.maintenance_due == "merge" and status.maintenance_failures == 1 and not status.healthy
        assert status.segments == lexical.MERGE_FACTOR and status.documents == 2 * (lexical.MERGE_FACTOR - 1) + 60
        assert [d.id for d in await store.search_text("tidal new number 7", k=1)] == ["new-7"]

    async with SQLiteVectorStore(path) as store:  # reopened: the batch is there, the merge still due
        assert len(await store.get(ids=[d.id for d in batch("new", 60)])) == 60
        assert (await store.status()).maintenance_due == "merge"
        monkeypatch.setattr(lexical, "merge_segments", real_merge)  # the disk has room again
        await store.upsert(batch("next", 1))  # the next write runs the merge
        status = await store.status()
        assert status.healthy and status.maintenance_due is None and status.segments < lexical.MERGE_FACTOR
        assert [d.id for d in await store.search_text("tidal new number 7", k=1)] == ["new-7"]
        assert await store.count() == 2 * (lexical.MERGE_FACTOR - 1) + 61


async def test_a_failed_merge_is_reported_again_until_one_succeeds(tmp_path, monkeypatch):
    async with SQLiteVectorStore(tmp_path / "again.db") as store:
        await fill_level_zero(store)
        real_merge = lexical.merge_segments

        def full_disk(conn, *args):
            raise sqlite3.OperationalError(FULL)

        monkeypatch.setattr(lexical, "merge_segments", full_disk)
        await store.upsert(batch("a", 3))
        await store.upsert(batch("b", 3))
        status = await store.status()
        assert status.maintenance_failures == 2 and status.maintenance_failed_at is not None
        monkeypatch.setattr(lexical, "merge_segments", real_merge)
        await store.delete(ids=["a-0"])  # a delete is a write too: it runs the due merge
        status = await store.status()
        assert status.healthy and status.maintenance_failures == 0 and status.maintenance_due is None
        assert await store.count() == 2 * (lexical.MERGE_FACTOR - 1) + 5


# The same on a real full disk: a small tmpfs in a private mount namespace, filled up after the 31st write
# (the WAL journal truncated first, so the next write's and the merge's pages are appended to it: the
# write needs ~60 KiB, the merge ~700 KiB, and 256 KiB are left).
DISK_FULL_CHILD = r"""
import json, logging, os, random, sys
import anyio
from fastrag.errors import BackendError
from fastrag.models import Document
from fastrag.vector_store.sqlite import SQLiteVectorStore, lexical

folder = sys.argv[1]
path = os.path.join(folder, "store.db")
filler = os.path.join(folder, "filler")
out = {}
records = []
handler = logging.Handler()
handler.emit = lambda record: records.append(record.getMessage())
logging.getLogger("fastrag.vector_store").addHandler(handler)
rng = random.Random(0)
words = [f"w{i}" for i in range(3000)]


def fill(leave):
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    # tmpfs counts whole pages: free ``leave`` bytes from the end of the filler
    os.truncate(filler, max(0, os.path.getsize(filler) - leave))


async def main():
    new = [Document(id=f"new-{i}", content=f"tidal power plant number {i}") for i in range(60)]
    async with SQLiteVectorStore(path) as store:
        for b in range(lexical.MERGE_FACTOR - 1):
            await store.upsert([Document(id=f"{b}-{i}", content=" ".join(rng.choices(words, k=60))) for i in range(20)])
        store._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        fill(256 * 1024)
        try:
            await store.upsert(new)
            out["upsert"] = "returned"
        except Exception as exc:
            out["upsert"] = f"{type(exc).__name__}: {exc}"
        status = await store.status()
        out["error"], out["due"] = status.maintenance_error, status.maintenance_due
        out["stored"] = len(await store.get(ids=[d.id for d in new]))
        out["logged"] = records[:]
        # a write that itself meets the full disk fails with SQLite's error, not "cannot rollback"
        fill(0)
        try:
            await store.upsert([Document(id=f"late-{i}", content="late " * 2000) for i in range(50)])
            out["full_write"] = "returned"
        except BackendError as exc:
            out["full_write"] = f"{type(exc).__name__}: {exc}"
        out["after_full_write"] = await store.count()
        os.remove(filler)
        await store.upsert([Document(id="next", content="tidal next")])  # room again: the merge runs
        status = await store.status()
        out["retried"] = [status.maintenance_error, status.maintenance_due, status.segments]
    async with SQLiteVectorStore(path) as store:
        out["reopened"] = len(await store.get(ids=[d.id for d in new]))
        out["count"] = await store.count()

anyio.run(main)
print(json.dumps(out))
"""


def in_private_mount(setup: str, script: str, *args: str) -> subprocess.CompletedProcess:
    """Run ``script`` (Python, given ``args``) in a private mount namespace, after the shell ``setup`` (its
    mounts vanish with the namespace, whatever happens)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "bash", "-c", f'{setup} && exec "$0" -c "$@"',
         sys.executable, script, *args],
        check=False, capture_output=True, text=True, timeout=100, env=env,
    )  # fmt: skip


def needs_mounts() -> None:
    if not IS_ROOT or shutil.which("unshare") is None:
        pytest.skip("a real full disk or read-only mount needs root (unshare --mount, mount)")
    probe = subprocess.run(["unshare", "--mount", "true"], check=False, capture_output=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"no private mount namespace here: {probe.stderr.decode(errors='replace').strip()}")


def test_a_full_disk_during_the_merge_after_a_commit_on_a_real_tmpfs(tmp_path):
    needs_mounts()
    folder = tmp_path / "small"
    folder.mkdir()
    proc = in_private_mount(f"mount -t tmpfs -o size=4m tmpfs {folder}", DISK_FULL_CHILD, str(folder))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["upsert"] == "returned"  # was BackendError: cannot rollback - no transaction is active
    assert out["stored"] == 60 and out["reopened"] == 60
    assert out["error"] == f"OperationalError: {FULL}" and out["due"] == "merge"
    assert any(FULL in line and "merge" in line for line in out["logged"]), out["logged"]
    assert out["full_write"].startswith("BackendError") and FULL in out["full_write"], out["full_write"]
    assert "cannot rollback" not in out["full_write"]
    assert out["after_full_write"] == 31 * 20 + 60  # the failed write left nothing behind
    error, due, segments = out["retried"]
    assert error is None and due is None and segments < lexical.MERGE_FACTOR
    assert out["count"] == 31 * 20 + 61


# ------------------------------------------------------------------ issue 26: a read-only store opens for reading

DOCS = [Document(id=f"d{i:02d}", content=text, metadata={"n": i}) for i, text in enumerate(
    ["solar panels on the roof", "wind turbines at sea", "tidal power in the bay", "solar farms in the desert",
     "nuclear power station", "battery storage for solar power", "hydro dams and rivers", "geothermal heat"]
)]


async def build(path: Path) -> dict[str, list[str]]:
    """A store at ``path`` (closed again), and what its searches answer."""
    async with SQLiteVectorStore(path) as store:
        await store.upsert(DOCS, embeddings=await HashingEmbedder().embed_documents([d.content for d in DOCS]))
        return await answers(store)


async def answers(store: SQLiteVectorStore) -> dict[str, list[str]]:
    embedder = HashingEmbedder()
    bm25, dense = BM25Retriever(store=store), VectorRetriever(vector_store=store, embedder=embedder)
    hybrid = HybridRetriever([VectorRetriever(vector_store=store, embedder=embedder), BM25Retriever(store=store)])
    return {name: [d.id for d in await r.retrieve("solar power", k=4)]
            for name, r in (("bm25", bm25), ("vector", dense), ("hybrid", hybrid))}  # fmt: skip


READ_ONLY_CHILD = r"""
import json, sys
import anyio
from fastrag.errors import ReadOnlyStoreError
from fastrag.models import Document
from fastrag.vector_store.sqlite import SQLiteVectorStore
sys.path.insert(0, sys.argv[2])
from test_reliability_round_three_sqlite import answers

out = {}

async def main():
    try:
        store = SQLiteVectorStore(sys.argv[1])
    except Exception as exc:
        out["open"] = f"{type(exc).__name__}: {exc}"
        return
    async with store:
        status = await store.status()
        out.update(read_only=store.read_only, access=status.access, reason=status.read_only_reason,
                   count=await store.count(), answers=await answers(store))
        refused = []
        for name, call in (("upsert", lambda: store.upsert([Document(id="x", content="x")])),
                           ("delete", lambda: store.delete(ids=["d00"])), ("clear", store.clear)):
            try:
                await call()
                refused.append(f"{name}: returned")
            except ReadOnlyStoreError as exc:
                refused.append(f"{name}: {exc}")
        out["refused"] = refused
        out["count_after"] = await store.count()

anyio.run(main)
print(json.dumps(out))
"""


def open_read_only(folder: Path, path: Path) -> dict:
    """Open ``path`` (in ``folder``) where ``folder`` is read-only, in a child process: a read-only bind mount
    as root, permissions (0555 folder, 0444 files) otherwise."""
    if IS_ROOT:
        needs_mounts()
        proc = in_private_mount(f"mount --bind {folder} {folder} && mount -o remount,bind,ro {folder}",
                                READ_ONLY_CHILD, str(path), str(Path(__file__).parent))  # fmt: skip
    else:
        for p in folder.iterdir():
            p.chmod(0o444)
        folder.chmod(0o555)
        try:
            proc = subprocess.run([sys.executable, "-c", READ_ONLY_CHILD, str(path), str(Path(__file__).parent)],
                                  check=False, capture_output=True, text=True, timeout=100,
                                  env=dict(os.environ, PYTHONPATH=str(ROOT)))  # fmt: skip
        finally:
            folder.chmod(0o755)
            for p in folder.iterdir():
                p.chmod(0o644)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


async def test_a_store_whose_folder_is_read_only_opens_for_reading_and_refuses_writes(tmp_path):
    """Closed cleanly, the store is one file (no -wal, no -shm), which SQLite cannot create in a read-only
    folder: it is opened immutable. BM25, vector and hybrid answer as before; writes raise a typed error
    naming the store."""
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "store.db"
    expected = await build(path)
    assert sorted(p.name for p in folder.iterdir()) == ["store.db"]
    out = open_read_only(folder, path)
    assert "open" not in out, out["open"]  # BackendUnavailableError before: unable to open database file
    assert out["read_only"] is True and out["access"] == "immutable" and out["reason"]
    assert out["answers"] == expected and out["count"] == out["count_after"] == len(DOCS)
    for name, line in zip(("upsert", "delete", "clear"), out["refused"], strict=True):
        assert line.startswith(f"{name}: {path}: the store is opened read-only"), line


async def test_a_read_only_store_whose_writer_is_still_open_sees_its_commits(tmp_path):
    """While a writer holds the store open elsewhere (-wal and -shm exist), a read-only open goes through
    SQLite's mode=ro and sees what the writer committed, even what is still only in the WAL."""
    folder = tmp_path / "live"
    folder.mkdir()
    path = folder / "store.db"
    expected = await build(path)
    async with SQLiteVectorStore(path) as writer:
        writer._conn.execute("PRAGMA wal_autocheckpoint=0")  # the next commit stays in the WAL
        await writer.upsert([Document(id="d99", content="solar power solar power everywhere")],
                            embeddings=await HashingEmbedder().embed_documents(["solar power solar power everywhere"]))
        assert Path(f"{path}-wal").stat().st_size > 0
        out = open_read_only(folder, path)
    assert "open" not in out, out["open"]
    assert out["access"] == "read-only" and out["count"] == len(DOCS) + 1
    assert out["answers"]["bm25"][0] == "d99" and expected["bm25"][0] != "d99"
    assert [line.split(":")[0] for line in out["refused"]] == ["upsert", "delete", "clear"]
    assert all("read-only" in line for line in out["refused"])


async def test_a_journal_that_cannot_be_read_without_write_access_is_a_clear_error(tmp_path):
    """Commits in a -wal file whose -shm is gone cannot be read from a read-only folder: opening refuses,
    naming the store and the fix, instead of answering from the older file."""
    live, copy = tmp_path / "live", tmp_path / "copy"
    live.mkdir()
    copy.mkdir()
    path = live / "store.db"
    await build(path)
    async with SQLiteVectorStore(path) as writer:
        writer._conn.execute("PRAGMA wal_autocheckpoint=0")
        await writer.upsert([Document(id="d99", content="late")])
        for suffix in ("", "-wal"):  # the file and its journal, not the WAL index
            shutil.copyfile(f"{path}{suffix}", copy / f"store.db{suffix}")
    out = open_read_only(copy, copy / "store.db")
    assert out["open"].startswith(f"BackendUnavailableError: {copy / 'store.db'}: the store cannot be opened read-only")
    assert "store.db-wal" in out["open"] and "writable" in out["open"]


async def test_read_only_true_opens_any_store_for_reading_only(tmp_path):
    path = tmp_path / "store.db"
    expected = await build(path)
    async with SQLiteVectorStore(path, read_only=True) as store:
        assert store.read_only and (await store.status()).access == "read-only"
        assert await answers(store) == expected
        for call in (lambda: store.upsert(DOCS[:1]), lambda: store.delete(ids=["d00"]), store.clear):
            with pytest.raises(ReadOnlyStoreError, match="opened read-only") as info:
                await call()
            assert info.value.store == str(path) and isinstance(info.value, BackendError)
        assert await store.count() == len(DOCS)
    with pytest.raises(BackendUnavailableError, match="no store at"):
        SQLiteVectorStore(tmp_path / "missing.db", read_only=True)
    assert not (tmp_path / "missing.db").exists()
    async with SQLiteVectorStore(path, read_only=False) as store:  # writable: opens as it always did
        assert not store.read_only and (await store.status()).access == "read-write"


# ------------------------------------------------------------------ issue 28.1: the hop and the pool


class ParkedThreads(threading.Condition):
    """The read pool's condition, counting the threads parked in it (waiting for a connection) at once."""

    def __init__(self) -> None:
        super().__init__(threading.Lock())
        self.now = self.most = 0

    def wait(self, timeout: float | None = None) -> bool:
        self.now += 1  # the lock is held here, and again after the wait
        self.most = max(self.most, self.now)
        try:
            return super().wait(timeout)
        finally:
            self.now -= 1


VECTORS = np.random.default_rng(3).random((40, 8), dtype=np.float32) + 0.05
POOL_DOCS = [Document(id=f"p{i:02d}", content=f"solar panel number{i} wind") for i in range(40)]


async def test_a_search_never_parks_more_threads_than_the_store_has_read_connections(tmp_path):
    """128 concurrent searches on a store with 2 read connections, each read holding its connection 2 ms:
    at most 2 worker threads ever wait for a connection (one per connection, ready to take it back; up to
    38 before, anyio's 40 threads less the 2 reading), and every answer is right."""
    async with SQLiteVectorStore(tmp_path / "pool.db", read_connections=2) as store:
        await store.upsert(POOL_DOCS, embeddings=VECTORS)
        expected_text = [d.id for d in await store.search_text("panel number7", k=3)]
        expected_vector = [d.id for d in await store.search_vector(VECTORS[5], k=3)]
        store._pool = parked = ParkedThreads()
        real = store._in_snapshot

        def slow(conn, fn, args):  # holds its connection long enough for other reads to queue
            time.sleep(0.002)
            return real(conn, fn, args)

        store._in_snapshot = slow
        got: list[bool] = []

        async def one(i: int) -> None:
            if i % 2:
                got.append([d.id for d in await store.search_text("panel number7", k=3)] == expected_text)
            else:
                got.append([d.id for d in await store.search_vector(VECTORS[5], k=3)] == expected_vector)

        async with anyio.create_task_group() as tg:
            for i in range(128):
                tg.start_soon(one, i)
        assert got == [True] * 128
        assert parked.most <= 2, f"{parked.most} threads waited for a read connection at once"
        assert len(store._readers) == 2


class CountingLock:
    """A lock that counts the threads holding or waiting for it."""

    def __init__(self) -> None:
        self._lock, self._count = threading.Lock(), threading.Lock()
        self.now = self.most = 0

    def __enter__(self) -> None:
        with self._count:
            self.now += 1
            self.most = max(self.most, self.now)
        self._lock.acquire()
        time.sleep(0.001)

    def __exit__(self, *exc: object) -> None:
        self._lock.release()
        with self._count:
            self.now -= 1


async def test_calls_on_one_connection_park_at_most_one_thread():
    """A ``":memory:"`` store has one connection (a file store one writer): 60 concurrent calls never have
    more than one thread using it and one waiting for it (40 at once before)."""
    async with SQLiteVectorStore(":memory:") as store:
        await store.upsert(POOL_DOCS, embeddings=VECTORS)
        store._lock = CountingLock()

        async def one(i: int) -> None:
            if i % 3 == 0:
                await store.upsert([Document(id=f"w{i}", content="more wind")])
            else:
                assert len(await store.search_text("panel", k=3)) == 3

        async with anyio.create_task_group() as tg:
            for i in range(60):
                tg.start_soon(one, i)
        assert store._lock.most <= 2, f"{store._lock.most} threads held or waited for the connection at once"
        assert await store.count() == 40 + 20


class CountingCondition(threading.Condition):
    """A condition that counts how many times a waiting thread was woken."""

    def __init__(self) -> None:
        super().__init__(threading.Lock())
        self.wakeups = 0

    def wait(self, timeout: float | None = None) -> bool:
        woke = super().wait(timeout)
        self.wakeups += 1  # the lock is held again here
        return woke


def test_a_returned_connection_wakes_one_waiting_thread(tmp_path):
    """Threads that bypass the limiter (plain threads, as several event loops' would) share one read
    connection: each return wakes at most one of them (every return woke all of them before)."""
    store = SQLiteVectorStore(tmp_path / "wake.db", read_connections=1)
    anyio.run(store.upsert, POOL_DOCS)
    store._pool = CountingCondition()
    reads = 0
    errors: list[BaseException] = []

    def read(conn, snap):
        time.sleep(0.002)
        return snap.n_live

    def worker() -> None:
        nonlocal reads
        try:
            for _ in range(10):
                assert store._pooled_read(read, ()) == 40
                with store._pool:
                    reads += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and reads == 80
    assert store._pool.wakeups <= reads, f"{store._pool.wakeups} wake-ups for {reads} returned connections"
    anyio.run(store.aclose)


def test_closing_wakes_every_thread_waiting_for_a_connection(tmp_path):
    """One connection, held by a read; three more threads wait for it; aclose begins. When the read
    returns its connection every waiter is woken and refused (not one of them), and the store closes."""
    store = SQLiteVectorStore(tmp_path / "close.db", read_connections=1)
    anyio.run(store.upsert, POOL_DOCS)
    entered, release = threading.Event(), threading.Event()
    outcomes: list[str] = []

    def held(conn, snap):
        entered.set()
        release.wait(30)
        return snap.n_live

    def waiting() -> None:
        try:
            store._pooled_read(lambda conn, snap: snap.n_live, ())
            outcomes.append("read")
        except BackendUnavailableError:
            outcomes.append("refused")

    holder = threading.Thread(target=lambda: outcomes.append(f"held {store._pooled_read(held, ())}"))
    holder.start()
    assert entered.wait(20)
    waiters = [threading.Thread(target=waiting) for _ in range(3)]
    for t in waiters:
        t.start()
    time.sleep(0.05)  # let them reach the pool's wait
    closer = threading.Thread(target=lambda: anyio.run(store.aclose))
    closer.start()
    time.sleep(0.05)
    release.set()
    for t in (holder, *waiters, closer):
        t.join(20)
        assert not t.is_alive(), "a thread waiting for a connection was never woken"
    assert sorted(outcomes) == ["held 40", "refused", "refused", "refused"]

