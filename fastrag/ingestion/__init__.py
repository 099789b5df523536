"""Ingestion: parse files, cut them into chunks, embed them and write them to stores.

::

    from fastrag.ingestion import IngestionPipeline, Model2VecEmbedder

    async with Model2VecEmbedder() as embedder:
        report = await IngestionPipeline(embedder=embedder, vector_store=store).run(["docs/"])

The names below load on first use (PEP 562), so a program that only embeds queries (``fastrag search``)
never imports the parsers, the chunker, Markdown parsing or the progress bars.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastrag._lazy import lazy_exports

if TYPE_CHECKING:  # pragma: no cover
    from fastrag.ingestion.chunking import Chunk, Chunker
    from fastrag.ingestion.parsers import (
        BEIR_CORPUS_NAME,
        FileKind,
        ParsedDocument,
        Section,
        file_kind,
        parse,
        parse_beir_corpus,
        parse_html,
        parse_markdown,
        parse_text,
    )
    from fastrag.ingestion.pipeline import CHUNKER, HEADINGS, IngestionFailure, IngestionPipeline, IngestionReport
    from fastrag.ingestion.sources import SkippedFile
    from fastrag.ingestion.steps.cache import CachedEmbedder, EmbeddingCache
    from fastrag.ingestion.steps.cohere import CohereEmbedder
    from fastrag.ingestion.steps.embedding import DEFAULT_MODEL, Model2VecEmbedder, l2_normalize
    from fastrag.ingestion.steps.openai_compatible import OpenAICompatibleEmbedder
    from fastrag.ingestion.steps.sentence_transformer import SentenceTransformerEmbedder

_EXPORTS: dict[str, str] = {
    "BEIR_CORPUS_NAME": "fastrag.ingestion.parsers",
    "CachedEmbedder": "fastrag.ingestion.steps.cache",
    "CohereEmbedder": "fastrag.ingestion.steps.cohere",
    "EmbeddingCache": "fastrag.ingestion.steps.cache",
    "OpenAICompatibleEmbedder": "fastrag.ingestion.steps.openai_compatible",
    "SentenceTransformerEmbedder": "fastrag.ingestion.steps.sentence_transformer",
    "CHUNKER": "fastrag.ingestion.pipeline",
    "DEFAULT_MODEL": "fastrag.ingestion.steps.embedding",
    "HEADINGS": "fastrag.ingestion.pipeline",
    "Chunk": "fastrag.ingestion.chunking",
    "Chunker": "fastrag.ingestion.chunking",
    "FileKind": "fastrag.ingestion.parsers",
    "IngestionFailure": "fastrag.ingestion.pipeline",
    "IngestionPipeline": "fastrag.ingestion.pipeline",
    "IngestionReport": "fastrag.ingestion.pipeline",
    "SkippedFile": "fastrag.ingestion.sources",
    "Model2VecEmbedder": "fastrag.ingestion.steps.embedding",
    "ParsedDocument": "fastrag.ingestion.parsers",
    "Section": "fastrag.ingestion.parsers",
    "file_kind": "fastrag.ingestion.parsers",
    "l2_normalize": "fastrag.ingestion.steps.embedding",
    "parse": "fastrag.ingestion.parsers",
    "parse_beir_corpus": "fastrag.ingestion.parsers",
    "parse_html": "fastrag.ingestion.parsers",
    "parse_markdown": "fastrag.ingestion.parsers",
    "parse_text": "fastrag.ingestion.parsers",
}

__all__ = [
    "BEIR_CORPUS_NAME",
    "CHUNKER",
    "DEFAULT_MODEL",
    "HEADINGS",
    "CachedEmbedder",
    "Chunk",
    "Chunker",
    "CohereEmbedder",
    "EmbeddingCache",
    "FileKind",
    "IngestionFailure",
    "IngestionPipeline",
    "IngestionReport",
    "SkippedFile",
    "Model2VecEmbedder",
    "OpenAICompatibleEmbedder",
    "ParsedDocument",
    "Section",
    "SentenceTransformerEmbedder",
    "file_kind",
    "l2_normalize",
    "parse",
    "parse_beir_corpus",
    "parse_html",
    "parse_markdown",
    "parse_text",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
