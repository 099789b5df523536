"""The one planner: resolved search settings plus the opened stores, embedder and reranker in, the retriever
chain out.

Every entrance plans here: :meth:`~fastrag.knowledge_base.KnowledgeBase.search` and
:meth:`~fastrag.knowledge_base.KnowledgeBase.search_result` (and so the knowledge base's tool and
``fastrag serve``), ``fastrag search`` and ``fastrag ask`` (knowledge-base searches), ``fastrag eval`` and
:func:`fastrag.config.build_retriever`. No other module composes a chain from settings, so an option means
the same at every door (``docs/planning.md`` follows one query through it).

The chain, outermost last::

    first stage      VectorRetriever | BM25Retriever | HybridRetriever(vector, bm25)   (mode)
    path rules       PathFilterRetriever                  (include_glob, exclude_glob, path_filter, path_filter_timeout)
    reranking        RerankingRetriever                   (rerank, rerank_model, candidate_k, min_score)
    diversity        MMRRetriever                         (mmr_lambda, mmr_candidate_k)
    grouping         GroupingRetriever                    (group_by, group_score)

``"auto"`` is decided here from the corpus size (counted in the scope and filter): ``"direct"`` (every
branch returns every chunk it matches, then fusion) up to ``auto_direct_max`` chunks, else ``"hybrid"``,
with the reranker from ``auto_rerank_min`` chunks (or, without a reranker, ``candidate_k`` widened to
:data:`~fastrag.settings.AUTO_WIDE_RETRIEVAL_K`).
"""

from __future__ import annotations

import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from fastrag.errors import ConfigurationError, FilterError, InvalidParameterError
from fastrag.models import Document
from fastrag.protocols import Reranker, Retriever, SearchesText, SupportsLanguages
from fastrag.retrieval.limits import MAX_K
from fastrag.settings import AUTO_WIDE_RETRIEVAL_K, ResolvedSearchSettings
from fastrag.tracing import store_call

__all__ = ["QUESTION_MIN_CONFIDENCE", "Plan", "compose", "plan_search", "question_language_options"]

RerankerFor = Callable[[Any], Awaitable[Reranker]]
"""Turns a ``rerank_model`` spec (a str) into an open reranker (the knowledge base keeps and closes it)."""


@dataclass(frozen=True, slots=True)
class Plan:
    """What one search runs.

    Attributes:
        retriever: the chain (a :class:`~fastrag.protocols.Retriever`).
        settings: the settings as finally used (``"auto"`` may have widened ``candidate_k``).
        strategy: what runs: ``"vector"``, ``"keyword"``, ``"hybrid"`` or ``"direct"``, then ``"+rerank"``,
            ``"+mmr"`` and ``"+group"`` when those stages run.
        corpus_size: the chunks ``"auto"`` counted, else ``None``.
    """

    retriever: Any
    settings: ResolvedSearchSettings
    strategy: str
    corpus_size: int | None


class _Unplanned:
    """The chain of a plan that could not be made (``"auto"``'s corpus count failed): it raises that
    failure, so a search raises it and a search result reports it as a failure of retrieval, as a store
    failure in any other mode."""

    name = "auto"

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def retrieve(self, query: str, *, k: int = 10, filter: Any = None) -> list[Document]:
        raise self.error


