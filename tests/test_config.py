"""Settings resolution (option > environment > fastrag.toml > defaults), store URLs, and the embedder setting."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fastrag.config import DEFAULT_STORE_URL, Settings, load_settings, open_embedder, open_store, sqlite_path
from fastrag.errors import ConfigurationError
from fastrag.models import Document


@pytest.fixture(autouse=True)
def _empty_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run in an empty folder, so no fastrag.toml from the repository is read."""
    monkeypatch.chdir(tmp_path)


def write_toml(path: Path, body: str) -> Path:
    path.write_text(body, encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------- precedence


def test_defaults() -> None:
    settings = load_settings(env={})
    assert settings == Settings(store="sqlite:///.fastrag/fastrag.db", embedding_model=None, mode="hybrid")
    assert DEFAULT_STORE_URL == "sqlite:///.fastrag/fastrag.db"


def test_toml_in_the_working_directory_is_read(tmp_path: Path) -> None:
    write_toml(tmp_path / "fastrag.toml", '[fastrag]\nstore = "sqlite:///toml.db"\nmode = "keyword"\n')
    assert load_settings(env={}) == Settings(store="sqlite:///toml.db", embedding_model=None, mode="keyword")


def test_overrides_beat_environment_beat_toml_beat_defaults(tmp_path: Path) -> None:
    config = write_toml(
        tmp_path / "elsewhere.toml",
        '[fastrag]\nstore = "sqlite:///toml.db"\nmode = "keyword"\nembedding_model = "toml-model"\n',
    )
    env = {"FASTRAG_CONFIG": str(config), "FASTRAG_STORE": "sqlite:///env.db", "FASTRAG_MODE": "vector"}

    assert load_settings(env={"FASTRAG_CONFIG": str(config)}) == Settings(
        store="sqlite:///toml.db", embedding_model="toml-model", mode="keyword")
    assert load_settings(env=env) == Settings(store="sqlite:///env.db", embedding_model="toml-model", mode="vector")
    assert load_settings({"store": "sqlite:///cli.db"}, env=env) == Settings(
        store="sqlite:///cli.db", embedding_model="toml-model", mode="vector")
    # None means "option not given": it does not hide the environment
    assert load_settings({"store": None, "mode": None}, env=env).store == "sqlite:///env.db"


def test_fastrag_config_replaces_the_working_directory_file(tmp_path: Path) -> None:
    write_toml(tmp_path / "fastrag.toml", '[fastrag]\nmode = "keyword"\n')
    other = write_toml(tmp_path / "other.toml", '[fastrag]\nmode = "vector"\n')
    assert load_settings(env={"FASTRAG_CONFIG": str(other)}).mode == "vector"


def test_empty_environment_variables_are_ignored(tmp_path: Path) -> None:
    write_toml(tmp_path / "fastrag.toml", '[fastrag]\nmode = "keyword"\n')
    assert load_settings(env={"FASTRAG_MODE": "", "FASTRAG_STORE": ""}) == Settings(mode="keyword")


def test_environment_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTRAG_MODE", "keyword")
    monkeypatch.delenv("FASTRAG_CONFIG", raising=False)
    assert load_settings().mode == "keyword"


def test_toml_tables_other_than_fastrag_are_ignored(tmp_path: Path) -> None:
    write_toml(tmp_path / "fastrag.toml", '[tool.other]\nanything = 1\n\n[fastrag]\nmode = "vector"\n')
    assert load_settings(env={}).mode == "vector"


# ---------------------------------------------------------------------------------------- bad settings


def test_unknown_toml_key_is_an_error_naming_it(tmp_path: Path) -> None:
    write_toml(tmp_path / "fastrag.toml", '[fastrag]\nstore = "x.db"\ntop_kk = 5\n')
    with pytest.raises(ConfigurationError, match="top_kk"):
        load_settings(env={})


def test_every_search_option_reads_from_toml_and_its_fastrag_variable(tmp_path: Path) -> None:
    write_toml(tmp_path / "fastrag.toml", '[fastrag]\ntop_k = 5\ncandidate_k = 90\ninclude_glob = ["docs/**"]\n')
    search = load_settings(env={"FASTRAG_CANDIDATE_K": "70", "FASTRAG_FUSION": "rrf", "FASTRAG_LANGUAGE": "RU"}).search
    assert (search.top_k, search.candidate_k, search.include_glob, search.fusion, search.language) == (
        5, 70, ("docs/**",), "rrf", "ru")  # the variable wins over the file; the language code is normalised
    with pytest.raises(ConfigurationError, match=r"candidate_k \(FASTRAG_CANDIDATE_K\)"):
        load_settings(env={"FASTRAG_CANDIDATE_K": "many"})
    with pytest.raises(ConfigurationError, match="normalization"):
        load_settings(env={"FASTRAG_NORMALIZATION": "l2"})


@pytest.mark.parametrize("source", ["toml", "env", "override"])
def test_unknown_mode_is_an_error(tmp_path: Path, source: str) -> None:
    env: dict[str, str] = {}
    overrides = None
    if source == "toml":
        write_toml(tmp_path / "fastrag.toml", '[fastrag]\nmode = "fuzzy"\n')
    elif source == "env":
        env = {"FASTRAG_MODE": "fuzzy"}
    else:
        overrides = {"mode": "fuzzy"}
    with pytest.raises(ConfigurationError, match="fuzzy"):
        load_settings(overrides, env=env)


def test_invalid_toml_is_an_error_naming_the_file(tmp_path: Path) -> None:
    write_toml(tmp_path / "fastrag.toml", "[fastrag\nmode = ")
    with pytest.raises(ConfigurationError, match="fastrag.toml"):
        load_settings(env={})


def test_non_string_setting_is_an_error(tmp_path: Path) -> None:
    write_toml(tmp_path / "fastrag.toml", "[fastrag]\nstore = 5\n")
    with pytest.raises(ConfigurationError, match="store"):
        load_settings(env={})


def test_fastrag_that_is_not_a_table_is_an_error(tmp_path: Path) -> None:
    write_toml(tmp_path / "fastrag.toml", 'fastrag = "keyword"\n')
    with pytest.raises(ConfigurationError, match="table"):
        load_settings(env={})


def test_fastrag_config_naming_a_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="missing.toml"):
        load_settings(env={"FASTRAG_CONFIG": str(tmp_path / "missing.toml")})


