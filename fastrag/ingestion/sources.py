"""Finding the files to index under the paths given, and reading them safely.

Only regular files are read. A path that is a FIFO, a socket or a device (directly or through a symlink, as
a link to ``/dev/zero`` or ``/dev/urandom`` is), a symlink loop, a broken symlink, a symlink to a folder
(folders are walked without following links), a file of an unsupported type and a file larger than the size
limit are *skipped*, each with the reason in words (:class:`SkippedFile`); the others are still indexed.
Files are opened non-blocking and checked again on the open descriptor, so a file swapped for a FIFO after
the walk cannot hang the run, and at most ``max_file_bytes + 1`` bytes are ever read from one file.

File names that are not valid UTF-8 (possible on POSIX file systems) are indexed under a ``source_uri`` in
which each undecodable byte is written ``\\xNN`` (``caf\\xe9.md``), so every stored text stays valid Unicode;
reports name them the same way.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from fastrag.errors import IngestionError
from fastrag.ingestion.parsers import BEIR_CORPUS_NAME, FILE_SUFFIXES, FileKind, file_kind

__all__ = ["DEFAULT_MAX_FILE_BYTES", "SkippedFile", "printable_path", "source_uri_of"]

DEFAULT_MAX_FILE_BYTES = 100 * 1024 * 1024
"""The default size limit of one file, in bytes (100 MiB); a larger file is skipped with the reason."""

_SUPPORTED = f"{', '.join(FILE_SUFFIXES)} and BEIR {BEIR_CORPUS_NAME}"  # what file_kind() accepts, for skip reasons


@dataclass(frozen=True, slots=True)
class SkippedFile:
    """A path found but not indexed, and why.

    Attributes:
        path: the path as found (non-UTF-8 bytes of its name written ``\\xNN``).
        reason: why it was skipped, in words (``"a FIFO (named pipe), not a regular file"``,
            ``"symlink loop"``, ``"unsupported file type '.csv' (indexed: ...)"``, ...).
    """

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class SkipFile(Exception):
    """Raised while reading a source that turns out not to be indexable (the message is the reason)."""


@dataclass(frozen=True, slots=True)
class Source:
    """A regular file to index, as found by :func:`discover`."""

    path: Path
    source_uri: str
    kind: FileKind
    size: int  # bytes, at discovery


@dataclass(slots=True)
class Discovery:
    """What :func:`discover` found under the paths of one run."""

    sources: list[Source] = field(default_factory=list)
    skipped: list[SkippedFile] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # paths given that do not exist
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (folder, why) that could not be listed
    # the roots, as absolute paths (folders end with "/"): prune looks only under them
    root_prefixes: set[str] = field(default_factory=set)
    root_uris: set[str] = field(default_factory=set)


def printable_path(path: str | os.PathLike[str]) -> str:
    """``path`` as valid Unicode text: bytes of a name that are not UTF-8 become ``\\xNN``."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def source_uri_of(path: Path) -> str:
    """A file's ``source_uri``: its path relative to the working directory when under it, else absolute,
    with ``/`` separators (a symlink is resolved to its target); see :func:`printable_path`."""
    resolved = path.resolve()
    try:
        uri = resolved.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        uri = resolved.as_posix()
    return printable_path(uri)


def discover(paths: list[Path], *, max_file_bytes: int) -> Discovery:
    """The indexable files under ``paths``, in walk order, and every path skipped with its reason.

    Folders are walked in sorted order without following symlinks, skipping hidden files and folders
    (names starting with ``.``). A file named twice (a folder and a file in it) is listed once.
    """
    found = Discovery()
    seen: set[tuple[int, int]] = set()

    def consider(path: Path) -> None:
        try:
            info = os.stat(path)
        except OSError as exc:
            found.skipped.append(SkippedFile(printable_path(path), _stat_failure(path, exc)))
            return
        if not stat.S_ISREG(info.st_mode):
            found.skipped.append(SkippedFile(printable_path(path), _not_regular(path, info.st_mode)))
            return
        if (info.st_dev, info.st_ino) in seen:
            return
        seen.add((info.st_dev, info.st_ino))
        kind = file_kind(path)
        if kind is None:
            found.skipped.append(SkippedFile(printable_path(path), _unsupported(path)))
        elif info.st_size > max_file_bytes:
            found.skipped.append(SkippedFile(printable_path(path), _too_large(info.st_size, max_file_bytes)))
        else:
            found.sources.append(Source(path=path, source_uri=source_uri_of(path), kind=kind, size=info.st_size))

    for root in paths:
        if os.path.isdir(root):
            found.root_prefixes.add(printable_path(root.resolve().as_posix().rstrip("/") + "/"))

            def unlistable(exc: OSError) -> None:
                found.unreadable.append((printable_path(exc.filename or root), exc.strerror or str(exc)))

            for directory, dirnames, filenames in os.walk(root, onerror=unlistable):
                kept = []
                for name in sorted(dirnames):
                    if name.startswith("."):
                        continue
                    if os.path.islink(os.path.join(directory, name)):
                        found.skipped.append(SkippedFile(
                            printable_path(os.path.join(directory, name)),
                            "a symlink to a folder: links are not followed (index the target folder itself)",
                        ))  # fmt: skip
                    else:
                        kept.append(name)
                dirnames[:] = kept
                for name in sorted(filenames):
                    if not name.startswith("."):
                        consider(Path(directory, name))
        elif os.path.lexists(root):
            if os.path.exists(root):
                found.root_uris.add(printable_path(root.resolve().as_posix()))
            consider(root)
        else:
            found.missing.append(printable_path(root))
    return found