async def plan_search(
    settings: ResolvedSearchSettings,
    *,
    vector_store: Any,
    lexical_store: Any = None,
    embedder: Any = None,
    reranker_for: RerankerFor | None = None,
    filter: Any = None,
) -> Plan:
    """Plan one search: decide ``"auto"``, the question's language and the reranker, then :func:`compose`.

    Args:
        settings: resolved settings (:func:`~fastrag.settings.resolve_settings`).
        vector_store: the (scoped) vector store; also the BM25 store when ``lexical_store`` is ``None``.
        lexical_store: a separate (scoped) BM25 store, or ``None``.
        embedder: the dense branch's embedder (needed unless ``mode="keyword"``).
        reranker_for: opens a reranker from a ``rerank_model`` spec (a str); a
            :class:`~fastrag.protocols.Reranker` object in the settings is used as it is.
        filter: the search's filter, for ``"auto"``'s corpus count.

    Returns:
        The :class:`Plan`. When ``"auto"``'s corpus count fails (the store is down), its retriever raises
        that failure on use, so it is reported as a failure of retrieval.

    Raises:
        ConfigurationError: the mode needs BM25 and the store has none, or an embedder and none is given,
            or ``rerank_model`` is a spec and no ``reranker_for`` is given, or ``language="auto"`` on a
            store that does not record its documents' languages.
        InvalidParameterError, FilterError: the corpus count refused the filter (a mistake in the call).
    """
    mode = settings.mode
    corpus_size: int | None = None
    candidate_k = settings.candidate_k
    rerank = settings.rerank
    if mode == "auto":
        try:
            with store_call("count", vector_store):
                corpus_size = await vector_store.count(filter=filter)
        except (InvalidParameterError, FilterError):
            raise  # a mistake in the call, raised as every mode raises it
        except Exception as exc:  # noqa: BLE001 - the store failed: a failure of retrieval, reported as such
            return Plan(retriever=_Unplanned(exc), settings=settings, strategy="auto", corpus_size=None)
        if corpus_size <= settings.auto_direct_max:
            mode = "direct"  # exact: each branch returns the whole (scoped, filtered) corpus it matches
            candidate_k = min(max(corpus_size, 1), MAX_K)
        else:
            mode = "hybrid"
            if corpus_size >= settings.auto_rerank_min and settings.is_default("rerank"):
                if settings.rerank_model is not None:
                    rerank = True
                elif settings.is_default("candidate_k"):
                    settings = replace(settings, candidate_k=max(AUTO_WIDE_RETRIEVAL_K, settings.top_k))
            if rerank and settings.candidate_k < settings.top_k:
                settings = replace(settings, candidate_k=settings.top_k)
            candidate_k = settings.candidate_k
        settings = replace(settings, rerank=rerank)
    lexical = vector_store if lexical_store is None else lexical_store
    language = await question_language_options(lexical, settings.language) if mode != "vector" else {}
    reranker = None
    if rerank:
        model = settings.rerank_model
        if isinstance(model, Reranker):
            reranker = model
        elif reranker_for is None:
            raise ConfigurationError(f"rerank_model {model!r} is a spec and nothing here opens rerankers")
        else:
            reranker = await reranker_for(model)
    retriever, strategy = compose(settings, vector_store=vector_store, lexical_store=lexical_store,
                                  embedder=embedder, reranker=reranker, mode=mode, candidate_k=candidate_k,
                                  **language)  # fmt: skip
    return Plan(retriever=retriever, settings=settings, strategy=strategy, corpus_size=corpus_size)


def compose(
    settings: ResolvedSearchSettings,
    *,
    vector_store: Any,
    lexical_store: Any = None,
    embedder: Any = None,
    reranker: Reranker | None = None,
    mode: str | None = None,
    candidate_k: int | None = None,
    language: str | None = None,
    detector: Any = None,
) -> tuple[Any, str]:
    """The retriever chain for ``settings`` (see the module docstring) and its strategy name.

    Args:
        settings: resolved settings; ``settings.mode`` must not be ``"auto"`` unless ``mode`` decides it.
        vector_store: the vector store (and the BM25 store when ``lexical_store`` is ``None``).
        lexical_store: a separate BM25 store.
        embedder: the dense branch's embedder.
        reranker: the reranker, required when ``settings.rerank``.
        mode: overrides ``settings.mode`` (``"direct"``: a hybrid over every matching chunk).
        candidate_k: overrides ``settings.candidate_k`` for the first stage.
        language: the question's language for the BM25 branch (a code).
        detector: a language detector for the BM25 branch.

    Raises:
        ConfigurationError: BM25 is needed and the store has none; an embedder is needed and none is
            given; ``rerank`` without a reranker; a setting a retriever refuses.
    """
    from fastrag.retrieval.grouping import GroupingRetriever
    from fastrag.retrieval.path_filter import PathFilterRetriever
    from fastrag.retrieval.reranking import RerankingRetriever

    mode = mode or settings.mode
    if mode == "auto":
        raise ConfigurationError("compose() needs mode 'auto' decided first: use plan_search()")
    candidate_k = candidate_k or settings.candidate_k
    try:
        retriever = _first_stage(settings, mode, vector_store, lexical_store, embedder, candidate_k,
                                 language=language, detector=detector)  # fmt: skip
        strategy = mode
        if settings.include_glob or settings.exclude_glob or settings.path_filter:
            timeout = {} if settings.path_filter_timeout is None else {"path_filter_timeout": settings.path_filter_timeout}
            retriever = PathFilterRetriever(retriever, include_glob=settings.include_glob,
                                            exclude_glob=settings.exclude_glob, path_filter=settings.path_filter,
                                            **timeout)  # fmt: skip
        if settings.rerank:
            if reranker is None:
                raise ConfigurationError("rerank is true but no reranker was given")
            retriever = RerankingRetriever(retriever=retriever, reranker=reranker, candidate_k=settings.candidate_k,
                                           min_score=settings.min_score)  # fmt: skip
            strategy = f"{mode}+rerank"
        if settings.mmr_lambda is not None:
            if embedder is None:
                raise ConfigurationError("mmr_lambda needs an embedder (its cosine measures redundancy)")
            from fastrag.retrieval.diversity import DEFAULT_MMR_CANDIDATE_K, MMRRetriever

            retriever = MMRRetriever(retriever, embedder=embedder, mmr_lambda=settings.mmr_lambda,
                                     candidate_k=settings.mmr_candidate_k or DEFAULT_MMR_CANDIDATE_K)  # fmt: skip
            strategy = f"{strategy}+mmr"
        if settings.group_by is not None:
            retriever = GroupingRetriever(retriever, group_by=settings.group_by, score=settings.group_score)  # type: ignore[arg-type]
            strategy = f"{strategy}+group"
    except InvalidParameterError as exc:
        raise ConfigurationError(str(exc)) from exc
    return retriever, strategy


