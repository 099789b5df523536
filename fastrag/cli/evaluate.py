"""``fastrag eval``: nDCG, Recall and MRR on a BEIR dataset."""

from __future__ import annotations

import json
import sys
import warnings
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import click

from fastrag.cli.app import (
    EXIT_INVALID,
    embedder_kind,
    is_auto,
    main,
    parse_language_flag,
    run_command,
    settings_or_exit,
    thresholds_set,
    warn_same_model_rerank,
    with_embedder_options,
)
from fastrag.config import (
    EVAL_MODES,
    embedding_cache_path,
    open_embedder,
)

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
@with_embedder_options
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
    settings = settings_or_exit({"mode": mode, "embedding_model": model, "lexical_store": lexical_store_url,
                          "embedding_cache": embedding_cache, **embedder_options})
    if settings.mode not in EVAL_MODES:  # FASTRAG_MODE=auto or fastrag.toml: eval measures one fixed mode
        click.echo(f"error: eval ranks with one mode ({', '.join(EVAL_MODES)}), not {settings.mode!r} "
                   "(FASTRAG_MODE or fastrag.toml); give --mode", err=True)
        sys.exit(EXIT_INVALID)
    if thresholds_set(settings):  # from FASTRAG_MIN_* or fastrag.toml: say so rather than drop them unsaid
        cuts = ", ".join(f"{k}={v:g}" for k, v in thresholds_set(settings).items())
        click.echo(f"warning: eval ranks without score thresholds; the settings' {cuts} are not applied "
                   "(the metrics measure the ranking)", err=True)
    if is_auto(language):
        click.echo("error: --language for eval is the dataset's language code (e.g. de), not auto", err=True)
        sys.exit(EXIT_INVALID)
    # normalised: "RU", "rus" -> "ru"
    language = parse_language_flag(language, detect_all=False, allow_auto=False).get("language")

    if rerank == "embedder":
        warn_same_model_rerank(rerank_model, settings.embedding_model)

    async def go() -> dict[str, float]:
        with tempfile.TemporaryDirectory(prefix="fastrag-eval-") as tmp, EvalProgress() as progress:
            url = store_url or f"sqlite:///{tmp}/eval.db"
            async with AsyncExitStack() as stack:
                embedder = None
                if settings.mode != "keyword":
                    embedder = await stack.enter_async_context(open_embedder(settings.embedding_model, settings=settings))
                cache_path = None
                if embedder is not None and (store_url or settings.embedding_cache):
                    from dataclasses import replace

                    cache_path = embedding_cache_path(replace(settings, store=url), embedder_kind=embedder_kind(embedder))
                return await evaluate_beir(dataset_dir, split=split, mode=settings.mode, top_k=top_k, store_url=url,
                                           embedding_model=embedder.name if embedder is not None else None,
                                           embedder=embedder, embedding_cache=cache_path,
                                           lexical_store_url=settings.lexical_store, rerank=rerank,
                                           rerank_model=rerank_model, language=language,
                                           allow_missing=allow_missing, progress=progress.update)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scores = run_command(go, store_url)
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


class EvalProgress:
    """Progress bars for ``fastrag eval`` on stderr, when it is a terminal: corpus documents written and
    queries answered, each with its rate and ETA."""

    def __init__(self) -> None:
        self._progress: Any = None
        self._tasks: dict[str, Any] = {}

    def __enter__(self) -> EvalProgress:
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
