"""Turn source files into structured text: a title and sections, each under its heading path.

Supported formats, chosen by file name:

==========================  =====================================================================
file                        parsed as
==========================  =====================================================================
``*.txt``                   one section, no headings; title = file stem
``*.md``, ``*.markdown``    CommonMark (`markdown-it-py`_): ATX and setext headings open sections;
                            a ``#`` inside a code block is not a heading; YAML front matter is
                            dropped; block text is kept as written; title = first heading
``*.html``, ``*.htm``       stdlib :mod:`html.parser`: ``<h1>``..``<h6>`` open sections; block
                            elements separate paragraphs; ``<script>``, ``<style>``,
                            ``<noscript>`` and ``<template>`` are dropped;
                            title = ``<title>``, else first heading
``corpus.jsonl``            a BEIR corpus: one document per line, ``{"_id", "title", "text"}``
``*.pdf``                   `pypdf`_ (extra ``pdf``): one section per page, with its ``page``
                            number; headings from the outline (see :mod:`fastrag.ingestion.pdf`)
``*.docx``                  `python-docx`_ (extra ``docx``): ``Heading N`` paragraphs open
                            sections, tables become ``a | b`` rows (see :mod:`fastrag.ingestion.word`)
==========================  =====================================================================

Every parser takes the file's bytes and returns :class:`ParsedDocument` objects; text files are decoded as
UTF-8 (a byte-order mark is allowed). Any other file name is unsupported (:func:`file_kind` returns
``None``); the ingestion pipeline skips such files and reports them.

.. _markdown-it-py: https://github.com/executablebooks/markdown-it-py
.. _pypdf: https://pypdf.readthedocs.io/
.. _python-docx: https://python-docx.readthedocs.io/
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from enum import Enum
from html.parser import HTMLParser
from pathlib import PurePath
from types import MappingProxyType

from markdown_it import MarkdownIt
from markdown_it.token import Token

from fastrag.errors import IngestionError
from fastrag.ingestion.parsed import ParsedDocument, Section, kept_sections

__all__ = [
    "BEIR_CORPUS_NAME",
    "BINARY_KINDS",
    "FILE_SUFFIXES",
    "FileKind",
    "ParsedDocument",
    "Section",
    "decode_utf8",
    "file_kind",
    "iter_text",
    "parse",
    "parse_beir_corpus",
    "parse_html",
    "parse_markdown",
    "parse_text",
]

BEIR_CORPUS_NAME = "corpus.jsonl"
"""The file name that marks a BEIR corpus."""


class FileKind(Enum):
    """The formats :func:`parse` understands."""

    TEXT = "text"
    MARKDOWN = "markdown"
    HTML = "html"
    BEIR_CORPUS = "beir-corpus"
    PDF = "pdf"
    DOCX = "docx"


BINARY_KINDS = frozenset({FileKind.PDF, FileKind.DOCX})
"""Formats read by a third-party parser from a binary container: the ingestion pipeline parses them in a
worker process under a time and size limit."""


FILE_SUFFIXES: Mapping[str, FileKind] = MappingProxyType({
    ".txt": FileKind.TEXT,
    ".md": FileKind.MARKDOWN,
    ".markdown": FileKind.MARKDOWN,
    ".html": FileKind.HTML,
    ".htm": FileKind.HTML,
    ".pdf": FileKind.PDF,
    ".docx": FileKind.DOCX,
})
"""The file suffixes :func:`file_kind` reads (lower case, with the dot; a file's suffix is lower-cased
before the look-up) and the format of each, read-only. A BEIR corpus is told by its name instead
(:data:`BEIR_CORPUS_NAME`)."""


def file_kind(path: str | PurePath) -> FileKind | None:
    """The format of ``path`` judged by its name, or ``None`` when it is not supported."""
    name = PurePath(path).name
    if name == BEIR_CORPUS_NAME:
        return FileKind.BEIR_CORPUS
    return FILE_SUFFIXES.get(PurePath(name).suffix.lower())


def decode_utf8(data: bytes, *, source: str) -> str:
    """Decode ``data`` as UTF-8 (an optional byte-order mark is dropped), with ``\\n`` line ends.

    Raises:
        IngestionError: the bytes are not UTF-8; the message names ``source`` and the offending offset.
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise IngestionError(
            f"{source}: not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "re-encode the file as UTF-8"
        ) from exc
    return text.replace("\r\n", "\n").replace("\r", "\n")


