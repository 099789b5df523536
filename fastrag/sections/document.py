"""The normalised parent document: a tree of sections, each with its own body, rendered as Markdown.

The parser's sections (:class:`~fastrag.ingestion.parsers.ParsedDocument`, the very ones the chunker cut)
become a tree: each heading is one :class:`SourceSection` whose ``text`` is its own body (not its
subsections'), whose children are the headings nested under it, and whose ``depth`` is the length of its
heading path. A heading with no body of its own (``# Guide`` directly followed by ``## Install``) is kept as a
section with empty ``text``, so every heading on a path exists. Text before the first heading (or a file
without headings) is a section with an empty heading path at depth 0; it encloses nothing. The document's
:attr:`ParentDocument.text` renders the tree as Markdown: each heading as ``"#" * depth + " " + heading``, then
its body, blocks separated by a blank line; a section's ``start``/``end`` are the offsets of its body in that
text, so ``document.text[section.start:section.end] == section.text``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fastrag.errors import InvalidParameterError, SectionNotFoundError

__all__ = ["ParentDocument", "SourceSection", "normalise"]


@dataclass(frozen=True, slots=True)
class SourceSection:
    """One heading of a parent document and its own body text, with where it sits in the document.

    Attributes:
        id: ``f"{parent_id}#section-{position}"``: stable while the document is unchanged.
        parent_id: the parent document's id (the chunks' ``parent_id``).
        source_uri: the file (or BEIR document) the parent came from; the citation target.
        title: the parent document's title.
        heading_path: the headings from the outermost down to this section's own (``("Guide", "Install")``);
            empty for text before the first heading.
        position: zero-based place of this section in :attr:`ParentDocument.sections` (document order).
        text: the section's own body, without its heading and without its subsections; empty for a
            heading directly followed by a subheading.
        start: offset of ``text`` in :attr:`ParentDocument.text` (characters).
        end: offset one past the end of ``text`` in :attr:`ParentDocument.text` (characters).
        parsed_index: the index of this section in the parsed document's sections (what chunks record as
            :data:`~fastrag.models.SECTION_INDEX`), or ``None`` for a heading without a body of its own.
        parent_section_id: the id of the enclosing section, or ``None`` at depth 0 and 1.
        child_ids: the ids of the sections directly nested under this one, in document order.
        chunk_ids: in a result of :meth:`~fastrag.sections.index.SectionIndex.resolve`, the ids of the chunks (of the hit, or of
            the parts of a merged hit) that resolved to this section, in document order; empty otherwise and
            in ancestors.
        chunk_spans: the ``(start, end)`` offsets of those chunks in :attr:`ParentDocument.text`
            (characters), one per entry of ``chunk_ids``.
        ancestors: in a result of :meth:`~fastrag.sections.index.SectionIndex.resolve` with ``ancestors=True``: the enclosing
            sections, outermost first (each with empty ``ancestors`` and ``chunk_ids`` of its own); empty
            otherwise.
    """

    id: str
    parent_id: str
    source_uri: str
    title: str
    heading_path: tuple[str, ...]
    position: int
    text: str
    start: int
    end: int
    parsed_index: int | None = None
    parent_section_id: str | None = None
    child_ids: tuple[str, ...] = ()
    chunk_ids: tuple[str, ...] = ()
    chunk_spans: tuple[tuple[int, int], ...] = ()
    ancestors: tuple[SourceSection, ...] = ()

    @property
    def depth(self) -> int:
        """How deep the heading is nested: ``len(heading_path)`` (0 for text before the first heading).

        This is the nesting depth, not the Markdown level: ``# A`` then ``### C`` puts ``C`` at depth 2.
        """
        return len(self.heading_path)

    @property
    def heading(self) -> str:
        """The section's own heading (the last of ``heading_path``), or ``""`` at depth 0."""
        return self.heading_path[-1] if self.heading_path else ""


