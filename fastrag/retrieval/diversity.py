"""Result diversity: Maximal Marginal Relevance over any retriever.

MMR (Carbonell & Goldstein, "The Use of MMR, Diversity-Based Reranking for Reordering Documents and
Producing Summaries", SIGIR 1998) picks results one at a time, each the candidate that maximises::

    lambda * sim(query, d) - (1 - lambda) * max(sim(d, s) for s in the results picked so far)

with ``sim`` the cosine similarity of embeddings. ``lambda = 1`` is the first stage's relevance order by
cosine alone; ``lambda = 0`` only avoids repeating what is already picked. Near-duplicate chunks (the same
paragraph in two files, overlapping chunks of one section) then stop filling the top of a result list.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fastrag.errors import EmbeddingError, InvalidParameterError
from fastrag.filters import FilterLike, combine_filters
from fastrag.models import Document
from fastrag.protocols import EmbedsText, Retriever
from fastrag.retrieval._provenance import provenance, with_provenance
from fastrag.retrieval._validation import check_k, check_positive_int, check_query, fetch_limit
from fastrag.retrieval.limits import DEFAULT_LIMITS, RetrievalLimits
from fastrag.retrieval.pagination import check_offset
from fastrag.retrieval.result import ReturnsResult, stage, timed

__all__ = ["DEFAULT_MMR_CANDIDATE_K", "MMRRetriever", "mmr_order"]

DEFAULT_MMR_CANDIDATE_K = 50
"""Candidates MMR chooses among by default: enough that a diverse top 10 can skip a few near-duplicates
of each of its results (LangChain's ``fetch_k`` is 20 for its ``k`` 4: the same ratio, rounded up)."""

FIRST_STAGE = "first_stage"
MMR = "mmr"


def mmr_order(query: np.ndarray, candidates: np.ndarray, *, mmr_lambda: float, n: int) -> tuple[list[int], list[float]]:
    """The first ``n`` picks of MMR and each pick's MMR value.

    Args:
        query: the question's embedding, shape ``(dim,)``.
        candidates: the candidates' embeddings, shape ``(m, dim)``, in the first stage's order (ties go to
            the earlier candidate).
        mmr_lambda: relevance's share, in [0, 1].
        n: how many to pick (at most ``m``).

    Returns:
        ``(indexes into candidates, MMR values)``: each value is ``lambda * cos(q, d) - (1 - lambda) *
        max cos(d, picked)`` when ``d`` was picked (the first pick has no penalty), in [-1, 1].
    """
    def unit(x: np.ndarray) -> np.ndarray:
        norms = np.linalg.norm(x, axis=-1, keepdims=True)
        return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)

    docs = unit(np.asarray(candidates, dtype=np.float64))
    relevance = docs @ unit(np.asarray(query, dtype=np.float64))
    penalty = np.full(len(docs), -np.inf)
    free = np.ones(len(docs), dtype=bool)
    picked: list[int] = []
    values: list[float] = []
    for _ in range(min(n, len(docs))):
        redundancy = np.where(np.isfinite(penalty), penalty, 0.0)
        score = mmr_lambda * relevance - (1.0 - mmr_lambda) * redundancy
        score = np.where(free, score, -np.inf)
        best = int(np.argmax(score))  # the first maximum: ties keep the first stage's order
        picked.append(best)
        values.append(float(score[best]))
        free[best] = False
        penalty = np.maximum(penalty, docs @ docs[best])
    return picked, values


