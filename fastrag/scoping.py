"""Tenant scopes: the one scoped view of a store, and the one stored-id encoding it writes.

A *scope* maps tenant keys to values (``{"user_id": "alice"}``, ``{"tenant_id": 42}``): :class:`Scope`.
:class:`ScopedStore` is a store seen through a scope, the one view every tenant-scoped entrance uses:
:class:`~fastrag.vector_store.tenant.TenantScopedStore` is it for one key (``tenant_id`` by default), and
:class:`~fastrag.knowledge_base.KnowledgeBase`'s ``user_id=`` / ``agent_id=`` / ``scope=`` (several keys)
build one per call. Through the view:

- **writes** are refused when a document carries a tenant key that the scope does not set to the same
  value (type included), or an id that starts like a scoped id; the others are stamped with the scope's
  keys and stored under a *scoped id* (below), so two scopes writing the same id never share a stored id;
- **reads, counts and deletes** AND the scope's filter (``equals`` per key) into their filter, and
  results show the ids as written. As a second line of defence a result whose metadata is outside the
  scope, or whose stored id was not written under it, is removed and logged at ERROR (the knowledge base
  shows no document that reached the store past its scoped writes;
  :class:`~fastrag.vector_store.tenant.TenantScopedStore` shows plain-id documents that carry the tenant,
  as it always did);
- **keyword search** (BM25) scores with the scope's own statistics (document count ``N``, document
  frequencies, mean length) when the store offers
  :class:`~fastrag.protocols.SupportsScopedStatistics` (SQLite, PostgreSQL): a tenant's scores are those of
  a store holding only its documents, whatever other tenants write. A store that computes BM25 from its
  whole collection (Milvus, Qdrant, OpenSearch, Chroma has no BM25) cannot: its statistics are
  collection-wide, a channel between tenants (``docs/reliability.md``, "BM25 statistics and tenants"),
  logged once per store class at WARNING; give each tenant its own collection or index to close it, or
  (Milvus) open the store with ``tenant_isolation="collection"``
  (:class:`~fastrag.protocols.SupportsTenantIsolation`): a non-empty scope's view then writes and searches
  the scope's own collection (:func:`tenant_collection`), whose statistics are the scope's.

**The stored-id encoding**, the same for every view::

    <segment>&<segment>...::<id>        segments sorted by key
    <key>=<percent-encoded str value>   a str value
    <key>#<decimal int value>           an int value

Keys and string values are percent-encoded (RFC 3986 unreserved characters stay as they are; ``&``,
``=``, ``#``, ``:``, ``%``, NUL and every non-ASCII character are encoded), so a segment never holds a
separator and the first ``::`` always ends the scope. The encoding is injective: tenant ``1`` (an int)
and tenant ``"1"`` (a str) get ``k#1`` and ``k=1``; tenant ``"a:"`` writing ``":b"`` is stored as
``k=a%3A:::b`` and tenant ``"a"`` writing ``"::b"`` as ``k=a::::b``, which differ.

**Ids already stored.** The knowledge base has written exactly this encoding since its first version
(its keys are identifiers, which percent-encoding leaves as they are), and
:class:`~fastrag.vector_store.tenant.TenantScopedStore` since the round-two release; both read what they
wrote before, unchanged. The one older encoding is ``TenantScopedStore``'s ``"<tenant>::<id>"``, which let
tenants collide: it is detected and refused with the fix named
(:meth:`~fastrag.vector_store.tenant.TenantScopedStore.migrate_legacy_ids`). A read shows a stored id less
the segments the read's own scope fixes: ``"x"`` to the scope that wrote it, ``"agent_id=a1::x"`` to the
wider ``user_id`` scope (which :meth:`ScopedStore.delete` and ``get`` accept back), so distinct documents
never show the same id.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
from urllib.parse import quote, unquote

from fastrag.errors import InvalidParameterError
from fastrag.filters import Comparison, Filter, FilterLike, combine_filters, matches
from fastrag.filters import field as filter_field
from fastrag.lifecycle import AsyncResource
from fastrag.models import RESERVED_KEYS, Document
from fastrag.protocols import (
    LexicalStore,
    SupportsGet,
    SupportsLanguages,
    SupportsQueryLanguage,
    SupportsScopedStatistics,
    SupportsTenantIsolation,
)

__all__ = [
    "DEFAULT_TENANT_KEY",
    "MAX_SCOPE_INT",
    "MIN_SCOPE_INT",
    "SCOPE_SEPARATOR",
    "STATISTICS",
    "Scope",
    "ScopedStore",
    "check_scope_key",
    "check_scope_value",
    "check_unscoped_id",
    "scope_prefix",
    "scoped_id",
    "scoped_statistics",
    "split_scoped_id",
    "statistics_scope",
    "TENANT_ISOLATION",
    "tenant_collection",
    "tenant_filter",
    "tenant_scope",
    "warn_collection_statistics",
]

logger = logging.getLogger("fastrag.scoping")

MIN_SCOPE_INT = -(2**63)
"""The smallest int scope value (signed 64-bit, what every store's integer metadata holds)."""
MAX_SCOPE_INT = 2**63 - 1
"""The largest int scope value (signed 64-bit)."""
SCOPE_SEPARATOR = "::"
"""Between a scoped id's scope and the id the tenant wrote."""
DEFAULT_TENANT_KEY = "tenant_id"
"""The metadata key that holds a document's tenant in :class:`~fastrag.vector_store.tenant.TenantScopedStore`
and :class:`~fastrag.retrieval.TenantScopedRetriever`, unless another is given."""
STATISTICS: tuple[str, ...] = ("scope", "store")
"""Where a scoped view's BM25 statistics come from: ``"scope"`` (default), the scope's own documents where
the store can count them (:class:`~fastrag.protocols.SupportsScopedStatistics`); ``"store"``, every
document of the store (the engine's collection-wide statistics)."""

TENANT_ISOLATION: tuple[str, ...] = ("shared", "collection")
"""A store's ``tenant_isolation``: ``"shared"`` (default), every scope in the store's one collection (the
engine's BM25 statistics are collection-wide: a channel between tenants); ``"collection"``, each scope in a
collection (index) of its own (:func:`tenant_collection`), so the engine's statistics are the scope's."""
TENANT_COLLECTION_MARK = "__t"
"""Between the base collection name and the hex-encoded scope in :func:`tenant_collection`."""

_ENCODED = r"[A-Za-z0-9_.~%-]+"  # what quote(..., safe="") produces: no separator can occur in it
_SEGMENT = rf"{_ENCODED}(?:={_ENCODED}|#-?[0-9]+)"
_SCOPED_ID = re.compile(rf"^({_SEGMENT}(?:&{_SEGMENT})*){SCOPE_SEPARATOR}(.*)$", re.DOTALL)


def check_scope_value(key: str, value: Any) -> None:
    """Check one scope value: a non-empty str of valid Unicode, or an int within signed 64 bits.

    Raises:
        InvalidParameterError: anything else (bools and floats included), naming ``key``.
    """
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidParameterError(
            f"scope value of {key!r} must be a non-empty str or an int, got {type(value).__name__} {value!r}"
        )
    if isinstance(value, int):
        if not MIN_SCOPE_INT <= value <= MAX_SCOPE_INT:
            raise InvalidParameterError(
                f"scope value of {key!r} must be an int within signed 64-bit [-2**63, 2**63 - 1]; "
                f"got one with {value.bit_length()} bits"
            )
        return
    if value == "":
        raise InvalidParameterError(f"scope value of {key!r} must be a non-empty str or an int, got ''")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidParameterError(f"scope value of {key!r} is not valid Unicode (a lone surrogate?)") from exc


def check_scope_key(key: Any) -> None:
    """Check one scope key: a non-empty str of valid Unicode that is not a reserved metadata key.

    Raises:
        InvalidParameterError: anything else (``score``, ``source_uri``... are reserved:
            :data:`~fastrag.models.RESERVED_KEYS`).
    """
    if not isinstance(key, str) or not key:
        raise InvalidParameterError(f"scope keys must be non-empty strings, got {key!r}")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidParameterError(f"scope key {key!r} is not valid Unicode (a lone surrogate?)") from exc
    if key in RESERVED_KEYS:
        raise InvalidParameterError(f"scope key {key!r} is a reserved metadata key")


def check_unscoped_id(doc_id: str) -> None:
    """Refuse a document id that starts like a scoped id (``"key=value::..."``): a scoped view writes such
    ids itself, and reads them back as a narrower scope's ids, so accepting one would blur two documents.

    Raises:
        InvalidParameterError: ``doc_id`` parses as a scoped id.
    """
    if isinstance(doc_id, str) and split_scoped_id(doc_id) is not None:
        raise InvalidParameterError(
            f"document id {doc_id!r} starts like a scoped id ('key=value::'); scoped views write such ids "
            "themselves: write the document under its own id with the scope as user_id=, agent_id= or scope= "
            "(a knowledge base) or through a TenantScopedStore"
        )


def _segment(key: str, value: str | int) -> str:
    name = quote(key, safe="")
    return f"{name}#{value}" if isinstance(value, int) else f"{name}={quote(value, safe='')}"


def scope_prefix(scope: Mapping[str, str | int]) -> str:
    """The scope part of a scoped id: its segments sorted by key, joined by ``&`` (values already checked)."""
    return "&".join(_segment(key, scope[key]) for key in sorted(scope))


def scoped_id(scope: Mapping[str, str | int], doc_id: str) -> str:
    """The stored id of ``doc_id`` written under ``scope`` (a non-empty scope of checked values)."""
    return f"{scope_prefix(scope)}{SCOPE_SEPARATOR}{doc_id}"


def split_scoped_id(stored_id: str) -> tuple[dict[str, str | int], str] | None:
    """``(scope, id)`` of a scoped id, or ``None`` when ``stored_id`` is not one (an unscoped write)."""
    match = _SCOPED_ID.match(stored_id)
    if match is None:
        return None
    scope: dict[str, str | int] = {}
    for segment in match.group(1).split("&"):
        if "=" in segment:
            key, _, text = segment.partition("=")
            scope[unquote(key)] = unquote(text)
        else:
            key, _, number = segment.partition("#")
            scope[unquote(key)] = int(number)
    return scope, match.group(2)


def check_tenant_isolation(value: Any) -> str:
    """``value`` when it is one of :data:`TENANT_ISOLATION`.

    Raises:
        InvalidParameterError: anything else.
    """
    if value not in TENANT_ISOLATION:
        raise InvalidParameterError(
            f"tenant_isolation must be one of {', '.join(map(repr, TENANT_ISOLATION))}, got {value!r}"
        )
    return value


def tenant_collection(base: str, scope: Mapping[str, str | int], *, max_length: int = 255) -> str:
    """The collection (index) name of ``scope``'s own collection beside ``base``:
    ``<base>__t<hex of the UTF-8 scope prefix>`` (:func:`scope_prefix`), lower-case hex so it is valid for
    Milvus (letters, digits, ``_``), Qdrant and OpenSearch (lower case) alike. Injective for a given
    ``base``: distinct scopes never share a collection (do not name another collection ``<base>__t...``).

    Raises:
        InvalidParameterError: ``scope`` is empty, or the name would exceed ``max_length`` characters.
    """
    if not scope:
        raise InvalidParameterError("a tenant collection needs a non-empty scope")
    name = f"{base}{TENANT_COLLECTION_MARK}{scope_prefix(scope).encode('utf-8').hex()}"
    if len(name) > max_length:
        raise InvalidParameterError(
            f"the collection of scope {dict(scope)!r} beside {base!r} would be {len(name)} characters, more than "
            f"the engine's {max_length}: use shorter tenant values or a shorter base collection name"
        )
    return name


def _same(a: Any, b: Any) -> bool:
    """Equal scope values: the same type and value (tenant ``1`` is not tenant ``"1"``, nor ``True``)."""
    return type(a) is type(b) and a == b


# ------------------------------------------------------------------------------------------------ scope


class Scope(Mapping[str, "str | int"]):
    """A checked, read-only scope: tenant keys to values, keys in sorted order.

    ``Scope({})`` is the empty scope (no confinement): its :attr:`filter` is ``None`` and it maps every id
    to itself. Equal when their keys and values are (``1`` and ``"1"`` differ).

    Args:
        values: ``{key: value}``: keys as :func:`check_scope_key` accepts them, values as
            :func:`check_scope_value` does (a non-empty str of valid Unicode, or an int within signed 64
            bits; never a bool or float).

    Raises:
        InvalidParameterError: ``values`` is not a mapping, or a key or value is invalid.
    """

    __slots__ = ("_filter", "_values")

    def __init__(self, values: Mapping[str, str | int] | None = None) -> None:
        if values is None:
            values = {}
        if not isinstance(values, Mapping):
            raise InvalidParameterError(f"a scope must be a mapping of metadata key to value, got {values!r}")
        for key, value in values.items():
            check_scope_key(key)
            check_scope_value(key, value)
        self._values: dict[str, str | int] = {key: values[key] for key in sorted(values)}
        self._filter: Filter | None = combine_filters(*[filter_field(k) == v for k, v in self._values.items()])

    def __getitem__(self, key: str) -> str | int:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping) or len(other) != len(self._values):
            return False
        return all(k in other and _same(other[k], v) for k, v in self._values.items())

    __hash__ = None  # type: ignore[assignment]  # a mapping

    def __repr__(self) -> str:
        return f"Scope({self._values!r})"

    @property
    def filter(self) -> Filter | None:
        """``equals(key, value)`` for each key, AND-ed (keys sorted); ``None`` for the empty scope."""
        return self._filter

    def confine(self, filter: FilterLike | Any | None) -> Any:  # noqa: A002
        """``filter`` AND the scope's filter (see :func:`~fastrag.filters.combine_filters`).

        Raises:
            FilterError: ``filter`` is malformed; UnsupportedFilterError (a subclass): ``filter`` is a
                native backend filter and the scope is not empty (only the backend could AND them).
        """
        return combine_filters(self._filter, filter)

    def admits(self, metadata: Mapping[str, Any]) -> bool:
        """Whether a document with this metadata lies inside the scope (always, for the empty scope)."""
        return self._filter is None or matches(self._filter, metadata)

    def kept(self, found: Sequence[Document], *, offset: int = 0, source: object = None) -> list[Document]:
        """Second line of defence for a ranked list: the documents of ``found`` inside the scope, in order.

        When some are removed (a stage that dropped the filter), the leak is logged at ERROR naming
        ``source``, and the kept documents are restamped with consecutive ranks from ``offset`` (scores
        unchanged); otherwise ``found`` comes back as it is.
        """
        kept = [doc for doc in found if self.admits(doc.metadata)]
        if len(kept) == len(found):
            return list(found)
        logger.error("tenant isolation: %r returned %d document(s) outside the scope %s; they were removed",
                     source, len(found) - len(kept), dict(self._values))  # fmt: skip
        return [doc.ranked(score=doc.score, rank=offset + rank) for rank, doc in enumerate(kept)]

    # ---------------------------------------------------------------------------------------- ids

    def stored_id(self, doc_id: str) -> str:
        """The stored id that the id ``doc_id``, as this scope shows it, stands for.

        A plain id is stored under the scope (``"x"`` -> ``"user_id=alice::x"``); an id this scope showed
        for a narrower scope's document (``"agent_id=a1::x"``) gets the scope's segments added back
        (``"agent_id=a1&user_id=alice::x"``); one naming another value of a key of this scope is kept as it
        is (it matches nothing under the scope's filter). The empty scope keeps every id.

        Raises:
            InvalidParameterError: ``doc_id`` is not a non-empty string.
        """
        if not isinstance(doc_id, str) or not doc_id:
            raise InvalidParameterError(f"ids must be non-empty strings, got {doc_id!r}")
        if not self._values:
            return doc_id
        split = split_scoped_id(doc_id)
        if split is not None:
            extra, rest = split
            if any(k in self._values and not _same(self._values[k], v) for k, v in extra.items()):
                return doc_id
            return scoped_id({**extra, **self._values}, rest)
        return scoped_id(self._values, doc_id)

    def shown_id(self, stored_id: str) -> str | None:
        """The id this scope shows for ``stored_id``, or ``None`` when no write of this scope (or of a
        narrower one) stored it. The empty scope shows every id as it is."""
        if not self._values:
            return stored_id
        split = split_scoped_id(stored_id)
        if split is None:
            return None
        written, rest = split
        if not all(k in written and _same(written[k], v) for k, v in self._values.items()):
            return None
        extra = {k: v for k, v in written.items() if k not in self._values}
        return scoped_id(extra, rest) if extra else rest


