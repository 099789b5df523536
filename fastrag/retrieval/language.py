"""Language-aware retrieval for sites that serve each page in several languages.

Return each page once, in the asker's language when that translation was retrieved, and prefer results in
the asker's language over similar results in other languages, but not over much better ones. The asker's
language is decided from the candidate translations' own text when one of them clearly holds the question's
words, else from the detector's confidence on the words of the question that tell languages apart, and,
when the detector is unsure, from which translation the first stage ranked best
(:meth:`LanguageAwareRetriever.decide_language`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Real
from types import MappingProxyType
from typing import Any, Literal
from urllib.parse import urlsplit

import anyio.to_thread

from fastrag.analysis import CJK_RANGES, Analyzer, language_code, primary_language
from fastrag.errors import InvalidParameterError
from fastrag.filters import FilterLike, combine_filters
from fastrag.language import ISO_639_1
from fastrag.models import LANGUAGE, SCORE, SOURCE_URI, Document
from fastrag.protocols import LanguageDetector, Retriever, SupportsLanguageConfidence
from fastrag.retrieval._validation import check_k, check_positive_int, check_query, fetch_limit
from fastrag.retrieval.limits import DEFAULT_LIMITS, RetrievalLimits
from fastrag.retrieval.pagination import check_offset
from fastrag.retrieval._provenance import finite_score, provenance, with_provenance
from fastrag.retrieval.reranking import FIRST_STAGE
from fastrag.retrieval.result import ReturnsResult, stage, timed

__all__ = [
    "MIN_MATCHED_WORDS",
    "PLAUSIBLE_CONFIDENCE",
    "QUERY_LANGUAGE",
    "TRUST_CONFIDENCE",
    "LanguageAwareRetriever",
    "LanguageDecision",
    "split_locale",
]

# A locale path segment: an ISO 639-1 code, optionally with script/region subtags: en, de-AT, pt_BR, zh-Hans.
_LOCALE = re.compile(r"^([A-Za-z]{2})(?:[-_][A-Za-z0-9]{2,8})*$")
# A word, for telling language-neutral words apart: a run of CJK characters (which have no spaces between
# words), or a run of other letters and digits (the tokens of fastrag.analysis, before stemming).
_WORD = re.compile(rf"[{CJK_RANGES}]+|[^\W_{CJK_RANGES}]+")
# Surface terms, for finding the question's words in a translation: lower-cased words, CJK character bigrams
# (and, in documents, single characters), no stemming, no stopword removal: function words ("wer ist der",
# "what was the") are the evidence.
_SURFACE = Analyzer(None, stem=False, stopwords=False)

QUERY_LANGUAGE = "query_language"
"""The metadata key stamped on every document :class:`LanguageAwareRetriever` returns: how the question's
language was decided, ``{"language": "de" or None, "decided_by": ...}`` (see :class:`LanguageDecision`)."""

TRUST_CONFIDENCE = 0.8
"""Default ``trust_confidence``: a detector confidence at or above which the detected language is taken as is.

Measured with Lingua on XQuAD's questions in five languages (``docs/multilingual.md``), read without the
words their candidate translations share: 97.3% of the questions get a confidence of at least 0.8, and
then the language is right 99.97% of the time (2 errors in 5,788); below 0.8 the likeliest language is
right 95.7% of the time (155 of 162) and the ranking rule 98.1% (159). With the matched-words rule
(:data:`MIN_MATCHED_WORDS`) before it, thresholds of 0.7 and 0.8 leave none of the 5,950 questions without
their own-language version, 0.5 to 1.0 at most 3 (without that rule: 3 at 0.8; with Lingua's label alone:
45).
"""

PLAUSIBLE_CONFIDENCE = 0.1
"""Default ``plausible_confidence``: below ``trust_confidence``, the languages with at least this confidence
are the ones the retrieval evidence may choose between. With five languages, 0.1 is half the uniform 0.2: a
language the detector all but rules out is not chosen because one of its translations ranked first."""

MIN_MATCHED_WORDS = 2
"""Default ``min_matched_words``: how many of the question's distinctive words (those its candidate
translations do not share) one translation must contain, and more than any translation in another
language the detector does not rule out, for the translations' text to decide the question's language
(``"matched"``).

