"""fastrag: an async retrieval SDK. A question goes in; the documents that answer it come out, best first.

The names most programs need are importable from here: :class:`~fastrag.models.Document`, the embedded
:class:`~fastrag.vector_store.sqlite.SQLiteVectorStore`, the retrievers and fusions of
:mod:`fastrag.retrieval`, the filter builder :func:`~fastrag.filters.field`, and the errors of
:mod:`fastrag.errors`. Importing fastrag loads no backend SDK and no model; those load when first used, as do
the names above other than the errors and :class:`~fastrag.models.Document` (on first access, PEP 562).

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
from typing import TYPE_CHECKING

from fastrag._lazy import lazy_exports

from fastrag.errors import (
    BackendError,
    BackendUnavailableError,
    ConfigurationError,
    FastragError,
    FilterError,
    InvalidParameterError,
    UnsupportedFilterError,
)
from fastrag.models import Document

if TYPE_CHECKING:  # pragma: no cover
    from fastrag.filters import field, matches, parse_filter
    from fastrag.knowledge_base import KnowledgeBase, SearchSettings
    from fastrag.lifecycle import AsyncResource
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

# Names that load their module on first use (PEP 562), so that `import fastrag` (and the `fastrag` command,
# which imports only what its subcommand needs) does not pay for numpy, the stores and the retrievers upfront.
_LAZY: dict[str, str] = {
    "AsyncResource": "fastrag.lifecycle",
    "BM25Retriever": "fastrag.retrieval",
    "HybridRetriever": "fastrag.retrieval",
    "KnowledgeBase": "fastrag.knowledge_base",
    "PathFilterRetriever": "fastrag.retrieval",
    "ReciprocalRankFusion": "fastrag.retrieval",
    "SQLiteVectorStore": "fastrag.vector_store.sqlite",
    "SearchSettings": "fastrag.knowledge_base",
    "VectorRetriever": "fastrag.retrieval",
    "WeightedScoreFusion": "fastrag.retrieval",
    "field": "fastrag.filters",
    "matches": "fastrag.filters",
    "parse_filter": "fastrag.filters",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "AsyncResource",
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
