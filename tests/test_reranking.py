"""RerankingRetriever (over-fetch, rerank, narrow; provenance of both stages) and EmbedderReranker."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fastrag.errors import ConfigurationError, EmbeddingError, InvalidParameterError, RerankerError
from fastrag.models import Document
from fastrag.protocols import Reranker
from fastrag.rerankers import EmbedderReranker
from fastrag.retrieval import BM25Retriever, HybridRetriever, VectorRetriever
from fastrag.retrieval.reranking import RerankingRetriever
from fastrag.retrieval.result import retrieve_result
from fastrag.testing.fakes import HashingEmbedder, InMemoryStore

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]


class Recorder:
    """A first stage returning fixed documents, recording what it was asked."""

    name = "recorder"

    def __init__(self, docs: list[Document]) -> None:
        self.docs = docs
        self.calls: list[dict[str, Any]] = []

    async def retrieve(self, query: str, *, k: int = 10, filter: Any = None) -> list[Document]:
        self.calls.append({"query": query, "k": k, "filter": filter})
        return self.docs[:k]


class ByLength:
    """A reranker that prefers shorter content (deterministic, and the reverse of the first stage below)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, list[str], int | None]] = []

    async def rerank(self, query: str, documents: Sequence[Document], *, k: int | None = None) -> list[Document]:
        self.seen.append((query, [d.id for d in documents], k))
        order = sorted(documents, key=lambda d: (len(d.content), d.id))[:k]
        return [d.ranked(score=1.0 / len(d.content), rank=r) for r, d in enumerate(order)]


def first_stage(n: int) -> list[Document]:
    # longer content ranks higher in the first stage, so ByLength reverses the order
    return [
        Document(id=f"d{i}", content="x" * (100 - i), metadata={"source_uri": f"/d/{i}", "year": i}).ranked(
            score=50.0 - i, rank=i
        )
        for i in range(n)
    ]


async def test_fetches_candidate_k_reranks_and_returns_k_with_both_stages_provenance() -> None:
    inner, reranker = Recorder(first_stage(60)), ByLength()
    retriever = RerankingRetriever(retriever=inner, reranker=reranker, candidate_k=40)
    out = await retriever.retrieve("question", k=5)
    assert inner.calls == [{"query": "question", "k": 40, "filter": None}]
    assert reranker.seen == [("question", [f"d{i}" for i in range(40)], 5)]
    assert [d.id for d in out] == ["d39", "d38", "d37", "d36", "d35"]
    for rank, doc in enumerate(out):
        i = int(doc.id[1:])
        assert doc.rank == rank and doc.score == pytest.approx(1.0 / (100 - i))
        assert doc.metadata["branches"] == {
            "first_stage": {"score": 50.0 - i, "rank": i},
            "reranker": {"score": doc.score, "rank": rank},
        }
        assert doc.metadata["year"] == i and doc.source_uri == f"/d/{i}"  # metadata kept
    assert inner.docs[39].metadata["rank"] == 39  # inputs not mutated


async def test_k_above_candidate_k_fetches_k() -> None:
    inner = Recorder(first_stage(30))
    out = await RerankingRetriever(retriever=inner, reranker=ByLength(), candidate_k=5).retrieve("q", k=12)
    assert inner.calls[0]["k"] == 12 and len(out) == 12


async def test_filter_reaches_the_first_stage() -> None:
    inner = Recorder(first_stage(3))
    await RerankingRetriever(retriever=inner, reranker=ByLength()).retrieve("q", k=2, filter={"equals": {"key": "year", "value": 1}})
    assert inner.calls[0]["filter"] is not None


async def test_nested_provenance_of_a_fused_first_stage_is_kept() -> None:
    store = InMemoryStore()
    embedder = HashingEmbedder()
    docs = [Document(id=str(i), content=text) for i, text in enumerate(["cats purr", "dogs bark loudly", "cats and dogs"])]
    await store.upsert(docs, embeddings=await embedder.embed_documents([d.content for d in docs]))
    hybrid = HybridRetriever([VectorRetriever(vector_store=store, embedder=embedder), BM25Retriever(store=store)])
    out = await RerankingRetriever(retriever=hybrid, reranker=EmbedderReranker(embedder)).retrieve("cats", k=2)
    assert out
    for doc in out:
        first = doc.metadata["branches"]["first_stage"]
        assert set(first["branches"]) <= {"vector", "bm25"} and first["branches"]
        assert set(doc.branches) == {"first_stage", "reranker"}


async def test_vector_store_and_embedder_form() -> None:
    store, embedder = InMemoryStore(), HashingEmbedder()
    docs = [Document(id="a", content="alpha beta"), Document(id="b", content="gamma delta")]
    await store.upsert(docs, embeddings=await embedder.embed_documents([d.content for d in docs]))
    retriever = RerankingRetriever(vector_store=store, embedder=embedder, reranker=EmbedderReranker(embedder))
    assert isinstance(retriever.retriever, VectorRetriever)
    out = await retriever.retrieve("gamma", k=1)
    assert [d.id for d in out] == ["b"]


