"""The benchmark scripts still run: quality.py, speed.py, speed_backends.py, concurrency.py and others on a tiny slice (``--smoke``),
tables well formed.

No timing is asserted (timing belongs in the benchmarks themselves); this only keeps the scripts from
rotting. The slice: 200 SciFact documents (plus those judged for the queries), 20 queries, the shipped
static model, the SQLite store, no peers; a synthetic corpus of 2,000 chunks; for speed_backends.py, Qdrant
local mode only (10 queries, a few seconds).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ROOT.parent / "shared" / "datasets"

pytestmark = pytest.mark.skipif(not (DATASETS / "scifact").is_dir(), reason="needs ../shared/datasets/scifact")


def _run(script: str, out: Path, *extra: str) -> str:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--smoke", "--out", str(out), *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out.read_text()


def _table_rows(markdown: str, header_start: str) -> list[list[str]]:
    """The body rows of the first markdown table whose header line starts with ``header_start``."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    header = lines[start]
    assert set(lines[start + 1].replace("|", "").strip()) <= {"-", " "}
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == header.count("|") - 1, line
        rows.append(cells)
    assert rows
    return rows


def test_quality_smoke(tmp_path: Path) -> None:
    text = _run("quality.py", tmp_path / "quality.md")
    rows = _table_rows(text, "| dataset | system | run |")
    runs = {r[2] for r in rows}
    assert "bm25 (SQLite)" in runs and "dense:static" in runs
    assert any(r.startswith("hybrid:static (shipped default") for r in runs)
    for r in rows:
        ndcg, recall = float(r[3]), float(r[4])
        assert 0.0 <= ndcg <= 1.0 and 0.0 <= recall <= 1.0
    bm25 = next(r for r in rows if r[2] == "bm25 (SQLite)")
    assert float(bm25[3]) > 0.3  # the slice is easy: a broken BM25 would score near 0
    data = json.loads((tmp_path / "quality.json").read_text())
    assert len(data) == len(rows)


def test_quality_smoke_real_milvus(tmp_path: Path) -> None:
    pytest.importorskip("pymilvus", reason='needs the milvus extra: pip install "fastrag-retrieval[milvus]"')
    text = _run("quality.py", tmp_path / "quality.md", "--stores", "milvus")
    rows = _table_rows(text, "| dataset | system | run |")
    milvus = next(r for r in rows if r[2].startswith("bm25 (Milvus 2.5"))
    assert float(milvus[3]) > 0.3  # real Milvus's BM25 (english analyzer) on the easy slice
    assert "failed" not in milvus[-1]


def test_speed_smoke(tmp_path: Path) -> None:
    text = _run("speed.py", tmp_path / "speed.md")
    rows = _table_rows(text, "| corpus | docs |")
    assert [r[0] for r in rows] == ["scifact", "synthetic"]
    assert rows[1][1] == "2,000"
    ratios = _table_rows(text, "| corpus | BM25: fastrag / direct")
    assert len(ratios) == 2
    for r in ratios:  # share of queries where fastrag returned the direct baseline's top 10, in order
        assert all(part.strip().endswith("%") for part in r[5].split("/"))
    data = json.loads((tmp_path / "speed.json").read_text())
    assert {d["corpus"] for d in data} == {"scifact", "synthetic"}
    assert all(d["peak_rss_mb"] > 0 and d["ingest_docs_per_s"] > 0 for d in data)
    for d in data:  # the direct call is timed both ways: awaited in a worker thread (the baseline) and inline
        for name in ("bm25", "dense"):
            assert d[f"{name}_direct_p50_ms"] > 0 and d[f"{name}_direct_inline_p50_ms"] > 0
            assert f"{name}_overhead_inline" in d
        assert d["direct_both_over_slowest"] > 0  # the floor: the two direct searches at once / the slower alone


