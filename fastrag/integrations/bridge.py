"""Sync calls into async fastrag, inside or outside a running event loop.

Frameworks call retrievers from sync code (LangChain's ``invoke``, LlamaIndex's ``retrieve``, Haystack's
``Pipeline.run``), sometimes from a thread whose event loop is running (a notebook cell, an async web handler
calling a sync chain). ``anyio.run`` cannot start there, and blocking that loop while the search waits for it
would deadlock. :func:`run_sync` runs the coroutine on one event loop that fastrag keeps in a daemon thread
for the whole process, and blocks the calling thread until it is done, so both cases work the same way.

One loop for every sync call (rather than a new loop per call) keeps what a knowledge base opens lazily on its
first sync search (its stores, its embedder) on the loop that opened it. A knowledge base opened on your own
loop (``async with``) and then searched synchronously from that same thread is used from the background
loop while yours waits: the embedded SQLite store and the local embedders allow that (their work runs in
worker threads); a client bound to your loop (an async HTTP connection pool, a PostgreSQL pool) may not, so
use the framework's async entry point there (``ainvoke``, ``aretrieve``, ``run_async``).

::

    from fastrag.integrations.bridge import run_sync

    docs = run_sync(kb.search, "how are results fused?", top_k=3)   # from sync code, loop or no loop
    run_sync(kb.aclose)
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

import anyio
from anyio.from_thread import BlockingPortal

__all__ = ["run_sync"]

T = TypeVar("T")


class _LoopThread:
    """The background event loop: an anyio :class:`~anyio.from_thread.BlockingPortal` served by a daemon
    thread, started on first use. A daemon thread, so a process never waits for it at exit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._portal: BlockingPortal | None = None
        self._thread: threading.Thread | None = None

    def portal(self) -> tuple[BlockingPortal, threading.Thread]:
        with self._lock:
            if self._portal is None or self._thread is None or not self._thread.is_alive():
                self._portal, self._thread = self._start()
            return self._portal, self._thread

    @staticmethod
    def _start() -> tuple[BlockingPortal, threading.Thread]:
        ready = threading.Event()
        box: dict[str, Any] = {}

        async def serve() -> None:
            async with BlockingPortal() as portal:
                box["portal"] = portal
                ready.set()
                await portal.sleep_until_stopped()

        def main() -> None:
            try:
                anyio.run(serve)
            except BaseException as exc:  # noqa: BLE001 - handed to the thread that waits for the loop
                box["error"] = exc
            finally:
                ready.set()

        thread = threading.Thread(target=main, name="fastrag-integrations-loop", daemon=True)
        thread.start()
        ready.wait()
        if "portal" not in box:
            raise RuntimeError("fastrag's background event loop did not start") from box.get("error")
        return box["portal"], thread


_LOOP = _LoopThread()


def run_sync(fn: Callable[..., Awaitable[T]], /, *args: Any, **kwargs: Any) -> T:
    """Run ``await fn(*args, **kwargs)`` on fastrag's background event loop and return its result.

    Works from any thread, whether or not an event loop is running in it (see the module docstring); the
    calling thread blocks until the coroutine is done. What ``fn`` raises is raised here.

    Raises:
        RuntimeError: called from the background loop's own thread (a sync entry point called from inside a
            search): await the coroutine there instead.
    """
    portal, thread = _LOOP.portal()
    if threading.current_thread() is thread:
        raise RuntimeError("run_sync was called from fastrag's background event loop itself: await the coroutine")
    return portal.call(partial(fn, *args, **kwargs))
