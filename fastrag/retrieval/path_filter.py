"""Restrict results by their ``source_uri``: include and exclude globs, and a regular expression."""

from __future__ import annotations

import re
from collections.abc import Sequence

from wcmatch import glob

from fastrag.errors import InvalidParameterError
from fastrag.filters import FilterLike
from fastrag.models import SOURCE_URI, Document
from fastrag.protocols import Retriever
from fastrag.retrieval._validation import check_k, check_positive_int, check_query, fetch_limit
from fastrag.retrieval.limits import DEFAULT_LIMITS, RetrievalLimits
from fastrag.retrieval.pagination import check_offset, retrieve_page
from fastrag.retrieval.result import ReturnsResult

__all__ = ["PathFilterRetriever"]

_GLOB_FLAGS = glob.GLOBSTAR | glob.BRACE | glob.MATCHBASE | glob.DOTGLOB


def _globs(value: str | Sequence[str] | None, name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    patterns = (value,) if isinstance(value, str) else tuple(value)
    for p in patterns:
        if not isinstance(p, str) or not p:
            raise InvalidParameterError(f"{name} patterns must be non-empty strings, got {p!r}")
    try:  # compile now (wcmatch caches it): a pattern that cannot be used fails here, not mid-search
        glob.globmatch("", patterns, flags=_GLOB_FLAGS)
    except Exception as exc:  # noqa: BLE001 - wcmatch's errors (e.g. PatternLimitException) share no base
        raise InvalidParameterError(f"{name} {list(patterns)!r} cannot be used: {exc}") from exc
    return patterns


class PathFilterRetriever(ReturnsResult):
    """Wraps a retriever and keeps only results whose ``source_uri`` passes path rules.

    Globs use ``wcmatch`` syntax: ``**`` crosses folders, ``{a,b}`` alternates, and a pattern without a
    slash matches the file name anywhere (``*.md`` keeps every markdown file). A document passes when it
    matches some ``include_glob`` (if any are given), no ``exclude_glob``, and ``path_filter`` (a regular
    expression searched anywhere in the URI). A document with no ``source_uri`` fails any include rule.

    Because filtering happens after retrieval, the inner retriever is asked for
    ``max(fetch_k, k * 10)`` candidates, so a matching document is not lost because its unfiltered score
    was low. Returned documents keep their scores and are re-stamped with ranks 0..k-1.

    Args:
        retriever: any :class:`~fastrag.protocols.Retriever`.
        include_glob: one pattern or several.
        exclude_glob: one pattern or several.
        path_filter: a regular expression (Python ``re`` syntax). It is searched in each candidate's
            ``source_uri``; a pattern with catastrophic backtracking is the caller's to avoid.
        fetch_k: the least number of candidates to fetch (default 100).
        limits: bounds on ``k`` and the query (default :data:`~fastrag.retrieval.limits.DEFAULT_LIMITS`);
            the candidates fetched are capped at ``limits.max_k``.

    Raises:
        InvalidParameterError: an invalid regular expression; an empty glob pattern or one wcmatch cannot
            use (a brace expansion over 1,000 patterns); ``fetch_k`` not a positive int. The
            wrapper fails closed: it never returns unfiltered results.
    """

    def __init__(
        self,
        retriever: Retriever,
        *,
        include_glob: str | Sequence[str] | None = None,
        exclude_glob: str | Sequence[str] | None = None,
        path_filter: str | None = None,
        fetch_k: int = 100,
        limits: RetrievalLimits = DEFAULT_LIMITS,
    ) -> None:
        self.retriever = retriever
        self.limits = limits
        self.include_glob = _globs(include_glob, "include_glob")
        self.exclude_glob = _globs(exclude_glob, "exclude_glob")
        self.fetch_k = check_positive_int(fetch_k, "fetch_k")
        try:
            self.path_filter = re.compile(path_filter) if path_filter is not None else None
        except (re.error, TypeError) as exc:
            raise InvalidParameterError(f"path_filter is not a valid regular expression: {exc}") from exc
        self.name = getattr(retriever, "name", "retriever")

    @property
    def active(self) -> bool:
        """Whether any path rule is set."""
        return bool(self.include_glob or self.exclude_glob or self.path_filter)

    def accepts(self, source_uri: str | None) -> bool:
        """Whether a document with this ``source_uri`` passes the rules."""
        if source_uri is None:
            return not (self.include_glob or self.path_filter)
        if self.include_glob and not glob.globmatch(source_uri, self.include_glob, flags=_GLOB_FLAGS):
            return False
        if self.exclude_glob and glob.globmatch(source_uri, self.exclude_glob, flags=_GLOB_FLAGS):
            return False
        return self.path_filter is None or self.path_filter.search(source_uri) is not None

    async def retrieve(
        self, query: str, *, k: int = 10, filter: FilterLike | None = None, offset: int = 0  # noqa: A002
    ) -> list[Document]:
        """Up to ``k`` documents passing the path rules, best first; ``offset`` skips that many
        (:mod:`fastrag.retrieval.pagination`).

        Raises:
            InvalidParameterError: ``k`` or the query is invalid (see ``limits``); raised before the inner
                retriever runs.
            Exception: whatever the inner retriever raises.
        """
        check_query(query, self.limits)
        check_k(k, self.limits)
        check_offset(offset, k, self.limits)
        if not self.active:
            return await retrieve_page(self.retriever, query, k=k, offset=offset, filter=filter)
        wanted = offset + k
        fetch = min(max(self.fetch_k, wanted * 10), fetch_limit(self.retriever, self.limits))
        candidates = await self.retriever.retrieve(query, k=fetch, filter=filter)
        kept = [d for d in candidates if self.accepts(d.metadata.get(SOURCE_URI))][:wanted]
        return [d.ranked(score=d.score, rank=r) for r, d in enumerate(kept)][offset:]
