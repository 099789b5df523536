"""Standard IR effectiveness metrics: nDCG@k, Recall@k and MRR@k.

The definitions are trec_eval's (version 9.0.4 and later, ``ndcg_cut``, ``recall`` and ``recip_rank``
cut at k), which pytrec_eval wraps and BEIR reports (Thakur et al. 2021), so numbers computed here are
comparable with published BEIR tables:

* nDCG@k (Järvelin & Kekäläinen, "Cumulated gain-based evaluation of IR techniques", ACM TOIS 20(4),
  2002, with trec_eval's discount): ``DCG@k = sum over ranks r = 1..k of gain(d_r) / log2(r + 1)`` where
  the gain is the graded relevance from the qrels when positive and 0 otherwise (non-relevant, judged
  ``<= 0``, or unjudged). ``IDCG@k`` is the same sum over the judged relevant documents sorted by
  relevance, highest first. ``nDCG@k = DCG@k / IDCG@k``, and 0 when the query has no relevant document.
* Recall@k: relevant documents (relevance > 0) in the top k, divided by the number of relevant judged
  documents; 0 when there are none.
* MRR@k: ``1 / r`` for the rank r (1-based) of the first relevant document in the top k, else 0; the mean
  over queries is the mean reciprocal rank.

Every metric lies in [0, 1], higher is better. A ranking is a sequence of document ids, best first; as in
trec_eval, an id may appear only once in it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from fastrag.errors import InvalidParameterError

__all__ = ["METRICS", "evaluate", "mrr_at_k", "ndcg_at_k", "recall_at_k"]

METRICS = ("ndcg", "recall", "mrr")
"""The metric names :func:`evaluate` reports, in the order its keys appear."""


def ndcg_at_k(ranked_ids: Sequence[str], qrels_for_query: Mapping[str, int], *, k: int) -> float:
    """Normalised discounted cumulative gain of the top ``k`` of one ranking (trec_eval ``ndcg_cut.k``).

    ``DCG@k = sum_{r=1..min(k, n)} rel(d_r) / log2(r + 1)``, counting only ``rel > 0`` (graded gains as in
    the qrels, no exponential gain); ``IDCG@k`` is the DCG@k of the relevant judged documents sorted by
    relevance, highest first; the result is ``DCG@k / IDCG@k``. Source: Järvelin & Kekäläinen, ACM TOIS
    20(4), 2002; discount ``log2(rank + 1)`` as in trec_eval >= 9.0.4 / pytrec_eval.

    Args:
        ranked_ids: document ids, best first; ids beyond position ``k`` are ignored.
        qrels_for_query: ``{doc_id: relevance}`` judgements for this query; relevance ``<= 0`` and unjudged
            ids count as non-relevant.
        k: the cutoff, ``>= 1``.

    Returns:
        nDCG@k in [0, 1], higher is better; 0.0 when the query has no relevant judged document.

    Raises:
        InvalidParameterError: ``k < 1``, or an id appears twice in ``ranked_ids`` (trec_eval rejects
            duplicate documents too: counting one twice would inflate the score).
    """
    _check_k(k)
    _check_unique(ranked_ids)
    dcg = math.fsum(
        gain / math.log2(rank + 1)
        for rank, doc_id in enumerate(ranked_ids[:k], start=1)
        if (gain := qrels_for_query.get(doc_id, 0)) > 0
    )
    ideal_gains = sorted((rel for rel in qrels_for_query.values() if rel > 0), reverse=True)[:k]
    idcg = math.fsum(gain / math.log2(rank + 1) for rank, gain in enumerate(ideal_gains, start=1))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at_k(ranked_ids: Sequence[str], qrels_for_query: Mapping[str, int], *, k: int) -> float:
    """Fraction of the relevant judged documents found in the top ``k`` (trec_eval ``recall.k``).

    ``Recall@k = |{d in top k : rel(d) > 0}| / |{d : rel(d) > 0}|``. The denominator is not capped at
    ``k`` (BEIR's ``R_cap`` is a different metric).

    Args:
        ranked_ids: document ids, best first; ids beyond position ``k`` are ignored.
        qrels_for_query: ``{doc_id: relevance}`` judgements for this query; relevance ``<= 0`` and unjudged
            ids count as non-relevant.
        k: the cutoff, ``>= 1``.

    Returns:
        Recall@k in [0, 1], higher is better; 0.0 when the query has no relevant judged document.

    Raises:
        InvalidParameterError: ``k < 1``, or an id appears twice in ``ranked_ids``.
    """
    _check_k(k)
    _check_unique(ranked_ids)
    num_relevant = sum(1 for rel in qrels_for_query.values() if rel > 0)
    if num_relevant == 0:
        return 0.0
    found = sum(1 for doc_id in ranked_ids[:k] if qrels_for_query.get(doc_id, 0) > 0)
    return found / num_relevant


def mrr_at_k(ranked_ids: Sequence[str], qrels_for_query: Mapping[str, int], *, k: int) -> float:
    """Reciprocal rank of the first relevant document within the top ``k`` (trec_eval ``recip_rank``, cut).

    ``RR@k = 1 / r`` for the smallest 1-based rank ``r <= k`` whose document has relevance ``> 0``, else 0.
    The mean over queries (as :func:`evaluate` reports it) is MRR@k (Voorhees, TREC-8 QA track, 1999).

    Args:
        ranked_ids: document ids, best first; ids beyond position ``k`` are ignored.
        qrels_for_query: ``{doc_id: relevance}`` judgements for this query; relevance ``<= 0`` and unjudged
            ids count as non-relevant.
        k: the cutoff, ``>= 1``.

    Returns:
        The reciprocal rank in [0, 1] (1.0 when the first result is relevant), higher is better.

    Raises:
        InvalidParameterError: ``k < 1``, or an id appears twice in ``ranked_ids``.
    """
    _check_k(k)
    _check_unique(ranked_ids)
    for rank, doc_id in enumerate(ranked_ids[:k], start=1):
        if qrels_for_query.get(doc_id, 0) > 0:
            return 1.0 / rank
    return 0.0


_METRIC_FUNCTIONS = {"ndcg": ndcg_at_k, "recall": recall_at_k, "mrr": mrr_at_k}


def evaluate(
    run: Mapping[str, Sequence[str]],
    qrels: Mapping[str, Mapping[str, int]],
    *,
    ks: Iterable[int] = (10, 100),
) -> dict[str, float]:
    """Mean nDCG@k, Recall@k and MRR@k over every query in ``qrels``.

    Averaging follows ``trec_eval -c``: every query in ``qrels`` counts, a query absent from ``run`` (or with
    an empty ranking) scores 0 on every metric, and a query in ``run`` but not in ``qrels`` is ignored.
    A judged query with no relevant document scores 0. Each metric is defined in :func:`ndcg_at_k`,
    :func:`recall_at_k` and :func:`mrr_at_k` (trec_eval; Järvelin & Kekäläinen 2002).

    Args:
        run: ``{query_id: ranked doc ids, best first}``, e.g. from
            :func:`fastrag.evaluation.run_retrieval`.
        qrels: ``{query_id: {doc_id: relevance}}``, e.g. :attr:`BeirDataset.qrels`.
        ks: cutoffs, each ``>= 1``, no duplicates.

    Returns:
        ``{"ndcg@10": ..., "ndcg@100": ..., "recall@10": ..., "recall@100": ..., "mrr@10": ...,
        "mrr@100": ...}``: for each metric in :data:`METRICS`, one key per cutoff in ``ks`` order; every value
        is a mean in [0, 1], higher is better.

    Raises:
        InvalidParameterError: ``qrels`` is empty (a mean over no queries is undefined), ``ks`` is empty,
            holds a value ``< 1`` or a duplicate, or a ranking in ``run`` repeats an id.

    Examples:
        One query whose only relevant document is ranked second: ``DCG = 1 / log2(3)``, ``IDCG = 1``.

        >>> from fastrag.evaluation import evaluate
        >>> evaluate({"q1": ["d2", "d1"]}, {"q1": {"d1": 1}}, ks=(10,))
        {'ndcg@10': 0.6309..., 'recall@10': 1.0, 'mrr@10': 0.5}
    """
    cutoffs = tuple(ks)
    if not cutoffs:
        raise InvalidParameterError("ks must hold at least one cutoff")
    for k in cutoffs:
        _check_k(k)
    if len(set(cutoffs)) != len(cutoffs):
        raise InvalidParameterError(f"ks must not repeat a cutoff, got {cutoffs}")
    if not qrels:
        raise InvalidParameterError("qrels is empty: there is no query to average over")

    per_metric: dict[str, list[float]] = {f"{name}@{k}": [] for name in METRICS for k in cutoffs}
    for query_id, judged in qrels.items():
        ranked = run.get(query_id, ())
        try:
            _check_unique(ranked)
        except InvalidParameterError as exc:
            raise InvalidParameterError(f"run[{query_id!r}]: {exc}") from None
        for name, metric in _METRIC_FUNCTIONS.items():
            for k in cutoffs:
                per_metric[f"{name}@{k}"].append(metric(ranked, judged, k=k))
    return {key: math.fsum(values) / len(values) for key, values in per_metric.items()}


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InvalidParameterError(f"k must be an integer >= 1, got {k!r}")


def _check_unique(ranked_ids: Sequence[str]) -> None:
    seen: set[str] = set()
    for position, doc_id in enumerate(ranked_ids, start=1):
        if doc_id in seen:
            raise InvalidParameterError(
                f"document id {doc_id!r} appears twice in the ranking (again at rank {position})"
            )
        seen.add(doc_id)
