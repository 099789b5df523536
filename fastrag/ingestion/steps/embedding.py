"""Dense embedders for ingestion and querying.

:class:`Model2VecEmbedder` runs a `Model2Vec <https://github.com/MinishLab/model2vec>`_ static model
locally. By default it loads the model folder shipped inside fastrag, ``fastrag/data/static-minilm-d256``
(256 dimensions, distilled from all-MiniLM-L6-v2; provenance, licence and measured quality in that folder's
``README.md``), so it works offline with no download and with the default install (``pip install
fastrag-retrieval``, no extra).

A local folder in model2vec's own layout (``config.json``, ``model.safetensors`` holding only the
``embeddings`` matrix, ``tokenizer.json``), as the shipped model is, is read directly with ``safetensors``
and ``tokenizers`` and encoded here exactly as model2vec 0.10's ``StaticModel.encode`` does; this skips
model2vec's import of ``huggingface_hub`` and its model-card code, which took most of a cold ``fastrag
search``. Any other model (a hub id, a sentence-transformers layout, a vocabulary-quantized or weighted
model, an int8 matrix, a config this module does not know) is loaded by ``model2vec.StaticModel``, and the
reason is logged at INFO level on the ``fastrag.ingestion.steps.embedding`` logger; only those need the
``model2vec`` extra (``pip install "fastrag-retrieval[model2vec]"``). ``safetensors`` and ``tokenizers`` are core
dependencies.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import re
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.to_thread
import numpy as np

from fastrag.embedding_languages import declared_languages
from fastrag.errors import ConfigurationError, EmbeddingError, InvalidParameterError
from fastrag.lifecycle import AsyncResource

__all__ = ["DEFAULT_MODEL", "Model2VecEmbedder", "l2_normalize"]

DEFAULT_MODEL: Path = Path(__file__).resolve().parents[2] / "data" / "static-minilm-d256"
"""The Model2Vec model folder shipped with fastrag: 256 dimensions, offline, Apache-2.0."""

_INSTALL_HINT = 'this model needs the model2vec package: pip install "fastrag-retrieval[model2vec]"'
# safetensors and tokenizers are core dependencies: missing, the installation itself is broken
_CORE_HINT = ("Model2VecEmbedder needs safetensors and tokenizers, dependencies of fastrag-retrieval: "
              'reinstall it (pip install --force-reinstall "fastrag-retrieval")')
# A Hugging Face Hub id: "name" or "owner/name", made of letters, digits, "-", "_" and ".".
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")

logger = logging.getLogger(__name__)


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


class Model2VecEmbedder(AsyncResource):
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
        max_concurrency: the most batches encoded at once across concurrent calls; ``None`` (default):
            no bound of its own (anyio's worker-thread limit applies).
        languages: the languages the model was trained for (ISO 639-1 codes or BCP 47 tags, ``{"en"}``);
            ``None`` (default): the model's entry in :data:`~fastrag.embedding_languages.MODEL_LANGUAGES`,
            and when it has none an :class:`~fastrag.embedding_languages.UnknownLanguagesWarning`.

    A local folder in model2vec's own layout is read with ``safetensors`` and ``tokenizers`` (no
    ``huggingface_hub`` import) and gives the same vectors as ``model2vec.StaticModel``; any other model
    loads through ``StaticModel.from_pretrained`` (see the module docstring).

    Raises:
        ConfigurationError: ``model`` is a hub id and the ``model2vec`` package is not installed (a local
            folder that only model2vec reads raises it when the model loads).
        InvalidParameterError: ``batch_size`` or ``max_concurrency`` is not positive; ``languages`` is not a
            collection of language codes.
    """

    def __init__(
        self,
        model: str | Path = DEFAULT_MODEL,
        *,
        batch_size: int = 256,
        max_concurrency: int | None = None,
        languages: Iterable[str] | None = None,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise InvalidParameterError(f"batch_size must be a positive integer, got {batch_size!r}")
        if max_concurrency is not None and (
            isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) or max_concurrency <= 0
        ):
            raise InvalidParameterError(f"max_concurrency must be a positive integer or None, got {max_concurrency!r}")
        self._batch_size = batch_size
        self._limiter = anyio.CapacityLimiter(max_concurrency) if max_concurrency is not None else None
        self._local: Path | None
        self._hub_id: str | None
        self._name: str | None = None
        if isinstance(model, Path):
            self._local, self._hub_id = model, None
        elif isinstance(model, str) and model:
            looks_like_hub_id = bool(_HUB_ID.match(model)) and not model.startswith(".")
            if Path(model).expanduser().exists() or not looks_like_hub_id:
                self._local, self._hub_id = Path(model).expanduser(), None
            else:
                self._local, self._hub_id = None, model
                if importlib.util.find_spec("model2vec") is None:  # only model2vec reads hub models
                    raise ConfigurationError(f"hub model {model!r}: {_INSTALL_HINT}")
        else:
            raise InvalidParameterError(f"model must be a folder path or a hub id, got {model!r}")
        self._model: _StaticEncoder | None = None
        self._dimension: int | None = None
        self._async_lock = anyio.Lock()
        self._thread_lock = threading.Lock()
        self._languages = declared_languages(self.name, languages, embedder="Model2VecEmbedder")

    # ------------------------------------------------------------------------------------ properties

    @property
    def languages(self) -> frozenset[str] | None:
        """The languages (ISO 639-1) the model covers: ``languages=`` as given, else the model's entry in
        :data:`~fastrag.embedding_languages.MODEL_LANGUAGES`; ``None`` when unknown (then a hybrid runs the
        dense branch on questions in every language; :class:`~fastrag.protocols.DeclaresLanguages`)."""
        return self._languages

    @property
    def name(self) -> str:
        """The model folder's name (``"static-minilm-d256"`` by default) or the hub id."""
        if self._hub_id is not None:
            return self._hub_id
        assert self._local is not None
        if self._name is None:  # resolved once: the planner and the fusion defaults read it on every search
            self._name = self._local.resolve().name or str(self._local)
        return self._name

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
            ConfigurationError: the model needs ``model2vec`` and it cannot be imported, or ``safetensors``
                or ``tokenizers`` cannot be.
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
            parts.append(await anyio.to_thread.run_sync(self._encode, model, chunk, self.name, limiter=self._limiter))
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

    def _require_model(self) -> tuple[_StaticEncoder, int]:
        if self.closed:
            raise EmbeddingError(f"Model2VecEmbedder({self.name!r}) is closed")
        assert self._model is not None and self._dimension is not None
        return self._model, self._dimension

    def _load_sync(self) -> None:
        with self._thread_lock:
            if self.closed:
                raise EmbeddingError(f"Model2VecEmbedder({self.name!r}) is closed")
            if self._model is not None:
                return
            model: _StaticEncoder
            if self._local is not None:
                where = f"model folder {str(self._local)!r}"
                if not self._local.is_dir():
                    raise EmbeddingError(f"cannot load Model2Vec model: {where} does not exist or is not a folder")
                try:
                    model = _StaticModelFolder.load(self._local)
                except _NeedsModel2Vec as reason:
                    logger.info("%s: %s; loading it with model2vec.StaticModel", where, reason)
                    model = _Model2VecModel.load(self._local, where)
                except ImportError as exc:
                    raise ConfigurationError(_CORE_HINT) from exc
                except EmbeddingError:
                    raise
                except Exception as exc:  # safetensors, tokenizers, JSON and OS errors share no base
                    raise EmbeddingError(f"cannot load Model2Vec {where}: {exc}") from exc
            else:
                assert self._hub_id is not None
                model = _Model2VecModel.load(self._hub_id, f"hub model {self._hub_id!r}")
            self._model, self._dimension = model, model.dim

    @staticmethod
    def _encode(model: _StaticEncoder, texts: list[str], name: str) -> np.ndarray:
        try:
            raw = model.encode(texts)
        except Exception as exc:  # tokenizer or numpy errors; the SDK has no error base class
            raise EmbeddingError(f"Model2Vec model {name!r} failed to encode {len(texts)} texts: {exc}") from exc
        return l2_normalize(np.asarray(raw).reshape(len(texts), -1))