def test_speed_backends_smoke(tmp_path: Path) -> None:
    pytest.importorskip("qdrant_client", reason='needs qdrant-client: pip install "fastrag-retrieval[qdrant]"')
    text = _run("speed_backends.py", tmp_path / "speed-backends.md", "--backends", "qdrant")
    rows = _table_rows(text, "| backend | store |")
    assert [r[0] for r in rows] == ["qdrant"]
    assert int(rows[0][2].replace(",", "")) >= 200  # the slice: 200 documents plus those judged for the queries
    ratios = _table_rows(text, "| backend | BM25: fastrag / direct")
    assert [r[0] for r in ratios] == ["qdrant"]
    for cell in ratios[0][1:3]:  # BM25 and dense: fastrag / direct ms (overhead; inline; share of same top 10, overlap)
        assert "% same" in cell and "% overlap" in cell and "inline" in cell  # QdrantClient blocks: both baselines
    assert ratios[0][3].endswith("x")  # hybrid / slowest branch
    data = json.loads((tmp_path / "speed-backends.json").read_text())
    assert [d["backend"] for d in data] == ["qdrant"]
    d = data[0]
    assert d["ingest_docs_per_s"] > 0 and d["peak_rss_mb"] > 0
    for name in ("bm25", "dense", "hybrid", "native_hybrid"):
        assert 0 < d[f"{name}_p50_ms"] <= d[f"{name}_p95_ms"]
    assert d["qps_run"] == "hybrid" and all(d[f"qps_c{c}"] > 0 for c in (1, 8, 64))  # queries/s under load
    # fastrag and the direct client rank the same documents (the slice has no ties that could reorder them all)
    assert d["bm25_overlap"] > 0.9 and d["dense_overlap"] > 0.9


def test_speed_backends_smoke_real_milvus(tmp_path: Path) -> None:
    pytest.importorskip("pymilvus", reason='needs the milvus extra: pip install "fastrag-retrieval[milvus]"')
    text = _run("speed_backends.py", tmp_path / "speed-backends.md", "--backends", "milvus")
    rows = _table_rows(text, "| backend | store |")
    assert [(r[0], r[1]) for r in rows] == [("milvus", "Milvus 2.5 server (milvus-lite 2.5.1 binary, TCP)")]
    data = json.loads((tmp_path / "speed-backends.json").read_text())
    d = data[0]
    for name in ("bm25", "dense", "hybrid", "native_hybrid"):
        assert 0 < d[f"{name}_p50_ms"] <= d[f"{name}_p95_ms"]
    # fastrag and pymilvus's own client on the same server rank the same documents
    assert d["bm25_overlap"] > 0.9 and d["dense_overlap"] > 0.9


def test_speed_backends_table_reports_a_failed_throughput_level(monkeypatch) -> None:
    # a store that times out with 64 queries in flight is a result to report, not a reason to lose the run
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import speed_backends

    r = {"backend": "milvus-lite", "store": "milvus-lite (in-process)", "docs": 200_000, "ingest_docs_per_s": 1.0,
         "peak_rss_mb": 1.0, "qps_run": "hybrid", "qps_c1": 2.5, "qps_c8": 2.0, "qps_c64": None,
         "qps_c64_error": "BackendTemporarilyUnavailableError: Retry timeout: 10.0s",
         "loadavg_start": [1.0], "loadavg_end": [1.0], "hybrid_p50_ms": 1.0, "hybrid_p95_ms": 2.0}
    lines = speed_backends.table([r])
    assert "q/s at concurrency 1 / 8 / 64" in lines[0]
    assert "| 2.5 / 2.0 / failed (hybrid) |" in lines[2]


def test_coldstart_smoke(tmp_path: Path) -> None:
    pytest.importorskip("bm25s", reason='needs bm25s: pip install "fastrag-retrieval[bench]"')
    text = _run("coldstart.py", tmp_path / "coldstart.md")
    rows = _table_rows(text, "| corpus | chunks |")
    assert [r[0] for r in rows] == ["docs"]
    assert int(rows[0][1].replace(",", "")) > 0
    assert rows[0][4].endswith("x") and rows[0][5] in {"met", "missed"}
    overlap = int(rows[0][6].split("/")[0])
    assert overlap >= 5  # the peer searches the same chunks with the same fusion: mostly the same top 10
    phases = _table_rows(text, "| phase |")
    assert any(r[0] == "first search_vector" for r in phases) and any(r[0] == "load model" for r in phases)
    data = json.loads((tmp_path / "coldstart.json").read_text())
    (result,) = data["results"]
    assert len(result["times"]["fastrag"]) == len(result["times"]["peer"]) == 2
    assert result["fastrag_median_s"] > 0 and result["peer_median_s"] > 0


