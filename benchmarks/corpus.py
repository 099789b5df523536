"""The benchmark corpora: BEIR folders in ``../shared/datasets``, the text each system indexes, slices."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from fastrag.evaluation import load_beir
from fastrag.models import Document

SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets"


@dataclass
class Corpus:
    """One dataset split: documents, the text every system indexes for each, judged queries, qrels."""

    name: str
    docs: list[Document]
    texts: list[str]  # "title\\ntext" (what fastrag's BM25 indexes and what every model embeds)
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def doc_text(doc: Document) -> str:
    title = doc.metadata.get("title")
    return f"{title}\n{doc.content}" if isinstance(title, str) and title.strip() else doc.content


def load(name: str, *, max_docs: int | None = None, max_queries: int | None = None, seed: int = 0) -> Corpus:
    """Load ``../shared/datasets/<name>`` (test split). A slice keeps every document judged for the kept
    queries, then fills up to ``max_docs`` with other documents in file order (deterministic)."""
    data = load_beir(SHARED / name, split="test")
    queries = dict(data.queries)
    if max_queries is not None and max_queries < len(queries):
        keep = sorted(random.Random(seed).sample(sorted(queries), max_queries))
        queries = {q: queries[q] for q in keep}
    qrels = {q: data.qrels[q] for q in queries}
    docs = list(data.corpus.values())
    if max_docs is not None and max_docs < len(docs):
        judged = {d for q in qrels.values() for d in q}
        chosen = [d for d in docs if d.id in judged]
        chosen_ids = {d.id for d in chosen}
        chosen += [d for d in docs if d.id not in chosen_ids][: max(0, max_docs - len(chosen))]
        docs = chosen
    return Corpus(name=name, docs=docs, texts=[doc_text(d) for d in docs], queries=queries, qrels=qrels)
