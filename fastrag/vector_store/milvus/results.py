"""Milvus hits to fastrag documents: scores, the cut at ``k`` with ties ordered by id, and ``k``'s limits."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from fastrag.errors import InvalidParameterError
from fastrag.models import Document
from fastrag.vector_store._ranking import best_first
from fastrag.vector_store._validation import check_k
from fastrag.vector_store.milvus.rows import document as document  # its home is rows.py; importable here as before
from fastrag.vector_store.milvus.schema import ID_FIELD, MAX_TOP_K

TIE_SLACK = 16
"""Extra hits past ``k`` that a search asks for at least once one page showed a tie at the cut (the first page
asks for one more than ``k``), so that equal scores at the cut can be ordered by id."""


def cosine_score(distance: float) -> float:
    """The score a dense hit ranks by: Milvus's COSINE, clamped to [-1, 1] (float error can pass 1)."""
    return max(-1.0, min(1.0, distance))


def bm25_score(distance: float) -> float | None:
    """The score a BM25 hit ranks by (milvus-lite 3.x reports it negated), or ``None`` for 0 (such a hit is dropped)."""
    return abs(distance) if distance != 0 else None


def cut_is_settled(found: Sequence[Mapping[str, Any]], k: int, score: Callable[[float], float | None]) -> bool:
    """Whether a full page of raw hits (best first) needs no wider search: it holds ``k`` distinct kept ids
    and a hit past the ``k``-th scores differently from it (no hit tied with it was left out of the page),
    or it reaches hits the caller drops (``score`` gives ``None``; every hit after them is dropped too)."""
    seen: set[str] = set()
    for position, hit in enumerate(found):
        value = score(float(hit["distance"]))
        if value is None:
            return True
        seen.add(str(hit["entity"][ID_FIELD]))
        if len(seen) == k:
            return position < len(found) - 1 and score(float(found[-1]["distance"])) != value
    return False


def ranked(hits: list[tuple[float, Document]], k: int) -> list[Document]:
    unique: dict[str, tuple[float, Document]] = {}
    for score, doc in hits:
        if doc.id not in unique:
            unique[doc.id] = (score, doc)
    return best_first(unique.values(), k)


def check_search_k(k: Any, name: str = "k") -> None:
    check_k(k, name)
    if name == "k" and k > MAX_TOP_K:
        raise InvalidParameterError(f"{name} must be at most {MAX_TOP_K} (Milvus's largest search limit), got {k!r}")


async def settled_page(
    page: Callable[[int], Awaitable[list[Any]]],
    k: int,
    *,
    score: Callable[[float], float | None],
    first: int = 1,
) -> list[Any]:
    """The raw hits of ``page(limit)`` (best first) once they hold ``k`` distinct ids, when that many
    match, and every hit whose score equals the ``k``-th distinct one's, so that equal scores at the cut
    can be ordered by id. ``score`` maps a hit's distance to the score the caller ranks by (``None``: the
    caller drops the hit). The first page asks for ``k + first`` hits (one more than needed shows whether
    a tie runs past the cut); a wider one is asked for only while a tie does, or while repeated ids
    leave fewer than ``k``."""
    limit = min(k + first, MAX_TOP_K)
    while True:
        found = await page(limit)
        if len(found) < limit or limit >= MAX_TOP_K or cut_is_settled(found, k, score):
            return found
        limit = min(max(2 * limit, k + TIE_SLACK), MAX_TOP_K)
