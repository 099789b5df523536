"""Hybrid retrieval: run several retrievers concurrently and fuse their ranked lists into one."""

from __future__ import annotations

import copy
import logging
import math
import warnings
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from types import MappingProxyType
from typing import Any, Literal, TypeAlias

import anyio

from fastrag.analysis import primary_language
from fastrag.defaults import (
    DENSE_MODEL_CANDIDATE_K,
    DENSE_MODEL_FLOOR,
    DENSE_MODEL_LEXICAL_WEIGHT,
    LEXICAL_WEIGHT_BY_EMBEDDER,
    STATIC_MODEL_CANDIDATE_K,
    STATIC_MODEL_FLOOR,
    hybrid_defaults,
)
from fastrag.deferred import DEFER_ROWS_FOR, defers_rows
from fastrag.errors import InvalidParameterError, RetrievalTimeoutError
from fastrag.filters import FilterLike, combine_filters
from fastrag.models import Document
from fastrag.embedding_languages import MODEL_LANGUAGES
from fastrag.protocols import ChecksBranches, DeclaresLanguages, RankFusion, Retriever, SupportsDepth
from fastrag.retrieval._validation import (
    check_k,
    check_positive_int,
    check_query,
    fetch_limit,
)
from fastrag.retrieval.bm25 import BM25Retriever
from fastrag.retrieval.fusion import WeightedScoreFusion
from fastrag.retrieval.limits import DEFAULT_LIMITS, RetrievalLimits
from fastrag.retrieval.pagination import check_offset
from fastrag.retrieval.result import (
    ReturnsResult,
    record_branch_failure,
    record_skipped,
    stage,
    timed,
)
from fastrag.retrieval.thresholds import check_min_relative_score, keep_relative
from fastrag.retrieval.vector import VectorRetriever
from fastrag.tracing import BRANCH, store_call

__all__ = [
    "DENSE_MODEL_CANDIDATE_K",
    "DENSE_MODEL_FLOOR",
    "STATIC_MODEL_FLOOR",
    "DENSE_MODEL_LEXICAL_WEIGHT",
    "EMBEDDER_LANGUAGES",
    "LEXICAL_WEIGHT_BY_EMBEDDER",
    "STATIC_MODEL_CANDIDATE_K",
    "BranchErrorPolicy",
    "HybridRetriever",
    "SkippedBranchWarning",
    "default_candidate_k",
    "default_fusion",
    "embedder_languages",
    "uncovered_dense_branches",
]

logger = logging.getLogger("fastrag.retrieval")

BranchErrorPolicy: TypeAlias = Literal["raise", "partial"]
_POLICIES = ("raise", "partial")


EMBEDDER_LANGUAGES: Mapping[str, frozenset[str]] = MappingProxyType({
    **MODEL_LANGUAGES,
    **{f"sentence-transformers:{model}": codes for model, codes in MODEL_LANGUAGES.items()},
    **{f"cohere:{model}": codes for model, codes in MODEL_LANGUAGES.items() if model.startswith("embed-")},
    **{f"openai:{model}": codes for model, codes in MODEL_LANGUAGES.items()},
})
"""The languages (ISO 639-1) known embedders were trained for, by ``embedder.name``, for an embedder that
does not declare them (:class:`~fastrag.protocols.DeclaresLanguages`): the models of
:data:`fastrag.embedding_languages.MODEL_LANGUAGES` under their own names and the names the built-in
embedders give them (``"sentence-transformers:all-MiniLM-L6-v2"``). The shipped static models and
all-MiniLM-L6-v2 are English. See :func:`embedder_languages`."""


