"""Shared by the peer scripts (each runs in its own venv, with only numpy besides the peer): read the
bundle quality.py wrote, time each query, write the JSON result quality.py merges.

Bundle layout: ``docs.json`` ``{"ids": [...], "texts": [...]}``; ``queries.json`` likewise;
``<model>.corpus.npy`` / ``<model>.queries.npy``: (n, dim) float32 L2-normalised vectors, row-aligned.
Result: ``{"system", "version", "configs": {name: {"run": {qid: [doc ids best first]},
"latency_ms": [...], "index_s": float}}, "errors": {name: message}}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"


class Bundle:
    def __init__(self, path: str) -> None:
        self.path = Path(path)
        docs = json.loads((self.path / "docs.json").read_text())
        queries = json.loads((self.path / "queries.json").read_text())
        self.doc_ids: list[str] = docs["ids"]
        self.doc_texts: list[str] = docs["texts"]
        self.query_ids: list[str] = queries["ids"]
        self.query_texts: list[str] = queries["texts"]
        self.models: list[str] = sorted(p.name[: -len(".corpus.npy")] for p in self.path.glob("*.corpus.npy"))

    def vectors(self, model: str) -> tuple[np.ndarray, np.ndarray]:
        return np.load(self.path / f"{model}.corpus.npy"), np.load(self.path / f"{model}.queries.npy")


def main(system: str, version: str, configs) -> None:
    """``configs(bundle, k)`` yields ``(name, build)``; ``build()`` returns ``(search, index_s)`` where
    ``search(query_index) -> list[doc id]``."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--bundle", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--k", type=int, default=100)
    args = parser.parse_args()
    bundle = Bundle(args.bundle)
    result = {"system": system, "version": version, "configs": {}, "errors": {}}
    for name, build in configs(bundle, args.k):
        try:
            search, index_s = build()
            search(0)  # warm-up
            run, latency = {}, []
            for i, qid in enumerate(bundle.query_ids):
                start = time.perf_counter()
                ids = search(i)
                latency.append((time.perf_counter() - start) * 1000)
                seen, ranked = set(), []
                for d in ids:
                    if d not in seen:
                        seen.add(d)
                        ranked.append(d)
                run[qid] = ranked[: args.k]
            result["configs"][name] = {"run": run, "latency_ms": latency, "index_s": index_s}
            print(f"{system} {name}: done", file=sys.stderr)
        except Exception as exc:  # recorded in the table, not fatal
            traceback.print_exc()
            result["errors"][name] = f"{type(exc).__name__}: {exc}"[:300]
    Path(args.out).write_text(json.dumps(result))
