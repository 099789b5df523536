"""Build stores, embedders and retrievers from settings, so backends change without code changes.

Settings come, in order of precedence, from explicit arguments, environment variables, a TOML file, and
the defaults below:

============================  ====================================  =================================================
setting                       environment variable                  default
============================  ====================================  =================================================
``store``                     ``FASTRAG_STORE``                     ``sqlite:///.fastrag/fastrag.db`` (relative to the cwd)
``embedder``                  ``FASTRAG_EMBEDDER``                  the kind the store recorded, else ``model2vec``
``embedding_model``           ``FASTRAG_EMBEDDING_MODEL``           the embedder's default (see :func:`open_embedder`)
``embedder_base_url``         ``FASTRAG_EMBEDDER_BASE_URL``         the API's own (``openai``, ``cohere``)
``embedder_dimensions``       ``FASTRAG_EMBEDDER_DIMENSIONS``       the model's own (``openai``, ``cohere``)
``embedder_query_prefix``     ``FASTRAG_EMBEDDER_QUERY_PREFIX``     none (``openai``, ``sentence-transformers``)
``embedder_document_prefix``  ``FASTRAG_EMBEDDER_DOCUMENT_PREFIX``  none (``openai``, ``sentence-transformers``)
``embedder_batch_size``       ``FASTRAG_EMBEDDER_BATCH_SIZE``       the embedder class's default
``embedder_max_concurrency``  ``FASTRAG_EMBEDDER_MAX_CONCURRENCY``  the embedder class's default
``embedding_cache``           ``FASTRAG_EMBEDDING_CACHE``           ``embedding-cache.db`` beside a SQLite store; ``off``
``mode``                      ``FASTRAG_MODE``                      ``hybrid``
``lexical_store``             ``FASTRAG_LEXICAL_STORE``             none: BM25 runs on ``store``
``llm_base_url``              ``FASTRAG_LLM_BASE_URL``              none: ``fastrag ask`` needs an OpenAI-compatible endpoint
``llm_model``                 ``FASTRAG_LLM_MODEL``                 none: the model name the endpoint serves
``min_score``                 ``FASTRAG_MIN_SCORE``                 none: keep results at least this score (keyword:
                                                                    BM25; vector: cosine; reranked: the reranker's)
``min_relative_score``        ``FASTRAG_MIN_RELATIVE_SCORE``        none: hybrid keeps results at least this fraction
                                                                    of the query's best fused score
``min_vector_score``          ``FASTRAG_MIN_VECTOR_SCORE``          none: the dense branch keeps hits at least this cosine
``min_keyword_score``         ``FASTRAG_MIN_KEYWORD_SCORE``         none: the BM25 branch keeps hits at least this BM25
============================  ====================================  =================================================

The four score thresholds are explained in :mod:`fastrag.retrieval.thresholds`: ``min_score`` is refused in
hybrid mode without a reranker (fused scores have no absolute scale), ``min_relative_score`` outside hybrid,
a branch threshold where its branch does not run (:func:`~fastrag.retrieval.thresholds.check_thresholds_fit`).

API keys are read from the environment only, never from the TOML file: the LLM's from
``FASTRAG_LLM_API_KEY``, else ``OPENAI_API_KEY`` (a local server may need none); the embedder's from
``FASTRAG_EMBEDDER_API_KEY``, else ``OPENAI_API_KEY`` (``openai``) or ``CO_API_KEY`` (``cohere``).

The TOML file is ``fastrag.toml`` in the working directory (or ``FASTRAG_CONFIG``), with the same keys
under a ``[fastrag]`` table; values are strings, except ``embedder_dimensions``, ``embedder_batch_size`` and
``embedder_max_concurrency``, which may be integers, and the score thresholds, which may be numbers.

Store URLs:

- ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db``, ``sqlite:///:memory:``, or a bare file
  path: the embedded :class:`~fastrag.vector_store.sqlite.SQLiteVectorStore`.
- ``opensearch://[user:password@]host[:port]/index`` (``opensearchs://`` for HTTPS; ``?analyzer=`` one of
  OpenSearch's built-in analyzers, default ``english``):
  :class:`~fastrag.vector_store.opensearch.OpenSearchVectorStore` (extra ``opensearch``).
- ``qdrant://host[:port]/collection`` (``qdrants://`` for HTTPS), ``qdrant+memory:///collection``,
  ``qdrant+path:///relative/dir?collection=name``, ``qdrant+edge:///relative/dir?collection=name`` (Qdrant's
  own engine in process, a prototype; extra ``qdrant-edge``); add ``?bm25=true`` for a collection that also
  serves BM25: :class:`~fastrag.vector_store.qdrant.QdrantVectorStore` (extra ``qdrant``).
- ``chroma://host[:port]/collection`` (``chroma+https://`` for TLS), ``chroma+path:///relative/dir?collection=name``
  (``chroma+path:////absolute/dir``),
  ``chroma+memory:///collection``: :class:`~fastrag.vector_store.chroma.ChromaVectorStore` (extra
  ``chroma``; dense only, so keyword and hybrid modes need a separate lexical store).
- ``milvus://host[:port]/collection`` (``milvus+https://`` for TLS), ``milvus-lite:///relative.db?collection=name``
  (``milvus-lite:////absolute.db``); BM25 is on unless ``?bm25=false``; ``?analyzer=english|standard|chinese``
  names the BM25 analyzer of a new collection (default ``english``, fastrag's English analysis):
  :class:`~fastrag.vector_store.milvus.MilvusVectorStore` (extra ``milvus``).
- ``postgresql://[user[:password]@]host[:port]/database?table=name`` (``postgres://`` too; other query
  parameters such as ``sslmode`` go to libpq): :class:`~fastrag.vector_store.postgres.PgVectorStore`
  (extra ``postgres``; dense k-NN with pgvector and BM25 in SQL).
"""

