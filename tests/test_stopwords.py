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


async def test_a_store_opened_without_an_analyzer_keeps_the_analysis_it_was_built_with(tmp_path: Path) -> None:
    path = str(tmp_path / "ru.db")
    async with SQLiteVectorStore(path, analyzer=Analyzer("ru")) as store:
        await store.upsert([Document(id="a", content="кот и в доме")])
    async with SQLiteVectorStore(path) as store:  # what fastrag search and index do
        assert store.analyzer.language == "ru" and store.analyzer.stopwords == Analyzer("ru").stopwords
        assert await store.search_text("и в", k=1) == []  # only stopwords: no term left
        assert [d.id for d in await store.search_text("кота", k=1)] == ["a"]
    with pytest.raises(ConfigurationError, match="analyzer_language='ru', not 'en'"):
        SQLiteVectorStore(path, analyzer=Analyzer())  # an explicit other analysis is still refused
    plain = str(tmp_path / "plain.db")
    async with SQLiteVectorStore(plain, analyzer=Analyzer("ru", stopwords=False)) as store:
        await store.upsert([Document(id="a", content="кот и в доме")])
    async with SQLiteVectorStore(plain) as store:  # kept as built: not re-analysed with stopwords
        assert store.analyzer.stopwords == frozenset()
        assert [d.id for d in await store.search_text("и", k=1)] == ["a"]


def test_cli_search_and_index_open_a_store_built_by_eval_with_a_language(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from fastrag.cli import main

    folder = _beir(tmp_path)
    url = f"sqlite:///{tmp_path}/ev.db"
    runner = CliRunner()
    built = runner.invoke(main, ["eval", str(folder), "--mode", "keyword", "--language", "ru", "--store", url, "--json"])
    assert built.exit_code == 0, built.output
    found = runner.invoke(main, ["search", "кот", "--store", url, "--mode", "keyword", "--json"])
    assert found.exit_code == 0, found.output
    assert [d["id"] for d in json.loads(found.stdout)["documents"]][:1] == ["short"]
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "a.txt").write_text("кот спит", encoding="utf-8")
    indexed = runner.invoke(main, ["index", str(tmp_path / "more"), "--store", url])
    assert indexed.exit_code == 0, indexed.output
    english = f"sqlite:///{tmp_path}/en.db"  # built by fastrag index: English analysis, kept by eval
    assert runner.invoke(main, ["index", str(tmp_path / "more"), "--store", english]).exit_code == 0
    again = runner.invoke(main, ["eval", str(folder), "--mode", "keyword", "--language", "ru", "--store", english])
    assert again.exit_code == 0, again.output


def test_cli_index_with_a_language_builds_a_new_store_in_it(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from fastrag.cli import main

    (tmp_path / "ru").mkdir()
    (tmp_path / "ru" / "long.txt").write_text("и и и и в в в кот", encoding="utf-8")
    (tmp_path / "ru" / "short.txt").write_text("кот дом", encoding="utf-8")
    runner = CliRunner()
    url = f"sqlite:///{tmp_path}/ru.db"
    assert runner.invoke(main, ["index", str(tmp_path / "ru"), "--store", url, "--language", "ru"]).exit_code == 0
    found = runner.invoke(main, ["search", "что и в", "--store", url, "--mode", "keyword", "--json"])
    assert found.exit_code == 0, found.output
    assert json.loads(found.stdout)["documents"] == []  # only Snowball stopwords: nothing to match
    found = runner.invoke(main, ["search", "кот", "--store", url, "--mode", "keyword", "--json"])
    # without its function words "long" is the shorter text
    assert [Path(d["metadata"]["source_uri"]).name for d in json.loads(found.stdout)["documents"]] == [
        "long.txt", "short.txt"]


@pytest.mark.parametrize(("tag", "code"), [("RU", "ru"), ("rus", "ru"), ("ru-RU", "ru"), ("pt_BR", "pt"), ("iw", "he")])
def test_language_tags_users_give_are_normalised(tag: str, code: str) -> None:
    from fastrag.analysis import language_code

    assert language_code(tag) == code


@pytest.mark.parametrize("tag", ["xx", "zz", "und", "russian", "", " ", "x-foo", "1x"])
def test_unregistered_language_codes_are_refused_everywhere_a_user_gives_one(tag: str, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from fastrag.analysis import language_code
    from fastrag.cli import main
    from fastrag.errors import InvalidParameterError
    from fastrag.ingestion import IngestionPipeline
    from fastrag.retrieval import BM25Retriever
    from fastrag.testing.fakes import HashingEmbedder

    assert language_code(tag) is None
    store = SQLiteVectorStore(":memory:")
    with pytest.raises(InvalidParameterError, match="registered language code"):
        BM25Retriever(store=store, language=tag)
    with pytest.raises(InvalidParameterError, match="registered language code"):
        IngestionPipeline(embedder=HashingEmbedder(), vector_store=store, language=tag)
    with pytest.raises(InvalidParameterError):
        Analyzer(tag)
    (tmp_path / "a.txt").write_text("кот", encoding="utf-8")
    for command in (["index", str(tmp_path), "--store", f"sqlite:///{tmp_path}/s.db"], ["search", "кот"]):
        result = CliRunner().invoke(main, [*command, "--language", tag])
        assert result.exit_code == 1 and "--language must be auto or a registered language code" in result.stderr


async def test_store_search_text_refuses_an_unregistered_language() -> None:
    from fastrag.errors import InvalidParameterError

    async with SQLiteVectorStore(":memory:") as store:
        await store.upsert([Document(id="a", content="кот")])
        with pytest.raises(InvalidParameterError, match="registered language code"):
            await store.search_text("кот", k=1, language="xx")
        assert [d.id for d in await store.search_text("кот", k=1, language="RUS")] == ["a"]


def test_analyzer_takes_a_tag_for_a_snowball_language() -> None:
    assert Analyzer("RU").language == "ru" and Analyzer("pt-BR").language == "pt" and Analyzer("nb").language == "no"
    with pytest.raises(Exception, match="needs no stemmer: give the store Analyzer\\(None\\)"):
        Analyzer("zh")
