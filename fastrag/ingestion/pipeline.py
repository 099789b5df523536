"""The ingestion pipeline: find files, parse, chunk, embed, write; skip what has not changed.

::

    async with SQLiteVectorStore("index.db") as store, Model2VecEmbedder() as embedder:
        report = await IngestionPipeline(embedder=embedder, vector_store=store).run(["docs/"])
        print(report.files_indexed, report.chunks_written, report.errors)

Each chunk becomes a :class:`~fastrag.models.Document` whose id is ``f"{source_uri}#{chunk_index}"``
(deterministic, so re-indexing overwrites in place) and whose metadata holds ``source_uri``, ``title``,
``chunk_index``, ``parent_id``, ``content_hash`` (SHA-256 of the source file's bytes), ``headings``
(the section's heading path, a list of strings), ``chunker`` (the chunker's settings, see
:attr:`~fastrag.ingestion.chunking.Chunker.fingerprint`), and ``section_index``, ``section_start`` and
``section_end`` (which parsed section the chunk was cut from, and its character offsets in that section's
body; :mod:`fastrag.sections` traces hits back to their sections with them), and for a PDF ``page``
(the 1-based page the chunk lies on; a chunk never spans two pages). The embedded text is
``title + "\\n" + chunk`` (just the chunk when the title is empty); the stored ``content`` is the chunk alone.
"""

from __future__ import annotations

import hashlib
import logging
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Literal

import anyio
import anyio.to_thread
import numpy as np
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.text import Text

from fastrag.analysis import language_code
from fastrag.errors import (
    ConfigurationError,
    FastragError,
    IngestionError,
    InvalidParameterError,
    NoTextError,
    ParserMemoryError,
)
from fastrag.filters import Filter
from fastrag.filters import field as filter_field
from fastrag.ingestion.chunking import Chunk, Chunker
from fastrag.ingestion.parsers import (
    BINARY_KINDS,
    FileKind,
    ParsedDocument,
    iter_text,
    parse,
)
from fastrag.ingestion.sources import (
    DEFAULT_MAX_FILE_BYTES,
    SkipFile,
    SkippedFile,
    Source,
    discover,
    printable_path,
    read_blocks,
    read_source,
    source_uri_of,
)
from fastrag.ingestion.steps.cache import CachedEmbedder, EmbeddingCache
from fastrag.ingestion.worker import MEMORY_LIMIT_ENFORCED, ParserProcess
from fastrag.models import (
    CHUNK_INDEX,
    CONTENT_HASH,
    HEADINGS,
    LANGUAGE,
    PAGE,
    PARENT_ID,
    SECTION_END,
    SECTION_INDEX,
    SECTION_START,
    SOURCE_URI,
    TITLE,
    Document,
)
from fastrag.protocols import (
    Embedder,
    LanguageDetector,
    LexicalStore,
    SupportsAtomicReplace,
    SupportsGet,
    VectorStore,
)

if TYPE_CHECKING:  # the section index is handed in; ingestion never imports fastrag.sections (it imports us)
    from fastrag.sections import SectionIndex

__all__ = ["CHUNKER", "DEFAULT_PARSE_MEMORY_LIMIT", "DEFAULT_PARSE_TIMEOUT", "HEADINGS", "IngestionFailure",
           "IngestionPipeline", "IngestionReport", "SkippedFile", "source_uri_of"]

logger = logging.getLogger(__name__)

DEFAULT_PARSE_TIMEOUT = 120.0
"""Seconds one PDF or DOCX file may take to parse by default."""

DEFAULT_PARSE_MEMORY_LIMIT = 2 * 1024**3
"""Bytes of memory one PDF or DOCX file may take to parse by default (2 GiB). Measured here: a ``.docx``
whose ``document.xml`` holds 30 MB of XML (600,000 paragraphs) peaks at about 370 MB in the parser, so 2 GiB
admits Word XML up to roughly 170 MB, far beyond real documents (a 500-page report's is a few MB), while a
1.8 MB file unpacking to 600 MB of XML (which took 9.7 GB) is refused."""

_DETECT_CHARS = 2_000  # characters of a document its language is detected from (a paragraph settles it)
_ID_BATCH = 500  # ids per get/delete call, well under every backend's limit on query size
_STREAM_BYTES = 1 << 20  # a plain-text file larger than one read block streams into stores that replace atomically
_EMBED_SLICE = 1024  # texts per embedding call within one oversized batch (progress moves between slices)

CHUNKER = "chunker"
"""Chunk metadata key: the :attr:`~fastrag.ingestion.chunking.Chunker.fingerprint` of the chunker that cut
it; re-indexing with other chunker settings replaces every chunk."""


