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
section. A chunk without them (written before those keys existed, or by other code) is matched by its
heading path and its text: the one section under those headings whose body contains the chunk's text.

**Merged chunks.** A hit whose ``metadata["merged_from"]`` (:data:`MERGED_FROM`) is a list of mappings,
one per original chunk (``{"id", "content", "parent_id", "headings", "section_index", ...}``, as
:func:`merge_chunks` builds them), resolves to the sections of all its parts, in document order, each
once.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Callable, Mapping, Sequence
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
        """The sections enclosing ``section``, outermost first (empty at depth 0 and 1)."""
        by_id = {s.id: s for s in self.sections}
        chain: list[SourceSection] = []
        current = section.parent_section_id
        while current is not None:
            enclosing = by_id[current]
            chain.append(enclosing)
            current = enclosing.parent_section_id
        return tuple(reversed(chain))

    def children(self, section: SourceSection) -> tuple[SourceSection, ...]:
        """The sections directly nested under ``section``, in document order."""
        by_id = {s.id: s for s in self.sections}
        return tuple(by_id[child] for child in section.child_ids)


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
        InvalidParameterError: ``chunks`` is empty or holds something other than a Document.
    """
    if isinstance(chunks, Document) or not isinstance(chunks, Sequence) or not chunks:
        raise InvalidParameterError("merge_chunks needs a non-empty sequence of Documents")
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
    return Document(id=id or "+".join(chunk.id for chunk in chunks), content=content, metadata=metadata)


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
        path: a database file (created with its parent folders if missing) or ``":memory:"``.

    Raises:
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
        self.path = str(path)
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
                raise BackendUnavailableError(f"unsupported section index schema version {version}", store=path)
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
            InvalidParameterError: ``document`` is not a ``ParsedDocument`` or ``content_hash`` not a string.
            BackendError: SQLite failed; nothing was written.
        """
        return (await self.add_all([document], content_hash=content_hash))[0]

    async def add_all(
        self, documents: Sequence[ParsedDocument], *, content_hash: str | None = None
    ) -> list[ParentDocument]:
        """Add several parsed documents in one transaction (as :meth:`add`; for a BEIR corpus, one file).

        Raises:
            InvalidParameterError: an item is not a ``ParsedDocument``, two share an id, or ``content_hash``
                is not a string.
            BackendError: SQLite failed; nothing was written.
        """
        from fastrag.ingestion.parsers import ParsedDocument

        if content_hash is not None and not isinstance(content_hash, str):
            raise InvalidParameterError(f"content_hash must be a string, got {type(content_hash).__name__}")
        docs = list(documents)
        ids: set[str] = set()
        for doc in docs:
            if not isinstance(doc, ParsedDocument):
                raise InvalidParameterError(f"expected a ParsedDocument, got {type(doc).__name__}")
            if doc.id in ids:
                raise InvalidParameterError(f"parent id {doc.id!r} appears twice")
            ids.add(doc.id)
        rows = [
            (doc.id, doc.source_uri, doc.title, content_hash,
             json.dumps([[list(s.heading_path), s.text] for s in doc.sections], ensure_ascii=False))
            for doc in docs
        ]  # fmt: skip
        for row in rows:
            try:
                "".join(str(value) for value in row).encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InvalidParameterError(f"{row[1]}: text is not valid Unicode ({exc.reason})") from exc
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

    async def add_text(self, text: str, *, source_uri: str, kind: FileKind | None = None) -> list[ParentDocument]:
        """Parse ``text`` as the file ``source_uri`` would be parsed, and add the result.

        The content hash recorded is the SHA-256 of ``text`` encoded as UTF-8, which equals the pipeline's
        for a file holding exactly those bytes.

        Args:
            text: the file's contents.
            source_uri: the file's path as the pipeline names it (relative to the working directory,
                ``/`` separators); chooses the format unless ``kind`` is given.
            kind: the format (:class:`~fastrag.ingestion.parsers.FileKind`).

        Returns:
            The documents added (one, or one per line of a BEIR corpus).

        Raises:
            InvalidParameterError: ``text`` or ``source_uri`` is not a string.
            IngestionError: the format is unsupported or the text cannot be parsed.
            BackendError: SQLite failed; nothing was written.
        """
        if not isinstance(text, str):
            raise InvalidParameterError(f"text must be a string, got {type(text).__name__}")
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidParameterError(f"{source_uri}: text is not valid Unicode ({exc.reason})") from exc
        return await self._add_bytes(data, source_uri=source_uri, kind=kind)

    async def add_file(self, path: str | Path, *, source_uri: str | None = None) -> list[ParentDocument]:
        """Read, parse and add one file, named as :class:`~fastrag.ingestion.IngestionPipeline` names it.

        Args:
            path: the file.
            source_uri: its name in the index; by default the pipeline's: the path relative to the working
                directory when under it, else absolute, with ``/`` separators.

        Returns:
            The documents added (one, or one per line of a BEIR corpus).

        Raises:
            IngestionError: the file cannot be read, its format is unsupported, or it cannot be parsed.
            BackendError: SQLite failed; nothing was written.
        """
        from fastrag.errors import IngestionError
        from fastrag.ingestion.pipeline import source_uri_of

        file = Path(path)
        try:
            data = await anyio.to_thread.run_sync(file.read_bytes)
        except OSError as exc:
            raise IngestionError(f"{file}: cannot read ({exc.strerror or exc})") from exc
        return await self._add_bytes(data, source_uri=source_uri or source_uri_of(file), kind=None)

    async def _add_bytes(self, data: bytes, *, source_uri: str, kind: FileKind | None) -> list[ParentDocument]:
        from fastrag.ingestion.parsers import parse

        if not isinstance(source_uri, str) or not source_uri:
            raise InvalidParameterError(f"source_uri must be a non-empty string, got {source_uri!r}")
        documents = await anyio.to_thread.run_sync(lambda: parse(data, source_uri=source_uri, kind=kind))
        return await self.add_all(documents, content_hash=hashlib.sha256(data).hexdigest())

    async def delete(self, *, parent_ids: Sequence[str] | None = None, source_uris: Sequence[str] | None = None) -> int:
        """Delete documents by parent id or by ``source_uri`` (either or both).

        Returns:
            How many documents were deleted.

        Raises:
            InvalidParameterError: neither argument given, or one is a single string rather than a sequence.
            BackendError: SQLite failed; nothing was deleted.
        """
        if parent_ids is None and source_uris is None:
            raise InvalidParameterError("delete needs parent_ids or source_uris")
        for name, values in (("parent_ids", parent_ids), ("source_uris", source_uris)):
            if isinstance(values, str):
                raise InvalidParameterError(f"{name} must be a sequence of strings; wrap a single one in a list")
        pids, uris = list(parent_ids or ()), list(source_uris or ())

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
        """The stored document with id ``parent_id``, normalised, or ``None``.

        Raises:
            BackendError: SQLite failed.
        """
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
            parsed = [(tuple(path), text) for path, text in json.loads(sections)]
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
                leaves it out, so the result holds the sections that were found (possibly none).

        Returns:
            The sections, each once, in document order (for a merged chunk spanning several parents: the
            parents in the order their first part appears, each parent's sections in document order). Each
            carries ``source_uri``, ``parent_id``, ``heading_path``, its ``start``/``end`` in
            :attr:`ParentDocument.text`, and the ids and spans of the chunks that led to it
            (``chunk_ids``, ``chunk_spans``). A plain chunk gives one section.

        Raises:
            InvalidParameterError: ``hit`` is not a Document, names no ``parent_id`` (nor does a part of a
                merged chunk), its :data:`MERGED_FROM` is not a non-empty list of mappings, ``ancestors`` is
                not a bool, or ``missing`` is not ``"raise"`` or ``"skip"``.
            SectionNotFoundError: with ``missing="raise"``: the parent document is not in the index; the
                index holds another version of it (the chunk's ``content_hash`` differs from the stored
                one, or the chunk's text is not where its offsets say); no section under the chunk's
                headings contains its text, or (for a chunk without offsets) more than one does.
            BackendError: SQLite failed.
        """
        if not isinstance(hit, Document):
            raise InvalidParameterError(f"hit must be a Document, got {type(hit).__name__}")
        if not isinstance(ancestors, bool):
            raise InvalidParameterError(f"ancestors must be a bool, got {ancestors!r}")
        if missing not in _MISSING_MODES:
            raise InvalidParameterError(f'missing must be "raise" or "skip", got {missing!r}')
        parts = _merged_parts(hit) if MERGED_FROM in hit.metadata else [_part_of(hit)]
        for part in parts:
            if not isinstance(part.get(PARENT_ID), str) or not part[PARENT_ID]:
                raise InvalidParameterError(
                    f"chunk {part.get('id')!r} has no parent_id in its metadata, so it cannot be traced to a "
                    "section (chunks written by IngestionPipeline have one)"
                )
        parent_order = list(dict.fromkeys(part[PARENT_ID] for part in parts))
        parents = await self._load(parent_order)
        # (parent_id, position) -> chunk spans found in it, as (document start, document end, chunk id)
        found: dict[tuple[str, int], list[tuple[int, int, str]]] = {}
        for part in parts:
            try:
                section, span = _locate(parents.get(part[PARENT_ID]), part)
            except SectionNotFoundError:
                if missing == "raise":
                    raise
                continue
            found.setdefault((section.parent_id, section.position), []).append((*span, part["id"]))
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


def _part_of(doc: Document) -> dict[str, Any]:
    """A chunk's id, text and provenance keys, the shape of one :data:`MERGED_FROM` entry."""
    part: dict[str, Any] = {"id": doc.id, "content": doc.content}
    part.update({key: doc.metadata[key] for key in _PROVENANCE_KEYS if key in doc.metadata})
    return part


def _merged_parts(doc: Document) -> list[dict[str, Any]]:
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
        part.setdefault("id", f"{doc.id}[{index}]")
        parts.append(part)
    return parts


def _locate(parent: ParentDocument | None, part: Mapping[str, Any]) -> tuple[SourceSection, tuple[int, int]]:
    """The section a chunk lies in and the chunk's span in the parent's text; raises when not found."""
    chunk_id, parent_id = part.get("id"), part[PARENT_ID]

    def not_found(reason: str) -> SectionNotFoundError:
        return SectionNotFoundError(f"chunk {chunk_id!r}: {reason}", parent_id=parent_id, chunk_id=chunk_id)

    if parent is None:
        raise not_found(f"parent document {parent_id!r} is not in the section index")
    chunk_hash = part.get(CONTENT_HASH)
    if chunk_hash is not None and parent.content_hash is not None and chunk_hash != parent.content_hash:
        raise not_found(
            f"the section index holds another version of {parent_id!r} (content_hash {parent.content_hash[:12]}…, "
            f"the chunk's {str(chunk_hash)[:12]}…); index the file again"
        )
    content = part.get("content")
    content = content if isinstance(content, str) else None
    headings = part.get(HEADINGS)
    path = tuple(headings) if isinstance(headings, Sequence) and not isinstance(headings, str) else None
    index, start, end = (part.get(key) for key in (SECTION_INDEX, SECTION_START, SECTION_END))
    if _is_int(index):
        section = next((s for s in parent.sections if s.parsed_index == index), None)
        if section is None or (path is not None and section.heading_path != path):
            raise not_found(f"{parent_id!r} has no section {index} under {path!r}; the document changed")
        if _is_int(start) and _is_int(end) and 0 <= start <= end <= len(section.text):
            if content is None or section.text[start:end] == content:
                return section, (section.start + start, section.start + end)
            raise not_found(f"its text is not at [{start}:{end}] of section {index}; the document changed")
        if content is not None and content in section.text:
            offset = section.text.index(content)
            return section, (section.start + offset, section.start + offset + len(content))
        raise not_found(f"its text is not in section {index} of {parent_id!r}; the document changed")
    # no recorded section: the one section under the chunk's headings whose body holds its text
    candidates = [
        s for s in parent.sections
        if s.parsed_index is not None and (path is None or s.heading_path == path)
        and (content is None or content in s.text)
    ]  # fmt: skip
    if len(candidates) != 1:
        reason = "no section" if not candidates else f"{len(candidates)} sections"
        raise not_found(f"{reason} of {parent_id!r} under {path!r} contain its text")
    section = candidates[0]
    offset = section.text.index(content) if content is not None else 0
    length = len(content) if content is not None else len(section.text)
    return section, (section.start + offset, section.start + offset + length)


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
