"""BM25 and hybrid quality per language (issue 14): fastrag with and without ``--language``, against bm25s with the
same Snowball stemmer, and against fastrag before issue 14.

For each BEIR folder (default: SciFact and the XQuAD languages under ``../shared/datasets``; any BEIR folder with
``--dataset PATH:CODE``):

* ``fastrag keyword`` / ``fastrag hybrid``: exactly what ``fastrag eval DATASET --mode keyword|hybrid`` runs
  (``fastrag.evaluation.beir_eval.evaluate_beir``: the SQLite store, the shipped static model for the dense
  branch, the shipped default fusion), without a language (English analysis, as before issue 14), and with
  ``--language CODE`` (each document stamped ``metadata["language"]``, each question analysed in the same
  language: that language's Snowball stemmer on both sides);
* ``bm25s``: bm25s 0.3 (Lucene BM25, k1=1.5, b=0.75, its defaults) over ``title + "\\n" + text`` with the same
  Snowball stemmer (PyStemmer) and bm25s's stopword list for the language where it has one; its own
  tokeniser (``\\w\\w+``, so a Chinese run is one token: no bigrams);
* ``before issue 14``: ``benchmarks/results/languages-before.json``, the same ``fastrag eval`` commands run on
  main at 57b2af7 before any of this work (SciFact from ``benchmarks/results/quality-scifact.md``).

Run from the repository root (about 5 minutes on 2 cores)::

    python benchmarks/languages.py                 # writes benchmarks/results/languages.md and .json
    python benchmarks/languages.py --dataset /data/beir/xquad-hi:hi --dataset /data/beir/xquad-th:th
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fastrag.analysis import SNOWBALL_LANGUAGES
from fastrag.evaluation.beir import load_beir
from fastrag.evaluation.beir_eval import evaluate_beir
from fastrag.evaluation.metrics import evaluate

SHARED = ROOT.parent / "shared" / "datasets"
if not SHARED.is_dir():
    SHARED = Path("/work/shared/datasets")
DEFAULT = [("scifact", "en"), ("xquad-en", "en"), ("xquad-de", "de"), ("xquad-es", "es"), ("xquad-ru", "ru"),
           ("xquad-zh", "zh")]
RESULTS = ROOT / "benchmarks" / "results"


def bm25s_run(folder: Path, code: str) -> dict[str, float]:
    import bm25s
    import Stemmer

    dataset = load_beir(folder)
    ids = list(dataset.corpus)
    texts = [f"{d.metadata.get('title', '')}\n{d.content}".strip() for d in dataset.corpus.values()]
    algorithm = SNOWBALL_LANGUAGES.get(code)
    stemmer = Stemmer.Stemmer(algorithm) if algorithm else None
    try:
        bm25s.tokenization._infer_stopwords(code)
        stopwords: str | None = code
    except ValueError:
        stopwords = None
    retriever = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    retriever.index(bm25s.tokenize(texts, stopwords=stopwords, stemmer=stemmer, show_progress=False), show_progress=False)
    run: dict[str, list[str]] = {}
    k = min(100, len(ids))
    for qid, query in dataset.queries.items():
        tokens = bm25s.tokenize([query], stopwords=stopwords, stemmer=stemmer, show_progress=False)
        if not tokens.vocab:
            run[qid] = []
            continue
        docs, scores = retriever.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        run[qid] = [ids[j] for j, s in zip(docs[0], scores[0], strict=True) if s > 0]  # best first
    return evaluate(run, dataset.qrels, ks=(10, 100))


async def mixed_store(folders: list[tuple[Path, str]]) -> list[dict[str, object]]:
    """All the XQuAD languages in one SQLite store, each paragraph with its ``metadata["language"]``: BM25
    nDCG@10 of each language's questions (the relevant paragraph is the one in the question's language)
    when the question is analysed in each language the store holds (no language given: the default), in
    its own language (given), and in English only (what a question without a language got before issue
    14), with the mean time of one ``search_text``."""
    from fastrag.models import Document
    from fastrag.vector_store.sqlite import SQLiteVectorStore

    sets = {code: load_beir(folder) for folder, code in folders}
    rows: list[dict[str, object]] = []
    async with SQLiteVectorStore(":memory:") as store:
        await store.upsert([
            Document(id=f"{code}/{d.id}", content=d.content, metadata={**d.metadata, "language": code})
            for code, dataset in sets.items() for d in dataset.corpus.values()
        ])
        for code, dataset in sets.items():
            qrels = {q: {f"{code}/{d}": r for d, r in rel.items()} for q, rel in dataset.qrels.items()}
            row: dict[str, object] = {"language": code}
            for label, language in (("merged", None), ("given", code), ("english", "en")):
                run: dict[str, list[str]] = {}
                start = time.perf_counter()
                for qid, query in dataset.queries.items():
                    run[qid] = [d.id for d in await store.search_text(query, k=100, language=language)]
                row[f"{label} ms"] = (time.perf_counter() - start) / len(dataset.queries) * 1000
                row[label] = evaluate(run, qrels, ks=(10,))["ndcg@10"]
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


async def fastrag_run(folder: Path, mode: str, language: str | None) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="fastrag-languages-") as tmp:
        return await evaluate_beir(folder, mode=mode, store_url=f"sqlite:///{tmp}/eval.db", language=language)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", action="append", default=[], metavar="PATH:CODE",
                        help="a BEIR folder and its language code (repeatable; default: SciFact and XQuAD)")
    parser.add_argument("--out", type=Path, default=RESULTS / "languages.md")
    parser.add_argument("--mixed-only", action="store_true", help="only the store holding every XQuAD language")
    args = parser.parse_args()
    datasets = [(Path(p.rsplit(":", 1)[0]), p.rsplit(":", 1)[1]) for p in args.dataset] or [
        (SHARED / name, code) for name, code in DEFAULT if (SHARED / name).is_dir()
    ]
    before_path = RESULTS / "languages-before.json"
    recorded = json.loads(before_path.read_text()) if before_path.exists() else {}
    before = recorded.get("results", {})
    before_top10 = recorded.get("hybrid_top_k_10", {}).get("ndcg@10", {})
    started = time.perf_counter()
    rows: list[dict[str, object]] = []
    xquad = [(f, c) for f, c in datasets if f.name.startswith("xquad-")]
    mixed = anyio.run(mixed_store, xquad) if len(xquad) > 1 else []
    for folder, code in [] if args.mixed_only else datasets:
        name = folder.name
        result: dict[str, object] = {"dataset": name, "language": code}
        for mode in ("keyword", "hybrid"):
            result[f"{mode} before"] = before.get(name, {}).get(mode, {}).get("ndcg@10")
            if mode == "hybrid":
                result["hybrid before, top 10"] = before_top10.get(name)
            result[f"{mode} no --language"] = anyio.run(fastrag_run, folder, mode, None)["ndcg@10"]
            result[f"{mode} --language"] = anyio.run(fastrag_run, folder, mode, code)["ndcg@10"]
        result["bm25s"] = bm25s_run(folder, code)["ndcg@10"]
        rows.append(result)
        print(json.dumps(result), flush=True)
    elapsed = time.perf_counter() - started
    columns = ["keyword before", "keyword no --language", "keyword --language", "bm25s", "hybrid before",
               "hybrid before, top 10", "hybrid no --language", "hybrid --language"]

    def cell(value: object) -> str:
        return "–" if value is None else f"{value:.4f}"

    lines = [
        "# nDCG@10 per language: fastrag with and without --language, bm25s with the same stemmer",
        "",
        (f"`python benchmarks/languages.py` in {elapsed:.0f} s, CPython {platform.python_version()}, "
         f"{platform.machine()}. \"before\": `fastrag eval` on main before issue 14 (57b2af7). Hybrid is the "
         "shipped default (static model, default fusion); with `--language` other than English it does not run "
         "the English static model's dense branch (`HybridRetriever(skip_uncovered=True)`), so it equals "
         "keyword. bm25s: Lucene BM25 k1=1.5 b=0.75, the language's Snowball stemmer (PyStemmer) and bm25s's "
         "stopwords for it. \"hybrid before\" is `fastrag eval` at its default `--top-k 100`, which before "
         "issue 13 normalised each branch over 100 candidates, a top 10 no search with k <= 40 returned; "
         "\"hybrid before, top 10\" is `--top-k 10` there, the top 10 a search returned. Since issue 13 the "
         "top 10 does not depend on `--top-k` (each branch normalised over `candidate_k`)."),
        "",
        "| dataset | language | " + " | ".join(columns) + " | keyword --language − bm25s |",
        "| --- | --- |" + " --- |" * (len(columns) + 1),
    ]
    for r in rows:
        gap = r["keyword --language"] - r["bm25s"]  # type: ignore[operator]
        lines.append(f"| {r['dataset']} | {r['language']} | " + " | ".join(cell(r[c]) for c in columns) + f" | {gap:+.4f} |")
    if mixed:
        lines += [
            "",
            "## One store holding every XQuAD language, questions without a language",
            "",
            ("BM25 (SQLite store) over the paragraphs of all the XQuAD languages above, each with its "
             "`metadata[\"language\"]`; nDCG@10 of each language's questions, the relevant paragraph being "
             "the one in the question's language; ms: mean wall time of one `search_text(k=100)`. merged: no "
             "language given, the question analysed in each language the store holds (the default); given: "
             "`language=` the question's; English only: `language=\"en\"`, what a question without a "
             "language got before issue 14."),
            "",
            "| question language | merged (default) | given | English only | merged ms | given ms | English only ms |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for m in mixed:
            lines.append(f"| {m['language']} | {m['merged']:.4f} | {m['given']:.4f} | {m['english']:.4f} | "
                         f"{m['merged ms']:.2f} | {m['given ms']:.2f} | {m['english ms']:.2f} |")
    report = "\n".join(lines) + "\n"
    print(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report, encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
