"""The one search-settings model: its fields, their names at every entrance, their resolution, and the
defaults.

A search option has one name everywhere (:data:`OPTIONS`): a keyword argument of
:meth:`~fastrag.knowledge_base.KnowledgeBase.search`, a key of a knowledge base's TOML table, a field of
``fastrag serve``'s request body, a ``fastrag search`` flag and a ``FASTRAG_*`` variable. Each entrance parses
its input into a :class:`SearchSettings`, and :func:`resolve_settings` resolves it field by field: the request,
then the knowledge base, then :data:`SYSTEM_DEFAULTS`, then (for the fusion weights, normalisation and
``candidate_k``) the embedder's measured defaults in :mod:`fastrag.defaults`, keeping where each value came
from. :mod:`fastrag.planning` turns the resolved settings into the retriever chain.

Two older names are accepted as aliases wherever a name is read: ``search_mode`` for ``mode`` and
``retrieval_k`` for ``candidate_k``; resolved settings answer to both.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from types import MappingProxyType
from typing import Any, Literal, TypeAlias

from fastrag.defaults import hybrid_defaults
from fastrag.errors import InvalidParameterError, UnknownParameterError
from fastrag.retrieval.limits import MAX_K
from fastrag.retrieval.thresholds import (
    THRESHOLD_SETTINGS,
    check_min_relative_score,
    check_min_score,
    check_thresholds_fit,
)

__all__ = [
    "ALIASES",
    "AUTO_DIRECT_MAX",
    "AUTO_RERANK_MIN",
    "AUTO_WIDE_RETRIEVAL_K",
    "DEFAULT_RERANK_MODEL",
    "FUSIONS",
    "MAX_RANK_CONSTANT",
    "MAX_WEIGHT",
    "NORMALIZATIONS",
    "OPTIONS",
    "SEARCH_MODES",
    "SYSTEM_DEFAULTS",
    "Option",
    "ResolvedSearchSettings",
    "SearchSettings",
    "resolve_settings",
]

SearchMode: TypeAlias = Literal["vector", "keyword", "hybrid", "auto"]
SEARCH_MODES: tuple[str, ...] = ("vector", "keyword", "hybrid", "auto")
"""``"vector"`` (dense k-NN), ``"keyword"`` (BM25), ``"hybrid"`` (both, fused), ``"auto"`` (by corpus size,
counted in chunks)."""
FUSIONS: tuple[str, ...] = ("weighted", "rrf")
"""``"weighted"``: :class:`~fastrag.retrieval.fusion.WeightedScoreFusion` on normalised scores (see
``normalization``); ``"rrf"``: :class:`~fastrag.retrieval.fusion.ReciprocalRankFusion` with
``rank_constant`` and the weights."""
NORMALIZATIONS: tuple[str, ...] = ("min_max", "z_score", "dbsf")
"""How ``fusion="weighted"`` puts each branch's scores on one scale: min-max to [0, 1], z-score (mean 0,
standard deviation 1), or DBSF (mean +- 3 standard deviations to [0, 1]; Qdrant's distribution-based score
fusion)."""
ON_BRANCH_ERROR: tuple[str, ...] = ("raise", "partial")

Origin: TypeAlias = Literal["request", "knowledge_base", "default", "default:embedder"]
MAX_WEIGHT = 1_000_000.0
"""The largest ``vector_weight`` / ``keyword_weight``. Only the ratio of the weights matters (fusion divides
by their sum); the bound keeps that sum and every weighted score finite (two weights of ``1e308`` overflow
to infinity)."""
MAX_RANK_CONSTANT = 1_000_000.0
"""The largest RRF ``rank_constant``. Cormack et al. (2009) use 60 and found little change between 10 and
100; beyond a few thousand every rank gets almost the same ``1 / (rank_constant + rank)``, so fusion
degenerates into a tie-break, and near ``1e308`` the scores underflow. 10^6 leaves every sensible value
and keeps adjacent ranks (up to 10,000 deep) apart by far more than float64 rounding."""

AUTO_DIRECT_MAX = 1_000
"""``"auto"`` runs ``"direct"`` retrieval at or below this many chunks (the scope's and filter's chunks, not
files).

``"direct"`` is exact hybrid fusion over the whole corpus: each branch (dense k-NN and BM25) is asked for
as many candidates as the corpus holds, so nothing is cut before fusion, and the lists are fused with the
resolved hybrid settings (weights, fusion, ``rank_constant``). Its cost grows with the corpus, hence the
threshold: up to a thousand chunks both candidate lists stay small enough to fetch and fuse whole on every
query (tens of milliseconds at most on the embedded store), while above it the per-branch cut at
``retrieval_k`` loses little. An engineering default, not a measured optimum: override it with
``auto_direct_max`` (at most 10,000, the largest candidate list)."""
AUTO_RERANK_MIN = 10_000
"""``"auto"`` adds a reranker (when ``rerank_model`` is set) from this many chunks up.

