"""The :class:`Document` that flows through every stage, and its reserved metadata keys.

A stage that ranks documents (a store search, a fusion, a reranker) returns *copies* stamped with
``score`` and ``rank``; it never mutates its input. Fusion and reranking also record, per branch, the
score and rank each document had there under ``branches``, so a user can see why it ranks where it does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from fastrag.errors import InvalidParameterError

__all__ = [
    "BRANCHES",
    "CHUNK_INDEX",
    "CONTENT_HASH",
    "GROUP",
    "HEADINGS",
    "LANGUAGE",
    "PAGE",
    "PARENT_ID",
    "RANK",
    "RESERVED_KEYS",
    "SCORE",
    "SECTION_END",
    "SECTION_INDEX",
    "SECTION_START",
    "SOURCE_URI",
    "TITLE",
    "BranchResult",
    "Document",
]

SOURCE_URI = "source_uri"
"""Where the text came from (a file path relative to the indexed root, or a URL); the citation target."""
TITLE = "title"
"""A human-readable title: the file's first heading, or the BEIR title."""
SCORE = "score"
"""The score from the stage that produced this copy; higher is better; its range depends on the stage."""
RANK = "rank"
"""Zero-based position in the list the stage returned (0 is best)."""
LANGUAGE = "language"
"""ISO 639-1 code of the text's language (``"en"``, ``"de"``, ``"zh"``), when known."""
CHUNK_INDEX = "chunk_index"
"""Zero-based position of this chunk within its parent document."""
PARENT_ID = "parent_id"
"""Id of the parent document (the whole file) this chunk was cut from."""
CONTENT_HASH = "content_hash"
"""SHA-256 of the parent file's bytes; lets re-indexing skip unchanged files."""
HEADINGS = "headings"
"""The heading path of the section a chunk was cut from, outermost first (a list of str), set by ingestion."""
SECTION_INDEX = "section_index"
"""The zero-based index of the section a chunk was cut from, in the ``sections`` of its
:class:`~fastrag.ingestion.parsers.ParsedDocument` (an int), set by ingestion; :mod:`fastrag.sections` traces
a hit back to its section with it."""
SECTION_START = "section_start"
"""Offset of a chunk's first character in its section's body (characters, an int), set by ingestion."""
SECTION_END = "section_end"
"""Offset one past a chunk's last character in its section's body (characters, an int), set by ingestion."""
GROUP = "grouping"
"""The group a grouped result stands for (:mod:`fastrag.retrieval.grouping`): ``{"by": key, "value": ...,
"chunks": [{"id", "content", "metadata"}, ...]}``, ``chunks`` being the group's other matching chunks, best
first."""
PAGE = "page"
"""The 1-based page of a paginated source (a PDF) a chunk lies on, set by ingestion; citations show it (``p. 3``)."""
BRANCHES = "branches"
"""Per-branch provenance of a fused or reranked document: ``{branch_name: {"score": s, "rank": r}}``.
A branch that did not return the document is absent from the mapping."""

RESERVED_KEYS = frozenset({SOURCE_URI, TITLE, SCORE, RANK, LANGUAGE, CHUNK_INDEX, PARENT_ID, CONTENT_HASH, BRANCHES})
"""The metadata keys with a fixed meaning, set by fastrag's stages; do not use them for your own data."""


@dataclass(frozen=True, slots=True)
class BranchResult:
    """Where one branch placed a document: its score there (higher is better) and zero-based rank.

    Attributes:
        score: the branch's own score (cosine, BM25, ...; ranges differ between branches), or ``None`` when
            the branch gave no finite score.
        rank: the document's zero-based position in that branch's list.
    """

    score: float | None
    rank: int


