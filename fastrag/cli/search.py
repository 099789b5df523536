"""``fastrag search`` and ``fastrag ask``: knowledge-base searches whose flags are search settings."""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import click

from fastrag.cli.app import (
    EXIT_INVALID,
    EXIT_LLM,
    check_thresholds,
    main,
    parse_language_flag,
    retrieval_failed,
    run_command,
    settings_or_exit,
    thresholds_set,
    warn_same_model_rerank,
    with_embedder_options,
    with_fusion_options,
    with_threshold_options,
)
from fastrag.config import (
    MODES,
    RERANKERS,
    Settings,
    open_embedder,
    open_reranker,
    open_stores,
)
from fastrag.errors import BackendError, ConfigurationError, FastragError
from fastrag.models import TITLE

# --------------------------------------------------------------------------------------------- search


@asynccontextmanager
async def open_knowledge_base(
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
            rerank, rerank_model, said = best_reranker(settings, rerank_model)
            click.echo(f"reranking with {said}", err=True)
        if rerank == "embedder":
            warn_same_model_rerank(rerank_model, settings.embedding_model or store.embedding_model)
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
"""``--rerank`` given without a value: :func:`best_reranker` picks the reranker."""


def best_reranker(settings: Settings, rerank_model: str | None) -> tuple[str, str | None, str]:
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


def search_request(settings: Settings, given: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """``(knowledge-base layer, request)`` of a command-line search: the ``FASTRAG_*`` variables and
    ``fastrag.toml`` (``settings.search``) are the knowledge base's settings, over :data:`CLI_TOP_K`; the flags
    given, the mode and the score thresholds are the request. A bad value is invalid input (exit 1)."""
    from fastrag.settings import SearchSettings

    layer = {"top_k": CLI_TOP_K, **(settings.search.to_dict() if settings.search else {})}
    # the mode and the thresholds as load_settings merged them (flag, variable, file: it names each in its
    # errors) are checked together with the flags, so they go with the request
    request = {"mode": settings.mode, **thresholds_set(settings)}
    request.update({k: v for k, v in given.items() if v is not None and v != ()})
    try:
        kb_settings = SearchSettings.from_mapping(layer)
        SearchSettings.from_mapping(request)
    except FastragError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)
    return kb_settings, request


def resolved_json(resolved: Any) -> dict[str, Any]:
    """``{name: {"value", "origin"}}`` for every resolved setting (the reranker object as its repr)."""
    values = resolved.to_dict()
    return {name: {"value": values[name], "origin": resolved.origin(name)} for name in values}




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
@with_fusion_options
@with_threshold_options
@with_embedder_options
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

    settings = settings_or_exit({"store": store_url, "mode": mode, "lexical_store": lexical_store_url,
                          "embedding_model": model, **embedder_options, **threshold_options})
    check_thresholds(settings, rerank=rerank)
    parse_language_flag(language, detect_all=False)  # a bad code is refused before the store is opened
    kb_settings, request = search_request(settings, {
        "mode": mode, "top_k": top_k, "candidate_k": candidate_k, "include_glob": include_glob or None,
        "exclude_glob": exclude_glob or None, "path_filter": path_filter, "language": language,
        "group_by": group_by, **threshold_options, **fusion_options,
    })
    rerank_given = click.get_current_context().get_parameter_source("rerank") is click.core.ParameterSource.COMMANDLINE

    async def go() -> Any:
        node = parse_filter(filter_json)
        async with open_knowledge_base(settings, rerank=rerank, rerank_model=rerank_model, kb_settings=kb_settings,
                                        rerank_given=rerank_given) as (kb, reranking):
            # a path filter that stopped at max_k candidates says so in result.incomplete (never "no match")
            result = await kb.search_result(query, filter=node, offset=offset, user_id=user_id, agent_id=agent_id,
                                            **{**request, **reranking})  # fmt: skip
            if result.error is not None:
                raise result.error
            return result

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        result = run_command(go, settings.store)
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
                               "thresholds": thresholds_set(settings),
                               "settings": resolved_json(result.settings),
                               "documents": [d.to_dict() for d in hits], "incomplete": incomplete},
                              ensure_ascii=False, indent=2))
        return
    why = "; ".join(incomplete.values())
    if not hits:
        if incomplete:
            click.echo(f"No document passed the path rules among those examined, but the search is incomplete: {why}. "
                       "Narrow it with a folder glob (--include-glob 'folder/**') or --filter.")
        elif thresholds_set(settings):
            cuts = ", ".join(f"{k}={v:g}" for k, v in thresholds_set(settings).items())
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
@with_fusion_options
@with_threshold_options
@with_embedder_options
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

    settings = settings_or_exit({"store": store_url, "mode": mode, "lexical_store": lexical_store_url,
                          "llm_base_url": llm_base_url, "llm_model": llm_model, "embedding_model": model,
                          **embedder_options, **threshold_options})
    check_thresholds(settings, rerank=rerank)
    if not settings.llm_base_url or not settings.llm_model:
        click.echo("error: `fastrag ask` needs an LLM endpoint: set --llm-base-url and --llm-model (or "
                   "FASTRAG_LLM_BASE_URL and FASTRAG_LLM_MODEL) to an OpenAI-compatible chat-completions server",
                   err=True)
        sys.exit(EXIT_INVALID)
    kb_settings, request = search_request(settings, {
        "mode": mode, "top_k": top_k, "candidate_k": candidate_k, "include_glob": include_glob or None,
        "exclude_glob": exclude_glob or None, "path_filter": path_filter, "language": language,
        **threshold_options, **fusion_options,
    })
    rerank_given = click.get_current_context().get_parameter_source("rerank") is click.core.ParameterSource.COMMANDLINE

    async def go() -> Any:
        node = parse_filter(filter_json)
        async with OpenAICompatibleLLM(base_url=settings.llm_base_url, model=settings.llm_model,
                                       api_key=os.environ.get("FASTRAG_LLM_API_KEY") or None) as llm:
            async with open_knowledge_base(settings, rerank=rerank, rerank_model=rerank_model, kb_settings=kb_settings,
                                            rerank_given=rerank_given) as (kb, reranking):
                retriever = kb.as_retriever(**{**request, **reranking})
                k = kb.resolve(**{**request, **reranking}).top_k
                engine = QueryEngine(retriever=retriever, llm=llm, k=k)
                retrieval = await retrieve_with_status(retriever, question, k=k, filter=node)
                if retrieval.retrieval_failed:  # never ask the LLM without its sources
                    retrieval_failed(retrieval.error, settings.store)
                try:
                    return await engine.answer(question, retrieval)
                except BackendError as exc:  # past retrieval, only the LLM calls a backend
                    return exc

    answer = run_command(go, settings.store)
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
