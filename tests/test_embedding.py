"""Model2VecEmbedder over the model shipped in the package, and the HashingEmbedder fake."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fastrag.errors import EmbeddingError, InvalidParameterError
from fastrag.ingestion import DEFAULT_MODEL, Model2VecEmbedder, l2_normalize
from fastrag.protocols import Embedder
from fastrag.testing.fakes import HashingEmbedder

pytestmark = pytest.mark.anyio

TEXTS = [
    "The cat sat on the mat.",
    "A kitten was sitting on the rug.",
    "Quarterly revenue grew by twelve percent.",
    "Photosynthesis converts light into chemical energy in plants.",
    "",
]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def embedder():
    async with Model2VecEmbedder() as model:
        yield model


def test_default_model_ships_inside_the_package() -> None:
    assert DEFAULT_MODEL.is_dir()
    assert DEFAULT_MODEL.parent.name == "data" and DEFAULT_MODEL.parent.parent.name == "fastrag"
    for name in ("model.safetensors", "tokenizer.json", "config.json", "README.md"):
        assert (DEFAULT_MODEL / name).is_file(), name
    assert "Apache-2.0" in (DEFAULT_MODEL / "README.md").read_text(encoding="utf-8")


async def test_conforms_to_the_embedder_protocol(embedder: Model2VecEmbedder) -> None:
    assert isinstance(embedder, Embedder)
    assert embedder.name == "static-minilm-d256"
    assert embedder.dimension == 256


async def test_documents_are_unit_float32_rows(embedder: Model2VecEmbedder) -> None:
    vectors = await embedder.embed_documents(TEXTS[:4])
    assert vectors.shape == (4, 256)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


async def test_text_without_tokens_is_a_zero_vector_not_nan(embedder: Model2VecEmbedder) -> None:
    vectors = await embedder.embed_documents([""])
    assert vectors.shape == (1, 256)
    assert not np.isnan(vectors).any()
    assert np.all(vectors == 0)


async def test_empty_input_has_shape_zero_by_dim(embedder: Model2VecEmbedder) -> None:
    vectors = await embedder.embed_documents([])
    assert vectors.shape == (0, 256)
    assert vectors.dtype == np.float32


async def test_query_equals_document_embedding(embedder: Model2VecEmbedder) -> None:
    query = await embedder.embed_query(TEXTS[0])
    document = (await embedder.embed_documents([TEXTS[0]]))[0]
    assert query.shape == (256,)
    assert query.dtype == np.float32
    np.testing.assert_allclose(query, document, atol=1e-6)


async def test_similar_texts_are_closer_than_unrelated_ones(embedder: Model2VecEmbedder) -> None:
    cat, kitten, revenue, plants = await embedder.embed_documents(TEXTS[:4])
    assert float(cat @ kitten) > float(cat @ revenue)
    assert float(cat @ kitten) > float(cat @ plants)
    query = await embedder.embed_query("how do plants make energy from sunlight")
    assert float(query @ plants) > max(float(query @ cat), float(query @ revenue))


async def test_batching_gives_the_same_vectors_as_one_call() -> None:
    texts = [f"document number {i} about {topic}" for i in range(23) for topic in ("cats", "taxes")]
    async with Model2VecEmbedder(batch_size=5) as small, Model2VecEmbedder(batch_size=1000) as large:
        np.testing.assert_allclose(
            await small.embed_documents(texts), await large.embed_documents(texts), atol=1e-6
        )


async def test_concurrent_first_use_loads_once() -> None:
    import anyio

    model = Model2VecEmbedder()
    results: list[np.ndarray] = []

    async def embed() -> None:
        results.append(await model.embed_query("hello"))

    async with anyio.create_task_group() as group:
        for _ in range(4):
            group.start_soon(embed)
    assert len(results) == 4
    first_model = model._model
    await model.load()
    assert model._model is first_model
    await model.aclose()


async def test_missing_model_folder_raises_embedding_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    model = Model2VecEmbedder(missing)
    assert model.name == "no-such-model"
    with pytest.raises(EmbeddingError, match="no-such-model"):
        await model.embed_query("hello")


async def test_path_like_string_is_never_looked_up_on_the_hub(tmp_path: Path) -> None:
    missing = str(tmp_path / "nested" / "model")
    with pytest.raises(EmbeddingError, match="does not exist"):
        async with Model2VecEmbedder(missing):
            pass


async def test_folder_that_is_not_a_model_raises_embedding_error(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("not a model")
    with pytest.raises(EmbeddingError, match=str(tmp_path.name)):
        await Model2VecEmbedder(tmp_path).load()


async def test_aclose_is_idempotent_and_closed_embedder_refuses_work() -> None:
    model = Model2VecEmbedder()
    async with model:
        await model.embed_query("warm up")
    await model.aclose()
    with pytest.raises(EmbeddingError, match="closed"):
        await model.embed_documents(["after close"])


def test_invalid_batch_size() -> None:
    with pytest.raises(InvalidParameterError):
        Model2VecEmbedder(batch_size=0)


async def test_single_string_is_rejected(embedder: Model2VecEmbedder) -> None:
    with pytest.raises(InvalidParameterError):
        await embedder.embed_documents("not a list")  # type: ignore[arg-type]


def test_l2_normalize_keeps_zero_rows() -> None:
    out = l2_normalize(np.array([[3.0, 4.0], [0.0, 0.0]], dtype=np.float64))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, 0.0]])


# ------------------------------------------------------------------------------------ HashingEmbedder


async def test_hashing_embedder_is_deterministic_and_normalised() -> None:
    async with HashingEmbedder() as fake:
        assert isinstance(fake, Embedder)
        assert fake.name == "hashing-64" and fake.dimension == 64
        vectors = await fake.embed_documents(["red apples and green pears", "red apples", "", "tax law"])
        assert vectors.shape == (4, 64) and vectors.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(vectors[[0, 1, 3]], axis=1), 1.0, atol=1e-6)
        assert np.all(vectors[2] == 0)
        again = await HashingEmbedder().embed_documents(["red apples and green pears"])
        np.testing.assert_array_equal(vectors[0], again[0])
        query = await fake.embed_query("apples")
        assert float(query @ vectors[1]) > float(query @ vectors[3])


# ------------------------------------------------------------------------------- the shared contract

from fastrag.testing.embedder_contract import EmbedderContract, ModelCalls


class TestModel2VecContract(EmbedderContract):
    """Model2VecEmbedder passes the contract every embedder passes (fastrag.testing.embedder_contract)."""

    @pytest.fixture
    def calls(self, monkeypatch: pytest.MonkeyPatch) -> ModelCalls:
        holder: dict[str, ModelCalls] = {}
        original = Model2VecEmbedder._load_sync

        def load_and_wrap(self: Model2VecEmbedder) -> None:
            original(self)
            if "calls" in holder and not getattr(self._model, "_wrapped", False):
                ModelCalls.wrap(self._model, "encode", where=self.name, calls=holder["calls"])
                self._model._wrapped = True

        holder["calls"] = ModelCalls(where=DEFAULT_MODEL.name)
        monkeypatch.setattr(Model2VecEmbedder, "_load_sync", load_and_wrap)
        return holder["calls"]

    @pytest.fixture
    def make_embedder(self):
        return lambda **options: Model2VecEmbedder(**options)
