"""The ``fastrag`` command line: index files, search them, answer questions with an LLM, evaluate on BEIR data.

Exit codes: 0 success (including a search that matched nothing, or a question with no sources, which say
so); 1 invalid input (a bad filter, regex, parameter or setting, or no LLM configured for ``ask``) or files
that failed to index; 2 command-line usage error; 3 the store failed or cannot be opened (the message
names the store; ``ask`` then never calls the LLM), or a remote embedding endpoint failed (the message names
it); 4 the LLM endpoint failed (``ask``).
"""

from __future__ import annotations

import functools
import json
import sys
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import anyio
import click

from fastrag.config import (
    EMBEDDERS,
    EVAL_MODES,
    MODES,
    RERANKERS,
    Settings,
    embedding_cache_path,
    load_settings,
    new_store_analyzer,
    open_embedder,
    open_reranker,
    open_stores,
    split_embedder_name,
)
from fastrag.errors import BackendError, ConfigurationError, FastragError
from fastrag.models import TITLE

T = TypeVar("T")

EXIT_INVALID = 1
EXIT_STORE = 3
EXIT_LLM = 4


def _run(fn: Callable[[], Awaitable[T]], store_url: str | None = None) -> T:
    try:
        return anyio.run(fn)
    except BackendError as exc:
        _store_failed(exc, store_url)
    except FastragError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)
    except ExceptionGroup as group:  # several hybrid branches failed at once
        errors = _leaves(group)
        backend = next((e for e in errors if isinstance(e, BackendError)), None)
        if backend is not None:
            _store_failed(backend, store_url)
        if all(isinstance(e, FastragError) for e in errors):
            click.echo(f"error: {errors[0]}", err=True)
            sys.exit(EXIT_INVALID)
        raise


def _store_failed(exc: BackendError, store_url: str | None) -> NoReturn:
    message = str(exc) if exc.store else f"{store_url or 'store'}: {exc}"
    # a remote embedder's errors name its endpoint ({base_url}/embeddings, Cohere's .../v2/embed)
    what = "embedding endpoint" if (exc.store or "").endswith(("/embeddings", "/v2/embed")) else "store"
    click.echo(f"error: {what} failed: {message}", err=True)
    sys.exit(EXIT_STORE)


def _retrieval_failed(error: BaseException | None, store_url: str | None) -> NoReturn:
    errors = _leaves(error) if isinstance(error, BaseExceptionGroup) else [error]
    backend = next((e for e in errors if isinstance(e, BackendError)), None)
    if backend is not None:
        _store_failed(backend, store_url)
    click.echo(f"error: retrieval failed: {store_url or 'store'}: {type(error).__name__}: {error}", err=True)
    sys.exit(EXIT_STORE)


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


def _settings(overrides: dict[str, Any]) -> Settings:
    """Resolve settings; a bad setting is invalid input (exit 1), never a traceback."""
    try:
        return load_settings(overrides)
    except FastragError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)


_EMBEDDER_SETTINGS = (
    "embedder", "embedder_base_url", "embedder_dimensions", "embedder_query_prefix", "embedder_document_prefix",
    "embedder_batch_size", "embedder_max_concurrency",
)


def _embedder_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the embedder options to a command; it receives them as one ``embedder_options`` dict (settings
    overrides, ``None`` where not given). Put it right above the ``def``."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        options = {key: kwargs.pop(key) for key in _EMBEDDER_SETTINGS}
        return command(*args, embedder_options=options, **kwargs)

    decorators = [
        click.option("--embedder", type=click.Choice(EMBEDDERS),
                     help="The embedding model family (or FASTRAG_EMBEDDER; default: model2vec, or for search "
                          "and ask the one the store recorded). openai: any /v1/embeddings endpoint; cohere: "
                          "Cohere's API; sentence-transformers: a local model (default all-MiniLM-L6-v2)."),
        click.option("--embedder-base-url", help="openai/cohere: the API's base URL, e.g. http://localhost:8080/v1 "
                                                 "(or FASTRAG_EMBEDDER_BASE_URL; key from FASTRAG_EMBEDDER_API_KEY)."),
        click.option("--embedder-dimensions", type=click.IntRange(min=1),
                     help="openai/cohere: ask the model for vectors of this width."),
        click.option("--query-prefix", "embedder_query_prefix",
                     help="openai/sentence-transformers: text put before every query (e.g. 'query: ' for E5)."),
        click.option("--document-prefix", "embedder_document_prefix",
                     help="openai/sentence-transformers: text put before every document (e.g. 'passage: ')."),
        click.option("--embedder-batch-size", type=click.IntRange(min=1), help="Texts per request or forward pass."),
        click.option("--embedder-max-concurrency", type=click.IntRange(min=1), help="Batches in flight at once."),
    ]
    for decorator in reversed(decorators):
        wrapper = decorator(wrapper)
    return wrapper


_THRESHOLD_SETTINGS = ("min_score", "min_relative_score", "min_vector_score", "min_keyword_score")


def _threshold_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the score-threshold options to a command; it receives them as one ``threshold_options`` dict
    (settings overrides, ``None`` where not given). Put it right above the ``def``."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        options = {key: kwargs.pop(key) for key in _THRESHOLD_SETTINGS}
        return command(*args, threshold_options=options, **kwargs)

    decorators = [
        click.option("--min-score", "min_score", type=float, metavar="SCORE",
                     help="Drop results scoring below SCORE on the result list's own scale: BM25 in keyword mode, "
                          "cosine (-1 to 1) in vector mode, the reranker's score with --rerank (or FASTRAG_MIN_SCORE). "
                          "Not in hybrid mode without --rerank (fused scores have no absolute scale): use "
                          "--min-relative-score there."),
        click.option("--min-relative-score", "min_relative_score", type=float, metavar="FRACTION",
                     help="Hybrid: keep results scoring at least FRACTION (> 0, e.g. 0.5) of the question's best "
                          "fused score (or FASTRAG_MIN_RELATIVE_SCORE)."),
        click.option("--min-vector-score", "min_vector_score", type=float, metavar="COSINE",
                     help="Drop dense (k-NN) hits whose cosine is below COSINE, before fusion in hybrid mode "
                          "(or FASTRAG_MIN_VECTOR_SCORE)."),
        click.option("--min-keyword-score", "min_keyword_score", type=float, metavar="BM25",
                     help="Drop BM25 hits scoring below BM25, before fusion in hybrid mode "
                          "(or FASTRAG_MIN_KEYWORD_SCORE)."),
    ]
    for decorator in reversed(decorators):
        wrapper = decorator(wrapper)
    return wrapper


