"""fastrag: an async retrieval SDK. A question goes in; the documents that answer it come out, best first.

Quick start::

    from fastrag import Document, SQLiteVectorStore, BM25Retriever

    async with SQLiteVectorStore(":memory:") as store:
        await store.upsert([Document(id="1", content="BM25 ranks documents by term statistics")])
        docs = await BM25Retriever(store=store).retrieve("how are documents ranked?", k=5)

Importing fastrag loads no backend SDK and no model; those load when first used.
"""

import logging

from fastrag.errors import (
    BackendError,
    BackendUnavailableError,
    ConfigurationError,
    FastragError,
    FilterError,
    InvalidParameterError,
    UnsupportedFilterError,
)
from fastrag.filters import field, matches, parse_filter
from fastrag.models import Document
from fastrag.retrieval import (
    BM25Retriever,
    HybridRetriever,
    PathFilterRetriever,
    ReciprocalRankFusion,
    VectorRetriever,
    WeightedScoreFusion,
)
from fastrag.vector_store.sqlite import SQLiteVectorStore

__version__ = "0.1.0"

# A library never configures logging; without this, Python's last-resort handler would print our
# warnings to stderr twice over what the CLI already reports.
logging.getLogger("fastrag").addHandler(logging.NullHandler())

__all__ = [
    "BM25Retriever",
    "BackendError",
    "BackendUnavailableError",
    "ConfigurationError",
    "Document",
    "FastragError",
    "FilterError",
    "HybridRetriever",
    "InvalidParameterError",
    "PathFilterRetriever",
    "ReciprocalRankFusion",
    "SQLiteVectorStore",
    "UnsupportedFilterError",
    "VectorRetriever",
    "WeightedScoreFusion",
    "__version__",
    "field",
    "matches",
    "parse_filter",
]