from __future__ import annotations

import importlib
import os
import tomllib
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

from fastrag.analysis import (
    LANGUAGE_ALIASES,
    SNOWBALL_STOPWORD_LANGUAGES,
    Analyzer,
    primary_language,
)
from fastrag.errors import (
    BackendUnavailableError,
    ConfigurationError,
    InvalidParameterError,
)

__all__ = [
    "DEFAULT_STORE_URL",
    "EMBEDDERS",
    "MODES",
    "Settings",
    "build_retriever",
    "embedding_cache_path",
    "load_settings",
    "open_embedder",
    "open_reranker",
    "open_store",
    "open_stores",
]

DEFAULT_STORE_URL = "sqlite:///.fastrag/fastrag.db"
MODES = ("hybrid", "vector", "keyword", "auto")
"""The modes ``FASTRAG_MODE``, ``fastrag.toml`` and ``fastrag search --mode`` accept (:data:`fastrag.settings.SEARCH_MODES`)."""
EVAL_MODES = ("hybrid", "vector", "keyword")
"""The modes ``fastrag eval`` and :func:`build_retriever` take (``"auto"`` decides by corpus size per search)."""
EMBEDDERS = ("model2vec", "openai", "sentence-transformers", "cohere")
"""The embedder kinds :func:`open_embedder` builds (and ``--embedder`` accepts)."""
EMBEDDING_CACHE_FILE = "embedding-cache.db"
"""The embedding cache's file name beside a SQLite store (see :func:`embedding_cache_path`)."""
Mode = Literal["hybrid", "vector", "keyword"]


@dataclass(frozen=True)
class Settings:
    """Resolved settings; :func:`load_settings` says where each comes from."""

    store: str = DEFAULT_STORE_URL
    """The store URL."""
    embedding_model: str | None = None
    """The embedder's model (a Model2Vec folder or name, an API's model name, a sentence-transformers folder
    or package); ``None``: the store's recorded model, else the embedder's default."""
    embedder: str | None = None
    """One of :data:`EMBEDDERS`; ``None``: the kind the store recorded, else ``"model2vec"``."""
    embedder_base_url: str | None = None
    """The base URL of an ``openai`` or ``cohere`` embedder's API (``http://localhost:8080/v1`` for TEI)."""
    embedder_dimensions: int | None = None
    """Vector width to ask an ``openai`` (``dimensions``) or ``cohere`` (``output_dimension``) model for."""
    embedder_query_prefix: str | None = None
    """Text put before every query (``openai``, ``sentence-transformers``), e.g. ``"query: "`` for E5."""
    embedder_document_prefix: str | None = None
    """Text put before every document (``openai``, ``sentence-transformers``), e.g. ``"passage: "``."""
    embedder_batch_size: int | None = None
    """Texts per request or forward pass; ``None``: the embedder class's default."""
    embedder_max_concurrency: int | None = None
    """Batches in flight at once; ``None``: the embedder class's default."""
    embedding_cache: str | None = None
    """Where ``fastrag index`` keeps embeddings by model and text: a file path, or ``"off"``; ``None``: see
    :func:`embedding_cache_path`."""
    mode: Mode = "hybrid"
    """``"hybrid"``, ``"vector"`` or ``"keyword"``."""
    lexical_store: str | None = None
    """A second store for BM25, for a vector store without full text (Chroma); ``None``: ``store``."""
    llm_base_url: str | None = None
    """An OpenAI-compatible chat-completions endpoint's base URL, e.g. ``http://localhost:8000/v1``."""
    llm_model: str | None = None
    """The model the LLM endpoint serves."""
    min_score: float | None = None
    """Drop results scoring below this, on the returned list's scale: BM25 (keyword mode), cosine in [-1, 1]
    (vector mode), the reranker's score (with a reranker); refused for a fused list (hybrid)."""
    min_relative_score: float | None = None
    """Hybrid: keep fused results scoring at least this fraction (> 0) of the query's best fused score."""
    min_vector_score: float | None = None
    """Drop dense (k-NN) hits whose cosine is below this, before fusion in hybrid mode."""
    min_keyword_score: float | None = None
    """Drop BM25 hits scoring below this, before fusion in hybrid mode."""
    search: Any = field(default=None, compare=False)
    """Every other search option of :data:`fastrag.settings.OPTIONS` set by a ``FASTRAG_<NAME>`` variable or a
    ``[fastrag]`` key of the same name (``FASTRAG_TOP_K``, ``candidate_k = 100``), as a
    :class:`~fastrag.settings.SearchSettings` (``None`` when :func:`load_settings` did not build these
    settings)."""


