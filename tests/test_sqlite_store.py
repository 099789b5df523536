"""SQLiteVectorStore: the shared store contract, plus what only the embedded store promises."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import numpy as np
import pytest

import fastrag.vector_store.sqlite.store as sqlite_module
from fastrag.analysis import Analyzer
from fastrag.errors import BackendError, BackendUnavailableError, ConfigurationError, InvalidParameterError
from fastrag.filters import field
from fastrag.models import Document
from fastrag.testing.store_contract import StoreContract
from fastrag.vector_store.sqlite import SQLiteVectorStore


class TestSQLiteFileStore(StoreContract):
    @pytest.fixture
    def store_factory(self, tmp_path):
        return lambda: SQLiteVectorStore(tmp_path / "store.db")


class TestSQLiteMemoryStore(StoreContract):
    persistent = False

    @pytest.fixture
    def store_factory(self):
        return lambda: SQLiteVectorStore(":memory:")


CJK_CYRILLIC = [
    Document(id="zh1", content="黑豹队的防守只丢了308分，在联赛中排名第六。"),
    Document(id="zh2", content="北京是中华人民共和国的首都。"),
    Document(id="ru1", content="Москва — столица России и крупнейший город страны."),
    Document(id="ru2", content="Санкт-Петербург расположен на Неве."),
    Document(id="en1", content="The Panthers defense gave up 308 points."),
]


@pytest.mark.anyio
async def test_chinese_query_finds_chinese_document():
    async with SQLiteVectorStore() as store:
        await store.upsert(CJK_CYRILLIC)
        assert [d.id for d in await store.search_text("黑豹队的防守", k=3)] == ["zh1"]
        assert [d.id for d in await store.search_text("中国的首都北京", k=3)] == ["zh2"]


@pytest.mark.anyio
async def test_cyrillic_query_finds_cyrillic_document():
    async with SQLiteVectorStore() as store:
        await store.upsert(CJK_CYRILLIC)
        assert [d.id for d in await store.search_text("столица России", k=3)] == ["ru1"]
        assert [d.id for d in await store.search_text("НЕВЕ", k=3)] == ["ru2"]


@pytest.mark.anyio
async def test_english_stemming_and_stopwords():
    docs = [Document(id="a", content="The runner was running quickly"), Document(id="b", content="A slow walk")]
    async with SQLiteVectorStore() as store:
        await store.upsert(docs)
        assert [d.id for d in await store.search_text("runs", k=5)] == ["a"]
        # Only stopwords remain after analysis: nothing can match, and nothing is returned.
        assert await store.search_text("the a was", k=5) == []


@pytest.mark.anyio
async def test_title_is_indexed_for_bm25():
    docs = [Document(id="t", content="body text only", metadata={"title": "Photosynthesis"})]
    async with SQLiteVectorStore() as store:
        await store.upsert(docs)
        assert [d.id for d in await store.search_text("photosynthesis", k=1)] == ["t"]


@pytest.mark.anyio
async def test_fts_query_syntax_in_user_text_is_literal():
    async with SQLiteVectorStore() as store:
        await store.upsert([Document(id="a", content="near and not or")])
        for query in ['"unbalanced', "NEAR(a b)", "a* OR b", "col:value", "(((", "^start"]:
            assert isinstance(await store.search_text(query, k=3), list)


@pytest.mark.anyio
async def test_failed_write_leaves_previous_state():
    async with SQLiteVectorStore() as store:
        await store.upsert([Document(id="a", content="first")], embeddings=np.ones((1, 4), dtype=np.float32))
        bad = [Document(id="b", content="second"), Document(id="c", content="third", metadata={"x": object()})]
        with pytest.raises(InvalidParameterError):
            await store.upsert(bad, embeddings=np.ones((2, 4), dtype=np.float32))
        nan = np.ones((1, 4), dtype=np.float32) * np.nan
        with pytest.raises(InvalidParameterError):
            await store.upsert([Document(id="d", content="x")], embeddings=nan)
        assert await store.count() == 1


class _FailingConnection:
    """Delegates to a real connection, but fails the n-th postings insert like a full disk would (the
    documents and their block are written by then)."""

    def __init__(self, conn, fail_at: int) -> None:
        self._conn, self._left = conn, fail_at

    def execute(self, sql, *args):
        return self._conn.execute(sql, *args)

    def executemany(self, sql, *args):
        if sql.startswith("INSERT INTO postings"):
            self._left -= 1
            if self._left == 0:
                raise sqlite3.OperationalError("database or disk is full")
        return self._conn.executemany(sql, *args)

    def __getattr__(self, name):
        return getattr(self._conn, name)


@pytest.mark.anyio
async def test_failure_mid_transaction_leaves_the_previous_state():
    async with SQLiteVectorStore() as store:
        await store.upsert([Document(id="a", content="first version")], embeddings=np.ones((1, 4), dtype=np.float32))
        real = store._conn
        store._conn = _FailingConnection(real, fail_at=1)  # documents and vectors are written, the postings fail
        batch = [Document(id="a", content="second version"), Document(id="b", content="bee"),
                 Document(id="c", content="sea")]
        with pytest.raises(BackendError, match="disk is full"):
            await store.upsert(batch, embeddings=np.zeros((3, 4), dtype=np.float32))
        store._conn = real
        assert await store.count() == 1
        assert [d.content for d in await store.get()] == ["first version"]
        assert [d.id for d in await store.search_text("first", k=5)] == ["a"]
        assert await store.search_text("second bee sea", k=5) == []


def test_sigkill_during_a_write_leaves_the_last_committed_state(tmp_path):
    """A writer killed with SIGKILL in the middle of a large upsert: the file reopens with the old state."""
    path = tmp_path / "db.sqlite"
    writer = f"""
