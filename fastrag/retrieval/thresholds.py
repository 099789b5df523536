"""Score thresholds: "nothing below this relevance", where a score means something a user can set.

Three kinds of score, three rules:

* **A branch's own score** (:class:`~fastrag.retrieval.vector.VectorRetriever`'s cosine similarity in
  [-1, 1], :class:`~fastrag.retrieval.bm25.BM25Retriever`'s BM25, unbounded and > 0) and **a reranker's
  score** (:class:`~fastrag.retrieval.reranking.RerankingRetriever`, on the reranker's own scale): an
  absolute ``min_score``, applied to the list that stage produced, right after it. In a hybrid, set it on
  the branch: the branch's list is cut before fusion, so a weak match cannot earn fused credit.
* **A fused score** (:class:`~fastrag.retrieval.hybrid.HybridRetriever`): only a relative cut,
  ``min_relative_score``, a fraction of the best fused score of the same query. An absolute threshold is
  not offered because fused scores do not measure relevance: reciprocal rank fusion scores only positions
  (the top document of every query scores ``sum(w) / (rank_constant + 1)``, relevant or not), and min-max,
  z-score and DBSF normalise each branch's list per query (a min-max score of 1.0 means "the best this
  query found", not "a good match"). The same absolute number would keep junk for one query and drop
  good answers for another.
* A threshold no result could ever reach warns (:class:`UserWarning`) when it is set: a cosine
  ``min_score`` above 1, a ``min_relative_score`` above 1 (above the best score, the maximum any document
  of that query can have).

The documents kept are those whose score is at least the threshold; a document without a finite score
cannot be shown to pass and is dropped. Lists are best first, so what is kept is a prefix: ranks stay
``0..n-1``. Fewer than ``k`` documents (or none) may come back.

Where retrieval is configured by settings (``fastrag search``, :mod:`fastrag.config`,
:class:`~fastrag.knowledge_base.KnowledgeBase`, ``fastrag serve``) the thresholds are four settings, checked
against the mode by :func:`check_thresholds_fit`:

* ``min_score``: the returned list's own scale: BM25 in keyword mode, cosine in vector mode, the reranker's
  score when a reranker runs; refused where the list is fused (hybrid without a reranker);
* ``min_relative_score``: a fraction of the best fused score, so hybrid only;
* ``min_vector_score`` and ``min_keyword_score``: the dense (cosine) and BM25 branch's own cut, wherever that
  branch runs (in hybrid before fusion; in vector or keyword mode on that one list).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

from fastrag.errors import InvalidParameterError
from fastrag.models import Document

__all__ = [
    "THRESHOLD_SETTINGS",
    "check_min_relative_score",
    "check_min_score",
    "check_thresholds_fit",
    "keep_above",
    "keep_relative",
    "strictest",
]

THRESHOLD_SETTINGS: tuple[str, ...] = ("min_score", "min_relative_score", "min_vector_score", "min_keyword_score")
"""The threshold settings, by name (see the module docstring and :func:`check_thresholds_fit`)."""


def check_min_score(value: Any, *, name: str = "min_score", maximum: float | None = None, scale: str = "") -> float | None:
    """``value`` as a float, or ``None``; warns when it is above ``maximum``, the highest score possible.

    Raises:
        InvalidParameterError: ``value`` is not ``None`` or a finite number.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidParameterError(f"{name} must be None or a finite number, got {value!r}")
    if maximum is not None and value > maximum:
        warnings.warn(
            f"{name}={value!r} is above {maximum!r}, the highest {scale or 'score'} possible: no result can reach it",
            UserWarning,
            stacklevel=3,
        )
    return float(value)


