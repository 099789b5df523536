"""Text analysis for BM25: Unicode tokens, stopwords, Snowball stemming, CJK bigrams.

The same :class:`Analyzer` turns documents into index terms and questions into query terms, so both sides
always agree. Steps, in order:

1. Unicode NFKC normalisation and case folding (``"Straße"`` -> ``"strasse"``, full-width -> ASCII).
2. Tokens are maximal runs of letters and digits (Unicode-aware: Cyrillic, Greek, accented Latin, ...).
3. Runs of CJK ideographs, kana and hangul, which have no spaces between words, become overlapping
   character bigrams, as Lucene's ``CJKAnalyzer`` does; documents also index every character as a
   unigram (Elasticsearch's ``cjk_bigram`` with ``output_unigrams``). A query uses bigrams for runs of
   two or more characters and the unigram for a single character, so a Chinese question finds Chinese
   documents through the bigrams they share, and a one-character query still matches.
4. Stopwords are dropped (English: Lucene's ``EnglishAnalyzer`` default set).
5. Every other token is stemmed with the Snowball stemmer of the language (Porter 2001,
   https://snowballstem.org/), through the ``snowballstemmer`` package (which uses PyStemmer's C code
   when it is installed).

Multilingual text: :meth:`Analyzer.for_language` gives the analysis for text in another language, with
the same settings and that language's stemmer (a language without a Snowball stemmer, such as Chinese or
Japanese, is not stemmed; CJK runs are segmented into bigrams whatever the language). A store analyses
each document in its ``metadata["language"]`` and each question in the question's language, so both
sides of a match went through the same stemmer.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

import snowballstemmer

from fastrag.errors import InvalidParameterError

__all__ = ["ENGLISH_STOPWORDS", "LANGUAGE_ALIASES", "SNOWBALL_LANGUAGES", "Analyzer", "primary_language"]

# Lucene EnglishAnalyzer.ENGLISH_STOP_WORDS_SET (org.apache.lucene.analysis.en), 33 words.
ENGLISH_STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there "
    "these they this to was will with".split()
)

# ISO 639-1 code -> Snowball algorithm name (the languages snowballstemmer ships).
SNOWBALL_LANGUAGES: dict[str, str] = {
    "ar": "arabic", "ca": "catalan", "da": "danish", "de": "german", "el": "greek", "en": "english",
    "es": "spanish", "eu": "basque", "fi": "finnish", "fr": "french", "ga": "irish", "hi": "hindi",
    "hu": "hungarian", "hy": "armenian", "id": "indonesian", "it": "italian", "lt": "lithuanian",
    "ne": "nepali", "nl": "dutch", "no": "norwegian", "pt": "portuguese", "ro": "romanian",
    "ru": "russian", "sr": "serbian", "sv": "swedish", "ta": "tamil", "tr": "turkish", "yi": "yiddish",
}

LANGUAGE_ALIASES: dict[str, str] = {"nb": "no", "nn": "no"}
"""Codes that share a Snowball stemmer with another: Norwegian Bokmål and Nynorsk use ``"no"``'s."""

_CJK = (
    "\u3040-\u30ff"  # hiragana, katakana
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # CJK ideographs, extension A, compatibility
    "\uac00-\ud7af"  # hangul syllables
    "\U00020000-\U0002fa1f"  # CJK extensions B-F, compatibility supplement
)
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+")
_CJK_RUN = re.compile(rf"[{_CJK}]+")


class Analyzer:
    """Turns text into BM25 terms.

    Args:
        language: ISO 639-1 code choosing the stemmer (and, for ``"en"``, the stopword list). ``None``
            disables stemming. Unknown codes raise.
        stem: apply the Snowball stemmer of ``language``.
        stopwords: drop stopwords (only English has a list; other languages keep every token).

    Raises:
        InvalidParameterError: ``language`` has no Snowball stemmer.
    """

    def __init__(self, language: str | None = "en", *, stem: bool = True, stopwords: bool = True) -> None:
        if language is not None and language not in SNOWBALL_LANGUAGES:
            raise InvalidParameterError(
                f"no Snowball stemmer for language {language!r}; known: {', '.join(sorted(SNOWBALL_LANGUAGES))}"
            )
        self.language = language
        self.stem = stem and language is not None
        self.stopwords = ENGLISH_STOPWORDS if (stopwords and language == "en") else frozenset()
        self._stem_word = _stemmer(language) if self.stem else None
        self._options = (stem, stopwords)
        self._by_language: dict[str | None, Analyzer] = {}

    def for_language(self, language: str | None) -> Analyzer:
        """The analysis for text written in ``language``: this analyzer's settings, that language's stemmer.

        Args:
            language: a language tag (``"de"``, ``"pt-BR"``, ``"zh_Hans"``; case-insensitive; only the
                primary subtag counts) or ``None``.

        Returns:
            ``self`` when ``language`` is ``None``, not a usable tag, or the same language as this
            analyzer; else an analyzer with ``stem`` and ``stopwords`` as given to this one and the
            Snowball stemmer of ``language`` (via :data:`LANGUAGE_ALIASES`), or no stemmer when it has
            none (``"zh"``, ``"ja"``, ``"ko"``, ...). Analyzers are cached per language.
        """
        code = primary_language(language)
        if code is None:
            return self
        code = LANGUAGE_ALIASES.get(code, code)
        if code == self.language:
            return self
        found = self._by_language.get(code)
        if found is None:
            stem, stopwords = self._options
            found = Analyzer(code if code in SNOWBALL_LANGUAGES else None, stem=stem, stopwords=stopwords)
            self._by_language[code] = found
        return found

    def __repr__(self) -> str:
        return f"Analyzer(language={self.language!r}, stem={self.stem}, stopwords={bool(self.stopwords)})"

    def analyze(self, text: str, *, for_query: bool = False) -> list[str]:
        """The terms of ``text``, with repeats (term frequency matters to BM25).

        Args:
            text: any Unicode text.
            for_query: analyse a question rather than a document (CJK runs give bigrams only, see above).
        """
        text = unicodedata.normalize("NFKC", text).casefold()
        terms: list[str] = []
        for token in _TOKEN.findall(text):
            if _CJK_RUN.fullmatch(token):
                terms.extend(_bigrams(token))
                if not for_query and len(token) > 1:
                    terms.extend(token)
            elif token not in self.stopwords:
                terms.append(self._stem_word(token) if self._stem_word else token)
        return terms


def primary_language(tag: object) -> str | None:
    """The primary language subtag of a BCP 47 / ISO 639 tag, lower case: ``"pt-BR"`` -> ``"pt"``,
    ``"zh_Hans"`` -> ``"zh"``, ``"EN"`` -> ``"en"``. ``None`` for anything else (not a string, empty, a
    primary subtag that is not 2 or 3 ASCII letters)."""
    if not isinstance(tag, str):
        return None
    primary = tag.strip().replace("_", "-").split("-", 1)[0].lower()
    if 2 <= len(primary) <= 3 and primary.isascii() and primary.isalpha():
        return primary
    return None


def _bigrams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def _stemmer(language: str | None):  # noqa: ANN202 - returns a cached callable
    stemmer = snowballstemmer.stemmer(SNOWBALL_LANGUAGES[language])  # type: ignore[index]

    @lru_cache(maxsize=200_000)
    def stem_word(word: str) -> str:
        return stemmer.stemWord(word)

    return stem_word
