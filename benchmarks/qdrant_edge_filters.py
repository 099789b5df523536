"""Tally of the Qdrant adapter's filters on Qdrant's real engine (qdrant-edge-py): how many filter-table cases
and generated filters select exactly what ``fastrag.filters.matches`` selects, on a shard without payload
indexes and on one with an index on every shadow field. The harness is the one
``tests/test_qdrant_edge_filters.py`` uses (imported from it).

    python benchmarks/qdrant_edge_filters.py [--generated 1000] [--raw-bools]

``--raw-bools`` reproduces the conversion before the fix: a bool match value handed to qdrant_edge as a
Python bool (which qdrant-edge-py 0.9 reads as the integer 1 or 0). The results are in
``benchmarks/results/qdrant-edge-filters.md``.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from hypothesis import HealthCheck, given, settings
from test_qdrant_edge_filters import EdgeShard

from fastrag.filters import dump_filter, parse_filter
from fastrag.testing.filter_cases import FILTER_CASES, FILTER_CORPUS, filter_strategy
from fastrag.vector_store.qdrant import edge


def _generated(shard: EdgeShard, n: int, examples: list[str]) -> collections.Counter:
    """Run ``n`` generated filters on ``shard``; count those that ran and those that disagree with ``matches``."""
    tally: collections.Counter = collections.Counter()

    @settings(max_examples=n, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(filter_json=filter_strategy(FILTER_CORPUS))
    def run(filter_json: dict) -> None:
        tally["ran"] += 1
        if shard.select(filter_json) != shard.expected(filter_json):
            tally["bad"] += 1
            if len(examples) < 3:
                examples.append(str(dump_filter(parse_filter(filter_json))))

    run()
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generated", type=int, default=1000, help="generated filters per shard")
    parser.add_argument("--raw-bools", action="store_true", help="the conversion before the bool fix")
    args = parser.parse_args()
    if args.raw_bools:
        edge._match_value = lambda e, value, path: e.MatchValue(value=value)
    print(f"conversion: {'raw Python bools (before the fix)' if args.raw_bools else 'as committed'}")
    print("| shard | table cases | table disagree | generated | generated disagree |")
    print("| --- | --- | --- | --- | --- |")
    examples: list[str] = []
    for indexed in (False, True):
        shard = EdgeShard(list(FILTER_CORPUS), indexed=indexed)
        try:
            table_bad = [c.name for c in FILTER_CASES if shard.select(c.filter) != c.expected_ids]
            tally = _generated(shard, args.generated, examples)
        finally:
            shard.close()
        name = "indexed" if indexed else "plain"
        print(f"| {name} | {len(FILTER_CASES)} | {len(table_bad)} | {tally['ran']} | {tally['bad']} |")
        if table_bad:
            print(f"  table cases that disagree ({name}): {', '.join(table_bad)}")
    for example in examples:
        print(f"  a generated filter that disagrees: {example}")


if __name__ == "__main__":
    main()
