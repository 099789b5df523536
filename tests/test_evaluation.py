"""fastrag.evaluation: trec_eval metrics on hand-worked rankings, the BEIR loader, and the concurrent runner."""

from __future__ import annotations

import json
import math
from pathlib import Path

import anyio
import pytest

from fastrag.errors import IngestionError, InvalidParameterError
from fastrag.evaluation import (
    BeirDataset,
    evaluate,
    iter_corpus,
    load_beir,
    mrr_at_k,
    ndcg_at_k,
    recall_at_k,
    run_retrieval,
)
from fastrag.models import Document

DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"


# --------------------------------------------------------------------------------------------------
# Metrics: every expected value is worked by hand in the comments (log2(3) ≈ 1.5850, 1/log2(3) ≈ 0.6309)
# --------------------------------------------------------------------------------------------------


def test_ndcg_binary_relevant_at_ranks_1_and_3() -> None:
    qrels = {"a": 1, "b": 1}
    ranking = ["a", "x", "b", "y"]
    # DCG  = 1/log2(2) + 0 + 1/log2(4) = 1 + 0.5                = 1.5
    # IDCG = 1/log2(2) + 1/log2(3)     = 1 + 0.6309             ≈ 1.6309
    # nDCG = 1.5 / 1.6309                                       ≈ 0.9197
    assert ndcg_at_k(ranking, qrels, k=10) == pytest.approx(1.5 / (1 + 1 / math.log2(3)))
    assert ndcg_at_k(ranking, qrels, k=10) == pytest.approx(0.9197, abs=1e-4)
    # both relevant found within 10 of 2 relevant
    assert recall_at_k(ranking, qrels, k=10) == 1.0
    assert mrr_at_k(ranking, qrels, k=10) == 1.0


def test_ndcg_graded_relevance_uses_the_grade_as_gain() -> None:
    qrels = {"a": 2, "b": 1, "c": 0}
    ranking = ["c", "b", "a"]
    # DCG  = 0/log2(2) + 1/log2(3) + 2/log2(4) = 0 + 0.6309 + 1.0 = 1.6309
    # IDCG = 2/log2(2) + 1/log2(3)             = 2 + 0.6309       = 2.6309   (c, judged 0, adds nothing)
    # nDCG = 1.6309 / 2.6309                                      ≈ 0.6199
    expected = (1 / math.log2(3) + 1) / (2 + 1 / math.log2(3))
    assert ndcg_at_k(ranking, qrels, k=10) == pytest.approx(expected)
    assert ndcg_at_k(ranking, qrels, k=10) == pytest.approx(0.6199, abs=1e-4)
    # the ideal order scores exactly 1
    assert ndcg_at_k(["a", "b", "c"], qrels, k=10) == pytest.approx(1.0)
    # first relevant (b) at rank 2 -> 1/2
    assert mrr_at_k(ranking, qrels, k=10) == 0.5


def test_relevance_zero_or_negative_counts_as_non_relevant() -> None:
    qrels = {"bad": -1, "zero": 0, "good": 1}
    ranking = ["bad", "zero", "good"]
    # DCG = 1/log2(4) = 0.5 ; IDCG = 1/log2(2) = 1 ; nDCG = 0.5
    assert ndcg_at_k(ranking, qrels, k=10) == pytest.approx(0.5)
    # 1 relevant judged doc (good), found -> 1/1
    assert recall_at_k(ranking, qrels, k=10) == 1.0
    # first relevant at rank 3 -> 1/3
    assert mrr_at_k(ranking, qrels, k=10) == pytest.approx(1 / 3)


def test_no_relevant_document_retrieved_scores_zero() -> None:
    qrels = {"a": 1, "b": 2}
    ranking = ["x", "y", "z"]
    assert ndcg_at_k(ranking, qrels, k=10) == 0.0
    assert recall_at_k(ranking, qrels, k=10) == 0.0
    assert mrr_at_k(ranking, qrels, k=10) == 0.0
    # an empty ranking too
    assert ndcg_at_k([], qrels, k=10) == recall_at_k([], qrels, k=10) == mrr_at_k([], qrels, k=10) == 0.0


