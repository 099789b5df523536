"""What both ANN indexes share: faiss imported on first use, a readers-writer lock, key checks, exact top-k
and atomic, stamped saves (:mod:`fastrag.vector_store.sqlite.ann.files`).

The module is private to :mod:`fastrag.vector_store.sqlite.ann` (its name starts with ``_``); its names are
public so that :mod:`~fastrag.vector_store.sqlite.ann.hnsw` and :mod:`~fastrag.vector_store.sqlite.ann.pq`
import them as shared helpers rather than as another module's private names."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import IO, Any

import numpy as np

from fastrag.errors import ConfigurationError, InvalidParameterError
from fastrag.vector_store.sqlite.ann import files

_INSTALL_HINT = 'the SQLite store\'s ANN index needs faiss: pip install "fastrag-retrieval[ann]"'
INDEX_NAME = "ANN index"
"""How the checks of :mod:`fastrag.vector_store._validation` name an ANN index in their errors."""


def import_faiss() -> Any:
    """The ``faiss`` module, imported on first use.

    Raises:
        ConfigurationError: faiss (``faiss-cpu``) is not installed; the message names the pip command.
    """
    try:
        import faiss
    except ImportError as exc:
        raise ConfigurationError(_INSTALL_HINT) from exc
    return faiss


class ReadWriteLock:
    """Many readers or one writer; a waiting writer holds back new readers, so it cannot starve."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writing = False
        self._writers_waiting = 0

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Hold the read side for the ``with`` block (blocks while a writer holds or waits for the lock)."""
        with self._cond:
            while self._writing or self._writers_waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the write side for the ``with`` block (blocks until no reader or writer holds the lock)."""
        with self._cond:
            self._writers_waiting += 1
            try:
                while self._writing or self._readers:
                    self._cond.wait()
            finally:
                self._writers_waiting -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()


def best_k(keys: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best of ``keys`` by ``scores``, best first: int64 keys and float32 scores."""
    if len(keys) > k:
        top = np.argpartition(-scores, k - 1)[:k]
        keys, scores = keys[top], scores[top]
    order = np.argsort(-scores, kind="stable")
    return keys[order].astype(np.int64), scores[order].astype(np.float32)


def removal_keys(keys: Any) -> np.ndarray:
    """``keys`` to remove as int64 (any integers; those not in an index are ignored by the caller).

    Raises:
        InvalidParameterError: ``keys`` is not a 1-D integer array.
    """
    arr = np.asarray(keys)
    if arr.ndim != 1 or (len(arr) and not np.issubdtype(arr.dtype, np.integer)):
        raise InvalidParameterError(f"keys must be a 1-D integer array, got {arr.dtype} {arr.shape}")
    return arr.astype(np.int64, copy=False)


def check_keys(keys: Any) -> np.ndarray:
    """``keys`` as a 1-D int64 array of distinct non-negative values.

    Raises:
        InvalidParameterError: not 1-D, a non-integer dtype, a negative key, a repeat.
    """
    arr = np.asarray(keys)
    n = len(arr) if arr.ndim == 1 else -1
    if arr.ndim != 1:
        raise InvalidParameterError(f"keys must be a 1-D array of rowids, got shape {arr.shape}")
    if n and not np.issubdtype(arr.dtype, np.integer):
        raise InvalidParameterError(f"keys must be integers (rowids), got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if n and arr.min() < 0:
        raise InvalidParameterError("keys must be non-negative (rowids)")
    if len(np.unique(arr)) != n:
        raise InvalidParameterError("keys must be distinct")
    return arr


def save_index_atomically(index: Any, lock: ReadWriteLock, path: str | os.PathLike[str], stamp: str | None) -> None:
    """Write a faiss ``index`` and its ``stamp`` to ``path`` atomically
    (:func:`fastrag.vector_store.sqlite.ann.files.save_atomically`), holding the read side of ``lock`` while
    faiss writes.

    Raises:
        BackendUnavailableError: the file cannot be written.
    """
    faiss = import_faiss()

    def write(tmp: str) -> None:
        with lock.reading():
            faiss.write_index(index, tmp)

    files.save_atomically(write, path, stamp=stamp)


def read_index(path: str | os.PathLike[str], *, mmap: bool) -> tuple[Any, str | None, IO[bytes] | None]:
    """``(index, stamp, source)`` read from one file: the faiss index (its flat vectors memory-mapped when
    ``mmap``), the stamp saved with it, and, when ``mmap``, the open file the map views (so a later change
    reads the very file the map shows: a save by someone else replaces the name, not this inode); else
    ``None``. The index and the stamp come from the same file even while another process replaces it.

    Raises:
        OSError, RuntimeError: the file cannot be read or is not a faiss index (the caller wraps them).
    """
    faiss = import_faiss()
    for _ in range(3):
        source = open(path, "rb")  # noqa: SIM115 (returned open when mmap)
        try:
            stamp = files.stamp_of(source)
            index = faiss.read_index(os.fspath(path), faiss.IO_FLAG_MMAP_IFC if mmap else 0)
            held, now = os.fstat(source.fileno()), os.stat(path)
        except BaseException:
            source.close()
            raise
        if (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):
            if mmap:
                return index, stamp, source
            source.close()
            return index, stamp, None
        source.close()
    raise OSError("the file was replaced three times while it was being opened")