def tenant_scope(tenant: str | int, tenant_key: str = DEFAULT_TENANT_KEY) -> Scope:
    """The one-key scope ``{tenant_key: tenant}``, after checking both.

    Raises:
        InvalidParameterError: ``tenant`` is not a non-empty str of valid Unicode or an int within signed
            64 bits (bools rejected), or ``tenant_key`` is not a non-empty str of valid Unicode or is a
            reserved metadata key (``score``, ``source_uri``...).
    """
    if isinstance(tenant, bool) or not isinstance(tenant, str | int) or tenant == "":
        raise InvalidParameterError(f"tenant must be a non-empty str or an int, got {tenant!r}")
    check_scope_value("tenant", tenant)
    if not isinstance(tenant_key, str) or not tenant_key:
        raise InvalidParameterError(f"tenant_key must be a non-empty str, got {tenant_key!r}")
    try:
        check_scope_key(tenant_key)
    except InvalidParameterError as exc:
        raise InvalidParameterError(f"tenant_key {tenant_key!r}: {exc}") from exc
    return Scope({tenant_key: tenant})


def tenant_filter(tenant: str | int, tenant_key: str = DEFAULT_TENANT_KEY) -> Comparison:
    """The filter ``equals(tenant_key, tenant)``, after checking both (:func:`tenant_scope`).

    Raises:
        InvalidParameterError: as :func:`tenant_scope`.
    """
    node = tenant_scope(tenant, tenant_key).filter
    assert isinstance(node, Comparison)
    return node


