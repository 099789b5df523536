"""Word (``.docx``) text extraction with `python-docx`_: headings open sections, as Markdown headings do.

Install with ``pip install "fastrag-retrieval[docx]"``.

What a document becomes:

- body paragraphs and tables in reading order; each paragraph is one paragraph of text, each table one
  block with a row per line and cells separated by ``" | "`` (merged cells once);
- a paragraph styled ``Heading 1`` .. ``Heading 9`` (or a style based on one, or any paragraph with an
  outline level) opens a section whose heading path is the enclosing headings, exactly like ``#`` .. ``######``
  in Markdown;
- the title is the document property *Title*, else the first paragraph styled ``Title``, else the first
  heading, else the file stem. A ``Title`` paragraph is not a section heading.

Headers, footers, footnotes, comments and text boxes are not read.

Refused with the reason; the pipeline names the file and goes on. Skipped
(:class:`~fastrag.errors.NoTextError`): a password-protected document (Word stores it as an encrypted OLE2
container, not a zip) and a legacy binary ``.doc`` renamed ``.docx``. Failed
(:class:`~fastrag.errors.IngestionError`): a malformed or truncated file (a broken zip, missing parts, XML
that does not parse), and one whose unpacked parts exceed ``max_unpacked_bytes`` (a zip bomb). Running out of
memory is not a malformed file: it raises ``MemoryError`` (libxml2's own report of it included), which the
ingestion pipeline's worker process, under its memory limit, reports as too large
(:class:`~fastrag.errors.ParserMemoryError`).

.. _python-docx: https://python-docx.readthedocs.io/
"""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import PurePath
from typing import Any

from fastrag.errors import IngestionError, NoTextError
from fastrag.ingestion.parsed import ParsedDocument, kept_sections

__all__ = ["INSTALL_HINT", "parse_docx"]

INSTALL_HINT = 'pip install "fastrag-retrieval[docx]"'

_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ENCRYPTION_INFO = "EncryptionInfo".encode("utf-16-le")  # the stream an encrypted OOXML container holds
_HEADING_STYLE = re.compile(r"heading ([1-9])", re.IGNORECASE)
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"


def parse_docx(data: bytes, *, source_uri: str, max_unpacked_bytes: int | None = None) -> ParsedDocument:
    """Parse a ``.docx`` file's bytes into sections under its headings.

    Args:
        data: the raw file.
        source_uri: names the file in errors; becomes the document's ``source_uri``.
        max_unpacked_bytes: refuse a file whose zip members add up to more than this many bytes unpacked;
            ``None`` for no limit.

    Returns:
        The document, sections in reading order.

    Raises:
        NoTextError: the file is password-protected, or a legacy ``.doc``.
        IngestionError: python-docx is not installed (the message gives the ``pip install`` line); the
            file is malformed, truncated, or unpacks too large.
        MemoryError: the parser ran out of memory (the file is not malformed for that).
    """
    try:
        import docx
    except ImportError as exc:
        raise IngestionError(f"{source_uri}: reading Word files needs python-docx: {INSTALL_HINT}") from exc
    if data.startswith(_OLE_MAGIC):
        if _ENCRYPTION_INFO in data:
            raise NoTextError(source_uri, "password-protected Word document")
        raise NoTextError(source_uri, "a legacy binary Word file (.doc), not .docx; save it as .docx to index it")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            unpacked = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise IngestionError(f"{source_uri}: truncated or malformed .docx (not a readable zip: {exc})") from exc
    if max_unpacked_bytes is not None and unpacked > max_unpacked_bytes:
        raise IngestionError(
            f"{source_uri}: unpacks to {unpacked:,} bytes, over the limit of {max_unpacked_bytes:,}"
        )
    try:
        document = docx.Document(io.BytesIO(data))
        return _sections(document, source_uri)
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001
        if _out_of_memory(exc):
            raise MemoryError(f"libxml2 could not allocate memory; lxml reported {type(exc).__name__} {str(exc)!r}") from exc
        # python-docx reports a damaged package as PackageNotFoundError, KeyError (a missing part), lxml's
        # XMLSyntaxError, zipfile errors...: any of them means this file cannot be read
        raise IngestionError(f"{source_uri}: malformed .docx ({type(exc).__name__}: {exc})") from exc


