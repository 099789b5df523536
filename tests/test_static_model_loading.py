"""The shipped static model loads without model2vec's hub code and gives model2vec's vectors bit for bit; model
folders it does not reproduce fall back to model2vec; the command line imports nothing heavy it does not use."""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from fastrag.errors import EmbeddingError
from fastrag.ingestion import DEFAULT_MODEL, Model2VecEmbedder, l2_normalize

model2vec = pytest.importorskip("model2vec")

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]
EMBEDDING_LOGGER = "fastrag.ingestion.steps.embedding"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


def varied_texts() -> list[str]:
    """A few hundred texts: empty and blank ones, unknown tokens only, many scripts, and texts longer than the
    model's 512-token limit and than its character cut (512 x the median token length)."""
    pieces = [
        "retrieval", "BM25", "k-NN", "the", "Straße", "naïve café", "Ελληνικά", "Привет, мир", "مرحبا بالعالم",
        "שלום", "नमस्ते दुनिया", "日本語の文章", "中文检索系统", "한국어 문장", "ภาษาไทย", "🙂🚀", "e\u0301",
        "\u200b", "[UNK]", "[PAD]", "x" * 120, "1234567890", "co-operate", "don't", "\t", "\n", "ÅÄÖ", "ﬁ",
        "ＦＵＬＬＷＩＤＴＨ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "\x00", "...", "C++", "e-mail@example.org",
    ]
    rng = random.Random(12)
    texts = ["", " ", "\n\t ", "\u200b\u200b", "🙂", "𓀀𓀁𓀂", "[UNK]", "a"]
    texts += [" ".join(rng.choice(pieces) for _ in range(rng.randint(1, 40))) for _ in range(200)]
    texts += [" ".join(rng.choice(pieces) for _ in range(rng.randint(400, 1500))) for _ in range(40)]
    texts += ["word " * 700, "日本語" * 2000, "a" * 5000, (ROOT / "README.md").read_text(encoding="utf-8")]
    return texts


def reference(folder: Path, texts: list[str]) -> np.ndarray:
    """model2vec's own vectors for ``texts``, as fastrag used to compute them (mean pooling, then its own
    L2 normalisation)."""
    model = model2vec.StaticModel.from_pretrained(folder, force_download=False)
    return model.encode(texts, normalize=False, use_multiprocessing=False, batch_size=len(texts))


def model_copy(tmp_path: Path, **config_changes: object) -> Path:
    """A model folder sharing the shipped model's files, with ``config.json`` changed (``None`` removes a key)."""
    folder = tmp_path / "model"
    folder.mkdir()
    for name in ("model.safetensors", "tokenizer.json"):
        (folder / name).symlink_to(DEFAULT_MODEL / name)
    config = json.loads((DEFAULT_MODEL / "config.json").read_text(encoding="utf-8"))
    for key, value in config_changes.items():
        config[key] = value
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


async def embed(folder: Path, texts: list[str], *, batch_size: int = 256) -> np.ndarray:
    async with Model2VecEmbedder(folder, batch_size=batch_size) as embedder:
        return await embedder.embed_documents(texts)


async def test_shipped_model_vectors_are_model2vecs_bit_for_bit(caplog: pytest.LogCaptureFixture) -> None:
    texts = varied_texts()
    expected = l2_normalize(reference(DEFAULT_MODEL, texts))
    with caplog.at_level(logging.INFO, logger=EMBEDDING_LOGGER):
        got = await embed(DEFAULT_MODEL, texts, batch_size=37)  # batches that split the length groups
    assert not [r for r in caplog.records if "model2vec.StaticModel" in r.getMessage()]  # not the fallback
    assert got.dtype == np.float32 and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)
    assert not got[0].any()  # the empty text is the zero vector


async def test_shipped_model_query_vector_equals_model2vecs() -> None:
    query = "which fusion does hybrid retrieval use by default?"
    async with Model2VecEmbedder() as embedder:
        got = await embedder.embed_query(query)
    np.testing.assert_array_equal(got, l2_normalize(reference(DEFAULT_MODEL, [query]))[0])


@pytest.mark.parametrize("max_length", [None, 16])
async def test_other_token_limits_match_model2vec(tmp_path: Path, max_length: int | None) -> None:
    folder = model_copy(tmp_path, max_length=max_length)
    texts = varied_texts()
    np.testing.assert_array_equal(await embed(folder, texts), l2_normalize(reference(folder, texts)))