# ------------------------------------------------------------------------------- BM25 statistics

_STATISTICS_SCOPE: ContextVar[Filter | None] = ContextVar("fastrag_statistics_scope", default=None)
_WARNED: set[str] = set()
_WARNED_LOCK = threading.Lock()


@contextmanager
def scoped_statistics(scope_filter: Filter | None) -> Iterator[None]:
    """Within the block (and the tasks it starts), BM25 retrievers score with the statistics of the
    documents matching ``scope_filter`` where their store can (:func:`statistics_scope`).
    :class:`~fastrag.retrieval.TenantScopedRetriever` wraps the retriever it scopes in it."""
    token = _STATISTICS_SCOPE.set(scope_filter)
    try:
        yield
    finally:
        _STATISTICS_SCOPE.reset(token)


def statistics_scope() -> Filter | None:
    """The filter whose documents BM25 statistics are counted over in this context, or ``None`` (the
    whole store): read by :class:`~fastrag.retrieval.BM25Retriever`."""
    return _STATISTICS_SCOPE.get()


def warn_collection_statistics(store: object) -> None:
    """Log once per store class, at WARNING, that a scoped keyword search over ``store`` scores with
    collection-wide statistics (the store has no :class:`~fastrag.protocols.SupportsScopedStatistics`)."""
    name = type(store).__name__
    with _WARNED_LOCK:
        if name in _WARNED:
            return
        _WARNED.add(name)
    logger.warning(
        "%s computes BM25 statistics (document count, document frequencies, mean length) over every document "
        "it holds, so a tenant-scoped keyword search scores with other tenants' documents counted in: scores "
        "shift as other tenants write, and a tenant can infer how many of their documents hold a word. Give "
        "each tenant its own collection or index to isolate them (docs/reliability.md, 'BM25 statistics and "
        "tenants')",
        name,
    )


