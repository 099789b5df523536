"""CrossEncoderReranker over a real sentence-transformers CrossEncoder: a tiny, randomly initialised BERT
built and saved in a temporary folder by the fixture (no PyPI package ships cross-encoder weights, and
nothing may be downloaded)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fastrag.errors import ConfigurationError, InvalidParameterError, RerankerError
from fastrag.models import Document
from fastrag.protocols import Reranker
from fastrag.rerankers import CrossEncoderReranker
from fastrag.retrieval.reranking import RerankingRetriever

pytestmark = pytest.mark.anyio

WORDS = "the a of cat cats dog dogs sat on mat solar panels sunlight energy bm25 ranks documents rain".split()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reason = "the cross-encoder extra is not installed: pip install torch==2.13.0 'fastrag-retrieval[cross-encoder]'"
    torch = pytest.importorskip("torch", reason=reason)
    pytest.importorskip("sentence_transformers", reason=reason)
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-cross-encoder")
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"))
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(WORDS) + 5, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=64, num_labels=1, initializer_range=0.5,
    )  # fmt: skip
    BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def candidates() -> list[Document]:
    texts = ["the cat sat on the mat", "solar panels sunlight energy", "dogs sat", "bm25 ranks documents", "rain of cats on dogs"]
    return [Document(id=f"d{i}", content=t, metadata={"source_uri": f"/{i}"}) for i, t in enumerate(texts)]


async def test_scores_are_the_models_and_order_follows_them(model_dir: Path) -> None:
    from sentence_transformers import CrossEncoder

    docs = candidates()
    direct = CrossEncoder(str(model_dir), device="cpu", local_files_only=True).predict(
        [("solar energy", d.content) for d in docs]
    )
    assert len(set(direct.round(6).tolist())) == len(docs)  # distinct: the order below is meaningful
    async with CrossEncoderReranker(model_dir) as reranker:
        assert isinstance(reranker, Reranker)
        out = await reranker.rerank("solar energy", docs)
        top2 = await reranker.rerank("solar energy", docs, k=2)
    expected = sorted(range(len(docs)), key=lambda i: -direct[i])
    assert [d.id for d in out] == [docs[i].id for i in expected]
    assert [d.score for d in out] == pytest.approx([float(direct[i]) for i in expected], abs=1e-5)
    assert all(0.0 <= d.score <= 1.0 for d in out)  # one label, sigmoid
    assert [d.id for d in top2] == [d.id for d in out[:2]]
    assert docs[0].score is None


async def test_in_a_reranking_retriever(model_dir: Path) -> None:
    docs = [d.ranked(score=1.0 - i / 10, rank=i) for i, d in enumerate(candidates())]

    class Fixed:
        async def retrieve(self, query: str, *, k: int = 10, filter: object = None) -> list[Document]:
            return docs[:k]

    async with CrossEncoderReranker(model_dir) as reranker:
        out = await RerankingRetriever(retriever=Fixed(), reranker=reranker, candidate_k=5).retrieve("cats", k=3)
    assert len(out) == 3 and {"first_stage", "reranker"} == set(out[0].branches)


async def test_nothing_is_loaded_for_no_candidates(model_dir: Path) -> None:
    reranker = CrossEncoderReranker(model_dir)
    assert await reranker.rerank("q", []) == []
    assert reranker._model is None


def test_a_hub_id_or_missing_folder_is_refused_without_any_download(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="never downloads"):
        CrossEncoderReranker("cross-encoder/ms-marco-MiniLM-L6-v2")
    with pytest.raises(ConfigurationError, match="config.json"):
        CrossEncoderReranker(tmp_path)
    with pytest.raises(InvalidParameterError):
        CrossEncoderReranker(tmp_path, batch_size=0)


async def test_a_folder_that_is_not_a_model_and_a_closed_reranker_raise_reranker_error(
    tmp_path: Path, model_dir: Path
) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "nothing-known"}))
    with pytest.raises(RerankerError, match="cannot load"):
        await CrossEncoderReranker(tmp_path).rerank("q", candidates())
    reranker = CrossEncoderReranker(model_dir)
    await reranker.aclose()
    await reranker.aclose()
    with pytest.raises(RerankerError, match="closed"):
        await reranker.rerank("q", candidates())