import sys, anyio, numpy as np
from fastrag.models import Document
from fastrag.vector_store.sqlite import SQLiteVectorStore
async def main():
    async with SQLiteVectorStore({str(path)!r}) as s:
        await s.upsert([Document(id="committed", content="kept")], embeddings=np.ones((1, 8), dtype=np.float32))
        print("committed", flush=True)
        docs = [Document(id=f"d{{i}}", content=f"text number {{i}} " * 20) for i in range(150_000)]
        await s.upsert(docs, embeddings=np.ones((len(docs), 8), dtype=np.float32))
        print("second commit done", flush=True)
anyio.run(main)
"""
    proc = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "committed"
    wal = path.with_name(path.name + "-wal")
    deadline = time.monotonic() + 120
    # wait until the big transaction is writing (the WAL grows), then kill the writer
    while time.monotonic() < deadline and (not wal.exists() or wal.stat().st_size < 1_000_000):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the writer finished before it could be killed"
    reader = f"""
import anyio, json
from fastrag.vector_store.sqlite import SQLiteVectorStore
async def main():
    async with SQLiteVectorStore({str(path)!r}) as s:
        print(json.dumps([await s.count(), [d.id for d in await s.search_text("kept text", k=5)]]))
anyio.run(main)
"""
    out = subprocess.run([sys.executable, "-c", reader], check=True, capture_output=True, text=True).stdout
    assert json.loads(out) == [1, ["committed"]]


def test_reopen_in_new_process(tmp_path):
    path = tmp_path / "db.sqlite"
    script = f"""
import anyio, numpy as np
from fastrag.models import Document
from fastrag.vector_store.sqlite import SQLiteVectorStore
async def main():
    async with SQLiteVectorStore({str(path)!r}, embedding_model="m") as s:
        await s.upsert([Document(id="a", content="solar power", metadata={{"y": 1}})],
                       embeddings=np.array([[1, 0]], dtype=np.float32))
anyio.run(main)
"""
    subprocess.run([sys.executable, "-c", script], check=True)
    reader = f"""
import anyio, json, numpy as np
from fastrag.vector_store.sqlite import SQLiteVectorStore
async def main():
    async with SQLiteVectorStore({str(path)!r}) as s:
        hits = await s.search_vector(np.array([1, 0], dtype=np.float32), k=1)
        text = await s.search_text("solar", k=1)
        print(json.dumps([s.embedding_model, s.dimension, hits[0].id, dict(text[0].metadata)["y"]]))
