"""Queries/s of one SQLite store under concurrent ``retrieve()`` calls, versions of fastrag side by side.

Issue 28, point 1: a search parked a worker thread on the store's read pool (``read_connections``, default
``min(4, os.cpu_count())``), and every returned connection woke every parked thread. This measures what a
service sees: BM25 (``BM25Retriever``) and the shipped default hybrid (``HybridRetriever`` of dense and BM25,
its default fusion), with 1, 8 and 32 calls in flight on one store, each call ``retrieve(q, k=10)``.

Corpus: BEIR SciFact (5,183 abstracts; ``../shared/datasets``), vectors of the shipped static model
(``static-minilm-d256``, from the embedding cache, so no model runs while measuring); queries: its 300
test questions, cycled, their vectors precomputed.

Versions: the working tree's ``fastrag`` ("after"); with ``--before REV``, the ``fastrag`` package of
commit ``REV`` (exported with ``git archive``; "before"); with ``--version LABEL=FOLDER``, the one in
``FOLDER`` (a variant; repeatable). Ratios are against the first version. Each measurement runs in a fresh process that
imports one version (``PYTHONPATH``), on the same store file (built once, by the working tree), warms
its caches with one pass over the queries, then measures each retriever at each concurrency. Rounds
interleave the versions (A B, B A, A B, ...), so a change in the machine's load between rounds hits both;
the table gives each version's median over the rounds (with the range), the ratio of the medians, and each
version's ratio to its own 1-call-in-flight figure.

The measuring processes run numpy's BLAS single-threaded (``--blas-threads 1``, as ``speed.py``).

Run from the repository root::

    python benchmarks/concurrency.py --before 398c913       # before/after, 5 rounds
    python benchmarks/concurrency.py                        # the working tree only
    python benchmarks/concurrency.py --smoke                # CI: 200 documents, 1 round, seconds

(``--datasets /work/shared/datasets`` where the repository is not beside ``shared/``, as in a git worktree.)

Writes ``benchmarks/results/concurrency.md`` (``--out``) and ``concurrency.json`` beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
K = 10
RETRIEVERS = ("bm25", "hybrid")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ the measuring process (one version)


def worker(args: argparse.Namespace) -> None:
    """Open the store with the fastrag on PYTHONPATH, measure, print one JSON line."""
    import anyio
    import numpy as np

    import fastrag
    from fastrag.retrieval import BM25Retriever, HybridRetriever, VectorRetriever
    from fastrag.testing.fakes import PrecomputedEmbedder
    from fastrag.vector_store.sqlite import SQLiteVectorStore

    spec = json.loads(Path(args.spec).read_text())
    queries = spec["queries"]
    vectors = np.load(spec["vectors"])
    embedder = PrecomputedEmbedder(spec["model"], dict(zip(queries, vectors, strict=True)))

    def switches() -> int:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_nvcsw + usage.ru_nivcsw

    async def throughput(retriever, concurrency: int, total: int) -> tuple[float, float, float]:
        """(calls/s, CPU ms per call, context switches per call) with ``concurrency`` calls in flight."""
        todo = iter(range(total))

        async def one() -> None:
            for i in todo:
                await retriever.retrieve(queries[i % len(queries)], k=K)

        start, cpu, csw = time.perf_counter(), time.process_time(), switches()
        async with anyio.create_task_group() as tg:
            for _ in range(concurrency):
                tg.start_soon(one)
        wall = time.perf_counter() - start
        return total / wall, (time.process_time() - cpu) * 1000 / total, (switches() - csw) / total

    async def main() -> dict:
        out: dict = {"fastrag": str(Path(fastrag.__file__).parent), "load_start": os.getloadavg()[0]}
        async with SQLiteVectorStore(spec["store"], embedding_model=spec["model"]) as store:
            out["read_connections"] = getattr(store, "_max_readers", None)
            retrievers = {
                "bm25": BM25Retriever(store=store),
                "hybrid": HybridRetriever([VectorRetriever(vector_store=store, embedder=embedder), BM25Retriever(store=store)]),
            }
            for retriever in retrievers.values():  # warm: vectors, lengths, postings of every query's terms
                for q in queries:
                    await retriever.retrieve(q, k=K)
            for name, retriever in retrievers.items():
                for c in args.concurrency:
                    total = max(args.total, c)
                    out[f"{name}_c{c}"], out[f"{name}_cpu_c{c}"], out[f"{name}_csw_c{c}"] = await throughput(retriever, c, total)
        out["load_end"] = os.getloadavg()[0]
        return out

    print(json.dumps(anyio.run(main)))


# ------------------------------------------------------------------ the driver


def build(spec_dir: Path, args: argparse.Namespace) -> Path:
    """The store (built with the working tree's fastrag) and the queries, written for the workers."""
    import anyio
    import numpy as np

    sys.path.insert(0, str(HERE))
    import corpus as corpora
    import embeddings
    from embeddings import STATIC

    from fastrag.vector_store.sqlite import SQLiteVectorStore

    if args.datasets is not None:
        corpora.SHARED = args.datasets
    c = corpora.load("scifact", max_docs=args.docs)
    vectors = embeddings.cached_vectors(STATIC, "scifact" if args.docs is None else "scifact-slice", "corpus", c.texts, log=log)
    queries = list(c.queries.values())[: args.queries]
    qv = embeddings.cached_vectors(STATIC, "scifact", "queries", queries, log=log)
    store = spec_dir / "scifact.db"

    async def write() -> None:
        async with SQLiteVectorStore(store, embedding_model=STATIC) as s:
            for i in range(0, len(c.docs), 1000):
                await s.upsert(c.docs[i : i + 1000], embeddings=vectors[i : i + 1000])

    anyio.run(write)
    np.save(spec_dir / "queries.npy", qv)
    spec = {"store": str(store), "model": STATIC, "queries": queries, "vectors": str(spec_dir / "queries.npy")}
    (spec_dir / "spec.json").write_text(json.dumps(spec))
    log(f"built {store} ({len(c.docs)} documents), {len(queries)} queries")
    return spec_dir / "spec.json"


def export(rev: str, into: Path) -> Path:
    """The ``fastrag`` package of commit ``rev``, in a folder of its own (for PYTHONPATH)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", rev, "fastrag"], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def measure(path: Path, spec: Path, args: argparse.Namespace) -> dict:
    env = dict(os.environ, PYTHONPATH=str(path))
    if args.blas_threads:
        env.update({v: str(args.blas_threads) for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")})
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--spec", str(spec), "--total", str(args.total),
           "--concurrency", *map(str, args.concurrency)]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"worker for {path} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(runs: dict[str, list[dict]], concurrency: list[int]) -> list[str]:
    """q/s (median of the rounds, range), the ratio of the medians, each version against its own 1 call in
    flight; then CPU ms and context switches per call (medians), which a busy machine disturbs less."""
    labels = list(runs)

    def med(v: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[v])

    lines = ["| retriever | calls in flight | " + " | ".join(f"{v} q/s (median, range)" for v in labels)
             + "".join(f" | {v} / {labels[0]}" for v in labels[1:]) + " | " + " | ".join(f"{v} vs 1 in flight" for v in labels)
             + " | " + " | ".join(f"{v} CPU ms per call" for v in labels)
             + " | " + " | ".join(f"{v} context switches per call" for v in labels) + " |",
             "|---|---|" + "---|" * (5 * len(labels) - 1)]  # fmt: skip
    for name in RETRIEVERS:
        for c in concurrency:
            key = f"{name}_c{c}"
            cells = [f"{med(v, key):.0f} ({min(r[key] for r in runs[v]):.0f}-{max(r[key] for r in runs[v]):.0f})" for v in labels]
            cells += [f"{med(v, key) / med(labels[0], key):.2f}x" for v in labels[1:]]
            cells += [f"{med(v, key) / med(v, f'{name}_c{concurrency[0]}'):.2f}x" for v in labels]
            cells += [f"{med(v, f'{name}_cpu_c{c}'):.2f}" for v in labels]
            cells += [f"{med(v, f'{name}_csw_c{c}'):.1f}" for v in labels]
            lines.append(f"| {name} | {c} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", metavar="REV", help="also measure the fastrag package of this commit")
    parser.add_argument("--version", action="append", default=[], metavar="LABEL=FOLDER",
                        help="also measure the fastrag package in FOLDER (a variant), labelled LABEL; repeatable")
    parser.add_argument("--rounds", type=int, default=5, help="measurements per version, interleaved")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32], help="calls in flight")
    parser.add_argument("--total", type=int, default=600, help="retrieve calls per measurement")
    parser.add_argument("--queries", type=int, default=300, help="distinct queries (SciFact test, at most 300)")
    parser.add_argument("--docs", type=int, default=None, help="a slice of SciFact (default: all 5,183)")
    parser.add_argument("--datasets", type=Path, default=None,
                        help="the BEIR folders (default: ../shared/datasets beside the repository)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "concurrency.md", help="the table (markdown)")
    parser.add_argument("--blas-threads", type=int, default=1,
                        help="numpy's BLAS threads in the measuring processes (0: the library's default)")
    parser.add_argument("--smoke", action="store_true", help="200 documents, 20 queries, 1 round: seconds")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    if min(args.concurrency) < 1 or args.rounds < 1:
        parser.error("--concurrency values and --rounds must be at least 1")
    args.concurrency = sorted(set(args.concurrency))
    if args.smoke:
        args.docs, args.queries, args.rounds, args.total = 200, 20, 1, 40
    with tempfile.TemporaryDirectory(prefix="fastrag-concurrency-") as tmp:
        spec = build(Path(tmp), args)
        versions = {"after": ROOT}
        if args.before:
            versions = {"before": export(args.before, Path(tmp) / "before"), "after": ROOT}
        for item in args.version:
            label, _, folder = item.partition("=")
            if not label or not folder or not (Path(folder) / "fastrag").is_dir():
                parser.error(f"--version wants LABEL=FOLDER, FOLDER holding a fastrag package; got {item!r}")
            versions[label] = Path(folder)
        runs: dict[str, list[dict]] = {v: [] for v in versions}
        for r in range(args.rounds):
            order = list(versions) if r % 2 == 0 else list(reversed(versions))
            for v in order:
                result = measure(versions[v], spec, args)
                result["round"] = r
                runs[v].append(result)
                log(f"round {r + 1}/{args.rounds} {v}: " + ", ".join(
                    f"{n} c={c} {result[f'{n}_c{c}']:.0f}" for n in RETRIEVERS for c in args.concurrency)
                    + f" q/s (load {result['load_start']:.1f} -> {result['load_end']:.1f})")  # fmt: skip
    first = next(iter(runs.values()))[0]
    loads = [x for rs in runs.values() for r in rs for x in (r["load_start"], r["load_end"])]
    meta = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "read_connections": first["read_connections"], "rounds": args.rounds, "total_per_measurement": args.total,
        "queries": args.queries, "docs": args.docs or 5183, "before": args.before, "blas_threads": args.blas_threads,
        "load_average_1min": [min(loads), max(loads)], "date": time.strftime("%Y-%m-%d"),
    }  # fmt: skip
    blas = "single-threaded" if args.blas_threads == 1 else f"threads: {args.blas_threads or 'library default'}"
    header = (
        f"`python benchmarks/concurrency.py {shlex.join(sys.argv[1:])}`, {meta['date']}. SciFact ({meta['docs']} "
        f"documents, {args.queries} queries cycled, static-minilm-d256 vectors precomputed), `retrieve(q, k=10)`, "
        f"{args.total} calls per measurement after a warm-up pass; the store's default `read_connections` = "
        f"{meta['read_connections']}. {meta['machine']}; numpy's BLAS {blas} (as in `speed.py`: a multi-threaded "
        "matrix-vector product on a busy machine costs ten times more)."
    )
    shared = (
        f"**A shared machine**: other engineers' processes ran during these measurements (1-minute load average "
        f"{min(loads):.1f} to {max(loads):.1f} across them, on {os.cpu_count()} CPUs). Each version ran "
        f"{args.rounds} times in fresh processes, the rounds interleaved (A B, B A, ...) so a change of load hits "
        "each; the table gives the median of the rounds and their range. CPU ms and context switches per call "
        "are the measuring process's (all its threads: `time.process_time`, `getrusage`), which the other "
        "tenants disturb less than wall-clock queries/s."
    )
    lines = [
        "# Throughput under concurrent calls: one SQLite store (issue 28, point 1)",
        "",
        header,
        "",
        shared,
        "",
        *table(runs, args.concurrency),
        "",
    ]
    if args.before:
        lines += [f"`before` is the `fastrag` package of commit `{args.before}`; `after` the working tree.", ""]
    for item in args.version:
        lines += [f"`{item.partition('=')[0]}`: the `fastrag` package in `{item.partition('=')[2]}`.", ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    args.out.with_suffix(".json").write_text(json.dumps({"meta": meta, "runs": runs}, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
