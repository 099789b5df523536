"""Two-stage retrieval: over-fetch candidates on similarity, then narrow them on relevance with a reranker."""

from __future__ import annotations


from fastrag.errors import InvalidParameterError, RerankerError
from fastrag.filters import FilterLike, combine_filters
from fastrag.models import SCORE, Document
from fastrag.protocols import Embedder, Reranker, Retriever, VectorStore
from fastrag.retrieval._provenance import finite_score, provenance, with_provenance
from fastrag.retrieval._validation import check_k, check_positive_int, check_query, fetch_limit
from fastrag.retrieval.limits import DEFAULT_LIMITS, RetrievalLimits
from fastrag.retrieval.pagination import check_offset
from fastrag.retrieval.result import ReturnsResult, stage, timed
from fastrag.retrieval.thresholds import check_min_score, keep_above
from fastrag.retrieval.vector import VectorRetriever

__all__ = ["FIRST_STAGE", "RERANKER", "RerankingRetriever"]

FIRST_STAGE = "first_stage"
"""The ``metadata["branches"]`` entry holding a document's score and rank from the first-stage retriever."""
RERANKER = "reranker"
"""The ``metadata["branches"]`` entry holding a document's score and rank from the reranker."""


class RerankingRetriever(ReturnsResult):
    """Fetches ``candidate_k`` candidates from a first-stage retriever, reranks them, returns the best ``k``.

    ::

        retriever = RerankingRetriever(retriever=hybrid, reranker=EmbedderReranker(embedder), candidate_k=40)
        docs = await retriever.retrieve("how are documents ranked?", k=5)
        docs[0].branches  # {"first_stage": BranchResult(score=0.83, rank=3), "reranker": BranchResult(...)}

    Every returned document is a copy stamped with the reranker's ``score`` (higher is better; its range is
    the reranker's: cosine in [-1, 1] for :class:`~fastrag.rerankers.EmbedderReranker`, [0, 1] for Cohere)
    and zero-based ``rank``, and, as fusion does, under ``metadata["branches"]``:

    * ``"first_stage"``: ``{"score", "rank"}`` the first-stage retriever gave it (``score`` ``None`` when
      that was not a finite number; ``rank`` zero-based among the distinct candidates). When the first
      stage was itself fused, its per-branch provenance is kept under ``"branches"`` inside this entry.
    * ``"reranker"``: ``{"score", "rank"}`` the reranker gave it (the same as the top-level pair).

    Args:
        retriever: the first stage, any :class:`~fastrag.protocols.Retriever` (a hybrid, a BM25, a
            path-filtered one, ...).
        vector_store: instead of ``retriever``, with ``embedder``: the first stage is
            ``VectorRetriever(vector_store=..., embedder=...)``.
        embedder: with ``vector_store``, instead of ``retriever``.
        reranker: any :class:`~fastrag.protocols.Reranker`. It stays the caller's (never closed here).
        candidate_k: how many candidates the first stage is asked for. A call with a larger ``k`` asks for
            ``k`` instead (there is no point in reranking fewer than are returned); the request is capped
            at ``limits.max_k`` (and the first stage's own ``limits.max_k``).
        limits: bounds on ``k`` and the query (default :data:`~fastrag.retrieval.limits.DEFAULT_LIMITS`).
        min_score: drop documents whose reranker score is below this (on the reranker's scale: cosine in
            [-1, 1] for :class:`~fastrag.rerankers.EmbedderReranker`, a relevance in [0, 1] for Cohere, a
            logit for most cross-encoders); applied after reranking, so fewer than ``k`` may come back.
            ``None`` (default): no threshold. See :mod:`fastrag.retrieval.thresholds`.

    Raises:
        InvalidParameterError: ``min_score`` is not ``None`` or a finite number; neither ``retriever`` nor both ``vector_store`` and ``embedder``, or both
            forms at once; an object lacking ``retrieve``/``rerank``; ``candidate_k`` not a positive int
            within ``limits.max_k``; ``limits`` not a ``RetrievalLimits``.

    :meth:`~fastrag.retrieval.result.ReturnsResult.retrieve_result` reports the stages ``"first_stage"``
    (with the first stage's own stages under ``"first_stage/"``) and ``"rerank"``.
    """

    accepts_offset = True  # retrieve(..., offset=): fastrag.protocols.SupportsOffset

    name = "reranking"

    def __init__(
        self,
        *,
        reranker: Reranker,
        retriever: Retriever | None = None,
        vector_store: VectorStore | None = None,
        embedder: Embedder | None = None,
        candidate_k: int = 40,
        limits: RetrievalLimits = DEFAULT_LIMITS,
        min_score: float | None = None,
    ) -> None:
        self.min_score = check_min_score(min_score)
        if not isinstance(limits, RetrievalLimits):
            raise InvalidParameterError(f"limits must be a RetrievalLimits, got {limits!r}")
        if retriever is not None:
            if vector_store is not None or embedder is not None:
                raise InvalidParameterError("pass either retriever= or vector_store= and embedder=, not both")
            if not isinstance(retriever, Retriever):
                raise InvalidParameterError(f"retriever has no retrieve() method: {retriever!r}")
        elif vector_store is None or embedder is None:
            raise InvalidParameterError("RerankingRetriever needs retriever=, or both vector_store= and embedder=")
        else:
            retriever = VectorRetriever(vector_store=vector_store, embedder=embedder, limits=limits)
        if not isinstance(reranker, Reranker):
            raise InvalidParameterError(f"reranker has no rerank() method: {reranker!r}")
        check_positive_int(candidate_k, "candidate_k", maximum=limits.max_k)
        self.retriever: Retriever = retriever
        self.reranker = reranker
        self.candidate_k = candidate_k
        self.limits = limits

    async def retrieve(
        self, query: str, *, k: int = 10, filter: FilterLike | None = None, offset: int = 0  # noqa: A002
    ) -> list[Document]:
        """The ``k`` best of the first stage's ``max(candidate_k, offset + k)`` candidates by the reranker, best
        first; ``offset`` skips that many (:mod:`fastrag.retrieval.pagination`: pages that end within
        ``candidate_k`` rerank the same candidates, so they are consistent).

        Returns:
            Copies stamped as described on the class; ``[]`` when the first stage found nothing (the
            reranker is not called).

        Raises:
            InvalidParameterError: ``k`` is not a positive int within ``limits.max_k``, or the query is not a
                non-blank str within ``limits.max_query_chars`` (raised before either stage runs).
            FilterError: ``filter`` is malformed (raised before either stage runs).
            RerankerError: the reranker returned a document that was not a candidate, or one twice.
            Exception: whatever the first stage or the reranker raises, unchanged.
        """
        check_query(query, self.limits)
        check_k(k, self.limits)
        check_offset(offset, k, self.limits)
        node = combine_filters(filter)
        wanted = offset + k
        fetch_k = min(max(self.candidate_k, wanted), fetch_limit(self.retriever, self.limits))
        with timed(FIRST_STAGE), stage(FIRST_STAGE):
            found = await self.retriever.retrieve(query, k=fetch_k, filter=node)
        candidates: dict[str, tuple[int, Document]] = {}
        for doc in found:
            if doc.id not in candidates:
                candidates[doc.id] = (len(candidates), doc)
        if not candidates:
            return []
        with timed("rerank"):
            reranked = await self.reranker.rerank(query, [doc for _, doc in candidates.values()], k=wanted)
        out: list[Document] = []
        seen: set[str] = set()
        for rank, doc in enumerate(reranked[:wanted]):
            if doc.id not in candidates:
                raise RerankerError(f"{self.reranker!r} returned document {doc.id!r}, which was not a candidate")
            if doc.id in seen:
                raise RerankerError(f"{self.reranker!r} returned document {doc.id!r} twice")
            seen.add(doc.id)
            position, original = candidates[doc.id]
            score = finite_score(doc.metadata.get(SCORE))
            branches = {FIRST_STAGE: provenance(original, position), RERANKER: {"score": score, "rank": rank}}
            out.append(with_provenance(doc, score=score, rank=rank, branches=branches))
        if self.min_score is not None:
            out = keep_above(out, self.min_score)
        return out[offset:] if offset else out

    def __repr__(self) -> str:
        return (
            f"RerankingRetriever(retriever={self.retriever!r}, reranker={self.reranker!r}, "
            f"candidate_k={self.candidate_k!r})"
        )


