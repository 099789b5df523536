"""One lifecycle (issue 24, point 6): stores, embedders, rerankers and HTTP clients share
:class:`fastrag.lifecycle.AsyncResource`: ``async with`` returns the object, ``aclose()`` releases once (also
under concurrent calls), an injected ``httpx.AsyncClient`` is never closed and an owned one always is."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

import fastrag
from fastrag.errors import BackendError
from fastrag.lifecycle import AsyncResource

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "fastrag"


class Counting(AsyncResource):
    """Counts its releases; each takes a moment (a checkpoint), so a concurrent close can overlap it."""

    def __init__(self, *, fail: bool = False) -> None:
        self.releases = 0
        self.fail = fail
        self.events: list[str] = []

    async def _aclose(self) -> None:
        self.releases += 1
        self.events.append("release")
        await anyio.sleep(0.01)
        if self.fail:
            raise BackendError("closing failed", store="counting")


class Recorded:
    """An owned client: records when it is closed."""

    def __init__(self, name: str, events: list[str], *, fail: bool = False) -> None:
        self.name, self.events, self.fail, self.closes = name, events, fail, 0

    async def aclose(self) -> None:
        self.closes += 1
        self.events.append(self.name)
        if self.fail:
            raise BackendError(f"{self.name} failed", store=self.name)


# ------------------------------------------------------------------------------------------ the base


async def test_async_with_returns_the_object_and_closes_it() -> None:
    resource = Counting()
    async with resource as entered:
        assert entered is resource
        assert not resource.closed
    assert resource.closed and resource.releases == 1


async def test_aclose_twice_releases_once() -> None:
    resource = Counting()
    await resource.aclose()
    await resource.aclose()
    assert resource.releases == 1 and resource.closed


async def test_concurrent_acloses_release_once_and_each_returns_after_the_release() -> None:
    resource = Counting()
    done: list[int] = []

    async def close() -> None:
        await resource.aclose()
        done.append(resource.releases)

    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(close)
    assert resource.releases == 1
    assert done == [1] * 5  # no call returned before the one release had run


async def test_closed_is_true_from_the_moment_aclose_starts() -> None:
    seen: list[bool] = []

    class Watching(AsyncResource):
        async def _aclose(self) -> None:
            seen.append(self.closed)

    await Watching().aclose()
    assert seen == [True]  # so a store refuses new calls while it releases


async def test_a_failed_close_raises_once_and_is_not_retried() -> None:
    resource = Counting(fail=True)
    with pytest.raises(BackendError, match="closing failed"):
        await resource.aclose()
    await resource.aclose()  # not released again: a half-released resource stays closed
    assert resource.releases == 1 and resource.closed


async def test_a_failed_close_raises_in_the_closing_call_only() -> None:
    resource = Counting(fail=True)
    outcomes: list[str] = []

    async def close() -> None:
        try:
            await resource.aclose()
            outcomes.append("returned")
        except BackendError:
            outcomes.append("raised")

    async with anyio.create_task_group() as tg:
        tg.start_soon(close)
        await anyio.sleep(0)  # the first call is now releasing
        tg.start_soon(close)
    assert sorted(outcomes) == ["raised", "returned"] and resource.releases == 1


async def test_owned_clients_close_after_the_release_newest_first_and_only_they() -> None:
    resource = Counting()
    first = resource._own(Recorded("first", resource.events))
    second = resource._own(Recorded("second", resource.events))
    injected = Recorded("injected", resource.events)  # passed in by a caller: never recorded
    await resource.aclose()
    await resource.aclose()
    assert resource.events == ["release", "second", "first"]
    assert (first.closes, second.closes, injected.closes) == (1, 1, 0)


async def test_owned_clients_close_even_when_the_release_or_another_one_fails() -> None:
    resource = Counting(fail=True)
    first = resource._own(Recorded("first", resource.events))
    resource._own(Recorded("second", resource.events, fail=True))
    with pytest.raises(BackendError):
        await resource.aclose()
    assert resource.events == ["release", "second", "first"] and first.closes == 1


async def test_a_failed_open_closes_the_resource_unless_it_may_be_opened_again() -> None:
    class Opening(Counting):
        async def _aopen(self) -> None:
            raise BackendError("cannot open", store="opening")

    class Reopenable(Opening):
        _close_if_enter_fails = False

    closing, reopenable = Opening(), Reopenable()
    for resource in (closing, reopenable):
        with pytest.raises(BackendError, match="cannot open"):
            async with resource:
                pytest.fail("entered")
    assert closing.closed and closing.releases == 1  # __aexit__ never runs: what it held is released
    assert not reopenable.closed and reopenable.releases == 0


def test_the_base_is_exported_from_the_package() -> None:
    assert fastrag.AsyncResource is AsyncResource and "AsyncResource" in fastrag.__all__


# --------------------------------------------------------------------- owned and injected HTTP clients


def _llm(http: httpx.AsyncClient | None) -> Any:
    from fastrag.llm import OpenAICompatibleLLM

    return OpenAICompatibleLLM(base_url="http://127.0.0.1:9/v1", model="m", api_key="k", http_client=http)


def _openai_embedder(http: httpx.AsyncClient | None) -> Any:
    from fastrag.ingestion.steps.openai_compatible import OpenAICompatibleEmbedder

    return OpenAICompatibleEmbedder("m", base_url="http://127.0.0.1:9/v1", api_key="k", http_client=http, languages={"en"})


def _cohere_embedder(http: httpx.AsyncClient | None) -> Any:
    from fastrag.ingestion.steps.cohere import CohereEmbedder

    return CohereEmbedder("embed-v4.0", api_key="k", base_url="http://127.0.0.1:9", httpx_client=http, languages={"en"})


def _cohere_reranker(http: httpx.AsyncClient | None) -> Any:
    from fastrag.rerankers.cohere import CohereReranker

    return CohereReranker(api_key="k", base_url="http://127.0.0.1:9", httpx_client=http)


PROVIDERS = pytest.mark.parametrize("build", [_llm, _openai_embedder, _cohere_embedder, _cohere_reranker],
                                    ids=["llm", "openai-embedder", "cohere-embedder", "cohere-reranker"])  # fmt: skip


@PROVIDERS
async def test_an_injected_http_client_is_used_and_never_closed(build: Any) -> None:
    async with httpx.AsyncClient() as http:
        async with build(http) as client:
            assert client._http is http
        await client.aclose()
        assert client.closed and not http.is_closed


@PROVIDERS
async def test_an_owned_http_client_is_closed_once_by_concurrent_acloses(build: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    client = build(None)
    own = client._http
    closes = 0
    real = own.aclose

    async def counting() -> None:
        nonlocal closes
        closes += 1
        await real()

    monkeypatch.setattr(own, "aclose", counting)
    async with client as entered:
        assert entered is client and not own.is_closed
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(client.aclose)
    await client.aclose()
    assert own.is_closed and closes == 1 and client.closed


# --------------------------------------------------------------------------------- the package's classes


# Classes of fastrag/ that keep a hand-written lifecycle, each with its reason.
ALLOWED_HAND_WRITTEN = {
    ("fastrag/ingestion/worker.py", "ParserProcess"): (
        "a handle on a child process that parse() restarts on demand (after a timeout, a crash, a reply asking "
        "for a fresh worker): aclose() stops the worker running now and may run again after the next parse "
        "started another; AsyncResource closes once"
    ),
}
LIFECYCLE_METHODS = {"__aenter__", "__aexit__", "aclose"}


def _is_protocol(node: ast.ClassDef) -> bool:
    return any(ast.unparse(base).split("[")[0] in ("Protocol", "typing.Protocol") for base in node.bases)


def hand_written_lifecycles() -> dict[tuple[str, str], set[str]]:
    """``{(file, class): the lifecycle methods it defines}`` for every class of fastrag/ but the base and the
    protocols (``AsyncCloseable`` declares ``aclose``)."""
    found: dict[tuple[str, str], set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef) or _is_protocol(node):
                continue
            if (rel, node.name) == ("fastrag/lifecycle.py", "AsyncResource"):
                continue
            defined = {
                item.name for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name in LIFECYCLE_METHODS
            }  # fmt: skip
            if defined:
                found[(rel, node.name)] = defined
    return found


def test_no_class_but_the_base_writes_its_own_async_with_or_aclose() -> None:
    found = hand_written_lifecycles()
    new = {key: sorted(methods) for key, methods in found.items() if key not in ALLOWED_HAND_WRITTEN}
    assert not new, f"inherit fastrag.lifecycle.AsyncResource and implement _aclose/_aopen instead: {new}"
    gone = sorted(set(ALLOWED_HAND_WRITTEN) - set(found))
    assert not gone, f"these classes use the base now: remove them from ALLOWED_HAND_WRITTEN: {gone}"


_ROLE = re.compile(r"[A-Z]\w*(Store|Embedder|Reranker|LLM)")


def resource_classes() -> list[type]:
    """Every public class of fastrag/ named as a store, embedder, reranker or LLM, protocols aside."""
    classes = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and _ROLE.fullmatch(node.name) and not _is_protocol(node):
                classes.append(getattr(importlib.import_module(module), node.name))
    return classes


def test_every_store_embedder_reranker_and_llm_is_an_async_resource() -> None:
    classes = resource_classes()
    names = {cls.__name__ for cls in classes}
    assert {"SQLiteVectorStore", "PgVectorStore", "MilvusVectorStore", "QdrantVectorStore", "ChromaVectorStore",
            "OpenSearchVectorStore", "Model2VecEmbedder", "OpenAICompatibleEmbedder", "CohereEmbedder",
            "SentenceTransformerEmbedder", "CohereReranker", "CrossEncoderReranker", "EmbedderReranker",
            "OpenAICompatibleLLM", "ScopedStore", "InMemoryStore"} <= names  # fmt: skip
    outside = sorted(f"{cls.__module__}.{cls.__name__}" for cls in classes if not issubclass(cls, AsyncResource))
    assert not outside, f"not AsyncResource subclasses: {outside}"
    for name in ("OpenAICompatibleClient", "CohereClient", "KnowledgeBase", "SectionIndex", "EmbeddingCache"):
        module = {"OpenAICompatibleClient": "fastrag.providers.openai", "CohereClient": "fastrag.providers.cohere",
                  "KnowledgeBase": "fastrag.knowledge_base", "SectionIndex": "fastrag.sections",
                  "EmbeddingCache": "fastrag.ingestion.steps"}[name]  # fmt: skip
        assert issubclass(getattr(importlib.import_module(module), name), AsyncResource), name