def check_min_relative_score(value: Any) -> float | None:
    """``value`` as a float in (0, ...), or ``None``; warns above 1 (no document scores above the best).

    Raises:
        InvalidParameterError: ``value`` is not ``None`` or a finite number > 0.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise InvalidParameterError(f"min_relative_score must be None or a finite number > 0, got {value!r}")
    if value > 1:
        warnings.warn(
            f"min_relative_score={value!r} is above 1: no document scores above the best of its own query, so "
            "no result can reach it",
            UserWarning,
            stacklevel=3,
        )
    return float(value)


def check_thresholds_fit(
    mode: str,
    *,
    reranked: bool = False,
    min_score: float | None = None,
    min_relative_score: float | None = None,
    min_vector_score: float | None = None,
    min_keyword_score: float | None = None,
    said: Any = None,
) -> None:
    """Refuse a threshold the mode gives no score to cut.

    Args:
        mode: ``"vector"``, ``"keyword"``, or a fused mode (``"hybrid"``, and a knowledge base's ``"direct"``
            and ``"auto"``).
        reranked: a reranker ranks the final list (its scores are what ``min_score`` cuts).
        min_score: the final list's own scale: refused on a fused list (``mode`` fused and not ``reranked``).
        min_relative_score: a fraction of the best fused score: refused in vector and keyword mode.
        min_vector_score: the dense branch's cosine: refused in keyword mode (no dense branch runs).
        min_keyword_score: the BM25 branch's score: refused in vector mode (no BM25 runs).
        said: ``said(name) -> str``, how the message names a setting (its value, where it came from, its
            command-line option); default: ``name=value``.

    Raises:
        InvalidParameterError: a threshold set where the mode has nothing it could cut (the message says what
            to set instead).
    """
    values = {
        "min_score": min_score,
        "min_relative_score": min_relative_score,
        "min_vector_score": min_vector_score,
        "min_keyword_score": min_keyword_score,
    }
    name = said or (lambda n: f"{n}={values[n]!r}")
    fused = mode not in ("vector", "keyword")
    if min_score is not None and fused and not reranked:
        raise InvalidParameterError(
            f"{name('min_score')} cannot apply in {mode} mode: fused scores are not on one absolute scale (a "
            "fused score says where a document stands among this query's candidates, not how relevant it is). "
            "Use min_relative_score (--min-relative-score) to keep documents scoring at least a fraction of "
            "the query's best, min_vector_score / min_keyword_score (--min-vector-score / --min-keyword-score) "
            "to cut a branch on its own scale before fusion, or add a reranker (rerank), whose score min_score "
            "then cuts"
        )
    if min_relative_score is not None and not fused:
        raise InvalidParameterError(
            f"{name('min_relative_score')} cuts hybrid's fused scores; {mode} mode has no fusion: use min_score "
            f"(--min-score) on the {'BM25' if mode == 'keyword' else 'cosine'} scale"
        )
    for key, missing in (("min_vector_score", "keyword"), ("min_keyword_score", "vector")):
        if values[key] is not None and mode == missing:
            branch = "dense (vector)" if key == "min_vector_score" else "BM25 (keyword)"
            raise InvalidParameterError(
                f"{name(key)} cuts the {branch} branch, which {mode} mode does not run; use min_score (--min-score)"
            )


def strictest(*thresholds: float | None) -> float | None:
    """The highest of the thresholds that are set (two cuts of one list keep what passes both), or ``None``."""
    given = [t for t in thresholds if t is not None]
    return max(given) if given else None


def keep_above(documents: Sequence[Document], min_score: float | None) -> list[Document]:
    """The documents (best first) whose finite score is at least ``min_score``; all when it is ``None``."""
    if min_score is None:
        return list(documents)
    return [doc for doc in documents if _passes(doc.score, min_score)]


def keep_relative(documents: Sequence[Document], fraction: float | None) -> list[Document]:
    """The documents (best first) scoring at least ``fraction`` of the best one's score.

    For a best score ``b > 0`` the cut is ``fraction * b``. For ``b <= 0`` (a z-score fusion can give that)
    it is ``b - (1 - fraction) * |b|``: the best is kept at ``fraction = 1`` and the cut falls as the fraction
    falls, as it does for positive scores.
    """
    if fraction is None or not documents:
        return list(documents)
    best = max((s for s in (d.score for d in documents) if s is not None and math.isfinite(s)), default=None)
    if best is None:
        return []
    cut = fraction * best if best > 0 else best - (1 - fraction) * abs(best)
    return [doc for doc in documents if _passes(doc.score, cut)]


def _passes(score: float | None, threshold: float) -> bool:
    return score is not None and math.isfinite(score) and score >= threshold
