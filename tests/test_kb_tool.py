"""KnowledgeBase.as_tool(): a function-calling tool whose JSON Schema is valid, accepts the arguments a model
sends, rejects bad ones (as the callable does), and searches like the knowledge base."""

from __future__ import annotations

import json

import jsonschema
import pytest

from fastrag.errors import FastragError, FilterError, InvalidParameterError, UnknownParameterError
from fastrag.knowledge_base import KnowledgeBase, SearchSettings
from fastrag.models import Document

pytestmark = pytest.mark.anyio

FIELDS = {"year": "long", "category": "string", "tags": "list"}

DOCS = [
    Document(id="a", content="solar panels convert sunlight into electricity",
             metadata={"year": 2021, "category": "guide", "tags": ["energy"], "title": "Solar guide",
                       "source_uri": "docs/solar.md"}),
    Document(id="b", content="wind turbines convert wind into electricity",
             metadata={"year": 2024, "category": "news", "tags": ["energy", "wind"]}),
    Document(id="c", content="how to brew green tea", metadata={"year": 2020, "category": "guide", "tags": []}),
]  # fmt: skip

VALIDATORS = [jsonschema.Draft202012Validator, jsonschema.Draft7Validator]

GOOD_ARGUMENTS = [
    {"query": "electricity"},
    {"query": "electricity", "top_k": 2},
    {"query": "electricity", "top_k": 2.0},  # JSON Schema's integer accepts 2.0
    {"query": "electricity", "filter": {"equals": {"key": "category", "value": "news"}}},
    {"query": "electricity", "filter": {"andAll": [{"greaterThanOrEquals": {"key": "year", "value": 2021}},
                                                    {"listContains": {"key": "tags", "value": "energy"}}]}},
    {"query": "electricity", "filter": {"notAll": {"in": {"key": "category", "value": ["guide"]}}}},
    {"query": "electricity", "top_k": None, "filter": None},  # models send null for "not given"
    {"query": "electricity", "filter": {"equals": {"key": "title", "value": "Solar guide"}}},  # built-in, offered
]  # fmt: skip

INTERNAL_KEYS = ["content_hash", "chunker", "chunk_index", "parent_id", "section_index", "section_start",
                 "section_end", "user_id", "agent_id"]  # fmt: skip

BAD_ARGUMENTS = [
    {},
    {"query": ""},
    {"query": "   "},
    {"query": 42},
    {"query": "x", "top_k": 0},
    {"query": "x", "top_k": 51},
    {"query": "x", "top_k": "5"},
    {"query": "x", "top_k": True},
    {"query": "x", "mode": "vector"},
    {"query": "x", "filter": "category = news"},
    {"query": "x", "filter": {"bogus": {"key": "year", "value": 1}}},
    {"query": "x", "filter": {"equals": {"key": "colour", "value": "red"}}},  # undeclared field
    {"query": "x", "filter": {"equals": {"key": "year"}}},
    {"query": "x", "filter": {"andAll": []}},
    {"query": "x", "filter": {"equals": {"key": "year", "value": 1}, "in": {"key": "year", "value": [1]}}},
    {"query": "x", "top_k": None, "filter": {"andAll": None}},
    *({"query": "x", "filter": {"equals": {"key": key, "value": "v"}}} for key in INTERNAL_KEYS),
    {"query": "x", "filter": {"orAll": [{"equals": {"key": "year", "value": 1}},
                                        {"notAll": {"equals": {"key": "user_id", "value": "bob"}}}]}},
]  # fmt: skip


@pytest.fixture
async def kb():
    async with KnowledgeBase("sqlite:///:memory:", fields=FIELDS) as kb:
        await kb.add_documents(DOCS)
        await kb.add_documents([Document(id="secret", content="bob electricity bill is overdue")], user_id="bob")
        yield kb


async def test_schema_passes_the_meta_schemas(kb) -> None:
    tool = kb.as_tool()
    for validator in VALIDATORS:
        validator.check_schema(tool.parameters)
    assert tool.parameters["required"] == ["query"]
    assert tool.parameters["additionalProperties"] is False
    assert tool.openai() == {"type": "function", "function": {"name": "search_knowledge_base",
                                                              "description": tool.description,
                                                              "parameters": tool.parameters}}  # fmt: skip
    assert tool.anthropic() == {"name": "search_knowledge_base", "description": tool.description,
                                "input_schema": tool.parameters}  # fmt: skip
    json.dumps(tool.openai()), json.dumps(tool.anthropic())
    assert "year (long)" in tool.description  # the model learns what it can filter on
    tool.parameters["required"].append("mutated")
    assert tool.parameters["required"] == ["query"]  # a copy each time