Two, because one word is too often a false friend: German ``war`` and ``was`` are English words, Spanish
``son`` is one, ``die`` is both German and English; two such coincidences in one translation, and none
matched as often in the question's own language, are rare. Measured on XQuAD's 5,950 questions
(``docs/multilingual.md``): with 2 the rule decides 1,764 questions and is right on every one; with 1 it
decides 2,017 and is wrong on 4 (``Was war Huihui?``: ``war`` is in the English translation only); with
3 it decides 1,404, all right, but leaves two of the questions it exists for to the detector.
"""

DecidedBy = Literal["given", "matched", "confident", "ranked", "likeliest", "detected", "unknown"]


def split_locale(source_uri: str) -> tuple[str | None, str]:
    """Split a leading locale segment off a ``source_uri``: ``(language, page key)``.

    The first path segment is a locale when it is an ISO 639-1 code (any case), optionally followed by
    subtags (``en``, ``de-AT``, ``pt_BR``, ``zh-Hans``). The page key is the URI without that segment and
    without a leading slash, so ``/docs/a``, ``/en/docs/a``, ``/de/docs/a``, ``en/docs/a`` and ``docs/a``
    all have the key ``"docs/a"``. For a URL with a scheme and host, the segment is looked for at the start
    of the path, and the key keeps scheme, host and query: ``https://x.org/de/a?v=2`` ->
    ``("de", "https://x.org/a?v=2")``.

    Returns:
        The locale's language (lower case ISO 639-1) or ``None`` when there is no locale segment, and the
        page key.
    """
    parts = urlsplit(source_uri) if "://" in source_uri else None
    path = parts.path if parts is not None else source_uri
    segments = path.lstrip("/").split("/")
    language = None
    if len(segments) > 1:
        match = _LOCALE.match(segments[0])
        if match and match.group(1).lower() in ISO_639_1:
            language = match.group(1).lower()
            segments = segments[1:]
    key = "/".join(segments)
    if parts is not None:
        key = f"{parts.scheme}://{parts.netloc}/{key}" + (f"?{parts.query}" if parts.query else "")
    return language, key


@dataclass(frozen=True, slots=True)
class LanguageDecision:
    """How :class:`LanguageAwareRetriever` decided which language a question is in.

    Attributes:
        language: the question's language (ISO 639-1, lower case), or ``None`` when nothing could tell.
        decided_by: which rule decided it. ``"given"``: the caller passed ``language=``. ``"matched"``: of
            the languages the detector does not rule out (confidence above 0), one's candidate on a page
            with candidates in several languages contains at least ``min_matched_words`` of the question's
            distinctive words, and more than any other such language's (see ``matched_words``).
            ``"confident"``: no language did, and the detector's top confidence on ``text`` was at least
            ``trust_confidence``. ``"ranked"``: neither; of the plausible languages (confidence at least
            ``plausible_confidence``), the one whose translation of a page the first stage ranked best,
            among pages with candidates in several languages. ``"likeliest"``: as ``"ranked"``, but no plausible language had such a
            translation, so the detector's likeliest language. ``"detected"``: the detector has no
            confidences (not a :class:`~fastrag.protocols.SupportsLanguageConfidence`): its answer for
            ``text``. ``"unknown"``: the detector could not tell (``language`` is ``None``).
        confidences: the detector's ``{language: confidence}`` for ``text``, each in [0, 1], best first;
            empty for ``"given"`` and ``"detected"``.
        text: what the detector read: the question with its language-neutral words blanked out, or the
            question itself when none were found (or nothing but them); empty for ``"given"``.
        neutral_words: the question's language-neutral words (case-folded, in question order): words that
            occur in the translations of one page in at least two languages among the candidates (names,
            numbers, terms the translations share), which therefore cannot tell those languages apart.
        best_positions: for each language, the zero-based first-stage position of its best-ranked candidate
            on a page with candidates in several languages (the evidence ``"ranked"`` uses).
        matched_words: for each language with a candidate on a page with candidates in several languages,
            the most distinct words of the question, neutral words aside, that one such candidate of that
            language contains (surface forms: case-folded, not stemmed, stopwords kept; CJK text as
            character bigrams, a lone character as itself); the evidence ``"matched"`` uses. Empty for
            ``"given"``.
    """

    language: str | None
    decided_by: DecidedBy
    confidences: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    text: str = ""
    neutral_words: tuple[str, ...] = ()
    best_positions: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    matched_words: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "confidences", MappingProxyType(dict(self.confidences)))
        object.__setattr__(self, "neutral_words", tuple(self.neutral_words))
        object.__setattr__(self, "best_positions", MappingProxyType(dict(self.best_positions)))
        object.__setattr__(self, "matched_words", MappingProxyType(dict(self.matched_words)))

    def stamp(self) -> dict[str, Any]:
        """The :data:`QUERY_LANGUAGE` metadata value: ``{"language": ..., "decided_by": ...}``."""
        return {"language": self.language, "decided_by": self.decided_by}


class LanguageAwareRetriever(ReturnsResult):
    """Wraps a retriever for a multilingual corpus: one translation per page, the asker's language first.

    For each call:

    1. The wrapped retriever is asked for ``max(candidate_k, k)`` candidates (deduplicated by id).
    2. Each candidate's language is its ``metadata["language"]`` when set (that wins), else
       ``detector.detect(content)``, else the language of its ``source_uri``'s locale segment, else unknown.
    3. The question's language is ``language=`` when given, else decided by :meth:`decide_language`:
       the detector reads the question without its language-neutral words (words that translations of one
       candidate page in two or more languages share: names, numbers); of the languages it does not rule
       out, the one whose candidate translation contains at least ``min_matched_words`` of the question's
       other words, and more than any other's, is taken; else the detector's likeliest language when its
       confidence is at least ``trust_confidence``; else, of the languages with at least
       ``plausible_confidence``, the one whose translation of a page the first stage ranked best.
    4. Scores are normalised to [0, 1] within the candidate list: divided by the best score when no score
       is negative (BM25, RRF, min-max fusion; so comparisons are ratios of the retriever's scores), else
       min-max (``(s - min) / (max - min)``: cosine or z-scores below 0). A candidate without a finite score
       gets 0; equal scores all get 1; when no candidate has a finite score, ``(n - position) / n``. A
       candidate in another language than the question's is then multiplied by ``other_language_weight``;
       one in the question's language, or of unknown language, or any candidate when the question's
       language is unknown, by 1. With the default 0.8 and BM25, an other-language result yields to a
       question-language result scoring at least 80% of its BM25 score, and stays above a weaker one.
    5. Candidates whose ``source_uri`` differs only by a leading locale segment (see :func:`split_locale`)
       are one page. Of each page one translation (one ``source_uri``) is kept: the question's language when
       it was retrieved, else the translation with the best weighted score; chunks of other translations are
       dropped. The page ranks where its best translation would: the kept translation's best chunk gets the
       page's best weighted score. A candidate without ``source_uri`` is a page of its own.
    6. The survivors are sorted by weighted score (ties: first-stage position) and the best ``k`` returned.

    Every returned document is a copy stamped with ``score`` (the weighted score, in [0, 1], higher is
    better), zero-based ``rank``, ``metadata["language"]`` (the language found in step 2, or ``None`` when
    nothing could tell), ``metadata["query_language"]`` (:data:`QUERY_LANGUAGE`: the question's language
    and the rule that decided it, ``{"language": "de", "decided_by": "confident"}``) and
    ``metadata["branches"] = {"first_stage": {"score", "rank"}}`` (the wrapped retriever's score, ``None``
    if not finite, and zero-based position; with its own provenance nested under ``"branches"`` when it
    was fused).

    Args:
        retriever: the wrapped retriever (BM25 with per-language analysis, a hybrid, ...).
        detector: a :class:`~fastrag.protocols.LanguageDetector`, e.g.
            :class:`~fastrag.language.LinguaLanguageDetector`; run in a worker thread. When it is also a
            :class:`~fastrag.protocols.SupportsLanguageConfidence` (Lingua's is), its confidences decide
            with the thresholds below; else its answer for the question without language-neutral words.
        candidate_k: how many candidates to fetch (more lets the asker's translation of a page surface).
        other_language_weight: the factor, in [0, 1], for candidates in another language than the
            question's. 1 ignores language when ranking (a page is still returned once, in the asker's
            language when retrieved); 0 puts every result in the asker's language first.
        trust_confidence: in [0, 1]; a detector confidence at or above which its likeliest language is
            the question's (default :data:`TRUST_CONFIDENCE`, 0.8). 0 always trusts the detector; 1 trusts
            only certain answers (Lingua gives 1.0 when the script settles it, e.g. Cyrillic among five
            languages of which only Russian uses it) and lets the ranking choose otherwise.
        plausible_confidence: in [0, ``trust_confidence``]; below ``trust_confidence``, only languages
            with at least this confidence may be chosen by the ranking (default
            :data:`PLAUSIBLE_CONFIDENCE`, 0.1).
        min_matched_words: a positive int; how many of the question's distinctive words one candidate
            translation must contain (and more than any translation in another language with a confidence
            above 0) to decide the question's language over the detector (default
            :data:`MIN_MATCHED_WORDS`, 2). A value above the number of words in any question (say
            ``limits.max_query_chars``) turns the rule off.
        limits: bounds on ``k`` and the query (default :data:`~fastrag.retrieval.limits.DEFAULT_LIMITS`).

    Raises:
        InvalidParameterError: ``retriever`` lacks ``retrieve``, ``detector`` lacks ``detect``,
            ``candidate_k`` is not a positive int within ``limits.max_k``, ``min_matched_words`` is not a
            positive int, ``other_language_weight``, ``trust_confidence`` or ``plausible_confidence`` is
            not a number in [0, 1], or ``plausible_confidence`` exceeds ``trust_confidence``.
    """

    name = "language_aware"

    def __init__(
        self,
        *,
        retriever: Retriever,
        detector: LanguageDetector,
        candidate_k: int = 40,
        other_language_weight: float = 0.8,
        trust_confidence: float = TRUST_CONFIDENCE,
        plausible_confidence: float = PLAUSIBLE_CONFIDENCE,
        min_matched_words: int = MIN_MATCHED_WORDS,
        limits: RetrievalLimits = DEFAULT_LIMITS,
    ) -> None:
        if not isinstance(limits, RetrievalLimits):
            raise InvalidParameterError(f"limits must be a RetrievalLimits, got {limits!r}")
        if not isinstance(retriever, Retriever):
            raise InvalidParameterError(f"retriever has no retrieve() method: {retriever!r}")
        if not isinstance(detector, LanguageDetector):
            raise InvalidParameterError(f"detector has no detect() method: {detector!r}")
        check_positive_int(candidate_k, "candidate_k", maximum=limits.max_k)
        check_positive_int(min_matched_words, "min_matched_words")
        for name, value in (
            ("other_language_weight", other_language_weight),
            ("trust_confidence", trust_confidence),
            ("plausible_confidence", plausible_confidence),
        ):
            if isinstance(value, bool) or not isinstance(value, Real) or not 0.0 <= float(value) <= 1.0:
                raise InvalidParameterError(f"{name} must be a number in [0, 1], got {value!r}")
        if plausible_confidence > trust_confidence:
            raise InvalidParameterError(
                f"plausible_confidence ({plausible_confidence!r}) must not exceed "
                f"trust_confidence ({trust_confidence!r})"
            )
        self.retriever = retriever
        self.detector = detector
        self.candidate_k = candidate_k
        self.other_language_weight = float(other_language_weight)
        self.trust_confidence = float(trust_confidence)
        self.plausible_confidence = float(plausible_confidence)
        self.min_matched_words = min_matched_words
        self.limits = limits

    async def retrieve(
        self,
        query: str,
        *,
        k: int = 10,
        filter: FilterLike | None = None,  # noqa: A002
        language: str | None = None,
        offset: int = 0,
    ) -> list[Document]:
        """Up to ``k`` documents for ``query``, one translation per page, best first (see the class);
        ``offset`` skips that many (:mod:`fastrag.retrieval.pagination`).

        Args:
            query: the question, as for any retriever.
            k: how many documents at most, as for any retriever.
            filter: a filter, as for any retriever.
            language: the question's language (ISO 639-1); ``None`` decides it (:meth:`decide_language`).

        Raises:
            InvalidParameterError: ``k``, the query or ``language`` is invalid (before any search).
            FilterError: ``filter`` is malformed (before any search).
            Exception: whatever the wrapped retriever or the detector raises, unchanged.
        """
        check_query(query, self.limits)
        check_k(k, self.limits)
        check_offset(offset, k, self.limits)
        _check_language(language)
        node = combine_filters(filter)
        fetch_k = min(max(self.candidate_k, offset + k), fetch_limit(self.retriever, self.limits))
        with timed(FIRST_STAGE), stage(FIRST_STAGE):
            found = await self.retriever.retrieve(query, k=fetch_k, filter=node)
        candidates = _distinct(found)
        if not candidates:
            return []
        with timed("detect"):
            languages = await self._languages(candidates)
            decision = await self._decide(query, candidates, languages, language)
        asked = decision.language
        normalised = _normalised([finite_score(d.metadata.get(SCORE)) for d in candidates])
        weighted = [
            s if asked is None or lang is None or lang == asked else s * self.other_language_weight
            for s, lang in zip(normalised, languages, strict=True)
        ]
        final = self._one_translation_per_page(candidates, languages, weighted, asked)
        final.sort(key=lambda item: (-item[1], item[0]))
        out = []
        for rank, (position, score) in enumerate(final[: offset + k]):
            if rank < offset:
                continue
            doc = candidates[position]
            # a language set on the document is kept as is
            extra: dict[str, Any] = {}
            if primary_language(doc.metadata.get(LANGUAGE)) is None:
                extra[LANGUAGE] = languages[position]
            extra[QUERY_LANGUAGE] = decision.stamp()
            branches = {FIRST_STAGE: provenance(doc, position)}
            out.append(with_provenance(doc, score=score, rank=rank, branches=branches, **extra))
        return out

    async def decide_language(
        self, query: str, *, candidates: Sequence[Document], language: str | None = None
    ) -> LanguageDecision:
        """Which language ``query`` is in, given the first stage's ``candidates`` for it (step 3 of the class).

        The rule, in order:

        1. ``language`` given: that language (``"given"``).
        2. Language-neutral words: the candidates are grouped into pages (:func:`split_locale`); a word of
           the question (a run of letters and digits, or of CJK characters; compared case-folded after
           NFKC) that occurs in the text of a page's candidates in two or more languages is neutral: the
           translations share it (a name, a number, a borrowed term), so it says nothing about which of
           them the question is in, yet it can outweigh the words that do (Lingua weighs scripts by words,
           so ``"Что такое Engineering News-Record?"`` reads as English). The detector reads the question
           with those words blanked out; when none are found, or nothing else is left, the question itself.
        3. A detector without confidences: its answer (``"detected"``).
        4. Else its confidences; ``None`` when all are 0 (``"unknown"``).
        5. The translations' text: the question's distinctive words are its surface terms (case-folded
           words, CJK character bigrams; not stemmed, stopwords kept) that are not neutral. For each
           language the detector does not rule out (confidence above 0: a Latin-script question is not
           Russian), the most of those words that one of its candidates on a page with candidates in
           several languages contains. When one language's count is at least ``min_matched_words`` and
           above every other such language's, that language (``"matched"``), whatever the detector's
           confidence. Why: on a page retrieved in several languages, the question's own translation holds
           the question's wording, function words included (``"wer ist der"`` is in the German paragraph,
           not in the English one), while the detector reads a few words of a short question out of
           context (a name's spelling, ``Temüjin``, can make English read as German) and the ranking of
           step 7 leans to the language the first stage analysed the question in. Neutral words are left
           out because every translation holds them; one word is not enough because false friends are
           common (:data:`MIN_MATCHED_WORDS`). Ties in the count leave the decision to the next steps.
        6. Else the likeliest language when its confidence is at least ``trust_confidence``
           (``"confident"``).
        7. Else the retrieval evidence: among the languages with at least ``plausible_confidence``, the
           one whose candidate on a page with candidates in several languages comes first in
           ``candidates`` (``"ranked"``): a question shares more words with its own translation than with
           the others, so that translation usually ranks above them. When no plausible language has such
           a candidate: the likeliest (``"likeliest"``).

        Deterministic: ties between equal confidences go to the language the detector listed first.

        Args:
            query: the question.
            candidates: the wrapped retriever's results for ``query``, best first (their order is the
                evidence; their languages are found as in step 2 of the class).
            language: the question's language when known (ISO 639-1); then nothing is detected.

        Returns:
            A :class:`LanguageDecision`.

        Raises:
            InvalidParameterError: the query or ``language`` is invalid, or ``candidates`` is not a
                sequence of :class:`~fastrag.models.Document`.
            Exception: whatever the detector raises, unchanged.
        """
        check_query(query, self.limits)
        _check_language(language)
        if isinstance(candidates, str | bytes) or not isinstance(candidates, Sequence) or not all(
            isinstance(d, Document) for d in candidates
        ):
            raise InvalidParameterError("candidates must be a sequence of Document")
        docs = _distinct(list(candidates))
        languages = await self._languages(docs) if docs else []
        return await self._decide(query, docs, languages, language)

    async def _decide(
        self, query: str, candidates: list[Document], languages: list[str | None], language: str | None
    ) -> LanguageDecision:
        if language is not None:
            return LanguageDecision(primary_language(language), "given")
        detector = self.detector
        trust, plausible, min_matched = self.trust_confidence, self.plausible_confidence, self.min_matched_words

        def decide() -> LanguageDecision:
            neutral, best_positions, translations = _translation_evidence(candidates, languages)
            text, removed = _without(query, neutral)
            matched = _matched_words(query, neutral, translations, [d.content for d in candidates])
            if not isinstance(detector, SupportsLanguageConfidence):
                found = primary_language(detector.detect(text))
                return LanguageDecision(
                    found, "detected" if found else "unknown", text=text, neutral_words=removed,
                    best_positions=best_positions, matched_words=matched,
                )  # fmt: skip
            confidences = _confidences(detector.confidences(text))
            evidence: dict[str, Any] = {
                "confidences": confidences, "text": text, "neutral_words": removed, "best_positions": best_positions,
                "matched_words": matched,
            }  # fmt: skip
            likeliest = next(iter(confidences), None)
            if likeliest is None or confidences[likeliest] <= 0.0:
                return LanguageDecision(None, "unknown", **evidence)
            counts = sorted(
                ((n, lang) for lang, n in matched.items() if confidences.get(lang, 0.0) > 0.0), reverse=True
            )
            if counts and counts[0][0] >= min_matched and (len(counts) == 1 or counts[0][0] > counts[1][0]):
                return LanguageDecision(counts[0][1], "matched", **evidence)
            if confidences[likeliest] >= trust:
                return LanguageDecision(likeliest, "confident", **evidence)
            ranked = [lang for lang, c in confidences.items() if c >= plausible and lang in best_positions]
            if ranked:
                return LanguageDecision(min(ranked, key=best_positions.__getitem__), "ranked", **evidence)
            return LanguageDecision(likeliest, "likeliest", **evidence)

        return await anyio.to_thread.run_sync(decide)

    def _one_translation_per_page(
        self, candidates: list[Document], languages: list[str | None], weighted: list[float], asked: str | None
    ) -> list[tuple[int, float]]:
        """``[(candidate position, final score)]`` for the chunks of each page's kept translation."""
        pages: dict[str, list[int]] = {}
        for i, doc in enumerate(candidates):
            pages.setdefault(_page_key(doc), []).append(i)
        out: list[tuple[int, float]] = []
        for members in pages.values():
            translations: dict[Any, list[int]] = {}
            for i in members:
                translations.setdefault(candidates[i].metadata.get(SOURCE_URI) or candidates[i].id, []).append(i)

            def best(chunks: list[int]) -> float:
                return max(weighted[i] for i in chunks)

            preferred = [t for t, chunks in translations.items() if asked is not None and any(languages[i] == asked for i in chunks)]
            pool = preferred or list(translations)
            # best weighted score, then earliest first-stage position: deterministic
            kept = min(pool, key=lambda t: (-best(translations[t]), min(translations[t])))
            chunks = sorted(translations[kept], key=lambda i: (-weighted[i], i))
            page_score = max(weighted[i] for i in members)
            out.append((chunks[0], page_score))
            out.extend((i, weighted[i]) for i in chunks[1:])
        return out

    async def _languages(self, docs: list[Document]) -> list[str | None]:
        """Each document's language: its metadata's, else detected, else its source_uri's locale."""
        languages: list[str | None] = [primary_language(d.metadata.get(LANGUAGE)) for d in docs]
        missing = [i for i, lang in enumerate(languages) if lang is None]
        if missing:
            detect = self.detector.detect

            def detect_all() -> list[str | None]:
                return [primary_language(detect(docs[i].content)) for i in missing]

            for i, lang in zip(missing, await anyio.to_thread.run_sync(detect_all), strict=True):
                if lang is None:
                    uri = docs[i].metadata.get(SOURCE_URI)
                    lang = split_locale(uri)[0] if isinstance(uri, str) else None
                languages[i] = lang
        return languages

    def __repr__(self) -> str:
        return (
            f"LanguageAwareRetriever(retriever={self.retriever!r}, detector={self.detector!r}, "
            f"candidate_k={self.candidate_k!r}, other_language_weight={self.other_language_weight!r}, "
            f"trust_confidence={self.trust_confidence!r}, plausible_confidence={self.plausible_confidence!r}, "
            f"min_matched_words={self.min_matched_words!r})"
        )


