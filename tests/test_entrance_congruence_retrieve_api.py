"""``POST /v1/retrieve`` is one more entrance to the one planner (issue 27.6): for every cell of the entrance
matrix of ``tests/test_entrance_congruence.py`` that its body can express, it returns the ids, order and
scores of ``KnowledgeBase.search_result`` with the same settings and this API's defaults
(:data:`~fastrag.serve.retrieve_api.RETRIEVE_API_DEFAULTS`) for those neither sets, over the same index,
with both embedders.

Cells it cannot express (the design has no such field): ``glob`` (path globs), ``group_by``, ``offset``,
``threshold`` (score thresholds) and ``language``.
"""

from __future__ import annotations

import hashlib
from typing import Any

import httpx
import pytest
from test_entrance_congruence import CELLS, QUERY, _kb, _knowledge_base, index  # noqa: F401 - index: the fixture

from fastrag.knowledge_base import KnowledgeBase
from fastrag.serve import create_app
from fastrag.serve.config import TokenBinding
from fastrag.serve.retrieve_api import RETRIEVE_API_DEFAULTS

pytestmark = pytest.mark.anyio

TOKEN = "alice-token"

# cell name -> (the Retrieve API body's parts for it, the token's tenant or None)
BODIES: dict[str, tuple[dict[str, Any], str | None]] = {
    "hybrid": ({}, None),
    "keyword": ({"retrievalConfiguration": {"searchType": ["FULL_TEXT"]}}, None),
    "vector": ({"retrievalConfiguration": {"searchType": ["DENSE_VECTOR"]}}, None),
    "rerank": ({"retrievalConfiguration": {"rerankingConfiguration": {"type": "MODEL"}}}, None),
    "filter": ({"filter": {"notEquals": {"key": "title", "value": "Fusion"}}}, None),
    "tenant": ({}, "alice"),
    "rrf": ({"retrievalConfiguration": {"rerankingConfiguration": {"type": "RRF", "rrfConfiguration": {"k": 10}},
                                        "fullTextSearchConfiguration": {"numberOfResults": 5}}}, None),
}
NOT_EXPRESSIBLE = {"glob", "group_by", "offset", "threshold", "language", "mmr"}
EXPRESSED = [(name, cell) for name, cell in CELLS if name in BODIES]


def test_every_cell_of_the_matrix_is_expressed_or_named_as_not_expressible() -> None:
    assert {name for name, _ in CELLS} == set(BODIES) | NOT_EXPRESSIBLE


async def _retrieve_api(index: dict[str, Any], name: str) -> list[tuple[str, float]]:  # noqa: F811
    parts, tenant = BODIES[name]
    reference = _kb(index)  # the matrix's knowledge base, with the fields this route's filters need declared
    kb = KnowledgeBase(index["store"], embedder=index["model"], settings=reference.settings, fields={})
    tokens = ()
    if tenant is not None:
        tokens = (TokenBinding(label=tenant, digest=hashlib.sha256(TOKEN.encode()).digest(), scope={"user_id": tenant}),)
    app = create_app({"kb": kb}, tokens=tokens)
    body = {"knowledgeBaseName": "kb", "retrievalQuery": {"type": "TEXT", "text": QUERY}, **parts}
    headers = {"Authorization": f"Bearer {TOKEN}"} if tenant is not None else {}
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        response = await client.post("/v1/retrieve", json=body, headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["code"] == "SUCCESS"
    return [(r["chunkId"], r["score"]) for r in response.json()["data"]["retrievalResults"]]


@pytest.mark.parametrize(("name", "cell"), EXPRESSED, ids=[name for name, _ in EXPRESSED])
async def test_the_retrieve_api_returns_what_the_knowledge_base_returns(index: dict[str, Any], name: str,  # noqa: F811
                                                                     cell: dict[str, Any]) -> None:  # fmt: skip
    # the knowledge base of the matrix sets no search setting but rerank_model: this API's defaults fill the rest
    expected = await _knowledge_base(index, {**RETRIEVE_API_DEFAULTS, **cell})
    assert expected, f"{name}: the cell must find something to compare"
    found = await _retrieve_api(index, name)
    assert [i for i, _ in found] == [i for i, _, _ in expected], f"{name}: the Retrieve API ranks differently"
    assert [s for _, s in found] == pytest.approx([s for _, _, s in expected], rel=1e-12, abs=1e-12), (
        f"{name}: the Retrieve API scores differently"
    )
