"""Retrieval with a status: tell "nothing matched" from "the store is down" without catching exceptions.

::

    result = await retriever.retrieve_result("how are documents ranked?", k=5)
    if result.retrieval_failed:
        ...  # result.error says why; never answer from result.documents as if nothing matched
    elif result.partial:
        ...  # some branches failed (result.failed_branches); the documents come from the others

:func:`retrieve_result` works with any :class:`~fastrag.protocols.Retriever`; every retriever in
:mod:`fastrag.retrieval` also has a ``retrieve_result`` method that calls it.

How the status is gathered: :func:`retrieve_result` installs a fresh collector in a
:class:`contextvars.ContextVar` for the duration of one call. Stages report into whatever collector the
current context holds (:func:`record_timing`, :func:`record_branch_failure`): a hybrid retriever reports
its failed branches and per-branch timings, however deeply it is wrapped. Each call has its own collector
and each task its own context, so concurrent calls on one retriever never see each other's state. Without
a collector (a plain ``retrieve()`` call) reporting does nothing.

Tracing: every stage :func:`timed` marks is also a child span, and :func:`retrieve_result` a search span
(:mod:`fastrag.tracing`; no-ops without an OpenTelemetry SDK), with or without a collector; the failed,
skipped and incomplete branches reported here are named on the search span too.

Logging (logger ``fastrag.retrieval``): a failure is logged at ERROR exactly once, by the stage that
absorbs it: :func:`retrieve_result` for a failed call, a hybrid retriever for a branch it leaves out of a
partial result. An error that propagates to the caller is not logged on the way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from fastrag import tracing
from fastrag.errors import FilterError, InvalidParameterError
from fastrag.filters import FilterLike
from fastrag.models import Document
from fastrag.protocols import Retriever

__all__ = [
    "RetrievalResult",
    "ReturnsResult",
    "record_branch_failure",
    "record_incomplete",
    "record_timing",
    "record_skipped",
    "record_zero_vector",
    "retrieve_result",
    "stage",
    "timed",
]

logger = logging.getLogger("fastrag.retrieval")


def _frozen(mapping: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True, slots=True)
class RetrievalResult:
    """The outcome of one retrieval call.

    Attributes:
        documents: the documents, best first (empty when the call failed, or when nothing matched).
        error: why the call failed, or ``None``. For a hybrid retriever whose every branch failed, the
            first branch's error (the others are in ``failed_branches``).
        failed_branches: ``{branch: error}`` for every branch that failed, whether its failure ended the
            call or was left out of a partial result. Nested hybrid branches are named ``"outer/inner"``.
        partial: ``True`` when the call succeeded without some branches (see ``failed_branches``), or when
            a stage stopped before examining every candidate (see ``incomplete``): matching documents may
            be missing, and an empty ``documents`` does not prove there is no match.
        incomplete: ``{stage: why}`` for every stage that stopped before examining every candidate (a
            :class:`~fastrag.retrieval.PathFilterRetriever` that reached ``max_k`` candidates).
        timings: wall-clock seconds per stage: ``"total"`` for the whole call; for a hybrid retriever each
            branch by name and ``"fusion"``; for a vector retriever ``"embed"`` and ``"search"``
            (prefixed with the branch name inside a hybrid, e.g. ``"vector/embed"``).
        zero_vector_branches: the dense branches whose question embedded to the zero vector (none of its
            words is in the embedder's vocabulary), by name (``"vector"``; inside a hybrid the branch's
            name there). Such a branch has no neighbours and returns nothing; a hybrid then ranks by its
            other branches alone (an empty branch adds the same zero to every document, so their order
            is unchanged). Each is also logged at WARNING on ``fastrag.retrieval``.
        skipped_branches: ``{branch: why}`` for the hybrid branches not run because they could not help
            (a dense branch whose embedder does not cover the questions' language: ``skip_uncovered`` of
            :class:`~fastrag.retrieval.HybridRetriever`). The other branches rank alone; not ``partial``.
    """

    documents: tuple[Document, ...] = ()
    error: Exception | None = None
    failed_branches: Mapping[str, Exception] = field(default_factory=lambda: MappingProxyType({}))
    partial: bool = False
    timings: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    zero_vector_branches: tuple[str, ...] = ()
    incomplete: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    skipped_branches: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "documents", tuple(self.documents))
        object.__setattr__(self, "failed_branches", _frozen(self.failed_branches))
        object.__setattr__(self, "timings", _frozen(self.timings))
        object.__setattr__(self, "zero_vector_branches", tuple(self.zero_vector_branches))
        object.__setattr__(self, "incomplete", _frozen(self.incomplete))
        object.__setattr__(self, "skipped_branches", _frozen(self.skipped_branches))

    @property
    def retrieval_failed(self) -> bool:
        """``True`` when the call failed (``error`` is set): the empty ``documents`` mean nothing."""
        return self.error is not None


class _Collector:
    """What the stages of one call report; one per :func:`retrieve_result` call, never shared."""

    __slots__ = ("absorbed", "failed", "incomplete", "skipped", "timings", "zero_vector")

    def __init__(self) -> None:
        self.failed: dict[str, Exception] = {}
        self.absorbed = False
        self.timings: dict[str, float] = {}
        self.zero_vector: list[str] = []
        self.incomplete: dict[str, str] = {}
        self.skipped: dict[str, str] = {}


_collector: ContextVar[_Collector | None] = ContextVar("fastrag_retrieval_collector", default=None)
_prefix: ContextVar[str] = ContextVar("fastrag_retrieval_stage_prefix", default="")


def record_timing(name: str, seconds: float) -> None:
    """Add ``seconds`` to stage ``name`` of the current :func:`retrieve_result` call, if there is one."""
    collector = _collector.get()
    if collector is not None:
        key = _prefix.get() + name
        collector.timings[key] = collector.timings.get(key, 0.0) + seconds


class _Timer:
    """The ``with`` block's wall time, added to stage ``name`` when it ends (even when it raises), inside the
    stage's span."""

    __slots__ = ("_name", "_span", "_start")

    def __init__(self, name: str, span: AbstractContextManager[Any]) -> None:
        self._name = name
        self._span = span
        self._start = 0.0

    def __enter__(self) -> Any:
        entered = self._span.__enter__()
        self._start = time.perf_counter()
        return entered

    def __exit__(self, *exc_info: Any) -> None:
        try:
            record_timing(self._name, time.perf_counter() - self._start)
        finally:
            self._span.__exit__(*exc_info)