def _distinct(docs: list[Document]) -> list[Document]:
    seen: set[str] = set()
    out = []
    for doc in docs:
        if doc.id not in seen:
            seen.add(doc.id)
            out.append(doc)
    return out


def _normalised(raw: list[float | None]) -> list[float]:
    """To [0, 1]: ``s / max`` when no score is negative, else min-max; equal scores all get 1.0; a missing
    score gets 0; no score at all: ``(n - position) / n``."""
    known = [s for s in raw if s is not None]
    n = len(raw)
    if not known:
        return [(n - i) / n for i in range(n)]
    lo, hi = min(known), max(known)
    if hi == lo:
        return [0.0 if s is None else 1.0 for s in raw]
    if lo >= 0:
        return [0.0 if s is None else s / hi for s in raw]
    return [0.0 if s is None else (s - lo) / (hi - lo) for s in raw]


def _check_language(language: object) -> None:
    if language is not None and language_code(language) is None:
        raise InvalidParameterError(f"language must be None or a registered language code such as 'de', got {language!r}")


def _page_key(doc: Document) -> str:
    """The page a candidate belongs to: its ``source_uri`` without locale segment, else its own id."""
    uri = doc.metadata.get(SOURCE_URI)
    return split_locale(uri)[1] if isinstance(uri, str) and uri else f"\0id:{doc.id}"