@dataclass(frozen=True, slots=True)
class Document:
    """A unit of retrievable text.

    Attributes:
        id: unique within a store; upserting the same id replaces the document.
        content: the text that is embedded and indexed for BM25.
        metadata: JSON-like values (str, int, float, bool, lists of those, nested mappings). The keys in
            :data:`RESERVED_KEYS` have fixed meanings. Stored as a read-only mapping (a copy of the one
            given).

    Raises:
        InvalidParameterError: (a ``ValueError``) ``id`` is not a non-empty string, ``content`` is not a string, or ``metadata`` is not
            a mapping.

    Examples:
        >>> from fastrag import Document
        >>> doc = Document(id="guide#0", content="BM25 ranks documents.", metadata={"year": 2009})
        >>> ranked = doc.ranked(score=3.2, rank=0)  # a copy; doc is unchanged
        >>> doc.score, ranked.score, ranked.rank, ranked.metadata["year"]
        (None, 3.2, 0, 2009)
    """

    id: str
    content: str
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise InvalidParameterError(f"Document.id must be a non-empty string, got {self.id!r}")
        if not isinstance(self.content, str):
            raise InvalidParameterError(f"Document.content must be a string, got {type(self.content).__name__}")
        if not isinstance(self.metadata, Mapping):
            raise InvalidParameterError(f"Document.metadata must be a mapping, got {type(self.metadata).__name__}")
        object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))

    @property
    def score(self) -> float | None:
        """The score stamped by the last ranking stage, or ``None``."""
        value = self.metadata.get(SCORE)
        return None if value is None else float(value)

    @property
    def rank(self) -> int | None:
        """The zero-based rank stamped by the last ranking stage, or ``None``."""
        value = self.metadata.get(RANK)
        return None if value is None else int(value)

    @property
    def source_uri(self) -> str | None:
        """The document's provenance, or ``None``."""
        return self.metadata.get(SOURCE_URI)

    @property
    def source_label(self) -> str:
        """How a citation names this document: its ``source_uri`` (else its id), and for a chunk of a
        paginated source its page: ``"manual.pdf p. 3"``."""
        label = str(self.metadata.get(SOURCE_URI) or self.id)
        page = self.metadata.get(PAGE)
        if isinstance(page, int) and not isinstance(page, bool):
            label = f"{label} p. {page}"
        return label

    @property
    def group_chunks(self) -> tuple[Document, ...]:
        """The other matching chunks of a grouped result (:mod:`fastrag.retrieval.grouping`), best first, each
        with its own ``score`` and ``rank``; empty for an ungrouped document."""
        group = self.metadata.get(GROUP)
        if not isinstance(group, Mapping):
            return ()
        return tuple(
            Document(id=c["id"], content=c["content"], metadata=c.get("metadata") or {})
            for c in group.get("chunks") or ()
            if isinstance(c, Mapping)
        )

    @property
    def branches(self) -> Mapping[str, BranchResult]:
        """Per-branch score and rank for a fused or reranked document; empty otherwise."""
        raw = self.metadata.get(BRANCHES) or {}
        return {name: BranchResult(score=v.get("score"), rank=int(v["rank"])) for name, v in raw.items()}

    def with_metadata(self, **updates: Any) -> Document:
        """Return a copy whose metadata has ``updates`` merged in; this document is unchanged."""
        merged = dict(self.metadata)
        merged.update(updates)
        return Document(id=self.id, content=self.content, metadata=merged)

    def ranked(self, *, score: float | None, rank: int) -> Document:
        """Return a copy stamped with ``score`` and zero-based ``rank``."""
        return self.with_metadata(**{SCORE: score, RANK: rank})

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: ``{"id", "content", "metadata"}``."""
        return {"id": self.id, "content": self.content, "metadata": plain_value(self.metadata)}


_new = object.__new__
_set = object.__setattr__


def owned_document(id: str, content: str, metadata: dict[str, Any]) -> Document:  # noqa: A002
    """A :class:`Document` built from values already known to be valid, taking ``metadata`` as it is.

    For code that builds results from its own data (a store decoding its rows, a fusion stamping its
    copies): it skips :class:`Document`'s checks and the copy of ``metadata``, about three times cheaper,
    which counts on the hot path of every query. The caller hands ``metadata`` over: nothing else may
    hold or change that dict afterwards. Anything from a user goes through ``Document(...)``.
    """
    doc = _new(Document)
    _set(doc, "id", id)
    _set(doc, "content", content)
    _set(doc, "metadata", MappingProxyType(metadata))
    return doc


def plain_value(value: Any) -> Any:
    """A copy of a metadata value with mappings as dicts and tuples as lists (read-only views unwrapped)."""
    if isinstance(value, Mapping):
        return {k: plain_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain_value(v) for v in value]
    return value
