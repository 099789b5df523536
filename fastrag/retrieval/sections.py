"""Trace retrieved chunks back to the sections of the documents they were cut from.

A chunk is what retrieval ranks; a *section* (a heading and the text under it, inside its enclosing
headings) is often what a reader or a language model needs. :class:`SectionIndex` keeps every parent
document in a normalised form, a tree of sections, and :meth:`SectionIndex.resolve` maps a hit back to the
section(s) it came from, with the enclosing sections and document-scoped provenance::

    async with SectionIndex("index.sections.db") as sections:
        pipeline = IngestionPipeline(embedder=embedder, vector_store=store, section_index=sections)
        await pipeline.run(["docs/"])
        for hit in await retriever.retrieve("how do I install on Debian?", k=3):
            for section in await sections.resolve(hit):
                print(section.source_uri, " > ".join(section.heading_path), section.start, section.end)

**The normalised document.** The parser's sections (:class:`~fastrag.ingestion.parsers.ParsedDocument`,
the very ones the chunker cut) become a tree: each heading is one :class:`SourceSection` whose ``text`` is
its own body (not its subsections'), whose children are the headings nested under it, and whose
``depth`` is the length of its heading path. A heading with no body of its own (``# Guide`` directly
followed by ``## Install``) is kept as a section with empty ``text``, so every heading on a path exists.
Text before the first heading (or a file without headings) is a section with an empty heading path at
depth 0; it encloses nothing. The document's :attr:`ParentDocument.text` renders the tree as Markdown:
each heading as ``"#" * depth + " " + heading``, then its body, blocks separated by a blank line; a
section's ``start``/``end`` are the offsets of its body in that text, so
``document.text[section.start:section.end] == section.text``.

**Which section a chunk came from.** Chunks written by :class:`~fastrag.ingestion.IngestionPipeline`
carry ``parent_id``, ``headings``, ``content_hash`` and, since this module exists, :data:`SECTION_INDEX`,
:data:`SECTION_START` and :data:`SECTION_END` (which parsed section, and the chunk's character offsets in
its body). A chunk with those keys is resolved exactly and checked: its text must be that slice of the
section, or, for a heading with nothing under it (an empty body, offsets ``0, 0``), the heading itself (the
chunker makes such a heading its section's one chunk). A chunk without them (written before those keys existed, or by other code) is matched by its
heading path and its text: the one section under those headings whose body contains the chunk's text.

**Merged chunks.** A hit whose ``metadata["merged_from"]`` (:data:`MERGED_FROM`) is a list of mappings,
one per original chunk (``{"id", "content", "parent_id", "headings", "section_index", ...}``, as
:func:`merge_chunks` builds them), resolves to the sections of all its parts, in document order, each
once.

**Malformed hits.** A hit whose provenance has the wrong shape (a ``parent_id`` that is not a string, a
merged part whose ``id`` is not a string or that has neither text nor offsets, offsets that are not ints)
raises :class:`~fastrag.errors.InvalidParameterError` naming the key, whatever ``missing`` says: it is a
bug in whatever produced the hit, not a gap in the index.
"""

from __future__ import annotations

import hashlib
import json
import os
import reprlib
import sqlite3
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import anyio.to_thread

from fastrag.errors import (
    BackendError,
    BackendUnavailableError,
    InvalidParameterError,
    SectionNotFoundError,
    TransientBackendError,
)
from fastrag.models import CHUNK_INDEX, CONTENT_HASH, HEADINGS, PARENT_ID, SOURCE_URI, TITLE, Document, plain_value

if TYPE_CHECKING:  # the parsers are imported when first needed, so ``import fastrag`` stays light
    from fastrag.ingestion.parsers import FileKind, ParsedDocument

__all__ = [
    "MERGED_FROM",
    "SECTION_END",
    "SECTION_INDEX",
    "SECTION_START",
    "ParentDocument",
    "SectionIndex",
    "SourceSection",
    "merge_chunks",
]

SECTION_INDEX = "section_index"
"""Chunk metadata key: the zero-based index of the section the chunk was cut from, in the ``sections`` of its
:class:`~fastrag.ingestion.parsers.ParsedDocument` (an int)."""
SECTION_START = "section_start"
"""Chunk metadata key: offset of the chunk's first character in its section's body (characters, an int)."""
SECTION_END = "section_end"
"""Chunk metadata key: offset one past the chunk's last character in its section's body (characters)."""
MERGED_FROM = "merged_from"
"""Metadata key of a merged chunk: a list of mappings, one per original chunk, in the order merged; each
holds the original's ``id``, ``content`` and provenance keys (see :func:`merge_chunks`)."""

