"""Retrievers: dense k-NN, BM25, hybrid fusion, reranking, language-aware, path filtering, tenant scoping;
results with a status.

``LinguaLanguageDetector`` (defined in :mod:`fastrag.language`) is importable from here too, as the original
retrieval docs import it; it loads on first use, and Lingua itself only when a detector is built.

``SectionIndex``, ``SourceSection``, ``ParentDocument`` and ``merge_chunks`` moved to :mod:`fastrag.sections`
(tracing hits back to their original sections reads files with the ingestion parsers, and retrieval never
imports ingestion); importing them from here still works, with a :class:`DeprecationWarning` naming the new
path.
"""

import importlib
import warnings
from typing import Any

from fastrag.retrieval.bm25 import BM25Retriever
from fastrag.retrieval.fusion import ReciprocalRankFusion, WeightedScoreFusion
from fastrag.retrieval.grouping import GroupingRetriever
from fastrag.retrieval.hybrid import HybridRetriever, default_fusion
from fastrag.retrieval.language import LanguageAwareRetriever
from fastrag.retrieval.limits import DEFAULT_LIMITS, MAX_K, MAX_QUERY_CHARS, RetrievalLimits
from fastrag.retrieval.path_filter import PathFilterRetriever
from fastrag.retrieval.reranking import RerankingRetriever
from fastrag.retrieval.result import RetrievalResult, retrieve_result
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
    "LinguaLanguageDetector",
    "PathFilterRetriever",
    "ReciprocalRankFusion",
    "RetrievalLimits",
    "RerankingRetriever",
    "RetrievalResult",
    "TenantScopedRetriever",
    "VectorRetriever",
    "WeightedScoreFusion",
    "default_fusion",
    "retrieve_result",
]

# Names that load their module on first use (PEP 562): fastrag.language is where the detector lives.
_LAZY: dict[str, str] = {"LinguaLanguageDetector": "fastrag.language"}
# Names that moved out of retrieval: still importable from here, each access warning with the new path.
_MOVED: dict[str, str] = {name: "fastrag.sections" for name in ("ParentDocument", "SectionIndex", "SourceSection",
                                                                  "merge_chunks")}  # fmt: skip


def __getattr__(name: str) -> Any:
    moved = _MOVED.get(name)
    if moved is not None:
        warnings.warn(
            f"fastrag.retrieval.{name} is deprecated: import it from {moved} (from {moved} import {name})",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(moved), name)
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_MOVED})
