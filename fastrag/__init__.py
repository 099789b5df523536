"""fastrag: an async retrieval SDK. A question goes in; the documents that answer it come out, best first.

The names most programs need are importable from here: :class:`~fastrag.models.Document`, the embedded
:class:`~fastrag.vector_store.sqlite.SQLiteVectorStore`, the retrievers and fusions of
:mod:`fastrag.retrieval`, the filter builder :func:`~fastrag.filters.field`, and the errors of
:mod:`fastrag.errors`. Importing fastrag loads no backend SDK and no model; those load when first used.

Examples:
    Two documents in an in-memory store, and a question answered by BM25 (which needs no embedding model).
    Everything is async: define ``main()`` and run it with ``anyio.run``.

    >>> import anyio
    >>> from fastrag import BM25Retriever, Document, SQLiteVectorStore
    >>> async def main():
    ...     async with SQLiteVectorStore(":memory:") as store:
    ...         await store.upsert([
    ...             Document(id="1", content="BM25 ranks documents by term statistics."),
    ...             Document(id="2", content="Boil the pasta in salted water."),
    ...         ])
    ...         return await BM25Retriever(store=store).retrieve("how are documents ranked?", k=5)
    >>> [(doc.id, doc.rank) for doc in anyio.run(main)]
    [('1', 0)]
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
from fastrag.knowledge_base import KnowledgeBase, SearchSettings
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
    "KnowledgeBase",
    "PathFilterRetriever",
    "ReciprocalRankFusion",
    "SQLiteVectorStore",
    "SearchSettings",
    "UnsupportedFilterError",
    "VectorRetriever",
    "WeightedScoreFusion",
    "__version__",
    "field",
    "matches",
    "parse_filter",
]
