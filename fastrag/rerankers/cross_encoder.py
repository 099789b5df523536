"""A cross-encoder reranker over sentence-transformers, loaded from a local folder only.

A cross-encoder reads the question and one candidate together and outputs a relevance score; it is
slower than a bi-encoder but usually the stronger reranker (Nogueira & Cho, *Passage Re-ranking with
BERT*, 2019). Install with ``pip install "fastrag-retrieval[cross-encoder]"`` (sentence-transformers and torch).

It never downloads: the model is read from a folder on disk (one saved with ``CrossEncoder.save`` or
``save_pretrained``, or a Hugging Face snapshot), with ``local_files_only=True`` and
``trust_remote_code=False``, whatever ``HF_HUB_OFFLINE`` says. A hub id such as
``"cross-encoder/ms-marco-MiniLM-L6-v2"`` is refused: download the model once where you have network
(``huggingface-cli download ... --local-dir DIR``), ship the folder, and pass its path.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import numpy as np

from fastrag.errors import ConfigurationError, InvalidParameterError, RerankerError
from fastrag.lifecycle import AsyncResource
from fastrag.models import Document
from fastrag.rerankers._ranking import check_rerank_args, ranked_by_scores, text_of

__all__ = ["CrossEncoderReranker"]

INSTALL_HINT = 'pip install "fastrag-retrieval[cross-encoder]"'


class CrossEncoderReranker(AsyncResource):
    """Reranks candidates with a sentence-transformers ``CrossEncoder`` from a local model folder.

    The model loads on first use or when entering ``async with`` (once, in a worker thread); scoring runs
    in a worker thread too. Scores are the model's output for each (question, candidate) pair, higher is
    better: for a one-label model with sentence-transformers' default activation, a sigmoid in [0, 1];
    their scale is the model's own. Ties keep the candidates' order.

    Args:
        model_path: the model folder (it must exist and hold ``config.json``).
        batch_size: pairs scored per forward pass (bounds peak memory).
        max_length: truncate each pair to this many tokens (default: the model's own limit).
        device: torch device, ``"cpu"`` by default (``"cuda"``, ``"mps"`` where available).
        include_title: put ``metadata["title"]`` before the content of each candidate.

    Raises:
        ConfigurationError: sentence-transformers is not installed (the message has the pip command), or
            ``model_path`` is not a local model folder (a hub id, a missing folder, no ``config.json``).
        InvalidParameterError: ``batch_size`` or ``max_length`` is not a positive int.
    """

    name = "cross-encoder"

    def __init__(
        self,
        model_path: str | Path,
        *,
        batch_size: int = 32,
        max_length: int | None = None,
        device: str = "cpu",
        include_title: bool = True,
    ) -> None:
        for label, value in (("batch_size", batch_size), ("max_length", max_length)):
            if value is None and label == "max_length":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InvalidParameterError(f"{label} must be a positive int, got {value!r}")
        if not isinstance(model_path, str | Path) or not str(model_path):
            raise ConfigurationError(f"model_path must be a local model folder, got {model_path!r}")
        path = Path(model_path).expanduser()
        if not path.is_dir():
            raise ConfigurationError(
                f"{str(model_path)!r} is not a local folder; CrossEncoderReranker never downloads a model. "
                "Download it once where there is network (huggingface-cli download NAME --local-dir DIR) "
                "and pass the folder"
            )
        if not (path / "config.json").is_file():
            raise ConfigurationError(f"{str(path)!r} has no config.json: it is not a saved model folder")
        if importlib.util.find_spec("sentence_transformers") is None:
            raise ConfigurationError(f"CrossEncoderReranker needs sentence-transformers: {INSTALL_HINT}")
        self.model_path = path
        self.batch_size = batch_size
        self.max_length = max_length
        self.device = device
        self.include_title = include_title
        self._model: Any = None
        self._async_lock = anyio.Lock()
        self._thread_lock = threading.Lock()

    async def load(self) -> None:
        """Load the model now, in a worker thread (idempotent).

        Raises:
            ConfigurationError: sentence-transformers cannot be imported.
            RerankerError: the folder does not hold a loadable cross-encoder, or the reranker is closed.
        """
        if self._model is not None:
            return
        async with self._async_lock:
            if self._model is None:
                await anyio.to_thread.run_sync(self._load_sync)

    def _load_sync(self) -> None:
        with self._thread_lock:
            if self.closed:
                raise RerankerError(f"{self!r} is closed")
            if self._model is not None:
                return
            try:
                from sentence_transformers import CrossEncoder
            except ImportError as exc:
                raise ConfigurationError(f"CrossEncoderReranker needs sentence-transformers: {INSTALL_HINT}") from exc
            try:
                self._model = CrossEncoder(
                    str(self.model_path),
                    device=self.device,
                    max_length=self.max_length,
                    local_files_only=True,
                    trust_remote_code=False,
                )
            except Exception as exc:  # torch, transformers and tokenizers errors share no base class
                raise RerankerError(f"cannot load a cross-encoder from {str(self.model_path)!r}: {exc}") from exc

    async def rerank(self, query: str, documents: Sequence[Document], *, k: int | None = None) -> list[Document]:
        """Copies of ``documents`` best first by the cross-encoder's score for (``query``, document), at most ``k``.

        Returns:
            Copies stamped with ``score`` (the model's, higher is better) and zero-based ``rank``; ``[]`` for
            no documents (the model is not loaded).

        Raises:
            InvalidParameterError: bad arguments (see :class:`~fastrag.protocols.Reranker`).
            ConfigurationError: sentence-transformers cannot be imported.
            RerankerError: the model failed to load or to score, gave other than one score per pair, or
                the reranker is closed.
        """
        docs = check_rerank_args(query, documents, k)
        if not docs:
            return []
        if self.closed:
            raise RerankerError(f"{self!r} is closed")
        await self.load()
        pairs = [(query, text_of(d, include_title=self.include_title)) for d in docs]
        scores = await anyio.to_thread.run_sync(self._predict, pairs)
        return ranked_by_scores(docs, scores, k)

    def _predict(self, pairs: list[tuple[str, str]]) -> list[float]:
        model = self._model
        if model is None or self.closed:
            raise RerankerError(f"{self!r} is closed")
        try:
            raw = model.predict(pairs, batch_size=self.batch_size, show_progress_bar=False, convert_to_numpy=True)
        except Exception as exc:  # torch and tokenizer errors share no base class
            raise RerankerError(f"the cross-encoder failed to score {len(pairs)} pairs: {exc}") from exc
        scores = np.asarray(raw, dtype=np.float64)
        if scores.ndim == 2 and scores.shape[1] == 1:
            scores = scores[:, 0]
        if scores.shape != (len(pairs),):
            raise RerankerError(
                f"the cross-encoder returned scores of shape {scores.shape} for {len(pairs)} pairs; a reranker "
                "needs a one-label model (one score per pair)"
            )
        return scores.tolist()

    _close_if_enter_fails = False  # a model that failed to load holds nothing; load() may be tried again

    async def _aopen(self) -> None:
        await self.load()

    async def _aclose(self) -> None:
        """Release the model; the reranker cannot be used afterwards."""
        self._model = None

    def __repr__(self) -> str:
        return f"CrossEncoderReranker({str(self.model_path)!r})"
