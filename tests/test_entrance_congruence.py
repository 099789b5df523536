"""Every entrance plans a search the same way (issue 24): the planner called from Python,
``KnowledgeBase.search_result``, ``fastrag search --json``, ``fastrag serve``'s ``/retrieve`` and the
knowledge base's tool return the same ids, ranks and scores for the same settings over one index.

The matrix: the shipped static model and a model that is not the shipped one (the same weights under
another folder name, so it is not in the measured table and gets the dense models' defaults: before the one
planner, ``fastrag search`` fused it by z-score over 200 candidates while the knowledge base, ``serve`` and
the tool fused min-max over 40); crossed with hybrid, keyword and vector; reranking; a filter; a path glob;
``group_by``; ``offset``; a threshold; a language; a tenant scope; RRF with a per-branch candidate count; MMR.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from click.testing import CliRunner

from fastrag import Document
from fastrag.cli import main
from fastrag.config import open_embedder, open_store
from fastrag.knowledge_base import KnowledgeBase
from fastrag.planning import plan_search
from fastrag.rerankers.embedding import EmbedderReranker
from fastrag.retrieval.result import retrieve_result
from fastrag.serve import create_app
from fastrag.settings import SearchSettings, resolve_settings

pytestmark = pytest.mark.anyio

SHIPPED = Path(__file__).resolve().parents[1] / "fastrag" / "data" / "static-minilm-d256"
QUERY = "how are BM25 and dense vector scores fused into one ranking?"

TOPICS = {
    "a/bm25.md": ("BM25", "BM25 ranks documents by term frequency, inverse document frequency and length."),
    "a/dense.md": ("Dense", "Dense retrieval embeds questions and documents as vectors and ranks by cosine."),
    "a/fusion.md": ("Fusion", "Hybrid search fuses the BM25 list and the dense list: min-max or z-score scores."),
    "a/rrf.md": ("RRF", "Reciprocal rank fusion adds one over rank constant plus rank for every list."),
    "b/rerank.md": ("Rerank", "A reranker reads the fused candidates again and orders them by a better score."),
    "b/filters.md": ("Filters", "Metadata filters keep documents whose fields match, on every store."),
    "b/chunks.md": ("Chunks", "Documents are cut into chunks; each chunk is indexed for BM25 and vectors."),
    "b/tenants.md": ("Tenants", "Tenant scopes confine every search to one user's documents and scores."),
}

# (name, settings): one cell of the matrix, in fastrag.settings.OPTIONS names (plus offset and user_id)
CELLS: list[tuple[str, dict[str, Any]]] = [
    ("hybrid", {}),
    ("keyword", {"mode": "keyword"}),
    ("vector", {"mode": "vector"}),
    ("rerank", {"rerank": True}),
    ("filter", {"filter": {"notEquals": {"key": "title", "value": "Fusion"}}}),
    ("glob", {"include_glob": ["**/a/**"]}),
    ("group_by", {"group_by": "source_uri"}),
    ("offset", {"offset": 2}),
    ("threshold", {"min_relative_score": 0.5}),
    ("language", {"language": "en", "mode": "keyword"}),
    ("tenant", {"user_id": "alice"}),
    ("rrf", {"fusion": "rrf", "rank_constant": 10, "keyword_candidate_k": 5}),
    ("mmr", {"mmr_lambda": 0.5, "mmr_candidate_k": 12}),
]


def _write_corpus(root: Path) -> Path:
    docs = root / "docs"
    for rel, (title, body) in TOPICS.items():
        path = docs / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {title}\n\n{body} {body.lower()}\n", encoding="utf-8")
    return docs


@pytest.fixture(scope="module", params=["shipped", "other"])
def index(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp(f"congruence-{request.param}")
    docs = _write_corpus(root)
    model: str | None = None
    if request.param == "other":
        model = str(root / "other-minilm")  # the shipped weights under a name the measured table lacks
        shutil.copytree(SHIPPED, model)
    store = f"sqlite:///{root / 'index.db'}"
    args = ["index", str(docs), "--store", store, *(["--model", model] if model else [])]
    done = CliRunner().invoke(main, args)
    assert done.exit_code == 0, done.output

    async def add_alice() -> None:
        async with KnowledgeBase(store, embedder=model) as kb:
            await kb.add_documents([
                Document(id=f"alice-{i}", content=f"Alice's note {i}: fusion of BM25 and dense scores, rank {i}.",
                         metadata={"source_uri": f"notes/alice-{i}.md", "title": f"Note {i}"})
                for i in range(4)
            ], user_id="alice")

    anyio.run(add_alice)
    return {"store": store, "model": model, "root": root, "kind": request.param}


def _hits(items: list[dict[str, Any]]) -> list[tuple[str, int, float]]:
    return [(str(i["id"]), int(i["rank"]), float(i["score"])) for i in items]


def _split(cell: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(settings, call arguments) of a cell."""
    call = {k: cell[k] for k in ("filter", "offset", "user_id") if k in cell}
    return {k: v for k, v in cell.items() if k not in call}, call


