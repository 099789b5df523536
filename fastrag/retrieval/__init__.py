"""Retrievers: dense k-NN, BM25, hybrid fusion, and path filtering."""

from fastrag.retrieval.bm25 import BM25Retriever
from fastrag.retrieval.fusion import ReciprocalRankFusion, WeightedScoreFusion
from fastrag.retrieval.hybrid import HybridRetriever, default_fusion
from fastrag.retrieval.path_filter import PathFilterRetriever
from fastrag.retrieval.vector import VectorRetriever

__all__ = [
    "BM25Retriever",
    "HybridRetriever",
    "PathFilterRetriever",
    "ReciprocalRankFusion",
    "VectorRetriever",
    "WeightedScoreFusion",
    "default_fusion",
]
