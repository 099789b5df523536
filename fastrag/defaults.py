"""The one table of search defaults that depend on the embedder, with the evidence for each.

Read by :func:`fastrag.settings.resolve_settings` (so :class:`~fastrag.knowledge_base.KnowledgeBase`,
``fastrag search``, ``fastrag serve`` and the tool resolve the same values) and by
:class:`~fastrag.retrieval.hybrid.HybridRetriever` when it is built with ``fusion=None`` or
``candidate_k=None``. It sits below the retrieval layer and imports nothing from it.

=========================================  ============  ========================  =============  ============
dense branch's embedder                    normalization  BM25 / dense weight      ``candidate_k``  floor
=========================================  ============  ========================  =============  ============
a shipped static model (``static-minilm``)  ``min_max``    0.9 / 0.1                 40             0.2
any other embedder (or an unnamed one)      ``z_score``    0.55 / 0.45               200            0.1
=========================================  ============  ========================  =============  ============
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = [
    "DENSE_MODEL_CANDIDATE_K",
    "DENSE_MODEL_FLOOR",
    "DENSE_MODEL_LEXICAL_WEIGHT",
    "DENSE_MODEL_NORMALIZATION",
    "LEXICAL_WEIGHT_BY_EMBEDDER",
    "STATIC_MODEL_CANDIDATE_K",
    "STATIC_MODEL_FLOOR",
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


STATIC_MODEL_FLOOR = 0.2
"""The default min-max fusion's ``floor`` with a shipped static model
(:class:`~fastrag.retrieval.fusion.WeightedScoreFusion`): a document BM25 matched normalises to at least 0.2,
one it did not match to 0, so at BM25 0.9 / dense 0.1 every BM25 match also ranks above every dense-only
candidate (0.9 * 0.2 > 0.1).

Evidence (issue 25; ``benchmarks/results/fusion_defaults_d256_floor.md``, ``docs/quality.md``): without a
floor the lowest BM25 match tied with the documents BM25 did not match, and the 0.1 dense share ordered
them (a query whose rare term had two relevant BM25 hits put the second at rank 28). With BM25 0.9 and 40
candidates kept, 0.2 is the best floor > 0 on SciFact's 809 train queries (0.6967; 0.1: 0.6966, 0.3:
0.6960, 0.5: 0.6952; no floor: 0.6969, within the spread of the top cells). SciFact test 0.6923 (no floor:
0.6897); at least as good as BM25 alone on every XQuAD set."""

DENSE_MODEL_FLOOR = 0.1
"""The default z-score fusion's ``floor`` with any other dense embedder: a document a branch did not return
sits a tenth of the list's z-score range below the branch's lowest returned one.

Evidence (issue 25; ``benchmarks/results/fusion_defaults_minilm_floor.md``, ``docs/quality.md``): with
all-MiniLM-L6-v2, BM25 0.55 and 200 candidates kept, 0.1 is the best floor > 0 on SciFact's train queries
(0.7320, as without a floor; 0.2: 0.7311, 0.3: 0.7306); SciFact test 0.7371 (no floor: 0.7352), XQuAD-en
0.9773 (BM25 alone 0.9643)."""


@dataclass(frozen=True, slots=True)
class HybridDefaults:
    """The measured defaults of a BM25 + dense hybrid for one embedder.

    Attributes:
        normalization: ``"min_max"`` or ``"z_score"`` (the weighted fusion's score normalisation).
        keyword_weight: BM25's weight, in (0, 1).
        vector_weight: the dense branch's weight, ``1 - keyword_weight``.
        candidate_k: documents each branch is asked for.
        floor: the weighted fusion's ``floor`` (a branch's matches normalise above its non-matches).
    """

    normalization: str
    keyword_weight: float
    vector_weight: float
    candidate_k: int
    floor: float


def hybrid_defaults(embedder_name: str | None) -> HybridDefaults:
    """The measured defaults for a hybrid whose dense branch uses the embedder named ``embedder_name``
    (``Embedder.name``; ``None`` for an embedder without a name): the shipped static models' row, or the
    other embedders' row of the table in this module's docstring."""
    share = LEXICAL_WEIGHT_BY_EMBEDDER.get(embedder_name) if isinstance(embedder_name, str) else None
    if share is not None:
        return HybridDefaults(STATIC_MODEL_NORMALIZATION, share, round(1.0 - share, 10), STATIC_MODEL_CANDIDATE_K,
                              STATIC_MODEL_FLOOR)  # fmt: skip
    return HybridDefaults(
        DENSE_MODEL_NORMALIZATION,
        DENSE_MODEL_LEXICAL_WEIGHT,
        round(1.0 - DENSE_MODEL_LEXICAL_WEIGHT, 10),
        DENSE_MODEL_CANDIDATE_K,
        DENSE_MODEL_FLOOR,
    )