# ------------------------------------------------------------------------------------- model loading


class _StaticEncoder(Protocol):
    """What the embedder needs of a loaded static model."""

    dim: int

    def encode(self, texts: list[str]) -> np.ndarray:
        """``(len(texts), dim)`` mean-pooled token vectors, not normalised, in the model's float dtype."""
        ...  # pragma: no cover


class _NeedsModel2Vec(Exception):
    """A model folder this module does not read itself; the message says why."""


class _Model2VecModel:
    """A model loaded by ``model2vec.StaticModel.from_pretrained`` (imports ``huggingface_hub``)."""

    def __init__(self, model: Any) -> None:
        self._model = model
        self.dim = int(model.dim)

    @classmethod
    def load(cls, source: str | Path, where: str) -> _Model2VecModel:
        try:
            from model2vec import StaticModel
        except ImportError as exc:
            raise ConfigurationError(f"{where}: {_INSTALL_HINT}") from exc
        try:
            return cls(StaticModel.from_pretrained(source, force_download=False))
        except Exception as exc:  # model2vec, safetensors, tokenizers and hub errors share no base
            raise EmbeddingError(f"cannot load Model2Vec {where}: {exc}") from exc

    def encode(self, texts: list[str]) -> np.ndarray:
        return self._model.encode(texts, normalize=False, use_multiprocessing=False, batch_size=len(texts))


