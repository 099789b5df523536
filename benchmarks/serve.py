"""HTTP overhead of ``fastrag serve``: requests/s and p50/p99 latency at concurrency 1, 16 and 64, over HTTP
against the same retrieval called in-process through the SDK, as ratios.

Setup: BEIR SciFact (``--docs`` abstracts, default all 5,183) in a SQLite file, the shipped static model,
the knowledge base's default search (hybrid, weighted fusion), ``top_k=10``; SciFact's test questions,
cycled. The same file is read by:

* **SDK**: ``KnowledgeBase.search_result(question, top_k=10)`` in this process, ``c`` calls in flight on one
  event loop;
* **HTTP**: a ``fastrag serve`` subprocess on 127.0.0.1 (uvicorn, one event loop), ``c`` requests in flight
  from an ``httpx.AsyncClient`` in this process (keep-alive connections, up to ``c`` of them). The latency
  includes JSON encoding of the request and the response, the ASGI stack and the loopback network; the
  client also runs here, on the same cores as the server.

Each level first runs ``--warmup`` calls, then ``--requests`` calls; requests/s = calls / wall-clock
seconds, latencies per call. The ratios are SDK / HTTP for requests/s and HTTP / SDK for latency, so
2.0 means "HTTP does half as many" or "takes twice as long".

Run from the repository root::

    python benchmarks/serve.py                 # writes benchmarks/results/serve.md
    python benchmarks/serve.py --smoke         # CI: 200 documents, 30 requests per level
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import httpx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATASET = ROOT.parent / "shared" / "datasets" / "scifact"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _measure(call: Callable[[str], Awaitable[None]], queries: list[str], *, concurrency: int,
                   requests: int, warmup: int) -> dict[str, float]:  # fmt: skip
    """Run ``requests`` calls with ``concurrency`` in flight; requests/s, p50 and p99 in milliseconds."""
    for q in queries[:warmup]:
        await call(q)
    latencies: list[float] = []
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < requests:
            i = next_index
            next_index += 1
            started = time.perf_counter()
            await call(queries[i % len(queries)])
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    async with anyio.create_task_group() as group:
        for _ in range(concurrency):
            group.start_soon(worker)
    wall = time.perf_counter() - started
    ordered = sorted(latencies)
    return {
        "rps": len(latencies) / wall,
        "p50": statistics.median(ordered) * 1000,
        "p99": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000,
    }


async def run(args: argparse.Namespace) -> str:
    from fastrag.evaluation.beir import load_beir
    from fastrag.knowledge_base import KnowledgeBase

    data = load_beir(DATASET)
    docs = list(data.corpus.values())[: args.docs]
    queries = list(data.queries.values())
    work = Path(tempfile.mkdtemp(prefix="fastrag-serve-bench-"))
    store = f"sqlite:///{work / 'kb.db'}"
    async with KnowledgeBase(store) as kb:
        for start in range(0, len(docs), 500):
            await kb.add_documents(docs[start : start + 500])
        config = work / "knowledge_bases.toml"
        config.write_text(f'[serve]\nmax_top_k = 100\n\n[knowledge_bases.scifact]\nstore = "{store}"\n', encoding="utf-8")
        port = _free_port()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        server = subprocess.Popen([sys.executable, "-m", "fastrag.cli", "serve", "--config", str(config), "--port",
                                   str(port), "--log-level", "warning"], env=env, cwd=work)  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("fastrag serve did not start")
                time.sleep(0.2)

            async def sdk(question: str) -> None:
                found = await kb.search_result(question, top_k=10)
                assert not found.retrieval_failed, found.error

            rows = []
            for concurrency in args.concurrency:
                limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
                async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as client:

                    async def http(question: str, client: httpx.AsyncClient = client) -> None:
                        response = await client.post("/v1/knowledge-bases/scifact/retrieve",
                                                     json={"query": question, "top_k": 10})  # fmt: skip
                        assert response.status_code == 200, response.text
                        response.json()

                    options = {"concurrency": concurrency, "requests": args.requests, "warmup": args.warmup}
                    direct = await _measure(sdk, queries, **options)
                    served = await _measure(http, queries, **options)
                rows.append((concurrency, direct, served))
                print(f"c={concurrency}: sdk {direct['rps']:.0f}/s, http {served['rps']:.0f}/s", file=sys.stderr)
        finally:
            server.terminate()
            server.wait(timeout=30)
    lines = [
        "# fastrag serve: HTTP overhead",
        "",
        f"`python benchmarks/serve.py{' --smoke' if args.smoke else ''}`: SciFact, {len(docs):,} documents in SQLite, "
        f"the shipped static model, hybrid (the default), top_k=10, {args.requests} requests per level "
        f"after {args.warmup} warm-up calls; {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}. The HTTP client runs in the benchmark process, on the same cores as the "
        "server.",
        "",
        "| concurrency | SDK req/s | HTTP req/s | req/s ratio (SDK / HTTP) | SDK p50 ms | HTTP p50 ms | p50 ratio "
        "| SDK p99 ms | HTTP p99 ms | p99 ratio |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for concurrency, d, h in rows:
        lines.append(
            f"| {concurrency} | {d['rps']:.0f} | {h['rps']:.0f} | {d['rps'] / h['rps']:.2f} | {d['p50']:.2f} | "
            f"{h['p50']:.2f} | {h['p50'] / d['p50']:.2f} | {d['p99']:.2f} | {h['p99']:.2f} | {h['p99'] / d['p99']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=None, help="SciFact documents to index (default: all)")
    parser.add_argument("--requests", type=int, default=2000, help="measured calls per concurrency level and side")
    parser.add_argument("--warmup", type=int, default=50, help="unmeasured calls first")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--out", type=Path, default=HERE / "results" / "serve.md")
    parser.add_argument("--smoke", action="store_true", help="CI: 200 documents, 30 requests per level")
    args = parser.parse_args()
    if args.smoke:
        args.docs, args.requests, args.warmup = 200, 30, 3
    if not DATASET.is_dir():
        raise SystemExit(f"needs {DATASET} (BEIR SciFact)")
    text = anyio.run(run, args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