@dataclass(frozen=True, slots=True)
class IngestionFailure:
    """A source that could not be ingested.

    Attributes:
        path: the file as found on disk (or the path argument that does not exist).
        message: why, in words, naming the file (the :class:`~fastrag.errors.IngestionError` message);
            also what ``str()`` gives.
    """

    path: str
    message: str

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True, slots=True)
class IngestionReport:
    """What one :meth:`IngestionPipeline.run` did.

    Attributes:
        files_indexed: files parsed and written (new or changed); a BEIR corpus counts as one file.
        files_unchanged: files whose stored chunks already match them; nothing was written.
        files_skipped: paths found but not indexed, each with its reason in ``skipped_files``: an
            unsupported type, not a regular file (a FIFO, a device, a socket, also through a symlink), a
            symlink loop or a broken or folder symlink, a file over the size limit, a PDF or Word file with no
            text to read (encrypted, scanned) or too large for the parser's memory limit, or a file with no
            text to index (empty; the chunks of an earlier version of it are removed).
        files_pruned: sources (files, or BEIR documents) whose chunks ``prune=True`` deleted.
        chunks_written: chunks upserted (each counted once, however many stores received it).
        errors: the files that failed to read or parse; the run went on without them and their
            previously stored chunks are left as they were.
        skipped: the skipped paths, in walk order (``skipped_files`` has the reasons).
        skipped_files: each skipped path and why, in walk order.
        files_deleted: sources under the run's paths still in the store although their file is gone (they
            stay searchable until a run with ``prune=True``); counted only by ``run(report_deleted=True)``,
            else 0.
        deleted: those sources (``source_uri``), sorted; empty unless ``run(report_deleted=True)``.
        warnings: what was indexed with something left out, in words naming the file (a PDF page without a
            text layer).
        zero_vectors: chunks written whose embedding is all zeros (no word of theirs is in the
            embedder's vocabulary, e.g. a script a static model does not know): dense k-NN never finds
            them, only BM25 does. Logged at WARNING with a count per batch.
        languages: ``{language: chunks}`` written with ``metadata["language"]`` set by this run
            (``language=`` or ``language_detector=``); ``""`` counts chunks the detector could not place.
    """

    files_indexed: int = 0
    files_unchanged: int = 0
    files_skipped: int = 0
    files_pruned: int = 0
    chunks_written: int = 0
    errors: tuple[IngestionFailure, ...] = ()
    skipped: tuple[str, ...] = ()
    skipped_files: tuple[SkippedFile, ...] = ()
    files_deleted: int = 0
    deleted: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    zero_vectors: int = 0
    languages: Mapping[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """``True`` when no file failed."""
        return not self.errors


@dataclass(frozen=True, slots=True)
class _Batch:
    """Embedded chunks on their way to the stores, and the files whose last chunk is among them."""

    documents: tuple[Document, ...]
    embeddings: np.ndarray | None
    completed: tuple[Filter, ...]  # stale chunks of the sources this batch completes


_EMPTIED = "no text to index (empty); the chunks stored from its earlier version are removed"


@dataclass(slots=True)
class _Run:
    """Mutable bookkeeping of one run; frozen into an :class:`IngestionReport` at the end."""

    files_indexed: int = 0
    files_unchanged: int = 0
    files_pruned: int = 0
    files_deleted: int = 0
    deleted: tuple[str, ...] = ()
    chunks_written: int = 0
    errors: list[IngestionFailure] = field(default_factory=list)
    skipped: list[SkippedFile] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    zero_vectors: int = 0
    languages: dict[str, int] = field(default_factory=dict)
    # what this run saw: a stored chunk whose source_uri is here (or under a prefix) survives a prune
    kept_uris: set[str] = field(default_factory=set)
    kept_prefixes: set[str] = field(default_factory=set)
    # the roots of this run, as absolute paths (folders end with "/"): prune looks only under them
    root_prefixes: set[str] = field(default_factory=set)
    root_uris: set[str] = field(default_factory=set)
    # chunks waiting to be embedded, and the sources to sweep once all their chunks are written
    pending: list[Document] = field(default_factory=list)
    completed: list[Filter] = field(default_factory=list)
    # the child process that parses PDF and DOCX files, started by the first one
    parser: ParserProcess | None = None
    bar: _ProgressBar | None = None

    def report(self) -> IngestionReport:
        return IngestionReport(
            files_indexed=self.files_indexed,
            files_unchanged=self.files_unchanged,
            files_skipped=len(self.skipped),
            files_pruned=self.files_pruned,
            chunks_written=self.chunks_written,
            errors=tuple(self.errors),
            skipped=tuple(s.path for s in self.skipped),
            skipped_files=tuple(self.skipped),
            files_deleted=self.files_deleted,
            deleted=self.deleted,
            warnings=tuple(self.warnings),
            zero_vectors=self.zero_vectors,
            languages=dict(self.languages),
        )


class IngestionPipeline:
    """Indexes files and folders into a vector store (and optionally a separate lexical store).

    Supported files: ``.txt``, ``.md``/``.markdown``, ``.html``/``.htm``, BEIR ``corpus.jsonl``, and with
    their extras ``.pdf`` and ``.docx`` (see :mod:`fastrag.ingestion.parsers`). Other files are skipped and
    reported with the reason, never errors; so are paths that are not regular files (FIFOs, devices, symlink
    loops) and files over ``max_file_bytes`` (see :mod:`fastrag.ingestion.sources`): one bad path never
    stops the others. A PDF or DOCX file with no text to read (encrypted, scanned without a text layer,
    a legacy ``.doc``) is skipped with the reason (:attr:`IngestionReport.skipped_files`); one that cannot be
    read (malformed or truncated, too slow to parse, its extra not installed) is recorded with the reason in
    :attr:`IngestionReport.errors`; either way the run goes on.

    Re-indexing is incremental and keyed by the deterministic chunk ids. A file is *unchanged* when
    every target store holds each of its chunks (same id, text, ``content_hash`` and ``chunker``) and no
    chunk past its last one; then nothing is embedded or written. Stores with ``get`` are probed by id, an
    index lookup in every backend, so checking a large tree of unchanged files stays cheap; a store
    without ``get`` is asked to ``count`` the file's chunks by filter instead. A changed file's new chunks
    overwrite the old ones by id; if the stored version had more chunks (or the file is a BEIR corpus,
    which may have lost documents), every chunk under its ``source_uri`` with another ``content_hash``
    or ``chunker`` is deleted after the new ones are written. So a file that got shorter leaves no stale chunks, and a file is
    never missing from the store mid-update. Comparing chunks, not just hashes, also re-indexes a file
    after the chunker settings change or after a run that was interrupted half-way.

    Batches are pipelined: while one batch is being written, the next is embedded.

    Args:
        embedder: turns chunk texts into vectors.
        vector_store: receives every chunk with its vector.
        lexical_store: a separate full-text store that receives the same chunks (without vectors).
            ``None``, or the same object as ``vector_store`` (a store that does both), writes once.
        chunker: how to cut sections into chunks; ``Chunker()`` (1,000 characters, 100 overlap) by
            default.
        batch_size: chunks embedded and upserted per call; must be positive. A document's chunks are never
            split across batches (a batch closes early rather than cut one; a document with more chunks
            than this is one batch of its own), so an interrupted run never leaves half a document. The
            exception is a ``.txt`` over 1 MiB into stores that all replace atomically
            (:class:`~fastrag.protocols.SupportsAtomicReplace` and ``get``: the SQLite store), without
            ``sections``: it streams in batches of this size inside one transaction per store, so it is
            still stored whole or not at all, holding one batch of its chunks at a time.
        show_progress: draw a :mod:`rich` progress bar on stderr; ``None`` (default) draws it only when
            stderr is a terminal.
        sections: a :class:`~fastrag.sections.SectionIndex` that receives every document the
            run parses (changed or not; files that fail to parse are left as they were), with the file's
            ``content_hash``, and forgets the files ``prune=True`` deletes. It stays the caller's (never
            closed here).
        embedding_cache: an :class:`~fastrag.ingestion.EmbeddingCache`: chunk texts embedded before with
            the same embedder (same model and options) are read from it instead of being embedded again,
            and new vectors are added to it. So a changed file costs only its changed chunks, and
            re-indexing into a new store costs nothing. It stays the caller's (never closed here).
        max_file_bytes: the size limit of one file, of any format, in bytes (default 100 MiB); a larger file
            is skipped with the reason (:attr:`IngestionReport.skipped_files`) and never read past the
            limit. A DOCX is also refused when its zip members unpack to more than 10 times this (a zip
            bomb).
        parse_timeout: seconds one PDF or DOCX file may take to parse (default 120). These formats are
            parsed by third-party libraries in a worker process (:mod:`fastrag.ingestion.worker`, one per
            run), which is killed at the limit: a file
            that would make a parser loop or stall is recorded in :attr:`IngestionReport.errors` and
            skipped, and the run goes on. Text formats are parsed in a thread, without these limits.
        parse_memory_limit: bytes of memory one PDF or DOCX file may take to parse in the worker process
            (default 2 GiB, :data:`DEFAULT_PARSE_MEMORY_LIMIT`), on top of what the worker holds after
            start-up (about 65 MB); ``None`` for no limit. A file that needs more (a DOCX whose XML
            unpacks to hundreds of MB) is skipped as too large for it, named with the reason
            (:attr:`IngestionReport.skipped_files`, :class:`~fastrag.errors.ParserMemoryError`), never
            reported as malformed. Enforced on Linux (``RLIMIT_AS``); elsewhere the run's
            :attr:`IngestionReport.warnings` say it is not. Plain ``.txt`` files are read and chunked
            block by block instead, holding about one chunk's text and a 1 MiB block, besides the
            chunks themselves (unless ``sections`` is given, which keeps the whole text); streamed into
            such stores (see ``batch_size``), only one batch of chunks with their vectors too.

        language: stamp ``metadata["language"] = language`` (an ISO 639-1 code) on every chunk, so
            stores that analyse text per language (the SQLite store) stem it in that language.
        language_detector: detect each parsed document's language (a file, or one BEIR document) from
            its text (title and sections, the detector's own length limit applies) and stamp it on the
            document's chunks; a document it cannot place gets no language. In a worker thread.
            ``"default"`` (the default, when no ``language`` is given):
            :func:`~fastrag.language.default_language_detector` (langid.py, offline, 114 languages; the
            measurements behind it: ``benchmarks/results/language_detectors.md``), so a corpus in any
            language gets its language's stemmer without flags; a document it places with less than
            :data:`~fastrag.language.DOCUMENT_MIN_CONFIDENCE` gets no language. ``None``: no detection, no language
            stamped (the store's own analysis, English by default, as before issue 25). The language is
            decided per document, not per chunk: a file's chunks share one analysis, and a paragraph
            settles it where a chunk of a table or a code listing would not (a mixed corpus of
            one-language files gets each file's language).

    A chunk's language is part of what "unchanged" compares: running again with another ``language``
    (or a detector that now decides otherwise) rewrites the file's chunks.

    Raises:
        InvalidParameterError: ``batch_size``, ``max_file_bytes``, ``parse_timeout`` or
            ``parse_memory_limit`` is not positive; ``language`` is not a language code,
            ``language_detector`` has no ``detect``, or both are given (a ``language`` with the default
            ``language_detector="default"`` is no conflict: the language is given, nothing is detected).
    """

    def __init__(
        self,
        *,
        embedder: Embedder,
        vector_store: VectorStore,
        lexical_store: LexicalStore | None = None,
        chunker: Chunker | None = None,
        batch_size: int = 64,
        show_progress: bool | None = None,
        sections: SectionIndex | None = None,
        embedding_cache: EmbeddingCache | None = None,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        parse_timeout: float = DEFAULT_PARSE_TIMEOUT,
        parse_memory_limit: int | None = DEFAULT_PARSE_MEMORY_LIMIT,
        language: str | None = None,
        language_detector: LanguageDetector | Literal["default"] | None = "default",
    ) -> None:
        if isinstance(language_detector, str) and language_detector == "default":
            if language is None:
                from fastrag.language import DOCUMENT_MIN_CONFIDENCE, default_language_detector

                language_detector = default_language_detector(min_confidence=DOCUMENT_MIN_CONFIDENCE)
            else:
                language_detector = None
        if language is not None and language_detector is not None:
            raise InvalidParameterError("give language= or language_detector=, not both")
        if language is not None:
            code = language_code(language)
            if code is None:
                raise InvalidParameterError(f"language must be a registered language code such as 'de', got {language!r}")
            language = code  # stamped normalised: "RU", "rus" -> "ru"
        if language_detector is not None and not isinstance(language_detector, LanguageDetector):
            raise InvalidParameterError(f"language_detector has no detect() method: {language_detector!r}")
        self._language = language
        self._detector = language_detector
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise InvalidParameterError(f"batch_size must be a positive integer, got {batch_size!r}")
        if isinstance(max_file_bytes, bool) or not isinstance(max_file_bytes, int) or max_file_bytes <= 0:
            raise InvalidParameterError(f"max_file_bytes must be a positive integer, got {max_file_bytes!r}")
        if (
            isinstance(parse_timeout, bool)
            or not isinstance(parse_timeout, int | float)
            or not 0 < parse_timeout < float("inf")
        ):
            raise InvalidParameterError(f"parse_timeout must be a positive number of seconds, got {parse_timeout!r}")
        if parse_memory_limit is not None and (
            isinstance(parse_memory_limit, bool) or not isinstance(parse_memory_limit, int) or parse_memory_limit <= 0
        ):
            raise InvalidParameterError(
                f"parse_memory_limit must be a positive number of bytes or None, got {parse_memory_limit!r}"
            )
        self._max_file_bytes = max_file_bytes
        self._parse_timeout = float(parse_timeout)
        self._parse_memory_limit = parse_memory_limit
        self._embedder: Embedder = embedder if embedding_cache is None else CachedEmbedder(embedder, embedding_cache)
        self._vector_store = vector_store
        self._lexical_store = None if lexical_store is vector_store else lexical_store
        self._chunker = chunker or Chunker()
        self._fingerprint = self._chunker.fingerprint
        self._batch_size = batch_size
        self._show_progress = show_progress
        self._sections = sections

    @property
    def _stores(self) -> list[VectorStore | LexicalStore]:
        stores: list[VectorStore | LexicalStore] = [self._vector_store]
        if self._lexical_store is not None:
            stores.append(self._lexical_store)
        return stores

    async def run(
        self, paths: Sequence[str | Path], *, prune: bool = False, report_deleted: bool = False
    ) -> IngestionReport:
        """Index ``paths``: files, and folders walked recursively.

        Folders are walked in sorted order without following symlinks, skipping hidden files and folders
        (names starting with ``.``). A file's ``source_uri`` is its path relative to the working directory when it lies under
        it (``docs/guide/intro.md``), else its absolute path, with ``/`` separators. In a BEIR ``corpus.jsonl`` every line is one document
        with ``source_uri`` ``<corpus uri>#<_id>`` and ``parent_id`` ``<_id>``.

        A file that cannot be read or parsed (not UTF-8, malformed JSON line, permission denied), or a
        path that does not exist, is recorded in :attr:`IngestionReport.errors` and the run goes on.

        Args:
            paths: files and folders to index.
            prune: after indexing, delete the stored chunks written by an ingestion pipeline (they carry
                ``content_hash``) whose file lies under one of ``paths`` but was not found in this run
                (it was deleted or is no longer supported). Chunks of files outside ``paths`` and of
                files that failed to parse are kept.
            report_deleted: without ``prune``, count the sources under ``paths`` that are stored but no
                longer on disk (:attr:`IngestionReport.files_deleted`); this reads the stored documents'
                metadata, as ``prune`` does.

        Returns:
            What was indexed, skipped, pruned and what failed.

        Raises:
            InvalidParameterError: ``paths`` is a single path rather than a sequence of paths.
            ConfigurationError: ``prune=True`` but no target store can list its documents
                (:class:`~fastrag.protocols.SupportsGet`).
            EmbeddingError: the embedder failed; chunks already written stay written.
            BackendError: a store failed; chunks already written stay written.
        """
        if isinstance(paths, str | Path):
            raise InvalidParameterError("paths must be a sequence of paths; wrap a single path in a list")
        if prune and not any(isinstance(store, SupportsGet) for store in self._stores):
            raise ConfigurationError("prune=True needs a store that can list its documents (a get() method)")
        state = _Run()
        try:
            return await self._run(paths, state, prune=prune, report_deleted=report_deleted)
        finally:
            if state.parser is not None:
                await state.parser.aclose()

    async def _run(
        self, paths: Sequence[str | Path], state: _Run, *, prune: bool, report_deleted: bool
    ) -> IngestionReport:
        sources = await anyio.to_thread.run_sync(self._discover, [Path(p) for p in paths], state)
        with _ProgressBar(self._show_progress, files=len(sources), total_bytes=sum(s.size for s in sources)) as bar:
            state.bar = bar
            failure: BaseException | None = None
            try:
                # one writer task drains a one-slot queue, so batch n is written while n + 1 is embedded
                send, receive = anyio.create_memory_object_stream[_Batch](max_buffer_size=1)
                async with anyio.create_task_group() as group:
                    group.start_soon(self._write_batches, receive, state)
                    async with send:
                        for source in sources:
                            bar.describe(f"Indexing {_ellipsize(source.source_uri)}")
                            await self._index_source(source, state, send)
                            bar.file_done(source.size)
                        await self._flush(state, send)
            except BaseExceptionGroup as group_error:
                failure = _root_cause(group_error)
            if failure is not None:
                raise failure  # the store's or embedder's own error, not a task-group wrapper
            if prune:
                bar.describe("Pruning")
                await self._prune(state)
            elif report_deleted:
                doomed = await self._stale_sources(state)
                state.deleted = tuple(sorted(set(doomed.values())))
                state.files_deleted = len(state.deleted)
            bar.describe("Indexed")
        report = state.report()
        logger.info(
            "ingestion: %d indexed, %d unchanged, %d skipped, %d pruned, %d chunks, %d errors",
            report.files_indexed, report.files_unchanged, report.files_skipped, report.files_pruned,
            report.chunks_written, len(report.errors),
        )  # fmt: skip
        return report

    # ------------------------------------------------------------------------------------ per source

    def _discover(self, paths: list[Path], state: _Run) -> list[Source]:
        """The files to index under ``paths`` (runs in a worker thread); records skips and bad paths."""
        found = discover(paths, max_file_bytes=self._max_file_bytes)
        state.skipped.extend(found.skipped)
        state.root_prefixes |= found.root_prefixes
        state.root_uris |= found.root_uris
        for path in found.missing:
            state.errors.append(IngestionFailure(path=path, message=f"{path}: no such file or directory"))
        for folder, why in found.unreadable:
            state.errors.append(IngestionFailure(path=folder, message=f"{folder}: cannot list folder ({why})"))
        return found.sources

    async def _index_source(self, source: Source, state: _Run, send: MemoryObjectSendStream[_Batch]) -> None:
        uri = source.source_uri
        is_corpus = source.kind is FileKind.BEIR_CORPUS
        # whatever happens next, this run has seen the source: prune must not touch its chunks
        state.kept_uris.add(uri)
        if is_corpus:
            state.kept_prefixes.add(f"{uri}#")
        try:
            if self._streams_to_stores(source):
                await self._index_streaming(source, state, send)
                return
            if source.kind in BINARY_KINDS:
                read = await self._read_binary(source, state)
            else:
                read = await anyio.to_thread.run_sync(self._read_and_chunk, source)
            content_hash, documents, sentinels, parsed = read
        except SkipFile as skip:
            state.skipped.append(SkippedFile(printable_path(source.path), str(skip)))
            return
        except NoTextError as exc:  # sound, but no text to read without help (encrypted, scanned): skipped
            state.skipped.append(SkippedFile(printable_path(source.path), exc.reason))
            return
        except ParserMemoryError as exc:  # sound as far as we know, but too large to parse within the limit
            logger.warning("ingestion: %s", exc)
            state.skipped.append(SkippedFile(printable_path(source.path), exc.reason))
            return
        except IngestionError as exc:
            logger.warning("ingestion: %s", exc)
            state.errors.append(IngestionFailure(path=printable_path(source.path), message=str(exc)))
            return
        if self._sections is not None:
            await self._sections.add_all(parsed, content_hash=content_hash)
        scope = filter_field(SOURCE_URI).starts_with(f"{uri}#") if is_corpus else filter_field(SOURCE_URI) == uri
        # after the new version is written, a chunk under scope from another file version or another
        # chunker is stale; one with both the same was cut identically and has just been overwritten
        stale = scope & ((filter_field(CONTENT_HASH) != content_hash) | (filter_field(CHUNKER) != self._fingerprint))
        unchanged, longer_before = await self._compare(documents, sentinels, scope=scope, stale=stale)
        if unchanged and not documents:  # nothing stored and nothing to store: not "unchanged", say why
            state.skipped.append(SkippedFile(printable_path(source.path), "no text to index (empty)"))
            return
        if unchanged:
            state.files_unchanged += 1
            return
        if not documents:  # emptied since it was indexed: skipped as empty, as on any later run; its chunks go
            state.completed.append(stale)
            state.skipped.append(SkippedFile(printable_path(source.path), _EMPTIED))
            return
        for group in _by_source(documents):
            # a document's chunks travel in one batch, so in one upsert (one transaction in SQLite): a run
            # killed part-way leaves each document with all of its new chunks or none of them
            if state.pending and len(state.pending) + len(group) > self._batch_size:
                await self._flush(state, send)
            state.pending.extend(group)
            if len(state.pending) >= self._batch_size:
                await self._flush(state, send)
        # new chunks overwrite old ones by id, so only a source that had more chunks leaves some behind;
        # a corpus may also have lost documents, whose ids we cannot know
        if is_corpus or longer_before:
            state.completed.append(stale)
        state.files_indexed += 1

    def _streams_to_stores(self, source: Source) -> bool:
        """Whether ``source`` is read, chunked, embedded and written as it streams (:meth:`_index_streaming`)."""
        return (
            source.kind is FileKind.TEXT and self._sections is None and self._streams_text
            and source.size > _STREAM_BYTES
            and all(isinstance(store, SupportsAtomicReplace) and isinstance(store, SupportsGet) for store in self._stores)
        )

    async def _index_streaming(self, source: Source, state: _Run, send: MemoryObjectSendStream[_Batch]) -> None:
        """Index a large plain-text file as it streams: a bounded window of its text and one batch of its
        chunks in memory, never the file's chunks at once.

        Three passes over the file: the first hashes and decodes it (a bad byte fails it before anything
        is written) and detects its language; the second compares its chunks with the stored ones, batch by
        batch, stopping at the first difference; the third, for a changed file, writes its chunks in
        batches of ``batch_size`` inside one :meth:`~fastrag.protocols.SupportsAtomicReplace.atomic_replace`
        per store, which first deletes the file's stored chunks: readers see the old version until it
        commits, and a failure part-way (or a file that changed between the passes) rolls it back.
        """
        uri = source.source_uri
        content_hash, language = await anyio.to_thread.run_sync(self._scan_text, source)
        scope = filter_field(SOURCE_URI) == uri
        if await self._stream_unchanged(source, content_hash, language):
            state.files_unchanged += 1
            return
        await self._flush(state, send)  # the files before this one go first
        async with AsyncExitStack() as stack:
            writers = [await stack.enter_async_context(store.atomic_replace(delete=scope)) for store in self._stores]
            written = 0
            stream = self._stream_chunks(source, content_hash, language)
            while batch := await anyio.to_thread.run_sync(_take, stream, self._batch_size):
                embeddings = await self._embed(batch, state)
                zero = int(np.count_nonzero(~np.asarray(embeddings).any(axis=1)))
                state.zero_vectors += zero
                for store, writer in zip(self._stores, writers, strict=True):
                    await writer.upsert(batch, embeddings=embeddings if store is self._vector_store else None)
                written += len(batch)
                if language is not None:
                    state.languages[language] = state.languages.get(language, 0) + len(batch)
            if stream.content_hash != content_hash:
                raise IngestionError(f"{uri}: changed while it was being indexed; its stored chunks are kept")
        if not written:
            state.skipped.append(SkippedFile(printable_path(source.path), _EMPTIED))
            return
        state.chunks_written += written
        state.files_indexed += 1

    async def _stream_unchanged(self, source: Source, content_hash: str, language: str | None) -> bool:
        """Whether every store holds exactly the file's chunks, compared batch by batch (stops at the first
        difference: a new file costs one batch of chunking)."""
        stream = self._stream_chunks(source, content_hash, language)
        count = 0
        while batch := await anyio.to_thread.run_sync(_take, stream, _ID_BATCH):
            count += len(batch)
            for store in self._stores:
                stored = {doc.id: doc for doc in await store.get(ids=[doc.id for doc in batch])}  # type: ignore[union-attr]
                if not all(_same_chunk(stored.get(doc.id), doc) for doc in batch):
                    return False
        if not count or stream.content_hash != content_hash:
            return False
        sentinel = f"{source.source_uri}#{count}"
        for store in self._stores:
            if await store.get(ids=[sentinel]):  # type: ignore[union-attr]
                return False  # the stored version had more chunks
        return True

    def _scan_text(self, source: Source) -> tuple[str, str | None]:
        """The SHA-256 of a plain-text file and its language, read block by block (runs in a thread)."""
        stream = self._stream_chunks(source, "", None, cut=False)
        for _ in stream:
            pass
        language = self._language
        if self._detector is not None:
            language = self._detector.detect(stream.detection_text()[:_DETECT_CHARS])
        return stream.content_hash, language

    def _stream_chunks(self, source: Source, content_hash: str, language: str | None, *, cut: bool = True) -> _TextStream:
        return _TextStream(self, source, content_hash, language, cut=cut)

    def _read_and_chunk(self, source: Source) -> tuple[str, list[Document], list[str], list[ParsedDocument]]:
        """Read, hash, parse and chunk one file (runs in a worker thread).

        Returns the content hash, the chunk documents, per parsed document the id its next chunk
        would have (``f"{source_uri}#{chunk_count}"``): a store holding one of those ids holds an older
        version with more chunks, and the parsed documents.

        Raises:
            SkipFile: not a regular file (any more), or over the size limit.
            IngestionError: unreadable, or the parser failed; the message names the file.
        """
        try:
            if source.kind is FileKind.TEXT and self._sections is None and self._streams_text:
                return self._stream_text(source)
            data = read_source(source, max_file_bytes=self._max_file_bytes)
            content_hash = hashlib.sha256(data).hexdigest()
            parsed_documents = parse(data, source_uri=source.source_uri, kind=source.kind)
            return (content_hash, *self._chunk_all(parsed_documents, content_hash))
        except (IngestionError, SkipFile):
            raise
        except Exception as exc:  # a parser or chunker bug on one hostile file must not stop the run
            raise IngestionError(f"{source.source_uri}: cannot parse ({type(exc).__name__}: {exc})") from exc

    @property
    def _streams_text(self) -> bool:
        """Whether plain text can be cut as it is read: the chunker cuts as :class:`Chunker` does."""
        kind = type(self._chunker)
        return all(getattr(kind, name) is getattr(Chunker, name) for name in ("chunk", "chunk_section", "split_text",
                                                                                 "chunk_stream"))

    def _stream_text(self, source: Source) -> tuple[str, list[Document], list[str], list[ParsedDocument]]:
        """Read, hash, decode and chunk a plain-text file block by block: the chunks
        :func:`~fastrag.ingestion.parsers.parse_text` and the chunker give for the whole file, holding one
        block and about one chunk of its text at a time (a 60 MB file peaked at 1.9 GB before, read whole and
        cut with lists of every word boundary of a paragraph). No parsed document is returned: nothing keeps
        the whole text (with a ``SectionIndex`` the file is read whole instead)."""
        uri = source.source_uri
        hasher = hashlib.sha256()
        head: list[str] = []  # the first characters, for the language detector
        wanted = _DETECT_CHARS if self._detector is not None else 0

        def hashed() -> Iterator[bytes]:
            for block in read_blocks(source, max_file_bytes=self._max_file_bytes):
                hasher.update(block)
                yield block

        def body() -> Iterator[str]:  # the text without its leading whitespace, as parse_text strips it
            nonlocal wanted
            started = False
            for piece in iter_text(hashed(), source=uri):
                if not started:
                    piece = piece.lstrip()
                    if not piece:
                        continue
                    started = True
                if wanted > 0:
                    head.append(piece[:wanted])
                    wanted -= len(head[-1])
                yield piece

        parsed = ParsedDocument(source_uri=uri, title=PurePath(uri).stem, sections=())
        chunks = list(self._chunker.chunk_stream(body()))
        language = self._language
        if self._detector is not None:
            start = "".join(head).rstrip() if wanted > 0 else "".join(head)  # the whole text: stripped, as parsed
            text = f"{parsed.title}\n{start}" if start else parsed.title
            language = self._detector.detect(text[:_DETECT_CHARS])
        documents = self._documents(parsed, chunks, hasher.hexdigest(), language)
        return hasher.hexdigest(), documents, [f"{uri}#{len(documents)}"], []

    def _chunk_all(
        self, parsed_documents: list[ParsedDocument], content_hash: str
    ) -> tuple[list[Document], list[str], list[ParsedDocument]]:
        documents: list[Document] = []
        sentinels: list[str] = []
        for parsed in parsed_documents:
            chunks = self._chunk_documents(parsed, content_hash)
            documents.extend(chunks)
            sentinels.append(f"{parsed.source_uri}#{len(chunks)}")
        return documents, sentinels, parsed_documents

    async def _read_binary(
        self, source: Source, state: _Run
    ) -> tuple[str, list[Document], list[str], list[ParsedDocument]]:
        """Read a PDF or DOCX file within the size limit and parse it in the worker process within the time
        limit (the process is killed at the limit); then chunk it in a thread."""
        data = await anyio.to_thread.run_sync(partial(read_source, source, max_file_bytes=self._max_file_bytes))
        content_hash = hashlib.sha256(data).hexdigest()
        if state.parser is None:
            state.parser = ParserProcess(timeout=self._parse_timeout, memory_limit=self._parse_memory_limit)
            if self._parse_memory_limit is not None and not MEMORY_LIMIT_ENFORCED:
                note = (f"the parser's memory limit (parse_memory_limit) is not enforced on {sys.platform}: "
                        "it needs Linux's RLIMIT_AS; PDF and Word files are parsed without it")
                logger.warning("ingestion: %s", note)
                state.warnings.append(note)
        parsed, notes = await state.parser.parse(
            data, source_uri=source.source_uri, kind=source.kind, max_unpacked_bytes=10 * self._max_file_bytes
        )
        for note in notes:
            logger.warning("ingestion: %s", note)
        state.warnings.extend(notes)
        documents, sentinels, parsed = await anyio.to_thread.run_sync(self._chunk_all, parsed, content_hash)
        return content_hash, documents, sentinels, parsed

    def _language_of(self, parsed: ParsedDocument) -> str | None:
        if self._detector is None:
            return self._language
        text = "\n".join([parsed.title, *(section.text for section in parsed.sections)])
        return self._detector.detect(text[:_DETECT_CHARS])

    def _chunk_documents(self, parsed: ParsedDocument, content_hash: str) -> list[Document]:
        language = self._language_of(parsed) if (self._language or self._detector) else None
        return self._documents(parsed, self._chunker.chunk(parsed), content_hash, language)

    def _documents(
        self, parsed: ParsedDocument, chunks: Iterable[Chunk], content_hash: str, language: str | None
    ) -> list[Document]:
        """The stored form of ``parsed``'s chunks (a parsed document without sections has no pages)."""
        return list(self._iter_documents(parsed, chunks, content_hash, language))

    def _iter_documents(
        self, parsed: ParsedDocument, chunks: Iterable[Chunk], content_hash: str, language: str | None
    ) -> Iterator[Document]:
        for index, chunk in enumerate(chunks):
            metadata = {
                SOURCE_URI: parsed.source_uri,
                TITLE: parsed.title,
                CHUNK_INDEX: index,
                PARENT_ID: parsed.id,
                CONTENT_HASH: content_hash,
                HEADINGS: list(chunk.heading_path),
                CHUNKER: self._fingerprint,
                SECTION_INDEX: chunk.section_index,
                SECTION_START: chunk.start,
                SECTION_END: chunk.end,
            }
            page = parsed.sections[chunk.section_index].page if parsed.sections else None
            if page is not None:
                metadata[PAGE] = page
            if language is not None:
                metadata[LANGUAGE] = language
            yield Document(id=f"{parsed.source_uri}#{index}", content=chunk.text, metadata=metadata)

    async def _compare(
        self, documents: list[Document], sentinels: list[str], *, scope: Filter, stale: Filter
    ) -> tuple[bool, bool]:
        """Whether every store already holds exactly ``documents``, and whether one may hold more.

        A store with ``get`` is probed by id (an index lookup in every backend): unchanged means each
        chunk is stored with the same text, hash and chunker, and no chunk exists past the last one. A
        store without ``get`` counts the chunks under ``scope``, and the ``stale`` ones, by filter.
        """
        unchanged, longer_before = True, False
        for store in self._stores:
            if isinstance(store, SupportsGet):
                probe = [doc.id for doc in documents] + sentinels
                stored: dict[str, Document] = {}
                for start in range(0, len(probe), _ID_BATCH):
                    for doc in await store.get(ids=probe[start : start + _ID_BATCH]):
                        stored[doc.id] = doc
                if any(sentinel in stored for sentinel in sentinels):
                    unchanged, longer_before = False, True
                elif unchanged:
                    unchanged = all(_same_chunk(stored.get(doc.id), doc) for doc in documents)
            else:
                count = await store.count(filter=scope)
                if count > len(documents) or await store.count(filter=stale):
                    unchanged, longer_before = False, True
                elif count != len(documents):
                    unchanged = False
        return unchanged, longer_before

    # --------------------------------------------------------------------------------------- writing

    async def _flush(self, state: _Run, send: MemoryObjectSendStream[_Batch]) -> None:
        """Embed the pending chunks and queue them, with the files they complete, for the writer."""
        documents = tuple(state.pending)
        completed = tuple(state.completed)
        state.pending.clear()
        state.completed.clear()
        if not documents and not completed:
            return
        embeddings = await self._embed(documents, state) if documents else None
        if embeddings is not None and len(documents):
            zero = int(np.count_nonzero(~np.asarray(embeddings).any(axis=1)))
            if zero:
                state.zero_vectors += zero
                logger.warning(
                    "ingestion: %d of %d chunks embedded to the zero vector (none of their words is in the "
                    "embedder's vocabulary): only BM25 can find them", zero, len(documents),
                )
        if self._language is not None or self._detector is not None:
            for doc in documents:
                key = doc.metadata.get(LANGUAGE) or ""
                state.languages[key] = state.languages.get(key, 0) + 1
        await send.send(_Batch(documents=documents, embeddings=embeddings, completed=completed))

    async def _embed(self, documents: Sequence[Document], state: _Run) -> np.ndarray:
        """Embed ``documents``; a batch larger than :data:`_EMBED_SLICE` (one large file's chunks travel in one
        batch) is embedded slice by slice, so the progress bar's chunk count moves during a large file, and
        only one slice's embedded texts (title and chunk) exist at a time."""
        step = max(self._batch_size, _EMBED_SLICE)
        parts = []
        for start in range(0, len(documents), step):
            texts = [_embedding_text(document) for document in documents[start : start + step]]
            parts.append(await self._embedder.embed_documents(texts))
            if state.bar is not None:
                state.bar.chunks_embedded(len(parts[-1]))
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)

    async def _write_batches(self, receive: MemoryObjectReceiveStream[_Batch], state: _Run) -> None:
        async with receive:
            async for batch in receive:
                await self._write(batch, state)

    async def _write(self, batch: _Batch, state: _Run) -> None:
        """Upsert a batch into every store, then drop stale chunks of the files it completes."""
        if batch.documents:
            documents = list(batch.documents)
            if self._lexical_store is None:
                await self._vector_store.upsert(documents, embeddings=batch.embeddings)
            else:
                async with anyio.create_task_group() as group:
                    group.start_soon(partial(self._vector_store.upsert, documents, embeddings=batch.embeddings))
                    group.start_soon(partial(self._lexical_store.upsert, documents))
            state.chunks_written += len(documents)
        for stale in batch.completed:
            for store in self._stores:
                await store.delete(filter=stale)

    async def _prune(self, state: _Run) -> None:
        doomed = await self._stale_sources(state)
        ids = sorted(doomed)
        for start in range(0, len(ids), _ID_BATCH):
            batch = ids[start : start + _ID_BATCH]
            for store in self._stores:
                await store.delete(ids=batch)
        state.files_pruned = len(set(doomed.values()))
        if self._sections is not None and doomed:
            await self._sections.delete(source_uris=sorted(set(doomed.values())))

    async def _stale_sources(self, state: _Run) -> dict[str, str]:
        """Chunk id -> source_uri of every stored chunk, written by an ingestion pipeline, whose source lies
        under this run's roots but was not seen by it (its file was deleted or is no longer indexable)."""
        doomed: dict[str, str] = {}
        for store in self._stores:
            if not isinstance(store, SupportsGet):
                continue
            for doc in await store.get():
                uri = doc.metadata.get(SOURCE_URI)
                if CONTENT_HASH not in doc.metadata or not isinstance(uri, str):
                    continue  # not written by an ingestion pipeline
                if uri in state.kept_uris or any(uri.startswith(p) for p in state.kept_prefixes):
                    continue
                if not _under_roots(uri, state):
                    continue  # outside the files and folders of this run
                doomed[doc.id] = uri
        return doomed