def test_scale_smoke(tmp_path: Path) -> None:
    # scale.py --smoke: 300 SciFact documents and 2,000 synthetic chunks, 20 queries, every measure exercised;
    # the peers (bm25s, tantivy, faiss) are used when installed and reported as missing otherwise
    text = _run("scale.py", tmp_path / "scale.md")
    bm25 = _table_rows(text, "| corpus | docs | fastrag BM25 p50 ms |")
    assert [(r[0], r[1]) for r in bm25] == [("SciFact", "300"), ("synthetic", "2,000")]
    filters = _table_rows(text, "| corpus | docs | filter | matching |")
    assert [r[2] for r in filters] == ['`field("cat") == 7`', '`field("n") >= 60`']
    assert all(r[8] == "0 / 0" for r in filters)  # a full top 10 whenever 10 match, and every hit matches
    dense = _table_rows(text, "| corpus | docs | fastrag dense p50 ms |")
    assert all(float(r[12]) >= 0.9 for r in dense)  # the store's exact k-NN finds numpy's top 10
    assert len(_table_rows(text, "| corpus | docs | status | ANN p50 ms |")) == 2  # a result or "not available"
    hybrid = _table_rows(text, "| corpus | docs | candidate_k |")
    assert all(r[7].endswith("x") for r in hybrid)
    ingest = _table_rows(text, "| corpus | docs | wall s | docs/s |")
    assert all("store.db" in r[9] for r in ingest)  # the files the store left, listed
    (trickle,) = _table_rows(text, "| corpus | docs | blocks x queries run |")
    assert int(trickle[3].replace(",", "")) > 0 and trickle[8] == "no"  # the writer committed; it stopped
    assert len(_table_rows(text, "| corpus | docs | RSS after warm-up MB |")) == 2
    data = json.loads((tmp_path / "scale.json").read_text())
    assert [r["spec"] for r in data["results"]] == ["scifact", "synthetic:2000"]
    assert not any("error" in r for r in data["results"])
    if "Charts skipped" not in text:
        assert (tmp_path / "scale-latency.png").stat().st_size > 0 and (tmp_path / "scale-ingest.png").stat().st_size > 0


def test_serve_smoke(tmp_path: Path) -> None:
    """benchmarks/serve.py: SDK against HTTP (a real fastrag serve) at concurrency 1/16/64, ratios well formed."""
    pytest.importorskip("fastapi", reason="needs the serve extra")
    text = _run("serve.py", tmp_path / "serve.md")
    rows = _table_rows(text, "| concurrency |")
    assert [r[0] for r in rows] == ["1", "16", "64"]
    for r in rows:
        sdk_rps, http_rps, ratio = float(r[1]), float(r[2]), float(r[3])
        assert sdk_rps > 0 and http_rps > 0 and abs(ratio - sdk_rps / http_rps) < 0.1 * ratio


def test_concurrency_smoke(tmp_path: Path) -> None:
    """benchmarks/concurrency.py: BM25 and hybrid q/s at 1/8/32 calls in flight, ratios to 1 in flight."""
    text = _run("concurrency.py", tmp_path / "concurrency.md")
    rows = _table_rows(text, "| retriever | calls in flight |")
    assert [(r[0], r[1]) for r in rows] == [(n, c) for n in ("bm25", "hybrid") for c in ("1", "8", "32")]
    for r in rows:
        assert float(r[2].split()[0]) > 0 and r[3].endswith("x")
    assert all(r[3] == "1.00x" for r in rows if r[1] == "1")
    data = json.loads((tmp_path / "concurrency.json").read_text())
    assert len(data["runs"]["after"]) == 1 and data["meta"]["read_connections"] >= 1
