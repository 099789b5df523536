"""Restrict results by their ``source_uri``: include and exclude globs, and a regular expression."""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Sequence

import anyio.from_thread
import anyio.to_thread
import regex
from wcmatch import glob

from fastrag.errors import InvalidParameterError, RegexTimeoutError, UnsupportedFilterError
from fastrag.filters import Filter, FilterLike, combine_filters, not_all, or_all
from fastrag.filters import field as filter_field
from fastrag.models import SOURCE_URI, Document
from fastrag.protocols import Retriever
from fastrag.retrieval._validation import check_k, check_positive_int, check_query, fetch_limit
from fastrag.retrieval.limits import DEFAULT_LIMITS, RetrievalLimits
from fastrag.retrieval.pagination import check_offset, retrieve_page
from fastrag.retrieval.result import ReturnsResult, record_incomplete

__all__ = ["DEFAULT_PATH_FILTER_TIMEOUT", "PathFilterRetriever"]

logger = logging.getLogger("fastrag.retrieval")

_GLOB_FLAGS = glob.GLOBSTAR | glob.BRACE | glob.MATCHBASE | glob.DOTGLOB
_GLOB_META = re.compile(r"[*?\[{\\]")  # where a pattern stops being literal (wcmatch: *, ?, [...], {...}, escapes)
_GROWTH = 4  # each further page asks the wrapped retriever for this many times more candidates
_CHECK_EVERY = 64  # candidates matched between two checks of the caller's cancellation (in the worker thread)

DEFAULT_PATH_FILTER_TIMEOUT = 1.0
"""Seconds one call may spend matching ``path_filter``, all its candidates together. A path regex such as
``/a/`` or ``\\.md$`` takes about a microsecond per path here, so the most candidates a call reads (``max_k``,
10,000) take about 10 ms: only a pattern that backtracks catastrophically comes near the limit."""


class _Budget:
    """The seconds of regex matching left to one call (shared by its pages)."""

    __slots__ = ("left",)

    def __init__(self, seconds: float) -> None:
        self.left = seconds


def _literal_prefix(pattern: str) -> str | None:
    """A string every path matching ``pattern`` starts with, or ``None`` when there is none to use.

    The pattern's literal part, up to its first wildcard, less a trailing ``/``. A pattern without ``/``
    matches a file name anywhere (MATCHBASE) and one with ``//``, ``.`` or ``..`` segments is normalised
    by wcmatch: neither has a usable prefix."""
    if "/" not in pattern:
        return None
    match = _GLOB_META.search(pattern)
    literal = (pattern if match is None else pattern[: match.start()]).rstrip("/")
    segments = literal.split("/")
    if not literal or "//" in literal or any(seg in (".", "..") for seg in segments[:-1]):
        return None
    if segments[-1] in (".", ".."):
        return None
    return literal


def _excluded_prefix(pattern: str) -> str | None:
    """``L`` when ``pattern`` is ``L**`` with ``L`` a literal folder path ending in ``/``: every path starting
    with ``L`` matches it, so the store may leave those out. ``None`` otherwise."""
    if not pattern.endswith("/**"):
        return None
    folder = pattern[:-2]
    prefix = _literal_prefix(folder + "x")  # the folder with one literal file name, to reuse the checks
    return folder if prefix == folder + "x" else None


