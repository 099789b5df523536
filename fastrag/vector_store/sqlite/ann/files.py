"""The ANN index files: atomic saves, the stamp saved with an index, and what interrupted saves leave behind.

A save writes the index to a temporary file in the target's folder, named ``.<target name>.<32 hex>.tmp``,
fsyncs it and renames it over the target, so a reader of the target sees the old file or the new one,
never a partial one.

**The stamp.** An owner may save a short text with the index (the SQLite store saves which state of its
database the index covers, :mod:`fastrag.vector_store.sqlite.schema`). It is appended after faiss's own
bytes as ``<stamp, UTF-8> <its length, 8 bytes little-endian> FRSTAMP1``; faiss reads an index from the
front of a file and ignores what follows it (checked for ``read_index`` with and without memory mapping,
faiss-cpu 1.15), so the file stays an ordinary faiss index. :func:`read_stamp` reads it back, ``None`` for
a file saved without one (or before stamps existed).

**Interrupted saves.** A process killed during a save (SIGKILL, a power cut) leaves its temporary file.
While it writes, a saving process holds an exclusive ``flock`` on its temporary file, which the kernel
releases when the process dies however it dies. :func:`remove_abandoned` removes the temporary files of a
target whose lock it can take, that is, those no live process is writing: never another process's save in
progress, however long it takes (no age rule). A writer that finds its freshly created file removed
before it took the lock (a cleaner got there first) starts again under a new name. Limits: ``flock`` must
work on the file system (local file systems do; Linux maps it to POSIX locks on NFS); a temporary file
written by a fastrag version from before these locks is never locked, so one such save in progress while
a newer version opens the store would be removed (its save then fails and is retried later). Without
``fcntl`` (Windows) nothing is removed.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO

from fastrag.errors import BackendUnavailableError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["read_stamp", "remove_abandoned", "save_atomically", "stamp_of", "temporary_pattern"]

_MAGIC = b"FRSTAMP1"
_LENGTH_BYTES = 8
_MAX_STAMP = 1 << 20  # a stamp is a few hundred bytes; anything larger is not one
_TMP = r"\.[0-9a-f]{32}\.tmp"


def temporary_pattern(target_name: str) -> str:
    """The regular expression (for ``re.fullmatch``) of the temporary files a save of ``target_name`` writes:
    ``\\.<target name>\\.<32 hex>\\.tmp``. ``target_name`` is itself a regular expression."""
    return r"\." + target_name + _TMP


def save_atomically(write: Callable[[str], None], path: str | os.PathLike[str], *, stamp: str | None = None) -> None:
    """Save an index to ``path`` atomically: ``write(temporary path)`` writes it (faiss's ``write_index``),
    then the stamp is appended, the file fsynced and renamed over ``path``, and the folder fsynced.

    The temporary file is locked (``flock``) from its creation until it is renamed, so
    :func:`remove_abandoned` never removes it while this runs; on any failure it is removed here.

    Args:
        write: writes the index to the path it is given (it may raise ``OSError`` or ``RuntimeError``).
        path: the target file.
        stamp: text saved after the index (see the module docstring); ``None``: none.

    Raises:
        BackendUnavailableError: the file cannot be written (the folder is missing, read-only, full).
    """
    target = Path(path)
    fd, tmp = -1, None
    try:
        fd, tmp = _create_locked(target)
        write(str(tmp))
        if stamp is not None:
            data = stamp.encode("utf-8")
            with open(tmp, "ab") as fh:
                fh.write(data + len(data).to_bytes(_LENGTH_BYTES, "little") + _MAGIC)
        if fd >= 0:
            os.fsync(fd)  # the same inode faiss wrote: fsync flushes the file, whichever descriptor asks
        else:
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, target)
        tmp = None
        with contextlib.suppress(OSError):  # make the rename durable where the platform allows
            dir_fd = os.open(target.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
    except (OSError, RuntimeError) as exc:
        raise BackendUnavailableError(f"cannot write the ANN index {os.fspath(path)!r}: {exc}") from exc
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()
        if fd >= 0:
            os.close(fd)  # releases the lock, after the rename (or the removal)


def _create_locked(target: Path) -> tuple[int, Path]:
    """A new temporary file beside ``target``, created and locked by this process: ``(descriptor, path)``
    (without ``fcntl``: created, not locked, descriptor -1)."""
    for _ in range(5):
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        if fcntl is None:  # no lock to hold (and Windows cannot rename a file held open)
            os.close(fd)
            return -1, tmp
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # waits only while a cleaner looks at it
            held = os.fstat(fd)
            now = os.stat(tmp)
            if (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):
                return fd, tmp
        except FileNotFoundError:
            pass  # a cleaner removed it between our creating and locking it: try another name
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        os.close(fd)
    raise OSError(f"cannot create a temporary file beside {os.fspath(target)!r}: removed five times before it was locked")


def read_stamp(path: str | os.PathLike[str]) -> str | None:
    """The stamp saved with the index in ``path``; ``None`` when it was saved without one (or the stamp is
    damaged: not UTF-8, a length past the file).

    Raises:
        BackendUnavailableError: the file cannot be read.
    """
    try:
        with open(path, "rb") as fh:
            return stamp_of(fh)
    except OSError as exc:
        raise BackendUnavailableError(f"cannot read the ANN index {os.fspath(path)!r}: {exc}") from exc


def stamp_of(fh: IO[bytes]) -> str | None:
    """As :func:`read_stamp`, from an open file (its position is left anywhere). Raises ``OSError``."""
    size = fh.seek(0, os.SEEK_END)
    tail = len(_MAGIC) + _LENGTH_BYTES
    if size < tail:
        return None
    fh.seek(size - tail)
    footer = fh.read(tail)
    if footer[_LENGTH_BYTES:] != _MAGIC:
        return None
    length = int.from_bytes(footer[:_LENGTH_BYTES], "little")
    if length > min(_MAX_STAMP, size - tail):
        return None
    fh.seek(size - tail - length)
    try:
        return fh.read(length).decode("utf-8")
    except UnicodeDecodeError:
        return None


def remove_abandoned(folder: str | os.PathLike[str], target_name: str) -> list[str]:
    """Remove the temporary files that interrupted saves of ``target_name`` left in ``folder``.

    Only regular files named as :func:`temporary_pattern` says are considered, and of those only the ones
    whose ``flock`` can be taken at once (no live process is writing them; see the module docstring).

    Args:
        folder: the folder of the target.
        target_name: a regular expression of the target's file name (``re.escape`` a literal name).

    Returns:
        The names removed. Failures to list or remove (permissions, a file gone meanwhile) are skipped:
        this is housekeeping, never a reason for an open to fail.
    """
    if fcntl is None:  # pragma: no cover - Windows: no way to tell a live save from an abandoned one
        return []
    pattern = re.compile(temporary_pattern(target_name))
    try:
        entries = os.listdir(folder)
    except OSError:
        return []
    removed = []
    for entry in entries:
        if not pattern.fullmatch(entry):
            continue
        path = os.path.join(folder, entry)
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                continue
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a live save holds it
            held, now = os.fstat(fd), os.lstat(path)
            if (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):  # still the file we locked
                os.unlink(path)
                removed.append(entry)
        except OSError:
            continue
        finally:
            os.close(fd)
    return removed