def test_query_without_relevant_judgements_scores_zero() -> None:
    # IDCG = 0 and the recall denominator is 0: trec_eval reports 0, not an error
    for qrels in ({}, {"a": 0}):
        assert ndcg_at_k(["a"], qrels, k=10) == 0.0
        assert recall_at_k(["a"], qrels, k=10) == 0.0
        assert mrr_at_k(["a"], qrels, k=10) == 0.0


def test_k_cutoff_is_honoured() -> None:
    qrels = {"a": 1}
    ranking = ["x", "y", "a"]
    # a sits at rank 3: invisible at k=2
    assert ndcg_at_k(ranking, qrels, k=2) == 0.0
    assert recall_at_k(ranking, qrels, k=2) == 0.0
    assert mrr_at_k(ranking, qrels, k=2) == 0.0
    # at k=3: DCG = 1/log2(4) = 0.5, IDCG = 1 -> 0.5; recall 1/1; RR = 1/3
    assert ndcg_at_k(ranking, qrels, k=3) == pytest.approx(0.5)
    assert recall_at_k(ranking, qrels, k=3) == 1.0
    assert mrr_at_k(ranking, qrels, k=3) == pytest.approx(1 / 3)


def test_ideal_dcg_is_cut_at_k_too() -> None:
    qrels = {"a": 1, "b": 1, "c": 1}
    # k=1: DCG = 1, IDCG@1 = 1 (only one ideal slot) -> nDCG@1 = 1.0, although 2 relevant are missing
    assert ndcg_at_k(["a"], qrels, k=1) == 1.0
    # recall's denominator is not capped at k: 1 of 3 relevant
    assert recall_at_k(["a"], qrels, k=1) == pytest.approx(1 / 3)
    # k=5, ranking [a, x, b, y, z]: found a and b of 3 -> 2/3
    # DCG = 1 + 1/log2(4) = 1.5 ; IDCG = 1 + 1/log2(3) + 1/log2(4) = 2.1309 ; nDCG ≈ 0.7039
    ranking = ["a", "x", "b", "y", "z"]
    assert recall_at_k(ranking, qrels, k=5) == pytest.approx(2 / 3)
    assert ndcg_at_k(ranking, qrels, k=5) == pytest.approx(1.5 / (1 + 1 / math.log2(3) + 0.5))
    assert ndcg_at_k(ranking, qrels, k=5) == pytest.approx(0.7039, abs=1e-4)


def test_mrr_is_reciprocal_of_first_relevant_rank() -> None:
    # first relevant at rank 4 -> 1/4; the second relevant at rank 5 does not matter
    assert mrr_at_k(["w", "x", "y", "a", "b"], {"a": 1, "b": 3}, k=10) == 0.25


@pytest.mark.parametrize("metric", [ndcg_at_k, recall_at_k, mrr_at_k])
def test_metrics_reject_bad_k_and_duplicate_ids(metric) -> None:
    for bad_k in (0, -1, 1.5, True):
        with pytest.raises(InvalidParameterError):
            metric(["a"], {"a": 1}, k=bad_k)
    # trec_eval refuses a ranking that lists a document twice; counting it twice would inflate the score
    with pytest.raises(InvalidParameterError, match="'a'"):
        metric(["a", "b", "a"], {"a": 1}, k=10)