def embedder_languages(embedder: object) -> frozenset[str] | None:
    """The languages ``embedder`` covers, ``None`` when unknown (a multilingual or undeclared model).

    An embedder declares them with a ``languages`` attribute (:class:`~fastrag.protocols.DeclaresLanguages`,
    as every built-in embedder does: a set of ISO 639-1 codes, or ``None`` for unknown); an embedder that
    declares none (no attribute, ``None``, or a value that is not a non-empty set of strings) is looked up
    by its ``name`` in :data:`EMBEDDER_LANGUAGES`. Unknown languages: the dense branch runs on questions in
    every language (``docs/multilingual.md``).
    """
    declared = embedder.languages if isinstance(embedder, DeclaresLanguages) else None
    if isinstance(declared, set | frozenset) and declared and all(isinstance(c, str) for c in declared):
        return frozenset(code for c in declared if (code := primary_language(c)))
    name = getattr(embedder, "name", None)
    return EMBEDDER_LANGUAGES.get(name) if isinstance(name, str) else None


class SkippedBranchWarning(UserWarning):
    """A hybrid branch will not run: its embedder does not cover the questions' language."""


def uncovered_dense_branches(branches: Mapping[str, Retriever]) -> dict[str, str]:
    """``{branch: why}`` for the dense branch of a one-``"bm25"``-one-``"vector"`` hybrid whose embedder
    does not cover the language the BM25 branch analyses every question in (its fixed ``language``).
    Empty otherwise: any other branches, a BM25 branch without a fixed language (detecting it per
    question, or analysing in each language its store holds: a store may hold documents in several, so
    its own analyzer's language does not decide), or an embedder whose languages are unknown."""
    if set(branches) != {"bm25", "vector"}:
        return {}
    bm25, vector = branches["bm25"], branches["vector"]
    code = primary_language(getattr(bm25, "language", None))
    embedder = getattr(vector, "embedder", None)
    covered = embedder_languages(embedder)
    if code is None or covered is None or code in covered:
        return {}
    return {"vector": _uncovered(embedder, covered, f"the questions are analysed in {code!r}")}


def _uncovered(embedder: object, covered: frozenset[str], language: str) -> str:
    """Why a dense branch is not run: ``embedder`` covers ``covered``, not the questions' ``language``."""
    name = getattr(embedder, "name", type(embedder).__name__)
    return f"the embedder {name!r} covers {', '.join(sorted(covered))}; {language}: ranked by BM25 alone"


def _detected_coverage(branches: Mapping[str, Retriever]) -> tuple[Any, frozenset[str]] | None:
    """``(detector, covered languages)`` for a one-``"bm25"``-one-``"vector"`` hybrid whose BM25 branch
    detects each question's language (a ``detector``, no fixed ``language``) and whose embedder's
    languages are known; ``None`` otherwise."""
    if set(branches) != {"bm25", "vector"}:
        return None
    bm25 = branches["bm25"]
    detector = getattr(bm25, "detector", None)
    if detector is None or getattr(bm25, "language", None) is not None or not isinstance(bm25, BM25Retriever):
        return None
    covered = embedder_languages(getattr(branches["vector"], "embedder", None))
    return None if covered is None else (detector, covered)


def default_candidate_k(branches: Mapping[str, Retriever] | None = None) -> int:
    """The per-branch candidate count :class:`HybridRetriever` uses when none is given, chosen by measurement.

    :data:`STATIC_MODEL_CANDIDATE_K` (40) for one ``"bm25"`` and one ``"vector"`` branch whose embedder is a
    shipped static model; :data:`DENSE_MODEL_CANDIDATE_K` (200) otherwise.
    """
    if branches is None or set(branches) != {"bm25", "vector"}:
        return DENSE_MODEL_CANDIDATE_K
    name = getattr(getattr(branches["vector"], "embedder", None), "name", None)
    return hybrid_defaults(name if isinstance(name, str) else None).candidate_k


