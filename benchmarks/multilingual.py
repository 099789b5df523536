"""Multilingual retrieval on XQuAD: Recall@10 per question language, duplicates and translation choice.

The corpus is XQuAD's 240 paragraphs in English, German, Spanish, Russian and Chinese (1,200 documents; the
same ``_id`` is the same paragraph in another language), indexed as ``/{lang}/xquad/{_id}``. Every question
of every language (1,190 per language) is asked; the right paragraph is the one its qrels name.

Configurations, all BM25 in the SQLite store:

* ``bm25 (English analysis)``: the documents carry no language, so everything is analysed in English, as
  fastrag did before per-language analysis; no language handling at query time.
* ``bm25 (per-language analysis)``: ``metadata["language"]`` set, so each paragraph is stemmed in its
  language, and each question in its detected language (``BM25Retriever(detector=...)``).
* ``language-aware``: the same wrapped in ``LanguageAwareRetriever(candidate_k=40,
  other_language_weight=0.8)``: one translation per paragraph, the asker's when it was retrieved. The
  question's language is decided by ``LanguageAwareRetriever.decide_language``: by the candidate
  translation that holds at least two more of the question's distinctive words than any other language's,
  else by Lingua's confidences on the question without the words its candidate translations share, and by
  the first-stage ranking when Lingua is unsure (how often that is right is the last row; Lingua's own
  label on the whole question is the row above it; the rule that decided, per language, the rows below).
* ``language-aware, language given``: the same, told the question's language (``retrieve(...,
  language=lang)``, as an application that knows the user's locale would), so detection errors are gone.
* ``monolingual reference``: each language's 240 paragraphs alone, per-language analysis (what a
  single-language site gets; an upper bound for the multilingual store).

Columns:

* Recall@10: the right paragraph, in any language, is in the top 10.
* own-language Recall@10: the right paragraph in the question's language is in the top 10.
* duplicates: share of questions whose top 10 holds some paragraph more than once.
* wrong translation: share of questions whose top 10 holds a paragraph in another language although its
  question-language version was among that configuration's first 40 results.
* own version kept: of the questions whose top 10 holds a paragraph whose question-language version was
  among the first 40 results (on XQuAD, every question), the share for which every such paragraph is
  returned in the question's language (issue #4's acceptance: 100%).

Each question the language-aware configuration gets wrong that way is printed below the table with the
decision (Lingua's confidences, the neutral words, each language's matched words and the first-stage
positions of each language's best translation).
* ms / query: mean wall-clock time of one ``retrieve(question, k=10)``, one question at a time.

``--sensitivity`` instead counts, for the language-aware configuration, the questions whose own-language
version was a candidate but not returned as the decision's constants vary (``trust_confidence`` x
``plausible_confidence``; ``min_matched_words`` x ``plausible_confidence``), with other first stages
(``candidate_k`` 20 and 100; English analysis of everything, as without ``metadata["language"]``), and
on two halves of the questions split by question id (the same id is the same question in every language),
to tell how much the defaults were fitted to these 5,950 questions.

Run from the repository root (two to three minutes on 2 cores, ``--sensitivity`` about ten; needs the
``language`` extra)::

    python benchmarks/multilingual.py                  # print the table
    python benchmarks/multilingual.py --write          # and update the table in docs/multilingual.md
    python benchmarks/multilingual.py --sensitivity    # the sensitivity tables of docs/multilingual.md
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio

from fastrag.language import LinguaLanguageDetector
from fastrag.models import Document
from fastrag.retrieval import BM25Retriever
from fastrag.retrieval.language import QUERY_LANGUAGE, LanguageAwareRetriever, split_locale
from fastrag.retrieval.language import MIN_MATCHED_WORDS, PLAUSIBLE_CONFIDENCE, TRUST_CONFIDENCE
from fastrag.vector_store.sqlite import SQLiteVectorStore

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ROOT.parent / "shared" / "datasets"
DOC = ROOT / "docs" / "multilingual.md"
LANGUAGES = ("en", "de", "es", "ru", "zh")
START, END = "<!-- multilingual-results:start -->", "<!-- multilingual-results:end -->"


@dataclass
class Language:
    docs: list[Document]
    queries: list[tuple[str, str]]
    qrels: dict[str, str]


def load(lang: str, *, with_language: bool = True) -> Language:
    folder = DATASETS / f"xquad-{lang}"
    docs = []
    for line in (folder / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        meta = {"source_uri": f"/{lang}/xquad/{row['_id']}"}
        if with_language:
            meta["language"] = lang
        docs.append(Document(id=f"{lang}:{row['_id']}", content=row["text"], metadata=meta))
    queries = [(r["_id"], r["text"]) for r in map(json.loads, (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines())]
    qrels = dict(line.split("\t")[:2] for line in (folder / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:])
    return Language(docs, queries, qrels)


@dataclass
class Row:
    config: str
    lang: str
    recall: float
    own_recall: float
    duplicates: float
    wrong_translation: float
    own_kept: int
    own_eligible: int
    ms_per_query: float
    failures: list[tuple[str, str, list[Document], list[Document]]]
    decided: float | None = None
    decided_by: dict[str, int] | None = None


async def measure(
    config: str, lang: str, data: Language, retrieve: Callable[[str, int], object], candidates: Callable[[str], object]
) -> Row:
    recall = own = dup = wrong = kept = eligible = decided = 0
    decided_by: dict[str, int] = {}
    elapsed = 0.0
    failures = []
    for query_id, question in data.queries:
        start = time.perf_counter()
        top: Sequence[Document] = await retrieve(question, 10)  # type: ignore[misc]
        elapsed += time.perf_counter() - start
        target = data.qrels[query_id]
        pages = [split_locale(d.metadata["source_uri"])[1] for d in top]
        paragraph_ids = [d.id.split(":", 1)[1] for d in top]
        recall += target in paragraph_ids
        own += f"{lang}:{target}" in {d.id for d in top}
        dup += len(pages) != len(set(pages))
        pool: Sequence[Document] = await candidates(question)  # type: ignore[misc]
        own_pages = {split_locale(d.metadata["source_uri"])[1] for d in pool if d.id.startswith(f"{lang}:")}
        bad = any(not d.id.startswith(f"{lang}:") and page in own_pages for d, page in zip(top, pages, strict=True))
        wrong += bad
        if own_pages & set(pages):
            eligible += 1
            kept += not bad
            if bad:
                failures.append((query_id, question, list(top), list(pool)))
        decided += bool(top) and top[0].metadata.get(QUERY_LANGUAGE, {}).get("language") == lang
        rule = bool(top) and top[0].metadata.get(QUERY_LANGUAGE, {}).get("decided_by")
        if rule:
            decided_by[rule] = decided_by.get(rule, 0) + 1
    n = len(data.queries)
    aware = bool(top) and QUERY_LANGUAGE in top[0].metadata
    return Row(config, lang, recall / n, own / n, dup / n, wrong / n, kept, eligible, 1000 * elapsed / n, failures,
               decided / n if aware else None, decided_by if aware else None)  # fmt: skip


async def run() -> tuple[list[Row], dict[str, float], list[str]]:
    detector = LinguaLanguageDetector(list(LANGUAGES), preload=True)
    data = {lang: load(lang) for lang in LANGUAGES}
    rows: list[Row] = []
    accuracy: dict[str, float] = {}
    async with SQLiteVectorStore(":memory:") as english, SQLiteVectorStore(":memory:") as multi:
        await english.upsert([d for lang in LANGUAGES for d in load(lang, with_language=False).docs])
        await multi.upsert([d for lang in LANGUAGES for d in data[lang].docs])
        plain = BM25Retriever(store=english)
        per_language = BM25Retriever(store=multi, detector=detector)
        aware = LanguageAwareRetriever(retriever=per_language, detector=detector, candidate_k=40)
        for lang in LANGUAGES:
            d = data[lang]
            rows.append(await measure("bm25 (English analysis)", lang, d,
                                      lambda q, k: plain.retrieve(q, k=k), lambda q: plain.retrieve(q, k=40)))  # fmt: skip
            rows.append(await measure("bm25 (per-language analysis)", lang, d,
                                      lambda q, k: per_language.retrieve(q, k=k),
                                      lambda q: per_language.retrieve(q, k=40)))  # fmt: skip
            rows.append(await measure("language-aware (per-language bm25)", lang, d,
                                      lambda q, k: aware.retrieve(q, k=k), lambda q: per_language.retrieve(q, k=40)))  # fmt: skip
            given = BM25Retriever(store=multi, language=lang)
            told = LanguageAwareRetriever(retriever=given, detector=detector, candidate_k=40)
            rows.append(await measure("language-aware, language given", lang, d,
                                      lambda q, k: told.retrieve(q, k=k, language=lang),  # noqa: B023
                                      lambda q: given.retrieve(q, k=40)))  # fmt: skip
            accuracy[lang] = sum(detector.detect(q) == lang for _, q in d.queries) / len(d.queries)
        explained = [await explain(aware, lang, failure) for lang in LANGUAGES
                     for row in rows if row.config.startswith("language-aware (") and row.lang == lang
                     for failure in row.failures]  # fmt: skip
    for lang in LANGUAGES:
        async with SQLiteVectorStore(":memory:") as mono:
            await mono.upsert(data[lang].docs)
            bm25 = BM25Retriever(store=mono, language=lang)
            rows.append(await measure("monolingual reference", lang, data[lang],
                                      lambda q, k: bm25.retrieve(q, k=k), lambda q: bm25.retrieve(q, k=40)))  # fmt: skip
    return rows, accuracy, explained


async def explain(aware: LanguageAwareRetriever, lang: str, failure: tuple[str, str, list[Document], list[Document]]) -> str:
    """One line per question whose top 10 holds a paragraph in another language although its
    question-language version was a candidate: the decision and the evidence it saw."""
    query_id, question, top, pool = failure
    decision = await aware.decide_language(question, candidates=pool)
    confidences = ", ".join(f"{code} {value:.3f}" for code, value in decision.confidences.items() if value >= 0.0005)
    positions = ", ".join(f"{code} {pos}" for code, pos in decision.best_positions.items())
    matched = ", ".join(f"{code} {n}" for code, n in decision.matched_words.items())
    own = [d.id for d in pool if d.id.startswith(f"{lang}:")]
    returned = [d.id for d in top if not d.id.startswith(f"{lang}:")
                and any(o.split(":", 1)[1] == d.id.split(":", 1)[1] for o in own)]  # fmt: skip
    return (f"- {lang} `{query_id}` {question!r}: decided {decision.language} ({decision.decided_by}) on "
            f"{' '.join(decision.text.split())!r}; confidences {confidences}; neutral words {list(decision.neutral_words)}; "
            f"matched words by language: {matched}; "
            f"best multi-translation position by language: {positions}; returned {returned} although "
            f"{[f'{lang}:' + r.split(':', 1)[1] for r in returned]} were candidates")  # fmt: skip


def table(rows: list[Row], accuracy: dict[str, float]) -> str:
    configs = list(dict.fromkeys(r.config for r in rows))
    out = ["| configuration | metric | " + " | ".join(LANGUAGES) + " |", "| --- | --- | " + " | ".join("---" for _ in LANGUAGES) + " |"]
    for config in configs:
        by_lang = {r.lang: r for r in rows if r.config == config}
        for label, attr, fmt in (
            ("Recall@10", "recall", "{:.3f}"),
            ("own-language Recall@10", "own_recall", "{:.3f}"),
            ("duplicates", "duplicates", "{:.1%}"),
            ("wrong translation", "wrong_translation", "{:.1%}"),
            ("own version kept", "own_kept", ""),
            ("ms / query", "ms_per_query", "{:.1f}"),
        ):
            if config == "monolingual reference" and attr in ("duplicates", "wrong_translation", "own_recall", "own_kept"):
                continue
            if attr == "own_kept":
                cells = [f"{r.own_kept / r.own_eligible:.2%}" if r.own_eligible else "-"
                         for r in (by_lang[lang] for lang in LANGUAGES)]  # fmt: skip
            else:
                cells = [fmt.format(getattr(by_lang[lang], attr)) for lang in LANGUAGES]
            out.append(f"| {config} | {label} | " + " | ".join(cells) + " |")
    out.append("| Lingua | question language detected | " + " | ".join(f"{accuracy[lang]:.1%}" for lang in LANGUAGES) + " |")
    aware = {r.lang: r for r in rows if r.config.startswith("language-aware (")}
    out.append("| language-aware | question language decided | "
               + " | ".join(f"{aware[lang].decided:.2%}" for lang in LANGUAGES) + " |")  # fmt: skip
    for rule in ("matched", "confident", "ranked", "likeliest"):
        out.append(f"| language-aware | decided by {rule} | "
                   + " | ".join(str((aware[lang].decided_by or {}).get(rule, 0)) for lang in LANGUAGES) + " |")  # fmt: skip
    return "\n".join(out)


class Fixed:
    """A first stage that answers with results fetched beforehand (so each setting sees the same candidates)."""

    name = "fixed"

    def __init__(self) -> None:
        self.results: list[Document] = []

    async def retrieve(self, query: str, *, k: int = 10, filter: object = None) -> list[Document]:  # noqa: A002
        return self.results[:k]


async def misses(
    pools: dict[tuple[str, str], tuple[str, list[Document]]], detector: LinguaLanguageDetector, candidate_k: int,
    **settings: float,
) -> list[tuple[str, str]]:
    """The (language, query id) whose own-language version was among the pool but not returned."""
    fixed = Fixed()
    aware = LanguageAwareRetriever(retriever=fixed, detector=detector, candidate_k=candidate_k, **settings)  # type: ignore[arg-type]
    out = []
    for (lang, query_id), (question, pool) in pools.items():
        fixed.results = pool[:candidate_k]
        top = await aware.retrieve(question, k=10)
        own = {split_locale(d.metadata["source_uri"])[1] for d in fixed.results if d.id.startswith(f"{lang}:")}
        if any(not d.id.startswith(f"{lang}:") and split_locale(d.metadata["source_uri"])[1] in own for d in top):
            out.append((lang, query_id))
    return out


async def sensitivity() -> str:
    detector = LinguaLanguageDetector(list(LANGUAGES), preload=True)
    data = {lang: load(lang) for lang in LANGUAGES}
    stages: dict[str, dict[tuple[str, str], tuple[str, list[Document]]]] = {}
    async with SQLiteVectorStore(":memory:") as english, SQLiteVectorStore(":memory:") as multi:
        await english.upsert([d for lang in LANGUAGES for d in load(lang, with_language=False).docs])
        await multi.upsert([d for lang in LANGUAGES for d in data[lang].docs])
        for name, first in (("per-language", BM25Retriever(store=multi, detector=detector)),
                            ("English analysis", BM25Retriever(store=english))):  # fmt: skip
            pools = {}
            for lang in LANGUAGES:
                for query_id, question in data[lang].queries:
                    found = await first.retrieve(question, k=100)
                    if name == "English analysis":  # the documents' language, as the per-language store has it
                        found = [d.with_metadata(language=d.id.split(":", 1)[0]) for d in found]
                    pools[(lang, query_id)] = (question, found)
            stages[name] = pools
    pools = stages["per-language"]
    off = {"min_matched_words": 10**6}
    out = ["Own-language version a candidate but not returned, of 5,950 questions (candidate_k=40, per-language BM25).",
           "", f"`trust_confidence` x `plausible_confidence` (`min_matched_words={MIN_MATCHED_WORDS}`):", ""]  # fmt: skip
    plausibles = (0.05, 0.1, 0.2)
    out += ["| `trust_confidence` \\ `plausible_confidence` | " + " | ".join(map(str, plausibles)) + " |",
            "| --- |" + " --- |" * len(plausibles)]  # fmt: skip
    for trust in (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0):
        cells = [str(len(await misses(pools, detector, 40, trust_confidence=trust, plausible_confidence=p))) for p in plausibles]
        out.append(f"| {trust} | " + " | ".join(cells) + " |")
    out += ["", f"`min_matched_words` x `plausible_confidence` (`trust_confidence={TRUST_CONFIDENCE}`):", "",
            "| `min_matched_words` \\ `plausible_confidence` | " + " | ".join(map(str, plausibles)) + " |",
            "| --- |" + " --- |" * len(plausibles)]  # fmt: skip
    for words in (1, 2, 3, 4):
        cells = [str(len(await misses(pools, detector, 40, min_matched_words=words, plausible_confidence=p))) for p in plausibles]
        out.append(f"| {words} | " + " | ".join(cells) + " |")
    out += ["", "Other first stages (defaults; without the matched-words rule; `min_matched_words` 1 and 3):", "",
            "| first stage | candidate_k | defaults | without the rule | 1 | 3 |", "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for name, k in (("per-language", 20), ("per-language", 40), ("per-language", 100), ("English analysis", 40),
                    ("English analysis", 100)):  # fmt: skip
        cells = [len(await misses(stages[name], detector, k, **settings))
                 for settings in ({}, off, {"min_matched_words": 1}, {"min_matched_words": 3})]  # fmt: skip
        out.append(f"| {name} | {k} | " + " | ".join(map(str, cells)) + " |")
    half = {key: int(hashlib.sha256(key[1].encode()).hexdigest(), 16) % 2 for key in pools}
    grid = [{"min_matched_words": w, "trust_confidence": TRUST_CONFIDENCE, "plausible_confidence": p}
            for w in (1, 2, 3) for p in plausibles]  # fmt: skip
    out += ["", "Split halves (by question id): the settings with fewest misses on one half, measured on the other:", ""]
    for tune in (0, 1):
        tuned = {key: value for key, value in pools.items() if half[key] == tune}
        held = {key: value for key, value in pools.items() if half[key] != tune}
        counts = [len(await misses(tuned, detector, 40, **settings)) for settings in grid]
        best = [settings for settings, n in zip(grid, counts, strict=True) if n == min(counts)]
        held_counts = [len(await misses(held, detector, 40, **settings)) for settings in best]
        default = {"min_matched_words": MIN_MATCHED_WORDS, "trust_confidence": TRUST_CONFIDENCE,
                   "plausible_confidence": PLAUSIBLE_CONFIDENCE}  # fmt: skip
        out.append(f"- tuned on half {tune} ({len(tuned)} questions): {len(best)} of {len(grid)} settings tie at "
                   f"{min(counts)} misses (the defaults {'among them' if default in best else 'not among them'}); on "
                   f"the other half ({len(held)}) they miss {min(held_counts)} to {max(held_counts)}, the defaults "
                   f"{len(await misses(held, detector, 40))}, without the rule {len(await misses(held, detector, 40, **off))}")  # fmt: skip
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"update the table in {DOC.relative_to(ROOT)}")
    parser.add_argument("--sensitivity", action="store_true", help="print the sensitivity tables instead")
    args = parser.parse_args()
    start = time.perf_counter()
    if args.sensitivity:
        print(anyio.run(sensitivity))
        print(f"\n({time.perf_counter() - start:.0f} s)")
        return
    rows, accuracy, explained = anyio.run(run)
    result = table(rows, accuracy)
    if explained:
        result += "\n\nQuestions whose own-language version was a candidate but not returned (language-aware):\n\n"
        result += "\n".join(explained)
    else:
        result += "\n\nEvery question whose own-language version was a candidate got it (language-aware)."
    machine = f"{platform.python_implementation()} {platform.python_version()}, {platform.machine()}"
    footer = (f"\n\nMeasured by `python benchmarks/multilingual.py --write` ({time.perf_counter() - start:.0f} s, "
              f"{machine}); 1,190 questions per language.")  # fmt: skip
    print(result + footer)
    if args.write:
        page = DOC.read_text(encoding="utf-8")
        head, rest = page.split(START, 1)
        _, tail = rest.split(END, 1)
        DOC.write_text(f"{head}{START}\n{result}{footer}\n{END}{tail}", encoding="utf-8")
        print(f"updated {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
