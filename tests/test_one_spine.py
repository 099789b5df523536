"""One spine (issue 24): one vocabulary of search options at every entrance, and one module that composes a
retriever chain from settings."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

from fastrag.cli.search import search
from fastrag.config import load_settings
from fastrag.knowledge_base import KnowledgeBase
from fastrag.retrieval.thresholds import THRESHOLD_SETTINGS
from fastrag.serve.schemas import RetrieveRequest
from fastrag.settings import OPTIONS, ResolvedSearchSettings, SearchSettings

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "fastrag"

COMPOSERS = {"HybridRetriever", "RerankingRetriever", "PathFilterRetriever", "GroupingRetriever",
             "VectorRetriever", "BM25Retriever"}  # fmt: skip
"""The stages a chain is made of: only fastrag.planning builds them from settings."""

ALLOWED = {
    "fastrag/planning.py": "the planner",
    "fastrag/testing/store_contract.py": "the contract suite builds fixed retrievers over each store under test",
}


def test_every_option_is_a_field_of_the_settings_and_of_the_resolved_settings() -> None:
    names = [o.name for o in OPTIONS]
    assert names == [f.name for f in dataclasses.fields(SearchSettings)]
    assert names == [f.name for f in dataclasses.fields(ResolvedSearchSettings) if f.name != "origins"]


def test_every_option_with_a_flag_is_a_fastrag_search_option() -> None:
    flags = {opt for param in search.params for opt in getattr(param, "opts", ())}
    missing = [o.flag for o in OPTIONS if o.flag and o.flag not in flags]
    assert not missing, f"fastrag search lacks {missing}"


def test_every_http_option_is_a_field_of_the_retrieve_body() -> None:
    missing = [o.name for o in OPTIONS if o.http and o.name not in RetrieveRequest.model_fields]
    assert not missing, f"/retrieve lacks {missing}"
    assert "rerank_model" not in RetrieveRequest.model_fields  # a caller cannot name files on the server


def test_every_option_reads_from_its_fastrag_variable(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    samples = {"str": None, "int": "7", "float": "0.5", "bool": "true", "globs": "docs/**", "any": "embedder"}
    strings = {"mode": "keyword", "fusion": "rrf", "normalization": "dbsf", "group_by": "source_uri",
               "group_score": "sum", "path_filter": "guide", "language": "de", "on_branch_error": "partial"}  # fmt: skip
    for option in OPTIONS:
        text = strings.get(option.name) or samples[option.kind]
        settings = load_settings(env={option.env: text})
        # the mode and the thresholds are Settings' own fields (they were before the other options)
        held = settings if option.name in ("mode", *THRESHOLD_SETTINGS) else settings.search
        assert getattr(held, option.name) is not None, f"{option.env} was not read"


def test_knowledge_base_entrances_take_every_option() -> None:
    for method in (KnowledgeBase.search, KnowledgeBase.search_result, KnowledgeBase.as_retriever, KnowledgeBase.as_tool):
        kinds = {p.kind for p in inspect.signature(method).parameters.values()}
        assert inspect.Parameter.VAR_KEYWORD in kinds, f"{method.__name__} does not take every setting"


def test_the_planning_page_lists_every_option_under_each_name() -> None:
    page = (ROOT / "docs" / "planning.md").read_text(encoding="utf-8")
    for option in OPTIONS:
        row = next((line for line in page.splitlines() if line.startswith(f"| `{option.name}` |")), None)
        assert row is not None, f"docs/planning.md has no row for {option.name}"
        assert f"`{option.env}`" in row
        if option.flag and option.name != "rerank":
            assert f"`{option.flag}`" in row


def test_no_retriever_is_composed_outside_the_planner() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in ALLOWED or rel.startswith("fastrag/retrieval/"):
            continue  # the retrievers themselves (a stage may wrap its own branches)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
                if name in COMPOSERS:
                    found.append(f"{rel}:{node.lineno} {name}")
    assert not found, "retrievers composed outside fastrag.planning:\n" + "\n".join(found)


PROBES = ("callable(getattr(", "hasattr(", "inspect.signature(", "inspect.getattr_static(", "inspect.iscoroutinefunction(")
THIRD_PARTY_PROBES = {
    # (file, probe): why it is not a fastrag capability probe
    ("fastrag/vector_store/milvus/connection.py", "callable(getattr("): "a grpc.RpcError's code(): grpc's own API",
    ("fastrag/vector_store/qdrant/store.py", "inspect.iscoroutinefunction("): "qdrant-client's sync or async client",
    ("fastrag/ingestion/steps/sentence_transformer.py", "hasattr("): "a tokenizers backend's no_padding()",
    ("fastrag/ingestion/steps/embedding.py", "hasattr("): "a tokenizers model's unk_token",
    ("fastrag/deferred.py", "inspect.getattr_static("): (
        "deferred rows are declared by the store's own class: a wrapper that forwards attributes (RetryingStore) "
        "must not count, its inner store's rows are not its own"
    ),
}


def test_no_fastrag_capability_is_probed_by_getattr_hasattr_or_signature() -> None:
    """Optional abilities are protocols in fastrag.protocols, checked with isinstance (STYLE.md); the only
    probes left read third-party objects (listed with the reason)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            code = line.split("#", 1)[0]
            for probe in PROBES:
                if probe in code and (rel, probe) not in THIRD_PARTY_PROBES:
                    found.append(f"{rel}:{number}: {line.strip()}")
    assert not found, "capabilities probed instead of declared:\n" + "\n".join(found)
