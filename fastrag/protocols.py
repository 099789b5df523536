"""The plug-in boundaries of fastrag, as structural :class:`typing.Protocol` types.

Third-party classes conform by shape; they never need to import fastrag. Every method is async; anything
blocking runs off the event loop inside the implementation. Arguments after the first are keyword-only.
The one exception is :class:`LanguageDetector`, whose ``detect`` is a plain function (a statistical
model over a short text, a few milliseconds): its callers run it in a worker thread.

Scores: every search returns documents best first, stamped (on copies) with ``metadata["score"]``
(higher is better) and zero-based ``metadata["rank"]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from fastrag.filters import FilterLike
from fastrag.models import Document

if TYPE_CHECKING:  # fastrag.llm imports httpx; this keeps `import fastrag` from loading it
    from fastrag.llm import ChatMessage

__all__ = [
    "LLM",
    "AsyncCloseable",
    "BatchWriter",
    "ChecksBranches",
    "DeclaresLanguages",
    "EmbedsText",
    "ReturnsResult",
    "SearchesText",
    "SupportsAtomicReplace",
    "SupportsClear",
    "SupportsDeferredRows",
    "SupportsDepth",
    "SupportsOffset",
    "SupportsQueryLanguage",
    "Embedder",
    "LanguageDetector",
    "LexicalStore",
    "RankFusion",
    "Reranker",
    "Retriever",
    "SupportsGet",
    "SupportsLanguageConfidence",
    "SupportsLanguages",
    "SupportsScopedStatistics",
    "SupportsTenantIsolation",
    "VectorStore",
]


class _Declared(type(Protocol)):  # type: ignore[misc]
    """The metaclass of fastrag's protocols: ``isinstance`` answers as :func:`typing.runtime_checkable` does,
    and remembers a class whose own attributes (methods, class attributes) satisfy the protocol, so the
    checks the planner and the retrievers make on every search cost a dict lookup, not a scan of the
    protocol's members (4-9 us each). A class that answers attributes per instance (``__getattr__``) or an
    object that satisfies the protocol only through instance attributes is checked every time."""

    def __instancecheck__(cls, instance: object) -> bool:
        kind = type(instance)
        known = _DECLARED_BY.setdefault(cls, set())
        if kind in known:
            return True
        if not super().__instancecheck__(instance):
            return False
        members = {n for n in (*vars(cls), *getattr(cls, "__annotations__", {})) if not n.startswith("_")}
        on_class = all(any(n in vars(k) for k in kind.__mro__) for n in members)
        if on_class and not any("__getattr__" in vars(k) for k in kind.__mro__[:-1]):
            known.add(kind)
        return True


_DECLARED_BY: dict[type, set[type]] = {}
"""For each protocol, the classes whose own attributes satisfy it (see :class:`_Declared`); kept outside the
protocol class, whose attributes are its members."""


@runtime_checkable
class VectorStore(Protocol, metaclass=_Declared):
    """A store of documents with dense vectors, searched by k-NN."""

    async def upsert(self, documents: Sequence[Document], *, embeddings: np.ndarray | None = None) -> None:
        """Insert or replace ``documents`` by id, atomically.

        Args:
            documents: the documents to write.
            embeddings: ``(len(documents), dim)`` float32, one row per document, L2-normalised for cosine.

        Raises:
            DimensionMismatchError: a row's width differs from the store's dimension.
            BackendError: the write failed; nothing was written.
        """
        ...

    async def search_vector(
        self, embedding: np.ndarray, *, k: int, filter: FilterLike | None = None
    ) -> list[Document]:
        """The ``k`` documents nearest to ``embedding`` (shape ``(dim,)``) among those matching ``filter``.

        The filter is applied before ranking: when at least ``k`` documents match, ``k`` come back.

        Args:
            embedding: the query vector, ``(dim,)`` float32, L2-normalised (as :meth:`Embedder.embed_query`
                returns it).
            k: the most documents to return, an int >= 1.
            filter: a fastrag filter (AST, JSON mapping or JSON string), or the store's native filter type.

        Returns:
            Copies of the stored documents, best first, stamped with ``score`` (cosine similarity in
            [-1, 1], higher is better) and zero-based ``rank``; empty when nothing matches.

        Raises:
            InvalidParameterError: ``k`` is not a positive int, or the vector holds NaN or infinity.
            DimensionMismatchError: the vector's width differs from the store's.
            FilterError: the filter is malformed.
            UnsupportedFilterError: the store cannot express the filter (raised before any query runs).
            BackendError: the store failed.
        """
        ...

    async def delete(self, *, ids: Sequence[str] | None = None, filter: FilterLike | None = None) -> int:
        """Delete the documents with these ``ids`` and/or matching ``filter``; return how many were removed.

        With both, only documents that have one of the ids *and* match the filter are deleted.

        Raises:
            InvalidParameterError: neither ``ids`` nor ``filter`` was given.
            FilterError: the filter is malformed.
            BackendError: the store failed.
        """
        ...

    async def count(self, *, filter: FilterLike | None = None) -> int:
        """How many documents the store holds (matching ``filter`` when given).

        Raises:
            FilterError: the filter is malformed.
            BackendError: the store failed.
        """
        ...


@runtime_checkable
class LexicalStore(Protocol, metaclass=_Declared):
    """A store of documents searched by full text (BM25)."""

    async def upsert(self, documents: Sequence[Document], *, embeddings: np.ndarray | None = None) -> None:
        """Insert or replace ``documents`` by id, atomically (``embeddings`` may be ignored)."""
        ...

    async def search_text(self, query: str, *, k: int, filter: FilterLike | None = None) -> list[Document]:
        """The ``k`` best BM25 matches for ``query`` among documents matching ``filter``.

        A document sharing no analysed term with the query is never returned, so fewer than ``k`` (or no)
        documents may come back. The filter is applied before ranking.

        Returns:
            Copies best first, stamped with ``score`` (BM25: unbounded, > 0, higher is better, comparable
            only within one query) and zero-based ``rank``.

        Raises:
            InvalidParameterError: ``k`` is not a positive int.
            FilterError: the filter is malformed.
            UnsupportedFilterError: the store cannot express the filter (raised before any query runs).
            BackendError: the store failed.
        """
        ...

    async def delete(self, *, ids: Sequence[str] | None = None, filter: FilterLike | None = None) -> int:
        """Delete the documents with these ``ids`` and/or matching ``filter``; return how many were removed."""
        ...

    async def count(self, *, filter: FilterLike | None = None) -> int:
        """How many documents the store holds (matching ``filter`` when given)."""
        ...


@runtime_checkable
class SupportsScopedStatistics(Protocol, metaclass=_Declared):
    """Optional :class:`LexicalStore` capability: BM25 whose statistics are a scope's own (a tenant's).

    A scoped view (:class:`~fastrag.scoping.ScopedStore`, so the knowledge base's ``user_id=`` and
    :class:`~fastrag.vector_store.tenant.TenantScopedStore`) searches through it, so that a tenant's
    keyword scores do not depend on, and do not reveal, what other tenants hold. The SQLite and PostgreSQL
    stores offer it; an engine that computes BM25 from its whole collection cannot.
    """

    async def search_text_scoped(
        self, query: str, *, k: int, scope: FilterLike | None, filter: FilterLike | None = None
    ) -> list[Document]:
        """The ``k`` best BM25 matches for ``query`` among documents matching both ``scope`` and ``filter``,
        scored as if the store held only the documents matching ``scope``: the document count ``N``, the
        document frequencies and the mean document length are counted over them. ``scope=None`` is the
        whole store (:meth:`LexicalStore.search_text`). ``filter`` narrows what is returned, never the
        statistics.

        Returns:
            As :meth:`LexicalStore.search_text`: copies best first, stamped with ``score`` (BM25: unbounded,
            > 0, higher is better) and zero-based ``rank``. The scores of a scope's documents are the same
            whatever documents outside the scope the store holds.

        Raises:
            InvalidParameterError: ``k`` is not a positive int.
            FilterError: ``filter`` or ``scope`` is malformed.
            UnsupportedFilterError: the store cannot express one of them (raised before any query runs).
            BackendError: the store failed.
        """
        ...


@runtime_checkable
class SupportsTenantIsolation(Protocol, metaclass=_Declared):
    """Optional store capability: the engine's own isolation of tenants, a collection (index) per scope.

    A store whose engine computes BM25 from collection-wide statistics (Milvus, ...) offers it; with
    ``tenant_isolation == "collection"`` a scoped view (:class:`~fastrag.scoping.ScopedStore`) writes and
    searches :meth:`tenant_store`'s collection, whose statistics are then the scope's own. With
    ``"shared"`` (the default) every scope shares the store's collection.
    """

    tenant_isolation: str
    """``"shared"`` (one collection for every scope) or ``"collection"`` (one per scope)."""

    async def tenant_store(self, scope: Mapping[str, str | int]) -> Any:
        """The store of ``scope``'s own collection (named by :func:`fastrag.scoping.tenant_collection`),
        sharing this store's client; made once per scope and closed with this store.

        Raises:
            InvalidParameterError: the derived collection name is too long for the engine.
            BackendError: the engine failed.
        """
        ...


@runtime_checkable
class SupportsGet(Protocol, metaclass=_Declared):
    """Optional store capability: read documents back by id or by filter (used by re-indexing)."""

    async def get(
        self, *, ids: Sequence[str] | None = None, filter: FilterLike | None = None, limit: int | None = None
    ) -> list[Document]:
        """Documents with these ``ids`` and/or matching ``filter``, in id order."""
        ...


@runtime_checkable
class Embedder(Protocol, metaclass=_Declared):
    """Turns text into dense vectors.

    Implementations: :class:`~fastrag.ingestion.Model2VecEmbedder`, :class:`~fastrag.ingestion.SentenceTransformerEmbedder`,
    :class:`~fastrag.ingestion.OpenAICompatibleEmbedder`, :class:`~fastrag.ingestion.CohereEmbedder`; the
    contract they all pass is :mod:`fastrag.testing.embedder_contract`. A local model raises
    :class:`~fastrag.errors.EmbeddingError` when it fails; a remote API raises the
    :class:`~fastrag.errors.BackendError` family (``AuthenticationError``, ``RateLimitError``, ...) naming its
    endpoint, as stores do.
    """

    @property
    def dimension(self) -> int:
        """Width of every vector this embedder returns (a remote embedder without a configured width
        knows it after its first response, and raises :class:`~fastrag.errors.EmbeddingError` before)."""
        ...

    @property
    def name(self) -> str:
        """A stable identifier of the model (stores record it to refuse mixing models)."""
        ...

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), dimension)`` float32, L2-normalised rows, for indexing.

        Raises:
            EmbeddingError: the model failed to load or to embed.
            BackendError: a remote embedding API failed (see the class docstring).
        """
        ...

    async def embed_query(self, text: str) -> np.ndarray:
        """``(dimension,)`` float32, L2-normalised, for searching (cosine similarity is then a dot product).

        Raises:
            EmbeddingError: the model failed to load or to embed.
            BackendError: a remote embedding API failed (see the class docstring).
        """
        ...


