"""Text analysis for BM25: Unicode words, stopwords, Snowball stemming, dictionary words, CJK bigrams.

The same :class:`Analyzer` turns documents into index terms and questions into query terms, so both sides
always agree. Steps, in order:

1. Unicode NFKC normalisation, then lower case by the language's rules: case folding
   (``"Straße"`` -> ``"strasse"``, final ``"ς"`` -> ``"σ"``), except that Turkish and Azerbaijani lower
   ``"I"`` to dotless ``"ı"`` and ``"İ"`` to ``"i"``; in every other language ``"İ"`` becomes ``"i"`` too
   (case folding alone would give ``"i"`` plus a combining dot). In Turkish and Azerbaijani the suffix
   after an apostrophe is dropped (``"İstanbul'da"`` -> ``istanbul``), as Lucene's Turkish analysis does.
   In every other language an apostrophe and ``s`` ending a word (``"DDC's"``, ``"it’s"``) is dropped, as
   Lucene's ``EnglishAnalyzer`` does (``EnglishPossessiveFilter``): the possessive is no term of its own
   (before analysis version 3, ``"DDC's"`` gave ``ddc`` and a one-letter ``s``). Lucene's other analysers
   keep ``"who's"`` one token, never a lone ``s``; here words split at the apostrophe (step 2), so the
   ending is dropped in every language alike: in a store of several languages, a question analysed in
   German would otherwise match the ``s`` of German documents that the English ones no longer have.
2. Words are maximal runs of Unicode word characters: letters, combining marks, decimal digits and the
   zero-width joiners (``\\w`` of the ``regex`` module, UTS #18), without ``_``. Combining marks stay
   inside their word in every script (UAX #29's rule WB4: a Devanagari vowel sign or virama, an Arabic
   haraka, a Thai tone mark never starts a term). Punctuation splits a word (``"can't"`` -> ``can``,
   ``t``; ``"3.14"`` -> ``3``, ``14``), where UAX #29 keeps such words whole: fastrag did so before (as
   bm25s's ``\\w\\w+`` does), so English terms are unchanged (one of SciFact's 6,292 texts differs, by
   a combining mark). ASCII text takes a faster path with the same result. Candidates and speeds:
   ``benchmarks/results/word_segmentation.md``.
3. Runs of Thai, Lao, Khmer and Myanmar letters, written without spaces between words, are cut into
   dictionary words by ICU's word break iterator (UAX #29 with ICU's dictionaries, through PyICU:
   ``pip install "fastrag-retrieval[icu]"``, which installs the ``pyicu-wheels`` build). Without it they become bigrams as CJK runs do, of
   grapheme clusters (a vowel sign stays on its consonant).
4. Runs of CJK ideographs, kana and hangul become overlapping character bigrams, as Lucene's
   ``CJKAnalyzer`` does; documents also index every character as a unigram (Elasticsearch's
   ``cjk_bigram`` with ``output_unigrams``). A query uses bigrams for runs of two or more characters and
   the unigram for a single character, so a Chinese question finds Chinese documents through the bigrams
   they share, and a one-character query still matches.
5. Stopwords are dropped: English, Lucene's ``EnglishAnalyzer`` default set (33 words), in every store;
   Danish, Dutch, French, German, Italian, Norwegian, Portuguese, Russian, Spanish or Swedish, Snowball's
   list (:data:`SNOWBALL_STOPWORD_LANGUAGES`, the default of Lucene's and Elasticsearch's analyzers for
   these languages) when that is the analyzer's own language: a store of Russian text
   (``Analyzer("ru")``; a new store of ``fastrag index --language ru`` or ``fastrag eval --language ru``). Documents of another language in a multilingual
   store (:meth:`Analyzer.for_language`) keep their function words, as before: BM25 then compares
   documents of different languages on comparable lengths (with each language's list, 11 of XQuAD's
   5,950 questions lost their own-language paragraph to a translation shortened by a longer list).
6. Every other word is stemmed with the Snowball stemmer of the language (Porter 2001,
   https://snowballstem.org/; every language Snowball has, :data:`SNOWBALL_LANGUAGES`), through the
   ``snowballstemmer`` package (which uses PyStemmer's C code when it is installed).

Multilingual text: :meth:`Analyzer.for_language` gives the analysis for text in another language, with
the same settings and that language's stemmer and lower-casing (a language without a Snowball stemmer,
such as Chinese, Thai or Japanese, is not stemmed). A store analyses each document in its
``metadata["language"]`` and each question in the question's language, so both sides of a match went
through the same stemmer.

Stores that keep analysed terms (the SQLite store's postings, Qdrant's BM25 text) record
:attr:`Analyzer.signature`, which names :data:`ANALYSIS_VERSION` and the word segmentation in use, and
notice when it changed (docs/multilingual.md, "Text analysis").
"""

