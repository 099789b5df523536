"""KnowledgeBase: settings precedence, both indexes in step, persistence, declared fields, tenant isolation in
every search mode, and the "auto" strategy's thresholds."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastrag.config import open_embedder
from fastrag.errors import (
    BackendError,
    ConfigurationError,
    FilterError,
    InvalidParameterError,
    UnknownParameterError,
    UnsupportedFilterError,
)
from fastrag.filters import field
from fastrag.knowledge_base import (
    AUTO_DIRECT_MAX,
    AUTO_WIDE_RETRIEVAL_K,
    MAX_RANK_CONSTANT,
    MAX_WEIGHT,
    SYSTEM_DEFAULTS,
    KnowledgeBase,
    SearchSettings,
    resolve_settings,
)
from fastrag.models import Document
from fastrag.retrieval.hybrid import LEXICAL_WEIGHT_BY_EMBEDDER
from fastrag.sections import SectionIndex
from fastrag.vector_store.sqlite import SQLiteVectorStore

pytestmark = pytest.mark.anyio


class CountingEmbedder:
    """The shipped static model, counting the texts it is asked to embed for documents."""

    def __init__(self) -> None:
        self.inner = open_embedder()
        self.document_texts = 0

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    async def embed_documents(self, texts):
        self.document_texts += len(texts)
        return await self.inner.embed_documents(texts)

    async def embed_query(self, text):
        return await self.inner.embed_query(text)


def corpus(n: int, prefix: str = "doc") -> list[Document]:
    topics = ["solar panels", "tea brewing", "bicycle repair", "tax returns", "garden roses"]
    return [
        Document(id=f"{prefix}{i}", content=f"notes about {topics[i % len(topics)]} number {i}",
                 metadata={"n": i})
        for i in range(n)
    ]  # fmt: skip


# ------------------------------------------------------------------------------------------ precedence


def test_resolution_takes_request_then_knowledge_base_then_defaults() -> None:
    kb = SearchSettings(search_mode="keyword", top_k=7, vector_weight=0.5)
    request = SearchSettings(top_k=3)
    resolved = resolve_settings(request, kb)
    assert (resolved.top_k, resolved.origin("top_k")) == (3, "request")
    assert (resolved.search_mode, resolved.origin("search_mode")) == ("keyword", "knowledge_base")
    assert (resolved.vector_weight, resolved.origin("vector_weight")) == (0.5, "knowledge_base")
    # a weight set nowhere comes from the embedder's row of fastrag.defaults (an unnamed embedder: the
    # dense models' row, z-score BM25 0.55), the table HybridRetriever(fusion=None) reads too
    assert (resolved.keyword_weight, resolved.origin("keyword_weight")) == (0.55, "default:embedder")
    assert resolve_settings(SearchSettings(search_mode="vector"), kb).search_mode == "vector"
    # the system defaults: hybrid, weighted fusion, 20 results; the fusion's numbers from the embedder's row
    plain = resolve_settings()
    assert (plain.mode, plain.fusion, plain.top_k) == ("hybrid", "weighted", 20)
    assert (plain.normalization, plain.vector_weight, plain.keyword_weight, plain.candidate_k) == (
        "z_score", 0.45, 0.55, 200)
    measured = {"normalization", "fusion_floor", "vector_weight", "keyword_weight", "candidate_k"}
    assert all(plain.origin(name) == ("default:embedder" if name in measured else "default") for name in plain.origins)


async def test_search_honours_the_precedence_order() -> None:
    docs = corpus(25)
    async with KnowledgeBase("sqlite:///:memory:", settings=SearchSettings(top_k=3, search_mode="keyword")) as kb:
        await kb.add_documents(docs)
        assert len(await kb.search("notes")) == 3  # knowledge base
        assert len(await kb.search("notes", top_k=2)) == 2  # request wins
        response = await kb.search_result("notes", search_mode="vector")
        assert response.strategy == "vector" and response.settings.origin("search_mode") == "request"
        assert (await kb.search_result("notes")).strategy == "keyword"
    async with KnowledgeBase("sqlite:///:memory:") as kb:
        await kb.add_documents(docs)
        response = await kb.search_result("notes")
        assert len(response.documents) == 20 and response.strategy == "hybrid"  # system defaults
        assert response.settings.origin("top_k") == "default"


async def test_request_fusion_weights_change_the_ranking() -> None:
    # "tea" appears only in t1; the dense branch alone ranks by embedding similarity
    docs = [Document(id="t1", content="green tea leaves"), Document(id="c1", content="coffee beans roasting")]
    async with KnowledgeBase("sqlite:///:memory:") as kb:
        await kb.add_documents(docs)
        keyword_only = await kb.search("tea", vector_weight=0.0, keyword_weight=1.0, top_k=2)
        assert [d.id for d in keyword_only][:1] == ["t1"]
        assert keyword_only[0].branches.keys() == {"bm25"}
        rrf = await kb.search_result("tea", fusion="rrf", rank_constant=10)
        assert rrf.settings.fusion == "rrf" and rrf.documents[0].score <= 2 / 11


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"search_mode": "fuzzy"}, InvalidParameterError),
        ({"vector_weight": -0.1}, InvalidParameterError),
        ({"keyword_weight": float("nan")}, InvalidParameterError),
        ({"vector_weight": 0, "keyword_weight": 0}, InvalidParameterError),
        ({"top_k": 0}, InvalidParameterError),
        ({"top_k": True}, InvalidParameterError),
        ({"retrieval_k": 10_001}, InvalidParameterError),
        ({"fusion": "max"}, InvalidParameterError),
        ({"rank_constant": 0}, InvalidParameterError),
        ({"vector_weight": 1e308, "keyword_weight": 1e308}, InvalidParameterError),  # overflowed in fusion
        ({"keyword_weight": MAX_WEIGHT * 2}, InvalidParameterError),
        ({"rank_constant": 1e308}, InvalidParameterError),
        ({"rank_constant": MAX_RANK_CONSTANT * 2}, InvalidParameterError),
        ({"auto_direct_max": 10_001, "auto_rerank_min": 20_000}, InvalidParameterError),
        ({"rerank": True, "rerank_model": "embedder", "retrieval_k": 5, "top_k": 10}, InvalidParameterError),
        ({"auto_direct_max": 100, "auto_rerank_min": 50}, InvalidParameterError),
        ({"rerank_model": "cohere:"}, InvalidParameterError),
        ({"topk": 5}, UnknownParameterError),
    ],
)
async def test_invalid_settings_are_rejected(settings, error) -> None:
    async with KnowledgeBase("sqlite:///:memory:") as kb:
        await kb.add_documents(corpus(3))
        with pytest.raises(error):
            await kb.search("notes", **settings)
    # the same at the knowledge-base layer is a configuration error
    with pytest.raises(ConfigurationError):
        KnowledgeBase.from_config({"store": "sqlite:///:memory:", **settings})


def test_retrieval_k_from_defaults_is_raised_to_top_k_when_reranking() -> None:
    resolved = resolve_settings(SearchSettings(rerank=True, rerank_model="embedder", top_k=60),
                                embedder_name="static-minilm-d256")  # fmt: skip
    assert resolved.retrieval_k == resolved.candidate_k == 60  # the shipped model's default, 40, is raised
    assert resolve_settings(embedder_name="static-minilm-d256").candidate_k == 40
    with pytest.raises(InvalidParameterError, match="candidate_k >= top_k"):
        resolve_settings(SearchSettings(rerank=True, rerank_model="embedder", top_k=60, retrieval_k=50))


async def test_search_result_reports_a_failed_store_and_search_raises() -> None:
    class Broken(SQLiteVectorStore):
        async def search_vector(self, embedding, *, k, filter=None):  # noqa: A002
            raise BackendError("disk on fire", store="broken")

    async with Broken(":memory:") as store, KnowledgeBase(store, settings=SearchSettings(search_mode="vector")) as kb:
        await kb.add_documents(corpus(3))
        response = await kb.search_result("notes")
        assert response.retrieval_failed and isinstance(response.error, BackendError)
        assert response.documents == ()
        with pytest.raises(BackendError):
            await kb.search("notes")
        partial = await kb.search_result("notes", search_mode="hybrid")
        assert partial.retrieval_failed  # a hybrid fails as a whole by default


# ------------------------------------------------------------------------------- both indexes in step


async def test_writes_deletes_and_clear_keep_vector_and_bm25_stores_in_step() -> None:
    async with SQLiteVectorStore(":memory:") as dense, SQLiteVectorStore(":memory:") as bm25:
        async with KnowledgeBase(dense, lexical_store=bm25) as kb:
            await kb.add_documents(corpus(6))
            assert await dense.count() == await bm25.count() == 6
            assert await kb.count() == 6

            gone = await kb.search("bicycle repair number 2", search_mode="keyword", top_k=1)
            assert [d.id for d in gone] == ["doc2"]
            assert await kb.delete(ids=["doc2"]) == 1
            assert await dense.get(ids=["doc2"]) == [] and await bm25.get(ids=["doc2"]) == []
            for mode in ("keyword", "vector", "hybrid"):
                assert "doc2" not in [d.id for d in await kb.search("bicycle repair number 2", search_mode=mode)]

            assert await kb.delete(filter=field("n") >= 4) == 2
            assert await dense.count() == await bm25.count() == 3
            await kb.add_documents(corpus(2, prefix="more"), user_id="alice")
            assert await kb.clear(user_id="alice") == 2
            assert await dense.count() == await bm25.count() == 3
            assert await kb.clear() == 3
            assert await dense.count() == await bm25.count() == 0
        # injected stores are the caller's: still open after the knowledge base closed
        assert await dense.count() == 0


async def test_sources_sync_writes_both_stores(tmp_path: Path) -> None:
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "a.md").write_text("# Alpha\n\nSolar panels turn light into power.\n")
    (folder / "b.md").write_text("# Beta\n\nTea is brewed with hot water.\n")
    async with KnowledgeBase(f"sqlite:///{tmp_path}/dense.db", lexical_store=f"sqlite:///{tmp_path}/bm25.db",
                             sources=[folder]) as kb:  # fmt: skip
        report = await kb.sync()
        assert report.files_indexed == 2
        assert await kb.store.count() == await kb.lexical_store.count() == 2
        (folder / "b.md").unlink()
        assert (await kb.sync()).files_pruned == 1
        assert await kb.store.count() == await kb.lexical_store.count() == 1


async def test_reopening_a_persisted_knowledge_base_embeds_nothing_again(tmp_path: Path) -> None:
    folder = tmp_path / "src"
    folder.mkdir()
    for i in range(3):
        (folder / f"f{i}.md").write_text(f"# File {i}\n\nParagraph about topic {i}.\n")
    url = f"sqlite:///{tmp_path}/kb.db"

    first = CountingEmbedder()
    async with KnowledgeBase(url, embedder=first, sources=[folder]) as kb:
        await kb.sync()
        await kb.add_documents([Document(id="note", content="a hand-written note")], user_id="alice")
        total = await kb.count()
    assert first.document_texts == total == 4

    again = CountingEmbedder()
    async with KnowledgeBase(url, embedder=again, sources=[folder]) as kb:
        assert await kb.count() == 4
        assert [d.id for d in await kb.search("hand-written note", user_id="alice", top_k=1)] == ["note"]
        report = await kb.sync()
        assert (report.files_unchanged, report.files_indexed) == (3, 0)
        assert again.document_texts == 0  # nothing was embedded
        (folder / "f1.md").write_text("# File 1\n\nRewritten paragraph.\n")
        report = await kb.sync()
        assert (report.files_unchanged, report.files_indexed) == (2, 1)
        assert again.document_texts == 1


async def test_store_built_with_another_model_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/kb.db"
    async with KnowledgeBase(url) as kb:
        await kb.add_documents(corpus(1))

    class Other(CountingEmbedder):
        @property
        def name(self) -> str:
            return "another-model"

    with pytest.raises(ConfigurationError, match="another-model"):
        async with KnowledgeBase(url, embedder=Other()):
            pass


# ------------------------------------------------------------------------------------------- fields

FIELDS = {"year": "long", "price": "double", "published": "date", "tags": "list", "category": "string",
          "draft": "boolean"}  # fmt: skip


def typed_docs() -> list[Document]:
    return [
        Document(id="a", content="annual report on solar energy",
                 metadata={"year": 2021, "price": 9.5, "published": "2021-03-01", "tags": ["energy"],
                           "category": "report", "draft": False}),
        Document(id="b", content="solar energy blog post",
                 metadata={"year": 2024, "price": 0, "published": "2024-06-15", "tags": ["energy", "blog"],
                           "category": "blog", "draft": True}),
    ]  # fmt: skip


async def test_declared_fields_accept_fitting_filters() -> None:
    async with KnowledgeBase("sqlite:///:memory:", fields=FIELDS) as kb:
        await kb.add_documents(typed_docs())
        ids = lambda docs: sorted(d.id for d in docs)  # noqa: E731
        assert ids(await kb.search("solar", filter=field("year") >= 2022)) == ["b"]
        assert ids(await kb.search("solar", filter={"greaterThan": {"key": "published", "value": "2022-01-01"}})) == ["b"]
        assert ids(await kb.search("solar", filter=field("tags").list_contains("blog"))) == ["b"]
        assert ids(await kb.search("solar", filter=field("price") < 1.5)) == ["b"]
        assert ids(await kb.search("solar", filter=(field("category") == "report") & (field("draft") == False))) == ["a"]  # noqa: E712
        assert await kb.count(filter=field("source_uri") == "nowhere") == 0  # built-in fields are declared


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        (field("colour") == "red", ["'colour'", "not declared", "'year'", "'category'"]),
        (field("category") > 5, ["greaterThan", "'category'", "string"]),
        (field("category") >= "2024-01-01", ["greaterThanOrEquals", "range"]),
        ({"andAll": [{"equals": {"key": "year", "value": 2021}}, {"lessThan": {"key": "tags", "value": 3}}]},
         ["lessThan", "'tags'"]),
        (field("year") == "2021", ["'year'", "integer"]),
        (field("price") >= "2021-01-01", ["'price'", "number"]),
        (field("published") > 2021, ["'published'", "ISO-8601"]),
        (field("tags") == "energy", ["listContains"]),
        (field("year").starts_with("20"), ["startsWith", "string fields"]),
        (field("draft") == 1, ["'draft'", "true or false"]),
        (field("category").one_of(["blog", 3]), ["'category'", "a string"]),
    ],
)
async def test_filters_that_do_not_fit_the_declared_fields_are_rejected(bad, words) -> None:
    async with KnowledgeBase("sqlite:///:memory:", fields=FIELDS) as kb:
        await kb.add_documents(typed_docs())
        for call in (kb.search("solar", filter=bad), kb.count(filter=bad), kb.delete(filter=bad)):
            with pytest.raises(FilterError) as caught:
                await call
            for word in words:
                assert word in str(caught.value)
        assert await kb.count() == 2  # the rejected delete removed nothing


async def test_filter_error_names_the_path_of_the_bad_node() -> None:
    async with KnowledgeBase("sqlite:///:memory:", fields=FIELDS) as kb:
        with pytest.raises(FilterError) as caught:
            await kb.count(filter={"orAll": [{"equals": {"key": "year", "value": 1}},
                                             {"equals": {"key": "nope", "value": 1}}]})  # fmt: skip
        assert caught.value.path == "$.orAll[1].equals.key"


@pytest.mark.parametrize(
    ("metadata", "name"),
    [({"year": "2021"}, "year"), ({"price": "cheap"}, "price"), ({"published": "last week"}, "published"),
     ({"tags": "energy"}, "tags"), ({"category": 3}, "category"), ({"draft": "no"}, "draft"),
     ({"chunk_index": "0"}, "chunk_index"), ({"user_id": True}, "user_id")],
)  # fmt: skip
async def test_writes_with_wrongly_typed_declared_fields_are_rejected(metadata, name) -> None:
    async with KnowledgeBase("sqlite:///:memory:", fields=FIELDS) as kb:
        with pytest.raises(InvalidParameterError) as caught:
            await kb.add_documents([typed_docs()[0], Document(id="bad-doc", content="x", metadata=metadata)])
        assert "'bad-doc'" in str(caught.value) and repr(name) in str(caught.value)
        assert await kb.count() == 0  # nothing of the batch was written


async def test_without_fields_nothing_is_checked() -> None:
    async with KnowledgeBase("sqlite:///:memory:") as kb:
        await kb.add_documents([Document(id="x", content="solar", metadata={"year": "twenty"})])
        assert await kb.search("solar", filter=field("colour") == "red") == []
        assert await kb.count(filter=field("year") == "twenty") == 1


def test_bad_field_declarations_are_configuration_errors() -> None:
    for fields in ({"year": "integer"}, {"score": "double"}, {"chunk_index": "string"}, ["year"]):
        with pytest.raises(ConfigurationError):
            KnowledgeBase("sqlite:///:memory:", fields=fields)


# ---------------------------------------------------------------------------------------- tenancy

ALICE_TEXT = "alice keeps a secret: tomatoes grow in her greenhouse"  # shares "secret" with bob's text
BOB_TEXT = "bob secret vault combination four four one seven"

MODES = {
    "vector": {"search_mode": "vector"},
    "keyword": {"search_mode": "keyword"},
    "hybrid": {"search_mode": "hybrid"},
    "hybrid-rrf": {"search_mode": "hybrid", "fusion": "rrf"},
    "auto-direct": {"search_mode": "auto"},
    "auto-hybrid": {"search_mode": "auto", "auto_direct_max": 0},
    "auto-rerank": {"search_mode": "auto", "auto_direct_max": 0, "auto_rerank_min": 1, "rerank_model": "embedder"},
    "hybrid+rerank": {"search_mode": "hybrid", "rerank": True, "rerank_model": "embedder"},
    "vector+rerank": {"search_mode": "vector", "rerank": True, "rerank_model": "embedder"},
}


@pytest.fixture
async def shared_kb():
    async with KnowledgeBase("sqlite:///:memory:") as kb:
        await kb.add_documents([Document(id="note", content=ALICE_TEXT), Document(id="a2", content="alice diary")],
                               user_id="alice")  # fmt: skip
        await kb.add_documents([Document(id="note", content=BOB_TEXT)], user_id="bob")
        # the same value under another key is another tenant
        await kb.add_documents([Document(id="note", content="agent named alice: " + BOB_TEXT)], agent_id="alice")
        yield kb


@pytest.mark.parametrize("mode", list(MODES))
async def test_alice_never_sees_bobs_documents_in_any_mode(shared_kb, mode) -> None:
    settings = MODES[mode]
    response = await shared_kb.search_result(BOB_TEXT, user_id="alice", **settings)
    assert not response.retrieval_failed
    assert response.documents, "alice's own documents are still found"
    assert {d.metadata["user_id"] for d in response.documents} == {"alice"}
    assert BOB_TEXT not in " ".join(d.content for d in response.documents)
    expected = {"auto-direct": "direct", "auto-hybrid": "hybrid", "auto-rerank": "hybrid+rerank"}
    assert response.strategy == expected.get(mode, mode.replace("-rrf", ""))
    # and bob finds his own document with the same query
    bob = await shared_kb.search(BOB_TEXT, user_id="bob", **settings)
    assert [(d.id, d.content) for d in bob] == [("note", BOB_TEXT)]


async def test_tenants_writing_the_same_id_never_overwrite_each_other(shared_kb) -> None:
    assert await shared_kb.count() == 4
    assert (await shared_kb.count(user_id="alice"), await shared_kb.count(user_id="bob")) == (2, 1)
    assert await shared_kb.count(agent_id="alice") == 1  # user_id="alice" and agent_id="alice" are two tenants
    for tenant, text in (({"user_id": "alice"}, ALICE_TEXT), ({"user_id": "bob"}, BOB_TEXT)):
        found = await shared_kb.search("secret", scope=tenant, search_mode="keyword")
        assert [(d.id, d.content) for d in found] == [("note", text)]


async def test_deletes_by_one_tenant_cannot_remove_anothers_documents(shared_kb) -> None:
    assert await shared_kb.delete(ids=["note"], user_id="alice") == 1
    assert await shared_kb.delete(filter=field("user_id") == "bob", user_id="alice") == 0
    assert await shared_kb.delete(ids=["user_id=bob::note"], user_id="alice") == 0
    assert await shared_kb.clear(user_id="alice") == 1
    assert await shared_kb.count(user_id="bob") == 1 and await shared_kb.count(agent_id="alice") == 1
    assert [d.content for d in await shared_kb.search(BOB_TEXT, user_id="bob")] == [BOB_TEXT]


async def test_nested_scopes_and_a_wider_scope_see_qualified_ids() -> None:
    async with KnowledgeBase("sqlite:///:memory:") as kb:
        await kb.add_documents([Document(id="m", content="remember the milk")], user_id="alice", agent_id="a1")
        await kb.add_documents([Document(id="m", content="remember the eggs")], user_id="alice", agent_id="a2")
        a1 = await kb.search("remember", user_id="alice", agent_id="a1", search_mode="keyword")
        assert [(d.id, d.content) for d in a1] == [("m", "remember the milk")]
        wide = await kb.search("remember", user_id="alice", search_mode="keyword")
        assert sorted(d.id for d in wide) == ["agent_id=a1::m", "agent_id=a2::m"]
        # an id the wider scope showed can be handed back to it
        assert await kb.delete(ids=["agent_id=a2::m"], user_id="alice") == 1
        assert [d.content for d in await kb.search("remember", scope={"user_id": "alice"}, search_mode="keyword")] == [
            "remember the milk"]
        assert await kb.count(agent_id="a2") == 0


async def test_bad_scopes_are_rejected() -> None:
    async with KnowledgeBase("sqlite:///:memory:", require_scope=True) as kb:
        with pytest.raises(InvalidParameterError, match="requires a scope"):
            await kb.search("anything")
        with pytest.raises(InvalidParameterError, match="requires a scope"):
            await kb.clear()
        for scope in ({"user_id": ""}, {"user_id": True}, {"source_uri": "x"}, {"bad key": "x"}, {"k": 1.5}):
            with pytest.raises(InvalidParameterError):
                await kb.count(scope=scope)
        with pytest.raises(InvalidParameterError, match="contradicts"):
            await kb.count(user_id="alice", scope={"user_id": "bob"})
        with pytest.raises(InvalidParameterError, match="this call writes"):
            await kb.add_documents([Document(id="x", content="y", metadata={"user_id": "bob"})], user_id="alice")
        with pytest.raises(InvalidParameterError, match="scoped id"):
            await kb.add_documents([Document(id="user_id=bob::x", content="y")], user_id="alice")


# ------------------------------------------------------------------------------------------- auto


async def auto(kb, **settings):
    return await kb.search_result("notes about tea", search_mode="auto", **settings)


async def test_auto_picks_direct_at_and_below_the_direct_threshold() -> None:
    async with KnowledgeBase("sqlite:///:memory:") as kb:
        await kb.add_documents(corpus(AUTO_DIRECT_MAX))
        at = await auto(kb)
        assert (at.strategy, at.corpus_size) == ("direct", AUTO_DIRECT_MAX)
        await kb.add_documents(corpus(1, prefix="extra"))
        above = await auto(kb)
        assert (above.strategy, above.corpus_size) == ("hybrid", AUTO_DIRECT_MAX + 1)
        assert above.settings.retrieval_k == 40  # below the rerank threshold nothing widens


async def test_auto_thresholds_come_from_settings_and_count_the_callers_scope() -> None:
    async with KnowledgeBase("sqlite:///:memory:", settings=SearchSettings(auto_direct_max=5, auto_rerank_min=8)) as kb:
        await kb.add_documents(corpus(5, prefix="a"), user_id="alice")
        await kb.add_documents(corpus(8, prefix="b"), user_id="bob")
        assert (await auto(kb, user_id="alice")).strategy == "direct"  # 5 of alice's, not 13
        assert (await auto(kb, user_id="alice", auto_direct_max=4)).strategy == "hybrid"
        # filters count too: only 2 of bob's 8 documents have n >= 6
        assert (await auto(kb, user_id="bob", filter=field("n") >= 6)).corpus_size == 2

        bob = await auto(kb, user_id="bob")  # 8 = auto_rerank_min, but no reranker: wider candidate lists
        assert (bob.strategy, bob.settings.retrieval_k) == ("hybrid", AUTO_WIDE_RETRIEVAL_K)
        assert (await auto(kb, user_id="bob", retrieval_k=50)).settings.retrieval_k == 50  # explicit wins
        with_reranker = await auto(kb, user_id="bob", rerank_model="embedder")
        assert with_reranker.strategy == "hybrid+rerank"
        assert {"first_stage", "reranker"} <= with_reranker.documents[0].branches.keys()
        below = await auto(kb, user_id="bob", rerank_model="embedder", auto_rerank_min=9)
        assert below.strategy == "hybrid"
        off = await auto(kb, user_id="bob", rerank_model="embedder", rerank=False)  # an explicit no wins
        assert off.strategy == "hybrid"
        assert (await auto(kb, user_id="alice", rerank=True, rerank_model="embedder")).strategy == "direct+rerank"


# ---------------------------------------------------------------------------------- configuration


def test_from_config_builds_settings_and_rejects_unknown_keys(tmp_path: Path) -> None:
    kb = KnowledgeBase.from_config({"store": "sqlite:///:memory:", "search_mode": "keyword", "top_k": 5,
                                    "fields": {"year": "long"}, "sources": ["docs"]})  # fmt: skip
    assert kb.settings == SearchSettings(search_mode="keyword", top_k=5)
    assert kb.sources == ("docs",) and kb.fields["year"] == "long"
    with pytest.raises(ConfigurationError, match="top_kk"):
        KnowledgeBase.from_config({"top_kk": 5})
    with pytest.raises(ConfigurationError, match="sources"):
        KnowledgeBase.from_config({"sources": "docs"})

    path = tmp_path / "kb.toml"
    path.write_text('[knowledge_base]\nstore = "sqlite:///:memory:"\nsearch_mode = "auto"\nvector_weight = 0.2\n'
                    '[knowledge_base.fields]\nyear = "long"\n')  # fmt: skip
    kb = KnowledgeBase.from_toml(path)
    assert kb.resolve().search_mode == "auto" and kb.resolve().vector_weight == 0.2
    path.write_text('[knowledge_base]\nmode = "auto"\ncandidate_k = 7\n')  # the canonical names
    assert (KnowledgeBase.from_toml(path).resolve().mode, KnowledgeBase.from_toml(path).resolve().retrieval_k) == ("auto", 7)
    path.write_text('[knowledge_base]\nmodes = "auto"\n')
    with pytest.raises(ConfigurationError, match="modes"):
        KnowledgeBase.from_toml(path)
    path.write_text("[other]\n")
    with pytest.raises(ConfigurationError, match="no \\[knowledge_base\\]"):
        KnowledgeBase.from_toml(path)


async def test_keyword_mode_over_a_store_without_bm25_asks_for_a_lexical_store() -> None:
    class DenseOnly:
        def __init__(self) -> None:
            self.inner = SQLiteVectorStore(":memory:")

        async def upsert(self, documents, *, embeddings=None):
            await self.inner.upsert(documents, embeddings=embeddings)

        async def search_vector(self, embedding, *, k, filter=None):  # noqa: A002
            return await self.inner.search_vector(embedding, k=k, filter=filter)

        async def delete(self, *, ids=None, filter=None):  # noqa: A002
            return await self.inner.delete(ids=ids, filter=filter)

        async def count(self, *, filter=None):  # noqa: A002
            return await self.inner.count(filter=filter)

    store = DenseOnly()
    with pytest.raises(ConfigurationError, match="lexical_store"):
        await KnowledgeBase(store).open()
    async with KnowledgeBase(store, settings=SearchSettings(search_mode="vector")) as kb:
        await kb.add_documents(corpus(2))
        assert len(await kb.search("notes")) == 2
        with pytest.raises(ConfigurationError, match="lexical_store"):
            await kb.search("notes", search_mode="keyword")
    await store.inner.aclose()


# -------------------------------------------------------------------- embedder-aware default weights


class NamedEmbedder(CountingEmbedder):
    """The shipped model's vectors under another name (an embedder the weight table does not list)."""

    @property
    def name(self) -> str:
        return "some-other-model"