class _Stage:
    """Within the block, stages report under ``"<name>/"``."""

    __slots__ = ("_name", "_token")

    def __init__(self, name: str) -> None:
        self._name = name
        self._token: Token[str] | None = None

    def __enter__(self) -> None:
        self._token = _prefix.set(f"{_prefix.get()}{self._name}/")

    def __exit__(self, *exc_info: object) -> None:
        if self._token is not None:
            _prefix.reset(self._token)


_UNOBSERVED = nullcontext()  # outside retrieve_result() nobody collects: time and names cost nothing


def timed(
    name: str, *, span: str | AbstractContextManager[Any] | None = None, attributes: Mapping[str, Any] | None = None
) -> AbstractContextManager[Any]:
    """Time the ``with`` block as stage ``name`` (see :func:`record_timing`), even when it raises, and trace it
    as a child span: ``span`` names it (default ``name``; constant ``attributes``, see
    :func:`fastrag.tracing.span`), or is the span's own context manager (:func:`fastrag.tracing.store_call`),
    whose ``__enter__`` result ``as`` gives. Spans are no-ops without an OpenTelemetry SDK.

    Outside a :func:`retrieve_result` call nothing is collected, and the block is not timed at all."""
    if span is None or isinstance(span, str):
        span = tracing.span(name if span is None else span, attributes=attributes)
    return span if _collector.get() is None else _Timer(name, span)


def stage(name: str) -> AbstractContextManager[None]:
    """Within the block (one branch's task), stages report under ``"<name>/"`` (a no-op outside a
    :func:`retrieve_result` call, where nothing is collected)."""
    return _UNOBSERVED if _collector.get() is None else _Stage(name)


def record_zero_vector(name: str) -> None:
    """Report that the dense retriever ``name`` got a zero query vector and returned nothing (inside a
    hybrid branch, the branch's name is reported)."""
    collector = _collector.get()
    if collector is not None:
        branch = _prefix.get().rstrip("/") or name
        if branch not in collector.zero_vector:
            collector.zero_vector.append(branch)


def record_skipped(name: str, reason: str) -> None:
    """Report that hybrid branch ``name`` was not run, and why (``skipped_branches`` of the current
    :func:`retrieve_result` call, if any; a nested branch is named ``"outer/inner"``)."""
    collector = _collector.get()
    tracing.note_skipped_branch(_prefix.get() + name)
    if collector is not None:
        collector.skipped[_prefix.get() + name] = reason


def record_incomplete(name: str, reason: str) -> None:
    """Report that stage ``name`` stopped before examining every candidate, and why: the current
    :func:`retrieve_result` call (if any) is then ``partial``, with ``incomplete[name] = reason``."""
    collector = _collector.get()
    tracing.note_incomplete(_prefix.get() + name)
    if collector is not None:
        collector.incomplete[_prefix.get() + name] = reason


