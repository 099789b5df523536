"""Which section a chunk came from: the chunk metadata that records it, merged chunks, and locating a chunk.

Chunks written by :class:`~fastrag.ingestion.IngestionPipeline` carry ``parent_id``, ``headings``,
``content_hash``, :data:`~fastrag.models.SECTION_INDEX`, :data:`~fastrag.models.SECTION_START` and
:data:`~fastrag.models.SECTION_END` (which parsed section, and the chunk's character offsets in its body). A
chunk with those keys is located exactly and checked: its text must be that slice of the section. A chunk
without them (written before those keys existed, or by other code) is matched by its heading path and its
text: the one section under those headings whose body contains the chunk's text.

A hit whose ``metadata["merged_from"]`` (:data:`MERGED_FROM`) is a list of mappings, one per original chunk
(as :func:`merge_chunks` builds them), stands for all its parts.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastrag.errors import InvalidParameterError, SectionNotFoundError
from fastrag.models import (
    CHUNK_INDEX,
    CONTENT_HASH,
    HEADINGS,
    PARENT_ID,
    SECTION_END,
    SECTION_INDEX,
    SECTION_START,
    SOURCE_URI,
    TITLE,
    Document,
    plain_value,
)
from fastrag.sections.document import ParentDocument, SourceSection

__all__ = ["MERGED_FROM", "describe", "locate", "merge_chunks", "parts_to_resolve"]

MERGED_FROM = "merged_from"
"""Metadata key of a merged chunk: a list of mappings, one per original chunk, in the order merged; each
holds the original's ``id``, ``content`` and provenance keys (see :func:`merge_chunks`)."""

_PROVENANCE_KEYS = (SOURCE_URI, TITLE, PARENT_ID, CHUNK_INDEX, CONTENT_HASH, HEADINGS,
                    SECTION_INDEX, SECTION_START, SECTION_END)  # fmt: skip


def merge_chunks(
    chunks: Sequence[Document], *, id: str | None = None, separator: str = "\n\n"  # noqa: A002
) -> Document:
    """One document made of several chunks, which :meth:`~fastrag.sections.index.SectionIndex.resolve` maps to all their sections.

    Use it when a stage joins hits (adjacent chunks of a document, or a few best hits) into one passage.

    Args:
        chunks: the chunks, in the order to join them; at least one. A chunk that is itself merged
            contributes its parts.
        id: the merged document's id; by default the chunk ids joined with ``"+"``.
        separator: put between the chunks' texts in ``content``.

    Returns:
        A new :class:`~fastrag.models.Document` whose ``content`` is the chunks' texts joined by
        ``separator`` and whose metadata holds :data:`MERGED_FROM` (one mapping per original chunk: its
        ``id``, ``content`` and those of ``source_uri``, ``title``, ``parent_id``, ``chunk_index``,
        ``content_hash``, ``headings``, ``section_index``, ``section_start``, ``section_end`` it has), plus
        ``source_uri`` and ``title`` of the first chunk, and ``parent_id`` when all chunks share one. No
        ``score`` or ``rank``: the merged document has not been ranked.

    Raises:
        InvalidParameterError: ``chunks`` is empty or holds something other than a Document; ``id`` is given
            but not a non-empty string; ``separator`` is not a string; a chunk that is itself merged has a
            malformed :data:`MERGED_FROM` (not a non-empty list of mappings, or a part's ``id`` that is not
            a non-empty string).
    """
    if isinstance(chunks, Document) or isinstance(chunks, str) or not isinstance(chunks, Sequence) or not chunks:
        raise InvalidParameterError("merge_chunks needs a non-empty sequence of Documents")
    if id is not None and (not isinstance(id, str) or not id):
        raise InvalidParameterError(f"merge_chunks: id must be a non-empty string or None, got {describe(id)}")
    if not isinstance(separator, str):
        raise InvalidParameterError(f"merge_chunks: separator must be a string, got {type(separator).__name__}")
    parts: list[dict[str, Any]] = []
    for chunk in chunks:
        if not isinstance(chunk, Document):
            raise InvalidParameterError(f"merge_chunks takes Documents, got {type(chunk).__name__}")
        if MERGED_FROM in chunk.metadata:
            parts.extend(dict(plain_value(part)) for part in _merged_parts(chunk))
            continue
        part: dict[str, Any] = {"id": chunk.id, "content": chunk.content}
        part.update({key: plain_value(chunk.metadata[key]) for key in _PROVENANCE_KEYS if key in chunk.metadata})
        parts.append(part)
    first = chunks[0].metadata
    metadata: dict[str, Any] = {MERGED_FROM: parts}
    for key in (SOURCE_URI, TITLE):
        if key in first:
            metadata[key] = first[key]
    parent_ids = {part.get(PARENT_ID) for part in parts}
    if len(parent_ids) == 1 and None not in parent_ids:
        metadata[PARENT_ID] = parent_ids.pop()
    content = separator.join(chunk.content for chunk in chunks)
    merged_id = id if id is not None else "+".join(chunk.id for chunk in chunks)
    return Document(id=merged_id, content=content, metadata=metadata)


