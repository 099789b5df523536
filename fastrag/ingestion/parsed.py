"""What every parser returns: a :class:`ParsedDocument` of :class:`Section` s (text under one heading).

Its own module so that the format readers (:mod:`fastrag.ingestion.parsers` for text, Markdown, HTML and BEIR;
:mod:`fastrag.ingestion.pdf`; :mod:`fastrag.ingestion.word`) share the types without importing each other.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["ParsedDocument", "Section", "kept_sections"]


@dataclass(frozen=True, slots=True)
class Section:
    """A run of text under one heading.

    Attributes:
        heading_path: the headings above this text, outermost first (``("Guide", "Install")``);
            empty for text before the first heading or in a file without headings.
        text: the section's body; paragraphs are separated by blank lines. Never contains the
            heading itself. Empty only for a heading with nothing under it, neither text nor a subheading
            (the sections the parsers keep: ``kept_sections`` in this module): the chunker then makes the
            heading itself its one chunk.
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


def kept_sections(sections: Iterable[tuple[tuple[str, ...], str]]) -> tuple[Section, ...]:
    """The sections a parser keeps, from its ``(heading path, body)`` pairs in reading order.

    A section with a non-blank body is kept as it is. One with a blank body is kept, with an empty body,
    when it is a heading with nothing under it: its own heading is not blank and the next section is not
    nested under it (a document holding only ``# Quarterly merger plan``, or ``## Agenda`` directly followed
    by ``## Minutes``), so that the heading is indexed as text. An enclosing heading with no body of its
    own (``# Guide`` directly followed by ``## Install``) is dropped: it is on the heading path of every
    section under it. Text without a heading that is blank is dropped.
    """
    pairs = list(sections)
    kept: list[Section] = []
    for position, (path, body) in enumerate(pairs):
        if body.strip():
            kept.append(Section(heading_path=path, text=body))
            continue
        following = pairs[position + 1][0] if position + 1 < len(pairs) else ()
        encloses_next = len(following) > len(path) and following[: len(path)] == path
        if path and path[-1].strip() and not encloses_next:
            kept.append(Section(heading_path=path, text=""))
    return tuple(kept)
