"""A store file written by an older fastrag (schema 2: one postings row per term and document, a vector
per document row) opens with this one: migrated in place, in one transaction, with the same answers."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from fastrag.analysis import Analyzer
from fastrag.filters import field
from fastrag.models import Document
from fastrag.vector_store.sqlite import SQLiteVectorStore

# the schema-2 layout exactly as fastrag 0.1 (before the segment index) wrote it
SCHEMA_2 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE documents (
    rowid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, content TEXT NOT NULL, metadata TEXT NOT NULL,
    embedding BLOB, n_terms INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE postings (term TEXT NOT NULL, doc INTEGER NOT NULL, tf INTEGER NOT NULL, PRIMARY KEY (term, doc)) WITHOUT ROWID;
CREATE INDEX postings_doc ON postings (doc);
INSERT INTO meta VALUES ('generation', '0');
CREATE TRIGGER documents_generation_insert AFTER INSERT ON documents BEGIN
    UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation';
END;
CREATE TRIGGER documents_generation_delete AFTER DELETE ON documents BEGIN
    UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation';
END;
INSERT INTO meta VALUES ('schema_version', '2');
INSERT INTO meta VALUES ('dimension', '8');
INSERT INTO meta VALUES ('analyzer_language', 'en');
INSERT INTO meta VALUES ('language_analysis', 'per_document');
"""

WORDS = "solar wind panel battery grid storage turbine hydro nuclear coal price policy market demand".split()


def corpus() -> tuple[list[Document], np.ndarray]:
    rng = np.random.default_rng(3)
    docs = [
        Document(id=f"d{i:03d}", content=" ".join(rng.choice(WORDS, size=int(rng.integers(3, 12)))),
                 metadata={"n": i, "even": i % 2 == 0})
        for i in range(120)
    ]  # fmt: skip
    vectors = rng.standard_normal((len(docs), 8)).astype(np.float32)
    vectors[5] = 0.0  # a zero vector: stored, scores 0, before and after
    return docs, vectors


def write_schema_2(path: Path, docs: list[Document], vectors: np.ndarray, *, with_vector: bool = True) -> None:
    analyzer = Analyzer()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(SCHEMA_2)
    conn.execute("BEGIN")
    for i, (doc, vec) in enumerate(zip(docs, vectors, strict=True)):
        terms = analyzer.analyze(doc.content)
        rowid = 3 * i + 2  # gaps, as deletes left them
        blob = vec.tobytes() if with_vector and i != 7 else None  # d007 was stored without a vector
        conn.execute("INSERT INTO documents VALUES (?, ?, ?, ?, ?, ?)",
                     (rowid, doc.id, doc.content, json.dumps(dict(doc.metadata)), blob, len(terms)))
        conn.executemany("INSERT INTO postings VALUES (?, ?, ?)", [(t, rowid, c) for t, c in Counter(terms).items()])
    conn.execute("COMMIT")
    conn.close()


def answers(hits: list[Document]) -> list[tuple[str, float]]:
    return [(d.id, round(d.score, 5)) for d in hits]


@pytest.mark.anyio
async def test_a_schema_2_file_is_migrated_in_place_and_answers_as_a_fresh_store(tmp_path: Path) -> None:
    docs, vectors = corpus()
    old = tmp_path / "old.db"
    write_schema_2(old, docs, vectors)
    keep = [d for i, d in enumerate(docs) if i != 7]  # the fresh store gets d007 without a vector too
    async with SQLiteVectorStore(old) as migrated, SQLiteVectorStore(tmp_path / "fresh.db") as fresh:
        await fresh.upsert(keep, embeddings=np.delete(vectors, 7, axis=0))
        await fresh.upsert([docs[7]])
        assert await migrated.count() == await fresh.count() == 120
        for query in ("solar wind", "battery storage price", "nuclear"):
            assert answers(await migrated.search_text(query, k=20)) == answers(await fresh.search_text(query, k=20))
            assert answers(await migrated.search_text(query, k=20, filter=field("even") == True)) == answers(  # noqa: E712
                await fresh.search_text(query, k=20, filter=field("even") == True))  # noqa: E712
        for q in vectors[[0, 9, 33]]:
            assert answers(await migrated.search_vector(q, k=15)) == answers(await fresh.search_vector(q, k=15))
        assert "d007" not in {d.id for d in await migrated.search_vector(vectors[7], k=120)}
        # and it keeps working as a schema-3 store: updates, deletes, new documents
        await migrated.upsert([Document(id="d000", content="geothermal")], embeddings=vectors[:1])
        await migrated.delete(ids=["d001"])
        assert [d.id for d in await migrated.search_text("geothermal", k=5)] == ["d000"]
        assert await migrated.count() == 119
    conn = sqlite3.connect(old)
    assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("3",)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "postings_v2" not in tables and "documents_v2" not in tables
    conn.close()


def test_an_interrupted_migration_leaves_the_schema_2_file_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs, vectors = corpus()
    old = tmp_path / "old.db"
    write_schema_2(old, docs, vectors)
    before = old.read_bytes()
    import fastrag.vector_store.sqlite.lexical as lexical

    def fail(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(lexical, "insert_segment", fail)
    with pytest.raises(Exception, match="disk I/O error"):
        SQLiteVectorStore(old)
    conn = sqlite3.connect(old)
    assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("2",)
    assert conn.execute("SELECT count(*) FROM postings").fetchone()[0] > 0
    assert conn.execute("SELECT count(*) FROM documents WHERE embedding IS NOT NULL").fetchone()[0] == 119
    conn.close()
    monkeypatch.undo()
    assert len(before) > 0
