"""Pluggable ingestion steps: embedders, and the embedding cache.

* :class:`Model2VecEmbedder`: a static Model2Vec model, local (extra ``model2vec``; the default).
* :class:`SentenceTransformerEmbedder`: a local sentence-transformers model (extra ``sentence-transformers``).
* :class:`OpenAICompatibleEmbedder`: any ``/v1/embeddings`` endpoint (core: ``httpx``).
* :class:`CohereEmbedder`: Cohere's embed API (extra ``cohere``).
* :class:`EmbeddingCache`, :class:`CachedEmbedder`: vectors kept on disk by model and text.

The names load on first use (PEP 562): importing this package imports no SDK and no model library.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from fastrag.ingestion.steps.cache import CachedEmbedder, EmbeddingCache
    from fastrag.ingestion.steps.cohere import CohereEmbedder
    from fastrag.ingestion.steps.embedding import (
        DEFAULT_MODEL,
        Model2VecEmbedder,
        l2_normalize,
    )
    from fastrag.ingestion.steps.openai_compatible import OpenAICompatibleEmbedder
    from fastrag.ingestion.steps.sentence_transformer import SentenceTransformerEmbedder

_EXPORTS: dict[str, str] = {
    "CachedEmbedder": "fastrag.ingestion.steps.cache",
    "CohereEmbedder": "fastrag.ingestion.steps.cohere",
    "DEFAULT_MODEL": "fastrag.ingestion.steps.embedding",
    "EmbeddingCache": "fastrag.ingestion.steps.cache",
    "Model2VecEmbedder": "fastrag.ingestion.steps.embedding",
    "OpenAICompatibleEmbedder": "fastrag.ingestion.steps.openai_compatible",
    "SentenceTransformerEmbedder": "fastrag.ingestion.steps.sentence_transformer",
    "l2_normalize": "fastrag.ingestion.steps.embedding",
}

__all__ = [
    "DEFAULT_MODEL",
    "CachedEmbedder",
    "CohereEmbedder",
    "EmbeddingCache",
    "Model2VecEmbedder",
    "OpenAICompatibleEmbedder",
    "SentenceTransformerEmbedder",
    "l2_normalize",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
