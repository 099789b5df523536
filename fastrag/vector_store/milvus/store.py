"""``MilvusVectorStore``: documents, dense vectors and a BM25 index in one Milvus collection (see the package
docstring for the layout and what runs where)."""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Awaitable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Literal

import anyio
import numpy as np

from fastrag.errors import (
    BackendError,
    BackendTemporarilyUnavailableError,
    BackendUnavailableError,
    ConfigurationError,
    DimensionMismatchError,
    FastragError,
    InvalidParameterError,
)
from fastrag.filters import FilterLike
from fastrag.lifecycle import AsyncResource
from fastrag.models import Document
from fastrag.scoping import TENANT_COLLECTION_MARK, check_tenant_isolation, tenant_collection
from fastrag.vector_store._validation import (
    check_dimension,
    check_document_text,
    check_embeddings,
    check_id_text,
    check_query_vector,
    check_unique_ids,
)
from fastrag.vector_store.milvus.connection import (
    INSTALL_HINT,
    dropped_by_ping_policy,
    import_pymilvus,
    is_unavailable,
    lite_acquire,
    lite_data_path,
    lite_release,
    message,
    parse_url,
    python_milvus_lite,
    sdk_errors,
)
from fastrag.vector_store.milvus.filters import (
    MATCH_ALL,
    MilvusExpr,
    and_expressions,
    ids_expression,
    native_or_translated,
    string_literal,
)
from fastrag.vector_store.milvus.hybrid_search import plan_hybrid, run_hybrid
from fastrag.vector_store.milvus.results import (
    bm25_score,
    check_search_k,
    cosine_score,
    ranked,
    settled_page,
)
from fastrag.vector_store.milvus.rows import document, document_row
from fastrag.vector_store.milvus.schema import (
    COLLECTION_NAME,
    CONTENT_FIELD,
    DEFAULT_ANALYZER,
    HAS_VECTOR_FIELD,
    ID_FIELD,
    METADATA_FIELD,
    MODEL_PROPERTY,
    SPARSE_FIELD,
    TEXT_FIELD,
    UNSTEMMED_DEFAULT_ANALYZER,
    VECTOR_FIELD,
    check_existing,
    collection_schema,
    index_params,
    index_specs,
    recorded_at_creation,
)

__all__ = ["MilvusVectorStore"]

_UPSERT_BATCH = 256
_LITE_FLUSH_ROWS = 256
_ID_BATCH = 500
_QUERY_PAGE = 16384
"""Rows per query page: Milvus's largest query window (``limit`` above it is refused)."""



