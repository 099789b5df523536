"""End-to-end evaluation of a retrieval mode on a BEIR folder (what ``fastrag eval`` runs)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from fastrag.analysis import language_code
from fastrag.config import (
    Settings,
    build_retriever,
    new_store_analyzer,
    open_embedder,
    open_reranker,
    open_stores,
)
from fastrag.errors import ConfigurationError, IngestionError
from fastrag.evaluation.beir import BeirDataset, load_beir
from fastrag.evaluation.metrics import evaluate
from fastrag.evaluation.runner import run_retrieval
from fastrag.ingestion.steps.cache import CachedEmbedder, EmbeddingCache
from fastrag.models import LANGUAGE, Document
from fastrag.planning import question_language_options
from fastrag.retrieval._validation import check_positive_int

__all__ = ["RERANKERS", "MissingJudgedDocumentsWarning", "Progress", "evaluate_beir", "missing_judged_documents"]

Progress = Callable[[str, int, int], None]
"""A progress callback: ``(phase, done, total)``, phase ``"index"`` (corpus documents written) or
``"query"`` (queries answered)."""


class MissingJudgedDocumentsWarning(UserWarning):
    """Some documents the qrels judge are not in the corpus (``evaluate_beir(allow_missing=True)``)."""


async def _detected(docs: list[Document]) -> tuple[list[Document], str | None]:
    """``docs`` with ``metadata["language"]`` set to each one's detected language (title and text; a document
    that already has one keeps it, one the detector cannot place gets none), and the corpus's language: the
    language of at least :data:`ONE_LANGUAGE_SHARE` of them, else ``None``."""
    from collections import Counter

    import anyio.to_thread

    from fastrag.analysis import primary_language
    from fastrag.language import DOCUMENT_MIN_CONFIDENCE, default_language_detector

    detector = default_language_detector(min_confidence=DOCUMENT_MIN_CONFIDENCE)

    def detect_all() -> list[str | None]:
        return [primary_language(d.metadata.get(LANGUAGE)) or detector.detect(f"{d.metadata.get('title') or ''}\n{d.content}")
                for d in docs]

    languages = await anyio.to_thread.run_sync(detect_all)
    out = [d if code is None or d.metadata.get(LANGUAGE) == code else
           Document(id=d.id, content=d.content, metadata={**d.metadata, LANGUAGE: code})
           for d, code in zip(docs, languages, strict=True)]  # fmt: skip
    counts = Counter(languages)
    top, n = counts.most_common(1)[0] if counts else (None, 0)
    return out, top if top is not None and n >= ONE_LANGUAGE_SHARE * len(docs) else None


def missing_judged_documents(dataset: BeirDataset) -> list[str]:
    """The ids of documents the qrels judge relevant (score > 0) that are not in the corpus, sorted.

    Such a document can never be retrieved: every query judging it loses recall and nDCG for a reason that
    has nothing to do with retrieval (usually the qrels of another corpus, or a truncated corpus).
    """
    return sorted({doc_id for judged in dataset.qrels.values() for doc_id, score in judged.items()
                   if score > 0 and doc_id not in dataset.corpus})  # fmt: skip

RERANKERS = ("none", "embedder", "cross-encoder")
"""The ``rerank`` choices of :func:`evaluate_beir` (and ``fastrag eval --rerank``)."""

_BATCH = 1024

ONE_LANGUAGE_SHARE = 0.99
"""With no ``language``, the share of a corpus's documents detected as one language from which a store
created for it analyses in that language (Snowball's stopwords, as ``language=`` gives): a few documents
detected otherwise (a reference list, a table, a quotation) keep their own detected stemmer but do not
make the corpus multilingual. The documents are all known before the store is created, as they are not
when ``fastrag index`` reads files one by one (its new stores keep the default analysis; documents still
get their detected stemmer)."""


async def evaluate_beir(
    dataset_dir: str | Path,
    *,
    split: str = "test",
    mode: str = "hybrid",
    top_k: int = 100,
    store_url: str,
    embedding_model: str | None = None,
    lexical_store_url: str | None = None,
    concurrency: int = 8,
    rerank: str = "none",
    rerank_model: str | None = None,
    embedder: Any | None = None,
    embedding_cache: str | Path | None = None,
    language: str | None = None,
    allow_missing: bool = False,
    progress: Progress | None = None,
) -> dict[str, float]:
    """Index a BEIR corpus (one document per corpus entry, no chunking), run its queries, score the run.

    Args:
        dataset_dir: a BEIR folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/{split}.tsv``).
        split: which qrels file.
        mode: ``"hybrid"``, ``"vector"`` or ``"keyword"``.
        top_k: documents retrieved per query; metrics at cut-offs above it see only ``top_k`` documents.
        store_url: where to index (a fresh store is expected; existing ids are replaced).
        embedding_model: Model2Vec model (default: the shipped one), or an embedder's recorded name such as
            ``"sentence-transformers:all-MiniLM-L6-v2"`` (see :func:`~fastrag.config.open_embedder`); not
            loaded in keyword mode. Ignored when ``embedder`` is given.
        lexical_store_url: a second store for BM25 (for a vector store without full text).
        concurrency: queries in flight at once.
        rerank: ``"none"``; ``"embedder"``: rerank each query's ``top_k`` candidates by cosine with a Model2Vec
            model (:class:`~fastrag.rerankers.EmbedderReranker`); ``"cross-encoder"``: with a local
            cross-encoder (:class:`~fastrag.rerankers.CrossEncoderReranker`). Recall@``top_k`` is unchanged
            by reranking (the same candidates, reordered); nDCG and MRR measure the new order.
        rerank_model: the reranker's model: for ``"embedder"`` a Model2Vec model (default: the retrieval
            model, ``embedding_model``); for ``"cross-encoder"`` a local model folder (required).
        embedder: an :class:`~fastrag.protocols.Embedder` to use instead of building one from
            ``embedding_model``; it stays the caller's (not closed here).
        embedding_cache: an :class:`~fastrag.ingestion.EmbeddingCache` file: corpus vectors computed before
            with the same embedder are read from it (and new ones added), so a rerun embeds nothing.
        language: the dataset's language (ISO 639-1, e.g. ``"de"``): every document is indexed with
            ``metadata["language"]`` set to it and every query is analysed in it, so BM25 stems both
            sides with that language's Snowball stemmer; for a language with Snowball's stopword list
            (:data:`~fastrag.analysis.SNOWBALL_STOPWORD_LANGUAGES`) a SQLite store created here analyses
            in that language, which drops them on both sides (:func:`~fastrag.config.new_store_analyzer`).
            ``None`` (the default): each document's language is detected
            (:func:`~fastrag.language.default_language_detector`) and stamped, so it is stemmed in its
            language; when at least :data:`ONE_LANGUAGE_SHARE` of the documents are detected as one
            language, the corpus is taken as that language's: a SQLite store created here analyses in it
            as with ``language`` (Snowball's stopwords). Each query is analysed as a search without a
            language is (:func:`~fastrag.planning.question_language_options`): in the one language the
            store's documents were analysed in, or in its detected language among several.
        allow_missing: score even when documents the qrels judge relevant are missing from the corpus
            (:func:`missing_judged_documents`; they count as never retrieved), with a
            :class:`MissingJudgedDocumentsWarning`. By default that is an error: such scores measure the
            data, not retrieval.
        progress: called as ``progress(phase, done, total)`` while the corpus is written (``"index"``,
            documents) and while queries run (``"query"``).

    Returns:
        Mean nDCG, Recall and MRR at 10 and 100 over the split's queries (keys such as ``"ndcg@10"``).

    Raises:
        IngestionError: the dataset is missing or malformed, or (without ``allow_missing``) documents the
            qrels judge relevant are not in the corpus; the message counts them and names a few.
        BackendError: the store failed.
        ConfigurationError: an unknown ``rerank``, or ``"cross-encoder"`` without a local ``rerank_model``,
            or ``language`` is not a language code.
    """
    check_positive_int(top_k, "top_k")
    if rerank not in RERANKERS:
        raise ConfigurationError(f"unknown rerank {rerank!r}; expected one of {', '.join(RERANKERS)}")
    if rerank == "cross-encoder" and not rerank_model:
        raise ConfigurationError("rerank='cross-encoder' needs rerank_model: a local cross-encoder model folder")
    if language is not None:
        code = language_code(language)
        if code is None:
            raise ConfigurationError(f"language must be a registered language code such as 'de', got {language!r}")
        language = code
    dataset = load_beir(dataset_dir, split=split)
    missing = missing_judged_documents(dataset)
    if missing:
        judged = len({doc_id for judged in dataset.qrels.values() for doc_id, score in judged.items() if score > 0})
        message = (
            f"{len(missing)} of {judged} documents judged relevant in qrels/{split}.tsv are not in corpus.jsonl "
            f"(e.g. {', '.join(repr(m) for m in missing[:3])}): they can never be retrieved, so the scores would "
            "measure the data, not retrieval; are these the qrels of this corpus?"
        )
        if not allow_missing:
            raise IngestionError(f"{dataset_dir}: {message} (allow_missing=True, or --allow-missing, scores anyway)")
        warnings.warn(f"{dataset_dir}: {message}; they count as never retrieved", MissingJudgedDocumentsWarning,
                      stacklevel=2)
    docs = list(dataset.corpus.values())
    corpus_language = language
    if language is not None:
        docs = [Document(id=d.id, content=d.content, metadata={**d.metadata, LANGUAGE: language}) for d in docs]
    else:
        docs, corpus_language = await _detected(docs)
    owned = embedder is None and mode != "keyword"
    if owned:
        embedder = open_embedder(embedding_model)
    if mode == "keyword":
        embedder = None
    base_embedder = embedder
    tick = progress or (lambda phase, done, total: None)
    try:
        name = embedder.name if embedder is not None else None
        settings = Settings(store=store_url, lexical_store=lexical_store_url)
        analyzer = new_store_analyzer(settings, corpus_language)  # a new SQLite store analyses in the dataset's language
        async with AsyncExitStack() as stack, open_stores(settings, embedding_model=name, analyzer=analyzer) as (
            store,
            lexical,
        ):
            retrieval_embedder = embedder
            if embedder is not None and embedding_cache is not None:
                cache = await stack.enter_async_context(EmbeddingCache(embedding_cache))
                embedder = CachedEmbedder(embedder, cache)
            for start in range(0, len(docs), _BATCH):
                batch = docs[start : start + _BATCH]
                embeddings = None
                if embedder is not None:
                    texts = [f"{d.metadata.get('title', '')}\n{d.content}".strip() for d in batch]
                    embeddings = await embedder.embed_documents(texts)
                if mode != "keyword":
                    await store.upsert(batch, embeddings=embeddings)
                if lexical is not store or mode == "keyword":
                    await lexical.upsert(batch, embeddings=embeddings if lexical is store else None)
                tick("index", start + len(batch), len(docs))
            reranker = None
            if rerank != "none":
                reranker = await stack.enter_async_context(
                    open_reranker(rerank, rerank_model, embedding_model=embedding_model)
                )
            options = await question_language_options(lexical, language) if mode != "vector" else {}
            retriever = build_retriever(mode, store=store, embedder=retrieval_embedder, lexical_store=lexical,
                                        reranker=reranker, rerank_candidate_k=top_k, **options)
            answered = 0

            def query_done() -> None:
                nonlocal answered
                answered += 1
                tick("query", answered, len(dataset.queries))

            tick("query", 0, len(dataset.queries))
            run = await run_retrieval(retriever, dataset.queries, k=top_k, concurrency=concurrency,
                                      on_query_done=query_done)
    finally:
        if owned and base_embedder is not None:
            await base_embedder.aclose()
    return evaluate(run, dataset.qrels, ks=(10, 100))
