"""One hit per document: group retrieved chunks by a metadata key (``parent_id``, ``source_uri``, any field).

Chunks of one source each take a slot in a ranked list. :class:`GroupingRetriever` returns one result per
group instead: the group's best-ranked chunk (its content and metadata), credited with the group's score,
and carrying the group's other matching chunks under ``metadata["grouping"]``::

    retriever = GroupingRetriever(hybrid, group_by="parent_id")
    for doc in await retriever.retrieve("how is BM25 tuned?", k=5):   # five different documents
        print(doc.rank, doc.score, doc.metadata["parent_id"], len(doc.group_chunks) + 1, "matching chunks")

The group's score:

* ``"max"`` (default): its best chunk's score. A document is as relevant as its most relevant passage;
  a long document with many weak matches does not outrank a short one with one strong match, and the
  order of groups is the order in which their first chunk appears in the ranked list, so it does not
  depend on how many candidates were read (top ``k`` groups are a prefix of top ``k + n``).
* ``"sum"``: the sum of its matching chunks' scores (CombSUM over chunks, Fox & Shaw 1994): rewards
  documents that match in several places. It needs non-negative scores (BM25, RRF, min-max fusion) to mean
  "more matches is better", and it depends on how many candidates were read (``candidate_k``).

For fusion, :class:`~fastrag.retrieval.fusion.ReciprocalRankFusion` and
:class:`~fastrag.retrieval.fusion.WeightedScoreFusion` take the same ``group_by``: each branch list then
counts a group once (at its best-ranked chunk), so a document with five matching chunks does not earn five
RRF credits; the fused results carry the group's chunks in the same way.

``metadata["grouping"]`` (:data:`~fastrag.models.GROUP`) is ``{"by": key, "value": the group's value,
"chunks": [...]}``; ``chunks`` lists the group's other matching chunks, best first, each
``{"id", "content", "metadata"}`` with its own ``score`` and ``rank`` from the list it was found in.
:attr:`~fastrag.models.Document.group_chunks` gives them back as documents. A chunk without the key (or
with ``None`` there) is a group of its own, with ``value`` ``None``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, Literal, TypeAlias

from fastrag.errors import InvalidParameterError
from fastrag.filters import FilterLike, combine_filters
from fastrag.models import GROUP, RANK, SCORE, Document, plain_value
from fastrag.protocols import Retriever
from fastrag.retrieval._provenance import finite_score
from fastrag.retrieval._validation import check_k, check_positive_int, check_query, fetch_limit
from fastrag.retrieval.limits import DEFAULT_LIMITS, RetrievalLimits
from fastrag.retrieval.pagination import check_offset
from fastrag.retrieval.result import ReturnsResult, stage, timed

__all__ = ["GroupScore", "GroupingRetriever", "check_group_by", "group_documents", "group_key"]

GroupScore: TypeAlias = Literal["max", "sum"]
_SCORES = ("max", "sum")


def check_group_by(value: Any) -> str:
    """``value`` if it is a non-empty metadata key.

    Raises:
        InvalidParameterError: otherwise.
    """
    if not isinstance(value, str) or not value.strip():
        raise InvalidParameterError(f"group_by must be a metadata key (a non-empty string), got {value!r}")
    return value


def group_key(document: Document, by: str) -> str:
    """A string naming ``document``'s group: its ``by`` value (as canonical JSON), or, without one, its own
    id (a group of its own)."""
    value = document.metadata.get(by)
    if value is None:
        return "\x00" + document.id
    return json.dumps(plain_value(value), sort_keys=True, ensure_ascii=False, default=str)


def chunk_entry(document: Document) -> dict[str, Any]:
    """A chunk as carried in a group: ``{"id", "content", "metadata"}`` (without a nested group)."""
    metadata = {k: plain_value(v) for k, v in document.metadata.items() if k != GROUP}
    return {"id": document.id, "content": document.content, "metadata": metadata}


def group_documents(documents: Sequence[Document], *, by: str, score: GroupScore = "max") -> list[Document]:
    """Group a ranked list (best first) into one document per group, best group first.

    Each result is a copy of the group's first (best-ranked) document with ``score`` the group's score,
    zero-based ``rank``, and ``metadata["grouping"]`` (see the module). A document that already carries a
    group (from a grouped fusion) brings its chunks along. Repeated ids count once.

    Raises:
        InvalidParameterError: ``by`` is not a non-empty string, or ``score`` is not ``"max"`` or ``"sum"``.
    """
    check_group_by(by)
    if score not in _SCORES:
        raise InvalidParameterError(f"score must be one of {_SCORES}, got {score!r}")
    order: list[str] = []
    members: dict[str, list[Document]] = {}
    seen: set[str] = set()
    for document in documents:
        if document.id in seen:
            continue
        seen.add(document.id)
        key = group_key(document, by)
        if key not in members:
            members[key] = []
            order.append(key)
        members[key].append(document)
    entries: list[tuple[int, str, float | None]] = []
    for position, key in enumerate(order):
        chunks = members[key]
        if score == "max":
            value = finite_score(chunks[0].metadata.get(SCORE))
        else:
            values = [v for v in (finite_score(c.metadata.get(SCORE)) for c in chunks) if v is not None]
            value = math.fsum(values) if values else None
        entries.append((position, key, value))
    if score == "sum":  # by the sum, ties (and groups without a score, last) in list order
        entries.sort(key=lambda e: (-e[2] if e[2] is not None else math.inf, e[0]))
    # "max" keeps list order: the best chunk of each group, in rank order
    out: list[Document] = []
    for rank, (_, key, group_score) in enumerate(entries):
        chunks = members[key]
        best = chunks[0]
        carried: list[dict[str, Any]] = []
        known = {c.id for c in chunks}
        for chunk in chunks:
            if chunk is not best:
                carried.append(chunk_entry(chunk))
            for inner in chunk.group_chunks:  # chunks a grouped fusion already gathered
                if inner.id not in known:
                    known.add(inner.id)
                    carried.append(chunk_entry(inner))
        metadata = {k: v for k, v in best.metadata.items() if k not in (SCORE, RANK, GROUP)}
        metadata[SCORE] = group_score
        metadata[RANK] = rank
        metadata[GROUP] = {"by": by, "value": plain_value(best.metadata.get(by)), "chunks": carried}
        out.append(Document(id=best.id, content=best.content, metadata=metadata))
    return out


class GroupingRetriever(ReturnsResult):
    """One result per group of chunks (by a metadata key), over any retriever.

    It asks the inner retriever for ``candidate_k`` chunks (at least ``k``), groups them
    (:func:`group_documents`) and returns the best ``k`` groups. When the candidates hold fewer than ``k``
    groups and the inner retriever returned all it was asked for, it asks again for twice as many, up to
    ``limits.max_k``: so ``k`` groups come back whenever the inner retriever has them within that limit.

    Args:
        retriever: any :class:`~fastrag.protocols.Retriever`.
        group_by: the metadata key: ``"parent_id"`` (the source document of an ingested chunk),
            ``"source_uri"``, or any field.
        score: ``"max"`` (default) or ``"sum"``; see :mod:`fastrag.retrieval.grouping`.
        candidate_k: chunks read per call, at least (default 100).
        limits: bounds on ``k`` and the query (default :data:`~fastrag.retrieval.limits.DEFAULT_LIMITS`).

    Raises:
        InvalidParameterError: ``retriever`` lacks ``retrieve``; ``group_by`` is not a non-empty string;
            ``score`` is unknown; ``candidate_k`` is not a positive int.

    Scores are the inner retriever's (the best chunk's, or the sum); ranks are the groups' positions.
    :meth:`~fastrag.retrieval.result.ReturnsResult.retrieve_result` reports the stage ``"candidates"``
    (with the inner retriever's under ``"candidates/"``).
    """

    accepts_offset = True  # retrieve(..., offset=): fastrag.protocols.SupportsOffset

    name = "grouping"

    def __init__(
        self,
        retriever: Retriever,
        *,
        group_by: str = "parent_id",
        score: GroupScore = "max",
        candidate_k: int = 100,
        limits: RetrievalLimits = DEFAULT_LIMITS,
    ) -> None:
        if not isinstance(retriever, Retriever):
            raise InvalidParameterError(f"retriever has no retrieve() method: {retriever!r}")
        if score not in _SCORES:
            raise InvalidParameterError(f"score must be one of {_SCORES}, got {score!r}")
        self.retriever = retriever
        self.group_by = check_group_by(group_by)
        self.score: GroupScore = score
        self.candidate_k = check_positive_int(candidate_k, "candidate_k")
        self.limits = limits

    async def retrieve(
        self, query: str, *, k: int = 10, filter: FilterLike | None = None, offset: int = 0  # noqa: A002
    ) -> list[Document]:
        """The best ``k`` groups for ``query`` matching ``filter``, best first; ``offset`` skips that many
        groups (:mod:`fastrag.retrieval.pagination`).

        Raises:
            InvalidParameterError: ``k`` or the query is invalid (raised before the inner retriever runs).
            FilterError: ``filter`` is malformed.
            Exception: whatever the inner retriever raises, unchanged.
        """
        check_query(query, self.limits)
        check_k(k, self.limits)
        check_offset(offset, k, self.limits)
        node = combine_filters(filter)
        ceiling = fetch_limit(self.retriever, self.limits)
        wanted = offset + k
        depth = min(max(self.candidate_k, wanted), ceiling)
        while True:
            with timed("candidates"), stage("candidates"):
                found = await self.retriever.retrieve(query, k=depth, filter=node)
            groups = group_documents(found, by=self.group_by, score=self.score)
            if len(groups) >= wanted or len(found) < depth or depth >= ceiling:
                return groups[offset:wanted]
            depth = min(depth * 2, ceiling)

    def __repr__(self) -> str:
        return (
            f"GroupingRetriever({self.retriever!r}, group_by={self.group_by!r}, score={self.score!r}, "
            f"candidate_k={self.candidate_k!r})"
        )
