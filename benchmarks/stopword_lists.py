"""Which stopword list for a store of one language (issue 14): keyword nDCG@10 of ``fastrag eval --language``
on the XQuAD languages with a Snowball list, with each candidate list in place of the shipped one.

Candidates: none (fastrag before this change), Snowball's lists as ``bm25s.stopwords`` ships them (what
fastrag ships, :data:`fastrag.analysis.SNOWBALL_STOPWORD_LANGUAGES`), and the lists of three PyPI packages
that ship stopwords for many languages: ``stop-words``, ``stopwordsiso`` (stopwords-iso) and ``stopwords``.
A package that is not installed is left out (``pip install stop-words stopwordsiso stopwords``). Every
list is folded as the analyzer folds text; the candidate replaces the store language's list on both sides.

Run from the repository root (about 2 minutes)::

    python benchmarks/stopword_lists.py        # writes benchmarks/results/stopwords.md
"""

from __future__ import annotations

import importlib
import platform
import sys
import tempfile
import time
import unicodedata
from collections.abc import Callable
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import fastrag.analysis as analysis
from fastrag.evaluation.beir_eval import evaluate_beir

SHARED = ROOT.parent / "shared" / "datasets"
if not SHARED.is_dir():
    SHARED = Path("/work/shared/datasets")
LANGUAGES = [code for code in ("de", "es", "ru") if (SHARED / f"xquad-{code}").is_dir()]
OUT = ROOT / "benchmarks" / "results" / "stopwords.md"


def _package(name: str, lists: Callable[[object, str], object]) -> Callable[[str], frozenset[str]] | None:
    try:
        module = importlib.import_module(name)
    except ImportError:
        return None
    return lambda code: frozenset(lists(module, code) or ())


CANDIDATES: dict[str, Callable[[str], frozenset[str]] | None] = {
    "none": lambda code: frozenset(),
    "Snowball (bm25s.stopwords, shipped)": analysis._snowball_stopwords.__wrapped__,
    "stop-words": _package("stop_words", lambda m, code: m.safe_get_stop_words(code)),  # type: ignore[attr-defined]
    "stopwordsiso": _package("stopwordsiso", lambda m, code: m.stopwords(code)),  # type: ignore[attr-defined]
    "stopwords": _package("stopwords", lambda m, code: m.safe_get_stopwords(code)),  # type: ignore[attr-defined]
}


def keyword_ndcg(code: str, words: Callable[[str], frozenset[str]]) -> float:
    """nDCG@10 of ``fastrag eval xquad-CODE --mode keyword --language CODE`` with ``words`` as the list."""
    shipped = analysis._snowball_stopwords
    analysis._snowball_stopwords = lambda language: frozenset(  # type: ignore[assignment]
        unicodedata.normalize("NFKC", w).casefold() for w in words(language)
    )
    try:
        with tempfile.TemporaryDirectory(prefix="fastrag-stopwords-") as tmp:
            scores = anyio.run(lambda: evaluate_beir(SHARED / f"xquad-{code}", mode="keyword",
                                                     store_url=f"sqlite:///{tmp}/eval.db", language=code))
    finally:
        analysis._snowball_stopwords = shipped  # type: ignore[assignment]
    return scores["ndcg@10"]


def main() -> None:
    started = time.perf_counter()
    rows = []
    for name, words in CANDIDATES.items():
        if words is None:
            print(f"{name}: not installed, left out", flush=True)
            continue
        row = {code: keyword_ndcg(code, words) for code in LANGUAGES}
        sizes = {code: len(words(code)) for code in LANGUAGES}
        rows.append((name, row, sizes))
        print(name, row, flush=True)
    lines = [
        "# Stopword lists for a store of one language: keyword nDCG@10 on XQuAD",
        "",
        (f"`python benchmarks/stopword_lists.py` in {time.perf_counter() - started:.0f} s, CPython "
         f"{platform.python_version()}. `fastrag eval xquad-CODE --mode keyword --language CODE` with each "
         "candidate list as the store language's list (both sides); words in the list in parentheses. bm25s "
         "with the same Snowball stemmer and its stopwords, for reference: de 0.9384, es 0.9598, ru 0.9530 "
         "(`benchmarks/results/languages.md`)."),
        "",
        "| list | " + " | ".join(LANGUAGES) + " |",
        "| --- |" + " --- |" * len(LANGUAGES),
    ]
    for name, row, sizes in rows:
        lines.append(f"| {name} | " + " | ".join(f"{row[c]:.4f} ({sizes[c]})" for c in LANGUAGES) + " |")
    report = "\n".join(lines) + "\n"
    print(report)
    OUT.write_text(report, encoding="utf-8")


if __name__ == "__main__":
    main()
