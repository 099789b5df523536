"""Word segmentation candidates for BM25 analysis, side by side: correctness on combining-mark scripts and speed.

Issue 14 asks for word boundaries by Unicode's rules (UAX #29) from a well-kept library. The candidates:

* ``re [^\\W_]+`` (fastrag's tokeniser before issue 14): runs of what Python's ``str.isalnum`` calls
  letters and digits. Combining marks (Unicode category M) are not in it, so Devanagari, Bengali, Tamil,
  Thai, ... words are cut at every vowel sign and virama.
* ``regex [^\\W_]+``: the same pattern in the ``regex`` module, whose ``\\w`` is Unicode's (UTS #18:
  Alphabetic, marks, decimal digits, connector punctuation, join controls), so marks stay in their word.
* ``regex (?w) UAX #29``: the ``regex`` module's default Unicode word boundaries (``WORD`` flag): the full
  UAX #29 rules (``can't``, ``3.14`` and ``e.g`` are one word); no dictionary for Thai-family scripts.
* ``PyICU BreakIterator``: ICU's word break iterator (UAX #29 plus dictionaries for Thai, Lao, Khmer,
  Myanmar, Chinese and Japanese), through ``pyicu-wheels``; words are the segments whose rule status is
  not "none" (letters, numbers, kana, ideographs).
* ``icu4py WordBreaker``: ICU's word break iterator through ``icu4py`` (segments only, no rule status:
  segments without a letter or digit are dropped in Python).
* ``fastrag Analyzer`` (the tokeniser as shipped now): ``regex [^\\W_]+`` for every script, and ICU's
  dictionary (PyICU) only for runs of Thai, Lao, Khmer and Myanmar letters (CJK runs whole, as before).

Correctness: the share of terms that begin with a combining mark (a vowel sign or virama cut from its
consonant) and the share of one-character terms, on hand-made sentences per script. Speed: tokens per
second of ``tokens(text)`` (NFKC and case folding excluded: every candidate gets the same folded text) on
SciFact (English), XQuAD German, Russian and Chinese, and the hand-made sentences repeated.

Run: ``python benchmarks/word_segmentation.py [--write]`` (about a minute; ``--write`` saves
``benchmarks/results/word_segmentation.md``). Candidates whose package is missing are listed as such.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from multilingual_sentences import SENTENCES

DATASETS = ROOT.parent / "shared" / "datasets"
if not DATASETS.is_dir():
    DATASETS = Path("/work/shared/datasets")


def candidates() -> dict[str, object]:
    import re

    out: dict[str, object] = {}
    pattern = re.compile(r"[^\W_]+")
    out["re [^\\W_]+ (before)"] = pattern.findall
    try:
        import regex
    except ImportError:
        out["regex [^\\W_]+"] = "regex not installed"
        out["regex (?w) UAX #29"] = "regex not installed"
    else:
        out["regex [^\\W_]+"] = regex.compile(r"[^\W_]+").findall
        boundary = regex.compile(r"(?wV1)\b")
        word = regex.compile(r"[^\W_]")

        def uax29(text: str) -> list[str]:
            return [s for s in boundary.split(text) if word.search(s)]

        out["regex (?w) UAX #29"] = uax29
    try:
        import icu
    except ImportError:
        out["PyICU BreakIterator"] = "pyicu-wheels not installed"
    else:
        breaker = icu.BreakIterator.createWordInstance(icu.Locale.getRoot())

        def pyicu(text: str) -> list[str]:
            breaker.setText(text)
            out, start = [], 0
            for end in breaker:
                if breaker.getRuleStatus() >= 100:  # UBRK_WORD_NONE_LIMIT: not spaces or punctuation
                    out.append(text[start:end])
                start = end
            return out

        out["PyICU BreakIterator"] = pyicu
    try:
        import regex as _regex
        from icu4py.breakers import WordBreaker
    except ImportError:
        out["icu4py WordBreaker"] = "icu4py not installed"
    else:
        letter = _regex.compile(r"[^\W_]")

        def icu4py(text: str) -> list[str]:
            return [text[a:b] for a, b in WordBreaker(text, "und").segments() if letter.search(text, a, b)]

        out["icu4py WordBreaker"] = icu4py
    from fastrag.analysis import Analyzer

    analyzer = Analyzer(None, stem=False, stopwords=False)
    out["fastrag Analyzer (now)"] = analyzer.tokens
    return out


def corpora() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, limit in (("scifact", 2000), ("xquad-de", 240), ("xquad-ru", 240), ("xquad-zh", 240)):
        path = DATASETS / name / "corpus.jsonl"
        if path.exists():
            with path.open(encoding="utf-8") as f:
                rows = [json.loads(line) for _, line in zip(range(limit), f, strict=False)]
            out[name] = [f"{r.get('title', '')}\n{r['text']}" for r in rows]
    for lang in ("hi", "bn", "ta", "th", "lo", "km", "my", "ar", "el", "tr"):
        out[lang] = [" ".join(SENTENCES[lang])] * 200
    return out


def analysis_cost(raw: dict[str, list[str]]) -> list[str]:
    """The whole English analysis (NFKC, case folding, words, stopwords, Snowball stemming) as fastrag did it
    before issue 14 (Python's re words) and now, on the raw texts: what BM25 indexing pays per token."""
    import re

    from fastrag.analysis import ENGLISH_STOPWORDS, Analyzer

    now = Analyzer("en")
    word = re.compile(r"[^\W_]+")
    stem = now._stem_word  # the same cached Snowball stemmer for both

    def before(text: str) -> list[str]:
        folded = unicodedata.normalize("NFKC", text).casefold()
        return [stem(t) for t in word.findall(folded) if t not in ENGLISH_STOPWORDS]

    lines = ["", "## The whole English analysis per token, before and now (microseconds per token)", "",
             "| corpus | before issue 14 | now | now / before |", "| --- | --- | --- | --- |"]
    for corpus in ("scifact", "xquad-de", "xquad-ru"):
        docs = raw.get(corpus)
        if not docs:
            continue
        best = {"before": float("inf"), "now": float("inf")}
        n = 0
        for _ in range(5):
            for name, fn in (("before", before), ("now", now.analyze)):
                start = time.perf_counter()
                n = sum(len(fn(d)) for d in docs)
                best[name] = min(best[name], time.perf_counter() - start)
        b, w = best["before"] / n * 1e6, best["now"] / n * 1e6
        lines.append(f"| {corpus} | {b:.2f} | {w:.2f} | {w / b:.2f}x |")
    return lines


def fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="save benchmarks/results/word_segmentation.md")
    args = parser.parse_args()
    cands = candidates()
    texts = {name: [fold(t) for t in docs] for name, docs in corpora().items()}
    import regex

    mark = regex.compile(r"^\p{M}")
    lines = [
        "# Word segmentation candidates (issue 14)",
        "",
        (f"`python benchmarks/word_segmentation.py --write`, CPython {platform.python_version()}, {platform.machine()}; "
         "speed is tokens/s of the segmentation alone (text already NFKC-normalised and case-folded), "
         "best of 3 runs."),
        "",
        "## Correctness on hand-made sentences: terms starting with a combining mark / one-character terms",
        "",
        "| candidate | " + " | ".join(n for n in texts if len(n) <= 3) + " |",
        "| --- |" + " --- |" * sum(1 for n in texts if len(n) <= 3),
    ]
    for name, fn in cands.items():
        if isinstance(fn, str):
            continue
        cells = []
        for corpus, docs in texts.items():
            if len(corpus) > 3:
                continue
            terms = fn(docs[0])
            split = sum(1 for t in terms if mark.match(t)) / max(1, len(terms))
            single = sum(1 for t in terms if len(t) == 1) / max(1, len(terms))
            cells.append(f"{split:.0%} / {single:.0%}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "## Speed: tokens per second (thousands)", "",
              "Candidates take turns on each corpus, five rounds, best round kept: a busy machine slows "
              "them alike.", "",
              "| candidate | " + " | ".join(texts) + " |", "| --- |" + " --- |" * len(texts)]
    timed = {name: fn for name, fn in cands.items() if not isinstance(fn, str)}
    best: dict[tuple[str, str], float] = {}
    counts: dict[tuple[str, str], int] = {}
    for corpus, docs in texts.items():
        for _ in range(5):
            for name, fn in timed.items():
                start = time.perf_counter()
                counts[name, corpus] = sum(len(fn(d)) for d in docs)
                elapsed = time.perf_counter() - start
                best[name, corpus] = min(best.get((name, corpus), float("inf")), elapsed)
    for name, fn in cands.items():
        if isinstance(fn, str):
            lines.append(f"| {name} | " + " | ".join(["–"] * len(texts)) + f" |  ({fn})")
            continue
        cells = [f"{counts[name, c] / best[name, c] / 1000:,.0f}" for c in texts]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += analysis_cost(corpora())
    report = "\n".join(lines) + "\n"
    print(report)
    if args.write:
        out = ROOT / "benchmarks" / "results" / "word_segmentation.md"
        out.write_text(report, encoding="utf-8")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