async def test_no_candidates_means_no_rerank_call() -> None:
    reranker = ByLength()
    assert await RerankingRetriever(retriever=Recorder([]), reranker=reranker).retrieve("q") == []
    assert reranker.seen == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {},  # no first stage
        {"vector_store": InMemoryStore()},  # half of the pair
        {"retriever": Recorder([]), "embedder": HashingEmbedder()},  # both forms
        {"retriever": object()},
        {"retriever": Recorder([]), "candidate_k": 0},
        {"retriever": Recorder([]), "candidate_k": 10_001},
        {"retriever": Recorder([]), "candidate_k": True},
    ],
)
def test_invalid_construction(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidParameterError):
        RerankingRetriever(reranker=ByLength(), **kwargs)


def test_reranker_must_rerank() -> None:
    with pytest.raises(InvalidParameterError, match="rerank"):
        RerankingRetriever(retriever=Recorder([]), reranker=object())  # type: ignore[arg-type]


@pytest.mark.parametrize(("query", "k"), [("", 5), ("   ", 5), ("q", 0), ("q", -1), ("q", 10_001), ("q", 2.5)])
async def test_invalid_calls_are_refused_before_any_stage_runs(query: str, k: Any) -> None:
    inner, reranker = Recorder(first_stage(3)), ByLength()
    with pytest.raises(InvalidParameterError):
        await RerankingRetriever(retriever=inner, reranker=reranker).retrieve(query, k=k)
    assert inner.calls == [] and reranker.seen == []


async def test_a_reranker_inventing_or_repeating_documents_is_an_error() -> None:
    class Inventing:
        async def rerank(self, query: str, documents: Sequence[Document], *, k: int | None = None) -> list[Document]:
            return [Document(id="ghost", content="boo")]

    class Repeating:
        async def rerank(self, query: str, documents: Sequence[Document], *, k: int | None = None) -> list[Document]:
            return [documents[0], documents[0]]

    with pytest.raises(RerankerError, match="ghost"):
        await RerankingRetriever(retriever=Recorder(first_stage(3)), reranker=Inventing()).retrieve("q")
    with pytest.raises(RerankerError, match="twice"):
        await RerankingRetriever(retriever=Recorder(first_stage(3)), reranker=Repeating()).retrieve("q")


async def test_retrieve_result_reports_both_stages() -> None:
    result = await retrieve_result(RerankingRetriever(retriever=Recorder(first_stage(5)), reranker=ByLength()), "q", k=2)
    assert {"first_stage", "rerank", "total"} <= set(result.timings)
    assert len(result.documents) == 2


# ------------------------------------------------------------------------------------ EmbedderReranker


async def test_embedder_reranker_orders_by_cosine() -> None:
    embedder = HashingEmbedder(dimension=256)
    docs = [
        Document(id="far", content="completely unrelated words here"),
        Document(id="near", content="solar panels convert sunlight"),
        Document(id="nearest", content="solar panels sunlight"),
    ]
    reranker = EmbedderReranker(embedder)
    assert isinstance(reranker, Reranker)
    out = await reranker.rerank("solar panels sunlight", docs)
    assert [d.id for d in out] == ["nearest", "near", "far"]
    q = await embedder.embed_query("solar panels sunlight")
    m = await embedder.embed_documents([d.content for d in docs])
    assert out[0].score == pytest.approx(float(m[2] @ q)) and out[0].score == pytest.approx(1.0)
    assert all(-1.0 <= d.score <= 1.0 for d in out)
    assert [d.id for d in await reranker.rerank("solar panels sunlight", docs, k=1)] == ["nearest"]
    assert docs[0].score is None


async def test_embedder_reranker_reads_the_title() -> None:
    embedder = HashingEmbedder(dimension=256)
    docs = [Document(id="a", content="body text", metadata={"title": "zebra"}), Document(id="b", content="body text")]
    assert (await EmbedderReranker(embedder).rerank("zebra", docs))[0].id == "a"
    without = await EmbedderReranker(embedder, include_title=False).rerank("zebra", docs)
    assert without[0].score == without[1].score  # identical text without the title: a tie, input order kept
    assert [d.id for d in without] == ["a", "b"]


async def test_embedder_reranker_validates_arguments_and_vectors() -> None:
    reranker = EmbedderReranker(HashingEmbedder())
    assert await reranker.rerank("q", []) == []
    with pytest.raises(InvalidParameterError):
        await reranker.rerank("", [Document(id="a", content="x")])
    with pytest.raises(InvalidParameterError):
        await reranker.rerank("q", [Document(id="a", content="x")], k=0)
    with pytest.raises(InvalidParameterError):
        await reranker.rerank("q", ["not a document"])  # type: ignore[list-item]
    with pytest.raises(InvalidParameterError):
        EmbedderReranker(object())  # type: ignore[arg-type]

    class Broken(HashingEmbedder):
        async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
            return np.full((len(texts), self.dimension), np.nan, dtype=np.float32)

    with pytest.raises(EmbeddingError):
        await EmbedderReranker(Broken()).rerank("q", [Document(id="a", content="x")])