anyio.run(main)
"""
    out = subprocess.run([sys.executable, "-c", reader], check=True, capture_output=True, text=True).stdout
    assert json.loads(out) == ["m", 2, "a", 1]


@pytest.mark.anyio
async def test_reopen_with_other_settings_is_refused(tmp_path):
    path = tmp_path / "db.sqlite"
    async with SQLiteVectorStore(path, embedding_model="model-a") as store:
        await store.upsert([Document(id="a", content="x")], embeddings=np.ones((1, 4), dtype=np.float32))
    with pytest.raises(ConfigurationError, match="model-a"):
        SQLiteVectorStore(path, embedding_model="model-b")
    with pytest.raises(ConfigurationError):
        SQLiteVectorStore(path, dimension=8)
    with pytest.raises(ConfigurationError):
        SQLiteVectorStore(path, analyzer=Analyzer("de"))


def test_not_a_database_is_unavailable(tmp_path):
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(BackendUnavailableError, match="garbage.db"):
        SQLiteVectorStore(path)


@pytest.mark.anyio
async def test_closed_store_raises_and_close_is_idempotent():
    store = SQLiteVectorStore()
    await store.aclose()
    await store.aclose()
    with pytest.raises(BackendUnavailableError):
        await store.count()


@pytest.mark.anyio
async def test_results_are_copies_and_inputs_untouched():
    doc = Document(id="a", content="solar", metadata={"k": "v"})
    async with SQLiteVectorStore() as store:
        await store.upsert([doc], embeddings=np.ones((1, 2), dtype=np.float32))
        hit = (await store.search_text("solar", k=1))[0]
    assert dict(doc.metadata) == {"k": "v"}
    assert hit.metadata["k"] == "v" and hit.rank == 0 and hit.score > 0


@pytest.mark.anyio
async def test_bm25_scores_are_meaningful_on_a_tiny_store():
    """Lucene IDF stays positive: a term found in one of two documents still separates them."""
    async with SQLiteVectorStore() as store:
        await store.upsert([Document(id="a", content="solar power"), Document(id="b", content="wind power")])
        hits = await store.search_text("solar", k=5)
        # idf = ln(1 + (2 - 1 + 0.5) / (1 + 0.5)) = ln 2; tf = 1, dl = avgdl = 2:
        # score = ln 2 * 1 * 2.2 / (1 + 1.2) = ln 2
        assert [d.id for d in hits] == ["a"]
        assert hits[0].score == pytest.approx(0.693147, rel=1e-5)
        both = await store.search_text("power", k=5)
        # a term in every document still scores: idf = ln(1 + 0.5 / 2.5) = ln 1.2 > 0
        assert sorted(d.id for d in both) == ["a", "b"] and all(d.score == pytest.approx(0.182322, rel=1e-5) for d in both)


@pytest.mark.anyio
async def test_a_question_the_model_cannot_embed_has_no_dense_hits_and_bm25_decides():
    """An all-out-of-vocabulary question embeds to zero: no arbitrary neighbours flood the hybrid result."""
    from fastrag.retrieval import BM25Retriever, HybridRetriever, VectorRetriever

    class ZeroEmbedder:
        name, dimension = "zero", 4

        async def embed_query(self, text):
            return np.zeros(4, dtype=np.float32)

    docs = [Document(id="a", content="向量检索"), Document(id="b", content="unrelated text")]
    async with SQLiteVectorStore() as store:
        await store.upsert(docs, embeddings=np.eye(2, 4, dtype=np.float32))
        vector = VectorRetriever(vector_store=store, embedder=ZeroEmbedder())
        assert await vector.retrieve("检索", k=3) == []
        hybrid = HybridRetriever([vector, BM25Retriever(store=store)])
        assert [d.id for d in await hybrid.retrieve("检索", k=3)] == ["a"]


@pytest.mark.anyio
async def test_single_chinese_character_and_headings_are_searchable():
    docs = [Document(id="zh", content="向量检索很快"),
            Document(id="h", content="body", metadata={"title": "Guide", "headings": ["Guide", "Approximate methods"]})]
    async with SQLiteVectorStore() as store:
        await store.upsert(docs)
        assert [d.id for d in await store.search_text("量", k=3)] == ["zh"]
        assert [d.id for d in await store.search_text("approximate", k=3)] == ["h"]


# ------------------------------------------------------------------------------ concurrent reads


def open_handles(path: Path) -> int:
    """How many file descriptors of this process point at ``path`` (one per open SQLite connection)."""
    target = os.path.realpath(path)
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == target
        except OSError:
            pass  # closed meanwhile (the listing's own descriptor)
    return count


needs_proc = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc/self/fd (Linux)")

GATED = [Document(id=f"d{i:02d}", content=f"solar panel number{i}", metadata={"gate": i == 0, "n": i}) for i in range(20)]
GATED_VECTORS = np.random.default_rng(7).random((20, 8), dtype=np.float32) + 0.1


class Gate:
    """Makes the store's filter evaluation block once, on the first filtered read, until released, so one
    read is provably in flight (inside its read transaction, on its connection)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered, self.released = threading.Event(), threading.Event()
        once = threading.Lock()
        real = sqlite_module.filter_mask

        def gated(node, n, column):  # noqa: ANN001, ANN202
            if once.acquire(blocking=False):  # only the first call blocks
                self.entered.set()
                self.released.wait(30)
            return real(node, n, column)

        monkeypatch.setattr(sqlite_module, "filter_mask", gated)

    async def wait_entered(self) -> None:
        assert await anyio.to_thread.run_sync(self.entered.wait, 20), "the gated read never started"


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_a_read_blocked_inside_sqlite_holds_up_no_other_read_nor_a_write(tmp_path, monkeypatch):
    gate = Gate(monkeypatch)
    got: dict[str, int] = {}
    async with SQLiteVectorStore(tmp_path / "concurrent.db") as store:
        await store.upsert(GATED, embeddings=GATED_VECTORS)

        async def gated_count() -> None:
            got["gated"] = await store.count(filter=field("gate") == True)  # noqa: E712

        async with anyio.create_task_group() as tg:
            tg.start_soon(gated_count)
            try:
                await gate.wait_entered()
                with anyio.fail_after(20):  # on one shared connection these would wait for the gated read
                    assert await store.count() == 20
                    assert [d.id for d in await store.search_text("number3", k=1)] == ["d03"]
                    assert len(await store.search_vector(GATED_VECTORS[5], k=3)) == 3
                    assert [d.id for d in await store.get(ids=["d07"])] == ["d07"]
                    # a write does not wait for the read either (WAL), and later reads see it
                    await store.upsert([Document(id="late", content="late", metadata={"gate": True})])
                    assert await store.count(filter=field("gate") == True) == 2  # noqa: E712
                    assert "gated" not in got  # the first read was in flight all along
            finally:
                gate.released.set()
        # its snapshot began before the write: the late document is not in its count
        assert got["gated"] == 1


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_reads_on_a_memory_store_share_its_one_connection_and_stay_correct():
    async with SQLiteVectorStore(":memory:", read_connections=4) as store:
        await store.upsert(GATED, embeddings=GATED_VECTORS)
        expected = [d.id for d in await store.search_vector(GATED_VECTORS[3], k=5)]
        results: list[list[str]] = []

        async def one() -> None:
            results.append([d.id for d in await store.search_vector(GATED_VECTORS[3], k=5)])
            assert await store.count() == 20

        async with anyio.create_task_group() as tg:
            for _ in range(30):
                tg.start_soon(one)
        assert results == [expected] * 30
        assert store._readers == []  # never a second connection: it would see another, empty database