class _ChunksColumn(ProgressColumn):
    """Chunks embedded so far and their rate: ``1,234 chunks (56/s)``."""

    def render(self, task: Task) -> Text:
        chunks = int(task.fields.get("chunks", 0))
        elapsed = task.elapsed or 0.0
        rate = f" ({chunks / elapsed:,.0f}/s)" if elapsed > 0 and chunks else ""
        return Text(f"{chunks:,} chunks{rate}", style="progress.data.speed", no_wrap=True)


class _ProgressBar:
    """A :mod:`rich` progress bar on stderr: bytes read (with rate and ETA), files done, chunks embedded
    (with rate; it moves within a large file too). Every method is a no-op when progress is off."""

    def __init__(self, show: bool | None, *, files: int, total_bytes: int) -> None:
        if show is None:
            show = sys.stderr.isatty()
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._files, self._done, self._chunks = files, 0, 0
        if show:
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                TextColumn("{task.fields[done]}/{task.fields[files]} files"),
                _ChunksColumn(),
                TimeRemainingColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
            )
            self._task = self._progress.add_task("Indexing", total=total_bytes, done=0, files=files, chunks=0)

    def __enter__(self) -> _ProgressBar:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def describe(self, description: str) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, description=description)

    def file_done(self, size: int) -> None:
        """One more file handled (indexed, unchanged, skipped or failed): ``size`` bytes at discovery."""
        self._done += 1
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, advance=size, done=self._done)

    def chunks_embedded(self, count: int) -> None:
        self._chunks += count
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, chunks=self._chunks)


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