from __future__ import annotations

import re
import threading
import unicodedata
from functools import cache, lru_cache

import regex
import snowballstemmer

from fastrag.errors import InvalidParameterError

__all__ = [
    "ANALYSIS_VERSION",
    "CJK_RANGES",
    "ENGLISH_STOPWORDS",
    "LANGUAGE_ALIASES",
    "SNOWBALL_LANGUAGES",
    "SNOWBALL_STOPWORD_LANGUAGES",
    "Analyzer",
    "dictionary_segmentation",
    "language_code",
    "primary_language",
]

ANALYSIS_VERSION = 3
"""Raised whenever a change to the analysis changes the terms of some text. 1: fastrag before issue 14
(Python's ``re`` word pattern, which cut words at combining marks). 2: Unicode word characters, Turkish
lower case, dictionary words for Thai, Lao, Khmer and Myanmar. 3 (issue 25): possessives dropped
(``"DDC's"`` -> ``ddc``, was ``ddc`` + ``s``)."""

# Lucene EnglishAnalyzer.ENGLISH_STOP_WORDS_SET (org.apache.lucene.analysis.en), 33 words.
ENGLISH_STOPWORDS = frozenset(
    ["a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to", "was", "will", "with"]
)

SNOWBALL_STOPWORD_LANGUAGES: dict[str, str] = {
    "da": "DANISH", "de": "GERMAN", "es": "SPANISH", "fr": "FRENCH", "it": "ITALIAN", "nl": "DUTCH",
    "no": "NORWEGIAN", "pt": "PORTUGUESE", "ru": "RUSSIAN", "sv": "SWEDISH",
}
"""Languages with Snowball's stopword list (https://snowballstem.org/, each algorithm's ``stop.txt``:
function words such as Russian ``в``, ``и``, ``что``), code -> the list's name in ``bm25s.stopwords``.
The lists come from the ``bm25s`` package, which ships NLTK's stopword corpus for these languages (NLTK
took them from Snowball): no package on PyPI ships Snowball's lists alone, and the broader lists of
``stop-words``, ``stopwordsiso`` and ``stopwords`` measured lower on Russian and Spanish
(``benchmarks/results/stopwords.md``). Snowball has no list for the other languages it stems."""

# ISO 639-1 code -> Snowball algorithm name: every language snowballstemmer 3 ships (its "porter" and
# "dutch_porter" are older variants of English and Dutch; "st" is Sesotho).
SNOWBALL_LANGUAGES: dict[str, str] = {
    "ar": "arabic", "ca": "catalan", "cs": "czech", "da": "danish", "de": "german", "el": "greek",
    "en": "english", "eo": "esperanto", "es": "spanish", "et": "estonian", "eu": "basque", "fa": "persian",
    "fi": "finnish", "fr": "french", "ga": "irish", "hi": "hindi", "hu": "hungarian", "hy": "armenian",
    "id": "indonesian", "it": "italian", "lt": "lithuanian", "ne": "nepali", "nl": "dutch", "no": "norwegian",
    "pl": "polish", "pt": "portuguese", "ro": "romanian", "ru": "russian", "sr": "serbian", "st": "sesotho",
    "sv": "swedish", "ta": "tamil", "tr": "turkish", "yi": "yiddish",
}
SNOWBALL_LANGUAGES = {
    code: name for code, name in SNOWBALL_LANGUAGES.items() if name in snowballstemmer.algorithms()
}  # an older snowballstemmer lacks a few (Czech, Esperanto, Estonian, Persian, Polish, Sesotho came in 3.0)