Reasoning: a reranker costs the same per query whatever the corpus size (``retrieval_k`` candidates), while
the share of near-miss candidates in a first-stage top-k grows with the corpus; from about ten thousand
chunks (a few hundred documents' worth) the fixed cost buys precision. Without a reranker, ``"auto"``
instead widens ``retrieval_k`` to :data:`AUTO_WIDE_RETRIEVAL_K`. An engineering default, not a measured
optimum: override it with ``auto_rerank_min``."""
AUTO_WIDE_RETRIEVAL_K = 100
"""The per-branch candidates ``"auto"`` uses on a large corpus without a reranker (unless ``retrieval_k``
was set explicitly): deeper lists let fusion surface a document one branch ranks low (100 matches the
Recall@100 the evaluation reports)."""
DEFAULT_RERANK_MODEL = "embedder"
"""The reranker of a search with ``rerank`` true and no ``rerank_model`` in any layer (origin ``"default"``):
:class:`~fastrag.rerankers.EmbedderReranker` over the knowledge base's own embedder, the one reranker that
needs nothing more (no model folder, no API key, nothing sent off the machine), so ``{"rerank": True}`` alone
works, as the agent frameworks' configurations expect. It re-scores by the embedder's cosine: with the
embedder that also retrieved it reproduces the dense branch's order and measured worse than not reranking
(SciFact nDCG@10 0.3956 against 0.6935 for the default hybrid, ``docs/reranking.md``); set ``rerank_model``
to a cross-encoder folder or ``"cohere"`` for a gain. ``"auto"`` never turns this default on: it reranks
only with a ``rerank_model`` that is set."""



ALIASES: Mapping[str, str] = MappingProxyType({"search_mode": "mode", "retrieval_k": "candidate_k"})
"""Older names read as the canonical ones: ``search_mode`` is ``mode``, ``retrieval_k`` is ``candidate_k``."""


@dataclass(frozen=True, slots=True)
class Option:
    """One search option and its name at every entrance (the table in ``docs/planning.md``).

    Attributes:
        name: the Python keyword, the TOML key, the HTTP body field and the tool argument.
        kind: how text (a ``FASTRAG_*`` value, a flag) is parsed: ``"str"``, ``"int"``, ``"float"``,
            ``"bool"`` (``true``/``false``/``1``/``0``), ``"globs"`` (a JSON list, or one glob), ``"any"``
            (a string, or an object in Python).
        flag: the ``fastrag search`` option, ``None`` where the command line has none.
        http: whether ``fastrag serve``'s ``/retrieve`` body takes it (``rerank_model`` does not: a caller
            would choose files on the server).
        summary: one line for the docs table.
    """

    name: str
    kind: str
    flag: str | None
    http: bool
    summary: str

    @property
    def env(self) -> str:
        """The environment variable: ``FASTRAG_`` and the name in upper case."""
        return f"FASTRAG_{self.name.upper()}"


OPTIONS: tuple[Option, ...] = (
    Option("mode", "str", "--mode", True, "vector, keyword, hybrid or auto"),
    Option("top_k", "int", "--top-k", True, "results returned (at most)"),
    Option("candidate_k", "int", "--candidate-k", True, "candidates per branch and for the reranker"),
    Option("vector_candidate_k", "int", "--vector-candidate-k", True, "candidates of the dense branch"),
    Option("keyword_candidate_k", "int", "--keyword-candidate-k", True, "candidates of the BM25 branch"),
    Option("fusion", "str", "--fusion", True, "weighted or rrf"),
    Option("normalization", "str", "--normalization", True, "weighted fusion: min_max, z_score or dbsf"),
    Option("fusion_floor", "float", "--fusion-floor", True, "weighted fusion: a branch's matches stay this far above its non-matches"),
    Option("vector_weight", "float", "--vector-weight", True, "the dense branch's fusion weight"),
    Option("keyword_weight", "float", "--keyword-weight", True, "the BM25 branch's fusion weight"),
    Option("rank_constant", "float", "--rank-constant", True, "RRF's k (Cormack et al. 2009: 60)"),
    Option("rerank", "bool", "--rerank", True, "rerank candidate_k candidates with rerank_model"),
    Option("rerank_model", "any", "--rerank-model", False, "embedder, cohere[:model], a cross-encoder folder"),
    Option("mmr_lambda", "float", "--mmr-lambda", True, "diversify by MMR: relevance's share in [0, 1]"),
    Option("mmr_candidate_k", "int", "--mmr-candidate-k", True, "candidates MMR chooses among"),
    Option("group_by", "str", "--group-by", True, "one result per value of this metadata key"),
    Option("group_score", "str", None, True, "with group_by: max or sum"),
    Option("min_score", "float", "--min-score", True, "cut on the final list's own scale"),
    Option("min_relative_score", "float", "--min-relative-score", True, "fused: fraction of the best score"),
    Option("min_vector_score", "float", "--min-vector-score", True, "cut the dense branch (cosine)"),
    Option("min_keyword_score", "float", "--min-keyword-score", True, "cut the BM25 branch"),
    Option("include_glob", "globs", "--include-glob", True, "keep results whose source_uri matches"),
    Option("exclude_glob", "globs", "--exclude-glob", True, "drop results whose source_uri matches"),
    Option("path_filter", "str", "--path-filter", True, "keep results whose source_uri matches this regex"),
    Option("path_filter_timeout", "float", "--path-filter-timeout", True, "seconds one search may spend in path_filter"),
    Option("language", "str", "--language", True, "the question's language for BM25, or auto"),
    Option("branch_timeout", "float", "--branch-timeout", True, "seconds each hybrid branch may take"),
    Option("on_branch_error", "str", "--on-branch-error", True, "a failed hybrid branch: raise or partial"),
    Option("auto_direct_max", "int", None, True, "auto: largest corpus searched exactly"),
    Option("auto_rerank_min", "int", None, True, "auto: smallest corpus that gets the reranker"),
)
"""Every search option, in the order of :class:`SearchSettings`'s fields."""

