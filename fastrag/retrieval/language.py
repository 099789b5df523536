"""Language-aware retrieval for sites that serve each page in several languages.

Return each page once, in the asker's language when that translation was retrieved, and prefer results in
the asker's language over similar results in other languages, but not over much better ones.
"""

from __future__ import annotations

import re
from numbers import Real
from typing import Any
from urllib.parse import urlsplit

import anyio.to_thread

from fastrag.analysis import primary_language
from fastrag.errors import InvalidParameterError
from fastrag.filters import FilterLike, combine_filters
from fastrag.language import ISO_639_1
from fastrag.models import LANGUAGE, SCORE, SOURCE_URI, Document
from fastrag.protocols import LanguageDetector, Retriever
from fastrag.retrieval._validation import check_k, check_positive_int, check_query, fetch_limit
from fastrag.retrieval.limits import DEFAULT_LIMITS, RetrievalLimits
from fastrag.retrieval._provenance import finite_score, provenance, with_provenance
from fastrag.retrieval.reranking import FIRST_STAGE
from fastrag.retrieval.result import ReturnsResult, stage, timed

__all__ = ["LanguageAwareRetriever", "split_locale"]

# A locale path segment: an ISO 639-1 code, optionally with script/region subtags: en, de-AT, pt_BR, zh-Hans.
_LOCALE = re.compile(r"^([A-Za-z]{2})(?:[-_][A-Za-z0-9]{2,8})*$")


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


class LanguageAwareRetriever(ReturnsResult):
    """Wraps a retriever for a multilingual corpus: one translation per page, the asker's language first.

    For each call:

    1. The question's language is ``language=`` when given, else ``detector.detect(query)``.
    2. The wrapped retriever is asked for ``max(candidate_k, k)`` candidates (deduplicated by id).
    3. Each candidate's language is its ``metadata["language"]`` when set (that wins), else
       ``detector.detect(content)``, else the language of its ``source_uri``'s locale segment, else unknown.
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
    better), zero-based ``rank``, ``metadata["language"]`` (the language found in step 3, or ``None`` when
    nothing could tell) and ``metadata["branches"] = {"first_stage": {"score", "rank"}}`` (the wrapped
    retriever's score, ``None`` if not finite, and zero-based position; with its own provenance nested
    under ``"branches"`` when it was fused).

    Args:
        retriever: the wrapped retriever (BM25 with per-language analysis, a hybrid, ...).
        detector: a :class:`~fastrag.protocols.LanguageDetector`, e.g.
            :class:`~fastrag.language.LinguaLanguageDetector`; run in a worker thread.
        candidate_k: how many candidates to fetch (more lets the asker's translation of a page surface).
        other_language_weight: the factor, in [0, 1], for candidates in another language than the
            question's. 1 ignores language when ranking (a page is still returned once, in the asker's
            language when retrieved); 0 puts every result in the asker's language first.
        limits: bounds on ``k`` and the query (default :data:`~fastrag.retrieval.limits.DEFAULT_LIMITS`).

    Raises:
        InvalidParameterError: ``retriever`` lacks ``retrieve``, ``detector`` lacks ``detect``,
            ``candidate_k`` is not a positive int within ``limits.max_k``, ``other_language_weight`` is not a
            number in [0, 1].
    """

    name = "language_aware"

    def __init__(
        self,
        *,
        retriever: Retriever,
        detector: LanguageDetector,
        candidate_k: int = 40,
        other_language_weight: float = 0.8,
        limits: RetrievalLimits = DEFAULT_LIMITS,
    ) -> None:
        if not isinstance(limits, RetrievalLimits):
            raise InvalidParameterError(f"limits must be a RetrievalLimits, got {limits!r}")
        if not isinstance(retriever, Retriever):
            raise InvalidParameterError(f"retriever has no retrieve() method: {retriever!r}")
        if not isinstance(detector, LanguageDetector):
            raise InvalidParameterError(f"detector has no detect() method: {detector!r}")
        check_positive_int(candidate_k, "candidate_k", maximum=limits.max_k)
        if (
            isinstance(other_language_weight, bool)
            or not isinstance(other_language_weight, Real)
            or not 0.0 <= float(other_language_weight) <= 1.0
        ):
            raise InvalidParameterError(f"other_language_weight must be a number in [0, 1], got {other_language_weight!r}")
        self.retriever = retriever
        self.detector = detector
        self.candidate_k = candidate_k
        self.other_language_weight = float(other_language_weight)
        self.limits = limits

    async def retrieve(
        self,
        query: str,
        *,
        k: int = 10,
        filter: FilterLike | None = None,  # noqa: A002
        language: str | None = None,
    ) -> list[Document]:
        """Up to ``k`` documents for ``query``, one translation per page, best first (see the class).

        Args:
            query: the question, as for any retriever.
            k: how many documents at most, as for any retriever.
            filter: a filter, as for any retriever.
            language: the question's language (ISO 639-1); ``None`` detects it.

        Raises:
            InvalidParameterError: ``k``, the query or ``language`` is invalid (before any search).
            FilterError: ``filter`` is malformed (before any search).
            Exception: whatever the wrapped retriever or the detector raises, unchanged.
        """
        check_query(query, self.limits)
        check_k(k, self.limits)
        if language is not None and primary_language(language) is None:
            raise InvalidParameterError(f"language must be None or a language code such as 'de', got {language!r}")
        node = combine_filters(filter)
        with timed("detect"):
            asked = primary_language(language) if language is not None else await self._detect(query)
        fetch_k = min(max(self.candidate_k, k), fetch_limit(self.retriever, self.limits))
        with timed(FIRST_STAGE), stage(FIRST_STAGE):
            found = await self.retriever.retrieve(query, k=fetch_k, filter=node)
        candidates = _distinct(found)
        if not candidates:
            return []
        with timed("detect"):
            languages = await self._languages(candidates)
        normalised = _normalised([finite_score(d.metadata.get(SCORE)) for d in candidates])
        weighted = [
            s if asked is None or lang is None or lang == asked else s * self.other_language_weight
            for s, lang in zip(normalised, languages, strict=True)
        ]
        final = self._one_translation_per_page(candidates, languages, weighted, asked)
        final.sort(key=lambda item: (-item[1], item[0]))
        out = []
        for rank, (position, score) in enumerate(final[:k]):
            doc = candidates[position]
            # a language set on the document is kept as is
            extra = {} if primary_language(doc.metadata.get(LANGUAGE)) is not None else {LANGUAGE: languages[position]}
            branches = {FIRST_STAGE: provenance(doc, position)}
            out.append(with_provenance(doc, score=score, rank=rank, branches=branches, **extra))
        return out

    def _one_translation_per_page(
        self, candidates: list[Document], languages: list[str | None], weighted: list[float], asked: str | None
    ) -> list[tuple[int, float]]:
        """``[(candidate position, final score)]`` for the chunks of each page's kept translation."""
        pages: dict[str, list[int]] = {}
        for i, doc in enumerate(candidates):
            uri = doc.metadata.get(SOURCE_URI)
            key = split_locale(uri)[1] if isinstance(uri, str) and uri else f"\0id:{doc.id}"
            pages.setdefault(key, []).append(i)
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

    async def _detect(self, text: str) -> str | None:
        return primary_language(await anyio.to_thread.run_sync(self.detector.detect, text))

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
            f"candidate_k={self.candidate_k!r}, other_language_weight={self.other_language_weight!r})"
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
