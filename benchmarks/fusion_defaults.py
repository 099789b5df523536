"""Evidence for the default hybrid fusion: nDCG@10 / Recall@100 of fusion settings on BEIR folders.

Each branch (BM25 on the SQLite store; k-NN with a Model2Vec model) runs once per query with
``candidate_k`` candidates; every fusion setting is then applied to the same branch results, so the table
compares fusions and nothing else.

Run: python benchmarks/fusion_defaults.py [--datasets scifact xquad-en] [--model PATH] [--candidate-k 100]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import anyio

from fastrag.config import open_embedder
from fastrag.evaluation import evaluate, load_beir, run_retrieval
from fastrag.retrieval import BM25Retriever, ReciprocalRankFusion, VectorRetriever, WeightedScoreFusion
from fastrag.vector_store.sqlite import SQLiteVectorStore

SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets"

FUSIONS = {
    "rrf k=60 1:1": ReciprocalRankFusion(60),
    "rrf k=60 bm25 2:1": ReciprocalRankFusion(60, weights={"bm25": 2, "vector": 1}),
    "rrf k=60 bm25 3:1": ReciprocalRankFusion(60, weights={"bm25": 3, "vector": 1}),
    "min_max 0.5/0.5": WeightedScoreFusion(normalization="min_max"),
    "min_max bm25 0.7": WeightedScoreFusion({"bm25": 0.7, "vector": 0.3}, normalization="min_max"),
    "min_max bm25 0.8": WeightedScoreFusion({"bm25": 0.8, "vector": 0.2}, normalization="min_max"),
    "min_max bm25 0.9": WeightedScoreFusion({"bm25": 0.9, "vector": 0.1}, normalization="min_max"),
    "z_score 0.5/0.5": WeightedScoreFusion(normalization="z_score"),
    "z_score bm25 0.7": WeightedScoreFusion({"bm25": 0.7, "vector": 0.3}, normalization="z_score"),
    "z_score bm25 0.8": WeightedScoreFusion({"bm25": 0.8, "vector": 0.2}, normalization="z_score"),
}


async def branch_runs(dataset_dir: Path, model: str | None, candidate_k: int):
    data = load_beir(dataset_dir)
    docs = list(data.corpus.values())
    async with open_embedder(model) as embedder, SQLiteVectorStore(":memory:") as store:
        texts = [f"{d.metadata.get('title', '')}\n{d.content}".strip() for d in docs]
        await store.upsert(docs, embeddings=await embedder.embed_documents(texts))
        results = {}
        for name, retriever in [("bm25", BM25Retriever(store=store)),
                                ("vector", VectorRetriever(vector_store=store, embedder=embedder))]:
            queries = list(data.queries.items())
            lists = {}

            async def one(qid: str, text: str, retriever=retriever, lists=lists) -> None:
                lists[qid] = await retriever.retrieve(text, k=candidate_k)

            async with anyio.create_task_group() as tg:
                for qid, text in queries:
                    tg.start_soon(one, qid, text)
            results[name] = lists
    return data, results


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--datasets", nargs="+", default=["scifact", "xquad-en"])
    parser.add_argument("--model", default=None)
    parser.add_argument("--candidate-k", type=int, default=100)
    args = parser.parse_args()
    print(f"| dataset | run | nDCG@10 | Recall@100 |\n|---|---|---|---|")
    for name in args.datasets:
        data, results = await branch_runs(SHARED / name, args.model, args.candidate_k)
        for branch, lists in results.items():
            m = evaluate({q: [d.id for d in docs] for q, docs in lists.items()}, data.qrels)
            print(f"| {name} | {branch} alone | {m['ndcg@10']:.4f} | {m['recall@100']:.4f} |")
        for label, fusion in FUSIONS.items():
            run = {q: [d.id for d in fusion.fuse({b: results[b][q] for b in results}, k=100)] for q in data.queries}
            m = evaluate(run, data.qrels)
            print(f"| {name} | {label} | {m['ndcg@10']:.4f} | {m['recall@100']:.4f} |")


if __name__ == "__main__":
    anyio.run(main)