def test_evaluate_means_over_qrels_and_missing_queries_count_as_zero() -> None:
    qrels = {
        "q1": {"a": 1, "b": 1},  # ranked [a, x, b]: nDCG@10 ≈ 0.9197 (worked above), recall 1, RR 1
        "q2": {"c": 1},  # ranked [x, c]: nDCG = 1/log2(3) ≈ 0.6309, recall 1, RR 1/2
        "q3": {"d": 1},  # absent from the run: 0 everywhere
    }
    run = {
        "q1": ["a", "x", "b"],
        "q2": ["x", "c"],
        "not-judged": ["a"],  # not in qrels: ignored (trec_eval evaluates judged queries only)
    }
    scores = evaluate(run, qrels, ks=(1, 10))
    assert list(scores) == ["ndcg@1", "ndcg@10", "recall@1", "recall@10", "mrr@1", "mrr@10"]
    ndcg_q1 = 1.5 / (1 + 1 / math.log2(3))
    # nDCG@10 = (0.9197 + 0.6309 + 0) / 3 ≈ 0.5169
    assert scores["ndcg@10"] == pytest.approx((ndcg_q1 + 1 / math.log2(3)) / 3)
    assert scores["ndcg@10"] == pytest.approx(0.5169, abs=1e-4)
    # nDCG@1: q1 -> 1 (a at rank 1, IDCG@1 = 1); q2 -> 0; q3 -> 0 ; mean 1/3
    assert scores["ndcg@1"] == pytest.approx(1 / 3)
    # Recall@1: q1 1/2, q2 0, q3 0 -> 1/6 ; Recall@10: (1 + 1 + 0) / 3 = 2/3
    assert scores["recall@1"] == pytest.approx(1 / 6)
    assert scores["recall@10"] == pytest.approx(2 / 3)
    # MRR@1: (1 + 0 + 0) / 3 ; MRR@10: (1 + 1/2 + 0) / 3 = 0.5
    assert scores["mrr@1"] == pytest.approx(1 / 3)
    assert scores["mrr@10"] == pytest.approx(0.5)


def test_evaluate_default_cutoffs_and_perfect_run() -> None:
    qrels = {"q1": {"a": 2, "b": 1}, "q2": {"c": 1}}
    run = {"q1": ["a", "b"], "q2": ["c"]}
    scores = evaluate(run, qrels)
    assert set(scores) == {"ndcg@10", "ndcg@100", "recall@10", "recall@100", "mrr@10", "mrr@100"}
    assert all(value == pytest.approx(1.0) for value in scores.values())


def test_evaluate_rejects_bad_arguments() -> None:
    qrels = {"q1": {"a": 1}}
    with pytest.raises(InvalidParameterError):
        evaluate({}, {})
    with pytest.raises(InvalidParameterError):
        evaluate({}, qrels, ks=())
    with pytest.raises(InvalidParameterError):
        evaluate({}, qrels, ks=(10, 0))
    with pytest.raises(InvalidParameterError):
        evaluate({}, qrels, ks=(10, 10))
    with pytest.raises(InvalidParameterError, match="q1"):
        evaluate({"q1": ["a", "a"]}, qrels)


# --------------------------------------------------------------------------------------------------
# BEIR loader
# --------------------------------------------------------------------------------------------------


def _write_beir(
    root: Path,
    *,
    corpus: list[dict] | None = None,
    queries: list[dict] | None = None,
    qrels: dict[str, str] | None = None,
) -> Path:
    corpus = corpus if corpus is not None else [
        {"_id": "d1", "title": "Cats", "text": "Cats purr."},
        {"_id": "d2", "title": "", "text": "Dogs bark."},
        {"_id": "d3", "text": "Fish swim."},
    ]
    queries = queries if queries is not None else [
        {"_id": "q1", "text": "what purrs"},
        {"_id": "q2", "text": "what barks"},
        {"_id": "q3", "text": "unjudged in test"},
    ]
    qrels = qrels if qrels is not None else {
        "test": "query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td3\t0\nq2\td2\t1\n",
        "train": "query-id\tcorpus-id\tscore\nq3\td3\t1\n",
    }
    root.mkdir(parents=True, exist_ok=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus), encoding="utf-8")
    (root / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in queries), encoding="utf-8")
    (root / "qrels").mkdir(exist_ok=True)
    for split, text in qrels.items():
        (root / "qrels" / f"{split}.tsv").write_text(text, encoding="utf-8")
    return root