def check_statistics(statistics: Any) -> str:
    """``statistics`` when it is one of :data:`STATISTICS`.

    Raises:
        InvalidParameterError: anything else.
    """
    if statistics not in STATISTICS:
        raise InvalidParameterError(f"statistics must be one of {', '.join(map(repr, STATISTICS))}, got {statistics!r}")
    return statistics


# ---------------------------------------------------------------------------------- the scoped view

_VARIANTS: dict[tuple[type, bool, bool, bool], type] = {}


class ScopedStore(AsyncResource):
    """``store`` seen through ``scope``: the one scoped view (see the module docstring).

    It has the methods of :class:`~fastrag.protocols.VectorStore` (``upsert``, ``search_vector``,
    ``delete``, ``count``), and ``search_text`` (:class:`~fastrag.protocols.LexicalStore`) and ``get``
    (:class:`~fastrag.protocols.SupportsGet`) exactly when ``store`` has them, so protocol checks answer
    for the store; ``dimension`` and ``embedding_model`` are the store's (absent when it has none). It has
    nothing else of the store (no ``clear``), never defers rows to a hybrid
    (:mod:`fastrag.deferred`: the store's rows are named otherwise), and closing it leaves the store open.

    Args:
        store: the shared store.
        scope: the scope (a :class:`Scope` or a mapping it accepts); empty or ``None``: no confinement
            (writes are still checked for tenant keys).
        tenant_keys: metadata keys holding tenants besides the scope's own: a document carrying one that
            the scope does not set is refused.
        show_unscoped: also show documents inside the scope (by metadata) whose stored id is a plain id,
            under that id (what :class:`~fastrag.vector_store.tenant.TenantScopedStore` does); by default
            they are removed as not written under the scope.
        check_document: a further check of every document written (raises to refuse it).
        statistics: ``"scope"`` (default): BM25 with the scope's own statistics where the store offers
            :class:`~fastrag.protocols.SupportsScopedStatistics`; ``"store"``: the store's collection-wide
            ones (:data:`STATISTICS`).

    Raises:
        InvalidParameterError: a bad ``scope`` or ``statistics``.
    """

    def __new__(cls, store: Any, *args: Any, **kwargs: Any) -> ScopedStore:  # noqa: ARG003
        text = isinstance(store, LexicalStore)
        return object.__new__(_variant(cls, text, isinstance(store, SupportsGet), text and isinstance(store, SupportsLanguages)))

    def __init__(
        self,
        store: Any,
        scope: Mapping[str, str | int] | None = None,
        *,
        tenant_keys: Iterable[str] = (),
        show_unscoped: bool = False,
        check_document: Callable[[Document], None] | None = None,
        statistics: str = "scope",
    ) -> None:
        self.store = store
        self.scope: Scope = scope if isinstance(scope, Scope) else Scope(scope)
        self.tenant_keys: frozenset[str] = frozenset(tenant_keys) | frozenset(self.scope)
        self.show_unscoped = bool(show_unscoped)
        self.statistics = check_statistics(statistics)
        self._check_document = check_document

    # ---------------------------------------------------------------------------------------- ids

    def stored_id(self, doc_id: str) -> str:
        """The stored id of the id ``doc_id`` as this view shows it (:meth:`Scope.stored_id`)."""
        return self.scope.stored_id(doc_id)

    def _stored_ids(self, ids: Sequence[str] | None) -> list[str] | None:
        if ids is None:
            return None
        if isinstance(ids, str):
            raise InvalidParameterError("ids must be a sequence of strings, not one string")
        stored: list[str] = []
        for doc_id in ids:
            stored.append(self.scope.stored_id(doc_id))
            if self.scope and split_scoped_id(doc_id) is not None:
                # also the id a TenantScopedStore stored before ids like "k=v::x" were refused on write: it
                # shows as "k=v::x" too, so get and delete find it under the id they show
                literal = scoped_id(self.scope, doc_id)
                if literal != stored[-1]:
                    stored.append(literal)
        return stored

    def confine(self, filter: FilterLike | Any | None) -> Any:  # noqa: A002
        """``filter`` AND the scope's filter (:meth:`Scope.confine`)."""
        return self.scope.confine(filter)

    def shown(self, found: Sequence[Document], *, ranked: bool = False) -> list[Document]:
        """The documents of ``found`` this view shows, under the ids it shows (second line of defence:
        see the class). With ``ranked``, a list some were removed from is restamped with consecutive ranks."""
        if not self.scope:
            return list(found)
        kept: list[Document] = []
        for doc in found:
            shown = self.scope.shown_id(doc.id)
            if shown is None and self.show_unscoped and split_scoped_id(doc.id) is None:
                shown = doc.id
            if shown is None or not self.scope.admits(doc.metadata):
                continue
            kept.append(doc if shown == doc.id else Document(id=shown, content=doc.content, metadata=doc.metadata))
        if len(kept) == len(found):
            return kept
        logger.error("tenant isolation: %d document(s) of %r not written under the scope %s were removed",
                     len(found) - len(kept), self.store, dict(self.scope))  # fmt: skip
        return [doc.ranked(score=doc.score, rank=r) for r, doc in enumerate(kept)] if ranked else kept

    def check_documents(self, documents: Sequence[Document]) -> None:
        """Refuse documents this view must not write (see the class); nothing is written.

        Raises:
            InvalidParameterError: an id starts like a scoped id (:func:`check_unscoped_id`); a document
                carries a tenant key (``tenant_keys`` or the scope's) that the scope does not set to the
                same value and type; or ``check_document`` refused it.
        """
        for doc in documents:
            check_unscoped_id(doc.id)
            if self._check_document is not None:
                self._check_document(doc)
            for key in sorted(self.tenant_keys):
                if key not in doc.metadata:
                    continue
                current = doc.metadata[key]
                if key not in self.scope:
                    raise InvalidParameterError(
                        f"document {doc.id!r} has tenant key {key}={current!r} in its metadata, which this call's "
                        f"scope does not set: pass the tenant as {key}= or scope={{{key!r}: ...}} instead of in "
                        "the metadata (tenant keys are stamped by the scope, never taken from a document)"
                    )
                value = self.scope[key]
                if not _same(current, value):
                    raise InvalidParameterError(
                        f"document {doc.id!r} has {key}={current!r}; this call writes {key}={value!r}"
                    )

    @property
    def isolated(self) -> bool:
        """Whether this view reads and writes its scope's own collection: a non-empty scope over a store
        with ``tenant_isolation="collection"`` (:class:`~fastrag.protocols.SupportsTenantIsolation`)."""
        return (bool(self.scope) and isinstance(self.store, SupportsTenantIsolation)
                and self.store.tenant_isolation == "collection")  # fmt: skip

    async def _target(self) -> Any:
        """The store this view's calls go to: the scope's own collection when :attr:`isolated`, else the
        shared store. Documents are stamped and ids scoped either way (a second line of defence)."""
        if self.isolated:
            return await self.store.tenant_store(self.scope)
        return self.store

    async def _ready(self) -> None:
        """Awaited by every call before it reaches the store, after its arguments are checked (a hook:
        :class:`~fastrag.vector_store.tenant.TenantScopedStore` refuses older stored ids there)."""

    # ------------------------------------------------------------------------------------- writes

    async def upsert(self, documents: Sequence[Document], *, embeddings: Any = None) -> None:
        """Write copies of ``documents`` stamped with the scope, under scoped ids (replacing by id within
        the scope).

        Raises:
            InvalidParameterError: see :meth:`check_documents`; nothing is written.
            Exception: whatever the store's ``upsert`` raises.
        """
        docs = list(documents)
        self.check_documents(docs)
        if self.scope:
            docs = [Document(id=scoped_id(self.scope, d.id), content=d.content, metadata={**d.metadata, **self.scope})
                    for d in docs]  # fmt: skip
        await self._ready()
        await (await self._target()).upsert(docs, embeddings=embeddings)

    async def delete(self, *, ids: Sequence[str] | None = None, filter: FilterLike | Any | None = None) -> int:  # noqa: A002
        """Delete the scope's documents with these ``ids`` (as the view shows them) and/or matching
        ``filter``; return how many the store removed.

        Raises:
            InvalidParameterError: neither ``ids`` nor ``filter``, or an id is not a non-empty string.
            FilterError: a malformed filter; UnsupportedFilterError: a native filter with a non-empty scope.
        """
        if ids is None and filter is None:
            raise InvalidParameterError("delete needs ids or a filter")
        stored = self._stored_ids(ids)
        confined = self.confine(filter)
        await self._ready()
        return await (await self._target()).delete(ids=stored, filter=confined)

    # -------------------------------------------------------------------------------------- reads

    async def count(self, *, filter: FilterLike | Any | None = None) -> int:  # noqa: A002
        """How many of the scope's documents the store holds (matching ``filter`` when given).

        Raises:
            FilterError: a malformed filter; UnsupportedFilterError: a native filter with a non-empty scope.
        """
        confined = self.confine(filter)
        await self._ready()
        return await (await self._target()).count(filter=confined)

    async def search_vector(self, embedding: Any, *, k: int, filter: FilterLike | Any | None = None) -> list[Document]:  # noqa: A002
        """The store's k-NN among the scope's documents (matching ``filter``), best first, under the ids
        the view shows; scores as the store's (cosine in [-1, 1], higher is better).

        Raises:
            FilterError: a malformed filter; UnsupportedFilterError: a native filter with a non-empty scope;
                otherwise whatever the store's ``search_vector`` raises.
        """
        confined = self.confine(filter)
        await self._ready()
        return self.shown(await (await self._target()).search_vector(embedding, k=k, filter=confined), ranked=True)

    @property
    def dimension(self) -> Any:
        """The store's ``dimension`` (``AttributeError`` when it has none)."""
        return self.store.dimension

    @property
    def embedding_model(self) -> Any:
        """The store's ``embedding_model`` (``AttributeError`` when it has none)."""
        return self.store.embedding_model

    # lifecycle (AsyncResource): nothing to release, the shared store stays open for the other scopes, and a
    # closed view still answers (it refuses nothing)

    def __repr__(self) -> str:
        return f"ScopedStore({self.store!r}, scope={dict(self.scope)!r})"