def _root_cause(group: BaseExceptionGroup) -> BaseException:
    """The error that failed the run, out of the task group's: the store's or embedder's own error, not the
    ``BrokenResourceError`` the producer then gets from the writer's closed queue (issue 13.4), nor a
    cancellation; else the first."""
    leaves = _leaves(group)
    secondary = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.get_cancelled_exc_class())
    return next((e for e in leaves if isinstance(e, FastragError)), None) or next(
        (e for e in leaves if not isinstance(e, secondary)), leaves[0]
    )


def _ellipsize(text: str, width: int = 40) -> str:
    return text if len(text) <= width else "…" + text[-(width - 1) :]


def _same_chunk(stored: Document | None, new: Document) -> bool:
    return (
        stored is not None
        and stored.content == new.content
        and all(stored.metadata.get(key) == new.metadata[key] for key in (CONTENT_HASH, CHUNKER))
        and stored.metadata.get(LANGUAGE) == new.metadata.get(LANGUAGE)
    )


def _by_source(documents: list[Document]) -> list[list[Document]]:
    """Consecutive chunks grouped by ``source_uri`` (one group per file, or per BEIR corpus document)."""
    groups: list[list[Document]] = []
    for document in documents:
        if groups and groups[-1][0].metadata.get(SOURCE_URI) == document.metadata.get(SOURCE_URI):
            groups[-1].append(document)
        else:
            groups.append([document])
    return groups