_PROVENANCE_KEYS = (SOURCE_URI, TITLE, PARENT_ID, CHUNK_INDEX, CONTENT_HASH, HEADINGS,
                    SECTION_INDEX, SECTION_START, SECTION_END)  # fmt: skip
_MISSING_MODES = ("raise", "skip")
_SCHEMA_VERSION = "1"
_BUSY_CODES = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED
_SCHEMA = """
CREATE TABLE IF NOT EXISTS fastrag_sections_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS fastrag_sections (
    parent_id TEXT PRIMARY KEY,
    source_uri TEXT NOT NULL,
    title TEXT NOT NULL,
    content_hash TEXT,
    sections TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS fastrag_sections_source_uri ON fastrag_sections (source_uri);
"""
T = TypeVar("T")


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
            :data:`SECTION_INDEX`), or ``None`` for a heading without a body of its own.
        parent_section_id: the id of the enclosing section, or ``None`` at depth 0 and 1.
        child_ids: the ids of the sections directly nested under this one, in document order.
        chunk_ids: in a result of :meth:`SectionIndex.resolve`, the ids of the chunks (of the hit, or of
            the parts of a merged hit) that resolved to this section, in document order; empty otherwise and
            in ancestors.
        chunk_spans: the ``(start, end)`` offsets of those chunks in :attr:`ParentDocument.text`
            (characters), one per entry of ``chunk_ids``.
        ancestors: in a result of :meth:`SectionIndex.resolve` with ``ancestors=True``: the enclosing
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
    """A parent document as a :class:`SectionIndex` holds it: normalised text and its sections.

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


def merge_chunks(
    chunks: Sequence[Document], *, id: str | None = None, separator: str = "\n\n"  # noqa: A002
) -> Document:
    """One document made of several chunks, which :meth:`SectionIndex.resolve` maps to all their sections.

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
        raise InvalidParameterError(f"merge_chunks: id must be a non-empty string or None, got {_describe(id)}")
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


