"""The knowledge base: stores, embedder, sources, metadata schema and search settings behind one object."""

from __future__ import annotations

import logging
import tomllib
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import anyio

from fastrag import tracing
from fastrag.config import DEFAULT_STORE_URL
from fastrag.errors import (
    ConfigurationError,
    FilterError,
    InvalidParameterError,
    UnsupportedFilterError,
)
from fastrag.filters import (
    FilterLike,
    is_native_filter,
    matches,
    parse_filter,
)
from fastrag.lifecycle import AsyncResource
from fastrag.models import (
    TITLE,
    Document,
)
from fastrag.protocols import (
    AsyncCloseable,
    Embedder,
    EmbedsText,
    SearchesText,
    SupportsClear,
    SupportsGet,
    VectorStore,
)
from fastrag.scoping import (
    ScopedStore,
)
from fastrag.settings import (
    ALIASES,
    OPTIONS,
    ResolvedSearchSettings,
    SearchSettings,
    resolve_settings,
)
from fastrag.tool import KnowledgeBaseTool

if TYPE_CHECKING:  # pragma: no cover
    from fastrag.ingestion.pipeline import IngestionReport
    from fastrag.protocols import Embedder, Reranker
    from fastrag.retrieval.result import RetrievalResult
    from fastrag.sections import SectionIndex


from fastrag.knowledge_base.response import SearchResponse
from fastrag.knowledge_base.retriever import KnowledgeBaseRetriever
from fastrag.knowledge_base.schema import (
    TENANT_FIELD,
    check_document_fields,
    check_fields_declaration,
    check_filter_fields,
)
from fastrag.knowledge_base.scope import check_id, check_stamped_keys, scope_of

logger = logging.getLogger("fastrag.knowledge_base")

_CONFIG_KEYS = ("store", "lexical_store", "embedder", "sources", "fields", "require_scope")