@pytest.mark.parametrize("arguments", GOOD_ARGUMENTS)
async def test_arguments_a_model_sends_validate_and_run(kb, arguments) -> None:
    tool = kb.as_tool()
    for validator in VALIDATORS:
        validator(tool.parameters).validate(arguments)
    for form in (arguments, json.dumps(arguments)):
        results = await tool(form)
        assert results == await tool(form.encode() if isinstance(form, str) else form)  # bytes too
        assert json.loads(json.dumps(results, allow_nan=False)) == results
        assert results and all(
            set(r) == {"id", "content", "title", "source_uri", "headings", "score", "rank"} for r in results
        )
        assert [r["rank"] for r in results] == list(range(len(results)))
        assert len(results) <= int(arguments.get("top_k") or 20)


@pytest.mark.parametrize("arguments", BAD_ARGUMENTS)
async def test_bad_arguments_are_rejected_by_the_schema_and_by_the_callable(kb, arguments) -> None:
    tool = kb.as_tool()
    for validator in VALIDATORS:
        assert not validator(tool.parameters).is_valid(arguments), arguments
    with pytest.raises((InvalidParameterError, FilterError)):
        await tool(arguments)


async def test_callable_rejects_what_no_schema_sees() -> None:
    async with KnowledgeBase("sqlite:///:memory:", fields=FIELDS) as kb:
        tool = kb.as_tool()
        for raw, error in [("not json", InvalidParameterError), ("[1, 2]", InvalidParameterError),
                           ('{"query": "x", "extra": 1}', UnknownParameterError),
                           ({"query": "x", "filter": {"equals": {"key": "year", "value": "2021"}}}, FilterError),
                           ({"query": "x", "filter": {"greaterThan": {"key": "category", "value": 3}}}, FilterError)]:  # fmt: skip
            with pytest.raises(error):
                await tool(raw)
            with pytest.raises(FastragError):  # one except clause catches every bad call
                await tool(raw)


async def test_results_carry_title_source_and_scores(kb) -> None:
    results = await kb.as_tool()({"query": "solar panels sunlight", "top_k": 1})
    assert results == [{"id": "a", "content": DOCS[0].content, "title": "Solar guide", "source_uri": "docs/solar.md",
                        "headings": None, "score": results[0]["score"], "rank": 0}]  # fmt: skip
    assert isinstance(results[0]["score"], float)
    filtered = await kb.as_tool()({"query": "electricity", "filter": {"equals": {"key": "category", "value": "news"}}})
    assert [r["id"] for r in filtered] == ["b"]


async def test_the_tool_inherits_the_knowledge_base_mode_unless_given_one() -> None:
    # "photovoltaic" shares no word with any document: BM25 finds nothing, dense k-NN always ranks something
    query = {"query": "photovoltaic modules"}
    async with KnowledgeBase("sqlite:///:memory:", settings=SearchSettings(search_mode="keyword")) as kb:
        await kb.add_documents(DOCS)
        assert await kb.search(query["query"]) == []
        assert await kb.as_tool()(query) == []
        assert await kb.as_tool(search_mode="vector")(query) != []
    async with KnowledgeBase("sqlite:///:memory:", settings=SearchSettings(search_mode="vector", top_k=2)) as kb:
        await kb.add_documents(DOCS)
        inherited = await kb.as_tool()(query)
        assert [r["id"] for r in inherited] == [d.id for d in await kb.search(query["query"])]
        assert len(inherited) == 2  # the knowledge base's top_k too
        assert await kb.as_tool(search_mode="keyword")(query) == []
        assert len(await kb.as_tool(top_k=1)(query)) == 1


async def test_a_tool_bound_to_a_tenant_never_leaves_it(kb) -> None:
    alice = kb.as_tool(user_id="alice")
    assert await alice({"query": "bob electricity bill is overdue"}) == []
    assert "user_id" not in json.dumps(alice.parameters["properties"])  # the model cannot pick a tenant
    bob = kb.as_tool(user_id="bob")
    assert [r["id"] for r in await bob({"query": "bob electricity bill is overdue"})] == ["secret"]


async def test_bad_tool_definitions_are_rejected(kb) -> None:
    for options in ({"name": "search knowledge"}, {"name": "x" * 65}, {"search_mode": "fuzzy"}, {"top_k": 0},
                    {"top_k": 60}, {"max_top_k": 0}, {"description": " "}, {"user_id": ""}):  # fmt: skip
        with pytest.raises(InvalidParameterError):
            kb.as_tool(**options)


