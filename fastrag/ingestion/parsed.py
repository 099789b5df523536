"""What every parser returns: a :class:`ParsedDocument` of :class:`Section` s (text under one heading).

Its own module so that the format readers (:mod:`fastrag.ingestion.parsers` for text, Markdown, HTML and BEIR;
:mod:`fastrag.ingestion.pdf`; :mod:`fastrag.ingestion.word`) share the types without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ParsedDocument", "Section"]


@dataclass(frozen=True, slots=True)
class Section:
    """A run of text under one heading.

    Attributes:
        heading_path: the headings above this text, outermost first (``("Guide", "Install")``);
            empty for text before the first heading or in a file without headings.
        text: the section's body; paragraphs are separated by blank lines. Never contains the
            heading itself.
        page: the 1-based page of a paginated source (PDF) this text is on, else ``None``; the
            ingestion pipeline records it on each chunk as metadata ``page``.
    """

    heading_path: tuple[str, ...]
    text: str
    page: int | None = None


@dataclass(frozen=True, slots=True)
class ParsedDocument:
    """One source document split into sections.

    Attributes:
        source_uri: where it came from: the file path relative to the indexed root, with ``/``
            separators; for a BEIR document ``<corpus path>#<_id>``.
        title: the first heading, the HTML ``<title>``, the BEIR title, or the file stem.
        sections: the sections in reading order (a tuple, so the document stays immutable).
        id: the parent document's id, recorded on every chunk as ``parent_id``: the BEIR ``_id`` for a
            corpus document, otherwise ``source_uri`` (the default).
    """

    source_uri: str
    title: str
    sections: tuple[Section, ...]
    id: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "sections", tuple(self.sections))
        if not self.id:
            object.__setattr__(self, "id", self.source_uri)