def test_default_weights_follow_the_measured_table_for_shipped_static_models() -> None:
    assert LEXICAL_WEIGHT_BY_EMBEDDER, "the table hybrid.py uses"
    for name, lexical in LEXICAL_WEIGHT_BY_EMBEDDER.items():
        resolved = resolve_settings(embedder_name=name)
        assert resolved.keyword_weight == pytest.approx(lexical)
        assert resolved.vector_weight == pytest.approx(1 - lexical)
        assert resolved.origin("keyword_weight") == resolved.origin("vector_weight") == "default:embedder"
        # a layer that sets a weight wins, field by field
        request = resolve_settings(SearchSettings(keyword_weight=0.5), embedder_name=name)
        assert (request.keyword_weight, request.origin("keyword_weight")) == (0.5, "request")
        assert request.origin("vector_weight") == "default:embedder"
        kb = resolve_settings(None, SearchSettings(vector_weight=0.7, keyword_weight=0.3), embedder_name=name)
        assert (kb.vector_weight, kb.keyword_weight, kb.origin("vector_weight")) == (0.7, 0.3, "knowledge_base")
    # any other embedder (or none known): the dense models' row, as HybridRetriever(fusion=None) fuses
    for name in ("some-other-model", None):
        other = resolve_settings(embedder_name=name)
        assert (other.vector_weight, other.keyword_weight, other.normalization, other.candidate_k) == (
            0.45, 0.55, "z_score", 200)
        assert other.origin("keyword_weight") == "default:embedder"


