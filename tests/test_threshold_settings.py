"""Score thresholds where users configure retrieval (issue 18.3 follow-up): ``fastrag search`` options, the
settings layers (TOML, environment, options), :func:`fastrag.config.build_retriever`, ``KnowledgeBase``
settings and ``as_tool``. The thresholds themselves are tested in test_thresholds.py; here, that each surface
reaches them, with the mode rules of :func:`fastrag.retrieval.thresholds.check_thresholds_fit`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from fastrag.cli import main
from fastrag.config import build_retriever, load_settings
from fastrag.errors import ConfigurationError, InvalidParameterError
from fastrag.knowledge_base import KnowledgeBase, SearchSettings
from fastrag.models import Document
from fastrag.retrieval import BM25Retriever, HybridRetriever, VectorRetriever
from fastrag.testing.fakes import HashingEmbedder
from fastrag.vector_store.sqlite import SQLiteVectorStore

THRESHOLD_ENV = ("FASTRAG_MIN_SCORE", "FASTRAG_MIN_RELATIVE_SCORE", "FASTRAG_MIN_VECTOR_SCORE", "FASTRAG_MIN_KEYWORD_SCORE")
_NO_FASTRAG_ENV = {name: None for name in ("FASTRAG_STORE", "FASTRAG_MODE", "FASTRAG_EMBEDDING_MODEL", "FASTRAG_CONFIG",
                                           "FASTRAG_LEXICAL_STORE", *THRESHOLD_ENV)}  # fmt: skip

# Every file says "field report"; the two pelican files also match "pelican".
FILES = {
    "notes/pelican.md": "# Pelican\n\nField report: pelicans scoop fish with a throat pouch.\n",
    "notes/sub/zebra.txt": "Field report: zebras graze on the savanna grassland.\n",
    "notes/volcano.html": (
        "<html><head><title>Volcano</title></head><body><p>Field report: volcanoes erupt molten lava.</p></body></html>\n"
    ),
    "guides/deep/pelican-care.md": "# Pelican care\n\nField report: feed a rescued bird fresh sardines twice a day.\n",
}
PELICANS = ["notes/pelican.md", "guides/deep/pelican-care.md"]
QUESTION = "pelican field report"


def cli(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env={**_NO_FASTRAG_ENV, **(env or {})}, catch_exceptions=False)


def uris(result: Result) -> list[str]:
    assert result.exit_code == 0, result.stderr
    return [d["metadata"]["source_uri"] for d in json.loads(result.stdout)["documents"]]


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("thresholds")
    for rel, body in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(body, encoding="utf-8")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        assert cli("index", "notes", "guides").exit_code == 0
    return root


@pytest.fixture
def in_index(indexed: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(indexed)
    return indexed


def search(*args: str, env: dict[str, str] | None = None) -> Result:
    return cli("search", QUESTION, "-k", "10", "--json", *args, env=env)


# ------------------------------------------------------------------------------------------------ CLI


def test_min_score_in_keyword_mode_cuts_on_the_bm25_score(in_index: Path) -> None:
    everything = json.loads(search("--mode", "keyword").stdout)["documents"]
    assert {d["metadata"]["source_uri"] for d in everything} == set(FILES)  # every file says "field report"
    # BM25 scores the pelican files far above the others (they match "pelican" too)
    assert uris(search("--mode", "keyword", "--min-score", "0.5")) == PELICANS
    payload = json.loads(search("--mode", "keyword", "--min-score", "0.5").stdout)
    assert payload["thresholds"] == {"min_score": 0.5}
    assert all(d["metadata"]["score"] >= 0.5 for d in payload["documents"])
    text = cli("search", QUESTION, "--mode", "keyword", "--min-score", "100")
    assert text.exit_code == 0 and "No documents matched at or above the score thresholds (min_score=100)" in text.stdout


def test_min_score_in_vector_mode_cuts_on_the_cosine(in_index: Path) -> None:
    assert set(uris(search("--mode", "vector"))) == set(FILES)
    assert uris(search("--mode", "vector", "--min-score", "0.4")) == PELICANS
    # a cosine threshold above 1 warns (nothing can reach it) and finds nothing
    result = search("--mode", "vector", "--min-score", "1.5")
    assert uris(result) == []
    assert "warning: min_score=1.5 is above 1.0, the highest cosine similarity possible" in result.stderr


def test_min_relative_score_in_hybrid_keeps_a_fraction_of_the_best_fused_score(in_index: Path) -> None:
    everything = json.loads(search("--mode", "hybrid").stdout)["documents"]
    assert len(everything) == 4
    kept = json.loads(search("--mode", "hybrid", "--min-relative-score", "0.5").stdout)["documents"]
    assert [d["metadata"]["source_uri"] for d in kept] == PELICANS
    assert all(d["metadata"]["score"] >= 0.5 * kept[0]["metadata"]["score"] for d in kept)
    unreachable = search("--min-relative-score", "1.5")
    assert uris(unreachable) == [] and "warning: min_relative_score=1.5 is above 1" in unreachable.stderr


def test_branch_thresholds_in_hybrid_cut_each_branch_before_fusion(in_index: Path) -> None:
    # the dense cut alone: BM25 still finds every "field report" file, so all four come back
    assert set(uris(search("--min-vector-score", "0.4"))) == set(FILES)
    assert uris(search("--min-vector-score", "0.4", "--min-keyword-score", "0.5")) == PELICANS


def test_min_score_in_hybrid_is_refused_naming_the_relative_threshold(in_index: Path) -> None:
    result = cli("search", QUESTION, "--min-score", "0.5")
    assert result.exit_code == 1 and result.stdout == ""
    line = result.stderr.strip()
    assert "\n" not in line and line.startswith("error: min_score=0.5 (--min-score, FASTRAG_MIN_SCORE or fastrag.toml) cannot apply")
    assert "--min-relative-score" in line and "hybrid" in line
    # with a reranker the final list is on the reranker's scale: min_score cuts it (cosine here)
    reranked = search("--min-score", "0.4", "--rerank", "embedder")
    assert uris(reranked) == PELICANS
    # min_relative_score outside hybrid, and a branch threshold whose branch does not run
    for args in (("--mode", "keyword", "--min-relative-score", "0.5"), ("--mode", "keyword", "--min-vector-score", "0.1"),
                 ("--mode", "vector", "--min-keyword-score", "1")):  # fmt: skip
        refused = cli("search", QUESTION, *args)
        assert refused.exit_code == 1 and refused.stderr.startswith("error: ") and "--min-score" in refused.stderr


@pytest.mark.parametrize(
    ("args", "exit_code", "message"),
    [
        (("--mode", "keyword", "--min-score", "nan"), 1, "error: min_score (the command line) must be a finite number, got nan"),
        (("--mode", "keyword", "--min-score", "inf"), 1, "must be a finite number"),
        (("--min-relative-score", "0"), 1, "error: min_relative_score (the command line) must be a finite number > 0"),
        (("--min-relative-score", "-0.5"), 1, "must be a finite number > 0"),
        (("--mode", "keyword", "--min-score", "high"), 2, "'high' is not a valid float"),  # as --top-k x: a usage error
    ],
)
def test_bad_threshold_values_are_one_line_errors(in_index: Path, args: tuple[str, ...], exit_code: int, message: str) -> None:
    result = cli("search", QUESTION, *args)
    assert result.exit_code == exit_code, result.output
    assert message in result.stderr
    if exit_code == 1:
        assert result.stderr.count("\n") == 1


def test_thresholds_from_toml_and_environment_with_options_winning(in_index: Path) -> None:
    config = in_index / "thresholds.toml"
    config.write_text('[fastrag]\nmode = "keyword"\nmin_score = 100\n', encoding="utf-8")
    toml = {"FASTRAG_CONFIG": str(config)}
    assert uris(search(env=toml)) == []  # the TOML's threshold reaches the BM25 retriever
    assert uris(search(env={**toml, "FASTRAG_MIN_SCORE": "0.5"})) == PELICANS  # environment over TOML
    assert set(uris(search("--min-score", "0.1", env={**toml, "FASTRAG_MIN_SCORE": "0.5"}))) == set(FILES)  # option
    # a hybrid search refuses the TOML's min_score, naming where it can come from
    refused = cli("search", QUESTION, "--mode", "hybrid", env=toml)
    assert refused.exit_code == 1 and "min_score=100.0 (--min-score, FASTRAG_MIN_SCORE or fastrag.toml)" in refused.stderr
    config.write_text('[fastrag]\nmin_relative_score = "half"\n', encoding="utf-8")
    bad = cli("search", QUESTION, env=toml)
    assert bad.exit_code == 1 and f"min_relative_score ({config}) must be a number, got 'half'" in bad.stderr


def test_eval_says_it_does_not_apply_the_thresholds_of_the_settings(tmp_path: Path) -> None:
    data = tmp_path / "tiny"
    (data / "qrels").mkdir(parents=True)
    (data / "corpus.jsonl").write_text('{"_id": "d1", "title": "", "text": "pelicans scoop fish"}\n', encoding="utf-8")
    (data / "queries.jsonl").write_text('{"_id": "q1", "text": "pelican"}\n', encoding="utf-8")
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n", encoding="utf-8")
    result = cli("eval", str(data), "--mode", "keyword", env={"FASTRAG_MIN_SCORE": "100"})
    assert result.exit_code == 0, result.stderr
    assert "warning: eval ranks without score thresholds; the settings' min_score=100 are not applied" in result.stderr


# ------------------------------------------------------------------------------------------- settings


def test_load_settings_layers_the_thresholds(tmp_path: Path) -> None:
    config = tmp_path / "fastrag.toml"
    config.write_text("[fastrag]\nmin_score = 2\nmin_relative_score = 0.25\nmin_vector_score = 0.1\n", encoding="utf-8")
    env = {"FASTRAG_CONFIG": str(config), "FASTRAG_MIN_RELATIVE_SCORE": "0.5", "FASTRAG_MIN_KEYWORD_SCORE": " 1.5 "}
    settings = load_settings({"min_vector_score": 0.3, "min_score": None}, env=env)
    assert (settings.min_score, settings.min_relative_score, settings.min_vector_score, settings.min_keyword_score) == (
        2.0, 0.5, 0.3, 1.5)  # TOML, environment over TOML, override over TOML, environment  # fmt: skip
    assert isinstance(settings.min_score, float)
    assert load_settings(env={}).min_score is None
    for bad_env in ({"FASTRAG_MIN_SCORE": "nan"}, {"FASTRAG_MIN_SCORE": "x"}, {"FASTRAG_MIN_RELATIVE_SCORE": "0"}):
        with pytest.raises(ConfigurationError):
            load_settings(env=bad_env)
    config.write_text("[fastrag]\nmin_score = true\n", encoding="utf-8")
    with pytest.raises(ConfigurationError, match="min_score must be a number"):
        load_settings(env={"FASTRAG_CONFIG": str(config)})


DOCS = [
    Document(id="a", content="solar panels on the roof convert sunlight"),
    Document(id="b", content="solar energy is renewable energy"),
    Document(id="c", content="wind turbines and solar farms"),
    Document(id="d", content="the history of coal mining"),
]
# On "solar energy" with HashingEmbedder: BM25 b 2.01, c 0.36, a 0.32 (d none); cosine b 0.80, a 0.54,
# c 0.32, d 0.0; weighted hybrid (min-max, floor 0.2) b 1.0, a 0.57, c 0.43, d 0.14.


@pytest.fixture
async def store():
    embedder = HashingEmbedder()
    async with SQLiteVectorStore(":memory:") as store:
        await store.upsert(DOCS, embeddings=await embedder.embed_documents([d.content for d in DOCS]))
        yield store


@pytest.mark.anyio
async def test_build_retriever_puts_each_threshold_where_it_applies(store) -> None:
    embedder = HashingEmbedder()
    keyword = build_retriever("keyword", store=store, min_score=1.0)
    assert isinstance(keyword, BM25Retriever) and keyword.min_score == 1.0
    assert [d.id for d in await keyword.retrieve("solar energy", k=4)] == ["b"]
    vector = build_retriever("vector", store=store, embedder=embedder, min_score=0.4)
    assert [d.id for d in await vector.retrieve("solar energy", k=4)] == ["b", "a"]
    hybrid = build_retriever("hybrid", store=store, embedder=embedder, min_relative_score=0.5, min_vector_score=0.4,
                             min_keyword_score=1.0)  # fmt: skip
    assert isinstance(hybrid, HybridRetriever) and hybrid.min_relative_score == 0.5
    branches = {type(r): r.min_score for r in hybrid.retrievers.values()}
    assert branches == {VectorRetriever: 0.4, BM25Retriever: 1.0}
    assert [d.id for d in await hybrid.retrieve("solar energy", k=4)] == ["b"]
    with pytest.raises(ConfigurationError, match="min_relative_score"):
        build_retriever("hybrid", store=store, embedder=embedder, min_score=0.5)


# ------------------------------------------------------------------------------------- knowledge base


@pytest.mark.anyio
async def test_knowledge_base_settings_and_requests_reach_the_thresholds(store) -> None:
    kb = KnowledgeBase(store, embedder=HashingEmbedder(), settings=SearchSettings(search_mode="keyword", min_score=1.0))
    async with kb:
        assert [d.id for d in await kb.search("solar energy", top_k=4)] == ["b"]
        assert [d.id for d in await kb.search("solar energy", top_k=4, min_score=0.34)] == ["b", "c"]  # request wins
        response = await kb.search_result("solar energy", top_k=4)
        assert response.settings.min_score == 1.0 and response.settings.origin("min_score") == "knowledge_base"
        vector = await kb.search("solar energy", top_k=4, search_mode="vector", min_score=0.4)
        assert [d.id for d in vector] == ["b", "a"]
        # the knowledge base's min_score does not fit a hybrid request: refused, saying where it came from
        with pytest.raises(InvalidParameterError, match=r"min_score=1.0 \(from the knowledge base\) cannot apply in hybrid"):
            await kb.search("solar energy", search_mode="hybrid")
        with pytest.raises(InvalidParameterError, match="min_relative_score"):
            await kb.search("solar energy", min_relative_score=0.5)  # keyword mode: no fusion
    # hybrid, weighted min-max 0.7 dense / 0.3 BM25 (set here: the embedder's measured default is z-score 0.55 BM25)
    fixed = SearchSettings(vector_weight=0.7, keyword_weight=0.3, normalization="min_max")
    async with KnowledgeBase(store, embedder=HashingEmbedder(), settings=fixed) as kb:
        assert [d.id for d in await kb.search("solar energy", top_k=4)] == ["b", "a", "c", "d"]
        hybrid = await kb.search("solar energy", top_k=4, min_relative_score=0.5)
        assert [d.id for d in hybrid] == ["b", "a"]
        branches = await kb.search("solar energy", top_k=4, min_vector_score=0.6, min_keyword_score=1.0)
        assert [d.id for d in branches] == ["b"]
        direct = await kb.search_result("solar energy", top_k=4, search_mode="auto", min_vector_score=0.6,
                                        min_keyword_score=1.0)  # fmt: skip
        assert direct.strategy == "direct" and [d.id for d in direct.documents] == ["b"]
        assert direct.settings.origin("min_keyword_score") == "request"


def test_knowledge_base_refuses_thresholds_that_cannot_apply_or_are_not_numbers() -> None:
    with pytest.raises(ConfigurationError, match="min_relative_score"):
        KnowledgeBase(":memory:", settings=SearchSettings(min_score=0.5))  # default mode: hybrid
    assert KnowledgeBase(":memory:", settings=SearchSettings(min_score=0.5, rerank=True, rerank_model="embedder"))
    for bad in ({"min_score": float("nan")}, {"min_score": "0.5"}, {"min_relative_score": 0}, {"min_vector_score": True}):
        with pytest.raises(InvalidParameterError):
            SearchSettings(**bad)
    kb = KnowledgeBase.from_config({"store": ":memory:", "search_mode": "keyword", "min_score": 3.5})
    assert kb.settings.min_score == 3.5
    with pytest.raises(ConfigurationError, match="min_score"):
        KnowledgeBase.from_config({"store": ":memory:", "min_score": 3.5})


@pytest.mark.anyio
async def test_as_tool_applies_the_thresholds_it_is_given(store) -> None:
    fixed = SearchSettings(vector_weight=0.7, keyword_weight=0.3, normalization="min_max")
    async with KnowledgeBase(store, embedder=HashingEmbedder(), settings=fixed) as kb:
        everything = await kb.as_tool(search_mode="keyword")({"query": "solar energy", "top_k": 4})
        assert [r["id"] for r in everything] == ["b", "c", "a"]
        tool = kb.as_tool(search_mode="keyword", min_score=1.0)
        assert [r["id"] for r in await tool({"query": "solar energy", "top_k": 4})] == ["b"]
        assert "min_score" not in json.dumps(tool.parameters)  # the model cannot lift it
        relative = kb.as_tool(min_relative_score=0.5)  # the knowledge base's default: hybrid
        assert [r["id"] for r in await relative({"query": "solar energy", "top_k": 4})] == ["b", "a"]
        with pytest.raises(InvalidParameterError, match="min_relative_score"):
            kb.as_tool(min_score=0.5)  # hybrid: refused when the tool is built, not at the model's first call
        with pytest.raises(InvalidParameterError):
            kb.as_tool(search_mode="keyword", min_score=float("nan"))
