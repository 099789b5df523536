"""What both ANN indexes share: faiss imported on first use, a readers-writer lock, key checks, exact top-k
and atomic saves."""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from fastrag.errors import BackendUnavailableError, ConfigurationError, InvalidParameterError

_INSTALL_HINT = 'the SQLite store\'s ANN index needs faiss: pip install "fastrag-retrieval[ann]"'
_WHAT = "ANN index"


def _faiss() -> Any:
    """The ``faiss`` module, imported on first use.

    Raises:
        ConfigurationError: faiss (``faiss-cpu``) is not installed; the message names the pip command.
    """
    try:
        import faiss
    except ImportError as exc:
        raise ConfigurationError(_INSTALL_HINT) from exc
    return faiss


class _ReadWriteLock:
    """Many readers or one writer; a waiting writer holds back new readers, so it cannot starve."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writing = False
        self._writers_waiting = 0

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
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


def _best(keys: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best of ``keys`` by ``scores``, best first: int64 keys and float32 scores."""
    if len(keys) > k:
        top = np.argpartition(-scores, k - 1)[:k]
        keys, scores = keys[top], scores[top]
    order = np.argsort(-scores, kind="stable")
    return keys[order].astype(np.int64), scores[order].astype(np.float32)


def _removal_keys(keys: Any) -> np.ndarray:
    """``keys`` to remove as int64 (any integers; those not in an index are ignored by the caller).

    Raises:
        InvalidParameterError: ``keys`` is not a 1-D integer array.
    """
    arr = np.asarray(keys)
    if arr.ndim != 1 or (len(arr) and not np.issubdtype(arr.dtype, np.integer)):
        raise InvalidParameterError(f"keys must be a 1-D integer array, got {arr.dtype} {arr.shape}")
    return arr.astype(np.int64, copy=False)


def _check_keys(keys: Any) -> np.ndarray:
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


def _save_atomically(index: Any, lock: _ReadWriteLock, path: str | os.PathLike[str]) -> None:
    """Write a faiss ``index`` to ``path`` via a temporary file in the same folder, fsync and rename, holding
    the read side of ``lock`` while faiss writes.

    Raises:
        BackendUnavailableError: the file cannot be written.
    """
    faiss = _faiss()
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        with lock.reading():
            faiss.write_index(index, str(tmp))
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
        with contextlib.suppress(OSError):  # make the rename durable where the platform allows
            dir_fd = os.open(target.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
    except (OSError, RuntimeError) as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise BackendUnavailableError(f"cannot write the ANN index {os.fspath(path)!r}: {exc}") from exc