def read_source(source: Source, *, max_file_bytes: int) -> bytes:
    """The bytes of ``source``, read only if it is (still) a regular file within the size limit.

    Raises:
        SkipFile: it is no longer a regular file, or is larger than ``max_file_bytes``.
        IngestionError: it cannot be opened or read (the message names it and says why).
    """
    with _open_regular(source, max_file_bytes=max_file_bytes) as handle:
        data = _read(handle, max_file_bytes + 1, source)
    if len(data) > max_file_bytes:
        raise SkipFile(_too_large(len(data), max_file_bytes, at_least=True))
    return data


def read_blocks(source: Source, *, max_file_bytes: int, block_size: int = 1 << 20) -> Iterator[bytes]:
    """The bytes of ``source`` in blocks of at most ``block_size``, read as :func:`read_source` reads them:
    only from a regular file, and never past ``max_file_bytes`` (a file that grows past it while being read
    raises on the block that crosses the limit). The file is closed when the iteration ends or is dropped.

    Raises:
        SkipFile: it is no longer a regular file, or is larger than ``max_file_bytes``.
        IngestionError: it cannot be opened or read (the message names it and says why).
    """
    with _open_regular(source, max_file_bytes=max_file_bytes) as handle:
        total = 0
        while block := _read(handle, block_size, source):
            total += len(block)
            if total > max_file_bytes:
                raise SkipFile(_too_large(total, max_file_bytes, at_least=True))
            yield block


def _open_regular(source: Source, *, max_file_bytes: int) -> BinaryIO:
    """``source`` opened non-blocking for reading, checked on the open descriptor to be a regular file within
    the size limit (raises as :func:`read_source`)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    name = printable_path(source.path)
    try:
        fd = os.open(source.path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SkipFile("symlink loop") from exc
        raise IngestionError(f"{name}: cannot read ({exc.strerror or exc})") from exc
    handle = open(fd, "rb", closefd=True)  # noqa: SIM115 - returned to the caller's with-statement
    try:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise SkipFile(_not_regular(source.path, info.st_mode))
        if info.st_size > max_file_bytes:
            raise SkipFile(_too_large(info.st_size, max_file_bytes))
    except OSError as exc:
        handle.close()
        raise IngestionError(f"{name}: cannot read ({exc.strerror or exc})") from exc
    except BaseException:
        handle.close()
        raise
    return handle


def _read(handle: BinaryIO, size: int, source: Source) -> bytes:
    try:
        return handle.read(size)
    except OSError as exc:
        raise IngestionError(f"{printable_path(source.path)}: cannot read ({exc.strerror or exc})") from exc


# ------------------------------------------------------------------------------------------ reasons


def _stat_failure(path: Path, exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "symlink loop"
    if exc.errno == errno.ENOENT and os.path.islink(path):
        return f"broken symlink (its target {printable_path(os.readlink(path))!r} does not exist)"
    return f"cannot read ({exc.strerror or exc})"


def _not_regular(path: Path, mode: int) -> str:
    what = (
        "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
        else "a character device" if stat.S_ISCHR(mode)
        else "a block device" if stat.S_ISBLK(mode)
        else "a socket" if stat.S_ISSOCK(mode)
        else "a folder" if stat.S_ISDIR(mode)
        else "not a regular file"
    )  # fmt: skip
    if os.path.islink(path):
        what = f"a symlink to {printable_path(os.path.realpath(path))}, {what}"
    return what if what.endswith("not a regular file") else f"{what}, not a regular file"


def _unsupported(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return f"unsupported file type '.jsonl' (only a BEIR {BEIR_CORPUS_NAME} is indexed; indexed: {_SUPPORTED})"
    described = f"'{printable_path(suffix)}'" if suffix else "(no extension)"
    return f"unsupported file type {described} (indexed: {_SUPPORTED})"


def _too_large(size: int, limit: int, *, at_least: bool = False) -> str:
    more = "more than " if at_least else ""
    return (
        f"larger than the size limit ({more}{_mb(size)} > {_mb(limit)}; raise it with --max-file-size or "
        "IngestionPipeline(max_file_bytes=...))"
    )


def _mb(size: int) -> str:
    return f"{size / 1_000_000:.1f} MB" if size >= 100_000 else f"{size:,} bytes"