async def test_a_knowledge_base_with_the_shipped_model_fuses_with_the_measured_weights() -> None:
    docs = corpus(12)
    query = "tea brewing number 3"
    kb = KnowledgeBase("sqlite:///:memory:")
    shipped = kb.resolve()  # before open: the name comes from embedder=None, the shipped model
    assert shipped.origin("keyword_weight") == "default:embedder"
    async with kb:
        name = kb.embedder.name
        assert name in LEXICAL_WEIGHT_BY_EMBEDDER  # the default knowledge base uses a listed model
        await kb.add_documents(docs)
        response = await kb.search_result(query)
        assert response.settings.origin("keyword_weight") == "default:embedder"
        lexical = LEXICAL_WEIGHT_BY_EMBEDDER[name]
        explicit = await kb.search(query, keyword_weight=lexical, vector_weight=1 - lexical)
        assert [(d.id, pytest.approx(d.score)) for d in response.documents] == [(d.id, d.score) for d in explicit]
        system = await kb.search(query, keyword_weight=0.3, vector_weight=0.7)
        assert [d.score for d in system] != [d.score for d in explicit]  # the weights reached the fusion
    async with KnowledgeBase("sqlite:///:memory:", embedder=NamedEmbedder()) as other:
        assert other.resolve().origin("keyword_weight") == "default:embedder"
        assert (other.resolve().vector_weight, other.resolve().normalization) == (0.45, "z_score")


