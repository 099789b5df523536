"""``fastrag index/search/eval --embedder ...``: an OpenAI-compatible endpoint (a local server speaking the
API), the store recording which embedder built it, and the embedding cache beside the store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from fastrag.cli import main
from fastrag.testing.http_server import ScriptedHTTPServer, openai_embeddings

ENV_OFF = {name: None for name in (
    "FASTRAG_STORE", "FASTRAG_MODE", "FASTRAG_EMBEDDING_MODEL", "FASTRAG_CONFIG", "FASTRAG_LEXICAL_STORE",
    "FASTRAG_EMBEDDER", "FASTRAG_EMBEDDER_BASE_URL", "FASTRAG_EMBEDDER_API_KEY", "FASTRAG_EMBEDDER_DIMENSIONS",
    "FASTRAG_EMBEDDER_QUERY_PREFIX", "FASTRAG_EMBEDDER_DOCUMENT_PREFIX", "FASTRAG_EMBEDDER_BATCH_SIZE",
    "FASTRAG_EMBEDDER_MAX_CONCURRENCY", "FASTRAG_EMBEDDING_CACHE", "OPENAI_API_KEY",
)}


def cli(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env={**ENV_OFF, **(env or {})}, catch_exceptions=False)


@pytest.fixture
def server():
    with ScriptedHTTPServer([openai_embeddings], path_prefix="/v1") as running:
        yield running


@pytest.fixture
def docs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name, text in {"a.md": "# Pelicans\n\nPelicans scoop fish.", "b.txt": "Zebras graze on grass.",
                       "c.txt": "Volcanoes erupt lava."}.items():
        (tmp_path / "docs").mkdir(exist_ok=True)
        (tmp_path / "docs" / name).write_text(text, encoding="utf-8")
    return tmp_path / "docs"


def embedded(server: ScriptedHTTPServer) -> list[str]:
    return [t for r in server.requests for t in r.body["input"]]


def test_index_with_an_openai_endpoint_records_it_and_search_reuses_it(server, docs: Path) -> None:
    env = {"FASTRAG_EMBEDDER_API_KEY": "sk-cli-secret"}
    result = cli("index", str(docs), "--embedder", "openai", "--model", "bge-small", "--embedder-base-url", server.url,
                 env=env)
    assert result.exit_code == 0, result.output
    assert "indexed 3 files" in result.output and "0 chunk vectors reused, 3 embedded" in result.output
    assert all(r.headers["authorization"] == "Bearer sk-cli-secret" for r in server.requests)
    assert Path(".fastrag/embedding-cache.db").is_file()
    # search needs no --embedder: the store recorded "openai:bge-small"; the base URL comes from the environment
    found = cli("search", "pelicans", "--json", env={**env, "FASTRAG_EMBEDDER_BASE_URL": server.url})
    assert found.exit_code == 0, found.output
    assert server.requests[-1].body == {"model": "bge-small", "input": ["pelicans"], "encoding_format": "float"}
    assert json.loads(found.stdout)["documents"]  # stdout: the embedder's language warning is on stderr
    # another embedder against this store is refused, naming both
    refused = cli("search", "pelicans", "--embedder", "openai", "--model", "other", "--embedder-base-url", server.url,
                  env=env)
    assert refused.exit_code != 0 and "openai:bge-small" in refused.output and "openai:other" in refused.output


def test_reindexing_into_a_new_store_embeds_nothing_thanks_to_the_cache(server, docs: Path) -> None:
    args = ("--embedder", "openai", "--model", "bge-small", "--embedder-base-url", server.url)
    assert cli("index", str(docs), "--store", "sqlite:///idx/one.db", *args).exit_code == 0
    first = len(embedded(server))
    second = cli("index", str(docs), "--store", "sqlite:///idx/two.db", *args)
    assert second.exit_code == 0, second.output
    assert len(embedded(server)) == first  # the server saw nothing new
    assert "3 chunk vectors reused, 0 embedded (idx/embedding-cache.db)" in second.output
    off = cli("index", str(docs), "--store", "sqlite:///idx/three.db", "--embedding-cache", "off", *args)
    assert off.exit_code == 0 and len(embedded(server)) == first + 3 and "embedding cache" not in off.output


def test_an_unreachable_embedding_endpoint_fails_naming_it(docs: Path) -> None:
    result = cli("index", str(docs), "--embedder", "openai", "--embedder-base-url", "http://127.0.0.1:9/v1")
    assert result.exit_code == 3
    assert "error: embedding endpoint failed: http://127.0.0.1:9/v1/embeddings: cannot connect" in result.output


def test_an_option_the_embedder_does_not_take_is_refused(docs: Path) -> None:
    result = cli("index", str(docs), "--embedder-dimensions", "64")
    assert result.exit_code == 1
    assert "model2vec embedder takes no embedder_dimensions" in result.output


def test_eval_with_an_openai_endpoint_and_a_store_reuses_the_cache(server, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "beir"
    (data / "qrels").mkdir(parents=True)
    corpus = [{"_id": f"d{i}", "title": f"T{i}", "text": f"document number {i} about topic {i}"} for i in range(5)]
    (data / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in corpus), encoding="utf-8")
    (data / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "topic 3"}), encoding="utf-8")
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td3\t1\n", encoding="utf-8")
    args = ("--embedder", "openai", "--model", "m", "--embedder-base-url", server.url, "--json")
    assert cli("eval", str(data), "--store", "sqlite:///ev/one.db", *args).exit_code == 0
    first = len(embedded(server))
    result = cli("eval", str(data), "--store", "sqlite:///ev/two.db", *args)
    assert result.exit_code == 0, result.output
    assert set(json.loads(result.stdout)) == {"ndcg@10", "recall@100", "mrr@10"}  # warnings go to stderr
    assert embedded(server)[first:] == ["topic 3"]  # only the query: the corpus came from the cache
