"""Reliability, round three (issue 26, points 3, 5 and 6): the SQLite store's saved ANN index files.

Each test here failed before its fix (the extension test guards the other half of point 3: an index
file of an earlier state of the same store is extended, not rebuilt). docs/reliability.md lists the
guarantees with these tests."""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from fastrag import Document
from fastrag.errors import BackendUnavailableError
from fastrag.retrieval import BM25Retriever, HybridRetriever, VectorRetriever
from fastrag.testing.fakes import HashingEmbedder
from fastrag.vector_store.sqlite import SQLiteVectorStore

faiss = pytest.importorskip("faiss", reason="the ANN indexes need faiss (pip install 'fastrag-retrieval[ann]')")

pytestmark = pytest.mark.anyio

KINDS = pytest.mark.parametrize("kind", ["hnsw", "pq"])
DIM = 32


def unit_rows(seed: int, n: int) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def docs(prefix: str, n: int) -> list[Document]:
    return [Document(id=f"{prefix}{i:04d}", content=f"{prefix} note {i} about solar panels") for i in range(n)]


def copy_database(source: Path, target: Path) -> None:
    """A backup (or a restore) with SQLite's online backup API, every store on both files closed."""
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)
    src.close()
    dst.close()


def index_files(folder: Path, kind: str) -> list[str]:
    return sorted(p for p in os.listdir(folder) if p.endswith(f".{kind}"))


def temporary_files(folder: Path) -> list[str]:
    return sorted(p for p in os.listdir(folder) if p.endswith(".tmp"))


# ------------------------------------------- issue 26.3: an index file is valid only for its own store state