def describe(value: Any) -> str:
    """A short description of a bad argument for an error message: its type and a bounded repr."""
    return f"{type(value).__name__} {reprlib.repr(value)}"


@dataclass(frozen=True, slots=True)
class _Part:
    """One chunk to trace (a plain hit, or one part of a merged hit), checked."""

    id: str
    parent_id: str
    content: str | None  # None: the part recorded no text
    headings: tuple[str, ...] | None  # None: not recorded
    content_hash: str | None
    section_index: int | None
    span: tuple[int, int] | None  # (section_start, section_end) in the section's body


def parts_to_resolve(hit: Document) -> list[_Part]:
    """The checked parts of ``hit``: itself, or one per :data:`MERGED_FROM` entry."""
    if MERGED_FROM not in hit.metadata:
        raw = {"content": hit.content}
        raw.update({key: hit.metadata[key] for key in _PROVENANCE_KEYS if key in hit.metadata})
        name = f"chunk {hit.id!r}"
        return [_check_part(raw, chunk_id=hit.id, name=name, label=lambda key: f"{name}: metadata[{key!r}]")]
    parts: list[_Part] = []
    for index, raw in enumerate(_merged_parts(hit)):
        name = f"{hit.id!r}: {MERGED_FROM}[{index}]"
        if MERGED_FROM in raw:
            raise InvalidParameterError(
                f"{name} is itself a merged chunk; merge_chunks flattens merged chunks into their parts"
            )
        parts.append(_check_part(raw, chunk_id=raw["id"], name=name, label=lambda key, name=name: f"{name}.{key}"))
    return parts


def _check_part(raw: Mapping[str, Any], *, chunk_id: str, name: str, label: Callable[[str], str]) -> _Part:
    """Check one chunk's provenance keys; ``name`` names the chunk and ``label(key)`` a key, in messages."""
    parent_id = raw.get(PARENT_ID)
    if parent_id is None:
        raise InvalidParameterError(
            f"{name} has no parent_id in its metadata, so it cannot be traced to a section "
            "(chunks written by IngestionPipeline have one)"
        )
    if not isinstance(parent_id, str) or not parent_id:
        raise InvalidParameterError(
            f"{label(PARENT_ID)} has the wrong type or is empty: it must be a non-empty string, got "
            f"{describe(parent_id)}"
        )
    content = raw.get("content")
    if "content" in raw and not isinstance(content, str):
        raise InvalidParameterError(f"{label('content')} must be a string, got {describe(content)}")
    headings = raw.get(HEADINGS)
    if headings is not None and (
        isinstance(headings, str | bytes)
        or not isinstance(headings, Sequence)
        or not all(isinstance(h, str) for h in headings)
    ):
        raise InvalidParameterError(f"{label(HEADINGS)} must be a list of strings, got {describe(headings)}")
    content_hash = raw.get(CONTENT_HASH)
    if content_hash is not None and not isinstance(content_hash, str):
        raise InvalidParameterError(f"{label(CONTENT_HASH)} must be a string, got {describe(content_hash)}")
    index, start, end = (raw.get(key) for key in (SECTION_INDEX, SECTION_START, SECTION_END))
    for key, value in ((SECTION_INDEX, index), (SECTION_START, start), (SECTION_END, end)):
        if value is not None and (not _is_int(value) or value < 0):
            raise InvalidParameterError(f"{label(key)} must be an int >= 0, got {describe(value)}")
    if (start is None) != (end is None):
        given = SECTION_START if end is None else SECTION_END
        raise InvalidParameterError(f"{label(given)}: {SECTION_START} and {SECTION_END} go together; got only one")
    if start is not None and index is None:
        raise InvalidParameterError(f"{label(SECTION_START)} and {SECTION_END} need {SECTION_INDEX}")
    if start is not None and start > end:
        raise InvalidParameterError(f"{label(SECTION_START)} ({start}) is past {SECTION_END} ({end})")
    span = None if start is None else (start, end)
    if not content and span is None:
        what = "no content" if content is None else "empty content"
        raise InvalidParameterError(
            f"{name} has {what} and no {SECTION_START}/{SECTION_END}, so there is nothing to locate it by"
        )
    return _Part(
        id=chunk_id, parent_id=parent_id, content=content,
        headings=None if headings is None else tuple(headings), content_hash=content_hash,
        section_index=index, span=span,
    )  # fmt: skip


