"""TEMPORARY stand-in for columns.py while it is written: per-row reference evaluation (slow, exact)."""
from __future__ import annotations

import json

import numpy as np

from fastrag.filters import matches

MISSING = object()


class Column:
    def __init__(self, values):
        self.values = list(values)

    @classmethod
    def from_values(cls, values):
        return cls(values)

    @classmethod
    def from_sqlite(cls, types, values):
        out = []
        for t, v in zip(types, values):
            if t is None:
                out.append(MISSING)
            elif t in ("array", "object"):
                out.append(json.loads(v))
            elif t == "true":
                out.append(True)
            elif t == "false":
                out.append(False)
            elif t == "null":
                out.append(None)
            else:
                out.append(v)
        return cls(out)

    def concat(self, other):
        return Column(self.values + other.values)

    def __len__(self):
        return len(self.values)


def filter_mask(node, n, column):
    keys = set()

    def walk(f):
        if hasattr(f, "filters"):
            for c in f.filters:
                walk(c)
        else:
            keys.add(f.key)

    walk(node)
    cols = {k: column(k).values for k in keys}
    return np.array([matches(node, {k: cols[k][i] for k in keys if cols[k][i] is not MISSING}) for i in range(n)], dtype=bool)