def _words(text: str) -> list[str]:
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def _translation_evidence(
    candidates: list[Document], languages: list[str | None]
) -> tuple[frozenset[str], dict[str, int], list[tuple[str, int]]]:
    """``(neutral words, {language: best position}, [(language, candidate position)])`` over the pages with
    candidates in several languages.

    A word is neutral when the candidates of one page in two or more languages contain it. A language's
    best position is the first-stage position of its first candidate on such a page. The list holds every
    candidate on such a page, with its language.
    """
    by_page: dict[str, dict[str, list[int]]] = {}
    for i, (doc, lang) in enumerate(zip(candidates, languages, strict=True)):
        if lang is not None:
            by_page.setdefault(_page_key(doc), {}).setdefault(lang, []).append(i)
    neutral: set[str] = set()
    best: dict[str, int] = {}
    members: list[tuple[str, int]] = []
    for translations in by_page.values():
        if len(translations) < 2:
            continue
        seen: dict[str, int] = {}
        for lang, positions in translations.items():
            best[lang] = min(best.get(lang, positions[0]), positions[0])
            members.extend((lang, i) for i in positions)
            for word in set().union(*(_words(candidates[i].content) for i in positions)):
                seen[word] = seen.get(word, 0) + 1
        neutral.update(word for word, count in seen.items() if count >= 2)
    return frozenset(neutral), dict(sorted(best.items(), key=lambda item: item[1])), members


