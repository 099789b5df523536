"""Cold start: one ``fastrag search`` (hybrid) in a new process against a hand-written model2vec + bm25s + numpy
script doing the same work, both timed as subprocesses, interleaved, in the same run.

Per corpus, built once in a temporary folder:

* **fastrag**: ``fastrag index CORPUS --store sqlite:///…/store.db`` (the shipped static model), then timed:
  ``fastrag search QUERY --store … -k 10`` (hybrid, the default mode; prints 10 results);
* **peer** (``peer.py``, written into the folder, standalone): the same chunks, read back from fastrag's store,
  indexed by bm25s (k1 1.2, b 0.75, Lucene's formula, as the store) from the same terms fastrag's analyzer
  gives them, saved to disk with the chunk texts, and embedded by ``model2vec.StaticModel`` from the same model
  folder into a float32 ``.npy`` matrix. Timed: load the model with ``StaticModel.from_pretrained``, load the
  bm25s index (memory-mapped, with its corpus) and the matrix, analyse the query by hand (NFKC, case folding,
  Lucene's English stopwords, PyStemmer's Snowball English; checked equal to fastrag's query terms before
  timing), take 40 candidates from each branch (fastrag's default with a shipped static model), fuse them
  with min-max normalisation and BM25 0.9 / dense 0.1 (fastrag's default for that model), print the top 10.

Corpora: ``docs`` (this repository's ``docs/``, Markdown) and ``scifact`` (BEIR SciFact's corpus.jsonl, from
``../shared/datasets/scifact``, when present).

"Cold" means a new Python process: every import, the model load and the first query are paid each run. The
operating system's page cache is warm (one untimed run of each first; dropping caches needs root and would
disturb everyone else on the machine), and both sides run with bytecode caching on (``PYTHONDONTWRITEBYTECODE``
is removed from their environment), as an installed package runs. Runs alternate fastrag, peer, fastrag, ...;
the table gives medians of wall-clock time per process and their ratio (target: fastrag at most 1.2x the
peer). A second table splits fastrag's cold search into phases (a worker process that makes the same calls as
``fastrag search``, timed step by step), including the store's first-query work against a second, warm query.

Run from the repository root::

    python benchmarks/coldstart.py                 # docs + SciFact, 10 runs each
    python benchmarks/coldstart.py --runs 30
    python benchmarks/coldstart.py --smoke         # CI: docs only, 2 runs, writes under /tmp

Writes ``benchmarks/results/coldstart.md`` (``--out``) and ``coldstart.json`` beside it. Needs the
``model2vec`` extra and ``bm25s`` (the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = ROOT.parent / "shared" / "datasets"
K = 10
CANDIDATES = 40  # fastrag.retrieval.hybrid.STATIC_MODEL_CANDIDATE_K
TARGET = 1.2

QUERIES = {
    "docs": "which fusion does hybrid retrieval use by default?",
    "scifact": None,  # the first test query of SciFact
}

PEER = r'''"""Hybrid search by hand: model2vec + bm25s + numpy (the peer of `fastrag search` in benchmarks/coldstart.py)."""

import json
import re
import sys
import unicodedata
from pathlib import Path

import bm25s
import numpy as np
import Stemmer
from model2vec import StaticModel

HERE = Path(__file__).resolve().parent
# Lucene's EnglishAnalyzer stopwords, as fastrag's analyzer drops them
STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there "
    "these they this to was will with".split()
)
TOKEN = re.compile(r"[^\W_]+")


def analyze(text):
    words = TOKEN.findall(unicodedata.normalize("NFKC", text).casefold())
    return Stemmer.Stemmer("english").stemWords([w for w in words if w not in STOPWORDS])


def min_max(scores):
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    return {i: (s - low) / (high - low) if high > low else 1.0 for i, s in scores.items()}


def main():
    query, settings = sys.argv[1], json.loads((HERE / "peer.json").read_text())
    terms = analyze(query)
    if "--terms" in sys.argv:
        print(json.dumps(terms))
        return
    model = StaticModel.from_pretrained(settings["model"])
    bm25 = bm25s.BM25.load(HERE / "bm25", load_corpus=True, mmap=True)
    matrix = np.load(HERE / "vectors.npy")
    n = settings["candidates"]

    docs = {}  # chunk id -> {"id", "text"}
    vector = model.encode([query])[0].astype(np.float32)
    cosine = matrix @ vector
    top = np.argpartition(-cosine, n)[:n] if len(cosine) > n else np.arange(len(cosine))
    dense = {}
    for i in top:
        doc = bm25.corpus[int(i)]
        docs[doc["id"]], dense[doc["id"]] = doc, float(cosine[i])

    known = [t for t in terms if t in bm25.vocab_dict]
    lexical = {}
    if known:
        found, scores = bm25.retrieve([known], k=min(n, len(cosine)), show_progress=False)
        for doc, score in zip(found[0], scores[0]):
            if score > 0:
                docs[doc["id"]], lexical[doc["id"]] = doc, float(score)

    weight = settings["bm25_weight"]
    fused = {}
    for i, s in min_max(lexical).items():
        fused[i] = fused.get(i, 0.0) + weight * s
    for i, s in min_max(dense).items():
        fused[i] = fused.get(i, 0.0) + (1 - weight) * s
    best = sorted(fused, key=lambda i: (-fused[i], i))[: settings["k"]]
    if "--ids" in sys.argv:
        print(json.dumps(best))
        return
    for rank, i in enumerate(best, start=1):
        print(f"{rank:>2}. [{fused[i]:.4f}] {i}")
        print("    " + " ".join(docs[i]["text"].split())[:200])


if __name__ == "__main__":
    main()
'''


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def child_env() -> dict[str, str]:
    """The environment of every timed process: bytecode caching on, no network for the hub, no FASTRAG_ settings."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE" and not k.startswith("FASTRAG_")}
    env["HF_HUB_OFFLINE"] = "1"
    return env