@needs_proc
@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_read_connections_are_bounded_and_all_closed_by_aclose(tmp_path):
    path = tmp_path / "bounded.db"
    store = SQLiteVectorStore(path, read_connections=2)
    await store.upsert(GATED, embeddings=GATED_VECTORS)
    assert open_handles(path) == 1  # the writer; readers open on demand

    async def one(i: int) -> None:
        await store.search_text(f"panel number{i % 20}", k=3)
        await store.search_vector(GATED_VECTORS[i % 20], k=3)

    async with anyio.create_task_group() as tg:
        for i in range(60):
            tg.start_soon(one, i)
    assert 1 < open_handles(path) <= 3  # the writer and at most two readers
    await store.aclose()
    assert open_handles(path) == 0
    assert not path.with_name(path.name + "-wal").exists()  # the last connection closed checkpoints it away
    with pytest.raises(BackendUnavailableError):
        await store.search_text("solar", k=1)


@needs_proc
@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_aclose_refuses_new_calls_lets_a_read_in_flight_finish_then_closes_everything(tmp_path, monkeypatch):
    path = tmp_path / "closing.db"
    gate = Gate(monkeypatch)
    store = SQLiteVectorStore(path)
    await store.upsert(GATED, embeddings=GATED_VECTORS)
    got: dict[str, object] = {}

    async def gated_count() -> None:
        got["gated"] = await store.count(filter=field("gate") == True)  # noqa: E712

    async def close() -> None:
        await store.aclose()
        got["closed"] = True

    async with anyio.create_task_group() as tg:
        tg.start_soon(gated_count)
        try:
            await gate.wait_entered()
            tg.start_soon(close)
            with anyio.fail_after(20):
                while True:  # until aclose has begun: then every new call is refused
                    try:
                        await store.count()
                    except BackendUnavailableError:
                        break
                    await anyio.sleep(0.005)
                with pytest.raises(BackendUnavailableError):
                    await store.upsert([Document(id="x", content="x")])
            assert "closed" not in got  # aclose waits for the read in flight
        finally:
            gate.released.set()
    assert got == {"gated": 1, "closed": True}  # the read finished with its answer, then the store closed
    assert open_handles(path) == 0


