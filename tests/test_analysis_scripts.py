"""Tokenisation per script (issue 14): Unicode word rules, combining marks, Turkish casing, dictionary words
for scripts written without spaces, Snowball stemmers chosen by language."""

from __future__ import annotations

import unicodedata

import pytest
import regex
from multilingual_sentences import SENTENCES, WORDS

from fastrag.analysis import SNOWBALL_LANGUAGES, Analyzer, dictionary_segmentation

SURFACE = Analyzer(None, stem=False, stopwords=False)
_MARK = regex.compile(r"\p{M}")
_GRAPHEMES = regex.compile(r"\X")

needs_icu = pytest.mark.skipif(
    dictionary_segmentation() is None, reason='needs icu4py (pip install "fastrag-retrieval[icu]")'
)


def _grapheme_starts(text: str) -> set[int]:
    return {m.start() for m in _GRAPHEMES.finditer(text)} | {len(text)}


def _assert_whole_graphemes(text: str, terms: list[str]) -> None:
    """Every term is a run of whole grapheme clusters of the text (no term starts or ends inside one, so
    no term is a lone combining mark or half a syllable) and the terms cover the text's letters in order."""
    starts = _grapheme_starts(text)
    at = 0
    for term in terms:
        found = text.find(term, at)
        assert found >= 0, (term, text)
        assert found in starts and found + len(term) in starts, f"{term!r} cuts a grapheme cluster in {text!r}"
        assert not _MARK.match(term), f"{term!r} starts with a combining mark"
        at = found + len(term)


# --- Unicode's word rules (UAX #29), one case per rule that matters to a search term ---------------------

@pytest.mark.parametrize(
    ("text", "terms"),
    [
        # WB4: Extend (combining marks) and Format (ZWJ, ZWNJ) stay with the preceding character
        ("cafe\u0301 nai\u0308ve", ["café", "naïve"]),  # NFKC composes what it can
        ("q\u0323\u0307 x\u20dd", ["q\u0323\u0307", "x\u20dd"]),  # marks NFKC cannot compose stay attached
        ("क्\u200dष", ["क्\u200dष"]),  # ZWJ inside a Devanagari conjunct
        ("می\u200cخواهم", ["می\u200cخواهم"]),  # Persian ZWNJ inside a word
        # WB5/WB8/WB9/WB10: letters and digits together form one word
        ("abc123 ١٢٣ ४५", ["abc123", "١٢٣", "४५"]),
        # WB3a/WB3b: breaks around newlines and spaces; punctuation is no part of a word
        ("one\ntwo\r\nthree, «four»", ["one", "two", "three", "four"]),
        # WB13a/b (ExtendNumLet): fastrag splits at "_" (identifiers are searched by their parts)
        ("snake_case", ["snake", "case"]),
    ],
)
def test_unicode_word_rules(text: str, terms: list[str]) -> None:
    assert SURFACE.analyze(text) == [unicodedata.normalize("NFKC", t) for t in terms]


@pytest.mark.parametrize("language", sorted(WORDS))
def test_words_of_spaced_scripts_are_whole_terms(language: str) -> None:
    """Hindi, Bengali, Tamil, Arabic, Greek, Turkish: each word a reader sees is exactly one term."""
    analyzer = SURFACE.for_language(language) if language in ("tr", "az") else SURFACE
    for sentence, words in zip(SENTENCES[language], WORDS[language], strict=True):
        terms = analyzer.analyze(sentence)
        assert terms == words
        _assert_whole_graphemes(analyzer.fold(sentence), terms)


def test_indic_words_are_not_cut_at_vowel_signs() -> None:
    """The issue's example: "पैंथर्स" was "प", "थर", "स"."""
    assert SURFACE.analyze("पैंथर्स") == ["पैंथर्स"]
    terms = [t for s in SENTENCES["hi"] + SENTENCES["bn"] + SENTENCES["ta"] for t in SURFACE.analyze(s)]
    assert not [t for t in terms if len(t) == 1 and _MARK.match(t)]
    assert all(not _MARK.match(t) for t in terms)


def test_turkish_dotted_and_dotless_i() -> None:
    turkish = Analyzer("tr", stem=False)
    assert turkish.analyze("İstanbul IŞIK ısı İKİ") == ["istanbul", "ışık", "ısı", "iki"]
    # a suffix written after an apostrophe on a name is no word of its own (Lucene's ApostropheFilter)
    assert turkish.analyze("İstanbul'da Ankara’nın") == ["istanbul", "ankara"]
    assert Analyzer("en", stem=False).analyze("Ankara'nın") == ["ankara", "nın"]
    assert Analyzer(None, stem=False).for_language("az").analyze("İlham") == ["ilham"]
    # other languages: İ is one letter i, not "i" plus a dot nor a word break (was: "i", "stanbul")
    assert Analyzer("en", stem=False).analyze("İstanbul Istanbul") == ["istanbul", "istanbul"]
    # and a Turkish question finds a Turkish document however it is capitalised
    assert turkish.analyze("ISPARTA") == turkish.analyze("ısparta")


