"""Rank fusion: combine the ranked lists of several retrievers (branches) into one list, best first.

* :class:`ReciprocalRankFusion` uses positions only (Cormack, Clarke & Büttcher, SIGIR 2009).
* :class:`WeightedScoreFusion` combines per-branch normalised scores (CombSUM-style, Fox & Shaw 1994):
  min-max, z-score, or distribution-based (DBSF, as in Qdrant's ``Fusion.DBSF``).

Rules shared by both:

* Documents are deduplicated by id. If one branch returns an id twice, its first occurrence counts and
  later ones are skipped; a branch's ranks are positions among the distinct ids it returned.
* A branch with weight 0 is dropped before anything is computed, so the result is exactly the result
  without that branch (a document only it found does not appear, and it is absent from provenance).
* The result does not depend on the order of the ``results`` mapping: scores are summed with
  :func:`math.fsum` (exactly rounded, so order-free), ties are broken by the document's best zero-based
  rank in any branch, then by id; a document found by several branches is copied from the branch where
  it ranks best (ties: the alphabetically first branch name).
* Every returned document is a copy: the input's ``score``, ``rank`` and ``branches`` keys are replaced
  by the fused ``score``, zero-based ``rank``, and ``branches = {name: {"score", "rank"}}`` for each
  branch that returned it (``score`` is that branch's finite score or ``None``; ``rank`` is zero-based).
  If the input copy was itself fused, its provenance is kept under that entry's ``"branches"``.
  Inputs are never mutated.
* ``group_by="parent_id"`` (any metadata key) fuses groups instead of documents: each branch list counts a
  group once, at its best-ranked chunk (positions are then among distinct groups), so a document with
  five matching chunks earns one RRF credit per branch, not five. Each result is the group's best chunk
  (from the branch where the group ranks best), carrying the group's other chunks found by any branch
  under ``metadata["grouping"]`` (see :mod:`fastrag.retrieval.grouping`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from numbers import Real
from typing import Any, Literal, Never, TypeAlias

from fastrag.errors import InvalidParameterError, UnknownParameterError
from fastrag.models import GROUP, SCORE, Document, plain_value
from fastrag.retrieval._provenance import finite_score, provenance, with_provenance
from fastrag.retrieval.grouping import check_group_by, chunk_entry, group_key

__all__ = ["DEFAULT_FLOOR", "Normalization", "ReciprocalRankFusion", "WeightedScoreFusion", "Weights"]

Weights: TypeAlias = Sequence[float] | Mapping[str, float] | None
"""Per-branch weights: ``None`` (all 1.0), a sequence aligned with the results' branch order, or a
mapping from branch name to weight."""

Normalization: TypeAlias = Literal["min_max", "z_score", "dbsf", "none"]
_NORMALIZATIONS = ("min_max", "z_score", "dbsf", "none")
# The value every document of a constant list (including a one-element list) normalises to.
_CONSTANT_LIST_VALUE = {"min_max": 1.0, "z_score": 0.0, "dbsf": 0.5, "none": 0.0}

DEFAULT_FLOOR = 0.2
""":class:`WeightedScoreFusion`'s default ``floor``: in min-max, a branch's lowest returned document
normalises to 0.2 and a document it did not return to 0. Evidence: ``benchmarks/fusion_defaults.py``
(``docs/quality.md``, "The fusion floor")."""

# Per branch: the contribution of the document at each (deduplicated) position, already multiplied by
# the branch weight, and the contribution of a document the branch did not return.
_Contributions: TypeAlias = tuple[list[float], float]


def _is_real(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def _reject_unknown(cls: type, unknown: Mapping[str, Any], known: str) -> None:
    """Raise :class:`UnknownParameterError` naming the unexpected keyword arguments, if any."""
    if unknown:
        raise UnknownParameterError(
            f"{cls.__name__} got unknown parameter(s) {sorted(unknown)!r}; it takes {known}"
        )


def _validate_weights(weights: Weights) -> tuple[float, ...] | dict[str, float] | None:
    if weights is None:
        return None
    if isinstance(weights, Mapping):
        items = list(weights.items())
        if not all(isinstance(name, str) for name, _ in items):
            raise InvalidParameterError(f"weight keys must be branch names (str), got {list(weights)!r}")
    elif isinstance(weights, Sequence) and not isinstance(weights, str | bytes):
        items = list(enumerate(weights))
    else:
        raise InvalidParameterError(f"weights must be None, a sequence or a mapping, got {weights!r}")
    if not items:
        raise InvalidParameterError("weights must not be empty; pass None for equal weights")
    for key, w in items:
        if not _is_real(w) or not math.isfinite(w) or w < 0:
            raise InvalidParameterError(f"weight {key!r} must be a finite number >= 0, got {w!r}")
    if all(w == 0 for _, w in items):
        raise InvalidParameterError("at least one weight must be > 0")
    if isinstance(weights, Mapping):
        return {name: float(w) for name, w in items}
    return tuple(float(w) for _, w in items)


class _Fusion:
    """Validation, deduplication, tie-breaking and stamping shared by the fusion methods."""

    accepts_depth = True  # fuse(..., depth=): fastrag.protocols.SupportsDepth

    def __init__(self, weights: Weights, group_by: str | None = None) -> None:
        self._weights = _validate_weights(weights)
        self._group_by = None if group_by is None else check_group_by(group_by)

    @property
    def group_by(self) -> str | None:
        """The metadata key whose groups are fused (each counted once per branch list), or ``None``."""
        return self._group_by

    @property
    def weights(self) -> tuple[float, ...] | Mapping[str, float] | None:
        """The validated weights, as given (``None`` means 1.0 for every branch)."""
        return self._weights

    def check_branches(self, names: Sequence[str]) -> None:
        """Check that the weights fit branches named ``names`` (in order), without fusing anything.

        Raises:
            InvalidParameterError: a sequence of weights has a different length, or a mapping of weights
                lacks one of ``names`` or names a branch not in ``names``.
        """
        self._resolve_weights(list(names))

    def _resolve_weights(self, names: list[str]) -> dict[str, float]:
        if self._weights is None:
            return dict.fromkeys(names, 1.0)
        if isinstance(self._weights, tuple):
            if len(self._weights) != len(names):
                raise InvalidParameterError(
                    f"{len(self._weights)} weights given for {len(names)} branches {names!r}"
                )
            return dict(zip(names, self._weights, strict=True))
        missing = [n for n in names if n not in self._weights]
        if missing:
            raise InvalidParameterError(f"no weight for branch(es) {missing!r}; weights name {list(self._weights)!r}")
        extra = [n for n in self._weights if n not in names]
        if extra:
            raise InvalidParameterError(f"weights name unknown branch(es) {extra!r}; branches are {names!r}")
        return {n: self._weights[n] for n in names}

    def fuse(
        self, results: Mapping[str, Sequence[Document]], *, k: int | None = None, depth: int | None = None
    ) -> list[Document]:
        """Fuse ``{branch_name: documents best first}`` into one list, best first, at most ``k`` long.

        Args:
            results: each branch's ranked documents. Not mutated.
            k: how many documents to return; ``None`` returns every distinct document.
            depth: score only each list's first ``depth`` documents: the normalisation (or RRF) sees those
                alone, and a document further down a list counts there as if that branch had not returned
                it. It stays a candidate, after every better-scored one (ties: its best position, then id).
                So the fused scores, and the order of every document within some list's first ``depth``,
                do not depend on how much deeper the lists go: :class:`~fastrag.retrieval.HybridRetriever`
                passes its ``candidate_k``, so asking for more results never reorders the first ones.
                ``None`` (default): every document of every list is scored.

        Returns:
            Copies stamped with the fused ``score`` (higher is better; range: see the class), zero-based
            ``rank`` and per-branch provenance under ``metadata["branches"]``.

        Raises:
            InvalidParameterError: ``k`` or ``depth`` is not a positive int or ``None``; ``results`` is not a
                mapping; the weights do not fit the branches (see :meth:`check_branches`).
        """
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k <= 0):
            raise InvalidParameterError(f"k must be a positive int or None, got {k!r}")
        if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth <= 0):
            raise InvalidParameterError(f"depth must be a positive int or None, got {depth!r}")
        if not isinstance(results, Mapping):
            raise InvalidParameterError(f"results must be a mapping of branch name to documents, got {results!r}")
        weights = self._resolve_weights(list(results))
        by = self._group_by
        key_of = _document_id if by is None else partial(group_key, by=by)
        grouping = None if by is None else key_of
        lists = {name: _distinct(results[name], grouping) for name in sorted(results) if weights[name] > 0}
        if depth is None or all(len(docs) <= depth for docs in lists.values()):
            contributions = self._contributions(lists, {name: weights[name] for name in lists})
        else:  # score the first `depth` of each list; below that, a document counts as absent from the list
            scored_part = self._contributions(
                {name: docs[:depth] for name, docs in lists.items()}, {name: weights[name] for name in lists}
            )
            contributions = {
                name: (values + [absent] * (len(lists[name]) - len(values)), absent)
                for name, (values, absent) in scored_part.items()
            }

        positions: dict[str, dict[str, int]] = {}  # doc id (or group key) -> {branch: position}
        for name, docs in lists.items():
            for pos, doc in enumerate(docs):
                key = doc.id if by is None else key_of(doc)
                where = positions.get(key)
                if where is None:
                    positions[key] = {name: pos}
                else:
                    where[name] = pos

        scored = []
        if len(lists) == 2:  # one IEEE addition is correctly rounded: the same result as fsum, faster
            (first, (values_a, absent_a)), (second, (values_b, absent_b)) = contributions.items()
            for doc_id, where in positions.items():
                pos_a, pos_b = where.get(first), where.get(second)
                if pos_b is None:
                    scored.append((-(values_a[pos_a] + absent_b), pos_a, doc_id))
                elif pos_a is None:
                    scored.append((-(absent_a + values_b[pos_b]), pos_b, doc_id))
                else:
                    scored.append((-(values_a[pos_a] + values_b[pos_b]), min(pos_a, pos_b), doc_id))
        else:
            for doc_id, where in positions.items():
                score = math.fsum(
                    contributions[name][0][where[name]] if name in where else contributions[name][1] for name in lists
                )
                scored.append((-score, min(where.values()), doc_id))
        scored.sort()
        if k is not None:
            del scored[k:]

        members = None if by is None else _group_members(results, lists, key_of)
        fused = []
        for rank, (neg_score, best_pos, doc_id) in enumerate(scored):
            where = positions[doc_id]
            # the copy comes from the branch where the document ranks best (ties: the first name; lists is sorted)
            best_name = next(name for name, pos in where.items() if pos == best_pos)
            source = lists[best_name][best_pos]
            branches = {name: provenance(lists[name][pos], pos) for name, pos in sorted(where.items())}
            extra = {}
            if members is not None and by is not None:
                chunks = [chunk_entry(c) for c in members[doc_id] if c.id != source.id]
                extra[GROUP] = {"by": by, "value": plain_value(source.metadata.get(by)), "chunks": chunks}
            # + 0.0 turns -0.0 into 0.0
            fused.append(with_provenance(source, score=-neg_score + 0.0, rank=rank, branches=branches, **extra))
        return fused

    def _contributions(
        self, lists: Mapping[str, list[Document]], weights: Mapping[str, float]
    ) -> dict[str, _Contributions]:
        raise NotImplementedError


def _document_id(document: Document) -> str:
    return document.id


def _group_members(
    results: Mapping[str, Sequence[Document]], lists: Mapping[str, list[Document]], key_of: Callable[[Document], str]
) -> dict[str, list[Document]]:
    """Every distinct chunk the fused branches returned, by group key, best first (by its best position in
    any branch, then id); the copy kept is the one from the branch where it ranks best."""
    best: dict[str, tuple[int, Document]] = {}
    for name in lists:  # the branches kept (weight > 0), in name order
        for pos, doc in enumerate(_distinct(results[name])):
            if doc.id not in best or pos < best[doc.id][0]:
                best[doc.id] = (pos, doc)
    members: dict[str, list[Document]] = {}
    for pos, doc in sorted(best.values(), key=lambda item: (item[0], item[1].id)):
        members.setdefault(key_of(doc), []).append(doc)
    return members


def _distinct(docs: Sequence[Document], key_of: Callable[[Document], str] | None = None) -> list[Document]:
    docs = list(docs)  # read once, whatever iterable a caller passed
    ids = [doc.id for doc in docs] if key_of is None else [key_of(doc) for doc in docs]
    if len(set(ids)) == len(ids):  # the usual case: a store never returns an id twice
        return docs
    seen: set[str] = set()
    out = []
    for doc_id, doc in zip(ids, docs, strict=True):
        if doc_id not in seen:
            seen.add(doc_id)
            out.append(doc)
    return out


class ReciprocalRankFusion(_Fusion):
    """Reciprocal Rank Fusion (Cormack, Clarke & Büttcher, SIGIR 2009).

    A document's fused score is ``sum over branches b that returned it of w_b / (rank_constant + r_b)``,
    with ``r_b`` its one-based position in branch ``b``. Only positions are used, never the branches'
    scores, so branches with incomparable scores (BM25, cosine) combine without calibration. The fused
    score is higher-is-better, in ``(0, sum(w) / (rank_constant + 1)]``.

    Args:
        rank_constant: the ``k`` of the paper (60 there); larger values flatten the advantage of top ranks.
        weights: per-branch weights (see :data:`Weights`); ``None`` gives every branch 1.0.
        group_by: fuse groups of chunks sharing this metadata key (``"parent_id"``), each counted once per
            branch list (see the module); ``None`` (default) fuses documents.

    Raises:
        InvalidParameterError: ``rank_constant`` is not a finite number > 0; a weight is negative, NaN or
            infinite; every weight is 0; ``weights`` is empty.
        UnknownParameterError: an unknown keyword argument (also a ``TypeError``), e.g. ``k=60`` for
            ``rank_constant``; type checkers flag it too.
    """

    def __init__(
        self, rank_constant: float = 60, *, weights: Weights = None, group_by: str | None = None, **unknown: Never
    ) -> None:
        _reject_unknown(type(self), unknown, "rank_constant, weights and group_by")
        if not _is_real(rank_constant) or not math.isfinite(rank_constant) or rank_constant <= 0:
            raise InvalidParameterError(f"rank_constant must be a finite number > 0, got {rank_constant!r}")
        super().__init__(weights, group_by)
        self._rank_constant = rank_constant

    @property
    def rank_constant(self) -> float:
        """The constant added to every one-based rank."""
        return self._rank_constant

    def __repr__(self) -> str:
        grouped = "" if self._group_by is None else f", group_by={self._group_by!r}"
        return f"ReciprocalRankFusion(rank_constant={self._rank_constant!r}, weights={self._weights!r}{grouped})"

    def _contributions(
        self, lists: Mapping[str, list[Document]], weights: Mapping[str, float]
    ) -> dict[str, _Contributions]:
        return {
            name: ([weights[name] / (self._rank_constant + pos + 1) for pos in range(len(docs))], 0.0)
            for name, docs in lists.items()
        }


class WeightedScoreFusion(_Fusion):
    """Weighted sum of per-branch normalised scores (CombSUM, Fox & Shaw 1994; min-max / z-score
    normalisation as compared by Lee, SIGIR 1997; distribution-based score fusion as in Qdrant).

    The fused score is ``sum_b (w_b / W) * norm_b(score)`` with ``W`` the sum of the weights, i.e. a
    convex combination; higher is better. Each branch is normalised on its own list:

    * ``"min_max"``: ``(s - min) / (max - min)``, in [0, 1]; a constant list (including a one-element
      list) gives 1.0 to all. The fused score lies in [0, 1].
    * ``"z_score"``: ``(s - mean) / std`` (population std); a constant list gives 0 to all. Unbounded.
    * ``"dbsf"``: distribution-based score fusion, ``(s - (mean - 3 std)) / (6 std)`` with the sample std
      (``n - 1``): the interval mean ± 3 std is mapped onto [0, 1], so a list's scores land in [0, 1] unless
      one lies more than 3 std from the mean (not clipped). A constant list (including a one-element list)
      gives 0.5 to all. Source: Qdrant's ``Fusion.DBSF`` (``distr_norm`` in
      ``lib/segment/src/common/score_fusion.rs``, Qdrant 1.11), same limits, std and constant-list value.
    * ``"none"``: raw scores; only meaningful when the branches' scores share a scale.

    A document in a list without a finite score (no ``"score"`` key, ``None``, NaN, ±inf, not a number)
    gets that list's minimum normalised value; if no document in the list has one, each gets the
    constant-list value (1.0 for min_max, 0.5 for dbsf, 0 otherwise).

    A document a branch did not return always gets less there than every document it returned (the
    **floor**, issue 25): a branch's true matches never tie with its non-matches. Without it, min-max maps
    a list's lowest score to 0, the value of every document the branch did not return, so when BM25
    matched fewer documents than ``candidate_k`` its last true matches were ordered among the dense-only
    candidates by the dense share alone (a query whose rare term has two BM25 hits, both relevant, had the
    second at rank 28 of the default hybrid). With ``lo`` and ``span`` the lowest normalised value of the
    list and the spread of its normalised values (1 for a constant list), a missing document gets
    ``min(0, lo - g * span)`` with ``g = floor / (1 - floor)``: it counts as one more document scoring a
    fraction ``g`` of the list's range below its lowest one. So:

    * min_max: the returned documents span ``[floor, 1]`` (a constant list: 1.0) and a missing one gets
      0: the scale is that of min-max over the list plus that virtual document, and stays [0, 1];
    * z_score: ``z(lo) - g * (z(hi) - z(lo))`` (a constant list: ``-g``);
    * dbsf: 0, as in Qdrant (which sums only the lists a point is in), unless the list's lowest
      normalised value is below ``g * span`` (its score near or under mean - 3 std), then the value above;
    * ``"none"``: 0 (CombSUM's convention) when every score is positive; else ``lo - g * span``.

    ``floor=0`` gives the classic normalisations, where the lowest returned document ties with the
    missing ones (ranx's and Qdrant's conventions; the tests compare with both).

    Args:
        weights: per-branch weights (see :data:`Weights`); ``None`` gives every branch the same weight.
        normalization: ``"min_max"``, ``"z_score"``, ``"dbsf"`` or ``"none"``.
        floor: in [0, 1): how far a branch's lowest returned document stays above the documents it did not
            return (above; in min-max, the normalised value of its lowest document). Default
            :data:`DEFAULT_FLOOR`.
        group_by: fuse groups of chunks sharing this metadata key (``"parent_id"``), each counted once per
            branch list at its best chunk's score (see the module); ``None`` (default) fuses documents.

    Raises:
        InvalidParameterError: unknown ``normalization``; ``floor`` is not a number in [0, 1); a weight
            is negative, NaN or infinite; every weight is 0; ``weights`` is empty.
        UnknownParameterError: an unknown keyword argument (also a ``TypeError``), e.g. ``normalisation=``;
            type checkers flag it too.
    """

    def __init__(
        self,
        weights: Weights = None,
        *,
        normalization: Normalization = "min_max",
        floor: float = DEFAULT_FLOOR,
        group_by: str | None = None,
        **unknown: Never,
    ) -> None:
        _reject_unknown(type(self), unknown, "weights, normalization, floor and group_by")
        if normalization not in _NORMALIZATIONS:
            raise InvalidParameterError(f"normalization must be one of {_NORMALIZATIONS}, got {normalization!r}")
        if not _is_real(floor) or not 0 <= floor < 1:
            raise InvalidParameterError(f"floor must be a number in [0, 1), got {floor!r}")
        super().__init__(weights, group_by)
        self._normalization = normalization
        self._floor = float(floor)

    @property
    def normalization(self) -> Normalization:
        """How each branch's scores are normalised before weighting."""
        return self._normalization

    @property
    def floor(self) -> float:
        """How far a branch's lowest returned document stays above the documents it did not return."""
        return self._floor

    def __repr__(self) -> str:
        grouped = "" if self._group_by is None else f", group_by={self._group_by!r}"
        return (f"WeightedScoreFusion(weights={self._weights!r}, normalization={self._normalization!r}, "
                f"floor={self._floor!r}{grouped})")

    def _contributions(
        self, lists: Mapping[str, list[Document]], weights: Mapping[str, float]
    ) -> dict[str, _Contributions]:
        total = math.fsum(weights.values())
        out = {}
        for name, docs in lists.items():
            raw = [doc.metadata.get(SCORE) for doc in docs]
            # v - v == 0.0 holds exactly for finite floats (inf - inf and NaN - NaN are NaN): the common case
            # without a call per document; anything else goes through finite_score
            values, absent = self._normalise(
                [v if type(v) is float and v - v == 0.0 else finite_score(v) for v in raw]
            )
            w = weights[name] / total
            out[name] = ([w * v for v in values], w * absent)
        return out

    def _normalise(self, raw: list[float | None]) -> tuple[list[float], float]:
        known = [s for s in raw if s is not None]
        constant = _CONSTANT_LIST_VALUE[self._normalization]
        if not known:
            return [constant] * len(raw), self._absent(constant, constant)
        lo, hi = min(known), max(known)
        # Each map below is non-decreasing in s (a subtraction, then a division by a positive number, both
        # correctly rounded), so the lowest normalised value is the one of the lowest score.
        if self._normalization == "none":
            norm = known
        elif hi == lo:
            norm = [constant] * len(known)
        elif self._normalization == "min_max":
            span = hi - lo
            floor = self._floor
            # [0, 1] squeezed onto [floor, 1]: min-max over the list and one virtual document scoring
            # gap * span below its lowest, which stands for every document the branch did not return
            norm = [(s - lo) / span for s in known] if floor == 0 else [floor + (1.0 - floor) * ((s - lo) / span) for s in known]
        elif self._normalization == "dbsf":
            # hi > lo, so there are >= 2 distinct scores and the sample std is > 0
            mean = math.fsum(known) / len(known)
            std = math.sqrt(math.fsum((s - mean) ** 2 for s in known) / (len(known) - 1))
            if std > 0:
                low, width = mean - 3 * std, 6 * std
                norm = [(s - low) / width for s in known]
            else:
                norm = [constant] * len(known)
        else:
            mean = math.fsum(known) / len(known)
            std = math.sqrt(math.fsum((s - mean) ** 2 for s in known) / len(known))
            norm = [(s - mean) / std for s in known] if std > 0 else [0.0] * len(known)
        floor = min(norm)
        absent = self._absent(floor, max(norm))
        if len(known) == len(raw):
            return norm, absent
        values = iter(norm)
        return [floor if s is None else next(values) for s in raw], absent

    def _absent(self, lowest: float, highest: float) -> float:
        """The normalised value of a document a branch did not return, for a list whose normalised values
        lie in ``[lowest, highest]`` (see the class docstring): strictly below ``lowest`` when ``floor`` > 0."""
        if self._normalization == "min_max":
            return 0.0  # the returned documents lie in [floor, 1] (a constant list: 1.0)
        if self._floor == 0 or (self._normalization == "none" and lowest > 0):
            return min(0.0, lowest)
        gap = self._floor / (1.0 - self._floor)
        return min(0.0, lowest - gap * (highest - lowest if highest > lowest else 1.0))
