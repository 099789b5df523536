"""Language-aware retrieval (one translation per page, the asker's language first) and multilingual BM25
in the SQLite store, with a deterministic fake detector (the Lingua detector is tested in
test_multilingual.py)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from fastrag.analysis import Analyzer, primary_language
from fastrag.errors import InvalidParameterError
from fastrag.models import Document
from fastrag.protocols import LanguageDetector, SupportsLanguageConfidence
from fastrag.retrieval import BM25Retriever
from fastrag.retrieval.language import (
    MIN_MATCHED_WORDS,
    PLAUSIBLE_CONFIDENCE,
    QUERY_LANGUAGE,
    TRUST_CONFIDENCE,
    LanguageAwareRetriever,
    LanguageDecision,
    split_locale,
)
from fastrag.retry import RetryingStore
from fastrag.testing.fakes import InMemoryStore
from fastrag.vector_store.sqlite import SQLiteVectorStore

pytestmark = pytest.mark.anyio


class WordDetector:
    """German if the text has a German marker word, English if an English one, else unknown."""

    GERMAN = {"der", "die", "das", "und", "ist", "wie", "wer"}
    ENGLISH = {"the", "and", "is", "how", "who", "what"}

    def __init__(self) -> None:
        self.calls: list[str] = []

    def detect(self, text: str) -> str | None:
        self.calls.append(text)
        words = set(text.lower().replace("?", " ").split())
        if words & self.GERMAN:
            return "de"
        if words & self.ENGLISH:
            return "en"
        return None


class MarkerConfidences:
    """Confidences in proportion to each language's marker words in the text (all 0 without any), or the
    fixed ``answer`` when given; ``detect`` is the likeliest. Records what it was asked."""

    MARKERS = {
        "de": {"wer", "ist", "der", "das", "wie"},
        "en": {"who", "is", "the", "how", "engineering", "news", "record", "magazine"},
    }

    def __init__(self, answer: dict[str, float] | None = None) -> None:
        self.answer = answer
        self.asked: list[str] = []

    def confidences(self, text: str) -> dict[str, float]:
        self.asked.append(text)
        if self.answer is not None:
            return dict(self.answer)
        words = re.findall(r"\w+", text.lower())
        counts = {lang: sum(w in markers for w in words) for lang, markers in self.MARKERS.items()}
        total = sum(counts.values())
        return {lang: (n / total if total else 0.0) for lang, n in sorted(counts.items(), key=lambda kv: -kv[1])}

    def detect(self, text: str) -> str | None:
        best = max(self.confidences(text).items(), key=lambda kv: kv[1])
        return best[0] if best[1] > 0 else None


class Fixed:
    """A first stage returning documents with the given scores, in that order."""

    name = "fixed"

    def __init__(self, rows: list[tuple[str, float, dict[str, Any]]]) -> None:
        self.docs = [
            Document(id=doc_id, content=meta.pop("content", "text"), metadata=meta).ranked(score=score, rank=i)
            for i, (doc_id, score, meta) in enumerate(rows)
        ]
        self.asked: list[int] = []

    async def retrieve(self, query: str, *, k: int = 10, filter: Any = None) -> list[Document]:
        self.asked.append(k)
        return self.docs[:k]


def page(uri: str, language: str | None = None, content: str = "text") -> dict[str, Any]:
    meta: dict[str, Any] = {"source_uri": uri, "content": content}
    if language is not None:
        meta["language"] = language
    return meta


# ---------------------------------------------------------------------------------------- split_locale


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("/docs/a", (None, "docs/a")),
        ("/en/docs/a", ("en", "docs/a")),
        ("/de/docs/a", ("de", "docs/a")),
        ("en/docs/a", ("en", "docs/a")),
        ("docs/a", (None, "docs/a")),
        ("/pt-BR/docs/a", ("pt", "docs/a")),
        ("/zh_Hans/docs/a", ("zh", "docs/a")),
        ("/EN/docs/a", ("en", "docs/a")),
        ("/xx/docs/a", (None, "xx/docs/a")),  # not an ISO 639-1 code
        ("/api/docs/a", (None, "api/docs/a")),
        ("/en", (None, "en")),  # a last segment is the page, not a locale
        ("https://example.org/de/guide/install?v=2", ("de", "https://example.org/guide/install?v=2")),
        ("https://example.org/guide/install", (None, "https://example.org/guide/install")),
    ],
)
def test_split_locale(uri: str, expected: tuple[str | None, str]) -> None:
    assert split_locale(uri) == expected


def test_primary_language() -> None:
    assert [primary_language(t) for t in ("de", "pt-BR", "zh_Hans", "EN", "", "1x", None, 3, "deutsch")] == [
        "de", "pt", "zh", "en", None, None, None, None, None,
    ]  # fmt: skip


# ------------------------------------------------------------------------------- LanguageAwareRetriever


async def test_one_translation_per_page_in_the_askers_language_even_when_it_scored_lower() -> None:
    inner = Fixed([
        ("en-a", 10.0, page("/en/docs/a", "en")),
        ("en-b", 6.0, page("/en/docs/b", "en")),
        ("de-a", 2.0, page("/de/docs/a", "de")),
        ("es-a", 9.0, page("es/docs/a", "es")),  # no leading slash: the same page
        ("c", 0.0, page("/docs/c", "en")),
    ])  # fmt: skip
    out = await LanguageAwareRetriever(retriever=inner, detector=WordDetector()).retrieve("wie ist das?", k=10)
    assert [d.id for d in out] == ["de-a", "en-b", "c"]
    # page a ranks where its best translation would (en-a: 1.0 * 0.8), shown in German
    assert out[0].score == pytest.approx(0.8)
    assert out[1].score == pytest.approx(0.6 * 0.8)
    assert [d.metadata["language"] for d in out] == ["de", "en", "en"]
    assert out[0].metadata["branches"] == {"first_stage": {"score": 2.0, "rank": 2}}
    assert [d.rank for d in out] == [0, 1, 2]


async def test_without_the_askers_translation_the_best_translation_is_kept() -> None:
    inner = Fixed([("en-a", 10.0, page("/en/docs/a", "en")), ("es-a", 9.0, page("/es/docs/a", "es")),
                   ("de-b", 1.0, page("/de/docs/b", "de"))])  # fmt: skip
    out = await LanguageAwareRetriever(retriever=inner, detector=WordDetector()).retrieve("wie ist das?", k=10)
    assert [d.id for d in out] == ["en-a", "de-b"]


async def test_other_languages_yield_to_similar_but_not_to_much_weaker_results() -> None:
    # normalised: en-top 1.0 -> 0.8 (English, the question is German); de-close 0.85; de-weak 0.7; floor 0
    inner = Fixed([
        ("en-top", 100.0, page("/en/x", "en")),
        ("de-close", 85.0, page("/de/y", "de")),
        ("de-weak", 70.0, page("/de/z", "de")),
        ("floor", 0.0, page("/de/w", "de")),
    ])  # fmt: skip
    out = await LanguageAwareRetriever(retriever=inner, detector=WordDetector()).retrieve("wer ist das?", k=10)
    assert [d.id for d in out] == ["de-close", "en-top", "de-weak", "floor"]
    assert [d.score for d in out] == pytest.approx([0.85, 0.8, 0.7, 0.0])
    neutral = LanguageAwareRetriever(retriever=inner, detector=WordDetector(), other_language_weight=1.0)
    assert [d.id for d in await neutral.retrieve("wer ist das?", k=10)][:2] == ["en-top", "de-close"]


async def test_metadata_language_wins_then_detection_then_the_locale_segment() -> None:
    detector = WordDetector()
    inner = Fixed([
        ("tagged", 3.0, page("/docs/t", "de", content="the english words")),
        ("detected", 2.0, page("/docs/d", content="the english words")),
        ("by-locale", 1.0, page("/de/docs/l", content="12345")),
        ("unknown", 0.5, page("/docs/u", content="12345")),
    ])  # fmt: skip
    out = await LanguageAwareRetriever(retriever=inner, detector=detector).retrieve("how is it?", k=10)
    assert {d.id: d.metadata["language"] for d in out} == {
        "tagged": "de", "detected": "en", "by-locale": "de", "unknown": None,
    }  # fmt: skip
    # the tagged document was not run through the detector (same text as "detected", asked about once)
    assert sum(c == "the english words" for c in detector.calls) == 1


async def test_chunks_of_the_kept_translation_stay_and_the_others_go() -> None:
    inner = Fixed([
        ("en-a#0", 10.0, page("/en/docs/a", "en")),
        ("de-a#0", 8.0, page("/de/docs/a", "de")),
        ("en-a#1", 6.0, page("/en/docs/a", "en")),
        ("de-a#1", 1.0, page("/de/docs/a", "de")),
    ])  # fmt: skip
    retriever = LanguageAwareRetriever(retriever=inner, detector=WordDetector())
    assert [d.id for d in await retriever.retrieve("wie ist das?")] == ["de-a#0", "de-a#1"]
    assert [d.id for d in await retriever.retrieve("how is it?")] == ["en-a#0", "en-a#1"]


async def test_documents_without_source_uri_are_pages_of_their_own_and_k_cuts() -> None:
    inner = Fixed([(f"n{i}", 10.0 - i, {"language": "en"}) for i in range(6)])
    out = await LanguageAwareRetriever(retriever=inner, detector=WordDetector(), candidate_k=4).retrieve("how?", k=3)
    assert [d.id for d in out] == ["n0", "n1", "n2"]
    assert inner.asked == [4]
    await LanguageAwareRetriever(retriever=inner, detector=WordDetector(), candidate_k=4).retrieve("how?", k=5)
    assert inner.asked[-1] == 5


async def test_explicit_language_skips_detection_and_unknown_question_language_weighs_nothing() -> None:
    inner = Fixed([("en", 10.0, page("/en/p", "en")), ("de", 9.0, page("/de/q", "de"))])
    detector = WordDetector()
    out = await LanguageAwareRetriever(retriever=inner, detector=detector).retrieve("???", k=5, language="de")
    assert [d.id for d in out] == ["de", "en"] and "???" not in detector.calls
    out = await LanguageAwareRetriever(retriever=inner, detector=detector).retrieve("???", k=5)  # undetectable
    assert [d.id for d in out] == ["en", "de"]
    assert [d.score for d in out] == [1.0, 0.9]  # non-negative scores: divided by the best


async def test_negative_scores_are_min_max_normalised() -> None:
    inner = Fixed([("a", 0.5, page("/en/a", "en")), ("b", 0.0, page("/en/b", "en")), ("c", -0.5, page("/en/c", "en"))])
    out = await LanguageAwareRetriever(retriever=inner, detector=WordDetector()).retrieve("how?", k=5)
    assert [d.score for d in out] == [1.0, 0.5, 0.0]


async def test_missing_scores_fall_back_to_positions() -> None:
    inner = Fixed([("a", 1.0, page("/en/a", "en")), ("b", 1.0, page("/en/b", "en"))])
    inner.docs = [Document(id=d.id, content=d.content, metadata={**d.metadata, "score": None}) for d in inner.docs]
    out = await LanguageAwareRetriever(retriever=inner, detector=WordDetector()).retrieve("how?", k=5)
    assert [d.id for d in out] == ["a", "b"] and [d.score for d in out] == [1.0, 0.5]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"other_language_weight": -0.1},
        {"other_language_weight": 1.5},
        {"other_language_weight": float("nan")},
        {"other_language_weight": True},
        {"candidate_k": 0},
        {"trust_confidence": 1.5},
        {"trust_confidence": True},
        {"plausible_confidence": -0.1},
        {"plausible_confidence": float("nan")},
        {"trust_confidence": 0.5, "plausible_confidence": 0.6},
        {"min_matched_words": 0},
        {"min_matched_words": 1.5},
        {"min_matched_words": True},
        {"detector": object()},
        {"retriever": object()},
    ],
)
def test_invalid_construction(kwargs: dict[str, Any]) -> None:
    args: dict[str, Any] = {"retriever": Fixed([]), "detector": WordDetector(), **kwargs}
    with pytest.raises(InvalidParameterError):
        LanguageAwareRetriever(**args)


async def test_invalid_calls_are_refused_before_searching() -> None:
    inner = Fixed([("a", 1.0, page("/en/a", "en"))])
    retriever = LanguageAwareRetriever(retriever=inner, detector=WordDetector())
    for kwargs in ({"k": 0}, {"language": "???"}, {"language": 5}):
        with pytest.raises(InvalidParameterError):
            await retriever.retrieve("q", **kwargs)
    with pytest.raises(InvalidParameterError):
        await retriever.retrieve("  ")
    assert inner.asked == []


def test_fake_detector_satisfies_the_protocol() -> None:
    assert isinstance(WordDetector(), LanguageDetector)
    assert not isinstance(WordDetector(), SupportsLanguageConfidence)
    assert isinstance(MarkerConfidences(), LanguageDetector) and isinstance(MarkerConfidences(), SupportsLanguageConfidence)


# ------------------------------------------------------------------ deciding the question's language


def magazine_pages(*, with_german: bool = True) -> Fixed:
    rows = [("en-enr", 10.0, page("/en/mag/enr", "en", content="Engineering News-Record is the magazine of the trade"))]
    if with_german:
        rows.append(("de-enr", 8.0, page("/de/mag/enr", "de", content="Engineering News-Record ist eine Zeitschrift")))
    rows.append(("en-other", 5.0, page("/en/mag/other", "en", content="Another magazine")))
    return Fixed(rows)


async def test_words_the_translations_share_do_not_decide_the_language() -> None:
    # "wer ist" is German, the three name words read as English: 3 to 2 for English on the whole question
    question = "Wer ist Engineering News-Record?"
    detector = MarkerConfidences()
    assert detector.detect(question) == "en"
    retriever = LanguageAwareRetriever(retriever=magazine_pages(), detector=detector)
    out = await retriever.retrieve(question, k=5)
    # both translations of the page were candidates: the name is neutral, "wer ist" decides
    assert [d.id for d in out] == ["de-enr", "en-other"]
    assert all(d.metadata[QUERY_LANGUAGE] == {"language": "de", "decided_by": "confident"} for d in out)
    decision = await retriever.decide_language(question, candidates=await magazine_pages().retrieve(question))
    assert decision.language == "de" and decision.decided_by == "confident"
    assert decision.neutral_words == ("engineering", "news", "record")
    assert decision.text.split() == ["Wer", "ist", "-", "?"]
    assert decision.confidences == {"de": 1.0, "en": 0.0}
    assert decision.best_positions == {"en": 0, "de": 1}
    # with one translation only, nothing is shared: the whole question is read, and it reads as English
    alone = LanguageAwareRetriever(retriever=magazine_pages(with_german=False), detector=MarkerConfidences())
    out = await alone.retrieve(question, k=5)
    assert out[0].metadata[QUERY_LANGUAGE] == {"language": "en", "decided_by": "likeliest"}  # 0.6 < 0.8


async def test_a_question_of_shared_words_only_is_read_whole() -> None:
    detector = MarkerConfidences()
    retriever = LanguageAwareRetriever(retriever=magazine_pages(), detector=detector)
    decision = await retriever.decide_language("Engineering News-Record", candidates=await magazine_pages().retrieve("x"))
    assert detector.asked == ["Engineering News-Record"]
    assert decision.text == "Engineering News-Record" and decision.neutral_words == ()
    assert decision.language == "en"


def two_translations(first: str, second: str) -> Fixed:
    return Fixed([(f"{first}-a", 10.0, page(f"/{first}/a", first)), (f"{second}-a", 9.5, page(f"/{second}/a", second)),
                  ("en-b", 5.0, page("/en/b", "en"))])  # fmt: skip


async def test_an_unsure_detector_lets_the_best_ranked_plausible_translation_decide() -> None:
    unsure = MarkerConfidences({"de": 0.55, "en": 0.45})
    retriever = LanguageAwareRetriever(retriever=two_translations("en", "de"), detector=unsure)
    out = await retriever.retrieve("q", k=5)
    assert [d.id for d in out] == ["en-a", "en-b"]
    assert out[0].metadata[QUERY_LANGUAGE] == {"language": "en", "decided_by": "ranked"}
    # the German translation ranks first: German
    out = await LanguageAwareRetriever(retriever=two_translations("de", "en"), detector=unsure).retrieve("q", k=5)
    assert [d.id for d in out] == ["de-a", "en-b"] and out[0].metadata[QUERY_LANGUAGE]["decided_by"] == "ranked"
    # English below plausible_confidence may not be chosen by the ranking
    strict = LanguageAwareRetriever(retriever=two_translations("en", "de"), detector=unsure, plausible_confidence=0.5)
    out = await strict.retrieve("q", k=5)
    assert [d.id for d in out] == ["de-a", "en-b"] and out[0].metadata[QUERY_LANGUAGE]["decided_by"] == "ranked"
    # no page with several languages among the candidates: the likeliest language
    single = Fixed([("en-a", 10.0, page("/en/a", "en")), ("de-b", 9.0, page("/de/b", "de"))])
    out = await LanguageAwareRetriever(retriever=single, detector=unsure).retrieve("q", k=5)
    assert out[0].metadata[QUERY_LANGUAGE] == {"language": "de", "decided_by": "likeliest"}
    assert [d.id for d in out] == ["de-b", "en-a"]  # en-a weighted by 0.8 < 0.9


async def test_a_confident_detector_is_trusted_over_the_ranking() -> None:
    sure = MarkerConfidences({"de": TRUST_CONFIDENCE, "en": 1 - TRUST_CONFIDENCE})
    out = await LanguageAwareRetriever(retriever=two_translations("en", "de"), detector=sure).retrieve("q", k=5)
    assert [d.id for d in out][0] == "de-a"
    assert out[0].metadata[QUERY_LANGUAGE] == {"language": "de", "decided_by": "confident"}
    # trust_confidence 1: the ranking decides among the plausible languages
    never = LanguageAwareRetriever(retriever=two_translations("en", "de"), detector=sure, trust_confidence=1.0)
    assert (await never.retrieve("q", k=5))[0].metadata[QUERY_LANGUAGE] == {"language": "en", "decided_by": "ranked"}
    # trust_confidence 0: the detector always decides
    unsure = MarkerConfidences({"de": 0.55, "en": 0.45})
    always = LanguageAwareRetriever(
        retriever=two_translations("en", "de"), detector=unsure, trust_confidence=0.0, plausible_confidence=0.0
    )
    assert (await always.retrieve("q", k=5))[0].metadata[QUERY_LANGUAGE] == {"language": "de", "decided_by": "confident"}


async def test_no_confidence_at_all_is_an_unknown_language_that_weighs_nothing() -> None:
    nothing = MarkerConfidences({"de": 0.0, "en": 0.0})
    out = await LanguageAwareRetriever(retriever=two_translations("en", "de"), detector=nothing).retrieve("q", k=5)
    assert [d.id for d in out] == ["en-a", "en-b"]  # the best translation; no weighting
    assert [d.score for d in out] == [1.0, 0.5]
    assert out[0].metadata[QUERY_LANGUAGE] == {"language": None, "decided_by": "unknown"}


async def test_a_detector_without_confidences_reads_the_question_without_shared_words() -> None:
    detector = WordDetector()  # "is" and "the" make it English, "wer" and "der" German
    inner = Fixed([
        ("en-a", 10.0, page("/en/a", "en", content="the Super Bowl is in the news")),
        ("de-a", 8.0, page("/de/a", "de", content="the Super Bowl wer der")),
    ])  # fmt: skip
    out = await LanguageAwareRetriever(retriever=inner, detector=detector).retrieve("who is the Super Bowl", k=5)
    # "the" is shared by both translations: "who is" decides
    assert out[0].metadata[QUERY_LANGUAGE] == {"language": "en", "decided_by": "detected"}
    assert "who is" in detector.calls[-1] and "the" not in detector.calls[-1].split()
    decision = await LanguageAwareRetriever(retriever=inner, detector=detector).decide_language(
        "who is the Super Bowl", candidates=inner.docs
    )
    assert decision.confidences == {} and decision.neutral_words == ("the", "super", "bowl")


async def test_an_explicit_language_is_stamped_as_given() -> None:
    detector = MarkerConfidences()
    retriever = LanguageAwareRetriever(retriever=two_translations("en", "de"), detector=detector)
    out = await retriever.retrieve("who is it?", k=5, language="de-AT")
    assert [d.id for d in out] == ["de-a", "en-b"]
    assert {d.metadata[QUERY_LANGUAGE]["decided_by"] for d in out} == {"given"}
    assert out[0].metadata[QUERY_LANGUAGE]["language"] == "de"
    assert detector.asked == []
    decision = await retriever.decide_language("who is it?", candidates=[], language="de")
    assert decision == LanguageDecision("de", "given")


async def test_decide_language_refuses_bad_arguments() -> None:
    retriever = LanguageAwareRetriever(retriever=Fixed([]), detector=MarkerConfidences())
    for candidates in ("text", [object()], None):
        with pytest.raises(InvalidParameterError, match="candidates"):
            await retriever.decide_language("who?", candidates=candidates)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError):
        await retriever.decide_language("who?", candidates=[], language="???")
    with pytest.raises(InvalidParameterError):
        await retriever.decide_language("  ", candidates=[])


def test_language_decision_is_frozen_and_its_defaults_are_documented_constants() -> None:
    decision = LanguageDecision("de", "confident", confidences={"de": 0.9, "en": 0.1})
    with pytest.raises(AttributeError):
        decision.language = "en"  # type: ignore[misc]
    with pytest.raises(TypeError):
        decision.confidences["de"] = 0.0  # type: ignore[index]
    assert decision.stamp() == {"language": "de", "decided_by": "confident"}
    retriever = LanguageAwareRetriever(retriever=Fixed([]), detector=WordDetector())
    assert (retriever.trust_confidence, retriever.plausible_confidence) == (TRUST_CONFIDENCE, PLAUSIBLE_CONFIDENCE)
    assert 0.0 < PLAUSIBLE_CONFIDENCE < TRUST_CONFIDENCE < 1.0
    assert retriever.min_matched_words == MIN_MATCHED_WORDS == 2
    assert decision.matched_words == {}
    with pytest.raises(TypeError):
        LanguageDecision("de", "matched", matched_words={"de": 2}).matched_words["de"] = 0  # type: ignore[index]


# ------------------------------------------------------------------- the translations' text as evidence


def son_pages(english: str = "Temujin and his wife had a first son; his name was Jochi") -> Fixed:
    """One page in German (ranked first) and English, sharing the name words; and another German page."""
    return Fixed([
        ("de-gk", 10.0, page("/de/gk", "de", content="Temüdschin und Börte bekamen Jochi")),
        ("en-gk", 9.0, page("/en/gk", "en", content=english)),
        ("de-other", 5.0, page("/de/other", "de", content="Ein anderer Text")),
    ])  # fmt: skip


async def test_the_translation_holding_the_questions_words_decides_over_a_confident_detector() -> None:
    question = "What was the name of Temujin's first son?"
    misread = MarkerConfidences({"de": 0.9, "en": 0.1})  # confident, and wrong
    retriever = LanguageAwareRetriever(retriever=son_pages(), detector=misread)
    out = await retriever.retrieve(question, k=5)
    assert [d.id for d in out] == ["en-gk", "de-other"]  # the English version of the page, not the German
    assert out[0].metadata[QUERY_LANGUAGE] == {"language": "en", "decided_by": "matched"}
    decision = await retriever.decide_language(question, candidates=son_pages().docs)
    # only "jochi" is in both translations (German spells Temüdschin); of the question's other words the
    # English translation holds was, name, temujin, first, son; the German none
    assert decision.neutral_words == ()  # "jochi" is not in the question: the detector read it whole
    assert decision.matched_words == {"en": 5, "de": 0}
    # off: the confident detector decides
    off = LanguageAwareRetriever(retriever=son_pages(), detector=misread, min_matched_words=100)
    assert (await off.retrieve(question, k=5))[0].metadata[QUERY_LANGUAGE] == {"language": "de", "decided_by": "confident"}


async def test_one_matched_word_is_not_enough_and_a_tie_decides_nothing() -> None:
    question = "What was the name of Temujin's first son?"
    misread = MarkerConfidences({"de": 0.9, "en": 0.1})
    # the English translation holds only "son": a false friend is as likely, the detector decides
    one = LanguageAwareRetriever(retriever=son_pages("Jochi, son"), detector=misread)
    decision = await one.decide_language(question, candidates=son_pages("Jochi, son").docs)
    assert decision.matched_words == {"en": 1, "de": 0}
    assert decision.decided_by == "confident" and decision.language == "de"
    out = await one.retrieve(question, k=5)
    assert out[0].metadata[QUERY_LANGUAGE] == {"language": "de", "decided_by": "confident"}
    # the German translation holds as many of the question's words as the English one: no decision by text
    tied = Fixed([
        ("de-gk", 10.0, page("/de/gk", "de", content="Temüdschin, what was")),
        ("en-gk", 9.0, page("/en/gk", "en", content="Temujin, first")),
    ])  # fmt: skip
    decision = await LanguageAwareRetriever(retriever=tied, detector=misread).decide_language(
        question, candidates=tied.docs
    )
    assert decision.matched_words == {"en": 2, "de": 2} and decision.decided_by == "confident"


async def test_a_language_the_detector_rules_out_is_not_decided_by_the_text() -> None:
    question = "What was the name of Temujin's first son?"
    ruled_out = MarkerConfidences({"de": 1.0, "en": 0.0})
    out = await LanguageAwareRetriever(retriever=son_pages(), detector=ruled_out).retrieve(question, k=5)
    assert out[0].metadata[QUERY_LANGUAGE] == {"language": "de", "decided_by": "confident"}


async def test_an_unsure_detector_follows_the_translation_with_the_questions_function_words() -> None:
    # the English translation ranks first (the first stage analysed the question in English), but only the
    # German one holds "wer ist der": German, not the ranking's English
    question = "Wer ist der General Manager der Broncos?"
    pages = Fixed([
        ("en-sb", 10.0, page("/en/sb", "en", content="The general manager of the Broncos is John Elway")),
        ("de-sb", 9.0, page("/de/sb", "de", content="Der General Manager der Broncos ist John Elway")),
        ("en-other", 5.0, page("/en/other", "en", content="Something else")),
    ])  # fmt: skip
    unsure = MarkerConfidences({"de": 0.56, "en": 0.3, "es": 0.14})
    retriever = LanguageAwareRetriever(retriever=pages, detector=unsure)
    decision = await retriever.decide_language(question, candidates=pages.docs)
    assert decision.neutral_words == ("general", "manager", "broncos")
    assert decision.matched_words == {"de": 2, "en": 0}  # "ist", "der" ("wer" is in neither)
    assert (decision.language, decision.decided_by) == ("de", "matched")
    out = await retriever.retrieve(question, k=5)
    assert [d.id for d in out] == ["de-sb", "en-other"]
    # without the text evidence, the ranking decides: English
    off = LanguageAwareRetriever(retriever=pages, detector=unsure, min_matched_words=100)
    assert (await off.retrieve(question, k=5))[0].metadata[QUERY_LANGUAGE] == {"language": "en", "decided_by": "ranked"}


async def test_chinese_questions_are_matched_by_character_bigrams() -> None:
    question = "谁是球队的总经理?"
    pages = Fixed([
        ("en-sb", 10.0, page("/en/sb", "en", content="The general manager of the team")),
        ("zh-sb", 9.0, page("/zh/sb", "zh", content="该球队的总经理是埃尔维")),
    ])  # fmt: skip
    unsure = MarkerConfidences({"en": 0.6, "zh": 0.4})
    decision = await LanguageAwareRetriever(retriever=pages, detector=unsure).decide_language(
        question, candidates=pages.docs
    )
    # bigrams of the question found in the Chinese text: 球队, 队的, 的总, 总经, 经理
    assert decision.matched_words == {"zh": 5, "en": 0}
    assert (decision.language, decision.decided_by) == ("zh", "matched")


# ------------------------------------------------------------------------------------ multilingual BM25


def test_analyzer_for_language() -> None:
    english = Analyzer()
    assert english.for_language(None) is english and english.for_language("en-GB") is english
    assert english.for_language("de").analyze("Häuser") == ["haus"]
    assert english.analyze("Häuser") == ["häuser"]
    assert english.for_language("ru").analyze("Москвы") == english.for_language("ru").analyze("Москва")
    assert english.for_language("zh").analyze("超级碗 running") == ["超级", "级碗", "超", "级", "碗", "running"]
    assert english.for_language("nb").language == "no"
    assert Analyzer(stem=False).for_language("de").analyze("Häuser") == ["häuser"]  # settings carry over


async def test_documents_are_stemmed_in_their_language_and_queries_in_theirs() -> None:
    async with SQLiteVectorStore(":memory:") as store:
        await store.upsert([
            Document(id="de", content="Die Häuser am Fluss", metadata={"language": "de"}),
            Document(id="ru", content="Улицы Москвы", metadata={"language": "ru"}),
            Document(id="en", content="Running water in the houses"),
        ])  # fmt: skip
        # German stemming on both sides: "Haus" and "Häuser" share the stem "haus"
        assert [d.id for d in await store.search_text("Haus", k=5, language="de")] == ["de"]
        assert [d.id for d in await store.search_text("Häuser", k=5, language="de")] == ["de"]
        # English analysis of the question ("häuser") misses the German stem; without a language the
        # question is analysed in each language the store holds (issue 14), German included
        assert await store.search_text("Häuser", k=5, language="en") == []
        assert [d.id for d in await store.search_text("Häuser", k=5)] == ["de"]
        assert [d.id for d in await store.search_text("Москва", k=5, language="ru")] == ["ru"]
        # documents without a language: English, as before
        assert [d.id for d in await store.search_text("runs", k=5)] == ["en"]
        assert [d.id for d in await store.search_text("house", k=5)] == ["en"]
        with pytest.raises(InvalidParameterError):
            await store.search_text("x", k=5, language=3)  # type: ignore[arg-type]


async def test_chinese_documents_are_segmented_without_stemming() -> None:
    async with SQLiteVectorStore(":memory:") as store:
        await store.upsert([Document(id="zh", content="超级碗是美国国家橄榄球联盟的年度冠军赛", metadata={"language": "zh"}),
                            Document(id="en", content="the super bowl")])  # fmt: skip
        assert [d.id for d in await store.search_text("超级碗在哪里举行", k=5, language="zh")] == ["zh"]


async def test_a_store_from_before_per_language_analysis_keeps_its_analysis(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    async with SQLiteVectorStore(path) as store:
        store._per_language = False  # write as fastrag did before per-language analysis
        await store.upsert([Document(id="de", content="Häuser", metadata={"language": "de"})])
    with sqlite3.connect(path) as conn:  # as a file written before the setting existed
        conn.execute("DELETE FROM meta WHERE key = 'language_analysis'")
    async with SQLiteVectorStore(path) as store:
        assert store._per_language is False
        await store.upsert([Document(id="de2", content="Häuser", metadata={"language": "de"})])
        assert {d.id for d in await store.search_text("Häuser", k=5, language="de")} == {"de", "de2"}
    fresh = tmp_path / "new.db"
    async with SQLiteVectorStore(fresh) as store:
        await store.upsert([Document(id="x", content="plain")])
    with sqlite3.connect(fresh) as conn:  # a file without the setting but without languages: safe to upgrade
        conn.execute("DELETE FROM meta WHERE key = 'language_analysis'")
    async with SQLiteVectorStore(fresh) as store:
        assert store._per_language is True


async def test_bm25_retriever_passes_the_language_or_the_detected_one() -> None:
    async with SQLiteVectorStore(":memory:") as store:
        await store.upsert([Document(id="de", content="Die Häuser am Fluss", metadata={"language": "de"})])
        assert await BM25Retriever(store=store, language="en").retrieve("wie ist das Häuser") == []
        # no language: analysed in the store's languages (here German only), not as English
        assert [d.id for d in await BM25Retriever(store=store).retrieve("wie ist das Häuser")] == ["de"]
        assert [d.id for d in await BM25Retriever(store=store, language="de").retrieve("Häuser")] == ["de"]
        detector = WordDetector()
        assert [d.id for d in await BM25Retriever(store=store, detector=detector).retrieve("wie ist das Häuser")] == ["de"]
        assert detector.calls == ["wie ist das Häuser"]
        retrying = RetryingStore(store)  # a wrapper forwarding **kwargs accepts language= too
        assert [d.id for d in await BM25Retriever(store=retrying, language="de").retrieve("Häuser")] == ["de"]


def test_bm25_retriever_refuses_language_for_a_store_without_it() -> None:
    with pytest.raises(InvalidParameterError, match="language"):
        BM25Retriever(store=InMemoryStore(), language="de")
    with pytest.raises(InvalidParameterError, match="language"):
        BM25Retriever(store=InMemoryStore(), detector=WordDetector())
    with pytest.raises(InvalidParameterError):
        BM25Retriever(store=InMemoryStore(), language="not a code")
    BM25Retriever(store=InMemoryStore())  # without either: any LexicalStore


async def test_pages_of_a_language_aware_retriever_join_into_the_top() -> None:
    """Pagination (issue 18.1): page 1 + page 2 == the top 2 * size, ranks kept."""
    inner = Fixed([(f"d{i}", 10.0 - i, page(f"/en/docs/{i}", "en")) for i in range(8)])
    retriever = LanguageAwareRetriever(retriever=inner, detector=WordDetector())
    top = await retriever.retrieve("how is it?", k=6)
    pages = await retriever.retrieve("how is it?", k=3) + await retriever.retrieve("how is it?", k=3, offset=3)
    assert [d.id for d in pages] == [d.id for d in top] and [d.rank for d in pages] == list(range(6))
