"""A dense branch whose embedder does not cover the questions' language is not run by the default hybrid
(issue 14: with the shipped English static model, default hybrid fell below its own BM25 branch in
languages the model does not know): BM25 ranks alone, the result names the skipped branch, and a warning
says why. Every other configuration runs both branches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fastrag.analysis import Analyzer
from fastrag.cli import main
from fastrag.models import Document
from fastrag.retrieval import BM25Retriever, HybridRetriever, VectorRetriever, WeightedScoreFusion
from fastrag.retrieval.hybrid import embedder_languages
from fastrag.retrieval.result import retrieve_result
from fastrag.testing.fakes import HashingEmbedder
from fastrag.vector_store.sqlite import SQLiteVectorStore

pytestmark = pytest.mark.anyio

DOCS = [
    Document(id="a", content="पैंथर्स की रक्षा पंक्ति ने केवल 308 अंक दिए", metadata={"language": "hi"}),
    Document(id="b", content="पैंथर्स की रक्षा", metadata={"language": "hi"}),
    Document(id="c", content="रक्षा पंक्ति", metadata={"language": "hi"}),
    Document(id="d", content="केवल अंक", metadata={"language": "hi"}),
]


class CountingEmbedder(HashingEmbedder):
    """A hashing embedder that counts the questions it embeds, under the name it is given."""

    def __init__(self, name: str = "static-minilm-d256", languages: object = None) -> None:
        super().__init__(dimension=16)
        self._name = name
        if languages is not None:
            self.languages = languages
        self.queries = 0

    @property
    def name(self) -> str:
        return self._name

    async def embed_query(self, text: str):
        self.queries += 1
        return await super().embed_query(text)


@pytest.fixture
async def store():
    async with SQLiteVectorStore(":memory:") as store:
        await store.upsert(DOCS, embeddings=await HashingEmbedder(dimension=16).embed_documents([d.content for d in DOCS]))
        yield store


def hybrid(store, embedder, **bm25) -> HybridRetriever:
    return HybridRetriever([VectorRetriever(vector_store=store, embedder=embedder), BM25Retriever(store=store, **bm25)])


async def test_an_uncovered_language_ranks_by_bm25_alone_and_says_so(store) -> None:
    embedder = CountingEmbedder()
    with pytest.warns(UserWarning, match=r"'vector' is not run: .*covers en; .* in 'hi'"):
        retriever = hybrid(store, embedder, language="hi")
    assert set(retriever.skipped_branches) == {"vector"}
    result = await retrieve_result(retriever, "पैंथर्स की रक्षा पंक्ति", k=4)
    bm25 = await BM25Retriever(store=store, language="hi").retrieve("पैंथर्स की रक्षा पंक्ति", k=4)
    assert [d.id for d in result.documents] == [d.id for d in bm25]
    assert all(set(d.branches) == {"bm25"} for d in result.documents)
    assert result.documents[0].score == 1.0  # fused over the branch that ran (min-max), not BM25's 0.9 share
    assert set(result.skipped_branches) == {"vector"} and not result.partial
    assert embedder.queries == 0  # not run at all


async def test_a_store_analysed_in_another_language_does_not_decide() -> None:
    """Without a fixed question language the store analyses a question in each language it holds: a store
    built in Russian may hold English documents too (a fresh user's finding), so both branches run."""
    async with SQLiteVectorStore(":memory:", analyzer=Analyzer("ru")) as ru_store:
        embedder = CountingEmbedder()
        await ru_store.upsert([Document(id="en", content="The Panthers defense", metadata={"language": "en"})],
                              embeddings=await embedder.embed_documents(["The Panthers defense"]))
        retriever = hybrid(ru_store, embedder)
        assert not retriever.skipped_branches
        result = await retrieve_result(retriever, "Panthers defense", k=1)
        assert not result.skipped_branches and [d.id for d in result.documents] == ["en"]


@pytest.mark.parametrize(
    ("embedder", "bm25", "kwargs"),
    [
        (CountingEmbedder(), {"language": "en"}, {}),  # covered
        (CountingEmbedder(), {}, {}),  # the store analyses in English
        (CountingEmbedder(name="someone/multilingual-model"), {"language": "hi"}, {}),  # languages unknown
        (CountingEmbedder(languages={"hi", "en"}), {"language": "hi"}, {}),  # declared
        (CountingEmbedder(languages=frozenset({"hi-IN"})), {"language": "hi"}, {}),  # a tag's primary subtag
        (CountingEmbedder(), {"language": "hi"}, {"skip_uncovered": False}),
        (CountingEmbedder(), {"language": "hi"}, {"fusion": WeightedScoreFusion({"bm25": 0.5, "vector": 0.5})}),
    ],
)
async def test_every_other_configuration_runs_both_branches(store, embedder, bm25, kwargs) -> None:
    retriever = HybridRetriever(
        [VectorRetriever(vector_store=store, embedder=embedder), BM25Retriever(store=store, **bm25)], **kwargs
    )
    assert not retriever.skipped_branches
    result = await retrieve_result(retriever, "पैंथर्स की रक्षा", k=4)
    assert embedder.queries == 1 and not result.skipped_branches


class ScriptDetector:
    """Devanagari -> "hi", anything else -> "en"; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def detect(self, text: str) -> str | None:
        self.calls += 1
        return "hi" if any("\u0900" <= ch <= "\u097f" for ch in text) else "en"


async def test_a_detected_uncovered_language_skips_the_dense_branch_for_that_question(store) -> None:
    embedder, detector = CountingEmbedder(), ScriptDetector()
    retriever = hybrid(store, embedder, detector=detector)
    assert not retriever.skipped_branches  # decided per question
    hindi = await retrieve_result(retriever, "पैंथर्स की रक्षा पंक्ति", k=4)
    assert set(hindi.skipped_branches) == {"vector"} and "detected as 'hi'" in hindi.skipped_branches["vector"]
    assert embedder.queries == 0 and detector.calls == 1  # detected once: the BM25 branch is told the result
    bm25 = await BM25Retriever(store=store, language="hi").retrieve("पैंथर्स की रक्षा पंक्ति", k=4)
    assert [d.id for d in hindi.documents] == [d.id for d in bm25]
    english = await retrieve_result(retriever, "Panthers defense", k=4)
    assert not english.skipped_branches and embedder.queries == 1 and detector.calls == 2
    assert retriever.retrievers["bm25"].detector is detector  # the branch itself is untouched


def test_embedder_languages() -> None:
    assert embedder_languages(CountingEmbedder()) == frozenset({"en"})
    assert embedder_languages(CountingEmbedder("static-minilm-d64")) == frozenset({"en"})
    assert embedder_languages(CountingEmbedder("other")) is None
    assert embedder_languages(CountingEmbedder("other", languages={"pt-BR", "de"})) == frozenset({"pt", "de"})
    assert embedder_languages(CountingEmbedder("other", languages="en")) is None  # not a set: not a declaration


def test_cli_eval_hybrid_in_an_uncovered_language_equals_keyword(tmp_path: Path) -> None:
    folder = tmp_path / "beir-hi"
    (folder / "qrels").mkdir(parents=True)
    rows = [{"_id": d.id, "title": "", "text": d.content} for d in DOCS]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    queries = [{"_id": "q1", "text": "रक्षा पंक्ति"}, {"_id": "q2", "text": "केवल अंक"}]
    (folder / "queries.jsonl").write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in queries),
                                          encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tc\t1\nq2\td\t1\n")
    runner = CliRunner()
    scores = {}
    for mode in ("keyword", "hybrid"):
        result = runner.invoke(main, ["eval", str(folder), "--mode", mode, "--json", "--language", "hi"])
        assert result.exit_code == 0, result.output
        scores[mode] = json.loads(result.stdout)
        assert ("hybrid branch 'vector' is not run" in result.stderr) is (mode == "hybrid")
    assert scores["hybrid"] == scores["keyword"]
