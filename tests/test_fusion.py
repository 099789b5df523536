"""Rank fusion: RRF and weighted score fusion, on hand-worked lists."""

import math

import pytest

from fastrag.errors import InvalidParameterError
from fastrag.models import Document
from fastrag.retrieval.fusion import ReciprocalRankFusion, WeightedScoreFusion

_NO_SCORE = object()


def doc(doc_id: str, score=_NO_SCORE, **metadata) -> Document:
    if score is not _NO_SCORE:
        metadata["score"] = score
    return Document(id=doc_id, content=f"text of {doc_id}", metadata=metadata)


def ranked(ids_and_scores) -> list[Document]:
    """Documents as a store returns them: best first, stamped with score and zero-based rank."""
    return [doc(i, s, rank=r) for r, (i, s) in enumerate(ids_and_scores)]


def ids(docs) -> list[str]:
    return [d.id for d in docs]


def scores(docs) -> dict[str, float]:
    return {d.id: d.score for d in docs}


def snapshot(results) -> dict:
    return {name: [d.to_dict() for d in docs] for name, docs in results.items()}


ALL_FUSIONS = [
    ReciprocalRankFusion(),
    ReciprocalRankFusion(rank_constant=1, weights={"bm25": 2.0, "vector": 0.5}),
    WeightedScoreFusion(normalization="min_max"),
    WeightedScoreFusion({"bm25": 2.0, "vector": 0.5}, normalization="z_score"),
    WeightedScoreFusion({"bm25": 0.6, "vector": 0.4}, normalization="dbsf"),
    WeightedScoreFusion(normalization="none"),
]


def two_branches():
    return {
        "bm25": ranked([("a", 10.0), ("b", 6.0), ("c", 2.0)]),
        "vector": ranked([("b", 0.75), ("d", 0.5), ("a", 0.25)]),
    }


# ------------------------------------------------------------------------------------------------ RRF


def test_rrf_hand_worked_scores_and_order():
    # rank_constant=1, so a document at one-based rank r contributes 1 / (1 + r):
    #   a: bm25 r=1, vector r=3 -> 1/2 + 1/4 = 0.75
    #   b: bm25 r=2, vector r=1 -> 1/3 + 1/2 = 0.8333...
    #   c: bm25 r=3             -> 1/4       = 0.25
    #   d: vector r=2           -> 1/3       = 0.3333...
    fused = ReciprocalRankFusion(rank_constant=1).fuse(two_branches())
    assert ids(fused) == ["b", "a", "d", "c"]
    assert scores(fused) == pytest.approx({"b": 5 / 6, "a": 0.75, "d": 1 / 3, "c": 0.25})
    assert [d.rank for d in fused] == [0, 1, 2, 3]


def test_rrf_default_rank_constant_is_60():
    # a: 1/61 + 1/63 = 0.0322663;  b: 1/62 + 1/61 = 0.0325225;  d: 1/62;  c: 1/63
    fused = ReciprocalRankFusion().fuse(two_branches())
    assert ids(fused) == ["b", "a", "d", "c"]
    assert scores(fused) == pytest.approx({"b": 1 / 62 + 1 / 61, "a": 1 / 61 + 1 / 63, "d": 1 / 62, "c": 1 / 63})


def test_rrf_uses_positions_not_backend_scores():
    # Position 0 wins although its backend score is lower: 1/61 > 1/62.
    fused = ReciprocalRankFusion().fuse({"bm25": [doc("low", 0.1), doc("high", 100.0)]})
    assert ids(fused) == ["low", "high"]
    assert scores(fused) == pytest.approx({"low": 1 / 61, "high": 1 / 62})


def test_rrf_weights_by_name_and_by_position():
    results = {"bm25": ranked([("a", 1.0), ("b", 0.5)]), "vector": ranked([("b", 0.9), ("a", 0.1)])}
    # Unweighted, rank_constant=1: a = 1/2 + 1/3, b = 1/3 + 1/2 -> tie, broken by id.
    assert ids(ReciprocalRankFusion(rank_constant=1).fuse(results)) == ["a", "b"]
    # bm25 weight 3: a = 3/2 + 1/3 = 1.8333, b = 3/3 + 1/2 = 1.5
    by_name = ReciprocalRankFusion(rank_constant=1, weights={"bm25": 3, "vector": 1}).fuse(results)
    assert ids(by_name) == ["a", "b"]
    assert scores(by_name) == pytest.approx({"a": 3 / 2 + 1 / 3, "b": 3 / 3 + 1 / 2})
    # Weights [1, 3] align with the mapping order (bm25, vector): a = 1/2 + 3/3 = 1.5, b = 1/3 + 3/2 = 1.8333
    by_position = ReciprocalRankFusion(rank_constant=1, weights=[1, 3]).fuse(results)
    assert ids(by_position) == ["b", "a"]
    assert scores(by_position) == pytest.approx({"a": 1.5, "b": 1 / 3 + 3 / 2})