@dataclass(frozen=True, slots=True)
class ParentDocument:
    """A parent document as a :class:`~fastrag.sections.index.SectionIndex` holds it: normalised text and its sections.

    Attributes:
        id: the parent id, as chunks record it under ``parent_id``.
        source_uri: where it came from.
        title: its title (the first heading, the HTML title, the BEIR title or the file stem).
        content_hash: SHA-256 (hex) of the source file's bytes, as chunks record it under
            ``content_hash``; ``None`` when it was added without one.
        text: the normalised text: every section as Markdown (heading line, then body), separated by
            blank lines.
        sections: every section in document order (a pre-order walk of the heading tree).
    """

    id: str
    source_uri: str
    title: str
    content_hash: str | None
    text: str
    sections: tuple[SourceSection, ...]

    def section(self, section_id: str) -> SourceSection:
        """The section with id ``section_id``.

        Raises:
            SectionNotFoundError: this document has no such section.
        """
        for section in self.sections:
            if section.id == section_id:
                return section
        raise SectionNotFoundError(f"{self.id!r} has no section {section_id!r}", parent_id=self.id)

    def ancestors(self, section: SourceSection) -> tuple[SourceSection, ...]:
        """The sections enclosing ``section``, outermost first (empty at depth 0 and 1).

        Raises:
            InvalidParameterError: ``section`` is not a :class:`SourceSection`.
            SectionNotFoundError: ``section`` is not a section of this document (its ``id`` is unknown here).
        """
        by_id = self._sections_by_id(section)
        chain: list[SourceSection] = []
        current = by_id[section.id].parent_section_id
        while current is not None:
            enclosing = by_id[current]
            chain.append(enclosing)
            current = enclosing.parent_section_id
        return tuple(reversed(chain))

    def children(self, section: SourceSection) -> tuple[SourceSection, ...]:
        """The sections directly nested under ``section``, in document order.

        Raises:
            InvalidParameterError: ``section`` is not a :class:`SourceSection`.
            SectionNotFoundError: ``section`` is not a section of this document (its ``id`` is unknown here).
        """
        by_id = self._sections_by_id(section)
        return tuple(by_id[child] for child in by_id[section.id].child_ids)

    def _sections_by_id(self, section: SourceSection) -> dict[str, SourceSection]:
        if not isinstance(section, SourceSection):
            raise InvalidParameterError(f"section must be a SourceSection, got {type(section).__name__}")
        by_id = {s.id: s for s in self.sections}
        if section.id not in by_id:
            raise SectionNotFoundError(f"{self.id!r} has no section {section.id!r}", parent_id=self.id)
        return by_id


def normalise(
    parent_id: str,
    source_uri: str,
    title: str,
    content_hash: str | None,
    parsed: Sequence[Any],
) -> ParentDocument:
    """Build the section tree and normalised text from the parser's flat sections.

    ``parsed`` holds parser sections (or ``(heading_path, text)`` pairs) in reading order. Each heading
    opens exactly one parser section, so two consecutive sections with the same path are two headings; a
    heading whose body was empty (dropped by the parser) is recreated when a deeper path needs it.
    """
    pairs = [(tuple(s[0]), s[1]) if isinstance(s, tuple | list) else (tuple(s.heading_path), s.text) for s in parsed]
    # nodes: (heading_path, text, parsed_index, parent position)
    nodes: list[tuple[tuple[str, ...], str, int | None, int | None]] = []
    stack: list[int] = []  # open nodes; stack[d] has a heading path of length d + 1
    for parsed_index, (path, text) in enumerate(pairs):
        keep = 0
        while keep < min(len(stack), len(path) - 1) and nodes[stack[keep]][0] == path[: keep + 1]:
            keep += 1
        del stack[keep:]
        for depth in range(keep, len(path) - 1):  # enclosing headings without a body of their own
            nodes.append((path[: depth + 1], "", None, stack[-1] if stack else None))
            stack.append(len(nodes) - 1)
        nodes.append((path, text, parsed_index, stack[-1] if stack and path else None))
        if path:
            stack.append(len(nodes) - 1)
    ids = [f"{parent_id}#section-{position}" for position in range(len(nodes))]
    children: list[list[str]] = [[] for _ in nodes]
    for position, (_, _, _, parent) in enumerate(nodes):
        if parent is not None:
            children[parent].append(ids[position])
    pieces: list[str] = []
    offset = 0
    sections: list[SourceSection] = []
    for position, (path, text, parsed_index, parent) in enumerate(nodes):
        if path:
            heading = f"{'#' * len(path)} {path[-1]}\n\n"
            pieces.append(heading)
            offset += len(heading)
        start = offset
        if text:
            pieces.append(text + "\n\n")
            offset += len(text) + 2
        sections.append(
            SourceSection(
                id=ids[position], parent_id=parent_id, source_uri=source_uri, title=title, heading_path=path,
                position=position, text=text, start=start, end=start + len(text), parsed_index=parsed_index,
                parent_section_id=None if parent is None else ids[parent], child_ids=tuple(children[position]),
            )
        )  # fmt: skip
    return ParentDocument(
        id=parent_id, source_uri=source_uri, title=title, content_hash=content_hash,
        text="".join(pieces)[:-2], sections=tuple(sections),  # every piece ends with a blank line
    )  # fmt: skip
