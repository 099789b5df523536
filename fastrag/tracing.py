"""OpenTelemetry spans for every search, through ``opentelemetry-api`` alone (a no-op until an SDK is set up).

fastrag never configures OpenTelemetry: it asks the global tracer provider for a tracer named ``"fastrag"``
and emits spans into whatever the application installed. Without an SDK (``opentelemetry-api`` alone, a
core dependency) every span is a no-op that records nothing; the cost of that is measured in
``benchmarks/otel_overhead.py`` (``benchmarks/results/otel_overhead.md``).

::

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    trace.set_tracer_provider(provider)      # from now on every fastrag search is traced

The span tree of one hybrid search with reranking (``docs/observability.md`` shows it whole)::

    retrieval                          KnowledgeBase.search / search_result, retrieve_result
    ├─ first_stage                     RerankingRetriever's candidates
    │  ├─ branch vector                one per hybrid branch, concurrently
    │  │  ├─ embeddings <model>        the question's embedding
    │  │  └─ search_vector             the store call (db.* attributes)
    │  ├─ branch bm25
    │  │  └─ search_text
    │  └─ fusion
    └─ rerank

Names follow the OpenTelemetry semantic conventions where they name a thing (all of them marked
"Development" there, so they may still change): the search span is the GenAI retrieval span (name and
``gen_ai.operation.name`` ``"retrieval"``, kind ``INTERNAL``: a framework's retrieval pipeline, with
``gen_ai.retrieval.top_k`` and ``gen_ai.data_source.id``); the embedding span is a GenAI embeddings span
(``gen_ai.operation.name`` ``"embeddings"``, ``gen_ai.request.model``); store calls are database client spans
(kind ``CLIENT``, ``db.system.name``, ``db.operation.name``, ``db.response.returned_rows``); a failure sets the
span's status to ``ERROR`` and ``error.type`` (the exception's qualified class name) and records the exception.
What the conventions do not name is under ``fastrag.*`` (see :data:`SEARCH_MODE` and the other constants). The
question's text is never recorded (``gen_ai.retrieval.query.text`` is opt-in in the conventions; fastrag does
not opt in).

Tests and applications that must not touch the global provider can give fastrag its own:
:func:`use_tracer_provider`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextvars import ContextVar, Token
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider

from fastrag import __version__

__all__ = [
    "DATA_SOURCE_ID",
    "DB_OPERATION_NAME",
    "DB_RETURNED_ROWS",
    "DB_SYSTEM_NAME",
    "ERROR_TYPE",
    "OPERATION_NAME",
    "RETRIEVAL_TOP_K",
    "SEARCH_COMPLETE",
    "SEARCH_FAILED_BRANCHES",
    "SEARCH_HITS",
    "SEARCH_INCOMPLETE",
    "SEARCH_MODE",
    "SEARCH_PARTIAL",
    "SEARCH_SKIPPED_BRANCHES",
    "SEARCH_STRATEGY",
    "SearchTrace",
    "StoreCall",
    "TRACER_NAME",
    "search",
    "span",
    "store_call",
    "store_system",
    "data_source",
    "embedding",
    "error_type",
    "use_tracer_provider",
]

TRACER_NAME = "fastrag"
"""The instrumentation scope of fastrag's spans (the tracer's name; its version is fastrag's)."""

# OpenTelemetry semantic conventions (GenAI: semantic-conventions-genai, retrieval and embeddings spans;
# database client spans; error.type), each "Development" there but error.type and db.* (stable)
OPERATION_NAME = "gen_ai.operation.name"
RETRIEVAL_TOP_K = "gen_ai.retrieval.top_k"
DATA_SOURCE_ID = "gen_ai.data_source.id"
REQUEST_MODEL = "gen_ai.request.model"
DB_SYSTEM_NAME = "db.system.name"
DB_OPERATION_NAME = "db.operation.name"
DB_RETURNED_ROWS = "db.response.returned_rows"
ERROR_TYPE = "error.type"