def _merged_parts(doc: Document) -> list[dict[str, Any]]:
    """The raw :data:`MERGED_FROM` entries of ``doc`` as dicts, each with an ``id`` (``f"{doc.id}[{i}]"``
    when it has none); raises when the list or an entry's id is malformed."""
    raw = doc.metadata.get(MERGED_FROM)
    if isinstance(raw, str | bytes) or not isinstance(raw, Sequence) or not raw:
        raise InvalidParameterError(f"{doc.id!r}: metadata[{MERGED_FROM!r}] must be a non-empty list of mappings")
    parts: list[dict[str, Any]] = []
    for index, entry in enumerate(raw):
        if not isinstance(entry, Mapping):
            raise InvalidParameterError(
                f"{doc.id!r}: metadata[{MERGED_FROM!r}][{index}] must be a mapping, got {type(entry).__name__}"
            )
        part = dict(entry)
        if "id" not in part:
            part["id"] = f"{doc.id}[{index}]"
        elif not isinstance(part["id"], str) or not part["id"]:
            raise InvalidParameterError(
                f"{doc.id!r}: {MERGED_FROM}[{index}].id must be a non-empty string, got {describe(part['id'])}"
            )
        parts.append(part)
    return parts


def locate(parent: ParentDocument | None, part: _Part) -> tuple[SourceSection, tuple[int, int]]:
    """The section a chunk lies in and the chunk's span in the parent's text; raises when not found."""
    chunk_id, parent_id = part.id, part.parent_id

    def not_found(reason: str) -> SectionNotFoundError:
        return SectionNotFoundError(f"chunk {chunk_id!r}: {reason}", parent_id=parent_id, chunk_id=chunk_id)

    if parent is None:
        raise not_found(f"parent document {parent_id!r} is not in the section index")
    chunk_hash = part.content_hash
    if chunk_hash is not None and parent.content_hash is not None and chunk_hash != parent.content_hash:
        raise not_found(
            f"the section index holds another version of {parent_id!r} (content_hash {parent.content_hash[:12]}…, "
            f"the chunk's {chunk_hash[:12]}…); index the file again"
        )
    content, path, index = part.content, part.headings, part.section_index
    if index is not None:
        section = next((s for s in parent.sections if s.parsed_index == index), None)
        if section is None or (path is not None and section.heading_path != path):
            raise not_found(f"{parent_id!r} has no section {index} under {path!r}; the document changed")
        if part.span is not None:
            start, end = part.span
            if start == end == 0 and not section.text and content and content in section.heading:
                # a heading with nothing under it is its own chunk (the chunker's heading chunk): its text is
                # the heading's, which the normalised text holds on the line before the (empty) body
                heading_start = section.start - len("\n\n") - len(section.heading) + section.heading.index(content)
                return section, (heading_start, heading_start + len(content))
            if end > len(section.text):
                raise not_found(
                    f"its offsets [{start}:{end}] lie past the end of section {index} ({len(section.text)} "
                    "characters); the document changed"
                )
            if content is None or section.text[start:end] == content:
                return section, (section.start + start, section.start + end)
            raise not_found(f"its text is not at [{start}:{end}] of section {index}; the document changed")
        assert content  # _check_part: a part without offsets has text
        if content in section.text:
            offset = section.text.index(content)
            return section, (section.start + offset, section.start + offset + len(content))
        raise not_found(f"its text is not in section {index} of {parent_id!r}; the document changed")
    # no recorded section: the one section under the chunk's headings whose body holds its text
    assert content  # _check_part: a part without offsets has text
    candidates = [
        s for s in parent.sections
        if s.parsed_index is not None and (path is None or s.heading_path == path) and content in s.text
    ]  # fmt: skip
    if len(candidates) != 1:
        reason = "no section" if not candidates else f"{len(candidates)} sections"
        under = "under any headings" if path is None else f"under {path!r}"
        raise not_found(f"{reason} of {parent_id!r} {under} contain its text")
    section = candidates[0]
    offset = section.text.index(content)
    return section, (section.start + offset, section.start + offset + len(content))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