async def test_embedder_reranker_does_not_close_the_embedder() -> None:
    class Closing(HashingEmbedder):
        closed = False

        async def aclose(self) -> None:
            self.closed = True

    embedder = Closing()
    async with EmbedderReranker(embedder):
        pass
    assert not embedder.closed


# ------------------------------------------------------------------------------------ packaging


def test_importing_rerankers_and_language_modules_loads_no_sdk() -> None:
    code = textwrap.dedent(
        """
        import sys
        import fastrag.rerankers, fastrag.rerankers.cohere, fastrag.rerankers.cross_encoder
        import fastrag.retrieval.reranking, fastrag.retrieval.language, fastrag.language
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in {"cohere", "torch", "sentence_transformers", "lingua", "transformers"})
        assert not loaded, loaded
        print("ok")
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTRAG_")}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


@pytest.mark.parametrize(
    ("blocked", "code", "extra"),
    [
        ("cohere", "from fastrag.rerankers import CohereReranker; CohereReranker(api_key='k')", "cohere"),
        ("lingua", "from fastrag.language import LinguaLanguageDetector; LinguaLanguageDetector(['en', 'de'])", "language"),
        (
            "sentence_transformers",
            "import tempfile, pathlib; d = pathlib.Path(tempfile.mkdtemp()); (d / 'config.json').write_text('{}');"
            "import anyio; from fastrag.rerankers import CrossEncoderReranker; anyio.run(CrossEncoderReranker(d).load)",
            "cross-encoder",
        ),
    ],
)
def test_a_missing_extra_is_reported_with_the_install_command(blocked: str, code: str, extra: str) -> None:
    prelude = textwrap.dedent(
        f"""
        import importlib.abc, importlib.machinery, sys
        class Refuse(importlib.abc.Loader):  # installed but broken: the import itself fails
            def create_module(self, spec):
                raise ModuleNotFoundError(f"No module named {{spec.name!r}}", name=spec.name)
            def exec_module(self, module):
                raise AssertionError("unreachable")
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == {blocked!r}:
                    return importlib.machinery.ModuleSpec(name, Refuse())
                return None
        sys.meta_path.insert(0, Block())
        from fastrag.errors import ConfigurationError
        try:
        """
    )
    body = textwrap.indent(code, "    ") + "\nexcept ConfigurationError as exc:\n    print(exc)\n"
    result = subprocess.run([sys.executable, "-c", prelude + body], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert f'pip install "fastrag-retrieval[{extra}]"' in result.stdout


# ------------------------------------------------------------------------------------ fastrag eval --rerank


@pytest.fixture
def tiny_beir(tmp_path: Path) -> Path:
    import json

    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    corpus = {
        "solar": "Solar panels convert sunlight into electricity.",
        "wind": "Wind turbines turn moving air into electricity.",
        "bees": "Bees pollinate flowers and make honey.",
    }
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": i, "title": "", "text": t}) + "\n" for i, t in corpus.items()))
    queries = {"q1": "how do solar panels make electricity from sunlight", "q2": "what do bees make"}
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in queries.items()))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tsolar\t1\nq2\tbees\t1\n")
    return folder


def test_fastrag_eval_rerank_embedder(tiny_beir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from click.testing import CliRunner

    from fastrag.cli import main

    monkeypatch.chdir(tmp_path)
    env = {k: "" for k in os.environ if k.startswith("FASTRAG_")}
    result = CliRunner().invoke(main, ["eval", str(tiny_beir), "--mode", "keyword", "--rerank", "embedder", "--json"],
                                env=env, catch_exceptions=False)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"ndcg@10": 1.0, "recall@100": 1.0, "mrr@10": 1.0}
    text = CliRunner().invoke(main, ["eval", str(tiny_beir), "--mode", "keyword", "--rerank", "embedder"], env=env)
    assert "rerank=embedder" in text.output
    missing = CliRunner().invoke(main, ["eval", str(tiny_beir), "--rerank", "cross-encoder"], env=env)
    assert missing.exit_code == 1 and "rerank_model" in missing.output
    bad = CliRunner().invoke(main, ["eval", str(tiny_beir), "--rerank", "cohere"], env=env)
    assert bad.exit_code == 2  # not a choice


async def test_evaluate_beir_reranks_with_the_given_reranker(tiny_beir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fastrag.evaluation import beir_eval

    seen: list[str] = []
    original = beir_eval.open_reranker

    def spy(rerank: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(rerank)
        return original(rerank, *args, **kwargs)

    monkeypatch.setattr(beir_eval, "open_reranker", spy)
    scores = await beir_eval.evaluate_beir(tiny_beir, mode="keyword", store_url=f"sqlite:///{tmp_path}/e.db", rerank="embedder")
    assert seen == ["embedder"] and scores["recall@100"] == 1.0
    with pytest.raises(ConfigurationError, match="unknown rerank"):
        await beir_eval.evaluate_beir(tiny_beir, store_url=f"sqlite:///{tmp_path}/f.db", rerank="magic")
