"""Language identification: which language a question or a document is written in.

:class:`LinguaLanguageDetector` implements :class:`~fastrag.protocols.LanguageDetector` with
`Lingua <https://github.com/pemistahl/lingua-py>`_ (extra ``language``: ``pip install "fastrag-retrieval[language]"``),
whose language models ship inside its wheel, so it works offline. Restrict it to the languages your corpus
holds: fewer candidates are faster, need less memory (about 150 MB for five languages in high-accuracy
mode, 1.3 GB for all 75) and confuse less.

::

    detector = LinguaLanguageDetector(["en", "de", "es", "ru", "zh"])
    detector.detect("Wie viele Punkte gab die Verteidigung ab?")  # "de"
    detector.confidences("Wie viele Punkte gab die Verteidigung ab?")  # {"de": 0.9..., "en": ..., ...}

Codes are ISO 639-1, lower case; :data:`ISO_639_1` lists them all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from fastrag.analysis import primary_language
from fastrag.errors import ConfigurationError, InvalidParameterError

__all__ = ["ISO_639_1", "LinguaLanguageDetector", "primary_language"]

INSTALL_HINT = 'pip install "fastrag-retrieval[language]"'

ISO_639_1: frozenset[str] = frozenset(
    """aa ab ae af ak am an ar as av ay az ba be bg bh bi bm bn bo br bs ca ce ch co cr cs cu cv cy da de dv
    dz ee el en eo es et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho hr ht hu hy hz ia id ie ig ii
    ik io is it iu ja jv ka kg ki kj kk kl km kn ko kr ks ku kv kw ky la lb lg li ln lo lt lu lv mg mh mi mk
    ml mn mr ms mt my na nb nd ne ng nl nn no nr nv ny oc oj om or os pa pi pl ps pt qu rm rn ro ru rw sa sc
    sd se sg si sk sl sm sn so sq sr ss st su sv sw ta te tg th ti tk tl tn to tr ts tt tw ty ug uk ur uz ve
    vi vo wa wo xh yi yo za zh zu""".split()
)
"""Every ISO 639-1 two-letter language code (ISO 639-1:2002 and its registered additions)."""


class LinguaLanguageDetector:
    """Detects a text's language among ``languages`` with Lingua (n-gram models, offline).

    Args:
        languages: the candidate languages as ISO 639-1 codes (at least two distinct ones, among the 75
            Lingua knows; Norwegian is ``"nb"`` or ``"nn"``). Tags such as ``"pt-BR"`` count as ``"pt"``.
        low_accuracy: Lingua's low-accuracy mode: trigrams only, faster and about five times less memory,
            but unreliable on texts shorter than about 120 characters (a typical question). Off by default.
        minimum_relative_distance: in [0, 0.99]; when the two likeliest languages are closer than this,
            :meth:`detect` answers ``None`` rather than guess (Lingua's parameter; 0 always guesses).
        max_chars: only the first ``max_chars`` characters of a text are read (a paragraph settles the
            question; reading a whole chapter only costs time).
        preload: load the language models now (a few seconds for five languages) instead of on the
            first :meth:`detect`.

    Raises:
        ConfigurationError: ``lingua-language-detector`` is not installed (the message has the pip command).
        InvalidParameterError: fewer than two distinct languages, a code Lingua does not know, a bad
            ``minimum_relative_distance`` or ``max_chars``.

    ``detect`` and ``confidences`` are thread-safe and each cache their last 4,096 answers, so asking again
    about the same question (a language-aware retriever and its BM25 branch both do) costs nothing.
    Implements :class:`~fastrag.protocols.LanguageDetector` and
    :class:`~fastrag.protocols.SupportsLanguageConfidence`.
    """

    def __init__(
        self,
        languages: Sequence[str],
        *,
        low_accuracy: bool = False,
        minimum_relative_distance: float = 0.0,
        max_chars: int = 1_000,
        preload: bool = False,
    ) -> None:
        if isinstance(languages, str) or not isinstance(languages, Sequence):
            raise InvalidParameterError(f"languages must be a sequence of ISO 639-1 codes, got {languages!r}")
        codes: list[str] = []
        for tag in languages:
            code = primary_language(tag)
            if code is None or code not in ISO_639_1:
                raise InvalidParameterError(f"{tag!r} is not an ISO 639-1 language code")
            if code not in codes:
                codes.append(code)
        if len(codes) < 2:
            raise InvalidParameterError(
                f"LinguaLanguageDetector needs at least two distinct languages to choose between, got {codes!r}"
            )
        if (
            isinstance(minimum_relative_distance, bool)
            or not isinstance(minimum_relative_distance, int | float)
            or not math.isfinite(minimum_relative_distance)
            or not 0.0 <= minimum_relative_distance <= 0.99
        ):
            raise InvalidParameterError(
                f"minimum_relative_distance must be a number in [0, 0.99], got {minimum_relative_distance!r}"
            )
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars <= 0:
            raise InvalidParameterError(f"max_chars must be a positive int, got {max_chars!r}")
        try:
            from lingua import IsoCode639_1, LanguageDetectorBuilder
        except ImportError as exc:
            raise ConfigurationError(f"LinguaLanguageDetector needs lingua-language-detector: {INSTALL_HINT}") from exc
        isos = []
        for code in codes:
            try:
                isos.append(IsoCode639_1.from_str(code))
            except ValueError as exc:
                hint = ' (Norwegian is "nb" or "nn")' if code == "no" else ""
                raise InvalidParameterError(f"Lingua has no model for language {code!r}{hint}") from exc
        builder = LanguageDetectorBuilder.from_iso_codes_639_1(*isos)
        if low_accuracy:
            builder = builder.with_low_accuracy_mode()
        if minimum_relative_distance:
            builder = builder.with_minimum_relative_distance(float(minimum_relative_distance))
        if preload:
            builder = builder.with_preloaded_language_models()
        self._detector: Any = builder.build()
        self._languages = tuple(codes)
        self._max_chars = max_chars
        self._low_accuracy = low_accuracy
        self._cached = lru_cache(maxsize=4096)(self._detect)
        self._cached_confidences = lru_cache(maxsize=4096)(self._confidences)

    @classmethod
    def every_language(cls, **options: Any) -> LinguaLanguageDetector:
        """A detector over every language Lingua knows (75), e.g. for documents of unknown languages.

        Args:
            options: as for the constructor (``low_accuracy=True`` suits paragraphs, not questions: all 75
                languages in high-accuracy mode take about 1.3 GB and 11 s to load).

        Raises:
            ConfigurationError: ``lingua-language-detector`` is not installed.
        """
        try:
            from lingua import Language
        except ImportError as exc:
            raise ConfigurationError(f"LinguaLanguageDetector needs lingua-language-detector: {INSTALL_HINT}") from exc
        return cls(sorted(language.iso_code_639_1.name.lower() for language in Language.all()), **options)

    @property
    def languages(self) -> tuple[str, ...]:
        """The candidate languages, ISO 639-1, in the order given."""
        return self._languages

    def detect(self, text: str) -> str | None:
        """The ISO 639-1 code of ``text``'s language among :attr:`languages`, or ``None``.

        ``None`` when the text has no letters (empty, digits, punctuation) or, with a
        ``minimum_relative_distance``, when two languages are too close to call. Synchronous (a few
        milliseconds; the first call loads the models unless ``preload``): call it from a worker thread.

        Raises:
            InvalidParameterError: ``text`` is not a string.
        """
        if not isinstance(text, str):
            raise InvalidParameterError(f"text must be a string, got {type(text).__name__}")
        return self._cached(text[: self._max_chars])

    def confidences(self, text: str) -> Mapping[str, float]:
        """How likely ``text`` is written in each of :attr:`languages`: Lingua's confidence values.

        Synchronous (a few milliseconds; the first call loads the models unless ``preload``): call it from
        a worker thread.

        Returns:
            A read-only mapping ``{ISO 639-1 code: confidence}`` with one entry per language in
            :attr:`languages`, best first (ties: the order of :attr:`languages`). Each confidence is in
            [0, 1], higher is likelier, and they sum to 1; all are 0 when the text has no letters. When
            Lingua's rule engine identifies the language unambiguously (say, the only language of the
            text's script among :attr:`languages`), it gets 1.0 and the others 0. Lingua weighs scripts
            by words, so a Chinese question quoting two Latin-script names can get 0 for Chinese (a run
            of Han characters counts as one word). ``minimum_relative_distance`` does not apply here.
            :meth:`detect` answers the likeliest language, or ``None`` when all are 0 (or, with
            ``minimum_relative_distance``, when the two likeliest are too close).

        Raises:
            InvalidParameterError: ``text`` is not a string.
        """
        if not isinstance(text, str):
            raise InvalidParameterError(f"text must be a string, got {type(text).__name__}")
        return self._cached_confidences(text[: self._max_chars])

    def _confidences(self, text: str) -> Mapping[str, float]:
        values = {code: 0.0 for code in self._languages}
        for confidence in self._detector.compute_language_confidence_values(text):
            values[confidence.language.iso_code_639_1.name.lower()] = float(confidence.value)
        order = {code: i for i, code in enumerate(self._languages)}
        ranked = sorted(values.items(), key=lambda item: (-item[1], order[item[0]]))
        return MappingProxyType(dict(ranked))

    def _detect(self, text: str) -> str | None:
        language = self._detector.detect_language_of(text)
        return None if language is None else language.iso_code_639_1.name.lower()

    def __repr__(self) -> str:
        return f"LinguaLanguageDetector({list(self._languages)!r}, low_accuracy={self._low_accuracy})"