def _pushdown(include: tuple[str, ...], exclude: tuple[str, ...]) -> Filter | None:
    """A filter on ``source_uri`` that every document passing the globs matches (a superset of them), for the
    store to apply before ranking; ``None`` when nothing can be said."""
    parts: list[Filter] = []
    if include:
        prefixes = [_literal_prefix(p) for p in include]
        if all(p is not None for p in prefixes):
            unique = sorted(set(prefixes))  # type: ignore[arg-type]
            starts = [filter_field(SOURCE_URI).starts_with(p) for p in unique]
            parts.append(starts[0] if len(starts) == 1 else or_all(*starts))
    for pattern in exclude:
        folder = _excluded_prefix(pattern)
        if folder is not None:
            parts.append(not_all(filter_field(SOURCE_URI).starts_with(folder)))
    return combine_filters(*parts) if parts else None  # type: ignore[return-value]


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

    Rules the store can express are pushed into the call's filter, so the store ranks only documents that
    may pass: include globs whose every pattern has a literal folder prefix (``notes/a/**``,
    ``docs/*.md``) become ``startsWith(source_uri, prefix)``, and an exclude glob ``folder/**`` becomes
    ``not startsWith(source_uri, "folder/")``. (A store that cannot express that filter, as Chroma past its
    prefix length, gets the call without it.) The rules themselves are then checked on every candidate,
    whatever was pushed.

    Candidates are read in pages: the inner retriever is first asked for ``max(fetch_k, k * 10)``, then
    for four times as many each time fewer than ``k`` passed, until ``k`` pass or the inner retriever
    returns fewer than asked (every candidate was examined). So a matching document is never lost because
    better-scoring documents failed the rules. Only at ``limits.max_k`` candidates does it stop early:
    the result is then marked incomplete (``retrieve_result(...).partial`` and ``incomplete`` name it, and
    a warning is logged), never presented as "no match". Returned documents keep their scores and are
    re-stamped with ranks 0..k-1.

    Args:
        retriever: any :class:`~fastrag.protocols.Retriever`.
        include_glob: one pattern or several.
        exclude_glob: one pattern or several.
        path_filter: a regular expression, in the syntax of the ``regex`` module (Python's ``re`` syntax,
            plus atomic groups ``(?>...)`` and possessive quantifiers ``a++``). It is searched in
            each candidate's ``source_uri``, off the event loop (a worker thread; the ``regex`` module
            releases the GIL while it matches), under ``path_filter_timeout``.
        path_filter_timeout: the seconds one call may spend matching ``path_filter``: per call (one
            ``retrieve``, every page of candidates together; one ``accepts``), not per path. Past it the
            call raises :class:`~fastrag.errors.RegexTimeoutError` (default
            :data:`DEFAULT_PATH_FILTER_TIMEOUT`, 1 s). A call cancelled meanwhile (a hybrid's
            ``branch_timeout``, a cancel scope) returns at once; its worker thread stops at its next
            candidate, or when its current match runs out of this time.
        fetch_k: the least number of candidates to fetch (default 100).
        limits: bounds on ``k`` and the query (default :data:`~fastrag.retrieval.limits.DEFAULT_LIMITS`);
            the candidates fetched are capped at ``limits.max_k``.

    Raises:
        InvalidParameterError: an invalid regular expression; an empty glob pattern or one wcmatch cannot
            use (a brace expansion over 1,000 patterns); ``fetch_k`` not a positive int;
            ``path_filter_timeout`` not a finite number > 0. The wrapper fails closed: it never returns
            unfiltered results.
    """

    accepts_offset = True  # retrieve(..., offset=): fastrag.protocols.SupportsOffset

    def __init__(
        self,
        retriever: Retriever,
        *,
        include_glob: str | Sequence[str] | None = None,
        exclude_glob: str | Sequence[str] | None = None,
        path_filter: str | None = None,
        fetch_k: int = 100,
        limits: RetrievalLimits = DEFAULT_LIMITS,
        path_filter_timeout: float = DEFAULT_PATH_FILTER_TIMEOUT,
    ) -> None:
        self.retriever = retriever
        self.limits = limits
        self.include_glob = _globs(include_glob, "include_glob")
        self.exclude_glob = _globs(exclude_glob, "exclude_glob")
        self.fetch_k = check_positive_int(fetch_k, "fetch_k")
        if (
            isinstance(path_filter_timeout, bool)
            or not isinstance(path_filter_timeout, int | float)
            or not math.isfinite(path_filter_timeout)
            or path_filter_timeout <= 0
        ):
            raise InvalidParameterError(
                f"path_filter_timeout must be a finite number of seconds > 0, got {path_filter_timeout!r}"
            )
        self.path_filter_timeout = float(path_filter_timeout)
        try:
            self.path_filter: regex.Pattern[str] | None = (
                regex.compile(path_filter) if path_filter is not None else None
            )
        except (regex.error, TypeError, ValueError) as exc:
            raise InvalidParameterError(f"path_filter is not a valid regular expression: {exc}") from exc
        self.name = getattr(retriever, "name", "retriever")
        self.pushdown: Filter | None = _pushdown(self.include_glob, self.exclude_glob)
        """The filter on ``source_uri`` given to the store (``None``: the rules are only checked after)."""

    @property
    def active(self) -> bool:
        """Whether any path rule is set."""
        return bool(self.include_glob or self.exclude_glob or self.path_filter)

    def accepts(self, source_uri: str | None) -> bool:
        """Whether a document with this ``source_uri`` passes the rules.

        Raises:
            RegexTimeoutError: matching ``path_filter`` took longer than ``path_filter_timeout``.
        """
        return self._accepts(source_uri, _Budget(self.path_filter_timeout))

    def _accepts(self, source_uri: str | None, budget: _Budget) -> bool:
        if source_uri is None:
            return not (self.include_glob or self.path_filter)
        if self.include_glob and not glob.globmatch(source_uri, self.include_glob, flags=_GLOB_FLAGS):
            return False
        if self.exclude_glob and glob.globmatch(source_uri, self.exclude_glob, flags=_GLOB_FLAGS):
            return False
        return self.path_filter is None or self._search(self.path_filter, source_uri, budget)

    def _search(self, pattern: regex.Pattern[str], source_uri: str, budget: _Budget) -> bool:
        """``pattern.search(source_uri)``, within what is left of the call's time; the time it took is spent."""
        started = time.monotonic()
        try:
            if budget.left <= 0:
                raise TimeoutError("regex timed out")
            # concurrent=True releases the GIL while matching, so the event loop keeps running
            return pattern.search(source_uri, concurrent=True, timeout=budget.left) is not None
        except TimeoutError as exc:
            raise RegexTimeoutError(
                f"path_filter {pattern.pattern!r} ran past its time limit of {self.path_filter_timeout:g} s "
                f"(path_filter_timeout, for one search) while matching source_uri {source_uri!r}: it backtracks "
                "catastrophically on such paths. Rewrite it without nested or overlapping repetition (such as "
                "(a+)+ or (a|a)+), or with an atomic group (?>...) or a possessive quantifier (a++)",
                pattern=pattern.pattern, timeout=self.path_filter_timeout, text=source_uri,
            ) from exc
        finally:
            budget.left -= time.monotonic() - started

    def _kept(self, candidates: list[Document], budget: _Budget) -> list[Document]:
        """The candidates that pass, in order; run in a worker thread when there is a regex to match."""
        kept = []
        for i, doc in enumerate(candidates):
            if i % _CHECK_EVERY == _CHECK_EVERY - 1:
                anyio.from_thread.check_cancelled()  # the caller gave up (its thread was abandoned): stop here
            if self._accepts(doc.metadata.get(SOURCE_URI), budget):
                kept.append(doc)
        return kept

    async def _filter(self, candidates: list[Document], budget: _Budget) -> list[Document]:
        if self.path_filter is None:  # globs only: quick, on the event loop
            return [d for d in candidates if self._accepts(d.metadata.get(SOURCE_URI), budget)]
        # a regex may take up to path_filter_timeout: off the event loop, abandoned if the caller is cancelled
        return await anyio.to_thread.run_sync(self._kept, candidates, budget, abandon_on_cancel=True)

    async def retrieve(
        self, query: str, *, k: int = 10, filter: FilterLike | None = None, offset: int = 0  # noqa: A002
    ) -> list[Document]:
        """Up to ``k`` documents passing the path rules, best first; ``offset`` skips that many
        (:mod:`fastrag.retrieval.pagination`).

        Raises:
            InvalidParameterError: ``k`` or the query is invalid (see ``limits``); raised before the inner
                retriever runs.
            RegexTimeoutError: matching ``path_filter`` over this call's candidates took longer than
                ``path_filter_timeout``.
            Exception: whatever the inner retriever raises.
        """
        check_query(query, self.limits)
        check_k(k, self.limits)
        check_offset(offset, k, self.limits)
        if not self.active:
            return await retrieve_page(self.retriever, query, k=k, offset=offset, filter=filter)
        wanted = offset + k
        node = combine_filters(filter)
        limit = fetch_limit(self.retriever, self.limits)
        fetch = min(max(self.fetch_k, wanted * 10), limit)
        pushed = self.pushdown
        budget = _Budget(self.path_filter_timeout)
        while True:
            try:
                candidates = await self.retriever.retrieve(query, k=fetch, filter=combine_filters(node, pushed))
            except UnsupportedFilterError:
                if pushed is None:
                    raise
                pushed = None  # the store cannot express the prefix: check every candidate here instead
                continue
            kept = await self._filter(candidates, budget)
            if len(kept) >= wanted or len(candidates) < fetch:
                break  # enough, or every candidate was examined
            if fetch >= limit:
                reason = (
                    f"examined the best {len(candidates)} candidates (max_k) and {len(kept)} passed the path "
                    "rules; candidates beyond them were not examined"
                )
                record_incomplete("path_filter", reason)
                logger.warning("path filter: %s (rules that name a folder prefix are applied by the store)", reason)
                break
            fetch = min(fetch * _GROWTH, limit)
        return [d.ranked(score=d.score, rank=r) for r, d in enumerate(kept[:wanted])][offset:]