# what the conventions do not name
SEARCH_MODE = "fastrag.search.mode"
"""The resolved ``mode`` (``hybrid``, ``keyword``, ``vector``, ``auto``)."""
SEARCH_STRATEGY = "fastrag.search.strategy"
"""What ran (``hybrid+rerank``, ``direct``, ...; for a bare retriever, its name)."""
SEARCH_HITS = "fastrag.search.hits"
"""Documents returned (the hit count)."""
SEARCH_PARTIAL = "fastrag.search.partial"
"""True when results may be missing (a branch failed and was left out, or a stage stopped early)."""
SEARCH_COMPLETE = "fastrag.search.complete"
"""The negation of ``partial`` for a search that did not fail."""
SEARCH_FAILED_BRANCHES = "fastrag.search.failed_branches"
"""The branches that failed, by name (``"vector"``; nested: ``"outer/inner"``)."""
SEARCH_SKIPPED_BRANCHES = "fastrag.search.skipped_branches"
"""The branches not run because they could not help (an embedder that does not cover the language)."""
SEARCH_INCOMPLETE = "fastrag.search.incomplete"
"""The stages that stopped before examining every candidate."""
BRANCH = "fastrag.branch"
"""On a branch span: the branch's name."""
CANCELLED = "fastrag.cancelled"
"""On a span whose work was cancelled (a sibling branch failed, a timeout): true."""

_RETRIEVAL = {OPERATION_NAME: "retrieval"}
_EMBEDDINGS = "embeddings"

_provider: TracerProvider | None = None
_tracer: Tracer = trace.get_tracer(TRACER_NAME, __version__)  # a proxy: follows the global provider once set


def use_tracer_provider(provider: TracerProvider | None) -> TracerProvider | None:
    """Emit fastrag's spans into ``provider`` instead of the global one (``None``: the global one again).

    Returns:
        The provider used before (``None`` for the global one).
    """
    global _provider, _tracer
    previous = _provider
    _provider = provider
    source = trace if provider is None else provider
    _tracer = source.get_tracer(TRACER_NAME, __version__)
    return previous


def error_type(error: BaseException) -> str:
    """``error.type`` for ``error``: its class's qualified name, with its module unless a builtin."""
    cls = type(error)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _failed(span: Span, error: BaseException) -> None:
    if isinstance(error, Exception):
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        span.set_attribute(ERROR_TYPE, error_type(error))
    else:  # cancellation: the work was not done, but nothing failed here
        span.set_attribute(CANCELLED, True)


class _Span:
    """A span made current for the ``with`` block; ``__enter__`` gives it only when it records.

    Without an SDK the tracer hands back a non-recording span (the invalid one, or the current one passed
    through): nothing is attached to the context then, so the block costs one ``start_span`` call."""

    __slots__ = ("_attributes", "_kind", "_name", "_span", "_token")

    def __init__(self, name: str, kind: SpanKind = SpanKind.INTERNAL, attributes: Mapping[str, Any] | None = None):
        self._name, self._kind, self._attributes = name, kind, attributes
        self._span: Span | None = None
        self._token: Token[Any] | None = None

    def __enter__(self) -> Span | None:
        span = _tracer.start_span(self._name, kind=self._kind, attributes=self._attributes)  # type: ignore[arg-type]
        if not span.is_recording():
            context = span.get_span_context()
            if not context.is_valid or context == trace.get_current_span().get_span_context():
                return None  # no SDK: a no-op span, nothing to end or propagate
            # sampled out by an SDK: made current so the children inherit the decision
        self._span = span
        self._token = otel_context.attach(trace.set_span_in_context(span))
        return span if span.is_recording() else None

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        span, self._span = self._span, None
        if span is None:
            return
        try:
            if exc is not None and span.is_recording():
                _failed(span, exc)
        finally:
            if self._token is not None:
                otel_context.detach(self._token)
            span.end()