# ----------------------------------------------------------------------------- auto: direct strategy


async def test_direct_is_exact_fusion_over_the_whole_corpus() -> None:
    docs = corpus(30)
    query = "notes about tea brewing number 7"
    async with KnowledgeBase("sqlite:///:memory:", settings=SearchSettings(retrieval_k=3, top_k=30)) as kb:
        await kb.add_documents(docs)
        direct = await kb.search_result(query, search_mode="auto")
        assert (direct.strategy, direct.corpus_size) == ("direct", 30)
        exact = await kb.search(query, search_mode="hybrid", retrieval_k=30)  # candidate_k >= corpus size
        assert [(d.id, pytest.approx(d.score)) for d in direct.documents] == [(d.id, d.score) for d in exact]
        # never dense-only: both branches ranked the corpus, and the fusion's provenance says so
        branches = set().union(*(d.branches.keys() for d in direct.documents))
        assert branches == {"vector", "bm25"}
        keyword_only = await kb.search(query, search_mode="auto", vector_weight=0, keyword_weight=1, top_k=1)
        bm25_top = await kb.search(query, search_mode="keyword", top_k=1)
        assert [d.id for d in keyword_only] == [d.id for d in bm25_top]
        # a filter and a scope narrow the corpus that is fused whole
        filtered = await kb.search_result(query, search_mode="auto", filter=field("n") < 10)
        assert filtered.corpus_size == 10 and {d.metadata["n"] for d in filtered.documents} <= set(range(10))