def test_tie_broken_by_best_single_rank_then_id():
    # weights a=2, b=1, rank_constant=1:
    #   x0: 2/2 = 1;  x1: 2/3;  "m" (branch a, r=3): 2/4 = 0.5;  "z" (branch b, r=1): 1/2 = 0.5
    # "z" and "m" tie at 0.5; "z" has the better best rank (0 vs 2), so it comes first despite its id.
    results = {"a": ranked([("x0", 1.0), ("x1", 1.0), ("m", 1.0)]), "b": ranked([("z", 1.0)])}
    fused = ReciprocalRankFusion(rank_constant=1, weights={"a": 2, "b": 1}).fuse(results)
    assert ids(fused) == ["x0", "x1", "z", "m"]
    assert fused[2].score == fused[3].score == 0.5
    # Same score and same best rank: by id.
    fused = ReciprocalRankFusion().fuse({"a": ranked([("y", 1.0)]), "b": ranked([("x", 1.0)])})
    assert ids(fused) == ["x", "y"]


def test_rrf_k_truncates_and_ranks_are_zero_based():
    fused = ReciprocalRankFusion(rank_constant=1).fuse(two_branches(), k=2)
    assert ids(fused) == ["b", "a"]
    assert [d.rank for d in fused] == [0, 1]


# ------------------------------------------------------------------------------------ shared behaviour


@pytest.mark.parametrize("fusion", ALL_FUSIONS, ids=repr)
def test_mapping_order_does_not_change_the_result(fusion):
    results = two_branches()
    results["vector"].append(doc("c", 0.1, lang="de"))  # c differs in metadata between branches
    reordered = {"vector": results["vector"], "bm25": results["bm25"]}
    expected = [d.to_dict() for d in fusion.fuse(results)]
    assert [d.to_dict() for d in fusion.fuse(reordered)] == expected
    assert list(fusion.fuse(reordered)[0].metadata["branches"]) == list(fusion.fuse(results)[0].metadata["branches"])


@pytest.mark.parametrize("fusion", ALL_FUSIONS, ids=repr)
def test_deduplicates_by_id(fusion):
    fused = fusion.fuse(two_branches())
    assert sorted(ids(fused)) == ["a", "b", "c", "d"]


def test_duplicate_within_a_branch_counts_once_at_its_first_position():
    # [a, a, b] is read as [a, b]: b has rank 1 there. rank_constant=1: a = 1/2, b = 1/3.
    fused = ReciprocalRankFusion(rank_constant=1).fuse({"bm25": [doc("a", 3.0), doc("a", 2.0), doc("b", 1.0)]})
    assert ids(fused) == ["a", "b"]
    assert scores(fused) == pytest.approx({"a": 1 / 2, "b": 1 / 3})
    assert fused[1].metadata["branches"] == {"bm25": {"score": 1.0, "rank": 1}}


@pytest.mark.parametrize("fusion", ALL_FUSIONS, ids=repr)
def test_branch_provenance(fusion):
    results = two_branches()
    results["bm25"][0] = doc("a", 10.0, rank=0, source_uri="docs/a.md", branches={"old": {"score": 1, "rank": 0}})
    by_id = {d.id: d for d in fusion.fuse(results)}
    # Only the branches that returned a document; their original score and zero-based rank there.
    assert by_id["a"].metadata["branches"]["bm25"]["score"] == 10.0
    assert by_id["a"].metadata["branches"]["bm25"]["rank"] == 0
    assert by_id["a"].metadata["branches"]["vector"] == {"score": 0.25, "rank": 2}
    assert by_id["b"].metadata["branches"] == {"bm25": {"score": 6.0, "rank": 1}, "vector": {"score": 0.75, "rank": 0}}
    assert by_id["c"].metadata["branches"] == {"bm25": {"score": 2.0, "rank": 2}}
    assert by_id["d"].metadata["branches"] == {"vector": {"score": 0.5, "rank": 1}}
    assert by_id["d"].branches["vector"].rank == 1
    # Other metadata is kept; old score/rank/branches are replaced by the fused ones.
    assert by_id["a"].source_uri == "docs/a.md"
    assert set(by_id["a"].metadata) == {"source_uri", "score", "rank", "branches"}
    assert by_id["a"].content == "text of a"