def _check_thresholds(settings: Settings, *, rerank: str) -> None:
    """Refuse (exit 1, one line) a threshold the mode cannot apply, before any store is opened."""
    from fastrag.config import _ENV
    from fastrag.retrieval.thresholds import check_thresholds_fit

    def said(name: str) -> str:
        return f"{name}={getattr(settings, name)!r} (--{name.replace('_', '-')}, {_ENV[name]} or fastrag.toml)"

    try:
        check_thresholds_fit(settings.mode, reranked=rerank != "none", said=said,
                             **{name: getattr(settings, name) for name in _THRESHOLD_SETTINGS})  # fmt: skip
    except FastragError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)


def _thresholds_set(settings: Settings) -> dict[str, float]:
    return {name: getattr(settings, name) for name in _THRESHOLD_SETTINGS if getattr(settings, name) is not None}


def _embedder_kind(embedder: Any) -> str:
    return split_embedder_name(getattr(embedder, "name", None))[0] or "model2vec"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="fastrag-retrieval")
def main() -> None:
    """fastrag: index documents and retrieve the ones that answer a question (BM25, k-NN, hybrid)."""


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
@_embedder_options
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

    settings = _settings({"store": store_url, "embedding_model": model, "lexical_store": lexical_store_url,
                          "embedding_cache": embedding_cache, **embedder_options})
    language_options = _language_options(language, detect_all=True)
    # a new SQLite store of one language analyses in it (Snowball's stopwords): decided before it exists
    analyzer = new_store_analyzer(settings, language_options.get("language"))
    max_file_bytes = _parse_size(max_file_size)
    memory_limit = (None if parse_memory_limit.strip().lower() == "none"
                    else _parse_size(parse_memory_limit, option="--parse-memory-limit"))
    cache_note: list[str] = []

    async def go() -> Any:
        overlap = chunk_overlap if chunk_overlap is not None else min(100, max(chunk_size, 0) // 10)
        chunker = Chunker(chunk_size=chunk_size, chunk_overlap=overlap)
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(_index_lock(settings, timeout=lock_timeout))
            embedder = await stack.enter_async_context(open_embedder(settings.embedding_model, settings=settings))
            store, lexical = await stack.enter_async_context(
                open_stores(settings, embedding_model=embedder.name, analyzer=analyzer)
            )
            cache_path = embedding_cache_path(settings, embedder_kind=_embedder_kind(embedder))
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

    report, total = _run(go, settings.store)
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
        roots = " ".join(_shell_quote(printable_path(p)) for p in paths)
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


def _is_auto(language: str | None) -> bool:
    """Whether ``--language`` asks for detection (``auto``, in any case)."""
    return language is not None and language.strip().lower() == "auto"


def _language_options(language: str | None, *, detect_all: bool, allow_auto: bool = True) -> dict[str, Any]:
    """``--language``: ``{}``, ``{"language": code}``, or (``auto`` when indexing) a Lingua detector over
    every language it knows, in low-accuracy mode (documents are long enough for it). A bad value is
    invalid input (exit 1); ``allow_auto=False`` for a command that takes a code only."""
    from fastrag.analysis import language_code

    if language is None:
        return {}
    if _is_auto(language):
        if not detect_all:
            return {}
        from fastrag.language import LinguaLanguageDetector

        try:
            return {"language_detector": LinguaLanguageDetector.every_language(low_accuracy=True)}
        except FastragError as exc:
            click.echo(f"error: --language auto: {exc}", err=True)
            sys.exit(EXIT_INVALID)
    code = language_code(language)
    if code is None:
        expected = "auto or a registered language code" if allow_auto else "a registered language code"
        click.echo(f"error: --language must be {expected} such as de (ISO 639), got {language!r}", err=True)
        sys.exit(EXIT_INVALID)
    return {"language": code}


async def _question_language(lexical: Any, language: str | None) -> dict[str, Any]:
    """``search --language``: a code is the question's language; ``auto`` detects it with Lingua among the
    languages the store's documents were analysed in, the store's own analysis language included (one:
    that one; none recorded: the store's own). A code none of the store's documents were analysed in is
    used, with a warning."""
    from fastrag.analysis import LANGUAGE_ALIASES

    languages = getattr(lexical, "languages", None)
    if not _is_auto(language):
        options = _language_options(language, detect_all=False)
        held = await _held_languages(lexical) if callable(languages) and options else []
        code = options.get("language")
        if held and LANGUAGE_ALIASES.get(code, code) not in {LANGUAGE_ALIASES.get(h, h) for h in held}:
            click.echo(f"warning: --language {code}: the store's documents were analysed in {', '.join(held)}, "
                       f"none in {code!r}; the question is analysed in {code!r} all the same", err=True)
        return options
    if not callable(languages):
        raise ConfigurationError(f"--language auto needs a store that records its documents' languages (the "
                                 f"SQLite store); {lexical!r} does not: give the question's language code")
    held = await _held_languages(lexical)
    if len(held) == 1:
        return {"language": held[0]}
    if not held:
        return {}
    from fastrag.language import LinguaLanguageDetector

    return {"detector": LinguaLanguageDetector(held)}


async def _held_languages(lexical: Any) -> list[str]:
    """The languages ``lexical``'s documents were analysed in, sorted; ``""`` (documents analysed by the
    store's own analyzer) stands for the store's own language (English by default)."""
    own = getattr(getattr(lexical, "analyzer", None), "language", None)
    return sorted({code or own for code in await lexical.languages()} - {None, ""})


@asynccontextmanager
async def _index_lock(settings: Settings, *, timeout: float) -> AsyncIterator[None]:
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
_SIZE_UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "kib": 1024, "mib": 1024**2, "gib": 1024**3}