def iter_text(blocks: Iterable[bytes], *, source: str) -> Iterator[str]:
    """Decode UTF-8 arriving in blocks, as :func:`decode_utf8` decodes it whole: the text in pieces (an
    optional byte-order mark dropped, ``\\r\\n`` and ``\\r`` made ``\\n``), holding one block at a time.

    Raises:
        IngestionError: the bytes are not UTF-8; the message names ``source``, the offending byte and its
            offset in the file.
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0  # bytes of the file before the block being decoded
    head = b""  # the first bytes, until it is known whether they are a byte-order mark
    carry = ""  # a "\r" at the end of a piece, which may be the first half of "\r\n"
    started = False

    def decode(block: bytes, final: bool) -> str:
        nonlocal offset, carry
        buffered = decoder.getstate()[0]
        try:
            text = decoder.decode(block, final)
        except UnicodeDecodeError as exc:
            data = buffered + block
            raise IngestionError(
                f"{source}: not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset "
                f"{offset - len(buffered) + exc.start}); re-encode the file as UTF-8"
            ) from exc
        offset += len(block)
        text, carry = carry + text, ""
        if text.endswith("\r") and not final:
            text, carry = text[:-1], "\r"
        return text.replace("\r\n", "\n").replace("\r", "\n")

    for block in blocks:
        if not started:
            head += block
            if len(head) < len(codecs.BOM_UTF8):
                continue
            started, block = True, head
            if block.startswith(codecs.BOM_UTF8):
                block, offset = block[len(codecs.BOM_UTF8) :], len(codecs.BOM_UTF8)
        if text := decode(block, False):
            yield text
    if text := decode(b"" if started else head, True):
        yield text


def parse(data: bytes, *, source_uri: str, kind: FileKind | None = None) -> list[ParsedDocument]:
    """Parse a file's bytes into documents (one, or one per line of a BEIR corpus).

    Args:
        data: the raw file contents.
        source_uri: the file's path relative to the indexed root (``/`` separators); names the file in
            errors and becomes the documents' ``source_uri``.
        kind: the format; by default judged from ``source_uri`` by :func:`file_kind`.

    Returns:
        The parsed documents, in file order.

    PDF and DOCX files are parsed here in the calling thread, without a time limit; the ingestion
    pipeline runs them in a worker process under one.

    Raises:
        IngestionError: the format is unsupported, the bytes are not UTF-8, a BEIR line is malformed, or a
            PDF or DOCX file cannot be read (encrypted, no text layer, malformed; its extra not installed).
    """
    kind = kind or file_kind(source_uri)
    if kind is None:
        raise IngestionError(f"{source_uri}: unsupported file type")
    if kind is FileKind.PDF:
        from fastrag.ingestion.pdf import parse_pdf

        return [parse_pdf(data, source_uri=source_uri)]
    if kind is FileKind.DOCX:
        from fastrag.ingestion.word import parse_docx

        return [parse_docx(data, source_uri=source_uri)]
    text = decode_utf8(data, source=source_uri)
    stem = PurePath(source_uri).stem
    if kind is FileKind.TEXT:
        return [parse_text(text, source_uri=source_uri, title=stem)]
    if kind is FileKind.MARKDOWN:
        return [parse_markdown(text, source_uri=source_uri, default_title=stem)]
    if kind is FileKind.HTML:
        return [parse_html(text, source_uri=source_uri, default_title=stem)]
    return parse_beir_corpus(text, source_uri=source_uri)


# ------------------------------------------------------------------------------------------- text


def parse_text(text: str, *, source_uri: str, title: str) -> ParsedDocument:
    """A plain-text document: one section without headings."""
    return ParsedDocument(source_uri=source_uri, title=title, sections=_non_empty([((), text.strip())]))


def _non_empty(sections: Sequence[tuple[tuple[str, ...], str]]) -> tuple[Section, ...]:
    """Sections with text, and headings with nothing under them (:func:`~fastrag.ingestion.parsed.kept_sections`)."""
    return kept_sections(sections)


# --------------------------------------------------------------------------------------- markdown

_FRONT_MATTER = re.compile(r"\A---[ \t]*\n.*?\n(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.DOTALL)
_MARKDOWN = MarkdownIt("commonmark").enable("table")


def parse_markdown(text: str, *, source_uri: str, default_title: str) -> ParsedDocument:
    """A Markdown document: each heading opens a section whose path is the enclosing headings.

    Block text (paragraphs, lists, code, tables) is kept as written, blocks separated by a blank line;
    heading text is reduced to plain text (``## The *fast* path`` -> ``"The fast path"``). YAML front
    matter at the top of the file is dropped.
    """
    text = _FRONT_MATTER.sub("", text, count=1)
    lines = text.split("\n")
    tokens = _MARKDOWN.parse(text)
    stack: list[tuple[int, str]] = []  # (level, heading text)
    sections: list[tuple[tuple[str, ...], str]] = []
    blocks: list[str] = []
    title: str | None = None

    def close_section() -> None:
        sections.append((tuple(h for _, h in stack), "\n\n".join(blocks)))
        blocks.clear()

    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.level != 0:
            i += 1
            continue
        if token.type == "heading_open":
            close_section()
            level = int(token.tag[1:])
            heading = _inline_text(tokens[i + 1]) if i + 1 < len(tokens) else ""
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, heading))
            if title is None and heading:
                title = heading
            i += 3  # heading_open, inline, heading_close
            continue
        if token.map is not None and token.type != "hr":
            start, end = token.map
            block = "\n".join(lines[start:end]).strip("\n")
            if block.strip():
                blocks.append(block)
        i += 1
    close_section()
    return ParsedDocument(source_uri=source_uri, title=title or default_title, sections=_non_empty(sections))


def _inline_text(token: Token) -> str:
    parts: list[str] = []
    for child in token.children or []:
        if child.type in ("text", "code_inline", "html_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        elif child.type == "image":
            parts.append(_inline_text(child))
    return " ".join("".join(parts).split())


# ------------------------------------------------------------------------------------------- HTML

_DROPPED = frozenset({"script", "style", "noscript", "template"})
_BLOCKS = frozenset(
    {
        "address", "article", "aside", "blockquote", "br", "dd", "details", "div", "dl", "dt",
        "fieldset", "figcaption", "figure", "footer", "form", "header", "hr", "li", "main", "nav",
        "ol", "p", "pre", "section", "summary", "table", "tbody", "td", "tfoot", "th", "thead", "tr",
        "ul", "body",
    }
)  # fmt: skip
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"})


class _HTMLSections(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sections: list[tuple[tuple[str, ...], str]] = []
        self.html_title: str | None = None
        self.first_heading: str | None = None
        self._stack: list[tuple[int, str]] = []
        self._paragraphs: list[str] = []
        self._buffer: list[str] = []
        self._dropped: list[str] = []  # open dropped elements, innermost last
        self._in_title = False
        self._title_parts: list[str] = []
        self._heading: tuple[int, list[str]] | None = None
        self._pre_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
            return
        if tag in _DROPPED:
            if tag not in _VOID:
                self._dropped.append(tag)
            return
        if self._dropped:
            return
        if tag in _HEADINGS:
            self._flush_paragraph()
            self._heading = (_HEADINGS[tag], [])
        elif tag in _BLOCKS:
            self._flush_paragraph()
            if tag == "pre":
                self._pre_depth += 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if not self._dropped and tag in _BLOCKS:
            self._flush_paragraph()

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
            if self.html_title is None:
                self.html_title = " ".join("".join(self._title_parts).split()) or None
            return
        if tag in _DROPPED:
            if tag in self._dropped:
                while self._dropped and self._dropped.pop() != tag:
                    pass
            return
        if self._dropped:
            return
        if tag in _HEADINGS and self._heading is not None:
            level, parts = self._heading
            self._heading = None
            heading = " ".join("".join(parts).split())
            self._close_section()
            while self._stack and self._stack[-1][0] >= level:
                self._stack.pop()
            self._stack.append((level, heading))
            if self.first_heading is None and heading:
                self.first_heading = heading
        elif tag in _BLOCKS:
            self._flush_paragraph()
            if tag == "pre" and self._pre_depth:
                self._pre_depth -= 1

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self._title_parts.append(data)
        elif self._dropped:
            return
        elif self._heading is not None:
            self._heading[1].append(data)
        else:
            self._buffer.append(data)

    def _flush_paragraph(self) -> None:
        raw = "".join(self._buffer)
        self._buffer.clear()
        if self._pre_depth:
            text = raw.strip("\n")
            # a blank line inside <pre> would read as a paragraph break; keep the block together
            text = re.sub(r"\n[ \t]*\n", "\n", text)
        else:
            text = " ".join(raw.split())
        if text.strip():
            self._paragraphs.append(text)

    def _close_section(self) -> None:
        self._flush_paragraph()
        self.sections.append((tuple(h for _, h in self._stack), "\n\n".join(self._paragraphs)))
        self._paragraphs.clear()

    def close(self) -> None:
        super().close()
        if self._heading is not None:  # an unclosed heading: keep its text as body
            self._buffer.extend(self._heading[1])
            self._heading = None
        self._close_section()


def parse_html(text: str, *, source_uri: str, default_title: str) -> ParsedDocument:
    """An HTML document: ``<h1>``..``<h6>`` open sections; scripts and styles are dropped.

    Whitespace inside a paragraph is collapsed (kept inside ``<pre>``); block elements (``<p>``,
    ``<div>``, ``<li>``, ``<br>``, table cells, ...) end a paragraph; character references are decoded.
    """
    parser = _HTMLSections()
    parser.feed(text)
    parser.close()
    title = parser.html_title or parser.first_heading or default_title
    return ParsedDocument(source_uri=source_uri, title=title, sections=_non_empty(parser.sections))


# ------------------------------------------------------------------------------------ BEIR corpus


def parse_beir_corpus(text: str, *, source_uri: str) -> list[ParsedDocument]:
    """A BEIR ``corpus.jsonl``: one document per non-blank line.

    Each line is a JSON object with ``_id`` (string or number), ``text`` and optionally ``title``. The
    document's ``id`` is the ``_id``; its ``source_uri`` is ``<source_uri>#<_id>``; its single section
    holds ``text``; its title is ``title`` (possibly empty).

    Raises:
        IngestionError: a line is not a JSON object, lacks ``_id`` or ``text``, or repeats an ``_id``;
            the message names the file and line number.
    """
    documents: list[ParsedDocument] = []
    seen: set[str] = set()
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{source_uri}, line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise IngestionError(f"{where}: not valid JSON ({exc.msg})") from exc
        if not isinstance(record, dict):
            raise IngestionError(f"{where}: expected a JSON object")
        doc_id, body, title = record.get("_id"), record.get("text"), record.get("title", "")
        if isinstance(doc_id, bool) or not isinstance(doc_id, str | int) or str(doc_id) == "":
            raise IngestionError(f'{where}: "_id" must be a non-empty string or integer')
        if not isinstance(body, str):
            raise IngestionError(f'{where}: "text" must be a string')
        if not isinstance(title, str):
            title = "" if title is None else str(title)
        doc_id = str(doc_id)
        if doc_id in seen:
            raise IngestionError(f'{where}: duplicate "_id" {doc_id!r}')
        seen.add(doc_id)
        documents.append(
            ParsedDocument(
                source_uri=f"{source_uri}#{doc_id}",
                title=title.strip(),
                sections=_non_empty([((), body.strip())]),
                id=doc_id,
            )
        )
    return documents
