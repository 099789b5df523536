"""The same BM25 on every store that can (issue 25, point 5).

- The analyzer is chosen from the store URL where the engine analyses text (Milvus ``?analyzer=``, OpenSearch
  ``?analyzer=``), so also from ``fastrag.toml``'s ``store``; an unknown name is refused with the choices.
- Milvus's default for a new collection is ``english`` (fastrag's English analysis: stemming, stopwords); a
  collection created with ``standard`` keeps it and refuses to be opened with another analyzer.
- Cross-store ranking: a SciFact slice (1,500 documents, 100 test questions) indexed into SQLite and into each
  store with BM25; the mean top-10 overlap with SQLite (and top-1 agreement) of each store is at least the
  floor measured with ``benchmarks/cross_store_ranking.py`` (the table in docs/stores.md) minus a small
  margin. Real engines: Milvus 2.5 (milvus-lite 2.5.1's native build over TCP), PostgreSQL 18, Qdrant local
  mode; OpenSearch is ``osmem-server``, an emulator.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from fastrag.config import load_settings, open_store
from fastrag.errors import ConfigurationError
from fastrag.models import Document

ROOT = Path(__file__).resolve().parents[1]


def _benchmark() -> Any:
    spec = importlib.util.spec_from_file_location("cross_store_ranking", ROOT / "benchmarks" / "cross_store_ranking.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("cross_store_ranking", module)
    spec.loader.exec_module(module)
    return module


bench = _benchmark()


def _host(url: str) -> str:
    return url.split("://", 1)[1].rstrip("/")


# ----------------------------------------------------------------------------- choosing the analyzer


def test_milvus_url_takes_an_analyzer_and_refuses_unknown_ones() -> None:
    pytest.importorskip("pymilvus")
    store = open_store("milvus://127.0.0.1:19530/docs?analyzer=english")
    assert store.analyzer_params == {"type": "english"}
    with pytest.raises(ConfigurationError) as info:
        open_store("milvus://127.0.0.1:19530/docs?analyzer=porter")
    assert "porter" in str(info.value) and "english" in str(info.value) and "standard" in str(info.value)


def test_toml_store_url_carries_the_analyzer(tmp_path: Path) -> None:
    pytest.importorskip("pymilvus")
    config = tmp_path / "fastrag.toml"
    config.write_text('[fastrag]\nstore = "milvus://127.0.0.1:19530/docs?analyzer=standard"\n', encoding="utf-8")
    settings = load_settings(env={"FASTRAG_CONFIG": str(config)})
    assert open_store(settings.store).analyzer_params == {"type": "standard"}


def test_opensearch_url_takes_an_analyzer_and_refuses_unknown_ones() -> None:
    pytest.importorskip("opensearchpy")
    assert open_store("opensearch://127.0.0.1:9200/docs?analyzer=standard").analyzer == "standard"
    assert open_store("opensearch://127.0.0.1:9200/docs").analyzer == "english"
    with pytest.raises(ConfigurationError) as info:
        open_store("opensearch://127.0.0.1:9200/docs?analyzer=porter")
    assert "porter" in str(info.value) and "english" in str(info.value)


_DOCS = [Document(id="a", content="The running dogs were barking"), Document(id="b", content="A cat sleeps")]


@pytest.mark.anyio
async def test_milvus_defaults_to_english_analysis(milvus_server: str) -> None:
    async with open_store(f"milvus://{_host(milvus_server)}/default_analyzer") as store:
        await store.upsert(_DOCS)
        assert store.analyzer_params == {"type": "english"}
        hits = await store.search_text("run", k=5)  # "running" stems to "run", as in the SQLite store
    assert [d.id for d in hits] == ["a"]


@pytest.mark.anyio
async def test_milvus_collection_keeps_the_analyzer_it_was_built_with(milvus_server: str) -> None:
    url = f"milvus://{_host(milvus_server)}/built_standard"
    async with open_store(url + "?analyzer=standard") as store:  # as every collection before this default
        await store.upsert(_DOCS)
    async with open_store(url) as store:  # no analyzer given: the collection's own, not the new default
        assert store.analyzer_params == {"type": "standard"}
        assert await store.search_text("run", k=5) == []
        assert [d.id for d in await store.search_text("running", k=5)] == ["a"]
    with pytest.raises(ConfigurationError, match="standard"):
        async with open_store(url + "?analyzer=english"):
            pass


@pytest.mark.anyio
async def test_opensearch_index_refuses_another_analyzer(opensearch_emulator: str) -> None:
    url = f"opensearch://{_host(opensearch_emulator)}/built-standard"
    async with open_store(url + "?analyzer=standard") as store:
        await store.upsert(_DOCS)
    with pytest.raises(ConfigurationError, match="standard"):
        async with open_store(url + "?analyzer=english"):
            pass


# ----------------------------------------------------------------------------- cross-store ranking

# Measured with benchmarks/cross_store_ranking.py (1,500 documents, 100 questions; docs/stores.md):
# (mean top-10 overlap, top-1 agreement). The floors are these minus a margin for BM25 changes elsewhere.
MEASURED = {
    "qdrant": (0.946, 0.980),  # Qdrant's BM25 counts a repeated query term once; fastrag's per occurrence
    "postgres": (1.000, 1.000),
    "milvus-english": (0.996, 1.000),
    "milvus-standard": (0.685, 0.840),
    "opensearch-emulator-english": (0.446, 0.700),
}
MARGIN = 0.03


@pytest.fixture(scope="module")
def scifact() -> Any:
    if not bench.SCIFACT.is_dir():
        pytest.skip(f"needs {bench.SCIFACT}")
    return bench.scifact_slice(1500, 100)


@pytest.fixture(scope="module")
def sqlite_top10(scifact: Any) -> dict[str, list[str]]:
    import anyio

    async def run() -> dict[str, list[str]]:
        async with open_store("sqlite:///:memory:") as store:
            return await bench.keyword_rankings(store, scifact)

    return anyio.run(run)


async def _agreement(url: str, scifact: Any, reference: dict[str, list[str]]) -> Any:
    async with open_store(url) as store:
        rankings = await bench.keyword_rankings(store, scifact)
    return bench.compare(reference, rankings, scifact.qrels, store=url, analyzer="")


def _check(row: Any, key: str) -> None:
    overlap, top1 = MEASURED[key]
    assert row.overlap >= overlap - MARGIN, (key, row)
    assert row.top1 >= top1 - MARGIN, (key, row)


@pytest.mark.slow
@pytest.mark.anyio
async def test_qdrant_ranks_like_sqlite(scifact: Any, sqlite_top10: dict[str, list[str]]) -> None:
    pytest.importorskip("qdrant_client")
    _check(await _agreement("qdrant+memory:///xstore?bm25=true", scifact, sqlite_top10), "qdrant")


@pytest.mark.slow
@pytest.mark.anyio
async def test_postgres_ranks_like_sqlite(postgres_url: str, scifact: Any, sqlite_top10: dict[str, list[str]]) -> None:
    base = postgres_url.split("?", 1)[0]
    _check(await _agreement(f"{base}?table=xstore", scifact, sqlite_top10), "postgres")


@pytest.mark.slow
@pytest.mark.anyio
async def test_milvus_english_ranks_like_sqlite(milvus_server: str, scifact: Any,
                                                sqlite_top10: dict[str, list[str]]) -> None:
    host = _host(milvus_server)
    english = await _agreement(f"milvus://{host}/xstore_english", scifact, sqlite_top10)  # the default
    _check(english, "milvus-english")
    standard = await _agreement(f"milvus://{host}/xstore_standard?analyzer=standard", scifact, sqlite_top10)
    _check(standard, "milvus-standard")
    assert english.overlap > standard.overlap + 0.2  # the point of the new default


@pytest.mark.slow
@pytest.mark.anyio
async def test_opensearch_emulator_agreement_floor(opensearch_emulator: str, scifact: Any,
                                                   sqlite_top10: dict[str, list[str]]) -> None:
    url = f"opensearch://{_host(opensearch_emulator)}/xstore-english?analyzer=english"
    _check(await _agreement(url, scifact, sqlite_top10), "opensearch-emulator-english")