def test_settings_never_raise_the_direct_threshold_past_the_largest_candidate_list() -> None:
    assert SearchSettings(auto_direct_max=10_000).auto_direct_max == 10_000
    with pytest.raises(InvalidParameterError, match="auto_direct_max"):
        SearchSettings(auto_direct_max=10_001)


# ------------------------------------------------------------------------------ weights and bounds


async def test_the_largest_weights_and_rank_constant_still_rank() -> None:
    async with KnowledgeBase("sqlite:///:memory:") as kb:
        await kb.add_documents(corpus(10))
        for settings in ({"vector_weight": MAX_WEIGHT, "keyword_weight": MAX_WEIGHT},
                         {"fusion": "rrf", "vector_weight": MAX_WEIGHT, "keyword_weight": MAX_WEIGHT,
                          "rank_constant": MAX_RANK_CONSTANT}):  # fmt: skip
            found = await kb.search("tea brewing number 1", top_k=3, **settings)
            assert [d.rank for d in found] == [0, 1, 2]
            scores = [d.score for d in found]
            assert all(s == s and abs(s) != float("inf") for s in scores) and scores == sorted(scores, reverse=True)


# ---------------------------------------------------------------------------- writes: reserved keys


@pytest.mark.parametrize("key", ["score", "rank", "branches"])
async def test_writes_with_stage_stamped_keys_are_rejected(key) -> None:
    async with KnowledgeBase("sqlite:///:memory:") as kb:
        bad = Document(id="stamped", content="x", metadata={key: "garbage"})
        with pytest.raises(InvalidParameterError) as caught:
            await kb.add_documents([Document(id="fine", content="y"), bad])
        assert "'stamped'" in str(caught.value) and repr(key) in str(caught.value)
        assert await kb.count() == 0