_SQLITE_PREFIX = "sqlite:///"

_ENV = {
    "store": "FASTRAG_STORE",
    "embedding_model": "FASTRAG_EMBEDDING_MODEL",
    "embedder": "FASTRAG_EMBEDDER",
    "embedder_base_url": "FASTRAG_EMBEDDER_BASE_URL",
    "embedder_dimensions": "FASTRAG_EMBEDDER_DIMENSIONS",
    "embedder_query_prefix": "FASTRAG_EMBEDDER_QUERY_PREFIX",
    "embedder_document_prefix": "FASTRAG_EMBEDDER_DOCUMENT_PREFIX",
    "embedder_batch_size": "FASTRAG_EMBEDDER_BATCH_SIZE",
    "embedder_max_concurrency": "FASTRAG_EMBEDDER_MAX_CONCURRENCY",
    "embedding_cache": "FASTRAG_EMBEDDING_CACHE",
    "mode": "FASTRAG_MODE",
    "lexical_store": "FASTRAG_LEXICAL_STORE",
    "llm_base_url": "FASTRAG_LLM_BASE_URL",
    "llm_model": "FASTRAG_LLM_MODEL",
    "min_score": "FASTRAG_MIN_SCORE",
    "min_relative_score": "FASTRAG_MIN_RELATIVE_SCORE",
    "min_vector_score": "FASTRAG_MIN_VECTOR_SCORE",
    "min_keyword_score": "FASTRAG_MIN_KEYWORD_SCORE",
}
SETTING_VARIABLES = _ENV
"""``{setting: FASTRAG_* variable}`` for the settings :class:`Settings` holds (the command line names them in
its errors)."""
_INT_SETTINGS = frozenset({"embedder_dimensions", "embedder_batch_size", "embedder_max_concurrency"})
_FLOAT_SETTINGS = frozenset({"min_score", "min_relative_score", "min_vector_score", "min_keyword_score"})
EMBEDDER_API_KEY_ENV = "FASTRAG_EMBEDDER_API_KEY"
"""The environment variable read first for an ``openai`` or ``cohere`` embedder's API key."""


def load_settings(overrides: Mapping[str, Any] | None = None, *, env: Mapping[str, str] | None = None) -> Settings:
    """Resolve settings: ``overrides`` (``None`` values ignored), then environment, then TOML, then defaults.

    Args:
        overrides: values that win over everything else (the command-line options); keys are setting names.
        env: the environment to read (default: ``os.environ``); ``FASTRAG_CONFIG`` in it names the TOML file,
            else ``fastrag.toml`` in the working directory is read when it exists.

    Raises:
        ConfigurationError: the TOML file is invalid or unreadable, its ``[fastrag]`` table has unknown keys
            or non-string values, ``FASTRAG_CONFIG`` names a file that does not exist, an override names an
            unknown setting, the mode is unknown, or a score threshold is not a finite number
            (``min_relative_score``: > 0).
    """
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}  # where each value came from, named in errors: the file, the variable, the options
    search_values: dict[str, Any] = {}  # the other search options (fastrag.settings.OPTIONS), by name
    search_origin: dict[str, str] = {}
    explicit = env.get("FASTRAG_CONFIG")
    config_path = Path(explicit or "fastrag.toml")
    if explicit and not config_path.is_file():
        raise ConfigurationError(f"FASTRAG_CONFIG names {str(config_path)!r}, which is not a file")
    if config_path.is_file():
        try:
            table = tomllib.loads(config_path.read_text(encoding="utf-8")).get("fastrag", {})
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"{config_path}: invalid TOML: {exc}") from exc
        except OSError as exc:
            raise ConfigurationError(f"{config_path}: cannot read: {exc}") from exc
        if not isinstance(table, dict):
            raise ConfigurationError(f"{config_path}: 'fastrag' must be a table ([fastrag]), got {table!r}")
        search_keys = _search_env()
        unknown = set(table) - set(_ENV) - set(search_keys)
        if unknown:
            raise ConfigurationError(
                f"{config_path}: unknown settings {sorted(unknown)}; known: {sorted({*_ENV, *search_keys})}"
            )
        if "search_mode" in table:  # the older name of mode (fastrag.settings.ALIASES)
            if "mode" in table:
                raise ConfigurationError(f"{config_path}: search_mode is another name for mode: give one of them")
            table["mode"] = table.pop("search_mode")
        for key in set(table) & set(search_keys):
            search_values[key], search_origin[key] = table.pop(key), str(config_path)
        for key, value in table.items():
            number = (int, float) if key in _FLOAT_SETTINGS else int
            allowed = isinstance(value, str) or (
                key in _INT_SETTINGS | _FLOAT_SETTINGS and isinstance(value, number) and not isinstance(value, bool)
            )
            if not allowed:
                kind = "an integer" if key in _INT_SETTINGS else "a number" if key in _FLOAT_SETTINGS else "a string"
                raise ConfigurationError(f"{config_path}: {key} must be {kind}, got {value!r}")
        values.update(table)
        origin.update(dict.fromkeys(table, str(config_path)))
    for key, var in _ENV.items():
        if env.get(var):
            values[key] = env[var]
            origin[key] = var
    for key, var in _search_env().items():
        if env.get(var):
            search_values[key], search_origin[key] = env[var], var
    if env.get("FASTRAG_SEARCH_MODE") and not env.get("FASTRAG_MODE"):  # the older name of FASTRAG_MODE
        values["mode"], origin["mode"] = env["FASTRAG_SEARCH_MODE"], "FASTRAG_SEARCH_MODE"
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    unknown = set(given) - set(_ENV)
    if unknown:
        raise ConfigurationError(f"unknown settings {sorted(unknown)}; known: {sorted(_ENV)}")
    values.update(given)
    origin.update(dict.fromkeys(given, "the command line"))  # overrides are the command-line options
    for key in _INT_SETTINGS & set(values):
        values[key] = _positive_int(values[key], key, origin[key])
    for key in _FLOAT_SETTINGS & set(values):
        values[key] = _threshold(values[key], key, origin[key])
    from fastrag.settings import SearchSettings

    try:
        values["search"] = SearchSettings.from_text(search_values, where=search_origin)
    except (InvalidParameterError, ValueError) as exc:
        raise ConfigurationError(str(exc)) from exc
    settings = replace(Settings(), **values)
    if settings.mode not in MODES:
        where = f" ({origin['mode']})" if "mode" in origin else ""
        raise ConfigurationError(f"unknown mode {settings.mode!r}{where}; expected one of {', '.join(MODES)}")
    if settings.embedder is not None and settings.embedder not in EMBEDDERS:
        raise ConfigurationError(f"unknown embedder {settings.embedder!r}; expected one of {', '.join(EMBEDDERS)}")
    return settings


