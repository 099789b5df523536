"""OpenTelemetry spans (fastrag.tracing), read with the SDK's in-memory exporter: the span tree of a hybrid
search with reranking over a real SQLite knowledge base, of a partial one (a branch's store down), of a failed
one, and that fastrag with ``opentelemetry-api`` alone (no SDK) records nothing and imports no SDK."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("opentelemetry.sdk", reason="the span tests read spans with the OpenTelemetry SDK")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from fastrag import Document, tracing
from fastrag.knowledge_base import KnowledgeBase
from fastrag.retrieval.result import retrieve_result
from fastrag.testing.faults import FaultyStore
from fastrag.vector_store.sqlite import SQLiteVectorStore

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "how does hybrid search fuse BM25 and dense scores?"
DOCS = [
    Document(id="fusion", content="Hybrid search fuses the BM25 list and the dense list by min-max scores.",
             metadata={"source_uri": "a/fusion.md"}),
    Document(id="bm25", content="BM25 ranks documents by term frequency and inverse document frequency.",
             metadata={"source_uri": "a/bm25.md"}),
    Document(id="dense", content="Dense retrieval embeds questions and documents and ranks them by cosine.",
             metadata={"source_uri": "a/dense.md"}),
    Document(id="tea", content="Green tea is steeped at eighty degrees for two minutes.",
             metadata={"source_uri": "b/tea.md"}),
]


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    previous = tracing.use_tracer_provider(provider)
    try:
        yield exported
    finally:
        tracing.use_tracer_provider(previous)
        provider.shutdown()


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = tmp_path / "kb.db"

    async def build() -> None:
        async with KnowledgeBase(f"sqlite:///{path}") as kb:
            await kb.add_documents(DOCS)

    anyio.run(build)
    return str(path)


def tree(spans: tuple[ReadableSpan, ...] | list[ReadableSpan]) -> list[tuple[str, list[Any]]]:
    """``[(name, children)]`` from the roots down, children in start order."""
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in spans:
        children.setdefault(span.parent.span_id if span.parent else None, []).append(span)

    def below(parent: int | None) -> list[tuple[str, list[Any]]]:
        ordered = sorted(children.get(parent, []), key=lambda s: (s.start_time, s.name))
        return [(s.name, below(s.context.span_id)) for s in ordered]

    return below(None)


def named(spans: Any, name: str) -> ReadableSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


def _branches(node: list[tuple[str, list[Any]]]) -> dict[str, list[tuple[str, list[Any]]]]:
    return {name: kids for name, kids in node}


async def test_a_hybrid_reranked_search_is_one_span_with_a_child_per_branch_fusion_rerank_and_store_call(
    exporter: InMemorySpanExporter, db: str
) -> None:
    async with KnowledgeBase(f"sqlite:///{db}") as kb:
        exporter.clear()
        response = await kb.search_result(QUESTION, top_k=3, rerank=True, rerank_model="embedder")
    assert response.strategy == "hybrid+rerank" and len(response.documents) == 3
    spans = exporter.get_finished_spans()
    model = "static-minilm-d256"
    # branches run concurrently: compare each level as a mapping, not by start order
    [(root, stages)] = tree(spans)
    assert root == "retrieval"
    assert [name for name, _ in stages] == ["first_stage", "rerank"]
    first = _branches(_branches(stages)["first_stage"])
    assert set(first) == {"branch vector", "branch bm25", "fusion"}
    assert sorted(n for n, _ in first["branch vector"]) == sorted([f"embeddings {model}", "search_vector"])
    assert [n for n, _ in first["branch bm25"]] == ["search_text"]
    assert all(not kids for _, kids in first["branch vector"] + first["branch bm25"])

    search = named(spans, "retrieval")
    assert search.kind is SpanKind.INTERNAL and search.status.status_code is StatusCode.UNSET
    assert search.instrumentation_scope.name == "fastrag"
    assert dict(search.attributes) == {
        "gen_ai.operation.name": "retrieval",
        "gen_ai.retrieval.top_k": 3,
        "db.system.name": "sqlite",
        "fastrag.search.mode": "hybrid",
        "fastrag.search.strategy": "hybrid+rerank",
        "fastrag.search.hits": 3,
        "fastrag.search.partial": False,
        "fastrag.search.complete": True,
    }
    for operation, rows in (("search_vector", 4), ("search_text", 3)):  # "tea" shares no term with the question
        call = named(spans, operation)
        assert call.kind is SpanKind.CLIENT
        assert dict(call.attributes) == {"db.system.name": "sqlite", "db.operation.name": operation,
                                         "db.response.returned_rows": rows}  # fmt: skip
    embedding = named(spans, f"embeddings {model}")
    assert dict(embedding.attributes) == {"gen_ai.operation.name": "embeddings", "gen_ai.request.model": model}
    assert named(spans, "branch bm25").attributes["fastrag.branch"] == "bm25"
    # every span lies within its parent, in time
    by_id = {s.context.span_id: s for s in spans}
    for span in spans:
        if span.parent is not None:
            parent = by_id[span.parent.span_id]
            assert parent.start_time <= span.start_time and span.end_time <= parent.end_time, span.name


async def test_a_partial_search_names_the_failed_branch_and_marks_its_spans_failed(exporter: InMemorySpanExporter, db: str) -> None:
    store = FaultyStore(SQLiteVectorStore(db), methods={"search_vector"})  # the dense branch's store call fails
    async with KnowledgeBase(store, on_branch_error="partial") as kb:
        exporter.clear()
        response = await kb.search_result(QUESTION, top_k=3)
    assert response.partial and not response.complete and list(response.failed_branches) == ["vector"]
    spans = exporter.get_finished_spans()
    [(root, stages)] = tree(spans)
    assert root == "retrieval" and {name for name, _ in stages} == {"branch vector", "branch bm25", "fusion"}

    search = named(spans, "retrieval")
    assert search.status.status_code is StatusCode.UNSET  # the search answered (partially)
    assert search.attributes["fastrag.search.partial"] is True
    assert search.attributes["fastrag.search.complete"] is False
    assert tuple(search.attributes["fastrag.search.failed_branches"]) == ("vector",)
    assert search.attributes["fastrag.search.hits"] == len(response.documents) > 0
    assert search.attributes["db.system.name"] == "sqlite"  # the store behind the fault injector
    for name in ("branch vector", "search_vector"):
        failed = named(spans, name)
        assert failed.status.status_code is StatusCode.ERROR, name
        assert failed.attributes["error.type"] == "fastrag.errors.BackendUnavailableError"
        assert [e.name for e in failed.events] == ["exception"]
    for name in ("branch bm25", "search_text", "fusion"):
        assert named(spans, name).status.status_code is StatusCode.UNSET, name


async def test_a_failed_search_is_an_error_span_whether_reported_or_raised(exporter: InMemorySpanExporter, db: str) -> None:
    async with KnowledgeBase(FaultyStore(SQLiteVectorStore(db)), on_branch_error="partial") as kb:
        exporter.clear()
        response = await kb.search_result(QUESTION)  # every branch fails: reported, not raised
        assert response.retrieval_failed
        reported = named(exporter.get_finished_spans(), "retrieval")
        exporter.clear()
        with pytest.raises(Exception) as raised:
            await kb.search(QUESTION)
        thrown = named(exporter.get_finished_spans(), "retrieval")
    assert type(raised.value).__name__ == "BackendUnavailableError"
    for search in (reported, thrown):
        assert search.status.status_code is StatusCode.ERROR
        assert search.attributes["error.type"] == "fastrag.errors.BackendUnavailableError"
        assert search.attributes["fastrag.search.complete"] is False
        assert set(search.attributes["fastrag.search.failed_branches"]) == {"vector", "bm25"}
    assert reported.attributes["fastrag.search.hits"] == 0


async def test_a_branch_not_run_is_named_on_the_search_span(exporter: InMemorySpanExporter, db: str) -> None:
    # the shipped model is English: a German question is ranked by BM25 alone
    async with KnowledgeBase(f"sqlite:///{db}") as kb:
        exporter.clear()
        with pytest.warns(UserWarning):
            response = await kb.search_result("hybride Suche", language="de")
    assert list(response.skipped_branches) == ["vector"]
    spans = exporter.get_finished_spans()
    search = named(spans, "retrieval")
    assert tuple(search.attributes["fastrag.search.skipped_branches"]) == ("vector",)
    assert search.attributes["fastrag.search.complete"] is True
    assert not [s for s in spans if s.name == "branch vector"]


async def test_concurrent_searches_are_separate_trees_and_a_wrapped_search_is_one_span(
    exporter: InMemorySpanExporter, db: str
) -> None:
    async with KnowledgeBase(f"sqlite:///{db}") as kb:
        exporter.clear()
        async with anyio.create_task_group() as tg:
            for question in ("hybrid fusion", "green tea", "dense cosine"):
                tg.start_soon(lambda q=question: kb.search(q, top_k=2))
        roots = [s for s in exporter.get_finished_spans() if s.parent is None]
        assert [s.name for s in roots] == ["retrieval"] * 3
        assert len({s.context.trace_id for s in roots}) == 3
        for root in roots:
            inside = [s for s in exporter.get_finished_spans() if s.context.trace_id == root.context.trace_id]
            assert sorted(s.name for s in inside if s.name.startswith("branch")) == ["branch bm25", "branch vector"]
        exporter.clear()
        retriever = kb.as_retriever(top_k=2)
        result = await retrieve_result(retriever, "green tea", k=2)
    assert [d.id for d in result.documents][0] == "tea"
    # retrieve_result over a knowledge base's retriever is one search: the knowledge base joins its span
    search = named(exporter.get_finished_spans(), "retrieval")
    assert search.parent is None
    assert search.attributes["fastrag.search.strategy"] == "hybrid"  # what ran, not the wrapper's name
    assert search.attributes["fastrag.search.hits"] == len(result.documents)


async def test_an_entrance_names_the_data_source(exporter: InMemorySpanExporter, db: str) -> None:
    async with KnowledgeBase(f"sqlite:///{db}") as kb:
        exporter.clear()
        with tracing.data_source("docs"):
            await kb.search("green tea", top_k=1)
        await kb.search("green tea", top_k=1)
    first, second = (s for s in exporter.get_finished_spans() if s.name == "retrieval")
    assert first.attributes["gen_ai.data_source.id"] == "docs"
    assert "gen_ai.data_source.id" not in second.attributes


def test_without_an_sdk_a_search_records_nothing_and_imports_no_sdk(db: str) -> None:
    """``opentelemetry-api`` alone: every span is a no-op; the SDK is never imported (blocked here)."""
    code = textwrap.dedent(
        f"""
        import importlib.abc, importlib.machinery, sys

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.startswith("opentelemetry.sdk"):
                    raise ImportError("blocked: " + name)
                return None

        sys.meta_path.insert(0, Block())
        import anyio
        from opentelemetry import trace
        from fastrag import tracing
        from fastrag.knowledge_base import KnowledgeBase

        seen = []

        async def main():
            async with KnowledgeBase("sqlite:///{db}") as kb:
                with tracing.span("probe") as probe:
                    seen.append(probe)
                docs = await kb.search("green tea", top_k=1)
                response = await kb.search_result("hybrid fusion", top_k=2, rerank=True, rerank_model="embedder")
                return docs, response

        docs, response = anyio.run(main)
        assert seen == [None], seen
        assert docs[0].id == "tea" and response.strategy == "hybrid+rerank" and response.complete
        assert not trace.get_current_span().is_recording()
        assert not [m for m in sys.modules if m.startswith("opentelemetry.sdk")]
        print("ok")
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FASTRAG_", "OTEL_"))}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("ok")