def test_nested_fusion_keeps_inner_provenance():
    inner = ReciprocalRankFusion(rank_constant=1).fuse({"bm25": ranked([("a", 2.0)]), "vector": ranked([("a", 0.5)])})
    # inner a: 1/2 + 1/2 = 1.0
    outer = ReciprocalRankFusion(rank_constant=1).fuse({"hybrid": inner, "other": ranked([("b", 1.0)])})
    a = next(d for d in outer if d.id == "a")
    assert a.metadata["branches"]["hybrid"] == {
        "score": 1.0,
        "rank": 0,
        "branches": {"bm25": {"score": 2.0, "rank": 0}, "vector": {"score": 0.5, "rank": 0}},
    }


@pytest.mark.parametrize("fusion", ALL_FUSIONS, ids=repr)
def test_inputs_are_not_mutated(fusion):
    results = two_branches()
    results["bm25"][0] = doc("a", 10.0, rank=0, branches={"old": {"score": 1, "rank": 0}})
    before = snapshot(results)
    lists_before = {name: list(docs) for name, docs in results.items()}
    fused = fusion.fuse(results)
    assert snapshot(results) == before
    assert {name: list(docs) for name, docs in results.items()} == lists_before
    assert all(f is not d for f in fused for docs in results.values() for d in docs)


@pytest.mark.parametrize(
    "fusion_class", [ReciprocalRankFusion, lambda weights: WeightedScoreFusion(weights, normalization="z_score")]
)
def test_zero_weight_is_exactly_dropping_the_branch(fusion_class):
    results = {**two_branches(), "extra": ranked([("only_extra", 99.0), ("a", 1.0)])}
    with_zero = fusion_class(weights={"bm25": 1.0, "vector": 2.0, "extra": 0.0}).fuse(results)
    dropped = fusion_class(weights={"bm25": 1.0, "vector": 2.0}).fuse(two_branches())
    assert "only_extra" not in ids(with_zero)
    assert [d.to_dict() for d in with_zero] == [d.to_dict() for d in dropped]
    # By position too: weights [1, 0] on (bm25, vector) is bm25 alone with its default weight.
    alone = fusion_class(weights=None).fuse({"bm25": two_branches()["bm25"]})
    assert [d.to_dict() for d in fusion_class(weights=[1, 0]).fuse(two_branches())] == [d.to_dict() for d in alone]


@pytest.mark.parametrize("fusion", ALL_FUSIONS, ids=repr)
def test_empty_results(fusion):
    if fusion.weights is not None:
        assert fusion.fuse({"bm25": [], "vector": []}) == []
    else:
        assert fusion.fuse({}) == []
        assert fusion.fuse({"bm25": []}) == []


# ---------------------------------------------------------------------------------- validation


@pytest.mark.parametrize("rank_constant", [0, -1, math.nan, math.inf, "60", True])
def test_rrf_rejects_bad_rank_constant(rank_constant):
    with pytest.raises(InvalidParameterError):
        ReciprocalRankFusion(rank_constant)


@pytest.mark.parametrize(
    "weights",
    [[1.0, -0.5], [math.nan, 1.0], [math.inf], {"bm25": -1}, [0, 0], {"bm25": 0.0}, [], {}, "11", [True]],
)
@pytest.mark.parametrize("make", [lambda w: ReciprocalRankFusion(weights=w), lambda w: WeightedScoreFusion(w)])
def test_bad_weights_rejected_at_construction(make, weights):
    with pytest.raises(InvalidParameterError):
        make(weights)


def test_unknown_normalization_rejected():
    with pytest.raises(InvalidParameterError):
        WeightedScoreFusion(normalization="l2")