def _out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is lxml reporting that libxml2 could not allocate memory: lxml raises that as an
    ``XMLSyntaxError`` (or ``XPathEvalError``) reading ``unknown error``, its error log typed
    ``ERR_NO_MEMORY``; it says nothing about the file's XML."""
    log = getattr(exc, "error_log", None)
    try:
        return any(entry.type_name == "ERR_NO_MEMORY" or entry.domain_name == "MEMORY" for entry in log or ())
    except Exception:  # noqa: BLE001 - a log of another shape is no memory report
        return False


def _sections(document: Any, source_uri: str) -> ParsedDocument:
    from docx.table import Table

    stack: list[tuple[int, str]] = []
    sections: list[tuple[tuple[str, ...], str]] = []
    blocks: list[str] = []
    title_paragraph: str | None = None
    first_heading: str | None = None
    # a paragraph's style is resolved once per style id: python-docx looks an unstyled paragraph's default
    # style up by scanning every style of the document, 2 ms a paragraph (20,000 paragraphs took 77 s)
    styles: dict[str | None, tuple[str, int | None]] = {}

    def close() -> None:
        sections.append((tuple(h for _, h in stack), "\n\n".join(blocks)))
        blocks.clear()

    for item in document.iter_inner_content():
        if isinstance(item, Table):
            table = _table_text(item)
            if table:
                blocks.append(table)
            continue
        text = " ".join(item.text.split())
        style, style_level = _style_of(item, styles)
        if style == "title":
            if title_paragraph is None and text:
                title_paragraph = text
            continue
        level = style_level if style_level is not None else _outline_level(item._p)
        if level is not None and text:
            close()
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, text))
            first_heading = first_heading or text
        elif text:
            blocks.append(text)
    close()
    core_title = " ".join((document.core_properties.title or "").split())
    title = core_title or title_paragraph or first_heading or PurePath(source_uri).stem
    return ParsedDocument(source_uri=source_uri, title=title, sections=kept_sections(sections))


def _style_of(paragraph: Any, cache: dict[str | None, tuple[str, int | None]]) -> tuple[str, int | None]:
    """The paragraph's style name (lower case, ``""`` for none) and the heading level 1..9 its style gives
    (a ``Heading N`` style, one based on it, or a style with an outline level), else ``None``."""
    try:
        style_id = paragraph._p.style  # the w:pStyle value, the key python-docx resolves
    except Exception:  # noqa: BLE001 - a malformed w:pPr reads as no style
        style_id = None
    known = cache.get(style_id)
    if known is None:
        try:
            style = paragraph.style
        except Exception:  # noqa: BLE001 - a dangling style reference reads as no style
            style = None
        known = cache[style_id] = (_name_of(style), _style_level(style))
    return known


def _name_of(style: Any) -> str:
    return (style.name or "").strip().lower() if style is not None else ""


def _style_level(style: Any) -> int | None:
    """1..9 for a ``Heading N`` style (or one based on it), or a style with an outline level."""
    seen = 0
    while style is not None and seen < 10:  # a style's base chain; bounded against cycles
        match = _HEADING_STYLE.fullmatch((style.name or "").strip())
        if match:
            return int(match.group(1))
        level = _outline_level(style.element)
        if level is not None:
            return level
        style = style.base_style
        seen += 1
    return None


def _outline_level(element: Any) -> int | None:
    node = element.find(f"{_W}pPr/{_W}outlineLvl")
    if node is None:
        return None
    try:
        value = int(node.get(f"{_W}val"))
    except (TypeError, ValueError):
        return None
    return value + 1 if 0 <= value <= 8 else None  # 9 means body text


def _table_text(table: Any) -> str:
    rows: list[str] = []
    for row in table.rows:
        cells: list[str] = []
        previous = None
        for cell in row.cells:
            if cell._tc is previous:  # noqa: SLF001 - a merged cell repeats across the span
                continue
            previous = cell._tc  # noqa: SLF001
            cells.append(" ".join(cell.text.split()))
        if any(cells):
            rows.append(" | ".join(cells))
    return "\n".join(rows)
