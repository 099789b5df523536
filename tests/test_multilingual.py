"""Acceptance on a real multilingual corpus: XQuAD's 240 paragraphs in English, German, Spanish, Russian and
Chinese (the same ``_id`` is the same paragraph), indexed once as ``/{lang}/xquad/{_id}`` with
``metadata["language"]``, searched with questions in each language through
``LanguageAwareRetriever(BM25Retriever(detector=...), LinguaLanguageDetector)``.

For a sample of questions per language, and for questions whose language Lingua misreads on the whole
question (a German question about an English-named organisation, a Chinese one quoting Latin-script names):
no paragraph appears twice in the top 10, and the question's own language version is the one returned
whenever it was among the candidates. The ``slow`` tests check every question (1,190 per language): none
misses (issue #4's acceptance, 100%). Recall@10 over every question is measured by
``benchmarks/multilingual.py`` and reported in ``docs/multilingual.md``.

The XQuAD tests read ``../shared/datasets/xquad-*`` beside the checkout and skip, saying so, where it is
absent (a fresh clone); the detector's own tests use the questions written below, so they always run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from fastrag.errors import InvalidParameterError
from fastrag.language import LinguaLanguageDetector
from fastrag.models import Document
from fastrag.protocols import LanguageDetector, SupportsLanguageConfidence
from fastrag.retrieval import BM25Retriever
from fastrag.retrieval.language import QUERY_LANGUAGE, LanguageAwareRetriever, split_locale
from fastrag.vector_store.sqlite import SQLiteVectorStore

pytestmark = pytest.mark.anyio

DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
LANGUAGES = ("en", "de", "es", "ru", "zh")
# One question per language, written for these tests (not taken from XQuAD), in XQuAD's style: a short
# factual question naming a team.
QUESTIONS = {
    "en": "How many goals did the Rovers concede in the final?",
    "de": "Wie viele Tore hat die Verteidigung der Rovers im Finale kassiert?",
    "es": "¿Cuántos goles encajó la defensa de los Rovers en la final?",
    "ru": "Сколько голов пропустила защита Роверс в финале?",
    "zh": "流浪者队在决赛中丢了多少球？",
}
SAMPLE_EVERY = 40  # 30 of the 1,190 questions per language
CANDIDATE_K = 40
# Questions Lingua 2.1 reads as another language on the whole question (names, scripts): (language, query id).
MISREAD = [
    ("en", "57115bf350c2381900b54a94"),  # 'Where is Energiprojekt AB based?' -> de
    ("de", "56e7788200c9c71400d77183"),  # 'Was ist die NASUWT?' -> en
    ("es", "57274b35f1498d1400e8f5d6"),  # '¿Cómo se financian las ergänzungsschulen?' -> de
    ("ru", "57273e50dd62a815002e9a02"),  # 'Что такое Engineering News-Record?' -> en
    ("zh", "57115bf350c2381900b54a94"),  # 'Energiprojekt AB公司位于何处?' -> de
    ("zh", "570967c4ed30961900e840ba"),  # 'Sky Digital是什么时候推出的？' -> en
]
# Questions the detector alone gets wrong that the candidate translations' text decides (decided_by
# "matched"): a confident misreading (Lingua: German 0.86), and two German questions Lingua is unsure about
# whose English translation the first stage, having analysed them in English, ranked first.
DECIDED_BY_TEXT = [
    ("en", "5726a8d4dd62a815002e8c37"),  # "What was the name of Temüjin's wife Börte's first son?"
    ("de", "56bf3fd53aeaaa14008c9592"),  # 'Wer ist der General Manager der Broncos?'
    ("de", "57273e50dd62a815002e9a02"),  # 'Was ist das Engineering News-Record?'
]


def load(lang: str) -> tuple[list[Document], list[tuple[str, str]], dict[str, str]]:
    folder = DATASETS / f"xquad-{lang}"
    if not folder.is_dir():
        pytest.skip(f"XQuAD is not at {folder} (../shared/datasets beside the checkout)")
    docs = []
    for line in (folder / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        docs.append(Document(id=f"{lang}:{row['_id']}", content=row["text"],
                             metadata={"source_uri": f"/{lang}/xquad/{row['_id']}", "language": lang}))  # fmt: skip
    queries = [(r["_id"], r["text"]) for r in map(json.loads, (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines())]
    qrels = {}
    for line in (folder / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        query_id, corpus_id, *_ = line.split("\t")
        qrels[query_id] = corpus_id
    return docs, queries, qrels


@pytest.fixture(scope="module")
def detector() -> LinguaLanguageDetector:
    return LinguaLanguageDetector(list(LANGUAGES))


@pytest.fixture(scope="module")
def store() -> Iterator[SQLiteVectorStore]:
    docs = [doc for lang in LANGUAGES for doc in load(lang)[0]]  # skips without XQuAD
    store = SQLiteVectorStore(":memory:")
    anyio.run(store.upsert, docs)
    yield store
    anyio.run(store.aclose)


def test_lingua_detector(detector: LinguaLanguageDetector) -> None:
    assert isinstance(detector, LanguageDetector) and isinstance(detector, SupportsLanguageConfidence)
    assert detector.languages == LANGUAGES
    assert {lang: detector.detect(text) for lang, text in QUESTIONS.items()} == {lang: lang for lang in LANGUAGES}
    assert detector.detect("12345 !!!") is None
    assert detector.detect("") is None
    with pytest.raises(InvalidParameterError):
        detector.detect(None)  # type: ignore[arg-type]


def test_lingua_confidences(detector: LinguaLanguageDetector) -> None:
    for lang, question in QUESTIONS.items():
        confidences = detector.confidences(question)
        assert set(confidences) == set(LANGUAGES)
        values = list(confidences.values())
        assert values == sorted(values, reverse=True) and all(0.0 <= v <= 1.0 for v in values)
        assert sum(values) == pytest.approx(1.0)
        assert next(iter(confidences)) == detector.detect(question) == lang
    assert list(detector.confidences("12345 !!!").values()) == [0.0] * len(LANGUAGES)
    assert list(detector.confidences("")) == list(LANGUAGES)  # ties: the configured order
    assert detector.confidences("Что это?")["ru"] == 1.0  # only Russian is written in Cyrillic here
    with pytest.raises(InvalidParameterError):
        detector.confidences(b"text")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        detector.confidences("Was ist das?")["de"] = 0.0  # type: ignore[index]


@pytest.mark.parametrize(
    ("languages", "match"),
    [(["en"], "two"), (["en", "en-GB"], "two"), (["en", "xx"], "ISO 639-1"), (["en", "no"], "nb"), ("en", "sequence")],
)
def test_lingua_detector_refuses_bad_languages(languages: object, match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        LinguaLanguageDetector(languages)  # type: ignore[arg-type]


async def own_version_misses(
    retriever: LanguageAwareRetriever, first_stage: BM25Retriever, lang: str, query_id: str, question: str
) -> tuple[list[Document], list[str]]:
    """The top 10, and the paragraphs returned in another language although their ``lang`` version was among
    the first stage's candidates (the acceptance: none). Asserts that no paragraph appears twice."""
    top = await retriever.retrieve(question, k=10)
    candidates = await first_stage.retrieve(question, k=CANDIDATE_K)
    pages = [split_locale(d.source_uri)[1] for d in top]
    assert len(pages) == len(set(pages)), f"{query_id}: a paragraph appears twice: {[d.id for d in top]}"
    assert all(d.metadata["language"] in LANGUAGES for d in top)
    own_candidates = {split_locale(d.source_uri)[1] for d in candidates if d.metadata["language"] == lang}
    misses = [d.id for d in top if d.metadata["language"] != lang and split_locale(d.source_uri)[1] in own_candidates]
    return top, misses