@runtime_checkable
class DeclaresLanguages(Protocol, metaclass=_Declared):
    """An :class:`Embedder` that declares the languages its model was trained for (every built-in one does).

    A hybrid search leaves the dense branch out of a question in a language the embedder does not cover
    (:func:`fastrag.retrieval.hybrid.uncovered_dense_branches`). Checked with ``isinstance``; an embedder
    without the attribute is looked up by ``name`` in :data:`fastrag.retrieval.hybrid.EMBEDDER_LANGUAGES`.
    """

    @property
    def languages(self) -> frozenset[str] | None:
        """ISO 639-1 codes (``frozenset({"en"})``), or ``None`` when unknown: the dense branch then runs on
        questions in every language (:mod:`fastrag.embedding_languages`)."""
        ...


@runtime_checkable
class Reranker(Protocol, metaclass=_Declared):
    """Re-scores candidates against the query (a cross-encoder, an API, ...)."""

    async def rerank(self, query: str, documents: Sequence[Document], *, k: int | None = None) -> list[Document]:
        """Return copies of ``documents`` best first, stamped with the reranker's score; at most ``k``.

        The score is the reranker's own relevance: higher is better; its range depends on the model.
        """
        ...


@runtime_checkable
class RankFusion(Protocol, metaclass=_Declared):
    """Combines several ranked lists into one."""

    def fuse(self, results: Mapping[str, Sequence[Document]], *, k: int | None = None) -> list[Document]:
        """Fuse ``{branch_name: ranked documents}`` into one list, best first, at most ``k`` long.

        Each returned document is a copy stamped with the fused ``score`` and ``rank``, and under
        ``metadata["branches"]`` with the score and rank it had in every branch that returned it.
        The result must not depend on the order of ``results``.
        """
        ...


