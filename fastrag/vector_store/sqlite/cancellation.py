"""Stopping a read whose caller gave up: the deadline of a cancelled call holds inside the worker thread.

A read runs in a worker thread (``anyio.to_thread.run_sync``), which anyio cannot stop from outside: a
``branch_timeout`` or cancel scope would otherwise wait for the whole read. Two hooks make the thread stop
itself soon after its caller was cancelled, without ever abandoning a connection mid-transaction:

- every connection has a SQLite progress handler (:func:`install`), called every
  :data:`PROGRESS_STEPS` virtual-machine steps; during a read it asks anyio whether the calling task's
  cancel scope was cancelled (``anyio.from_thread.check_cancelled``) and, if so, makes SQLite abort the
  statement (``sqlite3.OperationalError: interrupted``), which the store turns into the cancellation;
- Python loops over many documents (filter evaluation) call :func:`checkpoint` every
  :data:`CHECK_EVERY` items.

Only reads are interrupted (a thread-local flag set by :func:`reading`): a write always finishes its
transaction, and so does a step that extends a cache shared by every read (:func:`uninterrupted`: the
in-memory snapshot is appended to in place). Outside an anyio worker thread (a synchronous caller) both hooks do nothing.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import anyio.from_thread

__all__ = [
    "CHECK_EVERY",
    "PROGRESS_STEPS",
    "checked",
    "checkpoint",
    "install",
    "is_interrupt",
    "raise_if_cancelled",
    "reading",
    "uninterrupted",
]

T = TypeVar("T")

PROGRESS_STEPS = 20_000
"""SQLite virtual-machine instructions between two checks (a few hundred microseconds of work)."""
CHECK_EVERY = 256
"""Items a Python loop handles between two checks."""

_state = threading.local()


@contextmanager
def reading() -> Iterator[None]:
    """Mark this thread's work, until the block ends, as a read that may be interrupted."""
    previous = getattr(_state, "reading", False)
    _state.reading = True
    try:
        yield
    finally:
        _state.reading = previous


@contextmanager
def uninterrupted() -> Iterator[None]:
    """Within a read, a step that must finish whole once begun (it extends a cache other reads share)."""
    previous = getattr(_state, "reading", False)
    _state.reading = False
    try:
        yield
    finally:
        _state.reading = previous


def _cancelled() -> bool:
    if not getattr(_state, "reading", False):
        return False
    try:
        anyio.from_thread.check_cancelled()
    except RuntimeError:  # not an anyio worker thread (NoEventLoopError is a RuntimeError)
        return False
    except BaseException:  # noqa: BLE001 - the backend's cancellation exception
        return True
    return False


def checkpoint() -> None:
    """Raise the calling task's cancellation here if this read's caller was cancelled (else nothing)."""
    if _cancelled():
        anyio.from_thread.check_cancelled()  # raises it


def raise_if_cancelled() -> None:
    """After SQLite said "interrupted": raise the caller's cancellation (a read or not), if it was cancelled."""
    try:
        anyio.from_thread.check_cancelled()
    except RuntimeError:  # not an anyio worker thread: the interrupt came from elsewhere
        return


def checked(items: Iterable[T]) -> Iterator[T]:
    """``items``, with a :func:`checkpoint` every :data:`CHECK_EVERY` of them."""
    for i, item in enumerate(items):
        if i % CHECK_EVERY == CHECK_EVERY - 1:
            checkpoint()
        yield item


def _progress() -> int:
    return 1 if _cancelled() else 0  # non-zero: SQLite aborts the statement ("interrupted")


def install(conn: sqlite3.Connection) -> None:
    """Give ``conn`` the progress handler that interrupts a cancelled read."""
    conn.set_progress_handler(_progress, PROGRESS_STEPS)


def is_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's answer to the progress handler's abort."""
    return isinstance(exc, sqlite3.OperationalError) and "interrupted" in str(exc)
