"""Full-text retrieval: BM25 in a lexical store."""

from __future__ import annotations

from typing import Any

import anyio.to_thread

from fastrag.analysis import language_code
from fastrag.errors import ConfigurationError, InvalidParameterError
from fastrag.filters import FilterLike, combine_filters
from fastrag.models import Document
from fastrag.protocols import LanguageDetector, LexicalStore, SearchesText, SupportsQueryLanguage, SupportsScopedStatistics
from fastrag.retrieval._validation import check_k, check_query
from fastrag.retrieval.limits import DEFAULT_LIMITS, RetrievalLimits
from fastrag.retrieval.pagination import check_offset
from fastrag.retrieval.result import ReturnsResult
from fastrag.retrieval.thresholds import check_min_score, keep_above
from fastrag.scoping import ScopedStore, statistics_scope, warn_collection_statistics
from fastrag.tracing import store_call

__all__ = ["BM25Retriever"]


class BM25Retriever(ReturnsResult):
    """BM25 retrieval through ``store.search_text`` (Robertson & Zaragoza, 2009).

    Args:
        store: any :class:`~fastrag.protocols.LexicalStore`.
        filter: a filter applied to every call, AND-ed with the call's own filter.
        limits: bounds on ``k`` and the query (default :data:`~fastrag.retrieval.limits.DEFAULT_LIMITS`).
        language: the language of every question (ISO 639-1, e.g. ``"de"``): the store analyses the
            question with that language's stemmer (``store.search_text(..., language=...)``).
        detector: a :class:`~fastrag.protocols.LanguageDetector`; each question's language is detected
            (in a worker thread) and passed to the store as ``language``. When it cannot tell, or with
            neither ``language`` nor ``detector``, the store's own analysis is used. ``language`` wins.
        min_score: drop hits whose BM25 score is below this (BM25 is unbounded and grows with the number
            and rarity of matching terms; look at your scores before choosing); applied to the store's top
            ``k``, so fewer may come back. ``None`` (default): no threshold. See
            :mod:`fastrag.retrieval.thresholds`.

    Scores are BM25: unbounded, higher is better, comparable only within one query. Under a
    :class:`~fastrag.retrieval.TenantScopedRetriever` the statistics are the tenant's own where the store
    offers :class:`~fastrag.protocols.SupportsScopedStatistics` (:func:`fastrag.scoping.statistics_scope`).

    Raises:
        ConfigurationError: (when built) ``store`` has no BM25 (no ``search_text``: a dense-only store such
            as Chroma); the message says how to configure a lexical store, as the CLI does.
        InvalidParameterError: (when built) ``language`` is not a language tag, ``detector`` has no
            ``detect``, or either is given for a store whose ``search_text`` takes no ``language``;
            ``min_score`` is not ``None`` or a finite number.

    :meth:`retrieve` raises the first two errors below before the store is called.

    Raises:
        InvalidParameterError: ``k`` is not a positive int within ``limits.max_k``, or the query is empty,
            too long or not valid Unicode.
        FilterError: a filter is malformed.
        BackendError: the store failed.
    """

    accepts_offset = True  # retrieve(..., offset=): fastrag.protocols.SupportsOffset

    name = "bm25"

    def __init__(
        self,
        *,
        store: LexicalStore,
        filter: FilterLike | None = None,  # noqa: A002
        limits: RetrievalLimits = DEFAULT_LIMITS,
        language: str | None = None,
        detector: LanguageDetector | None = None,
        min_score: float | None = None,
    ) -> None:
        if not isinstance(store, SearchesText):
            raise ConfigurationError(
                f"BM25Retriever needs BM25, which {store!r} does not have (no search_text); configure a lexical "
                "store (FASTRAG_LEXICAL_STORE or --lexical-store, e.g. sqlite:///.fastrag/bm25.db) and pass it "
                "as store="
            )
        self.min_score = check_min_score(min_score)
        if language is not None:
            code = language_code(language)
            if code is None:
                raise InvalidParameterError(
                    f"language must be None or a registered language code such as 'de', got {language!r}"
                )
            language = code
        if detector is not None and not isinstance(detector, LanguageDetector):
            raise InvalidParameterError(f"detector has no detect() method: {detector!r}")
        if (language is not None or detector is not None) and not _takes_language(store):
            raise InvalidParameterError(
                f"{store!r}: its search_text takes no language=, so language= and detector= cannot be used with it"
            )
        self.store = store
        self.filter = combine_filters(filter)
        self.limits = limits
        self.language = language
        self.detector = detector

    async def retrieve(
        self, query: str, *, k: int = 10, filter: FilterLike | None = None, offset: int = 0  # noqa: A002
    ) -> list[Document]:
        """Up to ``k`` documents sharing terms with ``query``, best first, matching both filters.

        ``offset`` skips that many results: the call returns ranks ``offset .. offset + k - 1`` of the
        list for ``k = offset + k`` (:mod:`fastrag.retrieval.pagination`).
        """
        check_query(query, self.limits)
        check_k(k, self.limits)
        check_offset(offset, k, self.limits)
        node = combine_filters(self.filter, filter)
        language = self.language
        if language is None and self.detector is not None:
            language = await anyio.to_thread.run_sync(self.detector.detect, query)
        options = {} if language is None else {"language": language}
        scope = statistics_scope()  # set by a TenantScopedRetriever above: score with the tenant's statistics
        with store_call("search_text", self.store) as call:
            if scope is not None and isinstance(self.store, SupportsScopedStatistics):
                found = await self.store.search_text_scoped(query, k=offset + k, scope=scope, filter=node, **options)
            else:
                if scope is not None and not isinstance(self.store, ScopedStore):  # a view scores with its own scope
                    warn_collection_statistics(self.store)
                found = await self.store.search_text(query, k=offset + k, filter=node, **options)
            call.returned(found)
        if self.min_score is not None:
            found = keep_above(found, self.min_score)
        return found[offset:] if offset else found


def _takes_language(store: Any) -> bool:
    """Whether ``store`` declares that its ``search_text`` takes ``language=``
    (:class:`~fastrag.protocols.SupportsQueryLanguage`)."""
    return isinstance(store, SupportsQueryLanguage) and store.accepts_language is True
