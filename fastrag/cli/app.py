"""The ``fastrag`` command group and what its commands share: exit codes, running a command, settings and
the options every search command takes."""

from __future__ import annotations

import functools
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import anyio
import click

from fastrag.config import (
    EMBEDDERS,
    Settings,
    load_settings,
    split_embedder_name,
)
from fastrag.errors import BackendError, FastragError

T = TypeVar("T")

EXIT_INVALID = 1
EXIT_STORE = 3
EXIT_LLM = 4


def run_command(fn: Callable[[], Awaitable[T]], store_url: str | None = None) -> T:
    try:
        return anyio.run(fn)
    except BackendError as exc:
        store_failed(exc, store_url)
    except FastragError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)
    except ExceptionGroup as group:  # several hybrid branches failed at once
        errors = leaves(group)
        backend = next((e for e in errors if isinstance(e, BackendError)), None)
        if backend is not None:
            store_failed(backend, store_url)
        if all(isinstance(e, FastragError) for e in errors):
            click.echo(f"error: {errors[0]}", err=True)
            sys.exit(EXIT_INVALID)
        raise


def store_failed(exc: BackendError, store_url: str | None) -> NoReturn:
    message = str(exc) if exc.store else f"{store_url or 'store'}: {exc}"
    # a remote embedder's errors name its endpoint ({base_url}/embeddings, Cohere's .../v2/embed)
    what = "embedding endpoint" if (exc.store or "").endswith(("/embeddings", "/v2/embed")) else "store"
    click.echo(f"error: {what} failed: {message}", err=True)
    sys.exit(EXIT_STORE)


def retrieval_failed(error: BaseException | None, store_url: str | None) -> NoReturn:
    errors = leaves(error) if isinstance(error, BaseExceptionGroup) else [error]
    backend = next((e for e in errors if isinstance(e, BackendError)), None)
    if backend is not None:
        store_failed(backend, store_url)
    click.echo(f"error: retrieval failed: {store_url or 'store'}: {type(error).__name__}: {error}", err=True)
    sys.exit(EXIT_STORE)


def leaves(group: BaseExceptionGroup) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


def settings_or_exit(overrides: dict[str, Any]) -> Settings:
    """Resolve settings; a bad setting is invalid input (exit 1), never a traceback."""
    try:
        return load_settings(overrides)
    except FastragError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)


EMBEDDER_SETTINGS = (
    "embedder", "embedder_base_url", "embedder_dimensions", "embedder_query_prefix", "embedder_document_prefix",
    "embedder_batch_size", "embedder_max_concurrency",
)


def with_embedder_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the embedder options to a command; it receives them as one ``embedder_options`` dict (settings
    overrides, ``None`` where not given). Put it right above the ``def``."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        options = {key: kwargs.pop(key) for key in EMBEDDER_SETTINGS}
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


THRESHOLD_FLAGS = ("min_score", "min_relative_score", "min_vector_score", "min_keyword_score")


def with_threshold_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the score-threshold options to a command; it receives them as one ``threshold_options`` dict
    (settings overrides, ``None`` where not given). Put it right above the ``def``."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        options = {key: kwargs.pop(key) for key in THRESHOLD_FLAGS}
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


def check_thresholds(settings: Settings, *, rerank: str) -> None:
    """Refuse (exit 1, one line) a threshold the mode cannot apply, before any store is opened."""
    from fastrag.config import SETTING_VARIABLES
    from fastrag.retrieval.thresholds import check_thresholds_fit

    def said(name: str) -> str:
        return f"{name}={getattr(settings, name)!r} (--{name.replace('_', '-')}, {SETTING_VARIABLES[name]} or fastrag.toml)"

    try:
        check_thresholds_fit(settings.mode, reranked=rerank != "none", said=said,
                             **{name: getattr(settings, name) for name in THRESHOLD_FLAGS})  # fmt: skip
    except FastragError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)


def thresholds_set(settings: Settings) -> dict[str, float]:
    return {name: getattr(settings, name) for name in THRESHOLD_FLAGS if getattr(settings, name) is not None}


def embedder_kind(embedder: Any) -> str:
    return split_embedder_name(getattr(embedder, "name", None))[0] or "model2vec"



@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="fastrag-retrieval")
def main() -> None:
    """fastrag: index documents and retrieve the ones that answer a question (BM25, k-NN, hybrid)."""



def is_auto(language: str | None) -> bool:
    """Whether ``--language`` asks for detection (``auto``, in any case)."""
    return language is not None and language.strip().lower() == "auto"


def parse_language_flag(language: str | None, *, detect_all: bool, allow_auto: bool = True) -> dict[str, Any]:
    """``--language``: ``{}``, ``{"language": code}``, or (``auto`` when indexing) a Lingua detector over
    every language it knows, in low-accuracy mode (documents are long enough for it). A bad value is
    invalid input (exit 1); ``allow_auto=False`` for a command that takes a code only."""
    from fastrag.analysis import language_code

    if language is None:
        return {}
    if is_auto(language):
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



_SIZE_UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "kib": 1024, "mib": 1024**2, "gib": 1024**3}


def parse_size(text: str, *, option: str = "--max-file-size") -> int:
    """``"100MiB"`` -> bytes; a bad size is a usage error (exit 2) naming ``option``."""
    import re

    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _SIZE_UNITS or float(match.group(1)) * _SIZE_UNITS[unit] < 1:
        raise click.BadParameter(f"{text!r} is not a size such as 500000, 20MB or 1GiB", param_hint=option)
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


def shell_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)



def warn_same_model_rerank(rerank_model: str | None, embedding_model: str | None) -> None:
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




def with_fusion_options(command: Callable[..., Any]) -> Callable[..., Any]:
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