class _SearchText(ScopedStore):
    """``search_text`` of a view whose store has it."""

    @property
    def accepts_language(self) -> bool:
        """Whether the store's ``search_text`` takes ``language=`` (:class:`~fastrag.protocols.SupportsQueryLanguage`)."""
        return isinstance(self.store, SupportsQueryLanguage) and self.store.accepts_language is True

    async def search_text(self, query: str, *, k: int, filter: FilterLike | Any | None = None, **options: Any) -> list[Document]:  # noqa: A002
        """The store's BM25 among the scope's documents (matching ``filter``), best first, under the ids
        the view shows; ``options`` (``language=``) go to the store.

        With ``statistics="scope"`` (the default) and a store offering
        :class:`~fastrag.protocols.SupportsScopedStatistics`, the scores are those of a store holding only
        the scope's documents (BM25 unbounded, > 0, higher is better); otherwise the store's statistics
        over every document it holds (logged once per store class, see the module docstring).

        Raises:
            FilterError: a malformed filter; UnsupportedFilterError: a native filter with a non-empty scope;
                otherwise whatever the store's search raises.
        """
        confined = self.confine(filter)
        await self._ready()
        if self.isolated:  # the scope's own collection: the engine's statistics are the scope's
            return self.shown(await (await self._target()).search_text(query, k=k, filter=confined, **options), ranked=True)
        if self.scope and self.statistics == "scope":
            if isinstance(self.store, SupportsScopedStatistics):
                found = await self.store.search_text_scoped(query, k=k, scope=self.scope.filter, filter=filter, **options)
                return self.shown(found, ranked=True)
            warn_collection_statistics(self.store)
        return self.shown(await self.store.search_text(query, k=k, filter=confined, **options), ranked=True)


