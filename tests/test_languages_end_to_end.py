"""Issue 14.5 and 14.6 end to end: languages set at indexing (code or detected) and at search/eval time from the
CLI, and questions or documents that embed to the zero vector reported instead of silently dropped."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fastrag.cli import main
from fastrag.ingestion import IngestionPipeline
from fastrag.models import Document
from fastrag.retrieval.bm25 import BM25Retriever
from fastrag.retrieval.hybrid import HybridRetriever
from fastrag.retrieval.vector import VectorRetriever
from fastrag.testing.fakes import HashingEmbedder
from fastrag.vector_store.sqlite import SQLiteVectorStore

_ENV = {"FASTRAG_STORE": None, "FASTRAG_MODE": None, "FASTRAG_EMBEDDING_MODEL": None, "FASTRAG_CONFIG": None,
        "FASTRAG_LEXICAL_STORE": None}


def cli(*args: str):  # noqa: ANN201
    return CliRunner().invoke(main, list(args), env=_ENV, catch_exceptions=False)


# ------------------------------------------------------------------------------------------- zero vectors


@pytest.mark.anyio
async def test_a_question_embedding_to_zero_is_reported_and_hybrid_keeps_the_bm25_order(caplog):
    embedder = HashingEmbedder(16)
    docs = [Document(id=f"d{i}", content=f"keyword {'x ' * i}") for i in range(5)]
    async with SQLiteVectorStore(":memory:") as store:
        await store.upsert(docs, embeddings=await embedder.embed_documents([d.content for d in docs]))
        vector = VectorRetriever(vector_store=store, embedder=embedder)
        bm25 = BM25Retriever(store=store)
        hybrid = HybridRetriever([vector, bm25])
        with caplog.at_level(logging.WARNING, logger="fastrag.retrieval"):
            alone = await vector.retrieve_result("???", k=3)
        assert alone.documents == () and alone.zero_vector_branches == ("vector",)
        assert "zero vector" in caplog.text
        # the question has BM25 terms but no embedding: the hybrid is the BM25 branch, in its order
        zero_query = "keyword ¿?"
        embedder_vector = await embedder.embed_query(zero_query)
        assert embedder_vector.any()  # "keyword" is a token of the hashing embedder...
        result = await HybridRetriever([VectorRetriever(vector_store=store, embedder=_ZeroQuery(embedder)), bm25]).retrieve_result(
            zero_query, k=5
        )
        assert result.zero_vector_branches == ("vector",)
        assert not result.partial and result.error is None
        assert [d.id for d in result.documents] == [d.id for d in await bm25.retrieve(zero_query, k=5)]
        normal = await hybrid.retrieve_result("keyword x", k=5)
        assert normal.zero_vector_branches == ()


class _ZeroQuery:
    """An embedder whose questions all embed to zero (a script its vocabulary lacks); documents as the
    wrapped one."""

    def __init__(self, inner: HashingEmbedder) -> None:
        self._inner = inner
        self.name = inner.name
        self.dimension = inner.dimension

    async def embed_documents(self, texts):  # noqa: ANN001, ANN201
        return await self._inner.embed_documents(texts)

    async def embed_query(self, text: str) -> np.ndarray:
        return np.zeros(self.dimension, dtype=np.float32)


class _ZeroFor(HashingEmbedder):
    """Texts holding ``word`` embed to the zero vector (as text in a script a model does not know)."""

    def __init__(self, word: str) -> None:
        super().__init__(16)
        self._word = word

    async def embed_documents(self, texts):  # noqa: ANN001, ANN201
        vectors = await super().embed_documents(texts)
        vectors[[self._word in t for t in texts]] = 0.0
        return vectors


@pytest.mark.anyio
async def test_ingestion_counts_chunks_that_embed_to_zero(tmp_path: Path, caplog) -> None:
    (tmp_path / "a.txt").write_text("words that embed\n", encoding="utf-8")
    (tmp_path / "b.txt").write_text("unknown words\n", encoding="utf-8")
    async with SQLiteVectorStore(":memory:") as store:
        with caplog.at_level(logging.WARNING):
            report = await IngestionPipeline(embedder=_ZeroFor("unknown"), vector_store=store).run([tmp_path])
    assert report.chunks_written == 2 and report.zero_vectors == 1
    assert "embedded to the zero vector" in caplog.text


# --------------------------------------------------------------------------------------------- languages


class _FirstWordDetector:
    """Detects German when a text holds "der", "die" or "das", else English."""

    def detect(self, text: str) -> str | None:
        return "de" if {"der", "die", "das"} & set(text.lower().split()) else "en"


@pytest.mark.anyio
async def test_ingestion_stamps_the_given_or_detected_language_and_reindexes_when_it_changes(tmp_path: Path) -> None:
    (tmp_path / "de.txt").write_text("Die Häuser stehen am Fluss.\n", encoding="utf-8")
    (tmp_path / "en.txt").write_text("The houses stand by the river.\n", encoding="utf-8")
    async with SQLiteVectorStore(":memory:") as store:
        report = await IngestionPipeline(
            embedder=HashingEmbedder(16), vector_store=store, language_detector=_FirstWordDetector()
        ).run([tmp_path])
        assert report.languages == {"de": 1, "en": 1}
        assert {d.id.split("#")[0].rsplit("/", 1)[-1]: d.metadata["language"] for d in await store.get()} == {
            "de.txt": "de", "en.txt": "en",
        }
        assert [d.metadata["language"] for d in await store.search_text("Haus", k=2, language="de")] == ["de"]
        # the same files with one language for all: the English file's chunks are rewritten (its language
        # changed), the German one's are unchanged
        again = await IngestionPipeline(embedder=HashingEmbedder(16), vector_store=store, language="de").run([tmp_path])
        assert (again.files_indexed, again.files_unchanged) == (1, 1)
        assert {d.metadata["language"] for d in await store.get()} == {"de"}


def test_pipeline_refuses_bad_language_options() -> None:
    from fastrag.errors import InvalidParameterError
    from fastrag.testing.fakes import InMemoryStore

    for kwargs in ({"language": "not a code"}, {"language": "de", "language_detector": _FirstWordDetector()},
                   {"language_detector": object()}):
        with pytest.raises(InvalidParameterError):
            IngestionPipeline(embedder=HashingEmbedder(16), vector_store=InMemoryStore(), **kwargs)


def _beir(root: Path) -> Path:
    """A tiny German BEIR set whose questions match their documents only after German stemming."""
    folder = root / "beir-de"
    (folder / "qrels").mkdir(parents=True)
    docs = {"d1": "Die Häuser am Fluss sind alt.", "d2": "Der Zug fährt nach Berlin.", "d3": "Ein Hund bellt laut."}
    queries = {"q1": "Haus", "q2": "Züge", "q3": "Hunde"}
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": i, "title": "", "text": t}) + "\n" for i, t in docs.items()), encoding="utf-8"
    )
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in queries.items()), encoding="utf-8"
    )
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\nq3\td3\t1\n")
    return folder


def test_cli_eval_with_language_analyses_the_dataset_in_it(tmp_path: Path) -> None:
    folder = _beir(tmp_path)
    default = cli("eval", str(folder), "--mode", "keyword", "--json")
    german = cli("eval", str(folder), "--mode", "keyword", "--json", "--language", "de")
    english = cli("eval", str(folder), "--mode", "keyword", "--json", "--language", "en")
    assert default.exit_code == 0 and german.exit_code == 0 and english.exit_code == 0, german.output
    assert json.loads(english.stdout)["ndcg@10"] < 0.5  # "haus" vs "häuser", "züge" vs "zug": English misses
    assert json.loads(german.stdout)["ndcg@10"] == pytest.approx(1.0)
    # no flags (issue 25.4): the documents are detected as German, so the corpus is analysed in German
    assert json.loads(default.stdout)["ndcg@10"] == pytest.approx(1.0)
    for bad in ("auto", "Auto", "not a code", "xx"):
        result = cli("eval", str(folder), "--mode", "keyword", "--language", bad)
        assert result.exit_code == 1 and "--language" in result.stderr
        assert "must be auto" not in result.stderr  # eval takes a code only


def test_cli_index_and_search_with_a_language(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "haus.txt").write_text("Die Häuser am Fluss sind alt.\n", encoding="utf-8")
    result = cli("index", "docs", "--language", "de")
    assert result.exit_code == 0, result.output
    assert "languages: de 1" in result.stdout
    for args in (["--language", "de"], []):  # given, or the store's languages (German only here)
        found = cli("search", "Häuser", "--mode", "keyword", "--json", *args)
        assert found.exit_code == 0, found.output
        assert [d["metadata"]["language"] for d in json.loads(found.stdout)["documents"]] == ["de"]
    english = cli("search", "Häuser", "--mode", "keyword", "--json", "--language", "en")  # "häuser" != "haus"
    assert json.loads(english.stdout)["documents"] == []
    bad = cli("search", "Haus", "--language", "not a code")
    assert bad.exit_code == 1 and "--language" in bad.stderr


def test_cli_reports_zero_vectors_at_index_and_search_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped static model knows no Thai: such chunks and questions embed to zero, and the CLI says so."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "แมว.txt").write_text("แมวกินปลา ฉันชอบอ่านหนังสือ\n", encoding="utf-8")
    (tmp_path / "docs" / "en.txt").write_text("Cats eat fish.\n", encoding="utf-8")
    result = cli("index", "docs")
    assert result.exit_code == 0, result.output
    assert "warning: 1 chunks embedded to the zero vector" in result.stderr
    found = cli("search", "แมวกินปลา", "--json")  # hybrid: the dense branch has nothing, BM25 finds it
    assert found.exit_code == 0, found.output
    payload = json.loads(found.stdout)
    # with no --language (issue 25.4) the store holds Thai and English documents and the question is
    # detected as Thai, which the English static model does not cover: its branch is left out, so no
    # zero vector is searched
    assert payload["zero_vector_branches"] == [] and "vector" in payload["skipped_branches"]
    assert [d["metadata"]["source_uri"] for d in payload["documents"]][:1] == ["docs/แมว.txt"]


def test_cli_search_language_auto_detects_among_the_store_languages(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("lingua")
    import anyio

    monkeypatch.chdir(tmp_path)

    async def write() -> None:
        async with SQLiteVectorStore(str(tmp_path / "s.db")) as store:
            await store.upsert([
                Document(id="de", content="Die Häuser am Fluss sind alt.", metadata={"language": "de"}),
                Document(id="en", content="The old haus is a German word.", metadata={"language": "en"}),
            ])

    anyio.run(write)
    url = f"sqlite:///{tmp_path / 's.db'}"
    found = cli("search", "Wo stehen die alten Häuser?", "--store", url, "--mode", "keyword", "--json",
                "--language", "auto")
    assert found.exit_code == 0, found.output
    assert [d["id"] for d in json.loads(found.stdout)["documents"]][:1] == ["de"]


def test_cli_search_language_auto_counts_the_stores_own_language(tmp_path: Path, monkeypatch) -> None:
    """English documents are analysed by the store's own (English) analyzer, recorded as "": they count
    among the languages an auto-detected question may be in, so an English question is not analysed, and
    its dense branch not dropped, as if it were German."""
    pytest.importorskip("lingua")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "en.md").write_text("The old houses by the river were built by the first settlers of "
                                             "the town, and most of them still stand today.\n", encoding="utf-8")
    (tmp_path / "docs" / "de.md").write_text("Die alten Häuser am Fluss wurden von den ersten Siedlern der Stadt "
                                             "gebaut, und die meisten stehen noch heute.\n", encoding="utf-8")
    assert cli("index", "docs", "--language", "auto").exit_code == 0
    english = cli("search", "Who built the old houses by the river?", "--json", "--language", "auto")
    german = cli("search", "Wer hat die alten Häuser am Fluss gebaut?", "--json", "--language", "auto")
    assert english.exit_code == 0 and german.exit_code == 0, english.output + german.output
    assert json.loads(english.stdout)["skipped_branches"] == {}
    assert "detected as 'de'" in json.loads(german.stdout)["skipped_branches"]["vector"]
    text = cli("search", "Wer hat die alten Häuser am Fluss gebaut?", "--language", "AUTO")  # any case
    assert text.stderr.count("hybrid branch 'vector' is not run") == 1 and "detected as 'de'" in text.stderr
    assert json.loads(english.stdout)["documents"][0]["metadata"]["source_uri"].endswith("en.md")


def test_cli_index_language_auto_detects_each_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("lingua")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text(
        "Die Verteidigung der Panthers gab nur 308 Punkte ab und belegte den sechsten Platz in der Liga.\n",
        encoding="utf-8")
    (tmp_path / "docs" / "b.txt").write_text(
        "The Panthers defense gave up just 308 points, ranking sixth in the league.\n", encoding="utf-8")
    (tmp_path / "docs" / "c.txt").write_text("पैंथर्स की रक्षा पंक्ति ने केवल 308 अंक दिए।\n", encoding="utf-8")
    result = cli("index", "docs", "--language", "auto", "--store", "sqlite:///s.db")
    assert result.exit_code == 0, result.output
    assert "languages: de 1, en 1, hi 1" in result.stdout
    found = cli("search", "Verteidigungen", "--store", "sqlite:///s.db", "--mode", "keyword", "--json")
    assert [d["metadata"]["source_uri"] for d in json.loads(found.stdout)["documents"]] == ["docs/a.txt"]
    hindi = cli("search", "पैंथर्स", "--store", "sqlite:///s.db", "--mode", "keyword", "--json")
    assert [d["metadata"]["source_uri"] for d in json.loads(hindi.stdout)["documents"]] == ["docs/c.txt"]


def test_cli_search_warns_when_no_document_is_in_the_questions_language(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "ru.md").write_text("Кошки спят на диване весь день.\n", encoding="utf-8")
    assert cli("index", "docs", "--language", "ru").exit_code == 0
    other = cli("search", "Katzen schlafen", "--language", "de", "--mode", "keyword")
    assert other.exit_code == 0
    assert "analysed in ru, none in 'de'" in other.stderr
    same = cli("search", "Кошки", "--language", "RU", "--mode", "keyword")
    assert same.exit_code == 0 and "none in" not in same.stderr and "ru.md" in same.stdout