@pytest.mark.parametrize("make", [lambda w: ReciprocalRankFusion(weights=w), lambda w: WeightedScoreFusion(w)])
def test_weights_that_do_not_fit_the_branches_raise_at_fuse(make):
    results = two_branches()
    with pytest.raises(InvalidParameterError):
        make([1.0, 2.0, 3.0]).fuse(results)  # 3 weights, 2 branches
    with pytest.raises(InvalidParameterError):
        make({"bm25": 1.0}).fuse(results)  # no weight for "vector"
    with pytest.raises(InvalidParameterError):
        make({"bm25": 1.0, "vector": 1.0, "vectr": 1.0}).fuse(results)  # unknown branch name


@pytest.mark.parametrize("k", [0, -3, 2.5, True, "5"])
@pytest.mark.parametrize("fusion", ALL_FUSIONS, ids=repr)
def test_bad_k_rejected(fusion, k):
    with pytest.raises(InvalidParameterError):
        fusion.fuse(two_branches(), k=k)


# ---------------------------------------------------------------------------- weighted score fusion


# The hand-worked cases below use floor=0, the classic normalisations (ranx's, Qdrant's DBSF); the floor
# that keeps a branch's lowest document above the ones it did not return is tested in
# tests/test_relevance_defaults.py.


def test_min_max_hand_worked():
    # bm25   scores 10, 6, 2        -> (s - 2) / 8         : a 1.0, b 0.5, c 0.0
    # vector scores 0.75, 0.5, 0.25 -> (s - 0.25) / 0.5    : b 1.0, d 0.5, a 0.0
    # Equal weights -> 1/2 each; absent contributes 0:
    #   a = .5*1 + .5*0 = .5;  b = .5*.5 + .5*1 = .75;  c = .5*0 + 0 = 0;  d = 0 + .5*.5 = .25
    fused = WeightedScoreFusion(floor=0).fuse(two_branches())
    assert ids(fused) == ["b", "a", "d", "c"]
    assert scores(fused) == pytest.approx({"b": 0.75, "a": 0.5, "d": 0.25, "c": 0.0})


def test_min_max_weights_form_a_convex_combination():
    # weights 3:1 -> 0.75 and 0.25.
    #   a = .75*1 + .25*0 = .75;  b = .75*.5 + .25*1 = .625;  d = .25*.5 = .125;  c = 0
    fused = WeightedScoreFusion({"bm25": 3, "vector": 1}, floor=0).fuse(two_branches())
    assert ids(fused) == ["a", "b", "d", "c"]
    assert scores(fused) == pytest.approx({"a": 0.75, "b": 0.625, "d": 0.125, "c": 0.0})


def test_z_score_hand_worked_and_absent_is_never_better_than_present():
    # bm25 a 3, b 1: mean 2, population std 1 -> a +1, b -1; absent there: min = -1
    # vector b 4, c 2, d 0: mean 2, std sqrt((4 + 0 + 4) / 3) = sqrt(8/3) -> b +2/sqrt(8/3) = +sqrt(1.5),
    #   c 0, d -sqrt(1.5); absent there: -sqrt(1.5)
    # Equal weights 1/2:
    #   a = .5*1    + .5*(-sqrt1.5) = -0.1123724
    #   b = .5*(-1) + .5*sqrt1.5    = +0.1123724
    #   c = .5*(-1) + .5*0          = -0.5
    #   d = .5*(-1) + .5*(-sqrt1.5) = -1.1123724
    results = {"bm25": ranked([("a", 3.0), ("b", 1.0)]), "vector": ranked([("b", 4.0), ("c", 2.0), ("d", 0.0)])}
    fused = WeightedScoreFusion(normalization="z_score", floor=0).fuse(results)
    r = math.sqrt(1.5)
    assert ids(fused) == ["b", "a", "c", "d"]
    assert scores(fused) == pytest.approx({"a": 0.5 - r / 2, "b": -0.5 + r / 2, "c": -0.5, "d": -0.5 - r / 2})


def test_dbsf_hand_worked():
    # Limits mean -/+ 3 sample std, mapped onto [0, 1]: (s - (mean - 3 std)) / (6 std).
    # bm25 a 3, b 1: mean 2, sample std sqrt(2) -> a 0.5 + 1 / (6 sqrt2), b 0.5 - 1 / (6 sqrt2)
    # vector b 4, c 2, d 0: mean 2, sample std sqrt(8 / 2) = 2 -> b 8/12, c 6/12, d 4/12
    # Equal weights 1/2, absent contributes 0:
    #   a = .5 * (0.5 + 1/(6 sqrt2)) = 0.3089;  b = .5 * (0.5 - 1/(6 sqrt2)) + .5 * 2/3 = 0.5244
    #   c = .5 * 0.5 = 0.25;  d = .5 * 1/3 = 0.1667
    results = {"bm25": ranked([("a", 3.0), ("b", 1.0)]), "vector": ranked([("b", 4.0), ("c", 2.0), ("d", 0.0)])}
    fused = WeightedScoreFusion(normalization="dbsf").fuse(results)
    e = 1 / (6 * math.sqrt(2))
    assert ids(fused) == ["b", "a", "c", "d"]
    assert scores(fused) == pytest.approx({"a": 0.25 + e / 2, "b": 0.25 - e / 2 + 1 / 3, "c": 0.25, "d": 1 / 6})


