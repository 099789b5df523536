"""Measure retrieval quality: load a BEIR dataset, run a retriever over its queries, score the rankings.

::

    dataset = load_beir("../shared/datasets/scifact", split="test")
    run = await run_retrieval(retriever, dataset.queries, k=100)
    scores = evaluate(run, dataset.qrels, ks=(10, 100))   # {"ndcg@10": ..., "recall@100": ..., ...}

Metrics follow trec_eval (as pytrec_eval computes them for BEIR); see :mod:`fastrag.evaluation.metrics`.
"""

from fastrag.evaluation.beir import BeirDataset, iter_corpus, load_beir
from fastrag.evaluation.metrics import METRICS, evaluate, mrr_at_k, ndcg_at_k, recall_at_k
from fastrag.evaluation.runner import run_retrieval

__all__ = [
    "METRICS",
    "BeirDataset",
    "evaluate",
    "iter_corpus",
    "load_beir",
    "mrr_at_k",
    "ndcg_at_k",
    "recall_at_k",
    "run_retrieval",
]