class _Languages(ScopedStore):
    """The analysis languages of a view whose store records them (:class:`~fastrag.protocols.SupportsLanguages`),
    for a question's ``language="auto"``: the store's, as BM25 analyses every question in them."""

    @property
    def analyzer(self) -> Any:
        """The store's own analyzer."""
        return self.store.analyzer

    async def languages(self) -> Any:
        """The languages the store's documents were analysed in (see the store)."""
        return await self.store.languages()


class _Get(ScopedStore):
    """``get`` of a view whose store has it."""

    async def get(
        self, *, ids: Sequence[str] | None = None, filter: FilterLike | Any | None = None, limit: int | None = None  # noqa: A002
    ) -> list[Document]:
        """The scope's documents with these ``ids`` (as the view shows them) and/or matching ``filter``, in
        the store's order (id order), under the ids the view shows.

        Raises:
            InvalidParameterError: an id is not a non-empty string, or ``ids`` is one string.
            FilterError: a malformed filter; UnsupportedFilterError: a native filter with a non-empty scope.
        """
        stored = self._stored_ids(ids)
        confined = self.confine(filter)
        await self._ready()
        return self.shown(await (await self._target()).get(ids=stored, filter=confined, limit=limit))


def _variant(cls: type, text: bool, get: bool, languages: bool = False) -> type:
    """``cls``, or the subclass of it that also has ``search_text``, ``get`` and/or the analysis languages
    (made once per combination, named as ``cls``), so a view has exactly the optional capabilities of its
    store."""
    if not (text or get or languages):
        return cls
    key = (cls, text, get, languages)
    found = _VARIANTS.get(key)
    if found is None:
        bases = (*((_Languages,) if languages else ()), *((_SearchText,) if text else ()), *((_Get,) if get else ()), cls)
        made = type(cls.__name__, bases, {"__module__": cls.__module__, "__qualname__": cls.__qualname__,
                                          "__doc__": cls.__doc__})  # fmt: skip
        found = _VARIANTS.setdefault(key, made)
    return found
