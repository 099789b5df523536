"""Retrievers: dense k-NN, BM25, hybrid fusion, reranking, language-aware, path filtering, tenant scoping;
results with a status; tracing hits back to their original sections."""

from fastrag.retrieval.bm25 import BM25Retriever
from fastrag.retrieval.fusion import ReciprocalRankFusion, WeightedScoreFusion
from fastrag.retrieval.grouping import GroupingRetriever
from fastrag.retrieval.hybrid import HybridRetriever, default_fusion
from fastrag.retrieval.language import LanguageAwareRetriever
from fastrag.retrieval.limits import DEFAULT_LIMITS, MAX_K, MAX_QUERY_CHARS, RetrievalLimits
from fastrag.retrieval.path_filter import PathFilterRetriever
from fastrag.retrieval.reranking import RerankingRetriever
from fastrag.retrieval.result import RetrievalResult, retrieve_result
from fastrag.retrieval.sections import ParentDocument, SectionIndex, SourceSection, merge_chunks
from fastrag.retrieval.tenant import TenantScopedRetriever
from fastrag.retrieval.vector import VectorRetriever

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_K",
    "MAX_QUERY_CHARS",
    "BM25Retriever",
    "GroupingRetriever",
    "HybridRetriever",
    "LanguageAwareRetriever",
    "ParentDocument",
    "PathFilterRetriever",
    "ReciprocalRankFusion",
    "RetrievalLimits",
    "RerankingRetriever",
    "RetrievalResult",
    "SectionIndex",
    "SourceSection",
    "TenantScopedRetriever",
    "VectorRetriever",
    "WeightedScoreFusion",
    "default_fusion",
    "merge_chunks",
    "retrieve_result",
]