@KINDS
async def test_a_saved_index_is_not_trusted_after_a_backup_is_restored(
    tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Back up, write, save the index, restore the backup (same store id), write 200 documents: the new
    documents are found, and the vectors written before the restore never return the documents that reused
    their rowids (the report: 40 of 40 new documents missed, old vectors answered by new documents at 1.0)."""
    path, backup = tmp_path / "s.db", tmp_path / "backup.db"
    base, before, after = unit_rows(0, 2000), unit_rows(1, 100), unit_rows(2, 200)
    async with SQLiteVectorStore(path, vector_index=kind) as store:
        await store.upsert(docs("base", 2000), embeddings=base)
    copy_database(path, backup)
    async with SQLiteVectorStore(path, vector_index=kind) as store:
        await store.upsert(docs("before", 100), embeddings=before)  # rowids 2001-2100
        assert await store.build_vector_index() == 2100  # saved beside the store
    saved = index_files(tmp_path, kind)
    assert len(saved) == 1
    copy_database(backup, path)  # the restore: the same store id, the state before the 100 documents

    async with SQLiteVectorStore(path, vector_index=kind) as store, SQLiteVectorStore(path) as exact:
        await store.upsert(docs("after", 200), embeddings=after)  # rowids 2001-2200 again
        assert index_files(tmp_path, kind) == saved  # the stale file is there to be (wrongly) trusted
        found = 0
        with caplog.at_level(logging.WARNING, logger="fastrag.vector_store"):
            for i in range(40):  # the new documents whose rowids the saved index covered
                hits = await store.search_vector(after[i], k=1)
                found += hits[0].id == f"after{i:04d}"
        assert found == 40
        assert any("another history of this store" in r.getMessage() for r in caplog.records), "the rebuild is said"
        stored = {**{f"base{i:04d}": v for i, v in enumerate(base)}, **{f"after{i:04d}": v for i, v in enumerate(after)}}
        for i in range(10):  # vectors of the documents the restore removed: the exact top hit, true scores
            hits = await store.search_vector(before[i], k=5)
            assert hits[0].id == (await exact.search_vector(before[i], k=1))[0].id
            true = [float(stored[d.id] @ before[i]) for d in hits]
            assert [d.metadata["score"] for d in hits] == pytest.approx(true, abs=1e-5)
            assert hits[0].metadata["score"] < 0.99  # no document of the restored store holds that vector


@KINDS
async def test_writes_after_the_save_extend_the_saved_index_instead_of_rebuilding(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other half of 26.3: an index file of an earlier state of this store (later writes, deletes, by
    this or another process) is opened and extended with what was written since, not built again."""
    path = tmp_path / "s.db"
    base, more = unit_rows(0, 1500), unit_rows(3, 50)
    async with SQLiteVectorStore(path, vector_index=kind) as store:
        await store.upsert(docs("base", 1500), embeddings=base)
        await store.build_vector_index()
    async with SQLiteVectorStore(path) as writer:  # another store (an exact one) writes after the save
        await writer.upsert(docs("more", 50), embeddings=more)
        await writer.delete(ids=["base0000", "base0001"])
    from fastrag.vector_store.sqlite import ann

    def no_build(*args: object, **kwargs: object) -> None:
        raise AssertionError("the saved index of an earlier state should have been opened and extended")

    monkeypatch.setattr(ann.HNSWIndex if kind == "hnsw" else ann.PQFastScanIndex, "build", no_build)
    async with SQLiteVectorStore(path, vector_index=kind) as store:
        for i in range(10):
            assert (await store.search_vector(more[i], k=1))[0].id == f"more{i:04d}"
        hits = await store.search_vector(base[0], k=5)
        assert "base0000" not in {d.id for d in hits}


@KINDS
async def test_an_index_file_without_the_state_it_was_built_from_is_rebuilt(tmp_path: Path, kind: str) -> None:
    """A file that does not say which state it covers (written before this check, or by hand) is never
    trusted: the store builds the index again (and says so on logger ``fastrag.vector_store``)."""
    path = tmp_path / "s.db"
    base = unit_rows(0, 800)
    async with SQLiteVectorStore(path, vector_index=kind) as store:
        await store.upsert(docs("base", 800), embeddings=base)
        await store.build_vector_index()
    (saved,) = index_files(tmp_path, kind)
    from fastrag.vector_store.sqlite import ann

    cls = ann.HNSWIndex if kind == "hnsw" else ann.PQFastScanIndex
    foreign = cls.build(unit_rows(9, 800), np.arange(1, 801))  # same rowids, other vectors, no stamp
    faiss.write_index(foreign._index, str(tmp_path / saved))
    async with SQLiteVectorStore(path, vector_index=kind) as store:
        for i in range(10):
            assert (await store.search_vector(base[i], k=1))[0].id == f"base{i:04d}"


@KINDS
async def test_deleting_the_newest_document_never_brings_it_back_into_the_index(tmp_path: Path, kind: str) -> None:
    """Found while fixing 26.3: after the document with the largest rowid was deleted, the next search
    dropped it from the HNSW graph (its largest key fell) and the one after added it back as a new row, so
    the third search failed with "the store file looks damaged" (a KeyError for the deleted row)."""
    rows = unit_rows(0, 300)
    async with SQLiteVectorStore(tmp_path / "s.db", vector_index=kind) as store:
        await store.upsert(docs("base", 300), embeddings=rows)
        await store.search_vector(rows[0], k=3)
        await store.delete(ids=["base0299"])
        for _ in range(3):
            hits = await store.search_vector(rows[299], k=3)
            assert len(hits) == 3 and "base0299" not in {d.id for d in hits}


# ------------------------------------------------- issue 26.5: a full disk never takes dense search down


def disk_full(*args: object, **kwargs: object) -> None:
    """What faiss raises when the disk fills during a save (seen on a 300 KB tmpfs)."""
    raise RuntimeError(
        "Error in void faiss::write_HNSW(const HNSW*, IOWriter*) at index_write.cpp:362: Error: 'ret == (size)' "
        "failed: write error: 67750 != 194528 (No space left on device)"
    )


@KINDS
async def test_a_search_answers_from_memory_when_the_index_file_cannot_be_saved(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "s.db"
    base = unit_rows(0, 1000)
    async with SQLiteVectorStore(path, vector_index=kind) as store:
        await store.upsert(docs("base", 1000), embeddings=base)
        monkeypatch.setattr(faiss, "write_index", disk_full)
        with caplog.at_level(logging.WARNING, logger="fastrag.vector_store"):
            for i in range(5):
                assert (await store.search_vector(base[i], k=1))[0].id == f"base{i:04d}"
        saves = [r for r in caplog.records if r.name == "fastrag.vector_store" and "cannot write" in r.getMessage()]
        assert len(saves) == 1, "one warning for the failed save, not one per search"
        assert str(path) in saves[0].getMessage() and "No space left on device" in saves[0].getMessage()
        assert index_files(tmp_path, kind) == [] and temporary_files(tmp_path) == []

        # a hybrid over the store (what `fastrag search` and `serve` run) answers too
        hybrid = HybridRetriever([VectorRetriever(vector_store=store, embedder=HashingEmbedder(DIM)), BM25Retriever(store=store)])
        await store.upsert(docs("more", 60), embeddings=unit_rows(5, 60))  # past 5%: the search saves again
        result = await hybrid.retrieve_result("solar panels", k=5)
        assert not result.retrieval_failed and not result.failed_branches and len(result.documents) == 5

        # an explicit build_vector_index is a request to write the file: it says it could not
        with pytest.raises(BackendUnavailableError, match="No space left on device"):
            await store.build_vector_index()
        assert (await store.search_vector(base[8], k=1))[0].id == "base0008"  # still answered from memory

        monkeypatch.undo()  # the disk has room again
        assert await store.build_vector_index() == 1060
        assert len(index_files(tmp_path, kind)) == 1


# --------------------------------------- issue 26.6: no temporary file outlives the save that wrote it


WRITER = """
import os, sys, time, anyio, numpy as np
from fastrag import Document
from fastrag.vector_store.sqlite import SQLiteVectorStore

real_replace = os.replace
def paused_replace(src, dst, *args, **kwargs):
    if str(src).endswith(".tmp"):
        print("writing", src, flush=True)
        sys.stdin.readline()  # wait until the test says go on (or kills us here)
    return real_replace(src, dst, *args, **kwargs)
os.replace = paused_replace

async def main():
    rows = np.random.default_rng(0).standard_normal((3000, 32)).astype(np.float32)
    async with SQLiteVectorStore(sys.argv[1], vector_index=sys.argv[2]) as store:
        if sys.argv[3] == "write":
            await store.upsert([Document(id=f"d{i}", content="x") for i in range(3000)], embeddings=rows)
        print("built", await store.build_vector_index(), flush=True)
anyio.run(main)
"""


def start_writer(path: Path, kind: str, mode: str) -> tuple[subprocess.Popen[str], str]:
    """A process saving the store's index, paused with its temporary file fully written."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(WRITER), str(path), kind, mode],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )
    line = proc.stdout.readline()  # type: ignore[union-attr]
    assert line.startswith("writing "), line
    return proc, line.split(" ", 1)[1].strip()


@KINDS
async def test_temporary_files_of_killed_saves_are_removed_at_open_but_never_a_live_save(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "s.db"
    killed = []
    for n in range(3):  # a save killed with SIGKILL after its temporary file is written, three times
        proc, tmp = start_writer(path, kind, "write" if n == 0 else "keep")
        assert Path(tmp).exists()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        assert proc.returncode == -signal.SIGKILL
        killed.append(os.path.basename(tmp))
    # each writer's own open removed its predecessor's file; the last one is left until the next open
    assert temporary_files(tmp_path) == [killed[-1]]
    async with SQLiteVectorStore(path, vector_index=kind):
        pass
    assert temporary_files(tmp_path) == []

    # a save in progress in another (live) process: opening the store leaves its file alone
    proc, live = start_writer(path, kind, "keep")
    try:
        assert temporary_files(tmp_path) == [os.path.basename(live)]
        async with SQLiteVectorStore(path, vector_index=kind):
            pass
        assert temporary_files(tmp_path) == [os.path.basename(live)], "a live save's file is never removed"
        proc.stdin.write("go\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0 and "built 3000" in out
    assert temporary_files(tmp_path) == [] and len(index_files(tmp_path, kind)) == 1
    rows = np.random.default_rng(0).standard_normal((3000, 32)).astype(np.float32)
    async with SQLiteVectorStore(path, vector_index=kind) as store:
        assert (await store.search_vector(rows[17], k=1))[0].id == "d17"


async def test_only_the_stores_own_temporary_files_are_removed(tmp_path: Path) -> None:
    """Files of other stores in the folder, and files that merely look alike, are never touched."""
    path = tmp_path / "s.db"
    async with SQLiteVectorStore(path, vector_index="hnsw") as store:
        await store.upsert(docs("base", 10), embeddings=unit_rows(0, 10))
        store_id = store._store_id
    ours = tmp_path / f".s.db-{store_id}.hnsw.{'a' * 32}.tmp"
    ours_pq = tmp_path / f".s.db-{store_id}.pq.{'b' * 32}.tmp"
    others = [
        tmp_path / f".t.db-{store_id}.hnsw.{'a' * 32}.tmp",  # another store file's
        tmp_path / f".s.db-{store_id}.hnsw.tmp",  # not a name a save writes
        tmp_path / f"s.db-{store_id}.hnsw.{'c' * 32}.tmp",
        tmp_path / "notes.tmp",
    ]
    for p in (ours, ours_pq, *others):
        p.write_bytes(b"left by a crashed save")
    async with SQLiteVectorStore(path):  # whatever index it uses: the files are this store's
        pass
    assert not ours.exists() and not ours_pq.exists()
    assert all(p.exists() for p in others)