def test_unknown_override_is_an_error() -> None:
    with pytest.raises(ConfigurationError, match="colour"):
        load_settings({"colour": "blue"}, env={})


def test_configuration_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        load_settings({"mode": "fuzzy"}, env={})


# ------------------------------------------------------------------------------------------ store URLs


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///rel.db", "rel.db"),
        ("sqlite:///sub/dir/rel.db", "sub/dir/rel.db"),
        ("sqlite:////abs/x.db", "/abs/x.db"),
        ("sqlite:///:memory:", ":memory:"),
        ("data/index.db", "data/index.db"),
        ("/abs/index.db", "/abs/index.db"),
        (":memory:", ":memory:"),
        ("sqlite:///notes#1.db", "notes#1.db"),  # the path is literal: '#' is part of the file name
        ("C:\\index\\x.db", "C:\\index\\x.db"),  # a Windows drive letter is not a URL scheme
    ],
)
def test_sqlite_url_forms(url: str, path: str) -> None:
    assert sqlite_path(url) == path


@pytest.mark.parametrize("url", ["postgres://host/db", "milvus://localhost:19530", "https://example.org/x.db"])
def test_unknown_scheme_is_an_error_naming_it(url: str) -> None:
    scheme = url.split(":", 1)[0]
    with pytest.raises(ConfigurationError, match=f"'{scheme}'"):
        sqlite_path(url)


@pytest.mark.parametrize("url", ["", "   ", "sqlite:///", "sqlite://host/x.db", "sqlite:/x.db"])
def test_malformed_store_urls_are_errors(url: str) -> None:
    with pytest.raises(ConfigurationError):
        sqlite_path(url)


@pytest.mark.anyio
async def test_open_store_relative_url_is_relative_to_the_working_directory(tmp_path: Path) -> None:
    async with open_store("sqlite:///sub/rel.db") as store:
        await store.upsert([Document(id="1", content="hello")])
    assert (tmp_path / "sub" / "rel.db").is_file()


@pytest.mark.anyio
async def test_open_store_memory_url_writes_no_file(tmp_path: Path) -> None:
    async with open_store("sqlite:///:memory:") as store:
        await store.upsert([Document(id="1", content="hello")])
        assert await store.count() == 1
    assert list(tmp_path.iterdir()) == []


def test_open_store_unknown_scheme_is_an_error() -> None:
    with pytest.raises(ConfigurationError, match="'redis'"):
        open_store("redis://localhost/0")


# ------------------------------------------------------------------------------------------- embedder


@pytest.mark.anyio
@pytest.mark.parametrize("model", [None, "static-minilm-d256"])
async def test_open_embedder_default_and_recorded_name_give_the_shipped_model(model: str | None) -> None:
    # the working directory is empty, so the name cannot resolve to a local folder or go to the hub
    async with open_embedder(model) as embedder:
        assert embedder.name == "static-minilm-d256"
        assert embedder.dimension == 256
        vector = await embedder.embed_query("volcanoes erupt molten lava")
    from fastrag.ingestion import Model2VecEmbedder

    async with Model2VecEmbedder() as shipped:
        expected = await shipped.embed_query("volcanoes erupt molten lava")
    np.testing.assert_array_equal(vector, expected)