def recommended(store: SQLiteVectorStore, detector: LinguaLanguageDetector) -> tuple[LanguageAwareRetriever, BM25Retriever]:
    """The configuration docs/multilingual.md recommends (defaults but for candidate_k, spelled out)."""
    first_stage = BM25Retriever(store=store, detector=detector)
    return LanguageAwareRetriever(retriever=first_stage, detector=detector, candidate_k=CANDIDATE_K), first_stage


@pytest.mark.parametrize("lang", LANGUAGES)
async def test_each_paragraph_once_in_the_askers_language(
    lang: str, store: SQLiteVectorStore, detector: LinguaLanguageDetector
) -> None:
    _, queries, qrels = load(lang)
    retriever, first_stage = recommended(store, detector)
    sample = queries[::SAMPLE_EVERY]
    decided_right = found = 0
    for query_id, question in sample:
        top, misses = await own_version_misses(retriever, first_stage, lang, query_id, question)
        assert not misses, f"{query_id} ({question!r}): {misses} returned although the {lang} versions were candidates"
        decided_right += top[0].metadata[QUERY_LANGUAGE]["language"] == lang
        found += any(doc.id.split(":", 1)[1] == qrels[query_id] for doc in top)
    assert decided_right >= 0.95 * len(sample)
    assert found >= 0.9 * len(sample)  # Recall@10 on the sample; the full measurement is in docs/multilingual.md