async def test_a_config_without_max_length_uses_model2vecs_default(tmp_path: Path) -> None:
    config = json.loads((DEFAULT_MODEL / "config.json").read_text(encoding="utf-8"))
    folder = model_copy(tmp_path)
    del config["max_length"]
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    texts = ["word " * 700, "short text"]
    np.testing.assert_array_equal(await embed(folder, texts), l2_normalize(reference(folder, texts)))


async def test_a_model_with_token_weights_falls_back_to_model2vec(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from safetensors.numpy import load_file, save_file

    folder = model_copy(tmp_path)
    matrix = load_file(str(DEFAULT_MODEL / "model.safetensors"))["embeddings"]
    weights = np.linspace(0.5, 2.0, len(matrix)).astype(np.float32)
    (folder / "model.safetensors").unlink()
    save_file({"embeddings": matrix, "weights": weights}, str(folder / "model.safetensors"))
    texts = ["weighted tokens change the mean", "", "Привет, мир"]
    with caplog.at_level(logging.INFO, logger=EMBEDDING_LOGGER):
        got = await embed(folder, texts)
    assert any("not only 'embeddings'" in r.getMessage() for r in caplog.records)
    np.testing.assert_array_equal(got, l2_normalize(reference(folder, texts)))
    assert not np.array_equal(got, await embed(DEFAULT_MODEL, texts))  # the weights were applied


@pytest.mark.parametrize(
    ("change", "reason"),
    [({"pooling": "max"}, "pooling"), ({"model_type": "other"}, "model_type"), ({"max_length": 0}, "max_length")],
)
async def test_configs_not_reproduced_fall_back_to_model2vec_and_say_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, change: dict, reason: str
) -> None:
    folder = model_copy(tmp_path, **change)
    texts = ["a config this module does not reproduce", "短い"]
    with caplog.at_level(logging.INFO, logger=EMBEDDING_LOGGER):
        got = await embed(folder, texts)
    messages = [r.getMessage() for r in caplog.records if "model2vec.StaticModel" in r.getMessage()]
    assert len(messages) == 1 and reason in messages[0] and str(folder) in messages[0]
    np.testing.assert_array_equal(got, l2_normalize(reference(folder, texts)))


async def test_a_matrix_that_does_not_fit_the_vocabulary_is_an_embedding_error(tmp_path: Path) -> None:
    from safetensors.numpy import load_file, save_file

    folder = model_copy(tmp_path)
    matrix = load_file(str(DEFAULT_MODEL / "model.safetensors"))["embeddings"]
    (folder / "model.safetensors").unlink()
    save_file({"embeddings": matrix[:-5]}, str(folder / "model.safetensors"))
    with pytest.raises(EmbeddingError, match="rows"):
        await Model2VecEmbedder(folder).load()


async def test_an_unreadable_config_is_an_embedding_error_naming_the_folder(tmp_path: Path) -> None:
    folder = model_copy(tmp_path)
    (folder / "config.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(EmbeddingError, match="model"):
        await Model2VecEmbedder(folder).load()


# ------------------------------------------------------------------------------------- cold start imports

HEAVY = ["rich", "huggingface_hub", "model2vec", "tokenizers", "safetensors", "markdown_it"]


def loaded_after(code: str, cwd: Path = ROOT) -> list[str]:
    """The packages of :data:`HEAVY` a fresh interpreter has imported after running ``code``."""
    script = code + f"\nimport sys\nprint(__import__('json').dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTRAG_")}
    result = subprocess.run([sys.executable, "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_importing_the_cli_loads_no_heavy_package() -> None:
    assert loaded_after("import fastrag.cli") == []


def test_importing_fastrag_loads_no_heavy_package() -> None:
    assert loaded_after("import fastrag\nfrom fastrag.ingestion import Model2VecEmbedder") == []


def test_a_hybrid_search_from_the_cli_loads_neither_the_hub_nor_model2vec(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "volcano.md").write_text("# Volcano\n\nVolcanoes erupt molten lava.\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTRAG_")}
    indexed = subprocess.run([sys.executable, "-m", "fastrag.cli", "index", "notes", "--store", "store.db"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert indexed.returncode == 0, indexed.stderr
    code = textwrap.dedent(
        """
        import contextlib, io
        from fastrag.cli import main
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            main(["search", "lava", "--store", "store.db"])  # hybrid with the shipped model
        assert "notes/volcano.md" in out.getvalue(), out.getvalue()
        """
    )
    assert loaded_after(code, cwd=tmp_path) == ["safetensors", "tokenizers"]