def _matched_words(
    query: str, neutral: frozenset[str], members: list[tuple[str, int]], contents: list[str]
) -> dict[str, int]:
    """``{language: most distinct non-neutral surface terms of query that one of its candidates holds}``."""
    terms = {t for t in _SURFACE.analyze(query, for_query=True) if t not in neutral}
    matched: dict[str, int] = {}
    for lang, i in members:
        n = len(terms & set(_SURFACE.analyze(contents[i]))) if terms else 0
        matched[lang] = max(matched.get(lang, 0), n)
    return dict(sorted(matched.items(), key=lambda item: -item[1]))


def _without(query: str, neutral: frozenset[str]) -> tuple[str, tuple[str, ...]]:
    """``query`` with its neutral words blanked out, and those words; ``query`` itself when no word is
    neutral or no other word is left."""
    if not neutral:
        return query, ()
    removed: list[str] = []
    kept = False

    def blank(match: re.Match[str]) -> str:
        nonlocal kept
        word = unicodedata.normalize("NFKC", match.group(0)).casefold()
        if word in neutral:
            removed.append(word)
            return " " * len(match.group(0))
        kept = True
        return match.group(0)

    text = _WORD.sub(blank, query)
    if not removed or not kept:
        return query, ()
    return text, tuple(dict.fromkeys(removed))


def _confidences(raw: Mapping[str, float]) -> dict[str, float]:
    """The detector's confidences with keys as ISO 639-1 primary subtags and finite values in [0, 1],
    best first (ties keep the detector's order); other entries are dropped."""
    out: dict[str, float] = {}
    for key, value in raw.items():
        code = primary_language(key)
        score = finite_score(value)
        if code is not None and score is not None and code not in out:
            out[code] = min(max(score, 0.0), 1.0)
    return dict(sorted(out.items(), key=lambda item: -item[1]))
