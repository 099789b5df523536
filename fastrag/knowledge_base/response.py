"""The outcome of one knowledge-base search (:class:`SearchResponse`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from fastrag.models import (
    Document,
)
from fastrag.retrieval.result import RetrievalResult
from fastrag.settings import (
    ResolvedSearchSettings,
)

_STATUS_FIELDS = tuple(f.name for f in fields(RetrievalResult) if f.name != "documents")
"""What a :class:`SearchResponse` reports of its retrieval: every field of a RetrievalResult but the documents
(a field added there is carried both ways by :meth:`SearchResponse.from_result` and :meth:`~SearchResponse.as_result`)."""


def _status(outcome: RetrievalResult | SearchResponse) -> dict[str, Any]:
    return {name: getattr(outcome, name) for name in _STATUS_FIELDS}


@dataclass(frozen=True, slots=True)
class SearchResponse:
    """The outcome of one :meth:`KnowledgeBase.search_result` call.

    Attributes:
        documents: best first, at most ``settings.top_k``; each a copy stamped with ``score`` (higher is
            better; its range is the last stage's: cosine in [-1, 1] for vector, BM25 unbounded > 0 for
            keyword, [0, 1] for weighted fusion (hybrid and direct), ``(0, sum of weights / (rank_constant +
            1)]`` for RRF, the reranker's own for a reranked search) and zero-based ``rank``. Empty when the
            call failed or nothing matched.
        settings: the resolved settings, with where each came from.
        strategy: what ran: ``"vector"``, ``"keyword"``, ``"hybrid"`` or ``"direct"`` (exact hybrid fusion
            over the whole corpus, chosen by ``"auto"``: both branches return every chunk they match), with
            ``"+rerank"`` appended when a reranker narrowed the result, and ``"+group"`` when results were
            grouped (``group_by``); ``"auto"`` itself when ``"auto"`` could not count the corpus (the store
            failed: ``retrieval_failed`` is then true).
        corpus_size: with ``"auto"``, the number of chunks (stored documents, not files) the call could see
            (its scope and filter), which chose the strategy; ``None`` otherwise, or when that count failed.
        error: why the call failed, or ``None`` (see :class:`~fastrag.retrieval.result.RetrievalResult`).
        failed_branches: ``{branch: error}`` for every failed branch.
        partial: ``True`` when some branches failed and the result comes from the others.
        timings: wall-clock seconds per stage (``"total"`` for the whole retrieval).
        zero_vector_branches: dense branches whose question embedded to the zero vector (none of its words
            is in the model's vocabulary), so they found nothing.
        incomplete: ``{stage: why}`` for stages that may have missed matches (a path filter that stopped at
            ``max_k`` candidates): fewer results than asked for do not mean fewer matches exist.
        skipped_branches: ``{branch: why}`` for hybrid branches that were not run (a dense branch whose
            embedder does not cover the question's language).
    """

    documents: tuple[Document, ...]
    settings: ResolvedSearchSettings
    strategy: str
    corpus_size: int | None = None
    error: Exception | None = None
    failed_branches: Mapping[str, Exception] = field(default_factory=lambda: MappingProxyType({}))
    partial: bool = False
    timings: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    zero_vector_branches: tuple[str, ...] = ()
    incomplete: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    skipped_branches: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def from_result(
        cls,
        result: RetrievalResult,
        *,
        settings: ResolvedSearchSettings,
        strategy: str,
        corpus_size: int | None = None,
        documents: Sequence[Document] | None = None,
    ) -> SearchResponse:
        """The response of a search whose retrieval gave ``result``: its status (``error``,
        ``failed_branches``, ``partial``, ``timings``, ...: every field of a
        :class:`~fastrag.retrieval.result.RetrievalResult` but the documents), with these ``settings``,
        ``strategy`` and ``corpus_size`` (see the attributes), and ``documents`` (``None``: the result's)."""
        found = result.documents if documents is None else documents
        return cls(documents=tuple(found), settings=settings, strategy=strategy, corpus_size=corpus_size,
                   **_status(result))  # fmt: skip

    def as_result(self) -> RetrievalResult:
        """This response as a :class:`~fastrag.retrieval.result.RetrievalResult`: the documents and the status,
        without the settings, strategy and corpus size (what a :class:`~fastrag.protocols.Retriever`'s
        ``retrieve_result`` returns)."""
        return RetrievalResult(documents=self.documents, **_status(self))

    @property
    def complete(self) -> bool:
        """``False`` when the result may lack matches: the call failed, a branch failed or was skipped, or a
        stage stopped early (``incomplete``)."""
        return not (self.error is not None or self.partial or self.incomplete or self.skipped_branches)

    @property
    def retrieval_failed(self) -> bool:
        """``True`` when the call failed: the empty ``documents`` mean nothing."""
        return self.error is not None


# --------------------------------------------------------------------------------------------- scopes