_MODEL2VEC_MAX_LENGTH = 512
"""model2vec's ``max_length`` when a model's config has none (``model2vec.model.DEFAULT_MAX_LENGTH``)."""


class _StaticModelFolder:
    """A Model2Vec folder read with ``safetensors`` and ``tokenizers`` alone.

    :meth:`encode` gives exactly what model2vec 0.10's ``StaticModel.encode(texts, normalize=False)``
    gives for the same folder (``tests/test_static_model_loading.py`` compares them bit for bit):

    1. with a ``max_length`` (the config's, default 512), each text is first cut to ``max_length`` times
       the median token length of the vocabulary, in characters;
    2. the tokenizer, without padding and truncated to ``max_length`` tokens, encodes the texts without
       special tokens, and the unknown token is dropped;
    3. a text's vector is the mean of its tokens' rows of the embedding matrix, computed in the matrix's
       dtype (texts grouped by token count, one ``mean`` per group, as model2vec groups them); a text with
       no token left is the zero vector.

    Args:
        matrix: ``(vocabulary size, dim)`` float embedding matrix.
        tokenizer: a ``tokenizers.Tokenizer`` whose ids index ``matrix``; this object owns it.
        max_length: token limit per text, or ``None`` for none.
    """

    def __init__(self, matrix: np.ndarray, tokenizer: Any, *, max_length: int | None) -> None:
        self._matrix = matrix
        self._tokenizer = tokenizer
        self._max_length = max_length
        self._median_token_length: int | None = None
        self.dim = int(matrix.shape[1])
        tokenizer.no_padding()
        if max_length is None:
            tokenizer.no_truncation()
        else:
            tokenizer.enable_truncation(max_length)
        self._unk_id = _unknown_token_id(tokenizer)
        if tokenizer.get_vocab_size(with_added_tokens=True) < 3:
            self._token_length()  # the lazy cut in encode() relies on a median of at least 1 character

    @classmethod
    def load(cls, folder: Path) -> _StaticModelFolder:
        """Read ``folder``.

        Raises:
            _NeedsModel2Vec: the folder is not one this class reproduces model2vec on.
            EmbeddingError: the matrix and the vocabulary differ in size.
            ImportError: ``safetensors`` or ``tokenizers`` is missing.
            Exception: what ``json``, ``safetensors`` or ``tokenizers`` raise for unreadable files.
        """
        config_path, tensors_path, tokenizer_path = (
            folder / "config.json", folder / "model.safetensors", folder / "tokenizer.json"
        )
        if not (config_path.is_file() and tensors_path.is_file() and tokenizer_path.is_file()):
            raise _NeedsModel2Vec("not model2vec's own layout (config.json, model.safetensors, tokenizer.json)")
        config = json.loads(config_path.read_text(encoding="utf-8"))
        max_length = _max_length(config)

        from safetensors import safe_open
        from tokenizers import Tokenizer

        with safe_open(str(tensors_path), framework="numpy") as tensors:
            names = sorted(tensors.keys())
            if names != ["embeddings"]:
                raise _NeedsModel2Vec(f"model.safetensors holds {names}, not only 'embeddings'")
            matrix = tensors.get_tensor("embeddings")
        if matrix.ndim != 2 or matrix.dtype.kind != "f":
            raise _NeedsModel2Vec(f"the embedding matrix is {matrix.dtype} of shape {matrix.shape}, not 2-D float")
        tokenizer = Tokenizer.from_file(str(tokenizer_path))
        vocabulary = tokenizer.get_vocab_size(with_added_tokens=True)
        if vocabulary != matrix.shape[0]:
            raise EmbeddingError(
                f"cannot load Model2Vec model folder {str(folder)!r}: the tokenizer has {vocabulary} tokens "
                f"but the embedding matrix has {matrix.shape[0]} rows"
            )
        return cls(matrix, tokenizer, max_length=max_length)

    def encode(self, texts: list[str]) -> np.ndarray:
        """``(len(texts), dim)`` mean-pooled token vectors in the matrix's dtype, not normalised."""
        if self._max_length is not None and any(len(text) > self._max_length for text in texts):
            # a text of at most max_length characters is never cut: the cut is max_length x a median >= 1
            cut = self._max_length * self._token_length()
            texts = [text[:cut] for text in texts]
        encodings = self._tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        unk = self._unk_id
        ids = [[i for i in e.ids if i != unk] if unk is not None else e.ids for e in encodings]
        out = np.zeros((len(texts), self.dim), dtype=self._matrix.dtype)
        rows_by_count: dict[int, list[int]] = {}
        for row, token_ids in enumerate(ids):
            if token_ids:
                rows_by_count.setdefault(len(token_ids), []).append(row)
        for rows in rows_by_count.values():
            out[rows] = self._matrix[np.array([ids[row] for row in rows], dtype=np.int64)].mean(axis=1)
        return out

    def _token_length(self) -> int:
        """The median length in characters of the vocabulary's tokens, rounded down (computed once)."""
        if self._median_token_length is None:
            lengths = [len(token) for token in self._tokenizer.get_vocab()]
            self._median_token_length = int(np.median(lengths))
        return self._median_token_length


