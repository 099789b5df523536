"""Dense embedders for ingestion and querying.

:class:`Model2VecEmbedder` runs a `Model2Vec <https://github.com/MinishLab/model2vec>`_ static model
locally (needs the ``model2vec`` extra: ``pip install "fastrag[model2vec]"``). By default it loads the
model folder shipped inside fastrag, ``fastrag/data/static-minilm-d256`` (256 dimensions, distilled from
all-MiniLM-L6-v2; provenance, licence and measured quality in that folder's ``README.md``), so it works
offline with no download.
"""

from __future__ import annotations

import importlib.util
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import anyio
import anyio.to_thread
import numpy as np

from fastrag.errors import ConfigurationError, EmbeddingError, InvalidParameterError

if TYPE_CHECKING:  # pragma: no cover
    from model2vec import StaticModel

__all__ = ["DEFAULT_MODEL", "Model2VecEmbedder", "l2_normalize"]

DEFAULT_MODEL: Path = Path(__file__).resolve().parents[2] / "data" / "static-minilm-d256"
"""The Model2Vec model folder shipped with fastrag: 256 dimensions, offline, Apache-2.0."""

_INSTALL_HINT = 'Model2VecEmbedder needs the model2vec package: pip install "fastrag[model2vec]"'
# A Hugging Face Hub id: "name" or "owner/name", made of letters, digits, "-", "_" and ".".
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Scale each row of ``vectors`` to unit L2 norm, as float32.

    Args:
        vectors: ``(n, dim)`` array of any float dtype.

    Returns:
        ``(n, dim)`` float32; an all-zero row stays all zero (never NaN).
    """
    matrix = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    out = np.zeros_like(matrix)
    np.divide(matrix, norms, out=out, where=norms > 0)
    return out


class Model2VecEmbedder:
    """A local Model2Vec static embedding model.

    The model loads on first use (in a worker thread, once, even under concurrent calls) or when entering
    ``async with``; encoding also runs in a worker thread, so the event loop never blocks. The same
    vectors serve documents and queries (a static model is symmetric).

    Examples:
        >>> import anyio
        >>> from fastrag.ingestion import Model2VecEmbedder
        >>> async def main():
        ...     async with Model2VecEmbedder() as embedder:
        ...         return await embedder.embed_documents(["first text", "second text"])
        >>> vectors = anyio.run(main)
        >>> vectors.shape, vectors.dtype.name
        ((2, 256), 'float32')

    Args:
        model: a local model folder (a :class:`~pathlib.Path`, or a string naming an existing folder or
            any path-like string) or a Hugging Face Hub id such as ``"minishlab/potion-base-8M"``. A hub
            id is looked up in the local Hugging Face cache first and downloaded only when missing there.
            A :class:`~pathlib.Path` is never looked up on the hub. Defaults to :data:`DEFAULT_MODEL`.
        batch_size: texts encoded per call to the model; bounds peak memory. Must be positive.

    Raises:
        ConfigurationError: the ``model2vec`` package is not installed.
        InvalidParameterError: ``batch_size`` is not positive.
    """

    def __init__(self, model: str | Path = DEFAULT_MODEL, *, batch_size: int = 256) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise InvalidParameterError(f"batch_size must be a positive integer, got {batch_size!r}")
        if importlib.util.find_spec("model2vec") is None:
            raise ConfigurationError(_INSTALL_HINT)
        self._batch_size = batch_size
        self._local: Path | None
        self._hub_id: str | None
        if isinstance(model, Path):
            self._local, self._hub_id = model, None
        elif isinstance(model, str) and model:
            looks_like_hub_id = bool(_HUB_ID.match(model)) and not model.startswith(".")
            if Path(model).expanduser().exists() or not looks_like_hub_id:
                self._local, self._hub_id = Path(model).expanduser(), None
            else:
                self._local, self._hub_id = None, model
        else:
            raise InvalidParameterError(f"model must be a folder path or a hub id, got {model!r}")
        self._model: StaticModel | None = None
        self._dimension: int | None = None
        self._closed = False
        self._async_lock = anyio.Lock()
        self._thread_lock = threading.Lock()

    # ------------------------------------------------------------------------------------ properties

    @property
    def name(self) -> str:
        """The model folder's name (``"static-minilm-d256"`` by default) or the hub id."""
        if self._hub_id is not None:
            return self._hub_id
        assert self._local is not None
        return self._local.resolve().name or str(self._local)

    @property
    def dimension(self) -> int:
        """Width of every vector (256 for the default model).

        Known once the model is loaded. Read before that (outside ``async with`` and before any
        embedding), it loads the model synchronously, blocking the caller once for the load time
        (tens of milliseconds for the default model); prefer ``async with`` or :meth:`load` first.

        Raises:
            EmbeddingError: the model cannot be loaded, or the embedder is closed.
        """
        if self._dimension is None:
            self._load_sync()
        assert self._dimension is not None
        return self._dimension

    # ------------------------------------------------------------------------------------- lifecycle

    async def load(self) -> None:
        """Load the model now, in a worker thread (idempotent; safe under concurrent calls).

        Raises:
            EmbeddingError: the folder is missing or is not a Model2Vec model, or the hub id cannot be
                resolved; the message names the path or id. The embedder is closed.
            ConfigurationError: ``model2vec`` cannot be imported.
        """
        if self._model is not None and not self._closed:
            return
        async with self._async_lock:
            if self._model is None or self._closed:
                await anyio.to_thread.run_sync(self._load_sync)

    async def aclose(self) -> None:
        """Release the model. Idempotent; the embedder cannot be used afterwards."""
        self._closed = True
        self._model = None

    async def __aenter__(self) -> Self:
        await self.load()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # ------------------------------------------------------------------------------------- embedding

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` for indexing.

        Args:
            texts: the texts; an empty string embeds as the zero vector. Texts longer than the model's
                ``max_length`` (512 tokens for the default model) are truncated.

        Returns:
            ``(len(texts), dimension)`` float32 with L2-normalised rows (so a dot product is cosine
            similarity, in [-1, 1]); a text with no known token gives an all-zero row, never NaN.
            Empty input gives shape ``(0, dimension)``.

        Raises:
            InvalidParameterError: ``texts`` is a single string or holds a non-string.
            EmbeddingError: the model failed to load or to encode, or the embedder is closed.
        """
        if isinstance(texts, str | bytes):
            raise InvalidParameterError("texts must be a sequence of strings, not a single string")
        batch = list(texts)
        for i, text in enumerate(batch):
            if not isinstance(text, str):
                raise InvalidParameterError(f"texts[{i}] must be a string, got {type(text).__name__}")
        await self.load()
        model, dimension = self._require_model()
        if not batch:
            return np.zeros((0, dimension), dtype=np.float32)
        parts = []
        for start in range(0, len(batch), self._batch_size):
            chunk = batch[start : start + self._batch_size]
            parts.append(await anyio.to_thread.run_sync(self._encode, model, chunk))
        return np.concatenate(parts, axis=0) if len(parts) > 1 else parts[0]

    async def embed_query(self, text: str) -> np.ndarray:
        """Embed one query; the same model and normalisation as :meth:`embed_documents`.

        Returns:
            ``(dimension,)`` float32, L2-normalised (all zero when no token is known).

        Raises:
            InvalidParameterError: ``text`` is not a string.
            EmbeddingError: the model failed to load or to encode, or the embedder is closed.
        """
        if not isinstance(text, str):
            raise InvalidParameterError(f"text must be a string, got {type(text).__name__}")
        return (await self.embed_documents([text]))[0]

    # -------------------------------------------------------------------------------------- internals

    def _require_model(self) -> tuple[Any, int]:
        if self._closed:
            raise EmbeddingError(f"Model2VecEmbedder({self.name!r}) is closed")
        assert self._model is not None and self._dimension is not None
        return self._model, self._dimension

    def _load_sync(self) -> None:
        with self._thread_lock:
            if self._closed:
                raise EmbeddingError(f"Model2VecEmbedder({self.name!r}) is closed")
            if self._model is not None:
                return
            try:
                from model2vec import StaticModel
            except ImportError as exc:
                raise ConfigurationError(_INSTALL_HINT) from exc
            if self._local is not None:
                where = f"model folder {str(self._local)!r}"
                if not self._local.is_dir():
                    raise EmbeddingError(f"cannot load Model2Vec model: {where} does not exist or is not a folder")
                source: str | Path = self._local
            else:
                assert self._hub_id is not None
                where, source = f"hub model {self._hub_id!r}", self._hub_id
            try:
                model = StaticModel.from_pretrained(source, force_download=False)
                dimension = int(model.dim)
            except Exception as exc:  # model2vec, safetensors, tokenizers and hub errors share no base
                raise EmbeddingError(f"cannot load Model2Vec {where}: {exc}") from exc
            self._model, self._dimension = model, dimension

    @staticmethod
    def _encode(model: Any, texts: list[str]) -> np.ndarray:
        try:
            raw = model.encode(texts, normalize=False, use_multiprocessing=False, batch_size=len(texts))
        except Exception as exc:  # tokenizer or numpy errors; the SDK has no error base class
            raise EmbeddingError(f"Model2Vec failed to encode {len(texts)} texts: {exc}") from exc
        return l2_normalize(np.asarray(raw).reshape(len(texts), -1))
