"""Ingestion: parse files, cut them into chunks, embed them and write them to stores.

::

    from fastrag.ingestion import IngestionPipeline, Model2VecEmbedder

    async with Model2VecEmbedder() as embedder:
        report = await IngestionPipeline(embedder=embedder, vector_store=store).run(["docs/"])
"""

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
from fastrag.ingestion.steps.embedding import DEFAULT_MODEL, Model2VecEmbedder, l2_normalize

__all__ = [
    "BEIR_CORPUS_NAME",
    "CHUNKER",
    "DEFAULT_MODEL",
    "HEADINGS",
    "Chunk",
    "Chunker",
    "FileKind",
    "IngestionFailure",
    "IngestionPipeline",
    "IngestionReport",
    "Model2VecEmbedder",
    "ParsedDocument",
    "Section",
    "file_kind",
    "l2_normalize",
    "parse",
    "parse_beir_corpus",
    "parse_html",
    "parse_markdown",
    "parse_text",
]
