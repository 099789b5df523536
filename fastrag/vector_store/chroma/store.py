"""``ChromaVectorStore``: documents, vectors and metadata in one Chroma collection (see the package docstring for
the record layout and how filters are pushed down)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import numpy as np

from fastrag.errors import (
    BackendError,
    BackendUnavailableError,
    ConfigurationError,
    DimensionMismatchError,
    FastragError,
    FilterError,
    InvalidParameterError,
)
from fastrag.filters import FilterLike
from fastrag.lifecycle import AsyncResource
from fastrag.models import Document
from fastrag.vector_store._validation import (
    check_dimension,
    check_document_text,
    check_embeddings,
    check_k,
    check_query_vector,
    check_unique_ids,
    distinct_ids,
)
from fastrag.vector_store.chroma.connection import (
    HTTP_STATUS,
    import_chromadb,
    mapped_error,
    netloc,
    parse_server_url,
    parse_store_url,
    register_async_client,
    release_async_client,
    watch_statuses,
)
from fastrag.vector_store.chroma.filters import (
    NEVER_WHERE,
    ChromaWhere,
    translate_filter,
)
from fastrag.vector_store.chroma.schema import (
    COLLECTION_NAME,
    DEFAULT_COLLECTION,
    FORMAT_VERSION,
    PREFIX_INDEX_LENGTH,
    prepare_metadata,
    to_document,
)


class ChromaVectorStore(AsyncResource):
    """Documents and vectors in one Chroma collection: cosine k-NN with fastrag filters pushed down.

    Give at most one of ``client``, ``url`` and ``path``; with none, the store uses Chroma's in-memory
    ``EphemeralClient`` (shared by every ephemeral client of the process, lost when the last one closes).

    Args:
        client: a Chroma client to use (``chromadb.EphemeralClient()``, ``PersistentClient(...)``,
            ``HttpClient(...)``, or an ``await chromadb.AsyncHttpClient(...)``); the store never closes it.
        url: a Chroma server, ``http://host:port`` (port 8000 when omitted) or ``https://host[:port]``,
            reached through ``chromadb.AsyncHttpClient``.
        path: a folder for ``chromadb.PersistentClient`` (created if missing).
        collection: the collection name: 3 to 512 characters from ``[a-zA-Z0-9._-]``, starting and ending
            with a letter or digit.
        dimension: the vector width. When given, the collection is created on open (with ``create``) and an
            existing one must have it; when ``None`` it is read from the collection or fixed by the first
            write.
        create: create the collection when it does not exist (on open when ``dimension`` is given, else on
            the first write). With ``False``, writing to a missing collection raises.
        embedding_model: the name of the embedder whose vectors the collection holds; recorded in the
            collection's metadata on first use, and opening it with a different name raises, so vectors of
            two models are never mixed. ``None`` accepts whatever is recorded (see :attr:`embedding_model`).
        timeout: seconds allowed for each request to a Chroma server through the async HTTP client
            (connecting included); embedded clients and injected synchronous clients are not timed.

    Raises:
        ConfigurationError: chromadb is not installed, more than one of ``client``/``url``/``path`` is given,
            the URL or collection name is invalid.
        InvalidParameterError: ``dimension`` or ``timeout`` is not positive.

    Opening (``async with``, or the first call) raises :class:`~fastrag.errors.BackendUnavailableError`
    when the server cannot be reached, and :class:`~fastrag.errors.ConfigurationError` when the collection
    exists but was not created by fastrag, does not use cosine, or has another dimension or embedding model.

    Example::

        async with ChromaVectorStore(path="./chroma", collection="docs") as store:
            await store.upsert(documents, embeddings=vectors)
            hits = await store.search_vector(query_vector, k=5, filter={"equals": {"key": "lang", "value": "en"}})
    """

    def __init__(
        self,
        *,
        client: Any = None,
        url: str | None = None,
        path: str | Path | None = None,
        collection: str = DEFAULT_COLLECTION,
        dimension: int | None = None,
        create: bool = True,
        embedding_model: str | None = None,
        timeout: float = 10.0,
    ) -> None:
        given = [name for name, v in (("client", client), ("url", url), ("path", path)) if v is not None]
        if len(given) > 1:
            raise ConfigurationError(f"give at most one of client, url and path, not {' and '.join(given)}")
        if not isinstance(collection, str) or not COLLECTION_NAME.match(collection):
            raise ConfigurationError(
                f"invalid Chroma collection name {collection!r}: 3 to 512 characters from [a-zA-Z0-9._-], "
                "starting and ending with a letter or digit"
            )
        if dimension is not None and (isinstance(dimension, bool) or not isinstance(dimension, int) or dimension <= 0):
            raise InvalidParameterError(f"dimension must be a positive int, got {dimension!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < math.inf:
            raise InvalidParameterError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if embedding_model is not None and (not isinstance(embedding_model, str) or not embedding_model):
            raise InvalidParameterError(f"embedding_model must be a non-empty string, got {embedding_model!r}")
        self._chromadb = import_chromadb()
        self.collection = collection
        self.dimension: int | None = dimension
        self.create = bool(create)
        self.timeout = float(timeout)
        self.embedding_model: str | None = embedding_model
        """The embedder name recorded in the collection (known once the store is open), or ``None``."""
        self._client = client
        self._owns_client = client is None
        self._server: tuple[str, int, bool] | None = None
        self.path: str | None = None
        if url is not None:
            self._server = parse_server_url(url)
            host, port, ssl = self._server
            self.location = f"chroma{'+https' if ssl else ''}://{netloc(host)}:{port}/{collection}"
        elif path is not None:
            self.path = str(path)
            self.location = f"chroma+path://{Path(self.path).resolve()}?collection={collection}"
        elif client is not None:
            self.location = f"chroma ({type(client).__name__}) collection {collection}"
        else:
            self.location = f"chroma+memory:///{collection}"
        self._is_async = False
        self._collection: Any = None
        self._opened = False
        self._open_lock: anyio.Lock | None = None
        self._loop_key: int | None = None
        self._max_batch: int | None = None

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> ChromaVectorStore:
        """The store a URL names (opened on first use); keyword arguments (``dimension``, ...) override the URL.

        URL forms:

        - ``chroma://host[:port]/collection`` (or ``chroma+http://``): a Chroma server over HTTP (port 8000
          by default); ``chroma+https://host[:port]/collection`` over HTTPS (port 443 by default).
        - ``chroma+path:///relative/dir?collection=name`` or ``chroma+path:////absolute/dir?collection=name``
          (the same slash rule as ``sqlite:///``):
          an embedded ``PersistentClient`` on that folder.
        - ``chroma+memory:///collection``: the embedded in-memory ``EphemeralClient``.

        The collection defaults to :data:`DEFAULT_COLLECTION`; the path is percent-decoded.

        Raises:
            ConfigurationError: the URL is not one of these forms.
        """
        options = parse_store_url(url)
        options.update(kwargs)
        return cls(**options)

    def __repr__(self) -> str:
        return f"ChromaVectorStore({self.location!r})"

    # ------------------------------------------------------------------ lifecycle

    async def _aopen(self) -> None:
        """Open the client and the collection (entering ``async with``; a failure closes the store)."""
        await self._open()

    async def _aclose(self) -> None:
        """Close the client the store created (never an injected one)."""
        self._collection = None
        client, self._client = self._client, None
        if client is None or not self._owns_client:
            return
        if self._is_async:
            await release_async_client(client, self._loop_key)
            return
        close = getattr(client, "close", None)
        if callable(close):
            try:
                await anyio.to_thread.run_sync(close)
            except Exception as exc:
                raise BackendError(f"closing the Chroma client failed: {exc}", store=self.location) from exc

    async def _open(self) -> None:
        if self.closed:
            raise BackendUnavailableError("store is closed", store=self.location)
        if self._opened:
            return
        if self._open_lock is None:
            self._open_lock = anyio.Lock()
        async with self._open_lock:
            if self.closed:
                raise BackendUnavailableError("store is closed", store=self.location)
            if self._opened:
                return
            if self._client is None:
                self._client = await self._create_client()
            self._is_async = isinstance(self._client, self._chromadb.api.AsyncClientAPI)
            collection = await self._fetch_collection()
            if collection is None and not self.create:
                raise BackendUnavailableError(
                    f"collection {self.collection!r} does not exist (create=False)", store=self.location
                )
            if collection is None and self.dimension is not None and self.create:
                collection = await self._create_collection(self.dimension)
            if collection is not None:
                await self._record_embedding_model(collection)
            self._collection = collection
            self._opened = True

    async def _record_embedding_model(self, collection: Any) -> None:
        """Record ``embedding_model`` in a collection that has none recorded yet."""
        metadata = dict(collection.metadata or {})
        if self.embedding_model is None or metadata.get("fastrag:embedding_model") is not None:
            return
        metadata["fastrag:embedding_model"] = self.embedding_model
        await self._call(lambda: collection.modify(metadata=metadata), "recording the embedding model")

    async def _create_client(self) -> Any:
        chromadb = self._chromadb
        if self._server is not None:
            host, port, ssl = self._server
            try:
                with anyio.fail_after(self.timeout):
                    client = await chromadb.AsyncHttpClient(host=host, port=port, ssl=ssl)
            except Exception as exc:
                raise mapped_error(exc, self.location, "connecting") from exc
            self._loop_key = register_async_client()
            return client
        try:
            if self.path is not None:
                Path(self.path).mkdir(parents=True, exist_ok=True)
                return await anyio.to_thread.run_sync(lambda: chromadb.PersistentClient(path=self.path))
            return await anyio.to_thread.run_sync(chromadb.EphemeralClient)
        except Exception as exc:
            raise BackendUnavailableError(f"cannot open Chroma: {exc}", store=self.location) from exc

    async def _call(self, fn: Callable[[], Any], what: str) -> Any:
        """Run one Chroma call: awaited under the timeout (async client) or in a worker thread (sync)."""
        token = HTTP_STATUS.set(None)
        try:
            if self._is_async:
                watch_statuses(self._client)
                with anyio.fail_after(self.timeout):
                    return await fn()
            return await anyio.to_thread.run_sync(fn)
        except FastragError:
            raise
        except Exception as exc:
            if isinstance(exc, self._chromadb.errors.NotFoundError):
                self._collection = None  # deleted behind our back: look it up again next time
                self._opened = False
            raise mapped_error(exc, self.location, what, status=HTTP_STATUS.get()) from exc
        finally:
            HTTP_STATUS.reset(token)

    @contextmanager
    def _reading(self, what: str) -> Iterator[None]:
        """Turn an answer of the wrong shape (a proxy's ``{}`` with status 200) into a typed error naming the store."""
        try:
            yield
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise BackendError(f"Chroma answered {what} with a malformed response: {exc!r}", store=self.location) from exc

    async def _fetch_collection(self) -> Any:
        client = self._client
        try:
            collection = await self._call(
                lambda: client.get_collection(self.collection, embedding_function=None), "opening the collection"
            )
        except BackendError as exc:
            cause = exc.__cause__
            if isinstance(cause, self._chromadb.errors.NotFoundError) or "does not exist" in str(cause):
                self._opened = False
                return None
            raise
        self._check_collection(collection)
        return collection

    async def _create_collection(self, dimension: int) -> Any:
        client = self._client
        metadata: dict[str, Any] = {
            "fastrag:format": FORMAT_VERSION,
            "fastrag:dimension": dimension,
            "fastrag:prefix_length": PREFIX_INDEX_LENGTH,
        }
        if self.embedding_model is not None:
            metadata["fastrag:embedding_model"] = self.embedding_model
        collection = await self._call(
            lambda: client.get_or_create_collection(
                self.collection,
                configuration={"hnsw": {"space": "cosine"}},
                metadata=metadata,
                embedding_function=None,
            ),
            "creating the collection",
        )
        self._check_collection(collection)
        return collection

    def _check_collection(self, collection: Any) -> None:
        metadata = dict(collection.metadata or {})
        if metadata.get("fastrag:format") != FORMAT_VERSION:
            raise ConfigurationError(
                f"{self.location}: collection {self.collection!r} was not created by fastrag (its metadata has "
                f"fastrag:format={metadata.get('fastrag:format')!r}, expected {FORMAT_VERSION}); "
                "use another collection name"
            )
        configuration = getattr(collection, "configuration_json", None) or {}  # .configuration warns
        space = next((c.get("space") for c in (configuration.get("hnsw"), configuration.get("spann")) if c), None)
        if space not in (None, "cosine"):
            raise ConfigurationError(f"{self.location}: collection uses the {space!r} space, not cosine")
        if metadata.get("fastrag:prefix_length") != PREFIX_INDEX_LENGTH:
            raise ConfigurationError(
                f"{self.location}: collection indexes prefixes up to {metadata.get('fastrag:prefix_length')!r} "
                f"characters, this fastrag version {PREFIX_INDEX_LENGTH}; re-index into a new collection"
            )
        stored = metadata.get("fastrag:dimension")
        if self.dimension is not None and stored != self.dimension:
            raise ConfigurationError(
                f"{self.location}: the collection holds dimension {stored!r}, not {self.dimension!r}; "
                "use a new collection or the same dimension"
            )
        model = metadata.get("fastrag:embedding_model")
        if self.embedding_model is not None and model is not None and model != self.embedding_model:
            raise ConfigurationError(
                f"{self.location}: the collection was built with embedding_model={model!r}, not "
                f"{self.embedding_model!r}; use a new collection or the same model"
            )
        self.dimension = stored
        self.embedding_model = model or self.embedding_model

    async def _max_batch_size(self) -> int:
        if self._max_batch is None:
            read = getattr(self._client, "get_max_batch_size", None)
            size = 1000 if read is None else await self._call(read, "reading the batch size")
            self._max_batch = max(1, int(size))
        return self._max_batch

    # ------------------------------------------------------------------ filters

    def _native(
        self, filter: FilterLike | ChromaWhere | None  # noqa: A002
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """``(where, where_document)`` for a filter argument; validated before any query."""
        if isinstance(filter, ChromaWhere):
            where = None if filter.where is None else dict(filter.where)
            where_document = None if filter.where_document is None else dict(filter.where_document)
            validators = self._chromadb.api.types
            try:
                if where is not None:
                    validators.validate_where(where)
                if where_document is not None:
                    validators.validate_where_document(where_document)
            except (TypeError, ValueError) as exc:
                raise FilterError(f"invalid native Chroma filter: {exc}") from exc
            return where, where_document
        return translate_filter(filter), None

    # ------------------------------------------------------------------ writes

    async def upsert(self, documents: Sequence[Document], *, embeddings: np.ndarray | None = None) -> None:
        """Insert or replace ``documents`` by id (content, metadata and vector all replaced).

        Args:
            documents: the documents; metadata must be JSON-serialisable, and its numbers finite.
            embeddings: ``(len(documents), dim)`` float32 (other float dtypes are converted), finite; any
                scale (cosine normalises). Required: a Chroma record without a vector cannot exist here.

        Writes go in batches of Chroma's maximum batch size; each batch is one ``upsert`` call. Chroma merges
        metadata on upsert, so the fields of a replaced version are read first and removed in the same call
        (two writers upserting the same id at once may leave a stale filter field; the stored metadata, read
        back by :meth:`get` and searches, is always the last written).

        Raises:
            InvalidParameterError: ``embeddings`` is missing or holds NaN or infinity, an id repeats, or
                metadata is not JSON or holds a number Chroma cannot filter.
            DimensionMismatchError: the width differs from the store's dimension, or the row count from
                ``len(documents)``.
            BackendUnavailableError: the server cannot be reached, or the collection is missing with
                ``create=False``.
            BackendError: Chroma failed.
        """
        docs = list(documents)
        if not docs:
            return
        ids = check_unique_ids(docs)
        check_document_text(docs)
        if embeddings is None:
            raise InvalidParameterError("ChromaVectorStore stores vectors: upsert needs embeddings")
        matrix = check_embeddings(embeddings, len(docs), dimension=None, store=self.location)  # width: below
        self._check_dimension(matrix.shape[1], "embeddings have")
        metadatas = await anyio.to_thread.run_sync(prepare_metadata, docs)
        await self._open()
        self._check_dimension(matrix.shape[1], "embeddings have")
        if self._collection is None:
            if not self.create:
                raise BackendUnavailableError(
                    f"collection {self.collection!r} does not exist (create=False)", store=self.location
                )
            self._collection = await self._create_collection(matrix.shape[1])
            self._check_dimension(matrix.shape[1], "embeddings have")  # another writer may have created it
        collection = self._collection
        batch = await self._max_batch_size()
        for start in range(0, len(docs), batch):
            chunk_ids = ids[start : start + batch]
            chunk_meta = metadatas[start : start + batch]
            previous = await self._call(
                lambda chunk_ids=chunk_ids: collection.get(ids=chunk_ids, include=["metadatas"]), "upsert"
            )
            old_fields = {i: set(m or ()) for i, m in zip(previous["ids"], previous["metadatas"] or [], strict=False)}
            for doc_id, meta in zip(chunk_ids, chunk_meta, strict=True):
                for stale in old_fields.get(doc_id, set()) - set(meta):
                    meta[stale] = None  # Chroma deletes a metadata field set to None
            await self._call(
                lambda chunk_ids=chunk_ids, chunk_meta=chunk_meta, start=start: collection.upsert(
                    ids=chunk_ids,
                    embeddings=matrix[start : start + batch],
                    metadatas=chunk_meta,
                    documents=[d.content for d in docs[start : start + batch]],
                ),
                "upsert",
            )
        if self.dimension is None:
            self.dimension = int(matrix.shape[1])

    def _check_dimension(self, width: int, what: str) -> None:
        check_dimension(width, self.dimension, store=self.location, what=what)

    async def delete(
        self, *, ids: Sequence[str] | None = None, filter: FilterLike | ChromaWhere | None = None  # noqa: A002
    ) -> int:
        """Delete documents; return how many were removed.

        Args:
            ids: delete these ids (unknown ids are ignored).
            filter: delete documents matching it (a fastrag filter or a :class:`ChromaWhere`). With ``ids``
                too, only documents that have one of the ids *and* match are deleted.

        The matching ids are read, then deleted by id in batches (not one transaction).

        Raises:
            InvalidParameterError: neither ``ids`` nor ``filter`` was given.
            FilterError: the filter is malformed; UnsupportedFilterError: Chroma cannot express it.
            BackendError: Chroma failed.
        """
        if ids is None and filter is None:
            raise InvalidParameterError("delete needs ids or a filter")
        id_list = distinct_ids(ids)
        where, where_document = self._native(filter)
        if id_list == [] or where == NEVER_WHERE:
            return 0
        await self._open()
        collection = self._collection
        if collection is None:
            return 0
        found = await self._call(
            lambda: collection.get(ids=id_list, where=where, where_document=where_document, include=[]), "delete"
        )
        with self._reading("delete"):
            doomed = [str(i) for i in found["ids"]]
        batch = await self._max_batch_size()
        for start in range(0, len(doomed), batch):
            chunk = doomed[start : start + batch]
            await self._call(lambda chunk=chunk: collection.delete(ids=chunk), "delete")
        return len(doomed)

    # ------------------------------------------------------------------ reads

    async def count(self, *, filter: FilterLike | ChromaWhere | None = None) -> int:  # noqa: A002
        """How many documents the store holds, or how many match ``filter``.

        Raises:
            FilterError: the filter is malformed; UnsupportedFilterError: Chroma cannot express it.
            BackendError: Chroma failed.
        """
        where, where_document = self._native(filter)
        if where == NEVER_WHERE:
            return 0
        await self._open()
        collection = self._collection
        if collection is None:
            return 0
        if where is None and where_document is None:
            total = await self._call(collection.count, "count")
            with self._reading("count"):
                if isinstance(total, bool) or not isinstance(total, int) or total < 0:
                    raise TypeError(f"a count must be an int >= 0, got {total!r}")
                return total
        found = await self._call(
            lambda: collection.get(where=where, where_document=where_document, include=[]), "count"
        )
        with self._reading("count"):
            return len(found["ids"])

    async def get(
        self,
        *,
        ids: Sequence[str] | None = None,
        filter: FilterLike | ChromaWhere | None = None,  # noqa: A002
        limit: int | None = None,
    ) -> list[Document]:
        """Documents with these ``ids`` and/or matching ``filter`` (all when neither), in id order.

        Args:
            ids: only these ids (unknown ids are ignored).
            filter: only documents matching it.
            limit: at most this many, the first in id order (an int > 0).

        Raises:
            InvalidParameterError: ``limit`` is not a positive int, or ``ids`` is a string.
            FilterError: the filter is malformed; UnsupportedFilterError: Chroma cannot express it.
            BackendError: Chroma failed.
        """
        if limit is not None:
            check_k(limit, "limit")
        id_list = distinct_ids(ids)
        where, where_document = self._native(filter)
        if id_list == [] or where == NEVER_WHERE:
            return []
        await self._open()
        collection = self._collection
        if collection is None:
            return []
        if limit is not None:
            found = await self._call(
                lambda: collection.get(ids=id_list, where=where, where_document=where_document, include=[]), "get"
            )
            with self._reading("get"):
                id_list = sorted(found["ids"])[:limit]
            if not id_list:
                return []
            where = where_document = None
        result = await self._call(
            lambda: collection.get(
                ids=id_list, where=where, where_document=where_document, include=["metadatas", "documents"]
            ),
            "get",
        )
        with self._reading("get"):
            docs = [
                to_document(i, c, m)
                for i, c, m in zip(result["ids"], result["documents"] or [], result["metadatas"] or [], strict=True)
            ]
        docs.sort(key=lambda d: d.id)
        return docs

    async def search_vector(
        self, embedding: np.ndarray, *, k: int, filter: FilterLike | ChromaWhere | None = None  # noqa: A002
    ) -> list[Document]:
        """Cosine k-NN among documents matching ``filter`` (applied by Chroma before ranking).

        Args:
            embedding: ``(dim,)`` query vector (any scale; cosine normalises it). A zero vector scores 0
                against every document.
            k: how many documents at most (an int > 0).
            filter: a fastrag filter, or a :class:`ChromaWhere`.

        Returns:
            Copies best first, ``score`` = cosine similarity ``1 - distance`` in [-1, 1] (higher is better),
            zero-based ``rank``; ties are broken by id (the store asks Chroma for more results until the
            ``k``-th score is not tied with the last one returned).

        Raises:
            DimensionMismatchError: the vector's width differs from the store's.
            InvalidParameterError: ``k`` is not a positive int, or the vector holds NaN or infinity.
            FilterError: the filter is malformed; UnsupportedFilterError: Chroma cannot express it.
            BackendUnavailableError: the server cannot be reached; BackendError: Chroma failed.
        """
        check_k(k)
        query = check_query_vector(embedding, dimension=None, store=self.location)  # width: below
        if query.shape[0] == 0:
            raise DimensionMismatchError(f"query embedding must have shape (dim,), got {query.shape}")
        self._check_dimension(query.shape[0], "query has")
        where, where_document = self._native(filter)
        if where == NEVER_WHERE:
            return []
        await self._open()
        self._check_dimension(query.shape[0], "query has")
        collection = self._collection
        if collection is None:
            return []
        wanted = k + 1
        while True:
            result = await self._call(
                lambda n=wanted: collection.query(
                    query_embeddings=query[None, :],
                    n_results=n,
                    where=where,
                    where_document=where_document,
                    include=["metadatas", "documents", "distances"],
                ),
                "search_vector",
            )
            with self._reading("search_vector"):
                hits = sorted(
                    (
                        (min(1.0, max(-1.0, 1.0 - float(distance))), i, c, m)
                        for i, c, m, distance in zip(
                            result["ids"][0], result["documents"][0], result["metadatas"][0], result["distances"][0],
                            strict=True,
                        )
                    ),
                    key=lambda h: (-h[0], h[1]),
                )
            if len(hits) < wanted or hits[-1][0] != hits[k - 1][0]:
                break
            wanted *= 2  # the k-th score ties with the last one fetched: more may tie beyond it
        with self._reading("search_vector"):
            return [to_document(i, c, m).ranked(score=s, rank=r) for r, (s, i, c, m) in enumerate(hits[:k])]
