"""A reranker over any :class:`~fastrag.protocols.Embedder`: bi-encoder cosine between question and candidate.

It needs nothing beyond the embedder it is given, so an offline deployment can rerank with the model it
already indexes with (the shipped Model2Vec model), or with a stronger one used only for the candidates.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fastrag.errors import EmbeddingError, InvalidParameterError
from fastrag.lifecycle import AsyncResource
from fastrag.models import Document
from fastrag.protocols import Embedder, EmbedsText
from fastrag.rerankers._ranking import check_rerank_args, ranked_by_scores, text_of

__all__ = ["EmbedderReranker"]


class EmbedderReranker(AsyncResource):
    """Reranks candidates by the cosine similarity of their embedding to the question's.

    The question goes through ``embedder.embed_query``, the candidates (``"title\\ncontent"`` when they
    have a title and ``include_title``, else the content) through ``embedder.embed_documents``, in one call
    per :meth:`rerank`. Scores are cosine similarity in [-1, 1], higher is better; a text with no known
    token (a zero vector) scores 0. Ties keep the candidates' order.

    Args:
        embedder: any :class:`~fastrag.protocols.Embedder`. It stays the caller's: ``aclose()`` does not
            close it.
        include_title: prepend ``metadata["title"]`` to the text embedded (as ``fastrag eval`` indexes BEIR).

    Raises:
        InvalidParameterError: ``embedder`` lacks the :class:`~fastrag.protocols.Embedder` methods.
    """

    name = "embedder"

    def __init__(self, embedder: Embedder, *, include_title: bool = True) -> None:
        # the methods only: isinstance(embedder, Embedder) would read `dimension`, which loads a local model
        # or is not known before a remote one's first answer
        if not isinstance(embedder, EmbedsText):
            raise InvalidParameterError(f"embedder must be an Embedder (embed_query, embed_documents), got {embedder!r}")
        self.embedder = embedder
        self.include_title = include_title

    async def rerank(self, query: str, documents: Sequence[Document], *, k: int | None = None) -> list[Document]:
        """Copies of ``documents`` best first by cosine similarity to ``query``, at most ``k``.

        Returns:
            Copies stamped with ``score`` (cosine in [-1, 1]) and zero-based ``rank``; ``[]`` for no
            documents (the embedder is not called).

        Raises:
            InvalidParameterError: bad arguments (see :class:`~fastrag.protocols.Reranker`).
            EmbeddingError: the embedder failed, or returned vectors of the wrong shape or with NaN.
        """
        docs = check_rerank_args(query, documents, k)
        if not docs:
            return []
        q = np.asarray(await self.embedder.embed_query(query), dtype=np.float32)
        m = np.asarray(
            await self.embedder.embed_documents([text_of(d, include_title=self.include_title) for d in docs]),
            dtype=np.float32,
        )
        if q.ndim != 1 or m.ndim != 2 or m.shape != (len(docs), q.shape[0]):
            raise EmbeddingError(
                f"{self.embedder!r} returned a query vector of shape {q.shape} and document vectors of shape "
                f"{m.shape} for {len(docs)} documents"
            )
        if not (np.isfinite(q).all() and np.isfinite(m).all()):
            raise EmbeddingError(f"{self.embedder!r} returned vectors with NaN or infinity")
        norms = np.linalg.norm(m, axis=1) * float(np.linalg.norm(q))
        dots = m @ q
        scores = np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)
        return ranked_by_scores(docs, np.clip(scores, -1.0, 1.0).tolist(), k)

    def __repr__(self) -> str:
        return f"EmbedderReranker({self.embedder!r})"
