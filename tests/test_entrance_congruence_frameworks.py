"""The framework adapters are entrances too (issue 27, acceptance): the same question through LangChain,
LlamaIndex and Haystack returns the same ids, ranks and scores as ``KnowledgeBase.search_result``, over the
index, the embedders and the matrix of settings of tests/test_entrance_congruence.py.

Each cell's settings (and tenant) go to ``kb.as_retriever(...)``, which the adapter is handed; its filter to
the adapter (fastrag's JSON form for LangChain and LlamaIndex, Haystack's syntax for Haystack). The
``offset`` cell is left out: none of the three frameworks' retriever calls carries an offset.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")  # Haystack's opt-out: no telemetry from tests
for _module, _extra in (("langchain_core", "langchain"), ("llama_index.core", "llama-index"), ("haystack", "haystack")):
    pytest.importorskip(_module, reason=f'the {_extra} extra is not installed (pip install "fastrag-retrieval[{_extra}]")')

import test_entrance_congruence as congruence
from test_entrance_congruence import CELLS, QUERY, _kb, _knowledge_base, _split

from fastrag.integrations.haystack import HaystackRetriever
from fastrag.integrations.langchain import LangChainRetriever
from fastrag.integrations.llama_index import LlamaIndexRetriever

index = congruence.index  # the same module-scoped fixture: the index, for both embedders

pytestmark = pytest.mark.anyio

FRAMEWORK_CELLS = [(name, cell) for name, cell in CELLS if "offset" not in cell]

_HAYSTACK_OPERATORS = {"equals": "==", "notEquals": "!=", "greaterThan": ">", "greaterThanOrEquals": ">=",
                       "lessThan": "<", "lessThanOrEquals": "<=", "in": "in", "notIn": "not in"}  # fmt: skip
_HAYSTACK_LOGICAL = {"andAll": "AND", "orAll": "OR", "notAll": "NOT"}


def _haystack_filter(node: dict[str, Any] | None) -> dict[str, Any] | None:
    """A fastrag JSON filter written in Haystack's syntax (the operators both have)."""
    if node is None:
        return None
    ((op, arg),) = node.items()
    if op in _HAYSTACK_LOGICAL:
        return {"operator": _HAYSTACK_LOGICAL[op], "conditions": [_haystack_filter(child) for child in arg]}
    return {"field": f"meta.{arg['key']}", "operator": _HAYSTACK_OPERATORS[op], "value": arg["value"]}


async def _entrances(index: dict[str, Any], cell: dict[str, Any]) -> dict[str, list[tuple[str, int, float]]]:
    settings, call = _split(cell)
    scope = {"user_id": call["user_id"]} if "user_id" in call else {}
    fastrag_filter = call.get("filter")
    async with _kb(index) as kb:
        target = kb.as_retriever(**scope, **settings)
        langchain = LangChainRetriever(retriever=target, filter=fastrag_filter)
        llama_index = LlamaIndexRetriever(target, filter=fastrag_filter)
        haystack = HaystackRetriever(target)
        lc_async = await langchain.ainvoke(QUERY)
        lc_sync = langchain.invoke(QUERY)  # the bridge, from inside this running loop
        li_async = await llama_index.aretrieve(QUERY)
        hs_async = (await haystack.run_async(query=QUERY, filters=_haystack_filter(fastrag_filter)))["documents"]
        hs_sync = haystack.run(query=QUERY, filters=_haystack_filter(fastrag_filter))["documents"]
    return {
        "langchain ainvoke": [(d.id, d.metadata["rank"], d.metadata["score"]) for d in lc_async],
        "langchain invoke": [(d.id, d.metadata["rank"], d.metadata["score"]) for d in lc_sync],
        "llama_index aretrieve": [(n.node.node_id, n.node.metadata["rank"], n.score) for n in li_async],
        "haystack run_async": [(d.id, d.meta["rank"], d.score) for d in hs_async],
        "haystack run": [(d.id, d.meta["rank"], d.score) for d in hs_sync],
    }


@pytest.mark.parametrize(("name", "cell"), FRAMEWORK_CELLS, ids=[name for name, _ in FRAMEWORK_CELLS])
async def test_every_framework_returns_the_knowledge_bases_ids_ranks_and_scores(
    index: dict[str, Any], name: str, cell: dict[str, Any]
) -> None:
    reference = await _knowledge_base(index, cell)
    assert reference, f"{name}: the cell must find something to compare"
    for entrance, hits in (await _entrances(index, cell)).items():
        assert [(i, r) for i, r, _ in hits] == [(i, r) for i, r, _ in reference], f"{name}: {entrance} ranks differently"
        assert [s for _, _, s in hits] == pytest.approx([s for _, _, s in reference], rel=1e-12, abs=1e-12), (
            f"{name}: {entrance} scores differently"
        )


def test_the_matrix_leaves_out_only_what_no_framework_can_express() -> None:
    assert {name for name, _ in CELLS} - {name for name, _ in FRAMEWORK_CELLS} == {"offset"}
