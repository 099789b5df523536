"""The ``_search`` request bodies of the two searches: BM25 (``match`` on content and title) and k-NN (``knn``
query with the filter inside it, or exact ``script_score``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_RESULT_WINDOW = 10_000
"""OpenSearch's default ``index.max_result_window``: the largest ``k`` one search can return."""

SOURCE_EXCLUDES = {"excludes": ["embedding"]}
"""The ``_source`` filter of every read: vectors are never sent back."""


def text_search_body(query: str, *, k: int, filter_query: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``_search`` body of :meth:`~fastrag.vector_store.opensearch.OpenSearchVectorStore.search_text`."""
    boolean: dict[str, Any] = {
        "should": [{"match": {"content": query}}, {"match": {"title": query}}],
        "minimum_should_match": 1,
    }
    if filter_query is not None:
        boolean["filter"] = [filter_query]
    return {
        "size": k,
        "query": {"bool": boolean},
        "sort": [{"_score": {"order": "desc"}}, {"id": {"order": "asc"}}],
        "track_scores": True,
        "_source": SOURCE_EXCLUDES,
    }


def knn_search_body(
    vector: list[float], *, k: int, filter_query: Mapping[str, Any] | None = None, exact: bool = False
) -> dict[str, Any]:
    """The ``_search`` body of :meth:`~fastrag.vector_store.opensearch.OpenSearchVectorStore.search_vector`.

    ``exact=False``: ``{"knn": {"embedding": {"vector", "k", "filter"}}}``, the filter inside the ``knn``
    query (efficient filtering: OpenSearch 2.4+ with the Lucene engine). Score ``(1 + cos) / 2``.

    ``exact=True``: ``script_score`` with ``{"lang": "knn", "source": "knn_score"}`` and space
    ``cosinesimil`` over ``bool.filter`` [``exists`` embedding, the filter]. Score ``1 + cos``.
    """
    if not exact:
        knn: dict[str, Any] = {"vector": vector, "k": k}
        if filter_query is not None:
            knn["filter"] = filter_query
        return {"size": k, "query": {"knn": {"embedding": knn}}, "_source": SOURCE_EXCLUDES}
    candidates: list[Any] = [{"exists": {"field": "embedding"}}]
    if filter_query is not None:
        candidates.append(filter_query)
    return {
        "size": k,
        "query": {
            "script_score": {
                "query": {"bool": {"filter": candidates}},
                "script": {
                    "lang": "knn",
                    "source": "knn_score",
                    "params": {"field": "embedding", "query_value": vector, "space_type": "cosinesimil"},
                },
            }
        },
        "sort": [{"_score": {"order": "desc"}}, {"id": {"order": "asc"}}],
        "track_scores": True,
        "_source": SOURCE_EXCLUDES,
    }