class SectionIndex:
    """Keeps normalised parent documents and resolves retrieved chunks to the sections they came from.

    Documents live in one SQLite table (``fastrag_sections``, one row per parent document), in memory or
    in a file that survives reopening; the file may be the one a
    :class:`~fastrag.vector_store.sqlite.SQLiteVectorStore` uses, or its own. Every call runs in a worker
    thread, serialised on one connection; each write is one transaction.

    Fill it during ingestion by handing it to the pipeline
    (``IngestionPipeline(..., section_index=index)``): every file the pipeline reads is added (or
    replaced) with the same parse the chunks were cut from, and pruned files are deleted. Or add
    documents yourself with :meth:`add`, :meth:`add_text` or :meth:`add_file`.

    Args:
        path: a database file (created with its parent folders if missing) or ``":memory:"``; a ``str`` or
            a path-like object.

    Raises:
        InvalidParameterError: ``path`` is not a string or path-like object, is empty, or holds a NUL
            character.
        BackendUnavailableError: the file cannot be opened, or holds a section table of another schema
            version.

    Example::

        async with SectionIndex(":memory:") as index:
            await index.add_text("# Guide\\n\\n## Install\\n\\nRun pip.\\n", source_uri="guide.md")
            sections = await index.resolve(hit)  # hit: a chunk of guide.md from a store
            sections[0].heading_path, [a.heading for a in sections[0].ancestors]
            # (("Guide", "Install"), ["Guide"])
    """

    def __init__(self, path: str | Path = ":memory:") -> None:
        raw = os.fspath(path) if isinstance(path, os.PathLike) else path
        if not isinstance(raw, str) or not raw or "\x00" in raw:
            raise InvalidParameterError(
                f'path must be a database file name or ":memory:" (a non-empty str or path), got {_describe(path)}'
            )
        self.path = raw
        self._lock = threading.Lock()
        self._closed = False
        self._conn = self._open(self.path)

    def __repr__(self) -> str:
        return f"SectionIndex({self.path!r})"

    @staticmethod
    def _open(path: str) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = None
        try:
            if path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            conn.execute("PRAGMA busy_timeout = 5000")
            if path != ":memory:":
                conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA)
            conn.execute(
                "INSERT OR IGNORE INTO fastrag_sections_meta VALUES ('schema_version', ?)", (_SCHEMA_VERSION,)
            )
            (version,) = conn.execute(
                "SELECT value FROM fastrag_sections_meta WHERE key = 'schema_version'"
            ).fetchone()
            if version != _SCHEMA_VERSION:
                raise BackendUnavailableError(
                    f"unsupported section index schema version {version!r} (this fastrag reads {_SCHEMA_VERSION!r})",
                    store=path,
                )
        except (sqlite3.Error, OSError) as exc:
            if conn is not None:
                conn.close()
            raise BackendUnavailableError(f"cannot open the section index: {exc}", store=path) from exc
        except BackendUnavailableError:
            if conn is not None:
                conn.close()
            raise
        return conn

    async def __aenter__(self) -> SectionIndex:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the database. Idempotent."""
        await anyio.to_thread.run_sync(self._close_sync)

    def _close_sync(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        def call() -> T:
            with self._lock:
                if self._closed:
                    raise BackendUnavailableError("section index is closed", store=self.path)
                try:
                    return fn(*args)
                except sqlite3.OperationalError as exc:
                    if getattr(exc, "sqlite_errorcode", 0) & 0xFF in _BUSY_CODES:
                        raise TransientBackendError(f"SQLite database is busy: {exc}", store=self.path) from exc
                    raise BackendError(f"SQLite error: {exc}", store=self.path) from exc
                except sqlite3.Error as exc:
                    raise BackendError(f"SQLite error: {exc}", store=self.path) from exc

        return await anyio.to_thread.run_sync(call)

    # ------------------------------------------------------------------------------------- writes

    async def add(self, document: ParsedDocument, *, content_hash: str | None = None) -> ParentDocument:
        """Add a parsed document, replacing any document with the same ``id`` and all its sections.

        Args:
            document: what :func:`~fastrag.ingestion.parsers.parse` returned for the file; chunks resolve
                against it only if they were cut from this same parse.
            content_hash: SHA-256 (hex) of the source file's bytes, as the pipeline records it on chunks;
                when both are known, :meth:`resolve` refuses chunks of another version of the file.

        Returns:
            The document as stored, normalised.

        Raises:
            InvalidParameterError: ``document`` is not a ``ParsedDocument`` (or one whose ``id``,
                ``source_uri``, ``title`` or sections have the wrong types, or hold text that is not valid
                Unicode), or ``content_hash`` is not a non-empty string.
            BackendError: SQLite failed; nothing was written.
        """
        from fastrag.ingestion.parsers import ParsedDocument

        if not isinstance(document, ParsedDocument):
            raise InvalidParameterError(
                f"add takes a ParsedDocument, got {type(document).__name__} (add_text parses text for you)"
            )
        return (await self.add_all([document], content_hash=content_hash))[0]

    async def add_all(
        self, documents: Iterable[ParsedDocument], *, content_hash: str | None = None
    ) -> list[ParentDocument]:
        """Add several parsed documents in one transaction (as :meth:`add`; for a BEIR corpus, one file).

        Args:
            documents: the parsed documents (a list, tuple or other iterable, not a single document).
            content_hash: as for :meth:`add`, recorded on every document.

        Returns:
            The documents as stored, normalised, in the order given.

        Raises:
            InvalidParameterError: ``documents`` is not an iterable of documents (a single
                ``ParsedDocument``, a string, ``None``), an item is not a ``ParsedDocument`` or has fields of
                the wrong types (``id``, ``source_uri``: non-empty strings; ``title``: a string; each
                section's ``heading_path``: strings, ``text``: a string), holds text that is not valid
                Unicode, two share an id, or ``content_hash`` is not a non-empty string.
            BackendError: SQLite failed; nothing was written.
        """
        from fastrag.ingestion.parsers import ParsedDocument

        if content_hash is not None and (not isinstance(content_hash, str) or not content_hash):
            raise InvalidParameterError(
                f"content_hash must be a non-empty string or None, got {_describe(content_hash)}"
            )
        if isinstance(documents, ParsedDocument):
            raise InvalidParameterError("add_all takes a list of ParsedDocuments; use add() for a single one")
        if isinstance(documents, str | bytes | Mapping) or not isinstance(documents, Iterable):
            raise InvalidParameterError(f"add_all takes a list of ParsedDocuments, got {type(documents).__name__}")
        docs = list(documents)
        ids: set[str] = set()
        rows: list[tuple[Any, ...]] = []
        for position, doc in enumerate(docs):
            if not isinstance(doc, ParsedDocument):
                raise InvalidParameterError(f"expected a ParsedDocument, got {type(doc).__name__}")
            sections = _check_parsed(doc, where=f"documents[{position}]")
            if doc.id in ids:
                raise InvalidParameterError(f"parent id {doc.id!r} appears twice")
            ids.add(doc.id)
            rows.append((doc.id, doc.source_uri, doc.title, content_hash, json.dumps(sections, ensure_ascii=False)))
        await self._run(self._write_sync, rows)
        return [_normalise(doc.id, doc.source_uri, doc.title, content_hash, doc.sections) for doc in docs]

    def _write_sync(self, rows: list[tuple[Any, ...]]) -> None:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany("INSERT OR REPLACE INTO fastrag_sections VALUES (?, ?, ?, ?, ?)", rows)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    async def add_text(
        self, text: str, *, source_uri: str, kind: FileKind | str | None = None
    ) -> list[ParentDocument]:
        """Parse ``text`` as the file ``source_uri`` would be parsed, and add the result.

        The content hash recorded is the SHA-256 of ``text`` encoded as UTF-8, which equals the pipeline's
        for a file holding exactly those bytes.

        Args:
            text: the file's contents.
            source_uri: the file's path as the pipeline names it (relative to the working directory,
                ``/`` separators); chooses the format unless ``kind`` is given.
            kind: the format: a :class:`~fastrag.ingestion.parsers.FileKind` or its value (``"text"``,
                ``"markdown"``, ``"html"``, ``"beir-corpus"``); by default judged from ``source_uri``.

        Returns:
            The documents added (one, or one per line of a BEIR corpus).

        Raises:
            InvalidParameterError: ``text`` is not a string; ``source_uri`` is not a non-empty string; either
                is not valid Unicode (a lone surrogate); ``kind`` is not one of the kinds (the message lists
                them).
            IngestionError: ``source_uri`` names an unsupported format (and no ``kind`` is given), or the
                text cannot be parsed as that format.
            BackendError: SQLite failed; nothing was written.
        """
        if not isinstance(text, str):
            raise InvalidParameterError(f"text must be a string, got {type(text).__name__}")
        _check_source_uri(source_uri)
        file_kind = _check_kind(kind)
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidParameterError(f"{source_uri}: text is not valid Unicode ({exc.reason})") from exc
        return await self._add_bytes(data, source_uri=source_uri, kind=file_kind)

    async def add_file(self, path: str | Path, *, source_uri: str | None = None) -> list[ParentDocument]:
        """Read, parse and add one file, named as :class:`~fastrag.ingestion.IngestionPipeline` names it.

        Args:
            path: the file (a ``str`` or path-like object).
            source_uri: its name in the index; by default (``None``) the pipeline's: the path relative to the
                working directory when under it, else absolute, with ``/`` separators.

        Returns:
            The documents added (one, or one per line of a BEIR corpus).

        Raises:
            InvalidParameterError: ``path`` is not a non-empty string or path-like object; ``source_uri``
                is given but not a non-empty string; the name (given, or the default one built from a file
                name that is not UTF-8) is not valid Unicode.
            IngestionError: the file cannot be read (missing, a directory, no permission), its format is
                unsupported, or it cannot be parsed.
            BackendError: SQLite failed; nothing was written.
        """
        from fastrag.errors import IngestionError
        from fastrag.ingestion.sources import source_uri_of

        raw = os.fspath(path) if isinstance(path, os.PathLike) else path
        if not isinstance(raw, str) or not raw or "\x00" in raw:
            raise InvalidParameterError(f"path must be a non-empty str or path, got {_describe(path)}")
        if source_uri is not None:
            _check_source_uri(source_uri)
        file = Path(raw)
        try:
            data = await anyio.to_thread.run_sync(file.read_bytes)
        except OSError as exc:
            raise IngestionError(f"{file}: cannot read ({exc.strerror or exc})") from exc
        uri = source_uri if source_uri is not None else source_uri_of(file)
        _check_source_uri(uri)
        return await self._add_bytes(data, source_uri=uri, kind=None)

    async def _add_bytes(self, data: bytes, *, source_uri: str, kind: FileKind | None) -> list[ParentDocument]:
        from fastrag.ingestion.parsers import parse

        documents = await anyio.to_thread.run_sync(lambda: parse(data, source_uri=source_uri, kind=kind))
        return await self.add_all(documents, content_hash=hashlib.sha256(data).hexdigest())

    async def delete(
        self, *, parent_ids: Iterable[str] | None = None, source_uris: Iterable[str] | None = None
    ) -> int:
        """Delete documents by parent id or by ``source_uri`` (either or both).

        Args:
            parent_ids: ids of documents to delete (a list, tuple, set or other iterable of strings).
            source_uris: delete every document from these sources (BEIR: every document of the corpus file).

        Returns:
            How many documents were deleted (ids and sources that match nothing count 0).

        Raises:
            InvalidParameterError: neither argument given; one is a single string (or bytes, a mapping, or
                not iterable) rather than a collection of strings; an item is not a non-empty string.
            BackendError: SQLite failed; nothing was deleted.
        """
        if parent_ids is None and source_uris is None:
            raise InvalidParameterError("delete needs parent_ids or source_uris")
        pids = [] if parent_ids is None else _check_strings(parent_ids, name="parent_ids")
        uris = [] if source_uris is None else _check_strings(source_uris, name="source_uris")

        def delete_sync() -> int:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                deleted = 0
                for column, values in (("parent_id", pids), ("source_uri", uris)):
                    for value in values:
                        deleted += conn.execute(f"DELETE FROM fastrag_sections WHERE {column} = ?", (value,)).rowcount
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return deleted

        return await self._run(delete_sync)

    # -------------------------------------------------------------------------------------- reads

    async def get(self, parent_id: str) -> ParentDocument | None:
        """The stored document with id ``parent_id``, normalised, or ``None`` when there is none.

        Raises:
            InvalidParameterError: ``parent_id`` is not a non-empty string (a list of ids, ``None``, an int).
            BackendError: SQLite failed, or the stored row is corrupt (written by something else).
        """
        if not isinstance(parent_id, str) or not parent_id:
            raise InvalidParameterError(f"parent_id must be a non-empty string, got {_describe(parent_id)}")
        return (await self._load([parent_id])).get(parent_id)

    async def parent_ids(self) -> list[str]:
        """The ids of every stored document, sorted.

        Raises:
            BackendError: SQLite failed.
        """
        rows = await self._run(
            lambda: self._conn.execute("SELECT parent_id FROM fastrag_sections ORDER BY parent_id").fetchall()
        )
        return [row[0] for row in rows]

    async def _load(self, parent_ids: Sequence[str]) -> dict[str, ParentDocument]:
        def load_sync() -> list[tuple[Any, ...]]:
            return [
                row
                for pid in parent_ids
                for row in self._conn.execute(
                    "SELECT parent_id, source_uri, title, content_hash, sections FROM fastrag_sections "
                    "WHERE parent_id = ?",
                    (pid,),
                ).fetchall()
            ]

        rows = await self._run(load_sync)
        loaded: dict[str, ParentDocument] = {}
        for pid, uri, title, content_hash, sections in rows:
            try:
                parsed = [(tuple(path), text) for path, text in json.loads(sections)]
                if not all(isinstance(text, str) and all(isinstance(h, str) for h in path) for path, text in parsed):
                    raise TypeError("a section is not ([headings], text)")
                if not all(isinstance(v, str) for v in (uri, title)) or not isinstance(content_hash, str | None):
                    raise TypeError("a column has the wrong type")
            except (TypeError, ValueError) as exc:
                raise BackendError(
                    f"the stored document {pid!r} is corrupt ({exc}); add it again", store=self.path
                ) from exc
            loaded[pid] = _normalise(pid, uri, title, content_hash, parsed)
        return loaded

    async def resolve(
        self, hit: Document, *, ancestors: bool = True, missing: Literal["raise", "skip"] = "raise"
    ) -> list[SourceSection]:
        """The section(s) of the parent document(s) that ``hit`` was cut from.

        Args:
            hit: a chunk from a store or retriever (any copy: ``score``, ``rank`` and ``branches`` are
                ignored), or a merged chunk (:data:`MERGED_FROM`, see :func:`merge_chunks`).
            ancestors: also return, on each section, its enclosing sections (``section.ancestors``,
                outermost first). The returned list itself holds only the sections the chunk text lies in.
            missing: what to do with a chunk (or a part of a merged chunk) that cannot be traced:
                ``"raise"`` (default) raises :class:`~fastrag.errors.SectionNotFoundError`; ``"skip"``
                leaves it out, so the result holds the sections that were found (possibly none). A
                malformed hit is never skipped: it raises :class:`~fastrag.errors.InvalidParameterError`
                in both modes.

        Returns:
            The sections, each once, in document order (for a merged chunk spanning several parents: the
            parents in the order their first part appears, each parent's sections in document order). Each
            carries ``source_uri``, ``parent_id``, ``heading_path``, its ``start``/``end`` in
            :attr:`ParentDocument.text`, and the ids and spans of the chunks that led to it
            (``chunk_ids``, ``chunk_spans``). A plain chunk gives one section.

        Raises:
            InvalidParameterError: ``ancestors`` is not a bool, ``missing`` is not ``"raise"`` or
                ``"skip"``, or the hit is malformed (the message names the bad key, as
                ``metadata['parent_id']`` or ``merged_from[2].id``):

                - ``hit`` is not a Document;
                - ``parent_id`` is absent, or not a non-empty string;
                - :data:`MERGED_FROM` is not a non-empty list of mappings, a part's ``id`` is given but is
                  not a non-empty string, or a part is itself merged;
                - a part's ``content`` is given but is not a string;
                - ``headings`` is not a list of strings, or ``content_hash`` not a string;
                - :data:`SECTION_INDEX`, :data:`SECTION_START` or :data:`SECTION_END` is not an int (a bool,
                  float or string is refused), is negative, ``section_start > section_end``, only one of
                  those two is given, or they are given without ``section_index``;
                - the chunk cannot be located at all: it has no text (no ``content``, or ``""``) and no
                  section offsets.

                ``None`` for ``headings``, ``content_hash`` and the section keys means "not recorded", as if
                the key were absent.
            SectionNotFoundError: with ``missing="raise"``: the parent document is not in the index; the
                index holds another version of it (the chunk's ``content_hash`` differs from the stored
                one, its section index or heading path is not in the document, its offsets lie past the
                end of the section, or its text is not where its offsets say); no section under the chunk's
                headings contains its text, or (for a chunk without offsets) more than one does.
            BackendError: SQLite failed, or a stored row is corrupt.
        """
        if not isinstance(hit, Document):
            raise InvalidParameterError(f"hit must be a Document, got {type(hit).__name__}")
        if not isinstance(ancestors, bool):
            raise InvalidParameterError(f"ancestors must be a bool, got {ancestors!r}")
        if not isinstance(missing, str) or missing not in _MISSING_MODES:
            raise InvalidParameterError(f'missing must be "raise" or "skip", got {missing!r}')
        parts = _parts_to_resolve(hit)
        parent_order = list(dict.fromkeys(part.parent_id for part in parts))
        parents = await self._load(parent_order)
        # (parent_id, position) -> chunk spans found in it, as (document start, document end, chunk id)
        found: dict[tuple[str, int], list[tuple[int, int, str]]] = {}
        for part in parts:
            try:
                section, span = _locate(parents.get(part.parent_id), part)
            except SectionNotFoundError:
                if missing == "raise":
                    raise
                continue
            found.setdefault((section.parent_id, section.position), []).append((*span, part.id))
        results: list[SourceSection] = []
        for key in sorted(found, key=lambda k: (parent_order.index(k[0]), k[1])):
            parent = parents[key[0]]
            section = parent.sections[key[1]]
            spans = sorted(set(found[key]))
            results.append(
                replace(
                    section,
                    chunk_ids=tuple(chunk_id for _, _, chunk_id in spans),
                    chunk_spans=tuple((start, end) for start, end, _ in spans),
                    ancestors=parent.ancestors(section) if ancestors else (),
                )
            )
        return results


# ------------------------------------------------------------------------------------------ helpers


def _describe(value: Any) -> str:
    """A short description of a bad argument for an error message: its type and a bounded repr."""
    return f"{type(value).__name__} {reprlib.repr(value)}"


def _check_strings(values: Any, *, name: str) -> list[str]:
    """``values`` as a list of non-empty strings; raises InvalidParameterError naming ``name[i]``."""
    if isinstance(values, str | bytes):
        raise InvalidParameterError(f"{name} must be a collection of strings; wrap a single one in a list")
    if isinstance(values, Mapping) or not isinstance(values, Iterable):
        raise InvalidParameterError(f"{name} must be a collection of strings, got {_describe(values)}")
    items = list(values)
    for position, value in enumerate(items):
        if not isinstance(value, str) or not value:
            raise InvalidParameterError(f"{name}[{position}] must be a non-empty string, got {_describe(value)}")
    return items


def _check_source_uri(source_uri: Any) -> None:
    if not isinstance(source_uri, str) or not source_uri:
        raise InvalidParameterError(f"source_uri must be a non-empty string, got {_describe(source_uri)}")
    try:
        source_uri.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidParameterError(f"source_uri {source_uri!r} is not valid Unicode ({exc.reason})") from exc


def _check_kind(kind: Any) -> FileKind | None:
    """``kind`` as a FileKind (``None`` stays ``None``); a FileKind's value is accepted for it."""
    from fastrag.ingestion.parsers import FileKind

    if kind is None or isinstance(kind, FileKind):
        return kind
    if isinstance(kind, str):
        try:
            return FileKind(kind)
        except ValueError:
            pass
    kinds = ", ".join(f"FileKind.{member.name} ({member.value!r})" for member in FileKind)
    raise InvalidParameterError(f"unknown kind {kind!r}; the kinds are {kinds}, or None to judge by source_uri")


def _check_parsed(doc: ParsedDocument, *, where: str) -> list[list[Any]]:
    """The document's sections as stored (``[[headings...], text]`` pairs), after checking its fields."""
    for name in ("id", "source_uri"):
        value = getattr(doc, name)
        if not isinstance(value, str) or not value:
            raise InvalidParameterError(f"{where}.{name} must be a non-empty string, got {_describe(value)}")
    if not isinstance(doc.title, str):
        raise InvalidParameterError(f"{where}.title must be a string, got {_describe(doc.title)}")
    texts: list[tuple[str, str]] = [(f"{where}.id", doc.id), (f"{where}.source_uri", doc.source_uri),
                                    (f"{where}.title", doc.title)]  # fmt: skip
    sections: list[list[Any]] = []
    for position, section in enumerate(doc.sections):
        name = f"{where}.sections[{position}]"
        path, text = getattr(section, "heading_path", None), getattr(section, "text", None)
        if isinstance(path, str) or not isinstance(path, Sequence) or not all(isinstance(h, str) for h in path):
            raise InvalidParameterError(f"{name}.heading_path must be a tuple of strings, got {_describe(path)}")
        if not isinstance(text, str):
            raise InvalidParameterError(f"{name}.text must be a string, got {_describe(text)}")
        texts.extend((f"{name}.heading_path", heading) for heading in path)
        texts.append((f"{name}.text", text))
        sections.append([list(path), text])
    for name, text in texts:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidParameterError(f"{name} is not valid Unicode ({exc.reason})") from exc
    return sections


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


def _parts_to_resolve(hit: Document) -> list[_Part]:
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
            f"{_describe(parent_id)}"
        )
    content = raw.get("content")
    if "content" in raw and not isinstance(content, str):
        raise InvalidParameterError(f"{label('content')} must be a string, got {_describe(content)}")
    headings = raw.get(HEADINGS)
    if headings is not None and (
        isinstance(headings, str | bytes)
        or not isinstance(headings, Sequence)
        or not all(isinstance(h, str) for h in headings)
    ):
        raise InvalidParameterError(f"{label(HEADINGS)} must be a list of strings, got {_describe(headings)}")
    content_hash = raw.get(CONTENT_HASH)
    if content_hash is not None and not isinstance(content_hash, str):
        raise InvalidParameterError(f"{label(CONTENT_HASH)} must be a string, got {_describe(content_hash)}")
    index, start, end = (raw.get(key) for key in (SECTION_INDEX, SECTION_START, SECTION_END))
    for key, value in ((SECTION_INDEX, index), (SECTION_START, start), (SECTION_END, end)):
        if value is not None and (not _is_int(value) or value < 0):
            raise InvalidParameterError(f"{label(key)} must be an int >= 0, got {_describe(value)}")
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
                f"{doc.id!r}: {MERGED_FROM}[{index}].id must be a non-empty string, got {_describe(part['id'])}"
            )
        parts.append(part)
    return parts


def _locate(parent: ParentDocument | None, part: _Part) -> tuple[SourceSection, tuple[int, int]]:
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


def _normalise(
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
    pairs = [(tuple(s.heading_path), s.text) if hasattr(s, "heading_path") else (tuple(s[0]), s[1]) for s in parsed]
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
