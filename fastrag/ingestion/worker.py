"""A child process that parses PDF and Word files for the ingestion pipeline, so that one that stalls can be
killed.

Third-party parsers run on untrusted bytes; a crafted or damaged file can make one loop for minutes or
exhaust memory, and a thread cannot be stopped. :class:`ParserProcess` starts ``python -m
fastrag.ingestion.worker`` once per ingestion run and sends it one file at a time over its stdin; when a
file takes longer than the time limit the process is killed (and a fresh one started for the next file).

Why not :mod:`multiprocessing` or ``anyio.to_process``: both start their workers by importing the calling
program's ``__main__`` module again, which re-runs a script that has no ``if __name__ == "__main__":``
guard; this worker imports only fastrag.

The protocol is private: each message is an 8-byte little-endian length and a pickle, request
``(data, source_uri, kind value, max_unpacked_bytes)``, reply ``("ok", documents, notes)``,
``("no-text", reason)`` or ``("error", message)``. Only the parent that started the child writes to it.
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from fastrag.errors import IngestionError, NoTextError
from fastrag.ingestion.parsers import FileKind, ParsedDocument

__all__ = ["ParserProcess", "parse_binary"]

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


class ParserProcess:
    """The parent's handle on one worker process, started on first use; an async context manager.

    Args:
        timeout: seconds one file may take (sending it, parsing it, receiving the result); past it the
            process is killed and the file reported.
    """

    def __init__(self, *, timeout: float) -> None:
        self._timeout = timeout
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
            IngestionError: the file cannot be read, it took longer than the timeout (the worker was
                killed), or the worker died (out of memory, a crash in a native library).
        """
        request = pickle.dumps((data, source_uri, kind.value, max_unpacked_bytes), protocol=pickle.HIGHEST_PROTOCOL)
        try:
            with anyio.fail_after(self._timeout):
                process, reader = await self._started()
                assert process.stdin is not None
                await process.stdin.send(_HEADER.pack(len(request)) + request)
                (length,) = _HEADER.unpack(await reader.receive_exactly(_HEADER.size))
                reply: Any = pickle.loads(await reader.receive_exactly(length))  # noqa: S301 - our own child
        except TimeoutError as exc:
            await self._kill()
            raise IngestionError(
                f"{source_uri}: parsing took longer than {self._timeout:g} s (parse_timeout); the parser was "
                "stopped and the file skipped"
            ) from exc
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, OSError) as exc:
            await self._kill()
            raise IngestionError(
                f"{source_uri}: the parser process died or could not start (out of memory, a crash in a native "
                f"library, or fastrag not importable by {sys.executable}); skipped"
            ) from exc
        except BaseException:
            await self._kill()  # cancelled mid-message: the pipe is out of step, start afresh next time
            raise
        if reply[0] == "no-text":
            raise NoTextError(source_uri, reply[1])
        if reply[0] == "error":
            raise IngestionError(reply[1])
        return reply[1], reply[2]

    async def _started(self) -> tuple[Process, BufferedByteReceiveStream]:
        if self._process is None or self._reader is None:
            env = dict(os.environ)
            # the child imports fastrag from where this process did
            env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if isinstance(p, str) and p)
            self._process = await anyio.open_process(
                [sys.executable, "-m", "fastrag.ingestion.worker"], env=env, stderr=subprocess.DEVNULL
            )
            assert self._process.stdout is not None
            self._reader = BufferedByteReceiveStream(self._process.stdout)
        return self._process, self._reader

    async def _kill(self) -> None:
        process, self._process, self._reader = self._process, None, None
        if process is None:
            return
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.aclose()

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


def main() -> None:
    """The child's loop: read a request from stdin, answer on stdout, until stdin closes."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever a library prints goes to stderr, never into the replies
    source = sys.stdin.buffer
    while True:
        header = source.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return
        (length,) = _HEADER.unpack(header)
        data, source_uri, kind, max_unpacked = pickle.loads(source.read(length))  # noqa: S301 - from our parent
        try:
            documents, notes = parse_binary(data, source_uri, FileKind(kind), max_unpacked)
            reply: tuple[Any, ...] = ("ok", documents, notes)
        except NoTextError as exc:
            reply = ("no-text", exc.reason)
        except IngestionError as exc:
            reply = ("error", str(exc))
        except Exception as exc:  # noqa: BLE001 - a parser bug is reported for this file, the run goes on
            reply = ("error", f"{source_uri}: the parser failed ({type(exc).__name__}: {exc}); skipped")
        payload = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        out.write(_HEADER.pack(len(payload)) + payload)
        out.flush()


if __name__ == "__main__":
    main()