# ---------------------------------------------------------------------------- tenant isolation


async def test_a_document_cannot_carry_a_tenant_key_its_write_does_not_scope() -> None:
    async with KnowledgeBase("sqlite:///:memory:", require_scope=True) as kb:
        planted = Document(id="a", content="x marks the spot", metadata={"user_id": "bob"})
        with pytest.raises(InvalidParameterError, match="user_id"):
            await kb.add_documents([planted], agent_id="a1")
        assert await kb.search("x marks the spot", user_id="bob") == []
        assert await kb.count(agent_id="a1") == 0
        await kb.add_documents([planted], user_id="bob", agent_id="a1")  # the scope sets it: fine
        assert [d.id for d in await kb.search("x marks the spot", user_id="bob")] == ["agent_id=a1::a"]


async def test_unscoped_writes_cannot_plant_documents_in_a_tenants_view() -> None:
    async with KnowledgeBase("sqlite:///:memory:", fields={"org": "tenant"}) as kb:
        for metadata in ({"user_id": "bob"}, {"agent_id": 7}, {"org": "acme"}):  # built-in and declared keys
            with pytest.raises(InvalidParameterError, match="tenant key"):
                await kb.add_documents([Document(id="p", content="planted text", metadata=metadata)])
        # a key first seen in a scope becomes a tenant key too
        await kb.add_documents([Document(id="t", content="team text")], scope={"team": "red"})
        with pytest.raises(InvalidParameterError, match="'team'"):
            await kb.add_documents([Document(id="p", content="planted text", metadata={"team": "red"})])
        assert await kb.count() == 1
        # an int tenant is not the same tenant as its decimal string
        with pytest.raises(InvalidParameterError, match="this call writes"):
            await kb.add_documents([Document(id="p", content="x", metadata={"user_id": "1"})], user_id=1)


