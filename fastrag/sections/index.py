"""The section index: parent documents kept, normalised, in SQLite, and hits resolved to their sections.

See :class:`SectionIndex`, and :mod:`fastrag.sections` for the whole picture.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
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
from fastrag.lifecycle import AsyncResource
from fastrag.models import Document
from fastrag.sections.document import ParentDocument, SourceSection, normalise
from fastrag.sections.provenance import describe, locate, parts_to_resolve

if TYPE_CHECKING:  # the parsers are imported when first needed, so ``import fastrag.sections`` stays light
    from fastrag.ingestion.parsers import FileKind, ParsedDocument

__all__ = ["SectionIndex"]

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


class SectionIndex(AsyncResource):
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
                f'path must be a database file name or ":memory:" (a non-empty str or path), got {describe(path)}'
            )
        self.path = raw
        self._lock = threading.Lock()
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

    async def _aclose(self) -> None:
        """Close the database (a call in flight finishes first)."""
        await anyio.to_thread.run_sync(self._close_sync)

    def _close_sync(self) -> None:
        with self._lock:
            self._conn.close()

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        def call() -> T:
            with self._lock:
                if self.closed:
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
                f"content_hash must be a non-empty string or None, got {describe(content_hash)}"
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
        return [normalise(doc.id, doc.source_uri, doc.title, content_hash, doc.sections) for doc in docs]

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
            raise InvalidParameterError(f"path must be a non-empty str or path, got {describe(path)}")
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
            raise InvalidParameterError(f"parent_id must be a non-empty string, got {describe(parent_id)}")
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
            loaded[pid] = normalise(pid, uri, title, content_hash, parsed)
        return loaded

    async def resolve(
        self, hit: Document, *, ancestors: bool = True, missing: Literal["raise", "skip"] = "raise"
    ) -> list[SourceSection]:
        """The section(s) of the parent document(s) that ``hit`` was cut from.

        Args:
            hit: a chunk from a store or retriever (any copy: ``score``, ``rank`` and ``branches`` are
                ignored), or a merged chunk (:data:`~fastrag.sections.provenance.MERGED_FROM`, see :func:`~fastrag.sections.provenance.merge_chunks`).
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
                - :data:`~fastrag.sections.provenance.MERGED_FROM` is not a non-empty list of mappings, a part's ``id`` is given but is
                  not a non-empty string, or a part is itself merged;
                - a part's ``content`` is given but is not a string;
                - ``headings`` is not a list of strings, or ``content_hash`` not a string;
                - :data:`~fastrag.models.SECTION_INDEX`, :data:`~fastrag.models.SECTION_START` or :data:`~fastrag.models.SECTION_END` is not an int (a bool,
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
        parts = parts_to_resolve(hit)
        parent_order = list(dict.fromkeys(part.parent_id for part in parts))
        parents = await self._load(parent_order)
        # (parent_id, position) -> chunk spans found in it, as (document start, document end, chunk id)
        found: dict[tuple[str, int], list[tuple[int, int, str]]] = {}
        for part in parts:
            try:
                section, span = locate(parents.get(part.parent_id), part)
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


def _check_strings(values: Any, *, name: str) -> list[str]:
    """``values`` as a list of non-empty strings; raises InvalidParameterError naming ``name[i]``."""
    if isinstance(values, str | bytes):
        raise InvalidParameterError(f"{name} must be a collection of strings; wrap a single one in a list")
    if isinstance(values, Mapping) or not isinstance(values, Iterable):
        raise InvalidParameterError(f"{name} must be a collection of strings, got {describe(values)}")
    items = list(values)
    for position, value in enumerate(items):
        if not isinstance(value, str) or not value:
            raise InvalidParameterError(f"{name}[{position}] must be a non-empty string, got {describe(value)}")
    return items


def _check_source_uri(source_uri: Any) -> None:
    if not isinstance(source_uri, str) or not source_uri:
        raise InvalidParameterError(f"source_uri must be a non-empty string, got {describe(source_uri)}")
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
            raise InvalidParameterError(f"{where}.{name} must be a non-empty string, got {describe(value)}")
    if not isinstance(doc.title, str):
        raise InvalidParameterError(f"{where}.title must be a string, got {describe(doc.title)}")
    texts: list[tuple[str, str]] = [(f"{where}.id", doc.id), (f"{where}.source_uri", doc.source_uri),
                                    (f"{where}.title", doc.title)]  # fmt: skip
    sections: list[list[Any]] = []
    for position, section in enumerate(doc.sections):
        name = f"{where}.sections[{position}]"
        path, text = getattr(section, "heading_path", None), getattr(section, "text", None)
        if isinstance(path, str) or not isinstance(path, Sequence) or not all(isinstance(h, str) for h in path):
            raise InvalidParameterError(f"{name}.heading_path must be a tuple of strings, got {describe(path)}")
        if not isinstance(text, str):
            raise InvalidParameterError(f"{name}.text must be a string, got {describe(text)}")
        texts.extend((f"{name}.heading_path", heading) for heading in path)
        texts.append((f"{name}.text", text))
        sections.append([list(path), text])
    for name, text in texts:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidParameterError(f"{name} is not valid Unicode ({exc.reason})") from exc
    return sections
