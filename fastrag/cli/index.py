"""``fastrag index``: files into the store, one writer at a time."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import click

from fastrag.cli.app import (
    EXIT_INVALID,
    embedder_kind,
    main,
    parse_language_flag,
    parse_size,
    run_command,
    settings_or_exit,
    shell_quote,
    with_embedder_options,
)
from fastrag.config import (
    Settings,
    embedding_cache_path,
    new_store_analyzer,
    open_embedder,
    open_stores,
)
from fastrag.errors import ConfigurationError

# ---------------------------------------------------------------------------------------------- index


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--store", "store_url", help="Store URL (default: sqlite:///.fastrag/fastrag.db, or FASTRAG_STORE).")
@click.option("--model", "model", help="The embedder's model: a Model2Vec folder or name (default: the shipped "
                                       "static model), an API's model name, a sentence-transformers folder or package.")
@click.option("--embedding-cache", "embedding_cache",
              help="Reuse embeddings by model and text from this SQLite file ('off': none; default: "
                   "embedding-cache.db beside a SQLite store, for embedders other than model2vec).")
@click.option("--chunk-size", default=1000, show_default=True, help="Chunk size in characters.")
@click.option("--chunk-overlap", type=int, help="Chunk overlap in characters (default: 100, or a tenth of a --chunk-size under 1000).")
@click.option("--prune", is_flag=True, help="Remove chunks of files under PATHS that no longer exist.")
@click.option("--lexical-store", "lexical_store_url",
              help="A second store for BM25, for a vector store without full text (or FASTRAG_LEXICAL_STORE).")
@click.option("--language", "language",
              help='The documents\' language, stamped as metadata["language"] so BM25 stems them in it: an '
                   "ISO 639-1 code (de, hi, tr, ...), or auto to detect it per file or BEIR document with "
                   'Lingua (pip install "fastrag-retrieval[language]").')
@click.option("--max-file-size", "max_file_size", default="100MiB", show_default=True, metavar="SIZE",
              help="Skip (and name) files larger than this: bytes, or with a unit (KB, MB, GB, KiB, MiB, GiB).")
@click.option("--parse-memory-limit", "parse_memory_limit", default="2GiB", show_default=True, metavar="SIZE",
              help="Memory one PDF or Word file may take to parse (its worker process's limit, on Linux); a file "
                   "that needs more is skipped and named as too large ('none': no limit).")
@click.option("--verbose", "-v", is_flag=True, help="Name every skipped file with the reason.")
@click.option("--lock-timeout", default=600.0, show_default=True, type=click.FloatRange(min=0),
              help="Seconds to wait while another `fastrag index` writes to the same SQLite store; then exit 3.")
@with_embedder_options
def index(paths: tuple[Path, ...], store_url: str | None, model: str | None, embedding_cache: str | None,
          chunk_size: int, chunk_overlap: int | None, prune: bool, lexical_store_url: str | None,
          language: str | None, max_file_size: str, parse_memory_limit: str, verbose: bool, lock_timeout: float,
          embedder_options: dict[str, Any]) -> None:
    """Index .txt, .md, .html, .pdf, .docx files and BEIR corpus.jsonl files under PATHS (folders are walked).

    PDF and Word files need their extras (pip install "fastrag-retrieval[pdf,docx]"); one without text to
    read (encrypted, scanned without a text layer) is named with the reason and skipped; one that cannot be
    read (malformed or truncated, or its extra missing) is named with the reason and counted as failed
    (exit 1), and the run goes on.
    Only regular files are read: FIFOs, devices, sockets, symlink loops, broken symlinks and symlinks to
    folders are skipped, as are unsupported types, empty files, files over --max-file-size and PDF or Word
    files that need more memory to parse than --parse-memory-limit; the summary
    names each skipped path and why (the first 20; --verbose names all). Files deleted since they were
    indexed stay searchable until a run with --prune; the summary says when there are some.

    Two runs into one SQLite store take turns: the second waits (saying so) until the first finishes, at
    most --lock-timeout seconds, then exits 3 naming the store.
    """
    from fastrag.ingestion import (
        CachedEmbedder,
        Chunker,
        EmbeddingCache,
        IngestionPipeline,
    )
    from fastrag.ingestion.sources import printable_path

    settings = settings_or_exit({"store": store_url, "embedding_model": model, "lexical_store": lexical_store_url,
                          "embedding_cache": embedding_cache, **embedder_options})
    language_options = parse_language_flag(language, detect_all=True)
    # a new SQLite store of one language analyses in it (Snowball's stopwords): decided before it exists
    analyzer = new_store_analyzer(settings, language_options.get("language"))
    max_file_bytes = parse_size(max_file_size)
    memory_limit = (None if parse_memory_limit.strip().lower() == "none"
                    else parse_size(parse_memory_limit, option="--parse-memory-limit"))
    cache_note: list[str] = []

    async def go() -> Any:
        overlap = chunk_overlap if chunk_overlap is not None else min(100, max(chunk_size, 0) // 10)
        chunker = Chunker(chunk_size=chunk_size, chunk_overlap=overlap)
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(index_lock(settings, timeout=lock_timeout))
            embedder = await stack.enter_async_context(open_embedder(settings.embedding_model, settings=settings))
            store, lexical = await stack.enter_async_context(
                open_stores(settings, embedding_model=embedder.name, analyzer=analyzer)
            )
            cache_path = embedding_cache_path(settings, embedder_kind=embedder_kind(embedder))
            if cache_path is not None:
                cache = await stack.enter_async_context(EmbeddingCache(cache_path))
                embedder = CachedEmbedder(embedder, cache)
            pipeline = IngestionPipeline(embedder=embedder, vector_store=store, lexical_store=lexical,
                                         chunker=chunker, max_file_bytes=max_file_bytes,
                                         parse_memory_limit=memory_limit, **language_options)
            # finding deleted files reads every stored chunk's metadata: done below a size where it is cheap
            check_deleted = not prune and await store.count() <= _DELETED_CHECK_MAX_CHUNKS
            report = await pipeline.run(list(paths), prune=prune, report_deleted=check_deleted)
            if isinstance(embedder, CachedEmbedder):
                cache_note.append(f"embedding cache: {embedder.hits} chunk vectors reused, {embedder.misses} "
                                  f"embedded ({cache_path})")
            return report, await store.count()

    report, total = run_command(go, settings.store)
    click.echo(
        f"indexed {report.files_indexed} files ({report.chunks_written} chunks), {report.files_unchanged} unchanged, "
        f"{report.files_skipped} skipped, {len(report.errors)} failed, {report.files_pruned} pruned; "
        f"the store holds {total} chunks ({settings.store})"
    )
    for note in cache_note:
        click.echo(note)
    shown = report.skipped_files if verbose else report.skipped_files[:_SKIPPED_SHOWN]
    for skipped in shown:
        click.echo(f"skipped {skipped.path}: {skipped.reason}")
    if len(shown) < len(report.skipped_files):
        click.echo(f"... and {len(report.skipped_files) - len(shown)} more skipped (--verbose names them all)")
    if report.files_deleted:
        roots = " ".join(shell_quote(printable_path(p)) for p in paths)
        one = report.files_deleted == 1
        click.echo(
            f"note: {report.files_deleted} indexed {'file' if one else 'files'} under these paths "
            f"{'is' if one else 'are'} gone from disk (or no longer indexable) and "
            f"{'stays' if one else 'stay'} searchable; remove {'it' if one else 'them'} with "
            f"`fastrag index {roots} --prune`"
        )
        named = report.deleted if verbose else report.deleted[:_SKIPPED_SHOWN]
        for uri in named:
            click.echo(f"gone {printable_path(uri)}")
        if len(named) < len(report.deleted):
            click.echo(f"... and {len(report.deleted) - len(named)} more gone (--verbose names them all)")
    for warning in report.warnings:
        click.echo(f"warning: {warning}", err=True)
    if report.languages:
        click.echo("languages: " + ", ".join(f"{code or 'undetected'} {n}" for code, n in sorted(report.languages.items())))
    if report.zero_vectors:
        click.echo(f"warning: {report.zero_vectors} chunks embedded to the zero vector (none of their words is in "
                   "the embedding model's vocabulary): only BM25 can find them", err=True)
    for error in report.errors:
        click.echo(f"error: {error}", err=True)
    if report.errors:
        sys.exit(EXIT_INVALID)



@asynccontextmanager
async def index_lock(settings: Settings, *, timeout: float) -> AsyncIterator[None]:
    """Hold an exclusive lock on each SQLite store file ``index`` writes to, for the whole run.

    Two writers interleaving batches in one SQLite file each wait on the other's transactions and segment
    merges; past the busy timeout one fails mid-run (issue 13.4). So runs take turns: ``flock`` on
    ``<store>.index-lock`` (released by the kernel if the process dies), polled every 0.2 s up to
    ``timeout`` seconds. Remote stores serve concurrent writers themselves and take no lock.

    Raises:
        BackendUnavailableError: another run held the lock for ``timeout`` seconds (exit 3).
    """
    import fcntl
    import os
    import time

    from fastrag.config import sqlite_path
    from fastrag.errors import BackendUnavailableError

    files: list[tuple[str, str]] = []  # (url, path) of each SQLite file written
    for url in dict.fromkeys(u for u in (settings.store, settings.lexical_store) if u):
        try:
            path = sqlite_path(url)
        except ConfigurationError:
            continue  # a remote store (or a bad URL, which opening the store reports)
        if path != ":memory:":
            files.append((url, path))
    handles = []
    try:
        for url, path in files:
            lock_path = Path(f"{path}.index-lock")
            try:
                lock_path.parent.mkdir(parents=True, exist_ok=True)
                handle = lock_path.open("a+")
            except OSError:
                continue  # no folder for the store either: opening it reports that, naming the store
            handles.append(handle)
            deadline, told = time.monotonic() + timeout, False
            while True:
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if not told:
                        handle.seek(0)
                        holder = handle.read().strip() or "another process"
                        click.echo(f"waiting: another `fastrag index` ({holder}) is writing to {url}; this run starts "
                                   f"when it ends (at most {timeout:g} s, --lock-timeout)", err=True)  # fmt: skip
                        told = True
                    if time.monotonic() >= deadline:
                        raise BackendUnavailableError(
                            f"another `fastrag index` has been writing to this store for over {timeout:g} s "
                            f"(lock {lock_path}); try again when it ends, or raise --lock-timeout", store=url,
                        ) from None
                    await anyio.sleep(0.2)
            handle.seek(0)
            handle.truncate()
            handle.write(f"pid {os.getpid()}")
            handle.flush()
        yield
    finally:
        for handle in handles:
            handle.close()  # closing releases the flock


_SKIPPED_SHOWN = 20  # skipped paths the index summary names without --verbose
_DELETED_CHECK_MAX_CHUNKS = 200_000  # above this, `index` does not scan the store for deleted files