def _search_env() -> dict[str, str]:
    """``{option: FASTRAG_<OPTION>}`` for the search options :class:`Settings` does not hold itself."""
    from fastrag.settings import OPTIONS

    names = {o.name: o.env for o in OPTIONS if o.name not in _ENV}
    names["retrieval_k"] = "FASTRAG_RETRIEVAL_K"  # the older name of candidate_k (fastrag.settings.ALIASES)
    return names


def _positive_int(value: Any, key: str, var: str) -> int:
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise ConfigurationError(f"{key} ({var}) must be a positive integer, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigurationError(f"{key} ({var}) must be a positive integer, got {value!r}")
    return value


def _threshold(value: Any, key: str, var: str) -> float:
    """A score threshold as a float, checked as the retrievers check it (no warning here: the retriever built
    from it warns, where the command line shows it)."""
    import warnings

    from fastrag.retrieval.thresholds import check_min_relative_score, check_min_score

    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise ConfigurationError(f"{key} ({var}) must be a number, got {value!r}") from None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        try:
            checked = check_min_relative_score(value) if key == "min_relative_score" else check_min_score(value, name=key)
        except InvalidParameterError as exc:
            must = "a finite number > 0" if key == "min_relative_score" else "a finite number"
            raise ConfigurationError(f"{key} ({var}) must be {must}, got {value!r}") from exc
    assert checked is not None
    return checked


def sqlite_path(url: str) -> str:
    """The file path (or ``":memory:"``) a SQLite store URL or bare path names.

    The path after ``sqlite:///`` is taken literally (``#`` and ``?`` are part of the file name).

    Raises:
        ConfigurationError: the URL is empty, a ``sqlite:`` URL is not ``sqlite:///PATH``, or the URL's
            scheme is not a known store.
    """
    if not isinstance(url, str) or not url.strip():
        raise ConfigurationError(f"empty store URL {url!r}; write sqlite:///PATH or a file path")
    if url[: len("sqlite:")].lower() == "sqlite:":
        if url[: len(_SQLITE_PREFIX)].lower() != _SQLITE_PREFIX:
            raise ConfigurationError(f"{url}: write sqlite:///relative.db or sqlite:////absolute.db")
        path = url[len(_SQLITE_PREFIX) :]
        if not path:
            raise ConfigurationError(f"{url}: no database path")
        return path
    scheme = urlparse(url).scheme
    if scheme and len(scheme) > 1:  # a one-letter scheme is a Windows drive
        known = ", ".join(f"{name}://" for name in _REMOTE_SCHEMES)
        raise ConfigurationError(
            f"unknown store URL scheme {scheme!r} in {url!r}; supported: sqlite:///PATH, a file path, {known}"
        )
    return url


_REMOTE_SCHEMES: dict[str, tuple[str, str]] = {
    # scheme -> (module, class); each class has from_url(url, *, dimension=, embedding_model=)
    "opensearch": ("fastrag.vector_store.opensearch", "OpenSearchVectorStore"),
    "opensearchs": ("fastrag.vector_store.opensearch", "OpenSearchVectorStore"),
    "qdrant": ("fastrag.vector_store.qdrant", "QdrantVectorStore"),
    "qdrants": ("fastrag.vector_store.qdrant", "QdrantVectorStore"),
    "qdrant+memory": ("fastrag.vector_store.qdrant", "QdrantVectorStore"),
    "qdrant+path": ("fastrag.vector_store.qdrant", "QdrantVectorStore"),
    "qdrant+edge": ("fastrag.vector_store.qdrant", "QdrantVectorStore"),
    "chroma": ("fastrag.vector_store.chroma", "ChromaVectorStore"),
    "chroma+http": ("fastrag.vector_store.chroma", "ChromaVectorStore"),
    "chroma+https": ("fastrag.vector_store.chroma", "ChromaVectorStore"),
    "chroma+path": ("fastrag.vector_store.chroma", "ChromaVectorStore"),
    "chroma+memory": ("fastrag.vector_store.chroma", "ChromaVectorStore"),
    "milvus": ("fastrag.vector_store.milvus", "MilvusVectorStore"),
    "milvus+https": ("fastrag.vector_store.milvus", "MilvusVectorStore"),
    "milvus-lite": ("fastrag.vector_store.milvus", "MilvusVectorStore"),
    "postgresql": ("fastrag.vector_store.postgres", "PgVectorStore"),
    "postgres": ("fastrag.vector_store.postgres", "PgVectorStore"),
}
_ANALYZING_SCHEMES = frozenset({"qdrant", "qdrants", "qdrant+memory", "qdrant+path", "qdrant+edge", "postgresql",
                                "postgres"})
"""Remote schemes whose store analyses BM25 text with a fastrag :class:`~fastrag.analysis.Analyzer`."""


def new_store_analyzer(settings: Settings, language: str | None) -> Analyzer | None:
    """The analysis of a store of one language that is about to be created: ``Analyzer(code)`` when
    ``language`` has Snowball's stopword list (:data:`~fastrag.analysis.SNOWBALL_STOPWORD_LANGUAGES`) and
    every store ``settings`` names is a SQLite file that does not exist yet (``fastrag index --language``
    and ``fastrag eval --language`` then build a Russian store, stopwords dropped); ``None`` otherwise: an
    existing file keeps the analysis it was built with, and other stores analyse per document."""
    code = primary_language(language)
    code = LANGUAGE_ALIASES.get(code, code) if code else None
    if code not in SNOWBALL_STOPWORD_LANGUAGES:
        return None
    urls = [settings.store] + ([settings.lexical_store] if settings.lexical_store else [])
    if all(is_sqlite_url(u) and sqlite_path(u) != ":memory:" and not Path(sqlite_path(u)).exists() for u in urls):
        return Analyzer(code)
    return None


def is_sqlite_url(url: str) -> bool:
    """Whether ``url`` names the embedded SQLite store (a ``sqlite://`` URL or a plain path)."""
    scheme = urlparse(url).scheme
    return scheme == "sqlite" or len(scheme) <= 1


def open_store(
    url: str,
    *,
    embedding_model: str | None = None,
    dimension: int | None = None,
    create: bool = True,
    analyzer: Analyzer | None = None,
):
    """The store a URL names (see the module docstring); the caller opens and closes it.

    The store is returned unopened: use it as ``async with open_store(url) as store:``, which opens and
    closes it. It is a :class:`~fastrag.protocols.VectorStore`, and also a
    :class:`~fastrag.protocols.LexicalStore` when it has BM25.

    Args:
        url: a store URL, or a plain file path for SQLite.
        embedding_model: the embedder's name, recorded by the store on first use; a store that recorded
            another name refuses to open.
        dimension: the vector width, when known; a store of another width refuses to open.
        create: create the database, collection or index when it does not exist. ``False`` for reading:
            a store that does not exist (a typo in a path or collection name) then fails to open with
            :class:`~fastrag.errors.BackendUnavailableError` instead of answering "no match".
        analyzer: the BM25 text analysis of a store that analyses text itself (SQLite, PostgreSQL,
            Qdrant); ``None``: the store's default (a SQLite file: the analysis it was built with;
            English for a new store). Refused for the other stores.

    Raises:
        ConfigurationError: unknown scheme, a missing extra, settings that differ from the store's, or an
            ``analyzer`` for a store whose engine analyses text itself.
        BackendUnavailableError: the store cannot be opened, or does not exist and ``create`` is false, or
            (SQLite, ``create`` false) its file is empty: 0 bytes is no index, not an empty one.
    """
    scheme = urlparse(url).scheme
    if scheme in _REMOTE_SCHEMES:
        module_name, class_name = _REMOTE_SCHEMES[scheme]
        module = importlib.import_module(module_name)
        options = {k: v for k, v in {"dimension": dimension, "embedding_model": embedding_model}.items() if v is not None}
        if analyzer is not None:
            if scheme not in _ANALYZING_SCHEMES:
                hint = "; name the engine's analyzer in the URL: ?analyzer=" if scheme.startswith(("milvus", "opensearch")) else ""
                raise ConfigurationError(f"{scheme}:// stores analyse text in the engine: an analyzer cannot be given{hint}")
            options["analyzer"] = analyzer
        if not create:
            options["create"] = False
        return getattr(module, class_name).from_url(url, **options)
    from fastrag.vector_store.sqlite import SQLiteVectorStore

    path = sqlite_path(url)
    if not create and path != ":memory:":
        if not Path(path).is_file():
            raise BackendUnavailableError("no index here yet; run `fastrag index PATH` first", store=url)
        wal = Path(f"{path}-wal")
        if Path(path).stat().st_size == 0 and not (wal.is_file() and wal.stat().st_size > 0):
            # SQLite would open it as a new, empty database: lost data would read as "no match"
            raise BackendUnavailableError(
                f"the store file {path} is empty (0 bytes): it holds no index (its data is lost, or it was never "
                "written); rebuild it with `fastrag index PATH`",
                store=url,
            )
    return SQLiteVectorStore(path, embedding_model=embedding_model, dimension=dimension, analyzer=analyzer)


def split_embedder_name(name: str | None) -> tuple[str | None, str | None]:
    """The embedder kind and model a recorded embedder name holds: ``"openai:text-embedding-3-small"`` gives
    ``("openai", "text-embedding-3-small")``; a name without a known kind prefix (a Model2Vec model) gives
    ``(None, name)``."""
    if name is None:
        return None, None
    kind, sep, model = name.partition(":")
    if sep and kind in EMBEDDERS and kind != "model2vec" and model:
        return kind, model
    return None, name


def open_embedder(
    model: str | None = None, *, kind: str | None = None, settings: Settings | None = None, env: Mapping[str, str] | None = None
):
    """Build the embedder ``kind`` names (unopened: use it in ``async with``); nothing loads or connects yet.

    ======================  ================================================================  ========================
    kind                    class                                                             default model
    ======================  ================================================================  ========================
    ``model2vec``           :class:`~fastrag.ingestion.steps.embedding.Model2VecEmbedder`      the shipped static model
    ``sentence-transformers``  :class:`~fastrag.ingestion.SentenceTransformerEmbedder`        ``all-MiniLM-L6-v2``
    ``openai``              :class:`~fastrag.ingestion.OpenAICompatibleEmbedder`               ``text-embedding-3-small``
    ``cohere``              :class:`~fastrag.ingestion.CohereEmbedder`                         ``embed-v4.0``
    ======================  ================================================================  ========================

    Args:
        model: the model; a name an embedder recorded in a store (``"openai:text-embedding-3-small"``) also
            names its kind. ``None`` or the shipped model's name (``"static-minilm-d256"``) with ``model2vec``
            means the model shipped inside the package.
        kind: one of :data:`EMBEDDERS`; ``None``: ``settings.embedder``, else the kind ``model`` names,
            else ``"model2vec"``.
        settings: the ``embedder_*`` options (base URL, dimensions, prefixes, batch size, concurrency); an
            option the kind has no use for is an error, never ignored.
        env: where API keys are read (default ``os.environ``): ``FASTRAG_EMBEDDER_API_KEY``, else the
            class's own variable (``OPENAI_API_KEY``, ``CO_API_KEY``).

    Raises:
        ConfigurationError: an unknown kind; ``model`` names another kind than ``kind``; an option the kind
            does not take; the kind's extra is not installed (the shipped Model2Vec model needs none; a hub
            id needs the ``model2vec`` extra); a model that is not on disk (``sentence-transformers``); no
            API key (``cohere``).
    """
    settings = settings or Settings()
    env = os.environ if env is None else env
    named_kind, named_model = split_embedder_name(model)
    kind = kind or settings.embedder or named_kind or "model2vec"
    if kind not in EMBEDDERS:
        raise ConfigurationError(f"unknown embedder {kind!r}; expected one of {', '.join(EMBEDDERS)}")
    if named_kind is not None and named_kind != kind:
        raise ConfigurationError(f"model {model!r} is a {named_kind} model, not a {kind} one")
    model = named_model
    options: dict[str, Any] = {
        "base_url": settings.embedder_base_url,
        "dimensions": settings.embedder_dimensions,
        "query_prefix": settings.embedder_query_prefix,
        "document_prefix": settings.embedder_document_prefix,
        "batch_size": settings.embedder_batch_size,
        "max_concurrency": settings.embedder_max_concurrency,
    }
    accepted = {
        "model2vec": {"batch_size", "max_concurrency"},
        "sentence-transformers": {"batch_size", "max_concurrency", "query_prefix", "document_prefix"},
        "openai": set(options),
        "cohere": {"base_url", "dimensions", "batch_size", "max_concurrency"},
    }[kind]
    unused = sorted(k for k, v in options.items() if v is not None and k not in accepted)
    if unused:
        names = ", ".join(f"embedder_{k} ({_ENV['embedder_' + k]})" for k in unused)
        raise ConfigurationError(f"the {kind} embedder takes no {names}")
    kwargs = {k: v for k, v in options.items() if v is not None}
    key = env.get(EMBEDDER_API_KEY_ENV) or None
    try:
        if kind == "model2vec":
            from fastrag.ingestion.steps.embedding import (
                DEFAULT_MODEL,
                Model2VecEmbedder,
            )

            if model is None or model == DEFAULT_MODEL.name:
                return Model2VecEmbedder(DEFAULT_MODEL, **kwargs)
            return Model2VecEmbedder(model, **kwargs)
        if kind == "sentence-transformers":
            from fastrag.ingestion.steps.sentence_transformer import (
                DEFAULT_SENTENCE_TRANSFORMER,
                SentenceTransformerEmbedder,
            )

            return SentenceTransformerEmbedder(model or DEFAULT_SENTENCE_TRANSFORMER, **kwargs)
        if kind == "openai":
            from fastrag.ingestion.steps.openai_compatible import (
                OpenAICompatibleEmbedder,
            )

            return OpenAICompatibleEmbedder(model or "text-embedding-3-small", api_key=key, **kwargs)
        from fastrag.ingestion.steps.cohere import CohereEmbedder

        return CohereEmbedder(model or "embed-v4.0", api_key=key, **kwargs)
    except InvalidParameterError as exc:
        raise ConfigurationError(f"{kind} embedder: {exc}") from exc


def embedding_cache_path(settings: Settings, *, embedder_kind: str) -> str | None:
    """Where ``fastrag index`` keeps its :class:`~fastrag.ingestion.EmbeddingCache`, or ``None`` for none.

    ``settings.embedding_cache`` when set (``"off"`` or ``"none"``: no cache); else, for every embedder
    but ``model2vec`` (a static model encodes faster than the cache reads), ``embedding-cache.db`` in the
    folder of a SQLite store file, or ``.fastrag/embedding-cache.db`` in the working directory for any
    other store; no cache for an in-memory SQLite store.
    """
    chosen = settings.embedding_cache
    if chosen is not None:
        return None if chosen.strip().lower() in ("off", "none", "") else chosen
    if embedder_kind == "model2vec":
        return None
    if is_sqlite_url(settings.store):
        path = sqlite_path(settings.store)
        return None if path == ":memory:" else str(Path(path).parent / EMBEDDING_CACHE_FILE)
    return str(Path(".fastrag") / EMBEDDING_CACHE_FILE)


RERANKERS = ("embedder", "cross-encoder", "cohere")
"""The reranker kinds :func:`open_reranker` builds (and ``--rerank`` accepts, besides ``none``)."""


@asynccontextmanager
async def open_reranker(kind: str, model: str | None = None, *, embedding_model: str | None = None) -> AsyncIterator[Any]:
    """Open the reranker ``kind`` names; yield it, and close it (and any model it loaded) on exit.

    Args:
        kind: ``"embedder"``: bi-encoder cosine (:class:`~fastrag.rerankers.EmbedderReranker`) with the Model2Vec
            model ``model`` (default: ``embedding_model``, else the shipped one); ``"cross-encoder"``:
            :class:`~fastrag.rerankers.CrossEncoderReranker` over the local model folder ``model`` (required;
            nothing is downloaded); ``"cohere"``: :class:`~fastrag.rerankers.CohereReranker` with the model
            ``model`` (default ``rerank-v3.5``; key and base URL from the environment, as the class documents).
        model: the reranker's model, as above.
        embedding_model: the retrieval embedder's model, the ``"embedder"`` default.

    Raises:
        ConfigurationError: an unknown ``kind``; ``"cross-encoder"`` without ``model``; a missing extra or key.
    """
    if kind not in RERANKERS:
        raise ConfigurationError(f"unknown reranker {kind!r}; expected one of {', '.join(RERANKERS)}")
    from fastrag.rerankers import CohereReranker, CrossEncoderReranker, EmbedderReranker

    if kind == "embedder":
        import warnings

        from fastrag.embedding_languages import UnknownLanguagesWarning

        with warnings.catch_warnings():  # a reranker leaves no branch out by language: its model's languages
            warnings.simplefilter("ignore", UnknownLanguagesWarning)  # do not matter here
            reranking_embedder = open_embedder(model or embedding_model)
        async with reranking_embedder as embedder:
            yield EmbedderReranker(embedder)
    elif kind == "cross-encoder":
        if not model:
            raise ConfigurationError(
                "the cross-encoder reranker needs a model: a local cross-encoder model folder (--rerank-model PATH)"
            )
        async with CrossEncoderReranker(model) as reranker:
            yield reranker
    else:
        async with CohereReranker(model or "rerank-v3.5") as reranker:
            yield reranker


@asynccontextmanager
async def open_stores(
    settings: Settings, *, embedding_model: str | None = None, create: bool = True, analyzer: Analyzer | None = None
) -> AsyncIterator[tuple[Any, Any]]:
    """Open ``settings.store`` and, when set, ``settings.lexical_store``; yield ``(store, lexical_store)``.

    ``lexical_store`` is the same object as ``store`` when no separate one is configured. Both are closed
    on exit. ``create=False`` is for reading: a store that does not exist fails to open (see
    :func:`open_store`). ``analyzer`` is given to both (see :func:`open_store`).

    Raises:
        ConfigurationError: a URL is invalid, or an extra is missing.
        BackendUnavailableError: a store cannot be opened, or does not exist and ``create`` is false.
    """
    async with AsyncExitStack() as stack:
        store = await stack.enter_async_context(
            open_store(settings.store, embedding_model=embedding_model, create=create, analyzer=analyzer)
        )
        lexical = store
        if settings.lexical_store and settings.lexical_store != settings.store:
            lexical = await stack.enter_async_context(
                open_store(settings.lexical_store, create=create, analyzer=analyzer)
            )
        yield store, lexical


def build_retriever(
    mode: str,
    *,
    store: Any,
    embedder: Any | None = None,
    lexical_store: Any | None = None,
    candidate_k: int | None = None,
    language: str | None = None,
    detector: Any | None = None,
    min_score: float | None = None,
    min_relative_score: float | None = None,
    min_vector_score: float | None = None,
    min_keyword_score: float | None = None,
    reranker: Any | None = None,
    rerank_candidate_k: int | None = None,
):
    """The retriever for ``mode``: dense k-NN on ``store``, BM25 on ``lexical_store`` (default ``store``),
    planned by :func:`fastrag.planning.compose` with the settings these arguments give (every other setting
    at its default, the fusion from the embedder's row of :mod:`fastrag.defaults`).

    The result is a :class:`~fastrag.retrieval.bm25.BM25Retriever` (keyword), a
    :class:`~fastrag.retrieval.vector.VectorRetriever` (vector), or a
    :class:`~fastrag.retrieval.hybrid.HybridRetriever` of both (hybrid), under a
    :class:`~fastrag.retrieval.reranking.RerankingRetriever` when ``reranker`` is given.

    Args:
        mode: ``"hybrid"`` (dense + BM25, fused with the evidence-based default), ``"vector"`` or
            ``"keyword"`` (BM25 only).
        store: the vector store (and the lexical store when ``lexical_store`` is ``None``).
        embedder: required for ``"hybrid"`` and ``"vector"``.
        lexical_store: a separate store for BM25, for vector stores without full text (Chroma).
        candidate_k: per-branch candidates for hybrid (default: the embedder's measured value).
        language: the questions' language for the BM25 branch (``BM25Retriever(language=...)``).
        detector: a language detector for the BM25 branch (``BM25Retriever(detector=...)``).
        min_score: drop results scoring below this on the returned list's scale: BM25 (keyword), cosine
            (vector), the reranker's (with ``reranker``); refused in hybrid without a reranker (fused scores
            have no absolute scale).
        min_relative_score: hybrid: keep fused results scoring at least this fraction of the query's best.
        min_vector_score: the dense branch's cosine threshold (hybrid or vector).
        min_keyword_score: the BM25 branch's threshold (hybrid or keyword).
        reranker: a :class:`~fastrag.protocols.Reranker` reading the first stage's ``rerank_candidate_k``
            candidates.
        rerank_candidate_k: candidates the reranker reads (default: ``candidate_k``'s value).

    Raises:
        ConfigurationError: unknown mode, no embedder for a mode that needs one, a mode that needs BM25
            over a store that has none (configure ``lexical_store``), or a threshold the mode cannot apply
            or that is not a finite number (see :func:`~fastrag.retrieval.thresholds.check_thresholds_fit`).
    """
    from fastrag.defaults import hybrid_defaults
    from fastrag.planning import compose
    from fastrag.settings import SearchSettings, resolve_settings

    if mode not in EVAL_MODES:
        raise ConfigurationError(f"unknown mode {mode!r}; expected one of {', '.join(EVAL_MODES)}")
    name = getattr(embedder, "name", None) if embedder is not None else None
    name = name if isinstance(name, str) else None
    try:
        request: dict[str, Any] = {"mode": mode, "min_score": min_score, "min_relative_score": min_relative_score,
                                   "min_vector_score": min_vector_score, "min_keyword_score": min_keyword_score}  # fmt: skip
        if reranker is not None:
            request.update(rerank=True, rerank_model=reranker, candidate_k=rerank_candidate_k or candidate_k)
            branch_k = candidate_k or hybrid_defaults(name).candidate_k  # the hybrid's own default per branch
            request.update(vector_candidate_k=branch_k, keyword_candidate_k=branch_k)
        else:
            request["candidate_k"] = candidate_k
        settings = resolve_settings(SearchSettings(**request), embedder_name=name)
    except InvalidParameterError as exc:
        raise ConfigurationError(str(exc)) from exc
    retriever, _ = compose(settings, vector_store=store, lexical_store=lexical_store, embedder=embedder,
                           reranker=reranker, language=language, detector=detector)  # fmt: skip
    return retriever