def record_branch_failure(name: str, error: Exception, *, absorbed: bool) -> None:
    """Report that branch ``name`` failed with ``error``.

    Args:
        name: the branch name (prefixed with the enclosing branches, as for timings).
        error: what it raised.
        absorbed: ``True`` when the caller goes on without the branch (a partial result); the caller
            logs it. ``False`` when the error ends the call.
    """
    collector = _collector.get()
    tracing.note_failed_branch(_prefix.get() + name, absorbed=absorbed)
    if collector is not None:
        collector.failed[_prefix.get() + name] = error
        collector.absorbed = collector.absorbed or absorbed


async def retrieve_result(
    retriever: Retriever, query: str, *, k: int = 10, filter: FilterLike | None = None, offset: int = 0  # noqa: A002
) -> RetrievalResult:
    """Run ``retriever.retrieve(query, k=k, filter=filter)`` and report the outcome instead of raising.

    With ``offset``, the page of results ``offset .. offset + k - 1``
    (:func:`~fastrag.retrieval.pagination.retrieve_page`: passed to a retriever that takes it, else sliced).

    Mistakes in the call (an invalid ``k`` or query, a malformed filter) are raised, not reported: they are
    not failures of retrieval. Cancellation propagates as always.

    Args:
        retriever: any :class:`~fastrag.protocols.Retriever`.
        query: the question, as for ``retrieve``.
        k: how many documents to ask for, as for ``retrieve``.
        filter: a filter, as for ``retrieve``.

    Returns:
        A :class:`RetrievalResult`. A failure of retrieval itself (a store down, a timeout, an embedder
        error, any ``Exception`` the retriever raises other than those below) is returned with
        ``retrieval_failed`` true and logged at ERROR once; a healthy store with no match gives
        ``retrieval_failed`` false and no documents.

    Raises:
        InvalidParameterError: the arguments are invalid (``k``, the query), as ``retrieve`` raises them.
        FilterError: the filter is malformed or cannot be expressed by the backend.
    """
    with tracing.search() as trace:
        result = await _retrieve_result(retriever, query, k=k, filter=filter, offset=offset)
        if trace is not None:
            # a knowledge base that called this names its own strategy: these are defaults
            trace.annotate({tracing.RETRIEVAL_TOP_K: k, tracing.SEARCH_STRATEGY: _describe(retriever)}, default=True)
            trace.hits(len(result.documents))
            if result.error is not None:
                trace.failed_with(result.error)
        return result


async def _retrieve_result(
    retriever: Retriever, query: str, *, k: int, filter: FilterLike | None, offset: int  # noqa: A002
) -> RetrievalResult:
    collector = _Collector()
    token = _collector.set(collector)
    prefix_token = _prefix.set("")
    start = time.perf_counter()
    error: Exception | None = None
    documents: list[Document] = []
    try:
        if type(offset) is int and offset == 0:
            documents = await retriever.retrieve(query, k=k, filter=filter)
        else:
            from fastrag.retrieval.pagination import retrieve_page

            documents = await retrieve_page(retriever, query, k=k, offset=offset, filter=filter)
    except (InvalidParameterError, FilterError):
        raise
    except Exception as exc:  # noqa: BLE001 - reporting every failure is this function's job
        error = exc
    finally:
        elapsed = time.perf_counter() - start
        _prefix.reset(prefix_token)
        _collector.reset(token)
    collector.timings["total"] = elapsed
    if error is not None:
        logger.error("retrieval failed (%s): %s", _describe(retriever), _one_line(error), exc_info=error)
        return RetrievalResult(error=error, failed_branches=collector.failed, timings=collector.timings)
    return RetrievalResult(
        documents=tuple(documents),
        failed_branches=collector.failed,
        partial=collector.absorbed or bool(collector.incomplete),
        timings=collector.timings,
        zero_vector_branches=tuple(collector.zero_vector),
        incomplete=collector.incomplete,
        skipped_branches=collector.skipped,
    )



class ReturnsResult:
    """Mixin: a ``retrieve_result`` method that calls :func:`retrieve_result` on ``self``."""

    async def retrieve_result(
        self, query: str, *, k: int = 10, filter: FilterLike | None = None, offset: int = 0  # noqa: A002
    ) -> RetrievalResult:
        """Like ``retrieve``, but failures are reported in the result; see :func:`retrieve_result`."""
        return await retrieve_result(self, query, k=k, filter=filter, offset=offset)  # type: ignore[arg-type]


def _describe(retriever: Any) -> str:
    return getattr(retriever, "name", None) or type(retriever).__name__


def _one_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    return text.replace("\n", " ")