def test_load_beir_tiny_folder(tmp_path: Path) -> None:
    root = _write_beir(tmp_path / "tiny")
    dataset = load_beir(root)
    assert isinstance(dataset, BeirDataset)
    assert dataset.name == "tiny"
    assert list(dataset.corpus) == ["d1", "d2", "d3"]
    d1 = dataset.corpus["d1"]
    assert d1 == Document(id="d1", content="Cats purr.", metadata={"title": "Cats", "source_uri": "beir://tiny/d1"})
    # empty or absent title: no title key at all
    assert dict(dataset.corpus["d2"].metadata) == {"source_uri": "beir://tiny/d2"}
    assert dict(dataset.corpus["d3"].metadata) == {"source_uri": "beir://tiny/d3"}
    # only queries judged in the split; q3 is judged in train only
    assert dataset.queries == {"q1": "what purrs", "q2": "what barks"}
    # graded scores kept as written, including a judged-non-relevant 0
    assert dataset.qrels == {"q1": {"d1": 2, "d3": 0}, "q2": {"d2": 1}}

    train = load_beir(str(root), split="train")
    assert train.queries == {"q3": "unjudged in test"}
    assert train.qrels == {"q3": {"d3": 1}}


def test_load_beir_malformed_corpus_line_names_the_line(tmp_path: Path) -> None:
    root = _write_beir(tmp_path / "bad")
    lines = (root / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    lines.insert(2, '{"_id": "d9", "text": ')  # line 3 is truncated JSON
    (root / "corpus.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(IngestionError, match=r"corpus\.jsonl:3: invalid JSON"):
        load_beir(root)


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"title": "no id", "text": "x"}, r"corpus\.jsonl:2: '_id'"),
        ({"_id": "d9", "title": "no text"}, r"corpus\.jsonl:2: 'text'"),
        ({"_id": "d1", "text": "duplicate"}, r"corpus\.jsonl:2: duplicate _id 'd1' \(first seen on line 1\)"),
    ],
)
def test_load_beir_rejects_bad_corpus_records(tmp_path: Path, record: dict, message: str) -> None:
    root = _write_beir(tmp_path / "bad", corpus=[{"_id": "d1", "text": "ok"}, record])
    with pytest.raises(IngestionError, match=message):
        load_beir(root)


def test_load_beir_malformed_qrels_line_names_the_line(tmp_path: Path) -> None:
    root = _write_beir(tmp_path / "bad", qrels={"test": "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\thigh\n"})
    with pytest.raises(IngestionError, match=r"test\.tsv:3: score must be an integer"):
        load_beir(root)
    root = _write_beir(tmp_path / "bad2", qrels={"test": "query-id\tcorpus-id\tscore\nq1 d1 1\n"})
    with pytest.raises(IngestionError, match=r"test\.tsv:2: expected 3 tab-separated fields"):
        load_beir(root)


def test_load_beir_missing_files(tmp_path: Path) -> None:
    with pytest.raises(IngestionError, match="not found"):
        load_beir(tmp_path / "nowhere")
    root = _write_beir(tmp_path / "tiny")
    with pytest.raises(IngestionError, match=r"dev\.tsv.*splits present: test, train"):
        load_beir(root, split="dev")
    (root / "corpus.jsonl").unlink()
    with pytest.raises(IngestionError, match=r"corpus\.jsonl"):
        load_beir(root)


def test_load_beir_judged_query_missing_from_queries_file(tmp_path: Path) -> None:
    root = _write_beir(tmp_path / "tiny", queries=[{"_id": "q1", "text": "what purrs"}])
    with pytest.raises(IngestionError, match="'q2'"):
        load_beir(root)


