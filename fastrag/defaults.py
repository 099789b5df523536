"""The one table of search defaults that depend on the embedder, with the evidence for each.

Read by :func:`fastrag.settings.resolve_settings` (so :class:`~fastrag.knowledge_base.KnowledgeBase`,
``fastrag search``, ``fastrag serve`` and the tool resolve the same values) and by
:class:`~fastrag.retrieval.hybrid.HybridRetriever` when it is built with ``fusion=None`` or
``candidate_k=None``. It sits below the retrieval layer and imports nothing from it.

=========================================  ============  ========================  =============  ============
dense branch's embedder                    normalization  BM25 / dense weight      ``candidate_k``  evidence
=========================================  ============  ========================  =============  ============
a shipped static model (``static-minilm``)  ``min_max``    0.9 / 0.1                 40             see below
any other embedder (or an unnamed one)      ``z_score``    0.55 / 0.45               200            see below
=========================================  ============  ========================  =============  ============
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = [
    "DENSE_MODEL_CANDIDATE_K",
    "DENSE_MODEL_LEXICAL_WEIGHT",
    "DENSE_MODEL_NORMALIZATION",
    "LEXICAL_WEIGHT_BY_EMBEDDER",
    "STATIC_MODEL_CANDIDATE_K",
    "STATIC_MODEL_NORMALIZATION",
    "HybridDefaults",
    "hybrid_defaults",
]

LEXICAL_WEIGHT_BY_EMBEDDER: Mapping[str, float] = MappingProxyType(
    {"static-minilm-d256": 0.9, "static-minilm-d64": 0.9}
)
"""BM25's share of the default min-max fusion when the dense branch uses one of these embedders.

Evidence (``benchmarks/fusion_defaults.py``, tables in ``docs/quality.md``): with the shipped static
models the dense branch is far weaker than BM25 (SciFact nDCG@10 0.396 against 0.688), so equal weights
lose 6 points; BM25 0.9 / dense 0.1 on min-max scores is at least as good as BM25 alone on SciFact
(0.694) and XQuAD-en (0.967 against 0.965). Other embedders get :data:`DENSE_MODEL_LEXICAL_WEIGHT` with
z-score normalisation."""

STATIC_MODEL_NORMALIZATION = "min_max"
"""The score normalisation of the default fusion with a shipped static model (the cell measured above)."""

DENSE_MODEL_LEXICAL_WEIGHT = 0.55
"""BM25's share of the default z-score fusion when the dense branch uses any other embedder.

Evidence (``benchmarks/fusion_defaults.py``, ``benchmarks/results/fusion_defaults_minilm.md``, tables in
``docs/quality.md``): tuned on SciFact's 809 train queries with all-MiniLM-L6-v2 over normalisation
(min-max, z-score, DBSF) or RRF (rank_constant 10-100), BM25 weight 0.30-0.70 and ``candidate_k``
20-200, the best train cell (0.7354) is z-score, BM25 0.55, ``candidate_k=200``. On the 300 test queries
it scores 0.7344 (min-max equal weights at ``candidate_k=40``, the previous default: 0.7247; BM25 alone
0.6878), and 0.9785 on XQuAD-en (BM25 alone 0.9649)."""

DENSE_MODEL_NORMALIZATION = "z_score"
"""The score normalisation of the default fusion with any other embedder (the train-best cell above)."""

STATIC_MODEL_CANDIDATE_K = 40
"""Per-branch candidates by default when the dense branch uses a shipped static model.

Evidence (``benchmarks/results/fusion_defaults_d256_candidate_k.md``): on SciFact's train queries the best
cells use 20-40 candidates; 200 adds nothing there (train 0.7017 against 0.7029 at 40) and costs five times
the documents per branch to fetch and fuse."""

DENSE_MODEL_CANDIDATE_K = 200
"""Per-branch candidates by default for any other dense embedder: the train-best cell with
:data:`DENSE_MODEL_LEXICAL_WEIGHT` (with 40: 0.001 lower on SciFact train, 0.007 on test)."""


@dataclass(frozen=True, slots=True)
class HybridDefaults:
    """The measured defaults of a BM25 + dense hybrid for one embedder.

    Attributes:
        normalization: ``"min_max"`` or ``"z_score"`` (the weighted fusion's score normalisation).
        keyword_weight: BM25's weight, in (0, 1).
        vector_weight: the dense branch's weight, ``1 - keyword_weight``.
        candidate_k: documents each branch is asked for.
    """

    normalization: str
    keyword_weight: float
    vector_weight: float
    candidate_k: int


def hybrid_defaults(embedder_name: str | None) -> HybridDefaults:
    """The measured defaults for a hybrid whose dense branch uses the embedder named ``embedder_name``
    (``Embedder.name``; ``None`` for an embedder without a name): the shipped static models' row, or the
    other embedders' row of the table in this module's docstring."""
    share = LEXICAL_WEIGHT_BY_EMBEDDER.get(embedder_name) if isinstance(embedder_name, str) else None
    if share is not None:
        return HybridDefaults(STATIC_MODEL_NORMALIZATION, share, round(1.0 - share, 10), STATIC_MODEL_CANDIDATE_K)
    return HybridDefaults(
        DENSE_MODEL_NORMALIZATION,
        DENSE_MODEL_LEXICAL_WEIGHT,
        round(1.0 - DENSE_MODEL_LEXICAL_WEIGHT, 10),
        DENSE_MODEL_CANDIDATE_K,
    )