def _first_stage(
    settings: ResolvedSearchSettings, mode: str, vector_store: Any, lexical_store: Any, embedder: Any,
    candidate_k: int, *, language: str | None, detector: Any,
) -> Retriever:
    """The first stage for ``mode``; ``"hybrid"`` and ``"direct"`` are the same fusion, ``"direct"`` with
    ``candidate_k`` = the corpus size. Each branch cuts at its own threshold (``min_vector_score``,
    ``min_keyword_score``); a single-branch mode also at ``min_score`` when no reranker follows; the
    fusion at ``min_relative_score``."""
    from fastrag.retrieval.bm25 import BM25Retriever
    from fastrag.retrieval.fusion import ReciprocalRankFusion, WeightedScoreFusion
    from fastrag.retrieval.hybrid import HybridRetriever
    from fastrag.retrieval.thresholds import strictest
    from fastrag.retrieval.vector import VectorRetriever

    lexical = vector_store if lexical_store is None else lexical_store
    final = None if settings.rerank or mode not in ("vector", "keyword") else settings.min_score
    if mode in ("keyword", "hybrid", "direct") and not isinstance(lexical, SearchesText):
        raise ConfigurationError(
            f"mode {mode!r} needs BM25, which {lexical!r} does not have; configure a lexical store "
            "(lexical_store=, FASTRAG_LEXICAL_STORE or --lexical-store, e.g. sqlite:///.fastrag/bm25.db)"
        )
    if mode != "keyword" and embedder is None:
        raise ConfigurationError(f"mode {mode!r} needs an embedder")

    def bm25() -> BM25Retriever:
        return BM25Retriever(store=lexical, language=language, detector=detector,
                             min_score=strictest(final, settings.min_keyword_score))  # fmt: skip

    def vector() -> VectorRetriever:
        return VectorRetriever(vector_store=vector_store, embedder=embedder,
                               min_score=strictest(final, settings.min_vector_score))  # fmt: skip

    if mode == "keyword":
        return bm25()
    if mode == "vector":
        return vector()
    if mode not in ("hybrid", "direct"):
        raise ConfigurationError(f"unknown mode {mode!r}")
    weights = {"vector": float(settings.vector_weight), "bm25": float(settings.keyword_weight)}
    fusion: Any
    if settings.fusion == "rrf":
        fusion = ReciprocalRankFusion(rank_constant=settings.rank_constant, weights=weights)
    else:
        fusion = WeightedScoreFusion(weights, normalization=settings.normalization,  # type: ignore[arg-type]
                                     floor=settings.fusion_floor)
    # the measured default fusion leaves out a dense branch whose embedder does not cover the question's
    # language (fastrag.retrieval.hybrid.uncovered_dense_branches); a fusion set by hand runs every branch
    measured = all(settings.is_default(name) for name in ("fusion", "normalization", "fusion_floor", "vector_weight",
                                                          "keyword_weight"))
    per_branch = {"vector": settings.vector_candidate_k, "bm25": settings.keyword_candidate_k}
    branch_k = None if mode == "direct" else {name: k for name, k in per_branch.items() if k is not None} or None
    return HybridRetriever({"vector": vector(), "bm25": bm25()}, fusion=fusion, candidate_k=candidate_k,
                           branch_candidate_k=branch_k, branch_timeout=settings.branch_timeout,
                           on_branch_error=settings.on_branch_error,  # type: ignore[arg-type]
                           min_relative_score=settings.min_relative_score, skip_uncovered=measured)  # fmt: skip


