"""Languages without flags (issue 25.4): with no language given, documents are analysed in their detected
language and a question in the store's language, or its detected one among several; a given language wins."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastrag.errors import InvalidParameterError
from fastrag.ingestion import IngestionPipeline
from fastrag.language import LangidLanguageDetector, default_language_detector
from fastrag.planning import QUESTION_MIN_CONFIDENCE, question_language_options
from fastrag.protocols import LanguageDetector, SupportsLanguageConfidence
from fastrag.retrieval.bm25 import BM25Retriever
from fastrag.testing.fakes import HashingEmbedder
from fastrag.vector_store.sqlite import SQLiteVectorStore

pytestmark = pytest.mark.anyio

GERMAN = {
    "haus.txt": "Die alten Häuser am Fluss wurden im neunzehnten Jahrhundert von den Bürgern der Stadt gebaut.",
    "zug.txt": "Die Züge fahren jeden Morgen pünktlich von München nach Berlin und halten an vielen Bahnhöfen.",
}
RUSSIAN = {
    "dom.txt": "Старые дома на берегу реки были построены купцами города в девятнадцатом веке.",
    "poezd.txt": "Поезда каждое утро отправляются из Москвы в Санкт-Петербург и делают много остановок.",
}


def _files(root: Path, files: dict[str, str]) -> Path:
    folder = root / "docs"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text + "\n", encoding="utf-8")
    return folder


@pytest.mark.parametrize(("files", "language", "question", "expected"), [
    (GERMAN, "de", "Haus", "haus.txt"),       # Häuser -> haus only with German stemming
    (GERMAN, "de", "Zug", "zug.txt"),         # Züge -> zug
    (RUSSIAN, "ru", "домом", "dom.txt"),      # дома / домом -> дом only with Russian stemming
    (RUSSIAN, "ru", "поезд", "poezd.txt"),    # Поезда -> поезд
])
async def test_a_one_language_corpus_indexed_without_flags_is_analysed_in_its_language(
    tmp_path: Path, files: dict[str, str], language: str, question: str, expected: str
) -> None:
    folder = _files(tmp_path, files)
    async with SQLiteVectorStore(str(tmp_path / "s.db")) as store:
        report = await IngestionPipeline(embedder=HashingEmbedder(16), vector_store=store).run([folder])
        assert report.languages == {language: len(files)}
        assert {d.metadata["language"] for d in await store.get()} == {language}
        # the planner's default for a store of one language: that language
        options = await question_language_options(store, None)
        assert options == {"language": language}
        found = await BM25Retriever(store=store, **options).retrieve(question, k=1)
        assert [d.metadata["source_uri"].rsplit("/", 1)[-1] for d in found] == [expected]
        # and the store's own search without a language analyses in the one language it holds
        assert [d.metadata["source_uri"].rsplit("/", 1)[-1] for d in await store.search_text(question, k=1)] == [expected]


async def test_a_question_is_analysed_in_its_detected_language_among_the_stores(tmp_path: Path) -> None:
    folder = _files(tmp_path, {**GERMAN, "house.txt": "The old houses by the river were built by the merchants."})
    async with SQLiteVectorStore(str(tmp_path / "s.db")) as store:
        await IngestionPipeline(embedder=HashingEmbedder(16), vector_store=store).run([folder])
        options = await question_language_options(store, None)
        detector = options["detector"]
        assert isinstance(detector, LangidLanguageDetector) and set(detector.languages) == {"de", "en"}
        assert detector.detect("Wer hat die alten Häuser am Fluss gebaut?") == "de"
        assert detector.detect("Who built the old houses by the river?") == "en"
        assert detector.detect("1869?") is None  # no letters: the store's merged analysis
        retriever = BM25Retriever(store=store, **options)
        top = await retriever.retrieve("Wer hat die alten Häuser gebaut?", k=1)
        assert top[0].metadata["source_uri"].endswith("haus.txt")
        # a given language wins over detection
        assert await question_language_options(store, "en") == {"language": "en"}


async def test_a_given_language_wins_at_index_time(tmp_path: Path) -> None:
    folder = _files(tmp_path, GERMAN)
    async with SQLiteVectorStore(str(tmp_path / "s.db")) as store:
        report = await IngestionPipeline(embedder=HashingEmbedder(16), vector_store=store, language="en").run([folder])
        assert report.languages == {"en": 2}
        assert await store.search_text("Bahnhof", k=1, language="en") == []  # English stemming: bahnhöfen is no bahnhof
    async with SQLiteVectorStore(str(tmp_path / "off.db")) as store:  # detection switched off
        report = await IngestionPipeline(embedder=HashingEmbedder(16), vector_store=store,
                                         language_detector=None).run([folder])
        assert report.languages == {}
        assert all("language" not in d.metadata for d in await store.get())


@pytest.mark.parametrize(("text", "code"), [
    ("Πρέπει να οριστεί ο κατάλογος προορισμού", "el"),
    ("Kullanıcı adı veya parola yanlış, lütfen tekrar deneyin", "tr"),
    ("Nu s-a putut deschide fișierul de configurare", "ro"),
    ("تعذر فتح ملف الإعدادات، حاول مرة أخرى", "ar"),
    ("설정 파일을 열 수 없습니다. 다시 시도하십시오.", "ko"),
    ("設定ファイルを開けませんでした。もう一度お試しください。", "ja"),
    ("在 1402 年至 1405 年间，诺曼贵族抵达了加那利群岛。", "zh"),  # Mandarin, not Wu (wuu): ISO 639-1 only
])
def test_the_default_detector_places_short_texts_beyond_the_shared_collections(text: str, code: str) -> None:
    assert default_language_detector().detect(text) == code


def test_the_default_detector_is_langid_with_confidences() -> None:
    detector = default_language_detector()
    assert isinstance(detector, LanguageDetector) and isinstance(detector, SupportsLanguageConfidence)
    assert detector is default_language_detector()  # one per process
    assert len(detector.languages) >= 100 and all(len(code) == 2 for code in detector.languages)
    among = default_language_detector(["de", "en"], min_confidence=QUESTION_MIN_CONFIDENCE)
    confidences = among.confidences("Wie viele Punkte gab die Verteidigung ab?")
    assert list(confidences) == ["de", "en"] and sum(confidences.values()) == pytest.approx(1.0)
    assert among.detect("") is None
    for bad in ({"languages": []}, {"languages": ["not a code"]}, {"languages": "de"}, {"max_chars": 0},
                {"min_confidence": 1.0}):
        with pytest.raises(InvalidParameterError):
            LangidLanguageDetector(**bad)  # type: ignore[arg-type]