_EMBEDDER_AWARE = ("normalization", "fusion_floor", "keyword_weight", "vector_weight", "candidate_k")
"""Fields that, set nowhere, come from the embedder's row of :mod:`fastrag.defaults`."""


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_MEASURED = {"fusion_floor": "floor"}  # a setting's name in fastrag.defaults.HybridDefaults, where it differs


def _canonical(name: str) -> str:
    return ALIASES.get(name, name)


def _check_globs(name: str, value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, list | tuple) or not value or not all(isinstance(g, str) and g.strip() for g in value):
        raise InvalidParameterError(f"{name} must be a glob or a non-empty list of non-empty globs, got {value!r}")
    return tuple(value)


@dataclass(frozen=True, slots=True, init=False)
class SearchSettings:
    """Search settings; every field is optional and ``None`` means "inherit from the next layer".

    Layers, first match wins: the request, the knowledge base, :data:`SYSTEM_DEFAULTS`, the embedder's
    measured defaults (see :func:`resolve_settings`). The constructor and :meth:`from_mapping` accept the
    aliases in :data:`ALIASES` (``search_mode=``, ``retrieval_k=``).

    Raises:
        InvalidParameterError: a field is of the wrong type or out of range (checked per field; checks
            across fields happen in :func:`resolve_settings`), or a field is given under both its name and
            its alias.
    """

    mode: str | None
    """``"vector"``, ``"keyword"``, ``"hybrid"`` or ``"auto"`` (see :data:`SEARCH_MODES`)."""
    top_k: int | None
    """How many documents a search returns (at most); an int in [1, 10,000]."""
    candidate_k: int | None
    """Candidates each hybrid branch is asked for, and candidates handed to the reranker; an int in [1,
    10,000]. Default: the embedder's measured value (:mod:`fastrag.defaults`: 40 with a shipped static
    model, 200 otherwise)."""
    vector_candidate_k: int | None
    """Candidates of the dense branch of a hybrid, when not ``candidate_k``; an int in [1, 10,000]."""
    keyword_candidate_k: int | None
    """Candidates of the BM25 branch of a hybrid, when not ``candidate_k``; an int in [1, 10,000]."""
    fusion: str | None
    """``"weighted"`` (normalised scores, weighted sum) or ``"rrf"`` (see :data:`FUSIONS`)."""
    normalization: str | None
    """``fusion="weighted"``: ``"min_max"``, ``"z_score"`` or ``"dbsf"`` (see :data:`NORMALIZATIONS`);
    default: the embedder's measured one."""
    fusion_floor: float | None
    """``fusion="weighted"``: where a branch's lowest match normalises, in [0, 1), so its matches never tie
    with the documents it did not match (:class:`~fastrag.retrieval.fusion.WeightedScoreFusion`'s ``floor``;
    issue 25); default: the embedder's measured one (0.2 with a shipped static model, 0.1 otherwise)."""
    vector_weight: float | None
    """Weight of the dense branch in hybrid fusion; a number in [0, :data:`MAX_WEIGHT`] (10^6)."""
    keyword_weight: float | None
    """Weight of the BM25 branch in hybrid fusion; a number in [0, :data:`MAX_WEIGHT`] (not both weights 0)."""
    rank_constant: float | None
    """RRF's ``k`` (Cormack et al. 2009 use 60), a number in (0, :data:`MAX_RANK_CONSTANT`] (10^6); only used
    when ``fusion="rrf"``."""
    rerank: bool | None
    """Rerank the first stage's ``candidate_k`` candidates with ``rerank_model`` (set in no layer:
    :data:`DEFAULT_RERANK_MODEL`, the embedder reranker)."""
    rerank_model: Any
    """The reranker: ``"embedder"`` (:class:`~fastrag.rerankers.EmbedderReranker` over the knowledge base's
    embedder), ``"cohere"`` or ``"cohere:<model>"`` (:class:`~fastrag.rerankers.CohereReranker`, API key from
    the environment), a local cross-encoder folder (:class:`~fastrag.rerankers.CrossEncoderReranker`), or
    any :class:`~fastrag.protocols.Reranker` object."""
    mmr_lambda: float | None
    """Diversify the results by Maximal Marginal Relevance (Carbonell & Goldstein 1998;
    :class:`~fastrag.retrieval.diversity.MMRRetriever`): relevance's share in [0, 1] (0.5 weighs relevance
    and novelty alike). Unset (the default): no MMR."""
    mmr_candidate_k: int | None
    """With ``mmr_lambda``: the candidates MMR chooses among, an int in [1, 10,000]; default
    :data:`~fastrag.retrieval.diversity.DEFAULT_MMR_CANDIDATE_K` (50)."""
    group_by: str | None
    """One result per value of this metadata key (``"parent_id"``, ``"source_uri"``, any field), credited
    with ``group_score`` and carrying the group's other matching chunks
    (:class:`~fastrag.retrieval.grouping.GroupingRetriever`); unset (the default): one result per chunk."""
    group_score: str | None
    """With ``group_by``: ``"max"`` (a group scores as its best chunk; the default) or ``"sum"``."""
    min_score: float | None
    """Drop results scoring below this, on the result list's own scale: cosine in [-1, 1] (``"vector"``),
    BM25 (``"keyword"``), the reranker's score (with ``rerank``); refused for a fused list (``"hybrid"``,
    ``"auto"`` without ``rerank``): fused scores have no absolute scale (:mod:`fastrag.retrieval.thresholds`).
    Unset (the default): no threshold."""
    min_relative_score: float | None
    """``"hybrid"``, ``"auto"``: keep fused results scoring at least this fraction (> 0; above 1 warns, as
    nothing can reach it) of the query's best fused score."""
    min_vector_score: float | None
    """Drop dense (k-NN) hits whose cosine is below this; in a hybrid, before fusion."""
    min_keyword_score: float | None
    """Drop BM25 hits scoring below this; in a hybrid, before fusion."""
    include_glob: tuple[str, ...] | None
    """Keep only results whose ``source_uri`` matches one of these globs (``**`` spans folders;
    :class:`~fastrag.retrieval.path_filter.PathFilterRetriever`); a str is one glob."""
    exclude_glob: tuple[str, ...] | None
    """Drop results whose ``source_uri`` matches one of these globs."""
    path_filter: str | None
    """Keep only results whose ``source_uri`` matches this regular expression (searched, not anchored)."""
    path_filter_timeout: float | None
    """Seconds one search may spend matching ``path_filter`` (all candidates together), a finite number > 0;
    past it the search raises :class:`~fastrag.errors.RegexTimeoutError`. Default:
    :data:`~fastrag.retrieval.path_filter.DEFAULT_PATH_FILTER_TIMEOUT` (1 s)."""
    language: str | None
    """The question's language for the BM25 branch: a language code (``"de"``; checked and normalised as
    BCP 47 by :func:`~fastrag.analysis.language_code`), or ``"auto"``: detect it among the languages the
    store's documents were analysed in. Unset: each question is analysed in every language the store
    holds (the BM25 branch's default)."""
    branch_timeout: float | None
    """Seconds each hybrid branch may take before it fails with
    :class:`~fastrag.errors.RetrievalTimeoutError`; a finite number > 0. Unset: no limit."""
    on_branch_error: str | None
    """A failed hybrid branch: ``"raise"`` (the search fails; the default) or ``"partial"`` (the other
    branch's results, marked ``partial``)."""
    auto_direct_max: int | None
    """``"auto"``: the largest corpus, in chunks, searched by ``"direct"`` retrieval; an int in [0, 10,000]
    (see :data:`AUTO_DIRECT_MAX`)."""
    auto_rerank_min: int | None
    """``"auto"``: the smallest corpus, in chunks, that gets a reranker (see :data:`AUTO_RERANK_MIN`)."""

    def __init__(self, *, search_mode: str | None = None, retrieval_k: int | None = None, **values: Any) -> None:
        names = {f.name for f in dataclass_fields(SearchSettings)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise TypeError(f"SearchSettings() got unexpected keyword argument(s) {unknown}")
        for alias, value in (("search_mode", search_mode), ("retrieval_k", retrieval_k)):
            if value is None:
                continue
            name = ALIASES[alias]
            if values.get(name) is not None:
                raise InvalidParameterError(f"{alias} is another name for {name}: give one of them")
            values[name] = value
        for name in names:
            object.__setattr__(self, name, values.get(name))
        object.__setattr__(self, "include_glob", _check_globs("include_glob", self.include_glob))
        object.__setattr__(self, "exclude_glob", _check_globs("exclude_glob", self.exclude_glob))
        self._check()

    @property
    def search_mode(self) -> str | None:
        """``mode`` under its older name."""
        return self.mode

    @property
    def retrieval_k(self) -> int | None:
        """``candidate_k`` under its older name."""
        return self.candidate_k

    def _check(self) -> None:
        if self.mode is not None and self.mode not in SEARCH_MODES:
            raise InvalidParameterError(f"mode must be one of {', '.join(SEARCH_MODES)}, got {self.mode!r}")
        for name in ("vector_weight", "keyword_weight"):
            value = getattr(self, name)
            if value is not None and (not _is_number(value) or not 0 <= value <= MAX_WEIGHT):
                raise InvalidParameterError(
                    f"{name} must be a number in [0, {MAX_WEIGHT:g}] (only the ratio of the weights matters), "
                    f"got {value!r}"
                )
        if self.fusion is not None and self.fusion not in FUSIONS:
            raise InvalidParameterError(f"fusion must be one of {', '.join(FUSIONS)}, got {self.fusion!r}")
        if self.normalization is not None and self.normalization not in NORMALIZATIONS:
            raise InvalidParameterError(
                f"normalization must be one of {', '.join(NORMALIZATIONS)}, got {self.normalization!r}"
            )
        floor = self.fusion_floor
        if floor is not None and (not _is_number(floor) or not math.isfinite(floor) or not 0 <= floor < 1):
            raise InvalidParameterError(f"fusion_floor must be a number in [0, 1), got {floor!r}")
        rc = self.rank_constant
        if rc is not None and (not _is_number(rc) or not 0 < rc <= MAX_RANK_CONSTANT):
            raise InvalidParameterError(
                f"rank_constant must be a number in (0, {MAX_RANK_CONSTANT:g}] (Cormack et al. 2009 use 60), got {rc!r}"
            )
        lam = self.mmr_lambda
        if lam is not None and (not _is_number(lam) or not math.isfinite(lam) or not 0 <= lam <= 1):
            raise InvalidParameterError(f"mmr_lambda must be a number in [0, 1], got {lam!r}")
        if self.group_by is not None and (not isinstance(self.group_by, str) or not self.group_by.strip()):
            raise InvalidParameterError(f"group_by must be a metadata key (a non-empty string), got {self.group_by!r}")
        if self.group_score is not None and self.group_score not in ("max", "sum"):
            raise InvalidParameterError(f"group_score must be 'max' or 'sum', got {self.group_score!r}")
        if self.rerank is not None and not isinstance(self.rerank, bool):
            raise InvalidParameterError(f"rerank must be true or false, got {self.rerank!r} (the reranker itself is "
                                        "rerank_model: 'embedder', 'cohere[:model]' or a cross-encoder folder)")  # fmt: skip
        model = self.rerank_model
        if model is not None:
            from fastrag.protocols import Reranker

            if isinstance(model, str):
                if not model.strip():
                    raise InvalidParameterError("rerank_model must not be empty")
                if model.startswith("cohere:") and not model[len("cohere:") :].strip():
                    raise InvalidParameterError(f"rerank_model {model!r} names no Cohere model")
            elif not isinstance(model, Reranker):
                raise InvalidParameterError(
                    f"rerank_model must be a reranker spec (str) or an object with rerank(), got {model!r}"
                )
        with warnings.catch_warnings():  # the retriever built from it warns, at search time
            warnings.simplefilter("ignore", UserWarning)
            for name in ("min_score", "min_vector_score", "min_keyword_score"):
                check_min_score(getattr(self, name), name=name)
            check_min_relative_score(self.min_relative_score)
        if self.path_filter is not None:
            if not isinstance(self.path_filter, str) or not self.path_filter:
                raise InvalidParameterError(f"path_filter must be a regular expression (a non-empty string), got "
                                            f"{self.path_filter!r}")  # fmt: skip
            import regex

            try:  # the engine PathFilterRetriever matches with: a bad pattern is refused where it is set
                regex.compile(self.path_filter)
            except regex.error as exc:
                raise InvalidParameterError(f"path_filter is not a valid regular expression: {exc}") from exc
        if self.language is not None:
            from fastrag.analysis import language_code

            if not isinstance(self.language, str) or (
                self.language.strip().lower() != "auto" and language_code(self.language) is None
            ):
                raise InvalidParameterError(
                    f"language must be auto or a registered language code such as de (ISO 639), got {self.language!r}"
                )
            code = "auto" if self.language.strip().lower() == "auto" else language_code(self.language)
            object.__setattr__(self, "language", code)
        for name in ("branch_timeout", "path_filter_timeout"):
            timeout = getattr(self, name)
            if timeout is not None and (not _is_number(timeout) or not math.isfinite(timeout) or timeout <= 0):
                raise InvalidParameterError(f"{name} must be a finite number of seconds > 0, got {timeout!r}")
        if self.on_branch_error is not None and self.on_branch_error not in ON_BRANCH_ERROR:
            raise InvalidParameterError(
                f"on_branch_error must be one of {', '.join(ON_BRANCH_ERROR)}, got {self.on_branch_error!r}"
            )
        for name, low in (("candidate_k", 1), ("vector_candidate_k", 1), ("keyword_candidate_k", 1), ("top_k", 1),
                          ("mmr_candidate_k", 1),
                          ("auto_direct_max", 0), ("auto_rerank_min", 1)):  # fmt: skip
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InvalidParameterError(f"{name} must be an int >= {low}, got {value!r}")
            if name != "auto_rerank_min" and value > MAX_K:
                raise InvalidParameterError(f"{name} must be at most {MAX_K}, got {value}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> SearchSettings:
        """Settings from a mapping of option names (a TOML table, keyword arguments, an HTTP body, tool
        arguments); the aliases in :data:`ALIASES` are read as their canonical names.

        Raises:
            UnknownParameterError: a key is not an option name or alias (the message lists the options).
            InvalidParameterError: a value is invalid.
        """
        known = [o.name for o in OPTIONS]
        unknown = sorted(set(values) - set(known) - set(ALIASES))
        if unknown:
            raise UnknownParameterError(f"unknown search setting(s) {unknown}; known: {known}")
        return cls(**dict(values))

    @classmethod
    def from_text(cls, values: Mapping[str, str], *, where: Mapping[str, str] | None = None) -> SearchSettings:
        """Settings from text values (``FASTRAG_*`` variables, command-line flags, TOML strings), each parsed
        by its :class:`Option`'s ``kind``; a value that is not a str is taken as it is.

        Args:
            values: option name (or alias) -> value.
            where: option name -> where the value came from (``"FASTRAG_TOP_K"``, ``"fastrag.toml"``), named
                in errors.

        Raises:
            UnknownParameterError: a key is not an option name or alias.
            InvalidParameterError: a value does not parse or is invalid (the message names its origin).
        """
        kinds = {o.name: o.kind for o in OPTIONS}
        parsed: dict[str, Any] = {}
        for key, raw in values.items():
            name = _canonical(key)
            if name not in kinds:
                known = [o.name for o in OPTIONS]
                raise UnknownParameterError(f"unknown search setting {key!r}; known: {known}")
            origin = (where or {}).get(key) or (where or {}).get(name) or key
            try:
                parsed[key] = _parse_text(kinds[name], raw) if isinstance(raw, str) else raw
                cls.from_mapping({key: parsed[key]})
            except (InvalidParameterError, ValueError) as exc:
                raise InvalidParameterError(f"{name} ({origin}): {exc}") from exc
        return cls.from_mapping(parsed)

    def to_dict(self) -> dict[str, Any]:
        """The fields that are set (not ``None``), by name."""
        return {f.name: getattr(self, f.name) for f in dataclass_fields(self) if getattr(self, f.name) is not None}


def _parse_text(kind: str, text: str) -> Any:
    import json

    value = text.strip()
    if kind == "int":
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"must be an integer, got {text!r}") from None
    if kind == "float":
        try:
            return float(value)
        except ValueError:
            raise ValueError(f"must be a number, got {text!r}") from None
    if kind == "bool":
        lowered = value.lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off"):
            return False
        raise ValueError(f"must be true or false, got {text!r}")
    if kind == "globs" and value.startswith("["):
        try:
            return json.loads(value)
        except ValueError as exc:
            raise ValueError(f"must be a glob or a JSON list of globs, got {text!r}") from exc
    return value


SYSTEM_DEFAULTS = SearchSettings(
    mode="hybrid",
    fusion="weighted",
    rank_constant=60,
    rerank=False,
    rerank_model=None,
    top_k=20,
    auto_direct_max=AUTO_DIRECT_MAX,
    auto_rerank_min=AUTO_RERANK_MIN,
    group_score="max",
    on_branch_error="raise",
)
"""The layer below the knowledge base: hybrid search, weighted fusion (RRF's ``rank_constant`` 60, Cormack
et al. 2009, when ``fusion="rrf"``), no reranking and no reranker, 20 results, a failed branch fails the
search, and the ``"auto"`` thresholds :data:`AUTO_DIRECT_MAX` and :data:`AUTO_RERANK_MIN`. ``rerank`` true with
no ``rerank_model`` anywhere reranks with :data:`DEFAULT_RERANK_MODEL` (``"embedder"``).

The fusion's ``normalization``, the weights and ``candidate_k`` are not here: set nowhere, they come from the
embedder's row of the measured table in :mod:`fastrag.defaults` (origin ``"default:embedder"``), the same
table :class:`~fastrag.retrieval.hybrid.HybridRetriever` reads when built without a fusion: a shipped static
model gets min-max, BM25 0.9 / dense 0.1 and 40 candidates per branch; any other embedder z-score, BM25
0.55 / dense 0.45 and 200."""


@dataclass(frozen=True, slots=True)
class ResolvedSearchSettings:
    """Search settings after resolution: every field set (or ``None`` where unset means "none"), and where
    each value came from.

    The fields mean what they mean on :class:`SearchSettings`; ``rerank_model`` may be ``None`` (no
    reranker configured anywhere). ``search_mode`` and ``retrieval_k`` read ``mode`` and ``candidate_k``.

    Attributes:
        origins: for each field name, ``"request"``, ``"knowledge_base"``, ``"default"`` (the system defaults),
            or ``"default:embedder"`` (the embedder's measured defaults, :mod:`fastrag.defaults`).
    """

    mode: str
    top_k: int
    candidate_k: int
    vector_candidate_k: int | None
    keyword_candidate_k: int | None
    fusion: str
    normalization: str
    fusion_floor: float
    vector_weight: float
    keyword_weight: float
    rank_constant: float
    rerank: bool
    rerank_model: Any
    mmr_lambda: float | None
    mmr_candidate_k: int | None
    group_by: str | None
    group_score: str
    min_score: float | None
    min_relative_score: float | None
    min_vector_score: float | None
    min_keyword_score: float | None
    include_glob: tuple[str, ...] | None
    exclude_glob: tuple[str, ...] | None
    path_filter: str | None
    path_filter_timeout: float | None
    language: str | None
    branch_timeout: float | None
    on_branch_error: str
    auto_direct_max: int
    auto_rerank_min: int
    origins: Mapping[str, Origin] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def search_mode(self) -> str:
        """``mode`` under its older name."""
        return self.mode

    @property
    def retrieval_k(self) -> int:
        """``candidate_k`` under its older name."""
        return self.candidate_k

    def origin(self, name: str) -> Origin:
        """Where setting ``name`` (or its alias) came from: ``"request"``, ``"knowledge_base"``, ``"default"``
        or ``"default:embedder"``.

        Raises:
            UnknownParameterError: ``name`` is not a setting.
        """
        name = _canonical(name)
        if name not in self.origins:
            raise UnknownParameterError(f"unknown search setting {name!r}; known: {sorted(self.origins)}")
        return self.origins[name]

    def is_default(self, name: str) -> bool:
        """Whether setting ``name`` was set by no layer above the defaults (system or embedder)."""
        return self.origin(name) in ("default", "default:embedder")

    def to_dict(self) -> dict[str, Any]:
        """``{name: value}`` for every setting (``rerank_model`` as its spec, or the object's repr)."""
        out = {f.name: getattr(self, f.name) for f in dataclass_fields(self) if f.name != "origins"}
        if out["rerank_model"] is not None and not isinstance(out["rerank_model"], str):
            out["rerank_model"] = repr(out["rerank_model"])
        for name in ("include_glob", "exclude_glob"):
            if out[name] is not None:
                out[name] = list(out[name])
        return out


def resolve_settings(
    request: SearchSettings | None = None,
    knowledge_base: SearchSettings | None = None,
    *,
    defaults: SearchSettings = SYSTEM_DEFAULTS,
    embedder_name: str | None = None,
) -> ResolvedSearchSettings:
    """Resolve each field: ``request`` if set there, else ``knowledge_base``, else ``defaults``, else (for
    ``normalization``, ``keyword_weight``, ``vector_weight`` and ``candidate_k``) the embedder's row of
    :func:`fastrag.defaults.hybrid_defaults` (origin ``"default:embedder"``): the table
    :class:`~fastrag.retrieval.hybrid.HybridRetriever` reads too, so every entrance and a hand-built hybrid
    agree. Each of those resolves on its own: setting one weight leaves the other at its default. With
    ``fusion="rrf"`` the weights apply to RRF (unmeasured).

    Then checks across fields:

    * ``vector_weight`` and ``keyword_weight`` are not both 0;
    * ``auto_rerank_min`` is greater than ``auto_direct_max``;
    * with ``rerank`` true and no ``rerank_model`` in any layer, ``rerank_model`` is
      :data:`DEFAULT_RERANK_MODEL` (``"embedder"``, origin ``"default"``); and ``candidate_k >= top_k`` (reranking fewer
      candidates than are returned is a mistake). When ``candidate_k`` comes from the defaults it is
      raised to ``top_k`` instead, and else, when ``top_k`` comes from the defaults, ``top_k`` is lowered to
      ``candidate_k`` (``{"retrieval_k": 10, "rerank": True}`` returns the 10 reranked candidates);
    * the score thresholds fit the mode (:func:`~fastrag.retrieval.thresholds.check_thresholds_fit`):
      ``min_score`` not on a fused list (``"hybrid"``, ``"auto"``) unless ``rerank`` is true,
      ``min_relative_score`` only where lists are fused, a branch threshold only where its branch runs.

    Args:
        request: the call's settings.
        knowledge_base: the knowledge base's settings.
        defaults: the system layer (:data:`SYSTEM_DEFAULTS`).
        embedder_name: the dense branch's ``Embedder.name`` (``None``: an embedder without a name, which
            gets the row of "any other embedder").

    Raises:
        InvalidParameterError: a check above fails (the message says where each value came from), or
            ``defaults`` leaves a field unset that has no embedder default.
    """
    layers: list[tuple[Origin, SearchSettings | None]] = [
        ("request", request),
        ("knowledge_base", knowledge_base),
        ("default", defaults),
    ]
    measured = hybrid_defaults(embedder_name)
    values: dict[str, Any] = {}
    origins: dict[str, Origin] = {}
    for f in dataclass_fields(SearchSettings):
        for origin, layer in layers:
            value = None if layer is None else getattr(layer, f.name)
            if value is not None:
                values[f.name], origins[f.name] = value, origin
                break
        else:
            if f.name in _EMBEDDER_AWARE:
                values[f.name], origins[f.name] = getattr(measured, _MEASURED.get(f.name, f.name)), "default:embedder"
            elif f.name in _MAY_BE_UNSET:
                values[f.name], origins[f.name] = None, "default"
            else:
                raise InvalidParameterError(f"defaults leave {f.name!r} unset")

    def said(name: str) -> str:
        where = {"default:embedder": "embedder's measured default"}.get(origins[name], origins[name].replace("_", " "))
        return f"{name}={values[name]!r} (from the {where})"

    if values["vector_weight"] == 0 and values["keyword_weight"] == 0:
        raise InvalidParameterError(
            f"vector_weight and keyword_weight cannot both be 0: {said('vector_weight')}, {said('keyword_weight')}"
        )
    if values["auto_rerank_min"] <= values["auto_direct_max"]:
        raise InvalidParameterError(
            f"auto_rerank_min must be greater than auto_direct_max: {said('auto_rerank_min')}, "
            f"{said('auto_direct_max')}"
        )
    if values["rerank"]:
        if values["rerank_model"] is None:
            values["rerank_model"], origins["rerank_model"] = DEFAULT_RERANK_MODEL, "default"
        if values["candidate_k"] < values["top_k"]:
            if origins["candidate_k"] in ("default", "default:embedder"):
                values["candidate_k"] = values["top_k"]
            elif origins["top_k"] == "default":  # the reranker returns at most the candidates it was given
                values["top_k"] = values["candidate_k"]
            else:
                raise InvalidParameterError(
                    f"reranking needs candidate_k >= top_k: {said('candidate_k')}, {said('top_k')}"
                )
    check_thresholds_fit(values["mode"], reranked=bool(values["rerank"]), said=said,
                         **{name: values[name] for name in THRESHOLD_SETTINGS})  # fmt: skip
    return ResolvedSearchSettings(**values, origins=MappingProxyType(origins))


_MAY_BE_UNSET = frozenset({"rerank_model", "mmr_lambda", "mmr_candidate_k", "group_by", "min_score", "min_relative_score", "min_vector_score",
                           "min_keyword_score", "vector_candidate_k", "keyword_candidate_k", "include_glob",
                           "exclude_glob", "path_filter", "path_filter_timeout", "language", "branch_timeout"})  # fmt: skip