@pytest.mark.parametrize(("lang", "query_id"), MISREAD)
async def test_questions_lingua_misreads_get_their_own_language_version(
    lang: str, query_id: str, store: SQLiteVectorStore, detector: LinguaLanguageDetector
) -> None:
    question = dict(load(lang)[1])[query_id]
    retriever, first_stage = recommended(store, detector)
    top, misses = await own_version_misses(retriever, first_stage, lang, query_id, question)
    assert not misses, f"{query_id} ({question!r}): {misses} returned although the {lang} versions were candidates"
    assert top[0].metadata[QUERY_LANGUAGE]["language"] == lang
    decision = await retriever.decide_language(question, candidates=await first_stage.retrieve(question, k=CANDIDATE_K))
    assert decision.language == lang and decision.neutral_words  # the shared names were set aside


@pytest.mark.parametrize(("lang", "query_id"), DECIDED_BY_TEXT)
async def test_the_translations_text_corrects_the_detector(
    lang: str, query_id: str, store: SQLiteVectorStore, detector: LinguaLanguageDetector
) -> None:
    question = dict(load(lang)[1])[query_id]
    retriever, first_stage = recommended(store, detector)
    top, misses = await own_version_misses(retriever, first_stage, lang, query_id, question)
    assert not misses, f"{query_id} ({question!r}): {misses} returned although the {lang} versions were candidates"
    assert top[0].metadata[QUERY_LANGUAGE] == {"language": lang, "decided_by": "matched"}
    decision = await retriever.decide_language(question, candidates=await first_stage.retrieve(question, k=CANDIDATE_K))
    assert next(iter(decision.confidences)) != lang or decision.confidences[lang] < retriever.trust_confidence
    others = [n for code, n in decision.matched_words.items() if code != lang]
    assert decision.matched_words[lang] >= retriever.min_matched_words and all(n < decision.matched_words[lang] for n in others)


@pytest.mark.slow
@pytest.mark.parametrize("lang", LANGUAGES)
async def test_every_question_gets_its_own_language_version(
    lang: str, store: SQLiteVectorStore, detector: LinguaLanguageDetector
) -> None:
    """Issue #4's acceptance over all 1,190 questions: the own-language version is returned whenever it was
    a candidate, for every question."""
    retriever, first_stage = recommended(store, detector)
    missed = []
    for query_id, question in load(lang)[1]:
        _, misses = await own_version_misses(retriever, first_stage, lang, query_id, question)
        if misses:
            missed.append((query_id, question, misses))
    assert not missed, f"{len(missed)} questions missed their own-language version: {missed}"
