"""Stores that keep analysed terms notice a change of analysis (issue 14.7): the SQLite store re-analyses its
documents when opened, a Qdrant BM25 collection made by another analysis is refused with the command to
run."""

from __future__ import annotations

import logging
import re
import sqlite3
from collections import Counter

import numpy as np
import pytest

from fastrag.analysis import Analyzer
from fastrag.errors import ConfigurationError
from fastrag.models import Document
from fastrag.vector_store.sqlite import SQLiteVectorStore, lexical

DOCS = [
    Document(id="hi", content="पैंथर्स की रक्षा पंक्ति ने केवल 308 अंक दिए।"),
    Document(id="en", content="The Panthers defense gave up just 308 points."),
    Document(id="tr", content="İstanbul Türkiye'nin en kalabalık şehridir.", metadata={"language": "tr"}),
]


def _as_version_1(path: str) -> None:
    """Rewrite the store's postings as fastrag's analysis before issue 14 made them (Python's re word
    pattern: Devanagari cut at its vowel signs; İ folded to "i" + a combining dot, itself a word break),
    and forget the recorded analysis, as a store written by that version has none."""
    old_word = re.compile(r"[^\W_]+")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    rows = conn.execute("SELECT rowid, content FROM documents ORDER BY rowid").fetchall()
    counts = [Counter(old_word.findall(c.casefold())) for _, c in rows]
    conn.execute("DELETE FROM postings")
    conn.execute("DELETE FROM segments")
    lexical.write_segment(conn, [r for r, _ in rows], counts)
    conn.execute("DELETE FROM meta WHERE key = 'analysis'")
    conn.execute("COMMIT")
    conn.close()


@pytest.mark.anyio
async def test_sqlite_store_of_an_older_analysis_is_reanalysed_when_opened(tmp_path, caplog):
    path = str(tmp_path / "old.db")
    async with SQLiteVectorStore(path) as store:
        await store.upsert(DOCS, embeddings=np.eye(3, 4, dtype=np.float32))
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT value FROM meta WHERE key = 'analysis'").fetchone()[0] == Analyzer().signature
    conn.close()
    _as_version_1(path)
    conn = sqlite3.connect(path)  # what an old file holds: the Hindi word cut apart
    assert conn.execute("SELECT count(*) FROM postings WHERE term = 'पैंथर्स'").fetchone()[0] == 0
    conn.close()
    with caplog.at_level(logging.WARNING, logger="fastrag.vector_store"):
        async with SQLiteVectorStore(path) as store:
            assert [d.id for d in await store.search_text("पैंथर्स", k=3)] == ["hi"]
            assert [d.id for d in await store.search_text("istanbul", k=3, language="tr")] == ["tr"]
            # vectors and every other row survive the rewrite
            assert [d.id for d in await store.search_vector(np.array([0, 1, 0, 0], dtype=np.float32), k=1)] == ["en"]
            assert await store.count() == 3
            await store.upsert([Document(id="new", content="पैंथर्स")])
            assert {d.id for d in await store.search_text("पैंथर्स", k=3)} == {"hi", "new"}
    assert "re-analysed its 3 documents" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fastrag.vector_store"):
        async with SQLiteVectorStore(path) as store:  # recorded: not again
            assert await store.count() == 4
    assert "re-analysed" not in caplog.text


@pytest.mark.anyio
async def test_qdrant_bm25_collection_of_an_older_analysis_is_refused_naming_the_command(tmp_path):
    pytest.importorskip("qdrant_client")
    from qdrant_client import QdrantClient

    from fastrag.vector_store.qdrant import QdrantVectorStore

    folder = tmp_path / "q"
    async with QdrantVectorStore(path=folder, collection="c", enable_bm25=True) as store:
        await store.upsert(DOCS[:2])
    client = QdrantClient(path=str(folder))
    meta = dict(client.get_collection("c").config.metadata["fastrag"])
    assert meta["analysis"] == Analyzer().signature
    del meta["analysis"]  # as a collection written before issue 14
    client.update_collection("c", metadata={"fastrag": meta})
    client.close()
    with pytest.raises(ConfigurationError, match=r"fastrag-analysis/1.*fastrag index"):
        async with QdrantVectorStore(path=folder, collection="c", enable_bm25=True) as store:
            await store.search_text("panthers", k=1)


@pytest.mark.anyio
async def test_sqlite_question_without_language_is_analysed_in_each_language_the_store_holds(tmp_path):
    """Issue 14.4: documents stemmed in German are found by a German question even when nobody said it
    is German (English analysis alone keeps "häuser", which the German postings do not hold)."""
    path = str(tmp_path / "s.db")
    async with SQLiteVectorStore(path) as store:
        await store.upsert([
            Document(id="de", content="Das Haus ist alt.", metadata={"language": "de"}),
            Document(id="en", content="The house is old."),
            Document(id="ru", content="Старые дома стоят здесь.", metadata={"language": "ru"}),
        ])
        assert await store.languages() == ("", "de", "ru")
        assert [d.id for d in await store.search_text("Häuser", k=3)] == ["de"]
        assert [d.id for d in await store.search_text("houses", k=3)] == ["en"]
        assert [d.id for d in await store.search_text("домов", k=3)] == ["ru"]
        assert await store.search_text("Häuser", k=3, language="en") == []  # a given language is kept
    async with SQLiteVectorStore(path) as store:  # the languages are in the file
        assert await store.languages() == ("", "de", "ru")
        assert [d.id for d in await store.search_text("Häuser", k=3)] == ["de"]


@pytest.mark.anyio
async def test_sqlite_languages_of_a_store_written_before_the_record(tmp_path):
    path = str(tmp_path / "s.db")
    async with SQLiteVectorStore(path) as store:
        await store.upsert([Document(id="de", content="Das Haus ist alt.", metadata={"language": "de"})])
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("DELETE FROM meta WHERE key = 'languages'")
    conn.close()
    async with SQLiteVectorStore(path) as store:
        assert await store.languages() == ("de",)
        assert [d.id for d in await store.search_text("Häuser", k=3)] == ["de"]