@runtime_checkable
class LanguageDetector(Protocol, metaclass=_Declared):
    """Tells which language a text is written in."""

    def detect(self, text: str) -> str | None:
        """The ISO 639-1 code of ``text``'s language, lower case (``"en"``, ``"de"``, ``"zh"``), or ``None``
        when it cannot tell (an empty text, digits only, too little evidence).

        Synchronous and thread-safe: callers run it in a worker thread, never on the event loop.
        """
        ...


@runtime_checkable
class SupportsLanguageConfidence(Protocol, metaclass=_Declared):
    """A :class:`LanguageDetector` that can say how sure it is, language by language (optional capability)."""

    def confidences(self, text: str) -> Mapping[str, float]:
        """``{ISO 639-1 code: confidence}`` for every language the detector chooses among, best first.

        Each confidence is in [0, 1], higher is likelier; together they sum to 1, or are all 0 when the
        detector cannot tell (no letters). Synchronous and thread-safe, like :meth:`LanguageDetector.detect`.
        """
        ...


@runtime_checkable
class SupportsLanguages(Protocol, metaclass=_Declared):
    """A :class:`LexicalStore` that analyses text itself and records the language each document was analysed
    in (optional capability: the SQLite store), so a question's language can be detected among them."""

    analyzer: Any
    """The store's own :class:`~fastrag.analysis.Analyzer` (its ``language``: the store's language, or
    ``None``)."""

    async def languages(self) -> Sequence[str]:
        """The language codes the store's documents were analysed in; ``""`` for documents analysed by the
        store's own analyzer."""
        ...


