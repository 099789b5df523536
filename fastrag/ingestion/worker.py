"""A child process that parses PDF and Word files for the ingestion pipeline, under a time and a memory
limit, so that a file that stalls the parser or swells in memory can be stopped.

Third-party parsers run on untrusted bytes; a crafted or damaged file can make one loop for minutes or
exhaust memory (a 1.8 MB ``.docx`` whose XML unpacks to 600 MB took a parser to 9.7 GB), and a thread can be
neither stopped nor limited. :class:`ParserProcess` starts ``python -m fastrag.ingestion.worker`` once per
ingestion run and sends it one file at a time over its stdin:

- when a file takes longer than the time limit the process is killed (and a fresh one started for the next
  file);
- the process runs under a memory limit: on Linux its address space (``RLIMIT_AS``) is capped at what it
  holds after start-up, its parser libraries imported (about 65 MB), plus the limit, so an allocation past it fails inside the parser, which
  reports it (Python's ``MemoryError``; libxml2's "no memory" error, which lxml raises as a syntax error
  and :mod:`fastrag.ingestion.word` recognises); the file is then skipped as too large
  (:class:`~fastrag.errors.ParserMemoryError`), never called malformed, and the process is replaced. After a
  file that leaves the process holding more than a quarter of its limit, it is replaced too, so every file
  gets the whole limit. Where ``RLIMIT_AS`` is not available (macOS does not enforce it, Windows has no
  ``resource`` module) the limit is not enforced, and the pipeline says so in its warnings.

Why not :mod:`multiprocessing` or ``anyio.to_process``: both start their workers by importing the calling
program's ``__main__`` module again, which re-runs a script that has no ``if __name__ == "__main__":``
guard; this worker imports only fastrag.

The protocol is private: each message is an 8-byte little-endian length and its bytes. A request is two
messages, a pickle of ``(source_uri, kind value, max_unpacked_bytes)`` and the file's raw bytes; a reply is
one pickle ``(status, payload, restart)``: ``("ok", (documents, notes), restart)``, ``("no-text", reason,
restart)``, ``("error", message, restart)`` or ``("too-large", what ran out, True)``; with ``restart`` true
the child exits after replying. Only the parent that started the child writes to it.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import subprocess
import sys
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from fastrag.errors import IngestionError, NoTextError, ParserMemoryError
from fastrag.ingestion.parsers import FileKind, ParsedDocument

__all__ = ["MEMORY_LIMIT_ENFORCED", "ParserProcess", "parse_binary"]

_HEADER = struct.Struct("<Q")


def parse_binary(
    data: bytes, source_uri: str, kind: FileKind, max_unpacked_bytes: int | None
) -> tuple[list[ParsedDocument], list[str]]:
    """Parse a PDF or DOCX file in this process; returns the documents and notes on what was left out.

    Raises:
        IngestionError: the file cannot be read (see :func:`~fastrag.ingestion.pdf.parse_pdf` and
            :func:`~fastrag.ingestion.word.parse_docx`).
    """
    notes: list[str] = []
    if kind is FileKind.PDF:
        from fastrag.ingestion.pdf import parse_pdf

        return [parse_pdf(data, source_uri=source_uri, notes=notes)], notes
    if kind is FileKind.DOCX:
        from fastrag.ingestion.word import parse_docx

        return [parse_docx(data, source_uri=source_uri, max_unpacked_bytes=max_unpacked_bytes)], notes
    raise IngestionError(f"{source_uri}: {kind.value} files are not parsed by the worker")


MEMORY_LIMIT_ENFORCED = sys.platform.startswith("linux")
"""Whether the worker's memory limit is enforced here: it needs Linux's ``RLIMIT_AS`` and ``/proc``."""

_RESTART_SHARE = 4  # a worker left holding more than 1/4 of its memory limit after a file is replaced


class ParserProcess:
    """The parent's handle on one worker process, started on first use; an async context manager.

    Args:
        timeout: seconds one file may take (sending it, parsing it, receiving the result); past it the
            process is killed and the file reported.
        memory_limit: bytes of memory (address space) the parser may use for one file, above what the
            worker holds after start-up; ``None`` for no limit. Enforced where
            :data:`MEMORY_LIMIT_ENFORCED` is true.
    """

    def __init__(self, *, timeout: float, memory_limit: int | None = None) -> None:
        self._timeout = timeout
        self._memory_limit = memory_limit
        self._process: Process | None = None
        self._reader: BufferedByteReceiveStream | None = None

    async def __aenter__(self) -> ParserProcess:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def parse(
        self, data: bytes, *, source_uri: str, kind: FileKind, max_unpacked_bytes: int | None
    ) -> tuple[list[ParsedDocument], list[str]]:
        """Parse one file in the worker.

        Raises:
            NoTextError: the file holds no readable text (encrypted, scanned).
            ParserMemoryError: parsing it needs more memory than ``memory_limit``; the message names the
                file and the limit.
            IngestionError: the file cannot be read, it took longer than the timeout (the worker was
                killed), or the worker died (a crash in a native library).
        """
        meta = pickle.dumps((source_uri, kind.value, max_unpacked_bytes), protocol=pickle.HIGHEST_PROTOCOL)
        try:
            with anyio.fail_after(self._timeout):
                process, reader = await self._started()
                assert process.stdin is not None
                await process.stdin.send(_HEADER.pack(len(meta)) + meta + _HEADER.pack(len(data)))
                await process.stdin.send(data)
                (length,) = _HEADER.unpack(await reader.receive_exactly(_HEADER.size))
                reply: Any = pickle.loads(await reader.receive_exactly(length))  # noqa: S301 - our own child
        except TimeoutError as exc:
            await self._kill()
            raise IngestionError(
                f"{source_uri}: parsing took longer than {self._timeout:g} s (parse_timeout); the parser was "
                "stopped and the file skipped"
            ) from exc
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, OSError) as exc:
            status = await self._kill(reap=True)
            how = f" ({status})" if status else ""
            raise IngestionError(
                f"{source_uri}: the parser process died{how} or could not start (a crash in a native library, the "
                f"machine out of memory, or fastrag not importable by {sys.executable}); skipped"
            ) from exc
        except BaseException:
            await self._kill()  # cancelled mid-message: the pipe is out of step, start afresh next time
            raise
        status, payload, restart = reply
        if restart:
            await self._kill(reap=True)  # it exits after such a reply; the next file gets a fresh one
        if status == "too-large":
            if self._memory_limit is None:  # no limit of ours: the machine's memory ran out
                raise ParserMemoryError(source_uri, f"too large to parse in the memory available: {payload}; skipped",
                                        limit=None)
            raise ParserMemoryError(
                source_uri,
                f"too large for the parser's memory limit ({_size(self._memory_limit)}; raise it with "
                f"--parse-memory-limit or IngestionPipeline(parse_memory_limit=...)): {payload}; skipped",
                limit=self._memory_limit,
            )
        if status == "no-text":
            raise NoTextError(source_uri, payload)
        if status == "error":
            raise IngestionError(payload)
        documents, notes = payload
        return documents, notes

    async def _started(self) -> tuple[Process, BufferedByteReceiveStream]:
        if self._process is None or self._reader is None:
            env = dict(os.environ)
            # the child imports fastrag from where this process did
            env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if isinstance(p, str) and p)
            self._process = await anyio.open_process(
                [sys.executable, "-m", "fastrag.ingestion.worker", str(self._memory_limit or 0)],
                env=env,
                stderr=subprocess.DEVNULL,
            )
            assert self._process.stdout is not None
            self._reader = BufferedByteReceiveStream(self._process.stdout)
        return self._process, self._reader

    async def _kill(self, *, reap: bool = False) -> str:
        """Stop the worker; returns how it ended when it ended by itself (``"killed by SIGSEGV"``), which
        ``reap`` waits a moment for (a worker that died, or that exits after its reply)."""
        process, self._process, self._reader = self._process, None, None
        if process is None:
            return ""
        with anyio.CancelScope(shield=True):
            if reap:
                with anyio.move_on_after(0.5):
                    await process.wait()
            ended = process.returncode
            if ended is None:
                process.kill()
            await process.aclose()
        if ended is None or ended == 0:
            return ""
        if ended < 0:
            try:
                return f"killed by {signal.Signals(-ended).name}"
            except ValueError:
                return f"killed by signal {-ended}"
        return f"exit status {ended}"

    async def aclose(self) -> None:
        """Stop the worker (it exits when its stdin closes; killed if it does not within 5 s). Idempotent."""
        process = self._process
        if process is None:
            return
        with anyio.CancelScope(shield=True):
            if process.stdin is not None:
                await process.stdin.aclose()
            with anyio.move_on_after(5):
                await process.wait()
            await self._kill()


def _size(count: int) -> str:
    """``2147483648`` -> ``"2 GiB"``; ``52428800`` -> ``"50 MiB"``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{count} bytes"