def default_fusion(branches: Mapping[str, Retriever] | None = None) -> RankFusion:
    """The fusion :class:`HybridRetriever` uses when none is given, chosen by measurement.

    For exactly one branch named ``"bm25"`` and one named ``"vector"``:

    * the dense branch's ``embedder.name`` is in :data:`LEXICAL_WEIGHT_BY_EMBEDDER` (a shipped static
      model): :class:`WeightedScoreFusion` with min-max normalisation, BM25 that weight, dense the rest,
      ``floor`` :data:`STATIC_MODEL_FLOOR`;
    * any other embedder (or none with a name): z-score normalisation, BM25
      :data:`DENSE_MODEL_LEXICAL_WEIGHT` (0.55), dense 0.45, ``floor`` :data:`DENSE_MODEL_FLOOR`.

    Any other set of branches (unmeasured): min-max normalisation, every branch the same weight, the
    default floor (:data:`~fastrag.retrieval.fusion.DEFAULT_FLOOR`). In every case a document a branch
    matched scores above the documents it did not match in that branch (issue 25).

    Args:
        branches: the branches by name, as :class:`HybridRetriever` names them; ``None`` for none known.

    Returns:
        A new fusion object (never shared between calls).
    """
    if branches is not None and set(branches) == {"bm25", "vector"}:
        name = getattr(getattr(branches["vector"], "embedder", None), "name", None)
        table = hybrid_defaults(name if isinstance(name, str) else None)
        return WeightedScoreFusion({"bm25": table.keyword_weight, "vector": table.vector_weight},
                                   normalization=table.normalization, floor=table.floor)  # fmt: skip
    return WeightedScoreFusion(normalization="min_max")


