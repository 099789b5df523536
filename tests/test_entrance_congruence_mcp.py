"""The entrance-congruence matrix of ``tests/test_entrance_congruence.py``, through ``fastrag mcp``: the same
question under every cell of settings returns the same ids, ranks and scores from the MCP tool as from
``KnowledgeBase.search_result``, over streamable HTTP from a real ``fastrag mcp`` process and the SDK's client.

One server per index (the shipped model, and the same weights under a name the measured table lacks) serves
one knowledge base per cell, each over the same index with the cell's settings in its TOML table (the
knowledge-base level, which the reference gives at the request level: both resolve to the same settings);
the cell's filter and offset are the tool's arguments, its tenant a bearer token bound to ``user_id`` alice.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytest.importorskip("mcp", reason='fastrag mcp needs the mcp extra: pip install "fastrag-retrieval[mcp]"')

from test_entrance_congruence import CELLS, QUERY, _knowledge_base, _split, index  # noqa: F401 - index: the fixture
from test_mcp import _answer, _as, _env, _free_port

pytestmark = pytest.mark.anyio

TOKENS = {"ops": "congruence-ops-token", "alice": "congruence-alice-token"}


def _toml(value: Any) -> str:
    return json.dumps(value)  # strings, numbers, booleans and lists of strings read the same in TOML


@pytest.fixture(scope="module")
def mcp_url(index: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:  # noqa: F811
    root = tmp_path_factory.mktemp(f"congruence-mcp-{index['kind']}")
    lines = ["[serve.tokens.ops]", f'token_sha256 = "{hashlib.sha256(TOKENS["ops"].encode()).hexdigest()}"',
             "[serve.tokens.alice]", f'token_sha256 = "{hashlib.sha256(TOKENS["alice"].encode()).hexdigest()}"',
             'user_id = "alice"', 'knowledge_bases = ["tenant"]']  # fmt: skip
    for name, cell in CELLS:
        settings, _ = _split(cell)
        lines += ["", f"[knowledge_bases.{name}]", f"store = {_toml(index['store'])}", 'rerank_model = "embedder"']
        if index["model"]:
            lines.append(f"embedder = {_toml(index['model'])}")
        lines += [f"{key} = {_toml(value)}" for key, value in settings.items()]
    config = root / "knowledge_bases.toml"
    config.write_text("\n".join(lines) + "\n", encoding="utf-8")
    port = _free_port()
    log = open(root / "server.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "fastrag.cli", "mcp", "--config", str(config), "--transport", "http",
                             "--port", str(port)], cwd=root, env=_env(), stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                httpx.get(url, timeout=2)
                break
            except httpx.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    raise AssertionError((root / "server.log").read_text()) from None
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.mark.parametrize(("name", "cell"), CELLS, ids=[name for name, _ in CELLS])
async def test_the_mcp_tool_returns_what_search_result_returns(
    index: dict[str, Any], mcp_url: str, name: str, cell: dict[str, Any]  # noqa: F811
) -> None:
    reference = await _knowledge_base(index, cell)
    assert reference, f"{name}: the cell must find something to compare"
    _, call = _split(cell)
    arguments = {"query": QUERY, "top_k": 20, **{k: v for k, v in call.items() if k != "user_id"}}
    token = TOKENS["alice"] if "user_id" in call else TOKENS["ops"]
    async with _as(mcp_url, token) as client:
        answer = _answer(await client.call_tool(f"search_{name}", arguments))
    hits = [(r["id"], r["rank"], r["score"]) for r in answer["results"]]
    assert [(i, r) for i, r, _ in hits] == [(i, r) for i, r, _ in reference], f"{name}: the MCP tool ranks differently"
    assert [s for _, _, s in hits] == pytest.approx([s for _, _, s in reference], rel=1e-12, abs=1e-12), (
        f"{name}: the MCP tool scores differently"
    )