class MMRRetriever(ReturnsResult):
    """Reorders a retriever's candidates by Maximal Marginal Relevance (see the module).

    It asks ``retriever`` for ``max(candidate_k, offset + k)`` candidates, embeds the question
    (``embed_query``) and the candidates' text (``embed_documents``, one call), and picks ``offset + k`` of
    them by MMR. The picks do not depend on ``k`` (each is chosen given the earlier ones only), so pages
    are consistent while they end within ``candidate_k``.

    Args:
        retriever: the first stage, any :class:`~fastrag.protocols.Retriever`.
        embedder: the embedder whose cosine measures relevance and redundancy (usually the dense branch's).
        mmr_lambda: relevance's share in [0, 1] (0.5 weighs relevance and novelty alike; LangChain's default).
        candidate_k: candidates to choose among (default :data:`DEFAULT_MMR_CANDIDATE_K`).
        limits: bounds on ``k`` and the query.

    Returns (from :meth:`retrieve`): copies stamped with ``score`` = the MMR value at the pick (in [-1, 1],
    higher is better; not necessarily decreasing down the list, since a later pick can have less redundancy
    to pay) and zero-based ``rank``; ``metadata["branches"]`` keeps the first stage's score and rank under
    ``"first_stage"`` and the MMR value and rank under ``"mmr"``.

    Raises:
        InvalidParameterError: ``mmr_lambda`` not a number in [0, 1]; ``candidate_k`` not a positive int; a
            retriever without ``retrieve`` or an embedder without ``embed_query``/``embed_documents``.
    """

    accepts_offset = True  # retrieve(..., offset=): fastrag.protocols.SupportsOffset
    name = "mmr"

    def __init__(
        self,
        retriever: Retriever,
        *,
        embedder: Any,
        mmr_lambda: float = 0.5,
        candidate_k: int = DEFAULT_MMR_CANDIDATE_K,
        limits: RetrievalLimits = DEFAULT_LIMITS,
    ) -> None:
        if not isinstance(retriever, Retriever):
            raise InvalidParameterError(f"retriever has no retrieve() method: {retriever!r}")
        if not isinstance(embedder, EmbedsText):
            raise InvalidParameterError(f"embedder must be an Embedder (embed_query, embed_documents), got {embedder!r}")
        if isinstance(mmr_lambda, bool) or not isinstance(mmr_lambda, int | float) or not (
            math.isfinite(mmr_lambda) and 0 <= mmr_lambda <= 1
        ):
            raise InvalidParameterError(f"mmr_lambda must be a number in [0, 1], got {mmr_lambda!r}")
        check_positive_int(candidate_k, "candidate_k", maximum=limits.max_k)
        self.retriever = retriever
        self.embedder = embedder
        self.mmr_lambda = float(mmr_lambda)
        self.candidate_k = candidate_k
        self.limits = limits

    async def retrieve(
        self, query: str, *, k: int = 10, filter: FilterLike | None = None, offset: int = 0  # noqa: A002
    ) -> list[Document]:
        """Ranks ``offset .. offset + k - 1`` of the MMR order of the first stage's candidates.

        Raises:
            InvalidParameterError: bad ``k``, ``offset`` or query (before anything runs).
            FilterError: ``filter`` is malformed.
            EmbeddingError: the embedder failed or returned vectors of the wrong shape.
            Exception: whatever the first stage raises, unchanged.
        """
        check_query(query, self.limits)
        check_k(k, self.limits)
        check_offset(offset, k, self.limits)
        node = combine_filters(filter)
        wanted = offset + k
        fetch_k = min(max(self.candidate_k, wanted), fetch_limit(self.retriever, self.limits))
        with timed(FIRST_STAGE), stage(FIRST_STAGE):
            found = await self.retriever.retrieve(query, k=fetch_k, filter=node)
        if not found:
            return []
        with timed("mmr"):
            question = np.asarray(await self.embedder.embed_query(query))
            vectors = np.asarray(await self.embedder.embed_documents([d.content for d in found]))
            if vectors.ndim != 2 or vectors.shape[0] != len(found) or question.shape != vectors.shape[1:]:
                raise EmbeddingError(f"the embedder returned vectors of shape {vectors.shape} and {question.shape} "
                                     f"for {len(found)} candidates and the question")  # fmt: skip
            picked, values = mmr_order(question, vectors, mmr_lambda=self.mmr_lambda, n=wanted)
        out = []
        for rank, (index, value) in enumerate(zip(picked, values, strict=True)):
            if rank >= offset:
                branches = {FIRST_STAGE: provenance(found[index], index), MMR: {"score": value, "rank": rank}}
                out.append(with_provenance(found[index], score=value, rank=rank, branches=branches))
        return out

    def __repr__(self) -> str:
        return (f"MMRRetriever(retriever={self.retriever!r}, mmr_lambda={self.mmr_lambda!r}, "
                f"candidate_k={self.candidate_k!r})")  # fmt: skip