def _parse_size(text: str, *, option: str = "--max-file-size") -> int:
    """``"100MiB"`` -> bytes; a bad size is a usage error (exit 2) naming ``option``."""
    import re

    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _SIZE_UNITS or float(match.group(1)) * _SIZE_UNITS[unit] < 1:
        raise click.BadParameter(f"{text!r} is not a size such as 500000, 20MB or 1GiB", param_hint=option)
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


def _shell_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


# --------------------------------------------------------------------------------------------- search


@asynccontextmanager
async def _open_knowledge_base(
    settings: Settings, *, rerank: str = "none", rerank_model: str | None = None, kb_settings: Any = None,
    rerank_given: bool = False,
) -> AsyncIterator[tuple[Any, dict[str, Any]]]:
    """The knowledge base ``search`` and ``ask`` search: the existing store(s), the embedder the store recorded
    (none in keyword mode), and the ``--rerank`` reranker; yields it with the request settings that name the
    reranker. Everything is closed on exit. The search itself is planned by :mod:`fastrag.planning`, as for
    every other entrance."""
    from fastrag.knowledge_base import KnowledgeBase

    async with AsyncExitStack() as stack:
        store, lexical = await stack.enter_async_context(open_stores(settings, create=False))
        embedder: Any = False  # keyword mode: no embedder (a store built by any model can be searched)
        if settings.mode != "keyword":
            embedder = await stack.enter_async_context(
                open_embedder(settings.embedding_model or store.embedding_model, settings=settings)
            )
            if store.embedding_model and embedder.name != store.embedding_model:
                # the same refusal as `fastrag index`: query vectors of another model are meaningless here
                raise ConfigurationError(
                    f"{settings.store} was built with embedding model {store.embedding_model!r}, not "
                    f"{embedder.name!r}; search it with the same model, or use --mode keyword"
                )
        extra: dict[str, Any] = {}
        if rerank == BEST_RERANKER:
            rerank, rerank_model, said = _best_reranker(settings, rerank_model)
            click.echo(f"reranking with {said}", err=True)
        if rerank == "embedder":
            _warn_same_model_rerank(rerank_model, settings.embedding_model or store.embedding_model)
        if rerank == "none":
            extra = {"rerank": False} if rerank_given else {}  # --rerank none wins over FASTRAG_RERANK / the file
        elif rerank == "embedder" and rerank_model is None and embedder:
            extra = {"rerank": True, "rerank_model": "embedder"}  # the knowledge base's own embedder, as everywhere
        else:
            reranker = await stack.enter_async_context(
                open_reranker(rerank, rerank_model, embedding_model=embedder.name if embedder else
                              settings.embedding_model or store.embedding_model)
            )
            extra = {"rerank": True, "rerank_model": reranker}
        kb = await stack.enter_async_context(
            KnowledgeBase(store, lexical_store=lexical if lexical is not store else None, embedder=embedder,
                          settings=kb_settings)
        )
        yield kb, extra


BEST_RERANKER = "best"
"""``--rerank`` given without a value: :func:`_best_reranker` picks the reranker."""


def _best_reranker(settings: Settings, rerank_model: str | None) -> tuple[str, str | None, str]:
    """The best reranker configured, for ``--rerank`` alone: ``(kind, model, what to say on stderr)``.

    In order: a ``rerank_model`` spec (as a knowledge base reads it: a cross-encoder folder, ``cohere`` or
    ``cohere:MODEL``, ``embedder``) from ``--rerank-model``, ``FASTRAG_RERANK_MODEL`` or ``fastrag.toml``;
    else Cohere's rerank API when ``CO_API_KEY`` (or ``COHERE_API_KEY``) is set; else the embedder reranker
    (:data:`~fastrag.settings.DEFAULT_RERANK_MODEL`, what a knowledge base reranks with when nothing is
    configured). A cross-encoder judges relevance better than the other two (docs/reranking.md); the
    embedder reranker with the model that retrieved measured worse than not reranking, and says so."""
    import os

    from fastrag.rerankers.cohere import API_KEY_ENV

    configured, where = rerank_model, "--rerank-model"
    if configured is None and settings.search is not None and isinstance(settings.search.rerank_model, str):
        configured = settings.search.rerank_model
        where = "FASTRAG_RERANK_MODEL" if os.environ.get("FASTRAG_RERANK_MODEL") else "fastrag.toml"
    if configured is not None:
        spec = configured.strip()
        if spec == "embedder":
            return "embedder", None, f"the embedder reranker (rerank_model from {where})"
        if spec == "cohere" or spec.startswith("cohere:"):
            model = spec.partition(":")[2].strip() or None
            return "cohere", model, f"Cohere's rerank API, model {model or 'rerank-v3.5'} (rerank_model from {where})"
        return "cross-encoder", spec, f"the cross-encoder in {spec} (rerank_model from {where})"
    key = next((name for name in API_KEY_ENV if os.environ.get(name)), None)
    if key is not None:
        return "cohere", None, f"Cohere's rerank API, model rerank-v3.5 ({key} is set and no rerank_model is configured)"
    return "embedder", None, ("the embedder reranker (no rerank_model is configured and CO_API_KEY is not set; "
                              "configure a cross-encoder folder with FASTRAG_RERANK_MODEL for a better one)")  # fmt: skip


CLI_TOP_K = 5
"""``fastrag search`` and ``ask`` return this many results unless ``--top-k``, ``FASTRAG_TOP_K`` or
``fastrag.toml`` say otherwise (a terminal shows five; the library's default is 20)."""


