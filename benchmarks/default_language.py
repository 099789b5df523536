"""Languages without flags (issue 25, point 4): ``fastrag eval`` with no ``--language`` against ``--language``.

For each collection in ``../shared/datasets`` (SciFact and XQuAD de, en, es, ru, zh; or ``--dataset
PATH:CODE``), exactly what these commands run (:func:`fastrag.evaluation.beir_eval.evaluate_beir`, a new
SQLite store each time, the shipped static model for the dense branch):

* ``default keyword``: ``fastrag eval DIR --mode keyword`` (each document's language detected, the
  question analysed as a search without a language is);
* ``keyword --language``: ``fastrag eval DIR --mode keyword --language CODE``;
* ``default hybrid``: ``fastrag eval DIR`` (no flags).

The acceptance of issue 25.4: default hybrid >= default keyword, and default keyword within 0.003 nDCG@10 of
keyword with ``--language``, on every collection. Run from the repository root (about 3 minutes)::

    python benchmarks/default_language.py     # writes benchmarks/results/default_language.md
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fastrag.evaluation.beir_eval import evaluate_beir  # noqa: E402

SHARED = ROOT.parent / "shared" / "datasets"
DEFAULT = [("scifact", "en"), ("xquad-en", "en"), ("xquad-de", "de"), ("xquad-es", "es"), ("xquad-ru", "ru"),
           ("xquad-zh", "zh")]


async def one(folder: Path, mode: str, language: str | None) -> float:
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the skipped dense branch's warning, said in the table instead
        scores = await evaluate_beir(folder, mode=mode, store_url=str(Path(tmp) / "store.db"), language=language)
    return scores["ndcg@10"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", action="append", default=[], help="PATH:CODE of a BEIR folder")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "default_language.md")
    args = parser.parse_args()
    sets = [(Path(p), c) for p, c in (d.rsplit(":", 1) for d in args.dataset)] or [(SHARED / n, c) for n, c in DEFAULT]
    lines = [
        "# Languages without flags (issue 25, point 4)",
        "",
        f"`python benchmarks/default_language.py`, {time.strftime('%Y-%m-%d')}, Python {platform.python_version()}: "
        "`fastrag eval` nDCG@10 on each collection, a new SQLite store per run, the shipped static model.",
        "",
        "| collection | default keyword | keyword --language | default - --language | default hybrid | "
        "hybrid - keyword |",
        "|---|---|---|---|---|---|",
    ]
    for folder, code in sets:
        keyword = anyio.run(one, folder, "keyword", None)
        given = anyio.run(one, folder, "keyword", code)
        hybrid = anyio.run(one, folder, "hybrid", None)
        lines.append(f"| {folder.name} | {keyword:.4f} | {given:.4f} | {keyword - given:+.4f} | {hybrid:.4f} | "
                     f"{hybrid - keyword:+.4f} |")
        print(lines[-1], file=sys.stderr)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
