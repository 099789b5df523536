"""Habits users bring from the agent frameworks (issue 27.7): ``rerank: True`` with no reranker named works
(the default reranker, :data:`fastrag.settings.DEFAULT_RERANK_MODEL`), ``KnowledgeBase.from_config`` takes
``{"sources": [...], "retrieval_k": 10, "rerank": True}``, and ``fastrag search --rerank`` with no value
uses the best reranker configured and says which on stderr.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fastrag.cli import main
from fastrag.knowledge_base import KnowledgeBase
from fastrag.settings import DEFAULT_RERANK_MODEL, SearchSettings, resolve_settings

QUERY = "how are BM25 and dense scores fused?"
NO_RERANK_ENV = {"CO_API_KEY": None, "COHERE_API_KEY": None, "FASTRAG_RERANK_MODEL": None, "FASTRAG_RERANK": None,
                 "CO_API_URL": None, "FASTRAG_CONFIG": None}  # fmt: skip


def _corpus(root: Path) -> Path:
    docs = root / "docs"
    docs.mkdir()
    for name, text in {
        "bm25.md": "# BM25\n\nBM25 ranks documents by term frequency and inverse document frequency.",
        "dense.md": "# Dense\n\nDense retrieval embeds questions and documents as vectors.",
        "fusion.md": "# Fusion\n\nHybrid search fuses the BM25 and dense scores into one ranking.",
        "rrf.md": "# RRF\n\nReciprocal rank fusion adds one over the rank constant plus the rank.",
    }.items():
        (docs / name).write_text(text, encoding="utf-8")
    return docs


@pytest.mark.anyio
async def test_from_config_takes_sources_retrieval_k_and_rerank_true(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _corpus(tmp_path)
    kb = KnowledgeBase.from_config({"sources": ["docs"], "retrieval_k": 10, "rerank": True})
    async with kb:
        await kb.sync()
        response = await kb.search_result(QUERY)
    assert response.error is None and response.strategy == "hybrid+rerank"
    settings = response.settings
    assert (settings.rerank_model, settings.origin("rerank_model")) == ("embedder", "default")
    assert (settings.retrieval_k, settings.origin("retrieval_k")) == (10, "knowledge_base")
    assert settings.top_k == 10  # the default 20 is lowered to the 10 candidates the reranker reads
    assert response.documents and all("reranker" in d.metadata["branches"] for d in response.documents)
    assert response.documents[0].metadata["source_uri"].endswith("fusion.md")


def test_rerank_true_alone_resolves_the_default_reranker_and_a_configured_one_wins() -> None:
    assert DEFAULT_RERANK_MODEL == "embedder"
    resolved = resolve_settings(SearchSettings(rerank=True))
    assert (resolved.rerank_model, resolved.origin("rerank_model")) == ("embedder", "default")
    resolved = resolve_settings(SearchSettings(rerank=True), SearchSettings(rerank_model="cohere"))
    assert (resolved.rerank_model, resolved.origin("rerank_model")) == ("cohere", "knowledge_base")
    assert resolve_settings(SearchSettings(mode="auto")).rerank_model is None  # auto never reranks by default
    assert resolve_settings().rerank is False  # no reranking unless asked
    # both set by hand, the candidates must cover the results (nothing is lowered then)
    from fastrag.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="candidate_k >= top_k"):
        resolve_settings(SearchSettings(rerank=True, retrieval_k=10, top_k=20))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("habits")
    url = f"sqlite:///{root / 'index.db'}"
    done = CliRunner().invoke(main, ["index", str(_corpus(root)), "--store", url])
    assert done.exit_code == 0, done.output
    return url


def _search(store: str, *args: str, env: dict[str, Any] | None = None) -> Any:
    return CliRunner().invoke(main, ["search", QUERY, "--store", store, "--json", *args], env={**NO_RERANK_ENV, **(env or {})})


def test_bare_rerank_with_nothing_configured_uses_the_embedder_reranker_and_says_so(store: str) -> None:
    bare = _search(store, "--rerank")
    assert bare.exit_code == 0, bare.output
    assert "reranking with the embedder reranker (no rerank_model is configured and CO_API_KEY is not set" in bare.stderr
    payload = json.loads(bare.stdout)
    assert payload["strategy"] == "hybrid+rerank"
    assert payload["settings"]["rerank_model"]["value"] == "embedder"
    named = _search(store, "--rerank", "embedder")
    assert [d["id"] for d in payload["documents"]] == [d["id"] for d in json.loads(named.stdout)["documents"]]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_bare_rerank_prefers_a_configured_rerank_model_then_cohere_with_a_key(store: str, tmp_path: Path) -> None:
    unreachable = f"http://127.0.0.1:{_closed_port()}"
    cohere = _search(store, "--rerank", env={"CO_API_KEY": "k", "CO_API_URL": unreachable})
    assert "reranking with Cohere's rerank API, model rerank-v3.5 (CO_API_KEY is set" in cohere.stderr
    assert cohere.exit_code == 3, cohere.output  # it really called Cohere (here: nothing listens)
    folder = tmp_path / "my-cross-encoder"
    folder.mkdir()  # not a model: the choice is said, then loading it fails
    configured = _search(store, "--rerank", env={"CO_API_KEY": "k", "FASTRAG_RERANK_MODEL": str(folder)})
    assert f"reranking with the cross-encoder in {folder} (rerank_model from FASTRAG_RERANK_MODEL)" in configured.stderr
    assert configured.exit_code == 1, configured.output
    flag = _search(store, "--rerank", "--rerank-model", "cohere:rerank-english-v3.0",
                   env={"CO_API_KEY": "k", "CO_API_URL": unreachable})  # fmt: skip
    assert "Cohere's rerank API, model rerank-english-v3.0 (rerank_model from --rerank-model)" in flag.stderr
    toml = tmp_path / "fastrag.toml"
    toml.write_text('[fastrag]\nrerank_model = "embedder"\n', encoding="utf-8")
    from_file = CliRunner().invoke(main, ["search", QUERY, "--store", store, "--rerank"],
                                   env={**NO_RERANK_ENV, "CO_API_KEY": "k", "FASTRAG_CONFIG": str(toml)})  # fmt: skip
    assert "reranking with the embedder reranker (rerank_model from fastrag.toml)" in from_file.stderr
    assert from_file.exit_code == 0, from_file.output


def test_rerank_none_is_still_the_default(store: str) -> None:
    plain = _search(store)
    assert plain.exit_code == 0 and json.loads(plain.stdout)["strategy"] == "hybrid"
    assert "reranking with" not in plain.stderr


def test_a_rerank_kind_with_a_rerank_model_in_the_environment_lets_the_flag_win(store: str) -> None:
    """Before, the request held the environment's rerank_model and the flag's: TypeError, multiple values."""
    both = _search(store, "--rerank", "embedder", env={"FASTRAG_RERANK_MODEL": "cohere"})
    assert both.exit_code == 0, both.output
    assert json.loads(both.stdout)["strategy"] == "hybrid+rerank"
