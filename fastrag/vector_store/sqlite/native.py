"""The native BM25 core of the SQLite store, when the install built it, and the reason when it did not.

The core (``native/bm25_core.cpp``, a pybind11 extension compiled into this package by the install's build
hook, ``hatch_build.py``) scores a query's postings with block-max MaxScore into a top-k heap, with the
GIL released from the moment the terms' postings are known to the moment the candidates are ready, so
concurrent searches run on several cores. :func:`fastrag.vector_store.sqlite.lexical.bm25_top` uses it when
it is here and falls back to the numpy reference (:func:`~fastrag.vector_store.sqlite.lexical.bm25_top_reference`)
when it is not (a platform where the build found no C++ compiler), saying so once per process in the log.

``FASTRAG_NATIVE=0`` in the environment makes the store use the numpy reference even where the core is
built (benchmarks and tests compare the two this way).
"""

from __future__ import annotations

import logging
import os
import threading
from types import ModuleType

__all__ = ["BLOCK", "core", "enabled", "unavailable_reason"]

logger = logging.getLogger("fastrag.vector_store")

BLOCK = 128
"""Postings per block: the core keeps one maximum weight per block of this many postings."""

try:
    import fastrag.vector_store.sqlite.bm25_core as _core  # the compiled module, not the package
except ImportError as exc:  # not built here (no compiler at install time), or built for another Python
    _core: ModuleType | None = None  # type: ignore[no-redef]
    _reason = f"{type(exc).__name__}: {exc}"
else:
    _reason = ""

_told = threading.Event()


def core() -> ModuleType | None:
    """The compiled core, or ``None`` when it is not built or ``FASTRAG_NATIVE=0`` turns it off. The first
    time it is missing in a process, a warning in the log says why and that the numpy path serves."""
    if os.environ.get("FASTRAG_NATIVE", "1") == "0":
        return None
    if _core is None and not _told.is_set():
        _told.set()
        logger.warning(
            "fastrag's native BM25 core is not built (%s): BM25 search uses the numpy path (same results, "
            "holds the GIL, slower at scale). Reinstall with a C++ compiler to build it: "
            "pip install --force-reinstall --no-deps fastrag-retrieval (docs/native_core.md)", _reason,
        )
    return _core


def enabled() -> bool:
    """Whether BM25 searches use the native core now (built, and not turned off by ``FASTRAG_NATIVE=0``)."""
    return os.environ.get("FASTRAG_NATIVE", "1") != "0" and _core is not None


def unavailable_reason() -> str:
    """Why the core is not importable (empty when it is)."""
    return _reason
