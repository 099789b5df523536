"""``QdrantVectorStore``: documents, dense vectors and a BM25 text index in one Qdrant collection (see the package
docstring for the layout and how filters run)."""

from __future__ import annotations

import functools
import inspect
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import anyio
import numpy as np

from fastrag.analysis import Analyzer
from fastrag.errors import (
    BackendError,
    BackendTemporarilyUnavailableError,
    BackendUnavailableError,
    ConfigurationError,
    DimensionMismatchError,
    FastragError,
    InvalidParameterError,
    RateLimitError,
)
from fastrag.filters import FilterLike
from fastrag.lifecycle import AsyncResource
from fastrag.models import BRANCHES, RANK, SCORE, Document
from fastrag.vector_store._validation import (
    check_document_text,
    check_embeddings,
    check_k,
    check_query_vector,
    check_unique_ids,
    distinct_ids,
)
from fastrag.vector_store.qdrant.connection import (
    describe_error,
    import_models,
    is_unavailable,
    parse_store_url,
    retry_after,
)
from fastrag.vector_store.qdrant.filters import and_filters, native_filter
from fastrag.vector_store.qdrant.schema import (
    BM25_B,
    BM25_K1,
    DEFAULT_COLLECTION,
    DENSE,
    ID_FIELD,
    READ_FIELDS,
    SCHEMA_VERSION,
    TERMS_FIELD,
    plain_metadata,
    point_id,
    point_payload,
    to_document,
)

_PAGE = 256
_ABANDONABLE = frozenset({"query_points", "query_batch_points", "scroll", "count"})  # reads of local mode