async def _python_planner(index: dict[str, Any], cell: dict[str, Any]) -> list[tuple[str, int, float]]:
    """The planner called directly, over the stores and embedder opened by hand."""
    from fastrag.filters import parse_filter

    settings, call = _split(cell)
    async with open_embedder(index["model"]) as embedder, open_store(index["store"], create=False) as store:
        resolved = resolve_settings(SearchSettings.from_mapping(settings), SearchSettings(rerank_model="embedder"),
                                    embedder_name=embedder.name)  # fmt: skip
        view: Any = store
        if "user_id" in call:
            async with KnowledgeBase(store, embedder=embedder) as kb:  # the knowledge base's scoped view
                view, _ = kb._views(call["user_id"], None, None)
                return await _plan_and_run(resolved, view, embedder, parse_filter(call.get("filter")), call)
        return await _plan_and_run(resolved, view, embedder, parse_filter(call.get("filter")), call)


async def _plan_and_run(resolved: Any, view: Any, embedder: Any, node: Any, call: dict[str, Any]) -> list[tuple[str, int, float]]:
    async def reranker_for(spec: Any) -> Any:
        assert spec == "embedder"
        return EmbedderReranker(embedder)

    plan = await plan_search(resolved, vector_store=view, embedder=embedder, reranker_for=reranker_for, filter=node)
    result = await retrieve_result(plan.retriever, QUERY, k=resolved.top_k, filter=node, offset=call.get("offset", 0))
    assert result.error is None, result.error
    return [(d.id, d.rank, d.score) for d in result.documents]


def _kb(index: dict[str, Any]) -> KnowledgeBase:
    return KnowledgeBase(index["store"], embedder=index["model"], settings=SearchSettings(rerank_model="embedder"))


async def _knowledge_base(index: dict[str, Any], cell: dict[str, Any]) -> list[tuple[str, int, float]]:
    settings, call = _split(cell)
    async with _kb(index) as kb:
        response = await kb.search_result(QUERY, **call, **settings)
    assert response.error is None, response.error
    return [(d.id, d.rank, d.score) for d in response.documents]


def _cli(index: dict[str, Any], cell: dict[str, Any]) -> list[tuple[str, int, float]]:
    settings, call = _split(cell)
    args = ["search", QUERY, "--json", "--store", index["store"], "--top-k", str(settings.pop("top_k", 20))]
    if index["model"]:
        args += ["--model", index["model"]]
    if settings.pop("rerank", False):
        args += ["--rerank", "embedder"]
    for name, value in settings.items():
        for one in value if isinstance(value, list) else [value]:
            args += [f"--{name.replace('_', '-')}", str(one)]
    if "filter" in call:
        args += ["--filter", json.dumps(call["filter"])]
    if "offset" in call:
        args += ["--offset", str(call["offset"])]
    if "user_id" in call:
        args += ["--user-id", call["user_id"]]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    return [(d["id"], d["metadata"]["rank"], d["metadata"]["score"]) for d in payload["documents"]]


async def _serve(index: dict[str, Any], cell: dict[str, Any]) -> list[tuple[str, int, float]]:
    settings, call = _split(cell)
    app = create_app({"kb": _kb(index)})
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        response = await client.post("/v1/knowledge-bases/kb/retrieve", json={"query": QUERY, **call, **settings})
    assert response.status_code == 200, response.text
    return [(r["chunk_id"], r["rank"], r["score"]) for r in response.json()["results"]]


async def _tool(index: dict[str, Any], cell: dict[str, Any]) -> list[tuple[str, int, float]]:
    settings, call = _split(cell)
    scope = {"user_id": call["user_id"]} if "user_id" in call else {}
    async with _kb(index) as kb:
        tool = kb.as_tool(**scope, **settings)
        arguments = {"query": QUERY, "top_k": 20, **{k: v for k, v in call.items() if k != "user_id"}}
        out = await tool.run(arguments)
    assert out["complete"] in (True, False)
    return _hits(out["results"])


@pytest.mark.parametrize(("name", "cell"), CELLS, ids=[name for name, _ in CELLS])
async def test_every_entrance_returns_the_same_ids_ranks_and_scores(index: dict[str, Any], name: str, cell: dict[str, Any]) -> None:
    reference = await _knowledge_base(index, cell)
    assert reference, f"{name}: the cell must find something to compare"
    entrances = {
        "planner": await _python_planner(index, cell),
        "cli": await anyio.to_thread.run_sync(_cli, index, cell),
        "serve": await _serve(index, cell),
        "tool": await _tool(index, cell),
    }
    for entrance, hits in entrances.items():
        assert [(i, r) for i, r, _ in hits] == [(i, r) for i, r, _ in reference], f"{name}: {entrance} ranks differently"
        assert [s for _, _, s in hits] == pytest.approx([s for _, _, s in reference], rel=1e-12, abs=1e-12), (
            f"{name}: {entrance} scores differently"
        )


async def test_a_non_shipped_embedder_resolves_the_dense_models_defaults_at_every_entrance(index: dict[str, Any]) -> None:
    """The defect the matrix guards: the same resolved fusion numbers, whichever door the question came in by."""
    async with _kb(index) as kb:
        resolved = (await kb.search_result(QUERY)).settings
    args = ["search", QUERY, "--json", "--store", index["store"], *(["--model", index["model"]] if index["model"] else [])]
    out = await anyio.to_thread.run_sync(CliRunner().invoke, main, args)  # the CLI runs its own event loop
    assert out.exit_code == 0, out.output
    cli = {k: v["value"] for k, v in json.loads(out.stdout)["settings"].items()}
    expected = ("z_score", 0.55, 200) if index["kind"] == "other" else ("min_max", 0.9, 40)
    assert (resolved.normalization, resolved.keyword_weight, resolved.candidate_k) == expected
    assert (cli["normalization"], cli["keyword_weight"], cli["candidate_k"]) == expected