def test_dbsf_ranks_and_scores_like_qdrants_own_implementation():
    # qdrant-client's local-mode DBSF (qdrant_client.hybrid.fusion) is an independent implementation of
    # the same formula. It sums the normalised scores with weight 1 each; ours is the convex combination
    # with equal weights, i.e. exactly half of it.
    import random

    qdrant_fusion = pytest.importorskip("qdrant_client.hybrid.fusion")
    from qdrant_client.http import models

    rng = random.Random(7)
    for trial in range(20):
        results = {}
        for name, scale in (("bm25", 25.0), ("vector", 1.0)):
            chosen = rng.sample(range(40), rng.randint(2, 30))
            pairs = sorted(((f"d{i}", rng.random() * scale) for i in chosen), key=lambda p: -p[1])
            results[name] = ranked(pairs)
        ours = WeightedScoreFusion(normalization="dbsf", floor=0).fuse(results)  # Qdrant's convention
        theirs = qdrant_fusion.distribution_based_score_fusion(
            [[models.ScoredPoint(id=int(d.id[1:]), version=0, score=d.score) for d in docs]
             for docs in results.values()],
            limit=100,
        )
        assert {d.id: 2 * d.score for d in ours} == pytest.approx({f"d{p.id}": p.score for p in theirs}), trial
        assert ids(ours) == [f"d{p.id}" for p in theirs], trial  # random scores: no ties


def test_none_normalization_uses_raw_scores_and_absent_never_beats_negative_scores():
    # vector (cosine) a 0.5, b -0.5; bm25 c 2.0. Absent contributes min(0, list minimum):
    #   absent from bm25 -> min(0, 2) = 0;  absent from vector -> min(0, -0.5) = -0.5
    #   a = .5*0.5 + .5*0 = .25;  b = .5*(-0.5) + .5*0 = -.25;  c = .5*(-0.5) + .5*2 = .75
    results = {"vector": ranked([("a", 0.5), ("b", -0.5)]), "bm25": ranked([("c", 2.0)])}
    fused = WeightedScoreFusion(normalization="none", floor=0).fuse(results)
    assert ids(fused) == ["c", "a", "b"]
    assert scores(fused) == pytest.approx({"c": 0.75, "a": 0.25, "b": -0.25})


@pytest.mark.parametrize(
    ("normalization", "expected"),
    [
        # one-element lists normalise to 1.0 (min_max), 0 (z_score) or 0.5 (dbsf, as Qdrant);
        # absent contributes 0 in all three.
        ("min_max", {"a": 0.5, "b": 0.5}),
        ("z_score", {"a": 0.0, "b": 0.0}),
        ("dbsf", {"a": 0.25, "b": 0.25}),
        # raw: a = .5*7 + .5*min(0, -3) = 2.0;  b = .5*(-3) + .5*min(0, 7) = -1.5
        ("none", {"a": 2.0, "b": -1.5}),
    ],
)
def test_one_element_lists_stay_finite(normalization, expected):
    fused = WeightedScoreFusion(normalization=normalization, floor=0).fuse({"bm25": [doc("a", 7.0)], "vector": [doc("b", -3.0)]})
    assert scores(fused) == pytest.approx(expected)
    assert all(math.isfinite(d.score) for d in fused)


@pytest.mark.parametrize(
    ("normalization", "value"), [("min_max", 1.0), ("z_score", 0.0), ("dbsf", 0.5), ("none", 0.1)]
)
def test_constant_scores_stay_finite(normalization, value):
    # Every score is 0.1: min_max gives 1.0 to all, z_score 0, dbsf 0.5 to all; order falls back to rank.
    results = {"bm25": ranked([("c", 0.1), ("a", 0.1), ("b", 0.1)])}
    fused = WeightedScoreFusion(normalization=normalization).fuse(results)
    assert ids(fused) == ["c", "a", "b"]
    assert scores(fused) == pytest.approx(dict.fromkeys("abc", value))


