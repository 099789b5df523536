"""End-to-end evaluation of a retrieval mode on a BEIR folder (what ``fastrag eval`` runs)."""

from __future__ import annotations

from pathlib import Path

from fastrag.config import Settings, build_retriever, open_embedder, open_stores
from fastrag.evaluation.beir import load_beir
from fastrag.evaluation.metrics import evaluate
from fastrag.evaluation.runner import run_retrieval
from fastrag.retrieval._validation import check_positive_int

__all__ = ["evaluate_beir"]

_BATCH = 1024


async def evaluate_beir(
    dataset_dir: str | Path,
    *,
    split: str = "test",
    mode: str = "hybrid",
    top_k: int = 100,
    store_url: str,
    embedding_model: str | None = None,
    lexical_store_url: str | None = None,
    concurrency: int = 8,
) -> dict[str, float]:
    """Index a BEIR corpus (one document per corpus entry, no chunking), run its queries, score the run.

    Args:
        dataset_dir: a BEIR folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/{split}.tsv``).
        split: which qrels file.
        mode: ``"hybrid"``, ``"vector"`` or ``"keyword"``.
        top_k: documents retrieved per query; metrics at cut-offs above it see only ``top_k`` documents.
        store_url: where to index (a fresh store is expected; existing ids are replaced).
        embedding_model: Model2Vec model (default: the shipped one); not loaded in keyword mode.
        lexical_store_url: a second store for BM25 (for a vector store without full text).
        concurrency: queries in flight at once.

    Returns:
        Mean nDCG, Recall and MRR at 10 and 100 over the split's queries (keys such as ``"ndcg@10"``).

    Raises:
        IngestionError: the dataset is missing or malformed.
        BackendError: the store failed.
    """
    check_positive_int(top_k, "top_k")
    dataset = load_beir(dataset_dir, split=split)
    docs = list(dataset.corpus.values())
    embedder = open_embedder(embedding_model) if mode != "keyword" else None
    try:
        name = embedder.name if embedder is not None else None
        settings = Settings(store=store_url, lexical_store=lexical_store_url)
        async with open_stores(settings, embedding_model=name) as (store, lexical):
            for start in range(0, len(docs), _BATCH):
                batch = docs[start : start + _BATCH]
                embeddings = None
                if embedder is not None:
                    texts = [f"{d.metadata.get('title', '')}\n{d.content}".strip() for d in batch]
                    embeddings = await embedder.embed_documents(texts)
                if mode != "keyword":
                    await store.upsert(batch, embeddings=embeddings)
                if lexical is not store or mode == "keyword":
                    await lexical.upsert(batch, embeddings=embeddings if lexical is store else None)
            retriever = build_retriever(mode, store=store, embedder=embedder, lexical_store=lexical)
            run = await run_retrieval(retriever, dataset.queries, k=top_k, concurrency=concurrency)
    finally:
        if embedder is not None:
            await embedder.aclose()
    return evaluate(run, dataset.qrels, ks=(10, 100))
