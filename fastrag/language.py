"""Language identification: which language a question or a document is written in.

:class:`LangidLanguageDetector` is the default (:func:`default_language_detector`): langid.py's naive
Bayes model (Lui & Baldwin, 2012) through the ``py3langid`` package, a core dependency whose model ships
in its 4.5 MB wheel (numpy only, no compiled code, no download), over the 114 languages of that model
with an ISO 639-1 code. With no ``--language`` (``language=``), indexing stamps each document with the
language it detects, and a question asked of a store holding several languages is analysed in the
language it detects among them (:mod:`fastrag.planning`). It was chosen by
``benchmarks/language_detectors.py`` (``benchmarks/results/language_detectors.md``): on XQuAD's and
SciFact's questions, on short translated messages in 24 more languages and on paragraphs it is as
accurate as Lingua's high-accuracy mode over all its languages (which takes 1.2 GB and 15 s to load) and
more accurate than fastText's shipped ``lid.176.ftz`` on paragraphs, for about 50 microseconds a question
and 80 MB of memory.

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
import threading
from collections.abc import Mapping, Sequence
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from fastrag.analysis import primary_language
from fastrag.errors import ConfigurationError, InvalidParameterError

__all__ = ["DOCUMENT_MIN_CONFIDENCE", "ISO_639_1", "LangidLanguageDetector", "LinguaLanguageDetector", "default_language_detector", "primary_language"]

INSTALL_HINT = 'pip install "fastrag-retrieval[language]"'
LANGID_HINT = 'pip install "py3langid>=0.4,<1" (a dependency of fastrag-retrieval: reinstall fastrag-retrieval)'

ISO_639_1: frozenset[str] = frozenset(
    """aa ab ae af ak am an ar as av ay az ba be bg bh bi bm bn bo br bs ca ce ch co cr cs cu cv cy da de dv
    dz ee el en eo es et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho hr ht hu hy hz ia id ie ig ii
    ik io is it iu ja jv ka kg ki kj kk kl km kn ko kr ks ku kv kw ky la lb lg li ln lo lt lu lv mg mh mi mk
    ml mn mr ms mt my na nb nd ne ng nl nn no nr nv ny oc oj om or os pa pi pl ps pt qu rm rn ro ru rw sa sc
    sd se sg si sk sl sm sn so sq sr ss st su sv sw ta te tg th ti tk tl tn to tr ts tt tw ty ug uk ur uz ve
    vi vo wa wo xh yi yo za zh zu""".split()
)
"""Every ISO 639-1 two-letter language code (ISO 639-1:2002 and its registered additions)."""


@lru_cache(maxsize=1)
def _langid_model() -> Any:
    """langid.py's model (``py3langid``), read once per process: about 0.7 s and 80 MB."""
    try:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier
    except ImportError as exc:
        raise ConfigurationError(f"language detection needs py3langid: {LANGID_HINT}") from exc
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def langid_languages() -> frozenset[str]:
    """The ISO 639-1 codes :class:`LangidLanguageDetector` can answer (114; loads the model).

    Raises:
        ConfigurationError: ``py3langid`` is not installed.
    """
    return frozenset(code for code in _langid_model().labels if code in ISO_639_1)