@runtime_checkable
class Retriever(Protocol, metaclass=_Declared):
    """Turns a question into documents, best first."""

    async def retrieve(self, query: str, *, k: int = 10, filter: FilterLike | None = None) -> list[Document]:
        """Up to ``k`` documents for ``query`` matching ``filter``, best first.

        Returns:
            Copies stamped with ``score`` (higher is better; its range depends on the retriever) and
            zero-based ``rank``; empty when nothing matches (never ``None``).

        Raises:
            InvalidParameterError: ``k`` is not a positive int, or the query is empty.
            FilterError: the filter is malformed.
            BackendError: the store failed (a retriever never reports a failure as "no match").
        """
        ...


# ----------------------------------------------------------------------------- optional capabilities
# Each is declared by the object (a method, or a ``True`` class attribute where the capability is a way of
# calling a method every such object has) and checked with ``isinstance``: never sniffed from signatures.


@runtime_checkable
class SearchesText(Protocol, metaclass=_Declared):
    """The one method BM25 retrieval needs of a :class:`LexicalStore` (a read-only or wrapped store may have
    no writes)."""

    async def search_text(self, query: str, *, k: int, filter: FilterLike | None = None) -> list[Document]:  # noqa: A002
        """See :meth:`LexicalStore.search_text`."""
        ...


@runtime_checkable
class EmbedsText(Protocol, metaclass=_Declared):
    """The two methods of an :class:`Embedder`, for checking an object without reading its ``dimension`` (a
    property that loads a local model, or is unknown before a remote one's first answer)."""

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """See :meth:`Embedder.embed_documents`."""
        ...

    async def embed_query(self, text: str) -> np.ndarray:
        """See :meth:`Embedder.embed_query`."""
        ...


@runtime_checkable
class SupportsOffset(Protocol, metaclass=_Declared):
    """A :class:`Retriever` whose ``retrieve`` takes ``offset=`` and returns ranks ``offset .. offset + k - 1``
    (:mod:`fastrag.retrieval.pagination`); others are asked for ``offset + k`` and sliced."""

    accepts_offset: bool
    """``True``: ``retrieve(query, *, k, filter, offset)``."""

    async def retrieve(
        self, query: str, *, k: int = 10, filter: FilterLike | None = None, offset: int = 0  # noqa: A002
    ) -> list[Document]:
        """As :meth:`Retriever.retrieve`, from rank ``offset`` on."""
        ...


@runtime_checkable
class SupportsQueryLanguage(Protocol, metaclass=_Declared):
    """A :class:`LexicalStore` that analyses the query itself and takes its language:
    ``search_text(query, *, k, filter, language=code)`` (the SQLite, PostgreSQL and Qdrant stores)."""

    accepts_language: bool
    """``True``: ``search_text`` takes ``language=``."""

    async def search_text(
        self, query: str, *, k: int, filter: FilterLike | None = None, language: str | None = None  # noqa: A002
    ) -> list[Document]:
        """As :meth:`LexicalStore.search_text`, the query analysed in ``language``."""
        ...


@runtime_checkable
class SupportsDepth(Protocol, metaclass=_Declared):
    """A :class:`RankFusion` whose ``fuse`` takes ``depth=``: each list is normalised (or ranked) over its first
    ``depth`` documents whatever ``k`` is, so the top of a fused list does not depend on ``k``."""

    accepts_depth: bool
    """``True``: ``fuse(results, *, k, depth)``."""

    def fuse(
        self, results: Mapping[str, Sequence[Document]], *, k: int | None = None, depth: int | None = None
    ) -> list[Document]:
        """As :meth:`RankFusion.fuse`, over the first ``depth`` documents of each list."""
        ...