def span(name: str, *, kind: SpanKind = SpanKind.INTERNAL, attributes: Mapping[str, Any] | None = None) -> _Span:
    """A child span around a ``with`` block (a stage of a search); ``as`` gives the span when it records,
    else ``None`` (no SDK, or sampled out), so dynamic attributes are computed only when they are kept.

    An exception leaving the block is recorded on the span (status ``ERROR``, ``error.type``); a cancellation
    sets ``fastrag.cancelled``. ``attributes`` should be constants (they are passed even when nothing records).
    """
    return _Span(name, kind, attributes)


# ------------------------------------------------------------------------------------------- store calls


_SYSTEMS = {"sqlite": "sqlite", "postgres": "postgresql", "milvus": "milvus", "qdrant": "qdrant",
            "chroma": "chromadb", "opensearch": "opensearch"}  # fmt: skip


def store_system(store: Any) -> str:
    """``db.system.name`` for a store: the semantic conventions' name of its backend (``sqlite``,
    ``postgresql``, ``milvus``, ``qdrant``, ``chromadb``, ``opensearch``) for fastrag's stores (a tenant or
    wrapper view is looked through), else the store's class name in lower case."""
    for _ in range(4):  # a knowledge base's scoped view, a wrapper: .store is the store behind it
        inner = getattr(store, "store", None)
        if inner is None or inner is store:
            break
        store = inner
    module = type(store).__module__.split(".")
    if module[:2] == ["fastrag", "vector_store"] and len(module) > 2 and module[2] in _SYSTEMS:
        return _SYSTEMS[module[2]]
    return type(store).__name__.lower()


class StoreCall:
    """A store call's span (``with store_call(...) as call: found = await ...; call.returned(found)``)."""

    __slots__ = ("_inner", "_operation", "_span", "_store")

    def __init__(self, operation: str, store: Any) -> None:
        self._operation, self._store = operation, store
        self._inner = _Span(operation, SpanKind.CLIENT)
        self._span: Span | None = None

    def __enter__(self) -> StoreCall:
        span = self._span = self._inner.__enter__()
        if span is not None:
            span.set_attributes({DB_SYSTEM_NAME: store_system(self._store), DB_OPERATION_NAME: self._operation})
        return self

    def returned(self, rows: Sequence[Any] | int) -> None:
        """Record how many rows (documents) the call returned."""
        if self._span is not None:
            self._span.set_attribute(DB_RETURNED_ROWS, rows if isinstance(rows, int) else len(rows))

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self._span = None
        self._inner.__exit__(exc_type, exc, tb)


def store_call(operation: str, store: Any) -> StoreCall:
    """A database client span (kind ``CLIENT``) named ``operation`` (``search_vector``, ``search_text``,
    ``hydrate``, ``count``) with ``db.system.name`` and ``db.operation.name``; ``returned()`` adds
    ``db.response.returned_rows``."""
    return StoreCall(operation, store)


def embedding(model: str | None) -> _Span:
    """The GenAI embeddings span of a question's embedding (``embeddings <model>``)."""
    attributes = {OPERATION_NAME: _EMBEDDINGS} if model is None else {OPERATION_NAME: _EMBEDDINGS, REQUEST_MODEL: model}
    return _Span(_EMBEDDINGS if model is None else f"{_EMBEDDINGS} {model}", attributes=attributes)


# ------------------------------------------------------------------------------------------------ search