def _embedding_text(document: Document) -> str:
    title = document.metadata.get(TITLE) or ""
    return f"{title}\n{document.content}" if title else document.content


def _under_roots(uri: str, state: _Run) -> bool:
    """Whether a stored ``source_uri`` names a file under one of this run's roots (compared as absolute paths)."""
    absolute = uri if uri.startswith("/") else f"{Path.cwd().resolve().as_posix()}/{uri}"
    if any(absolute.startswith(prefix) for prefix in state.root_prefixes):
        return True
    return any(absolute == root or absolute.startswith(root + "#") for root in state.root_uris)


class _TextStream:
    """The chunk documents of a plain-text file read block by block, as :meth:`IngestionPipeline._stream_text`
    cuts them; ``content_hash`` is the hash of the bytes read, complete once the iteration ends."""

    def __init__(self, pipeline: IngestionPipeline, source: Source, content_hash: str, language: str | None,
                 *, cut: bool) -> None:
        self._hasher = hashlib.sha256()
        self._head: list[str] = []
        self._wanted = _DETECT_CHARS
        self._title = PurePath(source.source_uri).stem
        uri = source.source_uri
        parsed = ParsedDocument(source_uri=uri, title=self._title, sections=())

        def hashed() -> Iterator[bytes]:
            for block in read_blocks(source, max_file_bytes=pipeline._max_file_bytes):
                self._hasher.update(block)
                yield block

        def body() -> Iterator[str]:  # the text without its leading whitespace, as parse_text strips it
            started = False
            for piece in iter_text(hashed(), source=uri):
                if not started:
                    piece = piece.lstrip()
                    if not piece:
                        continue
                    started = True
                if self._wanted > 0:
                    self._head.append(piece[: self._wanted])
                    self._wanted -= len(self._head[-1])
                yield piece

        if cut:
            chunks = pipeline._chunker.chunk_stream(body())
            self._documents: Iterator[Document] = pipeline._iter_documents(parsed, chunks, content_hash, language)
        else:
            self._documents = (None for _ in body())  # type: ignore[misc]

    @property
    def content_hash(self) -> str:
        return self._hasher.hexdigest()

    def detection_text(self) -> str:
        start = "".join(self._head).rstrip() if self._wanted > 0 else "".join(self._head)
        return f"{self._title}\n{start}" if start else self._title

    def __iter__(self) -> Iterator[Document]:
        return self._documents

    def __next__(self) -> Document:
        return next(self._documents)


def _take(stream: _TextStream, count: int) -> list[Document]:
    """Up to ``count`` more documents of ``stream`` (runs in a worker thread)."""
    out: list[Document] = []
    for document in stream._documents:
        out.append(document)
        if len(out) >= count:
            break
    return out