@pytest.mark.parametrize("normalization", ["min_max", "z_score", "dbsf", "none"])
def test_missing_scores_count_as_the_list_minimum(normalization):
    # b has no "score" key, d None, e NaN, f inf: each gets the list's minimum normalised value
    # (that of c), so a single-branch fusion keeps them behind a and tied with c, ordered by rank.
    bm25 = [doc("a", 10.0), doc("b"), doc("c", 2.0), doc("d", None), doc("e", math.nan), doc("f", math.inf)]
    fused = WeightedScoreFusion(normalization=normalization, floor=0).fuse({"bm25": bm25})
    assert ids(fused) == ["a", "b", "c", "d", "e", "f"]
    assert all(math.isfinite(d.score) for d in fused)
    # min_max: c -> 0;  z_score: mean 6, std 4 -> c -1;  none: c raw 2.0
    # dbsf: mean 6, sample std sqrt(32) -> c (2 - 6 + 3 sqrt32) / (6 sqrt32) = 0.5 - 4 / (6 sqrt32)
    floor = {"min_max": 0.0, "z_score": -1.0, "dbsf": 0.5 - 4 / (6 * math.sqrt(32)), "none": 2.0}[normalization]
    assert [d.score for d in fused[1:]] == pytest.approx([floor] * 5)
    assert [d.metadata["branches"]["bm25"]["score"] for d in fused] == [10.0, None, 2.0, None, None, None]


def test_list_without_any_score_counts_as_constant():
    # bm25 has no scores: under min_max, a and b each get 1.0 there (as a constant list), absent 0.
    # vector b 0.5, c 0.25 -> b 1.0, c 0.0.
    #   a = .5*1 + 0 = .5;  b = .5*1 + .5*1 = 1.0;  c = 0 + .5*0 = 0
    results = {"bm25": [doc("a"), doc("b")], "vector": ranked([("b", 0.5), ("c", 0.25)])}
    fused = WeightedScoreFusion(floor=0).fuse(results)
    assert ids(fused) == ["b", "a", "c"]
    assert scores(fused) == pytest.approx({"b": 1.0, "a": 0.5, "c": 0.0})


@pytest.mark.parametrize("normalization", ["min_max", "z_score", "dbsf", "none"])
def test_fused_copies_are_independent_read_only_documents(normalization):
    # fusion builds its copies without Document's copy of the metadata (owned_document): they must still be
    # plain Documents whose top-level metadata is read-only and separate from the inputs' (nested values are
    # shared, as Document(...) shares them)
    nested = {"section": ["intro"]}
    bm25 = [Document(id="a", content="x", metadata={"score": 3.0, "tags": nested}), doc("b", 1.0)]
    vector = [doc("b", 0.9), doc("a", 0.1)]
    fused = WeightedScoreFusion(normalization=normalization).fuse({"bm25": bm25, "vector": vector}, k=2)
    assert all(type(d) is Document for d in fused)
    with pytest.raises(TypeError):
        fused[0].metadata["score"] = 0.0  # type: ignore[index]
    assert bm25[0].metadata["score"] == 3.0 and "branches" not in bm25[0].metadata  # inputs untouched
    assert next(d for d in fused if d.id == "a").metadata["tags"] == nested
    again = WeightedScoreFusion(normalization=normalization).fuse({"bm25": bm25, "vector": vector}, k=2)
    assert fused == again


def test_branches_may_be_any_iterable_read_once():
    docs = [doc("a", 2.0), doc("b", 1.0), doc("a", 0.5)]
    from_lists = ReciprocalRankFusion().fuse({"bm25": docs}, k=None)
    from_generators = ReciprocalRankFusion().fuse({"bm25": (d for d in docs)}, k=None)
    assert [d.id for d in from_generators] == [d.id for d in from_lists] == ["a", "b"]


def test_a_document_subclass_keeps_its_type_through_fusion():
    from dataclasses import dataclass

    @dataclass(frozen=True, slots=True)
    class Chunk(Document):
        pass

    fused = ReciprocalRankFusion().fuse({"bm25": [Chunk(id="a", content="x")]}, k=1)
    assert type(fused[0]) is Chunk and fused[0].rank == 0