def _max_length(config: object) -> int | None:
    """The token limit a model2vec ``config.json`` sets; :class:`_NeedsModel2Vec` for a config not handled."""
    if not isinstance(config, dict):
        raise _NeedsModel2Vec("config.json is not a JSON object")
    if config.get("model_type", "model2vec") != "model2vec":
        raise _NeedsModel2Vec(f"model_type is {config['model_type']!r}, not 'model2vec'")
    if config.get("pooling", "mean") != "mean":
        raise _NeedsModel2Vec(f"pooling is {config['pooling']!r}, not 'mean'")
    if "vocabulary_quantization" in config:
        raise _NeedsModel2Vec("the model is vocabulary-quantized")
    max_length = config.get("max_length", _MODEL2VEC_MAX_LENGTH)
    if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1):
        raise _NeedsModel2Vec(f"max_length is {max_length!r}, not a positive integer or null")
    return max_length


def _unknown_token_id(tokenizer: Any) -> int | None:
    """The id whose tokens model2vec drops: the model's unknown token (WordPiece, BPE, WordLevel have an
    ``unk_token``; Unigram keeps an ``unk_id`` in its serialised form); ``None`` when there is none."""
    model = tokenizer.model
    if hasattr(model, "unk_token"):
        return None if model.unk_token is None else tokenizer.token_to_id(model.unk_token)
    return json.loads(tokenizer.to_str())["model"].get("unk_id")