# ---------------------------------------------------------------------------------------------- embedders


def test_embedder_settings_come_from_env_and_toml_with_integers_checked(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_toml(tmp_path / "fastrag.toml", '[fastrag]\nembedder = "openai"\nembedder_dimensions = 256\n'
                                          'embedder_base_url = "http://toml:8080/v1"\n')
    settings = load_settings(env={"FASTRAG_EMBEDDER_BASE_URL": "http://env:8080/v1", "FASTRAG_EMBEDDER_BATCH_SIZE": "16",
                                  "FASTRAG_EMBEDDER_QUERY_PREFIX": "query: "})
    assert (settings.embedder, settings.embedder_dimensions, settings.embedder_base_url) == ("openai", 256, "http://env:8080/v1")
    assert settings.embedder_batch_size == 16 and settings.embedder_query_prefix == "query: "
    with pytest.raises(ConfigurationError, match="FASTRAG_EMBEDDER_DIMENSIONS"):
        load_settings(env={"FASTRAG_EMBEDDER_DIMENSIONS": "wide"})
    with pytest.raises(ConfigurationError, match="unknown embedder 'word2vec'"):
        load_settings({"embedder": "word2vec"}, env={})


def test_open_embedder_builds_each_kind_with_its_options() -> None:
    from fastrag.ingestion import CohereEmbedder, Model2VecEmbedder, OpenAICompatibleEmbedder

    settings = Settings(embedder="openai", embedder_base_url="http://127.0.0.1:9/v1", embedder_dimensions=64,
                        embedder_document_prefix="passage: ", embedder_max_concurrency=2)
    openai = open_embedder("text-embedding-3-large", settings=settings, env={"FASTRAG_EMBEDDER_API_KEY": "sk-x"})
    assert isinstance(openai, OpenAICompatibleEmbedder)
    assert (openai.name, openai.url, openai.dimensions, openai.document_prefix, openai.max_concurrency) == (
        "openai:text-embedding-3-large", "http://127.0.0.1:9/v1/embeddings", 64, "passage: ", 2)
    assert openai._client._headers["authorization"] == "Bearer sk-x"  # the HTTP layer: fastrag.providers.openai
    # a recorded name says its kind and model
    again = open_embedder("openai:text-embedding-3-large", settings=Settings(embedder_base_url="http://127.0.0.1:9/v1"), env={})
    assert again.name == openai.name
    cohere = open_embedder(None, kind="cohere", env={"FASTRAG_EMBEDDER_API_KEY": "k"})
    assert isinstance(cohere, CohereEmbedder) and cohere.name == "cohere:embed-v4.0"
    assert isinstance(open_embedder(), Model2VecEmbedder)


def test_open_embedder_refuses_options_the_kind_does_not_take_and_mismatched_names() -> None:
    with pytest.raises(ConfigurationError, match="FASTRAG_EMBEDDER_DIMENSIONS"):
        open_embedder(settings=Settings(embedder_dimensions=64))  # model2vec has no dimensions
    with pytest.raises(ConfigurationError, match="openai model"):
        open_embedder("openai:text-embedding-3-small", kind="cohere", env={"FASTRAG_EMBEDDER_API_KEY": "k"})


def test_hybrid_over_a_non_static_embedder_gets_the_measured_dense_default(tmp_path: Path) -> None:
    from fastrag.config import build_retriever
    from fastrag.testing.fakes import InMemoryStore

    embedder = open_embedder("text-embedding-3-small", kind="openai", settings=Settings(embedder_base_url="http://127.0.0.1:9/v1"), env={})
    retriever = build_retriever("hybrid", store=InMemoryStore(), embedder=embedder)
    assert retriever._fusion.normalization == "z_score" and retriever._candidate_k == 200
    static = build_retriever("hybrid", store=InMemoryStore(), embedder=open_embedder())
    assert static._fusion.normalization == "min_max" and static._candidate_k == 40


def test_the_embedding_cache_lives_beside_a_sqlite_store_except_for_static_models() -> None:
    from fastrag.config import embedding_cache_path

    assert embedding_cache_path(Settings(store="sqlite:///data/x.db"), embedder_kind="openai") == "data/embedding-cache.db"
    assert embedding_cache_path(Settings(store="sqlite:///data/x.db"), embedder_kind="model2vec") is None
    assert embedding_cache_path(Settings(store="sqlite:///:memory:"), embedder_kind="openai") is None
    assert embedding_cache_path(Settings(store="qdrant://h/c"), embedder_kind="cohere") == ".fastrag/embedding-cache.db"
    assert embedding_cache_path(Settings(embedding_cache="off"), embedder_kind="openai") is None
    assert embedding_cache_path(Settings(embedding_cache="c.db"), embedder_kind="model2vec") == "c.db"