class KnowledgeBase(AsyncResource):
    """Documents in a vector store (and optionally a separate BM25 store), searched with resolved settings.

    An async context manager: ``async with`` opens what the knowledge base creates (stores named by URL, an
    embedder named by model) and closes it on exit; objects passed in are used, never closed. A method
    called before ``async with`` opens the knowledge base then (call ``aclose()`` yourself).

    Args:
        store: a store URL (see :mod:`fastrag.config`: ``sqlite:///kb.db``, ``qdrant+memory:///kb``, ...)
            or an open :class:`~fastrag.protocols.VectorStore`.
        embedder: ``None`` (the static model shipped with fastrag), a Model2Vec model folder or name, an
            :class:`~fastrag.protocols.Embedder`, or ``False``: no embedder (keyword search only; vector and
            hybrid searches raise :class:`~fastrag.errors.ConfigurationError`). A store that recorded another
            model refuses to open.
        lexical_store: a separate :class:`~fastrag.protocols.LexicalStore` (URL or object) for BM25, for a
            vector store without full text (Chroma); ``None``: BM25 runs on ``store``.
        sources: files and folders :meth:`sync` indexes.
        fields: declared metadata fields, ``{name: type}`` with types from :data:`FIELD_TYPES`
            (``"string"``, ``"long"``, ``"double"``, ``"date"`` (ISO-8601 strings), ``"list"``,
            ``"boolean"``, ``"tenant"`` (a tenant key, see Scoping)). The keys fastrag sets (``source_uri``,
            ``title``, ``language``, ``parent_id``,
            ``chunk_index``, ``content_hash``, ``headings``, ``chunker``, ``section_index``, ``section_start``,
            ``section_end``) and the tenant keys ``user_id`` and
            ``agent_id`` are declared implicitly. With ``fields``, a filter naming an undeclared key, a range
            on a non-numeric, non-date field, or a value of the wrong type raises
            :class:`~fastrag.errors.FilterError`; a written document whose declared field holds a value of
            the wrong type raises :class:`~fastrag.errors.InvalidParameterError`. Without ``fields``
            (``None``), nothing is checked against a schema.
        settings: the knowledge base's :class:`SearchSettings` (the middle layer of resolution).
        on_branch_error: what a failed branch of a hybrid search (``"hybrid"``, ``"direct"``) does:
            ``"raise"`` (the default: the search fails, :meth:`search_result` reports ``retrieval_failed``
            with the branch in ``failed_branches``) or ``"partial"`` (the other branch's results are returned,
            with ``partial`` true and the failed branch in ``failed_branches``; see
            :class:`~fastrag.retrieval.hybrid.HybridRetriever`).
        require_scope: refuse every read, write and delete that names no scope (``user_id``, ``agent_id``
            or ``scope``), so a forgotten tenant never reads or deletes across tenants.
        chunker: the :class:`~fastrag.ingestion.chunking.Chunker` for :meth:`add_sources` and :meth:`sync`
            (default: 1,000 characters, 100 overlap).
        sections: a :class:`~fastrag.sections.SectionIndex` that :meth:`add_sources` and
            :meth:`sync` fill with every parsed file (and prune with it), so a hit can be traced back to its
            section with ``await sections.resolve(hit)``. It is keyed by ``source_uri`` and shared by every
            tenant; the caller opens and closes it.

    Scoping: every method takes ``user_id=``, ``agent_id=`` and ``scope={"key": value}`` (keys are
    identifiers, not reserved keys; values are non-empty strings or ints within signed 64-bit, never bools
    or floats). A write stamps each document's metadata with those keys and stores it under a
    scope-qualified id, so tenants writing the same id never overwrite each other. A search, count, get or
    delete sees only documents whose metadata carries every key of its scope: a narrower scope
    (``user_id="alice", agent_id="a1"``) sees a subset of a wider one (``user_id="alice"``), and no scope
    sees everything, every tenant's copies included (under qualified ids such as ``"user_id=alice::x"``).
    Results show the ids as written (``"x"``); a wider scope shows the rest of the qualification
    (``"agent_id=a1::x"``), which :meth:`delete` accepts back.

    Tenant keys are ``user_id``, ``agent_id``, the fields declared ``"tenant"``, and every key this object
    has been given in a ``scope``. A write whose documents carry a tenant key in their metadata that the
    call's scope does not set to the same value (and type) is refused, unscoped writes included, so no
    write can plant a document in a tenant's view. Declare custom tenant keys in ``fields`` so the check
    holds from the first call after a restart.

    Raises:
        ConfigurationError: invalid ``fields``, ``settings`` that do not resolve (see
            :func:`resolve_settings`), or an argument of the wrong kind.
    """

    def __init__(
        self,
        store: Any = DEFAULT_STORE_URL,
        *,
        embedder: Any = None,
        lexical_store: Any = None,
        sources: Sequence[str | Path] = (),
        fields: Mapping[str, str] | None = None,
        settings: SearchSettings | None = None,
        require_scope: bool = False,
        chunker: Any = None,
        on_branch_error: str | None = None,
        sections: SectionIndex | None = None,
    ) -> None:
        if not isinstance(store, str) and not isinstance(store, VectorStore):
            raise ConfigurationError(f"store must be a store URL or a VectorStore, got {store!r}")
        if lexical_store is not None and not isinstance(lexical_store, str | SearchesText):
            raise ConfigurationError(f"lexical_store must be a store URL or a LexicalStore, got {lexical_store!r}")
        if embedder is not None and embedder is not False and not isinstance(embedder, str | EmbedsText):
            raise ConfigurationError(f"embedder must be None, False, a model name or an Embedder, got {embedder!r}")
        if isinstance(sources, str | Path) or not all(isinstance(s, str | Path) for s in sources):
            raise ConfigurationError(f"sources must be a list of paths, got {sources!r}")
        if settings is not None and not isinstance(settings, SearchSettings):
            raise ConfigurationError(f"settings must be a SearchSettings, got {settings!r}")
        if not isinstance(require_scope, bool):
            raise ConfigurationError(f"require_scope must be true or false, got {require_scope!r}")
        if on_branch_error is not None and on_branch_error not in ("raise", "partial"):
            raise ConfigurationError(f"on_branch_error must be 'raise' or 'partial', got {on_branch_error!r}")
        if sections is not None and not _is_section_index(sections):
            raise ConfigurationError(f"sections must be a SectionIndex, got {sections!r}")
        self._fields = check_fields_declaration(fields)
        self._tenant_keys: set[str] = {"user_id", "agent_id"} | {
            name for name, kind in (self._fields or {}).items() if kind == TENANT_FIELD
        }
        settings = settings or SearchSettings()
        if on_branch_error is not None:
            if settings.on_branch_error not in (None, on_branch_error):
                raise ConfigurationError(f"on_branch_error={on_branch_error!r} and settings.on_branch_error="
                                         f"{settings.on_branch_error!r} disagree: set one")  # fmt: skip
            settings = replace(settings, on_branch_error=on_branch_error)
        self.settings = settings
        try:
            resolve_settings(None, self.settings)  # the embedder-aware weights are never both 0: same checks
        except InvalidParameterError as exc:
            raise ConfigurationError(f"knowledge base settings: {exc}") from exc
        self.sources: tuple[str, ...] = tuple(str(s) for s in sources)
        self.require_scope = require_scope
        self._store_spec = store
        self._lexical_spec = lexical_store
        self._embedder_spec = embedder
        self._embedder_name_guess: str | None = None
        self._chunker = chunker
        self._sections = sections
        self._store: Any = None
        self._lexical: Any = None
        self._embedder: Any = None
        self._rerankers: dict[str, Any] = {}
        self._stack: AsyncExitStack | None = None
        self._lock = anyio.Lock()

    # ----------------------------------------------------------------------------------- creation

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> KnowledgeBase:
        """A knowledge base from a mapping (a parsed ``[knowledge_base]`` TOML table, a JSON object).

        Keys: ``store``, ``lexical_store``, ``embedder`` (model name or folder), ``sources`` (list of paths),
        ``fields`` (``{name: type}``), ``require_scope``, and every search option of
        :data:`~fastrag.settings.OPTIONS` (``mode``, ``top_k``, ``candidate_k``, ``fusion``, ``rerank``, ...,
        ``on_branch_error``; the aliases ``search_mode`` and ``retrieval_k`` too). Relative paths are relative
        to the working directory.

        Raises:
            ConfigurationError: an unknown key (the message lists the known ones), a value of the wrong type,
                or anything :class:`KnowledgeBase` rejects.
        """
        if not isinstance(config, Mapping):
            raise ConfigurationError(f"knowledge base configuration must be a mapping, got {config!r}")
        setting_names = [*(o.name for o in OPTIONS), *ALIASES]
        known = [*_CONFIG_KEYS, *setting_names]
        unknown = sorted(set(config) - set(known))
        if unknown:
            raise ConfigurationError(f"unknown knowledge base setting(s) {unknown}; known: {known}")
        for key in ("store", "lexical_store", "embedder"):
            if key in config and not isinstance(config[key], str):
                raise ConfigurationError(f"{key} must be a string, got {config[key]!r}")
        sources = config.get("sources", ())
        if isinstance(sources, str) or not isinstance(sources, Sequence) or not all(isinstance(s, str) for s in sources):
            raise ConfigurationError(f"sources must be a list of paths (strings), got {sources!r}")
        try:
            settings = SearchSettings.from_mapping({k: v for k, v in config.items() if k in setting_names})
        except InvalidParameterError as exc:
            raise ConfigurationError(f"knowledge base settings: {exc}") from exc
        return cls(
            config.get("store", DEFAULT_STORE_URL),
            embedder=config.get("embedder"),
            lexical_store=config.get("lexical_store"),
            sources=list(sources),
            fields=config.get("fields"),
            settings=settings,
            require_scope=config.get("require_scope", False),
        )

    @classmethod
    def from_toml(cls, path: str | Path, *, table: str = "knowledge_base") -> KnowledgeBase:
        """A knowledge base from the ``[knowledge_base]`` table of a TOML file (see :meth:`from_config`).

        Raises:
            ConfigurationError: the file cannot be read or is not valid TOML, it has no such table, or the
                table is invalid.
        """
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"{path}: invalid TOML: {exc}") from exc
        except OSError as exc:
            raise ConfigurationError(f"{path}: cannot read: {exc}") from exc
        if not isinstance(data.get(table), dict):
            raise ConfigurationError(f"{path}: no [{table}] table")
        try:
            return cls.from_config(data[table])
        except ConfigurationError as exc:
            raise ConfigurationError(f"{path} [{table}]: {exc}") from exc

    # ---------------------------------------------------------------------------------- lifecycle

    async def open(self) -> KnowledgeBase:
        """Open the stores and the embedder this knowledge base creates (idempotent); return it.

        Raises:
            ConfigurationError: a URL is invalid, an extra is missing, the store was built with another
                embedding model, or the settings need BM25 that no store offers.
            BackendUnavailableError: a store cannot be opened.
        """
        async with self._lock:
            if self.closed:
                raise ConfigurationError("this knowledge base is closed")
            if self._stack is not None:
                return self
            from fastrag.config import open_embedder, open_store

            stack = AsyncExitStack()
            try:
                embedder = self._embedder_spec
                if embedder is False:  # keyword search only
                    embedder = None
                elif embedder is None or isinstance(embedder, str):
                    embedder = await stack.enter_async_context(open_embedder(embedder))
                name = embedder.name if embedder is not None else None
                store = self._store_spec
                if isinstance(store, str):
                    store = await stack.enter_async_context(open_store(store, embedding_model=name))
                elif embedder is not None:
                    recorded = getattr(store, "embedding_model", None)
                    if isinstance(recorded, str) and isinstance(name, str) and recorded != name:
                        raise ConfigurationError(
                            f"{store!r} holds vectors of embedding model {recorded!r}, not {name!r}; "
                            "pass the same embedder"
                        )
                lexical = self._lexical_spec
                if lexical is None:
                    lexical = store
                elif isinstance(lexical, str):
                    lexical = await stack.enter_async_context(open_store(lexical))
                mode = resolve_settings(None, self.settings).search_mode
                if mode != "vector" and not isinstance(lexical, SearchesText):
                    raise ConfigurationError(
                        f"search_mode {mode!r} needs BM25, which {lexical!r} does not have; configure a lexical_store"
                    )
            except BaseException:
                await stack.aclose()
                raise
            self._stack, self._store, self._lexical, self._embedder = stack, store, lexical, embedder
            return self

    _close_if_enter_fails = False  # a failed open() closes what it opened and may be tried again

    async def _aopen(self) -> None:
        await self.open()

    async def _aclose(self) -> None:
        """Close what this knowledge base created (stores, embedder, rerankers), once an open() in flight ends;
        an injected store or embedder stays open."""
        async with self._lock:
            stack, self._stack = self._stack, None
            if stack is not None:
                await stack.aclose()

    async def _opened(self) -> None:
        if self._stack is None:
            await self.open()

    @property
    def store(self) -> Any:
        """The vector store (``None`` before :meth:`open`)."""
        return self._store

    @property
    def lexical_store(self) -> Any:
        """The BM25 store: the separate one, or the vector store itself (``None`` before :meth:`open`)."""
        return self._lexical

    @property
    def embedder(self) -> Embedder | None:
        """The embedder (``None`` before :meth:`open`)."""
        return self._embedder

    @property
    def on_branch_error(self) -> str:
        """What a failed hybrid branch does by default: ``"raise"`` or ``"partial"`` (the settings' value)."""
        return self.settings.on_branch_error or "raise"

    @property
    def fields(self) -> Mapping[str, str] | None:
        """The declared fields with the built-in ones (``"tenant"``: a str or an int), or ``None``."""
        return None if self._fields is None else MappingProxyType(self._fields)

    @property
    def tenant_keys(self) -> frozenset[str]:
        """The metadata keys that hold tenants, as of now: ``user_id``, ``agent_id``, the fields declared
        ``"tenant"``, and every key this object has been given in a ``scope`` so far. Writes refuse
        documents carrying one their scope does not set; a tool bound to a scope hides them all."""
        return frozenset(self._tenant_keys)

    def _separate_lexical(self) -> bool:
        return self._lexical is not None and self._lexical is not self._store

    def _views(
        self, user_id: Any, agent_id: Any, scope: Any, *, filter: Any = None
    ) -> tuple[ScopedStore, ScopedStore | None]:
        """The call's views of the vector store and of the separate BM25 store (``None`` when there is
        none): :class:`~fastrag.scoping.ScopedStore` confined to the call's scope (none: unconfined, writes
        still checked for tenant keys), BM25 with the scope's own statistics where the store can."""
        tenant = scope_of(user_id, agent_id, scope)
        if self.require_scope and not tenant:
            raise InvalidParameterError("this knowledge base requires a scope: pass user_id=, agent_id= or scope=")
        if tenant and is_native_filter(filter):
            raise UnsupportedFilterError(
                "a native backend filter cannot be used with user_id=, agent_id= or scope= (the scope is a fastrag "
                "filter that must be AND-ed with yours, and only the backend understands a native one); "
                "express the filter as a fastrag filter"
            )
        self._tenant_keys.update(tenant)
        keys = frozenset(self._tenant_keys)
        vector = ScopedStore(self._store, tenant, tenant_keys=keys, check_document=check_stamped_keys)
        lexical = None
        if self._separate_lexical():
            lexical = ScopedStore(self._lexical, tenant, tenant_keys=keys, check_document=check_stamped_keys)
        return vector, lexical

    def _filter(self, filter: FilterLike | Any | None) -> Any:
        if filter is None:
            return None
        if isinstance(filter, bytes | bytearray):  # JSON text as bytes: parsed like a JSON string
            try:
                filter = bytes(filter).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise FilterError(f"a bytes filter must be UTF-8 JSON text: {exc}") from exc
        if is_native_filter(filter):
            if self._fields is not None:
                raise FilterError("a native backend filter cannot be checked against the declared fields; "
                                  "use a fastrag filter")
            return filter
        node = parse_filter(filter)
        if self._fields is not None and node is not None:
            check_filter_fields(node, self._fields)
        return node

    # ------------------------------------------------------------------------------------- writes

    async def add_documents(
        self,
        documents: Sequence[Document],
        *,
        user_id: str | int | None = None,
        agent_id: str | int | None = None,
        scope: Mapping[str, str | int] | None = None,
    ) -> int:
        """Embed ``documents`` and write them to the vector store and the BM25 store; return how many.

        The embedded text is ``title + "\\n" + content`` when ``metadata["title"]`` is set (as ingestion
        does), else ``content``. Writing an id again replaces that document (within the same scope).

        Raises:
            InvalidParameterError: ``documents`` is not a sequence of :class:`~fastrag.models.Document`; a
                declared field holds a value of the wrong type (the message names the document and field); a
                document's metadata holds ``score``, ``rank`` or ``branches`` (set by ranking stages, never
                data); a document's metadata holds a tenant key (``user_id``, ``agent_id``, a declared
                ``"tenant"`` field, or a key this knowledge base has seen in a scope) that the call's scope
                does not set to the same value; an id starts like a scoped id; a bad scope. Nothing of the
                batch is written then.
            EmbeddingError: the embedder failed; nothing was written.
            BackendError: a store failed. The stores may then differ; writing the same documents again
                brings them back in step (upserts replace by id).
        """
        if isinstance(documents, Document) or not isinstance(documents, Sequence):
            raise InvalidParameterError("documents must be a sequence of Document")
        docs = list(documents)
        for doc in docs:
            if not isinstance(doc, Document):
                raise InvalidParameterError(f"documents must be Document objects, got {doc!r}")
            check_id(doc.id)
            if self._fields is not None:
                check_document_fields(doc, self._fields)
        await self._opened()
        vector, lexical = self._views(user_id, agent_id, scope)
        vector.check_documents(docs)  # before anything is embedded
        if not docs:
            return 0
        texts = [f"{d.metadata[TITLE]}\n{d.content}" if d.metadata.get(TITLE) else d.content for d in docs]
        embeddings = await self._embedder.embed_documents(texts)
        if lexical is None:
            await vector.upsert(docs, embeddings=embeddings)
        else:
            async with anyio.create_task_group() as group:
                group.start_soon(partial(vector.upsert, docs, embeddings=embeddings))
                group.start_soon(partial(lexical.upsert, docs))
        return len(docs)

    async def add_sources(
        self,
        paths: Sequence[str | Path] | None = None,
        *,
        prune: bool = False,
        user_id: str | int | None = None,
        agent_id: str | int | None = None,
        scope: Mapping[str, str | int] | None = None,
    ) -> IngestionReport:
        """Index files and folders with :class:`~fastrag.ingestion.pipeline.IngestionPipeline` (incremental).

        Unchanged files are neither embedded nor written, so re-running over a persisted knowledge base
        costs a lookup per file. Every chunk goes to both stores, cut by the knowledge base's ``chunker``;
        with ``sections``, every parsed file also goes to that :class:`~fastrag.sections.SectionIndex`.
        A scope's files are tracked on their own: syncing the same folder for ``user_id="alice"`` and for
        ``user_id="bob"`` writes two copies, and each scope's pruning touches only its own chunks.

        Args:
            paths: files and folders; ``None``: the configured ``sources``.
            prune: also delete the chunks of files under ``paths`` that no longer exist (see
                :meth:`~fastrag.ingestion.pipeline.IngestionPipeline.run`).
            user_id: write the chunks into this tenant (see the class); likewise ``agent_id``, ``scope``.
            agent_id: see ``user_id``.
            scope: see ``user_id``.

        Returns:
            The pipeline's :class:`~fastrag.ingestion.pipeline.IngestionReport`.

        Raises:
            ConfigurationError: ``paths`` is ``None`` and no sources are configured, or ``prune`` on stores
                that cannot list their documents.
            InvalidParameterError: a bad scope.
            EmbeddingError, BackendError: as the pipeline raises them.
        """
        from fastrag.ingestion.pipeline import IngestionPipeline

        if paths is None:
            if not self.sources:
                raise ConfigurationError("no sources configured; pass paths or configure sources")
            paths = self.sources
        if isinstance(paths, str | Path):
            raise InvalidParameterError("paths must be a sequence of paths; wrap a single path in a list")
        await self._opened()
        vector, lexical = self._views(user_id, agent_id, scope)
        options: dict[str, Any] = {} if self._chunker is None else {"chunker": self._chunker}
        if self._sections is not None:
            options["sections"] = self._sections
        pipeline = IngestionPipeline(embedder=self._embedder, vector_store=vector, lexical_store=lexical,
                                     show_progress=False, **options)  # fmt: skip
        return await pipeline.run(list(paths), prune=prune)

    async def sync(
        self,
        *,
        user_id: str | int | None = None,
        agent_id: str | int | None = None,
        scope: Mapping[str, str | int] | None = None,
    ) -> IngestionReport:
        """Bring the knowledge base in line with its configured ``sources``: index new and changed files,
        skip unchanged ones (nothing is embedded for them), and delete the chunks of files that were
        removed from under the sources (:meth:`add_sources` with ``prune=True``).

        With a scope, the sources are indexed into that tenant (and only its chunks are pruned): see
        :meth:`add_sources`.

        Raises:
            ConfigurationError: no sources are configured, or the stores cannot list their documents.
            InvalidParameterError: a bad scope.
            EmbeddingError, BackendError: as the pipeline raises them.
        """
        return await self.add_sources(None, prune=True, user_id=user_id, agent_id=agent_id, scope=scope)

    async def delete(
        self,
        *,
        ids: Sequence[str] | None = None,
        filter: FilterLike | None = None,
        user_id: str | int | None = None,
        agent_id: str | int | None = None,
        scope: Mapping[str, str | int] | None = None,
    ) -> int:
        """Delete the scope's documents with these ``ids`` and/or matching ``filter``, from both stores.

        Returns:
            How many documents the vector store removed.

        Raises:
            InvalidParameterError: neither ``ids`` nor ``filter``; a bad scope.
            FilterError: the filter is malformed or does not fit the declared fields; UnsupportedFilterError
                (a subclass): a native backend filter together with a scope.
            BackendError: a store failed (deleting again brings the stores back in step).
        """
        if ids is None and filter is None:
            raise InvalidParameterError("delete needs ids or a filter; use clear() to delete everything")
        node = self._filter(filter)
        await self._opened()
        vector, lexical = self._views(user_id, agent_id, scope, filter=node)
        removed = await vector.delete(ids=ids, filter=node)
        if lexical is not None:
            await lexical.delete(ids=ids, filter=node)
        return removed

    async def clear(
        self,
        *,
        user_id: str | int | None = None,
        agent_id: str | int | None = None,
        scope: Mapping[str, str | int] | None = None,
    ) -> int:
        """Delete every document of the scope (with no scope, every document) from both stores.

        Returns:
            How many documents the vector store removed.

        Raises:
            InvalidParameterError: a bad scope, or no scope with ``require_scope``.
            ConfigurationError: no scope, and a store that has neither ``clear()`` nor ``get()``.
            BackendError: a store failed.
        """
        await self._opened()
        vector, lexical = self._views(user_id, agent_id, scope)
        removed = await _clear(vector)
        if lexical is not None:
            await _clear(lexical)
        return removed

    # -------------------------------------------------------------------------------------- reads

    async def count(
        self,
        *,
        filter: FilterLike | None = None,
        user_id: str | int | None = None,
        agent_id: str | int | None = None,
        scope: Mapping[str, str | int] | None = None,
    ) -> int:
        """How many of the scope's documents the vector store holds (matching ``filter`` when given).

        Raises:
            InvalidParameterError: a bad scope.
            FilterError: the filter is malformed or does not fit the declared fields; UnsupportedFilterError
                (a subclass): a native backend filter together with a scope.
            BackendError: the store failed.
        """
        node = self._filter(filter)
        await self._opened()
        vector, _ = self._views(user_id, agent_id, scope, filter=node)
        return await vector.count(filter=node)

    def resolve(self, **request: Any) -> ResolvedSearchSettings:
        """The settings a search with these keyword arguments would use: the request, then this knowledge
        base's ``settings``, then the system defaults, with fusion weights from the embedder's measured
        defaults when it is a shipped static model (see :func:`resolve_settings`). Works before
        :meth:`open` too (the embedder's name is then taken from ``embedder=``); nothing is retrieved.

        Example: ``kb.resolve(top_k=5).origin("keyword_weight")`` is ``"default:embedder"`` on a knowledge
        base with the shipped model and no weights set.

        Raises:
            UnknownParameterError: an argument is not a :class:`SearchSettings` field.
            InvalidParameterError: a value is invalid, or the resolved settings are inconsistent.
        """
        return resolve_settings(
            SearchSettings.from_mapping(request), self.settings, embedder_name=self._embedder_name()
        )

    def _embedder_name(self) -> str | None:
        """The embedder's ``name``: the open one's, else what ``embedder=`` will open (no model is loaded)."""
        if self._embedder is not None:
            name = getattr(self._embedder, "name", None)
            return name if isinstance(name, str) else None
        spec = self._embedder_spec
        if spec is False:  # no embedder: the one the store's vectors were made with names the defaults' row
            recorded = getattr(self._store if self._store is not None else self._store_spec, "embedding_model", None)
            return recorded if isinstance(recorded, str) else None
        if spec is not None and not isinstance(spec, str):
            name = getattr(spec, "name", None)
            return name if isinstance(name, str) else None
        if self._embedder_name_guess is None:
            from fastrag.config import open_embedder
            from fastrag.errors import FastragError

            try:  # builds the embedder object only (the model loads on first use): its name is the rule
                self._embedder_name_guess = open_embedder(spec).name
            except FastragError:
                return None  # the model2vec extra is missing: open() will say so
        return self._embedder_name_guess

    async def search(
        self,
        query: str,
        *,
        filter: FilterLike | None = None,
        user_id: str | int | None = None,
        agent_id: str | int | None = None,
        scope: Mapping[str, str | int] | None = None,
        offset: int = 0,
        **settings: Any,
    ) -> list[Document]:
        """The scope's best documents for ``query`` matching ``filter``, best first.

        Args:
            query: the question (non-blank, at most 8,192 characters).
            filter: a fastrag filter (AST, JSON mapping, JSON string or UTF-8 JSON bytes), checked against the
                declared fields; or a native backend filter (only without a scope and without ``fields``).
            user_id: confine the search to this tenant (see the class); likewise ``agent_id``, ``scope``.
            agent_id: see ``user_id``.
            scope: see ``user_id``.
            offset: skip this many results: ``offset=top_k`` is the second page (ranks ``top_k`` to
                ``2 * top_k - 1``); pages never repeat or skip a result (with a reranker: as long as they end
                within ``retrieval_k``; :mod:`fastrag.retrieval.pagination`). ``offset + top_k`` is at most
                10,000.
            **settings: request-level :class:`SearchSettings` fields (``search_mode="keyword"``,
                ``top_k=5``, ``group_by="source_uri"``, ...), which win over the knowledge base's and the
                defaults.

        Returns:
            At most ``top_k`` copies stamped with ``score`` (higher is better; range: see
            :attr:`SearchResponse.documents`) and zero-based ``rank`` (in the whole list, so the second page
            starts at ``top_k``); with ``group_by``, one per group (see
            :class:`~fastrag.retrieval.grouping.GroupingRetriever`).

        Raises:
            UnknownParameterError: a keyword argument is not a setting.
            InvalidParameterError: an invalid setting, query or scope.
            FilterError: the filter is malformed or does not fit the declared fields; UnsupportedFilterError
                (a subclass): a native backend filter together with a scope.
            ConfigurationError: the resolved settings need something missing (BM25 on a store without it,
                a reranker that cannot be built).
            BackendError, EmbeddingError, RerankerError: retrieval failed (use :meth:`search_result` to get
                failures as a status instead).
        """
        from fastrag.retrieval.pagination import check_offset, retrieve_page

        check_offset(offset, settings.get("top_k") or 1)
        with tracing.search() as trace:
            plan = await self._plan(query, filter, user_id, agent_id, scope, settings)
            if trace is not None:
                trace.annotate(self._traced(plan))
            found = await retrieve_page(plan.retriever, query, k=plan.settings.top_k, offset=offset, filter=plan.filter)
            found = plan.confined(found, offset=offset)
            if trace is not None:
                trace.hits(len(found))
            return found

    async def search_result(
        self,
        query: str,
        *,
        filter: FilterLike | None = None,
        user_id: str | int | None = None,
        agent_id: str | int | None = None,
        scope: Mapping[str, str | int] | None = None,
        offset: int = 0,
        **settings: Any,
    ) -> SearchResponse:
        """Like :meth:`search` (``offset`` included), but returns a :class:`SearchResponse`: the documents, the resolved settings
        with their origins, the strategy that ran, and the retrieval status (a failed store is reported in
        ``error`` with ``retrieval_failed`` true, not raised).

        Failures of retrieval itself (a store down, an embedder or reranker error) are reported in the
        response; the mistakes :meth:`search` raises before retrieving are raised here too.

        Raises:
            UnknownParameterError: a keyword argument is not a setting.
            InvalidParameterError: an invalid setting, query or scope.
            FilterError: the filter is malformed or does not fit the declared fields; UnsupportedFilterError
                (a subclass): a native backend filter together with a scope.
            ConfigurationError: the resolved settings need something missing.
        """
        from fastrag.retrieval.pagination import check_offset
        from fastrag.retrieval.result import retrieve_result

        check_offset(offset, settings.get("top_k") or 1)
        with tracing.search() as trace:
            plan = await self._plan(query, filter, user_id, agent_id, scope, settings)
            if trace is not None:
                trace.annotate(self._traced(plan))
            result: RetrievalResult = await retrieve_result(  # joins this search's span
                plan.retriever, query, k=plan.settings.top_k, filter=plan.filter, offset=offset
            )
            response = SearchResponse(
                documents=tuple(plan.confined(list(result.documents), offset=offset)),
                settings=plan.settings,
                strategy=plan.strategy,
                corpus_size=plan.corpus_size,
                error=result.error,
                failed_branches=result.failed_branches,
                partial=result.partial,
                timings=result.timings,
                zero_vector_branches=result.zero_vector_branches,
                incomplete=result.incomplete,
                skipped_branches=result.skipped_branches,
            )
            if trace is not None:
                trace.hits(len(response.documents))
            return response

    def _traced(self, plan: _Plan) -> dict[str, Any]:
        """The search span's attributes of a plan (fastrag.tracing)."""
        return {tracing.SEARCH_MODE: plan.settings.mode, tracing.SEARCH_STRATEGY: plan.strategy,
                tracing.RETRIEVAL_TOP_K: plan.settings.top_k, tracing.DB_SYSTEM_NAME: tracing.store_system(self._store)}  # fmt: skip

    def as_retriever(
        self,
        *,
        user_id: str | int | None = None,
        agent_id: str | int | None = None,
        scope: Mapping[str, str | int] | None = None,
        **settings: Any,
    ) -> KnowledgeBaseRetriever:
        """This knowledge base as a :class:`~fastrag.protocols.Retriever`: ``retrieve(query, k=, filter=)``
        is :meth:`search` with ``top_k=k``, these settings and this scope (for
        :class:`~fastrag.querying.QueryEngine`, the framework adapters, any code that takes a retriever).

        Raises:
            UnknownParameterError: a keyword argument is not a setting.
            InvalidParameterError: an invalid setting or scope.
        """
        SearchSettings.from_mapping(settings)  # refused now, not at the first question
        return KnowledgeBaseRetriever(self, scope_of(user_id, agent_id, scope), dict(settings))

    def as_tool(
        self,
        *,
        name: str = "search_knowledge_base",
        description: str | None = None,
        search_mode: str | None = None,
        top_k: int | None = None,
        max_top_k: int | None = None,
        user_id: str | int | None = None,
        agent_id: str | int | None = None,
        scope: Mapping[str, str | int] | None = None,
        group_by: str | None = None,
        min_score: float | None = None,
        min_relative_score: float | None = None,
        min_vector_score: float | None = None,
        min_keyword_score: float | None = None,
        **settings: Any,
    ) -> KnowledgeBaseTool:
        """A function-calling tool over :meth:`search` (see :class:`~fastrag.tool.KnowledgeBaseTool`).

        Args:
            name: the tool's name (``^[a-zA-Z0-9_-]{1,64}$``, as OpenAI and Anthropic require).
            description: what the model reads; ``None`` writes one (naming the declared fields).
            search_mode: the tool's mode; ``None`` inherits this knowledge base's at each call.
            top_k: results when the model gives no ``top_k``; ``None`` inherits.
            max_top_k: the largest ``top_k`` the model may ask for (the schema's maximum); ``None``: 50, or
                ``retrieval_k`` when these settings rerank with an explicit ``retrieval_k`` below that.
            user_id: bind every call to this tenant (the model cannot change it, nor filter on tenant keys);
                likewise ``agent_id``, ``scope``.
            agent_id: see ``user_id``.
            scope: see ``user_id``.
            group_by: one result per value of this metadata key (``"source_uri"``), each listing the
                group's other matching passages under ``"more"``; ``None`` inherits.
            min_score: every call's score threshold on the result list's own scale (see
                :class:`SearchSettings`; refused where the tool's searches fuse without reranking); likewise
                ``min_relative_score`` (hybrid), ``min_vector_score`` and ``min_keyword_score`` (a branch's
                own cut). ``None`` inherits. The model sees none of them.
            min_relative_score: see ``min_score``.
            min_vector_score: see ``min_score``.
            min_keyword_score: see ``min_score``.
            **settings: any other search option every call uses (``include_glob=["docs/**"]``,
                ``candidate_k=100``, ``language="de"``; :data:`~fastrag.settings.OPTIONS`); the model sees none.

        The schema offers ``offset`` too: the model reads the next page by skipping what it has read.

        Raises:
            InvalidParameterError: an invalid name, mode, ``top_k``/``max_top_k`` (``max_top_k`` above what
                reranking can serve), ``group_by``, scope, or score threshold (one the mode cannot apply
                included); no scope on a knowledge base with ``require_scope``.
        """
        return KnowledgeBaseTool.for_knowledge_base(
            self, name=name, description=description, search_mode=search_mode, top_k=top_k,
            max_top_k=max_top_k, scope=scope_of(user_id, agent_id, scope), group_by=group_by,
            min_score=min_score, min_relative_score=min_relative_score, min_vector_score=min_vector_score,
            min_keyword_score=min_keyword_score, **settings,
        )  # fmt: skip

    # ---------------------------------------------------------------------------------- planning

    async def _plan(
        self, query: Any, filter: Any, user_id: Any, agent_id: Any, scope: Any, request: Mapping[str, Any]
    ) -> _Plan:
        from fastrag.planning import plan_search
        from fastrag.retrieval._validation import check_query

        check_query(query)
        settings = self.resolve(**request)
        node = self._filter(filter)
        await self._opened()
        vector_view, lexical_view = self._views(user_id, agent_id, scope, filter=node)
        plan = await plan_search(settings, vector_store=vector_view, lexical_store=lexical_view,
                                 embedder=self._embedder, reranker_for=self._reranker, filter=node)  # fmt: skip
        return _Plan(retriever=plan.retriever, settings=plan.settings, strategy=plan.strategy,
                     corpus_size=plan.corpus_size, filter=node, scope_filter=vector_view.confine(None))  # fmt: skip

    async def _reranker(self, spec: Any) -> Reranker:
        if not isinstance(spec, str):
            return spec  # the caller's object: never closed here
        async with self._lock:
            if spec in self._rerankers:
                return self._rerankers[spec]
            try:
                if spec == "embedder":
                    from fastrag.rerankers.embedding import EmbedderReranker

                    reranker: Any = EmbedderReranker(self._embedder)
                elif spec == "cohere" or spec.startswith("cohere:"):
                    from fastrag.rerankers.cohere import CohereReranker

                    model = spec.partition(":")[2].strip()
                    reranker = CohereReranker(model) if model else CohereReranker()
                else:
                    from fastrag.rerankers.cross_encoder import CrossEncoderReranker

                    reranker = CrossEncoderReranker(spec)
            except InvalidParameterError as exc:
                raise ConfigurationError(f"rerank_model {spec!r}: {exc}") from exc
            if self._stack is not None and isinstance(reranker, AsyncCloseable):
                self._stack.push_async_callback(reranker.aclose)
            self._rerankers[spec] = reranker
            return reranker

    def __repr__(self) -> str:
        return (
            f"KnowledgeBase({self._store_spec!r}, lexical_store={self._lexical_spec!r}, "
            f"embedder={self._embedder_spec!r}, sources={list(self.sources)!r})"
        )


