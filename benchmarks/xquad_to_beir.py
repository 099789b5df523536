"""XQuAD (https://github.com/google-deepmind/xquad) as passage retrieval in BEIR layout, as ``../shared`` holds
its en, de, es, ru and zh: each paragraph is a document, each question a query whose one relevant document is
its paragraph. Paragraph ids are the English file's ``<title>_<index>`` for every language (the files are
aligned paragraph by paragraph), so the same id is the same paragraph translated.

Nothing is downloaded: give the XQuAD files you have. Then evaluate with the language's analysis::

    python benchmarks/xquad_to_beir.py xquad.en.json xquad.hi.json --out /data/beir/xquad-hi
    fastrag eval /data/beir/xquad-hi --language hi
    python benchmarks/languages.py --dataset /data/beir/xquad-hi:hi --out /tmp/languages-hi.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def convert(english: Path, source: Path, out: Path) -> tuple[int, int]:
    """Write ``out/corpus.jsonl``, ``out/queries.jsonl`` and ``out/qrels/test.tsv`` from the XQuAD file
    ``source``, with paragraph ids from ``english``; returns (paragraphs, questions).

    Raises:
        ValueError: the two files do not hold the same number of paragraphs.
    """
    ids = [
        f"{article['title']}_{i}"
        for article in json.loads(english.read_text(encoding="utf-8"))["data"]
        for i, _ in enumerate(article["paragraphs"])
    ]
    paragraphs = [p for a in json.loads(source.read_text(encoding="utf-8"))["data"] for p in a["paragraphs"]]
    if len(paragraphs) != len(ids):
        raise ValueError(f"{source} has {len(paragraphs)} paragraphs, {english} has {len(ids)}: not aligned")
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    questions = 0
    with (
        (out / "corpus.jsonl").open("w", encoding="utf-8") as corpus,
        (out / "queries.jsonl").open("w", encoding="utf-8") as queries,
        (out / "qrels" / "test.tsv").open("w", encoding="utf-8") as qrels,
    ):
        qrels.write("query-id\tcorpus-id\tscore\n")
        for paragraph_id, paragraph in zip(ids, paragraphs, strict=True):
            corpus.write(json.dumps({"_id": paragraph_id, "title": "", "text": paragraph["context"]}, ensure_ascii=False) + "\n")
            for qa in paragraph["qas"]:
                queries.write(json.dumps({"_id": qa["id"], "text": qa["question"]}, ensure_ascii=False) + "\n")
                qrels.write(f"{qa['id']}\t{paragraph_id}\t1\n")
                questions += 1
    return len(ids), questions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("english", type=Path, help="xquad.en.json (paragraph ids)")
    parser.add_argument("source", type=Path, help="the language's file, e.g. xquad.hi.json")
    parser.add_argument("--out", type=Path, required=True, help="the BEIR folder to write")
    args = parser.parse_args()
    paragraphs, questions = convert(args.english, args.source, args.out)
    print(f"{args.out}: {paragraphs} paragraphs, {questions} questions")


if __name__ == "__main__":
    main()
