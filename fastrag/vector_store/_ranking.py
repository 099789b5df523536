"""The order every store returns search results in: higher score first, equal scores by document id."""

from __future__ import annotations

from collections.abc import Iterable

from fastrag.models import Document


def best_first(hits: Iterable[tuple[float, Document]], k: int) -> list[Document]:
    """The ``k`` best ``(score, document)`` hits, higher score first and equal scores ordered by id, as copies
    stamped with their score and zero-based rank."""
    ordered = sorted(hits, key=lambda hit: (-hit[0], hit[1].id))[:k]
    return [doc.ranked(score=score, rank=rank) for rank, (score, doc) in enumerate(ordered)]
