"""SQLiteVectorStore: the shared store contract, plus what only the embedded store promises."""

from __future__ import annotations

import json
import subprocess
import sys

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


@pytest.mark.anyio
async def test_transaction_rolls_back_on_sqlite_error(monkeypatch):
    async with SQLiteVectorStore() as store:
        await store.upsert([Document(id="a", content="first")])
        calls = {"n": 0}
        original = store.analyzer.analyze

        # Fail inside the transaction, after the first row was written: the whole batch must roll back.
        def boom(rows, terms):
            store._conn.execute("BEGIN IMMEDIATE")
            store._conn.execute("INSERT INTO documents (id, content, metadata) VALUES ('z', 'z', '{}')")
            store._conn.execute("ROLLBACK")
            raise __import__("sqlite3").OperationalError("disk I/O error")

        monkeypatch.setattr(store, "_upsert_sync", boom)
        with pytest.raises(BackendError):
            await store.upsert([Document(id="b", content="b")])
        assert calls["n"] == 0 and original is not None
        assert await store.count() == 1


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