class LangidLanguageDetector:
    """Detects a text's language with langid.py's model (``py3langid``: offline, in the wheel).

    Args:
        languages: the candidate languages (ISO 639-1 codes, tags such as ``"pt-BR"`` count as ``"pt"``),
            at least one; ``None`` (default): every language of the model with an ISO 639-1 code (114;
            its labels without one, such as Wu Chinese ``wuu`` or Nigerian Pidgin ``pcm``, are left out:
            they took 120 of XQuAD's 1,190 Chinese questions and 2 English ones,
            ``benchmarks/results/language_detectors.md``). Restricting to the languages a store holds is
            the question a search asks: among XQuAD's five languages, 5,949 of its 5,950 questions are
            placed right.
        max_chars: only the first ``max_chars`` characters of a text are read.
        min_confidence: in [0, 1); :meth:`detect` answers ``None`` when the likeliest language's
            confidence is below it (0: always guess).

    The model is read from the wheel on the first call (about 0.7 s and 80 MB, once per process, shared
    by every instance). ``detect`` and ``confidences`` are synchronous (about 50 microseconds for a
    question, 0.7 ms for a paragraph), thread-safe, and cache their last 4,096 answers. Implements
    :class:`~fastrag.protocols.LanguageDetector` and :class:`~fastrag.protocols.SupportsLanguageConfidence`.

    Raises:
        InvalidParameterError: no language, a code that is not ISO 639-1, a bad ``max_chars`` or
            ``min_confidence``.
        ConfigurationError: (on the first call) ``py3langid`` is missing, or a language is not one of
            its model's.
    """

    def __init__(
        self, languages: Sequence[str] | None = None, *, max_chars: int = 1_000, min_confidence: float = 0.0
    ) -> None:
        codes: list[str] | None = None
        if languages is not None:
            if isinstance(languages, str) or not isinstance(languages, Sequence):
                raise InvalidParameterError(f"languages must be a sequence of ISO 639-1 codes, got {languages!r}")
            codes = []
            for tag in languages:
                code = primary_language(tag)
                if code is None or code not in ISO_639_1:
                    raise InvalidParameterError(f"{tag!r} is not an ISO 639-1 language code")
                if code not in codes:
                    codes.append(code)
            if not codes:
                raise InvalidParameterError("languages must name at least one language")
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars <= 0:
            raise InvalidParameterError(f"max_chars must be a positive int, got {max_chars!r}")
        if (
            isinstance(min_confidence, bool)
            or not isinstance(min_confidence, int | float)
            or not math.isfinite(min_confidence)
            or not 0.0 <= min_confidence < 1.0
        ):
            raise InvalidParameterError(f"min_confidence must be a number in [0, 1), got {min_confidence!r}")
        self._codes = None if codes is None else tuple(codes)
        self._max_chars = max_chars
        self._min_confidence = float(min_confidence)
        self._identifier: Any = None
        self._lock = threading.Lock()
        self._cached_confidences = lru_cache(maxsize=4096)(self._confidences)

    @property
    def languages(self) -> tuple[str, ...]:
        """The candidate languages, ISO 639-1 (every one of the model's when none were given; loads it)."""
        return self._codes if self._codes is not None else tuple(sorted(langid_languages()))

    def _model(self) -> Any:
        with self._lock:
            if self._identifier is None:
                from py3langid.langid import LanguageIdentifier

                full = _langid_model()
                # a view of the shared model restricted to these languages (set_languages copies the columns)
                identifier = LanguageIdentifier(full.nb_ptc, full.nb_pc, full.nb_classes, full.tk_nextmove,
                                                full.tk_output, norm_probs=True, tk_row=full.tk_row)
                known = langid_languages()
                wanted = list(self._codes) if self._codes is not None else sorted(known)
                unknown = [code for code in wanted if code not in known]
                if unknown:
                    raise ConfigurationError(f"langid.py's model has no language {', '.join(unknown)}; it knows "
                                             f"{', '.join(sorted(known))}")
                identifier.set_languages(wanted)
                self._identifier = identifier
            return self._identifier

    def detect(self, text: str) -> str | None:
        """The ISO 639-1 code of ``text``'s language among :attr:`languages`, or ``None``: the text has no
        letters, or the likeliest language's confidence is below ``min_confidence``.

        Raises:
            InvalidParameterError: ``text`` is not a string.
        """
        confidences = self.confidences(text)
        best = next(iter(confidences.items()), None)
        if best is None or best[1] <= 0.0 or best[1] < self._min_confidence:
            return None
        return best[0]

    def confidences(self, text: str) -> Mapping[str, float]:
        """How likely ``text`` is written in each of :attr:`languages`: langid.py's probabilities (its
        naive Bayes posterior, softened by the square root of the text's length in bytes, as ``py3langid``
        calibrates it).

        Returns:
            A read-only mapping ``{ISO 639-1 code: confidence}`` over :attr:`languages`, best first, each in
            [0, 1], summing to 1; all 0 when the text has no letters.

        Raises:
            InvalidParameterError: ``text`` is not a string.
        """
        if not isinstance(text, str):
            raise InvalidParameterError(f"text must be a string, got {type(text).__name__}")
        return self._cached_confidences(text[: self._max_chars])

    def _confidences(self, text: str) -> Mapping[str, float]:
        identifier = self._model()
        if not any(ch.isalpha() for ch in text):
            return MappingProxyType({code: 0.0 for code in identifier.labels})
        return MappingProxyType({code: float(score) for code, score in identifier.rank(text)})

    def __repr__(self) -> str:
        shown = "every language" if self._codes is None else list(self._codes)
        return f"LangidLanguageDetector({shown!r})"


DOCUMENT_MIN_CONFIDENCE = 0.5
"""The confidence below which indexing with no language stamps none on a document (the store's own
analysis, English by default): a few words ("Volcanoes erupt molten lava.", 0.14 for Catalan) are not
evidence. Of 3,201 XQuAD paragraphs and SciFact abstracts, one is below 0.5 (0.47, English)."""


def default_language_detector(
    languages: Sequence[str] | None = None, *, min_confidence: float = 0.0
) -> LangidLanguageDetector:
    """The detector fastrag uses when no language is given: :class:`LangidLanguageDetector` over
    ``languages`` (``None``: every language it knows), one per set of arguments and process (the model
    loads once, on the first call of any of them).

    Raises:
        InvalidParameterError: as :class:`LangidLanguageDetector`.
    """
    key = None if languages is None else tuple(sorted({primary_language(code) or code for code in languages}))
    return _default_detector(key, min_confidence)


@lru_cache(maxsize=64)
def _default_detector(languages: tuple[str, ...] | None, min_confidence: Any) -> LangidLanguageDetector:
    return LangidLanguageDetector(languages, min_confidence=min_confidence)


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
