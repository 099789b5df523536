"""SQLiteVectorStore: the shared store contract, plus what only the embedded store promises."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest

from fastrag.analysis import Analyzer
from fastrag.errors import BackendError, BackendUnavailableError, ConfigurationError, InvalidParameterError
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
    """Delegates to a real connection, but fails the n-th postings insert like a full disk would."""

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
        store._conn = _FailingConnection(real, fail_at=3)  # rows 1 and 2 are written, row 3 fails
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