def _address_space() -> int | None:
    """This process's address space in bytes (``/proc/self/statm``), or ``None`` where it cannot be read."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _limit_memory(limit: int) -> int | None:
    """Cap this process's address space at what it holds now plus ``limit``; returns what it held, or
    ``None`` where the limit cannot be set."""
    if not MEMORY_LIMIT_ENFORCED:
        return None
    import resource

    held = _address_space()
    if held is None:
        return None
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    ceiling = held + limit if hard == resource.RLIM_INFINITY else min(held + limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (ceiling, hard))
    return held


def _memory_exhaustion(exc: BaseException) -> BaseException | None:
    """The ``MemoryError`` behind ``exc`` (itself, or one it was raised from or while handling), if any."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, MemoryError):
            return current
        pending.extend((current.__cause__, current.__context__))
    return None


def _read_message(source: Any) -> bytes | None:
    header = source.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (length,) = _HEADER.unpack(header)
    data = source.read(length)
    return data if len(data) == length else None


def main() -> None:
    """The child's loop: read a request from stdin, answer on stdout, until stdin closes."""
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever a library prints goes to stderr, never into the replies
    held = None
    if limit > 0:
        _import_parsers()  # before the limit is set: it is for what parsing one file takes, not for the libraries
        held = _limit_memory(limit)
    source = sys.stdin.buffer
    while True:
        meta = _read_message(source)
        if meta is None:
            return
        source_uri, kind, max_unpacked = pickle.loads(meta)  # noqa: S301 - from our parent
        reply: tuple[Any, ...]
        try:
            data = _read_message(source)
            if data is None:
                return
            reply = ("ok", parse_binary(data, source_uri, FileKind(kind), max_unpacked), False)
            del data
        except NoTextError as exc:
            reply = ("no-text", exc.reason, False)
        except Exception as exc:  # noqa: BLE001 - a parser bug is reported for this file, the run goes on
            exhausted = _memory_exhaustion(exc)
            if exhausted is not None:
                reply = ("too-large", _ran_out(exhausted), True)
            elif isinstance(exc, IngestionError):
                reply = ("error", str(exc), False)
            else:
                reply = ("error", f"{source_uri}: the parser failed ({type(exc).__name__}: {exc}); skipped", False)
        if held is not None and not reply[2]:
            now = _address_space()
            if now is not None and now - held > limit // _RESTART_SHARE:
                reply = (*reply[:2], True)
        try:
            payload = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        except MemoryError:
            payload = pickle.dumps(("too-large", "it ran out of memory sending the result", True))
        out.write(_HEADER.pack(len(payload)) + payload)
        out.flush()
        if reply[2]:
            return


def _import_parsers() -> None:
    for module in ("fastrag.ingestion.pdf", "fastrag.ingestion.word", "pypdf", "docx"):
        try:
            __import__(module)
        except ImportError:  # an extra not installed: parsing such a file says how to install it
            pass


def _ran_out(exc: BaseException) -> str:
    """``"it ran out of memory (...)"``, with what the parser said of it (or just ``MemoryError``)."""
    return f"it ran out of memory ({str(exc) or type(exc).__name__})"


if __name__ == "__main__":
    main()