def test_iter_corpus_streams_documents_from_file_or_folder(tmp_path: Path) -> None:
    root = _write_beir(tmp_path / "tiny")
    from_folder = list(iter_corpus(root))
    from_file = list(iter_corpus(root / "corpus.jsonl"))
    assert from_folder == from_file == list(load_beir(root).corpus.values())
    # streaming: documents before a bad line are yielded before the error
    with (root / "corpus.jsonl").open("a", encoding="utf-8") as handle:
        handle.write("\nnot json\n")
    stream = iter_corpus(root)
    assert [next(stream).id for _ in range(3)] == ["d1", "d2", "d3"]
    with pytest.raises(IngestionError, match=r"corpus\.jsonl:5"):
        next(stream)


@pytest.mark.skipif(not (DATASETS / "scifact").is_dir(), reason=f"BEIR SciFact not present at {DATASETS}")
def test_load_beir_scifact() -> None:
    dataset = load_beir(DATASETS / "scifact", split="test")
    assert len(dataset.corpus) == 5183
    assert len(dataset.queries) == 300
    assert set(dataset.qrels) == set(dataset.queries)
    doc = next(iter(dataset.corpus.values()))
    assert doc.source_uri == f"beir://scifact/{doc.id}"
    assert doc.metadata["title"]


# --------------------------------------------------------------------------------------------------
# Runner
# --------------------------------------------------------------------------------------------------


class _FakeRetriever:
    """Answers query "qN" with documents named after it; tracks how many calls are in flight at once."""

    def __init__(self, *, fail_on: str | None = None) -> None:
        self.fail_on = fail_on
        self.in_flight = 0
        self.max_in_flight = 0
        self.ks: list[int] = []

    async def retrieve(self, query: str, *, k: int = 10, filter=None) -> list[Document]:
        self.ks.append(k)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            for _ in range(3):
                await anyio.sleep(0)
            if query == self.fail_on:
                raise RuntimeError(f"backend down for {query}")
            return [Document(id=f"{query}-doc{i}", content="") for i in range(3)][:k]
        finally:
            self.in_flight -= 1


@pytest.mark.anyio
async def test_run_retrieval_returns_ranked_ids_per_query_with_bounded_concurrency() -> None:
    queries = {f"q{i}": f"text{i}" for i in range(20)}
    retriever = _FakeRetriever()
    run = await run_retrieval(retriever, queries, k=2, concurrency=3)
    assert list(run) == list(queries)
    assert run["q7"] == ["text7-doc0", "text7-doc1"]
    assert retriever.ks == [2] * 20
    assert retriever.max_in_flight == 3


@pytest.mark.anyio
async def test_run_retrieval_feeds_evaluate() -> None:
    retriever = _FakeRetriever()
    run = await run_retrieval(retriever, {"q1": "a", "q2": "b"}, k=10)
    scores = evaluate(run, {"q1": {"a-doc1": 1}, "q2": {"b-doc0": 1}}, ks=(10,))
    # q1: relevant at rank 2 -> RR 1/2 ; q2: rank 1 -> RR 1 ; MRR = 0.75
    assert scores["mrr@10"] == pytest.approx(0.75)


@pytest.mark.anyio
async def test_run_retrieval_propagates_a_query_failure() -> None:
    queries = {f"q{i}": f"text{i}" for i in range(10)}
    with pytest.raises(RuntimeError, match="backend down for text4") as info:
        await run_retrieval(_FakeRetriever(fail_on="text4"), queries, concurrency=4)
    assert any("'q4'" in note for note in getattr(info.value, "__notes__", []))


@pytest.mark.anyio
async def test_run_retrieval_rejects_bad_parameters() -> None:
    with pytest.raises(InvalidParameterError):
        await run_retrieval(_FakeRetriever(), {"q": "x"}, k=0)
    with pytest.raises(InvalidParameterError):
        await run_retrieval(_FakeRetriever(), {"q": "x"}, concurrency=0)