@pytest.mark.anyio
async def test_every_connection_has_the_busy_timeout_and_the_same_pragmas(tmp_path):
    async with SQLiteVectorStore(tmp_path / "pragmas.db", read_connections=3) as store:
        await store.upsert(GATED, embeddings=GATED_VECTORS)
        async with anyio.create_task_group() as tg:
            for i in range(30):
                tg.start_soon(store.count)
        assert store._readers  # the reads ran on read connections
        for conn in [store._conn, *store._readers]:
            assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
            assert conn.execute("PRAGMA query_only").fetchone()[0] == (conn is not store._conn)
        for conn in store._readers:
            with pytest.raises(sqlite3.OperationalError, match="readonly"):
                conn.execute("DELETE FROM documents")  # a read connection cannot write, whatever runs on it


def test_read_connections_must_be_a_positive_int(tmp_path):
    for bad in (0, -1, 1.5, True, "4"):
        with pytest.raises(InvalidParameterError, match="read_connections"):
            SQLiteVectorStore(tmp_path / "x.db", read_connections=bad)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_a_write_by_another_connection_is_seen_even_without_fastrag(tmp_path):
    """A delete is recorded by a trigger in the file (a tombstone and a new generation), so a writer that
    is not this store (a script) still invalidates the cached vectors and BM25 statistics."""
    path = tmp_path / "foreign.db"
    async with SQLiteVectorStore(path) as store:
        await store.upsert(GATED, embeddings=GATED_VECTORS)
        assert len(await store.search_vector(GATED_VECTORS[0], k=50)) == 20  # caches loaded
        assert len(await store.search_text("solar", k=50)) == 20
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("DELETE FROM documents WHERE id >= 'd10'")
        finally:
            other.close()
        assert sorted(d.id for d in await store.search_vector(GATED_VECTORS[0], k=50)) == [f"d{i:02d}" for i in range(10)]
        hits = await store.search_text("solar", k=50)
        # BM25 statistics follow too: with 10 documents the idf of a term in all of them is ln(1 + 0.5/10.5)
        assert len(hits) == 10 and hits[0].score == pytest.approx(np.log(1 + 0.5 / 10.5) * 2.2 / (1 + 1.2), rel=1e-6)


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_a_read_that_began_before_a_write_ranks_its_own_snapshot_not_the_newer_cached_vectors(tmp_path, monkeypatch):
    query = GATED_VECTORS[4]
    async with SQLiteVectorStore(tmp_path / "snapshot.db") as store:
        await store.upsert(GATED, embeddings=GATED_VECTORS)
        before = [(d.id, d.score) for d in await store.search_vector(query, k=30)]
        gate = Gate(monkeypatch)
        got: dict[str, list] = {}

        async def gated_search() -> None:  # its snapshot starts, then its filter blocks inside SQLite
            got["old"] = [(d.id, d.score) for d in await store.search_vector(query, k=30, filter=field("n") >= 0)]

        async with anyio.create_task_group() as tg:
            tg.start_soon(gated_search)
            try:
                await gate.wait_entered()
                with anyio.fail_after(20):
                    await store.delete(ids=[f"d{i:02d}" for i in range(10, 20)])
                    new = [Document(id=f"new{i}", content="new", metadata={"n": 100 + i}) for i in range(5)]
                    await store.upsert(new, embeddings=np.ones((5, 8), dtype=np.float32))
                    after = await store.search_vector(query, k=30)  # loads the newer vectors into the cache
                    assert len(after) == 15 and "new0" in {d.id for d in after}
            finally:
                gate.released.set()
        assert got["old"] == before  # all 20 original documents, scored from the state the read began in