async def test_the_filter_key_enum_is_defined_once_and_offers_no_internal_keys(kb) -> None:
    schema = kb.as_tool().parameters
    text = json.dumps(schema)
    assert schema["$defs"]["key"]["enum"] == sorted(schema["$defs"]["key"]["enum"])
    for declared in FIELDS:
        assert text.count(f'"{declared}"') == 1, declared  # once, in $defs.key, however many operators
        assert declared in schema["$defs"]["key"]["enum"]
    for internal in INTERNAL_KEYS:
        assert internal not in schema["$defs"]["key"]["enum"]


async def test_without_declared_fields_internal_and_tenant_keys_are_still_refused() -> None:
    async with KnowledgeBase("sqlite:///:memory:") as kb:
        await kb.add_documents(DOCS)
        tool = kb.as_tool(scope={"team": "red"})
        await kb.add_documents([Document(id="r", content="red team electricity plan")], scope={"team": "red"})
        validator = jsonschema.Draft202012Validator(tool.parameters)
        assert validator.is_valid({"query": "x", "filter": {"equals": {"key": "colour", "value": "red"}}})
        assert await tool({"query": "electricity plan", "filter": {"equals": {"key": "colour", "value": "red"}}}) == []
        for key in [*INTERNAL_KEYS, "team"]:
            arguments = {"query": "electricity", "filter": {"notAll": {"equals": {"key": key, "value": "x"}}}}
            assert not validator.is_valid(arguments), key
            with pytest.raises(FilterError, match=repr(key)) as caught:
                await tool(arguments)
            assert caught.value.path == "$.notAll[0].equals.key"


async def test_max_top_k_never_exceeds_what_reranking_can_serve() -> None:
    settings = SearchSettings(rerank=True, rerank_model="embedder", retrieval_k=30)
    async with KnowledgeBase("sqlite:///:memory:", settings=settings) as kb:
        await kb.add_documents(DOCS)
        tool = kb.as_tool()
        assert tool.max_top_k == 30 and tool.parameters["properties"]["top_k"]["maximum"] == 30
        assert len(await tool({"query": "electricity", "top_k": 30})) == len(DOCS)  # the largest offered works
        with pytest.raises(InvalidParameterError, match="candidate_k=30"):
            kb.as_tool(max_top_k=40)
        assert kb.as_tool(search_mode="keyword").max_top_k == 30  # the knowledge base still reranks
    async with KnowledgeBase("sqlite:///:memory:") as kb:
        assert kb.as_tool().max_top_k == 50 and kb.as_tool(max_top_k=1000).max_top_k == 1000


async def test_a_tool_over_a_knowledge_base_that_requires_a_scope_needs_one_at_build_time() -> None:
    async with KnowledgeBase("sqlite:///:memory:", require_scope=True) as kb:
        with pytest.raises(InvalidParameterError, match="requires a scope"):
            kb.as_tool()
        await kb.add_documents(DOCS, user_id="alice")
        assert await kb.as_tool(user_id="alice")({"query": "electricity"})


async def test_results_carry_the_heading_path(tmp_path) -> None:
    (tmp_path / "tea.md").write_text(
        "# Tea\n\n## Green tea\n\n### Brewing\n\nBrew at 80 degrees for two minutes.\n\n"
        "## Black tea\n\n### Brewing\n\nBrew at 100 degrees for four minutes.\n"
    )
    async with KnowledgeBase("sqlite:///:memory:") as kb:
        await kb.add_sources([tmp_path / "tea.md"])
        results = await kb.as_tool()({"query": "brew degrees minutes", "top_k": 2})
        by_text = {r["content"].strip().splitlines()[-1]: r["headings"] for r in results}
        assert by_text["Brew at 80 degrees for two minutes."][-2:] == ["Green tea", "Brewing"]
        assert by_text["Brew at 100 degrees for four minutes."][-2:] == ["Black tea", "Brewing"]


async def test_deeply_nested_arguments_are_a_parameter_error(kb) -> None:
    tool = kb.as_tool()
    deep_filter = '{"query": "x", "filter": ' + '{"notAll": ' * 100_000 + "{}" + "}" * 100_000 + "}"
    for raw in (deep_filter, "[" * 100_000 + "]" * 100_000, deep_filter.encode()):
        with pytest.raises(InvalidParameterError, match="nest"):
            await tool(raw)