QUESTION_MIN_CONFIDENCE = 0.5
"""With no language given, on a store holding several languages: the detector's confidence
(:class:`~fastrag.language.LangidLanguageDetector`, among the store's languages) below which a question is
analysed in every language the store holds, merged, instead of in the detected one. Measured on XQuAD's
5,950 questions among its five languages (``docs/multilingual.md``): none is below 0.5, and the one
detected wrongly ("How are ergänzungsschulen funded?", read as German) has 0.95, so the threshold only
catches questions with next to no evidence (a name, a number)."""


async def question_language_options(lexical: Any, language: str | None) -> dict[str, Any]:
    """The BM25 branch's language options for ``language`` (``language=`` / ``detector=`` of
    :func:`compose`), as :func:`plan_search` decides them (``fastrag eval`` too).

    * A code: ``{"language": code}`` (a code none of the store's documents were analysed in is used, with a
      ``UserWarning``).
    * ``"auto"``: the language detected among those the store's documents were analysed in, its own
      analysis language included (one: that one; none recorded: the store's own; several: a
      :class:`~fastrag.language.LinguaLanguageDetector` over them).
    * ``None`` (the default): on a store that records its documents' languages
      (:class:`~fastrag.protocols.SupportsLanguages`), one language held: that one (a one-language corpus
      gets its language's analysis); several: each question's language detected among them by
      :func:`~fastrag.language.default_language_detector` (langid.py), analysed in every language held
      (merged) when its confidence is below :data:`QUESTION_MIN_CONFIDENCE` or a held language is not one
      the detector knows. ``{}`` (the store's merged analysis) on other stores and when nothing is held.

    Raises:
        ConfigurationError: ``"auto"`` on a store that does not record its documents' languages; with no
            language, a store holding several languages and no ``py3langid`` installed (the message has
            the pip command).
    """
    from fastrag.analysis import LANGUAGE_ALIASES

    if language is None:
        if not isinstance(lexical, SupportsLanguages):
            return {}
        held = await _held_languages(lexical)
        if len(held) == 1:
            return {"language": held[0]}
        if not held:
            return {}
        from fastrag.language import default_language_detector, langid_languages

        known = langid_languages()
        if any(code not in known for code in held):
            return {}
        return {"detector": default_language_detector(held, min_confidence=QUESTION_MIN_CONFIDENCE)}
    if language != "auto":
        if isinstance(lexical, SupportsLanguages):
            held = await _held_languages(lexical)
            if held and LANGUAGE_ALIASES.get(language, language) not in {LANGUAGE_ALIASES.get(h, h) for h in held}:
                warnings.warn(f"language {language}: the store's documents were analysed in {', '.join(held)}, none "
                              f"in {language!r}; the question is analysed in {language!r} all the same",
                              UserWarning, stacklevel=3)  # fmt: skip
        return {"language": language}
    if not isinstance(lexical, SupportsLanguages):
        raise ConfigurationError(f"language auto needs a store that records its documents' languages (the SQLite "
                                 f"store); {lexical!r} does not: give the question's language code")  # fmt: skip
    held = await _held_languages(lexical)
    if len(held) == 1:
        return {"language": held[0]}
    if not held:
        return {}
    from fastrag.language import LinguaLanguageDetector

    return {"detector": LinguaLanguageDetector(held)}


async def _held_languages(lexical: SupportsLanguages) -> list[str]:
    """The languages ``lexical``'s documents were analysed in, sorted; ``""`` (documents analysed by the
    store's own analyzer) stands for the store's own language (English by default)."""
    own = lexical.analyzer.language if lexical.analyzer is not None else None
    return sorted({code or own for code in await lexical.languages()} - {None, ""})