@pytest.mark.anyio
async def test_an_id_holding_nul_names_only_itself_in_get_delete_and_upsert(tmp_path):
    async with SQLiteVectorStore(tmp_path / "nul.db") as store:
        await store.upsert([Document(id="a", content="plain"), Document(id="a\x00x", content="with nul")])
        assert [d.content for d in await store.get(ids=["a\x00x"])] == ["with nul"]
        assert [d.content for d in await store.get(ids=["a"])] == ["plain"]
        await store.upsert([Document(id="a\x00x", content="nul again")])
        assert await store.delete(ids=["a\x00x"]) == 1
        assert [d.id for d in await store.get()] == ["a"]
        assert [d.content for d in await store.search_text("plain", k=5)] == ["plain"]


@pytest.mark.anyio
async def test_tied_scores_are_cut_by_id_so_top_k_is_a_prefix_of_top_k_plus_n(tmp_path):
    async with SQLiteVectorStore(tmp_path / "ties.db") as store:
        docs = [Document(id=f"d{i:02d}", content="boilerplate footer text") for i in range(30)]
        await store.upsert(docs, embeddings=np.ones((30, 4), dtype=np.float32))
        for search in (lambda k: store.search_text("boilerplate", k=k), lambda k: store.search_vector(np.ones(4), k=k)):
            five, ten, all_ = [[d.id for d in await search(k)] for k in (5, 10, 30)]
            assert five == [f"d{i:02d}" for i in range(5)]
            assert ten[:5] == five and all_[:10] == ten


def _versioned(version: int, count: int) -> list[Document]:
    return [Document(id=f"big.txt#{i}", content=f"version {version} chunk {i}", metadata={"source_uri": "big.txt"})
            for i in range(count)]


@pytest.mark.anyio
async def test_atomic_replace_spans_batches_and_readers_see_old_or_new_never_a_part(tmp_path: Path) -> None:
    """A replace written in several batches: another connection sees the old documents until the commit,
    then only the new ones (the surplus old ones gone); a failure part-way leaves the old ones intact."""
    path = str(tmp_path / "s.db")
    scope = field("source_uri") == "big.txt"
    async with SQLiteVectorStore(path) as store, SQLiteVectorStore(path) as reader:
        await store.upsert(_versioned(1, 5), embeddings=np.ones((5, 4)))
        old = sorted(d.content for d in await reader.get())
        with pytest.raises(RuntimeError):
            async with store.atomic_replace(delete=scope) as writer:
                await writer.upsert(_versioned(2, 2), embeddings=np.ones((2, 4)))
                raise RuntimeError("the embedder failed part-way")
        assert sorted(d.content for d in await reader.get()) == old
        async with store.atomic_replace(delete=scope) as writer:
            await writer.upsert(_versioned(2, 3)[:2], embeddings=np.ones((2, 4)))
            assert sorted(d.content for d in await reader.get()) == old
            await writer.upsert(_versioned(2, 3)[2:], embeddings=np.ones((1, 4)))
            assert sorted(d.content for d in await reader.get()) == old
        assert sorted(d.content for d in await reader.get()) == [f"version 2 chunk {i}" for i in range(3)]
        assert [d.id for d in await reader.search_text("version chunk", k=10)] != []
        with pytest.raises(InvalidParameterError):
            await writer.upsert(_versioned(3, 1))