@runtime_checkable
class ChecksBranches(Protocol, metaclass=_Declared):
    """A :class:`RankFusion` that can refuse branch names it has no weight for, when a hybrid is built."""

    def check_branches(self, names: Sequence[str]) -> None:
        """Raise :class:`~fastrag.errors.InvalidParameterError` when the weights do not fit ``names``."""
        ...


@runtime_checkable
class SupportsDeferredRows(Protocol, metaclass=_Declared):
    """A store that can return ids and scores first and read the rows of the fused top k once, after fusion
    (:mod:`fastrag.deferred`)."""

    async def hydrate(self, documents: Sequence[Document]) -> list[Document]:
        """``documents`` (ids, scores, ranks) with their content and metadata read."""
        ...


@runtime_checkable
class SupportsClear(Protocol, metaclass=_Declared):
    """A store that can remove every document at once."""

    async def clear(self) -> int:
        """Remove every document; return how many were removed."""
        ...


@runtime_checkable
class BatchWriter(Protocol, metaclass=_Declared):
    """The writing end of one open :meth:`SupportsAtomicReplace.atomic_replace`: batches of one write."""

    async def upsert(self, documents: Sequence[Document], *, embeddings: np.ndarray | None = None) -> None:
        """Add ``documents`` to the write, as :meth:`VectorStore.upsert` would (replacing by id); seen by
        readers only once the whole write commits."""
        ...


@runtime_checkable
class SupportsAtomicReplace(Protocol, metaclass=_Declared):
    """A store that can replace a set of documents by another in one transaction spanning many batches.

    The ingestion pipeline streams a large file's chunks through it in bounded batches: readers see the old
    chunks until the write commits, then only the new ones, and a failure part-way leaves the old ones.
    """

    def atomic_replace(self, *, delete: FilterLike) -> AbstractAsyncContextManager[BatchWriter]:
        """Open a write that deletes the documents matching ``delete`` (as they stand when it opens) and then
        upserts what is given to the returned writer. It commits when the ``async with`` block ends without
        an error, and is rolled back (nothing of it stored) when the block raises or is cancelled."""
        ...


@runtime_checkable
class ReturnsResult(Protocol, metaclass=_Declared):
    """A :class:`Retriever` that reports its own status (:class:`~fastrag.retrieval.result.RetrievalResult`)."""

    async def retrieve_result(
        self, query: str, *, k: int = 10, filter: FilterLike | None = None, offset: int = 0  # noqa: A002
    ) -> Any:
        """Like ``retrieve``; failures of retrieval are reported in the result, not raised."""
        ...


@runtime_checkable
class AsyncCloseable(Protocol, metaclass=_Declared):
    """An object holding resources (a connection, a model, a client) released by ``aclose()``.

    fastrag's own stores, embedders, rerankers and clients implement it through one base class,
    ``fastrag.lifecycle.AsyncResource`` (``from fastrag import AsyncResource``): an async context
    manager whose ``aclose()`` releases once, and closes only the clients it created. A class of yours may
    inherit from it, or just define ``aclose()``.
    """

    async def aclose(self) -> None:
        """Release the resources; idempotent."""
        ...


@runtime_checkable
class LLM(Protocol, metaclass=_Declared):
    """A chat model: messages in, the model's reply out (:class:`~fastrag.llm.OpenAICompatibleLLM`, or yours).

    Messages are :class:`~fastrag.llm.ChatMessage` objects; an implementation reads their ``role``
    (``"system"``, ``"user"`` or ``"assistant"``) and ``content``, so it need not import fastrag.
    """

    async def chat(
        self, messages: Sequence[ChatMessage], *, temperature: float | None = None, max_tokens: int | None = None
    ) -> str:
        """The model's reply to ``messages``, as text.

        Args:
            messages: the chat so far, oldest first (usually a system message, then the user's).
            temperature: sampling temperature (0 is the most deterministic); ``None`` leaves the model's default.
            max_tokens: the most tokens to generate; ``None`` leaves the model's default.

        Raises:
            InvalidParameterError: an argument is invalid.
            AuthenticationError: the credentials were refused.
            TransientBackendError: a failure that may pass on retry (429, timeout, 5xx), after any retries.
            BackendError: the model or its server failed, or answered something that is not a reply.
        """
        ...
