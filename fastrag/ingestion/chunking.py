"""Structure-aware chunking: whole paragraphs packed within a section, never across headings.

Sizes are in characters (Python ``str`` code points), not tokens. The default of 1,000 characters is
roughly 200-250 English tokens, well inside the 256-512 token windows of common embedding models.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from fastrag.errors import InvalidParameterError
from fastrag.ingestion.parsers import ParsedDocument, Section

__all__ = ["Chunk", "Chunker"]

_ALGORITHM_VERSION = 1  # bump whenever the same settings would cut the same text differently
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
# The end of a sentence: terminal punctuation, optional closing quotes or brackets, then whitespace.
# Also the CJK full stops, which need no following space.
_SENTENCE_END = re.compile(r"[.!?…][\"'”’)\]]*(?=\s)|[。！？]")
_WHITESPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class Chunk:
    """A piece of one section's text.

    Attributes:
        text: the chunk, an exact slice ``section.text[start:end]`` (no heading prefix).
        heading_path: the section's headings, outermost first.
        section_index: which section of the document it was cut from (zero-based).
        start: offset of the first character in the section's text (characters).
        end: offset one past the last character in the section's text (characters).
    """

    text: str
    heading_path: tuple[str, ...]
    section_index: int
    start: int
    end: int


class Chunker:
    """Splits parsed documents into chunks of at most ``chunk_size`` characters.

    Within each section, whole paragraphs (separated by blank lines) are packed greedily into a chunk
    while it stays within ``chunk_size``; a chunk never spans two sections, so it never mixes text from
    under different headings. A paragraph longer than ``chunk_size`` is split on its own: each piece
    ends at the last sentence end that fits, else at the last whitespace, else mid-word at exactly
    ``chunk_size``; the next piece starts at the first word boundary within ``chunk_overlap`` characters
    before that cut (exactly ``chunk_overlap`` before it inside a run without whitespace, such as CJK
    text or a long token), so consecutive pieces share at most ``chunk_overlap`` characters. Overlap
    applies only inside a split paragraph. Sentence ends are ``.``, ``!``, ``?`` or ``…`` (optionally
    followed by closing quotes or brackets) before whitespace, and the CJK full stops ``。！？``.
    Chunks are stripped of surrounding whitespace; whitespace-only text yields no chunk.

    Args:
        chunk_size: the maximum chunk length in characters; must be positive.
        chunk_overlap: characters repeated between consecutive pieces of a split paragraph; must be
            at least 0 and less than ``chunk_size``.

    Raises:
        InvalidParameterError: the sizes are out of range.
    """

    def __init__(self, chunk_size: int = 1000, chunk_overlap: int = 100) -> None:
        for label, value in (("chunk_size", chunk_size), ("chunk_overlap", chunk_overlap)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidParameterError(f"{label} must be an integer, got {value!r}")
        if chunk_size <= 0:
            raise InvalidParameterError(f"chunk_size must be positive, got {chunk_size}")
        if not 0 <= chunk_overlap < chunk_size:
            raise InvalidParameterError(
                f"chunk_overlap must be in [0, chunk_size={chunk_size}), got {chunk_overlap}"
            )
        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap

    @property
    def fingerprint(self) -> str:
        """Identifies how this chunker cuts text: ``"chars-<chunk_size>-<chunk_overlap>-v1"``.

        Equal fingerprints promise identical chunks for identical input. The ingestion pipeline stores it
        on every chunk and re-chunks a file whose stored fingerprint differs. A subclass that cuts text
        differently must return a different value.
        """
        return f"chars-{self.chunk_size}-{self.chunk_overlap}-v{_ALGORITHM_VERSION}"

    def __repr__(self) -> str:
        return f"Chunker(chunk_size={self.chunk_size}, chunk_overlap={self.chunk_overlap})"

    def chunk(self, document: ParsedDocument) -> list[Chunk]:
        """The chunks of every section of ``document``, in reading order."""
        chunks: list[Chunk] = []
        for index, section in enumerate(document.sections):
            chunks.extend(self.chunk_section(section, section_index=index))
        return chunks

    def chunk_section(self, section: Section, *, section_index: int = 0) -> list[Chunk]:
        """The chunks of one section; offsets refer to ``section.text``."""
        text = section.text
        return [
            Chunk(text=text[start:end], heading_path=section.heading_path, section_index=section_index,
                  start=start, end=end)
            for start, end in self.split_text(text)
        ]

    def split_text(self, text: str) -> list[tuple[int, int]]:
        """``(start, end)`` character offsets of the chunks of ``text`` (one section's body)."""
        spans: list[tuple[int, int]] = []
        current: tuple[int, int] | None = None
        for start, end in _paragraphs(text):
            if current is not None and end - current[0] <= self.chunk_size:
                current = (current[0], end)
                continue
            if current is not None:
                spans.append(current)
                current = None
            if end - start <= self.chunk_size:
                current = (start, end)
            else:
                spans.extend(self._split_long(text, start, end))
        if current is not None:
            spans.append(current)
        return spans

    def _split_long(self, text: str, start: int, end: int) -> list[tuple[int, int]]:
        size, overlap = self.chunk_size, self.chunk_overlap
        sentence_ends = [m.end() for m in _SENTENCE_END.finditer(text, start, end)]
        gaps = list(_WHITESPACE.finditer(text, start, end))
        word_ends = [m.start() for m in gaps]
        word_starts = [m.end() for m in gaps]
        pieces: list[tuple[int, int]] = []
        pos = prev_cut = start
        while pos < end:
            limit = pos + size
            if limit >= end:
                pieces.append((pos, end))
                break
            # every piece must reach past the previous cut, or an overlap could repeat a piece
            low = max(pos, prev_cut)
            cut = _last_in(sentence_ends, low, limit) or _last_in(word_ends, low, limit) or limit
            prev_cut = cut
            piece_end = cut
            while piece_end > pos and text[piece_end - 1].isspace():
                piece_end -= 1
            pieces.append((pos, piece_end))
            next_pos = cut
            if overlap:
                # restart at the first word start within `overlap` characters before the cut; inside a
                # run without whitespace (a long token, CJK text) restart exactly `overlap` back
                floor = max(cut - overlap, pos + 1)
                word_start = _first_in(word_starts, floor, cut)
                if word_start is not None:
                    next_pos = word_start
                elif floor < cut and not any(ch.isspace() for ch in text[floor:cut]):
                    next_pos = floor
            fresh = cut  # the first character not yet in any piece
            while fresh < end and text[fresh].isspace():
                fresh += 1
            if fresh - next_pos >= size:  # the overlap would leave no room for new text
                next_pos = fresh
            while next_pos < end and text[next_pos].isspace():
                next_pos += 1
            pos = next_pos
        return pieces


def _paragraphs(text: str) -> list[tuple[int, int]]:
    """Offsets of the non-blank paragraphs of ``text``, stripped of surrounding whitespace."""
    spans: list[tuple[int, int]] = []
    start = 0
    for match in [*_PARAGRAPH_BREAK.finditer(text), None]:
        end = len(text) if match is None else match.start()
        left, right = start, end
        while left < right and text[left].isspace():
            left += 1
        while right > left and text[right - 1].isspace():
            right -= 1
        if right > left:
            spans.append((left, right))
        if match is not None:
            start = match.end()
    return spans


def _last_in(positions: list[int], low: int, high: int) -> int | None:
    """The largest of the sorted ``positions`` in ``(low, high]``, or ``None``."""
    i = bisect.bisect_right(positions, high)
    return positions[i - 1] if i and positions[i - 1] > low else None


def _first_in(positions: list[int], low: int, high: int) -> int | None:
    """The smallest of the sorted ``positions`` in ``[low, high)``, or ``None``."""
    i = bisect.bisect_left(positions, low)
    return positions[i] if i < len(positions) and positions[i] < high else None