async def test_documents_that_reach_the_store_unscoped_stay_out_of_a_tenants_search() -> None:
    async with KnowledgeBase("sqlite:///:memory:") as kb:
        await kb.add_documents([Document(id="own", content="bob grocery list: milk")], user_id="bob")
        # written past the knowledge base (another program, an old version): metadata says bob, the id does not
        planted = Document(id="planted", content="bob grocery list: milk and a trojan", metadata={"user_id": "bob"})
        [vector] = await kb.embedder.embed_documents([planted.content])
        await kb.store.upsert([planted], embeddings=[vector])
        for mode in ("vector", "keyword", "hybrid", "auto"):
            found = await kb.search("bob grocery list milk trojan", user_id="bob", search_mode=mode)
            assert [d.id for d in found] == ["own"], mode


@pytest.mark.parametrize(
    "scope",
    [{"t": 10**5000}, {"t": 2**63}, {"t": -(2**63) - 1}, {"t": True}, {"t": 1.0}, {"t": float("nan")},
     {"t": ""}, {"t": "\ud800"}, {"t": None}],
)  # fmt: skip
async def test_scope_values_are_non_empty_strings_or_64_bit_ints(scope) -> None:
    async with KnowledgeBase("sqlite:///:memory:") as kb:
        for call in (kb.count(scope=scope), kb.add_documents([Document(id="d", content="x")], scope=scope),
                     kb.search("x", scope=scope)):  # fmt: skip
            with pytest.raises(InvalidParameterError, match="'t'"):
                await call


