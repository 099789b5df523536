"""What every reranker shares: checking the arguments of ``rerank`` and stamping the new order."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from fastrag.errors import InvalidParameterError, RerankerError
from fastrag.limits import check_query
from fastrag.models import TITLE, Document


def check_rerank_args(query: Any, documents: Any, k: Any) -> list[Document]:
    """Validate ``rerank(query, documents, k=k)``'s arguments; return the documents as a list.

    Raises:
        InvalidParameterError: the query is not a non-blank string of valid Unicode within 8,192
            characters; ``documents`` is a string or holds something other than a :class:`Document`;
            ``k`` is neither ``None`` nor a positive int.
    """
    check_query(query)
    if isinstance(documents, str | bytes) or not isinstance(documents, Sequence):
        raise InvalidParameterError(f"documents must be a sequence of Document, got {type(documents).__name__}")
    docs = list(documents)
    for i, doc in enumerate(docs):
        if not isinstance(doc, Document):
            raise InvalidParameterError(f"documents[{i}] must be a Document, got {type(doc).__name__}")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k <= 0):
        raise InvalidParameterError(f"k must be None or a positive int, got {k!r}")
    return docs


def text_of(doc: Document, *, include_title: bool) -> str:
    """The text a reranker reads: ``"title\\ncontent"`` when the document has a title and titles are wanted."""
    title = doc.metadata.get(TITLE)
    if include_title and isinstance(title, str) and title.strip():
        return f"{title}\n{doc.content}"
    return doc.content


def ranked_by_scores(documents: Sequence[Document], scores: Sequence[float], k: int | None) -> list[Document]:
    """Copies of ``documents`` best first by ``scores`` (ties keep the input order), at most ``k``,
    each stamped with its score and zero-based rank.

    Raises:
        RerankerError: a score is NaN (a model that produced garbage must not reorder anything).
    """
    values = [float(s) for s in scores]
    if len(values) != len(documents):
        raise RerankerError(f"the reranker gave {len(values)} scores for {len(documents)} documents")
    if any(math.isnan(v) for v in values):
        raise RerankerError("the reranker produced a NaN score")
    order = sorted(range(len(values)), key=lambda i: (-values[i], i))
    if k is not None:
        order = order[:k]
    return [documents[i].ranked(score=values[i], rank=rank) for rank, i in enumerate(order)]
