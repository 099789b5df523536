"""What a fused or reranked document records about each branch it came from (``metadata["branches"]``)."""

from __future__ import annotations

import dataclasses
import math
from numbers import Real
from typing import Any

from fastrag.models import BRANCHES, RANK, SCORE, Document, owned_document, plain_value


def finite_score(value: Any) -> float | None:
    """``value`` as a float when it is a finite real number (bools excluded), else ``None``."""
    if type(value) is float:  # the common case, without the abstract-class check
        return value if math.isfinite(value) else None
    if isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def provenance(doc: Document, position: int) -> dict[str, Any]:
    """The ``branches`` entry for ``doc`` as a branch returned it at zero-based ``position``:
    ``{"score": finite score or None, "rank": position}``, plus a copy of its own ``branches`` when it has any
    (a fused or reranked branch keeps its inner provenance)."""
    entry: dict[str, Any] = {"score": finite_score(doc.metadata.get(SCORE)), "rank": position}
    nested = doc.metadata.get(BRANCHES)
    if nested:
        entry["branches"] = plain_value(nested)
    return entry


def with_provenance(doc: Document, *, score: float | None, rank: int, branches: Any, **extra: Any) -> Document:
    """A copy of ``doc`` stamped with ``score``, zero-based ``rank``, the ``extra`` keys and ``branches``
    (the provenance entries by branch name), in that key order; its own score, rank and branches are
    dropped. ``doc`` is unchanged."""
    metadata = {key: v for key, v in doc.metadata.items() if key not in (SCORE, RANK, BRANCHES)}
    metadata[SCORE] = score
    metadata[RANK] = rank
    metadata.update(extra)
    metadata[BRANCHES] = branches
    if type(doc) is Document:  # metadata is a new dict of the document's own values; a subclass keeps its type below
        return owned_document(doc.id, doc.content, metadata)
    return dataclasses.replace(doc, metadata=metadata)