async def test_64_bit_scope_ints_work_and_bools_never_equal_ints() -> None:
    async with KnowledgeBase("sqlite:///:memory:", settings=SearchSettings(search_mode="keyword")) as kb:
        for value in (2**63 - 1, -(2**63)):
            await kb.add_documents([Document(id="d", content="edge tenant")], scope={"t": value})
            assert [d.id for d in await kb.search("edge tenant", scope={"t": value})] == ["d"]
        with pytest.raises(InvalidParameterError):
            await kb.count(user_id=1, scope={"user_id": True})
        with pytest.raises(InvalidParameterError, match="contradicts"):
            await kb.count(user_id=1, scope={"user_id": "1"})


# ------------------------------------------------------------------------------------- messages


async def test_native_filters_cannot_be_used_with_a_scope() -> None:
    class NativeFilter:  # stands for a backend's own filter object
        pass

    async with KnowledgeBase("sqlite:///:memory:") as kb:
        for scope in ({"user_id": "alice"}, {"agent_id": "a1"}, {"scope": {"team": "red"}}):
            with pytest.raises(UnsupportedFilterError) as caught:
                await kb.search("x", filter=NativeFilter(), **scope)
            message = str(caught.value)
            assert "user_id=, agent_id= or scope=" in message and "another filter" not in message


async def test_bytes_filters_are_parsed_as_json_text() -> None:
    async with KnowledgeBase("sqlite:///:memory:", fields={"n": "long"}) as kb:
        await kb.add_documents(corpus(5))
        as_text = '{"greaterThanOrEquals": {"key": "n", "value": 3}}'
        expected = sorted(d.id for d in await kb.search("notes", filter=as_text))
        assert expected == ["doc3", "doc4"]
        assert sorted(d.id for d in await kb.search("notes", filter=as_text.encode())) == expected
        assert await kb.count(filter=bytearray(as_text.encode())) == 2
        for bad in (b"\xff\xfe", b"not json"):
            with pytest.raises(FilterError):
                await kb.search("notes", filter=bad)


async def test_a_fractional_bound_on_a_long_field_is_rejected() -> None:
    async with KnowledgeBase("sqlite:///:memory:", fields=FIELDS) as kb:
        await kb.add_documents(typed_docs())
        with pytest.raises(FilterError, match="'year'") as caught:
            await kb.search("solar", filter=field("year") >= 2021.5)
        assert caught.value.path == "$.greaterThanOrEquals.value"
        assert sorted(d.id for d in await kb.search("solar", filter=field("year") >= 2022.0)) == ["b"]
        assert sorted(d.id for d in await kb.search("solar", filter=field("price") >= 0.5)) == ["a"]  # double: fine


# ------------------------------------------------------------------------------------- sections


async def test_sections_option_fills_a_section_index_during_sync(tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "tea.md").write_text(
        "# Tea\n\n## Green tea\n\n### Brewing\n\nBrew green tea at 80 degrees.\n\n"
        "## Black tea\n\n### Brewing\n\nBrew black tea with boiling water.\n"
    )
    async with SectionIndex(":memory:") as sections, KnowledgeBase(
        "sqlite:///:memory:", sources=[folder], sections=sections
    ) as kb:
        await kb.sync()
        [hit] = await kb.search("black tea boiling water", search_mode="keyword", top_k=1)
        [section] = await sections.resolve(hit)
        assert section.heading_path[-2:] == ("Black tea", "Brewing")
        (folder / "tea.md").unlink()
        await kb.sync()
        assert await sections.parent_ids() == []  # pruned with the chunks
    with pytest.raises(ConfigurationError, match="sections"):
        KnowledgeBase("sqlite:///:memory:", sections="sections.db")


def test_a_search_response_carries_every_status_field_of_a_retrieval_result_both_ways() -> None:
    """SearchResponse.from_result and as_result (what search_result and the retriever's retrieve_result use)
    carry every field of a RetrievalResult, so a status added there reaches both."""
    import dataclasses

    from fastrag.knowledge_base import SearchResponse
    from fastrag.retrieval.result import RetrievalResult

    down = RuntimeError("store down")
    result = RetrievalResult(documents=corpus(2), error=down, failed_branches={"vector": down}, partial=True,
                             timings={"total": 0.25}, zero_vector_branches=("vector",),
                             incomplete={"path_filter": "stopped at max_k"}, skipped_branches={"vector": "uncovered"})  # fmt: skip
    settings = resolve_settings()
    response = SearchResponse.from_result(result, settings=settings, strategy="hybrid", corpus_size=7)
    assert (response.settings, response.strategy, response.corpus_size) == (settings, "hybrid", 7)
    back = response.as_result()
    for f in dataclasses.fields(RetrievalResult):
        assert getattr(back, f.name) == getattr(result, f.name) == getattr(response, f.name), f.name
    kept = SearchResponse.from_result(result, settings=settings, strategy="vector", documents=corpus(2)[:1])
    assert [d.id for d in kept.documents] == [corpus(2)[0].id] and kept.error is down and kept.corpus_size is None


async def test_as_retriever_searches_with_its_settings_and_k_defaults_to_their_top_k() -> None:
    async with KnowledgeBase("sqlite:///:memory:") as kb:
        await kb.add_documents(corpus(12))
        retriever = kb.as_retriever(top_k=3, mode="keyword")
        assert len(await retriever.retrieve("notes about tea")) == 3  # top_k=3, not the protocol's k=10
        assert len(await retriever.retrieve("notes about tea", k=5)) == 5
        direct = await kb.search("notes about tea", top_k=4, mode="keyword")
        result = await retriever.retrieve_result("notes about tea", k=4)
        assert [d.id for d in result.documents] == [d.id for d in direct] and result.error is None