LANGUAGE_ALIASES: dict[str, str] = {"nb": "no", "nn": "no"}
"""Codes that share a Snowball stemmer with another: Norwegian Bokmål and Nynorsk use ``"no"``'s."""

_DOTLESS_I_LANGUAGES = frozenset({"tr", "az"})  # I -> ı, İ -> i (Unicode SpecialCasing.txt, tr and az)
_APOSTROPHE_SUFFIX = regex.compile(r"(?<=\w)['\u2019][^\W_]+")
# Lucene's EnglishPossessiveFilter strips a trailing 's, ’s or ＇s from each token of its StandardTokenizer
# (which keeps "DDC's" whole); here words split at the apostrophe, so the possessive goes from the folded
# text first: an apostrophe and "s" after a word character and not followed by one (NFKC already turned
# the fullwidth ＇ into '). Every language but Turkish and Azerbaijani, which drop any suffix after an
# apostrophe.
_POSSESSIVE = regex.compile(r"(?<=[^\W_])['\u2019]s(?![^\W_])")

CJK_RANGES = (
    "\u3040-\u30ff"  # hiragana, katakana
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # CJK ideographs, extension A, compatibility
    "\uac00-\ud7af"  # hangul syllables
    "\U00020000-\U0002fa1f"  # CJK extensions B-F, compatibility supplement
)
"""The ranges of the scripts written without spaces that :class:`Analyzer` cuts into character bigrams
(Chinese, Japanese, Korean), as the body of a regular-expression character class: ``f"[{CJK_RANGES}]+"``
matches a run of them."""
_SPACELESS = "\u0e00-\u0e7f\u0e80-\u0eff\u1000-\u109f\u1780-\u17ff\u19e0-\u19ff\uaa60-\uaa7f\ua9e0-\ua9ff"
"""Thai, Lao, Myanmar (with extensions A and B), Khmer (with Khmer symbols): scripts written without
spaces between words, which need a dictionary to find words (UAX #29's SA class). All in the BMP."""
# Words: runs of the regex module's \w, which is Unicode's (UTS #18 Annex C: Alphabetic, marks, decimal
# digits, connector punctuation, join controls), less "_". Only in a text holding CJK or Thai-family
# characters (one re scan tells, about a tenth of the cost of finding the words) is each word split again
# into CJK runs, Thai-family runs and the rest: the common path stays one findall.
_WORD = regex.compile(r"[^\W_]+")
_SPLIT = regex.compile(rf"([{CJK_RANGES}]+)|([{_SPACELESS}]+)|([^{CJK_RANGES}{_SPACELESS}]+)")
_RUNS = re.compile(rf"[{CJK_RANGES}{_SPACELESS}]")
_GRAPHEME = regex.compile(r"\X")  # extended grapheme clusters (UAX #29)
_ASCII_TOKEN = re.compile(r"[a-z0-9]+")  # the same words for ASCII text (lower-cased), faster


