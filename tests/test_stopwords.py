"""Snowball's stopwords for a store of one language (issue 14: Russian keyword nDCG@10 with ``--language``
below bm25s, which drops them): an analyzer whose own language has Snowball's list drops it from documents
and questions; the analyzers a multilingual store derives per document keep function words; ``fastrag eval
--language`` builds its store in the dataset's language."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fastrag.analysis import SNOWBALL_STOPWORD_LANGUAGES, Analyzer
from fastrag.config import open_store
from fastrag.errors import ConfigurationError
from fastrag.evaluation.beir_eval import evaluate_beir
from fastrag.models import Document
from fastrag.vector_store.sqlite import SQLiteVectorStore

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("language", "text", "terms"),
    [
        ("ru", "Что было в Москве и в Санкт-Петербурге?", ["москв", "санкт", "петербург"]),
        ("de", "Wer ist der General Manager der Broncos?", ["wer", "general", "manag", "broncos"]),
        ("es", "¿Cómo se financian las escuelas?", ["com", "financi", "escuel"]),
        ("fr", "Le chat est sur la table", ["chat", "tabl"]),
    ],
)
def test_a_store_language_with_a_snowball_list_drops_its_stopwords(language: str, text: str, terms: list[str]) -> None:
    analyzer = Analyzer(language)
    assert analyzer.analyze(text) == terms
    assert analyzer.analyze(text, for_query=True) == terms


def test_every_listed_language_has_a_non_empty_folded_list() -> None:
    for language in SNOWBALL_STOPWORD_LANGUAGES:
        words = Analyzer(language).stopwords
        assert len(words) > 50, language
        assert all(w == w.casefold() for w in words), language
    assert "daß" not in Analyzer("de").stopwords and "dass" in Analyzer("de").stopwords  # folded as text is


def test_derived_analyzers_of_a_multilingual_store_keep_function_words() -> None:
    english = Analyzer()
    russian = english.for_language("ru")
    assert russian.analyze("и в Москве") == ["и", "в", "москв"]
    assert english.for_language("en").stopwords == english.stopwords  # English's list everywhere, as before
    assert Analyzer("ru").for_language("en").analyze("the cat") == ["cat"]
    assert Analyzer("ru", stopwords=False).analyze("и в Москве") == ["и", "в", "москв"]


def test_the_signature_names_the_stopword_list_so_stores_notice_it() -> None:
    assert Analyzer("ru").signature.endswith(" stopwords=snowball")
    assert "stopwords" not in Analyzer().signature  # English stores are unchanged
    assert "stopwords" not in Analyzer("ru", stopwords=False).signature
    assert "stopwords" not in Analyzer("fi").signature  # Snowball has no Finnish list here


async def test_a_russian_store_written_before_the_stopwords_is_reanalysed(tmp_path: Path) -> None:
    path = str(tmp_path / "ru.db")
    # BM25 length normalisation: with its function words "long" is the longer document, without them the shorter
    docs = [Document(id="long", content="и и и и в в в кот"), Document(id="short", content="кот дом")]
    async with SQLiteVectorStore(path, analyzer=Analyzer("ru", stopwords=False)) as store:  # as fastrag wrote it
        await store.upsert(docs)
        assert [d.id for d in await store.search_text("кот", k=2)] == ["short", "long"]
    async with SQLiteVectorStore(path, analyzer=Analyzer("ru")) as store:
        found = await store.search_text("кот", k=2)
    assert [d.id for d in found] == ["long", "short"]  # re-analysed: "long" now holds one word


def _beir(root: Path) -> Path:
    """A Russian BEIR set where function words decide the ranking unless they are dropped: the long document
    repeats "и" and "в", which the question also holds; the relevant one is the short one."""
    folder = root / "beir-ru"
    (folder / "qrels").mkdir(parents=True)
    docs = {"long": "и и и и в в в кот дом сад лес", "short": "кот", "other": "собака"}
    rows = [{"_id": i, "title": "", "text": t} for i, t in docs.items()]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q", "text": "кот и в"}, ensure_ascii=False) + "\n",
                                          encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\tshort\t1\n")
    return folder


async def test_eval_with_a_language_analyses_the_store_in_it(tmp_path: Path) -> None:
    folder = _beir(tmp_path)
    russian = await evaluate_beir(folder, mode="keyword", store_url=f"sqlite:///{tmp_path}/a.db", language="ru")
    english = await evaluate_beir(folder, mode="keyword", store_url=f"sqlite:///{tmp_path}/b.db")
    assert russian["ndcg@10"] == pytest.approx(1.0)
    assert english["ndcg@10"] < 1.0  # "и" and "в" put the long document first


def test_an_analyzer_is_refused_for_a_store_whose_engine_analyses_text() -> None:
    with pytest.raises(ConfigurationError, match="analyse text in the engine"):
        open_store("opensearch://localhost:9200/docs", analyzer=Analyzer("ru"))