class QdrantVectorStore(AsyncResource):
    """Documents with dense vectors in one Qdrant collection; BM25 too with ``enable_bm25``.

    Exactly one of ``url``, ``location``, ``path`` and ``client`` names where the collection lives.

    Args:
        url: a Qdrant server, ``http://host:6333`` (REST through ``AsyncQdrantClient``).
        location: ``":memory:"`` for qdrant-client's in-process local mode (gone when closed).
        path: a folder for local mode on disk. The folder is locked to one client: close a store
            before opening another on the same folder.
        edge_path: a folder of Qdrant Edge shards (``qdrant-edge-py``: Qdrant's own engine in process), one
            per collection; a prototype (exact search, no HNSW; see ``docs/backends/qdrant.md``). A
            collection's shard is locked to one process.
        collection: the collection name.
        dimension: the vector width. With it the collection is created when the store opens (if
            missing); without it, on the first write, with the width of that write's embeddings. A
            collection remembers its width; a different ``dimension`` raises.
        client: an ``AsyncQdrantClient`` or ``QdrantClient`` to use; it is never closed by the store.
        enable_bm25: index ``title`` + ``content`` for BM25 (:meth:`search_text`). ``None`` (default)
            takes the collection's setting, ``False`` for a new one; an explicit value must match an
            existing collection's.
        analyzer: the BM25 text analysis (default: English). A collection remembers its language.
        embedding_model: the embedder's name; recorded on first use, and a different name raises, so
            vectors of two models are never mixed.
        create: create the collection when it is missing; with ``False`` a missing collection raises.
        timeout: seconds for each server request (rounded up to whole seconds by qdrant-client).
        api_key: the server's API key.
        prefer_grpc: talk gRPC to a server instead of REST.

    Raises:
        ConfigurationError: not exactly one location; qdrant-client is missing; ``dimension``, ``analyzer``,
            ``enable_bm25`` or ``embedding_model`` differ from the collection's (raised when the store opens).
        BackendUnavailableError: local mode cannot open ``path`` (locked by another client).
        InvalidParameterError: ``dimension`` or ``timeout`` is not positive.

    Example::

        async with QdrantVectorStore(location=":memory:", collection="docs", enable_bm25=True) as store:
            await store.upsert(docs, embeddings=vectors)
            hits = await store.search_vector(query_vector, k=5, filter=field("lang") == "en")
    """

    def __init__(
        self,
        *,
        url: str | None = None,
        location: str | None = None,
        path: str | Any | None = None,
        edge_path: str | Any | None = None,
        collection: str = DEFAULT_COLLECTION,
        dimension: int | None = None,
        client: Any | None = None,
        enable_bm25: bool | None = None,
        analyzer: Analyzer | None = None,
        embedding_model: str | None = None,
        create: bool = True,
        timeout: float = 10.0,
        api_key: str | None = None,
        prefer_grpc: bool = False,
    ) -> None:
        given = [name for name, v in (("url", url), ("location", location), ("path", path),
                                      ("edge_path", edge_path), ("client", client)) if v is not None]
        if len(given) != 1:
            raise ConfigurationError(
                "QdrantVectorStore needs exactly one of url=, location=, path=, edge_path= or client=, "
                f"got {given or 'none'}"
            )
        if location is not None and location != ":memory:":
            raise ConfigurationError(f"location must be ':memory:', got {location!r}; use url= for a server")
        if dimension is not None and (isinstance(dimension, bool) or not isinstance(dimension, int) or dimension <= 0):
            raise InvalidParameterError(f"dimension must be a positive int, got {dimension!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise InvalidParameterError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        if not isinstance(collection, str) or not collection:
            raise InvalidParameterError(f"collection must be a non-empty string, got {collection!r}")
        if enable_bm25 is not None and not isinstance(enable_bm25, bool):
            raise InvalidParameterError(f"enable_bm25 must be a bool or None, got {enable_bm25!r}")
        m = import_models()
        self.collection = collection
        self.dimension: int | None = dimension
        self.analyzer = analyzer or Analyzer()
        self.embedding_model = embedding_model
        self._want_bm25 = enable_bm25
        self.enable_bm25: bool = bool(enable_bm25)
        self._create = create
        self._models = m
        self._lock = threading.Lock()
        self._open_lock = anyio.Lock()
        self._exists: bool | None = None
        self._has_dense = False
        self._meta: dict[str, Any] = {}
        where = (url or location or (str(path) if path is not None else None)
                 or (f"edge {edge_path}" if edge_path is not None else None) or f"{type(client).__name__}")
        self.name = f"qdrant {where} collection {collection!r}"
        self._owns_client = client is None
        if client is not None:
            self._client = client
        elif url is not None:
            from qdrant_client import AsyncQdrantClient

            try:
                self._client = AsyncQdrantClient(
                    url=url, timeout=math.ceil(timeout), api_key=api_key, prefer_grpc=prefer_grpc,
                    check_compatibility=False,
                )
            except Exception as exc:
                raise ConfigurationError(f"{self.name}: invalid Qdrant URL: {exc}") from exc
        elif edge_path is not None:
            from fastrag.vector_store.qdrant.edge_client import EdgeClient

            try:
                self._client = EdgeClient(edge_path)
            except OSError as exc:
                raise BackendUnavailableError(f"cannot open the Qdrant Edge folder: {exc}", store=self.name) from exc
        else:
            from qdrant_client import QdrantClient

            try:
                if path is not None:
                    self._client = QdrantClient(path=str(path))
                else:
                    self._client = QdrantClient(location=location)
            except Exception as exc:
                raise BackendUnavailableError(f"cannot open Qdrant local mode: {exc}", store=self.name) from exc
        self._is_async = inspect.iscoroutinefunction(getattr(self._client, "query_points", None))

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> QdrantVectorStore:
        """Build a store from a URL; ``kwargs`` are constructor arguments and win over the URL's options.

        Forms (``COLLECTION`` defaults to ``"fastrag"``)::

            qdrant://HOST[:PORT]/COLLECTION        a server over http (port 6333 by default)
            qdrants://HOST[:PORT]/COLLECTION       a server over https
            qdrant+memory:///COLLECTION            local mode in memory
            qdrant+path:///PATH?collection=NAME    local mode on disk: a relative PATH;
            qdrant+path:////PATH?collection=NAME   an absolute /PATH (as sqlite:/// URLs)
            qdrant+edge:///PATH?collection=NAME    Qdrant Edge shards in PATH (the prototype, edge_path=)

        Query options, all optional: ``collection`` (for the local forms), ``bm25=true|false``,
        ``dimension=N``, ``timeout=SECONDS``, ``create=true|false``; a server's API key may be given as
        ``api_key=`` (better passed as a keyword argument than written into a URL).

        Raises:
            ConfigurationError: the URL is not one of these forms or an option is invalid.
        """
        args = parse_store_url(url)
        args.update(kwargs)
        return cls(**args)

    def __repr__(self) -> str:
        return f"QdrantVectorStore({self.name!r})"

    # ------------------------------------------------------------------ lifecycle

    async def _aopen(self) -> None:
        """Learn whether the collection exists and check it (entering ``async with``; a failure closes the store)."""
        await self._ready()

    async def _aclose(self) -> None:
        """Close the client the store created (an injected client stays open)."""
        if not self._owns_client:
            return
        try:
            if self._is_async:
                await self._client.close()
            else:
                await anyio.to_thread.run_sync(self._close_sync)
        except Exception as exc:
            raise BackendError(f"closing the client failed: {describe_error(exc)}", store=self.name) from exc

    def _close_sync(self) -> None:
        with self._lock:
            self._client.close()

    async def _call(self, method: str, /, **kwargs: Any) -> Any:
        if self.closed:
            raise BackendUnavailableError("store is closed", store=self.name)
        try:
            if self._is_async:
                return await getattr(self._client, method)(**kwargs)
            call = functools.partial(getattr(self._client, method), **kwargs)
            # A read is abandoned when its caller is cancelled (a branch_timeout, a cancel scope): local
            # mode cannot be interrupted, so the call returns on time and the thread finishes unobserved,
            # holding the store's lock until then. A write is always waited for.
            return await anyio.to_thread.run_sync(self._locked, call, abandon_on_cancel=method in _ABANDONABLE)
        except FastragError:
            raise
        except Exception as exc:
            if is_unavailable(exc):
                raise BackendTemporarilyUnavailableError(f"{method} failed: {describe_error(exc)}", store=self.name) from exc
            if getattr(exc, "status_code", None) == 429:
                raise RateLimitError(f"{method} failed: {describe_error(exc)}", store=self.name,
                                     retry_after=retry_after(exc)) from exc
            raise BackendError(f"{method} failed: {describe_error(exc)}", store=self.name) from exc

    def _locked(self, call: Callable[[], Any]) -> Any:
        with self._lock:
            return call()

    # ------------------------------------------------------------------ collection state

    async def _ready(self) -> bool:
        """Learn (once) whether the collection exists and check its settings; create it when asked."""
        if self._exists:
            return True
        async with self._open_lock:
            if self._exists:
                return True
            exists = await self._call("collection_exists", collection_name=self.collection)
            if exists:
                await self._adopt()
            elif not self._create:
                raise BackendUnavailableError("the collection does not exist (create=False)", store=self.name)
            elif self.dimension is not None:
                await self._create_collection(self.dimension)
            return bool(self._exists)

    async def _adopt(self) -> None:
        info = await self._call("get_collection", collection_name=self.collection)
        meta = (getattr(info.config, "metadata", None) or {}).get("fastrag")
        if not isinstance(meta, dict) or meta.get("schema") != SCHEMA_VERSION:
            raise ConfigurationError(
                f"{self.name}: not a fastrag collection (schema {SCHEMA_VERSION}); use a new collection name"
            )
        vectors = info.config.params.vectors
        dense = vectors.get(DENSE) if isinstance(vectors, Mapping) else None
        if dense is not None:
            if dense.distance != self._models.Distance.COSINE:
                raise ConfigurationError(f"{self.name}: the dense vector uses {dense.distance}, not cosine")
            self._check_setting("dimension", dense.size, self.dimension)
            self.dimension = dense.size
            self._has_dense = True
        elif self.dimension is not None and self._create:
            await self._add_dense(self.dimension)
        self._check_setting("analyzer_language", meta.get("analyzer_language"), self.analyzer.language or "none")
        self._check_setting("enable_bm25", meta.get("enable_bm25"), self._want_bm25)
        self.enable_bm25 = bool(meta.get("enable_bm25"))
        await self._check_analysis(meta)
        stored_model = meta.get("embedding_model")
        self._check_setting("embedding_model", stored_model, self.embedding_model)
        self._meta = dict(meta)
        self._exists = True
        if stored_model is None and self.embedding_model is not None:
            await self._write_meta()
        elif self.embedding_model is None:
            self.embedding_model = stored_model

    async def _check_analysis(self, meta: dict[str, Any]) -> None:
        """Refuse a BM25 collection whose terms were made by another text analysis (issue 14): its postings
        would not match this fastrag's query terms. A collection without the key predates the record
        (analysis version 1); one without points is simply stamped with the current analysis."""
        stored = meta.get("analysis", "fastrag-analysis/1")
        signature = self.analyzer.signature
        if not self.enable_bm25 or stored == signature:
            return
        result = await self._call("count", collection_name=self.collection, exact=True)
        if int(result.count):
            raise ConfigurationError(
                f"{self.name}: the collection's BM25 terms were made by {stored}, this fastrag analyses text by "
                f"{signature}, so keyword search would miss words; index the documents again into a new "
                f"collection (`fastrag index PATHS --store <a new qdrant collection URL>`, or upsert them from Python)"
            )
        meta["analysis"] = signature
        await self._call("update_collection", collection_name=self.collection, metadata={"fastrag": meta})

    def _check_setting(self, key: str, stored: Any, wanted: Any) -> None:
        if wanted is not None and stored is not None and stored != wanted:
            raise ConfigurationError(
                f"{self.name}: the collection was built with {key}={stored!r}, not {wanted!r}; "
                "use a new collection or the same settings"
            )

    async def _write_meta(self) -> None:
        self._meta.update(embedding_model=self.embedding_model)
        await self._call("update_collection", collection_name=self.collection, metadata={"fastrag": self._meta})

    async def _create_collection(self, dimension: int | None) -> None:
        m = self._models
        self._meta = {
            "schema": SCHEMA_VERSION,
            "analyzer_language": self.analyzer.language or "none",
            "analysis": self.analyzer.signature,
            "enable_bm25": self.enable_bm25,
            "embedding_model": self.embedding_model,
        }
        vectors = {} if dimension is None else {DENSE: m.VectorParams(size=dimension, distance=m.Distance.COSINE)}
        await self._call(
            "create_collection", collection_name=self.collection, vectors_config=vectors,
            metadata={"fastrag": self._meta},
        )
        if self.enable_bm25:
            await self._call(
                "create_payload_index", collection_name=self.collection, field_name=TERMS_FIELD,
                field_schema=m.TextIndexParams(
                    type=m.TextIndexType.TEXT, tokenizer=m.TokenizerType.WORD, lowercase=True,
                    scoring=m.TextScoringParams(type=m.TextScoringType.BM25),
                ),
                wait=True,
            )
        self.dimension = dimension
        self._has_dense = dimension is not None
        self._exists = True

    async def _add_dense(self, dimension: int) -> None:
        m = self._models
        await self._call(
            "create_vector_name", collection_name=self.collection, vector_name=DENSE,
            vector_name_config=m.DenseVectorNameConfig(
                dense=m.DenseVectorConfig(size=dimension, distance=m.Distance.COSINE)
            ),
            wait=True,
        )
        self.dimension = dimension
        self._has_dense = True

    async def _ready_for_write(self, dimension: int | None) -> None:
        async with self._open_lock:
            if not self._exists:
                exists = await self._call("collection_exists", collection_name=self.collection)
                if exists:
                    await self._adopt()
                elif not self._create:
                    raise BackendUnavailableError("the collection does not exist (create=False)", store=self.name)
                else:
                    await self._create_collection(dimension if dimension is not None else self.dimension)
            if dimension is not None:
                if self.dimension is not None and self.dimension != dimension:
                    raise DimensionMismatchError(
                        f"{self.name}: embeddings have dimension {dimension}, the store holds {self.dimension}"
                    )
                if not self._has_dense:
                    await self._add_dense(dimension)

    # ------------------------------------------------------------------ filters

    def _filter(self, filter: FilterLike | Any | None, ids: Sequence[str] | None = None) -> Any:
        """The Qdrant filter for ``filter`` (fastrag or native) AND-ed with ``ids``; translated before any call."""
        m = self._models
        id_condition = None
        if ids is not None:
            if isinstance(ids, str) or not isinstance(ids, Sequence | set | frozenset):
                raise InvalidParameterError("ids must be a sequence of strings, not one string")
            unique = distinct_ids(list(ids)) or []  # valid Unicode: point_id() encodes them as UTF-8
            id_condition = m.Filter(must=[m.HasIdCondition(has_id=[point_id(i) for i in unique])])
        return and_filters(m, native_filter(m, filter), id_condition)

    # ------------------------------------------------------------------ writes

    async def upsert(self, documents: Sequence[Document], *, embeddings: np.ndarray | None = None) -> None:
        """Insert or replace ``documents`` by id, in one Qdrant update request.

        Args:
            documents: the documents. Metadata must be JSON (str, int within signed 64 bits, finite float,
                bool, None, lists, mappings); with BM25 enabled, ``title`` + ``content`` are indexed.
            embeddings: ``(len(documents), dim)`` float (converted to float32), finite; ``None`` stores the
                documents without vectors (found by BM25, not by k-NN).

        Raises:
            DimensionMismatchError: the width differs from the collection's, or the row count from
                ``len(documents)``.
            InvalidParameterError: a vector holds NaN or infinity, an id repeats, or metadata is not JSON.
            BackendError: Qdrant failed.
        """
        docs = list(documents)
        if not docs:
            return
        for doc in docs:
            if not isinstance(doc, Document):
                raise InvalidParameterError(f"upsert takes Document objects, got {type(doc).__name__}")
        check_unique_ids(docs)
        check_document_text(docs)
        matrix = (
            None if embeddings is None
            else check_embeddings(embeddings, len(docs), dimension=self.dimension, store=self.name)
        )
        # Validation and payload building are CPU work: off the event loop, and before any backend call.
        metadata = await anyio.to_thread.run_sync(lambda: [plain_metadata(dict(d.metadata)) for d in docs])
        await self._ready_for_write(None if matrix is None else matrix.shape[1])
        points = await anyio.to_thread.run_sync(self._points, docs, metadata, matrix, self.enable_bm25)
        await self._call("upsert", collection_name=self.collection, points=points, wait=True)

    def _points(
        self, docs: list[Document], metadata: list[dict[str, Any]], matrix: np.ndarray | None, bm25: bool
    ) -> list[Any]:
        m = self._models
        points = []
        for i, (doc, meta) in enumerate(zip(docs, metadata, strict=True)):
            payload = point_payload(doc, meta, " ".join(self._index_terms(doc)) if bm25 else "")
            vector = {} if matrix is None else {DENSE: matrix[i].tolist()}
            points.append(m.PointStruct(id=point_id(doc.id), vector=vector, payload=payload))
        return points

    def _index_terms(self, doc: Document) -> list[str]:
        title = doc.metadata.get("title")
        text = f"{title}\n{doc.content}" if isinstance(title, str) and title else doc.content
        return self.analyzer.analyze(text)

    async def delete(self, *, ids: Sequence[str] | None = None, filter: FilterLike | Any | None = None) -> int:
        """Delete documents; return how many were removed.

        The matching point ids are read first (a scroll), then exactly those points are deleted in one
        request, so the count is exact.

        Args:
            ids: delete these ids (unknown ids are ignored).
            filter: a fastrag filter or a native ``models.Filter``. With ``ids`` too, only documents with
                one of the ids *and* matching the filter are deleted.

        Raises:
            InvalidParameterError: neither ``ids`` nor ``filter`` was given (use :meth:`clear`).
            FilterError: the filter is malformed; UnsupportedFilterError: it cannot be expressed.
            BackendError: Qdrant failed.
        """
        if ids is None and filter is None:
            raise InvalidParameterError("delete needs ids or a filter; use clear() to delete everything")
        return await self._delete_matching(self._filter(filter, ids))

    async def clear(self) -> int:
        """Delete every document; return how many were removed."""
        return await self._delete_matching(None)

    async def _delete_matching(self, qfilter: Any) -> int:
        if not await self._ready():
            return 0
        found = [p.id for p in await self._scroll(qfilter, payload=False)]
        if not found:
            return 0
        m = self._models
        for start in range(0, len(found), 1000):
            await self._call(
                "delete", collection_name=self.collection,
                points_selector=m.PointIdsList(points=found[start : start + 1000]), wait=True,
            )
        return len(found)

    # ------------------------------------------------------------------ reads

    async def _scroll(self, qfilter: Any, *, payload: bool) -> list[Any]:
        points: list[Any] = []
        offset = None
        while True:
            page, offset = await self._call(
                "scroll", collection_name=self.collection, scroll_filter=qfilter, limit=_PAGE, offset=offset,
                with_payload=READ_FIELDS if payload else False, with_vectors=False,
            )
            points.extend(page)
            if offset is None:
                return points

    async def count(self, *, filter: FilterLike | Any | None = None) -> int:
        """How many documents the store holds, or how many match ``filter`` (fastrag or native)."""
        qfilter = self._filter(filter)
        if not await self._ready():
            return 0
        result = await self._call("count", collection_name=self.collection, count_filter=qfilter, exact=True)
        return int(result.count)

    async def get(
        self, *, ids: Sequence[str] | None = None, filter: FilterLike | Any | None = None, limit: int | None = None
    ) -> list[Document]:
        """Documents with these ``ids`` and/or matching ``filter`` (all when neither), in id order.

        Every matching point is read (paged) and sorted by id here, since Qdrant orders by point id.
        """
        if limit is not None:
            check_k(limit, "limit")
        qfilter = self._filter(filter, ids)
        if not await self._ready():
            return []
        docs = sorted((to_document(p.payload) for p in await self._scroll(qfilter, payload=True)), key=lambda d: d.id)
        return docs if limit is None else docs[:limit]

    async def search_vector(
        self, embedding: np.ndarray, *, k: int, filter: FilterLike | Any | None = None
    ) -> list[Document]:
        """Cosine k-NN among documents matching ``filter`` (applied inside Qdrant, before ranking).

        Args:
            embedding: ``(dim,)`` query vector (any scale; Qdrant normalises it).
            k: how many documents at most (an int > 0).
            filter: a fastrag filter, or a native ``qdrant_client.models.Filter`` passed through as is.

        Returns:
            Copies best first, ``score`` = cosine similarity in [-1, 1] (higher is better), zero-based
            ``rank``; ties are broken by id. A zero vector scores 0 against everything. Documents stored
            without a vector are never returned.

        Raises:
            DimensionMismatchError: the vector's width differs from the store's.
            InvalidParameterError: ``k`` is not a positive int, or the vector holds NaN or infinity.
            FilterError: the filter is malformed; UnsupportedFilterError: it cannot be expressed.
            BackendError: Qdrant failed.
        """
        check_k(k)
        query = check_query_vector(embedding, dimension=self.dimension, store=self.name)
        qfilter = self._filter(filter)
        if not await self._ready() or not self._has_dense:
            return []
        query = check_query_vector(query, dimension=self.dimension, store=self.name)
        m = self._models
        if not np.any(query):
            zero = and_filters(m, qfilter, m.Filter(must=[m.HasVectorCondition(has_vector=DENSE)]))
            docs = sorted((to_document(p.payload) for p in await self._scroll(zero, payload=True)), key=lambda d: d.id)
            return [d.ranked(score=0.0, rank=r) for r, d in enumerate(docs[:k])]
        scored = await self._query_top(k, query=query.tolist(), using=DENSE, query_filter=qfilter)
        return [d.ranked(score=min(1.0, max(-1.0, s)), rank=r) for r, (s, d) in enumerate(scored)]

    async def search_text(self, query: str, *, k: int, filter: FilterLike | Any | None = None) -> list[Document]:
        """BM25 (Qdrant's text-index scoring, k1 = 1.2, b = 0.75) over ``title`` + ``content``.

        Args:
            query: free text, analysed like the documents (stemming, stopwords, CJK bigrams).
            k: how many documents at most (an int > 0).
            filter: a fastrag filter or a native ``models.Filter``; applied before the top-k cut.

        Returns:
            Copies best first with ``score`` = BM25 (unbounded, > 0, higher is better; float32 precision)
            and zero-based ``rank``; ties broken by id. Only documents sharing at least one analysed term
            with the query; empty when the query has no terms left after analysis.

        Raises:
            ConfigurationError: the store was not opened with ``enable_bm25=True`` (nor is its collection).
            InvalidParameterError: ``k`` is not a positive int or ``query`` is not a string.
            FilterError: the filter is malformed; UnsupportedFilterError: it cannot be expressed.
            BackendError: Qdrant failed.
        """
        check_k(k)
        if not isinstance(query, str):
            raise InvalidParameterError(f"query must be a string, got {type(query).__name__}")
        qfilter = self._filter(filter)
        exists = await self._ready()
        if not self.enable_bm25:
            raise ConfigurationError(
                f"{self.name}: BM25 is not enabled; open the store with enable_bm25=True (in a store URL: "
                "?bm25=true). A collection created without BM25 cannot gain it: index into a new collection"
            )
        text_query = self._text_query(query)
        if not exists or text_query is None:
            return []
        scored = await self._query_top(k, query=text_query, using=TERMS_FIELD, query_filter=qfilter)
        return [d.ranked(score=s, rank=r) for r, (s, d) in enumerate(scored)]

    async def search_hybrid(
        self,
        query: str,
        embedding: np.ndarray,
        *,
        k: int,
        filter: FilterLike | Any | None = None,  # noqa: A002
        fusion: Literal["rrf", "dbsf"] = "rrf",
        rank_constant: int = 60,
        weights: Mapping[str, float] | None = None,
        candidate_k: int = 40,
    ) -> list[Document]:
        """Dense k-NN and BM25 fused inside Qdrant: one Query API batch with two prefetch legs.

        Both legs (``"vector"``: ``embedding`` on the dense vector; ``"bm25"``: the analysed ``query`` on the
        text index) carry ``filter`` and ask for ``max(candidate_k, k)`` documents; Qdrant fuses them. The
        same batch also returns each leg's list, so every result records its per-branch score and rank. A
        leg whose weight is 0, a zero ``embedding`` (or a collection without dense vectors) and a query
        with no terms left after analysis each drop their leg.

        Args:
            query: the text for the BM25 leg (a non-blank string).
            embedding: ``(dim,)`` query vector for the dense leg.
            k: how many fused documents at most (an int > 0).
            filter: a fastrag filter or a native ``models.Filter``, applied to both legs before their cuts.
            fusion: ``"rrf"`` (Reciprocal Rank Fusion, Cormack et al. 2009: a document scores
                ``sum 1 / (rank_constant + r)`` with one-based ranks ``r``, sent to Qdrant as
                ``k = rank_constant + 1`` since Qdrant counts ranks from zero) or ``"dbsf"`` (Qdrant's
                distribution-based score fusion: each leg normalised by mean ± 3 standard deviations, summed).
            rank_constant: RRF's constant (a positive int; 60 in the paper).
            weights: RRF only: ``{"vector": w, "bm25": w}``, Qdrant's weighted RRF
                (``1 / (r / w + rank_constant)``); ``None``: unweighted.
            candidate_k: how many documents each leg contributes (a positive int; at least ``k`` are read).

        Returns:
            Copies best first with the fused ``score`` (RRF: in ``(0, 2 / (rank_constant + 1)]``; DBSF: a sum
            of normalised scores), zero-based ``rank`` and ``metadata["branches"] = {"vector": {"score",
            "rank"}, "bm25": {...}}`` for the legs that returned the document. Ties are broken by the best
            leg rank, then id. Empty when the collection does not exist yet or no leg is left.

        Raises:
            InvalidParameterError: ``k``, ``rank_constant`` or ``candidate_k`` is not a positive int; the
                query is blank; a bad ``fusion`` or ``weights`` (see ``check_hybrid_options`` in this module); the
                vector holds NaN or infinity.
            FilterError / UnsupportedFilterError: the filter is malformed / cannot be expressed.
            ConfigurationError: the store has no BM25 (``enable_bm25``).
            DimensionMismatchError: the vector's width differs from the store's.
            BackendError: Qdrant failed.
        """
        check_k(k)
        if not isinstance(query, str) or not query.strip():
            raise InvalidParameterError("query must be a non-blank string")
        check_hybrid_options(fusion, rank_constant, weights, candidate_k)
        qfilter = self._filter(filter)
        exists = await self._ready()
        if not self.enable_bm25:
            raise ConfigurationError(f"{self.name}: QdrantHybridRetriever needs a store with enable_bm25=True")
        vector = check_query_vector(embedding, dimension=self.dimension, store=self.name)
        text_query = self._text_query(query)
        if not exists:
            return []
        m = self._models
        fetch_k = max(candidate_k, k)
        leg_weights = weights or {"vector": 1.0, "bm25": 1.0}
        legs: list[tuple[str, Any, str]] = []
        if self._has_dense and np.any(vector) and leg_weights["vector"] > 0:
            legs.append(("vector", vector.tolist(), DENSE))
        if text_query is not None and leg_weights["bm25"] > 0:  # a zero weight drops the leg, as in fastrag's fusions
            legs.append(("bm25", text_query, TERMS_FIELD))
        if not legs:
            return []
        if fusion == "dbsf":
            fused_query = m.FusionQuery(fusion=m.Fusion.DBSF)
        else:
            sent_weights = None if weights is None else [float(weights[name]) for name, _, _ in legs]
            fused_query = m.RrfQuery(rrf=m.Rrf(k=rank_constant + 1, weights=sent_weights))
        prefetch = [m.Prefetch(query=q, using=using, filter=qfilter, limit=fetch_k) for _, q, using in legs]
        requests = [
            m.QueryRequest(prefetch=prefetch, query=fused_query, filter=qfilter, limit=fetch_k * len(legs),
                           with_payload=READ_FIELDS),
            *(m.QueryRequest(query=q, using=using, filter=qfilter, limit=fetch_k, with_payload=[ID_FIELD])
              for _, q, using in legs),
        ]  # fmt: skip
        fused, *leg_results = await self._call("query_batch_points", collection_name=self.collection, requests=requests)
        branches: dict[str, dict[str, dict[str, Any]]] = {}
        for (name, _, _), result in zip(legs, leg_results, strict=True):
            for rank, point in enumerate(result.points):
                doc_id = (point.payload or {}).get(ID_FIELD)
                branches.setdefault(doc_id, {}).setdefault(name, {"score": float(point.score), "rank": rank})
        ordered = sorted(
            ((float(p.score), to_document(p.payload)) for p in fused.points),
            key=lambda sd: (-sd[0], min((b["rank"] for b in branches.get(sd[1].id, {}).values()), default=fetch_k),
                            sd[1].id),
        )  # fmt: skip
        out = []
        for rank, (score, doc) in enumerate(ordered[:k]):
            metadata = {key: v for key, v in doc.metadata.items() if key not in (SCORE, RANK, BRANCHES)}
            metadata[SCORE] = score
            metadata[RANK] = rank
            metadata[BRANCHES] = dict(sorted(branches.get(doc.id, {}).items()))
            out.append(Document(id=doc.id, content=doc.content, metadata=metadata))
        return out

    def _text_query(self, query: str) -> Any | None:
        terms = sorted(set(self.analyzer.analyze(query)))
        if not terms:
            return None
        m = self._models
        return m.TextQuery(
            text=m.TextQueryInput(
                query=" ".join(terms), scoring=m.Bm25Scoring(bm25=m.Bm25Params(k=BM25_K1, b=BM25_B))
            )
        )

    async def _query_top(self, k: int, **request: Any) -> list[tuple[float, Document]]:
        """The top ``k`` (score, document) pairs, ties broken by id: widens the request until the tie at
        the cut is complete, so the documents that tie with the k-th are all seen before sorting."""
        limit = k + 1
        while True:
            response = await self._call(
                "query_points", collection_name=self.collection, limit=limit, with_payload=READ_FIELDS, **request
            )
            points = response.points
            if len(points) < limit or points[k - 1].score != points[-1].score:
                break
            limit *= 2
        scored = sorted(((float(p.score), to_document(p.payload)) for p in points), key=lambda sd: (-sd[0], sd[1].id))
        return scored[:k]


def check_hybrid_options(fusion: Any, rank_constant: Any, weights: Any, candidate_k: Any) -> None:
    """Check the fusion options of :meth:`QdrantVectorStore.search_hybrid` (and of the retriever over it).

    Raises:
        InvalidParameterError: ``fusion`` is not ``"rrf"`` or ``"dbsf"``; ``rank_constant`` or ``candidate_k``
            is not a positive int; ``weights`` are given with ``"dbsf"``, do not map exactly ``"vector"`` and
            ``"bm25"``, hold a negative or non-finite number, or are all zero.
    """
    if fusion not in ("rrf", "dbsf"):
        raise InvalidParameterError(f"fusion must be 'rrf' or 'dbsf', got {fusion!r}")
    check_k(rank_constant, "rank_constant")
    check_k(candidate_k, "candidate_k")
    if weights is None:
        return
    if fusion != "rrf":
        raise InvalidParameterError("weights apply to RRF only; Qdrant's DBSF takes none")
    if not isinstance(weights, Mapping) or set(weights) != {"vector", "bm25"}:
        raise InvalidParameterError(f'weights must map exactly "vector" and "bm25", got {weights!r}')
    for key, w in weights.items():
        if isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w) or w < 0:
            raise InvalidParameterError(f"weight {key!r} must be a finite number >= 0, got {w!r}")
    if all(w == 0 for w in weights.values()):
        raise InvalidParameterError("at least one weight must be > 0")
