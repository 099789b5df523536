"""``OpenSearchVectorStore``: documents, vectors and a BM25 index in one OpenSearch index (see the package
docstring for the layout and how filters are expressed)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal
from urllib.parse import urlsplit

import anyio
import numpy as np

from fastrag.errors import (
    AuthenticationError,
    BackendError,
    BackendTemporarilyUnavailableError,
    BackendUnavailableError,
    ConfigurationError,
    DimensionMismatchError,
    InvalidParameterError,
    RateLimitError,
)
from fastrag.filters import FilterLike
from fastrag.lifecycle import AsyncResource
from fastrag.models import Document
from fastrag.vector_store._ranking import best_first
from fastrag.vector_store._validation import (
    check_dimension,
    check_document_text,
    check_embeddings,
    check_k,
    check_query_vector,
    check_unique_ids,
    distinct_ids,
)
from fastrag.vector_store.opensearch.connection import (
    check_index_name,
    describe_client,
    describe_error,
    error_text,
    error_type,
    import_sdk,
    parse_store_url,
    strip_credentials,
)
from fastrag.vector_store.opensearch.filters import (
    MATCH_ALL,
    OpenSearchQuery,
    combined_query,
    native_query,
)
from fastrag.vector_store.opensearch.schema import (
    SCHEMA_VERSION,
    document_source,
    index_body,
    opensearch_id,
    vector_mapping,
)
from fastrag.vector_store.opensearch.search import (
    SOURCE_EXCLUDES,
    knn_search_body,
    text_search_body,
)

_BULK_CHUNK = 500
_PAGE = 1000
_IDS_CHUNK = 10_000

Refresh = bool | Literal["wait_for"]
"""The ``refresh`` of a write: ``True``, ``False`` or ``"wait_for"``."""


class OpenSearchVectorStore(AsyncResource):
    """Documents, vectors and a BM25 index in one OpenSearch index (k-NN plugin for vectors).

    Implements :class:`~fastrag.protocols.VectorStore`, :class:`~fastrag.protocols.LexicalStore` and
    :class:`~fastrag.protocols.SupportsGet`.

    Args:
        url: the cluster, ``http(s)://host:port`` (default ``http://localhost:9200``). Ignored when ``client``
            is given, except to name the store in messages.
        index: the index name (OpenSearch rules: lowercase, no ``\\ / * ? " < > | , # :`` or spaces).
        dimension: the vector width. When given, the index is created (if missing and ``create``) as soon as
            the store is opened; an existing index with another width raises. When ``None``, it is read from
            the index, or fixed by the first write with embeddings.
        embedding_model: the name of the embedder whose vectors the index holds; recorded in the mapping's
            ``_meta`` on first use, and opening the index with a different name raises, so vectors of two
            models are never mixed. Read back into :attr:`embedding_model` when the store opens.
        client: an ``opensearchpy.AsyncOpenSearch`` to use instead of creating one. It is never closed by
            the store; a client the store creates is closed by ``aclose()``.
        timeout: seconds each HTTP request may take.
        http_auth: ``(user, password)`` for HTTP basic auth.
        verify_certs: verify the server's TLS certificate (https only).
        create: create the index (with its mappings) when it does not exist. With ``False``, a missing
            index raises :class:`~fastrag.errors.BackendUnavailableError`.
        exact: ``False`` (default): approximate k-NN (``knn`` query, HNSW, filter inside the query).
            ``True``: exact k-NN (``script_score`` with the ``knn_score`` script over the filtered
            documents).
        refresh: the ``refresh`` of every write. ``True`` (default) makes a write visible to the next read;
            ``"wait_for"`` waits for the next scheduled refresh; ``False`` returns at once (reads may not see
            the write for up to ``index.refresh_interval``).
        analyzer: the OpenSearch analyzer of ``content`` and ``title`` when the index is created
            (default ``"english"``: stemming and stopwords). An existing index with another one raises.

    Raises:
        ConfigurationError: the SDK is missing (the message has the ``pip install`` command), or an argument
            is invalid.

    Example::

        async with OpenSearchVectorStore(url="http://localhost:9200", index="docs", dimension=256) as store:
            await store.upsert(docs, embeddings=vectors)
            hits = await store.search_vector(query_vector, k=10, filter={"equals": {"key": "lang", "value": "en"}})
    """

    def __init__(
        self,
        *,
        url: str | None = None,
        index: str = "fastrag",
        dimension: int | None = None,
        embedding_model: str | None = None,
        client: Any | None = None,
        timeout: float = 10.0,
        http_auth: tuple[str, str] | None = None,
        verify_certs: bool = True,
        create: bool = True,
        exact: bool = False,
        refresh: Refresh = True,
        analyzer: str = "english",
    ) -> None:
        if dimension is not None and (isinstance(dimension, bool) or not isinstance(dimension, int) or dimension <= 0):
            raise InvalidParameterError(f"dimension must be a positive int, got {dimension!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise InvalidParameterError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if refresh not in (True, False, "wait_for"):
            raise InvalidParameterError(f"refresh must be True, False or 'wait_for', got {refresh!r}")
        if embedding_model is not None and (not isinstance(embedding_model, str) or not embedding_model):
            raise InvalidParameterError(f"embedding_model must be a non-empty string, got {embedding_model!r}")
        if not isinstance(analyzer, str) or not analyzer:
            raise InvalidParameterError(f"analyzer must be an OpenSearch analyzer name, got {analyzer!r}")
        self.index = check_index_name(index)
        self.dimension: int | None = dimension
        self.embedding_model: str | None = embedding_model
        self.exact = bool(exact)
        self.create = bool(create)
        self.refresh: Refresh = refresh
        self.analyzer = analyzer
        self._sdk = import_sdk()
        if client is not None:
            self.url = strip_credentials(url) if url else describe_client(client)
            self._client = client
            self._owns_client = False
        else:
            raw = url or "http://localhost:9200"
            parts = urlsplit(raw)
            try:
                parts.port  # noqa: B018  (raises on a malformed port)
            except ValueError as exc:
                raise ConfigurationError(f"{strip_credentials(raw)}: invalid port") from exc
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ConfigurationError(
                    f"url must be http(s)://host:port, got {strip_credentials(raw)!r} "
                    "(use OpenSearchVectorStore.from_url for opensearch:// URLs)"
                )
            self.url = strip_credentials(raw)
            kwargs: dict[str, Any] = {"timeout": timeout, "max_retries": 1, "retry_on_timeout": False}
            if parts.scheme == "https":
                kwargs.update(use_ssl=True, verify_certs=verify_certs, ssl_show_warn=False)
            if http_auth is not None:
                kwargs["http_auth"] = tuple(http_auth)
            try:
                self._client = self._sdk.AsyncOpenSearch(hosts=[raw], **kwargs)
            except self._sdk.exceptions.ImproperlyConfigured as exc:
                raise ConfigurationError(f"{self.url}: {exc}") from exc
            self._owns_client = True
        self.name = f"{self.url}/{self.index}"
        self._ready = False
        self._has_vector_field = False
        self._ready_lock = anyio.Lock()

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> OpenSearchVectorStore:
        """Open a store from ``opensearch://[user:password@]host[:port]/index[?options]``.

        ``opensearch://`` speaks http, ``opensearchs://`` https; the port defaults to 9200. Options in the query
        string: ``verify_certs=false``, ``timeout=<seconds>``, ``exact=true``, ``analyzer=<name>`` (the
        analyzer of ``content`` and ``title``, one of OpenSearch's built-ins,
        ``fastrag.vector_store.opensearch.connection.ANALYZERS``; default ``english``, fastrag's own English
        analysis). In ``fastrag.toml`` the same URL is the ``store`` value. Keyword arguments override anything
        read from the URL.

        Raises:
            ConfigurationError: the URL is not of this form, or names an unknown analyzer (the message lists
                the built-ins).
        """
        options = parse_store_url(url)
        options.update(kwargs)
        return cls(**options)

    def __repr__(self) -> str:
        return f"OpenSearchVectorStore({self.name!r})"

    # ------------------------------------------------------------------ lifecycle

    async def _aopen(self) -> None:
        """Check the index (entering ``async with``; a failure closes the store)."""
        await self._ensure_ready(for_write=False)

    async def _aclose(self) -> None:
        """Close the HTTP client if the store created it (an injected client stays open)."""
        if self._owns_client:
            await self._client.close()

    async def _call(self, what: str, fn: Any, /, **kwargs: Any) -> Any:
        """Run one client call, turning SDK exceptions into fastrag's (chained)."""
        if self.closed:
            raise BackendUnavailableError("store is closed", store=self.name)
        exceptions = self._sdk.exceptions
        try:
            return await fn(**kwargs)
        except exceptions.ConnectionError as exc:  # includes ConnectionTimeout and SSLError
            raise BackendTemporarilyUnavailableError(
                f"cannot reach OpenSearch ({what}): {describe_error(exc)}", store=self.name
            ) from exc
        except exceptions.TransportError as exc:
            status = exc.status_code if isinstance(exc.status_code, int) else None
            message = f"{what} failed: HTTP {status} {describe_error(exc)}"
            if status in (502, 503, 504):
                raise BackendTemporarilyUnavailableError(message, store=self.name) from exc
            if status == 429:
                raise RateLimitError(message, store=self.name) from exc
            if status in (401, 403):
                raise AuthenticationError(message, store=self.name) from exc
            if status == 404 and error_type(exc) == "index_not_found_exception":
                raise BackendUnavailableError(f"index {self.index!r} does not exist ({what})", store=self.name) from exc
            raise BackendError(message, store=self.name) from exc
        except exceptions.OpenSearchException as exc:  # SerializationError, ImproperlyConfigured, ...
            raise BackendError(f"{what} failed: {exc}", store=self.name) from exc

    async def _ensure_ready(self, *, for_write: bool, dimension: int | None = None) -> bool:
        """Check (once) that the index exists and is fastrag's; create it when allowed. Return whether it exists."""
        if self._ready:
            return True
        async with self._ready_lock:
            if self._ready:
                return True
            exists = await self._call("index exists", self._client.indices.exists, index=self.index)
            if not exists:
                if not self.create:
                    raise BackendUnavailableError(
                        f"index {self.index!r} does not exist (create=False)", store=self.name
                    )
                if not for_write and self.dimension is None:
                    return False  # created by the first write; until then the store is empty
                await self._create_index(self.dimension or dimension)
            await self._load_mapping()
            self._ready = True
            return True

    async def _create_index(self, dimension: int | None) -> None:
        body = index_body(dimension=dimension, analyzer=self.analyzer, embedding_model=self.embedding_model)
        try:
            await self._call("create index", self._client.indices.create, index=self.index, body=body)
        except BackendError as exc:
            cause = exc.__cause__
            if not (
                isinstance(cause, self._sdk.exceptions.TransportError)
                and error_type(cause) == "resource_already_exists_exception"
            ):
                raise  # else: created concurrently by someone else; its mapping is checked next

    async def _load_mapping(self) -> None:
        response = await self._call("get mapping", self._client.indices.get_mapping, index=self.index)
        mapping = next(iter(response.values()), {}).get("mappings", {}) if isinstance(response, Mapping) else {}
        meta = mapping.get("_meta", {}).get("fastrag", {})
        schema = meta.get("schema")
        if schema != SCHEMA_VERSION:
            raise ConfigurationError(
                f"{self.name}: the index exists but was not created by fastrag (schema {schema!r}, "
                f"expected {SCHEMA_VERSION}); use another index name"
            )
        stored_model = meta.get("embedding_model")
        if stored_model is not None and self.embedding_model is not None and stored_model != self.embedding_model:
            raise ConfigurationError(
                f"{self.name}: the index was built with embedding_model={stored_model!r}, not "
                f"{self.embedding_model!r}; use a new index or the same model"
            )
        if stored_model is None and self.embedding_model is not None:
            await self._call(
                "record embedding model",
                self._client.indices.put_mapping,
                index=self.index,
                body={"_meta": {"fastrag": {**meta, "embedding_model": self.embedding_model}}},
            )
        self.embedding_model = stored_model or self.embedding_model
        properties = mapping.get("properties", {})
        stored_analyzer = properties.get("content", {}).get("analyzer", "standard")
        if stored_analyzer != self.analyzer:
            raise ConfigurationError(
                f"{self.name}: the index was built with analyzer {stored_analyzer!r}, not {self.analyzer!r}"
            )
        vector = properties.get("embedding")
        if vector is not None:
            stored = int(vector["dimension"])
            space = vector.get("space_type") or vector.get("method", {}).get("space_type")
            if space != "cosinesimil":
                raise ConfigurationError(f"{self.name}: the embedding field uses space {space!r}, not cosinesimil")
            if self.dimension is not None and self.dimension != stored:
                raise ConfigurationError(
                    f"{self.name}: the index holds vectors of dimension {stored}, not {self.dimension}; "
                    "use a new index or the same dimension"
                )
            self.dimension = stored
            self._has_vector_field = True
        elif self.dimension is not None:
            await self._add_vector_field(self.dimension)

    async def _add_vector_field(self, dimension: int) -> None:
        await self._call(
            "add vector field",
            self._client.indices.put_mapping,
            index=self.index,
            body={"properties": {"embedding": vector_mapping(dimension)}},
        )
        self.dimension = dimension
        self._has_vector_field = True

    # ------------------------------------------------------------------ writes

    async def upsert(self, documents: Sequence[Document], *, embeddings: np.ndarray | None = None) -> None:
        """Insert or replace ``documents`` by id (``_bulk`` ``index`` actions).

        Args:
            documents: the documents; ``content`` and ``metadata["title"]`` are indexed for BM25, metadata is
                stored verbatim and in typed shadow fields for filtering. Metadata must be JSON-serialisable.
            embeddings: ``(len(documents), dim)`` float32 (other float dtypes are converted), finite, no zero
                rows (cosine is undefined for them). ``None`` stores the documents without vectors: BM25
                finds them, k-NN does not.

        Raises:
            DimensionMismatchError: the width differs from the store's dimension, or the row count from
                ``len(documents)``.
            InvalidParameterError: a vector holds NaN or infinity or is all zeros, an id repeats, metadata
                is not JSON, or a string metadata value is over 32 766 UTF-8 bytes. Nothing is sent.
            BackendUnavailableError: OpenSearch cannot be reached.
            BackendError: OpenSearch rejected the request, or some documents (listed; the others of the batch
                are written: OpenSearch has no multi-document transactions).
        """
        docs = list(documents)
        if not docs:
            return
        check_unique_ids(docs)
        check_document_text(docs)
        rows = self._vector_rows(embeddings, len(docs))
        sources = [document_source(d, row) for d, row in zip(docs, rows, strict=True)]
        width = None if rows[0] is None else len(rows[0])
        await self._ensure_ready(for_write=True, dimension=width)
        if width is not None:
            if self.dimension is not None and width != self.dimension:  # the dimension was just read
                raise DimensionMismatchError(
                    f"{self.name}: embeddings have dimension {width}, the store holds {self.dimension}"
                )
            if not self._has_vector_field:
                await self._add_vector_field(width)
        for start in range(0, len(docs), _BULK_CHUNK):
            chunk = list(zip(docs[start : start + _BULK_CHUNK], sources[start : start + _BULK_CHUNK], strict=True))
            body: list[dict[str, Any]] = []
            for doc, source in chunk:
                body.append({"index": {"_id": opensearch_id(doc.id)}})
                body.append(source)
            response = await self._call(
                "bulk upsert", self._client.bulk, index=self.index, body=body, refresh=_refresh_param(self.refresh)
            )
            if self._mapping(response, "bulk upsert").get("errors"):
                failed = [
                    (doc.id, item.get("index", {}).get("error"))
                    for (doc, _), item in zip(chunk, response.get("items", []), strict=False)
                    if item.get("index", {}).get("error")
                ]
                sample = "; ".join(f"{i!r}: {error_text(e)}" for i, e in failed[:3])
                raise BackendError(
                    f"OpenSearch rejected {len(failed)} of {len(chunk)} documents (the others were written): {sample}",
                    store=self.name,
                )

    def _vector_rows(self, embeddings: np.ndarray | None, n: int) -> list[list[float] | None]:
        if embeddings is None:
            return [None] * n
        matrix = check_embeddings(embeddings, n, dimension=self.dimension, store=self.name)
        if not np.any(matrix, axis=1).all():
            raise InvalidParameterError("an embedding is all zeros; cosine similarity is undefined for it")
        return matrix.tolist()

    async def delete(
        self, *, ids: Sequence[str] | None = None, filter: FilterLike | OpenSearchQuery | None = None  # noqa: A002
    ) -> int:
        """Delete documents (``_delete_by_query``); return how many were removed.

        Args:
            ids: delete these ids (unknown ids are ignored).
            filter: delete documents matching this filter (fastrag filter or :class:`OpenSearchQuery`). With
                ``ids`` too, only documents that have one of the ids *and* match the filter are deleted.

        Raises:
            InvalidParameterError: neither ``ids`` nor ``filter`` was given (use :meth:`clear`).
            FilterError: the filter is malformed.
            BackendUnavailableError / BackendError: OpenSearch failed.
        """
        if ids is None and filter is None:
            raise InvalidParameterError("delete needs ids or a filter; use clear() to delete everything")
        native = native_query(filter)
        id_list = distinct_ids(ids)
        if id_list == [] or not await self._ensure_ready(for_write=False):
            return 0
        if id_list is None:
            return await self._delete_by_query(combined_query(None, native))
        deleted = 0
        for start in range(0, len(id_list), _IDS_CHUNK):
            deleted += await self._delete_by_query(combined_query(id_list[start : start + _IDS_CHUNK], native))
        return deleted

    async def clear(self) -> int:
        """Delete every document (the index and its mappings stay); return how many were removed."""
        if not await self._ensure_ready(for_write=False):
            return 0
        return await self._delete_by_query(dict(MATCH_ALL))

    async def _delete_by_query(self, query: dict[str, Any]) -> int:
        response = await self._call(
            "delete by query",
            self._client.delete_by_query,
            index=self.index,
            body={"query": query},
            refresh=self.refresh is not False,
        )
        if self._mapping(response, "delete by query").get("failures"):
            raise BackendError(
                f"delete by query failed for some documents: {error_text(response['failures'][0])}", store=self.name
            )
        with self._reading("delete by query"):
            return int(response.get("deleted", 0))

    # ------------------------------------------------------------------ reads

    async def count(self, *, filter: FilterLike | OpenSearchQuery | None = None) -> int:  # noqa: A002
        """How many documents the index holds, or how many match ``filter`` (``_count``).

        Raises:
            FilterError: the filter is malformed.
            BackendUnavailableError / BackendError: OpenSearch failed.
        """
        native = native_query(filter)
        if not await self._ensure_ready(for_write=False):
            return 0
        body = None if native is None else {"query": native}
        response = await self._call("count", self._client.count, index=self.index, body=body)
        with self._reading("count"):
            count = response["count"]
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise TypeError(f"count must be an int >= 0, got {count!r}")
            return count

    async def get(
        self,
        *,
        ids: Sequence[str] | None = None,
        filter: FilterLike | OpenSearchQuery | None = None,  # noqa: A002
        limit: int | None = None,
    ) -> list[Document]:
        """Documents with these ``ids`` and/or matching ``filter`` (all when neither), in id order.

        Pages through the index sorted by ``id`` with ``search_after``, so any number of documents comes back.

        Raises:
            InvalidParameterError: ``limit`` is not a positive int.
            FilterError: the filter is malformed.
            BackendUnavailableError / BackendError: OpenSearch failed.
        """
        if limit is not None:
            check_k(limit, "limit")
        native = native_query(filter)
        id_list = distinct_ids(ids)
        if id_list == [] or not await self._ensure_ready(for_write=False):
            return []
        chunks = [None] if id_list is None else [id_list[i : i + _IDS_CHUNK] for i in range(0, len(id_list), _IDS_CHUNK)]
        found: list[Document] = []
        for chunk in chunks:
            found.extend(await self._scan(combined_query(chunk, native), limit))
        found.sort(key=lambda d: d.id)
        return found if limit is None else found[:limit]

    async def _scan(self, query: dict[str, Any], limit: int | None) -> list[Document]:
        out: list[Document] = []
        after: list[Any] | None = None
        while limit is None or len(out) < limit:
            size = _PAGE if limit is None else min(_PAGE, limit - len(out))
            body: dict[str, Any] = {
                "size": size, "query": query, "sort": [{"id": {"order": "asc"}}], "_source": SOURCE_EXCLUDES,
            }
            if after is not None:
                body["search_after"] = after
            response = await self._call("get", self._client.search, index=self.index, body=body)
            hits = self._hits(response, "get")
            out.extend(self._document(hit) for hit in hits)
            if len(hits) < size:
                break
            with self._reading("get"):
                after = hits[-1]["sort"]
        return out

    async def search_text(
        self, query: str, *, k: int, filter: FilterLike | OpenSearchQuery | None = None  # noqa: A002
    ) -> list[Document]:
        """BM25 search: the ``k`` best documents sharing at least one analysed term with ``query``.

        Sends ``bool`` { ``should``: [``match`` content, ``match`` title], ``minimum_should_match``: 1,
        ``filter``: [the filter] }, sorted by score then id.

        Args:
            query: free text, analysed by the index's analyzer (``english``: stemming, stopwords). It is a JSON
                string value of a ``match`` query, so no query syntax in it is interpreted.
            k: how many documents at most (an int > 0, at most ``index.max_result_window``, 10 000 by default).
            filter: only documents matching it are ranked (filter context, applied before the top-k cut).

        Returns:
            Copies best first, ``score`` = OpenSearch BM25 (unbounded, > 0, higher is better; sum over the
            content and title fields), zero-based ``rank``; ties by id. Empty when no document shares a term.

        Raises:
            InvalidParameterError: ``k`` is not a positive int or ``query`` is not a string.
            FilterError: the filter is malformed.
            BackendUnavailableError / BackendError: OpenSearch failed.
        """
        check_k(k)
        if not isinstance(query, str):
            raise InvalidParameterError(f"query must be a string, got {type(query).__name__}")
        native = native_query(filter)
        if not query.strip() or not await self._ensure_ready(for_write=False):
            return []
        body = text_search_body(query, k=k, filter_query=native)
        response = await self._call("search_text", self._client.search, index=self.index, body=body)
        hits = [(self._score(hit), hit) for hit in self._hits(response, "search_text")]
        return self._ranked(hits, k)

    async def search_vector(
        self, embedding: np.ndarray, *, k: int, filter: FilterLike | OpenSearchQuery | None = None  # noqa: A002
    ) -> list[Document]:
        """k-NN by cosine similarity among documents matching ``filter`` (applied before ranking).

        Approximate by default (``knn`` query with the filter inside it, the k-NN plugin's efficient
        filtering); exact with ``exact=True`` (``script_score`` + ``knn_score``). See :func:`knn_search_body`.

        Args:
            embedding: ``(dim,)`` query vector, any scale, not all zeros.
            k: how many documents at most (an int > 0, at most 10 000).
            filter: only documents matching it are ranked.

        Returns:
            Copies best first, ``score`` = cosine similarity in [-1, 1] (higher is better; converted from the
            OpenSearch score, float32 precision), zero-based ``rank``; ties by id. Documents stored without a
            vector are never returned.

        Raises:
            DimensionMismatchError: the vector's width differs from the store's.
            InvalidParameterError: ``k`` is not a positive int, or the vector holds NaN or infinity or is all
                zeros.
            FilterError: the filter is malformed.
            BackendUnavailableError / BackendError: OpenSearch failed.
        """
        check_k(k)
        vector = check_query_vector(embedding, dimension=None, store=self.name)  # the width is checked below
        if not vector.any():
            raise InvalidParameterError("query embedding is all zeros; cosine similarity is undefined for it")
        check_dimension(vector.shape[0], self.dimension, store=self.name, what="query has")
        native = native_query(filter)
        if not await self._ensure_ready(for_write=False) or not self._has_vector_field:
            return []
        if vector.shape[0] != self.dimension:  # the dimension was just read from the index
            raise DimensionMismatchError(
                f"{self.name}: query has dimension {vector.shape[0]}, the store holds {self.dimension}"
            )
        body = knn_search_body(vector.tolist(), k=k, filter_query=native, exact=self.exact)
        response = await self._call("search_vector", self._client.search, index=self.index, body=body)
        hits = []
        for hit in self._hits(response, "search_vector"):
            raw = self._score(hit)
            cosine = raw - 1.0 if self.exact else 2.0 * raw - 1.0
            hits.append((min(1.0, max(-1.0, cosine)), hit))
        return self._ranked(hits, k)

    # ------------------------------------------------------------------ helpers

    @contextmanager
    def _reading(self, what: str) -> Iterator[None]:
        """Turn an answer of the wrong shape (a proxy's ``{}`` with status 200) into a typed error naming the store."""
        try:
            yield
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise BackendError(f"OpenSearch answered {what} with a malformed response: {exc!r}", store=self.name) from exc

    def _mapping(self, response: Any, what: str) -> Mapping[str, Any]:
        if not isinstance(response, Mapping):
            raise BackendError(f"OpenSearch answered {what} with a malformed response: {response!r:.200}", store=self.name)
        return response

    def _hits(self, response: Any, what: str) -> list[Mapping[str, Any]]:
        """``response["hits"]["hits"]``, checked: a list of objects."""
        with self._reading(what):
            hits = self._mapping(response, what)["hits"]["hits"]
            if not isinstance(hits, list) or not all(isinstance(hit, Mapping) for hit in hits):
                raise TypeError(f"hits.hits must be a list of objects, got {hits!r:.200}")
            return hits

    def _score(self, hit: Mapping[str, Any]) -> float:
        score = hit.get("_score")
        if score is None and hit.get("sort"):
            score = hit["sort"][0]
        if score is None:
            raise BackendError(f"OpenSearch returned a hit without a score: {hit.get('_id')!r}", store=self.name)
        with self._reading("a search"):
            return float(score)

    def _ranked(self, hits: list[tuple[float, Mapping[str, Any]]], k: int) -> list[Document]:
        return best_first([(score, self._document(hit)) for score, hit in hits], k)

    def _document(self, hit: Mapping[str, Any]) -> Document:
        source = hit.get("_source") or {}
        try:
            return Document(id=source["id"], content=source["content"], metadata=json.loads(source["metadata_json"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise BackendError(
                f"document {hit.get('_id')!r} was not written by fastrag (missing or bad {exc})", store=self.name
            ) from exc


def _refresh_param(refresh: Refresh) -> str:
    return "wait_for" if refresh == "wait_for" else ("true" if refresh else "false")