@needs_icu
@pytest.mark.parametrize(
    ("language", "text", "words"),
    [
        ("th", "แมวกินปลา", ["แมว", "กิน", "ปลา"]),  # cat eat fish
        ("th", "ฉันชอบอ่านหนังสือ", ["ฉัน", "ชอบ", "อ่าน", "หนังสือ"]),  # I like read book
        ("th", "ฉันไปโรงเรียน", ["ฉัน", "ไป", "โรงเรียน"]),  # I go school
        # Thailand (one dictionary word) has province Chiang Mai
        ("th", "ประเทศไทยมีจังหวัดเชียงใหม่", ["ประเทศไทย", "มี", "จังหวัด", "เชียงใหม่"]),
        ("lo", "ຂ້ອຍຮັກປະເທດລາວ", ["ຂ້ອຍ", "ຮັກ", "ປະເທດ", "ລາວ"]),  # I love country Lao
        ("km", "ខ្ញុំស្រលាញ់ប្រទេសកម្ពុជា", ["ខ្ញុំ", "ស្រលាញ់", "ប្រទេស", "កម្ពុជា"]),  # I love country Cambodia
        ("km", "ខ្ញុំទៅសាលារៀន", ["ខ្ញុំ", "ទៅ", "សាលារៀន"]),  # I go school
        ("my", "ကျွန်တော်စာအုပ်ဖတ်", ["ကျွန်တော်", "စာအုပ်", "ဖတ်"]),  # I book read
    ],
)
def test_spaceless_scripts_split_into_dictionary_words(language: str, text: str, words: list[str]) -> None:
    assert Analyzer(None).for_language(language).analyze(text) == words


@pytest.mark.parametrize("language", ["th", "lo", "km", "my"])
def test_spaceless_scripts_never_cut_a_syllable(language: str) -> None:
    for sentence in SENTENCES[language]:
        for for_query in (False, True):
            terms = SURFACE.analyze(sentence, for_query=for_query)
            assert terms
            starts = set()
            for part in sentence.split():
                starts |= {sentence.index(part) + s for s in _grapheme_starts(part)}
            for term in terms:
                assert not _MARK.match(term), f"{term!r} starts with a combining mark"
                # each term's occurrences start and end on grapheme boundaries
                assert any(
                    i in starts and i + len(term) in starts
                    for i in (m.start() for m in regex.finditer(regex.escape(term), sentence, overlapped=True))
                ), f"{term!r} cuts a grapheme cluster of {sentence!r}"


def test_thai_without_dictionary_falls_back_to_grapheme_bigrams(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ICU, a Thai run becomes bigrams of grapheme clusters (a vowel sign stays on its consonant)."""
    from fastrag import analysis

    monkeypatch.setattr(analysis, "_segmenter", lambda: None)
    assert SURFACE.analyze("แมวกิน", for_query=True) == ["แม", "มว", "วกิ", "กิน"]
    assert SURFACE.analyze("แมวกิน") == ["แม", "มว", "วกิ", "กิน", "แ", "ม", "ว", "กิ", "น"]
    assert SURFACE.analyze("กิ", for_query=True) == ["กิ"]


def test_every_snowball_language_has_its_stemmer() -> None:
    """Issue 14.3: Arabic, Greek, Hindi, Nepali, Romanian, Tamil, Turkish, Indonesian, ... by language code."""
    cases = {
        "ar": ("المكتبات", "مكتب"), "el": ("βιβλία", "βιβλ"), "hi": ("किताबें", "किताब"),
        "ro": ("cărțile", "cărț"), "tr": ("kitapları", "kitap"), "id": ("membaca", "baca"),
        "ru": ("книгами", "книг"), "de": ("Häuser", "haus"), "ne": ("किताबहरू", "किताब"),
    }
    for code, (word, stem) in cases.items():
        assert code in SNOWBALL_LANGUAGES
        assert Analyzer(code).analyze(word) == [stem], code
    for code in ("cs", "pl", "fa", "et", "ta"):
        assert Analyzer(code).stem, code


def test_english_analysis_is_unchanged_for_plain_text() -> None:
    """English terms are those of fastrag's analysis before issue 14 (stored postings stay valid)."""
    english = Analyzer("en")
    assert english.analyze("The runners' 3.14 e.g. can't snake_case Running-shoes") == [
        "runner", "3", "14", "e", "g", "can", "t", "snake", "case", "run", "shoe",
    ]
    assert english.analyze("Naïve café in Zürich") == ["naïv", "café", "zürich"]