@dataclass(frozen=True, slots=True)
class _Plan:
    """What one search runs: the retriever, the settings as finally used, and what to report."""

    retriever: Any
    settings: ResolvedSearchSettings
    strategy: str
    corpus_size: int | None
    filter: Any
    scope_filter: Any

    def confined(self, found: list[Document], *, offset: int = 0) -> list[Document]:
        """Second line of defence: drop any document outside the scope (a stage that lost the filter)."""
        if self.scope_filter is None:
            return found
        kept = [doc for doc in found if matches(self.scope_filter, doc.metadata)]
        if len(kept) == len(found):
            return found
        logger.error("tenant isolation: %d document(s) outside the scope were removed", len(found) - len(kept))
        return [doc.ranked(score=doc.score, rank=offset + rank) for rank, doc in enumerate(kept)]


async def _clear(view: ScopedStore) -> int:
    if view.scope:
        return await view.delete(filter=view.confine(None))
    store = view.store
    if isinstance(store, SupportsClear):
        return await store.clear()
    if isinstance(store, SupportsGet):
        ids = [doc.id for doc in await store.get()]
        removed = 0
        for start in range(0, len(ids), 500):
            removed += await store.delete(ids=ids[start : start + 500])
        return removed
    raise ConfigurationError(f"{store!r} has neither clear() nor get(): delete by filter instead")


def _is_section_index(value: Any) -> bool:
    from fastrag.retrieval.sections import SectionIndex

    return isinstance(value, SectionIndex)