class Analyzer:
    """Turns text into BM25 terms.

    Args:
        language: ISO 639-1 code choosing the stemmer, the lower-casing rules (Turkish and Azerbaijani
            dotted and dotless i) and the stopword list (:data:`ENGLISH_STOPWORDS`, or Snowball's list for
            a language of :data:`SNOWBALL_STOPWORD_LANGUAGES`). ``None`` disables stemming. A tag is
            normalised (:func:`language_code`, :data:`LANGUAGE_ALIASES`: ``"RU"``, ``"pt-BR"``, ``"nb"``);
            a language without a Snowball stemmer (``"zh"``) or an unregistered code raises.
        stem: apply the Snowball stemmer of ``language``.
        stopwords: drop the language's stopwords (English and the languages of
            :data:`SNOWBALL_STOPWORD_LANGUAGES` have a list; other languages keep every word). The
            analyzers :meth:`for_language` derives drop English's only.

    Raises:
        InvalidParameterError: ``language`` has no Snowball stemmer.
    """

    def __init__(self, language: str | None = "en", *, stem: bool = True, stopwords: bool = True) -> None:
        if language is not None and language not in SNOWBALL_LANGUAGES:
            code = language_code(language)
            code = LANGUAGE_ALIASES.get(code, code) if code else None  # "RU", "pt-BR", "nb" -> ru, pt, no
            if code not in SNOWBALL_LANGUAGES:
                known = ", ".join(sorted(SNOWBALL_LANGUAGES))
                hint = (f"{language!r} is not a registered language code" if code is None else
                        f"text in {code!r} needs no stemmer: give the store Analyzer(None) (or English's, the "
                        f"default), and each document its metadata['language']")
                raise InvalidParameterError(f"no Snowball stemmer for language {language!r} ({hint}); known: {known}")
            language = code
        self._init(language, language, stem=stem, stopwords=stopwords)
        if stopwords and language in SNOWBALL_STOPWORD_LANGUAGES:
            self.stopwords = _snowball_stopwords(language)

    def _init(self, language: str | None, casing: str | None, *, stem: bool, stopwords: bool) -> None:
        self.language = language
        self.stem = stem and language is not None
        self.stopwords = ENGLISH_STOPWORDS if (stopwords and language == "en") else frozenset()
        self._stem_word = _stemmer(language) if self.stem else None
        self._dotless_i = casing in _DOTLESS_I_LANGUAGES
        self._possessive = casing not in _DOTLESS_I_LANGUAGES
        self._options = (stem, stopwords)
        self._by_language: dict[str | None, Analyzer] = {}

    @property
    def signature(self) -> str:
        """What a store records of the analysis its terms were made with: :data:`ANALYSIS_VERSION` and the
        segmentation of Thai-family scripts (``"icu<major version>"`` or ``"bigrams"``), e.g.
        ``"fastrag-analysis/2 spaceless=icu78"``, then ``" stopwords=snowball"`` when this analyzer drops
        Snowball's list for its language. The language and options are recorded apart."""
        signature = f"fastrag-analysis/{ANALYSIS_VERSION} spaceless={dictionary_segmentation() or 'bigrams'}"
        if self.language in SNOWBALL_STOPWORD_LANGUAGES and self.stopwords:
            signature += " stopwords=snowball"
        return signature

    def for_language(self, language: str | None) -> Analyzer:
        """The analysis for text written in ``language``: this analyzer's settings, that language's stemmer.

        Args:
            language: a language tag (``"de"``, ``"pt-BR"``, ``"zh_Hans"``; case-insensitive; only the
                primary subtag counts) or ``None``.

        Returns:
            ``self`` when ``language`` is ``None``, not a usable tag, or the same language as this
            analyzer; else an analyzer with ``stem`` and ``stopwords`` as given to this one, the
            Snowball stemmer of ``language`` (via :data:`LANGUAGE_ALIASES`) or no stemmer when it has
            none (``"zh"``, ``"ja"``, ``"th"``, ...), and ``language``'s lower-casing (``"az"`` has
            Turkish casing, no stemmer); of the stopword lists, only English's (step 5 above says why).
            Analyzers are cached per language.
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
            found = Analyzer.__new__(Analyzer)
            found._init(code if code in SNOWBALL_LANGUAGES else None, code, stem=stem, stopwords=stopwords)
            self._by_language[code] = found
        return found

    def __repr__(self) -> str:
        return f"Analyzer(language={self.language!r}, stem={self.stem}, stopwords={bool(self.stopwords)})"

    def fold(self, text: str) -> str:
        """``text`` NFKC-normalised and lower-cased by this analyzer's language, possessives (and, in
        Turkish and Azerbaijani, any suffix after an apostrophe) dropped (step 1 above)."""
        text = unicodedata.normalize("NFKC", text)
        if self._dotless_i:
            # Turkish and Azerbaijani also write suffixes after an apostrophe on names ("İstanbul'da"):
            # they are dropped, as Lucene's TurkishAnalyzer does (ApostropheFilter)
            return _APOSTROPHE_SUFFIX.sub("", text.replace("I", "ı").replace("İ", "i").casefold())
        text = text.casefold()
        if "\u0307" in text:
            text = text.replace("i\u0307", "i")
        if self._possessive and ("'" in text or "\u2019" in text):
            text = _POSSESSIVE.sub("", text)
        return text

    def tokens(self, folded: str) -> list[str]:
        """The words of already folded text (:meth:`fold`), before stopwords, stemming and CJK bigrams:
        runs of CJK characters stay whole, Thai-family runs are cut into dictionary words (or kept whole
        when no dictionary segmentation is installed)."""
        if folded.isascii():
            return _ASCII_TOKEN.findall(folded)
        words = _WORD.findall(folded)
        if _RUNS.search(folded) is None:
            return words
        pieces = _pieces(words)
        segmented = iter(_dictionary_words([p for kind, p in pieces if kind == _SPACELESS_RUN]))
        out: list[str] = []
        for kind, piece in pieces:
            out.extend(next(segmented) if kind == _SPACELESS_RUN else [piece])
        return out

    def analyze(self, text: str, *, for_query: bool = False) -> list[str]:
        """The terms of ``text``, with repeats (term frequency matters to BM25).

        Args:
            text: any Unicode text.
            for_query: analyse a question rather than a document (CJK runs, and Thai-family runs
                without a dictionary, give bigrams only, see above).
        """
        folded = self.fold(text)
        stopwords, stem = self.stopwords, self._stem_word
        terms: list[str] = []
        if folded.isascii():  # the common path
            for token in _ASCII_TOKEN.findall(folded):
                if token not in stopwords:
                    terms.append(stem(token) if stem else token)
            return terms
        words = _WORD.findall(folded)
        if _RUNS.search(folded) is None:  # no CJK or Thai-family text: every word is a term
            for token in words:
                if token not in stopwords:
                    terms.append(stem(token) if stem else token)
            return terms
        pieces = _pieces(words)
        segment = _segmenter()
        # every Thai-family run of the text segmented in one call to ICU (a call costs more than its words)
        segmented = iter(segment([p for kind, p in pieces if kind == _SPACELESS_RUN])) if segment else None
        for kind, piece in pieces:
            if kind == _OTHER:
                if piece not in stopwords:
                    terms.append(stem(piece) if stem else piece)
            elif kind == _SPACELESS_RUN and segmented is not None:
                terms.extend(next(segmented))
            else:  # CJK characters; Thai-family grapheme clusters without a dictionary
                units = list(piece) if kind == _CJK_RUN else _GRAPHEME.findall(piece)
                terms.extend(_bigrams(units))
                if not for_query and len(units) > 1:
                    terms.extend(units)
        return terms


_OTHER, _CJK_RUN, _SPACELESS_RUN = 0, 1, 2


def _pieces(words: list[str]) -> list[tuple[int, str]]:
    """``words`` with each one holding CJK or Thai-family characters split into its runs, kind first."""
    pieces: list[tuple[int, str]] = []
    for token in words:
        if _RUNS.search(token) is None:
            pieces.append((_OTHER, token))
            continue
        for cjk, spaceless, word in _SPLIT.findall(token):
            pieces.append((_OTHER, word) if word else (_CJK_RUN, cjk) if cjk else (_SPACELESS_RUN, spaceless))
    return pieces


def dictionary_segmentation() -> str | None:
    """``"icu<major version>"`` when ICU's dictionary word segmentation is installed (PyICU, extra
    ``icu``), else ``None`` (Thai, Lao, Khmer and Myanmar runs then become character bigrams)."""
    return _icu()[0]


@lru_cache(maxsize=1)
def _icu() -> tuple[str | None, object]:
    try:
        import icu  # PyICU: the pyicu-wheels distribution (extra "icu"), or pyicu built from source
    except ImportError:
        return None, None
    return f"icu{str(icu.ICU_VERSION).split('.')[0]}", icu


_breakers = threading.local()  # an ICU break iterator is not thread-safe: one per thread, reused


def _word_breaker(icu: object) -> object:
    breaker = getattr(_breakers, "word", None)
    if breaker is None:
        breaker = _breakers.word = icu.BreakIterator.createWordInstance(icu.Locale("th"))  # type: ignore[attr-defined]
    return breaker


def _segmenter():
    return _dictionary_words if _icu()[1] is not None else None


def _dictionary_words(runs: list[str]) -> list[list[str]]:
    """The dictionary words of each run of Thai, Lao, Khmer or Myanmar letters, by one ICU word break
    iterator over the runs joined by spaces (a space is always a word boundary, so no word spans two
    runs; ICU's offsets are UTF-16 code units, which equal code points here: the runs are all in the
    BMP). Each run whole when ICU is missing."""
    icu = _icu()[1]
    if icu is None or not runs:
        return [[run] for run in runs]
    joined = " ".join(runs)
    breaker = _word_breaker(icu)
    breaker.setText(joined)  # type: ignore[attr-defined]
    out: list[list[str]] = [[] for _ in runs]
    index, end = 0, len(runs[0])  # the run being filled and where it ends in ``joined``
    a = 0
    for b in breaker:  # type: ignore[attr-defined]  # each boundary after the first (0)
        if joined[a] != " ":
            while a >= end:
                index += 1
                end += 1 + len(runs[index])
            out[index].append(joined[a:b])
        a = b
    return out


@lru_cache(maxsize=4096)
def _registered(tag: str) -> str | None:
    import langcodes  # a core dependency, see language_code

    try:
        parsed = langcodes.Language.get(tag)
    except (ValueError, LookupError):
        return None
    code = parsed.language
    return code if code and len(code) in (2, 3) and code.isalpha() and parsed.is_valid() else None


def language_code(tag: object) -> str | None:
    """The language of a BCP 47 tag as the registry's shortest code, for tags a user gives (``--language``,
    ``language=``): ``"RU"``, ``"ru-RU"``, ``"rus"`` -> ``"ru"``; ``"pt_BR"`` -> ``"pt"``; ``"iw"`` ->
    ``"he"``. ``None`` when ``tag`` is not a string or names no registered language (``"xx"``, ``"und"``,
    ``"russian"``): the IANA language subtag registry, through the ``langcodes`` package (parsing and
    normalisation by BCP 47, pure Python). Tags read from documents' metadata go through the more lenient
    :func:`primary_language`, so stored analyses never change."""
    if not isinstance(tag, str) or not tag.strip():
        return None
    return _registered(tag.strip().replace("_", "-"))


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


def _bigrams(units: list[str]) -> list[str]:
    if len(units) == 1:
        return units
    return [units[i] + units[i + 1] for i in range(len(units) - 1)]


@cache
def _snowball_stopwords(language: str) -> frozenset[str]:
    """Snowball's stopwords for ``language`` (a key of :data:`SNOWBALL_STOPWORD_LANGUAGES`) as
    :meth:`Analyzer.fold` leaves words. Read from ``bm25s.stopwords`` on first use (about 0.2 s: importing
    it imports bm25s's retrieval engine)."""
    from bm25s import stopwords as lists  # a core dependency, see SNOWBALL_STOPWORD_LANGUAGES

    words = getattr(lists, f"STOPWORDS_{SNOWBALL_STOPWORD_LANGUAGES[language]}")
    return frozenset(unicodedata.normalize("NFKC", word).casefold() for word in words)


def _stemmer(language: str | None):
    stemmer = snowballstemmer.stemmer(SNOWBALL_LANGUAGES[language])  # type: ignore[index]
    lock = threading.Lock()  # a Snowball stemmer object keeps state between calls

    @lru_cache(maxsize=200_000)
    def stem_word(word: str) -> str:
        with lock:
            return stemmer.stemWord(word)

    return stem_word