class HybridRetriever(ReturnsResult):
    """Runs every branch retriever concurrently with the same query and filter, then fuses the lists.

    Args:
        retrievers: the branches. A mapping gives their names; for a sequence, each branch is named by its
            ``name`` attribute when that is a non-empty str, else by its lowercased class name without
            ``"retriever"`` (``VectorRetriever`` -> ``"vector"``, ``BM25Retriever`` -> ``"bm25"``); a
            repeated name gets a suffix (``"vector"``, ``"vector_1"``, ``"vector_2"``). With a sequence of
            fusion weights, the weights align with this order.
        fusion: how the branch lists are combined; ``None`` uses :func:`default_fusion`.
        candidate_k: how many documents each branch is asked for (at least ``k``, at most
            ``limits.max_k``); fusing longer lists lets a document ranked low by one branch but high by
            another surface. ``None`` (default): :func:`default_candidate_k`, chosen with the default
            fusion on SciFact's train queries (200, or 40 with a shipped static model).
        branch_timeout: seconds each branch may take; a branch still running then is cancelled and
            fails with :class:`~fastrag.errors.RetrievalTimeoutError`. ``None`` (default): no limit.
        on_branch_error: what a failing branch (an ``Exception``, a timeout included) does to the call.
            ``"raise"`` (default): the call fails with the branch's error and the other branches are
            cancelled. ``"partial"``: the other branches finish and their lists are fused without the
            failed one; the failure is logged at ERROR once, and :meth:`retrieve_result` marks the result
            ``partial`` and names the branch in ``failed_branches``. If every branch fails, the call
            fails with the first branch's error either way.
        limits: bounds on ``k`` and the query (default :data:`~fastrag.retrieval.limits.DEFAULT_LIMITS`).
        min_relative_score: keep only fused documents scoring at least this fraction of the query's best
            fused score (``0.5``: half the best); ``None`` (default) keeps all. Above 1 warns: no document
            can reach it. There is no absolute threshold on fused scores, which measure rank or per-query
            normalised score, not relevance: set ``min_score`` on a branch instead (it cuts that branch's
            list before fusion). See :mod:`fastrag.retrieval.thresholds`.
        branch_candidate_k: per-branch candidate counts that replace ``candidate_k`` for the branches named
            (``{"bm25": 100}``); the fusion then normalises (or ranks) each list over its first
            ``max(candidate_k, *branch_candidate_k.values())`` documents.
        skip_uncovered: ``None`` (default): as ``True`` with the default fusion (``fusion=None``), as
            ``False`` with any other. ``True``: do not run a dense branch whose
            embedder does not cover the language of the questions (:func:`uncovered_dense_branches`: the
            BM25 branch has a fixed ``language`` that is not among :func:`embedder_languages`): ranked by
            BM25 alone, the result names the branch in ``skipped_branches``, and a
            :class:`SkippedBranchWarning` (a ``UserWarning``) says why, here. When the BM25 branch detects each
            question's language instead (a ``detector``), the hybrid detects it first (once: the BM25
            branch is given the result) and leaves the dense branch out of that call only, named in
            ``skipped_branches``. With the shipped English static
            model the dense branch moved XQuAD nDCG@10 by -0.0012 to +0.0016 in the other languages
            measured (``benchmarks/results/languages.md``). ``False``, or any ``fusion``, runs every branch.

    Raises:
        InvalidParameterError: ``min_relative_score`` is not ``None`` or a finite number > 0; no retrievers; a branch lacks ``retrieve``; a mapping key is not a
            non-empty str; ``candidate_k`` is not a positive int; ``limits`` is not a ``RetrievalLimits``; ``fusion`` lacks
            ``fuse``; the fusion's weights do not fit the branches; ``branch_timeout`` is not a finite
            number > 0; ``on_branch_error`` is unknown; ``branch_candidate_k`` names an unknown branch or a
            count that is not a positive int; ``skip_uncovered=True`` with a fusion other than
            :class:`~fastrag.retrieval.fusion.WeightedScoreFusion`.
    """

    accepts_offset = True  # retrieve(..., offset=): fastrag.protocols.SupportsOffset

    name = "hybrid"

    def __init__(
        self,
        retrievers: Sequence[Retriever] | Mapping[str, Retriever],
        *,
        fusion: RankFusion | None = None,
        candidate_k: int | None = None,
        branch_timeout: float | None = None,
        on_branch_error: BranchErrorPolicy = "raise",
        limits: RetrievalLimits = DEFAULT_LIMITS,
        min_relative_score: float | None = None,
        skip_uncovered: bool | None = None,
        branch_candidate_k: Mapping[str, int] | None = None,
    ) -> None:
        self._min_relative_score = check_min_relative_score(min_relative_score)
        if isinstance(retrievers, Mapping):
            for key in retrievers:
                if not isinstance(key, str) or not key:
                    raise InvalidParameterError(f"branch names must be non-empty strings, got {key!r}")
            branches = dict(retrievers)
        else:
            branches = _name_branches(list(retrievers))
        if not branches:
            raise InvalidParameterError("HybridRetriever needs at least one retriever")
        for key, retriever in branches.items():
            if not isinstance(retriever, Retriever):
                raise InvalidParameterError(f"branch {key!r} has no retrieve() method: {retriever!r}")
        if not isinstance(limits, RetrievalLimits):
            raise InvalidParameterError(f"limits must be a RetrievalLimits, got {limits!r}")
        if candidate_k is None:
            candidate_k = default_candidate_k(branches)
        check_positive_int(candidate_k, "candidate_k")
        if branch_timeout is not None and (
            isinstance(branch_timeout, bool)
            or not isinstance(branch_timeout, int | float)
            or not math.isfinite(branch_timeout)
            or branch_timeout <= 0
        ):
            raise InvalidParameterError(f"branch_timeout must be None or a finite number > 0, got {branch_timeout!r}")
        if on_branch_error not in _POLICIES:
            raise InvalidParameterError(f"on_branch_error must be one of {_POLICIES}, got {on_branch_error!r}")
        skip = fusion is None if skip_uncovered is None else skip_uncovered is True
        if skip and fusion is not None and not isinstance(fusion, WeightedScoreFusion):
            raise InvalidParameterError("skip_uncovered=True needs a WeightedScoreFusion (or fusion=None): the branches "
                                        "that run are fused with its normalisation")  # fmt: skip
        per_branch = dict(branch_candidate_k or {})
        for key, value in per_branch.items():
            if key not in branches:
                raise InvalidParameterError(f"branch_candidate_k names no branch {key!r}; branches: {list(branches)}")
            check_positive_int(value, f"branch_candidate_k[{key!r}]")
        skipped = uncovered_dense_branches(branches) if skip else {}
        detect = _detected_coverage(branches) if skip else None
        for name, why in skipped.items():
            warnings.warn(f"hybrid branch {name!r} is not run: {why}", SkippedBranchWarning, stacklevel=2)
        fusion = default_fusion(branches) if fusion is None else fusion
        if not isinstance(fusion, RankFusion):
            raise InvalidParameterError(f"fusion has no fuse() method: {fusion!r}")
        if isinstance(fusion, ChecksBranches):
            fusion.check_branches(list(branches))
        self._retrievers = MappingProxyType(branches)
        self._skipped = MappingProxyType(skipped)
        self._detect = detect
        self._fusion = fusion
        self._candidate_k = candidate_k
        self._branch_candidate_k = MappingProxyType(per_branch)
        self._branch_timeout = branch_timeout
        self._on_branch_error: BranchErrorPolicy = on_branch_error
        self.limits = limits

    async def _for_question(self, query: str) -> tuple[Mapping[str, Retriever], Mapping[str, str]]:
        """The branches to run for ``query`` and ``{branch: why}`` for those left out: the constructor's
        decision, or, with a detecting BM25 branch and an embedder of known languages, the question's
        detected language decides (the BM25 branch then analyses in it without detecting again)."""
        if self._detect is None:
            return self._retrievers, self._skipped
        detector, covered = self._detect
        with timed("detect", span="detect_language"):
            code = primary_language(await anyio.to_thread.run_sync(detector.detect, query))
        if code is None:
            return self._retrievers, self._skipped
        bm25 = copy.copy(self._retrievers["bm25"])
        bm25.language, bm25.detector = code, None  # type: ignore[attr-defined]
        branches = {**self._retrievers, "bm25": bm25}
        if code in covered:
            return branches, self._skipped
        embedder = getattr(self._retrievers["vector"], "embedder", None)
        return branches, {"vector": _uncovered(embedder, covered, f"the question was detected as {code!r}")}

    @property
    def skipped_branches(self) -> Mapping[str, str]:
        """``{branch: why}`` for the branches never run (see ``skip_uncovered``); empty when all run. With a
        detecting BM25 branch the decision is per question: see ``RetrievalResult.skipped_branches``."""
        return self._skipped

    @property
    def retrievers(self) -> Mapping[str, Retriever]:
        """The branches by name, in branch order (read-only)."""
        return self._retrievers

    @property
    def fusion(self) -> RankFusion:
        """The fusion that combines the branch lists."""
        return self._fusion

    @property
    def candidate_k(self) -> int:
        """How many documents each branch is asked for, at least (``max(candidate_k, k)``)."""
        return self._candidate_k

    @property
    def branch_timeout(self) -> float | None:
        """Seconds each branch may take, or ``None``."""
        return self._branch_timeout

    @property
    def min_relative_score(self) -> float | None:
        """The fraction of the best fused score a document needs, or ``None``."""
        return self._min_relative_score

    @property
    def on_branch_error(self) -> BranchErrorPolicy:
        """``"raise"`` or ``"partial"``: what a failing branch does to the call."""
        return self._on_branch_error

    async def retrieve(
        self, query: str, *, k: int = 10, filter: FilterLike | None = None, offset: int = 0
    ) -> list[Document]:
        """Up to ``k`` fused documents for ``query`` matching ``filter``, best first.

        ``offset`` skips that many: the call returns ranks ``offset .. offset + k - 1`` of the fused list for
        ``offset + k`` (:mod:`fastrag.retrieval.pagination`); with fastrag's fusions pages are consistent at
        every depth (see above).

        Every branch runs concurrently in one anyio task group with ``k=max(candidate_k, k)`` (at most
        ``limits.max_k``, or the branch's own ``limits.max_k`` when lower) and the same
        filter (parsed once, then passed to each branch as the AST); then the fusion combines the lists.

        The top of the list does not depend on ``k``: fastrag's fusions are given ``depth=candidate_k``,
        so they normalise (or rank) each branch over its first ``candidate_k`` documents whatever ``k`` is,
        and a ``k`` above ``candidate_k`` only appends documents below them (see
        :meth:`~fastrag.retrieval.fusion.WeightedScoreFusion.fuse`). ``retrieve(q, k=10)`` is the first
        10 of ``retrieve(q, k=60)``, same ids, order and scores. A third-party fusion whose ``fuse`` takes
        no ``depth`` gets the lists of ``max(candidate_k, k)`` and may order them differently per ``k``.

        Returns:
            Copies stamped with the fused ``score`` (higher is better; its range depends on the fusion),
            zero-based ``rank``, and ``metadata["branches"]`` with each branch's score and rank. With
            ``on_branch_error="partial"``, the fusion of the branches that succeeded (a failed branch
            counts as an empty list, so the healthy branches' order is kept).

        Raises:
            InvalidParameterError: ``k`` is not a positive int within ``limits.max_k``, or ``query`` is not
                a non-blank str within ``limits.max_query_chars`` (raised before any branch runs).
            FilterError: ``filter`` is malformed (raised before any branch runs).
            RetrievalTimeoutError: a branch ran past ``branch_timeout`` (with ``"raise"``, or when every
                branch failed).
            Exception: with ``"raise"``, whatever a failing branch raises, unchanged (the other branches
                are cancelled); with ``"partial"``, the same but only when every branch failed. When several
                branches fail, the error of the first in branch order is raised, with a note naming each
                other branch's error (never an ``ExceptionGroup``).
        """
        check_query(query, self.limits)
        check_k(k, self.limits)
        check_offset(offset, k, self.limits)
        node = combine_filters(filter)
        depth = max([self._candidate_k, *self._branch_candidate_k.values()])
        partial = self._on_branch_error == "partial"
        timeout = self._branch_timeout
        found: dict[str, list[Document]] = {}
        failed: dict[str, Exception] = {}

        async def run(name: str, retriever: Retriever) -> None:
            try:
                with timed(name, span=f"branch {name}", attributes={BRANCH: name}), stage(name):
                    # no cancel scope without a deadline: one less per branch and call
                    with anyio.move_on_after(timeout) if timeout is not None else nullcontext():
                        wanted = max(self._branch_candidate_k.get(name, self._candidate_k), offset + k)
                        branch_k = min(wanted, fetch_limit(retriever, self.limits))
                        found[name] = await retriever.retrieve(query, k=branch_k, filter=node)
                    if name not in found:  # our deadline cancelled it (any other cancellation propagates)
                        raise RetrievalTimeoutError(
                            f"hybrid branch {name!r} took longer than {timeout} s", timeout=timeout or 0.0, stage=name
                        )
            except Exception as exc:
                failed[name] = exc
                if not partial:
                    raise  # cancels the other branches
                # with "partial", decided below, once every branch has finished

        retrievers, skipped = await self._for_question(query)
        for name, why in skipped.items():
            record_skipped(name, why)
        # every branch on one store that can leave rows out: the branches carry ids and scores, and the
        # store reads the rows of the k fused documents once (fastrag.deferred)
        store = self._rows_store
        token = DEFER_ROWS_FOR.set(store) if store is not None else None
        try:
            async with anyio.create_task_group() as tg:
                for name, retriever in retrievers.items():
                    if name not in skipped:
                        tg.start_soon(run, name, retriever, name=f"hybrid branch {name!r}")
        except BaseExceptionGroup as group:
            if any(not isinstance(exc, Exception) for exc in group.exceptions):
                raise  # KeyboardInterrupt, SystemExit: not a branch failure
        finally:
            if token is not None:
                DEFER_ROWS_FOR.reset(token)
        ordered = [(name, failed[name]) for name in self._retrievers if name in failed]
        if ordered and (not partial or len(ordered) == len(self._retrievers)):
            for name, exc in ordered:
                record_branch_failure(name, exc, absorbed=False)
            first = ordered[0][1]
            for name, exc in ordered[1:]:
                first.add_note(f"hybrid branch {name!r} failed too: {type(exc).__name__}: {exc}")
            raise first  # outside the except block, so its own __cause__/__context__ stay as they were
        for name, exc in ordered:
            record_branch_failure(name, exc, absorbed=True)
            logger.error(
                "hybrid branch %r failed; fusing the other branches without it (partial result): %s: %s",
                name, type(exc).__name__, exc, exc_info=exc,
            )  # fmt: skip
        # Rebuild in branch order: fusion weights given as a sequence align with it. A failed branch
        # contributes an empty list, which adds the same (zero) amount to every document.
        with timed("fusion"):
            fusion = self._fusion
            lists = {name: found.get(name, []) for name in self._retrievers}
            if skipped:  # the default fusion over the branches that ran: BM25 alone scores 1.0 at best, not its 0.9
                fusion = WeightedScoreFusion(normalization=self._fusion.normalization,  # type: ignore[attr-defined]
                                             floor=self._fusion.floor)  # type: ignore[attr-defined]
                lists = {name: docs for name, docs in lists.items() if name not in skipped}
            if _takes_depth(fusion):  # scored over candidate_k per branch: the top does not depend on k
                fused = fusion.fuse(lists, k=offset + k, depth=depth)  # type: ignore[call-arg]
            else:
                fused = fusion.fuse(lists, k=offset + k)
            if self._min_relative_score is not None:
                fused = keep_relative(fused, self._min_relative_score)
            if offset:
                fused = fused[offset:]
        if store is None or not fused:
            return fused
        with timed("rows", span=store_call("hydrate", store)) as call:
            rows = await store.hydrate(fused)  # type: ignore[attr-defined]
            call.returned(rows)
            return rows

    @property
    def _rows_store(self) -> object | None:
        """The one store every branch searches directly, when it can leave rows out until after fusion."""
        if getattr(self._fusion, "group_by", None) is not None:
            return None  # a grouped fusion reads each chunk's metadata (its group key) before fusing
        stores = set()
        for retriever in self._retrievers.values():
            if type(retriever) is VectorRetriever:
                stores.add(id(retriever.vector_store))
                store = retriever.vector_store
            elif type(retriever) is BM25Retriever:
                stores.add(id(retriever.store))
                store = retriever.store
            else:
                return None
        return store if len(stores) == 1 and defers_rows(store) else None

    def __repr__(self) -> str:
        return (
            f"HybridRetriever(retrievers={dict(self._retrievers)!r}, fusion={self._fusion!r}, "
            f"candidate_k={self._candidate_k!r}, branch_timeout={self._branch_timeout!r}, "
            f"on_branch_error={self._on_branch_error!r})"
        )


def _takes_depth(fusion: Any) -> bool:
    """Whether a fusion declares that its ``fuse`` takes ``depth=`` (:class:`~fastrag.protocols.SupportsDepth`:
    fastrag's fusions do; another may not)."""
    return isinstance(fusion, SupportsDepth) and fusion.accepts_depth is True


def _name_branches(retrievers: list[Retriever]) -> dict[str, Retriever]:
    branches: dict[str, Retriever] = {}
    for retriever in retrievers:
        base = getattr(retriever, "name", None)
        if not isinstance(base, str) or not base:
            cls = type(retriever).__name__.lower()
            base = cls.replace("retriever", "") or cls
        name, n = base, 0
        while name in branches:
            n += 1
            name = f"{base}_{n}"
        branches[name] = retriever
    return branches