class SearchTrace:
    """The span of one search, while it runs: what the stages report about it lands on it.

    Attributes:
        span: the recording span.
    """

    __slots__ = ("_keys", "errored", "failed", "incomplete", "partial", "skipped", "span")

    def __init__(self, span: Span) -> None:
        self.span = span
        self.failed: list[str] = []
        self.skipped: list[str] = []
        self.incomplete: list[str] = []
        self.partial = False
        self.errored = False
        self._keys: set[str] = set()

    def annotate(self, attributes: Mapping[str, Any], *, default: bool = False) -> None:
        """Set attributes on the search span (``None`` values are left out); ``default``: only those not set
        by an earlier call."""
        kept = {k: v for k, v in attributes.items() if v is not None and not (default and k in self._keys)}
        self._keys.update(kept)
        self.span.set_attributes(kept)

    def hits(self, count: int) -> None:
        """The number of documents the search returns."""
        self.span.set_attribute(SEARCH_HITS, count)

    def failed_with(self, error: BaseException) -> None:
        """The search failed (reported, not raised: ``search_result``, ``retrieve_result``)."""
        self.errored = True
        _failed(self.span, error)

    def _close(self, error: BaseException | None) -> None:
        if self.failed:
            self.span.set_attribute(SEARCH_FAILED_BRANCHES, self.failed)
        if self.skipped:
            self.span.set_attribute(SEARCH_SKIPPED_BRANCHES, self.skipped)
        if self.incomplete:
            self.span.set_attribute(SEARCH_INCOMPLETE, self.incomplete)
        partial = self.partial or bool(self.incomplete)
        self.span.set_attribute(SEARCH_PARTIAL, partial)
        self.span.set_attribute(SEARCH_COMPLETE, not (partial or self.errored or error is not None))


_search: ContextVar[SearchTrace | None] = ContextVar("fastrag_search_trace", default=None)
_data_source: ContextVar[str | None] = ContextVar("fastrag_data_source", default=None)


class _DataSource:
    __slots__ = ("_name", "_token")

    def __init__(self, name: str) -> None:
        self._name = name
        self._token: Token[str | None] | None = None

    def __enter__(self) -> None:
        self._token = _data_source.set(self._name)

    def __exit__(self, *exc_info: Any) -> None:
        if self._token is not None:
            _data_source.reset(self._token)


def data_source(name: str) -> _DataSource:
    """Within the block, search spans carry ``gen_ai.data_source.id`` = ``name``: an entrance that serves
    knowledge bases by name (``fastrag mcp``) names the one a search runs on."""
    return _DataSource(name)


class _Search:
    """The search span's ``with`` block: opens ``retrieval``, or joins the search span that is current
    (``retrieve_result`` called by ``KnowledgeBase.search_result``), so one search is one span."""

    __slots__ = ("_inner", "_owner", "_token", "_trace")

    def __init__(self) -> None:
        self._inner: _Span | None = None
        self._trace: SearchTrace | None = None
        self._token: Token[SearchTrace | None] | None = None
        self._owner = False

    def __enter__(self) -> SearchTrace | None:
        current = _search.get()
        if current is not None and current.span is trace.get_current_span():
            self._trace = current
            return current  # the caller's search: joined, not opened
        source = _data_source.get()
        self._inner = _Span("retrieval", attributes=_RETRIEVAL if source is None else {**_RETRIEVAL, DATA_SOURCE_ID: source})
        span = self._inner.__enter__()
        if span is None:
            return None
        self._trace = SearchTrace(span)
        self._token = _search.set(self._trace)
        self._owner = True
        return self._trace

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if not self._owner:
            return
        assert self._trace is not None and self._inner is not None and self._token is not None
        try:
            self._trace._close(exc)
        finally:
            _search.reset(self._token)
            self._inner.__exit__(exc_type, exc, tb)


def search() -> _Search:
    """The span of one search (``retrieval``); ``as`` gives its :class:`SearchTrace` when it records, else
    ``None``. Inside a search that is the current span, it joins that one instead of opening another."""
    return _Search()


def note_failed_branch(name: str, *, absorbed: bool) -> None:
    """A branch of the current search failed (``absorbed``: the search goes on without it)."""
    current = _search.get()
    if current is not None:
        if name not in current.failed:
            current.failed.append(name)
        current.partial = current.partial or absorbed


def note_skipped_branch(name: str) -> None:
    """A branch of the current search was not run."""
    current = _search.get()
    if current is not None and name not in current.skipped:
        current.skipped.append(name)


def note_incomplete(name: str) -> None:
    """A stage of the current search stopped before examining every candidate."""
    current = _search.get()
    if current is not None and name not in current.incomplete:
        current.incomplete.append(name)