def fastrag_command() -> list[str]:
    """The installed ``fastrag`` script beside this interpreter (as users run it), else ``python -m fastrag.cli``."""
    script = Path(sys.executable).parent / "fastrag"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "fastrag.cli"]


def run(cmd: list[str], *, cwd: Path, timeout: float = 1800) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.stdout


# ------------------------------------------------------------------------------------------------ build


def corpus_path(name: str) -> Path:
    return ROOT / "docs" if name == "docs" else SHARED / "scifact" / "corpus.jsonl"


def default_query(name: str) -> str:
    if QUERIES.get(name):
        return QUERIES[name]
    qrels = SHARED / name / "qrels" / "test.tsv"
    first = next(line.split("\t")[0] for line in qrels.read_text().splitlines()[1:] if line.strip())
    with open(SHARED / name / "queries.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if str(row["_id"]) == first:
                return row["text"]
    raise SystemExit(f"query {first} of {qrels} is not in queries.jsonl")


def build(name: str, folder: Path, query: str) -> dict:
    """Index ``name`` with ``fastrag index`` into ``folder``, then build the peer's files from the same chunks."""
    import anyio
    import bm25s
    import numpy as np
    from model2vec import StaticModel

    from fastrag.analysis import Analyzer
    from fastrag.ingestion import DEFAULT_MODEL
    from fastrag.retrieval.hybrid import LEXICAL_WEIGHT_BY_EMBEDDER
    from fastrag.vector_store.sqlite import SQLiteVectorStore

    store = folder / "store.db"
    started = time.perf_counter()
    log(f"[{name}] fastrag index {corpus_path(name)}")
    run([*fastrag_command(), "index", str(corpus_path(name)), "--store", f"sqlite:///{store}"], cwd=ROOT)
    index_s = time.perf_counter() - started

    async def chunks() -> list:
        async with SQLiteVectorStore(str(store)) as opened:
            return await opened.get()

    docs = anyio.run(chunks)
    log(f"[{name}] {len(docs)} chunks; building the peer's bm25s index and vector matrix")
    analyzer = Analyzer("en")
    bm25 = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
    bm25.index([analyzer.analyze(d.content) for d in docs], show_progress=False)
    bm25.save(folder / "bm25", corpus=[{"id": d.id, "text": d.content} for d in docs])
    model = StaticModel.from_pretrained(str(DEFAULT_MODEL))
    vectors = np.asarray(model.encode([d.content for d in docs], normalize=True), dtype=np.float32)
    np.save(folder / "vectors.npy", vectors)
    settings = {"model": str(DEFAULT_MODEL), "candidates": CANDIDATES, "k": K,
                "bm25_weight": LEXICAL_WEIGHT_BY_EMBEDDER[DEFAULT_MODEL.name]}
    (folder / "peer.json").write_text(json.dumps(settings))
    (folder / "peer.py").write_text(PEER)

    peer_terms = json.loads(run([sys.executable, str(folder / "peer.py"), query, "--terms"], cwd=folder))
    if peer_terms != analyzer.analyze(query, for_query=True):
        raise SystemExit(f"the peer analyses {query!r} as {peer_terms}, fastrag as "
                         f"{analyzer.analyze(query, for_query=True)}: not the same terms")
    return {"chunks": len(docs), "index_s": index_s}


# ---------------------------------------------------------------------------------------------- timing


def commands(folder: Path, query: str) -> dict[str, list[str]]:
    return {
        "fastrag": [*fastrag_command(), "search", query, "--store", f"sqlite:///{folder / 'store.db'}", "-k", str(K)],
        "peer": [sys.executable, str(folder / "peer.py"), query],
    }


def time_runs(folder: Path, query: str, runs: int) -> dict[str, list[float]]:
    """Wall-clock seconds of ``runs`` cold processes of each command, alternating; one untimed run each first."""
    cmds = commands(folder, query)
    for cmd in cmds.values():
        run(cmd, cwd=folder)
    times: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(runs):
        for name, cmd in cmds.items():
            started = time.perf_counter()
            run(cmd, cwd=folder)
            times[name].append(time.perf_counter() - started)
    return times


def top_ids(folder: Path, query: str) -> tuple[list[str], list[str]]:
    out = run([*commands(folder, query)["fastrag"], "--json"], cwd=folder)
    ours = [d["id"] for d in json.loads(out)["documents"]]
    theirs = json.loads(run([*commands(folder, query)["peer"], "--ids"], cwd=folder))
    return ours, theirs


def interpreter_ms(runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        run([sys.executable, "-c", "pass"], cwd=ROOT)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


# ---------------------------------------------------------------------------------------------- phases


PHASES = (
    "import fastrag.cli",
    "import numpy",
    "import store and retrievers",
    "import asyncio backend",
    "open store",
    "load model",
    "embed query",
    "first search_vector",
    "first search_text",
    "second search_vector",
    "second search_text",
    "hybrid retrieve (warm)",
    "close",
)


def phases_worker(store_url: str, query: str) -> dict[str, float]:
    """Milliseconds per step of a cold hybrid search, the calls ``fastrag search`` makes, one after another.

    The imports are split out in the order the command meets them; "load model" includes the imports the
    embedder makes when it loads. The first ``search_vector``/``search_text`` pay whatever the store builds on
    its first query; the second ones, the same query again, do not.
    """
    marks = [time.perf_counter()]
    import fastrag.cli  # noqa: F401

    marks.append(time.perf_counter())
    import numpy  # noqa: F401

    marks.append(time.perf_counter())
    import fastrag.filters  # noqa: F401
    import fastrag.retrieval.path_filter  # noqa: F401
    import fastrag.retrieval.reranking  # noqa: F401
    import fastrag.vector_store.sqlite  # noqa: F401

    marks.append(time.perf_counter())
    import anyio
    import anyio._backends._asyncio  # noqa: F401

    marks.append(time.perf_counter())
    from fastrag.config import build_retriever, load_settings, open_embedder, open_stores

    settings = load_settings({"store": store_url})

    async def search() -> None:
        async with open_stores(settings, create=False) as (store, lexical):
            marks.append(time.perf_counter())
            async with open_embedder(store.embedding_model) as embedder:
                marks.append(time.perf_counter())
                vector = await embedder.embed_query(query)
                marks.append(time.perf_counter())
                for _ in range(2):
                    await store.search_vector(vector, k=CANDIDATES)
                    marks.append(time.perf_counter())
                    await store.search_text(query, k=CANDIDATES)
                    marks.append(time.perf_counter())
                retriever = build_retriever(settings.mode, store=store, embedder=embedder, lexical_store=lexical)
                await retriever.retrieve(query, k=K)
                marks.append(time.perf_counter())

    anyio.run(search)
    marks.append(time.perf_counter())
    steps = [(b - a) * 1000 for a, b in zip(marks, marks[1:])]
    return dict(zip(PHASES, steps, strict=True))


def phases(folder: Path, query: str, runs: int) -> dict[str, float]:
    """Median milliseconds per phase over ``runs`` worker processes."""
    samples = []
    for _ in range(runs):
        out = run([sys.executable, str(Path(__file__).resolve()), "--phases-worker",
                   f"sqlite:///{folder / 'store.db'}", query], cwd=ROOT)
        samples.append(json.loads(out))
    return {name: statistics.median(s[name] for s in samples) for name in PHASES}


# --------------------------------------------------------------------------------------------- reports


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f}"


def report(results: list[dict], *, runs: int, python_ms: float, load: tuple[float, float]) -> str:
    lines = [
        "# Cold start: `fastrag search` against a hand-written model2vec + bm25s + numpy script",
        "",
        f"Written by `benchmarks/coldstart.py` ({runs} cold runs of each, interleaved; medians of wall-clock time "
        f"per process). Python {platform.python_version()}, {os.cpu_count()} CPUs, load average "
        f"{load[0]:.2f} at the start and {load[1]:.2f} at the end; an empty `python -c pass` takes "
        f"{python_ms:.0f} ms here. Page cache warm, bytecode cached (see the script's docstring).",
        "",
        f"| corpus | chunks | fastrag search (ms) | peer script (ms) | ratio | target <= {TARGET}x | "
        "top-10 overlap |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        f_med, p_med = statistics.median(r["times"]["fastrag"]), statistics.median(r["times"]["peer"])
        ratio = f_med / p_med
        lines.append(
            f"| {r['corpus']} | {r['chunks']:,} | {ms(f_med)} | {ms(p_med)} | {ratio:.2f}x | "
            f"{'met' if ratio <= TARGET else 'missed'} | {r['overlap']}/{K} |"
        )
    lines += [
        "",
        "Top-10 overlap: documents both printed (same chunks, same fusion; BM25 scoring and the query vector's "
        "rounding differ slightly, so the lists need not be equal).",
        "",
        "## Where fastrag's cold search spends its time (median ms per phase)",
        "",
        "| phase | " + " | ".join(r["corpus"] for r in results) + " |",
        "| --- |" + " --- |" * len(results),
    ]
    lines.append("| interpreter start (`python -c pass`) | " + " | ".join(f"{python_ms:.0f}" for _ in results) + " |")
    for name in PHASES:
        lines.append(f"| {name} | " + " | ".join(f"{r['phases'][name]:.1f}" for r in results) + " |")
    lines += [
        "",
        "The phases come from a worker that makes the calls `fastrag search` makes, one at a time (the command "
        "runs the two branches concurrently; the worker runs each branch twice, so the first call shows what "
        "the store builds on its first query and the second shows a warm query).",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    available = ["docs"] + (["scifact"] if (SHARED / "scifact" / "corpus.jsonl").is_file() else [])
    parser.add_argument("--corpora", nargs="+", choices=["docs", "scifact"], default=available,
                        help=f"corpora to index and search (default: {' '.join(available)})")
    parser.add_argument("--runs", type=int, default=10, help="cold runs of each command per corpus (default 10)")
    parser.add_argument("--phase-runs", type=int, default=5, help="runs of the phase worker per corpus (default 5)")
    parser.add_argument("--query", help="the question (default: one fixed per corpus, SciFact's first test query)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "coldstart.md",
                        help="markdown report (default benchmarks/results/coldstart.md); the JSON goes beside it")
    parser.add_argument("--smoke", action="store_true",
                        help="CI: docs only, 2 runs, 1 phase run; writes to /tmp/coldstart-smoke.md unless --out")
    parser.add_argument("--phases-worker", nargs=2, metavar=("STORE_URL", "QUERY"), help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.phases_worker:
        print(json.dumps(phases_worker(*args.phases_worker)))
        return
    if args.smoke:
        args.corpora, args.runs, args.phase_runs = ["docs"], 2, 1
        if "--out" not in sys.argv:
            args.out = Path(tempfile.gettempdir()) / "coldstart-smoke.md"
    if args.runs < 1 or args.phase_runs < 1:
        parser.error("--runs and --phase-runs must be at least 1")
    missing = [c for c in args.corpora if not corpus_path(c).exists()]
    if missing:
        parser.error(f"corpus not found: {', '.join(str(corpus_path(c)) for c in missing)}")

    load_start = os.getloadavg()[0]
    results = []
    with tempfile.TemporaryDirectory(prefix="fastrag-coldstart-") as tmp:
        for name in args.corpora:
            folder = Path(tmp) / name
            folder.mkdir()
            query = args.query or default_query(name)
            built = build(name, folder, query)
            log(f"[{name}] timing {args.runs} cold runs of each: {query!r}")
            times = time_runs(folder, query, args.runs)
            ours, theirs = top_ids(folder, query)
            log(f"[{name}] phases ({args.phase_runs} runs)")
            results.append({
                "corpus": name, "query": query, **built, "times": times,
                "fastrag_median_s": statistics.median(times["fastrag"]),
                "peer_median_s": statistics.median(times["peer"]),
                "ratio": statistics.median(times["fastrag"]) / statistics.median(times["peer"]),
                "overlap": len(set(ours) & set(theirs)), "fastrag_top": ours, "peer_top": theirs,
                "phases": phases(folder, query, args.phase_runs),
            })
    python_ms = interpreter_ms(max(3, args.phase_runs))
    text = report(results, runs=args.runs, python_ms=python_ms, load=(load_start, os.getloadavg()[0]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    args.out.with_suffix(".json").write_text(json.dumps(
        {"runs": args.runs, "python_ms": python_ms, "target": TARGET, "results": results}, indent=1))
    print(text)


if __name__ == "__main__":
    main()