class MilvusVectorStore(AsyncResource):
    """Documents, dense vectors and (optionally) a BM25 index in one Milvus collection.

    Args:
        url: a Milvus Lite data file ending in ``.db`` (created with its parent folders if missing; its name
            at most 36 letters, digits, ``.``, ``_`` or ``-``; pymilvus serves it with milvus-lite's native
            Milvus for this process), or a server URI ``http://host:19530`` / ``https://...``. Optional when
            ``client`` is given (then it only names the store in messages).
        collection: the collection name (letters, digits, ``_``; not starting with a digit).
        dimension: the vector width. With ``create=True`` and a missing collection, the collection is created
            when the store opens; otherwise the first write with embeddings fixes it. An existing collection
            of another width raises.
        enable_bm25: create the collection with a BM25 function (an analysed ``text`` field feeding a sparse
            field) so :meth:`search_text` works. An existing collection keeps what it was created with.
        embedding_model: the embedder's name, recorded when the collection is created; opening a collection
            that recorded another name raises, so vectors of two models are never mixed.
        client: a ``pymilvus.AsyncMilvusClient`` or ``MilvusClient`` to use instead of opening one; it is
            never closed by this store.
        create: create the collection when it is missing; with ``False`` a missing collection raises.
        timeout: seconds allowed for each Milvus call, retries included.
        token: credentials for a server (``"user:password"`` or an API key); never put them in ``url``.
        db_name: the Milvus database (default: the server's default).
        analyzer_params: the BM25 analyzer of a new collection. Default ``{"type": "english"}`` (Milvus 2.5's
            English analyzer: word boundaries, lower case, Snowball's English stemmer, English stopwords: the
            analysis of the SQLite store, so keyword ranking stays when the store changes); on milvus-lite 3.x
            (an emulation with only ``standard`` and ``jieba``) ``{"type": "standard"}`` (no stemming). Other
            built-ins: ``fastrag.vector_store.milvus.schema.ANALYZERS``; a custom analyzer as Milvus
            documents it. An existing collection keeps the analyzer it was created with (read from its BM25
            field, so one created with ``standard`` before this default stays ``standard``); given
            explicitly, it must be that one.
        index_params: the dense index, ``{"index_type": ..., "params": {...}}`` (default ``FLAT``: exact k-NN;
            use ``HNSW`` or ``AUTOINDEX`` on a server for large collections, approximate; milvus-lite 2.5.1
            builds only FLAT, IVF_FLAT and AUTOINDEX). The metric is always COSINE.
        tenant_isolation: ``"shared"`` (default): a tenant-scoped view (``TenantScopedStore``, a knowledge
            base's ``user_id=``) writes into this collection beside every other tenant, and Milvus's BM25
            statistics (document count, document frequencies, mean length) count every tenant's documents: a
            channel between tenants (``docs/reliability.md``). ``"collection"``: each scope writes and searches
            a collection of its own, ``<collection>__t<hex of the scope>``
            (:func:`fastrag.scoping.tenant_collection`), created on its first write with this store's
            settings, so a tenant's BM25 statistics are its own. Unscoped calls use ``collection`` as before.

    Raises:
        InvalidParameterError: a bad ``collection``, ``dimension`` or ``timeout``, or neither ``url`` nor
            ``client``.
        ConfigurationError: ``pymilvus`` is not installed (``pip install "fastrag-retrieval[milvus]"``).

    Opening (``async with``, or the first call) raises :class:`BackendUnavailableError` when the server
    cannot be reached or the ``.db`` file is locked by another process, and :class:`ConfigurationError` when
    the collection exists with another dimension, embedding model or BM25 analyzer (``analyzer_params`` given
    and not the collection's) or an older fastrag schema, or was not created by fastrag.

    Example::

        async with MilvusVectorStore("./milvus.db", "docs", enable_bm25=True) as store:
            await store.upsert(docs, embeddings=vectors)
            hits = await store.search_text("solar power", k=5)
    """

    def __init__(
        self,
        url: str | os.PathLike[str] | None = None,
        collection: str = "fastrag",
        *,
        dimension: int | None = None,
        enable_bm25: bool = False,
        embedding_model: str | None = None,
        client: Any = None,
        create: bool = True,
        timeout: float = 10.0,
        token: str | None = None,
        db_name: str | None = None,
        analyzer_params: Mapping[str, Any] | None = None,
        index_params: Mapping[str, Any] | None = None,
        tenant_isolation: str = "shared",
    ) -> None:
        if url is None and client is None:
            raise InvalidParameterError("MilvusVectorStore needs a url or a client")
        if not isinstance(collection, str) or not COLLECTION_NAME.fullmatch(collection):
            raise InvalidParameterError(
                f"collection must be letters, digits and _ (not starting with a digit, at most 255), got {collection!r}"
            )
        if dimension is not None and (isinstance(dimension, bool) or not isinstance(dimension, int) or dimension <= 0):
            raise InvalidParameterError(f"dimension must be a positive int, got {dimension!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise InvalidParameterError(f"timeout must be a positive number of seconds, got {timeout!r}")
        pymilvus = import_pymilvus()
        if client is not None and not isinstance(client, pymilvus.AsyncMilvusClient | pymilvus.MilvusClient):
            raise InvalidParameterError(f"client must be a pymilvus AsyncMilvusClient or MilvusClient, got {client!r}")
        self.url = os.fspath(url) if url is not None else f"<injected {type(client).__name__}>"
        self.collection = collection
        self.dimension: int | None = dimension
        self.embedding_model: str | None = embedding_model
        self.enable_bm25 = bool(enable_bm25)
        self.timeout = float(timeout)
        self._create = create
        self._token = token
        self._db_name = db_name
        if analyzer_params is not None and not isinstance(analyzer_params, Mapping):
            raise InvalidParameterError(f"analyzer_params must be a mapping such as {{'type': 'english'}}, got {analyzer_params!r}")
        self._analyzer_params: dict[str, Any] | None = dict(analyzer_params) if analyzer_params is not None else None
        self._index_params = dict(index_params) if index_params is not None else {"index_type": "FLAT", "params": {}}
        self._client = client
        self._owns_client = client is None
        self._is_async = client is None or isinstance(client, pymilvus.AsyncMilvusClient)
        self._lite_path = lite_data_path(self.url) if client is None else None
        self._open_lock = anyio.Lock()
        self._opened = False
        self._exists = False
        self._has_vectors = True
        self._lite_server = False
        self._unflushed = 0
        self._flush_lock = anyio.Lock()
        self.tenant_isolation = check_tenant_isolation(tenant_isolation)
        self._sync_index_build = client is None or not self._is_async
        self._tenants: dict[str, MilvusVectorStore] = {}
        self._tenants_lock = anyio.Lock()

    async def tenant_store(self, scope: Mapping[str, str | int]) -> MilvusVectorStore:
        """The store of ``scope``'s own collection (``tenant_isolation="collection"``): the same client,
        settings (dimension, BM25, analyzer, index, embedding model) and database, on
        :func:`~fastrag.scoping.tenant_collection`'s name; made once per scope, never closing the client.

        Raises:
            InvalidParameterError: the collection name would pass Milvus's 255 characters.
            BackendUnavailableError: the store cannot be opened, or is closed.
        """
        name = tenant_collection(self.collection, scope)
        found = self._tenants.get(name)
        if found is not None:
            return found
        await self._ensure_open()
        async with self._tenants_lock:
            found = self._tenants.get(name)
            if found is None:
                found = copy.copy(self)
                found.collection = name
                found.tenant_isolation = "shared"
                found._owns_client = False  # the client is this store's: closing the tenant's leaves it open
                found._open_lock, found._flush_lock, found._tenants_lock = anyio.Lock(), anyio.Lock(), anyio.Lock()
                found._opened = found._closed = found._exists = False
                found._unflushed = 0
                found._tenants = {}
                self._tenants[name] = found
        await found._ensure_open()
        return found

    async def _refuse_unscoped_read(self) -> None:
        """With ``tenant_isolation="collection"``, refuse an unscoped read while tenant collections exist:
        it would search only this collection and silently miss every tenant's documents.

        Raises:
            InvalidParameterError: tenant collections of this store exist (the message names how many).
        """
        if self.tenant_isolation != "collection":
            return
        prefix = self.collection + TENANT_COLLECTION_MARK
        tenants = [c for c in await self._call("list_collections") if c.startswith(prefix)]
        if tenants:
            raise InvalidParameterError(
                f"{self.name} isolates tenants (tenant_isolation='collection'): {len(tenants)} tenant "
                "collection(s) hold documents an unscoped read would not see; read through a scoped view "
                "(TenantScopedStore, or a knowledge base's user_id= / agent_id= / scope=)"
            )

    # ------------------------------------------------------------------ construction from a URL

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> MilvusVectorStore:
        """Open the store a fastrag store URL names.

        Forms:

        - ``milvus://host[:port]/collection``: a Milvus server over plain gRPC (port 19530 by default);
          ``milvus+https://host[:port]/collection`` for TLS (Zilliz Cloud; pass ``token=``).
        - ``milvus-lite:///relative/path.db?collection=name`` and ``milvus-lite:////absolute/path.db?...``:
          Milvus Lite on that file (the path must end in ``.db``; the collection defaults to ``fastrag``).

        Query parameters (both forms): ``bm25=true|false`` (default **true**, so one URL serves the keyword,
        vector and hybrid modes), ``analyzer=english|standard|chinese`` (the BM25 analyzer of a new collection,
        Milvus's built-in of that name; default ``english``, see ``analyzer_params``),
        ``tenant_isolation=shared|collection`` (see the constructor), ``dimension=N``,
        ``db=name`` (server only), ``timeout=seconds``. In ``fastrag.toml`` the same URL is the ``store`` value.
        Keyword arguments override the URL's settings and are passed to the constructor.

        Raises:
            ConfigurationError: the URL is not one of these forms, or names an unknown analyzer (the message
                lists Milvus's built-ins).
        """
        target_url, options = parse_url(url)
        options.update(kwargs)
        try:
            return cls(target_url, **options)
        except InvalidParameterError as exc:
            raise ConfigurationError(f"{url}: {exc}") from exc

    # ------------------------------------------------------------------ lifecycle

    def __repr__(self) -> str:
        return f"MilvusVectorStore({self.url!r}, collection={self.collection!r})"

    @property
    def analyzer_params(self) -> dict[str, Any] | None:
        """The BM25 analyzer: once open, the collection's (as it recorded it; ``None`` without BM25); before,
        the one given (``None``: the default, ``fastrag.vector_store.milvus.schema.DEFAULT_ANALYZER``)."""
        return dict(self._analyzer_params) if self._analyzer_params is not None else None

    @property
    def name(self) -> str:
        """The store's name in messages: its URL and collection."""
        return f"{self.url} (collection {self.collection!r})"

    # a failed open closes what it opened itself (_ensure_open) and leaves the store to be opened again
    _close_if_enter_fails = False

    async def _aopen(self) -> None:
        await self._ensure_open()

    async def _aclose(self) -> None:
        """Close the client this store opened (an injected one stays open).

        On a ``.db`` path, the last store to close stops the Milvus Lite server it started, which releases
        the file's lock for other processes.
        """
        async with self._open_lock:
            client, self._client = self._client, None
            if not self._opened or not self._owns_client:
                return
            with anyio.CancelScope(shield=True):
                try:
                    if client is not None:
                        await client.close()
                except sdk_errors() as exc:
                    raise BackendError(f"closing the Milvus client failed: {exc}", store=self.name) from exc
                finally:
                    if self._lite_path is not None:
                        await anyio.to_thread.run_sync(lite_release, self._lite_path)

    async def _ensure_open(self) -> None:
        if self._opened and not self.closed:
            return
        async with self._open_lock:
            if self.closed:
                raise BackendUnavailableError("store is closed", store=self.name)
            if self._opened:
                return
            if self._owns_client:
                self._client = await self._connect()
            try:
                self._lite_server = self._lite_path is not None and python_milvus_lite()
                await self._load_collection_state()
                if not self._exists and self.dimension is not None and self._create:
                    await self._create_collection(self.dimension)
                elif not self._exists and not self._create:
                    raise BackendUnavailableError(
                        f"collection {self.collection!r} does not exist (create=False)", store=self.name
                    )
            except BaseException:
                if self._owns_client:
                    with anyio.CancelScope(shield=True):
                        try:
                            await self._client.close()
                        except sdk_errors():
                            pass
                        if self._lite_path is not None:
                            await anyio.to_thread.run_sync(lite_release, self._lite_path)
                    self._client = None
                raise
            self._opened = True

    async def _connect(self) -> Any:
        pymilvus = import_pymilvus()
        kwargs: dict[str, Any] = {"timeout": self.timeout, "dedicated": True}
        if self._token:
            kwargs["token"] = self._token
        if self._db_name:
            kwargs["db_name"] = self._db_name
        lite = self._lite_path

        def make() -> Any:
            if lite is not None:
                try:
                    Path(lite).parent.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise BackendUnavailableError(f"cannot create the folder of the milvus-lite file: {exc}", store=self.name) from exc
                try:
                    with warnings.catch_warnings():  # milvus-lite 2.5.1 imports pkg_resources, which warns
                        warnings.simplefilter("ignore", UserWarning)
                        import milvus_lite  # noqa: F401
                except ImportError as exc:
                    raise ConfigurationError(f"a .db url needs milvus-lite: {INSTALL_HINT}") from exc
                lite_acquire(lite)
            try:
                return pymilvus.AsyncMilvusClient(uri=lite if lite is not None else self.url, **kwargs)
            except BaseException:
                if lite is not None:
                    lite_release(lite)
                raise

        try:
            client = await anyio.to_thread.run_sync(make)
        except FastragError:
            raise
        except sdk_errors() as exc:
            raise BackendUnavailableError(f"cannot open Milvus: {message(exc)}", store=self.name) from exc
        try:
            try:
                await client.has_collection(self.collection, timeout=self.timeout)
            except sdk_errors() as exc:
                if not dropped_by_ping_policy(exc):
                    raise
                # gRPC shares connections between channels: a new client can get one the server closed for
                # its ping policy; the first call fails, and gRPC has reconnected for the next
                await client.has_collection(self.collection, timeout=self.timeout)
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                try:
                    await client.close()
                except sdk_errors():
                    pass
                if lite is not None:
                    await anyio.to_thread.run_sync(lite_release, lite)
            if isinstance(exc, sdk_errors()):
                raise BackendUnavailableError(f"cannot reach Milvus: {message(exc)}", store=self.name) from exc
            raise
        return client

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call ``client.method`` (awaited, or in a worker thread for a sync client), mapping SDK errors."""
        if self._client is None:
            raise BackendUnavailableError("store is closed", store=self.name)
        kwargs.setdefault("timeout", self.timeout)
        retried = False
        while True:
            try:
                if self._is_async:
                    return await getattr(self._client, method)(*args, **kwargs)
                return await anyio.to_thread.run_sync(partial(getattr(self._client, method), *args, **kwargs))
            except sdk_errors() as exc:
                if not retried and dropped_by_ping_policy(exc):
                    retried = True  # an idle connection the server closed; pymilvus has reconnected
                    continue
                kind = BackendTemporarilyUnavailableError if is_unavailable(exc) else BackendError
                raise kind(f"Milvus {method} failed: {message(exc)}", store=self.name) from exc

    # ------------------------------------------------------------------ schema

    async def _load_collection_state(self) -> None:
        if not await self._call("has_collection", self.collection):
            self._exists = False
            return
        info = await self._call("describe_collection", self.collection)
        found = check_existing(
            info, name=self.name, dimension=self.dimension, enable_bm25=self.enable_bm25,
            embedding_model=self.embedding_model, analyzer_params=self._analyzer_params,
        )  # fmt: skip
        if self.embedding_model is not None and found.embedding_model is None:
            try:
                await self._call("alter_collection_properties", self.collection,
                                 properties={MODEL_PROPERTY: self.embedding_model})
            except BackendTemporarilyUnavailableError:
                raise
            except BackendError:
                pass  # milvus-lite 2.5.1 has no collection properties: only a model given at creation is recorded
        state = await self._call("get_load_state", self.collection)
        if getattr(state.get("state"), "name", str(state.get("state"))) != "Loaded":
            await self._call("load_collection", self.collection)  # e.g. milvus-lite after a restart
        self.dimension = found.dimension
        self._has_vectors = found.has_vectors
        self.enable_bm25 = found.has_bm25
        self._analyzer_params = found.analyzer_params
        self.embedding_model = self.embedding_model or found.embedding_model
        self._exists = True

    async def _create_collection(self, dimension: int | None) -> None:
        """Create the collection (without dense vectors when ``dimension`` is None), its indexes, and load it.

        A concurrent creator is tolerated: the collection it made is then opened as an existing one.
        """
        pymilvus = import_pymilvus()
        analyzer = self._analyzer_params
        if analyzer is None:  # the default; a collection someone else creates meanwhile keeps its own
            analyzer = {"type": UNSTEMMED_DEFAULT_ANALYZER if self._lite_server else DEFAULT_ANALYZER}
        schema = collection_schema(
            pymilvus, dimension, enable_bm25=self.enable_bm25, analyzer_params=analyzer,
            embedding_model=self.embedding_model,
        )  # fmt: skip
        try:
            await self._call("create_collection", self.collection, schema=schema, consistency_level="Strong",
                             properties=recorded_at_creation(self.embedding_model))
        except BackendError:
            if not await self._call("has_collection", self.collection):
                raise
            await self._load_collection_state()  # another client created it meanwhile: open theirs
            return
        specs = index_specs(dimension, enable_bm25=self.enable_bm25, index_params=self._index_params)
        if self._sync_index_build:
            # pymilvus's async create_index waits through AllocTimestamp, which milvus-lite does not serve;
            # the sync client can start the build without waiting, and we poll describe_index instead.
            await anyio.to_thread.run_sync(self._create_indexes_sync, specs)
        else:
            for spec in specs:
                try:
                    await self._call("create_index", self.collection, index_params(pymilvus, spec))
                except BackendError:
                    if not await self._index_ready(spec["index_name"]):
                        raise
        await self._wait_for_indexes([spec["index_name"] for spec in specs])
        await self._call("load_collection", self.collection)
        self.dimension = dimension
        self._analyzer_params = analyzer if self.enable_bm25 else None
        self._has_vectors = dimension is not None
        self._exists = True

    def _create_indexes_sync(self, specs: list[dict[str, Any]]) -> None:
        try:
            self._create_indexes_once(specs)
        except BackendUnavailableError as exc:
            if not dropped_by_ping_policy(exc):
                raise
            self._create_indexes_once(specs)  # an idle connection the server closed; pymilvus has reconnected

    def _create_indexes_once(self, specs: list[dict[str, Any]]) -> None:
        pymilvus = import_pymilvus()
        client = self._client
        own_sync = self._is_async
        try:
            if own_sync:
                kwargs: dict[str, Any] = {"timeout": self.timeout}
                if self._token:
                    kwargs["token"] = self._token
                if self._db_name:
                    kwargs["db_name"] = self._db_name
                client = pymilvus.MilvusClient(uri=self._lite_path or self.url, **kwargs)
            try:
                existing = set(client.list_indexes(self.collection, timeout=self.timeout))
                for spec in specs:
                    if spec["index_name"] not in existing:
                        client.create_index(
                            self.collection, index_params(pymilvus, spec), timeout=self.timeout, sync=False
                        )
            finally:
                if own_sync:
                    client.close()
        except sdk_errors() as exc:
            kind = BackendUnavailableError if is_unavailable(exc) else BackendError
            raise kind(f"Milvus create_index failed: {message(exc)}", store=self.name) from exc

    async def _index_ready(self, index_name: str) -> bool:
        try:
            info = await self._call("describe_index", self.collection, index_name)
        except BackendError:
            return False
        return bool(info) and info.get("state") in (None, "Finished")

    async def _wait_for_indexes(self, names: list[str]) -> None:
        with anyio.move_on_after(self.timeout) as scope:
            delay = 0.005
            while True:
                ready = [await self._index_ready(name) for name in names]
                if all(ready):
                    return
                await anyio.sleep(delay)
                delay = min(delay * 2, 0.5)
        if scope.cancelled_caught:
            raise BackendError(f"indexes {names} were not built within {self.timeout} s", store=self.name)

    async def _ensure_collection(self, dimension: int | None) -> None:
        await self._ensure_open()
        if self._exists:
            return
        async with self._open_lock:
            if self._exists:
                return
            await self._load_collection_state()  # another process may have created it
            if self._exists:
                return
            if not self._create:
                raise BackendUnavailableError(
                    f"collection {self.collection!r} does not exist (create=False)", store=self.name
                )
            dim = dimension or self.dimension
            if dim is None and not self.enable_bm25:
                raise InvalidParameterError(
                    f"{self.name}: the first write to a new collection needs embeddings, or open the store "
                    "with dimension= (or enable_bm25=True for a BM25-only collection)"
                )
            await self._create_collection(dim)  # None: BM25 only, no dense vectors

    async def _readable(self) -> bool:
        """Open the store; whether its collection exists (a missing one reads as empty)."""
        await self._ensure_open()
        if not self._exists:
            async with self._open_lock:
                if not self._exists:
                    await self._load_collection_state()
        return self._exists

    async def _searchable(self) -> bool:
        """:meth:`_readable`, and on milvus-lite 3.x in this process flush first when many rows were written since
        the last flush.

        milvus-lite 3.x (the Python re-implementation) searches unflushed rows with a per-query scan in Python,
        about 1 s for BM25 over 5,000 documents; after a flush the same search takes about 25 ms. Milvus itself
        (a server, or milvus-lite 2.5.1's native build) searches its growing segments itself and is never
        flushed here.
        """
        exists = await self._readable()
        if exists and self._lite_server and self._unflushed >= _LITE_FLUSH_ROWS:
            async with self._flush_lock:
                if self._unflushed >= _LITE_FLUSH_ROWS:
                    await self.flush()
        return exists

    async def flush(self) -> None:
        """Ask Milvus to seal and persist what was written so far (``flush``).

        Not needed for correctness: writes are visible to searches at once (the collection uses Strong
        consistency). Useful after a bulk load on milvus-lite, where searches over unflushed rows are slow;
        the store does it by itself there before a search that follows 256 or more new rows.

        Raises:
            BackendError: Milvus failed.
        """
        if await self._readable():
            written = self._unflushed
            await self._call("flush", self.collection)
            self._unflushed = max(0, self._unflushed - written)

    # ------------------------------------------------------------------ writes

    async def upsert(self, documents: Sequence[Document], *, embeddings: np.ndarray | None = None) -> None:
        """Insert or replace ``documents`` by id.

        Args:
            documents: the documents. ``content`` and ``metadata["title"]`` feed BM25 (with
                ``enable_bm25``); metadata must be JSON (str keys; str, finite numbers, bools, None, lists,
                objects).
            embeddings: ``(len(documents), dim)`` float32 (other float dtypes are converted), finite; any
                scale (Milvus normalises for COSINE). ``None`` stores the documents without vectors: BM25
                finds them, k-NN never returns them.

        Raises:
            DimensionMismatchError: the width differs from the store's dimension, or the row count from
                ``len(documents)``.
            InvalidParameterError: a vector holds NaN or infinity, an id repeats, an id, the content or metadata
                holds a lone surrogate (not valid Unicode), metadata is not JSON, an id,
                content or BM25 text is longer than 65535 UTF-8 bytes, or the first write to a new collection
                has no embeddings, no ``dimension`` was given and BM25 is off.
            ConfigurationError: embeddings for a BM25-only collection (one created by a first write without
                embeddings and without ``dimension``).
            BackendError: Milvus failed. Milvus has no transactions: batches of 256 documents are written
                one after another, so a failure can leave earlier batches written.
        """
        docs = list(documents)
        if not docs:
            return
        check_unique_ids(docs)
        check_document_text(docs)  # a lone surrogate anywhere: typed, before anything is written
        matrix = (
            None if embeddings is None
            else check_embeddings(embeddings, len(docs), dimension=self.dimension, store=self.name)
        )
        rows = [document_row(doc) for doc in docs]
        await self._ensure_collection(None if matrix is None else matrix.shape[1])
        if matrix is not None and not self._has_vectors:
            raise ConfigurationError(
                f"{self.name}: the collection holds no dense vectors (it was created by a write without "
                "embeddings and no dimension=); use a new collection for vectors"
            )
        if matrix is not None and matrix.shape[1] != self.dimension:
            raise DimensionMismatchError(
                f"{self.name}: embeddings have dimension {matrix.shape[1]}, the store holds {self.dimension}"
            )
        for i, row in enumerate(rows):
            if self._has_vectors:
                assert self.dimension is not None
                row[HAS_VECTOR_FIELD] = matrix is not None
                # a document without a vector gets a unit placeholder that has_vector == false hides from k-NN
                row[VECTOR_FIELD] = matrix[i].tolist() if matrix is not None else [1.0] + [0.0] * (self.dimension - 1)
            if not self.enable_bm25:
                row.pop(TEXT_FIELD)
        for start in range(0, len(rows), _UPSERT_BATCH):
            await self._call("upsert", self.collection, rows[start : start + _UPSERT_BATCH])
            self._unflushed += len(rows[start : start + _UPSERT_BATCH])

    async def delete(self, *, ids: Sequence[str] | None = None, filter: FilterLike | MilvusExpr | None = None) -> int:  # noqa: A002
        """Delete documents; return how many were removed.

        Args:
            ids: delete these ids (unknown ids are ignored).
            filter: delete documents matching this filter (fastrag filter or :class:`MilvusExpr`). With
                ``ids`` too, only documents that have one of the ids *and* match are deleted.

        The matching ids are read first and then deleted by id, so the count is exact; a document written
        between the two steps by another client is not deleted.

        Raises:
            InvalidParameterError: neither ``ids`` nor ``filter`` was given, or ``ids`` is a single string.
            FilterError: the filter is malformed; UnsupportedFilterError: it cannot be expressed.
            BackendError: Milvus failed.
        """
        if ids is None and filter is None:
            raise InvalidParameterError("delete needs ids or a filter; use clear() to delete everything")
        expressions = self._id_filter_expressions(ids, filter)
        if ids is None:
            await self._ensure_open()
            await self._refuse_unscoped_read()
        if not expressions or not await self._readable():
            return 0
        doomed: list[str] = []
        for expression in expressions:
            rows = await self._query_all(expression, [ID_FIELD])
            doomed.extend(row[ID_FIELD] for row in rows)
        doomed = sorted(set(doomed))
        for start in range(0, len(doomed), _ID_BATCH):
            batch = doomed[start : start + _ID_BATCH]
            await self._call("delete", self.collection, filter=ids_expression(batch, stored=True))
        return len(doomed)

    async def clear(self) -> int:
        """Delete every document; return how many were removed."""
        return await self.delete(filter=MilvusExpr(MATCH_ALL))

    def _id_filter_expressions(
        self, ids: Sequence[str] | None, filter: FilterLike | MilvusExpr | None  # noqa: A002
    ) -> list[str]:
        """Expressions whose union selects ``ids`` AND ``filter`` (ids in batches); ``[]`` selects nothing."""
        condition = native_or_translated(filter)
        if ids is None:
            return [condition or MATCH_ALL]
        if isinstance(ids, str) or not isinstance(ids, Sequence):
            raise InvalidParameterError("ids must be a sequence of strings, not one string")
        for i in ids:
            check_id_text(i)  # not a str, or a lone surrogate: InvalidParameterError before any call
        unique = sorted(set(ids))
        return [
            and_expressions(ids_expression(unique[start : start + _ID_BATCH]), condition)
            for start in range(0, len(unique), _ID_BATCH)
        ]

    # ------------------------------------------------------------------ reads

    async def _query_all(self, expression: str, output_fields: list[str]) -> list[dict[str, Any]]:
        """Every row matching ``expression``. Milvus answers one query with at most 16,384 rows, and a query
        without a limit stops there without saying so (measured: 16,383 of 20,000), so rows are read in pages
        of 16,384 in id order (``iterator``: the order pymilvus's own query iterator asks for), each page
        after the last id of the one before."""
        rows: list[dict[str, Any]] = []
        last: str | None = None
        while True:
            page_expression = expression if last is None else and_expressions(
                expression or MATCH_ALL, f"{ID_FIELD} > {string_literal(last)}"
            )
            page = await self._call("query", self.collection, filter=page_expression, output_fields=output_fields,
                                    limit=_QUERY_PAGE, iterator="True")
            rows.extend(page)
            if len(page) < _QUERY_PAGE:
                return rows
            last = max(str(row[ID_FIELD]) for row in page)

    async def count(self, *, filter: FilterLike | MilvusExpr | None = None) -> int:  # noqa: A002
        """How many documents the store holds, or how many match ``filter``.

        Raises:
            FilterError: the filter is malformed; UnsupportedFilterError: it cannot be expressed.
            BackendError: Milvus failed.
        """
        expression = native_or_translated(filter) or ""
        if not await self._readable():
            await self._refuse_unscoped_read()
            return 0
        await self._refuse_unscoped_read()
        rows = await self._call("query", self.collection, filter=expression, output_fields=["count(*)"])
        return int(rows[0]["count(*)"]) if rows else 0

    async def get(
        self, *, ids: Sequence[str] | None = None, filter: FilterLike | MilvusExpr | None = None,  # noqa: A002
        limit: int | None = None,
    ) -> list[Document]:
        """Documents with these ``ids`` and/or matching ``filter`` (all when neither), in id order.

        Every matching document is read (one query per 500 ids) and sorted by id here; ``limit`` then
        keeps the first ones.

        Raises:
            InvalidParameterError: ``limit`` is not a positive int, or ``ids`` is a single string.
            FilterError: the filter is malformed; UnsupportedFilterError: it cannot be expressed.
            BackendError: Milvus failed.
        """
        if limit is not None:
            check_search_k(limit, "limit")
        expressions = self._id_filter_expressions(ids, filter)
        await self._ensure_open()
        await self._refuse_unscoped_read()
        if not expressions or not await self._readable():
            return []
        found: dict[str, Document] = {}
        for expression in expressions:
            rows = await self._query_all(expression, [ID_FIELD, CONTENT_FIELD, METADATA_FIELD])
            for row in rows:
                doc = document(row)
                found[doc.id] = doc
        docs = [found[i] for i in sorted(found)]
        return docs if limit is None else docs[:limit]

    async def search_vector(
        self, embedding: np.ndarray, *, k: int, filter: FilterLike | MilvusExpr | None = None  # noqa: A002
    ) -> list[Document]:
        """Cosine k-NN among documents that have a vector and match ``filter`` (applied before ranking).

        Args:
            embedding: ``(dim,)`` query vector, any scale.
            k: how many documents at most (an int, 1..16384).
            filter: a fastrag filter or a :class:`MilvusExpr`.

        Returns:
            Copies best first, ``score`` = cosine similarity in [-1, 1] (higher is better), zero-based
            ``rank``; equal scores are ordered by id. With the default FLAT index the search is exact.

        Raises:
            InvalidParameterError: ``k`` is out of range, or the vector holds NaN or infinity.
            DimensionMismatchError: the vector's width differs from the store's.
            FilterError / UnsupportedFilterError: the filter is malformed / cannot be expressed.
            BackendError: Milvus failed.
        """
        check_search_k(k)
        query = check_query_vector(embedding, dimension=None, store=self.name)  # the width is checked below
        if query.shape[0] == 0:
            raise DimensionMismatchError(f"query embedding must have shape (dim,), got {query.shape}")
        check_dimension(query.shape[0], self.dimension, store=self.name, what="query has")
        expression = and_expressions(f"{HAS_VECTOR_FIELD} == true", native_or_translated(filter))
        await self._ensure_open()
        await self._refuse_unscoped_read()
        if not await self._searchable() or not self._has_vectors:
            return []  # no collection yet, or a BM25-only one: no document has a vector
        if query.shape[0] != self.dimension:
            raise DimensionMismatchError(
                f"{self.name}: query has dimension {query.shape[0]}, the store holds {self.dimension}"
            )
        if not np.any(query):
            raise InvalidParameterError("query embedding is all zeros; cosine similarity is undefined")
        hits = await self._search(query.tolist(), VECTOR_FIELD, "COSINE", k, expression)
        return ranked([(cosine_score(score), doc) for score, doc in hits], k)

    async def search_text(self, query: str, *, k: int, filter: FilterLike | MilvusExpr | None = None) -> list[Document]:  # noqa: A002
        """BM25 search (Milvus's BM25 function): the ``k`` best documents sharing a term with ``query``.

        Args:
            query: free text, analysed like the documents (``analyzer_params``).
            k: how many documents at most (an int, 1..16384).
            filter: a fastrag filter or a :class:`MilvusExpr`; applied before the top-k cut.

        Returns:
            Copies best first, ``score`` = BM25 (k1 = 1.2, b = 0.75, IDF ``log(1 + (N - n + 0.5) / (n + 0.5))``;
            unbounded, > 0, higher is better), zero-based ``rank``. milvus-lite computes IDF per segment.
            Empty when no document shares a term or the query is blank.

        Raises:
            InvalidParameterError: ``k`` is out of range or ``query`` is not a string.
            ConfigurationError: the collection was created without ``enable_bm25``.
            FilterError / UnsupportedFilterError: the filter is malformed / cannot be expressed.
            BackendError: Milvus failed.
        """
        check_search_k(k)
        if not isinstance(query, str):
            raise InvalidParameterError(f"query must be a string, got {type(query).__name__}")
        expression = native_or_translated(filter) or ""
        exists = await self._searchable()
        await self._refuse_unscoped_read()
        if not self.enable_bm25:
            raise ConfigurationError(
                f"{self.name}: the collection has no BM25 index; create it with enable_bm25=True (in a store URL: "
                "?bm25=true), in a new collection"
            )
        if not exists or not query.strip():
            return []
        hits = await self._unless_never_written(self._search(query, SPARSE_FIELD, "BM25", k, expression), [])
        # milvus-lite 3.x reports BM25 as a negative distance, Milvus as a positive score: BM25 is never negative.
        return ranked([(v, doc) for score, doc in hits if (v := bm25_score(score)) is not None], k)

    async def _unless_never_written(self, search: Awaitable[Any], empty: Any) -> Any:
        """Await a search that has a BM25 leg; ``empty`` where it failed only because the collection never held a
        document: Milvus 2.5 then has no average document length and refuses BM25 ("Invalid sparse row: NaN or
        Inf value"), where fastrag's contract is an empty result."""
        try:
            return await search
        except BackendTemporarilyUnavailableError:
            raise
        except BackendError as exc:
            if "NaN or Inf" not in str(exc) or await self.count() != 0:
                raise
            return empty

    async def _search(self, data: Any, field: str, metric: str, k: int, expression: str) -> list[tuple[float, Document]]:
        """``(distance, document)`` hits best first, enough for :func:`_ranked` to cut at ``k`` (see
        :meth:`_settled_page`)."""

        async def page(limit: int) -> list[Any]:
            result = await self._call(
                "search", self.collection, data=[data], anns_field=field, limit=limit,
                filter=expression, output_fields=[ID_FIELD, CONTENT_FIELD, METADATA_FIELD],
                search_params={"metric_type": metric},
            )
            return result[0] if result else []

        found = await settled_page(page, k, score=bm25_score if metric == "BM25" else cosine_score)
        return [(float(hit["distance"]), document(hit["entity"])) for hit in found]

    async def search_hybrid(
        self,
        query: str,
        embedding: np.ndarray,
        *,
        k: int,
        filter: FilterLike | MilvusExpr | None = None,  # noqa: A002
        fusion: Literal["rrf", "weighted"] = "rrf",
        rank_constant: int = 60,
        weights: Sequence[float] | Mapping[str, float] | None = None,
        candidate_k: int = 40,
        provenance: bool = False,
    ) -> list[Document]:
        """Dense k-NN and BM25 searched inside Milvus, with ``filter`` applied to both legs, and fused: RRF inside
        Milvus (one ``hybrid_search``), weighted by fastrag from the two legs' hits.

        Args:
            query: the text for the BM25 leg (needs ``enable_bm25``).
            embedding: ``(dim,)`` query vector for the dense leg.
            k: how many fused documents at most (an int, 1..16384).
            filter: a fastrag filter or a :class:`MilvusExpr`, applied to each leg before its top-k cut.
            fusion: ``"rrf"``: Milvus's ``RRFRanker``, score = sum over legs of ``1 / (rank_constant + r)``
                with ``r`` the 1-based rank in that leg (Cormack, Clarke & Büttcher, SIGIR 2009); Milvus orders
                equal scores within a leg its own way. ``"weighted"``: each leg's score mapped to [0, 1] (cosine
                by ``(1 + s) / 2``, BM25 by ``2 * atan(s) / pi``, the mapping of Milvus's ``WeightedRanker``
                with ``norm_score=True``) and the weighted sum is the score; fastrag fuses it from the two legs'
                searches (run concurrently), because Milvus 2.5's ranker maps BM25 as a distance (the best BM25
                hit fused lowest, measured on milvus-lite 2.5.1).
            rank_constant: RRF's ``k`` (a positive int; 60 in the paper).
            weights: for ``"weighted"``: ``{"vector": w, "bm25": w}`` or ``(w_vector, w_bm25)``, each in
                [0, 1] (Milvus's range), not both 0; default equal.
            candidate_k: how many hits each leg contributes (at least ``k``).
            provenance: stamp each fused document's ``metadata["branches"]`` with its ``"vector"`` and
                ``"bm25"`` score and zero-based rank (ties ordered by id). For RRF this also runs the two legs
                as plain searches (same requests, concurrently), since ``hybrid_search`` does not report
                per-leg scores: it triples the work, and where a leg has tied scores its ranks here may
                differ from the order Milvus fused. Weighted fusion has the legs anyway.

        Returns:
            Copies best first with the fused ``score`` (higher is better) and zero-based ``rank``; equal
            scores are ordered by id.

        Raises:
            InvalidParameterError: bad ``k``, ``query``, vector, ``fusion``, ``rank_constant``, ``weights`` or
                ``candidate_k``.
            DimensionMismatchError: the vector's width differs from the store's.
            ConfigurationError: the collection was created without BM25.
            FilterError / UnsupportedFilterError: the filter is malformed / cannot be expressed.
            BackendError: Milvus failed.
        """
        plan = plan_hybrid(
            query, embedding, k=k, filter=filter, fusion=fusion, rank_constant=rank_constant, weights=weights,
            candidate_k=candidate_k,
        )  # fmt: skip
        exists = await self._searchable()
        await self._refuse_unscoped_read()
        if not self.enable_bm25:
            raise ConfigurationError(f"{self.name}: the collection has no BM25 index; create it with enable_bm25=True")
        if not exists:
            return []
        if not self._has_vectors:
            raise ConfigurationError(f"{self.name}: the collection holds no dense vectors (BM25 only)")
        if plan.vector.shape[0] != self.dimension:
            raise DimensionMismatchError(
                f"{self.name}: query has dimension {plan.vector.shape[0]}, the store holds {self.dimension}"
            )
        fused = run_hybrid(plan, hybrid_page=self._hybrid_page, search_leg=self._search, provenance=provenance)
        return await self._unless_never_written(fused, [])

    async def _hybrid_page(self, requests: list[Any], fusion_ranker: Any, limit: int) -> list[Any]:
        """The raw hits of one ``hybrid_search`` call for ``limit`` fused hits."""
        result = await self._call(
            "hybrid_search", self.collection, requests, fusion_ranker, limit=limit,
            output_fields=[ID_FIELD, CONTENT_FIELD, METADATA_FIELD],
        )  # fmt: skip
        return result[0] if result else []
