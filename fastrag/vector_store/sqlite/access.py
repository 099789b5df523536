"""How the SQLite store's file is opened: read-write, or read-only when this process cannot write it.

A store on a read-only file system (a ``mount -o ro`` volume, a read-only container layer), or whose file
or folder this user may not write, opens for reading (issue 26). SQLite's WAL journal makes that subtle
(https://www.sqlite.org/wal.html, "Read-Only Databases"): even a reader needs the WAL index
(``<file>-shm``) beside the file, and creates it when it is missing, which needs write access to the
folder. So, in order:

1. ``read-only``: the file opened with SQLite's ``mode=ro``. It works when ``-shm`` and ``-wal`` exist
   (a writer elsewhere holds the store open, or stopped without closing it) or can be created; it sees
   what other processes commit, as any reader does.
2. ``immutable``: when they neither exist nor can be created (the last connection closed cleanly, which
   deletes them, then the folder became read-only), and no ``-wal`` file holds commits, the file alone is
   the whole store: it is opened with ``immutable=1``, without locks or a WAL index. It then reads the
   file as it was when opened: a process writing it later (through another mount) is not seen, and one
   that checkpoints into it while a search reads may make that search fail.
3. A ``-wal`` file holding commits that SQLite cannot read without creating ``-shm``: the store cannot be
   opened (its newest commits would be missing), and the error says how to fix it.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from fastrag.errors import BackendUnavailableError

__all__ = ["READ_WRITE", "Access", "choose", "unwritable"]

_CANTOPEN = 14  # SQLITE_CANTOPEN (primary result code)


@dataclass(frozen=True)
class Access:
    """How one store's connections open its file.

    Attributes:
        mode: ``"read-write"``, ``"read-only"`` or ``"immutable"`` (see the module docstring).
        target: what :func:`sqlite3.connect` opens: the path itself, or a ``file:`` URI.
        uri: whether ``target`` is a URI.
        reason: why the store is not writable (``None`` for ``"read-write"``).
    """

    mode: str
    target: str
    uri: bool = False
    reason: str | None = None

    @property
    def read_only(self) -> bool:
        return self.mode != "read-write"


READ_WRITE = Access("read-write", "")


def _read_only_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def unwritable(path: str) -> str | None:
    """Why this process cannot write the SQLite store at ``path``, or ``None`` when it can.

    A store in WAL mode is written through three files: ``path``, ``path-wal`` and ``path-shm``. It is
    writable when the file is (or, missing, can be created) and the other two either exist writable or
    can be created in its folder. ``os.access`` answers for this process's user (root passes permission
    bits, never a read-only file system).
    """
    file = Path(path)
    folder = file.parent if str(file.parent) else Path(".")
    while not folder.exists() and folder != folder.parent:  # the store's folders are created on first open
        folder = folder.parent
    if _read_only_fs(folder):
        return f"its folder {folder} is on a read-only file system"
    if file.exists() and not os.access(file, os.W_OK):
        return f"this user may not write the file {file}"
    if os.access(folder, os.W_OK):
        return None
    beside = [Path(f"{file}-wal"), Path(f"{file}-shm")]
    if file.exists() and all(p.exists() and os.access(p, os.W_OK) for p in beside):
        return None
    return (f"this user may not write the folder {folder}, where SQLite keeps the store's journal "
            f"({file.name}-wal, {file.name}-shm)")  # fmt: skip


def _uri(path: str, query: str) -> str:
    return f"file:{quote(os.path.abspath(path))}?{query}"


def choose(path: str, *, read_only: bool | None) -> Access:
    """How to open the store at ``path``: read-write when this process can write it and ``read_only`` is
    not true; otherwise read-only, or immutable (module docstring), probing the file once.

    Raises:
        BackendUnavailableError: ``read_only=False`` and the store is not writable; or no store exists at
            ``path`` and none can be created there; or its ``-wal`` file holds commits that cannot be read
            without write access to the folder.
    """
    reason = unwritable(path)
    if reason is None and read_only is not True:
        return Access("read-write", path)
    if reason is not None and read_only is False:
        raise BackendUnavailableError(f"cannot open the SQLite store for writing (read_only=False): {reason}", store=path)
    why = reason or "opened with read_only=True"
    if not Path(path).is_file():
        raise BackendUnavailableError(
            f"there is no store at {path}, and it cannot be created: {why}",
            store=path,
        )
    access = Access("read-only", _uri(path, "mode=ro"), uri=True, reason=why)
    try:
        probe = sqlite3.connect(access.target, uri=True)
        try:
            probe.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens -wal and -shm, if it can
        finally:
            probe.close()
        return access
    except sqlite3.OperationalError as exc:
        if getattr(exc, "sqlite_errorcode", 0) & 0xFF != _CANTOPEN:
            raise BackendUnavailableError(f"cannot open the SQLite store read-only ({why}): {exc}", store=path) from exc
        wal = Path(f"{path}-wal")
        if wal.is_file() and wal.stat().st_size > 0:
            raise BackendUnavailableError(
                f"the store cannot be opened read-only ({why}): its newest commits are in {wal.name}, which SQLite "
                f"reads only through {Path(path).name}-shm, and that file is missing and cannot be created here; "
                "open the store once where it is writable (closing it folds the journal into the file), or copy "
                "the three files to a writable folder",
                store=path,
            ) from exc
    return Access("immutable", _uri(path, "mode=ro&immutable=1"), uri=True, reason=why)

