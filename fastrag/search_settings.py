"""Search settings of a :class:`~fastrag.knowledge_base.KnowledgeBase`: the layers, their defaults and
their resolution.

A setting resolves field by field: the request, then the knowledge base, then :data:`SYSTEM_DEFAULTS`
(:func:`resolve_settings`). Kept apart from :mod:`fastrag.knowledge_base` so that
:mod:`fastrag.tool` (which validates a tool's settings) and the knowledge base both import it, and neither
imports the other. Every name here is also importable from :mod:`fastrag.knowledge_base`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, fields as dataclass_fields
from types import MappingProxyType
from typing import Any, Literal, TypeAlias

from fastrag.errors import InvalidParameterError, UnknownParameterError
from fastrag.retrieval.limits import MAX_K
from fastrag.retrieval.thresholds import (
    THRESHOLD_SETTINGS,
    check_min_relative_score,
    check_min_score,
    check_thresholds_fit,
)

__all__ = [
    "AUTO_DIRECT_MAX",
    "AUTO_RERANK_MIN",
    "AUTO_WIDE_RETRIEVAL_K",
    "FUSIONS",
    "MAX_RANK_CONSTANT",
    "MAX_WEIGHT",
    "SEARCH_MODES",
    "SYSTEM_DEFAULTS",
    "ResolvedSearchSettings",
    "SearchSettings",
    "resolve_settings",
]

SearchMode: TypeAlias = Literal["vector", "keyword", "hybrid", "auto"]
SEARCH_MODES: tuple[str, ...] = ("vector", "keyword", "hybrid", "auto")
"""``"vector"`` (dense k-NN), ``"keyword"`` (BM25), ``"hybrid"`` (both, fused), ``"auto"`` (by corpus size,
counted in chunks)."""
FUSIONS: tuple[str, ...] = ("weighted", "rrf")
"""``"weighted"``: :class:`~fastrag.retrieval.fusion.WeightedScoreFusion` on min-max normalised scores;
``"rrf"``: :class:`~fastrag.retrieval.fusion.ReciprocalRankFusion` with ``rank_constant`` and the weights."""

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


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class SearchSettings:
    """Search settings; every field is optional and ``None`` means "inherit from the next layer".

    Layers, first match wins: the request, the knowledge base, :data:`SYSTEM_DEFAULTS` (see
    :func:`resolve_settings`).

    Raises:
        InvalidParameterError: a field is of the wrong type or out of range (checked per field; checks
            across fields happen in :func:`resolve_settings`).
    """

    search_mode: str | None = None
    """``"vector"``, ``"keyword"``, ``"hybrid"`` or ``"auto"`` (see :data:`SEARCH_MODES`)."""
    vector_weight: float | None = None
    """Weight of the dense branch in hybrid fusion; a number in [0, :data:`MAX_WEIGHT`] (10^6)."""
    keyword_weight: float | None = None
    """Weight of the BM25 branch in hybrid fusion; a number in [0, :data:`MAX_WEIGHT`] (not both weights 0)."""
    fusion: str | None = None
    """``"weighted"`` (min-max normalised scores, weighted sum) or ``"rrf"`` (see :data:`FUSIONS`)."""
    rank_constant: float | None = None
    """RRF's ``k`` (Cormack et al. 2009 use 60), a number in (0, :data:`MAX_RANK_CONSTANT`] (10^6); only used
    when ``fusion="rrf"``."""
    rerank: bool | None = None
    """Rerank the first stage's ``retrieval_k`` candidates with ``rerank_model``."""
    rerank_model: Any = None
    """The reranker: ``"embedder"`` (:class:`~fastrag.rerankers.EmbedderReranker` over the knowledge base's
    embedder), ``"cohere"`` or ``"cohere:<model>"`` (:class:`~fastrag.rerankers.CohereReranker`, API key from
    the environment), a local cross-encoder folder (:class:`~fastrag.rerankers.CrossEncoderReranker`), or
    any :class:`~fastrag.protocols.Reranker` object."""
    retrieval_k: int | None = None
    """Candidates per hybrid branch, and candidates handed to the reranker; an int in [1, 10,000]."""
    top_k: int | None = None
    """How many documents a search returns (at most); an int in [1, 10,000]."""
    auto_direct_max: int | None = None
    """``"auto"``: the largest corpus, in chunks, searched by ``"direct"`` retrieval; an int in [0, 10,000]
    (see :data:`AUTO_DIRECT_MAX`)."""
    auto_rerank_min: int | None = None
    """``"auto"``: the smallest corpus, in chunks, that gets a reranker (see :data:`AUTO_RERANK_MIN`)."""
    group_by: str | None = None
    """One result per value of this metadata key (``"parent_id"``, ``"source_uri"``, any field), credited
    with ``group_score`` and carrying the group's other matching chunks
    (:class:`~fastrag.retrieval.grouping.GroupingRetriever`); unset (the default): one result per chunk."""
    group_score: str | None = None
    """With ``group_by``: ``"max"`` (a group scores as its best chunk; the default) or ``"sum"``."""
    min_score: float | None = None
    """Drop results scoring below this, on the result list's own scale: cosine in [-1, 1] (``"vector"``),
    BM25 (``"keyword"``), the reranker's score (with ``rerank``); refused for a fused list (``"hybrid"``,
    ``"auto"`` without ``rerank``): fused scores have no absolute scale (:mod:`fastrag.retrieval.thresholds`).
    Unset (the default): no threshold."""
    min_relative_score: float | None = None
    """``"hybrid"``, ``"auto"``: keep fused results scoring at least this fraction (> 0; above 1 warns, as
    nothing can reach it) of the query's best fused score."""
    min_vector_score: float | None = None
    """Drop dense (k-NN) hits whose cosine is below this; in a hybrid, before fusion."""
    min_keyword_score: float | None = None
    """Drop BM25 hits scoring below this; in a hybrid, before fusion."""

    def __post_init__(self) -> None:
        if self.search_mode is not None and self.search_mode not in SEARCH_MODES:
            raise InvalidParameterError(
                f"search_mode must be one of {', '.join(SEARCH_MODES)}, got {self.search_mode!r}"
            )
        for name in ("vector_weight", "keyword_weight"):
            value = getattr(self, name)
            if value is not None and (not _is_number(value) or not 0 <= value <= MAX_WEIGHT):
                raise InvalidParameterError(
                    f"{name} must be a number in [0, {MAX_WEIGHT:g}] (only the ratio of the weights matters), "
                    f"got {value!r}"
                )
        if self.fusion is not None and self.fusion not in FUSIONS:
            raise InvalidParameterError(f"fusion must be one of {', '.join(FUSIONS)}, got {self.fusion!r}")
        rc = self.rank_constant
        if rc is not None and (not _is_number(rc) or not 0 < rc <= MAX_RANK_CONSTANT):
            raise InvalidParameterError(
                f"rank_constant must be a number in (0, {MAX_RANK_CONSTANT:g}] (Cormack et al. 2009 use 60), got {rc!r}"
            )
        if self.group_by is not None and (not isinstance(self.group_by, str) or not self.group_by.strip()):
            raise InvalidParameterError(f"group_by must be a metadata key (a non-empty string), got {self.group_by!r}")
        if self.group_score is not None and self.group_score not in ("max", "sum"):
            raise InvalidParameterError(f"group_score must be 'max' or 'sum', got {self.group_score!r}")
        if self.rerank is not None and not isinstance(self.rerank, bool):
            raise InvalidParameterError(f"rerank must be true or false, got {self.rerank!r}")
        model = self.rerank_model
        if model is not None:
            if isinstance(model, str):
                if not model.strip():
                    raise InvalidParameterError("rerank_model must not be empty")
                if model.startswith("cohere:") and not model[len("cohere:") :].strip():
                    raise InvalidParameterError(f"rerank_model {model!r} names no Cohere model")
            elif not callable(getattr(model, "rerank", None)):
                raise InvalidParameterError(
                    f"rerank_model must be a reranker spec (str) or an object with rerank(), got {model!r}"
                )
        with warnings.catch_warnings():  # the retriever built from it warns, at search time
            warnings.simplefilter("ignore", UserWarning)
            for name in ("min_score", "min_vector_score", "min_keyword_score"):
                check_min_score(getattr(self, name), name=name)
            check_min_relative_score(self.min_relative_score)
        for name, low in (("retrieval_k", 1), ("top_k", 1), ("auto_direct_max", 0), ("auto_rerank_min", 1)):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InvalidParameterError(f"{name} must be an int >= {low}, got {value!r}")
            if name in ("retrieval_k", "top_k", "auto_direct_max") and value > MAX_K:
                raise InvalidParameterError(f"{name} must be at most {MAX_K}, got {value}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> SearchSettings:
        """Settings from a mapping of field names (a TOML table, keyword arguments).

        Raises:
            UnknownParameterError: a key is not a field name (the message lists the fields).
            InvalidParameterError: a value is invalid.
        """
        known = [f.name for f in dataclass_fields(cls)]
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise UnknownParameterError(f"unknown search setting(s) {unknown}; known: {known}")
        return cls(**dict(values))

    def to_dict(self) -> dict[str, Any]:
        """The fields that are set (not ``None``), by name."""
        return {f.name: getattr(self, f.name) for f in dataclass_fields(self) if getattr(self, f.name) is not None}


SYSTEM_DEFAULTS = SearchSettings(
    search_mode="hybrid",
    vector_weight=0.7,
    keyword_weight=0.3,
    fusion="weighted",
    rank_constant=60,
    rerank=False,
    rerank_model=None,
    retrieval_k=40,
    top_k=20,
    auto_direct_max=AUTO_DIRECT_MAX,
    auto_rerank_min=AUTO_RERANK_MIN,
    group_score="max",
)
"""The last layer of resolution: hybrid search, weighted min-max fusion 0.7 dense / 0.3 BM25 with
:data:`~fastrag.retrieval.fusion.DEFAULT_FLOOR` (a branch's matches stay above its non-matches; RRF's
``rank_constant`` 60, Cormack et al. 2009, when ``fusion="rrf"``), no reranking and no reranker, 40 candidates
per branch (as :class:`~fastrag.retrieval.hybrid.HybridRetriever`), 20 results, and the ``"auto"`` thresholds
:data:`AUTO_DIRECT_MAX` and :data:`AUTO_RERANK_MIN`.

The weights are embedder-aware (see :func:`resolve_settings`): a weight that neither the request nor the
knowledge base sets comes from :data:`~fastrag.retrieval.hybrid.LEXICAL_WEIGHT_BY_EMBEDDER` when the
embedder is listed there (the static models shipped with fastrag: BM25 0.9 / dense 0.1, measured on SciFact
and XQuAD-en, where their dense branch is far weaker than BM25), and from here (0.7 dense / 0.3 BM25)
otherwise."""


@dataclass(frozen=True, slots=True)
class ResolvedSearchSettings:
    """Search settings after resolution: every field set, and where each value came from.

    The fields mean what they mean on :class:`SearchSettings`; ``rerank_model`` may be ``None`` (no
    reranker configured anywhere).

    Attributes:
        origins: for each field name, ``"request"``, ``"knowledge_base"``, ``"default"`` (the system defaults),
            or ``"default:embedder"`` (a fusion weight from the embedder's measured defaults, see
            :func:`resolve_settings`).
    """

    search_mode: str
    vector_weight: float
    keyword_weight: float
    fusion: str
    rank_constant: float
    rerank: bool
    rerank_model: Any
    retrieval_k: int
    top_k: int
    auto_direct_max: int
    auto_rerank_min: int
    group_by: str | None = None
    group_score: str = "max"
    min_score: float | None = None
    min_relative_score: float | None = None
    min_vector_score: float | None = None
    min_keyword_score: float | None = None
    origins: Mapping[str, Origin] = field(default_factory=lambda: MappingProxyType({}))

    def origin(self, name: str) -> Origin:
        """Where setting ``name`` came from: ``"request"``, ``"knowledge_base"``, ``"default"`` or
        ``"default:embedder"``.

        Raises:
            UnknownParameterError: ``name`` is not a setting.
        """
        if name not in self.origins:
            raise UnknownParameterError(f"unknown search setting {name!r}; known: {sorted(self.origins)}")
        return self.origins[name]


def resolve_settings(
    request: SearchSettings | None = None,
    knowledge_base: SearchSettings | None = None,
    *,
    defaults: SearchSettings = SYSTEM_DEFAULTS,
    embedder_name: str | None = None,
) -> ResolvedSearchSettings:
    """Resolve each field: ``request`` if set there, else ``knowledge_base``, else ``defaults``.

    Embedder-aware weights: when ``embedder_name`` is a key of
    :data:`~fastrag.retrieval.hybrid.LEXICAL_WEIGHT_BY_EMBEDDER` (the static models shipped with fastrag),
    a ``keyword_weight`` that neither ``request`` nor ``knowledge_base`` sets is that table's BM25 weight
    (0.9) and such a ``vector_weight`` is the rest (0.1), with origin ``"default:embedder"``; the table is
    the one :func:`~fastrag.retrieval.hybrid.default_fusion` uses, measured with min-max fusion (with
    ``fusion="rrf"`` the same weights apply, unmeasured). Each weight resolves on its own: setting one leaves
    the other at its default.

    Then checks across fields:

    * ``vector_weight`` and ``keyword_weight`` are not both 0;
    * ``auto_rerank_min`` is greater than ``auto_direct_max``;
    * with ``rerank`` true: a ``rerank_model`` is set, and ``retrieval_k >= top_k`` (reranking fewer
      candidates than are returned is a mistake). When ``retrieval_k`` comes from the defaults it is
      raised to ``top_k`` instead;
    * the score thresholds fit the mode (:func:`~fastrag.retrieval.thresholds.check_thresholds_fit`):
      ``min_score`` not on a fused list (``"hybrid"``, ``"auto"``) unless ``rerank`` is true,
      ``min_relative_score`` only where lists are fused, a branch threshold only where its branch runs.

    Args:
        request: the call's settings.
        knowledge_base: the knowledge base's settings.
        defaults: the last layer (every field but ``rerank_model`` must be set there).
        embedder_name: the knowledge base's embedder's ``name``, or ``None`` (then ``defaults`` alone).

    Raises:
        InvalidParameterError: a check above fails (the message says where each value came from), or
            ``defaults`` leaves a field unset.
    """
    layers: list[tuple[Origin, SearchSettings | None]] = [
        ("request", request),
        ("knowledge_base", knowledge_base),
        ("default", defaults),
    ]
    values: dict[str, Any] = {}
    origins: dict[str, Origin] = {}
    for f in dataclass_fields(SearchSettings):
        for origin, layer in layers:
            value = None if layer is None else getattr(layer, f.name)
            if value is not None:
                values[f.name], origins[f.name] = value, origin
                break
        else:
            if f.name not in _MAY_BE_UNSET:
                raise InvalidParameterError(f"defaults leave {f.name!r} unset")
            values[f.name], origins[f.name] = None, "default"
    lexical_share = _measured_lexical_weight(embedder_name)
    if lexical_share is not None:
        for name, weight in (("keyword_weight", lexical_share), ("vector_weight", round(1.0 - lexical_share, 10))):
            if origins[name] == "default":
                values[name], origins[name] = weight, "default:embedder"

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
            raise InvalidParameterError(f"{said('rerank')} needs a rerank_model (none is set)")
        if values["retrieval_k"] < values["top_k"]:
            if origins["retrieval_k"] != "default":
                raise InvalidParameterError(
                    f"reranking needs retrieval_k >= top_k: {said('retrieval_k')}, {said('top_k')}"
                )
            values["retrieval_k"] = values["top_k"]
    check_thresholds_fit(values["search_mode"], reranked=bool(values["rerank"]), said=said,
                         **{name: values[name] for name in THRESHOLD_SETTINGS})  # fmt: skip
    return ResolvedSearchSettings(**values, origins=MappingProxyType(origins))


_MAY_BE_UNSET = frozenset({"rerank_model", "group_by", "min_score", "min_relative_score", "min_vector_score",
                           "min_keyword_score"})  # fmt: skip


def _measured_lexical_weight(embedder_name: str | None) -> float | None:
    """BM25's measured share for this embedder (the table hybrid.py uses), or ``None``."""
    if not isinstance(embedder_name, str):
        return None
    from fastrag.retrieval.hybrid import LEXICAL_WEIGHT_BY_EMBEDDER

    return LEXICAL_WEIGHT_BY_EMBEDDER.get(embedder_name)