def _search_request(settings: Settings, given: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """``(knowledge-base layer, request)`` of a command-line search: the ``FASTRAG_*`` variables and
    ``fastrag.toml`` (``settings.search``) are the knowledge base's settings, over :data:`CLI_TOP_K`; the flags
    given, the mode and the score thresholds are the request. A bad value is invalid input (exit 1)."""
    from fastrag.settings import SearchSettings

    layer = {"top_k": CLI_TOP_K, **(settings.search.to_dict() if settings.search else {})}
    # the mode and the thresholds as load_settings merged them (flag, variable, file: it names each in its
    # errors) are checked together with the flags, so they go with the request
    request = {"mode": settings.mode, **_thresholds_set(settings)}
    request.update({k: v for k, v in given.items() if v is not None and v != ()})
    try:
        kb_settings = SearchSettings.from_mapping(layer)
        SearchSettings.from_mapping(request)
    except FastragError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)
    return kb_settings, request


def _resolved_json(resolved: Any) -> dict[str, Any]:
    """``{name: {"value", "origin"}}`` for every resolved setting (the reranker object as its repr)."""
    values = resolved.to_dict()
    return {name: {"value": values[name], "origin": resolved.origin(name)} for name in values}


def _fusion_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the first stage's options (candidates per branch, fusion, branch failures) to a command; it receives
    them as one ``fusion_options`` dict (``None`` where not given). Put it right above the ``def``."""
    names = ("vector_candidate_k", "keyword_candidate_k", "fusion", "normalization", "fusion_floor", "vector_weight",
             "keyword_weight", "rank_constant", "branch_timeout", "on_branch_error", "path_filter_timeout",
             "mmr_lambda", "mmr_candidate_k")  # fmt: skip

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return command(*args, fusion_options={key: kwargs.pop(key) for key in names}, **kwargs)

    from fastrag.settings import FUSIONS, NORMALIZATIONS

    decorators = [
        click.option("--vector-candidate-k", type=click.IntRange(1, 10_000),
                     help="Hybrid: candidates of the dense branch (default: --candidate-k)."),
        click.option("--keyword-candidate-k", type=click.IntRange(1, 10_000),
                     help="Hybrid: candidates of the BM25 branch (default: --candidate-k)."),
        click.option("--fusion", type=click.Choice(FUSIONS),
                     help="Hybrid: weighted (normalised scores) or rrf (Reciprocal Rank Fusion). Default: weighted."),
        click.option("--normalization", type=click.Choice(NORMALIZATIONS),
                     help="Weighted fusion's score normalisation (default: the embedder's measured one)."),
        click.option("--fusion-floor", type=click.FloatRange(0, 1, max_open=True), metavar="FLOOR",
                     help="Weighted fusion: where a branch's lowest match normalises, so its matches stay above "
                          "its non-matches (default: the embedder's measured one, 0.2 or 0.1)."),
        click.option("--vector-weight", type=click.FloatRange(0), help="Hybrid: the dense branch's weight."),
        click.option("--keyword-weight", type=click.FloatRange(0), help="Hybrid: the BM25 branch's weight."),
        click.option("--rank-constant", type=click.FloatRange(0, min_open=True),
                     help="RRF's k (default 60, Cormack et al. 2009)."),
        click.option("--branch-timeout", type=click.FloatRange(0, min_open=True), metavar="SECONDS",
                     help="Hybrid: seconds each branch may take."),
        click.option("--mmr-lambda", type=click.FloatRange(0, 1), metavar="LAMBDA",
                     help="Diversify the results by Maximal Marginal Relevance: relevance's share (0.5: relevance "
                          "and novelty alike; 1: relevance alone)."),
        click.option("--mmr-candidate-k", type=click.IntRange(1, 10_000),
                     help="With --mmr-lambda: the candidates MMR chooses among (default 50)."),
        click.option("--path-filter-timeout", type=click.FloatRange(0, min_open=True), metavar="SECONDS",
                     help="Seconds one search may spend matching --path-filter (default 1)."),
        click.option("--on-branch-error", type=click.Choice(("raise", "partial")),
                     help="Hybrid: a failed branch fails the search (raise, default) or leaves the other's results "
                          "(partial)."),
    ]
    for decorator in reversed(decorators):
        wrapper = decorator(wrapper)
    return wrapper


@main.command()
@click.argument("query")
@click.option("--store", "store_url", help="Store URL (default: sqlite:///.fastrag/fastrag.db, or FASTRAG_STORE).")
@click.option("--top-k", "-k", type=int, help="How many documents to return (default 5, or FASTRAG_TOP_K).")
@click.option("--mode", type=click.Choice(MODES), help="Retrieval mode (default: hybrid, or FASTRAG_MODE); auto: by corpus size.")
@click.option("--filter", "filter_json", help='Metadata filter as JSON, e.g. \'{"equals": {"key": "title", "value": "A"}}\'.')
@click.option("--include-glob", multiple=True, help="Keep only results whose source_uri matches (repeatable).")
@click.option("--exclude-glob", multiple=True, help="Drop results whose source_uri matches (repeatable).")
@click.option("--path-filter", help="Keep only results whose source_uri matches this regular expression.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON object.")
@click.option("--lexical-store", "lexical_store_url",
              help="A second store for BM25, for a vector store without full text (or FASTRAG_LEXICAL_STORE).")
@click.option("--rerank", type=click.Choice(("none", BEST_RERANKER, *RERANKERS)), default="none", show_default=True,
              is_flag=False, flag_value=BEST_RERANKER,
              help="Rerank --candidate-k first-stage candidates: bi-encoder cosine (embedder), a local "
                   "cross-encoder, or Cohere's rerank API (key from CO_API_KEY). --rerank alone (after QUERY): "
                   "the best one configured (a rerank_model from --rerank-model, FASTRAG_RERANK_MODEL or "
                   "fastrag.toml; else cohere when CO_API_KEY is set; else embedder), named on stderr.")
@click.option("--rerank-model",
              help="embedder: a Model2Vec model (default: the store's); cross-encoder: a local model folder "
                   "(required); cohere: the model (default rerank-v3.5). With --rerank alone: a rerank_model "
                   "(a cross-encoder folder, cohere[:MODEL] or embedder).")
@click.option("--candidate-k", type=click.IntRange(1, 10_000),
              help="First-stage candidates: per hybrid branch, and what the reranker reads (with --rerank). "
                   "Default: the embedder's measured value (40 with the shipped model, 200 otherwise).")
@click.option("--model", "model", help="The embedder's model (default: the one the store recorded).")
@click.option("--language", "language",
              help="The question's language for BM25 (an ISO 639-1 code), or auto to detect it with Lingua among "
                   "the languages of the store's documents. Default: each language the store holds.")
@click.option("--offset", default=0, show_default=True, type=click.IntRange(min=0),
              help="Skip this many results: the next page (--top-k 5 --offset 5 prints results 6 to 10).")
@click.option("--group-by", "group_by",
              help="One result per value of this metadata key (source_uri, parent_id, ...), with its best chunk.")
@click.option("--user-id", "user_id", help="Search only this tenant's documents (written with user_id=).")
@click.option("--agent-id", "agent_id", help="Search only this agent's documents (written with agent_id=).")
@_fusion_options
@_threshold_options
@_embedder_options
def search(query: str, store_url: str | None, top_k: int, mode: str | None, filter_json: str | None,
           include_glob: tuple[str, ...], exclude_glob: tuple[str, ...], path_filter: str | None,
           as_json: bool, lexical_store_url: str | None, rerank: str, rerank_model: str | None,
           candidate_k: int | None, model: str | None, language: str | None, offset: int, group_by: str | None,
           user_id: str | None, agent_id: str | None, embedder_options: dict[str, Any],
           threshold_options: dict[str, Any], fusion_options: dict[str, Any]) -> None:
    """Search the index for QUERY and print the best documents.

    Score thresholds (--min-score, --min-relative-score, --min-vector-score, --min-keyword-score, or their
    FASTRAG_* settings) may leave fewer than --top-k results, or none.
    """
    from fastrag.filters import parse_filter

    settings = _settings({"store": store_url, "mode": mode, "lexical_store": lexical_store_url,
                          "embedding_model": model, **embedder_options, **threshold_options})
    _check_thresholds(settings, rerank=rerank)
    _language_options(language, detect_all=False)  # a bad code is refused before the store is opened
    kb_settings, request = _search_request(settings, {
        "mode": mode, "top_k": top_k, "candidate_k": candidate_k, "include_glob": include_glob or None,
        "exclude_glob": exclude_glob or None, "path_filter": path_filter, "language": language,
        "group_by": group_by, **threshold_options, **fusion_options,
    })
    rerank_given = click.get_current_context().get_parameter_source("rerank") is click.core.ParameterSource.COMMANDLINE

    async def go() -> Any:
        node = parse_filter(filter_json)
        async with _open_knowledge_base(settings, rerank=rerank, rerank_model=rerank_model, kb_settings=kb_settings,
                                        rerank_given=rerank_given) as (kb, reranking):
            # a path filter that stopped at max_k candidates says so in result.incomplete (never "no match")
            result = await kb.search_result(query, filter=node, offset=offset, user_id=user_id, agent_id=agent_id,
                                            **{**request, **reranking})  # fmt: skip
            if result.error is not None:
                raise result.error
            return result

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        result = _run(go, settings.store)
    from fastrag.retrieval.hybrid import SkippedBranchWarning

    for warning in caught:  # e.g. an unreachable threshold
        if not issubclass(warning.category, SkippedBranchWarning):  # said below, for this question
            click.echo(f"warning: {warning.message}", err=True)
    for name, why in result.skipped_branches.items():  # decided when built, or per question (--language auto)
        click.echo(f"warning: hybrid branch {name!r} is not run: {why}", err=True)
    hits = list(result.documents)
    incomplete = dict(result.incomplete)
    if result.zero_vector_branches:
        click.echo(f"warning: the question embedded to the zero vector (none of its words is in the embedding "
                   f"model's vocabulary): no results from {', '.join(result.zero_vector_branches)}", err=True)
    if as_json:
        click.echo(json.dumps({"query": query, "mode": settings.mode, "rerank": rerank,
                               "strategy": result.strategy,
                               "zero_vector_branches": list(result.zero_vector_branches),
                               "skipped_branches": dict(result.skipped_branches),
                               "thresholds": _thresholds_set(settings),
                               "settings": _resolved_json(result.settings),
                               "documents": [d.to_dict() for d in hits], "incomplete": incomplete},
                              ensure_ascii=False, indent=2))
        return
    why = "; ".join(incomplete.values())
    if not hits:
        if incomplete:
            click.echo(f"No document passed the path rules among those examined, but the search is incomplete: {why}. "
                       "Narrow it with a folder glob (--include-glob 'folder/**') or --filter.")
        elif _thresholds_set(settings):
            cuts = ", ".join(f"{k}={v:g}" for k, v in _thresholds_set(settings).items())
            click.echo(f"No documents {'past the first ' + str(offset) + ' ' if offset else ''}matched at or above "
                       f"the score thresholds ({cuts}).")
        else:
            click.echo(f"No documents past the first {offset}." if offset else "No documents matched.")
        return
    if incomplete:
        click.echo(f"Incomplete: {why}.", err=True)
    for doc in hits:
        title = doc.metadata.get(TITLE) or ""
        snippet = " ".join(doc.content.split())[:200]
        more = f"  (+{len(doc.group_chunks)} more matching chunks)" if doc.group_chunks else ""
        click.echo(f"{doc.rank + 1:>2}. [{doc.score:.4f}] {doc.source_label}  {title}{more}")
        click.echo(f"    {snippet}")


# ------------------------------------------------------------------------------------------------ ask


@main.command()
@click.argument("question")
@click.option("--store", "store_url", help="Store URL (default: sqlite:///.fastrag/fastrag.db, or FASTRAG_STORE).")
@click.option("--top-k", "-k", type=int, help="How many retrieved documents the LLM reads (default 5, or FASTRAG_TOP_K).")
@click.option("--mode", type=click.Choice(MODES), help="Retrieval mode (default: hybrid, or FASTRAG_MODE); auto: by corpus size.")
@click.option("--filter", "filter_json", help="Metadata filter as JSON (as for search).")
@click.option("--lexical-store", "lexical_store_url",
              help="A second store for BM25, for a vector store without full text (or FASTRAG_LEXICAL_STORE).")
@click.option("--rerank", type=click.Choice(("none", BEST_RERANKER, *RERANKERS)), default="none", show_default=True,
              is_flag=False, flag_value=BEST_RERANKER,
              help="Rerank --candidate-k candidates before the LLM reads the best --top-k (as for search; "
                   "--rerank alone: the best one configured).")
@click.option("--rerank-model", help="The reranker's model (as for search).")
@click.option("--candidate-k", type=click.IntRange(1, 10_000),
              help="First-stage candidates: per hybrid branch, and what the reranker reads (with --rerank).")
@click.option("--llm-base-url", help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1 (or FASTRAG_LLM_BASE_URL).")
@click.option("--llm-model", help="The model the endpoint serves (or FASTRAG_LLM_MODEL).")
@click.option("--json", "as_json", is_flag=True, help="Print the answer, its status, citations and sources as JSON.")
@click.option("--model", "model", help="The embedder's model (default: the one the store recorded).")
@click.option("--include-glob", multiple=True, help="Read only sources whose source_uri matches (repeatable).")
@click.option("--exclude-glob", multiple=True, help="Skip sources whose source_uri matches (repeatable).")
@click.option("--path-filter", help="Read only sources whose source_uri matches this regular expression.")
@click.option("--language", "language", help="The question's language for BM25 (a code, or auto), as for search.")
@_fusion_options
@_threshold_options
@_embedder_options
def ask(question: str, store_url: str | None, top_k: int | None, mode: str | None, filter_json: str | None,
        lexical_store_url: str | None, rerank: str, rerank_model: str | None, candidate_k: int | None,
        llm_base_url: str | None, llm_model: str | None, as_json: bool, model: str | None,
        include_glob: tuple[str, ...], exclude_glob: tuple[str, ...], path_filter: str | None, language: str | None,
        embedder_options: dict[str, Any], threshold_options: dict[str, Any], fusion_options: dict[str, Any]) -> None:
    """Answer QUESTION with an LLM from the indexed documents, citing them as [n].

    Needs an OpenAI-compatible chat-completions endpoint (--llm-base-url and --llm-model, or
    FASTRAG_LLM_BASE_URL and FASTRAG_LLM_MODEL; the key from FASTRAG_LLM_API_KEY or OPENAI_API_KEY).
    When retrieval fails or finds nothing, the LLM is not asked.
    """
    import os

    from fastrag.filters import parse_filter
    from fastrag.llm import OpenAICompatibleLLM
    from fastrag.querying import QueryEngine, retrieve_with_status

    settings = _settings({"store": store_url, "mode": mode, "lexical_store": lexical_store_url,
                          "llm_base_url": llm_base_url, "llm_model": llm_model, "embedding_model": model,
                          **embedder_options, **threshold_options})
    _check_thresholds(settings, rerank=rerank)
    if not settings.llm_base_url or not settings.llm_model:
        click.echo("error: `fastrag ask` needs an LLM endpoint: set --llm-base-url and --llm-model (or "
                   "FASTRAG_LLM_BASE_URL and FASTRAG_LLM_MODEL) to an OpenAI-compatible chat-completions server",
                   err=True)
        sys.exit(EXIT_INVALID)
    kb_settings, request = _search_request(settings, {
        "mode": mode, "top_k": top_k, "candidate_k": candidate_k, "include_glob": include_glob or None,
        "exclude_glob": exclude_glob or None, "path_filter": path_filter, "language": language,
        **threshold_options, **fusion_options,
    })
    rerank_given = click.get_current_context().get_parameter_source("rerank") is click.core.ParameterSource.COMMANDLINE

    async def go() -> Any:
        node = parse_filter(filter_json)
        async with OpenAICompatibleLLM(base_url=settings.llm_base_url, model=settings.llm_model,
                                       api_key=os.environ.get("FASTRAG_LLM_API_KEY") or None) as llm:
            async with _open_knowledge_base(settings, rerank=rerank, rerank_model=rerank_model, kb_settings=kb_settings,
                                            rerank_given=rerank_given) as (kb, reranking):
                retriever = kb.as_retriever(**{**request, **reranking})
                k = kb.resolve(**{**request, **reranking}).top_k
                engine = QueryEngine(retriever=retriever, llm=llm, k=k)
                retrieval = await retrieve_with_status(retriever, question, k=k, filter=node)
                if retrieval.retrieval_failed:  # never ask the LLM without its sources
                    _retrieval_failed(retrieval.error, settings.store)
                try:
                    return await engine.answer(question, retrieval)
                except BackendError as exc:  # past retrieval, only the LLM calls a backend
                    return exc

    answer = _run(go, settings.store)
    if isinstance(answer, BackendError):
        where = "" if settings.llm_base_url in str(answer) else f"{settings.llm_base_url}: "
        click.echo(f"error: LLM failed: {where}{answer}", err=True)
        sys.exit(EXIT_LLM)
    if as_json:
        click.echo(json.dumps({
            "question": question,
            "answer": answer.text,
            "status": answer.status,
            "partial": answer.partial,
            "citations": [{"number": c.number, "id": c.document.id} for c in answer.citations],
            "invalid_citations": list(answer.invalid_citations),
            "sources": [d.to_dict() for d in answer.sources],
        }, ensure_ascii=False, indent=2))
    else:
        click.echo(answer.text)
        if answer.sources:
            cited = {c.number for c in answer.citations}
            click.echo("\nSources:")
            for number, doc in enumerate(answer.sources, start=1):
                mark = "*" if number in cited else " "
                title = doc.metadata.get(TITLE) or ""
                click.echo(f"{mark}[{number}] {doc.source_label}  {title}".rstrip())
        if answer.invalid_citations:
            numbers = ", ".join(f"[{n}]" for n in answer.invalid_citations)
            click.echo(f"warning: the answer cites {numbers}, which name no source", err=True)
        if answer.partial:
            click.echo("warning: some retrieval branches failed; the answer may miss what they would have found",
                       err=True)


# ----------------------------------------------------------------------------------------------- eval


@main.command(name="eval")
@click.argument("dataset_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--split", default="test", show_default=True, help="Which qrels/{split}.tsv to use.")
@click.option("--mode", type=click.Choice(EVAL_MODES), help="Retrieval mode (default: hybrid).")
@click.option("--top-k", default=100, show_default=True, help="Documents retrieved per query (>= 100 for Recall@100).")
@click.option("--store", "store_url", help="Index into this store instead of a temporary one.")
@click.option("--model", "model", help="The embedder's model (as for index; default: the embedder's default).")
@click.option("--embedding-cache", "embedding_cache",
              help="Reuse corpus embeddings by model and text from this SQLite file ('off': none; default: "
                   "embedding-cache.db beside --store when given, for embedders other than model2vec).")
@click.option("--json", "as_json", is_flag=True, help='Print {"ndcg@10", "recall@100", "mrr@10"} as JSON.')
@click.option("--lexical-store", "lexical_store_url",
              help="A second store for BM25, for a vector store without full text (or FASTRAG_LEXICAL_STORE).")
@click.option("--rerank", type=click.Choice(["none", "embedder", "cross-encoder"]), default="none", show_default=True,
              help="Rerank each query's --top-k candidates: bi-encoder cosine (embedder) or a cross-encoder.")
@click.option("--rerank-model",
              help="embedder: a Model2Vec model (default: --model's); cross-encoder: a local model folder (required).")
@click.option("--language", "language",
              help="The dataset's language (ISO 639-1, e.g. de): documents and queries are analysed for BM25 with "
                   "its stemmer. Default: English analysis.")
@click.option("--allow-missing", is_flag=True,
              help="Score even if documents the qrels judge relevant are missing from the corpus (they count as "
                   "never retrieved; a warning counts them). Without it, that is an error (exit 1).")
@_embedder_options
def eval_(dataset_dir: Path, split: str, mode: str | None, top_k: int, store_url: str | None,
          model: str | None, embedding_cache: str | None, as_json: bool, lexical_store_url: str | None, rerank: str,
          rerank_model: str | None, language: str | None, allow_missing: bool,
          embedder_options: dict[str, Any]) -> None:
    """Evaluate retrieval on a BEIR dataset folder: nDCG@10, Recall@100, MRR@10.

    On a terminal, progress bars show the corpus being indexed and the queries answered, with rates and
    ETA (on stderr). Documents judged relevant in the qrels but missing from the corpus are an error unless
    --allow-missing is given.
    """
    import tempfile

    from fastrag.evaluation.beir_eval import evaluate_beir

    if top_k < 100:
        click.echo(f"error: --top-k must be at least 100 to report Recall@100, got {top_k}", err=True)
        sys.exit(EXIT_INVALID)
    settings = _settings({"mode": mode, "embedding_model": model, "lexical_store": lexical_store_url,
                          "embedding_cache": embedding_cache, **embedder_options})
    if settings.mode not in EVAL_MODES:  # FASTRAG_MODE=auto or fastrag.toml: eval measures one fixed mode
        click.echo(f"error: eval ranks with one mode ({', '.join(EVAL_MODES)}), not {settings.mode!r} "
                   "(FASTRAG_MODE or fastrag.toml); give --mode", err=True)
        sys.exit(EXIT_INVALID)
    if _thresholds_set(settings):  # from FASTRAG_MIN_* or fastrag.toml: say so rather than drop them unsaid
        cuts = ", ".join(f"{k}={v:g}" for k, v in _thresholds_set(settings).items())
        click.echo(f"warning: eval ranks without score thresholds; the settings' {cuts} are not applied "
                   "(the metrics measure the ranking)", err=True)
    if _is_auto(language):
        click.echo("error: --language for eval is the dataset's language code (e.g. de), not auto", err=True)
        sys.exit(EXIT_INVALID)
    # normalised: "RU", "rus" -> "ru"
    language = _language_options(language, detect_all=False, allow_auto=False).get("language")

    if rerank == "embedder":
        _warn_same_model_rerank(rerank_model, settings.embedding_model)

    async def go() -> dict[str, float]:
        with tempfile.TemporaryDirectory(prefix="fastrag-eval-") as tmp, _EvalProgress() as progress:
            url = store_url or f"sqlite:///{tmp}/eval.db"
            async with AsyncExitStack() as stack:
                embedder = None
                if settings.mode != "keyword":
                    embedder = await stack.enter_async_context(open_embedder(settings.embedding_model, settings=settings))
                cache_path = None
                if embedder is not None and (store_url or settings.embedding_cache):
                    from dataclasses import replace

                    cache_path = embedding_cache_path(replace(settings, store=url), embedder_kind=_embedder_kind(embedder))
                return await evaluate_beir(dataset_dir, split=split, mode=settings.mode, top_k=top_k, store_url=url,
                                           embedding_model=embedder.name if embedder is not None else None,
                                           embedder=embedder, embedding_cache=cache_path,
                                           lexical_store_url=settings.lexical_store, rerank=rerank,
                                           rerank_model=rerank_model, language=language,
                                           allow_missing=allow_missing, progress=progress.update)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scores = _run(go, store_url)
    for warning in caught:
        click.echo(f"warning: {warning.message}", err=True)
    report = {key: scores[key] for key in ("ndcg@10", "recall@100", "mrr@10")}
    if as_json:
        click.echo(json.dumps(report))
    else:
        reranked = "" if rerank == "none" else f", rerank={rerank}"
        reranked += f", language={language}" if language else ""
        click.echo(f"{dataset_dir} ({split}, mode={settings.mode}{reranked}): "
                   + ", ".join(f"{k} = {v:.4f}" for k, v in report.items()))


class _EvalProgress:
    """Progress bars for ``fastrag eval`` on stderr, when it is a terminal: corpus documents written and
    queries answered, each with its rate and ETA."""

    def __init__(self) -> None:
        self._progress: Any = None
        self._tasks: dict[str, Any] = {}

    def __enter__(self) -> _EvalProgress:
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TaskProgressColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
                TextColumn("{task.fields[rate]}"), TimeRemainingColumn(), TimeElapsedColumn(),
                console=Console(stderr=True),
            )  # fmt: skip
            self._progress.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def update(self, phase: str, done: int, total: int) -> None:
        if self._progress is None:
            return
        if phase not in self._tasks:
            label = "Indexing corpus" if phase == "index" else "Queries"
            self._tasks[phase] = self._progress.add_task(label, total=total, rate="")
        task = self._tasks[phase]
        elapsed = self._progress.tasks[task].elapsed or 0.0
        unit = "docs" if phase == "index" else "queries"
        rate = f"{done / elapsed:,.0f} {unit}/s" if elapsed > 0 and done else ""
        self._progress.update(task, completed=done, rate=rate)


def _warn_same_model_rerank(rerank_model: str | None, embedding_model: str | None) -> None:
    """``--rerank embedder`` with the retrieval model itself re-scores by the vector branch's own cosine: on
    SciFact it lowered the default hybrid's nDCG@10 from 0.694 to 0.396, BM25's from 0.688 to 0.449
    (docs/reranking.md), and it costs an embedding per candidate. Say so at run time."""
    from fastrag.ingestion.steps.embedding import DEFAULT_MODEL

    model = rerank_model or embedding_model or DEFAULT_MODEL.name
    retrieval = embedding_model or DEFAULT_MODEL.name
    if Path(model).name == Path(retrieval).name:
        click.echo(
            f"warning: --rerank embedder with {Path(model).name!r}, the model that retrieved, re-scores by the "
            "vector branch's own cosine: slower, and worse than not reranking (SciFact, default hybrid: nDCG@10 "
            "0.694 without, 0.396 with; see docs/reranking.md). Pass --rerank-model with a stronger embedding "
            "model, or use --rerank cross-encoder or cohere.",
            err=True,
        )

# ---------------------------------------------------------------------------------------------- serve


@main.command()
@click.option("--config", "config_path", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="knowledge_bases.toml: [knowledge_bases.NAME] tables, optional [serve] limits and tokens "
                   "(docs/serve.md).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="TCP port.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(("critical", "error", "warning", "info", "debug")),
              help="Level of the server log and of the JSON access log (fastrag.serve.access, at info).")
def serve(config_path: Path, host: str, port: int, log_level: str) -> None:
    """Serve knowledge bases over HTTP: retrieve, add and delete documents, health, metrics, OpenAPI.

    One event loop (uvicorn); every knowledge base is opened at startup and closed at shutdown. A store
    that cannot be opened stops the startup (exit status 3).
    """
    import logging

    from fastrag.serve.config import load_config

    try:
        config = load_config(config_path)
        try:
            from fastrag.serve.app import app_from_config
            from fastrag.serve.server import run
        except ImportError as exc:
            raise ConfigurationError(f'fastrag serve needs the serve extra: pip install "fastrag-retrieval[serve]" ({exc})') from exc
        app = app_from_config(config)
    except ConfigurationError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    served = logging.getLogger("fastrag.serve")
    served.addHandler(handler)
    served.setLevel(log_level.upper())
    # uvicorn with the [serve] connection limits (fastrag.serve.server); its own access log is off:
    # fastrag.serve.access logs each request once, with its stage timings
    run(app, config.server, host=host, port=port, log_level=log_level)


# ------------------------------------------------------------------------------------------------ mcp


@main.command()
@click.option("--config", "config_path", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="knowledge_bases.toml, the file fastrag serve reads: [knowledge_bases.NAME] tables, optional "
                   "[serve] limits and tokens (docs/mcp.md).")
@click.option("--transport", type=click.Choice(("stdio", "http")), default="stdio", show_default=True,
              help="stdio: an MCP client starts this command and talks over its stdin/stdout; http: streamable "
                   "HTTP at http://HOST:PORT/mcp, with the [serve.tokens] bearer tokens.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on (http).")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="TCP port (http).")
@click.option("--log-level", default="warning", show_default=True,
              type=click.Choice(("critical", "error", "warning", "info", "debug")),
              help="Level of the server log, on stderr (stdout is the protocol's, over stdio).")
def mcp(config_path: Path, transport: str, host: str, port: int, log_level: str) -> None:
    """Serve knowledge bases as Model Context Protocol tools: one search tool per knowledge base.

    Each tool is the knowledge base's as_tool() (its input schema: query, top_k, offset, filter) and answers
    what the tool's run() returns; a failed retrieval is a tool error naming the store. Every knowledge base
    is opened at startup; one that cannot be opened stops the server.
    """
    import logging

    from fastrag.serve.config import load_config

    try:
        config = load_config(config_path)
        from fastrag.mcp import server_from_config  # the mcp extra: a ConfigurationError with the pip command

        served = server_from_config(config, transport=transport)
    except ConfigurationError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logger = logging.getLogger("fastrag.mcp")
    logger.addHandler(handler)
    logger.setLevel(log_level.upper())
    if transport == "stdio":
        _run(served.run_stdio)  # a store that cannot be opened: exit 3, naming it
    else:
        served.run_http(config.server, host=host, port=port, log_level=log_level)


if __name__ == "__main__":
    main()
