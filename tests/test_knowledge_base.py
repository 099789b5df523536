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
)
from fastrag.filters import field
from fastrag.knowledge_base import (
    AUTO_DIRECT_MAX,
    AUTO_WIDE_RETRIEVAL_K,
    SYSTEM_DEFAULTS,
    KnowledgeBase,
    SearchSettings,
    resolve_settings,
)
from fastrag.models import Document
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
    assert (resolved.keyword_weight, resolved.origin("keyword_weight")) == (0.3, "default")
    assert resolve_settings(SearchSettings(search_mode="vector"), kb).search_mode == "vector"
    # the system defaults the issue names: hybrid, weighted 0.7 dense / 0.3 full text, 20 results
    plain = resolve_settings()
    assert (plain.search_mode, plain.fusion, plain.vector_weight, plain.keyword_weight, plain.top_k) == (
        "hybrid", "weighted", 0.7, 0.3, 20)
    assert all(plain.origin(name) == "default" for name in plain.origins)


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
        ({"rerank": True}, InvalidParameterError),  # no rerank_model
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
    resolved = resolve_settings(SearchSettings(rerank=True, rerank_model="embedder", top_k=60))
    assert resolved.retrieval_k == 60
    assert SYSTEM_DEFAULTS.retrieval_k == 40


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
    path.write_text('[knowledge_base]\nmode = "auto"\n')
    with pytest.raises(ConfigurationError, match="mode"):
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
