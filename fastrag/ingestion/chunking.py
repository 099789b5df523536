"""Structure-aware chunking: whole paragraphs packed within a section, never across headings.

Sizes are in characters (Python ``str`` code points), not tokens. The default of 1,000 characters is
roughly 200-250 English tokens, well inside the 256-512 token windows of common embedding models.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from fastrag.errors import InvalidParameterError
from fastrag.ingestion.parsers import ParsedDocument, Section

__all__ = ["Chunk", "Chunker"]

# bump whenever the same settings would cut the same text differently. Not bumped for heading chunks (a
# section without body text now yields its heading): a non-empty body is cut as before, and a file that
# gains a heading chunk gains a chunk, so re-indexing rewrites exactly those files and no other
_ALGORITHM_VERSION = 1
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
# The end of a sentence: terminal punctuation, optional closing quotes or brackets, then whitespace.
# Also the CJK full stops, which need no following space.
_SENTENCE_END = re.compile(r"[.!?…][\"'”’)\]]*(?=\s)|[。！？]")
_WHITESPACE = re.compile(r"\s+")
_TERMINALS = frozenset(".!?…")  # what _SENTENCE_END's first branch starts with
_CLOSERS = frozenset("\"'”’)]")  # what may follow a terminal in _SENTENCE_END
_CLOSER_RUN = re.compile(r"[\"'”’)\]]*")
_NON_SPACE = re.compile(r"\S")
_BREAK_REST = re.compile(r"[ \t]*\n")  # completes a paragraph break that began in the text before
_BLANKS = re.compile(r"[ \t]*")
_PENDING_BREAK = re.compile(r"\n[ \t]*\Z")  # text that may begin a paragraph break
_FEED = 1 << 16  # characters split_text feeds the cutter at a time


@dataclass(frozen=True, slots=True)
class Chunk:
    """A piece of one section's text.

    Attributes:
        text: the chunk, an exact slice ``section.text[start:end]`` (no heading prefix); for a section
            without body text (a heading with nothing under it) its own heading (``heading_path[-1]``),
            or a piece of a heading longer than ``chunk_size``, with ``start == end == 0``.
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
    Chunks are stripped of surrounding whitespace; whitespace-only text yields no chunk, except in a
    section with a heading: a heading with nothing under it is text too, so such a section yields its own
    heading (``heading_path[-1]``, cut like a paragraph when longer than ``chunk_size``) as its chunk, and a
    document holding only ``# Quarterly merger plan`` is indexed and found by it.

    Every cut is decided looking at most ``chunk_size + 1`` characters past the start of the piece being
    cut, so the text held while cutting is about one chunk, however long a paragraph is (cutting 4 MB of one
    paragraph allocates under 1 MB); :meth:`chunk_stream` cuts text as it is read.

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
        """The chunks of one section; offsets refer to ``section.text`` (``0, 0`` for a heading chunk)."""
        text = section.text
        spans = self.split_text(text)
        if not spans and section.heading_path:  # no body: the heading is the section's text
            heading = section.heading_path[-1]
            return [
                Chunk(text=heading[start:end], heading_path=section.heading_path, section_index=section_index,
                      start=0, end=0)
                for start, end in self.split_text(heading)
            ]
        return [
            Chunk(text=text[start:end], heading_path=section.heading_path, section_index=section_index,
                  start=start, end=end)
            for start, end in spans
        ]

    def chunk_stream(
        self, pieces: Iterable[str], *, heading_path: tuple[str, ...] = (), section_index: int = 0
    ) -> Iterator[Chunk]:
        """The chunks of one section whose text arrives in pieces (a file read block by block).

        Yields exactly the chunks :meth:`chunk_section` gives for
        ``Section(heading_path, "".join(pieces))``, as soon as each is decided, holding only the text a
        chunk still needs: about ``chunk_size`` characters plus the piece being read, however long the
        text or any of its paragraphs.
        """
        cutter = _Cutter(self.chunk_size, self.chunk_overlap)
        emitted = False
        for piece in pieces:
            cutter.feed(piece)
            for start, end, text in cutter.take():
                emitted = True
                yield Chunk(text=text, heading_path=heading_path, section_index=section_index, start=start, end=end)
        cutter.finish()
        for start, end, text in cutter.take():
            emitted = True
            yield Chunk(text=text, heading_path=heading_path, section_index=section_index, start=start, end=end)
        if not emitted and heading_path:
            yield from self.chunk_section(Section(heading_path=heading_path, text=""), section_index=section_index)

    def split_text(self, text: str) -> list[tuple[int, int]]:
        """``(start, end)`` character offsets of the chunks of ``text`` (one section's body)."""
        cutter = _Cutter(self.chunk_size, self.chunk_overlap, keep_text=False)
        for offset in range(0, len(text), _FEED):
            cutter.feed(text[offset : offset + _FEED])
        cutter.finish()
        return [(start, end) for start, end, _ in cutter.take()]


class _Cutter:
    """The chunking algorithm of :class:`Chunker` over text fed in pieces, holding a bounded window of it.

    Paragraphs are the runs of text between blank lines (``\\n[ \\t]*\\n``), stripped of surrounding
    whitespace. They are packed greedily into a chunk while it stays within ``size``; a paragraph longer
    than ``size`` is cut on its own into pieces (see :class:`Chunker`). Everything is decided left to right,
    looking at most ``size + 1`` characters ahead of the piece being cut, so text is dropped once no chunk
    can need it: what is held is the chunk being packed, or the paragraph piece being cut, plus what was
    fed last. Offsets are global (from the start of the section's text).
    """

    def __init__(self, size: int, overlap: int, *, keep_text: bool = True) -> None:
        self._size, self._overlap, self._keep_text = size, overlap, keep_text
        self._buf = ""  # the text from offset self._base on
        self._base = 0
        self._scan = 0  # paragraph breaks are searched from here
        self._pending = False  # the text before _scan ends with "\n[ \t]*": a break may end in the next piece
        self._first: int | None = None  # the first non-blank character of the open paragraph
        self._last = -1  # its last non-blank character seen so far
        self._current: tuple[int, int] | None = None  # the chunk being packed from whole paragraphs
        self._long: tuple[int, int, int] | None = None  # (paragraph start, pos, prev_cut) while cutting one
        self._lead = False  # a sentence end precedes _base, followed only by closing quotes or brackets
        self._out: list[tuple[int, int, str]] = []

    @property
    def _end(self) -> int:
        return self._base + len(self._buf)

    def take(self) -> list[tuple[int, int, str]]:
        """The chunks decided since the last call: ``(start, end, text)``."""
        out, self._out = self._out, []
        return out

    def feed(self, text: str) -> None:
        if not text:
            return
        self._buf += text
        self._paragraphs(final=False)
        self._trim()

    def finish(self) -> None:
        self._paragraphs(final=True)
        self._close_paragraph()
        if self._current is not None:
            self._emit(*self._current)
            self._current = None
        self._buf, self._base = "", self._end

    # ------------------------------------------------------------------------------- paragraphs

    def _paragraphs(self, *, final: bool) -> None:
        """Find the paragraph breaks in the new text; close each paragraph they end, and cut what can be cut
        of the one still open."""
        buf, base = self._buf, self._base
        if self._pending:  # "\n[ \t]*" ended the text before: a break if "[ \t]*\n" starts this piece
            rest = _BREAK_REST.match(buf, self._scan - base)
            if rest is not None:
                self._close_paragraph()
                self._scan = rest.end() + base
                self._pending = False
            elif _BLANKS.fullmatch(buf, self._scan - base):  # still only blanks: the break may yet come
                self._scan = self._end
                if not final:
                    self._progress()
                return
            else:
                self._pending = False
        while (match := _PARAGRAPH_BREAK.search(buf, self._scan - base)) is not None:
            self._see(self._scan, match.start() + base)
            self._close_paragraph()
            self._scan = match.end() + base
        self._see(self._scan, self._end)
        self._pending = _PENDING_BREAK.search(buf, self._scan - base) is not None
        self._scan = self._end
        if not final:
            self._progress()

    def _see(self, start: int, end: int) -> None:
        """Note the non-blank characters of ``[start, end)``, text of the open paragraph."""
        first = _NON_SPACE.search(self._buf, start - self._base, end - self._base)
        if first is None:
            return
        if self._first is None:
            self._first = first.start() + self._base
        last = end - 1
        while self._buf[last - self._base].isspace():
            last -= 1
        self._last = last

    def _close_paragraph(self) -> None:
        """The open paragraph ends at its last non-blank character: pack it, or cut it when too long."""
        if self._first is None:
            return
        start, end = self._first, self._last + 1
        self._first, self._last = None, -1
        if self._long is not None:
            self._cut(end)
            return
        current = self._current
        if current is not None and end - current[0] <= self._size:
            self._current = (current[0], end)
            return
        if current is not None:
            self._emit(*current)
            self._current = None
        if end - start <= self._size:
            self._current = (start, end)
        else:
            self._long, self._lead = (start, start, start), False
            self._cut(end)

    def _progress(self) -> None:
        """Decide what the text so far decides while the paragraph is still open (more text may follow)."""
        current, size = self._current, self._size
        if self._first is None:  # between paragraphs: the next one ends at self._end + 1 at the earliest
            if current is not None and self._end + 1 - current[0] > size:
                self._emit(*current)
                self._current = None
            return
        if self._long is None:
            if current is not None and self._last + 1 - current[0] > size:  # it cannot join the chunk
                self._emit(*current)
                self._current = None
            if self._last + 1 - self._first <= size:
                return
            self._long, self._lead = (self._first, self._first, self._first), False
        self._cut(None)

    def _trim(self) -> None:
        """Drop the text no chunk can need any more."""
        keep = self._end
        if self._current is not None:
            keep = min(keep, self._current[0])
        if self._long is not None:
            keep = min(keep, self._long[1])
        elif self._first is not None:
            keep = min(keep, self._first)
        if keep <= self._base:
            return
        if self._long is not None:
            self._lead = self._terminal_before(keep, self._long[0])
        self._buf = self._buf[keep - self._base :]
        self._base = keep

    def _emit(self, start: int, end: int) -> None:
        text = self._buf[start - self._base : end - self._base] if self._keep_text else ""
        self._out.append((start, end, text))

    # ----------------------------------------------------------------------- an over-long paragraph

    def _cut(self, end: int | None) -> None:
        """Cut the over-long paragraph into pieces, as far as the text so far allows; ``end`` is where the
        paragraph ends, or ``None`` while it is still open (then it goes on at least to ``self._last``)."""
        assert self._long is not None
        size, overlap = self._size, self._overlap
        start, pos, prev_cut = self._long
        stop = end if end is not None else self._last + 1  # a non-blank character lies before stop
        while True:
            limit = pos + size
            if end is not None and limit >= end:
                self._emit(pos, end)
                self._long = None
                return
            if end is None and self._last < limit:  # this piece may be the last: wait for more text
                self._long = (start, pos, prev_cut)
                return
            buf, base = self._buf, self._base
            # every piece must reach past the previous cut, or an overlap could repeat a piece
            low = max(pos, prev_cut)
            cut = self._sentence_end(low, limit, start) or self._word_end(low, limit) or limit
            prev_cut = cut
            piece_end = cut
            while piece_end > pos and buf[piece_end - 1 - base].isspace():
                piece_end -= 1
            self._emit(pos, piece_end)
            next_pos = cut
            if overlap:
                # restart at the first word start within `overlap` characters before the cut; inside a
                # run without whitespace (a long token, CJK text) restart exactly `overlap` back
                floor = max(cut - overlap, pos + 1)
                word_start = self._word_start(floor, cut)
                if word_start is not None:
                    next_pos = word_start
                elif floor < cut and _WHITESPACE.search(buf, floor - base, cut - base) is None:
                    next_pos = floor
            fresh = cut  # the first character not yet in any piece
            while fresh < stop and buf[fresh - base].isspace():
                fresh += 1
            if fresh - next_pos >= size:  # the overlap would leave no room for new text
                next_pos = fresh
            while next_pos < stop and buf[next_pos - base].isspace():
                next_pos += 1
            pos = next_pos

    def _sentence_end(self, low: int, limit: int, start: int) -> int | None:
        """The last sentence end in ``(low, limit]`` (a paragraph starting at ``start``), or ``None``."""
        buf, base = self._buf, self._base
        best = None
        for match in _SENTENCE_END.finditer(buf, low - base, limit + 1 - base):
            if match.end() + base <= limit:
                best = match.end() + base
        if best is None:
            # a sentence end whose terminal lies before `low`, followed by closing marks up to past `low`
            closers = _CLOSER_RUN.match(buf, low - base, limit + 1 - base)
            run_end = closers.end() + base if closers is not None else low
            if low < run_end <= limit and buf[run_end - base].isspace() and self._terminal_before(low, start):
                best = run_end
        return best

    def _terminal_before(self, position: int, start: int) -> bool:
        """Whether a sentence terminal lies before ``position``, followed only by closing quotes or brackets,
        within the paragraph starting at ``start``."""
        buf, base = self._buf, self._base
        j = position - 1
        low = max(base, start)
        while j >= low and buf[j - base] in _CLOSERS:
            j -= 1
        if j < start:
            return False
        if j < base:
            return self._lead
        return buf[j - base] in _TERMINALS

    def _word_end(self, low: int, limit: int) -> int | None:
        """The last start of a whitespace run in ``(low, limit]``, or ``None``."""
        buf, base = self._buf, self._base
        best = None
        for match in _WHITESPACE.finditer(buf, low - base, limit + 1 - base):
            if match.start() + base > low:
                best = match.start() + base
        return best

    def _word_start(self, low: int, high: int) -> int | None:
        """The first end of a whitespace run in ``[low, high)`` (a word start), or ``None``."""
        buf, base = self._buf, self._base
        match = _WHITESPACE.search(buf, low - 1 - base, high - base)
        if match is None or match.end() + base >= high:
            return None
        return match.end() + base
